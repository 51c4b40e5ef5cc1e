/* ReLU, GELU (Hendrycks & Gimpel 2016; exact and tanh forms) and SiLU
 * (Elfwing, Uchibe and Doya 2018). */
#include <math.h>

#include "kernels/activation.h"
#include "kernels/vmath.h"

int tfm__activation_valid(tfm_activation activation)
{
    return activation == TFM_ACTIVATION_RELU ||
           activation == TFM_ACTIVATION_GELU ||
           activation == TFM_ACTIVATION_GELU_TANH ||
           activation == TFM_ACTIVATION_SILU;
}

TFM_CLONES void tfm__activate(float *x, int64_t n, tfm_activation activation)
{
    switch (activation) {
    case TFM_ACTIVATION_RELU:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] > 0.0f ? x[i] : (x[i] != x[i] ? x[i] : 0.0f);
        break;
    case TFM_ACTIVATION_GELU:
        /* x * Phi(x), Phi the standard normal CDF through erfc, so that
         * negative x keeps its relative precision (1 + erf(x) would
         * cancel); vmath.h's branch-free form, which the loop
         * vectorises. */
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] * tfm__normal_cdf(x[i]);
        break;
    case TFM_ACTIVATION_GELU_TANH: {
        const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            x[i] = 0.5f * v *
                   (1.0f + tfm__tanh(c * (v + 0.044715f * v * v * v)));
        }
        break;
    }
    case TFM_ACTIVATION_SILU:
        /* x / (1 + exp(-x)): exp overflows to inf for x < -88, giving
         * x / inf = -0 (the limit); NaN stays NaN. */
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] / (1.0f + expf(-x[i]));
        break;
    case TFM_ACTIVATION_COUNT: /* not an activation; refused by callers */
        break;
    }
}

/* Derivatives (PyTorch's autograd formulas, derivatives.yaml):
 *   ReLU       1 where x > 0, else 0;
 *   GELU       Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
 *   GELU tanh  with u = c (x + a x^3), t = tanh(u), c = sqrt(2 / pi),
 *              a = 0.044715:  0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2);
 *   SiLU       s (1 + x (1 - s)),  s = 1 / (1 + exp(-x)). */
TFM_CLONES void tfm__activation_backward(const float *pre, float *grad, int64_t n,
                              tfm_activation activation)
{
    switch (activation) {
    case TFM_ACTIVATION_RELU:
        for (int64_t i = 0; i < n; i++)
            grad[i] = pre[i] > 0.0f ? grad[i] : 0.0f;
        break;
    case TFM_ACTIVATION_GELU: {
        const float inv_sqrt_2pi = 0.3989422804014327f;
        for (int64_t i = 0; i < n; i++) {
            const float x = pre[i];
            const float cdf = tfm__normal_cdf(x);
            const float pdf =
                inv_sqrt_2pi * tfm__exp_nonpositive(-0.5f * x * x);
            grad[i] *= cdf + x * pdf;
        }
        break;
    }
    case TFM_ACTIVATION_GELU_TANH: {
        const float c = 0.7978845608028654f, a = 0.044715f;
        for (int64_t i = 0; i < n; i++) {
            const float x = pre[i];
            const float t = tfm__tanh(c * (x + a * x * x * x));
            grad[i] *= 0.5f * (1.0f + t) +
                       0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * a * x * x);
        }
        break;
    }
    case TFM_ACTIVATION_SILU:
        for (int64_t i = 0; i < n; i++) {
            const float s = 1.0f / (1.0f + expf(-pre[i]));
            grad[i] *= s * (1.0f + pre[i] * (1.0f - s));
        }
        break;
    case TFM_ACTIVATION_COUNT:
        break;
    }
}
