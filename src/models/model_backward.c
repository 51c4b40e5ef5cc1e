/* Whole models' backward (model.h): tfm_model_backward and
 * tfm_model_seq2seq_backward from d loss / d logits, and
 * tfm_model_loss_backward, the same backward with the cross-entropy's
 * gradient computed from the kept forward's logits.  One forward keeping
 * the blocks' activations (and those of BERT's embedding norm and head
 * transform), then the head, the blocks and the embeddings backward. */
#include <math.h>
#include <string.h>

#include "kernels/activation.h"
#include "base/alloc.h"
#include "kernels/dropout.h"
#include "base/error.h"
#include "kernels/linear.h"
#include "training/loss.h"
#include "models/model_impl.h"
#include "base/parallel.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"


/* The head's weight gradient: lm_head's own, or the token embedding's
 * when tied. */
static float *head_grad(const tfm__model *m)
{
    const tfm_module *home = m->token_embedding &&
                                     m->lm_head == m->token_embedding->weight
                                 ? &m->token_embedding->base
                                 : &m->base;
    return tfm__grad_of(home, m->lm_head);
}

/* The backward of tfm__model_embed: x's gradient g [B, L, d] into the
 * token table's and the learned positions' gradients. */
static void embed_backward(const tfm__model *m, const int32_t *ids,
                           int64_t B, int64_t L, const float *g)
{
    tfm__embedding_lookup_backward(m->token_embedding, ids, B * L, -1, g);
    if (m->config.positional == TFM_POSITIONAL_LEARNED)
        tfm__embedding_add_rows_backward(m->position_embedding, g, B, L, 0);
}

/* tfm__model_embed keeping e (model_backward). */
static void embed_keep(const tfm__model *m, const int32_t *ids, int64_t B,
                       int64_t L, const tfm__model_parts_kept *k, float *x)
{
    if (!m->embedding_norm) {
        tfm__model_embed_sum(m, ids, NULL, B, L, 0, x);
        return;
    }
    tfm__model_embed_sum(m, ids, NULL, B, L, 0, k->e);
    tfm__layer_norm_run(m->embedding_norm, k->e, B * L, x);
}

/* The backward of embed_keep but for the token table and positions: g
 * [rows, d], the gradient of the embeddings' output; returns that of
 * their sum (g itself, or k->e overwritten), after token type 0's row
 * got its sum over the rows. */
static const float *embed_parts_backward(const tfm__model *m,
                                         const tfm__model_parts_kept *k,
                                         int64_t rows, const float *g)
{
    if (m->embedding_norm) {
        const tfm_module *home = &m->embedding_norm->base;
        tfm__layer_norm_backward(m->embedding_norm, k->e, rows, g, k->e,
                                 tfm__grad_of(home, m->embedding_norm->weight),
                                 tfm__grad_of(home, m->embedding_norm->bias),
                                 k->acc);
        g = k->e;
    }
    if (m->token_type_embedding)
        tfm__embedding_add_rows_backward(m->token_type_embedding, g, rows, 1,
                                         0);
    return g;
}

/* The head transform of h [rows, d] keeping t, a and y (model_backward;
 * a no-op without one). */
static void head_transform_keep(const tfm__model *m, const float *h,
                                int64_t rows, const tfm__model_parts_kept *k)
{
    if (!m->head_transform)
        return;
    const int64_t n = rows * m->config.layer.d_model;
    tfm__model_head_transform_linear(m, h, rows, k->t);
    memcpy(k->a, k->t, (size_t)n * sizeof(float));
    tfm__activate(k->a, n, m->config.layer.activation);
    tfm__layer_norm_run(m->head_norm, k->a, rows, k->y);
}

void tfm__model_head_backward(const tfm__model *m, const float *h,
                              int64_t rows, const tfm__model_parts_kept *k,
                              const float *dl, float *g)
{
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    if (!m->head_transform) {
        /* logits = h lm_head^T (+ b): g = dl lm_head, the head's gradient
         * += dl^T h (the bias's the column sums of dl). */
        tfm__linear_backward(h, d, rows, d, m->lm_head, V, dl, V, g,
                             head_grad(m),
                             tfm__grad_of(&m->base, m->lm_head_bias),
                             k->acc);
        return;
    }
    /* logits = y lm_head^T + b, y = LN(a), a = act(t), t = h W^T + c:
     * dy into y, da into a, dt in place, dh into g. */
    const tfm_module *norm = &m->head_norm->base;
    tfm__linear_backward(k->y, d, rows, d, m->lm_head, V, dl, V, k->y,
                         head_grad(m), tfm__grad_of(&m->base, m->lm_head_bias),
                         k->acc);
    tfm__layer_norm_backward(m->head_norm, k->a, rows, k->y, k->a,
                             tfm__grad_of(norm, m->head_norm->weight),
                             tfm__grad_of(norm, m->head_norm->bias), k->acc);
    tfm__activation_backward(k->t, k->a, rows * d,
                             m->config.layer.activation);
    tfm__linear_backward(h, d, rows, d, m->head_transform, d, k->a, d, g,
                         tfm__grad_of(&m->base, m->head_transform),
                         tfm__grad_of(&m->base, m->head_transform_bias),
                         k->acc);
}

tfm_status tfm__model_check_grad_logits(const tfm_tensor *grad_logits,
                                        int rank, const int64_t *shape,
                                        const char *what)
{
    tfm_status st;
    if (!grad_logits)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: grad_logits is NULL",
                         what);
    if ((st = tfm__check_shape(grad_logits, "grad_logits", rank, shape)))
        return st;
    if (!tfm__all_finite(grad_logits->data, grad_logits->numel))
        return tfm__fail(TFM_ERR_NON_FINITE, "%s: grad_logits holds NaN or "
                         "infinity", what);
    return TFM_OK;
}

/* The cross-entropy of tfm_model_loss_backward (NULL in
 * tfm_model_backward, whose caller gives grad_logits). */
typedef struct model_loss {
    const int32_t *targets;
    int32_t ignore_index;
    float label_smoothing;
    tfm_reduction reduction;
    float grad_scale;
    float *loss;
} model_loss;

/* tfm_model_backward and tfm_model_loss_backward (checked but for the
 * sizes, ids and grad_logits): one forward keeping the blocks'
 * activations; with a loss, the head's logits and their cross-entropy
 * gradient (in scratch, before any gradient is written); then the head,
 * the blocks and the embeddings. */
static tfm_status model_backward(tfm_module *model, const int32_t *ids,
                                 int64_t batch, int64_t seq,
                                 const tfm_tensor *grad_logits,
                                 const model_loss *ls, const char *what)
{
    /* The loss's own forward draws a key; tfm_model_backward recomputes
     * the latest tfm_model_logits'. */
    uint64_t key = 0;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t shape[3] = { batch, seq, V };
    tfm_status st;
    if ((st = tfm__model_check_sizes(m, batch, seq, "seq")) ||
        (st = tfm__model_check_ids(m, ids, batch * seq, "ids")) ||
        (!ls &&
         (st = tfm__model_check_grad_logits(grad_logits, 3, shape, what))))
        return st;
    const int64_t rows = batch * seq, n = rows * d;
    int64_t cells;
    if (!tfm__checked_numel(shape, 3, sizeof(float), &cells))
        return tfm__fail(TFM_ERR_OVERFLOW, "%s: logits size overflows", what);
    /* x0: the embedded input; h: the blocks' output; g: the running
     * gradient; then those of the parts the model has
     * (tfm__model_parts_kept); dl: the logits' gradient (with a loss). */
    float *x0, *h, *g, *dl = NULL, *acc = NULL;
    tfm__model_parts_kept k = { 0 };
    float **bufs[9] = { &x0, &h, &g };
    size_t sizes[9] = { (size_t)n, (size_t)n, (size_t)n };
    int nb = 3;
    if (m->embedding_norm) {
        bufs[nb] = &k.e;
        sizes[nb++] = (size_t)n;
    }
    if (m->head_transform) {
        float **more[] = { &k.t, &k.a, &k.y };
        for (int i = 0; i < 3; i++) {
            bufs[nb] = more[i];
            sizes[nb++] = (size_t)n;
        }
    }
    if (m->embedding_norm || m->lm_head_bias) {
        bufs[nb] = &acc; /* 2 max(d, V) doubles */
        sizes[nb++] = (size_t)(4 * (d > V ? d : V));
    }
    if (ls) {
        bufs[nb] = &dl;
        sizes[nb++] = (size_t)cells;
    }
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(model, what, (float **const *)bufs, sizes,
                                  nb, &mark)))
        return st;
    k.acc = (double *)(void *)acc;
    tfm__masks masks = { 0 };
    if (m->config.architecture == TFM_ARCH_DECODER_ONLY)
        masks.causal = TFM_CAUSAL_TOP_LEFT;
    key = ls ? tfm__dropout_forward_key(model)
             : tfm__dropout_backward_key(model);
    embed_keep(m, ids, batch, seq, &k, x0);
    tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, x0, n);
    tfm__stack_kept kept;
    st = tfm__stack_forward_keep(m->stack, x0, batch, seq, NULL, 0, &masks,
                                 NULL, tfm__dropout_site(key, TFM__DROP_STACK),
                                 NULL, h, &kept);
    if (st == TFM_OK && ls) {
        head_transform_keep(m, h, rows, &k);
        tfm__model_head_project(m, m->head_transform ? k.y : h, rows, dl);
        st = tfm__cross_entropy(dl, rows, V, ls->targets, ls->ignore_index,
                                ls->label_smoothing, ls->reduction,
                                ls->grad_scale, ls->loss, dl, what);
    }
    if (st == TFM_OK) {
        if (!ls) /* the head's activations, which a loss has kept */
            head_transform_keep(m, h, rows, &k);
        tfm__model_head_backward(m, h, rows, &k, ls ? dl : grad_logits->data,
                                 g);
        st = tfm__stack_backward_kept(&kept, g);
    }
    if (st == TFM_OK) {
        tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, g, n);
        embed_backward(m, ids, batch, seq,
                       embed_parts_backward(m, &k, rows, g));
    }
    tfm__backward_end(model, mark);
    return st;
}

tfm_status tfm_model_backward(tfm_module *model, const int32_t *ids,
                              int64_t batch, int64_t seq,
                              const tfm_tensor *grad_logits)
{
    TFM__PLAN_PIN();
    tfm_status st = tfm__model_check_one_stack(model);
    if (st != TFM_OK)
        return st;
    return model_backward(model, ids, batch, seq, grad_logits, NULL,
                          "tfm_model_backward");
}

tfm_status tfm_model_loss_backward(tfm_module *model, const int32_t *ids,
                                   int64_t batch, int64_t seq,
                                   const int32_t *targets,
                                   int32_t ignore_index,
                                   float label_smoothing,
                                   tfm_reduction reduction, float grad_scale,
                                   float *loss)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_model_loss_backward";
    tfm_status st = tfm__model_check_one_stack(model);
    if (st != TFM_OK)
        return st;
    if (!targets || !loss)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s: targets and loss are "
                         "required", what);
    if (!isfinite(grad_scale))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "%s: grad_scale %g is "
                         "not finite", what, (double)grad_scale);
    float l = 0.0f;
    const model_loss ls = { targets, ignore_index, label_smoothing,
                            reduction, grad_scale, &l };
    st = model_backward(model, ids, batch, seq, NULL, &ls, what);
    if (st == TFM_OK)
        *loss = l;
    return st;
}

tfm_status tfm_model_seq2seq_backward(tfm_module *model,
                                      const int32_t *src_ids, int64_t src_len,
                                      const int32_t *tgt_ids, int64_t tgt_len,
                                      int64_t batch,
                                      const tfm_tensor *grad_logits)
{
    TFM__PLAN_PIN();
    const char *what = "tfm_model_seq2seq_backward";
    tfm_status st = tfm__model_check_seq2seq(model, src_ids, src_len, tgt_ids,
                                             tgt_len, batch, grad_logits,
                                             what);
    if (st != TFM_OK)
        return st;
    const tfm__model *m = (const tfm__model *)model;
    const int64_t d = m->config.layer.d_model, V = m->config.vocab_size;
    const int64_t B = batch, S = src_len, L = tgt_len;
    const int64_t n_src = B * S * d, n_tgt = B * L * d;
    /* src0, tgt0: the embedded inputs; memory: the encoder's output; h:
     * the decoder's; g: the decoder's running gradient; gmem: memory's,
     * then src0's. */
    float *src0, *tgt0, *memory, *h, *g, *gmem, *acc = NULL;
    float **const bufs[] = { &src0, &tgt0, &memory, &h, &g, &gmem, &acc };
    const size_t sizes[] = { (size_t)n_src, (size_t)n_tgt, (size_t)n_src,
                             (size_t)n_tgt, (size_t)n_tgt, (size_t)n_src,
                             (size_t)(2 * V) /* V doubles: the bias's */ };
    tfm__ws_mark mark;
    if ((st = tfm__backward_begin(model, what, bufs, sizes,
                                  m->lm_head_bias ? 7 : 6, &mark)))
        return st;
    const tfm__masks none = { 0 };
    const tfm__masks causal = { .causal = TFM_CAUSAL_TOP_LEFT };
    tfm__model_embed(m, src_ids, B, S, 0, src0);
    tfm__model_embed(m, tgt_ids, B, L, 0, tgt0);
    memset(gmem, 0, (size_t)n_src * sizeof *gmem);
    const uint64_t key = tfm__dropout_backward_key(model);
    tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, src0, n_src);
    tfm__model_embed_dropout(m, key, TFM__DROP_TGT_EMBEDDING, tgt0, n_tgt);
    tfm__stack_kept enc, dec;
    st = tfm__stack_forward_keep(m->encoder, src0, B, S, NULL, 0, &none,
                                 NULL, tfm__dropout_site(key,
                                                         TFM__DROP_ENCODER),
                                 NULL, memory, &enc);
    if (st == TFM_OK)
        st = tfm__stack_forward_keep(
            m->decoder, tgt0, B, L, memory, S, &causal, &none,
            tfm__dropout_site(key, TFM__DROP_DECODER), gmem, h, &dec);
    if (st == TFM_OK) {
        tfm__linear_backward(h, d, B * L, d, m->lm_head, V,
                             grad_logits->data, V, g, head_grad(m),
                             tfm__grad_of(&m->base, m->lm_head_bias),
                             (double *)(void *)acc);
        st = tfm__stack_backward_kept(&dec, g);
    }
    if (st == TFM_OK)
        st = tfm__stack_backward_kept(&enc, gmem);
    if (st == TFM_OK) {
        tfm__model_embed_dropout(m, key, TFM__DROP_TGT_EMBEDDING, g, n_tgt);
        tfm__model_embed_dropout(m, key, TFM__DROP_EMBEDDING, gmem, n_src);
        embed_backward(m, tgt_ids, B, L, g);
        embed_backward(m, src_ids, B, S, gmem);
    }
    tfm__backward_end(model, mark);
    return st;
}
