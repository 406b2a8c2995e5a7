/* SPDX-License-Identifier: MIT */
/*
 * gfa release engine: gives free frame ranges of a zone memfd back to the host,
 * asynchronously, off the vCPU path.
 *
 * The allocator's host-release policy decides WHICH ranges to release; this engine
 * does the releasing.  One engine serves one memfd (one zone) and owns one thread
 * and one io_uring.  Callers queue byte ranges with gfa_release_submit(), which
 * never waits for the host.  The engine thread takes what is queued, sorts it,
 * merges exactly adjacent ranges into one punch (never across a gap, never larger
 * than the configured cap), issues IORING_OP_FALLOCATE(FALLOC_FL_PUNCH_HOLE |
 * FALLOC_FL_KEEP_SIZE) -- or IORING_OP_MADVISE(MADV_REMOVE) on the mapping where
 * fallocate is unsupported -- reaps the completions and only then reports each
 * ORIGINAL range through its done callback.
 *
 * Nothing is lost: a failed operation is retried once, then done synchronously
 * (fallocate(2)/madvise(2)); only if that fails too is the range reported as
 * failed, and the caller puts its frames back as still populated.  A range is never
 * reported before every punch touching it has completed, so frames reported done
 * can be handed out without a late punch zeroing them (in-flight exclusivity).
 *
 * If an io_uring cannot be set up (kernel.io_uring_disabled, ENOMEM, missing
 * opcodes, injected failure) the engine runs in synchronous mode on its own thread
 * (callers still never wait) and prints one warning line to stderr.
 */
#ifndef GFA_RELEASE_H
#define GFA_RELEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults used when the corresponding config field is 0. */
#define GFA_RELEASE_DEFAULT_MAX_PUNCH	(128ULL << 20)	/* gVisor's cap */
#define GFA_RELEASE_DEFAULT_RING	64u
#define GFA_RELEASE_DEFAULT_BATCH	4096u
/* Upper bounds accepted in the config (IORING_OP_MADVISE takes a 32-bit length). */
#define GFA_RELEASE_MAX_PUNCH_LIMIT	(2ULL << 30)
#define GFA_RELEASE_MAX_RING		4096u

struct gfa_release_engine;

/*
 * Called once per submitted range, on the engine thread, after the host has
 * released it (result == 0) or after every attempt failed (result < 0, a negative
 * errno: the range is NOT released as far as the caller must assume; treat its
 * frames as still populated -- their contents are unspecified but they need no
 * host fault to be reused).  offset/len are exactly what was submitted.
 *
 * Thread rules: runs on the engine thread and delays every other release of this
 * engine while it runs, so keep it short.  It may take the caller's locks (e.g. a
 * zone lock) and may call gfa_release_submit() (which never blocks) and
 * gfa_release_stats(); gfa_release_flush() and gfa_release_destroy() called from
 * here return -EDEADLK and do nothing.  Do not flush another engine from here
 * either.  Consequently: a lock the callback takes may be held around
 * gfa_release_submit(), but never around gfa_release_flush()/destroy().
 */
typedef void (*gfa_release_done_fn)(void *cookie, uint64_t offset, uint64_t len,
				    int result);

/*
 * Fault injection (shipped, for tests): operations of one kind are numbered from 1
 * over the engine's life; numbers nth .. nth+count-1 fail with -err (err is a
 * positive errno value, e.g. EIO).  nth == 0 disables; count == 0 means 1.
 * An injected failure never touches the memfd, so the data stays intact.
 */
struct gfa_release_fault {
	uint64_t nth;
	uint32_t count;
	int err;
};

struct gfa_release_config {
	uint64_t max_punch_bytes;	/* cap per punch; 0 = 128 MiB; page multiple,
					 * <= GFA_RELEASE_MAX_PUNCH_LIMIT */
	uint32_t ring_entries;		/* SQ size; 0 = 64; <= GFA_RELEASE_MAX_RING */
	uint32_t batch;			/* max ranges taken per engine pass; 0 = 4096 */
	bool force_sync;		/* no io_uring: synchronous mode, no warning */

	/* Fault injection; all zero in production. */
	int fault_setup_err;			/* ring setup fails with -err */
	struct gfa_release_fault fault_submit;	/* Nth io_uring_submit() call fails */
	struct gfa_release_fault fault_complete;/* Nth ring op completes with -err */
	struct gfa_release_fault fault_sync;	/* Nth synchronous syscall fails */
};

enum gfa_release_mode_kind {
	GFA_RELEASE_MODE_IO_URING = 0,
	GFA_RELEASE_MODE_SYNC = 1,
};

struct gfa_release_stats {
	uint64_t ranges_submitted;	/* accepted by gfa_release_submit() */
	uint64_t ranges_rejected;	/* refused by gfa_release_submit() */
	uint64_t ranges_done;		/* done callbacks made */
	uint64_t ranges_failed;		/* ... of which with result < 0 */
	uint64_t ranges_coalesced;	/* ranges merged into a neighbour's span */
	uint64_t bytes_submitted;
	uint64_t bytes_released;	/* bytes whose punch succeeded */
	uint64_t punches;		/* punch operations planned (first attempts) */
	uint64_t ring_ops;		/* operations submitted to the io_uring */
	uint64_t sync_ops;		/* synchronous fallocate/madvise calls */
	uint64_t madvise_ops;		/* ... of ring_ops + sync_ops using MADV_REMOVE */
	uint64_t ops_failed;		/* attempts that failed (ring or sync) */
	uint64_t retries;		/* second attempts after a failure */
	uint64_t sync_fallbacks;	/* punches finished synchronously after the ring
					 * failed them or went away */
	uint64_t submit_errors;		/* io_uring_submit() failures */
	uint64_t passes;		/* engine passes (queue grabs) */
	uint64_t inflight_ranges;	/* submitted, done not yet called */
	uint64_t inflight_bytes;
	enum gfa_release_mode_kind mode;
};

/*
 * Create an engine for @memfd (a shmem/hugetlbfs memfd or any file supporting
 * FALLOC_FL_PUNCH_HOLE).  @map_base, if not NULL, is a MAP_SHARED, PROT_WRITE
 * mapping of the whole file (MADV_REMOVE needs both) used where fallocate is
 * unsupported; it must stay mapped until gfa_release_destroy() returns.  @cfg may
 * be NULL (all defaults).  The engine does not take ownership of @memfd; keep it
 * open until destroy.  Ranges are checked against the base page size only: for a
 * hugetlbfs memfd submit huge-page-aligned ranges.
 *
 * Returns the engine, or NULL with errno set:
 *   EBADF   memfd is not an open file descriptor
 *   EINVAL  memfd is not a regular file; max_punch_bytes not a page multiple or
 *           above GFA_RELEASE_MAX_PUNCH_LIMIT; ring_entries above
 *           GFA_RELEASE_MAX_RING; a fault with nth != 0 and err <= 0;
 *           fault_setup_err < 0
 *   ENOMEM  out of memory
 *   EAGAIN  (or another pthread_create error) the thread could not be started
 * Ring setup failure is NOT an error: the engine runs in synchronous mode.
 * Thread rules: any thread.
 */
struct gfa_release_engine *gfa_release_create(int memfd, void *map_base,
					      const struct gfa_release_config *cfg);

/*
 * Queue [offset, offset + len) of the memfd for release; @done(@cookie, ...) is
 * called exactly once when it has been handled (see gfa_release_done_fn).
 * Never waits for the host: O(1) work under a short lock, plus a rare fstat when
 * the range lies beyond the size last seen (the file may have grown).
 *
 * Returns 0, or (nothing queued, done never called):
 *   -EINVAL     engine or done is NULL, len == 0, offset or len not a multiple
 *               of the page size
 *   -ERANGE     offset + len overflows or exceeds the memfd's size (the largest
 *               size seen: a file shrunk under the engine is not noticed, and a
 *               punch past its end changes nothing)
 *   -ESHUTDOWN  gfa_release_destroy() has started
 *   -ENOMEM     no memory for the queue entry
 *   -errno      of fstat() on the memfd (e.g. -EBADF)
 * Thread rules: any thread, concurrently; also from a done callback.
 */
int gfa_release_submit(struct gfa_release_engine *engine, uint64_t offset,
		       uint64_t len, gfa_release_done_fn done, void *cookie);

/*
 * Plug / unplug: while at least one plug is held, the engine leaves queued ranges
 * alone, so a burst of submits (a balloon inflation) is coalesced as a whole
 * (like blk_start_plug()).  Plugs nest; gfa_release_flush() and destroy override
 * them.  Unplug without a plug returns -EINVAL.  Returns 0 or -EINVAL (NULL engine).
 * Thread rules: any thread.
 */
int gfa_release_plug(struct gfa_release_engine *engine);
int gfa_release_unplug(struct gfa_release_engine *engine);

/*
 * Wait until every range submitted before this call has had its done callback
 * return (ranges held by a plug included).  @timeout_ms < 0 waits forever.
 * Returns 0, or -EINVAL (NULL engine), -ETIMEDOUT, -EDEADLK (called on the engine
 * thread, i.e. from a done callback).
 * Thread rules: any thread except the engine thread.
 */
int gfa_release_flush(struct gfa_release_engine *engine, int timeout_ms);

/*
 * Refuse new submits, finish everything queued (every done callback is made),
 * join the thread, tear down the ring and free the engine.  NULL is a no-op (0).
 * Returns 0, or -EDEADLK if called on the engine thread (nothing is done).
 * Thread rules: once, from any thread but the engine thread, after which no other
 * thread may use the engine.
 */
int gfa_release_destroy(struct gfa_release_engine *engine);

/*
 * "io_uring" or "sync".  If @why is not NULL it receives a stable, human-readable
 * reason (which opcode is used, or why the ring is not).  The mode may change once,
 * from io_uring to sync, if the ring fails at run time.  NULL engine => NULL.
 * Thread rules: any thread; the returned strings live as long as the engine.
 */
const char *gfa_release_mode(const struct gfa_release_engine *engine,
			     const char **why);

/*
 * Snapshot the counters into @out (each counter is read atomically; the set is
 * not a single consistent cut while the engine runs).  Returns 0 or -EINVAL.
 * Thread rules: any thread.
 */
int gfa_release_stats(const struct gfa_release_engine *engine,
		      struct gfa_release_stats *out);

/*
 * Host-backed bytes of @fd: st_blocks * 512 from fstat(2).  For benchmarks and
 * tests.  Returns the byte count or a negative errno (-EBADF, ...).
 * Thread rules: any thread.
 */
int64_t gfa_memfd_allocated_bytes(int fd);

#ifdef __cplusplus
}
#endif

#endif /* GFA_RELEASE_H */
