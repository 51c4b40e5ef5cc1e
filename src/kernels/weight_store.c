/* The table of stored weights (weight_store.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/mapping.h"
#include "kernels/weight_store.h"

typedef struct entry {
    const float *base, *end; /* the float32 range */
    tfm__wview view;
    tfm__weight_owner owner;
} entry;

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static entry *table;
static size_t n_entries, cap_entries;
static atomic_size_t n_published; /* n_entries, for the lock-free check */

/* Index of the first entry whose base is > p. */
static size_t upper(const float *p)
{
    size_t lo = 0, hi = n_entries;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (table[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* e's view from the row holding w (a pointer inside e's range), and w's
 * column in that row. */
static void view_at(const entry *e, const float *w, tfm__wview *view,
                    int64_t *col)
{
    const int64_t off = w - e->base;
    const int64_t row = off / e->view.cols;
    *view = e->view;
    view->data += row * e->view.row_bytes;
    view->rows -= row;
    *col = off % e->view.cols;
}

tfm_status tfm__weight_store_reserve(size_t n)
{
    pthread_rwlock_wrlock(&lock);
    if (n_entries + n > cap_entries) {
        entry *t = tfm__grow(table, &cap_entries, n_entries + n, sizeof *t,
                             64);
        if (!t) {
            pthread_rwlock_unlock(&lock);
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                             "cannot grow the table of stored weights");
        }
        table = t;
    }
    pthread_rwlock_unlock(&lock);
    return TFM_OK;
}

void tfm__weight_store_put(const float *base, const tfm__wview *view,
                           tfm__weight_owner owner, tfm__weight_owner *old)
{
    pthread_rwlock_wrlock(&lock);
    *old = (tfm__weight_owner){ 0 };
    const size_t at = upper(base);
    const entry e = { base, base + view->rows * view->cols, *view, owner };
    if (at > 0 && table[at - 1].base == base) {
        *old = table[at - 1].owner;
        table[at - 1] = e;
    } else {
        /* Room was reserved (tfm__weight_store_reserve). */
        memmove(table + at + 1, table + at,
                (n_entries - at) * sizeof *table);
        table[at] = e;
        n_entries++;
    }
    atomic_store(&n_published, n_entries);
    pthread_rwlock_unlock(&lock);
}

void tfm__weight_store_take(const float *base, tfm__weight_owner *old)
{
    pthread_rwlock_wrlock(&lock);
    *old = (tfm__weight_owner){ 0 };
    const size_t at = upper(base);
    if (at > 0 && table[at - 1].base == base) {
        *old = table[at - 1].owner;
        memmove(table + at - 1, table + at, (n_entries - at) * sizeof *table);
        n_entries--;
        atomic_store(&n_published, n_entries);
    }
    pthread_rwlock_unlock(&lock);
}

void tfm__weight_owner_release(tfm__weight_owner *owner)
{
    if (owner->owned)
        tfm__free_large(owner->owned, owner->owned_size);
    tfm__mapping_release(owner->map);
    *owner = (tfm__weight_owner){ 0 };
}

int tfm__weight_store_find(const float *w, tfm__wview *view, int64_t *col)
{
    if (atomic_load_explicit(&n_published, memory_order_acquire) == 0)
        return 0;
    int found = 0;
    pthread_rwlock_rdlock(&lock);
    const size_t at = upper(w);
    if (at > 0 && w < table[at - 1].end) {
        view_at(&table[at - 1], w, view, col);
        found = 1;
    }
    pthread_rwlock_unlock(&lock);
    return found;
}

int64_t tfm__weight_store_span(const float *w, int64_t in, int64_t out,
                               int *stored, tfm__wview *view, int64_t *col)
{
    *stored = 0;
    if (atomic_load_explicit(&n_published, memory_order_acquire) == 0)
        return out;
    int64_t rows = out;
    pthread_rwlock_rdlock(&lock);
    const size_t at = upper(w);
    if (at > 0 && w < table[at - 1].end) {
        const entry *e = &table[at - 1];
        view_at(e, w, view, col);
        *stored = 1;
        /* Rows of `in` floats wholly inside the entry (at least one). */
        const int64_t fit = (e->end - w) / in;
        rows = fit < 1 ? 1 : fit < out ? fit : out;
    } else if (at < n_entries && table[at].base < w + out * in) {
        const int64_t fit = (table[at].base - w) / in;
        rows = fit < 1 ? 1 : fit;
    }
    pthread_rwlock_unlock(&lock);
    return rows;
}

void tfm__weight_read_row(const float *src, int64_t n, float *dst)
{
    tfm__wview v;
    int64_t col = 0;
    if (!tfm__weight_store_find(src, &v, &col)) {
        memcpy(dst, src, (size_t)n * sizeof *dst);
        return;
    }
    if (col == 0 && n == v.cols) {
        tfm__widen_row(v.dtype, v.data, n, dst);
        return;
    }
    /* Part of a row: widen the blocks that hold it, 256 values at a time
     * (row starts are block-aligned, so whole blocks are). */
    const int64_t block = v.dtype == TFM_DTYPE_Q8_0 ||
                                  v.dtype == TFM_DTYPE_Q4_0
                              ? TFM__QK
                              : 1;
    float tmp[256 + TFM__QK];
    int64_t c = col, done = 0;
    while (done < n) {
        const int64_t c0 = c - c % block;
        int64_t len = c0 + 256 <= v.cols ? 256 : v.cols - c0;
        const int64_t bytes_before = tfm__dtype_row_bytes(v.dtype, c0);
        tfm__widen_row(v.dtype, v.data + bytes_before, len, tmp);
        int64_t take = len - (c - c0);
        if (take > n - done)
            take = n - done;
        memcpy(dst + done, tmp + (c - c0), (size_t)take * sizeof *dst);
        done += take;
        c += take;
    }
}
