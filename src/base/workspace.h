/* Internal: the calling thread's reusable scratch memory.
 *
 * Forward passes take their scratch from a per-thread arena instead of
 * malloc: after the first call of a given size no new pages are touched, and
 * no two threads share scratch.  Usage, always paired:
 *
 *   tfm__ws_mark mark = tfm__ws_save();
 *   float *a = tfm__ws_alloc(n * sizeof *a);   // NULL: out of memory
 *   ...
 *   tfm__ws_restore(mark);                      // frees a and later ones
 */
#ifndef TFM_SRC_WORKSPACE_H
#define TFM_SRC_WORKSPACE_H

#include <stddef.h>

typedef struct tfm__ws_mark {
    int chunk;
    size_t used;
} tfm__ws_mark;

tfm__ws_mark tfm__ws_save(void);
void tfm__ws_restore(tfm__ws_mark mark);

/* 64-byte aligned, uninitialised; NULL on allocation failure. */
void *tfm__ws_alloc(size_t bytes);

/* Allocates n floats, or sets the out-of-memory message and returns NULL. */
float *tfm__ws_floats(size_t n);

/* An arena owned by its caller instead of a thread (a module's kept
 * forward, tape.h): made empty, freed with tfm__ws_arena_free (NULL: out
 * of memory). */
typedef struct ws_arena tfm__ws_arena;
tfm__ws_arena *tfm__ws_arena_new(void);
void tfm__ws_arena_free(tfm__ws_arena *a);

/* Until the next call, the calling thread's tfm__ws_save / _restore /
 * _alloc work on `a` (NULL: the thread's own arena again); returns the
 * arena in use before, to be given back.  Restoring a's mark {0, 0} makes
 * it empty (its memory kept for reuse). */
tfm__ws_arena *tfm__ws_use(tfm__ws_arena *a);

/* fork handlers (parallel.c's pthread_atfork): prepare takes the arena list's
 * lock, parent releases it, child frees the arenas of every thread but the
 * calling one (they do not exist in the child) and releases it. */
void tfm__ws_fork_prepare(void);
void tfm__ws_fork_parent(void);
void tfm__ws_fork_child(void);

#endif
