/* fuzz_http.c - the request parsers behind the real HTTP server: /v1/generate bodies, the query
 * strings of /attention and /logit_lens, and whole raw requests, sent over loopback to an
 * in-process daemon (http_create + stories260K + the scheduler, as `attnd serve` wires them).
 * Input: byte 0 picks the mode (0: POST /v1/generate with the rest as the body; 1: GET
 * /attention?REST; 2: GET /logit_lens?REST; 3: the rest is the whole request). Contracts: every
 * well-framed request (mode 0) gets a status line; no answer is a 5xx other than 503 (the model
 * has finite logits, so a 500 is a bug) and, where raw bytes reach the request line, libmicrohttpd's own 501/505; the
 * server keeps answering /health.
 * Seeds: tests/fuzz/corpus/http (request bodies and queries from the HTTP tests). */
#include <stdint.h>
#include <string.h>

#include "attnd/http.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "fuzz_common.h"
#include "tests/unit/http_client.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_port;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_quiet();
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", fz_shared());
    struct model *m;
    struct tokenizer *tok;
    struct sched *s;
    struct sched_opts so = {.n_threads = 1, .n_ctx = 128, .kv_blocks = 64, .max_queue = 8};
    if (model_load(path, &m, err, sizeof err) || tok_create(m->gguf, &tok, err, sizeof err) ||
        sched_create(m, tok, &so, &s)) {
        fprintf(stderr, "fuzz_http: %s: %s (set SHARED=...)\n", path, err);
        exit(1);
    }
    struct http_config hc;
    http_config_default(&hc);
    hc.port = 0;
    hc.max_body = 64 << 10;
    hc.max_tokens_cap = 8;
    hc.attention_max_tokens = 128;
    hc.max_connections = 16;
    hc.timeout_ms = 5000;
    struct http_server *srv;
    if (http_create(&hc, &srv, err, sizeof err)) {
        fprintf(stderr, "fuzz_http: %s\n", err);
        exit(1);
    }
    http_set_engine(srv, m, tok, s);
    g_port = http_port(srv);
    return 0; /* the server lives as long as the process */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (48 << 10)) return 0;
    int mode = data[0] & 3;
    const char *rest = (const char *)data + 1;
    size_t n = size - 1;
    char *req = malloc(n + 256);
    size_t len = 0;
    if (mode == 0)
        len = (size_t)snprintf(req, 256, "POST /v1/generate HTTP/1.1\r\nHost: f\r\nConnection: close\r\n"
                                         "Content-Length: %zu\r\n\r\n", n);
    else if (mode == 3)
        len = 0;
    else
        len = (size_t)snprintf(req, 256, "GET %s?", mode == 1 ? "/attention" : "/logit_lens");
    memcpy(req + len, rest, n);
    len += n;
    if (mode == 1 || mode == 2) {
        const char *tail = " HTTP/1.1\r\nHost: f\r\nConnection: close\r\n\r\n";
        memcpy(req + len, tail, strlen(tail));
        len += strlen(tail);
    }
    int code = t_http_exchange(g_port, req, len, 90, mode == 3); /* generous: an instrumented build on a loaded machine */
    FZ_REQUIRE(code >= 0, "connect to the in-process server");
    free(req);
    if (mode == 0) FZ_REQUIRE(code >= 200, "a well-framed request gets an answer");
    /* raw bytes in the request line (modes 1-3): libmicrohttpd itself answers 501/505 */
    FZ_REQUIRE(code < 500 || code == 503 || (mode != 0 && (code == 501 || code == 505)), "no 5xx but 503");
    static const char health[] = "GET /health HTTP/1.1\r\nHost: f\r\nConnection: close\r\n\r\n";
    FZ_REQUIRE(t_http_exchange(g_port, health, sizeof health - 1, 90, 0) == 200, "/health still answers");
    return 0;
}
