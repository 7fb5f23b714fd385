/* log.h - the one logger. Writes to stderr with a level and a timestamp.
 * Everything below main.c logs through here and never prints to stdout. */
#ifndef ATTND_LOG_H
#define ATTND_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };

/* Sets the lowest level that is written (default LOG_INFO, or $ATTND_LOG=debug|info|warn|error|off). */
void log_set_level(enum log_level lvl);
enum log_level log_get_level(void);

/* printf-style; thread-safe (one line is written with one write()). */
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
