/* buf.c - see buf.h. */
#include "server/api/buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"

static bool buf_reserve(struct api_buf *b, size_t extra)
{
    if (b->oom) return false;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return true;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < need) nc *= 2;
    char *p = realloc(b->p, nc);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = nc;
    return true;
}

void api_buf_put(struct api_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void api_buf_puts(struct api_buf *b, const char *s) { api_buf_put(b, s, strlen(s)); }

void api_buf_printf(struct api_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        api_buf_put(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the longest prefix of s[0..n) that needs no escaping. */
static size_t plain_run(const char *s, size_t n)
{
    size_t j = 0;
    while (j < n) {
        unsigned char ch = (unsigned char)s[j];
        if (ch < 0x20 || ch == '"' || ch == '\\') break;
        if (ch < 0x80) {
            j++;
            continue;
        }
        size_t l = utf8_seq_len(s + j, n - j);
        if (!l) break;
        j += l;
    }
    return j;
}

/* Appends the escape for the one byte ch that plain_run() stopped at. */
static void put_escape(struct api_buf *b, unsigned char ch)
{
    if (ch == '"') api_buf_put(b, "\\\"", 2);
    else if (ch == '\\') api_buf_put(b, "\\\\", 2);
    else if (ch == '\n') api_buf_put(b, "\\n", 2);
    else if (ch == '\r') api_buf_put(b, "\\r", 2);
    else if (ch == '\t') api_buf_put(b, "\\t", 2);
    else if (ch < 0x20) api_buf_printf(b, "\\u%04x", ch);
    else api_buf_put(b, "\xEF\xBF\xBD", 3); /* a byte that is not valid UTF-8 */
}

void api_buf_json_str(struct api_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n + 2)) return;
    api_buf_put(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        /* copy the longest run that needs no escaping in one go */
        size_t j = i + plain_run(s + i, n - i);
        api_buf_put(b, s + i, j - i);
        if (j >= n) break;
        put_escape(b, (unsigned char)s[j]);
        i = j + 1;
    }
    api_buf_put(b, "\"", 1);
}

void api_buf_float(struct api_buf *b, double v)
{
    if (!isfinite(v)) api_buf_put(b, "null", 4);
    else api_buf_printf(b, "%.9g", v);
}

char *api_buf_take(struct api_buf *b)
{
    char *p = NULL;
    if (!b->oom) {
        if (!b->p) buf_reserve(b, 0);
        p = b->oom ? NULL : b->p;
    }
    if (!p) free(b->p);
    *b = (struct api_buf){0};
    return p;
}

void api_buf_free(struct api_buf *b)
{
    free(b->p);
    *b = (struct api_buf){0};
}
