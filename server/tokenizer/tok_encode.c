/* tok_encode.c - encoding dispatch: the special tokens are split out of the text (longest first,
 * as the reference does), then each raw-text fragment goes to the tokenizer's algorithm
 * (tok_spm.c or tok_bpe.c, whose pre-tokenization runs there), between the BOS/EOS the
 * tokenizer adds; also the id vector and the bigram heap both algorithms build on. */
#include "server/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#define TOK_MAX_INPUT ((size_t)1 << 28) /* bytes of text per tok_encode() call (symbol indices are int) */

/* ============================================================================================
 * shared by the two algorithms: the id vector and the bigram heap
 * ========================================================================================== */

bool tok_ids_push(struct tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return false;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return true;
}

static bool bigram_before(const struct tok_bigram *a, const struct tok_bigram *b)
{
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

bool tok_heap_push(struct tok_heap *h, struct tok_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct tok_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return true;
}

struct tok_bigram tok_heap_pop(struct tok_heap *h)
{
    struct tok_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* ============================================================================================
 * encoding: split out special tokens, then run the algorithm on each raw-text fragment
 * ========================================================================================== */

struct frag {
    int32_t id; /* -1: raw text */
    size_t off, len;
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static bool frags_push(struct frags *f, int32_t id, size_t off, size_t len)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct frag *v = realloc(f->v, cap * sizeof *v);
        if (!v) return false;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (struct frag){id, off, len};
    return true;
}

static bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Splits the raw fragments of *cur at every occurrence of special token id, as the reference
 * does: tokens are taken longest first, each over the fragments the longer ones left. */
static attnd_status split_on(const struct tokenizer *tok, const char *text, int id, struct frags *cur,
                             struct frags *next)
{
    const struct tok_entry *e = &tok->tok[id];
    bool any = false;
    for (size_t i = 0; i < cur->n && !any; i++)
        if (cur->v[i].id < 0 && cur->v[i].len >= e->len && memmem(text + cur->v[i].off, cur->v[i].len, e->text, e->len))
            any = true;
    if (!any) return ATTND_OK;
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        struct frag f = cur->v[i];
        if (f.id >= 0) {
            if (!frags_push(next, f.id, 0, 0)) return ATTND_ERR_NOMEM;
            continue;
        }
        size_t off = f.off, end = f.off + f.len;
        while (off < end) {
            const char *m = end - off >= e->len ? memmem(text + off, end - off, e->text, e->len) : NULL;
            if (!m) {
                if (!frags_push(next, -1, off, end - off)) return ATTND_ERR_NOMEM;
                break;
            }
            size_t mo = (size_t)(m - text), left = mo - off;
            if (e->attr & TOK_A_LSTRIP)
                while (left > 0 && is_space(text[off + left - 1])) left--;
            if (left && !frags_push(next, -1, off, left)) return ATTND_ERR_NOMEM;
            if (!frags_push(next, id, 0, 0)) return ATTND_ERR_NOMEM;
            off = mo + e->len;
            if (e->attr & TOK_A_RSTRIP)
                while (off < end && is_space(text[off])) off++;
        }
    }
    struct frags t = *cur;
    *cur = *next;
    *next = t;
    return ATTND_OK;
}

attnd_status tok_encode(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **ids, size_t *n)
{
    attnd_status st = ATTND_OK;
    struct tok_ids out = {0};
    struct frags cur = {0}, next = {0};
    *ids = NULL;
    *n = 0;
    if (!text) len = 0;
    if (len > TOK_MAX_INPUT) return ATTND_ERR_RANGE;

    if (len) {
        if (!frags_push(&cur, -1, 0, len)) goto nomem;
        for (size_t i = 0; i < tok->n_special; i++) {
            int id = tok->special[i];
            if (!parse_special && tok->tok[id].type != TOK_TYPE_USER_DEFINED) continue;
            if (tok->tok[id].len > len) continue;
            if ((st = split_on(tok, text, id, &cur, &next)) != ATTND_OK) goto out;
        }
    }

    if (add_special && tok->add_bos && !tok_ids_push(&out, tok->bos)) goto nomem;
    bool prev_special = true; /* SPM: the first fragment gets the dummy prefix space */
    for (size_t i = 0; i < cur.n; i++) {
        const struct frag *f = &cur.v[i];
        if (f->id >= 0) {
            if (!tok_ids_push(&out, f->id)) goto nomem;
            prev_special = true;
            continue;
        }
        if (tok->kind == TOK_KIND_SPM) {
            st = tok_spm_encode(tok, text + f->off, f->len, tok->add_space_prefix && prev_special, &out);
        } else {
            st = tok_bpe_encode(tok, text + f->off, f->len, &out);
        }
        if (st != ATTND_OK) goto out;
        prev_special = false;
    }
    if (add_special && tok->add_eos && !tok_ids_push(&out, tok->eos)) goto nomem;
    if (!out.v && !(out.v = malloc(sizeof *out.v))) goto nomem;
    *ids = out.v;
    *n = out.n;
    out.v = NULL;
    goto out;
nomem:
    st = ATTND_ERR_NOMEM;
out:
    free(out.v);
    free(cur.v);
    free(next.v);
    return st;
}
