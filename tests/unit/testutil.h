/* testutil.h - tiny test harness: each test is a program that exits 0 pass, 1 fail, 77 skip. */
#ifndef ATTND_TESTUTIL_H
#define ATTND_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static int t_failures = 0;
static int t_checks = 0;

#define T_CHECK(cond, ...)                                                                    \
    do {                                                                                      \
        t_checks++;                                                                           \
        if (!(cond)) {                                                                        \
            t_failures++;                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
        }                                                                                     \
    } while (0)

/* Path of the shared test data folder ($SHARED, default ../shared). */
static inline const char *t_shared(void)
{
    const char *s = getenv("SHARED");
    return s && *s ? s : "../shared";
}

/* Reads a whole file into a malloc'd, NUL-terminated buffer (NULL if it cannot be read). */
static inline char *t_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long n = -1;
    if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)n + 1))) {
        if (fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        } else b[n] = 0;
    }
    fclose(f);
    if (b && len) *len = (size_t)n;
    return b;
}

/* malloc that ends the test on failure (never returns NULL; 0 bytes gives a valid pointer). */
static inline void *t_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* For the Vulkan tests under ASan: the driver stack (lavapipe, the validation layer) leaks from
 * libraries it unloads, so leak checking is turned off for those tests only, by re-executing the
 * program with detect_leaks=0 (ASAN_OPTIONS is read at start-up). Returns (in the re-executed
 * program, or at once without ASan); returns 1 only if the re-exec failed. */
static inline int t_vk_no_leak_check(char **argv)
{
#if defined(__SANITIZE_ADDRESS__)
    if (!getenv("ATTND_VK_TEST_NOLEAK")) {
        const char *old_opts = getenv("ASAN_OPTIONS");
        char opts[512];
        snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", old_opts ? old_opts : "", old_opts && *old_opts ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        setenv("ATTND_VK_TEST_NOLEAK", "1", 1);
        execv("/proc/self/exe", argv);
        perror("execv /proc/self/exe");
        return 1;
    }
#else
    (void)argv;
#endif
    return 0;
}

/* Runs this program again in a child with the settings env = {name, value, name, value, ..., NULL}
 * added to its environment, and waits for it. Returns 0 if it exited 0, else 1 (with a line
 * naming `what`). */
static inline int t_rerun_with_env(char **argv, const char *const *env, const char *what)
{
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        for (const char *const *e = env; e[0] && e[1]; e += 2) setenv(e[0], e[1], 1);
        execv("/proc/self/exe", argv);
        perror("execv /proc/self/exe");
        _exit(1);
    }
    int ws = 0;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        fprintf(stderr, "%s failed\n", what);
        return 1;
    }
    return 0;
}

static inline int t_finish(const char *name)
{
    fprintf(stderr, "%s: %d checks, %d failed\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

#endif
