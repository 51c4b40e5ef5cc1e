/* Internal: the attention variant of a module (variants.h), shared by
 * multi-head attention (mha.c), the functional attention module
 * (attention.c) and tfm_sdpa (the default variant): its config, its
 * resolved sizes and its learned parameters.  attention_job.h runs
 * attention with it. */
#ifndef TFM_SRC_VARIANT_H
#define TFM_SRC_VARIANT_H

#include "transformer/attention.h"
#include "base/param_spec.h"

/* At most this many parameter specs tfm__variant_param_specs adds. */
#define TFM__VARIANT_MAX_SPECS 5

typedef struct tfm__variant {
    tfm_attention_config config;    /* as read (zeros: the defaults) */
    int64_t n_heads, n_kv_heads;    /* H and H_kv (resolved) */
    int64_t d_k, d_v;
    int64_t d_a;                    /* additive width (resolved) */
    int64_t rope_dims;              /* resolved (0 without RoPE) */
    double rope_base;               /* resolved */
    int64_t max_distance;           /* resolved (Shaw k; T5 default 128) */
    int64_t num_buckets;            /* T5, resolved */
    /* Learned parameters, NULL when the variant has none; they live in
     * the owning module's parameter storage. */
    float *score_weight;            /* [H, d_k, d_k]   GENERAL */
    float *additive_query;          /* [H, d_a, d_k]   ADDITIVE */
    float *additive_key;            /* [H, d_a, d_k]   ADDITIVE */
    float *additive_v;              /* [H, d_a]        ADDITIVE */
    float *temperature;             /* [H]             LEARNED_TEMPERATURE */
    float *relative_key;            /* [2k+1, d_k]     Shaw */
    float *relative_value;          /* [2k+1, d_v]     Shaw values */
    float *t5_bias;                 /* [num_buckets, H] T5 */
} tfm__variant;

/* Reads (NULL = defaults) and checks pub for n_heads query heads of widths
 * d_k and d_v, and fills *v (no parameters yet).  Message set on error. */
tfm_status tfm__variant_init(tfm__variant *v, const tfm_attention_config *pub,
                             int64_t n_heads, int64_t d_k, int64_t d_v);

/* Appends the variant's parameter specs (names and shapes of variants.h)
 * to specs[*n ..], pointing at v's fields: at most TFM__VARIANT_MAX_SPECS
 * entries, in the order score, then relative term. */
void tfm__variant_param_specs(tfm__variant *v, tfm__param_spec *specs,
                              int *n);

/* Sets the initial values of new parameters (zero storage assumed):
 * temperature = sqrt(d_k). */
void tfm__variant_init_params(tfm__variant *v);

/* Checks the learned parameters a forward pass depends on (temperatures
 * > 0 and finite).  TFM_ERR_INVALID_ARGUMENT with the message set. */
tfm_status tfm__variant_check_params(const tfm__variant *v);

/* Extra multiply-accumulates of the variant for one forward pass of B
 * batch elements, L queries and S keys, added to *acc (0 on overflow). */
int tfm__variant_macs(const tfm__variant *v, int64_t B, int64_t L, int64_t S,
                      int64_t *acc);

#endif
