/* The attention kernel (attention_core.h).
 *
 * Queries are processed in blocks of at least TFM_QUERY_BLOCK rows: for each block
 * the scaled logits against the visible keys are one cblas_sgemm, masks and
 * softmax run row by row, and the block's output is a second cblas_sgemm.
 * Scratch is one block of logits (TFM_QUERY_BLOCK x S), never L x S, unless
 * the caller asked for the weights, which are then written in place.  Under
 * a causal mask the keys after the block's last visible key are skipped.
 *
 * Values in masked positions must not reach the output even when they are
 * NaN or infinite, but 0 * NaN = NaN inside a matrix product.  So value rows
 * holding non-finite numbers are zeroed in a copy for the product, and then
 * added back, row by row, only for the queries that may see them.
 */
#include <math.h>
#include <string.h>

#include "attention_core.h"
#include "error.h"
#include "gemm.h"
#include "softmax.h"
#include "tensor_impl.h"

#define TFM_QUERY_BLOCK 64
#define TFM_BLOCK_FLOATS 131072

static int valid_kind(tfm_mask_kind k)
{
    return k == TFM_MASK_BLOCK || k == TFM_MASK_ALLOW ||
           k == TFM_MASK_ADDITIVE;
}

tfm_status tfm__masks_resolve(const tfm_attention_masks *pub, int64_t batch,
                              int64_t heads, int64_t L, int64_t S,
                              const char *what, tfm__masks *out)
{
    tfm__masks m;
    memset(&m, 0, sizeof m);
    if (!pub) {
        *out = m;
        return TFM_OK;
    }
    if (pub->causal != TFM_CAUSAL_NONE && pub->causal != TFM_CAUSAL_TOP_LEFT &&
        pub->causal != TFM_CAUSAL_BOTTOM_RIGHT)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "%s: unknown causal mode %d", what, (int)pub->causal);
    m.causal = pub->causal;
    if (pub->key_padding_mask) {
        if (!valid_kind(pub->key_padding_kind))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: unknown key_padding_kind %d", what,
                             (int)pub->key_padding_kind);
        const int64_t shape[2] = { batch, S };
        tfm_status st = tfm__check_shape(pub->key_padding_mask,
                                         "key_padding_mask", 2, shape);
        if (st != TFM_OK)
            return st;
        m.key_padding = pub->key_padding_mask->data;
        m.key_padding_kind = pub->key_padding_kind;
    }
    if (pub->attn_mask) {
        const tfm_tensor *t = pub->attn_mask;
        if (!valid_kind(pub->attn_mask_kind))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "%s: unknown attn_mask_kind %d", what,
                             (int)pub->attn_mask_kind);
        int64_t shape[4];
        tfm_status st;
        if (t->rank == 2) {
            shape[0] = L, shape[1] = S;
            m.attn_batch_stride = 0, m.attn_head_stride = 0;
        } else if (t->rank == 3) {
            shape[0] = batch, shape[1] = L, shape[2] = S;
            m.attn_batch_stride = L * S, m.attn_head_stride = 0;
        } else {
            shape[0] = batch, shape[1] = heads, shape[2] = L, shape[3] = S;
            m.attn_batch_stride = heads * L * S, m.attn_head_stride = L * S;
            if (t->rank != 4)
                return tfm__fail(TFM_ERR_SHAPE,
                                 "%s: attn_mask has rank %d, expected 2 "
                                 "[L, S], 3 [B, L, S] or 4 [B, H, L, S]",
                                 what, t->rank);
        }
        if ((st = tfm__check_shape(t, "attn_mask", t->rank, shape)) != TFM_OK)
            return st;
        m.attn = t->data;
        m.attn_kind = pub->attn_mask_kind;
    }
    *out = m;
    return TFM_OK;
}

/* Query rows per block: enough that each product is large for OpenBLAS,
 * few enough that a block of logits (rows x S) stays about 512 KiB. */
static int64_t block_rows(int64_t L, int64_t S)
{
    int64_t rows = TFM_BLOCK_FLOATS / S;
    rows = rows < TFM_QUERY_BLOCK ? TFM_QUERY_BLOCK : rows;
    return rows < L ? rows : L;
}

int64_t tfm__attention_scratch(int64_t L, int64_t S, int64_t d_v)
{
    return block_rows(L, S) * S + S * d_v + S;
}

/* Applies one mask value to a logit: returns -inf when masked. */
static inline float apply_mask(float x, float m, tfm_mask_kind kind)
{
    switch (kind) {
    case TFM_MASK_BLOCK: return m != 0.0f ? -INFINITY : x;
    case TFM_MASK_ALLOW: return m == 0.0f ? -INFINITY : x;
    default: return m == -INFINITY ? -INFINITY : x + m;
    }
}

/* Masks row `gi` of the logits (n visible columns at most) in place. */
static void mask_row(const tfm__head_args *a, int64_t gi, int64_t offset,
                     float *row, int64_t n)
{
    const tfm__masks *m = a->masks;
    int64_t last = m->causal ? gi + offset : a->S - 1;
    const float *kp = m->key_padding ? m->key_padding + a->b * a->S : NULL;
    const float *am = m->attn ? m->attn + a->b * m->attn_batch_stride +
                                    a->h * m->attn_head_stride + gi * a->S
                              : NULL;
    for (int64_t j = 0; j < n; j++) {
        if (j > last) {
            row[j] = -INFINITY;
            continue;
        }
        float x = row[j];
        if (kp)
            x = apply_mask(x, kp[j], m->key_padding_kind);
        if (am && x != -INFINITY)
            x = apply_mask(x, am[j], m->attn_kind);
        row[j] = x;
    }
}

/* Whether key j is masked out for query row gi (the logit is -inf whatever
 * the scores are). */
static int masked_at(const tfm__head_args *a, int64_t gi, int64_t offset,
                     int64_t j)
{
    const tfm__masks *m = a->masks;
    if (m->causal && j > gi + offset)
        return 1;
    float x = 0.0f;
    if (m->key_padding)
        x = apply_mask(x, m->key_padding[a->b * a->S + j],
                       m->key_padding_kind);
    if (m->attn && x != -INFINITY)
        x = apply_mask(x,
                       m->attn[a->b * m->attn_batch_stride +
                               a->h * m->attn_head_stride + gi * a->S + j],
                       m->attn_kind);
    return x == -INFINITY;
}

/* Marks value rows holding a non-finite number; returns how many. */
static int64_t flag_bad_rows(const tfm__head_args *a, float *flags)
{
    int64_t n_bad = 0;
    for (int64_t j = 0; j < a->S; j++) {
        const float *row = a->v + j * a->ldv;
        float probe = 0.0f;
        for (int64_t c = 0; c < a->d_v; c++)
            probe += row[c] * 0.0f; /* NaN iff some entry is NaN or inf */
        flags[j] = probe == 0.0f ? 0.0f : 1.0f;
        n_bad += probe != 0.0f;
    }
    return n_bad;
}

void tfm__attention_head(const tfm__head_args *a)
{
    const int64_t L = a->L, S = a->S, dv = a->d_v;
    int64_t rows = block_rows(L, S);
    float *block = a->scratch;
    float *clean_v = block + rows * S;
    float *flags = clean_v + S * dv;
    int64_t offset = a->masks->causal == TFM_CAUSAL_BOTTOM_RIGHT ? S - L : 0;

    const float *v = a->v;
    int64_t ldv = a->ldv;
    int64_t n_bad = flag_bad_rows(a, flags);
    if (n_bad) {
        for (int64_t j = 0; j < S; j++) {
            if (flags[j] != 0.0f)
                memset(clean_v + j * dv, 0, (size_t)dv * sizeof(float));
            else
                memcpy(clean_v + j * dv, a->v + j * a->ldv,
                       (size_t)dv * sizeof(float));
        }
        v = clean_v;
        ldv = dv;
    }

    for (int64_t i0 = 0; i0 < L; i0 += rows) {
        int64_t r = L - i0 < rows ? L - i0 : rows;
        int64_t n = S;
        if (a->masks->causal) {
            n = i0 + r + offset; /* one past the last visible key */
            n = n < 0 ? 0 : (n > S ? S : n);
        }
        int in_place = a->weights && !a->average;
        float *p = in_place ? a->weights + i0 * S : block;
        int64_t ldp = S;
        float *out = a->out + i0 * a->ldo;

        tfm__sgemm(0, 1, r, n, a->d_k, a->scale, a->q + i0 * a->ldq, a->ldq,
                   a->k, a->ldk, 0.0f, p, ldp);
        for (int64_t i = 0; i < r; i++) {
            float *row = p + i * ldp;
            mask_row(a, i0 + i, offset, row, n);
            tfm__softmax_row(row, n);
            if (in_place && n < S)
                memset(row + n, 0, (size_t)(S - n) * sizeof(float));
        }
        tfm__sgemm(0, 0, r, dv, n, 1.0f, p, ldp, v, ldv, 0.0f, out, a->ldo);

        for (int64_t j = 0; n_bad && j < n; j++) {
            if (flags[j] == 0.0f)
                continue;
            const float *vj = a->v + j * a->ldv;
            for (int64_t i = 0; i < r; i++) {
                /* A visible key's non-finite value propagates even when
                 * its weight underflowed to 0 (0 * NaN is NaN); a masked
                 * key's never does. */
                float w = p[i * ldp + j];
                if (w != 0.0f || !masked_at(a, i0 + i, offset, j))
                    for (int64_t c = 0; c < dv; c++)
                        out[i * a->ldo + c] += w * vj[c];
            }
        }
        if (a->weights && a->average) {
            for (int64_t i = 0; i < r; i++) {
                float *dst = a->weights + (i0 + i) * S;
                const float *src = p + i * ldp;
                for (int64_t j = 0; j < n; j++)
                    dst[j] += a->average_factor * src[j];
            }
        }
    }
}
