/* SPDX-License-Identifier: MIT */
/*
 * A plain C interface to LLFree for bench/peer.  LLFree's header needs clang (gcc 12
 * rejects its `enum : uint8_t`), so bench/peer_llfree.c is the only file that includes
 * it, built with clang into the build folder; never part of libgfa.
 */
#ifndef GFA_BENCH_PEER_LLFREE_H
#define GFA_BENCH_PEER_LLFREE_H
#include <stdint.h>

struct peer_llfree;

/* An LLFree instance over `frames` frames with `cores` per-core reservations (its
 * simple two-class setup: small and huge); *meta_bytes gets the bytes of its metadata.
 * NULL on failure. */
struct peer_llfree *peer_llfree_create(uint64_t frames, unsigned int cores, uint64_t *meta_bytes);
void peer_llfree_destroy(struct peer_llfree *a);
/* A block of 2^order frames near core's reservation: its first frame, or -1. */
int64_t peer_llfree_get(struct peer_llfree *a, unsigned int core, unsigned int order);
/* Free it again: 0, or -1 when LLFree refuses. */
int peer_llfree_put(struct peer_llfree *a, unsigned int core, uint64_t frame, unsigned int order);
/* Fully free 2 MiB blocks, and free frames (LLFree's exact scan). */
uint64_t peer_llfree_free_huge(struct peer_llfree *a);
uint64_t peer_llfree_free_frames(struct peer_llfree *a);
#endif
