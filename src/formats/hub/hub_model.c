/* Checkpoint directories in the Hugging Face hub layout (model.h:
 * tfm_model_load on a directory).
 *
 * A directory holds config.json (the model's configuration, as
 * transformers' PretrainedConfig.save_pretrained writes it) and its
 * weights: model.safetensors, or shards named by the "weight_map" of
 * model.safetensors.index.json.  Loading:
 *   1. config.json is read (cJSON) and checked; keys transformers gives a
 *      default take transformers' default when absent;
 *   2. every shard is opened (mapped, headers validated) and each tensor
 *      the configuration needs is found with its stored shape and a float
 *      dtype, and no tensor is left over: all before the model is
 *      allocated;
 *   3. the model is created, then shard by shard each tensor is converted
 *      (F32, F16, BF16, F64 -> float32) straight into the parameter it
 *      becomes, transposed where the layouts differ, and the shard is
 *      closed before the next is touched.
 * So the weights are never held twice: peak memory is the float32 model
 * plus the pages of the one shard being read.
 *
 * GPT-2 (model_type "gpt2"; Radford et al. 2019, transformers'
 * modeling_gpt2.py GPT2Model / GPT2LMHeadModel) becomes a decoder-only
 * model with pre-norm blocks, learned positions and the head tied to the
 * token embedding:
 *   wte.weight [vocab, d]        -> token_embedding.weight
 *   wpe.weight [n_positions, d]  -> position_embedding.weight
 *   h.<i>.ln_1.*                 -> layers.<i>.norm1.*
 *   h.<i>.attn.c_attn.weight [d, 3d] (Conv1D: [in, out], q | k | v
 *                                   columns) -> self_attn.in_proj_weight
 *                                   [3d, d], transposed
 *   h.<i>.attn.c_attn.bias       -> self_attn.in_proj_bias
 *   h.<i>.attn.c_proj.weight [d, d] -> self_attn.out_proj.weight, transposed
 *   h.<i>.ln_2.*                 -> layers.<i>.norm2.*
 *   h.<i>.mlp.c_fc.weight [d, n_inner] -> linear1.weight, transposed
 *   h.<i>.mlp.c_proj.weight [n_inner, d] -> linear2.weight, transposed
 *   ln_f.*                       -> norm.*
 * GPT2LMHeadModel saves the same names under "transformer." and may carry
 * "lm_head.weight": ignored when the embeddings are tied (transformers
 * ties it to wte after loading), the head when tie_word_embeddings is
 * false.  The causal-mask buffers "h.<i>.attn.bias" and
 * "h.<i>.attn.masked_bias" of older saves are ignored.  The attention is
 * GPT-2's: scores q k^T / sqrt(d / n_head) under a causal mask.
 *
 * Llama (model_type "llama"; Touvron et al. 2023, transformers'
 * modeling_llama.py LlamaForCausalLM) becomes a decoder-only model with
 * RMSNorms, the gated SwiGLU feed-forward, no biases, rotary positions on
 * half-split pairs and grouped-query attention: llama_plan below gives the
 * names.  Its q, k and v projections fill the rows of the one packed
 * in_proj_weight (offsets in the plan); plan_covers checks that the pieces
 * fill every parameter exactly.
 *
 * BERT (model_type "bert"; Devlin et al. 2019, transformers'
 * modeling_bert.py BertForMaskedLM) becomes an encoder-only, post-norm
 * model with learned positions and BERT's model parts (tfm_layer_options:
 * token-type table, embedding LayerNorm, no final norm, the masked-LM
 * head transform and the logits' bias): bert_plan below gives the names.
 * Its query, key and value fill the rows of in_proj_weight and
 * in_proj_bias.
 *
 * Marian (model_type "marian"; transformers' modeling_marian.py
 * MarianMTModel, the opus-mt checkpoints) becomes an encoder-decoder,
 * post-norm model without final norms, with Marian's sinusoidal table as
 * learned positions and final_logits_bias as the logits' bias:
 * marian_plan below gives the names.
 *
 * ViT (model_type "vit"; Dosovitskiy et al. 2021, transformers'
 * modeling_vit.py ViTForImageClassification) becomes an encoder-only,
 * pre-norm model of images (tfm_layer_options' patch_size): the patch
 * embedding (the Conv2d's weight as it is), the class token, learned
 * positions, a final norm and the classifier as the head with its bias:
 * vit_plan below gives the names. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "formats/hub/hub_model.h"
#include "base/json_check.h"
#include "models/model_impl.h"
#include "nn/module_impl.h"
#include "formats/safetensors_impl.h"
#include "base/tensor_impl.h"
#include "tokenizers/tokenizer_impl.h"
#include "transformer/model.h"

#define PATH_SIZE 4096
#define NAME_SIZE 192

/* Tensor names are quoted in messages, cut to this many bytes. */
#define QUOTED "\"%.120s\""

static int is_file(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

/* dir + "/" + name into buf (PATH_SIZE bytes); a failure when too long. */
static tfm_status join(char *buf, const char *dir, const char *name)
{
    size_t n = strlen(dir);
    int w = snprintf(buf, PATH_SIZE, "%s%s%s", dir,
                     n && dir[n - 1] != '/' ? "/" : "", name);
    if (w < 0 || w >= PATH_SIZE)
        return tfm__fail(TFM_ERR_IO, "%.200s/%.100s: path too long", dir,
                         name);
    return TFM_OK;
}

/* ---- JSON files ------------------------------------------------------- */

/* Parses the JSON object in file dir/name into *root. */
static tfm_status read_json(const char *dir, const char *name, cJSON **root)
{
    char path[PATH_SIZE];
    char *text = NULL;
    size_t len = 0;
    tfm_status st = join(path, dir, name);
    if (st != TFM_OK || (st = tfm__read_file(path, &text, &len)) != TFM_OK)
        return st;
    st = tfm__json_parse_object(text, len, path, root);
    tfm__free(text);
    return st;
}

/* config.json's key (absent or null: def) as a whole number >= min. */
static tfm_status cfg_int(const cJSON *root, const char *key, int64_t def,
                          int64_t min, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return TFM_OK;
    }
    const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(x >= (double)min && x <= 9007199254740991.0 && x == floor(x)))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" must be a whole number >= %lld",
                         key, (long long)min);
    *out = (int64_t)x;
    return TFM_OK;
}

/* config.json's key that ViT's config takes as an int or a pair
 * (height, width), as a whole number >= 1 (absent or null: def): a pair
 * of two equal numbers is that number; a non-square pair is refused
 * (TFM_ERR_UNSUPPORTED). */
static tfm_status cfg_square(const cJSON *root, const char *key, int64_t def,
                             int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(v))
        return cfg_int(root, key, def, 1, out);
    const cJSON *h = cJSON_GetArrayItem(v, 0), *w = cJSON_GetArrayItem(v, 1);
    const double y = cJSON_IsNumber(h) ? h->valuedouble : NAN;
    const double x = cJSON_IsNumber(w) ? w->valuedouble : NAN;
    if (cJSON_GetArraySize(v) != 2 || !(y >= 1 && y <= 9007199254740991.0 &&
                                        y == floor(y)) ||
        !(x >= 1 && x <= 9007199254740991.0 && x == floor(x)))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" must be a whole number >= 1 or "
                         "a pair of them (height, width)", key);
    if (x != y)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\" is [%.0f, %.0f]: only square "
                         "images and patches are supported", key, y, x);
    *out = (int64_t)x;
    return TFM_OK;
}

/* config.json's key (absent: def) as a finite number > 0. */
static tfm_status cfg_positive(const cJSON *root, const char *key,
                               double def, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) {
        *out = def;
        return TFM_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        !(v->valuedouble > 0))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" must be a number > 0", key);
    *out = v->valuedouble;
    return TFM_OK;
}

/* config.json's key (absent: def) as true / false. */
static tfm_status cfg_bool(const cJSON *root, const char *key, int def,
                           int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v) {
        *out = def;
        return TFM_OK;
    }
    if (!cJSON_IsBool(v))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" must be true or false", key);
    *out = cJSON_IsTrue(v);
    return TFM_OK;
}

/* config.json's key as a string, or NULL (absent). */
static tfm_status cfg_string(const cJSON *root, const char *key,
                             const char **out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = NULL;
    if (!v)
        return TFM_OK;
    if (!cJSON_IsString(v))
        return tfm__fail(TFM_ERR_FORMAT, "config.json \"%s\" must be a string",
                         key);
    *out = v->valuestring;
    return TFM_OK;
}

/* ---- shards ----------------------------------------------------------- */

typedef struct shards {
    int n;
    char **names;              /* file names inside the directory */
    tfm_safetensors **files;   /* NULL once read and closed */
} shards;

static void shards_close(shards *s)
{
    for (int i = 0; i < s->n; i++) {
        tfm_safetensors_close(s->files[i]);
        tfm__free(s->names[i]);
    }
    tfm__free(s->files);
    tfm__free(s->names);
    memset(s, 0, sizeof *s);
}

/* Appends file name (kept once) to s, with room for cap entries. */
static tfm_status shards_add(shards *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0)
            return TFM_OK;
    /* A shard is a file of the directory itself. */
    if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "model.safetensors.index.json names the shard "
                         QUOTED ", which is not a file name in the "
                         "checkpoint directory", name);
    const size_t len = strlen(name) + 1;
    char *copy = tfm__malloc(len);
    if (!copy)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(copy, name, len);
    s->names[s->n++] = copy;
    return TFM_OK;
}

/* The shard file names: "model.safetensors", or the distinct values of
 * the index's "weight_map" (each entry checked to be in its shard once
 * the shards are open, in shards_check_index). */
static tfm_status shards_list(const char *dir, shards *s, cJSON **index)
{
    char path[PATH_SIZE];
    tfm_status st = join(path, dir, "model.safetensors");
    if (st != TFM_OK)
        return st;
    int cap = 1;
    const cJSON *map = NULL;
    *index = NULL;
    if (!is_file(path)) {
        if ((st = join(path, dir, "model.safetensors.index.json")))
            return st;
        if (!is_file(path)) {
            char bin[PATH_SIZE];
            if ((st = join(bin, dir, "pytorch_model.bin")))
                return st;
            if (is_file(bin))
                return tfm__fail(TFM_ERR_UNSUPPORTED,
                                 "%.200s holds pytorch_model.bin (a pickle) "
                                 "but no model.safetensors: this library "
                                 "reads safetensors weights only (convert "
                                 "with transformers' save_pretrained("
                                 "safe_serialization=True))", dir);
            return tfm__fail(TFM_ERR_IO,
                             "%.200s: no model.safetensors or "
                             "model.safetensors.index.json in this "
                             "directory", dir);
        }
        if ((st = read_json(dir, "model.safetensors.index.json", index)))
            return st;
        map = cJSON_GetObjectItemCaseSensitive(*index, "weight_map");
        if (!cJSON_IsObject(map) || !map->child)
            return tfm__fail(TFM_ERR_FORMAT,
                             "model.safetensors.index.json has no "
                             "\"weight_map\" object of tensor names to "
                             "shard files");
        cap = cJSON_GetArraySize(map);
    }
    s->names = tfm__calloc((size_t)cap, sizeof *s->names);
    s->files = tfm__calloc((size_t)cap, sizeof *s->files);
    if (!s->names || !s->files)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    if (!map)
        return shards_add(s, "model.safetensors");
    for (const cJSON *e = map->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            return tfm__fail(TFM_ERR_FORMAT,
                             "model.safetensors.index.json \"weight_map\" "
                             "entry " QUOTED " is not a file name",
                             e->string);
        if ((st = shards_add(s, e->valuestring)))
            return st;
    }
    return TFM_OK;
}

/* Opens (maps and validates) every shard. */
static tfm_status shards_open(const char *dir, shards *s)
{
    char path[PATH_SIZE];
    for (int i = 0; i < s->n; i++) {
        tfm_status st = join(path, dir, s->names[i]);
        if (st == TFM_OK)
            st = tfm_safetensors_open(path, &s->files[i]);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* The shard holding tensor name, or -1. */
static int shards_find(const shards *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (tfm_safetensors_info(s->files[i], name, NULL, NULL, NULL) ==
            TFM_OK)
            return i;
    return -1;
}

/* Whether any shard holds a tensor whose name begins with prefix: how a
 * checkpoint says it saved the base model under "transformer." / "model."
 * (decided on every name, so that a missing embedding is still named with
 * the prefix the rest of the checkpoint uses). */
static int shards_any_prefixed(const shards *s, const char *prefix)
{
    const size_t n = strlen(prefix);
    for (int f = 0; f < s->n; f++)
        for (int64_t k = 0; k < tfm_safetensors_count(s->files[f]); k++)
            if (strncmp(tfm_safetensors_name(s->files[f], k), prefix, n) == 0)
                return 1;
    return 0;
}

/* Every "weight_map" entry is a tensor of the shard it names. */
static tfm_status shards_check_index(const shards *s, const cJSON *index)
{
    if (!index)
        return TFM_OK;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    for (const cJSON *e = map->child; e; e = e->next) {
        int i = 0;
        while (strcmp(s->names[i], e->valuestring) != 0)
            i++;
        if (tfm_safetensors_info(s->files[i], e->string, NULL, NULL, NULL) !=
            TFM_OK)
            return tfm__fail(TFM_ERR_FORMAT,
                             "model.safetensors.index.json puts tensor "
                             QUOTED " in " QUOTED ", which lacks it",
                             e->string, e->valuestring);
    }
    return TFM_OK;
}

/* ---- the plan: which stored tensor becomes which parameter ----------- */

typedef struct hub_tensor {
    char stored[NAME_SIZE];    /* name in the checkpoint */
    char ours[NAME_SIZE];      /* parameter name (model.h) */
    int transpose;             /* stored [a, b] -> ours [b, a] */
    int64_t offset;            /* first float of ours it fills (rows of a
                                * packed matrix: Llama's q, k, v) */
    int rank;                  /* stored shape (rank 1 to 4) */
    int64_t shape[4];
    int shard;                 /* found in shards.files[shard] */
} hub_tensor;

typedef struct plan {
    hub_tensor *t;
    int n, cap;
    const char *prefix;        /* "" or "transformer." */
    int64_t n_layer;           /* for the messages */
    int has_positions;         /* Marian: the checkpoint has its encoder's
                                * position table */
    const char *computed;      /* a parameter the loader computes (not
                                * read), or NULL */
} plan;

static tfm_status plan_add(plan *p, const char *stored, const char *ours,
                           int transpose, int rank, int64_t a, int64_t b)
{
    if (p->n == p->cap)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "tensor plan overflow");
    hub_tensor *t = &p->t[p->n++];
    const int a_len = snprintf(t->stored, sizeof t->stored, "%s%s",
                               p->prefix, stored);
    const int b_len = snprintf(t->ours, sizeof t->ours, "%s", ours);
    if (a_len < 0 || (size_t)a_len >= sizeof t->stored || b_len < 0 ||
        (size_t)b_len >= sizeof t->ours)
        return tfm__fail(TFM_ERR_FORMAT, "tensor name " QUOTED " is too long",
                         stored);
    t->transpose = transpose;
    t->offset = 0;
    t->rank = rank;
    t->shape[0] = a;
    t->shape[1] = b;
    t->shard = -1;
    return TFM_OK;
}

/* plan_add of a tensor of any rank up to 4 (ViT's convolution weight
 * [d, C, P, P], class token [1, 1, d], positions [1, N + 1, d]), never
 * transposed. */
static tfm_status plan_add_shape(plan *p, const char *stored,
                                 const char *ours, int rank,
                                 const int64_t *shape)
{
    tfm_status st = plan_add(p, stored, ours, 0, rank, shape[0],
                             rank > 1 ? shape[1] : 0);
    for (int k = 2; st == TFM_OK && k < rank; k++)
        p->t[p->n - 1].shape[k] = shape[k];
    return st;
}

/* The number of floats of a planned tensor. */
static int64_t planned_numel(const hub_tensor *t)
{
    int64_t n = 1;
    for (int k = 0; k < t->rank; k++)
        n *= t->shape[k];
    return n;
}

/* plan_add of layer i's tensor: stored "<stack><i>.<stored>" (after the
 * prefix), ours "layers.<i>.<ours>", filling ours from float `offset`. */
static tfm_status plan_add_layer(plan *p, const char *stack, int64_t i,
                                 const char *stored, const char *ours,
                                 int transpose, int rank, int64_t a,
                                 int64_t b, int64_t offset)
{
    char s_name[NAME_SIZE], o_name[NAME_SIZE];
    snprintf(s_name, sizeof s_name, "%s%lld.%s", stack, (long long)i, stored);
    snprintf(o_name, sizeof o_name, "layers.%lld.%s", (long long)i, ours);
    tfm_status st = plan_add(p, s_name, o_name, transpose, rank, a, b);
    if (st == TFM_OK)
        p->t[p->n - 1].offset = offset;
    return st;
}

/* One stored tensor of a plan table: its name (after the prefix and, in a
 * layer, "<stack><i>."), the parameter it fills from float `offset`, and
 * its stored shape [a] or [a, b] (transposed into ours when asked). */
typedef struct plan_row {
    const char *stored, *ours;
    int transpose, rank;
    int64_t a, b, offset;
} plan_row;

/* plan_add of each of rows[0 .. n-1]: layer i's under `stack`, or the
 * top-level tensors when stack is NULL. */
static tfm_status plan_add_rows(plan *p, const char *stack, int64_t i,
                                const plan_row *rows, size_t n)
{
    tfm_status st = TFM_OK;
    for (size_t k = 0; k < n && st == TFM_OK; k++) {
        const plan_row *r = &rows[k];
        if (stack)
            st = plan_add_layer(p, stack, i, r->stored, r->ours,
                                r->transpose, r->rank, r->a, r->b,
                                r->offset);
        else if ((st = plan_add(p, r->stored, r->ours, r->transpose, r->rank,
                                r->a, r->b)) == TFM_OK)
            p->t[p->n - 1].offset = r->offset;
    }
    return st;
}

#define N_ROWS(rows) (sizeof (rows) / sizeof (rows)[0])

/* An untied model's own head, "lm_head.weight" [V, d], never prefixed
 * (GPT2LMHeadModel's and LlamaForCausalLM's); nothing when tied. */
static tfm_status plan_add_head(plan *p, const tfm_model_config *c)
{
    if (c->tied_embeddings)
        return TFM_OK;
    const char *prefix = p->prefix;
    p->prefix = "";
    tfm_status st = plan_add(p, "lm_head.weight", "lm_head.weight", 0, 2,
                             c->vocab_size, c->layer.d_model);
    p->prefix = prefix;
    return st;
}

/* Whether `name` ends with `tail`. */
static int ends_with(const char *name, const char *tail)
{
    size_t a = strlen(name), b = strlen(tail);
    return a >= b && strcmp(name + a - b, tail) == 0;
}

/* Every planned tensor is in a shard with its shape and a float dtype. */
static tfm_status plan_find(plan *p, const shards *s)
{
    for (int i = 0; i < p->n; i++) {
        hub_tensor *t = &p->t[i];
        t->shard = shards_find(s, t->stored);
        if (t->shard < 0 && ends_with(t->stored, "LayerNorm.weight")) {
            /* transformers reads the ".gamma" / ".beta" of older saves
             * (original BERT checkpoints) as ".weight" / ".bias". */
            strcpy(t->stored + strlen(t->stored) - 6, "gamma");
            if ((t->shard = shards_find(s, t->stored)) < 0)
                strcpy(t->stored + strlen(t->stored) - 5, "weight");
        } else if (t->shard < 0 && ends_with(t->stored, "LayerNorm.bias")) {
            strcpy(t->stored + strlen(t->stored) - 4, "beta");
            if ((t->shard = shards_find(s, t->stored)) < 0)
                strcpy(t->stored + strlen(t->stored) - 4, "bias");
        }
        if (t->shard < 0)
            return tfm__fail(TFM_ERR_FORMAT,
                             "the checkpoint lacks the tensor " QUOTED
                             " that its config.json needs", t->stored);
        tfm_dtype dtype;
        int rank;
        int64_t shape[TFM_SAFETENSORS_MAX_RANK];
        tfm_safetensors_info(s->files[t->shard], t->stored, &dtype, &rank,
                             shape);
        if (dtype != TFM_DTYPE_F32 && dtype != TFM_DTYPE_F16 &&
            dtype != TFM_DTYPE_BF16 && dtype != TFM_DTYPE_F64)
            return tfm__fail(TFM_ERR_UNSUPPORTED,
                             "tensor " QUOTED " is stored as an integer or "
                             "bool dtype; weights must be F32, F16, BF16 or "
                             "F64", t->stored);
        int same = rank == t->rank;
        for (int k = 0; same && k < rank; k++)
            same = shape[k] == t->shape[k];
        if (!same) {
            char has[96], want[96];
            tfm__format_shape(has, sizeof has, rank, shape);
            tfm__format_shape(want, sizeof want, t->rank, t->shape);
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor " QUOTED " has shape %s, but config.json "
                             "gives %s", t->stored, has, want);
        }
    }
    return TFM_OK;
}

/* No shard holds a tensor outside the plan, except those `ignored` says
 * may be dropped: a tensor left over means config.json and the weights
 * disagree (more layers, another architecture). */
static tfm_status plan_no_extra(const plan *p, const shards *s,
                                int (*ignored)(const plan *, const char *))
{
    for (int f = 0; f < s->n; f++) {
        for (int64_t k = 0; k < tfm_safetensors_count(s->files[f]); k++) {
            const char *name = tfm_safetensors_name(s->files[f], k);
            int i = 0;
            while (i < p->n && strcmp(p->t[i].stored, name) != 0)
                i++;
            if (i == p->n && !ignored(p, name))
                return tfm__fail(TFM_ERR_FORMAT,
                                 "the checkpoint holds a tensor " QUOTED
                                 " that a model of its config.json does not "
                                 "have", name);
        }
    }
    return TFM_OK;
}

/* Every parameter of m is filled, exactly, by the planned tensors (the
 * pieces of a packed one add up to it): a check on the plan itself, before
 * anything is read. */
static tfm_status plan_covers(const plan *p, const tfm_module *m)
{
    for (int k = 0; k < m->n_params; k++) {
        const tfm__param *param = &m->params[k];
        if (p->computed && strcmp(param->name, p->computed) == 0)
            continue;
        int64_t filled = 0;
        for (int i = 0; i < p->n; i++)
            if (strcmp(p->t[i].ours, param->name) == 0)
                filled += planned_numel(&p->t[i]);
        if (filled != param->numel)
            return tfm__fail(TFM_ERR_FORMAT,
                             "the checkpoint's tensors fill %lld of the "
                             "%lld values of parameter " QUOTED,
                             (long long)filled, (long long)param->numel,
                             param->name);
    }
    return TFM_OK;
}

/* Shard by shard, converts each planned tensor into its parameter of m,
 * checks it is finite, and closes the shard. */
static tfm_status plan_load(const plan *p, shards *s, tfm_module *m)
{
    for (int f = 0; f < s->n; f++) {
        for (int i = 0; i < p->n; i++) {
            const hub_tensor *t = &p->t[i];
            if (t->shard != f)
                continue;
            const tfm__param *param = NULL;
            const int64_t numel = planned_numel(t);
            if (tfm__module_find_param(m, t->ours, &param) != TFM_OK ||
                t->offset > param->numel - numel)
                return tfm__fail(TFM_ERR_FORMAT,
                                 "tensor " QUOTED " has no parameter "
                                 QUOTED " of its size to go to", t->stored,
                                 t->ours);
            float *dst = param->data + t->offset;
            tfm_status st = tfm__safetensors_read_into(
                s->files[f], t->stored, t->transpose, dst);
            if (st != TFM_OK)
                return st;
            for (int64_t e = 0; e < numel; e++)
                if (!isfinite(dst[e]))
                    return tfm__fail(TFM_ERR_NON_FINITE,
                                     "tensor " QUOTED " has a non-finite "
                                     "value", t->stored);
        }
        tfm_safetensors_close(s->files[f]);
        s->files[f] = NULL;
    }
    return TFM_OK;
}

/* ---- GPT-2 -------------------------------------------------------------- */

/* transformers' ACT2FN names -> our activations; -1 when unsupported. */
static int gpt2_activation(const char *name)
{
    if (!name || strcmp(name, "gelu_new") == 0 ||
        strcmp(name, "gelu_pytorch_tanh") == 0 ||
        strcmp(name, "gelu_fast") == 0)
        return TFM_ACTIVATION_GELU_TANH; /* 0.5x(1+tanh(√(2/π)(x+0.044715x³))) */
    if (strcmp(name, "gelu") == 0)
        return TFM_ACTIVATION_GELU;
    if (strcmp(name, "relu") == 0)
        return TFM_ACTIVATION_RELU;
    if (strcmp(name, "silu") == 0 || strcmp(name, "swish") == 0)
        return TFM_ACTIVATION_SILU;
    return -1;
}

/* The pre-norm decoder-only model both hub families become (GPT-2 with
 * learned positions, Llama with none): c from the checked config.json
 * values. */
static void decoder_config(tfm_model_config *c, int64_t d, int64_t heads,
                           int64_t d_ff, int act, double eps, int64_t vocab,
                           int64_t layers, int64_t positions,
                           tfm_positional positional, int tied)
{
    memset(c, 0, sizeof *c);
    c->architecture = TFM_ARCH_DECODER_ONLY;
    c->layer = tfm_layer_config_default(d, heads);
    c->layer.d_ff = d_ff;
    c->layer.activation = (tfm_activation)act;
    c->layer.layer_norm_eps = (float)eps;
    c->layer.norm_first = 1;
    c->vocab_size = vocab;
    c->n_layers = layers;
    c->context_length = positions;
    c->positional = positional;
    c->tied_embeddings = tied;
}

/* The model configuration of a GPT-2 config.json (GPT2Config's defaults
 * for absent keys: vocab_size 50257, n_positions 1024, n_embd 768, n_layer
 * 12, n_head 12, n_inner null = 4 n_embd, activation_function "gelu_new",
 * layer_norm_epsilon 1e-5, tie_word_embeddings true). */
static tfm_status gpt2_config(const cJSON *root, tfm_model_config *c,
                              tfm_model_options *o, tfm_layer_options *lo)
{
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    int64_t vocab = 0, positions = 0, d = 0, layers = 0, heads = 0;
    int64_t inner = 0;
    double eps = 0;
    int tied = 1, scale = 1, by_layer = 0, cross = 0;
    const char *act_name;
    tfm_status st;
    if ((st = cfg_int(root, "vocab_size", 50257, 1, &vocab)) ||
        (st = cfg_int(root, "n_positions", 1024, 1, &positions)) ||
        (st = cfg_int(root, "n_embd", 768, 1, &d)) ||
        (st = cfg_int(root, "n_layer", 12, 1, &layers)) ||
        (st = cfg_int(root, "n_head", 12, 1, &heads)) ||
        (st = cfg_int(root, "n_inner", 4 * d, 1, &inner)) ||
        (st = cfg_positive(root, "layer_norm_epsilon", 1e-5, &eps)) ||
        (st = cfg_string(root, "activation_function", &act_name)) ||
        (st = cfg_bool(root, "tie_word_embeddings", 1, &tied)) ||
        (st = cfg_bool(root, "scale_attn_weights", 1, &scale)) ||
        (st = cfg_bool(root, "scale_attn_by_inverse_layer_idx", 0,
                       &by_layer)) ||
        (st = cfg_bool(root, "add_cross_attention", 0, &cross)))
        return st;
    if (vocab > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"vocab_size\" %lld is over 2^31-1",
                         (long long)vocab);
    if (d % heads != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"n_head\" %lld does not divide "
                         "\"n_embd\" %lld", (long long)heads, (long long)d);
    const int act = gpt2_activation(act_name);
    if (act < 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"activation_function\" \"%.60s\" is "
                         "not supported (gelu_new, gelu_pytorch_tanh, "
                         "gelu_fast, gelu, relu, silu are)", act_name);
    if (!scale || by_layer || cross)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\": %s is not supported",
                         !scale ? "scale_attn_weights"
                         : by_layer ? "scale_attn_by_inverse_layer_idx"
                                    : "add_cross_attention",
                         !scale ? "false" : "true");
    decoder_config(c, d, heads, inner, act, eps, vocab, layers, positions,
                   TFM_POSITIONAL_LEARNED, tied);
    return TFM_OK;
}

/* The stored tensors of GPT-2 c, by the prefix the checkpoint uses. */
static tfm_status gpt2_plan(const tfm_model_config *c,
                            const tfm_model_options *o,
                            const tfm_layer_options *lo, plan *p)
{
    (void)o;
    (void)lo;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t V = c->vocab_size;
    tfm_status st;
    if ((st = plan_add(p, "wte.weight", "token_embedding.weight", 0, 2, V,
                       d)) ||
        (st = plan_add(p, "wpe.weight", "position_embedding.weight", 0, 2,
                       c->context_length, d)))
        return st;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const plan_row L[] = {
            { "ln_1.weight", "norm1.weight", 0, 1, d, 0, 0 },
            { "ln_1.bias", "norm1.bias", 0, 1, d, 0, 0 },
            { "attn.c_attn.weight", "self_attn.in_proj_weight", 1, 2, d,
              3 * d, 0 },
            { "attn.c_attn.bias", "self_attn.in_proj_bias", 0, 1, 3 * d, 0,
              0 },
            { "attn.c_proj.weight", "self_attn.out_proj.weight", 1, 2, d, d,
              0 },
            { "attn.c_proj.bias", "self_attn.out_proj.bias", 0, 1, d, 0, 0 },
            { "ln_2.weight", "norm2.weight", 0, 1, d, 0, 0 },
            { "ln_2.bias", "norm2.bias", 0, 1, d, 0, 0 },
            { "mlp.c_fc.weight", "linear1.weight", 1, 2, d, ff, 0 },
            { "mlp.c_fc.bias", "linear1.bias", 0, 1, ff, 0, 0 },
            { "mlp.c_proj.weight", "linear2.weight", 1, 2, ff, d, 0 },
            { "mlp.c_proj.bias", "linear2.bias", 0, 1, d, 0, 0 },
        };
        if ((st = plan_add_rows(p, "h.", i, L, N_ROWS(L))))
            return st;
    }
    if ((st = plan_add(p, "ln_f.weight", "norm.weight", 0, 1, d, 0)) ||
        (st = plan_add(p, "ln_f.bias", "norm.bias", 0, 1, d, 0)))
        return st;
    return plan_add_head(p, c);
}

/* The tensors a GPT-2 checkpoint may hold that the model does not use:
 * the tied head and the attention-mask buffers of older saves. */
static int gpt2_ignored(const plan *p, const char *name)
{
    if (strcmp(name, "lm_head.weight") == 0)
        return 1; /* tied: wte is the head (not planned when untied) */
    const size_t n = strlen(p->prefix);
    if (strncmp(name, p->prefix, n) != 0 || strncmp(name + n, "h.", 2) != 0)
        return 0;
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

/* ---- Llama -------------------------------------------------------------- */

/* The model of a Llama config.json (transformers' LlamaConfig defaults for
 * absent keys: vocab_size 32000, hidden_size 4096, intermediate_size
 * 11008, num_hidden_layers 32, num_attention_heads 32, num_key_value_heads
 * = num_attention_heads, hidden_act "silu", max_position_embeddings 2048,
 * rms_norm_eps 1e-6, tie_word_embeddings false, rope_theta 10000,
 * attention_bias and mlp_bias false, head_dim = hidden_size / heads,
 * rope_scaling null): a decoder-only, pre-norm model with RMSNorms, the
 * gated feed-forward, no biases, no position table and rotary positions on
 * half-split pairs (transformers' rotate_half) with grouped-query
 * attention.  What this library does not compute (rope_scaling, biases, a
 * head_dim other than hidden_size / heads) is refused, named. */
static tfm_status llama_config(const cJSON *root, tfm_model_config *c,
                               tfm_model_options *o, tfm_layer_options *lo)
{
    int64_t vocab = 0, d = 0, ff = 0, layers = 0, heads = 0, kv_heads = 0;
    int64_t positions = 0, head_dim = 0;
    double eps = 0, theta = 0;
    int tied = 0, attn_bias = 0, mlp_bias = 0;
    const char *act_name;
    tfm_status st;
    if ((st = cfg_int(root, "vocab_size", 32000, 1, &vocab)) ||
        (st = cfg_int(root, "hidden_size", 4096, 1, &d)) ||
        (st = cfg_int(root, "intermediate_size", 11008, 1, &ff)) ||
        (st = cfg_int(root, "num_hidden_layers", 32, 1, &layers)) ||
        (st = cfg_int(root, "num_attention_heads", 32, 1, &heads)) ||
        (st = cfg_int(root, "num_key_value_heads", heads, 1, &kv_heads)) ||
        (st = cfg_int(root, "max_position_embeddings", 2048, 1,
                      &positions)) ||
        (st = cfg_positive(root, "rms_norm_eps", 1e-6, &eps)) ||
        (st = cfg_positive(root, "rope_theta", 10000.0, &theta)) ||
        (st = cfg_string(root, "hidden_act", &act_name)) ||
        (st = cfg_bool(root, "tie_word_embeddings", 0, &tied)) ||
        (st = cfg_bool(root, "attention_bias", 0, &attn_bias)) ||
        (st = cfg_bool(root, "mlp_bias", 0, &mlp_bias)))
        return st;
    if (vocab > INT32_MAX || d > INT32_MAX || ff > INT32_MAX / 2)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" is over 2^31-1",
                         vocab > INT32_MAX ? "vocab_size"
                         : d > INT32_MAX   ? "hidden_size"
                                           : "intermediate_size");
    if (d % heads != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"num_attention_heads\" %lld does not "
                         "divide \"hidden_size\" %lld", (long long)heads,
                         (long long)d);
    if (heads % kv_heads != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"num_key_value_heads\" %lld does not "
                         "divide \"num_attention_heads\" %lld",
                         (long long)kv_heads, (long long)heads);
    if ((st = cfg_int(root, "head_dim", d / heads, 1, &head_dim)))
        return st;
    if (head_dim != d / heads)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"head_dim\" %lld is not hidden_size / "
                         "num_attention_heads = %lld, which this library "
                         "needs", (long long)head_dim, (long long)(d / heads));
    if ((d / heads) % 2 != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "rotary positions need an even head_dim, not %lld",
                         (long long)(d / heads));
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(root,
                                                            "rope_scaling");
    if (scaling && !cJSON_IsNull(scaling))
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"rope_scaling\" is set: only plain "
                         "rotary positions (rope_scaling null) are "
                         "supported");
    /* transformers >= 5 writes {"rope_type", "rope_theta", ...} here in
     * place of the top-level rope_theta and rope_scaling. */
    const cJSON *rope = cJSON_GetObjectItemCaseSensitive(root,
                                                         "rope_parameters");
    if (rope && !cJSON_IsNull(rope)) {
        const char *type = NULL;
        if (!cJSON_IsObject(rope))
            return tfm__fail(TFM_ERR_FORMAT, "config.json "
                             "\"rope_parameters\" must be an object");
        if ((st = cfg_string(rope, "rope_type", &type)))
            return st;
        if (type && strcmp(type, "default") != 0)
            return tfm__fail(TFM_ERR_UNSUPPORTED,
                             "config.json \"rope_parameters\" "
                             "\"rope_type\" \"%.40s\": only \"default\" "
                             "rotary positions are supported", type);
        if ((st = cfg_positive(rope, "rope_theta", theta, &theta)))
            return st;
    }
    if (!(theta > 1.0))
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"rope_theta\" %g: rotary bases <= 1 "
                         "are not supported", theta);
    if (!isfinite((float)eps))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"rms_norm_eps\" %g is beyond float32",
                         eps);
    if (attn_bias || mlp_bias)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\": true is not supported",
                         attn_bias ? "attention_bias" : "mlp_bias");
    const int act = gpt2_activation(act_name ? act_name : "silu");
    if (act < 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"hidden_act\" \"%.60s\" is not "
                         "supported (silu, gelu, gelu_pytorch_tanh, relu "
                         "are)", act_name);
    decoder_config(c, d, heads, ff, act, eps, vocab, layers, positions,
                   TFM_POSITIONAL_NONE, tied);
    tfm_model_options_init(o);
    o->attention.n_kv_heads = kv_heads;
    o->attention.rope = TFM_ROPE_HALF;
    o->attention.rope_base = theta;
    tfm_layer_options_init(lo);
    lo->bias = 0;
    lo->rms_norm = 1;
    lo->gated = 1;
    return TFM_OK;
}

/* The stored tensors of Llama c (LlamaForCausalLM's names, under
 * "model."):
 *   embed_tokens.weight [V, d]                -> token_embedding.weight
 *   layers.<i>.input_layernorm.weight         -> layers.<i>.norm1.weight
 *   layers.<i>.self_attn.q_proj.weight [d, d]  \
 *   layers.<i>.self_attn.k_proj.weight [kv, d]  > rows of
 *   layers.<i>.self_attn.v_proj.weight [kv, d] /  self_attn.in_proj_weight
 *   layers.<i>.self_attn.o_proj.weight        -> self_attn.out_proj.weight
 *   layers.<i>.post_attention_layernorm.weight -> layers.<i>.norm2.weight
 *   layers.<i>.mlp.gate_proj.weight [ff, d]   -> linear1.weight
 *   layers.<i>.mlp.up_proj.weight [ff, d]     -> linear3.weight
 *   layers.<i>.mlp.down_proj.weight [d, ff]   -> linear2.weight
 *   norm.weight                               -> norm.weight
 *   lm_head.weight [V, d] (never prefixed; untied only) -> lm_head.weight
 * kv = num_key_value_heads * head_dim.  No transposes: nn.Linear's layout
 * is ours. */
static tfm_status llama_plan(const tfm_model_config *c,
                             const tfm_model_options *o,
                             const tfm_layer_options *lo, plan *p)
{
    (void)lo;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t kv = o->attention.n_kv_heads * (d / c->layer.n_heads);
    const int64_t V = c->vocab_size;
    tfm_status st;
    if ((st = plan_add(p, "embed_tokens.weight", "token_embedding.weight", 0,
                       2, V, d)))
        return st;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const plan_row L[] = {
            { "input_layernorm.weight", "norm1.weight", 0, 1, d, 0, 0 },
            { "self_attn.q_proj.weight", "self_attn.in_proj_weight", 0, 2, d,
              d, 0 },
            { "self_attn.k_proj.weight", "self_attn.in_proj_weight", 0, 2, kv,
              d, d * d },
            { "self_attn.v_proj.weight", "self_attn.in_proj_weight", 0, 2, kv,
              d, (d + kv) * d },
            { "self_attn.o_proj.weight", "self_attn.out_proj.weight", 0, 2, d,
              d, 0 },
            { "post_attention_layernorm.weight", "norm2.weight", 0, 1, d, 0,
              0 },
            { "mlp.gate_proj.weight", "linear1.weight", 0, 2, ff, d, 0 },
            { "mlp.up_proj.weight", "linear3.weight", 0, 2, ff, d, 0 },
            { "mlp.down_proj.weight", "linear2.weight", 0, 2, d, ff, 0 },
        };
        if ((st = plan_add_rows(p, "layers.", i, L, N_ROWS(L))))
            return st;
    }
    if ((st = plan_add(p, "norm.weight", "norm.weight", 0, 1, d, 0)))
        return st;
    return plan_add_head(p, c);
}

/* What a Llama checkpoint may hold that the model does not use: the tied
 * head, and the rotary inverse frequencies older saves kept as buffers. */
static int llama_ignored(const plan *p, const char *name)
{
    if (strcmp(name, "lm_head.weight") == 0)
        return 1; /* tied (not planned when untied) */
    const size_t n = strlen(p->prefix);
    return strncmp(name, p->prefix, n) == 0 &&
           strncmp(name + n, "layers.", 7) == 0 &&
           ends_with(name, ".self_attn.rotary_emb.inv_freq");
}

/* ---- BERT --------------------------------------------------------------- */

/* The model of a BERT config.json (transformers' BertConfig defaults for
 * absent keys: vocab_size 30522, hidden_size 768, num_hidden_layers 12,
 * num_attention_heads 12, intermediate_size 3072, hidden_act "gelu",
 * max_position_embeddings 512, type_vocab_size 2, layer_norm_eps 1e-12,
 * position_embedding_type "absolute", tie_word_embeddings true): an
 * encoder-only, post-norm model with learned positions, the token-type
 * table, the embedding LayerNorm, no final norm and BertLMPredictionHead's
 * head transform (tfm_layer_options' model parts).  A decoder BERT
 * (is_decoder, add_cross_attention) and relative position embeddings are
 * refused, named. */
static tfm_status bert_config(const cJSON *root, tfm_model_config *c,
                              tfm_model_options *o, tfm_layer_options *lo)
{
    int64_t vocab = 0, d = 0, ff = 0, layers = 0, heads = 0, positions = 0;
    int64_t types = 0;
    double eps = 0;
    int tied = 1, is_decoder = 0, cross = 0;
    const char *act_name, *position_type;
    tfm_status st;
    if ((st = cfg_int(root, "vocab_size", 30522, 1, &vocab)) ||
        (st = cfg_int(root, "hidden_size", 768, 1, &d)) ||
        (st = cfg_int(root, "num_hidden_layers", 12, 1, &layers)) ||
        (st = cfg_int(root, "num_attention_heads", 12, 1, &heads)) ||
        (st = cfg_int(root, "intermediate_size", 3072, 1, &ff)) ||
        (st = cfg_int(root, "max_position_embeddings", 512, 1,
                      &positions)) ||
        (st = cfg_int(root, "type_vocab_size", 2, 1, &types)) ||
        (st = cfg_positive(root, "layer_norm_eps", 1e-12, &eps)) ||
        (st = cfg_string(root, "hidden_act", &act_name)) ||
        (st = cfg_string(root, "position_embedding_type", &position_type)) ||
        (st = cfg_bool(root, "tie_word_embeddings", 1, &tied)) ||
        (st = cfg_bool(root, "is_decoder", 0, &is_decoder)) ||
        (st = cfg_bool(root, "add_cross_attention", 0, &cross)))
        return st;
    if (vocab > INT32_MAX || d > INT32_MAX || ff > INT32_MAX ||
        types > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" is over 2^31-1",
                         vocab > INT32_MAX ? "vocab_size"
                         : d > INT32_MAX   ? "hidden_size"
                         : ff > INT32_MAX  ? "intermediate_size"
                                           : "type_vocab_size");
    if (d % heads != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"num_attention_heads\" %lld does not "
                         "divide \"hidden_size\" %lld", (long long)heads,
                         (long long)d);
    if (position_type && strcmp(position_type, "absolute") != 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"position_embedding_type\" "
                         "\"%.40s\": only \"absolute\" is supported",
                         position_type);
    if (is_decoder || cross)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\": true is not supported (a "
                         "masked-LM encoder is)",
                         is_decoder ? "is_decoder" : "add_cross_attention");
    if (!isfinite((float)eps))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"layer_norm_eps\" %g is beyond "
                         "float32", eps);
    const int act = gpt2_activation(act_name ? act_name : "gelu");
    if (act < 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"hidden_act\" \"%.60s\" is not "
                         "supported (gelu, gelu_new, gelu_pytorch_tanh, "
                         "relu, silu are)", act_name);
    decoder_config(c, d, heads, ff, act, eps, vocab, layers, positions,
                   TFM_POSITIONAL_LEARNED, tied);
    c->architecture = TFM_ARCH_ENCODER_ONLY;
    c->layer.norm_first = 0;
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    lo->type_vocab_size = types;
    lo->embedding_norm = 1;
    lo->final_norm = 0;
    lo->head_transform = 1;
    return TFM_OK;
}

/* The stored tensors of BERT c (BertForMaskedLM's names: the encoder under
 * "bert.", the head under "cls.", never prefixed):
 *   embeddings.word_embeddings.weight [V, d] -> token_embedding.weight
 *   embeddings.position_embeddings.weight   -> position_embedding.weight
 *   embeddings.token_type_embeddings.weight -> token_type_embedding.weight
 *   embeddings.LayerNorm.*                  -> embedding_norm.*
 *   encoder.layer.<i>.attention.self.query.* [d, d] \
 *   encoder.layer.<i>.attention.self.key.*          > rows of
 *   encoder.layer.<i>.attention.self.value.*       /  self_attn.in_proj_*
 *   encoder.layer.<i>.attention.output.dense.*  -> self_attn.out_proj.*
 *   encoder.layer.<i>.attention.output.LayerNorm.* -> norm1.*
 *   encoder.layer.<i>.intermediate.dense.* [ff, d] -> linear1.*
 *   encoder.layer.<i>.output.dense.* [d, ff]    -> linear2.*
 *   encoder.layer.<i>.output.LayerNorm.*        -> norm2.*
 *   cls.predictions.transform.dense.*           -> head_transform.*
 *   cls.predictions.transform.LayerNorm.*       -> head_norm.*
 *   cls.predictions.bias [V]                    -> lm_head.bias
 *   cls.predictions.decoder.weight (untied only) -> lm_head.weight
 * LayerNorms saved with the old names ".gamma" / ".beta" are found under
 * them (plan_find).  No transposes: nn.Linear's layout is ours. */
static tfm_status bert_plan(const tfm_model_config *c,
                            const tfm_model_options *o,
                            const tfm_layer_options *lo, plan *p)
{
    (void)o;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t V = c->vocab_size;
    const plan_row E[] = {
        { "embeddings.word_embeddings.weight", "token_embedding.weight", 0,
          2, V, d, 0 },
        { "embeddings.position_embeddings.weight",
          "position_embedding.weight", 0, 2, c->context_length, d, 0 },
        { "embeddings.token_type_embeddings.weight",
          "token_type_embedding.weight", 0, 2, lo->type_vocab_size, d, 0 },
        { "embeddings.LayerNorm.weight", "embedding_norm.weight", 0, 1, d, 0,
          0 },
        { "embeddings.LayerNorm.bias", "embedding_norm.bias", 0, 1, d, 0, 0 },
    };
    tfm_status st = plan_add_rows(p, NULL, 0, E, N_ROWS(E));
    for (int64_t i = 0; st == TFM_OK && i < c->n_layers; i++) {
        const plan_row L[] = {
            { "attention.self.query.weight", "self_attn.in_proj_weight", 0,
              2, d, d, 0 },
            { "attention.self.query.bias", "self_attn.in_proj_bias", 0, 1, d,
              0, 0 },
            { "attention.self.key.weight", "self_attn.in_proj_weight", 0, 2,
              d, d, d * d },
            { "attention.self.key.bias", "self_attn.in_proj_bias", 0, 1, d, 0,
              d },
            { "attention.self.value.weight", "self_attn.in_proj_weight", 0, 2,
              d, d, 2 * d * d },
            { "attention.self.value.bias", "self_attn.in_proj_bias", 0, 1, d,
              0, 2 * d },
            { "attention.output.dense.weight", "self_attn.out_proj.weight", 0,
              2, d, d, 0 },
            { "attention.output.dense.bias", "self_attn.out_proj.bias", 0, 1,
              d, 0, 0 },
            { "attention.output.LayerNorm.weight", "norm1.weight", 0, 1, d, 0,
              0 },
            { "attention.output.LayerNorm.bias", "norm1.bias", 0, 1, d, 0,
              0 },
            { "intermediate.dense.weight", "linear1.weight", 0, 2, ff, d, 0 },
            { "intermediate.dense.bias", "linear1.bias", 0, 1, ff, 0, 0 },
            { "output.dense.weight", "linear2.weight", 0, 2, d, ff, 0 },
            { "output.dense.bias", "linear2.bias", 0, 1, d, 0, 0 },
            { "output.LayerNorm.weight", "norm2.weight", 0, 1, d, 0, 0 },
            { "output.LayerNorm.bias", "norm2.bias", 0, 1, d, 0, 0 },
        };
        st = plan_add_rows(p, "encoder.layer.", i, L, N_ROWS(L));
    }
    /* The head: never prefixed, its decoder only when untied. */
    const plan_row H[] = {
        { "cls.predictions.transform.dense.weight", "head_transform.weight",
          0, 2, d, d, 0 },
        { "cls.predictions.transform.dense.bias", "head_transform.bias", 0,
          1, d, 0, 0 },
        { "cls.predictions.transform.LayerNorm.weight", "head_norm.weight",
          0, 1, d, 0, 0 },
        { "cls.predictions.transform.LayerNorm.bias", "head_norm.bias", 0, 1,
          d, 0, 0 },
        { "cls.predictions.bias", "lm_head.bias", 0, 1, V, 0, 0 },
        { "cls.predictions.decoder.weight", "lm_head.weight", 0, 2, V, d, 0 },
    };
    const char *prefix = p->prefix;
    p->prefix = "";
    if (st == TFM_OK)
        st = plan_add_rows(p, NULL, 0, H,
                           N_ROWS(H) - (c->tied_embeddings != 0));
    p->prefix = prefix;
    return st;
}

/* What a BERT checkpoint may hold that a masked-LM model does not use: the
 * tied decoder and its bias (the same tensor as cls.predictions.bias), the
 * pooler and the next-sentence head of BertForPreTraining, and the
 * position_ids buffer of older saves. */
static int bert_ignored(const plan *p, const char *name)
{
    if (strcmp(name, "cls.predictions.decoder.weight") == 0 ||
        strcmp(name, "cls.predictions.decoder.bias") == 0 ||
        strncmp(name, "cls.seq_relationship.", 21) == 0)
        return 1;
    const size_t n = strlen(p->prefix);
    if (strncmp(name, p->prefix, n) != 0)
        return 0;
    return strncmp(name + n, "pooler.", 7) == 0 ||
           strcmp(name + n, "embeddings.position_ids") == 0;
}

/* ---- ViT ---------------------------------------------------------------- */

/* The model of a ViT config.json (transformers' ViTConfig defaults for
 * absent keys: hidden_size 768, num_hidden_layers 12, num_attention_heads
 * 12, intermediate_size 3072, hidden_act "gelu", layer_norm_eps 1e-12,
 * image_size 224, patch_size 16, num_channels 3, qkv_bias true; the label
 * count is that of "id2label", else "num_labels", else 2 as
 * PretrainedConfig's): an encoder-only, pre-norm model of images
 * (tfm_layer_options' patch_size, image_size, num_channels; Dosovitskiy
 * et al. 2021 and modeling_vit.py ViTForImageClassification) with learned
 * positions for the class token and the patches, a final norm and the
 * classifier as the head with its bias (vocab_size = the label count).
 * qkv_bias false, a hidden_act we lack and an image_size that is not a
 * multiple of patch_size are refused, named. */
static tfm_status vit_config(const cJSON *root, tfm_model_config *c,
                             tfm_model_options *o, tfm_layer_options *lo)
{
    int64_t d = 0, layers = 0, heads = 0, ff = 0, image = 0, patch = 0;
    int64_t channels = 0, labels = 0;
    double eps = 0.0;
    int qkv_bias = 1;
    const char *act_name;
    tfm_status st;
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root,
                                                             "id2label");
    if (id2label && !cJSON_IsNull(id2label) && !cJSON_IsObject(id2label))
        return tfm__fail(TFM_ERR_FORMAT, "config.json \"id2label\" must be "
                         "an object of label names");
    if ((st = cfg_int(root, "hidden_size", 768, 1, &d)) ||
        (st = cfg_int(root, "num_hidden_layers", 12, 1, &layers)) ||
        (st = cfg_int(root, "num_attention_heads", 12, 1, &heads)) ||
        (st = cfg_int(root, "intermediate_size", 3072, 1, &ff)) ||
        (st = cfg_positive(root, "layer_norm_eps", 1e-12, &eps)) ||
        (st = cfg_string(root, "hidden_act", &act_name)) ||
        (st = cfg_square(root, "image_size", 224, &image)) ||
        (st = cfg_square(root, "patch_size", 16, &patch)) ||
        (st = cfg_int(root, "num_channels", 3, 1, &channels)) ||
        (st = cfg_bool(root, "qkv_bias", 1, &qkv_bias)) ||
        (st = cfg_int(root, "num_labels", 2, 1, &labels)))
        return st;
    if (id2label && cJSON_IsObject(id2label)) {
        /* the keys are the class ids 0 .. n-1, each once (transformers
         * turns them into ints; the classifier's rows are those ids) */
        labels = cJSON_GetArraySize(id2label);
        for (const cJSON *e = id2label->child; e; e = e->next) {
            char *end = NULL;
            errno = 0;
            const long long k = strtoll(e->string, &end, 10);
            if (!e->string[0] || *end || errno || k < 0 || k >= labels ||
                !(e->string[0] >= '0' && e->string[0] <= '9'))
                return tfm__fail(TFM_ERR_FORMAT,
                                 "config.json \"id2label\" key \"%.40s\" is "
                                 "not a class id 0 .. %lld", e->string,
                                 (long long)(labels - 1));
        }
    }
    if (labels < 1)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "config.json \"id2label\" is "
                         "empty: a ViT without a classifier (ViTModel) is "
                         "not supported, ViTForImageClassification is");
    if (d > INT32_MAX || ff > INT32_MAX || image > INT32_MAX ||
        channels > INT32_MAX || labels > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" is over 2^31-1",
                         d > INT32_MAX        ? "hidden_size"
                         : ff > INT32_MAX     ? "intermediate_size"
                         : image > INT32_MAX  ? "image_size"
                         : channels > INT32_MAX ? "num_channels"
                                                : "id2label");
    if (d % heads != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"num_attention_heads\" %lld does not "
                         "divide \"hidden_size\" %lld", (long long)heads,
                         (long long)d);
    if (image % patch != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"image_size\" %lld is not a multiple "
                         "of \"patch_size\" %lld", (long long)image,
                         (long long)patch);
    if (patch > 46340 || channels * patch * patch > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT, "config.json \"patch_size\" %lld "
                         "is too large", (long long)patch);
    if (!qkv_bias)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"qkv_bias\": false is not supported "
                         "(query, key and value with biases are)");
    if (!isfinite((float)eps))
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"layer_norm_eps\" %g is beyond "
                         "float32", eps);
    const int act = gpt2_activation(act_name ? act_name : "gelu");
    if (act < 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"hidden_act\" \"%.60s\" is not "
                         "supported (gelu, gelu_new, gelu_pytorch_tanh, "
                         "relu, silu are)", act_name);
    const int64_t side = image / patch;
    decoder_config(c, d, heads, ff, act, eps, labels, layers,
                   side * side + 1, TFM_POSITIONAL_LEARNED, 0);
    c->architecture = TFM_ARCH_ENCODER_ONLY;
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    lo->head_bias = 1;
    lo->patch_size = patch;
    lo->image_size = image;
    lo->num_channels = channels;
    return TFM_OK;
}

/* The stored tensors of ViT c (ViTForImageClassification's names: ViTModel
 * under "vit.", the classifier never prefixed):
 *   embeddings.cls_token [1, 1, d]            -> cls_token
 *   embeddings.position_embeddings [1, N+1, d] -> position_embedding.weight
 *   embeddings.patch_embeddings.projection.weight [d, C, P, P]
 *                                             -> patch_embedding.weight
 *   embeddings.patch_embeddings.projection.bias -> patch_embedding.bias
 *   encoder.layer.<i>.layernorm_before.*      -> norm1.*
 *   encoder.layer.<i>.attention.attention.query.* [d, d] \
 *   encoder.layer.<i>.attention.attention.key.*           > rows of
 *   encoder.layer.<i>.attention.attention.value.*        /  in_proj_*
 *   encoder.layer.<i>.attention.output.dense.* -> self_attn.out_proj.*
 *   encoder.layer.<i>.layernorm_after.*       -> norm2.*
 *   encoder.layer.<i>.intermediate.dense.* [ff, d] -> linear1.*
 *   encoder.layer.<i>.output.dense.* [d, ff]  -> linear2.*
 *   layernorm.*                               -> norm.*
 *   classifier.weight [labels, d], .bias      -> lm_head.weight, .bias
 * No transposes: nn.Linear's and nn.Conv2d's layouts are ours. */
static tfm_status vit_plan(const tfm_model_config *c,
                           const tfm_model_options *o,
                           const tfm_layer_options *lo, plan *p)
{
    (void)o;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t P = lo->patch_size;
    const int64_t cls[3] = { 1, 1, d };
    const int64_t pos[3] = { 1, c->context_length, d };
    const int64_t conv[4] = { d, lo->num_channels, P, P };
    tfm_status st;
    if ((st = plan_add_shape(p, "embeddings.cls_token", "cls_token", 3,
                             cls)) ||
        (st = plan_add_shape(p, "embeddings.position_embeddings",
                             "position_embedding.weight", 3, pos)) ||
        (st = plan_add_shape(p, "embeddings.patch_embeddings.projection."
                             "weight", "patch_embedding.weight", 4, conv)))
        return st;
    const plan_row E[] = {
        { "embeddings.patch_embeddings.projection.bias",
          "patch_embedding.bias", 0, 1, d, 0, 0 },
        { "layernorm.weight", "norm.weight", 0, 1, d, 0, 0 },
        { "layernorm.bias", "norm.bias", 0, 1, d, 0, 0 },
    };
    st = plan_add_rows(p, NULL, 0, E, N_ROWS(E));
    for (int64_t i = 0; st == TFM_OK && i < c->n_layers; i++) {
        const plan_row L[] = {
            { "layernorm_before.weight", "norm1.weight", 0, 1, d, 0, 0 },
            { "layernorm_before.bias", "norm1.bias", 0, 1, d, 0, 0 },
            { "attention.attention.query.weight", "self_attn.in_proj_weight",
              0, 2, d, d, 0 },
            { "attention.attention.query.bias", "self_attn.in_proj_bias", 0,
              1, d, 0, 0 },
            { "attention.attention.key.weight", "self_attn.in_proj_weight",
              0, 2, d, d, d * d },
            { "attention.attention.key.bias", "self_attn.in_proj_bias", 0, 1,
              d, 0, d },
            { "attention.attention.value.weight", "self_attn.in_proj_weight",
              0, 2, d, d, 2 * d * d },
            { "attention.attention.value.bias", "self_attn.in_proj_bias", 0,
              1, d, 0, 2 * d },
            { "attention.output.dense.weight", "self_attn.out_proj.weight", 0,
              2, d, d, 0 },
            { "attention.output.dense.bias", "self_attn.out_proj.bias", 0, 1,
              d, 0, 0 },
            { "layernorm_after.weight", "norm2.weight", 0, 1, d, 0, 0 },
            { "layernorm_after.bias", "norm2.bias", 0, 1, d, 0, 0 },
            { "intermediate.dense.weight", "linear1.weight", 0, 2, ff, d, 0 },
            { "intermediate.dense.bias", "linear1.bias", 0, 1, ff, 0, 0 },
            { "output.dense.weight", "linear2.weight", 0, 2, d, ff, 0 },
            { "output.dense.bias", "linear2.bias", 0, 1, d, 0, 0 },
        };
        st = plan_add_rows(p, "encoder.layer.", i, L, N_ROWS(L));
    }
    const plan_row H[] = {
        { "classifier.weight", "lm_head.weight", 0, 2, c->vocab_size, d, 0 },
        { "classifier.bias", "lm_head.bias", 0, 1, c->vocab_size, 0, 0 },
    };
    const char *prefix = p->prefix;
    p->prefix = "";
    if (st == TFM_OK)
        st = plan_add_rows(p, NULL, 0, H, N_ROWS(H));
    p->prefix = prefix;
    return st;
}

/* What a ViT checkpoint may hold that the classifier does not use:
 * ViTModel's pooler (add_pooling_layer) and the mask token of
 * ViTForMaskedImageModeling's embeddings (use_mask_token). */
static int vit_ignored(const plan *p, const char *name)
{
    const size_t n = strlen(p->prefix);
    if (strncmp(name, p->prefix, n) != 0)
        return 0;
    return strncmp(name + n, "pooler.", 7) == 0 ||
           strcmp(name + n, "embeddings.mask_token") == 0;
}

/* ---- Marian ------------------------------------------------------------- */

/* The model of a Marian config.json (transformers' MarianConfig defaults
 * for absent keys: vocab_size 58101, decoder_vocab_size = vocab_size,
 * d_model 1024, encoder_layers and decoder_layers 12, encoder_ffn_dim and
 * decoder_ffn_dim 4096, encoder_attention_heads and
 * decoder_attention_heads 16, activation_function "gelu",
 * max_position_embeddings 1024, scale_embedding false,
 * share_encoder_decoder_embeddings and tie_word_embeddings true): an
 * encoder-decoder, post-norm model (modeling_marian.py's
 * MarianEncoderLayer / MarianDecoderLayer: LayerNorm after each residual,
 * eps 1e-5, nn.LayerNorm's default) without final norms, the embeddings
 * scaled by sqrt(d_model) when scale_embedding, the shared table as the
 * head and final_logits_bias as the logits' bias (tfm_layer_options'
 * final_norm 0 and head_bias).  Marian's sinusoidal positions
 * (MarianSinusoidalPositionalEmbedding: sin in the first half of the
 * columns, cos in the second, angle p / 10000^(2i/d)) are a table, read
 * from the checkpoint's "model.encoder.embed_positions.weight" (or
 * computed, when the checkpoint has none), so the model's positions are
 * learned ones.  What one model of ours cannot hold (separate source and
 * target vocabularies, unequal encoder and decoder widths) is refused,
 * named; the BART-era keys normalize_before, normalize_embedding,
 * add_final_layer_norm and static_position_embeddings are ignored, as
 * transformers' MarianModel ignores them. */
static tfm_status marian_config(const cJSON *root, tfm_model_config *c,
                                tfm_model_options *o, tfm_layer_options *lo)
{
    int64_t vocab = 0, dec_vocab = 0, d = 0, enc_layers = 0, dec_layers = 0;
    int64_t enc_ff = 0, dec_ff = 0, enc_heads = 0, dec_heads = 0;
    int64_t positions = 0;
    int scale = 0, shared = 1, tied = 1;
    const char *act_name;
    tfm_status st;
    if ((st = cfg_int(root, "vocab_size", 58101, 1, &vocab)) ||
        (st = cfg_int(root, "decoder_vocab_size", vocab, 1, &dec_vocab)) ||
        (st = cfg_int(root, "d_model", 1024, 1, &d)) ||
        (st = cfg_int(root, "encoder_layers", 12, 1, &enc_layers)) ||
        (st = cfg_int(root, "decoder_layers", 12, 1, &dec_layers)) ||
        (st = cfg_int(root, "encoder_ffn_dim", 4096, 1, &enc_ff)) ||
        (st = cfg_int(root, "decoder_ffn_dim", 4096, 1, &dec_ff)) ||
        (st = cfg_int(root, "encoder_attention_heads", 16, 1, &enc_heads)) ||
        (st = cfg_int(root, "decoder_attention_heads", 16, 1, &dec_heads)) ||
        (st = cfg_int(root, "max_position_embeddings", 1024, 1,
                      &positions)) ||
        (st = cfg_string(root, "activation_function", &act_name)) ||
        (st = cfg_bool(root, "scale_embedding", 0, &scale)) ||
        (st = cfg_bool(root, "share_encoder_decoder_embeddings", 1,
                       &shared)) ||
        (st = cfg_bool(root, "tie_word_embeddings", 1, &tied)))
        return st;
    if (vocab > INT32_MAX || d > INT32_MAX || enc_ff > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"%s\" is over 2^31-1",
                         vocab > INT32_MAX ? "vocab_size"
                         : d > INT32_MAX   ? "d_model"
                                           : "encoder_ffn_dim");
    if (!shared || dec_vocab != vocab)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\": separate source and target "
                         "embeddings are not supported (one shared table "
                         "is)", !shared ? "share_encoder_decoder_embeddings"
                                        : "decoder_vocab_size");
    if (dec_ff != enc_ff || dec_heads != enc_heads)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"%s\" %lld differs from \"%s\" %lld: "
                         "the encoder and decoder layers must have one "
                         "shape", dec_ff != enc_ff ? "decoder_ffn_dim"
                                                   : "decoder_attention_heads",
                         (long long)(dec_ff != enc_ff ? dec_ff : dec_heads),
                         dec_ff != enc_ff ? "encoder_ffn_dim"
                                          : "encoder_attention_heads",
                         (long long)(dec_ff != enc_ff ? enc_ff : enc_heads));
    if (d % enc_heads != 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "config.json \"encoder_attention_heads\" %lld does "
                         "not divide \"d_model\" %lld", (long long)enc_heads,
                         (long long)d);
    const int act = gpt2_activation(act_name ? act_name : "gelu");
    if (act < 0)
        return tfm__fail(TFM_ERR_UNSUPPORTED,
                         "config.json \"activation_function\" \"%.60s\" is "
                         "not supported (swish, silu, gelu, gelu_new, relu "
                         "are)", act_name);
    decoder_config(c, d, enc_heads, enc_ff, act, 1e-5, vocab, 0, positions,
                   TFM_POSITIONAL_LEARNED, tied);
    c->architecture = TFM_ARCH_ENCODER_DECODER;
    c->layer.norm_first = 0;
    c->n_encoder_layers = enc_layers;
    c->n_decoder_layers = dec_layers;
    c->embedding_scale = scale;
    tfm_model_options_init(o);
    tfm_layer_options_init(lo);
    lo->final_norm = 0;
    lo->head_bias = 1;
    return TFM_OK;
}

/* The stored tensors of Marian c (MarianMTModel's names: MarianModel's
 * under "model.", final_logits_bias and lm_head never prefixed):
 *   shared.weight [V, d]                    -> token_embedding.weight
 *   encoder.embed_positions.weight (if any) -> position_embedding.weight
 *   encoder.layers.<i>.self_attn.{q,k,v}_proj.* -> rows of
 *       transformer.encoder.layers.<i>.self_attn.in_proj_*
 *   encoder.layers.<i>.self_attn.out_proj.* -> ...self_attn.out_proj.*
 *   encoder.layers.<i>.self_attn_layer_norm.* -> ...norm1.*
 *   encoder.layers.<i>.fc1.*, fc2.*         -> ...linear1.*, linear2.*
 *   encoder.layers.<i>.final_layer_norm.*   -> ...norm2.*
 *   decoder.layers.<i>.self_attn.*, self_attn_layer_norm.* -> the same
 *       under transformer.decoder.layers.<i>. (norm1)
 *   decoder.layers.<i>.encoder_attn.{q,k,v,out}_proj.* -> multihead_attn.*
 *   decoder.layers.<i>.encoder_attn_layer_norm.* -> norm2.*
 *   decoder.layers.<i>.fc1.*, fc2.*, final_layer_norm.* -> linear1.*,
 *       linear2.*, norm3.*
 *   final_logits_bias [1, V]                -> lm_head.bias
 *   lm_head.weight (untied only)            -> lm_head.weight
 * No transposes: nn.Linear's layout is ours. */
static tfm_status marian_attention_rows(plan *p, const char *stack,
                                        int64_t i, const char *stored,
                                        const char *ours, int64_t d)
{
    char s_name[NAME_SIZE], o_name[NAME_SIZE];
    const char *const qkv[3] = { "q_proj", "k_proj", "v_proj" };
    tfm_status st = TFM_OK;
    for (int k = 0; k < 4 && st == TFM_OK; k++) {
        for (int b = 0; b < 2 && st == TFM_OK; b++) {
            snprintf(s_name, sizeof s_name, "%s.layers.%lld.%s.%s.%s", stack,
                     (long long)i, stored, k < 3 ? qkv[k] : "out_proj",
                     b ? "bias" : "weight");
            snprintf(o_name, sizeof o_name,
                     "transformer.%s.layers.%lld.%s.%s%s", stack,
                     (long long)i, ours, k < 3 ? "in_proj_" : "out_proj.",
                     b ? "bias" : "weight");
            st = plan_add(p, s_name, o_name, 0, b ? 1 : 2, d, b ? 0 : d);
            if (st == TFM_OK)
                p->t[p->n - 1].offset = k < 3 ? k * d * (b ? 1 : d) : 0;
        }
    }
    return st;
}

/* A Marian layer's tensors but its attention: rows[k] ("stored",
 * "ours") of `stack`'s layer i, LayerNorms [d] and fc1 / fc2. */
static tfm_status marian_layer_rows(plan *p, const char *stack, int64_t i,
                                    const char *const (*names)[2], int n,
                                    int64_t d, int64_t ff)
{
    char s_name[NAME_SIZE], o_name[NAME_SIZE];
    tfm_status st = TFM_OK;
    for (int k = 0; k < n && st == TFM_OK; k++) {
        const int fc1 = strcmp(names[k][0], "fc1") == 0;
        const int fc2 = strcmp(names[k][0], "fc2") == 0;
        for (int b = 0; b < 2 && st == TFM_OK; b++) {
            snprintf(s_name, sizeof s_name, "%s.layers.%lld.%s.%s", stack,
                     (long long)i, names[k][0], b ? "bias" : "weight");
            snprintf(o_name, sizeof o_name, "transformer.%s.layers.%lld.%s.%s",
                     stack, (long long)i, names[k][1], b ? "bias" : "weight");
            const int64_t rows = fc1 ? ff : d;
            const int64_t cols = !b && (fc1 || fc2) ? (fc2 ? ff : d) : 0;
            st = plan_add(p, s_name, o_name, 0, cols ? 2 : 1, rows, cols);
        }
    }
    return st;
}

static tfm_status marian_plan(const tfm_model_config *c,
                              const tfm_model_options *o,
                              const tfm_layer_options *lo, plan *p)
{
    (void)o;
    (void)lo;
    const int64_t d = c->layer.d_model, ff = c->layer.d_ff;
    const int64_t V = c->vocab_size;
    static const char *const ENC[][2] = {
        { "self_attn_layer_norm", "norm1" }, { "fc1", "linear1" },
        { "fc2", "linear2" }, { "final_layer_norm", "norm2" },
    };
    static const char *const DEC[][2] = {
        { "self_attn_layer_norm", "norm1" },
        { "encoder_attn_layer_norm", "norm2" }, { "fc1", "linear1" },
        { "fc2", "linear2" }, { "final_layer_norm", "norm3" },
    };
    tfm_status st = plan_add(p, "shared.weight", "token_embedding.weight", 0,
                             2, V, d);
    if (st == TFM_OK && p->has_positions)
        st = plan_add(p, "encoder.embed_positions.weight",
                      "position_embedding.weight", 0, 2, c->context_length,
                      d);
    for (int64_t i = 0; st == TFM_OK && i < c->n_encoder_layers; i++)
        if ((st = marian_attention_rows(p, "encoder", i, "self_attn",
                                        "self_attn", d)) == TFM_OK)
            st = marian_layer_rows(p, "encoder", i, ENC, 4, d, ff);
    for (int64_t i = 0; st == TFM_OK && i < c->n_decoder_layers; i++)
        if ((st = marian_attention_rows(p, "decoder", i, "self_attn",
                                        "self_attn", d)) == TFM_OK &&
            (st = marian_attention_rows(p, "decoder", i, "encoder_attn",
                                        "multihead_attn", d)) == TFM_OK)
            st = marian_layer_rows(p, "decoder", i, DEC, 5, d, ff);
    const char *prefix = p->prefix;
    p->prefix = "";
    if (st == TFM_OK)
        st = plan_add(p, "final_logits_bias", "lm_head.bias", 0, 2, 1, V);
    p->prefix = prefix;
    return st == TFM_OK ? plan_add_head(p, c) : st;
}

/* What a Marian checkpoint may hold that the model does not use: the
 * tied copies of the shared table (the encoder's and decoder's
 * embed_tokens, the tied lm_head) and the decoder's copy of the position
 * table (transformers fills both tables from one formula).  Their shapes
 * are checked (marian_check_copies), their values not compared. */
static int marian_ignored(const plan *p, const char *name)
{
    if (strcmp(name, "lm_head.weight") == 0)
        return 1; /* tied (not planned when untied) */
    const size_t n = strlen(p->prefix);
    if (strncmp(name, p->prefix, n) != 0)
        return 0;
    name += n;
    return strcmp(name, "encoder.embed_tokens.weight") == 0 ||
           strcmp(name, "decoder.embed_tokens.weight") == 0 ||
           strcmp(name, "decoder.embed_positions.weight") == 0 ||
           (!p->has_positions &&
            strcmp(name, "encoder.embed_positions.weight") == 0);
}

/* The copies marian_ignored drops must still be what they copy: the tied
 * tables [V, d] and the decoder's position table [positions, d], of a
 * float dtype (transformers refuses a size mismatch of any of them). */
static tfm_status marian_check_copies(const plan *p, const shards *s,
                                      const tfm_model_config *c)
{
    const int64_t d = c->layer.d_model;
    const struct { const char *name; int prefixed; int64_t rows; } copies[] = {
        { "encoder.embed_tokens.weight", 1, c->vocab_size },
        { "decoder.embed_tokens.weight", 1, c->vocab_size },
        { "decoder.embed_positions.weight", 1, c->context_length },
        { "lm_head.weight", 0, c->vocab_size },
    };
    for (size_t k = 0; k < sizeof copies / sizeof copies[0]; k++) {
        char name[NAME_SIZE];
        snprintf(name, sizeof name, "%s%s",
                 copies[k].prefixed ? p->prefix : "", copies[k].name);
        const int f = shards_find(s, name);
        if (f < 0 || (!c->tied_embeddings && !copies[k].prefixed))
            continue; /* absent, or the untied head (planned) */
        tfm_dtype dtype;
        int rank;
        int64_t shape[TFM_SAFETENSORS_MAX_RANK];
        tfm_safetensors_info(s->files[f], name, &dtype, &rank, shape);
        if ((dtype != TFM_DTYPE_F32 && dtype != TFM_DTYPE_F16 &&
             dtype != TFM_DTYPE_BF16 && dtype != TFM_DTYPE_F64) ||
            rank != 2 || shape[0] != copies[k].rows || shape[1] != d) {
            char has[96], want[96];
            const int64_t w[2] = { copies[k].rows, d };
            tfm__format_shape(has, sizeof has, rank, shape);
            tfm__format_shape(want, sizeof want, 2, w);
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor " QUOTED " has shape %s (or an integer "
                             "dtype), but config.json gives %s float", name,
                             has, want);
        }
    }
    return TFM_OK;
}

/* Marian's sinusoidal table (MarianSinusoidalPositionalEmbedding) into
 * the model's learned positions, for a checkpoint without one: row p,
 * column i < ceil(d/2) = sin(p / 10000^(2i/d)), column ceil(d/2) + i =
 * cos(p / 10000^(2i/d)), angles in double precision. */
static void marian_positions(tfm_module *model)
{
    tfm__model *m = (tfm__model *)model;
    const int64_t d = m->config.layer.d_model;
    const int64_t half = (d + 1) / 2;
    float *w = m->position_embedding->weight;
    for (int64_t pos = 0; pos < m->config.context_length; pos++) {
        float *row = w + pos * d;
        for (int64_t j = 0; j < d; j += 2)
            row[j / 2] = (float)sin((double)pos /
                                    pow(10000.0, (double)j / (double)d));
        for (int64_t j = 1; j < d; j += 2)
            row[half + j / 2] = (float)cos(
                (double)pos / pow(10000.0, (double)(j - 1) / (double)d));
    }
}

/* ---- loading ------------------------------------------------------------ */

/* The checkpoint families read: model_type, the prefix its base model's
 * tensors are saved under, config.json's name for the layer count, the
 * most tensors a layer and outside the layers a checkpoint of it
 * holds (the plan's size), and its config / plan / ignored functions. */
typedef struct family {
    const char *model_type, *prefix, *layers_key;
    int per_layer, outside;
    tfm_status (*config)(const cJSON *, tfm_model_config *,
                         tfm_model_options *, tfm_layer_options *);
    tfm_status (*plan)(const tfm_model_config *, const tfm_model_options *,
                       const tfm_layer_options *, plan *);
    int (*ignored)(const plan *, const char *);
} family;

static const family FAMILIES[] = {
    /* GPT2LMHeadModel saves GPT2Model's tensors under "transformer.",
     * LlamaForCausalLM LlamaModel's under "model.", BertForMaskedLM
     * BertModel's under "bert.". */
    { "gpt2", "transformer.", "n_layer", 12, 5, gpt2_config, gpt2_plan,
      gpt2_ignored },
    { "llama", "model.", "num_hidden_layers", 9, 3, llama_config,
      llama_plan, llama_ignored },
    { "bert", "bert.", "num_hidden_layers", 16, 11, bert_config, bert_plan,
      bert_ignored },
    /* MarianMTModel saves MarianModel's under "model."; a plan entry per
     * encoder layer (16) and decoder layer (26), the larger counted for
     * both (n_layers is the larger stack). */
    { "marian", "model.", "encoder_layers", 42, 4, marian_config,
      marian_plan, marian_ignored },
    /* ViTForImageClassification saves ViTModel's under "vit.". */
    { "vit", "vit.", "num_hidden_layers", 16, 8, vit_config, vit_plan,
      vit_ignored },
};

tfm_status tfm__hub_model_load(const char *dir, tfm_module **out)
{
    cJSON *config = NULL, *index = NULL;
    shards s = { 0 };
    plan p = { 0 };
    tfm_module *model = NULL;
    tfm_model_config c;
    tfm_model_options o;
    tfm_layer_options lo;
    tfm_model_options_init(&o);
    tfm_layer_options_init(&lo);
    const char *type = NULL;
    const family *fam = NULL;
    tfm_status st = read_json(dir, "config.json", &config);
    if (st == TFM_OK && (st = cfg_string(config, "model_type", &type)) ==
                            TFM_OK && !type)
        st = tfm__fail(TFM_ERR_FORMAT,
                       "%.200s/config.json has no \"model_type\"", dir);
    if (st == TFM_OK) {
        for (size_t k = 0; k < sizeof FAMILIES / sizeof FAMILIES[0]; k++)
            if (strcmp(type, FAMILIES[k].model_type) == 0)
                fam = &FAMILIES[k];
        if (fam)
            st = fam->config(config, &c, &o, &lo);
        else
            st = tfm__fail(TFM_ERR_UNSUPPORTED,
                           "config.json \"model_type\" is \"%.60s\": this "
                           "library reads \"gpt2\", \"llama\", \"bert\", "
                           "\"marian\" and \"vit\" checkpoints", type);
    }
    if (st == TFM_OK) /* the configuration's own contradictions, named */
        st = tfm__model_config_check(&c, &o);
    /* The plan's layer count: an encoder-decoder's larger stack (named
     * by its own key in the messages). */
    int64_t layers = 0;
    const char *layers_key = fam ? fam->layers_key : NULL;
    if (st == TFM_OK) {
        layers = c.n_layers;
        if (c.architecture == TFM_ARCH_ENCODER_DECODER) {
            const int dec = c.n_decoder_layers > c.n_encoder_layers;
            layers = dec ? c.n_decoder_layers : c.n_encoder_layers;
            if (dec)
                layers_key = "decoder_layers";
        }
    }
    if (st == TFM_OK && layers > (INT32_MAX - fam->outside) / fam->per_layer)
        st = tfm__fail(TFM_ERR_FORMAT, "config.json \"%s\" %lld is too "
                       "large", layers_key, (long long)layers);
    if (st == TFM_OK && (st = shards_list(dir, &s, &index)) == TFM_OK &&
        (st = shards_open(dir, &s)) == TFM_OK)
        st = shards_check_index(&s, index);
    if (st == TFM_OK) {
        /* More layers than the shards hold tensors is refused before the
         * plan (per_layer tensors a layer, about 400 bytes each) is
         * allocated, so the plan is never larger than per_layer times the
         * tensor count; a closer miss is named by its first missing tensor
         * (plan_find). */
        int64_t stored = 0;
        for (int f = 0; f < s.n; f++)
            stored += tfm_safetensors_count(s.files[f]);
        if (layers > stored)
            st = tfm__fail(TFM_ERR_FORMAT,
                           "config.json \"%s\" %lld needs %lld tensors "
                           "or more, but the checkpoint holds %lld",
                           layers_key, (long long)layers,
                           (long long)(fam->per_layer * layers + 2),
                           (long long)stored);
    }
    if (st == TFM_OK) {
        p.cap = (int)(fam->per_layer * layers + fam->outside);
        p.n_layer = layers;
        p.t = tfm__calloc((size_t)p.cap, sizeof *p.t);
        if (!p.t)
            st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st == TFM_OK) {
        p.prefix = shards_any_prefixed(&s, fam->prefix) ? fam->prefix : "";
        if (strcmp(fam->model_type, "marian") == 0) {
            char name[NAME_SIZE];
            snprintf(name, sizeof name, "%sencoder.embed_positions.weight",
                     p.prefix);
            p.has_positions = shards_find(&s, name) >= 0;
            if (!p.has_positions)
                p.computed = "position_embedding.weight";
        }
        if ((st = fam->plan(&c, &o, &lo, &p)) == TFM_OK &&
            (st = plan_find(&p, &s)) == TFM_OK)
            st = plan_no_extra(&p, &s, fam->ignored);
        if (st == TFM_OK && strcmp(fam->model_type, "marian") == 0)
            st = marian_check_copies(&p, &s, &c);
    }
    if (st == TFM_OK &&
        (st = tfm_model_create_v2(&c, &o, &lo, &model)) == TFM_OK &&
        (st = plan_covers(&p, model)) == TFM_OK)
        st = plan_load(&p, &s, model);
    if (st == TFM_OK && strcmp(fam->model_type, "marian") == 0 &&
        !p.has_positions)
        marian_positions(model);
    shards_close(&s);
    tfm__free(p.t);
    cJSON_Delete(index);
    cJSON_Delete(config);
    if (st != TFM_OK) {
        tfm_module_free(model);
        return st;
    }
    *out = model;
    return TFM_OK;
}
