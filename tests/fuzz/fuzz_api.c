// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the input is a program of API calls on a small pool (1-3 zones of
 * 2-8 MiB, backed by memfds most of the time).  The target keeps a model of what it
 * owns - its blocks, where they are, which frames hold its data, the ranges it has in
 * flight, its claims and owners - and after every call checks:
 *   - the result is the one the headers promise for that input (bad input is made bad
 *     in one way at a time, so exactly one error applies);
 *   - the err_* counters rose by one for a GFA_E* error of the allocator's, else not;
 *   - gfa_pool_check (gfa_backing_check with a backing) passes;
 *   - every model block is allocated where the model says, and the frames add up:
 *     free + the model's blocks + its frames in flight = the pool;
 *   - memory: a GFA_BACKING_ZERO block, a prepared block and a block given back
 *     released read zero where the model knows data was; the model's data survives
 *     every move.
 * Any violation aborts (libFuzzer reports it as a crash with the input).
 *
 * Owners' migrate ops follow the mode they were registered with: move, refuse, fail,
 * or unregister themselves on their n-th call (and free their context, so a call after
 * it is a use-after-free ASan reports).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <gfa/allocator.h>
#include <gfa/numa.h>
#include <gfa/vmm.h>
#include "allocator/layers.h"
#include "common/compiler.h"

#define FZ_MAX_BLOCKS   96
#define FZ_MAX_OPS      24
#define FZ_MAX_INFLIGHT 32
#define FZ_OWNERS       4 /* owner cookies 1..4; 0 is used unregistered */
#define FZ_MAX_PFNS     (3 * 3 * 1024)
#define FZ_TAG          0x67666166757a7aULL
#define FZ_GUEST_GFNS   (3 * GFA_PAGEBLOCK_FRAMES)

/* ---- input ---- */

struct fz_in {
	const uint8_t *p;
	size_t n;
};

static uint8_t in8(struct fz_in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static uint32_t in16(struct fz_in *in)
{
	return in8(in) | (uint32_t)in8(in) << 8;
}

/* ---- the model ---- */

struct fz_block {
	uint64_t pfn;
	unsigned int order, mt;
	uint64_t owner;
	uint64_t tag; /* what its first frame holds (data written), 0: nothing */
};

enum fz_mode { MODE_MOVE, MODE_REFUSE, MODE_FAIL, MODE_UNREG, MODE_FLAKY, MODE_NR };

struct fz_owner_ctx { /* malloc'd per registration, freed when unregistered */
	struct gfa_owner_ops ops;
	uint64_t owner;
	enum fz_mode mode;
	unsigned int calls, unreg_at;
	int unreg_answer;
	int batches; /* open compaction batches (atomic: kcompactd) */
};

struct fz_range {
	uint64_t pfn, nr;
	bool populate; /* taken by populate_take (released frames) */
};

struct fz {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_pcp *pcp[2];
	unsigned int nr_zones;
	uint64_t zstart[3], znr[3], total, end_pfn;
	struct fz_block blk[FZ_MAX_BLOCKS];
	unsigned int nr_blk;
	int16_t at[FZ_MAX_PFNS];   /* pfn -> block index, -1 */
	uint8_t data[FZ_MAX_PFNS]; /* the frame holds data of ours (not zero) */
	uint8_t live[FZ_MAX_PFNS]; /* ... of the block holding it now (else stale) */
	uint64_t val[FZ_MAX_PFNS]; /* what a live frame's first word holds */
	uint8_t inflight[FZ_MAX_PFNS];
	struct fz_range fl[FZ_MAX_INFLIGHT];
	unsigned int nr_fl;
	struct fz_owner_ctx *owner[FZ_OWNERS + 1];
	bool claim[3][FZ_OWNERS + 1];
	int64_t collapsed_at;
	/* one guest at a time: its frames as the pool has them (fz_guest_scan) */
	struct gfa_guest *g;
	uint64_t gid, gnr, gframes, gblocks;
	int32_t ghead[FZ_MAX_PFNS]; /* head pfn of the guest's block there, -1 */
	uint8_t gorder[FZ_MAX_PFNS];
	uint64_t gblk[FZ_GUEST_GFNS]; /* the heads the last scan found */
	uint8_t gball[FZ_GUEST_GFNS]; /* ballooned out */
	uint8_t gzero[FZ_GUEST_GFNS]; /* held our data once, must read zero now */
	uint64_t gval[FZ_GUEST_GFNS]; /* what a gfn's first word holds, 0: not written */
	/* pins per 2 MiB range, and the pfns a pinned range's gfns had when it was
	 * pinned first (UINT64_MAX: ballooned then): they must never change */
	uint32_t gpin[FZ_GUEST_GFNS / GFA_PAGEBLOCK_FRAMES];
	uint64_t gpin_pfn[FZ_GUEST_GFNS];
	uint64_t next_tag;
	struct gfa_vmstat vs;       /* counters after the last call */
	struct fz_block last_freed; /* for a second free of it */
	struct fz_in *in;
	int op;
	const char *what;
};

static struct fz F;

static void __attribute__((noreturn, format(printf, 1, 2))) fz_fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fuzz_api: op %d (%s): ", F.op, F.what ? F.what : "?");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

#define FZ_ASSERT(c, ...)                     \
	do {                                  \
		if (!(c))                     \
			fz_fail(__VA_ARGS__); \
	} while (0)

static int fz_zone_of(uint64_t pfn)
{
	for (unsigned int z = 0; z < F.nr_zones; z++)
		if (pfn >= F.zstart[z] && pfn < F.zstart[z] + F.znr[z])
			return (int)z;
	return -1;
}

static void *fz_addr(uint64_t pfn)
{
	return F.b ? gfa_pfn_to_addr(F.pool, pfn) : NULL;
}

static void fz_map(unsigned int i, bool set)
{
	const struct fz_block *k = &F.blk[i];

	for (uint64_t p = k->pfn; p < k->pfn + (1UL << k->order); p++) {
		FZ_ASSERT(!set || F.at[p] < 0, "pfn %lu of a new block is block %d's",
			  (unsigned long)p, F.at[p]);
		FZ_ASSERT(!set || !F.inflight[p], "pfn %lu of a new block is in flight",
			  (unsigned long)p);
		F.at[p] = set ? (int16_t)i : -1;
	}
}

/* The frames of [pfn, pfn + n) that hold stale data of ours read zero (and hold none
 * now); the block's own live data stays. */
static void fz_expect_zero(uint64_t pfn, uint64_t n, const char *why)
{
	if (!F.b)
		return;
	for (uint64_t p = pfn; p < pfn + n; p++) {
		const uint64_t *w;

		if (!F.data[p] || F.live[p])
			continue;
		w = fz_addr(p);
		FZ_ASSERT(!w[0] && !w[1], "%s: pfn %lu holds %lx %lx, not zero", why,
			  (unsigned long)p, (unsigned long)w[0], (unsigned long)w[1]);
		F.data[p] = 0;
	}
}

static void fz_write(unsigned int i)
{
	struct fz_block *k = &F.blk[i];
	uint64_t *w = fz_addr(k->pfn);

	if (!w)
		return;
	k->tag = FZ_TAG ^ ++F.next_tag;
	w[0] = k->tag;
	w[1] = k->pfn;
	F.val[k->pfn] = k->tag;
	F.data[k->pfn] = F.live[k->pfn] = 1;
}

/* A block's live data moves with it (the op copies what the model knows is there). */
static void fz_move_data(uint64_t src, uint64_t dst, unsigned int order)
{
	if (!F.b)
		return;
	for (uint64_t i = 0; i < (1UL << order); i++) {
		if (!F.live[src + i])
			continue;
		memcpy(fz_addr(dst + i), fz_addr(src + i), 16);
		F.val[dst + i] = F.val[src + i];
		F.live[src + i] = 0;
		F.data[dst + i] = F.live[dst + i] = 1;
	}
}

/* Does the block hold live data of ours (its own, or pieces collapsed into it)? */
static bool fz_holds(const struct fz_block *k)
{
	return memchr(F.live + k->pfn, 1, 1UL << k->order) != NULL;
}

/* Freed: what the block held is stale now. */
static void fz_stale(uint64_t pfn, unsigned int order)
{
	memset(F.live + pfn, 0, 1UL << order);
}

/* The block's live data is still there. */
static void fz_verify(const struct fz_block *k, uint64_t at)
{
	if (!F.b)
		return;
	for (uint64_t p = at; p < at + (1UL << k->order); p++) {
		const uint64_t *w;

		if (!F.live[p])
			continue;
		w = fz_addr(p);
		FZ_ASSERT(w[0] == F.val[p],
			  "block at %lu (order %u) lost its data at %lu: %lx, "
			  "want %lx",
			  (unsigned long)at, k->order, (unsigned long)p, (unsigned long)w[0],
			  (unsigned long)F.val[p]);
	}
}

static unsigned int fz_add(uint64_t pfn, unsigned int order, unsigned int mt, uint64_t owner)
{
	unsigned int i = F.nr_blk++;

	FZ_ASSERT(i < FZ_MAX_BLOCKS, "model full");
	FZ_ASSERT(!(pfn & ((1UL << order) - 1)), "pfn %lu not aligned to order %u",
		  (unsigned long)pfn, order);
	FZ_ASSERT(pfn + (1UL << order) <= F.end_pfn && fz_zone_of(pfn) >= 0 &&
			  fz_zone_of(pfn) == fz_zone_of(pfn + (1UL << order) - 1),
		  "block %lu order %u outside a zone", (unsigned long)pfn, order);
	F.blk[i] = (struct fz_block){ pfn, order, mt, owner, 0 };
	fz_map(i, true);
	return i;
}

/* Drop a block already unmapped, its data kept live (it is the new block's). */
static void fz_remove_unmapped(unsigned int i)
{
	unsigned int last = --F.nr_blk;

	if (i != last) {
		fz_map(last, false);
		F.blk[i] = F.blk[last];
		fz_map(i, true);
	}
}

static void fz_remove(unsigned int i)
{
	unsigned int last = --F.nr_blk;

	fz_stale(F.blk[i].pfn, F.blk[i].order);
	fz_map(i, false);
	if (i != last) {
		fz_map(last, false);
		F.blk[i] = F.blk[last];
		fz_map(i, true);
	}
}

/* A new block from an allocation call: in its zone, not overlapping anything. */
static void fz_got(int64_t pfn, int zone, unsigned int order, unsigned int mt, uint64_t owner,
		   bool zeroed)
{
	unsigned int i;

	FZ_ASSERT(pfn >= 0, "negative pfn %ld", (long)pfn);
	FZ_ASSERT(zone < 0 || fz_zone_of((uint64_t)pfn) == zone, "block %ld not in zone %d",
		  (long)pfn, zone);
	i = fz_add((uint64_t)pfn, order, mt, owner);
	for (uint64_t p = (uint64_t)pfn; p < (uint64_t)pfn + (1UL << order); p++)
		FZ_ASSERT(!F.live[p], "new block %ld holds live data at %lu", (long)pfn,
			  (unsigned long)p);
	if (zeroed)
		fz_expect_zero((uint64_t)pfn, 1UL << order, "GFA_BACKING_ZERO block");
	if (in8(F.in) & 1)
		fz_write(i);
}

/* ---- the guest's frames (it allocates and moves them itself) ---- */

static int fz_guest_block(void *arg, uint64_t pfn, unsigned int order, enum gfa_migratetype mt,
			  uint64_t owner)
{
	(void)arg, (void)mt;
	if (owner != F.gid)
		return 0;
	for (uint64_t p = pfn; p < pfn + (1UL << order); p++) {
		F.ghead[p] = (int32_t)pfn;
		F.gorder[p] = (uint8_t)order;
	}
	FZ_ASSERT(F.gblocks < FZ_GUEST_GFNS, "guest blocks");
	F.gblk[F.gblocks++] = pfn;
	F.gframes += 1UL << order;
	return 0;
}

static void fz_guest_scan(void)
{
	/* forget the last scan's blocks (not the whole map: this runs several times a call) */
	for (uint64_t i = 0; i < F.gblocks; i++) {
		uint64_t pfn = F.gblk[i];

		memset(F.ghead + pfn, 0xff, sizeof(F.ghead[0]) << F.gorder[pfn]);
	}
	F.gframes = F.gblocks = 0;
	if (F.g)
		FZ_ASSERT(gfa_pool_for_each_allocated(F.pool, fz_guest_block, NULL) == 0,
			  "for_each");
}

static uint64_t *fz_gword(uint64_t gfn)
{
	return (uint64_t *)((char *)gfa_guest_hva(F.g) + (gfn << GFA_FRAME_SHIFT));
}

/* The guest's memory reads what it wrote, and zero where its data went away. */
static void fz_guest_verify(void)
{
	for (uint64_t gfn = 0; F.g && gfn < F.gnr; gfn++) {
		if (F.gval[gfn])
			FZ_ASSERT(*fz_gword(gfn) == F.gval[gfn], "guest gfn %lu: %lx, want %lx",
				  (unsigned long)gfn, (unsigned long)*fz_gword(gfn),
				  (unsigned long)F.gval[gfn]);
		else if (F.gzero[gfn])
			FZ_ASSERT(!*fz_gword(gfn), "guest gfn %lu (%s) reads %lx, not zero",
				  (unsigned long)gfn, F.gball[gfn] ? "ballooned" : "deflated",
				  (unsigned long)*fz_gword(gfn));
	}
}

/* ---- the owners' ops ---- */

static int fz_block_at(uint64_t pfn)
{
	return pfn < F.end_pfn ? F.at[pfn] : -1;
}

static void fz_unregister_self(struct fz_owner_ctx *c)
{
	uint64_t owner = c->owner;

	FZ_ASSERT(gfa_owner_register(F.pool, owner, NULL, NULL) == 0,
		  "an op's unregistering of its owner failed");
	FZ_ASSERT(F.owner[owner] == c, "owner %lu's context", (unsigned long)owner);
	F.owner[owner] = NULL;
	free(c); /* allocator.h: the owner may free ctx once unregistering returns */
}

static int fz_migrate(void *ctx, uint64_t owner, uint64_t src, uint64_t dst, unsigned int order)
{
	struct fz_owner_ctx *c = ctx;
	int i = fz_block_at(src), answer = 0;
	struct fz_block *k;

	FZ_ASSERT(owner >= 1 && owner <= FZ_OWNERS && F.owner[owner] == c,
		  "migrate op called for owner %lu with a context not registered",
		  (unsigned long)owner);
	FZ_ASSERT(i >= 0 && F.blk[i].pfn == src, "migrate of %lu: no block of ours there",
		  (unsigned long)src);
	k = &F.blk[i];
	FZ_ASSERT(k->owner == owner && k->order == order && k->mt == GFA_MT_MOVABLE,
		  "migrate of %lu order %u owner %lu: the block is order %u owner %lu mt %u",
		  (unsigned long)src, order, (unsigned long)owner, k->order,
		  (unsigned long)k->owner, k->mt);
	FZ_ASSERT(dst + (1UL << order) <= F.end_pfn && !(dst & ((1UL << order) - 1)) &&
			  fz_zone_of(dst) == fz_zone_of(src),
		  "migrate target %lu order %u", (unsigned long)dst, order);
	for (uint64_t p = dst; p < dst + (1UL << order); p++)
		FZ_ASSERT(F.at[p] < 0 || F.at[p] == i, "migrate target %lu: pfn %lu is block %d's",
			  (unsigned long)dst, (unsigned long)p, F.at[p]);
	c->calls++;
	switch (c->mode) {
	case MODE_REFUSE:
		answer = c->calls & 1 ? -EAGAIN : -EBUSY;
		break;
	case MODE_FAIL:
		answer = -EIO;
		break;
	case MODE_FLAKY:
		answer = c->calls % 3 == 2 ? -EAGAIN : 0;
		break;
	case MODE_UNREG:
		answer = c->calls >= c->unreg_at ? c->unreg_answer : 0;
		break;
	default:
		break;
	}
	if (!answer) {
		fz_verify(k, src);
		fz_move_data(src, dst, order);
		/* the block may overlap its own target (a collapse's move back) */
		fz_map((unsigned int)i, false);
		k->pfn = dst;
		fz_map((unsigned int)i, true);
	}
	if (c->mode == MODE_UNREG && c->calls >= c->unreg_at)
		fz_unregister_self(c);
	return answer;
}

/* Batches open and close in pairs, and only around compaction's moves of the owner. */
static void fz_batch_begin(void *ctx, uint64_t owner)
{
	struct fz_owner_ctx *c = ctx;

	FZ_ASSERT(c->owner == owner, "batch_begin of owner %lu to %lu's ops", (unsigned long)owner,
		  (unsigned long)c->owner);
	__atomic_add_fetch(&c->batches, 1, __ATOMIC_RELAXED);
}

static void fz_batch_end(void *ctx, uint64_t owner)
{
	struct fz_owner_ctx *c = ctx;

	FZ_ASSERT(c->owner == owner, "batch_end of owner %lu to %lu's ops", (unsigned long)owner,
		  (unsigned long)c->owner);
	FZ_ASSERT(__atomic_sub_fetch(&c->batches, 1, __ATOMIC_RELAXED) >= 0,
		  "batch_end without its batch_begin");
}

static void fz_collapsed(void *ctx, uint64_t owner, uint64_t dst)
{
	struct fz_owner_ctx *c = ctx;

	FZ_ASSERT(F.owner[owner] == c, "collapsed op of an owner not registered");
	F.collapsed_at = (int64_t)dst;
}

/* ---- checks after every call ---- */

static const size_t fz_err_off[] = {
#define FZ_ERR_OFF(name) offsetof(struct gfa_vmstat, name),
	GFA_VMSTAT_ITEMS(FZ_ERR_OFF)
#undef FZ_ERR_OFF
};
static const char *const fz_err_name[] = {
#define FZ_ERR_NAME(name) #name,
	GFA_VMSTAT_ITEMS(FZ_ERR_NAME)
#undef FZ_ERR_NAME
};
#define FZ_NR_ITEMS ARRAY_SIZE(fz_err_off)

static uint64_t vs_get(const struct gfa_vmstat *vs, size_t off)
{
	return *(const uint64_t *)((const char *)vs + off);
}

/* The err_* counter an allocator error is counted in (by the GFA_E* names). */
static const char *fz_err_counter(int err)
{
	static const struct {
		int err;
		const char *name;
	} map[] = {
		{ GFA_EFAULT, "err_fault" },
		{ GFA_ERANGE, "err_range" },
		{ GFA_EALIGN, "err_align" },
		{ GFA_EINVAL, "err_inval" },
		{ GFA_EORDER, "err_order" },
		{ GFA_EMIGRATE, "err_migratetype" },
		{ GFA_EDOUBLEFREE, "err_double_free" },
		{ GFA_EWRONGORDER, "err_wrong_order" },
		{ GFA_ENOTHEAD, "err_not_head" },
		{ GFA_EOWNER, "err_owner" },
		{ GFA_EBUSY, "err_busy" },
		{ GFA_ETHREAD, "err_thread" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (map[i].err == err)
			return map[i].name;
	return NULL;
}

/*
 * counted: the call's error is one of the allocator's GFA_E* errors for this call
 * (not -EEXIST, -ENOSPC, the registry's -ENOENT, ENOMEM), so exactly its counter
 * rises by one; otherwise no err_* counter moves.
 */
static void fz_check_counters(int err, bool counted)
{
	struct gfa_vmstat vs;
	const char *want = counted ? fz_err_counter(err) : NULL;

	FZ_ASSERT(gfa_pool_vmstat(F.pool, &vs) == 0, "vmstat");
	FZ_ASSERT(!counted || want, "error %d counted in no err_* counter", err);
	for (size_t i = 0; i < FZ_NR_ITEMS; i++) {
		uint64_t before = vs_get(&F.vs, fz_err_off[i]), now = vs_get(&vs, fz_err_off[i]);
		uint64_t rise = want && !strcmp(fz_err_name[i], want) ? 1 : 0;

		if (strncmp(fz_err_name[i], "err_", 4))
			continue;
		FZ_ASSERT(now == before + rise, "%s went %lu -> %lu after error %d (%s)",
			  fz_err_name[i], (unsigned long)before, (unsigned long)now, err,
			  counted ? "counted" : "not counted");
	}
	F.vs = vs;
}

static void fz_check_pool(void)
{
	char msg[256];
	uint64_t free_frames = 0, held = 0, fl = 0;
	int err = F.b ? gfa_backing_check(F.b, msg, sizeof(msg)) :
			gfa_pool_check(F.pool, msg, sizeof(msg));

	FZ_ASSERT(!err, "check: %d %s", err, msg);
	for (unsigned int z = 0; z < F.nr_zones; z++) {
		struct gfa_zone_stat st;

		FZ_ASSERT(gfa_zone_stat(F.pool, z, &st) == 0, "zone_stat");
		free_frames += st.nr_free;
	}
	for (unsigned int i = 0; i < F.nr_blk; i++) {
		const struct fz_block *k = &F.blk[i];
		struct gfa_frame_info fi;

		FZ_ASSERT(gfa_frame_lookup(F.pool, k->pfn, &fi) == 0, "lookup");
		FZ_ASSERT(fi.state == GFA_FRAME_ALLOCATED && fi.head_pfn == k->pfn &&
				  fi.order == k->order && fi.owner == k->owner && fi.mt == k->mt,
			  "block %lu order %u owner %lu mt %u: the pool says state %d head %lu "
			  "order %u owner %lu mt %d",
			  (unsigned long)k->pfn, k->order, (unsigned long)k->owner, k->mt, fi.state,
			  (unsigned long)fi.head_pfn, fi.order, (unsigned long)fi.owner, fi.mt);
		held += 1UL << k->order;
	}
	for (unsigned int i = 0; i < F.nr_fl; i++)
		fl += F.fl[i].nr;
	fz_guest_scan();
	FZ_ASSERT(free_frames + held + fl + F.gframes == F.total,
		  "frames: free %lu + held %lu + in flight %lu + the guest's %lu != %lu",
		  (unsigned long)free_frames, (unsigned long)held, (unsigned long)fl,
		  (unsigned long)F.gframes, (unsigned long)F.total);
	/* vmstat: what callers hold, in blocks */
	FZ_ASSERT(F.vs.pgalloc_blocks - F.vs.pgfree_blocks == F.nr_blk + F.gblocks,
		  "pgalloc_blocks - pgfree_blocks = %ld, the model holds %u blocks, the guest %lu",
		  (long)(F.vs.pgalloc_blocks - F.vs.pgfree_blocks), F.nr_blk,
		  (unsigned long)F.gblocks);
	fz_guest_verify();
}

static bool fz_trace; /* FUZZ_TRACE=1: one line per call, to read a crash's input */

/* A pinned range never moves: its gfns keep the frames they had when it was pinned. */
static void fz_check_pins(void)
{
	for (uint64_t gfn = 0; F.g && gfn < F.gnr; gfn++) {
		uint64_t pfn;

		if (!F.gpin[gfn / GFA_PAGEBLOCK_FRAMES] || F.gpin_pfn[gfn] == UINT64_MAX)
			continue;
		FZ_ASSERT(!gfa_guest_gpa_to_pfn(F.g, gfn << GFA_FRAME_SHIFT, &pfn) &&
				  pfn == F.gpin_pfn[gfn],
			  "pinned gfn %lu moved to pfn %lu from %lu", (unsigned long)gfn,
			  (unsigned long)pfn, (unsigned long)F.gpin_pfn[gfn]);
	}
}

static void fz_after(int err, bool counted)
{
	if (fz_trace)
		fprintf(stderr, "op %d %s: %d, %u blocks\n", F.op, F.what, err, F.nr_blk);
	fz_check_counters(err, counted);
	fz_check_pool();
	fz_check_pins();
}

/* ---- argument pickers ---- */

static unsigned int pick_zone(bool *bad)
{
	uint8_t v = in8(F.in);

	if (bad && (v & 0xf0) == 0xf0) {
		*bad = true;
		return F.nr_zones + (v & 1 ? 0 : 60);
	}
	return v % F.nr_zones;
}

static unsigned int pick_order(void)
{
	static const unsigned int orders[] = { 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 9, 9, 10, 6, 7, 8 };

	return orders[in8(F.in) % 16];
}

static uint64_t pick_owner(void)
{
	return in8(F.in) % (FZ_OWNERS + 1);
}

static int pick_block(void)
{
	return F.nr_blk ? (int)(in8(F.in) % F.nr_blk) : -1;
}

/* Interesting pfns: zone edges, beyond the last, inside blocks, free ones. */
static uint64_t pick_pfn(void)
{
	uint8_t v = in8(F.in);
	unsigned int z = in8(F.in) % F.nr_zones;

	switch (v % 8) {
	case 0:
		return F.zstart[z];
	case 1:
		return F.zstart[z] + F.znr[z] - 1;
	case 2:
		return F.zstart[z] + F.znr[z]; /* a gap, or the end */
	case 3:
		return F.end_pfn + in8(F.in);
	case 4:
		return UINT64_MAX - in8(F.in);
	default:
		return F.zstart[z] + in16(F.in) % F.znr[z];
	}
}

/* ---- the expected result of a free, from the model (allocator.h's table) ---- */

static int fz_expect_free(uint64_t pfn, unsigned int order, uint64_t owner)
{
	int z, i;

	if (order > GFA_MAX_ORDER)
		return GFA_EORDER;
	z = pfn < F.end_pfn ? fz_zone_of(pfn) : -1;
	if (z < 0 || pfn + (1UL << order) > F.zstart[z] + F.znr[z])
		return GFA_ERANGE;
	if (pfn & ((1UL << order) - 1))
		return GFA_EALIGN;
	i = F.at[pfn];
	fz_guest_scan();
	if (i < 0 && F.g && F.ghead[pfn] >= 0) {
		if ((uint64_t)F.ghead[pfn] != pfn)
			return GFA_ENOTHEAD;
		return F.gorder[pfn] != order ? GFA_EWRONGORDER : GFA_EOWNER;
	}
	if (i < 0) {
		for (unsigned int r = 0; r < F.nr_fl; r++)
			if (F.fl[r].pfn == pfn)
				return GFA_EBUSY;
		return F.inflight[pfn] ? 1 : GFA_EDOUBLEFREE; /* 1: either (block edges unknown) */
	}
	if (F.blk[i].pfn != pfn)
		return GFA_ENOTHEAD;
	if (F.blk[i].order != order)
		return GFA_EWRONGORDER;
	if (F.blk[i].owner != owner)
		return GFA_EOWNER;
	return 0;
}

/* ---- operations ---- */

static void fz_check_alloc(int64_t pfn, int expect, int zone, unsigned int order, unsigned int mt,
			   uint64_t owner, bool zeroed)
{
	if (expect) {
		FZ_ASSERT(pfn == expect, "allocation: %ld, want %d", (long)pfn, expect);
		fz_after(expect, true);
		return;
	}
	FZ_ASSERT(pfn >= 0 || pfn == GFA_ENOMEM, "allocation: %ld", (long)pfn);
	if (pfn >= 0)
		fz_got(pfn, zone, order, mt, owner, zeroed);
	fz_after(0, false);
}

static int fz_alloc_args(unsigned int *zone, unsigned int *order, unsigned int *mt, uint64_t *owner,
			 unsigned int *flags)
{
	bool bad_zone = false;
	uint8_t v;

	*zone = pick_zone(&bad_zone);
	*order = pick_order();
	*mt = in8(F.in) % GFA_MT_PCPTYPES;
	*owner = pick_owner();
	v = in8(F.in);
	*flags = v & (GFA_ALLOC_NOFALLBACK | GFA_ALLOC_NOCOMPACT);
	if (bad_zone)
		return GFA_ERANGE;
	if ((v & 0xf0) == 0xe0) {
		*order = GFA_MAX_ORDER + 1 + (v & 3);
		return GFA_EORDER;
	}
	if ((v & 0xf0) == 0xd0) {
		*mt = GFA_MT_ISOLATE + (v & 1) * 7;
		return GFA_EMIGRATE;
	}
	return 0;
}

static void op_alloc(void)
{
	unsigned int zone, order, mt, flags;
	uint64_t owner;
	int expect = fz_alloc_args(&zone, &order, &mt, &owner, &flags);
	uint8_t how = in8(F.in) % 4;
	int64_t pfn;

	F.what = "alloc";
	if (F.nr_blk >= FZ_MAX_BLOCKS)
		return; /* the model holds all it can (splits fill it) */
	if (how == 1 && F.pcp[0]) {
		struct gfa_pcp *pcp = F.pcp[in8(F.in) & 1] ? F.pcp[1] : F.pcp[0];

		if (!pcp)
			pcp = F.pcp[0];
		F.what = "pcp_alloc";
		if (expect == GFA_ERANGE)
			expect = 0; /* a cache has its zone */
		pfn = gfa_pcp_alloc(pcp, order, (enum gfa_migratetype)mt, owner, flags);
		fz_check_alloc(pfn, expect, gfa_pcp_zone(pcp), order, mt, owner, false);
	} else if (how == 2 && F.b) {
		F.what = "backing_alloc";
		pfn = gfa_backing_alloc(F.b, NULL, zone, order, (enum gfa_migratetype)mt, owner,
					flags | GFA_BACKING_ZERO);
		fz_check_alloc(pfn, expect, (int)zone, order, mt, owner, true);
	} else if (how == 3) {
		F.what = "alloc_compact";
		pfn = gfa_alloc_compact(F.pool, zone, order, (enum gfa_migratetype)mt, owner);
		fz_check_alloc(pfn, expect, (int)zone, order, mt, owner, false);
	} else {
		pfn = gfa_alloc(F.pool, zone, order, (enum gfa_migratetype)mt, owner, flags);
		fz_check_alloc(pfn, expect, (int)zone, order, mt, owner, false);
	}
}

/* A free: mostly right, sometimes wrong in one way (order, owner, pfn, twice). */
static void op_free(void)
{
	int i = pick_block(), expect, err;
	uint8_t how = in8(F.in), path = in8(F.in) % 3;
	uint64_t pfn, owner;
	unsigned int order;
	struct gfa_pcp *pcp = F.pcp[path & 1] ? F.pcp[path & 1] : F.pcp[0];

	F.what = "free";
	if (i >= 0) {
		pfn = F.blk[i].pfn;
		order = F.blk[i].order;
		owner = F.blk[i].owner;
	} else {
		pfn = pick_pfn();
		order = 0;
		owner = 0;
	}
	switch (how % 8) {
	case 1:
		order = order ? order - 1 : order + 1;
		break;
	case 2:
		owner = (owner + 1) % (FZ_OWNERS + 1);
		break;
	case 3:
		pfn = pick_pfn();
		order = in8(F.in) % 3;
		break;
	case 4:
		if (i >= 0 && order)
			pfn += 1UL << (in8(F.in) % order);
		order = 0;
		break;
	case 5:
		order = GFA_MAX_ORDER + 1;
		break;
	case 6: /* the block freed last, again (or now another's) */
		if (F.last_freed.order || F.last_freed.pfn) {
			pfn = F.last_freed.pfn;
			order = F.last_freed.order;
			owner = F.last_freed.owner;
		}
		break;
	default:
		break;
	}
	expect = fz_expect_free(pfn, order, owner);
	if (!expect)
		i = F.at[pfn]; /* (a picked pfn may be another block's head) */
	if (!expect && F.b && fz_holds(&F.blk[i]) && path != 2)
		gfa_backing_mark_dirty(F.b, pfn, order); /* as a guest does before its free */
	if (!expect)
		fz_verify(&F.blk[i], pfn);
	if (path == 2 && F.b) {
		F.what = "backing_free";
		err = gfa_backing_free(F.b, NULL, pfn, order, owner);
	} else if (path == 1 && pcp) {
		F.what = "pcp_free";
		err = gfa_pcp_free(pcp, pfn, order, owner);
	} else {
		err = gfa_free(F.pool, pfn, order, owner);
	}
	if (expect == 1)
		FZ_ASSERT(err == GFA_EBUSY || err == GFA_ENOTHEAD,
			  "free of %lu inside a range in "
			  "flight: %d",
			  (unsigned long)pfn, err);
	else
		FZ_ASSERT(err == expect, "free of %lu order %u owner %lu: %d, want %d",
			  (unsigned long)pfn, order, (unsigned long)owner, err, expect);
	if (!err) {
		F.last_freed = F.blk[i];
		fz_remove((unsigned int)i);
	}
	fz_after(err, err != 0);
}

static void op_free_many(void)
{
	uint64_t pfns[8];
	int n = 0, bad = -1, expect, err;
	struct gfa_pcp *pcp = F.pcp[0];

	F.what = "pcp_free_many";
	if (!pcp)
		return;
	for (unsigned int i = 0; i < F.nr_blk && n < 8; i++)
		if (F.blk[i].order == 0 && F.blk[i].owner == 1) {
			pfns[n++] = F.blk[i].pfn;
		}
	if (!n)
		return;
	n = 1 + in8(F.in) % n;
	if (in8(F.in) & 1) {
		bad = in8(F.in) % n;
		pfns[bad] = pick_pfn();
	}
	/* the bad entry's answer as a single free's, after the good ones before it */
	expect = bad >= 0 ? fz_expect_free(pfns[bad], 0, 1) : 0;
	if (expect == 1)
		return; /* inside a range in flight: block edges decide */
	for (int k = 0; k < bad; k++)
		if (pfns[k] == pfns[bad])
			expect = GFA_EDOUBLEFREE;
	if (expect == 0 && bad >= 0)
		for (int k = bad + 1; k < n; k++)
			if (pfns[k] == pfns[bad])
				return; /* the same block listed twice: skip this case */
	for (int k = 0; k < n; k++)
		if (F.b && fz_block_at(pfns[k]) >= 0 && fz_holds(&F.blk[fz_block_at(pfns[k])]))
			gfa_backing_mark_dirty(F.b, pfns[k], 0);
	err = gfa_pcp_free_many(pcp, pfns, (size_t)n, 0, 1);
	if (bad < 0 || !expect) {
		FZ_ASSERT(err == n, "free_many of %d: %d", n, err);
	} else {
		FZ_ASSERT(err == (bad ? bad : expect), "free_many, entry %d bad (%d): %d", bad,
			  expect, err);
	}
	/* remove what was freed: the first err entries (or all) */
	{
		int freed = err > 0 ? err : 0;

		for (int k = freed - 1; k >= 0; k--) {
			int j = fz_block_at(pfns[k]);

			FZ_ASSERT(j >= 0, "freed twice in the model");
			fz_remove((unsigned int)j);
		}
	}
	fz_after(err < 0 ? err : (bad >= 0 && err == bad ? expect : 0),
		 err < 0 || (bad >= 0 && err == bad));
}

static void op_drain(void)
{
	uint8_t v = in8(F.in);
	int64_t r;
	bool bad = false;
	unsigned int z;

	F.what = "drain";
	switch (v % 4) {
	case 0:
		if (F.pcp[0])
			FZ_ASSERT(gfa_pcp_drain(F.pcp[v & 4 && F.pcp[1] ? 1 : 0]) >= 0,
				  "pcp_drain");
		fz_after(0, false);
		return;
	case 1:
		if (F.pcp[0])
			FZ_ASSERT(gfa_pcp_drain_partial(F.pcp[0]) >= 0, "drain_partial");
		fz_after(0, false);
		return;
	case 2:
		FZ_ASSERT(gfa_pool_drain_idle(F.pool, v & 8 ? 0 : 1000) >= 0, "drain_idle");
		fz_after(0, false);
		return;
	default:
		z = pick_zone(&bad);
		r = gfa_pool_drain_all(F.pool, v & 8 ? -1 : (int)z);
		if (!(v & 8) && bad) {
			FZ_ASSERT(r == GFA_ERANGE, "drain_all(%u): %ld", z, (long)r);
			fz_after(GFA_ERANGE, true);
		} else {
			FZ_ASSERT(r >= 0, "drain_all: %ld", (long)r);
			fz_after(0, false);
		}
	}
}

static void op_compact(void)
{
	bool bad_zone = false;
	unsigned int zone = pick_zone(&bad_zone);
	uint8_t v = in8(F.in);
	int order = (int)(v % 12) - 1, mode = (v >> 4) % 3, expect = 0, r;

	F.what = "compact_zone";
	if (bad_zone) {
		expect = GFA_ERANGE;
	} else if ((v & 0xc0) == 0xc0) {
		order = v & 1 ? GFA_MAX_ORDER + 1 : -2;
		expect = GFA_EORDER;
	} else if ((v & 0xc0) == 0x80 && (v & 7) == 7) {
		mode = 3 + (v & 8);
		expect = GFA_EINVAL;
	}
	r = gfa_compact_zone(F.pool, zone, order, (enum gfa_compact_mode)mode);
	if (expect) {
		FZ_ASSERT(r == expect, "compact_zone(%u, %d, %d): %d, want %d", zone, order, mode,
			  r, expect);
		fz_after(expect, true);
		return;
	}
	FZ_ASSERT(r >= GFA_COMPACT_SKIPPED && r <= GFA_COMPACT_SUCCESS && r != GFA_COMPACT_CONTINUE,
		  "compact_zone: %d", r);
	fz_after(0, false);
}

static struct fz_owner_ctx *fz_register(uint64_t owner, uint8_t v)
{
	struct fz_owner_ctx *c = calloc(1, sizeof(*c));

	FZ_ASSERT(c, "calloc");
	*c = (struct fz_owner_ctx){ .ops = { .migrate = fz_migrate,
					     .collapsed = v & 2 ? fz_collapsed : NULL,
					     .batch_begin = v & 1 ? fz_batch_begin : NULL,
					     .batch_end = v & 1 ? fz_batch_end : NULL },
				    .owner = owner,
				    .mode = (enum fz_mode)((v >> 2) % MODE_NR),
				    .calls = 0,
				    .unreg_at = 1 + (v >> 5) % 3,
				    .unreg_answer = v & 0x80 ? -EAGAIN : 0 };
	return c;
}

static void op_owner(void)
{
	uint64_t owner = 1 + in8(F.in) % FZ_OWNERS;
	uint8_t v = in8(F.in);
	struct fz_owner_ctx *c;
	int r;

	F.what = "owner_register";
	if (v & 1) { /* unregister */
		r = gfa_owner_register(F.pool, owner, NULL, NULL);
		FZ_ASSERT(r == (F.owner[owner] ? 0 : -ENOENT), "unregister %lu: %d",
			  (unsigned long)owner, r);
		free(F.owner[owner]);
		F.owner[owner] = NULL;
		fz_after(r, false);
		return;
	}
	c = fz_register(owner, v);
	if ((v & 0x7c) == 0x7c) { /* no migrate op: GFA_EFAULT */
		c->ops.migrate = NULL;
		r = gfa_owner_register(F.pool, owner, &c->ops, c);
		FZ_ASSERT(r == GFA_EFAULT, "register without migrate: %d", r);
		free(c);
		fz_after(r, true);
		return;
	}
	r = gfa_owner_register(F.pool, owner, &c->ops, c);
	FZ_ASSERT(r == (F.owner[owner] ? -EEXIST : 0), "register %lu: %d", (unsigned long)owner, r);
	if (r)
		free(c);
	else
		F.owner[owner] = c;
	fz_after(r, false);
}

/* Pieces of one owner's MOVABLE small blocks of one zone, laid out in a 2 MiB block. */
static void op_collapse(void)
{
	int b = pick_block();
	uint64_t owner = b >= 0 && F.blk[b].owner ? F.blk[b].owner : 1 + in8(F.in) % FZ_OWNERS;
	uint64_t pfns[8];
	unsigned int orders[8], offs[8], n = 0, zone = 0, off = 0;
	uint8_t v = in8(F.in);
	int expect = 0;
	int64_t r;
	bool registered;

	F.what = "collapse";
	if (!F.owner[owner] && (v & 0x40)) { /* an owner registered for it, mostly */
		struct fz_owner_ctx *c = fz_register(owner, in8(F.in));

		FZ_ASSERT(!gfa_owner_register(F.pool, owner, &c->ops, c), "register");
		F.owner[owner] = c;
	}
	registered = F.owner[owner] != NULL;
	for (unsigned int i = 0; i < F.nr_blk && n < 1 + v % 8; i++) {
		const struct fz_block *k = &F.blk[i];
		unsigned int sz = 1U << k->order;

		if (k->owner != owner || k->mt != GFA_MT_MOVABLE || k->order >= GFA_PAGEBLOCK_ORDER)
			continue;
		if (n && (unsigned int)fz_zone_of(k->pfn) != zone)
			continue;
		zone = (unsigned int)fz_zone_of(k->pfn);
		off = (off + sz - 1) & ~(sz - 1);
		if (off + sz > GFA_PAGEBLOCK_FRAMES)
			break;
		pfns[n] = k->pfn;
		orders[n] = k->order;
		offs[n++] = off;
		off += sz;
	}
	if (!n)
		return;
	switch ((v >> 3) % 8) {
	case 1:
		if (n > 1) {
			offs[1] = offs[0];
			expect = GFA_EINVAL;
		}
		break;
	case 2:
		orders[0] = GFA_PAGEBLOCK_ORDER;
		expect = GFA_EORDER;
		break;
	case 3:
		zone = F.nr_zones;
		expect = GFA_ERANGE;
		break;
	case 4:
		n = 0;
		expect = GFA_EINVAL;
		break;
	case 5:
		offs[0] += 1;
		expect = orders[0] ? GFA_EALIGN : 0;
		break;
	default:
		break;
	}
	if (!expect && (v >> 3) % 8 == 5)
		offs[0] -= 1; /* an order-0 piece is aligned anywhere */
	if (!expect && !registered)
		expect = -ENOENT;
	F.collapsed_at = -1;
	r = gfa_collapse(F.pool, zone, owner, pfns, orders, offs, n);
	if (expect) {
		FZ_ASSERT(r == expect, "collapse: %ld, want %d", (long)r, expect);
		fz_after(expect, expect != -ENOENT);
		return;
	}
	if (r >= 0) {
		/* every piece moved by the op into the new block: now one order-9 block */
		FZ_ASSERT(!(r & (GFA_PAGEBLOCK_FRAMES - 1)) && fz_zone_of((uint64_t)r) == (int)zone,
			  "collapse gave %ld", (long)r);
		for (unsigned int k = 0; k < n; k++) {
			int j = fz_block_at((uint64_t)r + offs[k]);

			FZ_ASSERT(j >= 0 && F.blk[j].pfn == (uint64_t)r + offs[k],
				  "piece %u not at its offset", k);
			fz_map((unsigned int)j, false); /* its data lives on in the new block */
			fz_remove_unmapped((unsigned int)j);
		}
		for (uint64_t p = (uint64_t)r; p < (uint64_t)r + GFA_PAGEBLOCK_FRAMES; p++)
			FZ_ASSERT(F.at[p] < 0, "collapse target %ld holds block %d", (long)r,
				  F.at[p]);
		fz_add((uint64_t)r, GFA_PAGEBLOCK_ORDER, GFA_MT_MOVABLE, owner);
		FZ_ASSERT(F.collapsed_at == -1 || F.collapsed_at == r, "collapsed op told %ld",
			  (long)F.collapsed_at);
		fz_after(0, false);
		return;
	}
	FZ_ASSERT(r == GFA_ENOMEM || r == -EAGAIN || r == -EBUSY || r == -EIO || r == -ENOENT,
		  "collapse: %ld", (long)r);
	FZ_ASSERT(r != -ENOENT || !F.owner[owner], "collapse -ENOENT with its owner registered");
	fz_after((int)r, false);
}

static void op_claim(void)
{
	bool bad = false;
	unsigned int zone = pick_zone(&bad);
	uint64_t owner = pick_owner();
	uint8_t v = in8(F.in);
	int64_t r;

	F.what = "claim";
	if (v & 1) {
		r = gfa_zone_unclaim(F.pool, zone, owner);
		if (bad) {
			FZ_ASSERT(r == GFA_ERANGE, "unclaim bad zone: %ld", (long)r);
			fz_after(GFA_ERANGE, true);
			return;
		}
		FZ_ASSERT(F.claim[zone][owner] ? r >= 0 : r == -ENOENT, "unclaim: %ld", (long)r);
		F.claim[zone][owner] = false;
		fz_after((int)(r < 0 ? r : 0), false);
		return;
	}
	r = gfa_zone_claim(F.pool, zone, owner, (uint64_t)in16(F.in) % (F.total + 64));
	if (bad) {
		FZ_ASSERT(r == GFA_ERANGE, "claim bad zone: %ld", (long)r);
		fz_after(GFA_ERANGE, true);
		return;
	}
	if (F.claim[zone][owner])
		FZ_ASSERT(r == -EEXIST, "second claim: %ld", (long)r);
	else
		FZ_ASSERT(r == 0 || r == -ENOSPC, "claim: %ld", (long)r);
	if (!r)
		F.claim[zone][owner] = true;
	fz_after((int)r, false);
}

static void fz_range_add(const struct gfa_frame_range *r, unsigned int zone, bool populate)
{
	FZ_ASSERT(F.nr_fl < FZ_MAX_INFLIGHT, "too many ranges in flight");
	FZ_ASSERT(r->nr && fz_zone_of(r->pfn) == (int)zone &&
			  fz_zone_of(r->pfn + r->nr - 1) == (int)zone,
		  "range %lu+%lu outside zone %u", (unsigned long)r->pfn, (unsigned long)r->nr,
		  zone);
	for (uint64_t p = r->pfn; p < r->pfn + r->nr; p++) {
		FZ_ASSERT(F.at[p] < 0 && !F.inflight[p], "range %lu+%lu takes pfn %lu (block %d)",
			  (unsigned long)r->pfn, (unsigned long)r->nr, (unsigned long)p, F.at[p]);
		F.inflight[p] = 1;
	}
	F.fl[F.nr_fl++] = (struct fz_range){ r->pfn, r->nr, populate };
}

/*
 * A scrubbed range is zeroed and handed back at once, as every scrubber does: its
 * frames stay counted free, and an allocation that finds none waits for them, so
 * holding one across calls would make the target wait for itself.
 */
static void fz_scrub(const struct gfa_frame_range *r, unsigned int zone)
{
	FZ_ASSERT(r->nr && fz_zone_of(r->pfn) == (int)zone &&
			  fz_zone_of(r->pfn + r->nr - 1) == (int)zone,
		  "scrub %lu+%lu outside zone %u", (unsigned long)r->pfn, (unsigned long)r->nr,
		  zone);
	for (uint64_t p = r->pfn; p < r->pfn + r->nr; p++) {
		FZ_ASSERT(F.at[p] < 0 && !F.inflight[p], "scrub %lu+%lu takes pfn %lu (block %d)",
			  (unsigned long)r->pfn, (unsigned long)r->nr, (unsigned long)p, F.at[p]);
		if (F.b)
			FZ_ASSERT(gfa_backing_prepare(F.b, p, 0) >= 0, "prepare");
	}
	fz_expect_zero(r->pfn, r->nr, "scrubbed range");
	FZ_ASSERT(zone_populate_done(F.pool, r->pfn, r->nr) == 0, "scrub done");
}

static bool fz_want(void *ctx, uint64_t pfn, unsigned int order)
{
	(void)ctx, (void)pfn, (void)order;
	return in8(F.in) % 4 != 0;
}

static void op_take(void)
{
	struct gfa_frame_range out[8];
	bool bad = false;
	unsigned int zone = pick_zone(&bad), max = in8(F.in) % 9;
	uint8_t v = in8(F.in);
	uint64_t max_frames = v & 1 ? UINT64_MAX : (uint64_t)in16(F.in) % 2048;
	int n;

	if (max > FZ_MAX_INFLIGHT - F.nr_fl)
		max = FZ_MAX_INFLIGHT - F.nr_fl;
	switch ((v >> 1) % 3) {
	case 0:
		F.what = "release_take";
		n = zone_release_take(F.pool, zone, out, max, max_frames);
		break;
	case 1:
		F.what = "populate_take";
		n = zone_populate_take(F.pool, zone, out, max, max_frames);
		break;
	default:
		F.what = "scrub_take";
		n = zone_scrub_take(F.pool, zone, fz_want, NULL, out, max, max_frames);
		break;
	}
	if (bad) {
		FZ_ASSERT(n == GFA_ERANGE, "take on a bad zone: %d", n);
		fz_after(n, true);
		return;
	}
	FZ_ASSERT(n >= 0 && (unsigned int)n <= max, "take: %d (max %u)", n, max);
	for (int i = 0; i < n && (v >> 1) % 3 == 2; i++)
		fz_scrub(&out[i], zone);
	for (int i = 0; i < n && (v >> 1) % 3 != 2; i++)
		fz_range_add(&out[i], zone, (v >> 1) % 3 == 1);
	fz_after(0, false);
}

/* Really give a range back to the host, so a released frame reads zero. */
static void fz_punch(uint64_t pfn, uint64_t nr)
{
	int fd;
	uint64_t off;

	if (!F.b || gfa_pfn_to_fd(F.pool, pfn, &fd, &off))
		return;
	FZ_ASSERT(!fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
			     (off_t)(nr << GFA_FRAME_SHIFT)),
		  "punch");
	for (uint64_t p = pfn; p < pfn + nr; p++)
		F.data[p] = F.live[p] = 0;
}

static void op_done(void)
{
	uint8_t v = in8(F.in);
	unsigned int i = F.nr_fl ? in8(F.in) % F.nr_fl : 0;
	uint64_t pfn, nr;
	int r, expect = 0;

	F.what = "release_done";
	if (!F.nr_fl || (v & 7) == 7) {
		/* not in flight: a free or allocated range, a wrap, nothing */
		pfn = pick_pfn();
		nr = v & 8 ? 0 : 1 + in8(F.in) % 16;
		if (v & 0x10)
			nr = UINT64_MAX - in8(F.in);
		expect = fz_zone_of(pfn) < 0 || !nr ||
					 nr > F.zstart[fz_zone_of(pfn)] + F.znr[fz_zone_of(pfn)] -
							 pfn ?
				 GFA_ERANGE :
				 GFA_EBUSY;
		for (uint64_t p = pfn; expect == GFA_EBUSY && p < pfn + nr; p++)
			if (F.inflight[p])
				return; /* partly in flight: block edges decide */
		r = v & 0x20 ? zone_populate_done(F.pool, pfn, nr) :
			       zone_release_done(F.pool, pfn, nr, v & 0x40);
		FZ_ASSERT(r == expect, "done on %lu+%lu not in flight: %d, want %d",
			  (unsigned long)pfn, (unsigned long)nr, r, expect);
		fz_after(r, true);
		return;
	}
	pfn = F.fl[i].pfn;
	nr = F.fl[i].nr;
	switch ((v >> 3) % 4) {
	case 0:
		fz_punch(pfn, nr);
		r = zone_release_done(F.pool, pfn, nr, true);
		break;
	case 1:
		r = zone_release_done(F.pool, pfn, nr, false);
		break;
	case 2:
		if (F.b && !F.fl[i].populate) /* zeroed and back, as a scrub does */
			for (uint64_t p = pfn; p < pfn + nr; p++)
				FZ_ASSERT(gfa_backing_prepare(F.b, p, 0) >= 0, "prepare");
		if (!F.fl[i].populate)
			fz_expect_zero(pfn, nr, "scrubbed range");
		r = zone_populate_done(F.pool, pfn, nr);
		break;
	default:
		if (F.fl[i].populate)
			fz_punch(pfn, nr); /* (they were released; still are) */
		r = F.fl[i].populate ? zone_populate_failed(F.pool, pfn, nr) :
				       zone_release_done(F.pool, pfn, nr, false);
		break;
	}
	FZ_ASSERT(r == 0, "done on %lu+%lu in flight: %d", (unsigned long)pfn, (unsigned long)nr,
		  r);
	for (uint64_t p = pfn; p < pfn + nr; p++)
		F.inflight[p] = 0;
	F.fl[i] = F.fl[--F.nr_fl];
	fz_after(0, false);
}

/* ---- the release engine on a zone's memfd, for the ranges in flight ---- */

struct fz_rel {
	uint64_t pfn, nr;
	int result;
	bool called;
};

/* Engine thread: the host is done with a range; back to the pool, as the host return does. */
static void fz_rel_done(void *cookie, uint64_t off, uint64_t len, int result)
{
	struct fz_rel *r = cookie;

	(void)off, (void)len;
	r->result = result;
	__atomic_store_n(&r->called, true, __ATOMIC_RELEASE);
	if (zone_release_done(F.pool, r->pfn, r->nr, result == 0))
		abort();
}

static void op_engine(void)
{
	struct fz_rel rel[FZ_MAX_INFLIGHT];
	unsigned int zone = in8(F.in) % F.nr_zones, n = 0, taken[FZ_MAX_INFLIGHT];
	uint8_t v = in8(F.in);
	struct gfa_release_config cfg = {
		.force_sync = v & 1,
		.max_punch_bytes = v & 2 ? GFA_FRAME_SIZE * (1 + in8(F.in) % 16) : 0,
		.ring_entries = 1 + in8(F.in) % 8,
	};
	struct gfa_release_engine *e;
	struct gfa_release_stats st;
	uint64_t good_bytes = 0, failed = 0, rejected = 0;
	int fd, r;
	uint64_t off0;

	F.what = "release engine";
	if (!F.b || !F.nr_fl || (v & 0xc0) != 0xc0 ||
	    gfa_pfn_to_fd(F.pool, F.zstart[zone], &fd, &off0))
		return; /* a thread and a ring: now and then */
	if (v & 4)
		cfg.fault_sync =
			(struct gfa_release_fault){ 1 + in8(F.in) % 4, in8(F.in) % 3, EIO };
	if (v & 8)
		cfg.fault_complete = (struct gfa_release_fault){ 1 + in8(F.in) % 4, in8(F.in) % 3,
								 v & 16 ? EOPNOTSUPP : EIO };
	e = gfa_release_create(fd, gfa_backing_zone_base(F.b, zone), &cfg);
	FZ_ASSERT(e, "release_create: %d", errno);
	for (unsigned int i = 0; i < F.nr_fl; i++) {
		struct fz_range *fr = &F.fl[i];

		if (fr->populate || fz_zone_of(fr->pfn) != (int)zone)
			continue;
		rel[n] = (struct fz_rel){ fr->pfn, fr->nr, 0, false };
		r = gfa_release_submit(e, (fr->pfn - F.zstart[zone]) << GFA_FRAME_SHIFT,
				       fr->nr << GFA_FRAME_SHIFT, fz_rel_done, &rel[n]);
		FZ_ASSERT(!r, "release_submit of a range in flight: %d", r);
		taken[n++] = i;
	}
	/* bad ranges: refused, their done never called */
	switch (in8(F.in) % 8) {
	case 1:
		r = gfa_release_submit(e, 0, 0, fz_rel_done, NULL);
		FZ_ASSERT(r == -EINVAL, "len 0: %d", r);
		rejected++;
		break;
	case 2:
		r = gfa_release_submit(e, 100, GFA_FRAME_SIZE, fz_rel_done, NULL);
		FZ_ASSERT(r == -EINVAL, "misaligned: %d", r);
		rejected++;
		break;
	case 3:
		r = gfa_release_submit(e, F.znr[zone] << GFA_FRAME_SHIFT, GFA_FRAME_SIZE,
				       fz_rel_done, NULL);
		FZ_ASSERT(r == -ERANGE, "beyond: %d", r);
		rejected++;
		break;
	case 4:
		r = gfa_release_submit(e, GFA_FRAME_SIZE, UINT64_MAX & ~(GFA_FRAME_SIZE - 1),
				       fz_rel_done, NULL);
		FZ_ASSERT(r == -ERANGE, "wrap: %d", r);
		rejected++;
		break;
	case 5:
		r = gfa_release_submit(e, 0, GFA_FRAME_SIZE, NULL, NULL);
		FZ_ASSERT(r == -EFAULT, "no done: %d", r);
		rejected++;
		break;
	default:
		break;
	}
	FZ_ASSERT(gfa_release_flush(e, 30000) == 0, "release_flush");
	FZ_ASSERT(gfa_release_stats(e, &st) == 0, "release_stats");
	for (unsigned int k = 0; k < n; k++) {
		FZ_ASSERT(__atomic_load_n(&rel[k].called, __ATOMIC_ACQUIRE), "range %u not done",
			  k);
		if (rel[k].result)
			failed++;
		else
			good_bytes += rel[k].nr << GFA_FRAME_SHIFT;
	}
	FZ_ASSERT(st.ranges_submitted == n && st.ranges_done == n && st.ranges_failed == failed &&
			  st.ranges_rejected == rejected && st.bytes_released == good_bytes &&
			  !st.inflight_ranges,
		  "engine stats: submitted %lu done %lu failed %lu rejected %lu "
		  "released %lu (want %u %u %lu %lu %lu)",
		  (unsigned long)st.ranges_submitted, (unsigned long)st.ranges_done,
		  (unsigned long)st.ranges_failed, (unsigned long)st.ranges_rejected,
		  (unsigned long)st.bytes_released, n, n, (unsigned long)failed,
		  (unsigned long)rejected, (unsigned long)good_bytes);
	FZ_ASSERT(gfa_release_destroy(e) == 0, "release_destroy");
	/* the model: back on the lists, released (zero) or populated as they were */
	for (unsigned int k = n; k-- > 0;) {
		struct fz_range *fr = &F.fl[taken[k]];

		for (uint64_t p = fr->pfn; p < fr->pfn + fr->nr; p++) {
			F.inflight[p] = 0;
			if (!rel[k].result)
				F.data[p] = F.live[p] = 0;
		}
		*fr = F.fl[--F.nr_fl];
	}
	fz_after(0, false);
}

/*
 * The host-return thread for a while: it releases, populates and scrubs free frames and
 * drains idle caches on its own, then quiesces.  The model needs nothing from it: it
 * touches no frame the model holds, and a frame it released or scrubbed reads zero, which
 * is what the model expects of a stale frame anyway.
 */
static void op_host_return(void)
{
	uint8_t v = in8(F.in);
	struct gfa_host_return_config hc = {
		.interval_ms = 1,
		.no_settle = true,
		.pcp_idle_ms = 1 + v % 4,
		.max_frames_per_pass = 64 << (v % 4),
		.scrub_frames_per_pass = 32 << (v % 3),
		.force_sync = v & 0x10,
		.no_pcp_drain = v & 0x20,
	};
	struct gfa_host_return *hr;
	struct gfa_host_return_stat st;
	int r;

	F.what = "host_return";
	if (!F.b || v % 8)
		return; /* threads and a ring per zone: now and then */
	hr = gfa_host_return_start(F.pool, F.b, &hc);
	FZ_ASSERT(hr, "host_return_start: %d", errno);
	if (v & 0x40)
		gfa_host_return_kick(hr);
	r = gfa_host_return_quiesce(hr, 30000);
	FZ_ASSERT(!r, "host_return_quiesce: %d", r);
	FZ_ASSERT(!gfa_host_return_stat(hr, &st) && !st.inflight_ranges, "host_return_stat");
	FZ_ASSERT(!gfa_host_return_stop(hr), "host_return_stop");
	fz_after(0, false);
}

/* ---- a guest and its balloon: guest-supplied ranges are bad input too ---- */

#define FZ_CLAIMER 0x7e57ULL /* an owner of no model block, nor a guest */

/* Frames of zone z the model holds or has in flight: every other frame is free. */
static uint64_t fz_held_in_zone(unsigned int z)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < F.nr_blk; i++)
		if (fz_zone_of(F.blk[i].pfn) == (int)z)
			n += 1UL << F.blk[i].order;
	for (unsigned int i = 0; i < F.nr_fl; i++)
		if (fz_zone_of(F.fl[i].pfn) == (int)z)
			n += F.fl[i].nr;
	return n;
}

/*
 * Right after a guest's destroy or a failed create, with the backing's zeroer at work
 * meanwhile: each zone counts every frame the model does not hold free, a claim of all
 * of them (but what others claimed) succeeds, and a frame allocated at once reads zero.
 */
static void fz_check_free_at_once(void)
{
	for (unsigned int z = 0; z < F.nr_zones; z++) {
		uint64_t free = F.znr[z] - fz_held_in_zone(z), left;
		struct gfa_zone_stat st;
		int64_t pfn;

		FZ_ASSERT(gfa_zone_stat(F.pool, z, &st) == 0, "zone_stat");
		FZ_ASSERT(st.nr_free == free,
			  "zone %u right after the guest went: %lu frames free "
			  "(%lu being zeroed), the model leaves %lu",
			  z, (unsigned long)st.nr_free, (unsigned long)st.nr_scrubbing,
			  (unsigned long)free);
		left = free - gfa_zone_claimed(F.pool, z);
		FZ_ASSERT(gfa_zone_claim(F.pool, z, FZ_CLAIMER, left) == 0,
			  "zone %u: a claim of "
			  "its %lu unclaimed free frames failed",
			  z, (unsigned long)left);
		pfn = left ? gfa_backing_alloc(F.b, NULL, z, 0, GFA_MT_MOVABLE, FZ_CLAIMER,
					       GFA_BACKING_ZERO) :
			     -1;
		FZ_ASSERT(!left || pfn >= 0, "zone %u: the claim's first frame: %ld", z, (long)pfn);
		if (pfn >= 0) {
			const uint64_t *w = fz_addr((uint64_t)pfn);

			FZ_ASSERT(!w[0] && !w[1], "pfn %ld allocated at once holds %lx %lx",
				  (long)pfn, (unsigned long)w[0], (unsigned long)w[1]);
			F.data[pfn] = 0;
			FZ_ASSERT(!gfa_backing_free(F.b, NULL, (uint64_t)pfn, 0, FZ_CLAIMER),
				  "free");
		}
		FZ_ASSERT(gfa_zone_unclaim(F.pool, z, FZ_CLAIMER) == (int64_t)(left ? left - 1 : 0),
			  "unclaim");
	}
	/* what the zeroer does next is its own: the checks after the call want it idle */
	FZ_ASSERT(gfa_backing_zero_quiesce(F.b, 10000) == 0, "zeroer quiesce");
}

static void fz_guest_create(uint8_t v)
{
	static const struct gfa_guest_vcpu_ops half = { .pause = NULL, .resume = NULL };
	struct gfa_guest_config cfg = {
		.mem_bytes = (v % 8 == 7 ? 3 : 1) * (GFA_PAGEBLOCK_FRAMES << GFA_FRAME_SHIFT),
		.zone = in8(F.in) % F.nr_zones,
		.small_only = v & 4,
		.id = 0x6000 + F.op,
	};
	int expect = 0;

	F.what = "guest_create";
	cfg.pcp = v & 8 ? F.pcp[0] : NULL;
	if (cfg.pcp && gfa_pcp_zone(cfg.pcp) != (int)cfg.zone)
		expect = EINVAL; /* another zone's cache */
	switch ((v >> 4) % 8) {
	case 1:
		cfg.mem_bytes = 0;
		expect = EINVAL;
		break;
	case 2:
		cfg.mem_bytes += 1;
		expect = EINVAL;
		break; /* not 4 KiB aligned */
	case 3:
		cfg.zone = F.nr_zones;
		cfg.pcp = NULL;
		expect = ERANGE;
		break;
	case 4:
		if (!expect) {
			cfg.vcpu_ops = &half;
			expect = EINVAL;
		}
		break;
	default:
		break;
	}
	if (!expect && (cfg.mem_bytes >> GFA_FRAME_SHIFT) > F.znr[cfg.zone])
		expect = ENOMEM;
	errno = 0;
	F.g = gfa_guest_create(F.pool, F.b, &cfg);
	if (expect) {
		FZ_ASSERT(!F.g && errno == expect, "guest_create: %p errno %d, want %d",
			  (void *)F.g, errno, expect);
		fz_check_free_at_once();
		fz_after(-expect, expect == EINVAL || expect == ERANGE);
		return;
	}
	FZ_ASSERT(F.g || errno == ENOMEM, "guest_create: errno %d", errno);
	if (!F.g) {
		fz_check_free_at_once(); /* no frame is kept */
		fz_after(-ENOMEM, false);
		return;
	}
	F.gid = gfa_guest_id(F.g);
	F.gnr = cfg.mem_bytes >> GFA_FRAME_SHIFT;
	memset(F.gball, 0, sizeof(F.gball));
	memset(F.gzero, 0, sizeof(F.gzero));
	memset(F.gval, 0, sizeof(F.gval));
	memset(F.gpin, 0, sizeof(F.gpin));
	/* a new guest reads zero where our data was */
	for (uint64_t gfn = 0; gfn < F.gnr; gfn++) {
		uint64_t pfn;

		FZ_ASSERT(!gfa_guest_gpa_to_pfn(F.g, gfn << GFA_FRAME_SHIFT, &pfn), "gpa_to_pfn");
		if (F.data[pfn]) {
			FZ_ASSERT(!F.live[pfn], "a new guest has pfn %lu, ours",
				  (unsigned long)pfn);
			FZ_ASSERT(!*fz_gword(gfn), "new guest gfn %lu (pfn %lu) holds %lx",
				  (unsigned long)gfn, (unsigned long)pfn,
				  (unsigned long)*fz_gword(gfn));
			F.data[pfn] = 0;
		}
	}
	fz_after(0, false);
}

/* Where the guest's written gfns live now: their frames hold data of ours. */
static void fz_guest_mark(uint64_t lo, uint64_t hi)
{
	for (uint64_t gfn = lo; gfn < hi; gfn++) {
		uint64_t pfn;

		if (F.gval[gfn] && !gfa_guest_gpa_to_pfn(F.g, gfn << GFA_FRAME_SHIFT, &pfn))
			F.data[pfn] = 1; /* stale once the guest lets go of it */
	}
}

static void fz_balloon(uint8_t v)
{
	struct gfa_gpa_range r[3];
	unsigned int n = 1 + v % 3, kind = (v >> 2) % 8;
	bool deflate = v & 0x20, overlap = false, wrong = false;
	uint8_t mark[FZ_GUEST_GFNS] = { 0 };
	int64_t ret, want = 0, expect = 0;

	F.what = deflate ? "balloon_deflate" : "balloon_inflate";
	for (unsigned int k = 0; k < n; k++) {
		uint64_t lo = in16(F.in) % F.gnr, len = 1 + in8(F.in) % 16;

		if (len > F.gnr - lo)
			len = F.gnr - lo;
		r[k] = (struct gfa_gpa_range){ lo << GFA_FRAME_SHIFT, len << GFA_FRAME_SHIFT };
		for (uint64_t g = lo; g < lo + len; g++) {
			overlap |= mark[g];
			mark[g] = 1;
			wrong |= F.gball[g] != deflate;
		}
		want += (int64_t)len;
	}
	switch (kind) {
	case 1:
		r[0].len = 0;
		expect = -EINVAL;
		break;
	case 2:
		r[0].gpa += 100;
		expect = -EINVAL;
		break;
	case 3:
		r[0].gpa = F.gnr << GFA_FRAME_SHIFT;
		expect = -ERANGE;
		break;
	case 4:
		r[0].len = UINT64_MAX & ~(GFA_FRAME_SIZE - 1);
		expect = -ERANGE;
		break;
	default:
		if (overlap && wrong)
			return; /* two errors at once: either may come first */
		expect = overlap ? -ENOTUNIQ : wrong ? (deflate ? -ENOENT : -EALREADY) : 0;
		for (unsigned int k = 0; !deflate && !expect && k < n; k++)
			for (uint64_t g = r[k].gpa >> GFA_FRAME_SHIFT;
			     g < (r[k].gpa + r[k].len) >> GFA_FRAME_SHIFT; g++)
				if (F.gpin[g / GFA_PAGEBLOCK_FRAMES])
					expect = -EBUSY; /* pinned: not ballooned */
	}
	if (!deflate && !expect)
		for (unsigned int k = 0; k < n; k++)
			fz_guest_mark(r[k].gpa >> GFA_FRAME_SHIFT,
				      (r[k].gpa + r[k].len) >> GFA_FRAME_SHIFT);
	ret = deflate ? gfa_balloon_deflate(F.g, kind == 5 ? NULL : r, n) :
			gfa_balloon_inflate(F.g, kind == 5 ? NULL : r, n);
	if (kind == 5)
		expect = -EFAULT;
	if (expect || ret == -ENOMEM) {
		FZ_ASSERT(ret == expect || ret == -ENOMEM, "%s: %ld, want %ld", F.what, (long)ret,
			  (long)expect);
		/* the argument errors with an allocator meaning are counted (vmm/balloon.c) */
		fz_after((int)ret, ret == -EFAULT || ret == -EINVAL || ret == -ERANGE);
		return;
	}
	FZ_ASSERT(ret == want, "%s of %ld frames: %ld", F.what, (long)want, (long)ret);
	for (unsigned int k = 0; k < n; k++)
		for (uint64_t g = r[k].gpa >> GFA_FRAME_SHIFT;
		     g < (r[k].gpa + r[k].len) >> GFA_FRAME_SHIFT; g++) {
			F.gball[g] = !deflate;
			F.gzero[g] = 1; /* ballooned and deflated memory reads zero */
			F.gval[g] = 0;
		}
	fz_after(0, false);
}

/* Pin or unpin 1-3 whole or partial ranges (nested counts), against the model. */
static void fz_pin(uint8_t v)
{
	uint64_t ranges = F.gnr / GFA_PAGEBLOCK_FRAMES, lo = in8(F.in) % ranges;
	uint64_t hi = lo + 1 + v % 2 > ranges ? ranges : lo + 1 + v % 2;
	uint64_t gpa = lo * GFA_PAGEBLOCK_FRAMES * GFA_FRAME_SIZE + (v & 4 ? GFA_FRAME_SIZE : 0);
	uint64_t len =
		(hi - lo) * GFA_PAGEBLOCK_FRAMES * GFA_FRAME_SIZE - (v & 4 ? GFA_FRAME_SIZE : 0);
	bool unpin = v & 8;
	int r, expect = 0;

	F.what = unpin ? "guest_unpin" : "guest_pin";
	for (uint64_t k = lo; unpin && k < hi; k++)
		if (!F.gpin[k])
			expect = -ENOENT;
	r = unpin ? gfa_guest_unpin(F.g, gpa, len) : gfa_guest_pin(F.g, gpa, len);
	FZ_ASSERT(r == expect, "%s(%lx, %lx): %d, want %d", F.what, (unsigned long)gpa,
		  (unsigned long)len, r, expect);
	for (uint64_t k = lo; !r && k < hi; k++) {
		if (!unpin && !F.gpin[k])
			for (uint64_t gfn = k * GFA_PAGEBLOCK_FRAMES;
			     gfn < (k + 1) * GFA_PAGEBLOCK_FRAMES; gfn++)
				if (gfa_guest_gpa_to_pfn(F.g, gfn << GFA_FRAME_SHIFT,
							 &F.gpin_pfn[gfn]))
					F.gpin_pfn[gfn] = UINT64_MAX;
		F.gpin[k] += unpin ? -1U : 1U;
	}
	fz_after(r, false);
}

static void op_guest(void)
{
	uint8_t v = in8(F.in);
	uint64_t gfn;

	if (!F.b)
		return;
	if (!F.g) {
		/* a guest costs a window, mappings and zeroing: one now and then (the
		 * executions per second are the fuzzer's depth) */
		if (v % 8 == 7)
			fz_guest_create(in8(F.in));
		return;
	}
	switch (v % 7) {
	case 0:
	case 1:
		fz_balloon(in8(F.in));
		return;
	case 6:
		fz_pin(in8(F.in));
		return;
	case 2:
		F.what = "guest write";
		gfn = in16(F.in) % F.gnr;
		if (F.gball[gfn])
			return;
		F.gval[gfn] = FZ_TAG ^ ++F.next_tag;
		*fz_gword(gfn) = F.gval[gfn];
		F.gzero[gfn] = 0;
		fz_after(0, false);
		return;
	case 3:
		F.what = "guest_collapse";
		FZ_ASSERT(gfa_guest_collapse(F.g, 1 + v % 3) >= 0, "guest_collapse");
		fz_after(0, false);
		return;
	case 4:
		F.what = "guest_gpa_to_pfn";
		gfn = in16(F.in);
		{
			uint64_t pfn;
			int r = gfa_guest_gpa_to_pfn(F.g, gfn << GFA_FRAME_SHIFT, &pfn);

			FZ_ASSERT(gfn >= F.gnr ? r == GFA_ERANGE :
				  F.gball[gfn] ? r == -ENOENT :
						 r == 0,
				  "gpa_to_pfn(%lu): %d", (unsigned long)gfn, r);
			fz_after(r, r == GFA_ERANGE); /* (-ENOENT: not found, not a bad call) */
		}
		return;
	default:
		F.what = "guest_destroy";
		fz_guest_mark(0, F.gnr);
		gfa_guest_destroy(F.g);
		F.g = NULL;
		fz_check_free_at_once(); /* its frames are free at once */
		fz_after(0, false);
		return;
	}
}

static void op_backing(void)
{
	uint8_t v = in8(F.in);
	int i = pick_block();
	int64_t r;

	F.what = "backing marks";
	if (!F.b)
		return;
	switch (v % 5) {
	case 0:
		gfa_backing_mark_dirty(F.b, pick_pfn(), pick_order());
		break;
	case 1:
		if (i >= 0 && F.blk[i].order <= 3) {
			/* what a caller marks clean must be zero: zero it first */
			memset(fz_addr(F.blk[i].pfn), 0, GFA_FRAME_SIZE << F.blk[i].order);
			for (uint64_t p = F.blk[i].pfn; p < F.blk[i].pfn + (1UL << F.blk[i].order);
			     p++)
				F.data[p] = F.live[p] = 0;
			F.blk[i].tag = 0;
			if (v & 8)
				gfa_backing_mark_clean(F.b, F.blk[i].pfn, F.blk[i].order);
			else
				gfa_backing_mark_clean_range(F.b, F.blk[i].pfn,
							     1UL << F.blk[i].order);
		}
		gfa_backing_mark_clean(F.b, F.end_pfn + in8(F.in), 0); /* ignored */
		break;
	case 2:
		/* for a block before it is used: one holding live data may be zeroed (a
		 * refused gfa_backing_free keeps its marks, as vmm.h says) */
		if (i < 0 || memchr(F.live + F.blk[i].pfn, 1, 1UL << F.blk[i].order))
			break;
		r = gfa_backing_prepare(F.b, F.blk[i].pfn, F.blk[i].order);
		FZ_ASSERT(r >= 0 && r <= (int64_t)(1UL << F.blk[i].order), "prepare: %ld", (long)r);
		fz_expect_zero(F.blk[i].pfn, 1UL << F.blk[i].order, "prepared block");
		break;
	case 3:
		r = gfa_backing_prepare(F.b, pick_pfn(), GFA_MAX_ORDER + 1 + v % 3);
		FZ_ASSERT(r == GFA_EFAULT, "prepare of order > max: %ld", (long)r);
		fz_after((int)r, true);
		return;
	default:
		(void)gfa_backing_block_dirty(F.b, pick_pfn(), pick_order());
		(void)gfa_backing_nr_dirty(F.b);
		break;
	}
	fz_after(0, false);
}

static void op_split(void)
{
	int i = pick_block(), r, expect;
	uint8_t v = in8(F.in);
	struct fz_block k;
	unsigned int new_order;

	F.what = "block_split";
	if (i < 0)
		return;
	k = F.blk[i];
	new_order = k.order ? v % k.order : 0;
	if ((v & 0xc0) == 0xc0)
		new_order = k.order + (v & 1);
	if (F.nr_blk + (1U << (k.order - (new_order < k.order ? new_order : k.order))) >
	    FZ_MAX_BLOCKS)
		return;
	expect = new_order >= k.order ? GFA_EORDER : 0;
	if (!expect && (v & 0x30) == 0x30) {
		k.owner = (k.owner + 1) % (FZ_OWNERS + 1);
		expect = GFA_EOWNER;
	}
	r = gfa_block_split(F.pool, k.pfn, k.order, k.owner, new_order);
	FZ_ASSERT(r == expect, "split %lu order %u -> %u: %d, want %d", (unsigned long)k.pfn,
		  k.order, new_order, r, expect);
	if (!r) {
		fz_map((unsigned int)i, false); /* the pieces keep its data */
		fz_remove_unmapped((unsigned int)i);
		for (uint64_t p = 0; p < (1UL << k.order); p += 1UL << new_order) {
			unsigned int j = fz_add(k.pfn + p, new_order, k.mt, k.owner);

			F.blk[j].tag = p ? 0 : k.tag; /* the data stays in the first frame */
		}
	}
	fz_after(r, r != 0);
}

static void op_index(void)
{
	int i = pick_block(), r, expect = 0;
	uint8_t v = in8(F.in);
	uint64_t pfn, owner;

	F.what = "block_set_index";
	if (i < 0)
		return;
	pfn = F.blk[i].pfn;
	owner = F.blk[i].owner;
	if (v & 1) {
		owner = (owner + 1) % (FZ_OWNERS + 1);
		expect = GFA_EOWNER;
	} else if (v & 2 && F.blk[i].order) {
		pfn++;
		expect = GFA_ENOTHEAD;
	} else if (v & 4) {
		pfn = F.end_pfn + v;
		expect = GFA_ERANGE;
	}
	r = gfa_block_set_index(F.pool, pfn, owner, v);
	FZ_ASSERT(r == expect, "set_index: %d, want %d", r, expect);
	fz_after(r, r != 0);
}

static void op_stats(void)
{
	static char buf[8192];
	uint8_t v = in8(F.in);
	size_t len = v & 1 ? sizeof(buf) : in8(F.in);
	int r = 0, score;
	struct gfa_frame_info fi;
	uint64_t pfn;

	F.what = "statistics";
	switch ((v >> 1) % 6) {
	case 0:
		r = gfa_pool_buddyinfo(F.pool, buf, len);
		break;
	case 1:
		r = gfa_pool_pagetypeinfo(F.pool, buf, len);
		break;
	case 2:
		r = gfa_pool_vmstat_text(F.pool, buf, len);
		break;
	case 3:
		score = gfa_zone_fragmentation_score(F.pool, v % F.nr_zones);
		FZ_ASSERT(score >= 0 && score <= 100, "fragmentation score %d", score);
		if (F.b) {
			/* (gfa_backing_check after every call covers this too) */
			struct gfa_backing_zone_stat bs;
			struct gfa_zone_stat st;
			unsigned int z = v % F.nr_zones;

			FZ_ASSERT(gfa_zone_stat(F.pool, z, &st) == 0, "zone_stat");
			FZ_ASSERT(gfa_backing_zone_stat(F.b, z, &bs) == 0, "backing_zone_stat");
			FZ_ASSERT(bs.free_clean + bs.free_dirty + bs.free_released == st.nr_free,
				  "zone %u: clean %lu + dirty %lu + released %lu != free %lu", z,
				  (unsigned long)bs.free_clean, (unsigned long)bs.free_dirty,
				  (unsigned long)bs.free_released, (unsigned long)st.nr_free);
		}
		fz_after(0, false);
		return;
	case 4:
		pfn = pick_pfn();
		r = gfa_frame_lookup(F.pool, pfn, &fi);
		if (pfn >= F.end_pfn || fz_zone_of(pfn) < 0) {
			FZ_ASSERT(r == GFA_ERANGE, "lookup of %lu: %d", (unsigned long)pfn, r);
			fz_after(r, true);
			return;
		}
		FZ_ASSERT(!r && fi.head_pfn <= pfn && pfn < fi.head_pfn + (1UL << fi.order),
			  "lookup of %lu", (unsigned long)pfn);
		fz_guest_scan();
		FZ_ASSERT((F.at[pfn] >= 0 || (F.g && F.ghead[pfn] >= 0)) ==
				  (fi.state == GFA_FRAME_ALLOCATED),
			  "pfn %lu: state %d, the model's block %d", (unsigned long)pfn, fi.state,
			  F.at[pfn]);
		fz_after(0, false);
		return;
	default: {
		struct gfa_zone_vmstat_wrap {
			struct gfa_vmstat vs;
		} w;
		struct gfa_pcp_stat ps;

		FZ_ASSERT(gfa_zone_vmstat(F.pool, v % F.nr_zones, &w.vs) == 0, "zone_vmstat");
		if (F.pcp[0])
			FZ_ASSERT(gfa_pcp_stat(F.pcp[0], &ps) == 0 && ps.count >= 0, "pcp_stat");
		r = gfa_zone_stat(F.pool, F.nr_zones + v % 3, NULL);
		FZ_ASSERT(r == GFA_EFAULT, "zone_stat(NULL): %d", r);
		fz_after(r, true);
		return;
	}
	}
	FZ_ASSERT(r >= 0, "text output: %d", r);
	if (len)
		FZ_ASSERT(strlen(buf) == ((size_t)r < len ? (size_t)r : len - 1),
			  "text of %d bytes in %zu: strlen %zu", r, len, strlen(buf));
	fz_after(0, false);
}

static void op_policy(void)
{
	bool bad = false;
	unsigned int zone = pick_zone(&bad);
	uint8_t v = in8(F.in);
	struct gfa_release_policy p = { .low = in16(F.in) % 1024,
					.high = 0,
					.min_empty_frac = 1 + v % 8 };
	struct gfa_compact_config cc = { .linear_only = v & 1, .proactiveness = v % 101 };
	int r, expect = bad ? GFA_ERANGE : 0;

	F.what = "policy";
	p.high = p.low + in16(F.in) % 1024;
	if (!expect && (v & 0x30) == 0x30) {
		p.low = p.high + 1;
		expect = GFA_EINVAL;
	} else if (!expect && (v & 0x30) == 0x20) {
		p.min_empty_frac = 0;
		expect = GFA_EINVAL;
	}
	if (v & 0x40) {
		if (v & 0x80)
			cc.proactiveness = 101 + v % 50;
		r = gfa_compact_configure(F.pool, &cc);
		expect = v & 0x80 ? GFA_EINVAL : 0;
	} else {
		r = gfa_zone_set_release_policy(F.pool, zone, &p);
	}
	FZ_ASSERT(r == expect, "policy: %d, want %d", r, expect);
	fz_after(r, r != 0);
}

/* ---- NULL arguments on every public call (tools/fuzz_null_calls.py) ---- */

/* What a call with one pointer argument NULL must give (the generator's words). */
enum fzn_expect {
	FZN_EFAULT,   /* -EFAULT */
	FZN_NULL,     /* NULL with errno EFAULT */
	FZN_NULL_ANY, /* NULL (an accessor: errno unspecified) */
	FZN_VALUE,    /* the documented value (0, false) */
	FZN_NOOP,     /* nothing (an int result: 0) */
	FZN_OK,       /* a success (>= 0): NULL is allowed there */
};

/* The valid arguments of a case: a handle of each kind, a callback of each type. */
struct fzn_args {
	struct gfa_backing *h_gfa_backing;
	struct gfa_free_report *h_gfa_free_report;
	struct gfa_guest *h_gfa_guest;
	struct gfa_host_return *h_gfa_host_return;
	struct gfa_hostpool *h_gfa_hostpool;
	struct gfa_numa_pool *h_gfa_numa_pool;
	struct gfa_numa_topology *h_gfa_numa_topology;
	struct gfa_pcp *h_gfa_pcp;
	struct gfa_pool *h_gfa_pool;
	struct gfa_release_engine *h_gfa_release_engine;
	gfa_block_fn fn_gfa_block_fn;
	gfa_release_done_fn fn_gfa_release_done_fn;
	gfa_report_done_fn fn_gfa_report_done_fn;
	void *scratch; /* zeroed: every other pointer argument */
};

struct fzn_case {
	const char *fn, *param; /* the call, and its argument passed NULL */
	enum fzn_expect expect;
	int64_t value;      /* FZN_VALUE */
	unsigned int needs; /* FZN_NEED(kind) of the handles it takes */
	bool counted;       /* its -EFAULT counted in the first argument's pool */
	int64_t (*call)(const struct fzn_args *a);
};

#include "fuzz_null_calls.h"
#define FZN_NR ARRAY_SIZE(fzn_cases)

/* Callbacks a case passes: never called, since the call refuses first. */
static int fzn_block(void *arg, uint64_t pfn, unsigned int order, enum gfa_migratetype mt,
		     uint64_t owner)
{
	(void)arg, (void)pfn, (void)order, (void)mt, (void)owner;
	fz_fail("a callback of a call with a NULL argument ran");
}

static void fzn_release_done(void *cookie, uint64_t off, uint64_t len, int result)
{
	(void)cookie, (void)off, (void)len, (void)result;
	fz_fail("a callback of a call with a NULL argument ran");
}

static void fzn_report_done(void *cookie, int result)
{
	(void)cookie, (void)result;
	fz_fail("a callback of a call with a NULL argument ran");
}

/* A handle the case needs, made for it where the model has none; false: none to be had. */
static bool fzn_handle(struct fzn_args *a, unsigned int kind)
{
	static const struct gfa_host_return_config hc = { .no_settle = true, .force_sync = true };
	static const struct gfa_release_config rc = { .force_sync = true };
	int fd;
	uint64_t off;

	switch (kind) {
	case FZN_K_gfa_pool:
		return (a->h_gfa_pool = F.pool) != NULL;
	case FZN_K_gfa_pcp:
		return (a->h_gfa_pcp = F.pcp[0]) != NULL;
	case FZN_K_gfa_backing:
		return (a->h_gfa_backing = F.b) != NULL;
	case FZN_K_gfa_guest:
		return (a->h_gfa_guest = F.g) != NULL;
	case FZN_K_gfa_numa_topology:
		if (!a->h_gfa_numa_topology)
			a->h_gfa_numa_topology = gfa_numa_topology_fake(F.nr_zones, NULL);
		return a->h_gfa_numa_topology != NULL;
	case FZN_K_gfa_numa_pool:
		if (fzn_handle(a, FZN_K_gfa_numa_topology))
			a->h_gfa_numa_pool = gfa_numa_attach(F.pool, a->h_gfa_numa_topology);
		return a->h_gfa_numa_pool != NULL;
	case FZN_K_gfa_release_engine:
		if (F.b && !gfa_pfn_to_fd(F.pool, F.zstart[0], &fd, &off))
			a->h_gfa_release_engine = gfa_release_create(fd, NULL, &rc);
		return a->h_gfa_release_engine != NULL;
	case FZN_K_gfa_host_return:
		a->h_gfa_host_return = F.b ? gfa_host_return_start(F.pool, F.b, &hc) : NULL;
		return a->h_gfa_host_return != NULL;
	case FZN_K_gfa_free_report:
		a->h_gfa_free_report = F.g ? gfa_guest_report_create(F.b, F.g) : NULL;
		return a->h_gfa_free_report != NULL;
	case FZN_K_gfa_hostpool:
		return false; /* needs a service: tests/fuzz/fuzz_hostpool.c drives that */
	default:
		fz_fail("no handle of kind %s", fzn_kind_name[kind]);
	}
}

/* The handles made for a case go again (the host return quiet first, as op_host_return). */
static void fzn_put(struct fzn_args *a)
{
	if (a->h_gfa_host_return) {
		FZ_ASSERT(!gfa_host_return_quiesce(a->h_gfa_host_return, 30000), "quiesce");
		gfa_host_return_stop(a->h_gfa_host_return);
	}
	gfa_guest_report_destroy(a->h_gfa_free_report);
	FZ_ASSERT(!gfa_release_destroy(a->h_gfa_release_engine), "release_destroy");
	gfa_numa_detach(a->h_gfa_numa_pool);
	gfa_numa_topology_free(a->h_gfa_numa_topology);
}

/* Did the call give what its case promises? */
static void fzn_check(const struct fzn_case *c, int64_t r, int err)
{
	bool ok;

	switch (c->expect) {
	case FZN_EFAULT:
		ok = r == -EFAULT;
		break;
	case FZN_NULL:
		ok = !r && err == EFAULT;
		break;
	case FZN_NULL_ANY:
	case FZN_NOOP:
	case FZN_VALUE:
		ok = r == c->value;
		break;
	default:
		ok = r >= 0;
		break;
	}
	FZ_ASSERT(ok, "%s with %s NULL gave %ld (errno %d), the headers promise %s", c->fn,
		  c->param, (long)r, err,
		  c->expect == FZN_EFAULT ? "-EFAULT" :
		  c->expect == FZN_NULL   ? "NULL with errno EFAULT" :
		  c->expect == FZN_OK     ? "a success" :
					    "0 (or NULL)");
}

/*
 * One public call with one pointer argument NULL and the others valid: the promised
 * result, counted once in err_fault where the call has a pool at hand (fz_after checks
 * the counters, and that no frame moved).
 */
static void op_null(void)
{
	static uint64_t scratch[32768];
	const struct fzn_case *c = &fzn_cases[in16(F.in) % FZN_NR];
	struct fzn_args a = { .fn_gfa_block_fn = fzn_block,
			      .fn_gfa_release_done_fn = fzn_release_done,
			      .fn_gfa_report_done_fn = fzn_report_done,
			      .scratch = scratch };
	bool have = true;
	int64_t r;
	int err;

	F.what = c->fn;
	for (unsigned int k = 0; have && k < ARRAY_SIZE(fzn_kind_name); k++)
		if (c->needs & (1U << k))
			have = fzn_handle(&a, k);
	if (!have) {
		fzn_put(&a);
		return; /* (no backing, cache or guest to call it on) */
	}
	memset(scratch, 0, sizeof(scratch));
	errno = 0;
	r = c->call(&a);
	err = errno;
	fzn_put(&a);
	if (fz_trace)
		fprintf(stderr, "op %d null: %s(%s = NULL): %ld, errno %d\n", F.op, c->fn, c->param,
			(long)r, err);
	fzn_check(c, r, err);
	fz_after(c->expect == FZN_EFAULT || c->expect == FZN_NULL ? -EFAULT : 0, c->counted);
}

/* ---- pool setup ---- */

/* Bad configs first: each one refused with its errno and nothing created. */
static void fz_bad_config(uint8_t v)
{
	struct gfa_pool_config cfg;
	struct gfa_pool *p;

	F.what = "bad config";
	gfa_pool_config_init(&cfg, 1024);
	switch (v % 6) {
	case 0:
		cfg.nr_zones = 0;
		break;
	case 1:
		cfg.nr_zones = GFA_MAX_ZONES + 1;
		break;
	case 2:
		cfg.zones[0].nr_frames = GFA_PAGEBLOCK_FRAMES - 1;
		break;
	case 3:
		cfg.pcp_batch = GFA_PCP_BATCH_MAX + 1;
		break;
	case 4:
		cfg.pcp_high = GFA_PCP_HIGH_MAX + 1;
		break;
	default:
		cfg.zones[0].nr_frames = (1ULL << 31) + 1;
		break;
	}
	errno = 0;
	p = gfa_pool_create(&cfg);
	FZ_ASSERT(!p && errno == EINVAL, "bad config %u: pool %p errno %d", v % 6, (void *)p,
		  errno);
	errno = 0;
	FZ_ASSERT(!gfa_pool_create(NULL) && errno == EFAULT, "NULL config");
}

static bool fz_setup(struct fz_in *in)
{
	struct gfa_pool_config cfg;
	uint8_t v = in8(in);
	uint64_t start;

	memset(&F, 0, sizeof(F));
	fz_trace = getenv("FUZZ_TRACE") != NULL;
	F.in = in;
	if ((v & 0xc0) == 0xc0)
		fz_bad_config(in8(in));
	gfa_pool_config_init(&cfg, GFA_PAGEBLOCK_FRAMES);
	cfg.nr_zones = 1 + v % 3;
	for (unsigned int z = 0; z < cfg.nr_zones; z++) {
		uint8_t s = in8(in);

		/* 2-8 MiB, mostly 2; sometimes a ragged end */
		cfg.zones[z].nr_frames = (s % 8 == 7 ? 4 :
					  s % 4 == 3 ? 2 :
						       1) *
						 GFA_PAGEBLOCK_FRAMES +
					 (s & 0x10 ? s : 0);
		cfg.zones[z].node = 0;
	}
	if (v & 4) {
		cfg.pcp_batch = 1 + in8(in) % 32;
		cfg.pcp_high = cfg.pcp_batch * (1 + in8(in) % 8);
	}
	cfg.pcp_free_strict = v & 8;
	cfg.pcp_no_high_order = v & 0x10;
	cfg.pcp_free_high_old = (v & 0x20) != 0;
	F.pool = gfa_pool_create(&cfg);
	FZ_ASSERT(F.pool, "pool_create: %d", errno);
	F.nr_zones = gfa_pool_nr_zones(F.pool);
	for (unsigned int z = 0; z < F.nr_zones; z++) {
		FZ_ASSERT(!gfa_zone_span(F.pool, z, &F.zstart[z], &F.znr[z]), "span");
		F.total += F.znr[z];
		F.end_pfn = F.zstart[z] + F.znr[z];
	}
	FZ_ASSERT(F.end_pfn <= FZ_MAX_PFNS, "pool of %lu pfns", (unsigned long)F.end_pfn);
	memset(F.at, 0xff, sizeof(F.at));
	memset(F.ghead, 0xff, sizeof(F.ghead));
	if (in8(in) % 8) {
		/* the default zeroer: a stopped guest's frames are free at once all the same */
		struct gfa_backing_config bc = { .no_thp_advice = true };

		F.b = gfa_backing_create(F.pool, &bc);
		FZ_ASSERT(F.b, "backing: %d", errno);
	}
	start = in8(in);
	if (start % 4) {
		F.pcp[0] = gfa_pcp_create(F.pool, (unsigned int)start % F.nr_zones);
		FZ_ASSERT(F.pcp[0], "pcp_create");
		if (start & 0x10)
			F.pcp[1] = gfa_pcp_create(F.pool, (unsigned int)(start >> 5) % F.nr_zones);
	}
	errno = 0;
	FZ_ASSERT(!gfa_pcp_create(F.pool, F.nr_zones) && errno == ERANGE, "pcp_create bad zone");
	FZ_ASSERT(gfa_pool_vmstat(F.pool, &F.vs) == 0, "vmstat");
	/* (pcp_create's ERANGE is counted) */
	FZ_ASSERT(F.vs.err_range == 1, "pcp_create(bad zone) counted %lu",
		  (unsigned long)F.vs.err_range);
	return true;
}

static void fz_teardown(void)
{
	F.what = "teardown";
	/* everything in flight comes back, every block is freed: all frames free again */
	while (F.nr_fl) {
		FZ_ASSERT(!zone_release_done(F.pool, F.fl[0].pfn, F.fl[0].nr, false),
			  "done at teardown");
		F.fl[0] = F.fl[--F.nr_fl];
	}
	while (F.nr_blk) {
		struct fz_block *k = &F.blk[F.nr_blk - 1];

		fz_verify(k, k->pfn);
		FZ_ASSERT(!gfa_free(F.pool, k->pfn, k->order, k->owner), "free at teardown");
		fz_remove(F.nr_blk - 1);
	}
	if (F.g) {
		fz_guest_mark(0, F.gnr);
		gfa_guest_destroy(F.g);
		F.g = NULL;
		FZ_ASSERT(gfa_backing_zero_quiesce(F.b, 10000) == 0, "zeroer quiesce");
	}
	gfa_pcp_destroy(F.pcp[0]);
	gfa_pcp_destroy(F.pcp[1]);
	F.pcp[0] = F.pcp[1] = NULL;
	FZ_ASSERT(gfa_pool_vmstat(F.pool, &F.vs) == 0, "vmstat");
	fz_check_pool();
	for (unsigned int z = 0; z < F.nr_zones; z++) {
		gfa_zone_unclaim(F.pool, z, 0);
		for (uint64_t o = 1; o <= FZ_OWNERS; o++)
			gfa_zone_unclaim(F.pool, z, o);
	}
	for (uint64_t o = 1; o <= FZ_OWNERS; o++) {
		if (F.owner[o])
			FZ_ASSERT(!gfa_owner_register(F.pool, o, NULL, NULL), "unregister");
		free(F.owner[o]);
		F.owner[o] = NULL;
	}
	gfa_backing_destroy(F.b);
	gfa_pool_destroy(F.pool);
}

/*
 * ASan keeps 256 MiB of freed memory in quarantine by default, so every execution's pool
 * (the frame array, the 2 MiB owner registry) lands on fresh pages: faults and shadow
 * zeroing were a third of the time.  32 MiB still holds several executions' frees, so
 * a use after free within an execution is caught as before.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "quarantine_size_mb=32";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static void (*const ops[])(void) = {
		op_alloc,  op_alloc,   op_alloc, op_free,        op_free,  op_free_many,
		op_drain,  op_compact, op_owner, op_collapse,    op_claim, op_take,
		op_done,   op_backing, op_split, op_index,       op_stats, op_policy,
		op_engine, op_guest,   op_guest, op_host_return, op_null,
	};
	struct fz_in in = { data, size };

	fz_setup(&in);
	for (F.op = 0; F.op < FZ_MAX_OPS && in.n; F.op++)
		ops[in8(&in) % ARRAY_SIZE(ops)]();
	fz_teardown();
	return 0;
}
