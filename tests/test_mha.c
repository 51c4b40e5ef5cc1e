/*
 * Multi-head attention (attention.h: tfm_mha_create / tfm_mha_forward) and
 * the module API it exercises (module.h: parameters, MAC counts, kinds).
 *
 * Expected values: closed forms worked out by hand in the comments
 * (identity projections, zero W_q), or PyTorch float64 output pasted with
 * its generating snippet.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <transformer/attention.h>
#include <transformer/layers.h>
#include <transformer/module.h>
#include <transformer/tensor.h>

#include "test_util.h"

#define E1 2.718281828459045 /* exp(1) */

/* ---- helpers -------------------------------------------------------------- */

static int bit_identical(const tfm_tensor *a, const tfm_tensor *b)
{
    return tfm_tensor_numel(a) == tfm_tensor_numel(b) &&
           memcmp(tfm_tensor_data_const(a), tfm_tensor_data_const(b),
                  (size_t)tfm_tensor_numel(a) * sizeof(float)) == 0;
}

static tfm_module *mha(int64_t d, int64_t h, int64_t kdim, int64_t vdim,
                       int bias)
{
    tfm_module *m = NULL;
    assert_int_equal(tfm_mha_create(d, h, kdim, vdim, bias, &m), TFM_OK);
    assert_non_null(m);
    assert_int_equal(tfm_module_kind_of(m), TFM_MODULE_MHA);
    return m;
}

/* Packed in_proj_weight = three stacked d x d identities (W_q, W_k, W_v) and
 * out_proj.weight = the identity, for d <= 4. */
static void set_identity_projections(tfm_module *m, int64_t d)
{
    float ip[3 * 4 * 4] = { 0 }, op[4 * 4] = { 0 };
    for (int64_t i = 0; i < d; i++) {
        for (int64_t blk = 0; blk < 3; blk++)
            ip[(blk * d + i) * d + i] = 1.0f;
        op[i * d + i] = 1.0f;
    }
    set_param(m, "in_proj_weight", 2, (const int64_t[]){ 3 * d, d }, ip);
    set_param(m, "out_proj.weight", 2, (const int64_t[]){ d, d }, op);
}

/* Sets every parameter of m to deterministic random values. */
static void randomize(tfm_module *m, uint32_t seed)
{
    randomize_params(m, seed, 97u);
}

/* ---- closed forms ----------------------------------------------------------- */

/* One head, d = 2, every projection the identity, no bias: MHA is plain
 * attention with scale 1/sqrt(2).  With a = exp(1/sqrt(2)) and
 * query = [[1,0],[0,1]], key = [[1,0],[0,1],[1,1]], value = [[1,2],[3,4],[5,6]]:
 *   logits row 0 = [1,0,1]/sqrt2 -> w0 = [a,1,a]/(2a+1)
 *   logits row 1 = [0,1,1]/sqrt2 -> w1 = [1,a,a]/(2a+1)
 *   out0 = [6a+3, 8a+4]/(2a+1) = [3, 4]
 *   out1 = [1+8a, 2+10a]/(2a+1) */
static void test_identity_one_head(void **state)
{
    (void)state;
    tfm_module *m = mha(2, 1, 0, 0, 0);
    set_identity_projections(m, 2);
    tfm_tensor *q = make3(1, 2, 2, (const float[]){ 1, 0, 0, 1 });
    tfm_tensor *k = make3(1, 3, 2, (const float[]){ 1, 0, 0, 1, 1, 1 });
    tfm_tensor *v = make3(1, 3, 2, (const float[]){ 1, 2, 3, 4, 5, 6 });
    tfm_tensor *out = make3(1, 2, 2, NULL), *w = make3(1, 2, 3, NULL);
    assert_int_equal(tfm_mha_forward(m, q, k, v, NULL, out, w), TFM_OK);
    const double a = exp(1 / sqrt(2.0)), den = 2 * a + 1;
    EXPECT_VALUES(out, 2e-6, 3.0, 4.0, (1 + 8 * a) / den, (2 + 10 * a) / den);
    EXPECT_VALUES(w, 2e-6, a / den, 1 / den, a / den, 1 / den, a / den, a / den);
    FREE_TENSORS(q, k, v, out, w);
    tfm_module_free(m);
}

/* Two heads, d = 4, d_k = 2, identity projections.  Head 0 sees dims 0-1
 * (the case above), head 1 dims 2-3 where the query is 0, so its weights
 * are uniform (1/3) and its output is the mean of value dims 2-3:
 * ([10,20] + [30,40] + [50,60]) / 3 = [30, 40].
 * Then an out_proj permutation with bias: y = x W^T + b with
 * W = [[0,0,1,0],[0,0,0,1],[1,0,0,0],[0,1,0,0]] -> y = [x2, x3, x0, x1] + b. */
static void test_identity_two_heads(void **state)
{
    (void)state;
    tfm_module *m = mha(4, 2, 0, 0, 1);
    set_identity_projections(m, 4);
    tfm_tensor *q = make3(1, 2, 4, (const float[]){ 1, 0, 0, 0, 0, 1, 0, 0 });
    tfm_tensor *k = make3(1, 3, 4, (const float[]){ 1, 0, 5, -1, 0, 1, 2, 2,
                                                    1, 1, -3, 7 });
    tfm_tensor *v = make3(1, 3, 4, (const float[]){ 1, 2, 10, 20, 3, 4, 30, 40,
                                                    5, 6, 50, 60 });
    tfm_tensor *out = make3(1, 2, 4, NULL);
    tfm_tensor *wh = make4(1, 2, 2, 3, NULL), *wa = make3(1, 2, 3, NULL);
    assert_int_equal(tfm_mha_forward(m, q, k, v, NULL, out, wh), TFM_OK);
    const double a = exp(1 / sqrt(2.0)), den = 2 * a + 1;
    EXPECT_VALUES(out, 2e-6, 3.0, 4.0, 30.0, 40.0, (1 + 8 * a) / den,
                  (2 + 10 * a) / den, 30.0, 40.0);
    const double t = 1.0 / 3;
    EXPECT_VALUES(wh, 2e-6, a / den, 1 / den, a / den, 1 / den, a / den, a / den,
                  t, t, t, t, t, t);
    /* averaged over the heads */
    assert_int_equal(tfm_mha_forward(m, q, k, v, NULL, out, wa), TFM_OK);
    EXPECT_VALUES(wa, 2e-6, (a / den + t) / 2, (1 / den + t) / 2,
                  (a / den + t) / 2, (1 / den + t) / 2, (a / den + t) / 2,
                  (a / den + t) / 2);

    /* permuting out_proj with a bias */
    set_param(m, "out_proj.weight", 2, (const int64_t[]){ 4, 4 },
              (const float[]){ 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0 });
    set_param(m, "out_proj.bias", 1, (const int64_t[]){ 4 },
              (const float[]){ 0.5f, -0.5f, 1, 2 });
    assert_int_equal(tfm_mha_forward(m, q, k, v, NULL, out, NULL), TFM_OK);
    EXPECT_VALUES(out, 2e-6, 30.5, 39.5, 4.0, 6.0, 30.5, 39.5,
                  (1 + 8 * a) / den + 1, (2 + 10 * a) / den + 2);

    /* a value bias shifts every head's output by the bias (weights sum to
     * 1): in_proj_bias rows 8..11 = b_v = [1, 1, -10, 0] -> head outputs
     * + b_v, then permuted: y = [x2 - 10, x3, x0 + 1, x1 + 1] + b */
    float ib[12] = { 0 };
    ib[8] = 1, ib[9] = 1, ib[10] = -10, ib[11] = 0;
    set_param(m, "in_proj_bias", 1, (const int64_t[]){ 12 }, ib);
    assert_int_equal(tfm_mha_forward(m, q, k, v, NULL, out, NULL), TFM_OK);
    EXPECT_VALUES(out, 2e-6, 20.5, 39.5, 5.0, 7.0, 20.5, 39.5,
                  (1 + 8 * a) / den + 2, (2 + 10 * a) / den + 3);
    FREE_TENSORS(q, k, v, out, wh, wa);
    tfm_module_free(m);
}

/* Zero W_q and b_q: every logit is 0, the weights are uniform over the
 * visible keys, so out = mean_j(value_j W_v^T + b_v) W_o^T + b_o.
 * d = 2, 2 heads (d_k = 1), W_v = [[1, 2], [0, -1]], b_v = [1, 0],
 * W_o = [[2, 0], [1, 1]], b_o = [0, 3]; W_k arbitrary (irrelevant).
 * value rows [1,0], [0,1], [2,2] -> projected (x W_v^T + b_v):
 *   [1*1+0*2+1, 1*0+0*-1+0] = [2, 0]
 *   [0+2+1, -1]             = [3, -1]
 *   [2+4+1, -2]             = [7, -2]
 * no mask: mean = [4, -1] -> out = [2*4, 4-1] + [0, 3] = [8, 6]
 * key 2 padded: mean of first two = [2.5, -0.5] -> [5, 2+3] = [5, 5]
 * causal, row 0 sees key 0 -> [2, 0] -> [4, 2+3] = [4, 5]; row 1 sees
 * keys 0, 1 -> [5, 5]; row 2 sees all -> [8, 6]. */
static void test_zero_wq_gives_mean_of_values(void **state)
{
    (void)state;
    tfm_module *m = mha(2, 2, 0, 0, 1);
    set_param(m, "in_proj_weight", 2, (const int64_t[]){ 6, 2 },
              (const float[]){ 0, 0, 0, 0, 0.3f, -2, 5, 1, 1, 2, 0, -1 });
    set_param(m, "in_proj_bias", 1, (const int64_t[]){ 6 },
              (const float[]){ 0, 0, 7, -7, 1, 0 });
    set_param(m, "out_proj.weight", 2, (const int64_t[]){ 2, 2 },
              (const float[]){ 2, 0, 1, 1 });
    set_param(m, "out_proj.bias", 1, (const int64_t[]){ 2 },
              (const float[]){ 0, 3 });
    tfm_tensor *q = make3(1, 3, 2, NULL);
    fill_random(q, 3);
    tfm_tensor *k = make3(1, 3, 2, NULL);
    fill_random(k, 4);
    tfm_tensor *v = make3(1, 3, 2, (const float[]){ 1, 0, 0, 1, 2, 2 });
    tfm_tensor *out = make3(1, 3, 2, NULL);
    assert_int_equal(tfm_mha_forward(m, q, k, v, NULL, out, NULL), TFM_OK);
    EXPECT_VALUES(out, 1e-6, 8, 6, 8, 6, 8, 6);

    tfm_tensor *pad = make(2, (const int64_t[]){ 1, 3 }, (const float[]){ 0, 0, 1 });
    tfm_attention_masks mp = { .key_padding_mask = pad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mp, out, NULL), TFM_OK);
    EXPECT_VALUES(out, 1e-6, 5, 5, 5, 5, 5, 5);

    tfm_attention_masks mc = { .causal = TFM_CAUSAL_TOP_LEFT };
    tfm_tensor *w = make3(1, 3, 3, NULL);
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mc, out, w), TFM_OK);
    EXPECT_VALUES(out, 1e-6, 4, 5, 5, 5, 8, 6);
    EXPECT_VALUES(w, 1e-6, 1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3);

    /* a masked value row holding NaN changes nothing (bit for bit) */
    tfm_tensor *clean = make3(1, 3, 2, NULL);
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mp, clean, NULL), TFM_OK);
    float *vd = tfm_tensor_data(v), *kd = tfm_tensor_data(k);
    vd[4] = NAN;
    vd[5] = INFINITY;
    kd[4] = NAN;
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mp, out, NULL), TFM_OK);
    expect_bit_identical(out, clean, "NaN in the padded key/value");
    FREE_TENSORS(q, k, v, out, pad, w, clean);
    tfm_module_free(m);
}

/* A [B, n_heads, L, S] attn mask gives each head its own keys.  Identity
 * projections, query 0 (uniform), d = 4, two heads: head 0 may see only key
 * 0, head 1 only key 1, so out[:, 0:2] = value[0][0:2] and
 * out[:, 2:4] = value[1][2:4]. */
static void test_per_head_mask(void **state)
{
    (void)state;
    tfm_module *m = mha(4, 2, 0, 0, 0);
    set_identity_projections(m, 4);
    tfm_tensor *q = make3(1, 2, 4, NULL);
    tfm_tensor *k = make3(1, 2, 4, NULL);
    fill_random(k, 8);
    tfm_tensor *v = make3(1, 2, 4, (const float[]){ 1, 2, 3, 4, 5, 6, 7, 8 });
    /* ALLOW: head 0 rows allow key 0, head 1 rows allow key 1 */
    tfm_tensor *am = make4(1, 2, 2, 2, (const float[]){ 1, 0, 1, 0, 0, 1, 0, 1 });
    tfm_attention_masks mk = { .attn_mask = am, .attn_mask_kind = TFM_MASK_ALLOW };
    tfm_tensor *out = make3(1, 2, 4, NULL);
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mk, out, NULL), TFM_OK);
    EXPECT_VALUES(out, 0.0, 1, 2, 7, 8, 1, 2, 7, 8);
    FREE_TENSORS(q, k, v, am, out);
    tfm_module_free(m);
}

/* PyTorch float64 reference: separate kdim/vdim projections, bias, batch 2
 * with key padding, averaged and per-head weights.
 *   torch.manual_seed(0); r = lambda *s: torch.randint(-10, 11, s).double()/10
 *   m = nn.MultiheadAttention(4, 2, kdim=3, vdim=5, bias=True,
 *                             batch_first=True).double()
 *   m.load_state_dict({k: r(*v.shape) for k, v in m.state_dict().items()})
 *   q, k, v = r(2, 2, 4), r(2, 3, 3), r(2, 3, 5)
 *   pad = torch.tensor([[False]*3, [False, False, True]])
 *   out, w = m(q, k, v, key_padding_mask=pad)             # averaged
 *   _, wh = m(q, k, v, key_padding_mask=pad, average_attn_weights=False)
 * (printed with "%.1ff" for inputs, "%.17g" for outputs) */
static void test_matches_pytorch_unpacked(void **state)
{
    (void)state;
    tfm_module *m = mha(4, 2, 3, 5, 1);
    set_param(m, "q_proj_weight", 2, (const int64_t[]){ 4, 4 }, (const float[]){
        -0.6f, -0.5f, 0.7f, -1.0f, 0.7f, -0.3f, -1.0f, 0.5f, 0.1f, -0.9f, 0.3f,
        -0.2f, 0.8f, -0.4f, -0.9f, 0.8f });
    set_param(m, "k_proj_weight", 2, (const int64_t[]){ 4, 3 }, (const float[]){
        -0.6f, -0.2f, -0.7f, 0.8f, 0.4f, 0.9f, -0.5f, 0.6f, 0.2f, 0.7f, 0.5f,
        0.4f });
    set_param(m, "v_proj_weight", 2, (const int64_t[]){ 4, 5 }, (const float[]){
        -0.9f, -0.9f, 0.4f, -0.6f, 0.9f, 0.6f, 0.4f, 0.4f, -0.2f, -0.9f, 0.5f,
        -0.7f, -0.7f, 0.0f, 0.5f, 0.7f, 0.7f, -0.8f, 0.5f, -0.2f });
    set_param(m, "in_proj_bias", 1, (const int64_t[]){ 12 }, (const float[]){
        0.2f, 0.0f, -0.5f, 0.7f, -0.4f, 0.3f, -0.6f, -0.6f, 0.5f, 0.8f, 0.1f,
        0.0f });
    set_param(m, "out_proj.weight", 2, (const int64_t[]){ 4, 4 }, (const float[]){
        -0.5f, 0.3f, 0.2f, 0.9f, 0.0f, -0.4f, -0.4f, -0.5f, 0.3f, -0.8f, -0.2f,
        1.0f, -0.6f, -0.2f, -0.6f, -0.3f });
    set_param(m, "out_proj.bias", 1, (const int64_t[]){ 4 }, (const float[]){
        -0.6f, 0.4f, -1.0f, 0.2f });
    tfm_tensor *q = make3(2, 2, 4, (const float[]){
        0.0f, 0.1f, -0.9f, -0.1f, -0.7f, 0.9f, -0.3f, 0.5f, 1.0f, 0.2f, 0.6f,
        -0.2f, 0.8f, 0.0f, 0.1f, -0.6f });
    tfm_tensor *k = make3(2, 3, 3, (const float[]){
        0.3f, 0.8f, 0.8f, 0.0f, -0.5f, 0.7f, -0.8f, 0.0f, 0.9f, -0.4f, 0.8f,
        -0.7f, -0.9f, 0.9f, 0.7f, -0.7f, 0.2f, -0.9f });
    tfm_tensor *v = make3(2, 3, 5, (const float[]){
        0.9f, 0.3f, 1.0f, 0.6f, -0.4f, -0.5f, 0.0f, 0.8f, 0.3f, -0.9f, 0.3f,
        0.9f, 0.0f, -0.3f, -0.5f, 0.9f, 0.7f, -0.3f, 0.2f, 0.8f, 0.8f, 0.3f,
        1.0f, 0.3f, 0.7f, 0.7f, 0.9f, -0.2f, -0.7f, -1.0f });
    tfm_tensor *pad = make(2, (const int64_t[]){ 2, 3 },
                           (const float[]){ 0, 0, 0, 0, 0, 1 });
    tfm_attention_masks mk = { .key_padding_mask = pad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    tfm_tensor *out = make3(2, 2, 4, NULL), *wa = make3(2, 2, 3, NULL),
               *wh = make4(2, 2, 2, 3, NULL);
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mk, out, wa), TFM_OK);
    const double expected_out[16] = {
        0.22712180138505211, -0.12527714747691587, -2.4010635264529068,
        0.57617540586742622, -0.0012292779428855205, 0.023817237008535941,
        -2.4834067709418037, 0.65588717870304336, 0.35273088716379408,
        -0.412633206390561, -1.1695514429644818, -0.31991845399706104,
        0.33666935974507528, -0.40174467842956407, -1.1833482045356456,
        -0.31107222955387953 };
    EXPECT_ARRAY(out, expected_out, 1e-5, "out");
    EXPECT_VALUES(wa, 1e-5,
        0.51528868108469617, 0.29394744979268062, 0.19076386912262319,
        0.33473264624465615, 0.40881152367727558, 0.25645583007806827,
        0.51441524981947284, 0.48558475018052727, 0, 0.50777936602325735,
        0.49222063397674265, 0);
    fill(out, 0.0f);
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mk, out, wh), TFM_OK);
    EXPECT_ARRAY(out, expected_out, 1e-5, "out (per-head weights)");
    EXPECT_VALUES(wh, 1e-5,
        0.50964508518158502, 0.27146245740282016, 0.21889245741559474,
        0.35469528782653625, 0.33120596401464319, 0.31409874815882061,
        0.5209322769878072, 0.31643244218254113, 0.16263528082965165,
        0.3147700046627761, 0.48641708333990796, 0.19881291199731588,
        0.52437584478701404, 0.47562415521298607, 0, 0.52278839498065277,
        0.47721160501934728, 0, 0.50445465485193164, 0.49554534514806842, 0,
        0.49277033706586199, 0.50722966293413796, 0);
    FREE_TENSORS(q, k, v, pad, out, wa, wh);
    tfm_module_free(m);
}

/* ---- parameters ------------------------------------------------------------- */

typedef struct expected_param {
    const char *name;
    int rank;
    int64_t shape[2];
} expected_param;

static void expect_params(const tfm_module *m, const expected_param *e, int n,
                          int64_t total)
{
    assert_int_equal(tfm_module_parameter_count(m), n);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) {
        const char *name = tfm_module_parameter_name(m, i);
        assert_non_null(name);
        assert_string_equal(name, e[i].name);
        int rank = -1;
        int64_t shape[TFM_MAX_RANK] = { -1, -1, -1, -1 };
        assert_int_equal(tfm_module_parameter_shape(m, e[i].name, &rank, shape),
                         TFM_OK);
        assert_int_equal(rank, e[i].rank);
        int64_t numel = 1;
        for (int r = 0; r < rank; r++) {
            assert_int_equal(shape[r], e[i].shape[r]);
            numel *= shape[r];
        }
        sum += numel;
    }
    assert_null(tfm_module_parameter_name(m, n));
    assert_null(tfm_module_parameter_name(m, -1));
    assert_null(tfm_module_parameter_name(m, 1 << 30));
    assert_int_equal(sum, total);
    assert_int_equal(tfm_module_num_parameters(m), total);
}

/* Names, shapes and counts from PyTorch (d = 8, 2 heads):
 *   for kd, vd, bias in [(8,8,True),(8,8,False),(3,5,True),(8,5,True)]:
 *     m = nn.MultiheadAttention(8, 2, kdim=kd, vdim=vd, bias=bias)
 *     [(k, tuple(v.shape)) for k, v in m.state_dict().items()],
 *     sum(p.numel() for p in m.parameters())
 * -> 288 = 4*64 + 4*8, 256 = 4*64, 224, 264 (listed below). */
static void test_parameter_names_shapes_counts(void **state)
{
    (void)state;
    tfm_module *m = mha(8, 2, 0, 0, 1);
    const expected_param packed[] = {
        { "in_proj_weight", 2, { 24, 8 } }, { "in_proj_bias", 1, { 24 } },
        { "out_proj.weight", 2, { 8, 8 } }, { "out_proj.bias", 1, { 8 } } };
    expect_params(m, packed, 4, 4 * 8 * 8 + 4 * 8);
    tfm_module_free(m);
    /* kdim = vdim = d given explicitly: still packed */
    m = mha(8, 2, 8, 8, 1);
    expect_params(m, packed, 4, 288);
    tfm_module_free(m);
    m = mha(8, 2, 8, 0, 7); /* any nonzero bias flag means bias */
    expect_params(m, packed, 4, 288);
    tfm_module_free(m);

    m = mha(8, 2, 0, 0, 0);
    const expected_param nobias[] = { { "in_proj_weight", 2, { 24, 8 } },
                                      { "out_proj.weight", 2, { 8, 8 } } };
    expect_params(m, nobias, 2, 4 * 8 * 8);
    tfm_module_free(m);

    m = mha(8, 2, 3, 5, 1);
    const expected_param unpacked[] = {
        { "q_proj_weight", 2, { 8, 8 } }, { "k_proj_weight", 2, { 8, 3 } },
        { "v_proj_weight", 2, { 8, 5 } }, { "in_proj_bias", 1, { 24 } },
        { "out_proj.weight", 2, { 8, 8 } }, { "out_proj.bias", 1, { 8 } } };
    expect_params(m, unpacked, 6, 224);
    tfm_module_free(m);

    m = mha(8, 2, 8, 5, 1); /* only vdim differs: unpacked */
    const expected_param unpacked2[] = {
        { "q_proj_weight", 2, { 8, 8 } }, { "k_proj_weight", 2, { 8, 8 } },
        { "v_proj_weight", 2, { 8, 5 } }, { "in_proj_bias", 1, { 24 } },
        { "out_proj.weight", 2, { 8, 8 } }, { "out_proj.bias", 1, { 8 } } };
    expect_params(m, unpacked2, 6, 264);
    tfm_module_free(m);

    m = mha(8, 2, 3, 5, 0); /* 64 + 24 + 40 + 64 */
    const expected_param unpacked_nobias[] = {
        { "q_proj_weight", 2, { 8, 8 } }, { "k_proj_weight", 2, { 8, 3 } },
        { "v_proj_weight", 2, { 8, 5 } }, { "out_proj.weight", 2, { 8, 8 } } };
    expect_params(m, unpacked_nobias, 4, 192);
    tfm_module_free(m);

    /* NULL module */
    assert_int_equal(tfm_module_num_parameters(NULL), 0);
    assert_int_equal(tfm_module_parameter_count(NULL), 0);
    assert_null(tfm_module_parameter_name(NULL, 0));
    assert_int_equal(tfm_module_kind_of(NULL), 0);
    tfm_module_free(NULL);
}

static void test_new_module_parameters_are_zero(void **state)
{
    (void)state;
    tfm_module *m = mha(4, 2, 0, 0, 1);
    tfm_tensor *w = make(2, (const int64_t[]){ 12, 4 }, NULL);
    fill(w, 9.0f);
    assert_int_equal(tfm_module_get_parameter(m, "in_proj_weight", w), TFM_OK);
    expect_all_equal(w, 0.0f, "in_proj_weight");
    /* a zero module outputs zero */
    tfm_tensor *x = make3(1, 3, 4, NULL), *out = make3(1, 3, 4, NULL);
    fill_random(x, 1);
    fill(out, 5.0f);
    assert_int_equal(tfm_mha_forward(m, x, x, x, NULL, out, NULL), TFM_OK);
    expect_all_equal(out, 0.0f, "out of a zero module");
    FREE_TENSORS(w, x, out);
    tfm_module_free(m);
}

static void test_set_get_parameter_roundtrip_and_errors(void **state)
{
    (void)state;
    tfm_module *m = mha(4, 2, 0, 0, 1);
    float vals[16];
    for (int i = 0; i < 16; i++)
        vals[i] = 0.25f * (float)i - 1.0f;
    set_param(m, "out_proj.weight", 2, (const int64_t[]){ 4, 4 }, vals);
    tfm_tensor *got = make(2, (const int64_t[]){ 4, 4 }, NULL);
    assert_int_equal(tfm_module_get_parameter(m, "out_proj.weight", got), TFM_OK);
    assert_memory_equal(tfm_tensor_data_const(got), vals, sizeof vals);
    /* the module keeps its own copy */
    tfm_tensor *src = make(2, (const int64_t[]){ 4, 4 }, vals);
    assert_int_equal(tfm_module_set_parameter(m, "out_proj.weight", src), TFM_OK);
    fill(src, 3.0f);
    assert_int_equal(tfm_module_get_parameter(m, "out_proj.weight", got), TFM_OK);
    assert_memory_equal(tfm_tensor_data_const(got), vals, sizeof vals);

    /* unknown names */
    const char *unknown[] = { "out_proj.weigh", "out_proj.weight ",
                              "self_attn.out_proj.weight", "q_proj_weight",
                              "bias_k", "", "OUT_PROJ.WEIGHT", "out_proj" };
    for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
        tfm_clear_error();
        assert_int_equal(tfm_module_set_parameter(m, unknown[i], src),
                         TFM_ERR_NOT_FOUND);
        assert_int_equal(tfm_module_get_parameter(m, unknown[i], got),
                         TFM_ERR_NOT_FOUND);
        int rank = 77;
        int64_t shape[4] = { 77, 77, 77, 77 };
        assert_int_equal(tfm_module_parameter_shape(m, unknown[i], &rank, shape),
                         TFM_ERR_NOT_FOUND);
        assert_int_equal(rank, 77);
        assert_int_equal(shape[0], 77);
    }
    assert_non_null(strstr(tfm_last_error(), "out_proj"));

    /* wrong shapes: transposed in_proj, flattened, wrong rank, wrong size */
    const struct { int rank; int64_t s[2]; } bad[] = {
        { 2, { 4, 12 } }, { 1, { 48 } }, { 2, { 12, 5 } }, { 2, { 11, 4 } },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tfm_tensor *t = make(bad[i].rank, bad[i].s, NULL);
        fill(t, 1.0f);
        assert_int_equal(tfm_module_set_parameter(m, "in_proj_weight", t),
                         TFM_ERR_SHAPE);
        assert_non_null(strstr(tfm_last_error(), "in_proj_weight"));
        assert_int_equal(tfm_module_get_parameter(m, "in_proj_weight", t),
                         TFM_ERR_SHAPE);
        expect_all_equal(t, 1.0f, "get into a wrong shape");
        tfm_tensor_free(t);
    }
    tfm_tensor *ip = make(2, (const int64_t[]){ 12, 4 }, NULL);
    assert_int_equal(tfm_module_get_parameter(m, "in_proj_weight", ip), TFM_OK);
    expect_all_equal(ip, 0.0f, "in_proj_weight after shape errors");

    /* non-finite values anywhere (first, middle, last element) */
    const float poison[3] = { NAN, INFINITY, -INFINITY };
    const int where[3] = { 0, 7, 15 };
    for (int p = 0; p < 3; p++) {
        fill(src, 2.0f);
        tfm_tensor_data(src)[where[p]] = poison[p];
        tfm_clear_error();
        assert_int_equal(tfm_module_set_parameter(m, "out_proj.weight", src),
                         TFM_ERR_NON_FINITE);
        assert_non_null(strstr(tfm_last_error(), "out_proj.weight"));
        assert_int_equal(tfm_module_get_parameter(m, "out_proj.weight", got),
                         TFM_OK);
        assert_memory_equal(tfm_tensor_data_const(got), vals, sizeof vals);
    }

    /* NULLs */
    assert_int_equal(tfm_module_set_parameter(NULL, "out_proj.weight", src),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_set_parameter(m, NULL, src),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_set_parameter(m, "out_proj.weight", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_get_parameter(m, "out_proj.weight", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_get_parameter(NULL, "out_proj.weight", got),
                     TFM_ERR_NULL_ARGUMENT);
    int rank;
    int64_t shape[4];
    assert_int_equal(tfm_module_parameter_shape(m, "out_proj.weight", NULL, shape),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_parameter_shape(m, "out_proj.weight", &rank, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_parameter_shape(NULL, "out_proj.weight", &rank,
                                                shape),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_get_parameter(m, "out_proj.weight", got), TFM_OK);
    assert_memory_equal(tfm_tensor_data_const(got), vals, sizeof vals);
    FREE_TENSORS(got, src, ip);
    tfm_module_free(m);
}

/* ---- MAC counts --------------------------------------------------------------- */

static int64_t macs_of(const tfm_module *m, int64_t b, int64_t l, int64_t s)
{
    int64_t macs = -1;
    tfm_status st = tfm_module_forward_macs(m, b, l, s, &macs);
    if (st != TFM_OK)
        fail_msg("macs(%lld, %lld, %lld): %s", (long long)b, (long long)l,
                 (long long)s, tfm_last_error());
    return macs;
}

static void test_forward_macs(void **state)
{
    (void)state;
    /* self-attention, B = 1: 4 d^2 N + 2 N^2 d.  d = 8, N = 5:
     * 4*64*5 + 2*25*8 = 1280 + 400 = 1680 */
    tfm_module *m = mha(8, 2, 0, 0, 1);
    assert_int_equal(macs_of(m, 1, 5, 5), 1680);
    /* d = 512, N = 1024: 4*262144*1024 + 2*1048576*512 = 1073741824 +
     * 1073741824 = 2147483648 (past int32) */
    tfm_module *big = mha(512, 8, 0, 0, 1);
    assert_int_equal(macs_of(big, 1, 1024, 1024), INT64_C(2147483648));
    /* batch multiplies: B = 3 */
    assert_int_equal(macs_of(m, 3, 5, 5), 3 * 1680);
    /* bias does not change the count */
    tfm_module *nb = mha(8, 2, 0, 0, 0);
    assert_int_equal(macs_of(nb, 1, 5, 5), 1680);
    /* L != S: L d^2 + S kdim d + S vdim d + 2 L S d + L d^2.
     * d = 8, L = 3, S = 7: 192 + 448 + 448 + 336 + 192 = 1616 */
    assert_int_equal(macs_of(m, 1, 3, 7), 1616);
    /* kdim = 3, vdim = 5, d = 8, L = 3, S = 7, B = 2:
     * 192 + 7*3*8 (168) + 7*5*8 (280) + 336 + 192 = 1168; x2 = 2336 */
    tfm_module *u = mha(8, 2, 3, 5, 1);
    assert_int_equal(macs_of(u, 2, 3, 7), 2336);
    /* errors: sizes < 1, NULLs, overflow; *macs unchanged */
    int64_t macs = 12345;
    assert_int_equal(tfm_module_forward_macs(m, 0, 5, 5, &macs),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_forward_macs(m, 1, 0, 5, &macs),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_forward_macs(m, 1, 5, -1, &macs),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_module_forward_macs(NULL, 1, 5, 5, &macs),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_forward_macs(m, 1, 5, 5, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_module_forward_macs(m, INT64_MAX / 2, 5, 5, &macs),
                     TFM_ERR_OVERFLOW);
    assert_int_equal(tfm_module_forward_macs(m, 1, INT64_C(1) << 31,
                                             INT64_C(1) << 31, &macs),
                     TFM_ERR_OVERFLOW); /* 2 L S d = 2^66 */
    /* each term fits but the sum does not: 2^59 L d^2 with d = 8 ...
     * B L d d = B * 64 for L = 1, S = 1: total per sequence 4*64 + 16 = 272;
     * B = 2^56: 272 * 2^56 > 2^63 */
    assert_int_equal(tfm_module_forward_macs(m, INT64_C(1) << 56, 1, 1, &macs),
                     TFM_ERR_OVERFLOW);
    assert_int_equal(macs, 12345);
    /* just under: B = 2^54 -> 272 * 2^54 = 17 * 2^58 < 2^63 */
    assert_int_equal(macs_of(m, INT64_C(1) << 54, 1, 1), INT64_C(272) << 54);
    tfm_module_free(m);
    tfm_module_free(big);
    tfm_module_free(nb);
    tfm_module_free(u);
}

/* mha.c multiplied batch * tgt_len before any overflow check. */
static void test_forward_macs_product_wraps(void **state)
{
    (void)state;
    tfm_module *m = mha(8, 2, 0, 0, 1);
    int64_t macs;
    /* B * L itself overflows and wraps to 0 in two's complement: 2^62 * 4 =
     * 2^64 and 2^32 * 2^32 = 2^64.  A count built from the wrapped product
     * would be 0 (or any small number) and look valid; the true count is
     * about 2^72. */
    macs = 12345;
    tfm_status st = tfm_module_forward_macs(m, INT64_C(1) << 62, 4, 4, &macs);
    if (st != TFM_ERR_OVERFLOW)
        fail_msg("B = 2^62, L = S = 4: status %d, macs %lld; expected OVERFLOW",
                 (int)st, (long long)macs);
    st = tfm_module_forward_macs(m, INT64_C(1) << 32, INT64_C(1) << 32, 1, &macs);
    if (st != TFM_ERR_OVERFLOW)
        fail_msg("B = L = 2^32: status %d, macs %lld; expected OVERFLOW",
                 (int)st, (long long)macs);
    assert_int_equal(macs, 12345);
    tfm_module_free(m);
}

/* ---- creation and forward errors -------------------------------------------- */

static void test_create_errors(void **state)
{
    (void)state;
    const struct { int64_t d, h, kd, vd; } bad[] = {
        { 8, 3, 0, 0 },   /* 3 does not divide 8 */
        { 6, 4, 0, 0 },
        { 8, 16, 0, 0 },  /* more heads than width */
        { 0, 1, 0, 0 },   /* zero width */
        { -8, 2, 0, 0 },
        { 8, 0, 0, 0 },   /* zero heads */
        { 8, -2, 0, 0 },
        { 8, 2, -1, 0 },  /* negative kdim */
        { 8, 2, 0, -3 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tfm_module *out = SENTINEL_MODULE;
        tfm_clear_error();
        tfm_status st = tfm_mha_create(bad[i].d, bad[i].h, bad[i].kd, bad[i].vd,
                                       1, &out);
        if (st != TFM_ERR_INVALID_ARGUMENT)
            fail_msg("case %zu: status %d, expected INVALID_ARGUMENT", i, (int)st);
        assert_ptr_equal(out, SENTINEL_MODULE);
        assert_true(strlen(tfm_last_error()) > 0);
    }
    tfm_module *out = SENTINEL_MODULE;
    assert_int_equal(tfm_mha_create(8, 3, 0, 0, 1, &out), TFM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tfm_last_error(), "n_heads"));
    assert_int_equal(tfm_mha_create(8, 2, 0, 0, 1, NULL), TFM_ERR_NULL_ARGUMENT);
    /* extreme sizes: no crash, an error, *out untouched */
    out = SENTINEL_MODULE;
    assert_int_not_equal(tfm_mha_create(INT64_C(1) << 40, 1, 0, 0, 1, &out),
                         TFM_OK);
    assert_ptr_equal(out, SENTINEL_MODULE);
    /* n_heads == d_model (d_k = 1) is fine */
    tfm_module *m = mha(4, 4, 0, 0, 1);
    tfm_module_free(m);
}

typedef struct mha_io {
    tfm_module *m;
    tfm_tensor *q, *k, *v, *out, *w;
} mha_io;

enum { FB = 2, FL = 3, FS = 4, FD = 8, FH = 2, FKD = 5, FVD = 6 };

static void expect_forward_error(const tfm_module *m, const tfm_tensor *q,
                                 const tfm_tensor *k, const tfm_tensor *v,
                                 const tfm_attention_masks *masks,
                                 tfm_tensor *out, tfm_tensor *w,
                                 tfm_status want, const char *needle, int line)
{
    arm_failing_call(out, w);
    tfm_status st = tfm_mha_forward(m, q, k, v, masks, out, w);
    expect_failed_call(st, want, out, w, needle, line);
}
#define FWD_ERR(m, q, k, v, mk, o, w, st, needle) \
    expect_forward_error((m), (q), (k), (v), (mk), (o), (w), (st), (needle), \
                         __LINE__)

static void test_forward_shape_errors(void **state)
{
    (void)state;
    tfm_module *m = mha(FD, FH, 0, 0, 1);
    randomize(m, 5);
    tfm_tensor *q = make3(FB, FL, FD, NULL), *k = make3(FB, FS, FD, NULL),
               *v = make3(FB, FS, FD, NULL), *out = make3(FB, FL, FD, NULL),
               *w = make4(FB, FH, FL, FS, NULL);
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    assert_int_equal(tfm_mha_forward(m, q, k, v, NULL, out, w), TFM_OK);

    /* the header's example message */
    tfm_tensor *k5 = make3(FB, FS, 5, NULL);
    FWD_ERR(m, q, k5, v, NULL, out, w, TFM_ERR_SHAPE, "key has 5 columns, expected 8");
    tfm_tensor *q7 = make3(FB, FL, 7, NULL);
    FWD_ERR(m, q7, k, v, NULL, out, w, TFM_ERR_SHAPE, "query");
    tfm_tensor *v9 = make3(FB, FS, 9, NULL);
    FWD_ERR(m, q, k, v9, NULL, out, w, TFM_ERR_SHAPE, "value");
    tfm_tensor *kb = make3(FB + 1, FS, FD, NULL);
    FWD_ERR(m, q, kb, v, NULL, out, w, TFM_ERR_SHAPE, "key");
    tfm_tensor *vs = make3(FB, FS + 1, FD, NULL); /* value length != key length */
    FWD_ERR(m, q, k, vs, NULL, out, w, TFM_ERR_SHAPE, "value");
    tfm_tensor *vb = make3(FB + 1, FS, FD, NULL);
    FWD_ERR(m, q, k, vb, NULL, out, w, TFM_ERR_SHAPE, "value");
    tfm_tensor *o2 = make3(FB, FL + 1, FD, NULL);
    FWD_ERR(m, q, k, v, NULL, o2, w, TFM_ERR_SHAPE, "out");
    expect_all_equal(o2, 42.0f, "wrong out");
    tfm_tensor *q4 = make4(1, FB, FL, FD, NULL);
    FWD_ERR(m, q4, k, v, NULL, out, w, TFM_ERR_SHAPE, "query");
    tfm_tensor *k2 = make(2, (const int64_t[]){ FS, FD }, NULL);
    FWD_ERR(m, q, k2, v, NULL, out, w, TFM_ERR_SHAPE, "key");
    /* weights: rank 2, wrong H, wrong S, rank 3 with wrong L */
    tfm_tensor *w2 = make(2, (const int64_t[]){ FL, FS }, NULL);
    FWD_ERR(m, q, k, v, NULL, out, w2, TFM_ERR_SHAPE, "weights");
    tfm_tensor *wh = make4(FB, FH + 1, FL, FS, NULL);
    FWD_ERR(m, q, k, v, NULL, out, wh, TFM_ERR_SHAPE, "weights");
    tfm_tensor *ws = make4(FB, FH, FL, FS + 1, NULL);
    FWD_ERR(m, q, k, v, NULL, out, ws, TFM_ERR_SHAPE, "weights");
    tfm_tensor *w3 = make3(FB, FS, FL, NULL);
    FWD_ERR(m, q, k, v, NULL, out, w3, TFM_ERR_SHAPE, "weights");
    /* masks */
    tfm_tensor *padbad = make(2, (const int64_t[]){ FB, FL }, NULL);
    tfm_attention_masks mp = { .key_padding_mask = padbad };
    FWD_ERR(m, q, k, v, &mp, out, w, TFM_ERR_SHAPE, "key_padding_mask");
    tfm_tensor *ambad = make(2, (const int64_t[]){ FL, FL }, NULL);
    tfm_attention_masks ma = { .attn_mask = ambad };
    FWD_ERR(m, q, k, v, &ma, out, w, TFM_ERR_SHAPE, "attn_mask");
    tfm_tensor *am4 = make4(FB, FH + 1, FL, FS, NULL);
    tfm_attention_masks ma4 = { .attn_mask = am4 };
    FWD_ERR(m, q, k, v, &ma4, out, w, TFM_ERR_SHAPE, "attn_mask");
    tfm_attention_masks mc = { .causal = (tfm_causal)7 };
    FWD_ERR(m, q, k, v, &mc, out, w, TFM_ERR_INVALID_ARGUMENT, NULL);
    tfm_tensor *pad = make(2, (const int64_t[]){ FB, FS }, NULL);
    tfm_attention_masks mkind = { .key_padding_mask = pad,
                                  .key_padding_kind = (tfm_mask_kind)9 };
    FWD_ERR(m, q, k, v, &mkind, out, w, TFM_ERR_INVALID_ARGUMENT, NULL);
    /* NULLs */
    FWD_ERR(NULL, q, k, v, NULL, out, w, TFM_ERR_NULL_ARGUMENT, NULL);
    FWD_ERR(m, NULL, k, v, NULL, out, w, TFM_ERR_NULL_ARGUMENT, "query");
    FWD_ERR(m, q, NULL, v, NULL, out, w, TFM_ERR_NULL_ARGUMENT, "key");
    FWD_ERR(m, q, k, NULL, NULL, out, w, TFM_ERR_NULL_ARGUMENT, "value");
    FWD_ERR(m, q, k, v, NULL, NULL, w, TFM_ERR_NULL_ARGUMENT, "out");

    /* unpacked module: key must have kdim columns */
    tfm_module *u = mha(FD, FH, FKD, FVD, 1);
    tfm_tensor *ku = make3(FB, FS, FKD, NULL), *vu = make3(FB, FS, FVD, NULL);
    assert_int_equal(tfm_mha_forward(u, q, ku, vu, NULL, out, w), TFM_OK);
    FWD_ERR(u, q, k, vu, NULL, out, w, TFM_ERR_SHAPE, "key has 8 columns, expected 5");
    FWD_ERR(u, q, ku, v, NULL, out, w, TFM_ERR_SHAPE, "value");
    FWD_ERR(u, q, ku, ku, NULL, out, w, TFM_ERR_SHAPE, "value");

    FREE_TENSORS(q, k, v, out, w, k5, q7, v9, kb, vs, vb, o2, q4, k2, w2, wh,
                 ws, w3, padbad, ambad, am4, pad, ku, vu);
    tfm_module_free(m);
    tfm_module_free(u);
}

static void test_wrong_kind(void **state)
{
    (void)state;
    tfm_module *ln = NULL;
    assert_int_equal(tfm_layer_norm_create(FD, 1e-5f, &ln), TFM_OK);
    tfm_module *ff = NULL;
    assert_int_equal(tfm_feed_forward_create(FD, 16, TFM_ACTIVATION_RELU, &ff),
                     TFM_OK);
    tfm_layer_config cfg = tfm_layer_config_default(FD, FH);
    cfg.d_ff = 16;
    tfm_module *enc = NULL;
    assert_int_equal(tfm_encoder_layer_create(&cfg, &enc), TFM_OK);
    tfm_tensor *q = make3(1, 2, FD, NULL), *out = make3(1, 2, FD, NULL),
               *w = make3(1, 2, 2, NULL);
    fill_random(q, 4);
    tfm_module *wrong[3] = { ln, ff, enc };
    for (int i = 0; i < 3; i++)
        FWD_ERR(wrong[i], q, q, q, NULL, out, w, TFM_ERR_WRONG_KIND, NULL);
    /* and an MHA passed to the LayerNorm forward */
    tfm_module *m = mha(FD, FH, 0, 0, 1);
    fill(out, 42.0f);
    assert_int_equal(tfm_layer_norm_forward(m, q, out), TFM_ERR_WRONG_KIND);
    expect_all_equal(out, 42.0f, "out after wrong kind");
    FREE_TENSORS(q, out, w);
    tfm_module_free(ln);
    tfm_module_free(ff);
    tfm_module_free(enc);
    tfm_module_free(m);
}

/* ---- properties ---------------------------------------------------------------- */

static void test_averaged_weights_are_mean_of_heads(void **state)
{
    (void)state;
    enum { B = 2, L = 5, S = 6, D = 12, H = 3 };
    tfm_module *m = mha(D, H, 0, 0, 1);
    randomize(m, 77);
    tfm_tensor *q = make3(B, L, D, NULL), *k = make3(B, S, D, NULL),
               *v = make3(B, S, D, NULL);
    fill_random(q, 1);
    fill_random(k, 2);
    fill_random(v, 3);
    /* scale up so the heads differ clearly */
    float *qd = tfm_tensor_data(q);
    for (int i = 0; i < B * L * D; i++)
        qd[i] *= 5.0f;
    tfm_tensor *pad = make(2, (const int64_t[]){ B, S },
                           (const float[]){ 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0 });
    tfm_attention_masks mk = { .causal = TFM_CAUSAL_BOTTOM_RIGHT,
                               .key_padding_mask = pad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    tfm_tensor *o1 = make3(B, L, D, NULL), *o2 = make3(B, L, D, NULL),
               *o3 = make3(B, L, D, NULL);
    tfm_tensor *wh = make4(B, H, L, S, NULL), *wa = make3(B, L, S, NULL);
    fill(wa, NAN); /* must be fully overwritten */
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mk, o1, wh), TFM_OK);
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mk, o2, wa), TFM_OK);
    assert_int_equal(tfm_mha_forward(m, q, k, v, &mk, o3, NULL), TFM_OK);
    const float *h = tfm_tensor_data_const(wh), *a = tfm_tensor_data_const(wa);
    int differ = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            double rowsum = 0;
            for (int j = 0; j < S; j++) {
                double mean = 0;
                for (int hh = 0; hh < H; hh++)
                    mean += h[((b * H + hh) * L + i) * S + j];
                mean /= H;
                float x = a[(b * L + i) * S + j];
                NEAR_AT(x, mean, 1e-6, "averaged weight", (b * L + i) * S + j);
                if (h[((b * H) * L + i) * S + j] != h[((b * H + 1) * L + i) * S + j])
                    differ = 1;
                rowsum += x;
            }
            NEAR_AT(rowsum, 1.0, 1e-6, "averaged row sum", b * L + i);
        }
    assert_true(differ); /* the test would be vacuous if the heads agreed */
    /* the outputs do not depend on which weights were requested */
    EXPECT_CLOSE(o2, o1, 1e-6, "out (averaged vs per head)");
    EXPECT_CLOSE(o3, o1, 1e-6, "out (no weights vs per head)");
    FREE_TENSORS(q, k, v, pad, o1, o2, o3, wh, wa);
    tfm_module_free(m);
}

/* The kernel works in blocks of query rows; averaged weights over more
 * than one block (long L and S, causal) are still the mean of the per-head
 * weights, and every row sums to 1. */
static void check_averaged_long(int L, int S)
{
    enum { D = 8, H = 2 };
    tfm_module *m = mha(D, H, 0, 0, 1);
    randomize(m, 5);
    tfm_tensor *q = make3(1, L, D, NULL), *kv = make3(1, S, D, NULL);
    fill_random(q, 6);
    fill_random(kv, 7);
    tfm_tensor *out = make3(1, L, D, NULL), *wh = make4(1, H, L, S, NULL),
               *wa = make3(1, L, S, NULL);
    fill(wa, NAN);
    fill(wh, NAN);
    tfm_attention_masks mk = { .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_mha_forward(m, q, kv, kv, &mk, out, wh), TFM_OK);
    assert_int_equal(tfm_mha_forward(m, q, kv, kv, &mk, out, wa), TFM_OK);
    const float *h = tfm_tensor_data_const(wh), *a = tfm_tensor_data_const(wa);
    for (int i = 0; i < L; i++) {
        double sum = 0;
        for (int j = 0; j < S; j++) {
            double mean = 0.5 * ((double)h[i * S + j] + h[(L + i) * S + j]);
            NEAR_AT(a[i * S + j], mean, 1e-6, "averaged", i * S + j);
            if (j > i && (a[i * S + j] != 0.0f || h[i * S + j] != 0.0f))
                fail_msg("row %d key %d is causally masked but has weight %g",
                         i, j, (double)a[i * S + j]);
            sum += a[i * S + j];
        }
        NEAR_AT(sum, 1.0, 1e-5, "row sum", i);
    }
    FREE_TENSORS(q, kv, out, wh, wa);
    tfm_module_free(m);
}

static void test_averaged_weights_long_sequence(void **state)
{
    (void)state;
    check_averaged_long(70, 90);
    check_averaged_long(100, 1500);
    check_averaged_long(400, 700);
}

/* Self-attention given one tensor three times (query = key = value) and
 * given three separate copies of it compute the same function; only
 * rounding may differ.  With and without bias, masks, per-head weights. */
static void test_self_attention_same_tensor_vs_copies(void **state)
{
    (void)state;
    enum { B = 2, L = 9, D = 12, H = 3 };
    for (int bias = 0; bias < 2; bias++) {
        tfm_module *m = mha(D, H, 0, 0, bias);
        randomize(m, 21 + (uint32_t)bias);
        tfm_tensor *x = make3(B, L, D, NULL), *xk = make3(B, L, D, NULL),
                   *xv = make3(B, L, D, NULL);
        fill_random(x, 22);
        fill_random(xk, 22);
        fill_random(xv, 22);
        tfm_tensor *pad = make(2, (const int64_t[]){ B, L }, NULL);
        tfm_tensor_data(pad)[L + 2] = 1.0f;
        tfm_attention_masks mk = { .causal = TFM_CAUSAL_TOP_LEFT,
                                   .key_padding_mask = pad };
        tfm_tensor *o1 = make3(B, L, D, NULL), *o2 = make3(B, L, D, NULL);
        tfm_tensor *w1 = make4(B, H, L, L, NULL), *w2 = make4(B, H, L, L, NULL);
        assert_int_equal(tfm_mha_forward(m, x, x, x, &mk, o1, w1), TFM_OK);
        assert_int_equal(tfm_mha_forward(m, x, xk, xv, &mk, o2, w2), TFM_OK);
        EXPECT_CLOSE(o1, o2, 1e-5, "out (same tensor vs copies)");
        EXPECT_CLOSE(w1, w2, 1e-5, "weights (same tensor vs copies)");
        /* key = value = x but query different, and query = key != value */
        tfm_tensor *q = make3(B, L, D, NULL);
        fill_random(q, 23);
        assert_int_equal(tfm_mha_forward(m, q, x, x, &mk, o1, NULL), TFM_OK);
        assert_int_equal(tfm_mha_forward(m, q, xk, xv, &mk, o2, NULL), TFM_OK);
        EXPECT_CLOSE(o1, o2, 1e-5, "out (key = value)");
        assert_int_equal(tfm_mha_forward(m, x, x, q, &mk, o1, NULL), TFM_OK);
        assert_int_equal(tfm_mha_forward(m, x, xk, q, &mk, o2, NULL), TFM_OK);
        EXPECT_CLOSE(o1, o2, 1e-5, "out (query = key)");
        FREE_TENSORS(x, xk, xv, pad, o1, o2, w1, w2, q);
        tfm_module_free(m);
    }
}

/* A [a, b, c] tensor viewing data (not a copy). */
static tfm_tensor *wrap3(int64_t a, int64_t b, int64_t c, float *data)
{
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_wrap(3, (const int64_t[]){ a, b, c }, data, &t),
                     TFM_OK);
    return t;
}

/* Tensors are views: the query may wrap the first rows of the same buffer
 * that key and value wrap (queries = a prefix of the positions attended
 * over).  The result is the one of separate copies, whatever the library
 * does when the three data pointers coincide. */
static void test_query_is_prefix_view_of_key(void **state)
{
    (void)state;
    enum { D = 8, H = 2, LONG = 6, SHORT = 2 };
    tfm_module *m = mha(D, H, 0, 0, 1);
    randomize(m, 31);
    float buf[LONG * D], qcopy[SHORT * D], kcopy[LONG * D];
    uint32_t seed = 32;
    for (int i = 0; i < LONG * D; i++)
        buf[i] = rnd(&seed);
    memcpy(qcopy, buf, sizeof qcopy);
    memcpy(kcopy, buf, sizeof kcopy);
    tfm_tensor *qv = wrap3(1, SHORT, D, buf), *kv = wrap3(1, LONG, D, buf);
    tfm_tensor *qc = wrap3(1, SHORT, D, qcopy), *kc = wrap3(1, LONG, D, kcopy);
    tfm_tensor *o_view = make3(1, SHORT, D, NULL), *o_copy = make3(1, SHORT, D, NULL);
    tfm_tensor *w_view = make3(1, SHORT, LONG, NULL),
               *w_copy = make3(1, SHORT, LONG, NULL);
    assert_int_equal(tfm_mha_forward(m, qc, kc, kc, NULL, o_copy, w_copy), TFM_OK);
    assert_int_equal(tfm_mha_forward(m, qv, kv, kv, NULL, o_view, w_view), TFM_OK);
    EXPECT_CLOSE(o_view, o_copy, 1e-5, "out (prefix view)");
    EXPECT_CLOSE(w_view, w_copy, 1e-5, "weights (prefix view)");
    /* and the other way: key/value a prefix of the query's buffer */
    tfm_tensor *o2v = make3(1, LONG, D, NULL), *o2c = make3(1, LONG, D, NULL);
    assert_int_equal(tfm_mha_forward(m, kc, qc, qc, NULL, o2c, NULL), TFM_OK);
    assert_int_equal(tfm_mha_forward(m, kv, qv, qv, NULL, o2v, NULL), TFM_OK);
    EXPECT_CLOSE(o2v, o2c, 1e-5, "out (key prefix view)");
    FREE_TENSORS(qv, kv, qc, kc, o_view, o_copy, w_view, w_copy, o2v, o2c);
    tfm_module_free(m);
}

static void test_out_may_alias_query(void **state)
{
    (void)state;
    enum { B = 2, L = 4, D = 8, H = 2 };
    tfm_module *m = mha(D, H, 0, 0, 1);
    randomize(m, 13);
    tfm_tensor *x = make3(B, L, D, NULL);
    fill_random(x, 14);
    tfm_tensor *mem = make3(B, 6, D, NULL);
    fill_random(mem, 15);
    tfm_tensor *ref = make3(B, L, D, NULL);
    tfm_attention_masks mc = { .causal = TFM_CAUSAL_TOP_LEFT };
    /* self-attention: query = key = value = out */
    assert_int_equal(tfm_mha_forward(m, x, x, x, &mc, ref, NULL), TFM_OK);
    assert_int_equal(tfm_mha_forward(m, x, x, x, &mc, x, NULL), TFM_OK);
    expect_bit_identical(x, ref, "self-attention in place");
    /* cross-attention: out = query, keys from elsewhere */
    fill_random(x, 14);
    assert_int_equal(tfm_mha_forward(m, x, mem, mem, NULL, ref, NULL), TFM_OK);
    assert_int_equal(tfm_mha_forward(m, x, mem, mem, NULL, x, NULL), TFM_OK);
    expect_bit_identical(x, ref, "cross-attention in place");
    FREE_TENSORS(x, mem, ref);
    tfm_module_free(m);
}

/* Out of memory: each allocation of tfm_mha_create failing in turn gives
 * TFM_ERR_OUT_OF_MEMORY with *out untouched; a forward pass on a cold
 * workspace gives TFM_ERR_OUT_OF_MEMORY with out and weights untouched. */
static void test_out_of_memory(void **state)
{
    (void)state;
    for (int packed = 0; packed < 2; packed++) {
        int succeeded = 0;
        for (long k = 1; k <= 100 && !succeeded; k++) {
            tfm_module *m = SENTINEL_MODULE;
            tfm_testing_fail_allocation(k);
            tfm_status st = packed ? tfm_mha_create(8, 2, 0, 0, 1, &m)
                                   : tfm_mha_create(8, 2, 3, 5, 1, &m);
            tfm_testing_fail_allocation(0);
            if (st == TFM_OK) {
                tfm_module_free(m);
                succeeded = 1;
            } else {
                assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
                assert_ptr_equal(m, SENTINEL_MODULE);
            }
        }
        assert_true(succeeded);
    }
    tfm_module *m = mha(8, 2, 0, 0, 1);
    randomize(m, 3);
    tfm_tensor *x = make3(2, 4, 8, NULL), *out = make3(2, 4, 8, NULL),
               *w = make3(2, 4, 4, NULL), *ref = make3(2, 4, 8, NULL),
               *ref_w = make3(2, 4, 4, NULL);
    fill_random(x, 4);
    tfm_workspace_release();
    /* The reference takes the same path (weights requested: whole rows). */
    assert_int_equal(tfm_mha_forward(m, x, x, x, NULL, ref, ref_w), TFM_OK);
    int succeeded = 0, failed = 0;
    for (long k = 1; k <= 50 && !succeeded; k++) {
        tfm_workspace_release();
        fill(out, 42.0f);
        fill(w, 42.0f);
        tfm_testing_fail_allocation(k);
        tfm_status st = tfm_mha_forward(m, x, x, x, NULL, out, w);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK) {
            expect_bit_identical(out, ref, "forward after injected failures");
            succeeded = 1;
        } else {
            assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
            expect_all_equal(out, 42.0f, "out after out of memory");
            expect_all_equal(w, 42.0f, "weights after out of memory");
            failed++;
        }
    }
    assert_true(succeeded);
    assert_true(failed >= 1);
    FREE_TENSORS(x, out, w, ref, ref_w);
    tfm_module_free(m);
}

/* ---- threads ------------------------------------------------------------------ */

enum { TB = 2, TL = 96, TS = 80, TD = 128, TH = 4, N_THREADS = 8, N_ITERS = 12 };

typedef struct thread_ctx {
    const tfm_module *m;
    const tfm_tensor *q, *kv;
    const tfm_attention_masks *masks[2];
    const tfm_tensor *ref_out[2], *ref_w[2];
    int id;
    int mismatches;
    int errors;
} thread_ctx;

static void *thread_main(void *arg)
{
    thread_ctx *c = arg;
    tfm_tensor *out = NULL, *w = NULL;
    if (tfm_tensor_create(3, (const int64_t[]){ TB, TL, TD }, &out) != TFM_OK ||
        tfm_tensor_create(4, (const int64_t[]){ TB, TH, TL, TS }, &w) != TFM_OK) {
        c->errors++;
        tfm_tensor_free(out);
        return NULL;
    }
    for (int it = 0; it < N_ITERS; it++) {
        int variant = (it + c->id) % 2; /* interleave the two calls */
        if (tfm_mha_forward(c->m, c->q, c->kv, c->kv, c->masks[variant], out,
                            w) != TFM_OK) {
            c->errors++;
            continue;
        }
        if (!bit_identical(out, c->ref_out[variant]) ||
            !bit_identical(w, c->ref_w[variant]))
            c->mismatches++;
        /* provoke a thread-local error message; it must not leak into
         * other threads' messages */
        if (tfm_mha_forward(c->m, c->kv, c->kv, c->kv, NULL, out, w) !=
            TFM_ERR_SHAPE)
            c->errors++;
    }
    tfm_workspace_release();
    tfm_tensor_free(out);
    tfm_tensor_free(w);
    return NULL;
}

static void test_threads_share_one_module(void **state)
{
    (void)state;
    tfm_module *m = mha(TD, TH, 0, 0, 1);
    randomize(m, 99);
    tfm_tensor *q = make3(TB, TL, TD, NULL), *kv = make3(TB, TS, TD, NULL);
    fill_random(q, 1);
    fill_random(kv, 2);
    float padd[TB * TS] = { 0 };
    padd[TS - 1] = 1;
    padd[TS + 3] = 1;
    tfm_tensor *pad = make(2, (const int64_t[]){ TB, TS }, padd);
    tfm_attention_masks m0 = { 0 };
    tfm_attention_masks m1 = { .causal = TFM_CAUSAL_BOTTOM_RIGHT,
                               .key_padding_mask = pad,
                               .key_padding_kind = TFM_MASK_BLOCK };
    tfm_tensor *ref_out[2], *ref_w[2];
    const tfm_attention_masks *masks[2] = { &m0, &m1 };
    for (int i = 0; i < 2; i++) {
        ref_out[i] = make3(TB, TL, TD, NULL);
        ref_w[i] = make4(TB, TH, TL, TS, NULL);
        assert_int_equal(tfm_mha_forward(m, q, kv, kv, masks[i], ref_out[i],
                                         ref_w[i]),
                         TFM_OK);
    }
    /* the two references differ (else the test could not tell them apart) */
    assert_false(bit_identical(ref_out[0], ref_out[1]));

    /* the error message of this thread survives the other threads' errors */
    tfm_tensor *bad = make3(TB, TS, 3, NULL);
    assert_int_equal(tfm_mha_forward(m, q, bad, kv, NULL, ref_out[0], NULL),
                     TFM_ERR_SHAPE);
    char mine[256];
    snprintf(mine, sizeof mine, "%s", tfm_last_error());
    assert_non_null(strstr(mine, "key has 3 columns"));

    pthread_t th[N_THREADS];
    thread_ctx ctx[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        ctx[i] = (thread_ctx){ .m = m, .q = q, .kv = kv,
                               .masks = { &m0, &m1 },
                               .ref_out = { ref_out[0], ref_out[1] },
                               .ref_w = { ref_w[0], ref_w[1] }, .id = i };
        assert_int_equal(pthread_create(&th[i], NULL, thread_main, &ctx[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N_THREADS; i++) {
        if (ctx[i].errors)
            fail_msg("thread %d: %d calls failed", i, ctx[i].errors);
        if (ctx[i].mismatches)
            fail_msg("thread %d: %d of %d results differ from the "
                     "single-threaded run", i, ctx[i].mismatches, N_ITERS);
    }
    assert_string_equal(tfm_last_error(), mine);
    FREE_TENSORS(q, kv, pad, ref_out[0], ref_out[1], ref_w[0], ref_w[1], bad);
    tfm_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_one_head),
        cmocka_unit_test(test_identity_two_heads),
        cmocka_unit_test(test_zero_wq_gives_mean_of_values),
        cmocka_unit_test(test_per_head_mask),
        cmocka_unit_test(test_matches_pytorch_unpacked),
        cmocka_unit_test(test_parameter_names_shapes_counts),
        cmocka_unit_test(test_new_module_parameters_are_zero),
        cmocka_unit_test(test_set_get_parameter_roundtrip_and_errors),
        cmocka_unit_test(test_forward_macs),
        cmocka_unit_test(test_forward_macs_product_wraps),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_forward_shape_errors),
        cmocka_unit_test(test_wrong_kind),
        cmocka_unit_test(test_averaged_weights_are_mean_of_heads),
        cmocka_unit_test(test_averaged_weights_long_sequence),
        cmocka_unit_test(test_self_attention_same_tensor_vs_copies),
        cmocka_unit_test(test_query_is_prefix_view_of_key),
        cmocka_unit_test(test_out_may_alias_query),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_threads_share_one_module),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
