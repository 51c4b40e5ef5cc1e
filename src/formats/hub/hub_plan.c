/* The plan of a hub checkpoint (hub_family.h): which stored tensor becomes
 * which parameter (row offset, transpose), built by the family's plan
 * function, found in the shards with its shape and a float dtype, checked
 * to leave no tensor over and to fill every parameter exactly, then read
 * shard by shard straight into the parameters. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/tensor_impl.h"
#include "formats/hub/hub_family.h"
#include "formats/safetensors_impl.h"
#include "nn/weight_bind.h"
#include "transformer/weights.h"
#include "nn/module_impl.h"

tfm_status tfm__hub_plan_add(tfm__hub_plan *p, const char *stored,
                             const char *ours, int transpose, int rank,
                             int64_t a, int64_t b)
{
    if (p->n == p->cap)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "tensor plan overflow");
    tfm__hub_tensor *t = &p->t[p->n++];
    const int a_len = snprintf(t->stored, sizeof t->stored, "%s%s",
                               p->prefix, stored);
    const int b_len = snprintf(t->ours, sizeof t->ours, "%s", ours);
    if (a_len < 0 || (size_t)a_len >= sizeof t->stored || b_len < 0 ||
        (size_t)b_len >= sizeof t->ours)
        return tfm__fail(TFM_ERR_FORMAT,
                         "tensor name " TFM__HUB_QUOTED " is too long",
                         stored);
    t->transpose = transpose;
    t->offset = 0;
    t->rank = rank;
    t->shape[0] = a;
    t->shape[1] = b;
    t->shard = -1;
    return TFM_OK;
}

/* tfm__hub_plan_add of a tensor of any rank up to 4 (ViT's convolution weight
 * [d, C, P, P], class token [1, 1, d], positions [1, N + 1, d]), never
 * transposed. */
tfm_status tfm__hub_plan_add_shape(tfm__hub_plan *p, const char *stored,
                                   const char *ours, int rank,
                                   const int64_t *shape)
{
    tfm_status st = tfm__hub_plan_add(p, stored, ours, 0, rank, shape[0],
                                      rank > 1 ? shape[1] : 0);
    for (int k = 2; st == TFM_OK && k < rank; k++)
        p->t[p->n - 1].shape[k] = shape[k];
    return st;
}

/* The number of floats of a planned tensor. */
static int64_t planned_numel(const tfm__hub_tensor *t)
{
    int64_t n = 1;
    for (int k = 0; k < t->rank; k++)
        n *= t->shape[k];
    return n;
}

/* tfm__hub_plan_add of layer i's tensor: stored "<stack><i>.<stored>"
 * (after the prefix), ours "layers.<i>.<ours>", filling ours from float
 * `offset`. */
static tfm_status plan_add_layer(tfm__hub_plan *p, const char *stack,
                                 int64_t i, const char *stored,
                                 const char *ours, int transpose, int rank,
                                 int64_t a, int64_t b, int64_t offset)
{
    char s_name[TFM__HUB_NAME_SIZE], o_name[TFM__HUB_NAME_SIZE];
    snprintf(s_name, sizeof s_name, "%s%lld.%s", stack, (long long)i, stored);
    snprintf(o_name, sizeof o_name, "layers.%lld.%s", (long long)i, ours);
    tfm_status st =
        tfm__hub_plan_add(p, s_name, o_name, transpose, rank, a, b);
    if (st == TFM_OK)
        p->t[p->n - 1].offset = offset;
    return st;
}

/* tfm__hub_plan_add of each of rows[0 .. n-1]: layer i's under `stack`, or the
 * top-level tensors when stack is NULL. */
tfm_status tfm__hub_plan_add_rows(tfm__hub_plan *p, const char *stack,
                                  int64_t i, const tfm__hub_plan_row *rows,
                                  size_t n)
{
    tfm_status st = TFM_OK;
    for (size_t k = 0; k < n && st == TFM_OK; k++) {
        const tfm__hub_plan_row *r = &rows[k];
        if (stack)
            st = plan_add_layer(p, stack, i, r->stored, r->ours,
                                r->transpose, r->rank, r->a, r->b,
                                r->offset);
        else if ((st = tfm__hub_plan_add(p, r->stored, r->ours, r->transpose,
                                         r->rank, r->a, r->b)) == TFM_OK)
            p->t[p->n - 1].offset = r->offset;
    }
    return st;
}

/* tfm__hub_plan_add_bert_layer (hub_family.h): the layer's attention and
 * feed-forward rows built here, the norms' rows the family's, added in the
 * order the family saves them. */
tfm_status tfm__hub_plan_add_bert_layer(tfm__hub_plan *p, int64_t i,
                                        const char *self, int64_t d,
                                        int64_t ff,
                                        const tfm__hub_plan_row norm1[2],
                                        const tfm__hub_plan_row norm2[2],
                                        int norm_first)
{
    static const char *const QKV[3] = { "query", "key", "value" };
    char names[6][TFM__HUB_NAME_SIZE];
    tfm__hub_plan_row A[8];
    for (int k = 0; k < 3; k++) {
        snprintf(names[2 * k], sizeof names[0], "%s%s.weight", self, QKV[k]);
        snprintf(names[2 * k + 1], sizeof names[0], "%s%s.bias", self,
                 QKV[k]);
        A[2 * k] = (tfm__hub_plan_row){ names[2 * k],
                                        "self_attn.in_proj_weight", 0, 2, d,
                                        d, k * d * d };
        A[2 * k + 1] = (tfm__hub_plan_row){ names[2 * k + 1],
                                            "self_attn.in_proj_bias", 0, 1,
                                            d, 0, k * d };
    }
    A[6] = (tfm__hub_plan_row){ "attention.output.dense.weight",
                                "self_attn.out_proj.weight", 0, 2, d, d, 0 };
    A[7] = (tfm__hub_plan_row){ "attention.output.dense.bias",
                                "self_attn.out_proj.bias", 0, 1, d, 0, 0 };
    const tfm__hub_plan_row F[] = {
        { "intermediate.dense.weight", "linear1.weight", 0, 2, ff, d, 0 },
        { "intermediate.dense.bias", "linear1.bias", 0, 1, ff, 0, 0 },
        { "output.dense.weight", "linear2.weight", 0, 2, d, ff, 0 },
        { "output.dense.bias", "linear2.bias", 0, 1, d, 0, 0 },
    };
    /* post-norm (BERT): attention, norm1, feed-forward, norm2; pre-norm
     * (ViT): norm1, attention, norm2, feed-forward */
    const tfm__hub_plan_row *parts[4] = { A, norm1, F, norm2 };
    const size_t sizes[4] = { 8, 2, 4, 2 };
    static const int POST[4] = { 0, 1, 2, 3 }, PRE[4] = { 1, 0, 3, 2 };
    const int *order = norm_first ? PRE : POST;
    tfm_status st = TFM_OK;
    for (int k = 0; k < 4 && st == TFM_OK; k++)
        st = tfm__hub_plan_add_rows(p, "encoder.layer.", i, parts[order[k]],
                                    sizes[order[k]]);
    return st;
}

/* tfm__hub_plan_add_rows of top-level rows[0 .. n-1] without the prefix
 * (the heads saved outside the base model). */
tfm_status tfm__hub_plan_add_unprefixed(tfm__hub_plan *p,
                                        const tfm__hub_plan_row *rows,
                                        size_t n)
{
    const char *prefix = p->prefix;
    p->prefix = "";
    const tfm_status st = tfm__hub_plan_add_rows(p, NULL, 0, rows, n);
    p->prefix = prefix;
    return st;
}

/* The rest of a stored name after the plan's prefix, or NULL when it does
 * not begin with the prefix. */
const char *tfm__hub_unprefixed(const tfm__hub_plan *p, const char *name)
{
    const size_t n = strlen(p->prefix);
    return strncmp(name, p->prefix, n) == 0 ? name + n : NULL;
}

/* An untied model's own head, "lm_head.weight" [V, d], never prefixed
 * (GPT2LMHeadModel's and LlamaForCausalLM's); nothing when tied. */
tfm_status tfm__hub_plan_add_head(tfm__hub_plan *p, const tfm_model_config *c)
{
    if (c->tied_embeddings)
        return TFM_OK;
    const tfm__hub_plan_row head[] = {
        { "lm_head.weight", "lm_head.weight", 0, 2, c->vocab_size,
          c->layer.d_model, 0 },
    };
    return tfm__hub_plan_add_unprefixed(p, head, TFM__HUB_N_ROWS(head));
}

/* Whether `name` ends with `tail`. */
int tfm__hub_ends_with(const char *name, const char *tail)
{
    size_t a = strlen(name), b = strlen(tail);
    return a >= b && strcmp(name + a - b, tail) == 0;
}

/* Every planned tensor is in a shard with its shape and a float dtype. */
tfm_status tfm__hub_plan_find(tfm__hub_plan *p, const tfm__hub_shards *s)
{
    for (int i = 0; i < p->n; i++) {
        tfm__hub_tensor *t = &p->t[i];
        t->shard = tfm__hub_shards_find(s, t->stored);
        if (t->shard < 0 &&
            tfm__hub_ends_with(t->stored, "LayerNorm.weight")) {
            /* transformers reads the ".gamma" / ".beta" of older saves
             * (original BERT checkpoints) as ".weight" / ".bias". */
            strcpy(t->stored + strlen(t->stored) - 6, "gamma");
            if ((t->shard = tfm__hub_shards_find(s, t->stored)) < 0)
                strcpy(t->stored + strlen(t->stored) - 5, "weight");
        } else if (t->shard < 0 &&
                   tfm__hub_ends_with(t->stored, "LayerNorm.bias")) {
            strcpy(t->stored + strlen(t->stored) - 4, "beta");
            if ((t->shard = tfm__hub_shards_find(s, t->stored)) < 0)
                strcpy(t->stored + strlen(t->stored) - 4, "bias");
        }
        if (t->shard < 0)
            return tfm__fail(TFM_ERR_FORMAT,
                             "the checkpoint lacks the tensor " TFM__HUB_QUOTED
                             " that its config.json needs", t->stored);
        tfm_dtype dtype;
        int rank;
        int64_t shape[TFM_SAFETENSORS_MAX_RANK];
        tfm_safetensors_info(s->files[t->shard], t->stored, &dtype, &rank,
                             shape);
        if (dtype != TFM_DTYPE_F32 && dtype != TFM_DTYPE_F16 &&
            dtype != TFM_DTYPE_BF16 && dtype != TFM_DTYPE_F64)
            return tfm__fail(TFM_ERR_UNSUPPORTED,
                             "tensor " TFM__HUB_QUOTED
                             " is stored as an integer or "
                             "bool dtype; weights must be F32, F16, BF16 or "
                             "F64",
                             t->stored);
        int same = rank == t->rank;
        for (int k = 0; same && k < rank; k++)
            same = shape[k] == t->shape[k];
        if (!same) {
            char has[96], want[96];
            tfm__format_shape(has, sizeof has, rank, shape);
            tfm__format_shape(want, sizeof want, t->rank, t->shape);
            return tfm__fail(TFM_ERR_FORMAT,
                             "tensor " TFM__HUB_QUOTED
                             " has shape %s, but config.json "
                             "gives %s",
                             t->stored, has, want);
        }
    }
    return TFM_OK;
}

int64_t tfm__hub_plan_stored_numel(const tfm__hub_plan *p)
{
    int64_t n = 0;
    for (int i = 0; i < p->n; i++) {
        const int64_t k = planned_numel(&p->t[i]);
        n = k > INT64_MAX - n ? INT64_MAX : n + k;
    }
    return n;
}

/* No shard holds a tensor outside the plan, except those `ignored` says
 * may be dropped: a tensor left over means config.json and the weights
 * disagree (more layers, another architecture). */
tfm_status
tfm__hub_plan_no_extra(const tfm__hub_plan *p, const tfm__hub_shards *s,
                       int (*ignored)(const tfm__hub_plan *, const char *))
{
    for (int f = 0; f < s->n; f++) {
        for (int64_t k = 0; k < tfm_safetensors_count(s->files[f]); k++) {
            const char *name = tfm_safetensors_name(s->files[f], k);
            int i = 0;
            while (i < p->n && strcmp(p->t[i].stored, name) != 0)
                i++;
            if (i == p->n && !ignored(p, name))
                return tfm__fail(
                    TFM_ERR_FORMAT,
                    "the checkpoint holds a tensor " TFM__HUB_QUOTED
                    " that a model of its config.json does not "
                    "have",
                    name);
        }
    }
    return TFM_OK;
}

/* Every parameter of m is filled, exactly, by the planned tensors (the
 * pieces of a packed one add up to it): a check on the plan itself, before
 * anything is read. */
tfm_status tfm__hub_plan_covers(const tfm__hub_plan *p, const tfm_module *m)
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
                             "%lld values of parameter " TFM__HUB_QUOTED,
                             (long long)filled, (long long)param->numel,
                             param->name);
    }
    return TFM_OK;
}

/* Whether tensor t alone fills its convertible parameter as it lies. */
static int whole(const tfm__hub_tensor *t, const tfm__param *param)
{
    return param->convertible && !t->transpose && t->offset == 0 &&
           planned_numel(t) == param->numel;
}

/* The type parameter `ours` is kept in once all its pieces are read:
 * keep_dtype, or for AUTO the pieces' common F16 / BF16 type (F32 when
 * they differ or are F32 / F64); -1 while a piece in a later shard than
 * f is still to be read. */
static int kept_type(const tfm__hub_plan *p, tfm__hub_shards *s,
                     const char *ours, int f, int keep_dtype)
{
    int common = -2;
    for (int i = 0; i < p->n; i++) {
        const tfm__hub_tensor *t = &p->t[i];
        if (strcmp(t->ours, ours) != 0)
            continue;
        if (t->shard > f)
            return -1;
        tfm_dtype dt = TFM_DTYPE_F32;
        if (s->files[t->shard])
            tfm_safetensors_info(s->files[t->shard], t->stored, &dt, NULL,
                                 NULL);
        common = common == -2 || common == (int)dt ? (int)dt : TFM_DTYPE_F32;
    }
    if (keep_dtype != TFM_LOAD_DTYPE_AUTO)
        return keep_dtype;
    return common == TFM_DTYPE_F16 || common == TFM_DTYPE_BF16
               ? common
               : TFM_DTYPE_F32;
}

/* Shard by shard, converts each planned tensor into its parameter of m,
 * checks it is finite, and closes the shard. */
tfm_status tfm__hub_plan_load(const tfm__hub_plan *p, tfm__hub_shards *s,
                              int keep_dtype, int map_in_place,
                              tfm_module *m)
{
    for (int f = 0; f < s->n; f++) {
        for (int i = 0; i < p->n; i++) {
            const tfm__hub_tensor *t = &p->t[i];
            if (t->shard != f)
                continue;
            const tfm__param *param = NULL;
            const int64_t numel = planned_numel(t);
            if (tfm__module_find_param(m, t->ours, &param) != TFM_OK ||
                t->offset > param->numel - numel)
                return tfm__fail(TFM_ERR_FORMAT,
                                 "tensor " TFM__HUB_QUOTED
                                 " has no parameter " TFM__HUB_QUOTED
                                 " of its size to go to",
                                 t->stored, t->ours);
            int dtype = -1;
            const void *bytes = NULL;
            uint64_t nbytes = 0;
            tfm_status st;
            if ((keep_dtype != TFM_DTYPE_F32 || map_in_place) &&
                whole(t, param) &&
                tfm__safetensors_raw(s->files[f], t->stored, &dtype, &bytes,
                                     &nbytes) == TFM_OK &&
                (dtype == TFM_DTYPE_F32 || dtype == TFM_DTYPE_F16 ||
                 dtype == TFM_DTYPE_BF16)) {
                /* Bound as it lies (nn/weight_bind.h checks it finite). */
                const int aligned =
                    (uintptr_t)bytes % (dtype == TFM_DTYPE_F32 ? 4 : 2) == 0;
                st = tfm__module_bind_param(
                    m, t->ours, dtype, bytes, nbytes, keep_dtype,
                    map_in_place && aligned
                        ? tfm__safetensors_mapping(s->files[f])
                        : NULL);
                if (st != TFM_OK)
                    return st;
                continue;
            }
            float *dst = param->data + t->offset;
            st = tfm__safetensors_read_into(s->files[f], t->stored,
                                            t->transpose, dst);
            if (st != TFM_OK)
                return st;
            for (int64_t e = 0; e < numel; e++)
                if (!isfinite(dst[e]))
                    return tfm__fail(TFM_ERR_NON_FINITE,
                                     "tensor " TFM__HUB_QUOTED
                                     " has a non-finite "
                                     "value",
                                     t->stored);
        }
        /* Parameters read as float32 and now complete are converted
         * before the next shard is read, so that float32 copies of one
         * shard at most are alive at once. */
        for (int i = 0; keep_dtype != TFM_DTYPE_F32 && i < p->n; i++) {
            const tfm__hub_tensor *t = &p->t[i];
            const tfm__param *param = NULL;
            if (t->shard != f ||
                tfm__module_find_param(m, t->ours, &param) != TFM_OK ||
                !param->convertible || whole(t, param))
                continue;
            const int kept = kept_type(p, s, t->ours, f, keep_dtype);
            if (kept >= 0 && kept != TFM_DTYPE_F32) {
                tfm_status st = tfm__param_convert(param, kept);
                if (st != TFM_OK)
                    return st;
            }
        }
        tfm_safetensors_close(s->files[f]);
        s->files[f] = NULL;
    }
    return TFM_OK;
}
