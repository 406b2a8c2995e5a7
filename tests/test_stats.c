/*
 * Statistics (allocator/stats.c): zone snapshots that add up, counters that sum over
 * zones, and the kernel's text formats, snprintf-style.
 */
#include <stdio.h>
#include "tests/test_util.h"

Test(stats, text_formats)
{
	struct gfa_pool *p = tu_pool(4096);
	char buf[8192];
	int n;

	cr_assert_geq(gfa_alloc(p, 0, 0, GFA_MT_UNMOVABLE, 0, 0), 0);
	n = gfa_pool_buddyinfo(p, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_eq(strncmp(buf, "Node 0, zone   Normal ", 22), 0, "%s", buf);
	{
		/* buddyinfo lists 11 orders: 1 2 1 1 1 1 1 1 1 1 3 after one order-0 split */
		unsigned long c[11];
		int k = sscanf(buf,
			       "Node 0, zone Normal %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu",
			       &c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7], &c[8], &c[9],
			       &c[10]);
		cr_assert_eq(k, 11, "%s", buf);
		cr_assert_eq(c[0], 1);
		cr_assert_eq(c[9], 1);
		cr_assert_eq(c[10], 3);
	}
	n = gfa_pool_pagetypeinfo(p, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_not_null(strstr(buf, "Page block order: 9"));
	cr_assert_not_null(strstr(buf, "Number of blocks type     Unmovable      Movable"));
	cr_assert_not_null(strstr(buf, "type    Unmovable      1"), "%s", buf);
	n = gfa_pool_vmstat_text(p, buf, sizeof(buf));
	cr_assert_not_null(strstr(buf, "pgalloc_blocks 1\n"));
	cr_assert_not_null(strstr(buf, "pageblock_steal 2\n"), "%s", buf);
	/* truncation behaves like snprintf */
	cr_assert_eq(gfa_pool_vmstat_text(p, buf, 10), n);
	cr_assert_eq(strlen(buf), 9);
	gfa_pool_destroy(p);
}

/*
 * Parsers of /proc/buddyinfo (prometheus procfs, node_exporter) key a line by its node
 * and zone fields, whatever the first word says: each (node, zone) appears once, the
 * caches' line under a name of its own, and two zones of one node differ.
 */
Test(stats, buddyinfo_keys_are_unique_for_kernel_parsers)
{
	struct gfa_pool *p = tu_pool_zones(2, 2048, NULL);
	struct gfa_pcp *pcp = gfa_pcp_create(p, 0);
	char buf[4096], *save = NULL, keys[8][48];
	int nkeys = 0;

	cr_assert_geq(gfa_pcp_alloc(pcp, 0, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_gt(gfa_pool_buddyinfo(p, buf, sizeof(buf)), 0);
	for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char f0[16], node[16], f2[16], zone[24];

		cr_assert_eq(sscanf(l, "%15s %15s %15s %23s", f0, node, f2, zone), 4, "%s", l);
		cr_assert_lt(nkeys, 8);
		snprintf(keys[nkeys], sizeof(keys[0]), "%s %s", node, zone);
		for (int k = 0; k < nkeys; k++)
			cr_assert_str_neq(keys[k], keys[nkeys], "key '%s' twice", keys[k]);
		nkeys++;
	}
	cr_assert_eq(nkeys, 4, "two zones, each with its caches' line");
	gfa_pcp_destroy(pcp);
	gfa_pool_destroy(p);
}

/* pgalloc and pgfree count pages, as /proc/vmstat does; the _blocks lines count calls. */
Test(stats, pgalloc_and_pgfree_count_pages)
{
	struct gfa_pool *p = tu_pool(4096);
	struct gfa_vmstat a, b;
	int64_t pfn;

	gfa_pool_vmstat(p, &a);
	pfn = gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 1, 0);
	cr_assert_geq(pfn, 0);
	cr_assert_eq(gfa_free(p, (uint64_t)pfn, 3, 1), 0);
	gfa_pool_vmstat(p, &b);
	cr_assert_eq(b.pgalloc - a.pgalloc, 8);
	cr_assert_eq(b.pgfree - a.pgfree, 8, "pgfree +%lu for one order-3 free (kernel: +8)",
		     (unsigned long)(b.pgfree - a.pgfree));
	cr_assert_eq(b.pgalloc_blocks - a.pgalloc_blocks, 1);
	cr_assert_eq(b.pgfree_blocks - a.pgfree_blocks, 1);
	gfa_pool_destroy(p);
}

Test(stats, migratetype_names)
{
	cr_assert_str_eq(gfa_migratetype_name(GFA_MT_UNMOVABLE), "Unmovable");
	cr_assert_str_eq(gfa_migratetype_name(GFA_MT_MOVABLE), "Movable");
	cr_assert_str_eq(gfa_migratetype_name(GFA_MT_RECLAIMABLE), "Reclaimable");
	cr_assert_str_eq(gfa_migratetype_name(GFA_MT_ISOLATE), "Isolate");
	cr_assert_str_eq(gfa_migratetype_name(GFA_MT_TYPES), "Unknown");
	cr_assert_str_eq(gfa_migratetype_name((enum gfa_migratetype) - 1), "Unknown");
}

/* A zone's snapshot adds up: its free frames are its lists' and its caches' blocks. */
Test(stats, zone_stat_adds_up)
{
	struct gfa_pool *p = tu_pcp_pool(8192, 31, 512, 0);
	struct gfa_pcp *c = gfa_pcp_create(p, 0);
	struct gfa_pcp_stat ps;
	struct gfa_zone_stat st;
	uint64_t listed = 0, cached = 0, pbs = 0;

	cr_assert_not_null(c);
	cr_assert_geq(gfa_pcp_alloc(c, 0, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_geq(gfa_pcp_alloc(c, 2, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_geq(gfa_alloc(p, 0, 5, GFA_MT_UNMOVABLE, 2, 0), 0);
	cr_assert_eq(gfa_zone_stat(p, 0, &st), 0);
	cr_assert_eq(gfa_pcp_stat(c, &ps), 0);
	for (unsigned int o = 0; o < GFA_NR_ORDERS; o++) {
		for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
			listed += st.nr_free_blocks[o][t] << o;
		cached += st.nr_pcp_blocks[o] << o;
		cr_assert_eq(st.nr_pcp_blocks[o], (uint64_t)ps.nr_blocks[o], "order %u", o);
	}
	for (unsigned int t = 0; t < GFA_MT_TYPES; t++)
		pbs += st.nr_pageblocks[t];
	cr_assert_eq(st.nr_frames, 8192);
	cr_assert_eq(listed, st.nr_free_buddy);
	cr_assert_eq(cached, st.nr_pcp);
	cr_assert_eq(st.nr_pcp, (uint64_t)ps.count);
	cr_assert_gt(st.nr_pcp, 0);
	cr_assert_eq(st.nr_free, st.nr_free_buddy + st.nr_pcp + st.nr_scrubbing);
	cr_assert_eq(st.nr_free, 8192 - 1 - 4 - 32, "what the callers hold is not free");
	cr_assert_eq(pbs, 8192 / GFA_PAGEBLOCK_FRAMES);
	cr_assert_eq(st.nr_pageblocks[GFA_MT_UNMOVABLE], 2,
		     "the unmovable block stole a whole order-10 block: two pageblocks");
	cr_assert_eq(st.nr_released + st.nr_inflight + st.nr_sidelined, 0, "no host work");
	EXPECT_BAD(p, gfa_zone_stat(p, 1, &st), GFA_ERANGE, err_range);
	EXPECT_BAD(p, gfa_zone_stat(p, 0, NULL), GFA_EFAULT, err_fault);
	cr_assert_eq(gfa_zone_stat(NULL, 0, &st), GFA_EFAULT);
	ASSERT_POOL_OK(p);
	gfa_pcp_destroy(c);
	gfa_pool_destroy(p);
}

/* The pool's counters are its zones' summed, plus the errors, which are the pool's own. */
Test(stats, pool_vmstat_is_the_sum_of_its_zones)
{
	static const int nodes[2] = { 0, 1 };
	struct gfa_pool *p = tu_pool_zones(2, 2048, nodes);
	struct gfa_vmstat pv, z0, z1;
	const uint64_t *a, *b, *s;

	cr_assert_geq(gfa_alloc(p, 0, 3, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_geq(gfa_alloc(p, 1, 0, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_geq(gfa_alloc(p, 1, 9, GFA_MT_RECLAIMABLE, 1, 0), 0);
	cr_assert_eq(gfa_free(p, 0, 0, 1), GFA_EWRONGORDER, "an error, counted pool-wide");
	cr_assert_eq(gfa_zone_vmstat(p, 0, &z0), 0);
	cr_assert_eq(gfa_zone_vmstat(p, 1, &z1), 0);
	cr_assert_eq(gfa_pool_vmstat(p, &pv), 0);
	a = (const uint64_t *)&z0;
	b = (const uint64_t *)&z1;
	s = (const uint64_t *)&pv;
	for (size_t k = 0; k < sizeof(pv) / sizeof(uint64_t); k++) {
		size_t off = k * sizeof(uint64_t);

		if (off >= offsetof(struct gfa_vmstat, err_fault) &&
		    off <= offsetof(struct gfa_vmstat, err_inval))
			continue;
		cr_assert_eq(s[k], a[k] + b[k], "word %zu: pool %lu, zones %lu + %lu", k,
			     (unsigned long)s[k], (unsigned long)a[k], (unsigned long)b[k]);
	}
	cr_assert_eq(pv.pgalloc, 8 + 1 + 512);
	cr_assert_eq(z0.alloc_order[3], 1);
	cr_assert_eq(z1.alloc_order[9], 1);
	cr_assert_eq(pv.err_wrong_order, 1);
	cr_assert_eq(z0.err_wrong_order + z1.err_wrong_order, 0, "zones count no errors");
	cr_assert_eq(gfa_zone_node(p, 0), 0);
	cr_assert_eq(gfa_zone_node(p, 1), 1);
	cr_assert_eq(gfa_zone_node(p, 2), GFA_ERANGE);
	cr_assert_eq(gfa_zone_node(NULL, 0), GFA_EFAULT);
	EXPECT_BAD(p, gfa_zone_vmstat(p, 2, &z0), GFA_ERANGE, err_range);
	EXPECT_BAD(p, gfa_pool_vmstat(p, NULL), GFA_EFAULT, err_fault);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

typedef int (*text_fn)(struct gfa_pool *pool, char *buf, size_t len);

/* Each text formatter is snprintf: the full length for any len, NUL-terminated within it. */
Test(stats, text_formatters_are_snprintf_style)
{
	static const text_fn fns[] = { gfa_pool_buddyinfo, gfa_pool_pagetypeinfo,
				       gfa_pool_vmstat_text };
	static const int nodes[2] = { 0, 3 };
	struct gfa_pool *p = tu_pool_zones(2, 2048, nodes);
	char full[16384], part[64];

	cr_assert_geq(gfa_alloc(p, 1, 4, GFA_MT_UNMOVABLE, 1, 0), 0);
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		int n = fns[i](p, NULL, 0);

		cr_assert_gt(n, 0, "formatter %zu", i);
		cr_assert_lt(n, (int)sizeof(full));
		cr_assert_eq(fns[i](p, full, sizeof(full)), n);
		cr_assert_eq(strlen(full), (size_t)n);
		memset(part, 'x', sizeof(part));
		cr_assert_eq(fns[i](p, part, 17), n);
		cr_assert_eq(part[16], '\0');
		cr_assert_eq(part[17], 'x', "wrote past len");
		cr_assert_eq(strncmp(part, full, 16), 0);
		cr_assert_eq(fns[i](p, NULL, 1), GFA_EFAULT);
		cr_assert_eq(fns[i](NULL, full, sizeof(full)), GFA_EFAULT);
	}
	cr_assert_eq(VMS(p, err_fault), 3, "each NULL buffer counted");
	/* the second zone's lines carry its node */
	gfa_pool_buddyinfo(p, full, sizeof(full));
	cr_assert_not_null(strstr(full, "\nNode 3, zone   Normal "), "%s", full);
	gfa_pool_pagetypeinfo(p, full, sizeof(full));
	cr_assert_not_null(strstr(full, "Node    3, zone   Normal, type    Unmovable "), "%s",
			   full);
	ASSERT_POOL_OK(p);
	gfa_pool_destroy(p);
}

/* /proc/vmstat's text has a line per counter, each the value the struct holds. */
Test(stats, vmstat_text_has_every_counter)
{
	struct gfa_pool *p = tu_pool(4096);
	static char buf[65536];
	struct gfa_vmstat vs;
	unsigned int lines = 0;
	char *save = NULL;

	cr_assert_geq(gfa_alloc(p, 0, 2, GFA_MT_MOVABLE, 1, 0), 0);
	cr_assert_eq(gfa_alloc(p, 0, 0, (enum gfa_migratetype)9, 1, 0), GFA_EMIGRATE);
	gfa_pool_vmstat(p, &vs);
	cr_assert_lt(gfa_pool_vmstat_text(p, buf, sizeof(buf)), (int)sizeof(buf));
	for (char *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char name[64];
		unsigned long v;

		cr_assert_eq(sscanf(l, "%63s %lu", name, &v), 2, "%s", l);
#define CHECK_ITEM(f)          \
	if (!strcmp(name, #f)) \
		cr_assert_eq(v, (unsigned long)vs.f, "%s", l);
		GFA_VMSTAT_ITEMS(CHECK_ITEM)
#undef CHECK_ITEM
		if (!strcmp(name, "pgalloc_order2"))
			cr_assert_eq(v, 1);
		lines++;
	}
	cr_assert_eq(lines, GFA_VMSTAT_NR_ITEMS + 2 * GFA_NR_ORDERS);
	cr_assert_eq(vs.pgalloc, 4);
	cr_assert_eq(vs.err_migratetype, 1);
	gfa_pool_destroy(p);
}
