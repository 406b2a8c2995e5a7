// SPDX-License-Identifier: MIT
/*
 * What the host really does with transparent huge pages: gfa's memfds get 2 MiB pages
 * only where shmem_enabled allows MADV_HUGEPAGE, whatever the anonymous THP setting.
 * Read from sysfs, the bracketed word of each file.
 */
#include <stdio.h>
#include <string.h>
#include <gfa/vmm.h>

static void read_selected(const char *path, char *out, size_t len)
{
	char buf[256] = "", *l, *r;
	FILE *f = fopen(path, "r");

	snprintf(out, len, "unknown");
	if (!f)
		return;
	if (fgets(buf, sizeof(buf), f)) {
		l = strchr(buf, '[');
		r = l ? strchr(l, ']') : NULL;
		if (l && r) {
			*r = '\0';
			snprintf(out, len, "%s", l + 1);
		}
	}
	fclose(f);
}

int gfa_host_thp_report(struct gfa_thp_report *r)
{
	if (!r)
		return GFA_EFAULT;
	memset(r, 0, sizeof(*r));
	read_selected("/sys/kernel/mm/transparent_hugepage/enabled", r->thp_enabled,
		      sizeof(r->thp_enabled));
	read_selected("/sys/kernel/mm/transparent_hugepage/shmem_enabled", r->shmem_enabled,
		      sizeof(r->shmem_enabled));
	r->shmem_thp_possible =
		!strcmp(r->shmem_enabled, "advise") || !strcmp(r->shmem_enabled, "always") ||
		!strcmp(r->shmem_enabled, "within_size") || !strcmp(r->shmem_enabled, "force");
	return 0;
}
