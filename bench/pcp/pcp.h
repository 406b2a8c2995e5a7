/* SPDX-License-Identifier: MIT */
/*
 * bench/pcp's parts (bench/pcp.c runs them): a. pairs.c, b. bulkfree.c, c. prodcons.c,
 * each a struct bench_part; and the helpers they share (bench/pcp.c).
 */
#ifndef GFA_BENCH_PCP_H
#define GFA_BENCH_PCP_H
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gfa/allocator.h>
#include "bench/bench_util.h"

#define POOL_FRAMES (1UL << 18) /* 1 GiB: batch 63, high_min 1024 */
#define MAX_REPS    1000
#define SINK(p)     __asm__ volatile("" : : "r"(p) : "memory")

/* pools and caches as every part makes them; the invariants checked after a run */
void check_pool(struct gfa_pool *pool, const char *when);
struct gfa_pool *make_pool(uint64_t frames, bool no_high_order, unsigned int old_thr);
struct gfa_pcp *make_pcp(struct gfa_pool *pool);
/* waiting between and within the threads' steps */
void sleep_sec(double s);
void backoff(unsigned int *spins);
double thread_cpu_sec(void);
/* A pool's vmstat counter: VM(pool, pcp_free_high). */
uint64_t vm_get(struct gfa_pool *pool, size_t off);
#define VM(pool, field) vm_get(pool, offsetof(struct gfa_vmstat, field))

extern const struct bench_part pcp_pairs_part, pcp_bulkfree_part, pcp_prodcons_part;
#endif
