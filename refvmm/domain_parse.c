// SPDX-License-Identifier: MIT
/*
 * The domain import's parser: the <domain> elements (name, memory, vCPUs, NUMA cells,
 * memory backing) into struct gfa_domain_spec, without validating them.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include "refvmm/domain_internal.h"

static int parse_name(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlNodePtr n = domain_xml_first(in, "/domain/name");
	char *name = n ? (char *)xmlNodeGetContent(n) : NULL;
	int rc = 0;

	if (!name || !*name)
		rc = fail(&in->m, -EBADMSG, "<name>: missing; accepted: a <name> of 1-%d bytes",
			  GFA_DOMAIN_NAME_MAX - 1);
	else if (strlen(name) >= sizeof(s->name))
		rc = fail(&in->m, -ERANGE, "<name>: longer than %d bytes; accepted: 1-%d bytes",
			  GFA_DOMAIN_NAME_MAX - 1, GFA_DOMAIN_NAME_MAX - 1);
	else
		memcpy(s->name, name, strlen(name) + 1); /* length checked above */
	xmlFree(name);
	return rc;
}

/* "memory device 2 <memory model='dimm'><target><node>": a device's element. */
static void device_where(xmlNodePtr dev, int nr, const char *child, char *buf, size_t len)
{
	char *model = domain_xml_prop(dev, "model");

	if (model)
		snprintf(buf, len, "memory device %d <memory model='%.32s'><target><%s>", nr, model,
			 child);
	else
		snprintf(buf, len, "memory device %d <memory><target><%s>", nr, child);
	xmlFree(model);
}

/* One <devices><memory>: its <target><size> counts into the devices' sum. */
static int parse_device(struct xml_in *in, xmlNodePtr dev, int nr, struct gfa_domain_spec *s)
{
	xmlNodePtr size = domain_xml_child(domain_xml_child(dev, "target"), "size");
	char where[128];
	uint64_t b = 0;
	int rc;

	if (!size)
		return 0;
	device_where(dev, nr, "size", where, sizeof(where));
	rc = domain_xml_size(in, size, NULL, where, &b);
	if (rc)
		return rc;
	if (b > UINT64_MAX - s->device_memory_bytes)
		return fail(&in->m, -ERANGE,
			    "%s: the memory devices add up to more than "
			    "16 EiB; accepted: a sum below 16 EiB",
			    where);
	s->device_memory_bytes += b;
	return 0;
}

/* <memory>, <currentMemory>, <devices><memory> sizes.  Missing <memory> is 0. */
static int parse_memory(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlXPathObjectPtr devs;
	xmlNodePtr n;
	int i, rc = 0;

	n = domain_xml_first(in, "/domain/memory");
	if (n && (rc = domain_xml_size(in, n, NULL, "<memory>", &s->memory_bytes)))
		return rc;
	n = domain_xml_first(in, "/domain/currentMemory");
	if (n && (rc = domain_xml_size(in, n, NULL, "<currentMemory>", &s->current_memory_bytes)))
		return rc;

	devs = domain_xml_find(in, "/domain/devices/memory");
	for (i = 0; !rc && i < domain_xml_count(devs); i++)
		rc = parse_device(in, domain_xml_node(devs, i), i + 1, s);
	xmlXPathFreeObject(devs);
	return rc;
}

/* <vcpu current='N'>M</vcpu>; libvirt's default is one vCPU. */
static int parse_vcpus(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlNodePtr n = domain_xml_first(in, "/domain/vcpu");
	char *cur;
	int rc;

	s->vcpus = 1;
	if (!n)
		return 0;
	rc = domain_xml_uint(in, n, NULL, "<vcpu>", 1, GFA_DOMAIN_MAX_VCPUS, &s->vcpus);
	if (rc)
		return rc;
	cur = domain_xml_prop(n, "current");
	if (cur)
		rc = domain_xml_uint(in, n, "current", "<vcpu current>", 1, GFA_DOMAIN_MAX_VCPUS,
				     &s->current_vcpus);
	xmlFree(cur);
	return rc;
}

static int parse_cell_cpus(struct xml_in *in, xmlNodePtr n, struct gfa_domain_cell *c)
{
	char *cpus = domain_xml_prop(n, "cpus");
	int rc = 0;

	if (cpus)
		rc = domain_parse_bitmap(cpus, c->cpus, GFA_DOMAIN_MAX_VCPUS);
	if (rc == -ERANGE)
		fail(&in->m, rc,
		     "<cell id='%u' cpus='%s'>: names a vCPU above %d; accepted: "
		     "vCPUs 0-%d",
		     c->id, cpus, GFA_DOMAIN_MAX_VCPUS - 1, GFA_DOMAIN_MAX_VCPUS - 1);
	else if (rc)
		fail(&in->m, rc,
		     "<cell id='%u' cpus='%s'>: not a list of vCPUs; accepted: "
		     "a list such as 0-3,^2,8",
		     c->id, cpus);
	c->nr_cpus = domain_popcount_bits(c->cpus, GFA_DOMAIN_MAX_VCPUS / 64);
	xmlFree(cpus);
	return rc;
}

static int parse_cell(struct xml_in *in, xmlNodePtr n, int index, struct gfa_domain_spec *s)
{
	struct gfa_domain_cell *c;
	unsigned int id = index;
	char *idstr = domain_xml_prop(n, "id");
	char where[64];
	int rc = 0;

	/* libvirt numbers cells without an id by position. */
	if (idstr)
		rc = domain_xml_uint(in, n, "id", "<cell id>", 0, GFA_DOMAIN_MAX_CELLS - 1, &id);
	xmlFree(idstr);
	if (rc)
		return rc;
	c = &s->cells[id];
	if (c->memory_bytes) /* every parsed cell has memory > 0 */
		return fail(&in->m, -EINVAL,
			    "<cell id='%u'>: appears twice; accepted: each "
			    "id once",
			    id);
	c->id = id;

	snprintf(where, sizeof(where), "<cell id='%u' memory>", id);
	rc = domain_xml_size(in, n, "memory", where, &c->memory_bytes);
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

	if (!domain_xml_first(in, "/domain/cpu/numa[1]"))
		return 0;
	cells = domain_xml_find(in, "/domain/cpu/numa[1]/cell");
	n = domain_xml_count(cells);
	if (n == 0)
		rc = fail(&in->m, -EINVAL, "<numa>: no <cell>; accepted: one <cell> or more");
	else if (n > GFA_DOMAIN_MAX_CELLS)
		rc = fail(&in->m, -ERANGE, "<numa>: %d cells; accepted: %d at most", n,
			  GFA_DOMAIN_MAX_CELLS);
	for (i = 0; !rc && i < n; i++)
		rc = parse_cell(in, domain_xml_node(cells, i), i, s);
	xmlXPathFreeObject(cells);
	if (rc)
		return rc;
	s->nr_cells = n;
	/* n distinct ids below GFA_DOMAIN_MAX_CELLS: contiguous iff all < n. */
	for (i = 0; i < n; i++)
		if (!s->cells[i].memory_bytes)
			return fail(&in->m, -EINVAL,
				    "<numa>: no <cell id='%d'>; accepted: ids "
				    "0-%d, each once",
				    i, n - 1);
	return 0;
}

static int parse_page(struct xml_in *in, xmlNodePtr n, int nr, struct gfa_domain_page *p)
{
	char where[64], *nodeset;
	int rc;

	snprintf(where, sizeof(where), "hugepage %d <page size>", nr);
	rc = domain_xml_size(in, n, "size", where, &p->size_bytes);
	if (rc)
		return rc;
	nodeset = domain_xml_prop(n, "nodeset");
	if (nodeset) {
		rc = domain_parse_bitmap(nodeset, &p->nodeset, GFA_DOMAIN_MAX_CELLS);
		if (rc || !p->nodeset)
			fail(&in->m, -EINVAL,
			     "hugepage %d <page nodeset='%s'>: %s; accepted: "
			     "a list of cell ids 0-%d such as 0-1,3",
			     nr, nodeset, rc ? "not a list of cell ids" : "names no cell",
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
	xmlNodePtr n = domain_xml_first(in, "/domain/memoryBacking/source");
	char *v;
	int i, rc = 0;

	if (!n)
		return 0;
	v = domain_xml_prop(n, "type");
	for (i = 1; v && i < (int)ARRAY_SIZE(sources); i++)
		if (!strcmp(v, sources[i]))
			s->source = i;
	if (s->source == GFA_DOMAIN_SOURCE_DEFAULT)
		rc = fail(&in->m, -EINVAL,
			  "<memoryBacking><source type='%s'>: unknown type; "
			  "accepted: anonymous, file, memfd",
			  v ? v : "");
	xmlFree(v);
	return rc;
}

static int parse_access(struct xml_in *in, struct gfa_domain_spec *s)
{
	xmlNodePtr n = domain_xml_first(in, "/domain/memoryBacking/access");
	char *v;
	int rc = 0;

	if (!n)
		return 0;
	v = domain_xml_prop(n, "mode");
	if (v && !strcmp(v, "shared"))
		s->access = GFA_DOMAIN_ACCESS_SHARED;
	else if (v && !strcmp(v, "private"))
		s->access = GFA_DOMAIN_ACCESS_PRIVATE;
	else
		rc = fail(&in->m, -EINVAL,
			  "<memoryBacking><access mode='%s'>: unknown mode; "
			  "accepted: shared, private",
			  v ? v : "");
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
	if (rc || !domain_xml_first(in, "/domain/memoryBacking/hugepages"))
		return rc;
	s->hugepages = true;
	pages = domain_xml_find(in, "/domain/memoryBacking/hugepages/page");
	if (domain_xml_count(pages) > GFA_DOMAIN_MAX_PAGES)
		rc = fail(&in->m, -ERANGE, "<hugepages>: %d <page> sizes; accepted: %d at most",
			  domain_xml_count(pages), GFA_DOMAIN_MAX_PAGES);
	for (i = 0; !rc && i < domain_xml_count(pages); i++)
		rc = parse_page(in, domain_xml_node(pages, i), i + 1, &s->pages[i]);
	if (!rc)
		s->nr_pages = domain_xml_count(pages);
	xmlXPathFreeObject(pages);
	return rc;
}

/* Without NUMA cells <memory> is the size; libvirt refuses a domain without one. */
static int check_memory_given(struct xml_in *in, const struct gfa_domain_spec *s)
{
	if (s->nr_cells || s->memory_bytes)
		return 0;
	if (!domain_xml_first(in, "/domain/memory"))
		return fail(&in->m, -EINVAL,
			    "<memory>: missing, and no NUMA cells give the "
			    "size; accepted: a <memory> above 0, or <numa> cells");
	return fail(&in->m, -EINVAL, "<memory>: zero; accepted: a size above 0");
}

/* "cell 0" or "cells 0-3": the ids of @n cells, for messages. */
struct size_text domain_cell_range(unsigned int n)
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
	if (domain_parse_digits(p, &v, &end) || *end || v > UINT_MAX)
		return -EINVAL;
	*id = v;
	return 0;
}

/* Both libvirt drivers refuse a memory device on a NUMA cell the domain has not. */
static int check_device_node(struct xml_in *in, xmlNodePtr dev, int nr, unsigned int ncells)
{
	xmlNodePtr node = domain_xml_child(domain_xml_child(dev, "target"), "node");
	char *text = node ? (char *)xmlNodeGetContent(node) : NULL;
	char where[128];
	unsigned int id = 0;
	int rc = parse_node_id(text, &id);

	device_where(dev, nr, "node", where, sizeof(where));
	if (rc == -ENODATA)
		rc = 0;
	else if (rc)
		rc = fail(&in->m, rc, "%s: '%s' is not a cell id; accepted: a whole number", where,
			  text);
	else if (!ncells)
		rc = fail(&in->m, -EINVAL,
			  "%s: names NUMA cell %u, but the domain has no NUMA "
			  "cells; accepted: no <node>, or <numa> cells",
			  where, id);
	else if (id >= ncells)
		rc = fail(&in->m, -EINVAL,
			  "%s: names NUMA cell %u, which does not exist; "
			  "accepted: %s",
			  where, id, domain_cell_range(ncells).s);
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
	devs = domain_xml_find(in, "/domain/devices/memory");
	for (i = 0; !rc && i < domain_xml_count(devs); i++)
		rc = check_device_node(in, domain_xml_node(devs, i), i + 1, s->nr_cells);
	xmlXPathFreeObject(devs);
	return rc;
}

int domain_parse_parts(struct xml_in *in, struct gfa_domain_spec *s)
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
