/* Learning-rate multipliers for LambdaLR-style schedules (training.h):
 * the inverse-square-root warm-up of Vaswani et al. 2017 (section 5.3) and
 * linear warm-up then cosine decay (Loshchilov and Hutter 2017, SGDR, one
 * half cycle, as Hugging Face's get_cosine_schedule_with_warmup). */
#include <math.h>

#include "base/error.h"
#include "transformer/training.h"

tfm_status tfm_lr_inverse_sqrt_warmup(int64_t s, int64_t d_model,
                                      int64_t warmup_steps, double *factor)
{
    if (!factor)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_lr_inverse_sqrt_warmup: factor is NULL");
    if (s < 0 || d_model < 1 || warmup_steps < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_lr_inverse_sqrt_warmup: step %lld, d_model "
                         "%lld, warmup_steps %lld: expected step >= 0, "
                         "d_model >= 1, warmup_steps >= 1", (long long)s,
                         (long long)d_model, (long long)warmup_steps);
    const double n = s > 0 ? (double)s : 1.0;
    const double a = 1.0 / sqrt(n);
    const double b = n * pow((double)warmup_steps, -1.5);
    *factor = (a < b ? a : b) / sqrt((double)d_model);
    return TFM_OK;
}

tfm_status tfm_lr_warmup_cosine(int64_t s, int64_t warmup_steps,
                                int64_t total_steps, double min_factor,
                                double *factor)
{
    if (!factor)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "tfm_lr_warmup_cosine: factor is NULL");
    if (s < 0 || warmup_steps < 0 || total_steps < warmup_steps ||
        !(min_factor >= 0.0 && min_factor <= 1.0))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "tfm_lr_warmup_cosine: step %lld, warmup_steps "
                         "%lld, total_steps %lld, min_factor %g: expected "
                         "step >= 0, 0 <= warmup_steps <= total_steps, "
                         "min_factor in [0, 1]", (long long)s,
                         (long long)warmup_steps, (long long)total_steps,
                         min_factor);
    if (s < warmup_steps) {
        *factor = (double)s / (double)warmup_steps;
        return TFM_OK;
    }
    const int64_t span = total_steps - warmup_steps > 1
                             ? total_steps - warmup_steps : 1;
    double q = (double)(s - warmup_steps) / (double)span;
    if (q > 1.0)
        q = 1.0;
    const double pi = 3.14159265358979323846;
    *factor = min_factor + (1.0 - min_factor) * 0.5 * (1.0 + cos(pi * q));
    return TFM_OK;
}
