// SPDX-License-Identifier: MIT
/*
 * The snapshots 'gfactl vmstart' writes as it goes and 'gfactl stat' reads: one JSON
 * object, written and read with json-c, whole or not at all.
 *
 *   { "pid": 123, "command": ["gfactl", "vmstart", ...], "phase": "churn round 2",
 *     "buddyinfo": "...", "pagetypeinfo": "...", "vmstat": { "pgalloc": 1, ... },
 *     "metadata": { "bytes": 1, "frames": 1, "bytes_per_frame": 0.29 } }
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <json.h>
#include "tools/gfactl.h"

/* A snapshot holds a few /proc-style texts; anything larger is not one of ours. */
#define SNAPSHOT_MAX (16u << 20)

const char *default_stat_file(void)
{
	static char path[256];
	const char *dir = getenv("XDG_RUNTIME_DIR");

	snprintf(path, sizeof(path), "%s/gfactl-vmstart.json", dir && *dir ? dir : "/tmp");
	return path;
}

/*
 * Up to max bytes of a file (malloc'd, NUL-terminated) and their count; NULL with
 * errno set (EFBIG: larger than max).
 */
static char *slurp(const char *path, size_t max, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap), *nb;
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0;
	ssize_t r;

	if (fd < 0 || !buf) {
		err = fd < 0 ? errno : ENOMEM;
		goto fail;
	}
	while ((r = read(fd, buf + n, cap - n - 1)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			err = errno;
			goto fail;
		}
		n += (size_t)r;
		if (n > max) {
			err = EFBIG;
			goto fail;
		}
		if (n + 1 == cap) {
			nb = realloc(buf, cap * 2);
			if (!nb) {
				err = ENOMEM;
				goto fail;
			}
			buf = nb;
			cap *= 2;
		}
	}
	close(fd);
	buf[n] = '\0';
	*len = n;
	return buf;
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	errno = err;
	return NULL;
}

/* This process's argv, from /proc/self/cmdline (NUL-separated), as a JSON array. */
static struct json_object *command_array(void)
{
	struct json_object *a = json_object_new_array();
	size_t len = 0;
	char *cmd = slurp("/proc/self/cmdline", 1 << 20, &len);

	for (size_t off = 0; a && cmd && off < len; off += strlen(cmd + off) + 1)
		json_object_array_add(a, json_object_new_string(cmd + off));
	free(cmd);
	return a;
}

/*
 * The umask, read without changing it (umask(2) would, for a moment, for every thread
 * of the process: vmstart's VMs run while it writes snapshots).  022 if unknown.
 */
static mode_t process_umask(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[128];
	unsigned int um = 022;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Umask: %o", &um) == 1)
			break;
	if (f)
		fclose(f);
	return (mode_t)um;
}

/* The whole text of buddyinfo or pagetypeinfo as a JSON string, or NULL. */
static struct json_object *pool_text(struct gfa_pool *pool,
				     int (*fn)(struct gfa_pool *, char *, size_t))
{
	struct json_object *s = NULL;
	int need = fn(pool, NULL, 0);
	char *text;

	/* (a zone may change between the two calls: then the text is cut, never overrun) */
	if (need < 0 || !(text = malloc((size_t)need + 256)))
		return NULL;
	if (fn(pool, text, (size_t)need + 256) >= 0)
		s = json_object_new_string(text);
	free(text);
	return s;
}

/* Add key = val to obj (which takes val); false if val is NULL or the add failed. */
static bool add(struct json_object *obj, const char *key, struct json_object *val)
{
	if (!val || json_object_object_add(obj, key, val)) {
		json_object_put(val);
		return false;
	}
	return true;
}

static struct json_object *vmstat_object(struct gfa_pool *pool)
{
	struct json_object *o = json_object_new_object();
	struct gfa_vmstat vs;
	bool ok = o != NULL;

	gfa_pool_vmstat(pool, &vs);
#define GFA_JSON_FIELD(name) ok = ok && add(o, #name, json_object_new_uint64(vs.name));
	GFA_VMSTAT_ITEMS(GFA_JSON_FIELD)
#undef GFA_JSON_FIELD
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/* The pool's metadata over its zones (gfa_zone_stat's metadata_bytes): bytes, frames and
 * bytes per frame. */
static struct json_object *metadata_object(struct gfa_pool *pool)
{
	struct json_object *o = json_object_new_object();
	uint64_t bytes = 0, frames = 0;
	struct gfa_zone_stat st;
	bool ok = o != NULL;

	for (unsigned int z = 0; ok && z < gfa_pool_nr_zones(pool); z++) {
		ok = !gfa_zone_stat(pool, z, &st);
		bytes += st.metadata_bytes;
		frames += st.nr_frames;
	}
	ok = ok && add(o, "bytes", json_object_new_uint64(bytes)) &&
	     add(o, "frames", json_object_new_uint64(frames)) &&
	     add(o, "bytes_per_frame",
		 json_object_new_double(frames ? (double)bytes / (double)frames : 0));
	if (!ok) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/* The members of the JSON object text extra, added to obj: 0, -EINVAL or -ENOMEM. */
static int add_extra(struct json_object *obj, const char *extra)
{
	enum json_tokener_error jerr;
	struct json_object *x = json_tokener_parse_verbose(extra, &jerr);
	int err = 0;

	if (!x || !json_object_is_type(x, json_type_object)) {
		json_object_put(x);
		return -EINVAL;
	}
	for (struct json_object_iterator it = json_object_iter_begin(x),
					 end = json_object_iter_end(x);
	     !err && !json_object_iter_equal(&it, &end); json_object_iter_next(&it))
		if (!add(obj, json_object_iter_peek_name(&it),
			 json_object_get(json_object_iter_peek_value(&it))))
			err = -ENOMEM;
	json_object_put(x);
	return err;
}

/* The snapshot object; NULL and *err set on failure. */
static struct json_object *snapshot_new(struct gfa_pool *pool, const char *phase,
					const char *extra_json, int *err)
{
	struct json_object *o = json_object_new_object();
	bool ok = o && add(o, "pid", json_object_new_int((int)getpid())) &&
		  add(o, "command", command_array()) &&
		  add(o, "phase", json_object_new_string(phase)) &&
		  add(o, "buddyinfo", pool_text(pool, gfa_pool_buddyinfo)) &&
		  add(o, "pagetypeinfo", pool_text(pool, gfa_pool_pagetypeinfo)) &&
		  add(o, "vmstat", vmstat_object(pool)) &&
		  add(o, "metadata", metadata_object(pool));

	*err = ok ? 0 : -ENOMEM;
	if (ok && extra_json)
		*err = add_extra(o, extra_json);
	if (*err) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/* Write f's JSON body; 0 or -errno. */
static int stat_json_body(FILE *f, struct gfa_pool *pool, const char *phase, const char *extra_json)
{
	int err;
	struct json_object *o = snapshot_new(pool, phase, extra_json, &err);

	if (!o)
		return err;
	fprintf(f, "%s\n", json_object_to_json_string_ext(o, SNAPSHOT_JSON_FLAGS));
	json_object_put(o);
	return ferror(f) ? -EIO : 0;
}

/*
 * Write the stat file whole or not at all: a fresh temporary file of our own next to
 * it (mkstemp: never an existing file, a symlink planted in /tmp, or another run's
 * temporary), renamed over path when complete.
 */
int write_stat_json(const char *path, struct gfa_pool *pool, const char *phase,
		    const char *extra_json)
{
	char tmp[PATH_MAX];
	FILE *f;
	int fd, err;

	/* a cut name would write (and rename away) some other file */
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkstemp(tmp);
	if (fd < 0)
		return -errno;
	fchmod(fd, 0666 & ~process_umask()); /* what a plain fopen() would leave */
	f = fdopen(fd, "w");
	if (!f) {
		err = -errno;
		close(fd);
		unlink(tmp);
		return err;
	}
	err = stat_json_body(f, pool, phase, extra_json);
	if (fclose(f) && !err)
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

/* Whether member key of o exists and has type t. */
static bool has(struct json_object *o, const char *key, enum json_type t)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, t);
}

/* Only blanks after the parsed object. */
static bool only_blanks(const char *p)
{
	return !p[strspn(p, " \t\r\n")];
}

struct json_object *read_stat_json(const char *path, char *why, size_t len)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o = NULL;
	size_t n = 0;
	char *buf = slurp(path, SNAPSHOT_MAX, &n);

	if (!buf || !tok) {
		snprintf(why, len, "%s",
			 !buf && errno == EFBIG ? "larger than a snapshot can be" :
						  strerror(buf ? ENOMEM : errno));
		goto out;
	}
	o = json_tokener_parse_ex(tok, buf, (int)n);
	if (!o || json_tokener_get_error(tok) != json_tokener_success ||
	    !only_blanks(buf + json_tokener_get_parse_end(tok))) {
		snprintf(why, len, "not a whole gfactl snapshot (cut short?): %s",
			 o ? "text after the object" :
			     json_tokener_error_desc(json_tokener_get_error(tok)));
	} else if (!json_object_is_type(o, json_type_object) ||
		   !has(o, "phase", json_type_string) || !has(o, "buddyinfo", json_type_string) ||
		   !has(o, "pagetypeinfo", json_type_string) ||
		   !has(o, "vmstat", json_type_object)) {
		snprintf(why, len,
			 "not a gfactl snapshot (no phase, buddyinfo, pagetypeinfo "
			 "and vmstat)");
	} else {
		goto out;
	}
	json_object_put(o);
	o = NULL;
	errno = EBADMSG;
out:
	if (tok)
		json_tokener_free(tok);
	free(buf);
	return o;
}
