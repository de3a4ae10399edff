//===- fuzz_join.cpp - the TCP rendezvous's join handshake ----------------===//
//
// Each input is what a stranger sends to a rank's listener: rank 0 runs the
// responder's half of the key handshake (runtime/comm/auth.h) on one end of
// a socket pair whose other end has the input written and then shut. It
// must fail cleanly (the input cannot know the fresh nonce, so no proof
// holds), within the deadline, whatever the bytes: a short hello, a wrong
// magic or version, a proof cut off, garbage.
//
//===----------------------------------------------------------------------===//
#include "comm/auth.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0; // a join is 44 + 12 + 32 bytes; more only fills the socket
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    return 0;
  if (size && write(sv[1], data, size) < 0) {
  }
  shutdown(sv[1], SHUT_WR);
  std::vector<uint8_t> key(32, 0x5a);
  int32_t world = 2;
  struct Card {
    int32_t rank;
    uint32_t ip;
    uint16_t port, pad;
  } card{};
  std::string why;
  bool ok = loomrt::auth::handshake(sv[0], key, /*initiator=*/false, &world, sizeof world, &card,
                                    sizeof card,
                                    std::chrono::steady_clock::now() + std::chrono::seconds(2),
                                    why);
  close(sv[0]);
  close(sv[1]);
  if (ok || why.empty()) {
    std::fprintf(stderr, "a join without the key was accepted (or refused without a reason)\n");
    std::abort();
  }
  return 0;
}
