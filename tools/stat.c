// SPDX-License-Identifier: MIT
/*
 * gfactl stat: the statistics a vmstart run writes as it goes (buddyinfo,
 * pagetypeinfo, vmstat counters), as text or --json.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tools/gfactl.h"

static void stat_help(void)
{
	printf("usage: gfactl stat [--file FILE] [--json]\n\n"
	       "Show the statistics of the running (or last) 'gfactl vmstart'.\n"
	       "  --file FILE   snapshot to read (default %s)\n"
	       "  --json        print the snapshot as JSON\n", default_stat_file());
}

/* Print a JSON string value's text with \n and \" unescaped. */
static void print_unescaped(const char *p)
{
	for (; *p && *p != '"'; p++) {
		if (*p == '\\' && p[1]) {
			p++;
			putchar(*p == 'n' ? '\n' : *p);
		} else {
			putchar(*p);
		}
	}
}

static int print_field(const char *json, const char *name)
{
	char key[64];
	const char *p;

	snprintf(key, sizeof(key), "\"%s\": \"", name);
	p = strstr(json, key);
	if (!p)
		return -1;
	print_unescaped(p + strlen(key));
	return 0;
}

static void print_vmstat(const char *json)
{
	const char *p = strstr(json, "\"vmstat\": {");

	if (!p)
		return;
	for (p += 11; *p && *p != '}'; p++) {
		char name[64];
		unsigned long v;
		int n = 0;

		if (sscanf(p, " \"%63[^\"]\": %lu%n", name, &v, &n) == 2) {
			printf("%s %lu\n", name, v);
			p += n - 1;
		}
	}
}

int cmd_stat(int argc, char **argv)
{
	const char *file = default_stat_file();
	bool json = false;
	char *buf;
	size_t n;
	FILE *f;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			stat_help();
			return 0;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--file")) {
			if (i + 1 == argc) {
				fprintf(stderr, "gfactl stat: --file needs a value\n");
				return 2;
			}
			file = argv[++i];
		} else {
			fprintf(stderr, "gfactl stat: unknown option '%s' (see --help)\n", argv[i]);
			return 2;
		}
	}
	f = fopen(file, "r");
	if (!f) {
		fprintf(stderr, "gfactl stat: --file %s: %s (is 'gfactl vmstart' running?)\n", file,
			strerror(errno));
		return 1;
	}
	buf = calloc(1, 1 << 20);
	n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	fclose(f);
	/* write_stat_json() writes the vmstat object and the closing braces last: a cut
	 * file (or one larger than the buffer) is refused, not printed as JSON */
	if (!n || n == (1 << 20) - 1 || !strstr(buf, "\"buddyinfo\"") ||
	    !strstr(buf, "\"vmstat\": {") || n < 4 || strcmp(buf + n - 4, "}\n}\n")) {
		fprintf(stderr, "gfactl stat: --file %s: not a whole gfactl snapshot (cut short?)\n",
			file);
		free(buf);
		return 1;
	}
	if (json) {
		fwrite(buf, 1, n, stdout);
	} else {
		printf("phase: ");
		print_field(buf, "phase");
		printf("\n\n# buddyinfo\n");
		print_field(buf, "buddyinfo");
		printf("\n# pagetypeinfo\n");
		print_field(buf, "pagetypeinfo");
		printf("\n# vmstat\n");
		print_vmstat(buf);
	}
	free(buf);
	return 0;
}
