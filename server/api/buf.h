/* buf.h - a growable byte buffer and the JSON writing helpers the routes build their answers
 * with. Plain memory: nothing here knows about HTTP or libmicrohttpd, so it can be used (and
 * tested) anywhere. Not thread-safe: one buffer belongs to one writer at a time.
 */
#ifndef ATTND_API_BUF_H
#define ATTND_API_BUF_H

#include <stdbool.h>
#include <stddef.h>

/* A malloc'd byte string that stays NUL-terminated. On allocation failure it sets oom and
 * ignores further appends, so callers check oom once at the end. {0} is an empty buffer. */
struct api_buf {
    char *p;
    size_t len, cap;
    bool oom;
};

/* Appends s[0..n). */
void api_buf_put(struct api_buf *b, const char *s, size_t n);
/* Appends the NUL-terminated s. */
void api_buf_puts(struct api_buf *b, const char *s);
/* Appends printf-formatted text. */
void api_buf_printf(struct api_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..n) as a quoted JSON string: escapes quotes, backslashes and control bytes, and
 * replaces every byte that is not part of valid UTF-8 with U+FFFD. */
void api_buf_json_str(struct api_buf *b, const char *s, size_t n);
/* Appends a float as the shortest text that round-trips a float ("%.9g"), or null if not finite. */
void api_buf_float(struct api_buf *b, double v);
/* Hands the bytes to the caller (who frees them) and resets b; NULL if b->oom. */
char *api_buf_take(struct api_buf *b);
/* Frees the bytes and resets b to empty. */
void api_buf_free(struct api_buf *b);

#endif
