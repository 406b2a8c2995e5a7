/* SPDX-License-Identifier: MIT */
/*
 * What the kernel's compiler.h and kernel.h give every file: branch hints and the
 * element count of an array.  For every layer, the tools, benchmarks and tests; not
 * installed (header-only, for the reason common/strbuf.h gives).
 */
#ifndef GFA_COMMON_COMPILER_H
#define GFA_COMMON_COMPILER_H

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Elements of an array (not of a pointer: sizeof would give the pointer's size). */
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif /* GFA_COMMON_COMPILER_H */
