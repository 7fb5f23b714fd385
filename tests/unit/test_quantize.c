/* test_quantize.c - the quantizers (attnd/quantize.h) on the weights of
 * $SHARED/models/formats/pub-llama-k-f32.gguf:
 *   quality: relative RMS error |dequant(quant(w)) - w| / |w|, mean over the 2-D matrices, no
 *     worse than 1.02x the reference quantizer's figures (Q4_K 0.0713, Q5_K 0.0361, Q6_K 0.0177);
 *     Q8_0/Q4_0/Q5_0/Q5_1 are only checked to be below plain bounds;
 *   mixes: quantize_file with q4_k_m, q5_k_m and q6_k gives every tensor the type the reference's
 *     own file of that preset (pub-llama-k-Q4_K_M.gguf, ...) has, and the output loads and runs;
 *   bad input: an unsupported type or a partial block is refused. */
#include "attnd/quantize.h"

#include "attnd/forward.h"
#include "attnd/gguf.h"
#include "attnd/model.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/unit/testutil.h"

#include <math.h>
#include <string.h>

static double rel_err_mean(const struct gguf *g, const unsigned char *file, enum tensor_type t, int *n_mat)
{
    double sum = 0;
    *n_mat = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *te = gguf_tensor(g, i);
        if (te->n_dims != 2 || te->type != TENSOR_F32) continue;
        const size_t n = (size_t)te->n_elems;
        const float *w = (const float *)(const void *)(file + te->offset);
        uint64_t nb = 0;
        tensor_nbytes(t, n, &nb);
        unsigned char *q = t_xmalloc((size_t)nb);
        float *d = t_xmalloc(n * sizeof(float));
        T_CHECK(quantize_row(t, w, q, n) == ATTND_OK, "quantize %s", te->name);
        cpu_dequant_row(t, q, d, n);
        double e = 0, s = 0;
        for (size_t k = 0; k < n; k++) e += ((double)d[k] - w[k]) * ((double)d[k] - w[k]), s += (double)w[k] * w[k];
        sum += sqrt(e / s);
        (*n_mat)++;
        free(q);
        free(d);
    }
    return *n_mat ? sum / *n_mat : 1.0;
}

static void check_mix(const char *preset, const char *ref_name)
{
    char in[1024], ref[1024], out[256];
    snprintf(in, sizeof in, "%s/models/formats/pub-llama-k-f32.gguf", t_shared());
    snprintf(ref, sizeof ref, "%s/models/formats/%s", t_shared(), ref_name);
    snprintf(out, sizeof out, "/tmp/test_quantize_%d_%s.gguf", (int)getpid(), preset);
    enum quantize_preset p;
    T_CHECK(quantize_preset_parse(preset, &p) == 0, "preset %s", preset);
    char err[512] = "";
    attnd_status st = quantize_file(in, out, p, 2, NULL, NULL, err, sizeof err);
    T_CHECK(st == ATTND_OK, "quantize_file %s: %s", preset, err);
    if (st) return;
    struct gguf *a = NULL, *b = NULL;
    T_CHECK(gguf_open(out, &a, err, sizeof err) == ATTND_OK, "open %s: %s", out, err);
    T_CHECK(gguf_open(ref, &b, err, sizeof err) == ATTND_OK, "open %s: %s", ref, err);
    if (a && b) {
        T_CHECK(gguf_n_tensors(a) == gguf_n_tensors(b), "%s: %lld tensors vs %lld", preset, (long long)gguf_n_tensors(a),
                (long long)gguf_n_tensors(b));
        for (int64_t i = 0; i < gguf_n_tensors(b); i++) {
            const struct gguf_tensor *tb = gguf_tensor(b, i), *ta = gguf_find_tensor(a, tb->name);
            T_CHECK(ta && ta->type == tb->type, "%s: %s is %s, the reference has %s", preset, tb->name,
                    ta ? tensor_type_name(ta->type) : "missing", tensor_type_name(tb->type));
        }
        int64_t ft = 0;
        T_CHECK(gguf_get_int(a, "general.file_type", &ft) == ATTND_OK && gguf_get_int(b, "general.file_type", &ft) == ATTND_OK,
                "file_type present");
    }
    gguf_close(a);
    gguf_close(b);
    struct model *m = NULL;
    st = model_load(out, &m, err, sizeof err);
    T_CHECK(st == ATTND_OK, "load %s: %s", out, err);
    if (m) {
        struct fwd_opts o = {.n_ctx = 8, .n_threads = 1};
        struct fwd_ctx *c = NULL;
        T_CHECK(fwd_create(m, &o, &c) == ATTND_OK, "fwd_create");
        float *lg = t_xmalloc((size_t)m->hp.n_vocab * sizeof(float));
        const int32_t toks[3] = {510, 40, 41};
        T_CHECK(c && fwd_eval(c, toks, 3, false, lg) == ATTND_OK, "eval");
        int finite = 1;
        for (int i = 0; i < m->hp.n_vocab; i++) finite &= isfinite(lg[i]) != 0;
        T_CHECK(finite, "%s: finite logits", preset);
        free(lg);
        fwd_destroy(c);
        model_destroy(m);
    }
    unlink(out);
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/formats/pub-llama-k-f32.gguf", t_shared());
    size_t len = 0;
    unsigned char *file = (unsigned char *)t_slurp(path, &len);
    struct gguf *g = NULL;
    char err[512];
    T_CHECK(file && gguf_open_mem(file, len, &g, err, sizeof err) == ATTND_OK, "open %s", path);
    if (!g) return t_finish("test_quantize");
    static const struct {
        enum tensor_type t;
        double bound; /* 1.02x the reference quantizer, or a plain bound */
    } q[] = {{TENSOR_Q4_K, 1.02 * 0.0713}, {TENSOR_Q5_K, 1.02 * 0.0361}, {TENSOR_Q6_K, 1.02 * 0.0177},
             {TENSOR_Q8_0, 0.006},         {TENSOR_Q4_0, 0.12},          {TENSOR_Q5_0, 0.06},
             {TENSOR_Q5_1, 0.05}};
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) {
        int n_mat;
        double e = rel_err_mean(g, file, q[i].t, &n_mat);
        fprintf(stderr, "%-5s relative RMS error %.5f over %d matrices (bound %.5f)\n", tensor_type_name(q[i].t), e,
                n_mat, q[i].bound);
        T_CHECK(n_mat == 23 && e <= q[i].bound, "%s: %.5f > %.5f", tensor_type_name(q[i].t), e, q[i].bound);
    }
    gguf_close(g);
    free(file);
    float x[64] = {0};
    unsigned char buf[512];
    T_CHECK(quantize_row(TENSOR_Q4_K, x, buf, 64) == ATTND_ERR_INVALID, "partial super-block refused");
    T_CHECK(quantize_row(TENSOR_IQ4_XS, x, buf, 256) == ATTND_ERR_INVALID, "iq4_xs is not a quantizer type");
    check_mix("q4_k_m", "pub-llama-k-Q4_K_M.gguf");
    check_mix("q5_k_m", "pub-llama-k-Q5_K_M.gguf");
    check_mix("q6_k", "pub-llama-k-Q6_K.gguf");
    return t_finish("test_quantize");
}
