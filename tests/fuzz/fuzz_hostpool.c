// SPDX-License-Identifier: MIT
/*
 * A libFuzzer target over the host pool service's message handler (hps_handle, no
 * socket), with a model of every lease.  The input is a program: each byte picks an
 * op - a client connects or goes away, or a client sends a packet: a well formed
 * request built from the bytes that follow (leases of a zone, returns of blocks that
 * are its own, another client's, unaligned, beyond the pool, named twice; a stat), or
 * raw bytes of any length.  After every op the model checks: a packet that does not
 * parse closes its connection (and only it: the harness then frees it as the socket
 * loop does), a refused request changes nothing, every lease the service reports is
 * where the model says, leased + free = all frames, and gfa_backing_check is clean.
 * At the end every client goes: all frames free again.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "vmm/hostpool_server.h"

#define NR_ZONES    2u
#define ZONE_BLOCKS 8u                           /* order-9 blocks a zone */
#define NR_BLOCKS   (NR_ZONES * ZONE_BLOCKS + 8) /* pfn space, zone gaps too */
#define MAX_CLIENTS 4u
#define BLOCK       512ull

static struct gfa_pool *pool;
static struct gfa_backing *b;
static struct hps *srv;
static uint64_t zone_start[NR_ZONES], nr_pfns;

static struct {
	struct hps_client *c[MAX_CLIENTS];
	int holder[NR_BLOCKS]; /* model: client index + 1 holding the block, 0 */
	uint64_t leased;
	const uint8_t *in;
	size_t left;
} M;

#define CHECK(cond, ...)                                                \
	do {                                                            \
		if (!(cond)) {                                          \
			fprintf(stderr, "fuzz_hostpool: " __VA_ARGS__); \
			fprintf(stderr, "\n");                          \
			abort();                                        \
		}                                                       \
	} while (0)

static uint8_t in8(void)
{
	if (!M.left)
		return 0;
	M.left--;
	return *M.in++;
}

static void setup(void)
{
	struct gfa_pool_config pc;
	struct hps_config hc;

	gfa_pool_config_init(&pc, ZONE_BLOCKS * BLOCK);
	pc.nr_zones = NR_ZONES;
	for (unsigned int z = 0; z < NR_ZONES; z++)
		pc.zones[z] =
			(struct gfa_zone_config){ .nr_frames = ZONE_BLOCKS * BLOCK, .node = 0 };
	pool = gfa_pool_create(&pc);
	b = pool ? gfa_backing_create(pool, NULL) : NULL;
	CHECK(b, "setup: the pool");
	memset(&hc, 0, sizeof(hc));
	hc.pool = pool;
	hc.b = b;
	hc.quiet = true;
	srv = hps_create(&hc);
	CHECK(srv, "setup: the service");
	for (unsigned int z = 0; z < NR_ZONES; z++) {
		uint64_t n;

		gfa_zone_span(pool, z, &zone_start[z], &n);
		nr_pfns = zone_start[z] + n;
	}
	CHECK(nr_pfns / BLOCK <= NR_BLOCKS, "setup: pfn space");
}

/* The service agrees with the model. */
static void check_all(void)
{
	struct hps_stat st;
	char why[256];
	int err = gfa_backing_check(b, why, sizeof(why));

	CHECK(!err, "check: %s", why);
	hps_stat(srv, &st);
	CHECK(st.v[HP_ST_LEASED] == M.leased, "leased %lu, model %lu",
	      (unsigned long)st.v[HP_ST_LEASED], (unsigned long)M.leased);
	CHECK(st.v[HP_ST_LEASED] + st.v[HP_ST_FREE] == st.v[HP_ST_FRAMES], "frames lost");
	for (unsigned int i = 0; i < MAX_CLIENTS; i++) {
		uint64_t n = 0;

		for (unsigned int k = 0; k < NR_BLOCKS; k++)
			n += M.holder[k] == (int)i + 1 ? BLOCK : 0;
		CHECK(!M.c[i] ? !n : hps_client_leased(M.c[i]) == n, "client %u's leases", i);
	}
}

static void client_gone(unsigned int i)
{
	if (!M.c[i])
		return;
	hps_client_gone(srv, M.c[i]);
	M.c[i] = NULL;
	for (unsigned int k = 0; k < NR_BLOCKS; k++)
		if (M.holder[k] == (int)i + 1) {
			M.holder[k] = 0;
			M.leased -= BLOCK;
		}
}

/* A pfn for a return: one of the client's, another's, a free block, or a bad one. */
static uint64_t pick_pfn(unsigned int i)
{
	uint8_t how = in8(), k = in8() % NR_BLOCKS;

	switch (how % 6) {
	case 0:
	case 1:
		for (unsigned int j = 0; j < NR_BLOCKS; j++)
			if (M.holder[(k + j) % NR_BLOCKS] == (int)i + 1)
				return (uint64_t)((k + j) % NR_BLOCKS) * BLOCK;
		return (uint64_t)k * BLOCK;
	case 2:
		return (uint64_t)k * BLOCK; /* anyone's, or nobody's */
	case 3:
		return (uint64_t)k * BLOCK + 1 + in8(); /* not a block's head */
	case 4:
		return nr_pfns + (uint64_t)in8() * BLOCK; /* beyond the pool */
	default:
		return ~0ull - in8();
	}
}

/* What the model says a return of m's pfns gives. */
static int model_return(unsigned int i, const struct hp_msg *m)
{
	if (!m->count || m->zone || m->arg[0])
		return GFA_EINVAL;
	for (uint32_t j = 0; j < m->count; j++) {
		uint64_t p = m->pfn[j];

		if (p % BLOCK || p >= nr_pfns)
			return GFA_EINVAL;
		if (M.holder[p / BLOCK] != (int)i + 1)
			return GFA_EOWNER;
		for (uint32_t l = 0; l < j; l++)
			if (m->pfn[l] == p)
				return GFA_EOVERLAP;
	}
	return 0;
}

static void after_lease(unsigned int i, const struct hp_msg *m, const struct hp_msg *r)
{
	bool bad = m->zone >= NR_ZONES || !m->arg[0] || m->arg[0] > HP_MAX_PFNS || m->count;

	CHECK(!bad || (r->result == GFA_EINVAL && !r->count), "a bad lease was served");
	CHECK(r->count <= m->arg[0], "more leases than asked");
	for (uint32_t j = 0; j < r->count; j++) {
		uint64_t p = r->pfn[j] & ~HP_PFN_DIRTY;

		CHECK(!(p % BLOCK) && p >= zone_start[m->zone] &&
			      p < zone_start[m->zone] + ZONE_BLOCKS * BLOCK,
		      "lease %lx outside its zone", (unsigned long)p);
		CHECK(!M.holder[p / BLOCK], "block %lx leased twice", (unsigned long)p);
		M.holder[p / BLOCK] = (int)i + 1;
		M.leased += BLOCK;
	}
}

static void send_packet(unsigned int i)
{
	static struct hp_msg m, r;
	int fds[GFA_MAX_ZONES], close_fd, ret, want = 0;
	unsigned int nr_fds;
	uint8_t kind = in8();
	size_t len = sizeof(m);

	memset(&m, 0, sizeof(m));
	m.magic = HP_MAGIC;
	m.version = HP_VERSION;
	m.seq = in8();
	m.type = (uint16_t)(1 + kind % 4);
	if (m.type == HP_LEASE) {
		m.zone = in8() % (NR_ZONES + 1);
		m.arg[0] = in8() % 12;
	} else if (m.type == HP_RETURN) {
		m.count = 1 + in8() % 5;
		for (uint32_t j = 0; j < m.count; j++)
			m.pfn[j] = pick_pfn(i);
		want = model_return(i, &m);
	}
	if (kind >= 0xc0) {
		/* raw: the bytes that follow, at a length that may not be ours */
		len = (size_t)in8() * 16 + in8();
		len = len > sizeof(m) + 8 ? sizeof(m) + 8 : len;
		for (size_t j = 0; j < len && j < sizeof(m); j++)
			((uint8_t *)&m)[j] ^= in8();
	}
	ret = hps_handle(srv, M.c[i], &m, len, &r, fds, &nr_fds, &close_fd);
	if (close_fd >= 0)
		close(close_fd);
	if (ret < 0) {
		client_gone(i); /* as the loop closes it */
		return;
	}
	CHECK(r.magic == HP_MAGIC && r.type == m.type && r.seq == m.seq, "reply header");
	if (kind >= 0xc0)
		return; /* parsed after all: no model of what it asked */
	if (m.type == HP_LEASE)
		after_lease(i, &m, &r);
	else if (m.type == HP_RETURN) {
		CHECK(r.result == want, "return: %d, model %d", r.result, want);
		for (uint32_t j = 0; !want && j < m.count; j++) {
			M.holder[m.pfn[j] / BLOCK] = 0;
			M.leased -= BLOCK;
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!srv)
		setup();
	M.in = data;
	M.left = size;
	while (M.left) {
		uint8_t op = in8();
		unsigned int i = (op >> 4) % MAX_CLIENTS;

		switch (op % 8) {
		case 0:
			if (!M.c[i])
				M.c[i] = hps_client_new(srv, 1, 0);
			break;
		case 1:
			client_gone(i);
			break;
		default:
			if (M.c[i])
				send_packet(i);
			break;
		}
		check_all();
	}
	for (unsigned int i = 0; i < MAX_CLIENTS; i++)
		client_gone(i);
	check_all();
	CHECK(!M.leased, "leases left");
	return 0;
}
