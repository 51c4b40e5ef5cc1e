/* Softmax (softmax.h).
 *
 * The exponential is a Cephes-style polynomial (range reduction by ln 2,
 * degree-6 polynomial, scaling by 2^n through the exponent bits), written
 * without branches so that the compiler vectorises the row loop; the
 * function is compiled twice (AVX2 and baseline) and the loader picks the
 * one the processor runs.  Its relative error is below 2e-7 on the range
 * softmax uses (x <= 0); inputs below -87.3 (e^-87.3 is about 1e-38) give
 * exactly 0, so masked (-inf) entries are exactly 0.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "softmax.h"

static inline float exp_nonpositive(float x)
{
    const float lo = -87.3365447f;
    float xc = x < lo ? lo : x;
    float n = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r2 + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < lo ? 0.0f : y * scale;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TFM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TFM_CLONES
#endif

TFM_CLONES void tfm__softmax_row(float *x, int64_t n)
{
    float max = -INFINITY;
    int has_nan = 0;
    for (int64_t j = 0; j < n; j++) {
        max = x[j] > max ? x[j] : max;
        has_nan |= x[j] != x[j];
    }
    if (has_nan) {
        for (int64_t j = 0; j < n; j++)
            x[j] = NAN;
        return;
    }
    if (max == -INFINITY) {
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    if (max == INFINITY) {
        /* exp(inf - inf) is NaN, as the exact formula gives. */
        for (int64_t j = 0; j < n; j++)
            x[j] = NAN;
        return;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        float e = exp_nonpositive(x[j] - max);
        x[j] = e;
        sum += e;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < n; j++)
        x[j] *= inv;
}

TFM_CLONES float tfm__softmax_online_step(float *x, int64_t n, float *m,
                                          float *l)
{
    float max = -INFINITY;
    int has_nan = 0;
    for (int64_t j = 0; j < n; j++) {
        max = x[j] > max ? x[j] : max;
        has_nan |= x[j] != x[j];
    }
    if (has_nan || max == INFINITY) {
        for (int64_t j = 0; j < n; j++)
            x[j] = NAN;
        *l = NAN;
        return 1.0f;
    }
    const float m_new = max > *m ? max : *m;
    if (m_new == -INFINITY) {
        /* Every key so far is masked. */
        memset(x, 0, (size_t)n * sizeof *x);
        return 1.0f;
    }
    const float alpha = exp_nonpositive(*m - m_new);
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        float e = exp_nonpositive(x[j] - m_new);
        x[j] = e;
        sum += e;
    }
    *l = *l * alpha + (float)sum;
    *m = m_new;
    return alpha;
}
