/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the benchmarks (header-only; everything is static inline so a
 * bench that does not use a helper still compiles with -Werror).
 *
 * Conventions every benchmark follows (tools/bench-all.sh relies on them):
 *   - `--quick` finishes in a few seconds; without it a run takes 30-60 s.
 *   - Baselines are measured in the same run, interleaved with the thing measured
 *     (rep 1 of every variant, then rep 2 of every variant, ...), after a warm-up.
 *   - Rates are the median of several repetitions; min and max are printed too.
 *   - Each ratio is printed next to its goal on a line
 *       GOAL <bench> <key> <value> <op> <target> met|NOT_MET|info
 *     and the run ends with one or more lines
 *       RESULT <bench> <key>=<value> ...
 *   - Exit status is 0 whether goals are met or not; non-zero only on errors.
 */
#ifndef GFA_BENCH_UTIL_H
#define GFA_BENCH_UTIL_H

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include "common/compiler.h"
#include "common/ktime.h"
#include "common/strbuf.h"

struct bench_opts {
	bool quick;
	int reps;         /* timed repetitions per variant */
	bool reps_set;    /* --reps given: parts with their own defaults follow it */
	double rep_sec;   /* target length of one repetition */
	const char *only; /* --only NAME: run one part (bench-specific), or NULL */
};

/*
 * A bench's own options, parsed in the same getopt_long pass as the common ones:
 * longopts ends with a zero entry and its vals stay below BENCH_OPT_BASE; parse gets
 * each one's val and argument and returns 0, or -EINVAL after printing why.
 */
struct bench_extra_opts {
	const struct option *longopts;
	const char *usage; /* e.g. " [--mib N] [--no-touch]" */
	int (*parse)(int val, const char *arg, void *ctx);
	void *ctx;
};

enum {
	BENCH_OPT_BASE = 0x100,
	BENCH_OPT_QUICK = BENCH_OPT_BASE,
	BENCH_OPT_REPS,
	BENCH_OPT_ONLY,
	BENCH_OPT_MAX_EXTRA = 16
};

/* "--reps" wants 1..1000; 0 or -EINVAL (printed). */
static inline int bench_parse_reps(const char *prog, const char *arg, int *reps)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < 1 || v > 1000) {
		fprintf(stderr, "%s: --reps wants 1..1000\n", prog);
		return -EINVAL;
	}
	*reps = (int)v;
	return 0;
}

/* The common options, then the bench's own (at most BENCH_OPT_MAX_EXTRA). */
static inline int bench_longopts(struct option *all, const struct bench_extra_opts *extra)
{
	static const struct option common[] = {
		{ "quick", no_argument, NULL, BENCH_OPT_QUICK },
		{ "reps", required_argument, NULL, BENCH_OPT_REPS },
		{ "only", required_argument, NULL, BENCH_OPT_ONLY },
		{ "help", no_argument, NULL, 'h' },
	};
	int n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(common); i++)
		all[n++] = common[i];
	for (int i = 0; extra && extra->longopts[i].name; i++) {
		if (i == BENCH_OPT_MAX_EXTRA || extra->longopts[i].val >= BENCH_OPT_BASE)
			return -EINVAL;
		all[n++] = extra->longopts[i];
	}
	all[n] = (struct option){ 0 };
	return 0;
}

/*
 * Parse the common options, --quick, --reps N, --only NAME, --help, and the bench's
 * own (extra, may be NULL) with getopt_long.  quick_reps/full_reps and
 * quick_sec/full_sec are the bench's defaults.  Returns 0, 1 after --help (caller
 * exits 0), or -EINVAL after printing the usage to stderr.
 */
static inline int bench_parse_args_ext(int argc, char **argv, struct bench_opts *o, int quick_reps,
				       double quick_sec, int full_reps, double full_sec,
				       const char *what, const struct bench_extra_opts *extra)
{
	struct option all[4 + BENCH_OPT_MAX_EXTRA + 1];
	const char *more = extra && extra->usage ? extra->usage : "";
	int reps = 0, c;

	o->quick = false;
	o->only = NULL;
	if (bench_longopts(all, extra))
		return -EINVAL;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", all, NULL)) != -1) {
		int err = 0;

		if (c == BENCH_OPT_QUICK) {
			o->quick = true;
		} else if (c == BENCH_OPT_REPS) {
			err = bench_parse_reps(argv[0], optarg, &reps);
		} else if (c == BENCH_OPT_ONLY) {
			o->only = optarg;
		} else if (c == 'h') {
			printf("usage: %s [--quick] [--reps N] [--only PART]%s\n%s\n", argv[0],
			       more, what);
			return 1;
		} else if (c != '?' && extra && extra->parse) {
			err = extra->parse(c, optarg, extra->ctx);
		} else {
			err = -EINVAL;
		}
		if (err) {
			fprintf(stderr, "usage: %s [--quick] [--reps N] [--only PART]%s\n", argv[0],
				more);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr,
			"%s: unexpected argument '%s'\n"
			"usage: %s [--quick] [--reps N] [--only PART]%s\n",
			argv[0], argv[optind], argv[0], more);
		return -EINVAL;
	}
	o->reps = o->quick ? quick_reps : full_reps;
	o->rep_sec = o->quick ? quick_sec : full_sec;
	o->reps_set = reps != 0;
	if (reps)
		o->reps = reps;
	return 0;
}

/* bench_parse_args_ext() for a bench without options of its own. */
static inline int bench_parse_args(int argc, char **argv, struct bench_opts *o, int quick_reps,
				   double quick_sec, int full_reps, double full_sec,
				   const char *what)
{
	return bench_parse_args_ext(argc, argv, o, quick_reps, quick_sec, full_reps, full_sec, what,
				    NULL);
}

/* Whether part `name` runs (all parts run without --only). */
static inline bool bench_wants(const struct bench_opts *o, const char *name)
{
	return !o->only || !strcmp(o->only, name);
}

/* The benchmarks' name for the monotonic clock. */
static inline uint64_t bench_now_ns(void)
{
	return ktime_get_ns();
}

static inline double bench_sec_since(uint64_t t0)
{
	return (double)(bench_now_ns() - t0) / 1e9;
}

/* xorshift64*: cheap enough not to show up next to a 10 ns operation. */
static inline uint64_t bench_rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* Fisher-Yates shuffle of n indices. */
static inline void bench_shuffle(uint32_t *v, size_t n, uint64_t *seed)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = bench_rand(seed) % i;
		uint32_t t = v[i - 1];

		v[i - 1] = v[j];
		v[j] = t;
	}
}

/* Samples of one variant: median, min, max. */
struct bench_stat {
	double median, min, max;
	int n;
};

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Sorts v in place. */
static inline struct bench_stat bench_stat_of(double *v, int n)
{
	struct bench_stat st = { 0, 0, 0, n };

	if (n <= 0)
		return st;
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
	st.min = v[0];
	st.max = v[n - 1];
	st.median = n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return st;
}

/*
 * One round of a single-threaded benchmark: does some operations and returns how many
 * (allocate+free pairs), or a negative errno on failure.
 */
typedef int64_t (*bench_round_fn)(void *ctx);

/*
 * Call fn until `secs` have passed (at least once) and store operations per second in
 * *rate.  Returns 0 or fn's error.
 */
static inline int bench_rate(bench_round_fn fn, void *ctx, double secs, double *rate)
{
	uint64_t t0 = bench_now_ns(), deadline = t0 + (uint64_t)(secs * 1e9), t;
	int64_t ops = 0;

	do {
		int64_t n = fn(ctx);

		if (n < 0)
			return (int)n;
		ops += n;
		t = bench_now_ns();
	} while (t < deadline);
	*rate = (double)ops / ((double)(t - t0) / 1e9);
	return 0;
}

static inline long bench_cores(void)
{
#ifdef CPU_SETSIZE /* the CPUs this process may run on (taskset, cgroups) */
	cpu_set_t allowed;

	if (!sched_getaffinity(0, sizeof(allowed), &allowed) && CPU_COUNT(&allowed) > 0)
		return CPU_COUNT(&allowed);
#endif
	return sysconf(_SC_NPROCESSORS_ONLN);
}

/* Print a failure and exit 1: benchmarks treat allocator errors as fatal. */
#ifdef CPU_SETSIZE /* _GNU_SOURCE: defined by the benchmarks that pin threads */
/*
 * Pin the calling thread to the idx-th CPU it may run on (mod their number), so that
 * N worker threads of a short repetition start on N CPUs instead of waiting for the
 * load balancer to spread them.  Returns the CPU, or -1 if pinning is not possible.
 */
static inline int bench_pin_self(int idx)
{
	cpu_set_t allowed, one;
	int n = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) || CPU_COUNT(&allowed) <= 0)
		return -1;
	idx %= CPU_COUNT(&allowed);
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed) || n++ != idx)
			continue;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		return sched_setaffinity(0, sizeof(one), &one) ? -1 : cpu;
	}
	return -1;
}
#endif

static inline void __attribute__((noreturn, format(printf, 1, 2))) bench_die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "bench error: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

/* First line of a file that starts with key (e.g. "model name"), value after ':'. */
static inline void bench_proc_field(const char *path, const char *key, char *out, size_t len)
{
	FILE *f = fopen(path, "r");
	char line[512];

	snprintf(out, len, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, key, strlen(key)) || !colon)
			continue;
		colon++;
		while (*colon == ' ' || *colon == '\t')
			colon++;
		colon[strcspn(colon, "\n")] = 0;
		snprintf(out, len, "%s", colon);
		break;
	}
	fclose(f);
}

/* "# machine: ..." lines: CPU model, cores, memory, kernel, compiler. */
static inline void bench_print_machine(void)
{
	char cpu[256], mem[64];
	struct utsname u;

	bench_proc_field("/proc/cpuinfo", "model name", cpu, sizeof(cpu));
	bench_proc_field("/proc/meminfo", "MemTotal", mem, sizeof(mem));
	if (uname(&u))
		snprintf(u.release, sizeof(u.release), "unknown");
	printf("# machine: cpu=\"%s\" cores=%ld mem=\"%s\" kernel=%s compiler=\"gcc %s\"\n", cpu,
	       sysconf(_SC_NPROCESSORS_ONLN), mem, u.release, __VERSION__);
}

/*
 * How busy the rest of the machine was while a bench ran: CPU time of all processes
 * (/proc/stat) minus our own (getrusage of us and our reaped children, and a helper
 * service we started), per second of wall time.  On shared 2-core
 * VMs other jobs can take a core away and halve a 2-thread result; the bench says so
 * instead of leaving the reader to guess.
 */
struct bench_load {
	uint64_t t0;
	double busy0, self0;
	pid_t helper; /* a service the bench started and measures through (0: none) */
};

static inline double bench_busy_sec(void)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	long hz = sysconf(_SC_CLK_TCK);
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 8 || hz <= 0)
		return -1;
	/* user nice system [idle iowait] irq softirq steal */
	return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

static inline double bench_rusage_sec(int who)
{
	struct rusage ru;

	if (getrusage(who, &ru))
		return 0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* CPU time of a running process (utime + stime, /proc/PID/stat); 0 when unreadable. */
static inline double bench_proc_sec(pid_t pid)
{
	unsigned long long ut = 0, st = 0;
	char path[64], buf[1024], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* fields after the ")" that ends comm: state is 3, utime 14, stime 15 */
	p = strrchr(buf, ')');
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Ours: this process, the children it has reaped, and the helper service if it has one. */
static inline double bench_self_sec(const struct bench_load *l)
{
	return bench_rusage_sec(RUSAGE_SELF) + bench_rusage_sec(RUSAGE_CHILDREN) +
	       (l->helper > 0 ? bench_proc_sec(l->helper) : 0);
}

/* Start counting; HELPER is a service process the bench runs beside it (0: none). */
static inline void bench_load_begin_with(struct bench_load *l, pid_t helper)
{
	l->helper = helper;
	l->t0 = bench_now_ns();
	l->busy0 = bench_busy_sec();
	l->self0 = bench_self_sec(l);
}

static inline void bench_load_begin(struct bench_load *l)
{
	bench_load_begin_with(l, 0);
}

/* Average number of CPUs other processes kept busy since bench_load_begin (< 0: unknown). */
static inline double bench_load_other(const struct bench_load *l)
{
	double wall = bench_sec_since(l->t0), busy = bench_busy_sec();
	double other;

	if (l->busy0 < 0 || busy < 0 || wall <= 0)
		return -1;
	other = (busy - l->busy0 - (bench_self_sec(l) - l->self0)) / wall;
	return other < 0 ? 0 : other;
}

/* "# load: ..." line; warns when other processes took a noticeable share. */
static inline void bench_print_load(const struct bench_load *l, const char *what)
{
	double other = bench_load_other(l);

	if (other < 0)
		printf("# load during %s: unknown (/proc/stat unreadable)\n", what);
	else
		printf("# load during %s: other processes used %.2f of %ld CPUs%s\n", what, other,
		       bench_cores(),
		       other > 0.2 ? "  ** WARNING: machine was not idle; "
				     "timings and their ratios are unreliable **" :
				     "");
}

/* "# loadavg at WHEN: 1 5 15": the kernel's run-queue averages, beside bench_print_load. */
static inline void bench_print_loadavg(const char *when)
{
	double la[3];

	if (getloadavg(la, 3) == 3)
		printf("# loadavg at %s: %.2f %.2f %.2f\n", when, la[0], la[1], la[2]);
	else
		printf("# loadavg at %s: unknown\n", when);
}

/*
 * Print a ratio next to its goal.  op is ">=" or "<=" ("info" for a ratio without a
 * goal, target ignored).  Returns whether the goal was met (true for info).
 */
static inline bool bench_goal(const char *bench, const char *key, double value, const char *op,
			      double target, const char *why)
{
	const char *verdict;
	bool met = true;

	if (!strcmp(op, ">="))
		met = value >= target;
	else if (!strcmp(op, "<="))
		met = value <= target;
	verdict = !strcmp(op, "info") ? "info" : met ? "met" : "NOT_MET";
	if (!strcmp(op, "info"))
		printf("GOAL %s %s %.3f info - info  # %s\n", bench, key, value, why);
	else
		printf("GOAL %s %s %.3f %s %.2f %s  # %s\n", bench, key, value, op, target, verdict,
		       why);
	return met;
}

/* A RESULT line under construction (a cut line ends where its buffer does). */
struct bench_result {
	char buf[2048];
	struct strbuf sb;
};

static inline void bench_result_init(struct bench_result *r, const char *bench)
{
	r->sb = (struct strbuf){ r->buf, sizeof(r->buf), 0 };
	sb_printf(&r->sb, "RESULT %s", bench);
}

static inline void __attribute__((format(printf, 3, 4)))
bench_result_add(struct bench_result *r, const char *key, const char *fmt, ...)
{
	va_list ap;

	sb_printf(&r->sb, " %s=", key);
	va_start(ap, fmt);
	sb_vprintf(&r->sb, fmt, ap);
	va_end(ap);
}

static inline void bench_result_print(struct bench_result *r)
{
	sb_finish(&r->sb);
	printf("%s\n", r->buf);
	fflush(stdout);
}

/*
 * A benchmark as a table of parts, walked by a short main.  run measures (0, or the
 * exit status it asks for) into ctx; report, if any, prints the part's GOAL and RESULT
 * lines from ctx once every part has run, so that one part's printing never lands in
 * another's timing.  A part without a name always runs (--only means something else
 * there, or nothing).
 */
struct bench_part {
	const char *name;
	int (*run)(const struct bench_opts *o, void *ctx);
	void (*report)(void *ctx);
	void *ctx;
};

/* Whether --only names a part of the table (or is not given); says which it wants if not. */
static inline bool bench_parts_only_ok(const struct bench_opts *o, const char *prog,
				       const struct bench_part *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (bench_wants(o, p[i].name))
			return true;
	fprintf(stderr, "%s: --only wants ", prog);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "%s%s", i ? i + 1 < n ? ", " : " or " : "", p[i].name);
	fprintf(stderr, "\n");
	return false;
}

static inline bool bench_part_wanted(const struct bench_opts *o, const struct bench_part *p)
{
	return !p->name || bench_wants(o, p->name);
}

/* The wanted parts' runs in order, then their reports: the runs' statuses or'ed. */
static inline int bench_parts_run(const struct bench_opts *o, const struct bench_part *p, size_t n)
{
	bool reports = false;
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		if (!bench_part_wanted(o, &p[i]))
			continue;
		ret |= p[i].run(o, p[i].ctx);
		reports |= p[i].report != NULL;
	}
	if (reports)
		printf("\n");
	for (size_t i = 0; i < n; i++)
		if (p[i].report && bench_part_wanted(o, &p[i]))
			p[i].report(p[i].ctx);
	return ret;
}

#endif /* GFA_BENCH_UTIL_H */
