/*
 * Attention variants (variants.h): the reference cases of
 * tests/fixtures/variants (tools/make_variant_fixtures.py: float64 values
 * from the papers' equations, GQA also through PyTorch's
 * nn.MultiheadAttention) through tfm_attention_forward and
 * tfm_mha_create_ex / tfm_mha_forward, and the error paths: every invalid
 * config field, old (smaller) struct_size, learned temperatures <= 0, key/
 * value head mismatches, outputs untouched on every failure.
 *
 * A case passes when max |ours - ref| / max |ref| <= 1e-5 for the output
 * and the weights; each attention case runs with and without the weights
 * output (the kernel's whole-row and tiled paths).  Each case prints its
 * errors.
 */
#include "test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include <transformer/attention.h>
#include <transformer/layers.h>
#include <transformer/model.h>
#include <transformer/safetensors.h>
#include <transformer/variants.h>

#ifndef TFM_VARIANT_FIXTURES_DIR
#error "TFM_VARIANT_FIXTURES_DIR must name tests/fixtures/variants"
#endif

#define REL_TOLERANCE 1e-5
#define MAX_TENSORS 24

/* ---- reference cases ------------------------------------------------------ */

typedef struct variant_case {
    char *path, *name;
} variant_case;

/* A config field settable from metadata "cfg.<name>". */
typedef enum field_type { F_INT, F_I64, F_FLOAT, F_DOUBLE, F_U64 } field_type;
typedef struct cfg_field {
    const char *name;
    size_t offset;
    field_type type;
} cfg_field;

#define CF(name, type) { #name, offsetof(tfm_attention_config, name), type }
static const cfg_field cfg_fields[] = {
    CF(score, F_INT),          CF(scale, F_FLOAT),
    CF(additive_dim, F_I64),   CF(n_kv_heads, F_I64),
    CF(rope, F_INT),           CF(rope_base, F_DOUBLE),
    CF(rope_dims, F_I64),      CF(relative, F_INT),
    CF(max_distance, F_I64),   CF(relative_values, F_INT),
    CF(num_buckets, F_I64),    CF(bidirectional, F_INT),
    CF(sparsity, F_INT),       CF(window, F_I64),
    CF(dilation, F_I64),       CF(n_global, F_I64),
    CF(block_size, F_I64),     CF(n_random_blocks, F_I64),
    CF(seed, F_U64),
};

/* tfm_attention_config_init, then every "cfg.*" entry of the file. */
static void read_config(const tfm_safetensors *f, tfm_attention_config *c)
{
    tfm_attention_config_init(c);
    int64_t n = tfm_safetensors_metadata_count(f);
    for (int64_t i = 0; i < n; i++) {
        const char *key = tfm_safetensors_metadata_key(f, i);
        if (strncmp(key, "cfg.", 4) != 0)
            continue;
        const char *value = tfm_safetensors_metadata(f, key);
        const cfg_field *fd = NULL;
        for (size_t j = 0; j < sizeof cfg_fields / sizeof *cfg_fields; j++)
            if (strcmp(cfg_fields[j].name, key + 4) == 0)
                fd = &cfg_fields[j];
        if (!fd)
            fail_msg("unknown config field %s", key);
        char *p = (char *)c + fd->offset;
        switch (fd->type) {
        case F_INT: *(int *)p = atoi(value); break;
        case F_I64: *(int64_t *)p = strtoll(value, NULL, 10); break;
        case F_FLOAT: *(float *)p = strtof(value, NULL); break;
        case F_DOUBLE: *(double *)p = strtod(value, NULL); break;
        case F_U64: *(uint64_t *)p = strtoull(value, NULL, 10); break;
        }
    }
}

static int64_t meta_int(const tfm_safetensors *f, const char *key)
{
    const char *s = tfm_safetensors_metadata(f, key);
    if (!s)
        fail_msg("metadata %s missing", key);
    return strtoll(s, NULL, 10);
}

static const char *meta_str(const tfm_safetensors *f, const char *key)
{
    const char *s = tfm_safetensors_metadata(f, key);
    return s ? s : "none";
}

static tfm_tensor *read_or_null(const tfm_safetensors *f, const char *name)
{
    tfm_tensor *t = NULL;
    tfm_status st = tfm_safetensors_read(f, name, &t);
    if (st == TFM_ERR_NOT_FOUND)
        return NULL;
    if (st != TFM_OK)
        fail_msg("read %s: %s", name, tfm_last_error());
    return t;
}

/* A tensor shaped as ref, filled with NaN (unwritten elements show). */
static tfm_tensor *nan_like(const tfm_tensor *ref)
{
    int64_t shape[TFM_MAX_RANK];
    for (int i = 0; i < tfm_tensor_rank(ref); i++)
        shape[i] = tfm_tensor_dim(ref, i);
    tfm_tensor *t = make(tfm_tensor_rank(ref), shape, NULL);
    fill(t, NAN);
    return t;
}

/* max |a - e| / max |e|; NaN in a gives infinity. */
static double rel_error(const tfm_tensor *a, const tfm_tensor *e)
{
    assert_int_equal(tfm_tensor_numel(a), tfm_tensor_numel(e));
    const float *x = tfm_tensor_data_const(a), *y = tfm_tensor_data_const(e);
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < tfm_tensor_numel(e); i++) {
        double d = fabs((double)x[i] - (double)y[i]);
        if (isnan(d))
            return INFINITY;
        err = d > err ? d : err;
        ref = fabs(y[i]) > ref ? fabs(y[i]) : ref;
    }
    return err / (ref > 0.0 ? ref : 1.0);
}

/* Sets every "param.*" tensor of the file and checks that the module has
 * exactly those parameters. */
static void set_params(tfm_module *m, const tfm_safetensors *f)
{
    int n_file = 0;
    for (int64_t i = 0; i < tfm_safetensors_count(f); i++) {
        const char *name = tfm_safetensors_name(f, i);
        if (strncmp(name, "param.", 6) != 0)
            continue;
        n_file++;
        tfm_tensor *t = read_or_null(f, name);
        tfm_status st = tfm_module_set_parameter(m, name + 6, t);
        if (st != TFM_OK)
            fail_msg("set %s: %s", name + 6, tfm_last_error());
        tfm_tensor_free(t);
    }
    assert_int_equal(tfm_module_parameter_count(m), n_file);
}

static tfm_causal causal_of(const char *s)
{
    return strcmp(s, "top_left") == 0       ? TFM_CAUSAL_TOP_LEFT
           : strcmp(s, "bottom_right") == 0 ? TFM_CAUSAL_BOTTOM_RIGHT
                                            : TFM_CAUSAL_NONE;
}

static void check_config_roundtrip(const tfm_module *m,
                                   const tfm_attention_config *want)
{
    tfm_attention_config got;
    tfm_attention_config_init(&got);
    assert_int_equal(tfm_attention_get_config(m, &got), TFM_OK);
    assert_memory_equal(&got, want, sizeof got);
}

static void run_attention_case(const tfm_safetensors *f, const char *name)
{
    tfm_attention_config c;
    read_config(f, &c);
    tfm_module *m = NULL;
    tfm_status st = tfm_attention_create(meta_int(f, "d_k"), meta_int(f, "d_v"),
                                         meta_int(f, "n_heads"), &c, &m);
    if (st != TFM_OK)
        fail_msg("%s: create: %s", name, tfm_last_error());
    assert_int_equal(tfm_module_kind_of(m), TFM_MODULE_ATTENTION);
    check_config_roundtrip(m, &c);
    set_params(m, f);
    tfm_tensor *q = read_or_null(f, "input.q"), *k = read_or_null(f, "input.k"),
               *v = read_or_null(f, "input.v"),
               *kpm = read_or_null(f, "input.key_padding_mask"),
               *ref = read_or_null(f, "output.out"),
               *ref_w = read_or_null(f, "output.weights");
    tfm_attention_masks masks = {
        .causal = causal_of(meta_str(f, "causal")),
        .key_padding_mask = kpm, .key_padding_kind = TFM_MASK_BLOCK,
    };
    /* The inputs are not modified (RoPE rotates copies). */
    tfm_tensor *q0 = nan_like(q), *k0 = nan_like(k);
    memcpy(tfm_tensor_data(q0), tfm_tensor_data_const(q),
           (size_t)tfm_tensor_numel(q) * sizeof(float));
    memcpy(tfm_tensor_data(k0), tfm_tensor_data_const(k),
           (size_t)tfm_tensor_numel(k) * sizeof(float));

    tfm_tensor *out = nan_like(ref), *w = ref_w ? nan_like(ref_w) : NULL;
    double e_out = -1, e_w = -1, e_tiled = -1;
    if (w) {
        st = tfm_attention_forward(m, q, k, v, &masks, out, w);
        if (st != TFM_OK)
            fail_msg("%s: forward: %s", name, tfm_last_error());
        e_out = rel_error(out, ref);
        e_w = rel_error(w, ref_w);
        fill(out, NAN);
    }
    st = tfm_attention_forward(m, q, k, v, &masks, out, NULL);
    if (st != TFM_OK)
        fail_msg("%s: forward: %s", name, tfm_last_error());
    e_tiled = rel_error(out, ref);
    print_message("%-36s out %.2e  out(tiled) %.2e  weights %.2e\n", name,
                  e_out, e_tiled, e_w);
    expect_bit_identical(q, q0, "q after forward");
    expect_bit_identical(k, k0, "k after forward");
    if (!(e_tiled <= REL_TOLERANCE) ||
        (w && !(e_out <= REL_TOLERANCE && e_w <= REL_TOLERANCE)))
        fail_msg("%s: relative error above %g", name, REL_TOLERANCE);
    FREE_TENSORS(q, k, v, kpm, ref, ref_w, q0, k0, out, w);
    tfm_module_free(m);
}

static void run_mha_case(const tfm_safetensors *f, const char *name)
{
    tfm_attention_config c;
    read_config(f, &c);
    tfm_module *m = NULL;
    tfm_status st = tfm_mha_create_ex(meta_int(f, "d_model"),
                                      meta_int(f, "n_heads"),
                                      meta_int(f, "kdim"), meta_int(f, "vdim"),
                                      (int)meta_int(f, "bias"), &c, &m);
    if (st != TFM_OK)
        fail_msg("%s: create: %s", name, tfm_last_error());
    check_config_roundtrip(m, &c);
    set_params(m, f);
    tfm_tensor *query = read_or_null(f, "input.query");
    tfm_tensor *key_own = read_or_null(f, "input.key");
    tfm_tensor *value_own = read_or_null(f, "input.value");
    const tfm_tensor *key = key_own ? key_own : query;
    const tfm_tensor *value = value_own ? value_own : key;
    tfm_tensor *ref = read_or_null(f, "output.out");
    tfm_tensor *ref_w = read_or_null(f, "output.weights");
    tfm_attention_masks masks = { .causal = causal_of(meta_str(f, "causal")) };
    tfm_tensor *out = nan_like(ref), *w = ref_w ? nan_like(ref_w) : NULL;
    double e_out = -1, e_w = -1, e_tiled;
    if (w) {
        st = tfm_mha_forward(m, query, key, value, &masks, out, w);
        if (st != TFM_OK)
            fail_msg("%s: forward: %s", name, tfm_last_error());
        e_out = rel_error(out, ref);
        e_w = rel_error(w, ref_w);
        fill(out, NAN);
    }
    st = tfm_mha_forward(m, query, key, value, &masks, out, NULL);
    if (st != TFM_OK)
        fail_msg("%s: forward: %s", name, tfm_last_error());
    e_tiled = rel_error(out, ref);
    print_message("%-36s out %.2e  out(tiled) %.2e  weights %.2e\n", name,
                  e_out, e_tiled, e_w);
    if (!(e_tiled <= REL_TOLERANCE) ||
        (w && !(e_out <= REL_TOLERANCE && e_w <= REL_TOLERANCE)))
        fail_msg("%s: relative error above %g", name, REL_TOLERANCE);
    FREE_TENSORS(query, key_own, value_own, ref, ref_w, out, w);
    tfm_module_free(m);
}

static void test_case(void **state)
{
    const variant_case *vc = *state;
    tfm_safetensors *f = NULL;
    if (tfm_safetensors_open(vc->path, &f) != TFM_OK)
        fail_msg("open %s: %s", vc->path, tfm_last_error());
    const char *api = meta_str(f, "api");
    if (strcmp(api, "attention") == 0)
        run_attention_case(f, vc->name);
    else if (strcmp(api, "mha") == 0)
        run_mha_case(f, vc->name);
    else
        fail_msg("%s: unknown api %s", vc->name, api);
    tfm_safetensors_close(f);
}

/* ---- configs: defaults, old callers, validation -------------------------- */

static void test_config_init(void **state)
{
    (void)state;
    tfm_attention_config c;
    memset(&c, 0x5a, sizeof c);
    tfm_attention_config_init(&c);
    assert_int_equal(c.struct_size, sizeof c);
    assert_int_equal(c.score, TFM_SCORE_SCALED_DOT);
    assert_true(c.scale == 0.0f);
    assert_int_equal(c.n_kv_heads, 0);
    assert_int_equal(c.rope, TFM_ROPE_NONE);
    assert_int_equal(c.relative, TFM_RELATIVE_NONE);
    assert_int_equal(c.bidirectional, 1);
    assert_int_equal(c.sparsity, TFM_SPARSE_NONE);
    assert_int_equal(c.dilation, 1);
    assert_int_equal(c.seed, 0);
    tfm_attention_config_init(NULL);   /* no-op */
}

/* A config with one field changed, given to both constructors: each must
 * fail with TFM_ERR_INVALID_ARGUMENT, keep *out, and name the field. */
typedef void (*config_edit)(tfm_attention_config *c);
typedef struct bad_config {
    const char *needle;
    config_edit edit;
} bad_config;

#define EDIT(fn_name, body) \
    static void fn_name(tfm_attention_config *c) { body; }
EDIT(e_score, c->score = (tfm_score)99)
EDIT(e_score_neg, c->score = (tfm_score)-1)
EDIT(e_scale_neg, c->scale = -1.0f)
EDIT(e_scale_nan, c->scale = NAN)
EDIT(e_scale_inf, c->scale = INFINITY)
EDIT(e_scale_temp, { c->score = TFM_SCORE_LEARNED_TEMPERATURE;
                     c->scale = 0.5f; })
EDIT(e_additive_dim, { c->score = TFM_SCORE_ADDITIVE; c->additive_dim = -2; })
EDIT(e_kv_3, c->n_kv_heads = 3)
EDIT(e_kv_neg, c->n_kv_heads = -1)
EDIT(e_kv_big, c->n_kv_heads = 8)
EDIT(e_rope, c->rope = (tfm_rope)7)
EDIT(e_rope_odd, { c->rope = TFM_ROPE_HALF; c->rope_dims = 3; })
EDIT(e_rope_big, { c->rope = TFM_ROPE_ADJACENT; c->rope_dims = 10; })
EDIT(e_rope_neg, { c->rope = TFM_ROPE_ADJACENT; c->rope_dims = -2; })
EDIT(e_rope_base, { c->rope = TFM_ROPE_ADJACENT; c->rope_base = -1.0; })
EDIT(e_rope_base_nan, { c->rope = TFM_ROPE_HALF; c->rope_base = NAN; })
/* Bases at or below 1 make frequencies that grow with the pair index (and
 * overflow to inf, then NaN outputs, near 1e-308): refused as for the
 * sinusoidal encoding. */
EDIT(e_rope_base_one, { c->rope = TFM_ROPE_HALF; c->rope_base = 1.0; })
EDIT(e_rope_base_tiny, { c->rope = TFM_ROPE_ADJACENT; c->rope_base = 1e-309; })
EDIT(e_relative, c->relative = (tfm_relative)9)
EDIT(e_shaw_k0, c->relative = TFM_RELATIVE_SHAW)
EDIT(e_shaw_general, { c->relative = TFM_RELATIVE_SHAW;
                       c->max_distance = 2; c->score = TFM_SCORE_GENERAL; })
EDIT(e_t5_buckets, { c->relative = TFM_RELATIVE_T5; c->num_buckets = -1; })
EDIT(e_t5_small, { c->relative = TFM_RELATIVE_T5; c->num_buckets = 2; })
EDIT(e_t5_dist, { c->relative = TFM_RELATIVE_T5; c->num_buckets = 8;
                  c->max_distance = 2; })
EDIT(e_t5_dist_neg, { c->relative = TFM_RELATIVE_T5; c->max_distance = -5; })
EDIT(e_sparsity, c->sparsity = (tfm_sparsity)9)
EDIT(e_window, { c->sparsity = TFM_SPARSE_SLIDING_WINDOW; c->window = -1; })
EDIT(e_dilation, { c->sparsity = TFM_SPARSE_DILATED; c->window = 2;
                   c->dilation = 0; })
EDIT(e_dilation_overflow, { c->sparsity = TFM_SPARSE_DILATED;
                            c->window = INT64_MAX / 2; c->dilation = 3; })
EDIT(e_block, { c->sparsity = TFM_SPARSE_BIGBIRD; c->block_size = 0; })
EDIT(e_random, { c->sparsity = TFM_SPARSE_BIGBIRD; c->block_size = 4;
                 c->n_random_blocks = -1; })
EDIT(e_global_neg, { c->sparsity = TFM_SPARSE_SLIDING_WINDOW;
                     c->n_global = -1; })
EDIT(e_global_none, c->n_global = 2)
EDIT(e_struct_size, c->struct_size = 4)

static const bad_config bad_configs[] = {
    { "score", e_score },           { "score", e_score_neg },
    { "scale", e_scale_neg },       { "scale", e_scale_nan },
    { "scale", e_scale_inf },       { "scale", e_scale_temp },
    { "additive_dim", e_additive_dim },
    { "n_kv_heads", e_kv_3 },       { "n_kv_heads", e_kv_neg },
    { "n_kv_heads", e_kv_big },     { "rope", e_rope },
    { "rope_dims", e_rope_odd },    { "rope_dims", e_rope_big },
    { "rope_dims", e_rope_neg },    { "rope_base", e_rope_base },
    { "rope_base", e_rope_base_nan }, { "rope_base", e_rope_base_one },
    { "rope_base", e_rope_base_tiny },
    { "relative", e_relative },     { "max_distance", e_shaw_k0 },
    { "relative", e_shaw_general }, { "num_buckets", e_t5_buckets },
    { "num_buckets", e_t5_small },  { "max_distance", e_t5_dist },
    { "max_distance", e_t5_dist_neg },
    { "sparsity", e_sparsity },     { "window", e_window },
    { "dilation", e_dilation },     { "window", e_dilation_overflow },
    { "block_size", e_block },      { "n_random_blocks", e_random },
    { "n_global", e_global_neg },   { "n_global", e_global_none },
    { "struct_size", e_struct_size },
};

static void test_invalid_configs(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_configs / sizeof *bad_configs; i++) {
        tfm_attention_config c;
        tfm_attention_config_init(&c);
        bad_configs[i].edit(&c);
        /* 4 heads of width 8 (MHA: d_model 32) */
        tfm_module *m = SENTINEL_MODULE;
        tfm_clear_error();
        tfm_status st = tfm_attention_create(8, 8, 4, &c, &m);
        if (st != TFM_ERR_INVALID_ARGUMENT || m != SENTINEL_MODULE ||
            !strstr(tfm_last_error(), bad_configs[i].needle))
            fail_msg("case %zu (%s): attention_create status %d, "
                     "message \"%s\"", i, bad_configs[i].needle, (int)st,
                     tfm_last_error());
        tfm_clear_error();
        st = tfm_mha_create_ex(32, 4, 0, 0, 1, &c, &m);
        if (st != TFM_ERR_INVALID_ARGUMENT || m != SENTINEL_MODULE ||
            !strstr(tfm_last_error(), bad_configs[i].needle))
            fail_msg("case %zu (%s): mha_create_ex status %d, message "
                     "\"%s\"", i, bad_configs[i].needle, (int)st,
                     tfm_last_error());
        tfm_layer_config lc = tfm_layer_config_default(32, 4);
        st = tfm_encoder_layer_create_ex(&lc, &c, &m);
        assert_int_equal(st, TFM_ERR_INVALID_ARGUMENT);
        assert_ptr_equal(m, SENTINEL_MODULE);
    }
    /* Sizes. */
    tfm_module *m = SENTINEL_MODULE;
    assert_int_equal(tfm_attention_create(0, 8, 4, NULL, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_attention_create(8, 0, 4, NULL, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_attention_create(8, 8, 0, NULL, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(m, SENTINEL_MODULE);
    assert_int_equal(tfm_attention_create(8, 8, 4, NULL, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_mha_create_ex(32, 4, 0, 0, 1, NULL, NULL),
                     TFM_ERR_NULL_ARGUMENT);
}

/* Fields of an unselected variant are ignored. */
static void test_unselected_fields_ignored(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.rope_dims = 3;              /* no RoPE */
    c.max_distance = -4;          /* no relative term */
    c.window = -1;                /* no sparsity */
    c.additive_dim = -1;          /* not additive */
    tfm_module *m = NULL;
    assert_int_equal(tfm_attention_create(8, 8, 4, &c, &m), TFM_OK);
    tfm_module_free(m);
}

/* An older caller's smaller struct: the tail takes the defaults (whatever
 * the memory after struct_size holds), and get_config writes only
 * struct_size bytes. */
static void test_old_struct_size(void **state)
{
    (void)state;
    tfm_attention_config c;
    memset(&c, 0x7f, sizeof c);   /* garbage everywhere */
    c.struct_size = offsetof(tfm_attention_config, rope);
    c.score = TFM_SCORE_DOT;
    c.scale = 0.0f;
    c.additive_dim = 0;
    c.n_kv_heads = 2;
    tfm_module *m = NULL;
    tfm_status st = tfm_attention_create(4, 4, 4, &c, &m);
    if (st != TFM_OK)
        fail_msg("%s", tfm_last_error());
    tfm_attention_config got;
    tfm_attention_config_init(&got);
    assert_int_equal(tfm_attention_get_config(m, &got), TFM_OK);
    assert_int_equal(got.struct_size, sizeof got);
    assert_int_equal(got.score, TFM_SCORE_DOT);
    assert_int_equal(got.n_kv_heads, 2);
    assert_int_equal(got.rope, TFM_ROPE_NONE);
    assert_int_equal(got.relative, TFM_RELATIVE_NONE);
    assert_int_equal(got.sparsity, TFM_SPARSE_NONE);
    assert_int_equal(got.dilation, 1);
    assert_int_equal(got.bidirectional, 1);

    /* GQA from the old struct works: k/v have 2 heads. */
    tfm_tensor *q = make4(1, 4, 3, 4, NULL), *k = make4(1, 2, 5, 4, NULL),
               *v = make4(1, 2, 5, 4, NULL), *out = make4(1, 4, 3, 4, NULL);
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    assert_int_equal(tfm_attention_forward(m, q, k, v, NULL, out, NULL),
                     TFM_OK);

    /* Writing into a small struct leaves the bytes after it alone. */
    unsigned char buf[sizeof(tfm_attention_config)];
    memset(buf, 0xab, sizeof buf);
    tfm_attention_config *small = (tfm_attention_config *)(void *)buf;
    small->struct_size = offsetof(tfm_attention_config, rope);
    assert_int_equal(tfm_attention_get_config(m, small), TFM_OK);
    assert_int_equal(small->struct_size, offsetof(tfm_attention_config, rope));
    assert_int_equal(small->n_kv_heads, 2);
    for (size_t i = offsetof(tfm_attention_config, rope); i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xab);
    small->struct_size = 2;
    assert_int_equal(tfm_attention_get_config(m, small),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_attention_get_config(m, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_attention_get_config(NULL, &got),
                     TFM_ERR_NULL_ARGUMENT);
    tfm_module *ln = NULL;
    assert_int_equal(tfm_layer_norm_create(4, 1e-5f, &ln), TFM_OK);
    assert_int_equal(tfm_attention_get_config(ln, &got), TFM_ERR_WRONG_KIND);
    tfm_module_free(ln);
    FREE_TENSORS(q, k, v, out);
    tfm_module_free(m);
}

/* ---- parameters ------------------------------------------------------------ */

static void expect_param(const tfm_module *m, int index, const char *name,
                         int rank, const int64_t *shape)
{
    const char *got = tfm_module_parameter_name(m, index);
    if (!got || strcmp(got, name) != 0)
        fail_msg("parameter %d is %s, expected %s", index,
                 got ? got : "(none)", name);
    int r;
    int64_t s[TFM_MAX_RANK];
    assert_int_equal(tfm_module_parameter_shape(m, name, &r, s), TFM_OK);
    assert_int_equal(r, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(s[i], shape[i]);
}

static void test_parameters(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_module *m = NULL;

    /* GQA packed: [d + 2 kv, d]; then the variant's parameters. */
    tfm_attention_config_init(&c);
    c.n_kv_heads = 2;
    c.score = TFM_SCORE_LEARNED_TEMPERATURE;
    c.relative = TFM_RELATIVE_T5;
    c.num_buckets = 8;
    c.max_distance = 20;
    assert_int_equal(tfm_mha_create_ex(16, 4, 0, 0, 1, &c, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 6);
    expect_param(m, 0, "in_proj_weight", 2, (int64_t[]){ 32, 16 });
    expect_param(m, 1, "in_proj_bias", 1, (int64_t[]){ 32 });
    expect_param(m, 2, "out_proj.weight", 2, (int64_t[]){ 16, 16 });
    expect_param(m, 3, "out_proj.bias", 1, (int64_t[]){ 16 });
    expect_param(m, 4, "temperature", 1, (int64_t[]){ 4 });
    expect_param(m, 5, "relative_attention_bias.weight", 2,
                 (int64_t[]){ 8, 4 });
    /* The temperature starts at sqrt(d_k) = 2; T5 biases at zero. */
    tfm_tensor *t = make(1, (const int64_t[]){ 4 }, NULL);
    assert_int_equal(tfm_module_get_parameter(m, "temperature", t), TFM_OK);
    EXPECT_VALUES(t, 0, 2, 2, 2, 2);
    tfm_tensor_free(t);
    int64_t macs_gqa = 0, macs_full = 0;
    assert_int_equal(tfm_module_forward_macs(m, 1, 5, 5, &macs_gqa), TFM_OK);
    tfm_module_free(m);
    assert_int_equal(tfm_mha_create(16, 4, 0, 0, 1, &m), TFM_OK);
    assert_int_equal(tfm_module_forward_macs(m, 1, 5, 5, &macs_full), TFM_OK);
    /* K and V projections: 5 * 16 * (16 - 8) MACs each fewer. */
    assert_int_equal(macs_full - macs_gqa, 2 * 5 * 16 * 8);
    tfm_module_free(m);

    /* MQA unpacked, additive, Shaw with values. */
    tfm_attention_config_init(&c);
    c.n_kv_heads = 1;
    c.score = TFM_SCORE_ADDITIVE;
    c.additive_dim = 6;
    assert_int_equal(tfm_mha_create_ex(16, 4, 12, 10, 0, &c, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 7);
    expect_param(m, 0, "q_proj_weight", 2, (int64_t[]){ 16, 16 });
    expect_param(m, 1, "k_proj_weight", 2, (int64_t[]){ 4, 12 });
    expect_param(m, 2, "v_proj_weight", 2, (int64_t[]){ 4, 10 });
    expect_param(m, 3, "out_proj.weight", 2, (int64_t[]){ 16, 16 });
    expect_param(m, 4, "additive_query", 3, (int64_t[]){ 4, 6, 4 });
    expect_param(m, 5, "additive_key", 3, (int64_t[]){ 4, 6, 4 });
    expect_param(m, 6, "additive_v", 2, (int64_t[]){ 4, 6 });
    tfm_module_free(m);

    tfm_attention_config_init(&c);
    c.score = TFM_SCORE_GENERAL;
    assert_int_equal(tfm_attention_create(4, 6, 3, &c, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 1);
    expect_param(m, 0, "score_weight", 3, (int64_t[]){ 3, 4, 4 });
    tfm_module_free(m);

    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_SHAW;
    c.max_distance = 3;
    c.relative_values = 1;
    assert_int_equal(tfm_attention_create(4, 6, 3, &c, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 2);
    expect_param(m, 0, "relative_key.weight", 2, (int64_t[]){ 7, 4 });
    expect_param(m, 1, "relative_value.weight", 2, (int64_t[]){ 7, 6 });
    tfm_module_free(m);

    /* No learned parameters: none listed. */
    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_ALIBI;
    c.rope = TFM_ROPE_HALF;
    assert_int_equal(tfm_attention_create(4, 4, 3, &c, &m), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(m), 0);
    tfm_module_free(m);
}

/* tfm_mha_create == tfm_mha_create_ex(NULL) == a default config; and the
 * default tfm_attention module equals tfm_sdpa bit for bit. */
static void test_defaults_unchanged(void **state)
{
    (void)state;
    tfm_module *a = NULL, *b = NULL, *c = NULL;
    tfm_attention_config cfg;
    tfm_attention_config_init(&cfg);
    assert_int_equal(tfm_mha_create(16, 4, 0, 0, 1, &a), TFM_OK);
    assert_int_equal(tfm_mha_create_ex(16, 4, 0, 0, 1, NULL, &b), TFM_OK);
    assert_int_equal(tfm_mha_create_ex(16, 4, 0, 0, 1, &cfg, &c), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(a), 4);
    assert_int_equal(tfm_module_parameter_count(b), 4);
    assert_int_equal(tfm_module_parameter_count(c), 4);
    randomize_params(a, 11, 7);
    randomize_params(b, 11, 7);
    randomize_params(c, 11, 7);
    tfm_tensor *x = make3(2, 5, 16, NULL), *oa = make3(2, 5, 16, NULL),
               *ob = make3(2, 5, 16, NULL), *wa = make4(2, 4, 5, 5, NULL),
               *wb = make4(2, 4, 5, 5, NULL);
    fill_random(x, 5);
    tfm_attention_masks masks = { .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_mha_forward(a, x, x, x, &masks, oa, wa), TFM_OK);
    assert_int_equal(tfm_mha_forward(b, x, x, x, &masks, ob, wb), TFM_OK);
    expect_bit_identical(oa, ob, "mha_create_ex(NULL)");
    expect_bit_identical(wa, wb, "weights");
    assert_int_equal(tfm_mha_forward(c, x, x, x, &masks, ob, wb), TFM_OK);
    expect_bit_identical(oa, ob, "mha_create_ex(default)");
    tfm_attention_config got;
    tfm_attention_config_init(&got);
    assert_int_equal(tfm_attention_get_config(a, &got), TFM_OK);
    assert_memory_equal(&got, &cfg, sizeof got);
    FREE_TENSORS(x, oa, ob, wa, wb);
    tfm_module_free(a);
    tfm_module_free(b);
    tfm_module_free(c);

    tfm_module *att = NULL;
    assert_int_equal(tfm_attention_create(4, 3, 2, NULL, &att), TFM_OK);
    tfm_tensor *q = make4(2, 2, 5, 4, NULL), *k = make4(2, 2, 7, 4, NULL),
               *v = make4(2, 2, 7, 3, NULL), *o1 = make4(2, 2, 5, 3, NULL),
               *o2 = make4(2, 2, 5, 3, NULL);
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    assert_int_equal(tfm_sdpa(q, k, v, NULL, 0.0f, o1, NULL), TFM_OK);
    assert_int_equal(tfm_attention_forward(att, q, k, v, NULL, o2, NULL),
                     TFM_OK);
    expect_bit_identical(o1, o2, "tfm_attention_forward vs tfm_sdpa");
    FREE_TENSORS(q, k, v, o1, o2);
    tfm_module_free(att);
}

/* Encoder layers with a variant: the config comes back, parameters are
 * "self_attn.*", and with NULL the layer is the old one bit for bit. */
static void test_encoder_layer_ex(void **state)
{
    (void)state;
    tfm_layer_config lc = tfm_layer_config_default(16, 4);
    lc.d_ff = 24;
    tfm_module *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(tfm_encoder_layer_create(&lc, &a), TFM_OK);
    assert_int_equal(tfm_encoder_layer_create_ex(&lc, NULL, &b), TFM_OK);
    assert_int_equal(tfm_module_parameter_count(a),
                     tfm_module_parameter_count(b));
    randomize_params(a, 3, 5);
    randomize_params(b, 3, 5);
    tfm_tensor *x = make3(2, 6, 16, NULL), *oa = make3(2, 6, 16, NULL),
               *ob = make3(2, 6, 16, NULL);
    fill_random(x, 9);
    assert_int_equal(tfm_encoder_layer_forward(a, x, NULL, oa), TFM_OK);
    assert_int_equal(tfm_encoder_layer_forward(b, x, NULL, ob), TFM_OK);
    expect_bit_identical(oa, ob, "encoder_layer_create_ex(NULL)");

    tfm_attention_config cfg;
    tfm_attention_config_init(&cfg);
    cfg.n_kv_heads = 2;
    cfg.rope = TFM_ROPE_HALF;
    cfg.score = TFM_SCORE_LEARNED_TEMPERATURE;
    assert_int_equal(tfm_encoder_layer_create_ex(&lc, &cfg, &c), TFM_OK);
    int rank;
    int64_t shape[TFM_MAX_RANK];
    assert_int_equal(tfm_module_parameter_shape(c, "self_attn.in_proj_weight",
                                                &rank, shape), TFM_OK);
    assert_int_equal(shape[0], 32);
    assert_int_equal(tfm_module_parameter_shape(c, "self_attn.temperature",
                                                &rank, shape), TFM_OK);
    assert_int_equal(shape[0], 4);
    tfm_attention_config got;
    tfm_attention_config_init(&got);
    assert_int_equal(tfm_attention_get_config(c, &got), TFM_OK);
    assert_memory_equal(&got, &cfg, sizeof got);
    randomize_params(c, 3, 5);
    /* A negative temperature fails the forward pass; out untouched. */
    set_param(c, "self_attn.temperature", 1, (int64_t[]){ 4 },
              (const float[]){ 1.0f, 2.0f, -0.5f, 1.0f });
    arm_failing_call(ob, NULL);
    expect_failed_call(tfm_encoder_layer_forward(c, x, NULL, ob),
                       TFM_ERR_INVALID_ARGUMENT, ob, NULL, "temperature",
                       __LINE__);
    set_param(c, "self_attn.temperature", 1, (int64_t[]){ 4 },
              (const float[]){ 1.0f, 2.0f, 0.5f, 1.0f });
    assert_int_equal(tfm_encoder_layer_forward(c, x, NULL, ob), TFM_OK);
    FREE_TENSORS(x, oa, ob);
    tfm_module_free(a);
    tfm_module_free(b);
    tfm_module_free(c);
}

/* ---- forward errors ---------------------------------------------------- */

static void test_temperature_refused(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.score = TFM_SCORE_LEARNED_TEMPERATURE;
    tfm_module *att = NULL, *mha = NULL;
    assert_int_equal(tfm_attention_create(4, 4, 2, &c, &att), TFM_OK);
    assert_int_equal(tfm_mha_create_ex(8, 2, 0, 0, 1, &c, &mha), TFM_OK);
    randomize_params(mha, 1, 3);
    tfm_tensor *q = make4(1, 2, 3, 4, NULL), *k = make4(1, 2, 3, 4, NULL),
               *v = make4(1, 2, 3, 4, NULL), *out = make4(1, 2, 3, 4, NULL),
               *w = make4(1, 2, 3, 3, NULL), *x = make3(1, 3, 8, NULL),
               *y = make3(1, 3, 8, NULL), *wa = make3(1, 3, 3, NULL);
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    fill_random(x, 4);
    const float bad[][2] = { { 1.0f, 0.0f }, { -1.0f, 1.0f },
                             { 1e-45f, 1.0f } };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        set_param(att, "temperature", 1, (int64_t[]){ 2 }, bad[i]);
        set_param(mha, "temperature", 1, (int64_t[]){ 2 }, bad[i]);
        arm_failing_call(out, w);
        expect_failed_call(tfm_attention_forward(att, q, k, v, NULL, out, w),
                           TFM_ERR_INVALID_ARGUMENT, out, w, "temperature",
                           __LINE__);
        arm_failing_call(y, wa);
        expect_failed_call(tfm_mha_forward(mha, x, x, x, NULL, y, wa),
                           TFM_ERR_INVALID_ARGUMENT, y, wa, "temperature",
                           __LINE__);
    }
    /* The initial temperature sqrt(d_k) is plain scaled dot product. */
    tfm_module_free(att);
    assert_int_equal(tfm_attention_create(4, 4, 2, &c, &att), TFM_OK);
    tfm_tensor *ref = make4(1, 2, 3, 4, NULL);
    assert_int_equal(tfm_sdpa(q, k, v, NULL, 0.0f, ref, NULL), TFM_OK);
    assert_int_equal(tfm_attention_forward(att, q, k, v, NULL, out, NULL),
                     TFM_OK);
    EXPECT_CLOSE(out, ref, 1e-6, "temperature sqrt(d_k)");
    FREE_TENSORS(q, k, v, out, w, x, y, wa, ref);
    tfm_module_free(att);
    tfm_module_free(mha);
}

static void test_shape_errors(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.n_kv_heads = 2;
    tfm_module *att = NULL;
    assert_int_equal(tfm_attention_create(4, 3, 4, &c, &att), TFM_OK);
    tfm_tensor *q = make4(1, 4, 3, 4, NULL), *k = make4(1, 2, 5, 4, NULL),
               *v = make4(1, 2, 5, 3, NULL), *out = make4(1, 4, 3, 3, NULL),
               *w = make4(1, 4, 3, 5, NULL), *k4 = make4(1, 4, 5, 4, NULL),
               *v4 = make4(1, 4, 5, 3, NULL), *q2 = make4(1, 2, 3, 4, NULL),
               *w2 = make4(1, 2, 3, 5, NULL), *k3 = make3(2, 5, 4, NULL),
               *vd = make4(1, 2, 5, 4, NULL);
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    struct {
        const tfm_tensor *q, *k, *v;
        tfm_tensor *w;
        tfm_status want;
        const char *needle;
    } calls[] = {
        { q, k4, v, w, TFM_ERR_SHAPE, "k" },      /* k with H heads */
        { q, k, v4, w, TFM_ERR_SHAPE, "v" },      /* v with H heads */
        { q2, k, v, w, TFM_ERR_SHAPE, "q" },      /* q with H_kv heads */
        { q, k, v, w2, TFM_ERR_SHAPE, "weights" },
        { q, k3, v, w, TFM_ERR_SHAPE, "k" },      /* rank 3 */
        { q, k, vd, w, TFM_ERR_SHAPE, "v" },      /* d_v mismatch */
        { NULL, k, v, w, TFM_ERR_NULL_ARGUMENT, "q" },
    };
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        arm_failing_call(out, w);
        expect_failed_call(tfm_attention_forward(att, calls[i].q, calls[i].k,
                                                 calls[i].v, NULL, out,
                                                 calls[i].w),
                           calls[i].want, out, w, calls[i].needle,
                           (int)(__LINE__ * 100 + i));
    }
    /* Wrong module kind. */
    tfm_module *mha = NULL;
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &mha), TFM_OK);
    arm_failing_call(out, NULL);
    expect_failed_call(tfm_attention_forward(mha, q, k, v, NULL, out, NULL),
                       TFM_ERR_WRONG_KIND, out, NULL, NULL, __LINE__);
    /* Masks are checked against the query heads. */
    tfm_tensor *am = make4(1, 2, 3, 5, NULL);
    tfm_attention_masks masks = { .attn_mask = am,
                                  .attn_mask_kind = TFM_MASK_ADDITIVE };
    arm_failing_call(out, NULL);
    expect_failed_call(tfm_attention_forward(att, q, k, v, &masks, out, NULL),
                       TFM_ERR_SHAPE, out, NULL, NULL, __LINE__);

    /* GQA multi-head attention checks its inputs as before. */
    tfm_module *g = NULL;
    assert_int_equal(tfm_mha_create_ex(16, 4, 6, 6, 1, &c, &g), TFM_OK);
    tfm_tensor *x = make3(1, 3, 16, NULL), *kx = make3(1, 5, 16, NULL),
               *y = make3(1, 3, 16, NULL);
    arm_failing_call(y, NULL);
    expect_failed_call(tfm_mha_forward(g, x, kx, kx, NULL, y, NULL),
                       TFM_ERR_SHAPE, y, NULL, "key", __LINE__);
    FREE_TENSORS(q, k, v, out, w, k4, v4, q2, w2, k3, vd, am, x, kx, y);
    tfm_module_free(att);
    tfm_module_free(mha);
    tfm_module_free(g);
}

/* Out-of-memory on every allocation of a variant forward pass: the output
 * stays untouched. */
static void test_oom(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.score = TFM_SCORE_ADDITIVE;
    c.n_kv_heads = 1;
    c.rope = TFM_ROPE_ADJACENT;
    c.relative = TFM_RELATIVE_ALIBI;
    tfm_module *att = NULL;
    assert_int_equal(tfm_attention_create(4, 4, 2, &c, &att), TFM_OK);
    randomize_params(att, 1, 2);
    tfm_tensor *q = make4(1, 2, 300, 4, NULL), *k = make4(1, 1, 300, 4, NULL),
               *v = make4(1, 1, 300, 4, NULL), *out = make4(1, 2, 300, 4,
                                                            NULL);
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    int failures = 0;
    for (long n = 1; n < 50; n++) {
        fill(out, 42.0f);
        tfm_testing_fail_allocation(n);
        tfm_status st = tfm_attention_forward(att, q, k, v, NULL, out, NULL);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK)
            break;
        assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
        expect_all_equal(out, 42.0f, "out after out-of-memory");
        failures++;
    }
    (void)failures;   /* the workspace may already hold enough memory */
    FREE_TENSORS(q, k, v, out);
    tfm_module_free(att);
}

/* ---- KV-cache decoding with a variant (tfm__mha_run_cached) --------------- */

/* A decoder-only model with variant *a: the logits of a prompt decoded
 * through the KV cache (prefill of 5, then one token at a time) equal the
 * rows of one full pass. */
static void check_cached_decoding(const tfm_attention_config *a,
                                  const char *what)
{
    enum { V = 11, T = 13, D = 16 };
    tfm_model_config mc = {
        .architecture = TFM_ARCH_DECODER_ONLY,
        .layer = tfm_layer_config_default(D, 4),
        .vocab_size = V, .n_layers = 2, .context_length = 32,
        .positional = TFM_POSITIONAL_NONE,
    };
    mc.layer.d_ff = 24;
    tfm_model_options opt;
    tfm_model_options_init(&opt);
    opt.attention = *a;
    tfm_module *model = NULL;
    tfm_status st = tfm_model_create_ex(&mc, &opt, &model);
    if (st != TFM_OK)
        fail_msg("%s: model: %s", what, tfm_last_error());
    randomize_params(model, 17, 3);
    /* Keep learned temperatures positive. */
    int rank;
    int64_t shape[TFM_MAX_RANK];
    for (int l = 0; l < 2; l++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.self_attn.temperature", l);
        if (tfm_module_parameter_shape(model, name, &rank, shape) == TFM_OK)
            set_param(model, name, 1, (int64_t[]){ 4 },
                      (const float[]){ 1.5f, 0.7f, 2.0f, 3.0f });
    }
    int32_t ids[T];
    for (int i = 0; i < T; i++)
        ids[i] = (int32_t)((i * 7 + 3) % V);
    tfm_tensor *full = make3(1, T, V, NULL), *step = make2(T, V, NULL);
    st = tfm_model_logits(model, ids, 1, T, full);
    if (st != TFM_OK)
        fail_msg("%s: logits: %s", what, tfm_last_error());
    tfm_kv_cache *cache = NULL;
    assert_int_equal(tfm_kv_cache_create(model, T, &cache), TFM_OK);
    float *sd = tfm_tensor_data(step);
    tfm_tensor *five = NULL, *one = NULL;
    assert_int_equal(tfm_tensor_wrap(2, (const int64_t[]){ 5, V }, sd, &five),
                     TFM_OK);
    st = tfm_kv_cache_decode(cache, ids, 5, five);
    if (st != TFM_OK)
        fail_msg("%s: decode: %s", what, tfm_last_error());
    for (int i = 5; i < T; i++) {
        assert_int_equal(tfm_tensor_wrap(2, (const int64_t[]){ 1, V },
                                         sd + i * V, &one), TFM_OK);
        st = tfm_kv_cache_decode(cache, ids + i, 1, one);
        if (st != TFM_OK)
            fail_msg("%s: decode %d: %s", what, i, tfm_last_error());
        tfm_tensor_free(one);
    }
    const float *fd = tfm_tensor_data_const(full);
    double err = 0, ref = 0;
    for (int i = 0; i < T * V; i++) {
        err = fmax(err, fabs((double)sd[i] - fd[i]));
        ref = fmax(ref, fabs((double)fd[i]));
    }
    print_message("kv cache %-28s rel err %.2e\n", what, err / ref);
    if (!(err / ref <= 1e-5))
        fail_msg("%s: cached logits differ from a full pass (%g)", what,
                 err / ref);
    tfm_kv_cache_free(cache);
    FREE_TENSORS(full, step, five);
    tfm_module_free(model);
}

static void test_kv_cache_variants(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.n_kv_heads = 2;
    c.rope = TFM_ROPE_ADJACENT;
    check_cached_decoding(&c, "gqa rope adjacent");
    tfm_attention_config_init(&c);
    c.n_kv_heads = 1;
    c.rope = TFM_ROPE_HALF;
    c.rope_dims = 2;
    c.rope_base = 50.0;
    c.sparsity = TFM_SPARSE_SLIDING_WINDOW;
    c.window = 3;
    c.n_global = 1;
    check_cached_decoding(&c, "mqa rope half window");
    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_ALIBI;
    c.sparsity = TFM_SPARSE_DILATED;
    c.window = 3;
    c.dilation = 2;
    check_cached_decoding(&c, "alibi dilated");
    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_T5;
    c.bidirectional = 0;
    c.num_buckets = 6;
    c.max_distance = 8;
    c.score = TFM_SCORE_DOT;
    check_cached_decoding(&c, "t5 dot");
    tfm_attention_config_init(&c);
    c.relative = TFM_RELATIVE_SHAW;
    c.max_distance = 3;
    c.relative_values = 1;
    c.score = TFM_SCORE_LEARNED_TEMPERATURE;
    check_cached_decoding(&c, "shaw values temperature");
    tfm_attention_config_init(&c);
    c.score = TFM_SCORE_ADDITIVE;
    c.additive_dim = 3;
    c.n_kv_heads = 2;
    c.sparsity = TFM_SPARSE_BIGBIRD;
    c.block_size = 2;
    c.window = 1;
    c.n_random_blocks = 1;
    c.seed = 5;
    check_cached_decoding(&c, "additive gqa bigbird");
    tfm_attention_config_init(&c);
    c.score = TFM_SCORE_GENERAL;
    check_cached_decoding(&c, "general");
}

/* ---- driver ------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    static const char ext[] = ".safetensors";
    const char *dir = argc > 1 ? argv[1] : TFM_VARIANT_FIXTURES_DIR;
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_config_init),
        cmocka_unit_test(test_invalid_configs),
        cmocka_unit_test(test_unselected_fields_ignored),
        cmocka_unit_test(test_old_struct_size),
        cmocka_unit_test(test_parameters),
        cmocka_unit_test(test_defaults_unchanged),
        cmocka_unit_test(test_encoder_layer_ex),
        cmocka_unit_test(test_temperature_refused),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_kv_cache_variants),
    };
    const size_t n_fixed = sizeof fixed / sizeof *fixed;

    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "test_variants: cannot open %s\n", dir);
        return 1;
    }
    char *files[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 256) {
        size_t len = strlen(e->d_name);
        if (len > sizeof ext - 1 &&
            strcmp(e->d_name + len - (sizeof ext - 1), ext) == 0)
            files[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n == 0) {
        fprintf(stderr, "test_variants: no cases in %s (run "
                        "tools/make_variant_fixtures.py)\n", dir);
        return 1;
    }
    qsort(files, n, sizeof *files, cmp_str);
    variant_case *vc = calloc(n, sizeof *vc);
    struct CMUnitTest *tests = calloc(n + n_fixed, sizeof *tests);
    if (!vc || !tests)
        return 1;
    memcpy(tests, fixed, sizeof fixed);
    for (size_t i = 0; i < n; i++) {
        size_t plen = strlen(dir) + strlen(files[i]) + 2;
        vc[i].path = malloc(plen);
        vc[i].name = files[i];
        if (!vc[i].path)
            return 1;
        snprintf(vc[i].path, plen, "%s/%s", dir, files[i]);
        vc[i].name[strlen(files[i]) - (sizeof ext - 1)] = '\0';
        tests[n_fixed + i] = (struct CMUnitTest){ .name = vc[i].name,
                                                  .test_func = test_case,
                                                  .initial_state = &vc[i] };
    }
    int rc = _cmocka_run_group_tests("test_variants", tests, n + n_fixed,
                                     NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        free(vc[i].path);
        free(vc[i].name);
    }
    free(vc);
    free(tests);
    return rc;
}
