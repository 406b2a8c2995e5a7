// SPDX-License-Identifier: MIT
/*
 * gfactl stat: the statistics a vmstart run writes as it goes (buddyinfo,
 * pagetypeinfo, vmstat counters), as text or --json.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <json.h>
#include "tools/gfactl.h"

static void stat_help(void)
{
	printf("usage: gfactl stat [--file FILE] [--json] | --socket PATH\n\n"
	       "Show the statistics of the running (or last) 'gfactl vmstart'.\n"
	       "  --file FILE   snapshot to read (default %s)\n"
	       "  --socket PATH a host pool service's pool instead (gfad; text only)\n"
	       "  --json        print the snapshot as JSON\n",
	       default_stat_file());
}

static const char *str_of(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

/* "# metadata" and its line, when the snapshot has them (older writers did not). */
static void print_metadata(struct json_object *o)
{
	struct json_object *m, *v;
	uint64_t bytes = 0, frames = 0;

	if (!json_object_object_get_ex(o, "metadata", &m))
		return;
	if (json_object_object_get_ex(m, "bytes", &v))
		bytes = json_object_get_uint64(v);
	if (json_object_object_get_ex(m, "frames", &v))
		frames = json_object_get_uint64(v);
	printf("\n# metadata\nbytes %" PRIu64 "\nframes %" PRIu64 "\nbytes_per_frame %.3f\n", bytes,
	       frames, frames ? (double)bytes / (double)frames : 0.0);
}

static void print_text(struct json_object *o)
{
	struct json_object *cmd, *vmstat;

	printf("phase: %s\n", str_of(o, "phase"));
	if (json_object_object_get_ex(o, "command", &cmd) &&
	    json_object_is_type(cmd, json_type_array)) {
		printf("command:");
		for (size_t i = 0; i < json_object_array_length(cmd); i++)
			printf(" %s", json_object_get_string(json_object_array_get_idx(cmd, i)));
		printf("\n");
	}
	printf("\n# buddyinfo\n%s", str_of(o, "buddyinfo"));
	printf("\n# pagetypeinfo\n%s", str_of(o, "pagetypeinfo"));
	printf("\n# vmstat\n");
	json_object_object_get_ex(o, "vmstat", &vmstat);
	for (struct json_object_iterator it = json_object_iter_begin(vmstat),
					 end = json_object_iter_end(vmstat);
	     !json_object_iter_equal(&it, &end); json_object_iter_next(&it))
		printf("%s %" PRIu64 "\n", json_object_iter_peek_name(&it),
		       json_object_get_uint64(json_object_iter_peek_value(&it)));
	print_metadata(o);
}

/* gfactl stat --socket: the service's pool, as its text says it, and its check. */
static int hostpool_stat_print(const char *sock)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_hostpool_stat st;
	char *text;
	int n;

	if (!hp) {
		fprintf(stderr, "gfactl stat: --socket %s: %s\n", sock, gfa_strerror(errno));
		return 1;
	}
	text = malloc(1 << 20);
	n = text ? gfa_hostpool_stat(hp, &st, text, 1 << 20) : GFA_ENOMEM;
	if (n >= 0)
		fputs(text, stdout);
	else
		fprintf(stderr, "gfactl stat: --socket %s: %s\n", sock, gfa_strerror(n));
	free(text);
	gfa_hostpool_detach(hp);
	return n < 0 || st.check ? 1 : 0;
}

int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "file", required_argument, NULL, 'f' },
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *file = default_stat_file(), *sock = NULL;
	struct json_object *o;
	bool json = false;
	char why[256];
	int c;

	opterr = 0; /* our messages name the command */
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			stat_help();
			return 0;
		} else if (c == 'j') {
			json = true;
		} else if (c == 'f') {
			file = optarg;
		} else if (c == 's') {
			sock = optarg;
		} else {
			fprintf(stderr,
				"gfactl stat: '%s': unknown option or missing value (see "
				"--help)\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "gfactl stat: unexpected argument '%s' (see --help)\n",
			argv[optind]);
		return 2;
	}
	if (sock)
		return hostpool_stat_print(sock);
	o = read_stat_json(file, why, sizeof(why));
	if (!o) {
		fprintf(stderr, "gfactl stat: --file %s: %s%s\n", file, why,
			errno == ENOENT ? " (is 'gfactl vmstart' running?)" : "");
		return 1;
	}
	if (json)
		printf("%s\n", json_object_to_json_string_ext(o, SNAPSHOT_JSON_FLAGS));
	else
		print_text(o);
	json_object_put(o);
	return 0;
}
