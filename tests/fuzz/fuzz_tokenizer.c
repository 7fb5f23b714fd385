/* fuzz_tokenizer.c - every tokenizer of ../shared/vocab on arbitrary text.
 * Input: byte 0 picks the vocabulary (low bits) and whether special tokens are parsed and
 * BOS/EOS added (bits 6, 7); the rest is the text. Contracts: tok_encode succeeds for any bytes
 * (under the size cap), every id is inside the vocabulary, and decoding the ids succeeds.
 * Seeds: the reference test strings (NAME.gguf.inp), one file per string, by tests/fuzz/seeds.sh. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_vocabs[] = {"llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "falcon", "starcoder",
                                       "deepseek-coder"};
#define N_VOCABS (sizeof k_vocabs / sizeof k_vocabs[0])
static struct tokenizer *g_tok[N_VOCABS];
static struct gguf *g_gguf[N_VOCABS];
static int g_n_vocab[N_VOCABS];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_quiet();
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[1024], err[256];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", fz_shared(), k_vocabs[i]);
        if (gguf_open(path, &g_gguf[i], err, sizeof err) || tok_create(g_gguf[i], &g_tok[i], err, sizeof err)) {
            fprintf(stderr, "fuzz_tokenizer: %s: %s (set SHARED=...)\n", path, err);
            exit(1);
        }
        int64_t n = 0;
        enum gguf_vtype et;
        uint64_t nt = 0;
        if (gguf_get_arr(g_gguf[i], "tokenizer.ggml.tokens", &et, &nt) == ATTND_OK) n = (int64_t)nt;
        g_n_vocab[i] = (int)n;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t v = (data[0] & 0x3f) % N_VOCABS;
    bool special = data[0] & 0x40, add = data[0] & 0x80;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids = NULL;
    size_t n = 0;
    attnd_status st = tok_encode(g_tok[v], text, len, add, special, &ids, &n);
    FZ_REQUIRE(st == ATTND_OK, "tok_encode accepts any bytes");
    for (size_t i = 0; i < n; i++) FZ_REQUIRE(ids[i] >= 0 && ids[i] < g_n_vocab[v], "ids inside the vocabulary");
    char *out = NULL;
    size_t out_len = 0;
    st = tok_decode(g_tok[v], ids, n, 0, &out, &out_len);
    FZ_REQUIRE(st == ATTND_OK, "decoding encoded ids succeeds");
    free(out);
    free(ids);
    return 0;
}
