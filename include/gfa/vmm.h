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
	bool hugetlb;          /* MFD_HUGETLB memfds (2 MiB pages; the host must have them
				 * reserved); such pools should only hand out order-9 blocks */
	bool populate;         /* fault every frame in now, so guests start on resident
				 * memory (MADV_POPULATE_WRITE, else a touch loop) */
	bool no_thp_advice;    /* skip MADV_HUGEPAGE on the pool mapping */
	bool no_zero_on_stop;  /* leave what a stopped guest wrote dirty for the next owner
				 * to zero (default: the backing's zeroer zeroes it in the
				 * background; the frames are free either way) */
	bool no_balloon_punch; /* (added in 0.5) ballooned frames keep their host memory
				 * until a host return releases them.  Default: while no
				 * host return runs on the backing, balloon inflate (and a
				 * lazy guest's free page report) punches the frames out of
				 * the memfd itself before freeing them, as a VMM's
				 * MADV_DONTNEED would; with one, it kicks it instead */
	uint8_t pad0[3];
	uint32_t hugetlb_page_bytes; /* (added in 0.5) with hugetlb: 0 or 2 MiB, which
					 * asks for 2 MiB pages whatever the host's default
					 * size.  1 GiB pages are GFA_ENOTSUP: a guest maps
					 * 2 MiB blocks at 2 MiB offsets of the memfd, and
					 * hugetlbfs maps only whole pages */
	uint32_t pad1;
	uint64_t reserved[3]; /* zero: room to grow (the head of gfa/allocator.h) */
};

/**
 * gfa_backing_create() - back every zone of a pool with a memfd of its own
 * @cfg: struct gfa_backing_config, or NULL for the defaults
 *
 * One memfd per zone ("gfa-zone<N>"), sized to the zone, mapped once MAP_SHARED at a 2 MiB
 * aligned address with MADV_HUGEPAGE, and handed to the pool (gfa_pfn_to_addr() then
 * answers).
 *
 * Return: the backing, or NULL with errno: GFA_EFAULT, GFA_EINVAL (nonzero reserved or pad
 * words; hugetlb_page_bytes without hugetlb, or another size than 2 MiB or 1 GiB),
 * GFA_ENOTSUP (1 GiB hugetlb pages),
 * GFA_EBUSY (the pool already has backing or a moved hook), or the memfd/ftruncate/mmap error.
 * Context: create and destroy while no guest uses the pool and no migrate op can run (no
 * compaction or collapse; gfa_compactd_stop() first): a move's hook marks frames dirty in
 * the backing.
 */
struct gfa_backing *gfa_backing_create(struct gfa_pool *pool, const struct gfa_backing_config *cfg);
/**
 * gfa_backing_destroy() - unmap and close the zones' memfds
 * @b: the backing; NULL is a no-op
 *
 * Context: as gfa_backing_create().
 */
void gfa_backing_destroy(struct gfa_backing *b);
/**
 * gfa_backing_populate() - fault every zone in now (after binding zones to nodes)
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_backing_populate(struct gfa_backing *b);
/**
 * gfa_backing_zone_fd() - the memfd of a zone
 *
 * Return: the fd, or GFA_EFAULT, GFA_ERANGE.
 * Context: any thread.
 */
int gfa_backing_zone_fd(const struct gfa_backing *b, unsigned int zone);
/**
 * gfa_backing_zone_base() - host address of a zone's mapping
 *
 * Return: the address, or NULL for a NULL @b or a zone out of range.
 * Context: any thread.
 */
void *gfa_backing_zone_base(const struct gfa_backing *b, unsigned int zone);

/**
 * gfa_backing_mark_dirty() - mark a block's frames dirty (they hold an owner's data)
 *
 * A frame freed through the backing (a guest's) or left behind by a move (compaction,
 * collapse: any owner, through the pool's moved hook) is dirty until zeroed or released
 * to the host.  A released frame is clean by definition (the host gives zeros back):
 * releasing a frame drops its mark, and this call leaves released free frames unmarked
 * (it takes the zone lock to tell them).  Only frames the zone's memfd holds data for
 * (populated or swapped out) are marked: a hole reads zero, and zeroing it would fault
 * it in.  A NULL @b or a block not inside one zone is ignored.
 * Context: any thread (the bitmap is updated atomically).
 */
void gfa_backing_mark_dirty(struct gfa_backing *b, uint64_t pfn, unsigned int order);
/**
 * gfa_backing_mark_clean() - mark a block's frames clean (known to read as zero)
 *
 * A NULL @b or a block not inside one zone is ignored.
 * Context: any thread.
 */
void gfa_backing_mark_clean(struct gfa_backing *b, uint64_t pfn, unsigned int order);
/**
 * gfa_backing_mark_clean_range() - gfa_backing_mark_clean() for nr frames from pfn
 *
 * Context: any thread.
 */
void gfa_backing_mark_clean_range(struct gfa_backing *b, uint64_t pfn, uint64_t nr);
/**
 * gfa_backing_prepare() - zero the dirty frames of a block before it reaches a new owner
 *
 * Return: frames zeroed, or GFA_EFAULT (@b NULL, or a block not inside one zone).
 * Context: any thread.
 */
int64_t gfa_backing_prepare(struct gfa_backing *b, uint64_t pfn, unsigned int order);
/**
 * gfa_zero() - zero a range with non-temporal stores
 * @p: start (any alignment)
 * @len: bytes (any length)
 *
 * Uses the widest non-temporal stores the CPU offers (AVX-512, AVX2, movnti; memset where
 * none is), chosen once at first use by CPUID or forced by the environment variable
 * GFA_ZERO=avx512|avx2|movnti|memset (an unusable or unknown name: the automatic
 * choice).  gfa_backing_prepare() and the idle scrubber zero with it.
 * Context: any thread; switching the method while other threads zero is safe (each call
 * uses one path).
 */
void gfa_zero(void *p, size_t len);
/**
 * gfa_backing_zero_quiesce() - wait for the background zeroer to be idle
 * @b: the backing
 * @timeout_ms: how long at most
 *
 * When a guest stops (gfa_guest_destroy()) its frames are free at once, dirty, and the
 * backing's zeroer thread (started with the first stop) zeroes the dirty free frames in
 * the background, a few MiB at a time, so a later start finds them clean; the stopping
 * thread never waits for it.  A batch in work is off the free lists but still counted
 * free and claimable (gfa_zone_stat.nr_scrubbing): an allocation that finds no frame
 * waits for it.
 *
 * Return: 0, GFA_EFAULT, or GFA_ETIMEDOUT after @timeout_ms.
 * Context: any thread.
 */
int gfa_backing_zero_quiesce(struct gfa_backing *b, unsigned int timeout_ms);
/**
 * gfa_backing_zeroed_in_background() - frames the background zeroer zeroed so far
 * @b: the backing
 *
 * Return: the count, 0 for a NULL @b.
 * Context: any thread.
 */
uint64_t gfa_backing_zeroed_in_background(const struct gfa_backing *b);
/**
 * gfa_zero_method() - the zeroing path in use
 *
 * Return: its name ("avx512", "avx2", "movnti" or "memset").
 * Context: any thread.
 */
const char *gfa_zero_method(void);
/**
 * gfa_zero_set_method() - switch the zeroing path
 * @name: "avx512", "avx2", "movnti", "memset", or "" for the automatic choice
 *
 * Return: 0, GFA_EFAULT (NULL), GFA_EINVAL (unknown name) or GFA_ENOTSUP (this CPU or OS lacks
 * it).
 * Context: any thread.
 */
int gfa_zero_set_method(const char *name);
/**
 * gfa_zero_method_usable() - can this CPU run a zeroing path
 * @name: as gfa_zero_set_method()
 *
 * Return: 1 if it can, else 0 (a predicate: 0 for a NULL @name).
 * Context: any thread.
 */
int gfa_zero_method_usable(const char *name);

/**
 * gfa_backing_nr_dirty() - dirty frames right now
 *
 * Return: the count, 0 for a NULL @b.
 * Context: any thread.
 */
uint64_t gfa_backing_nr_dirty(const struct gfa_backing *b);
/**
 * gfa_backing_block_dirty() - does the block hold a dirty frame?
 *
 * Return: true if it does; false for a NULL @b or a block not inside one zone.
 * Context: any thread, lock-free (usable under a zone lock).
 */
bool gfa_backing_block_dirty(const struct gfa_backing *b, uint64_t pfn, unsigned int order);

/* Allocation through the backing: GFA_BACKING_ZERO (gfa/allocator.h's list of flags)
 * asks for zeroed memory. */
/**
 * gfa_backing_alloc() - allocate as gfa_pcp_alloc() or gfa_alloc(), zeroed on request
 * @pcp: the calling thread's cache, or NULL for the zone path on @zone
 * @flags: the allocator's flags, plus GFA_BACKING_ZERO
 *
 * With GFA_BACKING_ZERO every dirty frame of the block is zeroed first (clean and
 * released frames already read as zero).
 *
 * Return: the pfn, the allocator's error, GFA_EFAULT (@b NULL) or GFA_EINVAL (@pcp is
 * another pool's cache).
 * Context: any thread (@pcp: its holder).
 */
int64_t gfa_backing_alloc(struct gfa_backing *b, struct gfa_pcp *pcp, unsigned int zone,
			  unsigned int order, enum gfa_migratetype mt, uint64_t owner,
			  unsigned int flags);
/**
 * gfa_backing_free() - free as gfa_pcp_free() or gfa_free() and mark the frames dirty
 * @pcp: the calling thread's cache, or NULL for the zone path
 *
 * The frames are marked before the free: the next owner must see them dirty.  As with
 * gfa_backing_mark_dirty(), only frames the memfd holds data for are marked.  A refused
 * free changes no frame's owner or state but keeps the marks: the block may change hands
 * meanwhile (a move in flight frees its source, which holds the data), and a mark costs
 * at most one more zeroing.
 *
 * Return: the allocator's result, GFA_EFAULT (@b NULL) or GFA_EINVAL (@pcp is another
 * pool's cache: nothing marked).
 * Context: any thread (@pcp: its holder).
 */
int gfa_backing_free(struct gfa_backing *b, struct gfa_pcp *pcp, uint64_t pfn, unsigned int order,
		     uint64_t owner);

/* Free frames of a zone by what they hold (buddy lists; cached frames count as dirty
 * or clean as they are): each free frame in one of the three, so they add up to the
 * zone's free frames (in flight to the host: none of them).  One pass under the zone
 * lock.  0, GFA_EFAULT, GFA_ERANGE. */
struct gfa_backing_zone_stat {
	uint64_t free_clean;    /* populated and known to be zero */
	uint64_t free_dirty;    /* populated, an old owner's data (zeroed on hand-out) */
	uint64_t free_released; /* not backed by the host; zero when touched */
	uint64_t reserved[4];   /* zero: room to grow (the head of gfa/allocator.h) */
};
/**
 * gfa_backing_zone_stat() - a zone's free frames by what they hold
 * @st: gets clean, dirty and released free frames (reserved words zeroed)
 *
 * Return: 0, GFA_EFAULT, GFA_ERANGE.
 * Context: any thread (a snapshot).
 */
int gfa_backing_zone_stat(struct gfa_backing *b, unsigned int zone,
			  struct gfa_backing_zone_stat *st);
/**
 * gfa_backing_check() - gfa_pool_check(), then the backing's own invariants
 * @msg: gets the first violation in words (may be NULL)
 * @msglen: size of @msg
 *
 * No released frame marked dirty, each zone's free and released frames by their states
 * equal to gfa_zone_stat's, and the dirty count equal to the marks.
 *
 * Return: 0, GFA_EFAULT, gfa_pool_check()'s errors, or GFA_ECORRUPT (a violation, described
 * in @msg).
 * Context: at a quiet point (no other thread allocating, freeing, releasing or moving
 * frames): the totals compare two snapshots.  The backing's background zeroer counts
 * as quiet: the check holds it between two batches while it runs.
 */
int gfa_backing_check(struct gfa_backing *b, char *msg, size_t msglen);

/* What the host does with huge pages, read from sysfs, never assumed. */
struct gfa_thp_report {
	char thp_enabled[32];    /* transparent_hugepage/enabled, e.g. "madvise" */
	char shmem_enabled[32];  /* transparent_hugepage/shmem_enabled, e.g. "never" */
	bool shmem_thp_possible; /* shmem_enabled lets MADV_HUGEPAGE memfds use THP */
	uint64_t reserved[4];    /* zero: room to grow (the head of gfa/allocator.h) */
};
/**
 * gfa_host_thp_report() - what the host does with huge pages, read from sysfs
 * @r: gets the settings (reserved words zeroed)
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread.
 */
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
 * If an io_uring cannot be set up (kernel.io_uring_disabled, GFA_ENOMEM, missing
 * opcodes, injected failure) the engine runs in synchronous mode on its own thread
 * (callers still never wait) and prints one warning line to stderr.
 */

/* Defaults used when the corresponding config field is 0. */
#define GFA_RELEASE_DEFAULT_MAX_PUNCH (128ULL << 20) /* gVisor's cap */
#define GFA_RELEASE_DEFAULT_RING      64u
#define GFA_RELEASE_DEFAULT_BATCH     4096u
/* Upper bounds accepted in the config (IORING_OP_MADVISE takes a 32-bit length). */
#define GFA_RELEASE_MAX_PUNCH_LIMIT   (2ULL << 30)
#define GFA_RELEASE_MAX_RING          4096u

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
 * here return GFA_ETHREAD and do nothing.  Do not flush another engine from here
 * either.  Consequently: a lock the callback takes may be held around
 * gfa_release_submit(), but never around gfa_release_flush()/destroy().
 */
typedef void (*gfa_release_done_fn)(void *cookie, uint64_t offset, uint64_t len, int result);

/*
 * Fault injection (shipped, for tests): operations of one kind are numbered from 1
 * over the engine's life; numbers nth .. nth+count-1 fail with -err (err is a
 * positive errno value).  nth == 0 disables; count == 0 means 1.
 * An injected failure never touches the memfd, so the data stays intact.
 */
struct gfa_release_fault {
	uint64_t nth;
	uint32_t count;
	int err;
};

struct gfa_release_config {
	uint64_t max_punch_bytes; /* cap per punch; 0 = 128 MiB; page multiple,
					 * <= GFA_RELEASE_MAX_PUNCH_LIMIT */
	uint32_t ring_entries;    /* SQ size; 0 = 64; <= GFA_RELEASE_MAX_RING */
	uint32_t batch;           /* max ranges taken per engine pass; 0 = 4096 */
	bool force_sync;          /* no io_uring: synchronous mode, no warning */

	/* Fault injection; all zero in production. */
	int fault_setup_err;                     /* ring setup fails with -err */
	struct gfa_release_fault fault_submit;   /* Nth io_uring_submit() call fails */
	struct gfa_release_fault fault_complete; /* Nth ring op completes with -err */
	struct gfa_release_fault fault_sync;     /* Nth synchronous syscall fails */
	uint64_t reserved[4]; /* zero: room to grow (the head of gfa/allocator.h) */
};

enum gfa_release_mode_kind {
	GFA_RELEASE_MODE_IO_URING = 0,
	GFA_RELEASE_MODE_SYNC = 1,
};

struct gfa_release_stats {
	uint64_t ranges_submitted; /* accepted by gfa_release_submit() */
	uint64_t ranges_rejected;  /* refused by gfa_release_submit() */
	uint64_t ranges_done;      /* done callbacks made */
	uint64_t ranges_failed;    /* ... of which with result < 0 */
	uint64_t ranges_coalesced; /* ranges merged into a neighbour's span */
	uint64_t bytes_submitted;
	uint64_t bytes_released;  /* bytes of ranges reported released (a range
					 * reported failed counts none, even where one
					 * of its punches succeeded) */
	uint64_t punches;         /* punch operations planned (first attempts) */
	uint64_t ring_ops;        /* operations submitted to the io_uring */
	uint64_t sync_ops;        /* synchronous fallocate/madvise calls */
	uint64_t madvise_ops;     /* ... of ring_ops + sync_ops using MADV_REMOVE */
	uint64_t ops_failed;      /* attempts that failed (ring or sync) */
	uint64_t retries;         /* second attempts after a failure */
	uint64_t sync_fallbacks;  /* punches finished synchronously after the ring
					 * failed them or went away */
	uint64_t submit_errors;   /* io_uring_submit() failures */
	uint64_t passes;          /* engine passes (queue grabs) */
	uint64_t inflight_ranges; /* submitted, done not yet called */
	uint64_t inflight_bytes;
	enum gfa_release_mode_kind mode;
	uint64_t reserved[8]; /* zero: room to grow (the head of gfa/allocator.h) */
};

/**
 * gfa_release_create() - create a release engine for a memfd
 * @memfd: a shmem/hugetlbfs memfd or any file supporting FALLOC_FL_PUNCH_HOLE
 * @map_base: a MAP_SHARED, PROT_WRITE mapping of the whole file (MADV_REMOVE needs both),
 *            used where fallocate is unsupported, or NULL
 * @cfg: struct gfa_release_config, or NULL for all defaults
 *
 * The engine does not take ownership of @memfd: keep it open, and @map_base mapped, until
 * gfa_release_destroy() returns.  Ranges are checked against the base page size only: for
 * a hugetlbfs memfd submit huge-page-aligned ranges.  Ring setup failure is not an error:
 * the engine runs in synchronous mode.
 *
 * Return: the engine, or NULL with errno: GFA_EBADF (@memfd is not an open file descriptor),
 * GFA_EINVAL (@memfd is not a regular file; max_punch_bytes not a page multiple or above
 * GFA_RELEASE_MAX_PUNCH_LIMIT; ring_entries above GFA_RELEASE_MAX_RING; a fault with nth
 * != 0 and err <= 0; fault_setup_err < 0; nonzero reserved words), GFA_ENOMEM, GFA_EAGAIN (or
 * another pthread_create error: the thread could not be started).
 * Context: any thread.
 */
struct gfa_release_engine *gfa_release_create(int memfd, void *map_base,
					      const struct gfa_release_config *cfg);

/**
 * gfa_release_submit() - queue a byte range of the memfd for release
 * @offset: start, a page multiple
 * @len: length, a page multiple, not 0
 * @done: called exactly once when the range has been handled (gfa_release_done_fn)
 * @cookie: passed to @done
 *
 * Never waits for the host: O(1) work under a short lock, plus a rare fstat when the
 * range lies beyond the size last seen (the file may have grown).
 *
 * Return: 0, or (nothing queued, @done never called) GFA_EFAULT (@engine or @done NULL),
 * GFA_EINVAL (@len 0, @offset or @len not a page multiple), GFA_ERANGE (@offset + @len
 * overflows or exceeds the memfd's size: the largest size seen, so a file shrunk under
 * the engine is not noticed, and a punch past its end changes nothing), GFA_ESHUTDOWN
 * (gfa_release_destroy() has started), GFA_ENOMEM, or fstat()'s error.
 * Context: any thread, concurrently; also from a done callback.
 */
int gfa_release_submit(struct gfa_release_engine *engine, uint64_t offset, uint64_t len,
		       gfa_release_done_fn done, void *cookie);

/**
 * gfa_release_plug() - hold queued ranges, so a burst of submits is coalesced as a whole
 *
 * While at least one plug is held the engine leaves queued ranges alone (like
 * blk_start_plug()), so a balloon inflation is punched as one.  Plugs nest;
 * gfa_release_flush() and gfa_release_destroy() override them.
 *
 * Return: 0 or GFA_EFAULT (NULL @engine).
 * Context: any thread.
 */
int gfa_release_plug(struct gfa_release_engine *engine);
/**
 * gfa_release_unplug() - drop one plug
 *
 * Return: 0, GFA_EFAULT (NULL @engine) or GFA_EINVAL (no plug held).
 * Context: any thread.
 */
int gfa_release_unplug(struct gfa_release_engine *engine);

/**
 * gfa_release_flush() - wait for every range submitted before this call
 * @timeout_ms: how long to wait; < 0 waits forever
 *
 * Waits until every such range has had its done callback return (ranges held by a plug
 * included).
 *
 * Return: 0, or GFA_EFAULT (NULL @engine), GFA_ETIMEDOUT, GFA_ETHREAD (called on the engine
 * thread, i.e. from a done callback).
 * Context: any thread except the engine thread.
 */
int gfa_release_flush(struct gfa_release_engine *engine, int timeout_ms);

/**
 * gfa_release_destroy() - finish everything queued and free the engine
 * @engine: the engine; NULL is a no-op (0)
 *
 * Refuses new submits, makes every done callback of what is queued, joins the thread and
 * tears down the ring.
 *
 * Return: 0, or GFA_ETHREAD if called on the engine thread (nothing is done).
 * Context: once, from any thread but the engine thread, after which no other thread may
 * use the engine.
 */
int gfa_release_destroy(struct gfa_release_engine *engine);

/**
 * gfa_release_mode() - how the engine releases
 * @why: gets a stable, human-readable reason (which opcode is used, or why the ring is
 *       not), if not NULL
 *
 * The mode may change once, from io_uring to sync, if the ring fails at run time.
 *
 * Return: "io_uring" or "sync"; NULL for a NULL @engine.
 * Context: any thread; the strings live as long as the engine.
 */
const char *gfa_release_mode(const struct gfa_release_engine *engine, const char **why);

/**
 * gfa_release_stats() - snapshot the engine's counters
 * @out: gets them (reserved words zeroed); each counter is read atomically, the set is
 *       not a single consistent cut while the engine runs
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_release_stats(const struct gfa_release_engine *engine, struct gfa_release_stats *out);

/* ---- returning memory to the host ---- */

struct gfa_host_return;

struct gfa_host_return_config {
	unsigned int interval_ms;         /* between passes when idle; 0 = 100 */
	uint64_t max_frames_per_pass;     /* per zone and pass; 0 = 64 MiB worth: bounds what is
					 * in flight (not allocatable) at any time */
	bool force_sync;                  /* engines punch synchronously (on their thread) */
	unsigned int settle_ms;           /* timer passes release only memory that stayed above
					 * the reserve this long; 0 = 1000 (kicks skip it) */
	bool no_settle;                   /* release as soon as a timer pass sees it */
	uint64_t scrub_frames_per_pass;   /* idle scrubbing of dirty free frames, per zone
					 * and pass; 0 = 16 MiB worth */
	bool no_scrub;                    /* leave dirty frames to be zeroed on hand-out */
	unsigned int pcp_idle_ms;         /* drain vCPU caches idle this long (the kernel's
					 * vmstat-worker drain), so their frames can be
					 * released; 0 = 1000 */
	bool no_pcp_drain;                /* leave idle caches alone */
	struct gfa_release_config engine; /* per-engine settings, incl. fault injection */
	uint64_t reserved[4];             /* zero: room to grow (the head of gfa/allocator.h) */
};

/**
 * gfa_host_return_start() - start returning a pool's free memory to the host
 * @b: the pool's backing
 * @cfg: struct gfa_host_return_config, or NULL for the defaults
 *
 * One io_uring release engine per zone memfd and one thread that, when it has nothing to
 * release, also zeroes dirty free frames (idle scrub), every pcp_idle_ms drains vCPU
 * caches that have been idle that long (gfa_pool_drain_idle()), and otherwise runs the
 * allocator's depopulation policy (gfa_zone_set_release_policy(): LOW/HIGH reserve,
 * quarter-empty pageblocks, highest first, released blocks reused last).  Frames released
 * are zero when next touched and count as clean.
 *
 * Return: the host return, or NULL with errno: GFA_EFAULT, GFA_EINVAL (@b backs another pool,
 * nonzero reserved words), GFA_EBUSY (the backing has a host return already), or the
 * engine's error (ring setup failures fall back to synchronous release inside the engine,
 * with a warning).
 * Context: start and stop once per backing.
 */
struct gfa_host_return *gfa_host_return_start(struct gfa_pool *pool, struct gfa_backing *b,
					      const struct gfa_host_return_config *cfg);
/**
 * gfa_host_return_kick() - run a pass now that releases without settling
 * @hr: the host return; NULL is a no-op
 *
 * For a balloon inflation, or a VM the operator wants gone for good.  Never waits.
 * Context: any thread.
 */
void gfa_host_return_kick(struct gfa_host_return *hr);
/**
 * gfa_host_return_quiesce() - wait until a pass finds nothing to do and nothing is in flight
 * @timeout_ms: at most this long (negative: 0)
 *
 * For tests, benchmarks and shutdown.
 *
 * Return: 0, GFA_EFAULT, GFA_ETIMEDOUT, GFA_ECANCELED (a gfa_host_return_stop() on another thread
 * overlapped; it waits for this call to return).
 * Context: any thread.
 */
int gfa_host_return_quiesce(struct gfa_host_return *hr, int timeout_ms);
/**
 * gfa_host_return_stop() - stop the thread, let the engines finish what is queued, free
 * @hr: the host return; NULL is a no-op
 *
 * Return: 0.
 * Context: once per host return, from any thread.
 */
int gfa_host_return_stop(struct gfa_host_return *hr);

struct gfa_host_return_stat {
	uint64_t passes, shrinks, grows, ranges;
	uint64_t backoffs; /* times a zone backed off after failed releases */
	uint64_t bytes_released, bytes_failed, bytes_populated;
	uint64_t bytes_scrubbed;     /* dirty free memory zeroed while idle */
	uint64_t pcp_frames_drained; /* frames taken back from idle vCPU caches */
	uint64_t inflight_ranges;
	const char *mode, *mode_why; /* "io_uring" or "sync" (any zone's engine), and why */
	uint64_t reserved[8];        /* zero: room to grow (the head of gfa/allocator.h) */
};
/**
 * gfa_host_return_stat() - the host return's counters
 * @st: gets them (reserved words zeroed)
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_host_return_stat(struct gfa_host_return *hr, struct gfa_host_return_stat *st);
/**
 * gfa_backing_host_return() - the host return started on a backing
 *
 * Return: the host return, or NULL (none; NULL for a NULL @b).  The pointer is only as
 * good as the caller's knowledge that nobody stops it meanwhile.
 * Context: any thread.
 */
struct gfa_host_return *gfa_backing_host_return(const struct gfa_backing *b);
/**
 * gfa_backing_kick_host_return() - gfa_host_return_kick() on a backing's host return
 * @b: the backing; NULL, or a backing without host return, is a no-op
 *
 * Context: any thread, also while another stops the host return (the balloon kicks this
 * way).
 */
void gfa_backing_kick_host_return(struct gfa_backing *b);

/* ---- guests ---- */

/*
 * How gfa moves a guest's frames (compaction, kcompactd, collapse) while it runs.
 *
 * Write-protected moves, the default: the guest's window is registered with a
 * userfaultfd in write-protect mode.  A move write-protects only the block it moves,
 * copies it, maps the new frames over the window and wakes the writers that faulted
 * meanwhile.  Any thread of the process that writes guest RAM - a vCPU (KVM's
 * second-level entries are zapped with the protection), a device thread, a read(2),
 * io_uring or O_DIRECT completion landing in guest RAM - waits for at most that one
 * move and then lands in the new frame.  Readers never wait.  No thread is paused: the
 * vCPU ops are not called.  A collapse protects its whole 2 MiB range once.
 *
 * Writes that bypass the page tables cannot be caught: a page pinned by GUP (VFIO DMA,
 * io_uring fixed buffers, an O_DIRECT transfer in flight) and another process's mapping
 * of the zone memfd (vhost-user).  The VMM says so: gfa_guest_pin() for a pinned range,
 * GFA_GUEST_PINNED for a guest whose whole RAM is pinned (VFIO), the moved notifier for a
 * shared mapping (docs/decisions.md, entry 25, has which device needs which).
 *
 * The pause fallback: without userfaultfd permission (root, CAP_SYS_PTRACE, read-write
 * /dev/userfaultfd or vm.unprivileged_userfaultfd=1; kernel 6.1 or later), or with
 * GFA_NO_UFFD=1 in the environment, gfa says so once on stderr and in
 * gfa_guest_stat.wp_errno and moves under the vCPU ops instead.  Then pause must return
 * only once EVERY thread that writes guest RAM has stopped (vCPUs, device threads, I/O
 * completions), not only the vCPUs.  It is called once per batch: once per collapsed
 * range, once per block compaction moves.
 */
struct gfa_guest_vcpu_ops {
	int (*pause)(void *ctx); /* the pause fallback: return once no thread writes
					 * guest RAM; nonzero refuses the move (the block
					 * stays where it is) */
	int (*resume)(void *ctx);
};

/*
 * Called by a move with the block's writers held off, after the copy and before the
 * window maps the new frames: [gpa, gpa + len) of the guest will live at offset off of
 * the memfd fd.  A VMM that maps guest RAM in another process (vhost-user) remaps it
 * there now.  Return 0, or nonzero to refuse the move (the block stays where it was).
 * Called from the moving thread with the guest's lock held: it must not call into the
 * guest.
 */
typedef int (*gfa_guest_moved_fn)(void *ctx, uint64_t gpa, uint64_t len, int fd, uint64_t off);

/* A range of guest physical memory: guest RAM's regions, balloon pages, free pages. */
struct gfa_gpa_range {
	uint64_t gpa, len; /* 4 KiB aligned */
};

/* gfa_guest_config.flags */
#define GFA_GUEST_PINNED \
	(1U << 0)                /* all of its RAM is pinned (VFIO): its frames
					 * are unmovable allocations, never moved, never
					 * collapsed, never ballooned */
#define GFA_GUEST_LAZY (1U << 1) /* RAM taken at first touch (below) */
#define GFA_GUEST_WP_ONLY \
	(1U << 2) /* (added in 0.5) moves only under write
					 * protection, never a pause: no vcpu_ops, so the
					 * VMM may free its vCPUs whenever it likes and
					 * tears down in any order (no forget_vcpus).
					 * Without userfaultfd its blocks are not moved
					 * (pinned_skips; wp_errno says why) */

/*
 * Lazy guests (GFA_GUEST_LAZY).  gfa_guest_create() takes no frame: the window is an
 * placeholder registered with the guest's userfaultfd in missing mode, so a lazy guest
 * needs userfaultfd (the head of this section) and fails with its errno (as wp_errno)
 * where moves would fall back to pausing.  The first
 * touch of a 2 MiB range - by a vCPU (KVM's fault on the window), a device thread, a
 * read(2) or io_uring completion landing there - waits in the kernel while the guest's
 * service thread takes a block for it: from the faulting thread's cache when the VMM
 * registered one for that thread (gfa_guest_vcpu_cache()), else the zone path; an
 * order-9 block whenever one can be had (node-local direct compaction with capture
 * included), else the largest of orders 3..0 around the touched page.  The block is
 * zeroed where dirty (or filled from the fill source, below), mapped over the
 * placeholder at 2 MiB (so host THP and a 2 MiB EPT/NPT entry back it) and the waiting
 * thread woken.  The balloon and free page reporting make ranges lazy again: their
 * frames go back to the pool and the next touch takes a fresh zeroed block.  Moves and
 * collapse move only what is populated.  On a host pool client (gfa_hostpool_attach())
 * a touch its pool cannot serve leases 16 MiB from the service first (lazy_leases), one
 * round trip, and is served from that; what the guest frees goes back to the service
 * as a full guest's does.
 *
 * Overcommit ends where it is defined.  A first touch that finds no frame, after direct
 * compaction, calls the reclaim hook (up to 3 times while it reports progress) with the
 * guest's lock dropped; if it still finds none, the touched page is answered with a
 * mapping that faults: a vCPU's KVM_RUN fails (-GFA_EFAULT), another thread gets SIGBUS.
 * It is counted (lazy_refused) and said once on stderr; never a hang.
 *
 * Snapshot restore: a fill source gives each 4 KiB page its contents before its first
 * mapping - a file (GFA_LAZY_FILL_FD: fill_fd at fill_off + gpa, as gfa_guest_save()
 * writes it; its holes stay zero and are never read) or a callback - written through
 * the pool's mapping, not the window.  Pages a balloon or report made lazy again come
 * back zeroed, not from the source.
 */
struct gfa_guest;
/* Return frames freed (> 0: the first touch tries again), or <= 0: none.  Called from
 * the guest's service thread without the guest's lock; it may call into other guests
 * (inflate their balloons), not wait for this guest's vCPUs. */
typedef int64_t (*gfa_guest_reclaim_fn)(void *ctx, struct gfa_guest *g, uint64_t frames);
/* Write the contents of [gpa, gpa + len) to dst: 0, or nonzero (the touch is refused as
 * above).  The service thread, guest's lock held: it must not call into the guest. */
typedef int (*gfa_guest_fill_fn)(void *ctx, uint64_t gpa, void *dst, uint64_t len);

#define GFA_LAZY_FILL_FD (1U << 0) /* gfa_guest_lazy.fill_fd is a fill source */

struct gfa_guest_lazy {
	gfa_guest_reclaim_fn reclaim; /* optional */
	void *reclaim_ctx;
	gfa_guest_fill_fn fill; /* optional: a fill source (not with FILL_FD) */
	void *fill_ctx;
	int fill_fd;          /* with GFA_LAZY_FILL_FD; gfa dup()s it */
	unsigned int flags;   /* GFA_LAZY_* */
	uint64_t fill_off;    /* file offset of guest physical address 0 */
	uint64_t reserved[4]; /* zero: room to grow (the head of gfa/allocator.h) */
};

struct gfa_guest_config {
	uint64_t mem_bytes;  /* guest RAM from guest physical address 0, a multiple of
				 * 4 KiB (its last 2 MiB range is backed whole); 0 with
				 * regions */
	unsigned int zone;   /* zone (NUMA node) its frames come from */
	struct gfa_pcp *pcp; /* the creating thread's cache (of `zone`), or NULL for the
				 * zone path */
	bool small_only;     /* never use order-9 blocks, at creation or on deflate (the
				 * host may still merge contiguous small blocks into a PMD
				 * mapping; gfa_guest_collapse still collapses when asked) */
	uint64_t id;         /* owner cookie; 0 = pick a unique one */
	/* How the VMM stops its vCPUs around a move of the guest's frames, from the moment
	 * the guest exists (a move can start before gfa_guest_create returns to the
	 * caller).  NULL: no vCPU and no other thread touches guest RAM while gfa calls
	 * run (a guest the VMM fills before it has vCPUs must still pass ops). */
	const struct gfa_guest_vcpu_ops *vcpu_ops;
	void *vcpu_ctx; /* passed to the ops */
	/* The host window to map the guest into, or NULL to reserve one.  The caller's: 2 MiB
	 * aligned, at least mem_bytes, reserved (a PROT_NONE mapping, say) and kept by the
	 * caller; gfa maps the guest's blocks over it and, at destroy, leaves it reserved
	 * again (PROT_NONE, no frame), so a VMM can keep a KVM memslot on it across guests. */
	void *window;
	unsigned int flags;                /* GFA_GUEST_* */
	gfa_guest_moved_fn moved_fn;       /* optional: the moved notifier */
	void *moved_ctx;                   /* passed to it */
	const struct gfa_guest_lazy *lazy; /* optional with GFA_GUEST_LAZY (added in
						 * 0.4; copied at create) */
	/* Guest RAM as guest physical regions (added in 0.5; copied at create), or NULL
	 * for [0, mem_bytes): sorted, disjoint, 4 KiB aligned, not empty; holes between
	 * them (x86's PCI hole), a first region above 0 (ARM's and RISC-V's RAM at 2 GiB)
	 * and sizes that are no multiple of 2 MiB are all fine.  The window spans them in
	 * whole 2 MiB ranges (gfa_guest_base()); a range no region touches is never
	 * backed, one a region touches in part is backed whole. */
	const struct gfa_gpa_range *regions;
	unsigned int nr_regions; /* at most GFA_GUEST_MAX_REGIONS */
	uint32_t pad0;
	uint64_t reserved[2]; /* zero: room to grow (the head of gfa/allocator.h) */
};

#define GFA_GUEST_MAX_REGIONS 64

/**
 * gfa_guest_create() - a guest whose RAM is made of pool frames
 * @b: the pool's backing
 * @cfg: struct gfa_guest_config
 *
 * Reserves a host virtual window of mem_bytes (2 MiB aligned; or uses cfg->window),
 * backs each 2 MiB range with an order-9 block when one can be had (the cache, the zone,
 * then node-local direct compaction with capture), else with the largest smaller blocks
 * available, zeroes any dirty frame, and maps the blocks into the window (MAP_SHARED |
 * MAP_FIXED of the zone memfd) with one mmap per run of blocks contiguous in the window
 * and in the memfd (a clean pool gives one run).  Registers the guest as the owner of its
 * frames so compaction can move them, and the window with a userfaultfd so moves
 * write-protect (the head of this section; the pause fallback uses the vCPU ops).  A
 * GFA_GUEST_LAZY guest takes none of this at create: each block at its first touch
 * (above).
 *
 * Return: the guest, or NULL with errno: GFA_EFAULT, GFA_EINVAL (size 0 or not 4 KiB
 * aligned; regions empty, misaligned, unsorted or overlapping, more than
 * GFA_GUEST_MAX_REGIONS, with mem_bytes, or a count without the list; a window not 2 MiB
 * aligned, a pcp of another zone or pool, a backing of another pool, vcpu_ops without
 * pause or resume or with GFA_GUEST_WP_ONLY, unknown flags, nonzero reserved words; lazy
 * and pinned, lazy settings without GFA_GUEST_LAZY, GFA_LAZY_FILL_FD without a file or
 * with a fill callback,
 * unknown lazy flags or nonzero reserved words there), userfaultfd()'s errno for a lazy
 * guest that cannot have one (as wp_errno; GFA_ECANCELED for GFA_NO_UFFD), GFA_EBADF (the
 * fill file), GFA_ERANGE (zone; a region's end past 2^64), GFA_ENOBACKING (pool without
 * backing), GFA_ENOMEM (not enough frames, or a lazy guest over 64 times its zone; no
 * frame is kept, but what the blocks taken drew from the owner's claim stays drawn:
 * unclaim and claim again before retrying; or the window's runs need more mappings than
 * vm.max_map_count allows the process: stderr names the limit), GFA_EEXIST (cfg->id is an
 * owner of the pool already), GFA_ENOSPC (owner registry full), or the
 * error of mmap for the window.
 * Context: any thread; one guest's calls are serialised by the guest's lock.  On the
 * pause fallback, not from a thread the vCPU ops wait for (a vCPU's own IO handler, e.g.
 * a virtio-balloon device): a move holds the guest's lock while it pauses the vCPUs, so
 * that thread would wait for the lock and the move for that thread.  Write-protected
 * moves wait for no thread: any thread may call in.
 */
struct gfa_guest *gfa_guest_create(struct gfa_pool *pool, struct gfa_backing *b,
				   const struct gfa_guest_config *cfg);
/**
 * gfa_guest_destroy() - unmap the window, free every frame (marked dirty), unregister
 * @g: the guest; NULL is a no-op
 *
 * Every frame is free when it returns: counted free, claimable and allocatable by any
 * owner.  They stay marked dirty until zeroed: whoever takes one first zeroes it
 * (gfa_backing_prepare(), as guests do), and the backing's zeroer zeroes the rest in the
 * background (gfa_backing_zero_quiesce()).  They go behind the clean free frames, so a
 * start takes clean frames first, then these, before any released to the host.
 *
 * Context: once, when no other thread uses the guest.
 */
void gfa_guest_destroy(struct gfa_guest *g);
/**
 * gfa_guest_forget_vcpus() - the guest's vCPUs are stopped for good
 * @g: the guest; NULL is a no-op
 *
 * The VMM is tearing the guest down: wait for a move that is pausing the vCPUs to
 * finish, and call the vCPU ops no more, so the VMM can free its vCPUs before it destroys
 * the guest.  Moves after it pause nothing.
 * Context: any thread but one the vCPU ops wait for (the guest's lock).
 */
void gfa_guest_forget_vcpus(struct gfa_guest *g);
/**
 * gfa_guest_hva() - host address of guest physical address gfa_guest_base()
 *
 * Guest physical address gpa of the guest's RAM is at gfa_guest_hva() + (gpa -
 * gfa_guest_base()); the window spans the regions' 2 MiB ranges from there.
 *
 * Return: the window, or NULL for a NULL @g.
 * Context: any thread.
 */
void *gfa_guest_hva(const struct gfa_guest *g);
/**
 * gfa_guest_base() - the guest physical address the window starts at
 *
 * The first region's start, rounded down to 2 MiB (0 for a guest made with mem_bytes).
 *
 * Return: the address, 0 for a NULL @g.
 * Context: any thread.
 */
uint64_t gfa_guest_base(const struct gfa_guest *g);
/**
 * gfa_guest_size() - the guest's RAM in bytes
 *
 * Return: the sum of its regions (mem_bytes for a guest made with it), 0 for a NULL @g.
 * Context: any thread.
 */
uint64_t gfa_guest_size(const struct gfa_guest *g);
/**
 * gfa_guest_id() - the guest's owner cookie
 *
 * Return: the cookie, 0 for a NULL @g.
 * Context: any thread.
 */
uint64_t gfa_guest_id(const struct gfa_guest *g);
/**
 * gfa_guest_gpa_to_pfn() - the frame backing a guest physical address
 * @pfn: gets it
 *
 * Return: 0, or GFA_EFAULT, GFA_ERANGE (outside the guest), GFA_ENOTFOUND (ballooned out).
 * Context: any thread (the guest's lock).
 */
int gfa_guest_gpa_to_pfn(struct gfa_guest *g, uint64_t gpa, uint64_t *pfn);

struct gfa_guest_stat {
	uint64_t mem_bytes;
	uint64_t huge_ranges;      /* 2 MiB ranges backed by one order-9 block */
	uint64_t small_ranges;     /* ranges backed by smaller blocks */
	uint64_t blocks;           /* blocks backing the guest */
	uint64_t zeroed_frames;    /* dirty frames zeroed for this guest */
	uint64_t moves;            /* blocks moved by compaction */
	uint64_t collapses;        /* ranges collapsed into one block */
	uint64_t ballooned_frames; /* frames taken away by the balloon */
	uint64_t window_mappings;  /* mmap calls that mapped the window at creation:
					 * one per run of contiguous blocks */
	uint64_t wp_moves;         /* moves and collapsed ranges made under write
					 * protection (no thread paused) */
	uint64_t wp_faults;        /* writes that faulted on a move's protection (as
					 * the service thread read them) */
	uint64_t pauses;           /* vcpu_ops pause calls (the pause fallback) */
	uint64_t paused_ns;        /* time from each pause to its resume */
	uint64_t pinned_skips;     /* moves and collapses refused: a pinned range */
	int32_t wp_errno;          /* 0: moves write-protect; else why they pause
					 * (userfaultfd()'s errno; -GFA_ECANCELED for GFA_NO_UFFD;
					 * a GFA_GUEST_PINNED guest never moves: 0) */
	uint32_t pad0;
	/* lazy guests (added in 0.4; 0 for others but populated_bytes) */
	uint64_t populated_bytes;        /* guest RAM backed by frames now */
	uint64_t lazy_bytes;             /* guest RAM the next touch takes frames for */
	uint64_t lazy_faults;            /* first touches served with a block */
	uint64_t lazy_cache_faults;      /* of them, from the faulting thread's cache */
	uint64_t lazy_huge_faults;       /* of them, with an order-9 block */
	uint64_t lazy_filled_bytes;      /* written from the fill source */
	uint64_t lazy_reclaims;          /* reclaim hook calls */
	uint64_t lazy_refused;           /* first touches that found no frame (or whose fill
					 * failed): answered with a fault */
	uint64_t balloon_punched_frames; /* (added in 0.5) ballooned (or a lazy
						 * guest's reported) frames whose host
						 * memory the call punched itself (no host
						 * return ran: gfa_backing_config) */
	uint64_t lazy_leases;            /* (added in 0.6) first touches a host pool
					  * client's pool could not serve, that leased
					  * from the service first */
	uint64_t reserved[2];            /* zero: room to grow (the head of gfa/allocator.h) */
};
/**
 * gfa_guest_stat() - the guest's counters
 * @st: gets them (reserved words zeroed)
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread (the guest's lock).
 */
int gfa_guest_stat(struct gfa_guest *g, struct gfa_guest_stat *st);

/**
 * gfa_guest_vcpu_cache() - serve a thread's first touches of a lazy guest from its cache
 * @g: a lazy guest (GFA_GUEST_LAZY)
 * @tid: the thread (gettid()), a vCPU's as a rule
 * @pcp: its cache (of the guest's pool and zone), or NULL to forget the thread
 *
 * A first touch by @tid takes its block through @pcp (the cache's holder becomes the
 * guest's service thread for that call, while @tid waits for it; a call that finds @tid
 * inside the cache takes the zone path).  Unknown threads use the zone path.  Each
 * registered thread's touches are counted (gfa_guest_vcpu_stat()).
 *
 * Return: 0, GFA_EFAULT, GFA_EINVAL (not a lazy guest, @tid <= 0, a cache of another
 * pool or zone), GFA_ENOTFOUND (forgetting a thread never registered), GFA_ENOMEM.
 * Context: any thread (the guest's lock); the cache must outlive the registration.
 */
int gfa_guest_vcpu_cache(struct gfa_guest *g, int tid, struct gfa_pcp *pcp);

struct gfa_guest_vcpu_stat {
	uint64_t faults;       /* its first touches served */
	uint64_t cache_faults; /* of them, from its own cache */
	uint64_t huge_faults;  /* of them, with an order-9 block */
	uint64_t reserved[4];  /* zero: room to grow (the head of gfa/allocator.h) */
};
/**
 * gfa_guest_vcpu_stat() - the first-touch counters of one registered thread
 * @st: gets them (reserved words zeroed)
 *
 * Return: 0, GFA_EFAULT, GFA_ENOTFOUND (@tid is not registered).
 * Context: any thread (the guest's lock).
 */
int gfa_guest_vcpu_stat(struct gfa_guest *g, int tid, struct gfa_guest_vcpu_stat *st);
/**
 * gfa_guest_save() - write the guest's RAM to a file, sparse
 * @fd: the file, open for writing
 * @off: file offset of guest physical address 0
 *
 * Writes every page that holds data at @off + its gpa and sizes the file to @off +
 * mem_bytes; pages never touched, lazy or ballooned are holes (they read zero).  Reads
 * through the pool's mapping: no lazy range is populated by it.  A lazy guest created
 * with this file as its fill source (GFA_LAZY_FILL_FD) reads the same.  The VMM stops
 * whatever writes guest RAM first, or the file holds a mix of before and after.
 *
 * Return: bytes written, GFA_EFAULT, GFA_EBADF (@fd < 0), or the error of pwrite or
 * ftruncate (GFA_ENOSPC, ...).
 * Context: any thread (the guest's lock, held throughout: moves wait).
 */
int64_t gfa_guest_save(struct gfa_guest *g, int fd, uint64_t off);

/**
 * gfa_guest_collapse() - khugepaged for one guest
 * @max_ranges: collapse at most this many ranges
 *
 * Collapses 2 MiB ranges that are backed by small blocks into order-9 blocks and maps
 * each as one huge mapping.  Each range's writers are held off once for all its pieces
 * (one write protection, or on the pause fallback one pause), the pieces copied, then
 * the range mapped at once.  A range whose collapse fails (no order-9 block, a move
 * refused) stays as it was and is not counted; a pinned range is skipped (pinned_skips).
 *
 * Return: ranges collapsed, or GFA_EFAULT (@g NULL), GFA_EAGAIN (the pause fallback is
 * pausing the vCPUs: the balloon section's head).
 * Context: any thread (the guest's lock), a vCPU's own IO handler included.
 */
int gfa_guest_collapse(struct gfa_guest *g, unsigned int max_ranges);

/**
 * gfa_guest_pin() - keep a guest range where it is: no move, collapse or balloon
 * @gpa: start of the range (any byte; the pin covers every 2 MiB range it touches)
 * @len: its length, nonzero
 *
 * For memory whose writes bypass the page tables while the pin lasts: a VFIO DMA
 * mapping, an io_uring fixed buffer, an O_DIRECT transfer in flight.  Pins nest: each
 * 2 MiB range counts its pins, and stays put until as many unpins.  Compaction's and
 * collapse's moves of a pinned block are refused (counted in pinned_skips); a balloon
 * inflate or a free page report over it is refused.  A move already in flight finishes
 * before the pin returns.
 *
 * Return: 0, or GFA_EFAULT (@g NULL), GFA_EINVAL (@len 0), GFA_ERANGE (beyond the
 * guest), GFA_EOVERFLOW (a range pinned 2^32 - 1 times; nothing changed).
 * Context: any thread (the guest's lock), as gfa_guest_collapse().
 */
int gfa_guest_pin(struct gfa_guest *g, uint64_t gpa, uint64_t len);
/**
 * gfa_guest_unpin() - undo one gfa_guest_pin() of the same range
 *
 * Return: 0, or the errors of gfa_guest_pin(), GFA_ENOTFOUND (a range it covers is not
 * pinned; nothing changed).
 * Context: as gfa_guest_pin().
 */
int gfa_guest_unpin(struct gfa_guest *g, uint64_t gpa, uint64_t len);
/**
 * gfa_guest_pinned() - whether a guest range is pinned
 *
 * Return: 1 if any 2 MiB range that [@gpa, @gpa + @len) touches is pinned (or the guest
 * is GFA_GUEST_PINNED), 0 if none, or the errors of gfa_guest_pin().
 * Context: any thread (the guest's lock).
 */
int gfa_guest_pinned(struct gfa_guest *g, uint64_t gpa, uint64_t len);

/* ---- balloon (for a VMM's virtio-balloon device) ---- */

/*
 * What a virtio-balloon device model can count on.  Ranges are absolute guest physical
 * addresses inside the guest's regions.  An inflated page reads zero from then on, and a
 * deflated one gets fresh zeroed frames: what the guest wrote to a page between giving
 * it up and getting it back is gone.  A guest may only do that without
 * VIRTIO_BALLOON_F_MUST_TELL_HOST, so a device model on gfa offers MUST_TELL_HOST (the
 * guest then deflates before it reuses a page), or it copies the page back itself.
 * Without a host return on the backing, inflate gives the host memory back by itself
 * (gfa_backing_config.no_balloon_punch); with one, the host return does, in its thread.
 * The calls may come from any thread, a vCPU's own IO handler included: write-protected
 * moves (the default) stop no thread, and on the pause fallback a call that would wait
 * for a move pausing the vCPUs returns GFA_EAGAIN instead (retry once the vCPU ran).
 */

/**
 * gfa_balloon_inflate() - take guest physical ranges away from the guest
 * @r: the ranges, 4 KiB aligned
 * @n: how many
 *
 * The window there is remapped to anonymous zero memory, so the guest reads zero if it
 * touches them again, and the frames are freed: punched out of the memfd first, as a
 * VMM's MADV_DONTNEED would, while no host return runs on the backing (counted in
 * balloon_punched_frames); else freed dirty and the host return kicked to release them
 * in its thread.  Every range is checked first; one bad range rejects the whole request
 * and changes nothing (gfa_balloon_inflate_each() takes each on its own).  When the
 * window cannot be remapped (vm.max_map_count: a page inside a block's mapping takes two
 * more VMAs) the ranges already unmapped are mapped again (end blocks may be left
 * split); a block that cannot be mapped again either is ballooned after all (counted in
 * ballooned_frames): a gfn the guest owns is always mapped, one it does not always reads
 * zero.
 *
 * Return: frames taken, or GFA_EFAULT (@g or @r NULL, @n 0 included), GFA_EINVAL (zero
 * length or misaligned), GFA_ERANGE (outside the guest's regions: a hole included),
 * GFA_EALREADY (already ballooned), GFA_EOVERLAP (ranges overlap each other), GFA_EBUSY
 * (a range is pinned: gfa_guest_pin(), GFA_GUEST_PINNED), GFA_EAGAIN (the pause fallback
 * is pausing the vCPUs: above), GFA_ENOMEM or another mmap errno (the window could not be
 * remapped).  GFA_EFAULT (with @g), GFA_EINVAL and GFA_ERANGE are counted in the pool's
 * err_* counters.
 * Context: any thread (the guest's lock).
 */
int64_t gfa_balloon_inflate(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n);
/**
 * gfa_balloon_deflate() - give the guest memory again for ballooned ranges
 * @r: the ranges, 4 KiB aligned and ballooned out
 * @n: how many
 *
 * Fresh zeroed frames are mapped back (the head of this section).  Frames a host
 * return holds in flight come back within its pass: deflate waits up to 2 s for them
 * rather than fail.
 *
 * Return: frames given, or the errors of gfa_balloon_inflate(), GFA_ENOTFOUND for a range
 * that is not (wholly) ballooned, and GFA_ENOMEM when frames cannot be had, none in
 * flight or after the wait (nothing changes then, except that frames whose window could
 * not be unmapped again stay the guest's, counted out of ballooned_frames).
 * Context: as gfa_balloon_inflate().
 */
int64_t gfa_balloon_deflate(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n);
/**
 * gfa_balloon_inflate_each() - inflate each range on its own, best effort
 * @r: the ranges
 * @n: how many (0: nothing)
 * @res: gets, per range, its frames taken or its error (those of gfa_balloon_inflate())
 *
 * For a device model that hands the guest's page list over as it came: duplicates,
 * pages already ballooned and bad addresses fail alone (a duplicate is GFA_EALREADY),
 * and every good range is taken.
 *
 * Return: the frames taken in all, or GFA_EFAULT (@g, @r or @res NULL).
 * Context: as gfa_balloon_inflate().
 */
int64_t gfa_balloon_inflate_each(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n,
				 int64_t *res);
/**
 * gfa_balloon_deflate_each() - deflate each range on its own, best effort
 * @r: the ranges
 * @n: how many (0: nothing)
 * @res: gets, per range, its frames given or its error (those of gfa_balloon_deflate())
 *
 * Return: the frames given in all, or GFA_EFAULT (@g, @r or @res NULL).
 * Context: as gfa_balloon_inflate().
 */
int64_t gfa_balloon_deflate_each(struct gfa_guest *g, const struct gfa_gpa_range *r, unsigned int n,
				 int64_t *res);

/*
 * Free page reporting (virtio-balloon's VIRTIO_BALLOON_F_REPORTING): the guest says which
 * of its pages are free; their host memory goes back to the host while the frames stay
 * the guest's.  A reporter punches the ranges out of the zone memfds through release
 * engines of its own (io_uring, one per zone, made on first use), asynchronously: the
 * calling thread never waits for the host.  After the punch the guest reads zero there
 * (before it, its old data), and the host backs a page again when the guest touches it.
 * A move of a reported block waits for the punch in flight on its old frames before
 * they are freed (the backing's moved hook), so a punch never reaches another owner.
 *
 * A reporter is destroyed before its guest.
 */
struct gfa_free_report;

/**
 * gfa_guest_report_create() - a free page reporter for a guest
 * @b: the backing the guest's frames come from
 * @g: the guest
 *
 * Return: the reporter, or NULL with errno GFA_EFAULT, GFA_EINVAL (@g is not made of
 * @b's frames), GFA_ENOMEM.
 * Context: any thread.
 */
struct gfa_free_report *gfa_guest_report_create(struct gfa_backing *b, struct gfa_guest *g);

/**
 * gfa_guest_report_destroy() - wait for every request in flight and free the reporter
 * @rep: the reporter; NULL is a no-op
 *
 * Waits for the requests' done callbacks too.
 * Context: before the guest's destroy; not from a done callback.
 */
void gfa_guest_report_destroy(struct gfa_free_report *rep);

/*
 * Called once per accepted request, after every punch of it completed: result 0, or the
 * first failure (those frames keep their host memory and data).  On a release engine's
 * thread (or in the calling thread when no frame needed a punch); once the reporter has
 * an eventfd (gfa_guest_report_eventfd()), in the thread that reaps instead.  Keep it
 * short; it must not call gfa_guest_report_flush or _destroy.
 */
typedef void (*gfa_report_done_fn)(void *cookie, int result);

/**
 * gfa_guest_report_free() - report guest physical ranges free
 * @r: the ranges, [gpa, gpa + len) each, 4 KiB aligned
 * @n: how many
 * @done: called once when every punch of the request completed
 * @cookie: passed to @done
 *
 * Every range is checked first; one bad range refuses the whole request (nothing
 * punched, @done never called), counted in the reporter's err_* counters (and
 * GFA_EFAULT with @rep, GFA_EINVAL and GFA_ERANGE in the pool's).  Gfns ballooned out
 * have no frames and are passed over (frames_unbacked).  Until @done is called the
 * caller must not balloon the ranges or destroy the guest (the guest itself must not
 * reuse the pages: virtio hands the buffer back only after done).
 *
 * Return: 0, or GFA_EFAULT (@rep, @r or @done NULL), GFA_EINVAL (@n 0, a zero length or
 * a misaligned range), GFA_ERANGE (outside the guest's regions), GFA_EOVERLAP (ranges
 * overlap each other), GFA_EBUSY (a range is pinned: gfa_guest_pin(), GFA_GUEST_PINNED),
 * GFA_EAGAIN (the pause fallback is pausing the vCPUs: the balloon section's head),
 * GFA_ENOMEM.
 * Context: any thread (the guest's lock), a vCPU's own IO handler included.
 */
int gfa_guest_report_free(struct gfa_free_report *rep, const struct gfa_gpa_range *r,
			  unsigned int n, gfa_report_done_fn done, void *cookie);

/**
 * gfa_guest_report_flush() - wait until every accepted request's done has returned
 * @timeout_ms: how long to wait at most; < 0 waits forever
 *
 * With an eventfd, requests finished but not reaped count as done, and the flush reaps
 * them: their done callbacks run in the calling thread.
 *
 * Return: 0, GFA_EFAULT, GFA_ETIMEDOUT.
 * Context: any thread but a done callback.
 */
int gfa_guest_report_flush(struct gfa_free_report *rep, int timeout_ms);
/**
 * gfa_guest_report_eventfd() - have done callbacks run in the device's own thread
 *
 * From now on a finished request waits in a queue and the returned eventfd (nonblocking)
 * becomes readable; the device's thread, polling it with its other fds, calls
 * gfa_guest_report_reap(), which runs the done callbacks there: a device model whose
 * used-ring updates are not safe from a foreign thread needs no lock against gfa's.
 * Calling it again returns the same eventfd, which the reporter closes at destroy.
 *
 * Return: the eventfd, GFA_EFAULT, or the negative errno of eventfd().
 * Context: any thread, before or between requests.
 */
int gfa_guest_report_eventfd(struct gfa_free_report *rep);
/**
 * gfa_guest_report_reap() - run the done callbacks of finished requests here
 *
 * Clears the eventfd, then calls each queued request's done callback in the calling
 * thread, in the order they finished.
 *
 * Return: callbacks run (0: none finished), or GFA_EFAULT.
 * Context: any thread but a done callback; usually the device's, on its eventfd.
 */
int gfa_guest_report_reap(struct gfa_free_report *rep);

struct gfa_guest_report_stat {
	uint64_t requests, ranges; /* accepted calls and their ranges */
	uint64_t frames_submitted; /* frames whose punch was asked for */
	uint64_t bytes_released;   /* punched: the host took them back */
	uint64_t bytes_failed;     /* punch failed: still backed */
	uint64_t frames_unbacked;  /* ballooned out: nothing to punch */
	uint64_t frames_raced;     /* moved while being submitted: left backed */
	uint64_t moves_waited;     /* moves that waited for a punch in flight */
	uint64_t inflight_runs;    /* punches in flight */
	uint64_t err_fault, err_invalid, err_range, err_overlap; /* refused requests */
	uint64_t err_pinned;  /* refused: a range is pinned (added in 0.3) */
	uint64_t reserved[8]; /* zero: room to grow (the head of gfa/allocator.h) */
};

/**
 * gfa_guest_report_stat() - the reporter's counters
 * @st: gets them
 *
 * Return: 0 or GFA_EFAULT.
 * Context: any thread.
 */
int gfa_guest_report_stat(struct gfa_free_report *rep, struct gfa_guest_report_stat *st);

/* ---- a host pool shared by many VMM processes (gfad) ---- */

/*
 * One pool for a host's VMM processes: the service (gfad) owns the zones' memfds and
 * the buddy; a client leases order-9 blocks from it in batches and runs gfa's guest
 * calls on a pool of its own that holds only those leases, mapped from the zone memfds
 * the service sends it.  gfa_guest_create(), gfa_guest_destroy(), balloon inflate and
 * deflate lease and give back through the client's backing, so a VMM changes only how
 * it gets the pool and the backing.  A process holding a zone memfd can map every
 * guest of the pool: one pool per trust domain.
 */
#define GFA_EACCES     (-EACCES)     /* the service did not admit this uid or gid */
#define GFA_ECONNRESET (-ECONNRESET) /* the service is gone (or closed us) */
#define GFA_EPROTO     (-EPROTO)     /* a reply that does not parse, or another version */

struct gfa_hostpool;

#define GFA_HOSTPOOL_REJOIN_MS 10000 /* how long a client waits for a restarted gfad */
#define GFA_HOSTPOOL_SHRINK_MS 2000  /* how long a short lease waits for others to shrink */

struct gfa_hostpool_config {
	uint64_t slack_bytes; /* free leased memory the client keeps for its next start
				 * (0: every whole free block goes back at once) */
	uint64_t reserved[7]; /* zero: room to grow (the head of gfa/allocator.h) */
};

/**
 * gfa_hostpool_attach() - connect to a host pool service and build the client's pool
 * @path: the service's socket
 * @cfg: struct gfa_hostpool_config, or NULL for the defaults
 *
 * Receives the zones' geometry and memfds, creates a pool of the same zones that holds
 * no frame until the service leases it some, and a backing over the memfds.  Each
 * 2 MiB block a guest takes is leased whole, 256 at most a round trip.
 *
 * With its first lease the client gets a shrinker from the service, and with the first
 * free its guests make it starts one thread of its own for it (a small stack; not on a
 * create's path): when another client's lease falls short, the service
 * signals it, and the thread drains this pool's vCPU caches, compacts its zones (moving
 * its guests' pages as gfa_compact_zone() does, under write protection) and gives back
 * the whole free blocks that frees.  A lease that falls short itself waits up to
 * GFA_HOSTPOOL_SHRINK_MS for what the other clients' shrinkers give back, then fails
 * GFA_ENOMEM.  gfa_hostpool_detach() stops the thread.
 *
 * A service started with a state directory (gfad --state) keeps its leases across a
 * restart.  When the connection to it ends, the call that finds it ended reconnects to
 * @path and rejoins, retrying for up to GFA_HOSTPOOL_REJOIN_MS, then sends its request
 * again; the guests run on meanwhile (their memory is mapped here).  A service that
 * does not come back, or that gave us up (it had closed our connection itself), leaves
 * every later call GFA_ECONNRESET, as without a state.
 *
 * Return: the handle, or NULL with errno: GFA_EFAULT, GFA_EINVAL (nonzero reserved
 * words; a path too long for a socket), GFA_EACCES (the service did not admit our uid
 * and gid; connect()'s own refusal of the socket's mode is passed on too),
 * GFA_ECONNRESET, GFA_EPROTO (another protocol version), GFA_ENOMEM, or the errno of
 * socket() or connect().
 * Context: any thread.
 */
struct gfa_hostpool *gfa_hostpool_attach(const char *path, const struct gfa_hostpool_config *cfg);
/**
 * gfa_hostpool_detach() - close the connection and free the client's pool
 * @hp: the handle; NULL is a no-op
 *
 * The service frees every lease the client holds when the connection ends, as it does
 * when the process dies.
 * Context: once, after every guest on the pool was destroyed.
 */
void gfa_hostpool_detach(struct gfa_hostpool *hp);
/**
 * gfa_hostpool_pool() - the client's pool, for gfa_guest_create()
 * @hp: the handle
 *
 * Return: the pool, NULL for a NULL @hp.
 * Context: any thread.
 */
struct gfa_pool *gfa_hostpool_pool(const struct gfa_hostpool *hp);
/**
 * gfa_hostpool_backing() - the client's backing, for gfa_guest_create()
 * @hp: the handle
 *
 * Return: the backing, NULL for a NULL @hp.
 * Context: any thread.
 */
struct gfa_backing *gfa_hostpool_backing(const struct gfa_hostpool *hp);

struct gfa_hostpool_stat {
	uint64_t nr_frames;     /* the service's pool */
	uint64_t free_frames;   /* free there, in release to the host too (leases are not) */
	uint64_t leased_frames; /* leased to all clients */
	uint64_t mine_frames;   /* leased to this client */
	uint64_t clients;       /* connected now */
	uint64_t clients_total; /* ever admitted */
	uint64_t malformed;     /* packets that closed their connection */
	uint64_t refused;       /* requests refused (another's block, a bad zone) */
	uint64_t denied;        /* connections not admitted */
	uint64_t gone_frames;   /* leases freed because their client went away */
	uint64_t round_trips;   /* this client's requests so far */
	uint64_t dirty_frames;  /* free frames the service has still to zero (it
					 * zeroes what clients gave back while idle) */
	int32_t check;          /* the service's gfa_backing_check(): 0 is clean */
	uint32_t pad;
	uint64_t claimed_frames; /* still claimed by all clients (gfa_hostpool_claim()) */
	uint64_t rejoins;        /* (added in 0.6) times this client rejoined a restarted
				  * service (gfad --state) */
	uint64_t reserved[1];    /* zero */
};

/**
 * gfa_hostpool_stat() - the service's counters, and its pool checked
 * @hp: the handle
 * @st: gets them
 * @text: may be NULL; else gets the service's pool as buddyinfo, pagetypeinfo and
 *        vmstat print it and its counters, NUL-terminated
 * @len: bytes at @text
 *
 * Return: the text's length (as snprintf(): it may be longer than @len), GFA_EFAULT,
 * GFA_ECONNRESET, GFA_EPROTO.
 * Context: any thread.
 */
int gfa_hostpool_stat(struct gfa_hostpool *hp, struct gfa_hostpool_stat *st, char *text,
		      size_t len);

/**
 * gfa_hostpool_claim() - reserve free frames of one of the service's zones for this client
 * @hp: the handle
 * @zone: the zone (the client's pool has the service's zones, at the same pfns)
 * @nr_frames: frames to reserve
 *
 * gfa_zone_claim() on the service's pool, this client its owner: while the claim is
 * outstanding, other clients' leases fail rather than eat into it and this client's
 * leases (its creates, a collapse's target) draw from it, so VM starts in many
 * processes cannot overcommit the host pool.  What the leases drew stays drawn (a lease
 * given back does not refill the claim), as in-process.  The claim goes when the client
 * detaches, is killed, or unclaims.
 *
 * Return: 0, or GFA_EFAULT, GFA_ERANGE (@zone), GFA_EINVAL (@nr_frames 0), GFA_EEXIST
 * (this client has a claim on @zone), GFA_ENOSPC (more than the zone's unclaimed free
 * frames, or the zone's claim table is full), GFA_ECONNRESET, GFA_EPROTO.  Nothing
 * changes on error; GFA_EINVAL and GFA_ERANGE are counted in the client pool's err_*
 * (the call never reaches the service), what the service refuses in its refused.
 * Context: any thread.
 */
int gfa_hostpool_claim(struct gfa_hostpool *hp, unsigned int zone, uint64_t nr_frames);
/**
 * gfa_hostpool_unclaim() - drop this client's claim on a zone of the service
 * @hp: the handle
 * @zone: the zone
 *
 * Return: the frames the claim still reserved (>= 0), or GFA_EFAULT, GFA_ERANGE,
 * GFA_ENOTFOUND (no claim of this client's there), GFA_ECONNRESET, GFA_EPROTO.
 * Context: any thread.
 */
int64_t gfa_hostpool_unclaim(struct gfa_hostpool *hp, unsigned int zone);

#ifdef __cplusplus
}
#endif
#endif /* GFA_VMM_H */
