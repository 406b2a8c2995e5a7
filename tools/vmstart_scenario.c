// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart's scenario: the pool, the VM shells, M VMs started and (with KVM)
 * booted and checked, memory returned to the host, the churn, the baselines and the
 * summary; and all of it torn down.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tools/vmstart.h"

int vmstart_start_vm(struct run *r, unsigned int i, const char *phase, unsigned int round)
{
	/* VMs go round-robin over the nodes, each built from its node's zone */
	unsigned int zone = i % r->nr_zones;
	struct gfa_vm_config vc = { .mem_bytes = r->o.mem,
				    .vcpus = (unsigned int)r->o.vcpus,
				    .kvm = r->o.kvm,
				    .zone = zone,
				    .pcp = r->zone_pcp[zone],
				    .lazy = r->o.lazy };
	struct gfa_guest_stat st;
	double t0 = now_ms(), dt, create;

	r->vm[i] = gfa_vm_create(r->pool, r->b, &vc);
	create = now_ms() - t0;
	if (!r->vm[i]) {
		fprintf(stderr, "gfactl vmstart: VM %u (%s): %s\n", i, phase, strerror(errno));
		return -1;
	}
	/* the first 2 MiB hold the VM's page tables and code, written at create */
	baseline_touch((char *)gfa_guest_hva(gfa_vm_guest(r->vm[i])) + GFA_VM_RAM_START,
		       r->o.mem - GFA_VM_RAM_START, (unsigned int)r->o.vcpus);
	dt = now_ms() - t0;
	vmstart_sample(&r->gfa, dt);
	vmstart_sample(round ? &r->restart : &r->clean, dt);
	gfa_guest_stat(gfa_vm_guest(r->vm[i]), &st);
	r->kvm = gfa_vm_is_kvm(r->vm[i], &r->why_not_kvm);
	if (r->csv)
		fprintf(r->csv, "start,gfa,%s,%u,%u,%.3f,%.1f\n", phase, round, i, dt,
			100.0 * (double)st.huge_ranges /
				(double)(st.huge_ranges + st.small_ranges));
	if (!r->o.quiet)
		printf("  VM %2u %-8s start %7.2f ms (create %.2f)  2 MiB ranges %lu/%lu  "
		       "zeroed %lu MiB  host PMDs %ld MiB\n",
		       i, phase, dt, create, (unsigned long)st.huge_ranges,
		       (unsigned long)(st.huge_ranges + st.small_ranges),
		       (unsigned long)(st.zeroed_frames >> (20 - GFA_FRAME_SHIFT)),
		       (long)(gfa_smaps_pmd_bytes(gfa_guest_hva(gfa_vm_guest(r->vm[i])), r->o.mem) /
			      (int64_t)MiB));
	if (!r->o.quiet && r->o.lazy)
		printf("         lazy: %lu first touches (%lu at 2 MiB), %lu refused, %lu MiB "
		       "populated\n",
		       (unsigned long)st.lazy_faults, (unsigned long)st.lazy_huge_faults,
		       (unsigned long)st.lazy_refused, (unsigned long)(st.populated_bytes / MiB));
	return 0;
}

/* With KVM: boot the test guest on every vCPU and check it sees its memory. */
static int kvm_boot_check(struct run *r, unsigned int i, double *ms)
{
	uint64_t bad = 0;
	double t0 = now_ms();
	int err = gfa_vm_run_part(r->vm[i], GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY, 0x9e37 + i,
				  gfa_kvm_is_software() ? 16 << 10 : 0, &bad);

	*ms = now_ms() - t0;
	if (err || bad) {
		fprintf(stderr, "gfactl vmstart: VM %u: guest check failed (%s, %lu bad words)\n",
			i, strerror(-err), (unsigned long)bad);
		return -1;
	}
	return 0;
}

void vmstart_record_share(struct run *r)
{
	uint64_t h, t;

	/* full: the last slot follows the run, so the share printed is the current one */
	size_t i = r->ts_n < MAX_SHARES ? r->ts_n++ : MAX_SHARES - 1;

	r->ts_t[i] = now_ms() - r->t0;
	r->ts_huge[i] = vmstart_huge_share(r, &h, &t);
	if (r->csv)
		fprintf(r->csv, "share,gfa,,,,%.1f,%.1f\n", r->ts_t[i], r->ts_huge[i]);
}

/*
 * Return memory to the host from now on, keeping one VM's worth of populated free
 * frames so the next start does not wait for host faults (the HIGH reserve of
 * docs/decisions.md, entry 21).
 */
static int start_host_return(struct run *r)
{
	struct gfa_release_policy rp = { .high = r->o.mem >> GFA_FRAME_SHIFT,
					 .low = r->o.mem >> (GFA_FRAME_SHIFT + 1),
					 .min_empty_frac = 4 };
	struct gfa_host_return_stat st;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(r->pool); z++)
		gfa_zone_set_release_policy(r->pool, z, &rp);
	r->hr = gfa_host_return_start(r->pool, r->b, NULL);
	if (!r->hr) {
		fprintf(stderr, "gfactl vmstart: returning memory to the host: %s\n",
			strerror(errno));
		return -1;
	}
	gfa_host_return_stat(r->hr, &st);
	printf("host return: %s release engines (%s), reserve %lu MiB populated\n", st.mode,
	       st.mode_why && *st.mode_why ? st.mode_why : "ok", (unsigned long)(r->o.mem / MiB));
	return 0;
}

/*
 * KVM creation off the start path: one shell (KVM VM, vCPUs, window with its memslot)
 * per VM made before the timer, as the pool is populated before it; restarts take the
 * shells stopped VMs gave back.
 */
static void make_shells(struct run *r)
{
	char why[160];
	double t0 = now_ms();
	int n;

	if (r->o.kvm == GFA_VM_KVM_OFF || !gfa_kvm_available(why, sizeof(why)))
		return;
	n = gfa_vm_shells_fill(r->o.mem, (unsigned int)r->o.vcpus, (unsigned int)r->o.vms);
	if (n < 0) {
		printf("VM shells: none made (%s): each start creates its KVM VM\n", strerror(-n));
		return;
	}
	r->shells = (unsigned int)n;
	printf("VM shells: %d made in %.1f ms (KVM VM, %lu vCPUs, memslot on the window each; "
	       "before any VM starts, not part of start latency)\n",
	       n, now_ms() - t0, (unsigned long)r->o.vcpus);
}

/* The pool, its first snapshot, background compaction and the shells: all before a timer. */
static int setup(struct run *r)
{
	hostfacts_shmem_thp_advise(r->o.host_thp_keep);
	hostfacts_print(r->o.kvm);
	if (!vmstart_pool_setup(r))
		return r->too_big ? -2 : -1; /* too big for this host: exit 2, as bad usage */
	/* the first snapshot now: a --stat-file that cannot be written is an error */
	if (vmstart_stat_snapshot(r, "created"))
		return -1;
	if (gfa_compactd_start(r->pool))
		fprintf(stderr, "gfactl vmstart: background compaction did not start\n");
	if (!r->o.quiet)
		vmstart_print_text("buddyinfo before:", gfa_pool_buddyinfo, r->pool);
	make_shells(r);
	return 0;
}

/* Every VM started from the clean pool, then (with KVM) booted and checked. */
static int start_all(struct run *r)
{
	double boot_ms = 0, worst = 0;

	printf("starting %lu VMs\n", (unsigned long)r->o.vms);
	for (unsigned int i = 0; i < r->o.vms; i++)
		if (vmstart_start_vm(r, i, "start", 0))
			return -1;
	vmstart_record_share(r);
	if (r->kvm) {
		for (unsigned int i = 0; i < r->o.vms; i++) {
			if (kvm_boot_check(r, i, &boot_ms))
				return -1;
			worst = boot_ms > worst ? boot_ms : worst;
		}
		printf("KVM guests booted and verified their memory (slowest %.1f ms)\n", worst);
	}
	vmstart_stat_snapshot(r, "started");
	return 0;
}

/* The pool after churn: buddyinfo, counters, per-node statistics, the host return's. */
static void print_after(struct run *r)
{
	struct gfa_host_return_stat st;

	vmstart_print_text("buddyinfo after:", gfa_pool_buddyinfo, r->pool);
	vmstart_print_counters(r->pool);
	if (r->np) {
		char text[8192];

		gfa_numa_stat_text(r->np, text, sizeof(text));
		printf("%s", text);
	}
	gfa_host_return_stat(r->hr, &st);
	printf("host return: %lu MiB released, %lu MiB populated again, %lu MiB failed, "
	       "%lu passes, %lu frames taken back from idle vCPU caches\n",
	       (unsigned long)(st.bytes_released / MiB), (unsigned long)(st.bytes_populated / MiB),
	       (unsigned long)(st.bytes_failed / MiB), (unsigned long)st.passes,
	       (unsigned long)st.pcp_frames_drained);
}

int vmstart_scenario(struct run *r)
{
	int err = setup(r);

	if (err || start_all(r) || start_host_return(r))
		return err ? err : -1;
	printf("churn: %lu rounds of balloon inflate/deflate and stopping and restarting half "
	       "the VMs\n",
	       (unsigned long)r->o.rounds);
	if (vmstart_churn(r))
		return -1;
	gfa_host_return_quiesce(r->hr, 30000);
	if (!r->o.quiet)
		print_after(r);
	vmstart_stat_snapshot(r, "done");
	if (!r->o.no_baseline && vmstart_baselines(r))
		return -1;
	vmstart_summary(r);
	if (r->o.json && vmstart_print_file(r->o.stat_file)) {
		fprintf(stderr, "gfactl vmstart: could not print %s\n", r->o.stat_file);
		return -1;
	}
	return r->o.plot ? vmstart_plot(r) : 0;
}

void vmstart_teardown(struct run *r)
{
	for (unsigned int i = 0; i < MAX_VMS; i++)
		gfa_vm_destroy(r->vm[i]);
	for (size_t k = 0; k < r->nr_unmovable; k++)
		gfa_free(r->pool, r->unmovable[k], 0, 1);
	gfa_host_return_stop(r->hr);
	if (r->pool) {
		char msg[256];

		gfa_compactd_stop(r->pool);
		for (unsigned int z = 0; z < GFA_MAX_ZONES; z++)
			gfa_pcp_destroy(r->zone_pcp[z]);
		if (gfa_pool_check(r->pool, msg, sizeof(msg)))
			fprintf(stderr, "gfactl vmstart: pool invariant broken: %s\n", msg);
	}
	gfa_vm_shells_drain();
	baseline_hugetlb_restore();
	gfa_numa_detach(r->np);
	gfa_numa_topology_free(r->topo);
	gfa_backing_destroy(r->b);
	gfa_pool_destroy(r->pool);
}
