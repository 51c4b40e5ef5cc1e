/*
 * PyTorch reference cases: every *.safetensors file in a directory (argv[1],
 * or TFM_FIXTURES_DIR) is one CMocka test named after the file.
 *
 * A case file (written by tools/make_fixtures.py) holds the module's
 * parameters ("param.<PyTorch name>"), its inputs and masks ("input.*"),
 * PyTorch's float64 output rounded to float32 ("output.out", and
 * "output.weights" for attention weights), and metadata saying how to build
 * and call the module.  The test builds the module through the public API,
 * sets every parameter (and checks that the module has exactly the file's
 * parameters), runs the forward pass and compares:
 *     relative error = max |ours - ref| / max |ref|  <=  1e-5.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/attention.h>
#include <transformer/layers.h>
#include <transformer/module.h>
#include <transformer/safetensors.h>
#include <transformer/tensor.h>

#ifndef TFM_FIXTURES_DIR
#error "TFM_FIXTURES_DIR must name the default fixtures directory"
#endif

#define REL_TOLERANCE 1e-5
#define MAX_OWNED 32               /* inputs, masks, outputs */
#define MAX_CONSUMED 64
#define NAME_MAX_LEN 256

/* ---- one case: everything it opens or allocates -------------------------- */

typedef struct fixture {
    const char *path;
    const char *name;                 /* file name without ".safetensors" */
    tfm_safetensors *file;
    tfm_module *module;
    tfm_tensor *owned[MAX_OWNED];     /* freed by fixture_close */
    int n_owned;
    char consumed[MAX_CONSUMED][NAME_MAX_LEN]; /* input.* / output.* read */
    int n_consumed;
    char msg[2048];                   /* why the case failed */
} fixture;

typedef struct mask_group {
    tfm_attention_masks masks;
    int present;                      /* any mask or causal mode set */
} mask_group;

static int failf(fixture *fx, const char *fmt, ...)
    CMOCKA_PRINTF_ATTRIBUTE(2, 3);

/* Records why the case failed; always returns -1. */
static int failf(fixture *fx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fx->msg, sizeof fx->msg, fmt, ap);
    va_end(ap);
    return -1;
}

/* Fails with the library's status and last-error message. */
static int fail_status(fixture *fx, const char *what, tfm_status st)
{
    return failf(fx, "%s failed: %s (%d): %s", what, tfm_status_string(st),
                 (int)st, tfm_last_error());
}

#define TRY(expr)                                                             \
    do {                                                                      \
        if ((expr) != 0)                                                      \
            return -1;                                                        \
    } while (0)

static int own(fixture *fx, tfm_tensor *t)
{
    if (fx->n_owned >= MAX_OWNED) {
        tfm_tensor_free(t);
        return failf(fx, "test driver: more than %d tensors", MAX_OWNED);
    }
    fx->owned[fx->n_owned++] = t;
    return 0;
}

static void fixture_close(fixture *fx)
{
    for (int i = 0; i < fx->n_owned; i++)
        tfm_tensor_free(fx->owned[i]);
    fx->n_owned = 0;
    tfm_module_free(fx->module);
    fx->module = NULL;
    tfm_safetensors_close(fx->file);
    fx->file = NULL;
}

/* ---- metadata -------------------------------------------------------------- */

static const char *meta(const fixture *fx, const char *key)
{
    return tfm_safetensors_metadata(fx->file, key);
}

/* Required metadata `key`, all of it a number: an integer into *i when i is
 * given, else a float into *f. */
static int meta_number(fixture *fx, const char *key, int64_t *i, float *f)
{
    const char *s = meta(fx, key);
    if (s == NULL)
        return failf(fx, "metadata \"%s\" missing", key);
    char *end = NULL;
    errno = 0;
    long long iv = i ? strtoll(s, &end, 10) : 0;
    float fv = i ? 0.0f : strtof(s, &end);
    if (errno != 0 || end == s || *end != '\0')
        return failf(fx, "metadata \"%s\" = \"%s\" is not %s", key, s,
                     i ? "an integer" : "a number");
    if (i)
        *i = (int64_t)iv;
    else
        *f = fv;
    return 0;
}

static int meta_i64(fixture *fx, const char *key, int64_t *out)
{
    return meta_number(fx, key, out, NULL);
}

static int meta_i64_or(fixture *fx, const char *key, int64_t dflt,
                       int64_t *out)
{
    if (meta(fx, key) == NULL) {
        *out = dflt;
        return 0;
    }
    return meta_i64(fx, key, out);
}

static int meta_float(fixture *fx, const char *key, float *out)
{
    return meta_number(fx, key, NULL, out);
}

static int meta_activation(fixture *fx, tfm_activation *out)
{
    const char *s = meta(fx, "activation");
    if (s == NULL)
        return failf(fx, "metadata \"activation\" missing");
    if (strcmp(s, "relu") == 0)
        *out = TFM_ACTIVATION_RELU;
    else if (strcmp(s, "gelu") == 0)
        *out = TFM_ACTIVATION_GELU;
    else if (strcmp(s, "gelu_tanh") == 0)
        *out = TFM_ACTIVATION_GELU_TANH;
    else
        return failf(fx, "unknown activation \"%s\"", s);
    return 0;
}

/* tfm_layer_config_default, then the fields the file gives. */
static int layer_config(fixture *fx, tfm_layer_config *cfg)
{
    int64_t d_model, n_heads, norm_first;
    TRY(meta_i64(fx, "d_model", &d_model));
    TRY(meta_i64(fx, "n_heads", &n_heads));
    *cfg = tfm_layer_config_default(d_model, n_heads);
    if (meta(fx, "d_ff") != NULL)
        TRY(meta_i64(fx, "d_ff", &cfg->d_ff));
    if (meta(fx, "activation") != NULL)
        TRY(meta_activation(fx, &cfg->activation));
    TRY(meta_float(fx, "layer_norm_eps", &cfg->layer_norm_eps));
    TRY(meta_i64(fx, "norm_first", &norm_first));
    cfg->norm_first = (int)norm_first;
    return 0;
}

/* ---- tensors ------------------------------------------------------------- */

static int has_tensor(const fixture *fx, const char *name)
{
    return tfm_safetensors_info(fx->file, name, NULL, NULL, NULL) == TFM_OK;
}

static int mark_consumed(fixture *fx, const char *name)
{
    if (fx->n_consumed >= MAX_CONSUMED || strlen(name) >= NAME_MAX_LEN)
        return failf(fx, "test driver: too many or too long tensor names");
    strcpy(fx->consumed[fx->n_consumed++], name);
    return 0;
}

/* Reads a required tensor; the fixture owns it. */
static int read_tensor(fixture *fx, const char *name, tfm_tensor **out)
{
    tfm_tensor *t = NULL;
    tfm_status st = tfm_safetensors_read(fx->file, name, &t);
    if (st == TFM_ERR_NOT_FOUND)
        return failf(fx, "tensor \"%s\" missing from the file", name);
    if (st != TFM_OK)
        return fail_status(fx, name, st);
    TRY(own(fx, t));
    TRY(mark_consumed(fx, name));
    *out = t;
    return 0;
}

/* A new tensor of ref's shape, filled with NaN so that elements the
 * forward pass does not write show up as errors. */
static int new_like(fixture *fx, const tfm_tensor *ref, tfm_tensor **out)
{
    int64_t shape[TFM_MAX_RANK];
    int rank = tfm_tensor_rank(ref);
    for (int i = 0; i < rank; i++)
        shape[i] = tfm_tensor_dim(ref, i);
    tfm_tensor *t = NULL;
    tfm_status st = tfm_tensor_create(rank, shape, &t);
    if (st != TFM_OK)
        return fail_status(fx, "tfm_tensor_create", st);
    TRY(own(fx, t));
    float *data = tfm_tensor_data(t);
    for (int64_t i = 0; i < tfm_tensor_numel(t); i++)
        data[i] = NAN;
    *out = t;
    return 0;
}

/* ---- masks --------------------------------------------------------------- */

static int parse_kind(fixture *fx, const char *mask_name, tfm_mask_kind *out)
{
    char key[NAME_MAX_LEN];
    snprintf(key, sizeof key, "%s_kind", mask_name);
    const char *s = meta(fx, key);
    if (s == NULL)
        return failf(fx, "mask \"%s\" has no metadata \"%s\"", mask_name, key);
    if (strcmp(s, "block") == 0)
        *out = TFM_MASK_BLOCK;
    else if (strcmp(s, "allow") == 0)
        *out = TFM_MASK_ALLOW;
    else if (strcmp(s, "additive") == 0)
        *out = TFM_MASK_ADDITIVE;
    else
        return failf(fx, "metadata \"%s\" = \"%s\" is not block, allow or "
                         "additive", key, s);
    return 0;
}

/* Tensor input.<mask_name> and its kind, when the file has it (then sets
 * *present). */
static int load_mask(fixture *fx, const char *mask_name,
                     const tfm_tensor **mask, tfm_mask_kind *kind, int *present)
{
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "input.%s", mask_name);
    if (!has_tensor(fx, name))
        return 0;
    tfm_tensor *t = NULL;
    TRY(read_tensor(fx, name, &t));
    TRY(parse_kind(fx, mask_name, kind));
    *mask = t;
    *present = 1;
    return 0;
}

/* One attention call's masks: metadata causal_key (none | top_left |
 * bottom_right, absent = none), tensors input.<kpm_name> and
 * input.<attn_name> with kinds from metadata "<name>_kind". */
static int load_masks(fixture *fx, const char *causal_key,
                      const char *kpm_name, const char *attn_name,
                      mask_group *g)
{
    memset(g, 0, sizeof *g);
    const char *c = meta(fx, causal_key);
    if (c == NULL || strcmp(c, "none") == 0) {
        g->masks.causal = TFM_CAUSAL_NONE;
    } else if (strcmp(c, "top_left") == 0) {
        g->masks.causal = TFM_CAUSAL_TOP_LEFT;
        g->present = 1;
    } else if (strcmp(c, "bottom_right") == 0) {
        g->masks.causal = TFM_CAUSAL_BOTTOM_RIGHT;
        g->present = 1;
    } else {
        return failf(fx, "metadata \"%s\" = \"%s\" is not none, top_left or "
                         "bottom_right", causal_key, c);
    }

    TRY(load_mask(fx, kpm_name, &g->masks.key_padding_mask,
                  &g->masks.key_padding_kind, &g->present));
    TRY(load_mask(fx, attn_name, &g->masks.attn_mask,
                  &g->masks.attn_mask_kind, &g->present));
    return 0;
}

/* NULL when the group has no mask at all (exercises the NULL path). */
static const tfm_attention_masks *masks_arg(const mask_group *g)
{
    return g->present ? &g->masks : NULL;
}

/* ---- module construction and parameters ---------------------------------- */

static int create_module(fixture *fx, const char *kind)
{
    tfm_status st;
    tfm_layer_config cfg;
    int64_t d_model, n_heads, kdim, vdim, bias, d_ff, n, n2, final_norm;
    float eps;

    if (strcmp(kind, "mha") == 0) {
        TRY(meta_i64(fx, "d_model", &d_model));
        TRY(meta_i64(fx, "n_heads", &n_heads));
        TRY(meta_i64_or(fx, "kdim", 0, &kdim));
        TRY(meta_i64_or(fx, "vdim", 0, &vdim));
        TRY(meta_i64_or(fx, "bias", 1, &bias));
        int64_t bias_kv, zero_attn;
        TRY(meta_i64_or(fx, "add_bias_kv", 0, &bias_kv));
        TRY(meta_i64_or(fx, "add_zero_attn", 0, &zero_attn));
        if (bias_kv || zero_attn) {
            /* (since 1.2: PyTorch's add_bias_kv / add_zero_attn) */
            tfm_mha_options o;
            tfm_mha_options_init(&o);
            o.kdim = kdim;
            o.vdim = vdim;
            o.bias = (int)bias;
            o.add_bias_kv = (int)bias_kv;
            o.add_zero_attn = (int)zero_attn;
            st = tfm_mha_create_v2(d_model, n_heads, &o, &fx->module);
        } else {
            st = tfm_mha_create(d_model, n_heads, kdim, vdim, (int)bias,
                                &fx->module);
        }
    } else if (strcmp(kind, "layer_norm") == 0) {
        TRY(meta_i64(fx, "d_model", &d_model));
        TRY(meta_float(fx, "layer_norm_eps", &eps));
        st = tfm_layer_norm_create(d_model, eps, &fx->module);
    } else if (strcmp(kind, "feed_forward") == 0) {
        tfm_activation act;
        TRY(meta_i64(fx, "d_model", &d_model));
        TRY(meta_i64(fx, "d_ff", &d_ff));
        TRY(meta_activation(fx, &act));
        st = tfm_feed_forward_create(d_model, d_ff, act, &fx->module);
    } else if (strcmp(kind, "encoder_layer") == 0) {
        TRY(layer_config(fx, &cfg));
        st = tfm_encoder_layer_create(&cfg, &fx->module);
    } else if (strcmp(kind, "decoder_layer") == 0) {
        TRY(layer_config(fx, &cfg));
        st = tfm_decoder_layer_create(&cfg, &fx->module);
    } else if (strcmp(kind, "cross_attention") == 0) {
        TRY(layer_config(fx, &cfg));
        st = tfm_cross_attention_create(&cfg, &fx->module);
    } else if (strcmp(kind, "encoder") == 0 || strcmp(kind, "decoder") == 0) {
        TRY(layer_config(fx, &cfg));
        TRY(meta_i64(fx, "n_layers", &n));
        TRY(meta_i64(fx, "final_norm", &final_norm));
        st = strcmp(kind, "encoder") == 0
                 ? tfm_encoder_create(&cfg, n, (int)final_norm, &fx->module)
                 : tfm_decoder_create(&cfg, n, (int)final_norm, &fx->module);
    } else if (strcmp(kind, "transformer") == 0) {
        TRY(layer_config(fx, &cfg));
        TRY(meta_i64(fx, "n_encoder_layers", &n));
        TRY(meta_i64(fx, "n_decoder_layers", &n2));
        st = tfm_transformer_create(&cfg, n, n2, &fx->module);
    } else {
        return failf(fx, "unknown module \"%s\"", kind);
    }
    if (st != TFM_OK)
        return fail_status(fx, "creating the module", st);
    return 0;
}

/* Sets every param.* tensor and checks the module has exactly those. */
static int load_parameters(fixture *fx)
{
    static const char prefix[] = "param.";
    const size_t plen = sizeof prefix - 1;
    int n_file = 0;
    int64_t file_scalars = 0;
    int64_t count = tfm_safetensors_count(fx->file);

    for (int64_t i = 0; i < count; i++) {
        const char *name = tfm_safetensors_name(fx->file, i);
        if (name == NULL)
            return failf(fx, "tfm_safetensors_name(%lld) is NULL",
                         (long long)i);
        if (strncmp(name, prefix, plen) != 0)
            continue;
        tfm_tensor *t = NULL;
        tfm_status st = tfm_safetensors_read(fx->file, name, &t);
        if (st != TFM_OK)
            return fail_status(fx, name, st);
        /* set_parameter copies, so the tensor is freed at once. */
        int64_t numel = tfm_tensor_numel(t);
        st = tfm_module_set_parameter(fx->module, name + plen, t);
        tfm_tensor_free(t);
        if (st == TFM_ERR_NOT_FOUND)
            return failf(fx, "the file has parameter \"%s\" that the module "
                             "does not list (%s)", name + plen,
                         tfm_last_error());
        if (st != TFM_OK)
            return fail_status(fx, name, st);
        n_file++;
        file_scalars += numel;
    }

    int n_module = tfm_module_parameter_count(fx->module);
    for (int i = 0; i < n_module; i++) {
        const char *pname = tfm_module_parameter_name(fx->module, i);
        if (pname == NULL)
            return failf(fx, "tfm_module_parameter_name(%d) is NULL", i);
        char full[NAME_MAX_LEN];
        snprintf(full, sizeof full, "%s%s", prefix, pname);
        if (!has_tensor(fx, full))
            return failf(fx, "module parameter \"%s\" is not in the file "
                             "(left at its initial value)", pname);
    }
    if (n_module != n_file)
        return failf(fx, "module lists %d parameters, the file has %d",
                     n_module, n_file);
    int64_t n_scalars = tfm_module_num_parameters(fx->module);
    if (n_scalars != file_scalars)
        return failf(fx, "tfm_module_num_parameters = %lld, the file's "
                         "parameters hold %lld values",
                     (long long)n_scalars, (long long)file_scalars);
    return 0;
}

/* Every input.* and output.* tensor must have been used: a tensor the
 * driver does not know (a mask under a new name, say) would otherwise be
 * silently ignored and the case would test less than it claims. */
static int check_all_consumed(fixture *fx)
{
    int64_t count = tfm_safetensors_count(fx->file);
    for (int64_t i = 0; i < count; i++) {
        const char *name = tfm_safetensors_name(fx->file, i);
        if (strncmp(name, "param.", 6) == 0)
            continue;
        int found = 0;
        for (int j = 0; j < fx->n_consumed && !found; j++)
            found = strcmp(fx->consumed[j], name) == 0;
        if (!found)
            return failf(fx, "tensor \"%s\" is not used by the test driver",
                         name);
    }
    return 0;
}

/* ---- forward and comparison ---------------------------------------------- */

/* max |ours - ref| / max |ref|; NaN anywhere in ours gives infinity. */
static int compare(fixture *fx, const char *label, const tfm_tensor *ours,
                   const tfm_tensor *ref, double *rel)
{
    int64_t n = tfm_tensor_numel(ref);
    if (tfm_tensor_numel(ours) != n)
        return failf(fx, "%s: %lld elements, reference has %lld", label,
                     (long long)tfm_tensor_numel(ours), (long long)n);
    const float *a = tfm_tensor_data_const(ours);
    const float *b = tfm_tensor_data_const(ref);
    double max_diff = 0.0, max_ref = 0.0;
    int64_t worst = 0, n_nan = 0;
    for (int64_t i = 0; i < n; i++) {
        double diff = fabs((double)a[i] - (double)b[i]);
        if (isnan(a[i])) {
            n_nan++;
            diff = INFINITY;
        }
        if (diff > max_diff) {
            max_diff = diff;
            worst = i;
        }
        if (fabs((double)b[i]) > max_ref)
            max_ref = fabs((double)b[i]);
    }
    *rel = max_ref > 0.0 ? max_diff / max_ref : max_diff;
    print_message("  %-36s %-8s rel err %.3e  (max |ref| %.3g)\n", fx->name,
                  label, *rel, max_ref);
    if (!(*rel <= REL_TOLERANCE))
        return failf(fx, "%s: relative error %.3e > %.0e (max |ref| %.4g; "
                         "worst element %lld: ours %.9g, ref %.9g; "
                         "%lld NaN)", label, *rel, REL_TOLERANCE, max_ref,
                     (long long)worst, (double)a[worst], (double)b[worst],
                     (long long)n_nan);
    return 0;
}

static int run_case(fixture *fx)
{
    tfm_status st = tfm_safetensors_open(fx->path, &fx->file);
    if (st != TFM_OK)
        return fail_status(fx, "tfm_safetensors_open", st);

    const char *kind = meta(fx, "module");
    if (kind == NULL)
        return failf(fx, "metadata \"module\" missing");
    TRY(create_module(fx, kind));
    TRY(load_parameters(fx));

    tfm_tensor *ref = NULL, *out = NULL;
    tfm_tensor *ref_w = NULL, *weights = NULL;
    TRY(read_tensor(fx, "output.out", &ref));
    TRY(new_like(fx, ref, &out));

    tfm_tensor *a = NULL, *b = NULL, *c = NULL;
    mask_group g1, g2, g3;
    const char *what;

    if (strcmp(kind, "mha") == 0) {
        const char *w = meta(fx, "weights");
        if (w != NULL && strcmp(w, "none") != 0) {
            if (strcmp(w, "per_head") != 0 && strcmp(w, "average") != 0)
                return failf(fx, "metadata \"weights\" = \"%s\"", w);
            TRY(read_tensor(fx, "output.weights", &ref_w));
            TRY(new_like(fx, ref_w, &weights));
            int want_rank = strcmp(w, "per_head") == 0 ? 4 : 3;
            if (tfm_tensor_rank(ref_w) != want_rank)
                return failf(fx, "weights \"%s\" but output.weights has "
                                 "rank %d", w, tfm_tensor_rank(ref_w));
        }
        TRY(read_tensor(fx, "input.query", &a));
        TRY(read_tensor(fx, "input.key", &b));
        TRY(read_tensor(fx, "input.value", &c));
        TRY(load_masks(fx, "causal", "key_padding_mask", "attn_mask", &g1));
        if (has_tensor(fx, "input.static_k") ||
            has_tensor(fx, "input.static_v")) {
            /* F.multi_head_attention_forward's static_k / static_v */
            tfm_tensor *sk = NULL, *sv = NULL;
            if (has_tensor(fx, "input.static_k"))
                TRY(read_tensor(fx, "input.static_k", &sk));
            if (has_tensor(fx, "input.static_v"))
                TRY(read_tensor(fx, "input.static_v", &sv));
            what = "tfm_mha_forward_v2";
            st = tfm_mha_forward_v2(fx->module, a, sk ? NULL : b,
                                    sv ? NULL : c, sk, sv, masks_arg(&g1),
                                    out, weights);
        } else {
            what = "tfm_mha_forward";
            st = tfm_mha_forward(fx->module, a, b, c, masks_arg(&g1), out,
                                 weights);
        }
    } else if (strcmp(kind, "layer_norm") == 0) {
        TRY(read_tensor(fx, "input.x", &a));
        what = "tfm_layer_norm_forward";
        st = tfm_layer_norm_forward(fx->module, a, out);
    } else if (strcmp(kind, "feed_forward") == 0) {
        TRY(read_tensor(fx, "input.x", &a));
        what = "tfm_feed_forward_forward";
        st = tfm_feed_forward_forward(fx->module, a, out);
    } else if (strcmp(kind, "encoder_layer") == 0 ||
               strcmp(kind, "encoder") == 0) {
        TRY(read_tensor(fx, "input.src", &a));
        TRY(load_masks(fx, "src_causal", "src_key_padding_mask", "src_mask",
                       &g1));
        if (strcmp(kind, "encoder_layer") == 0) {
            what = "tfm_encoder_layer_forward";
            st = tfm_encoder_layer_forward(fx->module, a, masks_arg(&g1),
                                           out);
        } else {
            what = "tfm_encoder_forward";
            st = tfm_encoder_forward(fx->module, a, masks_arg(&g1), out);
        }
    } else if (strcmp(kind, "decoder_layer") == 0 ||
               strcmp(kind, "decoder") == 0) {
        TRY(read_tensor(fx, "input.tgt", &a));
        TRY(read_tensor(fx, "input.memory", &b));
        TRY(load_masks(fx, "tgt_causal", "tgt_key_padding_mask", "tgt_mask",
                       &g1));
        TRY(load_masks(fx, "memory_causal", "memory_key_padding_mask",
                       "memory_mask", &g2));
        if (strcmp(kind, "decoder_layer") == 0) {
            what = "tfm_decoder_layer_forward";
            st = tfm_decoder_layer_forward(fx->module, a, b, masks_arg(&g1),
                                           masks_arg(&g2), out);
        } else {
            what = "tfm_decoder_forward";
            st = tfm_decoder_forward(fx->module, a, b, masks_arg(&g1),
                                     masks_arg(&g2), out);
        }
    } else if (strcmp(kind, "cross_attention") == 0) {
        TRY(read_tensor(fx, "input.x", &a));
        TRY(read_tensor(fx, "input.memory", &b));
        TRY(load_masks(fx, "memory_causal", "memory_key_padding_mask",
                       "memory_mask", &g1));
        what = "tfm_cross_attention_forward";
        st = tfm_cross_attention_forward(fx->module, a, b, masks_arg(&g1),
                                         out);
    } else if (strcmp(kind, "transformer") == 0) {
        TRY(read_tensor(fx, "input.src", &a));
        TRY(read_tensor(fx, "input.tgt", &b));
        TRY(load_masks(fx, "src_causal", "src_key_padding_mask", "src_mask",
                       &g1));
        TRY(load_masks(fx, "tgt_causal", "tgt_key_padding_mask", "tgt_mask",
                       &g2));
        TRY(load_masks(fx, "memory_causal", "memory_key_padding_mask",
                       "memory_mask", &g3));
        what = "tfm_transformer_forward";
        st = tfm_transformer_forward(fx->module, a, b, masks_arg(&g1),
                                     masks_arg(&g2), masks_arg(&g3), out);
    } else {
        return failf(fx, "unknown module \"%s\"", kind);
    }
    TRY(check_all_consumed(fx));
    if (st != TFM_OK)
        return fail_status(fx, what, st);

    double rel = 0.0;
    TRY(compare(fx, "out", out, ref, &rel));
    if (weights != NULL)
        TRY(compare(fx, "weights", weights, ref_w, &rel));
    return 0;
}

/* ---- CMocka glue ------------------------------------------------------- */

typedef struct case_info {
    char *path;
    char *name;
} case_info;

static void test_case(void **state)
{
    const case_info *info = *state;
    fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    fx->path = info->path;
    fx->name = info->name;
    int rc = run_case(fx);
    fixture_close(fx);
    if (rc != 0) {
        char msg[sizeof fx->msg];
        memcpy(msg, fx->msg, sizeof msg);
        free(fx);
        fail_msg("%s: %s", info->name, msg);
    }
    free(fx);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

int main(int argc, char **argv)
{
    static const char ext[] = ".safetensors";
    const char *dir = argc > 1 ? argv[1] : TFM_FIXTURES_DIR;

    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "test_fixtures: cannot open directory %s: %s\n", dir,
                strerror(errno));
        return 1;
    }
    char **files = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!ends_with(e->d_name, ext))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(files, cap * sizeof *files);
            if (grown == NULL) {
                fprintf(stderr, "test_fixtures: out of memory\n");
                return 1;
            }
            files = grown;
        }
        files[n] = strdup(e->d_name);
        if (files[n] == NULL) {
            fprintf(stderr, "test_fixtures: out of memory\n");
            return 1;
        }
        n++;
    }
    closedir(d);
    if (n == 0) {
        fprintf(stderr, "test_fixtures: no *%s files in %s; regenerate them "
                        "with tools/make_fixtures.py\n", ext, dir);
        return 1;
    }
    qsort(files, n, sizeof *files, cmp_str);

    case_info *infos = calloc(n, sizeof *infos);
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    if (infos == NULL || tests == NULL) {
        fprintf(stderr, "test_fixtures: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t plen = strlen(dir) + 1 + strlen(files[i]) + 1;
        infos[i].path = malloc(plen);
        infos[i].name = strdup(files[i]);
        if (infos[i].path == NULL || infos[i].name == NULL) {
            fprintf(stderr, "test_fixtures: out of memory\n");
            return 1;
        }
        snprintf(infos[i].path, plen, "%s/%s", dir, files[i]);
        infos[i].name[strlen(files[i]) - (sizeof ext - 1)] = '\0';
        tests[i].name = infos[i].name;
        tests[i].test_func = test_case;
        tests[i].initial_state = &infos[i];
    }
    printf("test_fixtures: %zu cases from %s\n", n, dir);
    fflush(stdout);

    int failed = _cmocka_run_group_tests("fixtures", tests, n, NULL, NULL);

    for (size_t i = 0; i < n; i++) {
        free(infos[i].path);
        free(infos[i].name);
        free(files[i]);
    }
    free(infos);
    free(tests);
    free(files);
    return failed;
}
