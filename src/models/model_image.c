/* Image models (ViT; model.h): tfm_model_image_logits and
 * tfm_model_image_backward.  The patch embedding's rows after the class
 * token, plus the learned positions, through the one stack; the head runs
 * on each image's class-token row only, and in the backward that row
 * carries the head's gradient into the stack (the other rows get none),
 * then the positions, cls_token and the patch embedding's GEMM backward. */
#include <string.h>

#include "kernels/dropout.h"
#include "base/error.h"
#include "models/model_impl.h"
#include "base/parallel.h"
#include "nn/patch_embedding.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"


/* The checks of tfm_model_image_logits (the model, an image model, its
 * pixels) shared with its backward; *n_patches gets N (message set). */
static tfm_status check_image_call(const tfm_module *model,
                                   const tfm_tensor *pixel_values,
                                   int64_t *n_patches)
{
    tfm_status st =
        tfm__model_check(model, 1u << TFM_ARCH_ENCODER_ONLY, "model");
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    if (!m->patch_embedding)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "this model takes token ids (tfm_model_logits), "
                         "not images: it has no patch embedding");
    if ((st = tfm__patch_embedding_check(m->patch_embedding, pixel_values,
                                         n_patches)))
        return st;
    if (!tfm__all_finite(pixel_values->data, pixel_values->numel))
        return tfm__fail(TFM_ERR_NON_FINITE,
                         "pixel_values hold NaN or infinity");
    return TFM_OK;
}

tfm_status tfm_model_image_logits(const tfm_module *model,
                                  const tfm_tensor *pixel_values,
                                  tfm_tensor *logits)
{
    TFM__PLAN_PIN();
    int64_t n = 0;
    tfm_status st = check_image_call(model, pixel_values, &n);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t B = pixel_values->shape[0], L = n + 1;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t shape[2] = { B, V };
    if ((st = tfm__check_shape(logits, "logits", 2, shape)))
        return st;

    /* patches [B*N, d]; x [B, N+1, d]: the class token and the patches,
     * then the blocks' states; cls [B, d]: the class tokens' final states;
     * out [B, V]: the logits, copied to the caller only on success. */
    tfm__ws_mark mark = tfm__ws_save();
    float *patches = tfm__ws_floats((size_t)(B * n * d));
    float *x = patches ? tfm__ws_floats((size_t)(B * L * d)) : NULL;
    float *cls = x ? tfm__ws_floats((size_t)(B * d)) : NULL;
    float *out = cls ? tfm__ws_floats((size_t)(B * V)) : NULL;
    st = out ? tfm__patch_embedding_run(m->patch_embedding, pixel_values,
                                        patches)
             : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot allocate an image "
                         "model's scratch for %lld images", (long long)B);
    if (st == TFM_OK) {
        const size_t row = (size_t)d * sizeof(float);
        for (int64_t b = 0; b < B; b++) {
            memcpy(x + b * L * d, m->cls_token, row);
            memcpy(x + (b * L + 1) * d, patches + b * n * d, (size_t)n * row);
        }
        tfm__embedding_add_rows(m->position_embedding, x, B, L, 0);
        const tfm__masks none = { 0 };
        const uint64_t key = tfm__dropout_forward_key((tfm_module *)model);
        tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, x, B * L * d);
        st = tfm__stack_run(m->stack, x, B, L, NULL, 0, &none, NULL,
                            tfm__dropout_site(key, TFM__DROP_STACK));
    }
    if (st == TFM_OK) {
        for (int64_t b = 0; b < B; b++)
            memcpy(cls + b * d, x + b * L * d, (size_t)d * sizeof(float));
        st = tfm__model_head(m, cls, B, out);
    }
    if (st == TFM_OK)
        memcpy(logits->data, out, (size_t)(B * V) * sizeof(float));
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm_model_image_backward(tfm_module *model,
                                    const tfm_tensor *pixel_values,
                                    const tfm_tensor *grad_logits)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_model_image_backward";
    int64_t n = 0;
    tfm_status st = check_image_call(model, pixel_values, &n);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const tfm__patch_embedding *pe = m->patch_embedding;
    const int64_t B = pixel_values->shape[0], L = n + 1;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t k_cols = pe->in_channels * pe->patch_size * pe->patch_size;
    const int64_t shape[2] = { B, V };
    if ((st = tfm__model_check_grad_logits(grad_logits, 2, shape, what)))
        return st;
    /* patches [B*N, d]: the patch embedding's output, later its gradient;
     * x0, h, g [B, L, d]: the blocks' input, output and running gradient;
     * cls, gcls [B, d]: the class tokens' final states and their gradient;
     * cols [B*N, C P P]: the unfolded patches; acc: 2 max(d, V) doubles. */
    float *patches, *x0, *h, *g, *cls, *gcls, *cols, *acc;
    float **const bufs[] = { &patches, &x0, &h, &g, &cls, &gcls, &cols,
                             &acc };
    const size_t sizes[] = { (size_t)(B * n * d), (size_t)(B * L * d),
                             (size_t)(B * L * d), (size_t)(B * L * d),
                             (size_t)(B * d), (size_t)(B * d),
                             (size_t)(B * n * k_cols),
                             (size_t)(4 * (d > V ? d : V)) };
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(model, what, bufs, sizes, 8, &mark)))
        return st;
    /* The forward of tfm_model_image_logits again, keeping the blocks'
     * activations (the dropout masks of the latest forward). */
    const size_t row = (size_t)d * sizeof(float);
    st = tfm__patch_embedding_run(pe, pixel_values, patches);
    const uint64_t key = tfm__dropout_backward_key(model);
    const tfm__masks none = { 0 };
    tfm__stack_kept kept;
    if (st == TFM_OK) {
        for (int64_t b = 0; b < B; b++) {
            memcpy(x0 + b * L * d, m->cls_token, row);
            memcpy(x0 + (b * L + 1) * d, patches + b * n * d, (size_t)n * row);
        }
        tfm__embedding_add_rows(m->position_embedding, x0, B, L, 0);
        tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, x0, B * L * d);
        st = tfm__stack_forward_keep(m->stack, x0, B, L, NULL, 0, &none,
                                     NULL,
                                     tfm__dropout_site(key, TFM__DROP_STACK),
                                     NULL, h, &kept);
    }
    if (st == TFM_OK) {
        /* The head on the class tokens: its gradient into gcls, then into
         * row 0 of each image's states (the other rows get none). */
        tfm__model_parts_kept pk = { 0 };
        pk.acc = (double *)(void *)acc;
        for (int64_t b = 0; b < B; b++)
            memcpy(cls + b * d, h + b * L * d, row);
        tfm__model_head_backward(m, cls, B, &pk, grad_logits->data, gcls);
        memset(g, 0, (size_t)(B * L) * row);
        for (int64_t b = 0; b < B; b++)
            memcpy(g + b * L * d, gcls + b * d, row);
        st = tfm__stack_backward_kept(&kept, g);
    }
    if (st == TFM_OK) {
        tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, g, B * L * d);
        tfm__embedding_add_rows_backward(m->position_embedding, g, B, L, 0);
        float *gc = tfm__grad_of(&m->base, m->cls_token);
        for (int64_t b = 0; b < B; b++) {
            const float *gr = g + b * L * d;
            for (int64_t j = 0; j < d; j++)
                gc[j] += gr[j];
            memcpy(patches + b * n * d, gr + d, (size_t)n * row);
        }
        tfm__patch_embedding_backward_run(pe, pixel_values, patches, NULL,
                                          cols, (double *)(void *)acc);
    }
    tfm__backward_end(model, mark);
    return st;
}
