/* errors.h - the one writer of HTTP errors. Every error the API answers goes through here, so
 * every error has the same shape and is counted in the metrics:
 *     {"error":{"code":400,"type":"invalid_request","message":"..."}}
 * The type follows from the status code (api_error_type()). */
#ifndef ATTND_API_ERRORS_H
#define ATTND_API_ERRORS_H

#include <microhttpd.h>

#include "server/api/api.h"

/* The error type for an HTTP status: 400 invalid_request, 401 authentication_error, 404
 * not_found, 405 method_not_allowed, 413 payload_too_large, 503 service_unavailable, other
 * 4xx invalid_request, everything else internal_error. Never NULL. */
const char *api_error_type(int code);

/* Queues the JSON error response (status code, message from fmt) on c's connection and counts
 * it in the metrics (attnd_errors_total{type}). Returns what MHD_queue_response returned. */
enum MHD_Result api_error(struct api_conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The same with one extra header (hname: hval), e.g. Allow for 405, Retry-After for 503,
 * WWW-Authenticate for 401. */
enum MHD_Result api_error_hdr(struct api_conn *c, int code, const char *hname, const char *hval, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Appends the error object (no trailing newline) to b and counts it, for errors that cannot
 * change the status line any more (an event in a stream that has already started). */
void api_error_json(struct http_server *srv, struct api_buf *b, int code, const char *message);

#endif
