/*
 * kvmtool (lkvm) runs for tests/test_kvmtool.c and bench/kvmtool.c (header-only): start a
 * patched or unpatched lkvm with its console in a log file, wait for lines there, drive
 * it over its IPC commands, read its host memory and the "gfa:" line the patched one
 * prints at exit (contrib/kvmtool/gfa.patch).  Here, below both its users.
 */
#ifndef GFA_REFVMM_KVMTOOL_UTIL_H
#define GFA_REFVMM_KVMTOOL_UTIL_H
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "common/ktime.h"

#define KT_HOME "/tmp/gfa-kvmtool" /* lkvm's $HOME: its IPC sockets go there */

struct kt_vm {
	pid_t pid;
	int status; /* exit status once reaped, else -1 */
	char name[32];
	char log[PATH_MAX];
	char lkvm[PATH_MAX + 64];
	double t0; /* launch, monotonic seconds */
};

static inline double kt_now(void)
{
	return (double)ktime_get_ns() / 1e9;
}

/*
 * Start @lkvm: `lkvm run` with the kernel, initramfs, @mib MiB, one vCPU, a balloon, no
 * network, @args (more options, may be "") and the command line "console=ttyS0 quiet
 * @append", with the environment words @env ("" or "A=1 B=2") in front.  0 or -errno.
 */
static inline int kt_start(struct kt_vm *vm, const char *lkvm, const char *env, const char *kernel,
			   const char *initrd, unsigned int mib, const char *args,
			   const char *append)
{
	static unsigned int seq;
	char cmd[4 * PATH_MAX + 1024];

	memset(vm, 0, sizeof(*vm));
	vm->status = -1;
	snprintf(vm->name, sizeof(vm->name), "kt-%d-%u", (int)getpid(), seq++);
	snprintf(vm->lkvm, sizeof(vm->lkvm), "%.*s", PATH_MAX, lkvm);
	snprintf(vm->log, sizeof(vm->log), KT_HOME "/%s.log", vm->name);
	mkdir(KT_HOME, 0755);
	snprintf(cmd, sizeof(cmd),
		 "HOME=" KT_HOME " %s exec '%s' run --name %s -k '%s' -i '%s' "
		 "-m %u -c 1 --balloon --network mode=none %s -p 'console=ttyS0 quiet %s' "
		 "</dev/null >'%s' 2>&1",
		 env, lkvm, vm->name, kernel, initrd, mib, args, append, vm->log);
	vm->t0 = kt_now();
	vm->pid = fork();
	if (vm->pid < 0)
		return -errno;
	if (vm->pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	return 0;
}

/* The log so far, NUL-terminated, in a static buffer. */
static inline const char *kt_log(const struct kt_vm *vm)
{
	static char buf[1 << 18];
	FILE *f = fopen(vm->log, "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	for (size_t i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	buf[n] = '\0';
	return buf;
}

/* Reap the VM if it exited; true if it did (vm->status holds its exit code). */
static inline bool kt_exited(struct kt_vm *vm)
{
	int st;

	if (vm->status >= 0)
		return true;
	if (waitpid(vm->pid, &st, WNOHANG) != vm->pid)
		return false;
	vm->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return true;
}

/*
 * Wait until @needle is in the log at or after *@off (updated to just past it), at most
 * @timeout_s seconds.  Seconds since launch, or -1 (timeout, or the VM exited without it).
 */
static inline double kt_wait(struct kt_vm *vm, const char *needle, size_t *off, double timeout_s)
{
	double t_end = kt_now() + timeout_s;

	for (;;) {
		bool gone = kt_exited(vm);
		const char *log = kt_log(vm);
		const char *p = strlen(log) >= *off ? strstr(log + *off, needle) : NULL;

		if (p) {
			*off = (size_t)(p - log) + strlen(needle);
			return kt_now() - vm->t0;
		}
		if (gone || kt_now() > t_end)
			return -1;
		usleep(20000);
	}
}

/* `lkvm @cmd --name NAME @args` (balloon, stop, ...): its exit code. */
static inline int kt_ipc(const struct kt_vm *vm, const char *cmd, const char *args)
{
	char line[PATH_MAX + 256];

	snprintf(line, sizeof(line), "HOME=" KT_HOME " '%s' %s --name %s %s >/dev/null 2>&1",
		 vm->lkvm, cmd, vm->name, args);
	return system(line);
}

/*
 * Where each thread of a VM that will not exit waits, to stderr: its name, its kernel
 * stack and its user-space backtrace (gdb, when installed), so a hang names its place.
 */
static inline void kt_dump_threads(const struct kt_vm *vm)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "for t in /proc/%d/task/*; do echo \"== $t $(cat $t/comm) "
		 "$(cat $t/wchan)\"; cat $t/stack; done >&2; command -v gdb >/dev/null && "
		 "timeout 60 gdb -p %d -batch -nx -ex 'thread apply all bt' >&2 2>&1 </dev/null",
		 (int)vm->pid, (int)vm->pid);
	if (system(cmd) < 0)
		perror("kt_dump_threads");
}

/* Wait up to @timeout_s for the VM to exit, else kill it: its exit code (-1: killed). */
static inline int kt_finish(struct kt_vm *vm, double timeout_s)
{
	double t_end = kt_now() + timeout_s;

	while (!kt_exited(vm)) {
		if (kt_now() > t_end) {
			kt_dump_threads(vm);
			kill(vm->pid, SIGKILL);
			waitpid(vm->pid, NULL, 0);
			vm->status = -1;
			return -1;
		}
		usleep(20000);
	}
	return vm->status;
}

/* `lkvm stop`, then kt_finish. */
static inline int kt_stop(struct kt_vm *vm, double timeout_s)
{
	if (!kt_exited(vm))
		kt_ipc(vm, "stop", "");
	return kt_finish(vm, timeout_s);
}

/* A counter of the "gfa:" line the patched lkvm printed at exit, or -1 if absent. */
static inline long long kt_gfa_stat(const struct kt_vm *vm, const char *name)
{
	/* (the guest's console may end mid-line when lkvm stop cuts it) */
	const char *log = kt_log(vm), *line = strstr(log, "gfa: ballooned_frames ");
	char key[64];
	const char *p;

	if (!line)
		return -1;
	snprintf(key, sizeof(key), " %s ", name);
	p = strstr(line, key);
	return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* The process's proportional set size in bytes (its RAM on the host), or -1. */
static inline long long kt_pss(pid_t pid)
{
	char path[64], line[256];
	long long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Pss: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}
#endif
