// SPDX-License-Identifier: MIT
/*
 * A host pool client the tests run as a process of its own (fork and exec), as a VMM
 * would be: it attaches to a gfad and runs the operations its arguments name, in order.
 *   gfa-hostpool-client SOCKET OP...
 *   create MIB     a guest of MIB (every page must read zero), each page then written
 *   verify         every page not ballooned still holds what was written
 *   inflate MIB    balloon out the guest's first MIB; deflate MIB gives it back
 *   destroy        destroy the guest
 *   loop N MIB     N times: create, inflate half, deflate, verify, destroy
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

#define MiB  (1ULL << 20)
#define PAGE 4096ULL

static struct gfa_hostpool *hp;
static struct gfa_guest *g;
static uint64_t g_bytes, ballooned;
static unsigned char stamp;

static int fail(const char *what, int err)
{
	fprintf(stderr, "hostpool-client %d: %s: %s\n", (int)getpid(), what, gfa_strerror(err));
	return 1;
}

static int op_create(uint64_t mib)
{
	struct gfa_guest_config cfg = { .mem_bytes = mib * MiB };
	unsigned char *p;

	g = gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	if (!g)
		return fail("create", -errno);
	g_bytes = mib * MiB;
	ballooned = 0;
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

static int op_verify(void)
{
	const unsigned char *p = gfa_guest_hva(g);

	for (uint64_t off = ballooned; off < g_bytes; off += PAGE)
		if (p[off] != stamp || p[off + PAGE - 1] != stamp)
			return fail("verify: a page lost what was written", GFA_ECORRUPT);
	return 0;
}

static int op_balloon(uint64_t mib, bool inflate)
{
	struct gfa_gpa_range r = { 0, mib * MiB };
	int64_t n = inflate ? gfa_balloon_inflate(g, &r, 1) : gfa_balloon_deflate(g, &r, 1);

	if (n < 0)
		return fail(inflate ? "inflate" : "deflate", (int)n);
	ballooned = inflate ? mib * MiB : 0;
	if (!inflate) {
		unsigned char *p = gfa_guest_hva(g);

		for (uint64_t off = 0; off < mib * MiB; off += PAGE) {
			if (p[off])
				return fail("deflate: a page does not read zero", GFA_ECORRUPT);
			p[off] = stamp;
			p[off + PAGE - 1] = stamp;
		}
	}
	return 0;
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
		else if (!strcmp(op, "inflate") && g)
			err = op_balloon(a, true), i++;
		else if (!strcmp(op, "deflate") && g)
			err = op_balloon(a, false), i++;
		else if (!strcmp(op, "destroy") && g)
			err = op_destroy();
		else if (!strcmp(op, "loop") && !g)
			err = op_loop(a, b), i += 2;
		else if (!strcmp(op, "ready"))
			printf("ready\n"), fflush(stdout);
		else if (!strcmp(op, "hold"))
			err = op_hold();
		else if (!strcmp(op, "stat")) {
			struct gfa_hostpool_stat st;
			int r = gfa_hostpool_stat(hp, &st, NULL, 0);

			if (r < 0)
				err = fail("stat", r);
			else
				printf("mine %lu\n", (unsigned long)st.mine_frames), fflush(stdout);
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
