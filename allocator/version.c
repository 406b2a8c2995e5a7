// SPDX-License-Identifier: MIT
/* allocator/version.c - the library's version (gfa/gfa.h). */
#include <gfa/gfa.h>

unsigned int gfa_version(void)
{
	return GFA_VERSION;
}
