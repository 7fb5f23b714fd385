/* http_config.h - the HTTP front end's settings, in a header of their own so the API layer's
 * shared state (server/api/api.h) can hold them without including http.h, the public face
 * that http.c implements on top of that layer. */
#ifndef ATTND_HTTP_CONFIG_H
#define ATTND_HTTP_CONFIG_H

#include <stddef.h>

struct http_config {
    const char *host;         /* address or host name to bind, e.g. "127.0.0.1", "0.0.0.0", "::" */
    int port;                 /* TCP port; 0 = let the kernel pick a free one (see http_port()) */
    size_t max_body;          /* largest request body accepted, bytes (bigger: 413) */
    int max_tokens_cap;       /* largest max_tokens a request may ask for */
    int keep_requests;        /* finished requests /attention can address (>= 1) */
    int attention_max_tokens; /* longest token sequence /attention maps (longer: 413) */
    const char *api_key;      /* if not NULL/empty: every route but the open ones (the route table's
                                 open flag: /health and the playground's files) needs "Bearer KEY" */
    const char *api_keys_file; /* if not NULL: one "name:key" per line, a tenant each (server/api/tenant.h);
                                  not with api_key. Neither: single-user */
    size_t response_budget_mib; /* MiB of /attention and /logit_lens answers in flight (being computed or
                                   not yet sent), all clients together; past it: 503 + Retry-After */
    size_t stream_pause_kib;  /* a stream with more than this many KiB of output its client has not taken
                                 is paused (no compute, its KV kept), resumed below half (0: 64) */
    long long max_request_work; /* largest max_tokens x choices x (1 + logprobs alternatives) one
                                   completion request may ask for (bigger: 400; 0: 131072) */
    const char *cors;         /* if not NULL: browser apps of these origins may call the API (CORS): "*", or
                                 origins separated by commas ("https://a.example,http://localhost:3000") */
    int max_connections;      /* concurrent connections (each holds one thread) */
    int max_per_client;       /* concurrent connections from one client address (<= max_connections) */
    int timeout_ms;           /* a connection with no bytes in either direction for this long is closed
                                 (rounded up to whole seconds; 0 = never). A request being answered
                                 is not idle: the answer's bytes (SSE keep-alives too) count */
    int chat_template;        /* enum chat_family for /v1/chat/completions; -1: recognised from the
                                 model's tokenizer.chat_template (ChatML if none) */
    const char *chat_template_file; /* if not NULL: the Jinja chat template to use (over chat_template) */
};

#endif
