/* Internal: handles that others refer to, freed in any order (issue 44).
 *
 * An owner is a handle that dependents keep a pointer to: a module (an
 * optimizer's, a KV cache's, a generator's), a KV cache (a generator's
 * options->cache), a tokenizer (a generator's stop strings).  As SQLite's
 * sqlite3_close_v2 leaves a "zombie" connection while statements live,
 * freeing an owner that still has dependents only marks it freed; its
 * memory goes when the last dependent is freed.  A dependent checks
 * tfm__lifetime_closed before each use and refuses once its owner was
 * freed, so no call reads freed memory whatever the order of the frees.
 *
 * The rule for an owner type: its struct BEGINS with a tfm__lifetime
 * (so a dependent of a higher layer reaches it by a cast of the handle,
 * tfm__lifetime_of, without the owner's private header), set up by
 * tfm__lifetime_init with the function that really frees it; its public
 * free calls tfm__lifetime_close and frees only when that returns 1.
 * A dependent's create calls tfm__lifetime_retain (refusing when it
 * returns 0) and its free tfm__lifetime_release, which frees a zombie
 * owner on the last release.
 *
 * One atomic word, state = 2 * dependents + freed, makes every transition
 * a single read-modify-write: of an owner's free and its dependents'
 * frees, running in any threads in any order, exactly one frees the
 * memory (the owner's free taking the word 0 -> 1, or the last
 * dependent's release taking it 3 -> 1), and it sees every write the others made before (seq_cst).
 * Header only: every function is a few atomic operations. */
#ifndef TFM_SRC_LIFETIME_H
#define TFM_SRC_LIFETIME_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct tfm__lifetime {
    /* 2 * live dependents + 1 once the owner's free was called.  Zero
     * (a zeroed allocation) is a fresh owner without dependents. */
    _Atomic uint64_t state;
    /* Frees the owner for good (l is its first member). */
    void (*destroy)(struct tfm__lifetime *l);
} tfm__lifetime;

/* The owner's tfm__lifetime: the struct's first member. */
#define tfm__lifetime_of(handle) ((tfm__lifetime *)(void *)(handle))

static inline void tfm__lifetime_init(tfm__lifetime *l,
                                      void (*destroy)(tfm__lifetime *))
{
    atomic_init(&l->state, 0);
    l->destroy = destroy;
}

/* A new dependent of a live owner: 1, or 0 (nothing retained) when the
 * owner's free was already called. */
static inline int tfm__lifetime_retain(tfm__lifetime *l)
{
    uint64_t s = atomic_load(&l->state);
    do {
        if (s & 1u)
            return 0;
    } while (!atomic_compare_exchange_weak(&l->state, &s, s + 2u));
    return 1;
}

/* Whether the owner's free was called (its dependents then refuse). */
static inline int tfm__lifetime_closed(const tfm__lifetime *l)
{
    return (int)(atomic_load(&((tfm__lifetime *)l)->state) & 1u);
}

/* The owner's public free: 1 when the caller frees the memory now (no
 * dependent left); 0 when it stays, a zombie, until the last dependent's
 * release (or when the free was called already: a second free of a
 * zombie does nothing). */
static inline int tfm__lifetime_close(tfm__lifetime *l)
{
    return atomic_fetch_or(&l->state, 1u) == 0;
}

/* A dependent's free: drops its reference and frees a zombie owner when it
 * was the last one (state 3 -> 1: freed, no dependent left). */
static inline void tfm__lifetime_release(tfm__lifetime *l)
{
    if (atomic_fetch_sub(&l->state, 2u) == 3u)
        l->destroy(l);
}

#endif
