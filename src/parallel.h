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

/* fn(ctx, begin, end, slot) computes items begin .. end-1; slot (0 ..
 * tfm__parallel_slots()-1) identifies the thread, for per-thread scratch.
 * It must not fail. */
typedef void (*tfm__range_fn)(void *ctx, int64_t begin, int64_t end,
                              int slot);

/* How many slots a parallel call may use (the thread count); callers size
 * per-thread scratch with it. */
int tfm__parallel_slots(void);

/* Splits items 0 .. n-1 into at most tfm__parallel_slots() contiguous
 * chunks of at least `grain` items and runs them on the pool, the calling
 * thread taking the first.  When the pool is busy (a call from another
 * thread, or from inside a pool task) everything runs in the caller.
 * Returns when all items are done. */
void tfm__parallel_for(int64_t n, int64_t grain, tfm__range_fn fn, void *ctx);

#endif
