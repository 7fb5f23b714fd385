/* census.h - the head census: for every layer and query head, the standard interpretability
 * scores computed from the model's own attention maps (sched_attention(), the probe behind
 * GET /attention), on two fixed probe sequences:
 *
 *   text: BOS + a fixed English paragraph (CENSUS_TEXT), at most CENSUS_MAX_TOKENS tokens;
 *   rep:  BOS + r + r, r = CENSUS_REP_LEN (or fewer, to fit the context) seeded random NORMAL
 *         tokens: a random sequence repeated twice.
 *
 * With A[i][j] the weight from query position i to key position j (rows sum to 1):
 *   previous-token  mean over i = 1..n-1 of A[i][i-1]                     (text)
 *   first-token     mean over i = 1..n-1 of A[i][0]  (the "sink")         (text)
 *   self            mean over i = 1..n-1 of A[i][i]                       (text)
 *   entropy         mean over i = 1..n-1 of -sum_j A[i][j] ln A[i][j], nats (text)
 *   induction       mean over i = L+1..2L of A[i][i-L+1]                  (rep)
 *                   (position i holds r[i-L-1]; its earlier occurrence is at i-L, and the
 *                   token after that one, at i-L+1, is what an induction head looks at)
 * A head's role is the largest of induction, previous-token, first-token and self when it is
 * at least CENSUS_ROLE_MIN, else "diffuse".
 */
#ifndef ATTND_CENSUS_H
#define ATTND_CENSUS_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct sched;
struct model;
struct tokenizer;

#define CENSUS_TEXT                                                                                          \
    "The old man walked down to the river every morning. He carried a small basket of bread and a jug of " \
    "water, and he sat on the stone by the bank until the sun was high. When the children of the village " \
    "came to play, he told them stories of the ships that had once sailed past, of the storms and the "    \
    "long winters, and of the friends he had lost along the way."
#define CENSUS_MAX_TOKENS 128
#define CENSUS_REP_LEN 50
#define CENSUS_SEED 0x5eedULL
#define CENSUS_ROLE_MIN 0.3

struct census_head {
    int layer, head, kv_head;
    double prev, induction, sink, self, entropy;
    const char *role; /* static: "induction", "previous-token", "first-token", "self", "diffuse" */
};

struct census {
    int n_layer, n_head, n_head_kv;
    int32_t *text; /* the text probe's tokens (n_text), BOS first */
    size_t n_text;
    int32_t *rep;  /* BOS + r + r (n_rep = 2 * rep_len + 1) */
    size_t n_rep;
    int rep_len;
    struct census_head *heads; /* n_layer * n_head, layer-major */
    int best_prev, best_induction; /* indices into heads of the highest scores */
};

/* Runs the census of the model that s serves (m and tok: the same model's weights and
 * tokenizer). Costs 2 * n_layer * n_head attention recomputations, each over at most
 * CENSUS_MAX_TOKENS tokens, on the scheduler thread between requests. On success *out is the
 * caller's (census_destroy). Returns ATTND_ERR_RANGE if the context cannot hold the probes
 * (fewer than 8 tokens), ATTND_ERR_NOMEM, or what sched_attention() or tok_encode() returned.
 * Thread-safe (as sched_attention()). */
attnd_status census_run(struct sched *s, const struct model *m, const struct tokenizer *tok, struct census **out);

/* Frees c; census_destroy(NULL) is a no-op. */
void census_destroy(struct census *c);

/* The census as one JSON object (malloc'd, NUL-terminated, *len bytes without the NUL):
 *   {"model","n_layer","n_head","n_head_kv","role_min",
 *    "probes":{"text":[ids],"repeated":[ids],"repeat_len":L},
 *    "heads":[{"layer","head","kv_head","previous_token","induction","first_token","self",
 *              "entropy","role","label"}],            layer-major
 *    "best":{"previous_token":{"layer","head","score"},"induction":{...}}}
 * model_name may be NULL. Returns ATTND_ERR_NOMEM. */
attnd_status census_json(const struct census *c, const char *model_name, char **out, size_t *len);

#endif
