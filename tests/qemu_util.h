/* Shared by the suites that re-run themselves inside a QEMU guest (header-only). */
#ifndef GFA_TEST_QEMU_UTIL_H
#define GFA_TEST_QEMU_UTIL_H
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "refvmm/qemu_harness.h"

/*
 * A QEMU suite that cannot run: skip it with @why, printed on a line of its own
 * ("SUITE: skipped: WHY").  Under CI=true the skip is a failure unless the reason is
 * one CI cannot fix: a machine with neither /dev/kvm nor QEMU.  Everything else a
 * skip names (packages tools/deps.sh installs, a folder the guest cannot see) is
 * CI's to fix, and a green run that never booted the guest would hide it.
 */
#define tu_qemu_skip(suite, ...)                                                               \
	do {                                                                                   \
		char tu_why_[2048]; /* (a list of tests fits) */                               \
		const char *tu_ci_ = getenv("CI");                                             \
                                                                                               \
		snprintf(tu_why_, sizeof(tu_why_), __VA_ARGS__);                               \
		if (access("/dev/kvm", F_OK) != 0 && !tu_have_qemu()) {                        \
			fprintf(stderr,                                                        \
				"%s: skipped: %s\n%s: the reason CI cannot fix: no "           \
				"/dev/kvm and no QEMU on this machine\n",                      \
				suite, tu_why_, suite);                                        \
			cr_skip_test("%s", tu_why_);                                           \
		}                                                                              \
		fprintf(stderr, "%s: skipped: %s\n", suite, tu_why_);                          \
		if (tu_ci_ && !strcmp(tu_ci_, "true"))                                         \
			cr_assert_fail("%s did not run under CI=true: %s (a skip CI can fix: " \
				       "tools/deps.sh test installs what the harness needs)",  \
				       suite, tu_why_);                                        \
		cr_skip_test("%s", tu_why_);                                                   \
	} while (0)
#endif
