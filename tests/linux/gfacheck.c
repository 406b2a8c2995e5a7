// SPDX-License-Identifier: MIT
/*
 * gfacheck: the memory checker a Linux guest on gfa runs from its initramfs (built
 * static, so it needs no libraries there).  It reports what the guest kernel sees --
 * MemTotal, the e820 RAM ranges from /proc/iomem -- fills MIB MiB of its own memory with a
 * pattern that depends on each word's address, then verifies the whole region PASSES
 * times (0: until killed), one console line per pass, so the host can move the frames
 * under the kernel meanwhile and see from these lines that nothing changed.
 *
 * Two options serve a balloon on the host side:
 *   -i MS    sleep MS ms between passes and report MemTotal again whenever it changed
 *            (a balloon inflating or deflating changes it), so the host sees the effect
 *   -f MIB   after the first pass: wait FREE_SETTLE_S seconds, map and touch MIB MiB
 *            more, wait again, unmap it: the kernel's free page reporting tells the
 *            device about the freed pageblocks about 2 s later
 *
 *   usage: gfacheck [-i MS] [-f MIB] MIB PASSES
 *   gfacheck: cpus 1                             (online CPUs)
 *   gfacheck: MemTotal 245212 kB                 (again on each change with -i)
 *   gfacheck: ram 0x1000-0x9fbff                 (each top-level "System RAM" line)
 *   gfacheck: filled 64 MiB
 *   gfacheck: pass 1 mismatches 0 tainted 0
 *   gfacheck: allocating 128 MiB                 (-f)
 *   gfacheck: allocated 128 MiB
 *   gfacheck: freed 128 MiB
 *   gfacheck: done passes 3 mismatches 0 tainted 0
 * Exit status: 0 when every pass found no mismatch, 1 otherwise, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SEED          0x9e3779b97f4a7c15ULL
#define FREE_SETTLE_S 3 /* above the kernel's 2 s page reporting delay */

/* MemTotal in kB, 0 if /proc/meminfo cannot be read. */
static unsigned long long memtotal_kb(void)
{
	unsigned long long kb = 0, v;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemTotal: %llu kB", &v) == 1)
			kb = v;
	fclose(f);
	return kb;
}

/* Print MemTotal if it differs from *@last (which it updates). */
static void report_meminfo(unsigned long long *last)
{
	unsigned long long kb = memtotal_kb();

	if (!kb) {
		printf("gfacheck: no /proc/meminfo\n");
		return;
	}
	if (kb != *last)
		printf("gfacheck: MemTotal %llu kB\n", kb);
	*last = kb;
}

static void sleep_ms(unsigned long ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts))
		;
}

/* Touch @mib MiB of fresh memory, then give it back to the kernel. */
static int alloc_and_free(unsigned long long mib)
{
	size_t len = (size_t)mib << 20;
	char *p;

	sleep_ms(FREE_SETTLE_S * 1000);
	printf("gfacheck: allocating %llu MiB\n", mib);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		printf("gfacheck: cannot map %llu MiB to free\n", mib);
		return 1;
	}
	/* a write to every page: the host backs each one */
	for (size_t off = 0; off < len; off += 4096)
		p[off] = 1;
	printf("gfacheck: allocated %llu MiB\n", mib);
	sleep_ms(FREE_SETTLE_S * 1000);
	munmap(p, len);
	printf("gfacheck: freed %llu MiB\n", mib);
	return 0;
}

/* Top-level (unindented) "System RAM" ranges: the e820 RAM the kernel took. */
static void report_iomem(void)
{
	char line[256];
	FILE *f = fopen("/proc/iomem", "r");

	if (!f) {
		printf("gfacheck: no /proc/iomem\n");
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;

		if (line[0] != ' ' && strstr(line, ": System RAM") &&
		    sscanf(line, "%llx-%llx", &lo, &hi) == 2)
			printf("gfacheck: ram 0x%llx-0x%llx\n", lo, hi);
	}
	fclose(f);
}

static unsigned long tainted(void)
{
	unsigned long t = ~0UL;
	FILE *f = fopen("/proc/sys/kernel/tainted", "r");

	if (f) {
		if (fscanf(f, "%lu", &t) != 1)
			t = ~0UL;
		fclose(f);
	}
	return t;
}

static uint64_t pattern(const uint64_t *base, uint64_t i)
{
	return ((uint64_t)(uintptr_t)(base + i)) ^ SEED ^ (i << 32);
}

int main(int argc, char **argv)
{
	unsigned long long mib, passes, bad_total = 0, interval_ms = 0, free_mib = 0, kb = 0;
	uint64_t *mem, words;
	bool free_failed = false;
	int opt;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "i:f:")) != -1) {
		if (opt == 'i' && sscanf(optarg, "%llu", &interval_ms) == 1)
			continue;
		if (opt == 'f' && sscanf(optarg, "%llu", &free_mib) == 1)
			continue;
		fprintf(stderr, "usage: gfacheck [-i MS] [-f MIB] MIB PASSES\n");
		return 2;
	}
	if (argc - optind != 2 || sscanf(argv[optind], "%llu", &mib) != 1 ||
	    sscanf(argv[optind + 1], "%llu", &passes) != 1 || !mib) {
		fprintf(stderr, "usage: gfacheck [-i MS] [-f MIB] MIB PASSES\n");
		return 2;
	}
	printf("gfacheck: cpus %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
	report_meminfo(&kb);
	report_iomem();
	words = (uint64_t)mib << 17;
	mem = mmap(NULL, (size_t)mib << 20, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (mem == MAP_FAILED) {
		printf("gfacheck: cannot map %llu MiB\n", mib);
		return 1;
	}
	for (uint64_t i = 0; i < words; i++)
		mem[i] = pattern(mem, i);
	printf("gfacheck: filled %llu MiB\n", mib);
	for (unsigned long long pass = 1; !passes || pass <= passes; pass++) {
		unsigned long long bad = 0;

		for (uint64_t i = 0; i < words; i++)
			bad += mem[i] != pattern(mem, i);
		bad_total += bad;
		printf("gfacheck: pass %llu mismatches %llu tainted %lu\n", pass, bad, tainted());
		if (pass == 1 && free_mib && alloc_and_free(free_mib))
			free_failed = true;
		if (interval_ms) {
			sleep_ms(interval_ms);
			report_meminfo(&kb);
		}
	}
	printf("gfacheck: done passes %llu mismatches %llu tainted %lu\n", passes, bad_total,
	       tainted());
	return bad_total || free_failed ? 1 : 0;
}
