/* Cross-entropy with ignore_index and label smoothing, and the causal
 * language-model loss (training.h).  Source: torch.nn.functional.
 * cross_entropy, PyTorch 1.13 (aten/src/ATen/native/LossNLL.cpp,
 * cross_entropy_loss_label_smoothing): the smoothing term is
 * -sum_c log p[c] masked to 0 at ignored rows, and with the mean reduction
 * both terms are divided by the number of rows that are not ignored.
 *
 * Everything is checked before anything is written: a first pass over the
 * rows validates them and sums the loss (double precision, log-sum-exp
 * with the row maximum subtracted); the second pass writes dlogits. */
#include <math.h>

#include "base/error.h"
#include "training/loss.h"
#include "kernels/softmax.h"
#include "base/tensor_impl.h"
#include "transformer/training.h"

/* Rows, classes and where each row's target comes from: targets[row], or
 * for the causal loss (shift) ids[row + 1] except at each sequence's last
 * position (row % seq == seq - 1), which has none. */
typedef struct ce_rows {
    const float *x;         /* [rows, classes] */
    int64_t rows, classes;
    const int32_t *targets;
    int64_t seq;            /* > 0: shifted (causal), else direct */
    int32_t ignore_index;
} ce_rows;

static int32_t row_target(const ce_rows *r, int64_t row)
{
    if (r->seq <= 0)
        return r->targets[row];
    if (row % r->seq == r->seq - 1)
        return r->ignore_index;
    return r->targets[row + 1];
}

/* dlogits (NULL: not wanted) [rows, classes] may be r->x itself. */
static tfm_status cross_entropy_rows(const ce_rows *r, float smoothing,
                                     tfm_reduction reduction,
                                     double grad_scale, float *loss,
                                     float *dlogits, const char *what)
{
    if (!(smoothing >= 0.0f && smoothing <= 1.0f))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: label_smoothing %g is not in [0, 1]", what,
                         (double)smoothing);
    if (reduction != TFM_REDUCTION_MEAN && reduction != TFM_REDUCTION_SUM)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: unknown reduction %d (0 mean, 1 sum)", what,
                         (int)reduction);
    const int64_t c = r->classes;
    const double e = smoothing;
    double total = 0.0;
    int64_t kept = 0;
    for (int64_t i = 0; i < r->rows; i++) {
        const float *x = r->x + i * c;
        double sum_x = 0.0;
        for (int64_t j = 0; j < c; j++) {
            if (!isfinite(x[j]))
                return tfm__fail(TFM_ERR_NON_FINITE,
                                 "%s: logits row %lld holds %s at class %lld",
                                 what, (long long)i,
                                 isnan(x[j]) ? "NaN" : "an infinity",
                                 (long long)j);
            sum_x += x[j];
        }
        const int32_t t = row_target(r, i);
        if (t == r->ignore_index)
            continue;
        if (t < 0 || t >= c)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: target %d of row %lld is not in [0, %lld) "
                             "and is not ignore_index %d", what, (int)t,
                             (long long)i, (long long)c, (int)r->ignore_index);
        const double lse = tfm__log_sum_exp(x, c);
        const double nll = lse - x[t];
        const double smooth = (double)c * lse - sum_x;     /* -sum log p */
        total += (1.0 - e) * nll + (e / (double)c) * smooth;
        kept++;
    }
    double scale = 1.0;
    if (reduction == TFM_REDUCTION_MEAN)
        scale = kept > 0 ? 1.0 / (double)kept : 0.0;
    if (dlogits) {
        const double gs = scale * grad_scale;
        for (int64_t i = 0; i < r->rows; i++) {
            const float *x = r->x + i * c;
            float *g = dlogits + i * c;
            const int32_t t = row_target(r, i);
            if (t == r->ignore_index || gs == 0.0) {
                for (int64_t j = 0; j < c; j++)
                    g[j] = 0.0f;
                continue;
            }
            /* (g may be x: read what the row needs before writing it) */
            const double lse = tfm__log_sum_exp(x, c);
            const double xt = x[t];
            const double u = e / (double)c;
            for (int64_t j = 0; j < c; j++)
                g[j] = (float)(gs * (exp((double)x[j] - lse) - u));
            g[t] = (float)(gs * (exp(xt - lse) - u - (1.0 - e)));
        }
    }
    *loss = (float)(total * scale);
    return TFM_OK;
}

/* Checks logits (rank 2 or 3, or exactly 3 when rank3_only) and dlogits. */
static tfm_status check_logits(const tfm_tensor *logits,
                               const tfm_tensor *dlogits, int rank3_only,
                               const char *what)
{
    if (rank3_only ? logits->rank != 3
                   : (logits->rank != 2 && logits->rank != 3))
        return tfm__fail(TFM_ERR_SHAPE,
                         "%s: logits have rank %d, expected %s", what,
                         logits->rank,
                         rank3_only ? "3 [batch, seq, vocab]"
                                    : "2 [N, C] or 3 [B, T, C]");
    if (dlogits)
        return tfm__check_shape(dlogits, "dlogits", logits->rank,
                                logits->shape);
    return TFM_OK;
}

/* The two public losses: check the arguments, then cross-entropy over
 * every row, the causal one with targets shifted by one position
 * (seq = T; 0 for plain rows).  targets_name names the ids argument. */
static tfm_status loss_call(const tfm_tensor *logits, const int32_t *targets,
                            int causal, int32_t ignore_index,
                            float label_smoothing, tfm_reduction reduction,
                            float *loss, tfm_tensor *dlogits,
                            const char *what, const char *targets_name)
{
    if (!logits || !targets || !loss)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "%s: logits, %s and loss are required", what,
                         targets_name);
    tfm_status st = check_logits(logits, dlogits, causal, what);
    if (st != TFM_OK)
        return st;
    const int64_t c = logits->shape[logits->rank - 1];
    ce_rows r = { logits->data, logits->numel / c, c, targets,
                  causal ? logits->shape[1] : 0, ignore_index };
    return cross_entropy_rows(&r, label_smoothing, reduction, 1.0, loss,
                              dlogits ? dlogits->data : NULL, what);
}

tfm_status tfm__cross_entropy(const float *logits, int64_t rows,
                              int64_t classes, const int32_t *targets,
                              int32_t ignore_index, float label_smoothing,
                              tfm_reduction reduction, double grad_scale,
                              float *loss, float *dlogits, const char *what)
{
    ce_rows r = { logits, rows, classes, targets, 0, ignore_index };
    return cross_entropy_rows(&r, label_smoothing, reduction, grad_scale,
                              loss, dlogits, what);
}

tfm_status tfm_cross_entropy(const tfm_tensor *logits, const int32_t *targets,
                             int32_t ignore_index, float label_smoothing,
                             tfm_reduction reduction, float *loss,
                             tfm_tensor *dlogits)
{
    return loss_call(logits, targets, 0, ignore_index, label_smoothing,
                     reduction, loss, dlogits, "tfm_cross_entropy",
                     "targets");
}

tfm_status tfm_causal_lm_loss(const tfm_tensor *logits, const int32_t *ids,
                              int32_t ignore_index, float label_smoothing,
                              tfm_reduction reduction, float *loss,
                              tfm_tensor *dlogits)
{
    return loss_call(logits, ids, 1, ignore_index, label_smoothing,
                     reduction, loss, dlogits, "tfm_causal_lm_loss", "ids");
}
