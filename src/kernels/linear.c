/* The Linear products' door (kernels/linear.h): float32 weights go to
 * OpenBLAS directly (base/gemm.h), stored weights (transformer/weights.h)
 * through tfm__linear_stored (kernels/quant.h). */
#include <string.h>

#include "base/gemm.h"
#include "base/parallel.h"
#include "kernels/linear.h"
#include "kernels/quant.h"
#include "kernels/weight_store.h"

/* A stored weight used from column col of its rows, or with rows of
 * another width (no caller does so today): each output's slice of its
 * row is widened 256 values at a time (tfm__weight_read_row) and summed
 * by OpenBLAS chunk by chunk.  Needs no scratch. */
static void linear_stored_slice(const float *x, int64_t ldx, int64_t n,
                                int64_t in, const float *w,
                                const float *bias, int64_t out, float *y,
                                int64_t ldy)
{
    float chunk[256];
    for (int64_t o = 0; o < out; o++)
        for (int64_t k = 0; k < in; k += 256) {
            const int64_t len = in - k < 256 ? in - k : 256;
            tfm__weight_read_row(w + o * in + k, len, chunk);
            for (int64_t i = 0; i < n; i++) {
                float *yo = y + i * ldy + o;
                if (k == 0)
                    *yo = bias ? bias[o] : 0.0f;
                tfm__sgemm(0, 1, 1, 1, len, 1.0f, x + i * ldx + k, ldx, chunk,
                           len, 1.0f, yo, ldy);
            }
        }
}

/* Float32 rows: y = x W^T + bias by OpenBLAS. */
static void linear_plain(const float *x, int64_t ldx, int64_t n, int64_t in,
                         const float *w, const float *bias, int64_t out,
                         float *y, int64_t ldy)
{
    float beta = 0.0f;
    if (bias) {
        for (int64_t i = 0; i < n; i++)
            memcpy(y + i * ldy, bias, (size_t)out * sizeof(float));
        beta = 1.0f;
    }
    tfm__sgemm(0, 1, n, out, in, 1.0f, x, ldx, w, in, beta, y, ldy);
}

void tfm__linear(const float *x, int64_t ldx, int64_t n, int64_t in,
                 const float *w, const float *bias, int64_t out, float *y,
                 int64_t ldy)
{
    /* Span by span: the output columns of each run of float32 rows, or of
     * one stored weight, are computed by its own product (output columns
     * are independent sums, so the split does not change them). */
    while (out > 0) {
        tfm__wview v;
        int64_t col = 0;
        int stored = 0;
        const int64_t rows =
            tfm__weight_store_span(w, in, out, &stored, &v, &col);
        if (!stored)
            linear_plain(x, ldx, n, in, w, bias, rows, y, ldy);
        else if (col == 0 && v.cols == in)
            tfm__linear_stored(x, ldx, n, in, &v, bias, rows, y, ldy);
        else
            linear_stored_slice(x, ldx, n, in, w, bias, rows, y, ldy);
        w += rows * in;
        bias = bias ? bias + rows : NULL;
        y += rows;
        out -= rows;
    }
}

typedef struct linear_job {
    const float *x, *w, *bias;
    int64_t ldx, n, in, out, ldy;
    float *y;
    int by_rows;
} linear_job;

static void linear_range(void *ctx, int64_t begin, int64_t end, int slot)
{
    const linear_job *j = ctx;
    (void)slot;
    if (j->by_rows)
        tfm__linear(j->x + begin * j->ldx, j->ldx, end - begin, j->in, j->w,
                    j->bias, j->out, j->y + begin * j->ldy, j->ldy);
    else
        tfm__linear(j->x, j->ldx, j->n, j->in, j->w + begin * j->in,
                    j->bias ? j->bias + begin : NULL, end - begin,
                    j->y + begin, j->ldy);
}

/* Work below this many multiply-adds per thread is not worth a hand-off. */
#define TFM_LINEAR_GRAIN_MACS (1 << 17)

void tfm__linear_parallel(const float *x, int64_t ldx, int64_t n, int64_t in,
                          const float *w, const float *bias, int64_t out,
                          float *y, int64_t ldy)
{
    linear_job j = { x, w, bias, ldx, n, in, out, ldy, y, 0 };
    const tfm__plan plan = tfm__plan_now();
    j.by_rows = n >= 16 * (int64_t)plan.slots;
    int64_t items = j.by_rows ? n : out;
    int64_t per_item = j.by_rows ? in * out : n * in;
    int64_t grain = TFM_LINEAR_GRAIN_MACS / (per_item > 0 ? per_item : 1);
    tfm__parallel_for_products(plan, items, grain < 1 ? 1 : grain,
                               linear_range, &j);
}

typedef struct linear_backward_job {
    const float *x, *w, *grad_y;
    int64_t ldx, n, in, out, ldg;
    float *grad_x, *grad_w, *grad_b;
    double *bias_acc;
} linear_backward_job;

/* grad_x rows begin .. end-1 = grad_y rows W. */
static void linear_backward_rows(void *ctx, int64_t begin, int64_t end,
                                 int slot)
{
    const linear_backward_job *j = ctx;
    (void)slot;
    tfm__sgemm(0, 0, end - begin, j->in, j->out, 1.0f,
               j->grad_y + begin * j->ldg, j->ldg, j->w, j->in, 0.0f,
               j->grad_x + begin * j->in, j->in);
}

/* grad_w rows (outputs) begin .. end-1 += grad_y[:, begin..end)^T x, and
 * the same outputs' bias gradient, summed over the rows in double. */
static void linear_backward_outputs(void *ctx, int64_t begin, int64_t end,
                                    int slot)
{
    const linear_backward_job *j = ctx;
    (void)slot;
    if (j->grad_w)
        tfm__sgemm(1, 0, end - begin, j->in, j->n, 1.0f, j->grad_y + begin,
                   j->ldg, j->x, j->ldx, 1.0f, j->grad_w + begin * j->in,
                   j->in);
    if (j->grad_b) {
        double *acc = j->bias_acc;
        for (int64_t o = begin; o < end; o++)
            acc[o] = 0.0;
        for (int64_t r = 0; r < j->n; r++) {
            const float *g = j->grad_y + r * j->ldg;
            for (int64_t o = begin; o < end; o++)
                acc[o] += g[o];
        }
        for (int64_t o = begin; o < end; o++)
            j->grad_b[o] += (float)acc[o];
    }
}

/* The backward's blocks: TFM_LINEAR_BWD_BLOCK output rows of the weight
 * gradient, or rows of the input gradient, per product, fixed by the
 * shapes alone: the same products (so the same bits) at every thread
 * count, whichever thread runs them. */
#define TFM_LINEAR_BWD_BLOCK 64

typedef struct linear_backward_blocks {
    const linear_backward_job *job;
    int64_t total;
    void (*fn)(void *, int64_t, int64_t, int);
} linear_backward_blocks;

static void linear_backward_block(void *ctx, int64_t begin, int64_t end,
                                  int slot)
{
    const linear_backward_blocks *b = ctx;
    for (int64_t k = begin; k < end; k++) {
        const int64_t lo = k * TFM_LINEAR_BWD_BLOCK;
        const int64_t hi = lo + TFM_LINEAR_BWD_BLOCK < b->total
                               ? lo + TFM_LINEAR_BWD_BLOCK : b->total;
        b->fn((void *)b->job, lo, hi, slot);
    }
}

static void linear_backward_split(const tfm__plan plan, int64_t total,
                                  int64_t grain,
                                  void (*fn)(void *, int64_t, int64_t, int),
                                  const linear_backward_job *j)
{
    linear_backward_blocks b = { j, total, fn };
    const int64_t blocks = (total + TFM_LINEAR_BWD_BLOCK - 1) /
                           TFM_LINEAR_BWD_BLOCK;
    int64_t g = grain / TFM_LINEAR_BWD_BLOCK;
    tfm__parallel_for(plan, blocks, g < 1 ? 1 : g, linear_backward_block, &b);
}

void tfm__linear_backward(const float *x, int64_t ldx, int64_t n, int64_t in,
                          const float *w, int64_t out, const float *grad_y,
                          int64_t ldg, float *grad_x, float *grad_w,
                          float *grad_b, double *bias_acc)
{
    if (n < 1)
        return;
    linear_backward_job j = { x, w, grad_y, ldx, n, in, out, ldg,
                              grad_x, grad_w, grad_b, bias_acc };
    const tfm__plan plan = tfm__plan_now();
    /* Parameter gradients first: they read x, which grad_x may replace. */
    if (grad_w || grad_b) {
        const int64_t per = n * in > 0 ? n * in : 1;
        linear_backward_split(plan, out, TFM_LINEAR_GRAIN_MACS / per,
                              linear_backward_outputs, &j);
    }
    if (grad_x) {
        const int64_t macs = in * out > 0 ? in * out : 1;
        linear_backward_split(plan, n, TFM_LINEAR_GRAIN_MACS / macs,
                              linear_backward_rows, &j);
    }
}
