// SPDX-License-Identifier: MIT
/*
 * The host pool service: the pool, its backing and every lease live here; clients
 * lease order-9 blocks and sub-allocate them in a pool of their own (vmm/hostpool.c).
 *
 * The service trusts nothing a client sends.  Each packet is checked whole (size,
 * magic, version, type, counts, unused words zero) before anything is done, and every
 * pfn a client names is checked against the lease table, which says which client holds
 * each block: a client can give back only its own.  A packet that does not parse closes
 * that connection (counted, HP_ST_MALFORMED); a well formed request the service
 * refuses (another client's block, a bad zone) gets its errno and is counted
 * (HP_ST_REFUSED), and the connection stays.  A connection that ends for any reason
 * frees every lease it held: the kernel closes a killed client's socket, so SIGKILL
 * loses nothing.
 *
 * The handler does no I/O: hps_serve() below reads packets and sends replies, a fuzz
 * target calls hps_handle() directly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "common/bug.h"
#include "allocator/layers.h"
#include "vmm/hostpool_server.h"
#include "vmm/zero_worker.h"

#define OWNER_BASE (3ull << 56) /* owner cookies of leases: base + client serial */
#define TEXT_MAX   (256u << 10)

_Static_assert(GFA_MAX_ZONES <= 64, "a client's claimed zones are one word's bits");

struct hps_client {
	unsigned int slot;
	uint64_t serial;
	pid_t pid;
	uid_t uid;
	int fd;        /* hps_serve's connection, -1 for a handler-only client */
	int pidfd;     /* restored, its connection not back yet: its process, to see it end */
	int shrink_fd; /* its shrinker (HP_LEASE_SHRINKER), or -1 */
	struct hps_state_client *rec; /* its record in the state table, or NULL */
	bool hello;
	uint64_t leased;  /* frames */
	uint64_t claimed; /* the zones it has a claim on, a bit each (GFA_MAX_ZONES) */
};

struct hps {
	struct hps_config cfg;
	unsigned int nr_zones;
	uint64_t nr_pfns;
	uint32_t *lease; /* per order-9 block of pfn space: holder's slot + 1, or 0 (the
			  * state table's when there is one) */
	struct hps_client *slot[HPS_MAX_CLIENTS];
	uint64_t next_serial;
	struct hps_stat st;
	char *text; /* HP_STAT's text, TEXT_MAX */
	uint64_t nr_blocks;
	uint64_t lease_zeroed; /* dirty frames zeroed at lease (the text's lease_zeroed) */
	uint64_t awaited;      /* restored clients not back yet, their processes running */
	uint64_t shrink_asks;  /* shrinkers asked, lease messages that fell short */
};

static uint64_t client_owner(const struct hps_client *c)
{
	return OWNER_BASE + c->serial;
}

static int state_restore(struct hps *s);
static void client_free(struct hps *s, struct hps_client *c);

struct hps *hps_create(const struct hps_config *cfg)
{
	struct hps *s;
	uint64_t start, n;

	if (!cfg || !cfg->pool || !cfg->b || cfg->nr_uid > HPS_MAX_ALLOW ||
	    cfg->nr_gid > HPS_MAX_ALLOW) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->cfg = *cfg;
	s->nr_zones = gfa_pool_nr_zones(cfg->pool);
	gfa_zone_span(cfg->pool, s->nr_zones - 1, &start, &n);
	s->nr_pfns = start + n;
	s->next_serial = 1;
	s->nr_blocks = s->nr_pfns / HP_LEASE_FRAMES + 1;
	s->lease = cfg->state ? cfg->state->lease : calloc(s->nr_blocks, sizeof(*s->lease));
	s->text = malloc(TEXT_MAX);
	if (!s->lease || !s->text) {
		hps_destroy(s);
		errno = ENOMEM;
		return NULL;
	}
	if (cfg->state && state_restore(s)) {
		hps_destroy(s);
		errno = EPROTO;
		return NULL;
	}
	for (unsigned int z = 0; z < s->nr_zones; z++) {
		struct gfa_zone_stat zs;

		if (!gfa_zone_stat(cfg->pool, z, &zs))
			s->st.v[HP_ST_FRAMES] += zs.nr_frames;
	}
	return s;
}

void hps_destroy(struct hps *s)
{
	if (!s)
		return;
	for (unsigned int i = 0; i < HPS_MAX_CLIENTS; i++) {
		if (!s->slot[i])
			continue;
		/* with a state the clients go on: their leases wait for our restart */
		if (s->cfg.state)
			client_free(s, s->slot[i]);
		else
			hps_client_gone(s, s->slot[i]);
	}
	if (!s->cfg.state)
		free(s->lease);
	free(s->text);
	free(s);
}

bool hps_admit(struct hps *s, uid_t uid, gid_t gid)
{
	if (!s->cfg.nr_uid && !s->cfg.nr_gid && uid == geteuid())
		return true;
	for (unsigned int i = 0; i < s->cfg.nr_uid; i++)
		if (s->cfg.allow_uid[i] == uid)
			return true;
	for (unsigned int i = 0; i < s->cfg.nr_gid; i++)
		if (s->cfg.allow_gid[i] == gid)
			return true;
	s->st.v[HP_ST_DENIED]++;
	return false;
}

static struct hps_client *client_at(struct hps *s, unsigned int i, uint64_t serial, pid_t pid,
				    uid_t uid)
{
	struct hps_client *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->slot = i;
	c->serial = serial;
	c->pid = pid;
	c->uid = uid;
	c->fd = c->pidfd = c->shrink_fd = -1;
	c->rec = s->cfg.state ? &s->cfg.state->client[i] : NULL;
	s->slot[i] = c;
	s->st.v[HP_ST_CLIENTS]++;
	s->st.v[HP_ST_CLIENTS_TOTAL]++;
	return c;
}

/* c's slot empty again, its record and leases left as they are. */
static void client_free(struct hps *s, struct hps_client *c)
{
	GFA_BUG_ON(s->slot[c->slot] != c || !s->st.v[HP_ST_CLIENTS]);
	if (c->pidfd >= 0) {
		GFA_BUG_ON(!s->awaited);
		s->awaited--;
		close(c->pidfd);
	}
	if (c->shrink_fd >= 0)
		close(c->shrink_fd);
	s->slot[c->slot] = NULL;
	s->st.v[HP_ST_CLIENTS]--;
	free(c);
}

struct hps_client *hps_client_new(struct hps *s, pid_t pid, uid_t uid)
{
	for (unsigned int i = 0; i < HPS_MAX_CLIENTS; i++) {
		struct hps_client *c;

		if (s->slot[i])
			continue;
		c = client_at(s, i, s->next_serial++, pid, uid);
		if (c && c->rec) {
			/* who it is, before any lease names its slot */
			memset(c->rec, 0, sizeof(*c->rec));
			c->rec->start_time = hps_pid_start_time(pid);
			c->rec->pid = (int32_t)pid;
			c->rec->uid = (uint32_t)uid;
			s->cfg.state->next_serial = s->next_serial;
			__atomic_store_n(&c->rec->serial, c->serial, __ATOMIC_RELEASE);
		}
		return c;
	}
	return NULL;
}

/* What c's claim on zone z still reserves, into its record (a lease draws it down). */
static void client_save_claim(struct hps *s, struct hps_client *c, unsigned int z)
{
	if (c->rec)
		c->rec->claim_left[z] = c->claimed & (1ull << z) ?
						zone_claim_left(s->cfg.pool, z, client_owner(c)) :
						0;
}

static void client_save_claims(struct hps *s, struct hps_client *c)
{
	for (unsigned int z = 0; z < s->nr_zones; z++)
		client_save_claim(s, c, z);
}

/*
 * Blocks given back dirty are freed to the tail of the free lists (pool_free_cold), so
 * leases take the clean ones first, and the backing's zeroer (vmm/zero_worker.c) zeroes
 * them in its own thread, a batch at a time off the lists, at once.  So the
 * message thread zeroes only a dirty block it leases: zeroing in its poll loop (up to
 * 16 MiB a pass) kept a client's HELLO or lease waiting for it.  With a host return its
 * idle scrub zeroes them instead: one zeroer, not two.
 */
static void zero_later(struct hps *s)
{
	struct zero_worker *zw = s->cfg.hr ? NULL : zero_worker_get(s->cfg.b);

	/* (no thread to be had: each is zeroed at its next lease, as any dirty block) */
	if (zw)
		zero_worker_kick_now(zw);
}

/* Free one lease of c's (checked: it is c's); zero_later() after. */
static void lease_free(struct hps *s, struct hps_client *c, uint64_t pfn)
{
	int err;

	GFA_BUG_ON(pfn % HP_LEASE_FRAMES || pfn >= s->nr_pfns);
	GFA_BUG_ON(s->lease[pfn / HP_LEASE_FRAMES] != c->slot + 1); /* return_check's */
	GFA_BUG_ON(c->leased < HP_LEASE_FRAMES || s->st.v[HP_ST_LEASED] < c->leased);
	/* the client may have written anything there: the next holder zeroes it */
	gfa_backing_mark_dirty(s->cfg.b, pfn, HP_LEASE_ORDER);
	err = pool_free_cold(s->cfg.pool, pfn, HP_LEASE_ORDER, client_owner(c));

	GFA_BUG_ON(err); /* the lease table said it is c's */
	(void)err;
	s->lease[pfn / HP_LEASE_FRAMES] = 0;
	c->leased -= HP_LEASE_FRAMES;
	s->st.v[HP_ST_LEASED] -= HP_LEASE_FRAMES;
}

void hps_client_gone(struct hps *s, struct hps_client *c)
{
	uint64_t before = c->leased;

	/* its claims go with it: what they still reserve is anyone's again */
	for (unsigned int z = 0; z < s->nr_zones; z++)
		if (c->claimed & (1ull << z))
			(void)gfa_zone_unclaim(s->cfg.pool, z, client_owner(c));
	c->claimed = 0;

	for (uint64_t i = 0; s->lease && c->leased && i <= s->nr_pfns / HP_LEASE_FRAMES; i++)
		if (s->lease[i] == c->slot + 1)
			lease_free(s, c, i * HP_LEASE_FRAMES);
	GFA_BUG_ON(s->lease && c->leased); /* the table names every lease it holds */
	s->st.v[HP_ST_GONE_FRAMES] += before;
	if (before) {
		gfa_host_return_kick(s->cfg.hr); /* what is beyond the reserve goes now */
		zero_later(s);
	}
	/* its leases first: a record without leases is harmless, the reverse is not */
	if (c->rec)
		__atomic_store_n(&c->rec->serial, 0, __ATOMIC_RELEASE);
	client_free(s, c);
}

/*
 * ---- a restart with a state (gfad --state) ----
 * The pool starts with every frame held by HPS_RESTORE_OWNER.  A recorded client
 * whose process lives (the pid, started when it was recorded) is restored without a
 * connection (its pidfd watched) and gets its leases and claims back; every other
 * block is freed, dirty when the table was there (an old lease's data may be in it).
 */
static int restore_clients(struct hps *s)
{
	struct hps_state *st = s->cfg.state;

	s->next_serial = st->next_serial ? st->next_serial : 1;
	for (unsigned int i = 0; i < HPS_MAX_CLIENTS; i++) {
		struct hps_state_client *rec = &st->client[i];
		int pidfd = rec->serial ? hps_pid_open(rec->pid, rec->start_time) : -ESRCH;
		struct hps_client *c;

		/* only a process known gone gives its memory up: a doubt keeps the service down */
		if (pidfd < 0 && pidfd != -ESRCH) {
			fprintf(stderr, "gfad: cannot tell whether client pid %d lives: %s\n",
				(int)rec->pid, strerror(-pidfd));
			return pidfd;
		}
		if (pidfd < 0 || rec->serial >= s->next_serial) {
			if (pidfd >= 0)
				close(pidfd);
			memset(rec, 0, sizeof(*rec));
			continue;
		}
		/* two live records of one id: the table is not one this service wrote */
		for (unsigned int j = 0; j < i; j++)
			if (s->slot[j] && s->slot[j]->serial == rec->serial) {
				fprintf(stderr,
					"gfad: clients pid %d and %d have one id (%lu): the "
					"table is damaged\n",
					(int)s->slot[j]->pid, (int)rec->pid,
					(unsigned long)rec->serial);
				close(pidfd);
				return -EUCLEAN;
			}
		c = client_at(s, i, rec->serial, rec->pid, rec->uid);
		if (!c) {
			close(pidfd);
			return -ENOMEM;
		}
		c->pidfd = pidfd;
		s->awaited++;
		s->st.v[HP_ST_RESTORED]++;
	}
	return 0;
}

/* One order-9 block at pfn of a restored pool: its client's again, or free. */
static int restore_block(struct hps *s, uint64_t pfn)
{
	uint32_t v = s->lease[pfn / HP_LEASE_FRAMES];
	struct hps_client *c = v && v <= HPS_MAX_CLIENTS ? s->slot[v - 1] : NULL;
	struct gfa_frame_info fi;
	int err = gfa_frame_lookup(s->cfg.pool, pfn, &fi);

	if (err) {
		s->lease[pfn / HP_LEASE_FRAMES] = 0; /* between zones: no block */
		return 0;
	}
	/* the held MAX_ORDER block it is in, in leases first */
	if (fi.order > HP_LEASE_ORDER && fi.head_pfn == pfn)
		err = gfa_block_split(s->cfg.pool, pfn, fi.order, HPS_RESTORE_OWNER,
				      HP_LEASE_ORDER);
	if (!err && c) {
		err = pool_block_reown(s->cfg.pool, pfn, HP_LEASE_ORDER, HPS_RESTORE_OWNER,
				       client_owner(c));
		c->leased += HP_LEASE_FRAMES;
		s->st.v[HP_ST_LEASED] += HP_LEASE_FRAMES;
		return err;
	}
	s->lease[pfn / HP_LEASE_FRAMES] = 0;
	if (!err && s->cfg.state_found)
		gfa_backing_mark_dirty(s->cfg.b, pfn, HP_LEASE_ORDER);
	/* dirty to the tail, as a give-back (zero_later) */
	if (!err)
		err = (s->cfg.state_found ? pool_free_cold : gfa_free)(
			s->cfg.pool, pfn, HP_LEASE_ORDER, HPS_RESTORE_OWNER);
	return err;
}

static int state_restore(struct hps *s)
{
	int err = restore_clients(s);

	for (uint64_t b = 0; !err && b < s->nr_blocks; b++)
		err = restore_block(s, b * HP_LEASE_FRAMES);
	for (unsigned int i = 0; !err && i < HPS_MAX_CLIENTS; i++) {
		struct hps_client *c = s->slot[i];

		for (unsigned int z = 0; c && z < s->nr_zones; z++) {
			if (!c->rec->claim_left[z])
				continue;
			/* what the old service kept for it is free now: the claim fits */
			int e = gfa_zone_claim(s->cfg.pool, z, client_owner(c),
					       c->rec->claim_left[z]);

			if (!e)
				c->claimed |= 1ull << z;
			else
				fprintf(stderr,
					"gfad: client pid %d: its claim of %lu frames on zone %u "
					"is not made again: %s\n",
					(int)c->pid, (unsigned long)c->rec->claim_left[z], z,
					gfa_strerror(e));
		}
		if (c)
			client_save_claims(s, c);
	}
	if (!err && s->cfg.state_found)
		zero_later(s); /* the old service's free blocks, dirty */
	return err;
}

uint64_t hps_client_leased(const struct hps_client *c)
{
	return c->leased;
}

void hps_stat(struct hps *s, struct hps_stat *st)
{
	uint64_t free_frames = 0;

	for (unsigned int z = 0; z < s->nr_zones; z++) {
		struct gfa_zone_stat zs;

		/* a release to the host in flight holds free frames, not leased ones */
		if (!gfa_zone_stat(s->cfg.pool, z, &zs))
			free_frames += zs.nr_free + zs.nr_inflight;
	}
	s->st.v[HP_ST_FREE] = free_frames;
	s->st.v[HP_ST_CLAIMED] = 0;
	for (unsigned int z = 0; z < s->nr_zones; z++)
		s->st.v[HP_ST_CLAIMED] += gfa_zone_claimed(s->cfg.pool, z);
	s->st.v[HP_ST_DIRTY] = gfa_backing_nr_dirty(s->cfg.b);
	*st = s->st;
}

/* HELLO's reply: the zones, their memfds, c's id. */
static void hello_reply(struct hps *s, struct hps_client *c, struct hp_msg *r, int *fds,
			unsigned int *nr_fds)
{
	r->count = 3 * s->nr_zones;
	for (unsigned int z = 0; z < s->nr_zones; z++) {
		uint64_t start, n;

		gfa_zone_span(s->cfg.pool, z, &start, &n);
		r->pfn[3 * z] = start;
		r->pfn[3 * z + 1] = n;
		r->pfn[3 * z + 2] = (uint64_t)(int64_t)gfa_zone_node(s->cfg.pool, z);
		fds[z] = gfa_backing_zone_fd(s->cfg.b, z);
	}
	*nr_fds = s->nr_zones;
	r->arg[0] = c->serial;
	r->arg[1] = HP_HELLO_LEASES | (s->cfg.state ? HP_HELLO_REJOIN : 0);
}

static int handle_hello(struct hps *s, struct hps_client *c, const struct hp_msg *m,
			struct hp_msg *r, int *fds, unsigned int *nr_fds)
{
	if (c->hello || m->count || m->zone)
		return -EPROTO;
	c->hello = true;
	hello_reply(s, c, r, fds, nr_fds);
	return 0;
}

/* A refused request: counted, its errno in the reply, nothing changed. */
static int refuse(struct hps *s, struct hp_msg *r, int err)
{
	s->st.v[HP_ST_REFUSED]++;
	r->result = err;
	return 0;
}

/*
 * The connection c takes over o, the restored client it rejoins: c moves into o's slot,
 * whose record and lease table entries stay as they are, and c's own record (it never
 * leased or claimed) is cleared.  So a kill at any point leaves one record holding them.
 */
static void client_rejoin(struct hps *s, struct hps_client *c, struct hps_client *o)
{
	struct hps_state_client *own = c->rec;
	unsigned int slot = o->slot;

	GFA_BUG_ON(c->leased || c->claimed || c->hello);
	s->slot[c->slot] = NULL;
	c->slot = slot;
	c->serial = o->serial;
	c->leased = o->leased;
	c->claimed = o->claimed;
	c->rec = o->rec;
	c->hello = true;
	client_free(s, o); /* one client in two structures: now in one */
	s->slot[slot] = c;
	__atomic_store_n(&own->serial, 0, __ATOMIC_RELEASE);
}

/*
 * A restarted service's client back: the one restored with that id, of the same
 * process (pid, uid, and the start time its record has: a pid reused since the
 * restore, by the same uid, is not it).  Then as a HELLO.
 */
static int handle_rejoin(struct hps *s, struct hps_client *c, const struct hp_msg *m,
			 struct hp_msg *r, int *fds, unsigned int *nr_fds)
{
	struct hps_client *o = NULL;

	if (c->hello || m->count || m->zone || m->arg[1])
		return -EPROTO;
	for (unsigned int i = 0; !o && c->rec && i < HPS_MAX_CLIENTS; i++)
		if (s->slot[i] && s->slot[i]->pidfd >= 0 && s->slot[i]->serial == m->arg[0])
			o = s->slot[i];
	if (!o || o->pid != c->pid || o->uid != c->uid ||
	    o->rec->start_time != c->rec->start_time) {
		s->st.v[HP_ST_REFUSED]++;
		r->result = GFA_ENOTFOUND;
		return 0;
	}
	client_rejoin(s, c, o);
	s->st.v[HP_ST_REJOINED]++;
	hello_reply(s, c, r, fds, nr_fds);
	r->arg[2] = c->leased;
	return 0;
}

/*
 * c's leases from block arg[0] on, a message's worth: after a rejoin the client gives
 * back what it never saw (a reply lost to a kill, the rest of a return cut short).
 */
static int handle_leases(struct hps *s, struct hps_client *c, const struct hp_msg *m,
			 struct hp_msg *r)
{
	uint64_t b = m->arg[0];

	if (m->count || m->zone || m->arg[1])
		return refuse(s, r, GFA_EINVAL);
	for (; b < s->nr_blocks && r->count < HP_MAX_PFNS; b++)
		if (s->lease[b] == c->slot + 1)
			r->pfn[r->count++] = b * HP_LEASE_FRAMES;
	r->arg[0] = b;
	r->arg[1] = b >= s->nr_blocks;
	return 0;
}

/*
 * c is short: every other client that holds leases and has a shrinker is asked to
 * compact and give back what that frees (its libgfa does it on a thread of its own; the
 * service never moves a client's memory).  The number asked.
 */
static uint64_t shrink_others(struct hps *s, const struct hps_client *c)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < HPS_MAX_CLIENTS; i++) {
		struct hps_client *o = s->slot[i];

		if (o && o != c && o->shrink_fd >= 0 && o->leased &&
		    !eventfd_write(o->shrink_fd, 1))
			n++;
	}
	s->shrink_asks += n;
	return n;
}

/* c's shrinker with a lease reply: an eventfd the service keeps and signals. */
static int lease_shrinker(struct hps *s, struct hps_client *c, struct hp_msg *r, int *fds,
			  unsigned int *nr_fds)
{
	if (c->shrink_fd < 0)
		c->shrink_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->shrink_fd < 0)
		return refuse(s, r, -errno);
	fds[0] = c->shrink_fd;
	*nr_fds = 1;
	return 0;
}

static int handle_lease(struct hps *s, struct hps_client *c, const struct hp_msg *m,
			struct hp_msg *r, int *fds, unsigned int *nr_fds)
{
	if (m->zone >= s->nr_zones || !m->arg[0] || m->arg[0] > HP_MAX_PFNS || m->count ||
	    m->arg[1] & ~HP_LEASE_SHRINKER)
		return refuse(s, r, GFA_EINVAL);
	if (m->arg[1] & HP_LEASE_SHRINKER && lease_shrinker(s, c, r, fds, nr_fds))
		return 0;
	s->st.v[HP_ST_LEASE_MSGS]++;
	while (r->count < m->arg[0]) {
		int64_t pfn = gfa_alloc(s->cfg.pool, m->zone, HP_LEASE_ORDER, GFA_MT_MOVABLE,
					client_owner(c), GFA_ALLOC_NOCOMPACT);

		if (pfn < 0)
			break;
		/* a block the buddy just gave out is nobody's lease, and a whole one */
		GFA_BUG_ON((uint64_t)pfn % HP_LEASE_FRAMES ||
			   s->lease[(uint64_t)pfn / HP_LEASE_FRAMES]);
		s->lease[(uint64_t)pfn / HP_LEASE_FRAMES] = c->slot + 1;
		/* a block at a time: a kill leaves the claim at most a block too large */
		client_save_claim(s, c, m->zone);
		c->leased += HP_LEASE_FRAMES;
		s->st.v[HP_ST_LEASED] += HP_LEASE_FRAMES;
		/*
		 * Zeroed here, not by the client: the service's mapping is populated, the
		 * client's is fresh, and there each page would fault before its zeroing
		 * (128 MiB: 5-12 ms here against 360 ms in a client; decisions 31)
		 */
		if (gfa_backing_block_dirty(s->cfg.b, (uint64_t)pfn, HP_LEASE_ORDER)) {
			int64_t zeroed =
				gfa_backing_prepare(s->cfg.b, (uint64_t)pfn, HP_LEASE_ORDER);

			GFA_BUG_ON(zeroed < 0); /* a block of the service's own pool */
			s->lease_zeroed += (uint64_t)zeroed;
		}
		r->pfn[r->count++] = (uint64_t)pfn;
	}
	if (r->count < m->arg[0])
		r->arg[1] = shrink_others(s, c);
	r->result = r->count ? 0 : GFA_ENOMEM;
	return 0;
}

/*
 * Claims are the service pool's own (gfa_zone_claim), one owner per client: its leases
 * draw from its claim, other clients' leases cannot eat into it.
 */
static int handle_claim(struct hps *s, struct hps_client *c, const struct hp_msg *m,
			struct hp_msg *r)
{
	int err;

	if (m->zone >= s->nr_zones || !m->arg[0] || m->count || m->arg[1])
		return refuse(s, r, GFA_EINVAL);
	err = gfa_zone_claim(s->cfg.pool, m->zone, client_owner(c), m->arg[0]);
	if (err)
		return refuse(s, r, err);
	c->claimed |= 1ull << m->zone;
	client_save_claims(s, c);
	return 0;
}

static int handle_unclaim(struct hps *s, struct hps_client *c, const struct hp_msg *m,
			  struct hp_msg *r)
{
	int64_t left;

	if (m->zone >= s->nr_zones || m->count || m->arg[0])
		return refuse(s, r, GFA_EINVAL);
	left = gfa_zone_unclaim(s->cfg.pool, m->zone, client_owner(c));
	if (left < 0)
		return refuse(s, r, (int)left);
	c->claimed &= ~(1ull << m->zone);
	client_save_claims(s, c);
	r->arg[0] = (uint64_t)left;
	return 0;
}

/* Is pfn a block c holds, named once among the first i of m? */
static int return_check(struct hps *s, struct hps_client *c, const struct hp_msg *m, uint32_t i)
{
	uint64_t pfn = m->pfn[i];

	if (pfn % HP_LEASE_FRAMES || pfn >= s->nr_pfns)
		return GFA_EINVAL;
	if (s->lease[pfn / HP_LEASE_FRAMES] != c->slot + 1)
		return GFA_EOWNER;
	for (uint32_t j = 0; j < i; j++)
		if (m->pfn[j] == pfn)
			return GFA_EOVERLAP;
	return 0;
}

static int handle_return(struct hps *s, struct hps_client *c, const struct hp_msg *m,
			 struct hp_msg *r)
{
	int err = m->count && !m->zone && !m->arg[0] ? 0 : GFA_EINVAL;

	for (uint32_t i = 0; !err && i < m->count; i++)
		err = return_check(s, c, m, i);
	if (err)
		return refuse(s, r, err);
	s->st.v[HP_ST_RETURN_MSGS]++;
	for (uint32_t i = 0; i < m->count; i++)
		lease_free(s, c, m->pfn[i]);
	zero_later(s);
	return 0;
}

/* A header, then a pool formatter's text, in room bytes at s->text + at: the length. */
static size_t text_part(struct hps *s, size_t at, size_t room, const char *head,
			int (*fmt)(struct gfa_pool *pool, char *buf, size_t len))
{
	size_t h = strlen(head);
	int n;

	memcpy(s->text + at, head, h);
	n = fmt(s->cfg.pool, s->text + at + h, room - h);
	if (n < 0)
		n = 0;
	return h + ((size_t)n < room - h ? (size_t)n : room - h - 1);
}

/* The text gfactl stat prints, in a memfd: the pool as /proc prints it, then ours. */
static int stat_text(struct hps *s, int check, const char *why)
{
	size_t len = 0;
	int fd, n;

	len += text_part(s, len, TEXT_MAX / 4, "# buddyinfo\n", gfa_pool_buddyinfo);
	len += text_part(s, len, TEXT_MAX / 2, "\n# pagetypeinfo\n", gfa_pool_pagetypeinfo);
	len += text_part(s, len, TEXT_MAX / 8, "\n# vmstat\n", gfa_pool_vmstat_text);
	n = snprintf(s->text + len, TEXT_MAX - len,
		     "\n# hostpool\nclients %lu leased_frames %lu free_frames %lu "
		     "claimed_frames %lu malformed %lu refused %lu denied %lu lease_zeroed %lu "
		     "restored %lu rejoined %lu awaited %lu shrink_asks %lu\n"
		     "check %s\n",
		     (unsigned long)s->st.v[HP_ST_CLIENTS], (unsigned long)s->st.v[HP_ST_LEASED],
		     (unsigned long)s->st.v[HP_ST_FREE], (unsigned long)s->st.v[HP_ST_CLAIMED],
		     (unsigned long)s->st.v[HP_ST_MALFORMED], (unsigned long)s->st.v[HP_ST_REFUSED],
		     (unsigned long)s->st.v[HP_ST_DENIED], (unsigned long)s->lease_zeroed,
		     (unsigned long)s->st.v[HP_ST_RESTORED], (unsigned long)s->st.v[HP_ST_REJOINED],
		     (unsigned long)s->awaited, (unsigned long)s->shrink_asks,
		     check ? why : "clean");
	len += n > 0 ? (size_t)n : 0;
	if (len > TEXT_MAX)
		len = TEXT_MAX;
	fd = memfd_create("gfad-stat", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, s->text, len) != (ssize_t)len) {
		close(fd);
		return -EIO;
	}
	return fd;
}

static int handle_stat(struct hps *s, struct hps_client *c, const struct hp_msg *m,
		       struct hp_msg *r, int *fds, unsigned int *nr_fds, int *close_fd)
{
	char why[256] = "";
	struct hps_stat st;
	int fd;

	if (m->count || m->zone)
		return -EPROTO;
	r->result = gfa_backing_check(s->cfg.b, why, sizeof(why));
	hps_stat(s, &st);
	st.v[HP_ST_MINE] = c->leased;
	r->count = HP_ST_NR;
	memcpy(r->pfn, st.v, sizeof(st.v));
	fd = stat_text(s, r->result, why);
	if (fd >= 0) {
		fds[0] = fd;
		*nr_fds = 1;
		*close_fd = fd;
	}
	return 0;
}

/*
 * A client's first packet, whole and ours but for the version: a libgfa of another
 * protocol version (every version keeps magic, version, type and seq where they are).
 */
static bool hello_of_another_version(const struct hps_client *c, const struct hp_msg *m, size_t len)
{
	return !c->hello && len == sizeof(*m) && m->magic == HP_MAGIC && m->version != HP_VERSION &&
	       m->type == HP_HELLO;
}

int hps_handle(struct hps *s, struct hps_client *c, const void *msg, size_t len,
	       struct hp_msg *reply, int *fds, unsigned int *nr_fds, int *close_fd)
{
	const struct hp_msg *m = msg;
	int err;

	*nr_fds = 0;
	*close_fd = -1;
	memset(reply, 0, sizeof(*reply));
	if (hello_of_another_version(c, m, len)) {
		/* told in its own version's header, so its parser reads it, then closed */
		s->st.v[HP_ST_REFUSED]++;
		reply->magic = HP_MAGIC;
		reply->version = m->version;
		reply->type = HP_HELLO;
		reply->seq = m->seq;
		reply->result = GFA_EPROTO;
		reply->arg[0] = HP_VERSION;
		return 1;
	}
	/* whole and well formed before anything is read from it */
	if (len != sizeof(*m) || !hp_msg_valid(m) || m->result || m->type == HP_REFUSED ||
	    (!c->hello && m->type != HP_HELLO && m->type != HP_REJOIN)) {
		s->st.v[HP_ST_MALFORMED]++;
		return -EPROTO;
	}
	reply->magic = HP_MAGIC;
	reply->version = HP_VERSION;
	reply->type = m->type;
	reply->seq = m->seq;
	switch (m->type) {
	case HP_HELLO:
		err = handle_hello(s, c, m, reply, fds, nr_fds);
		break;
	case HP_LEASE:
		err = handle_lease(s, c, m, reply, fds, nr_fds);
		break;
	case HP_RETURN:
		err = handle_return(s, c, m, reply);
		break;
	case HP_CLAIM:
		err = handle_claim(s, c, m, reply);
		break;
	case HP_UNCLAIM:
		err = handle_unclaim(s, c, m, reply);
		break;
	case HP_REJOIN:
		err = handle_rejoin(s, c, m, reply, fds, nr_fds);
		break;
	case HP_LEASES:
		err = handle_leases(s, c, m, reply);
		break;

	default:
		err = handle_stat(s, c, m, reply, fds, nr_fds, close_fd);
		break;
	}
	if (err)
		s->st.v[HP_ST_MALFORMED]++;
	return err;
}

/* ---- the socket loop ---- */

int hps_listen(const char *path, mode_t mode)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	mode_t old;
	int fd, err;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	memcpy(a.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	(void)unlink(path);
	/* bound with no access for anyone, then opened to the mode: never wider */
	old = umask(0777);
	err = bind(fd, (struct sockaddr *)&a, sizeof(a)) ? -errno : 0;
	umask(old);
	if (!err)
		err = chmod(path, mode) || listen(fd, 64) ? -errno : 0;
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

static int send_reply(int fd, const struct hp_msg *r, const int *fds, unsigned int nr_fds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * GFA_MAX_ZONES)];
	struct iovec iov = { (void *)r, sizeof(*r) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(cbuf, 0, sizeof(cbuf));
	if (nr_fds) {
		struct cmsghdr *cm;

		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nr_fds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nr_fds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nr_fds);
	}
	/* a client that does not read its replies is dropped, never waited for */
	return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(*r) ? 0 : -1;
}

static void serve_accept(struct hps *s, int lfd)
{
	struct ucred cr;
	socklen_t crlen = sizeof(cr);
	struct hps_client *c;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) || !hps_admit(s, cr.uid, cr.gid)) {
		struct hp_msg r = { .magic = HP_MAGIC,
				    .version = HP_VERSION,
				    .type = HP_REFUSED,
				    .result = GFA_EACCES };

		if (!s->cfg.quiet)
			fprintf(stderr,
				"gfad: refused pid %d uid %u gid %u: not admitted "
				"(--allow-uid, --allow-gid)\n",
				(int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
		(void)send_reply(fd, &r, NULL, 0);
		close(fd);
		return;
	}
	c = hps_client_new(s, cr.pid, cr.uid);
	if (!c) {
		close(fd);
		return;
	}
	c->fd = fd;
}

/* One packet from c: 0 to go on, -1 to drop the connection. */
static int serve_client(struct hps *s, struct hps_client *c)
{
	struct hp_msg m, r;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[GFA_MAX_ZONES], close_fd, ret;
	unsigned int nr_fds;
	ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1; /* EOF: the client is gone, killed or not */
	/* a longer packet than ours, or fds sent to us (the kernel closed them): malformed */
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		n = 0;
	ret = hps_handle(s, c, &m, (size_t)n, &r, fds, &nr_fds, &close_fd);
	if (ret < 0)
		return -1;
	if (send_reply(c->fd, &r, fds, nr_fds))
		ret = 1;
	if (close_fd >= 0)
		close(close_fd);
	return ret ? -1 : 0;
}

int hps_serve(struct hps *s, int lfd, volatile sig_atomic_t *stop)
{
	struct pollfd pfd[HPS_MAX_CLIENTS + 1];
	struct hps_client *who[HPS_MAX_CLIENTS + 1];
	unsigned int wslot[HPS_MAX_CLIENTS + 1];

	while (!*stop) {
		nfds_t n = 1;

		pfd[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (unsigned int i = 0; i < HPS_MAX_CLIENTS; i++) {
			/* a restored client not back yet: its process, to see it end */
			int fd = s->slot[i] && s->slot[i]->fd < 0 ? s->slot[i]->pidfd :
				 s->slot[i]                       ? s->slot[i]->fd :
								    -1;

			if (fd < 0)
				continue;
			who[n] = s->slot[i];
			wslot[n] = i;
			pfd[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
		}
		int ready = poll(pfd, n, 500);

		if (ready < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!ready)
			continue;
		for (nfds_t i = 1; i < n; i++) {
			int fd;

			/* a rejoin earlier in this pass took the restored client it names */
			if (!pfd[i].revents || s->slot[wslot[i]] != who[i])
				continue;
			fd = who[i]->fd;
			if (fd < 0) { /* its process ended before it came back */
				hps_client_gone(s, who[i]);
				continue;
			}
			if (!serve_client(s, who[i]))
				continue;
			hps_client_gone(s, who[i]);
			close(fd);
		}
		if (pfd[0].revents & POLLIN)
			serve_accept(s, lfd);
	}
	return 0;
}
