/* fuzz_detok.c - the streaming detokenizer and the stop-string matcher, as the SSE stream uses
 * them (sched.c: tok_stream_push -> stop_feed per token, then flush both at the end).
 * Input: byte 0 picks the vocabulary (llama-spm: <0xNN> byte tokens, gpt-2: byte-level BPE,
 * qwen2) and bits 2..3 the number of stop strings (0..3); then up to 3 stop strings, each a
 * length byte (1..16) and that many bytes; the rest is token ids, 3 bytes each (little-endian,
 * reduced modulo the vocabulary). Contracts (tokenizer.h, stopstr.h):
 *  - every piece the stream hands out is valid UTF-8 whenever the whole decoded text is (pieces
 *    never split a character), and so is the shown text when the stop strings are too;
 *  - without stop strings, the concatenated pieces + flush equal tok_decode() of the ids;
 *  - with stop strings, the emitted text is a prefix of tok_decode() of the ids and contains no
 *    stop string. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/stopstr.h"
#include "attnd/tokenizer.h"
#include "attnd/utf8.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_vocabs[] = {"llama-spm", "gpt-2", "qwen2"};
#define N_VOCABS 3
static struct tokenizer *g_tok[N_VOCABS];
static struct gguf *g_gguf[N_VOCABS]; /* kept so leak checking at exit sees them reachable */
static int g_nv[N_VOCABS];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_quiet();
    for (int i = 0; i < N_VOCABS; i++) {
        char path[1024], err[256];
        struct gguf *g;
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", fz_shared(), k_vocabs[i]);
        g_gguf[i] = NULL;
        if (gguf_open(path, &g, err, sizeof err) || tok_create(g, &g_tok[i], err, sizeof err)) {
            fprintf(stderr, "fuzz_detok: %s: %s (set SHARED=...)\n", path, err);
            exit(1);
        }
        enum gguf_vtype et;
        uint64_t n = 0;
        gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n);
        g_nv[i] = (int)n;
        g_gguf[i] = g;
    }
    return 0;
}

struct sink {
    char *p;
    size_t len, cap;
};

static void put(struct sink *s, const char *p, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        s->cap = (s->len + n + 1) * 2;
        s->p = realloc(s->p, s->cap);
        FZ_REQUIRE(s->p, "memory");
    }
    memcpy(s->p + s->len, p, n);
    s->len += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int v = (data[0] & 3) % N_VOCABS, n_stops = (data[0] >> 2) & 3;
    size_t at = 1;
    char stops_buf[3][17];
    const char *stops[3];
    for (int i = 0; i < n_stops; i++) {
        if (at >= size) return 0;
        size_t l = data[at++] % 16 + 1;
        if (at + l > size) return 0;
        memcpy(stops_buf[i], data + at, l);
        stops_buf[i][l] = 0;
        if (strlen(stops_buf[i]) != l) return 0; /* NUL inside: not a C string */
        stops[i] = stops_buf[i];
        at += l;
    }
    size_t n_ids = (size - at) / 3;
    int32_t *ids = malloc((n_ids ? n_ids : 1) * sizeof *ids);
    for (size_t i = 0; i < n_ids; i++) {
        const uint8_t *b = data + at + 3 * i;
        ids[i] = (int32_t)(((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16) % (uint32_t)g_nv[v]);
    }
    char *whole = NULL;
    size_t whole_len = 0;
    FZ_REQUIRE(tok_decode(g_tok[v], ids, n_ids, 0, &whole, &whole_len) == ATTND_OK, "tok_decode of valid ids");
    bool whole_ok = utf8_valid(whole, whole_len);

    struct tok_stream *ts = NULL;
    struct stop_matcher *sm = NULL;
    FZ_REQUIRE(tok_stream_create(g_tok[v], 0, &ts) == ATTND_OK, "stream");
    FZ_REQUIRE(stop_create(stops, n_stops, &sm) == ATTND_OK, "stop matcher");
    size_t cap = tok_max_piece(g_tok[v]) + 16;
    char *piece = malloc(cap);
    struct sink raw = {0}, shown = {0};
    struct stop_out so;
    int hit = -1;
    for (size_t i = 0; i < n_ids && hit < 0; i++) {
        size_t n = 0;
        FZ_REQUIRE(tok_stream_push(ts, ids[i], piece, cap, &n) == ATTND_OK, "push");
        if (whole_ok) FZ_REQUIRE(utf8_valid(piece, n), "a piece splits a character");
        put(&raw, piece, n);
        FZ_REQUIRE(stop_feed(sm, piece, n, &so) == ATTND_OK, "stop_feed");
        put(&shown, so.text, so.len);
        hit = so.stop;
    }
    if (hit < 0) {
        size_t n = 0;
        FZ_REQUIRE(tok_stream_flush(ts, piece, cap, &n) == ATTND_OK, "flush");
        put(&raw, piece, n);
        FZ_REQUIRE(stop_feed(sm, piece, n, &so) == ATTND_OK, "stop_feed tail");
        put(&shown, so.text, so.len);
        hit = so.stop;
        FZ_REQUIRE(stop_flush(sm, &so) == ATTND_OK, "stop_flush");
        put(&shown, so.text, so.len);
        FZ_REQUIRE(raw.len == whole_len && (!raw.len || !memcmp(raw.p, whole, whole_len)),
                   "stream pieces + flush == tok_decode");
    }
    FZ_REQUIRE(shown.len <= whole_len && (!shown.len || !memcmp(shown.p, whole, shown.len)),
               "the shown text is a prefix of the decoded text");
    bool stops_ok = true;
    for (int i = 0; i < n_stops; i++) stops_ok &= utf8_valid(stops[i], strlen(stops[i]));
    if (whole_ok && stops_ok) FZ_REQUIRE(utf8_valid(shown.p ? shown.p : "", shown.len), "the shown text is valid UTF-8");
    put(&shown, "", 1);
    for (int i = 0; i < n_stops; i++) FZ_REQUIRE(!memmem(shown.p, shown.len - 1, stops[i], strlen(stops[i])), "a stop string was shown");
    if (n_stops == 0) FZ_REQUIRE(hit < 0 && shown.len - 1 == whole_len, "without stops everything is shown");
    free(raw.p);
    free(shown.p);
    free(piece);
    stop_destroy(sm);
    tok_stream_destroy(ts);
    free(whole);
    free(ids);
    return 0;
}
