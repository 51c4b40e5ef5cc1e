/* A layer's training forward kept for its backward (src/tape.h).
 *
 * The contract under test (layers.h, tfm_encoder_layer_backward,
 * tfm_decoder_layer_backward and the stacks' tfm_encoder_backward,
 * tfm_decoder_backward): the backward's result does not depend on
 * whether a training forward ran before it.  Reference: a twin layer with
 * the same parameters and dropout stream whose backward runs with no
 * forward before it (so it recomputes the forward, the path the
 * finite-difference and torch.autograd tests check).  Both must agree bit
 * for bit:
 *   - right after a training forward of the same inputs (the kept forward
 *     is used: with dropout, key padding and causal masks, post- and
 *     pre-norm);
 *   - after anything the forward depended on changed in between: the
 *     input overwritten in place, a parameter set (tfm_module_set_parameter)
 *     or written through its zero-copy memory (tfm_module_parameter_data),
 *     an optimizer step, a mask's values, the dropout probability, another
 *     forward on other inputs, evaluation mode and back;
 *   - the decoder layer likewise, memory changed in between included;
 *   - the encoder and decoder stacks (two layers and a final norm).
 * And a training forward's output is the evaluation forward's at p = 0
 * bit for bit (encoder layer, also in place; decoder layer and stack);
 * a forward at one thread count and a backward at another recompute;
 * threads sharing one training layer get the outputs and input gradients
 * of their own inputs. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "test_util.h"
#include <transformer/transformer.h>

enum { B = 2, L = 5, S = 4, D = 8, H = 2, FF = 16 };

typedef struct twins {
    tfm_module *a, *b;          /* a: forward then backward; b: backward */
    int stack;                  /* a stack of two layers (and a final
                                 * norm) instead of one layer */
    tfm_optimizer *opt_a, *opt_b;
} twins;

static size_t param_bytes(tfm_module *m, const char *name)
{
    int64_t shape[8];
    int rank = 0;
    assert_int_equal(tfm_module_parameter_shape(m, name, &rank, shape),
                     TFM_OK);
    int64_t numel = 1;
    for (int k = 0; k < rank; k++)
        numel *= shape[k];
    return (size_t)numel * sizeof(float);
}

static void copy_params(tfm_module *from, tfm_module *to)
{
    const int n = tfm_module_parameter_count(from);
    for (int i = 0; i < n; i++) {
        const char *name = tfm_module_parameter_name(from, i);
        float *src = NULL, *dst = NULL;
        assert_int_equal(tfm_module_parameter_data(from, name, &src), TFM_OK);
        assert_int_equal(tfm_module_parameter_data(to, name, &dst), TFM_OK);
        memcpy(dst, src, param_bytes(from, name));
    }
}

static void make_twins(twins *t, int decoder, int stack, int norm_first,
                       float p)
{
    tfm_layer_config c = tfm_layer_config_default(D, H);
    c.d_ff = FF;
    c.norm_first = norm_first;
    t->stack = stack;
    tfm_module **m[2] = { &t->a, &t->b };
    for (int i = 0; i < 2; i++) {
        tfm_status st =
            stack ? (decoder ? tfm_decoder_create(&c, 2, 1, m[i])
                             : tfm_encoder_create(&c, 2, 1, m[i]))
                  : (decoder ? tfm_decoder_layer_create(&c, m[i])
                             : tfm_encoder_layer_create(&c, m[i]));
        assert_int_equal(st, TFM_OK);
        tfm_rng rng;
        tfm_rng_seed(&rng, 7);
        assert_int_equal(tfm_module_reset_parameters(*m[i], &rng), TFM_OK);
        assert_int_equal(tfm_module_train(*m[i], 1), TFM_OK);
        assert_int_equal(tfm_module_set_dropout(*m[i], p), TFM_OK);
        assert_int_equal(tfm_module_set_dropout_state(*m[i], 11, 0), TFM_OK);
    }
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAMW);
    o.lr = 0.01;
    assert_int_equal(tfm_optimizer_create(t->a, &o, &t->opt_a), TFM_OK);
    assert_int_equal(tfm_optimizer_create(t->b, &o, &t->opt_b), TFM_OK);
}

/* The encoder layer's or encoder stack's forward and backward. */
static tfm_status enc_forward(const twins *t, tfm_module *m,
                              const tfm_tensor *x,
                              const tfm_attention_masks *masks, tfm_tensor *y)
{
    return t->stack ? tfm_encoder_forward(m, x, masks, y)
                    : tfm_encoder_layer_forward(m, x, masks, y);
}

static tfm_status enc_backward(const twins *t, tfm_module *m,
                               const tfm_tensor *x,
                               const tfm_attention_masks *masks,
                               const tfm_tensor *g, tfm_tensor *gx)
{
    return t->stack ? tfm_encoder_backward(m, x, masks, g, gx)
                    : tfm_encoder_layer_backward(m, x, masks, g, gx);
}

static tfm_status dec_forward(const twins *t, tfm_module *m,
                              const tfm_tensor *x, const tfm_tensor *mem,
                              const tfm_attention_masks *masks, tfm_tensor *y)
{
    return t->stack ? tfm_decoder_forward(m, x, mem, masks, NULL, y)
                    : tfm_decoder_layer_forward(m, x, mem, masks, NULL, y);
}

static tfm_status dec_backward(const twins *t, tfm_module *m,
                               const tfm_tensor *x, const tfm_tensor *mem,
                               const tfm_attention_masks *masks,
                               const tfm_tensor *g, tfm_tensor *gx,
                               tfm_tensor *gm)
{
    return t->stack
               ? tfm_decoder_backward(m, x, mem, masks, NULL, g, gx, gm)
               : tfm_decoder_layer_backward(m, x, mem, masks, NULL, g, gx, gm);
}

static void free_twins(twins *t)
{
    tfm_optimizer_free(t->opt_a);
    tfm_optimizer_free(t->opt_b);
    tfm_module_free(t->a);
    tfm_module_free(t->b);
}

/* Every parameter gradient of a and b, bit for bit. */
static void expect_same_grads(tfm_module *a, tfm_module *b)
{
    const int n = tfm_module_parameter_count(a);
    for (int i = 0; i < n; i++) {
        const char *name = tfm_module_parameter_name(a, i);
        float *ga = NULL, *gb = NULL;
        assert_int_equal(tfm_module_grad(a, name, &ga), TFM_OK);
        assert_int_equal(tfm_module_grad(b, name, &gb), TFM_OK);
        if (memcmp(ga, gb, param_bytes(a, name)) != 0)
            fail_msg("gradient of %s differs", name);
    }
}

/* Before the twins' backward passes: gradients zeroed, and b's stream
 * where a's was before a's latest forward, so that b's backward (which
 * draws, having no forward) gets the key a's forward drew; *seed,
 * *offset: a's stream, which b is given back afterwards. */
static void prepare_backward(twins *t, uint64_t *seed, uint64_t *offset)
{
    tfm_module_zero_grad(t->a);
    tfm_module_zero_grad(t->b);
    assert_int_equal(tfm_module_get_dropout_state(t->a, seed, offset),
                     TFM_OK);
    assert_int_equal(tfm_module_set_dropout_state(t->b, *seed, *offset - 1),
                     TFM_OK);
}

/* The encoder twins' backward of (x, masks): a after its forward (already
 * run by the caller), b with none; same input gradient and parameter
 * gradients. */
static void expect_same_encoder_backward(twins *t, tfm_tensor *x,
                                         const tfm_attention_masks *m,
                                         tfm_tensor *g)
{
    tfm_tensor *gxa = make3(B, L, D, NULL), *gxb = make3(B, L, D, NULL);
    uint64_t seed, offset;
    prepare_backward(t, &seed, &offset);
    assert_int_equal(enc_backward(t, t->a, x, m, g, gxa), TFM_OK);
    assert_int_equal(enc_backward(t, t->b, x, m, g, gxb), TFM_OK);
    expect_bit_identical(gxa, gxb, "gxa");
    expect_same_grads(t->a, t->b);
    /* b drew its key in the backward; a's stream is where it was. */
    assert_int_equal(tfm_module_set_dropout_state(t->b, seed, offset),
                     TFM_OK);
    FREE_TENSORS(gxa, gxb);
}

static void encoder_case(int stack, int norm_first, float p, int with_masks)
{
    twins t;
    make_twins(&t, 0, stack, norm_first, p);
    tfm_tensor *x = lcg_fill(make3(B, L, D, NULL));
    tfm_tensor *x2 = lcg_fill(make3(B, L, D, NULL));
    tfm_tensor *g = lcg_fill(make3(B, L, D, NULL));
    tfm_tensor *y = make3(B, L, D, NULL), *ye = make3(B, L, D, NULL);
    tfm_tensor *pad = make2(B, L, NULL);
    fill(pad, 0.0f);
    tfm_tensor_data(pad)[L - 1] = 1.0f;        /* the last key of sequence 0 hidden */
    tfm_attention_masks masks, *m = NULL;
    memset(&masks, 0, sizeof masks);
    if (with_masks) {
        masks.causal = TFM_CAUSAL_TOP_LEFT;
        masks.key_padding_mask = pad;
        masks.key_padding_kind = TFM_MASK_BLOCK;
        m = &masks;
    }

    /* The kept forward itself. */
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    expect_same_encoder_backward(&t, x, m, g);
    /* Twice from one forward (the first backward used the kept forward
     * up; the second recomputes). */
    expect_same_encoder_backward(&t, x, m, g);

    /* The input overwritten in place after the forward. */
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    tfm_tensor *keep_x = clone(x);
    tfm_tensor_data(x)[3] += 0.25f;
    expect_same_encoder_backward(&t, x, m, g);
    memcpy(tfm_tensor_data(x), tfm_tensor_data(keep_x),
           sizeof(float) * B * L * D);

    /* A parameter set, and one written through its memory. */
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    float *w = NULL;
    assert_int_equal(tfm_module_parameter_data(
                         t.a, stack ? "layers.1.linear2.weight"
                                    : "linear2.weight", &w),
                     TFM_OK);
    w[5] *= 1.5f;
    copy_params(t.a, t.b);
    expect_same_encoder_backward(&t, x, m, g);
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    tfm_tensor *nw = make2(D, D, NULL);
    const char *out_proj = stack ? "layers.0.self_attn.out_proj.weight"
                                 : "self_attn.out_proj.weight";
    assert_int_equal(tfm_module_get_parameter(t.a, out_proj, nw), TFM_OK);
    tfm_tensor_data(nw)[0] -= 0.5f;
    assert_int_equal(tfm_module_set_parameter(t.a, out_proj, nw), TFM_OK);
    assert_int_equal(tfm_module_set_parameter(t.b, out_proj, nw), TFM_OK);
    expect_same_encoder_backward(&t, x, m, g);

    /* An optimizer step between the forward and the backward. */
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    assert_int_equal(tfm_optimizer_step(t.opt_a), TFM_OK);
    copy_params(t.a, t.b);
    expect_same_encoder_backward(&t, x, m, g);

    /* A mask's values changed (tensor reused). */
    if (with_masks) {
        assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
        tfm_tensor_data(pad)[L + 1] = 1.0f;
        expect_same_encoder_backward(&t, x, m, g);
        /* ... and no masks at all for the backward. */
        assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
        expect_same_encoder_backward(&t, x, NULL, g);
    }

    /* The dropout probability changed. */
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    assert_int_equal(tfm_module_set_dropout(t.a, p > 0 ? 0.5f : 0.2f),
                     TFM_OK);
    assert_int_equal(tfm_module_set_dropout(t.b, p > 0 ? 0.5f : 0.2f),
                     TFM_OK);
    expect_same_encoder_backward(&t, x, m, g);

    /* Another forward (other inputs) after the one being differentiated:
     * the backward of x must not take x2's forward. */
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    assert_int_equal(enc_forward(&t, t.a, x2, m, y), TFM_OK);
    expect_same_encoder_backward(&t, x, m, g);

    /* Evaluation mode drops the kept forward; training mode again. */
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    assert_int_equal(tfm_module_train(t.a, 0), TFM_OK);
    assert_int_equal(enc_forward(&t, t.a, x, m, ye), TFM_OK);
    assert_int_equal(tfm_module_train(t.a, 1), TFM_OK);
    assert_int_equal(enc_forward(&t, t.a, x, m, y), TFM_OK);
    expect_same_encoder_backward(&t, x, m, g);

    FREE_TENSORS(x, x2, g, y, ye, pad, keep_x, nw);
    free_twins(&t);
}

static void test_encoder_post_norm(void **state)
{
    (void)state;
    lcg_seed(1);
    encoder_case(0, 0, 0.0f, 0);
    encoder_case(0, 0, 0.0f, 1);
    encoder_case(1, 0, 0.0f, 1);
}

static void test_encoder_pre_norm_dropout(void **state)
{
    (void)state;
    lcg_seed(2);
    encoder_case(0, 1, 0.1f, 1);
    encoder_case(0, 0, 0.3f, 1);
    encoder_case(1, 1, 0.1f, 1);
}

/* A training forward that keeps gives the evaluation forward's output at
 * p = 0 bit for bit (dropout.h's contract), also in place (out = src: the
 * tape compares the backward's input with its own copy, not with the
 * overwritten tensor). */
static void test_training_output_unchanged(void **state)
{
    (void)state;
    lcg_seed(3);
    twins t;
    make_twins(&t, 0, 0, 0, 0.0f);
    tfm_tensor *x = lcg_fill(make3(B, L, D, NULL));
    tfm_tensor *g = lcg_fill(make3(B, L, D, NULL));
    tfm_tensor *ya = make3(B, L, D, NULL), *yb = make3(B, L, D, NULL);
    assert_int_equal(tfm_encoder_layer_forward(t.a, x, NULL, ya), TFM_OK);
    assert_int_equal(tfm_module_train(t.b, 0), TFM_OK);
    assert_int_equal(tfm_encoder_layer_forward(t.b, x, NULL, yb), TFM_OK);
    assert_int_equal(tfm_module_train(t.b, 1), TFM_OK);
    expect_bit_identical(ya, yb, "ya");
    tfm_tensor *xi = clone(x);
    assert_int_equal(tfm_encoder_layer_forward(t.a, xi, NULL, xi), TFM_OK);
    expect_bit_identical(xi, yb, "xi");
    expect_same_encoder_backward(&t, x, NULL, g);
    FREE_TENSORS(x, g, ya, yb, xi);
    free_twins(&t);
}

static void expect_same_decoder_backward(twins *t, tfm_tensor *x,
                                         tfm_tensor *mem,
                                         const tfm_attention_masks *m,
                                         tfm_tensor *g)
{
    tfm_tensor *gxa = make3(B, L, D, NULL), *gxb = make3(B, L, D, NULL);
    tfm_tensor *gma = make3(B, S, D, NULL), *gmb = make3(B, S, D, NULL);
    uint64_t seed, offset;
    prepare_backward(t, &seed, &offset);
    assert_int_equal(dec_backward(t, t->a, x, mem, m, g, gxa, gma), TFM_OK);
    assert_int_equal(dec_backward(t, t->b, x, mem, m, g, gxb, gmb), TFM_OK);
    expect_bit_identical(gxa, gxb, "gxa");
    expect_bit_identical(gma, gmb, "gma");
    expect_same_grads(t->a, t->b);
    assert_int_equal(tfm_module_set_dropout_state(t->b, seed, offset),
                     TFM_OK);
    FREE_TENSORS(gxa, gxb, gma, gmb);
}

static void test_decoder(void **state)
{
    (void)state;
    lcg_seed(4);
    for (int v = 0; v < 4; v++) {
        const int norm_first = v & 1, stack = v >> 1;
        twins t;
        make_twins(&t, 1, stack, norm_first, norm_first ? 0.1f : 0.0f);
        tfm_tensor *x = lcg_fill(make3(B, L, D, NULL));
        tfm_tensor *mem = lcg_fill(make3(B, S, D, NULL));
        tfm_tensor *g = lcg_fill(make3(B, L, D, NULL));
        tfm_tensor *y = make3(B, L, D, NULL);
        tfm_attention_masks m;
        memset(&m, 0, sizeof m);
        m.causal = TFM_CAUSAL_TOP_LEFT;
        assert_int_equal(dec_forward(&t, t.a, x, mem, &m, y),
                         TFM_OK);
        expect_same_decoder_backward(&t, x, mem, &m, g);
        /* memory changed in between */
        assert_int_equal(dec_forward(&t, t.a, x, mem, &m, y),
                         TFM_OK);
        tfm_tensor_data(mem)[2] -= 1.0f;
        expect_same_decoder_backward(&t, x, mem, &m, g);
        /* an optimizer step in between */
        assert_int_equal(dec_forward(&t, t.a, x, mem, &m, y),
                         TFM_OK);
        assert_int_equal(tfm_optimizer_step(t.opt_a), TFM_OK);
        copy_params(t.a, t.b);
        expect_same_decoder_backward(&t, x, mem, &m, g);
        FREE_TENSORS(x, mem, g, y);
        free_twins(&t);
    }
}

/* The decoder layer and stack: a training forward at p = 0 is their
 * evaluation forward bit for bit (their cross-attention's keys and values
 * come from one product memory [W_k; W_v]^T in both), for memory lengths
 * around the query length. */
static void test_decoder_training_output(void **state)
{
    (void)state;
    lcg_seed(6);
    for (int stack = 0; stack < 2; stack++)
        for (int64_t s = 3; s <= 9; s += 2) {
            twins t;
            make_twins(&t, 1, stack, 0, 0.0f);
            tfm_tensor *x = lcg_fill(make3(3, 7, D, NULL));
            tfm_tensor *mem = lcg_fill(make3(3, s, D, NULL));
            tfm_tensor *ya = make3(3, 7, D, NULL), *yb = make3(3, 7, D, NULL);
            assert_int_equal(dec_forward(&t, t.a, x, mem, NULL, ya), TFM_OK);
            assert_int_equal(tfm_module_train(t.b, 0), TFM_OK);
            assert_int_equal(dec_forward(&t, t.b, x, mem, NULL, yb), TFM_OK);
            expect_bit_identical(ya, yb, "decoder training output");
            FREE_TENSORS(x, mem, ya, yb);
            free_twins(&t);
        }
}

/* A kept forward is the bits of the thread count it ran on: a backward at
 * another count recomputes (the twin's backward at that count, alone). */
static void test_thread_count_changed(void **state)
{
    (void)state;
    lcg_seed(7);
    enum { BB = 6, LL = 37 };
    for (int stack = 0; stack < 2; stack++) {
        twins t;
        tfm_layer_config c = tfm_layer_config_default(96, 4);
        c.d_ff = 64;
        tfm_module **m[2] = { &t.a, &t.b };
        t.stack = stack;
        for (int i = 0; i < 2; i++) {
            assert_int_equal(stack ? tfm_encoder_create(&c, 2, 1, m[i])
                                   : tfm_encoder_layer_create(&c, m[i]),
                             TFM_OK);
            tfm_rng rng;
            tfm_rng_seed(&rng, 9);
            assert_int_equal(tfm_module_reset_parameters(*m[i], &rng),
                             TFM_OK);
            assert_int_equal(tfm_module_train(*m[i], 1), TFM_OK);
        }
        tfm_tensor *x = lcg_fill(make3(BB, LL, 96, NULL));
        tfm_tensor *g = lcg_fill(make3(BB, LL, 96, NULL));
        tfm_tensor *y = make3(BB, LL, 96, NULL);
        tfm_tensor *gxa = make3(BB, LL, 96, NULL), *gxb = make3(BB, LL, 96,
                                                               NULL);
        const int before = tfm_get_num_threads();
        tfm_set_num_threads(3);
        assert_int_equal(enc_forward(&t, t.a, x, NULL, y), TFM_OK);
        tfm_set_num_threads(1);
        assert_int_equal(enc_backward(&t, t.a, x, NULL, g, gxa), TFM_OK);
        assert_int_equal(enc_backward(&t, t.b, x, NULL, g, gxb), TFM_OK);
        tfm_set_num_threads(before);
        expect_bit_identical(gxa, gxb, "grad_src");
        expect_same_grads(t.a, t.b);
        FREE_TENSORS(x, g, y, gxa, gxb);
        tfm_module_free(t.a);
        tfm_module_free(t.b);
    }
}

/* Threads sharing one training layer: each runs forward then backward on
 * its own input, the calls interleaving on the one tape (a forward finding
 * it in use keeps nothing, a backward finding another call's forward
 * recomputes).  Every output and input gradient must be the one of its own
 * input (worked out before by the twin, alone); a backward may be refused
 * with TFM_ERR_BUSY while another one writes the shared gradients. */
enum { N_THREADS = 4, ROUNDS = 40 };

typedef struct shared_ctx {
    tfm_module *layer;
    tfm_tensor *x, *g, *y_ref, *gx_ref;
    int failures, backwards;
} shared_ctx;

static void *shared_main(void *p)
{
    shared_ctx *c = p;
    tfm_tensor *y = NULL, *gx = NULL;
    const int64_t shape[3] = { B, L, D };
    if (tfm_tensor_create(3, shape, &y) != TFM_OK ||
        tfm_tensor_create(3, shape, &gx) != TFM_OK) {
        c->failures++;
        return NULL;
    }
    const size_t bytes = sizeof(float) * B * L * D;
    for (int r = 0; r < ROUNDS; r++) {
        if (tfm_encoder_layer_forward(c->layer, c->x, NULL, y) != TFM_OK ||
            memcmp(tfm_tensor_data(y), tfm_tensor_data(c->y_ref), bytes))
            c->failures++;
        tfm_status st = tfm_encoder_layer_backward(c->layer, c->x, NULL, c->g,
                                                   gx);
        if (st == TFM_OK) {
            c->backwards++;
            if (memcmp(tfm_tensor_data(gx), tfm_tensor_data(c->gx_ref),
                       bytes))
                c->failures++;
        } else if (st != TFM_ERR_BUSY) {
            c->failures++;
        }
    }
    tfm_tensor_free(y);
    tfm_tensor_free(gx);
    return NULL;
}

static void test_threads_share_a_layer(void **state)
{
    (void)state;
    lcg_seed(5);
    twins t;
    make_twins(&t, 0, 0, 0, 0.0f);
    shared_ctx ctx[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        ctx[i] = (shared_ctx){ .layer = t.a };
        ctx[i].x = lcg_fill(make3(B, L, D, NULL));
        ctx[i].g = lcg_fill(make3(B, L, D, NULL));
        ctx[i].y_ref = make3(B, L, D, NULL);
        ctx[i].gx_ref = make3(B, L, D, NULL);
        assert_int_equal(tfm_module_train(t.b, 0), TFM_OK);
        assert_int_equal(tfm_encoder_layer_forward(t.b, ctx[i].x, NULL,
                                                   ctx[i].y_ref), TFM_OK);
        assert_int_equal(tfm_module_train(t.b, 1), TFM_OK);
        assert_int_equal(tfm_encoder_layer_backward(t.b, ctx[i].x, NULL,
                                                    ctx[i].g, ctx[i].gx_ref),
                         TFM_OK);
    }
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, shared_main, &ctx[i]),
                         0);
    int backwards = 0;
    for (int i = 0; i < N_THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(ctx[i].failures, 0);
        backwards += ctx[i].backwards;
    }
    assert_true(backwards > 0);
    for (int i = 0; i < N_THREADS; i++)
        FREE_TENSORS(ctx[i].x, ctx[i].g, ctx[i].y_ref, ctx[i].gx_ref);
    free_twins(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder_post_norm),
        cmocka_unit_test(test_encoder_pre_norm_dropout),
        cmocka_unit_test(test_training_output_unchanged),
        cmocka_unit_test(test_decoder),
        cmocka_unit_test(test_decoder_training_output),
        cmocka_unit_test(test_thread_count_changed),
        cmocka_unit_test(test_threads_share_a_layer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
