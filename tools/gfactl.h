/* gfactl: the operator's command line.  Shared declarations of its commands. */
#ifndef GFACTL_H
#define GFACTL_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <gfa/gfa.h>
#include <gfa/refvmm.h>
#include "common/ktime.h"

#define MiB (1ULL << 20)

/* Each command: argc/argv start at the command name; returns the exit code. */
int cmd_vmstart(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_linux(int argc, char **argv);
int cmd_vmsnap(int argc, char **argv);
int cmd_gfad(int argc, char **argv); /* the host pool service (tools/gfad.c) */

/* Helpers shared by the commands (gfactl.c). */
/* Milliseconds on the monotonic clock. */
static inline double now_ms(void)
{
	return (double)ktime_get_ns() / 1e6;
}
/* Parse a non-negative integer flag value; prints "gfactl: --flag: ..." on error. */
bool parse_u64(const char *flag, const char *val, uint64_t min, uint64_t max, uint64_t *out);
/* A size like "256", "256M", "1G", "512MiB"; a bare number is MiB. */
bool parse_mib(const char *flag, const char *val, uint64_t *bytes);
int cmp_double(const void *a, const void *b);
/* Percentile p (0..100) of n sorted values. */
double percentile(const double *sorted, size_t n, double p);

/* ---- snapshots (snapshot.c, json-c) ---- */
struct json_object;
/* How snapshots are written and printed (json-c's json_object_to_json_string_ext). */
#define SNAPSHOT_JSON_FLAGS (JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE)
/* Where vmstart writes its snapshots and gfactl stat reads them. */
const char *default_stat_file(void);
/*
 * Write pool statistics as JSON to path, whole or not at all (temp file + rename);
 * extra_json, if not NULL, is a JSON object whose members are added.  0, -EINVAL (extra
 * is not an object), -ENOMEM, or the -errno of the file calls.
 */
int write_stat_json(const char *path, struct gfa_pool *pool, const char *phase,
		    const char *extra_json);
/*
 * The snapshot at path, checked to be one whole object with phase, buddyinfo,
 * pagetypeinfo and vmstat (the caller puts it); NULL with a one-line reason in why.
 */
struct json_object *read_stat_json(const char *path, char *why, size_t len);
#endif
