// SPDX-License-Identifier: MIT
/*
 * Split virtqueues (virtio 1.x section 2.7, legacy layout), read with every value the
 * driver supplies checked before use: the ring must lie inside guest RAM, the avail index
 * may run ahead by at most the queue size, every head and next index must be in the
 * table, every buffer inside RAM, and a chain may not be longer than the queue (it would
 * have to loop).  Each descriptor is copied once before it is looked at, so a guest that
 * rewrites the ring meanwhile cannot make a checked value change under the device.  The
 * device keeps its own used index; the used ring is written only at addresses checked
 * when the queue was set up.
 */
#include <string.h>
#include "refvmm/virtio.h"

struct vring_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags, next;
};

/* Bytes of a legacy ring of num entries, and where its used ring starts. */
static uint64_t vring_used_off(uint16_t num)
{
	uint64_t avail_end = 16ULL * num + 2 * (3ULL + num);

	return (avail_end + VIRTIO_PCI_VRING_ALIGN - 1) & ~(uint64_t)(VIRTIO_PCI_VRING_ALIGN - 1);
}

static uint64_t vring_size(uint16_t num)
{
	return vring_used_off(num) + 2 * 3 + 8ULL * num;
}

static uint16_t load16(const struct rv_mem *m, uint64_t gpa)
{
	return __atomic_load_n((const uint16_t *)(m->hva + gpa), __ATOMIC_ACQUIRE);
}

enum rv_vq_err rv_vq_set_pfn(struct rv_vq *vq, const struct rv_mem *m, uint32_t pfn)
{
	uint64_t base = (uint64_t)pfn << VIRTIO_PCI_QUEUE_ADDR_SHIFT;

	vq->pfn = 0;
	vq->last_avail = vq->used_idx = 0;
	vq->broken = false;
	if (!pfn)
		return RV_VQ_OK;
	if (!rv_mem_ok(m, base, vring_size(vq->num)))
		return RV_VQ_ERR_RING;
	vq->pfn = pfn;
	vq->desc = base;
	vq->avail = base + 16ULL * vq->num;
	vq->used = base + vring_used_off(vq->num);
	return RV_VQ_OK;
}

static int vq_fail(struct rv_vq *vq, enum rv_vq_err err)
{
	vq->broken = true;
	return -(int)err;
}

/* Copy descriptor idx and check its buffer; RV_VQ_OK or the error. */
static enum rv_vq_err vq_desc(const struct rv_vq *vq, const struct rv_mem *m, uint16_t idx,
			      struct vring_desc *d)
{
	if (idx >= vq->num)
		return RV_VQ_ERR_DESC;
	memcpy(d, m->hva + vq->desc + 16ULL * idx, sizeof(*d));
	if (d->flags & VRING_DESC_F_INDIRECT)
		return RV_VQ_ERR_DESC; /* not offered */
	if (!rv_mem_ok(m, d->addr, d->len))
		return RV_VQ_ERR_DESC;
	return RV_VQ_OK;
}

int rv_vq_pop(struct rv_vq *vq, const struct rv_mem *m, struct rv_vq_elem *e)
{
	uint16_t avail_idx, idx;
	bool rd = false, wr = false;

	if (!vq->pfn || vq->broken)
		return 0;
	avail_idx = load16(m, vq->avail + 2);
	if (avail_idx == vq->last_avail)
		return 0;
	if ((uint16_t)(avail_idx - vq->last_avail) > vq->num)
		return vq_fail(vq, RV_VQ_ERR_AVAIL);
	idx = load16(m, vq->avail + 4 + 2ULL * (vq->last_avail % vq->num));
	e->head = idx;
	e->n = 0;
	e->read_len = e->write_len = 0;
	for (;;) {
		struct vring_desc d;
		enum rv_vq_err err;

		if (e->n >= vq->num || e->n >= RV_VQ_MAX_SEGS)
			return vq_fail(vq, RV_VQ_ERR_LOOP);
		err = vq_desc(vq, m, idx, &d);
		if (err)
			return vq_fail(vq, err);
		e->seg[e->n++] = (struct rv_vq_seg){ d.addr, d.len, d.flags & VRING_DESC_F_WRITE };
		if (d.flags & VRING_DESC_F_WRITE) {
			e->write_len += d.len;
			wr = true;
		} else {
			e->read_len += d.len;
			rd = true;
		}
		if (!(d.flags & VRING_DESC_F_NEXT))
			break;
		idx = d.next;
	}
	e->mixed = rd && wr;
	vq->last_avail++;
	return 1;
}

bool rv_vq_push(struct rv_vq *vq, const struct rv_mem *m, uint16_t head, uint32_t len)
{
	uint32_t elem[2] = { head, len };
	uint16_t flags;

	if (!vq->pfn)
		return false;
	memcpy(m->hva + vq->used + 4 + 8ULL * (vq->used_idx % vq->num), elem, sizeof(elem));
	vq->used_idx++;
	/* the element before the index the driver polls, and the index before the flag
	 * read (seq_cst store then load: a driver that enables interrupts after reading
	 * the old index must get the interrupt) */
	__atomic_store_n((uint16_t *)(m->hva + vq->used + 2), vq->used_idx, __ATOMIC_SEQ_CST);
	flags = __atomic_load_n((const uint16_t *)(m->hva + vq->avail), __ATOMIC_SEQ_CST);
	return !(flags & VRING_AVAIL_F_NO_INTERRUPT);
}

size_t rv_vq_read(const struct rv_mem *m, const struct rv_vq_elem *e, void *buf, size_t len)
{
	size_t done = 0;

	for (unsigned int i = 0; i < e->n && done < len; i++) {
		size_t n = e->seg[i].len;

		if (e->seg[i].write)
			continue;
		if (n > len - done)
			n = len - done;
		memcpy((uint8_t *)buf + done, m->hva + e->seg[i].gpa, n);
		done += n;
	}
	return done;
}
