/* gfactl: the operator's command line.  Shared declarations of its commands. */
#ifndef GFACTL_H
#define GFACTL_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <gfa/refvmm.h>

#define MiB (1ULL << 20)

/* Each command: argc/argv start at the command name; returns the exit code. */
int cmd_vmstart(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_linux(int argc, char **argv);

/* Helpers shared by the commands (gfactl.c). */
double now_ms(void);
/* Parse a non-negative integer flag value; prints "gfactl: --flag: ..." on error. */
bool parse_u64(const char *flag, const char *val, uint64_t min, uint64_t max, uint64_t *out);
/* A size like "256", "256M", "1G", "512MiB"; a bare number is MiB. */
bool parse_mib(const char *flag, const char *val, uint64_t *bytes);
int cmp_double(const void *a, const void *b);
/* Percentile p (0..100) of n sorted values. */
double percentile(const double *sorted, size_t n, double p);

/* Where vmstart writes its snapshots and gfactl stat reads them. */
const char *default_stat_file(void);
/* Write pool statistics as JSON to path (atomically: temp file + rename). */
int write_stat_json(const char *path, struct gfa_pool *pool, const char *phase,
		    const char *extra_json);
#endif
