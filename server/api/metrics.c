/* metrics.c - see metrics.h. Counters live in one struct under one mutex; rendering copies
 * them out under the lock and formats without it. */
#include "server/api/metrics.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/sched.h"

#define N_STATUS 600 /* HTTP status codes 0..599 */

/* Upper bounds (seconds) of the latency histograms' buckets; +Inf is implicit. */
static const double g_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define N_BUCKETS (sizeof g_buckets / sizeof g_buckets[0])

static const char *const g_finish[METRICS_FINISH_COUNT] = {"stop", "length", "cancelled", "error"};

struct histogram {
    uint64_t bucket[N_BUCKETS + 1]; /* non-cumulative; the last one is +Inf */
    uint64_t count;
    double sum;
};

/* Everything that is counted; requests and errors are sized by the labels at create time. */
struct counters {
    uint64_t finish[METRICS_FINISH_COUNT];
    uint64_t prompt_tokens, generated_tokens;
    struct histogram ttft, tpot;
};

struct metrics {
    pthread_mutex_t mu;
    const char **routes;   /* (n_routes) route labels */
    const char **errtypes; /* (n_errtypes) error type labels */
    size_t n_routes, n_errtypes;
    uint64_t *requests;    /* (n_routes + 1, N_STATUS): the last row is "other" */
    uint64_t *errors;      /* (n_errtypes) */
    struct counters c;
    double started; /* Unix time of metrics_create, seconds */
};

attnd_status metrics_create(const struct metrics_labels *labels, struct metrics **out)
{
    *out = NULL;
    if (!labels || (labels->n_routes && !labels->routes) || (labels->n_error_types && !labels->error_types))
        return ATTND_ERR_INVALID;
    struct metrics *m = calloc(1, sizeof *m);
    if (!m) return ATTND_ERR_NOMEM;
    pthread_mutex_init(&m->mu, NULL);
    m->started = (double)time(NULL);
    m->n_routes = labels->n_routes;
    m->n_errtypes = labels->n_error_types;
    m->routes = calloc(m->n_routes + 1, sizeof *m->routes);
    m->errtypes = calloc(m->n_errtypes + 1, sizeof *m->errtypes);
    m->requests = calloc((m->n_routes + 1) * N_STATUS, sizeof *m->requests);
    m->errors = calloc(m->n_errtypes + 1, sizeof *m->errors);
    if (!m->routes || !m->errtypes || !m->requests || !m->errors) {
        metrics_destroy(m);
        return ATTND_ERR_NOMEM;
    }
    for (size_t i = 0; i < m->n_routes; i++) m->routes[i] = labels->routes[i];
    for (size_t i = 0; i < m->n_errtypes; i++) m->errtypes[i] = labels->error_types[i];
    *out = m;
    return ATTND_OK;
}

void metrics_destroy(struct metrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->routes);
    free(m->errtypes);
    free(m->requests);
    free(m->errors);
    free(m);
}

void metrics_request(struct metrics *m, size_t route, int status)
{
    if (!m || route > m->n_routes || status < 0 || status >= N_STATUS) return;
    pthread_mutex_lock(&m->mu);
    m->requests[route * N_STATUS + (size_t)status]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_error(struct metrics *m, size_t type)
{
    if (!m || type >= m->n_errtypes) return;
    pthread_mutex_lock(&m->mu);
    m->errors[type]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(struct metrics *m, int prompt_tokens, int generated_tokens)
{
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->c.prompt_tokens += prompt_tokens > 0 ? (uint64_t)prompt_tokens : 0;
    m->c.generated_tokens += generated_tokens > 0 ? (uint64_t)generated_tokens : 0;
    pthread_mutex_unlock(&m->mu);
}

enum metrics_finish metrics_finish_from(const char *reason)
{
    for (int i = 0; reason && i < METRICS_FINISH_COUNT; i++)
        if (!strcmp(reason, g_finish[i])) return (enum metrics_finish)i;
    return METRICS_FINISH_COUNT;
}

void metrics_finish(struct metrics *m, enum metrics_finish reason)
{
    if (!m || (unsigned)reason >= METRICS_FINISH_COUNT) return;
    pthread_mutex_lock(&m->mu);
    m->c.finish[reason]++;
    pthread_mutex_unlock(&m->mu);
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

/* A copy of the counters, taken under the lock. */
struct snapshot {
    uint64_t *requests, *errors;
    struct counters c;
};

static void header(struct api_buf *b, const char *name, const char *type, const char *help)
{
    api_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One metric with one unlabelled value. */
static void single(struct api_buf *b, const char *name, const char *type, const char *help, unsigned long long v)
{
    header(b, name, type, help);
    api_buf_printf(b, "%s %llu\n", name, v);
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

static void render_backend(struct api_buf *b, const char *backend, const char *device)
{
    header(b, "attnd_backend_info", "gauge", "The compute backend and device in use (value 1).");
    api_buf_printf(b, "attnd_backend_info{backend=\"%s\",device=\"", backend);
    for (const char *p = device; *p; p++) /* label value escaping */
        api_buf_printf(b, "%s%c", (*p == '"' || *p == '\\') ? "\\" : "", *p == '\n' ? ' ' : *p);
    api_buf_printf(b, "\"} 1\n");
}

static void render_counters(struct api_buf *b, const struct metrics *m, const struct snapshot *s)
{
    header(b, "attnd_requests_total", "counter", "HTTP requests answered, by route and status code.");
    for (size_t r = 0; r <= m->n_routes; r++)
        for (int st = 0; st < N_STATUS; st++)
            if (s->requests[r * N_STATUS + (size_t)st])
                api_buf_printf(b, "attnd_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                               r < m->n_routes ? m->routes[r] : "other", st,
                               (unsigned long long)s->requests[r * N_STATUS + (size_t)st]);
    header(b, "attnd_errors_total", "counter", "Error answers, by error type.");
    for (size_t i = 0; i < m->n_errtypes; i++)
        api_buf_printf(b, "attnd_errors_total{type=\"%s\"} %llu\n", m->errtypes[i], (unsigned long long)s->errors[i]);
    header(b, "attnd_generations_total", "counter", "Finished generation requests, by finish reason.");
    for (size_t i = 0; i < METRICS_FINISH_COUNT; i++)
        api_buf_printf(b, "attnd_generations_total{finish_reason=\"%s\"} %llu\n", g_finish[i],
                       (unsigned long long)s->c.finish[i]);
    single(b, "attnd_prompt_tokens_total", "counter", "Prompt tokens of finished generations.", s->c.prompt_tokens);
    single(b, "attnd_generated_tokens_total", "counter", "Generated tokens of finished generations.",
           s->c.generated_tokens);
    render_histogram(b, "attnd_time_to_first_token_seconds", "Seconds from submission to the first generated token.",
                     &s->c.ttft);
    render_histogram(b, "attnd_time_per_output_token_seconds", "Seconds between consecutive generated tokens.",
                     &s->c.tpot);
}

static void render_kv(struct api_buf *b, const struct sched_stats *st)
{
    single(b, "attnd_kv_cache_tokens_used", "gauge", "Tokens held in the KV cache.", st->kv_tokens_used);
    single(b, "attnd_kv_cache_tokens_capacity", "gauge", "Tokens the KV cache can hold.", st->kv_tokens_capacity);
    single(b, "attnd_kv_cache_bytes_capacity", "gauge", "Bytes of KV cache memory.", st->kv_bytes_capacity);
    header(b, "attnd_kv_cache_blocks", "gauge", "KV cache blocks (16 tokens each) by state.");
    api_buf_printf(b, "attnd_kv_cache_blocks{state=\"used\"} %llu\n", (unsigned long long)st->kv_blocks_used);
    api_buf_printf(b, "attnd_kv_cache_blocks{state=\"free\"} %llu\n", (unsigned long long)st->kv_blocks_free);
    api_buf_printf(b, "attnd_kv_cache_blocks{state=\"cached\"} %llu\n", (unsigned long long)st->kv_blocks_cached);
    single(b, "attnd_kv_cache_blocks_total", "gauge", "KV cache blocks in the pool.", st->kv_blocks_total);
    header(b, "attnd_kv_cache_waste_percent", "gauge", "Memory of used KV blocks that holds no token, percent.");
    api_buf_printf(b, "attnd_kv_cache_waste_percent %.3f\n", st->kv_waste_pct);
    single(b, "attnd_prefix_cache_lookup_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
           st->prefix_lookup_tokens);
    single(b, "attnd_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.",
           st->prefix_hit_tokens);
}

/* The model-server protocol of the Gateway API Inference Extension (docs/GATEWAY.md): the endpoint
 * picker reads a queue length, a running count, the KV cache usage as a fraction 0..1 and the
 * cache's shape from labels of an info gauge. attnd's own names, then the same values under vLLM's
 * names, the endpoint picker's defaults, so that one configured for vLLM works unchanged. */
static void render_gateway(struct api_buf *b, const struct sched_stats *st, bool loaded, double started)
{
    /* blocks held by running requests; cached blocks nobody holds are evictable, so free (as in vLLM) */
    double usage = st->kv_blocks_total ? (double)st->kv_blocks_used / (double)st->kv_blocks_total : 0.0;
    unsigned long long block = st->kv_blocks_total ? st->kv_tokens_capacity / st->kv_blocks_total : 0;
    header(b, "attnd_kv_cache_usage_ratio", "gauge",
           "Fraction of KV cache blocks held by running requests, 0..1 (the protocol's KVCacheUtilization).");
    api_buf_printf(b, "attnd_kv_cache_usage_ratio %.6g\n", usage);
    if (loaded) {
        header(b, "attnd_cache_config_info", "gauge", "KV cache shape in labels: tokens per block, blocks (value 1).");
        api_buf_printf(b, "attnd_cache_config_info{block_size=\"%llu\",num_gpu_blocks=\"%llu\"} 1\n", block,
                       (unsigned long long)st->kv_blocks_total);
    }
    static const struct {
        const char *name, *help;
    } alias[] = {
        {"vllm:num_requests_waiting", "Alias of attnd_queue_depth (vLLM's name)."},
        {"vllm:num_requests_running", "Alias of attnd_requests_running (vLLM's name)."},
        {"vllm:kv_cache_usage_perc", "Alias of attnd_kv_cache_usage_ratio, a fraction 0..1 (vLLM's name)."},
        {"vllm:gpu_cache_usage_perc", "Alias of attnd_kv_cache_usage_ratio (vLLM's name before 0.10)."},
    };
    const double v[] = {st->queued, st->running, usage, usage};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++) {
        header(b, alias[i].name, "gauge", alias[i].help);
        api_buf_printf(b, "%s %.6g\n", alias[i].name, v[i]);
    }
    if (!loaded) return;
    header(b, "vllm:cache_config_info", "gauge", "Alias of attnd_cache_config_info (vLLM's name).");
    api_buf_printf(b, "vllm:cache_config_info{block_size=\"%llu\",num_gpu_blocks=\"%llu\"} 1\n", block,
                   (unsigned long long)st->kv_blocks_total);
    /* no LoRA adapters: empty lists, so the picker's LoRA extractor finds its metric; the value is
     * the protocol's "last updated" timestamp, here when the server started */
    header(b, "vllm:lora_requests_info", "gauge", "LoRA adapters (attnd serves none); value: a Unix timestamp.");
    api_buf_printf(b, "vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} %.0f\n",
                   started);
}

/* The scheduler's gauges; st all zero when no engine is attached. */
static void render_sched(struct api_buf *b, const struct sched_stats *st, bool loaded)
{
    single(b, "attnd_queue_depth", "gauge", "Requests waiting for the scheduler.", (unsigned long long)st->queued);
    single(b, "attnd_requests_running", "gauge", "Requests being generated.", (unsigned long long)st->running);
    single(b, "attnd_requests_paused", "gauge", "Streams paused because their client stopped reading.", (unsigned long long)st->paused);
    single(b, "attnd_stalled_cancels_total", "counter", "Paused streams cancelled after --stall-timeout-ms.", st->stall_cancels);
    single(b, "attnd_fair_preemptions_total", "counter", "Requests pre-empted to give another tenant its turn.",
           st->fair_preemptions);
    render_kv(b, st);
    single(b, "attnd_preemptions_total", "counter", "Running requests pre-empted because the KV pool ran out.",
           st->preemptions);
    single(b, "attnd_kv_events_dropped_total", "counter", "KV-cache event records dropped on a full queue (--kv-events).",
           st->kv_events_dropped);
    single(b, "attnd_scheduler_steps_total", "counter", "Scheduler steps (one forward pass each).", st->steps);
    single(b, "attnd_batch_tokens_total", "counter", "Tokens evaluated in all steps (prompt chunks + decode tokens).",
           st->batch_tokens_total);
    single(b, "attnd_last_batch_tokens", "gauge", "Tokens of the last step.", st->last_batch_tokens);
    single(b, "attnd_last_batch_sequences", "gauge", "Requests in the last step.", st->last_batch_seqs);
    single(b, "attnd_model_loaded", "gauge", "1 once the model is loaded and requests are served.", loaded ? 1 : 0);
}

attnd_status metrics_render(struct metrics *m, const struct sched_stats *st, const char *backend, const char *device,
                            struct api_buf *b)
{
    if (!m) return ATTND_ERR_INVALID;
    /* the request counters are ~30 KiB per route: keep the copy off the connection thread's stack */
    struct snapshot s = {.requests = malloc((m->n_routes + 1) * N_STATUS * sizeof *s.requests),
                         .errors = malloc((m->n_errtypes + 1) * sizeof *s.errors)};
    if (!s.requests || !s.errors) {
        free(s.requests);
        free(s.errors);
        return ATTND_ERR_NOMEM;
    }
    pthread_mutex_lock(&m->mu);
    memcpy(s.requests, m->requests, (m->n_routes + 1) * N_STATUS * sizeof *s.requests);
    memcpy(s.errors, m->errors, m->n_errtypes * sizeof *s.errors);
    s.c = m->c;
    pthread_mutex_unlock(&m->mu);
    static const struct sched_stats none;
    if (st) render_backend(b, backend ? backend : "", device ? device : "");
    render_counters(b, m, &s);
    render_sched(b, st ? st : &none, st != NULL);
    render_gateway(b, st ? st : &none, st != NULL, m->started);
    free(s.requests);
    free(s.errors);
    return b->oom ? ATTND_ERR_NOMEM : ATTND_OK;
}
