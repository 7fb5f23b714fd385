/* test_model.c - model loading and the weight types end to end.
 *  1. Files that are valid GGUF but not a model we run get a clear error naming the problem:
 *     another architecture, a missing or misshapen tensor, an unsupported tensor type (q8_1), a
 *     qwen3 file without its q/k norms, a RoPE scaling type we do not implement, a bad
 *     hyper-parameter, GQA heads that do not divide.
 *  2. `attnd mkmodel` writes the same seeded weights as f32, f16, bf16, q8_0 and q4_0; each
 *     loads, and its next-token log-probabilities stay within a per-type bound of the f32
 *     model's (the bound reflects each type's rounding), for llama and qwen2.
 *  3. The io_uring and pread loading paths give identical weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/forward.h"
#include "attnd/gguf_writer.h"
#include "attnd/model.h"
#include "attnd/tensor.h"
#include "testutil.h"

static const char *g_tmp;

static int fill_small(void *ud, int idx, void *buf, size_t nbytes)
{
    (void)ud;
    (void)idx;
    float *f = buf;
    for (size_t i = 0; i < nbytes / 4; i++) f[i] = 0.01f * (float)(i % 7);
    if (nbytes % 4) memset((char *)buf + nbytes / 4 * 4, 0, nbytes % 4);
    return 0;
}

/* Writes a tiny llama-like file with the given tweaks and returns model_load's status + err. */
struct tweak {
    const char *arch;
    int heads, kv_heads;
    const char *skip_tensor;   /* omit this tensor */
    const char *wrong_shape;   /* give this tensor a wrong shape */
    const char *odd_type;      /* give this tensor type q4_k (with a 256-wide row: a shape error) */
    const char *odd_type2;     /* give this tensor type q8_1 (a known type the kernels do not run) */
    const char *rope_scaling;  /* <arch>.rope.scaling.type */
};

static attnd_status build_and_load(const struct tweak *tw, char *err, size_t errlen)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tweak.gguf", g_tmp);
    struct gguf_writer *w = gguf_writer_create();
    const char *ar = tw->arch ? tw->arch : "llama";
    char key[128];
    const uint64_t D = 64, F = 128, V = 100;
#define K(s) (snprintf(key, sizeof key, "%s.%s", ar, s), key)
    gguf_writer_set_str(w, "general.architecture", ar, strlen(ar));
    gguf_writer_set_u32(w, K("embedding_length"), (uint32_t)D);
    gguf_writer_set_u32(w, K("block_count"), 1);
    gguf_writer_set_u32(w, K("feed_forward_length"), (uint32_t)F);
    gguf_writer_set_u32(w, K("attention.head_count"), (uint32_t)(tw->heads ? tw->heads : 4));
    gguf_writer_set_u32(w, K("attention.head_count_kv"), (uint32_t)(tw->kv_heads ? tw->kv_heads : 2));
    if (tw->rope_scaling) gguf_writer_set_str(w, K("rope.scaling.type"), tw->rope_scaling, strlen(tw->rope_scaling));
#undef K
    int H = tw->heads ? tw->heads : 4, KV = tw->kv_heads ? tw->kv_heads : 2;
    uint64_t hd = D / (uint64_t)H, nkv = hd * (uint64_t)KV;
    struct {
        const char *name;
        uint64_t n0, n1;
    } ts[] = {{"token_embd.weight", D, V},        {"output_norm.weight", D, 0},    {"blk.0.attn_norm.weight", D, 0},
              {"blk.0.attn_q.weight", D, D},      {"blk.0.attn_k.weight", D, nkv}, {"blk.0.attn_v.weight", D, nkv},
              {"blk.0.attn_output.weight", D, D}, {"blk.0.ffn_norm.weight", D, 0}, {"blk.0.ffn_gate.weight", D, F},
              {"blk.0.ffn_up.weight", D, F},      {"blk.0.ffn_down.weight", F, D}};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        if (tw->skip_tensor && !strcmp(tw->skip_tensor, ts[i].name)) continue;
        uint64_t ne[2] = {ts[i].n0, ts[i].n1};
        if (tw->wrong_shape && !strcmp(tw->wrong_shape, ts[i].name)) ne[1] += 1;
        uint32_t type = tw->odd_type && !strcmp(tw->odd_type, ts[i].name) ? TENSOR_Q4_K : TENSOR_F32;
        if (type == TENSOR_Q4_K) ne[0] = 256;
        if (tw->odd_type2 && !strcmp(tw->odd_type2, ts[i].name)) type = TENSOR_Q8_1;
        gguf_writer_add_tensor(w, ts[i].name, type, ts[i].n1 ? 2 : 1, ne);
    }
    char werr[256];
    attnd_status st = gguf_writer_write(w, path, fill_small, NULL, werr, sizeof werr);
    gguf_writer_destroy(w);
    if (st) {
        snprintf(err, errlen, "write failed: %s", werr);
        return ATTND_ERR_INTERNAL;
    }
    struct model *m;
    st = model_load(path, &m, err, errlen);
    model_destroy(m);
    return st;
}

static void bad_models(void)
{
    char err[512];
    struct tweak ok = {0};
    T_CHECK(build_and_load(&ok, err, sizeof err) == ATTND_OK, "baseline tweak model loads: %s", err);
    struct {
        struct tweak tw;
        attnd_status st;
        const char *needle;
    } cases[] = {
        {{.arch = "gpt2"}, ATTND_ERR_UNSUPPORTED, "unsupported architecture 'gpt2'"},
        {{.arch = "mamba"}, ATTND_ERR_UNSUPPORTED, "mamba"},
        {{.skip_tensor = "blk.0.attn_k.weight"}, ATTND_ERR_FORMAT, "missing tensor 'blk.0.attn_k.weight'"},
        {{.skip_tensor = "output_norm.weight"}, ATTND_ERR_FORMAT, "output_norm.weight"},
        {{.wrong_shape = "blk.0.ffn_down.weight"}, ATTND_ERR_FORMAT, "blk.0.ffn_down.weight"},
        {{.odd_type = "blk.0.attn_q.weight"}, ATTND_ERR_FORMAT, "attn_q"},
        {{.heads = 4, .kv_heads = 3}, ATTND_ERR_FORMAT, "key/value heads"},
        {{.odd_type2 = "blk.0.ffn_up.weight"}, ATTND_ERR_UNSUPPORTED, "'blk.0.ffn_up.weight' has type q8_1"},
        {{.arch = "qwen3"}, ATTND_ERR_FORMAT, "missing tensor 'blk.0.attn_q_norm.weight'"},
        {{.rope_scaling = "yarn"}, ATTND_ERR_UNSUPPORTED, "RoPE scaling type 'yarn'"},
        {{.rope_scaling = "none"}, ATTND_OK, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        attnd_status st = build_and_load(&cases[i].tw, err, sizeof err);
        T_CHECK(st == cases[i].st && strstr(err, cases[i].needle), "case %zu: status %s, message '%s' (want '%s')", i,
                attnd_status_str(st), err, cases[i].needle);
    }
}

/* log-softmax of the last position after a fixed prompt */
static int score(const char *path, int n_threads, double *lp, int V_max)
{
    char err[512];
    struct model *m;
    if (model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "load %s: %s\n", path, err);
        return -1;
    }
    int V = m->hp.n_vocab;
    struct fwd_opts o = {.n_ctx = 64, .n_threads = n_threads};
    struct fwd_ctx *c;
    fwd_create(m, &o, &c);
    int32_t toks[20];
    for (int i = 0; i < 20; i++) toks[i] = (i * 37 + 11) % V;
    float *lg = malloc((size_t)V * sizeof(float));
    fwd_eval(c, toks, 20, false, lg);
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int i = 0; i < V; i++) s += exp(lg[i] - mx);
    for (int i = 0; i < V && i < V_max; i++) lp[i] = lg[i] - mx - log(s);
    free(lg);
    fwd_destroy(c);
    model_destroy(m);
    return V;
}

static void weight_types(const char *attnd)
{
    const char *types[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
    /* max |logprob - f32 logprob| allowed, as a fraction of the spread of the f32 logprobs:
     * each type's relative rounding (f16 2^-11, bf16 2^-8, q8_0 ~1/254 per block plus 8-bit
     * activations, q4_0 ~1/16) grows the logits' error in proportion to their size */
    const double bound[] = {0, 1e-3, 8e-3, 3e-2, 2e-1};
    const char *archs[] = {"llama", "qwen2"};
    enum { VMAX = 512 };
    static double ref[VMAX], got[VMAX];
    for (int a = 0; a < 2; a++)
        for (int t = 0; t < 5; t++) {
            char path[512], cmd[2048];
            snprintf(path, sizeof path, "%s/%s-%s.gguf", g_tmp, archs[a], types[t]);
            snprintf(cmd, sizeof cmd,
                     "%s mkmodel -o %s --arch %s --layers 2 --dim 128 --heads 4 --kv-heads 2 --ffn 256 "
                     "--vocab-size 300 --type %s --seed 5 %s 2>/dev/null",
                     attnd, path, archs[a], types[t], a ? "--tied" : "");
            T_CHECK(system(cmd) == 0, "mkmodel %s %s", archs[a], types[t]);
            int V = score(path, 2, t ? got : ref, VMAX);
            T_CHECK(V == 300, "%s %s loads and runs", archs[a], types[t]);
            if (t == 0 || V != 300) continue;
            double e = 0, spread = 0;
            for (int i = 0; i < V; i++) {
                e = fmax(e, fabs(got[i] - ref[i]));
                spread = fmax(spread, fabs(ref[i] - ref[0]));
            }
            fprintf(stderr, "%-5s %-4s: max |logprob - f32| = %.2e (bound %.2e = %g x logprob spread %.2f)\n",
                    archs[a], types[t], e, bound[t] * spread, bound[t], spread);
            T_CHECK(e <= bound[t] * spread, "%s %s within %g of f32 (got %.3e)", archs[a], types[t],
                    bound[t] * spread, e);
            T_CHECK(e > 0, "%s %s differs from f32 at all (the type is really used)", archs[a], types[t]);
        }
    /* io_uring and pread give the same numbers; 1 and 2 threads too */
    char path[512];
    snprintf(path, sizeof path, "%s/llama-q8_0.gguf", g_tmp);
    score(path, 2, ref, VMAX);
    setenv("ATTND_NO_IO_URING", "1", 1);
    score(path, 1, got, VMAX);
    unsetenv("ATTND_NO_IO_URING");
    int same = 1;
    for (int i = 0; i < 300; i++) same &= fabs(ref[i] - got[i]) < 1e-5;
    T_CHECK(same, "pread + 1 thread == io_uring + 2 threads");
}

int main(void)
{
    char tmpl[] = "/tmp/attnd-test-model-XXXXXX";
    g_tmp = mkdtemp(tmpl);
    if (!g_tmp) return 1;
    bad_models();
    const char *attnd = getenv("ATTND_BIN");
    if (!attnd) attnd = "build/release/attnd";
    if (access(attnd, X_OK)) {
        fprintf(stderr, "test_model: attnd binary not found at %s (set ATTND_BIN)\n", attnd);
        return 1;
    }
    weight_types(attnd);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
    return t_finish("test_model");
}
