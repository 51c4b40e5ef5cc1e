/* The string names of the enums (names.h): one table per enum, indexed by
 * value, and the lookups both ways over them. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/names.h"

static const char *const ACTIVATIONS[TFM_ACTIVATION_COUNT] = {
    [TFM_ACTIVATION_RELU] = "relu",
    [TFM_ACTIVATION_GELU] = "gelu",
    [TFM_ACTIVATION_GELU_TANH] = "gelu_tanh",
    [TFM_ACTIVATION_SILU] = "silu",
};
static const char *const CAUSALS[TFM_CAUSAL_COUNT] = {
    [TFM_CAUSAL_NONE] = "none",
    [TFM_CAUSAL_TOP_LEFT] = "top_left",
    [TFM_CAUSAL_BOTTOM_RIGHT] = "bottom_right",
};
static const char *const MASK_KINDS[TFM_MASK_KIND_COUNT] = {
    [TFM_MASK_BLOCK] = "block",
    [TFM_MASK_ALLOW] = "allow",
    [TFM_MASK_ADDITIVE] = "additive",
};
static const char *const SCORES[TFM_SCORE_COUNT] = {
    [TFM_SCORE_SCALED_DOT] = "scaled_dot",
    [TFM_SCORE_DOT] = "dot",
    [TFM_SCORE_GENERAL] = "general",
    [TFM_SCORE_ADDITIVE] = "additive",
    [TFM_SCORE_LEARNED_TEMPERATURE] = "learned_temperature",
};
static const char *const ROPES[TFM_ROPE_COUNT] = {
    [TFM_ROPE_NONE] = "none",
    [TFM_ROPE_ADJACENT] = "adjacent",
    [TFM_ROPE_HALF] = "half",
};
static const char *const RELATIVES[TFM_RELATIVE_COUNT] = {
    [TFM_RELATIVE_NONE] = "none",
    [TFM_RELATIVE_SHAW] = "shaw",
    [TFM_RELATIVE_T5] = "t5",
    [TFM_RELATIVE_ALIBI] = "alibi",
};
static const char *const SPARSITIES[TFM_SPARSE_COUNT] = {
    [TFM_SPARSE_NONE] = "none",
    [TFM_SPARSE_SLIDING_WINDOW] = "sliding_window",
    [TFM_SPARSE_DILATED] = "dilated",
    [TFM_SPARSE_BIGBIRD] = "bigbird",
};
static const char *const SINUSOIDAL_LAYOUTS[TFM_SINUSOIDAL_COUNT] = {
    [TFM_SINUSOIDAL_INTERLEAVED] = "interleaved",
    [TFM_SINUSOIDAL_CONCAT] = "concat",
};
static const char *const ARCHITECTURES[TFM_ARCH_COUNT] = {
    [TFM_ARCH_DECODER_ONLY] = "decoder_only",
    [TFM_ARCH_ENCODER_ONLY] = "encoder_only",
    [TFM_ARCH_ENCODER_DECODER] = "encoder_decoder",
};
static const char *const POSITIONALS[TFM_POSITIONAL_COUNT] = {
    [TFM_POSITIONAL_NONE] = "none",
    [TFM_POSITIONAL_LEARNED] = "learned",
    [TFM_POSITIONAL_SINUSOIDAL] = "sinusoidal",
    [TFM_POSITIONAL_SINUSOIDAL_CONCAT] = "sinusoidal_concat",
};
/* The safetensors format's spelling of its dtypes. */
static const char *const DTYPES[TFM_DTYPE_COUNT] = {
    [TFM_DTYPE_F32] = "F32",   [TFM_DTYPE_F16] = "F16",
    [TFM_DTYPE_BF16] = "BF16", [TFM_DTYPE_F64] = "F64",
    [TFM_DTYPE_I64] = "I64",   [TFM_DTYPE_I32] = "I32",
    [TFM_DTYPE_I16] = "I16",   [TFM_DTYPE_I8] = "I8",
    [TFM_DTYPE_U8] = "U8",     [TFM_DTYPE_BOOL] = "BOOL",
    [TFM_DTYPE_Q8_0] = "Q8_0", [TFM_DTYPE_Q4_0] = "Q4_0",
};

static const char *const REDUCTIONS[TFM_REDUCTION_COUNT] = {
    [TFM_REDUCTION_MEAN] = "mean",
    [TFM_REDUCTION_SUM] = "sum",
};
static const char *const OPTIMIZERS[TFM_OPTIMIZER_KIND_COUNT] = {
    [TFM_OPTIMIZER_SGD] = "sgd",
    [TFM_OPTIMIZER_ADAM] = "adam",
    [TFM_OPTIMIZER_ADAMW] = "adamw",
};

/* One enum: its names by value (NULL: a value without a name) and what it
 * is called in messages. */
typedef struct enum_table {
    const char *const *names;
    int count;
    const char *what;
} enum_table;

#define TABLE(names, what) { names, (int)(sizeof names / sizeof names[0]), what }

static const enum_table TABLES[TFM_ENUM_COUNT] = {
    [TFM_ENUM_ACTIVATION] = TABLE(ACTIVATIONS, "activation"),
    [TFM_ENUM_CAUSAL] = TABLE(CAUSALS, "causal mode"),
    [TFM_ENUM_MASK_KIND] = TABLE(MASK_KINDS, "mask kind"),
    [TFM_ENUM_SCORE] = TABLE(SCORES, "score"),
    [TFM_ENUM_ROPE] = TABLE(ROPES, "RoPE layout"),
    [TFM_ENUM_RELATIVE] = TABLE(RELATIVES, "relative-position term"),
    [TFM_ENUM_SPARSITY] = TABLE(SPARSITIES, "sparsity pattern"),
    [TFM_ENUM_SINUSOIDAL_LAYOUT] = TABLE(SINUSOIDAL_LAYOUTS,
                                         "sinusoidal layout"),
    [TFM_ENUM_ARCHITECTURE] = TABLE(ARCHITECTURES, "architecture"),
    [TFM_ENUM_POSITIONAL] = TABLE(POSITIONALS, "positional encoding"),
    [TFM_ENUM_DTYPE] = TABLE(DTYPES, "dtype"),
    [TFM_ENUM_REDUCTION] = TABLE(REDUCTIONS, "reduction"),
    [TFM_ENUM_OPTIMIZER] = TABLE(OPTIMIZERS, "optimizer"),
};

/* The table of e, or NULL when e is not a tfm_enum. */
static const enum_table *table_of(tfm_enum e)
{
    return (int)e >= 0 && e < TFM_ENUM_COUNT ? &TABLES[e] : NULL;
}

const char *tfm_enum_name(tfm_enum e, int value)
{
    const enum_table *t = table_of(e);
    return t && value >= 0 && value < t->count ? t->names[value] : NULL;
}

int tfm_enum_count(tfm_enum e)
{
    const enum_table *t = table_of(e);
    return t ? t->count : 0;
}

int tfm__enum_lookup(tfm_enum e, const char *name)
{
    const enum_table *t = table_of(e);
    for (int v = 0; t && name && v < t->count; v++)
        if (t->names[v] && strcmp(t->names[v], name) == 0)
            return v;
    return -1;
}

tfm_status tfm_enum_from_name(tfm_enum e, const char *name, int *value)
{
    const enum_table *t = table_of(e);
    if (!t)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "unknown tfm_enum %d",
                         (int)e);
    if (!name || !value)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !name ? "name" : "value");
    const int v = tfm__enum_lookup(e, name);
    if (v >= 0) {
        *value = v;
        return TFM_OK;
    }
    /* The message lists the allowed names: "one of \"a\", \"b\"". */
    char allowed[256];
    size_t n = 0;
    allowed[0] = '\0';
    for (int i = 0; i < t->count; i++) {
        if (!t->names[i] || n >= sizeof allowed)
            continue;
        int k = snprintf(allowed + n, sizeof allowed - n, "%s\"%s\"",
                         n ? ", " : "", t->names[i]);
        n += k > 0 ? (size_t)k : 0;
    }
    return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                     "unknown %s \"%.64s\" (one of %s)", t->what, name,
                     allowed);
}
