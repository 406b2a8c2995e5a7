// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart's options: --help, the flags into struct vmstart_opts, RAM and vCPUs
 * from a libvirt domain, and the checks of what the flags add up to.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "tools/vmstart.h"
#include "common/compiler.h"

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
	       "                      advise (default): as root, set shmem_enabled to 'advise' "
	       "for\n"
	       "                      this run so the host can map 2 MiB blocks with PMDs, as\n"
	       "                      THP=madvise already lets the kernel baseline; restored at "
	       "exit\n"
	       "  --no-baseline       skip the kernel baselines\n"
	       "  --csv FILE          write every sample as CSV\n"
	       "  --plot FILE.png     draw start latency per VM and 2 MiB share over time\n"
	       "  --stat-file FILE    where snapshots for 'gfactl stat' go (default %s)\n"
	       "  --json              print the final statistics as JSON too\n"
	       "  --quiet             only the summary and the RESULT line\n"
	       "  --lazy              lazy guests: RAM taken at first touch (the start then\n"
	       "                      includes the first touch of all of it, as the full one\n"
	       "                      includes taking and zeroing it)\n"
	       "  --socket PATH       each VM in a process of its own, attached to the host pool\n"
	       "                      service (gfad) at PATH: no pool of vmstart's own, no churn\n"
	       "                      or baselines; reports each start and the frames the\n"
	       "                      service leases before, while and after the VMs run\n"
	       "                      (not with --pool, --rounds, --proactiveness,\n"
	       "                      --plot, --stat-file or --json)\n"
	       "exit status: 0 ok, 1 failure, 2 bad usage or more memory than the host has\n"
	       "available (the pool, and the kernel baselines' VMs beside it, within 80%%)\n",
	       default_stat_file());
}

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
	OPT_VMS = 256,
	OPT_VCPUS,
	OPT_MEM,
	OPT_POOL,
	OPT_ROUNDS,
	OPT_PROACTIVENESS,
	OPT_KVM,
	OPT_LIBVIRT,
	OPT_DOMAIN,
	OPT_DOMAIN_XML,
	OPT_HOST_THP,
	OPT_CSV,
	OPT_PLOT,
	OPT_STAT_FILE,
	OPT_JSON,
	OPT_NO_BASELINE,
	OPT_QUIET,
	OPT_LAZY,
	OPT_SOCKET,
	OPT_RUNNER,
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
	{ "socket", required_argument, NULL, OPT_SOCKET },
	/* internal: the per-VM process --socket runs (vmstart_socket.c), "FD,VM" */
	{ "runner", required_argument, NULL, OPT_RUNNER },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* One option's value into o: true, or false after saying what is wrong. */
static bool apply_opt(int c, const char *v, struct vmstart_opts *o)
{
	switch (c) {
	case OPT_VMS:
		return parse_u64("--vms", v, 1, MAX_VMS, &o->vms);
	case OPT_VCPUS:
		return parse_u64("--vcpus", v, 1, 64, &o->vcpus);
	case OPT_MEM:
		return parse_mib("--mem", v, &o->mem);
	case OPT_POOL:
		return parse_mib("--pool", v, &o->pool);
	case OPT_ROUNDS:
		return parse_u64("--rounds", v, 0, 1000, &o->rounds);
	case OPT_PROACTIVENESS:
		return parse_u64("--proactiveness", v, 0, 100, &o->proactiveness);
	case OPT_KVM:
		return !parse_kvm(v, &o->kvm);
	case OPT_LIBVIRT:
		o->libvirt = v;
		return true;
	case OPT_DOMAIN:
		o->domain = v;
		return true;
	case OPT_DOMAIN_XML:
		o->domain_xml = v;
		return true;
	case OPT_CSV:
		o->csv = v;
		return true;
	case OPT_PLOT:
		o->plot = v;
		return true;
	case OPT_STAT_FILE:
		o->stat_file = v;
		return true;
	case OPT_JSON:
		o->json = true;
		return true;
	case OPT_NO_BASELINE:
		o->no_baseline = true;
		return true;
	case OPT_QUIET:
		o->quiet = true;
		return true;
	case OPT_LAZY:
		o->lazy = true;
		return true;
	case OPT_SOCKET:
		if (!*v) {
			fprintf(stderr, "gfactl vmstart: --socket needs a path\n");
			return false;
		}
		o->socket = v;
		return true;
	case OPT_RUNNER:
		if (sscanf(v, "%d,%u", &o->runner_fd, &o->runner_vm) != 2 || o->runner_fd < 0) {
			fprintf(stderr, "gfactl vmstart: --runner: internal, FD,VM\n");
			return false;
		}
		return true;
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

	*o = (struct vmstart_opts){ .vms = 8,
				    .vcpus = 2,
				    .mem = 128 * MiB,
				    .rounds = 3,
				    .proactiveness = 20,
				    .runner_fd = -1,
				    .stat_file = default_stat_file() };
	optind = 1; /* (gfactl's dispatcher may have run getopt already) */
	opterr = 1;
	while ((c = getopt_long(argc, argv, "+h", vmstart_options, NULL)) != -1) {
		if (c == 'h') {
			vm_help();
			return 1;
		}
		if (c >= OPT_VMS && c <= OPT_RUNNER)
			o->given |= 1u << (c - OPT_VMS);
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
	if (o->domain_xml)
		ret = gfa_domain_from_xml_file(o->domain_xml, spec, err, sizeof(err));
	else
		ret = gfa_domain_from_libvirt(o->libvirt, o->domain, spec, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "gfactl vmstart: %s\n", err);
		free(spec);
		return -1;
	}
	gfa_domain_format(spec, line, sizeof(line));
	printf("domain: %s\n", line);
	gfa_domain_format_size(spec->memory_bytes, size, sizeof(size));
	/* in the import's own form, so each domain message names its file or domain once */
	if (spec->memory_bytes > (16ULL << 40)) { /* as --mem: pool sizes must not wrap */
		fprintf(stderr,
			"gfactl vmstart: %s: %s: the domain's memory, %s, is more than "
			"the 16 TiB a VM may have here; accepted: 16 TiB at most\n",
			spec->origin, spec->nr_cells ? "<numa>" : "<memory>", size);
		ret = -1;
	} else if (gfa_domain_check_pages(spec, NULL, err, sizeof(err))) {
		fprintf(stderr, "gfactl vmstart: %s\n", err); /* as libvirt at start */
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
		       "64 vCPU threads over the domain's %s\n",
		       spec->vcpus, size);
	if (spec->hugepages)
		printf("domain asks for hugepage backing: gfa backs each 2 MiB range with an "
		       "order-9 block (host THP / 2 MiB EPT), not hugetlbfs\n");
	if (spec->nr_cells > 1)
		printf("domain has %u NUMA cells: guest RAM is placed on the pool's zones; "
		       "cells are not split across host nodes in this run\n",
		       spec->nr_cells);
	free(spec);
	return 0;
}

const char *vmstart_mem_source(const struct vmstart_opts *o)
{
	return o->domain_xml || o->domain ? "the domain's memory" : "--mem";
}

/* 32 a round (vmstart_churn.c), at most MAX_UNMOVABLE */
uint64_t vmstart_churn_room(const struct vmstart_opts *o)
{
	uint64_t b =
		(o->rounds * 32 < MAX_UNMOVABLE ? o->rounds * 32 : MAX_UNMOVABLE) * GFA_FRAME_SIZE;

	return (b + 2 * MiB - 1) & ~(2 * MiB - 1);
}

/* The sizes add up: whole 2 MiB blocks, and a --pool that holds the VMs and churn. */
static bool sizes_usable(const struct vmstart_opts *o)
{
	uint64_t need = o->vms * o->mem + vmstart_churn_room(o);

	if (o->mem % (2 * MiB) || o->mem < 4 * MiB) {
		fprintf(stderr, "gfactl vmstart: %s must be a multiple of 2 MiB, at least 4 MiB\n",
			vmstart_mem_source(o));
		return false;
	}
	if (o->pool && (o->pool < need || o->pool % (2 * MiB))) {
		fprintf(stderr,
			"gfactl vmstart: --pool must be a multiple of 2 MiB and hold "
			"--vms x %s and the frames churn keeps (%lu MiB)\n",
			vmstart_mem_source(o), (unsigned long)(need / MiB));
		return false;
	}
	return true;
}

/*
 * --socket: the options of vmstart's own pool, churn and snapshots have nothing to act
 * on: refused, each by name.
 */
static bool socket_usable(const struct vmstart_opts *o)
{
	static const struct {
		int opt;
		const char *name, *why;
	} no[] = {
		{ OPT_POOL, "--pool", "the service's --mem sizes the pool" },
		{ OPT_ROUNDS, "--rounds", "no churn runs on a host pool client" },
		{ OPT_PROACTIVENESS, "--proactiveness", "compaction is the service's" },
		{ OPT_PLOT, "--plot", "the plot is of churn, which does not run" },
		{ OPT_STAT_FILE, "--stat-file", "use gfactl stat --socket PATH" },
		{ OPT_JSON, "--json", "use gfactl stat --socket PATH" },
	};

	if (!o->socket) {
		if (o->given & (1u << (OPT_RUNNER - OPT_VMS))) {
			fprintf(stderr, "gfactl vmstart: --runner is internal to --socket\n");
			return false;
		}
		return true;
	}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++) {
		if (o->given & (1u << (no[i].opt - OPT_VMS))) {
			fprintf(stderr, "gfactl vmstart: %s does not go with --socket: %s\n",
				no[i].name, no[i].why);
			return false;
		}
	}
	return true;
}

int vmstart_opts_parse(int argc, char **argv, struct vmstart_opts *o)
{
	int ret = parse_opts(argc, argv, o);

	if (ret)
		return ret > 0 ? 1 : 2;
	if (!socket_usable(o) || apply_domain(o) || !sizes_usable(o))
		return 2;
	/* --plot is checked before the run, not after it */
	if (o->plot && !vmstart_plot_usable(o->plot))
		return 2;
	return 0;
}
