/* file.h - reading a whole small file (a template, a grammar, a cases list), implemented in
 * core/file.c. Thread-safe; never prints. */
#ifndef ATTND_FILE_H
#define ATTND_FILE_H

#include <stddef.h>

/* The whole file at path, malloc'd and NUL-terminated (*len: its bytes, the NUL not counted), or
 * NULL (errno set: the open or read's error, EFBIG above max bytes, ENOMEM). The caller frees. */
char *file_read_all(const char *path, size_t max, size_t *len);

#endif
