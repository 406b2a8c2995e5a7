// SPDX-License-Identifier: MIT
/*
 * bench/pcp_insns: what one cache hit costs, counted rather than timed, against the
 * recorded budget of the per-vCPU cache's hot paths.
 *
 *  - instructions of gfa_pcp_alloc and gfa_pcp_free when the block is on the list
 *    (callgrind, inclusive, over a loop of alloc+free pairs that always hits)
 *  - cache lines of struct gfa_pcp each of them touches (lackey's memory trace of one
 *    allocation and one free, between two stores to a marker)
 *
 * The bench runs itself under valgrind (GFA_PCP_INSNS_CHILD names the child's part);
 * without valgrind it says so and skips.  Counts do not depend on the machine's load.
 */
#include <inttypes.h>
#include <gfa/allocator.h>
#include "allocator/pcp.h"
#include "bench/bench_util.h"

/* the hits as this bench counted them at the commit before the hot paths' cleanup */
#define BUDGET_ALLOC 44 /* instructions of an allocation hit */
#define BUDGET_FREE  70 /* instructions of a free hit */
#define PAIRS        100000
#define OWNER        0x51

static volatile uint64_t insns_marker;

static struct gfa_pcp *child_cache(struct gfa_pool **poolp)
{
	struct gfa_pool_config cfg;
	struct gfa_pcp *pcp;

	gfa_pool_config_init(&cfg, 1UL << 14);
	*poolp = gfa_pool_create(&cfg);
	pcp = *poolp ? gfa_pcp_create(*poolp, 0) : NULL;
	if (!pcp)
		bench_die("pool or cache: %s", strerror(errno));
	/* warm-up: the thread's record, a refill, the lists' rings */
	for (int i = 0; i < 1000; i++) {
		int64_t pfn = gfa_pcp_alloc(pcp, 0, GFA_MT_MOVABLE, OWNER, 0);

		if (pfn < 0 || gfa_pcp_free(pcp, (uint64_t)pfn, 0, OWNER))
			bench_die("warm-up pair failed");
	}
	return pcp;
}

/* Collected by callgrind (--toggle-collect): nothing but hits in here. */
static __attribute__((noipa)) int insns_pairs(struct gfa_pcp *pcp, int n)
{
	for (int i = 0; i < n; i++) {
		int64_t pfn = gfa_pcp_alloc(pcp, 0, GFA_MT_MOVABLE, OWNER, 0);

		if (pfn < 0 || gfa_pcp_free(pcp, (uint64_t)pfn, 0, OWNER))
			return -1;
	}
	return 0;
}

static int child(const char *part)
{
	struct gfa_pool *pool;
	struct gfa_pcp *pcp = child_cache(&pool);
	int64_t pfn;

	if (!strcmp(part, "callgrind")) {
		if (insns_pairs(pcp, PAIRS))
			bench_die("pair failed");
	} else {
		printf("pcp=%" PRIxPTR " size=%zu marker=%" PRIxPTR "\n", (uintptr_t)pcp,
		       sizeof(struct gfa_pcp), (uintptr_t)&insns_marker);
		fflush(stdout);
		insns_marker = 1;
		pfn = gfa_pcp_alloc(pcp, 0, GFA_MT_MOVABLE, OWNER, 0);
		insns_marker = 2;
		if (pfn < 0 || gfa_pcp_free(pcp, (uint64_t)pfn, 0, OWNER))
			bench_die("pair failed");
		insns_marker = 3;
	}
	gfa_pcp_destroy(pcp);
	gfa_pool_destroy(pool);
	return 0;
}

/* Inclusive instructions of fn in callgrind_annotate's listing, or -1. */
static long annotate_inclusive(const char *out, const char *fn)
{
	char cmd[512], line[1024], pat[128];
	long v = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "callgrind_annotate --inclusive=yes --threshold=100 %s 2>/dev/null", out);
	snprintf(pat, sizeof(pat), ":%s ", fn);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		char digits[64];
		size_t n = 0;

		if (!strstr(line, pat))
			continue;
		for (const char *c = line; *c && n < sizeof(digits) - 1; c++) {
			if (*c >= '0' && *c <= '9')
				digits[n++] = *c;
			else if (*c != ',' && *c != ' ')
				break;
		}
		digits[n] = 0;
		if (n)
			v = strtol(digits, NULL, 10);
		break;
	}
	pclose(p);
	return v;
}

/* Distinct 64-byte lines of [base, base + size) accessed between two marker stores. */
static void lackey_lines(const char *log, uint64_t base, uint64_t size, uint64_t marker,
			 int *alloc_lines, int *free_lines)
{
	uint64_t seen[2][64] = { { 0 } };
	char line[256];
	int phase = 0;
	FILE *f = fopen(log, "r");

	*alloc_lines = *free_lines = -1;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char kind;
		uint64_t addr;
		unsigned int len;

		if (sscanf(line, " %c %" SCNx64 ",%u", &kind, &addr, &len) != 3 || kind == 'I')
			continue;
		if (addr == marker && (kind == 'S' || kind == 'M')) {
			if (++phase == 3)
				break;
			continue;
		}
		if (phase < 1 || addr < base || addr >= base + size)
			continue;
		uint64_t l = (addr - base) / 64;

		if (l < 64 * 64)
			seen[phase - 1][l / 64] |= 1ULL << (l % 64);
	}
	fclose(f);
	if (phase < 2)
		return;
	*alloc_lines = *free_lines = 0;
	for (int w = 0; w < 64; w++) {
		*alloc_lines += __builtin_popcountll(seen[0][w]);
		*free_lines += __builtin_popcountll(seen[1][w]);
	}
}

/* What the two valgrind runs measured. */
struct insns {
	long alloc, free;            /* instructions over PAIRS hits */
	int alloc_lines, free_lines; /* struct gfa_pcp lines one hit touches */
	uint64_t size;               /* of struct gfa_pcp */
};

/* Instructions of the hits, under callgrind. */
static void run_callgrind(const char *self, struct insns *m)
{
	char out[256], cmd[8192];

	snprintf(out, sizeof(out), "/tmp/gfa-pcp-insns.%d.out", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "GFA_PCP_INSNS_CHILD=callgrind valgrind -q --tool=callgrind "
		 "--callgrind-out-file=%s --toggle-collect=insns_pairs '%s'",
		 out, self);
	if (system(cmd))
		bench_die("callgrind run failed: %s", cmd);
	m->alloc = annotate_inclusive(out, "gfa_pcp_alloc");
	m->free = annotate_inclusive(out, "gfa_pcp_free");
	unlink(out);
	if (m->alloc < 0 || m->free < 0)
		bench_die("no gfa_pcp_alloc/gfa_pcp_free in callgrind's output");
}

/* The cache's lines one pair touches, under lackey. */
static void run_lackey(const char *self, struct insns *m)
{
	char log[256], cmd[8192], line[256];
	uint64_t base = 0, marker = 0;
	FILE *p;

	snprintf(log, sizeof(log), "/tmp/gfa-pcp-insns.%d.log", (int)getpid());
	snprintf(cmd, sizeof(cmd),
		 "GFA_PCP_INSNS_CHILD=lackey valgrind -q --tool=lackey "
		 "--trace-mem=yes --log-file=%s '%s'",
		 log, self);
	p = popen(cmd, "r");
	if (!p)
		bench_die("lackey run failed");
	while (fgets(line, sizeof(line), p))
		sscanf(line, "pcp=%" SCNx64 " size=%" SCNu64 " marker=%" SCNx64, &base, &m->size,
		       &marker);
	if (pclose(p) || !base)
		bench_die("lackey run failed: %s", cmd);
	lackey_lines(log, base, m->size, marker, &m->alloc_lines, &m->free_lines);
	unlink(log);
}

static int run_all(const struct bench_opts *o, void *ctx)
{
	struct insns *m = ctx;
	char self[4096];
	ssize_t n;

	(void)o;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		bench_die("readlink /proc/self/exe failed");
	self[n] = 0;
	run_callgrind(self, m);
	run_lackey(self, m);
	return 0;
}

static void report(void *ctx)
{
	const struct insns *m = ctx;
	double a = (double)m->alloc / PAIRS, f = (double)m->free / PAIRS;
	struct bench_result res;

	printf("# %d alloc+free pairs that hit, under callgrind; one pair under lackey\n", PAIRS);
	printf("%-14s %12s %8s %22s\n", "call", "insns/call", "budget", "struct gfa_pcp lines");
	printf("%-14s %12.2f %8d %22d\n", "gfa_pcp_alloc", a, BUDGET_ALLOC, m->alloc_lines);
	printf("%-14s %12.2f %8d %22d\n", "gfa_pcp_free", f, BUDGET_FREE, m->free_lines);
	printf("# struct gfa_pcp is %lu bytes (%lu lines)\n", (unsigned long)m->size,
	       (unsigned long)(m->size + 63) / 64);
	bench_goal("pcp_insns", "alloc_hit", a, "<=", BUDGET_ALLOC,
		   "instructions of an allocation hit, budget from before the cleanup");
	bench_goal("pcp_insns", "free_hit", f, "<=", BUDGET_FREE,
		   "instructions of a free hit, budget from before the cleanup");
	bench_result_init(&res, "pcp_insns");
	bench_result_add(&res, "alloc_insns", "%.2f", a);
	bench_result_add(&res, "free_insns", "%.2f", f);
	bench_result_add(&res, "alloc_budget", "%d", BUDGET_ALLOC);
	bench_result_add(&res, "free_budget", "%d", BUDGET_FREE);
	bench_result_add(&res, "alloc_pcp_lines", "%d", m->alloc_lines);
	bench_result_add(&res, "free_pcp_lines", "%d", m->free_lines);
	bench_result_print(&res);
}

static struct insns insns = { .alloc_lines = -1, .free_lines = -1 };
static const struct bench_part pcp_insns_parts[] = {
	{ NULL, run_all, report, &insns },
};

int main(int argc, char **argv)
{
	const char *part = getenv("GFA_PCP_INSNS_CHILD");
	struct bench_result res;
	struct bench_opts o;
	int err;

	if (part)
		return child(part);
	err = bench_parse_args(argc, argv, &o, 1, 0, 1, 0,
			       "instructions and struct gfa_pcp cache lines of a cache hit "
			       "(valgrind), against the hot paths' budget");
	if (err)
		return err > 0 ? 0 : 2;
	if (system("valgrind --version >/dev/null 2>&1")) {
		printf("# bench/pcp_insns: SKIPPED: valgrind is not installed (tools/deps.sh "
		       "build)\n");
		bench_result_init(&res, "pcp_insns");
		bench_result_add(&res, "skipped", "1");
		bench_result_print(&res);
		return 0;
	}
	bench_parts_run(&o, pcp_insns_parts, ARRAY_SIZE(pcp_insns_parts));
	return 0;
}
