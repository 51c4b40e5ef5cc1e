/*
 * Weights stored in 16, 8 and 4 bits (transformer/weights.h): a model
 * quantised with tfm_module_quantize computes exactly what a float32
 * model holding the widened weights computes (the widened weights read
 * back through tfm_module_get_parameter, set into a fresh float32 model);
 * sizes, refusals and the all-or-nothing rule.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "tiny_model.h"

/* A Llama-like decoder (pre-norm RMSNorm, gated SiLU network, grouped
 * query heads, untied head) or a GPT-2-like one (LayerNorm, GELU, tied
 * head, learned positions); d_model 64 so that rows are whole blocks. */
static tfm_module *make_model(int llama, int64_t d, uint32_t seed)
{
    tfm_layer_config layer = tfm_layer_config_default(d, 4);
    layer.d_ff = 2 * d;
    layer.norm_first = 1;
    layer.activation = llama ? TFM_ACTIVATION_SILU : TFM_ACTIVATION_GELU;
    tfm_model_config c = tiny_model_config(TFM_ARCH_DECODER_ONLY, layer, 96,
                                           2, 16);
    tfm_model_options o;
    tfm_model_options_init(&o);
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    if (llama) {
        c.positional = TFM_POSITIONAL_NONE;
        c.tied_embeddings = 0;
        o.attention.rope = TFM_ROPE_HALF;
        o.attention.n_kv_heads = 2;
        lo.rms_norm = 1;
        lo.gated = 1;
        lo.bias = 0;
    }
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create_v2(&c, &o, &lo, &m), TFM_OK);
    randomize_params(m, seed, 1000);
    return m;
}

static tfm_tensor *logits_of(const tfm_module *m)
{
    static const int32_t ids[2 * 7] = { 1, 5, 9, 33, 2, 95, 40,
                                        7, 7, 0, 61, 12, 88, 3 };
    tfm_tensor *y = make3(2, 7, 96, NULL);
    assert_int_equal(tfm_model_logits(m, ids, 2, 7, y), TFM_OK);
    return y;
}

/* A float32 copy of m's current values (widened). */
static tfm_module *float_copy(const tfm_module *m, int llama, int64_t d)
{
    tfm_module *f = make_model(llama, d, 1);
    for (int i = 0; i < tfm_module_parameter_count(m); i++) {
        const char *name = tfm_module_parameter_name(m, i);
        int rank = 0;
        int64_t shape[TFM_MAX_RANK];
        assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape),
                         TFM_OK);
        tfm_tensor *t = make(rank, shape, NULL);
        assert_int_equal(tfm_module_get_parameter(m, name, t), TFM_OK);
        assert_int_equal(tfm_module_set_parameter(f, name, t), TFM_OK);
        tfm_tensor_free(t);
    }
    return f;
}

static void equal_to_widened(int llama, tfm_dtype dtype)
{
    const int64_t d = 64;
    tfm_module *m = make_model(llama, d, 7);
    tfm_tensor *before = logits_of(m);
    assert_int_equal(tfm_module_quantize(m, dtype), TFM_OK);
    tfm_dtype got = TFM_DTYPE_F32;
    assert_int_equal(tfm_module_parameter_dtype(
                         m, "layers.0.linear1.weight", &got), TFM_OK);
    assert_int_equal(got, dtype);
    assert_int_equal(tfm_module_parameter_dtype(
                         m, "layers.0.norm1.weight", &got), TFM_OK);
    assert_int_equal(got, TFM_DTYPE_F32);
    tfm_tensor *q = logits_of(m);
    tfm_module *f = float_copy(m, llama, d);
    tfm_tensor *ref = logits_of(f);
    /* The product is OpenBLAS's on the widened weights: the same sums. */
    assert_true(rel_err(tfm_tensor_data(q), tfm_tensor_data(ref), tfm_tensor_numel(q)) <= 1e-6);
    /* And quantisation changed the weights (not a no-op), by a bounded
     * amount: Q4_0 keeps about 3 significant bits. */
    const double moved = rel_err(tfm_tensor_data(q), tfm_tensor_data(before), tfm_tensor_numel(q));
    if (dtype != TFM_DTYPE_F32)
        assert_true(moved > 0.0);
    printf("dtype %s: logits moved by %.3g (relative)\n",
           tfm_enum_name(TFM_ENUM_DTYPE, dtype), moved);
    assert_true(moved < (dtype == TFM_DTYPE_Q4_0 ? 1.5 : 0.1));
    FREE_TENSORS(before, q, ref);
    tfm_module_free(f);
    tfm_module_free(m);
}

static void test_llama_every_dtype(void **state)
{
    (void)state;
    equal_to_widened(1, TFM_DTYPE_BF16);
    equal_to_widened(1, TFM_DTYPE_F16);
    equal_to_widened(1, TFM_DTYPE_Q8_0);
    equal_to_widened(1, TFM_DTYPE_Q4_0);
}

static void test_gpt2_every_dtype(void **state)
{
    (void)state;
    equal_to_widened(0, TFM_DTYPE_BF16);
    equal_to_widened(0, TFM_DTYPE_Q8_0);
    equal_to_widened(0, TFM_DTYPE_Q4_0);
}

/* Bytes: each convertible weight at its type's size, the rest at 4. */
static void test_parameter_bytes(void **state)
{
    (void)state;
    tfm_module *m = make_model(1, 64, 3);
    const int64_t f32 = tfm_module_parameter_bytes(m);
    assert_int_equal(f32, 4 * tfm_module_num_parameters(m));
    int64_t conv = 0;
    for (int i = 0; i < tfm_module_parameter_count(m); i++) {
        const char *name = tfm_module_parameter_name(m, i);
        int rank = 0;
        int64_t shape[TFM_MAX_RANK];
        assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape),
                         TFM_OK);
        if (rank == 2)
            conv += shape[0] * shape[1];
    }
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_Q8_0), TFM_OK);
    /* Q8_0: 34 bytes per 32 values. */
    assert_int_equal(tfm_module_parameter_bytes(m),
                     f32 - 4 * conv + conv / 32 * 34);
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_Q4_0), TFM_OK);
    assert_int_equal(tfm_module_parameter_bytes(m),
                     f32 - 4 * conv + conv / 32 * 18);
    assert_int_equal(tfm_module_parameter_bytes(NULL), -1);
    tfm_module_free(m);
}

/* Back to float32: exactly the widened values; then it trains again. */
static void test_back_to_float(void **state)
{
    (void)state;
    tfm_module *m = make_model(0, 64, 5);
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_Q8_0), TFM_OK);
    tfm_module *f = float_copy(m, 0, 64);
    assert_int_equal(tfm_module_train(m, 1), TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "Q8_0"));
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_F32), TFM_OK);
    tfm_tensor *a = logits_of(m), *b = logits_of(f);
    expect_bit_identical(a, b, "back to float32");
    assert_int_equal(tfm_module_train(m, 1), TFM_OK);
    FREE_TENSORS(a, b);
    tfm_module_free(f);
    tfm_module_free(m);
}

/* What a module with stored weights refuses, and set_parameter storing
 * the new values in the parameter's type. */
static void test_refusals(void **state)
{
    (void)state;
    tfm_module *m = make_model(1, 64, 9);
    assert_int_equal(tfm_module_quantize(NULL, TFM_DTYPE_Q8_0),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_I8),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_quantize(m, (tfm_dtype)99),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_Q4_0), TFM_OK);
    float *data = NULL;
    assert_int_equal(tfm_module_parameter_data(m, "layers.0.linear1.weight",
                                               &data),
                     TFM_ERR_UNSUPPORTED);
    assert_null(data);
    tfm_rng rng;
    tfm_rng_seed(&rng, 1);
    assert_int_equal(tfm_module_reset_parameters(m, &rng),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_optimizer_options oo;
    tfm_optimizer_options_init(&oo, TFM_OPTIMIZER_ADAMW);
    tfm_optimizer *opt = NULL;
    assert_int_equal(tfm_optimizer_create(m, &oo, &opt),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_null(opt);
    /* set: the values are quantised into Q4_0 (32 equal values 0.25: the
     * largest-magnitude value m = 0.25, d = m / -8 = -0.03125 (exact in
     * fp16), q = trunc(0.25 / d + 8.5) = trunc(0.5) = 0 -> value
     * d * (0 - 8) = 0.25 exactly). */
    tfm_tensor *w = make2(128, 64, NULL);
    fill(w, 0.25f);
    assert_int_equal(tfm_module_set_parameter(m, "layers.1.linear2.weight",
                                              w),
                     TFM_ERR_SHAPE);
    tfm_tensor_free(w);
    w = make2(64, 128, NULL);
    fill(w, 0.25f);
    assert_int_equal(tfm_module_set_parameter(m, "layers.1.linear2.weight",
                                              w), TFM_OK);
    tfm_tensor *back = make2(64, 128, NULL);
    assert_int_equal(tfm_module_get_parameter(m, "layers.1.linear2.weight",
                                              back), TFM_OK);
    expect_all_equal(back, 0.25f, "set through Q4_0");
    tfm_dtype dt = TFM_DTYPE_F32;
    assert_int_equal(tfm_module_parameter_dtype(m, "layers.1.linear2.weight",
                                                &dt), TFM_OK);
    assert_int_equal(dt, TFM_DTYPE_Q4_0);
    assert_int_equal(tfm_module_parameter_dtype(m, "nope", &dt),
                     TFM_ERR_NOT_FOUND);
    FREE_TENSORS(w, back);
    tfm_module_free(m);
}

/* All or nothing: a weight with rows of 48 values (not a multiple of 32)
 * or holding NaN stops the whole conversion; nothing changed. */
static void test_all_or_nothing(void **state)
{
    (void)state;
    tfm_module *m = make_model(0, 48, 11);
    tfm_tensor *before = logits_of(m);
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_Q8_0),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "multiple of 32"));
    assert_int_equal(tfm_module_parameter_bytes(m),
                     4 * tfm_module_num_parameters(m));
    /* F16 has no block: it converts. */
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_F16), TFM_OK);
    tfm_module_free(m);

    m = make_model(0, 64, 11);
    float *data = NULL;
    assert_int_equal(tfm_module_parameter_data(m, "layers.1.linear2.weight",
                                               &data), TFM_OK);
    data[5] = NAN;
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_Q8_0),
                     TFM_ERR_NON_FINITE);
    assert_non_null(strstr(tfm_last_error(), "layers.1.linear2.weight"));
    assert_int_equal(tfm_module_parameter_bytes(m),
                     4 * tfm_module_num_parameters(m));
    /* 1e5 is past binary16's largest value (65504): F16 refused; Q8_0
     * takes it (its block scale 1e5 / 127 fits binary16). */
    data[5] = 1e5f;
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_F16), TFM_ERR_OVERFLOW);
    assert_non_null(strstr(tfm_last_error(), "too large for F16"));
    assert_int_equal(tfm_module_parameter_bytes(m),
                     4 * tfm_module_num_parameters(m));
    data[5] = 0.0f;
    tfm_tensor *after = logits_of(m);
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_Q8_0), TFM_OK);
    FREE_TENSORS(before, after);
    tfm_module_free(m);
}

/* Out of memory at every allocation of a conversion: refused, nothing
 * changed, no leak (valgrind, ASan). */
static void test_out_of_memory(void **state)
{
    (void)state;
    tfm_module *m = make_model(1, 64, 13);
    tfm_tensor *before = logits_of(m);
    int ok = 0;
    for (long k = 1; k < 400 && !ok; k++) {
        tfm_testing_fail_allocation(k);
        tfm_status st = tfm_module_quantize(m, TFM_DTYPE_Q8_0);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK) {
            ok = 1;
            break;
        }
        assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
        assert_int_equal(tfm_module_parameter_bytes(m),
                         4 * tfm_module_num_parameters(m));
    }
    assert_true(ok);
    FREE_TENSORS(before);
    tfm_module_free(m);
}

static void saved(const tfm_module *m, char *path)
{
    strcpy(path, "/tmp/tfm_weights_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tfm_model_save(m, path, 0, NULL, NULL), TFM_OK);
}

static tfm_module *loaded(const char *path, int dtype, int mmap)
{
    tfm_load_options o;
    tfm_load_options_init(&o);
    assert_int_equal(o.dtype, TFM_DTYPE_F32);
    assert_int_equal(o.mmap, 1);
    o.dtype = dtype;
    o.mmap = mmap;
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_load_v2(path, &o, &m), TFM_OK);
    return m;
}

/* Model files keep stored types: Q8_0 / Q4_0 as blocks, BF16 / F16 as
 * those dtypes; read back bit for bit, in place or copied. */
static void test_model_file_round_trip(void **state)
{
    (void)state;
    static const tfm_dtype TYPES[] = { TFM_DTYPE_Q8_0, TFM_DTYPE_Q4_0,
                                       TFM_DTYPE_BF16, TFM_DTYPE_F16 };
    for (size_t k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++) {
        tfm_module *m = make_model(1, 64, 17);
        assert_int_equal(tfm_module_quantize(m, TYPES[k]), TFM_OK);
        tfm_tensor *want = logits_of(m);
        char path[64];
        saved(m, path);
        for (int mmap = 0; mmap <= 1; mmap++) {
            tfm_module *b = loaded(path, TFM_LOAD_DTYPE_AUTO, mmap);
            tfm_dtype dt = TFM_DTYPE_F32;
            assert_int_equal(tfm_module_parameter_dtype(
                                 b, "layers.1.self_attn.out_proj.weight",
                                 &dt), TFM_OK);
            assert_int_equal(dt, TYPES[k]);
            assert_int_equal(tfm_module_parameter_bytes(b),
                             tfm_module_parameter_bytes(m));
            tfm_tensor *got = logits_of(b);
            expect_bit_identical(got, want, "stored model file");
            tfm_tensor_free(got);
            tfm_module_free(b);
        }
        /* tfm_model_load: float32, holding the widened values. */
        tfm_module *f = NULL;
        assert_int_equal(tfm_model_load(path, &f), TFM_OK);
        assert_int_equal(tfm_module_parameter_bytes(f),
                         4 * tfm_module_num_parameters(f));
        tfm_tensor *got = logits_of(f);
        assert_true(rel_err(tfm_tensor_data(got), tfm_tensor_data(want),
                            tfm_tensor_numel(got)) <= 1e-6);
        assert_int_equal(tfm_module_train(f, 1), TFM_OK);
        FREE_TENSORS(got, want);
        tfm_module_free(f);
        tfm_module_free(m);
        unlink(path);
    }
}

/* A float32 model file loaded with mmap: weights used where they lie,
 * the same logits; it does not train until copied (quantize to F32);
 * a load converting to Q8_0 equals quantising after loading. */
static void test_mapped_float32(void **state)
{
    (void)state;
    tfm_module *m = make_model(0, 64, 19);
    tfm_tensor *want = logits_of(m);
    char path[64];
    saved(m, path);
    tfm_module *b = loaded(path, TFM_DTYPE_F32, 1);
    tfm_tensor *got = logits_of(b);
    expect_bit_identical(got, want, "mapped float32");
    assert_int_equal(tfm_module_train(b, 1), TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "file mapping"));
    assert_int_equal(tfm_module_quantize(b, TFM_DTYPE_F32), TFM_OK);
    assert_int_equal(tfm_module_train(b, 1), TFM_OK);
    tfm_tensor_free(got);
    tfm_module_free(b);

    tfm_module *q = loaded(path, TFM_DTYPE_Q8_0, 1);
    assert_int_equal(tfm_module_quantize(m, TFM_DTYPE_Q8_0), TFM_OK);
    tfm_tensor *a = logits_of(q), *c = logits_of(m);
    expect_bit_identical(a, c, "loaded as Q8_0");
    FREE_TENSORS(a, c, want);
    tfm_module_free(q);
    tfm_module_free(m);

    tfm_load_options o;
    tfm_load_options_init(&o);
    o.dtype = TFM_DTYPE_I8;
    tfm_module *none = SENTINEL_MODULE;
    assert_int_equal(tfm_model_load_v2(path, &o, &none),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(none, SENTINEL_MODULE);
    o.dtype = TFM_DTYPE_F32;
    o.struct_size = 3;
    assert_int_equal(tfm_model_load_v2(path, &o, &none),
                     TFM_ERR_INVALID_ARGUMENT);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_every_dtype),
        cmocka_unit_test(test_gpt2_every_dtype),
        cmocka_unit_test(test_parameter_bytes),
        cmocka_unit_test(test_back_to_float),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_all_or_nothing),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_model_file_round_trip),
        cmocka_unit_test(test_mapped_float32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
