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
 * memory).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gfa/numa.h>
#include "tools/gfactl.h"
#include "refvmm/shell.h"

#define MAX_VMS 256
#define MAX_SAMPLES 4096

struct vmstart_opts {
	uint64_t vms, vcpus, mem, pool, rounds, proactiveness;
	enum gfa_vm_kvm kvm;
	const char *csv, *plot, *stat_file, *libvirt, *domain, *domain_xml;
	bool json, no_baseline, quiet, host_thp_keep, lazy;
};

struct samples {
	double v[MAX_SAMPLES];
	size_t n;               /* kept (the first MAX_SAMPLES) */
	size_t total;           /* taken */
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
	struct samples gfa, clean, k4k, kthp;   /* clean: starts from the clean pool */
	struct samples kpre;            /* the kernel with gfa's head start: pre-faulted memfds */
	struct samples restart;         /* restarts only */
	/* the fair baselines: the same KVM creation as a gfa start without a shell */
	struct samples kpre_kvm, kthp_kvm, khuge_kvm;
	struct zero_rates zr;
	char why_no_hugetlb[160];
	int64_t pmdpre, pmd4k, pmdthp;
	unsigned int shells;            /* made before the timer */
	double t0;
	FILE *csv;
	/* time series: ms since start, huge share % */
	double ts_t[1024], ts_huge[1024];
	size_t ts_n;
	uint64_t unmovable[4096];
	size_t nr_unmovable;
	bool kvm;
	bool too_big;                   /* refused: more than the host has available */
	const char *why_not_kvm;
};

static void vm_help(void)
{
	printf("usage: gfactl vmstart [options]\n\n"
	       "Start VMs on a gfa pool and on the kernel's own memory, churn, report.\n\n"
	       "  --vms N             VMs to start (default 8)\n"
	       "  --vcpus N           vCPUs per VM (default 2)\n"
	       "  --mem SIZE          RAM per VM, e.g. 128M, 1G (default 128M)\n"
	       "  --pool SIZE         pool size (default VMs x RAM x 1.25)\n"
	       "  --rounds N          churn rounds: stop and restart half the VMs (default 3)\n"
	       "  --proactiveness P   background compaction, 0..100 (default 20)\n"
	       "  --kvm auto|on|off   KVM vCPUs where /dev/kvm works (default auto)\n"
	       "  --libvirt URI --domain NAME   take RAM and vCPUs from a libvirt domain\n"
	       "  --domain-xml FILE   the same from a domain XML file\n"
	       "  --host-thp advise|keep\n"
	       "                      advise (default): as root, set shmem_enabled to 'advise' for\n"
	       "                      this run so the host can map 2 MiB blocks with PMDs, as\n"
	       "                      THP=madvise already lets the kernel baseline; restored at exit\n"
	       "  --no-baseline       skip the kernel baselines\n"
	       "  --csv FILE          write every sample as CSV\n"
	       "  --plot FILE.png     draw start latency per VM and 2 MiB share over time\n"
	       "  --stat-file FILE    where snapshots for 'gfactl stat' go (default %s)\n"
	       "  --json              print the final statistics as JSON too\n"
	       "  --quiet             only the summary and the RESULT line\n"
	       "  --lazy              lazy guests: RAM taken at first touch (the start then\n"
	       "                      includes the first touch of all of it, as the full one\n"
	       "                      includes taking and zeroing it)\n"
	       "exit status: 0 ok, 1 failure, 2 bad usage or more memory than the host has\n"
	       "available (the pool, and the kernel baselines' VMs beside it, within 80%%)\n",
	       default_stat_file());
}

/* ---- options ---- */

static int parse_kvm(const char *v, enum gfa_vm_kvm *out)
{
	if (!strcmp(v, "auto"))
		*out = GFA_VM_KVM_AUTO;
	else if (!strcmp(v, "on"))
		*out = GFA_VM_KVM_ON;
	else if (!strcmp(v, "off"))
		*out = GFA_VM_KVM_OFF;
	else {
		fprintf(stderr, "gfactl: --kvm: '%s' is not auto, on or off\n", v);
		return -1;
	}
	return 0;
}

enum {
	OPT_VMS = 256, OPT_VCPUS, OPT_MEM, OPT_POOL, OPT_ROUNDS, OPT_PROACTIVENESS, OPT_KVM,
	OPT_LIBVIRT, OPT_DOMAIN, OPT_DOMAIN_XML, OPT_HOST_THP, OPT_CSV, OPT_PLOT, OPT_STAT_FILE,
	OPT_JSON, OPT_NO_BASELINE, OPT_QUIET, OPT_LAZY,
};

static const struct option vmstart_options[] = {
	{ "vms", required_argument, NULL, OPT_VMS },
	{ "vcpus", required_argument, NULL, OPT_VCPUS },
	{ "mem", required_argument, NULL, OPT_MEM },
	{ "pool", required_argument, NULL, OPT_POOL },
	{ "rounds", required_argument, NULL, OPT_ROUNDS },
	{ "proactiveness", required_argument, NULL, OPT_PROACTIVENESS },
	{ "kvm", required_argument, NULL, OPT_KVM },
	{ "libvirt", required_argument, NULL, OPT_LIBVIRT },
	{ "domain", required_argument, NULL, OPT_DOMAIN },
	{ "domain-xml", required_argument, NULL, OPT_DOMAIN_XML },
	{ "host-thp", required_argument, NULL, OPT_HOST_THP },
	{ "csv", required_argument, NULL, OPT_CSV },
	{ "plot", required_argument, NULL, OPT_PLOT },
	{ "stat-file", required_argument, NULL, OPT_STAT_FILE },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "no-baseline", no_argument, NULL, OPT_NO_BASELINE },
	{ "quiet", no_argument, NULL, OPT_QUIET },
	{ "lazy", no_argument, NULL, OPT_LAZY },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* One option's value into o: true, or false after saying what is wrong. */
static bool apply_opt(int c, const char *v, struct vmstart_opts *o)
{
	switch (c) {
	case OPT_VMS:           return parse_u64("--vms", v, 1, MAX_VMS, &o->vms);
	case OPT_VCPUS:         return parse_u64("--vcpus", v, 1, 64, &o->vcpus);
	case OPT_MEM:           return parse_mib("--mem", v, &o->mem);
	case OPT_POOL:          return parse_mib("--pool", v, &o->pool);
	case OPT_ROUNDS:        return parse_u64("--rounds", v, 0, 1000, &o->rounds);
	case OPT_PROACTIVENESS: return parse_u64("--proactiveness", v, 0, 100, &o->proactiveness);
	case OPT_KVM:           return !parse_kvm(v, &o->kvm);
	case OPT_LIBVIRT:       o->libvirt = v; return true;
	case OPT_DOMAIN:        o->domain = v; return true;
	case OPT_DOMAIN_XML:    o->domain_xml = v; return true;
	case OPT_CSV:           o->csv = v; return true;
	case OPT_PLOT:          o->plot = v; return true;
	case OPT_STAT_FILE:     o->stat_file = v; return true;
	case OPT_JSON:          o->json = true; return true;
	case OPT_NO_BASELINE:   o->no_baseline = true; return true;
	case OPT_QUIET:         o->quiet = true; return true;
	case OPT_LAZY:          o->lazy = true; return true;
	case OPT_HOST_THP:
		if (!strcmp(v, "advise") || !strcmp(v, "keep")) {
			o->host_thp_keep = !strcmp(v, "keep");
			return true;
		}
		fprintf(stderr, "gfactl vmstart: --host-thp: '%s' is not advise or keep\n", v);
		return false;
	default:
		return false;
	}
}

/* 0 to run, 1 after --help, -1 on bad usage (getopt_long has said what). */
static int parse_opts(int argc, char **argv, struct vmstart_opts *o)
{
	int c;

	*o = (struct vmstart_opts){ .vms = 8, .vcpus = 2, .mem = 128 * MiB, .rounds = 3,
				    .proactiveness = 20, .stat_file = default_stat_file() };
	optind = 1;     /* (gfactl's dispatcher may have run getopt already) */
	opterr = 1;
	while ((c = getopt_long(argc, argv, "+h", vmstart_options, NULL)) != -1) {
		if (c == 'h') {
			vm_help();
			return 1;
		}
		if (c == '?' || !apply_opt(c, optarg, o)) {
			if (c == '?')
				fprintf(stderr, "gfactl vmstart: see --help\n");
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gfactl vmstart: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		return -1;
	}
	return 0;
}

/* RAM and vCPUs from a libvirt domain, if asked. */
static int apply_domain(struct vmstart_opts *o)
{
	struct gfa_domain_spec *spec;
	char err[1024], line[1024], size[48];
	int ret;

	if (!o->domain_xml && !o->libvirt && !o->domain)
		return 0;
	if (!o->domain_xml && (!o->libvirt || !o->domain)) {
		fprintf(stderr, "gfactl vmstart: --libvirt and --domain go together\n");
		return -1;
	}
	spec = calloc(1, sizeof(*spec));
	if (!spec)
		return -1;
	ret = o->domain_xml ? gfa_domain_from_xml_file(o->domain_xml, spec, err, sizeof(err))
			    : gfa_domain_from_libvirt(o->libvirt, o->domain, spec, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "gfactl vmstart: %s\n", err);
		free(spec);
		return -1;
	}
	gfa_domain_format(spec, line, sizeof(line));
	printf("domain: %s\n", line);
	gfa_domain_format_size(spec->memory_bytes, size, sizeof(size));
	/* in the import's own form, so each domain message names its file or domain once */
	if (spec->memory_bytes > (16ULL << 40)) {      /* as --mem: pool sizes must not wrap */
		fprintf(stderr, "gfactl vmstart: %s: %s: the domain's memory, %s, is more than "
			"the 16 TiB a VM may have here; accepted: 16 TiB at most\n",
			spec->origin, spec->nr_cells ? "<numa>" : "<memory>", size);
		ret = -1;
	} else if (gfa_domain_check_pages(spec, NULL, err, sizeof(err))) {
		fprintf(stderr, "gfactl vmstart: %s\n", err);   /* as libvirt at start */
		ret = -1;
	}
	if (ret) {
		free(spec);
		return -1;
	}
	o->mem = (spec->memory_bytes + 2 * MiB - 1) & ~(2 * MiB - 1);
	o->vcpus = spec->vcpus > 64 ? 64 : spec->vcpus;
	if (spec->vcpus > 64)
		printf("domain has %u vCPUs, more than the 64 of gfactl's test VM: each VM runs "
		       "64 vCPU threads over the domain's %s\n", spec->vcpus, size);
	if (spec->hugepages)
		printf("domain asks for hugepage backing: gfa backs each 2 MiB range with an "
		       "order-9 block (host THP / 2 MiB EPT), not hugetlbfs\n");
	if (spec->nr_cells > 1)
		printf("domain has %u NUMA cells: guest RAM is placed on the pool's zones; "
		       "cells are not split across host nodes in this run\n", spec->nr_cells);
	free(spec);
	return 0;
}

/* What sized each VM's RAM, for messages: never a --mem the user did not give. */
static const char *mem_source(const struct vmstart_opts *o)
{
	return o->domain_xml || o->domain ? "the domain's memory" : "--mem";
}

static void sample(struct samples *s, double v)
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

/* ---- gfa starts ---- */

static int start_vm(struct run *r, unsigned int i, const char *phase, unsigned int round)
{
	/* VMs go round-robin over the nodes, each built from its node's zone */
	unsigned int zone = i % r->nr_zones;
	struct gfa_vm_config vc = { .mem_bytes = r->o.mem, .vcpus = (unsigned int)r->o.vcpus,
				    .kvm = r->o.kvm, .zone = zone, .pcp = r->zone_pcp[zone],
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
	sample(&r->gfa, dt);
	sample(round ? &r->restart : &r->clean, dt);
	gfa_guest_stat(gfa_vm_guest(r->vm[i]), &st);
	r->kvm = gfa_vm_is_kvm(r->vm[i], &r->why_not_kvm);
	if (r->csv)
		fprintf(r->csv, "start,gfa,%s,%u,%u,%.3f,%.1f\n", phase, round, i, dt,
			100.0 * (double)st.huge_ranges / (double)(st.huge_ranges + st.small_ranges));
	if (!r->o.quiet)
		printf("  VM %2u %-8s start %7.2f ms (create %.2f)  2 MiB ranges %lu/%lu  zeroed %lu "
		       "MiB  host PMDs %ld MiB\n", i, phase, dt, create, (unsigned long)st.huge_ranges,
		       (unsigned long)(st.huge_ranges + st.small_ranges),
		       (unsigned long)(st.zeroed_frames >> (20 - GFA_FRAME_SHIFT)),
		       (long)(gfa_smaps_pmd_bytes(gfa_guest_hva(gfa_vm_guest(r->vm[i])), r->o.mem) /
			      (int64_t)MiB));
	if (!r->o.quiet && r->o.lazy)
		printf("         lazy: %lu first touches (%lu at 2 MiB), %lu refused, %lu MiB "
		       "populated\n", (unsigned long)st.lazy_faults,
		       (unsigned long)st.lazy_huge_faults, (unsigned long)st.lazy_refused,
		       (unsigned long)(st.populated_bytes / MiB));
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

static double huge_share(struct run *r, uint64_t *huge, uint64_t *total)
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

static void record_share(struct run *r)
{
	uint64_t h, t;

	/* full: the last slot follows the run, so the share printed is the current one */
	size_t i = r->ts_n < 1024 ? r->ts_n++ : 1023;

	r->ts_t[i] = now_ms() - r->t0;
	r->ts_huge[i] = huge_share(r, &h, &t);
	if (r->csv)
		fprintf(r->csv, "share,gfa,,,,%.1f,%.1f\n", r->ts_t[i], r->ts_huge[i]);
}

/* VMM-internal unmovable allocations (virtio rings, page tables) between starts. */
static void vmm_internal_allocs(struct run *r, unsigned int n)
{
	for (unsigned int k = 0; k < n && r->nr_unmovable < 4096; k++) {
		int64_t pfn = gfa_alloc(r->pool, 0, 0, GFA_MT_UNMOVABLE, 1, 0);

		if (pfn >= 0)
			r->unmovable[r->nr_unmovable++] = (uint64_t)pfn;
	}
}

static int64_t host_backed_bytes(struct run *r)
{
	int64_t sum = 0;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(r->pool); z++) {
		int64_t n = gfa_memfd_allocated_bytes(gfa_backing_zone_fd(r->b, z));

		if (n > 0)
			sum += n;
	}
	return sum;
}

/*
 * The guests' balloon drivers give back (or take again) every 8th page of the top
 * quarter of RAM, as virtio-balloon reports scattered pages: this splits order-9
 * blocks, so after deflation those ranges are backed by small blocks until collapse.
 */
static int64_t balloon_all(struct run *r, bool inflate)
{
	uint64_t lo = (r->o.mem - r->o.mem / 4) & ~(2 * MiB - 1), n = 0;
	struct gfa_gpa_range *q = malloc(((r->o.mem - lo) / (8 * GFA_FRAME_SIZE) + 1) * sizeof(*q));
	int64_t frames = 0;

	if (!q)
		return -ENOMEM;
	for (uint64_t gpa = lo; gpa < r->o.mem; gpa += 8 * GFA_FRAME_SIZE)
		q[n++] = (struct gfa_gpa_range){ gpa, GFA_FRAME_SIZE };
	for (unsigned int i = 0; i < r->o.vms; i++) {
		struct gfa_guest *g = gfa_vm_guest(r->vm[i]);
		int64_t got = inflate ? gfa_balloon_inflate(g, q, (unsigned int)n)
				      : gfa_balloon_deflate(g, q, (unsigned int)n);

		if (got < 0) {
			fprintf(stderr, "gfactl vmstart: VM %u: balloon %s: %s\n", i,
				inflate ? "inflate" : "deflate", strerror((int)-got));
			free(q);
			return got;
		}
		frames += got;
	}
	free(q);
	return frames;
}

/* Write the --stat-file snapshot for `phase`; says so (and returns the error) on failure. */
static int stat_snapshot(struct run *r, const char *phase)
{
	int err = write_stat_json(r->o.stat_file, r->pool, phase, NULL);

	if (err)
		fprintf(stderr, "gfactl vmstart: --stat-file %s: %s\n", r->o.stat_file,
			strerror(-err));
	return err;
}

/* Copy a file to stdout (no shell: the path is the user's). */
static int print_file(const char *path)
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

static int churn(struct run *r)
{
	for (unsigned int round = 1; round <= r->o.rounds; round++) {
		unsigned int collapsed = 0;
		int64_t ballooned = balloon_all(r, true);
		double t0;

		if (ballooned < 0)
			return -1;
		t0 = now_ms();
		gfa_host_return_quiesce(r->hr, 30000);
		if (!r->o.quiet)
			printf("  round %u: balloons took %ld MiB in 4 KiB pages, host-backed now %ld MiB "
			       "(%.0f ms to quiesce)\n", round, (long)(ballooned * 4096 / (int64_t)MiB),
			       (long)(host_backed_bytes(r) / (int64_t)MiB), now_ms() - t0);
		if (balloon_all(r, false) < 0)
			return -1;
		record_share(r);
		vmm_internal_allocs(r, 32);
		/* each VM of the half stops and starts again (a reboot): the restart takes
		 * the shell the stop gave back, and the frames the stop left dirty are
		 * being zeroed in the background meanwhile */
		for (unsigned int i = round % 2; i < r->o.vms; i += 2) {
			gfa_vm_destroy(r->vm[i]);
			r->vm[i] = NULL;
			if (start_vm(r, i, "restart", round))
				return -1;
		}
		/* khugepaged's pass: collapse what started on small blocks */
		for (unsigned int i = 0; i < r->o.vms; i++)
			collapsed += (unsigned int)gfa_guest_collapse(gfa_vm_guest(r->vm[i]), 64);
		record_share(r);
		if (!r->o.quiet)
			printf("  round %u: %u ranges collapsed, 2 MiB share %.1f%%\n", round, collapsed,
			       r->ts_huge[r->ts_n - 1]);
		stat_snapshot(r, "churn");
	}
	return 0;
}

/* ---- kernel baselines ---- */

/* a PROT_NONE page after each baseline VM: the kernel cannot merge VMs' mappings */
#define KERNEL_GUARD 4096UL

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
				fprintf(stderr, "gfactl vmstart: %s baseline: %s\n", name, strerror(-err));
				n++;
				break;
			}
			if (!warm) {
				sample(s, dt);
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

static int baselines(struct run *r)
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

/* ---- reporting ---- */

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

static void print_text(const char *title, int (*fn)(struct gfa_pool *, char *, size_t),
		       struct gfa_pool *pool)
{
	char buf[16384];

	fn(pool, buf, sizeof(buf));
	printf("%s\n%s", title, buf);
}

static void print_counters(struct gfa_pool *pool)
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
	       "pgalloc_fallback %lu pageblock_steal %lu pgalloc_fail %lu (vCPU caches ordered by %s)\n",
	       (unsigned long)v.pgalloc_blocks, (unsigned long)v.pgfree_blocks,
	       (unsigned long)v.pcp_alloc,
	       (unsigned long)v.pcp_free, (unsigned long)v.pgalloc_fallback,
	       (unsigned long)v.pageblock_steal, (unsigned long)v.pgalloc_fail,
	       gfa_pcp_sync_mode());
}

static int plot(struct run *r)
{
	char dat[PATH_MAX];
	FILE *f;
	int ret, fd;

	/* the paths go into gnuplot strings (no shell sees them): no quotes, no newlines */
	if (strpbrk(r->o.plot, "'\"\n\\") ||
	    (size_t)snprintf(dat, sizeof(dat), "%s.XXXXXX", r->o.plot) >= sizeof(dat)) {
		fprintf(stderr, "gfactl vmstart: --plot: unusable file name\n");
		return -1;
	}
	if (system("command -v gnuplot >/dev/null 2>&1")) {
		fprintf(stderr, "gfactl vmstart: --plot %s: gnuplot is not installed "
			"(apt-get install gnuplot-nox)\n", r->o.plot);
		return -1;
	}
	fd = mkstemp(dat);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		fprintf(stderr, "gfactl vmstart: --plot %s: %s\n", dat, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(dat);
		}
		return -1;
	}
	for (size_t i = 0; i < r->gfa.n || i < r->ts_n; i++)
		fprintf(f, "%zu %.3f %.1f %.1f\n", i, i < r->gfa.n ? r->gfa.v[i] : 0.0 / 0.0,
			i < r->ts_n ? r->ts_t[i] / 1000 : 0.0 / 0.0, i < r->ts_n ? r->ts_huge[i] : 0.0 / 0.0);
	fclose(f);
	f = popen("gnuplot", "w");
	ret = -1;
	if (f) {
		fprintf(f, "set terminal png size 1000,420; set output '%s'; set multiplot layout 1,2\n"
			"set title 'VM start latency (gfa)'; set xlabel 'start #'; set ylabel 'ms'\n"
			"plot '%s' using 1:2 with linespoints title 'start'\n"
			"set title '2 MiB share of guest RAM'; set xlabel 's'; set ylabel '%%'\n"
			"set yrange [0:105]\n"
			"plot '%s' using 3:4 with linespoints title 'huge share'\nunset multiplot\n",
			r->o.plot, dat, dat);
		ret = pclose(f);
	}
	unlink(dat);
	if (ret) {
		fprintf(stderr, "gfactl vmstart: --plot %s: gnuplot failed\n", r->o.plot);
		return -1;
	}
	printf("plot written to %s\n", r->o.plot);
	return 0;
}

static uint64_t mem_available(void)
{
	char line[256];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

/*
 * One zone per NUMA node (libnuma), bound with MPOL_BIND and verified; else one zone.
 * VMs go round-robin over the zones (start_vm) and the VMM's own unmovable frames to
 * zone 0, so each zone is sized for what lands on it, not 1/nodes of the pool.
 */
static int make_zones(struct run *r, uint64_t pool, uint64_t unmov, struct gfa_pool_config *pc)
{
	uint64_t frames[GFA_MAX_ZONES], per_vm = (pool > unmov ? pool - unmov : 0) / r->o.vms;
	unsigned int n;

	r->topo = gfa_numa_topology_discover();
	n = r->topo ? r->topo->nr_nodes : 0;
	if (n > 1 && n <= GFA_MAX_ZONES) {
		for (unsigned int i = 0; i < n; i++) {
			uint64_t vms = i < r->o.vms ? (r->o.vms - i + n - 1) / n : 0;
			uint64_t bytes = per_vm * vms + (i ? 0 : unmov);

			bytes = (bytes + 2 * MiB - 1) & ~(2 * MiB - 1);
			frames[i] = bytes ? bytes >> GFA_FRAME_SHIFT : GFA_PAGEBLOCK_FRAMES;
		}
		if (!gfa_numa_pool_config_nodes(pc, r->topo, frames))
			return (int)n;
	}
	gfa_numa_topology_free(r->topo);
	r->topo = NULL;
	gfa_pool_config_init(pc, pool >> GFA_FRAME_SHIFT);
	return 1;
}

/* Bind each zone to its node, fault it in there, and check where it landed. */
static int place_zones(struct run *r)
{
	struct gfa_numa_placement pl[GFA_MAX_ZONES];
	char line[256];
	int err;

	if (!r->topo) {
		printf("NUMA: one node: one zone\n");
		return gfa_backing_populate(r->b);
	}
	r->np = gfa_numa_attach(r->pool, r->topo);
	err = r->np ? gfa_numa_bind_pool(r->np) : -errno;
	if (!err)
		err = gfa_numa_populate_pool(r->np);
	if (err) {
		/* the numa calls return a negative errno; attach sets errno */
		fprintf(stderr, "gfactl vmstart: binding zones to nodes: %s\n", strerror(-err));
		return -1;
	}
	err = gfa_numa_verify_pool(r->np, pl);
	for (unsigned int z = 0; z < r->nr_zones; z++) {
		gfa_numa_placement_text(&pl[z], line, sizeof(line));
		printf("NUMA: %s", line);   /* the text ends its line */
	}
	if (err)
		fprintf(stderr, "gfactl vmstart: zones are not where they should be (%s)\n", strerror(-err));
	return err;
}

/* The VMM-internal frames churn keeps (32 a round, at most 4096), in whole 2 MiB blocks. */
static uint64_t churn_room(const struct vmstart_opts *o)
{
	uint64_t b = (o->rounds * 32 < 4096 ? o->rounds * 32 : 4096) * GFA_FRAME_SIZE;

	return (b + 2 * MiB - 1) & ~(2 * MiB - 1);
}

static struct gfa_pool *make_pool(struct run *r)
{
	struct gfa_pool_config pc;
	struct gfa_compact_config cc = { .proactiveness = (unsigned int)r->o.proactiveness };
	struct gfa_backing_config bc = { .populate = false };
	/* room for what churn keeps beside the VMs (checked against --pool too) */
	uint64_t pool = r->o.pool ? r->o.pool
				  : ((r->o.vms * r->o.mem * 5 / 4 + 2 * MiB - 1) & ~(2 * MiB - 1)) +
				    churn_room(&r->o);
	double t0 = now_ms();
	uint64_t avail = mem_available();
	/* the kernel baselines run while the pool and its VMs are still there: VMs x RAM
	 * (and a guard page each) on top of the pool */
	uint64_t need = pool + (r->o.no_baseline ? 0 : r->o.vms * (r->o.mem + KERNEL_GUARD));
	uint64_t total = 0;

	if (avail && need > avail / 10 * 8) {
		char mem[48];

		gfa_domain_format_size(r->o.mem, mem, sizeof(mem));
		fprintf(stderr, "gfactl vmstart: --vms %lu x %s %s needs %lu MiB (a %lu MiB "
			"pool%s), more than 80%% of the %lu MiB available; use fewer or smaller "
			"VMs%s\n", (unsigned long)r->o.vms, mem_source(&r->o), mem,
			(unsigned long)(need / MiB), (unsigned long)(pool / MiB),
			r->o.no_baseline ? "" : ", and the kernel baselines' VMs beside it",
			(unsigned long)(avail / MiB), r->o.no_baseline ? "" : " (or --no-baseline)");
		r->too_big = true;
		return NULL;
	}
	r->nr_zones = (unsigned int)make_zones(r, pool, churn_room(&r->o), &pc);
	for (unsigned int z = 0; z < pc.nr_zones; z++)
		total += pc.zones[z].nr_frames << GFA_FRAME_SHIFT;
	r->pool = gfa_pool_create(&pc);
	if (!r->pool) {
		fprintf(stderr, "gfactl vmstart: pool of %lu MiB: %s\n", (unsigned long)(pool / MiB),
			strerror(errno));
		return NULL;
	}
	gfa_compact_configure(r->pool, &cc);
	r->b = gfa_backing_create(r->pool, &bc);
	if (!r->b) {
		fprintf(stderr, "gfactl vmstart: backing the pool with memfds: %s\n", strerror(errno));
		return NULL;
	}
	if (place_zones(r))
		return NULL;
	for (unsigned int z = 0; z < r->nr_zones; z++)
		r->zone_pcp[z] = gfa_pcp_create(r->pool, z);
	r->pcp = r->zone_pcp[0];
	printf("pool: %lu MiB in %u zone(s), memfd-backed, populated in %.0f ms (resident before "
	       "any VM starts; not part of start latency)\n", (unsigned long)(total / MiB),
	       gfa_pool_nr_zones(r->pool), now_ms() - t0);
	return r->pool;
}

#define SHMEM_THP "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
static char shmem_thp_saved[32];
static size_t shmem_thp_saved_len;  /* for the signal handler: no strlen there */

static void shmem_thp_restore(void)
{
	FILE *f;

	if (!shmem_thp_saved[0])
		return;
	f = fopen(SHMEM_THP, "w");
	if (f) {
		fputs(shmem_thp_saved, f);
		fclose(f);
	}
	shmem_thp_saved[0] = '\0';
	shmem_thp_saved_len = 0;
}

/* A fatal signal restores shmem_enabled too (async-signal-safe calls only), then kills. */
static void shmem_thp_signal(int sig)
{
	int fd = shmem_thp_saved_len ? open(SHMEM_THP, O_WRONLY) : -1;   /* (restored already) */

	if (fd >= 0) {
		ssize_t n = write(fd, shmem_thp_saved, shmem_thp_saved_len);

		(void)n;
		close(fd);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

/* shmem_enabled=never keeps memfd blocks on 4 KiB host pages: lift it for this run. */
static void shmem_thp_advise(struct run *r)
{
	struct gfa_thp_report thp;
	FILE *f;

	gfa_host_thp_report(&thp);
	if (r->o.host_thp_keep || thp.shmem_thp_possible || !strcmp(thp.shmem_enabled, "unknown"))
		return;
	f = fopen(SHMEM_THP, "w");
	if (!f || fputs("advise", f) < 0 || fclose(f)) {
		printf("host: could not set shmem_enabled to advise (%s): 2 MiB blocks stay on 4 KiB "
		       "host pages in this run\n", strerror(errno));
		return;
	}
	snprintf(shmem_thp_saved, sizeof(shmem_thp_saved), "%s", thp.shmem_enabled);
	shmem_thp_saved_len = strlen(shmem_thp_saved);
	atexit(shmem_thp_restore);
	{
		struct sigaction sa = { .sa_handler = shmem_thp_signal, .sa_flags = SA_RESETHAND };

		static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
		struct sigaction old;

		/* a signal the caller ignores stays ignored (nohup, background jobs) */
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			if (!sigaction(sigs[i], NULL, &old) && old.sa_handler != SIG_IGN)
				sigaction(sigs[i], &sa, NULL);
	}
	printf("host: shmem_enabled %s -> advise for this run (restored at exit; --host-thp keep "
	       "leaves it)\n", thp.shmem_enabled);
}

static void print_host(struct run *r)
{
	struct gfa_thp_report thp;
	char why[160];
	int kvm = r->o.kvm != GFA_VM_KVM_OFF && gfa_kvm_available(why, sizeof(why));

	gfa_host_thp_report(&thp);
	printf("host: THP enabled=%s, shmem_enabled=%s (%s)\n", thp.thp_enabled, thp.shmem_enabled,
	       thp.shmem_thp_possible ? "memfd blocks can be PMD-mapped"
				      : "memfd blocks are mapped with 4 KiB pages by the host");
	if (r->o.kvm == GFA_VM_KVM_OFF)
		printf("vCPUs: host threads (KVM turned off with --kvm off)\n");
	else if (!kvm)
		printf("vCPUs: host threads running the guest workload (%s)\n", why);
	else
		printf("vCPUs: KVM%s\n", gfa_kvm_is_software()
		       ? " (software KVM, kvm_pvm: guests boot and check memory, kept short)" : "");
}

/* The strongest fair baseline: the lowest p50 of those run; its name in *name. */
static double strongest(struct run *r, const char **name)
{
	struct { struct samples *s; const char *name; } b[] = {
		{ &r->kpre_kvm, "pre-faulted memfd + KVM" },
		{ &r->kthp_kvm, "MADV_HUGEPAGE + KVM" },
		{ &r->khuge_kvm, "hugetlbfs + KVM" },
	};
	double best = 0;

	*name = "none";
	for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
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
	printf("gfa restart (churn):       p50 %8.2f ms  p99 %8.2f ms  %s\n", r50,
	       p99(&r->restart), starts_text(&r->restart));
	printf("zeroing 128 MiB: %s %.1f GB/s vs memset %.1f GB/s (p50 of 7, interleaved): "
	       "%.2fx (goal >= 1.8: %s)\n", r->zr.method, r->zr.zero_gbs, r->zr.memset_gbs, zratio,
	       met(zratio >= 1.8));
	printf("ratios (p50, lower is better): clean start / pre-faulted+KVM %.3f (goal <= 1.0: "
	       "%s); / pre-faulted without KVM %.3f (aim <= 1.0: %s); / strongest (%s) %.3f\n",
	       vs_kvm, met(vs_kvm <= 1.0), vs_pre, met(vs_pre <= 1.0), sname, c50 / best);
	printf("ratios: restart / MADV_HUGEPAGE+KVM %.3f (goal <= 0.5: %s); restart / gfa clean "
	       "start %.3f (goal <= 1.5: %s)\n", rs_thp, met(rs_thp <= 0.5), rs_clean,
	       met(rs_clean <= 1.5));
	printf("RESULT vmstart vs_prefaulted_kvm=%.3f vs_strongest=%.3f restart_vs_kernel_thp=%.3f "
	       "restart_vs_clean=%.3f zero_vs_memset=%.3f restart_p50_ms=%.3f "
	       "prefaulted_kvm_p50_ms=%.3f kernel_thp_kvm_p50_ms=%.3f hugetlb_kvm_p50_ms=%.3f "
	       "zero_gbs=%.2f memset_gbs=%.2f shells=%u kvm=%d\n", vs_kvm, c50 / best, rs_thp,
	       rs_clean, zratio, r50, p50(&r->kpre_kvm), p50(&r->kthp_kvm),
	       r->khuge_kvm.n ? p50(&r->khuge_kvm) : 0.0, r->zr.zero_gbs, r->zr.memset_gbs,
	       r->shells, r->kvm);
}

static void summary(struct run *r)
{
	uint64_t huge, total, all = r->o.vms * r->o.mem;
	double share = huge_share(r, &huge, &total);
	double g50 = p50(&r->gfa), g99 = p99(&r->gfa);
	/* the goals are for starts from a pool of clean frames; restarts zero dirty ones */
	double c50 = p50(&r->clean), c99 = p99(&r->clean);
	double r50 = r->restart.n ? p50(&r->restart) : 0;
	int64_t win_pmd = 0, backed = host_backed_bytes(r);

	for (unsigned int i = 0; i < r->o.vms; i++)
		if (r->vm[i])
			win_pmd += gfa_smaps_pmd_bytes(gfa_guest_hva(gfa_vm_guest(r->vm[i])), r->o.mem);
	printf("\n== summary: %lu VMs x %lu vCPUs x %lu MiB, %s ==\n", (unsigned long)r->o.vms,
	       (unsigned long)r->o.vcpus, (unsigned long)(r->o.mem / MiB),
	       r->kvm ? "KVM vCPUs" : "host-thread vCPUs");
	printf("gfa start, clean pool:    p50 %8.2f ms  p99 %8.2f ms  %s\n", c50, c99,
	       starts_text(&r->clean));
	printf("gfa start, all (restarts zero the frames stopped VMs left dirty):\n"
	       "                          p50 %8.2f ms  p99 %8.2f ms  %s\n", g50, g99,
	       starts_text(&r->gfa));
	printf("guest RAM on 2 MiB blocks: %.1f%% (%lu of %lu ranges)\n", share,
	       (unsigned long)huge, (unsigned long)total);
	printf("host PMD mappings of guest windows: %ld MiB of %lu MiB\n", (long)(win_pmd / (int64_t)MiB),
	       (unsigned long)(all / MiB));
	printf("host-backed bytes of the pool (memfd st_blocks): %ld MiB\n", (long)(backed / (int64_t)MiB));
	if (r->o.no_baseline) {
		printf("RESULT vmstart gfa_p50_ms=%.3f gfa_p99_ms=%.3f all_p50_ms=%.3f huge_share=%.1f "
		       "restart_p50_ms=%.3f\n", c50, c99, g50, share, r50);
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

/*
 * Return memory to the host from now on, keeping one VM's worth of populated free
 * frames so the next start does not wait for host faults (the HIGH reserve of
 * docs/decisions.md, entry 21).
 */
static int start_host_return(struct run *r)
{
	struct gfa_release_policy rp = { .high = r->o.mem >> GFA_FRAME_SHIFT,
					 .low = r->o.mem >> (GFA_FRAME_SHIFT + 1), .min_empty_frac = 4 };
	struct gfa_host_return_stat st;

	for (unsigned int z = 0; z < gfa_pool_nr_zones(r->pool); z++)
		gfa_zone_set_release_policy(r->pool, z, &rp);
	r->hr = gfa_host_return_start(r->pool, r->b, NULL);
	if (!r->hr) {
		fprintf(stderr, "gfactl vmstart: returning memory to the host: %s\n", strerror(errno));
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
	       "before any VM starts, not part of start latency)\n", n, now_ms() - t0,
	       (unsigned long)r->o.vcpus);
}

static int scenario(struct run *r)
{
	double boot_ms = 0, worst = 0;

	shmem_thp_advise(r);
	print_host(r);
	if (!make_pool(r))
		return r->too_big ? -2 : -1;   /* too big for this host: exit 2, as bad usage */
	/* the first snapshot now: a --stat-file that cannot be written is an error */
	if (stat_snapshot(r, "created"))
		return -1;
	if (gfa_compactd_start(r->pool))
		fprintf(stderr, "gfactl vmstart: background compaction did not start\n");
	if (!r->o.quiet)
		print_text("buddyinfo before:", gfa_pool_buddyinfo, r->pool);
	make_shells(r);
	printf("starting %lu VMs\n", (unsigned long)r->o.vms);
	for (unsigned int i = 0; i < r->o.vms; i++)
		if (start_vm(r, i, "start", 0))
			return -1;
	record_share(r);
	if (r->kvm) {
		for (unsigned int i = 0; i < r->o.vms; i++) {
			if (kvm_boot_check(r, i, &boot_ms))
				return -1;
			worst = boot_ms > worst ? boot_ms : worst;
		}
		printf("KVM guests booted and verified their memory (slowest %.1f ms)\n", worst);
	}
	stat_snapshot(r, "started");
	if (start_host_return(r))
		return -1;
	printf("churn: %lu rounds of balloon inflate/deflate and stopping and restarting half "
	       "the VMs\n", (unsigned long)r->o.rounds);
	if (churn(r))
		return -1;
	gfa_host_return_quiesce(r->hr, 30000);
	if (!r->o.quiet) {
		struct gfa_host_return_stat st;

		print_text("buddyinfo after:", gfa_pool_buddyinfo, r->pool);
		print_counters(r->pool);
		if (r->np) {
			char text[8192];

			gfa_numa_stat_text(r->np, text, sizeof(text));
			printf("%s", text);
		}
		gfa_host_return_stat(r->hr, &st);
		printf("host return: %lu MiB released, %lu MiB populated again, %lu MiB failed, "
		       "%lu passes, %lu frames taken back from idle vCPU caches\n",
		       (unsigned long)(st.bytes_released / MiB),
		       (unsigned long)(st.bytes_populated / MiB), (unsigned long)(st.bytes_failed / MiB),
		       (unsigned long)st.passes, (unsigned long)st.pcp_frames_drained);
	}
	stat_snapshot(r, "done");
	if (!r->o.no_baseline) {
		if (baselines(r))
			return -1;
	}
	summary(r);
	if (r->o.json && print_file(r->o.stat_file)) {
		fprintf(stderr, "gfactl vmstart: could not print %s\n", r->o.stat_file);
		return -1;
	}
	return r->o.plot ? plot(r) : 0;
}

static void teardown(struct run *r)
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

/* --plot is checked before the run, not after it. */
static bool plot_usable(const char *plot)
{
	if (!*plot || strpbrk(plot, "'\"\n\\") || strlen(plot) + 8 >= PATH_MAX) {
		fprintf(stderr, "gfactl vmstart: --plot: unusable file name '%s'\n", plot);
		return false;
	}
	if (system("command -v gnuplot >/dev/null 2>&1")) {
		fprintf(stderr, "gfactl vmstart: --plot %s: gnuplot is not installed "
			"(apt-get install gnuplot-nox)\n", plot);
		return false;
	}
	return true;
}

int cmd_vmstart(int argc, char **argv)
{
	struct run *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return 1;
	ret = parse_opts(argc, argv, &r->o);
	if (ret) {
		free(r);
		return ret > 0 ? 0 : 2;
	}
	if (apply_domain(&r->o)) {
		free(r);
		return 2;
	}
	if (r->o.mem % (2 * MiB) || r->o.mem < 4 * MiB) {
		fprintf(stderr, "gfactl vmstart: %s must be a multiple of 2 MiB, at least 4 MiB\n",
			mem_source(&r->o));
		free(r);
		return 2;
	}
	if (r->o.pool && (r->o.pool < r->o.vms * r->o.mem + churn_room(&r->o) ||
			  r->o.pool % (2 * MiB))) {
		fprintf(stderr, "gfactl vmstart: --pool must be a multiple of 2 MiB and hold --vms x "
			"%s and the frames churn keeps (%lu MiB)\n", mem_source(&r->o),
			(unsigned long)((r->o.vms * r->o.mem + churn_room(&r->o)) / MiB));
		free(r);
		return 2;
	}
	if (r->o.plot && !plot_usable(r->o.plot)) {
		free(r);
		return 2;
	}
	if (r->o.csv) {
		r->csv = fopen(r->o.csv, "w");
		if (!r->csv) {
			fprintf(stderr, "gfactl vmstart: --csv %s: %s\n", r->o.csv, strerror(errno));
			free(r);
			return 2;
		}
		fprintf(r->csv, "kind,memory,phase,round,vm,ms_or_t,huge_pct\n");
	}
	r->t0 = now_ms();
	ret = scenario(r);
	teardown(r);
	shmem_thp_restore();
	if (r->csv)
		fclose(r->csv);
	free(r);
	return ret == -2 ? 2 : ret ? 1 : 0;
}
