/* SPDX-License-Identifier: MIT */
/*
 * gfa, the guest frame allocator: every layer of libgfa (allocator, numa, vmm) and the
 * library's version.  The reference VMM (gfa/refvmm.h, libgfa-refvmm) is not included:
 * it is gfa's own test and tool harness, not part of the library.
 */
#ifndef GFA_GFA_H
#define GFA_GFA_H
#include <gfa/allocator.h>
#include <gfa/numa.h>
#include <gfa/vmm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of the headers a caller is built against: the one definition of gfa's
 * version (the Makefile, gfa.pc and the man pages read it from here). */
#define GFA_VERSION_MAJOR 0
#define GFA_VERSION_MINOR 6
#define GFA_VERSION_PATCH 0

/* (blank lines apart: aligned with the names above, the last would pass 100 columns) */
#define GFA_VERSION_NUMBER(maj, min, pat) (((maj) << 16) | ((min) << 8) | (pat))

#define GFA_VERSION GFA_VERSION_NUMBER(GFA_VERSION_MAJOR, GFA_VERSION_MINOR, GFA_VERSION_PATCH)

/**
 * gfa_version() - the version of the library linked at run time
 *
 * Compare it with GFA_VERSION to tell headers and library apart.
 *
 * Return: the version, as GFA_VERSION encodes it; never fails.
 * Context: any thread.
 */
unsigned int gfa_version(void);

#ifdef __cplusplus
}
#endif
#endif
