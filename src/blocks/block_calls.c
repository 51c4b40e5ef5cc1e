/* The one door of the blocks' public calls (layers_impl.h), shared by the
 * encoder and decoder layers, the cross-attention block, the stacks and
 * nn.Transformer: validation of a call's tensors, the copy-in / copy-out
 * run, the public forward (tfm__encoder_forward, tfm__decoder_forward) and
 * backward (tfm__encoder_backward, tfm__decoder_backward). */
#include <string.h>

#include "base/error.h"
#include "blocks/layers_impl.h"
#include "nn/module_impl.h"
#include "nn/tape.h"
#include "base/tensor_impl.h"
#include "base/workspace.h"

tfm_status tfm__check_activation(const tfm_tensor *t, const char *what,
                                 int64_t d, int64_t *B, int64_t *L)
{
    if (!t)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL", what);
    if (t->rank != 3)
        return tfm__fail(TFM_ERR_SHAPE,
                         "%s has rank %d, expected 3 [batch, seq, d_model]",
                         what, t->rank);
    if (t->shape[2] != d)
        return tfm__fail(TFM_ERR_SHAPE, "%s has %lld columns, expected %lld",
                         what, (long long)t->shape[2], (long long)d);
    *B = t->shape[0];
    *L = t->shape[1];
    return TFM_OK;
}

tfm_status tfm__run_copy(const float *src, float *dst, int64_t n,
                         tfm__inplace_fn fn, const void *ctx)
{
    tfm__ws_mark mark = tfm__ws_save();
    float *x = tfm__ws_floats((size_t)n);
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    if (x) {
        memcpy(x, src, (size_t)n * sizeof(float));
        st = fn(ctx, x);
        if (st == TFM_OK)
            memcpy(dst, x, (size_t)n * sizeof(float));
    }
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__check_decoder_inputs(const tfm_layer_config *c,
                                     const tfm_tensor *tgt, const char *name,
                                     const tfm_tensor *memory,
                                     const tfm_attention_masks *tgt_masks,
                                     const tfm_attention_masks *memory_masks,
                                     const tfm_tensor *out,
                                     tfm__decoder_inputs *in)
{
    const int64_t d = c->d_model, H = c->n_heads;
    int64_t Bm = 0;
    tfm_status st;
    if ((st = tfm__check_activation(tgt, name, d, &in->B, &in->L)) ||
        (st = tfm__check_activation(memory, "memory", d, &Bm, &in->S)))
        return st;
    if (Bm != in->B)
        return tfm__fail(TFM_ERR_SHAPE, "memory has batch %lld, expected %lld",
                         (long long)Bm, (long long)in->B);
    if ((st = tfm__check_shape(out, "out", 3, tgt->shape)) ||
        (st = tfm__masks_resolve(tgt_masks, in->B, H, in->L, in->L,
                                 "tgt_masks", &in->tgt_masks)))
        return st;
    return tfm__masks_resolve(memory_masks, in->B, H, in->L, in->S,
                              "memory_masks", &in->memory_masks);
}

static int overlaps(const tfm_tensor *a, const tfm_tensor *b)
{
    return a && b && a->data < b->data + b->numel &&
           b->data < a->data + a->numel;
}

tfm_status tfm__check_decoder_backward(const char *what,
                                       const tfm_layer_config *c,
                                       const tfm_tensor *x, const char *name,
                                       const tfm_tensor *memory,
                                       const tfm_attention_masks *tgt_masks,
                                       const tfm_attention_masks *memory_masks,
                                       const tfm_tensor *grad_output,
                                       const tfm_tensor *grad_x,
                                       const tfm_tensor *grad_memory,
                                       tfm__decoder_inputs *in)
{
    tfm_status st;
    if ((st = tfm__check_decoder_inputs(c, x, name, memory, tgt_masks,
                                        memory_masks, x, in)) ||
        (st = tfm__check_backward_rows(what, x, c->d_model, grad_output,
                                       c->d_model, grad_x)) ||
        (grad_memory && (st = tfm__check_shape(grad_memory, "grad_memory", 3,
                                               memory->shape))))
        return st;
    if (overlaps(grad_memory, grad_output) || overlaps(grad_memory, grad_x))
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT, "%s: grad_memory must not "
                         "overlap grad_output or the input's gradient", what);
    return TFM_OK;
}

/* ---- The public forward of a layer or stack -------------------------- */

/* The arguments of a block's run, for tfm__run_copy. */
typedef struct block_call {
    const void *block;
    tfm__block_forward_fn forward;
    int64_t B, L, S;
    const float *memory;
    const tfm__masks *masks, *memory_masks;
    uint64_t drop_key;
} block_call;

static tfm_status block_step(const void *ctx, float *x)
{
    const block_call *c = ctx;
    return c->forward(c->block, x, x, c->B, c->L, c->memory, c->S, c->masks,
                      c->memory_masks, c->drop_key, NULL);
}

tfm__dropout tfm__layer_hidden_dropout(const tfm_module *layer,
                                       uint64_t drop_key)
{
    return tfm__dropout_at(layer->dropout,
                           tfm__dropout_site(drop_key, TFM__DROP_FF),
                           TFM__DROP_HIDDEN);
}

/* block's tfm_layer_config (block already checked). */
static const tfm_layer_config *config_of(const tfm__block_kind *k,
                                         const tfm_module *block)
{
    return (const tfm_layer_config *)((const char *)block + k->config_offset);
}

/* The call c on x into out: in training mode, when the kind can keep its
 * forward, the kept forward the backward takes up (tape.h), else (or when
 * keeping fails) as in evaluation mode, the same bits; out is written only
 * on success. */
static tfm_status run_block(const tfm__block_kind *k, const block_call *c,
                            int64_t heads, const tfm_tensor *x,
                            const tfm_tensor *memory, tfm_tensor *out)
{
    tfm_module *block = (tfm_module *)c->block;
    tfm__tape *t = NULL;
    /* y: the output until it is complete (the thread's workspace: the tape
     * keeps only what the backward reads). */
    tfm__ws_mark mark = tfm__ws_save();
    float *y = block->training ? tfm__ws_alloc((size_t)x->numel * sizeof *y)
                               : NULL;
    if (y) {
        const tfm__tape_inputs in = {
            c->B, c->L, c->S, heads, x->data, (size_t)x->numel,
            memory ? memory->data : NULL, memory ? (size_t)memory->numel : 0,
            c->masks, c->memory_masks, c->drop_key
        };
        t = tfm__tape_record(block, &in);
    }
    if (!t) {
        tfm__ws_restore(mark);
        return tfm__run_copy(x->data, out->data, x->numel, block_step, c);
    }
    void *kept = tfm__ws_alloc(k->kept_size);
    tfm_status st = kept ? k->forward(block, t->x, y, c->B, c->L, t->memory,
                                      c->S, &t->masks, &t->memory_masks,
                                      c->drop_key, kept)
                         : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "%s: out of "
                                     "memory", k->function);
    tfm__tape_close(t, st == TFM_OK ? kept : NULL);
    if (st == TFM_OK)
        memcpy(out->data, y, (size_t)x->numel * sizeof *y);
    tfm__ws_restore(mark);
    /* Keeping is only a saving: a forward that cannot keep (out of memory,
     * a variant without a backward) runs as in evaluation mode, whose
     * status is the call's. */
    return st == TFM_OK ? st
                        : tfm__run_copy(x->data, out->data, x->numel,
                                        block_step, c);
}

tfm_status tfm__block_backward(const tfm__block_kind *k, tfm_module *block,
                               int64_t B, int64_t L, int64_t S, int64_t heads,
                               const tfm_tensor *x, const tfm_tensor *memory,
                               const tfm__masks *masks,
                               const tfm__masks *memory_masks, float *g,
                               float *grad_memory)
{
    const uint64_t key = tfm__dropout_backward_key(block);
    const tfm__tape_inputs in = {
        B, L, S, heads, x->data, (size_t)x->numel,
        memory ? memory->data : NULL, memory ? (size_t)memory->numel : 0,
        masks, memory_masks, key
    };
    tfm__tape *t = tfm__tape_find(block, &in);
    if (t) {
        tfm_status st = k->backward_kept(t->kept, g, grad_memory);
        tfm__tape_release(t);
        return st;
    }
    /* The forward again (y: its output, not needed). */
    tfm__ws_mark mark = tfm__ws_save();
    void *kept = tfm__ws_alloc(k->kept_size);
    float *y = kept ? tfm__ws_floats((size_t)x->numel) : NULL;
    tfm_status st = y ? k->forward(block, x->data, y, B, L,
                                   memory ? memory->data : NULL, S, masks,
                                   memory_masks, key, kept)
                      : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "%s: out of memory",
                                  k->function);
    if (st == TFM_OK)
        st = k->backward_kept(kept, g, grad_memory);
    tfm__ws_restore(mark);
    return st;
}

tfm_status tfm__encoder_forward(const tfm__block_kind *k,
                                const tfm_module *block, const tfm_tensor *src,
                                const tfm_attention_masks *masks,
                                tfm_tensor *out)
{
    tfm_status st = tfm__module_check(block, k->kind, k->what);
    if (st != TFM_OK)
        return st;
    const tfm_layer_config *c = config_of(k, block);
    int64_t B = 0, L = 0;
    tfm__masks m;
    if ((st = tfm__check_activation(src, "src", c->d_model, &B, &L)) ||
        (st = tfm__check_shape(out, "out", 3, src->shape)) ||
        (st = tfm__masks_resolve(masks, B, c->n_heads, L, L, k->function,
                                 &m)))
        return st;
    block_call call = { block, k->forward, B, L, 0, NULL, &m, NULL,
                        tfm__dropout_forward_key((tfm_module *)block) };
    return run_block(k, &call, c->n_heads, src, NULL, out);
}

tfm_status tfm__decoder_forward(const tfm__block_kind *k,
                                const tfm_module *block, const tfm_tensor *tgt,
                                const tfm_tensor *memory,
                                const tfm_attention_masks *tgt_masks,
                                const tfm_attention_masks *memory_masks,
                                tfm_tensor *out)
{
    tfm_status st = tfm__module_check(block, k->kind, k->what);
    if (st != TFM_OK)
        return st;
    tfm__decoder_inputs in;
    if ((st = tfm__check_decoder_inputs(config_of(k, block), tgt, "tgt",
                                        memory, tgt_masks, memory_masks, out,
                                        &in)))
        return st;
    block_call call = { block, k->forward, in.B, in.L, in.S, memory->data,
                        &in.tgt_masks, &in.memory_masks,
                        tfm__dropout_forward_key((tfm_module *)block) };
    return run_block(k, &call, config_of(k, block)->n_heads, tgt, memory,
                     out);
}

/* The backward both public calls share once their inputs are checked: g,
 * the running gradient (grad_output's copy), and with a memory gmem, its
 * gradient (zeroed), entered through tfm__backward_begin; the block's
 * backward; grad_x and grad_memory written only on success. */
static tfm_status backward_through(const tfm__block_kind *k,
                                   tfm_module *block, const char *what,
                                   int64_t B, int64_t L, int64_t S,
                                   int64_t H, const tfm_tensor *x,
                                   const tfm_tensor *memory,
                                   const tfm__masks *masks,
                                   const tfm__masks *memory_masks,
                                   const tfm_tensor *grad_output,
                                   tfm_tensor *grad_x,
                                   tfm_tensor *grad_memory)
{
    const int64_t n = x->numel, n_mem = memory ? memory->numel : 0;
    float *g = NULL, *gmem = NULL;
    float **const bufs[] = { &g, &gmem };
    const size_t sizes[] = { (size_t)n, (size_t)n_mem };
    tfm__ws_mark mark;
    tfm_status st = tfm__backward_begin(block, what, bufs, sizes,
                                        memory ? 2 : 1, &mark);
    if (st != TFM_OK)
        return st;
    memcpy(g, grad_output->data, (size_t)n * sizeof *g);
    if (memory)
        memset(gmem, 0, (size_t)n_mem * sizeof *gmem);
    st = tfm__block_backward(k, block, B, L, S, H, x, memory, masks,
                             memory_masks, g, gmem);
    if (st == TFM_OK && grad_x)
        memcpy(grad_x->data, g, (size_t)n * sizeof *g);
    if (st == TFM_OK && grad_memory)
        memcpy(grad_memory->data, gmem, (size_t)n_mem * sizeof *gmem);
    tfm__backward_end(block, mark);
    return st;
}

tfm_status tfm__encoder_backward(const tfm__block_kind *k, tfm_module *block,
                                 const char *what, const tfm_tensor *src,
                                 const tfm_attention_masks *masks,
                                 const tfm_tensor *grad_output,
                                 tfm_tensor *grad_src)
{
    tfm_status st = tfm__module_check(block, k->kind, k->what);
    if (st != TFM_OK)
        return st;
    const tfm_layer_config *c = config_of(k, block);
    int64_t B = 0, L = 0;
    tfm__masks m;
    if ((st = tfm__check_activation(src, "src", c->d_model, &B, &L)) ||
        (st = tfm__masks_resolve(masks, B, c->n_heads, L, L, what, &m)) ||
        (st = tfm__check_backward_rows(what, src, c->d_model, grad_output,
                                       c->d_model, grad_src)))
        return st;
    return backward_through(k, block, what, B, L, 0, c->n_heads, src, NULL,
                            &m, NULL, grad_output, grad_src, NULL);
}

tfm_status tfm__decoder_backward(const tfm__block_kind *k, tfm_module *block,
                                 const char *what, const tfm_tensor *tgt,
                                 const tfm_tensor *memory,
                                 const tfm_attention_masks *tgt_masks,
                                 const tfm_attention_masks *memory_masks,
                                 const tfm_tensor *grad_output,
                                 tfm_tensor *grad_tgt, tfm_tensor *grad_memory)
{
    tfm_status st = tfm__module_check(block, k->kind, k->what);
    if (st != TFM_OK)
        return st;
    const tfm_layer_config *c = config_of(k, block);
    tfm__decoder_inputs in;
    if ((st = tfm__check_decoder_backward(what, c, tgt, "tgt", memory,
                                          tgt_masks, memory_masks,
                                          grad_output, grad_tgt, grad_memory,
                                          &in)))
        return st;
    return backward_through(k, block, what, in.B, in.L, in.S, c->n_heads, tgt,
                            memory, &in.tgt_masks, &in.memory_masks,
                            grad_output, grad_tgt, grad_memory);
}
