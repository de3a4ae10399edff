# Finds Debian's LLVM/MLIR 22 and sets up TableGen and the MLIR CMake helpers.
# Every Loom compiler library links the single libMLIR.so (and libLLVM.so)
# instead of ~100 static archives: link time and disk use stay small on the
# 2-core CI machine.
set(LOOM_LLVM_ROOT "/usr/lib/llvm-22" CACHE PATH "Root of the LLVM/MLIR 22 installation")
if(NOT MLIR_DIR)
  set(MLIR_DIR "${LOOM_LLVM_ROOT}/lib/cmake/mlir")
endif()
find_package(MLIR REQUIRED CONFIG)
message(STATUS "Using MLIRConfig.cmake in: ${MLIR_DIR}")
message(STATUS "Using LLVMConfig.cmake in: ${LLVM_DIR}")

# Debian's LLVMConfig points lit at an llvm-lit that it does not ship.
set(LLVM_EXTERNAL_LIT "${LOOM_LLVM_ROOT}/bin/lit" CACHE FILEPATH "lit" FORCE)
set(LLVM_LIT_ARGS "-sv" CACHE STRING "lit arguments")

list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
set(LLVM_RUNTIME_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/bin)
set(LLVM_LIBRARY_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/lib)
set(MLIR_BINARY_DIR ${CMAKE_BINARY_DIR})
include(TableGen)
include(AddLLVM)
include(AddMLIR)
include(HandleLLVMOptions)

include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
include_directories(${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
                    ${PROJECT_SOURCE_DIR}/include)
link_directories(${LLVM_BUILD_LIBRARY_DIR})
separate_arguments(LOOM_LLVM_DEFINITIONS NATIVE_COMMAND ${LLVM_DEFINITIONS})
add_definitions(${LOOM_LLVM_DEFINITIONS})

# loom_compiler_library(name SRCS... [DEPENDS tgtargets] [LINK libs])
# A static library of the compiler, linked against the shared libMLIR.so.
function(loom_compiler_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPENDS;LINK" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  if(ARG_DEPENDS)
    add_dependencies(${name} ${ARG_DEPENDS})
  endif()
  target_link_libraries(${name} PUBLIC ${ARG_LINK} MLIR LLVM)
  target_compile_options(${name} PRIVATE -fno-exceptions)
endfunction()
if(NOT TARGET mlir-doc)
  add_custom_target(mlir-doc)
endif()
