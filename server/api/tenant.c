/* tenant.c - see tenant.h. */
#include "server/api/tenant.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_BYTES (TENANT_NAME_MAX + TENANT_KEY_MAX + 64) /* longest line of a keys file */

struct tenant {
    char name[TENANT_NAME_MAX + 1];
    unsigned char *key; /* (key_len) malloc'd */
    size_t key_len;
};

struct tenant_table {
    struct tenant *v; /* (n) tenant id i + 1 is v[i] */
    int n, cap;
};

attnd_status tenant_table_create(struct tenant_table **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? ATTND_OK : ATTND_ERR_NOMEM;
}

void tenant_table_destroy(struct tenant_table *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        volatile unsigned char *k = t->v[i].key;
        for (size_t j = 0; j < t->v[i].key_len; j++) k[j] = 0;
        free(t->v[i].key);
    }
    free(t->v);
    free(t);
}

/* Constant time in klen: every byte of the configured key is looked at. 1 if equal, else 0. */
static unsigned key_equal(const unsigned char *k, size_t klen, const char *given, size_t glen)
{
    unsigned diff = glen != klen;
    for (size_t i = 0; i < klen; i++) diff |= (unsigned)(k[i] ^ (i < glen ? (unsigned char)given[i] : 0u));
    return 1u & ((diff - 1u) >> (sizeof diff * 8 - 1)); /* diff == 0, without a branch */
}

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n > TENANT_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

attnd_status tenant_add(struct tenant_table *t, const char *name, const char *key, size_t key_len, char *err,
                        size_t errlen)
{
    if (!key_len || key_len > TENANT_KEY_MAX) {
        snprintf(err, errlen, "the key is %s", key_len ? "longer than 4096 bytes" : "empty");
        return ATTND_ERR_INVALID;
    }
    if (!name_ok(name)) {
        snprintf(err, errlen, "the name must be 1..%d of A-Z a-z 0-9 . _ -", TENANT_NAME_MAX);
        return ATTND_ERR_INVALID;
    }
    for (int i = 0; i < t->n; i++) {
        if (!strcmp(t->v[i].name, name)) {
            snprintf(err, errlen, "tenant '%s' is given twice", name);
            return ATTND_ERR_INVALID;
        }
        if (key_equal(t->v[i].key, t->v[i].key_len, key, key_len)) {
            snprintf(err, errlen, "tenant '%s' has the key of tenant '%s'", name, t->v[i].name);
            return ATTND_ERR_INVALID;
        }
    }
    if (t->n == TENANT_MAX) {
        snprintf(err, errlen, "more than %d tenants", TENANT_MAX);
        return ATTND_ERR_INVALID;
    }
    if (t->n == t->cap) {
        int nc = t->cap ? 2 * t->cap : 8;
        struct tenant *v = realloc(t->v, (size_t)nc * sizeof *v);
        if (!v) return ATTND_ERR_NOMEM;
        t->v = v, t->cap = nc;
    }
    struct tenant *e = &t->v[t->n];
    if (!(e->key = malloc(key_len))) return ATTND_ERR_NOMEM;
    memcpy(e->key, key, key_len);
    e->key_len = key_len;
    snprintf(e->name, sizeof e->name, "%s", name);
    t->n++;
    return ATTND_OK;
}

static bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

/* One line of a keys file (no newline). 0: skipped or added; else the status, reason in err. */
static attnd_status add_line(struct tenant_table *t, char *line, char *err, size_t errlen)
{
    size_t n = strlen(line);
    while (n && is_space(line[n - 1])) line[--n] = 0;
    char *p = line;
    while (is_space(*p)) p++;
    if (!*p || *p == '#') return ATTND_OK;
    char *colon = strchr(p, ':');
    if (!colon) {
        snprintf(err, errlen, "not 'name:key' (no ':')");
        return ATTND_ERR_INVALID;
    }
    char *name_end = colon;
    while (name_end > p && is_space(name_end[-1])) name_end--;
    *name_end = 0;
    char *key = colon + 1;
    while (is_space(*key)) key++;
    if (!*p) {
        snprintf(err, errlen, "the name before ':' is empty");
        return ATTND_ERR_INVALID;
    }
    return tenant_add(t, p, key, strlen(key), err, errlen);
}

attnd_status tenant_load_file(struct tenant_table *t, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot open --api-keys %s: %s", path, strerror(errno));
        return ATTND_ERR_IO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    attnd_status st = ATTND_OK;
    char why[256] = "";
    int lineno = 0;
    while (!st && (errno = 0, len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)len > LINE_MAX_BYTES) st = ATTND_ERR_INVALID, snprintf(why, sizeof why, "line too long");
        else if (memchr(line, 0, (size_t)len)) st = ATTND_ERR_INVALID, snprintf(why, sizeof why, "a NUL byte");
        else st = add_line(t, line, why, sizeof why);
    }
    if (!st && ferror(f)) st = ATTND_ERR_IO, snprintf(why, sizeof why, "read error");
    fclose(f);
    if (line) memset(line, 0, cap); /* it held keys */
    free(line);
    if (!st && errno == ENOMEM) st = ATTND_ERR_NOMEM;
    if (st == ATTND_ERR_INVALID || (st == ATTND_ERR_IO && why[0]))
        snprintf(err, errlen, "--api-keys %s line %d: %s", path, lineno, why);
    else if (st == ATTND_ERR_NOMEM) snprintf(err, errlen, "out of memory");
    else if (!t->n) {
        snprintf(err, errlen, "--api-keys %s holds no 'name:key' line", path);
        st = ATTND_ERR_INVALID;
    }
    return st;
}

int tenant_count(const struct tenant_table *t) { return t ? t->n : 0; }

int tenant_match(const struct tenant_table *t, const char *given, size_t len)
{
    unsigned found = 0;
    for (int i = 0; t && i < t->n; i++) {
        unsigned eq = key_equal(t->v[i].key, t->v[i].key_len, given, len);
        found |= (unsigned)(i + 1) & (0u - eq); /* keys are distinct: at most one matches */
    }
    return found ? (int)found : -1;
}

const char *tenant_name(const struct tenant_table *t, int id)
{
    return t && id >= 1 && id <= t->n ? t->v[id - 1].name : "";
}

int tenant_of(const struct api_conn *c) { return c->tenant; }
