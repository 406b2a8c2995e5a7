// SPDX-License-Identifier: MIT
/* LLFree behind the plain interface of bench/peer_llfree.h (built with clang). */
#include <stdlib.h>
#include <string.h>
#include "llfree.h"
#include "bench/peer_llfree.h"

struct peer_llfree {
	llfree_t *ll;
	uint8_t *buf[3];
	unsigned int cores;
};

static uint8_t *meta_alloc(size_t n)
{
	size_t len = (n + LLFREE_CACHE_SIZE - 1) / LLFREE_CACHE_SIZE * LLFREE_CACHE_SIZE;
	uint8_t *p = aligned_alloc(LLFREE_CACHE_SIZE, len ? len : LLFREE_CACHE_SIZE);

	if (p)
		memset(p, 0, len);
	return p;
}

void peer_llfree_destroy(struct peer_llfree *a)
{
	if (!a)
		return;
	for (int i = 0; i < 3; i++)
		free(a->buf[i]);
	free(a->ll);
	free(a);
}

struct peer_llfree *peer_llfree_create(uint64_t frames, unsigned int cores, uint64_t *meta_bytes)
{
	llfree_classing_t cl = llfree_classing_simple(cores);
	llfree_meta_size_t ms = llfree_metadata_size(&cl, frames);
	struct peer_llfree *a = calloc(1, sizeof(*a));
	llfree_meta_t meta;

	if (!a)
		return NULL;
	a->cores = cores;
	a->ll = (llfree_t *)meta_alloc(ms.llfree);
	a->buf[0] = meta_alloc(ms.local);
	a->buf[1] = meta_alloc(ms.trees);
	a->buf[2] = meta_alloc(ms.lower);
	if (!a->ll || !a->buf[0] || !a->buf[1] || !a->buf[2]) {
		peer_llfree_destroy(a);
		return NULL;
	}
	meta = (llfree_meta_t){ .local = a->buf[0], .trees = a->buf[1], .lower = a->buf[2] };
	if (!llfree_is_ok(llfree_init(a->ll, frames, LLFREE_INIT_FREE, meta, &cl))) {
		peer_llfree_destroy(a);
		return NULL;
	}
	*meta_bytes = ms.llfree + ms.local + ms.trees + ms.lower;
	return a;
}

int64_t peer_llfree_get(struct peer_llfree *a, unsigned int core, unsigned int order)
{
	llfree_result_t r = llfree_get(a->ll, frame_id_none(),
				       llfree_simple_request(a->cores, (uint8_t)order, core));

	return llfree_is_ok(r) ? (int64_t)r.frame.value : -1;
}

int peer_llfree_put(struct peer_llfree *a, unsigned int core, uint64_t frame, unsigned int order)
{
	llfree_result_t r = llfree_put(a->ll, frame_id(frame),
				       llfree_simple_request(a->cores, (uint8_t)order, core));

	return llfree_is_ok(r) ? 0 : -1;
}

uint64_t peer_llfree_free_huge(struct peer_llfree *a)
{
	return llfree_stats(a->ll).free_huge;
}

uint64_t peer_llfree_free_frames(struct peer_llfree *a)
{
	return llfree_stats(a->ll).free_frames;
}
