/* mkmodel.c - `attnd mkmodel`: writes a llama/qwen2 GGUF with seeded random weights.
 *
 * Without --vocab-from it writes a byte-level BPE vocabulary of attnd's own: the 256 byte
 * tokens (GPT-2 byte-to-unicode mapping, id = byte value), merges learnt from a short built-in
 * English text, <|bos|> and <|endoftext|>, then unused padding tokens up to --vocab-size.
 * Every tensor's values depend only on --seed and the tensor's name.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"
#include "attnd/tensor.h"
#include "attnd/utf8.h"
#include "kernels/cpu/cpu_kernels.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

struct mk {
    const char *arch;
    long layers, dim, heads, kv_heads, ffn, vocab, ctx, merges;
    int tied;
    uint32_t wtype;
    uint64_t seed;
    /* per declared tensor */
    char **names;
    int n;
};

static const char g_corpus[] =
    "the quick brown fox jumps over the lazy dog. attention is what the model pays to the tokens that came "
    "before, and each head of each layer looks at them in its own way. a server that shows the weights of "
    "attention lets you see which words the model reads when it writes the next one. the cache keeps the keys "
    "and values of every token so that the next step does not compute them again. in the morning the sun "
    "rises over the hills and the river runs to the sea; people walk to work, talk with their friends, and "
    "think about the things they want to do. numbers like 1, 2, 3, 10, 42 and 2026 appear in text as well. "
    "there is nothing in the world that is not made of smaller things, and there are many of them.";

/* ---- random numbers: splitmix64 seeded per tensor ---------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s) { return (float)((splitmix(s) >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* ---- vocabulary ----------------------------------------------------------------------------- */

/* GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to U+0100 onwards. */
static int byte_to_cp(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
    return 256 + n;
}

struct vocab {
    char **tok; /* token texts (mapped) */
    int n, cap;
    char **merge; /* "a b" */
    int n_merge;
};

static int vocab_add(struct vocab *v, char *s)
{
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 1024;
        char **nt = realloc(v->tok, (size_t)nc * sizeof *nt);
        if (!nt) return -1;
        v->tok = nt;
        v->cap = nc;
    }
    v->tok[v->n++] = s;
    return 0;
}

/* Learns up to max_merges BPE merges over the words of g_corpus (a word = optional leading
 * space + letters, or a single other byte). Symbols are token ids. */
static int learn_merges(struct vocab *v, int max_merges)
{
    enum { MAXW = 512, MAXL = 32 };
    static int words[MAXW][MAXL];
    static int wlen[MAXW];
    int nw = 0;
    const char *p = g_corpus;
    while (*p && nw < MAXW) {
        int l = 0;
        if (*p == ' ' && isalpha((unsigned char)p[1])) words[nw][l++] = (uint8_t)*p++;
        if (isalpha((unsigned char)*p))
            while (isalpha((unsigned char)*p) && l < MAXL) words[nw][l++] = (uint8_t)*p++;
        else if (l == 0) words[nw][l++] = (uint8_t)*p++;
        wlen[nw++] = l;
    }
    for (int m = 0; m < max_merges; m++) {
        /* most frequent adjacent pair; ties to the smallest ids for determinism */
        int best_a = -1, best_b = -1, best_n = 1;
        for (int w = 0; w < nw; w++)
            for (int i = 0; i + 1 < wlen[w]; i++) {
                int a = words[w][i], b = words[w][i + 1], cnt = 0;
                for (int w2 = 0; w2 < nw; w2++)
                    for (int j = 0; j + 1 < wlen[w2]; j++)
                        if (words[w2][j] == a && words[w2][j + 1] == b) cnt++;
                if (cnt > best_n || (cnt == best_n && best_a >= 0 && (a < best_a || (a == best_a && b < best_b)))) {
                    if (cnt < 2) continue;
                    best_n = cnt;
                    best_a = a;
                    best_b = b;
                }
            }
        if (best_a < 0) break;
        size_t la = strlen(v->tok[best_a]), lb = strlen(v->tok[best_b]);
        char *merged = malloc(la + lb + 1), *rule = malloc(la + lb + 2);
        if (!merged || !rule) return -1;
        memcpy(merged, v->tok[best_a], la);
        memcpy(merged + la, v->tok[best_b], lb + 1);
        memcpy(rule, v->tok[best_a], la);
        rule[la] = ' ';
        memcpy(rule + la + 1, v->tok[best_b], lb + 1);
        int id = -1;
        for (int i = 0; i < v->n && id < 0; i++)
            if (!strcmp(v->tok[i], merged)) id = i;
        if (id >= 0) free(merged); /* another pair already spelled this token */
        else {
            id = v->n;
            if (vocab_add(v, merged)) return -1;
        }
        v->merge[v->n_merge++] = rule;
        for (int w = 0; w < nw; w++) {
            int o = 0;
            for (int i = 0; i < wlen[w]; i++) {
                if (i + 1 < wlen[w] && words[w][i] == best_a && words[w][i + 1] == best_b) {
                    words[w][o++] = id;
                    i++;
                } else words[w][o++] = words[w][i];
            }
            wlen[w] = o;
        }
    }
    return 0;
}

static int write_own_vocab(struct gguf_writer *w, long V, long max_merges, char *err, size_t errlen)
{
    struct vocab v = {0};
    int rc = -1;
    int32_t *types = NULL;
    if (V < 260) {
        snprintf(err, errlen, "--vocab-size must be at least 260 for the built-in byte vocabulary");
        return -1;
    }
    v.merge = calloc((size_t)V, sizeof *v.merge);
    if (!v.merge) goto out;
    for (int b = 0; b < 256; b++) {
        char *s = calloc(1, 4);
        if (!s) goto out;
        utf8_encode((uint32_t)byte_to_cp(b), s); /* below U+0800: 2 bytes at most */
        if (vocab_add(&v, s)) goto out;
    }
    long room = V - 256 - 2;
    if (learn_merges(&v, (int)(max_merges < room ? max_merges : room))) goto out;
    int bos = v.n, eos = v.n + 1;
    if (vocab_add(&v, strdup("<|bos|>")) || vocab_add(&v, strdup("<|endoftext|>"))) goto out;
    while (v.n < V) {
        char buf[32];
        snprintf(buf, sizeof buf, "<|unused_%d|>", v.n);
        if (vocab_add(&v, strdup(buf))) goto out;
    }
    for (int i = 0; i < v.n; i++)
        if (!v.tok[i]) goto out;
    types = malloc((size_t)V * sizeof *types);
    if (!types) goto out;
    for (int i = 0; i < V; i++) types[i] = i < bos ? 1 : i <= eos ? 3 : 5;
    if (gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", 4) ||
        gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2", 5) ||
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, NULL, (uint64_t)v.n) ||
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, (uint64_t)V) ||
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merge, NULL, (uint64_t)v.n_merge) ||
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos) ||
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos) ||
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true))
        goto out;
    rc = 0;
out:
    if (rc && !err[0]) snprintf(err, errlen, "out of memory building the vocabulary");
    for (int i = 0; i < v.n; i++) free(v.tok[i]);
    for (int i = 0; i < v.n_merge; i++) free(v.merge[i]);
    free(v.tok);
    free(v.merge);
    free(types);
    return rc;
}

/* ---- tensors -------------------------------------------------------------------------------- */

static int add(struct mk *k, struct gguf_writer *w, const char *name, uint32_t type, uint64_t n0, uint64_t n1)
{
    uint64_t ne[2] = {n0, n1};
    if (gguf_writer_add_tensor(w, name, type, n1 ? 2 : 1, ne)) return -1;
    char **nn = realloc(k->names, (size_t)(k->n + 1) * sizeof *nn);
    if (!nn) return -1;
    k->names = nn;
    k->names[k->n++] = strdup(name);
    return k->names[k->n - 1] ? 0 : -1;
}

static int fill(void *ud, int idx, void *buf, size_t nbytes)
{
    struct mk *k = ud;
    const char *name = k->names[idx];
    uint64_t s = k->seed ^ name_hash(name);
    int is_norm = strstr(name, "norm") != NULL, is_bias = strstr(name, ".bias") != NULL;
    if (is_norm || is_bias) { /* f32 vectors */
        float *f = buf;
        size_t n = nbytes / 4;
        for (size_t i = 0; i < n; i++) f[i] = is_norm ? 1.0f + 0.1f * uniform(&s) : 0.1f * uniform(&s);
        return 0;
    }
    /* a matrix: rows of n_in; uniform with variance 1/n_in (token_embd: unit-ish) */
    size_t n_in = strstr(name, "ffn_down") ? (size_t)k->ffn : (size_t)k->dim;
    uint64_t bytes_row;
    if (tensor_nbytes(k->wtype, n_in, &bytes_row)) return -1;
    size_t rows = nbytes / (size_t)bytes_row;
    /* an untied embedding only feeds RMSNorm, so unit scale; a tied one is also the output
     * layer, whose logits should stay O(1) like every other product */
    float scale = strstr(name, "token_embd") && !k->tied ? 1.0f : sqrtf(3.0f / (float)n_in);
    float *row = malloc(n_in * sizeof(float));
    if (!row) return -1;
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < n_in; i++) row[i] = scale * uniform(&s);
        uint8_t *dst = (uint8_t *)buf + r * bytes_row;
        switch (k->wtype) {
        case TENSOR_F32: memcpy(dst, row, n_in * 4); break;
        case TENSOR_F16:
            for (size_t i = 0; i < n_in; i++) {
                uint16_t h = cpu_f32_to_f16(row[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
            break;
        case TENSOR_BF16:
            for (size_t i = 0; i < n_in; i++) {
                uint16_t h = cpu_f32_to_bf16(row[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
            break;
        case TENSOR_Q8_0: cpu_quantize_row_q8_0(row, dst, n_in); break;
        case TENSOR_Q4_0: cpu_quantize_row_q4_0(row, dst, n_in); break;
        default: free(row); return -1;
        }
    }
    free(row);
    return 0;
}

static const struct cli_choice g_wtypes[] = {{"f32", TENSOR_F32},   {"f16", TENSOR_F16},   {"bf16", TENSOR_BF16},
                                            {"q8_0", TENSOR_Q8_0}, {"q4_0", TENSOR_Q4_0}, {NULL, 0}};

/* Checks the model shape the flags asked for; 0, or 2 after a message. */
static int check_shape(struct mk *k)
{
    if (k->kv_heads < 0) k->kv_heads = k->heads;
    if (strcmp(k->arch, "llama") && strcmp(k->arch, "qwen2")) {
        fprintf(stderr, "attnd mkmodel: --arch must be llama or qwen2\n");
        return 2;
    }
    if (k->dim % k->heads || k->heads % k->kv_heads || (k->dim / k->heads) % 2) {
        fprintf(stderr, "attnd mkmodel: --dim must be a multiple of --heads (even head size), --heads of --kv-heads\n");
        return 2;
    }
    size_t blk = tensor_block_elems(k->wtype);
    if (k->dim % (long)blk || k->ffn % (long)blk) {
        fprintf(stderr, "attnd mkmodel: --dim and --ffn must be multiples of %zu for %s\n", blk,
                tensor_type_name(k->wtype));
        return 2;
    }
    return 0;
}

/* Fills *k, *out and *vocab_from from argv; returns CLI_GO, or the exit status. */
static int parse_args(struct mk *k, const char **out, const char **vocab_from, int argc, char **argv)
{
    int wtype = TENSOR_F32;
    const struct cli_opt opts[] = {
        {CLI_OPT("-o", NULL, CLI_STR, out, "FILE", "the GGUF file to write (required)")},
        {CLI_OPT("--arch", NULL, CLI_STR, &k->arch, "llama|qwen2", "architecture (required)")},
        {CLI_OPT("--layers", NULL, CLI_LONG, &k->layers, "N", "blocks (required)"), CLI_RANGE(1, 1024)},
        {CLI_OPT("--dim", NULL, CLI_LONG, &k->dim, "D", "embedding width (required)"), CLI_RANGE(1, 65536)},
        {CLI_OPT("--heads", NULL, CLI_LONG, &k->heads, "H", "attention heads (required)"), CLI_RANGE(1, 1024)},
        {CLI_OPT("--kv-heads", NULL, CLI_LONG, &k->kv_heads, "K", "key/value heads (default: --heads)"), CLI_RANGE(1, 1024)},
        {CLI_OPT("--ffn", NULL, CLI_LONG, &k->ffn, "F", "feed-forward width (required)"), CLI_RANGE(1, 1 << 18)},
        {CLI_OPT("--vocab-size", NULL, CLI_LONG, &k->vocab, "V", "vocabulary size (required without --vocab-from)"),
         CLI_RANGE(1, 1 << 22)},
        {CLI_OPT("--tied", NULL, CLI_FLAG, &k->tied, NULL, "the output layer is the token embedding")},
        {CLI_OPT("--type", NULL, CLI_CHOICE, &wtype, "f32|f16|bf16|q8_0|q4_0", "weight type (default f32)"),
         .choices = g_wtypes},
        {CLI_OPT("--seed", NULL, CLI_U64, &k->seed, "S", "weights seed (default 42)"), CLI_RANGE(0, 0x7fffffffL)},
        {CLI_OPT("--ctx", NULL, CLI_LONG, &k->ctx, "N", "context_length (default 4096)"), CLI_RANGE(1, 1 << 24)},
        {CLI_OPT("--merges", NULL, CLI_LONG, &k->merges, "N", "most BPE merges learnt (default 1000)"),
         CLI_RANGE(0, 1 << 20)},
        {CLI_OPT("--vocab-from", NULL, CLI_STR, vocab_from, "OTHER.gguf", "copy OTHER's tokenizer.* metadata")},
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {
        .name = "mkmodel",
        .usage = "attnd mkmodel -o FILE --arch llama|qwen2 --layers N --dim D --heads H --kv-heads K\n"
                 "                     --ffn F --vocab-size V [options]",
        .opts = opts,
        .footer = "  Writes a model with seeded random weights. Without --vocab-from the vocabulary is attnd's\n"
                  "  own byte-level BPE (256 byte tokens, up to --merges learnt merges, <|bos|>, <|endoftext|>),\n"
                  "  padded to V; with it, the tokenizer.* metadata of OTHER is copied and V is its size.\n"};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO) return rc;
    k->wtype = (uint32_t)wtype;
    if (!*out || !k->arch || k->layers < 0 || k->dim < 0 || k->heads < 0 || k->ffn < 0 ||
        (k->vocab < 0 && !*vocab_from)) {
        fprintf(stderr, "attnd mkmodel: -o, --arch, --layers, --dim, --heads, --ffn and --vocab-size are required\n");
        cli_usage(&cmd, stderr);
        return 2;
    }
    return check_shape(k) ? 2 : CLI_GO;
}

/* Writes general.* and ARCH.* metadata; 0 or -1 (out of memory). */
static int write_hparams(const struct mk *k, struct gguf_writer *w)
{
    const char *ar = k->arch;
    int qwen = !strcmp(ar, "qwen2");
    uint32_t ftype = k->wtype == TENSOR_F32    ? 0
                     : k->wtype == TENSOR_F16  ? 1
                     : k->wtype == TENSOR_Q8_0 ? 7
                     : k->wtype == TENSOR_Q4_0 ? 2
                                               : 32;
    char key[128];
#define KEY(s) (snprintf(key, sizeof key, "%s.%s", ar, s), key)
    int bad = gguf_writer_set_str(w, "general.architecture", ar, strlen(ar)) ||
              gguf_writer_set_str(w, "general.name", "attnd-mkmodel", 13) ||
              gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)k->ctx) ||
              gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)k->dim) ||
              gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)k->layers) ||
              gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)k->ffn) ||
              gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)k->heads) ||
              gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)k->kv_heads) ||
              gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), qwen ? 1e-6f : 1e-5f) ||
              gguf_writer_set_f32(w, KEY("rope.freq_base"), qwen ? 1000000.0f : 10000.0f) ||
              gguf_writer_set_u32(w, "general.file_type", ftype);
#undef KEY
    return bad ? -1 : 0;
}

/* Copies the tokenizer.* metadata of vocab_from into w and sets k->vocab to its size;
 * 0, or -1 after a message on stderr. */
static int copy_vocab(struct mk *k, struct gguf_writer *w, const char *vocab_from)
{
    char err[512];
    struct gguf *src = NULL;
    int rc = -1;
    if (gguf_open(vocab_from, &src, err, sizeof err)) {
        fprintf(stderr, "attnd mkmodel: --vocab-from %s: %s\n", vocab_from, err);
        return -1;
    }
    enum gguf_vtype et;
    uint64_t nt;
    if (gguf_get_arr(src, "tokenizer.ggml.tokens", &et, &nt) || et != GGUF_STRING || nt == 0 || nt > (1u << 22)) {
        fprintf(stderr, "attnd mkmodel: --vocab-from %s has no tokenizer.ggml.tokens string array\n", vocab_from);
        goto out;
    }
    if (k->vocab >= 0 && k->vocab != (long)nt) {
        fprintf(stderr, "attnd mkmodel: --vocab-size %ld disagrees with the %" PRIu64 " tokens of %s\n", k->vocab, nt,
                vocab_from);
        goto out;
    }
    k->vocab = (long)nt;
    for (int64_t i = 0; i < gguf_n_kv(src); i++)
        if (!strncmp(gguf_kv_key(src, i), "tokenizer.", 10) && gguf_writer_copy_kv(w, src, i)) {
            fprintf(stderr, "attnd mkmodel: out of memory\n");
            goto out;
        }
    rc = 0;
out:
    gguf_close(src);
    return rc;
}

/* Declares every tensor of the model in w (and in k->names); 0 or -1 (out of memory). */
static int add_tensors(struct mk *k, struct gguf_writer *w)
{
    int qwen = !strcmp(k->arch, "qwen2");
    uint64_t D = (uint64_t)k->dim, hd = D / (uint64_t)k->heads, nkv = hd * (uint64_t)k->kv_heads, F = (uint64_t)k->ffn;
    int bad = add(k, w, "token_embd.weight", k->wtype, D, (uint64_t)k->vocab) ||
              add(k, w, "output_norm.weight", TENSOR_F32, D, 0) ||
              (!k->tied && add(k, w, "output.weight", k->wtype, D, (uint64_t)k->vocab));
    for (long l = 0; l < k->layers && !bad; l++) {
        char nm[64];
#define T(s, ty, a, b) (snprintf(nm, sizeof nm, "blk.%ld.%s", l, s), add(k, w, nm, ty, a, b))
        bad = T("attn_norm.weight", TENSOR_F32, D, 0) || T("attn_q.weight", k->wtype, D, D) ||
              T("attn_k.weight", k->wtype, D, nkv) || T("attn_v.weight", k->wtype, D, nkv) ||
              (qwen && (T("attn_q.bias", TENSOR_F32, D, 0) || T("attn_k.bias", TENSOR_F32, nkv, 0) ||
                        T("attn_v.bias", TENSOR_F32, nkv, 0))) ||
              T("attn_output.weight", k->wtype, D, D) || T("ffn_norm.weight", TENSOR_F32, D, 0) ||
              T("ffn_gate.weight", k->wtype, D, F) || T("ffn_up.weight", k->wtype, D, F) ||
              T("ffn_down.weight", k->wtype, F, D);
#undef T
    }
    return bad ? -1 : 0;
}

int cmd_mkmodel(int argc, char **argv)
{
    struct mk k = {.arch = NULL, .layers = -1, .dim = -1, .heads = -1, .kv_heads = -1, .ffn = -1, .vocab = -1,
                   .ctx = 4096, .merges = 1000, .wtype = TENSOR_F32, .seed = 42};
    const char *out = NULL, *vocab_from = NULL;
    int rc = parse_args(&k, &out, &vocab_from, argc, argv);
    if (rc != CLI_GO) return rc;

    char err[512] = "";
    rc = 1;
    struct gguf_writer *w = gguf_writer_create();
    if (!w || write_hparams(&k, w)) goto oom;
    if (vocab_from) {
        if (copy_vocab(&k, w, vocab_from)) goto out;
    } else if (write_own_vocab(w, k.vocab, k.merges, err, sizeof err)) {
        fprintf(stderr, "attnd mkmodel: %s\n", err);
        goto out;
    }
    if (add_tensors(&k, w)) goto oom;
    cpu_kernels_init();
    if (gguf_writer_write(w, out, fill, &k, err, sizeof err)) {
        fprintf(stderr, "attnd mkmodel: %s\n", err);
        goto out;
    }
    fprintf(stderr, "attnd mkmodel: wrote %s (%s, %ld layers, d=%ld, %ld/%ld heads, ffn %ld, vocab %ld, %s)\n", out,
            k.arch, k.layers, k.dim, k.heads, k.kv_heads, k.ffn, k.vocab, tensor_type_name(k.wtype));
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "attnd mkmodel: out of memory\n");
out:
    for (int i = 0; i < k.n; i++) free(k.names[i]);
    free(k.names);
    gguf_writer_destroy(w);
    return rc;
}
