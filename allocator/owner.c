// SPDX-License-Identifier: MIT
/*
 * Owners of movable blocks and their migrate ops: a small open-addressing table
 * (owner cookie -> ops, context), read by the compaction scanners under a rwlock.
 * Calls into an owner's ops hold a reference (owner_get/owner_put), and unregistering
 * waits for the references, so an owner may free its context once it is unregistered.
 */
#include <stdlib.h>
#include "allocator/internal.h"

static const struct gfa_owner_ops owner_tombstone;

/* added to a slot's users while its unregister waits: the slot is not reused meanwhile */
#define OWNER_DYING (1U << 30)

int owner_registry_init(struct gfa_pool *pool)
{
	pool->owners = meta_zalloc(GFA_OWNER_SLOTS * sizeof(*pool->owners));
	if (!pool->owners)
		return -ENOMEM;
	pthread_rwlock_init(&pool->owner_lock, NULL);
	pthread_mutex_init(&pool->owner_wait_lock, NULL);
	pthread_cond_init(&pool->owner_wait, NULL);
	return 0;
}

void owner_registry_destroy(struct gfa_pool *pool)
{
	if (!pool->owners)
		return;
	pthread_rwlock_destroy(&pool->owner_lock);
	pthread_mutex_destroy(&pool->owner_wait_lock);
	pthread_cond_destroy(&pool->owner_wait);
	meta_free(pool->owners, GFA_OWNER_SLOTS * sizeof(*pool->owners));
}

static unsigned int owner_hash(uint64_t owner)
{
	return (unsigned int)((owner * 0x9e3779b97f4a7c15ULL) >> 48) & (GFA_OWNER_SLOTS - 1);
}

/* Slot of owner, or of the first free slot on its probe path when insert is set. */
static struct gfa_owner_slot *owner_slot(struct gfa_pool *pool, uint64_t owner, bool insert)
{
	struct gfa_owner_slot *tomb = NULL;

	for (unsigned int i = 0, h = owner_hash(owner); i < GFA_OWNER_SLOTS;
	     i++, h = (h + 1) & (GFA_OWNER_SLOTS - 1)) {
		struct gfa_owner_slot *s = &pool->owners[h];

		if (!s->ops)
			return insert ? (tomb ? tomb : s) : NULL;
		if (s->ops == &owner_tombstone) {
			/* a slot still referenced is not free yet (its unregister waits) */
			if (!tomb && !__atomic_load_n(&s->users, __ATOMIC_ACQUIRE))
				tomb = s;
			continue;
		}
		if (s->owner == owner)
			return s;
	}
	return insert ? tomb : NULL;
}

/* this thread's references (owner_get), innermost first */
static __thread struct owner_ref *owner_refs;

static unsigned int owner_refs_held(const struct gfa_owner_slot *s)
{
	unsigned int n = 0;

	for (const struct owner_ref *r = owner_refs; r; r = r->prev)
		n += r->slot == s;
	return n;
}

/*
 * Unregistering: wait until the calls into the owner's ops that started have returned
 * (but not for this thread's own: an op may unregister its owner), then turn the
 * tombstone and those before it back into empty slots where the probe path ends
 * there, so lookups do not walk ever longer chains.  Owner lock not held.
 */
static void owner_unregister_wait(struct gfa_pool *pool, struct gfa_owner_slot *s)
{
	unsigned int mine = owner_refs_held(s);
	unsigned int h = (unsigned int)(s - pool->owners);

	pthread_mutex_lock(&pool->owner_wait_lock);
	while (__atomic_load_n(&s->users, __ATOMIC_ACQUIRE) > OWNER_DYING + mine)
		pthread_cond_wait(&pool->owner_wait, &pool->owner_wait_lock);
	pthread_mutex_unlock(&pool->owner_wait_lock);
	pthread_rwlock_wrlock(&pool->owner_lock);
	/* still this unregister's tombstone: a slot marked dying is never reused */
	GFA_BUG_ON(s->ops != &owner_tombstone ||
		   __atomic_load_n(&s->users, __ATOMIC_ACQUIRE) < OWNER_DYING);
	__atomic_sub_fetch(&s->users, OWNER_DYING, __ATOMIC_ACQ_REL);
	while (!pool->owners[(h + 1) & (GFA_OWNER_SLOTS - 1)].ops &&
	       pool->owners[h].ops == &owner_tombstone &&
	       !__atomic_load_n(&pool->owners[h].users, __ATOMIC_ACQUIRE)) {
		pool->owners[h].ops = NULL;
		h = (h - 1) & (GFA_OWNER_SLOTS - 1);
	}
	pthread_rwlock_unlock(&pool->owner_lock);
}

int gfa_owner_register(struct gfa_pool *pool, uint64_t owner, const struct gfa_owner_ops *ops,
		       void *ctx)
{
	struct gfa_owner_slot *s;
	int ret = 0;

	if (!pool || (ops && !ops->migrate)) {
		pool_count_err(pool, GFA_EFAULT);
		return GFA_EFAULT;
	}
	if (ops && !ops->batch_begin != !ops->batch_end)
		return pool_err(pool, GFA_EINVAL); /* a batch begun would never end */
	pthread_rwlock_wrlock(&pool->owner_lock);
	s = owner_slot(pool, owner, false);
	if (ops && s) {
		ret = -EEXIST;
	} else if (ops) {
		s = pool->nr_owners < GFA_OWNER_SLOTS / 2 ? owner_slot(pool, owner, true) : NULL;
		if (!s) {
			ret = -ENOSPC;
		} else {
			GFA_BUG_ON(s->ops && s->ops != &owner_tombstone); /* a free slot */
			s->owner = owner;
			s->ops = ops;
			s->ctx = ctx;
			pool->nr_owners++;
		}
	} else if (!s) {
		ret = -ENOENT;
	} else {
		GFA_BUG_ON(!pool->nr_owners);
		s->ops = &owner_tombstone;
		__atomic_add_fetch(&s->users, OWNER_DYING, __ATOMIC_ACQ_REL);
		pool->nr_owners--;
	}
	pthread_rwlock_unlock(&pool->owner_lock);
	if (!ret && !ops)
		owner_unregister_wait(pool, s);
	return ret;
}

bool owner_get(struct gfa_pool *pool, uint64_t owner, struct owner_ref *r)
{
	struct gfa_owner_slot *s;

	pthread_rwlock_rdlock(&pool->owner_lock);
	s = pool->nr_owners ? owner_slot(pool, owner, false) : NULL;
	if (s) {
		/* a live slot of this owner: the lookup passes tombstones by */
		GFA_BUG_ON(s->ops == &owner_tombstone || s->owner != owner);
		__atomic_add_fetch(&s->users, 1, __ATOMIC_ACQ_REL);
		*r = (struct owner_ref){ s, s->ops, s->ctx, owner_refs };
		owner_refs = r;
	}
	pthread_rwlock_unlock(&pool->owner_lock);
	return s != NULL;
}

void owner_put(struct gfa_pool *pool, struct owner_ref *r)
{
	unsigned int had;

	GFA_BUG_ON(owner_refs != r); /* put in the reverse order of their gets */
	owner_refs = r->prev;
	had = __atomic_fetch_sub(&r->slot->users, 1, __ATOMIC_ACQ_REL);
	GFA_BUG_ON(!(had & (OWNER_DYING - 1))); /* this reference was counted */
	/* every put: a waiter may wait for its own references only (not for zero) */
	pthread_mutex_lock(&pool->owner_wait_lock);
	pthread_cond_broadcast(&pool->owner_wait);
	pthread_mutex_unlock(&pool->owner_wait_lock);
}

bool owner_ref_live(struct gfa_pool *pool, const struct owner_ref *r)
{
	bool live;

	/* the slot itself stays (a referenced tombstone is never reused) */
	pthread_rwlock_rdlock(&pool->owner_lock);
	live = r->slot->ops == r->ops;
	pthread_rwlock_unlock(&pool->owner_lock);
	return live;
}

int owner_migrate(struct gfa_pool *pool, const struct gfa_owner_ops *ops, void *ctx, uint64_t owner,
		  uint64_t src, uint64_t dst, unsigned int order)
{
	int err = ops->migrate(ctx, owner, src, dst, order);
	gfa_moved_fn fn = __atomic_load_n(&pool->moved_fn, __ATOMIC_ACQUIRE);

	/*
	 * Moved: the source still holds a copy of the owner's data.  Refused or failed:
	 * the target may (an owner copies before it remaps, and the remap can fail).
	 * Either goes back to the free lists; the backing marks it dirty.
	 */
	if (fn)
		fn(__atomic_load_n(&pool->moved_ctx, __ATOMIC_RELAXED), err ? dst : src, order);
	return err;
}

int pool_set_moved_fn(struct gfa_pool *pool, gfa_moved_fn fn, void *ctx)
{
	if (!pool)
		return GFA_EFAULT;
	if (!fn) {
		__atomic_store_n(&pool->moved_fn, NULL, __ATOMIC_RELEASE);
		return 0;
	}
	pthread_mutex_lock(&pool->owner_wait_lock); /* one setter at a time */
	if (__atomic_load_n(&pool->moved_fn, __ATOMIC_ACQUIRE)) {
		pthread_mutex_unlock(&pool->owner_wait_lock);
		return pool_err(pool, GFA_EBUSY);
	}
	__atomic_store_n(&pool->moved_ctx, ctx, __ATOMIC_RELAXED);
	__atomic_store_n(&pool->moved_fn, fn, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pool->owner_wait_lock);
	return 0;
}

int pool_set_released_fn(struct gfa_pool *pool, gfa_released_fn fn, void *ctx)
{
	if (!pool)
		return GFA_EFAULT;
	if (!fn) {
		__atomic_store_n(&pool->released_fn, NULL, __ATOMIC_RELEASE);
		return 0;
	}
	pthread_mutex_lock(&pool->owner_wait_lock); /* one setter at a time, as above */
	if (__atomic_load_n(&pool->released_fn, __ATOMIC_ACQUIRE)) {
		pthread_mutex_unlock(&pool->owner_wait_lock);
		return pool_err(pool, GFA_EBUSY);
	}
	__atomic_store_n(&pool->released_ctx, ctx, __ATOMIC_RELAXED);
	__atomic_store_n(&pool->released_fn, fn, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&pool->owner_wait_lock);
	return 0;
}

const struct gfa_owner_ops *owner_lookup(struct gfa_pool *pool, uint64_t owner, void **ctx)
{
	const struct gfa_owner_ops *ops = NULL;
	struct gfa_owner_slot *s;

	pthread_rwlock_rdlock(&pool->owner_lock);
	s = pool->nr_owners ? owner_slot(pool, owner, false) : NULL;
	if (s) {
		ops = s->ops;
		if (ctx)
			*ctx = s->ctx;
	}
	pthread_rwlock_unlock(&pool->owner_lock);
	return ops;
}
