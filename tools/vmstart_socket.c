// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart --socket PATH: each VM in a process of its own on the host pool
 * service (gfad) at PATH, as a VMM that runs one process per VM would run them.
 *
 * The parent builds no pool.  It attaches to the service once to read its counters,
 * then, one VM after another, forks and execs itself (the internal --runner mode) with
 * one end of a socketpair.  The runner attaches (gfa_hostpool_attach), makes its KVM
 * shell before the timer, starts its VM on gfa_hostpool_pool()/gfa_hostpool_backing()
 * and times it as vmstart_start_vm() does, boots and checks it under KVM, writes its
 * figures to the socketpair and holds its VM until the parent closes its end.  When
 * every VM runs the parent reads the service's counters, lets the runners go (each
 * destroys its VM and detaches) and checks that the service has every frame back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gfa/vmm.h>
#include "tools/vmstart.h"

/* What a runner sends back: one packet, all of it or nothing. */
struct runner_report {
	int32_t pid;
	int32_t kvm;
	double attach_ms, shell_ms, start_ms, create_ms, boot_ms;
	uint64_t huge_ranges, small_ranges, zeroed_frames, mine_frames;
	int64_t pmd_bytes;
	char why_not_kvm[128];
};

/* ---- the runner: one VM in this process ---- */

static int runner_fail(struct run *r, const char *what, int err)
{
	fprintf(stderr, "gfactl vmstart: VM %u (pid %d): %s: %s\n", r->o.runner_vm, (int)getpid(),
		what, gfa_strerror(err));
	return 1;
}

/* Start, boot and check the VM; its figures in *rep. */
static int runner_start(struct run *r, struct runner_report *rep)
{
	struct gfa_vm_config vc = { .mem_bytes = r->o.mem,
				    .vcpus = (unsigned int)r->o.vcpus,
				    .kvm = r->o.kvm,
				    .pcp = r->pcp,
				    .lazy = r->o.lazy };
	unsigned int i = r->o.runner_vm;
	struct gfa_guest_stat st;
	const char *why = NULL;
	uint64_t bad = 0;
	double t0 = now_ms();
	int err;

	/* as vmstart_start_vm(): create, then the vCPU threads' first touch of its RAM */
	r->vm[0] = gfa_vm_create(r->pool, r->b, &vc);
	rep->create_ms = now_ms() - t0;
	if (!r->vm[0])
		return runner_fail(r, "create", -errno);
	baseline_touch((char *)gfa_guest_hva(gfa_vm_guest(r->vm[0])) + GFA_VM_RAM_START,
		       r->o.mem - GFA_VM_RAM_START, (unsigned int)r->o.vcpus);
	rep->start_ms = now_ms() - t0;
	gfa_guest_stat(gfa_vm_guest(r->vm[0]), &st);
	rep->huge_ranges = st.huge_ranges;
	rep->small_ranges = st.small_ranges;
	rep->zeroed_frames = st.zeroed_frames;
	rep->pmd_bytes = gfa_smaps_pmd_bytes(gfa_guest_hva(gfa_vm_guest(r->vm[0])), r->o.mem);
	rep->kvm = gfa_vm_is_kvm(r->vm[0], &why);
	snprintf(rep->why_not_kvm, sizeof(rep->why_not_kvm), "%s", why ? why : "");
	if (!rep->kvm)
		return 0;
	/* as kvm_boot_check(): the test guest on every vCPU, its memory checked */
	t0 = now_ms();
	err = gfa_vm_run_part(r->vm[0], GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY, 0x9e37 + i,
			      gfa_kvm_is_software() ? 16 << 10 : 0, &bad);
	rep->boot_ms = now_ms() - t0;
	if (err || bad) {
		fprintf(stderr, "gfactl vmstart: VM %u: guest check failed (%s, %lu bad words)\n",
			i, strerror(-err), (unsigned long)bad);
		return 1;
	}
	return 0;
}

int vmstart_socket_runner(struct run *r)
{
	struct runner_report rep = { .pid = getpid() };
	struct gfa_hostpool_stat st;
	struct gfa_hostpool *hp;
	int fd = r->o.runner_fd, rc;
	char why[160], c;
	double t0 = now_ms();

	hp = gfa_hostpool_attach(r->o.socket, NULL);
	rep.attach_ms = now_ms() - t0;
	if (!hp)
		return runner_fail(r, "attach", -errno);
	r->pool = gfa_hostpool_pool(hp);
	r->b = gfa_hostpool_backing(hp);
	r->pcp = gfa_pcp_create(r->pool, 0);
	/* the KVM shell before the timer, as the in-process run makes its shells */
	t0 = now_ms();
	if (r->o.kvm != GFA_VM_KVM_OFF && gfa_kvm_available(why, sizeof(why)))
		(void)gfa_vm_shells_fill(r->o.mem, (unsigned int)r->o.vcpus, 1);
	rep.shell_ms = now_ms() - t0;
	rc = runner_start(r, &rep);
	if (!rc && gfa_hostpool_stat(hp, &st, NULL, 0) >= 0)
		rep.mine_frames = st.mine_frames;
	if (!rc && send(fd, &rep, sizeof(rep), MSG_NOSIGNAL) != (ssize_t)sizeof(rep))
		rc = runner_fail(r, "report", -errno);
	/* the VM runs until the parent lets it go (or is gone) */
	while (!rc && read(fd, &c, 1) < 0 && errno == EINTR)
		;
	gfa_vm_destroy(r->vm[0]);
	r->vm[0] = NULL;
	gfa_pcp_destroy(r->pcp);
	gfa_vm_shells_drain();
	gfa_hostpool_detach(hp);
	close(fd);
	return rc;
}

/* ---- the parent ---- */

struct runner {
	pid_t pid;
	int fd;
	struct runner_report rep;
};

/* Fork and exec this binary as VM i's runner, one end of a socketpair its report fd. */
static int runner_spawn(struct run *r, unsigned int i, struct runner *ch)
{
	char mem[32], vcpus[16], runner[32];
	const char *kvm = r->o.kvm == GFA_VM_KVM_ON  ? "on" :
			  r->o.kvm == GFA_VM_KVM_OFF ? "off" :
						       "auto";
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		fprintf(stderr, "gfactl vmstart: socketpair: %s\n", strerror(errno));
		return -1;
	}
	snprintf(mem, sizeof(mem), "%luM", (unsigned long)(r->o.mem / MiB));
	snprintf(vcpus, sizeof(vcpus), "%lu", (unsigned long)r->o.vcpus);
	snprintf(runner, sizeof(runner), "%d,%u", sv[1], i);
	fflush(NULL);
	ch->pid = fork();
	if (ch->pid < 0) {
		fprintf(stderr, "gfactl vmstart: fork: %s\n", strerror(errno));
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (!ch->pid) {
		char *argv[] = { "gfactl",
				 "vmstart",
				 "--socket",
				 (char *)r->o.socket,
				 "--mem",
				 mem,
				 "--vcpus",
				 vcpus,
				 "--kvm",
				 (char *)kvm,
				 "--host-thp",
				 "keep",
				 "--runner",
				 runner,
				 r->o.lazy ? "--lazy" : NULL,
				 NULL };

		/* the runner's end stays open across exec, the parent's does not */
		if (fcntl(sv[1], F_SETFD, 0))
			_exit(127);
		execv("/proc/self/exe", argv);
		fprintf(stderr, "gfactl vmstart: exec /proc/self/exe: %s\n", strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	ch->fd = sv[0];
	return 0;
}

/* Reap a runner: 0 when it exited 0, else -1 after saying how it ended. */
static int runner_reap(unsigned int i, struct runner *ch)
{
	int st;

	if (ch->pid <= 0)
		return 0;
	while (waitpid(ch->pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	ch->pid = 0;
	if (WIFEXITED(st) && !WEXITSTATUS(st))
		return 0;
	if (WIFEXITED(st))
		fprintf(stderr, "gfactl vmstart: VM %u's process exited with %d\n", i,
			WEXITSTATUS(st));
	else
		fprintf(stderr, "gfactl vmstart: VM %u's process was killed by signal %d\n", i,
			WTERMSIG(st));
	return -1;
}

/* The service's counters, or -1 after saying why. */
static int service_stat(struct gfa_hostpool *hp, const char *when, struct gfa_hostpool_stat *st)
{
	int n = gfa_hostpool_stat(hp, st, NULL, 0);

	if (n < 0) {
		fprintf(stderr, "gfactl vmstart: --socket: the service's counters %s: %s\n", when,
			gfa_strerror(n));
		return -1;
	}
	return 0;
}

/* The leases back (the service frees a connection's as it sees it end): up to 5 s. */
static int service_settle(struct gfa_hostpool *hp, uint64_t before, struct gfa_hostpool_stat *st)
{
	for (int i = 0; i < 500; i++) {
		if (service_stat(hp, "after", st))
			return -1;
		if (st->leased_frames <= before)
			return 0;
		usleep(10000);
	}
	return 0;
}

static void print_vm(struct run *r, unsigned int i, const struct runner_report *p)
{
	if (r->csv)
		fprintf(r->csv, "start,gfa-socket,start,0,%u,%.3f,%.1f\n", i, p->start_ms,
			100.0 * (double)p->huge_ranges /
				(double)(p->huge_ranges + p->small_ranges));
	if (r->o.quiet)
		return;
	printf("  VM %2u pid %-7d start %7.2f ms (create %.2f)  2 MiB ranges %lu/%lu  zeroed "
	       "%lu MiB  host PMDs %ld MiB  attach %.1f ms\n",
	       i, (int)p->pid, p->start_ms, p->create_ms, (unsigned long)p->huge_ranges,
	       (unsigned long)(p->huge_ranges + p->small_ranges),
	       (unsigned long)(p->zeroed_frames >> (20 - GFA_FRAME_SHIFT)),
	       (long)(p->pmd_bytes / (int64_t)MiB), p->attach_ms);
}

static double p50_of(struct samples *s, double p)
{
	static double tmp[MAX_SAMPLES];

	memcpy(tmp, s->v, s->n * sizeof(double));
	qsort(tmp, s->n, sizeof(double), cmp_double);
	return percentile(tmp, s->n, p);
}

static void summary(struct run *r, struct runner *ch, const struct gfa_hostpool_stat *before,
		    const struct gfa_hostpool_stat *during, const struct gfa_hostpool_stat *after)
{
	struct samples *attach = &r->attach;
	uint64_t huge = 0, total = 0;
	int64_t pmd = 0;
	double boot = 0, share;

	for (unsigned int i = 0; i < r->o.vms; i++) {
		huge += ch[i].rep.huge_ranges;
		total += ch[i].rep.huge_ranges + ch[i].rep.small_ranges;
		pmd += ch[i].rep.pmd_bytes;
		boot = ch[i].rep.boot_ms > boot ? ch[i].rep.boot_ms : boot;
		vmstart_sample(attach, ch[i].rep.attach_ms);
	}
	share = total ? 100.0 * (double)huge / (double)total : 0;
	if (r->kvm)
		printf("KVM guests booted and verified their memory (slowest %.1f ms)\n", boot);
	printf("\n== summary: %lu VMs x %lu vCPUs x %lu MiB, each in its own process on %s, %s "
	       "==\n",
	       (unsigned long)r->o.vms, (unsigned long)r->o.vcpus, (unsigned long)(r->o.mem / MiB),
	       r->o.socket, r->kvm ? "KVM vCPUs" : "host-thread vCPUs");
	printf("gfa start, host pool:     p50 %8.2f ms  p99 %8.2f ms  (%zu starts)\n",
	       p50_of(&r->clean, 50), p50_of(&r->clean, 99), r->clean.n);
	printf("attach (before the timer): p50 %7.2f ms  p99 %8.2f ms\n", p50_of(attach, 50),
	       p50_of(attach, 99));
	printf("guest RAM on 2 MiB blocks: %.1f%% (%lu of %lu ranges)\n", share,
	       (unsigned long)huge, (unsigned long)total);
	printf("host PMD mappings of guest windows: %ld MiB of %lu MiB\n",
	       (long)(pmd / (int64_t)MiB), (unsigned long)(r->o.vms * r->o.mem / MiB));
	printf("service: %lu MiB pool; frames leased before %lu, while the VMs ran %lu, after "
	       "%lu; %lu clients admitted; check %s\n",
	       (unsigned long)(before->nr_frames >> (20 - GFA_FRAME_SHIFT)),
	       (unsigned long)before->leased_frames, (unsigned long)during->leased_frames,
	       (unsigned long)after->leased_frames,
	       (unsigned long)(after->clients_total - before->clients_total),
	       after->check ? gfa_strerror(after->check) : "clean");
	printf("RESULT vmstart_socket gfa_p50_ms=%.3f gfa_p99_ms=%.3f attach_p50_ms=%.3f "
	       "huge_share=%.1f leased_before=%lu leased_running=%lu leased_after=%lu "
	       "processes=%lu kvm=%d\n",
	       p50_of(&r->clean, 50), p50_of(&r->clean, 99), p50_of(attach, 50), share,
	       (unsigned long)before->leased_frames, (unsigned long)during->leased_frames,
	       (unsigned long)after->leased_frames, (unsigned long)r->o.vms, r->kvm);
}

/* Every runner's pid differs from every other's and from ours: each VM its own process. */
static int distinct_pids(struct run *r, struct runner *ch)
{
	for (unsigned int i = 0; i < r->o.vms; i++)
		for (unsigned int j = 0; j <= i; j++)
			if (ch[i].rep.pid == (j < i ? ch[j].rep.pid : getpid())) {
				fprintf(stderr, "gfactl vmstart: VM %u ran in pid %d twice\n", i,
					(int)ch[i].rep.pid);
				return -1;
			}
	return 0;
}

/* Start VM i in its own process and read its report: 0, or -1 after saying why. */
static int start_one(struct run *r, unsigned int i, struct runner *ch)
{
	ssize_t n;

	if (runner_spawn(r, i, ch))
		return -1;
	do
		n = recv(ch->fd, &ch->rep, sizeof(ch->rep), 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(ch->rep)) {
		/* it said why on stderr; how it ended says the rest */
		close(ch->fd);
		ch->fd = -1;
		if (!runner_reap(i, ch))
			fprintf(stderr, "gfactl vmstart: VM %u's process sent no report\n", i);
		return -1;
	}
	vmstart_sample(&r->gfa, ch->rep.start_ms);
	vmstart_sample(&r->clean, ch->rep.start_ms);
	r->kvm = ch->rep.kvm;
	if (!ch->rep.kvm && !r->why_not_kvm)
		r->why_not_kvm = "host-thread vCPUs";
	print_vm(r, i, &ch->rep);
	return 0;
}

int vmstart_socket(struct run *r)
{
	struct gfa_hostpool_stat before, during, after;
	struct runner *ch = calloc(r->o.vms, sizeof(*ch));
	struct gfa_hostpool *hp;
	int err = 0;

	if (!ch)
		return -1;
	/* the parent's own connection: the service is there and admits us, its counters */
	hp = gfa_hostpool_attach(r->o.socket, NULL);
	if (!hp) {
		int e = errno;

		fprintf(stderr, "gfactl vmstart: --socket %s: %s%s\n", r->o.socket, strerror(e),
			e == ENOENT || e == ECONNREFUSED ? " (is gfad running there?)" :
			e == EACCES                      ? " (the service does not admit this "
							   "uid or gid: gfad --allow-uid/--allow-gid)" :
							   "");
		free(ch);
		return -1;
	}
	hostfacts_shmem_thp_advise(r->o.host_thp_keep);
	hostfacts_print(r->o.kvm);
	if (service_stat(hp, "before", &before)) {
		gfa_hostpool_detach(hp);
		free(ch);
		return -1;
	}
	printf("host pool: %s, %lu MiB, %lu frames leased before the run\n", r->o.socket,
	       (unsigned long)(before.nr_frames >> (20 - GFA_FRAME_SHIFT)),
	       (unsigned long)before.leased_frames);
	printf("starting %lu VMs, each in its own process\n", (unsigned long)r->o.vms);
	for (unsigned int i = 0; i < r->o.vms && !err; i++)
		err = start_one(r, i, &ch[i]);
	if (!err)
		err = distinct_pids(r, ch);
	if (!err)
		err = service_stat(hp, "while the VMs ran", &during);
	/* let every runner go: each destroys its VM and detaches */
	for (unsigned int i = 0; i < r->o.vms; i++) {
		if (ch[i].fd >= 0 && ch[i].pid > 0)
			close(ch[i].fd);
		if (runner_reap(i, &ch[i]))
			err = -1;
	}
	if (!err && !service_settle(hp, before.leased_frames, &after)) {
		summary(r, ch, &before, &during, &after);
		if (after.leased_frames > before.leased_frames || after.check) {
			fprintf(stderr,
				"gfactl vmstart: the service has %lu frames leased after the run "
				"(%lu before); its check: %s\n",
				(unsigned long)after.leased_frames,
				(unsigned long)before.leased_frames,
				after.check ? gfa_strerror(after.check) : "clean");
			err = -1;
		}
	} else {
		err = -1;
	}
	gfa_hostpool_detach(hp);
	free(ch);
	return err;
}
