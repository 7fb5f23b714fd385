/* test_genstep.c - the shared generation step (genstep.h) over the real Qwen2 vocabulary: fed
 * one-hot logits for the reference token ids of a test string (../shared/vocab), the text it
 * releases must add up to the reference string exactly, only in whole UTF-8 characters; stop
 * strings, end-of-generation tokens, the token limit and non-finite logits end or fail it. */
#include "attnd/genstep.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/tokenizer.h"
#include "testutil.h"

#define CASE_PREFIX "Hello, y'all! How are you "

/* The reference case that starts with CASE_PREFIX (it has a 4-byte emoji split over two byte
 * tokens and CJK text): its text into *text, its ids into ids (returns their count, 0 if absent). */
static size_t load_case(char **text, int32_t *ids, size_t cap)
{
    char p_in[512], p_out[512];
    snprintf(p_in, sizeof p_in, "%s/vocab/ggml-vocab-qwen2.gguf.inp", t_shared());
    snprintf(p_out, sizeof p_out, "%s/vocab/ggml-vocab-qwen2.gguf.out", t_shared());
    char *in = t_slurp(p_in, NULL), *out = t_slurp(p_out, NULL);
    size_t n = 0;
    *text = NULL;
    if (!in || !out) goto done;
    const char *sep = "\n__ggml_vocab_test__\n";
    char *s = in, *line = out;
    for (int idx = 0; s && line; idx++) {
        char *end = strstr(s, sep), *eol = strchr(line, '\n');
        if (end) *end = 0;
        if (eol) *eol = 0;
        if (!strncmp(s, CASE_PREFIX, strlen(CASE_PREFIX))) {
            *text = strdup(s);
            for (char *q = line; *q && n < cap;) {
                char *e;
                long v = strtol(q, &e, 10);
                if (e == q) break;
                ids[n++] = (int32_t)v;
                q = e;
            }
            break;
        }
        s = end ? end + strlen(sep) : NULL;
        line = eol ? eol + 1 : NULL;
    }
done:
    free(in);
    free(out);
    return n;
}

/* true if the n bytes at p end on a UTF-8 character boundary (no lead byte left open). */
static bool whole_chars(const char *p, size_t n)
{
    size_t i = n;
    int cont = 0;
    while (i > 0 && ((unsigned char)p[i - 1] & 0xC0) == 0x80 && cont < 4) i--, cont++;
    if (i == 0) return cont == 0;
    unsigned char lead = (unsigned char)p[i - 1];
    int need = lead < 0x80 ? 0 : lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : -1;
    return need == cont;
}

static struct gen_opts greedy_opts(const char *const *stops, int n_stops, int max_tokens)
{
    struct gen_opts o = {.sampling = sampler_params_default(), .stops = stops, .n_stops = n_stops,
                         .max_tokens = max_tokens};
    o.sampling.temperature = 0;
    return o;
}

/* Runs the ids through a gen as one-hot logits; the released text (with gen_finish's tail) into
 * buf; returns how many steps ran before one ended the generation (or all of them). */
static size_t run_ids(const struct tokenizer *tok, const struct gen_opts *o, const int32_t *ids, size_t n, char *buf,
                      size_t cap, enum gen_end *last_end)
{
    const int V = tok_n_vocab(tok);
    float *logits = t_xmalloc((size_t)V * sizeof(float));
    struct gen *g = NULL;
    size_t len = 0, steps = 0;
    *last_end = GEN_MORE;
    T_CHECK(gen_create(tok, V, o, &g) == ATTND_OK, "gen_create");
    for (size_t i = 0; g && i < n && *last_end == GEN_MORE; i++, steps++) {
        for (int v = 0; v < V; v++) logits[v] = 0;
        logits[ids[i]] = 10;
        struct gen_token gt;
        T_CHECK(gen_step(g, logits, &gt) == ATTND_OK, "gen_step %zu", i);
        T_CHECK(gt.id == ids[i], "step %zu picked %d, not %d", i, gt.id, ids[i]);
        T_CHECK(whole_chars(gt.text, gt.len), "step %zu released a broken character", i);
        T_CHECK(len + gt.len < cap, "output too long");
        memcpy(buf + len, gt.text, gt.len);
        len += gt.len;
        *last_end = gt.end;
    }
    const char *tail = NULL;
    size_t tail_len = 0;
    if (g) T_CHECK(gen_finish(g, &tail, &tail_len) == ATTND_OK && tail, "gen_finish");
    if (tail && len + tail_len < cap) memcpy(buf + len, tail, tail_len), len += tail_len;
    buf[len] = 0;
    T_CHECK(!g || gen_n_generated(g) == (int)steps, "gen_n_generated %d, %zu steps", gen_n_generated(g), steps);
    gen_destroy(g);
    free(logits);
    return steps;
}

static void test_text_and_stops(const struct tokenizer *tok, const char *text, const int32_t *ids, size_t n)
{
    char buf[1024];
    enum gen_end end;
    struct gen_opts o = greedy_opts(NULL, 0, (int)n + 10);
    size_t steps = run_ids(tok, &o, ids, n, buf, sizeof buf, &end);
    T_CHECK(steps == n && end == GEN_MORE, "no stop: %zu steps, end %d", steps, (int)end);
    T_CHECK(!strcmp(buf, text), "released text '%s' != reference '%s'", buf, text);

    /* a stop string inside the text: everything before it, nothing of it or after it */
    const char *stops[] = {"zzz", "apple"};
    o = greedy_opts(stops, 2, (int)n + 10);
    steps = run_ids(tok, &o, ids, n, buf, sizeof buf, &end);
    const size_t cut = (size_t)(strstr(text, "apple") - text);
    T_CHECK(end == GEN_STOP && steps < n, "stop 'apple': end %d after %zu of %zu steps", (int)end, steps, n);
    T_CHECK(strlen(buf) == cut && !strncmp(buf, text, cut), "stop 'apple': released '%s'", buf);

    /* the token limit */
    o = greedy_opts(NULL, 0, 5);
    steps = run_ids(tok, &o, ids, n, buf, sizeof buf, &end);
    T_CHECK(steps == 5 && end == GEN_LENGTH, "max_tokens 5: %zu steps, end %d (%s)", steps, (int)end,
            gen_end_str(end));
}

static void test_eog_and_bad_logits(const struct tokenizer *tok)
{
    const int32_t eos[1] = {tok_eos(tok)};
    char buf[256];
    enum gen_end end;
    struct gen_opts o = greedy_opts(NULL, 0, 10);
    T_CHECK(tok_is_eog(tok, eos[0]), "eos %d is an end-of-generation token", eos[0]);
    size_t steps = run_ids(tok, &o, eos, 1, buf, sizeof buf, &end);
    T_CHECK(steps == 1 && end == GEN_STOP && !buf[0], "eos: end %d, text '%s'", (int)end, buf);
    o.ignore_eos = true;
    run_ids(tok, &o, eos, 1, buf, sizeof buf, &end);
    T_CHECK(end == GEN_MORE, "eos with ignore_eos: end %d", (int)end);

    const int V = tok_n_vocab(tok);
    float *logits = t_xmalloc((size_t)V * sizeof(float));
    for (int v = 0; v < V; v++) logits[v] = NAN;
    struct gen *g = NULL;
    o = greedy_opts(NULL, 0, 10);
    T_CHECK(gen_create(tok, V, &o, &g) == ATTND_OK, "gen_create");
    struct gen_token gt;
    if (g) T_CHECK(gen_step(g, logits, &gt) == ATTND_ERR_INTERNAL, "all-NaN logits fail the step");
    if (g) T_CHECK(gen_n_generated(g) == 0, "a failed step generates nothing");
    gen_destroy(g);
    free(logits);

    const char *bad[] = {""};
    o = greedy_opts(bad, 1, 10);
    T_CHECK(gen_create(tok, V, &o, &g) == ATTND_ERR_INVALID && !g, "an empty stop string is refused");
    gen_destroy(NULL);
}

int main(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-qwen2.gguf", t_shared());
    struct gguf *gg = NULL;
    struct tokenizer *tok = NULL;
    char err[256];
    if (gguf_open(path, &gg, err, sizeof err) || tok_create(gg, &tok, err, sizeof err)) {
        fprintf(stderr, "test_genstep: %s: %s\n", path, err);
        gguf_close(gg);
        return 1;
    }
    gguf_close(gg);
    char *text = NULL;
    int32_t ids[256];
    size_t n = load_case(&text, ids, 256);
    T_CHECK(n > 10 && text, "reference case '%s...' not found in the qwen2 vocab tests", CASE_PREFIX);
    if (n > 10 && text) test_text_and_stops(tok, text, ids, n);
    test_eog_and_bad_logits(tok);
    free(text);
    tok_destroy(tok);
    printf("test_genstep: %d checks, %d failed\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
