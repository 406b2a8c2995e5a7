// SPDX-License-Identifier: MIT
/*
 * Domain specs and sizes as text: the largest exact unit for a size, one line for a spec.
 */
#define _GNU_SOURCE
#include "refvmm/domain_internal.h"

static const char *const size_units[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };

/* @bytes in the largest unit that divides it: *unit is its index in size_units. */
static uint64_t exact_size(uint64_t bytes, unsigned int *unit)
{
	*unit = 0;
	while (bytes && *unit + 1 < ARRAY_SIZE(size_units) && !(bytes % 1024)) {
		bytes /= 1024;
		(*unit)++;
	}
	return bytes;
}

int gfa_domain_format_size(uint64_t bytes, char *buf, size_t len)
{
	unsigned int u, big = 0;
	uint64_t v;
	int n;

	if (!buf)
		return -EFAULT;
	if (!len)
		return -EINVAL;
	/* the number of a size no host has helps nobody: 9007199254740991 KiB */
	if (bytes > HOST_MEMORY_MAX) {
		n = snprintf(buf, len, "larger than %s", human(HOST_MEMORY_MAX).s);
		return (size_t)n >= len ? -ENOSPC : n;
	}
	v = exact_size(bytes, &u);
	while (bytes >> (10 * (big + 1)))
		big++;
	if (v < 10000)
		n = snprintf(buf, len, "%" PRIu64 " %s", v, size_units[u]);
	else
		n = snprintf(buf, len, "%" PRIu64 " %s (%.1f %s)", v, size_units[u],
			     (double)bytes / (double)(1ull << (10 * big)), size_units[big]);
	return (size_t)n >= len ? -ENOSPC : n;
}

/* "(vCPUs 3,5-7 are in no cell; node 0 gets them, ...)" if the import filled cell 0. */
static void put_unnamed(struct strbuf *o, const struct gfa_domain_spec *s)
{
	unsigned int n = domain_popcount_bits(s->unnamed_cpus, GFA_DOMAIN_MAX_VCPUS / 64);
	char list[GFA_DOMAIN_MAX_VCPUS * 6];

	if (!n)
		return;
	domain_format_bitmap(s->unnamed_cpus, GFA_DOMAIN_MAX_VCPUS, list, sizeof(list));
	sb_printf(o,
		  " (vCPU%s %s %s in no cell; node 0 gets %s, as libvirt's QEMU driver "
		  "does)",
		  n == 1 ? "" : "s", list, n == 1 ? "is" : "are", n == 1 ? "it" : "them");
}

static void put_cells(struct strbuf *o, const struct gfa_domain_spec *s)
{
	char list[GFA_DOMAIN_MAX_VCPUS * 6];
	unsigned int i;

	if (!s->nr_cells) {
		sb_printf(o, ", no NUMA cells");
		return;
	}
	sb_printf(o, ", %u NUMA cell%s [", s->nr_cells, s->nr_cells == 1 ? "" : "s");
	for (i = 0; i < s->nr_cells; i++) {
		const struct gfa_domain_cell *c = &s->cells[i];

		domain_format_bitmap(c->cpus, GFA_DOMAIN_MAX_VCPUS, list, sizeof(list));
		sb_printf(o, "%s%u: cpus %s, %s", i ? "; " : "", i, c->nr_cpus ? list : "none",
			  human(c->memory_bytes).s);
	}
	sb_printf(o, "]");
	put_unnamed(o, s);
}

static void put_pages(struct strbuf *o, const struct gfa_domain_spec *s)
{
	char list[GFA_DOMAIN_MAX_CELLS * 4];
	unsigned int i;

	if (!s->hugepages) {
		sb_printf(o, ", no hugepages");
		return;
	}
	if (!s->nr_pages) {
		sb_printf(o, ", hugepages host default size");
		return;
	}
	sb_printf(o, ", hugepages");
	for (i = 0; i < s->nr_pages; i++) {
		const struct gfa_domain_page *p = &s->pages[i];
		const char *size = human(p->size_bytes).s;

		if (p->nodeset) {
			domain_format_bitmap(&p->nodeset, GFA_DOMAIN_MAX_CELLS, list, sizeof(list));
			sb_printf(o, "%s %s (cells %s)", i ? "," : "", size, list);
		} else {
			sb_printf(o, "%s %s (default%s)", i ? "," : "", size,
				  p->nodeset_dropped ? "; nodeset='0' dropped: no NUMA cells, "
						       "as libvirt does" :
						       "");
		}
	}
}

/* A caller-built spec: its counts must fit its arrays (parsed specs always do). */
bool domain_spec_counts_ok(const struct gfa_domain_spec *s)
{
	return s->nr_cells <= GFA_DOMAIN_MAX_CELLS && s->nr_pages <= GFA_DOMAIN_MAX_PAGES;
}

/* The memory figures: the total, why it is not <memory>, current, devices. */
static void put_memory(struct strbuf *o, const struct gfa_domain_spec *s)
{
	sb_printf(o, "%s: memory %s", s->name, human(s->memory_bytes).s);
	if (s->stated_memory_bytes && s->stated_memory_bytes != s->memory_bytes)
		sb_printf(o,
			  " (the NUMA cells%s, as libvirt's QEMU driver sizes it; "
			  "<memory> says %s)",
			  s->device_memory_bytes ? " plus memory devices" : "",
			  human(s->stated_memory_bytes).s);
	if (s->current_memory_bytes != s->memory_bytes)
		sb_printf(o, " (current %s)", human(s->current_memory_bytes).s);
	if (s->device_memory_bytes)
		sb_printf(o, " incl. %s memory devices", human(s->device_memory_bytes).s);
}

int gfa_domain_format(const struct gfa_domain_spec *s, char *buf, size_t len)
{
	static const char *const sources[] = { "default", "anonymous", "file", "memfd" };
	static const char *const access[] = { "default", "shared", "private" };
	struct strbuf o = { .buf = buf, .len = len };

	if (!s || !buf)
		return -EFAULT;
	if (!len || !domain_spec_counts_ok(s))
		return -EINVAL;
	buf[0] = '\0';
	put_memory(&o, s);
	sb_printf(&o, ", %u vCPU%s", s->vcpus, s->vcpus == 1 ? "" : "s");
	if (s->current_vcpus != s->vcpus)
		sb_printf(&o, " (%u current)", s->current_vcpus);
	put_cells(&o, s);
	put_pages(&o, s);
	if (s->source != GFA_DOMAIN_SOURCE_DEFAULT && (unsigned int)s->source < 4)
		sb_printf(&o, ", source %s", sources[s->source]);
	if (s->access != GFA_DOMAIN_ACCESS_DEFAULT && (unsigned int)s->access < 3)
		sb_printf(&o, ", access %s", access[s->access]);
	sb_finish(&o);
	return sb_overflowed(&o) ? -ENOSPC : (int)o.pos;
}
