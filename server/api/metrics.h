/* metrics.h - the daemon's counters, histograms and gauges, rendered in the Prometheus text
 * exposition format at GET /metrics.
 *
 * Every metrics_* function that records is thread-safe (one mutex) and cheap enough to call
 * from the scheduler's callback. A NULL struct metrics * is accepted and ignored everywhere.
 */
#ifndef ATTND_API_METRICS_H
#define ATTND_API_METRICS_H

#include <microhttpd.h>
#include <stddef.h>

#include "attnd/status.h"
#include "server/api/api.h"

struct metrics;

/* Returns ATTND_OK or ATTND_ERR_NOMEM (*out stays NULL). */
attnd_status metrics_create(struct metrics **out);
/* metrics_destroy(NULL) is a no-op. */
void metrics_destroy(struct metrics *m);

/* One finished HTTP request (attnd_requests_total{route,status}). status 100..599. */
void metrics_request(struct metrics *m, enum api_route route, int status);
/* One error answer (attnd_errors_total{type}); type is one of api_error_type()'s names. */
void metrics_error(struct metrics *m, const char *type);
/* Tokens of one finished generation (attnd_prompt_tokens_total, attnd_generated_tokens_total). */
void metrics_tokens(struct metrics *m, int prompt_tokens, int generated_tokens);
/* How a generation ended (attnd_generations_total{finish_reason}): "stop", "length",
 * "cancelled" or "error". */
void metrics_finish(struct metrics *m, const char *reason);
/* Seconds from submission to the first generated token. */
void metrics_ttft(struct metrics *m, double seconds);
/* Seconds between two consecutive generated tokens of one request. */
void metrics_tpot(struct metrics *m, double seconds);

/* GET /metrics: renders everything (with the scheduler's gauges when an engine is attached)
 * and queues the response on c. */
enum MHD_Result metrics_route(struct api_conn *c);

#endif
