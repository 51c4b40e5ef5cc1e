/* Enum names (names.h): the expected names are the strings model.h
 * documents for model files ("tfm.activation", "tfm.attention.*", ...),
 * those the Python and Lua bindings documented in 1.1.0, and the
 * safetensors format's dtype spellings; every one must map to its value and
 * back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "transformer/transformer.h"

/* Fails unless the last error message contains `needle`. */
static void assert_error_mentions(const char *needle)
{
    if (!strstr(tfm_last_error(), needle))
        fail_msg("message \"%s\" lacks \"%s\"", tfm_last_error(), needle);
}

typedef struct expected_name {
    tfm_enum e;
    int value;
    const char *name;
} expected_name;

static const expected_name EXPECTED[] = {
    { TFM_ENUM_ACTIVATION, TFM_ACTIVATION_RELU, "relu" },
    { TFM_ENUM_ACTIVATION, TFM_ACTIVATION_GELU, "gelu" },
    { TFM_ENUM_ACTIVATION, TFM_ACTIVATION_GELU_TANH, "gelu_tanh" },
    { TFM_ENUM_ACTIVATION, TFM_ACTIVATION_SILU, "silu" },
    { TFM_ENUM_CAUSAL, TFM_CAUSAL_NONE, "none" },
    { TFM_ENUM_CAUSAL, TFM_CAUSAL_TOP_LEFT, "top_left" },
    { TFM_ENUM_CAUSAL, TFM_CAUSAL_BOTTOM_RIGHT, "bottom_right" },
    { TFM_ENUM_MASK_KIND, TFM_MASK_BLOCK, "block" },
    { TFM_ENUM_MASK_KIND, TFM_MASK_ALLOW, "allow" },
    { TFM_ENUM_MASK_KIND, TFM_MASK_ADDITIVE, "additive" },
    { TFM_ENUM_SCORE, TFM_SCORE_SCALED_DOT, "scaled_dot" },
    { TFM_ENUM_SCORE, TFM_SCORE_DOT, "dot" },
    { TFM_ENUM_SCORE, TFM_SCORE_GENERAL, "general" },
    { TFM_ENUM_SCORE, TFM_SCORE_ADDITIVE, "additive" },
    { TFM_ENUM_SCORE, TFM_SCORE_LEARNED_TEMPERATURE, "learned_temperature" },
    { TFM_ENUM_ROPE, TFM_ROPE_NONE, "none" },
    { TFM_ENUM_ROPE, TFM_ROPE_ADJACENT, "adjacent" },
    { TFM_ENUM_ROPE, TFM_ROPE_HALF, "half" },
    { TFM_ENUM_RELATIVE, TFM_RELATIVE_NONE, "none" },
    { TFM_ENUM_RELATIVE, TFM_RELATIVE_SHAW, "shaw" },
    { TFM_ENUM_RELATIVE, TFM_RELATIVE_T5, "t5" },
    { TFM_ENUM_RELATIVE, TFM_RELATIVE_ALIBI, "alibi" },
    { TFM_ENUM_SPARSITY, TFM_SPARSE_NONE, "none" },
    { TFM_ENUM_SPARSITY, TFM_SPARSE_SLIDING_WINDOW, "sliding_window" },
    { TFM_ENUM_SPARSITY, TFM_SPARSE_DILATED, "dilated" },
    { TFM_ENUM_SPARSITY, TFM_SPARSE_BIGBIRD, "bigbird" },
    { TFM_ENUM_SINUSOIDAL_LAYOUT, TFM_SINUSOIDAL_INTERLEAVED, "interleaved" },
    { TFM_ENUM_SINUSOIDAL_LAYOUT, TFM_SINUSOIDAL_CONCAT, "concat" },
    { TFM_ENUM_ARCHITECTURE, TFM_ARCH_DECODER_ONLY, "decoder_only" },
    { TFM_ENUM_ARCHITECTURE, TFM_ARCH_ENCODER_ONLY, "encoder_only" },
    { TFM_ENUM_ARCHITECTURE, TFM_ARCH_ENCODER_DECODER, "encoder_decoder" },
    { TFM_ENUM_POSITIONAL, TFM_POSITIONAL_NONE, "none" },
    { TFM_ENUM_POSITIONAL, TFM_POSITIONAL_LEARNED, "learned" },
    { TFM_ENUM_POSITIONAL, TFM_POSITIONAL_SINUSOIDAL, "sinusoidal" },
    { TFM_ENUM_POSITIONAL, TFM_POSITIONAL_SINUSOIDAL_CONCAT,
      "sinusoidal_concat" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_F32, "F32" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_F16, "F16" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_BF16, "BF16" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_F64, "F64" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_I64, "I64" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_I32, "I32" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_I16, "I16" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_I8, "I8" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_U8, "U8" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_BOOL, "BOOL" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_Q8_0, "Q8_0" },
    { TFM_ENUM_DTYPE, TFM_DTYPE_Q4_0, "Q4_0" },
    { TFM_ENUM_REDUCTION, TFM_REDUCTION_MEAN, "mean" },
    { TFM_ENUM_REDUCTION, TFM_REDUCTION_SUM, "sum" },
    { TFM_ENUM_OPTIMIZER, TFM_OPTIMIZER_SGD, "sgd" },
    { TFM_ENUM_OPTIMIZER, TFM_OPTIMIZER_ADAM, "adam" },
    { TFM_ENUM_OPTIMIZER, TFM_OPTIMIZER_ADAMW, "adamw" },
};
#define N_EXPECTED (sizeof EXPECTED / sizeof EXPECTED[0])

/* Each enum's _COUNT sentinel, by tfm_enum. */
static const int COUNTS[TFM_ENUM_COUNT] = {
    [TFM_ENUM_ACTIVATION] = TFM_ACTIVATION_COUNT,
    [TFM_ENUM_CAUSAL] = TFM_CAUSAL_COUNT,
    [TFM_ENUM_MASK_KIND] = TFM_MASK_KIND_COUNT,
    [TFM_ENUM_SCORE] = TFM_SCORE_COUNT,
    [TFM_ENUM_ROPE] = TFM_ROPE_COUNT,
    [TFM_ENUM_RELATIVE] = TFM_RELATIVE_COUNT,
    [TFM_ENUM_SPARSITY] = TFM_SPARSE_COUNT,
    [TFM_ENUM_SINUSOIDAL_LAYOUT] = TFM_SINUSOIDAL_COUNT,
    [TFM_ENUM_ARCHITECTURE] = TFM_ARCH_COUNT,
    [TFM_ENUM_POSITIONAL] = TFM_POSITIONAL_COUNT,
    [TFM_ENUM_DTYPE] = TFM_DTYPE_COUNT,
    [TFM_ENUM_REDUCTION] = TFM_REDUCTION_COUNT,
    [TFM_ENUM_OPTIMIZER] = TFM_OPTIMIZER_KIND_COUNT,
};

static void test_documented_names(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_EXPECTED; i++) {
        const expected_name *x = &EXPECTED[i];
        const char *name = tfm_enum_name(x->e, x->value);
        assert_non_null(name);
        assert_string_equal(name, x->name);
        int v = -1;
        assert_int_equal(tfm_enum_from_name(x->e, x->name, &v), TFM_OK);
        assert_int_equal(v, x->value);
    }
}

/* Every value below the sentinel has a name that maps back to it (the
 * architecture's 0 excepted), and the table covers exactly the documented
 * names. */
static void test_every_value_round_trips(void **state)
{
    (void)state;
    size_t named = 0;
    for (int e = 0; e < TFM_ENUM_COUNT; e++) {
        assert_int_equal(tfm_enum_count((tfm_enum)e), COUNTS[e]);
        for (int v = 0; v < COUNTS[e]; v++) {
            const char *name = tfm_enum_name((tfm_enum)e, v);
            if (e == TFM_ENUM_ARCHITECTURE && v == 0) {
                assert_null(name);
                continue;
            }
            assert_non_null(name);
            int back = -1;
            assert_int_equal(tfm_enum_from_name((tfm_enum)e, name, &back),
                             TFM_OK);
            assert_int_equal(back, v);
            named++;
        }
        assert_null(tfm_enum_name((tfm_enum)e, COUNTS[e]));
        assert_null(tfm_enum_name((tfm_enum)e, -1));
    }
    assert_int_equal(named, N_EXPECTED);
}

static void test_unknown_names(void **state)
{
    (void)state;
    int v = 42;
    assert_int_equal(tfm_enum_from_name(TFM_ENUM_ACTIVATION, "swish", &v),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("unknown activation \"swish\"");
    assert_error_mentions("\"relu\", \"gelu\", \"gelu_tanh\"");
    /* Names are case-sensitive, as model files are. */
    assert_int_equal(tfm_enum_from_name(TFM_ENUM_SCORE, "Dot", &v),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("unknown score \"Dot\"");
    assert_error_mentions("\"learned_temperature\"");
    /* A name of another enum is not one of this one's. */
    assert_int_equal(tfm_enum_from_name(TFM_ENUM_ROPE, "alibi", &v),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("RoPE layout");
    assert_int_equal(tfm_enum_from_name(TFM_ENUM_DTYPE, "f32", &v),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_enum_from_name(TFM_ENUM_ARCHITECTURE, "", &v),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("\"decoder_only\", \"encoder_only\"");
    assert_int_equal(v, 42); /* untouched on error */

    assert_int_equal(tfm_enum_from_name(TFM_ENUM_COUNT, "relu", &v),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("tfm_enum");
    assert_int_equal(tfm_enum_from_name((tfm_enum)-1, "relu", &v),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_enum_from_name(TFM_ENUM_CAUSAL, NULL, &v),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_enum_from_name(TFM_ENUM_CAUSAL, "none", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(v, 42);
    assert_null(tfm_enum_name(TFM_ENUM_COUNT, 0));
    assert_null(tfm_enum_name((tfm_enum)-1, 0));
    assert_int_equal(tfm_enum_count(TFM_ENUM_COUNT), 0);
    assert_int_equal(tfm_enum_count((tfm_enum)-1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documented_names),
        cmocka_unit_test(test_every_value_round_trips),
        cmocka_unit_test(test_unknown_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
