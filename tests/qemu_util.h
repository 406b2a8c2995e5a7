/* Shared by the suites that re-run themselves inside a QEMU guest (header-only). */
#ifndef GFA_TEST_QEMU_UTIL_H
#define GFA_TEST_QEMU_UTIL_H
#include <limits.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
 * Run the shell command cmd in a QEMU guest through tools/kvm-in-qemu.sh with opts
 * (extra harness options, space separated, no quoting), sharing the tree root and the
 * build directory.  Returns the exit code (77: the harness cannot run here) and the
 * wall time in *secs.
 */
static inline int tu_run_in_qemu(const char *opts, const char *cmd, double *secs)
{
	char root[PATH_MAX], harness[PATH_MAX + 32], build[PATH_MAX], optbuf[256];
	char *argv[32], *save;
	struct timespec t0, t1;
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
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (posix_spawn(&pid, "/bin/bash", NULL, NULL, argv, environ) != 0)
		return 77;
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
#endif
