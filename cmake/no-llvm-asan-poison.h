/* Included first in sanitized builds (LOOM_SANITIZE): LLVM's headers poison
 * memory their allocators recycle (Allocator.h, Recycler.h) when compiled
 * under ASan, but Debian's libLLVM/libMLIR are not, so memory poisoned by
 * inlined header code in Loom's objects is handed out again by the
 * uninstrumented library without being unpoisoned: false use-after-poison
 * reports. Poisoning is turned off; the ASan runtime still checks every
 * access of Loom's own code. */
#ifndef LOOM_NO_LLVM_ASAN_POISON_H
#define LOOM_NO_LLVM_ASAN_POISON_H
#ifdef __cplusplus
#include <sanitizer/asan_interface.h>
#undef ASAN_POISON_MEMORY_REGION
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void)(addr), (void)(size))
#define __asan_poison_memory_region(addr, size) ((void)(addr), (void)(size))
#endif
#endif
