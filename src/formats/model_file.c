/* Model files: safetensors with the configuration in "__metadata__"
 * (model.h). */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attention/attention_config.h"
#include "base/error.h"
#include "formats/checkpoint.h"
#include "formats/load_options.h"
#include "formats/model_file_weights.h"
#include "formats/hub/hub_model.h"
#include "nn/mha.h"
#include "models/model_impl.h"
#include "base/names.h"
#include "base/number_parse.h"
#include "nn/patch_embedding.h"
#include "base/tensor_impl.h"
#include "transformer/safetensors.h"

/* ---- reading the configuration ------------------------------------------ */

static tfm_status meta_int(const tfm_safetensors *f, const char *key,
                           int required, int64_t *out)
{
    const char *v = tfm_safetensors_metadata(f, key);
    if (!v) {
        if (!required)
            return TFM_OK;
        return tfm__fail(TFM_ERR_FORMAT, "model file lacks metadata \"%s\"",
                         key);
    }
    int64_t n;
    if (tfm__parse_int64(v, &n) != TFM__NUMBER_OK || n < 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "metadata \"%s\" = \"%s\" is not a whole number >= 0",
                         key, v);
    *out = n;
    return TFM_OK;
}

static tfm_status meta_bool(const tfm_safetensors *f, const char *key,
                            int *out)
{
    const char *v = tfm_safetensors_metadata(f, key);
    if (!v)
        return TFM_OK; /* keep the default */
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *out = 1;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *out = 0;
    else
        return tfm__fail(TFM_ERR_FORMAT,
                         "metadata \"%s\" = \"%s\" is not true or false", key,
                         v);
    return TFM_OK;
}

/* Looks the value up among the names of enum e (names.h); *out = the
 * enum value; absent: unchanged (an error when required). */
static tfm_status meta_enum(const tfm_safetensors *f, const char *key,
                            tfm_enum e, int required, int *out)
{
    const char *v = tfm_safetensors_metadata(f, key);
    if (!v)
        return required ? tfm__fail(TFM_ERR_FORMAT,
                                    "model file lacks metadata \"%s\"", key)
                        : TFM_OK;
    const int value = tfm__enum_lookup(e, v);
    if (value < 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "metadata \"%s\" has unknown value \"%s\"", key, v);
    *out = value;
    return TFM_OK;
}
/* A finite number (number_parse.h's syntax, the whole string); absent:
 * unchanged. */
static tfm_status meta_double(const tfm_safetensors *f, const char *key,
                              double *out)
{
    const char *v = tfm_safetensors_metadata(f, key);
    if (!v)
        return TFM_OK;
    double x;
    if (tfm__parse_double(v, &x) != TFM__NUMBER_OK)
        return tfm__fail(TFM_ERR_FORMAT,
                         "metadata \"%s\" = \"%s\" is not a finite number",
                         key, v);
    *out = x;
    return TFM_OK;
}

/* A whole number 0 .. 2^64-1, digits only; absent: unchanged. */
static tfm_status meta_u64(const tfm_safetensors *f, const char *key,
                           uint64_t *out)
{
    const char *v = tfm_safetensors_metadata(f, key);
    if (!v)
        return TFM_OK;
    uint64_t n;
    if (tfm__parse_uint64(v, &n) != TFM__NUMBER_OK)
        return tfm__fail(TFM_ERR_FORMAT,
                         "metadata \"%s\" = \"%s\" is not a whole number "
                         "from 0 to 2^64-1", key, v);
    *out = n;
    return TFM_OK;
}


/* ---- the attention variant: "tfm.attention.*" (model.h) ------------------ */

/* Enum and flag fields are read and written as int. */
_Static_assert(sizeof(tfm_score) == sizeof(int) &&
               sizeof(tfm_rope) == sizeof(int) &&
               sizeof(tfm_relative) == sizeof(int) &&
               sizeof(tfm_sparsity) == sizeof(int),
               "tfm_attention_config enums are int-sized");

typedef enum key_type {
    KEY_ENUM,   /* int, one of the names of an enum (names.h) */
    KEY_BOOL,   /* int, "true" / "false" */
    KEY_INT,    /* int64_t >= 0 */
    KEY_FLOAT,  /* float, finite */
    KEY_DOUBLE, /* double, finite */
    KEY_U64     /* uint64_t */
} key_type;

typedef struct attention_key {
    const char *key;
    key_type type;
    size_t offset, size;            /* of the field in tfm_attention_config */
    tfm_enum names;                 /* KEY_ENUM: whose names */
} attention_key;

#define FIELD(f)                                                              \
    offsetof(tfm_attention_config, f), sizeof(((tfm_attention_config *)0)->f)

static const attention_key ATTENTION_KEYS[] = {
    { "tfm.attention.score", KEY_ENUM, FIELD(score), TFM_ENUM_SCORE },
    { "tfm.attention.scale", KEY_FLOAT, FIELD(scale), 0 },
    { "tfm.attention.additive_dim", KEY_INT, FIELD(additive_dim), 0 },
    { "tfm.attention.n_kv_heads", KEY_INT, FIELD(n_kv_heads), 0 },
    { "tfm.attention.rope", KEY_ENUM, FIELD(rope), TFM_ENUM_ROPE },
    { "tfm.attention.rope_base", KEY_DOUBLE, FIELD(rope_base), 0 },
    { "tfm.attention.rope_dims", KEY_INT, FIELD(rope_dims), 0 },
    { "tfm.attention.relative", KEY_ENUM, FIELD(relative),
      TFM_ENUM_RELATIVE },
    { "tfm.attention.max_distance", KEY_INT, FIELD(max_distance), 0 },
    { "tfm.attention.relative_values", KEY_BOOL, FIELD(relative_values), 0 },
    { "tfm.attention.num_buckets", KEY_INT, FIELD(num_buckets), 0 },
    { "tfm.attention.bidirectional", KEY_BOOL, FIELD(bidirectional), 0 },
    { "tfm.attention.sparsity", KEY_ENUM, FIELD(sparsity),
      TFM_ENUM_SPARSITY },
    { "tfm.attention.window", KEY_INT, FIELD(window), 0 },
    { "tfm.attention.dilation", KEY_INT, FIELD(dilation), 0 },
    { "tfm.attention.n_global", KEY_INT, FIELD(n_global), 0 },
    { "tfm.attention.block_size", KEY_INT, FIELD(block_size), 0 },
    { "tfm.attention.n_random_blocks", KEY_INT, FIELD(n_random_blocks), 0 },
    { "tfm.attention.seed", KEY_U64, FIELD(seed), 0 },
};

#define N_ATTENTION_KEYS (sizeof ATTENTION_KEYS / sizeof ATTENTION_KEYS[0])

/* Refuses a key under "tfm.attention." that this library does not know
 * (a misspelt key, or a variant of a newer library): the file would
 * otherwise load as a different model without a word. */
static tfm_status check_attention_keys(const tfm_safetensors *f)
{
    static const char prefix[] = "tfm.attention.";
    const int64_t n = tfm_safetensors_metadata_count(f);
    for (int64_t e = 0; e < n; e++) {
        const char *key = tfm_safetensors_metadata_key(f, e);
        if (!key || strncmp(key, prefix, sizeof prefix - 1) != 0)
            continue;
        size_t i = 0;
        while (i < N_ATTENTION_KEYS && strcmp(ATTENTION_KEYS[i].key, key))
            i++;
        if (i == N_ATTENTION_KEYS)
            return tfm__fail(TFM_ERR_FORMAT,
                             "unknown metadata key \"%s\": this library "
                             "knows the \"tfm.attention.*\" keys of model.h "
                             "(a misspelling, or a variant of a newer "
                             "version?)", key);
    }
    return TFM_OK;
}

/* Reads the keys present into *a (absent ones keep their value). */
static tfm_status read_attention(const tfm_safetensors *f,
                                 tfm_attention_config *a)
{
    tfm_status known = check_attention_keys(f);
    if (known != TFM_OK)
        return known;
    for (size_t i = 0; i < N_ATTENTION_KEYS; i++) {
        const attention_key *k = &ATTENTION_KEYS[i];
        unsigned char *field = (unsigned char *)a + k->offset;
        tfm_status st = TFM_OK;
        int iv;
        double dv;
        switch (k->type) {
        case KEY_ENUM:
        case KEY_BOOL:
            memcpy(&iv, field, sizeof iv);
            st = k->type == KEY_ENUM
                     ? meta_enum(f, k->key, k->names, 0, &iv)
                     : meta_bool(f, k->key, &iv);
            memcpy(field, &iv, sizeof iv);
            break;
        case KEY_INT:
            st = meta_int(f, k->key, 0, (int64_t *)(void *)field);
            break;
        case KEY_FLOAT:
            dv = *(float *)(void *)field;
            st = meta_double(f, k->key, &dv);
            if (st == TFM_OK && fabs(dv) > 3.4028234663852886e38)
                st = tfm__fail(TFM_ERR_FORMAT,
                               "metadata \"%s\" = \"%s\" is out of the "
                               "float range", k->key,
                               tfm_safetensors_metadata(f, k->key));
            if (st == TFM_OK)
                *(float *)(void *)field = (float)dv;
            break;
        case KEY_DOUBLE:
            st = meta_double(f, k->key, (double *)(void *)field);
            break;
        case KEY_U64:
            st = meta_u64(f, k->key, (uint64_t *)(void *)field);
            break;
        }
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* The configuration and options of a model file; absent option keys keep
 * the defaults of tfm_model_options_init. */
static tfm_status read_config(const tfm_safetensors *f, tfm_model_config *c,
                              tfm_model_options *o)
{
    const char *format = tfm_safetensors_metadata(f, "format");
    if (!format || strcmp(format, "libtransformer") != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "not a libtransformer model file (metadata "
                         "\"format\" is %s%s%s, expected \"libtransformer\")",
                         format ? "\"" : "", format ? format : "missing",
                         format ? "\"" : "");
    memset(c, 0, sizeof *c);
    int arch = 0, pos = TFM_POSITIONAL_LEARNED, act = 0;
    int64_t d = 0, heads = 0;
    tfm_status st;
    if ((st = meta_enum(f, "tfm.architecture", TFM_ENUM_ARCHITECTURE, 1, &arch)) ||
        (st = meta_int(f, "tfm.d_model", 1, &d)) ||
        (st = meta_int(f, "tfm.n_heads", 1, &heads)))
        return st;
    c->architecture = (tfm_architecture)arch;
    c->layer = tfm_layer_config_default(d, heads);
    c->tied_embeddings = 1;
    const char *eps = tfm_safetensors_metadata(f, "tfm.layer_norm_eps");
    if (eps) {
        double x;
        if (tfm__parse_double(eps, &x) != TFM__NUMBER_OK || fabs(x) > FLT_MAX)
            return tfm__fail(TFM_ERR_FORMAT,
                             "metadata \"tfm.layer_norm_eps\" = \"%s\" is not "
                             "a finite number", eps);
        c->layer.layer_norm_eps = (float)x;
    }
    int enc_dec = c->architecture == TFM_ARCH_ENCODER_DECODER;
    if ((st = meta_int(f, "tfm.d_ff", 1, &c->layer.d_ff)) ||
        (st = meta_int(f, "tfm.vocab_size", 1, &c->vocab_size)) ||
        (st = meta_int(f, "tfm.context_length", 1, &c->context_length)) ||
        (st = meta_int(f, "tfm.n_layers", !enc_dec, &c->n_layers)) ||
        (st = meta_int(f, "tfm.n_encoder_layers", enc_dec,
                       &c->n_encoder_layers)) ||
        (st = meta_int(f, "tfm.n_decoder_layers", enc_dec,
                       &c->n_decoder_layers)) ||
        (st = meta_enum(f, "tfm.activation", TFM_ENUM_ACTIVATION, 0, &act)) ||
        (st = meta_enum(f, "tfm.positional", TFM_ENUM_POSITIONAL, 0, &pos)) ||
        (st = meta_bool(f, "tfm.norm_first", &c->layer.norm_first)) ||
        (st = meta_bool(f, "tfm.tied_embeddings", &c->tied_embeddings)) ||
        (st = meta_bool(f, "tfm.embedding_scale", &c->embedding_scale)))
        return st;
    c->layer.activation = (tfm_activation)act;
    c->positional = (tfm_positional)pos;
    tfm_model_options_init(o);
    if ((st = meta_double(f, "tfm.positional_base", &o->positional_base)))
        return st;
    return read_attention(f, &o->attention);
}

/* ---- loading -------------------------------------------------------------- */

/* "a, b, c" of the first rank values of dims, cut to size bytes. */
static void format_dims(char *out, size_t size, const int64_t *dims, int rank)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < rank && n < size; i++) {
        int w = snprintf(out + n, size - n, "%s%lld", i ? ", " : "",
                         (long long)dims[i]);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

/* The named tensor exists with the given shape. */
static tfm_status expect_shape(const tfm_safetensors *f, const char *name,
                               int rank, const int64_t *want)
{
    int r;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    if (tfm__model_file_tensor_shape(f, name, &r, shape) != TFM_OK)
        return tfm__fail(TFM_ERR_FORMAT,
                         "the configuration needs a tensor \"%s\" that the "
                         "file lacks", name);
    int same = r == rank;
    for (int i = 0; same && i < rank; i++)
        same = shape[i] == want[i];
    if (!same) {
        char has[96], needs[96];
        format_dims(has, sizeof has, shape, r);
        format_dims(needs, sizeof needs, want, rank);
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor \"%s\" has shape [%s], but the file's "
                         "configuration metadata (model.h: \"tfm.d_model\", "
                         "\"tfm.n_heads\", \"tfm.attention.*\", ...) gives "
                         "[%s]", name, has, needs);
    }
    return TFM_OK;
}

/* The named tensor exists with shape [a, b]. */
static tfm_status expect_tensor(const tfm_safetensors *f, const char *name,
                                int64_t a, int64_t b)
{
    const int64_t want[2] = { a, b };
    return expect_shape(f, name, 2, want);
}

typedef struct tensor_want {
    const char *name;
    int rank;
    int64_t shape[3];
} tensor_want;

/* The self-attention tensors of one layer (prefix "...<i>.self_attn.")
 * whose shapes the attention variant sets: the packed projection (key and
 * value rows n_kv_heads * d_k each) and the variant's own parameters
 * (variants.h). */
static tfm_status expect_attention(const tfm_safetensors *f,
                                   const char *prefix,
                                   const tfm_model_config *c,
                                   const tfm_model_options *o)
{
    const tfm_attention_config *a = &o->attention;
    const int64_t d = c->layer.d_model, H = c->layer.n_heads, dk = d / H;
    const int64_t kv = tfm__model_kv_dim(c, o);
    const int64_t da = a->additive_dim ? a->additive_dim : dk;
    const int64_t nb = a->num_buckets ? a->num_buckets : 32;
    tensor_want want[6];
    int n = 0;
    want[n++] = (tensor_want){ "in_proj_weight", 2,
                                       { d + 2 * kv, d, 0 } };
    if (a->score == TFM_SCORE_GENERAL) {
        want[n++] = (tensor_want){ "score_weight", 3, { H, dk, dk } };
    } else if (a->score == TFM_SCORE_ADDITIVE) {
        want[n++] = (tensor_want){ "additive_query", 3, { H, da, dk } };
        want[n++] = (tensor_want){ "additive_key", 3, { H, da, dk } };
        want[n++] = (tensor_want){ "additive_v", 2, { H, da, 0 } };
    } else if (a->score == TFM_SCORE_LEARNED_TEMPERATURE) {
        want[n++] = (tensor_want){ "temperature", 1, { H, 0, 0 } };
    }
    if (a->relative == TFM_RELATIVE_SHAW) {
        if (a->max_distance > (INT64_MAX - 1) / 2)
            return tfm__fail(TFM_ERR_FORMAT,
                             "metadata \"tfm.attention.max_distance\" = %lld "
                             "is too large", (long long)a->max_distance);
        const int64_t rows = 2 * a->max_distance + 1;
        want[n++] = (tensor_want){ "relative_key.weight", 2,
                                           { rows, dk, 0 } };
        if (a->relative_values)
            want[n++] = (tensor_want){ "relative_value.weight", 2,
                                               { rows, dk, 0 } };
    } else if (a->relative == TFM_RELATIVE_T5) {
        want[n++] = (tensor_want){ "relative_attention_bias.weight", 2,
                                           { nb, H, 0 } };
    }
    for (int i = 0; i < n; i++) {
        char name[224];
        snprintf(name, sizeof name, "%s%s", prefix, want[i].name);
        tfm_status st = expect_shape(f, name, want[i].rank, want[i].shape);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* A stack of n layers under `stack` ("layers." or "transformer.encoder.layers."):
 * its last layer exists (with the attention tensors the options give) and
 * the next one does not. */
static tfm_status expect_layers(const tfm_safetensors *f, const char *stack,
                                int64_t n, const tfm_model_config *c,
                                const tfm_model_options *o, int gated)
{
    char name[160];
    snprintf(name, sizeof name, "%s%lld.linear1.weight", stack,
             (long long)(n - 1));
    tfm_status st = expect_tensor(f, name, c->layer.d_ff, c->layer.d_model);
    if (st != TFM_OK)
        return st;
    snprintf(name, sizeof name, "%s%lld.linear3.weight", stack,
             (long long)(n - 1));
    if (gated &&
        (st = expect_tensor(f, name, c->layer.d_ff, c->layer.d_model)))
        return st;
    snprintf(name, sizeof name, "%s%lld.self_attn.", stack, (long long)(n - 1));
    if ((st = expect_attention(f, name, c, o)) != TFM_OK)
        return st;
    snprintf(name, sizeof name, "%s%lld.linear1.weight", stack, (long long)n);
    if (tfm_safetensors_info(f, name, NULL, NULL, NULL) == TFM_OK)
        return tfm__fail(TFM_ERR_FORMAT,
                         "the file has more layers under \"%s\" than the "
                         "configuration's %lld", stack, (long long)n);
    return TFM_OK;
}

/* Before anything is allocated for it, the configuration must agree with
 * the tensors the file really holds (whose sizes the reader has checked
 * against the file's length): metadata alone cannot make the library
 * reserve memory the file does not justify.  c and o are already checked
 * (tfm__model_config_check). */
static tfm_status check_config_against_tensors(const tfm_safetensors *f,
                                               const tfm_model_config *c,
                                               const tfm_model_options *o,
                                               const tfm_layer_options *lo)
{
    const int64_t d = c->layer.d_model;
    const int gated = lo->gated;
    /* An image model (ViT) has patches instead of a token table; the
     * patch embedding's and class token's shapes are checked when they
     * are read (they are small next to the blocks checked here). */
    tfm_status st = lo->patch_size > 0
                        ? TFM_OK
                        : expect_tensor(f, "token_embedding.weight",
                                        c->vocab_size, d);
    if (st == TFM_OK && c->positional == TFM_POSITIONAL_LEARNED)
        st = expect_tensor(f, "position_embedding.weight", c->context_length,
                           d);
    if (st == TFM_OK && lo->type_vocab_size > 0)
        st = expect_tensor(f, "token_type_embedding.weight",
                           lo->type_vocab_size, d);
    if (st == TFM_OK && (lo->head_transform || lo->head_bias)) {
        const int64_t vocab[1] = { c->vocab_size };
        st = expect_shape(f, "lm_head.bias", 1, vocab);
    }
    if (st != TFM_OK)
        return st;
    if (c->architecture == TFM_ARCH_ENCODER_DECODER) {
        if (c->n_encoder_layers < 1 || c->n_decoder_layers < 1)
            return TFM_OK; /* tfm_model_create gives the precise error */
        st = expect_layers(f, "transformer.encoder.layers.",
                           c->n_encoder_layers, c, o, gated);
        return st != TFM_OK
                   ? st
                   : expect_layers(f, "transformer.decoder.layers.",
                                   c->n_decoder_layers, c, o, gated);
    }
    return c->n_layers < 1 ? TFM_OK
                           : expect_layers(f, "layers.", c->n_layers, c, o,
                                           gated);
}

/* The learned parameters a forward pass checks (variant.h: temperatures
 * finite and > 0) hold valid values in every block: a file whose model
 * would load but then refuse every forward pass is malformed
 * (TFM_ERR_FORMAT, naming the tensor). */
static tfm_status check_variant_params(const tfm_module *model)
{
    const tfm__model *m = (const tfm__model *)model;
    const tfm__stack *s = m->stack;
    for (int64_t i = 0; s && i < s->n_layers; i++) {
        const tfm__encoder_layer *l = (const tfm__encoder_layer *)s->layers[i];
        if (tfm__variant_check_params(&l->self_attn->var) != TFM_OK) {
            char why[160];
            snprintf(why, sizeof why, "%s", tfm_last_error());
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor \"layers.%lld.self_attn.temperature\": "
                             "%s", (long long)i, why);
        }
    }
    return TFM_OK;
}

tfm_status tfm_model_load(const char *path, tfm_module **out)
{
    /* Every weight float32 in the model's own memory (as before 1.3),
     * except a GGUF file's, kept as the file stores them. */
    tfm_load_options o;
    tfm_load_options_init(&o);
    o.mmap = 0;
    return tfm__model_load_with(path, &o, 1, out);
}

tfm_status tfm_model_load_v2(const char *path, const tfm_load_options *options,
                             tfm_module **out)
{
    tfm_load_options o;
    tfm_status st = tfm__load_options_read(options, &o);
    return st != TFM_OK ? st : tfm__model_load_with(path, &o, 0, out);
}

tfm_status tfm__model_load_with(const char *path, const tfm_load_options *lo_,
                                int v1, tfm_module **out)
{
    if (!path || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !path ? "path" : "out");
    (void)v1;
    struct stat dir;
    if (stat(path, &dir) == 0 && S_ISDIR(dir.st_mode)) {
        /* A hub checkpoint (formats/hub/hub_model.c). */
        return tfm__hub_model_load(path, lo_->dtype, lo_->mmap, out);
    }
    tfm_safetensors *f = NULL;
    tfm_module *model = NULL;
    tfm_model_config c;
    tfm_model_options o;
    tfm_layer_options lo;
    tfm_layer_options_init(&lo);
    tfm_status st = tfm_safetensors_open(path, &f);
    if (!st && (st = read_config(f, &c, &o)) == TFM_OK &&
        (st = meta_bool(f, "tfm.bias", &lo.bias)) == TFM_OK &&
        (st = meta_bool(f, "tfm.rms_norm", &lo.rms_norm)) == TFM_OK &&
        (st = meta_bool(f, "tfm.gated", &lo.gated)) == TFM_OK &&
        (st = meta_int(f, "tfm.type_vocab_size", 0, &lo.type_vocab_size)) ==
            TFM_OK &&
        (st = meta_bool(f, "tfm.embedding_norm", &lo.embedding_norm)) ==
            TFM_OK &&
        (st = meta_bool(f, "tfm.final_norm", &lo.final_norm)) == TFM_OK &&
        (st = meta_bool(f, "tfm.head_transform", &lo.head_transform)) ==
            TFM_OK &&
        (st = meta_bool(f, "tfm.head_bias", &lo.head_bias)) == TFM_OK &&
        (st = meta_int(f, "tfm.patch_size", 0, &lo.patch_size)) == TFM_OK &&
        (st = meta_int(f, "tfm.image_size", 0, &lo.image_size)) == TFM_OK &&
        (st = meta_int(f, "tfm.num_channels", 0, &lo.num_channels)) ==
            TFM_OK &&
        (st = tfm__model_config_check(&c, &o)) == TFM_OK &&
        (st = check_config_against_tensors(f, &c, &o, &lo)) == TFM_OK &&
        (st = tfm_model_create_v2(&c, &o, &lo, &model)) == TFM_OK &&
        (st = (tfm__model_file_has_blocks(f) || lo_->mmap ||
               lo_->dtype != TFM_DTYPE_F32)
                  ? tfm__model_file_load_params(model, f, lo_->dtype,
                                                lo_->mmap)
                  : tfm__load_parameters(model, f, "", 1)) == TFM_OK)
        st = check_variant_params(model);
    tfm_safetensors_close(f);
    if (st != TFM_OK) {
        tfm_module_free(model);
        return st;
    }
    *out = model;
    return TFM_OK;
}

/* ---- saving ----------------------------------------------------------------- */

static tfm_status set_int(tfm_safetensors_writer *w, const char *key,
                          int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return tfm_safetensors_writer_set_metadata(w, key, buf);
}

/* The shortest decimal form of v that reads back as the same double. */
static void format_double(char *buf, size_t size, double v)
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* The "tfm.attention.*" keys whose values differ from the defaults, and
 * "tfm.positional_base" when not 10000: a model with default options gets
 * no key, so its metadata is what it was before these options existed. */
static tfm_status write_options(tfm_safetensors_writer *w,
                                const tfm_model_options *o)
{
    tfm_model_options def;
    tfm_model_options_init(&def);
    char buf[40];
    tfm_status st;
    if (o->positional_base != def.positional_base) {
        format_double(buf, sizeof buf, o->positional_base);
        if ((st = tfm_safetensors_writer_set_metadata(
                 w, "tfm.positional_base", buf)))
            return st;
    }
    for (size_t i = 0; i < N_ATTENTION_KEYS; i++) {
        const attention_key *k = &ATTENTION_KEYS[i];
        const unsigned char *field = (const unsigned char *)&o->attention +
                                     k->offset;
        if (memcmp(field, (const unsigned char *)&def.attention + k->offset,
                   k->size) == 0)
            continue;
        const char *value = buf;
        int iv;
        switch (k->type) {
        case KEY_ENUM:
            memcpy(&iv, field, sizeof iv);
            value = tfm_enum_name(k->names, iv);
            value = value ? value : "?";
            break;
        case KEY_BOOL:
            memcpy(&iv, field, sizeof iv);
            value = iv ? "true" : "false";
            break;
        case KEY_INT:
            snprintf(buf, sizeof buf, "%lld",
                     (long long)*(const int64_t *)(const void *)field);
            break;
        case KEY_FLOAT:
            format_double(buf, sizeof buf,
                          (double)*(const float *)(const void *)field);
            break;
        case KEY_DOUBLE:
            format_double(buf, sizeof buf,
                          *(const double *)(const void *)field);
            break;
        case KEY_U64:
            snprintf(buf, sizeof buf, "%llu",
                     (unsigned long long)*(const uint64_t *)(const void *)
                         field);
            break;
        }
        if ((st = tfm_safetensors_writer_set_metadata(w, k->key, value)))
            return st;
    }
    return TFM_OK;
}

static tfm_status write_config(tfm_safetensors_writer *w,
                               const tfm_model_config *c,
                               const tfm_model_options *o)
{
    char eps[32];
    snprintf(eps, sizeof eps, "%.9g", (double)c->layer.layer_norm_eps);
    tfm_status st;
    if ((st = tfm_safetensors_writer_set_metadata(w, "format",
                                                  "libtransformer")) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.architecture",
             tfm_enum_name(TFM_ENUM_ARCHITECTURE, c->architecture))) ||
        (st = set_int(w, "tfm.vocab_size", c->vocab_size)) ||
        (st = set_int(w, "tfm.d_model", c->layer.d_model)) ||
        (st = set_int(w, "tfm.n_heads", c->layer.n_heads)) ||
        (st = set_int(w, "tfm.d_ff", c->layer.d_ff)) ||
        (st = set_int(w, "tfm.context_length", c->context_length)) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.norm_first", c->layer.norm_first ? "true" : "false")) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.activation",
             tfm_enum_name(TFM_ENUM_ACTIVATION, c->layer.activation))) ||
        (st = tfm_safetensors_writer_set_metadata(w, "tfm.layer_norm_eps",
                                                  eps)) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.positional",
             tfm_enum_name(TFM_ENUM_POSITIONAL, c->positional))) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.tied_embeddings", c->tied_embeddings ? "true" : "false")) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.embedding_scale", c->embedding_scale ? "true" : "false")))
        return st;
    if (c->architecture == TFM_ARCH_ENCODER_DECODER) {
        if ((st = set_int(w, "tfm.n_encoder_layers", c->n_encoder_layers)) ||
            (st = set_int(w, "tfm.n_decoder_layers", c->n_decoder_layers)))
            return st;
    } else if ((st = set_int(w, "tfm.n_layers", c->n_layers))) {
        return st;
    }
    return write_options(w, o);
}

/* Whether key is one of the file's own: "format" or a configuration key
 * this library writes or reads (model.h's list, "tfm.attention.*"). */
static int reserved_key(const char *key)
{
    static const char *const OWN[] = {
        "format", "tfm.architecture", "tfm.vocab_size", "tfm.d_model",
        "tfm.n_heads", "tfm.d_ff", "tfm.context_length", "tfm.norm_first",
        "tfm.activation", "tfm.layer_norm_eps", "tfm.positional",
        "tfm.tied_embeddings", "tfm.embedding_scale", "tfm.n_layers",
        "tfm.n_encoder_layers", "tfm.n_decoder_layers",
        "tfm.positional_base", "tfm.bias", "tfm.rms_norm", "tfm.gated",
        "tfm.type_vocab_size", "tfm.embedding_norm", "tfm.final_norm",
        "tfm.head_transform", "tfm.head_bias"
    };
    static const char attention[] = "tfm.attention.";
    if (strncmp(key, attention, sizeof attention - 1) == 0 ||
        strncmp(key, TFM__DTYPE_KEY, sizeof TFM__DTYPE_KEY - 1) == 0)
        return 1;
    for (size_t i = 0; i < sizeof OWN / sizeof OWN[0]; i++)
        if (strcmp(key, OWN[i]) == 0)
            return 1;
    return 0;
}

tfm_status tfm_model_save(const tfm_module *model, const char *path,
                          int n_extra, const char *const *keys,
                          const char *const *values)
{
    tfm_status st = tfm__model_check(model, 0xE, "model");
    if (st != TFM_OK)
        return st;
    if (!path)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "path is NULL");
    if (n_extra < 0 || (n_extra > 0 && (!keys || !values)))
        return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                         "n_extra is %d but keys or values is NULL", n_extra);
    for (int i = 0; i < n_extra; i++) {
        if (!keys[i] || !values[i])
            return tfm__fail(TFM_ERR_NULL_ARGUMENT,
                             "extra metadata %d has a NULL %s", i,
                             !keys[i] ? "key" : "value");
        if (reserved_key(keys[i]))
            return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                             "extra metadata key \"%.60s\" is the model "
                             "file's own (its configuration, model.h): the "
                             "model's value is written", keys[i]);
    }
    const tfm__model *m = (const tfm__model *)model;
    tfm_safetensors_writer *w = NULL;
    if ((st = tfm_safetensors_writer_create(&w)))
        return st;
    /* Each parameter in its stored type (model_file_weights.h). */
    st = tfm__model_file_add_params(w, model);
    if (!st)
        st = write_config(w, &m->config, &m->options);
    if (!st && !m->bias) /* absent: biases (files before 1.2 have them) */
        st = tfm_safetensors_writer_set_metadata(w, "tfm.bias", "false");
    if (!st && m->rms_norm) /* absent: LayerNorm */
        st = tfm_safetensors_writer_set_metadata(w, "tfm.rms_norm", "true");
    if (!st && m->gated) /* absent: the plain feed-forward */
        st = tfm_safetensors_writer_set_metadata(w, "tfm.gated", "true");
    /* BERT's model parts, each absent when not there (files before 1.2
     * have none): */
    if (!st && m->token_type_embedding)
        st = set_int(w, "tfm.type_vocab_size",
                     m->token_type_embedding->n_rows);
    if (!st && m->embedding_norm)
        st = tfm_safetensors_writer_set_metadata(w, "tfm.embedding_norm",
                                                 "true");
    if (!st && !m->final_norm)
        st = tfm_safetensors_writer_set_metadata(w, "tfm.final_norm",
                                                 "false");
    if (!st && m->head_transform)
        st = tfm_safetensors_writer_set_metadata(w, "tfm.head_transform",
                                                 "true");
    else if (!st && m->lm_head_bias) /* Marian's logits bias alone */
        st = tfm_safetensors_writer_set_metadata(w, "tfm.head_bias", "true");
    if (!st && m->patch_embedding) /* ViT's image input */
        st = set_int(w, "tfm.patch_size", m->patch_embedding->patch_size);
    if (!st && m->patch_embedding)
        st = set_int(w, "tfm.image_size", m->patch_embedding->image_size);
    if (!st && m->patch_embedding)
        st = set_int(w, "tfm.num_channels", m->patch_embedding->in_channels);
    for (int i = 0; !st && i < n_extra; i++)
        st = tfm_safetensors_writer_set_metadata(w, keys[i], values[i]);
    if (!st)
        st = tfm_safetensors_writer_save(w, path);
    tfm_safetensors_writer_free(w);
    return st;
}
