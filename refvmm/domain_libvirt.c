// SPDX-License-Identifier: MIT
/*
 * The domain import from a running libvirt: the domain's XML through the API, and the
 * fields the API exposes taken from the API, so both paths give the same spec.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include "refvmm/domain_internal.h"

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
static int virt_api_fields(virDomainPtr dom, struct gfa_domain_spec *s, const struct msgs *m)
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
	memcpy(s->name, name, strlen(name) + 1); /* length checked above */

	if (virDomainGetInfo(dom, &info) < 0)
		return fail(m, -EIO, "virDomainGetInfo: %s", virt_msg());
	maxmem = virDomainGetMaxMemory(dom);
	if (!maxmem)
		return fail(m, -EIO, "virDomainGetMaxMemory: %s", virt_msg());
	s->memory_bytes = (uint64_t)maxmem * KIB;
	s->current_memory_bytes = (uint64_t)info.memory * KIB;

	/* virDomainGetMaxVcpus() needs a running domain; this works on any. */
	n = virDomainGetVcpusFlags(dom, VIR_DOMAIN_AFFECT_CURRENT | VIR_DOMAIN_VCPU_MAXIMUM);
	if (n < 0)
		n = virDomainGetMaxVcpus(dom);
	if (n < 0)
		return fail(m, -EIO, "virDomainGetVcpusFlags: %s", virt_msg());
	s->vcpus = n;
	n = virDomainGetVcpusFlags(dom, VIR_DOMAIN_AFFECT_CURRENT);
	s->current_vcpus = n > 0 ? (unsigned int)n : info.nrVirtCpu;
	return 0;
}

static int virt_import(virDomainPtr dom, struct gfa_domain_spec *out, const struct msgs *m)
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
	rc = domain_parse_doc(xml, strlen(xml), s, m);
	free(xml);
	if (!rc)
		rc = virt_api_fields(dom, s, m);
	if (!rc)
		rc = domain_check_spec(s, m);
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

int gfa_domain_from_libvirt(const char *uri, const char *name, struct gfa_domain_spec *out,
			    char *err, size_t errlen)
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
