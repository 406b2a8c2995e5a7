// SPDX-License-Identifier: MIT
/*
 * The domain import's numbers: sizes with libvirt's units, and the bitmaps of CPU and
 * node lists ("0-3,^2").
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <strings.h>
#include "refvmm/domain_internal.h"

/* ---------------------------------------------------------------- numbers */

static const char *skip_blank(const char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	return s;
}

/* Decimal digits only; *end points after them.  -EINVAL no digit, -ERANGE. */
int domain_parse_digits(const char *s, uint64_t *v, const char **end)
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
int domain_parse_u64(const char *s, uint64_t *v)
{
	const char *end;
	uint64_t x;
	int rc;

	rc = domain_parse_digits(skip_blank(s), &x, &end);
	if (rc)
		return rc;
	if (*skip_blank(end))
		return -EINVAL;
	*v = x;
	return 0;
}

/* libvirt's unit names (virScaleInteger), case-insensitive. */
int domain_unit_scale(const char *unit, uint64_t *scale)
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
		*scale *= base; /* at most 1024^6 = 2^60: no overflow */
	return 0;
}

int gfa_domain_parse_size(const char *value, const char *unit, uint64_t *bytes)
{
	uint64_t v, scale;
	int rc;

	if (!value || !bytes)
		return -EFAULT;
	rc = domain_unit_scale(unit, &scale);
	if (rc)
		return rc;
	rc = domain_parse_u64(value, &v);
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
int domain_parse_bitmap(const char *s, uint64_t *bits, unsigned int nbits)
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
		rc = domain_parse_digits(p, &lo, &p);
		if (rc)
			return rc;
		p = skip_blank(p);
		hi = lo;
		if (*p == '-' && !neg) {
			rc = domain_parse_digits(skip_blank(p + 1), &hi, &p);
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
int domain_format_bitmap(const uint64_t *bits, unsigned int nbits, char *buf, size_t len)
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

unsigned int domain_popcount_bits(const uint64_t *bits, unsigned int nwords)
{
	unsigned int i, n = 0;

	for (i = 0; i < nwords; i++)
		n += __builtin_popcountll(bits[i]);
	return n;
}
