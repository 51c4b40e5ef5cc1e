/* ViT's patch embedding (layers.h): torch.nn.Conv2d with kernel = stride
 * = P as one matrix product over the unfolded patches (Dosovitskiy et al.
 * 2021, eq. 1). */
#include <string.h>

#include "base/error.h"
#include "kernels/linear.h"
#include "base/parallel.h"
#include "nn/patch_embedding.h"
#include "base/tensor_impl.h"
#include "transformer/layers.h"
#include "base/workspace.h"

static tfm_status patch_macs(const tfm_module *m, int64_t batch, int64_t L,
                             int64_t S, int64_t *acc)
{
    const tfm__patch_embedding *pe = (const tfm__patch_embedding *)m;
    const int64_t P = pe->patch_size;
    (void)S;
    /* L: the patches of one image. */
    if (!tfm__macs_add(acc, batch, L, pe->in_channels * P * P, pe->d_model))
        return tfm__fail(TFM_ERR_OVERFLOW, "MAC count overflows int64");
    return TFM_OK;
}

static const tfm__module_ops patch_ops = { NULL, patch_macs };

tfm_status tfm__patch_embedding_new(int64_t d_model, int64_t in_channels,
                                    int64_t patch_size, int64_t image_size,
                                    int bias, tfm__patch_embedding **out)
{
    if (d_model < 1 || in_channels < 1 || patch_size < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "d_model (%lld), in_channels (%lld) and patch_size "
                         "(%lld) must be at least 1", (long long)d_model,
                         (long long)in_channels, (long long)patch_size);
    if (d_model > INT32_MAX || in_channels > INT32_MAX ||
        patch_size > 46340 || image_size > INT32_MAX ||
        in_channels * patch_size * patch_size > INT32_MAX)
        return tfm__fail(TFM_ERR_OVERFLOW, "patch embedding sizes must fit "
                         "in 32 bits (in_channels * patch_size^2 included)");
    if (image_size < 0 || image_size % patch_size != 0)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "image_size %lld must be 0 (any) or a positive "
                         "multiple of patch_size %lld", (long long)image_size,
                         (long long)patch_size);
    tfm__patch_embedding *pe = (tfm__patch_embedding *)tfm__module_alloc(
        sizeof *pe, TFM_MODULE_PATCH_EMBEDDING, &patch_ops);
    if (!pe)
        return TFM_ERR_OUT_OF_MEMORY;
    pe->d_model = d_model;
    pe->in_channels = in_channels;
    pe->patch_size = patch_size;
    pe->image_size = image_size;
    /* Conv2d's reset_parameters: kaiming_uniform_(a = sqrt(5)) on the
     * weight, fan_in = C P P, and U(+-1/sqrt(fan_in)) on the bias. */
    const int64_t fan_in = in_channels * patch_size * patch_size;
    tfm__param_spec specs[2] = {
        { "weight", 4, { d_model, in_channels, patch_size, patch_size },
          &pe->weight, .init = TFM__INIT_LINEAR_BIAS, .init_fan_in = fan_in },
        { "bias", 1, { d_model }, &pe->bias, .init = TFM__INIT_LINEAR_BIAS,
          .init_fan_in = fan_in },
    };
    tfm_status st = tfm__module_own_params(&pe->base, specs, bias ? 2 : 1);
    if (st != TFM_OK) {
        tfm_module_free(&pe->base);
        return st;
    }
    *out = pe;
    return TFM_OK;
}

tfm_status tfm_patch_embedding_create(int64_t d_model, int64_t in_channels,
                                      int64_t patch_size, int64_t image_size,
                                      int bias, tfm_module **out)
{
    if (!out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "out is NULL");
    tfm__patch_embedding *pe = NULL;
    tfm_status st = tfm__patch_embedding_new(d_model, in_channels, patch_size,
                                             image_size, bias, &pe);
    if (st == TFM_OK)
        *out = &pe->base;
    return st;
}

tfm_status tfm__patch_embedding_check(const tfm__patch_embedding *pe,
                                      const tfm_tensor *x, int64_t *n_patches)
{
    if (!x)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "x (the pixel values) is "
                         "NULL");
    const int64_t P = pe->patch_size, C = pe->in_channels;
    if (x->rank != 4 || x->shape[1] != C)
        return tfm__fail(TFM_ERR_SHAPE, "pixel values must be [batch, %lld, "
                         "height, width] (rank 4), got rank %d with %lld "
                         "channels", (long long)C, x->rank,
                         (long long)(x->rank > 1 ? x->shape[1] : 0));
    const int64_t H = x->shape[2], W = x->shape[3];
    if (H % P != 0 || W % P != 0)
        return tfm__fail(TFM_ERR_SHAPE, "image height %lld and width %lld "
                         "must be multiples of the patch size %lld",
                         (long long)H, (long long)W, (long long)P);
    if (pe->image_size > 0 && (H != pe->image_size || W != pe->image_size))
        return tfm__fail(TFM_ERR_SHAPE, "image of %lld x %lld pixels: this "
                         "patch embedding takes %lld x %lld (image_size)",
                         (long long)H, (long long)W,
                         (long long)pe->image_size,
                         (long long)pe->image_size);
    *n_patches = (H / P) * (W / P);
    return TFM_OK;
}

/* cols [B*N, C*P*P] <- the patches of x [B, C, H, W] (im2col without
 * overlap): row (b, i, j), column (c, u, v) = x[b, c, i P + u, j P + v].
 * fold nonzero runs the other way, x <- cols (every pixel in one patch). */
static void unfold(const tfm__patch_embedding *pe, int64_t B, int64_t H,
                   int64_t W, float *x, float *cols, int fold)
{
    const int64_t P = pe->patch_size, C = pe->in_channels;
    const int64_t gh = H / P, gw = W / P, k = C * P * P;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < gh; i++)
            for (int64_t j = 0; j < gw; j++) {
                float *row = cols + ((b * gh + i) * gw + j) * k;
                for (int64_t c = 0; c < C; c++)
                    for (int64_t u = 0; u < P; u++) {
                        float *px = x + ((b * C + c) * H + i * P + u) * W +
                                    j * P;
                        float *cl = row + (c * P + u) * P;
                        if (fold)
                            memcpy(px, cl, (size_t)P * sizeof(float));
                        else
                            memcpy(cl, px, (size_t)P * sizeof(float));
                    }
            }
}

tfm_status tfm__patch_embedding_run(const tfm__patch_embedding *pe,
                                    const tfm_tensor *x, float *out)
{
    const int64_t B = x->shape[0], H = x->shape[2], W = x->shape[3];
    const int64_t P = pe->patch_size, k = pe->in_channels * P * P;
    const int64_t rows = B * (H / P) * (W / P);
    tfm__ws_mark mark = tfm__ws_save();
    float *cols = tfm__ws_floats((size_t)(rows * k));
    if (!cols) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate the %lld x "
                         "%lld unfolded patches", (long long)rows,
                         (long long)k);
    }
    unfold(pe, B, H, W, x->data, cols, 0);
    /* out [rows, d] = cols [rows, k] weight^T (weight as [d, k]) + bias. */
    tfm__linear(cols, k, rows, k, pe->weight, pe->bias, pe->d_model, out,
                pe->d_model);
    tfm__ws_restore(mark);
    return TFM_OK;
}

/* out's shape [B, N, d] for x (checked): TFM_ERR_SHAPE (message set). */
static tfm_status check_out(const tfm__patch_embedding *pe,
                            const tfm_tensor *x, int64_t n,
                            const tfm_tensor *out, const char *what)
{
    const int64_t shape[3] = { x->shape[0], n, pe->d_model };
    return tfm__check_shape(out, what, 3, shape);
}

static int overlaps(const tfm_tensor *a, const tfm_tensor *b)
{
    return a->data < b->data + b->numel && b->data < a->data + a->numel;
}

tfm_status tfm_patch_embedding_forward(const tfm_module *pe,
                                       const tfm_tensor *x, tfm_tensor *out)
{
    tfm_status st = tfm__module_check(pe, TFM_MODULE_PATCH_EMBEDDING,
                                      "patch embedding");
    if (st != TFM_OK)
        return st;
    const tfm__patch_embedding *p = (const tfm__patch_embedding *)pe;
    int64_t n = 0;
    if ((st = tfm__patch_embedding_check(p, x, &n)) ||
        (st = check_out(p, x, n, out, "out")))
        return st;
    if (overlaps(x, out))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "out must not overlap x");
    /* Into scratch first, so that out is untouched on error. */
    tfm__ws_mark mark = tfm__ws_save();
    float *y = tfm__ws_floats((size_t)out->numel);
    if (!y) {
        tfm__ws_restore(mark);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate the patch "
                         "embedding's output scratch");
    }
    st = tfm__patch_embedding_run(p, x, y);
    if (st == TFM_OK)
        memcpy(out->data, y, (size_t)out->numel * sizeof(float));
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm_patch_embedding_backward(tfm_module *pe, const tfm_tensor *x,
                                        const tfm_tensor *grad_output,
                                        tfm_tensor *grad_input)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_patch_embedding_backward";
    tfm_status st = tfm__module_check(pe, TFM_MODULE_PATCH_EMBEDDING,
                                      "patch embedding");
    if (st != TFM_OK)
        return st;
    const tfm__patch_embedding *p = (const tfm__patch_embedding *)pe;
    int64_t n = 0;
    if (!grad_output)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: grad_output is NULL",
                         what);
    if ((st = tfm__patch_embedding_check(p, x, &n)) ||
        (st = check_out(p, x, n, grad_output, "grad_output")))
        return st;
    if (grad_input &&
        (st = tfm__check_shape(grad_input, "grad_input", 4, x->shape)))
        return st;
    if (!tfm__all_finite(grad_output->data, grad_output->numel))
        return tfm__fail(TFM_ERR_NON_FINITE, "%s: grad_output holds NaN or "
                         "infinity", what);
    if (grad_input && overlaps(grad_input, grad_output))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "%s: grad_input overlaps "
                         "grad_output", what);
    const int64_t P = p->patch_size, k = p->in_channels * P * P;
    const int64_t rows = x->shape[0] * n, d = p->d_model;
    /* cols [rows, k]: the patches, then their gradient; acc [d] doubles:
     * the bias sums. */
    float *cols, *acc;
    float **const bufs[] = { &cols, &acc };
    const size_t sizes[] = { (size_t)(rows * k), (size_t)(2 * d) };
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(pe, what, bufs, sizes, 2, &mark)))
        return st;
    tfm__patch_embedding_backward_run(p, x, grad_output->data,
                                      grad_input ? grad_input->data : NULL,
                                      cols, (double *)(void *)acc);
    tfm__backward_end(pe, mark);
    return TFM_OK;
}

void tfm__patch_embedding_backward_run(const tfm__patch_embedding *pe,
                                       const tfm_tensor *x, const float *g,
                                       float *grad_input, float *cols,
                                       double *acc)
{
    const int64_t B = x->shape[0], H = x->shape[2], W = x->shape[3];
    const int64_t P = pe->patch_size, k = pe->in_channels * P * P;
    const int64_t rows = B * (H / P) * (W / P), d = pe->d_model;
    unfold(pe, B, H, W, x->data, cols, 0);
    float *gw = tfm__grad_of(&pe->base, pe->weight);
    float *gb = pe->bias ? tfm__grad_of(&pe->base, pe->bias) : NULL;
    tfm__linear_backward(cols, k, rows, k, pe->weight, d, g, d,
                         grad_input ? cols : NULL, gw, gb, acc);
    if (grad_input)
        unfold(pe, B, H, W, grad_input, cols, 1);
}
