// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart's kernel baselines: the same starts on the kernel's own memory (4 KiB
 * first touch, MADV_HUGEPAGE, a pre-faulted THP memfd, a reserved hugetlbfs pool), with
 * and without the KVM creation a gfa start without a shell does, and the zeroing rates.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include "tools/vmstart.h"

/*
 * M starts of one baseline, all kept mapped like live VMs, after one untimed round
 * (which warms the kernel's own structures; the round is unmapped, so every timed start
 * that faults, faults and zeroes fresh pages).  What a baseline may do before its timer
 * (populate the pre-faulted memfd) it does before it.  With kvm, each start also creates
 * the KVM VM, memslot, page tables, code and vCPUs as a gfa start without a shell would.
 */
static int run_baseline(struct run *r, enum baseline_mem kind, bool kvm, struct samples *s,
			const char *name, int64_t *pmd_bytes)
{
	struct baseline_vm *bv = calloc(r->o.vms, sizeof(*bv));
	int err = 0;

	if (!bv)
		return -1;
	for (int warm = 1; warm >= 0 && !err; warm--) {
		unsigned int n;

		for (n = 0; n < r->o.vms && !err; n++) {
			double t0, dt;

			err = baseline_prepare(&bv[n], kind, r->o.mem, (unsigned int)r->o.vcpus);
			t0 = now_ms();
			if (!err)
				err = baseline_start(&bv[n], kvm);
			dt = now_ms() - t0;
			if (err) {
				fprintf(stderr, "gfactl vmstart: %s baseline: %s\n", name,
					strerror(-err));
				n++;
				break;
			}
			if (!warm) {
				vmstart_sample(s, dt);
				if (r->csv)
					fprintf(r->csv, "start,%s,start,0,%u,%.3f,\n", name, n, dt);
			}
		}
		/* all VMs, as gfa's figure (each VMA its own: the guard pages) */
		for (unsigned int i = 0; !warm && !err && pmd_bytes && i < n; i++)
			*pmd_bytes += gfa_smaps_pmd_bytes(bv[i].mem, r->o.mem);
		for (unsigned int i = 0; i < n; i++)
			baseline_destroy(&bv[i]);
	}
	free(bv);
	return err ? -1 : 0;
}

/* hugetlbfs where the host can reserve the pages (as root); says why not otherwise. */
static int hugetlb_baseline(struct run *r)
{
	unsigned long pages = (unsigned long)(r->o.vms * r->o.mem / (2 * MiB));
	long got = baseline_hugetlb_reserve(pages, r->why_no_hugetlb, sizeof(r->why_no_hugetlb));
	int err;

	if (got < 0) {
		printf("kernel baseline hugetlbfs: not run: %s\n", r->why_no_hugetlb);
		return 0;
	}
	err = run_baseline(r, BASELINE_HUGETLB, r->kvm, &r->khuge_kvm, "hugetlbfs-kvm", NULL);
	baseline_hugetlb_restore();
	if (err) {
		/* the pages are the host's: another process (a test beside this run) may
		 * take reserved ones first; the baseline is then not run, gfa's run stands */
		snprintf(r->why_no_hugetlb, sizeof(r->why_no_hugetlb),
			 "the host's reserved 2 MiB pages ran out during the run");
		memset(&r->khuge_kvm, 0, sizeof(r->khuge_kvm));
		printf("kernel baseline hugetlbfs: not run: %s\n", r->why_no_hugetlb);
	}
	return 0;
}

int vmstart_baselines(struct run *r)
{
	printf("kernel baselines: the same starts on the kernel's memory%s\n",
	       r->kvm ? ", without and with the KVM creation gfa's start did before shells" : "");
	/* idle shells are live KVM VMs, which slow every mapping change: none now */
	gfa_vm_shells_drain();
	if (run_baseline(r, BASELINE_4K, false, &r->k4k, "kernel-4k", &r->pmd4k) ||
	    run_baseline(r, BASELINE_THP, false, &r->kthp, "kernel-thp", &r->pmdthp) ||
	    run_baseline(r, BASELINE_PREFAULTED, false, &r->kpre, "kernel-prefaulted", &r->pmdpre))
		return -1;
	if (r->kvm && (run_baseline(r, BASELINE_PREFAULTED, true, &r->kpre_kvm,
				    "kernel-prefaulted-kvm", NULL) ||
		       run_baseline(r, BASELINE_THP, true, &r->kthp_kvm, "kernel-thp-kvm", NULL)))
		return -1;
	if (hugetlb_baseline(r))
		return -1;
	if (baseline_zero_rates(128 * MiB, 7, &r->zr)) {
		fprintf(stderr, "gfactl vmstart: zeroing rate: gfa_zero left data\n");
		return -1;
	}
	return 0;
}
