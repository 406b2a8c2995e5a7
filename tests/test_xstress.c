/*
 * Cross-module stress: guests created and destroyed, balloons inflated and deflated,
 * guest ranges collapsed, blocks allocated and freed through vCPU caches, direct and
 * explicit compaction - all at once, while kcompactd and the host-return thread (io_uring
 * release, idle scrub, idle-cache drain) run.  Checks: guest memory keeps its pattern
 * across moves, ballooned and deflated memory reads zero, GFA_BACKING_ZERO blocks read
 * zero, pool invariants at quiet points, per-owner frame accounting, and that everything
 * comes back at the end.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <gfa/refvmm.h>
#include "tests/test_util.h"
#include "common/compiler.h"

#define XS_MiB        (1UL << 20)
#define XS_ZONES      2
#define XS_ZONE_BYTES (64 * XS_MiB)
#define XS_GUESTS     2   /* guest threads */
#define XS_GUESTS_PER 2   /* guests per guest thread */
#define XS_PCPW       2   /* cache threads */
#define XS_SLOTS      48  /* blocks a cache thread holds at most */
#define XS_WORDS      512 /* words per frame */

struct xs;

struct xs_guest {
	struct gfa_guest *g;
	uint64_t seed, nr;
	uint8_t *balloon;       /* per gfn: ballooned out */
	pthread_mutex_t access; /* held while the thread touches guest memory (vCPU running) */
};

struct xs_gthread {
	struct xs *s;
	int idx;
	uint64_t rnd;
	struct gfa_pcp *pcp[XS_ZONES];
	struct xs_guest gs[XS_GUESTS_PER];
	uint64_t creates, inflates, deflates, collapses, verifies;
};

struct xs_blk {
	bool used;
	uint64_t pfn;
	unsigned int order;
	uint64_t tag;
};

struct xs_pthread {
	struct xs *s;
	int idx;
	uint64_t rnd, owner;
	struct gfa_pcp *pcp;
	pthread_mutex_t lock; /* the owner's lock: migrate only tries it */
	struct xs_blk blk[XS_SLOTS];
	uint64_t allocs, frees, zero_checked, moves;
};

struct xs {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_host_return *hr;
	_Atomic bool stop;
	_Atomic int failed;
	char msg[1024];
	pthread_mutex_t msg_lock;
	/* quiet points */
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond;
	bool want_quiet;
	int parked, nr_workers;
	uint64_t checks, hr_restarts;
	_Atomic uint64_t live_checks; /* gfa_pool_check calls while everything runs */
	pthread_mutex_t hr_lock;      /* the test's: s->hr against a restart */
};

static void xs_fail(struct xs *s, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&s->msg_lock);
	if (!atomic_load(&s->failed)) {
		va_start(ap, fmt);
		vsnprintf(s->msg, sizeof(s->msg), fmt, ap);
		va_end(ap);
		fprintf(stderr, "xstress FAIL: %s\n", s->msg);
	}
	atomic_fetch_add(&s->failed, 1);
	atomic_store(&s->stop, true);
	pthread_mutex_unlock(&s->msg_lock);
}

/* Park here while the main thread wants a quiet point. */
static void xs_checkpoint(struct xs *s)
{
	pthread_mutex_lock(&s->q_lock);
	if (s->want_quiet) {
		s->parked++;
		pthread_cond_broadcast(&s->q_cond);
		while (s->want_quiet)
			pthread_cond_wait(&s->q_cond, &s->q_lock);
		s->parked--;
	}
	pthread_mutex_unlock(&s->q_lock);
}

static bool frame_is_zero(const void *p)
{
	const uint64_t *w = p;

	for (int i = 0; i < XS_WORDS; i++)
		if (w[i])
			return false;
	return true;
}

/* ---- guests ---- */

static int xs_pause(void *ctx)
{
	pthread_mutex_lock(&((struct xs_guest *)ctx)->access);
	return 0;
}

static int xs_resume(void *ctx)
{
	pthread_mutex_unlock(&((struct xs_guest *)ctx)->access);
	return 0;
}

static const struct gfa_guest_vcpu_ops xs_vcpu_ops = { xs_pause, xs_resume };

static uint64_t xs_pat(struct xs_guest *x, uint64_t gfn, int w)
{
	return (x->seed ^ (gfn << 16) ^ (uint64_t)w) | 1; /* never 0 */
}

static void xs_write_page(struct xs_guest *x, uint64_t gfn)
{
	uint64_t *w = (uint64_t *)gfa_guest_hva(x->g) + gfn * XS_WORDS;

	w[0] = xs_pat(x, gfn, 0);
	w[XS_WORDS - 1] = xs_pat(x, gfn, XS_WORDS - 1);
	w[gfn % (XS_WORDS - 2) + 1] = xs_pat(x, gfn, 7);
}

static bool xs_page_ok(struct xs_guest *x, uint64_t gfn)
{
	uint64_t *w = (uint64_t *)gfa_guest_hva(x->g) + gfn * XS_WORDS;

	if (x->balloon[gfn])
		return frame_is_zero(w);
	return w[0] == xs_pat(x, gfn, 0) && w[XS_WORDS - 1] == xs_pat(x, gfn, XS_WORDS - 1) &&
	       w[gfn % (XS_WORDS - 2) + 1] == xs_pat(x, gfn, 7);
}

static void xs_verify(struct xs_gthread *t, struct xs_guest *x, const char *when)
{
	pthread_mutex_lock(&x->access);
	for (uint64_t gfn = 0; gfn < x->nr; gfn++)
		if (!xs_page_ok(x, gfn)) {
			uint64_t *w = (uint64_t *)gfa_guest_hva(x->g) + gfn * XS_WORDS;

			xs_fail(t->s, "guest %lx (%s): gfn %lu wrong after %s: %lx (want %lx)",
				(unsigned long)gfa_guest_id(x->g),
				x->balloon[gfn] ? "ballooned" : "backed", (unsigned long)gfn, when,
				(unsigned long)w[0],
				x->balloon[gfn] ? 0UL : (unsigned long)xs_pat(x, gfn, 0));
			break;
		}
	pthread_mutex_unlock(&x->access);
	t->verifies++;
}

static void xs_guest_destroy(struct xs_guest *x)
{
	if (!x->g)
		return;
	gfa_guest_destroy(x->g);
	x->g = NULL;
	free(x->balloon);
	x->balloon = NULL;
	pthread_mutex_destroy(&x->access);
}

static void xs_guest_create(struct xs_gthread *t, struct xs_guest *x)
{
	unsigned int zone = (unsigned int)(tu_rand(&t->rnd) % XS_ZONES);
	struct gfa_guest_config cfg = {
		.mem_bytes = (2 + tu_rand(&t->rnd) % 7) * 2 * XS_MiB,
		.zone = zone,
		.pcp = tu_rand(&t->rnd) & 1 ? t->pcp[zone] : NULL,
		.small_only = (tu_rand(&t->rnd) % 3) == 0,
		.vcpu_ops = &xs_vcpu_ops,
		.vcpu_ctx = x,
	};

	bool claimed = false;

	/* compaction may move the guest from its creation on: the ops pause this thread's
	 * accesses, so their lock exists first */
	pthread_mutex_init(&x->access, NULL);

	if (tu_rand(&t->rnd) % 3 == 0) {
		cfg.id = 0x7000000 + ((uint64_t)t->idx << 20) + t->creates * 2 +
			 (uint64_t)(x - t->gs);
		claimed =
			!gfa_zone_claim(t->s->pool, zone, cfg.id, cfg.mem_bytes >> GFA_FRAME_SHIFT);
	}
	x->g = gfa_guest_create(t->s->pool, t->s->b, &cfg);
	if (claimed) {
		int64_t left = gfa_zone_unclaim(t->s->pool, zone, cfg.id);

		if (left < 0 || (x->g && left != 0))
			xs_fail(t->s, "unclaim after %s create: %ld", x->g ? "a" : "a failed",
				(long)left);
	}
	if (!x->g) {
		if (errno != ENOMEM)
			xs_fail(t->s, "guest create: %s", strerror(errno));
		pthread_mutex_destroy(&x->access);
		return;
	}
	x->nr = cfg.mem_bytes >> GFA_FRAME_SHIFT;
	x->seed = tu_rand(&t->rnd);
	x->balloon = calloc(x->nr, 1);
	pthread_mutex_lock(&x->access);
	/* a new guest reads zero everywhere: no other owner's data */
	for (uint64_t gfn = 0; gfn < x->nr; gfn++)
		if (!frame_is_zero((uint64_t *)gfa_guest_hva(x->g) + gfn * XS_WORDS)) {
			xs_fail(t->s, "new guest %lx (zone %u, %s): gfn %lu not zero",
				(unsigned long)gfa_guest_id(x->g), zone, cfg.pcp ? "pcp" : "zone",
				(unsigned long)gfn);
			break;
		}
	for (uint64_t gfn = 0; gfn < x->nr; gfn++)
		xs_write_page(x, gfn);
	pthread_mutex_unlock(&x->access);
	t->creates++;
}

static void xs_inflate(struct xs_gthread *t, struct xs_guest *x)
{
	struct gfa_gpa_range r[3];
	unsigned int n = 1 + (unsigned int)(tu_rand(&t->rnd) % 3);
	uint8_t *mark = calloc(x->nr, 1);
	bool any = false, overlap = false;
	uint64_t total = 0;
	int64_t ret;

	for (unsigned int k = 0; k < n; k++) {
		uint64_t lo = tu_rand(&t->rnd) % x->nr;
		uint64_t len = 1 + tu_rand(&t->rnd) % (tu_rand(&t->rnd) & 1 ? 8 : 700);

		/* sometimes right after the previous range: the merge path */
		if (k && tu_rand(&t->rnd) % 3 == 0) {
			lo = (r[k - 1].gpa + r[k - 1].len) >> GFA_FRAME_SHIFT;
			if (lo >= x->nr)
				lo = 0;
		}
		if (len > x->nr - lo)
			len = x->nr - lo;
		r[k] = (struct gfa_gpa_range){ lo << GFA_FRAME_SHIFT, len << GFA_FRAME_SHIFT };
		for (uint64_t i = lo; i < lo + len; i++) {
			overlap |= mark[i];
			mark[i] = 1;
			any |= x->balloon[i];
		}
		total += len;
	}
	ret = gfa_balloon_inflate(x->g, r, n);
	if (overlap || any) {
		if (ret != (overlap ? -ENOTUNIQ : -EALREADY))
			xs_fail(t->s, "inflate (overlap %d, ballooned %d): %ld", overlap, any,
				(long)ret);
		free(mark);
		return;
	}
	if (ret == -ENOMEM) {
		free(mark);
		return;
	}
	if (ret != (int64_t)total) {
		xs_fail(t->s, "inflate %u ranges of %lu frames: %ld", n, (unsigned long)total,
			(long)ret);
		free(mark);
		return;
	}
	for (uint64_t i = 0; i < x->nr; i++)
		x->balloon[i] |= mark[i];
	free(mark);
	t->inflates++;
}

/* A run of ballooned gfns at or after a random point: [*lo, *hi), or false. */
static bool xs_ballooned_run(struct xs_gthread *t, struct xs_guest *x, uint64_t from, uint64_t *lo,
			     uint64_t *hi)
{
	uint64_t l, h, max = 1 + tu_rand(&t->rnd) % 1024;

	for (l = from; l < x->nr && !x->balloon[l]; l++)
		;
	if (l == x->nr)
		return false;
	for (h = l; h < x->nr && x->balloon[h] && h - l < max; h++)
		;
	*lo = l;
	*hi = h;
	return true;
}

static void xs_deflate(struct xs_gthread *t, struct xs_guest *x)
{
	struct gfa_gpa_range r[2];
	uint64_t lo[2], hi[2], total = 0;
	unsigned int n = 0;
	int64_t ret;

	if (!xs_ballooned_run(t, x, tu_rand(&t->rnd) % x->nr, &lo[0], &hi[0]))
		return;
	n = 1;
	if (tu_rand(&t->rnd) & 1 && hi[0] + 1 < x->nr &&
	    xs_ballooned_run(t, x, hi[0] + 1, &lo[1], &hi[1]))
		n = 2;
	for (unsigned int k = 0; k < n; k++) {
		r[k] = (struct gfa_gpa_range){ lo[k] << GFA_FRAME_SHIFT,
					       (hi[k] - lo[k]) << GFA_FRAME_SHIFT };
		total += hi[k] - lo[k];
	}
	ret = gfa_balloon_deflate(x->g, r, n);
	if (ret == -ENOMEM)
		return;
	if (ret != (int64_t)total) {
		xs_fail(t->s, "deflate %u ranges [%lu, %lu) ..: %ld", n, (unsigned long)lo[0],
			(unsigned long)hi[0], (long)ret);
		return;
	}
	/* deflated memory reads zero (balloon[] still says "expect zero") */
	pthread_mutex_lock(&x->access);
	for (unsigned int k = 0; k < n; k++)
		for (uint64_t gfn = lo[k]; gfn < hi[k]; gfn++) {
			if (!frame_is_zero((uint64_t *)gfa_guest_hva(x->g) + gfn * XS_WORDS)) {
				xs_fail(t->s, "guest %lx: deflated gfn %lu not zero",
					(unsigned long)gfa_guest_id(x->g), (unsigned long)gfn);
				break;
			}
			x->balloon[gfn] = 0;
			xs_write_page(x, gfn);
		}
	pthread_mutex_unlock(&x->access);
	t->deflates++;
}

static void *xs_guest_main(void *arg)
{
	struct xs_gthread *t = arg;
	struct xs *s = t->s;

	for (int z = 0; z < XS_ZONES; z++)
		t->pcp[z] = gfa_pcp_create(s->pool, (unsigned int)z);
	while (!atomic_load(&s->stop)) {
		struct xs_guest *x = &t->gs[tu_rand(&t->rnd) % XS_GUESTS_PER];
		unsigned int op = (unsigned int)(tu_rand(&t->rnd) % 100);

		xs_checkpoint(s);
		if (!x->g) {
			xs_guest_create(t, x);
			continue;
		}
		if (op < 30) {
			xs_inflate(t, x);
			xs_verify(t, x, "inflate");
		} else if (op < 60) {
			xs_deflate(t, x);
			xs_verify(t, x, "deflate");
		} else if (op < 75) {
			t->collapses += (uint64_t)gfa_guest_collapse(x->g, 2);
			xs_verify(t, x, "collapse");
		} else if (op < 90) {
			xs_verify(t, x, "a while");
		} else {
			xs_verify(t, x, "before destroy");
			xs_guest_destroy(x);
		}
	}
	return NULL;
}

/* ---- VMs: vCPUs (KVM or threads) writing and checking their RAM ---- */

static void *xs_vm_main(void *arg)
{
	struct xs_gthread *t = arg;
	struct xs *s = t->s;
	struct gfa_vm *vm = NULL;
	uint64_t seed = 0, bytes = 0;
	int runs = 0;

	while (!atomic_load(&s->stop)) {
		xs_checkpoint(s);
		if (!vm) {
			bool kvm = !tu_sanitizer() && tu_rand(&t->rnd) % 2;
			struct gfa_vm_config cfg = {
				.mem_bytes = (4 + 2 * (tu_rand(&t->rnd) % 3)) * XS_MiB,
				.vcpus = 1 + (unsigned int)(tu_rand(&t->rnd) % 2),
				.zone = (unsigned int)(tu_rand(&t->rnd) % XS_ZONES),
				.kvm = kvm ? GFA_VM_KVM_AUTO : GFA_VM_KVM_OFF,
				.small_only = tu_rand(&t->rnd) % 3 == 0,
			};

			vm = gfa_vm_create(s->pool, s->b, &cfg);
			if (!vm) {
				if (errno != ENOMEM)
					xs_fail(s, "vm create: %s", strerror(errno));
				usleep(1000);
				continue;
			}
			bytes = gfa_vm_is_kvm(vm, NULL) && gfa_kvm_is_software() == 1 ? 16384 :
											256 << 10;
			seed = tu_rand(&t->rnd);
			if (gfa_vm_run_part(vm, GFA_KVM_TEST_FILL, seed, bytes, NULL)) {
				xs_fail(s, "vm fill failed (%s)",
					gfa_vm_is_kvm(vm, NULL) ? "kvm" : "threads");
				continue;
			}
			t->creates++;
			t->collapses += gfa_vm_is_kvm(vm, NULL); /* (KVM VMs) */
			runs = 0;
		}
		if (++runs > 20 || tu_rand(&t->rnd) % 16 == 0) {
			gfa_vm_destroy(vm);
			vm = NULL;
			continue;
		}
		uint64_t bad = 0;
		int ret = gfa_vm_run_part(vm, GFA_KVM_TEST_VERIFY, seed, bytes, &bad);

		if (ret || bad)
			xs_fail(s, "vm (%s) verify: %d, %lu words differ",
				gfa_vm_is_kvm(vm, NULL) ? "kvm" : "threads", ret,
				(unsigned long)bad);
		if (tu_rand(&t->rnd) % 4 == 0)
			gfa_guest_collapse(gfa_vm_guest(vm), 1);
		t->verifies++;
	}
	gfa_vm_destroy(vm);
	return NULL;
}

/* ---- cache threads ---- */

static uint64_t xs_bpat(const struct xs_blk *k, uint64_t j, int w)
{
	return (k->tag ^ (j << 20) ^ (uint64_t)w) | 1;
}

static void xs_blk_write(struct xs_pthread *p, const struct xs_blk *k)
{
	for (uint64_t j = 0; j < (1UL << k->order); j++) {
		uint64_t *w = gfa_pfn_to_addr(p->s->pool, k->pfn + j);

		w[0] = xs_bpat(k, j, 0);
		w[XS_WORDS - 1] = xs_bpat(k, j, XS_WORDS - 1);
	}
}

static bool xs_blk_ok(struct xs_pthread *p, const struct xs_blk *k)
{
	for (uint64_t j = 0; j < (1UL << k->order); j++) {
		uint64_t *w = gfa_pfn_to_addr(p->s->pool, k->pfn + j);

		if (w[0] != xs_bpat(k, j, 0) || w[XS_WORDS - 1] != xs_bpat(k, j, XS_WORDS - 1))
			return false;
	}
	return true;
}

/* The cache thread's owner op: only tries its lock, like a guest. */
static int xs_blk_migrate(void *ctx, uint64_t owner, uint64_t src, uint64_t dst, unsigned int order)
{
	struct xs_pthread *p = ctx;
	struct gfa_frame_info fi;
	int ret = -EAGAIN;

	if (pthread_mutex_trylock(&p->lock))
		return -EAGAIN;
	if (!gfa_frame_lookup(p->s->pool, src, &fi) && fi.owner == owner && fi.index < XS_SLOTS &&
	    p->blk[fi.index].used && p->blk[fi.index].pfn == src &&
	    p->blk[fi.index].order == order) {
		memcpy(gfa_pfn_to_addr(p->s->pool, dst), gfa_pfn_to_addr(p->s->pool, src),
		       GFA_FRAME_SIZE << order);
		p->blk[fi.index].pfn = dst;
		p->moves++;
		ret = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

static const struct gfa_owner_ops xs_blk_ops = { .migrate = xs_blk_migrate };

static void xs_blk_free(struct xs_pthread *p, int i)
{
	struct xs_blk *k = &p->blk[i];
	int ret;

	if (!xs_blk_ok(p, k))
		xs_fail(p->s, "cache thread %d: block %lx order %u lost its contents", p->idx,
			(unsigned long)k->pfn, k->order);
	while ((ret = gfa_backing_free(p->s->b, p->pcp, k->pfn, k->order, p->owner)) == GFA_EBUSY)
		sched_yield();
	if (ret)
		xs_fail(p->s, "cache thread %d: free %lx order %u: %d", p->idx,
			(unsigned long)k->pfn, k->order, ret);
	k->used = false;
	p->frees++;
}

/* Every order-0 block we hold, as one gfa_pcp_free_many batch. */
static void xs_blk_free_many(struct xs_pthread *p)
{
	uint64_t pfns[XS_SLOTS];
	int slot[XS_SLOTS], n = 0, ret;

	for (int i = 0; i < XS_SLOTS; i++)
		if (p->blk[i].used && !p->blk[i].order) {
			if (!xs_blk_ok(p, &p->blk[i]))
				xs_fail(p->s, "cache thread %d: block %lx lost its contents",
					p->idx, (unsigned long)p->blk[i].pfn);
			gfa_backing_mark_dirty(p->s->b, p->blk[i].pfn, 0);
			slot[n] = i;
			pfns[n++] = p->blk[i].pfn;
		}
	if (!n)
		return;
	/* a block being moved is refused (GFA_EBUSY): we own pfns[ret..] still */
	for (int done = 0; done < n;) {
		ret = gfa_pcp_free_many(p->pcp, pfns + done, (size_t)(n - done), 0, p->owner);
		if (ret == GFA_EBUSY) {
			sched_yield();
			continue;
		}
		if (ret <= 0) {
			xs_fail(p->s, "cache thread %d: free_many: %d", p->idx, ret);
			return;
		}
		for (int k = done; k < done + ret; k++)
			p->blk[slot[k]].used = false;
		done += ret;
		p->frees += (uint64_t)ret;
	}
}

static void xs_blk_alloc(struct xs_pthread *p, int i)
{
	static const unsigned int orders[] = { 0, 0, 0, 0, 1, 1, 2, 3, 9, 4, 6 };
	static const enum gfa_migratetype mts[] = { GFA_MT_MOVABLE, GFA_MT_MOVABLE,
						    GFA_MT_UNMOVABLE, GFA_MT_RECLAIMABLE };
	struct xs_blk *k = &p->blk[i];
	unsigned int order = orders[tu_rand(&p->rnd) % ARRAY_SIZE(orders)];
	unsigned int flags = GFA_BACKING_ZERO | (tu_rand(&p->rnd) % 4 ? 0 : GFA_ALLOC_NOCOMPACT);
	/* now and then from the other zone's lists: freed through our cache all the same */
	bool other = tu_rand(&p->rnd) % 8 == 0;
	int64_t pfn = gfa_backing_alloc(p->s->b, other ? NULL : p->pcp,
					(unsigned int)(gfa_pcp_zone(p->pcp) + 1) % XS_ZONES, order,
					mts[tu_rand(&p->rnd) % 4], p->owner, flags);

	if (pfn == GFA_ENOMEM)
		return;
	if (pfn < 0) {
		xs_fail(p->s, "cache thread %d: alloc order %u: %ld", p->idx, order, (long)pfn);
		return;
	}
	for (uint64_t j = 0; j < (1UL << order); j++)
		if (!frame_is_zero(gfa_pfn_to_addr(p->s->pool, (uint64_t)pfn + j))) {
			struct gfa_frame_info fi;

			gfa_frame_lookup(p->s->pool, (uint64_t)pfn + j, &fi);
			xs_fail(p->s,
				"cache thread %d: GFA_BACKING_ZERO block %lx order %u: frame "
				"+%lu not zero (%lx), dirty bit %d",
				p->idx, (unsigned long)pfn, order, (unsigned long)j,
				(unsigned long)*(uint64_t *)gfa_pfn_to_addr(p->s->pool,
									    (uint64_t)pfn + j),
				gfa_backing_block_dirty(p->s->b, (uint64_t)pfn + j, 0));
			break;
		}
	p->zero_checked += 1UL << order;
	*k = (struct xs_blk){ true, (uint64_t)pfn, order, tu_rand(&p->rnd) };
	gfa_block_set_index(p->s->pool, (uint64_t)pfn, p->owner, (uint32_t)i);
	xs_blk_write(p, k);
	p->allocs++;
}

static void *xs_pcp_main(void *arg)
{
	struct xs_pthread *p = arg;
	struct xs *s = p->s;

	while (!atomic_load(&s->stop)) {
		int i = (int)(tu_rand(&p->rnd) % XS_SLOTS);

		xs_checkpoint(s);
		/* the lock across alloc and free: our migrate op refuses meanwhile */
		pthread_mutex_lock(&p->lock);
		if (tu_rand(&p->rnd) % 64 == 0)
			xs_blk_free_many(p);
		else if (p->blk[i].used)
			xs_blk_free(p, i);
		else
			xs_blk_alloc(p, i);
		if (tu_rand(&p->rnd) % 512 == 0)
			gfa_pcp_drain(p->pcp);
		pthread_mutex_unlock(&p->lock);
		if (tu_rand(&p->rnd) % 64 == 0)
			usleep(tu_rand(&p->rnd) % 3000); /* go idle: the idle drain takes over */
	}
	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < XS_SLOTS; i++)
		if (p->blk[i].used)
			xs_blk_free(p, i);
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* ---- compaction and observers ---- */

static void *xs_compact_main(void *arg)
{
	struct xs_pthread *c = arg; /* (only s, rnd, idx and owner used) */
	struct xs *s = c->s;

	while (!atomic_load(&s->stop)) {
		unsigned int z = (unsigned int)(tu_rand(&c->rnd) % XS_ZONES);
		unsigned int op = (unsigned int)(tu_rand(&c->rnd) % 10);

		xs_checkpoint(s);
		if (op < 4) {
			int order = (int)(tu_rand(&c->rnd) % 12) - 1;
			int ret = gfa_compact_zone(s->pool, z, order,
						   (enum gfa_compact_mode)(tu_rand(&c->rnd) % 3));

			if (ret < 0 && ret != -ENOMEM)
				xs_fail(s, "compact_zone(%u, %d): %d", z, order, ret);
		} else if (op < 7) {
			int64_t pfn = gfa_alloc_compact(s->pool, z, GFA_PAGEBLOCK_ORDER,
							GFA_MT_UNMOVABLE, c->owner);

			if (pfn >= 0) {
				gfa_backing_prepare(s->b, (uint64_t)pfn, GFA_PAGEBLOCK_ORDER);
				for (uint64_t j = 0; j < GFA_PAGEBLOCK_FRAMES; j++)
					if (!frame_is_zero(
						    gfa_pfn_to_addr(s->pool, (uint64_t)pfn + j))) {
						xs_fail(s,
							"prepared captured block %lx: +%lu not zero",
							(unsigned long)pfn, (unsigned long)j);
						break;
					}
				memset(gfa_pfn_to_addr(s->pool, (uint64_t)pfn), 0x77, 4096);
				int ret = gfa_backing_free(s->b, NULL, (uint64_t)pfn,
							   GFA_PAGEBLOCK_ORDER, c->owner);
				if (ret)
					xs_fail(s, "free captured block: %d", ret);
			} else if (pfn != GFA_ENOMEM) {
				xs_fail(s, "alloc_compact: %ld", (long)pfn);
			}
		} else if (op < 8) {
			gfa_compactd_wake(s->pool, z);
		} else if (op < 9) {
			if (gfa_pool_drain_all(s->pool, (int)z) < 0)
				xs_fail(s, "drain_all failed");
		} else {
			usleep(2000);
		}
	}
	return NULL;
}

static void *xs_observe_main(void *arg)
{
	struct xs_pthread *c = arg;
	struct xs *s = c->s;
	static char buf[16384];
	char msg[256];

	while (!atomic_load(&s->stop)) {
		struct gfa_zone_stat zs;
		struct gfa_backing_zone_stat bs;
		struct gfa_host_return_stat hs;
		int err;

		xs_checkpoint(s);
		/* documented: any thread, while vCPU threads allocate */
		err = gfa_pool_check(s->pool, msg, sizeof(msg));
		if (err)
			xs_fail(s, "concurrent gfa_pool_check: %d %s", err, msg);
		atomic_fetch_add(&s->live_checks, 1);
		for (unsigned int z = 0; z < XS_ZONES; z++) {
			gfa_zone_stat(s->pool, z, &zs);
			if (zs.nr_free > zs.nr_frames)
				xs_fail(s, "zone %u: nr_free %lu > frames", z,
					(unsigned long)zs.nr_free);
			gfa_backing_zone_stat(s->b, z, &bs);
			gfa_zone_fragmentation_score(s->pool, z);
		}
		pthread_mutex_lock(&s->hr_lock);
		gfa_host_return_stat(s->hr, &hs);
		pthread_mutex_unlock(&s->hr_lock);
		gfa_pool_vmstat_text(s->pool, buf, sizeof(buf));
		gfa_pool_buddyinfo(s->pool, buf, sizeof(buf));
		gfa_pool_pagetypeinfo(s->pool, buf, sizeof(buf));
		usleep(20000);
	}
	return NULL;
}

/* ---- the test ---- */

struct xs_count {
	uint64_t owner, frames;
};

static int xs_count_fn(void *arg, uint64_t pfn, unsigned int order, enum gfa_migratetype mt,
		       uint64_t owner)
{
	struct xs_count *c = arg;

	(void)pfn;
	(void)mt;
	if (owner == c->owner)
		c->frames += 1UL << order;
	return 0;
}

static uint64_t xs_owner_frames(struct xs *s, uint64_t owner)
{
	struct xs_count c = { owner, 0 };

	gfa_pool_for_each_allocated(s->pool, xs_count_fn, &c);
	return c.frames;
}

static double xs_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Park every worker; false if they do not all arrive in 60 s (a deadlock). */
static bool xs_quiet_begin(struct xs *s)
{
	struct timespec ts;
	bool ok = true;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 60;
	pthread_mutex_lock(&s->q_lock);
	s->want_quiet = true;
	while (s->parked < s->nr_workers && ok)
		if (pthread_cond_timedwait(&s->q_cond, &s->q_lock, &ts) == ETIMEDOUT)
			ok = s->parked == s->nr_workers;
	pthread_mutex_unlock(&s->q_lock);
	return ok;
}

static void xs_quiet_end(struct xs *s)
{
	pthread_mutex_lock(&s->q_lock);
	s->want_quiet = false;
	pthread_cond_broadcast(&s->q_cond);
	pthread_mutex_unlock(&s->q_lock);
}

/* With everything parked and kcompactd stopped: invariants and per-owner frames. */
static void xs_quiet_checks(struct xs *s, struct xs_gthread *gt, struct xs_pthread *pt)
{
	char msg[256];
	int err = gfa_pool_check(s->pool, msg, sizeof(msg));

	if (err) {
		xs_fail(s, "quiet gfa_pool_check: %d %s", err, msg);
		return;
	}
	for (int i = 0; i < XS_GUESTS; i++)
		for (int k = 0; k < XS_GUESTS_PER; k++) {
			struct xs_guest *x = &gt[i].gs[k];
			uint64_t want = 0, have;
			struct gfa_guest_stat st;

			if (!x->g)
				continue;
			for (uint64_t gfn = 0; gfn < x->nr; gfn++)
				want += !x->balloon[gfn];
			have = xs_owner_frames(s, gfa_guest_id(x->g));
			gfa_guest_stat(x->g, &st);
			if (have != want || st.ballooned_frames != x->nr - want)
				xs_fail(s,
					"guest %lx: pool says %lu frames, model %lu, stat ballooned %lu",
					(unsigned long)gfa_guest_id(x->g), (unsigned long)have,
					(unsigned long)want, (unsigned long)st.ballooned_frames);
		}
	for (int i = 0; i < XS_PCPW; i++) {
		uint64_t want = 0, have = xs_owner_frames(s, pt[i].owner);

		for (int k = 0; k < XS_SLOTS; k++)
			if (pt[i].blk[k].used) {
				struct gfa_frame_info fi;

				want += 1UL << pt[i].blk[k].order;
				if (gfa_frame_lookup(s->pool, pt[i].blk[k].pfn, &fi) ||
				    fi.state != GFA_FRAME_ALLOCATED || fi.owner != pt[i].owner ||
				    fi.head_pfn != pt[i].blk[k].pfn ||
				    fi.order != pt[i].blk[k].order)
					xs_fail(s,
						"cache thread %d slot %d: block %lx not ours (state %d owner %lx)",
						i, k, (unsigned long)pt[i].blk[k].pfn, fi.state,
						(unsigned long)fi.owner);
			}
		if (have != want)
			xs_fail(s, "cache thread %d: pool says %lu frames, model %lu", i,
				(unsigned long)have, (unsigned long)want);
	}
	s->checks++;
}

static void xs_run(double secs);

Test(xstress, everything_at_once, .timeout = 600)
{
	const char *env = getenv("GFA_XSTRESS_SECS");

	/* (the suite's budget: 20 s here, 15 s under each sanitizer; longer by hand) */
	xs_run(env ? atof(env) : tu_sanitizer() ? 15 : 20);
}

/* The same for as long as GFA_XSTRESS_SOAK_SECS says (make soak); skipped without it. */
Test(xstress, soak, .timeout = 7 * 86400)
{
	const char *env = getenv("GFA_XSTRESS_SOAK_SECS");

	if (!env)
		cr_skip_test("GFA_XSTRESS_SOAK_SECS not set (make soak SOAK_SECONDS=N)");
	xs_run(atof(env));
}

static void xs_run(double secs)
{
	static struct xs s;
	static struct xs_gthread gt[XS_GUESTS];
	static struct xs_pthread pt[XS_PCPW], ct, ot;
	struct gfa_pool_config pc;
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_host_return_config hc = {
		.interval_ms = 5,
		.no_settle = true,
		.pcp_idle_ms = 20,
		.max_frames_per_pass = 2048,
		.scrub_frames_per_pass = 1024,
	};
	struct gfa_release_policy rp = { .low = 512, .high = 2048, .min_empty_frac = 4 };
	struct gfa_compact_config cc = { .proactiveness = 90 };
	pthread_t th[XS_GUESTS + XS_PCPW + 3];
	static struct xs_gthread vt;
	double t0, next_quiet;
	const char *senv = getenv("GFA_XSTRESS_SEED");
	/* a fixed seed by default, so a failure can be run again; the threads still race */
	uint64_t seed = senv ? strtoull(senv, NULL, 0) : 0x5eed13;
	int nt = 0;

	fprintf(stderr, "xstress: seed %lu, %.0f s\n", (unsigned long)seed, secs);
	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.msg_lock, NULL);
	pthread_mutex_init(&s.q_lock, NULL);
	pthread_mutex_init(&s.hr_lock, NULL);
	pthread_cond_init(&s.q_cond, NULL);
	gfa_pool_config_init(&pc, XS_ZONE_BYTES >> GFA_FRAME_SHIFT);
	pc.nr_zones = XS_ZONES;
	for (int z = 0; z < XS_ZONES; z++)
		pc.zones[z] = (struct gfa_zone_config){ XS_ZONE_BYTES >> GFA_FRAME_SHIFT, z };
	s.pool = gfa_pool_create(&pc);
	cr_assert_not_null(s.pool);
	for (unsigned int z = 0; z < XS_ZONES; z++)
		cr_assert_eq(gfa_zone_set_release_policy(s.pool, z, &rp), 0);
	cr_assert_eq(gfa_compact_configure(s.pool, &cc), 0);
	s.b = gfa_backing_create(s.pool, &bc);
	cr_assert_not_null(s.b, "backing: %s", strerror(errno));
	s.hr = gfa_host_return_start(s.pool, s.b, &hc);
	cr_assert_not_null(s.hr, "host return: %s", strerror(errno));
	cr_assert_eq(gfa_compactd_start(s.pool), 0);

	s.nr_workers = XS_GUESTS + XS_PCPW + 3;
	vt = (struct xs_gthread){ .s = &s, .idx = 7, .rnd = seed * 13 + 3 };
	cr_assert_eq(pthread_create(&th[nt++], NULL, xs_vm_main, &vt), 0);
	for (int i = 0; i < XS_GUESTS; i++) {
		gt[i] = (struct xs_gthread){ .s = &s,
					     .idx = i,
					     .rnd = seed * 31 + (uint64_t)i + 1 };
		cr_assert_eq(pthread_create(&th[nt++], NULL, xs_guest_main, &gt[i]), 0);
	}
	for (int i = 0; i < XS_PCPW; i++) {
		pt[i] = (struct xs_pthread){ .s = &s,
					     .idx = i,
					     .rnd = seed * 77 + (uint64_t)i + 1,
					     .owner = 0x5000 + (uint64_t)i };
		pthread_mutex_init(&pt[i].lock, NULL);
		pt[i].pcp = gfa_pcp_create(s.pool, (unsigned int)i % XS_ZONES);
		cr_assert_not_null(pt[i].pcp);
		cr_assert_eq(gfa_owner_register(s.pool, pt[i].owner, &xs_blk_ops, &pt[i]), 0);
		cr_assert_eq(pthread_create(&th[nt++], NULL, xs_pcp_main, &pt[i]), 0);
	}
	ct = (struct xs_pthread){ .s = &s, .idx = 99, .rnd = seed + 5, .owner = 0x6000 };
	cr_assert_eq(pthread_create(&th[nt++], NULL, xs_compact_main, &ct), 0);
	ot = (struct xs_pthread){ .s = &s, .idx = 98, .rnd = seed + 6 };
	cr_assert_eq(pthread_create(&th[nt++], NULL, xs_observe_main, &ot), 0);

	t0 = xs_now();
	next_quiet = t0 + 2;
	while (!atomic_load(&s.stop) && xs_now() - t0 < secs) {
		usleep(50000);
		if (xs_now() < next_quiet) {
			/* a new host-return thread while everything runs (balloons kick it) */
			if (tu_rand(&seed) % 16 == 0) {
				pthread_mutex_lock(&s.hr_lock);
				gfa_host_return_stop(s.hr);
				s.hr = gfa_host_return_start(s.pool, s.b, &hc);
				pthread_mutex_unlock(&s.hr_lock);
				cr_assert_not_null(s.hr);
				s.hr_restarts++;
			}
			continue;
		}
		next_quiet = xs_now() + 3;
		if (!xs_quiet_begin(&s)) {
			xs_fail(&s, "workers did not reach a quiet point in 60 s (deadlock?)");
			break;
		}
		gfa_compactd_stop(s.pool);
		xs_quiet_checks(&s, gt, pt);
		if (s.checks % 2 == 0) { /* and a new host-return thread */
			char msg[256];
			int err;

			gfa_host_return_stop(s.hr);
			/* nothing moves now: the backing's marks and counts add up too */
			err = gfa_backing_check(s.b, msg, sizeof(msg));
			if (err)
				xs_fail(&s, "quiet gfa_backing_check: %d %s", err, msg);
			s.hr = gfa_host_return_start(s.pool, s.b, &hc);
			cr_assert_not_null(s.hr);
		}
		cr_assert_eq(gfa_compactd_start(s.pool), 0);
		xs_quiet_end(&s);
	}
	atomic_store(&s.stop, true);
	xs_quiet_end(&s);
	for (int i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	fprintf(stderr,
		"xstress: quiet checks %lu; guests: creates %lu/%lu inflates %lu/%lu "
		"deflates %lu/%lu collapses %lu/%lu; vms %lu (kvm %lu) verifies %lu; caches: allocs %lu/%lu moves %lu/%lu\n",
		(unsigned long)s.checks, (unsigned long)gt[0].creates, (unsigned long)gt[1].creates,
		(unsigned long)gt[0].inflates, (unsigned long)gt[1].inflates,
		(unsigned long)gt[0].deflates, (unsigned long)gt[1].deflates,
		(unsigned long)gt[0].collapses, (unsigned long)gt[1].collapses,
		(unsigned long)vt.creates, (unsigned long)vt.collapses, (unsigned long)vt.verifies,
		(unsigned long)pt[0].allocs, (unsigned long)pt[1].allocs,
		(unsigned long)pt[0].moves, (unsigned long)pt[1].moves);
	{
		struct gfa_host_return_stat hs;
		struct gfa_vmstat vs;

		uint64_t ops = vt.creates + vt.verifies;

		gfa_host_return_stat(s.hr, &hs);
		gfa_pool_vmstat(s.pool, &vs);
		for (int i = 0; i < XS_GUESTS; i++)
			ops += gt[i].creates + gt[i].inflates + gt[i].deflates + gt[i].verifies;
		for (int i = 0; i < XS_PCPW; i++)
			ops += pt[i].allocs + pt[i].frees;
		/* the soak's figures (BENCHMARKS.md): operations, frames moved, checks */
		fprintf(stderr,
			"RESULT xstress secs=%.0f ops=%lu moved_frames=%lu cache_moves=%lu "
			"quiet_checks=%lu live_checks=%lu violations=%d\n",
			secs, (unsigned long)ops, (unsigned long)vs.pgmigrate_success,
			(unsigned long)(pt[0].moves + pt[1].moves), (unsigned long)s.checks,
			(unsigned long)atomic_load(&s.live_checks), atomic_load(&s.failed));
		fprintf(stderr,
			"xstress: hr passes %lu released %lu MiB scrubbed %lu MiB populated %lu MiB "
			"pcp drained %lu; migrate ok %lu fail %lu; stall %lu success %lu daemon %lu; "
			"release_done %lu failed %lu; err_busy %lu err_thread %lu; hr restarts %lu\n",
			(unsigned long)hs.passes, (unsigned long)(hs.bytes_released >> 20),
			(unsigned long)(hs.bytes_scrubbed >> 20),
			(unsigned long)(hs.bytes_populated >> 20),
			(unsigned long)hs.pcp_frames_drained, (unsigned long)vs.pgmigrate_success,
			(unsigned long)vs.pgmigrate_fail, (unsigned long)vs.compact_stall,
			(unsigned long)vs.compact_success, (unsigned long)vs.compact_daemon_wake,
			(unsigned long)vs.release_done, (unsigned long)vs.release_failed,
			(unsigned long)vs.err_busy, (unsigned long)vs.err_thread,
			(unsigned long)s.hr_restarts);
	}
	/* the end: every guest gone, every block freed, caches and daemons down */
	for (int i = 0; i < XS_GUESTS; i++) {
		for (int k = 0; k < XS_GUESTS_PER; k++) {
			if (gt[i].gs[k].g && !atomic_load(&s.failed))
				xs_verify(&gt[i], &gt[i].gs[k], "the run");
			xs_guest_destroy(&gt[i].gs[k]);
		}
		for (int z = 0; z < XS_ZONES; z++)
			gfa_pcp_destroy(gt[i].pcp[z]);
	}
	for (int i = 0; i < XS_PCPW; i++) {
		gfa_pcp_destroy(pt[i].pcp);
		cr_assert_eq(gfa_owner_register(s.pool, pt[i].owner, NULL, NULL), 0);
	}
	gfa_compactd_stop(s.pool);
	cr_assert_eq(gfa_host_return_quiesce(s.hr, 30000), 0);
	gfa_host_return_stop(s.hr);
	cr_assert_eq(atomic_load(&s.failed), 0, "%s", s.msg);
	/* stopped guests' blocks come back once the backing's zeroer is done */
	cr_assert_eq(gfa_backing_zero_quiesce(s.b, 30000), 0);
	ASSERT_POOL_OK(s.pool);
	cr_assert_eq(tu_free_frames(s.pool), XS_ZONES * (XS_ZONE_BYTES >> GFA_FRAME_SHIFT),
		     "every frame comes back");
	for (unsigned int z = 0; z < XS_ZONES; z++)
		cr_assert_eq(gfa_zone_claimed(s.pool, z), 0);
	gfa_backing_destroy(s.b);
	gfa_pool_destroy(s.pool);
}
