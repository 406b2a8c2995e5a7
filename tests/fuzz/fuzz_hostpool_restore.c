// SPDX-License-Identifier: MIT
/*
 * A libFuzzer target over the host pool service's restart (gfad --state): the input is
 * the table a killed service left, as damaged as the bytes make it - records of this
 * process (alive, so restored), of it with another start time, of pids that cannot be,
 * repeated ids, ids the table never gave, any uid, claims of any size; lease entries
 * naming those records, empty slots, slots past the table, blocks between zones - then
 * a rejoin, a listing and a return.  The model predicts which records are taken back,
 * each one's blocks and claims, whether the rejoin is taken, and what the listing
 * names; the pool's check stays clean, leased + free = all frames, and when every
 * client has gone, every frame is free and no claim is left.  A table with two live
 * records of one id keeps the service from starting.
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
#define ZONE_BLOCKS 8u /* order-9 blocks a zone */
#define BLOCK       512ull
#define NR_RECS     5u /* records the input writes: slots 0..3 and the last */

static char dir[64];
static uint64_t zone_start[NR_ZONES], nr_pfns, my_start;

static struct {
	struct fuzz_input f;
	unsigned int slot[NR_RECS];
	bool live[NR_RECS]; /* restored: this process, its start time, an id given out */
	uint64_t blocks[NR_RECS], claim[NR_RECS][NR_ZONES];
	uint8_t nr_rejoins, rejoin[2]; /* read first: short inputs reach them */
} M;

#define CHECK(cond, ...) FUZZ_CHECK("fuzz_hostpool_restore", cond, __VA_ARGS__)

static uint8_t in8(void)
{
	return fuzz_in8(&M.f);
}

static void pool_config(struct gfa_pool_config *pc)
{
	gfa_pool_config_init(pc, ZONE_BLOCKS * BLOCK);
	pc->nr_zones = NR_ZONES;
	for (unsigned int z = 0; z < NR_ZONES; z++)
		pc->zones[z] =
			(struct gfa_zone_config){ .nr_frames = ZONE_BLOCKS * BLOCK, .node = 0 };
}

static int zone_of(uint64_t pfn)
{
	for (unsigned int z = 0; z < NR_ZONES; z++)
		if (pfn >= zone_start[z] && pfn < zone_start[z] + ZONE_BLOCKS * BLOCK)
			return (int)z;
	return -1;
}

/* One record from the input, and whether the model has it restored. */
static void write_record(struct hps_state *st, unsigned int r, uint64_t next)
{
	struct hps_state_client *rec = &st->client[M.slot[r]];
	uint8_t kind = in8(), c = in8();

	memset(rec, 0, sizeof(*rec));
	rec->serial = kind & 0x80 ? 0 : kind % 8; /* 0: an empty slot */
	rec->uid = kind >> 5 & 1;
	rec->pid = (int32_t)getpid();
	rec->start_time = my_start;
	switch (kind >> 3 & 3) {
	case 1:
		rec->start_time++; /* its pid reused: another process */
		break;
	case 2:
		rec->pid = (int32_t)(4194304 + kind); /* past any pid_max */
		break;
	case 3:
		rec->pid = -(int32_t)(kind & 1); /* 0, or no pid at all */
		break;
	}
	/* a nibble a zone: none, frames, blocks' worth, more than any zone */
	for (unsigned int z = 0; z < NR_ZONES; z++, c >>= 4)
		rec->claim_left[z] = c % 16 == 15 ? 1ull << 40 : (uint64_t)(c % 16) * 97;
	M.live[r] = rec->serial && !(kind >> 3 & 3) && rec->serial < next;
}

/* The table a killed service might have left, from the input. */
static bool write_table(struct hps_state *st)
{
	uint64_t next = in8() % 8;
	bool dup = false;

	memset(&M.live, 0, sizeof(M.live));
	memset(&M.blocks, 0, sizeof(M.blocks));
	memset(&M.claim, 0, sizeof(M.claim));
	memset(st->client, 0, sizeof(st->client));
	st->next_serial = next;
	for (unsigned int r = 0; r < NR_RECS; r++)
		write_record(st, r, next ? next : 1);
	for (unsigned int r = 0; r < NR_RECS; r++)
		for (unsigned int q = 0; q < r; q++)
			dup |= M.live[r] && M.live[q] &&
			       st->client[M.slot[r]].serial == st->client[M.slot[q]].serial;
	for (uint64_t b = 0, x = 0; b < st->nr_blocks; b++) {
		static const uint32_t v[] = {
			0, 1, 2, 3, 4, HPS_STATE_CLIENTS, HPS_STATE_CLIENTS + 1, 0xffffffffu
		};
		uint32_t e;

		x = b % 2 ? x >> 4 : in8(); /* an entry a nibble: short inputs reach them */
		e = v[x % 8];

		st->lease[b] = e;
		for (unsigned int r = 0; r < NR_RECS; r++)
			if (e == M.slot[r] + 1 && M.live[r] && zone_of(b * BLOCK) >= 0)
				M.blocks[r]++;
	}
	return dup;
}

/* The claims a restore makes again, in slot order: each fits what is free unclaimed. */
static void model_claims(struct hps_state *st)
{
	for (unsigned int z = 0; z < NR_ZONES; z++) {
		uint64_t avail = ZONE_BLOCKS * BLOCK;

		for (unsigned int r = 0; r < NR_RECS; r++)
			for (uint64_t b = 0; M.live[r] && b < st->nr_blocks; b++)
				if (st->lease[b] == M.slot[r] + 1 && zone_of(b * BLOCK) == (int)z)
					avail -= BLOCK;
		for (unsigned int r = 0; r < NR_RECS; r++) {
			uint64_t want = st->client[M.slot[r]].claim_left[z];

			if (M.live[r] && want && want <= avail) {
				M.claim[r][z] = want;
				avail -= want;
			}
		}
	}
}

static void check_pool(struct hps *s, struct gfa_backing *b, uint64_t leased, uint64_t claimed)
{
	struct hps_stat st;
	char why[256];
	int err = gfa_backing_check(b, why, sizeof(why));

	CHECK(!err, "check: %s", why);
	hps_stat(s, &st);
	CHECK(st.v[HP_ST_LEASED] == leased, "leased %lu, model %lu",
	      (unsigned long)st.v[HP_ST_LEASED], (unsigned long)leased);
	CHECK(st.v[HP_ST_FREE] + leased == st.v[HP_ST_FRAMES], "free %lu + leased %lu != %lu",
	      (unsigned long)st.v[HP_ST_FREE], (unsigned long)leased,
	      (unsigned long)st.v[HP_ST_FRAMES]);
	CHECK(st.v[HP_ST_CLAIMED] == claimed, "claimed %lu, model %lu",
	      (unsigned long)st.v[HP_ST_CLAIMED], (unsigned long)claimed);
}

static void request(struct hps *s, struct hps_client *c, struct hp_msg *m, struct hp_msg *r)
{
	int fds[GFA_MAX_ZONES], close_fd, ret;
	unsigned int nr_fds;

	m->magic = HP_MAGIC;
	m->version = HP_VERSION;
	ret = hps_handle(s, c, m, sizeof(*m), r, fds, &nr_fds, &close_fd);
	CHECK(ret == 0, "request %u: %d", m->type, ret);
	if (close_fd >= 0)
		close(close_fd);
}

/* A rejoin of the id the input names, then its listing and a return of it all. */
static void rejoin(struct hps *s, struct hps_state *st, uint8_t how, uint64_t *leased,
		   uint64_t *claimed)
{
	uint64_t id = how % 8;
	uint32_t uid = how >> 3 & 1;
	struct hps_client *c = hps_client_new(s, getpid(), uid);
	struct hp_msg m = { .type = HP_REJOIN }, r;
	int who = -1;

	CHECK(c, "a new client");
	for (unsigned int k = 0; k < NR_RECS && who < 0; k++)
		if (M.live[k] && st->client[M.slot[k]].serial == id &&
		    st->client[M.slot[k]].uid == uid)
			who = (int)k;
	m.arg[0] = id;
	request(s, c, &m, &r);
	CHECK(who >= 0 ? !r.result && r.arg[2] == M.blocks[who] * BLOCK : r.result == GFA_ENOTFOUND,
	      "rejoin of %lu: %d, %lu frames; model %d", (unsigned long)id, r.result,
	      (unsigned long)r.arg[2], who);
	if (who >= 0) {
		struct hp_msg l = { .type = HP_LEASES }, lr, ret = { .type = HP_RETURN }, rr;

		request(s, c, &l, &lr);
		CHECK(!lr.result && lr.arg[1] == 1 && lr.count == M.blocks[who],
		      "listing: %d, %u blocks, model %lu", lr.result, lr.count,
		      (unsigned long)M.blocks[who]);
		for (uint32_t i = 0; i < lr.count; i++) {
			CHECK(st->lease[lr.pfn[i] / BLOCK] == M.slot[who] + 1, "listed %lu",
			      (unsigned long)lr.pfn[i]);
			ret.pfn[ret.count++] = lr.pfn[i];
		}
		if (ret.count && how & 0x10) {
			request(s, c, &ret, &rr);
			CHECK(!rr.result, "return: %d", rr.result);
			*leased -= ret.count * BLOCK;
			M.blocks[who] = 0;
		}
	}
	hps_client_gone(s, c);
	if (who >= 0) {
		*leased -= M.blocks[who] * BLOCK;
		for (unsigned int z = 0; z < NR_ZONES; z++)
			*claimed -= M.claim[who][z];
		M.live[who] = false;
	}
}

static void one_restart(void)
{
	struct gfa_backing_config bc = { .populate = false };
	struct gfa_pool_config pc;
	struct hps_config hc;
	uint64_t leased = 0, claimed = 0;
	struct hps *s;
	bool dup;
	int err;

	pool_config(&pc);
	memset(&hc, 0, sizeof(hc));
	hc.quiet = true;
	err = hps_state_pool(dir, &pc, &bc, &hc);
	CHECK(!err, "the state in %s: %d", dir, err);
	for (unsigned int z = 0; z < NR_ZONES; z++) {
		uint64_t n;

		gfa_zone_span(hc.pool, z, &zone_start[z], &n);
		nr_pfns = zone_start[z] + n;
	}
	dup = write_table(hc.state);
	model_claims(hc.state);
	hc.state_found = true;
	s = hps_create(&hc);
	CHECK(!s == dup, "a table with two live records of one id: service %p", (void *)s);
	if (s) {
		for (unsigned int r = 0; r < NR_RECS; r++) {
			leased += M.blocks[r] * BLOCK;
			for (unsigned int z = 0; z < NR_ZONES; z++)
				claimed += M.claim[r][z];
		}
		check_pool(s, hc.b, leased, claimed);
		for (unsigned int k = 0; k < M.nr_rejoins; k++) {
			rejoin(s, hc.state, M.rejoin[k], &leased, &claimed);
			check_pool(s, hc.b, leased, claimed);
		}
		hps_destroy(s); /* with a state the restored clients' leases stay in the table */
	}
	gfa_backing_destroy(hc.b);
	gfa_pool_destroy(hc.pool);
	hps_state_close(hc.state);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/dev/shm/gfa-fuzz-restore-%d", (int)getpid());
		my_start = hps_pid_start_time(getpid());
		CHECK(my_start, "our start time");
		for (unsigned int r = 0; r < NR_RECS; r++)
			M.slot[r] = r < NR_RECS - 1 ? r : HPS_STATE_CLIENTS - 1;
	}
	M.f = (struct fuzz_input){ data, size };
	M.nr_rejoins = in8() % 3;
	for (unsigned int k = 0; k < 2; k++)
		M.rejoin[k] = in8();
	one_restart();
	return 0;
}
