/* Tests of the GGUF v3 reader (src/formats/gguf.h), white-box: the reader
 * is internal and compiled into this program (tests/CMakeLists.txt).
 *
 * Files are built byte by byte in memory (tests/gguf_builder.h) from the
 * layout of llama.cpp's docs/gguf.md; expected values are worked by hand
 * below (offsets and sizes: F32 4 bytes a value, F16/BF16 2, Q8_0 34
 * bytes per 32 values, Q4_0 18).  gguf-py's writer and reader check the
 * same reader on files they write (tests/gguf_reference.py). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "formats/gguf.h"
#include "transformer/safetensors.h"
#include "gguf_builder.h"

/* Internal test hook (src/base/alloc.c): the k-th allocation from now
 * fails; 0 disarms it. */
void tfm_testing_fail_allocation(long k);

/* ---- Files ------------------------------------------------------------ */

/* Every value type once, arrays of strings, ints and floats. */
static int all_kvs(gb_buf *b, const gb_file *f)
{
    int n = 0;
    gb_key(b, "general.architecture", 8); gb_str(b, "llama"); n++;
    if (f->alignment) {
        gb_key(b, "general.alignment", 4); gb_u32(b, f->alignment); n++;
    }
    gb_key(b, "t.u8", 0); gb_u8(b, 200); n++;
    gb_key(b, "t.i8", 1); gb_u8(b, (uint8_t)-5); n++;
    gb_key(b, "t.u16", 2); gb_le(b, 65535, 2); n++;
    gb_key(b, "t.i16", 3); gb_le(b, (uint16_t)-300, 2); n++;
    gb_key(b, "t.u32", 4); gb_u32(b, 4000000000u); n++;
    gb_key(b, "t.i32", 5); gb_u32(b, (uint32_t)-7); n++;
    gb_key(b, "t.f32", 6); gb_u32(b, 0x3F000000u); n++;           /* 0.5 */
    gb_key(b, "t.bool", 7); gb_u8(b, 1); n++;
    gb_key(b, "t.u64", 10); gb_u64(b, (uint64_t)1 << 40); n++;
    gb_key(b, "t.big", 10); gb_u64(b, UINT64_MAX); n++;
    gb_key(b, "t.i64", 11); gb_u64(b, (uint64_t)-((int64_t)1 << 40)); n++;
    gb_key(b, "t.f64", 12); gb_u64(b, 0x3FB999999999999Aull); n++; /* 0.1 */
    gb_key(b, "t.huge", 12); gb_u64(b, 0x7FEFFFFFFFFFFFFFull); n++; /* DBL_MAX */
    gb_key(b, "tok", 9); gb_u32(b, 8); gb_u64(b, 4);
    gb_str(b, "a"); gb_str(b, "bc"); gb_str(b, ""); gb_strn(b, "\xff\x00", 2);
    n++;
    gb_key(b, "ids", 9); gb_u32(b, 5); gb_u64(b, 3);
    gb_u32(b, 1); gb_u32(b, (uint32_t)-2); gb_u32(b, 3); n++;
    gb_key(b, "big_ids", 9); gb_u32(b, 10); gb_u64(b, 2);
    gb_u64(b, 5); gb_u64(b, (uint64_t)1 << 33); n++;
    gb_key(b, "scores", 9); gb_u32(b, 6); gb_u64(b, 2);
    gb_u32(b, 0x3F800000u); gb_u32(b, 0xC0000000u); n++;     /* 1, -2 */
    gb_key(b, "empty", 9); gb_u32(b, 0); gb_u64(b, 0); n++;
    gb_key(b, "flags", 9); gb_u32(b, 7); gb_u64(b, 2);
    gb_u8(b, 0); gb_u8(b, 1); n++;
    return n;
}

/* Five tensors, one of each accepted type. */
static gb_file good_file(void)
{
    gb_file f = {.n_tensors = -1, .n_kv = -1, .kvs = all_kvs, .nt = 5,
                 .t = {
                     {"w.f32", 2, {4, 2}, 0, -1},      /* 32 bytes at 0 */
                     {"w.q8", 2, {32, 2}, 8, -1},      /* 68 at 32 */
                     {"w.q4", 1, {64}, 2, -1},         /* 36 at 128 */
                     {"w.f16", 1, {3}, 1, -1},         /* 6 at 192 */
                     {"w.bf16", 4, {2, 1, 1, 2}, 30, -1}, /* 8 at 224 */
                 }};
    return f;
}

static tfm__gguf *open_file(const gb_file *f, gb_buf *b)
{
    gb_build(f, b);
    tfm__gguf *g = NULL;
    tfm_status st = tfm__gguf_open_memory(b->p, b->n, &g);
    if (st != TFM_OK)
        fail_msg("open: %s", tfm_last_error());
    return g;
}

/* The file refused with st and a message holding want. */
static void expect_refused(const gb_file *f, tfm_status want_st,
                           const char *want)
{
    gb_buf b;
    gb_build(f, &b);
    tfm__gguf *g = (tfm__gguf *)0x1;
    tfm_status st = tfm__gguf_open_memory(b.p, b.n, &g);
    if (st != want_st || !strstr(tfm_last_error(), want))
        fail_msg("got status %d \"%s\", expected %d with \"%s\"", st,
                 tfm_last_error(), want_st, want);
    assert_ptr_equal(g, (tfm__gguf *)0x1);
    free(b.p);
}

/* Same on the bytes of b cut to n. */
static void expect_bytes_refused(const unsigned char *p, size_t n,
                                 tfm_status want_st, const char *want)
{
    tfm__gguf *g = (tfm__gguf *)0x1;
    tfm_status st = tfm__gguf_open_memory(p, n, &g);
    if (st != want_st || !strstr(tfm_last_error(), want))
        fail_msg("got status %d \"%s\", expected %d with \"%s\"", st,
                 tfm_last_error(), want_st, want);
    assert_ptr_equal(g, (tfm__gguf *)0x1);
}

/* ---- Good files ------------------------------------------------------- */

static void test_good_tensors(void **state)
{
    (void)state;
    gb_file f = good_file();
    gb_buf b;
    tfm__gguf *g = open_file(&f, &b);
    assert_int_equal(tfm__gguf_n_tensors(g), 5);
    assert_int_equal(tfm__gguf_alignment(g), 32);
    assert_string_equal(tfm__gguf_path(g), "(memory)");
    /* Header 24 bytes; the key-value pairs and entries end before the
     * data section, which starts at the next multiple of 32. */
    const tfm__gguf_tensor *t0 = tfm__gguf_tensor_at(g, 0);
    const size_t start = (size_t)((const unsigned char *)t0->data - b.p);
    assert_int_equal(start % 32, 0);
    static const struct { const char *name; int dims; int64_t ne[4];
                          uint32_t type; int dtype; uint64_t off, nb; } want[5] = {
        {"w.f32", 2, {4, 2, 1, 1}, 0, TFM_DTYPE_F32, 0, 32},
        {"w.q8", 2, {32, 2, 1, 1}, 8, TFM_DTYPE_Q8_0, 32, 68},
        {"w.q4", 1, {64, 1, 1, 1}, 2, TFM_DTYPE_Q4_0, 128, 36},
        {"w.f16", 1, {3, 1, 1, 1}, 1, TFM_DTYPE_F16, 192, 6},
        {"w.bf16", 4, {2, 1, 1, 2}, 30, TFM_DTYPE_BF16, 224, 8},
    };
    assert_int_equal(b.n, start + 224 + 8);
    for (int i = 0; i < 5; i++) {
        const tfm__gguf_tensor *t = tfm__gguf_tensor_at(g, i);
        assert_non_null(t);
        assert_string_equal(t->name, want[i].name);
        assert_ptr_equal(tfm__gguf_find_tensor(g, want[i].name), t);
        assert_int_equal(t->n_dims, want[i].dims);
        for (int d = 0; d < 4; d++)
            assert_int_equal(t->ne[d], want[i].ne[d]);
        assert_int_equal(t->ggml_type, want[i].type);
        assert_int_equal(t->dtype, want[i].dtype);
        assert_int_equal(t->offset, want[i].off);
        assert_int_equal(t->nbytes, want[i].nb);
        assert_ptr_equal(t->data, b.p + start + want[i].off);
        const unsigned char *d = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++)
            assert_int_equal(d[k], (7 * k + 13 * (uint64_t)i + 1) % 251);
    }
    assert_null(tfm__gguf_tensor_at(g, 5));
    assert_null(tfm__gguf_tensor_at(g, -1));
    assert_null(tfm__gguf_find_tensor(g, "w"));
    assert_null(tfm__gguf_find_tensor(g, "w.f32x"));
    size_t size = 0;
    assert_ptr_equal(tfm__gguf_map(g, &size), b.p);
    assert_int_equal(size, b.n);
    assert_null(tfm__gguf_release_map(g, &size)); /* not a mapping */
    tfm__gguf_close(g);
    tfm__gguf_close(NULL);
    free(b.p);
}

static void test_good_metadata(void **state)
{
    (void)state;
    gb_file f = good_file();
    f.alignment = 64;
    gb_buf b;
    tfm__gguf *g = open_file(&f, &b);
    assert_int_equal(tfm__gguf_alignment(g), 64);
    assert_int_equal(tfm__gguf_n_kv(g), 21);
    tfm__gguf_str s;
    int type = -1;
    assert_int_equal(tfm__gguf_kv_at(g, 0, &s, &type), TFM_OK);
    assert_int_equal(type, TFM__GGUF_STRING);
    assert_true(s.len == 20 && !memcmp(s.ptr, "general.architecture", 20));
    assert_int_equal(tfm__gguf_kv_at(g, 21, &s, &type), TFM_ERR_INVALID_ARGUMENT);

    assert_int_equal(tfm__gguf_get_str(g, "general.architecture", &s), TFM_OK);
    assert_true(s.len == 5 && !memcmp(s.ptr, "llama", 5));
    uint32_t u = 0;
    int64_t i64 = 0;
    assert_int_equal(tfm__gguf_get_u32(g, "t.u8", &u), TFM_OK);
    assert_int_equal(u, 200);
    assert_int_equal(tfm__gguf_get_u32(g, "t.u16", &u), TFM_OK);
    assert_int_equal(u, 65535);
    assert_int_equal(tfm__gguf_get_u32(g, "t.u32", &u), TFM_OK);
    assert_int_equal(u, 4000000000u);
    assert_int_equal(tfm__gguf_get_u32(g, "general.alignment", &u), TFM_OK);
    assert_int_equal(u, 64);
    u = 9;
    /* Negative or too large for u32: refused, *v untouched. */
    assert_int_equal(tfm__gguf_get_u32(g, "t.i8", &u), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_get_u32(g, "t.u64", &u), TFM_ERR_FORMAT);
    assert_non_null(strstr(tfm_last_error(), "t.u64"));
    assert_int_equal(u, 9);
    assert_int_equal(tfm__gguf_get_i64(g, "t.i8", &i64), TFM_OK);
    assert_int_equal(i64, -5);
    assert_int_equal(tfm__gguf_get_i64(g, "t.i16", &i64), TFM_OK);
    assert_int_equal(i64, -300);
    assert_int_equal(tfm__gguf_get_i64(g, "t.i32", &i64), TFM_OK);
    assert_int_equal(i64, -7);
    assert_int_equal(tfm__gguf_get_i64(g, "t.u64", &i64), TFM_OK);
    assert_int_equal(i64, (int64_t)1 << 40);
    assert_int_equal(tfm__gguf_get_i64(g, "t.i64", &i64), TFM_OK);
    assert_int_equal(i64, -((int64_t)1 << 40));
    assert_int_equal(tfm__gguf_get_i64(g, "t.big", &i64), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_get_i64(g, "t.f32", &i64), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_get_i64(g, "t.bool", &i64), TFM_ERR_FORMAT);
    float x = 0;
    assert_int_equal(tfm__gguf_get_f32(g, "t.f32", &x), TFM_OK);
    assert_true(x == 0.5f);
    assert_int_equal(tfm__gguf_get_f32(g, "t.f64", &x), TFM_OK);
    assert_true(x == 0.1f); /* 0.1 as a double, rounded to float */
    assert_int_equal(tfm__gguf_get_f32(g, "t.huge", &x), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_get_f32(g, "t.u8", &x), TFM_ERR_FORMAT);
    double d = 0;
    assert_int_equal(tfm__gguf_get_number(g, "t.big", &d), TFM_OK);
    assert_true(d == 18446744073709551615.0);
    int flag = -1;
    assert_int_equal(tfm__gguf_get_bool(g, "t.bool", &flag), TFM_OK);
    assert_int_equal(flag, 1);
    assert_int_equal(tfm__gguf_get_bool(g, "t.u8", &flag), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_get_str(g, "t.u8", &s), TFM_ERR_FORMAT);
    assert_non_null(strstr(tfm_last_error(), "\"t.u8\" is of type u8"));
    assert_int_equal(tfm__gguf_get_str(g, "nope", &s), TFM_ERR_NOT_FOUND);
    assert_non_null(strstr(tfm_last_error(), "no key \"nope\""));
    /* A prefix of a key and a key with a suffix are other keys. */
    assert_int_equal(tfm__gguf_get_u32(g, "t.u", &u), TFM_ERR_NOT_FOUND);
    assert_int_equal(tfm__gguf_get_u32(g, "t.u80", &u), TFM_ERR_NOT_FOUND);

    int et = -1;
    uint64_t n = 0;
    assert_int_equal(tfm__gguf_get_array(g, "tok", &et, &n), TFM_OK);
    assert_int_equal(et, TFM__GGUF_STRING);
    assert_int_equal(n, 4);
    static const char *const toks[4] = {"a", "bc", "", "\xff"};
    static const size_t lens[4] = {1, 2, 0, 2};
    for (uint64_t k = 0; k < 4; k++) {
        assert_int_equal(tfm__gguf_array_str(g, "tok", k, &s), TFM_OK);
        assert_int_equal(s.len, lens[k]);
        assert_memory_equal(s.ptr, toks[k], lens[k]);
    }
    assert_int_equal(tfm__gguf_array_str(g, "tok", 4, &s), TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm__gguf_array_str(g, "ids", 0, &s), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_array_str(g, "t.u8", 0, &s), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_get_array(g, "t.u8", &et, &n), TFM_ERR_FORMAT);
    int32_t iv = 0;
    static const int32_t ids[3] = {1, -2, 3};
    for (uint64_t k = 0; k < 3; k++) {
        assert_int_equal(tfm__gguf_array_i32(g, "ids", k, &iv), TFM_OK);
        assert_int_equal(iv, ids[k]);
    }
    assert_int_equal(tfm__gguf_array_i32(g, "big_ids", 0, &iv), TFM_OK);
    assert_int_equal(iv, 5);
    assert_int_equal(tfm__gguf_array_i32(g, "big_ids", 1, &iv), TFM_ERR_FORMAT);
    assert_int_equal(iv, 5);
    assert_int_equal(tfm__gguf_array_i32(g, "scores", 0, &iv), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_array_f32(g, "scores", 1, &x), TFM_OK);
    assert_true(x == -2.0f);
    assert_int_equal(tfm__gguf_array_f32(g, "ids", 1, &x), TFM_ERR_FORMAT);
    assert_int_equal(tfm__gguf_get_array(g, "empty", &et, &n), TFM_OK);
    assert_int_equal(et, TFM__GGUF_U8);
    assert_int_equal(n, 0);
    assert_int_equal(tfm__gguf_array_i32(g, "empty", 0, &iv), TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm__gguf_array_number(g, "flags", 1, &d), TFM_OK);
    assert_true(d == 1.0);
    /* Alignment 64: each tensor at a multiple of 64. */
    assert_int_equal(tfm__gguf_find_tensor(g, "w.q8")->offset, 64);
    assert_int_equal(tfm__gguf_find_tensor(g, "w.q4")->offset, 192);
    assert_int_equal(tfm__gguf_find_tensor(g, "w.f16")->offset, 256);
    assert_int_equal(tfm__gguf_find_tensor(g, "w.bf16")->offset, 320);
    tfm__gguf_close(g);
    free(b.p);
}

/* No tensors, no keys: the 24-byte header alone. */
static void test_empty_file(void **state)
{
    (void)state;
    gb_file f = {.n_tensors = -1, .n_kv = -1, .no_data = 1};
    gb_buf b;
    tfm__gguf *g = open_file(&f, &b);
    assert_int_equal(b.n, 24);
    assert_int_equal(tfm__gguf_n_tensors(g), 0);
    assert_int_equal(tfm__gguf_n_kv(g), 0);
    tfm__gguf_close(g);
    free(b.p);
}

/* Through the file door and mmap; the mapping handed on. */
static void test_open_path(void **state)
{
    (void)state;
    char path[] = "/tmp/tfm_gguf_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    gb_file f = good_file();
    gb_buf b;
    gb_build(&f, &b);
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    tfm__gguf *g = NULL;
    assert_int_equal(tfm__gguf_open(path, &g), TFM_OK);
    assert_string_equal(tfm__gguf_path(g), path);
    const tfm__gguf_tensor *t = tfm__gguf_find_tensor(g, "w.q8");
    assert_int_equal((uintptr_t)t->data % 32, 0);
    assert_memory_equal(t->data, b.p + ((const unsigned char *)t->data -
                                        (const unsigned char *)tfm__gguf_map(g, NULL)),
                        t->nbytes);
    size_t size = 0;
    void *map = tfm__gguf_release_map(g, &size);
    assert_non_null(map);
    assert_int_equal(size, b.n);
    const unsigned char *data = t->data;
    tfm__gguf_close(g);
    assert_int_equal(data[0], (13 * 1 + 1) % 251); /* still mapped */
    munmap(map, size);
    /* A file too short for the header; a directory; nothing there. */
    FILE *fp = fopen(path, "wb");
    fwrite("GGUF", 1, 4, fp);
    fclose(fp);
    g = (tfm__gguf *)0x1;
    assert_int_equal(tfm__gguf_open(path, &g), TFM_ERR_FORMAT);
    assert_non_null(strstr(tfm_last_error(), path));
    assert_int_equal(tfm__gguf_open("/tmp", &g), TFM_ERR_IO);
    unlink(path);
    assert_int_equal(tfm__gguf_open(path, &g), TFM_ERR_IO);
    assert_ptr_equal(g, (tfm__gguf *)0x1);
    assert_int_equal(tfm__gguf_open(NULL, &g), TFM_ERR_NULL_ARGUMENT);
    free(b.p);
}

/* ---- Refusals: the header --------------------------------------------- */

static void test_refuse_header(void **state)
{
    (void)state;
    gb_file f = good_file();
    f.magic = "GGUG";
    expect_refused(&f, TFM_ERR_FORMAT, "does not begin with \"GGUF\"");
    f = good_file();
    f.version = 2;
    expect_refused(&f, TFM_ERR_UNSUPPORTED, "GGUF version 2 is not supported");
    f.version = 1;
    expect_refused(&f, TFM_ERR_UNSUPPORTED, "GGUF version 1 is not supported");
    f.version = 4;
    expect_refused(&f, TFM_ERR_UNSUPPORTED, "unknown GGUF version 4");
    /* Version 3 written big-endian reads as 0x03000000. */
    f.version = 0x03000000u;
    expect_refused(&f, TFM_ERR_UNSUPPORTED, "big-endian");
    static const unsigned char short_file[10] = "GGUF\3\0\0\0\0\0";
    expect_bytes_refused(short_file, sizeof short_file, TFM_ERR_FORMAT,
                         "truncated: 10 bytes");
    expect_bytes_refused(short_file, 2, TFM_ERR_FORMAT, "not a GGUF file");
    /* Counts that the bytes left cannot hold, refused before allocating:
     * 2^60 pairs need 13 * 2^60 bytes. */
    f = good_file();
    f.n_kv = (int64_t)1 << 60;
    expect_refused(&f, TFM_ERR_FORMAT, "key-value pairs cannot fit");
    f = good_file();
    f.n_tensors = (int64_t)1 << 60;
    expect_refused(&f, TFM_ERR_FORMAT, "tensors and");
    /* A plausible count that the file still does not hold. */
    f = good_file();
    f.n_tensors = 6; /* the sixth entry reads the zeros of the padding */
    expect_refused(&f, TFM_ERR_FORMAT, "tensor name at byte");
}

/* Every cut of a good file is refused (never read past the end). */
static void test_refuse_truncated(void **state)
{
    (void)state;
    gb_file f = good_file();
    gb_buf b;
    gb_build(&f, &b);
    for (size_t n = 0; n < b.n; n++) {
        unsigned char *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        tfm__gguf *g = NULL;
        tfm_status st = tfm__gguf_open_memory(copy, n, &g);
        if (st == TFM_OK)
            fail_msg("a file cut to %zu of %zu bytes was accepted", n, b.n);
        assert_int_equal(st, TFM_ERR_FORMAT);
        free(copy);
    }
    free(b.p);
}

/* ---- Refusals: key-value pairs ---------------------------------------- */

static const char *bad_kv_case;

static int bad_kvs(gb_buf *b, const gb_file *f)
{
    (void)f;
    const char *c = bad_kv_case;
    if (!strcmp(c, "dup")) {
        gb_key(b, "a.b", 4); gb_u32(b, 1);
        gb_key(b, "a.c", 4); gb_u32(b, 1);
        gb_key(b, "a.b", 8); gb_str(b, "x");
        return 3;
    }
    if (!strcmp(c, "utf8")) { gb_key(b, "a\xc0\x80", 4); gb_u32(b, 1); }
    else if (!strcmp(c, "nul")) { gb_strn(b, "a\0b", 3); gb_u32(b, 4); gb_u32(b, 1); }
    else if (!strcmp(c, "empty")) { gb_key(b, "", 4); gb_u32(b, 1); }
    else if (!strcmp(c, "type")) { gb_key(b, "k", 13); gb_u32(b, 1); }
    else if (!strcmp(c, "nested")) {
        gb_key(b, "k", 9); gb_u32(b, 9); gb_u64(b, 1); gb_u32(b, 4); gb_u64(b, 1); gb_u32(b, 1);
    } else if (!strcmp(c, "elemtype")) {
        gb_key(b, "k", 9); gb_u32(b, 99); gb_u64(b, 0);
    } else if (!strcmp(c, "count")) {
        gb_key(b, "k", 9); gb_u32(b, 12); gb_u64(b, (uint64_t)1 << 61);
    } else if (!strcmp(c, "strcount")) {
        gb_key(b, "k", 9); gb_u32(b, 8); gb_u64(b, (uint64_t)1 << 40);
    } else if (!strcmp(c, "strlen")) {
        gb_key(b, "k", 8); gb_u64(b, (uint64_t)1 << 50);
    } else if (!strcmp(c, "keylen")) {
        gb_u64(b, UINT64_MAX); gb_u32(b, 4);
    } else if (!strcmp(c, "bool")) { gb_key(b, "k", 7); gb_u8(b, 2); }
    else if (!strcmp(c, "boolarray")) {
        gb_key(b, "k", 9); gb_u32(b, 7); gb_u64(b, 2); gb_u8(b, 1); gb_u8(b, 7);
    } else if (!strcmp(c, "align_type")) { gb_key(b, "general.alignment", 10); gb_u64(b, 32); }
    else if (!strcmp(c, "align_zero")) { gb_key(b, "general.alignment", 4); gb_u32(b, 0); }
    else if (!strcmp(c, "align_odd")) { gb_key(b, "general.alignment", 4); gb_u32(b, 48); }
    /* padding so that the counts pass the first bound */
    gb_key(b, "pad", 8); gb_str(b, "0123456789012345678901234567890123456789");
    return 2;
}

static void test_refuse_kvs(void **state)
{
    (void)state;
    static const struct { const char *c; tfm_status st; const char *msg; } cases[] = {
        {"dup", TFM_ERR_FORMAT, "key \"a.b\" appears twice"},
        {"utf8", TFM_ERR_FORMAT, "not valid UTF-8 at byte 33"},
        {"nul", TFM_ERR_FORMAT, "key at byte 24 holds a NUL byte"},
        {"empty", TFM_ERR_FORMAT, "key at byte 24 is empty"},
        {"type", TFM_ERR_FORMAT, "unknown value type 13 at byte 33"},
        {"nested", TFM_ERR_FORMAT, "nested arrays are not supported"},
        {"elemtype", TFM_ERR_FORMAT, "unknown value type 99"},
        {"count", TFM_ERR_FORMAT, "array of 2305843009213693952 f64"},
        {"strcount", TFM_ERR_FORMAT, "array of 1099511627776 string"},
        {"strlen", TFM_ERR_FORMAT, "string value at byte 37: length 1125899906842624 runs past"},
        {"keylen", TFM_ERR_FORMAT, "key at byte 24: length 18446744073709551615"},
        {"bool", TFM_ERR_FORMAT, "bool value 2 at byte 37"},
        {"boolarray", TFM_ERR_FORMAT, "bool value 7 at byte 50"},
        {"align_type", TFM_ERR_FORMAT, "general.alignment is a u64, expected u32"},
        {"align_zero", TFM_ERR_FORMAT, "general.alignment 0 is not a power of two"},
        {"align_odd", TFM_ERR_FORMAT, "general.alignment 48 is not a power of two"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bad_kv_case = cases[i].c;
        gb_file f = good_file();
        f.kvs = bad_kvs;
        print_message("case %s\n", cases[i].c);
        expect_refused(&f, cases[i].st, cases[i].msg);
    }
}

/* ---- Refusals: tensors ------------------------------------------------ */

static void test_refuse_tensors(void **state)
{
    (void)state;
    gb_file f = good_file();
    f.t[2].name = "w.f32";
    expect_refused(&f, TFM_ERR_FORMAT, "tensor \"w.f32\" appears twice");
    f = good_file();
    f.t[1].name = "w\xed\xa0\x80"; /* a UTF-16 surrogate */
    expect_refused(&f, TFM_ERR_FORMAT, "tensor name at byte");
    f = good_file();
    f.t[1].name = "";
    expect_refused(&f, TFM_ERR_FORMAT, "is empty");
    f = good_file();
    f.t[0].n_dims = 5;
    expect_refused(&f, TFM_ERR_FORMAT, "n_dims 5");
    f = good_file();
    f.t[0].n_dims = 0;
    expect_refused(&f, TFM_ERR_FORMAT, "n_dims 0");
    f = good_file();
    f.t[3].ne[0] = 0;
    expect_refused(&f, TFM_ERR_UNSUPPORTED, "tensor \"w.f16\": ne[0] = 0");
    f = good_file();
    f.t[0].ne[1] = (uint64_t)1 << 63;
    expect_refused(&f, TFM_ERR_FORMAT, "larger than 2^63 - 1");
    /* 2^31 * 2^31 * 4 bytes overflows int64: the product is checked. */
    f = good_file();
    f.t[0] = (gb_tensor){"w.f32", 3, {(uint64_t)1 << 31, (uint64_t)1 << 31, 4}, 0, 0};
    expect_refused(&f, TFM_ERR_FORMAT, "its size in bytes overflows");
    /* Q rows not whole blocks of 32. */
    f = good_file();
    f.t[1].ne[0] = 48;
    expect_refused(&f, TFM_ERR_FORMAT, "Q8_0 rows of 48 values are not whole blocks of 32");
    f = good_file();
    f.t[2].ne[0] = 16;
    expect_refused(&f, TFM_ERR_FORMAT, "Q4_0 rows of 16");
    /* Types refused by name, unknown numbers as malformed. */
    static const struct { uint32_t type; const char *name; } refused[] = {
        {3, "Q4_1"}, {6, "Q5_0"}, {7, "Q5_1"}, {9, "Q8_1"}, {10, "Q2_K"},
        {12, "Q4_K"}, {14, "Q6_K"}, {15, "Q8_K"}, {16, "IQ2_XXS"},
        {23, "IQ4_XS"}, {24, "I8"}, {27, "I64"}, {28, "F64"}, {29, "IQ1_M"},
        {34, "TQ1_0"}, {39, "MXFP4"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        f = good_file();
        f.t[1].type = refused[i].type;
        char msg[64];
        snprintf(msg, sizeof msg, "type %s (%u) is not supported",
                 refused[i].name, refused[i].type);
        expect_refused(&f, TFM_ERR_UNSUPPORTED, msg);
    }
    static const uint32_t unknown[] = {4, 5, 31, 33, 36, 38, 43, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        f = good_file();
        f.t[1].type = unknown[i];
        expect_refused(&f, TFM_ERR_FORMAT, "unknown ggml type");
    }
}

static void test_refuse_placement(void **state)
{
    (void)state;
    gb_file f = good_file();
    f.t[2].offset = 100; /* not a multiple of 32 */
    expect_refused(&f, TFM_ERR_FORMAT, "tensor \"w.q4\": offset 100 at byte");
    f = good_file();
    f.alignment = 64;
    f.t[2].offset = 96;
    expect_refused(&f, TFM_ERR_FORMAT, "not a multiple of the alignment 64");
    /* w.q8 (68 bytes at 32) overlaps w.q4 moved to 96. */
    f = good_file();
    f.t[2].offset = 96;
    f.t[3].offset = 160;
    f.t[4].offset = 192;
    expect_refused(&f, TFM_ERR_FORMAT,
                   "tensors \"w.q8\" (bytes 32..100) and \"w.q4\" (from 96) overlap");
    /* Same offset twice. */
    f = good_file();
    f.t[4].offset = 0;
    expect_refused(&f, TFM_ERR_FORMAT, "overlap");
    /* A tensor past the end: the data section stops early. */
    f = good_file();
    gb_buf b;
    gb_build(&f, &b);
    expect_bytes_refused(b.p, b.n - 1, TFM_ERR_FORMAT,
                         "tensor \"w.bf16\": its 8 bytes at offset 224");
    /* An offset far past the end (no overflow in offset + size). */
    f = good_file();
    f.t[0].offset = (int64_t)(UINT64_MAX / 64 * 32);
    free(b.p);
    gb_build(&f, &b);
    expect_bytes_refused(b.p, b.n, TFM_ERR_FORMAT, "run past the end of the file");
    free(b.p);
    /* The header ends, the data section's padding and data are missing. */
    f = good_file();
    f.no_data = 1;
    expect_refused(&f, TFM_ERR_FORMAT, "the data section would start at byte");
    /* A huge alignment puts the data section past the end. */
    f = good_file();
    f.alignment = 1u << 31;
    f.nt = 1;
    f.t[0].offset = 0;
    f.no_data = 1;
    expect_refused(&f, TFM_ERR_FORMAT, "aligned to 2147483648");
}

/* Alignment 1 and tensors packed without padding are valid. */
static void test_alignment_one(void **state)
{
    (void)state;
    gb_file f = good_file();
    f.alignment = 1;
    gb_buf b;
    tfm__gguf *g = open_file(&f, &b);
    assert_int_equal(tfm__gguf_alignment(g), 1);
    assert_int_equal(tfm__gguf_find_tensor(g, "w.q4")->offset, 100);
    assert_int_equal(tfm__gguf_find_tensor(g, "w.f16")->offset, 136);
    assert_int_equal(tfm__gguf_find_tensor(g, "w.bf16")->offset, 142);
    tfm__gguf_close(g);
    free(b.p);
}

/* Each allocation of an open made to fail in turn: TFM_ERR_OUT_OF_MEMORY,
 * *out untouched, nothing leaked (valgrind / ASan runs), until the open
 * needs no more and succeeds. */
static void test_out_of_memory(void **state)
{
    (void)state;
    gb_file f = good_file();
    gb_buf b;
    gb_build(&f, &b);
    int ok = 0;
    for (long k = 1; k < 200 && !ok; k++) {
        tfm__gguf *g = (tfm__gguf *)0x1;
        tfm_testing_fail_allocation(k);
        tfm_status st = tfm__gguf_open_memory(b.p, b.n, &g);
        tfm_testing_fail_allocation(0);
        if (st == TFM_OK) {
            assert_int_equal(tfm__gguf_n_tensors(g), 5);
            tfm__gguf_close(g);
            ok = 1;
        } else {
            assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
            assert_ptr_equal(g, (tfm__gguf *)0x1);
        }
    }
    assert_true(ok);
    free(b.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_tensors),
        cmocka_unit_test(test_good_metadata),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_open_path),
        cmocka_unit_test(test_refuse_header),
        cmocka_unit_test(test_refuse_truncated),
        cmocka_unit_test(test_refuse_kvs),
        cmocka_unit_test(test_refuse_tensors),
        cmocka_unit_test(test_refuse_placement),
        cmocka_unit_test(test_alignment_one),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
