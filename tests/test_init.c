/*
 * Default initialisation (module.h: tfm_module_reset_parameters).
 *
 * Expected distributions: PyTorch 1.13's reset_parameters, worked out from
 * torch.nn.init's definitions (fan_in = size(1), fan_out = size(0) for a
 * matrix):
 *   nn.Linear weight [out, in], kaiming_uniform_(a = sqrt(5)):
 *     gain = sqrt(2 / (1 + 5)), bound = gain * sqrt(3 / in) = 1 / sqrt(in);
 *     bias U(-1/sqrt(in), 1/sqrt(in));
 *   xavier_uniform_ [o, i]: bound sqrt(6 / (i + o));
 *   nn.MultiheadAttention: in_proj (xavier) and out_proj (nn.Linear)
 *     weights, in_proj_bias and out_proj.bias zeros;
 *   LayerNorm ones and zeros; nn.Embedding N(0, 1);
 *   nn.Transformer: xavier_uniform_ on every parameter with dim > 1.
 * bindings/python/tests/test_init.py compares the same bounds with what
 * torch's own modules draw.
 *
 * Statistics of n draws (each check fails with probability < 1e-8 for the
 * right distribution, and the fixed seeds make the runs deterministic):
 *   U(-a, a): every |x| <= a (exact, in float); the largest and smallest
 *     beyond a (1 - 25/n) in magnitude (P(miss) = (1 - 25/n)^n < e^-25);
 *     mean within 6 a / sqrt(3n); mean of x^2 within
 *     6 a^2 sqrt(4/45 / n) of a^2/3 (Var x^2 = a^4/5 - a^4/9);
 *   N(0, s^2): mean within 6 s / sqrt(n); mean of x^2 within
 *     6 s^2 sqrt(2/n) of s^2; the fraction with |x| < s within
 *     6 sqrt(p (1 - p) / n) of p = erf(1/sqrt(2)) = 0.682689 (which a
 *     uniform of the same variance, p = 0.577, fails).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

#include "test_util.h"
#include "tiny_model.h"

enum { D = 64, H = 4, DFF = 256 };

typedef struct expect {
    const char *name;
    char kind;        /* 'U' U(-a, a), 'N' N(0, a^2), 'C' constant a */
    double a;
} expect;

/* The named parameter's values (caller frees). */
static float *values(const tfm_module *m, const char *name, int64_t *n)
{
    int rank;
    int64_t shape[TFM_MAX_RANK];
    assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape),
                     TFM_OK);
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_create(rank, shape, &t), TFM_OK);
    assert_int_equal(tfm_module_get_parameter(m, name, t), TFM_OK);
    *n = tfm_tensor_numel(t);
    float *v = malloc((size_t)*n * sizeof *v);
    assert_non_null(v);
    memcpy(v, tfm_tensor_data_const(t), (size_t)*n * sizeof *v);
    tfm_tensor_free(t);
    return v;
}

static void check_uniform(const char *name, const float *x, int64_t n,
                          double a)
{
    double sum = 0, sum2 = 0, lo = 0, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!(fabsf(x[i]) <= (float)a))
            fail_msg("%s[%lld] = %.9g is outside U(-%.9g, %.9g)", name,
                     (long long)i, (double)x[i], a, a);
        sum += x[i];
        sum2 += (double)x[i] * x[i];
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    const double dn = (double)n, edge = a * (1.0 - 25.0 / dn);
    if (!(hi > edge && -lo > edge))
        fail_msg("%s: range [%g, %g] does not reach +-%g", name, lo, hi, a);
    if (!(fabs(sum / dn) <= 6.0 * a / sqrt(3.0 * dn)))
        fail_msg("%s: mean %g, expected 0 (U(+-%g), n = %lld)", name,
                 sum / dn, a, (long long)n);
    if (!(fabs(sum2 / dn - a * a / 3.0) <=
          6.0 * a * a * sqrt(4.0 / 45.0 / dn)))
        fail_msg("%s: mean square %g, expected %g", name, sum2 / dn,
                 a * a / 3.0);
}

static void check_normal(const char *name, const float *x, int64_t n,
                         double s)
{
    double sum = 0, sum2 = 0, inside = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            fail_msg("%s[%lld] is not finite", name, (long long)i);
        sum += x[i];
        sum2 += (double)x[i] * x[i];
        inside += fabs(x[i]) < s;
    }
    const double dn = (double)n, p = 0.682689492137086;
    if (!(fabs(sum / dn) <= 6.0 * s / sqrt(dn)))
        fail_msg("%s: mean %g, expected 0 (N(0, %g^2), n = %lld)", name,
                 sum / dn, s, (long long)n);
    if (!(fabs(sum2 / dn - s * s) <= 6.0 * s * s * sqrt(2.0 / dn)))
        fail_msg("%s: mean square %g, expected %g", name, sum2 / dn, s * s);
    if (!(fabs(inside / dn - p) <= 6.0 * sqrt(p * (1 - p) / dn)))
        fail_msg("%s: %g of the values within one std, expected %g", name,
                 inside / dn, p);
}

/* Resets m with seed and checks every expectation; with `all`, the
 * expectations must name every parameter of the module. */
static void check_module(tfm_module *m, uint64_t seed, const expect *e,
                         int n, int all)
{
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    assert_int_equal(tfm_module_reset_parameters(m, &rng), TFM_OK);
    if (all)
        assert_int_equal(tfm_module_parameter_count(m), n);
    for (int i = 0; i < n; i++) {
        int64_t count;
        float *x = values(m, e[i].name, &count);
        if (e[i].kind == 'U') {
            check_uniform(e[i].name, x, count, e[i].a);
        } else if (e[i].kind == 'N') {
            check_normal(e[i].name, x, count, e[i].a);
        } else {
            for (int64_t j = 0; j < count; j++)
                if (x[j] != (float)e[i].a)
                    fail_msg("%s[%lld] = %g, expected %g", e[i].name,
                             (long long)j, (double)x[j], e[i].a);
        }
        free(x);
    }
}

#define CHECK(m, seed, all, ...)                                          \
    do {                                                                  \
        const expect e_[] = { __VA_ARGS__ };                              \
        check_module(m, seed, e_, (int)(sizeof e_ / sizeof e_[0]), all);  \
    } while (0)

/* sqrt(6 / (fan_in + fan_out)) */
static double xavier(double fan_in, double fan_out)
{
    return sqrt(6.0 / (fan_in + fan_out));
}

/* ---- per module kind ---------------------------------------------------- */

static void test_mha_packed(void **state)
{
    (void)state;
    tfm_module *m = NULL;
    assert_int_equal(tfm_mha_create(D, H, 0, 0, 1, &m), TFM_OK);
    CHECK(m, 1, 1,
          { "in_proj_weight", 'U', xavier(D, 3 * D) },   /* sqrt(3/(2d)) */
          { "in_proj_bias", 'C', 0 },
          { "out_proj.weight", 'U', 1.0 / 8 },          /* 1/sqrt(64) */
          { "out_proj.bias", 'C', 0 });
    tfm_module_free(m);
    /* without bias: only the two weights */
    assert_int_equal(tfm_mha_create(D, H, 0, 0, 0, &m), TFM_OK);
    CHECK(m, 2, 1, { "in_proj_weight", 'U', xavier(D, 3 * D) },
          { "out_proj.weight", 'U', 1.0 / 8 });
    tfm_module_free(m);
}

static void test_mha_separate_projections(void **state)
{
    (void)state;
    tfm_module *m = NULL;
    assert_int_equal(tfm_mha_create(D, H, 32, 48, 1, &m), TFM_OK);
    CHECK(m, 3, 1,
          { "q_proj_weight", 'U', xavier(D, D) },
          { "k_proj_weight", 'U', xavier(32, D) },
          { "v_proj_weight", 'U', xavier(48, D) },
          { "in_proj_bias", 'C', 0 },
          { "out_proj.weight", 'U', 1.0 / 8 },
          { "out_proj.bias", 'C', 0 });
    tfm_module_free(m);
}

static void test_layer_norm_feed_forward_embedding(void **state)
{
    (void)state;
    tfm_module *m = NULL;
    assert_int_equal(tfm_layer_norm_create(D, 1e-5f, &m), TFM_OK);
    tfm_tensor *w = NULL;
    const int64_t shape[1] = { D };
    assert_int_equal(tfm_tensor_create(1, shape, &w), TFM_OK);
    fill(w, 3.0f);
    assert_int_equal(tfm_module_set_parameter(m, "weight", w), TFM_OK);
    assert_int_equal(tfm_module_set_parameter(m, "bias", w), TFM_OK);
    CHECK(m, 4, 1, { "weight", 'C', 1 }, { "bias", 'C', 0 });
    tfm_tensor_free(w);
    tfm_module_free(m);

    assert_int_equal(tfm_feed_forward_create(D, DFF, TFM_ACTIVATION_RELU, &m),
                     TFM_OK);
    CHECK(m, 5, 1,
          { "linear1.weight", 'U', 1.0 / 8 },    /* in = 64 */
          { "linear1.bias", 'U', 1.0 / 8 },
          { "linear2.weight", 'U', 1.0 / 16 },   /* in = 256 */
          { "linear2.bias", 'U', 1.0 / 16 });
    tfm_module_free(m);

    assert_int_equal(tfm_embedding_create(500, D, 0, &m), TFM_OK);
    CHECK(m, 6, 1, { "weight", 'N', 1 });
    tfm_module_free(m);
}

static void test_layers(void **state)
{
    (void)state;
    tfm_layer_config c = tfm_layer_config_default(D, H);
    c.d_ff = DFF;
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_layer_create(&c, &m), TFM_OK);
    CHECK(m, 7, 1,
          { "self_attn.in_proj_weight", 'U', xavier(D, 3 * D) },
          { "self_attn.in_proj_bias", 'C', 0 },
          { "self_attn.out_proj.weight", 'U', 1.0 / 8 },
          { "self_attn.out_proj.bias", 'C', 0 },
          { "linear1.weight", 'U', 1.0 / 8 },
          { "linear1.bias", 'U', 1.0 / 8 },
          { "linear2.weight", 'U', 1.0 / 16 },
          { "linear2.bias", 'U', 1.0 / 16 },
          { "norm1.weight", 'C', 1 }, { "norm1.bias", 'C', 0 },
          { "norm2.weight", 'C', 1 }, { "norm2.bias", 'C', 0 });
    tfm_module_free(m);

    assert_int_equal(tfm_decoder_layer_create(&c, &m), TFM_OK);
    CHECK(m, 8, 1,
          { "self_attn.in_proj_weight", 'U', xavier(D, 3 * D) },
          { "self_attn.in_proj_bias", 'C', 0 },
          { "self_attn.out_proj.weight", 'U', 1.0 / 8 },
          { "self_attn.out_proj.bias", 'C', 0 },
          { "multihead_attn.in_proj_weight", 'U', xavier(D, 3 * D) },
          { "multihead_attn.in_proj_bias", 'C', 0 },
          { "multihead_attn.out_proj.weight", 'U', 1.0 / 8 },
          { "multihead_attn.out_proj.bias", 'C', 0 },
          { "linear1.weight", 'U', 1.0 / 8 },
          { "linear1.bias", 'U', 1.0 / 8 },
          { "linear2.weight", 'U', 1.0 / 16 },
          { "linear2.bias", 'U', 1.0 / 16 },
          { "norm1.weight", 'C', 1 }, { "norm1.bias", 'C', 0 },
          { "norm2.weight", 'C', 1 }, { "norm2.bias", 'C', 0 },
          { "norm3.weight", 'C', 1 }, { "norm3.bias", 'C', 0 });
    tfm_module_free(m);

    assert_int_equal(tfm_cross_attention_create(&c, &m), TFM_OK);
    CHECK(m, 9, 1,
          { "multihead_attn.in_proj_weight", 'U', xavier(D, 3 * D) },
          { "multihead_attn.in_proj_bias", 'C', 0 },
          { "multihead_attn.out_proj.weight", 'U', 1.0 / 8 },
          { "multihead_attn.out_proj.bias", 'C', 0 },
          { "norm.weight", 'C', 1 }, { "norm.bias", 'C', 0 });
    tfm_module_free(m);
}

/* Linear, and a sub-module reset as its own kind in the parent's memory. */
static void test_linear_and_children(void **state)
{
    (void)state;
    tfm_module *m = NULL;
    assert_int_equal(tfm_linear_create(100, 30, 1, &m), TFM_OK);
    CHECK(m, 20, 1, { "weight", 'U', 0.1 }, { "bias", 'U', 0.1 });
    tfm_module_free(m);

    assert_int_equal(tfm_mha_create(D, H, 0, 0, 1, &m), TFM_OK);
    tfm_module *out_proj = NULL;
    assert_int_equal(tfm_module_child(m, "out_proj", &out_proj), TFM_OK);
    /* as torch's mha.out_proj.reset_parameters(): nn.Linear's bias */
    CHECK(out_proj, 21, 1, { "weight", 'U', 1.0 / 8 },
          { "bias", 'U', 1.0 / 8 });
    int64_t n;
    float *b = values(m, "out_proj.bias", &n);
    float *in = values(m, "in_proj_weight", &n);
    assert_true(b[0] != 0.0f);          /* the parent's memory */
    assert_true(in[0] == 0.0f);         /* the rest untouched */
    free(b);
    free(in);
    tfm_module_free(m);

    tfm_layer_config c = tfm_layer_config_default(D, H);
    c.d_ff = DFF;
    assert_int_equal(tfm_transformer_create(&c, 1, 1, &m), TFM_OK);
    /* the encoder alone is an encoder: nn.Linear bounds, no xavier */
    tfm_module *encoder = NULL;
    assert_int_equal(tfm_module_child(m, "encoder", &encoder), TFM_OK);
    CHECK(encoder, 22, 0,
          { "layers.0.self_attn.out_proj.weight", 'U', 1.0 / 8 },
          { "layers.0.linear2.weight", 'U', 1.0 / 16 });
    tfm_module_free(m);
}

/* Stacks: every layer drawn from the same distributions, independently. */
static void test_stack_layers_independent(void **state)
{
    (void)state;
    tfm_layer_config c = tfm_layer_config_default(D, H);
    c.d_ff = DFF;
    tfm_module *m = NULL;
    assert_int_equal(tfm_encoder_create(&c, 2, 1, &m), TFM_OK);
    CHECK(m, 10, 0,
          { "layers.0.self_attn.in_proj_weight", 'U', xavier(D, 3 * D) },
          { "layers.1.self_attn.in_proj_weight", 'U', xavier(D, 3 * D) },
          { "layers.1.self_attn.out_proj.weight", 'U', 1.0 / 8 },
          { "layers.1.linear2.bias", 'U', 1.0 / 16 },
          { "layers.1.norm2.weight", 'C', 1 },
          { "norm.weight", 'C', 1 }, { "norm.bias", 'C', 0 });
    int64_t n0, n1;
    float *a = values(m, "layers.0.linear1.weight", &n0);
    float *b = values(m, "layers.1.linear1.weight", &n1);
    assert_int_equal(n0, n1);
    int64_t same = 0;
    for (int64_t i = 0; i < n0; i++)
        same += a[i] == b[i];
    assert_true(same < n0 / 100);
    free(a);
    free(b);
    tfm_module_free(m);
}

static void test_transformer_xavier_on_matrices(void **state)
{
    (void)state;
    tfm_layer_config c = tfm_layer_config_default(D, H);
    c.d_ff = DFF;
    tfm_module *m = NULL;
    assert_int_equal(tfm_transformer_create(&c, 1, 1, &m), TFM_OK);
    /* nn.Transformer._reset_parameters: xavier_uniform_ on p.dim() > 1 */
    CHECK(m, 11, 0,
          { "encoder.layers.0.self_attn.in_proj_weight", 'U',
            xavier(D, 3 * D) },
          { "encoder.layers.0.self_attn.in_proj_bias", 'C', 0 },
          { "encoder.layers.0.self_attn.out_proj.weight", 'U', xavier(D, D) },
          { "encoder.layers.0.self_attn.out_proj.bias", 'C', 0 },
          { "encoder.layers.0.linear1.weight", 'U', xavier(D, DFF) },
          { "encoder.layers.0.linear1.bias", 'U', 1.0 / 8 },
          { "encoder.layers.0.linear2.weight", 'U', xavier(DFF, D) },
          { "encoder.layers.0.linear2.bias", 'U', 1.0 / 16 },
          { "encoder.norm.weight", 'C', 1 },
          { "decoder.layers.0.multihead_attn.out_proj.weight", 'U',
            xavier(D, D) },
          { "decoder.layers.0.multihead_attn.in_proj_bias", 'C', 0 },
          { "decoder.layers.0.norm3.bias", 'C', 0 },
          { "decoder.norm.weight", 'C', 1 });
    tfm_module_free(m);
}

static void test_attention_variants(void **state)
{
    (void)state;
    tfm_attention_config cfg;
    tfm_module *m = NULL;

    tfm_attention_config_init(&cfg);
    cfg.score = TFM_SCORE_GENERAL;
    assert_int_equal(tfm_attention_create(16, 16, H, &cfg, &m), TFM_OK);
    CHECK(m, 12, 1, { "score_weight", 'U', 1.0 / 4 });   /* per head, in 16 */
    tfm_module_free(m);

    tfm_attention_config_init(&cfg);
    cfg.score = TFM_SCORE_ADDITIVE;
    cfg.additive_dim = 25;
    assert_int_equal(tfm_attention_create(16, 16, H, &cfg, &m), TFM_OK);
    CHECK(m, 13, 1,
          { "additive_query", 'U', 1.0 / 4 },   /* [H, 25, 16]: in 16 */
          { "additive_key", 'U', 1.0 / 4 },
          { "additive_v", 'U', 1.0 / 5 });      /* [H, 25]: in 25 */
    tfm_module_free(m);

    tfm_attention_config_init(&cfg);
    cfg.score = TFM_SCORE_LEARNED_TEMPERATURE;
    assert_int_equal(tfm_attention_create(16, 16, H, &cfg, &m), TFM_OK);
    CHECK(m, 14, 1, { "temperature", 'C', 4 });          /* sqrt(16) */
    tfm_module_free(m);

    tfm_attention_config_init(&cfg);
    cfg.relative = TFM_RELATIVE_SHAW;
    cfg.max_distance = 50;
    cfg.relative_values = 1;
    assert_int_equal(tfm_attention_create(16, 16, H, &cfg, &m), TFM_OK);
    CHECK(m, 15, 1, { "relative_key.weight", 'N', 1 },
          { "relative_value.weight", 'N', 1 });
    tfm_module_free(m);

    tfm_attention_config_init(&cfg);
    cfg.relative = TFM_RELATIVE_T5;
    cfg.num_buckets = 64;
    assert_int_equal(tfm_attention_create(16, 16, H, &cfg, &m), TFM_OK);
    CHECK(m, 16, 1, { "relative_attention_bias.weight", 'N', 1 });
    tfm_module_free(m);

    /* a variant inside multi-head attention: projections as plain MHA */
    tfm_attention_config_init(&cfg);
    cfg.score = TFM_SCORE_GENERAL;
    cfg.n_kv_heads = 2;
    assert_int_equal(tfm_mha_create_ex(D, H, 0, 0, 1, &cfg, &m), TFM_OK);
    CHECK(m, 17, 1,
          { "in_proj_weight", 'U', xavier(D, 2 * D) },   /* [d + 2*32, d] */
          { "in_proj_bias", 'C', 0 },
          { "out_proj.weight", 'U', 1.0 / 8 },
          { "out_proj.bias", 'C', 0 },
          { "score_weight", 'U', 1.0 / 4 });
    tfm_module_free(m);
}

static void test_models(void **state)
{
    (void)state;
    tfm_layer_config layer = tfm_layer_config_default(D, H);
    layer.d_ff = DFF;
    tfm_model_config c = tiny_model_config(TFM_ARCH_DECODER_ONLY, layer, 300,
                                           2, 40);
    c.tied_embeddings = 0;
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create(&c, &m), TFM_OK);
    CHECK(m, 18, 0,
          { "token_embedding.weight", 'N', 1 },
          { "position_embedding.weight", 'N', 1 },
          { "layers.1.self_attn.in_proj_weight", 'U', xavier(D, 3 * D) },
          { "layers.1.self_attn.out_proj.bias", 'C', 0 },
          { "layers.0.linear2.weight", 'U', 1.0 / 16 },
          { "lm_head.weight", 'U', 1.0 / 8 });
    tfm_module_free(m);

    /* encoder-decoder: its transformer.* part as nn.Transformer */
    c = tiny_model_config(TFM_ARCH_ENCODER_DECODER, layer, 300, 0, 40);
    c.n_encoder_layers = 1;
    c.n_decoder_layers = 1;
    assert_int_equal(tfm_model_create(&c, &m), TFM_OK);
    CHECK(m, 19, 0,
          { "token_embedding.weight", 'N', 1 },
          { "transformer.encoder.layers.0.self_attn.out_proj.weight", 'U',
            xavier(D, D) },
          { "transformer.decoder.layers.0.linear1.weight", 'U',
            xavier(D, DFF) },
          { "transformer.decoder.layers.0.linear1.bias", 'U', 1.0 / 8 },
          { "transformer.decoder.norm.weight", 'C', 1 });
    tfm_module_free(m);
}

/* ---- determinism and errors --------------------------------------------- */

static void test_reproducible_by_seed(void **state)
{
    (void)state;
    tfm_layer_config c = tfm_layer_config_default(16, 2);
    c.d_ff = 32;
    tfm_module *a = NULL, *b = NULL;
    assert_int_equal(tfm_encoder_create(&c, 2, 1, &a), TFM_OK);
    assert_int_equal(tfm_encoder_create(&c, 2, 1, &b), TFM_OK);
    tfm_rng r1, r2;
    tfm_rng_seed(&r1, 99);
    tfm_rng_seed(&r2, 99);
    assert_int_equal(tfm_module_reset_parameters(a, &r1), TFM_OK);
    assert_int_equal(tfm_module_reset_parameters(b, &r2), TFM_OK);
    assert_int_equal(r1.state, r2.state);
    for (int i = 0; i < tfm_module_parameter_count(a); i++) {
        const char *name = tfm_module_parameter_name(a, i);
        int64_t n, nb;
        float *x = values(a, name, &n), *y = values(b, name, &nb);
        assert_memory_equal(x, y, (size_t)n * sizeof *x);
        free(x);
        free(y);
    }
    /* the generator advanced: the next reset of b differs; seed 99 again
     * gives a's values back; seed 100 others */
    assert_int_equal(tfm_module_reset_parameters(b, &r2), TFM_OK);
    int64_t n;
    float *x0 = values(a, "layers.0.self_attn.in_proj_weight", &n);
    float *y0 = values(b, "layers.0.self_attn.in_proj_weight", &n);
    assert_memory_not_equal(x0, y0, (size_t)n * sizeof *x0);
    free(y0);
    tfm_rng_seed(&r2, 99);
    assert_int_equal(tfm_module_reset_parameters(b, &r2), TFM_OK);
    y0 = values(b, "layers.0.self_attn.in_proj_weight", &n);
    assert_memory_equal(x0, y0, (size_t)n * sizeof *x0);
    free(y0);
    tfm_rng_seed(&r2, 100);
    assert_int_equal(tfm_module_reset_parameters(b, &r2), TFM_OK);
    y0 = values(b, "layers.0.self_attn.in_proj_weight", &n);
    assert_memory_not_equal(x0, y0, (size_t)n * sizeof *x0);
    free(y0);
    free(x0);
    tfm_module_free(a);
    tfm_module_free(b);
}

static void test_null_arguments_change_nothing(void **state)
{
    (void)state;
    tfm_module *m = NULL;
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &m), TFM_OK);
    tfm_rng rng;
    tfm_rng_seed(&rng, 5);
    assert_int_equal(tfm_module_reset_parameters(NULL, &rng),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(rng.state, 5);
    assert_int_equal(tfm_module_reset_parameters(m, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "rng"));
    int64_t n;
    float *x = values(m, "in_proj_weight", &n);
    for (int64_t i = 0; i < n; i++)
        assert_true(x[i] == 0.0f);   /* constructors keep zero weights */
    free(x);
    tfm_module_free(m);
}

/* After a reset, a forward pass no longer gives zeros (the README tour). */
static void test_forward_after_reset_is_not_zero(void **state)
{
    (void)state;
    tfm_module *m = NULL;
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, &m), TFM_OK);
    tfm_rng rng;
    tfm_rng_seed(&rng, 0);
    assert_int_equal(tfm_module_reset_parameters(m, &rng), TFM_OK);
    tfm_tensor *x = make3(2, 5, 8, NULL), *out = make3(2, 5, 8, NULL);
    fill_random(x, 3);
    assert_int_equal(tfm_mha_forward(m, x, x, x, NULL, out, NULL), TFM_OK);
    double sum = 0;
    for (int64_t i = 0; i < tfm_tensor_numel(out); i++)
        sum += fabs(tfm_tensor_data_const(out)[i]);
    assert_true(sum > 1e-3);
    FREE_TENSORS(x, out);
    tfm_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mha_packed),
        cmocka_unit_test(test_mha_separate_projections),
        cmocka_unit_test(test_layer_norm_feed_forward_embedding),
        cmocka_unit_test(test_layers),
        cmocka_unit_test(test_linear_and_children),
        cmocka_unit_test(test_stack_layers_independent),
        cmocka_unit_test(test_transformer_xavier_on_matrices),
        cmocka_unit_test(test_attention_variants),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_reproducible_by_seed),
        cmocka_unit_test(test_null_arguments_change_nothing),
        cmocka_unit_test(test_forward_after_reset_is_not_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
