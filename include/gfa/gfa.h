/* SPDX-License-Identifier: MIT */
/* gfa, the guest frame allocator: every layer's public header. */
#ifndef GFA_GFA_H
#define GFA_GFA_H
#include <gfa/allocator.h>
#include <gfa/numa.h>
#include <gfa/vmm.h>
#endif
