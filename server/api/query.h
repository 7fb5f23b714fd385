/* query.h - reading a request's query string: a fixed set of named parameters, each at most
 * once, and plain unsigned numbers. Thread-safe (works on the caller's connection only). */
#ifndef ATTND_API_QUERY_H
#define ATTND_API_QUERY_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/api/api.h"

#define API_QUERY_MAX 8 /* most parameters one route reads */

/* Reads the query string of c: val[i] = the value of names[i] (names: NULL-terminated, at most
 * API_QUERY_MAX; val[i] NULL when absent, "" when given without a value). An unknown or repeated
 * parameter is answered with a 400 error naming it (and the known ones): then returns false with
 * the response's result in *ret. */
bool api_query_read(struct api_conn *c, const char *const *names, const char **val, enum MHD_Result *ret);

/* Parses a plain decimal number without sign, at most max. False for NULL, "", a sign, any
 * other byte or a value over max (*out untouched then). */
bool api_parse_uint(const char *s, unsigned long long max, unsigned long long *out);

/* Parses a request id as the generation routes answer it ("gen-H", "chatcmpl-H", "cmpl-H", "resp-H" with
 * H 1..32 hex digits, or 32 bare hex digits for a gen- id) with index (the choice, 0..255; NULL:
 * 0; only for chatcmpl/cmpl) into id (cap >= API_HISTORY_ID_MAX bytes, as the history keeps it:
 * the prefix, lowercase hex) and *index_out. False when malformed. */
bool api_parse_request_id(const char *s, const char *index, char *id, size_t cap, unsigned *index_out);

#endif
