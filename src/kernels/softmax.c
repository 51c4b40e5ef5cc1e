/* Softmax (softmax.h).
 *
 * The exponential is vmath.h's branch-free polynomial, so that the
 * compiler vectorises the row loops; the functions are compiled twice (AVX2
 * and baseline) and the loader picks the one the processor runs.
 * tfm__log_sum_exp and tfm__log_softmax_row (cross-entropy, beam search)
 * use libm's exp in double instead: their results are compared with
 * PyTorch's to 1e-5 and summed over many steps.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/softmax.h"
#include "kernels/vmath.h"

/* Lanes of the partial maxima and sums: the loops below run over
 * TFM_LANES independent accumulators, two eight-float vectors (vmath.h),
 * lane l taking the entries j with j mod 16 = l. */
#define TFM_LANES 16

/* Largest entry of x[0..n-1] (-inf for none); NaN entries are skipped. */
static inline TFM_ALWAYS_INLINE float row_max(const float *x, int64_t n)
{
    tfm__v8 a = tfm__v8_splat(-INFINITY), b = a;
    int64_t j = 0;
    for (; j + TFM_LANES <= n; j += TFM_LANES) {
        const tfm__v8 u = tfm__v8_load(x + j), w = tfm__v8_load(x + j + 8);
        a = tfm__v8_select(u > a, u, a);
        b = tfm__v8_select(w > b, w, b);
    }
    float max = -INFINITY;
    for (; j < n; j++)
        max = x[j] > max ? x[j] : max;
    for (int l = 0; l < 8; l++)
        max = a[l] > max ? a[l] : max;
    for (int l = 0; l < 8; l++)
        max = b[l] > max ? b[l] : max;
    return max;
}

/* x[j] <- exp(x[j] - max) for all j; returns their sum (NaN when some x[j]
 * is NaN): the lanes' float sums, then the tail and the lanes in order in
 * double. */
static inline TFM_ALWAYS_INLINE double exp_and_sum(float *x, int64_t n, float max)
{
    const tfm__v8 m = tfm__v8_splat(max);
    tfm__v8 a = tfm__v8_splat(0.0f), b = a;
    int64_t j = 0;
    for (; j + TFM_LANES <= n; j += TFM_LANES) {
        const tfm__v8 u = tfm__v8_exp_nonpositive(tfm__v8_load(x + j) - m);
        const tfm__v8 w =
            tfm__v8_exp_nonpositive(tfm__v8_load(x + j + 8) - m);
        tfm__v8_store(x + j, u);
        tfm__v8_store(x + j + 8, w);
        a += u;
        b += w;
    }
    double sum = 0.0;
    for (; j < n; j++) {
        float e = tfm__exp_nonpositive(x[j] - max);
        x[j] = e;
        sum += e;
    }
    for (int l = 0; l < 8; l++)
        sum += a[l];
    for (int l = 0; l < 8; l++)
        sum += b[l];
    return sum;
}

static void fill_nan(float *x, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        x[j] = NAN;
}

TFM_CLONES void tfm__softmax_row(float *x, int64_t n)
{
    const float max = row_max(x, n);
    if (max == INFINITY) {
        /* exp(inf - inf) is NaN, as the exact formula gives. */
        fill_nan(x, n);
        return;
    }
    if (max == -INFINITY) {
        /* Every entry masked (or NaN: the sum below tells). */
        int has_nan = 0;
        for (int64_t j = 0; j < n; j++)
            has_nan |= x[j] != x[j];
        if (has_nan)
            fill_nan(x, n);
        else
            memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    const double sum = exp_and_sum(x, n, max);
    if (sum != sum) {
        fill_nan(x, n);
        return;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < n; j++)
        x[j] *= inv;
}

TFM_CLONES float tfm__softmax_online_step(float *x, int64_t n, float *m,
                                          float *l)
{
    const float max = row_max(x, n);
    if (max == INFINITY) {
        fill_nan(x, n);
        *l = NAN;
        return 1.0f;
    }
    const float m_new = max > *m ? max : *m;
    if (m_new == -INFINITY) {
        /* Every key so far is masked (or NaN: then the row is NaN). */
        int has_nan = 0;
        for (int64_t j = 0; j < n; j++)
            has_nan |= x[j] != x[j];
        if (has_nan) {
            fill_nan(x, n);
            *l = NAN;
        } else {
            memset(x, 0, (size_t)n * sizeof *x);
        }
        return 1.0f;
    }
    const float alpha = tfm__exp_nonpositive(*m - m_new);
    const double sum = exp_and_sum(x, n, m_new);
    if (sum != sum) {
        fill_nan(x, n);
        *l = NAN;
        return 1.0f;
    }
    *l = *l * alpha + (float)sum;
    *m = m_new;
    return alpha;
}

double tfm__log_sum_exp(const float *x, int64_t n)
{
    double m = x[0];
    for (int64_t j = 1; j < n; j++)
        if (x[j] > m)
            m = x[j];
    double s = 0.0;
    for (int64_t j = 0; j < n; j++)
        s += exp((double)x[j] - m);
    return m + log(s);
}

void tfm__log_softmax_row(const float *x, int64_t n, float *out)
{
    float max = -INFINITY;
    int bad = 0;
    for (int64_t j = 0; j < n; j++) {
        bad |= x[j] != x[j] || x[j] == INFINITY;
        max = x[j] > max ? x[j] : max;
    }
    if (bad || max == -INFINITY) {
        for (int64_t j = 0; j < n; j++)
            out[j] = NAN;
        return;
    }
    const double lse = tfm__log_sum_exp(x, n);
    for (int64_t j = 0; j < n; j++)
        out[j] = (float)((double)x[j] - lse);
}
