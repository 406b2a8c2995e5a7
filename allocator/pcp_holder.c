// SPDX-License-Identifier: MIT
/*
 * The slow half of the cache holder protocol (see allocator/pcp.h): thread records,
 * membarrier, taking a cache over, remote holds, and the zone isolation gate that lets
 * cache frees skip the compare-and-swap on the frame state while nobody isolates.
 */
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "allocator/pcp.h"

struct pcp_thread pcp_nobody;
__thread struct pcp_thread *pcp_self __attribute__((tls_model("initial-exec"))) = &pcp_nobody;
bool pcp_holder_fence;

static pthread_mutex_t pcp_threads_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pcp_thread *pcp_threads;
static pthread_key_t pcp_thread_key;
static pthread_once_t pcp_once = PTHREAD_ONCE_INIT;

static long sys_membarrier(int cmd)
{
	return syscall(__NR_membarrier, cmd, 0, 0);
}

/*
 * Exit of a thread that had a record: it is free for the next new thread.  This thread
 * lets go of it too: a key destructor that runs after this one and calls into a cache
 * gets a record of its own (and this destructor again), never this one while a new
 * thread may be using it.  A record left inside a call is never reused.
 */
static void pcp_thread_exit(void *arg)
{
	struct pcp_thread *t = arg;

	if (pcp_self == t)
		pcp_self = &pcp_nobody;
	pthread_mutex_lock(&pcp_threads_lock);
	t->unused = !atomic_load_explicit(&t->in, memory_order_acquire);
	pthread_mutex_unlock(&pcp_threads_lock);
}

/*
 * Register for private expedited membarrier.  If the kernel lacks it (or GFA_PCP_FENCE
 * asks), the holders fence instead: correct, just as slow as a lock.  Called once, from
 * pthread_once before the first pool exists; the mode is fixed for the process.
 */
static void pcp_holder_register(void)
{
	const char *force = getenv("GFA_PCP_FENCE");
	long q = sys_membarrier(MEMBARRIER_CMD_QUERY);

	pcp_holder_fence = (force && *force && strcmp(force, "0")) || q < 0 ||
			   !(q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ||
			   sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) < 0;
}

static pthread_mutex_t pcp_pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gfa_pool *pcp_pools;

void pcp_pool_register(struct gfa_pool *pool)
{
	pthread_mutex_lock(&pcp_pools_lock);
	pool->fork_next = pcp_pools;
	pcp_pools = pool;
	pthread_mutex_unlock(&pcp_pools_lock);
}

void pcp_pool_unregister(struct gfa_pool *pool)
{
	pthread_mutex_lock(&pcp_pools_lock);
	for (struct gfa_pool **pp = &pcp_pools; *pp; pp = &(*pp)->fork_next)
		if (*pp == pool) {
			*pp = pool->fork_next;
			break;
		}
	pthread_mutex_unlock(&pcp_pools_lock);
}

/*
 * fork() with every cache of every pool held remotely (its holder out of any call), every
 * zone locked and the registry locked, in the pool's lock order (isolate_lock, pcp_lock
 * and the caches, zone lock): the child's copy has no call half done (one caught
 * between popping a block and marking it gave the child a torn cache), no zone lock
 * held by a thread it does not have, and no remote tag or holder's wait flag that nobody
 * in the child would ever clear.
 */
static void pcp_fork_prepare(void)
{
	pthread_mutex_lock(&pcp_pools_lock);
	for (struct gfa_pool *p = pcp_pools; p; p = p->fork_next) {
		for (unsigned int i = 0; i < p->nr_zones; i++)
			pthread_mutex_lock(&p->zones[i].isolate_lock);
		pcp_lock_all(p);
		for (unsigned int i = 0; i < p->nr_zones; i++)
			zone_lock(&p->zones[i]);
	}
	pthread_mutex_lock(&pcp_threads_lock);
}

static void pcp_fork_release(bool child)
{
	pthread_mutex_unlock(&pcp_threads_lock);
	for (struct gfa_pool *p = pcp_pools; p; p = p->fork_next) {
		for (unsigned int i = 0; i < p->nr_zones; i++)
			zone_unlock(&p->zones[i]);
		if (child) /* the parent's waiting holders do not exist here */
			for (struct gfa_pcp *c = p->pcps; c; c = c->next)
				atomic_store_explicit(&c->holder_waiting, 0, memory_order_relaxed);
		pcp_unlock_all(p);
		for (unsigned int i = 0; i < p->nr_zones; i++)
			pthread_mutex_unlock(&p->zones[i].isolate_lock);
	}
	pthread_mutex_unlock(&pcp_pools_lock);
}

static void pcp_fork_parent(void)
{
	pcp_fork_release(false);
}

/*
 * The child has one thread: every other record's thread is gone, and none was inside a
 * call (the caches were held across fork), so mark them out of any call and free.
 */
static void pcp_fork_child(void)
{
	for (struct pcp_thread *t = pcp_threads; t; t = t->next) {
		if (t == pcp_self)
			continue;
		atomic_store_explicit(&t->in, NULL, memory_order_relaxed);
		t->unused = true;
	}
	pcp_fork_release(true);
	/*
	 * The child's mm starts unregistered.  The mode stays the parent's (the caches'
	 * holder words carry it); should registering fail here, pcp_barrier() falls back
	 * to the global command, which needs none.
	 */
	if (!pcp_holder_fence)
		sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
}

static void pcp_holder_once(void)
{
	pcp_holder_register();
	pthread_key_create(&pcp_thread_key, pcp_thread_exit);
	pthread_atfork(pcp_fork_prepare, pcp_fork_parent, pcp_fork_child);
}

void pcp_holder_init(void)
{
	pthread_once(&pcp_once, pcp_holder_once);
}

const char *gfa_pcp_sync_mode(void)
{
	pcp_holder_init();
	return pcp_holder_fence ? "fence" : "membarrier";
}

/*
 * Make every running thread's earlier stores visible to our later loads and ours to
 * theirs.  In fence mode the holders fence themselves and a local fence suffices.  The
 * private command cannot fail once registered; should it, the global one (no
 * registration, milliseconds) still gives the guarantee.
 */
static void pcp_barrier(void)
{
	pcp_full_fence();
	if (pcp_holder_fence)
		return;
	if (sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) < 0)
		sys_membarrier(MEMBARRIER_CMD_GLOBAL);
	pcp_full_fence();
}

/* The holder word naming t as holder: tagged in fence mode, so its fast entry fails. */
static uintptr_t pcp_holder_tag(struct pcp_thread *t)
{
	return (uintptr_t)t | (pcp_holder_fence ? PCP_HOLDER_FENCE : 0);
}

/* This thread's record: reuse one whose thread exited, else a new one (never freed). */
static struct pcp_thread *pcp_thread_get(void)
{
	struct pcp_thread *t;

	if (pcp_self != &pcp_nobody)
		return pcp_self;
	pcp_holder_init();
	pthread_mutex_lock(&pcp_threads_lock);
	for (t = pcp_threads; t && !t->unused; t = t->next)
		;
	if (t) {
		t->unused = false;
	} else if ((t = aligned_alloc(64, sizeof(*t)))) {
		memset(t, 0, sizeof(*t));
		t->next = pcp_threads;
		pcp_threads = t;
	}
	pthread_mutex_unlock(&pcp_threads_lock);
	if (!t)
		return NULL;
	/* in is NULL: its last thread left every call before exiting */
	atomic_store_explicit(&t->in, NULL, memory_order_relaxed);
	pthread_setspecific(pcp_thread_key, t);
	pcp_self = t;
	return t;
}

/* Is thread t inside a call on pcp right now?  (after a barrier) */
static bool pcp_thread_inside(struct pcp_thread *t, struct gfa_pcp *pcp)
{
	return atomic_load_explicit(&t->in, memory_order_acquire) == pcp;
}

/*
 * Wait until the holder of pcp is not inside a call on it (after a barrier, with
 * `remote` held: every entry after the barrier backs off, so the holder leaves for good).
 */
static void pcp_wait_owner(struct gfa_pcp *pcp)
{
	struct pcp_thread *t = pcp_holder(pcp);

	if (!t || t == pcp_self)
		return;
	while (pcp_thread_inside(t, pcp))
		sched_yield();
}

static void pcp_remote_take(struct gfa_pcp *pcp)
{
	/*
	 * A holder backed off by a remote holder waits for the remote tag to clear;
	 * without this a taker in a loop (statistics, drains) could take the cache again
	 * before the holder ever sees it free, and starve the vCPU.
	 */
	while (atomic_load_explicit(&pcp->holder_waiting, memory_order_acquire))
		sched_yield();
	for (;;) {
		uintptr_t v = atomic_load_explicit(&pcp->holder_word, memory_order_relaxed);

		if (!(v & PCP_HOLDER_REMOTE) &&
		    atomic_compare_exchange_weak_explicit(
			    &pcp->holder_word, &v, v | PCP_HOLDER_REMOTE, memory_order_acquire,
			    memory_order_relaxed))
			return;
		sched_yield();
	}
}

void pcp_remote_lock(struct gfa_pcp *pcp)
{
	pcp_remote_take(pcp);
	pcp_barrier();
	pcp_wait_owner(pcp);
}

void pcp_remote_unlock(struct gfa_pcp *pcp)
{
	atomic_fetch_and_explicit(&pcp->holder_word, ~PCP_HOLDER_REMOTE, memory_order_release);
}

void pcp_remote_lock_zone(struct gfa_pool *pool, int zone)
{
	struct gfa_pcp *pcp;

	for (pcp = pool->pcps; pcp; pcp = pcp->next)
		if (zone < 0 || pcp->zone->id == (unsigned int)zone)
			pcp_remote_take(pcp);
	pcp_barrier();
	for (pcp = pool->pcps; pcp; pcp = pcp->next)
		if (zone < 0 || pcp->zone->id == (unsigned int)zone)
			pcp_wait_owner(pcp);
}

void pcp_remote_unlock_zone(struct gfa_pool *pool, int zone)
{
	for (struct gfa_pcp *pcp = pool->pcps; pcp; pcp = pcp->next)
		if (zone < 0 || pcp->zone->id == (unsigned int)zone)
			pcp_remote_unlock(pcp);
}

/*
 * Take pcp over for this thread, which is not its holder.  The holder may be between
 * calls (or gone): then the cache changes hands.  If it is inside a call on this very
 * cache, two threads use one cache at once: GFA_ETHREAD, and nothing changes.
 */
static int pcp_take_over(struct gfa_pcp *pcp, struct pcp_thread *me)
{
	struct pcp_thread *t;
	int err = 0;

	pcp_remote_take(pcp);
	pcp_barrier();
	t = pcp_holder(pcp);
	if (t && t != me && pcp_thread_inside(t, pcp))
		err = GFA_ETHREAD;
	else /* still held: the tag stays until the unlock below */
		atomic_store_explicit(&pcp->holder_word, pcp_holder_tag(me) | PCP_HOLDER_REMOTE,
				      memory_order_relaxed);
	pcp_remote_unlock(pcp);
	return err;
}

/* The entry proper, for the holder, after any remote holder has gone: 0 or -EAGAIN. */
static int pcp_try_enter(struct gfa_pcp *pcp, struct pcp_thread *me)
{
	atomic_store_explicit(&me->in, pcp, memory_order_relaxed);
	pcp_full_fence();
	if (atomic_load_explicit(&pcp->holder_word, memory_order_acquire) == pcp_holder_tag(me))
		return 0;
	atomic_store_explicit(&me->in, NULL, memory_order_release);
	return -EAGAIN;
}

int pcp_enter_slow(struct gfa_pcp *pcp)
{
	struct pcp_thread *me;
	int err = 0;

	if (!pcp)
		return GFA_EFAULT;
	me = pcp_thread_get();
	if (!me) {
		err = GFA_ENOMEM;
		goto out;
	}
	for (;;) {
		if (pcp_holder(pcp) != me) {
			err = pcp_take_over(pcp, me);
			if (err)
				break;
		}
		/* ours: wait out a remote holder while new takers wait for us, then enter */
		atomic_store_explicit(&pcp->holder_waiting, 1, memory_order_release);
		while (atomic_load_explicit(&pcp->holder_word, memory_order_acquire) &
		       PCP_HOLDER_REMOTE)
			sched_yield();
		err = pcp_holder(pcp) == me ? pcp_try_enter(pcp, me) : -EAGAIN;
		atomic_store_explicit(&pcp->holder_waiting, 0, memory_order_release);
		if (!err)
			return 0;
	}
out:
	pool_count_err(pcp->pool, err);
	return err;
}

/* ---- the zone isolation gate ---- */

/* Raise (+1) or lower (-1) the gate in every cache of z (pool->pcp_lock held). */
static void pcp_gate_add(struct gfa_zone *z, int v)
{
	atomic_store_explicit(&z->isolating, v > 0, memory_order_relaxed);
	for (struct gfa_pcp *pcp = z->pool->pcps; pcp; pcp = pcp->next)
		if (pcp->zone == z)
			atomic_fetch_add_explicit(&pcp->cas_free, v, memory_order_release);
}

/*
 * Before isolating allocated blocks of zone z: raise the gate, then make sure no cache
 * call that started before it can still be freeing with plain stores.  Calls that start
 * later see the gate and use compare-and-swap, which decides any race with isolation.
 */
void pcp_isolate_begin(struct gfa_zone *z)
{
	struct gfa_pool *pool = z->pool;

	/* raisers queue here, so a second one starts only after the first's grace period */
	pthread_mutex_lock(&z->isolate_lock);
	if (!__atomic_fetch_add(&z->isolate_users, 1, __ATOMIC_RELAXED)) {
		/*
		 * In each cache's own line: the holder reads it with the rest of its state.
		 * Then a remote hold of the zone's caches (one membarrier) waits out calls
		 * that started before it; later ones see the gate.
		 */
		pthread_mutex_lock(&pool->pcp_lock);
		pcp_gate_add(z, 1);
		pcp_remote_lock_zone(pool, (int)z->id);
		pcp_remote_unlock_zone(pool, (int)z->id);
		pthread_mutex_unlock(&pool->pcp_lock);
	}
	pthread_mutex_unlock(&z->isolate_lock);
}

void pcp_isolate_end(struct gfa_zone *z)
{
	pthread_mutex_lock(&z->isolate_lock);
	if (!__atomic_sub_fetch(&z->isolate_users, 1, __ATOMIC_RELAXED)) {
		pthread_mutex_lock(&z->pool->pcp_lock);
		pcp_gate_add(z, -1);
		pthread_mutex_unlock(&z->pool->pcp_lock);
	}
	pthread_mutex_unlock(&z->isolate_lock);
}
