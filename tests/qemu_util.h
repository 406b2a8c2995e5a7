/* Shared by the suites that re-run themselves inside a QEMU guest (header-only). */
#ifndef GFA_TEST_QEMU_UTIL_H
#define GFA_TEST_QEMU_UTIL_H
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
#endif
