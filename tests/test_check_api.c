// SPDX-License-Identifier: MIT
/*
 * tools/check_api.py (`make check-api`) fails on each broken convention: the fixtures of
 * tests/data/check_api/ are one good header and map, and copies of them that break one
 * rule each.  Found from the working directory, or from $GFA_SRCDIR.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Run the checker on a map and a header of the fixtures; its exit status, output in out. */
static int check_api(const char *map, const char *header, char *out, size_t len)
{
	const char *src = getenv("GFA_SRCDIR");
	char cmd[1024];
	size_t n;
	FILE *p;
	int st;

	src = src ? src : ".";
	snprintf(cmd, sizeof(cmd), "python3 %s/tools/check_api.py --map %s/tests/data/check_api/%s "
		 "%s/tests/data/check_api/%s 2>&1", src, src, map, src, header);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, len - 1, p);
	out[n] = 0;
	st = pclose(p);
	cr_assert(WIFEXITED(st), "%s: %s", cmd, out);
	return WEXITSTATUS(st);
}

Test(check_api, passes_a_header_that_keeps_the_conventions)
{
	char out[4096];

	cr_expect_eq(check_api("good.map", "good.h", out, sizeof(out)), 0, "%s", out);
}

Test(check_api, fails_on_each_broken_convention)
{
	static const struct {
		const char *map, *header, *says;
	} bad[] = {
		{ "good.map", "bad-doc-none.h", ": doc: gfa_thing_stat() has no kernel-doc block" },
		{ "good.map", "bad-doc-summary.h", "does not open with 'gfa_thing_free() - summary'" },
		{ "good.map", "bad-doc-return.h", "returns int but has no 'Return:' line" },
		{ "good.map", "bad-doc-context.h", "gfa_thing_stat(): no 'Context:' line" },
		{ "good.map", "bad-reserved.h", ": reserved: struct gfa_thing_stat" },
		{ "good.map", "bad-errno.h", ": errno: raw errno -EFAULT" },
		{ "good.map", "bad-errno-positive.h", ": errno: raw errno ENOMEM" },
		{ "good.map", "bad-columns.h", ": columns: 109 columns" },
		{ "bad-wildcard.map", "good.h", ": map: wildcard 'gfa_*'" },
		{ "bad-missing.map", "good.h", "gfa_thing_stat is declared but" },
		{ "bad-undeclared.map", "good.h", "gfa_thing_gone is exported but no header" },
		{ "bad-newer-node.map", "good.h", "GFA_0.4 is newer than gfa/gfa.h's version 0.3" },
	};
	char out[4096];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(check_api(bad[i].map, bad[i].header, out, sizeof(out)), 1,
			     "%s %s passed:\n%s", bad[i].map, bad[i].header, out);
		cr_expect_not_null(strstr(out, bad[i].says), "%s %s: no \"%s\" in:\n%s",
				   bad[i].map, bad[i].header, bad[i].says, out);
	}
}
