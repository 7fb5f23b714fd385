/* status.h - the one status enum every fallible attnd function returns. */
#ifndef ATTND_STATUS_H
#define ATTND_STATUS_H

typedef enum attnd_status {
    ATTND_OK = 0,
    ATTND_ERR_INVALID,     /* bad argument or bad input (a request, a flag) */
    ATTND_ERR_IO,          /* open/read/write failed */
    ATTND_ERR_FORMAT,      /* a file is corrupt, truncated or hostile */
    ATTND_ERR_UNSUPPORTED, /* valid input we do not handle (arch, tensor type) */
    ATTND_ERR_NOMEM,       /* an allocation failed */
    ATTND_ERR_RANGE,       /* a value is outside its allowed range or a cap */
    ATTND_ERR_NOTFOUND,    /* a key, tensor or id does not exist */
    ATTND_ERR_INTERNAL,    /* should not happen: a bug */
    ATTND_ERR_NUMERIC,     /* the model computed NaN or infinite values (bad weights): a 5xx */
    ATTND_ERR_BUSY         /* a per-client limit is reached: try again later (HTTP 429) */
} attnd_status;

/* Returns a static, human-readable name for s; never NULL. Thread-safe. */
const char *attnd_status_str(attnd_status s);

#endif
