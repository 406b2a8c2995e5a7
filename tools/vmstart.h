/* SPDX-License-Identifier: MIT */
/*
 * gfactl vmstart, private: the run every part of the command works on.
 *
 *   vmstart.c           the command: options checked, the scenario run, torn down
 *   vmstart_opts.c      options, --help, a libvirt domain's RAM and vCPUs
 *   vmstart_pool.c      the pool, its backing and its NUMA zones, in numa.h's order
 *   vmstart_scenario.c  the starts, boot checks, host return, shells: the scenario
 *   vmstart_churn.c     the churn rounds: balloons, VMM allocations, restarts, collapse
 *   vmstart_baseline.c  the same starts on the kernel's memory
 *   vmstart_report.c    samples, percentiles, snapshots and the summary
 *   vmstart_plot.c      --plot through gnuplot
 *   vmstart_socket.c    --socket: each VM in its own process on a host pool service
 *   hostfacts.c         the host's THP settings, available memory, KVM
 */
#ifndef GFACTL_VMSTART_H
#define GFACTL_VMSTART_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <gfa/numa.h>
#include "tools/gfactl.h"
#include "refvmm/shell.h"

#define MAX_VMS       256
#define MAX_SAMPLES   4096
/* the time series of the 2 MiB share, and the VMM-internal frames churn keeps */
#define MAX_SHARES    1024
#define MAX_UNMOVABLE 4096

/* a PROT_NONE page after each baseline VM: the kernel cannot merge VMs' mappings */
#define KERNEL_GUARD 4096UL

struct vmstart_opts {
	uint64_t vms, vcpus, mem, pool, rounds, proactiveness;
	enum gfa_vm_kvm kvm;
	const char *csv, *plot, *stat_file, *libvirt, *domain, *domain_xml;
	const char *socket; /* --socket: each VM in its own process on that gfad */
	int runner_fd;      /* the per-VM process (internal --runner): its report socket */
	unsigned int runner_vm;
	uint32_t given; /* the options given, a bit each (vmstart_opts.c) */
	bool json, no_baseline, quiet, host_thp_keep, lazy;
};

struct samples {
	double v[MAX_SAMPLES];
	size_t n;     /* kept (the first MAX_SAMPLES) */
	size_t total; /* taken */
};

struct run {
	struct vmstart_opts o;
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_pcp *pcp, *zone_pcp[GFA_MAX_ZONES];
	struct gfa_numa_topology *topo;
	struct gfa_numa_pool *np;
	unsigned int nr_zones;
	struct gfa_host_return *hr;
	struct gfa_vm *vm[MAX_VMS];
	struct samples gfa, clean, k4k, kthp; /* clean: starts from the clean pool */
	struct samples kpre;    /* the kernel with gfa's head start: pre-faulted memfds */
	struct samples restart; /* restarts only */
	struct samples attach;  /* --socket: each VM process's gfa_hostpool_attach() */
	/* the fair baselines: the same KVM creation as a gfa start without a shell */
	struct samples kpre_kvm, kthp_kvm, khuge_kvm;
	struct zero_rates zr;
	char why_no_hugetlb[160];
	int64_t pmdpre, pmd4k, pmdthp;
	unsigned int shells; /* made before the timer */
	double t0;
	FILE *csv;
	/* time series: ms since start, huge share % */
	double ts_t[MAX_SHARES], ts_huge[MAX_SHARES];
	size_t ts_n;
	uint64_t unmovable[MAX_UNMOVABLE];
	size_t nr_unmovable;
	bool kvm;
	bool too_big; /* refused: more than the host has available */
	const char *why_not_kvm;
};

/* ---- options (vmstart_opts.c) ---- */
/* 0 to run, 1 after --help, 2 on bad usage (said already); o holds the options. */
int vmstart_opts_parse(int argc, char **argv, struct vmstart_opts *o);
/* What sized each VM's RAM, for messages: never a --mem the user did not give. */
const char *vmstart_mem_source(const struct vmstart_opts *o);
/* The VMM-internal frames churn keeps, in whole 2 MiB blocks. */
uint64_t vmstart_churn_room(const struct vmstart_opts *o);

/* ---- the pool (vmstart_pool.c) ---- */
/* The pool, populated and placed; NULL after saying why (r->too_big: the host's too small). */
struct gfa_pool *vmstart_pool_setup(struct run *r);

/* ---- the scenario (vmstart_scenario.c, vmstart_churn.c) ---- */
/* 0, -1 on failure, -2 when the host is too small for the run (exit 2, as bad usage). */
int vmstart_scenario(struct run *r);
void vmstart_teardown(struct run *r);
int vmstart_start_vm(struct run *r, unsigned int i, const char *phase, unsigned int round);
void vmstart_record_share(struct run *r);
int vmstart_churn(struct run *r);

/* ---- --socket (vmstart_socket.c) ---- */
/* The VMs each in a process of its own on the gfad at o.socket: 0, -1 on failure. */
int vmstart_socket(struct run *r);
/* The process of one VM (--runner): the exit code. */
int vmstart_socket_runner(struct run *r);

/* ---- kernel baselines (vmstart_baseline.c) ---- */
int vmstart_baselines(struct run *r);

/* ---- reporting (vmstart_report.c, vmstart_plot.c) ---- */
void vmstart_sample(struct samples *s, double v);
double vmstart_huge_share(struct run *r, uint64_t *huge, uint64_t *total);
int64_t vmstart_host_backed_bytes(struct run *r);
/* Write the --stat-file snapshot for phase; says so (and returns the error) on failure. */
int vmstart_stat_snapshot(struct run *r, const char *phase);
/* Copy a file to stdout (no shell: the path is the user's). */
int vmstart_print_file(const char *path);
void vmstart_print_text(const char *title, int (*fn)(struct gfa_pool *, char *, size_t),
			struct gfa_pool *pool);
void vmstart_print_counters(struct gfa_pool *pool);
void vmstart_summary(struct run *r);
/* The --plot file name usable, and gnuplot there: says why not. */
bool vmstart_plot_usable(const char *plot);
int vmstart_plot(struct run *r);

/* ---- the host (hostfacts.c) ---- */
/* shmem_enabled to advise for this run unless keep, restored at exit or a fatal signal. */
void hostfacts_shmem_thp_advise(bool keep);
void hostfacts_shmem_thp_restore(void);
/* The host's THP settings and what runs the vCPUs. */
void hostfacts_print(enum gfa_vm_kvm kvm);
#endif
