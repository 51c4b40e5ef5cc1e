/* Internal: the extra key/value rows of multi-head attention, PyTorch's
 * add_bias_kv and add_zero_attn (torch.nn.functional.
 * multi_head_attention_forward, PyTorch 1.13): after the S keys and values
 * of a call (projected, or the caller's static_k / static_v) come the
 * learned rows bias_k / bias_v, then an all-zero row, each seen by every
 * query.  They are ordinary key/value rows of the one attention door
 * (attention_job.h): no kernel knows of them. */
#ifndef TFM_SRC_MHA_EXTRA_KV_H
#define TFM_SRC_MHA_EXTRA_KV_H

#include "attention/attention_job.h"
#include "nn/mha.h"

/* Rows appended to every call's keys: add_bias_kv (1) + add_zero_attn (1). */
int64_t tfm__mha_extra_rows(const tfm__mha *m);

/* k, v: the call's S keys and values, [B, H_kv, S, d_k] each as operands.
 * *k_out and *v_out receive contiguous [B, H_kv, S', d_k] copies from the
 * thread's workspace, S' = S + tfm__mha_extra_rows(m), rows S .. S'-1
 * being bias_k / bias_v (head h: columns h d_k .. of the [kv_dim] row)
 * and then zeros; *masks_out the masks over S' keys (tfm__masks_pad).
 * Returns TFM_OK or TFM_ERR_OUT_OF_MEMORY (the caller restores its
 * workspace mark). */
tfm_status tfm__mha_extra_kv(const tfm__mha *m, const tfm__heads *k,
                             const tfm__heads *v, int64_t B, int64_t L,
                             int64_t S, const tfm__masks *masks,
                             tfm__heads *k_out, tfm__heads *v_out,
                             tfm__masks *masks_out);

#endif
