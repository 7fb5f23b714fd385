/* tok_bpe.c - byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * 1. Pre-tokenize: the pre-tokenizer's regexes (PCRE2, UTF + UCP, JIT when available) are
 *    applied in sequence; each splits every piece the previous one produced into its matches
 *    and the unmatched gaps between them (gaps are pieces too, so no byte is ever lost).
 *    Subjects may hold invalid UTF-8 (PCRE2_MATCH_INVALID_UTF): such bytes never match and end
 *    up in gap pieces, to be tokenized byte by byte.
 * 2. Each piece starts as one symbol per byte (the token of the byte's mapped code point).
 *    Adjacent pairs that form a known merge go into a priority queue keyed by merge rank
 *    (lowest first, leftmost on ties); pairs made stale by an earlier merge are recognised by
 *    the ids they were queued with and skipped.
 * The regexes are the tokenizers' published definitions; `\s` is spelled out as the Unicode
 * White_Space set so that it means the same thing as in the reference's implementation. */
#include "server/tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "attnd/utf8.h"

/* ============================================================================================
 * byte <-> code point (GPT-2): printable Latin-1 bytes map to themselves, the other 68 bytes
 * (0..32, 127..160, 173) to U+0100.. in byte order.
 * ========================================================================================== */

uint32_t tok_bpe_byte_cp(unsigned b)
{
    if (b <= 32) return 256 + b;
    if (b >= 127 && b <= 160) return 256 + 33 + (b - 127);
    if (b == 173) return 256 + 67;
    return b;
}

int tok_bpe_cp_byte(uint32_t cp)
{
    if (cp < 256) {
        if (cp <= 32 || (cp >= 127 && cp <= 160) || cp == 173) return -1;
        return (int)cp;
    }
    if (cp <= 256 + 32) return (int)(cp - 256);
    if (cp <= 256 + 66) return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 67) return 173;
    return -1;
}

/* ============================================================================================
 * pre-tokenizers
 * ========================================================================================== */

/* \s: the Unicode White_Space property */
#define WS "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define S_ "[" WS "]"
#define NS_ "[^" WS "]"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NS_ ")"
#define RE_LLAMA3_A "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_B "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+"
#define RE_LLAMA3 RE_LLAMA3_A "\\p{N}{1,3}" RE_LLAMA3_B
#define RE_QWEN2 RE_LLAMA3_A "\\p{N}" RE_LLAMA3_B

struct pre {
    const char *name;
    const char *aliases; /* '|'-separated values of tokenizer.ggml.pre */
    const char *re[TOK_MAX_REGEX];
};

static const struct pre pres[] = {
    {"default", "default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"llama3", "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {RE_LLAMA3}},
    {"dbrx", "dbrx|smaug-bpe", {RE_LLAMA3}},
    {"qwen2", "qwen2|deepseek-r1-qwen|stablelm2|hunyuan|megrez", {RE_QWEN2}},
    {"gpt-2", "gpt-2|phi-2|mpt|olmo|jais|roberta-bpe|jina-es|jina-de|jina-v1-en|jina-v2-es|jina-v2-de|"
              "jina-v2-code|gigachat|trillion",
     {RE_GPT2}},
    {"starcoder", "starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2}},
    {"falcon", "falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {"deepseek-coder", "deepseek-coder",
     {"[\\r\\n]", S_ "?\\p{L}+", S_ "?\\p{P}+", "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
      "\\p{N}"}},
};

static bool alias_match(const char *aliases, const char *name, size_t len)
{
    const char *p = aliases;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == len && !memcmp(p, name, len)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

attnd_status tok_bpe_init(struct tokenizer *tok, const char *name, size_t name_len, bool *known, char *err,
                          size_t errlen)
{
    const struct pre *pr = &pres[0];
    *known = true;
    if (name) {
        size_t i = 0;
        for (; i < sizeof pres / sizeof *pres; i++)
            if (alias_match(pres[i].aliases, name, name_len)) break;
        if (i < sizeof pres / sizeof *pres) pr = &pres[i];
        else *known = false;
    }
    tok->pre_name = pr->name;
    for (int k = 0; k < TOK_MAX_REGEX && pr->re[k]; k++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pr->re[k], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof msg);
            if (err && errlen)
                snprintf(err, errlen, "pre-tokenizer %s: regex %d does not compile at %zu: %s", pr->name, k,
                         (size_t)eo, (const char *)msg);
            return ATTND_ERR_INTERNAL;
        }
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT the interpreter is used */
        tok->regex[tok->n_regex++] = re;
    }
    return ATTND_OK;
}

void tok_bpe_free(struct tokenizer *tok)
{
    for (int k = 0; k < tok->n_regex; k++) pcre2_code_free(tok->regex[k]);
    tok->n_regex = 0;
}

/* ============================================================================================
 * splitting
 * ========================================================================================== */

struct span {
    size_t off, len;
};

struct spans {
    struct span *v;
    size_t n, cap;
};

static bool spans_push(struct spans *s, size_t off, size_t len)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return false;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (struct span){off, len};
    return true;
}

/* Splits every span of in by re into out (matches and gaps, in order). */
static attnd_status split(const pcre2_code *re, const char *text, const struct spans *in, struct spans *out)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return ATTND_ERR_NOMEM;
    attnd_status st = ATTND_OK;
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        PCRE2_SPTR subj = (PCRE2_SPTR)(text + in->v[i].off);
        size_t slen = in->v[i].len, start = 0, pos = 0;
        while (pos < slen) {
            int rc = pcre2_match(re, subj, slen, pos, 0, md, NULL);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(re, subj, slen, pos, PCRE2_NO_JIT, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                st = rc == PCRE2_ERROR_NOMEMORY ? ATTND_ERR_NOMEM : ATTND_ERR_INTERNAL;
                goto out;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t ms = ov[0], me = ov[1];
            if (me <= ms) { /* no pattern matches empty; never loop on one */
                pos = ms + 1;
                continue;
            }
            if ((ms > start && !spans_push(out, in->v[i].off + start, ms - start)) ||
                !spans_push(out, in->v[i].off + ms, me - ms)) {
                st = ATTND_ERR_NOMEM;
                goto out;
            }
            start = pos = me;
        }
        if (start < slen && !spans_push(out, in->v[i].off + start, slen - start)) {
            st = ATTND_ERR_NOMEM;
            goto out;
        }
    }
out:
    pcre2_match_data_free(md);
    return st;
}

/* ============================================================================================
 * merging
 * ========================================================================================== */

struct work {
    int32_t *id; /* per symbol: its token, -1 if the byte has none */
    int *prev, *next;
    uint8_t *dead;
    size_t cap;
    struct tok_heap heap;
    char *enc; /* llama3: the byte-encoded piece */
    size_t enc_cap;
};

static const struct tok_merge *find_merge(const struct tokenizer *tok, int32_t a, int32_t b)
{
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t i = (size_t)tok_merge_hash(key) & tok->merge_mask;
    for (;;) {
        const struct tok_merge *m = &tok->merges[i];
        if (!m->key) return NULL;
        if (m->key == key) return m;
        i = (i + 1) & tok->merge_mask;
    }
}

static bool try_pair(const struct tokenizer *tok, struct work *w, int l, int r)
{
    if (l < 0 || r < 0 || w->id[l] < 0 || w->id[r] < 0) return true;
    const struct tok_merge *m = find_merge(tok, w->id[l], w->id[r]);
    if (!m) return true;
    return tok_heap_push(&w->heap, (struct tok_bigram){.prio = m->rank, .left = l, .right = r, .lid = w->id[l],
                                                     .rid = w->id[r], .result = m->result});
}

static bool work_reserve(struct work *w, size_t n)
{
    if (n <= w->cap) return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *id = realloc(w->id, cap * sizeof *id);
    if (id) w->id = id;
    int *prev = realloc(w->prev, cap * sizeof *prev);
    if (prev) w->prev = prev;
    int *next = realloc(w->next, cap * sizeof *next);
    if (next) w->next = next;
    uint8_t *dead = realloc(w->dead, cap);
    if (dead) w->dead = dead;
    char *enc = realloc(w->enc, 2 * cap);
    if (enc) w->enc = enc;
    if (!id || !prev || !next || !dead || !enc) return false;
    w->cap = cap;
    return true;
}

static attnd_status bpe_word(const struct tokenizer *tok, const unsigned char *s, size_t n, struct work *w,
                             struct tok_ids *out)
{
    if (n == 1) {
        int id = tok->byte_tok[s[0]];
        return id < 0 || tok_ids_push(out, id) ? ATTND_OK : ATTND_ERR_NOMEM;
    }
    if (!work_reserve(w, n)) return ATTND_ERR_NOMEM;
    if (tok->ignore_merges) {
        size_t e = 0;
        for (size_t i = 0; i < n; i++) e += utf8_encode(tok_bpe_byte_cp(s[i]), w->enc + e); /* 1 or 2 bytes */
        int id = tok_lookup(tok, w->enc, e);
        if (id >= 0) return tok_ids_push(out, id) ? ATTND_OK : ATTND_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        w->id[i] = tok->byte_tok[s[i]];
        w->prev[i] = (int)i - 1;
        w->next[i] = i + 1 < n ? (int)i + 1 : -1;
        w->dead[i] = 0;
    }
    w->heap.n = 0;
    for (size_t i = 1; i < n; i++)
        if (!try_pair(tok, w, (int)i - 1, (int)i)) return ATTND_ERR_NOMEM;
    while (w->heap.n) {
        struct tok_bigram b = tok_heap_pop(&w->heap);
        if (w->dead[b.left] || w->dead[b.right] || w->id[b.left] != b.lid || w->id[b.right] != b.rid) continue;
        w->id[b.left] = b.result;
        w->dead[b.right] = 1;
        int nx = w->next[b.right];
        w->next[b.left] = nx;
        if (nx >= 0) w->prev[nx] = b.left;
        if (!try_pair(tok, w, w->prev[b.left], b.left) || !try_pair(tok, w, b.left, nx)) return ATTND_ERR_NOMEM;
    }
    for (int i = 0; i != -1; i = w->next[i])
        if (w->id[i] >= 0 && !tok_ids_push(out, w->id[i])) return ATTND_ERR_NOMEM;
    return ATTND_OK;
}

attnd_status tok_bpe_encode(const struct tokenizer *tok, const char *text, size_t len, struct tok_ids *out)
{
    attnd_status st = ATTND_OK;
    struct spans a = {0}, b = {0};
    struct work w = {0};
    if (!spans_push(&a, 0, len)) return ATTND_ERR_NOMEM;
    for (int k = 0; k < tok->n_regex; k++) {
        if ((st = split(tok->regex[k], text, &a, &b)) != ATTND_OK) goto out;
        struct spans t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < a.n; i++)
        if ((st = bpe_word(tok, (const unsigned char *)text + a.v[i].off, a.v[i].len, &w, out)) != ATTND_OK) goto out;
out:
    free(a.v);
    free(b.v);
    free(w.id);
    free(w.prev);
    free(w.next);
    free(w.dead);
    free(w.heap.v);
    free(w.enc);
    return st;
}
