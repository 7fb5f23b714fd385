/* log.c - see log.h. */
#include "attnd/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

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
