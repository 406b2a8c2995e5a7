// SPDX-License-Identifier: MIT
/*
 * refvmm/hostmem.c - what the host holds of a memory range, as tests, benchmarks and
 * gfactl measure it: PMD-mapped and resident bytes from /proc/self/smaps, the
 * host-backed bytes of a memfd (st_blocks), and the host's available memory.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "gfa/refvmm.h"
#include "gfa/vmm.h"

/* Sum smaps fields (kB) of the VMAs overlapping [addr, addr + len). */
static int64_t smaps_sum(const void *addr, size_t len, const char *const *fields, int nfields)
{
	uintptr_t lo = (uintptr_t)addr, hi = lo + len;
	char line[512];
	bool in = false;
	int64_t kb = 0;
	FILE *f = fopen("/proc/self/smaps", "r");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		long v;

		if (sscanf(line, "%lx-%lx ", &a, &b) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			in = a < hi && b > lo;
			continue;
		}
		if (!in)
			continue;
		for (int i = 0; i < nfields; i++) {
			size_t fl = strlen(fields[i]);

			if (!strncmp(line, fields[i], fl) && line[fl] == ':' &&
			    sscanf(line + fl + 1, "%ld", &v) == 1)
				kb += v;
		}
	}
	fclose(f);
	return kb * 1024;
}

int64_t gfa_smaps_pmd_bytes(const void *addr, size_t len)
{
	static const char *const f[] = { "ShmemPmdMapped", "FilePmdMapped", "AnonHugePages" };

	return smaps_sum(addr, len, f, 3);
}

int64_t gfa_smaps_rss_bytes(const void *addr, size_t len)
{
	static const char *const f[] = { "Rss" };

	return smaps_sum(addr, len, f, 1);
}

int64_t gfa_memfd_allocated_bytes(int fd)
{
	struct stat sb;

	if (fstat(fd, &sb))
		return -errno;
	return (int64_t)sb.st_blocks * 512;
}

uint64_t gfa_host_mem_available(void)
{
	unsigned long long kb = 0;
	char line[256];
	FILE *f = fopen("/proc/meminfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb << 10;
}

int gfa_host_shmem_thp_set(const char *mode, char *old, size_t len)
{
	struct gfa_thp_report r;
	FILE *f;

	if (!mode)
		return -EFAULT;
	gfa_host_thp_report(&r);
	if (old && len)
		snprintf(old, len, "%s", r.shmem_enabled);
	f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "w");
	if (!f)
		return -errno;
	if (fputs(mode, f) < 0) {
		int err = -errno;

		fclose(f);
		return err;
	}
	return fclose(f) ? -errno : 0;
}
