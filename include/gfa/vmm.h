/* SPDX-License-Identifier: MIT */
/*
 * gfa vmm layer: host backing of a pool (one memfd per zone), guests whose RAM is made
 * of pool frames, and the parts a VMM wires to them.  The layer's API is split over a
 * few headers, all included here:
 *   gfa/kvm.h      the KVM API wrapper (VMs, memslots, vCPUs, the run loop, statistics)
 *   gfa/release.h  the io_uring engine that returns memory to the host
 *   gfa/domain.h   libvirt domain import
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
#include <gfa/kvm.h>
#include <gfa/release.h>
#include <gfa/domain.h>

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
 * inside one zone).  The mark calls ignore such blocks.  Any thread (bitmap updated
 * atomically).
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
 * or clean as they are). */
struct gfa_backing_zone_stat {
	uint64_t free_clean;            /* populated and known to be zero */
	uint64_t free_dirty;            /* populated, an old owner's data (zeroed on hand-out) */
	uint64_t free_released;         /* not backed by the host; zero when touched */
};
int gfa_backing_zone_stat(struct gfa_backing *b, unsigned int zone, struct gfa_backing_zone_stat *st);

/* What the host does with huge pages, read from sysfs, never assumed. */
struct gfa_thp_report {
	char thp_enabled[32];           /* transparent_hugepage/enabled, e.g. "madvise" */
	char shmem_enabled[32];         /* transparent_hugepage/shmem_enabled, e.g. "never" */
	bool shmem_thp_possible;        /* shmem_enabled lets MADV_HUGEPAGE memfds use THP */
};
int gfa_host_thp_report(struct gfa_thp_report *r);
/*
 * Bytes mapped with PMDs (ShmemPmdMapped + FilePmdMapped + AnonHugePages in
 * /proc/self/smaps: memfd windows and the anonymous kernel baselines alike) over the
 * mappings that overlap [addr, addr + len).  Returns bytes or a negative errno.
 */
int64_t gfa_smaps_pmd_bytes(const void *addr, size_t len);
/* Resident bytes (Rss) of the mappings overlapping [addr, addr + len). */
int64_t gfa_smaps_rss_bytes(const void *addr, size_t len);

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

struct gfa_guest_config {
	uint64_t mem_bytes;     /* guest RAM, a multiple of 2 MiB */
	unsigned int zone;      /* zone (NUMA node) its frames come from */
	struct gfa_pcp *pcp;    /* the creating thread's cache (of `zone`), or NULL for the
				 * zone path */
	bool small_only;        /* never use order-9 blocks, at creation or on deflate (the
				 * host may still merge contiguous small blocks into a PMD
				 * mapping; gfa_guest_collapse still collapses when asked) */
	uint64_t id;            /* owner cookie; 0 = pick a unique one */
};

/* How the VMM stops and restarts the guest's vCPUs while gfa moves its frames. */
struct gfa_guest_vcpu_ops {
	int (*pause)(void *ctx);        /* return once no vCPU touches guest RAM */
	int (*resume)(void *ctx);
};

/*
 * Create a guest: reserve a host virtual window of mem_bytes (2 MiB aligned), back each
 * 2 MiB range with an order-9 block when one can be had (the cache, the zone, then
 * node-local direct compaction with capture), else with the largest smaller blocks
 * available, map each block into the window (MAP_SHARED | MAP_FIXED of the zone memfd)
 * and zero any dirty frame first.  Registers the guest as the owner of its frames so
 * compaction can move them (pausing vCPUs through the ops, once set).
 * Returns NULL with errno: EFAULT, EINVAL (size 0 or not 2 MiB aligned, a pcp of another
 * zone or pool, or a backing of another pool), ERANGE (zone), ENODEV (pool without backing),
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
 * Set the ops that stop and restart the guest's vCPUs around a move of its frames (NULL:
 * none).  Compaction may move the guest's frames as soon as gfa_guest_create returns:
 * set them before anything writes guest memory, or a write racing a move (copy, then
 * remap) is lost.  Any thread (the guest's lock).
 */
void gfa_guest_set_vcpu_ops(struct gfa_guest *g, const struct gfa_guest_vcpu_ops *ops, void *ctx);
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

/* ---- VMs: a guest plus its vCPUs ---- */

struct gfa_vm;

enum gfa_vm_kvm {
	GFA_VM_KVM_AUTO = 0,    /* KVM when /dev/kvm works, else host threads */
	GFA_VM_KVM_ON,          /* KVM or fail (ENODEV) */
	GFA_VM_KVM_OFF,         /* host threads run the workload on the guest window */
};

struct gfa_vm_config {
	uint64_t mem_bytes;     /* guest RAM, a multiple of 2 MiB, at least 4 MiB */
	unsigned int vcpus;     /* 1..64 */
	unsigned int zone;
	enum gfa_vm_kvm kvm;
	bool small_only;        /* back with blocks below order 9 only.  Note: adjacent
				 * blocks at adjacent memfd offsets still merge into one host
				 * mapping, which the host may map with PMDs anyway */
	struct gfa_pcp *pcp;    /* cache of the creating thread, or NULL */
};

/*
 * The first 2 MiB of a VM's RAM is its "firmware" range: GDT, page tables and the test
 * guest's code live there; vCPU workloads use [GFA_VM_RAM_START, mem_bytes), split
 * evenly between the vCPUs.
 */
#define GFA_VM_RAM_START (2ULL << 20)

/*
 * Create a VM: a gfa_guest for its RAM, then (KVM mode) a KVM VM with the guest window
 * as memslot 0, identity page tables with 2 MiB pages, the test guest's code and one
 * KVM vCPU per vCPU; or (thread mode) host threads that stand in for vCPUs.  Every vCPU
 * gets a gfa cache of its own.  Compaction moves of the VM's frames pause its vCPUs.
 * Returns NULL with errno: EFAULT, EINVAL (size, vcpus or kvm mode), ENODEV (KVM required
 * but unavailable), EFBIG (KVM required, but above 508 GiB the test guest's identity map
 * does not fit below GFA_VM_RAM_START; AUTO falls back to threads), ENOMEM, or a KVM
 * error.  Thread rules: one thread drives a VM.
 */
struct gfa_vm *gfa_vm_create(struct gfa_pool *pool, struct gfa_backing *b,
			     const struct gfa_vm_config *cfg);
void gfa_vm_destroy(struct gfa_vm *vm);
struct gfa_guest *gfa_vm_guest(struct gfa_vm *vm);
/* Whether the vCPUs are KVM vCPUs; why not (if not) in *why. */
bool gfa_vm_is_kvm(const struct gfa_vm *vm, const char **why);

/*
 * Run the test workload on every vCPU at once (each on its slice) and wait: FILL
 * writes the pattern (gpa ^ seed) and checks each vCPU's reported checksum against the
 * host's expectation; VERIFY counts words that differ.  Returns 0 when the checksums
 * match and *mismatches (if non-NULL) gets the words that differed (VERIFY), -EIO on a
 * checksum mismatch, or a KVM run error.
 */
int gfa_vm_run(struct gfa_vm *vm, uint32_t flags, uint64_t seed, uint64_t *mismatches);
/*
 * The same on the first `bytes` of each vCPU's slice, rounded up to whole 8-byte words
 * (0 = all of it): software KVM
 * (kvm_pvm) emulates guests at about a million instructions a second, so callers keep
 * guest-side work small there.
 */
int gfa_vm_run_part(struct gfa_vm *vm, uint32_t flags, uint64_t seed, uint64_t bytes,
		    uint64_t *mismatches);
/* 1 when /dev/kvm is a software KVM (kvm_pvm): correct but not fast. */
int gfa_kvm_is_software(void);

/* KVM's pages_4k / pages_2m for the VM (-EOPNOTSUPP in thread mode). */
int gfa_vm_kvm_pages(struct gfa_vm *vm, uint64_t *pages_4k, uint64_t *pages_2m);

#ifdef __cplusplus
}
#endif
#endif /* GFA_VMM_H */
