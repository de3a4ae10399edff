# GoogleTest for unit tests: Debian's googletest ships the sources under
# /usr/src/googletest; libgtest-dev ships prebuilt archives. Prefer the
# package config when present, else build from the shipped sources.
include(CTest)
function(loom_find_gtest)
  if(TARGET GTest::gtest_main)
    return()
  endif()
  find_package(GTest QUIET)
  if(NOT GTest_FOUND AND EXISTS /usr/src/googletest/CMakeLists.txt)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(/usr/src/googletest ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
endfunction()
