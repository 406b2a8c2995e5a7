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

/* Put "<what>: <message>" into err, if the caller gave a buffer. */
static int __attribute__((format(printf, 5, 6)))
fail(char *err, size_t errlen, int rc, const char *what, const char *fmt, ...)
{
	struct strbuf sb = { err, errlen, 0 };
	va_list ap;

	if (!err || !errlen)
		return rc;
	sb_printf(&sb, "%s: ", what);
	va_start(ap, fmt);
	sb_vprintf(&sb, fmt, ap);
	va_end(ap);
	sb_finish(&sb);
	for (char *c = err; *c; c++)	/* one line, whatever the XML held */
		if (*c == '\n' || *c == '\r')
			*c = ' ';
	return rc;
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
	const char *what;	/* "domain XML file '/x'" etc., prefix of messages */
	char *err;
	size_t errlen;
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

static char *xml_prop(xmlNodePtr n, const char *name)
{
	return (char *)xmlGetProp(n, (const xmlChar *)name);
}

/*
 * A libvirt memory size: @value (element text if @attr is NULL, else that
 * attribute) scaled by the "unit" attribute, rounded up to a whole KiB as
 * libvirt stores it.  @label names the item in messages.
 */
static int xml_size(struct xml_in *in, xmlNodePtr n, const char *attr,
		    const char *label, uint64_t *bytes)
{
	char *value = attr ? xml_prop(n, attr) : (char *)xmlNodeGetContent(n);
	char *unit = xml_prop(n, "unit");
	uint64_t b = 0;
	int rc;

	if (!value) {
		rc = fail(in->err, in->errlen, -EINVAL, in->what,
			  "%s has no %s", label, attr ? attr : "value");
		goto out;
	}
	rc = gfa_domain_parse_size(value, unit, &b);
	if (rc == 0 && b > UINT64_MAX - (KIB - 1))
		rc = -ERANGE;
	if (rc == -ERANGE)
		fail(in->err, in->errlen, rc, in->what, "%s '%s %s' overflows 64 bits",
		     label, value, unit ? unit : "KiB");
	else if (rc && unit && unit_scale(unit, &(uint64_t){ 0 }))
		fail(in->err, in->errlen, rc, in->what, "%s has unknown unit '%s'",
		     label, unit);
	else if (rc)
		fail(in->err, in->errlen, rc, in->what,
		     "%s value '%s' is not an unsigned decimal number", label, value);
	else
		*bytes = (b + KIB - 1) / KIB * KIB;
out:
	xmlFree(value);
	xmlFree(unit);
	return rc;
}

/* An unsigned int from an attribute (@attr) or element text (@attr NULL). */
static int xml_uint(struct xml_in *in, xmlNodePtr n, const char *attr,
		    const char *label, unsigned int *out)
{
	char *value = attr ? xml_prop(n, attr) : (char *)xmlNodeGetContent(n);
	uint64_t v;
	int rc;

	rc = value ? parse_u64(value, &v) : -EINVAL;
	if (rc == 0 && v > UINT32_MAX)
		rc = -ERANGE;
	if (rc)
		fail(in->err, in->errlen, rc == -ERANGE ? -ERANGE : -EINVAL, in->what,
		     "%s '%s' is not a valid count", label, value ? value : "");
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
		rc = fail(in->err, in->errlen, -EBADMSG, in->what, "<domain> has no <name>");
	else if (strlen(name) >= sizeof(s->name))
		rc = fail(in->err, in->errlen, -ERANGE, in->what,
			  "domain name is longer than %d bytes", GFA_DOMAIN_NAME_MAX - 1);
	else
		memcpy(s->name, name, strlen(name) + 1);   /* length checked above */
	xmlFree(name);
	return rc;
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

	devs = xml_find(in, "/domain/devices/memory/target/size");
	for (i = 0; i < xml_count(devs); i++) {
		uint64_t b = 0;

		rc = xml_size(in, xml_node(devs, i), NULL, "memory device <size>", &b);
		if (rc)
			break;
		if (b > UINT64_MAX - s->device_memory_bytes) {
			rc = fail(in->err, in->errlen, -ERANGE, in->what,
				  "memory device sizes overflow 64 bits");
			break;
		}
		s->device_memory_bytes += b;
	}
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
	rc = xml_uint(in, n, NULL, "<vcpu>", &s->vcpus);
	if (rc)
		return rc;
	cur = xml_prop(n, "current");
	if (cur)
		rc = xml_uint(in, n, "current", "<vcpu current>", &s->current_vcpus);
	if (cur && !rc && !s->current_vcpus)
		rc = fail(in->err, in->errlen, -EINVAL, in->what,
			  "<vcpu current> is zero");
	xmlFree(cur);
	return rc;
}

static int parse_cell(struct xml_in *in, xmlNodePtr n, int index,
		      struct gfa_domain_spec *s)
{
	struct gfa_domain_cell *c;
	unsigned int id = index;
	char *idstr = xml_prop(n, "id");
	char *cpus;
	int rc = 0;

	/* libvirt numbers cells without an id by position. */
	if (idstr)
		rc = xml_uint(in, n, "id", "NUMA <cell id>", &id);
	xmlFree(idstr);
	if (rc)
		return rc;
	if (id >= GFA_DOMAIN_MAX_CELLS)
		return fail(in->err, in->errlen, -ERANGE, in->what,
			    "NUMA cell id %u is beyond the limit of %d cells",
			    id, GFA_DOMAIN_MAX_CELLS);
	c = &s->cells[id];
	if (c->memory_bytes)	/* every parsed cell has memory > 0 */
		return fail(in->err, in->errlen, -EINVAL, in->what,
			    "NUMA cell id %u appears twice", id);
	c->id = id;

	rc = xml_size(in, n, "memory", "NUMA <cell memory>", &c->memory_bytes);
	if (rc)
		return rc;
	if (!c->memory_bytes)
		return fail(in->err, in->errlen, -EINVAL, in->what,
			    "NUMA cell %u has zero memory", id);

	cpus = xml_prop(n, "cpus");
	if (cpus) {
		rc = parse_bitmap(cpus, c->cpus, GFA_DOMAIN_MAX_VCPUS);
		if (rc == -ERANGE)
			fail(in->err, in->errlen, rc, in->what,
			     "NUMA cell %u cpus '%s' name a vCPU >= %d", id, cpus,
			     GFA_DOMAIN_MAX_VCPUS);
		else if (rc)
			fail(in->err, in->errlen, rc, in->what,
			     "NUMA cell %u has malformed cpus '%s'", id, cpus);
		c->nr_cpus = popcount_bits(c->cpus, GFA_DOMAIN_MAX_VCPUS / 64);
	}
	xmlFree(cpus);
	return rc;
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
		rc = fail(in->err, in->errlen, -EINVAL, in->what,
			  "<numa> has no <cell>");
	else if (n > GFA_DOMAIN_MAX_CELLS)
		rc = fail(in->err, in->errlen, -ERANGE, in->what,
			  "%d NUMA cells exceed the limit of %d", n, GFA_DOMAIN_MAX_CELLS);
	for (i = 0; !rc && i < n; i++)
		rc = parse_cell(in, xml_node(cells, i), i, s);
	xmlXPathFreeObject(cells);
	if (rc)
		return rc;
	s->nr_cells = n;
	/* n distinct ids below GFA_DOMAIN_MAX_CELLS: contiguous iff all < n. */
	for (i = 0; i < n; i++)
		if (!s->cells[i].memory_bytes)
			return fail(in->err, in->errlen, -EINVAL, in->what,
				    "NUMA cell ids must be 0..%d, cell %d is missing",
				    n - 1, i);
	return 0;
}

static int parse_page(struct xml_in *in, xmlNodePtr n, struct gfa_domain_page *p)
{
	char *nodeset;
	int rc;

	rc = xml_size(in, n, "size", "hugepage <page size>", &p->size_bytes);
	if (rc)
		return rc;
	nodeset = xml_prop(n, "nodeset");
	if (nodeset) {
		rc = parse_bitmap(nodeset, &p->nodeset, GFA_DOMAIN_MAX_CELLS);
		if (rc)
			fail(in->err, in->errlen, -EINVAL, in->what,
			     "hugepage nodeset '%s' is not a list of cell ids", nodeset);
		else if (!p->nodeset)
			rc = fail(in->err, in->errlen, -EINVAL, in->what,
				  "hugepage nodeset '%s' is empty", nodeset);
	}
	xmlFree(nodeset);
	return rc ? -EINVAL : 0;
}

static int parse_backing(struct xml_in *in, struct gfa_domain_spec *s)
{
	static const char *const sources[] = {
		[GFA_DOMAIN_SOURCE_ANONYMOUS] = "anonymous",
		[GFA_DOMAIN_SOURCE_FILE] = "file",
		[GFA_DOMAIN_SOURCE_MEMFD] = "memfd",
	};
	xmlXPathObjectPtr pages;
	xmlNodePtr n;
	char *v;
	int i, rc = 0;

	n = xml_first(in, "/domain/memoryBacking/source");
	if (n) {
		v = xml_prop(n, "type");
		for (i = 1; v && i < (int)(sizeof(sources) / sizeof(sources[0])); i++)
			if (!strcmp(v, sources[i]))
				s->source = i;
		if (s->source == GFA_DOMAIN_SOURCE_DEFAULT)
			rc = fail(in->err, in->errlen, -EINVAL, in->what,
				  "unknown memory backing source type '%s'", v ? v : "");
		xmlFree(v);
		if (rc)
			return rc;
	}
	n = xml_first(in, "/domain/memoryBacking/access");
	if (n) {
		v = xml_prop(n, "mode");
		if (v && !strcmp(v, "shared"))
			s->access = GFA_DOMAIN_ACCESS_SHARED;
		else if (v && !strcmp(v, "private"))
			s->access = GFA_DOMAIN_ACCESS_PRIVATE;
		else
			rc = fail(in->err, in->errlen, -EINVAL, in->what,
				  "unknown memory access mode '%s'", v ? v : "");
		xmlFree(v);
		if (rc)
			return rc;
	}

	if (!xml_first(in, "/domain/memoryBacking/hugepages"))
		return 0;
	s->hugepages = true;
	pages = xml_find(in, "/domain/memoryBacking/hugepages/page");
	if (xml_count(pages) > GFA_DOMAIN_MAX_PAGES)
		rc = fail(in->err, in->errlen, -ERANGE, in->what,
			  "%d hugepage sizes exceed the limit of %d",
			  xml_count(pages), GFA_DOMAIN_MAX_PAGES);
	for (i = 0; !rc && i < xml_count(pages); i++)
		rc = parse_page(in, xml_node(pages, i), &s->pages[i]);
	if (!rc)
		s->nr_pages = xml_count(pages);
	xmlXPathFreeObject(pages);
	return rc;
}

/* ------------------------------------------------------------- validation */

static int check_cells(const struct gfa_domain_spec *s, const char *what,
		       char *err, size_t errlen)
{
	uint64_t seen[GFA_DOMAIN_MAX_VCPUS / 64] = { 0 };
	unsigned int i, w;

	for (i = 0; i < s->nr_cells; i++) {
		const struct gfa_domain_cell *c = &s->cells[i];

		for (w = 0; w < GFA_DOMAIN_MAX_VCPUS / 64; w++) {
			if (seen[w] & c->cpus[w])
				return fail(err, errlen, -EINVAL, what,
					    "NUMA cell %u shares vCPU %d with another cell",
					    i, w * 64 + __builtin_ctzll(seen[w] & c->cpus[w]));
			seen[w] |= c->cpus[w];
		}
	}
	for (w = s->vcpus / 64; w < GFA_DOMAIN_MAX_VCPUS / 64; w++) {
		uint64_t beyond = seen[w];

		if (w == s->vcpus / 64)
			beyond &= ~((1ull << (s->vcpus % 64)) - 1);
		if (beyond)
			return fail(err, errlen, -EINVAL, what,
				    "NUMA cells name vCPU %d but the domain has %u vCPUs",
				    w * 64 + __builtin_ctzll(beyond), s->vcpus);
	}
	return 0;
}

static int check_pages(const struct gfa_domain_spec *s, const char *what,
		       char *err, size_t errlen)
{
	uint64_t cells = s->nr_cells ? ~0ull >> (64 - s->nr_cells) : 1;
	uint64_t named = 0;
	unsigned int i, masters = 0;

	for (i = 0; i < s->nr_pages; i++) {
		const struct gfa_domain_page *p = &s->pages[i];

		/* any other size is defined, as libvirt does: gfa_domain_check_pages()
		 * is the start-time check (docs/decisions.md, entry 24) */
		if (!p->size_bytes)
			return fail(err, errlen, -EINVAL, what, "hugepage size is zero");
		if (!p->nodeset && ++masters > 1)
			return fail(err, errlen, -EINVAL, what,
				    "more than one hugepage size without nodeset");
		if (p->nodeset & ~cells)
			return fail(err, errlen, -EINVAL, what,
				    "hugepage nodeset names cell %d which does not exist",
				    __builtin_ctzll(p->nodeset & ~cells));
		if (p->nodeset & named)
			return fail(err, errlen, -EINVAL, what,
				    "hugepage nodesets overlap at cell %d",
				    __builtin_ctzll(p->nodeset & named));
		named |= p->nodeset;
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
static int size_memory(struct gfa_domain_spec *s, const char *what, char *err,
		       size_t errlen)
{
	char dev[32], mem[32];
	uint64_t sum = s->device_memory_bytes;
	unsigned int i;

	s->stated_memory_bytes = s->memory_bytes;
	for (i = 0; i < s->nr_cells; i++) {
		if (s->cells[i].memory_bytes > UINT64_MAX - sum)
			return fail(err, errlen, -ERANGE, what,
				    "NUMA cells and memory devices overflow 64 bits");
		sum += s->cells[i].memory_bytes;
	}
	if (s->nr_cells)
		s->memory_bytes = sum;
	if (!s->memory_bytes)
		return fail(err, errlen, -EINVAL, what, "domain memory is zero or missing");
	gfa_domain_format_size(s->device_memory_bytes, dev, sizeof(dev));
	gfa_domain_format_size(s->memory_bytes, mem, sizeof(mem));
	if (s->device_memory_bytes == s->memory_bytes)
		return fail(err, errlen, -EINVAL, what,
			    "all memory is in memory devices (%s), no boot RAM", dev);
	if (s->device_memory_bytes > s->memory_bytes)
		return fail(err, errlen, -EINVAL, what,
			    "memory devices (%s) exceed <memory> (%s)", dev, mem);
	/* libvirt clamps a balloon target above the total the same way. */
	if (!s->current_memory_bytes || s->current_memory_bytes > s->memory_bytes)
		s->current_memory_bytes = s->memory_bytes;
	return 0;
}

static int check_spec(struct gfa_domain_spec *s, const char *what, char *err,
		      size_t errlen)
{
	int rc;

	rc = size_memory(s, what, err, errlen);
	if (rc)
		return rc;
	if (!s->vcpus)
		return fail(err, errlen, -EINVAL, what, "domain has zero vCPUs");
	if (s->vcpus > GFA_DOMAIN_MAX_VCPUS)
		return fail(err, errlen, -ERANGE, what, "%u vCPUs exceed the limit of %d",
			    s->vcpus, GFA_DOMAIN_MAX_VCPUS);
	if (!s->current_vcpus)
		s->current_vcpus = s->vcpus;
	if (s->current_vcpus > s->vcpus)
		return fail(err, errlen, -EINVAL, what,
			    "current vCPUs (%u) exceed the maximum (%u)",
			    s->current_vcpus, s->vcpus);
	rc = check_cells(s, what, err, errlen);
	if (rc)
		return rc;
	return check_pages(s, what, err, errlen);
}

/* ----------------------------------------------------------- entry points */

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

static void xml_init(void)
{
	xmlInitParser();
}

/*
 * Parse @len bytes of @xml into *s (zeroed by the caller) without
 * validating.  Nothing is printed: libxml2's message goes to err.
 */
static int parse_doc(const char *xml, size_t len, const char *what,
		     struct gfa_domain_spec *s, char *err, size_t errlen)
{
	struct xml_in in = { .what = what, .err = err, .errlen = errlen };
	xmlParserCtxtPtr ctxt;
	xmlNodePtr root;
	int rc;

	if (len > GFA_DOMAIN_XML_MAX)
		return fail(err, errlen, -EFBIG, what, "XML is larger than %u MiB",
			    GFA_DOMAIN_XML_MAX >> 20);
	pthread_once(&xml_once, xml_init);
	ctxt = xmlNewParserCtxt();
	if (!ctxt)
		return fail(err, errlen, -ENOMEM, what, "out of memory");
	in.doc = xmlCtxtReadMemory(ctxt, xml, (int)len, NULL, NULL,
				   XML_PARSE_NONET | XML_PARSE_NOERROR |
				   XML_PARSE_NOWARNING);
	if (!in.doc) {
		const xmlError *e = xmlCtxtGetLastError(ctxt);
		const char *msg = e && e->message ? e->message : "cannot parse\n";

		rc = fail(err, errlen, -EBADMSG, what, "bad XML at line %d: %.*s",
			  e ? e->line : 0, (int)strcspn(msg, "\n"), msg);
		xmlFreeParserCtxt(ctxt);
		return rc;
	}
	xmlFreeParserCtxt(ctxt);

	/* Entity references stay in the tree and expand in xmlNodeGetContent(). */
	if (in.doc->intSubset && (in.doc->intSubset->entities ||
				  in.doc->intSubset->pentities)) {
		rc = fail(err, errlen, -EBADMSG, what, "entity declarations are not allowed");
		goto out_doc;
	}
	root = xmlDocGetRootElement(in.doc);
	if (!root || strcmp((const char *)root->name, "domain")) {
		rc = fail(err, errlen, -EBADMSG, what,
			  "root element is <%s>, not <domain>",
			  root ? (const char *)root->name : "");
		goto out_doc;
	}
	in.xp = xmlXPathNewContext(in.doc);
	if (!in.xp) {
		rc = fail(err, errlen, -ENOMEM, what, "out of memory");
		goto out_doc;
	}
	rc = parse_name(&in, s);
	if (!rc)
		rc = parse_memory(&in, s);
	if (!rc)
		rc = parse_vcpus(&in, s);
	if (!rc)
		rc = parse_cells(&in, s);
	if (!rc)
		rc = parse_backing(&in, s);
	xmlXPathFreeContext(in.xp);
out_doc:
	xmlFreeDoc(in.doc);
	return rc;
}

/* Parse + validate into a scratch spec; copy to *out only on success. */
static int import_xml(const char *xml, size_t len, const char *what,
		      struct gfa_domain_spec *out, char *err, size_t errlen)
{
	struct gfa_domain_spec *s = calloc(1, sizeof(*s));
	int rc;

	if (!s)
		return fail(err, errlen, -ENOMEM, what, "out of memory");
	rc = parse_doc(xml, len, what, s, err, errlen);
	if (!rc)
		rc = check_spec(s, what, err, errlen);
	if (!rc)
		*out = *s;
	free(s);
	return rc;
}

int gfa_domain_from_xml_string(const char *xml, struct gfa_domain_spec *out,
			       char *err, size_t errlen)
{
	if (!xml || !out)
		return fail(err, errlen, -EFAULT, "domain XML", "NULL argument");
	return import_xml(xml, strlen(xml), "domain XML string", out, err, errlen);
}

/* Read a whole file (regular or not) into a malloc'd buffer. */
static int read_file(const char *path, const char *what, char **data,
		     size_t *len, char *err, size_t errlen)
{
	size_t cap = 0, n = 0;
	char *buf = NULL;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(err, errlen, -errno, what, "%s", strerror(errno));
	for (;;) {
		ssize_t r;

		if (n == cap) {
			char *nb;

			/* One byte past the limit is enough to know it is too big. */
			if (cap > GFA_DOMAIN_XML_MAX) {
				rc = fail(err, errlen, -EFBIG, what,
					  "file is larger than %u MiB", GFA_DOMAIN_XML_MAX >> 20);
				break;
			}
			cap = cap ? cap * 2 : 16384;
			if (cap > GFA_DOMAIN_XML_MAX + 1)
				cap = GFA_DOMAIN_XML_MAX + 1;
			nb = realloc(buf, cap);
			if (!nb) {
				rc = fail(err, errlen, -ENOMEM, what, "out of memory");
				break;
			}
			buf = nb;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = fail(err, errlen, -errno, what, "%s", strerror(errno));
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
	char *data = NULL;
	size_t len = 0;
	int rc;

	if (!path || !out)
		return fail(err, errlen, -EFAULT, "domain XML file", "NULL argument");
	snprintf(what, sizeof(what), "domain XML file '%s'", path);
	rc = read_file(path, what, &data, &len, err, errlen);
	if (rc)
		return rc;
	rc = import_xml(data ? data : "", len, what, out, err, errlen);
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
static int virt_api_fields(virDomainPtr dom, const char *what,
			   struct gfa_domain_spec *s, char *err, size_t errlen)
{
	virDomainInfo info;
	unsigned long maxmem;
	const char *name;
	int n;

	name = virDomainGetName(dom);
	if (!name)
		return fail(err, errlen, -EIO, what, "virDomainGetName: %s", virt_msg());
	if (strlen(name) >= sizeof(s->name))
		return fail(err, errlen, -ERANGE, what,
			    "domain name is longer than %d bytes", GFA_DOMAIN_NAME_MAX - 1);
	memcpy(s->name, name, strlen(name) + 1);   /* length checked above */

	if (virDomainGetInfo(dom, &info) < 0)
		return fail(err, errlen, -EIO, what, "virDomainGetInfo: %s", virt_msg());
	maxmem = virDomainGetMaxMemory(dom);
	if (!maxmem)
		return fail(err, errlen, -EIO, what, "virDomainGetMaxMemory: %s",
			    virt_msg());
	s->memory_bytes = (uint64_t)maxmem * KIB;
	s->current_memory_bytes = (uint64_t)info.memory * KIB;

	/* virDomainGetMaxVcpus() needs a running domain; this works on any. */
	n = virDomainGetVcpusFlags(dom, VIR_DOMAIN_AFFECT_CURRENT |
				   VIR_DOMAIN_VCPU_MAXIMUM);
	if (n < 0)
		n = virDomainGetMaxVcpus(dom);
	if (n < 0)
		return fail(err, errlen, -EIO, what, "virDomainGetVcpusFlags: %s",
			    virt_msg());
	s->vcpus = n;
	n = virDomainGetVcpusFlags(dom, VIR_DOMAIN_AFFECT_CURRENT);
	s->current_vcpus = n > 0 ? (unsigned int)n : info.nrVirtCpu;
	return 0;
}

static int virt_import(virDomainPtr dom, const char *what,
		       struct gfa_domain_spec *out, char *err, size_t errlen)
{
	struct gfa_domain_spec *s;
	char *xml;
	int rc;

	xml = virDomainGetXMLDesc(dom, 0);
	if (!xml)
		return fail(err, errlen, -EIO, what, "virDomainGetXMLDesc: %s",
			    virt_msg());
	s = calloc(1, sizeof(*s));
	if (!s) {
		free(xml);
		return fail(err, errlen, -ENOMEM, what, "out of memory");
	}
	rc = parse_doc(xml, strlen(xml), what, s, err, errlen);
	free(xml);
	if (!rc)
		rc = virt_api_fields(dom, what, s, err, errlen);
	if (!rc)
		rc = check_spec(s, what, err, errlen);
	if (!rc)
		*out = *s;
	free(s);
	return rc;
}

int gfa_domain_from_libvirt(const char *uri, const char *name,
			    struct gfa_domain_spec *out, char *err, size_t errlen)
{
	const char *shown = uri ? uri : "(default URI)";
	virConnectPtr conn;
	virDomainPtr dom;
	char *what;
	int rc;

	if (!name || !out)
		return fail(err, errlen, -EFAULT, "libvirt", "NULL argument");
	pthread_once(&virt_once, virt_init);
	if (virt_init_rc < 0)
		return fail(err, errlen, -EIO, "libvirt", "virInitialize failed");

	conn = virt_open(uri);
	if (!conn)
		return fail(err, errlen, -ECONNREFUSED, "libvirt",
			    "cannot connect to '%s': %s", shown, virt_msg());
	if (asprintf(&what, "libvirt domain '%s' on '%s'", name, shown) < 0) {
		virConnectClose(conn);
		return fail(err, errlen, -ENOMEM, "libvirt", "out of memory");
	}
	dom = virDomainLookupByName(conn, name);
	if (!dom) {
		virErrorPtr e = virGetLastError();

		if (e && e->code == VIR_ERR_NO_DOMAIN)
			rc = fail(err, errlen, -ENOENT, "libvirt",
				  "no domain named '%s' on '%s' (%s)", name, shown,
				  virt_msg());
		else
			rc = fail(err, errlen, -EIO, what, "lookup failed: %s",
				  virt_msg());
	} else {
		rc = virt_import(dom, what, out, err, errlen);
		virDomainFree(dom);
	}
	free(what);
	virConnectClose(conn);
	return rc;
}

/* ------------------------------------------------------------ formatting */

int gfa_domain_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB",
					     "PiB", "EiB" };
	unsigned int u = 0;
	int n;

	if (!buf)
		return -EFAULT;
	if (!len)
		return -EINVAL;
	while (bytes && u + 1 < sizeof(units) / sizeof(units[0]) && !(bytes % 1024)) {
		bytes /= 1024;
		u++;
	}
	n = snprintf(buf, len, "%" PRIu64 " %s", bytes, units[u]);
	return (size_t)n >= len ? -ENOSPC : n;
}

static void put_cells(struct strbuf *o, const struct gfa_domain_spec *s)
{
	char list[GFA_DOMAIN_MAX_VCPUS * 6], size[32];
	unsigned int i;

	if (!s->nr_cells) {
		sb_printf(o, ", no NUMA cells");
		return;
	}
	sb_printf(o, ", %u NUMA cell%s [", s->nr_cells, s->nr_cells == 1 ? "" : "s");
	for (i = 0; i < s->nr_cells; i++) {
		const struct gfa_domain_cell *c = &s->cells[i];

		format_bitmap(c->cpus, GFA_DOMAIN_MAX_VCPUS, list, sizeof(list));
		gfa_domain_format_size(c->memory_bytes, size, sizeof(size));
		sb_printf(o, "%s%u: cpus %s, %s", i ? "; " : "", i,
		    c->nr_cpus ? list : "none", size);
	}
	sb_printf(o, "]");
}

static void put_pages(struct strbuf *o, const struct gfa_domain_spec *s)
{
	char list[GFA_DOMAIN_MAX_CELLS * 4], size[32];
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

		gfa_domain_format_size(p->size_bytes, size, sizeof(size));
		if (p->nodeset) {
			format_bitmap(&p->nodeset, GFA_DOMAIN_MAX_CELLS, list, sizeof(list));
			sb_printf(o, "%s %s (cells %s)", i ? "," : "", size, list);
		} else {
			sb_printf(o, "%s %s (default)", i ? "," : "", size);
		}
	}
}

/* A caller-built spec: its counts must fit its arrays (parsed specs always do). */
static bool spec_counts_ok(const struct gfa_domain_spec *s)
{
	return s->nr_cells <= GFA_DOMAIN_MAX_CELLS && s->nr_pages <= GFA_DOMAIN_MAX_PAGES;
}

int gfa_domain_format(const struct gfa_domain_spec *s, char *buf, size_t len)
{
	static const char *const sources[] = { "default", "anonymous", "file", "memfd" };
	static const char *const access[] = { "default", "shared", "private" };
	struct strbuf o = { .buf = buf, .len = len };
	char size[32];

	if (!s || !buf)
		return -EFAULT;
	if (!len || !spec_counts_ok(s))
		return -EINVAL;
	buf[0] = '\0';
	gfa_domain_format_size(s->memory_bytes, size, sizeof(size));
	sb_printf(&o, "%s: memory %s", s->name, size);
	if (s->stated_memory_bytes && s->stated_memory_bytes != s->memory_bytes) {
		gfa_domain_format_size(s->stated_memory_bytes, size, sizeof(size));
		sb_printf(&o, " (the NUMA cells%s, as libvirt's QEMU driver sizes it; "
			  "<memory> says %s)", s->device_memory_bytes ? " plus memory devices"
			  : "", size);
	}
	if (s->current_memory_bytes != s->memory_bytes) {
		gfa_domain_format_size(s->current_memory_bytes, size, sizeof(size));
		sb_printf(&o, " (current %s)", size);
	}
	if (s->device_memory_bytes) {
		gfa_domain_format_size(s->device_memory_bytes, size, sizeof(size));
		sb_printf(&o, " incl. %s memory devices", size);
	}
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
	char size[32];
	uint64_t kib;

	while (d && (e = readdir(d))) {
		if (sscanf(e->d_name, "hugepages-%" SCNu64 "kB", &kib) != 1)
			continue;
		gfa_domain_format_size((uint64_t)kib * KIB, size, sizeof(size));
		sb_printf(&sb, "%s%s", sb.pos ? ", " : "", size);
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
	char size[32], cells[GFA_DOMAIN_MAX_CELLS * 4], have[256], what[GFA_DOMAIN_NAME_MAX + 16];
	unsigned int i;

	if (!s)
		return fail(err, errlen, -EFAULT, "domain", "NULL argument");
	if (!spec_counts_ok(s))
		return fail(err, errlen, -EINVAL, "domain", "counts too large for the arrays");
	if (!dir)
		dir = "/sys/kernel/mm/hugepages";
	for (i = 0; s->hugepages && i < s->nr_pages; i++) {
		const struct gfa_domain_page *p = &s->pages[i];

		if (host_has_page(dir, p->size_bytes))
			continue;
		gfa_domain_format_size(p->size_bytes, size, sizeof(size));
		format_bitmap(&p->nodeset, GFA_DOMAIN_MAX_CELLS, cells, sizeof(cells));
		host_page_list(dir, have, sizeof(have));
		snprintf(what, sizeof(what), "domain '%s'", s->name);
		return fail(err, errlen, -EOPNOTSUPP, what,
			    "hugepage size %s (%s%s) is not a page size of this host (it has %s); "
			    "libvirt's QEMU driver refuses to start it too", size,
			    p->nodeset ? "cells " : "default", p->nodeset ? cells : "", have);
	}
	return 0;
}
