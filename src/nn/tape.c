/* A layer's training forward kept for its backward (tape.h). */
#include <string.h>

#include "base/alloc.h"
#include "nn/module_impl.h"
#include "base/parallel.h"
#include "nn/tape.h"

/* FNV-1a's 64-bit prime and offset basis, on four interleaved lanes (so
 * that the multiplications do not wait on each other): a change of any
 * 32-bit word, or two words trading places, changes the hash except with
 * probability about 2^-64. */
#define FNV_PRIME 0x100000001b3ULL
#define FNV_BASIS 0xcbf29ce484222325ULL

static void hash_words(uint64_t h[4], const void *data, size_t n_words)
{
    const uint32_t *w = data;
    size_t i = 0;
    for (; i + 4 <= n_words; i += 4)
        for (int j = 0; j < 4; j++)
            h[j] = (h[j] ^ w[i + j]) * FNV_PRIME;
    for (; i < n_words; i++)
        h[0] = (h[0] ^ w[i]) * FNV_PRIME;
    h[1] = (h[1] ^ n_words) * FNV_PRIME;
}

static uint64_t hash_finish(const uint64_t h[4])
{
    uint64_t r = FNV_BASIS;
    for (int j = 0; j < 4; j++)
        r = (r ^ h[j]) * FNV_PRIME;
    return r;
}

/* Every parameter of m's table (its parts' included), bytes and order. */
static uint64_t params_hash(const tfm_module *m)
{
    uint64_t h[4] = { FNV_BASIS, FNV_BASIS + 1, FNV_BASIS + 2, FNV_BASIS + 3 };
    for (int i = 0; i < m->n_params; i++)
        hash_words(h, m->params[i].data, (size_t)m->params[i].numel);
    return hash_finish(h);
}

static void dropout_walk(const tfm_module *m, uint64_t h[4])
{
    hash_words(h, &m->dropout, 1);
    for (int i = 0; i < m->n_children; i++)
        dropout_walk(m->children[i].module, h);
    for (int i = 0; i < m->n_params; i++) {
        const tfm_module *home = m->params[i].home;
        if (home && home != m)
            hash_words(h, &home->dropout, 1);
    }
}

/* The dropout probabilities of m and its parts. */
static uint64_t dropout_hash(const tfm_module *m)
{
    uint64_t h[4] = { FNV_BASIS, FNV_BASIS, FNV_BASIS, FNV_BASIS };
    dropout_walk(m, h);
    return hash_finish(h);
}

static tfm__tape *tape_get(tfm_module *m)
{
    tfm__tape *t = atomic_load(&m->tape);
    if (t)
        return t;
    tfm__tape *fresh = tfm__calloc(1, sizeof *fresh);
    if (!fresh)
        return NULL;
    atomic_flag_clear(&fresh->in_use);
    if (!(fresh->arena = tfm__ws_arena_new())) {
        tfm__free(fresh);
        return NULL;
    }
    if (atomic_compare_exchange_strong(&m->tape, &t, fresh))
        return fresh;
    tfm__ws_arena_free(fresh->arena);   /* another call made it first */
    tfm__free(fresh);
    return t;
}

tfm__tape *tfm__tape_record(tfm_module *m, const tfm__tape_inputs *in)
{
    tfm__tape *t = tape_get(m);
    if (!t || atomic_flag_test_and_set(&t->in_use))
        return NULL;
    t->kept = NULL;
    t->lent = tfm__ws_use(t->arena);
    tfm__ws_restore((tfm__ws_mark){ 0, 0 });
    float *x = tfm__ws_floats(in->x_n);
    float *mem = in->memory_n ? tfm__ws_floats(in->memory_n) : NULL;
    if (!x || (in->memory_n && !mem) ||
        !tfm__masks_copy(in->masks, in->B, in->heads, in->L, in->L, &t->masks) ||
        !tfm__masks_copy(in->memory_masks, in->B, in->heads, in->L, in->S,
                    &t->memory_masks)) {
        tfm__ws_use(t->lent);
        atomic_flag_clear(&t->in_use);
        return NULL;
    }
    memcpy(x, in->x, in->x_n * sizeof *x);
    if (mem)
        memcpy(mem, in->memory, in->memory_n * sizeof *mem);
    t->x = x;
    t->memory = mem;
    t->B = in->B, t->L = in->L, t->S = in->S, t->heads = in->heads;
    t->x_n = in->x_n, t->memory_n = in->memory_n;
    t->drop_key = in->drop_key;
    t->slots = tfm__plan_now().slots;
    t->dropout_hash = dropout_hash(m);
    t->params_hash = params_hash(m);
    return t;
}

void tfm__tape_close(tfm__tape *t, void *kept)
{
    tfm__ws_use(t->lent);
    t->lent = NULL;
    t->kept = kept;
    atomic_flag_clear(&t->in_use);
}

tfm__tape *tfm__tape_find(tfm_module *m, const tfm__tape_inputs *in)
{
    tfm__tape *t = atomic_load(&m->tape);
    if (!t || atomic_flag_test_and_set(&t->in_use))
        return NULL;
    const int same =
        t->kept && t->B == in->B && t->L == in->L && t->S == in->S &&
        t->heads == in->heads && t->x_n == in->x_n &&
        t->memory_n == in->memory_n && t->drop_key == in->drop_key &&
        t->slots == tfm__plan_now().slots &&
        !memcmp(t->x, in->x, in->x_n * sizeof(float)) &&
        (!in->memory_n ||
         !memcmp(t->memory, in->memory, in->memory_n * sizeof(float))) &&
        tfm__masks_equal(&t->masks, in->masks, in->B, in->heads, in->L, in->L) &&
        tfm__masks_equal(&t->memory_masks, in->memory_masks, in->B, in->heads,
                    in->L, in->S) &&
        t->dropout_hash == dropout_hash(m) && t->params_hash == params_hash(m);
    if (!same) {
        atomic_flag_clear(&t->in_use);
        return NULL;
    }
    /* The backward's scratch comes from above the kept forward, where the
     * forward's own scratch was. */
    t->lent = tfm__ws_use(t->arena);
    return t;
}

void tfm__tape_release(tfm__tape *t)
{
    tfm__ws_use(t->lent);
    t->lent = NULL;
    t->kept = NULL;     /* the backward wrote over it */
    atomic_flag_clear(&t->in_use);
}

void tfm__tape_drop(tfm_module *m)
{
    tfm__tape *t = atomic_load(&m->tape);
    if (!t || atomic_flag_test_and_set(&t->in_use))
        return;
    tfm__ws_arena *fresh = tfm__ws_arena_new();
    if (fresh) {
        tfm__ws_arena_free(t->arena);
        t->arena = fresh;
    }
    t->kept = NULL;
    atomic_flag_clear(&t->in_use);
}

void tfm__tape_free(tfm_module *m)
{
    tfm__tape *t = atomic_exchange(&m->tape, NULL);
    if (!t)
        return;
    tfm__ws_arena_free(t->arena);
    tfm__free(t);
}
