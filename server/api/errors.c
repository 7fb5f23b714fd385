/* errors.c - see errors.h. */
#include "server/api/errors.h"

#include "attnd/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/metrics.h"

const char *const api_error_kind_names[API_ERROR_KIND_COUNT] = {
    "invalid_request",   "authentication_error", "not_found",     "method_not_allowed",
    "payload_too_large", "service_unavailable",  "internal_error",
};

static enum api_error_kind error_kind(int code)
{
    switch (code) {
    case 400: return API_ERROR_INVALID_REQUEST;
    case 401: return API_ERROR_AUTHENTICATION;
    case 404: return API_ERROR_NOT_FOUND;
    case 405: return API_ERROR_METHOD_NOT_ALLOWED;
    case 413: return API_ERROR_PAYLOAD_TOO_LARGE;
    case 501: return API_ERROR_INVALID_REQUEST; /* a transfer coding we do not implement: the client's choice */
    case 429: /* a tenant's share of the queue is full: retry, as for a full queue */
    case 503: return API_ERROR_SERVICE_UNAVAILABLE;
    default: return code >= 400 && code < 500 ? API_ERROR_INVALID_REQUEST : API_ERROR_INTERNAL;
    }
}

const char *api_error_type(int code) { return api_error_kind_names[error_kind(code)]; }

int api_status_code(attnd_status st, bool range_is_size)
{
    switch (st) {
    case ATTND_ERR_INVALID: return 400;
    case ATTND_ERR_RANGE: return range_is_size ? 413 : 400;
    case ATTND_ERR_UNSUPPORTED:
    case ATTND_ERR_NOMEM: return 503;
    default: return 500;
    }
}


void api_error_json(struct http_server *srv, struct api_buf *b, int code, const char *message)
{
    enum api_error_kind kind = error_kind(code);
    api_buf_printf(b, "{\"error\":{\"code\":%d,\"type\":\"%s\",\"message\":", code, api_error_kind_names[kind]);
    api_buf_json_str(b, message, strlen(message));
    api_buf_puts(b, "}}");
    metrics_error(srv->metrics, (size_t)kind);
}

/* The OpenAI API's error types for an HTTP status. */
static const char *openai_error_type(int code)
{
    if (code == 401) return "authentication_error";
    if (code == 404) return "not_found_error";
    if (code == 429 || code == 503) return "server_overloaded";
    return code >= 400 && code < 500 ? "invalid_request_error" : "server_error";
}

void api_error_json_openai(struct http_server *srv, struct api_buf *b, int code, const char *param,
                           const char *err_code, const char *message)
{
    api_buf_puts(b, "{\"error\":{\"message\":");
    api_buf_json_str(b, message, strlen(message));
    api_buf_printf(b, ",\"type\":\"%s\",\"param\":", openai_error_type(code));
    api_buf_json_str_or_null(b, param);
    api_buf_puts(b, ",\"code\":");
    api_buf_json_str_or_null(b, err_code);
    api_buf_puts(b, "}}");
    metrics_error(srv->metrics, (size_t)error_kind(code));
}

static enum MHD_Result send_error(struct api_conn *c, int code, const char *hname, const char *hval,
                                  const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (code >= 500) log_warn("answering %d: %s", code, msg); /* the request line alone does not say why */
    struct api_buf b = {0};
    if (c->openai_errors) api_error_json_openai(c->srv, &b, code, NULL, NULL, msg);
    else api_error_json(c->srv, &b, code, msg);
    api_buf_puts(&b, "\n");
    size_t len = b.len;
    char *body = api_buf_take(&b);
    if (!body) return MHD_NO;
    const char *hdrs[3] = {hname, hval, NULL};
    return api_respond(c, code, "application/json", body, len, hname ? hdrs : NULL);
}

enum MHD_Result api_error(struct api_conn *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = send_error(c, code, NULL, NULL, fmt, ap);
    va_end(ap);
    return r;
}

enum MHD_Result api_error_hdr(struct api_conn *c, int code, const char *hname, const char *hval, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = send_error(c, code, hname, hval, fmt, ap);
    va_end(ap);
    return r;
}

enum MHD_Result api_error_retry(struct api_conn *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum MHD_Result r = send_error(c, code, code == 503 || code == 429 ? "Retry-After" : NULL, "1", fmt, ap);
    va_end(ap);
    return r;
}
