/* sampler.h - picking the next token from logits, and log-probabilities:
 * penalties -> top-k -> top-p -> min-p -> temperature -> draw (seeded, reproducible), plus top-k
 * log-probabilities for the API's `logprobs` and for scoring. (Stop strings: attnd/stopstr.h.)
 *
 * Nothing here prints, logs or exits. A sampler belongs to one request: it is not safe to use
 * from two threads at once; distinct samplers are independent. The functions that take no
 * handle (sampler_params_*, sampler_top_logprobs, sampler_token_logprob) are thread-safe.
 */
#ifndef ATTND_SAMPLER_H
#define ATTND_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

/* ------------------------------------------------------------------------------------------
 * Sampler
 * ------------------------------------------------------------------------------------------ */

#define SAMPLER_DEFAULT_SEED 0x243f6a8885a308d3ULL /* fixed: runs are reproducible by default */
#define SAMPLER_MAX_TEMPERATURE 100.0f
#define SAMPLER_MAX_REPETITION_PENALTY 10.0f
#define SAMPLER_MAX_ABS_PENALTY 2.0f /* presence/frequency penalty range, as in the OpenAI API */
#define SAMPLER_MAX_PENALTY_LAST_N 65536
#define SAMPLER_MAX_TOP_LOGPROBS 64

struct sampler_params {
    float temperature;        /* [0, 100]; 0 = greedy (argmax, lowest id on ties) */
    int top_k;                /* >= 0; keep the k highest logits; 0 or >= n_vocab = disabled */
    float top_p;              /* (0, 1]; keep the smallest prefix (by probability, highest
                                 first) whose mass is >= top_p; 1 = disabled */
    float min_p;              /* [0, 1]; drop tokens with p < min_p * p_max; 0 = disabled */
    float repetition_penalty; /* (0, 10]; 1 = off. Recent tokens: positive logit /= it,
                                 non-positive logit *= it (llama.cpp semantics) */
    float presence_penalty;   /* [-2, 2]; 0 = off. Subtracted once from each recent token */
    float frequency_penalty;  /* [-2, 2]; 0 = off. Subtracted count times from each recent token */
    int penalty_last_n;       /* [0, 65536]; how many accepted tokens the penalties look at;
                                 0 = penalties off */
    uint64_t seed;            /* PRNG seed: same seed + same logits sequence = same tokens */
};

struct sampler; /* opaque */

/* The defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, penalties off
 * (1.0 / 0 / 0), penalty_last_n 64, seed SAMPLER_DEFAULT_SEED. */
struct sampler_params sampler_params_default(void);

/* Checks every field of p against the ranges documented on struct sampler_params.
 * Returns ATTND_OK, ATTND_ERR_RANGE for a value out of range or NaN (with a one-line message
 * naming the field and the allowed range written to err), or ATTND_ERR_INVALID if p is NULL.
 * err may be NULL or errlen 0; the message is always NUL-terminated when errlen > 0. */
attnd_status sampler_params_validate(const struct sampler_params *p, char *err, size_t errlen);

/* Creates a sampler for a vocabulary of n_vocab tokens with a copy of *p.
 * Returns ATTND_OK and sets *out, or: ATTND_ERR_INVALID (NULL argument, n_vocab <= 0),
 * ATTND_ERR_RANGE (p fails sampler_params_validate), ATTND_ERR_NOMEM. On failure *out is
 * left NULL. Scratch is allocated once here (about 12 bytes per vocabulary entry, 8 more
 * when penalties are on); sampling makes no allocation of its own. */
attnd_status sampler_create(const struct sampler_params *p, int n_vocab, struct sampler **out);

/* Frees s. sampler_destroy(NULL) is a no-op. */
void sampler_destroy(struct sampler *s);

/* Clears the penalty history and rewinds the PRNG to the state right after sampler_create.
 * sampler_reset(NULL) is a no-op. */
void sampler_reset(struct sampler *s);

/* Records token (a prompt or generated token) in the history the penalties look at; only the
 * last penalty_last_n tokens count. sampler_sample does not call this: the caller accepts
 * the token it keeps. Returns ATTND_OK, ATTND_ERR_INVALID (s NULL) or ATTND_ERR_RANGE
 * (token outside [0, n_vocab)). */
attnd_status sampler_accept(struct sampler *s, int token);

/* Picks the next token from logits (n_vocab floats; not modified). NaN logits count as -inf,
 * +inf as the largest finite float. Order: penalties -> (temperature 0: argmax) -> top_k ->
 * top_p -> min_p -> temperature -> softmax -> draw with the sampler's xoshiro256** PRNG.
 * Returns a token id in [0, n_vocab), or -1 if s or logits is NULL or every logit is -inf/NaN.
 * top_p and min_p look at the probabilities (temperature 1) of the tokens top_k kept; the
 * temperature only reshapes the survivors. Cost: a few O(n_vocab) passes plus O(k log k) for
 * top_k = k; the vocabulary is never fully sorted (with top_k off and top_p on, only the
 * tokens in the narrow logit band where the top_p mass is reached are sorted). */
int sampler_sample(struct sampler *s, const float *logits);

/* The k (0 <= k <= min(64, n_vocab)) tokens with the highest logits, highest first (lowest id
 * on ties), and their log-softmax values over the whole vocabulary computed in double: the raw
 * model distribution, before any penalty, filter or temperature. ids and logprobs receive k
 * entries each. Returns ATTND_OK, ATTND_ERR_INVALID (NULL pointer, n_vocab <= 0, k < 0, a logit
 * that is NaN or +inf, or every logit -inf) or ATTND_ERR_RANGE (k too large). */
attnd_status sampler_top_logprobs(const float *logits, int n_vocab, int k, int *ids,
                                  float *logprobs);

/* The log-softmax value of one token over the whole vocabulary (double precision, raw
 * distribution), e.g. the chosen token's logprob or a prompt token's score. Returns ATTND_OK,
 * ATTND_ERR_INVALID (as for sampler_top_logprobs) or ATTND_ERR_RANGE (token outside
 * [0, n_vocab)). */
attnd_status sampler_token_logprob(const float *logits, int n_vocab, int token, float *logprob);

#endif
