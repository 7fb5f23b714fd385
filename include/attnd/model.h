/* model.h - a loaded llama/qwen2/qwen3 model: hyper-parameters and weights in memory.
 * A struct model is immutable after model_load() and may be shared by any number of
 * forward contexts and threads. */
#ifndef ATTND_MODEL_H
#define ATTND_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"
#include "attnd/tensor.h"

struct gguf;

enum model_arch { MODEL_ARCH_LLAMA = 0, MODEL_ARCH_QWEN2 = 1, MODEL_ARCH_QWEN3 = 2 };

struct model_hparams {
    enum model_arch arch;
    char arch_name[16];
    int n_vocab;     /* rows of token_embd */
    int n_ctx_train; /* <arch>.context_length */
    int n_embd;      /* model width d */
    int n_layer;
    int n_ff;        /* MLP hidden width */
    int n_head;      /* query heads */
    int n_head_kv;   /* key/value heads (GQA: n_head % n_head_kv == 0) */
    int head_dim;    /* per-head width (key_length, default n_embd / n_head) */
    int n_rot;       /* rotated dims per head (rope.dimension_count, default head_dim) */
    float rms_eps;
    float rope_base;
    bool rope_neox;  /* qwen2 rotates halves, llama rotates adjacent pairs */
    bool tied_output;
};

/* A 2-D weight: n_out rows of n_in elements of `type`, row r at data + r*row_bytes. */
struct model_weight {
    enum tensor_type type;
    const void *data;
    size_t n_in, n_out, row_bytes;
};

struct model_layer {
    const float *attn_norm;                 /* (n_embd) */
    struct model_weight wq, wk, wv, wo;     /* (n_head*hd, n_embd) (n_kv*hd, n_embd) x2, (n_embd, n_head*hd) */
    const float *bq, *bk, *bv;              /* biases (qwen2) or NULL */
    const float *q_norm, *k_norm;           /* (head_dim) per-head RMSNorm weights before RoPE (qwen3) or NULL */
    const float *ffn_norm;                  /* (n_embd) */
    struct model_weight w_gate, w_up, w_down; /* (n_ff, n_embd) x2, (n_embd, n_ff) */
};

struct model {
    struct model_hparams hp;
    struct model_weight tok_embd;   /* (n_vocab, n_embd) */
    const float *output_norm;       /* (n_embd) */
    struct model_weight output;     /* (n_vocab, n_embd); == tok_embd when tied */
    const float *rope_freqs;        /* (n_rot/2) divisors, or NULL */
    struct model_layer *layers;     /* (n_layer) */
    struct gguf *gguf;              /* the parsed header (tokenizer metadata lives here) */
    char *path;
    char *name;                     /* general.name or the file's base name */
    /* memory */
    void *arena;                    /* the file's tensor data section */
    size_t arena_size;
    float *f32_arena;               /* 1-D tensors converted to f32 */
    size_t f32_count;
    /* load statistics */
    const char *load_method;        /* "io_uring" or "pread" */
    double load_seconds;
    uint64_t load_bytes;
};

/* The hyperparameters of an open GGUF file's model (what model_load checks first), without its
 * tensors. */
attnd_status model_read_hparams(const struct gguf *g, struct model_hparams *hp, char *err, size_t errlen);
/* Loads path. On failure returns a status, *out stays NULL and err names what is wrong
 * (the file, the key or the tensor). Logs the load path, time and MB/s. */
attnd_status model_load(const char *path, struct model **out, char *err, size_t errlen);
/* Loads from an already opened header (takes ownership of g on success and failure). */
attnd_status model_load_gguf(const char *path, struct gguf *g, struct model **out, char *err, size_t errlen);
/* Frees everything; model_destroy(NULL) is a no-op. */
void model_destroy(struct model *m);

/* Number of parameters (elements of all weights). */
uint64_t model_n_params(const struct model *m);

#endif
