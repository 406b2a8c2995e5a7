// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart: start M VMs x V vCPUs x S MiB on a gfa pool, churn them (stop and
 * start, VMM-internal unmovable allocations, background compaction and collapse),
 * and report start latency, the share of guest RAM on 2 MiB blocks, pool statistics
 * and host-backed bytes; then the same starts on plain anonymous memory faulted by
 * the kernel, with and without MADV_HUGEPAGE, in the same run, and the ratios.
 *
 * "Start" = create the VM (its RAM allocated and mapped, its vCPUs and, with KVM, the
 * KVM VM, memslot and page tables) + the first touch of every 4 KiB of its RAM by its
 * vCPU threads.  With KVM the KVM VM, vCPUs and memslot come from a shell made before
 * the timer (refvmm/shell.c), as the pool is populated before it.  The kernel 4 KiB and
 * MADV_HUGEPAGE baselines do mmap + the same touch; the fair ones (refvmm/shell_baseline.c)
 * give the kernel the same head start (a pre-faulted THP memfd, a reserved hugetlbfs
 * pool) and the same KVM creation.  With KVM the guest also boots the test guest and
 * checks its memory (timed apart: on software KVM it is slow for reasons unrelated to
 * memory).  The parts: tools/vmstart.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tools/vmstart.h"

int cmd_vmstart(int argc, char **argv)
{
	struct run *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return 1;
	ret = vmstart_opts_parse(argc, argv, &r->o);
	if (ret) {
		free(r);
		return ret == 1 ? 0 : 2;
	}
	if (r->o.csv) {
		r->csv = fopen(r->o.csv, "w");
		if (!r->csv) {
			fprintf(stderr, "gfactl vmstart: --csv %s: %s\n", r->o.csv,
				strerror(errno));
			free(r);
			return 2;
		}
		fprintf(r->csv, "kind,memory,phase,round,vm,ms_or_t,huge_pct\n");
	}
	r->t0 = now_ms();
	if (r->o.runner_fd >= 0)
		ret = vmstart_socket_runner(r);
	else if (r->o.socket)
		ret = vmstart_socket(r);
	else
		ret = vmstart_scenario(r);
	if (!r->o.socket)
		vmstart_teardown(r);
	hostfacts_shmem_thp_restore();
	if (r->csv)
		fclose(r->csv);
	free(r);
	return ret == -2 ? 2 : ret ? 1 : 0;
}
