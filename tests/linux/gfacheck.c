// SPDX-License-Identifier: MIT
/*
 * gfacheck: the memory checker a Linux guest on gfa runs from its initramfs (built
 * static, so it needs no libraries there).  It reports what the guest kernel sees --
 * MemTotal, the e820 RAM ranges from /proc/iomem -- fills MIB MiB of its own memory with a
 * pattern that depends on each word's address, then verifies the whole region PASSES
 * times (0: until killed), one console line per pass, so the host can move the frames
 * under the kernel meanwhile and see from these lines that nothing changed.
 *
 *   usage: gfacheck MIB PASSES
 *   gfacheck: cpus 1                             (online CPUs)
 *   gfacheck: MemTotal 245212 kB
 *   gfacheck: ram 0x1000-0x9fbff                 (each top-level "System RAM" line)
 *   gfacheck: filled 64 MiB
 *   gfacheck: pass 1 mismatches 0 tainted 0
 *   gfacheck: done passes 3 mismatches 0 tainted 0
 * Exit status: 0 when every pass found no mismatch, 1 otherwise, 2 on a usage error.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SEED 0x9e3779b97f4a7c15ULL

static void report_meminfo(void)
{
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f) {
		printf("gfacheck: no /proc/meminfo\n");
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long kb;

		if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
			printf("gfacheck: MemTotal %llu kB\n", kb);
	}
	fclose(f);
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
	unsigned long long mib, passes, bad_total = 0;
	uint64_t *mem, words;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 3 || sscanf(argv[1], "%llu", &mib) != 1 ||
	    sscanf(argv[2], "%llu", &passes) != 1 || !mib) {
		fprintf(stderr, "usage: gfacheck MIB PASSES\n");
		return 2;
	}
	printf("gfacheck: cpus %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
	report_meminfo();
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
	}
	printf("gfacheck: done passes %llu mismatches %llu tainted %lu\n", passes, bad_total,
	       tainted());
	return bad_total ? 1 : 0;
}
