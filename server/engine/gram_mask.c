/* gram_mask.c - see gram_mask.h: a depth-first trie of token bytes walked with the matcher. */
#include "attnd/gram_mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gram_match.h"
#include "attnd/tokenizer.h"
#include "attnd/utf8.h"

/* A trie node in depth-first order: its subtree is [index, end). */
struct tnode {
    uint32_t end;
    uint32_t tok_begin; /* the first token of the subtree in sorted[]; those ending here come first:
                           sorted[tok_begin .. + n_tok) */
    uint16_t n_tok;
    uint16_t depth;     /* 1 for a child of the root */
    uint8_t byte;
    uint8_t plain;      /* every token below continues, after this node, with whole "plain"
                           characters only (gmatch_plain_loop) */
    uint8_t plain_path; /* the bytes from the root to here are whole plain characters */
};

struct gmask_vocab {
    int n_vocab;
    size_t words;
    uint8_t *bytes;    /* every token's bytes */
    uint32_t *off;     /* (n_vocab + 1) offsets into bytes */
    uint8_t *usable;   /* (n_vocab) */
    int32_t *sorted;   /* usable ids in byte order */
    size_t n_sorted;
    struct tnode *nodes;
    size_t n_nodes;
    uint64_t *plain_bits; /* (words) the tokens made of whole plain characters only */
    int32_t *eog;      /* end-of-generation ids */
    size_t n_eog;
    size_t max_depth;
};

struct sort_key {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
};

static int cmp_key(const void *a, const void *b)
{
    const struct sort_key *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills v->sorted with the usable ids in byte order (shorter first on a common prefix). */
static attnd_status sort_tokens(struct gmask_vocab *v)
{
    struct sort_key *k = malloc((v->n_sorted ? v->n_sorted : 1) * sizeof *k);
    if (!k) return ATTND_ERR_NOMEM;
    for (size_t i = 0; i < v->n_sorted; i++) {
        int32_t id = v->sorted[i];
        k[i] = (struct sort_key){v->bytes + v->off[id], v->off[id + 1] - v->off[id], id};
    }
    qsort(k, v->n_sorted, sizeof *k, cmp_key);
    for (size_t i = 0; i < v->n_sorted; i++) v->sorted[i] = k[i].id;
    free(k);
    return ATTND_OK;
}

/* Copies every token's bytes and classifies it. */
static attnd_status load_bytes(struct gmask_vocab *v, const struct tokenizer *tok)
{
    size_t cap = tok_max_piece(tok) + 1, total = 0;
    char *buf = malloc(cap);
    v->off = malloc(((size_t)v->n_vocab + 1) * sizeof *v->off);
    v->usable = calloc((size_t)v->n_vocab, 1);
    v->eog = malloc((size_t)v->n_vocab * sizeof *v->eog);
    if (!buf || !v->off || !v->usable || !v->eog) goto oom;
    for (int pass = 0; pass < 2; pass++) {
        total = 0;
        for (int id = 0; id < v->n_vocab; id++) {
            enum tok_type t = tok_token_type(tok, id);
            size_t l = (t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN || t == TOK_TYPE_UNUSED)
                           ? 0 : tok_decode_token(tok, id, buf, cap, false);
            if (l > cap) l = 0; /* cannot happen: cap is tok_max_piece + 1 */
            if (pass) {
                v->off[id] = (uint32_t)total;
                memcpy(v->bytes + total, buf, l);
                bool eog = tok_is_eog(tok, id);
                if (eog) v->eog[v->n_eog++] = id;
                v->usable[id] = l > 0 && !eog;
            }
            total += l;
        }
        if (!pass && !(v->bytes = malloc(total ? total : 1))) goto oom;
    }
    v->off[v->n_vocab] = (uint32_t)total;
    free(buf);
    return ATTND_OK;
oom:
    free(buf);
    return ATTND_ERR_NOMEM;
}

static size_t lcp(const struct gmask_vocab *v, int32_t a, int32_t b)
{
    size_t la = v->off[a + 1] - v->off[a], lb = v->off[b + 1] - v->off[b], n = la < lb ? la : lb, i = 0;
    while (i < n && v->bytes[v->off[a] + i] == v->bytes[v->off[b] + i]) i++;
    return i;
}

/* p[d] = 1 when b[d..len) is a sequence of whole plain characters (code points from U+0020 up,
 * not '"', '\\' or U+007F), for d in [0, len]. */
static void plain_suffixes(const uint8_t *b, size_t len, uint8_t *p)
{
    p[len] = 1;
    for (size_t d = len; d-- > 0;) {
        size_t k = utf8_seq_len((const char *)b + d, len - d);
        uint32_t cp = k ? utf8_decode((const char *)b + d, k) : 0;
        p[d] = k && cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7f && p[d + k];
    }
}

/* p[d] = 1 when b[0..d) is a sequence of whole plain characters, for d in [0, len]. */
static void plain_prefixes(const uint8_t *b, size_t len, uint8_t *p)
{
    memset(p, 0, len + 1);
    p[0] = 1;
    for (size_t d = 0; d < len && p[d];) {
        size_t k = utf8_seq_len((const char *)b + d, len - d);
        uint32_t cp = k ? utf8_decode((const char *)b + d, k) : 0;
        if (!k || cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x7f) break;
        d += k;
        p[d] = 1;
    }
}

/* Builds the depth-first node array from the sorted ids. */
static attnd_status build_trie(struct gmask_vocab *v)
{
    size_t cap = 0;
    for (size_t i = 0; i < v->n_sorted; i++) cap += v->off[v->sorted[i] + 1] - v->off[v->sorted[i]];
    v->nodes = malloc((cap ? cap : 1) * sizeof *v->nodes);
    size_t *path = malloc((v->max_depth + 1) * sizeof *path); /* node index at each depth */
    uint8_t *plain = malloc(2 * (v->max_depth + 1)), *pre = plain + v->max_depth + 1;
    v->plain_bits = calloc(v->words, sizeof *v->plain_bits);
    if (!v->nodes || !path || !plain || !v->plain_bits) {
        free(path);
        free(plain);
        return ATTND_ERR_NOMEM;
    }
    size_t depth = 0;
    for (size_t i = 0; i < v->n_sorted; i++) {
        int32_t id = v->sorted[i];
        const uint8_t *b = v->bytes + v->off[id];
        size_t len = v->off[id + 1] - v->off[id];
        size_t keep = i ? lcp(v, v->sorted[i - 1], id) : 0;
        while (depth > keep) v->nodes[path[depth--]].end = (uint32_t)v->n_nodes;
        plain_prefixes(b, len, pre);
        for (; depth < len; depth++) {
            v->nodes[v->n_nodes] = (struct tnode){0, (uint32_t)i, 0, (uint16_t)(depth + 1), b[depth], 1, pre[depth + 1]};
            path[depth + 1] = v->n_nodes++;
        }
        v->nodes[path[len]].n_tok++;
        plain_suffixes(b, len, plain);
        if (plain[0]) v->plain_bits[id >> 6] |= 1ull << (id & 63);
        for (size_t d = 1; d <= len; d++) v->nodes[path[d]].plain &= plain[d];
    }
    while (depth > 0) v->nodes[path[depth--]].end = (uint32_t)v->n_nodes;
    free(path);
    free(plain);
    return ATTND_OK;
}

attnd_status gmask_vocab_create(const struct tokenizer *tok, struct gmask_vocab **out)
{
    *out = NULL;
    int n = tok_n_vocab(tok);
    if (n <= 0) return ATTND_ERR_INVALID;
    struct gmask_vocab *v = calloc(1, sizeof *v);
    if (!v) return ATTND_ERR_NOMEM;
    v->n_vocab = n;
    v->words = ((size_t)n + 63) / 64;
    attnd_status st = load_bytes(v, tok);
    if (st == ATTND_OK && !(v->sorted = malloc((size_t)n * sizeof *v->sorted))) st = ATTND_ERR_NOMEM;
    if (st == ATTND_OK) {
        for (int id = 0; id < n; id++) {
            size_t l = v->off[id + 1] - v->off[id];
            if (!v->usable[id]) continue;
            if (l > UINT16_MAX) {
                v->usable[id] = 0;
                continue;
            }
            v->sorted[v->n_sorted++] = id;
            if (l > v->max_depth) v->max_depth = l;
        }
        st = sort_tokens(v);
        if (st == ATTND_OK) st = build_trie(v);
    }
    if (st != ATTND_OK) {
        gmask_vocab_destroy(v);
        return st;
    }
    *out = v;
    return ATTND_OK;
}

void gmask_vocab_destroy(struct gmask_vocab *v)
{
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->usable);
    free(v->sorted);
    free(v->nodes);
    free(v->plain_bits);
    free(v->eog);
    free(v);
}

int gmask_n_vocab(const struct gmask_vocab *v)
{
    return v->n_vocab;
}

size_t gmask_words(const struct gmask_vocab *v)
{
    return v->words;
}

size_t gmask_n_nodes(const struct gmask_vocab *v)
{
    return v->n_nodes;
}

const uint8_t *gmask_token_bytes(const struct gmask_vocab *v, int id, size_t *len)
{
    if (id < 0 || id >= v->n_vocab) return NULL;
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

bool gmask_token_usable(const struct gmask_vocab *v, int id)
{
    return id >= 0 && id < v->n_vocab && v->usable[id];
}

/* ---- the walk ---- */

attnd_status gmask_fill(const struct gmask_vocab *v, struct gmatch *m, uint64_t *mask, size_t *n_allowed)
{
    attnd_status st = gmatch_compact(m);
    if (st != ATTND_OK) return st;
    memset(mask, 0, v->words * sizeof *mask);
    size_t count = 0, depth_cap = v->max_depth + 1;
    int32_t *state = malloc(depth_cap * sizeof *state);
    const int32_t **rows = malloc(depth_cap * sizeof *rows);
    if (!state || !rows) {
        st = ATTND_ERR_NOMEM;
        goto out;
    }
    state[0] = gmatch_state(m);
    rows[0] = gmatch_row(m, state[0]);
    /* from a state that loops on plain characters, every all-plain token is allowed: set them at
     * once, and skip the subtrees that hold only such tokens */
    bool plain_start = rows[0] && gmatch_plain_loop(m, state[0]);
    if (plain_start) memcpy(mask, v->plain_bits, v->words * sizeof *mask);
    if (!rows[0]) {
        st = ATTND_ERR_NOMEM;
        goto out;
    }
    const struct tnode *nodes = v->nodes;
    for (size_t i = 0; i < v->n_nodes;) {
        const struct tnode *n = &nodes[i];
        unsigned d = n->depth;
        int32_t t = rows[d - 1][n->byte];
        if (t == GMATCH_UNKNOWN) t = gmatch_next(m, state[d - 1], n->byte);
        if (t < 0 || (plain_start && t == state[0] && n->plain && n->plain_path)) {
            i = n->end;
            continue;
        }
        if (n->end > i + 1 && n->plain && gmatch_plain_loop(m, t)) {
            /* every token below reads whole plain characters from a state that loops on them */
            uint32_t last = n->end < v->n_nodes ? nodes[n->end].tok_begin : (uint32_t)v->n_sorted;
            for (uint32_t k = n->tok_begin; k < last; k++) mask[v->sorted[k] >> 6] |= 1ull << (v->sorted[k] & 63);
            i = n->end;
            continue;
        }
        for (uint32_t k = 0; k < n->n_tok; k++) {
            int32_t id = v->sorted[n->tok_begin + k];
            mask[id >> 6] |= 1ull << (id & 63);
        }
        if (n->end > i + 1) {
            state[d] = t;
            if (!(rows[d] = gmatch_row(m, t))) {
                st = ATTND_ERR_NOMEM;
                goto out;
            }
        }
        i++;
    }
    if (gmatch_accepts_end(m)) {
        for (size_t k = 0; k < v->n_eog; k++) mask[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
    }
    if (gmatch_failed(m)) st = ATTND_ERR_RANGE;
    for (size_t w = 0; w < v->words; w++) count += (size_t)__builtin_popcountll(mask[w]);
out:
    free(state);
    free(rows);
    if (n_allowed) *n_allowed = count;
    return st;
}

attnd_status gmask_accept(const struct gmask_vocab *v, struct gmatch *m, int id)
{
    if (id < 0 || id >= v->n_vocab) return ATTND_ERR_RANGE;
    for (size_t k = 0; k < v->n_eog; k++)
        if (v->eog[k] == id) return gmatch_accepts_end(m) ? ATTND_OK : ATTND_ERR_INVALID;
    if (!v->usable[id]) return ATTND_ERR_INVALID;
    return gmatch_accept_bytes(m, v->bytes + v->off[id], v->off[id + 1] - v->off[id]) ? ATTND_OK
                                                                                      : ATTND_ERR_INVALID;
}

/* ---- one sequence ---- */

struct mask_entry {
    uint64_t epoch;
    int32_t state; /* -1: empty */
    size_t n_allowed;
    uint64_t *mask;
};

struct gmask_seq {
    const struct gmask_vocab *v;
    struct gmatch *m;
    struct mask_entry cache[GMASK_CACHE];
    unsigned next; /* the entry to replace next */
    uint64_t *scratch; /* the mask gmask_seq_apply fills */
};

attnd_status gmask_seq_create(const struct gmask_vocab *v, const struct gram *g, struct gmask_seq **out)
{
    *out = NULL;
    struct gmask_seq *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    s->v = v;
    for (int i = 0; i < GMASK_CACHE; i++) s->cache[i].state = -1;
    attnd_status st = gmatch_create(g, &s->m);
    if (st == ATTND_OK && !(s->scratch = malloc(v->words * sizeof *s->scratch))) st = ATTND_ERR_NOMEM;
    if (st != ATTND_OK) {
        gmask_seq_destroy(s);
        return st;
    }
    *out = s;
    return ATTND_OK;
}

void gmask_seq_destroy(struct gmask_seq *s)
{
    if (!s) return;
    for (int i = 0; i < GMASK_CACHE; i++) free(s->cache[i].mask);
    free(s->scratch);
    gmatch_destroy(s->m);
    free(s);
}

attnd_status gmask_seq_fill(struct gmask_seq *s, uint64_t *mask, size_t *n_allowed)
{
    attnd_status st = gmatch_compact(s->m);
    if (st != ATTND_OK) return st;
    uint64_t epoch = gmatch_epoch(s->m);
    int32_t cur = gmatch_state(s->m);
    size_t bytes = s->v->words * sizeof *mask;
    for (int i = 0; i < GMASK_CACHE; i++) {
        const struct mask_entry *e = &s->cache[i];
        if (e->state == cur && e->epoch == epoch) {
            memcpy(mask, e->mask, bytes);
            if (n_allowed) *n_allowed = e->n_allowed;
            return ATTND_OK;
        }
    }
    size_t n = 0;
    st = gmask_fill(s->v, s->m, mask, &n);
    if (n_allowed) *n_allowed = n;
    if (st != ATTND_OK || gmatch_epoch(s->m) != epoch) return st;
    struct mask_entry *e = &s->cache[s->next];
    if (!e->mask && !(e->mask = malloc(bytes))) return ATTND_OK; /* no cache, still a mask */
    s->next = (s->next + 1) % GMASK_CACHE;
    memcpy(e->mask, mask, bytes);
    e->state = cur;
    e->epoch = epoch;
    e->n_allowed = n;
    return ATTND_OK;
}

attnd_status gmask_seq_apply(struct gmask_seq *s, float *logits)
{
    size_t n = 0;
    attnd_status st = gmask_seq_fill(s, s->scratch, &n);
    if (st != ATTND_OK) return st;
    if (!n) return ATTND_ERR_INVALID;
    size_t V = (size_t)s->v->n_vocab;
    for (size_t w = 0; w < s->v->words; w++) {
        float *l = logits + w * 64;
        size_t len = V - w * 64 < 64 ? V - w * 64 : 64;
        if (!s->scratch[w]) { /* a whole word disallowed (most of them at structural positions) */
            for (size_t j = 0; j < len; j++) l[j] = -INFINITY;
            continue;
        }
        uint64_t dis = ~s->scratch[w];
        if (len < 64) dis &= (1ull << len) - 1;
        for (; dis; dis &= dis - 1) l[__builtin_ctzll(dis)] = -INFINITY;
    }
    return ATTND_OK;
}

attnd_status gmask_seq_accept(struct gmask_seq *s, int id)
{
    return gmask_accept(s->v, s->m, id);
}

bool gmask_seq_accepts_end(const struct gmask_seq *s)
{
    return gmatch_accepts_end(s->m);
}

struct gmatch *gmask_seq_matcher(struct gmask_seq *s)
{
    return s->m;
}
