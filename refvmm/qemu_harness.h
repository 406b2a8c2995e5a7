/*
 * Running a command in a QEMU guest through tools/kvm-in-qemu.sh (header-only, static):
 * finding the tree and the build directory, sharing what the guest would hide.  For the
 * suites that re-run themselves inside QEMU (tests/qemu_util.h) and the benchmarks that
 * boot there (bench/linux.c, bench/kvmtool.c).
 */
#ifndef GFA_REFVMM_QEMU_HARNESS_H
#define GFA_REFVMM_QEMU_HARNESS_H
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/compiler.h"
#include "common/ktime.h"

extern char **environ;

/* Walk up from the cwd and the test binary to the tree that has tools/kvm-in-qemu.sh. */
static inline bool tu_find_harness_root(char *root, size_t len)
{
	char exe[PATH_MAX], *slash;
	ssize_t n;

	if (access("tools/kvm-in-qemu.sh", R_OK) == 0 && getcwd(root, len))
		return true;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = '\0';
	for (int up = 0; up < 5 && (slash = strrchr(exe, '/')); up++) {
		char probe[PATH_MAX + 32];

		*slash = '\0';
		snprintf(probe, sizeof(probe), "%s/tools/kvm-in-qemu.sh", exe);
		if (access(probe, R_OK) == 0) {
			snprintf(root, len, "%s", exe);
			return true;
		}
	}
	return false;
}
/* The build directory: $GFA_BUILD (default "build"), relative to the tree root. */
static inline bool tu_build_dir(char *out, size_t len)
{
	const char *b = getenv("GFA_BUILD");
	char root[PATH_MAX];

	if (!b || !*b)
		b = "build";
	if (b[0] == '/')
		return snprintf(out, len, "%s", b) < (int)len;
	if (!tu_find_harness_root(root, sizeof(root)))
		return false;
	return snprintf(out, len, "%s/%s", root, b) < (int)len;
}

/*
 * The folders the harness's guest replaces with its own (tmpfs on /tmp, /run and
 * /dev/shm, devtmpfs on /dev): a path under one is seen in the guest only if shared
 * on its own (tools/kvm-in-qemu.sh does that for --dir and --rw).
 */
static inline bool tu_replaced_in_guest(const char *path)
{
	static const char *const top[] = { "/tmp/", "/run/", "/dev/", "/var/run/" };

	for (size_t i = 0; i < ARRAY_SIZE(top); i++)
		if (!strncmp(path, top[i], strlen(top[i])))
			return true;
	return false;
}

/* @path is @dir or below it. */
static inline bool tu_path_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

/* Where QEMU comes from: $QEMU, as tools/kvm-in-qemu.sh reads it. */
static inline bool tu_have_qemu(void)
{
	const char *q = getenv("QEMU");
	char cmd[PATH_MAX + 64];

	if (!q || !*q)
		q = "qemu-system-x86_64";
	if (strchr(q, '\''))
		return false;
	snprintf(cmd, sizeof(cmd), "command -v '%s' >/dev/null 2>&1", q);
	return system(cmd) == 0;
}

/*
 * Run the shell command cmd in a QEMU guest through tools/kvm-in-qemu.sh with opts
 * (extra harness options, space separated, no quoting), sharing the tree root and the
 * build directory.  The test binary and the build directory are shared on their own
 * when the guest would hide them (under /tmp, say) and the tree root does not hold
 * them.  Returns the exit code (77: the harness cannot run here) and the wall time in
 * *secs.
 */
static inline int tu_run_in_qemu(const char *opts, const char *cmd, double *secs)
{
	char root[PATH_MAX], harness[PATH_MAX + 32], build[PATH_MAX], optbuf[256];
	char exe[PATH_MAX], real_build[PATH_MAX], real_root[PATH_MAX], *slash;
	char *argv[32], *save;
	ssize_t n;
	uint64_t t0;
	int argc = 0, status;
	pid_t pid;

	if (!tu_find_harness_root(root, sizeof(root)) || !tu_build_dir(build, sizeof(build))) {
		fprintf(stderr, "tools/kvm-in-qemu.sh not found\n");
		return 77;
	}
	snprintf(harness, sizeof(harness), "%s/tools/kvm-in-qemu.sh", root);
	argv[argc++] = "bash";
	argv[argc++] = harness;
	argv[argc++] = "--build";
	argv[argc++] = build;
	argv[argc++] = "--dir";
	argv[argc++] = root;
	if (!realpath(root, real_root))
		snprintf(real_root, sizeof(real_root), "%s", root);
	if (!realpath(build, real_build))
		snprintf(real_build, sizeof(real_build), "%s", build);
	if (tu_replaced_in_guest(real_build) && !tu_path_under(real_build, real_root)) {
		argv[argc++] = "--rw";
		argv[argc++] = real_build;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash && slash != exe)
			*slash = '\0';
		if (tu_replaced_in_guest(exe) && !tu_path_under(exe, real_root) &&
		    !tu_path_under(exe, real_build)) {
			argv[argc++] = "--rw";
			argv[argc++] = exe;
		}
	}
	snprintf(optbuf, sizeof(optbuf), "%s", opts);
	for (char *tok = strtok_r(optbuf, " ", &save); tok && argc < 24;
	     tok = strtok_r(NULL, " ", &save))
		argv[argc++] = tok;
	argv[argc++] = "--";
	argv[argc++] = "sh";
	argv[argc++] = "-c";
	argv[argc++] = (char *)cmd;
	argv[argc] = NULL;
	fflush(NULL);
	t0 = ktime_get_ns();
	if (posix_spawn(&pid, "/bin/bash", NULL, NULL, argv, environ) != 0)
		return 77;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	*secs = (double)(ktime_get_ns() - t0) / 1e9;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
#endif
