/* test_tokenizer.c - tokenizers against the reference token lists (shared/vocab), the golden
 * prompts (shared/golden), byte-exact round trips, the streaming detokenizer, speed, threads,
 * and hostile tokenizer metadata built in memory. */
#include "attnd/tokenizer.h"

#include "tests/unit/testutil.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "attnd/gguf.h"
#include "attnd/log.h"

#define SEP "\n__ggml_vocab_test__\n"

static const char *const VOCABS[] = {"phi-3", "falcon", "llama-bpe", "gpt-2", "starcoder", "deepseek-coder",
                                     "qwen2", "llama-spm"};
#define N_VOCABS (sizeof VOCABS / sizeof *VOCABS)

/* ------------------------------------------------------------------------------------------
 * helpers
 * ------------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
        size_t r = fread(buf + n, 1, cap - n, f);
        if (!r) break;
        n += r;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

static struct tokenizer *load_tok(const char *path)
{
    struct gguf *g;
    struct tokenizer *tok = NULL;
    char err[256];
    if (gguf_open(path, &g, err, sizeof err) != ATTND_OK) {
        fprintf(stderr, "cannot open %s: %s\n", path, err);
        return NULL;
    }
    if (tok_create(g, &tok, err, sizeof err) != ATTND_OK) fprintf(stderr, "%s: tok_create: %s\n", path, err);
    gguf_close(g);
    return tok;
}

static struct tokenizer *load_vocab(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", t_shared(), name);
    return load_tok(path);
}

static void print_ids(const char *what, const int32_t *v, size_t n)
{
    fprintf(stderr, "    %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", v[i]);
    fputc('\n', stderr);
}

/* Independent UTF-8 check: length of the valid character at s (0 if invalid or truncated). */
static size_t utf8_char(const unsigned char *s, size_t n)
{
    uint32_t c = s[0], cp;
    size_t l;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) l = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) l = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) l = 4, cp = c & 0x07;
    else return 0;
    if (n < l) return 0;
    for (size_t k = 1; k < l; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if ((l == 2 && cp < 0x80) || (l == 3 && cp < 0x800) || (l == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return l;
}

static uint32_t byte_cp(unsigned b)
{
    if (b <= 32) return 256 + b;
    if (b >= 127 && b <= 160) return 256 + 33 + (b - 127);
    if (b == 173) return 323;
    return b;
}

static bool utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t l = utf8_char((const unsigned char *)s + i, n - i);
        if (!l) return false;
        i += l;
    }
    return true;
}

static void put_utf8(char **p, uint32_t cp)
{
    unsigned char *o = (unsigned char *)*p;
    if (cp < 0x80) *o++ = (unsigned char)cp;
    else if (cp < 0x800) {
        *o++ = (unsigned char)(0xC0 | (cp >> 6));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (unsigned char)(0xE0 | (cp >> 12));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (unsigned char)(0xF0 | (cp >> 18));
        *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    *p = (char *)o;
}

/* ------------------------------------------------------------------------------------------
 * reference token lists
 * ------------------------------------------------------------------------------------------ */

static void test_vocab(const char *name)
{
    char path[512];
    size_t ninp, nout;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", t_shared(), name);
    char *inp = read_file(path, &ninp);
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", t_shared(), name);
    char *out = read_file(path, &nout);
    struct tokenizer *tok = load_vocab(name);
    T_CHECK(inp && out && tok, "vocab %s: cannot load the test files or the tokenizer", name);
    if (!inp || !out || !tok) goto done;

    /* the .inp holds "TEXT\n__ggml_vocab_test__\n" per string; the .out one line per string */
    int total = 0, pass = 0;
    char *s = inp, *line = out;
    for (;;) {
        char *sep = strstr(s, SEP);
        if (!sep) break;
        char *eol = strchr(line, '\n');
        if (!eol) {
            T_CHECK(0, "vocab %s: .out has fewer lines than .inp has strings", name);
            break;
        }
        int32_t want[4096];
        size_t nw = 0;
        for (char *q = line; q < eol;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            if (nw < 4096) want[nw++] = (int32_t)v;
            q = end;
        }
        int32_t *ids;
        size_t n;
        attnd_status st = tok_encode(tok, s, (size_t)(sep - s), false, false, &ids, &n);
        bool ok = st == ATTND_OK && n == nw && !memcmp(ids, want, n * sizeof *ids);
        total++;
        pass += ok;
        if (!ok) {
            fprintf(stderr, "  %s: string %d \"%.*s\" differs\n", name, total, (int)(sep - s > 60 ? 60 : sep - s), s);
            print_ids("want", want, nw);
            if (st == ATTND_OK) print_ids("got ", ids, n);
        }
        free(ids);
        s = sep + strlen(SEP);
        line = eol + 1;
    }
    fprintf(stderr, "vocab %-16s %d/%d strings match\n", name, pass, total);
    T_CHECK(total > 0 && pass == total, "vocab %s: %d of %d strings differ", name, total - pass, total);
done:
    tok_destroy(tok);
    free(inp);
    free(out);
}

/* ------------------------------------------------------------------------------------------
 * golden prompts
 * ------------------------------------------------------------------------------------------ */

static void test_golden(void)
{
    static const char *const models[] = {"tiny-qwen2-f32", "tiny-qwen2-q8_0", "tiny-llama-spm-f32",
                                         "tiny-llama-spm-q8_0", "tiny-llama3-f32", "stories260K"};
    int checked = 0;
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        char path[512];
        size_t len;
        snprintf(path, sizeof path, "%s/golden/%s.json", t_shared(), models[m]);
        char *js = read_file(path, &len);
        T_CHECK(js != NULL, "cannot read %s", path);
        if (!js) continue;
        snprintf(path, sizeof path, "%s/models/%s.gguf", t_shared(), models[m]);
        struct tokenizer *tok = load_tok(path);
        T_CHECK(tok != NULL, "cannot load the tokenizer of %s", path);
        cJSON *root = cJSON_Parse(js);
        cJSON *cases = cJSON_GetObjectItem(root, "cases"), *c;
        T_CHECK(cJSON_IsArray(cases), "%s: no cases", models[m]);
        cJSON_ArrayForEach(c, cases)
        {
            cJSON *prompt = cJSON_GetObjectItem(c, "prompt"), *want = cJSON_GetObjectItem(c, "prompt_tokens");
            if (!cJSON_IsString(prompt) || !tok) continue; /* token-id prompts (stories260K) */
            int32_t *ids;
            size_t n;
            const char *text = prompt->valuestring;
            T_CHECK(tok_encode(tok, text, strlen(text), true, false, &ids, &n) == ATTND_OK, "encode");
            bool ok = cJSON_GetArraySize(want) == (int)n;
            for (size_t i = 0; ok && i < n; i++) ok = cJSON_GetArrayItem(want, (int)i)->valueint == ids[i];
            T_CHECK(ok, "%s: prompt \"%s\" tokenizes differently", models[m], text);
            if (!ok) print_ids("got", ids, n);
            checked++;
            free(ids);
        }
        cJSON_Delete(root);
        tok_destroy(tok);
        free(js);
    }
    fprintf(stderr, "golden: %d string prompts checked\n", checked);
    T_CHECK(checked >= 20, "only %d golden prompts checked", checked);
}

/* ------------------------------------------------------------------------------------------
 * round trips and the streaming detokenizer
 * ------------------------------------------------------------------------------------------ */

/* decode(encode(x)) == x, and the stream hands out the same bytes in whole characters. */
static bool round_trip(const struct tokenizer *tok, const char *x, size_t n, unsigned flags)
{
    int32_t *ids;
    size_t nid;
    char *dec;
    size_t dlen;
    bool ok = true;
    if (tok_encode(tok, x, n, false, false, &ids, &nid) != ATTND_OK) return false;
    if (tok_decode(tok, ids, nid, flags, &dec, &dlen) != ATTND_OK) {
        free(ids);
        return false;
    }
    if (dlen != n || memcmp(dec, x, n)) {
        ok = false;
        fprintf(stderr, "  round trip differs for %zu bytes (decoded %zu):", n, dlen);
        for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %02x", (unsigned char)x[i]);
        fputc('\n', stderr);
    }
    /* stream */
    struct tok_stream *s;
    size_t cap = tok_max_piece(tok) + 4, got = 0;
    char *chunk = malloc(cap), *all = malloc(dlen + 8);
    uint8_t *cut = calloc(dlen + 1, 1); /* cut[i]: a chunk ended after i bytes */
    T_CHECK(tok_stream_create(tok, flags, &s) == ATTND_OK, "stream");
    bool valid_in = utf8_valid(x, n);
    for (size_t i = 0; i < nid; i++) {
        size_t k;
        if (tok_stream_push(s, ids[i], chunk, cap, &k) != ATTND_OK || got + k > dlen) {
            ok = false;
            break;
        }
        if (valid_in && !utf8_valid(chunk, k)) {
            ok = false;
            fprintf(stderr, "  stream chunk of valid text is not valid UTF-8 by itself\n");
        }
        memcpy(all + got, chunk, k);
        got += k;
        if (got <= dlen) cut[got] = 1;
    }
    size_t k;
    if (tok_stream_flush(s, chunk, cap, &k) != ATTND_OK || got + k > dlen) ok = false;
    else {
        memcpy(all + got, chunk, k);
        got += k;
    }
    if (got != dlen || memcmp(all, dec, dlen)) {
        ok = false;
        fprintf(stderr, "  stream output differs from the whole decode\n");
    }
    /* no chunk may end inside a character of the whole decode (valid characters taken greedily,
     * an invalid byte counting as one) */
    for (size_t i = 0; i < dlen;) {
        size_t l = utf8_char((const unsigned char *)dec + i, dlen - i);
        if (!l) l = 1;
        for (size_t j = i + 1; j < i + l; j++)
            if (cut[j]) {
                ok = false;
                fprintf(stderr, "  a stream chunk ends inside a character\n");
            }
        i += l;
    }
    free(cut);
    tok_stream_destroy(s);
    free(chunk);
    free(all);
    free(dec);
    free(ids);
    return ok;
}

static size_t random_unicode(char *buf, size_t max_chars)
{
    static const uint32_t ranges[][2] = {{0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0x24F},   {0x370, 0x3FF},
                                         {0x400, 0x4FF},   {0x590, 0x6FF},   {0x900, 0x97F},  {0xE00, 0xE7F},
                                         {0x1780, 0x17FF}, {0x2000, 0x206F}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF},
                                         {0xAC00, 0xD7A3}, {0x1F300, 0x1F6FF}, {0x10000, 0x10FFFF}};
    char *p = buf;
    size_t nc = rnd() % (max_chars + 1);
    for (size_t i = 0; i < nc; i++) {
        const uint32_t *r = ranges[rnd() % (sizeof ranges / sizeof *ranges)];
        uint32_t cp = r[0] + rnd() % (r[1] - r[0] + 1);
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
        if (cp == 0x2581) cp = 'y'; /* SPM writes spaces as U+2581 */
        put_utf8(&p, cp);
    }
    return (size_t)(p - buf);
}

/* Bytes the vocabulary can spell: a NORMAL token for the byte's code point. Falcon and StarCoder
 * lack some (bytes never seen in valid UTF-8, some ASCII controls): those are dropped, as in the
 * reference. DeepSeek-Coder covers them with USER_DEFINED tokens that render as their text. */
static void representable(const struct tokenizer *tok, bool ok[256])
{
    for (unsigned b = 0; b < 256; b++) {
        char u[4], *p = u;
        put_utf8(&p, byte_cp(b));
        int id = tok_find(tok, u, (size_t)(p - u));
        ok[b] = id >= 0 && tok_token_type(tok, id) == TOK_TYPE_NORMAL;
    }
}

static bool spellable(const bool ok[256], const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!ok[(unsigned char)s[i]]) return false;
    return true;
}

static void test_round_trips(void)
{
    static const char *const bpe[] = {"qwen2", "llama-bpe", "gpt-2", "falcon", "starcoder", "deepseek-coder"};
    char buf[4096];
    for (size_t v = 0; v < sizeof bpe / sizeof *bpe; v++) {
        struct tokenizer *tok = load_vocab(bpe[v]);
        T_CHECK(tok != NULL, "load %s", bpe[v]);
        if (!tok) continue;
        bool ok[256];
        representable(tok, ok);
        int fails = 0, runs = 0, nok = 0;
        for (int b = 0; b < 256; b++) nok += ok[b];
        for (int it = 0; it < 300; it++) {
            size_t n = rnd() % 80;
            for (size_t i = 0; i < n; i++) {
                do buf[i] = (char)rnd();
                while (!ok[(unsigned char)buf[i]]);
            }
            fails += !round_trip(tok, buf, n, 0);
            runs++;
            n = random_unicode(buf, 60);
            if (spellable(ok, buf, n)) {
                fails += !round_trip(tok, buf, n, 0);
                runs++;
            }
        }
        /* every single byte, and every pair of a lead byte with a continuation byte */
        for (int b = 0; b < 256; b++) {
            buf[0] = (char)b;
            buf[1] = (char)(0x80 + (b & 0x3F));
            if (spellable(ok, buf, 2)) {
                fails += !round_trip(tok, buf, 1, 0) + !round_trip(tok, buf, 2, 0);
                runs += 2;
            }
        }
        fprintf(stderr, "round trip %-16s %d/%d (%d bytes spellable)\n", bpe[v], runs - fails, runs, nok);
        T_CHECK(fails == 0, "%s: %d round trips failed", bpe[v], fails);
        tok_destroy(tok);
    }

    /* SPM: exact with byte fallback, given the dummy-prefix strip */
    struct tokenizer *tok = load_vocab("llama-spm");
    T_CHECK(tok != NULL, "load llama-spm");
    if (tok) {
        int fails = 0, runs = 0;
        for (int it = 0; it < 300; it++) {
            size_t n = rnd() % 80;
            for (size_t i = 0; i < n; i++) buf[i] = (char)rnd();
            if (!memmem(buf, n, "\xe2\x96\x81", 3)) {
                fails += !round_trip(tok, buf, n, TOK_DECODE_STRIP_PREFIX);
                runs++;
            }
            n = random_unicode(buf, 60);
            fails += !round_trip(tok, buf, n, TOK_DECODE_STRIP_PREFIX);
            runs++;
        }
        fprintf(stderr, "round trip %-16s %d/%d\n", "llama-spm", runs - fails, runs);
        T_CHECK(fails == 0, "llama-spm: %d round trips failed", fails);

        /* byte tokens: the stream holds back a split character and never emits half of it */
        int e6 = tok_find(tok, "<0xE6>", 6), x97 = tok_find(tok, "<0x97>", 6), xa5 = tok_find(tok, "<0xA5>", 6);
        T_CHECK(e6 >= 0 && x97 >= 0 && xa5 >= 0, "byte tokens");
        struct tok_stream *s;
        char out[64];
        size_t k;
        tok_stream_create(tok, 0, &s);
        T_CHECK(tok_stream_push(s, e6, out, sizeof out, &k) == ATTND_OK && k == 0, "E6 held back");
        T_CHECK(tok_stream_push(s, x97, out, sizeof out, &k) == ATTND_OK && k == 0, "97 held back");
        T_CHECK(tok_stream_push(s, xa5, out, sizeof out, &k) == ATTND_OK && k == 3 && !memcmp(out, "\xe6\x97\xa5", 3),
                "E6 97 A5 comes out whole");
        /* an invalid continuation: the held bytes come out as they are, then the ASCII */
        int a = tok_find(tok, "<0x41>", 6);
        tok_stream_push(s, e6, out, sizeof out, &k);
        T_CHECK(tok_stream_push(s, a, out, sizeof out, &k) == ATTND_OK && k == 2 && !memcmp(out, "\xe6" "A", 2),
                "invalid sequence passed through");
        tok_stream_push(s, e6, out, sizeof out, &k);
        T_CHECK(tok_stream_push(s, e6, out, 0, &k) == ATTND_ERR_INVALID, "cap too small");
        T_CHECK(tok_stream_push(s, 1 << 30, out, sizeof out, &k) == ATTND_ERR_RANGE, "id out of range");
        T_CHECK(tok_stream_flush(s, out, sizeof out, &k) == ATTND_OK && k == 1 && (unsigned char)out[0] == 0xE6,
                "flush hands out the incomplete tail");
        tok_stream_destroy(s);
        tok_stream_destroy(NULL);
        T_CHECK(tok_decode_token(tok, a, out, sizeof out, false) == 1 && out[0] == 'A', "<0x41> decodes to A");
        tok_destroy(tok);
    }
}

/* ------------------------------------------------------------------------------------------
 * special tokens, EOG, BOS
 * ------------------------------------------------------------------------------------------ */

static void test_specials(void)
{
    struct tokenizer *q = load_vocab("qwen2");
    T_CHECK(q != NULL, "qwen2");
    if (q) {
        const char *t = "hi<|im_end|>\n";
        int32_t *ids;
        size_t n;
        tok_encode(q, t, strlen(t), true, true, &ids, &n);
        T_CHECK(n == 3 && ids[1] == 151645, "<|im_end|> parsed as one token with parse_special");
        free(ids);
        tok_encode(q, t, strlen(t), true, false, &ids, &n);
        T_CHECK(n > 3, "<|im_end|> is plain text without parse_special (%zu tokens)", n);
        bool none = true;
        for (size_t i = 0; i < n; i++) none &= ids[i] != 151645;
        T_CHECK(none, "no control token without parse_special");
        free(ids);
        /* user-defined tokens are always recognised */
        tok_encode(q, "<think>", 7, false, false, &ids, &n);
        T_CHECK(n == 1 && ids[0] == 151667, "<think> (user-defined) always recognised");
        free(ids);
        T_CHECK(!tok_add_bos(q), "qwen2 adds no BOS");
        T_CHECK(tok_is_eog(q, 151645) && tok_is_eog(q, 151643) && !tok_is_eog(q, 151644) && !tok_is_eog(q, 9707) &&
                    !tok_is_eog(q, -1) && !tok_is_eog(q, 1 << 30),
                "qwen2 EOG set");
        char buf[64];
        T_CHECK(tok_decode_token(q, 151645, buf, sizeof buf, false) == 0, "control hidden");
        T_CHECK(tok_decode_token(q, 151645, buf, sizeof buf, true) == 10 && !memcmp(buf, "<|im_end|>", 10),
                "control rendered on request");
        size_t l;
        const char *p = tok_piece(q, 9707, &l);
        T_CHECK(p && l == 5 && !memcmp(p, "Hello", 5), "tok_piece");
        T_CHECK(tok_piece(q, -5, &l) == NULL && l == 0, "tok_piece out of range");
        T_CHECK(!strcmp(tok_pre_name(q), "qwen2") && tok_kind(q) == TOK_KIND_BPE, "pre name");
        tok_destroy(q);
    }
    struct tokenizer *l3 = load_vocab("llama-bpe");
    if (l3) {
        T_CHECK(tok_add_bos(l3) && tok_bos(l3) == 128000 && tok_eot(l3) == 128009 && tok_is_eog(l3, 128009) &&
                    tok_is_eog(l3, 128001),
                "llama3 BOS/EOT/EOG");
        int32_t *ids;
        size_t n;
        tok_encode(l3, "", 0, true, false, &ids, &n);
        T_CHECK(n == 1 && ids[0] == 128000, "empty text with BOS");
        free(ids);
        tok_destroy(l3);
    }
    struct tokenizer *spm = load_vocab("llama-spm");
    if (spm) {
        int32_t *ids;
        size_t n;
        tok_encode(spm, "Hello", 5, true, false, &ids, &n);
        T_CHECK(n == 2 && ids[0] == 1, "SPM adds BOS");
        char *d;
        size_t dl;
        tok_decode(spm, ids + 1, n - 1, TOK_DECODE_STRIP_PREFIX, &d, &dl);
        T_CHECK(dl == 5 && !memcmp(d, "Hello", 5), "SPM strip prefix");
        free(d);
        tok_decode(spm, ids, n, TOK_DECODE_SPECIAL, &d, &dl);
        T_CHECK(dl == 9 && !memcmp(d, "<s> Hello", 9), "SPM decode with specials: '%s'", d);
        free(d);
        T_CHECK(tok_decode(spm, (int32_t[]){-1}, 1, 0, &d, &dl) == ATTND_ERR_RANGE, "decode bad id");
        free(ids);
        tok_encode(spm, "", 0, false, false, &ids, &n);
        T_CHECK(n == 0 && ids != NULL, "empty text, no BOS");
        free(ids);
        T_CHECK(tok_eot(spm) == -1 && tok_eos(spm) == 2 && tok_is_eog(spm, 2), "SPM EOS");
        tok_destroy(spm);
    }
    struct tokenizer *phi = load_vocab("phi-3");
    if (phi) {
        T_CHECK(tok_eot(phi) == 32007 && tok_is_eog(phi, 32007) && tok_is_eog(phi, 32000), "phi-3 <|end|> is EOT");
        tok_destroy(phi);
    }
}

/* ------------------------------------------------------------------------------------------
 * speed and threads
 * ------------------------------------------------------------------------------------------ */

static char *big_text(size_t *len)
{
    static const char *const para =
        "The quick brown fox jumps over the lazy dog. Numbers 1234567 and 3.14159; code: "
        "for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }\n\tIndented line with  double  spaces.\n"
        "Ünïcödé text, 你好，世界。 Привет мир! 🙂🚀 done.\n";
    size_t pl = strlen(para), n = 0, cap = 100 * 1024;
    char *t = malloc(cap + 1);
    while (n + pl <= cap) {
        memcpy(t + n, para, pl);
        n += pl;
    }
    while (n < cap) t[n++] = 'x';
    t[n] = 0;
    *len = n;
    return t;
}

static void time_one(const char *vocab, const char *what, const char *text, size_t len)
{
    struct tokenizer *tok = load_vocab(vocab);
    if (!tok) return;
    int32_t *ids = NULL;
    size_t n = 0;
    double t0 = now_s();
    attnd_status st = tok_encode(tok, text, len, true, false, &ids, &n);
    double dt = now_s() - t0;
    fprintf(stderr, "speed %-10s %-12s %zu bytes -> %zu tokens in %.3f s\n", vocab, what, len, n, dt);
    T_CHECK(st == ATTND_OK && n > 0, "%s: encode failed", vocab);
    T_CHECK(dt < 2.0, "%s %s: 100 KB took %.3f s", vocab, what, dt);
    free(ids);
    tok_destroy(tok);
}

static void test_speed(void)
{
    size_t len;
    char *t = big_text(&len);
    static const char *const v[] = {"qwen2", "llama-bpe", "llama-spm", "deepseek-coder", "falcon"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) time_one(v[i], "mixed", t, len);
    memset(t, 'a', len); /* one 100 KB word */
    time_one("qwen2", "one-word", t, len);
    time_one("llama-spm", "one-word", t, len);
    memset(t, ' ', len);
    time_one("gpt-2", "spaces", t, len);
    time_one("llama-spm", "spaces", t, len);
    for (size_t i = 0; i < len; i++) t[i] = (char)rnd();
    time_one("llama-bpe", "random", t, len);
    time_one("llama-spm", "random", t, len);
    free(t);
}

struct thr {
    const struct tokenizer *tok;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
};

static void *thr_main(void *arg)
{
    struct thr *a = arg;
    for (int i = 0; i < 5; i++) {
        free(a->ids);
        tok_encode(a->tok, a->text, a->len, true, true, &a->ids, &a->n);
    }
    return NULL;
}

static void test_threads(void)
{
    struct tokenizer *tok = load_vocab("qwen2");
    if (!tok) return;
    size_t len;
    char *t = big_text(&len);
    len = 20000;
    int32_t *ref;
    size_t nref;
    tok_encode(tok, t, len, true, true, &ref, &nref);
    struct thr a[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (struct thr){tok, t, len, NULL, 0};
        pthread_create(&th[i], NULL, thr_main, &a[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        T_CHECK(a[i].n == nref && !memcmp(a[i].ids, ref, nref * sizeof *ref), "thread %d differs", i);
        free(a[i].ids);
    }
    free(ref);
    free(t);
    tok_destroy(tok);
}

/* ------------------------------------------------------------------------------------------
 * hostile metadata: a tiny GGUF writer
 * ------------------------------------------------------------------------------------------ */

struct gw {
    unsigned char *b;
    size_t n, cap;
    uint64_t nkv;
};

static void gw_bytes(struct gw *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        while (w->n + n > w->cap) w->cap = w->cap ? w->cap * 2 : 4096;
        w->b = realloc(w->b, w->cap);
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void gw_u32(struct gw *w, uint32_t v) { gw_bytes(w, &v, 4); }
static void gw_u64(struct gw *w, uint64_t v) { gw_bytes(w, &v, 8); }
static void gw_rawstr(struct gw *w, const char *s, size_t n)
{
    gw_u64(w, n);
    gw_bytes(w, s, n);
}
static void gw_key(struct gw *w, const char *key, uint32_t type)
{
    w->nkv++;
    gw_rawstr(w, key, strlen(key));
    gw_u32(w, type);
}
static void gw_str(struct gw *w, const char *key, const char *v)
{
    gw_key(w, key, GGUF_STRING);
    gw_rawstr(w, v, strlen(v));
}
static void gw_u32kv(struct gw *w, const char *key, uint32_t v)
{
    gw_key(w, key, GGUF_U32);
    gw_u32(w, v);
}
static void gw_bool(struct gw *w, const char *key, bool v)
{
    gw_key(w, key, GGUF_BOOL);
    uint8_t b = v;
    gw_bytes(w, &b, 1);
}
static void gw_arr_str(struct gw *w, const char *key, char **v, size_t n)
{
    gw_key(w, key, GGUF_ARRAY);
    gw_u32(w, GGUF_STRING);
    gw_u64(w, n);
    for (size_t i = 0; i < n; i++) gw_rawstr(w, v[i], strlen(v[i]));
}
static void gw_arr_i32(struct gw *w, const char *key, const int32_t *v, size_t n)
{
    gw_key(w, key, GGUF_ARRAY);
    gw_u32(w, GGUF_I32);
    gw_u64(w, n);
    gw_bytes(w, v, n * 4);
}
static void gw_arr_f32(struct gw *w, const char *key, const float *v, size_t n)
{
    gw_key(w, key, GGUF_ARRAY);
    gw_u32(w, GGUF_F32);
    gw_u64(w, n);
    gw_bytes(w, v, n * 4);
}

/* Knobs for one hostile image. A small but complete vocabulary is written unless told otherwise. */
struct bad {
    const char *model;     /* "gpt2" (default) / "llama" / anything */
    const char *pre;       /* NULL: "gpt-2" */
    bool no_tokens, tokens_as_ints, no_merges, types_as_strings, scores_as_ints;
    int types_delta, scores_delta; /* added to the array lengths */
    int32_t bad_type;              /* if nonzero, token 3's type */
    const char *extra_merge;       /* appended to the merges */
    const char *extra_token;       /* appended to the tokens */
    int64_t bos;                   /* if nonzero, bos_token_id */
    bool add_bos;
    bool bad_byte_token; /* SPM: a BYTE token whose text is not <0xNN> */
};

static attnd_status try_bad(const struct bad *o, struct tokenizer **out, char *err, size_t errlen)
{
    struct gw w = {0};
    char *toks[300], *merges[8];
    int32_t types[300];
    float scores[300];
    size_t nt = 0, nm = 0;
    bool spm = o->model && !strcmp(o->model, "llama");
    if (spm) {
        static const char *const base[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "h", "e", "l", "o",
                                           "he", "ll", "hell", "hello", "\xe2\x96\x81hello"};
        for (size_t i = 0; i < sizeof base / sizeof *base; i++) {
            toks[nt] = strdup(base[i]);
            types[nt] = i == 0 ? 2 : i < 3 ? 3 : 1;
            scores[nt] = (float)i;
            nt++;
        }
        for (unsigned b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            if (o->bad_byte_token && b == 7) strcpy(s, "<0xZZ>");
            toks[nt] = strdup(s);
            types[nt] = 6;
            scores[nt] = 0;
            nt++;
        }
    } else {
        for (unsigned b = 0; b < 256; b++) {
            char s[4], *p = s;
            put_utf8(&p, byte_cp(b));
            *p = 0;
            toks[nt] = strdup(s);
            types[nt] = 1;
            scores[nt] = 0;
            nt++;
        }
        static const char *const more[] = {"he", "ll", "hell", "hello", "<|endoftext|>"};
        for (size_t i = 0; i < 5; i++) {
            toks[nt] = strdup(more[i]);
            types[nt] = i == 4 ? 3 : 1;
            scores[nt] = 0;
            nt++;
        }
        merges[nm++] = "h e";
        merges[nm++] = "l l";
        merges[nm++] = "he ll";
        merges[nm++] = "hell o";
        if (o->extra_merge) merges[nm++] = (char *)o->extra_merge;
    }
    if (o->extra_token) {
        toks[nt] = strdup(o->extra_token);
        types[nt] = 1;
        scores[nt] = 0;
        nt++;
    }
    if (o->bad_type) types[3] = o->bad_type;

    gw_str(&w, "general.architecture", "llama");
    gw_str(&w, "tokenizer.ggml.model", o->model ? o->model : "gpt2");
    if (!spm) gw_str(&w, "tokenizer.ggml.pre", o->pre ? o->pre : "gpt-2");
    if (!o->no_tokens) {
        if (o->tokens_as_ints) gw_arr_i32(&w, "tokenizer.ggml.tokens", types, nt);
        else gw_arr_str(&w, "tokenizer.ggml.tokens", toks, nt);
    }
    if (o->types_as_strings) gw_arr_str(&w, "tokenizer.ggml.token_type", toks, nt);
    else gw_arr_i32(&w, "tokenizer.ggml.token_type", types, (size_t)((int)nt + o->types_delta));
    if (spm) {
        if (o->scores_as_ints) gw_arr_i32(&w, "tokenizer.ggml.scores", types, nt);
        else gw_arr_f32(&w, "tokenizer.ggml.scores", scores, (size_t)((int)nt + o->scores_delta));
    }
    if (!spm && !o->no_merges) gw_arr_str(&w, "tokenizer.ggml.merges", merges, nm);
    if (o->bos) gw_u32kv(&w, "tokenizer.ggml.bos_token_id", (uint32_t)o->bos);
    if (o->add_bos) gw_bool(&w, "tokenizer.ggml.add_bos_token", true);

    struct gw img = {0};
    gw_bytes(&img, "GGUF", 4);
    gw_u32(&img, 3);
    gw_u64(&img, 0);
    gw_u64(&img, w.nkv);
    gw_bytes(&img, w.b, w.n);

    struct gguf *g = NULL;
    attnd_status st = gguf_open_mem(img.b, img.n, &g, err, errlen);
    T_CHECK(st == ATTND_OK, "the test's GGUF image does not open: %s", err);
    if (st == ATTND_OK) st = tok_create(g, out, err, errlen);
    gguf_close(g);
    free(img.b);
    free(w.b);
    for (size_t i = 0; i < nt; i++) free(toks[i]);
    return st;
}

static void expect_bad(const char *what, struct bad o, attnd_status want, const char *mention)
{
    struct tokenizer *tok = (struct tokenizer *)&o; /* must be reset to NULL */
    char err[256] = "";
    attnd_status st = try_bad(&o, &tok, err, sizeof err);
    T_CHECK(st == want, "%s: got %s, want %s (%s)", what, attnd_status_str(st), attnd_status_str(want), err);
    T_CHECK(tok == NULL, "%s: *out not NULL on failure", what);
    T_CHECK(err[0] && (!mention || strstr(err, mention)), "%s: message \"%s\" should mention %s", what, err,
            mention ? mention : "something");
    fprintf(stderr, "hostile %-32s -> %s: %s\n", what, attnd_status_str(st), err);
    if (st == ATTND_OK) tok_destroy(tok);
}

static void test_hostile(void)
{
    /* the base images are fine */
    struct tokenizer *tok = NULL;
    char err[256];
    T_CHECK(try_bad(&(struct bad){0}, &tok, err, sizeof err) == ATTND_OK, "base BPE image: %s", err);
    if (tok) {
        int32_t *ids;
        size_t n;
        tok_encode(tok, "hello", 5, true, false, &ids, &n);
        T_CHECK(n == 1 && ids[0] == 259, "base BPE: hello -> one token");
        free(ids);
        tok_destroy(tok);
    }
    tok = NULL;
    T_CHECK(try_bad(&(struct bad){.model = "llama"}, &tok, err, sizeof err) == ATTND_OK, "base SPM image: %s", err);
    if (tok) {
        int32_t *ids;
        size_t n;
        tok_encode(tok, "hello", 5, true, false, &ids, &n);
        T_CHECK(n == 2 && ids[0] == 1 && ids[1] == 12, "base SPM: <s> \xe2\x96\x81hello");
        free(ids);
        tok_encode(tok, "q", 1, false, false, &ids, &n); /* no 'q': byte fallback */
        T_CHECK(n == 2 && ids[0] == 3 && ids[1] == 13 + 'q', "byte fallback");
        free(ids);
        tok_destroy(tok);
    }

    expect_bad("missing tokens", (struct bad){.no_tokens = true}, ATTND_ERR_FORMAT, "tokenizer.ggml.tokens");
    expect_bad("tokens not strings", (struct bad){.tokens_as_ints = true}, ATTND_ERR_FORMAT, "tokenizer.ggml.tokens");
    expect_bad("token_type too short", (struct bad){.types_delta = -1}, ATTND_ERR_FORMAT, "token_type");
    expect_bad("token_type too long", (struct bad){.types_delta = 3}, ATTND_ERR_FORMAT, "token_type");
    expect_bad("token_type of strings", (struct bad){.types_as_strings = true}, ATTND_ERR_FORMAT, "token_type");
    expect_bad("token_type value 9", (struct bad){.bad_type = 9}, ATTND_ERR_FORMAT, "token_type");
    expect_bad("scores too short", (struct bad){.model = "llama", .scores_delta = -2}, ATTND_ERR_FORMAT, "scores");
    expect_bad("scores of ints", (struct bad){.model = "llama", .scores_as_ints = true}, ATTND_ERR_FORMAT, "scores");
    expect_bad("gpt2 without merges", (struct bad){.no_merges = true}, ATTND_ERR_FORMAT, "merges");
    expect_bad("merge without a space", (struct bad){.extra_merge = "hello"}, ATTND_ERR_FORMAT, "merges");
    expect_bad("bos id out of range", (struct bad){.bos = 100000}, ATTND_ERR_FORMAT, "bos_token_id");
    expect_bad("invalid UTF-8 token", (struct bad){.extra_token = "ab\xff"}, ATTND_ERR_FORMAT, "UTF-8");
    expect_bad("unknown model", (struct bad){.model = "wordpiece9"}, ATTND_ERR_UNSUPPORTED, "wordpiece9");
    expect_bad("add_bos without BOS", (struct bad){.add_bos = true}, ATTND_ERR_FORMAT, "add_bos_token");
    expect_bad("SPM byte token not <0xNN>", (struct bad){.model = "llama", .bad_byte_token = true}, ATTND_ERR_FORMAT,
               "<0xNN>");

    /* accepted with documented behaviour */
    enum log_level lvl = log_get_level();
    log_set_level(LOG_ERROR); /* the two cases below log a warning on purpose */
    tok = NULL;
    T_CHECK(try_bad(&(struct bad){.extra_merge = "zz q"}, &tok, err, sizeof err) == ATTND_OK,
            "a merge naming an unknown token is ignored: %s", err);
    if (tok) {
        int32_t *ids;
        size_t n;
        tok_encode(tok, "hello", 5, false, false, &ids, &n);
        T_CHECK(n == 1 && ids[0] == 259, "other merges still apply");
        free(ids);
        tok_destroy(tok);
    }
    tok = NULL;
    T_CHECK(try_bad(&(struct bad){.pre = "no-such-pre"}, &tok, err, sizeof err) == ATTND_OK,
            "an unknown pre-tokenizer falls back to default: %s", err);
    if (tok) T_CHECK(!strcmp(tok_pre_name(tok), "default"), "fallback is 'default'");
    tok_destroy(tok);
    log_set_level(lvl);
    tok = NULL;
    T_CHECK(try_bad(&(struct bad){.bos = 0xFFFFFFFFu}, &tok, err, sizeof err) == ATTND_OK && tok && tok_bos(tok) == -1,
            "bos_token_id 0xFFFFFFFF means none");
    tok_destroy(tok);
    tok_destroy(NULL);
}

int main(void)
{
    for (size_t i = 0; i < N_VOCABS; i++) test_vocab(VOCABS[i]);
    test_golden();
    test_specials();
    test_round_trips();
    test_threads();
    test_speed();
    test_hostile();
    return t_finish("test_tokenizer");
}
