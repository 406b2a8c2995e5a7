// SPDX-License-Identifier: MIT
/*
 * A host pool client the tests run as a process of its own (fork and exec), as a VMM
 * would be: it attaches to a gfad and runs the operations its arguments name, in order.
 *   gfa-hostpool-client SOCKET OP...
 *   create MIB     a guest of MIB (every page must read zero), each page then written
 *   verify         every page not ballooned still holds what was written
 *   inflate MIB    balloon out the guest's first MIB; deflate MIB gives it back
 *   sparse MIB     balloon out 3 of every 4 pages of the guest's first MIB: free room
 *                  inside every 2 MiB block, which only compaction gathers
 *   destroy        destroy the guest
 *   loop N MIB     N times: create, inflate half, deflate, verify, destroy
 *   churn SECS MIB for SECS seconds, rounds of: create (every other one small-only),
 *                  two writer threads over the second half, free page reporting of a
 *                  quarter, collapse (moves) under the writers, inflate and deflate of
 *                  the first half, verify, destroy; prints "churn rounds R collapses C
 *                  reported F lost L nowp W short 0" (W rounds without write
 *                  protection, so without collapse) and fails on a lost write
 *   squeeze SECS MIB  churn on a service too small for all its clients: a create that
 *                  falls short (GFA_ENOMEM after the shrinkers had their time) is
 *                  counted in "short S", not an error
 *   claim MIB      claim MIB of the service's zone 0 for this client; unclaim drops it
 *   ready          print "ready" (the test's sync point)
 *   hold           wait until stdin closes (the test kills it there or closes it)
 *   stat           print "mine FRAMES" (what the service leases us)
 * Exit 0 when every operation did as it should, 1 with a line on stderr if not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "common/ktime.h"
#include "refvmm/guest_writers.h"

#define MiB  (1ULL << 20)
#define PAGE 4096ULL

static struct gfa_hostpool *hp;
static struct gfa_guest *g;
static uint64_t g_bytes, ballooned, sparse; /* sparse: bytes of 1-in-4 pages kept */
static unsigned char stamp;
static bool may_be_short; /* squeeze: a create may fall short */

static int fail(const char *what, int err)
{
	fprintf(stderr, "hostpool-client %d: %s: %s\n", (int)getpid(), what, gfa_strerror(err));
	return 1;
}

static int create_guest(uint64_t mib, bool small_only)
{
	struct gfa_guest_config cfg = { .mem_bytes = mib * MiB, .small_only = small_only };
	unsigned char *p;

	g = gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	if (!g && errno == ENOMEM && may_be_short)
		return GFA_ENOMEM;
	if (!g)
		return fail("create", -errno);
	g_bytes = mib * MiB;
	ballooned = sparse = 0;
	stamp = (unsigned char)(getpid() | 1);
	p = gfa_guest_hva(g);
	for (uint64_t off = 0; off < g_bytes; off += PAGE) {
		/* another client's (or a killed one's) data must never reach us */
		if (p[off] || p[off + PAGE - 1])
			return fail("create: a page does not read zero", GFA_ECORRUPT);
		p[off] = stamp;
		p[off + PAGE - 1] = stamp;
	}
	return 0;
}

static int op_create(uint64_t mib)
{
	return create_guest(mib, false);
}

/* [from, to) of the guest still holds the stamps written there. */
static int verify_range(uint64_t from, uint64_t to)
{
	const unsigned char *p = gfa_guest_hva(g);

	for (uint64_t off = from; off < to; off += PAGE)
		if (p[off] != stamp || p[off + PAGE - 1] != stamp)
			return fail("verify: a page lost what was written", GFA_ECORRUPT);
	return 0;
}

static int op_verify(void)
{
	int err = 0;

	for (uint64_t off = 0; !err && off < sparse; off += 4 * PAGE)
		err = verify_range(off, off + PAGE);
	return err ? err : verify_range(ballooned > sparse ? ballooned : sparse, g_bytes);
}

/* Balloon out pages 1-3 of every 4 in the guest's first MIB, 64 ranges a call. */
static int op_sparse(uint64_t mib)
{
	struct gfa_gpa_range r[64];
	unsigned int n = 0;

	for (uint64_t off = 0; off < mib * MiB; off += 4 * PAGE) {
		r[n++] = (struct gfa_gpa_range){ off + PAGE, 3 * PAGE };
		if (n == 64 || off + 4 * PAGE >= mib * MiB) {
			int64_t got = gfa_balloon_inflate(g, r, n);

			if (got < 0)
				return fail("sparse: inflate", (int)got);
			n = 0;
		}
	}
	sparse = mib * MiB;
	return 0;
}

/* The first MIB deflated: every page reads zero, and gets its stamps again. */
static int op_balloon_stamp(uint64_t mib)
{
	unsigned char *p = gfa_guest_hva(g);

	ballooned = 0;
	for (uint64_t off = 0; off < mib * MiB; off += PAGE) {
		if (p[off])
			return fail("deflate: a page does not read zero", GFA_ECORRUPT);
		p[off] = stamp;
		p[off + PAGE - 1] = stamp;
	}
	return 0;
}

static int op_balloon(uint64_t mib, bool inflate)
{
	struct gfa_gpa_range r = { 0, mib * MiB };
	int64_t n = inflate ? gfa_balloon_inflate(g, &r, 1) : gfa_balloon_deflate(g, &r, 1);

	if (n < 0)
		return fail(inflate ? "inflate" : "deflate", (int)n);
	ballooned = inflate ? mib * MiB : ballooned;
	return inflate ? 0 : op_balloon_stamp(mib);
}

static int op_destroy(void)
{
	gfa_guest_destroy(g);
	g = NULL;
	return 0;
}

static int op_loop(uint64_t n, uint64_t mib)
{
	int err = 0;

	for (uint64_t i = 0; !err && i < n; i++) {
		err = op_create(mib);
		err = err ? err : op_balloon(mib / 2, true);
		err = err ? err : op_balloon(mib / 2, false);
		err = err ? err : op_verify();
		if (g)
			op_destroy();
	}
	return err;
}

struct churn_tally {
	uint64_t rounds, collapses, reported, lost, nowp, shorts;
};

static void report_done(void *cookie, int result)
{
	__atomic_store_n((int *)cookie, result ? result : 1, __ATOMIC_RELEASE);
}

/* Free page reporting of the guest's first quarter, waited for: 0 or a GFA_E*. */
static int report_quarter(struct churn_tally *t)
{
	struct gfa_free_report *rep = gfa_guest_report_create(gfa_hostpool_backing(hp), g);
	struct gfa_gpa_range r = { 0, g_bytes / 4 };
	int done = 0, err;

	if (!rep)
		return fail("report_create", -errno);
	err = gfa_guest_report_free(rep, &r, 1, report_done, &done);
	if (!err)
		err = gfa_guest_report_flush(rep, 10000);
	gfa_guest_report_destroy(rep);
	if (err)
		return fail("report", err);
	if (__atomic_load_n(&done, __ATOMIC_ACQUIRE) != 1)
		return fail("report: the request failed", done);
	t->reported += r.len / PAGE;
	return 0;
}

/* A deflate; squeezed, one that falls short is counted and the pages stay ballooned. */
static int balloon_back(uint64_t mib, struct churn_tally *t)
{
	struct gfa_gpa_range r = { 0, mib * MiB };
	int64_t n;

	if (!may_be_short)
		return op_balloon(mib, false);
	n = gfa_balloon_deflate(g, &r, 1);
	if (n == GFA_ENOMEM) {
		t->shorts++;
		return 0;
	}
	return n < 0 ? fail("deflate", (int)n) : op_balloon_stamp(mib);
}

/*
 * One churn round on a fresh guest: the writers are threads that are not vCPUs, as a
 * VMM's device threads are, on the half no balloon or report touches.
 */
static int churn_round(uint64_t mib, struct churn_tally *t)
{
	static const enum gw_kind stores[] = { GW_STORE, GW_STORE };
	static struct gw_set ws; /* (2 MiB of slow-write records: not on the stack) */
	struct gfa_guest_stat gs;
	uint64_t half;
	int err, n;

	err = create_guest(mib, t->rounds & 1);
	if (err == GFA_ENOMEM && may_be_short) {
		t->shorts++;
		usleep(20000);
		return 0;
	}
	if (err)
		return err;
	half = g_bytes / 2;
	if (gw_start(&ws, (char *)gfa_guest_hva(g) + half, half, 2, stores))
		return fail("writers", GFA_ENOMEM);
	err = report_quarter(t);
	/* without write protection a collapse would need a pause op this VMM lacks */
	n = err || gfa_guest_stat(g, &gs) || gs.wp_errno ? 0 : gfa_guest_collapse(g, 64);
	t->nowp += !err && gs.wp_errno;
	if (n == GFA_ENOMEM && may_be_short)
		t->shorts++, n = 0; /* no block for the move's target: it waits for room */
	if (n < 0)
		err = fail("collapse", n);
	err = err ? err : op_balloon(mib / 2, true);
	err = err ? err : balloon_back(mib / 2, t);
	t->lost += gw_stop(&ws);
	/* what a deflate that fell short left ballooned reads zero: not checked */
	err = err ? err : verify_range(ballooned, half);
	if (!err && !gfa_guest_stat(g, &gs))
		t->collapses += gs.collapses;
	op_destroy();
	t->rounds++;
	return err;
}

static int op_churn(uint64_t secs, uint64_t mib)
{
	uint64_t end = ktime_get_ns() + secs * 1000000000ULL;
	struct churn_tally t = { 0 };
	int err = 0;

	while (!err && ktime_get_ns() < end)
		err = churn_round(mib, &t);
	printf("churn rounds %lu collapses %lu reported %lu lost %lu nowp %lu short %lu\n",
	       (unsigned long)t.rounds, (unsigned long)t.collapses, (unsigned long)t.reported,
	       (unsigned long)t.lost, (unsigned long)t.nowp, (unsigned long)t.shorts);
	fflush(stdout);
	if (!err && t.lost)
		err = fail("churn: writes lost under moves", GFA_ECORRUPT);
	return err;
}

static int op_hold(void)
{
	char c;

	while (read(0, &c, 1) > 0)
		;
	return 0;
}

int main(int argc, char **argv)
{
	int err = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: gfa-hostpool-client SOCKET OP...\n");
		return 2;
	}
	hp = gfa_hostpool_attach(argv[1], NULL);
	if (!hp)
		return fail("attach", -errno);
	for (int i = 2; !err && i < argc; i++) {
		const char *op = argv[i];
		uint64_t a = i + 1 < argc ? strtoull(argv[i + 1], NULL, 0) : 0;
		uint64_t b = i + 2 < argc ? strtoull(argv[i + 2], NULL, 0) : 0;

		if (!strcmp(op, "create") && !g)
			err = op_create(a), i++;
		else if (!strcmp(op, "verify") && g)
			err = op_verify();
		else if (!strcmp(op, "sparse") && g)
			err = op_sparse(a), i++;
		else if (!strcmp(op, "inflate") && g)
			err = op_balloon(a, true), i++;
		else if (!strcmp(op, "deflate") && g)
			err = op_balloon(a, false), i++;
		else if (!strcmp(op, "destroy") && g)
			err = op_destroy();
		else if (!strcmp(op, "loop") && !g)
			err = op_loop(a, b), i += 2;
		else if (!strcmp(op, "churn") && !g)
			err = op_churn(a, b), i += 2;
		else if (!strcmp(op, "squeeze") && !g)
			may_be_short = true, err = op_churn(a, b), i += 2;
		else if (!strcmp(op, "claim")) {
			int r = gfa_hostpool_claim(hp, 0, a * MiB / PAGE);

			err = r ? fail("claim", r) : 0, i++;
		} else if (!strcmp(op, "unclaim")) {
			int64_t r = gfa_hostpool_unclaim(hp, 0);

			err = r < 0 ? fail("unclaim", (int)r) : 0;
		} else if (!strcmp(op, "ready"))
			printf("ready\n"), fflush(stdout);
		else if (!strcmp(op, "hold"))
			err = op_hold();
		else if (!strcmp(op, "stat")) {
			struct gfa_hostpool_stat st;
			int r = gfa_hostpool_stat(hp, &st, NULL, 0);

			if (r < 0)
				err = fail("stat", r);
			else
				printf("mine %lu rejoins %lu\n", (unsigned long)st.mine_frames,
				       (unsigned long)st.rejoins),
					fflush(stdout);
		} else {
			fprintf(stderr, "hostpool-client: '%s': unknown here\n", op);
			err = 2;
		}
	}
	if (g)
		op_destroy();
	gfa_hostpool_detach(hp);
	return err;
}
