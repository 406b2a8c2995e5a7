// SPDX-License-Identifier: MIT
/*
 * tools/check_api.py (`make check-api`) fails on each broken convention: it passes the
 * good header and map of tests/data/check_api/, and fails on each copy of them that one
 * edit of the table below breaks.  Fixtures are found from the working directory, or
 * from $GFA_SRCDIR.  tools/check_layers.py (also `make check-api`) finds numa/ and vmm/
 * in layers, and fails on a copy of vmm/ whose backing calls or includes a user again.
 * `make format-check` passes tests/data/format_check/good.c and fails on each copy of it
 * that one edit breaks the style of .clang-format in.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "common/compiler.h"

static const char *srcdir(void)
{
	const char *src = getenv("GFA_SRCDIR");

	return src ? src : ".";
}

/* Run the shell command cmd; its exit status, its output in out. */
static int run(const char *cmd, char *out, size_t len)
{
	size_t n;
	FILE *p = popen(cmd, "r");
	int st;

	cr_assert_not_null(p);
	n = fread(out, 1, len - 1, p);
	out[n] = 0;
	st = pclose(p);
	cr_assert(WIFEXITED(st), "%s: %s", cmd, out);
	return WEXITSTATUS(st);
}

/* Run the checker on a map and a header; its exit status, its output in out. */
static int check_api(const char *map, const char *header, char *out, size_t len)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd), "python3 %s/tools/check_api.py --map %s %s 2>&1", srcdir(), map,
		 header);
	return run(cmd, out, len);
}

/*
 * Copy fixture name of tests/data/<fixtures> into dir with its first `find` replaced by
 * `repl`; the copy's path.
 */
static void broken_copy(const char *fixtures, const char *dir, const char *name, const char *find,
			const char *repl, char *path, size_t len)
{
	char in[512], text[8192];
	const char *at;
	size_t n;
	FILE *f;

	snprintf(in, sizeof(in), "%s/tests/data/%s/%s", srcdir(), fixtures, name);
	f = fopen(in, "r");
	cr_assert_not_null(f, "%s", in);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	snprintf(path, len, "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	at = find ? strstr(text, find) : NULL;
	if (find)
		cr_assert_not_null(at, "%s has no \"%s\"", name, find);
	if (at)
		fprintf(f, "%.*s%s%s", (int)(at - text), text, repl, at + strlen(find));
	else
		fputs(text, f);
	fclose(f);
}

Test(check_api, passes_a_header_that_keeps_the_conventions)
{
	char out[4096], map[512], header[512];

	snprintf(map, sizeof(map), "%s/tests/data/check_api/good.map", srcdir());
	snprintf(header, sizeof(header), "%s/tests/data/check_api/good.h", srcdir());
	cr_expect_eq(check_api(map, header, out, sizeof(out)), 0, "%s", out);
}

Test(check_api, fails_on_each_broken_convention)
{
	/* in good.h, or in good.map when map is set: find -> repl, and what the checker says */
	static const struct {
		bool map;
		const char *find, *repl, *says;
	} bad[] = {
		{ false, "/**\n * gfa_thing_stat()", "/*\n * gfa_thing_stat()",
		  ": doc: gfa_thing_stat() has no kernel-doc block" },
		{ false, " * gfa_thing_free() - free a thing", " * free a thing",
		  "does not open with 'gfa_thing_free() - summary'" },
		{ false, " * Return: 0 or GFA_EFAULT.\n", "",
		  "returns int but has no 'Return:' line" },
		{ false, "GFA_EFAULT.\n * Context: any thread.\n", "GFA_EFAULT.\n",
		  "gfa_thing_stat(): no 'Context:' line" },
		{ false, "\tuint64_t reserved[4];", "", ": reserved: struct gfa_thing_stat" },
		{ false, "Return: 0 or GFA_EFAULT.", "Return: 0 or -EFAULT.",
		  ": errno: raw errno -EFAULT" },
		{ false, "Return: 0 or GFA_EFAULT.", "Return: 0, or NULL with errno ENOMEM.",
		  ": errno: raw errno ENOMEM" },
		{ false, " * @t: the thing\n",
		  " * @t: the thing, with a description long enough to "
		  "run past the hundredth column of this line, and then some\n",
		  ": columns: 109 columns" },
		{ true, "\t\tgfa_thing_free;", "\t\tgfa_*;", ": map: wildcard 'gfa_*'" },
		{ true, "\t\tgfa_thing_stat;\n", "", "gfa_thing_stat is declared but" },
		{ true, "\t\tgfa_thing_stat;", "\t\tgfa_thing_stat;\n\t\tgfa_thing_gone;",
		  "gfa_thing_gone is exported but no header" },
		{ true, "GFA_0.3 {", "GFA_0.4 {", "GFA_0.4 is newer than gfa/gfa.h's version 0.3" },
	};
	char dir[] = "/tmp/gfa-check-api-XXXXXX", out[4096], map[512], header[512];

	cr_assert_not_null(mkdtemp(dir));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		broken_copy("check_api", dir, "good.map", bad[i].map ? bad[i].find : NULL,
			    bad[i].repl, map, sizeof(map));
		broken_copy("check_api", dir, "good.h", bad[i].map ? NULL : bad[i].find,
			    bad[i].repl, header, sizeof(header));
		cr_expect_eq(check_api(map, header, out, sizeof(out)), 1, "case %zu passed:\n%s", i,
			     out);
		cr_expect_not_null(strstr(out, bad[i].says), "case %zu: no \"%s\" in:\n%s", i,
				   bad[i].says, out);
		remove(map);
		remove(header);
	}
	remove(dir);
}

#define CHECK_LAYERS "python3 %s/tools/check_layers.py --unit 'vmm/guest*.c' vmm/*.c 2>&1"

Test(check_layers, finds_numa_and_vmm_in_layers)
{
	char cmd[1024], out[4096];

	snprintf(cmd, sizeof(cmd), "cd %s && " CHECK_LAYERS " numa/*.c", srcdir(), ".");
	cr_expect_eq(run(cmd, out, sizeof(out)), 0, "%s", out);
	cr_expect_not_null(strstr(out, "no loop"), "%s", out);
}

/* The loop issue 29 untied: the backing called up into its zeroer and its reporter. */
Test(check_layers, fails_when_the_backing_knows_a_user)
{
	static const struct {
		const char *append, *says;
	} bad[] = {
		{ "void backing_kick_zeroer(struct gfa_backing *b)\n{\n"
		  "\tzero_worker_kick(zero_worker_get(b));\n}\n",
		  "vmm/backing.c -> vmm/zero_worker.c: zero_worker_get, zero_worker_kick" },
		{ "#include \"vmm/zero_worker.h\"\n", "vmm/backing.c -> vmm/zero_worker.c: "
						      "zero_worker.h" },
	};
	char dir[] = "/tmp/gfa-check-layers-XXXXXX", cmd[2048], check[512], out[8192];
	char *src = realpath(srcdir(), NULL);

	cr_assert_not_null(src);
	cr_assert_not_null(mkdtemp(dir));
	snprintf(check, sizeof(check), CHECK_LAYERS, src);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		snprintf(cmd, sizeof(cmd),
			 "cd %s && rm -rf vmm && cp -r %s/vmm . && "
			 "printf '%%s' '%s' >> vmm/backing.c && %s",
			 dir, src, bad[i].append, check);
		cr_expect_eq(run(cmd, out, sizeof(out)), 1, "case %zu passed:\n%s", i, out);
		cr_expect_not_null(strstr(out, bad[i].says), "case %zu: no \"%s\" in:\n%s", i,
				   bad[i].says, out);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(run(cmd, out, sizeof(out)), 0, "%s", out);
	free(src);
}

/* `make format-check` on file path alone; its exit status, its output in out. */
static int format_check(const char *path, char *out, size_t len)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "make -s --no-print-directory -C %s format-check FORMAT_SRC='%s' 2>&1", srcdir(),
		 path);
	return run(cmd, out, len);
}

Test(format_check, passes_a_file_in_the_style)
{
	char out[4096], path[512];

	snprintf(path, sizeof(path), "%s/tests/data/format_check/good.c", srcdir());
	cr_expect_eq(format_check(path, out, sizeof(out)), 0, "%s", out);
	cr_expect_not_null(strstr(out, "format-check: 1 files"), "%s", out);
}

Test(format_check, fails_on_each_broken_rule)
{
	/* in good.c: find -> repl, and where clang-format says so (the white space before
	 * the token it would move, which may start on the line above) */
	static const struct {
		const char *find, *repl, *line;
	} bad[] = {
		{ "\tuint64_t start;", "        uint64_t start;", "good.c:11:" },
		{ "uint64_t start)\n{", "uint64_t start) {", "good.c:16:" },
		{ "if (t[i].start", "if(t[i].start", "good.c:19:" },
		{ "\t\tunsigned int *found)", "                unsigned int *found)",
		  "good.c:25:" },
		{ "unsigned int order,\n\t\tunsigned int *found)",
		  "unsigned int order, unsigned int *found)", "good.c:25:" },
		{ "\tcase 0:", "\t\tcase 0:", "good.c:32:" },
		{ "#include <stdint.h>\n", "#include <stdint.h>\n\n\n", "good.c:6:" },
		{ "int i = thing_find(t, n, start);", "int i = thing_find(t,n,start);",
		  "good.c:28:" },
	};
	char dir[] = "/tmp/gfa-format-check-XXXXXX", out[8192], path[512];

	cr_assert_not_null(mkdtemp(dir));
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		broken_copy("format_check", dir, "good.c", bad[i].find, bad[i].repl, path,
			    sizeof(path));
		cr_expect_neq(format_check(path, out, sizeof(out)), 0, "case %zu passed:\n%s", i,
			      out);
		cr_expect_not_null(strstr(out, bad[i].line), "case %zu: no \"%s\" in:\n%s", i,
				   bad[i].line, out);
		remove(path);
	}
	remove(dir);
}
