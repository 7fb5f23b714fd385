/* sampler.h - picking the next token from logits, log-probabilities, and stop strings.
 *
 * Two prefixes live in this module:
 *   sampler_  penalties -> top-k -> top-p -> min-p -> temperature -> draw (seeded, reproducible),
 *             plus top-k log-probabilities for the API's `logprobs` and for scoring;
 *   stop_     a streaming matcher that withholds text which might be the start of a stop
 *             string and cuts the output where a stop string appears.
 *
 * Nothing here prints, logs or exits. A sampler or a matcher belongs to one request: neither
 * is safe to use from two threads at once; distinct objects are independent. The functions
 * that take no handle (sampler_params_*, sampler_top_logprobs, sampler_token_logprob) are
 * thread-safe.
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

/* ------------------------------------------------------------------------------------------
 * Stop strings
 *
 * Feed the generated text in order, piece by piece (bytes; a piece may be empty or split a
 * UTF-8 character). Each call says which bytes are now safe to send to the client: everything
 * except a tail that could still turn into a stop string. Matching is on bytes, across any
 * number of pieces, and does not depend on how the text is split into pieces: the stop string
 * that completes first (ends at the earliest byte) wins, and among those the one that starts
 * earliest. On a hit the text before the stop string is the final text; the stop string and
 * anything after it are dropped. At the end of generation without a hit, stop_flush releases
 * the withheld tail.
 *
 *   struct stop_out o;
 *   stop_feed(m, piece, len, &o);  send(o.text, o.len);  if (o.stop >= 0) finish("stop");
 *   ... at end of stream:          stop_flush(m, &o);    send(o.text, o.len);
 * ------------------------------------------------------------------------------------------ */

#define STOP_MAX_STRINGS 64 /* per matcher */
#define STOP_MAX_LEN 1024   /* bytes per stop string */

struct stop_matcher; /* opaque */

struct stop_out {
    const char *text; /* bytes safe to emit now; owned by the matcher, valid until the next
                         call on it (never NULL, even when len is 0) */
    size_t len;       /* number of bytes at text */
    int stop;         /* index (into the array given to stop_create) of the stop string hit,
                         or -1 */
};

/* Creates a matcher for n (0 <= n <= STOP_MAX_STRINGS) stop strings; the strings are copied.
 * n == 0 gives a matcher that passes all text through. Returns ATTND_OK and sets *out, or
 * ATTND_ERR_INVALID (out NULL, stops NULL with n > 0, a NULL or empty string, n < 0),
 * ATTND_ERR_RANGE (n > STOP_MAX_STRINGS or a string longer than STOP_MAX_LEN bytes),
 * ATTND_ERR_NOMEM. On failure *out is left NULL. */
attnd_status stop_create(const char *const *stops, int n, struct stop_matcher **out);

/* Frees m. stop_destroy(NULL) is a no-op. */
void stop_destroy(struct stop_matcher *m);

/* Forgets all text and any hit, ready for a new generation with the same stop strings.
 * stop_reset(NULL) is a no-op. */
void stop_reset(struct stop_matcher *m);

/* Appends piece[0..len) to the text and fills *out: the bytes now safe to emit (previously
 * withheld bytes first, then as much of piece as cannot start a stop string) and whether a stop
 * string was hit. After a hit the matcher is finished: later feeds and flushes emit nothing and
 * report the same stop index. Returns ATTND_OK, ATTND_ERR_INVALID (m or out NULL, piece NULL
 * with len > 0) or ATTND_ERR_NOMEM (the text is then unchanged). Cost: O(len * n_stops). */
attnd_status stop_feed(struct stop_matcher *m, const char *piece, size_t len, struct stop_out *out);

/* End of text: fills *out with the withheld bytes (they are now known not to be a stop
 * string) and clears them; out->stop is -1 unless a stop was already hit (then len is 0).
 * Returns ATTND_OK or ATTND_ERR_INVALID (m or out NULL). */
attnd_status stop_flush(struct stop_matcher *m, struct stop_out *out);

#endif
