// SPDX-License-Identifier: MIT
/*
 * refvmm/domain.c - libvirt domain import (see include/gfa/refvmm.h).
 *
 * One parser (libxml2 + XPath) turns a <domain> document into a
 * struct gfa_domain_spec; one validator checks it the way libvirt would.
 * The libvirt path overrides the fields the API exposes with the API's
 * values before validating, so both paths produce the same struct.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xpath.h>

#include <gfa/refvmm.h>
#include "allocator/strbuf.h"

#define KIB 1024ull
/* libvirt keeps sizes as signed 64-bit byte counts and refuses larger ones. */
#define LIBVIRT_SIZE_MAX ((uint64_t)INT64_MAX)
/* The 52-bit physical address space: the most memory any x86-64 or arm64 host has. */
#define HOST_MEMORY_MAX (4ull << 50)
#define UNIT_NAMES "b, bytes, k, KiB, KB, M, MiB, MB, G, GiB, GB, T, TiB, TB, P, PiB, PB, " \
		   "E, EiB, EB"

/*
 * Where messages go.  Each reads "<origin>: <where>: <what is wrong>; accepted: <what
 * would be>" (the header's form): fmt starts with where, the element or attribute.
 */
struct msgs {
	const char *origin;	/* "domain XML file '/x'" etc. */
	char *err;
	size_t errlen;
};

/* Put "<origin>: <message>" into err, if the caller gave a buffer. */
static int __attribute__((format(printf, 3, 4)))
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
	for (char *c = m->err; *c; c++)	/* one line, whatever the XML held */
		if (*c == '\n' || *c == '\r' || *c == '\t')
			*c = ' ';
	return rc;
}

/* A short text as a value (a size, a range): one message may hold several. */
struct size_text {
	char s[48];
};

static struct size_text human(uint64_t bytes)
{
	struct size_text t = { "" };

	gfa_domain_format_size(bytes, t.s, sizeof(t.s));
	return t;
}

/* ---------------------------------------------------------------- numbers */

static const char *skip_blank(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	return s;
}

/* Decimal digits only; *end points after them.  -EINVAL no digit, -ERANGE. */
static int parse_digits(const char *s, uint64_t *v, const char **end)
{
	uint64_t x = 0;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned int d = *s - '0';

		if (x > (UINT64_MAX - d) / 10)
			return -ERANGE;
		x = x * 10 + d;
	}
	*v = x;
	*end = s;
	return 0;
}

/* A whole string holding one unsigned decimal, blanks allowed around it. */
static int parse_u64(const char *s, uint64_t *v)
{
	const char *end;
	uint64_t x;
	int rc;

	rc = parse_digits(skip_blank(s), &x, &end);
	if (rc)
		return rc;
	if (*skip_blank(end))
		return -EINVAL;
	*v = x;
	return 0;
}

/* libvirt's unit names (virScaleInteger), case-insensitive. */
static int unit_scale(const char *unit, uint64_t *scale)
{
	static const char prefixes[] = "kmgtpe";
	const char *p;
	uint64_t base;
	unsigned int i;

	if (!unit || !*unit) {
		*scale = KIB;
		return 0;
	}
	if (!strcasecmp(unit, "b") || !strcasecmp(unit, "bytes")) {
		*scale = 1;
		return 0;
	}
	p = strchr(prefixes, tolower((unsigned char)unit[0]));
	if (!p || !*p)
		return -EINVAL;
	if (unit[1] == '\0' || !strcasecmp(unit + 1, "ib"))
		base = 1024;
	else if (!strcasecmp(unit + 1, "b"))
		base = 1000;
	else
		return -EINVAL;
	*scale = 1;
	for (i = 0; i <= (unsigned int)(p - prefixes); i++)
		*scale *= base;	/* at most 1024^6 = 2^60: no overflow */
	return 0;
}

int gfa_domain_parse_size(const char *value, const char *unit, uint64_t *bytes)
{
	uint64_t v, scale;
	int rc;

	if (!value || !bytes)
		return -EFAULT;
	rc = unit_scale(unit, &scale);
	if (rc)
		return rc;
	rc = parse_u64(value, &v);
	if (rc)
		return rc;
	if (v > UINT64_MAX / scale)
		return -ERANGE;
	*bytes = v * scale;
	return 0;
}

/*
 * Parse a libvirt bitmap list ("0-3,^2,8", blanks allowed around items and
 * '-') into bits[], processing items left to right like virBitmapParse.
 * Bits >= nbits give -ERANGE, syntax errors -EINVAL.
 */
static int parse_bitmap(const char *s, uint64_t *bits, unsigned int nbits)
{
	const char *p = s;

	memset(bits, 0, (nbits + 63) / 64 * sizeof(*bits));
	for (;;) {
		uint64_t lo, hi, i;
		bool neg;
		int rc;

		p = skip_blank(p);
		neg = *p == '^';
		if (neg)
			p = skip_blank(p + 1);
		rc = parse_digits(p, &lo, &p);
		if (rc)
			return rc;
		p = skip_blank(p);
		hi = lo;
		if (*p == '-' && !neg) {
			rc = parse_digits(skip_blank(p + 1), &hi, &p);
			if (rc)
				return rc;
			if (hi < lo)
				return -EINVAL;
			p = skip_blank(p);
		}
		if (hi >= nbits)
			return -ERANGE;
		for (i = lo; i <= hi; i++) {
			if (neg)
				bits[i / 64] &= ~(1ull << (i % 64));
			else
				bits[i / 64] |= 1ull << (i % 64);
		}
		if (*p == '\0')
			return 0;
		if (*p != ',')
			return -EINVAL;
		p++;
	}
}

/* Bitmap as a libvirt-style list "0-3,8" (for messages and gfa_domain_format). */
static int format_bitmap(const uint64_t *bits, unsigned int nbits, char *buf,
			 size_t len)
{
	struct strbuf sb = { buf, len, 0 };
	unsigned int i = 0;

	buf[0] = '\0';
	while (i < nbits) {
		unsigned int j;

		if (!((bits[i / 64] >> (i % 64)) & 1)) {
			i++;
			continue;
		}
		for (j = i; j + 1 < nbits && ((bits[(j + 1) / 64] >> ((j + 1) % 64)) & 1); j++)
			;
		sb_printf(&sb, "%s%u", sb.pos ? "," : "", i);
		if (j > i)
			sb_printf(&sb, "-%u", j);
		i = j + 1;
	}
	sb_finish(&sb);
	return sb_overflowed(&sb) ? -ENOSPC : 0;
}

static unsigned int popcount_bits(const uint64_t *bits, unsigned int nwords)
{
	unsigned int i, n = 0;

	for (i = 0; i < nwords; i++)
		n += __builtin_popcountll(bits[i]);
	return n;
}

/* ------------------------------------------------------------- XML access */

struct xml_in {
	xmlDocPtr doc;
	xmlXPathContextPtr xp;
	struct msgs m;
};

/*
 * Nodes matching the absolute path @expr; caller frees the result.  The
 * expressions are fixed, so evaluation only fails on allocation failure,
 * which then reads as "no such element".
 */
static xmlXPathObjectPtr xml_find(struct xml_in *in, const char *expr)
{
	xmlXPathObjectPtr obj;

	obj = xmlXPathEvalExpression((const xmlChar *)expr, in->xp);
	if (obj && obj->type != XPATH_NODESET) {
		xmlXPathFreeObject(obj);
		return NULL;
	}
	return obj;
}

static int xml_count(xmlXPathObjectPtr obj)
{
	return obj && obj->nodesetval ? obj->nodesetval->nodeNr : 0;
}

static xmlNodePtr xml_node(xmlXPathObjectPtr obj, int i)
{
	return obj->nodesetval->nodeTab[i];
}

/* First node matching @expr, or NULL. */
static xmlNodePtr xml_first(struct xml_in *in, const char *expr)
{
	xmlXPathObjectPtr obj = xml_find(in, expr);
	xmlNodePtr n = xml_count(obj) ? xml_node(obj, 0) : NULL;

	xmlXPathFreeObject(obj);
	return n;
}

/* The first child element of @n called @name (libvirt's "./name"), or NULL. */
static xmlNodePtr xml_child(xmlNodePtr n, const char *name)
{
	for (n = n ? n->children : NULL; n; n = n->next)
		if (n->type == XML_ELEMENT_NODE && !strcmp((const char *)n->name, name))
			return n;
	return NULL;
}

static char *xml_prop(xmlNodePtr n, const char *name)
{
	return (char *)xmlGetProp(n, (const xmlChar *)name);
}

/* Why a size could not be read, in the one message form. */
static int size_error(const struct msgs *m, int rc, const char *where,
		      const char *value, const char *unit)
{
	if (!value)
		return fail(m, -EINVAL, "%s: missing; accepted: a size, such as 2 with "
			    "unit='GiB'", where);
	if (rc == -ERANGE)
		return fail(m, rc, "%s: larger than 8 EiB; accepted: sizes below 8 EiB "
			    "(libvirt's limit)", where);
	if (unit && unit_scale(unit, &(uint64_t){ 0 }))
		return fail(m, rc, "%s: unknown unit '%s'; accepted: " UNIT_NAMES, where, unit);
	return fail(m, rc, "%s: '%s' is not a whole number; accepted: decimal digits, "
		    "the unit in unit=", where, value);
}

/*
 * A libvirt memory size: @value (element text if @attr is NULL, else that
 * attribute) scaled by the "unit" attribute, rounded up to a whole KiB as
 * libvirt stores it.  @where names the item in messages.
 */
static int xml_size(struct xml_in *in, xmlNodePtr n, const char *attr,
		    const char *where, uint64_t *bytes)
{
	char *value = attr ? xml_prop(n, attr) : (char *)xmlNodeGetContent(n);
	char *unit = xml_prop(n, "unit");
	uint64_t b = 0;
	int rc = -EINVAL;

	if (value)
		rc = gfa_domain_parse_size(value, unit, &b);
	if (rc == 0 && b > LIBVIRT_SIZE_MAX)
		rc = -ERANGE;
	if (rc)
		size_error(&in->m, rc, where, value, unit);
	else
		*bytes = (b + KIB - 1) / KIB * KIB;
	xmlFree(value);
	xmlFree(unit);
	return rc;
}

/* A count in @lo..@hi from an attribute (@attr) or element text (@attr NULL). */
static int xml_uint(struct xml_in *in, xmlNodePtr n, const char *attr,
		    const char *where, unsigned int lo, unsigned int hi,
		    unsigned int *out)
{
	char *value = attr ? xml_prop(n, attr) : (char *)xmlNodeGetContent(n);
	uint64_t v = 0;
	int rc;

	rc = value ? parse_u64(value, &v) : -EINVAL;
	if (rc == -ERANGE || (!rc && v > hi))
		rc = fail(&in->m, -ERANGE, "%s: larger than %u; accepted: %u-%u", where, hi,
			  lo, hi);
	else if (rc)
		rc = fail(&in->m, -EINVAL, "%s: '%s' is not a whole number; accepted: %u-%u",
			  where, value ? value : "", lo, hi);
	else if (v < lo)
		rc = fail(&in->m, -EINVAL, "%s: %" PRIu64 " is below %u; accepted: %u-%u",
			  where, v, lo, lo, hi);
	else
		*out = v;
	xmlFree(value);
	return rc;
}

/* ---------------------------------------------------------------- parsing */

static int parse_name(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlNodePtr n = xml_first(in, "/domain/name");
	char *name = n ? (char *)xmlNodeGetContent(n) : NULL;
	int rc = 0;

	if (!name || !*name)
		rc = fail(&in->m, -EBADMSG, "<name>: missing; accepted: a <name> of 1-%d bytes",
			  GFA_DOMAIN_NAME_MAX - 1);
	else if (strlen(name) >= sizeof(s->name))
		rc = fail(&in->m, -ERANGE, "<name>: longer than %d bytes; accepted: 1-%d bytes",
			  GFA_DOMAIN_NAME_MAX - 1, GFA_DOMAIN_NAME_MAX - 1);
	else
		memcpy(s->name, name, strlen(name) + 1);   /* length checked above */
	xmlFree(name);
	return rc;
}

/* "memory device 2 <memory model='dimm'><target><node>": a device's element. */
static void device_where(xmlNodePtr dev, int nr, const char *child, char *buf,
			 size_t len)
{
	char *model = xml_prop(dev, "model");

	if (model)
		snprintf(buf, len, "memory device %d <memory model='%.32s'><target><%s>", nr,
			 model, child);
	else
		snprintf(buf, len, "memory device %d <memory><target><%s>", nr, child);
	xmlFree(model);
}

/* One <devices><memory>: its <target><size> counts into the devices' sum. */
static int parse_device(struct xml_in *in, xmlNodePtr dev, int nr,
			struct gfa_domain_spec *s)
{
	xmlNodePtr size = xml_child(xml_child(dev, "target"), "size");
	char where[128];
	uint64_t b = 0;
	int rc;

	if (!size)
		return 0;
	device_where(dev, nr, "size", where, sizeof(where));
	rc = xml_size(in, size, NULL, where, &b);
	if (rc)
		return rc;
	if (b > UINT64_MAX - s->device_memory_bytes)
		return fail(&in->m, -ERANGE, "%s: the memory devices add up to more than "
			    "16 EiB; accepted: a sum below 16 EiB", where);
	s->device_memory_bytes += b;
	return 0;
}

/* <memory>, <currentMemory>, <devices><memory> sizes.  Missing <memory> is 0. */
static int parse_memory(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlXPathObjectPtr devs;
	xmlNodePtr n;
	int i, rc = 0;

	n = xml_first(in, "/domain/memory");
	if (n && (rc = xml_size(in, n, NULL, "<memory>", &s->memory_bytes)))
		return rc;
	n = xml_first(in, "/domain/currentMemory");
	if (n && (rc = xml_size(in, n, NULL, "<currentMemory>",
				&s->current_memory_bytes)))
		return rc;

	devs = xml_find(in, "/domain/devices/memory");
	for (i = 0; !rc && i < xml_count(devs); i++)
		rc = parse_device(in, xml_node(devs, i), i + 1, s);
	xmlXPathFreeObject(devs);
	return rc;
}

/* <vcpu current='N'>M</vcpu>; libvirt's default is one vCPU. */
static int parse_vcpus(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlNodePtr n = xml_first(in, "/domain/vcpu");
	char *cur;
	int rc;

	s->vcpus = 1;
	if (!n)
		return 0;
	rc = xml_uint(in, n, NULL, "<vcpu>", 1, GFA_DOMAIN_MAX_VCPUS, &s->vcpus);
	if (rc)
		return rc;
	cur = xml_prop(n, "current");
	if (cur)
		rc = xml_uint(in, n, "current", "<vcpu current>", 1, GFA_DOMAIN_MAX_VCPUS,
			      &s->current_vcpus);
	xmlFree(cur);
	return rc;
}

static int parse_cell_cpus(struct xml_in *in, xmlNodePtr n, struct gfa_domain_cell *c)
{
	char *cpus = xml_prop(n, "cpus");
	int rc = 0;

	if (cpus)
		rc = parse_bitmap(cpus, c->cpus, GFA_DOMAIN_MAX_VCPUS);
	if (rc == -ERANGE)
		fail(&in->m, rc, "<cell id='%u' cpus='%s'>: names a vCPU above %d; accepted: "
		     "vCPUs 0-%d", c->id, cpus, GFA_DOMAIN_MAX_VCPUS - 1,
		     GFA_DOMAIN_MAX_VCPUS - 1);
	else if (rc)
		fail(&in->m, rc, "<cell id='%u' cpus='%s'>: not a list of vCPUs; accepted: "
		     "a list such as 0-3,^2,8", c->id, cpus);
	c->nr_cpus = popcount_bits(c->cpus, GFA_DOMAIN_MAX_VCPUS / 64);
	xmlFree(cpus);
	return rc;
}

static int parse_cell(struct xml_in *in, xmlNodePtr n, int index,
		      struct gfa_domain_spec *s)
{
	struct gfa_domain_cell *c;
	unsigned int id = index;
	char *idstr = xml_prop(n, "id");
	char where[64];
	int rc = 0;

	/* libvirt numbers cells without an id by position. */
	if (idstr)
		rc = xml_uint(in, n, "id", "<cell id>", 0, GFA_DOMAIN_MAX_CELLS - 1, &id);
	xmlFree(idstr);
	if (rc)
		return rc;
	c = &s->cells[id];
	if (c->memory_bytes)	/* every parsed cell has memory > 0 */
		return fail(&in->m, -EINVAL, "<cell id='%u'>: appears twice; accepted: each "
			    "id once", id);
	c->id = id;

	snprintf(where, sizeof(where), "<cell id='%u' memory>", id);
	rc = xml_size(in, n, "memory", where, &c->memory_bytes);
	if (rc)
		return rc;
	if (!c->memory_bytes)
		return fail(&in->m, -EINVAL, "%s: zero; accepted: a size above 0", where);
	return parse_cell_cpus(in, n, c);
}

static int parse_cells(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlXPathObjectPtr cells;
	int i, n, rc = 0;

	if (!xml_first(in, "/domain/cpu/numa[1]"))
		return 0;
	cells = xml_find(in, "/domain/cpu/numa[1]/cell");
	n = xml_count(cells);
	if (n == 0)
		rc = fail(&in->m, -EINVAL, "<numa>: no <cell>; accepted: one <cell> or more");
	else if (n > GFA_DOMAIN_MAX_CELLS)
		rc = fail(&in->m, -ERANGE, "<numa>: %d cells; accepted: %d at most", n,
			  GFA_DOMAIN_MAX_CELLS);
	for (i = 0; !rc && i < n; i++)
		rc = parse_cell(in, xml_node(cells, i), i, s);
	xmlXPathFreeObject(cells);
	if (rc)
		return rc;
	s->nr_cells = n;
	/* n distinct ids below GFA_DOMAIN_MAX_CELLS: contiguous iff all < n. */
	for (i = 0; i < n; i++)
		if (!s->cells[i].memory_bytes)
			return fail(&in->m, -EINVAL, "<numa>: no <cell id='%d'>; accepted: ids "
				    "0-%d, each once", i, n - 1);
	return 0;
}

static int parse_page(struct xml_in *in, xmlNodePtr n, int nr, struct gfa_domain_page *p)
{
	char where[64], *nodeset;
	int rc;

	snprintf(where, sizeof(where), "hugepage %d <page size>", nr);
	rc = xml_size(in, n, "size", where, &p->size_bytes);
	if (rc)
		return rc;
	nodeset = xml_prop(n, "nodeset");
	if (nodeset) {
		rc = parse_bitmap(nodeset, &p->nodeset, GFA_DOMAIN_MAX_CELLS);
		if (rc || !p->nodeset)
			fail(&in->m, -EINVAL, "hugepage %d <page nodeset='%s'>: %s; accepted: "
			     "a list of cell ids 0-%d such as 0-1,3", nr, nodeset,
			     rc ? "not a list of cell ids" : "names no cell",
			     GFA_DOMAIN_MAX_CELLS - 1);
		if (!rc && !p->nodeset)
			rc = -EINVAL;
	}
	xmlFree(nodeset);
	return rc ? -EINVAL : 0;
}

static int parse_source(struct xml_in *in, struct gfa_domain_spec *s)
{
	static const char *const sources[] = {
		[GFA_DOMAIN_SOURCE_ANONYMOUS] = "anonymous",
		[GFA_DOMAIN_SOURCE_FILE] = "file",
		[GFA_DOMAIN_SOURCE_MEMFD] = "memfd",
	};
	xmlNodePtr n = xml_first(in, "/domain/memoryBacking/source");
	char *v;
	int i, rc = 0;

	if (!n)
		return 0;
	v = xml_prop(n, "type");
	for (i = 1; v && i < (int)(sizeof(sources) / sizeof(sources[0])); i++)
		if (!strcmp(v, sources[i]))
			s->source = i;
	if (s->source == GFA_DOMAIN_SOURCE_DEFAULT)
		rc = fail(&in->m, -EINVAL, "<memoryBacking><source type='%s'>: unknown type; "
			  "accepted: anonymous, file, memfd", v ? v : "");
	xmlFree(v);
	return rc;
}

static int parse_access(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlNodePtr n = xml_first(in, "/domain/memoryBacking/access");
	char *v;
	int rc = 0;

	if (!n)
		return 0;
	v = xml_prop(n, "mode");
	if (v && !strcmp(v, "shared"))
		s->access = GFA_DOMAIN_ACCESS_SHARED;
	else if (v && !strcmp(v, "private"))
		s->access = GFA_DOMAIN_ACCESS_PRIVATE;
	else
		rc = fail(&in->m, -EINVAL, "<memoryBacking><access mode='%s'>: unknown mode; "
			  "accepted: shared, private", v ? v : "");
	xmlFree(v);
	return rc;
}

static int parse_backing(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlXPathObjectPtr pages;
	int i, rc;

	rc = parse_source(in, s);
	if (!rc)
		rc = parse_access(in, s);
	if (rc || !xml_first(in, "/domain/memoryBacking/hugepages"))
		return rc;
	s->hugepages = true;
	pages = xml_find(in, "/domain/memoryBacking/hugepages/page");
	if (xml_count(pages) > GFA_DOMAIN_MAX_PAGES)
		rc = fail(&in->m, -ERANGE, "<hugepages>: %d <page> sizes; accepted: %d at most",
			  xml_count(pages), GFA_DOMAIN_MAX_PAGES);
	for (i = 0; !rc && i < xml_count(pages); i++)
		rc = parse_page(in, xml_node(pages, i), i + 1, &s->pages[i]);
	if (!rc)
		s->nr_pages = xml_count(pages);
	xmlXPathFreeObject(pages);
	return rc;
}

/* Without NUMA cells <memory> is the size; libvirt refuses a domain without one. */
static int check_memory_given(struct xml_in *in, const struct gfa_domain_spec *s)
{
	if (s->nr_cells || s->memory_bytes)
		return 0;
	if (!xml_first(in, "/domain/memory"))
		return fail(&in->m, -EINVAL, "<memory>: missing, and no NUMA cells give the "
			    "size; accepted: a <memory> above 0, or <numa> cells");
	return fail(&in->m, -EINVAL, "<memory>: zero; accepted: a size above 0");
}

/* "cell 0" or "cells 0-3": the ids of @n cells, for messages. */
static struct size_text cell_range(unsigned int n)
{
	struct size_text t = { "" };

	if (n == 1)
		snprintf(t.s, sizeof(t.s), "cell 0");
	else
		snprintf(t.s, sizeof(t.s), "cells 0-%u", n - 1);
	return t;
}

/* A <target><node> as libvirt reads it: blanks, an optional '+', digits.  "" is none. */
static int parse_node_id(const char *text, unsigned int *id)
{
	const char *p = text, *end;
	uint64_t v;

	if (!p || !*p)
		return -ENODATA;
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '+')
		p++;
	if (parse_digits(p, &v, &end) || *end || v > UINT_MAX)
		return -EINVAL;
	*id = v;
	return 0;
}

/* Both libvirt drivers refuse a memory device on a NUMA cell the domain has not. */
static int check_device_node(struct xml_in *in, xmlNodePtr dev, int nr,
			     unsigned int ncells)
{
	xmlNodePtr node = xml_child(xml_child(dev, "target"), "node");
	char *text = node ? (char *)xmlNodeGetContent(node) : NULL;
	char where[128];
	unsigned int id = 0;
	int rc = parse_node_id(text, &id);

	device_where(dev, nr, "node", where, sizeof(where));
	if (rc == -ENODATA)
		rc = 0;
	else if (rc)
		rc = fail(&in->m, rc, "%s: '%s' is not a cell id; accepted: a whole number",
			  where, text);
	else if (!ncells)
		rc = fail(&in->m, -EINVAL, "%s: names NUMA cell %u, but the domain has no NUMA "
			  "cells; accepted: no <node>, or <numa> cells", where, id);
	else if (id >= ncells)
		rc = fail(&in->m, -EINVAL, "%s: names NUMA cell %u, which does not exist; "
			  "accepted: %s", where, id, cell_range(ncells).s);
	xmlFree(text);
	return rc;
}

/* What needs the NUMA cells parsed first. */
static int check_parsed(struct xml_in *in, const struct gfa_domain_spec *s)
{
	xmlXPathObjectPtr devs;
	int i, rc;

	rc = check_memory_given(in, s);
	if (rc)
		return rc;
	devs = xml_find(in, "/domain/devices/memory");
	for (i = 0; !rc && i < xml_count(devs); i++)
		rc = check_device_node(in, xml_node(devs, i), i + 1, s->nr_cells);
	xmlXPathFreeObject(devs);
	return rc;
}

/* ------------------------------------------------------------- validation */

/* The first vCPU of @c at or above @vcpus, or -1. */
static int cpu_beyond(const struct gfa_domain_cell *c, unsigned int vcpus)
{
	unsigned int w;

	for (w = vcpus / 64; w < GFA_DOMAIN_MAX_VCPUS / 64; w++) {
		uint64_t beyond = c->cpus[w];

		if (w == vcpus / 64)
			beyond &= ~((1ull << (vcpus % 64)) - 1);
		if (beyond)
			return w * 64 + __builtin_ctzll(beyond);
	}
	return -1;
}

/* The first vCPU cells @a and @b share, or -1. */
static int cpu_shared(const struct gfa_domain_cell *a, const struct gfa_domain_cell *b)
{
	unsigned int w;

	for (w = 0; w < GFA_DOMAIN_MAX_VCPUS / 64; w++)
		if (a->cpus[w] & b->cpus[w])
			return w * 64 + __builtin_ctzll(a->cpus[w] & b->cpus[w]);
	return -1;
}

static int check_cells(const struct gfa_domain_spec *s, const struct msgs *m)
{
	char list[GFA_DOMAIN_MAX_VCPUS * 6];
	unsigned int i, j;
	int cpu;

	for (i = 0; i < s->nr_cells; i++) {
		const struct gfa_domain_cell *c = &s->cells[i];

		format_bitmap(c->cpus, GFA_DOMAIN_MAX_VCPUS, list, sizeof(list));
		for (j = 0; j < i; j++) {
			cpu = cpu_shared(c, &s->cells[j]);
			if (cpu >= 0)
				return fail(m, -EINVAL, "<cell id='%u' cpus='%s'>: shares vCPU %d "
					    "with cell %u; accepted: each vCPU in one cell", i,
					    list, cpu, j);
		}
		cpu = cpu_beyond(c, s->vcpus);
		if (cpu >= 0)
			return fail(m, -EINVAL, "<cell id='%u' cpus='%s'>: names vCPU %d, but "
				    "<vcpu> is %u; accepted: vCPUs 0-%u", i, list, cpu,
				    s->vcpus, s->vcpus - 1);
	}
	return 0;
}

/*
 * libvirt's QEMU driver boots the vCPUs that no cell names in cell 0 (it fills cell 0
 * up to all vCPUs the other cells do not name): the same here, and unnamed_cpus keeps
 * which they were for the summary.
 */
static void fill_cell0(struct gfa_domain_spec *s)
{
	struct gfa_domain_cell *c0 = &s->cells[0];
	unsigned int i, w;

	if (!s->nr_cells)
		return;
	for (w = 0; w < GFA_DOMAIN_MAX_VCPUS / 64; w++) {
		uint64_t all = w < s->vcpus / 64 ? ~0ull :
			       w == s->vcpus / 64 ? (1ull << (s->vcpus % 64)) - 1 : 0;

		for (i = 0; i < s->nr_cells; i++)
			all &= ~s->cells[i].cpus[w];
		s->unnamed_cpus[w] = all;
		c0->cpus[w] |= all;
	}
	c0->nr_cpus = popcount_bits(c0->cpus, GFA_DOMAIN_MAX_VCPUS / 64);
}

/* Without NUMA cells libvirt drops a nodeset of cell 0 alone: that cell is all cells. */
static void drop_nodesets(struct gfa_domain_spec *s)
{
	unsigned int i;

	for (i = 0; !s->nr_cells && i < s->nr_pages; i++) {
		if (s->pages[i].nodeset != 1)
			continue;
		s->pages[i].nodeset = 0;
		s->pages[i].nodeset_dropped = true;
	}
}

/* "hugepage 2 (2 MiB, nodeset='1')": page @i as messages name it. */
#define PAGE_WHERE_MAX (GFA_DOMAIN_MAX_CELLS * 4 + 128)

static void page_where(const struct gfa_domain_spec *s, unsigned int i, char *buf,
		       size_t len)
{
	const struct gfa_domain_page *p = &s->pages[i];
	char list[GFA_DOMAIN_MAX_CELLS * 4];

	format_bitmap(&p->nodeset, GFA_DOMAIN_MAX_CELLS, list, sizeof(list));
	if (p->nodeset)
		snprintf(buf, len, "hugepage %u (%s, nodeset='%s')", i + 1,
			 human(p->size_bytes).s, list);
	else
		snprintf(buf, len, "hugepage %u (%s, %s)", i + 1, human(p->size_bytes).s,
			 p->nodeset_dropped ? "nodeset='0' dropped: no NUMA cells" :
			 "no nodeset");
}

/* libvirt's rules for two pages: nodesets share no cell, one page has none at most. */
static int check_page_pair(const struct gfa_domain_spec *s, unsigned int i,
			   unsigned int j, const struct msgs *m)
{
	const struct gfa_domain_page *p = &s->pages[i], *q = &s->pages[j];
	char here[PAGE_WHERE_MAX], there[PAGE_WHERE_MAX];

	if (!(p->nodeset & q->nodeset) && (p->nodeset || q->nodeset))
		return 0;
	page_where(s, i, here, sizeof(here));
	page_where(s, j, there, sizeof(there));
	if (p->nodeset)
		return fail(m, -EINVAL, "%s: shares cell %d with %s; accepted: nodesets that "
			    "share no cell", here, __builtin_ctzll(p->nodeset & q->nodeset),
			    there);
	return fail(m, -EINVAL, "%s: a second page without nodeset besides %s, and both "
		    "would back every cell; accepted: one <page> without nodeset at most, as "
		    "libvirt requires", here, there);
}

static int check_page_cells(const struct gfa_domain_spec *s, unsigned int i,
			    const struct msgs *m)
{
	uint64_t cells = s->nr_cells ? ~0ull >> (64 - s->nr_cells) : 0;
	uint64_t beyond = s->pages[i].nodeset & ~cells;
	char here[PAGE_WHERE_MAX];

	if (!beyond)
		return 0;
	page_where(s, i, here, sizeof(here));
	if (!s->nr_cells)
		return fail(m, -EINVAL, "%s: names NUMA cell %d, but the domain has no NUMA "
			    "cells; accepted: no nodeset, or nodeset='0'", here,
			    __builtin_ctzll(beyond));
	return fail(m, -EINVAL, "%s: names NUMA cell %d, which does not exist; accepted: "
		    "%s", here, __builtin_ctzll(beyond), cell_range(s->nr_cells).s);
}

static int check_pages(const struct gfa_domain_spec *s, const struct msgs *m)
{
	unsigned int i, j;
	char here[PAGE_WHERE_MAX];
	int rc;

	for (i = 0; i < s->nr_pages; i++) {
		/* any other size is defined, as libvirt does: gfa_domain_check_pages()
		 * is the start-time check (docs/decisions.md, entry 24) */
		if (!s->pages[i].size_bytes) {
			page_where(s, i, here, sizeof(here));
			return fail(m, -EINVAL, "%s: size zero; accepted: a size above 0", here);
		}
		for (j = 0; j < i; j++) {
			rc = check_page_pair(s, i, j, m);
			if (rc)
				return rc;
		}
		rc = check_page_cells(s, i, m);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Guest memory the way libvirt's QEMU driver sizes it.  Defining or creating a domain
 * parses it with VIR_DOMAIN_DEF_PARSE_ABI_UPDATE, under which virDomainDefPostParseMemory
 * sets the total to the NUMA cells' sum plus the memory devices, whatever <memory> said;
 * QEMU then boots with -m = the total minus the devices (virDomainDefGetMemoryInitial):
 * the cells' sum.  Without cells <memory> stands and the devices must fit in it.
 */
static int size_memory(struct gfa_domain_spec *s, const struct msgs *m)
{
	uint64_t sum = s->device_memory_bytes;
	unsigned int i;

	s->stated_memory_bytes = s->memory_bytes;
	for (i = 0; i < s->nr_cells; i++) {
		if (s->cells[i].memory_bytes > UINT64_MAX - sum)
			return fail(m, -ERANGE, "<numa>: the cells and memory devices add up to "
				    "more than 16 EiB; accepted: a sum below 16 EiB");
		sum += s->cells[i].memory_bytes;
	}
	if (s->nr_cells)
		s->memory_bytes = sum;
	if (!s->memory_bytes)	/* the XML is checked at parse: libvirt's figure */
		return fail(m, -EINVAL, "<memory>: zero; accepted: a size above 0");
	if (s->device_memory_bytes == s->memory_bytes)
		return fail(m, -EINVAL, "<devices><memory>: all memory is in memory devices "
			    "(%s), no boot RAM; accepted: devices smaller than <memory>",
			    human(s->device_memory_bytes).s);
	if (s->device_memory_bytes > s->memory_bytes)
		return fail(m, -EINVAL, "<devices><memory>: memory devices (%s) exceed "
			    "<memory> (%s); accepted: devices smaller than <memory>",
			    human(s->device_memory_bytes).s, human(s->memory_bytes).s);
	/* libvirt clamps a balloon target above the total the same way. */
	if (!s->current_memory_bytes || s->current_memory_bytes > s->memory_bytes)
		s->current_memory_bytes = s->memory_bytes;
	return 0;
}

/* The vCPU counts; the XML's are checked at parse, these may be libvirt's figures. */
static int check_vcpus(struct gfa_domain_spec *s, const struct msgs *m)
{
	if (!s->vcpus)
		return fail(m, -EINVAL, "<vcpu>: 0 is below 1; accepted: 1-%d",
			    GFA_DOMAIN_MAX_VCPUS);
	if (s->vcpus > GFA_DOMAIN_MAX_VCPUS)
		return fail(m, -ERANGE, "<vcpu>: larger than %d; accepted: 1-%d",
			    GFA_DOMAIN_MAX_VCPUS, GFA_DOMAIN_MAX_VCPUS);
	if (!s->current_vcpus)
		s->current_vcpus = s->vcpus;
	if (s->current_vcpus > s->vcpus)
		return fail(m, -EINVAL, "<vcpu current='%u'>: current vCPUs exceed the "
			    "maximum, %u; accepted: 1-%u", s->current_vcpus, s->vcpus,
			    s->vcpus);
	return 0;
}

static int check_spec(struct gfa_domain_spec *s, const struct msgs *m)
{
	int rc;

	rc = size_memory(s, m);
	if (!rc)
		rc = check_vcpus(s, m);
	if (!rc)
		rc = check_cells(s, m);
	if (rc)
		return rc;
	fill_cell0(s);
	drop_nodesets(s);
	return check_pages(s, m);
}

/* ----------------------------------------------------------- entry points */

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

static void xml_init(void)
{
	xmlInitParser();
}

/*
 * libxml2's text up to its newline, less the line numbers it puts inside
 * ("... mismatch: domain line 1 and domian"): the message has one, in front.
 */
static void xml_error_text(const char *msg, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };
	const char *p = msg;

	while (*p && *p != '\n') {
		const char *d = p + strlen(" line ");

		if (!strncmp(p, " line ", strlen(" line ")) && isdigit((unsigned char)*d)) {
			while (isdigit((unsigned char)*d))
				d++;
			p = d;
			continue;
		}
		sb_printf(&sb, "%c", *p++);
	}
	sb_finish(&sb);
}

/* The parse error, in the one form: "line N: <what>; accepted: <what would be>". */
static int xml_refuse(const struct msgs *m, const xmlError *e)
{
	char text[256];

	if (e && e->code == XML_ERR_TAG_NAME_MISMATCH && e->str1 && e->str2)
		return fail(m, -EBADMSG, "line %d: not well-formed XML, </%s> does not close "
			    "<%s>; accepted: </%s>", e->line, e->str2, e->str1, e->str1);
	xml_error_text(e && e->message ? e->message : "cannot parse", text, sizeof(text));
	return fail(m, -EBADMSG, "line %d: not well-formed XML, %s; accepted: well-formed "
		    "XML", e ? e->line : 0, text);
}

/* The document, or NULL with the reason in m; nothing is printed. */
static xmlDocPtr xml_read(const char *xml, size_t len, const struct msgs *m)
{
	xmlParserCtxtPtr ctxt;
	xmlDocPtr doc;

	pthread_once(&xml_once, xml_init);
	ctxt = xmlNewParserCtxt();
	if (!ctxt) {
		fail(m, -ENOMEM, "out of memory");
		return NULL;
	}
	doc = xmlCtxtReadMemory(ctxt, xml, (int)len, NULL, NULL,
				XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (!doc)
		xml_refuse(m, xmlCtxtGetLastError(ctxt));
	xmlFreeParserCtxt(ctxt);
	return doc;
}

/* A <domain> document without entity declarations. */
static int check_root(xmlDocPtr doc, const struct msgs *m)
{
	xmlNodePtr root = xmlDocGetRootElement(doc);

	/* Entity references stay in the tree and expand in xmlNodeGetContent(). */
	if (doc->intSubset && (doc->intSubset->entities || doc->intSubset->pentities))
		return fail(m, -EBADMSG, "<!DOCTYPE>: entity declarations; accepted: none "
			    "(domain XML has none)");
	if (!root || strcmp((const char *)root->name, "domain"))
		return fail(m, -EBADMSG, "root element <%s>: not <domain>; accepted: a "
			    "<domain> document", root ? (const char *)root->name : "");
	return 0;
}

static int parse_parts(struct xml_in *in, struct gfa_domain_spec *s)
{
	int rc;

	rc = parse_name(in, s);
	if (!rc)
		rc = parse_memory(in, s);
	if (!rc)
		rc = parse_vcpus(in, s);
	if (!rc)
		rc = parse_cells(in, s);
	if (!rc)
		rc = parse_backing(in, s);
	if (!rc)
		rc = check_parsed(in, s);
	return rc;
}

/*
 * Parse @len bytes of @xml into *s (zeroed by the caller) without
 * validating.  Nothing is printed: libxml2's message goes to err.
 */
static int parse_doc(const char *xml, size_t len, struct gfa_domain_spec *s,
		     const struct msgs *m)
{
	struct xml_in in = { .m = *m };
	int rc;

	if (len > GFA_DOMAIN_XML_MAX)
		return fail(m, -EFBIG, "document: larger than %u MiB; accepted: %u MiB at most",
			    GFA_DOMAIN_XML_MAX >> 20, GFA_DOMAIN_XML_MAX >> 20);
	in.doc = xml_read(xml, len, m);
	if (!in.doc)
		return -EBADMSG;	/* or -ENOMEM, said in m */
	rc = check_root(in.doc, m);
	if (!rc) {
		in.xp = xmlXPathNewContext(in.doc);
		rc = in.xp ? parse_parts(&in, s) : fail(m, -ENOMEM, "out of memory");
		xmlXPathFreeContext(in.xp);
	}
	xmlFreeDoc(in.doc);
	return rc;
}

/* Parse + validate into a scratch spec; copy to *out only on success. */
static int import_xml(const char *xml, size_t len, struct gfa_domain_spec *out,
		      const struct msgs *m)
{
	struct gfa_domain_spec *s = calloc(1, sizeof(*s));
	int rc;

	if (!s)
		return fail(m, -ENOMEM, "out of memory");
	snprintf(s->origin, sizeof(s->origin), "%s", m->origin);
	rc = parse_doc(xml, len, s, m);
	if (!rc)
		rc = check_spec(s, m);
	if (!rc)
		*out = *s;
	free(s);
	return rc;
}

int gfa_domain_from_xml_string(const char *xml, struct gfa_domain_spec *out,
			       char *err, size_t errlen)
{
	struct msgs m = { "domain XML string", err, errlen };

	if (!xml || !out)
		return fail(&m, -EFAULT, "NULL argument");
	return import_xml(xml, strlen(xml), out, &m);
}

/* Read a whole file (regular or not) into a malloc'd buffer. */
static int read_file(const char *path, char **data, size_t *len, const struct msgs *m)
{
	size_t cap = 0, n = 0;
	char *buf = NULL;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(m, -errno, "%s", strerror(errno));
	for (;;) {
		ssize_t r;

		if (n == cap) {
			char *nb;

			/* One byte past the limit is enough to know it is too big. */
			if (cap > GFA_DOMAIN_XML_MAX) {
				rc = fail(m, -EFBIG, "document: larger than %u MiB; accepted: "
					  "%u MiB at most", GFA_DOMAIN_XML_MAX >> 20,
					  GFA_DOMAIN_XML_MAX >> 20);
				break;
			}
			cap = cap ? cap * 2 : 16384;
			if (cap > GFA_DOMAIN_XML_MAX + 1)
				cap = GFA_DOMAIN_XML_MAX + 1;
			nb = realloc(buf, cap);
			if (!nb) {
				rc = fail(m, -ENOMEM, "out of memory");
				break;
			}
			buf = nb;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = fail(m, -errno, "%s", strerror(errno));
			break;
		}
		if (r == 0)
			break;
		n += r;
	}
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	*data = buf;
	*len = n;
	return 0;
}

int gfa_domain_from_xml_file(const char *path, struct gfa_domain_spec *out,
			     char *err, size_t errlen)
{
	char what[PATH_MAX + 32];
	struct msgs m = { what, err, errlen };
	char *data = NULL;
	size_t len = 0;
	int rc;

	snprintf(what, sizeof(what), "domain XML file '%s'", path ? path : "");
	if (!path || !out)
		return fail(&m, -EFAULT, "NULL argument");
	rc = read_file(path, &data, &len, &m);
	if (rc)
		return rc;
	rc = import_xml(data ? data : "", len, out, &m);
	free(data);
	return rc;
}

/* ------------------------------------------------------------------ libvirt */

static pthread_once_t virt_once = PTHREAD_ONCE_INIT;
static int virt_init_rc;

/* libvirt's default handler prints every error to stderr; errors go to err. */
static void virt_quiet(void *opaque, virErrorPtr error)
{
	(void)opaque;
	(void)error;
}

static void virt_init(void)
{
	virt_init_rc = virInitialize();
	virSetErrorFunc(NULL, virt_quiet);
}

static void xml_quiet(void *ctx, const char *msg, ...)
{
	(void)ctx;
	(void)msg;
}

static const char *virt_msg(void)
{
	const char *m = virGetLastErrorMessage();

	return m ? m : "unknown libvirt error";
}

/*
 * Open @uri read-only.  The test driver parses its node file with libxml2,
 * whose generic handler would print I/O warnings; that handler is per-thread,
 * so silence it around the call and restore it.
 */
#pragma GCC diagnostic push
/* Newer libxml2 deprecates the global handler accessors used here. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static virConnectPtr virt_open(const char *uri)
{
	xmlGenericErrorFunc saved = xmlGenericError;
	void *saved_ctx = xmlGenericErrorContext;
	virConnectPtr conn;

	xmlSetGenericErrorFunc(NULL, xml_quiet);
	conn = virConnectOpenReadOnly(uri);
	xmlSetGenericErrorFunc(saved_ctx, saved);
	return conn;
}
#pragma GCC diagnostic pop

/* Fill the fields libvirt's API exposes, overriding what the XML said. */
static int virt_api_fields(virDomainPtr dom, struct gfa_domain_spec *s,
			   const struct msgs *m)
{
	virDomainInfo info;
	unsigned long maxmem;
	const char *name;
	int n;

	name = virDomainGetName(dom);
	if (!name)
		return fail(m, -EIO, "virDomainGetName: %s", virt_msg());
	if (strlen(name) >= sizeof(s->name))
		return fail(m, -ERANGE, "<name>: longer than %d bytes; accepted: 1-%d bytes",
			    GFA_DOMAIN_NAME_MAX - 1, GFA_DOMAIN_NAME_MAX - 1);
	memcpy(s->name, name, strlen(name) + 1);   /* length checked above */

	if (virDomainGetInfo(dom, &info) < 0)
		return fail(m, -EIO, "virDomainGetInfo: %s", virt_msg());
	maxmem = virDomainGetMaxMemory(dom);
	if (!maxmem)
		return fail(m, -EIO, "virDomainGetMaxMemory: %s", virt_msg());
	s->memory_bytes = (uint64_t)maxmem * KIB;
	s->current_memory_bytes = (uint64_t)info.memory * KIB;

	/* virDomainGetMaxVcpus() needs a running domain; this works on any. */
	n = virDomainGetVcpusFlags(dom, VIR_DOMAIN_AFFECT_CURRENT |
				   VIR_DOMAIN_VCPU_MAXIMUM);
	if (n < 0)
		n = virDomainGetMaxVcpus(dom);
	if (n < 0)
		return fail(m, -EIO, "virDomainGetVcpusFlags: %s", virt_msg());
	s->vcpus = n;
	n = virDomainGetVcpusFlags(dom, VIR_DOMAIN_AFFECT_CURRENT);
	s->current_vcpus = n > 0 ? (unsigned int)n : info.nrVirtCpu;
	return 0;
}

static int virt_import(virDomainPtr dom, struct gfa_domain_spec *out,
		       const struct msgs *m)
{
	struct gfa_domain_spec *s;
	char *xml;
	int rc;

	xml = virDomainGetXMLDesc(dom, 0);
	if (!xml)
		return fail(m, -EIO, "virDomainGetXMLDesc: %s", virt_msg());
	s = calloc(1, sizeof(*s));
	if (!s) {
		free(xml);
		return fail(m, -ENOMEM, "out of memory");
	}
	snprintf(s->origin, sizeof(s->origin), "%s", m->origin);
	rc = parse_doc(xml, strlen(xml), s, m);
	free(xml);
	if (!rc)
		rc = virt_api_fields(dom, s, m);
	if (!rc)
		rc = check_spec(s, m);
	if (!rc)
		*out = *s;
	free(s);
	return rc;
}

/* Look @name up on @conn and import it; @m names both. */
static int virt_lookup(virConnectPtr conn, const char *name, const char *shown,
		       struct gfa_domain_spec *out, const struct msgs *m)
{
	virDomainPtr dom = virDomainLookupByName(conn, name);
	virErrorPtr e;
	int rc;

	if (dom) {
		rc = virt_import(dom, out, m);
		virDomainFree(dom);
		return rc;
	}
	e = virGetLastError();
	if (e && e->code == VIR_ERR_NO_DOMAIN)
		return fail(m, -ENOENT, "no domain named '%s' on '%s' (%s)", name, shown,
			    virt_msg());
	return fail(m, -EIO, "lookup failed: %s", virt_msg());
}

int gfa_domain_from_libvirt(const char *uri, const char *name,
			    struct gfa_domain_spec *out, char *err, size_t errlen)
{
	const char *shown = uri ? uri : "(default URI)";
	struct msgs m = { "libvirt", err, errlen };
	virConnectPtr conn;
	char *what;
	int rc;

	if (!name || !out)
		return fail(&m, -EFAULT, "NULL argument");
	if (asprintf(&what, "libvirt domain '%s' on '%s'", name, shown) < 0)
		return fail(&m, -ENOMEM, "out of memory");
	m.origin = what;
	pthread_once(&virt_once, virt_init);
	if (virt_init_rc < 0) {
		rc = fail(&m, -EIO, "virInitialize failed");
	} else if (!(conn = virt_open(uri))) {
		rc = fail(&m, -ECONNREFUSED, "cannot connect to '%s': %s", shown, virt_msg());
	} else {
		rc = virt_lookup(conn, name, shown, out, &m);
		virConnectClose(conn);
	}
	free(what);
	return rc;
}

/* ------------------------------------------------------------ formatting */

static const char *const size_units[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB",
					  "EiB" };

/* @bytes in the largest unit that divides it: *unit is its index in size_units. */
static uint64_t exact_size(uint64_t bytes, unsigned int *unit)
{
	*unit = 0;
	while (bytes && *unit + 1 < sizeof(size_units) / sizeof(size_units[0]) &&
	       !(bytes % 1024)) {
		bytes /= 1024;
		(*unit)++;
	}
	return bytes;
}

int gfa_domain_format_size(uint64_t bytes, char *buf, size_t len)
{
	unsigned int u, big = 0;
	uint64_t v;
	int n;

	if (!buf)
		return -EFAULT;
	if (!len)
		return -EINVAL;
	/* the number of a size no host has helps nobody: 9007199254740991 KiB */
	if (bytes > HOST_MEMORY_MAX) {
		n = snprintf(buf, len, "larger than %s", human(HOST_MEMORY_MAX).s);
		return (size_t)n >= len ? -ENOSPC : n;
	}
	v = exact_size(bytes, &u);
	while (bytes >> (10 * (big + 1)))
		big++;
	if (v < 10000)
		n = snprintf(buf, len, "%" PRIu64 " %s", v, size_units[u]);
	else
		n = snprintf(buf, len, "%" PRIu64 " %s (%.1f %s)", v, size_units[u],
			     (double)bytes / (double)(1ull << (10 * big)), size_units[big]);
	return (size_t)n >= len ? -ENOSPC : n;
}

/* "(vCPUs 3,5-7 are in no cell; node 0 gets them, ...)" if the import filled cell 0. */
static void put_unnamed(struct strbuf *o, const struct gfa_domain_spec *s)
{
	unsigned int n = popcount_bits(s->unnamed_cpus, GFA_DOMAIN_MAX_VCPUS / 64);
	char list[GFA_DOMAIN_MAX_VCPUS * 6];

	if (!n)
		return;
	format_bitmap(s->unnamed_cpus, GFA_DOMAIN_MAX_VCPUS, list, sizeof(list));
	sb_printf(o, " (vCPU%s %s %s in no cell; node 0 gets %s, as libvirt's QEMU driver "
		  "does)", n == 1 ? "" : "s", list, n == 1 ? "is" : "are",
		  n == 1 ? "it" : "them");
}

static void put_cells(struct strbuf *o, const struct gfa_domain_spec *s)
{
	char list[GFA_DOMAIN_MAX_VCPUS * 6];
	unsigned int i;

	if (!s->nr_cells) {
		sb_printf(o, ", no NUMA cells");
		return;
	}
	sb_printf(o, ", %u NUMA cell%s [", s->nr_cells, s->nr_cells == 1 ? "" : "s");
	for (i = 0; i < s->nr_cells; i++) {
		const struct gfa_domain_cell *c = &s->cells[i];

		format_bitmap(c->cpus, GFA_DOMAIN_MAX_VCPUS, list, sizeof(list));
		sb_printf(o, "%s%u: cpus %s, %s", i ? "; " : "", i,
		    c->nr_cpus ? list : "none", human(c->memory_bytes).s);
	}
	sb_printf(o, "]");
	put_unnamed(o, s);
}

static void put_pages(struct strbuf *o, const struct gfa_domain_spec *s)
{
	char list[GFA_DOMAIN_MAX_CELLS * 4];
	unsigned int i;

	if (!s->hugepages) {
		sb_printf(o, ", no hugepages");
		return;
	}
	if (!s->nr_pages) {
		sb_printf(o, ", hugepages host default size");
		return;
	}
	sb_printf(o, ", hugepages");
	for (i = 0; i < s->nr_pages; i++) {
		const struct gfa_domain_page *p = &s->pages[i];
		const char *size = human(p->size_bytes).s;

		if (p->nodeset) {
			format_bitmap(&p->nodeset, GFA_DOMAIN_MAX_CELLS, list, sizeof(list));
			sb_printf(o, "%s %s (cells %s)", i ? "," : "", size, list);
		} else {
			sb_printf(o, "%s %s (default%s)", i ? "," : "", size,
				  p->nodeset_dropped ? "; nodeset='0' dropped: no NUMA cells, "
				  "as libvirt does" : "");
		}
	}
}

/* A caller-built spec: its counts must fit its arrays (parsed specs always do). */
static bool spec_counts_ok(const struct gfa_domain_spec *s)
{
	return s->nr_cells <= GFA_DOMAIN_MAX_CELLS && s->nr_pages <= GFA_DOMAIN_MAX_PAGES;
}

/* The memory figures: the total, why it is not <memory>, current, devices. */
static void put_memory(struct strbuf *o, const struct gfa_domain_spec *s)
{
	sb_printf(o, "%s: memory %s", s->name, human(s->memory_bytes).s);
	if (s->stated_memory_bytes && s->stated_memory_bytes != s->memory_bytes)
		sb_printf(o, " (the NUMA cells%s, as libvirt's QEMU driver sizes it; "
			  "<memory> says %s)", s->device_memory_bytes ? " plus memory devices"
			  : "", human(s->stated_memory_bytes).s);
	if (s->current_memory_bytes != s->memory_bytes)
		sb_printf(o, " (current %s)", human(s->current_memory_bytes).s);
	if (s->device_memory_bytes)
		sb_printf(o, " incl. %s memory devices", human(s->device_memory_bytes).s);
}

int gfa_domain_format(const struct gfa_domain_spec *s, char *buf, size_t len)
{
	static const char *const sources[] = { "default", "anonymous", "file", "memfd" };
	static const char *const access[] = { "default", "shared", "private" };
	struct strbuf o = { .buf = buf, .len = len };

	if (!s || !buf)
		return -EFAULT;
	if (!len || !spec_counts_ok(s))
		return -EINVAL;
	buf[0] = '\0';
	put_memory(&o, s);
	sb_printf(&o, ", %u vCPU%s", s->vcpus, s->vcpus == 1 ? "" : "s");
	if (s->current_vcpus != s->vcpus)
		sb_printf(&o, " (%u current)", s->current_vcpus);
	put_cells(&o, s);
	put_pages(&o, s);
	if (s->source != GFA_DOMAIN_SOURCE_DEFAULT && (unsigned int)s->source < 4)
		sb_printf(&o, ", source %s", sources[s->source]);
	if (s->access != GFA_DOMAIN_ACCESS_DEFAULT && (unsigned int)s->access < 3)
		sb_printf(&o, ", access %s", access[s->access]);
	sb_finish(&o);
	return sb_overflowed(&o) ? -ENOSPC : (int)o.pos;
}

int gfa_domain_cell_page_size(const struct gfa_domain_spec *s, unsigned int cell,
			      uint64_t *bytes)
{
	unsigned int i, ncells;
	uint64_t fallback = 0;

	if (!s || !bytes)
		return -EFAULT;
	if (!spec_counts_ok(s))
		return -EINVAL;
	ncells = s->nr_cells ? s->nr_cells : 1;
	if (cell >= ncells)
		return -ENOENT;
	if (!s->hugepages)
		return -ENODATA;
	for (i = 0; i < s->nr_pages && i < GFA_DOMAIN_MAX_PAGES; i++) {
		if ((s->pages[i].nodeset >> cell) & 1) {
			*bytes = s->pages[i].size_bytes;
			return 0;
		}
		if (!s->pages[i].nodeset)
			fallback = s->pages[i].size_bytes;
	}
	*bytes = fallback;
	return 0;
}

/*
 * Whether a page of size bytes can back guest RAM here: the base page, gfa's own 2 MiB
 * block (an order-9 block, host THP, whatever hugetlbfs has), or <dir>/hugepages-<n>kB.
 */
static bool host_has_page(const char *dir, uint64_t bytes)
{
	char path[PATH_MAX];
	struct stat st;

	if (bytes == (uint64_t)sysconf(_SC_PAGESIZE) ||
	    bytes == GFA_PAGEBLOCK_FRAMES * GFA_FRAME_SIZE)
		return true;
	if (bytes % KIB || (size_t)snprintf(path, sizeof(path), "%s/hugepages-%" PRIu64 "kB",
					    dir, (uint64_t)(bytes / KIB)) >= sizeof(path))
		return false;
	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

/* The hugepage sizes under dir, "2 MiB, 1 GiB" (in directory order), or "none". */
static void host_page_list(const char *dir, char *buf, size_t len)
{
	struct strbuf sb = { buf, len, 0 };
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t kib;

	while (d && (e = readdir(d))) {
		if (sscanf(e->d_name, "hugepages-%" SCNu64 "kB", &kib) != 1)
			continue;
		sb_printf(&sb, "%s%s", sb.pos ? ", " : "", human((uint64_t)kib * KIB).s);
	}
	if (d)
		closedir(d);
	if (!sb.pos)
		sb_printf(&sb, "none");
	sb_finish(&sb);
}

int gfa_domain_check_pages(const struct gfa_domain_spec *s, const char *dir, char *err,
			   size_t errlen)
{
	char here[PAGE_WHERE_MAX], have[256], what[GFA_DOMAIN_ORIGIN_MAX + GFA_DOMAIN_NAME_MAX + 16];
	struct msgs m = { "domain", err, errlen };
	unsigned int i;

	if (!s)
		return fail(&m, -EFAULT, "NULL argument");
	if (!spec_counts_ok(s))
		return fail(&m, -EINVAL, "counts too large for the arrays");
	if (s->origin[0])
		snprintf(what, sizeof(what), "%.*s", (int)strnlen(s->origin, sizeof(s->origin)),
			 s->origin);
	else
		snprintf(what, sizeof(what), "domain '%.*s'",
			 (int)strnlen(s->name, sizeof(s->name)), s->name);
	m.origin = what;
	if (!dir)
		dir = "/sys/kernel/mm/hugepages";
	for (i = 0; s->hugepages && i < s->nr_pages; i++) {
		if (host_has_page(dir, s->pages[i].size_bytes))
			continue;
		page_where(s, i, here, sizeof(here));
		host_page_list(dir, have, sizeof(have));
		return fail(&m, -EOPNOTSUPP, "%s: %s is not a page size of this host (it has "
			    "%s), and libvirt's QEMU driver refuses to start it too; accepted: "
			    "%s, 2 MiB or a size this host has", here,
			    human(s->pages[i].size_bytes).s, have,
			    human((uint64_t)sysconf(_SC_PAGESIZE)).s);
	}
	return 0;
}
