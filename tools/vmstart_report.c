// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart's report: the samples and their percentiles, the pool's text and
 * counters, the --stat-file snapshots, and the summary with its RESULT lines.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include "tools/vmstart.h"
#include "common/compiler.h"

void vmstart_sample(struct samples *s, double v)
{
	s->total++;
	if (s->n < MAX_SAMPLES)
		s->v[s->n++] = v;
}

/* " (N starts)", saying so when the percentiles cover only the first MAX_SAMPLES */
static const char *starts_text(const struct samples *s)
{
	static char buf[2][96];
	static int k;

	k ^= 1;
	if (s->total > s->n)
		snprintf(buf[k], sizeof(buf[k]), "(%zu starts; percentiles of the first %zu)",
			 s->total, s->n);
	else
		snprintf(buf[k], sizeof(buf[k]), "(%zu starts)", s->n);
	return buf[k];
}

double vmstart_huge_share(struct run *r, uint64_t *huge, uint64_t *total)
{
	*huge = *total = 0;
	for (unsigned int i = 0; i < r->o.vms; i++) {
		struct gfa_guest_stat st;

		if (!r->vm[i])
			continue;
		gfa_guest_stat(gfa_vm_guest(r->vm[i]), &st);
		*huge += st.huge_ranges;
		*total += st.huge_ranges + st.small_ranges;
	}
	return *total ? 100.0 * (double)*huge / (double)*total : 0;
}

int64_t vmstart_host_backed_bytes(struct run *r)
{
	int64_t sum = 0;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(r->pool); z++) {
		int64_t n = gfa_memfd_allocated_bytes(gfa_backing_zone_fd(r->b, z));

		if (n > 0)
			sum += n;
	}
	return sum;
}

int vmstart_stat_snapshot(struct run *r, const char *phase)
{
	int err = write_stat_json(r->o.stat_file, r->pool, phase, NULL);

	if (err)
		fprintf(stderr, "gfactl vmstart: --stat-file %s: %s\n", r->o.stat_file,
			strerror(-err));
	return err;
}

int vmstart_print_file(const char *path)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	fflush(stdout);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stdout);
	fclose(f);
	return 0;
}

/* Percentile of a copy: the samples keep their order for CSV and plots. */
static double pct(const struct samples *s, double p)
{
	static double tmp[MAX_SAMPLES];

	memcpy(tmp, s->v, s->n * sizeof(double));
	qsort(tmp, s->n, sizeof(double), cmp_double);
	return percentile(tmp, s->n, p);
}

static double p50(struct samples *s)
{
	return pct(s, 50);
}

static double p99(struct samples *s)
{
	return pct(s, 99);
}

void vmstart_print_text(const char *title, int (*fn)(struct gfa_pool *, char *, size_t),
			struct gfa_pool *pool)
{
	char buf[16384];

	fn(pool, buf, sizeof(buf));
	printf("%s\n%s", title, buf);
}

void vmstart_print_counters(struct gfa_pool *pool)
{
	struct gfa_vmstat v;

	gfa_pool_vmstat(pool, &v);
	printf("compaction: compact_stall %lu compact_success %lu compact_fail %lu "
	       "compact_capture %lu compact_migrate_scanned %lu compact_free_scanned %lu "
	       "compact_daemon_wake %lu pgmigrate_success %lu thp_collapse_alloc %lu\n",
	       (unsigned long)v.compact_stall, (unsigned long)v.compact_success,
	       (unsigned long)v.compact_fail, (unsigned long)v.compact_capture,
	       (unsigned long)v.compact_migrate_scanned, (unsigned long)v.compact_free_scanned,
	       (unsigned long)v.compact_daemon_wake, (unsigned long)v.pgmigrate_success,
	       (unsigned long)v.thp_collapse_alloc);
	printf("allocator: pgalloc_blocks %lu pgfree_blocks %lu pcp_alloc %lu pcp_free %lu "
	       "pgalloc_fallback %lu pageblock_steal %lu pgalloc_fail %lu "
	       "(vCPU caches ordered by %s)\n",
	       (unsigned long)v.pgalloc_blocks, (unsigned long)v.pgfree_blocks,
	       (unsigned long)v.pcp_alloc, (unsigned long)v.pcp_free,
	       (unsigned long)v.pgalloc_fallback, (unsigned long)v.pageblock_steal,
	       (unsigned long)v.pgalloc_fail, gfa_pcp_sync_mode());
}

/* The strongest fair baseline: the lowest p50 of those run; its name in *name. */
static double strongest(struct run *r, const char **name)
{
	struct {
		struct samples *s;
		const char *name;
	} b[] = {
		{ &r->kpre_kvm, "pre-faulted memfd + KVM" },
		{ &r->kthp_kvm, "MADV_HUGEPAGE + KVM" },
		{ &r->khuge_kvm, "hugetlbfs + KVM" },
	};
	double best = 0;

	*name = "none";
	for (size_t i = 0; i < ARRAY_SIZE(b); i++)
		if (b[i].s->n && (!best || p50(b[i].s) < best)) {
			best = p50(b[i].s);
			*name = b[i].name;
		}
	return best;
}

static const char *met(bool ok)
{
	return ok ? "met" : "NOT met";
}

static void print_baseline(const char *title, struct samples *s, int64_t pmd, uint64_t total)
{
	printf("%-26s p50 %8.2f ms  p99 %8.2f ms", title, p50(s), p99(s));
	if (pmd >= 0)
		printf("  (PMD-mapped %ld of %lu MiB)", (long)(pmd / (int64_t)MiB),
		       (unsigned long)(total / MiB));
	printf("\n");
}

/* The fair comparison: the same KVM creation on both sides, the head start too. */
static void summary_fair(struct run *r, double c50, double r50)
{
	const char *sname;
	double best = strongest(r, &sname);
	double vs_kvm = c50 / p50(&r->kpre_kvm), vs_pre = c50 / p50(&r->kpre);
	double rs_thp = r50 / p50(&r->kthp_kvm), rs_clean = r50 / c50;
	double zratio = r->zr.zero_gbs / r->zr.memset_gbs;

	printf("-- on equal terms (every baseline with the KVM VM, memslot, page tables, code "
	       "and vCPUs a gfa start created before shells) --\n");
	print_baseline("pre-faulted THP memfd+KVM:", &r->kpre_kvm, -1, 0);
	print_baseline("MADV_HUGEPAGE + KVM:", &r->kthp_kvm, -1, 0);
	if (r->khuge_kvm.n)
		print_baseline("hugetlbfs pool + KVM:", &r->khuge_kvm, -1, 0);
	else
		printf("hugetlbfs pool + KVM:      not run (%s)\n", r->why_no_hugetlb);
	printf("gfa restart (churn):       p50 %8.2f ms  p99 %8.2f ms  %s\n", r50, p99(&r->restart),
	       starts_text(&r->restart));
	printf("zeroing 128 MiB: %s %.1f GB/s vs memset %.1f GB/s (p50 of 7, interleaved): "
	       "%.2fx (goal >= 1.8: %s)\n",
	       r->zr.method, r->zr.zero_gbs, r->zr.memset_gbs, zratio, met(zratio >= 1.8));
	printf("ratios (p50, lower is better): clean start / pre-faulted+KVM %.3f (goal <= 1.0: "
	       "%s); / pre-faulted without KVM %.3f (aim <= 1.0: %s); / strongest (%s) %.3f\n",
	       vs_kvm, met(vs_kvm <= 1.0), vs_pre, met(vs_pre <= 1.0), sname, c50 / best);
	printf("ratios: restart / MADV_HUGEPAGE+KVM %.3f (goal <= 0.5: %s); restart / gfa clean "
	       "start %.3f (goal <= 1.5: %s)\n",
	       rs_thp, met(rs_thp <= 0.5), rs_clean, met(rs_clean <= 1.5));
	printf("RESULT vmstart vs_prefaulted_kvm=%.3f vs_strongest=%.3f restart_vs_kernel_thp=%.3f "
	       "restart_vs_clean=%.3f zero_vs_memset=%.3f restart_p50_ms=%.3f "
	       "prefaulted_kvm_p50_ms=%.3f kernel_thp_kvm_p50_ms=%.3f hugetlb_kvm_p50_ms=%.3f "
	       "zero_gbs=%.2f memset_gbs=%.2f shells=%u kvm=%d\n",
	       vs_kvm, c50 / best, rs_thp, rs_clean, zratio, r50, p50(&r->kpre_kvm),
	       p50(&r->kthp_kvm), r->khuge_kvm.n ? p50(&r->khuge_kvm) : 0.0, r->zr.zero_gbs,
	       r->zr.memset_gbs, r->shells, r->kvm);
}

void vmstart_summary(struct run *r)
{
	uint64_t huge, total, all = r->o.vms * r->o.mem;
	double share = vmstart_huge_share(r, &huge, &total);
	double g50 = p50(&r->gfa), g99 = p99(&r->gfa);
	/* the goals are for starts from a pool of clean frames; restarts zero dirty ones */
	double c50 = p50(&r->clean), c99 = p99(&r->clean);
	double r50 = r->restart.n ? p50(&r->restart) : 0;
	int64_t win_pmd = 0, backed = vmstart_host_backed_bytes(r);

	for (unsigned int i = 0; i < r->o.vms; i++)
		if (r->vm[i])
			win_pmd += gfa_smaps_pmd_bytes(gfa_guest_hva(gfa_vm_guest(r->vm[i])),
						       r->o.mem);
	printf("\n== summary: %lu VMs x %lu vCPUs x %lu MiB, %s ==\n", (unsigned long)r->o.vms,
	       (unsigned long)r->o.vcpus, (unsigned long)(r->o.mem / MiB),
	       r->kvm ? "KVM vCPUs" : "host-thread vCPUs");
	printf("gfa start, clean pool:    p50 %8.2f ms  p99 %8.2f ms  %s\n", c50, c99,
	       starts_text(&r->clean));
	printf("gfa start, all (restarts zero the frames stopped VMs left dirty):\n"
	       "                          p50 %8.2f ms  p99 %8.2f ms  %s\n",
	       g50, g99, starts_text(&r->gfa));
	printf("guest RAM on 2 MiB blocks: %.1f%% (%lu of %lu ranges)\n", share,
	       (unsigned long)huge, (unsigned long)total);
	printf("host PMD mappings of guest windows: %ld MiB of %lu MiB\n",
	       (long)(win_pmd / (int64_t)MiB), (unsigned long)(all / MiB));
	printf("host-backed bytes of the pool (memfd st_blocks): %ld MiB\n",
	       (long)(backed / (int64_t)MiB));
	if (r->o.no_baseline) {
		printf("RESULT vmstart gfa_p50_ms=%.3f gfa_p99_ms=%.3f all_p50_ms=%.3f "
		       "huge_share=%.1f restart_p50_ms=%.3f\n",
		       c50, c99, g50, share, r50);
		return;
	}
	print_baseline("kernel 4 KiB first touch:", &r->k4k, r->pmd4k, all);
	print_baseline("kernel MADV_HUGEPAGE:", &r->kthp, r->pmdthp, all);
	printf("ratios, clean-pool starts (p50, lower is better): gfa/kernel-4k %.3f (goal <= 0.5: "
	       "%s), gfa/kernel-thp %.3f (goal <= 1.0: %s), 2 MiB share goal >= 95%%: %s\n",
	       c50 / p50(&r->k4k), met(c50 / p50(&r->k4k) <= 0.5), c50 / p50(&r->kthp),
	       met(c50 / p50(&r->kthp) <= 1.0), met(share >= 95));
	printf("(these two give gfa a head start: its pool was populated before the timer, the "
	       "kernel faults and zeroes inside it, and neither baseline creates a KVM VM)\n");
	print_baseline("kernel, pre-faulted memfd:", &r->kpre, r->pmdpre, all);
	printf("ratios, all starts incl. restarts: gfa/kernel-4k %.3f, gfa/kernel-thp %.3f\n",
	       g50 / p50(&r->k4k), g50 / p50(&r->kthp));
	printf("RESULT vmstart vs_kernel_4k=%.3f vs_kernel_thp=%.3f huge_share=%.1f "
	       "gfa_p50_ms=%.3f gfa_p99_ms=%.3f all_vs_kernel_thp=%.3f all_p50_ms=%.3f "
	       "kernel_4k_p50_ms=%.3f kernel_thp_p50_ms=%.3f vs_prefaulted=%.3f "
	       "prefaulted_p50_ms=%.3f kvm=%d\n",
	       c50 / p50(&r->k4k), c50 / p50(&r->kthp), share, c50, c99, g50 / p50(&r->kthp), g50,
	       p50(&r->k4k), p50(&r->kthp), c50 / p50(&r->kpre), p50(&r->kpre), r->kvm);
	if (!r->kvm) {
		/* no KVM: the "+KVM" baselines are the plain ones */
		r->kpre_kvm = r->kpre;
		r->kthp_kvm = r->kthp;
		printf("(no KVM vCPUs in this run: the baselines below create no KVM VM either)\n");
	}
	summary_fair(r, c50, r50 ? r50 : c50);
}
