/* bench_spec.c - speculative decoding (issue 36).
 * usage: bench_spec [SHAPE.gguf [KJV.gguf [threads]]]  (defaults: build/models/qwen2.5-0.5b-shape-q8_0.gguf,
 *        models/kjv.gguf, $THREADS or 2)
 * Prints:
 *   - the cost of a verification step: one sequence (128 tokens of context) runs a step of 1 + k tokens
 *     with k + 1 logit rows (what the scheduler runs to check k drafted tokens), k = 0..8, against the
 *     plain 1-token decode step; medians of interleaved repetitions;
 *   - single-stream generation through the scheduler, greedy, with prompt-lookup speculation and
 *     without, on the KJV model: a copying workload (a passage, then its first words again: the
 *     model's induction heads copy it) and plain text; tokens/s medians of interleaved runs, the
 *     drafted and accepted counts, and whether both produced the same tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/forward.h"
#include "attnd/kvcache.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/spec.h"
#include "attnd/tokenizer.h"
#include "bench/bench_util.h"

#define REPS 7
#define CTX 128
#define KMAX SPEC_K_MAX

/* ---- verification step cost ------------------------------------------------------------------ */

/* One step of n tokens with n logit rows on seq (its length grows by one: the step's first token is
 * committed, the others rolled back, as after a fully rejected draft). Returns seconds. */
static double verify_step(struct fwd_ctx *f, struct kv_cache *kv, struct kv_seq *seq, const int32_t *toks, int n,
                          float *logits)
{
    const size_t base = kv_seq_len(seq);
    if (kv_seq_append(seq, toks, (size_t)n)) return -1;
    const struct fwd_seq fs = {.kv = seq, .tokens = toks, .n = n, .logits = logits, .all_logits = n > 1,
                               .n_draft = n - 1};
    double t0 = bench_now();
    attnd_status st = fwd_eval_batch(f, kv, &fs, 1);
    double dt = bench_now() - t0;
    kv_seq_truncate(seq, base + 1);
    return st ? -1 : dt;
}

static int bench_verify(const char *path, int threads)
{
    char err[512];
    struct model *m;
    if (model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "bench_spec: %s\n", err);
        return 1;
    }
    const struct model_hparams *hp = &m->hp;
    struct fwd_opts fo = {.n_ctx = -1, .n_threads = threads, .n_batch = 256};
    struct fwd_ctx *f = NULL;
    struct kv_cache *kv = NULL;
    struct kv_seq *seq = NULL;
    size_t cached;
    float *logits = malloc((size_t)(KMAX + 1) * (size_t)hp->n_vocab * sizeof(float));
    int32_t toks[CTX];
    for (int i = 0; i < CTX; i++) toks[i] = (i * 7919 + 13) % hp->n_vocab;
    struct kv_opts ko = kv_opts_default(hp->n_layer, hp->n_head_kv, hp->head_dim, 64);
    int rc = 1;
    if (!logits || fwd_create(m, &fo, &f) || kv_create(&ko, &kv) || kv_seq_create(kv, NULL, 0, 1000, &seq, &cached) ||
        kv_seq_append(seq, toks, CTX))
        goto out;
    const struct fwd_seq pre = {.kv = seq, .tokens = toks, .n = CTX};
    if (fwd_eval_batch(f, kv, &pre, 1)) goto out;
    double t[KMAX + 1][REPS];
    for (int r = 0; r < REPS + 1; r++) /* the first round warms up */
        for (int k = 0; k <= KMAX; k++) {
            double dt = verify_step(f, kv, seq, toks + r, k + 1, logits);
            if (dt < 0) goto out;
            if (r) t[k][r - 1] = dt;
        }
    printf("\n## Speculative decoding: verification step cost (%s, %d threads, %d tokens of context)\n\n", path,
           threads, CTX);
    printf("| drafted tokens k | step tokens | step ms (median of %d) | vs a 1-token step |\n", REPS);
    printf("|---|---|---|---|\n");
    double base = 0;
    for (int k = 0; k <= KMAX; k++) {
        double ms = bench_median(t[k], REPS) * 1e3;
        if (k == 0) base = ms;
        printf("| %d | %d | %.2f | %.2fx |\n", k, k + 1, ms, ms / base);
    }
    rc = 0;
out:
    if (rc) fprintf(stderr, "bench_spec: the verification benchmark failed on %s\n", path);
    kv_seq_destroy(seq);
    kv_destroy(kv);
    fwd_destroy(f);
    free(logits);
    model_destroy(m);
    return rc;
}

/* ---- single stream through the scheduler ----------------------------------------------------- */

struct run {
    int32_t toks[CTX];
    int n;
    double gen_ms;
    int drafted, accepted, done;
};

static void on_ev(void *ud, const struct sched_event *ev)
{
    struct run *o = ud;
    if (ev->kind == SCHED_EV_TOKEN) {
        if (o->n < CTX) o->toks[o->n] = ev->token;
        o->n++;
        return;
    }
    o->gen_ms = ev->generation_ms;
    o->drafted = ev->drafted_tokens;
    o->accepted = ev->accepted_tokens;
    o->done = 1;
}

static int run_one(struct sched *s, const int32_t *p, size_t np, int ng, int spec, struct run *o)
{
    memset(o, 0, sizeof *o);
    struct sched_request r = {.prompt = p, .n_prompt = np, .max_tokens = ng, .sampling = sampler_params_default(),
                              .ignore_eos = true, .speculative = spec};
    r.sampling.temperature = 0;
    char err[256];
    if (sched_submit(s, &r, on_ev, o, NULL, err, sizeof err)) {
        fprintf(stderr, "bench_spec: %s\n", err);
        return 1;
    }
    sched_wait_idle(s, 60000);
    return !o->done;
}

/* One workload's row: REPS interleaved runs with and without speculation. */
static int spec_row(struct sched *s, const struct tokenizer *tok, const char *name, const char *text, int ng)
{
    int32_t *p;
    size_t np;
    if (tok_encode(tok, text, strlen(text), true, false, &p, &np)) return 1;
    double with[REPS], without[REPS];
    struct run a, b;
    int same = 1;
    for (int r = 0; r < REPS; r++) {
        if (run_one(s, p, np, ng, -1, &b) || run_one(s, p, np, ng, 1, &a)) return free(p), 1;
        without[r] = b.gen_ms > 0 ? (ng - 1) / (b.gen_ms / 1e3) : 0;
        with[r] = a.gen_ms > 0 ? (ng - 1) / (a.gen_ms / 1e3) : 0;
        same &= a.n == b.n && !memcmp(a.toks, b.toks, (size_t)(a.n < CTX ? a.n : CTX) * sizeof a.toks[0]);
    }
    double w = bench_median(with, REPS), wo = bench_median(without, REPS);
    printf("| %s | %zu | %d | %.0f | %.0f | %.2fx | %d / %d (%.0f %%) | %s |\n", name, np, ng, wo, w, w / wo, a.accepted,
           a.drafted, a.drafted ? 100.0 * a.accepted / a.drafted : 0, same ? "yes" : "NO");
    free(p);
    return same ? 0 : 1;
}

static int bench_stream(const char *path, int threads)
{
    char err[512];
    struct model *m;
    struct tokenizer *tok;
    if (model_load(path, &m, err, sizeof err) || tok_create(m->gguf, &tok, err, sizeof err)) {
        fprintf(stderr, "bench_spec: %s\n", err);
        return 1;
    }
    struct sched_opts so = {.n_threads = threads, .kv_type = TENSOR_F32};
    struct sched *s;
    if (sched_create(m, tok, &so, &s)) return 1;
    static const char passage[] = "And God said, Let the waters under the heaven be gathered together unto one "
                                  "place, and let the dry land appear: and it was so.";
    static const char plain[] = "In the beginning God created the heaven and the earth.";
    char copy[512];
    snprintf(copy, sizeof copy, "%s %s %.24s", passage, passage, passage);
    printf("\n## Speculative decoding: one stream, greedy (%s, %d threads; generation tokens/s, median of %d "
           "interleaved runs)\n\n", path, threads, REPS);
    printf("| workload | prompt tokens | generated | without | prompt lookup | speed-up | accepted / drafted | "
           "same tokens |\n|---|---|---|---|---|---|---|---|\n");
    int rc = spec_row(s, tok, "copying (a passage twice, then its first words)", copy, 48);
    rc |= spec_row(s, tok, "plain text (one verse)", plain, 64);
    sched_destroy(s, 0);
    tok_destroy(tok);
    model_destroy(m);
    return rc;
}

int main(int argc, char **argv)
{
    const char *shape = argc > 1 ? argv[1] : "build/models/qwen2.5-0.5b-shape-q8_0.gguf";
    const char *kjv = argc > 2 ? argv[2] : "models/kjv.gguf";
    const char *th = getenv("THREADS");
    int threads = argc > 3 ? atoi(argv[3]) : th ? atoi(th) : 2;
    log_set_level(LOG_WARN);
    int rc = bench_verify(shape, threads);
    rc |= bench_stream(kjv, threads);
    return rc;
}
