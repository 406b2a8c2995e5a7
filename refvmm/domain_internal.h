/* SPDX-License-Identifier: MIT */
/*
 * The libvirt domain import, private to its files (the API: include/gfa/refvmm.h):
 *
 *   domain.c          the entry points from an XML string or file: parse, then validate
 *   domain_numbers.c  sizes with their units, CPU and node bitmaps
 *   domain_xml.c      libxml2: reading a document, XPath look-ups, typed attributes
 *   domain_parse.c    the <domain> elements into struct gfa_domain_spec
 *   domain_check.c    the spec checked the way libvirt would
 *   domain_libvirt.c  the same spec from a running libvirt's domain
 *   domain_format.c   sizes and specs as text
 *   domain_pages.c    the page sizes cells ask for, against the host's
 */
#ifndef GFA_REFVMM_DOMAIN_INTERNAL_H
#define GFA_REFVMM_DOMAIN_INTERNAL_H
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/tree.h>
#include <libxml/xpath.h>

#include <gfa/refvmm.h>
#include "common/compiler.h"
#include "common/strbuf.h"

#define KIB              1024ull
/* libvirt keeps sizes as signed 64-bit byte counts and refuses larger ones. */
#define LIBVIRT_SIZE_MAX ((uint64_t)INT64_MAX)
/* The 52-bit physical address space: the most memory any x86-64 or arm64 host has. */
#define HOST_MEMORY_MAX  (4ull << 50)
#define UNIT_NAMES                                                               \
	"b, bytes, k, KiB, KB, M, MiB, MB, G, GiB, GB, T, TiB, TB, P, PiB, PB, " \
	"E, EiB, EB"

/*
 * Where messages go.  Each reads "<origin>: <where>: <what is wrong>; accepted: <what
 * would be>" (the header's form): fmt starts with where, the element or attribute.
 */
struct msgs {
	const char *origin; /* "domain XML file '/x'" etc. */
	char *err;
	size_t errlen;
};

/* Put "<origin>: <message>" into err, if the caller gave a buffer. */
static inline int __attribute__((format(printf, 3, 4)))
fail(const struct msgs *m, int rc, const char *fmt, ...)
{
	struct strbuf sb = { m->err, m->errlen, 0 };
	va_list ap;

	if (!m->err || !m->errlen)
		return rc;
	sb_printf(&sb, "%s: ", m->origin);
	va_start(ap, fmt);
	sb_vprintf(&sb, fmt, ap);
	va_end(ap);
	sb_finish(&sb);
	for (char *c = m->err; *c; c++) /* one line, whatever the XML held */
		if (*c == '\n' || *c == '\r' || *c == '\t')
			*c = ' ';
	return rc;
}

/* A short text as a value (a size, a range): one message may hold several. */
struct size_text {
	char s[48];
};

static inline struct size_text human(uint64_t bytes)
{
	struct size_text t = { "" };

	gfa_domain_format_size(bytes, t.s, sizeof(t.s));
	return t;
}

/* A document being parsed, and where its messages go. */
struct xml_in {
	xmlDocPtr doc;
	xmlXPathContextPtr xp;
	struct msgs m;
};

/* ---- domain.c ---- */
int domain_parse_doc(const char *xml, size_t len, struct gfa_domain_spec *s, const struct msgs *m);

/* ---- domain_check.c ---- */
/* room for the cells page i names (domain_page_where) */
#define PAGE_WHERE_MAX (GFA_DOMAIN_MAX_CELLS * 4 + 128)
void domain_page_where(const struct gfa_domain_spec *s, unsigned int i, char *buf, size_t len);
int domain_check_spec(struct gfa_domain_spec *s, const struct msgs *m);

/* ---- domain_format.c ---- */
bool domain_spec_counts_ok(const struct gfa_domain_spec *s);

/* ---- domain_numbers.c ---- */
int domain_parse_digits(const char *s, uint64_t *v, const char **end);
int domain_parse_u64(const char *s, uint64_t *v);
int domain_unit_scale(const char *unit, uint64_t *scale);
int domain_parse_bitmap(const char *s, uint64_t *bits, unsigned int nbits);
int domain_format_bitmap(const uint64_t *bits, unsigned int nbits, char *buf, size_t len);
unsigned int domain_popcount_bits(const uint64_t *bits, unsigned int nwords);

/* ---- domain_parse.c ---- */
struct size_text domain_cell_range(unsigned int n);
int domain_parse_parts(struct xml_in *in, struct gfa_domain_spec *s);

/* ---- domain_xml.c ---- */
xmlDocPtr domain_xml_read(const char *xml, size_t len, const struct msgs *m);
int domain_check_root(xmlDocPtr doc, const struct msgs *m);
xmlXPathObjectPtr domain_xml_find(struct xml_in *in, const char *expr);
int domain_xml_count(xmlXPathObjectPtr obj);
xmlNodePtr domain_xml_node(xmlXPathObjectPtr obj, int i);
xmlNodePtr domain_xml_first(struct xml_in *in, const char *expr);
xmlNodePtr domain_xml_child(xmlNodePtr n, const char *name);
char *domain_xml_prop(xmlNodePtr n, const char *name);
int domain_xml_size(struct xml_in *in, xmlNodePtr n, const char *attr, const char *where,
		    uint64_t *bytes);
int domain_xml_uint(struct xml_in *in, xmlNodePtr n, const char *attr, const char *where,
		    unsigned int lo, unsigned int hi, unsigned int *out);
#endif
