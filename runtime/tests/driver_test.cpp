// The training driver refuses a program whose layout differs from the
// runtime's (a binary generated against an older train.h, still linking the
// rebuilt libloomrt.so) with a one-line error, before reading any other field.
#include "loomrt/train.h"

#include <gtest/gtest.h>

TEST(Driver, RefusesAProgramOfAnotherLayout) {
  loomrt_program p{};
  p.abi = LOOMRT_TRAIN_ABI + 1;
  p.model = "test";
  char arg0[] = "train", arg1[] = "--help";
  char *argv[] = {arg0, arg1, nullptr};
  testing::internal::CaptureStderr();
  int rc = loomrt_train_main(2, argv, &p);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("generated for another version of the runtime"), std::string::npos) << err;
}
