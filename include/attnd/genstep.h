/* genstep.h - one generation step, the same for the scheduler and `attnd run`:
 *   sample (from the logits) -> accept (into the sampler's penalty history) -> detokenize
 *   (whole UTF-8 characters only) -> stop strings (text that could still start one is held
 *   back; a hit ends the generation) -> end-of-generation token or token limit.
 * gen_finish() releases what the detokenizer and the stop matcher still hold.
 *
 * A struct gen is one generation's state (sampler, detokenizer stream, stop matcher); it is not
 * thread-safe: one caller at a time. The tokenizer must outlive it. */
#ifndef ATTND_GENSTEP_H
#define ATTND_GENSTEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/sampler.h"
#include "attnd/status.h"
#include "attnd/stopstr.h"

struct tokenizer;
struct gram;
struct gmask_vocab;
struct gen; /* opaque */

struct gen_opts {
    struct sampler_params sampling;
    const char *const *stops; /* stop strings (copied), n_stops <= STOP_MAX_STRINGS */
    int n_stops;
    bool ignore_eos;          /* end-of-generation tokens do not end the generation */
    unsigned decode_flags;    /* TOK_DECODE_* for the text (tokenizer.h) */
    int max_tokens;           /* the step that generates this many tokens ends with GEN_LENGTH */
    const struct gram *grammar;             /* NULL, or the output is held to it (grammar.h): tokens it
                                               does not allow are masked before sampling */
    const struct gmask_vocab *grammar_vocab; /* the tokenizer's trie (gram_mask.h), with grammar */
};

enum gen_end {
    GEN_MORE = 0, /* keep going */
    GEN_STOP,     /* an end-of-generation token or a stop string */
    GEN_LENGTH,   /* max_tokens reached */
};

/* What one step produced. */
struct gen_token {
    int id;           /* the token sampled (also for an end-of-generation token) */
    const char *text; /* text now safe to show (never NULL; empty for an end-of-generation
                         token); owned by the gen, valid until its next call */
    size_t len;
    enum gen_end end;
};

/* Makes the state for one generation over a vocabulary of n_vocab tokens. Returns
 * ATTND_ERR_INVALID / ATTND_ERR_RANGE for bad sampling parameters or stop strings (as
 * sampler_create and stop_create do) or ATTND_ERR_NOMEM; *out is NULL then. */
attnd_status gen_create(const struct tokenizer *tok, int n_vocab, const struct gen_opts *o, struct gen **out);
/* gen_destroy(NULL) is a no-op. */
void gen_destroy(struct gen *g);

/* Feeds tokens that are context, not generated (the prompt) into the penalty history. */
void gen_accept_context(struct gen *g, const int32_t *tokens, size_t n);

/* One step from a row of n_vocab logits (see the top of this file). Returns ATTND_ERR_INTERNAL
 * (nothing changed) when the logits hold no finite value; with a grammar, ATTND_ERR_INVALID when
 * it allows no token of the vocabulary here, ATTND_ERR_RANGE when its matcher hit a cap. */
attnd_status gen_step(struct gen *g, const float *logits, struct gen_token *out);

/* End of the generation: the bytes the detokenizer and the stop matcher still held, in *text
 * (owned by the gen, valid until its next call; never NULL). Returns ATTND_ERR_NOMEM if they
 * could not be gathered (*text is "" then). */
attnd_status gen_finish(struct gen *g, const char **text, size_t *len);

/* Tokens generated so far. */
int gen_n_generated(const struct gen *g);
/* "stop" or "length" for GEN_STOP / GEN_LENGTH ("" for GEN_MORE). */
const char *gen_end_str(enum gen_end e);

#endif
