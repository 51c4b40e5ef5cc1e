/* Internal: sub-layers wrapped in a residual connection and LayerNorm
 * (Vaswani et al. section 3.1; pre-norm as Xiong et al. 2020), shared by the
 * encoder layer, the decoder layer and the cross-attention block. */
#ifndef TFM_SRC_RESIDUAL_H
#define TFM_SRC_RESIDUAL_H

#include "nn/feed_forward.h"
#include "nn/layer_norm.h"
#include "nn/mha.h"

/* A sub-layer: out [rows, d] = f(in [rows, d]); out may alias in.  Each kind
 * below embeds it as its first member and carries only its own data; run
 * receives that member and reads the kind around it. */
typedef struct tfm__sublayer tfm__sublayer;

/* What a sub-layer's backward keeps from its forward (workspace memory of
 * the calling thread, above the caller's mark). */
typedef struct tfm__sublayer_kept {
    tfm__mha_kept mha;      /* self- and cross-attention */
    float *gk, *gv;         /* their key and value gradients, or NULL */
    tfm__ff_kept ff;        /* feed-forward */
} tfm__sublayer_kept;

struct tfm__sublayer {
    tfm_status (*run)(const tfm__sublayer *s, const float *in, float *out);
    /* The backward of run in two halves (both NULL: the kind has none).
     * keep: out = f(in) (out distinct from in), keeping in *kept what
     * backward needs; fails (out-of-memory, a variant without a backward)
     * before writing anything.  backward: given grad_out [rows, d], writes
     * grad_in [rows, d] (distinct from grad_out and in) and accumulates
     * the parameter gradients (which must exist); fails only as keep's
     * attention would, before writing. */
    tfm_status (*keep)(const tfm__sublayer *s, const float *in, float *out,
                       tfm__sublayer_kept *kept);
    tfm_status (*backward)(const tfm__sublayer *s,
                           const tfm__sublayer_kept *kept,
                           const float *grad_out, float *grad_in);
};

/* Self-attention of in [batch, L, d] over itself; drop_key: the MHA
 * call's dropout key (mha.h; 0: none). */
typedef struct tfm__self_attention_sublayer {
    tfm__sublayer base;
    const tfm__mha *mha;
    int64_t batch, L;
    const tfm__masks *masks;
    uint64_t drop_key;
} tfm__self_attention_sublayer;

/* Cross-attention of in [batch, L, d] over memory [batch, S, kdim]
 * (kdim = vdim).  Its backward adds the memory's gradient (key's plus
 * value's) into grad_memory [batch, S, kdim] when that is not NULL. */
typedef struct tfm__cross_attention_sublayer {
    tfm__sublayer base;
    const tfm__mha *mha;
    int64_t batch, L, S;
    const float *memory;
    const tfm__masks *masks;
    float *grad_memory;
    uint64_t drop_key;      /* as the self-attention's */
} tfm__cross_attention_sublayer;

/* Self-attention of the new positions of n_seqs sequences, in [rows, d]
 * one sequence after another, each over its own KV cache
 * (tfm__mha_run_cached_seqs, layer `layer`'s cache rows). */
typedef struct tfm__cached_attention_sublayer {
    tfm__sublayer base;
    const tfm__mha *mha;
    int64_t n_seqs, layer;
    const tfm__cached_seq *seqs;
} tfm__cached_attention_sublayer;

/* Cross-attention of rows independent queries in [rows, d] over one
 * memory's keys and values kv [S, 2 kv_dim] projected once
 * (tfm__mha_run_memory_kv: a cached decoder's multihead_attn). */
typedef struct tfm__memory_kv_sublayer {
    tfm__sublayer base;
    const tfm__mha *mha;
    int64_t rows, S;
    const float *kv;
} tfm__memory_kv_sublayer;

/* The position-wise feed-forward network on rows [rows, d], with dropout
 * `drop` on its hidden activations (zeroed: none). */
typedef struct tfm__feed_forward_sublayer {
    tfm__sublayer base;
    const tfm__feed_forward *ff;
    int64_t rows;
    tfm__dropout drop;
} tfm__feed_forward_sublayer;

tfm__self_attention_sublayer tfm__sublayer_self_attention(
    const tfm__mha *m, int64_t batch, int64_t L, const tfm__masks *masks,
    uint64_t drop_key);
tfm__cross_attention_sublayer tfm__sublayer_cross_attention(
    const tfm__mha *m, int64_t batch, int64_t L, const float *memory,
    int64_t S, const tfm__masks *masks, uint64_t drop_key);
tfm__cached_attention_sublayer tfm__sublayer_cached_attention(
    const tfm__mha *m, int64_t n_seqs, const tfm__cached_seq *seqs,
    int64_t layer);
tfm__memory_kv_sublayer tfm__sublayer_memory_kv(const tfm__mha *m,
                                                int64_t rows,
                                                const float *kv, int64_t S);
tfm__feed_forward_sublayer tfm__sublayer_feed_forward(
    const tfm__feed_forward *f, int64_t rows, tfm__dropout drop);

/* The feed-forward network and the LayerNorms of a layer with config c
 * (already checked) and parts (layer_config.h: TFM__PART_*), each made and
 * then adopted by parent under PyTorch's names: the network's "linear1." /
 * "linear2." (/ "linear3.") at the top level, then "norm1.", "norm2.",
 * ... in order.  *ff and *norms[i] are set as they are made, so the
 * parent's destroy frees a partial set on failure.  Fails with
 * out-of-memory. */
tfm_status tfm__layer_ff_norms_new(tfm_module *parent,
                                   const tfm_layer_config *c, unsigned parts,
                                   tfm__feed_forward **ff,
                                   tfm__layer_norm **const norms[],
                                   int n_norms);

/* x [rows, d] <- post-norm: norm(x + f(x)); pre-norm: x + f(norm(x)),
 * f's output through the branch's dropout first (torch's dropout1,
 * dropout2, ...: element i of [rows, d]; NULL or zeroed: none).
 * tmp: rows * d floats of scratch.  Fails only with out-of-memory. */
tfm_status tfm__residual(const tfm__sublayer *f, const tfm__layer_norm *norm,
                         int norm_first, const tfm__dropout *branch, float *x,
                         float *tmp, int64_t rows);

/* A residual block's forward kept for its backward (workspace memory of
 * the calling thread, above the caller's mark). */
typedef struct tfm__residual_kept {
    const tfm__sublayer *f;
    const tfm__layer_norm *norm;
    int norm_first;
    const float *x;         /* the block's input (the caller's) */
    int64_t rows;
    float *h;               /* post-norm: x + f(x), the norm's input;
                             * pre-norm: norm(x), f's input */
    float *g, *gf;          /* the backward's scratch [rows, d] */
    double *acc;            /* [2 d] */
    tfm__sublayer_kept fk;
    tfm__dropout branch;    /* the branch's dropout (zeroed: none) */
    float *gd;              /* under it: [rows, d], f's output gradient */
} tfm__residual_kept;

/* y [rows, d] = post-norm: norm(x + f(x)); pre-norm: x + f(norm(x))
 * (tfm__residual's value, branch as there; y distinct from x), keeping in *kept what
 * tfm__residual_backward_kept needs.  scratch: 2 rows * d floats the
 * backward uses as its scratch (g, gf; blocks whose backward passes run
 * one after another may share one), or NULL to take them from the
 * workspace.  Fails (out-of-memory, a variant without a backward) before
 * writing y. */
tfm_status tfm__residual_forward_keep(const tfm__sublayer *f,
                                      const tfm__layer_norm *norm,
                                      int norm_first,
                                      const tfm__dropout *branch,
                                      const float *x, float *y, int64_t rows,
                                      float *scratch,
                                      tfm__residual_kept *kept);

/* The backward (torch.autograd's) of that block, grad_y [rows, d] the
 * gradient of its output; writes grad_x [rows, d] (may be grad_y, not x)
 * and accumulates the parameter gradients of f and norm.  With
 * h = x + f(x), z = norm(x):
 *   post-norm: g = LN'(h)^T grad_y;  grad_x = g + f'(x)^T g
 *   pre-norm:  g = f'(z)^T grad_y;   grad_x = grad_y + LN'(x)^T g
 * Fails only as f's backward can, before writing anything. */
tfm_status tfm__residual_backward_kept(const tfm__residual_kept *kept,
                                       const float *grad_y, float *grad_x);

/* Both in one: x the block's input (not changed), grad_y, grad_x as
 * above.  Fails with out-of-memory (or a sub-layer's unsupported option)
 * before writing anything. */
tfm_status tfm__residual_backward(const tfm__sublayer *f,
                                  const tfm__layer_norm *norm, int norm_first,
                                  const tfm__dropout *branch, const float *x,
                                  const float *grad_y, float *grad_x,
                                  int64_t rows);

/* One residual block of a layer: its sub-layer, its norm and its
 * branch's dropout (zeroed: none). */
typedef struct tfm__residual_step {
    const tfm__sublayer *f;
    const tfm__layer_norm *norm;
    tfm__dropout branch;
} tfm__residual_step;

/* The most blocks one layer chains (the decoder layer's three). */
#define TFM__MAX_RESIDUAL_STEPS 3

/* The one forward of a layer: y [rows, d] = x through the n residual
 * blocks steps[0 .. n-1] in order (n <= TFM__MAX_RESIDUAL_STEPS, norms of
 * one width d).  kept NULL: evaluation, y may be x; the last block runs on
 * the last `tail` rows only (rows: all; fewer where only those rows'
 * outputs are read: the other rows keep block n-2's output).  Else the
 * training forward (all rows), y distinct from x, block i's forward kept
 * in kept[i] for tfm__residual_blocks_backward; x must stay unchanged
 * until then; the blocks' intermediate inputs and, when scratch is NULL,
 * their shared backward scratch [2 rows d] are taken from the workspace
 * and not released.  Fails with out-of-memory (the message naming `what`
 * when keeping) or as a sub-layer's forward, before writing y when
 * keeping. */
tfm_status tfm__residual_blocks(const tfm__residual_step *steps, int n,
                                int norm_first, const float *x, float *y,
                                int64_t rows, int64_t tail, float *scratch,
                                tfm__residual_kept *kept, const char *what);

/* The backward of that training forward: g [rows, d], the output's
 * gradient, replaced by x's; the blocks' parameter gradients accumulated.
 * Fails as a block's backward can. */
tfm_status tfm__residual_blocks_backward(const tfm__residual_kept *kept,
                                         int n, float *g);

#endif
