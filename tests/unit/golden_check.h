/* golden_check.h - teacher-forcing comparison of the forward pass with $SHARED/golden, shared by
 * test_golden.c (CPU kernels) and test_vk_forward.c (Vulkan backend).
 *
 * Every model in $SHARED/models against its reference outputs in $SHARED/golden: feed
 * prompt_tokens + the reference's tokens, and at each step compare our log-softmax at the
 * reference's top-8 ids with its numbers. Tolerances per log-probability (from
 * $SHARED/README.md): 1e-3 for F32 models, 0.1 for tiny-llama-spm-q8_0, 1.0 for tiny-qwen2-q8_0.
 * Our greedy choice must equal the reference's wherever the reference's top-2 gap exceeds the
 * tolerance. */
#ifndef ATTND_GOLDEN_CHECK_H
#define ATTND_GOLDEN_CHECK_H

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/forward.h"
#include "attnd/model.h"
#include "testutil.h"

static double tolerance_for(const char *name)
{
    if (strstr(name, "pub-")) return strstr(name, "f32") ? 1e-3 : 0.15; /* golden/formats */
    if (strstr(name, "tiny-qwen2-q8_0")) return 1.0;
    if (strstr(name, "q8_0")) return 0.1;
    return 1e-3;
}

/* log-sum-exp of a row, in double */
static double lse(const float *row, int V)
{
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < V; i++)
        if (row[i] > mx) mx = row[i];
    for (int i = 0; i < V; i++) s += exp((double)row[i] - mx);
    return mx + log(s);
}

static int argmax(const float *row, int V)
{
    int b = 0;
    for (int i = 1; i < V; i++)
        if (row[i] > row[b]) b = i;
    return b;
}

struct stats {
    double max_err;
    int n_cmp, n_greedy;
    unsigned validation_errors;
};

static void check_case(const struct model *m, cJSON *cs, double tol, const char *name, int ci, int threads,
                       int n_batch, enum tensor_type kv_type, enum fwd_backend backend, struct stats *st)
{
    cJSON *pt = cJSON_GetObjectItem(cs, "prompt_tokens"), *gt = cJSON_GetObjectItem(cs, "tokens"),
          *steps = cJSON_GetObjectItem(cs, "steps");
    int np = cJSON_GetArraySize(pt), ng = cJSON_GetArraySize(gt), V = m->hp.n_vocab;
    int n = np + ng;
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    for (int i = 0; i < np; i++) toks[i] = cJSON_GetArrayItem(pt, i)->valueint;
    for (int i = 0; i < ng; i++) toks[np + i] = cJSON_GetArrayItem(gt, i)->valueint;
    struct fwd_opts o = {.n_ctx = n, .n_threads = threads, .n_batch = n_batch, .kv_type = kv_type, .backend = backend};
    struct fwd_ctx *c;
    attnd_status cst = fwd_create(m, &o, &c);
    T_CHECK(cst == ATTND_OK, "fwd_create: %s", fwd_backend_error());
    if (cst) {
        free(toks);
        return;
    }
    if (backend == FWD_BACKEND_VULKAN) T_CHECK(!strcmp(fwd_backend_name(c), "vulkan"), "backend %s", fwd_backend_name(c));
    float *lg = malloc((size_t)n * V * sizeof(float));
    /* the prompt in one call (chunked internally by n_batch), then one token at a time; */
    /* logits after the last prompt token only: the rows before it are never compared */
    T_CHECK(fwd_eval(c, toks, np, false, lg + (size_t)(np - 1) * V) == ATTND_OK, "eval prompt");
    for (int i = 0; i + 1 < ng; i++)
        T_CHECK(fwd_eval(c, toks + np + i, 1, false, lg + (size_t)(np + i) * V) == ATTND_OK, "eval step");
    for (int s = 0; s < ng && s < cJSON_GetArraySize(steps); s++) {
        const float *row = lg + (size_t)(np - 1 + s) * V;
        cJSON *step = cJSON_GetArrayItem(steps, s), *top = cJSON_GetObjectItem(step, "top");
        double z = lse(row, V);
        for (int k = 0; k < cJSON_GetArraySize(top); k++) {
            cJSON *pair = cJSON_GetArrayItem(top, k);
            int id = cJSON_GetArrayItem(pair, 0)->valueint;
            double ref = cJSON_GetArrayItem(pair, 1)->valuedouble;
            double got = (double)row[id] - z, e = fabs(got - ref);
            if (e > st->max_err) st->max_err = e;
            st->n_cmp++;
            T_CHECK(e <= tol, "%s case %d step %d id %d: logprob %.6f vs reference %.6f (tol %g, threads %d, batch %d)",
                    name, ci, s, id, got, ref, tol, threads, n_batch);
        }
        double gap = cJSON_GetArrayItem(cJSON_GetArrayItem(top, 0), 1)->valuedouble -
                     cJSON_GetArrayItem(cJSON_GetArrayItem(top, 1), 1)->valuedouble;
        int ref_id = cJSON_GetObjectItem(step, "id")->valueint;
        if (gap > tol) {
            st->n_greedy++;
            int a = argmax(row, V);
            T_CHECK(a == ref_id, "%s case %d step %d: greedy %d vs reference %d (gap %.4f)", name, ci, s, a, ref_id, gap);
        }
    }
    st->validation_errors += fwd_validation_errors(c);
    free(lg);
    free(toks);
    fwd_destroy(c);
}

/* Checks every golden model in $SHARED/golden/<sub> against $SHARED/models/<sub> (or only those
 * named in the NULL-terminated list `only`) on backend b; returns the number of models checked.
 * max_cases > 0 checks only that many cases per model and nothing more (a light run); otherwise
 * every case, and the CPU run adds a single-thread pass, both a chunked prompt and an F16 KV
 * cache pass on the first case. */
static inline int golden_run_in(enum fwd_backend b, const char *sub, const char *const *only, int max_cases)
{
    char dir[1024], path[1600];
    snprintf(dir, sizeof dir, "%s/golden/%s", t_shared(), sub);
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "cannot open %s (set SHARED to the shared folder)\n", dir);
        T_CHECK(0, "golden folder");
        return 0;
    }
    struct dirent *e;
    int n_models = 0;
    while ((e = readdir(d))) {
        size_t L = strlen(e->d_name);
        if (L < 6 || strcmp(e->d_name + L - 5, ".json")) continue;
        char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(L - 5), e->d_name);
        bool wanted = !only;
        for (const char *const *o = only; o && *o; o++) wanted |= !strcmp(*o, base);
        if (!wanted) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *js = t_slurp(path, NULL);
        cJSON *root = js ? cJSON_Parse(js) : NULL;
        T_CHECK(root != NULL, "parse %s", path);
        if (!root) continue;
        snprintf(path, sizeof path, "%s/models/%s/%s.gguf", t_shared(), sub, base);
        char err[512];
        struct model *m;
        attnd_status st = model_load(path, &m, err, sizeof err);
        T_CHECK(st == ATTND_OK, "load %s: %s", path, err);
        if (st == ATTND_OK) {
            n_models++;
            double tol = tolerance_for(base);
            cJSON *cases = cJSON_GetObjectItem(root, "cases");
            struct stats s = {0};
            for (int ci = 0; ci < cJSON_GetArraySize(cases) && (max_cases <= 0 || ci < max_cases); ci++) {
                cJSON *cs = cJSON_GetArrayItem(cases, ci);
                check_case(m, cs, tol, base, ci, 2, 0, TENSOR_F32, b, &s);
                if (ci == 0 && max_cases <= 0) {
                    if (b == FWD_BACKEND_CPU) check_case(m, cs, tol, base, ci, 1, 0, TENSOR_F32, b, &s); /* 1 thread */
                    check_case(m, cs, tol, base, ci, 2, 3, TENSOR_F32, b, &s); /* prompt in chunks of 3 */
                    /* F16 KV cache: the reference used F32 K/V, so only a looser bound holds */
                    struct stats s16 = {0};
                    check_case(m, cs, tol > 0.05 ? tol : 0.05, base, ci, 2, 0, TENSOR_F16, b, &s16);
                    s.validation_errors += s16.validation_errors;
                    fprintf(stderr, "%-24s F16 KV cache: max |err| %.2e\n", base, s16.max_err);
                }
            }
            fprintf(stderr, "%-24s %d cases, %d log-probs compared, max |err| %.2e (tol %g), %d greedy checks\n",
                    base, cJSON_GetArraySize(cases), s.n_cmp, s.max_err, tol, s.n_greedy);
            T_CHECK(s.validation_errors == 0, "%s: %u Vulkan validation errors", base, s.validation_errors);
            model_destroy(m);
        }
        cJSON_Delete(root);
        free(js);
    }
    closedir(d);
    return n_models;
}

/* The models of $SHARED/golden itself (see golden_run_in). */
static inline int golden_run(enum fwd_backend b, const char *const *only)
{
    int n_models = golden_run_in(b, "", only, 0);
    if (!only) T_CHECK(n_models >= 6, "expected the 6 golden models, found %d", n_models);
    return n_models;
}

#endif
