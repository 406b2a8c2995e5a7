// SPDX-License-Identifier: MIT
/*
 * Owners of movable blocks and their migrate ops: a small open-addressing table
 * (owner cookie -> ops, context), read by the compaction scanners under a rwlock.
 */
#include <stdlib.h>
#include "allocator/internal.h"

static const struct gfa_owner_ops owner_tombstone;

int owner_registry_init(struct gfa_pool *pool)
{
	pool->owners = calloc(GFA_OWNER_SLOTS, sizeof(*pool->owners));
	if (!pool->owners)
		return -ENOMEM;
	pthread_rwlock_init(&pool->owner_lock, NULL);
	return 0;
}

void owner_registry_destroy(struct gfa_pool *pool)
{
	if (!pool->owners)
		return;
	pthread_rwlock_destroy(&pool->owner_lock);
	free(pool->owners);
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
			if (!tomb)
				tomb = s;
			continue;
		}
		if (s->owner == owner)
			return s;
	}
	return insert ? tomb : NULL;
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
	pthread_rwlock_wrlock(&pool->owner_lock);
	s = owner_slot(pool, owner, false);
	if (ops && s) {
		ret = -EEXIST;
	} else if (ops) {
		s = pool->nr_owners < GFA_OWNER_SLOTS / 2 ? owner_slot(pool, owner, true) : NULL;
		if (!s) {
			ret = -ENOSPC;
		} else {
			*s = (struct gfa_owner_slot){ owner, ops, ctx };
			pool->nr_owners++;
		}
	} else if (!s) {
		ret = -ENOENT;
	} else {
		s->ops = &owner_tombstone;
		pool->nr_owners--;
	}
	pthread_rwlock_unlock(&pool->owner_lock);
	return ret;
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

