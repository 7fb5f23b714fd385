/* bench_grammar.c - the cost of output held to a JSON schema (issue 34), on the 151,936-token
 * Qwen2 vocabulary ($SHARED/models/tiny-qwen2-f32.gguf; only its tokenizer is used):
 *   - compiling a 30-property schema (jsg_compile), and building the vocabulary trie;
 *   - the token mask at each step of a generation: a document valid for the schema is tokenized
 *     and replayed token by token; at each step the mask is computed before the token is
 *     accepted, and the steps are split into those inside a free string value and the others
 *     (structural: keys, numbers, punctuation, enums). Three figures per step:
 *       apply  what genstep pays per token: copying the logits and gmask_seq_apply (the mask,
 *              remembered when the state repeats, then -inf for every disallowed token);
 *       walk   gmask_fill, the trie walk itself, with the matcher's transitions as the sequence
 *              has learned them so far;
 *       cold   gmask_fill on a fresh copy of the matcher (every transition computed anew: the
 *              first request with this schema).
 * Columns: medians over the steps, then the 90th percentile of apply and walk.
 * Goals: mask <= 10 % of a Q8_0 0.5B-shape decode step (15-20 ms here: <= 1.5 ms), <= 5 % inside
 * strings (<= 0.75 ms); compile <= 50 ms. Prints one table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/gram_mask.h"
#include "attnd/gram_match.h"
#include "attnd/grammar.h"
#include "attnd/json_schema.h"
#include "attnd/tokenizer.h"
#include "bench/bench_util.h"

#define N_PROPS 30
#define MAX_STEPS 4096

/* The schema: 30 required properties cycling through the common kinds of field. */
static size_t make_schema(char *s, size_t cap)
{
    size_t n = (size_t)snprintf(s, cap, "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{");
    static const char *kinds[] = {
        "{\"type\":\"string\"}",
        "{\"type\":\"integer\",\"minimum\":0,\"maximum\":100000}",
        "{\"enum\":[\"draft\",\"review\",\"published\",\"archived\",\"deleted\"]}",
        "{\"type\":\"boolean\"}",
        "{\"type\":\"string\",\"maxLength\":60}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":5}",
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"integer\"}},"
        "\"required\":[\"city\",\"zip\"],\"additionalProperties\":false}",
        "{\"type\":\"number\"}",
        "{\"type\":\"string\",\"format\":\"date\"}",
        "{\"type\":[\"string\",\"null\"]}",
    };
    for (int i = 0; i < N_PROPS; i++)
        n += (size_t)snprintf(s + n, cap - n, "%s\"field_%02d\":%s", i ? "," : "", i, kinds[i % 10]);
    n += (size_t)snprintf(s + n, cap - n, "},\"required\":[");
    for (int i = 0; i < N_PROPS; i++) n += (size_t)snprintf(s + n, cap - n, "%s\"field_%02d\"", i ? "," : "", i);
    n += (size_t)snprintf(s + n, cap - n, "]}");
    return n;
}

/* A document valid for the schema, pretty-printed as a model would write it. */
static size_t make_document(char *s, size_t cap)
{
    static const char *vals[] = {
        "\"The quick brown fox jumps over the lazy dog, again and again, while the farmer watches.\"",
        "4217",
        "\"review\"",
        "true",
        "\"A short summary of what happened at the meeting on Tuesday\"",
        "[\"alpha\", \"beta\", \"release candidate\"]",
        "{\"city\": \"Zürich\", \"zip\": 8001}",
        "-12.75e2",
        "\"2024-02-29\"",
        "\"In the beginning was the Word, and the Word was with God.\"",
    };
    size_t n = (size_t)snprintf(s, cap, "{\n");
    for (int i = 0; i < N_PROPS; i++)
        n += (size_t)snprintf(s + n, cap - n, "  \"field_%02d\": %s%s\n", i, vals[i % 10], i + 1 < N_PROPS ? "," : "");
    n += (size_t)snprintf(s + n, cap - n, "}");
    return n;
}

/* in_value[i] = 1 when byte offset i lies inside a string value (after its opening quote). */
static void mark_string_values(const char *s, size_t n, unsigned char *in_value)
{
    bool in = false, is_key = false;
    for (size_t i = 0; i < n; i++) {
        in_value[i] = in && !is_key;
        if (!in && s[i] == '"') {
            size_t j = i + 1; /* a key is followed by ':' after its closing quote */
            while (j < n && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
            is_key = j + 1 < n && s[j + 1] == ':';
            in = true;
        } else if (in && s[i] == '\\') {
            in_value[++i] = !is_key;
        } else if (in && s[i] == '"') {
            in = false;
        }
    }
    in_value[n] = 0;
}

struct timings {
    double apply[MAX_STEPS], walk[MAX_STEPS], cold[MAX_STEPS];
    int n;
};

/* Replays the document's tokens, timing the mask before each; returns -1 on a rejected token. */
static int replay(const struct gmask_vocab *v, const struct gram *g, const char *doc, const int32_t *ids, size_t n_ids,
                  const unsigned char *in_value, struct timings *str, struct timings *other)
{
    struct gmask_seq *s = NULL;
    if (gmask_seq_create(v, g, &s) != ATTND_OK) return -1;
    uint64_t *mask = malloc(gmask_words(v) * sizeof *mask);
    size_t nv = (size_t)gmask_n_vocab(v);
    float *logits = calloc(nv, sizeof *logits), *work = malloc(nv * sizeof *work);
    size_t off = 0;
    int rc = 0;
    for (size_t i = 0; i < n_ids && rc == 0; i++) {
        struct timings *t = in_value[off] ? str : other;
        struct gmatch *cold = NULL;
        if (t->n >= MAX_STEPS || gmatch_clone(gmask_seq_matcher(s), &cold) != ATTND_OK) break;
        double t0 = bench_now();
        memcpy(work, logits, nv * sizeof *work);
        gmask_seq_apply(s, work);
        double t1 = bench_now();
        gmask_fill(v, gmask_seq_matcher(s), mask, NULL);
        double t2 = bench_now();
        gmask_fill(v, cold, mask, NULL);
        double t3 = bench_now();
        gmatch_destroy(cold);
        t->apply[t->n] = (t1 - t0) * 1e3, t->walk[t->n] = (t2 - t1) * 1e3, t->cold[t->n] = (t3 - t2) * 1e3;
        t->n++;
        if (!((mask[ids[i] >> 6] >> (ids[i] & 63)) & 1) || gmask_seq_accept(s, ids[i]) != ATTND_OK) {
            fprintf(stderr, "bench_grammar: token %d at byte %zu is not allowed\n", ids[i], off);
            rc = -1;
        }
        size_t l = 0;
        gmask_token_bytes(v, ids[i], &l);
        off += l;
    }
    if (rc == 0 && !gmask_seq_accepts_end(s)) rc = -1;
    (void)doc;
    free(logits);
    free(work);
    free(mask);
    gmask_seq_destroy(s);
    return rc;
}

static void row(const char *name, struct timings *t)
{
    if (!t->n) return;
    double a = bench_median(t->apply, t->n), w = bench_median(t->walk, t->n), c = bench_median(t->cold, t->n);
    int p90 = t->n * 9 / 10; /* the arrays are sorted now */
    printf("| %-22s | %5d | %9.3f | %9.3f | %9.3f | %9.3f | %9.3f |\n", name, t->n, a, w, c, t->apply[p90], t->walk[p90]);
}

static struct tokenizer *load_tok(void)
{
    const char *shared = getenv("SHARED");
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/tiny-qwen2-f32.gguf", shared && *shared ? shared : "../shared");
    struct gguf *gf = NULL;
    struct tokenizer *tok = NULL;
    if (gguf_open(path, &gf, err, sizeof err) != ATTND_OK || tok_create(gf, &tok, err, sizeof err) != ATTND_OK)
        fprintf(stderr, "bench_grammar: %s: %s\n", path, err);
    gguf_close(gf);
    return tok;
}

int main(void)
{
    static char schema[16384], doc[16384];
    static unsigned char in_value[16385];
    static struct timings str, other;
    char err[512];
    struct tokenizer *tok = load_tok();
    if (!tok) return 1;
    size_t ns = make_schema(schema, sizeof schema), nd = make_document(doc, sizeof doc);
    double comp[21];
    struct gram *g = NULL;
    for (int i = 0; i < 21; i++) {
        gram_destroy(g);
        double t0 = bench_now();
        if (jsg_compile(schema, ns, &g, err, sizeof err) != ATTND_OK) {
            fprintf(stderr, "bench_grammar: %s\n", err);
            return 1;
        }
        comp[i] = (bench_now() - t0) * 1e3;
    }
    double t0 = bench_now();
    struct gmask_vocab *v = NULL;
    if (gmask_vocab_create(tok, &v) != ATTND_OK) return 1;
    double trie_ms = (bench_now() - t0) * 1e3;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (tok_encode(tok, doc, nd, false, false, &ids, &n_ids) != ATTND_OK) return 1;
    mark_string_values(doc, nd, in_value);
    int rc = replay(v, g, doc, ids, n_ids, in_value, &str, &other);
    printf("grammar: %d-property schema -> %zu rules, %zu elements; vocabulary %d tokens, %zu trie nodes\n",
           N_PROPS, gram_n_rules(g), gram_n_elems(g), gmask_n_vocab(v), gmask_n_nodes(v));
    printf("| %-22s | %5s | %9s | %9s | %9s | %9s | %9s |\n", "mask per step (ms)", "steps", "apply", "walk", "cold",
           "apply p90", "walk p90");
    printf("|------------------------|-------|-----------|-----------|-----------|-----------|-----------|\n");
    row("inside string values", &str);
    row("structural", &other);
    printf("schema compile: median %.3f ms (21 runs); vocabulary trie: %.1f ms (once per tokenizer)\n",
           bench_median(comp, 21), trie_ms);
    printf("goals: mask <= 1.5 ms per step, <= 0.75 ms inside strings; compile <= 50 ms\n");
    FILE *la = fopen("/proc/loadavg", "r");
    double load = 0;
    if (la && fscanf(la, "%lf", &load) == 1) printf("(wall-clock times; load average %.1f at the end of the run)\n", load);
    if (la) fclose(la);
    free(ids);
    gmask_vocab_destroy(v);
    gram_destroy(g);
    tok_destroy(tok);
    return rc ? 1 : 0;
}
