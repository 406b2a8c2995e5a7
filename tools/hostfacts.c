// SPDX-License-Identifier: MIT
/*
 * What gfactl vmstart needs to know of the host, and the one setting it changes: the
 * memory available, THP for shmem (lifted to advise for the run, put back at exit or
 * on a fatal signal), and what runs the vCPUs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tools/vmstart.h"
#include "common/compiler.h"

#define SHMEM_THP "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
static char shmem_thp_saved[32];
static size_t shmem_thp_saved_len; /* for the signal handler: no strlen there */

void hostfacts_shmem_thp_restore(void)
{
	if (!shmem_thp_saved[0])
		return;
	(void)gfa_host_shmem_thp_set(shmem_thp_saved, NULL, 0);
	shmem_thp_saved[0] = '\0';
	shmem_thp_saved_len = 0;
}

/*
 * A fatal signal restores shmem_enabled too, then kills: with open and write, as
 * gfa_host_shmem_thp_set's stdio is not async-signal-safe.
 */
static void shmem_thp_signal(int sig)
{
	int fd = shmem_thp_saved_len ? open(SHMEM_THP, O_WRONLY) : -1; /* (restored already) */

	if (fd >= 0) {
		ssize_t n = write(fd, shmem_thp_saved, shmem_thp_saved_len);

		(void)n;
		close(fd);
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

static void shmem_thp_on_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
	struct sigaction sa = { .sa_handler = shmem_thp_signal, .sa_flags = SA_RESETHAND };
	struct sigaction old;

	/* a signal the caller ignores stays ignored (nohup, background jobs) */
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		if (!sigaction(sigs[i], NULL, &old) && old.sa_handler != SIG_IGN)
			sigaction(sigs[i], &sa, NULL);
}

/* shmem_enabled=never keeps memfd blocks on 4 KiB host pages: lift it for this run. */
void hostfacts_shmem_thp_advise(bool keep)
{
	struct gfa_thp_report thp;
	int err;

	gfa_host_thp_report(&thp);
	if (keep || thp.shmem_thp_possible || !strcmp(thp.shmem_enabled, "unknown"))
		return;
	err = gfa_host_shmem_thp_set("advise", shmem_thp_saved, sizeof(shmem_thp_saved));
	if (err) {
		shmem_thp_saved[0] = '\0';
		printf("host: could not set shmem_enabled to advise (%s): 2 MiB blocks stay on "
		       "4 KiB host pages in this run\n",
		       strerror(-err));
		return;
	}
	shmem_thp_saved_len = strlen(shmem_thp_saved);
	atexit(hostfacts_shmem_thp_restore);
	shmem_thp_on_signals();
	printf("host: shmem_enabled %s -> advise for this run (restored at exit; --host-thp keep "
	       "leaves it)\n",
	       thp.shmem_enabled);
}

void hostfacts_print(enum gfa_vm_kvm kvm_mode)
{
	struct gfa_thp_report thp;
	char why[160];
	int kvm = kvm_mode != GFA_VM_KVM_OFF && gfa_kvm_available(why, sizeof(why));

	gfa_host_thp_report(&thp);
	printf("host: THP enabled=%s, shmem_enabled=%s (%s)\n", thp.thp_enabled, thp.shmem_enabled,
	       thp.shmem_thp_possible ? "memfd blocks can be PMD-mapped" :
					"memfd blocks are mapped with 4 KiB pages by the host");
	if (kvm_mode == GFA_VM_KVM_OFF)
		printf("vCPUs: host threads (KVM turned off with --kvm off)\n");
	else if (!kvm)
		printf("vCPUs: host threads running the guest workload (%s)\n", why);
	else
		printf("vCPUs: KVM%s\n",
		       gfa_kvm_is_software() ?
			       " (software KVM, kvm_pvm: guests boot and check memory, kept short)" :
			       "");
}
