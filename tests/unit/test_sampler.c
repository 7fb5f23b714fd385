/* test_sampler.c - sampler distributions against a double-precision reference, penalties,
 * determinism and log-probabilities. (The stop-string matcher: test_stopstr.c.) */
#include "attnd/sampler.h"

#include "tests/unit/testutil.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define N_DRAWS 20000
#define BIG_VOCAB 151936
#define MID_DRAWS 2500 /* fewer draws on big vocabularies: each draw scans all the logits */
#define BIG_DRAWS 600

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x1234567887654321ULL;

static double rnd_unit(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1.0p-53;
}

static double rnd_normal(void)
{
    double u = rnd_unit(), v = rnd_unit();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static struct sampler_params plain_params(float temperature)
{
    struct sampler_params p = sampler_params_default();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

static const float *g_sort_logits;

static int by_logit_desc(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    float lx = g_sort_logits[x], ly = g_sort_logits[y];
    if (lx > ly) return -1;
    if (lx < ly) return 1;
    return x < y ? -1 : x > y;
}

/* Reference pipeline with a full sort, in double: top_k -> top_p -> min_p -> temperature.
 * Writes the probability of each token to probs and the sort order to order. */
static void ref_probs(const struct sampler_params *p, const float *logits, int n, double *probs,
                      int *order)
{
    for (int i = 0; i < n; i++) order[i] = i;
    g_sort_logits = logits;
    qsort(order, (size_t)n, sizeof *order, by_logit_desc);
    int keep = (p->top_k > 0 && p->top_k < n) ? p->top_k : n;
    double mx = logits[order[0]], z = 0.0;
    for (int i = 0; i < keep; i++) z += exp(logits[order[i]] - mx);
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < keep; i++) {
            cum += exp(logits[order[i]] - mx) / z;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        int j = 1;
        while (j < keep && exp(logits[order[j]] - mx) >= p->min_p) j++;
        keep = j;
    }
    for (int i = 0; i < n; i++) probs[i] = 0.0;
    double zt = 0.0;
    for (int i = 0; i < keep; i++) zt += exp((logits[order[i]] - mx) / p->temperature);
    for (int i = 0; i < keep; i++)
        probs[order[i]] = exp((logits[order[i]] - mx) / p->temperature) / zt;
}

/* Draws n_draws tokens and compares them with ref_probs: no draw may have probability 0, and
 * a chi-square over groups of tokens (consecutive in sorted order, each holding at least
 * 1/max_groups of the mass) must be small. Returns the chi-square statistic. */
static double check_distribution_n(const char *what, const struct sampler_params *p,
                                   const float *logits, int n, int max_groups, int n_draws)
{
    double *probs = malloc((size_t)n * sizeof *probs);
    int *order = malloc((size_t)n * sizeof *order);
    int *group = malloc((size_t)n * sizeof *group);
    double *gexp = calloc((size_t)max_groups + 1, sizeof *gexp);
    long *gcnt = calloc((size_t)max_groups + 1, sizeof *gcnt);
    T_CHECK(probs && order && group && gexp && gcnt, "alloc");
    ref_probs(p, logits, n, probs, order);

    int ng = 0;
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        int t = order[i];
        if (probs[t] == 0.0) {
            group[t] = -1;
            continue;
        }
        group[t] = ng;
        gexp[ng] += probs[t];
        acc += probs[t];
        if (acc >= (double)(ng + 1) / max_groups && ng < max_groups - 1) ng++;
    }
    if (gexp[ng] > 0.0) ng++;

    struct sampler *s = NULL;
    T_CHECK(sampler_create(p, n, &s) == ATTND_OK, "%s: create", what);
    long outside = 0;
    for (int d = 0; d < n_draws && s; d++) {
        int t = sampler_sample(s, logits);
        if (t < 0 || t >= n || group[t] < 0) {
            outside++;
            continue;
        }
        gcnt[group[t]]++;
    }
    sampler_destroy(s);
    T_CHECK(outside == 0, "%s: %ld draws outside the allowed set", what, outside);

    double chi2 = 0.0;
    for (int g = 0; g < ng; g++) {
        double e = gexp[g] * n_draws;
        chi2 += (gcnt[g] - e) * (gcnt[g] - e) / e;
    }
    int df = ng - 1;
    /* About p = 1e-4 for the df used here; the seeds are fixed, so this is deterministic. */
    double limit = df + 5.0 * sqrt(2.0 * (df > 0 ? df : 1)) + 5.0;
    T_CHECK(chi2 <= limit, "%s: chi2 %.2f > %.2f (df %d)", what, chi2, limit, df);
    if (getenv("TEST_VERBOSE"))
        fprintf(stderr, "  %-40s chi2 %7.2f  df %2d  limit %6.2f\n", what, chi2, df, limit);
    free(probs);
    free(order);
    free(group);
    free(gexp);
    free(gcnt);
    return chi2;
}

static double check_distribution(const char *what, const struct sampler_params *p,
                                 const float *logits, int n, int max_groups)
{
    return check_distribution_n(what, p, logits, n, max_groups, N_DRAWS);
}

/* ------------------------------------------------------------------------------------------
 * Parameters
 * ------------------------------------------------------------------------------------------ */

static void expect_bad(struct sampler_params p, const char *field)
{
    char err[200];
    attnd_status st = sampler_params_validate(&p, err, sizeof err);
    T_CHECK(st == ATTND_ERR_RANGE, "%s: status %s", field, attnd_status_str(st));
    T_CHECK(strstr(err, field) != NULL, "message '%s' should name %s", err, field);
    struct sampler *s = (struct sampler *)1;
    T_CHECK(sampler_create(&p, 10, &s) == ATTND_ERR_RANGE && s == NULL, "create with bad %s", field);
}

static void test_params(void)
{
    struct sampler_params d = sampler_params_default();
    T_CHECK(d.temperature == 0.8f && d.top_k == 40 && d.top_p == 0.95f && d.min_p == 0.05f,
            "defaults");
    T_CHECK(d.repetition_penalty == 1.0f && d.presence_penalty == 0.0f &&
                d.frequency_penalty == 0.0f && d.penalty_last_n == 64 &&
                d.seed == SAMPLER_DEFAULT_SEED,
            "default penalties/seed");
    char err[200] = "junk";
    T_CHECK(sampler_params_validate(&d, err, sizeof err) == ATTND_OK && err[0] == '\0',
            "defaults validate");
    T_CHECK(sampler_params_validate(NULL, err, sizeof err) == ATTND_ERR_INVALID, "NULL params");
    T_CHECK(sampler_params_validate(&d, NULL, 0) == ATTND_OK, "NULL err buffer");

    struct sampler_params p;
    p = d, p.temperature = -0.1f, expect_bad(p, "temperature");
    p = d, p.temperature = 100.5f, expect_bad(p, "temperature");
    p = d, p.temperature = NAN, expect_bad(p, "temperature");
    p = d, p.top_k = -1, expect_bad(p, "top_k");
    p = d, p.top_p = 0.0f, expect_bad(p, "top_p");
    p = d, p.top_p = 1.01f, expect_bad(p, "top_p");
    p = d, p.top_p = NAN, expect_bad(p, "top_p");
    p = d, p.min_p = -0.01f, expect_bad(p, "min_p");
    p = d, p.min_p = 1.5f, expect_bad(p, "min_p");
    p = d, p.repetition_penalty = 0.0f, expect_bad(p, "repetition_penalty");
    p = d, p.repetition_penalty = -1.0f, expect_bad(p, "repetition_penalty");
    p = d, p.repetition_penalty = NAN, expect_bad(p, "repetition_penalty");
    p = d, p.presence_penalty = 2.5f, expect_bad(p, "presence_penalty");
    p = d, p.frequency_penalty = -3.0f, expect_bad(p, "frequency_penalty");
    p = d, p.frequency_penalty = INFINITY, expect_bad(p, "frequency_penalty");
    p = d, p.penalty_last_n = -1, expect_bad(p, "penalty_last_n");
    p = d, p.penalty_last_n = SAMPLER_MAX_PENALTY_LAST_N + 1, expect_bad(p, "penalty_last_n");

    /* The edges themselves are valid. */
    p = d, p.temperature = 0.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 1.0f;
    T_CHECK(sampler_params_validate(&p, err, sizeof err) == ATTND_OK, "edges: %s", err);
    p = d, p.temperature = 100.0f, p.min_p = 0.0f, p.presence_penalty = -2.0f,
    p.frequency_penalty = 2.0f, p.penalty_last_n = 0;
    T_CHECK(sampler_params_validate(&p, err, sizeof err) == ATTND_OK, "edges 2: %s", err);

    /* A tiny buffer still gets a terminated (truncated) message. */
    p = d, p.top_p = 2.0f;
    char small[8];
    T_CHECK(sampler_params_validate(&p, small, sizeof small) == ATTND_ERR_RANGE &&
                strlen(small) == sizeof small - 1,
            "truncated message");

    struct sampler *s = (struct sampler *)1;
    T_CHECK(sampler_create(&d, 0, &s) == ATTND_ERR_INVALID && s == NULL, "n_vocab 0");
    T_CHECK(sampler_create(NULL, 10, &s) == ATTND_ERR_INVALID, "NULL params to create");
    T_CHECK(sampler_create(&d, 10, NULL) == ATTND_ERR_INVALID, "NULL out");
    sampler_destroy(NULL);
    T_CHECK(sampler_sample(NULL, NULL) == -1, "sample NULL");
    T_CHECK(sampler_accept(NULL, 0) == ATTND_ERR_INVALID, "accept NULL");
    T_CHECK(sampler_create(&d, 10, &s) == ATTND_OK, "create");
    T_CHECK(sampler_accept(s, 10) == ATTND_ERR_RANGE && sampler_accept(s, -1) == ATTND_ERR_RANGE,
            "accept out of range");
    T_CHECK(sampler_accept(s, 9) == ATTND_OK, "accept in range");
    T_CHECK(sampler_sample(s, NULL) == -1, "NULL logits");
    sampler_destroy(s);
}

/* ------------------------------------------------------------------------------------------
 * Greedy and penalties
 * ------------------------------------------------------------------------------------------ */

static int greedy_with(struct sampler_params p, const float *logits, int n, const int *hist,
                       int nh)
{
    struct sampler *s = NULL;
    if (sampler_create(&p, n, &s) != ATTND_OK) return -2;
    for (int i = 0; i < nh; i++) sampler_accept(s, hist[i]);
    int t = sampler_sample(s, logits);
    sampler_destroy(s);
    return t;
}

static void test_greedy(void)
{
    struct sampler_params p = plain_params(0.0f);
    float a[] = {1.0f, 3.0f, 3.0f, 2.0f, -5.0f};
    T_CHECK(greedy_with(p, a, 5, NULL, 0) == 1, "argmax, lowest id on ties");
    float b[] = {NAN, -1.0f, -0.5f, NAN};
    T_CHECK(greedy_with(p, b, 4, NULL, 0) == 2, "NaN ignored");
    float c[] = {-INFINITY, -INFINITY, NAN};
    T_CHECK(greedy_with(p, c, 3, NULL, 0) == -1, "nothing finite");
    float d[] = {0.0f, INFINITY, 1.0f};
    T_CHECK(greedy_with(p, d, 3, NULL, 0) == 1, "+inf wins");
    /* Filters do not matter for greedy. */
    p.top_k = 1, p.top_p = 0.1f, p.min_p = 0.9f;
    T_CHECK(greedy_with(p, a, 5, NULL, 0) == 1, "greedy ignores filters");

    /* Sampling: -inf tokens are never drawn; a single finite token is always drawn. */
    struct sampler_params q = plain_params(1.0f);
    float e[] = {-INFINITY, NAN, 0.5f, -INFINITY};
    struct sampler *s = NULL;
    T_CHECK(sampler_create(&q, 4, &s) == ATTND_OK, "create");
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += sampler_sample(s, e) != 2;
    T_CHECK(bad == 0, "only finite token drawn (%d bad)", bad);
    float f[] = {-INFINITY, -INFINITY, NAN, -INFINITY};
    T_CHECK(sampler_sample(s, f) == -1, "all -inf -> -1");
    sampler_destroy(s);
    q.top_k = 2;
    T_CHECK(sampler_create(&q, 4, &s) == ATTND_OK, "create");
    T_CHECK(sampler_sample(s, f) == -1, "all -inf with top_k -> -1");
    float g[] = {INFINITY, 0.0f, INFINITY, 1.0f};
    int counts[4] = {0};
    for (int i = 0; i < 2000; i++) counts[sampler_sample(s, g)]++;
    T_CHECK(counts[1] == 0 && counts[3] == 0 && counts[0] > 800 && counts[2] > 800,
            "+inf tokens share the mass: %d %d %d %d", counts[0], counts[1], counts[2], counts[3]);
    sampler_destroy(s);
}

static void test_penalties(void)
{
    float a[] = {2.0f, 1.9f, 1.0f, -1.0f};
    int h0[] = {0}, h00[] = {0, 0};
    struct sampler_params p = plain_params(0.0f);
    T_CHECK(greedy_with(p, a, 4, h0, 1) == 0, "no penalty: argmax 0");

    p.repetition_penalty = 1.2f; /* 2.0 / 1.2 = 1.67 < 1.9 */
    T_CHECK(greedy_with(p, a, 4, h0, 1) == 1, "repetition penalty divides positive logits");
    p.repetition_penalty = 1.04f; /* 2.0 / 1.04 = 1.923 > 1.9 */
    T_CHECK(greedy_with(p, a, 4, h00, 2) == 0, "repetition penalty does not depend on count");

    float b[] = {-1.0f, -1.1f};
    p = plain_params(0.0f), p.repetition_penalty = 1.2f; /* -1.0 * 1.2 = -1.2 < -1.1 */
    T_CHECK(greedy_with(p, b, 2, h0, 1) == 1, "repetition penalty multiplies negative logits");

    p = plain_params(0.0f), p.presence_penalty = 0.5f;
    T_CHECK(greedy_with(p, a, 4, h0, 1) == 1, "presence penalty");
    p.presence_penalty = 0.05f; /* subtracted once however often: 1.95 > 1.9 */
    T_CHECK(greedy_with(p, a, 4, h00, 2) == 0, "presence penalty counts once");
    p.presence_penalty = -0.5f;
    int h1[] = {1};
    T_CHECK(greedy_with(p, a, 4, h1, 1) == 1, "negative presence penalty boosts");

    p = plain_params(0.0f), p.frequency_penalty = 0.06f;
    T_CHECK(greedy_with(p, a, 4, h0, 1) == 0, "frequency penalty once: 1.94 > 1.9");
    T_CHECK(greedy_with(p, a, 4, h00, 2) == 1, "frequency penalty twice: 1.88 < 1.9");

    /* Combined, llama.cpp order: repetition first, then count * freq + presence. */
    p = plain_params(0.0f), p.repetition_penalty = 1.1f, p.frequency_penalty = 0.1f,
    p.presence_penalty = 0.1f;
    float c[] = {2.2f, 1.65f}; /* 2.2/1.1 - 2*0.1 - 0.1 = 1.7 > 1.65 */
    T_CHECK(greedy_with(p, c, 2, h00, 2) == 0, "combined penalties 1");
    float c2[] = {2.2f, 1.75f}; /* 1.7 < 1.75 */
    T_CHECK(greedy_with(p, c2, 2, h00, 2) == 1, "combined penalties 2");

    /* Only the last penalty_last_n tokens count. */
    p = plain_params(0.0f), p.repetition_penalty = 1.5f, p.penalty_last_n = 4;
    int hw[] = {0, 2, 3, 2, 3};
    T_CHECK(greedy_with(p, a, 4, hw, 5) == 0, "token 0 fell out of the window");
    int hw2[] = {2, 3, 0, 2};
    T_CHECK(greedy_with(p, a, 4, hw2, 4) == 1, "token 0 inside the window");
    p.penalty_last_n = 0;
    T_CHECK(greedy_with(p, a, 4, h0, 1) == 0, "penalty_last_n 0 disables penalties");

    /* The caller's logits are not modified, and reset clears the history. */
    p = plain_params(0.0f), p.repetition_penalty = 1.5f;
    struct sampler *s = NULL;
    T_CHECK(sampler_create(&p, 4, &s) == ATTND_OK, "create");
    sampler_accept(s, 0);
    T_CHECK(sampler_sample(s, a) == 1 && a[0] == 2.0f, "logits untouched");
    sampler_reset(s);
    T_CHECK(sampler_sample(s, a) == 0, "reset clears history");
    /* A long history wraps the ring many times; counts must stay consistent. */
    for (int i = 0; i < 1000; i++) sampler_accept(s, i % 3 == 0 ? 2 : 3);
    sampler_accept(s, 0);
    T_CHECK(sampler_sample(s, a) == 1, "after wrapping, token 0 penalized");
    for (int i = 0; i < 64; i++) sampler_accept(s, 3);
    T_CHECK(sampler_sample(s, a) == 0, "after wrapping, token 0 released");
    sampler_destroy(s);

    /* Penalties also apply before the filters when sampling. */
    p = plain_params(1.0f), p.top_k = 1, p.repetition_penalty = 1.2f;
    T_CHECK(sampler_create(&p, 4, &s) == ATTND_OK, "create");
    sampler_accept(s, 0);
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= sampler_sample(s, a) == 1;
    T_CHECK(ok, "penalty then top_k=1 picks token 1");
    sampler_destroy(s);
}

/* ------------------------------------------------------------------------------------------
 * Distributions
 * ------------------------------------------------------------------------------------------ */

static void test_temperature(void)
{
    float l[] = {1.0f, 2.0f, 3.0f, 0.5f, -1.0f, 2.5f};
    const float temps[] = {0.5f, 1.0f, 1.7f, 4.0f};
    for (size_t i = 0; i < sizeof temps / sizeof temps[0]; i++) {
        struct sampler_params p = plain_params(temps[i]);
        char what[64];
        snprintf(what, sizeof what, "temperature %.1f", (double)temps[i]);
        check_distribution(what, &p, l, 6, 6);
        p.top_k = 6; /* >= n_vocab: disabled, same distribution */
        check_distribution(what, &p, l, 6, 6);
    }
    /* Very small temperature behaves like greedy without producing NaN. */
    struct sampler_params p = plain_params(1e-30f);
    struct sampler *s = NULL;
    T_CHECK(sampler_create(&p, 6, &s) == ATTND_OK, "create");
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= sampler_sample(s, l) == 2;
    T_CHECK(ok, "tiny temperature -> argmax");
    sampler_destroy(s);
}

static void test_top_k(void)
{
    float l[] = {1.0f, 2.0f, 3.0f, 0.5f, 2.5f};
    struct sampler_params p = plain_params(1.0f);
    p.top_k = 2;
    check_distribution("top_k 2", &p, l, 5, 5);
    p.temperature = 2.0f;
    check_distribution("top_k 2, T 2", &p, l, 5, 5);
    p.top_k = 1;
    check_distribution("top_k 1", &p, l, 5, 5);
    /* Ties at the cut: lowest ids are kept. */
    float t[] = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
    p = plain_params(1.0f), p.top_k = 2;
    struct sampler *s = NULL;
    T_CHECK(sampler_create(&p, 5, &s) == ATTND_OK, "create");
    int counts[5] = {0};
    for (int i = 0; i < 2000; i++) counts[sampler_sample(s, t)]++;
    T_CHECK(counts[3] == 0 && counts[1] > 0 && counts[2] > 0, "ties keep lowest ids");
    sampler_destroy(s);
}

static void test_top_p_min_p(void)
{
    /* probabilities 0.5 0.25 0.15 0.07 0.03 (ids shuffled) */
    const double pr[] = {0.15, 0.5, 0.03, 0.25, 0.07};
    float l[5];
    for (int i = 0; i < 5; i++) l[i] = (float)log(pr[i]);
    int allowed07[] = {0, 1, 0, 1, 0};  /* top_p 0.7: 0.5 + 0.25 >= 0.7 */
    int allowed08[] = {1, 1, 0, 1, 0};  /* top_p 0.8: needs 0.15 too */
    int allowed_m[] = {1, 1, 0, 1, 1};  /* min_p 0.12: p >= 0.06 */
    for (int k = 0; k <= 4; k += 4) {   /* 0: whole-vocabulary path, 4: top_k path */
        struct sampler_params p = plain_params(1.0f);
        p.top_k = k;
        struct {
            float top_p, min_p;
            const int *allowed;
        } cases[] = {{0.7f, 0.0f, allowed07}, {0.8f, 0.0f, allowed08}, {1.0f, 0.12f, allowed_m}};
        for (int c = 0; c < 3; c++) {
            p.top_p = cases[c].top_p, p.min_p = cases[c].min_p;
            char what[96];
            snprintf(what, sizeof what, "top_k %d top_p %.2f min_p %.2f", k, (double)p.top_p,
                     (double)p.min_p);
            /* The reference must agree with the hand-computed sets. */
            double probs[5];
            int order[5];
            ref_probs(&p, l, 5, probs, order);
            for (int i = 0; i < 5; i++)
                T_CHECK((probs[i] > 0) == cases[c].allowed[i], "%s: reference set, token %d", what, i);
            check_distribution(what, &p, l, 5, 5);
        }
        /* Combined, with temperature after the filters. */
        p.top_p = 0.8f, p.min_p = 0.4f, p.temperature = 0.7f; /* min_p keeps p >= 0.2 */
        check_distribution("top_p + min_p + T", &p, l, 5, 5);
    }
    /* A tiny top_p keeps only the top token. */
    struct sampler_params p = plain_params(3.0f);
    p.top_p = 1e-6f;
    check_distribution("top_p tiny", &p, l, 5, 5);
    p.top_p = 1.0f, p.min_p = 1.0f;
    check_distribution("min_p 1", &p, l, 5, 5);
}

static void test_big_vocab(void)
{
    float *l = malloc(BIG_VOCAB * sizeof *l);
    T_CHECK(l != NULL, "alloc");
    if (!l) return;

    /* A realistic shape on a mid-size vocabulary (the bucket code does not depend on the
     * size, and each draw scans the whole vocabulary): a broad background plus a few strong
     * candidates. */
    const int mid = 8192;
    for (int i = 0; i < mid; i++) l[i] = (float)(2.0 * rnd_normal());
    for (int i = 0; i < 30; i++) l[(int)(rnd_unit() * mid)] = (float)(8.0 + 3.0 * rnd_unit());
    struct sampler_params p = plain_params(1.0f);
    check_distribution_n("mid: plain", &p, l, mid, 10, MID_DRAWS);
    p.top_p = 0.9f;
    check_distribution_n("mid: top_p 0.9", &p, l, mid, 10, MID_DRAWS);
    p.top_p = 0.999f;
    check_distribution_n("mid: top_p 0.999", &p, l, mid, 10, MID_DRAWS);
    p.top_p = 1.0f, p.min_p = 0.05f;
    check_distribution_n("mid: min_p 0.05", &p, l, mid, 10, MID_DRAWS);
    p.top_p = 0.95f, p.min_p = 0.01f, p.temperature = 1.5f;
    check_distribution_n("mid: top_p + min_p + T", &p, l, mid, 10, MID_DRAWS);
    p.top_k = 1000, p.top_p = 0.99f, p.min_p = 0.0f;
    check_distribution_n("mid: top_k 1000", &p, l, mid, 10, MID_DRAWS);
    /* A flat vocabulary: top_p keeps thousands of tokens and the edge bucket is crowded. */
    for (int i = 0; i < mid; i++) l[i] = (float)(0.3 * rnd_normal());
    p = plain_params(1.0f), p.top_p = 0.5f;
    check_distribution_n("mid flat: top_p 0.5", &p, l, mid, 10, MID_DRAWS);
    p.top_p = 0.95f, p.min_p = 0.5f;
    check_distribution_n("mid flat: top_p 0.95 + min_p 0.5", &p, l, mid, 10, MID_DRAWS);

    /* Full Qwen-size vocabulary, peaked: the top_p cut must land exactly on the third strong
     * token, two of which share a histogram bucket with the first (logits 0.005 apart). Keeping
     * one token too few or too many shows up as a missing group or a draw outside the set. */
    for (int i = 0; i < BIG_VOCAB; i++) l[i] = (float)(-2.0 + 0.5 * rnd_normal());
    const int strong[] = {777, 150001, 3, 99999, 42};
    const float strong_l[] = {10.0f, 9.995f, 9.99f, 9.3f, 8.5f};
    for (int i = 0; i < 5; i++) l[strong[i]] = strong_l[i];
    double probs_chk[5], z = 0.0;
    for (int i = 0; i < BIG_VOCAB; i++) z += exp((double)l[i]);
    double cum = 0.0;
    for (int i = 0; i < 5; i++) cum += (probs_chk[i] = exp((double)strong_l[i]) / z);
    /* Cumulative masses about 0.21, 0.42, 0.63, 0.73, 0.78; the background holds the rest. */
    double c2 = probs_chk[0] + probs_chk[1], c3 = c2 + probs_chk[2];
    p = plain_params(1.0f);
    p.top_p = (float)((c2 + c3) / 2.0);
    T_CHECK(c3 - c2 > 0.1 && cum < 0.95, "peaked setup: c2 %.3f c3 %.3f", c2, c3);
    check_distribution_n("big peaked: top_p cut at 3", &p, l, BIG_VOCAB, 10, BIG_DRAWS);
    p.top_p = (float)(c3 + 0.5 * probs_chk[3]);
    check_distribution_n("big peaked: top_p cut at 4", &p, l, BIG_VOCAB, 10, BIG_DRAWS);
    p = sampler_params_default();
    check_distribution_n("big peaked: defaults", &p, l, BIG_VOCAB, 10, BIG_DRAWS);
    p.top_k = 0, p.top_p = 0.98f, p.min_p = 0.0f;
    check_distribution_n("big peaked: top_p 0.98 (background)", &p, l, BIG_VOCAB, 10, BIG_DRAWS);
    free(l);
}

/* ------------------------------------------------------------------------------------------
 * Determinism
 * ------------------------------------------------------------------------------------------ */

static void run_sequence(uint64_t seed, int *out, int len, float *l, int n)
{
    struct sampler_params p = sampler_params_default();
    p.seed = seed;
    p.repetition_penalty = 1.1f;
    struct sampler *s = NULL;
    T_CHECK(sampler_create(&p, n, &s) == ATTND_OK, "create");
    uint64_t save = g_rng;
    g_rng = 42;
    for (int i = 0; i < len && s; i++) {
        for (int j = 0; j < n; j++) l[j] = (float)rnd_normal();
        out[i] = sampler_sample(s, l);
        sampler_accept(s, out[i]);
    }
    /* Reset replays the same sequence. */
    if (s) {
        sampler_reset(s);
        g_rng = 42;
        int same = 1;
        for (int i = 0; i < len; i++) {
            for (int j = 0; j < n; j++) l[j] = (float)rnd_normal();
            int t = sampler_sample(s, l);
            sampler_accept(s, t);
            same &= t == out[i];
        }
        T_CHECK(same, "reset replays the sequence");
    }
    g_rng = save;
    sampler_destroy(s);
}

static void test_determinism(void)
{
    enum { LEN = 300, N = 500 };
    static int a[LEN], b[LEN], c[LEN];
    static float l[N];
    run_sequence(7, a, LEN, l, N);
    run_sequence(7, b, LEN, l, N);
    run_sequence(8, c, LEN, l, N);
    T_CHECK(memcmp(a, b, sizeof a) == 0, "same seed -> same tokens");
    int diff = 0;
    for (int i = 0; i < LEN; i++) diff += a[i] != c[i];
    T_CHECK(diff > LEN / 4, "different seed -> different tokens (%d of %d differ)", diff, LEN);
}

/* ------------------------------------------------------------------------------------------
 * Log-probabilities
 * ------------------------------------------------------------------------------------------ */

static void check_logprobs(const float *l, int n, int k)
{
    int ids[SAMPLER_MAX_TOP_LOGPROBS];
    float lp[SAMPLER_MAX_TOP_LOGPROBS];
    T_CHECK(sampler_top_logprobs(l, n, k, ids, lp) == ATTND_OK, "top_logprobs n %d k %d", n, k);
    int *order = malloc((size_t)n * sizeof *order);
    for (int i = 0; i < n; i++) order[i] = i;
    g_sort_logits = l;
    qsort(order, (size_t)n, sizeof *order, by_logit_desc);
    /* Reference: naive log-sum-exp in long double. */
    long double mx = l[order[0]], z = 0.0L;
    for (int i = 0; i < n; i++) z += expl((long double)l[i] - mx);
    long double lse = mx + logl(z);
    for (int i = 0; i < k; i++) {
        T_CHECK(ids[i] == order[i], "rank %d: id %d, want %d", i, ids[i], order[i]);
        double want = (double)((long double)l[order[i]] - lse);
        if (isinf(want))
            T_CHECK(lp[i] == want, "rank %d: %.9g want %.9g", i, (double)lp[i], want);
        else
            T_CHECK(fabs(lp[i] - want) <= 1e-6 * (1.0 + fabs(want)), "rank %d: %.9g want %.9g", i,
                    (double)lp[i], want);
        if (i > 0) T_CHECK(lp[i] <= lp[i - 1], "sorted at rank %d", i);
    }
    /* The normalizer implied by the top token's logprob makes exp(logprob) sum to 1 over the
     * whole vocabulary (each sampler_token_logprob call scans the vocabulary, so it is checked
     * on a sample of tokens against the same normalizer). */
    long double lse_got = (long double)l[ids[0]] - lp[0];
    long double sum = 0.0L;
    for (int i = 0; i < n; i++) sum += expl((long double)l[i] - lse_got);
    T_CHECK(fabsl(sum - 1.0L) < 1e-5L, "sum of probabilities %.9Lf", sum);
    int step = n > 1000 ? n / 97 : 1;
    for (int i = 0; i < n; i += step) {
        float v;
        T_CHECK(sampler_token_logprob(l, n, i, &v) == ATTND_OK, "token_logprob %d", i);
        double want = (double)((long double)l[i] - lse);
        if (isinf(want))
            T_CHECK(v == want, "token %d: %.9g want %.9g", i, (double)v, want);
        else
            T_CHECK(fabs(v - want) <= 1e-6 * (1.0 + fabs(want)), "token %d: %.9g want %.9g", i,
                    (double)v, want);
    }
    free(order);
}

static void test_logprobs(void)
{
    float small[] = {0.5f, -1.0f, 3.0f, 3.0f, 2.0f, -INFINITY};
    check_logprobs(small, 6, 6);
    check_logprobs(small, 6, 1);
    float *l = malloc(BIG_VOCAB * sizeof *l);
    if (!l) return;
    for (int i = 0; i < BIG_VOCAB; i++) l[i] = (float)(3.0 * rnd_normal() + 20.0);
    check_logprobs(l, BIG_VOCAB, SAMPLER_MAX_TOP_LOGPROBS);
    check_logprobs(l, BIG_VOCAB, 5);
    check_logprobs(l, 1000, 20);

    int ids[70];
    float lp[70];
    T_CHECK(sampler_top_logprobs(l, BIG_VOCAB, 0, ids, lp) == ATTND_OK, "k 0");
    T_CHECK(sampler_top_logprobs(l, BIG_VOCAB, 65, ids, lp) == ATTND_ERR_RANGE, "k 65");
    T_CHECK(sampler_top_logprobs(l, 3, 4, ids, lp) == ATTND_ERR_RANGE, "k > n_vocab");
    T_CHECK(sampler_top_logprobs(l, BIG_VOCAB, -1, ids, lp) == ATTND_ERR_INVALID, "k < 0");
    T_CHECK(sampler_top_logprobs(NULL, 10, 1, ids, lp) == ATTND_ERR_INVALID, "NULL logits");
    T_CHECK(sampler_top_logprobs(l, 10, 1, NULL, lp) == ATTND_ERR_INVALID, "NULL ids");
    l[7] = NAN;
    T_CHECK(sampler_top_logprobs(l, 10, 1, ids, lp) == ATTND_ERR_INVALID, "NaN logit");
    l[7] = INFINITY;
    T_CHECK(sampler_top_logprobs(l, 10, 1, ids, lp) == ATTND_ERR_INVALID, "+inf logit");
    float ninf[] = {-INFINITY, -INFINITY};
    T_CHECK(sampler_top_logprobs(ninf, 2, 1, ids, lp) == ATTND_ERR_INVALID, "all -inf");
    float v;
    T_CHECK(sampler_token_logprob(small, 6, 6, &v) == ATTND_ERR_RANGE, "token out of range");
    T_CHECK(sampler_token_logprob(small, 6, 5, &v) == ATTND_OK && isinf(v) && v < 0,
            "-inf logit -> -inf logprob");
    free(l);
}

/* ------------------------------------------------------------------------------------------
 * Speed (reported, not asserted: timings vary by machine and sanitizer)
 * ------------------------------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench_one(const char *what, struct sampler_params p, const float *l)
{
    struct sampler *s = NULL;
    if (sampler_create(&p, BIG_VOCAB, &s) != ATTND_OK) {
        T_CHECK(0, "%s: create", what);
        return;
    }
    for (int i = 0; i < 64; i++) sampler_accept(s, i * 997 % BIG_VOCAB);
    const int reps = 50;
    int sum = 0;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) sum += sampler_sample(s, l) >= 0;
    double dt = (now_s() - t0) / reps;
    T_CHECK(sum == reps, "%s: all samples valid", what);
    fprintf(stderr, "  %-36s %8.3f ms/sample (vocab %d)\n", what, dt * 1e3, BIG_VOCAB);
    sampler_destroy(s);
}

static void bench(void)
{
    float *l = malloc(BIG_VOCAB * sizeof *l);
    if (!l) return;
    for (int i = 0; i < BIG_VOCAB; i++) l[i] = (float)(2.0 * rnd_normal());
    struct sampler_params p = sampler_params_default();
    bench_one("defaults (top_k 40)", p, l);
    p.repetition_penalty = 1.1f, p.frequency_penalty = 0.2f;
    bench_one("defaults + penalties", p, l);
    p = sampler_params_default(), p.top_k = 0;
    bench_one("top_k off, top_p 0.95, min_p 0.05", p, l);
    p.min_p = 0.0f;
    bench_one("top_k off, top_p 0.95", p, l);
    p.top_p = 1.0f;
    bench_one("no filters", p, l);
    p.temperature = 0.0f;
    bench_one("greedy", p, l);
    free(l);
}

static void timed(const char *name, void (*fn)(void))
{
    double t0 = now_s();
    fn();
    fprintf(stderr, "  %-20s %.2f s\n", name, now_s() - t0);
}

int main(void)
{
    timed("test_params", test_params);
    timed("test_greedy", test_greedy);
    timed("test_penalties", test_penalties);
    timed("test_temperature", test_temperature);
    timed("test_top_k", test_top_k);
    timed("test_top_p_min_p", test_top_p_min_p);
    timed("test_big_vocab", test_big_vocab);
    timed("test_determinism", test_determinism);
    timed("test_logprobs", test_logprobs);
    timed("bench", bench);
    return t_finish("test_sampler");
}
