/* stopstr.h - stop strings: a streaming matcher that withholds text which might be the start of
 * a stop string and cuts the output where a stop string appears.
 *
 * Feed the generated text in order, piece by piece (bytes; a piece may be empty or split a
 * UTF-8 character). Each call says which bytes are now safe to send to the client: everything
 * except a tail that could still turn into a stop string. Matching is on bytes, across any
 * number of pieces, and does not depend on how the text is split into pieces: the stop string
 * that completes first (ends at the earliest byte) wins, and among those the one that starts
 * earliest. On a hit the text before the stop string is the final text; the stop string and
 * anything after it are dropped. At the end of generation without a hit, stop_flush releases
 * the withheld tail.
 *
 *   struct stop_out o;
 *   stop_feed(m, piece, len, &o);  send(o.text, o.len);  if (o.stop >= 0) finish("stop");
 *   ... at end of stream:          stop_flush(m, &o);    send(o.text, o.len);
 *
 * Nothing here prints, logs or exits. A matcher belongs to one request: it is not safe to use
 * from two threads at once; distinct matchers are independent.
 */
#ifndef ATTND_STOPSTR_H
#define ATTND_STOPSTR_H

#include <stddef.h>

#include "attnd/status.h"

#define STOP_MAX_STRINGS 64 /* per matcher */
#define STOP_MAX_LEN 1024   /* bytes per stop string */

struct stop_matcher; /* opaque */

struct stop_out {
    const char *text; /* bytes safe to emit now; owned by the matcher, valid until the next
                         call on it (never NULL, even when len is 0) */
    size_t len;       /* number of bytes at text */
    int stop;         /* index (into the array given to stop_create) of the stop string hit,
                         or -1 */
};

/* Creates a matcher for n (0 <= n <= STOP_MAX_STRINGS) stop strings; the strings are copied.
 * n == 0 gives a matcher that passes all text through. Returns ATTND_OK and sets *out, or
 * ATTND_ERR_INVALID (out NULL, stops NULL with n > 0, a NULL or empty string, n < 0),
 * ATTND_ERR_RANGE (n > STOP_MAX_STRINGS or a string longer than STOP_MAX_LEN bytes),
 * ATTND_ERR_NOMEM. On failure *out is left NULL. */
attnd_status stop_create(const char *const *stops, int n, struct stop_matcher **out);

/* Frees m. stop_destroy(NULL) is a no-op. */
void stop_destroy(struct stop_matcher *m);

/* Forgets all text and any hit, ready for a new generation with the same stop strings.
 * stop_reset(NULL) is a no-op. */
void stop_reset(struct stop_matcher *m);

/* Appends piece[0..len) to the text and fills *out: the bytes now safe to emit (previously
 * withheld bytes first, then as much of piece as cannot start a stop string) and whether a stop
 * string was hit. After a hit the matcher is finished: later feeds and flushes emit nothing and
 * report the same stop index. Returns ATTND_OK, ATTND_ERR_INVALID (m or out NULL, piece NULL
 * with len > 0) or ATTND_ERR_NOMEM (the text is then unchanged). Cost: O(len * n_stops). */
attnd_status stop_feed(struct stop_matcher *m, const char *piece, size_t len, struct stop_out *out);

/* End of text: fills *out with the withheld bytes (they are now known not to be a stop
 * string) and clears them; out->stop is -1 unless a stop was already hit (then len is 0).
 * Returns ATTND_OK or ATTND_ERR_INVALID (m or out NULL). */
attnd_status stop_flush(struct stop_matcher *m, struct stop_out *out);

#endif
