/* genstep.c - one generation step (see genstep.h). */
#include "attnd/genstep.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/gram_mask.h"
#include "attnd/stopstr.h"
#include "attnd/tokenizer.h"

struct gen {
    const struct tokenizer *tok;
    struct sampler *smp;
    struct stop_matcher *stop;
    struct tok_stream *ts;
    bool ignore_eos;
    int max_tokens;
    int n_gen;
    char *piece;      /* detokenizer output of one token */
    size_t piece_cap; /* tok_max_piece + slack */
    char *tail;       /* gen_finish's gathered bytes */
    struct gmask_seq *gm; /* the grammar's mask, or NULL */
    float *masked;        /* (n_vocab) the logits with the mask applied */
    int n_vocab;
};

attnd_status gen_create(const struct tokenizer *tok, int n_vocab, const struct gen_opts *o, struct gen **out)
{
    *out = NULL;
    struct gen *g = calloc(1, sizeof *g);
    if (!g) return ATTND_ERR_NOMEM;
    g->tok = tok;
    g->ignore_eos = o->ignore_eos;
    g->max_tokens = o->max_tokens;
    g->piece_cap = tok_max_piece(tok) + 16;
    attnd_status st = (g->piece = malloc(g->piece_cap)) ? ATTND_OK : ATTND_ERR_NOMEM;
    if (!st) st = sampler_create(&o->sampling, n_vocab, &g->smp);
    if (!st) st = stop_create(o->stops, o->n_stops, &g->stop);
    if (!st) st = tok_stream_create(tok, o->decode_flags, &g->ts);
    if (!st && o->grammar) st = gmask_seq_create(o->grammar_vocab, o->grammar, &g->gm);
    if (!st && o->grammar && !(g->masked = malloc((size_t)n_vocab * sizeof *g->masked))) st = ATTND_ERR_NOMEM;
    g->n_vocab = n_vocab;
    if (st) {
        gen_destroy(g);
        return st;
    }
    *out = g;
    return ATTND_OK;
}

void gen_destroy(struct gen *g)
{
    if (!g) return;
    sampler_destroy(g->smp);
    stop_destroy(g->stop);
    tok_stream_destroy(g->ts);
    gmask_seq_destroy(g->gm);
    free(g->masked);
    free(g->piece);
    free(g->tail);
    free(g);
}

void gen_accept_context(struct gen *g, const int32_t *tokens, size_t n)
{
    for (size_t i = 0; i < n; i++) sampler_accept(g->smp, tokens[i]);
}

attnd_status gen_step(struct gen *g, const float *logits, struct gen_token *out)
{
    if (g->gm) { /* the grammar's mask, then sampling among the tokens it allows */
        memcpy(g->masked, logits, (size_t)g->n_vocab * sizeof *g->masked);
        attnd_status st = gmask_seq_apply(g->gm, g->masked);
        if (st) return st;
        logits = g->masked;
    }
    int id = sampler_sample(g->smp, logits);
    if (id < 0) return ATTND_ERR_INTERNAL;
    if (g->gm && gmask_seq_accept(g->gm, id)) return ATTND_ERR_INTERNAL;
    sampler_accept(g->smp, id);
    g->n_gen++;
    *out = (struct gen_token){.id = id, .text = "", .len = 0, .end = GEN_MORE};
    if (!g->ignore_eos && tok_is_eog(g->tok, id)) {
        out->end = GEN_STOP;
        return ATTND_OK;
    }
    size_t n = 0;
    struct stop_out so = {.text = "", .len = 0, .stop = -1};
    tok_stream_push(g->ts, id, g->piece, g->piece_cap, &n);
    stop_feed(g->stop, g->piece, n, &so);
    out->text = so.text;
    out->len = so.len;
    if (so.stop >= 0) out->end = GEN_STOP;
    else if (g->n_gen >= g->max_tokens) out->end = GEN_LENGTH;
    return ATTND_OK;
}

attnd_status gen_finish(struct gen *g, const char **text, size_t *len)
{
    struct stop_out so;
    size_t n = 0;
    *text = "";
    *len = 0;
    free(g->tail);
    g->tail = NULL;
    tok_stream_flush(g->ts, g->piece, g->piece_cap, &n);
    stop_feed(g->stop, g->piece, n, &so);
    const size_t a = so.len;
    char *t = malloc(a + 1);
    if (t) memcpy(t, so.text, a);
    stop_flush(g->stop, &so);
    char *t2 = t ? realloc(t, a + so.len + 1) : NULL;
    if (!t2) {
        free(t);
        return ATTND_ERR_NOMEM;
    }
    memcpy(t2 + a, so.text, so.len);
    t2[a + so.len] = 0;
    g->tail = t2;
    *text = t2;
    *len = a + so.len;
    return ATTND_OK;
}

int gen_n_generated(const struct gen *g) { return g->n_gen; }

const char *gen_end_str(enum gen_end e) { return e == GEN_STOP ? "stop" : e == GEN_LENGTH ? "length" : ""; }
