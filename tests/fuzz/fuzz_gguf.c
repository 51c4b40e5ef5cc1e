/* libFuzzer harness: the GGUF v3 reader (src/formats/gguf.h) on untrusted
 * bytes.
 *
 * Opens the input with tfm__gguf_open_memory and, when it is accepted,
 * checks what the reader promises: every tensor found again by name, of
 * rank 1..4 and an accepted type, its bytes inside the input (all of them
 * read, so that ASan sees an overread) and no two overlapping; every key
 * found again, its value read by the getter of its type and refused by
 * the others, every array element read.  Any crash, sanitizer report,
 * leak or broken promise (abort) is a bug.
 *
 * Also built without libFuzzer by tests/CMakeLists.txt as a plain driver
 * (tests/fuzz/regress_main.c) that replays tests/regressions/gguf and the
 * seed corpus in the regular test suite. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "formats/gguf.h"

static void check_tensors(const tfm__gguf *g, const uint8_t *data,
                          size_t size)
{
    const int64_t n = tfm__gguf_n_tensors(g);
    CHECK(n >= 0 && (uint64_t)n <= size / 32);
    uint64_t sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const tfm__gguf_tensor *t = tfm__gguf_tensor_at(g, i);
        CHECK(t != NULL);
        CHECK(tfm__gguf_find_tensor(g, t->name) == t);
        CHECK(t->n_dims >= 1 && t->n_dims <= 4);
        CHECK(t->dtype == TFM_DTYPE_F32 || t->dtype == TFM_DTYPE_F16 ||
              t->dtype == TFM_DTYPE_BF16 || t->dtype == TFM_DTYPE_Q8_0 ||
              t->dtype == TFM_DTYPE_Q4_0);
        for (int d = 0; d < 4; d++)
            CHECK(t->ne[d] >= 1);
        const uint8_t *p = t->data;
        CHECK(p >= data && t->nbytes <= size &&
              (size_t)(p - data) <= size - t->nbytes);
        CHECK((size_t)(p - data) % tfm__gguf_alignment(g) == 0);
        for (uint64_t k = 0; k < t->nbytes; k++)
            sum += p[k];
        /* No overlap: compared with every other (inputs are small). */
        for (int64_t j = 0; j < i; j++) {
            const tfm__gguf_tensor *u = tfm__gguf_tensor_at(g, j);
            const uint8_t *q = u->data;
            CHECK(p + t->nbytes <= q || q + u->nbytes <= p);
        }
    }
    volatile uint64_t sink = sum;
    (void)sink;
    CHECK(tfm__gguf_tensor_at(g, n) == NULL);
    CHECK(tfm__gguf_tensor_at(g, -1) == NULL);
}

/* Every getter on key: the one(s) of its type succeed, others refuse. */
static void check_key(const tfm__gguf *g, const char *key, int type)
{
    tfm__gguf_str s;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f;
    int b;
    double d;
    const int is_int = type <= TFM__GGUF_I32 || type == TFM__GGUF_U64 ||
                       type == TFM__GGUF_I64;
    tfm_status st = tfm__gguf_get_str(g, key, &s);
    CHECK((st == TFM_OK) == (type == TFM__GGUF_STRING));
    if (st == TFM_OK)
        CHECK(s.ptr != NULL || s.len == 0);
    st = tfm__gguf_get_bool(g, key, &b);
    CHECK((st == TFM_OK) == (type == TFM__GGUF_BOOL));
    CHECK(st != TFM_OK || b == 0 || b == 1);
    st = tfm__gguf_get_u32(g, key, &u32);
    CHECK(st == TFM_OK ? is_int : st == TFM_ERR_FORMAT);
    st = tfm__gguf_get_i64(g, key, &i64);
    CHECK(st == TFM_OK ? is_int : st == TFM_ERR_FORMAT);
    st = tfm__gguf_get_u64(g, key, &u64);
    CHECK(st == TFM_OK ? is_int : st == TFM_ERR_FORMAT);
    st = tfm__gguf_get_f32(g, key, &f);
    CHECK(st == TFM_OK ? type == TFM__GGUF_F32 || type == TFM__GGUF_F64
                       : st == TFM_ERR_FORMAT);
    st = tfm__gguf_get_number(g, key, &d);
    CHECK((st == TFM_OK) ==
          (type != TFM__GGUF_STRING && type != TFM__GGUF_ARRAY));
    int et = -1;
    uint64_t count = 0;
    st = tfm__gguf_get_array(g, key, &et, &count);
    CHECK((st == TFM_OK) == (type == TFM__GGUF_ARRAY));
    if (st != TFM_OK)
        return;
    CHECK(et >= 0 && et < TFM__GGUF_TYPE_COUNT && et != TFM__GGUF_ARRAY);
    for (uint64_t i = 0; i < count; i++) {
        int32_t i32;
        st = tfm__gguf_array_str(g, key, i, &s);
        CHECK((st == TFM_OK) == (et == TFM__GGUF_STRING));
        st = tfm__gguf_array_f32(g, key, i, &f);
        CHECK(st == TFM_OK ? et == TFM__GGUF_F32 || et == TFM__GGUF_F64
                           : st == TFM_ERR_FORMAT);
        st = tfm__gguf_array_i32(g, key, i, &i32);
        CHECK(st == TFM_OK || st == TFM_ERR_FORMAT);
        st = tfm__gguf_array_number(g, key, i, &d);
        CHECK((st == TFM_OK) == (et != TFM__GGUF_STRING));
    }
    CHECK(tfm__gguf_array_number(g, key, count, &d) ==
          TFM_ERR_INVALID_ARGUMENT);
}

static void check_metadata(const tfm__gguf *g)
{
    const int64_t n = tfm__gguf_n_kv(g);
    CHECK(n >= 0);
    for (int64_t i = 0; i < n; i++) {
        tfm__gguf_str k;
        int type = -1;
        CHECK(tfm__gguf_kv_at(g, i, &k, &type) == TFM_OK);
        CHECK(type >= 0 && type < TFM__GGUF_TYPE_COUNT);
        CHECK(k.len > 0 && memchr(k.ptr, '\0', k.len) == NULL);
        char *key = malloc(k.len + 1);
        CHECK(key != NULL);
        memcpy(key, k.ptr, k.len);
        key[k.len] = '\0';
        check_key(g, key, type);
        free(key);
    }
    tfm__gguf_str s;
    CHECK(tfm__gguf_kv_at(g, n, &s, &(int){0}) == TFM_ERR_INVALID_ARGUMENT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfm__gguf *g = NULL;
    tfm_clear_error();
    static const uint8_t empty[1];
    const uint8_t *p = size ? data : empty;
    tfm_status st = tfm__gguf_open_memory(p, size, &g);
    if (st != TFM_OK) {
        CHECK(g == NULL);
        CHECK(st == TFM_ERR_FORMAT || st == TFM_ERR_UNSUPPORTED ||
              st == TFM_ERR_OUT_OF_MEMORY);
        CHECK(tfm_last_error()[0] != '\0');
        return 0;
    }
    size_t mapped = 0;
    CHECK(tfm__gguf_map(g, &mapped) == p && mapped == size);
    CHECK(tfm__gguf_release_map(g, &mapped) == NULL);
    check_tensors(g, p, size);
    check_metadata(g);
    tfm__gguf_close(g);
    return 0;
}
