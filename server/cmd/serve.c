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

#include "attnd/http.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/sched.h"
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
    pthread_t main_thread;
    /* results, read after the SIGUSR1 */
    struct model *m;
    struct tokenizer *tok;
    struct sched *s;
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
        attnd_status st = sched_create(L->m, L->tok, &L->so, &L->s);
        if (st) log_error("cannot start the scheduler: %s", attnd_status_str(st));
        else L->ok = true;
    }
    pthread_kill(L->main_thread, SIGUSR1);
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: attnd serve -m MODEL.gguf [options]\n"
            "  -m, --model PATH            GGUF model to serve (required)\n"
            "  --host ADDR                 address to bind (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
            "  --port N                    TCP port (default 8080; 0 = pick a free one, logged at start)\n"
            "  --threads N                 compute threads (default 0 = all online CPUs)\n"
            CLI_BACKEND_HELP
            "  --ctx N                     context per request, tokens (default 0 = min(model's, 4096))\n"
            "  --max-queue N               waiting requests before 503 (default 64)\n"
            "  --max-running N             requests batched together (default 32)\n"
            "  --batch N                   tokens per scheduler step (default 256)\n"
            "  --kv-mib N                  KV cache pool, MiB (default 256; at least one full context)\n"
            "  --kv-blocks N               KV cache pool in 16-token blocks (overrides --kv-mib)\n"
            "  --kv-type f32|f16           KV cache element type (default: f32 for F32 models, else f16)\n"
            "  --max-body BYTES            largest request body (default 1048576; bigger: 413)\n"
            "  --max-tokens-cap N          largest max_tokens a request may ask (default 4096)\n"
            "  --keep-requests N           finished requests /attention can address (default 16)\n"
            "  --attention-max-tokens N    longest sequence /attention maps (default 2048; longer: 413)\n"
            "  --max-connections N         concurrent connections (default 256)\n"
            "  --max-per-client N          concurrent connections from one client address (default 64)\n"
            "  --timeout-ms N              close a connection idle this long, e.g. a half-sent request\n"
            "                              (default 30000, whole seconds; 0 = never)\n"
            "  --api-key KEY               require 'Authorization: Bearer KEY' on every route but /health\n"
            "  --api-key-file FILE         the same, the key read from FILE (first line)\n"
            "  --grace-ms N                on SIGTERM/SIGINT, how long requests in flight may run on\n"
            "                              (default 10000)\n"
            "  -h, --help                  this text\n"
            "Routes: POST /v1/generate, GET /attention, GET /health, GET /v1/models, GET /metrics\n"
            "(README.md, section \"HTTP API\").\n");
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

int cmd_serve(int argc, char **argv)
{
    struct http_config hc;
    http_config_default(&hc);
    const char *model_path = NULL, *key_file = NULL;
    long threads = 0, n_ctx = 0, max_queue = 64, max_running = 0, n_batch = 0, kv_mib = 0, kv_blocks = 0, grace_ms = 10000, l;
    enum tensor_type kv_type = KV_TYPE_AUTO;
    int backend = FWD_BACKEND_AUTO, vk_device = 0, bf;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "attnd serve: unknown option or missing value: '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if ((bf = cli_backend_flag(a, v, &backend, &vk_device)) < 0) return 2;
        else if (bf) continue;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--host")) hc.host = v;
        else if (!strcmp(a, "--api-key")) hc.api_key = v;
        else if (!strcmp(a, "--api-key-file")) key_file = v;
        else if (!strcmp(a, "--port")) {
            if (cli_int(a, v, 0, 65535, &l)) return 2;
            hc.port = (int)l;
        } else if (!strcmp(a, "--threads")) {
            if (cli_int(a, v, 0, 1024, &threads)) return 2;
        } else if (!strcmp(a, "--ctx")) {
            if (cli_int(a, v, 0, 1 << 22, &n_ctx)) return 2;
        } else if (!strcmp(a, "--max-queue")) {
            if (cli_int(a, v, 1, 1 << 20, &max_queue)) return 2;
        } else if (!strcmp(a, "--max-running")) {
            if (cli_int(a, v, 1, 4096, &max_running)) return 2;
        } else if (!strcmp(a, "--batch")) {
            if (cli_int(a, v, 1, 1 << 16, &n_batch)) return 2;
        } else if (!strcmp(a, "--kv-mib")) {
            if (cli_int(a, v, 1, 1L << 30, &kv_mib)) return 2;
        } else if (!strcmp(a, "--kv-blocks")) {
            if (cli_int(a, v, 1, 1L << 30, &kv_blocks)) return 2;
        } else if (!strcmp(a, "--kv-type")) {
            if (!strcmp(v, "f32")) kv_type = TENSOR_F32;
            else if (!strcmp(v, "f16")) kv_type = TENSOR_F16;
            else {
                fprintf(stderr, "attnd serve: --kv-type expects f32 or f16, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--max-body")) {
            if (cli_int(a, v, 64, 1L << 30, &l)) return 2;
            hc.max_body = (size_t)l;
        } else if (!strcmp(a, "--max-tokens-cap")) {
            if (cli_int(a, v, 0, 1 << 22, &l)) return 2;
            hc.max_tokens_cap = (int)l;
        } else if (!strcmp(a, "--keep-requests")) {
            if (cli_int(a, v, 1, 1 << 16, &l)) return 2;
            hc.keep_requests = (int)l;
        } else if (!strcmp(a, "--attention-max-tokens")) {
            if (cli_int(a, v, 1, 1 << 16, &l)) return 2;
            hc.attention_max_tokens = (int)l;
        } else if (!strcmp(a, "--max-connections")) {
            if (cli_int(a, v, 1, 1 << 16, &l)) return 2;
            hc.max_connections = (int)l;
        } else if (!strcmp(a, "--max-per-client")) {
            if (cli_int(a, v, 1, 1 << 16, &l)) return 2;
            hc.max_per_client = (int)l;
        } else if (!strcmp(a, "--timeout-ms")) {
            if (cli_int(a, v, 0, 3600L * 1000, &l)) return 2;
            hc.timeout_ms = (int)l;
        } else if (!strcmp(a, "--grace-ms")) {
            if (cli_int(a, v, 0, 3600L * 1000, &grace_ms)) return 2;
        } else {
            fprintf(stderr, "attnd serve: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model_path) {
        fprintf(stderr, "attnd serve: need -m MODEL.gguf\n");
        usage(stderr);
        return 2;
    }
    if (hc.api_key && key_file) {
        fprintf(stderr, "attnd serve: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    char *key = NULL;
    if (key_file && !(key = read_key_file(key_file))) return 2;
    if (key) hc.api_key = key;
    if (hc.api_key && !hc.api_key[0]) {
        fprintf(stderr, "attnd serve: --api-key is empty\n");
        return 2;
    }

    /* Block the shutdown signals (and the loader's SIGUSR1) in this thread before any other
     * starts: every thread inherits the mask, and sigwait() below takes them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    char err[512];
    struct http_server *srv = NULL;
    /* static: on a signal during the load this function returns while the loader still runs */
    static struct loader L;
    L = (struct loader){.path = model_path,
                        .so = {.n_threads = (int)threads,
                               .n_ctx = (int)n_ctx,
                               .max_queue = (int)max_queue,
                               .max_running = (int)max_running,
                               .n_batch = (int)n_batch,
                               .kv_type = kv_type,
                               .kv_mib = (size_t)kv_mib, .kv_blocks = (size_t)kv_blocks,
                               .backend = backend, .vk_device = vk_device},
                        .main_thread = pthread_self()};
    pthread_t loader;
    bool loader_started = false;
    if (http_create(&hc, &srv, err, sizeof err)) {
        fprintf(stderr, "attnd serve: %s\n", err);
        goto out;
    }
    bool v6 = strchr(hc.host, ':') != NULL;
    fprintf(stderr, "attnd: listening on http://%s%s%s:%d\n", v6 ? "[" : "", hc.host, v6 ? "]" : "", http_port(srv));
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
    struct model *m = L.m;
    struct sched *s = L.s;
    http_set_engine(srv, m, L.tok, s);
    log_info("ready: model %s (%s, %d layers, vocabulary %d), context %d tokens", m->name ? m->name : "?",
             m->hp.arch_name, m->hp.n_layer, m->hp.n_vocab, sched_n_ctx(s));

    do {
        if (sigwait(&sigs, &sig)) sig = 0;
    } while (sig != SIGTERM && sig != SIGINT);
    log_info("received %s: no new requests; requests in flight get %ld ms", sig == SIGTERM ? "SIGTERM" : "SIGINT",
             grace_ms);
    http_stop_accepting(srv);
    sched_drain(s);
    http_detach_engine(srv);
    sched_destroy(s, (int)grace_ms); /* every submitted request gets its last event here */
    L.s = NULL;
    if (!http_wait_idle(srv, 5000)) log_warn("some answers were still being sent at shutdown");
    log_info("stopped");
    rc = 0;
out:
    if (loader_started) pthread_join(loader, NULL);
    http_destroy(srv);
    sched_destroy(L.s, 0);
    tok_destroy(L.tok);
    model_destroy(L.m);
    free(key);
    return rc;
}
