/*
 * libtransformer: the string names of the enums, one table per enum.
 *
 * Model files ("tfm.activation", "tfm.attention.score", ...: model.h), the
 * Python and Lua bindings and transformer-generate spell enum values with
 * these names; they all read them from here.  Names are lowercase ASCII
 * with underscores, except dtypes, which keep the safetensors format's
 * spelling ("F32", "BF16", ...).  Names never change meaning; new values
 * get new names.
 *
 *   tfm_enum        names, in value order
 *   ACTIVATION      "relu", "gelu", "gelu_tanh", "silu"
 *   CAUSAL          "none", "top_left", "bottom_right"
 *   MASK_KIND       "block", "allow", "additive"
 *   SCORE           "scaled_dot", "dot", "general", "additive",
 *                   "learned_temperature"
 *   ROPE            "none", "adjacent", "half"
 *   RELATIVE        "none", "shaw", "t5", "alibi"
 *   SPARSITY        "none", "sliding_window", "dilated", "bigbird"
 *   SINUSOIDAL_LAYOUT "interleaved", "concat"
 *   ARCHITECTURE    (0 has none) "decoder_only", "encoder_only",
 *                   "encoder_decoder"
 *   POSITIONAL      "none", "learned", "sinusoidal", "sinusoidal_concat"
 *   DTYPE           "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8",
 *                   "U8", "BOOL", "Q8_0", "Q4_0" (since 1.3)
 *   REDUCTION       "mean", "sum"
 *   OPTIMIZER       "sgd", "adam", "adamw"
 *
 * Since 1.2.0: everything in this header.
 */
#ifndef TRANSFORMER_NAMES_H
#define TRANSFORMER_NAMES_H

#include "model.h"
#include "safetensors.h"
#include "training.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The enums that have names.  Append-only. */
typedef enum tfm_enum {
    TFM_ENUM_ACTIVATION = 0,         /* tfm_activation (layers.h) */
    TFM_ENUM_CAUSAL = 1,             /* tfm_causal (attention.h) */
    TFM_ENUM_MASK_KIND = 2,          /* tfm_mask_kind (attention.h) */
    TFM_ENUM_SCORE = 3,              /* tfm_score (attention.h) */
    TFM_ENUM_ROPE = 4,               /* tfm_rope (attention.h) */
    TFM_ENUM_RELATIVE = 5,           /* tfm_relative (attention.h) */
    TFM_ENUM_SPARSITY = 6,           /* tfm_sparsity (attention.h) */
    TFM_ENUM_SINUSOIDAL_LAYOUT = 7,  /* tfm_sinusoidal_layout (embedding.h) */
    TFM_ENUM_ARCHITECTURE = 8,       /* tfm_architecture (model.h) */
    TFM_ENUM_POSITIONAL = 9,         /* tfm_positional (model.h) */
    TFM_ENUM_DTYPE = 10,             /* tfm_dtype (safetensors.h) */
    TFM_ENUM_REDUCTION = 11,         /* tfm_reduction (training.h) */
    TFM_ENUM_OPTIMIZER = 12,         /* tfm_optimizer_kind (training.h) */
    TFM_ENUM_COUNT                   /* grows; never store it */
} tfm_enum;

/* The name of `value` in enum `e` (a static string, e.g. "top_left" for
 * TFM_ENUM_CAUSAL and TFM_CAUSAL_TOP_LEFT), or NULL when e is not a
 * tfm_enum or value has no name in this library.  Sets no error. */
TFM_API const char *tfm_enum_name(tfm_enum e, int value);

/* *value = the value of enum `e` named `name` (exactly as listed above:
 * case-sensitive).  Errors: TFM_ERR_NULL_ARGUMENT (name or value),
 * TFM_ERR_INVALID_ARGUMENT (e is not a tfm_enum, or an unknown name: the
 * message lists the allowed names); on error *value is unchanged. */
TFM_API tfm_status tfm_enum_from_name(tfm_enum e, const char *name,
                                      int *value);

/* One past the largest value of enum `e` that this library knows (the
 * enum's _COUNT sentinel as compiled into the library; 0 when e is not a
 * tfm_enum): values 0 .. count-1 are the candidates for tfm_enum_name. */
TFM_API int tfm_enum_count(tfm_enum e);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_NAMES_H */
