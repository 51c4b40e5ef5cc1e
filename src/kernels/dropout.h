/* Internal: dropout (Srivastava et al. 2014, "Dropout: a simple way to
 * prevent neural networks from overfitting"; torch.nn.Dropout's inverted
 * form): in training mode each element is zeroed with probability p and
 * the kept ones are multiplied by 1 / (1 - p), so the expectation is
 * unchanged; in evaluation mode (or p = 0) nothing happens.
 *
 * The masks are counter-based, so a backward pass regenerates the mask of
 * its forward instead of storing it (as FlashAttention does for the
 * attention weights): element `index` of a dropout site with key `key` is
 * kept when the top 32 bits of tfm__dropout_hash(key, index) are at least
 * p * 2^32 (rounded down), where tfm__dropout_hash(key, i) is output i + 1
 * of the SplitMix64 generator seeded with key (model.h: tfm_rng) -- the
 * generator's outputs taken by position, not in sequence.  Keys are
 * derived the same way: the key of a call is tfm__dropout_hash(seed,
 * offset) (module.h: tfm_module_set_dropout_state), and each site of a
 * module derives its own key from its parent's with its site number
 * (tfm__dropout_site).  Indexes: row-major element numbers of the tensor
 * the site drops, [rows, cols]; the attention weights' element (b, h, i,
 * j) of [B, H, L, S] is ((b H + h) L + i) S + j. */
#ifndef TFM_SRC_DROPOUT_H
#define TFM_SRC_DROPOUT_H

#include <stdint.h>

/* One dropout site of one call.  A zeroed struct (p = 0) drops nothing. */
typedef struct tfm__dropout {
    float p;            /* probability of zeroing, in [0, 1] */
    float scale;        /* 1 / (1 - p) as float (0 when p = 1) */
    uint64_t threshold; /* floor(p 2^32): kept when hash >> 32 >= it */
    uint64_t key;
} tfm__dropout;

/* Output index + 1 of SplitMix64 seeded with key. */
static inline uint64_t tfm__dropout_hash(uint64_t key, uint64_t index)
{
    uint64_t z = key + (index + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The site numbers of the modules (tfm__dropout_site). */
enum {
    TFM__DROP_ATTENTION = 1,    /* an MHA's attention weights */
    TFM__DROP_HIDDEN = 2,       /* a feed-forward's hidden activations */
    TFM__DROP_BLOCK1 = 3,       /* a layer's first residual branch */
    TFM__DROP_BLOCK2 = 4,       /* its second */
    TFM__DROP_BLOCK3 = 5,       /* its third (decoder layers) */
    TFM__DROP_SELF_ATTN = 6,    /* a layer's self-attention module */
    TFM__DROP_CROSS_ATTN = 7,   /* its cross-attention module */
    TFM__DROP_FF = 8,           /* its feed-forward module */
    TFM__DROP_EMBEDDING = 9,    /* a model's (source) embeddings */
    TFM__DROP_TGT_EMBEDDING = 10, /* an encoder-decoder's target ones */
    TFM__DROP_ENCODER = 11,     /* an nn.Transformer / seq2seq encoder */
    TFM__DROP_DECODER = 12,     /* its decoder */
    TFM__DROP_STACK = 13,       /* a decoder-only / encoder-only stack */
    TFM__DROP_LAYER0 = 1000     /* layer i of a stack: TFM__DROP_LAYER0 + i */
};

/* The key of site `site` of a module called with key (0 stays 0: off). */
static inline uint64_t tfm__dropout_site(uint64_t key, uint64_t site)
{
    if (!key)
        return 0;
    uint64_t k = tfm__dropout_hash(key, site);
    return k ? k : 1;
}

/* The site with probability p and key: off (zeroed) when p = 0 or key = 0. */
tfm__dropout tfm__dropout_make(float p, uint64_t key);

/* The site `site` of a call with key (probability p). */
static inline tfm__dropout tfm__dropout_at(float p, uint64_t key,
                                           uint64_t site)
{
    return tfm__dropout_make(p, tfm__dropout_site(key, site));
}

/* Whether the site drops anything. */
static inline int tfm__dropout_on(const tfm__dropout *d)
{
    return d && d->key != 0 && d->p > 0.0f;
}

/* x[c] <- x[c] * mask(index0 + c) * scale for c < n (in place). */
void tfm__dropout_apply(const tfm__dropout *d, uint64_t index0, float *x,
                        int64_t n);

/* Rows: x [rows, cols] (row stride ld) holds elements index0 +
 * row * index_stride + c of the site. */
void tfm__dropout_apply_rows(const tfm__dropout *d, uint64_t index0,
                             uint64_t index_stride, float *x, int64_t rows,
                             int64_t cols, int64_t ld);

/* dst [rows, cols] (ld) <- src (ld) * mask * scale, as apply_rows. */
void tfm__dropout_copy_rows(const tfm__dropout *d, uint64_t index0,
                            uint64_t index_stride, const float *src,
                            float *dst, int64_t rows, int64_t cols,
                            int64_t ld);

#endif
