/* spec.h - speculative decoding's drafter and its per-sequence policy (the scheduler verifies):
 *   - prompt lookup: the tokens that followed the most recent earlier occurrence of the sequence's
 *     last n-gram (n = SPEC_NGRAM_MAX down to SPEC_NGRAM_MIN) in its prompt and generated text;
 *   - how many to draft: k adapts to the sequence's acceptance (grows after a draft accepted
 *     whole, shrinks to what was accepted after a rejection, and pauses drafting for a while
 *     after several drafts rejected at their first token).
 * A draft is a point mass (one token per position, no distribution): the scheduler's check, "sample
 * the target's token as without speculation and keep the draft while they agree", is rejection
 * sampling for q = that point mass (accept d with probability p(d); on a rejection the token drawn
 * is distributed as p restricted to tokens other than d, renormalised, i.e. max(0, p - q)
 * normalised), so the output distribution is the model's own.
 * Nothing here allocates, prints or locks: one state per sequence, owned by its caller. */
#ifndef ATTND_SPEC_H
#define ATTND_SPEC_H

#include <stddef.h>
#include <stdint.h>

#define SPEC_K_MAX 8     /* drafted tokens per verification step, at most */
#define SPEC_K_START 4   /* k of a new sequence */
#define SPEC_NGRAM_MAX 4 /* the longest suffix prompt lookup matches */
#define SPEC_NGRAM_MIN 2 /* the shortest */

enum spec_mode { SPEC_OFF = 0, SPEC_LOOKUP = 1 };

struct spec_state {
    int k;            /* the most to draft next (1..SPEC_K_MAX) */
    int misses;       /* drafts rejected at their first token in a row */
    int cool;         /* steps left without drafting */
    uint64_t drafted; /* tokens drafted and verified (counted by the verifier) */
    uint64_t accepted; /* of those, accepted (counted by the verifier) */
};

/* A new sequence's state: k = SPEC_K_START, counts 0. */
void spec_init(struct spec_state *st);

/* How many tokens to draft this step, at most `room` (>= 0: what the request may still generate
 * beyond the step's own token); 0 while cooling down (one step of it passes). */
int spec_want(struct spec_state *st, int room);

/* Prompt lookup over toks[0..n): writes up to k drafted tokens into draft and returns how many
 * (0: the last n-gram occurs nowhere earlier). */
int spec_lookup(const int32_t *toks, size_t n, int k, int32_t *draft);

/* After a verification of `drafted` tokens of which the first `accepted` were kept: the next k
 * (and the pause after repeated misses). */
void spec_update(struct spec_state *st, int drafted, int accepted);

/* "off" / "lookup" -> *mode; returns 0, or -1 for another name. */
int spec_mode_parse(const char *name, enum spec_mode *mode);
const char *spec_mode_name(enum spec_mode mode);

#endif
