// SPDX-License-Identifier: MIT
/*
 * gfactl: tune VM start latency and density with gfa.
 *   gfactl vmstart [options]   run a VM start scenario (the README's main job)
 *   gfactl stat [options]      statistics of a running or finished scenario
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "tools/gfactl.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gfactl <command> [options]\n\n"
		"commands:\n"
		"  vmstart   start VMs on a gfa pool, churn them, report start latency, the share\n"
		"            of guest RAM on 2 MiB blocks and compare with the kernel's own memory\n"
		"  stat      buddyinfo, pagetypeinfo and vmstat of a vmstart run (--json too)\n\n"
		"gfactl <command> --help shows the command's options.\n");
}

double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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
	if (errno || *val < '0' || *val > '9' || *end || end == val || v < min || v > max) {
		fprintf(stderr, "gfactl: %s: '%s' is not a number in [%llu, %llu]\n", flag, val,
			(unsigned long long)min, (unsigned long long)max);
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

const char *default_stat_file(void)
{
	static char path[256];
	const char *dir = getenv("XDG_RUNTIME_DIR");

	snprintf(path, sizeof(path), "%s/gfactl-vmstart.json", dir && *dir ? dir : "/tmp");
	return path;
}

/* JSON string escaping for the multi-line /proc-style texts. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/*
 * The umask, read without changing it (umask(2) would, for a moment, for every thread
 * of the process: vmstart's VMs run while it writes snapshots).  022 if unknown.
 */
static mode_t process_umask(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[128];
	unsigned int um = 022;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Umask: %o", &um) == 1)
			break;
	if (f)
		fclose(f);
	return (mode_t)um;
}

/* The whole text of buddyinfo or pagetypeinfo (malloc'd), or NULL. */
static char *pool_text(struct gfa_pool *pool, int (*fn)(struct gfa_pool *, char *, size_t))
{
	int need = fn(pool, NULL, 0);
	char *text;

	/* (a zone may change between the two calls: then the text is cut, never overrun) */
	if (need < 0 || !(text = malloc((size_t)need + 256)))
		return NULL;
	fn(pool, text, (size_t)need + 256);
	return text;
}

/* Write f's JSON body; 0 or -errno. */
static int stat_json_body(FILE *f, struct gfa_pool *pool, const char *phase,
			  const char *extra_json)
{
	char *buddy = pool_text(pool, gfa_pool_buddyinfo);
	char *types = pool_text(pool, gfa_pool_pagetypeinfo);
	const char *sep = "";
	struct gfa_vmstat vs;

	if (!buddy || !types) {
		free(buddy);
		free(types);
		return -ENOMEM;
	}
	fprintf(f, "{\n  \"pid\": %d,\n  \"phase\": ", (int)getpid());
	json_str(f, phase);
	fputs(",\n  \"buddyinfo\": ", f);
	json_str(f, buddy);
	fputs(",\n  \"pagetypeinfo\": ", f);
	json_str(f, types);
	free(buddy);
	free(types);
	gfa_pool_vmstat(pool, &vs);
	fputs(",\n  \"vmstat\": {", f);
#define GFA_JSON_FIELD(name) \
	{ fprintf(f, "%s\"%s\": %lu", sep, #name, (unsigned long)vs.name); sep = ", "; }
	GFA_VMSTAT_ITEMS(GFA_JSON_FIELD)
#undef GFA_JSON_FIELD
	fprintf(f, "}%s%s\n}\n", extra_json ? ",\n  " : "", extra_json ? extra_json : "");
	return ferror(f) ? -EIO : 0;
}

/*
 * Write the stat file whole or not at all: a fresh temporary file of our own next to
 * it (mkstemp: never an existing file, a symlink planted in /tmp, or another run's
 * temporary), renamed over path when complete.
 */
int write_stat_json(const char *path, struct gfa_pool *pool, const char *phase,
		    const char *extra_json)
{
	char tmp[PATH_MAX];
	FILE *f;
	int fd, err;

	/* a cut name would write (and rename away) some other file */
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkstemp(tmp);
	if (fd < 0)
		return -errno;
	fchmod(fd, 0666 & ~process_umask());    /* what a plain fopen() would leave */
	f = fdopen(fd, "w");
	if (!f) {
		err = -errno;
		close(fd);
		unlink(tmp);
		return err;
	}
	err = stat_json_body(f, pool, phase, extra_json);
	if (fclose(f) && !err)
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "vmstart"))
		return cmd_vmstart(argc - 1, argv + 1);
	if (!strcmp(argv[1], "linux"))
		return cmd_linux(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stat"))
		return cmd_stat(argc - 1, argv + 1);
	fprintf(stderr, "gfactl: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
