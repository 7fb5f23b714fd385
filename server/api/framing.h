/* framing.h - strict HTTP/1.1 message framing (RFC 9112), checked before a request's body is
 * read, where libmicrohttpd (Debian 12's 0.9.75) is more lenient than the RFC allows or frames
 * the body differently from what the headers say. http.c calls these; every refusal is
 * answered through errors.h (the one JSON error shape) and, since it comes before the body,
 * libmicrohttpd closes the connection after it (no bytes of a mis-framed body are read as a
 * next request).
 *
 * What is decided where:
 *   - libmicrohttpd itself, before our handler runs: a Content-Length that is not one plain
 *     number ("5, 5", "x") -> 400 with its own HTML page; a chunk size that overflows -> 413;
 *     a chunk-size line longer than the connection's buffer (a huge chunk extension) -> 500
 *     (0.9.75 has no option to change any of these).
 *   - Bare LF: accepted as a line terminator in the request line, the headers and the chunk
 *     framing (RFC 9112 section 2.2 allows a recipient to), as libmicrohttpd does. A bare CR
 *     inside a header is refused (400).
 *   - api_framing_check(): everything below, per header line.
 *   - api_framing_cut_query(): a query of more than API_FRAMING_MAX_PARAMS parameters.
 */
#ifndef ATTND_API_FRAMING_H
#define ATTND_API_FRAMING_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/api/api.h"

#define API_FRAMING_MAX_PARAMS 64 /* query parameters read; more is refused with 414 */

/* Checks c's request headers (call on the first call of the access handler, before the body):
 *   400  a header name that is not a token (white space before the ':' included), a CR or other
 *        control byte in a value, an obs-fold (a header line continued on the next line),
 *        Content-Length or Transfer-Encoding given more than once, both of them given, a
 *        Transfer-Encoding whose last coding is not chunked;
 *   501  a Transfer-Encoding other than chunked alone (e.g. "gzip, chunked").
 * Returns true when the framing is sound; otherwise the error is queued and its result is in
 * *ret. Thread-safe (reads c's connection only). */
bool api_framing_check(struct api_conn *c, enum MHD_Result *ret);

/* Called with the request line's URI before libmicrohttpd splits the query into its parameter
 * records (MHD_OPTION_URI_LOG_CALLBACK): a query of more than API_FRAMING_MAX_PARAMS parameters
 * would exhaust the connection's memory pool, and 0.9.75 then closes the connection without
 * an answer. Such a query is cut off in place (libmicrohttpd then sees an empty one) and its
 * parameter count returned, for the handler to answer 414; otherwise returns 0. uri is
 * libmicrohttpd's own writable request buffer (passed as const). */
size_t api_framing_cut_query(char *uri);

#endif
