/* Internal: the module base struct (module.h) and its parameter table.
 *
 * Each kind of module is a struct whose first member is a tfm_module, so a
 * tfm_module * can be cast to the kind's struct after checking `kind`.  The
 * parameter table lists every named parameter of the module and of its
 * children (with the child's prefix, e.g. "layers.1.norm2.weight"); the
 * data pointers point into the storage of whichever module owns it.
 */
#ifndef TFM_SRC_MODULE_IMPL_H
#define TFM_SRC_MODULE_IMPL_H

#include "base/alloc.h"
#include "base/lifetime.h"
#include "base/param_spec.h"
#include "base/workspace.h"
#include "transformer/module.h"


typedef struct tfm__param {
    char *name;
    int rank;
    int64_t shape[TFM_MAX_RANK];
    int64_t numel;
    float *data;
    /* NULL until gradients are enabled (tfm_module_train), else numel
     * floats with data's layout in home's gradient block; optimizers
     * (optimizer.c) read and zero it.  Read it with tfm__param_grad, which
     * also finds the gradient of an entry copied into a table before the
     * gradients existed. */
    float *grad;
    /* The module whose `storage` holds data (its gradient block holds
     * grad at the same offset); NULL only for entries made by hand
     * (tests). */
    struct tfm_module *home;
    tfm__init init;             /* how reset_parameters draws it */
    int64_t init_fan_in;        /* LINEAR_BIAS: the weight's fan_in */
    float init_value;           /* TFM__INIT_CONST */
    /* The spec's convertible flag (base/param_spec.h).  Whether it is
     * stored, and how, is kernels/weight_store.h's table's, keyed by
     * data: one truth for every table that lists the parameter. */
    int convertible;
} tfm__param;

typedef struct tfm__module_ops {
    /* Frees the kind's own storage and children (not the base, not the
     * parameter table). */
    void (*destroy)(tfm_module *m);
    /* Multiply-accumulate count of one forward pass (module.h), checked
     * for overflow; returns TFM_OK or TFM_ERR_OVERFLOW. */
    tfm_status (*macs)(const tfm_module *m, int64_t batch, int64_t tgt_len,
                       int64_t src_len, int64_t *macs);
} tfm__module_ops;

/* A named sub-module (module.h: tfm_module_child), e.g. "self_attn",
 * "linear1", "layers.0", "norm". */
typedef struct tfm__child {
    char *name;
    tfm_module *module;     /* owned by a kind's struct, never by the table */
} tfm__child;

struct tfm_module {
    /* First (base/lifetime.h): a module that optimizers, KV caches or
     * generators refer to stays, freed, until the last of them is freed
     * (tfm__module_retain / _release).  Only a module the caller owns
     * (owner NULL) counts; a part's dependents hold its outermost owner. */
    tfm__lifetime life;
    tfm_module_kind kind;
    const tfm__module_ops *ops;
    tfm__param *params;
    int n_params;
    int cap_params;
    float *storage;     /* this module's own parameters, one block */
    int64_t n_storage;  /* floats in storage */
    /* Nonzero when storage is a page-aligned anonymous mapping of
     * storage_bytes (a module with convertible parameters, each on whole
     * pages: nn/weight_bind.c releases them); else a tfm__calloc block. */
    size_t storage_bytes;
    /* Gradients of storage, same layout: NULL until the module (or a
     * module that contains it) is put in training mode (tfm_module_train;
     * allocated zeroed once, kept in evaluation mode). */
    float *grad_storage;
    int training;       /* tfm_module_train's flag (torch's .training) */
    /* Dropout (dropout.c; module.h: tfm_module_set_dropout): the
     * probability of this module's sites, and the counter-based stream
     * its training-mode calls draw their keys from: key of a call =
     * tfm__dropout_hash(dropout_seed, offset), offset then advanced;
     * dropout_last_key is the latest forward's, which the backward reuses
     * (0: none yet).  Atomic: forward passes on a shared handle may draw
     * at once. */
    float dropout;
    uint64_t dropout_seed;
    _Atomic uint64_t dropout_offset;
    _Atomic uint64_t dropout_last_key;
    /* Backward passes write the gradients: tfm__module_enter / _leave
     * (tfm__module_enter_grads) keep two threads out. */
    int busy;
    /* The kept training forward of the layers whose forward keeps one for
     * its backward (tape.h); NULL until the first. */
    _Atomic(struct tfm__tape *) tape;
    /* Sub-modules reachable by tfm_module_child, in PyTorch's order. */
    tfm__child *children;
    int n_children;
    /* The module this one is a part of (its child), or NULL for a module
     * the caller owns: tfm_module_free does nothing on a part; the owner's
     * destroy frees it (after tfm_module_free cleared this pointer). */
    tfm_module *owner;
    /* The attention variant (variant.h) of the kinds that have one, for
     * tfm_attention_get_config: an ATTENTION or MHA module's own, an
     * ENCODER_LAYER's self-attention's; NULL for the other kinds. */
    const struct tfm__variant *variant;
};

/* Allocates a zeroed module struct of `size` bytes (the kind's struct). */
tfm_module *tfm__module_alloc(size_t size, tfm_module_kind kind,
                              const tfm__module_ops *ops);

/* ---- Dependents (base/lifetime.h) ------------------------------------- */

/* A new dependent of m: retains the module the caller owns that m is, or
 * is a part of (m itself, or its outermost owner), and returns it (pass
 * it to tfm__module_release and tfm__module_freed); NULL, with the
 * message "<what>: the module was already freed" set, when its free was
 * already called. */
tfm_module *tfm__module_retain(const tfm_module *m, const char *what);

/* The dependent's free: drops its reference to root (from
 * tfm__module_retain; NULL is a no-op), freeing it when tfm_module_free
 * was called and this was the last dependent. */
void tfm__module_release(tfm_module *root);

/* Whether tfm_module_free(root) was called (a dependent then refuses). */
int tfm__module_freed(const tfm_module *root);

/* Declares this module's own parameters and allocates their storage in one
 * zeroed block.  specs: n entries {name, rank, shape}; on success each
 * entry's data pointer is stored in *ptrs[i].  Returns TFM_OK,
 * TFM_ERR_OVERFLOW or TFM_ERR_OUT_OF_MEMORY (message set). */
tfm_status tfm__module_own_params(tfm_module *m, const tfm__param_spec *specs,
                                  int n);

/* Declares parameter spec->name of m (spec->rank, shape and init; ptr is
 * ignored) over memory another module owns (data, inside home's storage):
 * a view, for sub-modules whose weights live in their parent's storage. */
tfm_status tfm__module_alias_param(tfm_module *m, const tfm__param_spec *spec,
                                   float *data, tfm_module *home);

/* *out = m's table entry called name: TFM_OK, TFM_ERR_NULL_ARGUMENT or
 * TFM_ERR_NOT_FOUND (message set). */
tfm_status tfm__module_find_param(const tfm_module *m, const char *name,
                                  const tfm__param **out);

/* ---- Gradients (module.h: tfm_module_train; module_grad.c) ------------- */

/* The gradient of p (p->grad, or the slot in its home's gradient block),
 * or NULL when gradients were never enabled for its home. */
float *tfm__param_grad(const tfm__param *p);

/* The gradient of the parameter memory data of module home (data points
 * into home->storage), or NULL when home has no gradient block yet.  For
 * backward passes: grad_w = tfm__grad_of(&mha->base, mha->w_q). */
float *tfm__grad_of(const tfm_module *home, const float *data);

/* Marks m in use by a backward pass: TFM_OK, or
 * TFM_ERR_BUSY (message names `what`) when another call holds it.  Every
 * TFM_OK is paired with tfm__module_leave. */
tfm_status tfm__module_enter(const tfm_module *m, const char *what);
void tfm__module_leave(const tfm_module *m);

/* For a backward pass that accumulates into every parameter gradient of m:
 * checks that each has gradient memory (TFM_ERR_INVALID_ARGUMENT, "call
 * tfm_module_train first", otherwise) and enters every module whose
 * storage holds m's parameters (their homes: a layer's norms, attention
 * and feed-forward network), so that two threads never accumulate into
 * the same gradients.  TFM_OK (pair with tfm__module_leave_grads), or
 * TFM_ERR_BUSY having entered none. */
tfm_status tfm__module_enter_grads(const tfm_module *m, const char *what);
void tfm__module_leave_grads(const tfm_module *m);

/* The start of a block's backward (the layers', the cross-attention
 * block's): *bufs[i] gets sizes[i] floats of the calling thread's
 * workspace (saved in *mark), then tfm__module_enter_grads(m).  TFM_OK
 * (pair with tfm__backward_end), or TFM_ERR_OUT_OF_MEMORY / the errors of
 * tfm__module_enter_grads with the workspace restored and nothing held. */
tfm_status tfm__backward_begin(const tfm_module *m, const char *what,
                               float **const bufs[], const size_t sizes[],
                               int n, tfm__ws_mark *mark);
void tfm__backward_end(const tfm_module *m, tfm__ws_mark mark);

/* Appends the child's parameter table under `prefix` (e.g. "self_attn.")
 * and registers it as sub-module `prefix` without its final dot
 * (tfm__module_add_child); an empty prefix registers the child's own
 * sub-modules instead (the feed-forward network's "linear1", "linear2"
 * become the layer's).  The child stays owned by the caller's struct,
 * whose destroy frees it. */
tfm_status tfm__module_adopt(tfm_module *m, const char *prefix,
                             tfm_module *child);

/* Registers child as sub-module `name` of m (no parameters are added) and
 * makes it a part of m (child->owner = m, unless it already is a part of
 * another module).  The caller's struct keeps owning it. */
tfm_status tfm__module_add_child(tfm_module *m, const char *name,
                                 tfm_module *child);

/* Checks that module is non-NULL and of the given kind (message set). */
tfm_status tfm__module_check(const tfm_module *m, tfm_module_kind kind,
                             const char *what);

/* A one-input module's own checks of x in its public call `what` (message
 * set), and its input and output widths. */
typedef tfm_status (*tfm__module_x_check_fn)(const tfm_module *m,
                                             const tfm_tensor *x,
                                             const char *what, int64_t *d_in,
                                             int64_t *d_out);

/* The checks opening a one-input module's public backward `what`:
 * tfm__module_check(m, kind, name), then check_x, then
 * tfm__check_backward_rows with its widths (messages set). */
tfm_status tfm__module_backward_check(const tfm_module *m,
                                      tfm_module_kind kind, const char *name,
                                      const char *what,
                                      tfm__module_x_check_fn check_x,
                                      const tfm_tensor *x,
                                      const tfm_tensor *grad_output,
                                      const tfm_tensor *grad_input);

/* ---- A module's dropout stream (module_dropout.c) ---- */

/* The key of a training-mode forward call of m: 0 in evaluation mode;
 * else tfm__dropout_hash(seed, offset) (never 0), the offset advanced and
 * the key kept as the module's latest. */
uint64_t tfm__dropout_forward_key(struct tfm_module *m);

/* The key a backward call of m recomputes its forward with: 0 in
 * evaluation mode; else the latest forward's, or, with none since the
 * stream was set, a fresh one as tfm__dropout_forward_key draws it. */
uint64_t tfm__dropout_backward_key(const struct tfm_module *m);

#endif
