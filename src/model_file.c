/* Model files: safetensors with the configuration in "__metadata__"
 * (model.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "checkpoint.h"
#include "model_impl.h"
#include "tensor_impl.h"
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
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end != '\0' || n < 0)
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

/* Looks value up in names[0..n-1]; *out = its index. */
static tfm_status meta_enum(const tfm_safetensors *f, const char *key,
                            const char *const *names, int n, int required,
                            int *out)
{
    const char *v = tfm_safetensors_metadata(f, key);
    if (!v)
        return required ? tfm__fail(TFM_ERR_FORMAT,
                                    "model file lacks metadata \"%s\"", key)
                        : TFM_OK;
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(v, names[i]) == 0) {
            *out = i;
            return TFM_OK;
        }
    return tfm__fail(TFM_ERR_FORMAT, "metadata \"%s\" has unknown value \"%s\"",
                     key, v);
}

static const char *const ARCHS[] = { NULL, "decoder_only", "encoder_only",
                                     "encoder_decoder" };
static const char *const POSITIONALS[] = { "none", "learned", "sinusoidal" };
static const char *const ACTIVATIONS[] = { "relu", "gelu", "gelu_tanh" };

static tfm_status read_config(const tfm_safetensors *f, tfm_model_config *c)
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
    if ((st = meta_enum(f, "tfm.architecture", ARCHS, 4, 1, &arch)) ||
        (st = meta_int(f, "tfm.d_model", 1, &d)) ||
        (st = meta_int(f, "tfm.n_heads", 1, &heads)))
        return st;
    c->architecture = (tfm_architecture)arch;
    c->layer = tfm_layer_config_default(d, heads);
    c->tied_embeddings = 1;
    const char *eps = tfm_safetensors_metadata(f, "tfm.layer_norm_eps");
    if (eps) {
        char *end;
        c->layer.layer_norm_eps = strtof(eps, &end);
        if (end == eps || *end != '\0')
            return tfm__fail(TFM_ERR_FORMAT,
                             "metadata \"tfm.layer_norm_eps\" = \"%s\" is not "
                             "a number", eps);
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
        (st = meta_enum(f, "tfm.activation", ACTIVATIONS, 3, 0, &act)) ||
        (st = meta_enum(f, "tfm.positional", POSITIONALS, 3, 0, &pos)) ||
        (st = meta_bool(f, "tfm.norm_first", &c->layer.norm_first)) ||
        (st = meta_bool(f, "tfm.tied_embeddings", &c->tied_embeddings)) ||
        (st = meta_bool(f, "tfm.embedding_scale", &c->embedding_scale)))
        return st;
    c->layer.activation = (tfm_activation)act;
    c->positional = (tfm_positional)pos;
    return TFM_OK;
}

/* ---- loading -------------------------------------------------------------- */

/* The named tensor exists with shape [a, b]. */
static tfm_status expect_tensor(const tfm_safetensors *f, const char *name,
                                int64_t a, int64_t b)
{
    int rank;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    if (tfm_safetensors_info(f, name, NULL, &rank, shape) != TFM_OK)
        return tfm__fail(TFM_ERR_FORMAT,
                         "the configuration needs a tensor \"%s\" that the "
                         "file lacks", name);
    if (rank != 2 || shape[0] != a || shape[1] != b)
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor \"%s\" does not have the shape [%lld, %lld] "
                         "the configuration gives", name, (long long)a,
                         (long long)b);
    return TFM_OK;
}

/* A stack of n layers under `stack` ("layers." or "transformer.encoder.layers."):
 * its last layer exists and the next one does not. */
static tfm_status expect_layers(const tfm_safetensors *f, const char *stack,
                                int64_t n, const tfm_model_config *c)
{
    char name[160];
    snprintf(name, sizeof name, "%s%lld.linear1.weight", stack,
             (long long)(n - 1));
    tfm_status st = expect_tensor(f, name, c->layer.d_ff, c->layer.d_model);
    if (st != TFM_OK)
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
 * reserve memory the file does not justify. */
static tfm_status check_config_against_tensors(const tfm_safetensors *f,
                                               const tfm_model_config *c)
{
    if (c->layer.d_model < 1 || c->layer.d_ff < 1 || c->vocab_size < 1 ||
        c->context_length < 1)
        return TFM_OK; /* tfm_model_create gives the precise error */
    const int64_t d = c->layer.d_model;
    tfm_status st = expect_tensor(f, "token_embedding.weight", c->vocab_size, d);
    if (st == TFM_OK && c->positional == TFM_POSITIONAL_LEARNED)
        st = expect_tensor(f, "position_embedding.weight", c->context_length,
                           d);
    if (st != TFM_OK)
        return st;
    if (c->architecture == TFM_ARCH_ENCODER_DECODER) {
        if (c->n_encoder_layers < 1 || c->n_decoder_layers < 1)
            return TFM_OK;
        st = expect_layers(f, "transformer.encoder.layers.",
                           c->n_encoder_layers, c);
        return st != TFM_OK ? st
                            : expect_layers(f, "transformer.decoder.layers.",
                                            c->n_decoder_layers, c);
    }
    return c->n_layers < 1 ? TFM_OK : expect_layers(f, "layers.", c->n_layers, c);
}

tfm_status tfm_model_load(const char *path, tfm_module **out)
{
    if (!path || !out)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !path ? "path" : "out");
    tfm_safetensors *f = NULL;
    tfm_module *model = NULL;
    tfm_model_config c;
    tfm_status st = tfm_safetensors_open(path, &f);
    if (!st && (st = read_config(f, &c)) == TFM_OK &&
        (st = check_config_against_tensors(f, &c)) == TFM_OK &&
        (st = tfm_model_create(&c, &model)) == TFM_OK)
        st = tfm__load_parameters(model, f, "", 1);
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

static tfm_status write_config(tfm_safetensors_writer *w,
                               const tfm_model_config *c)
{
    char eps[32];
    snprintf(eps, sizeof eps, "%.9g", (double)c->layer.layer_norm_eps);
    tfm_status st;
    if ((st = tfm_safetensors_writer_set_metadata(w, "format",
                                                  "libtransformer")) ||
        (st = tfm_safetensors_writer_set_metadata(w, "tfm.architecture",
                                                  ARCHS[c->architecture])) ||
        (st = set_int(w, "tfm.vocab_size", c->vocab_size)) ||
        (st = set_int(w, "tfm.d_model", c->layer.d_model)) ||
        (st = set_int(w, "tfm.n_heads", c->layer.n_heads)) ||
        (st = set_int(w, "tfm.d_ff", c->layer.d_ff)) ||
        (st = set_int(w, "tfm.context_length", c->context_length)) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.norm_first", c->layer.norm_first ? "true" : "false")) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.activation", ACTIVATIONS[c->layer.activation])) ||
        (st = tfm_safetensors_writer_set_metadata(w, "tfm.layer_norm_eps",
                                                  eps)) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.positional", POSITIONALS[c->positional])) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.tied_embeddings", c->tied_embeddings ? "true" : "false")) ||
        (st = tfm_safetensors_writer_set_metadata(
             w, "tfm.embedding_scale", c->embedding_scale ? "true" : "false")))
        return st;
    if (c->architecture == TFM_ARCH_ENCODER_DECODER) {
        if ((st = set_int(w, "tfm.n_encoder_layers", c->n_encoder_layers)))
            return st;
        return set_int(w, "tfm.n_decoder_layers", c->n_decoder_layers);
    }
    return set_int(w, "tfm.n_layers", c->n_layers);
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
    const tfm__model *m = (const tfm__model *)model;
    tfm_safetensors_writer *w = NULL;
    if ((st = tfm_safetensors_writer_create(&w)))
        return st;
    for (int i = 0; !st && i < model->n_params; i++) {
        const tfm__param *p = &model->params[i];
        tfm_tensor *t = NULL;
        if (!(st = tfm_tensor_wrap(p->rank, p->shape, p->data, &t)))
            st = tfm_safetensors_writer_add(w, p->name, t);
        tfm_tensor_free(t);
    }
    if (!st)
        st = write_config(w, &m->config);
    for (int i = 0; !st && i < n_extra; i++)
        st = tfm_safetensors_writer_set_metadata(w, keys[i], values[i]);
    if (!st)
        st = tfm_safetensors_writer_save(w, path);
    tfm_safetensors_writer_free(w);
    return st;
}
