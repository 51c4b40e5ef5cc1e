/*
 * The backward of scaled dot-product attention (attention.h:
 * tfm_sdpa_lse, tfm_sdpa_backward) against references from outside the
 * library, made by tools/make_attention_grad_fixtures.py:
 *   - torch.autograd in float32 of PyTorch's math attention, every mask
 *     kind (causal top-left and bottom-right, key padding and attn masks
 *     as BLOCK, ALLOW and ADDITIVE, rows whose keys are all masked), shapes
 *     that cross the 128-key tiles and the key chunks;
 *   - float64 central finite differences on tiny shapes.
 * Tolerance: |ours - ref| <= 1e-4 * max|ref| per tensor (relative to the
 * tensor's scale, so that entries near 0 are not held to a relative 1e-4
 * of themselves).  Also: out and lse of tfm_sdpa_lse equal tfm_sdpa's out
 * bit for bit and the reference's lse; the gradients are the same bits at
 * 1 and 3 threads, and with out/lse passed or recomputed; fully masked
 * rows give zeros; errors leave the gradients untouched.
 *
 * Usage: test_attention_backward [FIXTURE_FILE] (default: the committed
 * tests/fixtures/attention_grad_small.bin).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include <transformer/attention.h>
#include <transformer/tensor.h>

#include "test_util.h"

static const char *g_path;

typedef struct gcase {
    int B, H, L, S, dk, dv, causal, kp_kind, am_kind, am_rank, is_fd;
    float scale;
    tfm_tensor *q, *k, *v, *kp, *am, *dout, *out, *lse, *dq, *dk_, *dv_;
} gcase;

static tfm_tensor *read_tensor(FILE *f, int rank, const int64_t *shape)
{
    tfm_tensor *t = make(rank, shape, NULL);
    size_t n = (size_t)tfm_tensor_numel(t);
    assert_int_equal(fread(tfm_tensor_data(t), sizeof(float), n, f), n);
    return t;
}

static int read_case(FILE *f, gcase *c)
{
    int32_t h[11];
    if (fread(h, sizeof h, 1, f) != 1)
        return 0;
    c->B = h[0], c->H = h[1], c->L = h[2], c->S = h[3], c->dk = h[4];
    c->dv = h[5], c->causal = h[6], c->kp_kind = h[7], c->am_kind = h[8];
    c->am_rank = h[9], c->is_fd = h[10];
    assert_int_equal(fread(&c->scale, sizeof(float), 1, f), 1);
    const int64_t B = c->B, H = c->H, L = c->L, S = c->S;
    c->q = read_tensor(f, 4, (int64_t[]){ B, H, L, c->dk });
    c->k = read_tensor(f, 4, (int64_t[]){ B, H, S, c->dk });
    c->v = read_tensor(f, 4, (int64_t[]){ B, H, S, c->dv });
    c->kp = c->kp_kind >= 0 ? read_tensor(f, 2, (int64_t[]){ B, S }) : NULL;
    c->am = NULL;
    if (c->am_kind >= 0) {
        const int64_t s2[] = { L, S }, s3[] = { B, L, S },
                      s4[] = { B, H, L, S };
        c->am = read_tensor(f, c->am_rank,
                            c->am_rank == 2 ? s2 : c->am_rank == 3 ? s3 : s4);
    }
    c->dout = read_tensor(f, 4, (int64_t[]){ B, H, L, c->dv });
    c->out = read_tensor(f, 4, (int64_t[]){ B, H, L, c->dv });
    c->lse = read_tensor(f, 3, (int64_t[]){ B, H, L });
    c->dq = read_tensor(f, 4, (int64_t[]){ B, H, L, c->dk });
    c->dk_ = read_tensor(f, 4, (int64_t[]){ B, H, S, c->dk });
    c->dv_ = read_tensor(f, 4, (int64_t[]){ B, H, S, c->dv });
    return 1;
}

static void free_case(gcase *c)
{
    FREE_TENSORS(c->q, c->k, c->v, c->kp, c->am, c->dout, c->out, c->lse,
                 c->dq, c->dk_, c->dv_);
}

static tfm_attention_masks masks_of(const gcase *c)
{
    tfm_attention_masks m = { .causal = (tfm_causal)c->causal };
    if (c->kp) {
        m.key_padding_mask = c->kp;
        m.key_padding_kind = (tfm_mask_kind)c->kp_kind;
    }
    if (c->am) {
        m.attn_mask = c->am;
        m.attn_mask_kind = (tfm_mask_kind)c->am_kind;
    }
    return m;
}

/* max |got - want| / max(max |want|, 1e-3) over the elements; -inf in
 * want must be -inf in got. */
static double scaled_err(const tfm_tensor *got, const tfm_tensor *want)
{
    const float *g = tfm_tensor_data_const(got), *w = tfm_tensor_data_const(want);
    const int64_t n = tfm_tensor_numel(want);
    double scale = 1e-3, err = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(w[i]) && fabs(w[i]) > scale)
            scale = fabs(w[i]);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(w[i])) {
            if (!(g[i] == w[i]))
                return INFINITY;
            continue;
        }
        double e = fabs((double)g[i] - w[i]);
        if (!(e <= err))
            err = e != e ? INFINITY : e;
    }
    return err / scale;
}

static int same_bits(const tfm_tensor *a, const tfm_tensor *b)
{
    return memcmp(tfm_tensor_data_const(a), tfm_tensor_data_const(b),
                  (size_t)tfm_tensor_numel(a) * sizeof(float)) == 0;
}

static double g_max_err[2];   /* torch, finite differences */

static void check_case(const gcase *c, int index)
{
    const tfm_attention_masks m = masks_of(c);
    const int64_t B = c->B, H = c->H, L = c->L, S = c->S;
    tfm_tensor *out = make4(B, H, L, c->dv, NULL);
    tfm_tensor *out0 = make4(B, H, L, c->dv, NULL);
    tfm_tensor *lse = make3(B, H, L, NULL);
    tfm_tensor *dq = make4(B, H, L, c->dk, NULL);
    tfm_tensor *dk = make4(B, H, S, c->dk, NULL);
    tfm_tensor *dv = make4(B, H, S, c->dv, NULL);
    tfm_tensor *dq2 = make4(B, H, L, c->dk, NULL);
    tfm_tensor *dk2 = make4(B, H, S, c->dk, NULL);
    tfm_tensor *dv2 = make4(B, H, S, c->dv, NULL);

    assert_int_equal(tfm_sdpa(c->q, c->k, c->v, &m, c->scale, out0, NULL),
                     TFM_OK);
    assert_int_equal(tfm_sdpa_lse(c->q, c->k, c->v, &m, c->scale, out, lse),
                     TFM_OK);
    /* The training forward's output is the evaluation forward's. */
    assert_true(same_bits(out, out0));
    fill(dq, 7.0f), fill(dk, 7.0f), fill(dv, 7.0f); /* overwritten */
    tfm_set_num_threads(1);
    assert_int_equal(tfm_sdpa_backward(c->q, c->k, c->v, &m, c->scale, out,
                                       lse, c->dout, dq, dk, dv),
                     TFM_OK);
    const double e[5] = { scaled_err(out, c->out), scaled_err(lse, c->lse),
                          scaled_err(dq, c->dq), scaled_err(dk, c->dk_),
                          scaled_err(dv, c->dv_) };
    double worst = 0.0;
    for (int i = 0; i < 5; i++)
        worst = e[i] > worst ? e[i] : worst;
    if (worst > g_max_err[c->is_fd])
        g_max_err[c->is_fd] = worst;
    if (getenv("TFM_GRAD_VERBOSE"))
        printf("case %d: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", index, e[0], e[1], e[2], e[3], e[4]);
    if (worst > 1e-4)
        fail_msg("case %d (%s, B%d H%d L%d S%d dk%d dv%d causal %d kp %d "
                 "am %d/%d): errors out %.2e lse %.2e dq %.2e dk %.2e dv "
                 "%.2e",
                 index, c->is_fd ? "finite differences" : "torch", c->B, c->H,
                 c->L, c->S, c->dk, c->dv, c->causal, c->kp_kind, c->am_kind,
                 c->am_rank, e[0], e[1], e[2], e[3], e[4]);

    /* The same bits at 3 threads, and with out and lse recomputed. */
    tfm_set_num_threads(3);
    assert_int_equal(tfm_sdpa_backward(c->q, c->k, c->v, &m, c->scale, NULL,
                                       NULL, c->dout, dq2, dk2, dv2),
                     TFM_OK);
    assert_true(same_bits(dq, dq2));
    assert_true(same_bits(dk, dk2));
    assert_true(same_bits(dv, dv2));
    /* One gradient at a time: the same bits as all three. */
    fill(dk2, 7.0f);
    assert_int_equal(tfm_sdpa_backward(c->q, c->k, c->v, &m, c->scale, out,
                                       lse, c->dout, NULL, dk2, NULL),
                     TFM_OK);
    assert_true(same_bits(dk, dk2));
    tfm_set_num_threads(0);
    FREE_TENSORS(out, out0, lse, dq, dk, dv, dq2, dk2, dv2);
}

static void test_reference_cases(void **state)
{
    (void)state;
    FILE *f = fopen(g_path, "rb");
    if (!f)
        fail_msg("cannot open %s", g_path);
    int32_t n = 0;
    assert_int_equal(fread(&n, sizeof n, 1, f), 1);
    assert_true(n > 0);
    int fd_cases = 0;
    for (int i = 0; i < n; i++) {
        gcase c;
        assert_true(read_case(f, &c));
        fd_cases += c.is_fd;
        check_case(&c, i);
        free_case(&c);
    }
    fclose(f);
    assert_true(fd_cases > 0);
    printf("attention backward: %d cases, max scaled error vs torch %.2e, "
           "vs float64 finite differences %.2e\n",
           n, g_max_err[0], g_max_err[1]);
}

/* Hand-worked: one query, two keys, d = 1, scale 1, q = 0: the weights
 * are 1/2 each, out = (v0 + v1) / 2; with dO = 1: dv = (1/2, 1/2), D =
 * out, dS_j = (v_j - out) / 2, dq = sum_j dS_j k_j, dk_j = dS_j q = 0.
 * v = (1, 3), k = (1, -1): out = 2, dS = (-1/2, 1/2), dq = -1. */
static void test_hand_worked(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 1, 1, 1, (const float[]){ 0.0f });
    tfm_tensor *k = make4(1, 1, 2, 1, (const float[]){ 1.0f, -1.0f });
    tfm_tensor *v = make4(1, 1, 2, 1, (const float[]){ 1.0f, 3.0f });
    tfm_tensor *dout = make4(1, 1, 1, 1, (const float[]){ 1.0f });
    tfm_tensor *dq = make4(1, 1, 1, 1, NULL), *dk = make4(1, 1, 2, 1, NULL),
               *dv = make4(1, 1, 2, 1, NULL);
    assert_int_equal(tfm_sdpa_backward(q, k, v, NULL, 1.0f, NULL, NULL, dout,
                                       dq, dk, dv),
                     TFM_OK);
    assert_float_equal(tfm_tensor_data(dq)[0], -1.0f, 1e-6);
    assert_float_equal(tfm_tensor_data(dk)[0], 0.0f, 1e-6);
    assert_float_equal(tfm_tensor_data(dk)[1], 0.0f, 1e-6);
    assert_float_equal(tfm_tensor_data(dv)[0], 0.5f, 1e-6);
    assert_float_equal(tfm_tensor_data(dv)[1], 0.5f, 1e-6);
    FREE_TENSORS(q, k, v, dout, dq, dk, dv);
}

/* A row whose keys are all masked: zero gradients (not NaN), and a masked
 * key's NaN value and key reach no gradient of the other rows. */
static void test_fully_masked_and_nan(void **state)
{
    (void)state;
    const int64_t L = 3, S = 4, d = 2;
    tfm_tensor *q = make4(1, 1, L, d, NULL), *k = make4(1, 1, S, d, NULL),
               *v = make4(1, 1, S, d, NULL), *dout = make4(1, 1, L, d, NULL);
    fill_random(q, 1), fill_random(k, 2), fill_random(v, 3);
    fill_random(dout, 4);
    tfm_tensor_data(v)[3 * d] = NAN;    /* key 3's value: masked for all */
    /* attn mask (BLOCK): row 1 sees nothing; key 3 hidden everywhere */
    tfm_tensor *am = make2(L, S, (const float[]){ 0, 0, 0, 1,   //
                                                  1, 1, 1, 1,   //
                                                  0, 1, 0, 1 });
    tfm_attention_masks m = { .attn_mask = am,
                              .attn_mask_kind = TFM_MASK_BLOCK };
    tfm_tensor *dq = make4(1, 1, L, d, NULL), *dk = make4(1, 1, S, d, NULL),
               *dv = make4(1, 1, S, d, NULL);
    assert_int_equal(tfm_sdpa_backward(q, k, v, &m, 0.0f, NULL, NULL, dout,
                                       dq, dk, dv),
                     TFM_OK);
    for (int64_t i = 0; i < L * d; i++)
        assert_true(isfinite(tfm_tensor_data(dq)[i]));
    for (int64_t i = 0; i < S * d; i++) {
        assert_true(isfinite(tfm_tensor_data(dk)[i]));
        assert_true(isfinite(tfm_tensor_data(dv)[i]));
    }
    assert_true(tfm_tensor_data(dq)[1 * d] == 0.0f &&
                tfm_tensor_data(dq)[1 * d + 1] == 0.0f);
    assert_true(tfm_tensor_data(dv)[3 * d] == 0.0f &&
                tfm_tensor_data(dk)[3 * d] == 0.0f);
    FREE_TENSORS(q, k, v, dout, am, dq, dk, dv);
}

/* Errors: the status, and no gradient written. */
static void test_errors(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 2, 3, 4, NULL), *k = make4(1, 2, 5, 4, NULL),
               *v = make4(1, 2, 5, 3, NULL), *dout = make4(1, 2, 3, 3, NULL),
               *out = make4(1, 2, 3, 3, NULL), *lse = make3(1, 2, 3, NULL),
               *dq = make4(1, 2, 3, 4, NULL), *bad = make4(1, 2, 3, 5, NULL);
    fill_random(q, 5), fill_random(k, 6), fill_random(v, 7);
    fill_random(dout, 8);
    fill(dq, 9.0f);
    assert_int_equal(tfm_sdpa_backward(NULL, k, v, NULL, 0, NULL, NULL, dout,
                                       dq, NULL, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_sdpa_backward(q, k, v, NULL, 0, out, NULL, dout, dq,
                                       NULL, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_sdpa_backward(q, k, v, NULL, 0, NULL, NULL, dout,
                                       bad, NULL, NULL),
                     TFM_ERR_SHAPE);
    assert_int_equal(tfm_sdpa_backward(q, k, v, NULL, NAN, NULL, NULL, dout,
                                       dq, NULL, NULL),
                     TFM_ERR_INVALID_ARGUMENT);
    tfm_tensor_data(dout)[4] = INFINITY;
    assert_int_equal(tfm_sdpa_backward(q, k, v, NULL, 0, NULL, NULL, dout,
                                       dq, NULL, NULL),
                     TFM_ERR_NON_FINITE);
    assert_non_null(strstr(tfm_last_error(), "grad_out"));
    for (int64_t i = 0; i < tfm_tensor_numel(dq); i++)
        assert_true(tfm_tensor_data(dq)[i] == 9.0f);
    assert_int_equal(tfm_sdpa_lse(q, k, v, NULL, 0, out, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_sdpa_lse(q, k, v, NULL, 0, out, dq), TFM_ERR_SHAPE);
    FREE_TENSORS(q, k, v, dout, out, lse, dq, bad);
}

/* Out of memory at every allocation of the backward: the status, and the
 * gradients untouched. */
static void test_oom(void **state)
{
    (void)state;
    tfm_tensor *q = make4(1, 1, 200, 8, NULL), *k = make4(1, 1, 300, 8, NULL),
               *v = make4(1, 1, 300, 8, NULL), *dout = make4(1, 1, 200, 8, NULL),
               *dq = make4(1, 1, 200, 8, NULL);
    fill_random(q, 11), fill_random(k, 12), fill_random(v, 13);
    fill_random(dout, 14);
    int failures = 0;
    for (long n = 1; n < 40; n++) {
        fill(dq, 5.0f);
        tfm_testing_fail_allocation(n);
        tfm_status st = tfm_sdpa_backward(q, k, v, NULL, 0, NULL, NULL, dout,
                                          dq, NULL, NULL);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK)
            break;
        assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
        failures++;
        for (int64_t i = 0; i < tfm_tensor_numel(dq); i++)
            assert_true(tfm_tensor_data(dq)[i] == 5.0f);
    }
    assert_true(failures > 0);
    printf("attention backward: %d allocation failures injected\n", failures);
    FREE_TENSORS(q, k, v, dout, dq);
}

int main(int argc, char **argv)
{
    g_path = argc > 1 ? argv[1] : TFM_GRAD_FIXTURE;
    /* test_oom first: the thread's workspace has not grown yet. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_reference_cases),
        cmocka_unit_test(test_hand_worked),
        cmocka_unit_test(test_fully_masked_and_nan),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
