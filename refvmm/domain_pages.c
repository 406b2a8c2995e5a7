// SPDX-License-Identifier: MIT
/*
 * The page sizes a domain's cells ask for, and whether the host has them.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <sys/stat.h>
#include "refvmm/domain_internal.h"

int gfa_domain_cell_page_size(const struct gfa_domain_spec *s, unsigned int cell, uint64_t *bytes)
{
	unsigned int i, ncells;
	uint64_t fallback = 0;

	if (!s || !bytes)
		return -EFAULT;
	if (!domain_spec_counts_ok(s))
		return -EINVAL;
	ncells = s->nr_cells ? s->nr_cells : 1;
	if (cell >= ncells)
		return -ENOENT;
	if (!s->hugepages)
		return -ENODATA;
	for (i = 0; i < s->nr_pages && i < GFA_DOMAIN_MAX_PAGES; i++) {
		if ((s->pages[i].nodeset >> cell) & 1) {
			*bytes = s->pages[i].size_bytes;
			return 0;
		}
		if (!s->pages[i].nodeset)
			fallback = s->pages[i].size_bytes;
	}
	*bytes = fallback;
	return 0;
}

/*
 * Whether a page of size bytes can back guest RAM here: the base page, gfa's own 2 MiB
 * block (an order-9 block, host THP, whatever hugetlbfs has), or <dir>/hugepages-<n>kB.
 */
static bool host_has_page(const char *dir, uint64_t bytes)
{
	char path[PATH_MAX];
	struct stat st;

	if (bytes == (uint64_t)sysconf(_SC_PAGESIZE) ||
	    bytes == GFA_PAGEBLOCK_FRAMES * GFA_FRAME_SIZE)
		return true;
	if (bytes % KIB || (size_t)snprintf(path, sizeof(path), "%s/hugepages-%" PRIu64 "kB", dir,
					    (uint64_t)(bytes / KIB)) >= sizeof(path))
		return false;
	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

/* The hugepage sizes under dir, "2 MiB, 1 GiB" (in directory order), or "none". */
static void host_page_list(const char *dir, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t kib;

	while (d && (e = readdir(d))) {
		if (sscanf(e->d_name, "hugepages-%" SCNu64 "kB", &kib) != 1)
			continue;
		sb_printf(&sb, "%s%s", sb.pos ? ", " : "", human((uint64_t)kib * KIB).s);
	}
	if (d)
		closedir(d);
	if (!sb.pos)
		sb_printf(&sb, "none");
	sb_finish(&sb);
}

int gfa_domain_check_pages(const struct gfa_domain_spec *s, const char *dir, char *err,
			   size_t errlen)
{
	char here[PAGE_WHERE_MAX], have[256];
	char what[GFA_DOMAIN_ORIGIN_MAX + GFA_DOMAIN_NAME_MAX + 16];
	struct msgs m = { "domain", err, errlen };
	unsigned int i;

	if (!s)
		return fail(&m, -EFAULT, "NULL argument");
	if (!domain_spec_counts_ok(s))
		return fail(&m, -EINVAL, "counts too large for the arrays");
	if (s->origin[0])
		snprintf(what, sizeof(what), "%.*s", (int)strnlen(s->origin, sizeof(s->origin)),
			 s->origin);
	else
		snprintf(what, sizeof(what), "domain '%.*s'",
			 (int)strnlen(s->name, sizeof(s->name)), s->name);
	m.origin = what;
	if (!dir)
		dir = "/sys/kernel/mm/hugepages";
	for (i = 0; s->hugepages && i < s->nr_pages; i++) {
		if (host_has_page(dir, s->pages[i].size_bytes))
			continue;
		domain_page_where(s, i, here, sizeof(here));
		host_page_list(dir, have, sizeof(have));
		return fail(&m, -EOPNOTSUPP,
			    "%s: %s is not a page size of this host (it has "
			    "%s), and libvirt's QEMU driver refuses to start it too; accepted: "
			    "%s, 2 MiB or a size this host has",
			    here, human(s->pages[i].size_bytes).s, have,
			    human((uint64_t)sysconf(_SC_PAGESIZE)).s);
	}
	return 0;
}
