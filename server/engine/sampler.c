/* sampler.c - token sampling (penalties, top-k, top-p, min-p, temperature) and
 * log-probabilities. See attnd/sampler.h for the contracts. */
#include "attnd/sampler.h"

#include "attnd/check.h"
#include "kernels/cpu/cpu_kernels.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==========================================================================================
 * Parameters
 * ========================================================================================== */

struct sampler_params sampler_params_default(void)
{
    struct sampler_params p = {
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repetition_penalty = 1.0f,
        .presence_penalty = 0.0f,
        .frequency_penalty = 0.0f,
        .penalty_last_n = 64,
        .seed = SAMPLER_DEFAULT_SEED,
    };
    return p;
}

__attribute__((format(printf, 3, 4))) static attnd_status bad_param(char *err, size_t errlen,
                                                                     const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return ATTND_ERR_RANGE;
}

attnd_status sampler_params_validate(const struct sampler_params *p, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!p) {
        if (err && errlen) snprintf(err, errlen, "no sampler parameters");
        return ATTND_ERR_INVALID;
    }
    /* Each test is written as !(in range) so that NaN fails it too. */
    if (!(p->temperature >= 0.0f && p->temperature <= SAMPLER_MAX_TEMPERATURE))
        return bad_param(err, errlen, "temperature must be in [0, %g] (got %g)",
                         (double)SAMPLER_MAX_TEMPERATURE, (double)p->temperature);
    if (p->top_k < 0)
        return bad_param(err, errlen, "top_k must be >= 0, 0 disables it (got %d)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return bad_param(err, errlen, "top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return bad_param(err, errlen, "min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= SAMPLER_MAX_REPETITION_PENALTY))
        return bad_param(err, errlen, "repetition_penalty must be in (0, %g], 1 disables it (got %g)",
                         (double)SAMPLER_MAX_REPETITION_PENALTY, (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -SAMPLER_MAX_ABS_PENALTY &&
          p->presence_penalty <= SAMPLER_MAX_ABS_PENALTY))
        return bad_param(err, errlen, "presence_penalty must be in [%g, %g] (got %g)",
                         -(double)SAMPLER_MAX_ABS_PENALTY, (double)SAMPLER_MAX_ABS_PENALTY,
                         (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -SAMPLER_MAX_ABS_PENALTY &&
          p->frequency_penalty <= SAMPLER_MAX_ABS_PENALTY))
        return bad_param(err, errlen, "frequency_penalty must be in [%g, %g] (got %g)",
                         -(double)SAMPLER_MAX_ABS_PENALTY, (double)SAMPLER_MAX_ABS_PENALTY,
                         (double)p->frequency_penalty);
    if (p->penalty_last_n < 0 || p->penalty_last_n > SAMPLER_MAX_PENALTY_LAST_N)
        return bad_param(err, errlen, "penalty_last_n must be in [0, %d] (got %d)",
                         SAMPLER_MAX_PENALTY_LAST_N, p->penalty_last_n);
    return ATTND_OK;
}

/* ==========================================================================================
 * PRNG: xoshiro256** seeded through splitmix64 (both by Vigna; public-domain algorithms).
 * ========================================================================================== */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t st[4])
{
    uint64_t result = rotl64(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl64(st[3], 45);
    return result;
}

static void xoshiro_seed(uint64_t st[4], uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) st[i] = splitmix64(&x);
    /* splitmix64 is a bijection of distinct counters, so the state cannot be all zero. */
}

/* Uniform double in [0, 1) with 53 random bits. */
static double xoshiro_unit(uint64_t st[4]) { return (double)(xoshiro_next(st) >> 11) * 0x1.0p-53; }

/* ==========================================================================================
 * Candidates and selection
 * ========================================================================================== */

struct cand {
    int id;      /* token id */
    float logit; /* cleaned, penalized logit */
    float w;     /* scratch weight: exp(logit - max), later exp((logit - max) / T) */
};

/* NaN counts as -inf (never drawn); +inf as FLT_MAX so that differences stay finite or -inf. */
static inline float clean_logit(float x)
{
    if (x != x) return -INFINITY;
    if (x > FLT_MAX) return FLT_MAX;
    return x;
}

/* Total order used everywhere: higher logit first, lower id first on ties. */
static inline bool cand_better(const struct cand *a, const struct cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (cand_better(x, y)) return -1;
    if (cand_better(y, x)) return 1;
    return 0;
}

/* h is a heap whose root is the worst kept candidate (no child is worse than its parent). */
static void heap_sift_up(struct cand *h, int i)
{
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (!cand_better(&h[parent], &h[i])) break;
        struct cand t = h[parent];
        h[parent] = h[i];
        h[i] = t;
        i = parent;
    }
}

static void heap_sift_down(struct cand *h, int m, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, worst = i;
        if (l < m && cand_better(&h[worst], &h[l])) worst = l;
        if (r < m && cand_better(&h[worst], &h[r])) worst = r;
        if (worst == i) return;
        struct cand t = h[worst];
        h[worst] = h[i];
        h[i] = t;
        i = worst;
    }
}

/* Writes the k best tokens of lg[0..n) to out[0..k), sorted best first; 1 <= k <= n.
 * A bounded heap: O(n) compares plus O(log k) per token that enters, which for real logits
 * is a small fraction of the vocabulary. */
static void select_top_k(const float *lg, int n, int k, struct cand *out)
{
    ATTND_CHECK(k >= 1 && k <= n);
    for (int i = 0; i < k; i++) {
        out[i] = (struct cand){i, clean_logit(lg[i]), 0.0f};
        heap_sift_up(out, i);
    }
    for (int i = k; i < n; i++) {
        float l = clean_logit(lg[i]);
        /* ids grow during the scan, so an equal logit never beats a kept one. */
        if (l > out[0].logit) {
            out[0] = (struct cand){i, l, 0.0f};
            heap_sift_down(out, k, 0);
        }
    }
    qsort(out, (size_t)k, sizeof *out, cand_cmp);
}

/* ==========================================================================================
 * Sampler
 * ========================================================================================== */

/* top_p without top_k buckets the vocabulary by (max - logit) so that only the one bucket where
 * the top_p mass is reached gets sorted. Logits further than HIST_RANGE below the max
 * (probability ratio < 1e-13) share the last bucket. */
#define HIST_BUCKETS 1024
#define HIST_RANGE 30.0f

struct sampler {
    struct sampler_params p;
    int n_vocab;
    uint64_t rng[4];
    bool penalize;     /* penalties are configured (history is kept) */
    int *hist;         /* (penalty_last_n) ring of accepted tokens, oldest at hist_head */
    int hist_len;      /* tokens in the ring */
    int hist_head;     /* index of the oldest token */
    int32_t *counts;   /* (n_vocab) occurrences of each token in the ring */
    float *work;       /* (n_vocab) penalized copy of the logits */
    struct cand *cand; /* (n_vocab) candidate scratch */
    double mass[HIST_BUCKETS]; /* probability mass per bucket, for top_p without top_k */
};

attnd_status sampler_create(const struct sampler_params *p, int n_vocab, struct sampler **out)
{
    if (out) *out = NULL;
    if (!p || !out || n_vocab <= 0) return ATTND_ERR_INVALID;
    attnd_status st = sampler_params_validate(p, NULL, 0);
    if (st != ATTND_OK) return st;

    struct sampler *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->penalize = p->penalty_last_n > 0 &&
                  (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
                   p->frequency_penalty != 0.0f);
    s->cand = calloc((size_t)n_vocab, sizeof *s->cand);
    if (!s->cand) goto nomem;
    if (s->penalize) {
        s->hist = calloc((size_t)p->penalty_last_n, sizeof *s->hist);
        s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
        s->work = calloc((size_t)n_vocab, sizeof *s->work);
        if (!s->hist || !s->counts || !s->work) goto nomem;
    }
    xoshiro_seed(s->rng, p->seed);
    *out = s;
    return ATTND_OK;

nomem:
    sampler_destroy(s);
    return ATTND_ERR_NOMEM;
}

void sampler_destroy(struct sampler *s)
{
    if (!s) return;
    free(s->hist);
    free(s->counts);
    free(s->work);
    free(s->cand);
    free(s);
}

void sampler_reset(struct sampler *s)
{
    if (!s) return;
    if (s->penalize) {
        for (int i = 0; i < s->hist_len; i++)
            s->counts[s->hist[(s->hist_head + i) % s->p.penalty_last_n]] = 0;
    }
    s->hist_len = 0;
    s->hist_head = 0;
    xoshiro_seed(s->rng, s->p.seed);
}

attnd_status sampler_accept(struct sampler *s, int token)
{
    if (!s) return ATTND_ERR_INVALID;
    if (token < 0 || token >= s->n_vocab) return ATTND_ERR_RANGE;
    if (!s->penalize) return ATTND_OK;
    int cap = s->p.penalty_last_n;
    if (s->hist_len == cap) {
        s->counts[s->hist[s->hist_head]]--;
        s->hist[s->hist_head] = token;
        s->hist_head = (s->hist_head + 1) % cap;
    } else {
        s->hist[(s->hist_head + s->hist_len) % cap] = token;
        s->hist_len++;
    }
    s->counts[token]++;
    return ATTND_OK;
}

/* The logits the filters see: the input itself, or a copy with the penalties applied to each
 * distinct token of the history once. */
static const float *apply_penalties(struct sampler *s, const float *logits)
{
    if (!s->penalize || s->hist_len == 0) return logits;
    const float rep = s->p.repetition_penalty;
    const float pres = s->p.presence_penalty;
    const float freq = s->p.frequency_penalty;
    const int cap = s->p.penalty_last_n;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
    /* A token is penalized on its first occurrence in the ring; its count is negated to mark
     * it done and restored afterwards. */
    for (int i = 0; i < s->hist_len; i++) {
        int t = s->hist[(s->hist_head + i) % cap];
        int32_t c = s->counts[t];
        if (c <= 0) continue;
        float l = s->work[t];
        if (l <= 0.0f)
            l *= rep;
        else
            l /= rep;
        l -= (float)c * freq + pres;
        s->work[t] = l;
        s->counts[t] = -c;
    }
    for (int i = 0; i < s->hist_len; i++) {
        int t = s->hist[(s->hist_head + i) % cap];
        if (s->counts[t] < 0) s->counts[t] = -s->counts[t];
    }
    return s->work;
}

/* Highest logit, lowest id on ties; -1 if all are -inf or NaN. */
static int argmax(const float *lg, int n)
{
    const size_t i = cpu_argmax(lg, (size_t)n);
    return i < (size_t)n ? (int)i : -1;
}

/* top_p and min_p on c[0..m), sorted best first with c[0] finite. Both keep a prefix of the
 * sorted order, so applying them in either order gives the same set. Returns the new m >= 1. */
static int filter_sorted(const struct sampler_params *p, struct cand *c, int m)
{
    const float mx = c[0].logit;
    double z = 0.0;
    for (int i = 0; i < m; i++) {
        c[i].w = expf(c[i].logit - mx);
        z += c[i].w;
    }
    int keep = m;
    if (p->top_p < 1.0f) {
        const double target = (double)p->top_p * z;
        double cum = 0.0;
        for (int i = 0; i < keep; i++) {
            cum += c[i].w;
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        int j = 1; /* the top token has w == 1 >= min_p */
        while (j < keep && c[j].w >= p->min_p) j++;
        keep = j;
    }
    return keep;
}

static inline int hist_bucket(float mx, float l)
{
    float d = (mx - l) * ((float)HIST_BUCKETS / HIST_RANGE); /* >= 0, may be +inf */
    return d < (float)(HIST_BUCKETS - 1) ? (int)d : HIST_BUCKETS - 1;
}

/* top_p and min_p over the whole vocabulary (top_k off): fills s->cand and returns the count
 * (unsorted), 0 if every logit is -inf/NaN. Keeps the same set as filter_sorted would after a
 * full sort, without the sort: the tokens are bucketed by (max - logit); the buckets that lie
 * wholly inside the top_p mass are kept as they are, and only the bucket where the mass
 * reaches top_p is sorted to find the exact cut. */
static int filter_full(struct sampler *s, const float *lg)
{
    const int n = s->n_vocab;
    const bool use_p = s->p.top_p < 1.0f;
    const bool use_min = s->p.min_p > 0.0f;
    struct cand *c = s->cand;

    float mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        float l = clean_logit(lg[i]);
        if (l > mx) mx = l;
    }
    if (mx == -INFINITY) return 0;

    if (!use_p && !use_min) {
        for (int i = 0; i < n; i++) c[i] = (struct cand){i, clean_logit(lg[i]), 0.0f};
        return n;
    }

    double z = 0.0;
    if (use_p) memset(s->mass, 0, sizeof s->mass);
    for (int i = 0; i < n; i++) {
        float l = clean_logit(lg[i]);
        float e = expf(l - mx);
        c[i] = (struct cand){i, l, e};
        if (use_p) {
            z += e;
            s->mass[hist_bucket(mx, l)] += e;
        }
    }

    /* The boundary bucket: the first one at which the mass counted from the top reaches top_p.
     * Rounding may leave the total just short of the target; then the last bucket is it. */
    int edge = HIST_BUCKETS - 1;
    double target = 0.0, before = 0.0; /* before: mass of the buckets above the edge */
    if (use_p) {
        target = (double)s->p.top_p * z;
        for (int b = 0; b < HIST_BUCKETS; b++) {
            if (before + s->mass[b] >= target) {
                edge = b;
                break;
            }
            if (b < HIST_BUCKETS - 1) before += s->mass[b];
        }
    }

    /* Compact in place (m <= i): tokens that pass min_p and lie in a bucket up to the edge. */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (use_min && c[i].w < s->p.min_p) continue;
        if (use_p && hist_bucket(mx, c[i].logit) > edge) continue;
        c[m++] = c[i];
    }
    if (!use_p) return m;

    /* Partition: buckets above the edge first (all kept), the edge bucket after them. */
    int above = 0;
    for (int i = 0; i < m; i++) {
        if (hist_bucket(mx, c[i].logit) < edge) {
            struct cand t = c[above];
            c[above++] = c[i];
            c[i] = t;
        }
    }
    /* Sort only the edge bucket and cut where the mass reaches top_p. Tokens dropped by min_p
     * rank below every kept one, so leaving them out does not move the cut. */
    qsort(c + above, (size_t)(m - above), sizeof *c, cand_cmp);
    double cum = before;
    for (int i = above; i < m; i++) {
        cum += c[i].w;
        if (cum >= target) return i + 1;
    }
    return m;
}

/* Temperature, softmax and one draw over c[0..m); m >= 1 and some logit is finite. */
static int draw(struct sampler *s, struct cand *c, int m)
{
    const float t = s->p.temperature;
    float mx = -INFINITY;
    for (int i = 0; i < m; i++)
        if (c[i].logit > mx) mx = c[i].logit;
    double sum = 0.0;
    for (int i = 0; i < m; i++) {
        /* Divide rather than multiply by 1/t: 1/t overflows for tiny t, and 0 * inf is NaN. */
        c[i].w = expf((c[i].logit - mx) / t);
        sum += c[i].w;
    }
    const double u = xoshiro_unit(s->rng) * sum;
    double cum = 0.0;
    int last = -1;
    for (int i = 0; i < m; i++) {
        if (c[i].w <= 0.0f) continue;
        cum += c[i].w;
        last = i;
        if (u < cum) return c[i].id;
    }
    return last >= 0 ? c[last].id : -1; /* rounding: u landed on the very end */
}

int sampler_sample(struct sampler *s, const float *logits)
{
    if (!s || !logits) return -1;
    const int n = s->n_vocab;
    const float *lg = apply_penalties(s, logits);

    if (s->p.temperature == 0.0f) return argmax(lg, n);

    int m;
    const int k = s->p.top_k;
    if (k > 0 && k < n) {
        select_top_k(lg, n, k, s->cand);
        if (s->cand[0].logit == -INFINITY) return -1;
        m = filter_sorted(&s->p, s->cand, k);
    } else {
        m = filter_full(s, lg);
        if (m == 0) return -1;
    }
    return draw(s, s->cand, m);
}

/* ==========================================================================================
 * Log-probabilities
 * ========================================================================================== */

/* log(sum(exp(logits))) in double; ATTND_ERR_INVALID for NaN/+inf or an all -inf vector. */
static attnd_status log_normalizer(const float *logits, int n, double *lse)
{
    double mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        float x = logits[i];
        if (x != x || x > FLT_MAX) return ATTND_ERR_INVALID;
        if (x > mx) mx = x;
    }
    if (mx == -INFINITY) return ATTND_ERR_INVALID;
    double z = 0.0;
    for (int i = 0; i < n; i++) z += exp((double)logits[i] - mx);
    *lse = mx + log(z);
    return ATTND_OK;
}

attnd_status sampler_top_logprobs(const float *logits, int n_vocab, int k, int *ids,
                                  float *logprobs)
{
    if (!logits || n_vocab <= 0 || k < 0) return ATTND_ERR_INVALID;
    if (k > SAMPLER_MAX_TOP_LOGPROBS || k > n_vocab) return ATTND_ERR_RANGE;
    if (k > 0 && (!ids || !logprobs)) return ATTND_ERR_INVALID;
    double lse;
    attnd_status st = log_normalizer(logits, n_vocab, &lse);
    if (st != ATTND_OK || k == 0) return st;
    struct cand top[SAMPLER_MAX_TOP_LOGPROBS];
    select_top_k(logits, n_vocab, k, top);
    for (int i = 0; i < k; i++) {
        ids[i] = top[i].id;
        logprobs[i] = (float)((double)top[i].logit - lse);
    }
    return ATTND_OK;
}

attnd_status sampler_token_logprob(const float *logits, int n_vocab, int token, float *logprob)
{
    if (!logits || !logprob || n_vocab <= 0) return ATTND_ERR_INVALID;
    if (token < 0 || token >= n_vocab) return ATTND_ERR_RANGE;
    double lse;
    attnd_status st = log_normalizer(logits, n_vocab, &lse);
    if (st != ATTND_OK) return st;
    *logprob = (float)((double)logits[token] - lse);
    return ATTND_OK;
}
