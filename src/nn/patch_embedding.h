/* Internal: ViT's patch embedding (layers.h: tfm_patch_embedding_create),
 * shared with the image model (model_image.c). */
#ifndef TFM_SRC_PATCH_EMBEDDING_H
#define TFM_SRC_PATCH_EMBEDDING_H

#include "nn/module_impl.h"

typedef struct tfm__patch_embedding {
    tfm_module base;
    int64_t d_model, in_channels, patch_size;
    int64_t image_size;     /* 0: any multiple of patch_size */
    float *weight;          /* [d_model, in_channels, P, P] */
    float *bias;            /* [d_model] or NULL */
} tfm__patch_embedding;

/* A patch embedding with zeroed parameters (arguments as
 * tfm_patch_embedding_create; message set on error). */
tfm_status tfm__patch_embedding_new(int64_t d_model, int64_t in_channels,
                                    int64_t patch_size, int64_t image_size,
                                    int bias, tfm__patch_embedding **out);

/* Checks x [B, C, H, W] against pe (TFM_ERR_NULL_ARGUMENT, TFM_ERR_SHAPE,
 * message set) and gives the patch count N = (H/P)(W/P). */
tfm_status tfm__patch_embedding_check(const tfm__patch_embedding *pe,
                                      const tfm_tensor *x, int64_t *n_patches);

/* out [B*N, d] = the patches of x [B, C, H, W] (checked) times weight^T
 * plus bias: the unfold in workspace memory, then one matrix product.
 * TFM_ERR_OUT_OF_MEMORY (message set, out untouched) or TFM_OK. */
tfm_status tfm__patch_embedding_run(const tfm__patch_embedding *pe,
                                    const tfm_tensor *x, float *out);

/* The backward of tfm__patch_embedding_run for g [B*N, d], the output's
 * gradient (x checked): weight.grad += g^T cols, bias.grad += the column
 * sums of g (through acc [d] doubles), and grad_input (x's size, or NULL)
 * = g weight folded back onto the pixels; cols [B*N, C*P*P] is scratch.
 * The caller has entered the gradients (tfm__backward_begin). */
void tfm__patch_embedding_backward_run(const tfm__patch_embedding *pe,
                                       const tfm_tensor *x, const float *g,
                                       float *grad_input, float *cols,
                                       double *acc);

#endif
