/*
 * What a VMM that links libgfa gets: the shared library's dependencies (libnuma and
 * liburing, never the reference VMM's libvirt, libxml2 or GLib), the exported symbols
 * (the public headers' functions, each under its version node, and nothing else) and the
 * version.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gfa/gfa.h>
#include "common/compiler.h"

/* Run tool on $GFA_BUILD/file and return its output (static buffer). */
static const char *tool_output_on(const char *tool, const char *file)
{
	static char out[256 * 1024];
	char cmd[512];
	const char *build = getenv("GFA_BUILD");
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s %s/%s 2>&1", tool, build ? build : "build", file);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	cr_assert_eq(pclose(p), 0, "%s failed: %s", cmd, out);
	return out;
}

/* Run tool on $GFA_BUILD/libgfa.so and return its output (static buffer). */
static const char *tool_output(const char *tool)
{
	return tool_output_on(tool, "libgfa.so");
}

Test(library, needs_only_libnuma_liburing_and_libc)
{
	/* the sanitizer builds link their runtimes too */
	static const char *const allowed[] = { "libnuma.so", "liburing.so",   "libc.so",
					       "libm.so",    "libpthread.so", "ld-linux-x86-64.so",
					       "libasan.so", "libubsan.so",   "libtsan.so" };
	const char *out = tool_output("readelf -d"), *l = out;
	int needed = 0;

	while ((l = strstr(l, "(NEEDED)"))) {
		const char *lib = strchr(l, '[');
		bool ok = false;

		cr_assert_not_null(lib);
		for (size_t i = 0; i < ARRAY_SIZE(allowed); i++)
			ok |= !strncmp(lib + 1, allowed[i], strlen(allowed[i]));
		cr_expect(ok, "libgfa.so needs %.*s", (int)strcspn(lib + 1, "]"), lib + 1);
		needed++;
		l = lib;
	}
	cr_expect_geq(needed, 3, "readelf found %d NEEDED entries:\n%s", needed, out);
	cr_expect_null(strstr(out, "libvirt"));
	cr_expect_null(strstr(out, "libxml2"));
	cr_expect_null(strstr(out, "libglib"));
}

/* Is name a line of list (one name a line)? */
static bool listed(const char *list, const char *name, size_t len)
{
	for (const char *l = list; (l = strstr(l, name)); l += len)
		if ((l == list || l[-1] == '\n') && l[len] == '\n')
			return true;
	return false;
}

/* The public functions of libgfa's headers, one a line (tools/check_api.py --list). */
static char *public_functions(void)
{
	const char *src = getenv("GFA_SRCDIR");
	char cmd[1024];
	size_t n = 0, r;
	char *out = malloc(64 * 1024);
	FILE *p;

	cr_assert_not_null(out);
	src = src ? src : ".";
	snprintf(cmd, sizeof(cmd),
		 "python3 %s/tools/check_api.py --list %s/include/gfa/allocator.h "
		 "%s/include/gfa/numa.h %s/include/gfa/vmm.h %s/include/gfa/gfa.h",
		 src, src, src, src, src);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	while ((r = fread(out + n, 1, 64 * 1024 - 1 - n, p)) > 0)
		n += r;
	out[n] = 0;
	cr_assert_eq(pclose(p), 0, "%s failed: %s", cmd, out);
	return out;
}

/*
 * libgfa.so exports exactly the functions the public headers declare, each under a
 * version node (libgfa.map names each one: no wildcard makes a new internal gfa_
 * function ABI), and no other name.
 */
Test(library, exports_what_the_headers_declare)
{
	const char *out = tool_output("nm -D --defined-only --with-symbol-versions");
	char *decl = public_functions(), *save = NULL;
	char want[160];
	int nexp = 0, ndecl = 0;

	/* every export is declared, and versioned */
	for (const char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
		char type, name[128];

		if (sscanf(l, "%*s %c %127[^@\n]", &type, name) != 2 || type == 'A')
			continue;
		nexp++;
		cr_expect(listed(decl, name, strlen(name)),
			  "libgfa.so exports %s, no header declares it", name);
		snprintf(want, sizeof(want), " %s@@GFA_0.", name);
		cr_expect_not_null(strstr(out, want), "%s has no version node", name);
	}
	/* every declared function is exported */
	for (char *name = strtok_r(decl, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
		ndecl++;
		snprintf(want, sizeof(want), " %s@@GFA_0.", name);
		cr_expect_not_null(strstr(out, want),
				   "%s is declared but libgfa.so does not export it", name);
	}
	cr_expect_eq(nexp, ndecl, "%d exports, %d public functions", nexp, ndecl);
	cr_expect_gt(ndecl, 100);
	/* a name of each node, and a cross-layer call that stays inside */
	cr_expect_not_null(strstr(out, " gfa_pool_create@@GFA_0.2"), "%.2000s", out);
	cr_expect_not_null(strstr(out, " gfa_guest_pin@@GFA_0.3"), "%.2000s", out);
	cr_expect_null(strstr(out, "zone_release_take"));
	free(decl);
}

/*
 * A gfa_ name is a public one: no global symbol of libgfa's objects wears the prefix
 * unless a public header declares it.  The calls between the layers (allocator/layers.h,
 * numa/ and vmm/'s internal headers) go by zone_, pool_, backing_ and the like, so the
 * map's explicit list is the whole of gfa_.
 */
Test(library, internal_names_wear_no_public_prefix)
{
	const char *out = tool_output_on("nm -g --defined-only", "libgfa.a");
	char *decl = public_functions();
	int n = 0;

	for (const char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
		char type, name[128];

		if (sscanf(l, "%*s %c %127s", &type, name) != 2 || strncmp(name, "gfa_", 4))
			continue;
		n++;
		cr_expect(listed(decl, name, strlen(name)),
			  "%s is global in libgfa.a with the public prefix, but no public header "
			  "declares it",
			  name);
	}
	cr_expect_gt(n, 100, "nm found %d gfa_ names:\n%.2000s", n, out);
	free(decl);
}

/* `make` writes a section 3 man page of each public function into $GFA_BUILD/man. */
Test(library, each_public_function_has_a_man_page)
{
	const char *build = getenv("GFA_BUILD");
	char *decl = public_functions(), *save = NULL;
	char path[512], line[256];
	int n = 0;

	for (char *name = strtok_r(decl, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/man/%s.3", build ? build : "build", name);
		f = fopen(path, "r");
		cr_expect_not_null(f, "no man page %s", path);
		if (!f)
			continue;
		cr_expect_not_null(fgets(line, sizeof(line), f));
		cr_expect(!strncmp(line, ".TH ", 4), "%s: %s", path, line);
		fclose(f);
		n++;
	}
	cr_expect_gt(n, 100);
	free(decl);
}

Test(library, version_of_headers_and_library_agree)
{
	cr_expect_eq(gfa_version(), GFA_VERSION);
	cr_expect_eq(GFA_VERSION, (unsigned)GFA_VERSION_NUMBER(GFA_VERSION_MAJOR, GFA_VERSION_MINOR,
							       GFA_VERSION_PATCH));
}
