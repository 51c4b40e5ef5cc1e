/* GGUF files, the metadata queries (gguf.h): a key found by binary search
 * over the index gguf.c sorted, its value read from the file's bytes with
 * little-endian loads (no pointer into the file is dereferenced as
 * anything wider than a byte), integers converted only when they fit. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_impl.h"

/* ---- Finding a key ---------------------------------------------------- */

static const tfm__gguf_kv *find_kv(const tfm__gguf *g, const char *key)
{
    const size_t len = strlen(key);
    int64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const tfm__gguf_kv *kv = g->kv_by_key[mid];
        const size_t n = kv->key_len < len ? (size_t)kv->key_len : len;
        int d = memcmp(kv->key, key, n);
        if (d == 0)
            d = (kv->key_len > len) - (kv->key_len < len);
        if (d == 0)
            return kv;
        if (d < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The key's pair into *kv: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND. */
static tfm_status lookup(const tfm__gguf *g, const char *key, const void *v,
                         const tfm__gguf_kv **kv)
{
    if (!g || !key || !v)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "%s is NULL",
                         !g ? "gguf" : !key ? "key" : "value");
    *kv = find_kv(g, key);
    if (!*kv)
        return tfm__fail(TFM_ERR_NOT_FOUND,
                         "GGUF file \"%.200s\" has no key \"%.200s\"",
                         g->path, key);
    return TFM_OK;
}

static tfm_status wrong_type(const tfm__gguf *g, const char *key,
                             const char *found, const char *expected)
{
    return tfm__fail(TFM_ERR_FORMAT,
                     "GGUF file \"%.200s\": key \"%.200s\" is of type %s, "
                     "expected %s", g->path, key, found, expected);
}

/* ---- Numbers ---------------------------------------------------------- */

static int is_int(int t)
{
    return t == TFM__GGUF_U8 || t == TFM__GGUF_I8 || t == TFM__GGUF_U16 ||
           t == TFM__GGUF_I16 || t == TFM__GGUF_U32 || t == TFM__GGUF_I32 ||
           t == TFM__GGUF_U64 || t == TFM__GGUF_I64;
}

/* An integer of type t at p: *neg set when negative; the magnitude as
 * unsigned (two's complement of negatives) in *u, the value in *s when it
 * fits int64. */
static void load_int(int t, const unsigned char *p, int *neg, uint64_t *u,
                     int64_t *s)
{
    int64_t v = 0;
    uint64_t raw = 0;
    switch (t) {
    case TFM__GGUF_U8: raw = p[0]; v = (int64_t)raw; break;
    case TFM__GGUF_I8: v = (int8_t)p[0]; break;
    case TFM__GGUF_U16: raw = tfm__gguf_u16(p); v = (int64_t)raw; break;
    case TFM__GGUF_I16: v = (int16_t)tfm__gguf_u16(p); break;
    case TFM__GGUF_U32: raw = tfm__gguf_u32(p); v = (int64_t)raw; break;
    case TFM__GGUF_I32: v = (int32_t)tfm__gguf_u32(p); break;
    case TFM__GGUF_U64: raw = tfm__gguf_u64(p); v = (int64_t)raw; break;
    default: v = (int64_t)tfm__gguf_u64(p); break; /* I64 */
    }
    if (t == TFM__GGUF_U64) {
        *neg = 0;
        *u = raw;
        *s = raw > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)raw;
        return;
    }
    *neg = v < 0;
    *u = (uint64_t)v;
    *s = v;
}

static float load_f32(const unsigned char *p)
{
    uint32_t bits = tfm__gguf_u32(p);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static double load_f64(const unsigned char *p)
{
    uint64_t bits = tfm__gguf_u64(p);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* F32 or F64 at p as a float: 0 when a finite F64 is beyond float. */
static int load_float(int t, const unsigned char *p, float *v)
{
    if (t == TFM__GGUF_F32) {
        *v = load_f32(p);
        return 1;
    }
    const double d = load_f64(p);
    const float f = (float)d;
    if (isfinite(d) && !isfinite(f))
        return 0;
    *v = f;
    return 1;
}

/* Any numeric or bool value at p as a double. */
static double load_number(int t, const unsigned char *p)
{
    if (t == TFM__GGUF_F32)
        return load_f32(p);
    if (t == TFM__GGUF_F64)
        return load_f64(p);
    if (t == TFM__GGUF_BOOL)
        return p[0];
    int neg;
    uint64_t u;
    int64_t s;
    load_int(t, p, &neg, &u, &s);
    return t == TFM__GGUF_U64 ? (double)u : (double)s;
}

static tfm_status not_fit(const tfm__gguf *g, const char *key,
                          const char *into)
{
    return tfm__fail(TFM_ERR_FORMAT,
                     "GGUF file \"%.200s\": the value of key \"%.200s\" "
                     "does not fit %s", g->path, key, into);
}

/* ---- Scalars ---------------------------------------------------------- */

tfm_status tfm__gguf_get_str(const tfm__gguf *g, const char *key,
                             tfm__gguf_str *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = lookup(g, key, v, &kv);
    if (st != TFM_OK)
        return st;
    if (kv->type != TFM__GGUF_STRING)
        return wrong_type(g, key, tfm__gguf_type_name(kv->type), "a string");
    v->len = tfm__gguf_u64(kv->value);
    v->ptr = (const char *)kv->value + 8;
    return TFM_OK;
}

tfm_status tfm__gguf_get_u32(const tfm__gguf *g, const char *key,
                             uint32_t *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = lookup(g, key, v, &kv);
    if (st != TFM_OK)
        return st;
    if (!is_int(kv->type))
        return wrong_type(g, key, tfm__gguf_type_name(kv->type),
                          "an integer");
    int neg;
    uint64_t u;
    int64_t s;
    load_int(kv->type, kv->value, &neg, &u, &s);
    if (neg || u > UINT32_MAX)
        return not_fit(g, key, "u32");
    *v = (uint32_t)u;
    return TFM_OK;
}

tfm_status tfm__gguf_get_i64(const tfm__gguf *g, const char *key,
                             int64_t *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = lookup(g, key, v, &kv);
    if (st != TFM_OK)
        return st;
    if (!is_int(kv->type))
        return wrong_type(g, key, tfm__gguf_type_name(kv->type),
                          "an integer");
    int neg;
    uint64_t u;
    int64_t s;
    load_int(kv->type, kv->value, &neg, &u, &s);
    if (kv->type == TFM__GGUF_U64 && u > (uint64_t)INT64_MAX)
        return not_fit(g, key, "i64");
    *v = s;
    return TFM_OK;
}

tfm_status tfm__gguf_get_u64(const tfm__gguf *g, const char *key,
                             uint64_t *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = lookup(g, key, v, &kv);
    if (st != TFM_OK)
        return st;
    if (!is_int(kv->type))
        return wrong_type(g, key, tfm__gguf_type_name(kv->type),
                          "an integer");
    int neg;
    uint64_t u;
    int64_t s;
    load_int(kv->type, kv->value, &neg, &u, &s);
    if (neg)
        return not_fit(g, key, "u64");
    *v = u;
    return TFM_OK;
}

tfm_status tfm__gguf_get_f32(const tfm__gguf *g, const char *key, float *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = lookup(g, key, v, &kv);
    if (st != TFM_OK)
        return st;
    if (kv->type != TFM__GGUF_F32 && kv->type != TFM__GGUF_F64)
        return wrong_type(g, key, tfm__gguf_type_name(kv->type),
                          "f32 or f64");
    float f;
    if (!load_float(kv->type, kv->value, &f))
        return not_fit(g, key, "f32");
    *v = f;
    return TFM_OK;
}

tfm_status tfm__gguf_get_bool(const tfm__gguf *g, const char *key, int *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = lookup(g, key, v, &kv);
    if (st != TFM_OK)
        return st;
    if (kv->type != TFM__GGUF_BOOL)
        return wrong_type(g, key, tfm__gguf_type_name(kv->type), "a bool");
    *v = kv->value[0] != 0;
    return TFM_OK;
}

tfm_status tfm__gguf_get_number(const tfm__gguf *g, const char *key,
                                double *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = lookup(g, key, v, &kv);
    if (st != TFM_OK)
        return st;
    if (kv->type == TFM__GGUF_STRING || kv->type == TFM__GGUF_ARRAY)
        return wrong_type(g, key, tfm__gguf_type_name(kv->type),
                          "a number");
    *v = load_number(kv->type, kv->value);
    return TFM_OK;
}

/* ---- Metadata in file order ------------------------------------------- */

int64_t tfm__gguf_n_kv(const tfm__gguf *g)
{
    return g ? g->n_kv : 0;
}

tfm_status tfm__gguf_kv_at(const tfm__gguf *g, int64_t i, tfm__gguf_str *key,
                           int *type)
{
    if (!g || !key || !type)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "an argument is NULL");
    if (i < 0 || i >= g->n_kv)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "key index %" PRId64 " is not in [0, %" PRId64 ")",
                         i, g->n_kv);
    key->ptr = g->kv[i].key;
    key->len = g->kv[i].key_len;
    *type = g->kv[i].type;
    return TFM_OK;
}

/* ---- Arrays ----------------------------------------------------------- */

tfm_status tfm__gguf_get_array(const tfm__gguf *g, const char *key,
                               int *elem_type, uint64_t *count)
{
    const tfm__gguf_kv *kv;
    tfm_status st = lookup(g, key, elem_type, &kv);
    if (st != TFM_OK)
        return st;
    if (!count)
        return tfm__fail(TFM_ERR_NULL_ARGUMENT, "count is NULL");
    if (kv->type != TFM__GGUF_ARRAY)
        return wrong_type(g, key, tfm__gguf_type_name(kv->type),
                          "an array");
    *elem_type = kv->elem_type;
    *count = kv->count;
    return TFM_OK;
}

/* Element i of the array key: its pair, checked to be an array with i in
 * range. */
static tfm_status element(const tfm__gguf *g, const char *key, uint64_t i,
                          const void *v, const tfm__gguf_kv **kv)
{
    tfm_status st = lookup(g, key, v, kv);
    if (st != TFM_OK)
        return st;
    if ((*kv)->type != TFM__GGUF_ARRAY)
        return wrong_type(g, key, tfm__gguf_type_name((*kv)->type),
                          "an array");
    if (i >= (*kv)->count)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "GGUF file \"%.200s\": index %" PRIu64 " is past "
                         "the %" PRIu64 " elements of key \"%.200s\"",
                         g->path, i, (*kv)->count, key);
    return TFM_OK;
}

static tfm_status wrong_elements(const tfm__gguf *g, const char *key,
                                 int found, const char *expected)
{
    return tfm__fail(TFM_ERR_FORMAT,
                     "GGUF file \"%.200s\": key \"%.200s\" is an array of "
                     "%s, expected %s", g->path, key,
                     tfm__gguf_type_name(found), expected);
}

tfm_status tfm__gguf_array_str(const tfm__gguf *g, const char *key,
                               uint64_t i, tfm__gguf_str *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = element(g, key, i, v, &kv);
    if (st != TFM_OK)
        return st;
    if (kv->elem_type != TFM__GGUF_STRING)
        return wrong_elements(g, key, kv->elem_type, "strings");
    const unsigned char *p = kv->value + kv->str_at[i];
    v->len = tfm__gguf_u64(p);
    v->ptr = (const char *)p + 8;
    return TFM_OK;
}

tfm_status tfm__gguf_array_f32(const tfm__gguf *g, const char *key,
                               uint64_t i, float *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = element(g, key, i, v, &kv);
    if (st != TFM_OK)
        return st;
    if (kv->elem_type != TFM__GGUF_F32 && kv->elem_type != TFM__GGUF_F64)
        return wrong_elements(g, key, kv->elem_type, "f32 or f64");
    const size_t each = kv->elem_type == TFM__GGUF_F32 ? 4 : 8;
    float f;
    if (!load_float(kv->elem_type, kv->value + i * each, &f))
        return not_fit(g, key, "f32");
    *v = f;
    return TFM_OK;
}

tfm_status tfm__gguf_array_i32(const tfm__gguf *g, const char *key,
                               uint64_t i, int32_t *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = element(g, key, i, v, &kv);
    if (st != TFM_OK)
        return st;
    if (!is_int(kv->elem_type))
        return wrong_elements(g, key, kv->elem_type, "integers");
    int neg;
    uint64_t u;
    int64_t s;
    load_int(kv->elem_type,
             kv->value + i * tfm__gguf_scalar_size(kv->elem_type), &neg, &u,
             &s);
    if (s < INT32_MIN || s > INT32_MAX)
        return not_fit(g, key, "i32");
    *v = (int32_t)s;
    return TFM_OK;
}

tfm_status tfm__gguf_array_number(const tfm__gguf *g, const char *key,
                                  uint64_t i, double *v)
{
    const tfm__gguf_kv *kv;
    tfm_status st = element(g, key, i, v, &kv);
    if (st != TFM_OK)
        return st;
    if (kv->elem_type == TFM__GGUF_STRING)
        return wrong_elements(g, key, kv->elem_type, "numbers");
    *v = load_number(kv->elem_type,
                     kv->value + i * tfm__gguf_scalar_size(kv->elem_type));
    return TFM_OK;
}
