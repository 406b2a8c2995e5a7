/* SPDX-License-Identifier: MIT */
/*
 * bench/moves's part 6 (bench/moves/host.c) and the setup helpers of bench/moves.c it
 * shares.
 */
#ifndef GFA_BENCH_MOVES_H
#define GFA_BENCH_MOVES_H
#include <stdbool.h>
#include <stdint.h>
#include <gfa/refvmm.h>
#include "bench/bench_util.h"

#define MiB         (1ULL << 20)
#define RANGE_BYTES (2 * MiB)

struct gfa_guest *guest_create(struct gfa_pool *pool, struct gfa_backing *b,
			       const struct gfa_guest_config *gc, bool no_uffd);
struct gfa_pool *pool_create(uint64_t bytes);
void check_pool(struct gfa_pool *pool, const char *when);

/* Part 6: the zone memfd's growth over a balloon round trip and a collapse, in MiB. */
void bench_host(const struct bench_opts *o, double *gfa_mib, double *madv_mib);
#endif
