/* check.h - always-on assertion for broken invariants (bugs), never for input bytes. */
#ifndef ATTND_CHECK_H
#define ATTND_CHECK_H

_Noreturn void check_fail(const char *file, int line, const char *expr);

#define ATTND_CHECK(e) ((e) ? (void)0 : check_fail(__FILE__, __LINE__, #e))

#endif
