/* errors.h - the one writer of HTTP errors, and the one place that decides which HTTP status an
 * engine status becomes. Every error the API answers goes through here, so every error has the
 * same shape and is counted in the metrics:
 *     {"error":{"code":400,"type":"invalid_request","message":"..."}}
 * The type follows from the status code (api_error_type()). */
#ifndef ATTND_API_ERRORS_H
#define ATTND_API_ERRORS_H

#include <microhttpd.h>
#include <stdbool.h>

#include "attnd/status.h"
#include "server/api/api.h"
#include "server/api/buf.h"

/* The error types, the key of attnd_errors_total{type}. */
enum api_error_kind {
    API_ERROR_INVALID_REQUEST = 0,
    API_ERROR_AUTHENTICATION,
    API_ERROR_NOT_FOUND,
    API_ERROR_METHOD_NOT_ALLOWED,
    API_ERROR_PAYLOAD_TOO_LARGE,
    API_ERROR_SERVICE_UNAVAILABLE,
    API_ERROR_INTERNAL,
    API_ERROR_KIND_COUNT
};

/* The types' names, indexed by enum api_error_kind (the metrics' label values). */
extern const char *const api_error_kind_names[API_ERROR_KIND_COUNT];

/* The error type for an HTTP status: 400 invalid_request, 401 authentication_error, 404
 * not_found, 405 method_not_allowed, 413 payload_too_large, 503 service_unavailable, other
 * 4xx invalid_request, everything else internal_error. Never NULL. */
const char *api_error_type(int code);

/* Counts an error answer of HTTP status code in attnd_errors_total{type}, for a route that
 * writes its errors in another shape (the OpenAI-compatible routes). */
void api_error_count(struct http_server *srv, int code);

/* The HTTP status for a failed engine call: ATTND_ERR_INVALID 400; ATTND_ERR_RANGE 400, or 413
 * when range_is_size (the range is a size cap on what the request sent, e.g. its token count);
 * ATTND_ERR_NOMEM and ATTND_ERR_UNSUPPORTED 503 (the server cannot do it now); anything else
 * 500. */
int api_status_code(attnd_status st, bool range_is_size);

/* Queues the JSON error response (status code, message from fmt) on c's connection and counts
 * it in the metrics (attnd_errors_total{type}). Returns what MHD_queue_response returned. */
enum MHD_Result api_error(struct api_conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The same with one extra header (hname: hval), e.g. Allow for 405, Retry-After for 503,
 * WWW-Authenticate for 401. */
enum MHD_Result api_error_hdr(struct api_conn *c, int code, const char *hname, const char *hval, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The same as api_error(), adding "Retry-After: 1" when code is 503 (busy, out of memory, no
 * model: the client may try again). For a code computed at run time (api_status_code()). */
enum MHD_Result api_error_retry(struct api_conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Appends the error object (no trailing newline) to b and counts it, for errors that cannot
 * change the status line any more (an event in a stream that has already started). */
void api_error_json(struct http_server *srv, struct api_buf *b, int code, const char *message);

#endif
