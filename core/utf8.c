/* utf8.c - see utf8.h. */
#include "attnd/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t utf8_seq_len(const char *s, size_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    if (n == 0) return 0;
    if (u[0] < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if ((u[0] & 0xe0) == 0xc0) len = 2, cp = u[0] & 0x1f, min = 0x80;
    else if ((u[0] & 0xf0) == 0xe0) len = 3, cp = u[0] & 0x0f, min = 0x800;
    else if ((u[0] & 0xf8) == 0xf0) len = 4, cp = u[0] & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (u[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

size_t utf8_valid_prefix(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq_len(s + i, n - i);
        if (!l) break;
        i += l;
    }
    return i;
}

bool utf8_valid(const char *s, size_t n) { return utf8_valid_prefix(s, n) == n; }

uint32_t utf8_decode(const char *s, size_t l)
{
    const uint8_t *u = (const uint8_t *)s;
    if (l == 1) return u[0];
    if (l == 2) return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    if (l == 3) return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
           (u[3] & 0x3F);
}

size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* utf8_sanitize, with NUL bytes also replaced if replace_nul. */
static char *sanitize(const char *s, size_t n, bool replace_nul, size_t *out_len)
{
    if (n > (SIZE_MAX - 1) / 3) return NULL;
    char *o = malloc(n * 3 + 1), *p = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n;) {
        size_t l = replace_nul && !s[i] ? 0 : utf8_seq_len(s + i, n - i);
        if (l) {
            memcpy(p, s + i, l);
            p += l;
            i += l;
        } else {
            memcpy(p, "\xef\xbf\xbd", 3);
            p += 3;
            i++;
        }
    }
    *p = 0;
    if (out_len) *out_len = (size_t)(p - o);
    return o;
}

char *utf8_sanitize(const char *s, size_t n, size_t *out_len) { return sanitize(s, n, false, out_len); }

char *utf8_sanitize_cstr(const char *s, size_t n) { return sanitize(s, n, true, NULL); }
