// SPDX-License-Identifier: MIT
/*
 * virtio-balloon on the legacy virtio-pci transport.  A queue notify from a vCPU only
 * sets a bit and wakes the device's thread; the thread takes buffers off the rings
 * (between rv_pci_mem_begin/_end, so a move of guest frames never sees it write), checks
 * them, and makes the gfa calls with no lock a vCPU takes: gfa_balloon_inflate,
 * gfa_balloon_deflate and gfa_guest_report_free.  A reporting buffer goes back when the
 * reporter's done callback (a release engine's thread) hands it back to the thread, so
 * the guest cannot reuse a page before its punch has landed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "refvmm/virtio.h"

#define VIRTIO_ID_BALLOON               5
#define VIRTIO_BALLOON_F_MUST_TELL_HOST 0
#define VIRTIO_BALLOON_F_STATS_VQ       1
#define VIRTIO_BALLOON_F_DEFLATE_ON_OOM 2
#define VIRTIO_BALLOON_F_REPORTING      5
#define VIRTIO_BALLOON_PFN_SHIFT        12
#define BALLOON_QUEUE_NUM               128
#define BALLOON_CONFIG_LEN              8     /* num_pages, actual */
#define BALLOON_MAX_PFNS                16384 /* a page list of 64 KiB at most */
#define STAT_LEN                        10    /* le16 tag, le64 val, packed */
#define DEFLATE_TRIES                   100   /* 10 ms apart: frames freed meanwhile */

enum balloon_queue { Q_INFLATE, Q_DEFLATE, Q_STATS, Q_REPORTING, Q_NONE };

/* A reporting buffer whose punches are in flight. */
struct balloon_report {
	struct balloon_report *next;
	struct gfa_rv_balloon *b;
	uint64_t gen;
	unsigned int q;
	uint16_t head;
	int result;
};

struct gfa_rv_balloon {
	struct rv_virtio v; /* v.lock guards the fields down to st */
	struct gfa_rv_balloon_config cfg;
	struct gfa_rv_pci *pci;
	struct gfa_free_report *rep;
	uint32_t num_pages, actual; /* the config space */
	bool stats_held;            /* the driver's stats buffer, held until asked for */
	uint16_t stats_head;
	uint64_t stats_gen;
	struct gfa_rv_balloon_stat st;
	/* the device thread's work */
	pthread_t thread;
	pthread_mutex_t wlock;
	pthread_cond_t wcond;
	unsigned int pending; /* queues notified */
	bool stats_req, stop, reset_pending;
	struct balloon_report *done; /* reports whose punches completed */
	/* the thread's own */
	struct rv_vq_elem elem;
	uint32_t pfns[BALLOON_MAX_PFNS];
	struct gfa_gpa_range ranges[BALLOON_MAX_PFNS];
};

static struct gfa_rv_balloon *ctx_balloon(void *ctx)
{
	return ctx;
}

/* Queue q's role under the features the driver took: absent queues take no index. */
static enum balloon_queue queue_role(const struct gfa_rv_balloon *b, unsigned int q)
{
	uint32_t f = b->v.guest_features;

	if (q < Q_STATS)
		return (enum balloon_queue)q;
	if (f & (1u << VIRTIO_BALLOON_F_STATS_VQ)) {
		if (q == Q_STATS)
			return Q_STATS;
		q--;
	}
	if (q == Q_STATS && (f & (1u << VIRTIO_BALLOON_F_REPORTING)) && b->rep)
		return Q_REPORTING;
	return Q_NONE;
}

static void balloon_config(void *ctx, unsigned int off, uint32_t *val, unsigned int size,
			   bool write)
{
	struct gfa_rv_balloon *b = ctx_balloon(ctx);
	uint8_t c[BALLOON_CONFIG_LEN];

	memcpy(c, &b->num_pages, 4); /* little-endian, as the legacy balloon's always is */
	memcpy(c + 4, &b->actual, 4);
	if (!write) {
		*val = 0;
		memcpy(val, c + off, size);
		return;
	}
	/* the driver writes actual only (byte by byte on the legacy transport) */
	for (unsigned int i = 0; i < size; i++)
		if (off + i >= 4)
			c[off + i] = (uint8_t)(*val >> (8 * i));
	memcpy(&b->actual, c + 4, 4);
	b->st.actual_pages = b->actual;
}

static void balloon_notify(void *ctx, unsigned int q)
{
	struct gfa_rv_balloon *b = ctx_balloon(ctx);

	pthread_mutex_lock(&b->wlock);
	b->pending |= 1u << q;
	pthread_cond_signal(&b->wcond);
	pthread_mutex_unlock(&b->wlock);
}

static void balloon_reset(void *ctx)
{
	struct gfa_rv_balloon *b = ctx_balloon(ctx);

	b->stats_held = false; /* reports in flight finish unseen: their gen is old */
	b->actual = 0;
	/* a driver that resets without deflating (kexec, a crash) knows nothing of the
	 * balloon: the thread gives every page back */
	pthread_mutex_lock(&b->wlock);
	b->reset_pending = true;
	pthread_cond_signal(&b->wcond);
	pthread_mutex_unlock(&b->wlock);
}

static const struct rv_virtio_ops balloon_ops = { balloon_config, balloon_notify, balloon_reset };

/* Give buffer head of queue q back, unless the driver reset the device since gen. */
static void balloon_complete(struct gfa_rv_balloon *b, unsigned int q, uint64_t gen, uint16_t head)
{
	rv_pci_mem_begin(b->pci);
	pthread_mutex_lock(&b->v.lock);
	if (b->v.gen == gen && rv_vq_push(&b->v.vq[q], &b->v.cfg.mem, head, 0))
		rv_virtio_interrupt(&b->v, VIRTIO_PCI_ISR_QUEUE);
	pthread_mutex_unlock(&b->v.lock);
	rv_pci_mem_end(b->pci);
}

static int cmp_gpa(const void *x, const void *y)
{
	const struct gfa_gpa_range *a = x, *b = y;

	return a->gpa < b->gpa ? -1 : a->gpa > b->gpa;
}

/* The page list as ranges, sorted, adjacent pages merged (duplicates stay: gfa refuses
 * them); the number of ranges. */
static unsigned int pfns_to_ranges(struct gfa_rv_balloon *b, unsigned int n)
{
	unsigned int k = 0;

	for (unsigned int i = 0; i < n; i++)
		b->ranges[i] =
			(struct gfa_gpa_range){ (uint64_t)b->pfns[i] << VIRTIO_BALLOON_PFN_SHIFT,
						1ULL << VIRTIO_BALLOON_PFN_SHIFT };
	qsort(b->ranges, n, sizeof(b->ranges[0]), cmp_gpa);
	for (unsigned int i = 0; i < n; i++) {
		if (k && b->ranges[k - 1].gpa + b->ranges[k - 1].len == b->ranges[i].gpa)
			b->ranges[k - 1].len += b->ranges[i].len;
		else
			b->ranges[k++] = b->ranges[i];
	}
	return k;
}

static int64_t deflate_retry(struct gfa_rv_balloon *b, unsigned int k)
{
	int64_t ret = -ENOMEM;

	for (int t = 0; t < DEFLATE_TRIES && ret == -ENOMEM; t++) {
		if (t)
			nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
		ret = gfa_balloon_deflate(b->cfg.guest, b->ranges, k);
	}
	return ret;
}

/* An inflate or deflate buffer (npfns pages copied into b->pfns, or -1: bad shape). */
static void balloon_pages(struct gfa_rv_balloon *b, enum balloon_queue role, int npfns)
{
	bool inflate = role == Q_INFLATE;
	unsigned int k = npfns > 0 ? pfns_to_ranges(b, (unsigned int)npfns) : 0;
	int64_t ret = -EINVAL;

	if (k)
		ret = inflate ? gfa_balloon_inflate(b->cfg.guest, b->ranges, k) :
				deflate_retry(b, k);
	pthread_mutex_lock(&b->v.lock);
	if (inflate)
		b->st.inflate_requests++;
	else
		b->st.deflate_requests++;
	if (ret >= 0 && inflate) {
		b->st.inflated_pages += (uint64_t)ret;
	} else if (ret >= 0) {
		b->st.inflated_pages -= (uint64_t)ret;
		b->st.deflated_pages += (uint64_t)ret;
	} else if (ret == -ENOMEM && !inflate) {
		b->st.err_nomem++;
	} else {
		b->st.err_page_list++; /* gfa refused the list, or its shape was bad */
	}
	pthread_mutex_unlock(&b->v.lock);
}

static void balloon_stats(struct gfa_rv_balloon *b, size_t len)
{
	const uint8_t *p = (const uint8_t *)b->pfns;

	pthread_mutex_lock(&b->v.lock);
	if (len % STAT_LEN) {
		b->st.err_stats++;
	} else {
		for (size_t off = 0; off < len; off += STAT_LEN) {
			uint16_t tag;
			uint64_t val;

			memcpy(&tag, p + off, 2);
			memcpy(&val, p + off + 2, 8);
			if (tag < GFA_RV_BALLOON_NR_STATS) {
				b->st.guest_stats[tag] = val;
				b->st.guest_stats_seen |= 1ULL << tag;
			}
		}
		b->st.stats_updates++;
	}
	pthread_mutex_unlock(&b->v.lock);
}

/* The reporter's done callback, on a release engine's thread: hand it to the thread. */
static void balloon_report_done(void *cookie, int result)
{
	struct balloon_report *r = cookie;
	struct gfa_rv_balloon *b = r->b;

	r->result = result;
	pthread_mutex_lock(&b->wlock);
	r->next = b->done;
	b->done = r;
	pthread_cond_signal(&b->wcond);
	pthread_mutex_unlock(&b->wlock);
}

/* A reporting buffer: every segment is a free range the guest hands over. */
static bool balloon_report(struct gfa_rv_balloon *b, unsigned int q, uint64_t gen)
{
	const struct rv_vq_elem *e = &b->elem;
	struct balloon_report *r = malloc(sizeof(*r));
	uint64_t bytes = 0;
	int err = -ENOMEM;

	for (unsigned int i = 0; i < e->n; i++) {
		b->ranges[i] = (struct gfa_gpa_range){ e->seg[i].gpa, e->seg[i].len };
		bytes += e->seg[i].len;
	}
	if (r) {
		*r = (struct balloon_report){ .b = b, .gen = gen, .q = q, .head = e->head };
		err = gfa_guest_report_free(b->rep, b->ranges, e->n, balloon_report_done, r);
	}
	pthread_mutex_lock(&b->v.lock);
	if (err) {
		b->st.err_report++;
	} else {
		b->st.report_requests++;
		b->st.reported_bytes += bytes;
	}
	pthread_mutex_unlock(&b->v.lock);
	if (err)
		free(r);
	return !err;
}

/*
 * Take one buffer off queue q and copy what the device needs out of guest RAM.  Returns
 * its role (Q_NONE: nothing taken), and in *npfns the pages copied (-1: a page list or
 * stats buffer of bad shape, -2: wrong direction).
 */
static enum balloon_queue balloon_pop(struct gfa_rv_balloon *b, unsigned int q, uint64_t *gen,
				      int *npfns)
{
	struct rv_vq_elem *e = &b->elem;
	enum balloon_queue role = Q_NONE;
	int r;

	rv_pci_mem_begin(b->pci);
	pthread_mutex_lock(&b->v.lock);
	*gen = b->v.gen;
	r = rv_vq_pop(&b->v.vq[q], &b->v.cfg.mem, e);
	if (r < 0) {
		uint64_t *c[] = { [RV_VQ_ERR_RING] = &b->st.err_ring,
				  [RV_VQ_ERR_AVAIL] = &b->st.err_avail,
				  [RV_VQ_ERR_DESC] = &b->st.err_desc,
				  [RV_VQ_ERR_LOOP] = &b->st.err_loop };

		(*c[-r])++;
		rv_virtio_error(&b->v);
	} else if (r > 0) {
		role = queue_role(b, q);
		*npfns = 0;
		if (role == Q_REPORTING ? e->read_len > 0 : e->write_len > 0) {
			*npfns = -2;
		} else if (role == Q_INFLATE || role == Q_DEFLATE) {
			if (!e->read_len || e->read_len % 4 || e->read_len > sizeof(b->pfns))
				*npfns = -1;
			else
				*npfns = (int)(rv_vq_read(&b->v.cfg.mem, e, b->pfns,
							  sizeof(b->pfns)) /
					       4);
		} else if (role == Q_STATS) {
			*npfns =
				e->read_len > sizeof(b->pfns) ?
					-1 :
					(int)rv_vq_read(&b->v.cfg.mem, e, b->pfns, sizeof(b->pfns));
		}
		if (*npfns == -2)
			b->st.err_dir++;
	}
	pthread_mutex_unlock(&b->v.lock);
	rv_pci_mem_end(b->pci);
	if (r > 0 && role == Q_NONE) /* a queue the driver's features leave unused */
		balloon_complete(b, q, *gen, e->head);
	return role;
}

static void balloon_drain(struct gfa_rv_balloon *b, unsigned int q)
{
	enum balloon_queue role;
	uint64_t gen;
	int n;

	while ((role = balloon_pop(b, q, &gen, &n)) != Q_NONE) {
		uint16_t head = b->elem.head;

		if (role == Q_STATS) {
			if (n >= 0)
				balloon_stats(b, (size_t)n);
			else if (n == -1) {
				pthread_mutex_lock(&b->v.lock);
				b->st.err_stats++;
				pthread_mutex_unlock(&b->v.lock);
			}
			/* held (even a bad one: the driver refills it when asked) */
			rv_pci_mem_begin(b->pci);
			pthread_mutex_lock(&b->v.lock);
			if (b->v.gen == gen) {
				if (b->stats_held) /* a second buffer: give the old one back */
					rv_vq_push(&b->v.vq[q], &b->v.cfg.mem, b->stats_head, 0);
				b->stats_held = true;
				b->stats_head = head;
				b->stats_gen = gen;
			}
			pthread_mutex_unlock(&b->v.lock);
			rv_pci_mem_end(b->pci);
			continue;
		}
		if (role == Q_REPORTING && n == 0 && balloon_report(b, q, gen))
			continue; /* handed back when its punches completed */
		if (role != Q_REPORTING && n != -2)
			balloon_pages(b, role, n);
		balloon_complete(b, q, gen, head);
	}
}

static void balloon_stats_give_back(struct gfa_rv_balloon *b)
{
	rv_pci_mem_begin(b->pci);
	pthread_mutex_lock(&b->v.lock);
	if (b->stats_held && b->stats_gen == b->v.gen) {
		for (unsigned int q = 0; q < b->v.cfg.nvqs; q++)
			if (queue_role(b, q) == Q_STATS &&
			    rv_vq_push(&b->v.vq[q], &b->v.cfg.mem, b->stats_head, 0))
				rv_virtio_interrupt(&b->v, VIRTIO_PCI_ISR_QUEUE);
	}
	b->stats_held = false;
	pthread_mutex_unlock(&b->v.lock);
	rv_pci_mem_end(b->pci);
}

static void balloon_reports_done(struct gfa_rv_balloon *b, struct balloon_report *r)
{
	while (r) {
		struct balloon_report *next = r->next;

		balloon_complete(b, r->q, r->gen, r->head);
		free(r);
		r = next;
	}
}

/* After a reset: deflate every ballooned page, in runs of ballooned gfns. */
static void balloon_deflate_all(struct gfa_rv_balloon *b)
{
	uint64_t size = gfa_guest_size(b->cfg.guest), given = 0, lo = 0;
	bool in_run = false;

	for (uint64_t gpa = 0; gpa <= size; gpa += 1ULL << VIRTIO_BALLOON_PFN_SHIFT) {
		uint64_t pfn;
		bool hole = gpa < size && gfa_guest_gpa_to_pfn(b->cfg.guest, gpa, &pfn) == -ENOENT;
		int64_t ret;

		if (hole && !in_run)
			lo = gpa;
		if (!hole && in_run) {
			b->ranges[0] = (struct gfa_gpa_range){ lo, gpa - lo };
			ret = deflate_retry(b, 1);
			given += ret > 0 ? (uint64_t)ret : 0;
		}
		in_run = hole;
	}
	pthread_mutex_lock(&b->v.lock);
	b->st.inflated_pages = 0;
	b->st.reset_deflated_pages += given;
	pthread_mutex_unlock(&b->v.lock);
}

static void *balloon_main(void *arg)
{
	struct gfa_rv_balloon *b = arg;

	pthread_mutex_lock(&b->wlock);
	for (;;) {
		unsigned int pending;
		struct balloon_report *done;
		bool sreq, reset;

		while (!b->stop && !b->pending && !b->stats_req && !b->done && !b->reset_pending)
			pthread_cond_wait(&b->wcond, &b->wlock);
		if (b->stop)
			break;
		pending = b->pending;
		sreq = b->stats_req;
		done = b->done;
		reset = b->reset_pending;
		b->pending = 0;
		b->stats_req = b->reset_pending = false;
		b->done = NULL;
		pthread_mutex_unlock(&b->wlock);
		balloon_reports_done(b, done);
		if (reset)
			balloon_deflate_all(b);
		for (unsigned int q = 0; q < b->v.cfg.nvqs; q++)
			if (pending & (1u << q))
				balloon_drain(b, q);
		if (sreq)
			balloon_stats_give_back(b);
		pthread_mutex_lock(&b->wlock);
	}
	pthread_mutex_unlock(&b->wlock);
	return NULL;
}

static int balloon_check(struct gfa_rv_pci *pci, const struct gfa_rv_balloon_config *cfg)
{
	if (!pci || !cfg || !cfg->guest || !cfg->irq_fn ||
	    (cfg->free_page_reporting && !cfg->backing))
		return EFAULT;
	if (cfg->irq > 255 || cfg->slot >= GFA_RV_PCI_MAX_SLOTS)
		return EINVAL;
	return 0;
}

struct gfa_rv_balloon *gfa_rv_balloon_create(struct gfa_rv_pci *pci,
					     const struct gfa_rv_balloon_config *cfg)
{
	struct rv_virtio_config vc = { 0 };
	struct gfa_rv_balloon *b;
	int err = balloon_check(pci, cfg);

	if (err) {
		errno = err;
		return NULL;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->cfg = *cfg;
	b->pci = pci;
	if (cfg->free_page_reporting) {
		b->rep = gfa_guest_report_create(cfg->backing, cfg->guest);
		if (!b->rep) {
			err = errno;
			free(b);
			errno = err;
			return NULL;
		}
	}
	pthread_mutex_init(&b->wlock, NULL);
	pthread_cond_init(&b->wcond, NULL);
	vc = (struct rv_virtio_config){
		.pci = pci,
		.mem = { gfa_guest_hva(cfg->guest), gfa_guest_size(cfg->guest) },
		/* transitional balloon; class "other", as QEMU's */
		.device_id = 0x1002,
		.subsys = VIRTIO_ID_BALLOON,
		.class_code = 0xff0000,
		.features = 1u << VIRTIO_BALLOON_F_MUST_TELL_HOST |
			    1u << VIRTIO_BALLOON_F_STATS_VQ |
			    (cfg->deflate_on_oom ? 1u << VIRTIO_BALLOON_F_DEFLATE_ON_OOM : 0) |
			    (cfg->free_page_reporting ? 1u << VIRTIO_BALLOON_F_REPORTING : 0),
		.nvqs = cfg->free_page_reporting ? 4 : 3,
		.queue_num = BALLOON_QUEUE_NUM,
		.config_len = BALLOON_CONFIG_LEN,
		.slot = cfg->slot,
		.irq = cfg->irq,
		.irq_fn = cfg->irq_fn,
		.irq_ctx = cfg->irq_ctx,
		.ops = &balloon_ops,
		.ctx = b,
	};
	err = rv_virtio_init(&b->v, &vc);
	if (!err) {
		err = -pthread_create(&b->thread, NULL, balloon_main, b);
		if (err)
			rv_virtio_exit(&b->v);
	}
	if (err) {
		gfa_guest_report_destroy(b->rep);
		pthread_mutex_destroy(&b->wlock);
		pthread_cond_destroy(&b->wcond);
		free(b);
		errno = -err;
		return NULL;
	}
	return b;
}

void gfa_rv_balloon_destroy(struct gfa_rv_balloon *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&b->wlock);
	b->stop = true;
	pthread_cond_signal(&b->wcond);
	pthread_mutex_unlock(&b->wlock);
	pthread_join(b->thread, NULL);
	gfa_guest_report_destroy(b->rep); /* every done callback made */
	rv_virtio_exit(&b->v);            /* no vCPU reaches the device after this */
	for (struct balloon_report *r = b->done, *n; r; r = n) {
		n = r->next;
		free(r);
	}
	pthread_mutex_destroy(&b->wlock);
	pthread_cond_destroy(&b->wcond);
	free(b);
}

int gfa_rv_balloon_set_target(struct gfa_rv_balloon *b, uint64_t bytes)
{
	uint64_t pages;

	if (!b)
		return -EFAULT;
	pages = bytes >> VIRTIO_BALLOON_PFN_SHIFT;
	if (bytes > gfa_guest_size(b->cfg.guest))
		return -ERANGE;
	pthread_mutex_lock(&b->v.lock);
	b->num_pages = (uint32_t)pages;
	b->st.target_pages = pages;
	rv_virtio_interrupt(&b->v, VIRTIO_PCI_ISR_CONFIG);
	pthread_mutex_unlock(&b->v.lock);
	return 0;
}

int gfa_rv_balloon_request_stats(struct gfa_rv_balloon *b)
{
	bool held;

	if (!b)
		return -EFAULT;
	pthread_mutex_lock(&b->v.lock);
	held = b->stats_held;
	pthread_mutex_unlock(&b->v.lock);
	if (!held)
		return -EAGAIN;
	pthread_mutex_lock(&b->wlock);
	b->stats_req = true;
	pthread_cond_signal(&b->wcond);
	pthread_mutex_unlock(&b->wlock);
	return 0;
}

int gfa_rv_balloon_stat(struct gfa_rv_balloon *b, struct gfa_rv_balloon_stat *st)
{
	struct gfa_guest_report_stat rs;

	if (!b || !st)
		return -EFAULT;
	pthread_mutex_lock(&b->v.lock);
	*st = b->st;
	st->features = b->v.guest_features;
	st->status = b->v.status;
	st->needs_reset = b->v.needs_reset;
	st->err_ring += b->v.err_ring;
	st->err_queue_index = b->v.err_queue_index;
	pthread_mutex_unlock(&b->v.lock);
	if (b->rep && !gfa_guest_report_stat(b->rep, &rs))
		st->report_released_bytes = rs.bytes_released;
	return 0;
}
