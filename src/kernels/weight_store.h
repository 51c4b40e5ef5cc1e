/* Internal: where the stored weights are (transformer/weights.h).
 *
 * A parameter's float pointer is its identity: the module code that reads
 * a weight names it by the pointer into its module's storage, as it did
 * when every weight was float32 (m->w_q, f->w1 + begin * in, the tied
 * head's embedding table).  When a weight is stored in another type (or
 * used in place from a file mapping), its float32 range keeps its address
 * but holds nothing: the pages it fills wholly are released and made
 * inaccessible (nn/weight_bind.c), and this table maps the range to the
 * stored bytes.  The two doors that read weights — the Linear product
 * (kernels/linear.h) and the embedding row read (tfm__weight_read_rows) —
 * look the pointer up here; nothing else reads a convertible weight.
 *
 * The table is process-wide, sorted by address, guarded by a
 * reader-writer lock; lookups when no weight is stored cost one atomic
 * load. */
#ifndef TFM_SRC_WEIGHT_STORE_H
#define TFM_SRC_WEIGHT_STORE_H

#include <stdint.h>

#include <stddef.h>

#include "kernels/quant.h"

/* What holds a stored weight's bytes: memory it owns (tfm__free_large
 * with size), or a file mapping it holds a reference to; or neither. */
typedef struct tfm__weight_owner {
    void *owned;
    size_t owned_size;
    struct tfm__mapping *map;
} tfm__weight_owner;

/* Makes room for n more entries, so that the next n calls of
 * tfm__weight_store_put cannot fail: TFM_OK or TFM_ERR_OUT_OF_MEMORY
 * (message set). */
tfm_status tfm__weight_store_reserve(size_t n);

/* Registers the float32 range [base, base + view->rows * view->cols) as
 * stored as view, its bytes held by owner (the table takes it over).  An
 * entry already at base is replaced and its owner put in *old (zeroed
 * when none).  Cannot fail after tfm__weight_store_reserve(1). */
void tfm__weight_store_put(const float *base, const tfm__wview *view,
                           tfm__weight_owner owner, tfm__weight_owner *old);

/* Removes the entry at base, giving its owner back in *old (zeroed when
 * there is none). */
void tfm__weight_store_take(const float *base, tfm__weight_owner *old);

/* Releases what owner holds (frees its memory, drops its mapping). */
void tfm__weight_owner_release(tfm__weight_owner *owner);

/* Whether w lies in a stored range: then *view is that range's view
 * starting at w's row (rows counted from there), *col the column of w in
 * its row; returns 0 for a float32 weight (view untouched). */
int tfm__weight_store_find(const float *w, tfm__wview *view, int64_t *col);

/* The first span of the rows [w, w + out * in) of a weight seen as
 * rows of `in` floats: returns its row count (1 .. out) and whether it
 * is stored (then *view and *col as tfm__weight_store_find gives them;
 * the span ends where that entry ends) or plain float32 (the span ends
 * where the next stored entry begins).  Rows of two parameters that
 * follow each other in memory (a gated network's W1 | W3) are two
 * spans. */
int64_t tfm__weight_store_span(const float *w, int64_t in, int64_t out,
                               int *stored, tfm__wview *view, int64_t *col);

/* dst [n] = the n values starting at src, a row (or part of a row) of a
 * weight, widened when stored (an embedding lookup); n <= the row's
 * length from src.  Cannot fail. */
void tfm__weight_read_row(const float *src, int64_t n, float *dst);

#endif
