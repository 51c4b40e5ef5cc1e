/* tfm_attention_config (variants.h): defaults, reading and writing across
 * ABI versions (only whole fields inside struct_size), and validation with
 * messages that name the offending field. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attention/attention_config.h"
#include "base/error.h"

/* Every field after struct_size, in declaration order: a newer library
 * appends to this table as it appends to the struct. */
typedef struct field {
    size_t offset, size;
} field;

#define FIELD(name)                                                       \
    { offsetof(tfm_attention_config, name),                               \
      sizeof(((tfm_attention_config *)0)->name) }

static const field fields[] = {
    FIELD(score),        FIELD(scale),           FIELD(additive_dim),
    FIELD(n_kv_heads),   FIELD(rope),            FIELD(rope_base),
    FIELD(rope_dims),    FIELD(relative),        FIELD(max_distance),
    FIELD(relative_values), FIELD(num_buckets),  FIELD(bidirectional),
    FIELD(sparsity),     FIELD(window),          FIELD(dilation),
    FIELD(n_global),     FIELD(block_size),      FIELD(n_random_blocks),
    FIELD(seed),
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

/* The smallest struct_size a caller may pass: struct_size and score. */
static const size_t min_size =
    offsetof(tfm_attention_config, score) + sizeof(tfm_score);

void tfm_attention_config_init(tfm_attention_config *config)
{
    if (!config)
        return;
    memset(config, 0, sizeof *config);
    config->struct_size = sizeof *config;
    config->bidirectional = 1;
    config->dilation = 1;
}

/* The error of a struct_size too small to hold struct_size and score. */
static tfm_status size_error(size_t struct_size)
{
    return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                     "attention config: struct_size %zu is smaller than %zu "
                     "(struct_size and score); call tfm_attention_config_init",
                     struct_size, min_size);
}

tfm_status tfm__attention_config_read(const tfm_attention_config *pub,
                                      tfm_attention_config *out)
{
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    if (pub) {
        if (pub->struct_size < min_size)
            return size_error(pub->struct_size);
        for (size_t i = 0; i < N_FIELDS; i++)
            if (fields[i].offset + fields[i].size <= pub->struct_size)
                memcpy((char *)&c + fields[i].offset,
                       (const char *)pub + fields[i].offset, fields[i].size);
    }
    *out = c;
    return TFM_OK;
}

tfm_status tfm__attention_config_write(const tfm_attention_config *c,
                                       tfm_attention_config *pub)
{
    if (!pub)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "config is NULL");
    if (pub->struct_size < min_size)
        return size_error(pub->struct_size);
    for (size_t i = 0; i < N_FIELDS; i++)
        if (fields[i].offset + fields[i].size <= pub->struct_size)
            memcpy((char *)pub + fields[i].offset,
                   (const char *)c + fields[i].offset, fields[i].size);
    return TFM_OK;
}

static tfm_status bad(const char *field_name, long long value,
                      const char *why)
{
    return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                     "attention config: %s = %lld %s", field_name, value,
                     why);
}

/* T5 buckets need an exact range of at least one distance and a
 * logarithmic range beyond it (Hugging Face's _relative_position_bucket
 * divides by log(max_distance / max_exact)). */
static tfm_status check_t5(const tfm_attention_config *c)
{
    if (c->num_buckets < 0)
        return bad("num_buckets", c->num_buckets, "is negative (0 = 32)");
    if (c->max_distance < 0)
        return bad("max_distance", c->max_distance, "is negative (0 = 128)");
    int64_t nb = c->num_buckets ? c->num_buckets : 32;
    int64_t md = c->max_distance ? c->max_distance : 128;
    int64_t per_sign = c->bidirectional ? nb / 2 : nb;
    int64_t max_exact = per_sign / 2;
    if (max_exact < 1)
        return bad("num_buckets", nb,
                   c->bidirectional
                       ? "is too small: bidirectional T5 buckets need >= 4"
                       : "is too small: T5 buckets need >= 2");
    if (md <= max_exact)
        return bad("max_distance", md,
                   "must exceed the exact range of the T5 buckets "
                   "(num_buckets / 2, halved again when bidirectional)");
    return TFM_OK;
}

static tfm_status check_sparsity(const tfm_attention_config *c)
{
    if ((unsigned)c->sparsity > (unsigned)TFM_SPARSE_BIGBIRD)
        return bad("sparsity", c->sparsity, "is not a tfm_sparsity value");
    if (c->sparsity == TFM_SPARSE_NONE) {
        if (c->n_global != 0)
            return bad("n_global", c->n_global,
                       "needs a sparsity (SLIDING_WINDOW, DILATED or "
                       "BIGBIRD)");
        return TFM_OK;
    }
    if (c->window < 0)
        return bad("window", c->window, "is negative");
    if (c->n_global < 0)
        return bad("n_global", c->n_global, "is negative");
    if (c->sparsity == TFM_SPARSE_DILATED) {
        if (c->dilation < 1)
            return bad("dilation", c->dilation, "must be at least 1");
        if (c->window > INT64_MAX / c->dilation)
            return bad("window", c->window, "times dilation overflows");
    }
    if (c->sparsity == TFM_SPARSE_BIGBIRD) {
        if (c->block_size < 1)
            return bad("block_size", c->block_size, "must be at least 1");
        /* Each random draw is tested for every key block a query row
         * meets, so the count bounds the kernel's time: a config (or a
         * model file's metadata) must not make it unbounded. */
        if (c->n_random_blocks < 0 ||
            c->n_random_blocks > TFM__MAX_RANDOM_BLOCKS)
            return bad("n_random_blocks", c->n_random_blocks,
                       "is out of range (0 .. 4096)");
    }
    return TFM_OK;
}

tfm_status tfm__attention_config_check(const tfm_attention_config *c,
                                       int64_t n_heads, int64_t d_k,
                                       int64_t d_v)
{
    if (n_heads < 1 || d_k < 1 || d_v < 1)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "n_heads (%lld), d_k (%lld) and d_v (%lld) must be "
                         "at least 1", (long long)n_heads, (long long)d_k,
                         (long long)d_v);
    if ((unsigned)c->score > (unsigned)TFM_SCORE_LEARNED_TEMPERATURE)
        return bad("score", c->score, "is not a tfm_score value");
    if (!isfinite(c->scale) || c->scale < 0.0f)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "attention config: scale = %g must be finite and "
                         ">= 0 (0 = the score's own)", (double)c->scale);
    if (c->score == TFM_SCORE_LEARNED_TEMPERATURE && c->scale != 0.0f)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "attention config: scale = %g is not allowed with "
                         "TFM_SCORE_LEARNED_TEMPERATURE (the temperature "
                         "is the scale)", (double)c->scale);
    if (c->score == TFM_SCORE_ADDITIVE &&
        (c->additive_dim < 0 || c->additive_dim > INT32_MAX))
        return bad("additive_dim", c->additive_dim,
                   "is out of range (0 = d_k)");
    if (c->n_kv_heads < 0 || c->n_kv_heads > n_heads ||
        (c->n_kv_heads > 0 && n_heads % c->n_kv_heads != 0))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "attention config: n_kv_heads = %lld must divide "
                         "n_heads (%lld) (0 = n_heads)",
                         (long long)c->n_kv_heads, (long long)n_heads);

    if ((unsigned)c->rope > (unsigned)TFM_ROPE_HALF)
        return bad("rope", c->rope, "is not a tfm_rope value");
    if (c->rope != TFM_ROPE_NONE) {
        /* As the sinusoidal encoding's base: above 1, so that the
         * frequencies base^(-2i/dims) fall from 1 (and never overflow). */
        if (!isfinite(c->rope_base) ||
            (c->rope_base != 0.0 && !(c->rope_base > 1.0)))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "attention config: rope_base = %g must be "
                             "finite and > 1 (0 = 10000)", c->rope_base);
        int64_t dims = c->rope_dims ? c->rope_dims : d_k;
        if (c->rope_dims == 0 && (d_k % 2 != 0 || d_k < 2))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "attention config: RoPE rotates pairs of "
                             "dimensions, and d_k = %lld is odd: set "
                             "rope_dims to an even number below it (rope_dims "
                             "0 means all of d_k)", (long long)d_k);
        if (c->rope_dims < 0 || dims > d_k || dims % 2 != 0 || dims < 2)
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "attention config: rope_dims = %lld must be "
                             "even, >= 2 and <= d_k (%lld) (0 = d_k)",
                             (long long)c->rope_dims, (long long)d_k);
    }

    if ((unsigned)c->relative > (unsigned)TFM_RELATIVE_ALIBI)
        return bad("relative", c->relative, "is not a tfm_relative value");
    if (c->relative == TFM_RELATIVE_SHAW) {
        if (c->max_distance < 1 || c->max_distance > INT32_MAX / 2)
            return bad("max_distance", c->max_distance,
                       "must be at least 1 for Shaw relative positions");
        if (c->score == TFM_SCORE_GENERAL || c->score == TFM_SCORE_ADDITIVE)
            return bad("relative", c->relative,
                       "(Shaw) needs a dot-product score (SCALED_DOT, DOT "
                       "or LEARNED_TEMPERATURE)");
    } else if (c->relative == TFM_RELATIVE_T5) {
        tfm_status st = check_t5(c);
        if (st != TFM_OK)
            return st;
        if (c->num_buckets > INT32_MAX)
            return bad("num_buckets", c->num_buckets, "is too large");
    }
    return check_sparsity(c);
}

int tfm__attention_config_is_default(const tfm_attention_config *c)
{
    return c->score == TFM_SCORE_SCALED_DOT && c->scale == 0.0f &&
           c->n_kv_heads == 0 && c->rope == TFM_ROPE_NONE &&
           c->relative == TFM_RELATIVE_NONE &&
           c->sparsity == TFM_SPARSE_NONE;
}
