/* errors.c - see errors.h. */
#include "server/api/errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api/metrics.h"

const char *api_error_type(int code)
{
    switch (code) {
    case 400: return "invalid_request";
    case 401: return "authentication_error";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 413: return "payload_too_large";
    case 503: return "service_unavailable";
    default: return code >= 400 && code < 500 ? "invalid_request" : "internal_error";
    }
}

void api_error_json(struct http_server *srv, struct api_buf *b, int code, const char *message)
{
    const char *type = api_error_type(code);
    api_buf_printf(b, "{\"error\":{\"code\":%d,\"type\":\"%s\",\"message\":", code, type);
    api_buf_json_str(b, message, strlen(message));
    api_buf_puts(b, "}}");
    metrics_error(srv->metrics, type);
}

static enum MHD_Result send_error(struct api_conn *c, int code, const char *hname, const char *hval,
                                  const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    struct api_buf b = {0};
    api_error_json(c->srv, &b, code, msg);
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
