/* Per-thread scratch arena (workspace.h).
 *
 * Each thread owns a list of chunks.  Allocation bumps a pointer in the
 * current chunk, moving to the next chunk (allocating it if needed) when
 * full.  Restoring to the very beginning while more than one chunk exists
 * merges them into one chunk of the total size, so that a steady workload
 * ends up in a single block that is reused call after call.  The arena is
 * freed when its thread exits (pthread key destructor) or at tfm_workspace_release.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/workspace.h"

#define TFM_WS_MAX_CHUNKS 48
#define TFM_WS_ALIGN 64
#define TFM_WS_MIN_CHUNK ((size_t)1 << 20)

typedef struct ws_chunk {
    void *raw;      /* as returned by tfm__malloc */
    char *base;     /* aligned start */
    size_t cap;
} ws_chunk;

typedef struct ws_arena {
    struct ws_arena *prev, *next;   /* in all_arenas, under arenas_lock */
    ws_chunk chunks[TFM_WS_MAX_CHUNKS];
    int n_chunks;
    int current;
    size_t used;    /* bytes used in chunks[current] */
} ws_arena;

static pthread_key_t arena_key;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static int arena_key_ok;
static pthread_mutex_t arenas_lock = PTHREAD_MUTEX_INITIALIZER;
static ws_arena *all_arenas;    /* every thread's arena, under arenas_lock */

static void arena_link(ws_arena *a)
{
    a->prev = NULL;
    a->next = all_arenas;
    if (all_arenas)
        all_arenas->prev = a;
    all_arenas = a;
}

static void arena_unlink(ws_arena *a)
{
    if (a->prev)
        a->prev->next = a->next;
    else
        all_arenas = a->next;
    if (a->next)
        a->next->prev = a->prev;
}

static void arena_free(ws_arena *a)
{
    for (int i = 0; i < a->n_chunks; i++)
        tfm__free(a->chunks[i].raw);
    tfm__free(a);
}

static void arena_destroy(void *p)
{
    ws_arena *a = p;
    if (!a)
        return;
    pthread_mutex_lock(&arenas_lock);
    arena_unlink(a);
    pthread_mutex_unlock(&arenas_lock);
    arena_free(a);
}

void tfm__ws_fork_prepare(void)
{
    pthread_mutex_lock(&arenas_lock);
}

void tfm__ws_fork_parent(void)
{
    pthread_mutex_unlock(&arenas_lock);
}

void tfm__ws_fork_child(void)
{
    /* Only the forking thread exists: every other arena belongs to a thread
     * that is gone in this process, so nobody can use it again. */
    ws_arena *own = arena_key_ok ? pthread_getspecific(arena_key) : NULL;
    for (ws_arena *a = all_arenas, *next; a; a = next) {
        next = a->next;
        if (a != own)
            arena_free(a);
    }
    all_arenas = NULL;
    if (own)
        arena_link(own);
    pthread_mutex_unlock(&arenas_lock);
}

static void arena_key_init(void)
{
    arena_key_ok = pthread_key_create(&arena_key, arena_destroy) == 0;
}

/* The arena this thread allocates from instead of its own while set
 * (tfm__ws_use): a module's kept forward (tape.c). */
static _Thread_local ws_arena *arena_override;

static ws_arena *arena_get(int create)
{
    if (arena_override)
        return arena_override;
    pthread_once(&arena_once, arena_key_init);
    if (!arena_key_ok)
        return NULL;
    ws_arena *a = pthread_getspecific(arena_key);
    if (!a && create) {
        a = tfm__calloc(1, sizeof *a);
        if (a && pthread_setspecific(arena_key, a) != 0) {
            tfm__free(a);
            a = NULL;
        }
        if (a) {
            pthread_mutex_lock(&arenas_lock);
            arena_link(a);
            pthread_mutex_unlock(&arenas_lock);
        }
    }
    return a;
}

static int chunk_init(ws_chunk *c, size_t cap)
{
    if (cap > SIZE_MAX - TFM_WS_ALIGN)
        return 0;
    c->raw = tfm__malloc(cap + TFM_WS_ALIGN);
    if (!c->raw)
        return 0;
    uintptr_t p = (uintptr_t)c->raw;
    c->base = (char *)((p + TFM_WS_ALIGN - 1) & ~(uintptr_t)(TFM_WS_ALIGN - 1));
    c->cap = cap;
    return 1;
}

tfm__ws_mark tfm__ws_save(void)
{
    ws_arena *a = arena_get(0);
    tfm__ws_mark m = { 0, 0 };
    if (a) {
        m.chunk = a->current;
        m.used = a->used;
    }
    return m;
}

static void arena_merge(ws_arena *a)
{
    size_t total = 0;
    for (int i = 0; i < a->n_chunks; i++)
        total += a->chunks[i].cap;
    ws_chunk merged;
    if (!chunk_init(&merged, total))
        return; /* keep the chunks as they are */
    for (int i = 0; i < a->n_chunks; i++)
        tfm__free(a->chunks[i].raw);
    a->chunks[0] = merged;
    a->n_chunks = 1;
}

void tfm__ws_restore(tfm__ws_mark mark)
{
    ws_arena *a = arena_get(0);
    if (!a)
        return;
    a->current = mark.chunk;
    a->used = mark.used;
    if (mark.chunk == 0 && mark.used == 0 && a->n_chunks > 1)
        arena_merge(a);
}

void *tfm__ws_alloc(size_t bytes)
{
    ws_arena *a = arena_get(1);
    if (!a)
        return NULL;
    if (bytes > SIZE_MAX - TFM_WS_ALIGN)
        return NULL;
    bytes = (bytes + TFM_WS_ALIGN - 1) & ~(size_t)(TFM_WS_ALIGN - 1);
    for (;;) {
        if (a->current < a->n_chunks) {
            ws_chunk *c = &a->chunks[a->current];
            if (c->cap - a->used >= bytes) {
                void *p = c->base + a->used;
                a->used += bytes;
                return p;
            }
            if (a->current + 1 < a->n_chunks &&
                a->chunks[a->current + 1].cap >= bytes) {
                a->current++;
                a->used = 0;
                continue;
            }
        }
        /* Need a new chunk after the current one; later chunks (too small)
         * are dropped. */
        int slot = a->current < a->n_chunks && a->used > 0 ? a->current + 1
                                                           : a->current;
        if (slot >= TFM_WS_MAX_CHUNKS)
            return NULL;
        size_t cap = bytes > TFM_WS_MIN_CHUNK ? bytes : TFM_WS_MIN_CHUNK;
        if (slot > 0 && a->chunks[slot - 1].cap <= SIZE_MAX / 2 &&
            cap < 2 * a->chunks[slot - 1].cap)
            cap = 2 * a->chunks[slot - 1].cap;
        ws_chunk c;
        if (!chunk_init(&c, cap) && !(cap != bytes && chunk_init(&c, bytes)))
            return NULL;
        for (int i = slot; i < a->n_chunks; i++)
            tfm__free(a->chunks[i].raw);
        a->chunks[slot] = c;
        a->n_chunks = slot + 1;
        a->current = slot;
        a->used = 0;
    }
}

float *tfm__ws_floats(size_t n)
{
    size_t bytes;
    void *p = NULL;
    if (tfm__mul_size(n, sizeof(float), &bytes))
        p = tfm__ws_alloc(bytes);
    if (!p)
        tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                  "cannot allocate %zu floats of scratch memory", n);
    return p;
}

/* Public (workspace is mentioned in module.h): frees the calling thread's
 * scratch memory.  Declared in transformer/module.h. */
TFM_API void tfm_workspace_release(void)
{
    /* The thread's own arena, never one lent by tfm__ws_use. */
    ws_arena *a = arena_key_ok ? pthread_getspecific(arena_key) : NULL;
    if (!a)
        return;
    arena_destroy(a);
    pthread_setspecific(arena_key, NULL);
}

tfm__ws_arena *tfm__ws_arena_new(void)
{
    return tfm__calloc(1, sizeof(ws_arena));
}

void tfm__ws_arena_free(tfm__ws_arena *a)
{
    if (a)
        arena_free(a);
}

tfm__ws_arena *tfm__ws_use(tfm__ws_arena *a)
{
    ws_arena *prev = arena_override;
    arena_override = a;
    return prev;
}
