/* tok_spm.c - SentencePiece-style tokenization (tokenizer.ggml.model = "llama").
 *
 * The text (spaces written as U+2581, after a dummy prefix space where asked) starts as one
 * symbol per UTF-8 character. Every adjacent pair whose concatenation is a vocabulary token
 * goes into a priority queue keyed by that token's score (highest first, leftmost on ties);
 * popping a pair merges it and queues the new pairs on either side. Pairs made stale by an
 * earlier merge are recognised by their length and skipped. Each final symbol is its token,
 * or else one `<0xNN>` byte token per byte, or else UNK. */
#include "server/tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"

struct sym {
    int prev, next; /* neighbours in the chain; -1 at the ends */
    size_t start;   /* offset in the escaped text */
    size_t n;       /* bytes; 0 once merged into its left neighbour */
};

static bool try_pair(const struct tokenizer *tok, const char *s, const struct sym *sy, int l, int r, struct tok_heap *h)
{
    if (l < 0 || r < 0) return true;
    size_t size = sy[l].n + sy[r].n;
    int id = tok_lookup(tok, s + sy[l].start, size);
    if (id < 0) return true;
    return tok_heap_push(h, (struct tok_bigram){.prio = -(double)tok->tok[id].score, .left = l, .right = r, .size = size});
}

attnd_status tok_spm_encode(const struct tokenizer *tok, const char *text, size_t len, bool prefix_space,
                            struct tok_ids *out)
{
    attnd_status st = ATTND_ERR_NOMEM;
    struct tok_heap h = {0};
    struct sym *sy = NULL;
    /* 1. escape: ' ' -> U+2581 (3 bytes) */
    char *s = malloc(3 * len + 4);
    if (!s) return ATTND_ERR_NOMEM;
    size_t n = 0;
    if (prefix_space) {
        memcpy(s, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + n, "\xe2\x96\x81", 3);
            n += 3;
        } else s[n++] = text[i];
    }
    if (!n) {
        free(s);
        return ATTND_OK;
    }

    /* 2. one symbol per character (an invalid byte is a character of its own) */
    sy = malloc(n * sizeof *sy);
    if (!sy) goto out;
    int ns = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq_len(s + i, n - i);
        if (!l) l = 1;
        sy[ns] = (struct sym){ns - 1, ns + 1, i, l};
        ns++;
        i += l;
    }
    sy[ns - 1].next = -1;

    /* 3. merge the best-scoring pair until none is left */
    for (int i = 1; i < ns; i++)
        if (!try_pair(tok, s, sy, i - 1, i, &h)) goto out;
    while (h.n) {
        struct tok_bigram b = tok_heap_pop(&h);
        struct sym *l = &sy[b.left], *r = &sy[b.right];
        if (!l->n || !r->n || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sy[r->next].prev = b.left;
        if (!try_pair(tok, s, sy, l->prev, b.left, &h) || !try_pair(tok, s, sy, b.left, l->next, &h)) goto out;
    }

    /* 4. emit */
    for (int i = 0; i != -1; i = sy[i].next) {
        int id = tok_lookup(tok, s + sy[i].start, sy[i].n);
        if (id >= 0) {
            if (!tok_ids_push(out, id)) goto out;
            continue;
        }
        for (size_t k = 0; k < sy[i].n; k++) {
            int b = tok->byte_tok[(unsigned char)s[sy[i].start + k]];
            if (b < 0) b = tok->unk;
            if (b >= 0 && !tok_ids_push(out, b)) goto out;
        }
    }
    st = ATTND_OK;
out:
    free(h.v);
    free(sy);
    free(s);
    return st;
}
