/*
 * What a VMM that links libgfa gets: the shared library's dependencies (libnuma and
 * liburing, never the reference VMM's libvirt, libxml2 or GLib), the exported symbols
 * (the public API under its version node, none of allocator/layers.h) and the version.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gfa/gfa.h>

/* Run cmd on $GFA_BUILD/libgfa.so and return its output (static buffer). */
static const char *tool_output(const char *tool)
{
	static char out[256 * 1024];
	char cmd[512];
	const char *build = getenv("GFA_BUILD");
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "%s %s/libgfa.so 2>&1", tool, build ? build : "build");
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	cr_assert_eq(pclose(p), 0, "%s failed: %s", cmd, out);
	return out;
}

Test(library, needs_only_libnuma_liburing_and_libc)
{
	/* the sanitizer builds link their runtimes too */
	static const char *const allowed[] = {
		"libnuma.so", "liburing.so", "libc.so", "libm.so", "libpthread.so",
		"ld-linux-x86-64.so", "libasan.so", "libubsan.so", "libtsan.so"};
	const char *out = tool_output("readelf -d"), *l = out;
	int needed = 0;

	while ((l = strstr(l, "(NEEDED)"))) {
		const char *lib = strchr(l, '[');
		bool ok = false;

		cr_assert_not_null(lib);
		for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
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

Test(library, exports_the_public_api_only_under_its_version_node)
{
	static const char *const private_calls[] = {
		"gfa_zone_set_backing", "gfa_pool_set_moved_fn", "gfa_pool_count_error",
		"gfa_pool_set_released_fn", "gfa_zone_free_runs",
		"gfa_zone_release_take", "gfa_zone_populate_take", "gfa_zone_release_done",
		"gfa_capc", "gfa_kvm_vm_create", "gfa_vm_create", "gfa_domain_from_xml_file",
		"gfa_smaps_pmd_bytes", "gfa_memfd_allocated_bytes"};
	const char *out = tool_output("nm -D --defined-only --with-symbol-versions");
	char want[128];

	cr_expect_not_null(strstr(out, " gfa_pool_create@@GFA_0.2"), "%.2000s", out);
	cr_expect_not_null(strstr(out, " gfa_version@@GFA_0.2"));
	cr_expect_not_null(strstr(out, " gfa_guest_pin@@GFA_0.3"), "%.2000s", out);
	for (size_t i = 0; i < sizeof(private_calls) / sizeof(private_calls[0]); i++) {
		snprintf(want, sizeof(want), " %s@", private_calls[i]);
		cr_expect_null(strstr(out, want), "libgfa.so exports %s", private_calls[i]);
	}
	/* every exported name carries the gfa_ prefix */
	for (const char *l = out; (l = strstr(l, " T ")); l += 3)
		cr_expect(!strncmp(l + 3, "gfa_", 4), "exported: %.40s", l + 3);
}

Test(library, version_of_headers_and_library_agree)
{
	cr_expect_eq(gfa_version(), GFA_VERSION);
	cr_expect_eq(GFA_VERSION, (unsigned)GFA_VERSION_NUMBER(GFA_VERSION_MAJOR,
							   GFA_VERSION_MINOR,
							   GFA_VERSION_PATCH));
}
