/* Internal: the contract between the shared code of the Hugging Face hub
 * loader (hub_model.c: the family table and tfm__hub_model_load;
 * hub_config.c: config.json's keys; hub_shards.c: the safetensors shards;
 * hub_plan.c: the plan of stored tensor -> parameter) and the checkpoint
 * family files (gpt2.c, llama.c, bert.c, marian.c, vit.c), each of which
 * defines one tfm__hub_family row.  A new family is a new file, its row
 * declared below and listed in hub_model.c's table. */
#ifndef TFM_SRC_HUB_FAMILY_H
#define TFM_SRC_HUB_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "formats/safetensors_impl.h"
#include "transformer/model.h"
#include "transformer/module.h"

/* A tensor or parameter name, with its terminating 0. */
#define TFM__HUB_NAME_SIZE 192

/* Tensor names are quoted in messages, cut to this many bytes. */
#define TFM__HUB_QUOTED "\"%.120s\""

/* The number of rows of a tfm__hub_plan_row array. */
#define TFM__HUB_N_ROWS(rows) (sizeof (rows) / sizeof (rows)[0])

/* ---- config.json (hub_config.c) ---------------------------------------- */

/* config.json's key (absent or null: def) as a whole number >= min. */
tfm_status tfm__hub_cfg_int(const cJSON *root, const char *key, int64_t def,
                            int64_t min, int64_t *out);

/* config.json's key that ViT's config takes as an int or a pair
 * (height, width), as a whole number >= 1 (absent or null: def): a pair
 * of two equal numbers is that number; a non-square pair is refused
 * (TFM_ERR_UNSUPPORTED). */
tfm_status tfm__hub_cfg_square(const cJSON *root, const char *key,
                               int64_t def, int64_t *out);

/* config.json's key (absent: def) as a finite number > 0. */
tfm_status tfm__hub_cfg_positive(const cJSON *root, const char *key,
                                 double def, double *out);

/* config.json's key (absent: def) as true / false. */
tfm_status tfm__hub_cfg_bool(const cJSON *root, const char *key, int def,
                             int *out);

/* config.json's key as a string, or NULL (absent); *out points into root
 * (owned by it). */
tfm_status tfm__hub_cfg_string(const cJSON *root, const char *key,
                               const char **out);

/* key's value x is finite as a float32, else a TFM_ERR_FORMAT failure. */
tfm_status tfm__hub_cfg_float32(double x, const char *key);

/* a_key's value a divides b_key's value b, else a TFM_ERR_FORMAT failure
 * naming both ("config.json "n_head" 5 does not divide "n_embd" 64"). */
tfm_status tfm__hub_cfg_divides(int64_t a, const char *a_key, int64_t b,
                                const char *b_key);

/* transformers' ACT2FN names -> our activations (tfm_activation); NULL is
 * GPT-2's default, gelu_new; -1 when unsupported. */
int tfm__hub_activation(const char *name);

/* The activation config.json's key names (act_name; NULL: fallback, which
 * may itself be NULL, GPT-2's default) into *act, or a TFM_ERR_UNSUPPORTED
 * failure naming the key, the value and the names `supported` lists. */
tfm_status tfm__hub_cfg_activation(const char *act_name, const char *fallback,
                                   const char *key, const char *supported,
                                   int *act);

/* The pre-norm decoder-only model configuration the families start from
 * (GPT-2 with learned positions, Llama with none; BERT, ViT and Marian
 * change the architecture and norms after): c from the checked
 * config.json values (d_model d, heads, d_ff, activation act, LayerNorm
 * eps, vocabulary, layer count, context length, positions, tied head). */
void tfm__hub_decoder_config(tfm_model_config *c, int64_t d, int64_t heads,
                             int64_t d_ff, int act, double eps, int64_t vocab,
                             int64_t layers, int64_t positions,
                             tfm_positional positional, int tied);

/* ---- shards (hub_shards.c) --------------------------------------------- */

/* The weight files of a checkpoint directory. */
typedef struct tfm__hub_shards {
    int n;
    char **names;              /* [n] file names inside the directory, owned;
                                  sorted (tfm__hub_shards_list) */
    tfm_safetensors **files;   /* [n], owned; NULL once read and closed */
} tfm__hub_shards;

/* Parses the JSON object in file dir/name into *root (the caller's, to
 * cJSON_Delete). */
tfm_status tfm__hub_read_json(const char *dir, const char *name,
                              cJSON **root);

/* The shard file names of dir into s (zeroed by the caller): just
 * "model.safetensors", or the distinct values of the "weight_map" of
 * model.safetensors.index.json, whose parsed root goes to *index (the
 * caller's, to cJSON_Delete; NULL without an index). */
tfm_status tfm__hub_shards_list(const char *dir, tfm__hub_shards *s,
                                cJSON **index);

/* Opens (maps and validates) every shard listed in s. */
tfm_status tfm__hub_shards_open(const char *dir, tfm__hub_shards *s);

/* Every "weight_map" entry of index (or NULL) is a tensor of the shard it
 * names. */
tfm_status tfm__hub_shards_check_index(const tfm__hub_shards *s,
                                       const cJSON *index);

/* The shard holding tensor name, or -1. */
int tfm__hub_shards_find(const tfm__hub_shards *s, const char *name);

/* Whether any shard holds a tensor whose name begins with prefix. */
int tfm__hub_shards_any_prefixed(const tfm__hub_shards *s,
                                 const char *prefix);

/* Closes every shard and frees s's lists; s is zeroed. */
void tfm__hub_shards_close(tfm__hub_shards *s);

/* ---- the plan (hub_plan.c) --------------------------------------------- */

/* One stored tensor and the parameter it becomes. */
typedef struct tfm__hub_tensor {
    char stored[TFM__HUB_NAME_SIZE]; /* name in the checkpoint */
    char ours[TFM__HUB_NAME_SIZE];   /* parameter name (model.h) */
    int transpose;             /* stored [a, b] -> ours [b, a] */
    int64_t offset;            /* first float of ours it fills (rows of a
                                * packed matrix: Llama's q, k, v) */
    int rank;                  /* stored shape (rank 1 to 4) */
    int64_t shape[4];
    int shard;                 /* found in shards.files[shard] */
} tfm__hub_tensor;

/* Which stored tensor becomes which parameter: t[0 .. n-1] of cap
 * (allocated by the loader, never grown). */
typedef struct tfm__hub_plan {
    tfm__hub_tensor *t;
    int n, cap;
    const char *prefix;        /* "" or the family's prefix, such as
                                * "transformer." (static) */
    int64_t n_layer;           /* for the messages */
    int has_positions;         /* set by a family's before_plan hook
                                * (Marian: the checkpoint has its
                                * encoder's position table) */
    const char *computed;      /* a parameter the family's compute hook
                                * fills (not read), or NULL (static) */
    int64_t computed_numel;    /* its number of values, set by the
                                * family's plan (bounded by the loader
                                * before the model is allocated) */
} tfm__hub_plan;

/* One stored tensor of a plan table: its name (after the prefix and, in a
 * layer, "<stack><i>."), the parameter it fills from float `offset`, and
 * its stored shape [a] or [a, b] (transposed into ours when asked). */
typedef struct tfm__hub_plan_row {
    const char *stored, *ours;
    int transpose, rank;
    int64_t a, b, offset;
} tfm__hub_plan_row;

/* Appends stored (after p->prefix) -> ours, of stored shape [a] (rank 1)
 * or [a, b] (rank 2), offset 0; a failure when the plan is full or a name
 * too long. */
tfm_status tfm__hub_plan_add(tfm__hub_plan *p, const char *stored,
                             const char *ours, int transpose, int rank,
                             int64_t a, int64_t b);

/* tfm__hub_plan_add of a tensor of any rank up to 4, shape[0 .. rank-1],
 * never transposed. */
tfm_status tfm__hub_plan_add_shape(tfm__hub_plan *p, const char *stored,
                                   const char *ours, int rank,
                                   const int64_t *shape);

/* tfm__hub_plan_add of each of rows[0 .. n-1]: layer i's under `stack`
 * (stored "<stack><i>.<stored>", ours "layers.<i>.<ours>"), or the
 * top-level tensors when stack is NULL. */
tfm_status tfm__hub_plan_add_rows(tfm__hub_plan *p, const char *stack,
                                  int64_t i, const tfm__hub_plan_row *rows,
                                  size_t n);

/* tfm__hub_plan_add_rows of layer i of a BERT-style encoder (BERT's,
 * ViT's), stored under "encoder.layer.<i>.", of width d and feed-forward
 * width ff: the self-attention's `self` + "query." / "key." / "value."
 * "weight" [d, d] and "bias" [d] (rows 0, d, 2d of
 * self_attn.in_proj_weight / in_proj_bias), "attention.output.dense.*"
 * (self_attn.out_proj.*), "intermediate.dense.*" [ff, d] (linear1.*),
 * "output.dense.*" [d, ff] (linear2.*), and the family's two rows each of
 * norm1[0 .. 1] and norm2[0 .. 1] (read, not kept).  The plan's order is
 * the family's: post-norm (norm_first 0, BERT) attention, norm1,
 * feed-forward, norm2; pre-norm (ViT) norm1, attention, norm2,
 * feed-forward.  Errors as tfm__hub_plan_add (a full plan, a name too
 * long); the rows added before a failure stay in p. */
tfm_status tfm__hub_plan_add_bert_layer(tfm__hub_plan *p, int64_t i,
                                        const char *self, int64_t d,
                                        int64_t ff,
                                        const tfm__hub_plan_row norm1[2],
                                        const tfm__hub_plan_row norm2[2],
                                        int norm_first);

/* tfm__hub_plan_add_rows of top-level rows[0 .. n-1] without p->prefix
 * (the heads saved outside the base model). */
tfm_status tfm__hub_plan_add_unprefixed(tfm__hub_plan *p,
                                        const tfm__hub_plan_row *rows,
                                        size_t n);

/* The rest of a stored name after p->prefix (pointing into name), or NULL
 * when name does not begin with the prefix. */
const char *tfm__hub_unprefixed(const tfm__hub_plan *p, const char *name);

/* An untied model's own head, "lm_head.weight" [V, d], never prefixed;
 * nothing when tied. */
tfm_status tfm__hub_plan_add_head(tfm__hub_plan *p,
                                  const tfm_model_config *c);

/* Whether `name` ends with `tail`. */
int tfm__hub_ends_with(const char *name, const char *tail);

/* Every planned tensor is in a shard with its shape and a float dtype
 * (sets each t[i].shard). */
tfm_status tfm__hub_plan_find(tfm__hub_plan *p, const tfm__hub_shards *s);

/* The number of values the plan reads from the shards (each planned
 * tensor's shape, checked against the stored one by tfm__hub_plan_find). */
int64_t tfm__hub_plan_stored_numel(const tfm__hub_plan *p);

/* No shard holds a tensor outside the plan but those `ignored` accepts. */
tfm_status tfm__hub_plan_no_extra(const tfm__hub_plan *p,
                                  const tfm__hub_shards *s,
                                  int (*ignored)(const tfm__hub_plan *,
                                                 const char *));

/* Every parameter of m but p->computed is filled exactly by the plan. */
tfm_status tfm__hub_plan_covers(const tfm__hub_plan *p, const tfm_module *m);

/* Shard by shard, converts each planned tensor into its parameter of m,
 * checks it is finite, and closes the shard.  keep_dtype and map_in_place
 * are tfm_load_options' (transformer/weights.h): a convertible weight
 * that one stored tensor fills as it lies (no transpose, no other piece)
 * is bound to the shard's bytes (nn/weight_bind.h: in place from its
 * mapping when map_in_place and kept as stored); the others are read as
 * float32 and, unless keep_dtype is F32, converted once the shard that
 * completes them is read (AUTO: to F16 / BF16 when every piece was
 * stored so, else left float32). */
tfm_status tfm__hub_plan_load(const tfm__hub_plan *p, tfm__hub_shards *s,
                              int keep_dtype, int map_in_place,
                              tfm_module *m);

/* ---- the families (one file each) -------------------------------------- */

/* A checkpoint family: model_type, the prefix its base model's tensors are
 * saved under, config.json's name for the layer count (and for the
 * decoder's, when an encoder-decoder's decoder stack is the larger), the
 * most tensors a layer and outside the layers a checkpoint of it holds
 * (the plan's size), its config / plan / ignored functions and the
 * optional hooks the loader calls at fixed points (NULL: nothing to do). */
typedef struct tfm__hub_family {
    const char *model_type, *prefix, *layers_key;
    const char *decoder_layers_key; /* encoder-decoder only, else NULL */
    int per_layer, outside;
    /* config.json (root) -> the model's configuration and options. */
    tfm_status (*config)(const cJSON *root, tfm_model_config *c,
                         tfm_model_options *o, tfm_layer_options *lo);
    /* The stored tensors of a model of c, o, lo, into p (p->prefix set). */
    tfm_status (*plan)(const tfm_model_config *c, const tfm_model_options *o,
                       const tfm_layer_options *lo, tfm__hub_plan *p);
    /* Whether a stored tensor outside the plan may be dropped. */
    int (*ignored)(const tfm__hub_plan *p, const char *name);
    /* Hook: before plan, once p->prefix is chosen, what the plan takes
     * from the shards (p->has_positions, p->computed).  Marian's. */
    void (*before_plan)(tfm__hub_plan *p, const tfm__hub_shards *s);
    /* Hook: after tfm__hub_plan_no_extra, checks of the tensors `ignored`
     * dropped.  Marian's. */
    tfm_status (*check_ignored)(const tfm__hub_plan *p,
                                const tfm__hub_shards *s,
                                const tfm_model_config *c);
    /* Hook: after every tensor is loaded, when p->computed is set: fills
     * that parameter of model.  Required of a family whose before_plan
     * sets p->computed (Marian's). */
    void (*compute)(const tfm__hub_plan *p, tfm_module *model);
} tfm__hub_family;

extern const tfm__hub_family tfm__hub_gpt2;   /* gpt2.c */
extern const tfm__hub_family tfm__hub_llama;  /* llama.c */
extern const tfm__hub_family tfm__hub_bert;   /* bert.c */
extern const tfm__hub_family tfm__hub_marian; /* marian.c */
extern const tfm__hub_family tfm__hub_vit;    /* vit.c */

#endif
