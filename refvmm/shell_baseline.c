// SPDX-License-Identifier: MIT
/*
 * Start baselines on equal terms with gfa: the kernel's memory (a pre-faulted THP
 * memfd, MADV_HUGEPAGE first touch, 4 KiB pages, a hugetlbfs pool) behind the very KVM
 * creation a gfa start does without a shell, timed the same way (tools/vmstart.c,
 * bench/vmstart.c).  A baseline that faults zeroes inside its timer; gfa's pool and the
 * pre-faulted memfd were populated before theirs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "refvmm/shell.h"
#include "common/ktime.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define GUARD 4096UL /* a PROT_NONE page after each VM: no two VMs' mappings merge */

struct toucher {
	char *p;
	uint64_t len;
};

static void *touch_main(void *arg)
{
	struct toucher *t = arg;

	for (uint64_t off = 0; off < t->len; off += 4096)
		((volatile uint64_t *)(t->p + off))[0] = off | 1;
	return NULL;
}

void baseline_touch(char *p, uint64_t len, unsigned int threads)
{
	pthread_t th[GFA_VM_MAX_VCPUS];
	struct toucher t[GFA_VM_MAX_VCPUS];
	bool started[GFA_VM_MAX_VCPUS];
	uint64_t per;

	threads = threads < 1 ? 1 : threads > GFA_VM_MAX_VCPUS ? GFA_VM_MAX_VCPUS : threads;
	per = (len / threads) & ~4095ULL;
	for (unsigned int i = 0; i < threads; i++) {
		t[i].p = p + per * i;
		t[i].len = i + 1 == threads ? len - per * i : per;
		started[i] = !pthread_create(&th[i], NULL, touch_main, &t[i]);
		if (!started[i])
			touch_main(&t[i]); /* no thread to be had: touch it here */
	}
	for (unsigned int i = 0; i < threads; i++)
		if (started[i])
			pthread_join(th[i], NULL);
}

int baseline_prepare(struct baseline_vm *bv, enum baseline_mem kind, uint64_t len,
		     unsigned int vcpus)
{
	memset(bv, 0, sizeof(*bv));
	bv->kind = kind;
	bv->len = len;
	bv->vcpus = vcpus;
	bv->fd = -1;
	if (kind == BASELINE_HUGETLB) {
		bv->fd = memfd_create("gfa-baseline-hugetlb", MFD_CLOEXEC | MFD_HUGETLB);
		if (bv->fd < 0 || ftruncate(bv->fd, (off_t)len))
			return -errno;
	}
	if (kind == BASELINE_PREFAULTED) {
		char *p;

		bv->fd = memfd_create("gfa-baseline-prefaulted", MFD_CLOEXEC);
		if (bv->fd < 0 || ftruncate(bv->fd, (off_t)len))
			return -errno;
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, bv->fd, 0);
		if (p == MAP_FAILED)
			return -errno;
		madvise(p, len, MADV_HUGEPAGE);
		if (madvise(p, len, MADV_POPULATE_WRITE))
			baseline_touch(p, len, vcpus);
		munmap(p, len);
	}
	return 0;
}

/* The KVM creation gfa's vm_setup_kvm did per start before shells: VM, memslot,
 * identity page tables and test code, vCPUs. */
static int baseline_kvm(struct baseline_vm *bv)
{
	uint64_t boot = gfa_kvm_boot_area_size(bv->len);
	int err;

	bv->kvm = gfa_kvm_vm_create();
	if (!bv->kvm)
		return -errno;
	err = gfa_kvm_set_memslot(bv->kvm, 0, 0, bv->mem, bv->len, 0);
	if (!err)
		err = gfa_kvm_vm_build_page_tables(bv->kvm, 0, bv->len);
	if (!err)
		err = gfa_kvm_test_guest_load(bv->kvm, (boot + 4095) & ~4095ULL);
	for (unsigned int i = 0; !err && i < bv->vcpus; i++) {
		bv->vcpu[i] = gfa_kvm_vcpu_create(bv->kvm, i);
		if (!bv->vcpu[i])
			err = -errno;
	}
	return err;
}

/* hugetlb mappings come in 2 MiB pages: no 4 KiB guard (its VMAs do not merge anyway) */
static uint64_t map_len(const struct baseline_vm *bv)
{
	return bv->kind == BASELINE_HUGETLB ? bv->len : bv->len + GUARD;
}

int baseline_start(struct baseline_vm *bv, bool kvm)
{
	bool file = bv->kind == BASELINE_PREFAULTED || bv->kind == BASELINE_HUGETLB;
	char *p = mmap(NULL, map_len(bv), PROT_READ | PROT_WRITE,
		       file ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, file ? bv->fd : -1, 0);
	int err = 0;

	if (p == MAP_FAILED)
		return -errno;
	bv->mem = p;
	if (bv->kind != BASELINE_HUGETLB)
		mprotect(p + bv->len, GUARD, PROT_NONE);
	if (bv->kind == BASELINE_4K)
		madvise(p, bv->len, MADV_NOHUGEPAGE);
	else if (bv->kind != BASELINE_HUGETLB)
		madvise(p, bv->len, MADV_HUGEPAGE);
	if (kvm)
		err = baseline_kvm(bv);
	/* (the first 2 MiB hold the page tables and code: written by the KVM setup) */
	if (!err)
		baseline_touch(p + (2ULL << 20), bv->len - (2ULL << 20), bv->vcpus);
	return err;
}

void baseline_destroy(struct baseline_vm *bv)
{
	for (unsigned int i = 0; i < bv->vcpus; i++)
		gfa_kvm_vcpu_destroy(bv->vcpu[i]);
	gfa_kvm_vm_destroy(bv->kvm);
	if (bv->mem)
		munmap(bv->mem, map_len(bv));
	if (bv->fd >= 0)
		close(bv->fd);
	memset(bv, 0, sizeof(*bv));
	bv->fd = -1;
}

#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"
static long hugetlb_saved = -1;

static long read_long(const char *path, const char *key)
{
	char line[256];
	long v = -1;
	FILE *f = fopen(path, "r");

	while (f && fgets(line, sizeof(line), f)) {
		if (!key) {
			v = strtol(line, NULL, 10);
			break;
		}
		if (!strncmp(line, key, strlen(key))) {
			v = strtol(line + strlen(key), NULL, 10);
			break;
		}
	}
	if (f)
		fclose(f);
	return v;
}

static int write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	int err = 0;

	if (!f)
		return -errno;
	if (fprintf(f, "%ld\n", v) < 0)
		err = -EIO;
	if (fclose(f) && !err)
		err = -errno;
	return err;
}

long baseline_hugetlb_reserve(unsigned long pages, char *why, size_t len)
{
	long total = read_long(NR_HUGEPAGES, NULL);
	long free_now = read_long("/proc/meminfo", "HugePages_Free:");
	int err;

	if (total < 0 || free_now < 0) {
		snprintf(why, len, "no hugetlbfs on this host");
		return -ENOENT;
	}
	if (free_now >= (long)pages)
		return free_now;
	if (hugetlb_saved < 0)
		hugetlb_saved = total;
	err = write_long(NR_HUGEPAGES, total + (long)pages - free_now);
	free_now = read_long("/proc/meminfo", "HugePages_Free:");
	if (err || free_now < (long)pages) {
		snprintf(why, len, "could reserve %ld of %lu 2 MiB pages (%s)", free_now, pages,
			 err ? strerror(-err) : "memory too fragmented or short");
		baseline_hugetlb_restore();
		return err ? err : -ENOMEM;
	}
	return free_now;
}

void baseline_hugetlb_restore(void)
{
	if (hugetlb_saved >= 0)
		write_long(NR_HUGEPAGES, hugetlb_saved);
	hugetlb_saved = -1;
}

/* Median ms of `reps` runs of fn over buf (interleaved by the caller). */
static double time_zero(void (*fn)(void *, size_t), char *buf, uint64_t bytes)
{
	uint64_t t0 = ktime_get_ns();

	fn(buf, bytes);
	return (double)(ktime_get_ns() - t0) / 1e6;
}

static void memset_zero(void *p, size_t len)
{
	memset(p, 0, len);
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int baseline_zero_rates(uint64_t bytes, unsigned int reps, struct zero_rates *zr)
{
	double ms_set[64], ms_zero[64];
	char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (buf == MAP_FAILED)
		return -errno;
	reps = reps < 1 ? 1 : reps > 64 ? 64 : reps;
	memset(buf, 1, bytes); /* resident before the timer, as pool frames are */
	for (unsigned int i = 0; i < reps; i++) {
		/* interleaved, so both see the same machine */
		memset(buf, 1, bytes);
		ms_set[i] = time_zero(memset_zero, buf, bytes);
		memset(buf, 1, bytes);
		ms_zero[i] = time_zero(gfa_zero, buf, bytes);
	}
	for (uint64_t i = 0; i < bytes; i += 4096)
		if (buf[i]) {
			munmap(buf, bytes);
			return -EIO; /* gfa_zero left a byte: the rate means nothing */
		}
	munmap(buf, bytes);
	qsort(ms_set, reps, sizeof(double), cmp_d);
	qsort(ms_zero, reps, sizeof(double), cmp_d);
	zr->memset_min_ms = ms_set[0];
	zr->memset_p50_ms = ms_set[reps / 2];
	zr->zero_min_ms = ms_zero[0];
	zr->zero_p50_ms = ms_zero[reps / 2];
	zr->memset_gbs = (double)bytes / (zr->memset_p50_ms * 1e6);
	zr->zero_gbs = (double)bytes / (zr->zero_p50_ms * 1e6);
	zr->method = gfa_zero_method();
	return 0;
}
