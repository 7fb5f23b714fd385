/* serve.c - `attnd serve`: the HTTP daemon.
 *
 * Start-up: bind and serve first (so /health can answer 503 "loading" at once), then load the
 * model, build the tokenizer and the scheduler, and make the engine live.
 * Shutdown on SIGTERM or SIGINT: stop listening, refuse new work, let the requests in flight
 * finish within --grace-ms (then cancel them), let their answers go out, exit 0.
 *
 * Signals are blocked in every thread (the mask is set before any thread starts) and taken by
 * sigwait() here, so no handler runs inside the library.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/chat_template.h"
#include "attnd/http.h"
#include "attnd/kvdisk.h"
#include "attnd/kvevents.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/spec.h"
#include "attnd/tensor.h"
#include "attnd/tokenizer.h"
#include "attnd/forward.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

#define MAX_KEY_FILE 4096
#define KV_TYPE_AUTO ((enum tensor_type) - 1)

/* The model is loaded on its own thread so that the main thread can take a SIGTERM at any time
 * (a large model takes a while). The loader reports back with SIGUSR1 to the main thread. */
struct loader {
    const char *path;
    struct sched_opts so;
    const char *disk_dir; /* --kv-disk, or NULL */
    size_t disk_bytes;    /* --kv-disk-bytes */
    pthread_t main_thread;
    /* results, read after the SIGUSR1 */
    struct model *m;
    struct tokenizer *tok;
    struct sched *s;
    struct kvdisk *disk; /* the disk tier (--kv-disk), closed after the scheduler */
    bool ok;
};

static void *load_main(void *arg)
{
    struct loader *L = arg;
    char err[512];
    log_info("loading %s", L->path);
    if (model_load(L->path, &L->m, err, sizeof err)) {
        log_error("cannot load the model: %s", err);
    } else if (tok_create(L->m->gguf, &L->tok, err, sizeof err)) {
        log_error("%s: tokenizer: %s", L->path, err);
    } else {
        /* F32 weights get an F32 KV cache (exact golden numbers); smaller weights an F16 one */
        if (L->so.kv_type == KV_TYPE_AUTO)
            L->so.kv_type = L->m->hp.n_layer > 0 && L->m->layers[0].wq.type == TENSOR_F32 ? TENSOR_F32 : TENSOR_F16;
        attnd_status st = ATTND_OK;
        if (L->disk_dir && !(st = kvdisk_open_model(L->disk_dir, L->disk_bytes, L->m, L->so.kv_type, &L->disk)))
            L->so.kv_disk = L->disk;
        if (!st) st = sched_create(L->m, L->tok, &L->so, &L->s);
        if (st) log_error("cannot start the scheduler: %s", attnd_status_str(st));
        else L->ok = true;
    }
    pthread_kill(L->main_thread, SIGUSR1);
    return NULL;
}

/* Everything the command line sets. */
struct serve_args {
    struct http_config hc;
    struct sched_opts so; /* kv_type, backend and vk_device via the ints below */
    const char *model_path, *key_file;
    long grace_ms;
    long max_work; /* --max-request-work */
    int kv_type; /* enum tensor_type, or KV_TYPE_AUTO */
    const char *kv_events, *kv_events_replay, *kv_events_topic; /* --kv-events* (kvevents.h) */
    const char *kv_disk;  /* --kv-disk DIR (kvdisk.h) */
    size_t kv_disk_bytes; /* --kv-disk-bytes */
};

static const struct cli_choice g_spec_modes[] = {{"off", SPEC_OFF}, {"lookup", SPEC_LOOKUP}, {NULL, 0}};
static const struct cli_choice g_kv_types[] = {{"f32", TENSOR_F32}, {"f16", TENSOR_F16}, {NULL, 0}};

/* The fair-scheduling and back-pressure rows of serve's option table (issue 38). */
#define SERVE_FAIR_OPTS(so, hc, work) \
        {CLI_OPT("--max-running-per-tenant", NULL, CLI_INT, &(so)->max_running_per_owner, "N", "running (or paused) requests of one tenant, or of one client\n" \
                 "address without keys (default 0 = --max-running; tenants take turns)"), CLI_RANGE(0, 4096)}, \
        {CLI_OPT("--max-queued-per-tenant", NULL, CLI_INT, &(so)->max_queued_per_owner, "N", "waiting requests of one tenant (or address) before 429\n" \
                 "(default 0 = half of --max-queue)"), CLI_RANGE(0, 1 << 20)}, \
        {CLI_OPT("--stream-pause-kib", NULL, CLI_SIZE, &(hc)->stream_pause_kib, "N", "pause a stream whose client leaves this many KiB unread\n" \
                 "(default 64); resumed below half"), CLI_RANGE(1, 1L << 20)}, \
        {CLI_OPT("--stall-timeout-ms", NULL, CLI_INT, &(so)->stall_timeout_ms, "N", "cancel a paused stream whose client takes no bytes this long\n" \
                 "(default 30000)"), CLI_RANGE(1, 3600 * 1000)}, \
        {CLI_OPT("--max-request-work", NULL, CLI_LONG, (work), "N", "largest max_tokens x choices x (1 + logprobs alternatives) of\n" \
                 "one completion request (default 131072; bigger: 400)"), CLI_RANGE(1, 1L << 40)}

/* The speculative-decoding rows of serve's option table (issue 36). */
#define SERVE_SPEC_OPTS(so) \
        {CLI_OPT("--speculative", NULL, CLI_CHOICE, &(so)->speculative, "off|lookup", "speculative decoding of requests that do not choose (their\n" \
                 "\"speculative\" field): lookup drafts from the prompt's n-grams (default off)"), .choices = g_spec_modes}, \
        {CLI_OPT("--spec-max-seqs", NULL, CLI_INT, &(so)->spec_max_seqs, "N", "speculate only in steps of at most N decoding requests (default 4)"), CLI_RANGE(0, 4096)}

/* Fills *A from argv; returns CLI_GO, or the exit status (help printed, or a usage error). */
static int parse_args(struct serve_args *A, int argc, char **argv)
{
    http_config_default(&A->hc);
    A->so = (struct sched_opts){.max_queue = 64, .backend = FWD_BACKEND_AUTO};
    A->grace_ms = 10000;
    A->kv_type = (int)KV_TYPE_AUTO;
    struct http_config *hc = &A->hc;
    struct sched_opts *so = &A->so;
    const struct cli_opt opts[] = {
        {CLI_OPT("--model", "-m", CLI_STR, &A->model_path, "PATH", "GGUF model to serve (required)")},
        {CLI_OPT("--host", NULL, CLI_STR, &hc->host, "ADDR", "address to bind (default 127.0.0.1; 0.0.0.0 or :: for all)")},
        {CLI_OPT("--port", NULL, CLI_INT, &hc->port, "N", "TCP port (default 8080; 0 = pick a free one, logged at start)"), CLI_RANGE(0, 65535)},
        CLI_THREADS_OPT(CLI_INT, &so->n_threads, 1024),
        CLI_BACKEND_OPTS(&so->backend, &so->vk_device),
        {CLI_OPT("--ctx", NULL, CLI_INT, &so->n_ctx, "N", "context per request, tokens (default 0 = min(model's, 4096))"), CLI_RANGE(0, 1 << 22)},
        {CLI_OPT("--max-queue", NULL, CLI_INT, &so->max_queue, "N", "waiting requests before 503 (default 64)"), CLI_RANGE(1, 1 << 20)},
        {CLI_OPT("--max-running", NULL, CLI_INT, &so->max_running, "N", "requests batched together (default 32)"), CLI_RANGE(1, 4096)},
        {CLI_OPT("--batch", NULL, CLI_INT, &so->n_batch, "N", "tokens per scheduler step (default 256)"), CLI_RANGE(1, 1 << 16)},
        SERVE_SPEC_OPTS(so),
        {CLI_OPT("--kv-mib", NULL, CLI_SIZE, &so->kv_mib, "N", "KV cache pool, MiB (default 256; at least one full context)"), CLI_RANGE(1, 1L << 30)},
        {CLI_OPT("--kv-blocks", NULL, CLI_SIZE, &so->kv_blocks, "N", "KV cache pool in 16-token blocks (overrides --kv-mib)"), CLI_RANGE(1, 1L << 30)},
        {CLI_OPT("--kv-type", NULL, CLI_CHOICE, &A->kv_type, "f32|f16", "KV cache element type (default: f32 for F32 models, else f16)"), .choices = g_kv_types},
        {CLI_OPT("--kv-events", NULL, CLI_STR, &A->kv_events, "ENDPOINT", "publish KV-cache events in vLLM's format on a ZeroMQ PUB socket\n"
                 "bound here, e.g. tcp://127.0.0.1:5557 (a leading '>' connects)")},
        {CLI_OPT("--kv-events-replay", NULL, CLI_STR, &A->kv_events_replay, "ENDPOINT", "a ROUTER socket bound here replays the last 10000 event batches")},
        {CLI_OPT("--kv-events-topic", NULL, CLI_STR, &A->kv_events_topic, "TOPIC", "first frame of each event message (default empty; llm-d reads\n"
                 "kv@POD@MODEL)")},
        {CLI_OPT("--kv-disk", NULL, CLI_STR, &A->kv_disk, "DIR", "spill evicted prefix blocks to DIR, restore them on a hit (docs/DEPLOY.md)")},
        {CLI_OPT("--kv-disk-bytes", NULL, CLI_SIZE, &A->kv_disk_bytes, "BYTES", "budget of --kv-disk's files, least recently used deleted first (default 1 GiB)"), CLI_RANGE(1, 1L << 50)},
        SERVE_FAIR_OPTS(so, hc, &A->max_work),
        {CLI_OPT("--max-body", NULL, CLI_SIZE, &hc->max_body, "BYTES", "largest request body (default 1048576; bigger: 413)"), CLI_RANGE(64, 1L << 30)},
        {CLI_OPT("--max-tokens-cap", NULL, CLI_INT, &hc->max_tokens_cap, "N", "largest max_tokens a request may ask (default 4096)"), CLI_RANGE(0, 1 << 22)},
        {CLI_OPT("--keep-requests", NULL, CLI_INT, &hc->keep_requests, "N", "finished requests /attention can address (default 16)"), CLI_RANGE(1, 1 << 16)},
        {CLI_OPT("--attention-max-tokens", NULL, CLI_INT, &hc->attention_max_tokens, "N", "longest sequence /attention maps (default 2048; longer: 413)"), CLI_RANGE(1, 1 << 16)},
        {CLI_OPT("--max-connections", NULL, CLI_INT, &hc->max_connections, "N", "concurrent connections (default 256)"), CLI_RANGE(1, 1 << 16)},
        {CLI_OPT("--max-per-client", NULL, CLI_INT, &hc->max_per_client, "N", "concurrent connections from one client address (default 64)"), CLI_RANGE(1, 1 << 16)},
        {CLI_OPT("--timeout-ms", NULL, CLI_INT, &hc->timeout_ms, "N", "close a connection idle this long, e.g. a half-sent request\n(default 30000, whole seconds; 0 = never)"), CLI_RANGE(0, 3600 * 1000)},
        {CLI_OPT("--api-key", NULL, CLI_STR, &hc->api_key, "KEY", "require 'Authorization: Bearer KEY' on every route but the open\n"
                                                                  "ones listed below (one unnamed tenant)")},
        {CLI_OPT("--api-key-file", NULL, CLI_STR, &A->key_file, "FILE", "the same, the key read from FILE (first line)")},
        {CLI_OPT("--api-keys", NULL, CLI_STR, &hc->api_keys_file, "FILE", "tenants: one 'name:key' per line ('#' comments and blank lines\n"
                 "allowed); a request belongs to the tenant whose key it shows, and\n"
                 "/attention and /logit_lens read only that tenant's requests")},
        {CLI_OPT("--response-budget-mb", NULL, CLI_SIZE, &hc->response_budget_mib, "N", "MiB of /attention and /logit_lens answers in flight, all\n"
                 "clients together (default 256; past it: 503 + Retry-After)"), CLI_RANGE(1, 1L << 20)},
        {CLI_OPT("--cors", NULL, CLI_STR, &hc->cors, "ORIGINS", "let browser apps of these origins call the API: '*' or a\n"
                 "comma-separated list (Access-Control-Allow-Origin; preflights\n"
                 "answered). The API key is still required where it is set")},
        {CLI_OPT("--chat-template", NULL, CLI_CUSTOM, &hc->chat_template, "NAME",
                 "chatml|llama3|mistral|gemma|phi3 for /v1/chat/completions\n"
                 "(default: recognised from the model's tokenizer.chat_template)"),
         .parse = cli_parse_chat_template},
        {CLI_OPT("--chat-template-file", NULL, CLI_STR, &hc->chat_template_file, "PATH", "a Jinja chat template for /v1/chat/completions (over the model's own)")},
        {CLI_OPT("--grace-ms", NULL, CLI_LONG, &A->grace_ms, "N", "on SIGTERM/SIGINT, how long requests in flight may run on\n(default 10000)"), CLI_RANGE(0, 3600L * 1000)},
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {
        .name = "serve", .usage = "attnd serve -m MODEL.gguf [options]", .opts = opts,
        .footer = "Routes: POST /v1/generate, POST /v1/chat/completions, POST /v1/completions, GET /attention,\n"
                  "GET /logit_lens, GET /heads, GET /health, GET /v1/models, GET /metrics\n"
                  "(docs/API.md).\n"
                  "Open without a key: GET /health, and the playground's files, which must load before a key\n"
                  "can be typed and hold no secrets: GET /, /index.html and every other file of web/\n"
                  "(/app.js, /style.css...). Every other path needs the key, unknown ones too (401, not 404).\n"
                  "Without a key the daemon is single-user: every client, from any address, is the same user\n"
                  "and may read every finished request.\n"};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO) return rc;
    if (!A->model_path) {
        fprintf(stderr, "attnd serve: need -m MODEL.gguf\n");
        cli_usage(&cmd, stderr);
        return 2;
    }
    so->kv_type = (enum tensor_type)A->kv_type;
    if (!so->max_queued_per_owner) so->max_queued_per_owner = so->max_queue > 1 ? so->max_queue / 2 : 1;
    hc->max_request_work = A->max_work;
    return CLI_GO;
}

/* Reads the first line of path into a malloc'd string without trailing whitespace. */
static char *read_key_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "attnd serve: cannot open --api-key-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = calloc(1, MAX_KEY_FILE + 1);
    size_t n = buf ? fread(buf, 1, MAX_KEY_FILE, f) : 0;
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
    n = strlen(buf);
    while (n && (buf[n - 1] == ' ' || buf[n - 1] == '\t')) buf[--n] = 0;
    if (!n) {
        fprintf(stderr, "attnd serve: --api-key-file %s holds no key\n", path);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Settles the API key: --api-key or the first line of --api-key-file (*key then owns the copy).
 * Returns 0, or 2 after a message. */
static int settle_api_key(struct serve_args *A, char **key)
{
    *key = NULL;
    if (A->hc.api_key && A->key_file) {
        fprintf(stderr, "attnd serve: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    if (A->hc.api_keys_file && (A->hc.api_key || A->key_file)) {
        fprintf(stderr, "attnd serve: give --api-keys or --api-key/--api-key-file, not both\n");
        return 2;
    }
    if (A->key_file && !(*key = read_key_file(A->key_file))) return 2;
    if (*key) A->hc.api_key = *key;
    if (A->hc.api_key && !A->hc.api_key[0]) {
        fprintf(stderr, "attnd serve: --api-key is empty\n");
        return 2;
    }
    return 0;
}

/* Blocks the shutdown signals (and the loader's SIGUSR1) in this thread before any other starts:
 * every thread inherits the mask, and sigwait() takes them. */
static void block_signals(sigset_t *sigs)
{
    sigemptyset(sigs);
    sigaddset(sigs, SIGTERM);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Serves the loaded engine (after logging its chat template: chat_template, an enum chat_family,
 * or < 0 for the one recognised from the model) until SIGTERM or SIGINT, then shuts down in order: stop listening,
 * drain, detach, cancel what outlives grace_ms, let the answers go out. */
static void serve_until_signal(struct http_server *srv, struct loader *L, const sigset_t *sigs, long grace_ms,
                               int chat_template, const char *chat_template_file)
{
    struct model *m = L->m;
    struct sched *s = L->s;
    int sig = 0;
    const struct chat_tmpl *ct; /* logs which template chat requests use, and why */
    char cterr[512];
    if (chat_tmpl_get(m->gguf, chat_template_file, chat_template, true, &ct, cterr, sizeof cterr)) log_error("%s", cterr);
    http_set_engine(srv, m, L->tok, s);
    log_info("ready: model %s (%s, %d layers, vocabulary %d), context %d tokens", m->name ? m->name : "?",
             m->hp.arch_name, m->hp.n_layer, m->hp.n_vocab, sched_n_ctx(s));
    do {
        if (sigwait(sigs, &sig)) sig = 0;
    } while (sig != SIGTERM && sig != SIGINT);
    log_info("received %s: no new requests; requests in flight get %ld ms", sig == SIGTERM ? "SIGTERM" : "SIGINT",
             grace_ms);
    http_stop_accepting(srv);
    sched_drain(s);
    http_detach_engine(srv);
    sched_destroy(s, (int)grace_ms); /* every submitted request gets its last event here */
    L->s = NULL;
    if (!http_wait_idle(srv, 5000)) log_warn("some answers were still being sent at shutdown");
    log_info("stopped");
}

/* Starts the KV-cache event publisher when --kv-events asks (A->so.kv_events then points to it,
 * *out owns it). Returns 0, or the exit status after a message (2: a usage error). */
static int start_kv_events(struct serve_args *A, struct kvev **out)
{
    *out = NULL;
    if (!A->kv_events && !A->kv_events_replay) return 0;
    struct kvev_opts ko = kvev_opts_default();
    ko.endpoint = A->kv_events, ko.replay_endpoint = A->kv_events_replay, ko.topic = A->kv_events_topic;
    char kerr[512];
    attnd_status st = kvev_create(&ko, out, kerr, sizeof kerr);
    if (st) {
        fprintf(stderr, "attnd serve: %s\n", st == ATTND_ERR_INVALID ? "--kv-events-replay needs --kv-events" : kerr);
        return st == ATTND_ERR_INVALID ? 2 : 1;
    }
    A->so.kv_events = *out;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    struct serve_args A = {0};
    int rc = parse_args(&A, argc, argv);
    if (rc != CLI_GO) return rc;
    const struct chat_tmpl *ct;
    char cterr[512];
    if (A.hc.chat_template_file && chat_tmpl_get(NULL, A.hc.chat_template_file, -1, false, &ct, cterr, sizeof cterr)) {
        fprintf(stderr, "attnd serve: %s\n", cterr);
        return 2;
    }
    char *key;
    if ((rc = settle_api_key(&A, &key))) return rc;
    sigset_t sigs;
    block_signals(&sigs);
    struct kvev *kve = NULL; /* after block_signals: its thread inherits the mask */
    if ((rc = start_kv_events(&A, &kve))) {
        free(key);
        return rc;
    }

    rc = 1;
    char err[512];
    struct http_server *srv = NULL;
    /* static: on a signal during the load this function returns while the loader still runs */
    static struct loader L;
    L = (struct loader){.path = A.model_path, .so = A.so, .main_thread = pthread_self(), .disk_dir = A.kv_disk,
                        .disk_bytes = A.kv_disk_bytes ? A.kv_disk_bytes : (size_t)1 << 30};
    pthread_t loader;
    bool loader_started = false;
    attnd_status hst = http_create(&A.hc, &srv, err, sizeof err);
    if (hst) {
        fprintf(stderr, "attnd serve: %s\n", err);
        if (hst == ATTND_ERR_INVALID) rc = 2; /* a bad setting (a keys file's line, --host): a usage error */
        goto out;
    }
    const char *host = A.hc.host;
    bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "attnd: listening on http://%s%s%s:%d\n", v6 ? "[" : "", host, v6 ? "]" : "", http_port(srv));
    fflush(stderr);

    if (pthread_create(&loader, NULL, load_main, &L)) {
        log_error("cannot start the loader thread");
        goto out;
    }
    loader_started = true;
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {
    }
    if (sig != SIGUSR1) {
        /* Still loading: nothing is in flight, and model_load() cannot be interrupted. Close the
         * server and leave; the loader touches only L, and the process exit ends it. */
        log_info("received %s while loading the model: exiting", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        http_destroy(srv);
        free(key);
        return 0;
    }
    pthread_join(loader, NULL);
    loader_started = false;
    if (!L.ok) goto out;
    serve_until_signal(srv, &L, &sigs, A.grace_ms, A.hc.chat_template, A.hc.chat_template_file);
    rc = 0;
out:
    if (loader_started) pthread_join(loader, NULL);
    http_destroy(srv);
    sched_destroy(L.s, 0);
    kvdisk_close(L.disk); /* after the scheduler, whose cache spills to it */
    tok_destroy(L.tok);
    model_destroy(L.m);
    kvev_destroy(kve); /* after the scheduler, whose cache reports to it */
    free(key);
    return rc;
}
