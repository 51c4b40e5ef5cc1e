/*
 * Attention variants at the edges (review of the variants feature): sizes
 * up to 2^63-1, BigBird drawing more random blocks than there are key
 * blocks, T5 with the largest max_distance, queries that see no key, and
 * the shapes L = S = 1, L > S and L < S under bottom-right causality with
 * RoPE, ALiBi and windows, under GQA/MQA.  Regressions:
 *
 *  - window, dilation, n_global and block_size near INT64_MAX overflowed
 *    the kernel's position arithmetic (p + window * dilation + 1,
 *    (block - window) * block_size): signed overflow, and wrong outputs on
 *    the tiled path (a sliding window of 2^63-1 gave zeros; BigBird with
 *    window 2^63-1 dropped keys).
 *  - n_random_blocks had no upper bound: 2^63-1 overflowed the scratch
 *    size, 10^7 ran for minutes on a 4-token input (quadratic sort of
 *    ranges), and a model file could ask for either.
 *  - T5 with max_distance 2^63-1 (valid) computed 2 * max_distance + 1.
 *
 * Expected values: tests/variant_edge_values.py (float64 numpy, PyTorch for
 * Hugging Face's T5 buckets, dense masks from the patterns' definitions
 * with Python integers), pasted below; relative tolerance 1e-5.  Every case
 * runs with and without the weights output (the kernel's two paths).
 */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <transformer/attention.h>
#include <transformer/variants.h>

#define TOL 1e-5

/* ---- expected values (tests/variant_edge_values.py) ----------------------- */

/* sliding_window_2^63-1 */
static const double ref_out_0[] = { 0.00787363536, -0.171220012, -0.0994759564, 0.118000624, -0.372409233, 0.0403395009, 0.393990754, 0.170444625, -0.0780189542, -0.316285323, -0.0911929704, 0.267497316, -0.170809249, -0.163591591, 0.0832881262, 0.208150537, -0.0895213306, 0.229641324, 0.212378902, -0.116019107, -0.31328673, -0.091148878, 0.264522283, 0.232667677 };
static const double ref_w_0[] = { 0.31884177, 0.049456128, 0.0846238611, 0.427413103, 0.119665137, 0.0678881444, 0.487161772, 0.195195048, 0.0412174274, 0.208537609, 0.256150958, 0.0402711447, 0.131895805, 0.489335958, 0.0823461344, 0.30057982, 0.0499668823, 0.0995443609, 0.437799664, 0.112109273, 0.105210685, 0.414653194, 0.170829408, 0.0648542875, 0.244452425, 0.203202097, 0.0922110707, 0.246144701, 0.347195659, 0.111246472 };
/* sliding_huge_global_rope_bottom_right */
static const double ref_out_1[] = { -0.346206814, 0.368661465, 0.543439815, -0.0779224431, -0.464081044, 0.249446792, 0.597534475, 0.0702327505, -0.225162647, -0.210637531, 0.112472042, 0.27080982, 0.0484439346, 0.581043108, 0.26241277, -0.4406529, -0.0549115003, 0.518170817, 0.332131683, -0.340481159, -0.0859978975, 0.164969561, 0.174256223, -0.0717428937 };
static const double ref_w_1[] = { 0.488242576, 0.193529529, 0.318227895, 0, 0, 0.30345307, 0.394338112, 0.230917749, 0.0712910698, 0, 0.22097363, 0.138058971, 0.225336061, 0.325429873, 0.0902014651, 0.419642083, 0.226171601, 0.354186315, 0, 0, 0.274251545, 0.391799444, 0.214536964, 0.119412047, 0, 0.320176804, 0.140533317, 0.244867057, 0.19361035, 0.100812473 };
/* dilation_2^63-1_alibi */
static const double ref_out_2[] = { 0.198669329, 0.997494996, 0.334988147, -0.818277121, -0.772764504, 0.404849917, 0.989358246, 0.124454424, 0.198669329, 0.997494996, 0.334988147, -0.818277121, -0.772764504, 0.404849917, 0.989358246, 0.124454424 };
static const double ref_w_2[] = { 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1 };
/* dilated_window_2^62 */
static const double ref_out_3[] = { -0.0519744809, 0.722686389, 0.556255367, -0.499504017, -0.744046252, 0.0483604372, 0.822949469, -0.115285753, -0.214225188, 0.541859554 };
static const double ref_w_3[] = { 0.762194329, 0, 0.106939647, 0, 0.130866024, 0, 0.66186227, 0, 0.33813773, 0, 0.0915673518, 0, 0.506906133, 0, 0.401526515, 0, 0.254303761, 0, 0.745696239, 0, 0.608740517, 0, 0.172529992, 0, 0.218729491 };
/* bigbird_huge_t5_huge */
static const double ref_out_4[] = { 0.194191445, 0.306861639, 0.08447073, 0.300841754, 0.13614439, 0.00480806484, -0.102658617, 0.0351257839, -0.0759590374, -0.0542917365, -0.0159299723, -0.264570804, -0.0686657558, -0.110160436, 0.16013959, -0.0308316053 };
static const double ref_w_4[] = { 0.194695158, 0.210620217, 0.0906946266, 0.0623489629, 0.110986388, 0.330654647, 0.150468582, 0.0906216957, 0.159240693, 0.153713342, 0.177470175, 0.268485512, 0.0297275664, 0.0550957616, 0.110313446, 0.40265538, 0.29011388, 0.112093966, 0.0490210931, 0.0879736165, 0.1510032, 0.172919439, 0.340254147, 0.198828505, 0.133473617, 0.316199894, 0.206997755, 0.109385943, 0.0923505426, 0.141592248, 0.251435599, 0.196556746, 0.238926264, 0.112376174, 0.0767259206, 0.123979297, 0.0626091181, 0.0579003291, 0.0672765587, 0.250194124, 0.317921595, 0.244098276, 0.0217404888, 0.0237319016, 0.0489413961, 0.115754386, 0.467095326, 0.322736501 };
/* bigbird_many_draws */
static const double ref_out_5[] = { 0.331803638, 0.976310162, 0.257340484, -0.722970433, 0.234454402, 0.298067314, 0.249141911, 0.316778515, -0.313170891, -0.464047607, -0.0162172345, 0.488297312, 0.107558963, -0.354335838 };
static const double ref_w_5[] = { 0.661583891, 0, 0, 0, 0, 0.338416109, 0, 0, 0.356629295, 0, 0.182197755, 0, 0, 0.46117295, 0.0715847624, 0, 0.396284859, 0.532130378, 0, 0, 0, 0.0997534951, 0, 0.375310036, 0.524936469, 0, 0, 0, 0, 0.456066593, 0.239853168, 0, 0.30408024, 0, 0, 0, 0, 0.203666118, 0, 0.218054399, 0.578279483, 0, 0, 0, 0, 0.452808332, 0.349200862, 0, 0.197990807 };
/* bigbird_many_draws_causal */
static const double ref_out_6[] = { 0.198669329, 0.997494996, 0.256445656, 0.227912007, -0.377399254, 0.157549354, 0.822949469, -0.115285753, -0.359982821, -0.0886164959, 0.236586804, 0.796839102, 0.107558963, -0.354335838 };
static const double ref_w_6[] = { 1, 0, 0, 0, 0, 0, 0, 0.576167636, 0.423832364, 0, 0, 0, 0, 0, 0.113641827, 0.257250329, 0.629107844, 0, 0, 0, 0, 0, 0.254303761, 0, 0.745696239, 0, 0, 0, 0, 0, 0.322324521, 0.269039986, 0.408635494, 0, 0, 0, 0, 0.260460725, 0, 0, 0.739539275, 0, 0, 0, 0, 0.452808332, 0.349200862, 0, 0.197990807 };
/* bigbird_huge_window_causal */
static const double ref_out_7[] = { 0.198669329, 0.997494996, 0.256445656, 0.227912007, -0.377399254, 0.157549354, 0.262176528, 0.144435313, 0.0259129493, 0.19791373 };
static const double ref_w_7[] = { 1, 0, 0, 0, 0, 0.576167636, 0.423832364, 0, 0, 0, 0.113641827, 0.257250329, 0.629107844, 0, 0, 0.0846072448, 0.151836788, 0.318324165, 0.445231802, 0, 0.413528554, 0.222854136, 0.117202775, 0.097827596, 0.148586939 };
/* window0_padding_all_masked */
static const double ref_out_8[] = { 0.198669329, 0.997494996, 0, 0, -0.772764504, 0.404849917, 0, 0 };
static const double ref_w_8[] = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0 };
/* L1_S1_rope_alibi_window0 */
static const double ref_out_9[] = { 0.198669329, 0.997494996 };
static const double ref_w_9[] = { 1 };
/* L_gt_S_bottom_right_mqa_rope_alibi_window */
static const double ref_out_10[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0.198669329, 0.997494996, 0.334988147, -0.818277121, -0.530242134, 0.552806148, 0.825992115, -0.110902304, -0.878714561, -0.317667607, 0.708763106, 0.696854195, 0, 0, 0, 0, 0, 0, 0, 0, 0.198669329, 0.997494996, 0.334988147, -0.818277121, -0.553928525, 0.538355732, 0.841947567, -0.0879157584, -0.864406906, -0.220097752, 0.746655097, 0.619556467 };
static const double ref_w_10[] = { 0, 0, 0, 0, 0, 0, 1, 0, 0, 0.249654028, 0.750345972, 0, 0, 0.293717812, 0.706282188, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0.225271111, 0.774728889, 0, 0, 0.389095222, 0.610904778 };
/* L_lt_S_bottom_right_bigbird_block_gt_S */
static const double ref_out_11[] = { -0.149156119, 0.0333416064, 0.0620834918, 0.226261333, -0.016228514, -0.0254277969, 0.0351994049, 0.0727652252, -0.132171299, -0.00629968133, 0.121106234, 0.32355374 };
static const double ref_w_11[] = { 0.139198183, 0.205778083, 0.340476672, 0.160878314, 0.153668748, 0, 0.127185618, 0.149284143, 0.211096836, 0.152456921, 0.141289146, 0.218687336, 0.215673786, 0.177387241, 0.112233856, 0.222125249, 0.272579868, 0, 0.166944841, 0.176618566, 0.107596733, 0.163772729, 0.240290327, 0.144776804, 0.108324054, 0.145819455, 0.287518581, 0.231462564, 0.226875346, 0, 0.0811615857, 0.0856227011, 0.212147306, 0.183266558, 0.13221643, 0.305585419 };

/* ---- cases (the same list, in the same order, as the script's CASES) ----- */

typedef struct edge_case {
    const char *name;
    int64_t H, Hkv, L, S, dk;
    tfm_causal causal;
    int pad1, pad3;             /* key padding blocks keys 1 and 3 */
    void (*set)(tfm_attention_config *c);
    const double *out, *w;
} edge_case;

#define BIG INT64_MAX

static void c_sliding_big(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_SLIDING_WINDOW;
    c->window = BIG;
}
static void c_sliding_big_global_rope(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_SLIDING_WINDOW;
    c->window = BIG;
    c->n_global = BIG;
    c->rope = TFM_ROPE_HALF;
}
static void c_dilation_big_alibi(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_DILATED;
    c->window = 1;
    c->dilation = BIG;
    c->relative = TFM_RELATIVE_ALIBI;
    c->n_kv_heads = 1;
}
static void c_dilated_window_big(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_DILATED;
    c->window = BIG / 2;
    c->dilation = 2;
}
static void c_bigbird_big_t5_big(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_BIGBIRD;
    c->block_size = BIG;
    c->window = BIG;
    c->n_global = BIG;
    c->n_random_blocks = 4096;
    c->relative = TFM_RELATIVE_T5;
    c->num_buckets = 8;
    c->max_distance = BIG;
    c->bidirectional = 1;
}
static void c_bigbird_many_draws(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_BIGBIRD;
    c->block_size = 1;
    c->window = 0;
    c->n_random_blocks = 2;
    c->seed = 12345;
}
static void c_bigbird_big_window(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_BIGBIRD;
    c->block_size = 2;
    c->window = BIG;
}
static void c_window0(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_SLIDING_WINDOW;
    c->window = 0;
}
static void c_window0_rope_alibi(tfm_attention_config *c)
{
    c_window0(c);
    c->rope = TFM_ROPE_ADJACENT;
    c->relative = TFM_RELATIVE_ALIBI;
}
static void c_mqa_rope_alibi_window(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_SLIDING_WINDOW;
    c->window = 1;
    c->rope = TFM_ROPE_HALF;
    c->relative = TFM_RELATIVE_ALIBI;
    c->n_kv_heads = 1;
}
static void c_bigbird_block_gt_s(tfm_attention_config *c)
{
    c->sparsity = TFM_SPARSE_BIGBIRD;
    c->block_size = 10;
    c->n_random_blocks = 1;
    c->rope = TFM_ROPE_ADJACENT;
    c->relative = TFM_RELATIVE_ALIBI;
    c->n_kv_heads = 1;
}

#define NONE TFM_CAUSAL_NONE
#define TL TFM_CAUSAL_TOP_LEFT
#define BR TFM_CAUSAL_BOTTOM_RIGHT
static const edge_case CASES[] = {
    { "sliding_window_2^63-1", 2, 2, 3, 5, 4, NONE, 0, 0, c_sliding_big,
      ref_out_0, ref_w_0 },
    { "sliding_huge_global_rope_bottom_right", 2, 2, 3, 5, 4, BR, 0, 0,
      c_sliding_big_global_rope, ref_out_1, ref_w_1 },
    { "dilation_2^63-1_alibi", 2, 1, 4, 4, 2, NONE, 0, 0,
      c_dilation_big_alibi, ref_out_2, ref_w_2 },
    { "dilated_window_2^62", 1, 1, 5, 5, 2, NONE, 0, 0,
      c_dilated_window_big, ref_out_3, ref_w_3 },
    { "bigbird_huge_t5_huge", 2, 2, 4, 6, 2, NONE, 0, 0,
      c_bigbird_big_t5_big, ref_out_4, ref_w_4 },
    { "bigbird_many_draws", 1, 1, 7, 7, 2, NONE, 0, 0, c_bigbird_many_draws,
      ref_out_5, ref_w_5 },
    { "bigbird_many_draws_causal", 1, 1, 7, 7, 2, TL, 0, 0,
      c_bigbird_many_draws, ref_out_6, ref_w_6 },
    { "bigbird_huge_window_causal", 1, 1, 5, 5, 2, TL, 0, 0,
      c_bigbird_big_window, ref_out_7, ref_w_7 },
    { "window0_padding_all_masked", 1, 1, 4, 4, 2, NONE, 1, 1, c_window0,
      ref_out_8, ref_w_8 },
    { "L1_S1_rope_alibi_window0", 1, 1, 1, 1, 2, BR, 0, 0,
      c_window0_rope_alibi, ref_out_9, ref_w_9 },
    { "L_gt_S_bottom_right_mqa_rope_alibi_window", 2, 1, 5, 3, 4, BR, 0, 0,
      c_mqa_rope_alibi_window, ref_out_10, ref_w_10 },
    { "L_lt_S_bottom_right_bigbird_block_gt_S", 3, 1, 2, 6, 2, BR, 0, 0,
      c_bigbird_block_gt_s, ref_out_11, ref_w_11 },
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* The script's inputs: element i of a [heads, rows, dk] tensor is
 * fn(a + b * i) rounded to float. */
static tfm_tensor *input(int64_t heads, int64_t rows, int64_t dk, double a,
                         double b, double (*fn)(double))
{
    tfm_tensor *t = make4(1, heads, rows, dk, NULL);
    float *d = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        d[i] = (float)fn(a + b * (double)i);
    return t;
}

/* T5's relative_attention_bias.weight [nb, H]: 0.1 * (b * H + h) - 0.3. */
static void set_t5_bias(tfm_module *m, int64_t nb, int64_t H)
{
    tfm_tensor *t = make2(nb, H, NULL);
    float *d = tfm_tensor_data(t);
    for (int64_t i = 0; i < nb * H; i++)
        d[i] = (float)(0.1 * (double)i - 0.3);
    assert_int_equal(tfm_module_set_parameter(
                         m, "relative_attention_bias.weight", t),
                     TFM_OK);
    tfm_tensor_free(t);
}

static void run_case(const edge_case *e)
{
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    e->set(&c);
    tfm_module *m = NULL;
    if (tfm_attention_create(e->dk, e->dk, e->H, &c, &m) != TFM_OK)
        fail_msg("%s: create: %s", e->name, tfm_last_error());
    if (c.relative == TFM_RELATIVE_T5)
        set_t5_bias(m, c.num_buckets, e->H);
    tfm_tensor *q = input(e->H, e->L, e->dk, 1.0, 0.7, sin);
    tfm_tensor *k = input(e->Hkv, e->S, e->dk, 0.3, 0.45, cos);
    tfm_tensor *v = input(e->Hkv, e->S, e->dk, 0.2, 1.3, sin);
    tfm_tensor *pad = NULL;
    tfm_attention_masks masks = { .causal = e->causal };
    if (e->pad1) {
        pad = make2(1, e->S, NULL);
        tfm_tensor_data(pad)[1] = 1.0f;
        tfm_tensor_data(pad)[3] = 1.0f;
        masks.key_padding_mask = pad;
        masks.key_padding_kind = TFM_MASK_BLOCK;
    }
    for (int with_w = 0; with_w < 2; with_w++) {
        tfm_tensor *out = make4(1, e->H, e->L, e->dk, NULL);
        tfm_tensor *w = with_w ? make4(1, e->H, e->L, e->S, NULL) : NULL;
        fill(out, NAN);
        if (w)
            fill(w, NAN);
        tfm_status st = tfm_attention_forward(m, q, k, v, &masks, out, w);
        if (st != TFM_OK)
            fail_msg("%s: forward: %s", e->name, tfm_last_error());
        char what[128];
        snprintf(what, sizeof what, "%s out (weights %s)", e->name,
                 with_w ? "on" : "off");
        EXPECT_ARRAY(out, e->out, TOL, what);
        if (w) {
            snprintf(what, sizeof what, "%s weights", e->name);
            EXPECT_ARRAY(w, e->w, TOL, what);
        }
        FREE_TENSORS(out, w);
    }
    FREE_TENSORS(q, k, v, pad);
    tfm_module_free(m);
}

static void test_edge_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++)
        run_case(&CASES[i]);
}

/* n_random_blocks above 4096 is refused (it bounds the kernel's time), from
 * every entry point that takes a config; *out untouched. */
static void test_random_blocks_bound(void **state)
{
    (void)state;
    const int64_t bad[] = { 4097, 1000000000000LL, INT64_MAX };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tfm_attention_config c;
        tfm_attention_config_init(&c);
        c.sparsity = TFM_SPARSE_BIGBIRD;
        c.block_size = 1;
        c.n_random_blocks = bad[i];
        tfm_module *m = SENTINEL_MODULE;
        tfm_clear_error();
        assert_int_equal(tfm_attention_create(2, 2, 1, &c, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_ptr_equal(m, SENTINEL_MODULE);
        assert_non_null(strstr(tfm_last_error(), "n_random_blocks"));
        assert_int_equal(tfm_mha_create_ex(4, 2, 0, 0, 1, &c, &m),
                         TFM_ERR_INVALID_ARGUMENT);
        assert_ptr_equal(m, SENTINEL_MODULE);
    }
}

/* The most random blocks, on a long sequence of one-position blocks: the
 * ranges are bounded by the key blocks and sorted in n log n, so this
 * takes well under a second (10^7 draws on four tokens used to run for
 * minutes), and the result is every key the draws reach. */
static void test_many_random_blocks_fast(void **state)
{
    (void)state;
    const int64_t L = 300, dk = 4;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.sparsity = TFM_SPARSE_BIGBIRD;
    c.block_size = 1;
    c.n_random_blocks = 4096;
    c.seed = 7;
    tfm_module *m = NULL;
    assert_int_equal(tfm_attention_create(dk, dk, 1, &c, &m), TFM_OK);
    tfm_tensor *q = input(1, L, dk, 1.0, 0.7, sin);
    tfm_tensor *k = input(1, L, dk, 0.3, 0.45, cos);
    tfm_tensor *v = input(1, L, dk, 0.2, 1.3, sin);
    tfm_tensor *out = make4(1, 1, L, dk, NULL), *ref = make4(1, 1, L, dk, NULL);
    tfm_attention_masks masks = { .causal = TFM_CAUSAL_TOP_LEFT };
    clock_t t0 = clock();
    assert_int_equal(tfm_attention_forward(m, q, k, v, &masks, out, NULL),
                     TFM_OK);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    assert_int_equal(tfm_sdpa(q, k, v, &masks, 0.0f, ref, NULL), TFM_OK);
    /* With seed 7 the 4096 draws of every query block a reach all of its
     * a + 1 choices (counted with splitmix64 of
     * tests/variant_edge_values.py: 0 blocks missed), so the pattern is
     * plain causal attention. */
    EXPECT_CLOSE(out, ref, TOL, "4096 random blocks vs causal sdpa");
    if (secs > 20.0)
        fail_msg("4096 random blocks on %lld tokens took %.1f s",
                 (long long)L, secs);
    FREE_TENSORS(q, k, v, out, ref);
    tfm_module_free(m);
}

/* Shaw with a table far longer than the sequence (max_distance 1000,
 * 2001 rows, L = S = 2): the kernel computes q . r^K only for the rows the
 * run's distances reach.  Worked out by hand, score DOT (scale 1), H = 1,
 * d_k = d_v = 2, q = [[1, 0], [0, 1]], k = 0, v = [[1, 0], [0, 1]],
 * r^K(d) = [0.01 d, 0] and r^V(d) = [0, 0.001 d] (row c = d + 1000):
 *   query 0 (position 0): logits [q0 . r^K(0), q0 . r^K(1)] = [0, 0.01],
 *     weights [1, e^0.01] / (1 + e^0.01) = [0.4975000208, 0.5024999792],
 *     out = w v + w_01 r^V(1) = [0.4975000208, 0.5024999792 + 0.0005025].
 *   query 1: logits [q1 . r^K(-1), q1 . r^K(0)] = [0, 0], weights
 *     [0.5, 0.5], out = [0.5, 0.5] + 0.5 r^V(-1) = [0.5, 0.4995]. */
static void test_shaw_table_longer_than_sequence(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.score = TFM_SCORE_DOT;
    c.relative = TFM_RELATIVE_SHAW;
    c.max_distance = 1000;
    c.relative_values = 1;
    tfm_module *attn = NULL;
    assert_int_equal(tfm_attention_create(2, 2, 1, &c, &attn), TFM_OK);
    float *rk = calloc(2001 * 2, sizeof *rk), *rv = calloc(2001 * 2, sizeof *rv);
    assert_non_null(rk);
    assert_non_null(rv);
    for (int64_t row = 0; row < 2001; row++) {
        rk[row * 2] = 0.01f * (float)(row - 1000);
        rv[row * 2 + 1] = 0.001f * (float)(row - 1000);
    }
    set_param(attn, "relative_key.weight", 2, (const int64_t[]){ 2001, 2 }, rk);
    set_param(attn, "relative_value.weight", 2, (const int64_t[]){ 2001, 2 },
              rv);
    free(rk);
    free(rv);
    const float qv[] = { 1, 0, 0, 1 }, kv[] = { 0, 0, 0, 0 };
    tfm_tensor *q = make4(1, 1, 2, 2, qv), *k = make4(1, 1, 2, 2, kv);
    tfm_tensor *v = make4(1, 1, 2, 2, qv), *out = make4(1, 1, 2, 2, NULL);
    tfm_tensor *w = make4(1, 1, 2, 2, NULL);
    const double want[] = { 0.4975000208, 0.5024999792 + 0.0005024999792,
                            0.5, 0.4995 };
    for (int with_weights = 0; with_weights < 2; with_weights++) {
        assert_int_equal(tfm_attention_forward(attn, q, k, v, NULL, out,
                                               with_weights ? w : NULL),
                         TFM_OK);
        EXPECT_ARRAY(out, want, 1e-6, "Shaw output");
    }
    const double want_w[] = { 0.4975000208, 0.5024999792, 0.5, 0.5 };
    EXPECT_ARRAY(w, want_w, 1e-6, "Shaw weights");
    FREE_TENSORS(q, k, v, out, w);
    tfm_module_free(attn);
}

/* Messages that say what to do (found by trying the library as a new
 * user): RoPE with an odd d_k blamed a rope_dims of 0 the caller never
 * set; tfm_attention_get_config on a model gave only kind numbers. */
static void test_messages_point_to_the_fix(void **state)
{
    (void)state;
    tfm_attention_config c;
    tfm_attention_config_init(&c);
    c.rope = TFM_ROPE_HALF;
    tfm_module *m = SENTINEL_MODULE;
    assert_int_equal(tfm_attention_create(5, 5, 4, &c, &m),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(m, SENTINEL_MODULE);
    assert_non_null(strstr(tfm_last_error(), "d_k = 5 is odd"));
    c.rope_dims = 4; /* the fix the message suggests */
    assert_int_equal(tfm_attention_create(5, 5, 4, &c, &m), TFM_OK);
    tfm_module_free(m);

    tfm_model_config mc = tiny_model_config(TFM_ARCH_DECODER_ONLY,
                                            tfm_layer_config_default(8, 2),
                                            11, 1, 6);
    assert_int_equal(tfm_model_create(&mc, &m), TFM_OK);
    tfm_attention_config got;
    tfm_attention_config_init(&got);
    assert_int_equal(tfm_attention_get_config(m, &got), TFM_ERR_WRONG_KIND);
    assert_non_null(strstr(tfm_last_error(), "tfm_model_get_options"));
    tfm_module_free(m);
}

/* A dilated window without global tokens, relative terms or mask tensors
 * runs as one sliding window per class of positions mod dilation (the
 * kernel's strided split).  Reference: the same pattern written out from
 * its definition (variants.h: |p - j| <= window * dilation and dilation
 * divides p - j, positions p = i + S - L under bottom-right causality) as
 * a boolean attn_mask for plain tfm_sdpa, whose masked path the PyTorch
 * fixtures check.  Shapes cover L < S bottom-right (KV-cache-like
 * positions), L = S top-left and no causal mask, with more than one query
 * block and key tile per class. */
static void test_dilated_split_matches_mask(void **state)
{
    (void)state;
    static const struct {
        int64_t L, S, window, dilation;
        tfm_causal causal;
    } cases[] = {
        { 300, 700, 20, 3, TFM_CAUSAL_BOTTOM_RIGHT },
        { 1000, 1000, 8, 4, TFM_CAUSAL_TOP_LEFT },
        { 257, 300, 50, 2, TFM_CAUSAL_NONE },
        { 9, 9, 1, 9, TFM_CAUSAL_TOP_LEFT },
    };
    const int64_t H = 2, dk = 16;
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        const int64_t L = cases[n].L, S = cases[n].S;
        tfm_attention_config c;
        tfm_attention_config_init(&c);
        c.sparsity = TFM_SPARSE_DILATED;
        c.window = cases[n].window;
        c.dilation = cases[n].dilation;
        tfm_module *attn = NULL;
        assert_int_equal(tfm_attention_create(dk, dk, H, &c, &attn), TFM_OK);
        tfm_tensor *q = make4(1, H, L, dk, NULL), *k = make4(1, H, S, dk, NULL);
        tfm_tensor *v = make4(1, H, S, dk, NULL);
        tfm_tensor *out = make4(1, H, L, dk, NULL);
        tfm_tensor *ref = make4(1, H, L, dk, NULL);
        tfm_tensor *mask = make2(L, S, NULL);
        fill_random(q, 11 + (uint32_t)n);
        fill_random(k, 23 + (uint32_t)n);
        fill_random(v, 37 + (uint32_t)n);
        const int64_t shift =
            cases[n].causal == TFM_CAUSAL_BOTTOM_RIGHT ? S - L : 0;
        float *m = tfm_tensor_data(mask);
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < S; j++) {
                const int64_t p = i + shift, d = p > j ? p - j : j - p;
                int ok = d <= c.window * c.dilation && d % c.dilation == 0;
                if (cases[n].causal != TFM_CAUSAL_NONE && j > p)
                    ok = 0;
                m[i * S + j] = ok ? 1.0f : 0.0f;   /* ALLOW: 1 = visible */
            }
        tfm_attention_masks causal = { .causal = cases[n].causal };
        tfm_attention_masks allow = { .attn_mask = mask,
                                      .attn_mask_kind = TFM_MASK_ALLOW };
        assert_int_equal(tfm_attention_forward(attn, q, k, v, &causal, out,
                                               NULL),
                         TFM_OK);
        assert_int_equal(tfm_sdpa(q, k, v, &allow, 0.0f, ref, NULL), TFM_OK);
        EXPECT_CLOSE(out, ref, 1e-5, "dilated split vs explicit mask");
        FREE_TENSORS(q, k, v, out, ref, mask);
        tfm_module_free(attn);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_random_blocks_bound),
        cmocka_unit_test(test_many_random_blocks_fast),
        cmocka_unit_test(test_shaw_table_longer_than_sequence),
        cmocka_unit_test(test_messages_point_to_the_fix),
        cmocka_unit_test(test_dilated_split_matches_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
