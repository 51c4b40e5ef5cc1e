/* ReLU, GELU (Hendrycks & Gimpel 2016; exact and tanh forms) and SiLU
 * (Elfwing, Uchibe and Doya 2018). */
#include <math.h>

#include "activation.h"

int tfm__activation_valid(tfm_activation activation)
{
    return activation == TFM_ACTIVATION_RELU ||
           activation == TFM_ACTIVATION_GELU ||
           activation == TFM_ACTIVATION_GELU_TANH ||
           activation == TFM_ACTIVATION_SILU;
}

void tfm__activate(float *x, int64_t n, tfm_activation activation)
{
    switch (activation) {
    case TFM_ACTIVATION_RELU:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] > 0.0f ? x[i] : (x[i] != x[i] ? x[i] : 0.0f);
        break;
    case TFM_ACTIVATION_GELU:
        /* x * Phi(x), Phi the standard normal CDF, written with erfc so
         * that negative x keeps its relative precision (1 + erf(x) would
         * cancel). */
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.5f * x[i] * erfcf(-x[i] * (float)M_SQRT1_2);
        break;
    case TFM_ACTIVATION_GELU_TANH: {
        const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            x[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
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
