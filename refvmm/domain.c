// SPDX-License-Identifier: MIT
/*
 * refvmm/domain.c - libvirt domain import (see include/gfa/refvmm.h): the entry points
 * from an XML string or file.  The parts: refvmm/domain_internal.h.
 *
 * One parser (libxml2 + XPath) turns a <domain> document into a
 * struct gfa_domain_spec; one validator checks it the way libvirt would.
 * The libvirt path overrides the fields the API exposes with the API's
 * values before validating, so both paths produce the same struct.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include "refvmm/domain_internal.h"

/*
 * Parse @len bytes of @xml into *s (zeroed by the caller) without
 * validating.  Nothing is printed: libxml2's message goes to err.
 */
int domain_parse_doc(const char *xml, size_t len, struct gfa_domain_spec *s, const struct msgs *m)
{
	struct xml_in in = { .m = *m };
	int rc;

	if (len > GFA_DOMAIN_XML_MAX)
		return fail(m, -EFBIG, "document: larger than %u MiB; accepted: %u MiB at most",
			    GFA_DOMAIN_XML_MAX >> 20, GFA_DOMAIN_XML_MAX >> 20);
	in.doc = domain_xml_read(xml, len, m);
	if (!in.doc)
		return -EBADMSG; /* or -ENOMEM, said in m */
	rc = domain_check_root(in.doc, m);
	if (!rc) {
		in.xp = xmlXPathNewContext(in.doc);
		rc = in.xp ? domain_parse_parts(&in, s) : fail(m, -ENOMEM, "out of memory");
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
	rc = domain_parse_doc(xml, len, s, m);
	if (!rc)
		rc = domain_check_spec(s, m);
	if (!rc)
		*out = *s;
	free(s);
	return rc;
}

int gfa_domain_from_xml_string(const char *xml, struct gfa_domain_spec *out, char *err,
			       size_t errlen)
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
				rc = fail(m, -EFBIG,
					  "document: larger than %u MiB; accepted: "
					  "%u MiB at most",
					  GFA_DOMAIN_XML_MAX >> 20, GFA_DOMAIN_XML_MAX >> 20);
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

int gfa_domain_from_xml_file(const char *path, struct gfa_domain_spec *out, char *err,
			     size_t errlen)
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
