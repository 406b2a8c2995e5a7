// SPDX-License-Identifier: MIT
/*
 * A host pool client: a pool of the service's zones, in pfn space as the service's,
 * that holds only the blocks leased to this process.  At attach every frame of it is
 * taken by one placeholder owner (HOLD); a lease frees its block into the pool, and a
 * block given back is taken by HOLD again first.  So every guest call works on it
 * unchanged, the per-vCPU caches refill from its zones in this process, and a round
 * trip is paid per batch of leases, never per frame.  The frames' pfns are the
 * service's, so a pfn maps the same memfd offset on both sides.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "vmm/backing_internal.h"
#include "vmm/hostpool_proto.h"
#include "vmm/hostpool_shrink.h"
#include "allocator/layers.h"
#include "common/bug.h"

#define HOLD_OWNER (5ull << 56) /* the placeholder owner of frames not leased */

struct gfa_hostpool {
	int fd;
	pthread_mutex_t lock; /* one request at a time; the pool's lease bookkeeping */
	uint32_t seq;
	bool dead;       /* the connection failed: every call is GFA_ECONNRESET */
	bool rejoinable; /* the service keeps its state: after a restart we rejoin */
	char *path;
	uint64_t id; /* the service's name for us (HELLO's arg[0]) */
	uint64_t rejoins;
	struct gfa_pool *pool;
	struct gfa_backing *b;
	unsigned int takers; /* wants not done yet: a trim now would give their frames back */
	uint64_t promised[GFA_MAX_ZONES]; /* their frames, free still or taken already */
	bool trim_deferred; /* a trim asked while there were takers: the last done runs it */
	uint64_t slack_frames;
	uint64_t round_trips;
	struct hp_shrinker shrinker; /* vmm/hostpool_shrink.c */
};

/* Receive one packet (and its fds): its length, or -errno. */
static ssize_t hp_recv_once(int fd, struct hp_msg *m, int *fds, unsigned int *nr_fds, int flags)
{
	char cbuf[CMSG_SPACE(sizeof(int) * GFA_MAX_ZONES)];
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	ssize_t n;

	*nr_fds = 0;
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		unsigned int k;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		k = (unsigned int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (unsigned int i = 0; i < k; i++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (fds && *nr_fds < GFA_MAX_ZONES)
				fds[(*nr_fds)++] = f;
			else
				close(f);
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		return -EPROTO;
	return n;
}

/*
 * hp_recv_once(), waiting.  A peer that closed with our request unread leaves
 * ECONNRESET on the socket, and the kernel reports it before the packets queued ahead
 * of the close (a refusal): look once more for such a packet.
 */
static ssize_t hp_recv(int fd, struct hp_msg *m, int *fds, unsigned int *nr_fds)
{
	ssize_t n = hp_recv_once(fd, m, fds, nr_fds, 0);

	if (n == -ECONNRESET) {
		ssize_t again = hp_recv_once(fd, m, fds, nr_fds, MSG_DONTWAIT);

		n = again > 0 ? again : n;
	}
	return n;
}

static void close_fds(const int *fds, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		close(fds[i]);
}

/*
 * One request and its reply (hp->lock held, or attach's own thread): 0 with *rep
 * checked (its type and seq are the request's, or HP_REFUSED), or -errno.  fds may be
 * NULL: any fd that comes is closed.
 */
static int hp_call_once(struct gfa_hostpool *hp, struct hp_msg *req, struct hp_msg *rep, int *fds,
			unsigned int *nr_fds)
{
	unsigned int nfd = 0;
	ssize_t n;
	int err = 0;

	if (hp->dead)
		return GFA_ECONNRESET;
	req->magic = HP_MAGIC;
	req->version = HP_VERSION;
	req->seq = ++hp->seq;
	hp->round_trips++;
	/* a refusal may already wait in our queue with the peer closed: read it anyway */
	while ((n = send(hp->fd, req, sizeof(*req), MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(*req))
		err = GFA_ECONNRESET;
	n = hp_recv(hp->fd, rep, fds, &nfd);
	if (nr_fds)
		*nr_fds = nfd;
	if (n == 0 || n == -ECONNRESET || n == -EPIPE)
		err = GFA_ECONNRESET;
	else if (n < 0)
		err = (int)n;
	else if ((size_t)n != sizeof(*rep) || !hp_msg_valid(rep))
		err = GFA_EPROTO;
	else if (rep->type == HP_REFUSED)
		err = GFA_EACCES;
	else if (err || rep->type != req->type || rep->seq != req->seq)
		err = err ? err : GFA_EPROTO;
	if (err) {
		hp->dead = true;
		if (fds)
			close_fds(fds, nfd);
		if (nr_fds)
			*nr_fds = 0;
	}
	return err;
}

static int hp_connect(const char *path);

/* Are the zones a HELLO or REJOIN reply describes, and its memfds, the ones we map? */
static bool same_zones(struct gfa_hostpool *hp, const struct hp_msg *r, const int *fds,
		       unsigned int nr_fds)
{
	unsigned int nz = gfa_pool_nr_zones(hp->pool);

	if (r->count != 3 * nz || nr_fds != nz)
		return false;
	for (unsigned int z = 0; z < nz; z++) {
		struct stat a, b;
		uint64_t start, n;

		if (gfa_zone_span(hp->pool, z, &start, &n) || r->pfn[3 * z] != start ||
		    r->pfn[3 * z + 1] != n || fstat(fds[z], &a) ||
		    fstat(gfa_backing_zone_fd(hp->b, z), &b) || a.st_dev != b.st_dev ||
		    a.st_ino != b.st_ino)
			return false;
	}
	return true;
}

static int lease_out(struct gfa_hostpool *hp, const uint64_t *pfn, uint32_t n, bool once);

/* Is the block at pfn not ours here (the placeholder holds it)? */
static bool lease_unseen(struct gfa_hostpool *hp, uint64_t pfn)
{
	struct gfa_frame_info fi;

	return !gfa_frame_lookup(hp->pool, pfn, &fi) && fi.state == GFA_FRAME_ALLOCATED &&
	       fi.owner == HOLD_OWNER;
}

/*
 * After a rejoin: the leases the service has for us that we never saw back to it (a
 * lease reply lost to its kill, the rest of a return it cut short): every block it
 * lists that the placeholder holds here.  0, or -errno.
 */
static int rejoin_unseen(struct gfa_hostpool *hp)
{
	struct hp_msg req, rep;
	uint64_t pfn[HP_MAX_PFNS], unseen = 0;
	uint32_t n = 0;
	int err = 0;

	memset(&rep, 0, sizeof(rep));
	while (!err && !rep.arg[1]) {
		uint64_t from = rep.arg[0];

		memset(&req, 0, sizeof(req));
		req.type = HP_LEASES;
		req.arg[0] = from;
		err = hp_call_once(hp, &req, &rep, NULL, NULL);
		if (!err)
			err = rep.result;
		if (!err && rep.arg[0] <= from && !rep.arg[1])
			err = GFA_EPROTO; /* no way on */
		for (uint32_t i = 0; !err && i < rep.count; i++) {
			if (rep.pfn[i] % HP_LEASE_FRAMES)
				err = GFA_EPROTO;
			else if (lease_unseen(hp, rep.pfn[i]))
				pfn[n++] = rep.pfn[i];
			if (!err && n == HP_MAX_PFNS) {
				err = lease_out(hp, pfn, n, true);
				unseen += n;
				n = 0;
			}
		}
	}
	if (!err && n) {
		err = lease_out(hp, pfn, n, true);
		unseen += n;
	}
	if (!err && unseen)
		fprintf(stderr, "gfa: rejoined %s: gave back %lu MiB of leases we never saw\n",
			hp->path,
			(unsigned long)(unseen * HP_LEASE_FRAMES >> (20 - GFA_FRAME_SHIFT)));
	return err;
}

/* One HP_REJOIN on a new connection: 0, or -errno (GFA_ECONNRESET: try again). */
static int rejoin_once(struct gfa_hostpool *hp)
{
	struct hp_msg req = { .type = HP_REJOIN }, rep = { 0 };
	int fds[GFA_MAX_ZONES], fd = hp_connect(hp->path), err;
	unsigned int nr_fds = 0;

	if (fd < 0)
		return GFA_ECONNRESET; /* not listening yet */
	close(hp->fd);
	hp->fd = fd;
	hp->dead = false;
	req.arg[0] = hp->id;
	err = hp_call_once(hp, &req, &rep, fds, &nr_fds);
	if (!err)
		err = rep.result;
	if (!err && !same_zones(hp, &rep, fds, nr_fds))
		err = GFA_EPROTO; /* another pool under the same socket */
	close_fds(fds, nr_fds);
	if (!err && rep.arg[1] & HP_HELLO_LEASES)
		err = rejoin_unseen(hp);
	/* the old service's eventfd is nobody's now: the next lease asks for the new one */
	hp->shrinker.stale = hp->shrinker.fd >= 0;
	if (err)
		hp->dead = true;
	return err;
}

/*
 * The connection ended: a service that keeps its state may be restarting.  Rejoin
 * within GFA_HOSTPOOL_REJOIN_MS, or never try again (hp->lock held).
 */
static int hp_rejoin(struct gfa_hostpool *hp)
{
	struct timespec t0, t;
	int err;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		err = rejoin_once(hp);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (err != GFA_ECONNRESET ||
		    (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >
			    GFA_HOSTPOOL_REJOIN_MS)
			break;
		usleep(20000);
	}
	if (err) {
		hp->rejoinable = false;
		fprintf(stderr, "gfa: the host pool service at %s did not take us back: %s\n",
			hp->path, gfa_strerror(err));
		return err;
	}
	hp->rejoins++;
	return 0;
}

/*
 * hp_call_once(), and once more after a rejoin when the connection ended.  The request
 * may have been done before the service went: a lease then stays ours in the service
 * unseen until we detach, a return of blocks it freed already is refused (they are held
 * here either way).
 */
static int hp_call(struct gfa_hostpool *hp, struct hp_msg *req, struct hp_msg *rep, int *fds,
		   unsigned int *nr_fds)
{
	int err = hp_call_once(hp, req, rep, fds, nr_fds);

	if (err == GFA_ECONNRESET && hp->rejoinable && !hp_rejoin(hp))
		err = hp_call_once(hp, req, rep, fds, nr_fds);
	return err;
}

/* The pool the HELLO reply describes, every frame held: the service's zones at the same
 * pfns, or NULL with errno. */
static struct gfa_pool *client_pool(const struct hp_msg *r, unsigned int nr_fds)
{
	struct gfa_pool_config pc;
	struct gfa_pool *pool;
	unsigned int nz = r->count / 3;

	gfa_pool_config_init(&pc, 0);
	if (!nz || nz > GFA_MAX_ZONES || r->count % 3 || nr_fds != nz) {
		errno = EPROTO;
		return NULL;
	}
	pc.nr_zones = nz;
	for (unsigned int z = 0; z < nz; z++) {
		pc.zones[z].nr_frames = r->pfn[3 * z + 1];
		pc.zones[z].node = (int)(int64_t)r->pfn[3 * z + 2];
	}
	pool = pool_create_held(&pc, HOLD_OWNER);
	if (!pool)
		return NULL;
	for (unsigned int z = 0; z < nz; z++) {
		uint64_t start, n;

		if (gfa_zone_span(pool, z, &start, &n) || start != r->pfn[3 * z]) {
			gfa_pool_destroy(pool);
			errno = EPROTO;
			return NULL;
		}
	}
	return pool;
}

/*
 * The zone's frames on its buddy lists: what any thread can take.  A vCPU cache's frames
 * count as free in nr_free, but only its own thread allocates from them, so a want that
 * counted another thread's cache would lease too little.
 */
static uint64_t zone_free(struct gfa_pool *pool, unsigned int zone)
{
	struct gfa_zone_stat zs;

	return gfa_zone_stat(pool, zone, &zs) ? 0 : zs.nr_free_buddy;
}

/*
 * Free a leased block into our pool.  The placeholder holds MAX_ORDER blocks (a
 * section's init writes one descriptor for each): one that a lease falls in is split
 * into leases first.  0, or an error of a block the placeholder does not hold (ours
 * already).
 */
static int lease_free(struct gfa_pool *pool, uint64_t pfn)
{
	struct gfa_frame_info fi;
	int err = gfa_frame_lookup(pool, pfn, &fi);

	if (!err && fi.state == GFA_FRAME_ALLOCATED && fi.owner == HOLD_OWNER &&
	    fi.order > HP_LEASE_ORDER)
		err = gfa_block_split(pool, fi.head_pfn, fi.order, HOLD_OWNER, HP_LEASE_ORDER);
	return err ? err : gfa_free(pool, pfn, HP_LEASE_ORDER, HOLD_OWNER);
}

/* The leases of a reply into our pool: 0, or GFA_EPROTO (a block we hold already). */
static int lease_in(struct gfa_hostpool *hp, const struct hp_msg *r)
{
	int err = 0;

	for (uint32_t i = 0; i < r->count; i++) {
		uint64_t pfn = r->pfn[i] & ~HP_PFN_DIRTY;

		/* what the service knows of the block: zeroed at take where dirty */
		if (r->pfn[i] & HP_PFN_DIRTY)
			gfa_backing_mark_dirty(hp->b, pfn, HP_LEASE_ORDER);
		else
			gfa_backing_mark_clean(hp->b, pfn, HP_LEASE_ORDER);
		if (lease_free(hp->pool, pfn))
			err = GFA_EPROTO;
	}
	return err;
}

/*
 * The service was short and asked other clients to shrink: wait a while for what they
 * give back (5 ms, doubling to 40), within GFA_HOSTPOOL_SHRINK_MS of the first short
 * reply.  Each ask again signals them again; a shrinker that is busy takes the asks
 * made meanwhile as one more pass.
 */
static bool shrink_wait(struct timespec *t0, unsigned int *tries)
{
	struct timespec t;
	int64_t ms;

	clock_gettime(CLOCK_MONOTONIC, &t);
	if (!*tries)
		*t0 = t;
	ms = (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
	if (ms >= GFA_HOSTPOOL_SHRINK_MS)
		return false;
	usleep((useconds_t)((5000u << (*tries < 3 ? *tries : 3))));
	++*tries;
	return true;
}

/* Lease blocks until the zone has `frames` free (hp->lock held): 0 or -errno. */
static int lease_more(struct gfa_hostpool *hp, unsigned int zone, uint64_t frames)
{
	struct timespec t0 = { 0 };
	unsigned int tries = 0;
	int err = 0;

	for (uint64_t have = zone_free(hp->pool, zone); !err && have < frames;) {
		uint64_t want = (frames - have + HP_LEASE_FRAMES - 1) / HP_LEASE_FRAMES;
		struct hp_msg req = { .type = HP_LEASE, .zone = zone }, rep = { 0 };
		unsigned int nr_fds = 0;
		int fds[GFA_MAX_ZONES];

		req.arg[0] = want < HP_MAX_PFNS ? want : HP_MAX_PFNS;
		/* our shrinker's eventfd comes with the first lease (no round trip of its own) */
		req.arg[1] = hp_shrinker_wanted(&hp->shrinker) ? HP_LEASE_SHRINKER : 0;
		err = hp_call(hp, &req, &rep, fds, &nr_fds);
		/* without it we only do not give back on others' behalf: the lease stands */
		if (!err && nr_fds == 1)
			(void)hp_shrinker_take(&hp->shrinker, fds[0]);
		else if (!err && nr_fds)
			close_fds(fds, nr_fds);
		/* none at all is GFA_ENOMEM, as short is: what came stays ours either way */
		if (!err && rep.result && rep.result != GFA_ENOMEM)
			err = rep.result;
		if (!err && rep.count > req.arg[0])
			err = GFA_EPROTO; /* more than asked: not a reply to this */
		if (!err)
			err = lease_in(hp, &rep);
		have += (uint64_t)rep.count * HP_LEASE_FRAMES;
		/* the service is short: other clients were asked to give back what they can */
		if (!err && rep.count < req.arg[0] && !(rep.arg[1] && shrink_wait(&t0, &tries)))
			err = GFA_ENOMEM;
	}
	return err;
}

static int lease_want(void *ctx, unsigned int zone, uint64_t frames)
{
	struct gfa_hostpool *hp = ctx;
	int err;

	pthread_mutex_lock(&hp->lock);
	hp->takers++;
	/* (zone was checked by the guest call: it is one of the pool's) */
	err = lease_more(hp, zone, hp->promised[zone] + frames);
	hp->promised[zone] += frames;
	pthread_mutex_unlock(&hp->lock);
	return err;
}

/* Does the zone have a free block of a lease's order or larger? */
static bool zone_has_lease_block(struct gfa_pool *pool, unsigned int zone)
{
	struct gfa_zone_stat zs;

	if (gfa_zone_stat(pool, zone, &zs))
		return false;
	for (unsigned int o = HP_LEASE_ORDER; o < GFA_NR_ORDERS; o++)
		for (unsigned int mt = 0; mt < GFA_MT_TYPES; mt++)
			if (zs.nr_free_blocks[o][mt])
				return true;
	return false;
}

/*
 * A move's target: the client's pool holds only what its guests use, so a collapse
 * would find no order-9 block and compaction no room.  One more lease is the room;
 * the sources it frees go back at the next trim once they merge into whole blocks.
 */
static int lease_want_block(void *ctx, unsigned int zone)
{
	struct gfa_hostpool *hp = ctx;
	int err = 0;

	pthread_mutex_lock(&hp->lock);
	hp->takers++;
	if (!zone_has_lease_block(hp->pool, zone))
		err = lease_more(hp, zone, zone_free(hp->pool, zone) + HP_LEASE_FRAMES);
	pthread_mutex_unlock(&hp->lock);
	return err;
}

/* Give back the blocks of pfn[0..n) (held again already): 0 or -errno; once: no rejoin. */
static int lease_out(struct gfa_hostpool *hp, const uint64_t *pfn, uint32_t n, bool once)
{
	struct hp_msg req = { .type = HP_RETURN, .count = n }, rep = { 0 };
	int err;

	GFA_BUG_ON(!n || n > HP_MAX_PFNS); /* lease_trim sends a batch at most */
	memcpy(req.pfn, pfn, n * sizeof(*pfn));
	err = once ? hp_call_once(hp, &req, &rep, NULL, NULL) : hp_call(hp, &req, &rep, NULL, NULL);
	return err ? err : rep.result;
}

/* Give back what is free beyond the slack (hp->lock held). */
static void lease_trim_locked(struct gfa_hostpool *hp)
{
	uint64_t pfn[HP_MAX_PFNS];

	for (unsigned int z = 0; z < gfa_pool_nr_zones(hp->pool); z++) {
		uint64_t have = zone_free(hp->pool, z);
		uint32_t n = 0;

		while (have >= hp->slack_frames + HP_LEASE_FRAMES) {
			int64_t p = gfa_alloc(hp->pool, z, HP_LEASE_ORDER, GFA_MT_MOVABLE,
					      HOLD_OWNER, GFA_ALLOC_NOCOMPACT);

			if (p < 0)
				break; /* no whole free block: what is free stays */
			GFA_BUG_ON((uint64_t)p % HP_LEASE_FRAMES); /* a whole lease */
			/* held from now on, never split here: its tail descriptors can go */
			(void)zone_held_drop_tails(hp->pool, (uint64_t)p, HP_LEASE_ORDER,
						   HOLD_OWNER);
			pfn[n++] = (uint64_t)p;
			have -= HP_LEASE_FRAMES;
			if (n == HP_MAX_PFNS) {
				(void)lease_out(hp, pfn, n, false);
				n = 0;
			}
		}
		/* a failed return leaves the blocks held: a service gone freed them */
		if (n)
			(void)lease_out(hp, pfn, n, false);
	}
}

static void lease_trim(void *ctx)
{
	struct gfa_hostpool *hp = ctx;

	pthread_mutex_lock(&hp->lock);
	/* frees make the room a shrinker gathers: its thread starts with the first */
	(void)hp_shrinker_arm(&hp->shrinker);
	/* another thread's want leased frames it has not taken yet: they are free now */
	if (hp->takers)
		hp->trim_deferred = true;
	else
		lease_trim_locked(hp);
	pthread_mutex_unlock(&hp->lock);
}

static void lease_done(void *ctx, unsigned int zone, uint64_t frames)
{
	struct gfa_hostpool *hp = ctx;

	pthread_mutex_lock(&hp->lock);
	GFA_BUG_ON(!hp->takers || hp->promised[zone] < frames); /* one done per want */
	hp->promised[zone] -= frames;
	if (!--hp->takers && hp->trim_deferred) {
		hp->trim_deferred = false;
		lease_trim_locked(hp);
	}
	pthread_mutex_unlock(&hp->lock);
}

static const struct backing_lease_ops lease_ops = { lease_want, lease_want_block, lease_done,
						    lease_trim };

static int hp_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(a.sun_path))
		return GFA_EINVAL;
	memcpy(a.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* a signal may cut the wait for the service's backlog: wait again */
	while (connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno != EISCONN) {
		int err = -errno;

		if (err == -EINTR)
			continue;
		close(fd);
		return err;
	}
	return fd;
}

static int hp_hello(struct gfa_hostpool *hp)
{
	static const struct gfa_backing_config bcfg = { .no_zero_on_stop = true };
	struct hp_msg req = { .type = HP_HELLO }, rep = { 0 };
	int fds[GFA_MAX_ZONES];
	unsigned int nr_fds = 0;
	int err = hp_call(hp, &req, &rep, fds, &nr_fds);

	if (err == GFA_ECONNRESET)
		fprintf(stderr,
			"gfa: the host pool service closed the connection at hello (its "
			"client table may be full, or it is a gfad of protocol version 1, "
			"which closes on any other version without a word; this libgfa "
			"speaks version %u)\n",
			HP_VERSION);
	if (err)
		return err;
	if (rep.result == GFA_EPROTO) {
		fprintf(stderr,
			"gfa: the host pool service speaks protocol version %lu, this libgfa %u\n",
			(unsigned long)rep.arg[0], HP_VERSION);
		close_fds(fds, nr_fds);
		return GFA_EPROTO;
	}
	hp->pool = client_pool(&rep, nr_fds);
	if (!hp->pool) {
		err = -errno;
		close_fds(fds, nr_fds);
		return err;
	}
	/* the service's zeroing: a stopped guest's frames go back dirty, not zeroed here */
	hp->shrinker.pool = hp->pool;
	hp->b = backing_adopt(hp->pool, &bcfg, fds);
	if (!hp->b)
		return -errno;
	backing_set_lease(hp->b, &lease_ops, hp);
	hp->id = rep.arg[0];
	hp->rejoinable = rep.arg[1] & HP_HELLO_REJOIN;
	return 0;
}

struct gfa_hostpool *gfa_hostpool_attach(const char *path, const struct gfa_hostpool_config *cfg)
{
	static const struct gfa_hostpool_config defaults;
	struct gfa_hostpool *hp;
	int err;

	if (!path) {
		errno = EFAULT;
		return NULL;
	}
	if (!cfg)
		cfg = &defaults;
	if (!GFA_RESERVED_ZERO(cfg)) {
		errno = EINVAL;
		return NULL;
	}
	hp = calloc(1, sizeof(*hp));
	if (!hp)
		return NULL;
	pthread_mutex_init(&hp->lock, NULL);
	hp_shrinker_init(&hp->shrinker, NULL, lease_trim, hp);
	hp->slack_frames = cfg->slack_bytes >> GFA_FRAME_SHIFT;
	hp->path = strdup(path);
	hp->fd = hp->path ? hp_connect(path) : GFA_ENOMEM;
	err = hp->fd < 0 ? hp->fd : hp_hello(hp);
	if (err) {
		gfa_hostpool_detach(hp);
		errno = -err;
		return NULL;
	}
	return hp;
}

void gfa_hostpool_detach(struct gfa_hostpool *hp)
{
	if (!hp)
		return;
	hp_shrinker_stop(&hp->shrinker); /* before the pool it compacts goes */
	if (hp->fd >= 0)
		close(hp->fd); /* the service frees our leases */
	gfa_backing_destroy(hp->b);
	gfa_pool_destroy(hp->pool);
	pthread_mutex_destroy(&hp->lock);
	free(hp->path);
	free(hp);
}

struct gfa_pool *gfa_hostpool_pool(const struct gfa_hostpool *hp)
{
	return hp ? hp->pool : NULL;
}

struct gfa_backing *gfa_hostpool_backing(const struct gfa_hostpool *hp)
{
	return hp ? hp->b : NULL;
}

/* The text in the memfd fd into text (NUL-terminated): its length. */
/* One claim request (HP_CLAIM or HP_UNCLAIM): the service's result, *left its arg[0]. */
static int claim_call(struct gfa_hostpool *hp, uint16_t type, unsigned int zone, uint64_t frames,
		      uint64_t *left)
{
	struct hp_msg req = { .type = type, .zone = zone }, rep = { 0 };
	int err;

	if (zone >= gfa_pool_nr_zones(hp->pool))
		return pool_count_error(hp->pool, GFA_ERANGE);
	req.arg[0] = frames;
	pthread_mutex_lock(&hp->lock);
	err = hp_call(hp, &req, &rep, NULL, NULL);
	pthread_mutex_unlock(&hp->lock);
	if (!err)
		err = rep.result;
	if (!err)
		*left = rep.arg[0];
	return err;
}

int gfa_hostpool_claim(struct gfa_hostpool *hp, unsigned int zone, uint64_t nr_frames)
{
	uint64_t left;

	if (!hp)
		return GFA_EFAULT;
	if (!nr_frames)
		return pool_count_error(hp->pool, GFA_EINVAL);
	return claim_call(hp, HP_CLAIM, zone, nr_frames, &left);
}

int64_t gfa_hostpool_unclaim(struct gfa_hostpool *hp, unsigned int zone)
{
	uint64_t left = 0;
	int err;

	if (!hp)
		return GFA_EFAULT;
	err = claim_call(hp, HP_UNCLAIM, zone, 0, &left);
	return err ? err : (int64_t)left;
}

static int read_text(int fd, char *text, size_t len)
{
	off_t size = lseek(fd, 0, SEEK_END);
	ssize_t n = 0;

	if (size < 0 || size > (1 << 24))
		return GFA_EPROTO;
	if (text && len) {
		size_t want = (size_t)size < len - 1 ? (size_t)size : len - 1;

		n = pread(fd, text, want, 0);
		text[n > 0 ? n : 0] = '\0';
	}
	return (int)size;
}

int gfa_hostpool_stat(struct gfa_hostpool *hp, struct gfa_hostpool_stat *st, char *text, size_t len)
{
	struct hp_msg req = { .type = HP_STAT }, rep = { 0 };
	int fds[GFA_MAX_ZONES];
	unsigned int nr_fds = 0;
	int err;

	if (!hp || !st)
		return GFA_EFAULT;
	pthread_mutex_lock(&hp->lock);
	err = hp_call(hp, &req, &rep, fds, &nr_fds);
	if (!err && (rep.count != HP_ST_NR || nr_fds != 1))
		err = GFA_EPROTO;
	memset(st, 0, sizeof(*st));
	if (!err) {
		st->nr_frames = rep.pfn[HP_ST_FRAMES];
		st->free_frames = rep.pfn[HP_ST_FREE];
		st->leased_frames = rep.pfn[HP_ST_LEASED];
		st->mine_frames = rep.pfn[HP_ST_MINE];
		st->clients = rep.pfn[HP_ST_CLIENTS];
		st->clients_total = rep.pfn[HP_ST_CLIENTS_TOTAL];
		st->malformed = rep.pfn[HP_ST_MALFORMED];
		st->refused = rep.pfn[HP_ST_REFUSED];
		st->denied = rep.pfn[HP_ST_DENIED];
		st->gone_frames = rep.pfn[HP_ST_GONE_FRAMES];
		st->dirty_frames = rep.pfn[HP_ST_DIRTY];
		st->claimed_frames = rep.pfn[HP_ST_CLAIMED];
		st->check = rep.result;
		err = read_text(fds[0], text, len);
	}
	st->round_trips = hp->round_trips;
	st->rejoins = hp->rejoins;
	close_fds(fds, nr_fds);
	pthread_mutex_unlock(&hp->lock);
	return err;
}
