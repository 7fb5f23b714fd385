/* run.c - `attnd run`: generate text from a prompt on the command line.
 *   attnd run -m MODEL.gguf -p "prompt" [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
 *             [--repeat-penalty R] [--seed S] [--stop STR]... [--tokens 1,2,3] [--ignore-eos]
 *             [--special] [--threads N] [--ctx N] [--json]
 * Streams the generated text to stdout (prompt and generation speed on stderr), or with
 * --json prints one object with the prompt tokens, generated tokens, text, finish reason and
 * timings. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/forward.h"
#include "attnd/genstep.h"
#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "attnd/utf8.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

#define MAX_STOPS 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: attnd run -m MODEL.gguf (-p PROMPT | --tokens ID,ID,...) [options]\n"
            "  -n N                 tokens to generate (default 128)\n"
            "  --temp T             temperature, 0 = greedy (default 0.8)\n"
            "  --top-k K            (default 40; 0 = off)      --top-p P   (default 0.95)\n"
            "  --min-p P            (default 0.05)             --repeat-penalty R (default 1 = off)\n"
            "  --presence-penalty X --frequency-penalty X      --seed S\n"
            "  --stop STR           stop when STR is generated (repeatable, up to %d)\n"
            "  --ignore-eos         keep generating past end-of-generation tokens\n"
            "  --special            parse special tokens (<|im_end|>...) in the prompt and print them\n"
            "  --threads N  --ctx N --json\n"
            CLI_BACKEND_HELP,
            MAX_STOPS);
}

/* Output sink: plain streaming to stdout, or collected for --json. */
struct sink {
    int json;
    char *buf;
    size_t len, cap;
};

static void emit(struct sink *s, const char *p, size_t n)
{
    if (!n) return;
    if (!s->json) {
        fwrite(p, 1, n, stdout);
        fflush(stdout);
        return;
    }
    if (s->len + n + 1 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 4096;
        while (nc < s->len + n + 1) nc *= 2;
        char *nb = realloc(s->buf, nc);
        if (!nb) return;
        s->buf = nb;
        s->cap = nc;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = 0;
}

struct run_times {
    double pp_s, tg_s; /* prompt and generation wall time */
};

/* The generation loop: the prompt in one evaluation, then one generation step (genstep.h) and
 * one decode evaluation per token until a stop, n_predict tokens or a full context. Generated
 * ids go to gen[*ng], text to out, the reason to *finish. Returns 1 (message printed) if an
 * evaluation failed. */
static int generate(struct fwd_ctx *c, struct gen *g, const int32_t *ptoks, size_t np, long n_predict, float *logits,
                    int32_t *gen, size_t *ng, struct sink *out, const char **finish, struct run_times *rt)
{
    double t0 = now_s();
    if (fwd_eval(c, ptoks, (int)np, false, logits)) {
        fprintf(stderr, "attnd run: evaluation failed\n");
        return 1;
    }
    double t1 = now_s();
    while ((long)*ng < n_predict) {
        struct gen_token gt;
        if (gen_step(g, logits, &gt)) {
            fprintf(stderr, "attnd run: the model produced no finite logits\n");
            return 1;
        }
        gen[(*ng)++] = gt.id;
        emit(out, gt.text, gt.len);
        if (gt.end == GEN_STOP) *finish = "stop";
        if (gt.end != GEN_MORE || fwd_n_past(c) >= fwd_n_ctx(c)) break;
        if (fwd_eval(c, &gen[*ng - 1], 1, false, logits)) {
            fprintf(stderr, "attnd run: evaluation failed\n");
            return 1;
        }
    }
    const char *tail;
    size_t tail_len;
    gen_finish(g, &tail, &tail_len); /* what the detokenizer and the stop matcher still hold */
    emit(out, tail, tail_len);
    rt->pp_s = t1 - t0;
    rt->tg_s = now_s() - t1;
    return 0;
}

/* Prints the --json object, or the newline and the speed line on stderr. */
static void report(const struct sink *out, const struct fwd_ctx *c, const int32_t *ptoks, size_t np,
                   const int32_t *gen, size_t ng, const char *finish, const struct run_times *rt)
{
    double pp_tps = rt->pp_s > 0 ? (double)np / rt->pp_s : 0, tg_tps = rt->tg_s > 0 && ng ? (double)ng / rt->tg_s : 0;
    if (!out->json) {
        putchar('\n');
        fprintf(stderr, "prompt: %zu tokens in %.1f ms (%.1f tokens/s); generation: %zu tokens in %.1f ms (%.1f tokens/s); finish: %s; backend: %s, %s\n",
                np, rt->pp_s * 1e3, pp_tps, ng, rt->tg_s * 1e3, tg_tps, finish, fwd_backend_name(c), fwd_device_name(c));
        return;
    }
    cJSON *o = cJSON_CreateObject(), *t = cJSON_CreateObject();
    cJSON *pa = cJSON_AddArrayToObject(o, "prompt_tokens");
    for (size_t i = 0; i < np; i++) cJSON_AddItemToArray(pa, cJSON_CreateNumber(ptoks[i]));
    cJSON *ga = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < ng; i++) cJSON_AddItemToArray(ga, cJSON_CreateNumber(gen[i]));
    char *text = utf8_sanitize(out->buf ? out->buf : "", out->len, NULL);
    cJSON_AddStringToObject(o, "text", text ? text : "");
    free(text);
    cJSON_AddStringToObject(o, "finish_reason", finish);
    cJSON_AddStringToObject(o, "backend", fwd_backend_name(c));
    cJSON_AddStringToObject(o, "device", fwd_device_name(c));
    cJSON_AddNumberToObject(t, "prompt_tokens_per_s", pp_tps);
    cJSON_AddNumberToObject(t, "generation_tokens_per_s", tg_tps);
    cJSON_AddNumberToObject(t, "prompt_ms", rt->pp_s * 1e3);
    cJSON_AddNumberToObject(t, "generation_ms", rt->tg_s * 1e3);
    cJSON_AddItemToObject(o, "timings", t);
    char *s = cJSON_PrintUnformatted(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
}

/* Loads the model and its tokenizer and the prompt's token ids (--tokens, or -p tokenized),
 * each checked. Returns 0, or the exit code (message printed): 1 for a file or tokenizer
 * failure, 2 for a bad prompt. */
static int load_inputs(const char *model_path, const char *prompt, const char *tokens_arg, int special,
                       struct model **m, struct tokenizer **tok, int32_t **ptoks, size_t *np)
{
    char err[512];
    if (model_load(model_path, m, err, sizeof err)) {
        fprintf(stderr, "attnd run: %s\n", err);
        return 1;
    }
    if (tok_create((*m)->gguf, tok, err, sizeof err)) {
        fprintf(stderr, "attnd run: %s: tokenizer: %s\n", model_path, err);
        return 1;
    }
    if (tokens_arg) {
        if (cli_int_list("--tokens", tokens_arg, ptoks, np)) return 2;
    } else if (tok_encode(*tok, prompt, strlen(prompt), true, special, ptoks, np)) {
        fprintf(stderr, "attnd run: could not tokenize the prompt\n");
        return 1;
    }
    const int V = (*m)->hp.n_vocab;
    for (size_t i = 0; i < *np; i++)
        if ((*ptoks)[i] < 0 || (*ptoks)[i] >= V) {
            fprintf(stderr, "attnd run: token id %d is outside the vocabulary (%d entries)\n", (*ptoks)[i], V);
            return 2;
        }
    if (*np == 0) {
        fprintf(stderr, "attnd run: the prompt is empty (and the model adds no BOS token)\n");
        return 2;
    }
    return 0;
}

int cmd_run(int argc, char **argv)
{
    const char *model_path = NULL, *prompt = NULL, *tokens_arg = NULL;
    const char *stops[MAX_STOPS];
    int n_stops = 0, json = 0, ignore_eos = 0, special = 0;
    long n_predict = 128, threads = 0, n_ctx = 0;
    int backend = FWD_BACKEND_AUTO, vk_device = 0, bf;
    struct sampler_params sp = sampler_params_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        long l;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(a, "--special")) special = 1;
        else if (!v) {
            fprintf(stderr, "attnd run: unknown option or missing value: '%s'\n", a);
            usage(stderr);
            return 2;
        } else if ((bf = cli_backend_flag(a, v, &backend, &vk_device)) < 0) return 2;
        else if (bf) i++;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = argv[++i];
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = argv[++i];
        else if (!strcmp(a, "--tokens")) tokens_arg = argv[++i];
        else if (!strcmp(a, "--stop")) {
            if (n_stops == MAX_STOPS) {
                fprintf(stderr, "attnd run: at most %d --stop strings\n", MAX_STOPS);
                return 2;
            }
            stops[n_stops++] = argv[++i];
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (cli_int(a, argv[++i], 0, 1 << 20, &n_predict)) return 2;
        } else if (!strcmp(a, "--threads")) {
            if (cli_int(a, argv[++i], 0, 256, &threads)) return 2;
        } else if (!strcmp(a, "--ctx")) {
            if (cli_int(a, argv[++i], 0, 1 << 22, &n_ctx)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (cli_int(a, argv[++i], 0, 0x7fffffffL, &l)) return 2;
            sp.seed = (uint64_t)l;
        } else if (!strcmp(a, "--top-k")) {
            if (cli_int(a, argv[++i], 0, 1 << 22, &l)) return 2;
            sp.top_k = (int)l;
        } else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) {
            if (cli_float(a, argv[++i], 0, 100, &d)) return 2;
            sp.temperature = (float)d;
        } else if (!strcmp(a, "--top-p")) {
            if (cli_float(a, argv[++i], 0, 1, &d)) return 2;
            sp.top_p = (float)d;
        } else if (!strcmp(a, "--min-p")) {
            if (cli_float(a, argv[++i], 0, 1, &d)) return 2;
            sp.min_p = (float)d;
        } else if (!strcmp(a, "--repeat-penalty")) {
            if (cli_float(a, argv[++i], 0, 10, &d)) return 2;
            sp.repetition_penalty = (float)d;
        } else if (!strcmp(a, "--presence-penalty")) {
            if (cli_float(a, argv[++i], -2, 2, &d)) return 2;
            sp.presence_penalty = (float)d;
        } else if (!strcmp(a, "--frequency-penalty")) {
            if (cli_float(a, argv[++i], -2, 2, &d)) return 2;
            sp.frequency_penalty = (float)d;
        } else {
            fprintf(stderr, "attnd run: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model_path || (!prompt && !tokens_arg) || (prompt && tokens_arg)) {
        fprintf(stderr, "attnd run: need -m MODEL and exactly one of -p PROMPT or --tokens IDS\n");
        usage(stderr);
        return 2;
    }
    char err[512];
    if (sampler_params_validate(&sp, err, sizeof err)) {
        fprintf(stderr, "attnd run: %s\n", err);
        return 2;
    }

    int rc = 1;
    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    struct fwd_ctx *c = NULL;
    struct gen *g = NULL;
    int32_t *ptoks = NULL, *gen = NULL;
    size_t np = 0, ng = 0;
    float *logits = NULL;
    struct sink out = {.json = json};
    const char *finish = "length";

    if ((rc = load_inputs(model_path, prompt, tokens_arg, special, &m, &tok, &ptoks, &np))) goto done;
    rc = 1;
    const int V = m->hp.n_vocab;
    long ctx = n_ctx ? n_ctx : (long)np + n_predict;
    if (ctx > m->hp.n_ctx_train && !n_ctx) ctx = m->hp.n_ctx_train;
    if ((long)np + (n_predict ? 1 : 0) > ctx) {
        fprintf(stderr, "attnd run: the prompt has %zu tokens; the context holds %ld\n", np, ctx);
        rc = 2;
        goto done;
    }
    struct fwd_opts fo = {.n_ctx = (int)ctx, .n_threads = (int)threads, .backend = (enum fwd_backend)backend,
                          .vk_device = vk_device};
    logits = malloc((size_t)V * sizeof(float));
    gen = malloc(((size_t)n_predict + 1) * sizeof *gen);
    if (logits && gen && fwd_create(m, &fo, &c)) {
        fprintf(stderr, "attnd run: cannot create the forward context: %s\n",
                fwd_backend_error()[0] ? fwd_backend_error() : "out of memory");
        goto done;
    }
    const struct gen_opts go = {.sampling = sp, .stops = stops, .n_stops = n_stops, .ignore_eos = ignore_eos,
                                .decode_flags = special ? TOK_DECODE_SPECIAL : 0, .max_tokens = (int)n_predict};
    if (!logits || !gen || gen_create(tok, V, &go, &g)) {
        fprintf(stderr, "attnd run: out of memory\n");
        goto done;
    }
    gen_accept_context(g, ptoks, np);
    struct run_times rt;
    if (generate(c, g, ptoks, np, n_predict, logits, gen, &ng, &out, &finish, &rt)) goto done;
    report(&out, c, ptoks, np, gen, ng, finish, &rt);
    rc = 0;
done:
    free(out.buf);
    free(logits);
    free(gen);
    free(ptoks);
    gen_destroy(g);
    fwd_destroy(c);
    tok_destroy(tok);
    model_destroy(m);
    return rc;
}
