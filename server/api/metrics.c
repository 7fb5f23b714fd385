/* metrics.c - see metrics.h. Counters live in one struct under one mutex; rendering copies
 * them out under the lock and formats without it. */
#include "server/api/metrics.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/sched.h"
#include "server/api/errors.h"

#define N_STATUS 600 /* HTTP status codes 0..599 */

/* Upper bounds (seconds) of the latency histograms' buckets; +Inf is implicit. */
static const double g_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define N_BUCKETS (sizeof g_buckets / sizeof g_buckets[0])

static const char *const g_error_types[] = {"invalid_request",    "authentication_error", "not_found",
                                            "method_not_allowed", "payload_too_large",    "service_unavailable",
                                            "internal_error"};
#define N_ERROR_TYPES (sizeof g_error_types / sizeof g_error_types[0])

static const char *const g_finish[] = {"stop", "length", "cancelled", "error"};
#define N_FINISH (sizeof g_finish / sizeof g_finish[0])

struct histogram {
    uint64_t bucket[N_BUCKETS + 1]; /* non-cumulative; the last one is +Inf */
    uint64_t count;
    double sum;
};

struct counters {
    uint64_t requests[API_ROUTE_COUNT][N_STATUS];
    uint64_t errors[N_ERROR_TYPES];
    uint64_t finish[N_FINISH];
    uint64_t prompt_tokens, generated_tokens;
    struct histogram ttft, tpot;
};

struct metrics {
    pthread_mutex_t mu;
    struct counters c;
};

attnd_status metrics_create(struct metrics **out)
{
    *out = NULL;
    struct metrics *m = calloc(1, sizeof *m);
    if (!m) return ATTND_ERR_NOMEM;
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return ATTND_OK;
}

void metrics_destroy(struct metrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_request(struct metrics *m, enum api_route route, int status)
{
    if (!m || (unsigned)route >= API_ROUTE_COUNT || status < 0 || status >= N_STATUS) return;
    pthread_mutex_lock(&m->mu);
    m->c.requests[route][status]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_error(struct metrics *m, const char *type)
{
    if (!m || !type) return;
    for (size_t i = 0; i < N_ERROR_TYPES; i++)
        if (!strcmp(type, g_error_types[i])) {
            pthread_mutex_lock(&m->mu);
            m->c.errors[i]++;
            pthread_mutex_unlock(&m->mu);
            return;
        }
}

void metrics_tokens(struct metrics *m, int prompt_tokens, int generated_tokens)
{
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->c.prompt_tokens += prompt_tokens > 0 ? (uint64_t)prompt_tokens : 0;
    m->c.generated_tokens += generated_tokens > 0 ? (uint64_t)generated_tokens : 0;
    pthread_mutex_unlock(&m->mu);
}

void metrics_finish(struct metrics *m, const char *reason)
{
    if (!m || !reason) return;
    for (size_t i = 0; i < N_FINISH; i++)
        if (!strcmp(reason, g_finish[i])) {
            pthread_mutex_lock(&m->mu);
            m->c.finish[i]++;
            pthread_mutex_unlock(&m->mu);
            return;
        }
}

static void observe(struct metrics *m, struct histogram *h, double v)
{
    if (!(v >= 0)) v = 0;
    size_t i = 0;
    while (i < N_BUCKETS && v > g_buckets[i]) i++;
    pthread_mutex_lock(&m->mu);
    h->bucket[i]++;
    h->count++;
    h->sum += v;
    pthread_mutex_unlock(&m->mu);
}

void metrics_ttft(struct metrics *m, double seconds)
{
    if (m) observe(m, &m->c.ttft, seconds);
}

void metrics_tpot(struct metrics *m, double seconds)
{
    if (m) observe(m, &m->c.tpot, seconds);
}

/* ---- rendering ------------------------------------------------------------------------------- */

static void header(struct api_buf *b, const char *name, const char *type, const char *help)
{
    api_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_histogram(struct api_buf *b, const char *name, const char *help, const struct histogram *h)
{
    header(b, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < N_BUCKETS; i++) {
        cum += h->bucket[i];
        api_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, g_buckets[i], (unsigned long long)cum);
    }
    cum += h->bucket[N_BUCKETS];
    api_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    api_buf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

static void render(struct api_buf *b, const struct counters *c, const struct sched_stats *st, const char *backend,
                   const char *device)
{
    if (backend) {
        header(b, "attnd_backend_info", "gauge", "The compute backend and device in use (value 1).");
        api_buf_printf(b, "attnd_backend_info{backend=\"%s\",device=\"", backend);
        for (const char *p = device; *p; p++) /* label value escaping */
            api_buf_printf(b, "%s%c", (*p == '"' || *p == '\\') ? "\\" : "", *p == '\n' ? ' ' : *p);
        api_buf_printf(b, "\"} 1\n");
    }
    header(b, "attnd_requests_total", "counter", "HTTP requests answered, by route and status code.");
    for (int r = 0; r < API_ROUTE_COUNT; r++)
        for (int s = 0; s < N_STATUS; s++)
            if (c->requests[r][s])
                api_buf_printf(b, "attnd_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                               api_route_name((enum api_route)r), s, (unsigned long long)c->requests[r][s]);
    header(b, "attnd_errors_total", "counter", "Error answers, by error type.");
    for (size_t i = 0; i < N_ERROR_TYPES; i++)
        api_buf_printf(b, "attnd_errors_total{type=\"%s\"} %llu\n", g_error_types[i], (unsigned long long)c->errors[i]);
    header(b, "attnd_generations_total", "counter", "Finished generation requests, by finish reason.");
    for (size_t i = 0; i < N_FINISH; i++)
        api_buf_printf(b, "attnd_generations_total{finish_reason=\"%s\"} %llu\n", g_finish[i],
                       (unsigned long long)c->finish[i]);
    header(b, "attnd_prompt_tokens_total", "counter", "Prompt tokens of finished generations.");
    api_buf_printf(b, "attnd_prompt_tokens_total %llu\n", (unsigned long long)c->prompt_tokens);
    header(b, "attnd_generated_tokens_total", "counter", "Generated tokens of finished generations.");
    api_buf_printf(b, "attnd_generated_tokens_total %llu\n", (unsigned long long)c->generated_tokens);
    render_histogram(b, "attnd_time_to_first_token_seconds", "Seconds from submission to the first generated token.",
                     &c->ttft);
    render_histogram(b, "attnd_time_per_output_token_seconds", "Seconds between consecutive generated tokens.",
                     &c->tpot);
    header(b, "attnd_queue_depth", "gauge", "Requests waiting for the scheduler.");
    api_buf_printf(b, "attnd_queue_depth %d\n", st ? st->queued : 0);
    header(b, "attnd_requests_running", "gauge", "Requests being generated.");
    api_buf_printf(b, "attnd_requests_running %d\n", st ? st->running : 0);
    header(b, "attnd_kv_cache_tokens_used", "gauge", "Tokens held in the KV cache.");
    api_buf_printf(b, "attnd_kv_cache_tokens_used %llu\n", (unsigned long long)(st ? st->kv_tokens_used : 0));
    header(b, "attnd_kv_cache_tokens_capacity", "gauge", "Tokens the KV cache can hold.");
    api_buf_printf(b, "attnd_kv_cache_tokens_capacity %llu\n", (unsigned long long)(st ? st->kv_tokens_capacity : 0));
    header(b, "attnd_kv_cache_bytes_capacity", "gauge", "Bytes of KV cache memory.");
    api_buf_printf(b, "attnd_kv_cache_bytes_capacity %llu\n", (unsigned long long)(st ? st->kv_bytes_capacity : 0));
    header(b, "attnd_kv_cache_blocks", "gauge", "KV cache blocks (16 tokens each) by state.");
    api_buf_printf(b, "attnd_kv_cache_blocks{state=\"used\"} %llu\n", (unsigned long long)(st ? st->kv_blocks_used : 0));
    api_buf_printf(b, "attnd_kv_cache_blocks{state=\"free\"} %llu\n", (unsigned long long)(st ? st->kv_blocks_free : 0));
    api_buf_printf(b, "attnd_kv_cache_blocks{state=\"cached\"} %llu\n", (unsigned long long)(st ? st->kv_blocks_cached : 0));
    header(b, "attnd_kv_cache_blocks_total", "gauge", "KV cache blocks in the pool.");
    api_buf_printf(b, "attnd_kv_cache_blocks_total %llu\n", (unsigned long long)(st ? st->kv_blocks_total : 0));
    header(b, "attnd_kv_cache_waste_percent", "gauge", "Memory of used KV blocks that holds no token, percent.");
    api_buf_printf(b, "attnd_kv_cache_waste_percent %.3f\n", st ? st->kv_waste_pct : 0.0);
    header(b, "attnd_prefix_cache_lookup_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.");
    api_buf_printf(b, "attnd_prefix_cache_lookup_tokens_total %llu\n", (unsigned long long)(st ? st->prefix_lookup_tokens : 0));
    header(b, "attnd_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.");
    api_buf_printf(b, "attnd_prefix_cache_hit_tokens_total %llu\n", (unsigned long long)(st ? st->prefix_hit_tokens : 0));
    header(b, "attnd_preemptions_total", "counter", "Running requests pre-empted because the KV pool ran out.");
    api_buf_printf(b, "attnd_preemptions_total %llu\n", (unsigned long long)(st ? st->preemptions : 0));
    header(b, "attnd_scheduler_steps_total", "counter", "Scheduler steps (one forward pass each).");
    api_buf_printf(b, "attnd_scheduler_steps_total %llu\n", (unsigned long long)(st ? st->steps : 0));
    header(b, "attnd_batch_tokens_total", "counter", "Tokens evaluated in all steps (prompt chunks + decode tokens).");
    api_buf_printf(b, "attnd_batch_tokens_total %llu\n", (unsigned long long)(st ? st->batch_tokens_total : 0));
    header(b, "attnd_last_batch_tokens", "gauge", "Tokens of the last step.");
    api_buf_printf(b, "attnd_last_batch_tokens %llu\n", (unsigned long long)(st ? st->last_batch_tokens : 0));
    header(b, "attnd_last_batch_sequences", "gauge", "Requests in the last step.");
    api_buf_printf(b, "attnd_last_batch_sequences %llu\n", (unsigned long long)(st ? st->last_batch_seqs : 0));
    header(b, "attnd_model_loaded", "gauge", "1 once the model is loaded and requests are served.");
    api_buf_printf(b, "attnd_model_loaded %d\n", st ? 1 : 0);
}

enum MHD_Result metrics_route(struct api_conn *c)
{
    struct metrics *m = c->srv->metrics;
    struct counters *snap = malloc(sizeof *snap); /* ~30 KiB: keep it off the connection thread's stack */
    if (!snap) return api_error(c, 500, "out of memory");
    pthread_mutex_lock(&m->mu);
    *snap = m->c;
    pthread_mutex_unlock(&m->mu);
    struct sched_stats st;
    bool have = false;
    struct api_engine e;
    char backend[16] = "", device[256] = "";
    if (api_engine_acquire(c->srv, &e)) {
        sched_get_stats(e.sched, &st);
        snprintf(backend, sizeof backend, "%s", sched_backend(e.sched));
        snprintf(device, sizeof device, "%s", sched_device(e.sched));
        api_engine_release(c->srv);
        have = true;
    }
    struct api_buf b = {0};
    render(&b, snap, have ? &st : NULL, have ? backend : NULL, device);
    free(snap);
    size_t len = b.len;
    char *body = api_buf_take(&b);
    if (!body) return api_error(c, 500, "out of memory");
    return api_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", body, len, NULL);
}
