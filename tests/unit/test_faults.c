/* test_faults.c - fault injection (issue 17). Linked with -Wl,--wrap=malloc,--wrap=calloc,
 * --wrap=realloc (Makefile), so every allocation the library makes goes through the wrappers
 * below, which can fail the N-th one. (Allocations inside libc, libcjson and libmicrohttpd, e.g.
 * strdup, are not wrapped.)
 *  1. For N = 1, 2, ... until an attempt makes fewer than N allocations: model_load,
 *     tok_create and sched_create with allocation N failing return a status (never crash), and
 *     leave nothing allocated (LSan, in the asan variant, checks at exit).
 *  2. The same loop over one generation request (logprobs and a stop string on, so the sampler,
 *     stop matcher and detokenizer allocate too), over /attention's computation
 *     (sched_attention) and over the logit lens (sched_logit_lens): each either succeeds or ends
 *     with ATTND_ERR_NOMEM, and the next clean call gives the reference answer (an attention
 *     map failing its probe buffers once used to leave a context without them: NULL deref).
 *  4. The HTTP server in-process (as `attnd serve` wires it): for N over every allocation of a
 *     POST /v1/generate (then of a GET /attention), the answer is a 200 or a 5xx (never a hang
 *     or a crash; the first allocation, the connection's own state, closes the connection) and
 *     the next /health and /v1/generate answer 200.
 *  3. The weights loader with injected io_uring/pread errors (EIO at the start, middle and last
 *     byte) fails with ATTND_ERR_IO naming the offset; with short reads (every read at most
 *     4093 bytes, or 1 byte on a small range) it resubmits and loads identical weights, on the
 *     io_uring path and on the pread path. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/http.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "attnd/weights.h"
#include "http_client.h"
#include "testutil.h"

/* ---- the allocation wrappers ----------------------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static atomic_long g_count;   /* allocations since arm() */
static atomic_long g_fail_at; /* fail allocation number g_fail_at (0: none) */
static atomic_int g_failed;   /* an allocation was failed since arm() */

static int fail_now(void)
{
    long at = atomic_load(&g_fail_at);
    if (!at) return 0;
    if (atomic_fetch_add(&g_count, 1) + 1 != at) return 0;
    atomic_store(&g_failed, 1);
    return 1;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fail_now() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return n && fail_now() ? NULL : __real_realloc(p, n); }

static void arm(long n)
{
    atomic_store(&g_count, 0);
    atomic_store(&g_failed, 0);
    atomic_store(&g_fail_at, n);
}

/* Disarms; returns whether allocation N was reached (and failed). */
static int disarm(void)
{
    atomic_store(&g_fail_at, 0);
    return atomic_load(&g_failed);
}

/* ---- requests -------------------------------------------------------------------------------- */

struct result {
    pthread_mutex_t mu;
    int done, kind, n_tokens;
    attnd_status status;
};

static void on_event(void *ud, const struct sched_event *ev)
{
    struct result *r = ud;
    pthread_mutex_lock(&r->mu);
    if (ev->kind == SCHED_EV_TOKEN) r->n_tokens++;
    else {
        r->kind = ev->kind;
        r->status = ev->status;
        r->done = 1;
    }
    pthread_mutex_unlock(&r->mu);
}

/* Submits a greedy request and waits for its end. Returns sched_submit's status. */
static attnd_status generate(struct sched *s, struct result *r)
{
    static const int32_t prompt[] = {1, 403, 407, 261, 117};
    static const char *stops[] = {"zzz"};
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    struct sched_request rq = {.prompt = prompt, .n_prompt = 5, .max_tokens = 6, .logprobs = 3, .stops = stops,
                               .n_stops = 1};
    rq.sampling = sampler_params_default();
    rq.sampling.temperature = 0;
    char err[256];
    uint64_t id;
    attnd_status st = sched_submit(s, &rq, on_event, r, &id, err, sizeof err);
    if (st) return st;
    for (int i = 0; i < 60000; i++) {
        pthread_mutex_lock(&r->mu);
        int d = r->done;
        pthread_mutex_unlock(&r->mu);
        if (d) break;
        usleep(500);
    }
    return ATTND_OK;
}

/* ---- 1. loading ------------------------------------------------------------------------------ */

static void test_load(const char *path)
{
    char err[512];
    long n;
    for (n = 1;; n++) {
        struct model *m = NULL;
        arm(n);
        attnd_status st = model_load(path, &m, err, sizeof err);
        struct tokenizer *tok = NULL;
        attnd_status st2 = st ? ATTND_OK : tok_create(m->gguf, &tok, err, sizeof err);
        struct sched *s = NULL;
        struct sched_opts so = {.n_threads = 1, .n_ctx = 64, .kv_blocks = 16};
        attnd_status st3 = st || st2 ? ATTND_OK : sched_create(m, tok, &so, &s);
        int hit = disarm();
        if (hit) {
            T_CHECK(st || st2 || st3 || (m && tok && s), "N=%ld: a failed allocation went unnoticed", n);
            T_CHECK(!st || m == NULL, "N=%ld: a failed load left a model", n);
        } else {
            T_CHECK(!st && !st2 && !st3, "N=%ld: load failed without an injected fault: %s", n, err);
        }
        sched_destroy(s, 0);
        tok_destroy(tok);
        model_destroy(m);
        if (!hit) break;
    }
    fprintf(stderr, "load + tokenizer + scheduler: %ld allocations, each failed once\n", n - 1);
    T_CHECK(n > 10, "only %ld allocations counted: the wrappers are not linked in", n - 1);
}

/* ---- 2. requests, /attention, /logit_lens ----------------------------------------------------- */

static void test_requests(const char *path)
{
    char err[512];
    struct model *m;
    struct tokenizer *tok;
    struct sched *s;
    struct sched_opts so = {.n_threads = 1, .n_ctx = 64, .kv_blocks = 32};
    if (model_load(path, &m, err, sizeof err) || tok_create(m->gguf, &tok, err, sizeof err) ||
        sched_create(m, tok, &so, &s)) {
        T_CHECK(0, "setup: %s", err);
        return;
    }
    struct result r;
    T_CHECK(generate(s, &r) == ATTND_OK && r.kind == SCHED_EV_DONE && r.n_tokens == 6, "clean request");
    long n, failures = 0;
    for (n = 1;; n++) {
        arm(n);
        attnd_status st = generate(s, &r);
        int hit = disarm();
        if (st) T_CHECK(st == ATTND_ERR_NOMEM && hit, "N=%ld: submit failed with %s", n, attnd_status_str(st));
        else if (r.kind == SCHED_EV_ERROR) {
            failures++;
            T_CHECK(hit && r.status == ATTND_ERR_NOMEM, "N=%ld: request error %s", n, attnd_status_str(r.status));
        } else T_CHECK(r.kind == SCHED_EV_DONE, "N=%ld: no end event", n);
        /* the scheduler still serves */
        T_CHECK(generate(s, &r) == ATTND_OK && r.kind == SCHED_EV_DONE && r.n_tokens == 6, "N=%ld: next request", n);
        if (!hit) break;
    }
    fprintf(stderr, "generation request: %ld allocations, %ld ended with an error event\n", n - 1, failures);

    /* attention maps and the logit lens */
    const int32_t toks[] = {1, 403, 407, 261, 117, 300, 301, 302};
    const size_t nt = 8, nw = nt * (nt + 1) / 2;
    const int hd = m->hp.head_dim;
    float ref[36], w[36], ref_v[8 * 64], v[8 * 64], ref_o[8 * 64], o[8 * 64];
    T_CHECK(hd <= 64, "head dim");
    T_CHECK(sched_attention(s, toks, nt, 1, 2, ref, ref_v, ref_o) == ATTND_OK, "reference attention");
    for (n = 1;; n++) { /* a fresh scheduler each time: its first map also builds the probe context */
        struct sched *s2;
        if (sched_create(m, tok, &so, &s2)) {
            T_CHECK(0, "sched_create");
            break;
        }
        arm(n);
        attnd_status st = sched_attention(s2, toks, nt, 1, 2, w, v, o);
        int hit = disarm();
        T_CHECK(st == ATTND_OK || (st == ATTND_ERR_NOMEM && hit), "N=%ld: attention %s", n, attnd_status_str(st));
        memset(w, 0, sizeof w);
        st = sched_attention(s2, toks, nt, 1, 2, w, v, o);
        T_CHECK(st == ATTND_OK && !memcmp(w, ref, nw * sizeof *w) && !memcmp(o, ref_o, nt * (size_t)hd * sizeof *o),
                "N=%ld: the next attention map differs (%s)", n, attnd_status_str(st));
        sched_destroy(s2, 0);
        if (!hit) break;
    }
    fprintf(stderr, "attention map: %ld allocations\n", n - 1);
    int ref_ids[5 * 8], ids[5 * 8];
    float ref_p[5 * 8], p[5 * 8];
    const int L = m->hp.n_layer;
    T_CHECK(L <= 8, "layers");
    T_CHECK(sched_logit_lens(s, toks, nt, 6, 5, ref_ids, ref_p) == ATTND_OK, "reference logit lens");
    for (n = 1;; n++) {
        arm(n);
        attnd_status st = sched_logit_lens(s, toks, nt, 6, 5, ids, p);
        int hit = disarm();
        T_CHECK(st == ATTND_OK || (st == ATTND_ERR_NOMEM && hit), "N=%ld: logit lens %s", n, attnd_status_str(st));
        st = sched_logit_lens(s, toks, nt, 6, 5, ids, p);
        T_CHECK(st == ATTND_OK && !memcmp(ids, ref_ids, (size_t)L * 5 * sizeof *ids) &&
                    !memcmp(p, ref_p, (size_t)L * 5 * sizeof *p),
                "N=%ld: the next logit lens differs", n);
        if (!hit) break;
    }
    fprintf(stderr, "logit lens: %ld allocations\n", n - 1);
    sched_destroy(s, 0);
    tok_destroy(tok);
    model_destroy(m);
}

/* ---- 3. read errors and short reads ---------------------------------------------------------- */

static void test_reads(const char *path)
{
    size_t len;
    char *file = t_slurp(path, &len);
    if (!file) {
        T_CHECK(0, "read %s", path);
        return;
    }
    char err[512];
    const uint64_t off = 4096, size = (uint64_t)len - 4096;
    void *buf = malloc(size);
    for (int pread_path = 0; pread_path <= 1; pread_path++) {
        if (pread_path) setenv("ATTND_NO_IO_URING", "1", 1);
        const uint64_t eio_at[] = {0, size / 2, size - 1};
        for (int i = 0; i < 3; i++) {
            weights_set_fault(WEIGHTS_FAULT_EIO, eio_at[i]);
            err[0] = 0;
            attnd_status st = weights_read(path, off, size, buf, NULL, err, sizeof err);
            T_CHECK(st == ATTND_ERR_IO && strstr(err, "offset"), "%s: EIO at %llu: %s (%s)",
                    pread_path ? "pread" : "io_uring", (unsigned long long)eio_at[i], attnd_status_str(st), err);
        }
        const uint64_t short_max[] = {4093, 1};
        for (int i = 0; i < 2; i++) {
            uint64_t sz = short_max[i] == 1 ? 20000 : size; /* one byte per read: a small range */
            weights_set_fault(WEIGHTS_FAULT_SHORT, short_max[i]);
            memset(buf, 0xAA, sz);
            struct weights_stats ws;
            attnd_status st = weights_read(path, off, sz, buf, &ws, err, sizeof err);
            T_CHECK(st == ATTND_OK && !memcmp(buf, file + off, sz), "%s: short reads of <= %llu bytes: %s",
                    pread_path ? "pread" : "io_uring", (unsigned long long)short_max[i], st ? err : "wrong bytes");
        }
        weights_set_fault(WEIGHTS_FAULT_NONE, 0);
        /* a whole model load through the faulty reader */
        weights_set_fault(WEIGHTS_FAULT_EIO, 100);
        struct model *m = NULL;
        attnd_status st = model_load(path, &m, err, sizeof err);
        T_CHECK(st == ATTND_ERR_IO && !m, "model_load with a read error: %s", attnd_status_str(st));
        weights_set_fault(WEIGHTS_FAULT_SHORT, 65521);
        st = model_load(path, &m, err, sizeof err);
        T_CHECK(st == ATTND_OK, "model_load with short reads: %s", err);
        model_destroy(m);
        weights_set_fault(WEIGHTS_FAULT_NONE, 0);
    }
    unsetenv("ATTND_NO_IO_URING");
    free(buf);
    free(file);
}

/* ---- 4. the HTTP server ---------------------------------------------------------------------- */

static int http_post(int port, const char *path, const char *body)
{
    char req[1024];
    int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     body ? "POST" : "GET", path, body ? strlen(body) : 0, body ? body : "");
    return t_http_exchange(port, req, (size_t)n, 60, 0);
}

/* /health answers 200 and a generation 200. */
static int serves(int port, const char *gen)
{
    int code = http_post(port, "/health", NULL);
    if (code != 200) fprintf(stderr, "/health answered %d: %.300s\n", code, t_http_last);
    if (code == 200) code = http_post(port, "/v1/generate", gen);
    if (code != 200) fprintf(stderr, "generate answered %d: %.300s\n", code, t_http_last);
    return code == 200;
}

static void test_http(const char *path)
{
    char err[512];
    struct model *m;
    struct tokenizer *tok;
    struct sched *s;
    struct sched_opts so = {.n_threads = 1, .n_ctx = 64, .kv_blocks = 32};
    struct http_config hc;
    http_config_default(&hc);
    hc.port = 0;
    struct http_server *srv;
    if (model_load(path, &m, err, sizeof err) || tok_create(m->gguf, &tok, err, sizeof err) ||
        sched_create(m, tok, &so, &s) || http_create(&hc, &srv, err, sizeof err)) {
        T_CHECK(0, "setup: %s", err);
        return;
    }
    http_set_engine(srv, m, tok, s);
    const int port = http_port(srv);
    const char *gen = "{\"prompt\":[1,403,407],\"max_tokens\":4,\"temperature\":0,\"logprobs\":2}";
    const char *routes[][2] = {{"/v1/generate", gen}, {"/attention?layer=1&head=0", NULL}};
    T_CHECK(serves(port, gen), "clean request");
    for (int k = 0; k < 2; k++) {
        long n, n5xx = 0;
        for (n = 1;; n++) {
            arm(n);
            int code = http_post(port, routes[k][0], routes[k][1]);
            int hit = disarm();
            n5xx += code >= 500;
            /* N = 1 is the connection's own state: without it the only clean answer is to close */
            T_CHECK(code == 200 || (code >= 500 && hit) || (code == 0 && hit && n == 1), "N=%ld: %s answered %d", n,
                    routes[k][0], code);
            T_CHECK(serves(port, gen), "N=%ld: the server stopped serving after a failed allocation", n);
            if (!hit) break;
        }
        fprintf(stderr, "HTTP %s: %ld allocations, %ld answered 5xx\n", routes[k][0], n - 1, n5xx);
    }
    http_stop_accepting(srv);
    sched_drain(s);
    http_detach_engine(srv);
    sched_destroy(s, 1000);
    http_wait_idle(srv, 5000);
    http_destroy(srv);
    tok_destroy(tok);
    model_destroy(m);
}

int main(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_shared());
    if (access(path, R_OK)) {
        fprintf(stderr, "missing %s (set SHARED=...)\n", path);
        return 1;
    }
    if (!getenv("ATTND_LOG")) setenv("ATTND_LOG", "off", 1);
    test_load(path);
    test_requests(path);
    test_reads(path);
    test_http(path);
    return t_finish("test_faults");
}
