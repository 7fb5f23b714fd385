/* scratch.c - see scratch.h. Every buffer is also on a list from a global root, so the main
 * thread's, which lives to the end, is not reported as a leak. */
#include "kernels/cpu/scratch.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdlib.h>

struct scratch {
    struct scratch *prev, *next;
    size_t bytes; /* usable after the header */
    alignas(64) unsigned char data[];
};

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_list_mu = PTHREAD_MUTEX_INITIALIZER;
static struct scratch *g_list;
static int g_key_ok;

static void unlink_and_free(void *p)
{
    struct scratch *sc = p;
    pthread_mutex_lock(&g_list_mu);
    if (sc->prev) sc->prev->next = sc->next;
    else g_list = sc->next;
    if (sc->next) sc->next->prev = sc->prev;
    pthread_mutex_unlock(&g_list_mu);
    free(sc);
}

static void key_make(void) { g_key_ok = pthread_key_create(&g_key, unlink_and_free) == 0; }

static struct scratch *make_linked(size_t bytes)
{
    const size_t total = (sizeof(struct scratch) + bytes + 63) / 64 * 64;
    struct scratch *sc = aligned_alloc(64, total);
    if (!sc) return NULL;
    sc->bytes = bytes;
    pthread_mutex_lock(&g_list_mu);
    sc->prev = NULL, sc->next = g_list;
    if (g_list) g_list->prev = sc;
    g_list = sc;
    pthread_mutex_unlock(&g_list_mu);
    return sc;
}

void *scratch_get(size_t bytes)
{
    pthread_once(&g_key_once, key_make);
    if (!g_key_ok) return NULL;
    struct scratch *sc = pthread_getspecific(g_key);
    if (sc && sc->bytes >= bytes) return sc->data;
    struct scratch *grown = make_linked(bytes);
    if (!grown) return NULL;
    if (pthread_setspecific(g_key, grown)) {
        unlink_and_free(grown);
        return NULL;
    }
    if (sc) unlink_and_free(sc);
    return grown->data;
}
