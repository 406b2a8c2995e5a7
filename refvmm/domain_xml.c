// SPDX-License-Identifier: MIT
/*
 * The domain import's libxml2 side: reading a document (its errors in the import's own
 * form), XPath look-ups, and attributes read as sizes and numbers.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <libxml/parser.h>
#include "refvmm/domain_internal.h"

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
		return fail(m, -EBADMSG,
			    "line %d: not well-formed XML, </%s> does not close "
			    "<%s>; accepted: </%s>",
			    e->line, e->str2, e->str1, e->str1);
	xml_error_text(e && e->message ? e->message : "cannot parse", text, sizeof(text));
	return fail(m, -EBADMSG,
		    "line %d: not well-formed XML, %s; accepted: well-formed "
		    "XML",
		    e ? e->line : 0, text);
}

/* The document, or NULL with the reason in m; nothing is printed. */
xmlDocPtr domain_xml_read(const char *xml, size_t len, const struct msgs *m)
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
int domain_check_root(xmlDocPtr doc, const struct msgs *m)
{
	xmlNodePtr root = xmlDocGetRootElement(doc);

	/* Entity references stay in the tree and expand in xmlNodeGetContent(). */
	if (doc->intSubset && (doc->intSubset->entities || doc->intSubset->pentities))
		return fail(m, -EBADMSG,
			    "<!DOCTYPE>: entity declarations; accepted: none "
			    "(domain XML has none)");
	if (!root || strcmp((const char *)root->name, "domain"))
		return fail(m, -EBADMSG,
			    "root element <%s>: not <domain>; accepted: a "
			    "<domain> document",
			    root ? (const char *)root->name : "");
	return 0;
}

/*
 * Nodes matching the absolute path @expr; caller frees the result.  The
 * expressions are fixed, so evaluation only fails on allocation failure,
 * which then reads as "no such element".
 */
xmlXPathObjectPtr domain_xml_find(struct xml_in *in, const char *expr)
{
	xmlXPathObjectPtr obj;

	obj = xmlXPathEvalExpression((const xmlChar *)expr, in->xp);
	if (obj && obj->type != XPATH_NODESET) {
		xmlXPathFreeObject(obj);
		return NULL;
	}
	return obj;
}

int domain_xml_count(xmlXPathObjectPtr obj)
{
	return obj && obj->nodesetval ? obj->nodesetval->nodeNr : 0;
}

xmlNodePtr domain_xml_node(xmlXPathObjectPtr obj, int i)
{
	return obj->nodesetval->nodeTab[i];
}

/* First node matching @expr, or NULL. */
xmlNodePtr domain_xml_first(struct xml_in *in, const char *expr)
{
	xmlXPathObjectPtr obj = domain_xml_find(in, expr);
	xmlNodePtr n = domain_xml_count(obj) ? domain_xml_node(obj, 0) : NULL;

	xmlXPathFreeObject(obj);
	return n;
}

/* The first child element of @n called @name (libvirt's "./name"), or NULL. */
xmlNodePtr domain_xml_child(xmlNodePtr n, const char *name)
{
	for (n = n ? n->children : NULL; n; n = n->next)
		if (n->type == XML_ELEMENT_NODE && !strcmp((const char *)n->name, name))
			return n;
	return NULL;
}

char *domain_xml_prop(xmlNodePtr n, const char *name)
{
	return (char *)xmlGetProp(n, (const xmlChar *)name);
}

/* Why a size could not be read, in the one message form. */
static int size_error(const struct msgs *m, int rc, const char *where, const char *value,
		      const char *unit)
{
	if (!value)
		return fail(m, -EINVAL,
			    "%s: missing; accepted: a size, such as 2 with "
			    "unit='GiB'",
			    where);
	if (rc == -ERANGE)
		return fail(m, rc,
			    "%s: larger than 8 EiB; accepted: sizes below 8 EiB "
			    "(libvirt's limit)",
			    where);
	if (unit && domain_unit_scale(unit, &(uint64_t){ 0 }))
		return fail(m, rc, "%s: unknown unit '%s'; accepted: " UNIT_NAMES, where, unit);
	return fail(m, rc,
		    "%s: '%s' is not a whole number; accepted: decimal digits, "
		    "the unit in unit=",
		    where, value);
}

/*
 * A libvirt memory size: @value (element text if @attr is NULL, else that
 * attribute) scaled by the "unit" attribute, rounded up to a whole KiB as
 * libvirt stores it.  @where names the item in messages.
 */
int domain_xml_size(struct xml_in *in, xmlNodePtr n, const char *attr, const char *where,
		    uint64_t *bytes)
{
	char *value = attr ? domain_xml_prop(n, attr) : (char *)xmlNodeGetContent(n);
	char *unit = domain_xml_prop(n, "unit");
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
int domain_xml_uint(struct xml_in *in, xmlNodePtr n, const char *attr, const char *where,
		    unsigned int lo, unsigned int hi, unsigned int *out)
{
	char *value = attr ? domain_xml_prop(n, attr) : (char *)xmlNodeGetContent(n);
	uint64_t v = 0;
	int rc;

	rc = value ? domain_parse_u64(value, &v) : -EINVAL;
	if (rc == -ERANGE || (!rc && v > hi))
		rc = fail(&in->m, -ERANGE, "%s: larger than %u; accepted: %u-%u", where, hi, lo,
			  hi);
	else if (rc)
		rc = fail(&in->m, -EINVAL, "%s: '%s' is not a whole number; accepted: %u-%u", where,
			  value ? value : "", lo, hi);
	else if (v < lo)
		rc = fail(&in->m, -EINVAL, "%s: %" PRIu64 " is below %u; accepted: %u-%u", where, v,
			  lo, lo, hi);
	else
		*out = v;
	xmlFree(value);
	return rc;
}
