/* gfactl end to end: the README's main job on a small scenario, its errors, stat. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "tests/test_util.h"
#include "tests/qemu_util.h"
#include "gfa/numa.h"
#include "common/compiler.h"

/* Run a shell command, capture stdout+stderr; returns the exit code. */
static int run(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t len, const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	FILE *p;
	size_t n;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	strncat(cmd, " 2>&1", sizeof(cmd) - strlen(cmd) - 1);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, len - 1, p);
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *gfactl(void)
{
	static char path[512];
	const char *b = getenv("GFA_BUILD");

	snprintf(path, sizeof(path), "%s/gfactl", b ? b : "build");
	if (access(path, X_OK))
		cr_skip_test("%s not built", path);
	return path;
}

static char out[1 << 16];

/* The scenario's files, removed even when an assertion ends the test early. */
static char stat_file[] = "/tmp/gfactl-test-XXXXXX", victim[] = "/tmp/gfactl-victim-XXXXXX";

static void scenario_files_gone(void)
{
	char p[PATH_MAX];

	unlink(stat_file);
	unlink(victim);
	snprintf(p, sizeof(p), "%s.tmp", stat_file);
	unlink(p);
	snprintf(p, sizeof(p), "%s.csv", stat_file);
	unlink(p);
}

Test(gfactl, vmstart_small_scenario_with_baselines, .timeout = 180, .fini = scenario_files_gone)
{
	const char *g = gfactl();
	char planted[PATH_MAX];
	int fd = mkstemp(stat_file), rc;
	struct stat st;

	close(fd);
	/* a link planted where the temporary file used to be (<file>.tmp) is not followed */
	fd = mkstemp(victim);
	cr_assert_eq(write(fd, "keep", 4), 4);
	close(fd);
	snprintf(planted, sizeof(planted), "%s.tmp", stat_file);
	cr_assert_eq(symlink(victim, planted), 0);
	rc = run(out, sizeof(out),
		 "%s vmstart --vms 2 --mem 16M --rounds 1 --kvm off "
		 "--host-thp keep --stat-file %s --csv %s.csv",
		 g, stat_file, stat_file);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert_eq(stat(victim, &st), 0);
	cr_assert_eq(st.st_size, 4, "the stat file was written through a planted link");
	cr_assert_eq(lstat(stat_file, &st), 0);
	cr_assert(S_ISREG(st.st_mode), "the stat file is a link now");
	unlink(planted);
	unlink(victim);
	cr_assert_not_null(strstr(out, "vCPUs: host threads (KVM turned off"), "%s", out);
	cr_assert_not_null(strstr(out, "RESULT vmstart vs_kernel_4k="), "%s", out);
	cr_assert_not_null(strstr(out, "huge_share="));
	cr_assert_not_null(strstr(out, "buddyinfo after:"));
	/* the baselines' PMD figure covers all VMs and never more (VMAs once merged) */
	int lines = 0;

	for (const char *k = strstr(out, "(PMD-mapped "); k; k = strstr(k + 1, "(PMD-mapped ")) {
		long got = -1, of = -1;

		cr_assert_eq(sscanf(k, "(PMD-mapped %ld of %ld MiB)", &got, &of), 2, "%s", k);
		cr_assert(got >= 0 && got <= of && of == 32, "PMD-mapped %ld of %ld MiB", got, of);
		lines++;
	}
	cr_assert_eq(lines, 3, "the three kernel baselines print their PMD figure: %s", out);
	cr_assert_not_null(strstr(out, " vs_prefaulted="), "%s", out);
	/* the fair figures: a second RESULT line with the ratios on equal terms */
	cr_assert_not_null(strstr(out, "-- on equal terms"), "%s", out);
	cr_assert_not_null(strstr(out, "RESULT vmstart vs_prefaulted_kvm="), "%s", out);
	for (const char *key = "restart_vs_kernel_thp=\0restart_vs_clean=\0zero_vs_memset=\0"
			       "vs_strongest=\0restart_p50_ms=\0";
	     *key; key += strlen(key) + 1)
		cr_assert_not_null(strstr(out, key), "no %s: %s", key, out);
	cr_assert(strstr(out, "hugetlbfs pool + KVM:      p50") ||
			  strstr(out, "hugetlbfs pool + KVM:      not run ("),
		  "%s", out);
	cr_assert_not_null(strstr(out, "no KVM vCPUs in this run"), "%s", out);
	{
		double zr = 0;
		const char *z = strstr(out, "zero_vs_memset=");

		cr_assert_eq(sscanf(z, "zero_vs_memset=%lf", &zr), 1);
		cr_assert_gt(zr, 0.0, "%s", z);
	}
	/* gfactl stat reads what vmstart wrote */
	rc = run(out, sizeof(out), "%s stat --file %s", g, stat_file);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert_not_null(strstr(out, "Node 0, zone   Normal"), "%s", out);
	cr_assert_not_null(strstr(out, "compact_migrate_scanned "), "%s", out);
	{
		const char *m = strstr(out, "bytes_per_frame ");
		double bpf = 0;

		cr_assert_not_null(m, "%s", out);
		cr_assert_eq(sscanf(m, "bytes_per_frame %lf", &bpf), 1);
		cr_assert(bpf > 0 && bpf < 64, "%s", m);
	}
	rc = run(out, sizeof(out),
		 "%s stat --file %s --json | python3 -c 'import json, sys; "
		 "print(\"pgalloc\", json.load(sys.stdin)[\"vmstat\"][\"pgalloc\"])'",
		 g, stat_file);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert_not_null(strstr(out, "pgalloc "), "%s", out);
	rc = run(out, sizeof(out), "head -1 %s.csv && grep -c '^start,gfa' %s.csv", stat_file,
		 stat_file);
	cr_assert_not_null(strstr(out, "kind,memory,phase"), "%s", out);
	unlink(stat_file);
	snprintf(out, sizeof(out), "%s.csv", stat_file);
	unlink(out);
}

Test(gfactl, errors_name_the_flag_or_file)
{
	const char *g = gfactl();

	cr_assert_eq(run(out, sizeof(out), "%s vmstart --vms x", g), 2);
	cr_assert_not_null(strstr(out, "--vms"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --mem 3M", g), 2);
	cr_assert_not_null(strstr(out, "--mem"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --kvm maybe", g), 2);
	cr_assert_not_null(strstr(out, "--kvm"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --domain-xml /no/such.xml", g), 2);
	cr_assert_not_null(strstr(out, "/no/such.xml"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --libvirt bogus:///x --domain d", g), 2);
	cr_assert_not_null(strstr(out, "bogus:///x"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --libvirt test:///default --domain nope", g),
		     2);
	cr_assert_not_null(strstr(out, "nope"), "%s", out);
	/* strtoull reads "-18446744073709551615" as 1: digits only */
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --vms -18446744073709551615", g), 2);
	cr_assert_not_null(strstr(out, "--vms"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --vms 2 --mem 8E", g), 2);
	cr_assert_not_null(strstr(out, "--mem"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --frobnicate", g), 2);
	cr_assert_not_null(strstr(out, "frobnicate"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --vms", g), 2);
	cr_assert_not_null(strstr(out, "vms"), "a missing value names the flag: %s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart stray", g), 2);
	cr_assert_not_null(strstr(out, "stray"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s nosuchcommand", g), 2);
	cr_assert_eq(run(out, sizeof(out), "%s stat --file /no/such/file", g), 1);
	cr_assert_not_null(strstr(out, "/no/such/file"), "%s", out);
	cr_assert_eq(run(out, sizeof(out), "%s vmstart --help", g), 0);
	cr_assert_not_null(strstr(out, "--proactiveness"));
	cr_assert_eq(run(out, sizeof(out), "%s stat --help", g), 0);
}

Test(gfactl, vmstart_from_a_libvirt_domain, .timeout = 120)
{
	const char *g = gfactl();
	const char *src = getenv("GFA_SRCDIR");
	int rc;

	/* tests/data/testnode.xml holds domain "small" for libvirt's test driver */
	rc = run(out, sizeof(out),
		 "%s vmstart --libvirt test://%s/tests/data/testnode.xml "
		 "--domain small --vms 1 --rounds 0 --kvm off --no-baseline --host-thp keep "
		 "--stat-file /tmp/gfactl-test-domain.json",
		 g, src ? src : getcwd(out, sizeof(out)));
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert_not_null(strstr(out, "domain: small"), "%s", out);
	cr_assert_not_null(strstr(out, "RESULT vmstart gfa_p50_ms="), "%s", out);
	unlink("/tmp/gfactl-test-domain.json");
}

/*
 * gfactl vmstart opts --domain-xml F, F holding xml; its exit code (output in out).  F's
 * name is in the messages the tests expect, so tests running at once take turns on it.
 */
static int run_domain_xml(const char *g, const char *opts, const char *xml)
{
	int lock = open("/tmp/gfactl-test-f.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	FILE *f;
	int rc;

	cr_assert_geq(lock, 0);
	cr_assert_eq(flock(lock, LOCK_EX), 0);
	f = fopen("/tmp/gfactl-test-f.xml", "w");
	cr_assert_not_null(f);
	fputs(xml, f);
	fclose(f);
	rc = run(out, sizeof(out), "%s vmstart %s --domain-xml /tmp/gfactl-test-f.xml", g, opts);
	unlink("/tmp/gfactl-test-f.xml");
	close(lock);
	return rc;
}

/*
 * What a domain asks for, said as the domain said it: a hugepage size no host has is
 * refused at start (as libvirt's QEMU driver does), more vCPUs than the test VM runs
 * is said, and size errors name the file and the domain's memory, not a --mem never
 * given.
 */
Test(gfactl, domain_figures_are_said, .timeout = 120)
{
	static const struct {
		const char *xml, *said;
	} too_big[] = {
		{ "<domain><name>bigger</name><memory unit='TiB'>17</memory></domain>",
		  "domain XML file '/tmp/gfactl-test-f.xml': <memory>: the domain's memory, "
		  "17 TiB, is more than the 16 TiB" },
		{ "<domain><name>huge</name><memory>9007199254740991</memory></domain>",
		  "<memory>: the domain's memory, larger than 4 PiB, is more than the 16 TiB" },
	};
	const char *g = gfactl(), *src = getenv("GFA_SRCDIR");
	const char *opts = "--vms 1 --rounds 0 --kvm off --host-thp keep --no-baseline --quiet "
			   "--stat-file /tmp/gfactl-test-f.json";
	char dir[PATH_MAX];
	int rc;

	snprintf(dir, sizeof(dir), "%s/tests/data", src ? src : getcwd(out, sizeof(out)));
	rc = run(out, sizeof(out), "%s vmstart %s --domain-xml %s/domain-hugepage-5m.xml", g, opts,
		 dir);
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "gfactl vmstart: domain XML file '"), "%s", out);
	cr_assert_not_null(strstr(out, "domain-hugepage-5m.xml': hugepage 1 (5 MiB, nodeset='0'): "
				       "5 MiB is not a page size of this host"),
			   "%s", out);
	rc = run(out, sizeof(out), "%s vmstart %s --domain-xml %s/domain-vcpus-288.xml", g, opts,
		 dir);
	cr_assert_eq(rc, 0, "rc %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "domain has 288 vCPUs, more than the 64 of gfactl's test "
				       "VM: each VM runs 64 vCPU threads"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "1 VMs x 64 vCPUs x 8 MiB"), "%s", out);
	/* (--pool 4M: the domain line is all this run is for) */
	rc = run(out, sizeof(out),
		 "%s vmstart %s --domain-xml %s/domain-inconsistent.xml "
		 "--pool 4M",
		 g, opts, dir);
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "memory 4 GiB (the NUMA cells, as libvirt's QEMU driver "
				       "sizes it; <memory> says 8 GiB)"),
			   "%s", out);
	cr_assert_not_null(strstr(out, "--pool must be a multiple of 2 MiB and hold --vms x the "
				       "domain's memory and"),
			   "%s", out);
	rc = run_domain_xml(g, opts,
			    "<domain><name>tiny</name><memory unit='MiB'>2</memory>"
			    "</domain>");
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "the domain's memory must be a multiple of 2 MiB, at least "
				       "4 MiB"),
			   "%s", out);
	rc = run_domain_xml(g, opts,
			    "<domain><name>big</name><memory unit='TiB'>15</memory>"
			    "</domain>");
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "--vms 1 x the domain's memory 15 TiB needs "), "%s", out);
	cr_assert_null(strstr(out, "--mem"), "%s", out);
	/* more than a VM may have, a size no host has said without its number */
	for (unsigned int i = 0; i < ARRAY_SIZE(too_big); i++) {
		rc = run_domain_xml(g, opts, too_big[i].xml);
		cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
		cr_assert_not_null(strstr(out, too_big[i].said), "%s", out);
		cr_assert_null(strstr(out, "9007199254740991"), "%s", out);
	}
	unlink("/tmp/gfactl-test-f.json");
}

/*
 * The import's messages come out as the import words them, their file named once, and
 * the summary says what the import changed as libvirt's QEMU driver does.
 */
Test(gfactl, domain_messages_name_the_file_once, .timeout = 120)
{
	const char *g = gfactl(), *src = getenv("GFA_SRCDIR");
	const char *opts = "--vms 1 --rounds 0 --kvm off --host-thp keep --no-baseline --quiet "
			   "--stat-file /tmp/gfactl-test-m.json --pool 4M";
	char dir[PATH_MAX], want[PATH_MAX + 256];
	int rc;

	snprintf(dir, sizeof(dir), "%s/tests/data", src ? src : getcwd(out, sizeof(out)));
	rc = run(out, sizeof(out), "%s vmstart %s --domain-xml %s/domain-two-default-pages.xml", g,
		 opts, dir);
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
	snprintf(want, sizeof(want),
		 "gfactl vmstart: domain XML file '%s/domain-two-default-"
		 "pages.xml': hugepage 2 (2 MiB, nodeset='0' dropped: no NUMA cells): a second "
		 "page without nodeset besides hugepage 1 (1 GiB, no nodeset)",
		 dir);
	cr_assert_not_null(strstr(out, want), "%s", out);
	rc = run(out, sizeof(out), "%s vmstart %s --domain-xml %s/domain-dimm-no-node.xml", g, opts,
		 dir);
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
	cr_assert_not_null(strstr(out,
				  "domain-dimm-no-node.xml': memory device 1 <memory "
				  "model='dimm'><target><node>: names NUMA cell 1, which does not "
				  "exist; accepted: cell 0"),
			   "%s", out);
	rc = run_domain_xml(g, opts, "<domain>\n<name>x</name>\n</domian>");
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
	cr_assert_not_null(strstr(out,
				  "gfactl vmstart: domain XML file '/tmp/gfactl-test-f.xml': "
				  "line 3: not well-formed XML, </domian> does not close <domain>; "
				  "accepted: </domain>"),
			   "%s", out);
	/* (--pool 4M: the summary is all these runs are for) */
	rc = run(out, sizeof(out), "%s vmstart %s --domain-xml %s/domain-vcpus-no-cell.xml", g,
		 opts, dir);
	cr_assert_not_null(strstr(out, "[0: cpus 0-1,3,5-7, 1 GiB; 1: cpus 2,4, 1 GiB] (vCPUs "
				       "3,5-7 are in no cell; node 0 gets them, as libvirt's QEMU "
				       "driver does)"),
			   "%s", out);
	rc = run(out, sizeof(out), "%s vmstart %s --domain-xml %s/domain-nodeset-no-numa.xml", g,
		 opts, dir);
	unlink("/tmp/gfactl-test-m.json");
	cr_assert_not_null(strstr(out, "hugepages 2 MiB (default; nodeset='0' dropped: no NUMA "
				       "cells, as libvirt does)"),
			   "%s", out);
}

/* A --stat-file that cannot be written is an error that names it (it was ignored). */
Test(gfactl, unwritable_stat_file_is_an_error, .timeout = 120)
{
	const char *g = gfactl();

	cr_assert_neq(run(out, sizeof(out),
			  "%s vmstart --vms 1 --mem 4M --rounds 0 --kvm off "
			  "--quiet --no-baseline --host-thp keep --stat-file /no/such/dir/x.json",
			  g),
		      0, "%s", out);
	cr_assert_not_null(strstr(out, "/no/such/dir/x.json"), "%s", out);
}

/* The default pool has room for the unmovable frames churn keeps (round 33 ran out). */
Test(gfactl, default_pool_survives_many_rounds, .timeout = 180)
{
	const char *g = gfactl();
	int rc = run(out, sizeof(out),
		     "%s vmstart --vms 2 --mem 8M --rounds 40 --kvm off "
		     "--host-thp keep --no-baseline --quiet --stat-file /tmp/gfactl-test-r.json",
		     g);

	unlink("/tmp/gfactl-test-r.json");
	cr_assert_eq(rc, 0, "%s", out);
}

/* Sizes that cannot work are usage errors naming the flag, not failures later on. */
Test(gfactl, pool_and_domain_sizes_are_checked, .timeout = 60)
{
	const char *g = gfactl();
	FILE *f;
	int rc;

	rc = run(out, sizeof(out),
		 "%s vmstart --vms 2 --mem 8M --pool 4M --rounds 1 --kvm off "
		 "--host-thp keep --no-baseline --quiet --stat-file /tmp/gfactl-test-p.json",
		 g);
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
	cr_assert_not_null(strstr(out, "--pool"), "%s", out);
	f = fopen("/tmp/gfactl-test-d.xml", "w");
	cr_assert_not_null(f);
	fputs("<domain type='kvm'><name>x</name><memory unit='EiB'>4</memory>"
	      "<vcpu>2</vcpu></domain>",
	      f);
	fclose(f);
	rc = run(out, sizeof(out),
		 "%s vmstart --vms 4 --rounds 1 --kvm off --host-thp keep "
		 "--no-baseline --quiet --stat-file /tmp/gfactl-test-p.json "
		 "--domain-xml /tmp/gfactl-test-d.xml",
		 g);
	unlink("/tmp/gfactl-test-d.xml");
	unlink("/tmp/gfactl-test-p.json");
	cr_assert_null(strstr(out, "pool of 0 MiB"), "%s", out);
	cr_assert_eq(rc, 2, "rc %d: %s", rc, out);
}

/*
 * A name with control characters (the stat file's: the snapshot records the command
 * line) comes out as valid JSON.  Python's json module refuses raw control characters
 * (json-c's own tokener takes them): it reads vmstart's file and stat --json's output
 * and finds the name whole.
 */
Test(gfactl, snapshot_is_json_whatever_the_names_hold, .timeout = 120)
{
	static const char check[] =
		"python3 -c 'import json, sys; d = json.load(open(sys.argv[1]) if sys.argv[1] != "
		"\"-\" else sys.stdin); assert sys.argv[2] in d[\"command\"], d[\"command\"]; "
		"print(\"parsed\", d[\"phase\"], len(d[\"vmstat\"]))'";
	const char *g = gfactl();
	char name[] = "/tmp/gfactl-test-\x01\x1f\t\n\r\"\\\x7f.json";
	int rc;

	rc = run(out, sizeof(out),
		 "%s vmstart --vms 1 --mem 4M --rounds 0 --kvm off --quiet "
		 "--no-baseline --host-thp keep --stat-file '%s'",
		 g, name);
	cr_assert_eq(rc, 0, "%s", out);
	rc = run(out, sizeof(out), "%s '%s' '%s'", check, name, name);
	cr_assert_eq(rc, 0, "vmstart's snapshot is not JSON: %s", out);
	cr_assert_not_null(strstr(out, "parsed done "), "%s", out);
	rc = run(out, sizeof(out), "%s stat --json --file '%s' | %s - '%s'", g, name, check, name);
	unlink(name);
	cr_assert_eq(rc, 0, "stat --json's output is not JSON: %s", out);
	cr_assert_not_null(strstr(out, "parsed done "), "%s", out);
}

/*
 * With KVM: one shell per VM made before the timer, restarts take them again, and the
 * baselines create the same KVM VM the shells hold.
 */
Test(gfactl, vmstart_with_kvm_makes_shells_before_the_timer, .timeout = 180)
{
	const char *g = gfactl();
	char why[160];
	unsigned int shells = 0;
	const char *k;
	int rc;

	if (!gfa_kvm_available(why, sizeof(why))) {
		cr_skip_test("no KVM: %s", why);
		return;
	}
	rc = run(out, sizeof(out),
		 "%s vmstart --vms 2 --mem 8M --rounds 1 --kvm on --host-thp keep "
		 "--quiet --stat-file /tmp/gfactl-test-k.json",
		 g);
	unlink("/tmp/gfactl-test-k.json");
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert_not_null(strstr(out, "VM shells: 2 made"), "%s", out);
	k = strstr(out, " shells=");
	cr_assert_not_null(k, "%s", out);
	cr_assert_eq(sscanf(k, " shells=%u", &shells), 1);
	cr_assert_eq(shells, 2);
	cr_assert_not_null(strstr(out, "pre-faulted THP memfd+KVM: p50"), "%s", out);
	cr_assert_not_null(strstr(out, " kvm=1"), "%s", out);
}

/* gfactl stat refuses a snapshot cut short instead of printing broken JSON. */
Test(gfactl, stat_refuses_a_cut_snapshot, .timeout = 60)
{
	const char *g = gfactl();
	FILE *f = fopen("/tmp/gfactl-test-t.json", "w");
	int rc;

	cr_assert_not_null(f);
	fputs("{\n  \"pid\": 1,\n  \"phase\": \"done\",\n  \"buddyinfo\": \"Node 0, zo", f);
	fclose(f);
	rc = run(out, sizeof(out), "%s stat --json --file /tmp/gfactl-test-t.json", g);
	cr_assert_eq(rc, 1, "cut JSON printed with exit %d: %s", rc, out);
	rc = run(out, sizeof(out), "%s stat --file /tmp/gfactl-test-t.json", g);
	unlink("/tmp/gfactl-test-t.json");
	cr_assert_eq(rc, 1, "%s", out);
}

/*
 * gfactl vmsnap: a VM saved and run again lazily from its file checks its memory; a
 * byte changed in the file is a mismatch its vCPUs see; a broken shape file is refused.
 */
Test(gfactl, vmsnap_restores_what_it_saved_and_sees_a_changed_byte, .timeout = 120)
{
	const char *g = gfactl();
	char img[] = "/var/tmp/gfactl-vmsnap-XXXXXX", json[64];
	int fd = mkstemp(img), rc;
	unsigned long bad = 0;

	cr_assert_geq(fd, 0);
	close(fd);
	snprintf(json, sizeof(json), "%s.json", img);
	rc = run(out, sizeof(out), "%s vmsnap save %s --mem 64M --vcpus 2 --seed 77", g, img);
	if (rc && strstr(out, "userfaultfd"))
		cr_skip_test("no userfaultfd here: %s", out);
	cr_assert_eq(rc, 0, "save: %s", out);
	rc = run(out, sizeof(out), "%s vmsnap restore %s", g, img);
	if (rc && (strstr(out, "Operation not permitted") || strstr(out, "not supported")))
		cr_skip_test("no userfaultfd here: %s", out);
	cr_assert_eq(rc, 0, "restore: %s", out);
	cr_assert_not_null(strstr(out, "RESULT vmsnap restore_ms="), "%s", out);
	cr_assert_not_null(strstr(out, " mismatches=0"), "%s", out);
	/* one word of the workload area (above the first 2 MiB) changed in the file */
	fd = open(img, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, "X", 1, 8 * (1 << 20) + 8), 1);
	close(fd);
	rc = run(out, sizeof(out), "%s vmsnap restore %s", g, img);
	cr_assert_eq(rc, 1, "a changed snapshot restored clean: %s", out);
	cr_assert_eq(sscanf(strstr(out, " mismatches=") ? strstr(out, " mismatches=") : "",
			    " mismatches=%lu", &bad),
		     1, "%s", out);
	cr_assert_eq(bad, 1, "%s", out);
	fd = open(json, O_WRONLY | O_TRUNC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "{\"mem_bytes\": 3}", 16), 16);
	close(fd);
	rc = run(out, sizeof(out), "%s vmsnap restore %s", g, img);
	unlink(img);
	unlink(json);
	cr_assert_eq(rc, 1, "%s", out);
	cr_assert_not_null(strstr(out, "not a snapshot's shape"), "%s", out);
}

/* ---- gfactl vmstart on two NUMA nodes (a two-node QEMU guest unless this host has them):
 * VMs go round-robin over the nodes' zones, so every zone must hold the VMs placed on
 * it, not 1/nodes of the pool. ---- */

static int vmstart_on_two_nodes(const char *args)
{
	struct gfa_numa_topology *t;
	char cmd[1024];
	const char *san = getenv("GFA_SANITIZER");
	double secs = 0;
	int rc;

	if (san && *san)
		cr_skip_test("QEMU cases skip under sanitizers");
	t = gfa_numa_topology_discover();
	/* a stat file of its own (pid), removed whatever the exit */
	snprintf(cmd, sizeof(cmd),
		 "sh -c '%s/gfactl vmstart %s --kvm off --host-thp keep "
		 "--no-baseline --quiet --stat-file /tmp/gfactl-numa-%d.json; rc=$?; "
		 "rm -f /tmp/gfactl-numa-%d.json; exit $rc'",
		 getenv("GFA_BUILD") ? getenv("GFA_BUILD") : "build", args, (int)getpid(),
		 (int)getpid());
	if (t && t->nr_nodes >= 2) { /* a NUMA host: run it here */
		gfa_numa_topology_free(t);
		rc = system(cmd);
		return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
	}
	gfa_numa_topology_free(t);
	rc = tu_run_in_qemu("--numa 2 --cpus 2 --mem 1024 --timeout 600", cmd, &secs);
	if (rc == 77)
		tu_qemu_skip("gfactl_numa", "the QEMU harness cannot run here (exit 77, see its "
					    "message above)");
	return rc;
}

/* 3 VMs of 16 MiB: zone 0 gets VMs 0 and 2 (32 MiB); it had half of a 62 MiB pool. */
Test(gfactl_numa, odd_vm_count_fits_the_default_pool, .timeout = 900)
{
	int rc = vmstart_on_two_nodes("--vms 3 --mem 16M --rounds 1");

	cr_assert_eq(rc, 0, "gfactl vmstart --vms 3 --mem 16M on 2 nodes: exit %d", rc);
}

/* gfactl/default_pool_survives_many_rounds, on two nodes (zone 0 holds the churn too) */
Test(gfactl_numa, default_pool_survives_many_rounds, .timeout = 900)
{
	int rc = vmstart_on_two_nodes("--vms 2 --mem 8M --rounds 40");

	cr_assert_eq(rc, 0, "gfactl vmstart --vms 2 --mem 8M --rounds 40 on 2 nodes: exit %d", rc);
}

/*
 * The memory check of vmstart assumed the kernel baselines run "while the pool is gone
 * again", but they run while the pool and every VM are still there: pool + VMs x RAM
 * must fit.  In a 1 GiB guest (~850 MiB available) 4 x 128 MiB passed the check (a
 * 642 MiB pool <= 80%) and then the baselines got gfactl OOM-killed (exit 137).
 */
Test(gfactl_numa, memory_check_counts_the_baselines, .timeout = 900)
{
	const char *san = getenv("GFA_SANITIZER");
	double secs = 0;
	char cmd[512];
	int rc;

	if (san && *san)
		cr_skip_test("QEMU cases skip under sanitizers");
	if (getenv("GFA_IN_QEMU"))
		cr_skip_test("already inside the QEMU harness");
	/* exit 3 stands for "refused up front for memory" (2 alone is also bad usage) */
	snprintf(cmd, sizeof(cmd),
		 "sh -c '%s/gfactl vmstart --vms 4 --mem 128M --rounds 1 "
		 "--kvm off --host-thp keep --quiet --stat-file /tmp/gfactl-numa-test.json "
		 "2>/tmp/gfactl-numa-test.err; rc=$?; rm -f /tmp/gfactl-numa-test.json; "
		 "[ $rc = 2 ] && grep -q \"of the .* MiB available\" /tmp/gfactl-numa-test.err "
		 "&& exit 3; exit $rc'",
		 getenv("GFA_BUILD") ? getenv("GFA_BUILD") : "build");
	rc = tu_run_in_qemu("--mem 1024 --timeout 600", cmd, &secs);
	if (rc == 77)
		tu_qemu_skip("gfactl_numa", "the QEMU harness cannot run here (exit 77, see its "
					    "message above)");
	/* 0: it fits after all; 3: refused up front as too large.  Never killed. */
	cr_assert(rc == 0 || rc == 3, "gfactl vmstart in a 1 GiB guest: exit %d", rc);
}

/* The stat file is created as fopen() would: the umask decides (mkstemp's 0600 and a
 * fixed 0644 after it made it world-readable under umask 077). */
Test(gfactl, stat_file_honours_the_umask, .timeout = 120)
{
	/* 077 alone would pass with mkstemp's 0600 whatever gfactl did: 022 too */
	static const unsigned int umasks[] = { 077, 022 }, modes[] = { 0600, 0644 };
	const char *g = gfactl();
	char stat_file[] = "/tmp/gfactl-umask-XXXXXX";
	struct stat st;
	int fd = mkstemp(stat_file), rc;

	cr_assert_geq(fd, 0);
	close(fd);
	unlink(stat_file);
	for (int i = 0; i < 2; i++) {
		rc = run(out, sizeof(out),
			 "umask %03o; %s vmstart --vms 1 --mem 4M --rounds 1 "
			 "--kvm off --host-thp keep --no-baseline --quiet --stat-file %s",
			 umasks[i], g, stat_file);
		cr_assert_eq(rc, 0, "%s", out);
		cr_assert_eq(stat(stat_file, &st), 0);
		unlink(stat_file);
		cr_assert_eq(st.st_mode & 0777, modes[i], "stat file mode %o under umask %03o",
			     (unsigned)(st.st_mode & 0777), umasks[i]);
	}
}

/* ---- operator mistakes: --pool too small for churn, --plot names, signals ---- */

/* A --pool that passes the "--pool must hold --vms x --mem" check must also run: churn
 * keeps 32 unmovable frames a round (the default pool adds room for them, --pool not). */
Test(gfactl, pool_flag_leaves_room_for_churn, .timeout = 120)
{
	const char *g = gfactl();
	int rc = run(out, sizeof(out),
		     "%s vmstart --vms 2 --mem 8M --pool 16M --rounds 1 "
		     "--kvm off --host-thp keep --no-baseline --quiet "
		     "--stat-file /tmp/gfactl-test-pool.json",
		     g);

	unlink("/tmp/gfactl-test-pool.json");
	cr_assert(rc == 0 || (rc == 2 && strstr(out, "--pool")),
		  "accepted --pool failed mid-run, exit %d: %s", rc, out);
}

/* --plot's data file is a fixed name next to the plot, opened with fopen("w"): a link
 * planted there is followed (the stat file is guarded against exactly this). */
Test(gfactl, plot_data_file_does_not_follow_a_planted_link, .timeout = 120)
{
	const char *g = gfactl();
	char plot[] = "/tmp/gfactl-plot-XXXXXX", victim[] = "/tmp/gfactl-pvictim-XXXXXX";
	char dat[PATH_MAX], buf[16] = "";
	int fd, rc;
	FILE *f;

	if (system("command -v gnuplot >/dev/null 2>&1"))
		cr_skip_test("gnuplot is not installed");
	fd = mkstemp(plot);
	close(fd);
	fd = mkstemp(victim);
	cr_assert_eq(write(fd, "keep", 4), 4);
	close(fd);
	snprintf(dat, sizeof(dat), "%s.dat", plot);
	cr_assert_eq(symlink(victim, dat), 0);
	rc = run(out, sizeof(out),
		 "%s vmstart --vms 1 --mem 4M --rounds 0 --kvm off "
		 "--host-thp keep --no-baseline --quiet --stat-file %s.json --plot %s",
		 g, plot, plot);
	f = fopen(victim, "r");
	cr_assert_not_null(f);
	cr_assert(fgets(buf, sizeof(buf), f) || 1);
	fclose(f);
	unlink(dat);
	unlink(victim);
	unlink(plot);
	snprintf(dat, sizeof(dat), "%s.json", plot);
	unlink(dat);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert_str_eq(buf, "keep",
			 "--plot wrote through the link planted at <plot>.dat: "
			 "the victim now starts with '%s'",
			 buf);
}

/* A --plot name that cannot be used is bad usage, found before the run (not exit 1 after
 * it), and an empty name never sends the PNG to stdout. */
Test(gfactl, unusable_plot_name_is_refused_up_front, .timeout = 120)
{
	const char *g = gfactl();
	int rc = run(out, sizeof(out),
		     "%s vmstart --vms 1 --mem 4M --rounds 0 --kvm off "
		     "--host-thp keep --no-baseline --quiet --stat-file /tmp/gfactl-test-pl.json "
		     "--plot ''",
		     g);

	unlink("/tmp/gfactl-test-pl.json");
	for (size_t k = 0; k + 4 < sizeof(out); k++) /* (binary: strstr stops at a NUL) */
		cr_assert(memcmp(out + k, "\x89PNG", 4), "--plot '': PNG data on stdout");
	cr_assert_eq(rc, 2, "--plot '': exit %d after the whole run", rc);
	cr_assert_null(strstr(out, "RESULT"), "--plot '' checked only after the run");
}

/*
 * Start `gfactl vmstart` (a long churn) in the background as root on a fake THP sysfs
 * (a private mount namespace, so the host's setting is never touched), with `setup` run
 * before it, wait for its stat file, then run `then` ($p: its pid, $T: the fake sysfs).
 * Returns what `then` printed from "after: " on; skips where this cannot run.
 */
static const char *vmstart_on_fake_sysfs(const char *setup, const char *then)
{
	char *last;
	int rc;

	if (getuid())
		cr_skip_test("needs root (vmstart changes shmem_enabled only as root)");
	rc = run(out, sizeof(out),
		 "unshare -m --propagation private sh -c '"
		 "T=/sys/kernel/mm/transparent_hugepage; mount -t tmpfs none $T || exit 77; "
		 "echo \"always [madvise] never\" > $T/enabled; "
		 "echo \"always within_size advise [never] deny force\" > $T/shmem_enabled; %s "
		 "O=$(mktemp); %s vmstart --vms 2 --mem 8M --rounds 1000 --kvm off --no-baseline "
		 "--quiet --stat-file $O.json >$O 2>&1 & p=$!; i=0; "
		 "while [ ! -e $O.json ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; "
		 "%s; rm -f $O $O.json'",
		 setup, gfactl(), then);
	if (rc == 77)
		cr_skip_test("cannot mount a fake sysfs here");
	last = strstr(out, "after: ");
	cr_assert_not_null(last, "%s", out);
	return last;
}

/* vmstart sets shmem_enabled to advise "for this run (restored at exit)": a SIGTERM or
 * Ctrl-C must restore it too. */
Test(gfactl, host_thp_restored_when_killed, .timeout = 120)
{
	const char *after = vmstart_on_fake_sysfs("", "kill -TERM $p; wait $p; echo; "
						      "echo \"after: $(cat $T/shmem_enabled)\"");

	cr_assert_not_null(strstr(after, "never"),
			   "killed vmstart left the host's "
			   "shmem_enabled changed: %s",
			   after);
}

/*
 * A signal the caller ignores stays ignored: `nohup gfactl vmstart ...` (SIGHUP ignored)
 * must survive the terminal hanging up, and a background job of a script (SIGINT and
 * SIGQUIT ignored) a Ctrl-C: the shmem_enabled handlers are installed only where the
 * caller did not ignore the signal.
 */
Test(gfactl, host_thp_handler_keeps_ignored_signals_ignored, .timeout = 120)
{
	const char *after = vmstart_on_fake_sysfs(
		"trap \"\" HUP;",
		"kill -HUP $p; sleep 1; if kill -0 $p 2>/dev/null; then echo \"after: alive\"; "
		"kill -TERM $p; else echo \"after: dead\"; fi; wait $p");

	cr_assert_not_null(strstr(after, "alive"),
			   "vmstart started with SIGHUP ignored (nohup) "
			   "was killed by a SIGHUP: %s",
			   after);
}

/* ---- gfactl linux: each refusal names the rule it broke (no KVM needed) ---- */

/* tools/linux-initramfs.sh needs the built checker (make all builds it). */
static bool build_has_checker(void)
{
	const char *b = getenv("GFA_BUILD");
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/tests/linux/gfacheck", b && *b ? b : "build");
	return access(path, X_OK) == 0;
}

Test(gfactl, linux_refusals_name_the_rule, .timeout = 60)
{
	static const struct {
		const char *args, *says;
	} cases[] = {
		{ "--balloon 0", "--balloon 0 inflates nothing" },
		{ "--balloon 200",
		  "--balloon 200 is more than half of --mem 256 MiB (at most 128)" },
		{ "--mem 512M --check 300", "--check 300 is more than half of --mem 512 MiB" },
		{ "--mem 65M", "--mem 65 MiB is not a multiple of 2 MiB" },
		{ "--mem 4G", "--mem 4096 MiB: a guest has 64 MiB to 3 GiB" },
		{ "--mem 32M", "--mem 32 MiB: a guest has 64 MiB to 3 GiB" },
		{ "--guests 9", "--guests: 9 is too large: it takes 1 to 8" },
		{ "--vcpus x", "--vcpus: 'x' is not a number" },
		{ "--modules /nonexistent", "--modules is for the initramfs of a --kernel given" },
	};
	const char *g = gfactl();

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int rc = run(out, sizeof(out), "%s linux %s", g, cases[i].args);

		cr_assert_eq(rc, 2, "gfactl linux %s: exit %d: %s", cases[i].args, rc, out);
		cr_assert(strstr(out, cases[i].says), "gfactl linux %s said: %s", cases[i].args,
			  out);
		cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);
	}
	run(out, sizeof(out), "%s linux --help", g);
	cr_assert(strstr(out, "at most\n                   half of --mem"), "%s", out);
	cr_assert(strstr(out, "(1 to half of --mem)"), "%s", out);
}

/*
 * --kernel K without --initrd: an initramfs of K's own modules, or a refusal that says
 * why (it used to boot the default kernel instead, and report ok).
 */
Test(gfactl, linux_kernel_alone_is_refused_without_its_modules, .timeout = 120)
{
	char empty[] = "/tmp/gfactl-modules-XXXXXX", kernel[PATH_MAX] = "";
	const char *g = gfactl();
	FILE *p;
	int rc;

	rc = run(out, sizeof(out), "%s linux --kernel /etc/hostname", g);
	cr_assert_eq(rc, 1, "%s", out);
	cr_assert(strstr(out, "/etc/hostname: neither a bzImage nor a vmlinux"), "%s", out);
	cr_assert(strstr(out, "--kernel /etc/hostname without --initrd"), "%s", out);
	p = popen("ls /boot/vmlinuz-* 2>/dev/null | sort -rV | head -1", "r");
	if (p && fgets(kernel, sizeof(kernel), p))
		kernel[strcspn(kernel, "\n")] = '\0';
	if (p)
		pclose(p);
	if (!kernel[0] || access(kernel, R_OK) || !build_has_checker())
		cr_skip_test("no readable /boot/vmlinuz-* or no checker built");
	cr_assert_not_null(mkdtemp(empty));
	rc = run(out, sizeof(out), "%s linux --kernel %s --modules %s", g, kernel, empty);
	rmdir(empty);
	cr_assert_eq(rc, 1, "%s", out);
	cr_assert(strstr(out, "no modules for"), "%s", out);
	cr_assert(strstr(out, "modules.dep"), "%s", out);
	cr_assert(strstr(out, "without --initrd"), "%s", out);
}
