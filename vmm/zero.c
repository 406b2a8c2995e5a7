// SPDX-License-Identifier: MIT
/*
 * Zeroing guest frames at the memory's speed.  A frame zeroed for the next guest is not
 * read by the host again, so cached stores (memset) only fill the cache with lines that
 * are written back later: non-temporal stores go to memory directly, at about twice the
 * rate on hosts with AVX-512 (the kernel's clear_page_erms/clear_page_rep make the
 * same trade for its own pages).  The widest store the CPU offers is chosen at run time
 * (CPUID, as the kernel's alternatives do), never with global -m flags: each path is a
 * function compiled for its own target.  GFA_ZERO=avx512|avx2|movnti|memset forces one
 * (tests check each path against memset).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <gfa/vmm.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "common/compiler.h"

typedef void (*zero_fn)(void *p, size_t len);

static void zero_memset(void *p, size_t len)
{
	memset(p, 0, len);
}

#if defined(__x86_64__)
/*
 * Each path: cached stores up to the first aligned address and after the last whole
 * vector, non-temporal stores between, then a store fence so the zeroes are globally
 * visible before the frame is handed out (non-temporal stores are weakly ordered).
 */
__attribute__((target("avx512f"))) static void zero_avx512(void *p, size_t len)
{
	char *c = p, *end = c + len;
	char *a = (char *)(((uintptr_t)c + 63) & ~(uintptr_t)63);
	const __m512i z = _mm512_setzero_si512();

	if (a >= end || (size_t)(end - a) < 64) {
		memset(p, 0, len);
		return;
	}
	memset(c, 0, (size_t)(a - c));
	for (; a + 256 <= end; a += 256) {
		_mm512_stream_si512((void *)a, z);
		_mm512_stream_si512((void *)(a + 64), z);
		_mm512_stream_si512((void *)(a + 128), z);
		_mm512_stream_si512((void *)(a + 192), z);
	}
	for (; a + 64 <= end; a += 64)
		_mm512_stream_si512((void *)a, z);
	_mm_sfence();
	memset(a, 0, (size_t)(end - a));
}

__attribute__((target("avx2"))) static void zero_avx2(void *p, size_t len)
{
	char *c = p, *end = c + len;
	char *a = (char *)(((uintptr_t)c + 31) & ~(uintptr_t)31);
	const __m256i z = _mm256_setzero_si256();

	if (a >= end || (size_t)(end - a) < 32) {
		memset(p, 0, len);
		return;
	}
	memset(c, 0, (size_t)(a - c));
	for (; a + 128 <= end; a += 128) {
		_mm256_stream_si256((__m256i *)a, z);
		_mm256_stream_si256((__m256i *)(a + 32), z);
		_mm256_stream_si256((__m256i *)(a + 64), z);
		_mm256_stream_si256((__m256i *)(a + 96), z);
	}
	for (; a + 32 <= end; a += 32)
		_mm256_stream_si256((__m256i *)a, z);
	_mm_sfence();
	memset(a, 0, (size_t)(end - a));
}

/* movnti is SSE2, which every x86-64 CPU has. */
static void zero_movnti(void *p, size_t len)
{
	char *c = p, *end = c + len;
	char *a = (char *)(((uintptr_t)c + 7) & ~(uintptr_t)7);

	if (a >= end || (size_t)(end - a) < 8) {
		memset(p, 0, len);
		return;
	}
	memset(c, 0, (size_t)(a - c));
	for (; a + 32 <= end; a += 32) {
		_mm_stream_si64((long long *)a, 0);
		_mm_stream_si64((long long *)(a + 8), 0);
		_mm_stream_si64((long long *)(a + 16), 0);
		_mm_stream_si64((long long *)(a + 24), 0);
	}
	for (; a + 8 <= end; a += 8)
		_mm_stream_si64((long long *)a, 0);
	_mm_sfence();
	memset(a, 0, (size_t)(end - a));
}
#endif

struct zero_method {
	const char *name;
	zero_fn fn;
	int (*usable)(void);
};

static int always(void)
{
	return 1;
}

#if defined(__x86_64__)
static int has_avx512(void)
{
	/* (also checks that the OS saves the ZMM state: XCR0 through xgetbv) */
	return __builtin_cpu_supports("avx512f");
}

static int has_avx2(void)
{
	return __builtin_cpu_supports("avx2");
}
#endif

/* Best first: the automatic choice is the first usable one. */
static const struct zero_method methods[] = {
#if defined(__x86_64__)
	{ "avx512", zero_avx512, has_avx512 },
	{ "avx2", zero_avx2, has_avx2 },
	{ "movnti", zero_movnti, always },
#endif
	{ "memset", zero_memset, always },
};
#define NR_METHODS ARRAY_SIZE(methods)

static _Atomic(const struct zero_method *) current;
static pthread_once_t zero_once = PTHREAD_ONCE_INIT;

static const struct zero_method *find_method(const char *name)
{
	for (size_t i = 0; i < NR_METHODS; i++)
		if (!strcmp(methods[i].name, name))
			return &methods[i];
	return NULL;
}

static void zero_init(void)
{
	const char *env = getenv("GFA_ZERO");
	const struct zero_method *m = env && *env ? find_method(env) : NULL;

	if (!m || !m->usable()) {
		m = methods;
		while (!m->usable())
			m++; /* memset, the last, always is */
	}
	atomic_store(&current, m);
}

static const struct zero_method *method(void)
{
	pthread_once(&zero_once, zero_init);
	return atomic_load_explicit(&current, memory_order_relaxed);
}

void gfa_zero(void *p, size_t len)
{
	if (p && len)
		method()->fn(p, len);
}

const char *gfa_zero_method(void)
{
	return method()->name;
}

int gfa_zero_set_method(const char *name)
{
	const struct zero_method *m;

	if (!name)
		return GFA_EFAULT;
	method(); /* (the first choice must not overwrite this one later) */
	if (!*name) {
		m = methods;
		while (!m->usable())
			m++;
	} else {
		m = find_method(name);
		if (!m)
			return -EINVAL;
		if (!m->usable())
			return -ENOTSUP;
	}
	atomic_store(&current, m);
	return 0;
}

int gfa_zero_method_usable(const char *name)
{
	const struct zero_method *m = name ? find_method(name) : NULL;

	return m && m->usable();
}
