/* tenant.h - who made a request. A tenant is one API key with a name: --api-keys FILE holds one
 * "name:key" per line, and --api-key / --api-key-file make a single unnamed one. A request that
 * shows a tenant's key (Authorization: Bearer KEY) belongs to that tenant, and the finished
 * requests it left in the history (history.h) are readable by that tenant alone.
 *
 * Without any key the daemon is single-user: every request belongs to the one tenant
 * TENANT_SINGLE, whatever address it comes from (a client address is not an identity).
 *
 * A table is built once at start-up and only read afterwards: every function that takes a const
 * table is thread-safe.
 */
#ifndef ATTND_API_TENANT_H
#define ATTND_API_TENANT_H

#include <stdbool.h>
#include <stddef.h>

#include "attnd/status.h"
#include "server/api/api.h"

#define TENANT_SINGLE 0     /* the tenant of every request when no key is configured */
#define TENANT_NAME_MAX 64  /* bytes of a name, [A-Za-z0-9._-] */
#define TENANT_KEY_MAX 4096 /* bytes of a key */
#define TENANT_MAX 4096     /* tenants in one table */

struct tenant_table;

/* An empty table (no key: single-user). ATTND_ERR_NOMEM on failure (*out NULL). */
attnd_status tenant_table_create(struct tenant_table **out);
/* tenant_table_destroy(NULL) is a no-op. Wipes the keys before freeing them. */
void tenant_table_destroy(struct tenant_table *t);

/* Adds a tenant (name "" for the unnamed one of --api-key). ATTND_ERR_INVALID with the reason in
 * err for an empty or over-long key, a bad name, a name or key already in the table, or a full
 * table; ATTND_ERR_NOMEM. */
attnd_status tenant_add(struct tenant_table *t, const char *name, const char *key, size_t key_len, char *err,
                        size_t errlen);

/* Reads --api-keys FILE: one "name:key" per line (split at the first ':'; white space around
 * the name and at the key's ends is dropped), '#' comment lines and blank lines skipped. A bad
 * line fails the whole file with ATTND_ERR_INVALID and err naming the file and the line number;
 * a file that cannot be read ATTND_ERR_IO; a file without any key ATTND_ERR_INVALID. */
attnd_status tenant_load_file(struct tenant_table *t, const char *path, char *err, size_t errlen);

/* Tenants in the table (0: no key configured, the daemon is single-user). */
int tenant_count(const struct tenant_table *t);

/* The tenant whose key equals given[0..len): 1..tenant_count(), or -1 if none. Every key of the
 * table is compared, each in time that depends only on its own length, so the time taken says
 * nothing about which key (or how much of one) matched. */
int tenant_match(const struct tenant_table *t, const char *given, size_t len);

/* Tenant id's name ("" for the unnamed one and for TENANT_SINGLE). Never NULL. */
const char *tenant_name(const struct tenant_table *t, int id);

/* The tenant of the request on c: set by the dispatcher once the key has been checked
 * (TENANT_SINGLE without keys). What the routes call. */
int tenant_of(const struct api_conn *c);

#endif
