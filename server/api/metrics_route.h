/* metrics_route.h - GET /metrics: the counters (metrics.h) and, when a model is loaded, the
 * scheduler's gauges, in the Prometheus text format. */
#ifndef ATTND_API_METRICS_ROUTE_H
#define ATTND_API_METRICS_ROUTE_H

#include <microhttpd.h>

#include "server/api/api.h"

/* Handles GET /metrics on c (500 when out of memory). */
enum MHD_Result api_metrics(struct api_conn *c);

#endif
