/* Internal: the library's own threads.
 *
 * libtransformer parallelises its work itself (heads and query blocks of
 * attention, rows of products and feed-forward networks) and runs OpenBLAS
 * single-threaded inside, so that the two never oversubscribe the cores.
 * The thread count is tfm_set_num_threads' (module.h).
 */
#ifndef TFM_SRC_PARALLEL_H
#define TFM_SRC_PARALLEL_H

#include <stdint.h>

/* One parallel call's plan: the thread count read ONCE, when the call
 * starts (tfm__plan_now).  A call sizes its per-thread scratch with
 * plan.slots and hands the same plan to every tfm__parallel_for it makes,
 * so a tfm_set_num_threads from another thread in between can neither
 * split the work into more pieces than there is scratch for nor change
 * how the work is divided (the results stay bit-equal).  There is no other
 * way to read the thread count inside the library. */
typedef struct tfm__plan {
    int slots; /* 1 .. 64 (parallel.c: TFM_MAX_THREADS) */
} tfm__plan;

/* The calling thread's pinned plan (TFM__PLAN_PIN) when it has one, else
 * the current thread count. */
tfm__plan tfm__plan_now(void);

/* Pins the calling thread's plan until the end of the enclosing block:
 * the outermost pin on a thread takes the snapshot, pins nested inside it
 * (a model's layers, a layer's attention and products) keep it, so one
 * public call runs on one thread count from start to end.  Every public
 * entry point that may parallelise opens with it (one line, and no return
 * path can miss the unpin: GCC's and Clang's cleanup attribute). */
#define TFM__PLAN_PIN()                                                    \
    __attribute__((cleanup(tfm__plan_unpin), unused))                    \
    const tfm__plan tfm__pinned_plan = tfm__plan_pin()

tfm__plan tfm__plan_pin(void);
void tfm__plan_unpin(const tfm__plan *pinned);

/* fn(ctx, begin, end, slot) computes items begin .. end-1; slot (0 ..
 * plan.slots-1) identifies the thread, for per-thread scratch.
 * It must not fail. */
typedef void (*tfm__range_fn)(void *ctx, int64_t begin, int64_t end,
                              int slot);

/* Splits items 0 .. n-1 into contiguous chunks of at least `grain` items
 * (at most 4 per thread of the plan, one with one thread) and runs them on
 * the pool: the calling thread and the workers take the next chunk from a
 * shared counter until none is left, so a thread the system deschedules
 * (another process on its core) takes fewer instead of stalling the call.
 * The chunks' bounds depend on n, grain and plan.slots only, and fn must
 * give the same bits however the items are grouped into chunks and
 * whichever slot runs one (slot is for scratch).  When the pool is busy
 * (a call from another thread, or from inside a pool task) the same
 * chunks run one after another in the caller, with slot 0.  Returns when
 * all items are done. */
void tfm__parallel_for(tfm__plan plan, int64_t n, int64_t grain,
                       tfm__range_fn fn, void *ctx);

/* tfm__parallel_for for the rows (or columns) of one product, whose bits
 * OpenBLAS may make depend on how many rows a call has (its small-matrix
 * and edge kernels): at most one chunk per thread, bounds n c / chunks as
 * since 1.0, taken from the same shared counter (the caller runs a chunk
 * whose worker has not woken yet). */
void tfm__parallel_for_products(tfm__plan plan, int64_t n, int64_t grain,
                                tfm__range_fn fn, void *ctx);

#endif
