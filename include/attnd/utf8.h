/* utf8.h - UTF-8 checks for text that leaves the daemon (JSON strings must be valid UTF-8). */
#ifndef ATTND_UTF8_H
#define ATTND_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the valid UTF-8 sequence starting at s (1..4), or 0 if the bytes there are not
 * a complete, valid sequence (overlong forms, surrogates and code points > U+10FFFF are
 * invalid). n is the number of bytes available. */
size_t utf8_seq_len(const char *s, size_t n);
/* true if s[0..n) is entirely valid UTF-8. */
bool utf8_valid(const char *s, size_t n);
/* A malloc'd, NUL-terminated copy of s[0..n) with each invalid byte replaced by U+FFFD
 * (and NUL bytes kept). *out_len (if not NULL) receives its length. NULL on allocation failure. */
char *utf8_sanitize(const char *s, size_t n, size_t *out_len);

#endif
