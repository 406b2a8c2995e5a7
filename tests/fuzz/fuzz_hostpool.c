// SPDX-License-Identifier: MIT
/*
 * A libFuzzer target over the host pool service's message handler (hps_handle, no
 * socket), with a model of every lease.  The input is a program: each byte picks an
 * op - a client connects or goes away, or a client sends a packet: a well formed
 * request built from the bytes that follow (leases of a zone, returns of blocks that
 * are its own, another client's, unaligned, beyond the pool, named twice; a stat; a
 * claim or an unclaim; a listing of its leases), or raw bytes of any length.  After
 * every op the model checks: a packet that does not parse closes its connection (and
 * only it: the harness then frees it as the socket loop does), a refused request
 * changes nothing, a lease gives exactly the blocks the claims allow, a listing names
 * exactly the client's leases, every lease the service reports is where the model
 * says, every claim is what the model says, leased + free = all frames, and
 * gfa_backing_check is clean.  At the end every client goes: all frames free again,
 * no claim left.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "vmm/hostpool_server.h"
#include "tests/fuzz/fuzz_input.h"

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
	bool has_claim[MAX_CLIENTS][NR_ZONES];
	bool hello[MAX_CLIENTS];               /* its HELLO was handled: the service knows it */
	bool shrinker[MAX_CLIENTS];            /* a lease asked for its shrinker */
	uint64_t claim[MAX_CLIENTS][NR_ZONES]; /* frames the claim still reserves */
	struct fuzz_input f;
} M;

#define CHECK(cond, ...) FUZZ_CHECK("fuzz_hostpool", cond, __VA_ARGS__)

static uint8_t in8(void)
{
	return fuzz_in8(&M.f);
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

/* The model's free frames of zone z, and what all claims there reserve. */
static uint64_t model_free(unsigned int z)
{
	uint64_t n = ZONE_BLOCKS * BLOCK;

	for (unsigned int k = 0; k < NR_BLOCKS; k++)
		if (M.holder[k] && k * BLOCK >= zone_start[z] &&
		    k * BLOCK < zone_start[z] + ZONE_BLOCKS * BLOCK)
			n -= BLOCK;
	return n;
}

static uint64_t model_claimed(unsigned int z)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < MAX_CLIENTS; i++)
		n += M.claim[i][z];
	return n;
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
	for (unsigned int z = 0; z < NR_ZONES; z++)
		CHECK(gfa_zone_claimed(pool, z) == model_claimed(z),
		      "zone %u claimed %lu, model %lu", z, (unsigned long)gfa_zone_claimed(pool, z),
		      (unsigned long)model_claimed(z));
	CHECK(st.v[HP_ST_CLAIMED] == model_claimed(0) + model_claimed(1), "claimed in the stat");
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
	M.hello[i] = false;
	M.shrinker[i] = false;
	memset(M.has_claim[i], 0, sizeof(M.has_claim[i]));
	memset(M.claim[i], 0, sizeof(M.claim[i]));
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

/*
 * The blocks a lease of n in zone z gets (as claim_allows: within its own claim, or
 * from what no claim reserves), drawing them from i's claim in the model.
 */
static uint32_t model_lease(unsigned int i, unsigned int z, uint64_t n)
{
	uint64_t free = model_free(z), unclaimed = free - model_claimed(z);
	uint32_t got = 0;

	for (; got < n && free >= BLOCK; got++) {
		uint64_t own = M.claim[i][z], take = own < BLOCK ? own : BLOCK;

		if (own < BLOCK && unclaimed < BLOCK - own)
			break;
		M.claim[i][z] -= take;
		unclaimed -= BLOCK - take;
		free -= BLOCK;
	}
	return got;
}

static void after_lease(unsigned int i, const struct hp_msg *m, const struct hp_msg *r,
			unsigned int nr_fds)
{
	bool bad = m->zone >= NR_ZONES || !m->arg[0] || m->arg[0] > HP_MAX_PFNS || m->count ||
		   m->arg[1] > HP_LEASE_SHRINKER;
	uint32_t want = bad ? 0 : model_lease(i, m->zone, m->arg[0]);
	uint64_t asked = 0;

	CHECK(!bad || (r->result == GFA_EINVAL && !r->count), "a bad lease was served");
	CHECK(r->count == want, "%u leases, the claims allow %u", r->count, want);
	for (uint32_t j = 0; j < r->count; j++) {
		uint64_t p = r->pfn[j] & ~HP_PFN_DIRTY;

		CHECK(!(p % BLOCK) && p >= zone_start[m->zone] &&
			      p < zone_start[m->zone] + ZONE_BLOCKS * BLOCK,
		      "lease %lx outside its zone", (unsigned long)p);
		CHECK(!M.holder[p / BLOCK], "block %lx leased twice", (unsigned long)p);
		M.holder[p / BLOCK] = (int)i + 1;
		M.leased += BLOCK;
	}
	M.shrinker[i] |= !bad && m->arg[1];
	/* short: the others with a shrinker and a lease were asked to give back */
	for (unsigned int j = 0; !bad && want < m->arg[0] && j < MAX_CLIENTS; j++)
		for (unsigned int k = 0; j != i && M.shrinker[j] && k < NR_BLOCKS; k++)
			if (M.holder[k] == (int)j + 1) {
				asked++;
				break;
			}
	CHECK(r->arg[1] == asked, "a short lease asked %lu shrinkers, the model %lu",
	      (unsigned long)r->arg[1], (unsigned long)asked);
	CHECK(nr_fds == (!bad && m->arg[1] ? 1u : 0u), "a lease came with %u fds", nr_fds);
}

/* What the model says a claim (or unclaim) of m gives; for an unclaim *left too. */
static int model_claim(unsigned int i, const struct hp_msg *m, uint64_t *left)
{
	unsigned int z = m->zone;

	if (m->type == HP_CLAIM) {
		if (z >= NR_ZONES || !m->arg[0] || m->arg[1])
			return GFA_EINVAL;
		if (M.has_claim[i][z])
			return GFA_EEXIST;
		return m->arg[0] > model_free(z) - model_claimed(z) ? GFA_ENOSPC : 0;
	}
	if (z >= NR_ZONES || m->arg[0])
		return GFA_EINVAL;
	*left = M.claim[i][z];
	return M.has_claim[i][z] ? 0 : GFA_ENOTFOUND;
}

static void after_claim(unsigned int i, const struct hp_msg *m, const struct hp_msg *r)
{
	uint64_t left = 0;
	int want = model_claim(i, m, &left);

	CHECK(r->result == want, "%s: %d, model %d", m->type == HP_CLAIM ? "claim" : "unclaim",
	      r->result, want);
	if (want)
		return;
	if (m->type == HP_CLAIM) {
		M.has_claim[i][m->zone] = true;
		M.claim[i][m->zone] = m->arg[0];
		return;
	}
	CHECK(r->arg[0] == left, "unclaim gave back %lu, model %lu", (unsigned long)r->arg[0],
	      (unsigned long)left);
	M.has_claim[i][m->zone] = false;
	M.claim[i][m->zone] = 0;
}

/* A listing of client i's leases: exactly the model's, from the block it named on. */
static void after_leases(unsigned int i, const struct hp_msg *m, const struct hp_msg *r)
{
	uint32_t n = 0;

	CHECK(!r->result && r->arg[1] == 1 && r->arg[0] >= m->arg[0], "leases: %d, on %lu last %lu",
	      r->result, (unsigned long)r->arg[0], (unsigned long)r->arg[1]);
	for (uint64_t k = m->arg[0]; k < NR_BLOCKS; k++) {
		if (M.holder[k] != (int)i + 1)
			continue;
		CHECK(n < r->count && r->pfn[n] == k * BLOCK, "leases: block %lu not listed",
		      (unsigned long)k);
		n++;
	}
	CHECK(n == r->count, "leases: %u listed, the model has %u", r->count, n);
}

static void send_packet(unsigned int i)
{
	static const uint16_t types[] = { HP_HELLO, HP_LEASE,   HP_RETURN, HP_STAT,
					  HP_CLAIM, HP_UNCLAIM, HP_REJOIN, HP_LEASES };
	static struct hp_msg m, r;
	int fds[GFA_MAX_ZONES], close_fd, ret, want = 0;
	unsigned int nr_fds;
	bool hello;
	uint8_t kind = in8();
	size_t len = sizeof(m);

	memset(&m, 0, sizeof(m));
	m.magic = HP_MAGIC;
	m.version = HP_VERSION;
	m.seq = in8();
	m.type = types[kind % 8];
	if (m.type == HP_LEASE) {
		m.zone = in8() % (NR_ZONES + 1);
		m.arg[0] = in8() % 12;
		m.arg[1] = in8() < 64 ? in8() % 3 : 0; /* HP_LEASE_SHRINKER, or a bad bit */
	} else if (m.type == HP_RETURN) {
		m.count = 1 + in8() % 5;
		for (uint32_t j = 0; j < m.count; j++)
			m.pfn[j] = pick_pfn(i);
		want = model_return(i, &m);
	} else if (m.type == HP_LEASES) {
		m.arg[0] = in8() < 32 ? in8() % (NR_BLOCKS + 2) : 0; /* where to start */
	} else if (m.type == HP_REJOIN) {
		m.arg[0] = in8(); /* a service without a state holds no one to take back */
	} else if (m.type == HP_CLAIM || m.type == HP_UNCLAIM) {
		m.zone = in8() % (NR_ZONES + 1);
		/* frames: none, a few, blocks, beyond the zone; an unclaim's is 0 mostly */
		m.arg[0] = m.type == HP_CLAIM || in8() < 16 ? (uint64_t)in8() * 24 : 0;
	}
	if (kind >= 0xb0 && kind < 0xc0)
		m.version = in8(); /* a libgfa of another protocol version, mostly */
	if (kind >= 0xc0) {
		/* raw: the bytes that follow, at a length that may not be ours */
		len = (size_t)in8() * 16 + in8();
		len = len > sizeof(m) + 8 ? sizeof(m) + 8 : len;
		for (size_t j = 0; j < len && j < sizeof(m); j++)
			((uint8_t *)&m)[j] ^= in8();
	}
	hello = M.hello[i];
	ret = hps_handle(srv, M.c[i], &m, len, &r, fds, &nr_fds, &close_fd);
	if (close_fd >= 0)
		close(close_fd);
	/* another version: told which one the service speaks before its first hello only */
	CHECK(ret == 1 || len != sizeof(m) || m.magic != HP_MAGIC || m.version == HP_VERSION ||
		      m.type != HP_HELLO || hello,
	      "a hello of version %u got %d", m.version, ret);
	if (ret == 1) {
		CHECK(!hello && m.version != HP_VERSION && r.version == m.version &&
			      r.type == HP_HELLO && r.result == GFA_EPROTO &&
			      r.arg[0] == HP_VERSION,
		      "version %u: reply version %u result %d arg %lu", m.version, r.version,
		      r.result, (unsigned long)r.arg[0]);
		client_gone(i); /* replied to, then closed */
		return;
	}
	CHECK(ret < 0 || m.version == HP_VERSION, "version %u parsed", m.version);
	if (ret < 0) {
		client_gone(i); /* as the loop closes it */
		return;
	}
	if (m.type == HP_HELLO)
		M.hello[i] = true; /* handle_hello() refuses a second one: a malformed packet */
	CHECK(r.magic == HP_MAGIC && r.type == m.type && r.seq == m.seq, "reply header");
	if (kind >= 0xc0)
		return; /* parsed after all: no model of what it asked */
	if (m.type == HP_REJOIN)
		CHECK(!hello && r.result == GFA_ENOTFOUND, "rejoin: %d", r.result);
	else if (m.type == HP_LEASES)
		after_leases(i, &m, &r);
	else if (m.type == HP_LEASE)
		after_lease(i, &m, &r, nr_fds);
	else if (m.type == HP_CLAIM || m.type == HP_UNCLAIM)
		after_claim(i, &m, &r);
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
	M.f = (struct fuzz_input){ data, size };
	while (M.f.left) {
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
	CHECK(!model_claimed(0) && !model_claimed(1), "claims left");
	return 0;
}
