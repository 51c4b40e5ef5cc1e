/* Internal: a layer's training forward kept for its backward.
 *
 * In training mode a layer's forward (tfm_encoder_layer_forward, ...)
 * runs the forward its backward needs (the kept activations of
 * residual.h) in memory of the module's own (a tfm__ws_arena lent to the
 * calling thread while it runs), with copies of its inputs and masks; the
 * layer's backward, given the same inputs again, takes those activations
 * instead of running the forward a second time (torch.autograd keeps its
 * graph the same way).  The backward uses them only when everything the
 * forward depended on is unchanged: the inputs and masks (compared with
 * the copies), the shapes, the thread count, the dropout key and
 * probabilities, and every parameter (a 64-bit FNV-1a-style hash of their
 * bytes taken by both calls: a change of one word, or a swap, always
 * shows; other changes collide with probability about 2^-64, but could be
 * made to by design); otherwise it recomputes, as it always did, so its
 * result does not depend on whether a forward came first.
 *
 * Concurrency: a tape is used by one call at a time (a try-lock); a call
 * that finds it in use neither waits nor keeps: a forward runs without
 * keeping, a backward recomputes.
 *
 *   tfm__tape *t = tfm__tape_record(m, &in);      // NULL: run as in eval
 *   if (t) {  ... forward_keep on t->x, &t->masks, into tfm__ws_* ...;
 *             tfm__tape_close(t, kept_or_NULL_on_failure); }
 *
 *   tfm__tape *t = tfm__tape_find(m, &in);        // NULL: recompute
 *   if (t) { ... backward_kept(t->kept) ...; tfm__tape_release(t); }
 *   // the kept forward is used up: a second backward recomputes
 */
#ifndef TFM_SRC_TAPE_H
#define TFM_SRC_TAPE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "attention/attention_masks.h"
#include "base/workspace.h"

struct tfm_module;

/* What a layer's forward depends on besides its parameters. */
typedef struct tfm__tape_inputs {
    int64_t B, L, S, heads;         /* S: memory length (0: none) */
    const float *x;                 /* [B, L, d_model] */
    size_t x_n;
    const float *memory;            /* [B, S, d_model] or NULL */
    size_t memory_n;
    const tfm__masks *masks;        /* self-attention's (resolved) */
    const tfm__masks *memory_masks; /* cross-attention's or NULL */
    uint64_t drop_key;              /* tfm__dropout_*_key of the call */
} tfm__tape_inputs;

typedef struct tfm__tape {
    /* Copies of the recorded call's inputs (the arena's memory), which the
     * kept forward reads and points at. */
    const float *x, *memory;
    tfm__masks masks, memory_masks;
    /* The kept forward (the layer's own struct, in the arena), NULL until
     * a record succeeded. */
    void *kept;
    /* Private to tape.c: the try-lock, the memory, the recorded call. */
    atomic_flag in_use;
    tfm__ws_arena *arena, *lent;    /* lent: the thread's arena before */
    int64_t B, L, S, heads;
    size_t x_n, memory_n;
    uint64_t drop_key, dropout_hash, params_hash;
    int slots;          /* the thread count the forward ran on (its bits
                         * are that count's: parallel.h) */
} tfm__tape;

/* Starts keeping m's training forward for `in`: takes m's tape (made on
 * first use), empties its arena and lends it to the calling thread, and
 * copies in's inputs and masks into it.  NULL (nothing changed) when the
 * tape is in use by another call or memory runs out: the caller runs its
 * forward without keeping.  Every successful call is paired with
 * tfm__tape_close. */
tfm__tape *tfm__tape_record(struct tfm_module *m, const tfm__tape_inputs *in);

/* Ends a record: the calling thread's own arena again; `kept` (the
 * layer's kept struct in the tape's arena) when the forward succeeded, or
 * NULL (nothing kept). */
void tfm__tape_close(tfm__tape *t, void *kept);

/* m's tape when it holds a kept forward of exactly `in` with m's present
 * parameters and dropout probabilities, taken for the caller until
 * tfm__tape_release; NULL otherwise (recompute).  A backward consumes
 * what it takes (its buffers become the backward's scratch, as
 * torch.autograd frees a graph after its backward): release forgets it,
 * and a second backward recomputes.  Until release the calling thread's
 * workspace is the tape's arena above the kept forward (the backward's
 * scratch reuses the forward's). */
tfm__tape *tfm__tape_find(struct tfm_module *m, const tfm__tape_inputs *in);
void tfm__tape_release(tfm__tape *t);

/* Forgets m's kept forward and frees its memory (tfm_module_train(m, 0));
 * a tape in use by another call is left to it. */
void tfm__tape_drop(struct tfm_module *m);

/* Frees m's tape (tfm_module_free; no call may be using it). */
void tfm__tape_free(struct tfm_module *m);

#endif
