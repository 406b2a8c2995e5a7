// SPDX-License-Identifier: MIT
/*
 * A real Linux guest on gfa memory: refvmm/linux_*.c, refvmm/uart.c.
 *
 * Suite "linux_boot" boots Debian's own kernel (GFA_LINUX_KERNEL, the uncompressed vmlinux;
 * GFA_LINUX_BZIMAGE, the bzImage it came from) with the initramfs of
 * tools/linux-initramfs.sh (GFA_LINUX_INITRD: busybox, the kernel's virtio modules, gfa's
 * checker tests/linux/gfacheck.c) on a gfa guest and reads
 * what its checker reports on the serial console.  It needs KVM that runs an unmodified
 * kernel: the native kvm_pvm cannot ("KVM internal error, emulation failure"), so there
 * the suite skips and linux_qemu/in_qemu runs it inside one QEMU TCG guest with nested
 * KVM (tools/kvm-in-qemu.sh), building the initramfs first.  Inside QEMU (GFA_IN_QEMU=1)
 * a missing prerequisite is a failure, not a skip.  Suite "linux_config" checks bad
 * configurations anywhere KVM opens.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <gfa/refvmm.h>
#include "tests/test_util.h"
#include "tests/qemu_util.h"
#include "common/ktime.h"

#define LT_MIB        (1ULL << 20)
#define LT_TIMEOUT_MS 120000 /* one phase of one guest: boot, or a pass */
#define LT_SHMEM_THP  "/sys/kernel/mm/transparent_hugepage/shmem_enabled"

/* ---- environment ---------------------------------------------------------------- */

static const char *lt_kernel, *lt_initrd;

/* Skip (outside QEMU) or fail (inside) when this KVM cannot boot Linux here. */
static void lt_require_linux(void)
{
	bool in_qemu = getenv("GFA_IN_QEMU") != NULL;
	char why[256];

	if (!gfa_kvm_available(why, sizeof(why))) {
		cr_assert_not(in_qemu, "inside the QEMU harness, but KVM is unusable: %s", why);
		cr_skip_test("no usable KVM (%s): linux_qemu/in_qemu runs suite linux_boot in QEMU",
			     why);
	}
	if (gfa_kvm_is_software()) {
		cr_assert_not(in_qemu, "inside the QEMU harness, but KVM is kvm_pvm");
		cr_skip_test(
			"kvm_pvm cannot boot an unmodified kernel (KVM internal error, "
			"emulation failure): linux_qemu/in_qemu runs suite linux_boot in QEMU");
	}
	lt_kernel = getenv("GFA_LINUX_KERNEL");
	lt_initrd = getenv("GFA_LINUX_INITRD");
	if (!lt_kernel || !lt_initrd || access(lt_kernel, R_OK) || access(lt_initrd, R_OK)) {
		cr_assert_not(in_qemu, "GFA_LINUX_KERNEL / GFA_LINUX_INITRD not readable");
		cr_skip_test("set GFA_LINUX_KERNEL and GFA_LINUX_INITRD (tools/linux-initramfs.sh "
			     "prints them); linux_qemu/in_qemu does");
	}
}

struct lt_host {
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_host_return *hr; /* NULL unless lt_host_return started one */
	uint64_t frames;
};

/* Return free frames to the host at once (no settling, a reserve of 2 MiB at most). */
static void lt_host_return(struct lt_host *h)
{
	static const struct gfa_host_return_config hc = { .no_settle = true, .interval_ms = 20 };
	struct gfa_release_policy rp = { .low = 256, .high = 512, .min_empty_frac = 4 };

	for (unsigned int z = 0; z < gfa_pool_nr_zones(h->pool); z++)
		cr_assert_eq(gfa_zone_set_release_policy(h->pool, z, &rp), 0);
	h->hr = gfa_host_return_start(h->pool, h->b, &hc);
	cr_assert_not_null(h->hr, "gfa_host_return_start: %s", strerror(errno));
}

/* The pool's host-backed bytes (memfd blocks), after the host return settled. */
static uint64_t lt_backed(struct lt_host *h)
{
	uint64_t sum = 0;

	if (h->hr)
		cr_assert_eq(gfa_host_return_quiesce(h->hr, 30000), 0);
	for (unsigned int z = 0; z < gfa_pool_nr_zones(h->pool); z++) {
		int64_t n = gfa_memfd_allocated_bytes(gfa_backing_zone_fd(h->b, z));

		cr_assert_geq(n, 0, "gfa_memfd_allocated_bytes: %s", strerror((int)-n));
		sum += (uint64_t)n;
	}
	return sum;
}

/* @populate: every frame host-backed from the start, so a balloon's return shows. */
static struct lt_host lt_host_new_opts(uint64_t bytes, bool populate)
{
	struct gfa_backing_config bc = { .populate = populate };
	struct lt_host h = { 0 };

	h.frames = bytes >> GFA_FRAME_SHIFT;
	h.pool = tu_pool(h.frames);
	h.b = gfa_backing_create(h.pool, &bc);
	cr_assert_not_null(h.b, "gfa_backing_create: %s", strerror(errno));
	return h;
}

static struct lt_host lt_host_new(uint64_t bytes)
{
	return lt_host_new_opts(bytes, false);
}

static void lt_host_done(struct lt_host *h)
{
	gfa_host_return_stop(h->hr);
	/* a stopped guest's frames come free once the backing's zeroer has zeroed them */
	cr_assert_eq(gfa_backing_zero_quiesce(h->b, 10000), 0);
	ASSERT_POOL_OK(h->pool);
	cr_assert_eq(tu_free_frames(h->pool), h->frames, "frames still allocated at the end");
	gfa_backing_destroy(h->b);
	gfa_pool_destroy(h->pool);
}

/* A guest of @mem and @vcpus whose checker fills @check_mib MiB and verifies it @passes times
 * (0: until the VM stops), started. */
static struct gfa_linux_vm *lt_boot_lazy(struct lt_host *h, uint64_t mem, unsigned int vcpus,
					 unsigned int check_mib, unsigned int passes,
					 bool small_only, bool lazy)
{
	char append[64];
	struct gfa_linux_config cfg = {
		.kernel = lt_kernel,
		.initrd = lt_initrd,
		.mem_bytes = mem,
		.vcpus = vcpus,
		.small_only = small_only,
		.console_fd = -1,
		.append = append,
		.lazy = lazy,
	};
	struct gfa_linux_vm *vm;

	snprintf(append, sizeof(append), "gfacheck=%u,%u", check_mib, passes);
	vm = gfa_linux_vm_create(h->pool, h->b, &cfg);
	cr_assert_not_null(vm, "gfa_linux_vm_create(%s, %llu MiB): %s", lt_kernel,
			   (unsigned long long)(mem / LT_MIB), strerror(errno));
	cr_assert_eq(gfa_linux_vm_start(vm), 0);
	return vm;
}

static struct gfa_linux_vm *lt_boot(struct lt_host *h, uint64_t mem, unsigned int vcpus,
				    unsigned int check_mib, unsigned int passes, bool small_only)
{
	return lt_boot_lazy(h, mem, vcpus, check_mib, passes, small_only, false);
}

/* Wait for a line holding @needle from line *@next on; advances *@next past it. */
static void lt_expect(struct gfa_linux_vm *vm, const char *needle, unsigned int *next, char *line,
		      size_t len, double *ms)
{
	int i = gfa_linux_vm_console_wait(vm, needle, *next, LT_TIMEOUT_MS, line, len, ms);

	cr_assert_geq(i, 0, "no console line with \"%s\" (%s; KVM: \"%s\")", needle, strerror(-i),
		      gfa_linux_vm_error(vm));
	*next = (unsigned int)i + 1;
}

/* The next checker pass: no mismatch, an untainted kernel (an oops taints it 'D'). */
static void lt_expect_clean_pass(struct gfa_linux_vm *vm, unsigned int *next)
{
	unsigned long long pass, bad;
	unsigned long taint;
	char line[256];

	lt_expect(vm, "gfacheck: pass ", next, line, sizeof(line), NULL);
	cr_assert_eq(sscanf(strstr(line, "gfacheck: pass "),
			    "gfacheck: pass %llu mismatches %llu tainted %lu", &pass, &bad, &taint),
		     3, "malformed line: %s", line);
	cr_assert_eq(bad, 0, "the guest's checker saw mismatches: %s", line);
	cr_assert_eq(taint, 0, "the guest kernel is tainted (oops or warning): %s", line);
}

/*
 * Write-protected moves stopped nothing: no pause, so the vCPUs ran and the devices'
 * threads (gated only by the pause) wrote guest RAM all along.
 */
static void lt_expect_unpaused(const struct gfa_guest_stat *before,
			       const struct gfa_guest_stat *after)
{
	if (after->wp_errno) {
		fprintf(stderr, "linux: moves on the pause fallback here (%s)\n",
			strerror(after->wp_errno));
		return;
	}
	cr_assert_eq(after->pauses, before->pauses, "write-protected moves paused the vCPUs");
	cr_assert_eq(after->paused_ns, before->paused_ns);
	cr_assert_gt(after->wp_moves, before->wp_moves);
}

/*
 * No kernel oops, BUG or panic anywhere on the console (quiet shows errors and worse),
 * and no ACPI error: the interpreter found nothing wrong in the VMM's tables.
 */
static void lt_expect_no_oops(struct gfa_linux_vm *vm)
{
	static const char *const bad[] = { "Oops",         "BUG:",
					   "Kernel panic", "general protection",
					   "ACPI Error",   "ACPI BIOS Error" };
	char line[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int r = gfa_linux_vm_console_wait(vm, bad[i], 0, 0, line, sizeof(line), NULL);

		cr_assert_lt(r, 0, "the guest kernel printed: %s", line);
	}
}

/*
 * The e820 RAM the kernel took (gfacheck's "ram" lines from /proc/iomem) is the map the
 * VMM made from the gfa guest: same ranges, except that the kernel keeps page 0 for itself.
 */
static void lt_expect_e820(struct gfa_linux_vm *vm, unsigned int *next)
{
	struct gfa_linux_e820 e[GFA_LINUX_E820_MAX];
	int n = gfa_linux_vm_e820(vm, e, GFA_LINUX_E820_MAX);
	uint64_t ram = 0;

	cr_assert_gt(n, 0);
	for (int i = 0; i < n; i++) {
		unsigned long long lo, hi;
		uint64_t want_lo = e[i].addr ? e[i].addr : 0x1000;
		char line[256];

		if (e[i].type != 1)
			continue;
		ram += e[i].size;
		lt_expect(vm, "gfacheck: ram ", next, line, sizeof(line), NULL);
		cr_assert_eq(sscanf(strstr(line, "gfacheck: ram "), "gfacheck: ram %llx-%llx", &lo,
				    &hi),
			     2, "malformed line: %s", line);
		cr_assert(lo == want_lo && hi + 1 == e[i].addr + e[i].size,
			  "guest RAM %#llx-%#llx, the VMM gave %#llx-%#llx", lo, hi,
			  (unsigned long long)e[i].addr,
			  (unsigned long long)(e[i].addr + e[i].size - 1));
	}
	/* everything but the legacy hole below 1 MiB is RAM */
	cr_assert_eq(ram, gfa_guest_size(gfa_linux_vm_guest(vm)) - (0x100000 - 0x9fc00));
}

static void lt_expect_memtotal(struct gfa_linux_vm *vm, uint64_t mem, unsigned int *next)
{
	unsigned long long kb;
	char line[256];

	lt_expect(vm, "gfacheck: MemTotal ", next, line, sizeof(line), NULL);
	cr_assert_eq(sscanf(strstr(line, "gfacheck: MemTotal "), "gfacheck: MemTotal %llu", &kb),
		     1);
	/* the kernel's own image and reservations are not in MemTotal */
	cr_assert(kb * 1024 < mem && kb * 1024 > mem / 2, "MemTotal %llu kB of %llu MiB", kb,
		  (unsigned long long)(mem / LT_MIB));
}

/* ---- a Linux guest with a virtio-balloon ------------------------------------------ */

#define LT_BALLOON_SLOT 1

struct lt_bvm {
	struct gfa_linux_vm *vm;
	struct gfa_rv_pci *pci;
	struct gfa_rv_balloon *bal;
	unsigned int next;              /* console line to read from */
	unsigned long long memtotal_kb; /* the last MemTotal the checker reported */
};

/*
 * A guest of @mem with a balloon in slot 1 (INTA# on GFA_LINUX_PCI_IRQ(1)), its checker
 * filling @check_mib and verifying it until the VM stops, with the checker options @opts
 * ("-i,200": MemTotal on each change), started.  Returns once the kernel's virtio_pci
 * bound the device, virtio_balloon drives it and the first clean pass came.
 */
static void lt_bvm_boot(struct lt_bvm *v, struct lt_host *h, uint64_t mem, unsigned int check_mib,
			const char *opts, bool reporting, bool small_only)
{
	char append[96];
	struct gfa_linux_config cfg = {
		.kernel = lt_kernel,
		.initrd = lt_initrd,
		.mem_bytes = mem,
		.vcpus = 1,
		.small_only = small_only,
		.console_fd = -1,
		.append = append,
	};
	struct gfa_rv_balloon_config bc = {
		.backing = h->b,
		.slot = LT_BALLOON_SLOT,
		.irq = GFA_LINUX_PCI_IRQ(LT_BALLOON_SLOT),
		.irq_fn = gfa_linux_vm_irq_line,
		.free_page_reporting = reporting,
		/* without DEFLATE_ON_OOM the driver takes ballooned pages out of MemTotal */
		.deflate_on_oom = false,
	};
	char line[256];

	memset(v, 0, sizeof(*v));
	snprintf(append, sizeof(append), "gfacheck=%u,0 gfacheck_opts=%s", check_mib, opts);
	v->pci = gfa_rv_pci_create();
	cr_assert_not_null(v->pci);
	cfg.pci = v->pci;
	v->vm = gfa_linux_vm_create(h->pool, h->b, &cfg);
	cr_assert_not_null(v->vm, "gfa_linux_vm_create: %s", strerror(errno));
	bc.guest = gfa_linux_vm_guest(v->vm);
	bc.irq_ctx = v->vm;
	v->bal = gfa_rv_balloon_create(v->pci, &bc);
	cr_assert_not_null(v->bal, "gfa_rv_balloon_create: %s", strerror(errno));
	cr_assert_eq(gfa_linux_vm_start(v->vm), 0);
	/* /sys/bus/pci/devices: the device at 00:01.0, bound by virtio-pci ... */
	lt_expect(v->vm, "gfa-init: dev pci/devices/0000:00:01.0 0x1af4 0x1002", &v->next, line,
		  sizeof(line), NULL);
	cr_assert(strstr(line, "driver virtio-pci"), "virtio_pci did not bind: %s", line);
	/* ... and /sys/bus/virtio/devices: device id 5, driven by virtio_balloon */
	lt_expect(v->vm, "gfa-init: dev virtio/devices/virtio0", &v->next, line, sizeof(line),
		  NULL);
	cr_assert(strstr(line, "0x0005 driver virtio_balloon"), "no balloon driver: %s", line);
	lt_expect(v->vm, "gfacheck: MemTotal ", &v->next, line, sizeof(line), NULL);
	cr_assert_eq(sscanf(strstr(line, "MemTotal "), "MemTotal %llu", &v->memtotal_kb), 1);
	lt_expect_clean_pass(v->vm, &v->next);
}

/* Wait until the checker reports a MemTotal of @kb (it reports each change). */
static void lt_bvm_wait_memtotal(struct lt_bvm *v, unsigned long long kb, double *ms)
{
	char line[256];

	while (v->memtotal_kb != kb) {
		lt_expect(v->vm, "gfacheck: MemTotal ", &v->next, line, sizeof(line), ms);
		cr_assert_eq(sscanf(strstr(line, "MemTotal "), "MemTotal %llu", &v->memtotal_kb),
			     1);
	}
}

static struct gfa_rv_balloon_stat lt_bvm_stat(struct lt_bvm *v)
{
	struct gfa_rv_balloon_stat st;

	cr_assert_eq(gfa_rv_balloon_stat(v->bal, &st), 0);
	return st;
}

/*
 * Wait until the device holds @pages.  The driver takes the pages out of MemTotal
 * before it hands their list to the device, so a MemTotal at the target can come a
 * little before the device's count of them (seen once: a move test read the count
 * one batch short).
 */
static void lt_bvm_wait_inflated(struct lt_bvm *v, uint64_t pages)
{
	for (int i = 0; i < 1000 && lt_bvm_stat(v).inflated_pages != pages; i++)
		usleep(10 * 1000);
	cr_assert_eq(lt_bvm_stat(v).inflated_pages, pages, "the device holds %llu pages, not %llu",
		     (unsigned long long)lt_bvm_stat(v).inflated_pages, (unsigned long long)pages);
}

/* The guest's errors toward the device: none from Debian's own driver. */
static void lt_bvm_expect_no_device_errors(struct lt_bvm *v)
{
	struct gfa_rv_balloon_stat st = lt_bvm_stat(v);

	cr_assert_eq(st.err_ring + st.err_queue_index + st.err_avail + st.err_desc + st.err_loop +
			     st.err_dir + st.err_page_list + st.err_report + st.err_stats +
			     st.needs_reset,
		     0, "the device refused some of the driver's requests");
}

/* Stop the guest, unplug the balloon, free the VM and the bus. */
static void lt_bvm_done(struct lt_bvm *v)
{
	lt_expect_no_oops(v->vm);
	cr_assert_eq(gfa_linux_vm_wait(v->vm, 0), GFA_LINUX_RUNNING, "the guest stopped: %s",
		     gfa_linux_vm_error(v->vm));
	cr_assert_eq(gfa_linux_vm_stop(v->vm), GFA_LINUX_EXIT_STOPPED);
	gfa_rv_balloon_destroy(v->bal);
	gfa_linux_vm_destroy(v->vm);
	cr_assert_eq(gfa_rv_pci_destroy(v->pci), 0);
}

/* ---- suite linux_boot (needs KVM that boots Linux) ------------------------------ */

Test(linux_boot, boots_to_init_with_two_vcpus_and_checks_its_memory, .timeout = 200)
{
	const uint64_t mem = 256 * LT_MIB;
	unsigned int next = 0;
	struct gfa_linux_stat ls;
	struct gfa_guest_stat st;
	struct gfa_linux_vm *vm;
	struct lt_host h;
	double init_ms = 0, done_ms = 0;

	lt_require_linux();
	h = lt_host_new(mem + 64 * LT_MIB);
	vm = lt_boot(&h, mem, 2, 32, 2, false);
	lt_expect(vm, "gfa-init up", &next, NULL, 0, &init_ms);
	/* the second vCPU came up through INIT/SIPI (in-kernel LAPIC, the MADT's entry: a
	 * kernel without the MP table parser, the cloud flavour, finds it there only) */
	lt_expect(vm, "gfacheck: cpus 2", &next, NULL, 0, NULL);
	lt_expect_memtotal(vm, mem, &next);
	lt_expect_e820(vm, &next);
	lt_expect(vm, "gfacheck: filled 32 MiB", &next, NULL, 0, NULL);
	lt_expect_clean_pass(vm, &next);
	lt_expect_clean_pass(vm, &next);
	lt_expect(vm, "gfa-init: checker exit 0", &next, NULL, 0, &done_ms);
	/* /init ends with reboot -f: the kernel resets through port 0xcf9 (reboot=pci) */
	cr_assert_eq(gfa_linux_vm_wait(vm, LT_TIMEOUT_MS), GFA_LINUX_EXIT_RESET,
		     "the guest did not reset itself (%s)", gfa_linux_vm_error(vm));
	lt_expect_no_oops(vm);
	gfa_linux_vm_stat(vm, &ls);
	gfa_guest_stat(gfa_linux_vm_guest(vm), &st);
	fprintf(stderr,
		"linux: booted to /init in %.0f ms, checker done at %.0f ms; %llu console "
		"bytes, %llu unclaimed port reads/writes, %llu MMIO exits\n",
		init_ms, done_ms, (unsigned long long)ls.console_bytes,
		(unsigned long long)ls.io_exits_unclaimed, (unsigned long long)ls.mmio_exits);
	cr_assert_eq(ls.err_irq, 0);
	cr_assert_eq(st.mem_bytes, mem);
	gfa_linux_vm_destroy(vm);
	lt_host_done(&h);
}

/*
 * A lazy guest (GFA_GUEST_LAZY) boots with its RAM taken at first touch: at /init it
 * holds a fraction of it (the full mode: all), and its checker still sees its memory.
 */
Test(linux_boot, boots_lazily_holding_a_quarter_of_its_ram_at_init, .timeout = 200)
{
	const uint64_t mem = 512 * LT_MIB;
	unsigned int next = 0;
	struct gfa_guest_stat st;
	struct gfa_linux_vm *vm;
	struct lt_host h;
	double pct;

	lt_require_linux();
	h = lt_host_new(mem + 64 * LT_MIB);
	vm = lt_boot_lazy(&h, mem, 1, 32, 1, false, true);
	lt_expect(vm, "gfa-init up", &next, NULL, 0, NULL);
	gfa_guest_stat(gfa_linux_vm_guest(vm), &st);
	pct = 100.0 * (double)st.populated_bytes / (double)mem;
	fprintf(stderr,
		"linux: lazy boot: %.1f%% of %llu MiB host-backed at /init (%llu first "
		"touches, %llu at 2 MiB)\n",
		pct, (unsigned long long)(mem / LT_MIB), (unsigned long long)st.lazy_faults,
		(unsigned long long)st.lazy_huge_faults);
	cr_assert_leq(pct, 25.0, "a lazy guest holds %.1f%% of its RAM at /init", pct);
	lt_expect(vm, "gfacheck: filled 32 MiB", &next, NULL, 0, NULL);
	lt_expect_clean_pass(vm, &next);
	lt_expect(vm, "gfa-init: checker exit 0", &next, NULL, 0, NULL);
	cr_assert_eq(gfa_linux_vm_wait(vm, LT_TIMEOUT_MS), GFA_LINUX_EXIT_RESET,
		     "the guest did not reset itself (%s)", gfa_linux_vm_error(vm));
	lt_expect_no_oops(vm);
	gfa_guest_stat(gfa_linux_vm_guest(vm), &st);
	cr_assert_eq(st.lazy_refused, 0);
	gfa_linux_vm_destroy(vm);
	lt_host_done(&h);
}

static char lt_shmem_saved[32];
static int lt_shmem_lock = -1;

static bool lt_shmem_set(const char *mode)
{
	FILE *f = fopen(LT_SHMEM_THP, "w");

	if (!f)
		return false;
	fputs(mode, f);
	return fclose(f) == 0;
}

static void lt_shmem_restore(void)
{
	if (lt_shmem_saved[0])
		lt_shmem_set(lt_shmem_saved);
	tu_shmem_thp_unlock(lt_shmem_lock);
	lt_shmem_lock = -1;
}

/*
 * The guest starts on blocks below 2 MiB; while its checker verifies its memory over and
 * over, full compaction moves its frames up the zone and collapse moves every range onto
 * one 2 MiB block.  The kernel runs on, its checker sees no change, and KVM maps guest
 * RAM with 2 MiB pages afterwards (shmem THP on: advise, as a VMM host would set it).
 */
Test(linux_boot, frames_move_under_a_running_kernel, .timeout = 200, .fini = lt_shmem_restore)
{
	const uint64_t mem = 192 * LT_MIB, ranges = mem / (2 * LT_MIB);
	struct gfa_guest_stat before, after;
	struct gfa_thp_report thp;
	struct gfa_linux_stat ls;
	unsigned int next = 0;
	struct gfa_linux_vm *vm;
	struct lt_host h;
	int r, collapsed;

	lt_require_linux();
	lt_shmem_lock = tu_shmem_thp_lock();
	gfa_host_thp_report(&thp);
	snprintf(lt_shmem_saved, sizeof(lt_shmem_saved), "%s", thp.shmem_enabled);
	cr_assert(lt_shmem_set("advise"), "cannot set %s to advise", LT_SHMEM_THP);
	/* the guest in the bottom half, room above for compaction to move it into */
	h = lt_host_new(2 * mem);
	vm = lt_boot(&h, mem, 1, 48, 0, true);
	lt_expect(vm, "gfacheck: filled", &next, NULL, 0, NULL);
	lt_expect_clean_pass(vm, &next);
	gfa_guest_stat(gfa_linux_vm_guest(vm), &before);
	cr_assert_eq(before.huge_ranges, 0, "small_only guest on 2 MiB blocks");

	r = gfa_compact_zone(h.pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_geq(r, 0, "gfa_compact_zone: %s", strerror(-r));
	collapsed = gfa_guest_collapse(gfa_linux_vm_guest(vm), (unsigned int)ranges);
	gfa_guest_stat(gfa_linux_vm_guest(vm), &after);
	fprintf(stderr,
		"linux: under the running kernel: compaction moved %llu blocks, collapse "
		"%d of %llu ranges\n",
		(unsigned long long)(after.moves - before.moves), collapsed,
		(unsigned long long)ranges);
	cr_assert_gt(after.moves, before.moves, "compaction moved none of the guest's blocks");
	cr_assert_eq(collapsed, (int)ranges);
	cr_assert_eq(after.huge_ranges, ranges, "not all guest RAM on 2 MiB blocks");
	/* a pass that overlapped the moves, then one wholly after them */
	lt_expect_clean_pass(vm, &next);
	lt_expect_clean_pass(vm, &next);
	cr_assert_eq(gfa_linux_vm_wait(vm, 0), GFA_LINUX_RUNNING, "the guest stopped: %s",
		     gfa_linux_vm_error(vm));
	lt_expect_no_oops(vm);
	gfa_linux_vm_stat(vm, &ls);
	fprintf(stderr, "linux: KVM pages_4k %llu pages_2m %llu after the moves\n",
		(unsigned long long)ls.pages_4k, (unsigned long long)ls.pages_2m);
	cr_assert_gt(ls.pages_2m, 0, "KVM maps no 2 MiB page of the collapsed guest");
	lt_expect_unpaused(&before, &after);
	cr_assert_eq(gfa_linux_vm_stop(vm), GFA_LINUX_EXIT_STOPPED);
	gfa_linux_vm_destroy(vm);
	lt_host_done(&h);
}

/* Three guests on one pool boot side by side; each sees its own RAM, intact. */
Test(linux_boot, three_guests_share_one_pool, .timeout = 200)
{
	const uint64_t mem = 128 * LT_MIB;
	struct gfa_linux_vm *vm[3];
	unsigned int next[3] = { 0 };
	struct lt_host h;

	lt_require_linux();
	h = lt_host_new(3 * mem + 32 * LT_MIB);
	for (int i = 0; i < 3; i++)
		vm[i] = lt_boot(&h, mem, 1, 16, 1, false);
	for (int i = 0; i < 3; i++) {
		lt_expect(vm[i], "gfa-init up", &next[i], NULL, 0, NULL);
		lt_expect_memtotal(vm[i], mem, &next[i]);
		lt_expect_e820(vm[i], &next[i]);
		lt_expect_clean_pass(vm[i], &next[i]);
		lt_expect(vm[i], "gfa-init: checker exit 0", &next[i], NULL, 0, NULL);
	}
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(gfa_linux_vm_wait(vm[i], LT_TIMEOUT_MS), GFA_LINUX_EXIT_RESET);
		lt_expect_no_oops(vm[i]);
		gfa_linux_vm_destroy(vm[i]);
	}
	lt_host_done(&h);
}

/* The bzImage itself, through the 64-bit boot protocol (it decompresses itself first). */
Test(linux_boot, a_bzimage_boots_through_the_64_bit_entry, .timeout = 200)
{
	const uint64_t mem = 128 * LT_MIB;
	const char *bz = getenv("GFA_LINUX_BZIMAGE");
	unsigned int next = 0;
	struct gfa_linux_vm *vm;
	struct lt_host h;

	lt_require_linux();
	cr_assert(bz && !access(bz, R_OK), "GFA_LINUX_BZIMAGE (/boot/vmlinuz-*) not readable");
	lt_kernel = bz;
	h = lt_host_new(mem + 32 * LT_MIB);
	vm = lt_boot(&h, mem, 1, 8, 1, false);
	lt_expect(vm, "gfa-init up", &next, NULL, 0, NULL);
	lt_expect_e820(vm, &next);
	lt_expect_clean_pass(vm, &next);
	lt_expect(vm, "gfa-init: checker exit 0", &next, NULL, 0, NULL);
	cr_assert_eq(gfa_linux_vm_wait(vm, LT_TIMEOUT_MS), GFA_LINUX_EXIT_RESET);
	lt_expect_no_oops(vm);
	gfa_linux_vm_destroy(vm);
	lt_host_done(&h);
}

/*
 * Debian's virtio_balloon inflates 256 MiB of a 512 MiB guest: MemTotal falls by exactly
 * that, and once the host return settled the pool's memfds hold at least 95% of it less
 * (every frame was host-backed before).  Target 0 deflates it: MemTotal back, nothing
 * ballooned, the checker's memory intact.
 */
Test(linux_boot, a_balloon_returns_256_mib_to_the_host_and_deflates, .timeout = 200)
{
	const uint64_t mem = 512 * LT_MIB, target = 256 * LT_MIB;
	struct gfa_guest_stat gs;
	struct gfa_rv_balloon_stat st;
	unsigned long long kb0;
	uint64_t before, after;
	struct lt_host h;
	struct lt_bvm v;

	lt_require_linux();
	h = lt_host_new_opts(mem + 64 * LT_MIB, true);
	lt_host_return(&h);
	lt_bvm_boot(&v, &h, mem, 16, "-i,200", false, false);
	kb0 = v.memtotal_kb;
	before = lt_backed(&h);
	cr_assert_eq(gfa_rv_balloon_set_target(v.bal, target), 0);
	lt_bvm_wait_memtotal(&v, kb0 - (target >> 10), NULL);
	lt_bvm_wait_inflated(&v, target >> 12);
	after = lt_backed(&h);
	st = lt_bvm_stat(&v);
	fprintf(stderr,
		"linux: balloon 256 MiB: MemTotal %llu -> %llu kB, host-backed %llu -> "
		"%llu MiB; the device holds %llu pages\n",
		kb0, v.memtotal_kb, (unsigned long long)(before / LT_MIB),
		(unsigned long long)(after / LT_MIB), (unsigned long long)st.inflated_pages);
	cr_assert_eq(st.inflated_pages, target >> 12);
	cr_assert_eq(st.actual_pages, target >> 12);
	cr_assert_geq(before - after, target / 100 * 95, "only %llu MiB left the host",
		      (unsigned long long)((before - after) / LT_MIB));
	lt_expect_clean_pass(v.vm, &v.next);

	cr_assert_eq(gfa_rv_balloon_set_target(v.bal, 0), 0);
	lt_bvm_wait_memtotal(&v, kb0, NULL);
	cr_assert_eq(gfa_guest_stat(gfa_linux_vm_guest(v.vm), &gs), 0);
	st = lt_bvm_stat(&v);
	cr_assert_eq(gs.ballooned_frames, 0);
	cr_assert_eq(st.inflated_pages, 0);
	cr_assert_eq(st.deflated_pages, target >> 12);
	lt_expect_clean_pass(v.vm, &v.next);
	lt_expect_clean_pass(v.vm, &v.next);
	lt_bvm_expect_no_device_errors(&v);
	lt_bvm_done(&v);
	lt_host_done(&h);
}

/*
 * Free page reporting, no balloon target: the checker touches 128 MiB more and frees it;
 * the kernel reports the freed pageblocks and the device punches them out of the memfd.
 */
Test(linux_boot, freed_guest_memory_is_reported_and_leaves_the_host, .timeout = 200)
{
	const uint64_t mem = 256 * LT_MIB, big = 128 * LT_MIB;
	struct gfa_rv_balloon_stat st;
	uint64_t b0, b1, b2 = 0;
	struct lt_host h;
	struct lt_bvm v;

	lt_require_linux();
	h = lt_host_new(mem + 32 * LT_MIB);
	lt_bvm_boot(&v, &h, mem, 8, "-i,500,-f,128", true, false);
	lt_expect(v.vm, "gfacheck: allocating 128 MiB", &v.next, NULL, 0, NULL);
	b0 = lt_backed(&h);
	lt_expect(v.vm, "gfacheck: allocated 128 MiB", &v.next, NULL, 0, NULL);
	b1 = lt_backed(&h);
	cr_assert_geq(b1, b0 + big / 2, "touching 128 MiB backed only %llu MiB more",
		      (unsigned long long)((b1 - b0) / LT_MIB));
	lt_expect(v.vm, "gfacheck: freed 128 MiB", &v.next, NULL, 0, NULL);
	/* the kernel reports about 2 s after the free; the punches follow */
	for (int i = 0; i < 300; i++) {
		b2 = lt_backed(&h);
		if (b2 + big / 4 * 3 <= b1)
			break;
		usleep(100 * 1000);
	}
	st = lt_bvm_stat(&v);
	fprintf(stderr,
		"linux: free page reporting: host-backed %llu MiB before the allocation, "
		"%llu with it, %llu after its free; %llu reports, %llu MiB punched\n",
		(unsigned long long)(b0 / LT_MIB), (unsigned long long)(b1 / LT_MIB),
		(unsigned long long)(b2 / LT_MIB), (unsigned long long)st.report_requests,
		(unsigned long long)(st.report_released_bytes / LT_MIB));
	cr_assert_leq(b2 + big / 4 * 3, b1, "the freed 128 MiB did not leave the host");
	cr_assert_eq(st.target_pages, 0);
	cr_assert_eq(st.inflated_pages, 0);
	cr_assert_gt(st.report_released_bytes, 0);
	lt_expect_clean_pass(v.vm, &v.next);
	lt_bvm_expect_no_device_errors(&v);
	lt_bvm_done(&v);
	lt_host_done(&h);
}

/*
 * Full compaction of a small-block guest while its balloon fills to 64 MiB, collapse
 * while the balloon holds it; then it deflates.  The checker sees no change throughout,
 * the kernel no oops, and the device no bad request.
 */
Test(linux_boot, frames_move_while_the_balloon_holds_pages, .timeout = 200)
{
	const uint64_t mem = 192 * LT_MIB, target = 64 * LT_MIB, ranges = mem / (2 * LT_MIB);
	struct gfa_guest_stat before, after;
	uint64_t pre;
	unsigned long long kb0;
	struct lt_host h;
	struct lt_bvm v;
	int r, collapsed;

	lt_require_linux();
	h = lt_host_new(2 * mem);
	lt_bvm_boot(&v, &h, mem, 32, "-i,200", true, true);
	kb0 = v.memtotal_kb;
	gfa_guest_stat(gfa_linux_vm_guest(v.vm), &before);
	/* compaction while the driver fills the balloon (the device thread writes used
	 * rings between the moves), collapse once it holds its pages */
	cr_assert_eq(gfa_rv_balloon_set_target(v.bal, target), 0);
	r = gfa_compact_zone(h.pool, 0, -1, GFA_COMPACT_SYNC);
	cr_assert_geq(r, 0, "gfa_compact_zone: %s", strerror(-r));
	lt_bvm_wait_memtotal(&v, kb0 - (target >> 10), NULL);
	lt_bvm_wait_inflated(&v, target >> 12);
	gfa_guest_stat(gfa_linux_vm_guest(v.vm), &after);
	pre = after.ballooned_frames;
	collapsed = gfa_guest_collapse(gfa_linux_vm_guest(v.vm), (unsigned int)ranges);
	gfa_guest_stat(gfa_linux_vm_guest(v.vm), &after);
	fprintf(stderr,
		"linux: balloon of 64 MiB: compaction while it filled and collapse moved "
		"%llu blocks, collapse %d of %llu ranges\n",
		(unsigned long long)(after.moves - before.moves), collapsed,
		(unsigned long long)ranges);
	cr_assert_gt(after.moves, before.moves, "compaction moved none of the guest's blocks");
	cr_assert_eq(after.ballooned_frames, target >> 12,
		     "a move changed what is ballooned: "
		     "%llu frames, the device holds %llu pages (%llu before the collapse)",
		     (unsigned long long)after.ballooned_frames,
		     (unsigned long long)lt_bvm_stat(&v).inflated_pages, (unsigned long long)pre);
	/* the balloon's device thread was never gated: it wrote used rings between
	 * (and during) the moves, and the checker still sees no mismatch */
	lt_expect_unpaused(&before, &after);
	lt_expect_clean_pass(v.vm, &v.next);
	lt_expect_clean_pass(v.vm, &v.next);

	cr_assert_eq(gfa_rv_balloon_set_target(v.bal, 0), 0);
	lt_bvm_wait_memtotal(&v, kb0, NULL);
	gfa_guest_stat(gfa_linux_vm_guest(v.vm), &after);
	cr_assert_eq(after.ballooned_frames, 0);
	lt_expect_clean_pass(v.vm, &v.next);
	lt_bvm_expect_no_device_errors(&v);
	lt_bvm_done(&v);
	lt_host_done(&h);
}

/* ---- gfactl linux in the same guest: what it reports, and what it refuses ---------- */

static char lt_out[1 << 16];

/* Run gfactl (from $GFA_BUILD) with @args, stdout and stderr into lt_out; its exit code. */
static int lt_gfactl(const char *args, double *secs)
{
	const char *b = getenv("GFA_BUILD");
	char cmd[2 * PATH_MAX];
	uint64_t t0;
	size_t n;
	FILE *p;
	int st;

	snprintf(cmd, sizeof(cmd), "%s/gfactl linux %s 2>&1", b && *b ? b : "build", args);
	t0 = ktime_get_ns();
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(lt_out, 1, sizeof(lt_out) - 1, p);
	lt_out[n] = '\0';
	st = pclose(p);
	if (secs)
		*secs = (double)(ktime_get_ns() - t0) / 1e9;
	fprintf(stderr, "linux: gfactl linux %s: exit %d\n%s", args,
		WIFEXITED(st) ? WEXITSTATUS(st) : -1, lt_out);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/*
 * --kernel alone boots that kernel, with an initramfs of its own modules: a vmlinux
 * given is the one booted (it used to be replaced by the default kernel's, silently).
 */
Test(linux_boot, gfactl_boots_the_kernel_given_without_initrd, .timeout = 200)
{
	char args[2 * PATH_MAX + 64], want[PATH_MAX + 16];
	const char *mods = getenv("GFA_LINUX_MODULES");

	lt_require_linux();
	/* another flavour's modules are not in /lib/modules: lt_prepare passes their tree */
	snprintf(args, sizeof(args), "--kernel %s --mem 128M --check 8%s%s", lt_kernel,
		 mods && *mods ? " --modules " : "", mods && *mods ? mods : "");
	cr_assert_eq(lt_gfactl(args, NULL), 0, "%s", lt_out);
	snprintf(want, sizeof(want), "kernel %s, initramfs ", lt_kernel);
	cr_assert(strstr(lt_out, want), "gfactl did not boot the kernel given: %s", lt_out);
	cr_assert(strstr(lt_out, "1 of 1 vCPUs online"), "%s", lt_out);
}

/* A guest with fewer online CPUs than --vcpus fails (maxcpus=1 keeps the second down). */
Test(linux_boot, gfactl_fails_a_guest_with_fewer_cpus_online, .timeout = 200)
{
	lt_require_linux();
	cr_assert_eq(lt_gfactl("--vcpus 2 --mem 128M --check 8 --append maxcpus=1", NULL), 1, "%s",
		     lt_out);
	cr_assert(strstr(lt_out, "guest 0: FAILED: 1 of 2 vCPUs online"), "%s", lt_out);
	cr_assert(strstr(lt_out, "FAILED"), "%s", lt_out);
}

/*
 * A balloon no driver took (the module refused, as with an initramfs of another
 * kernel: here module_blacklist=) fails at once with the device's reason, not after the
 * inflate's timeout with none.
 */
Test(linux_boot, gfactl_says_when_no_driver_took_the_balloon, .timeout = 200)
{
	double secs = 0;

	lt_require_linux();
	cr_assert_eq(lt_gfactl("--balloon 32 --mem 128M --check 8 --timeout 100 "
			       "--append module_blacklist=virtio_balloon",
			       &secs),
		     1, "%s", lt_out);
	cr_assert(strstr(lt_out, "guest 0: FAILED: the balloon device never reached DRIVER_OK"),
		  "%s", lt_out);
	cr_assert(strstr(lt_out, "insmod"), "the message names no module: %s", lt_out);
	cr_assert_lt(secs, 90, "the failure took %.0f s", secs);
}

/* ---- suite linux_config: bad configurations (wherever KVM opens) ------------------ */

Test(linux_config, bad_configs_are_refused_and_keep_the_pool)
{
	struct gfa_linux_config cfg = { .kernel = "/nonexistent/vmlinux",
					.mem_bytes = 64 * LT_MIB,
					.console_fd = -1 };
	char why[256], self[PATH_MAX];
	struct lt_host h = lt_host_new(128 * LT_MIB);
	ssize_t n;

	errno = 0;
	cr_assert_null(gfa_linux_vm_create(NULL, h.b, &cfg));
	cr_assert_eq(errno, EFAULT);
	cfg.mem_bytes = 65 * LT_MIB; /* not a multiple of 2 MiB */
	cr_assert_null(gfa_linux_vm_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, EINVAL);
	cfg.mem_bytes = GFA_LINUX_MAX_MEM + 2 * LT_MIB;
	cr_assert_null(gfa_linux_vm_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, EINVAL);
	cfg.mem_bytes = 64 * LT_MIB;
	cfg.vcpus = GFA_LINUX_MAX_VCPUS + 1;
	cr_assert_null(gfa_linux_vm_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, EINVAL);
	cfg.vcpus = 1;
	if (!gfa_kvm_available(why, sizeof(why))) {
		lt_host_done(&h);
		cr_skip_test("no usable KVM (%s) for the load checks", why);
	}
	cr_assert_null(gfa_linux_vm_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, ENOENT);
	/* this test binary is an ELF, but no kernel: no PVH note */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	cr_assert_gt(n, 0);
	self[n] = '\0';
	cfg.kernel = self;
	cr_assert_null(gfa_linux_vm_create(h.pool, h.b, &cfg));
	cr_assert_eq(errno, ENOEXEC, "an ELF without PVH note: %s", strerror(errno));
	/* neither ELF nor bzImage */
	cfg.kernel = "/etc/hostname";
	if (!access(cfg.kernel, R_OK)) {
		cr_assert_null(gfa_linux_vm_create(h.pool, h.b, &cfg));
		cr_assert_eq(errno, ENOEXEC);
	}
	/* every frame the failed creates took is back */
	lt_host_done(&h);
}

/* ---- suite linux_qemu: suite linux_boot in one QEMU guest with nested KVM ------ */

#define LT_TESTS 11

/* The bzImage the suite's vmlinux comes from: @given, or the script's default, the newest. */
static bool lt_bzimage(const char *given, char *bz, size_t len)
{
	FILE *p;

	if (given) {
		snprintf(bz, len, "%s", given);
		return true;
	}
	p = popen("ls /boot/vmlinuz-* | sort -rV | head -1", "r");
	if (!p || !fgets(bz, (int)len, p)) {
		if (p)
			pclose(p);
		return false;
	}
	pclose(p);
	bz[strcspn(bz, "\n")] = '\0';
	return true;
}

static const char *lt_env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/*
 * tools/linux-initramfs.sh on the host (the guest sees the tree read-only), for the
 * newest /boot/vmlinuz-* or, when GFA_LINUX_TEST_KERNEL names a bzImage, that one with
 * its modules from GFA_LINUX_TEST_MODULES (another flavour: make test-linux-cloud).
 */
static bool lt_prepare(const char *root, const char *build, char *env, size_t len)
{
	const char *kernel = lt_env("GFA_LINUX_TEST_KERNEL");
	const char *mods = lt_env("GFA_LINUX_TEST_MODULES");
	char cmd[5 * PATH_MAX + 128], line[2 * PATH_MAX + 32] = "", bz[PATH_MAX];
	char opt[2 * PATH_MAX + 32] = "";
	FILE *p;

	if (kernel)
		snprintf(opt, sizeof(opt), " --kernel '%s'", kernel);
	if (kernel && mods)
		snprintf(opt + strlen(opt), sizeof(opt) - strlen(opt), " --modules '%s'", mods);
	snprintf(cmd, sizeof(cmd),
		 "'%s/tools/linux-initramfs.sh' --out '%s/linux' --checker "
		 "'%s/tests/linux/gfacheck'%s | tail -1",
		 root, build, build, opt);
	p = popen(cmd, "r");
	if (!p || !fgets(line, sizeof(line), p)) {
		if (p)
			pclose(p);
		return false;
	}
	if (pclose(p) || strncmp(line, "kernel=", 7) || !lt_bzimage(kernel, bz, sizeof(bz)))
		return false;
	line[strcspn(line, "\n")] = '\0';
	/* "kernel=K initrd=I" -> "GFA_LINUX_KERNEL=K GFA_LINUX_INITRD=I" */
	*strstr(line, " initrd=") = '\0';
	snprintf(env, len,
		 "GFA_LINUX_KERNEL='%s' GFA_LINUX_INITRD='%s' GFA_LINUX_BZIMAGE='%s' "
		 "GFA_LINUX_MODULES='%s'",
		 line + 7, line + strlen(line) + 8, bz, kernel && mods ? mods : "");
	return true;
}

Test(linux_qemu, in_qemu, .timeout = 1600)
{
	const char *san = getenv("GFA_SANITIZER");
	char root[PATH_MAX], build[PATH_MAX], exe[PATH_MAX], env[5 * PATH_MAX], cmd[8 * PATH_MAX];
	const char *only;
	double secs = 0;
	ssize_t n;
	int rc, want;

	if (getenv("GFA_IN_QEMU"))
		cr_skip_test("already inside the QEMU harness");
	if (san && *san)
		cr_skip_test("QEMU cases skip under sanitizers (GFA_SANITIZER=%s)", san);
	if (gfa_kvm_available(NULL, 0) && !gfa_kvm_is_software())
		cr_skip_test("this KVM boots Linux: suite linux_boot ran directly");
	if (!tu_find_harness_root(root, sizeof(root)) || !tu_build_dir(build, sizeof(build)))
		tu_qemu_skip("linux_qemu", "tools/kvm-in-qemu.sh not found");
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert_gt(n, 0);
	exe[n] = '\0';
	if (!lt_prepare(root, build, env, sizeof(env)))
		tu_qemu_skip("linux_qemu", "tools/linux-initramfs.sh could not build the initramfs "
					   "(busybox-static, cpio, linux-image-amd64 missing?)");
	/* GFA_LINUX_TEST_FILTER: some of the tests (a Criterion pattern), at least one to pass */
	only = lt_env("GFA_LINUX_TEST_FILTER");
	want = only ? 1 : LT_TESTS;
	snprintf(cmd, sizeof(cmd),
		 "out=$(%s '%s' --filter='linux_boot/%s' --verbose --color=never 2>&1); rc=$?; "
		 "printf '%%s\\n' \"$out\" | grep -v 'Test is disabled'; [ $rc = 0 ] || exit $rc; "
		 "n=$(printf '%%s\\n' \"$out\" | grep -c '^\\[PASS\\] linux_boot::'); "
		 "[ \"$n\" -ge %d ] || exit 3; exit 0",
		 env, exe, only ? only : "*", want);
	/*
	 * 2 GiB: three guests of 128 MiB, one of 192 MiB plus its compaction room, or one of
	 * 512 MiB fully host-backed.  The suite (seven tests) took 95 s at load 0.5 and
	 * 155 s at load 3 (four tests took up to 190 s at load 14); with the three gfactl
	 * tests (ten) 148 s at load 2.7, and the lazy boot makes eleven.  With ACPI on (each
	 * boot about 1.8 s longer) the eleven took 321 s at load 2-5, 375 s on the cloud
	 * kernel, and more than 480 s at load 7.  Each test's own timeout (200 s) reports a
	 * hang inside.  Exit 124 means the QEMU guest itself stopped (once in the first nine
	 * runs of this suite, at load 11, with no output at all: nested guests coming and
	 * going have hung it before): then it gets one more boot.
	 */
	for (int attempt = 0; attempt < 2; attempt++) {
		rc = tu_run_in_qemu("--mem 2048 --timeout 700", cmd, &secs);
		fprintf(stderr,
			"linux_qemu: suite linux_boot in a QEMU guest: exit %d after %.1f s%s\n",
			rc, secs, rc == 124 && !attempt ? "; the QEMU guest hung: once more" : "");
		if (rc != 124)
			break;
	}
	if (rc == 77)
		tu_qemu_skip("linux_qemu", "the QEMU harness cannot run here (exit 77; see its "
					   "message above)");
	cr_assert_eq(rc, 0,
		     "suite linux_boot failed in the guest (exit %d; 3: fewer than %d tests "
		     "ran unskipped)",
		     rc, want);
}
