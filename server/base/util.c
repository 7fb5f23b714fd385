/* util.c - status names, the logger and the invariant check. */
#include "attnd/status.h"
#include "attnd/log.h"
#include "attnd/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

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
    }
    return "unknown status";
}

static int g_level = -1;

static int level_from_env(void)
{
    const char *e = getenv("ATTND_LOG");
    if (!e) return LOG_INFO;
    if (!strcasecmp(e, "debug")) return LOG_DEBUG;
    if (!strcasecmp(e, "warn")) return LOG_WARN;
    if (!strcasecmp(e, "error")) return LOG_ERROR;
    if (!strcasecmp(e, "off")) return LOG_OFF;
    return LOG_INFO;
}

void log_set_level(enum log_level lvl) { g_level = (int)lvl; }

enum log_level log_get_level(void)
{
    if (g_level < 0) g_level = level_from_env();
    return (enum log_level)g_level;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    if ((int)lvl < (int)log_get_level()) return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
                     names[lvl < LOG_OFF ? lvl : LOG_OFF]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
}

void check_fail(const char *file, int line, const char *expr)
{
    fprintf(stderr, "attnd: invariant broken at %s:%d: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

void check_deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    long long ns = ts->tv_nsec + (long long)(ms > 0 ? ms : 0) * 1000000LL;
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

int check_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc) return rc;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}
