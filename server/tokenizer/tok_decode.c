/* tok_decode.c - decoding: the bytes each token renders as (the pieces tokenizer.c built at
 * load), whole-sequence detokenization, and the streaming detokenizer that hands out only whole
 * UTF-8 characters. */
#include "server/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* The bytes id renders as (before any prefix strip). */
static const char *render(const struct tokenizer *tok, int id, bool special, size_t *len)
{
    const struct tok_entry *e = &tok->tok[id];
    if (!special && (e->type == TOK_TYPE_CONTROL || e->type == TOK_TYPE_UNKNOWN)) {
        *len = 0;
        return e->piece;
    }
    *len = e->plen;
    return e->piece;
}

size_t tok_decode_token(const struct tokenizer *tok, int id, char *buf, size_t cap, bool render_special)
{
    if (id < 0 || id >= tok->n_vocab) return 0;
    size_t l;
    const char *s = render(tok, id, render_special, &l);
    if (buf && cap) memcpy(buf, s, l < cap ? l : cap);
    return l;
}

attnd_status tok_decode(const struct tokenizer *tok, const int32_t *ids, size_t n, unsigned flags, char **out,
                        size_t *len)
{
    *out = NULL;
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab) return ATTND_ERR_RANGE;
        total += tok->tok[ids[i]].plen;
    }
    char *buf = malloc(total + 1);
    if (!buf) return ATTND_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *s = render(tok, ids[i], flags & TOK_DECODE_SPECIAL, &l);
        if (i == 0 && (flags & TOK_DECODE_STRIP_PREFIX) && tok->add_space_prefix && l && s[0] == ' ') {
            s++;
            l--;
        }
        memcpy(buf + o, s, l);
        o += l;
    }
    buf[o] = 0;
    *out = buf;
    if (len) *len = o;
    return ATTND_OK;
}

/* ============================================================================================
 * streaming detokenizer
 * ========================================================================================== */

struct tok_stream {
    const struct tokenizer *tok;
    unsigned flags;
    bool first;
    unsigned char pend[4]; /* the start of a character that may still complete */
    size_t npend;
};

attnd_status tok_stream_create(const struct tokenizer *tok, unsigned flags, struct tok_stream **out)
{
    *out = NULL;
    if (!tok) return ATTND_ERR_INVALID;
    struct tok_stream *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    s->tok = tok;
    s->flags = flags;
    s->first = true;
    *out = s;
    return ATTND_OK;
}

void tok_stream_destroy(struct tok_stream *s) { free(s); }

/* How many leading bytes of b[0..n) can be handed out: everything except a trailing prefix of a
 * valid character that more bytes could complete. */
static size_t complete_prefix(const unsigned char *b, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = b[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            i++; /* can never start a character */
            continue;
        }
        size_t k = 1;
        for (; k <= need; k++) {
            if (i + k >= n) return i; /* valid so far, incomplete: hold back */
            unsigned d = b[i + k];
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) break;
        }
        i += k; /* a whole character, or an invalid prefix (passed through; resume at the bad byte) */
    }
    return n;
}

attnd_status tok_stream_push(struct tok_stream *s, int id, char *out, size_t cap, size_t *n_out)
{
    *n_out = 0;
    const struct tokenizer *tok = s->tok;
    if (id < 0 || id >= tok->n_vocab) return ATTND_ERR_RANGE;
    size_t l;
    const char *p = render(tok, id, s->flags & TOK_DECODE_SPECIAL, &l);
    if (s->first && (s->flags & TOK_DECODE_STRIP_PREFIX) && tok->add_space_prefix && l && p[0] == ' ') {
        p++;
        l--;
    }
    if (cap < s->npend + l) return ATTND_ERR_INVALID;
    s->first = false;
    memcpy(out, s->pend, s->npend);
    memcpy(out + s->npend, p, l);
    size_t total = s->npend + l;
    size_t done = complete_prefix((const unsigned char *)out, total);
    s->npend = total - done; /* at most 3 */
    memcpy(s->pend, out + done, s->npend);
    *n_out = done;
    return ATTND_OK;
}

attnd_status tok_stream_flush(struct tok_stream *s, char *out, size_t cap, size_t *n_out)
{
    *n_out = 0;
    if (cap < s->npend) return ATTND_ERR_INVALID;
    memcpy(out, s->pend, s->npend);
    *n_out = s->npend;
    s->npend = 0;
    s->first = true;
    return ATTND_OK;
}
