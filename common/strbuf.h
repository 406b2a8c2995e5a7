/* SPDX-License-Identifier: MIT */
/*
 * A text built by appending, snprintf-style: pos counts the bytes the whole text needs,
 * buf holds what fits.  The one copy of it for every layer (libgfa's formatters, the
 * reference VMM, gfactl and the benchmarks): header-only, because libgfa.so keeps its
 * internal symbols local and a VMM may link the reference VMM against that .so.
 */
#ifndef GFA_STRBUF_H
#define GFA_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct strbuf {
	char *buf;
	size_t len; /* size of buf (0: only count) */
	size_t pos; /* length the full text needs so far */
};

static inline void __attribute__((format(printf, 2, 0)))
sb_vprintf(struct strbuf *sb, const char *fmt, va_list ap)
{
	size_t room = sb->pos < sb->len ? sb->len - sb->pos : 0;
	int n = vsnprintf(room ? sb->buf + sb->pos : NULL, room, fmt, ap);

	if (n > 0)
		sb->pos += (size_t)n;
}

static inline void __attribute__((format(printf, 2, 3)))
sb_printf(struct strbuf *sb, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sb_vprintf(sb, fmt, ap);
	va_end(ap);
}

/* Whether the text was cut (it needs more than buf holds with its NUL). */
static inline bool sb_overflowed(const struct strbuf *sb)
{
	return sb->pos >= sb->len;
}

/* NUL-terminate a cut text; returns the length the whole text needs, as snprintf. */
static inline int sb_finish(struct strbuf *sb)
{
	if (sb->len && sb->pos >= sb->len)
		sb->buf[sb->len - 1] = '\0';
	return (int)sb->pos;
}

#endif /* GFA_STRBUF_H */
