/* status.c - see status.h. */
#include "attnd/status.h"

const char *attnd_status_str(attnd_status s)
{
    switch (s) {
    case ATTND_OK: return "ok";
    case ATTND_ERR_INVALID: return "invalid argument";
    case ATTND_ERR_IO: return "i/o error";
    case ATTND_ERR_FORMAT: return "bad file format";
    case ATTND_ERR_UNSUPPORTED: return "unsupported";
    case ATTND_ERR_NOMEM: return "out of memory";
    case ATTND_ERR_RANGE: return "out of range";
    case ATTND_ERR_NOTFOUND: return "not found";
    case ATTND_ERR_INTERNAL: return "internal error";
    case ATTND_ERR_NUMERIC: return "the model produced NaN or infinite values";
    case ATTND_ERR_BUSY: return "too many requests of this client";
    }
    return "unknown status";
}
