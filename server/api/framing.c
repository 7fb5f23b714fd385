/* framing.c - see framing.h. */
#include "server/api/framing.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/api/errors.h"

#define FOLD_GAP_MAX 256 /* most white space bytes between a header's ':' and its value we look at */

/* What a pass over the headers found; the first problem wins. */
struct scan {
    int n_length, n_coding;     /* Content-Length / Transfer-Encoding lines */
    const char *coding;         /* the Transfer-Encoding value */
    size_t coding_len;
    int code;                   /* 0, or the status of the first problem */
    char why[160];
};

/* RFC 9110 section 5.6.2: tchar. */
static bool is_tchar(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) return true;
    return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* A printable copy of a header name for a message (cut, odd bytes as '?'). */
static void show_name(const char *key, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < cap; i++) out[o++] = key[i] > 0x20 && key[i] < 0x7f ? key[i] : '?';
    out[o] = 0;
}

/* libmicrohttpd 0.9.75 keeps each header's name and value in its request buffer as they came:
 * name, the ':' (now a NUL), optional white space, value. An obs-fold line is glued onto a copy
 * of the name made elsewhere in the connection's pool, so name and value are no longer
 * adjacent: that is how a fold is recognised (the library has no option to refuse one). */
static bool adjacent(const char *key, size_t key_size, const char *value)
{
    uintptr_t k = (uintptr_t)(key + key_size), v = (uintptr_t)value;
    if (v <= k || v - k > 1 + FOLD_GAP_MAX) return false;
    for (const char *p = key + key_size + 1; p < value; p++)
        if (*p != ' ' && *p != '\t') return false;
    return true;
}

static void problem(struct scan *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void problem(struct scan *s, int code, const char *fmt, ...)
{
    if (s->code) return;
    s->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->why, sizeof s->why, fmt, ap);
    va_end(ap);
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size)
{
    struct scan *s = cls;
    char name[48];
    show_name(key, key_size, name, sizeof name);
    if (!key_size) problem(s, 400, "a header line has an empty name");
    for (size_t i = 0; i < key_size; i++) {
        unsigned char ch = (unsigned char)key[i];
        if (ch == ' ' || ch == '\t') problem(s, 400, "white space before the ':' of header '%s'", name);
        else if (!is_tchar(ch)) problem(s, 400, "header name '%s' has a byte not allowed in a field name", name);
    }
    for (size_t i = 0; i < value_size; i++) {
        unsigned char ch = (unsigned char)value[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            problem(s, 400, "header '%s' has a control byte (a bare CR?) in its value", name);
    }
    if (value && !adjacent(key, key_size, value))
        problem(s, 400, "header '%s' is continued on the next line (obs-fold, refused as RFC 9112 5.2 allows)", name);
    if (key_size == 14 && !strncasecmp(key, "Content-Length", 14)) s->n_length++;
    if (key_size == 17 && !strncasecmp(key, "Transfer-Encoding", 17)) {
        s->n_coding++;
        s->coding = value ? value : "";
        s->coding_len = value ? value_size : 0;
    }
    return MHD_YES;
}

/* The Transfer-Encoding value: chunked alone (exactly as libmicrohttpd compares it), else
 * what to answer. */
static void check_coding(struct scan *s)
{
    if (s->coding_len == 7 && !strncasecmp(s->coding, "chunked", 7)) return;
    /* the last coding, white space trimmed */
    size_t end = s->coding_len;
    while (end && (s->coding[end - 1] == ' ' || s->coding[end - 1] == '\t')) end--;
    size_t start = end;
    while (start && s->coding[start - 1] != ',') start--;
    while (start < end && (s->coding[start] == ' ' || s->coding[start] == '\t')) start++;
    bool last_chunked = end - start == 7 && !strncasecmp(s->coding + start, "chunked", 7);
    char shown[64];
    show_name(s->coding, s->coding_len, shown, sizeof shown);
    if (last_chunked && memchr(s->coding, ',', s->coding_len))
        problem(s, 501, "Transfer-Encoding '%s' is not implemented (only chunked alone is)", shown);
    else problem(s, 400, "Transfer-Encoding '%s' does not end in chunked alone: the body's length is unknown",
                 shown);
}

bool api_framing_check(struct api_conn *c, enum MHD_Result *ret)
{
    struct scan s = {0};
    MHD_get_connection_values_n(c->mc, MHD_HEADER_KIND, scan_header, &s);
    if (s.n_length > 1) problem(&s, 400, "Content-Length is given more than once");
    if (s.n_coding > 1) problem(&s, 400, "Transfer-Encoding is given more than once");
    if (s.n_length && s.n_coding)
        problem(&s, 400, "both Content-Length and Transfer-Encoding are given (RFC 9112 6.1)");
    if (s.n_coding == 1) check_coding(&s);
    if (!s.code) return true;
    *ret = api_error(c, s.code, "%s", s.why);
    return false;
}

size_t api_framing_cut_query(char *uri)
{
    char *q = uri ? strchr(uri, '?') : NULL;
    if (!q) return 0;
    size_t n = 1;
    for (const char *p = q + 1; *p; p++) n += *p == '&';
    if (n <= API_FRAMING_MAX_PARAMS) return 0;
    q[1] = 0;
    return n;
}
