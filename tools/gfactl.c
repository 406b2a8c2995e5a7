// SPDX-License-Identifier: MIT
/*
 * gfactl: tune VM start latency and density with gfa.
 *   gfactl vmstart [options]   run a VM start scenario (the README's main job)
 *   gfactl stat [options]      statistics of a running or finished scenario
 *   gfactl gfad [options]      the host pool service (gfad, tools/gfad.c)
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tools/gfactl.h"
#include "common/compiler.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gfactl <command> [options]\n\n"
		"commands:\n"
		"  vmstart   start VMs on a gfa pool, churn them, report start latency, the share\n"
		"            of guest RAM on 2 MiB blocks and compare with the kernel's own memory\n"
		"  linux     boot Debian's Linux kernel as guests on one pool (needs a KVM that\n"
		"            boots Linux: native hardware KVM, or tools/kvm-in-qemu.sh)\n"
		"  stat      buddyinfo, pagetypeinfo, vmstat and metadata of a vmstart run (--json\n"
		"            too), or of a host pool service's pool (--socket)\n"
		"  vmsnap    save a VM's RAM to a file, and run it again from there lazily (each\n"
		"            page read at its first touch)\n"
		"  gfad      the host pool service many VMM processes attach to (also run as\n"
		"            gfad, the name this binary is linked as)\n\n"
		"gfactl <command> --help shows the command's options; gfactl --version the\n"
		"library's version.\n");
}

bool parse_u64(const char *flag, const char *val, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!val) {
		fprintf(stderr, "gfactl: %s needs a value\n", flag);
		return false;
	}
	errno = 0;
	v = strtoull(val, &end, 10);
	/* digits only: strtoull takes "-1" (as 2^64 - 1), spaces and '+' */
	if (*val < '0' || *val > '9' || *end || end == val) {
		fprintf(stderr, "gfactl: %s: '%s' is not a number (digits only, in [%llu, %llu])\n",
			flag, val, (unsigned long long)min, (unsigned long long)max);
		return false;
	}
	if (errno || v < min || v > max) {
		fprintf(stderr, "gfactl: %s: %s is %s: it takes %llu to %llu\n", flag, val,
			errno || v > max ? "too large" : "too small", (unsigned long long)min,
			(unsigned long long)max);
		return false;
	}
	*out = v;
	return true;
}

#define GFACTL_MAX_SIZE (16ULL << 40)

bool parse_mib(const char *flag, const char *val, uint64_t *bytes)
{
	char num[64], *unit;
	size_t n;

	if (!val) {
		fprintf(stderr, "gfactl: %s needs a value\n", flag);
		return false;
	}
	n = strspn(val, "0123456789");
	if (!n || n >= sizeof(num)) {
		fprintf(stderr, "gfactl: %s: '%s' is not a size (e.g. 256, 256M, 1G)\n", flag, val);
		return false;
	}
	memcpy(num, val, n);
	num[n] = '\0';
	unit = (char *)val + n;
	if (gfa_domain_parse_size(num, *unit ? unit : "MiB", bytes) || !*bytes) {
		fprintf(stderr, "gfactl: %s: '%s' is not a size (e.g. 256, 256M, 1G)\n", flag, val);
		return false;
	}
	/* a bound that keeps pool sizes (VMs x size x 5/4) far from wrapping */
	if (*bytes > GFACTL_MAX_SIZE) {
		fprintf(stderr, "gfactl: %s: '%s' is larger than 16 TiB\n", flag, val);
		return false;
	}
	return true;
}

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double percentile(const double *sorted, size_t n, double p)
{
	double idx;
	size_t lo;

	if (!n)
		return 0;
	idx = p / 100.0 * (double)(n - 1);
	lo = (size_t)idx;
	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * (idx - (double)lo);
}

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
	{ "vmstart", cmd_vmstart }, { "linux", cmd_linux }, { "stat", cmd_stat },
	{ "vmsnap", cmd_vmsnap },   { "gfad", cmd_gfad },
};

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	unsigned int v = gfa_version();
	const char *base = strrchr(argv[0], '/');
	int c;

	/* installed (or linked) as gfad: the host pool service */
	if (!strcmp(base ? base + 1 : argv[0], "gfad"))
		return cmd_gfad(argc, argv);

	/* '+': stop at the command, whose options are its own */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == 'V') {
			printf("gfactl (libgfa %u.%u.%u)\n", v >> 16, (v >> 8) & 0xff, v & 0xff);
			return 0;
		}
		fprintf(stderr, "gfactl: '%s': unknown option\n", argv[optind - 1]);
		usage(stderr);
		return 2;
	}
	if (optind == argc) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[optind], "help")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		if (!strcmp(argv[optind], commands[i].name)) {
			char **cargv = argv + optind;
			int cargc = argc - optind;

			optind = 1; /* the command parses its own argv from its start */
			opterr = 1;
			return commands[i].fn(cargc, cargv);
		}
	}
	fprintf(stderr, "gfactl: unknown command '%s'\n", argv[optind]);
	usage(stderr);
	return 2;
}
