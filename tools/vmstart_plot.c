// SPDX-License-Identifier: MIT
/*
 * gfactl vmstart --plot: start latency per VM and the 2 MiB share over time, drawn by
 * gnuplot from a temporary data file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tools/vmstart.h"

/* The paths go into gnuplot strings (no shell sees them): no quotes, no newlines. */
bool vmstart_plot_usable(const char *plot)
{
	if (!*plot || strpbrk(plot, "'\"\n\\") || strlen(plot) + 8 >= PATH_MAX) {
		fprintf(stderr, "gfactl vmstart: --plot: unusable file name '%s'\n", plot);
		return false;
	}
	if (system("command -v gnuplot >/dev/null 2>&1")) {
		fprintf(stderr,
			"gfactl vmstart: --plot %s: gnuplot is not installed "
			"(apt-get install gnuplot-nox)\n",
			plot);
		return false;
	}
	return true;
}

int vmstart_plot(struct run *r)
{
	char dat[PATH_MAX];
	FILE *f;
	int ret, fd;

	/* checked before the run too; gnuplot may have gone since */
	if (!vmstart_plot_usable(r->o.plot))
		return -1;
	snprintf(dat, sizeof(dat), "%s.XXXXXX", r->o.plot);
	fd = mkstemp(dat);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		fprintf(stderr, "gfactl vmstart: --plot %s: %s\n", dat, strerror(errno));
		if (fd >= 0) {
			close(fd);
			unlink(dat);
		}
		return -1;
	}
	for (size_t i = 0; i < r->gfa.n || i < r->ts_n; i++)
		fprintf(f, "%zu %.3f %.1f %.1f\n", i, i < r->gfa.n ? r->gfa.v[i] : 0.0 / 0.0,
			i < r->ts_n ? r->ts_t[i] / 1000 : 0.0 / 0.0,
			i < r->ts_n ? r->ts_huge[i] : 0.0 / 0.0);
	fclose(f);
	f = popen("gnuplot", "w");
	ret = -1;
	if (f) {
		fprintf(f,
			"set terminal png size 1000,420; set output '%s'; "
			"set multiplot layout 1,2\n"
			"set title 'VM start latency (gfa)'; set xlabel 'start #'; "
			"set ylabel 'ms'\n"
			"plot '%s' using 1:2 with linespoints title 'start'\n"
			"set title '2 MiB share of guest RAM'; set xlabel 's'; set ylabel '%%'\n"
			"set yrange [0:105]\n"
			"plot '%s' using 3:4 with linespoints title 'huge share'\n"
			"unset multiplot\n",
			r->o.plot, dat, dat);
		ret = pclose(f);
	}
	unlink(dat);
	if (ret) {
		fprintf(stderr, "gfactl vmstart: --plot %s: gnuplot failed\n", r->o.plot);
		return -1;
	}
	printf("plot written to %s\n", r->o.plot);
	return 0;
}
