/* SPDX-License-Identifier: MIT */
/*
 * The io_uring release engine, private to its files (the API: include/gfa/vmm.h; the
 * machinery: the comment at the top of vmm/release_engine.c):
 *
 *   release_engine.c  the engine thread and its passes, create and destroy
 *   release_punch.c   a pass's punches: planning, attempts, completions, fault injection
 *   release_ring.c    ring mode: setup, submitting, reaping, giving the ring up
 *   release_queue.c   submitting ranges, plugs, flushing
 *   release_stats.c   the mode and the counters
 */
#ifndef GFA_VMM_RELEASE_INTERNAL_H
#define GFA_VMM_RELEASE_INTERNAL_H
#include <liburing.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <gfa/vmm.h>

#define PUNCH_MODE (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)
#define WHY_LEN    192

enum punch_method { METHOD_FALLOCATE, METHOD_MADVISE };

struct rel_range {
	struct rel_range *next;
	uint64_t off, len, seq;
	gfa_release_done_fn done;
	void *cookie;
	uint32_t pieces; /* planned punches not yet finished */
	bool planned;    /* every byte is covered by a planned punch */
	int err;         /* first failure among its punches */
};

struct punch {
	uint64_t off, len;
	uint32_t first, last; /* ranges[first..last] overlap this punch */
	uint8_t method;
	uint8_t failures;
	int inject_err; /* injected completion error (positive errno) */
};

struct fault_state {
	struct gfa_release_fault f;
	uint64_t seen;
};

struct gfa_release_engine {
	int fd;
	char *map_base;
	uint64_t page_size;
	uint64_t max_punch;
	uint32_t ring_entries;
	uint32_t batch;
	uint64_t file_size; /* atomic: size last seen by fstat */

	/* Queue and flush state, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t work_cond; /* engine waits for work */
	pthread_cond_t done_cond; /* flushers wait for completed_seq */
	struct rel_range *head, **tailp;
	uint64_t last_seq;      /* last sequence number handed out */
	uint64_t completed_seq; /* every range with seq <= this is done */
	uint32_t plugs, flushers;
	bool stopping;
	pthread_t thread;

	/* Engine thread only. */
	struct io_uring ring;
	bool ring_ok, ring_fallocate, ring_madvise, degraded;
	enum punch_method method;
	struct fault_state f_submit, f_complete, f_sync;
	uint32_t submit_streak;
	struct rel_range **ranges; /* this pass, sorted; batch entries */
	uint32_t nranges;
	uint32_t cur_i; /* cursor: range holding cur_pos */
	uint64_t cur_pos;
	struct punch *slots; /* ring_entries slots */
	uint32_t *free_slots, nfree;
	uint32_t *retry, nretry;              /* slots waiting for a ring retry */
	uint32_t *sq_fifo, sq_head, sq_count; /* prepared, not consumed */
	uint32_t kernel_inflight;             /* consumed by the kernel, not reaped */

	int mode;                    /* atomic enum gfa_release_mode_kind */
	char why_ring[WHY_LEN];      /* fixed after create */
	char why_sync[WHY_LEN];      /* written once, before mode turns SYNC */
	struct gfa_release_stats st; /* fields accessed atomically */
};

/* The engine the current thread runs, to refuse flush/destroy from callbacks. */
extern __thread struct gfa_release_engine *engine_self;

#define STAT_ADD(e, f, v) __atomic_fetch_add(&(e)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_SUB(e, f, v) __atomic_fetch_sub(&(e)->st.f, (v), __ATOMIC_RELAXED)
#define STAT_GET(e, f)    __atomic_load_n(&(e)->st.f, __ATOMIC_RELAXED)

/* ---- punches (release_punch.c) ---- */
int fault_hit(struct fault_state *fs);
int range_cmp(const void *a, const void *b);
struct punch *plan_next(struct gfa_release_engine *e);
int punch_sync(struct gfa_release_engine *e, struct punch *p);
void punch_result(struct gfa_release_engine *e, struct punch *p, int res, bool was_sync);

/* ---- ring mode (release_ring.c) ---- */
int ring_setup(struct gfa_release_engine *e, const struct gfa_release_config *cfg);
void pass_ring(struct gfa_release_engine *e);

#endif
