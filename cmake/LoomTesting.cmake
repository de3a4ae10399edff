# GoogleTest for unit tests: Debian's googletest ships the sources under
# /usr/src/googletest; libgtest-dev ships prebuilt archives. Prefer the
# package config when present, else build from the shipped sources.
include(CTest)
function(loom_find_gtest)
  if(TARGET GTest::gtest_main)
    return()
  endif()
  find_package(GTest QUIET)
  if(GTest_FOUND)
    return()
  endif()
  # Debian's googletest package ships the sources; hosts without it (the GPU
  # machines) can point LOOM_GTEST_SOURCE_DIR at a copy of them.
  set(LOOM_GTEST_SOURCE_DIR /usr/src/googletest CACHE PATH "GoogleTest sources")
  if(NOT EXISTS ${LOOM_GTEST_SOURCE_DIR}/CMakeLists.txt)
    message(FATAL_ERROR "GoogleTest not found: install Debian's googletest "
                        "(scripts/setup.sh does) or set LOOM_GTEST_SOURCE_DIR")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory(${LOOM_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  add_library(GTest::gtest_main ALIAS gtest_main)
endfunction()
