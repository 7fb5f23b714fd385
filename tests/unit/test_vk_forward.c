/* test_vk_forward.c - the whole forward pass on a Vulkan device (lavapipe here).
 *
 *   1. The golden files ($SHARED/golden) reproduced with FWD_BACKEND_VULKAN (golden_check.h):
 *      F32 models within 1e-3 per log-probability, the Q8_0 models within their tolerances,
 *      greedy choices equal; also with the prompt in chunks of 3 and with an F16 KV cache.
 *   2. The attention probe (what GET /attention serves) on Vulkan equals the CPU kernels': the
 *      softmax weights of every layer and head within 1e-4, the attention outputs within 1e-4.
 *   3. Batch invariance on the device: three sequences (a prompt chunk, a longer prompt, and a
 *      decode step over a cached prefix) in one fwd_eval_batch give the logits they give alone.
 *      Files of $SHARED/golden/formats covering every K-quant, IQ4, Q4_1/Q5_x type and qwen3
 *      within 0.15 (their three text cases).
 *   4. Backend selection: FWD_BACKEND_AUTO does not pick a CPU Vulkan device (it falls back to the
 *      CPU kernels with a reason); a device index that does not exist is a clear error.
 *   5. Weights split across buffers (ATTND_VK_SPLIT_BYTES=2500000 stands in for a small
 *      maxStorageBufferRange): golden cases and batch invariance hold, and all-position logits
 *      computed in chunks of rows (more than one buffer holds) equal the CPU's.
 * Runs with the Khronos validation layer on and requires zero validation errors. No Vulkan
 * device is a FAIL: lavapipe (mesa-vulkan-drivers) is a build dependency. Under ASan the test
 * re-executes itself with detect_leaks=0 (a leak inside the driver stack). */
#include "golden_check.h"

#include <time.h>
#include <unistd.h>

#include "attnd/kvcache.h"

static struct model *load(const char *base)
{
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/models/%s.gguf", t_shared(), base);
    struct model *m = NULL;
    attnd_status st = model_load(path, &m, err, sizeof err);
    T_CHECK(st == ATTND_OK, "load %s: %s", path, err);
    return st ? NULL : m;
}

static struct fwd_ctx *ctx(const struct model *m, enum fwd_backend b, int n_ctx, enum tensor_type kv)
{
    struct fwd_opts o = {.n_ctx = n_ctx, .n_threads = 2, .kv_type = kv, .backend = b};
    struct fwd_ctx *c = NULL;
    T_CHECK(fwd_create(m, &o, &c) == ATTND_OK, "fwd_create(%d): %s", (int)b, fwd_backend_error());
    return c;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 2. attention weights and outputs of every layer/head, CPU vs Vulkan */
static void check_probe(const char *base)
{
    struct model *m = load(base);
    if (!m) return;
    const struct model_hparams *hp = &m->hp;
    const int n = 37, nq = hp->n_head * hp->head_dim;
    int32_t toks[37];
    for (int i = 0; i < n; i++) toks[i] = (int32_t)((i * 7919 + 13) % hp->n_vocab);
    struct fwd_ctx *cc = ctx(m, FWD_BACKEND_CPU, 64, TENSOR_F32), *vc = ctx(m, FWD_BACKEND_VULKAN, 64, TENSOR_F32);
    float *q[2], *att[2], *w[2];
    for (int k = 0; k < 2; k++) {
        q[k] = malloc((size_t)64 * nq * sizeof(float));
        att[k] = malloc((size_t)64 * nq * sizeof(float));
        w[k] = malloc((size_t)n * (n + 1) / 2 * sizeof(float));
    }
    double max_w = 0, max_o = 0;
    for (int l = 0; cc && vc && l < hp->n_layer; l++) {
        struct fwd_ctx *cs[2] = {cc, vc};
        for (int k = 0; k < 2; k++) {
            fwd_reset(cs[k]);
            fwd_set_probe(cs[k], l, q[k], att[k]);
            T_CHECK(fwd_eval(cs[k], toks, n, false, NULL) == ATTND_OK, "eval");
            fwd_set_probe(cs[k], -1, NULL, NULL);
        }
        for (size_t i = 0; i < (size_t)n * nq; i++) {
            double e = fabs((double)att[0][i] - att[1][i]);
            if (e > max_o) max_o = e;
        }
        for (int h = 0; h < hp->n_head; h++) {
            fwd_attention_weights(cc, l, h, q[0], n, w[0]);
            fwd_attention_weights(vc, l, h, q[1], n, w[1]);
            for (size_t i = 0; i < (size_t)n * (n + 1) / 2; i++) {
                double e = fabs((double)w[0][i] - w[1][i]);
                if (e > max_w) max_w = e;
            }
        }
    }
    fprintf(stderr, "%-22s attention probe, Vulkan vs CPU: max |weight err| %.2e, max |output err| %.2e\n", base,
            max_w, max_o);
    T_CHECK(max_w <= 1e-4, "%s: attention weights differ by %.3g", base, max_w);
    T_CHECK(max_o <= 1e-4, "%s: attention outputs differ by %.3g", base, max_o);
    if (vc) T_CHECK(fwd_validation_errors(vc) == 0, "%u validation errors", fwd_validation_errors(vc));
    for (int k = 0; k < 2; k++) {
        free(q[k]);
        free(att[k]);
        free(w[k]);
    }
    fwd_destroy(cc);
    fwd_destroy(vc);
    model_destroy(m);
}

/* 3. three sequences in one step vs each alone, on a shared paged cache */
static void check_batch(const char *base, enum tensor_type kvt)
{
    struct model *m = load(base);
    if (!m) return;
    const struct model_hparams *hp = &m->hp;
    const int V = hp->n_vocab;
    struct fwd_opts o = {.n_ctx = -1, .n_threads = 2, .n_batch = 128, .backend = FWD_BACKEND_VULKAN};
    struct fwd_ctx *c = NULL;
    T_CHECK(fwd_create(m, &o, &c) == ATTND_OK, "fwd_create: %s", fwd_backend_error());
    struct kv_opts ko = kv_opts_default(hp->n_layer, hp->n_head_kv, hp->head_dim, 64);
    ko.type = kvt;
    struct kv_cache *kv = NULL;
    T_CHECK(kv_create(&ko, &kv) == ATTND_OK, "kv_create");
    if (!c || !kv) goto out;
    /* lengths: prompt of 21, prompt of 40, and 33 cached + 1 decode token */
    enum { A = 21, B = 40, P = 33 };
    int32_t ta[A], tb[B], tp[P + 1];
    for (int i = 0; i < A; i++) ta[i] = (int32_t)((i * 31 + 5) % V);
    for (int i = 0; i < B; i++) tb[i] = (int32_t)((i * 17 + 3) % V);
    for (int i = 0; i <= P; i++) tp[i] = (int32_t)((i * 101 + 7) % V);
    float *alone = malloc((size_t)3 * V * sizeof(float)), *batch = malloc((size_t)3 * V * sizeof(float));
    for (int pass = 0; pass < 2; pass++) {
        float *dst = pass ? batch : alone;
        struct kv_seq *sa = NULL, *sb = NULL, *sp = NULL;
        size_t cached;
        T_CHECK(kv_seq_create(kv, NULL, 0, 64, &sa, &cached) == ATTND_OK, "seq");
        T_CHECK(kv_seq_create(kv, NULL, 0, 64, &sb, &cached) == ATTND_OK, "seq");
        T_CHECK(kv_seq_create(kv, NULL, 0, 64, &sp, &cached) == ATTND_OK, "seq");
        /* the decode sequence's prefix first, on its own */
        T_CHECK(kv_seq_append(sp, tp, P) == ATTND_OK, "append");
        struct fwd_seq pre = {.kv = sp, .tokens = tp, .n = P};
        T_CHECK(fwd_eval_batch(c, kv, &pre, 1) == ATTND_OK, "prefix");
        T_CHECK(kv_seq_append(sa, ta, A) == ATTND_OK && kv_seq_append(sb, tb, B) == ATTND_OK &&
                    kv_seq_append(sp, tp + P, 1) == ATTND_OK,
                "append");
        struct fwd_seq s[3] = {{.kv = sa, .tokens = ta, .n = A, .logits = dst},
                               {.kv = sb, .tokens = tb, .n = B, .logits = dst + V},
                               {.kv = sp, .tokens = tp + P, .n = 1, .logits = dst + 2 * (size_t)V}};
        if (pass == 0)
            for (int i = 0; i < 3; i++) T_CHECK(fwd_eval_batch(c, kv, &s[i], 1) == ATTND_OK, "alone %d", i);
        else
            T_CHECK(fwd_eval_batch(c, kv, s, 3) == ATTND_OK, "batch");
        kv_seq_destroy(sa);
        kv_seq_destroy(sb);
        kv_seq_destroy(sp);
    }
    double max_e = 0, scale = 0;
    for (size_t i = 0; i < (size_t)3 * V; i++) {
        double e = fabs((double)alone[i] - batch[i]);
        if (e > max_e || e != e) max_e = e;
        if (fabs(alone[i]) > scale) scale = fabs(alone[i]);
    }
    fprintf(stderr, "%-22s batch of 3 vs alone (%s KV): max |logit err| %.2e (logits up to %.2f)\n", base,
            tensor_type_name(kvt), max_e, scale);
    T_CHECK(max_e <= 1e-4 * (1 + scale), "%s: batched logits differ by %.3g", base, max_e);
    T_CHECK(fwd_validation_errors(c) == 0, "%u validation errors", fwd_validation_errors(c));
    free(alone);
    free(batch);
out:
    kv_destroy(kv);
    fwd_destroy(c);
    model_destroy(m);
}

/* 5. every position's logits of a 40-token prompt (fwd_eval with all_logits: with
 * ATTND_VK_SPLIT_BYTES set, more rows than one logits buffer holds, computed in chunks) equal the
 * CPU kernels' */
static void check_all_logits(const char *base)
{
    struct model *m = load(base);
    if (!m) return;
    enum { N = 40 };
    const size_t V = (size_t)m->hp.n_vocab;
    int32_t t[N];
    for (int i = 0; i < N; i++) t[i] = (int32_t)((i * 37 + 11) % (int)V);
    float *lg[2] = {malloc(N * V * sizeof(float)), malloc(N * V * sizeof(float))};
    for (int b = 0; b < 2; b++) {
        struct fwd_ctx *c = ctx(m, b ? FWD_BACKEND_VULKAN : FWD_BACKEND_CPU, 64, TENSOR_F32);
        T_CHECK(c && fwd_eval(c, t, N, true, lg[b]) == ATTND_OK, "%s: all-logits eval on backend %d", base, b);
        fwd_destroy(c);
    }
    double max_e = 0;
    for (size_t i = 0; i < N * V; i++) {
        double e = fabs((double)lg[0][i] - lg[1][i]);
        if (e > max_e || e != e) max_e = e;
    }
    fprintf(stderr, "%-22s %d positions' logits, Vulkan vs CPU: max |err| %.2e\n", base, N, max_e);
    T_CHECK(max_e <= 1e-3, "%s: all-position logits differ by %.3g", base, max_e);
    free(lg[0]);
    free(lg[1]);
    model_destroy(m);
}

/* 4. backend selection */
static void check_selection(void)
{
    struct model *m = load("stories260K");
    if (!m) return;
    struct fwd_ctx *c = NULL;
    struct fwd_opts o = {.n_ctx = 16, .backend = FWD_BACKEND_AUTO};
    T_CHECK(fwd_create(m, &o, &c) == ATTND_OK, "auto");
    if (c) {
        const char *dev = fwd_device_name(c);
        fprintf(stderr, "auto picked %s (%s)%s%s\n", fwd_backend_name(c), dev, fwd_backend_error()[0] ? ": " : "",
                fwd_backend_error());
        if (!strcmp(fwd_backend_name(c), "cpu"))
            T_CHECK(fwd_backend_error()[0] != 0, "auto fell back to the CPU without a reason");
        fwd_destroy(c);
    }
    o = (struct fwd_opts){.n_ctx = 16, .backend = FWD_BACKEND_VULKAN, .vk_device = 64};
    c = NULL;
    attnd_status st = fwd_create(m, &o, &c);
    T_CHECK(st != ATTND_OK && c == NULL, "device index 63 accepted");
    T_CHECK(strstr(fwd_backend_error(), "device") != NULL, "reason: '%s'", fwd_backend_error());
    fprintf(stderr, "--vk-device 63: %s\n", fwd_backend_error());
    model_destroy(m);
}

int main(int argc, char **argv)
{
    (void)argc;
    if (t_vk_no_leak_check(argv)) return 1;
    setenv("ATTND_VK_VALIDATION", "1", 0);
    double t0 = now_s();
    check_selection();
    fprintf(stderr, "[%.1f s] selection\n", now_s() - t0);
    check_probe("tiny-qwen2-f32");
    check_probe("tiny-llama-spm-f32");
    fprintf(stderr, "[%.1f s] attention probes\n", now_s() - t0);
    check_batch("tiny-qwen2-f32", TENSOR_F32);
    check_batch("tiny-llama-spm-q8_0", TENSOR_F16);
    fprintf(stderr, "[%.1f s] batch invariance\n", now_s() - t0);
    golden_run(FWD_BACKEND_VULKAN, NULL);
    fprintf(stderr, "[%.1f s] golden files\n", now_s() - t0);
    /* every weight type the shaders decode (Q2_K: q2_k/q3_k/q6_k, Q3_K_M: q4_k/q5_k, then one file
     * per 32-block and IQ4 type), and qwen3 (per-head q/k norms, head_dim != n_embd / n_head) in
     * F32 and Q4_K_M; the three text cases of each (the 301-token case is left to the CPU test:
     * lavapipe on 2 cores makes it minutes) */
    static const char *const formats[] = {"pub-llama-k-Q2_K",   "pub-llama-k-Q3_K_M", "pub-llama-k-Q4_1",
                                          "pub-llama-k-Q5_0",   "pub-llama-k-Q5_1",   "pub-llama-k-IQ4_NL",
                                          "pub-llama-k-IQ4_XS", "pub-qwen3-f32",      "pub-qwen3-Q4_K_M",
                                          NULL};
    T_CHECK(golden_run_in(FWD_BACKEND_VULKAN, "formats", formats, 3) == 9, "the 9 format models");
    fprintf(stderr, "[%.1f s] golden format files\n", now_s() - t0);
    /* weights larger than a buffer may be (maxStorageBufferRange; forced down to 2.5 MB here):
     * split by rows across buffers, matrix products and the embedding lookup run per part
     * (the 151,936-row tables of the qwen2 files in 16 and 5 parts, tiny-llama's in 4) */
    setenv("ATTND_VK_SPLIT_BYTES", "2500000", 1);
    static const char *const split[] = {"tiny-qwen2-f32", "tiny-qwen2-q8_0", "tiny-llama-spm-f32", NULL};
    T_CHECK(golden_run_in(FWD_BACKEND_VULKAN, "", split, 2) == 3, "the 3 models with split weights");
    check_batch("tiny-qwen2-f32", TENSOR_F32);
    check_all_logits("tiny-qwen2-f32"); /* 4 rows of 151,936 logits per 2.5 MB chunk: 10 chunks */
    unsetenv("ATTND_VK_SPLIT_BYTES");
    check_all_logits("tiny-qwen2-f32"); /* one chunk */
    fprintf(stderr, "[%.1f s] weights split across buffers\n", now_s() - t0);
    return t_finish("test_vk_forward");
}
