/* file.c - see attnd/file.h. */
#include "attnd/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

char *file_read_all(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) goto fail;
    if ((unsigned long)n > max) {
        errno = EFBIG;
        goto fail;
    }
    if (!(buf = malloc((size_t)n + 1))) goto fail;
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        if (!errno) errno = EIO;
        goto fail;
    }
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
fail:;
    int e = errno;
    free(buf);
    fclose(f);
    errno = e;
    return NULL;
}
