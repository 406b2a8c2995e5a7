/* SPDX-License-Identifier: MIT */
/*
 * gfa vmm layer: host backing of a pool (one memfd per zone), the io_uring release
 * engine and the host-return thread that give free memory back to the host, guests
 * whose RAM is made of pool frames, and the balloon calls a VMM's virtio-balloon device
 * makes.  It needs no KVM, libvirt or libxml2: the VMM brings its own KVM code and maps
 * the guest window (gfa_guest_hva) into its memslots.
 *
 * Errors are negative errno values as in gfa/allocator.h; functions returning pointers
 * return NULL with errno set.
 */
#ifndef GFA_VMM_H
#define GFA_VMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <gfa/allocator.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- host backing ---- */

struct gfa_backing;

struct gfa_backing_config {
	bool hugetlb;           /* MFD_HUGETLB memfds (2 MiB pages; the host must have them
				 * reserved); such pools should only hand out order-9 blocks */
	bool populate;          /* fault every frame in now, so guests start on resident
				 * memory (MADV_POPULATE_WRITE, else a touch loop) */
	bool no_thp_advice;     /* skip MADV_HUGEPAGE on the pool mapping */
};

/*
 * Back every zone of pool with a memfd of its own ("gfa-zone<N>"), sized to the zone,
 * mapped once MAP_SHARED at a 2 MiB aligned address with MADV_HUGEPAGE, and hand the
 * mappings to the pool (gfa_zone_set_backing).  Returns NULL with errno: EFAULT,
 * EBUSY (the pool already has backing or a moved hook: gfa_pool_set_moved_fn), or the
 * memfd/ftruncate/mmap error.
 * Thread rules: create/destroy while no guest uses the pool and no migrate op can run
 * (no compaction or collapse; gfa_compactd_stop first): a move's hook marks frames
 * dirty in the backing.
 */
struct gfa_backing *gfa_backing_create(struct gfa_pool *pool, const struct gfa_backing_config *cfg);
void gfa_backing_destroy(struct gfa_backing *b);
/* Fault every zone in now (after binding zones to nodes).  0 or GFA_EFAULT. */
int gfa_backing_populate(struct gfa_backing *b);
/* memfd of zone z, or GFA_EFAULT / GFA_ERANGE. */
int gfa_backing_zone_fd(const struct gfa_backing *b, unsigned int zone);
/* Host address of zone z's mapping (NULL on bad input). */
void *gfa_backing_zone_base(const struct gfa_backing *b, unsigned int zone);

/*
 * Clean and dirty frames.  A frame freed through the backing (a guest's) or left behind
 * by a move (compaction, collapse: any owner, through the pool's moved hook) is dirty
 * until zeroed or released to the host; gfa_backing_prepare zeroes the dirty frames of a block before it reaches a
 * new owner and returns how many it zeroed, or GFA_EFAULT (b NULL, or a block not
 * inside one zone).  The mark calls ignore such blocks.  A released frame is clean by
 * definition (the host gives zeros back): releasing a frame drops its mark, and
 * gfa_backing_mark_dirty leaves released free frames unmarked (it takes the zone lock
 * to tell them).  Any thread (bitmap updated atomically).
 */
void gfa_backing_mark_dirty(struct gfa_backing *b, uint64_t pfn, unsigned int order);
void gfa_backing_mark_clean(struct gfa_backing *b, uint64_t pfn, unsigned int order);
void gfa_backing_mark_clean_range(struct gfa_backing *b, uint64_t pfn, uint64_t nr);
int64_t gfa_backing_prepare(struct gfa_backing *b, uint64_t pfn, unsigned int order);
/* Dirty frames right now. */
uint64_t gfa_backing_nr_dirty(const struct gfa_backing *b);
/* Does the block hold a dirty frame?  Lock-free (usable under a zone lock). */
bool gfa_backing_block_dirty(const struct gfa_backing *b, uint64_t pfn, unsigned int order);

/* Allocation through the backing: the ZERO flag asks for zeroed memory. */
#define GFA_BACKING_ZERO 0x10u
/*
 * Allocate as gfa_pcp_alloc (pcp non-NULL) or gfa_alloc on `zone`; with GFA_BACKING_ZERO
 * every dirty frame of the block is zeroed first (clean and released frames already
 * read as zero).  Returns the pfn, the allocator's error, GFA_EFAULT (b NULL) or
 * GFA_EALIGN (pcp is another pool's cache).  Any thread.
 */
int64_t gfa_backing_alloc(struct gfa_backing *b, struct gfa_pcp *pcp, unsigned int zone,
			  unsigned int order, enum gfa_migratetype mt, uint64_t owner,
			  unsigned int flags);
/*
 * Free as gfa_pcp_free / gfa_free and mark the frames dirty (they held owner data), before
 * the free: the next owner must see them dirty.  A refused free changes no frame's owner
 * or state but keeps the marks: the block may change hands meanwhile (a move in flight
 * frees its source, which holds the data), and a mark costs at most one more zeroing.
 * Returns the allocator's result, GFA_EFAULT (b NULL) or GFA_EALIGN (pcp is another
 * pool's cache: nothing marked).
 */
int gfa_backing_free(struct gfa_backing *b, struct gfa_pcp *pcp, uint64_t pfn,
		     unsigned int order, uint64_t owner);

/* Free frames of a zone by what they hold (buddy lists; cached frames count as dirty
 * or clean as they are): each free frame in one of the three, so they add up to the
 * zone's free frames (in flight to the host: none of them).  One pass under the zone
 * lock.  0, GFA_EFAULT, GFA_ERANGE. */
struct gfa_backing_zone_stat {
	uint64_t free_clean;            /* populated and known to be zero */
	uint64_t free_dirty;            /* populated, an old owner's data (zeroed on hand-out) */
	uint64_t free_released;         /* not backed by the host; zero when touched */
};
int gfa_backing_zone_stat(struct gfa_backing *b, unsigned int zone, struct gfa_backing_zone_stat *st);
/*
 * gfa_pool_check, then the backing's own invariants: no released frame marked dirty,
 * each zone's free and released frames by their states equal to gfa_zone_stat's, and
 * the dirty count equal to the marks.  Returns 0, GFA_EFAULT, gfa_pool_check's errors,
 * or -EUCLEAN with the first violation in words in msg (if non-NULL).  Thread rules: at
 * a quiet point (no other thread allocating, freeing, releasing or moving frames): the
 * totals compare two snapshots.
 */
int gfa_backing_check(struct gfa_backing *b, char *msg, size_t msglen);

/* What the host does with huge pages, read from sysfs, never assumed. */
struct gfa_thp_report {
	char thp_enabled[32];           /* transparent_hugepage/enabled, e.g. "madvise" */
	char shmem_enabled[32];         /* transparent_hugepage/shmem_enabled, e.g. "never" */
	bool shmem_thp_possible;        /* shmem_enabled lets MADV_HUGEPAGE memfds use THP */
};
int gfa_host_thp_report(struct gfa_thp_report *r);
/* ---- the release engine (io_uring) ---- */

/*
 * The release engine: gives free frame ranges of a zone memfd back to the host,
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
	uint64_t bytes_released;	/* bytes of ranges reported released (a range
					 * reported failed counts none, even where one
					 * of its punches succeeded) */
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

/* ---- returning memory to the host ---- */

struct gfa_host_return;

struct gfa_host_return_config {
	unsigned int interval_ms;       /* between passes when idle; 0 = 100 */
	uint64_t max_frames_per_pass;   /* per zone and pass; 0 = 64 MiB worth: bounds what is
					 * in flight (not allocatable) at any time */
	bool force_sync;                /* engines punch synchronously (on their thread) */
	unsigned int settle_ms;         /* timer passes release only memory that stayed above
					 * the reserve this long; 0 = 1000 (kicks skip it) */
	bool no_settle;                 /* release as soon as a timer pass sees it */
	uint64_t scrub_frames_per_pass; /* idle scrubbing of dirty free frames, per zone
					 * and pass; 0 = 16 MiB worth */
	bool no_scrub;                  /* leave dirty frames to be zeroed on hand-out */
	unsigned int pcp_idle_ms;       /* drain vCPU caches idle this long (the kernel's
					 * vmstat-worker drain), so their frames can be
					 * released; 0 = 1000 */
	bool no_pcp_drain;              /* leave idle caches alone */
	struct gfa_release_config engine;  /* per-engine settings, incl. fault injection */
};

/*
 * Start returning memory: one io_uring release engine per zone memfd and one thread
 * that, when it has nothing to release, also zeroes dirty free frames (idle scrub), every
 * pcp_idle_ms drains vCPU caches that have been idle that long (gfa_pool_drain_idle), and
 * otherwise runs the allocator's depopulation policy (gfa_zone_set_release_policy: LOW/HIGH
 * reserve, quarter-empty pageblocks, highest first, released blocks reused last).
 * Frames released are zero when next touched and count as clean.  Returns NULL with
 * errno: EFAULT, EINVAL (b backs another pool), EBUSY (the backing has a host return
 * already), or the engine's error (ring setup failures fall back to synchronous
 * release inside the engine, with a warning).  Thread rules: start/stop once per
 * backing; kick and quiesce from any thread.
 */
struct gfa_host_return *gfa_host_return_start(struct gfa_pool *pool, struct gfa_backing *b,
					      const struct gfa_host_return_config *cfg);
/* Run a pass now that releases without settling (a balloon inflation, a VM the operator
 * wants gone for good).  Never waits.  NULL is a no-op. */
void gfa_host_return_kick(struct gfa_host_return *hr);
/*
 * Wait until a pass finds nothing to do and no release is in flight (tests, benchmarks,
 * shutdown), at most timeout_ms (negative: 0).  0, -EFAULT, -ETIMEDOUT, -ECANCELED (a
 * gfa_host_return_stop on another thread overlapped; it waits for this call to return).
 */
int gfa_host_return_quiesce(struct gfa_host_return *hr, int timeout_ms);
/* Stop the thread, let the engines finish what is queued, free.  NULL is a no-op. */
int gfa_host_return_stop(struct gfa_host_return *hr);

struct gfa_host_return_stat {
	uint64_t passes, shrinks, grows, ranges;
	uint64_t backoffs;              /* times a zone backed off after failed releases */
	uint64_t bytes_released, bytes_failed, bytes_populated;
	uint64_t bytes_scrubbed;        /* dirty free memory zeroed while idle */
	uint64_t pcp_frames_drained;    /* frames taken back from idle vCPU caches */
	uint64_t inflight_ranges;
	const char *mode, *mode_why;    /* "io_uring" or "sync" (any zone's engine), and why */
};
int gfa_host_return_stat(struct gfa_host_return *hr, struct gfa_host_return_stat *st);
/* The host return started on b, or NULL (none, or b is NULL).  The pointer is only as
 * good as the caller's knowledge that nobody stops it meanwhile. */
struct gfa_host_return *gfa_backing_host_return(const struct gfa_backing *b);
/* gfa_host_return_kick() on b's host return if it has one: safe from any thread, also
 * while another stops it (the balloon kicks this way).  NULL is a no-op. */
void gfa_backing_kick_host_return(struct gfa_backing *b);

/* ---- guests ---- */

struct gfa_guest;

/* How the VMM stops and restarts the guest's vCPUs while gfa moves its frames. */
struct gfa_guest_vcpu_ops {
	int (*pause)(void *ctx);        /* return once no vCPU touches guest RAM; nonzero
					 * refuses the move (the block stays where it is) */
	int (*resume)(void *ctx);
};

struct gfa_guest_config {
	uint64_t mem_bytes;     /* guest RAM, a multiple of 2 MiB */
	unsigned int zone;      /* zone (NUMA node) its frames come from */
	struct gfa_pcp *pcp;    /* the creating thread's cache (of `zone`), or NULL for the
				 * zone path */
	bool small_only;        /* never use order-9 blocks, at creation or on deflate (the
				 * host may still merge contiguous small blocks into a PMD
				 * mapping; gfa_guest_collapse still collapses when asked) */
	uint64_t id;            /* owner cookie; 0 = pick a unique one */
	/* How the VMM stops its vCPUs around a move of the guest's frames, from the moment
	 * the guest exists (a move can start before gfa_guest_create returns to the
	 * caller).  NULL: no vCPU and no other thread touches guest RAM while gfa calls
	 * run (a guest the VMM fills before it has vCPUs must still pass ops). */
	const struct gfa_guest_vcpu_ops *vcpu_ops;
	void *vcpu_ctx;         /* passed to the ops */
};

/*
 * Create a guest: reserve a host virtual window of mem_bytes (2 MiB aligned), back each
 * 2 MiB range with an order-9 block when one can be had (the cache, the zone, then
 * node-local direct compaction with capture), else with the largest smaller blocks
 * available, map each block into the window (MAP_SHARED | MAP_FIXED of the zone memfd)
 * and zero any dirty frame first.  Registers the guest as the owner of its frames so
 * compaction can move them (pausing vCPUs through the ops, once set).
 * Returns NULL with errno: EFAULT, EINVAL (size 0 or not 2 MiB aligned, a pcp of another
 * zone or pool, a backing of another pool, or vcpu_ops without pause or resume), ERANGE (zone), ENODEV (pool without backing),
 * ENOMEM (not enough frames; no frame is kept, but what the blocks taken drew from the
 * owner's claim stays drawn: unclaim and claim again before retrying), EEXIST (cfg->id
 * is an owner of the pool already), ENOSPC (owner registry full), or the error of mmap
 * for the window.
 * Thread rules: any thread; one guest's calls are serialised by the guest's lock.  Not
 * from a thread the vCPU ops wait for (a vCPU's own IO handler, e.g. a virtio-balloon
 * device): a move holds the guest's lock while it pauses the vCPUs, so that thread
 * would wait for the lock and the move for that thread.  Hand such work to another
 * thread.
 */
struct gfa_guest *gfa_guest_create(struct gfa_pool *pool, struct gfa_backing *b,
				   const struct gfa_guest_config *cfg);
/* Unmap the window, free every frame (marked dirty) and unregister.  NULL is a no-op. */
void gfa_guest_destroy(struct gfa_guest *g);
/*
 * The guest's vCPUs are stopped for good (the VMM is tearing it down): wait for a move
 * that is pausing them to finish, and call the vCPU ops no more, so the VMM can free
 * its vCPUs before it destroys the guest.  Moves after it pause nothing.  NULL is a
 * no-op.  Any thread but one the vCPU ops wait for (the guest's lock).
 */
void gfa_guest_forget_vcpus(struct gfa_guest *g);
/* Host address of guest physical address 0, and the guest's size. */
void *gfa_guest_hva(const struct gfa_guest *g);
uint64_t gfa_guest_size(const struct gfa_guest *g);
uint64_t gfa_guest_id(const struct gfa_guest *g);
/* pfn backing gpa; GFA_ERANGE outside the guest, -ENOENT when ballooned out. */
int gfa_guest_gpa_to_pfn(struct gfa_guest *g, uint64_t gpa, uint64_t *pfn);

struct gfa_guest_stat {
	uint64_t mem_bytes;
	uint64_t huge_ranges;           /* 2 MiB ranges backed by one order-9 block */
	uint64_t small_ranges;          /* ranges backed by smaller blocks */
	uint64_t blocks;                /* blocks backing the guest */
	uint64_t zeroed_frames;         /* dirty frames zeroed for this guest */
	uint64_t moves;                 /* blocks moved by compaction */
	uint64_t collapses;             /* ranges collapsed into one block */
	uint64_t ballooned_frames;      /* frames taken away by the balloon */
};
int gfa_guest_stat(struct gfa_guest *g, struct gfa_guest_stat *st);

/*
 * khugepaged for one guest: collapse up to max_ranges 2 MiB ranges that are backed by
 * small blocks into order-9 blocks (pausing vCPUs around each move) and map them as one
 * huge mapping.  A range whose collapse fails (no order-9 block, a move refused) stays as
 * it was and is not counted.  Returns ranges collapsed, or -EFAULT (g NULL).
 */
int gfa_guest_collapse(struct gfa_guest *g, unsigned int max_ranges);

/* ---- balloon (for a VMM's virtio-balloon device) ---- */

struct gfa_gpa_range {
	uint64_t gpa, len;              /* 4 KiB aligned */
};

/*
 * Inflate: take [gpa, gpa + len) of each range away from the guest.  The frames are
 * freed (dirty) and the window there is remapped to anonymous zero memory, so the guest
 * reads zero if it touches them again; the host-return thread (if started) is kicked to
 * punch them out.  The calling thread never waits for the host.  Every range is checked
 * first; one bad range rejects the whole request and changes nothing:
 *   -EFAULT NULL, -EINVAL zero length or misaligned, -ERANGE outside the guest,
 *   -EALREADY already ballooned, -ENOTUNIQ ranges overlap each other.
 * -ENOMEM (or another mmap errno) when the window cannot be remapped (vm.max_map_count:
 * a page inside a block's mapping takes two more VMAs): the ranges already unmapped are
 * mapped again (end blocks may be left split); a block that cannot be mapped again
 * either is ballooned after all (counted in ballooned_frames): a gfn the guest owns is
 * always mapped, one it does not always reads zero.
 * Returns frames taken, or the error.  Thread rules: any thread (the guest's lock) but a
 * vCPU's own IO handler (see gfa_guest_create).
 */
int64_t gfa_balloon_inflate(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n);
/*
 * Deflate: give the guest memory again for ranges that are ballooned out (fresh zeroed
 * frames mapped back).  Errors as inflate, with -ENOENT for a range that is not (wholly)
 * ballooned, and -ENOMEM when frames cannot be had (nothing changes then, except that
 * frames whose window could not be unmapped again stay the guest's, counted out of
 * ballooned_frames).
 */
int64_t gfa_balloon_deflate(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n);

#ifdef __cplusplus
}
#endif
#endif /* GFA_VMM_H */
