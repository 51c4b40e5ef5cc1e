/* GGUF v3 files as models (gguf_model.h): the configuration from the
 * <arch>.* keys, the plan of GGUF tensor -> parameter, and the binding of
 * each tensor to its parameter in the type the file stores it in.
 *
 * Read as llama.cpp's convert_hf_to_gguf.py writes them and its
 * src/llama-model.cpp reads them (names: gguf-py/gguf/constants.py):
 *   "gpt2"  GPT-2: learned positions, LayerNorms with biases, one packed
 *           attn_qkv (convert_hf_to_gguf transposed GPT-2's Conv1D weights
 *           into nn.Linear's [out, in], which is ours), gelu (tanh form);
 *           no "output" tensor: the head is the token embedding.
 *   "llama" Llama: RMSNorms, SwiGLU, grouped-query attention, separate
 *           attn_q / attn_k / attn_v filling the rows of our packed
 *           in_proj_weight; the q and k rows of each head were permuted
 *           by convert_hf_to_gguf.py (LlamaModel.permute) so that rotary
 *           pairs are adjacent, so the model rotates adjacent pairs
 *           (TFM_ROPE_ADJACENT) and takes them as they lie; q . k is the
 *           same as Hugging Face's half-split layout's.
 * A GGUF tensor's ne[0] is its fastest dimension (columns): ne = {in, out}
 * is the row-major [out, in] of nn.Linear.
 *
 * Loading: (1) the configuration's keys are read and checked with the
 * hub loader's configuration code (hub_family.h); (2) every tensor the
 * model needs is found with its shape and a weight type, and no tensor
 * is left over; (3) only then is the model created and each tensor bound
 * (nn/weight_bind.h): kept in its file type where the load options keep
 * it (in place in the file's mapping with mmap), else converted. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/mapping.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "formats/hub/hub_family.h"
#include "kernels/quant.h"
#include "models/model_impl.h"
#include "nn/weight_bind.h"
#include "transformer/model.h"
#include "transformer/weights.h"

#define NAME 96

/* ---- the configuration ---------------------------------------------------- */

/* The ggml type names of the tensor types a file may hold (ggml.h's enum
 * ggml_type), for messages. */
static const char *ggml_type_name(uint32_t t)
{
    static const char *const NAMES[] = {
        "F32", "F16", "Q4_0", "Q4_1", "type 4", "type 5", "Q5_0", "Q5_1",
        "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
        "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
        "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
    };
    return t < sizeof NAMES / sizeof NAMES[0] ? NAMES[t] : "unknown";
}

/* "<arch>.<suffix>" into buf. */
static const char *arch_key(char *buf, size_t size, const char *arch,
                            const char *suffix)
{
    snprintf(buf, size, "%s.%s", arch, suffix);
    return buf;
}

/* The whole-number key arch.suffix (>= min); absent: def, or a failure
 * when def < 0 (required). */
static tfm_status key_int(const tfm__gguf *g, const char *arch,
                          const char *suffix, int64_t def, int64_t min,
                          int64_t *out)
{
    char key[128];
    arch_key(key, sizeof key, arch, suffix);
    uint32_t u = 0;
    int64_t v = 0;
    tfm_status st = tfm__gguf_get_u32(g, key, &u);
    if (st == TFM_OK)
        v = u;
    else if (st == TFM_ERR_FORMAT && tfm__gguf_get_i64(g, key, &v) == TFM_OK)
        st = TFM_OK;
    if (st == TFM_ERR_NOT_FOUND && def >= 0) {
        *out = def;
        return TFM_OK;
    }
    if (st == TFM_ERR_NOT_FOUND)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: GGUF key \"%s\" is "
                         "missing", tfm__gguf_path(g), key);
    if (st != TFM_OK)
        return st;
    if (v < min || v > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: GGUF key \"%s\" is %lld, "
                         "outside [%lld, 2^31-1]", tfm__gguf_path(g), key,
                         (long long)v, (long long)min);
    *out = v;
    return TFM_OK;
}

/* The float key arch.suffix, finite and > 0; absent: def, or a failure
 * when def <= 0 (required). */
static tfm_status key_positive(const tfm__gguf *g, const char *arch,
                               const char *suffix, double def, double *out)
{
    char key[128];
    arch_key(key, sizeof key, arch, suffix);
    float f = 0;
    tfm_status st = tfm__gguf_get_f32(g, key, &f);
    if (st == TFM_ERR_NOT_FOUND && def > 0) {
        *out = def;
        return TFM_OK;
    }
    if (st == TFM_ERR_NOT_FOUND)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: GGUF key \"%s\" is "
                         "missing", tfm__gguf_path(g), key);
    if (st != TFM_OK)
        return st;
    if (!(f > 0) || f != f || f > 3.4e38f)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: GGUF key \"%s\" is %g, "
                         "not a finite number > 0", tfm__gguf_path(g), key,
                         (double)f);
    *out = f;
    return TFM_OK;
}

/* The sizes both architectures share. */
typedef struct gg_sizes {
    int64_t d, layers, heads, kv_heads, ff, ctx, vocab;
} gg_sizes;

static tfm_status read_sizes(const tfm__gguf *g, const char *arch,
                             gg_sizes *s)
{
    tfm_status st;
    if ((st = key_int(g, arch, "embedding_length", -1, 1, &s->d)) ||
        (st = key_int(g, arch, "block_count", -1, 1, &s->layers)) ||
        (st = key_int(g, arch, "attention.head_count", -1, 1, &s->heads)) ||
        (st = key_int(g, arch, "attention.head_count_kv", s->heads, 1,
                      &s->kv_heads)) ||
        (st = key_int(g, arch, "feed_forward_length", -1, 1, &s->ff)) ||
        (st = key_int(g, arch, "context_length", -1, 1, &s->ctx)))
        return st;
    if (s->d % s->heads != 0 || s->heads % s->kv_heads != 0)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: %s.attention.head_count "
                         "%lld must divide %s.embedding_length %lld, and "
                         "head_count_kv %lld divide head_count",
                         tfm__gguf_path(g), arch, (long long)s->heads, arch,
                         (long long)s->d, (long long)s->kv_heads);
    /* The vocabulary: the tokenizer's token count, else <arch>.vocab_size,
     * else token_embd's rows (checked against it in the plan). */
    int elem = 0;
    uint64_t count = 0;
    const tfm__gguf_tensor *emb = tfm__gguf_find_tensor(g,
                                                        "token_embd.weight");
    if (tfm__gguf_get_array(g, "tokenizer.ggml.tokens", &elem, &count) ==
        TFM_OK) {
        if (count < 1 || count > INT32_MAX)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: tokenizer.ggml.tokens "
                             "holds %llu tokens", tfm__gguf_path(g),
                             (unsigned long long)count);
        s->vocab = (int64_t)count;
    } else if ((st = key_int(g, arch, "vocab_size", 0, 1, &s->vocab))) {
        return st;
    }
    if (s->vocab == 0) {
        if (!emb || emb->n_dims != 2)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: no tensor "
                             "\"token_embd.weight\" [vocab, %lld]",
                             tfm__gguf_path(g), (long long)s->d);
        s->vocab = emb->ne[1];
    }
    return TFM_OK;
}

/* GPT-2 (llama.cpp's LLM_ARCH_GPT2): LayerNorm epsilon
 * attention.layer_norm_epsilon, activation gelu (tanh form: our
 * gelu_new), learned positions over context_length. */
static tfm_status gpt2_config(const tfm__gguf *g, tfm_model_config *c,
                              tfm_model_options *o, tfm_layer_options *lo,
                              gg_sizes *s)
{
    double eps = 0;
    tfm_status st;
    if ((st = read_sizes(g, "gpt2", s)) ||
        (st = key_positive(g, "gpt2", "attention.layer_norm_epsilon", 0,
                           &eps)))
        return st;
    if (s->kv_heads != s->heads)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: gpt2.attention."
                         "head_count_kv %lld differs from head_count %lld",
                         tfm__gguf_path(g), (long long)s->kv_heads,
                         (long long)s->heads);
    tfm__hub_decoder_config(c, s->d, s->heads, s->ff,
                            tfm__hub_activation(NULL), eps, s->vocab,
                            s->layers, s->ctx, TFM_POSITIONAL_LEARNED, 1);
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    return TFM_OK;
}

/* Llama (llama.cpp's LLM_ARCH_LLAMA): RMSNorm epsilon
 * attention.layer_norm_rms_epsilon, rope.freq_base (default 10000),
 * rope.dimension_count (default and only accepted value: the head size);
 * rotary scaling and mixtures of experts are refused. */
static tfm_status llama_config(const tfm__gguf *g, tfm_model_config *c,
                               tfm_model_options *o, tfm_layer_options *lo,
                               gg_sizes *s)
{
    double eps = 0, theta = 0;
    int64_t rope_dims = 0, experts = 0, key_len = 0, value_len = 0;
    tfm_status st;
    if ((st = read_sizes(g, "llama", s)) ||
        (st = key_positive(g, "llama", "attention.layer_norm_rms_epsilon", 0,
                           &eps)) ||
        (st = key_positive(g, "llama", "rope.freq_base", 10000.0, &theta)) ||
        (st = key_int(g, "llama", "rope.dimension_count", s->d / s->heads, 0,
                      &rope_dims)) ||
        (st = key_int(g, "llama", "attention.key_length", s->d / s->heads, 0,
                      &key_len)) ||
        (st = key_int(g, "llama", "attention.value_length", s->d / s->heads,
                      0, &value_len)) ||
        (st = key_int(g, "llama", "expert_count", 0, 0, &experts)))
        return st;
    const int64_t hd = s->d / s->heads;
    if (rope_dims != hd || key_len != hd || value_len != hd)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: llama.%s %lld is not "
                         "the head size embedding_length / head_count = "
                         "%lld, which this library needs", tfm__gguf_path(g),
                         rope_dims != hd ? "rope.dimension_count"
                         : key_len != hd ? "attention.key_length"
                                         : "attention.value_length",
                         (long long)(rope_dims != hd ? rope_dims
                                     : key_len != hd ? key_len : value_len),
                         (long long)hd);
    if (hd % 2 != 0)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: rotary positions need an "
                         "even head size, not %lld", tfm__gguf_path(g),
                         (long long)hd);
    if (experts > 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: llama.expert_count "
                         "%lld: mixtures of experts are not supported",
                         tfm__gguf_path(g), (long long)experts);
    tfm__gguf_str type = { 0 };
    if (tfm__gguf_get_str(g, "llama.rope.scaling.type", &type) == TFM_OK &&
        !(type.len == 4 && memcmp(type.ptr, "none", 4) == 0))
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: llama.rope.scaling."
                         "type \"%.*s\": only plain rotary positions are "
                         "supported", tfm__gguf_path(g),
                         (int)(type.len > 40 ? 40 : type.len), type.ptr);
    if (theta <= 1.0)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: llama.rope.freq_base "
                         "%g: rotary bases <= 1 are not supported",
                         tfm__gguf_path(g), theta);
    tfm__hub_decoder_config(c, s->d, s->heads, s->ff,
                            tfm__hub_activation("silu"), eps, s->vocab,
                            s->layers, s->ctx, TFM_POSITIONAL_NONE, 1);
    tfm__hub_llama_options(o, lo, s->kv_heads, theta, TFM_ROPE_ADJACENT);
    return TFM_OK;
}

/* ---- the plan --------------------------------------------------------------- */

/* One GGUF tensor and the parameter (or rows of it) it fills. */
typedef struct gg_entry {
    char gguf[NAME];          /* "blk.0.attn_q.weight" */
    char ours[NAME];          /* "layers.0.self_attn.in_proj_weight" */
    int rank;                 /* 1: [cols]; 2: [rows, cols] */
    int64_t rows, cols;
    int part;                 /* 0: the first (or only) rows of ours; 1: the
                               * rows after the previous entry's */
    const tfm__gguf_tensor *t;
} gg_entry;

typedef struct gg_plan {
    gg_entry *e;
    int n, cap;
} gg_plan;

static tfm_status plan_add(gg_plan *p, const char *gguf, const char *ours,
                           int rank, int64_t rows, int64_t cols, int part)
{
    if (p->n >= p->cap)
        return tfm__fail(TFM_ERR_FORMAT, "GGUF plan full"); /* not reached */
    gg_entry *e = &p->e[p->n++];
    snprintf(e->gguf, sizeof e->gguf, "%s", gguf);
    snprintf(e->ours, sizeof e->ours, "%s", ours);
    e->rank = rank;
    e->rows = rows;
    e->cols = cols;
    e->part = part;
    e->t = NULL;
    return TFM_OK;
}

/* A layer's row: GGUF "blk.<i>.<gguf>" -> "layers.<i>.<ours>". */
typedef struct gg_row {
    const char *gguf, *ours;
    int rank;
    int64_t rows, cols;
    int part;
} gg_row;

static tfm_status plan_layer(gg_plan *p, int64_t i, const gg_row *rows,
                             size_t n)
{
    tfm_status st = TFM_OK;
    for (size_t k = 0; st == TFM_OK && k < n; k++) {
        char a[NAME], b[NAME];
        snprintf(a, sizeof a, "blk.%lld.%s", (long long)i, rows[k].gguf);
        snprintf(b, sizeof b, "layers.%lld.%s", (long long)i, rows[k].ours);
        st = plan_add(p, a, b, rows[k].rank, rows[k].rows, rows[k].cols,
                      rows[k].part);
    }
    return st;
}

#define N_ROWS(r) (sizeof (r) / sizeof (r)[0])

static tfm_status gpt2_plan(const tfm_model_config *c, const gg_sizes *s,
                            gg_plan *p)
{
    const int64_t d = s->d, ff = s->ff;
    tfm_status st;
    if ((st = plan_add(p, "token_embd.weight", "token_embedding.weight", 2,
                       s->vocab, d, 0)) ||
        (st = plan_add(p, "position_embd.weight",
                       "position_embedding.weight", 2, c->context_length, d,
                       0)))
        return st;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const gg_row L[] = {
            { "attn_norm.weight", "norm1.weight", 1, 0, d, 0 },
            { "attn_norm.bias", "norm1.bias", 1, 0, d, 0 },
            { "attn_qkv.weight", "self_attn.in_proj_weight", 2, 3 * d, d, 0 },
            { "attn_qkv.bias", "self_attn.in_proj_bias", 1, 0, 3 * d, 0 },
            { "attn_output.weight", "self_attn.out_proj.weight", 2, d, d, 0 },
            { "attn_output.bias", "self_attn.out_proj.bias", 1, 0, d, 0 },
            { "ffn_norm.weight", "norm2.weight", 1, 0, d, 0 },
            { "ffn_norm.bias", "norm2.bias", 1, 0, d, 0 },
            { "ffn_up.weight", "linear1.weight", 2, ff, d, 0 },
            { "ffn_up.bias", "linear1.bias", 1, 0, ff, 0 },
            { "ffn_down.weight", "linear2.weight", 2, d, ff, 0 },
            { "ffn_down.bias", "linear2.bias", 1, 0, d, 0 },
        };
        if ((st = plan_layer(p, i, L, N_ROWS(L))))
            return st;
    }
    if ((st = plan_add(p, "output_norm.weight", "norm.weight", 1, 0, d, 0)))
        return st;
    return plan_add(p, "output_norm.bias", "norm.bias", 1, 0, d, 0);
}

static tfm_status llama_plan(const tfm_model_config *c, const gg_sizes *s,
                             gg_plan *p)
{
    const int64_t d = s->d, ff = s->ff;
    const int64_t kv = s->kv_heads * (d / s->heads);
    tfm_status st;
    if ((st = plan_add(p, "token_embd.weight", "token_embedding.weight", 2,
                       s->vocab, d, 0)))
        return st;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const gg_row L[] = {
            { "attn_norm.weight", "norm1.weight", 1, 0, d, 0 },
            { "attn_q.weight", "self_attn.in_proj_weight", 2, d, d, 0 },
            { "attn_k.weight", "self_attn.in_proj_weight", 2, kv, d, 1 },
            { "attn_v.weight", "self_attn.in_proj_weight", 2, kv, d, 1 },
            { "attn_output.weight", "self_attn.out_proj.weight", 2, d, d, 0 },
            { "ffn_norm.weight", "norm2.weight", 1, 0, d, 0 },
            { "ffn_gate.weight", "linear1.weight", 2, ff, d, 0 },
            { "ffn_up.weight", "linear3.weight", 2, ff, d, 0 },
            { "ffn_down.weight", "linear2.weight", 2, d, ff, 0 },
        };
        if ((st = plan_layer(p, i, L, N_ROWS(L))))
            return st;
    }
    return plan_add(p, "output_norm.weight", "norm.weight", 1, 0, d, 0);
}

/* An architecture: its general.architecture name, configuration and plan,
 * and the most plan entries a layer and outside the layers need. */
typedef struct gg_arch {
    const char *name;
    tfm_status (*config)(const tfm__gguf *g, tfm_model_config *c,
                         tfm_model_options *o, tfm_layer_options *lo,
                         gg_sizes *s);
    tfm_status (*plan)(const tfm_model_config *c, const gg_sizes *s,
                       gg_plan *p);
    int per_layer, outside;
} gg_arch;

static const gg_arch ARCHS[] = {
    { "gpt2", gpt2_config, gpt2_plan, 12, 5 },
    { "llama", llama_config, llama_plan, 9, 4 },
};

/* Finds each planned tensor with its shape and a weight type. */
static tfm_status plan_find(const tfm__gguf *g, gg_plan *p)
{
    for (int i = 0; i < p->n; i++) {
        gg_entry *e = &p->e[i];
        const tfm__gguf_tensor *t = tfm__gguf_find_tensor(g, e->gguf);
        if (!t)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: no tensor \"%s\"",
                             tfm__gguf_path(g), e->gguf);
        const int ok = e->rank == 1
                           ? t->n_dims == 1 && t->ne[0] == e->cols
                           : t->n_dims == 2 && t->ne[0] == e->cols &&
                                 t->ne[1] == e->rows;
        if (!ok)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: tensor \"%s\" has ne "
                             "[%lld, %lld] (%d dims), expected [%lld%s%lld]",
                             tfm__gguf_path(g), e->gguf, (long long)t->ne[0],
                             (long long)(t->n_dims > 1 ? t->ne[1] : 1),
                             t->n_dims, (long long)e->cols,
                             e->rank == 2 ? ", " : "",
                             (long long)(e->rank == 2 ? e->rows : 0));
        if (t->dtype < 0 || !tfm__dtype_is_weight(t->dtype))
            return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: tensor \"%s\" is "
                             "of ggml type %s (%u): this library reads F32, "
                             "F16, BF16, Q8_0 and Q4_0 tensors",
                             tfm__gguf_path(g), e->gguf,
                             ggml_type_name(t->ggml_type),
                             (unsigned)t->ggml_type);
        e->t = t;
    }
    return TFM_OK;
}

/* Whether a planned entry reads tensor t. */
static int planned(const gg_plan *p, const tfm__gguf_tensor *t)
{
    for (int i = 0; i < p->n; i++)
        if (p->e[i].t == t)
            return 1;
    return 0;
}

/* The head: absent "output.weight" is the tied token embedding, and so is
 * one holding the token embedding's very bytes; another is the model's
 * own head (appended to the plan, c untied). */
static tfm_status plan_head(const tfm__gguf *g, tfm_model_config *c,
                            const gg_sizes *s, gg_plan *p, int *same_as_emb)
{
    const tfm__gguf_tensor *out = tfm__gguf_find_tensor(g, "output.weight");
    const tfm__gguf_tensor *emb = p->e[0].t;  /* token_embd, found */
    *same_as_emb = 0;
    if (!out) {
        c->tied_embeddings = 1;
        return TFM_OK;
    }
    if (out->dtype == emb->dtype && out->nbytes == emb->nbytes &&
        out->n_dims == emb->n_dims && out->ne[0] == emb->ne[0] &&
        out->ne[1] == emb->ne[1] &&
        memcmp(out->data, emb->data, (size_t)out->nbytes) == 0) {
        c->tied_embeddings = 1;
        *same_as_emb = 1;
        return TFM_OK;
    }
    c->tied_embeddings = 0;
    tfm_status st = plan_add(p, "output.weight", "lm_head.weight", 2,
                             s->vocab, s->d, 0);
    return st != TFM_OK ? st : plan_find(g, p);
}

/* No tensor of the file is left out of the plan (but the head equal to
 * the token embedding). */
static tfm_status plan_no_extra(const tfm__gguf *g, const gg_plan *p,
                                int same_as_emb)
{
    const int64_t n = tfm__gguf_n_tensors(g);
    for (int64_t i = 0; i < n; i++) {
        const tfm__gguf_tensor *t = tfm__gguf_tensor_at(g, i);
        if (planned(p, t) ||
            (same_as_emb && strcmp(t->name, "output.weight") == 0))
            continue;
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: tensor \"%.120s\" is "
                         "not part of the model this library builds (is the "
                         "architecture's variant supported?)",
                         tfm__gguf_path(g), t->name);
    }
    return TFM_OK;
}

/* ---- binding ----------------------------------------------------------------- */

/* Where t's bytes lie in map (the same file mapped again), or in the
 * reader's own mapping when map is NULL. */
static const unsigned char *bytes_of(const tfm__gguf *g,
                                     const tfm__gguf_tensor *t,
                                     const tfm__mapping *map)
{
    if (!map)
        return t->data;
    size_t size = 0;
    const unsigned char *base = tfm__gguf_map(g, &size);
    return (const unsigned char *)tfm__mapping_data(map) +
           ((const unsigned char *)t->data - base);
}

/* Binds entries e[0 .. n-1], which fill parameter e[0].ours row after
 * row: one tensor as it lies; several of one type contiguous in the file
 * as one span; several of one type apart, concatenated; several of
 * different types, widened to float32 and concatenated. */
static tfm_status bind_group(const tfm__gguf *g, tfm_module *m,
                             const gg_entry *e, int n, int keep,
                             tfm__mapping *map)
{
    int same = 1, contiguous = 1;
    uint64_t total = 0;
    const unsigned char *first = bytes_of(g, e[0].t, map);
    for (int k = 0; k < n; k++) {
        same &= e[k].t->dtype == e[0].t->dtype;
        contiguous &= bytes_of(g, e[k].t, map) == first + total;
        total += e[k].t->nbytes;
    }
    if (n == 1 || (same && contiguous))
        return tfm__module_bind_param(m, e[0].ours, e[0].t->dtype, first,
                                      total, keep, map);
    if (same) {
        unsigned char *buf = tfm__malloc((size_t)total);
        if (!buf)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for "
                             "\"%s\"", e[0].ours);
        uint64_t at = 0;
        for (int k = 0; k < n; k++) {
            memcpy(buf + at, e[k].t->data, (size_t)e[k].t->nbytes);
            at += e[k].t->nbytes;
        }
        tfm_status st = tfm__module_bind_param(m, e[0].ours, e[0].t->dtype,
                                               buf, total, keep, NULL);
        tfm__free(buf);
        return st;
    }
    int64_t values = 0;
    for (int k = 0; k < n; k++)
        values += e[k].rows * e[k].cols;
    float *buf = tfm__malloc((size_t)values * sizeof *buf);
    if (!buf)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory for \"%s\"",
                         e[0].ours);
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        tfm__widen_row(e[k].t->dtype, e[k].t->data, e[k].rows * e[k].cols,
                       buf + at);
        at += e[k].rows * e[k].cols;
    }
    tfm_status st = tfm__module_bind_param(m, e[0].ours, TFM_DTYPE_F32, buf,
                                           (uint64_t)values * sizeof *buf,
                                           keep, NULL);
    tfm__free(buf);
    return st;
}

static tfm_status plan_bind(const tfm__gguf *g, const gg_plan *p,
                            tfm_module *m, int keep, tfm__mapping *map)
{
    for (int i = 0; i < p->n;) {
        int n = 1;
        while (i + n < p->n && p->e[i + n].part)
            n++;
        tfm_status st = bind_group(g, m, &p->e[i], n, keep, map);
        if (st != TFM_OK)
            return st;
        i += n;
    }
    return TFM_OK;
}

/* ---- the loader ---------------------------------------------------------------- */

int tfm__gguf_is_file(const char *path)
{
    struct stat s; /* a regular file only: a FIFO would block the open */
    if (stat(path, &s) != 0 || !S_ISREG(s.st_mode))
        return 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    char magic[4];
    const int yes = fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    fclose(f);
    return yes;
}

static tfm_status find_arch(const tfm__gguf *g, const gg_arch **out)
{
    tfm__gguf_str name = { 0 };
    tfm_status st = tfm__gguf_get_str(g, "general.architecture", &name);
    if (st == TFM_ERR_NOT_FOUND)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: no GGUF key "
                         "\"general.architecture\"", tfm__gguf_path(g));
    if (st != TFM_OK)
        return st;
    for (size_t k = 0; k < sizeof ARCHS / sizeof ARCHS[0]; k++)
        if (name.len == strlen(ARCHS[k].name) &&
            memcmp(name.ptr, ARCHS[k].name, name.len) == 0) {
            *out = &ARCHS[k];
            return TFM_OK;
        }
    return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: general.architecture is "
                     "\"%.*s\": this library reads GGUF models of "
                     "architecture \"gpt2\" and \"llama\"",
                     tfm__gguf_path(g), (int)(name.len > 60 ? 60 : name.len),
                     name.ptr);
}

tfm_status tfm__gguf_model_load(const char *path, int keep_dtype,
                                int use_mmap, tfm_module **out)
{
    tfm__gguf *g = NULL;
    tfm__mapping *map = NULL;
    tfm_module *model = NULL;
    gg_plan p = { 0 };
    const gg_arch *arch = NULL;
    tfm_model_config c;
    tfm_model_options o;
    tfm_layer_options lo;
    gg_sizes s = { 0 };
    int same_as_emb = 0;
    tfm_status st = tfm__gguf_open(path, &g);
    if (st == TFM_OK && (st = find_arch(g, &arch)) == TFM_OK &&
        (st = arch->config(g, &c, &o, &lo, &s)) == TFM_OK)
        st = tfm__model_config_check(&c, &o);
    /* More layers than the file holds tensors is refused before the plan
     * is allocated. */
    if (st == TFM_OK && (c.n_layers > tfm__gguf_n_tensors(g) ||
                         c.n_layers > (INT32_MAX - arch->outside - 1) /
                                          arch->per_layer))
        st = tfm__fail(TFM_ERR_FORMAT, "%.200s: %s.block_count %lld, but "
                       "the file holds %lld tensors", path, arch->name,
                       (long long)c.n_layers,
                       (long long)tfm__gguf_n_tensors(g));
    if (st == TFM_OK) {
        p.cap = (int)(arch->per_layer * c.n_layers + arch->outside + 1);
        p.e = tfm__calloc((size_t)p.cap, sizeof *p.e);
        if (!p.e)
            st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st == TFM_OK && (st = arch->plan(&c, &s, &p)) == TFM_OK &&
        (st = plan_find(g, &p)) == TFM_OK &&
        (st = plan_head(g, &c, &s, &p, &same_as_emb)) == TFM_OK)
        st = plan_no_extra(g, &p, same_as_emb);
    if (st == TFM_OK && use_mmap) {
        size_t size = 0;
        /* The file mapped again for the model to keep (the reader's own
         * mapping goes with it): the same file if the same size and the
         * same header (a file replaced by rename in between differs). */
        const unsigned char *base = tfm__gguf_map(g, &size);
        size_t header = size;
        for (int64_t i = 0; i < tfm__gguf_n_tensors(g); i++) {
            const size_t at = (size_t)((const unsigned char *)
                                           tfm__gguf_tensor_at(g, i)->data -
                                       base);
            header = at < header ? at : header;
        }
        if ((st = tfm__mapping_open(path, size, &map)) == TFM_OK &&
            (tfm__mapping_size(map) != size ||
             memcmp(tfm__mapping_data(map), base, header) != 0))
            st = tfm__fail(TFM_ERR_IO, "%.200s changed while it was read",
                           path);
    }
    if (st == TFM_OK &&
        (st = tfm_model_create_v2(&c, &o, &lo, &model)) == TFM_OK &&
        (st = plan_bind(g, &p, model, keep_dtype, map)) == TFM_OK && map)
        st = tfm__mapping_check(map); /* not truncated while bound */
    if (map)
        tfm__mapping_release(map); /* the model holds its own */
    tfm__free(p.e);
    tfm__gguf_close(g);
    if (st != TFM_OK) {
        tfm_module_free(model);
        return st;
    }
    *out = model;
    return TFM_OK;
}
