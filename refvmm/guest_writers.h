/*
 * Writer threads that keep writing guest RAM while gfa moves it (header-only, static;
 * the moves tests and bench/moves share it, so it lives here, below both).  Each writer
 * owns every n-th 4 KiB page of the window and writes it over and over, each time first
 * checking that the page still holds what it wrote last: a write a move lost is seen at
 * the next visit, not hidden by a later pass.  Three kinds of writer:
 *   GW_STORE  user-mode stores (8 words a page)
 *   GW_READ   read(2) from a memfd into the page: the kernel writes it (copy_to_user)
 *   GW_URING  the same read through io_uring (inline, or an io-wq worker)
 * A pause protocol (gw_pause/gw_resume) lets a pause op stop them all, as the pause
 * fallback's contract asks of a VMM.
 */
#ifndef GFA_REFVMM_GUEST_WRITERS_H
#define GFA_REFVMM_GUEST_WRITERS_H
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "common/ktime.h"

#define GW_PAGE     4096UL
#define GW_WORDS    8 /* stored words a page, 512 bytes apart */
#define GW_MAX      4
#define GW_SLOW_NS  20000ULL /* a write this slow waited (a fault, or a pause) */
#define GW_MAX_SLOW 65536

enum gw_kind { GW_STORE, GW_READ, GW_URING };

struct gw_set;

struct gw_writer {
	pthread_t th;
	struct gw_set *set;
	unsigned int idx;
	enum gw_kind kind;
	uint64_t *shadow; /* per owned page: the value written last */
	uint64_t npages;
	int src_fd; /* GW_READ, GW_URING: the memfd read from */
	struct io_uring ring;
	uint64_t writes, lost, errors;
	uint64_t slow_ns[GW_MAX_SLOW]; /* durations of the writes that waited */
	unsigned int nslow;
};

struct gw_set {
	char *base;
	uint64_t pages;
	unsigned int n;
	atomic_bool stop;
	atomic_int pause_req, parked;
	struct gw_writer w[GW_MAX];
};

static inline char *gw_page(struct gw_writer *w, uint64_t k)
{
	return w->set->base + (k * w->set->n + w->idx) * GW_PAGE;
}

/* The page still holds what this writer wrote last: its words count lost otherwise. */
static inline void gw_verify(struct gw_writer *w, uint64_t k)
{
	volatile uint64_t *p = (volatile uint64_t *)gw_page(w, k);

	for (unsigned int i = 0; i < GW_WORDS; i++)
		if (p[i * 64] != w->shadow[k]) {
			w->lost++;
			break;
		}
}

/* Write v over the page the writer's way: 0, or -1 (the write itself failed). */
static inline int gw_write(struct gw_writer *w, uint64_t k, uint64_t v)
{
	char *page = gw_page(w, k);

	if (w->kind == GW_STORE) {
		volatile uint64_t *p = (volatile uint64_t *)page;

		for (unsigned int i = 0; i < GW_WORDS; i++)
			p[i * 64] = v;
		return 0;
	}
	{
		uint64_t buf[GW_PAGE / 8];

		for (unsigned int i = 0; i < GW_PAGE / 8; i++)
			buf[i] = v;
		if (pwrite(w->src_fd, buf, GW_PAGE, 0) != (ssize_t)GW_PAGE)
			return -1;
	}
	if (w->kind == GW_READ)
		return pread(w->src_fd, page, GW_PAGE, 0) == (ssize_t)GW_PAGE ? 0 : -1;
	{
		struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
		struct io_uring_cqe *cqe;
		int res;

		if (!sqe)
			return -1;
		io_uring_prep_read(sqe, w->src_fd, page, GW_PAGE, 0);
		if (io_uring_submit_and_wait(&w->ring, 1) < 1 || io_uring_wait_cqe(&w->ring, &cqe))
			return -1;
		res = cqe->res;
		io_uring_cqe_seen(&w->ring, cqe);
		return res == (int)GW_PAGE ? 0 : -1;
	}
}

static inline void gw_park(struct gw_set *s)
{
	if (!atomic_load(&s->pause_req))
		return;
	atomic_fetch_add(&s->parked, 1);
	while (atomic_load(&s->pause_req))
		sched_yield();
	atomic_fetch_sub(&s->parked, 1);
}

static void *gw_main(void *arg)
{
	struct gw_writer *w = arg;
	uint64_t v = ((uint64_t)w->idx + 1) << 48;

	while (!atomic_load(&w->set->stop)) {
		for (uint64_t k = 0; k < w->npages && !atomic_load(&w->set->stop); k++) {
			uint64_t t0, dt;

			gw_park(w->set);
			gw_verify(w, k);
			t0 = ktime_get_ns();
			if (gw_write(w, k, ++v)) {
				w->errors++;
				continue; /* the page keeps its old value */
			}
			dt = ktime_get_ns() - t0;
			w->shadow[k] = v;
			/* read by the mover's thread while we run */
			__atomic_store_n(&w->writes, w->writes + 1, __ATOMIC_RELAXED);
			if (dt >= GW_SLOW_NS && w->nslow < GW_MAX_SLOW)
				w->slow_ns[w->nslow++] = dt;
		}
	}
	return NULL;
}

/* Start n writers of the given kinds over [base, base + size): 0 or -errno. */
static inline int gw_start(struct gw_set *s, void *base, uint64_t size, unsigned int n,
			   const enum gw_kind *kinds)
{
	memset(s, 0, sizeof(*s));
	s->base = base;
	s->pages = size / GW_PAGE;
	s->n = n;
	/* a fresh start value everywhere: the first verify of each page passes */
	memset(base, 0, size);
	for (unsigned int i = 0; i < n; i++) {
		struct gw_writer *w = &s->w[i];

		w->set = s;
		w->idx = i;
		w->kind = kinds[i];
		w->npages = (s->pages - i + n - 1) / n;
		w->shadow = calloc(w->npages, sizeof(*w->shadow));
		w->src_fd = -1;
		if (!w->shadow)
			return -ENOMEM;
		if (w->kind != GW_STORE) {
			w->src_fd = memfd_create("gw-src", MFD_CLOEXEC);
			if (w->src_fd < 0 || ftruncate(w->src_fd, GW_PAGE))
				return -errno;
		}
		if (w->kind == GW_URING && io_uring_queue_init(4, &w->ring, 0))
			return -EIO;
	}
	for (unsigned int i = 0; i < n; i++)
		if (pthread_create(&s->w[i].th, NULL, gw_main, &s->w[i]))
			return -EAGAIN;
	return 0;
}

/* Stop them, check every page once more: the lost writes in all (each writer's too). */
static inline uint64_t gw_stop(struct gw_set *s)
{
	uint64_t lost = 0;

	atomic_store(&s->stop, true);
	for (unsigned int i = 0; i < s->n; i++) {
		struct gw_writer *w = &s->w[i];

		pthread_join(w->th, NULL);
		for (uint64_t k = 0; k < w->npages; k++)
			gw_verify(w, k);
		lost += w->lost;
		free(w->shadow);
		if (w->src_fd >= 0)
			close(w->src_fd);
		if (w->kind == GW_URING)
			io_uring_queue_exit(&w->ring);
	}
	return lost;
}

/* A pause op for the pause fallback: returns once every writer is parked. */
static inline int gw_pause(void *ctx)
{
	struct gw_set *s = ctx;

	atomic_store(&s->pause_req, 1);
	while (atomic_load(&s->parked) < (int)s->n && !atomic_load(&s->stop))
		sched_yield();
	return 0;
}

static inline int gw_resume(void *ctx)
{
	atomic_store(&((struct gw_set *)ctx)->pause_req, 0);
	return 0;
}

static inline uint64_t gw_writes(const struct gw_set *s)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < s->n; i++)
		n += __atomic_load_n(&s->w[i].writes, __ATOMIC_RELAXED);
	return n;
}
#endif
