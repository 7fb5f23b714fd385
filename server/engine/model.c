/* model.c - binds a GGUF file's tensors to a llama/qwen2/qwen3 model and loads the weights. */
#include "attnd/model.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/log.h"
#include "attnd/weights.h"
#include "kernels/cpu/cpu_kernels.h"

/* Caps on hyper-parameters: far above any model this daemon runs, low enough that no
 * size computed from them can overflow. */
#define MAX_EMBD (1 << 16)
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_FF (1 << 18)
#define MAX_VOCAB (1 << 22)

static attnd_status errf(char *err, size_t errlen, attnd_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static attnd_status errf(char *err, size_t errlen, attnd_status st, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* Reads <arch>.<suffix> as an integer in [lo, hi]; missing -> def (or an error if def < 0). */
static attnd_status hp_int(const struct gguf *g, const char *arch, const char *suffix, int64_t def, int64_t lo,
                           int64_t hi, int *out, char *err, size_t errlen)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    attnd_status st = gguf_get_int(g, key, &v);
    if (st == ATTND_ERR_NOTFOUND) {
        if (def < 0) return errf(err, errlen, ATTND_ERR_FORMAT, "missing hyper-parameter '%s'", key);
        v = def;
    } else if (st != ATTND_OK) {
        return errf(err, errlen, ATTND_ERR_FORMAT, "hyper-parameter '%s' is not an integer", key);
    }
    if (v < lo || v > hi)
        return errf(err, errlen, ATTND_ERR_FORMAT, "hyper-parameter '%s' = %" PRId64 " is out of range [%" PRId64
                    ", %" PRId64 "]", key, v, lo, hi);
    *out = (int)v;
    return ATTND_OK;
}

static attnd_status hp_float(const struct gguf *g, const char *arch, const char *suffix, double def, double lo,
                             double hi, float *out, char *err, size_t errlen)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    double v;
    attnd_status st = gguf_get_float(g, key, &v);
    if (st == ATTND_ERR_NOTFOUND) v = def;
    else if (st != ATTND_OK) return errf(err, errlen, ATTND_ERR_FORMAT, "hyper-parameter '%s' is not a number", key);
    if (!(v >= lo && v <= hi))
        return errf(err, errlen, ATTND_ERR_FORMAT, "hyper-parameter '%s' = %g is out of range [%g, %g]", key, v, lo, hi);
    *out = (float)v;
    return ATTND_OK;
}

attnd_status model_read_hparams(const struct gguf *g, struct model_hparams *hp, char *err, size_t errlen)
{
    struct gguf_str a;
    if (gguf_get_str(g, "general.architecture", &a) != ATTND_OK)
        return errf(err, errlen, ATTND_ERR_FORMAT, "missing string key 'general.architecture'");
    if (a.len == 5 && !memcmp(a.ptr, "llama", 5)) {
        hp->arch = MODEL_ARCH_LLAMA;
        hp->rope_neox = false;
    } else if (a.len == 5 && !memcmp(a.ptr, "qwen2", 5)) {
        hp->arch = MODEL_ARCH_QWEN2;
        hp->rope_neox = true;
    } else if (a.len == 5 && !memcmp(a.ptr, "qwen3", 5)) {
        hp->arch = MODEL_ARCH_QWEN3;
        hp->rope_neox = true;
    } else {
        return errf(err, errlen, ATTND_ERR_UNSUPPORTED,
                    "unsupported architecture '%.*s' (attnd runs 'llama', 'qwen2' and 'qwen3')",
                    (int)(a.len > 64 ? 64 : a.len), a.ptr);
    }
    memcpy(hp->arch_name, a.ptr, a.len);
    hp->arch_name[a.len] = 0;
    const char *ar = hp->arch_name;
    attnd_status st;
    if ((st = hp_int(g, ar, "embedding_length", -1, 1, MAX_EMBD, &hp->n_embd, err, errlen)) ||
        (st = hp_int(g, ar, "block_count", -1, 1, MAX_LAYERS, &hp->n_layer, err, errlen)) ||
        (st = hp_int(g, ar, "feed_forward_length", -1, 1, MAX_FF, &hp->n_ff, err, errlen)) ||
        (st = hp_int(g, ar, "attention.head_count", -1, 1, MAX_HEADS, &hp->n_head, err, errlen)) ||
        (st = hp_int(g, ar, "attention.head_count_kv", hp->n_head, 1, MAX_HEADS, &hp->n_head_kv, err, errlen)) ||
        (st = hp_int(g, ar, "context_length", 4096, 1, 1 << 24, &hp->n_ctx_train, err, errlen)))
        return st;
    if (hp->n_head % hp->n_head_kv)
        return errf(err, errlen, ATTND_ERR_FORMAT, "%d query heads are not a multiple of %d key/value heads",
                    hp->n_head, hp->n_head_kv);
    int def_hd = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : -1;
    if ((st = hp_int(g, ar, "attention.key_length", def_hd, 2, 4096, &hp->head_dim, err, errlen))) return st;
    int vlen;
    if ((st = hp_int(g, ar, "attention.value_length", hp->head_dim, 2, 4096, &vlen, err, errlen))) return st;
    if (vlen != hp->head_dim)
        return errf(err, errlen, ATTND_ERR_UNSUPPORTED, "key length %d != value length %d is not supported",
                    hp->head_dim, vlen);
    if ((st = hp_int(g, ar, "rope.dimension_count", hp->head_dim, 2, hp->head_dim, &hp->n_rot, err, errlen)))
        return st;
    if (hp->n_rot % 2)
        return errf(err, errlen, ATTND_ERR_FORMAT, "rope.dimension_count %d is odd", hp->n_rot);
    if ((st = hp_float(g, ar, "attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0, &hp->rms_eps, err, errlen)) ||
        (st = hp_float(g, ar, "rope.freq_base", 10000.0, 1e-3, 1e12, &hp->rope_base, err, errlen)))
        return st;
    /* Llama 3.1 scaling comes as rope_freqs.weight (bound below); any other scaling would be
     * silently wrong logits, so it is refused */
    char key[128];
    struct gguf_str rs;
    snprintf(key, sizeof key, "%s.rope.scaling.type", ar);
    if (gguf_get_str(g, key, &rs) == ATTND_OK && !(rs.len == 4 && !memcmp(rs.ptr, "none", 4)))
        return errf(err, errlen, ATTND_ERR_UNSUPPORTED, "unsupported RoPE scaling type '%.*s' (%s)",
                    (int)(rs.len > 64 ? 64 : rs.len), rs.ptr, key);
    return ATTND_OK;
}

struct binder {
    const struct gguf *g;
    struct model *m;
    char *err;
    size_t errlen;
    attnd_status st;
    float *f32_next; /* next free slot in m->f32_arena */
    float *f32_end;  /* one past the arena's last slot */
};

static const struct gguf_tensor *find(struct binder *b, const char *name, bool required)
{
    if (b->st) return NULL;
    const struct gguf_tensor *t = gguf_find_tensor(b->g, name);
    if (!t && required) b->st = errf(b->err, b->errlen, ATTND_ERR_FORMAT, "missing tensor '%s'", name);
    return t;
}

static const void *data_of(struct binder *b, const struct gguf_tensor *t)
{
    return (const uint8_t *)b->m->arena + (t->offset - gguf_data_offset(b->g));
}

static void bind_weight(struct binder *b, struct model_weight *w, const char *name, size_t n_in, size_t n_out,
                        bool required)
{
    const struct gguf_tensor *t = find(b, name, required);
    if (!t) return;
    if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out) {
        b->st = errf(b->err, b->errlen, ATTND_ERR_FORMAT,
                     "tensor '%s' has shape [%" PRIu64 ", %" PRIu64 ", %" PRIu64 "], expected [%zu, %zu]", name,
                     t->ne[0], t->ne[1], t->ne[2], n_in, n_out);
        return;
    }
    if (!cpu_type_supported((enum tensor_type)t->type)) {
        b->st = errf(b->err, b->errlen, ATTND_ERR_UNSUPPORTED,
                     "tensor '%s' has type %s; supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs", name,
                     tensor_type_name(t->type));
        return;
    }
    w->type = (enum tensor_type)t->type;
    w->data = data_of(b, t);
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = (size_t)(t->nbytes / n_out);
}

/* A 1-D tensor of n elements, converted to f32 into the model's f32 arena. */
static const float *bind_vec(struct binder *b, const char *name, size_t n, bool required)
{
    const struct gguf_tensor *t = find(b, name, required);
    if (!t) return NULL;
    /* only true 1-D tensors: the f32 arena was sized from those (an [n, 1] tensor is refused) */
    if (t->n_dims != 1 || t->n_elems != n || t->ne[0] != n) {
        b->st = errf(b->err, b->errlen, ATTND_ERR_FORMAT,
                     "tensor '%s' has %u dimensions and %" PRIu64 " elements, expected 1 dimension of %zu", name,
                     (unsigned)t->n_dims, t->n_elems, n);
        return NULL;
    }
    if (t->type != TENSOR_F32 && t->type != TENSOR_F16 && t->type != TENSOR_BF16) {
        b->st = errf(b->err, b->errlen, ATTND_ERR_UNSUPPORTED, "tensor '%s' has type %s; expected f32, f16 or bf16",
                     name, tensor_type_name(t->type));
        return NULL;
    }
    if (n > (size_t)(b->f32_end - b->f32_next)) { /* a tensor bound twice, or a bug: never write past the arena */
        b->st = errf(b->err, b->errlen, ATTND_ERR_FORMAT, "tensor '%s' does not fit the 1-D weight arena", name);
        return NULL;
    }
    float *dst = b->f32_next;
    b->f32_next += n;
    cpu_dequant_row((enum tensor_type)t->type, data_of(b, t), dst, n);
    return dst;
}

static void bind_all(struct binder *b)
{
    struct model *m = b->m;
    const struct model_hparams *hp = &m->hp;
    size_t d = (size_t)hp->n_embd, hd = (size_t)hp->head_dim, nq = (size_t)hp->n_head * hd,
           nkv = (size_t)hp->n_head_kv * hd, ff = (size_t)hp->n_ff, V = (size_t)hp->n_vocab;
    char name[96];
    bind_weight(b, &m->tok_embd, "token_embd.weight", d, V, true);
    m->output_norm = bind_vec(b, "output_norm.weight", d, true);
    if (find(b, "output.weight", false)) {
        bind_weight(b, &m->output, "output.weight", d, V, true);
        m->hp.tied_output = false;
    } else {
        m->output = m->tok_embd;
        m->hp.tied_output = true;
    }
    if (find(b, "rope_freqs.weight", false)) m->rope_freqs = bind_vec(b, "rope_freqs.weight", (size_t)hp->n_rot / 2, true);
    bool bias = hp->arch == MODEL_ARCH_QWEN2;
    for (int l = 0; l < hp->n_layer && !b->st; l++) {
        struct model_layer *L = &m->layers[l];
#define NM(s) (snprintf(name, sizeof name, "blk.%d.%s", l, s), name)
        L->attn_norm = bind_vec(b, NM("attn_norm.weight"), d, true);
        bind_weight(b, &L->wq, NM("attn_q.weight"), d, nq, true);
        bind_weight(b, &L->wk, NM("attn_k.weight"), d, nkv, true);
        bind_weight(b, &L->wv, NM("attn_v.weight"), d, nkv, true);
        bind_weight(b, &L->wo, NM("attn_output.weight"), nq, d, true);
        /* qwen2 always has q/k/v biases; a llama file may carry them too */
        L->bq = bind_vec(b, NM("attn_q.bias"), nq, bias);
        L->bk = bind_vec(b, NM("attn_k.bias"), nkv, bias);
        L->bv = bind_vec(b, NM("attn_v.bias"), nkv, bias);
        /* qwen3 normalises each head of q and k before RoPE */
        L->q_norm = bind_vec(b, NM("attn_q_norm.weight"), hd, hp->arch == MODEL_ARCH_QWEN3);
        L->k_norm = bind_vec(b, NM("attn_k_norm.weight"), hd, hp->arch == MODEL_ARCH_QWEN3);
        L->ffn_norm = bind_vec(b, NM("ffn_norm.weight"), d, true);
        bind_weight(b, &L->w_gate, NM("ffn_gate.weight"), d, ff, true);
        bind_weight(b, &L->w_up, NM("ffn_up.weight"), d, ff, true);
        bind_weight(b, &L->w_down, NM("ffn_down.weight"), ff, d, true);
#undef NM
    }
}

/* Elements of all 1-D tensors (what bind_vec may place in the f32 arena) into *n; false if the
 * sum overflows (tensors may share data offsets, so it is not bounded by the file size). */
static bool count_1d(const struct gguf *g, size_t *n)
{
    *n = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        if (t->n_dims != 1) continue;
        if (t->n_elems > SIZE_MAX / sizeof(float) - *n) return false;
        *n += (size_t)t->n_elems;
    }
    return true;
}

void model_destroy(struct model *m)
{
    if (!m) return;
    weights_free(m->arena, m->arena_size);
    free(m->f32_arena);
    free(m->layers);
    gguf_close(m->gguf);
    free(m->path);
    free(m->name);
    free(m);
}

attnd_status model_load_gguf(const char *path, struct gguf *g, struct model **out, char *err, size_t errlen)
{
    *out = NULL;
    cpu_kernels_init();
    struct model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(g);
        return errf(err, errlen, ATTND_ERR_NOMEM, "out of memory");
    }
    m->gguf = g;
    attnd_status st = model_read_hparams(g, &m->hp, err, errlen);
    if (st) goto fail;

    const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > MAX_VOCAB) {
        st = errf(err, errlen, ATTND_ERR_FORMAT, "%s", emb ? "tensor 'token_embd.weight' has a bad shape"
                                                           : "missing tensor 'token_embd.weight'");
        goto fail;
    }
    m->hp.n_vocab = (int)emb->ne[1];
    m->path = strdup(path);
    struct gguf_str nm;
    if (gguf_get_str(g, "general.name", &nm) == ATTND_OK && nm.len > 0 && nm.len < 256)
        m->name = strndup(nm.ptr, (size_t)nm.len);
    else {
        const char *base = strrchr(path, '/');
        m->name = strdup(base ? base + 1 : path);
    }
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->path || !m->name || !m->layers) {
        st = errf(err, errlen, ATTND_ERR_NOMEM, "out of memory");
        goto fail;
    }

    /* room for every 1-D tensor converted to f32 (an upper bound: all 1-D tensors) */
    size_t n_f32 = 0;
    if (!count_1d(g, &n_f32)) {
        st = errf(err, errlen, ATTND_ERR_FORMAT, "the 1-D tensors hold more elements than memory can");
        goto fail;
    }
    m->f32_arena = malloc((n_f32 ? n_f32 : 1) * sizeof(float));
    uint64_t data_size = gguf_file_size(g) - gguf_data_offset(g);
    if (gguf_n_tensors(g) == 0 || gguf_data_offset(g) > gguf_file_size(g)) data_size = 0;
    m->arena_size = (size_t)data_size;
    m->arena = weights_alloc(m->arena_size);
    if (!m->f32_arena || !m->arena) {
        st = errf(err, errlen, ATTND_ERR_NOMEM, "out of memory for %" PRIu64 " bytes of weights", data_size);
        goto fail;
    }
    struct weights_stats ws;
    char rerr[384];
    if ((st = weights_read(path, gguf_data_offset(g), data_size, m->arena, &ws, rerr, sizeof rerr))) {
        errf(err, errlen, st, "%s", rerr);
        goto fail;
    }
    m->load_method = ws.method;
    m->load_seconds = ws.seconds;
    m->load_bytes = ws.bytes;

    struct binder b = {.g = g, .m = m, .err = err, .errlen = errlen, .f32_next = m->f32_arena,
                      .f32_end = m->f32_arena + n_f32};
    bind_all(&b);
    if ((st = b.st)) goto fail;
    m->f32_count = (size_t)(b.f32_next - m->f32_arena);

    const struct model_hparams *hp = &m->hp;
    log_info("model %s: %s, %d layers, d=%d, %d heads (%d kv, head dim %d), ffn %d, vocab %d, %s output, %s weights",
             m->name, hp->arch_name, hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff,
             hp->n_vocab, hp->tied_output ? "tied" : "untied", tensor_type_name(m->layers[0].wq.type));
    log_info("loaded %.1f MB in %.3f s (%.0f MB/s) with %s", (double)data_size / 1e6, ws.seconds,
             ws.seconds > 0 ? (double)data_size / 1e6 / ws.seconds : 0.0, ws.method);
    *out = m;
    return ATTND_OK;
fail:
    model_destroy(m);
    return st;
}

attnd_status model_load(const char *path, struct model **out, char *err, size_t errlen)
{
    struct gguf *g;
    char gerr[384];
    *out = NULL;
    attnd_status st = gguf_open(path, &g, gerr, sizeof gerr);
    if (st) return errf(err, errlen, st, "%s: %s", path, gerr);
    return model_load_gguf(path, g, out, err, errlen);
}

static uint64_t weight_elems(const struct model_weight *w) { return (uint64_t)w->n_in * w->n_out; }

uint64_t model_n_params(const struct model *m)
{
    uint64_t n = weight_elems(&m->tok_embd) + (m->hp.tied_output ? 0 : weight_elems(&m->output)) + m->f32_count;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        n += weight_elems(&L->wq) + weight_elems(&L->wk) + weight_elems(&L->wv) + weight_elems(&L->wo) +
             weight_elems(&L->w_gate) + weight_elems(&L->w_up) + weight_elems(&L->w_down);
    }
    return n;
}
