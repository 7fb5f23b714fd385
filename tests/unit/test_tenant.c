/* test_tenant.c - the tenant table (server/api/tenant.h) without a socket: keys matched to their
 * tenant and nothing else (prefixes, extensions, other lengths, empty), --api-keys files read
 * with comments, blank lines, white space and ':' inside keys, and every kind of bad line refused
 * with the file's name and the line's number. The daemon over real HTTP is tested in
 * tests/integration/test_http_tenants.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/api/tenant.h"
#include "tests/unit/testutil.h"

static void test_match(void)
{
    struct tenant_table *t = NULL;
    char err[256];
    T_CHECK(tenant_table_create(&t) == ATTND_OK && tenant_count(t) == 0, "empty table");
    T_CHECK(tenant_match(t, "x", 1) == -1, "no key matches an empty table");
    T_CHECK(!tenant_add(t, "alice", "k-alice", 7, err, sizeof err) && !tenant_add(t, "bob", "k-bob", 5, err, sizeof err),
            "add: %s", err);
    T_CHECK(tenant_count(t) == 2, "two tenants");
    T_CHECK(tenant_match(t, "k-alice", 7) == 1 && tenant_match(t, "k-bob", 5) == 2, "each key its tenant");
    static const char *const wrong[] = {"k-alic", "k-alicex", "K-alice", "", "k-bo", "alice", "k-bob "};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++)
        T_CHECK(tenant_match(t, wrong[i], strlen(wrong[i])) == -1, "'%s' matches no tenant", wrong[i]);
    T_CHECK(!strcmp(tenant_name(t, 1), "alice") && !strcmp(tenant_name(t, 2), "bob") && !strcmp(tenant_name(t, 3), "") &&
                !strcmp(tenant_name(t, TENANT_SINGLE), ""),
            "names");
    T_CHECK(tenant_add(t, "alice", "k-other", 7, err, sizeof err) == ATTND_ERR_INVALID && strstr(err, "twice"),
            "a name twice: %s", err);
    T_CHECK(tenant_add(t, "carol", "k-bob", 5, err, sizeof err) == ATTND_ERR_INVALID && strstr(err, "bob"),
            "a key twice: %s", err);
    T_CHECK(tenant_add(t, "dave", "", 0, err, sizeof err) == ATTND_ERR_INVALID, "an empty key");
    T_CHECK(tenant_add(t, "da ve", "k", 1, err, sizeof err) == ATTND_ERR_INVALID, "a name with a space");
    T_CHECK(tenant_count(t) == 2, "refused ones are not added");
    tenant_table_destroy(t);
    tenant_table_destroy(NULL);
}

/* Writes text to a temporary file; its path in path (cap bytes). */
static void write_file(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "/tmp/test_tenant_XXXXXX");
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_file(void)
{
    char path[64], err[512];
    struct tenant_table *t = NULL;
    write_file(path, sizeof path, "# tenants\n\nalice:one\n  bob :  two:with:colons \r\n\t\n# end\n");
    T_CHECK(!tenant_table_create(&t) && !tenant_load_file(t, path, err, sizeof err), "good file: %s", err);
    T_CHECK(tenant_count(t) == 2 && tenant_match(t, "one", 3) == 1 && tenant_match(t, "two:with:colons", 15) == 2,
            "names and keys trimmed, ':' kept inside the key");
    tenant_table_destroy(t);
    unlink(path);
    static const struct {
        const char *text, *line;
    } bad[] = {
        {"alice:one\nno colon\n", "line 2"}, {"alice:one\n:two\n", "line 2"},         {"a:1\nb:\n", "line 2"},
        {"a:1\n\n\na:2\n", "line 4"},        {"a:1\nb:1\n", "line 2"},                {"x y:1\n", "line 1"},
        {"# nothing\n\n", "no 'name:key'"},  {"a:1\nb\0:2\n", "line 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, sizeof path, bad[i].text);
        if (i == 7) { /* a NUL byte inside a line: written by hand */
            FILE *f = fopen(path, "wb");
            if (f) fwrite("a:1\nb\0:2\n", 1, 9, f), fclose(f);
        }
        T_CHECK(!tenant_table_create(&t), "create");
        attnd_status st = tenant_load_file(t, path, err, sizeof err);
        T_CHECK(st == ATTND_ERR_INVALID && strstr(err, bad[i].line) && strstr(err, path), "bad file %zu: %s", i, err);
        tenant_table_destroy(t);
        unlink(path);
    }
    T_CHECK(!tenant_table_create(&t), "create");
    T_CHECK(tenant_load_file(t, "/nonexistent/keys", err, sizeof err) == ATTND_ERR_IO && strstr(err, "/nonexistent/keys"),
            "a missing file: %s", err);
    tenant_table_destroy(t);
}

int main(void)
{
    test_match();
    test_file();
    printf("test_tenant: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
