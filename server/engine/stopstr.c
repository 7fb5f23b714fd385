/* stopstr.c - the streaming stop-string matcher (see attnd/stopstr.h for the contracts).
 *
 * One KMP automaton per stop string, run over the text byte by byte. state[j] is the length of
 * the longest suffix of the text seen so far that is a proper prefix of stop j. The withheld
 * tail is max_j state[j] bytes long: any earlier byte cannot start an occurrence any more. */
#include "attnd/stopstr.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/check.h"

struct stop_str {
    char *s;       /* the bytes (NUL-terminated copy) */
    size_t len;    /* 1..STOP_MAX_LEN */
    size_t *fail;  /* (len) fail[i] = longest proper border of s[0..i] */
    size_t state;  /* matched prefix length, < len */
};

struct stop_matcher {
    int n;
    struct stop_str *stops; /* (n) */
    char *buf;              /* withheld bytes buf[start..len), then the piece being fed */
    size_t start;           /* bytes before start were handed out by the previous call */
    size_t len;
    size_t cap;
    int hit;                /* index of the stop string hit, or -1 */
};

attnd_status stop_create(const char *const *stops, int n, struct stop_matcher **out)
{
    if (out) *out = NULL;
    if (!out || n < 0 || (n > 0 && !stops)) return ATTND_ERR_INVALID;
    if (n > STOP_MAX_STRINGS) return ATTND_ERR_RANGE;
    for (int j = 0; j < n; j++) {
        if (!stops[j] || !stops[j][0]) return ATTND_ERR_INVALID;
        if (strnlen(stops[j], STOP_MAX_LEN + 1) > STOP_MAX_LEN) return ATTND_ERR_RANGE;
    }

    struct stop_matcher *m = calloc(1, sizeof *m);
    if (!m) return ATTND_ERR_NOMEM;
    m->hit = -1;
    if (n > 0) {
        m->stops = calloc((size_t)n, sizeof *m->stops);
        if (!m->stops) goto nomem;
        m->n = n;
    }
    for (int j = 0; j < n; j++) {
        struct stop_str *ss = &m->stops[j];
        ss->len = strlen(stops[j]);
        ss->s = malloc(ss->len + 1);
        ss->fail = malloc(ss->len * sizeof *ss->fail);
        if (!ss->s || !ss->fail) goto nomem;
        memcpy(ss->s, stops[j], ss->len + 1);
        ss->fail[0] = 0;
        size_t q = 0;
        for (size_t i = 1; i < ss->len; i++) {
            while (q > 0 && ss->s[i] != ss->s[q]) q = ss->fail[q - 1];
            if (ss->s[i] == ss->s[q]) q++;
            ss->fail[i] = q;
        }
    }
    m->cap = 2 * STOP_MAX_LEN;
    m->buf = malloc(m->cap);
    if (!m->buf) goto nomem;
    *out = m;
    return ATTND_OK;

nomem:
    stop_destroy(m);
    return ATTND_ERR_NOMEM;
}

void stop_destroy(struct stop_matcher *m)
{
    if (!m) return;
    for (int j = 0; j < m->n; j++) {
        free(m->stops[j].s);
        free(m->stops[j].fail);
    }
    free(m->stops);
    free(m->buf);
    free(m);
}

void stop_reset(struct stop_matcher *m)
{
    if (!m) return;
    for (int j = 0; j < m->n; j++) m->stops[j].state = 0;
    m->start = m->len = 0;
    m->hit = -1;
}

attnd_status stop_feed(struct stop_matcher *m, const char *piece, size_t len, struct stop_out *out)
{
    if (!m || !out || (!piece && len)) return ATTND_ERR_INVALID;
    out->text = m->buf;
    out->len = 0;
    out->stop = m->hit;
    if (m->hit >= 0) return ATTND_OK;

    /* Drop what the previous call handed out; the withheld tail moves to the front. */
    if (m->start) {
        memmove(m->buf, m->buf + m->start, m->len - m->start);
        m->len -= m->start;
        m->start = 0;
    }
    if (len > m->cap - m->len) {
        size_t need = m->len + len; /* cannot overflow: m->len < STOP_MAX_LEN, len fits memory */
        size_t cap = m->cap;
        while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *nb = realloc(m->buf, cap);
        if (!nb) return ATTND_ERR_NOMEM;
        m->buf = nb;
        m->cap = cap;
        out->text = nb;
    }
    if (len) memcpy(m->buf + m->len, piece, len);
    const size_t first = m->len;
    m->len += len;

    for (size_t i = first; i < m->len; i++) {
        const char ch = m->buf[i];
        int hit = -1;
        size_t hit_start = 0;
        for (int j = 0; j < m->n; j++) {
            struct stop_str *ss = &m->stops[j];
            size_t q = ss->state;
            while (q > 0 && ss->s[q] != ch) q = ss->fail[q - 1];
            if (ss->s[q] == ch) q++;
            if (q == ss->len) {
                /* It ends here; its first byte is still in the buffer (state <= withheld). */
                size_t st = i + 1 - ss->len;
                if (hit < 0 || st < hit_start) {
                    hit = j;
                    hit_start = st;
                }
            }
            ss->state = q;
        }
        if (hit >= 0) {
            m->hit = hit;
            out->len = hit_start;
            out->stop = hit;
            m->start = m->len; /* nothing more is ever emitted */
            return ATTND_OK;
        }
    }

    size_t withhold = 0;
    for (int j = 0; j < m->n; j++)
        if (m->stops[j].state > withhold) withhold = m->stops[j].state;
    ATTND_CHECK(withhold <= m->len);
    out->len = m->len - withhold;
    m->start = out->len;
    return ATTND_OK;
}

attnd_status stop_flush(struct stop_matcher *m, struct stop_out *out)
{
    if (!m || !out) return ATTND_ERR_INVALID;
    out->stop = m->hit;
    out->text = m->buf + m->start;
    out->len = m->hit >= 0 ? 0 : m->len - m->start;
    m->start = m->len;
    for (int j = 0; j < m->n; j++) m->stops[j].state = 0;
    return ATTND_OK;
}
