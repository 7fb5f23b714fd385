/* metrics.h - the daemon's counters, histograms and gauges, rendered in the Prometheus text
 * exposition format (the GET /metrics route, metrics_route.c, serves the text).
 *
 * Counters are keyed by small integers: a route's index in the route table, an error type
 * (errors.h), a finish reason (enum metrics_finish). The modules that own those keys hand their
 * label names over once, at metrics_create(), so this module includes neither of them.
 *
 * Every recording function is thread-safe (one mutex) and cheap enough to call from the
 * scheduler's callback. A NULL struct metrics * is accepted and ignored everywhere; so is a key
 * out of range.
 */
#ifndef ATTND_API_METRICS_H
#define ATTND_API_METRICS_H

#include <stddef.h>

#include "attnd/status.h"
#include "server/api/buf.h"

struct metrics;
struct sched_stats;

/* How a generation ended (attnd_generations_total{finish_reason}). */
enum metrics_finish {
    METRICS_FINISH_STOP = 0,
    METRICS_FINISH_LENGTH,
    METRICS_FINISH_CANCELLED,
    METRICS_FINISH_ERROR,
    METRICS_FINISH_COUNT
};

/* The label values of the keyed counters. The strings must outlive the metrics (static ones);
 * the arrays are copied. */
struct metrics_labels {
    const char *const *routes;      /* attnd_requests_total{route}: route i is routes[i]; a request
                                       that matched no route is counted as route n_routes, "other" */
    size_t n_routes;
    const char *const *error_types; /* attnd_errors_total{type}: type i is error_types[i] */
    size_t n_error_types;
};

/* Returns ATTND_OK, ATTND_ERR_INVALID (labels NULL) or ATTND_ERR_NOMEM (*out stays NULL). */
attnd_status metrics_create(const struct metrics_labels *labels, struct metrics **out);
/* metrics_destroy(NULL) is a no-op. */
void metrics_destroy(struct metrics *m);

/* One finished HTTP request: route index 0..n_routes (n_routes: no route), status 100..599. */
void metrics_request(struct metrics *m, size_t route, int status);
/* One error answer of error type index type. */
void metrics_error(struct metrics *m, size_t type);
/* Tokens of one finished generation (attnd_prompt_tokens_total, attnd_generated_tokens_total). */
void metrics_tokens(struct metrics *m, int prompt_tokens, int generated_tokens);
/* One finished generation. */
void metrics_finish(struct metrics *m, enum metrics_finish reason);
/* The finish reason named by the scheduler's text ("stop", "length", "cancelled", "error");
 * METRICS_FINISH_COUNT (ignored by metrics_finish) for any other text or NULL. */
enum metrics_finish metrics_finish_from(const char *reason);
/* Seconds from submission to the first generated token. */
void metrics_ttft(struct metrics *m, double seconds);
/* Seconds between two consecutive generated tokens of one request. */
void metrics_tpot(struct metrics *m, double seconds);

/* Appends everything in the Prometheus text format to b: the counters, and the scheduler's
 * gauges from st with the backend/device info line when st is not NULL (zeros otherwise), then the
 * Gateway API Inference Extension's model-server gauges under attnd's names and under vLLM's
 * (vllm:num_requests_waiting, ...; docs/GATEWAY.md has the mapping).
 * Returns ATTND_OK or ATTND_ERR_NOMEM (b may hold part of the text; b->oom tells about b). */
attnd_status metrics_render(struct metrics *m, const struct sched_stats *st, const char *backend, const char *device,
                            struct api_buf *b);

#endif
