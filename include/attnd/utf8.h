/* utf8.h - the one home of UTF-8 handling: checks for text that leaves the daemon (JSON strings
 * must be valid UTF-8), and the encoder/decoder the tokenizer uses. */
#ifndef ATTND_UTF8_H
#define ATTND_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence starting at s (1..4), or 0 if the bytes there are not
 * a complete, valid sequence (overlong forms, surrogates and code points > U+10FFFF are
 * invalid). n is the number of bytes available. */
size_t utf8_seq_len(const char *s, size_t n);
/* Length of the longest prefix of s[0..n) that is valid UTF-8 (the offset of the first bad byte). */
size_t utf8_valid_prefix(const char *s, size_t n);
/* true if s[0..n) is entirely valid UTF-8. */
bool utf8_valid(const char *s, size_t n);
/* The code point of the valid sequence s[0..l) (l from utf8_seq_len, 1..4). */
uint32_t utf8_decode(const char *s, size_t l);
/* Writes cp (at most U+10FFFF) as UTF-8 into out (room for 4 bytes); returns its length. */
size_t utf8_encode(uint32_t cp, char *out);
/* A malloc'd, NUL-terminated copy of s[0..n) with each invalid byte replaced by U+FFFD
 * (and NUL bytes kept). *out_len (if not NULL) receives its length. NULL on allocation failure. */
char *utf8_sanitize(const char *s, size_t n, size_t *out_len);
/* The same with NUL bytes replaced too, so the copy is one whole C string (for cJSON). */
char *utf8_sanitize_cstr(const char *s, size_t n);

#endif
