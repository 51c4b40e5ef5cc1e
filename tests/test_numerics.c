/* Numerics under bad values: NaN and infinity in masked-out keys and values
 * never reach the outputs; NaN in visible inputs propagates to exactly the
 * outputs that see it (docs/TESTING.md, attention.h).
 *
 * Each check runs a call twice: once with ordinary finite values at the
 * positions under test, once with NaN or infinity there.  Outputs that
 * must not see those positions are compared bit for bit with the first
 * run; outputs that see them must be NaN (or non-finite), never a silently
 * finite number. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <transformer/transformer.h>

#include "test_util.h"

#define D 8
#define H 2
#define B 2
#define L 5

/* Sets row (b, i) of x [B, n, width] to v. */
static void set_row(tfm_tensor *x, int64_t b, int64_t i, float v)
{
    const int64_t n = tfm_tensor_dim(x, 1), w = tfm_tensor_dim(x, 2);
    float *r = tfm_tensor_data(x) + (b * n + i) * w;
    for (int64_t c = 0; c < w; c++)
        r[c] = v;
}

/* Row (b, i) of x [B, n, width]. */
static const float *row(const tfm_tensor *x, int64_t b, int64_t i)
{
    const int64_t n = tfm_tensor_dim(x, 1), w = tfm_tensor_dim(x, 2);
    return tfm_tensor_data_const(x) + (b * n + i) * w;
}

static int row_is_finite(const tfm_tensor *x, int64_t b, int64_t i)
{
    const float *r = row(x, b, i);
    for (int64_t c = 0; c < tfm_tensor_dim(x, 2); c++)
        if (!isfinite(r[c]))
            return 0;
    return 1;
}

static int row_is_all_nan(const tfm_tensor *x, int64_t b, int64_t i)
{
    const float *r = row(x, b, i);
    for (int64_t c = 0; c < tfm_tensor_dim(x, 2); c++)
        if (!isnan(r[c]))
            return 0;
    return 1;
}

static int row_has_nan(const tfm_tensor *x, int64_t b, int64_t i)
{
    const float *r = row(x, b, i);
    for (int64_t c = 0; c < tfm_tensor_dim(x, 2); c++)
        if (isnan(r[c]))
            return 1;
    return 0;
}

/* Rows (b, i) of a and b hold the same bits. */
static void assert_row_same(const tfm_tensor *x, const tfm_tensor *y,
                            int64_t b, int64_t i)
{
    if (memcmp(row(x, b, i), row(y, b, i),
               (size_t)tfm_tensor_dim(x, 2) * sizeof(float)) != 0)
        fail_msg("row (%lld, %lld) changed when masked-out inputs became "
                 "non-finite", (long long)b, (long long)i);
    if (!row_is_finite(x, b, i))
        fail_msg("row (%lld, %lld) is not finite", (long long)b,
                 (long long)i);
}

/* ---- multi-head attention and SDPA ------------------------------------ */

typedef struct mha_fixture {
    tfm_module *mha;
    tfm_tensor *q, *k, *v, *pad, *out_ref, *out;
} mha_fixture;

static void mha_fixture_init(mha_fixture *f)
{
    assert_int_equal(tfm_mha_create(D, H, 0, 0, 1, &f->mha), TFM_OK);
    lcg_randomize(f->mha, 1);
    lcg_seed(2);
    f->q = lcg_fill(make3(B, L, D, NULL));
    f->k = lcg_fill(make3(B, L, D, NULL));
    f->v = lcg_fill(make3(B, L, D, NULL));
    f->pad = make2(B, L, NULL);
    f->out_ref = make3(B, L, D, NULL);
    f->out = make3(B, L, D, NULL);
}

static void mha_fixture_free(mha_fixture *f)
{
    tfm_module_free(f->mha);
    tfm_tensor *all[] = { f->q, f->k, f->v, f->pad, f->out_ref, f->out };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tfm_tensor_free(all[i]);
}

/* Padding hides key 3 of sequence 1 (as BLOCK, ALLOW or ADDITIVE): NaN in
 * its key and infinity in its value change nothing. */
static void test_mha_padding_hides_non_finite(void **state)
{
    (void)state;
    static const tfm_mask_kind kinds[3] = { TFM_MASK_BLOCK, TFM_MASK_ALLOW,
                                            TFM_MASK_ADDITIVE };
    for (int kind = 0; kind < 3; kind++) {
        mha_fixture f;
        mha_fixture_init(&f);
        float *p = tfm_tensor_data(f.pad);
        for (int j = 0; j < B * L; j++) {
            int hidden = j == L + 3;
            p[j] = kind == 0   ? (float)hidden
                   : kind == 1 ? (float)!hidden
                               : (hidden ? -INFINITY : 0.0f);
        }
        tfm_attention_masks m = { .key_padding_mask = f.pad,
                                  .key_padding_kind = kinds[kind] };
        set_row(f.k, 1, 3, 3.0f);
        set_row(f.v, 1, 3, -2.0f);
        assert_int_equal(tfm_mha_forward(f.mha, f.q, f.k, f.v, &m, f.out_ref,
                                         NULL), TFM_OK);
        for (int bad = 0; bad < 3; bad++) {
            const float vals[3] = { NAN, INFINITY, -INFINITY };
            set_row(f.k, 1, 3, vals[bad]);
            set_row(f.v, 1, 3, vals[(bad + 1) % 3]);
            assert_int_equal(tfm_mha_forward(f.mha, f.q, f.k, f.v, &m, f.out,
                                             NULL), TFM_OK);
            for (int b = 0; b < B; b++)
                for (int i = 0; i < L; i++)
                    assert_row_same(f.out, f.out_ref, b, i);
        }
        mha_fixture_free(&f);
    }
}

/* attn_mask [L, S] hiding key 2 from queries 0 and 4, causal on top. */
static void test_mha_attn_mask_and_causal_hide_non_finite(void **state)
{
    (void)state;
    mha_fixture f;
    mha_fixture_init(&f);
    tfm_tensor *am = make2(L, L, NULL);
    tfm_tensor_data(am)[0 * L + 2] = 1.0f;
    tfm_tensor_data(am)[4 * L + 2] = 1.0f;
    tfm_attention_masks m = { .attn_mask = am,
                              .attn_mask_kind = TFM_MASK_BLOCK,
                              .causal = TFM_CAUSAL_TOP_LEFT };
    assert_int_equal(tfm_mha_forward(f.mha, f.q, f.k, f.v, &m, f.out_ref,
                                     NULL), TFM_OK);
    /* Key 2 NaN: hidden from queries 0 (causal and mask), 1 (causal) and 4
     * (mask); seen by queries 2 and 3, whose outputs become NaN. */
    set_row(f.k, 0, 2, NAN);
    set_row(f.v, 0, 2, INFINITY);
    /* Key 4 of sequence 1 infinite: only query 4 sees it. */
    set_row(f.v, 1, 4, -INFINITY);
    assert_int_equal(tfm_mha_forward(f.mha, f.q, f.k, f.v, &m, f.out, NULL),
                     TFM_OK);
    for (int i = 0; i < L; i++) {
        if (i == 2 || i == 3)
            assert_true(row_is_all_nan(f.out, 0, i));
        else
            assert_row_same(f.out, f.out_ref, 0, i);
        if (i == 4)
            assert_true(row_has_nan(f.out, 1, i));
        else
            assert_row_same(f.out, f.out_ref, 1, i);
    }
    tfm_tensor_free(am);
    mha_fixture_free(&f);
}

/* NaN in a visible query, key or value propagates to every output that
 * sees it, and no further. */
static void test_mha_visible_nan_propagates(void **state)
{
    (void)state;
    mha_fixture f;
    mha_fixture_init(&f);
    assert_int_equal(tfm_mha_forward(f.mha, f.q, f.k, f.v, NULL, f.out_ref,
                                     NULL), TFM_OK);
    /* A NaN in one query: only that query's row. */
    float *qe = &tfm_tensor_data(f.q)[(1 * L + 2) * D + 5];
    const float q_saved = *qe;
    *qe = NAN;
    assert_int_equal(tfm_mha_forward(f.mha, f.q, f.k, f.v, NULL, f.out, NULL),
                     TFM_OK);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            if (b == 1 && i == 2)
                assert_true(row_is_all_nan(f.out, b, i));
            else
                assert_row_same(f.out, f.out_ref, b, i);
        }
    *qe = q_saved;

    /* One NaN element in a value: every query of that sequence. */
    float *ve = &tfm_tensor_data(f.v)[(0 * L + 1) * D + 3];
    const float v_saved = *ve;
    *ve = NAN;
    assert_int_equal(tfm_mha_forward(f.mha, f.q, f.k, f.v, NULL, f.out, NULL),
                     TFM_OK);
    for (int i = 0; i < L; i++) {
        assert_true(row_is_all_nan(f.out, 0, i));
        assert_row_same(f.out, f.out_ref, 1, i);
    }
    *ve = v_saved;
    /* NaN in a key: likewise. */
    tfm_tensor_data(f.k)[(1 * L + 4) * D + 0] = NAN;
    assert_int_equal(tfm_mha_forward(f.mha, f.q, f.k, f.v, NULL, f.out, NULL),
                     TFM_OK);
    for (int i = 0; i < L; i++)
        assert_true(row_is_all_nan(f.out, 1, i));
    mha_fixture_free(&f);
}

/* Self-attention with one tensor as query, key and value (the fused
 * projection): a NaN in padded position 3 of sequence 0 stays in that
 * position's own row. */
static void test_mha_self_attention_padding(void **state)
{
    (void)state;
    mha_fixture f;
    mha_fixture_init(&f);
    tfm_tensor_data(f.pad)[3] = 1.0f;
    tfm_attention_masks m = { .key_padding_mask = f.pad };
    tfm_tensor *w = make4(B, H, L, L, NULL);
    assert_int_equal(tfm_mha_forward(f.mha, f.q, f.q, f.q, &m, f.out_ref,
                                     w), TFM_OK);
    set_row(f.q, 0, 3, NAN);
    assert_int_equal(tfm_mha_forward(f.mha, f.q, f.q, f.q, &m, f.out, w),
                     TFM_OK);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            if (b == 0 && i == 3)
                assert_true(row_is_all_nan(f.out, b, i));
            else
                assert_row_same(f.out, f.out_ref, b, i);
        }
    /* The weights on the padded key are exactly zero in every finite row. */
    for (int h = 0; h < H; h++)
        for (int i = 0; i < L; i++)
            if (i != 3)
                assert_true(tfm_tensor_data(w)[((0 * H + h) * L + i) * L + 3]
                            == 0.0f);
    tfm_tensor_free(w);
    mha_fixture_free(&f);
}

/* A query whose every key is masked gets zeros from SDPA (the MHA output
 * is then the output bias), never NaN, even over non-finite keys. */
static void test_fully_masked_rows_are_zero(void **state)
{
    (void)state;
    lcg_seed(9);
    tfm_tensor *q = lcg_fill(make4(1, 1, 3, 4, NULL));
    tfm_tensor *k = lcg_fill(make4(1, 1, 3, 4, NULL));
    tfm_tensor *v = lcg_fill(make4(1, 1, 3, 4, NULL));
    tfm_tensor *out = make4(1, 1, 3, 4, NULL);
    tfm_tensor *am = make2(3, 3, NULL);
    for (int j = 0; j < 3; j++)
        tfm_tensor_data(am)[1 * 3 + j] = 1.0f; /* query 1 sees nothing */
    tfm_tensor_data(k)[1 * 4 + 2] = NAN;
    tfm_tensor_data(v)[2 * 4 + 0] = INFINITY;
    tfm_attention_masks m = { .attn_mask = am };
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, NULL), TFM_OK);
    for (int c = 0; c < 4; c++)
        assert_true(tfm_tensor_data(out)[1 * 4 + c] == 0.0f);
    /* Queries 0 and 2 see key 1 (NaN) and 2 (inf): not hidden. */
    assert_true(isnan(tfm_tensor_data(out)[0]));
    tfm_tensor *all[] = { q, k, v, out, am };
    for (int i = 0; i < 5; i++)
        tfm_tensor_free(all[i]);
}

/* SDPA with bottom-right causal alignment: keys after each query's
 * position hold NaN and infinity and change nothing. */
static void test_sdpa_causal_future_non_finite(void **state)
{
    (void)state;
    lcg_seed(10);
    const int Lq = 3, S = 6, dk = 4;
    tfm_tensor *q = lcg_fill(make4(2, 2, Lq, dk, NULL));
    tfm_tensor *k = lcg_fill(make4(2, 2, S, dk, NULL));
    tfm_tensor *v = lcg_fill(make4(2, 2, S, dk, NULL));
    tfm_tensor *ref = make4(2, 2, Lq, dk, NULL);
    tfm_tensor *out = make4(2, 2, Lq, dk, NULL);
    tfm_attention_masks m = { .causal = TFM_CAUSAL_BOTTOM_RIGHT };
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, ref, NULL), TFM_OK);
    /* Query i is position S - Lq + i: the last key is seen by query 2
     * only, the others by every query. */
    for (int bh = 0; bh < 4; bh++)
        for (int c = 0; c < dk; c++) {
            tfm_tensor_data(k)[(bh * S + S - 1) * dk + c] = NAN;
            tfm_tensor_data(v)[(bh * S + S - 1) * dk + c] = -INFINITY;
        }
    assert_int_equal(tfm_sdpa(q, k, v, &m, 0.0f, out, NULL), TFM_OK);
    for (int bh = 0; bh < 4; bh++)
        for (int i = 0; i < Lq; i++)
            for (int c = 0; c < dk; c++) {
                float o = tfm_tensor_data(out)[(bh * Lq + i) * dk + c];
                float r = tfm_tensor_data(ref)[(bh * Lq + i) * dk + c];
                if (i == Lq - 1)
                    assert_true(isnan(o));
                else
                    assert_true(memcmp(&o, &r, sizeof o) == 0);
            }
    tfm_tensor *all[] = { q, k, v, ref, out };
    for (int i = 0; i < 5; i++)
        tfm_tensor_free(all[i]);
}

/* ---- encoder layer ------------------------------------------------------- */

/* A padded position holding NaN or infinity: only its own output row (which
 * is computed from its own input) is non-finite; every other row, and the
 * other sequence, are unchanged.  Without the mask the NaN reaches every
 * row of its sequence. */
static void test_encoder_layer(void **state)
{
    (void)state;
    for (int pre = 0; pre <= 1; pre++) {
        tfm_layer_config cfg = tfm_layer_config_default(D, H);
        cfg.d_ff = 16;
        cfg.norm_first = pre;
        tfm_module *layer = NULL;
        assert_int_equal(tfm_encoder_layer_create(&cfg, &layer), TFM_OK);
        lcg_randomize(layer, 20 + pre);
        lcg_seed(21);
        tfm_tensor *x = lcg_fill(make3(B, L, D, NULL));
        tfm_tensor *pad = make2(B, L, NULL);
        tfm_tensor *ref = make3(B, L, D, NULL), *out = make3(B, L, D, NULL);
        tfm_tensor_data(pad)[L + 1] = 1.0f;
        tfm_attention_masks m = { .key_padding_mask = pad };
        assert_int_equal(tfm_encoder_layer_forward(layer, x, &m, ref), TFM_OK);
        const float bad[2] = { NAN, INFINITY };
        for (int k = 0; k < 2; k++) {
            set_row(x, 1, 1, bad[k]);
            assert_int_equal(tfm_encoder_layer_forward(layer, x, &m, out),
                             TFM_OK);
            for (int b = 0; b < B; b++)
                for (int i = 0; i < L; i++) {
                    if (b == 1 && i == 1)
                        assert_false(row_is_finite(out, b, i));
                    else
                        assert_row_same(out, ref, b, i);
                }
        }
        /* Causal: a NaN at the last position reaches only the last row. */
        tfm_attention_masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
        tfm_tensor *x2 = clone(x);
        set_row(x2, 1, 1, 0.5f);
        assert_int_equal(tfm_encoder_layer_forward(layer, x2, &causal, ref),
                         TFM_OK);
        set_row(x2, 0, L - 1, NAN);
        assert_int_equal(tfm_encoder_layer_forward(layer, x2, &causal, out),
                         TFM_OK);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < L; i++) {
                if (b == 0 && i == L - 1)
                    assert_true(row_is_all_nan(out, b, i));
                else
                    assert_row_same(out, ref, b, i);
            }
        /* No mask: the NaN is visible to every position of sequence 0. */
        assert_int_equal(tfm_encoder_layer_forward(layer, x2, NULL, out),
                         TFM_OK);
        for (int i = 0; i < L; i++) {
            assert_true(row_is_all_nan(out, 0, i));
            assert_true(row_is_finite(out, 1, i));
        }
        tfm_tensor *all[] = { x, x2, pad, ref, out };
        for (int i = 0; i < 5; i++)
            tfm_tensor_free(all[i]);
        tfm_module_free(layer);
    }
}

/* Decoder layer and cross-attention block: memory positions hidden by the
 * memory padding mask may hold NaN and infinity; target positions after a
 * causal query may hold NaN.  Neither reaches the other outputs. */
static void test_decoder_layer_and_cross_attention(void **state)
{
    (void)state;
    tfm_layer_config cfg = tfm_layer_config_default(D, H);
    cfg.d_ff = 16;
    tfm_module *dec = NULL, *cross = NULL;
    assert_int_equal(tfm_decoder_layer_create(&cfg, &dec), TFM_OK);
    assert_int_equal(tfm_cross_attention_create(&cfg, &cross), TFM_OK);
    lcg_randomize(dec, 40);
    lcg_randomize(cross, 41);
    lcg_seed(42);
    const int S = 6;
    tfm_tensor *tgt = lcg_fill(make3(B, L, D, NULL));
    tfm_tensor *mem = lcg_fill(make3(B, S, D, NULL));
    tfm_tensor *pad = make2(B, S, NULL);
    tfm_tensor_data(pad)[S + 2] = 1.0f;      /* memory 2 of sequence 1 */
    tfm_attention_masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
    tfm_attention_masks mm = { .key_padding_mask = pad };
    tfm_tensor *ref_d = make3(B, L, D, NULL), *out_d = make3(B, L, D, NULL);
    tfm_tensor *ref_c = make3(B, L, D, NULL), *out_c = make3(B, L, D, NULL);
    assert_int_equal(tfm_decoder_layer_forward(dec, tgt, mem, &causal, &mm,
                                               ref_d), TFM_OK);
    assert_int_equal(tfm_cross_attention_forward(cross, tgt, mem, &mm, ref_c),
                     TFM_OK);
    set_row(mem, 1, 2, NAN);
    tfm_tensor_data(mem)[(1 * S + 2) * D] = INFINITY;
    set_row(tgt, 0, L - 1, NAN);             /* last target position */
    assert_int_equal(tfm_decoder_layer_forward(dec, tgt, mem, &causal, &mm,
                                               out_d), TFM_OK);
    assert_int_equal(tfm_cross_attention_forward(cross, tgt, mem, &mm, out_c),
                     TFM_OK);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            if (b == 0 && i == L - 1) {
                assert_true(row_is_all_nan(out_d, b, i));
                assert_true(row_is_all_nan(out_c, b, i));
                continue;
            }
            assert_row_same(out_d, ref_d, b, i);
            assert_row_same(out_c, ref_c, b, i);
        }
    /* Without the memory mask the NaN memory row reaches every target
     * position of sequence 1. */
    assert_int_equal(tfm_cross_attention_forward(cross, tgt, mem, NULL, out_c),
                     TFM_OK);
    for (int i = 0; i < L; i++)
        assert_true(row_is_all_nan(out_c, 1, i));
    tfm_tensor *all[] = { tgt, mem, pad, ref_d, out_d, ref_c, out_c };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tfm_tensor_free(all[i]);
    tfm_module_free(dec);
    tfm_module_free(cross);
}

/* ---- whole models ------------------------------------------------------ */

#define V 13
#define BAD_TOKEN 7

/* A decoder-only model whose token BAD_TOKEN has a huge (finite) embedding:
 * its attention logits overflow to infinity, so its own position's output
 * is NaN.  Parameters must be finite (tfm_module_set_parameter refuses
 * others), so this is the only way a non-finite value enters a model. */
static tfm_module *model_with_bad_token_ex(tfm_architecture arch,
                                           const tfm_model_options *opt)
{
    tfm_layer_config layer = tfm_layer_config_default(D, H);
    layer.d_ff = 16;
    tfm_model_config c = tiny_model_config(arch, layer, V, 2, 8);
    c.tied_embeddings = 0;
    tfm_module *m = NULL;
    assert_int_equal(tfm_model_create_ex(&c, opt, &m), TFM_OK);
    lcg_randomize(m, 30);
    tfm_tensor *emb = make2(V, D, NULL);
    assert_int_equal(tfm_module_get_parameter(m, "token_embedding.weight",
                                              emb), TFM_OK);
    for (int c2 = 0; c2 < D; c2++)
        tfm_tensor_data(emb)[BAD_TOKEN * D + c2] = c2 % 2 ? 1e30f : -1e30f;
    assert_int_equal(tfm_module_set_parameter(m, "token_embedding.weight",
                                              emb), TFM_OK);
    tfm_tensor_free(emb);
    return m;
}

static tfm_module *model_with_bad_token(tfm_architecture arch)
{
    return model_with_bad_token_ex(arch, NULL);
}

/* Causal masking: the positions before the bad token get exactly the
 * logits they get with an ordinary token in its place; the bad token's own
 * position is NaN.  KV-cache decoding agrees, and greedy generation refuses
 * the NaN logits (TFM_ERR_NON_FINITE) rather than pick a token from them. */
static void test_decoder_model_causal(void **state)
{
    (void)state;
    tfm_module *m = model_with_bad_token(TFM_ARCH_DECODER_ONLY);
    const int32_t ids[6] = { 1, 4, 9, BAD_TOKEN, 2, 3 };
    const int32_t good[6] = { 1, 4, 9, 5, 2, 3 };
    tfm_tensor *full = make3(1, 6, V, NULL), *ref = make3(1, 6, V, NULL);
    assert_int_equal(tfm_model_logits(m, good, 1, 6, ref), TFM_OK);
    assert_int_equal(tfm_model_logits(m, ids, 1, 6, full), TFM_OK);
    for (int i = 0; i < 3; i++)
        assert_row_same(full, ref, 0, i);
    assert_true(row_is_all_nan(full, 0, 3));

    /* The KV cache: the prefix one token at a time, then the bad token. */
    tfm_kv_cache *cache = NULL;
    tfm_tensor *one = make2(1, V, NULL);
    assert_int_equal(tfm_kv_cache_create(m, 8, &cache), TFM_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tfm_kv_cache_decode(cache, ids + i, 1, one), TFM_OK);
        for (int j = 0; j < V; j++)
            assert_true(i < 3 ? isfinite(tfm_tensor_data(one)[j])
                              : isnan(tfm_tensor_data(one)[j]));
    }

    /* Generation: the prompt ends with the bad token. */
    int32_t out[2] = { -1, -1 };
    assert_int_equal(tfm_model_generate(m, ids, 4, 2, NULL, 0, out),
                     TFM_ERR_NON_FINITE);
    assert_int_equal(out[0], -1);
    assert_int_equal(tfm_model_generate(m, ids, 3, 2, NULL, 0, out), TFM_OK);
    tfm_kv_cache_free(cache);
    tfm_tensor_free(full);
    tfm_tensor_free(ref);
    tfm_tensor_free(one);
    tfm_module_free(m);
}

/* A NaN value row that a sliding window hides: the KV cache keeps the
 * bad token's rows (layer 1's value row is NaN: its layer-0 output is), and
 * once the window has moved past them every later position is finite
 * again, in the cached steps as in the full pass.  The cache counts the
 * non-finite value rows it is given (kv_cache.c) so that attention scans
 * for them only while some are held: a count that missed this row would
 * let a masked NaN into the product of weights and values (0 x NaN), as
 * the one-call prefill below shows (row 0 turned NaN when the count was
 * ignored).  Then the cache, reset, decodes an ordinary sequence with no
 * scan needed. */
static void test_cached_window_hides_non_finite_value(void **state)
{
    (void)state;
    enum { T = 8 }; /* the context of model_with_bad_token_ex */
    tfm_model_options opt;
    tfm_model_options_init(&opt);
    opt.attention.sparsity = TFM_SPARSE_SLIDING_WINDOW;
    opt.attention.window = 1;
    tfm_module *m = model_with_bad_token_ex(TFM_ARCH_DECODER_ONLY, &opt);

    const int32_t ids[T] = { 1, BAD_TOKEN, 4, 9, 2, 3, 5, 6 };
    const int32_t good[T] = { 1, 8, 4, 9, 2, 3, 5, 6 };
    tfm_tensor *full = make3(1, T, V, NULL), *ref = make3(1, T, V, NULL);
    assert_int_equal(tfm_model_logits(m, ids, 1, T, full), TFM_OK);
    assert_int_equal(tfm_model_logits(m, good, 1, T, ref), TFM_OK);
    /* Window 1 (position p sees p-1 and p), two layers: the bad token's
     * own layer-0 output is NaN (its logits overflow), which layer 1's
     * value row 1 then holds; position 2 sees it in layer 1, positions 3
     * on see only rows 2 and up, whose layer-0 outputs are finite. */
    assert_true(row_is_finite(full, 0, 0));
    for (int i = 1; i <= 2; i++)
        assert_true(row_is_all_nan(full, 0, i));
    for (int i = 3; i < T; i++)
        assert_true(row_is_finite(full, 0, i));

    tfm_kv_cache *cache = NULL;
    tfm_tensor *one = make2(1, V, NULL);
    assert_int_equal(tfm_kv_cache_create(m, T, &cache), TFM_OK);
    const float *fd = tfm_tensor_data_const(full);
    const float *rd = tfm_tensor_data_const(ref);
    for (int i = 0; i < T; i++) {
        assert_int_equal(tfm_kv_cache_decode(cache, ids + i, 1, one), TFM_OK);
        const float *o = tfm_tensor_data_const(one);
        for (int j = 0; j < V; j++) {
            const float want = fd[i * V + j];
            if (isnan(want))
                assert_true(isnan(o[j]));
            else if (!(fabsf(o[j] - want) <= 1e-4f * (1.0f + fabsf(want))))
                fail_msg("position %d logit %d: %g, full pass %g", i, j,
                         (double)o[j], (double)want);
        }
    }
    /* The same positions as one prefill call: its rows are attended in
     * tiles that also hold the keys a causal mask hides (row 0 must not
     * pick up row 1's NaN value through a zero weight). */
    tfm_kv_cache_reset(cache);
    tfm_tensor *all = make2(T, V, NULL);
    assert_int_equal(tfm_kv_cache_decode(cache, ids, T, all), TFM_OK);
    const float *ad = tfm_tensor_data_const(all);
    for (int i = 0; i < T * V; i++)
        if (isnan(fd[i]) ? !isnan(ad[i])
                         : !(fabsf(ad[i] - fd[i]) <= 1e-4f * (1.0f + fabsf(fd[i]))))
            fail_msg("prefill, position %d logit %d: %g, full pass %g",
                     i / V, i % V, (double)ad[i], (double)fd[i]);
    tfm_tensor_free(all);

    tfm_kv_cache_reset(cache);
    for (int i = 0; i < T; i++) {
        assert_int_equal(tfm_kv_cache_decode(cache, good + i, 1, one),
                         TFM_OK);
        const float *o = tfm_tensor_data_const(one);
        for (int j = 0; j < V; j++)
            if (!(fabsf(o[j] - rd[i * V + j]) <=
                  1e-4f * (1.0f + fabsf(rd[i * V + j]))))
                fail_msg("after reset, position %d logit %d: %g, full pass "
                         "%g", i, j, (double)o[j], (double)rd[i * V + j]);
    }
    tfm_kv_cache_free(cache);
    tfm_tensor_free(full);
    tfm_tensor_free(ref);
    tfm_tensor_free(one);
    tfm_module_free(m);
}

/* Encoder-only models attend both ways: the bad token's NaN reaches every
 * position of its sequence, and the other sequence of the batch is
 * untouched. */
static void test_encoder_model_bidirectional(void **state)
{
    (void)state;
    tfm_module *m = model_with_bad_token(TFM_ARCH_ENCODER_ONLY);
    const int32_t ids[8] = { 1, 4, BAD_TOKEN, 2, 5, 6, 0, 12 };
    const int32_t good[8] = { 1, 4, 3, 2, 5, 6, 0, 12 };
    tfm_tensor *out = make3(2, 4, V, NULL), *ref = make3(2, 4, V, NULL);
    assert_int_equal(tfm_model_logits(m, good, 2, 4, ref), TFM_OK);
    assert_int_equal(tfm_model_logits(m, ids, 2, 4, out), TFM_OK);
    for (int i = 0; i < 4; i++) {
        assert_true(row_has_nan(out, 0, i));
        assert_row_same(out, ref, 1, i);
    }
    tfm_tensor_free(out);
    tfm_tensor_free(ref);
    tfm_module_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mha_padding_hides_non_finite),
        cmocka_unit_test(test_mha_attn_mask_and_causal_hide_non_finite),
        cmocka_unit_test(test_mha_visible_nan_propagates),
        cmocka_unit_test(test_mha_self_attention_padding),
        cmocka_unit_test(test_fully_masked_rows_are_zero),
        cmocka_unit_test(test_sdpa_causal_future_non_finite),
        cmocka_unit_test(test_encoder_layer),
        cmocka_unit_test(test_decoder_layer_and_cross_attention),
        cmocka_unit_test(test_decoder_model_causal),
        cmocka_unit_test(test_cached_window_hides_non_finite_value),
        cmocka_unit_test(test_encoder_model_bidirectional),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
