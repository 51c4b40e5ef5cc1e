/* Tests of the safetensors reader and writer (safetensors.h).
 *
 * Files are built in memory (build_file) or written to a temporary
 * directory; tests/data/numpy_reference.safetensors comes from
 * tools/make_safetensors_testdata.py (numpy, outside this library). */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "transformer/safetensors.h"

/* Internal test hook of the library (src/alloc.c): the k-th allocation
 * from now fails; 0 disarms it. */
void tfm_testing_fail_allocation(long k);

static char tmp_dir[] = "/tmp/tfm_safetensors_XXXXXX";

/* A handle value that no call may write over on failure. */
#define SENTINEL ((void *)0x1)

/* ---- Helpers ---------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* [u64 LE strlen(header)][header][data]; malloc'd, size in *size. */
static unsigned char *build_file_n(const char *header, size_t header_len,
                                   const void *data, size_t data_len,
                                   size_t *size)
{
    *size = 8 + header_len + data_len;
    unsigned char *buf = malloc(*size ? *size : 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    memcpy(buf + 8, header, header_len);
    if (data_len)
        memcpy(buf + 8 + header_len, data, data_len);
    return buf;
}

static unsigned char *build_file(const char *header, const void *data,
                                 size_t data_len, size_t *size)
{
    return build_file_n(header, strlen(header), data, data_len, size);
}

static void assert_error_mentions(const char *keyword)
{
    if (!strstr(tfm_last_error(), keyword))
        fail_msg("error \"%s\" does not mention \"%s\"", tfm_last_error(),
                 keyword);
}

/* Opens bytes[0..size-1] from memory and expects `status`, an untouched
 * handle and a message containing keyword. */
static void expect_open_bytes(const unsigned char *bytes, size_t size,
                              tfm_status status, const char *keyword)
{
    tfm_safetensors *f = SENTINEL;
    tfm_status st = tfm_safetensors_open_memory(bytes, size, &f);
    if (st != status)
        fail_msg("status %d (%s), expected %d; message: %s", (int)st,
                 tfm_status_string(st), (int)status, tfm_last_error());
    assert_ptr_equal(f, SENTINEL);
    assert_error_mentions(keyword);
}

/* The header (with data_len zero bytes of data) must be refused. */
static void expect_refused(const char *header, size_t data_len,
                           tfm_status status, const char *keyword)
{
    unsigned char *data = calloc(1, data_len ? data_len : 1);
    size_t size;
    unsigned char *buf = build_file(header, data, data_len, &size);
    expect_open_bytes(buf, size, status, keyword);
    free(buf);
    free(data);
}

static void expect_format(const char *header, size_t data_len,
                          const char *keyword)
{
    expect_refused(header, data_len, TFM_ERR_FORMAT, keyword);
}

/* Opens header + zero-filled data, which must be valid. */
static tfm_safetensors *open_valid(const char *header, size_t data_len,
                                   unsigned char **buf)
{
    unsigned char *data = calloc(1, data_len ? data_len : 1);
    size_t size;
    *buf = build_file(header, data, data_len, &size);
    free(data);
    tfm_safetensors *f = NULL;
    tfm_status st = tfm_safetensors_open_memory(*buf, size, &f);
    if (st != TFM_OK)
        fail_msg("valid file refused: %s", tfm_last_error());
    return f;
}

static void tmp_path(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmp_dir, name);
}

static void write_bytes(const char *path, const void *bytes, size_t size)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(bytes, 1, size, fp), size);
    assert_int_equal(fclose(fp), 0);
}

static unsigned char *read_bytes(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    long n = ftell(fp);
    assert_true(n >= 0);
    rewind(fp);
    unsigned char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

/* Number of entries of the temporary directory whose name contains s. */
static int count_in_tmp(const char *s)
{
    DIR *d = opendir(tmp_dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, s))
            n++;
    closedir(d);
    return n;
}

static tfm_tensor *make_tensor(int rank, const int64_t *shape,
                               const float *values)
{
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_tensor_create_copy(rank, shape, values, &t), TFM_OK);
    return t;
}

/* Reads name and asserts its shape and exact bits. */
static void expect_tensor(const tfm_safetensors *f, const char *name,
                          int rank, const int64_t *shape,
                          const uint32_t *bits)
{
    tfm_tensor *t = NULL;
    if (tfm_safetensors_read(f, name, &t) != TFM_OK)
        fail_msg("reading %s: %s", name, tfm_last_error());
    assert_int_equal(tfm_tensor_rank(t), rank);
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        assert_int_equal(tfm_tensor_dim(t, i), shape[i]);
        numel *= shape[i];
    }
    assert_int_equal(tfm_tensor_numel(t), numel);
    const float *d = tfm_tensor_data_const(t);
    for (int64_t i = 0; i < numel; i++)
        if (f32_bits(d[i]) != bits[i])
            fail_msg("%s[%lld] = %a (0x%08x), expected %a (0x%08x)", name,
                     (long long)i, (double)d[i], f32_bits(d[i]),
                     (double)f32_from_bits(bits[i]), bits[i]);
    tfm_tensor_free(t);
}

static int setup_group(void **state)
{
    (void)state;
    return mkdtemp(tmp_dir) ? 0 : -1;
}

/* Removes the temporary directory, with whatever a failed test left. */
static int teardown_group(void **state)
{
    (void)state;
    DIR *d = opendir(tmp_dir);
    if (d) {
        struct dirent *de;
        char path[512];
        while ((de = readdir(d)) != NULL) {
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", tmp_dir, de->d_name);
            if (unlink(path) != 0)
                rmdir(path);
        }
        closedir(d);
    }
    return rmdir(tmp_dir);
}

/* ---- Round trip ------------------------------------------------------- */

static const float RT_W[6] = {1.0f, -2.5f, 0.0f, 3.25e-3f, 1e30f, -7.0f};
/* special values survive bit for bit */
static const float RT_B[5] = {-0.0f, 1e-45f, 3.4028235e38f, INFINITY, NAN};
static const float RT_E[6] = {1, 2, 3, 4, 5, 6};
static const float RT_Z[8] = {8, 7, 6, 5, 4, 3, 2, 1};

static void write_round_trip(const char *path)
{
    static const int64_t sw[2] = {2, 3}, sb[1] = {5}, se[3] = {2, 1, 3},
                         sz[4] = {1, 2, 2, 2};
    tfm_tensor *w = make_tensor(2, sw, RT_W), *tb = make_tensor(1, sb, RT_B),
               *e = make_tensor(3, se, RT_E), *z = make_tensor(4, sz, RT_Z);
    tfm_safetensors_writer *wr = NULL;
    assert_int_equal(tfm_safetensors_writer_create(&wr), TFM_OK);
    /* added out of name order; the file holds them sorted */
    assert_int_equal(tfm_safetensors_writer_add(wr, "z.weight", z), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add(wr, "layer.0.w", w), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add(wr, "bias", tb), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add(wr, "emb", e), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_set_metadata(wr, "format", "tf"),
                     TFM_OK);
    assert_int_equal(tfm_safetensors_writer_set_metadata(
                         wr, "note", "h\xc3\xa9llo \"q\"\n\\"), TFM_OK);
    /* replaced */
    assert_int_equal(tfm_safetensors_writer_set_metadata(wr, "format", "pt"),
                     TFM_OK);
    /* the writer copied the tensors: freeing them first is fine */
    tfm_tensor_free(w);
    tfm_tensor_free(tb);
    tfm_tensor_free(e);
    tfm_tensor_free(z);
    assert_int_equal(tfm_safetensors_writer_save(wr, path), TFM_OK);
    tfm_safetensors_writer_free(wr);
}

/* The raw layout: 8 + N a multiple of 8, spaces after the JSON, data
 * packed (total (6 + 5 + 6 + 8) floats). */
static void check_round_trip_bytes(const char *path)
{
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)bytes[i] << (8 * i);
    assert_int_equal((8 + n) % 8, 0);
    assert_int_equal(size, 8 + n + 25 * 4);
    assert_int_equal(bytes[8], '{');
    size_t last = 8 + (size_t)n - 1;
    while (bytes[last] == ' ')
        last--;
    assert_int_equal(bytes[last], '}');
    assert_true(8 + (size_t)n - 1 - last < 8); /* at most 7 pad spaces */
    /* data section starts with "bias" (first by name): -0.0f */
    uint32_t first = 0;
    for (int i = 0; i < 4; i++)
        first |= (uint32_t)bytes[8 + n + i] << (8 * i);
    assert_int_equal(first, 0x80000000u);
    free(bytes);
}

static void test_round_trip(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof path, "round_trip.safetensors");
    write_round_trip(path);
    assert_int_equal(count_in_tmp(".tmp."), 0);
    check_round_trip_bytes(path);

    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_count(f), 4);
    static const char *const order[4] = {"bias", "emb", "layer.0.w",
                                         "z.weight"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(tfm_safetensors_name(f, i), order[i]);
    assert_null(tfm_safetensors_name(f, 4));
    assert_null(tfm_safetensors_name(f, -1));

    tfm_dtype dt;
    int rank;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    assert_int_equal(tfm_safetensors_info(f, "emb", &dt, &rank, shape),
                     TFM_OK);
    assert_int_equal(dt, TFM_DTYPE_F32);
    assert_int_equal(rank, 3);
    assert_int_equal(shape[0], 2);
    assert_int_equal(shape[1], 1);
    assert_int_equal(shape[2], 3);

    uint32_t bits[8];
    static const int64_t sw[2] = {2, 3}, sb[1] = {5}, se[3] = {2, 1, 3},
                         sz[4] = {1, 2, 2, 2};
    for (int i = 0; i < 6; i++)
        bits[i] = f32_bits(RT_W[i]);
    expect_tensor(f, "layer.0.w", 2, sw, bits);
    for (int i = 0; i < 5; i++)
        bits[i] = f32_bits(RT_B[i]);
    expect_tensor(f, "bias", 1, sb, bits);
    for (int i = 0; i < 6; i++)
        bits[i] = f32_bits(RT_E[i]);
    expect_tensor(f, "emb", 3, se, bits);
    for (int i = 0; i < 8; i++)
        bits[i] = f32_bits(RT_Z[i]);
    expect_tensor(f, "z.weight", 4, sz, bits);

    assert_int_equal(tfm_safetensors_metadata_count(f), 2);
    assert_string_equal(tfm_safetensors_metadata_key(f, 0), "format");
    assert_string_equal(tfm_safetensors_metadata_key(f, 1), "note");
    assert_null(tfm_safetensors_metadata_key(f, 2));
    assert_string_equal(tfm_safetensors_metadata(f, "format"), "pt");
    assert_string_equal(tfm_safetensors_metadata(f, "note"),
                        "h\xc3\xa9llo \"q\"\n\\");
    assert_null(tfm_safetensors_metadata(f, "absent"));
    tfm_safetensors_close(f);
    unlink(path);
}

/* A writer with nothing in it gives "{}" padded to 8 bytes: N = 8. */
static void test_write_empty(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof path, "empty.safetensors");
    tfm_safetensors_writer *wr = NULL;
    assert_int_equal(tfm_safetensors_writer_create(&wr), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_save(wr, path), TFM_OK);
    tfm_safetensors_writer_free(wr);
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    assert_int_equal(size, 16);
    assert_int_equal(bytes[0], 8);
    assert_memory_equal(bytes + 8, "{}      ", 8);
    free(bytes);
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_count(f), 0);
    assert_int_equal(tfm_safetensors_metadata_count(f), 0);
    tfm_safetensors_close(f);
    unlink(path);
}

static void test_writer_errors(void **state)
{
    (void)state;
    static const int64_t s[1] = {2};
    static const float v[2] = {1, 2};
    tfm_tensor *t = make_tensor(1, s, v);
    tfm_safetensors_writer *wr = NULL;
    assert_int_equal(tfm_safetensors_writer_create(&wr), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add(wr, "a", t), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add(wr, "a", t),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("duplicate");
    assert_int_equal(tfm_safetensors_writer_add(wr, "__metadata__", t),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("reserved");
    assert_int_equal(tfm_safetensors_writer_add(wr, "bad\xff", t),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("UTF-8");
    assert_int_equal(tfm_safetensors_writer_set_metadata(wr, "k", "\xc0\x80"),
                     TFM_ERR_INVALID_ARGUMENT);
    assert_error_mentions("UTF-8");

    /* saving into a missing directory: TFM_ERR_IO, nothing written */
    char path[256];
    tmp_path(path, sizeof path, "missing/dir/x.safetensors");
    assert_int_equal(tfm_safetensors_writer_save(wr, path), TFM_ERR_IO);
    assert_error_mentions("missing/dir");
    /* rename onto a directory fails: the temporary file is removed */
    tmp_path(path, sizeof path, "a_directory");
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(tfm_safetensors_writer_save(wr, path), TFM_ERR_IO);
    assert_error_mentions("rename");
    assert_int_equal(count_in_tmp(".tmp."), 0);
    assert_int_equal(rmdir(path), 0);

    tfm_safetensors_writer_free(wr);
    tfm_tensor_free(t);
}

/* ---- F16 and BF16 writing (tfm_safetensors_writer_add_as) -------------- */

/* Inputs (float32 bits) and the binary16 bits round-to-nearest-even gives,
 * worked out by hand (binary16: 5-bit exponent bias 15, 10-bit mantissa;
 * ulp of [1, 2) is 2^-10; subnormal unit 2^-24; largest finite 65504). */
static const uint32_t F16_IN[] = {
    0x3f800000u, /* 1.0                                  -> 0x3C00 */
    0xc0000000u, /* -2.0                                 -> 0xC000 */
    0x477fe000u, /* 65504, the largest finite half       -> 0x7BFF */
    0x477fef00u, /* 65519: below 65520, the midpoint     -> 0x7BFF */
    0x477ff000u, /* 65520: midpoint, 0x7BFF odd, so up   -> 0x7C00 inf */
    0x501502f9u, /* 1e10                                 -> 0x7C00 */
    0xff800000u, /* -inf                                 -> 0xFC00 */
    0x3f801000u, /* 1 + 2^-11: midpoint of 1 and 1+2^-10, even 1.0
                                                         -> 0x3C00 */
    0x3f803000u, /* 1 + 3*2^-11: midpoint, 0x3C01 odd, up -> 0x3C02 */
    0x3f801001u, /* just above 1 + 2^-11                 -> 0x3C01 */
    0x33800000u, /* 2^-24, the smallest subnormal        -> 0x0001 */
    0x33000000u, /* 2^-25: midpoint of 0 and 2^-24, even 0 -> 0x0000 */
    0x33400000u, /* 0.75 * 2^-24: nearer 2^-24           -> 0x0001 */
    0x33c00000u, /* 1.5 * 2^-24: midpoint of 1 and 2 units, even 2
                                                         -> 0x0002 */
    0x38800000u, /* 2^-14, the smallest normal           -> 0x0400 */
    0x387fe000u, /* 1023.5 units: midpoint, 0x3FF odd, up -> 0x0400 */
    0x387fc000u, /* 1023 units, the largest subnormal    -> 0x03FF */
    0x80000000u, /* -0.0                                 -> 0x8000 */
    0x00000001u, /* float32 subnormal 2^-149             -> 0x0000 */
    0x7fc00000u, /* quiet NaN                            -> 0x7E00 */
};
static const uint16_t F16_OUT[] = {
    0x3c00, 0xc000, 0x7bff, 0x7bff, 0x7c00, 0x7c00, 0xfc00, 0x3c00, 0x3c02,
    0x3c01, 0x0001, 0x0000, 0x0001, 0x0002, 0x0400, 0x0400, 0x03ff, 0x8000,
    0x0000, 0x7e00,
};

/* bfloat16 keeps the upper 16 bits, rounded to nearest even on the lower
 * 16 (ulp of [1, 2) is 2^-7). */
static const uint32_t BF16_IN[] = {
    0x3f800000u, /* 1.0                                  -> 0x3F80 */
    0x3f808000u, /* 1 + 2^-8: midpoint, 0x3F80 even      -> 0x3F80 */
    0x3f818000u, /* 1 + 3*2^-8: midpoint, 0x3F81 odd, up -> 0x3F82 */
    0x3f808001u, /* above the midpoint                   -> 0x3F81 */
    0x40490fdbu, /* (float)pi: lower half 0x0FDB < 0x8000 -> 0x4049 */
    0x7f7fffffu, /* FLT_MAX: lower half 0xFFFF rounds up into inf
                                                         -> 0x7F80 */
    0xff800000u, /* -inf                                 -> 0xFF80 */
    0x80000000u, /* -0.0                                 -> 0x8000 */
    0xffc00001u, /* a negative NaN                       -> 0x7FC0 */
};
static const uint16_t BF16_OUT[] = {
    0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x4049, 0x7f80, 0xff80, 0x8000, 0x7fc0,
};

#define N_F16 (sizeof F16_IN / sizeof F16_IN[0])
#define N_BF16 (sizeof BF16_IN / sizeof BF16_IN[0])

static tfm_tensor *tensor_of_bits(const uint32_t *bits, int64_t n)
{
    float v[32];
    assert_true(n <= 32);
    for (int64_t i = 0; i < n; i++)
        v[i] = f32_from_bits(bits[i]);
    return make_tensor(1, &n, v);
}

static uint16_t le16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void test_write_f16_bf16(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof path, "half.safetensors");
    tfm_tensor *h = tensor_of_bits(F16_IN, (int64_t)N_F16);
    tfm_tensor *b = tensor_of_bits(BF16_IN, (int64_t)N_BF16);
    static const int64_t s2[1] = {2};
    static const float two[2] = {1.5f, -3.25f};
    tfm_tensor *f = make_tensor(1, s2, two);
    tfm_safetensors_writer *wr = NULL;
    assert_int_equal(tfm_safetensors_writer_create(&wr), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add_as(wr, "h", h, TFM_DTYPE_F16),
                     TFM_OK);
    assert_int_equal(
        tfm_safetensors_writer_add_as(wr, "b", b, TFM_DTYPE_BF16), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add_as(wr, "f", f, TFM_DTYPE_F32),
                     TFM_OK);
    /* refused dtypes change nothing */
    assert_int_equal(tfm_safetensors_writer_add_as(wr, "i", f, TFM_DTYPE_I32),
                     TFM_ERR_UNSUPPORTED);
    assert_error_mentions("I32");
    assert_int_equal(tfm_safetensors_writer_add_as(wr, "i", f, TFM_DTYPE_F64),
                     TFM_ERR_UNSUPPORTED);
    assert_int_equal(
        tfm_safetensors_writer_add_as(wr, "i", f, (tfm_dtype)TFM_DTYPE_COUNT),
        TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(
        tfm_safetensors_writer_add_as(wr, "i", f, (tfm_dtype)-1),
        TFM_ERR_INVALID_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_add_as(NULL, "i", f,
                                                   TFM_DTYPE_F16),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_add_as(wr, "h", f, TFM_DTYPE_F16),
                     TFM_ERR_INVALID_ARGUMENT); /* duplicate */
    assert_int_equal(tfm_safetensors_writer_save(wr, path), TFM_OK);
    tfm_safetensors_writer_free(wr);
    tfm_tensor_free(h);
    tfm_tensor_free(b);
    tfm_tensor_free(f);
    assert_int_equal(count_in_tmp(".tmp."), 0);

    /* The data section, in name order b (BF16), f (F32), h (F16). */
    size_t size;
    unsigned char *bytes = read_bytes(path, &size);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)bytes[i] << (8 * i);
    assert_int_equal(size, 8 + n + 2 * N_BF16 + 8 + 2 * N_F16);
    const unsigned char *data = bytes + 8 + n;
    for (size_t i = 0; i < N_BF16; i++)
        assert_int_equal(le16(data + 2 * i), BF16_OUT[i]);
    data += 2 * N_BF16 + 8;
    for (size_t i = 0; i < N_F16; i++)
        assert_int_equal(le16(data + 2 * i), F16_OUT[i]);
    assert_non_null(strstr((const char *)bytes + 8,
                           "\"h\":{\"dtype\":\"F16\",\"shape\":[20]"));
    free(bytes);

    /* Read back: the dtypes, and the narrowed values widened exactly
     * (F16 bits b: sign, exponent and mantissa shifted into float32's;
     * BF16 bits b: b << 16). */
    tfm_safetensors *file = NULL;
    assert_int_equal(tfm_safetensors_open(path, &file), TFM_OK);
    tfm_dtype dt;
    assert_int_equal(tfm_safetensors_info(file, "h", &dt, NULL, NULL),
                     TFM_OK);
    assert_int_equal(dt, TFM_DTYPE_F16);
    assert_int_equal(tfm_safetensors_info(file, "b", &dt, NULL, NULL),
                     TFM_OK);
    assert_int_equal(dt, TFM_DTYPE_BF16);
    tfm_tensor *t = NULL;
    assert_int_equal(tfm_safetensors_read(file, "b", &t), TFM_OK);
    for (size_t i = 0; i < N_BF16; i++) {
        uint32_t got = f32_bits(tfm_tensor_data(t)[i]);
        if (BF16_OUT[i] == 0x7fc0)
            assert_true(isnan(tfm_tensor_data(t)[i]));
        else
            assert_int_equal(got, (uint32_t)BF16_OUT[i] << 16);
    }
    tfm_tensor_free(t);
    assert_int_equal(tfm_safetensors_read(file, "h", &t), TFM_OK);
    const float *hv = tfm_tensor_data(t);
    assert_true(hv[0] == 1.0f && hv[1] == -2.0f && hv[2] == 65504.0f);
    assert_true(isinf(hv[4]) && hv[4] > 0 && isinf(hv[6]) && hv[6] < 0);
    assert_true(hv[8] == 1.0f + 2.0f / 1024.0f);
    assert_true(hv[10] == ldexpf(1.0f, -24) && hv[11] == 0.0f);
    assert_true(hv[13] == ldexpf(2.0f, -24) && hv[14] == ldexpf(1.0f, -14));
    assert_true(hv[17] == 0.0f && signbit(hv[17]) && isnan(hv[19]));
    tfm_tensor_free(t);
    assert_int_equal(tfm_safetensors_read(file, "f", &t), TFM_OK);
    assert_true(tfm_tensor_data(t)[0] == 1.5f &&
                tfm_tensor_data(t)[1] == -3.25f);
    tfm_tensor_free(t);
    tfm_safetensors_close(file);
    unlink(path);
}

/* ---- A hand-written file at an odd data offset ------------------------ */

/* Header length 223 (odd), so the data starts at file byte 231; in memory
 * the whole file is also placed at an odd address. */
static const char ODD_HEADER[] =
    "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,16]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
    "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[22,30]},"
    "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[30,46]}}";

/* Little-endian data for ODD_HEADER. */
static const unsigned char ODD_DATA[46] = {
    /* F16 [2,4]: 0x3C00 0xC000 0x7BFF 0x0001 0x7C00 0x03FF 0x8000 0x7E00 */
    0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00,
    0x00, 0x7c, 0xff, 0x03, 0x00, 0x80, 0x00, 0x7e,
    /* BF16 [3]: 0x3F80 0x4049 0xC120 */
    0x80, 0x3f, 0x49, 0x40, 0x20, 0xc1,
    /* F32 [2]: 0x3FC00000 0xC0490FDB */
    0x00, 0x00, 0xc0, 0x3f, 0xdb, 0x0f, 0x49, 0xc0,
    /* F64 [2]: 0x3FB999999999999A 0x7FEFFFFFFFFFFFFF */
    0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xef, 0x7f,
};

/* The float32 values, worked out by hand:
 * F16 (sign, 5-bit exponent bias 15, 10-bit mantissa):
 *   0x3C00 = 2^0 * 1.0 = 1.0                    -> 0x3F800000
 *   0xC000 = -2^1 * 1.0 = -2.0                  -> 0xC0000000
 *   0x7BFF = 2^15 * (1 + 1023/1024) = 65504     -> 0x477FE000
 *   0x0001 = 1 * 2^-24 (smallest subnormal)     -> 0x33800000
 *   0x7C00 = +inf                               -> 0x7F800000
 *   0x03FF = 1023 * 2^-24 = 6.09755516e-5       -> 0x387FC000
 *   0x8000 = -0.0                               -> 0x80000000
 *   0x7E00 = quiet NaN (mantissa 0x200)         -> 0x7FC00000
 * BF16 is the top half of a float32:
 *   0x3F80 = 1.0, 0x4049 = 3.140625, 0xC120 = -10.0
 * F32 stored as is: 0x3FC00000 = 1.5, 0xC0490FDB = -(float)pi
 * F64 rounded to nearest float32: 0.1 -> 0.1f = 0x3DCCCCCD; DBL_MAX is
 *   beyond FLT_MAX + half an ulp -> +inf = 0x7F800000 */
static void check_odd_file(const tfm_safetensors *f)
{
    static const int64_t sh[2] = {2, 4}, s3[1] = {3}, s2[1] = {2};
    static const uint32_t h[8] = {0x3F800000, 0xC0000000, 0x477FE000,
                                  0x33800000, 0x7F800000, 0x387FC000,
                                  0x80000000, 0x7FC00000};
    static const uint32_t b[3] = {0x3F800000, 0x40490000, 0xC1200000};
    static const uint32_t fl[2] = {0x3FC00000, 0xC0490FDB};
    static const uint32_t d[2] = {0x3DCCCCCD, 0x7F800000};
    assert_int_equal(f32_from_bits(h[2]), 65504.0f);
    assert_true(f32_from_bits(h[3]) == ldexpf(1.0f, -24));
    assert_true(f32_from_bits(h[5]) == 1023.0f * ldexpf(1.0f, -24));
    assert_true(f32_from_bits(b[1]) == 3.140625f);
    assert_true(f32_from_bits(d[0]) == 0.1f);
    expect_tensor(f, "h", 2, sh, h);
    expect_tensor(f, "b", 1, s3, b);
    expect_tensor(f, "f", 1, s2, fl);
    expect_tensor(f, "d", 1, s2, d);
    /* in data-offset order */
    assert_string_equal(tfm_safetensors_name(f, 0), "h");
    assert_string_equal(tfm_safetensors_name(f, 3), "d");
    tfm_dtype dt;
    assert_int_equal(tfm_safetensors_info(f, "b", &dt, NULL, NULL), TFM_OK);
    assert_int_equal(dt, TFM_DTYPE_BF16);
}

static void test_odd_offset_memory(void **state)
{
    (void)state;
    assert_int_equal(strlen(ODD_HEADER) % 2, 1);
    assert_int_not_equal((8 + strlen(ODD_HEADER)) % 8, 0);
    size_t size;
    unsigned char *buf = build_file(ODD_HEADER, ODD_DATA, sizeof ODD_DATA,
                                    &size);
    unsigned char *odd = malloc(size + 1);
    assert_non_null(odd);
    memcpy(odd + 1, buf, size); /* odd address */
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open_memory(odd + 1, size, &f), TFM_OK);
    check_odd_file(f);
    tfm_safetensors_close(f);
    free(odd);
    free(buf);
}

static void test_odd_offset_file(void **state)
{
    (void)state;
    size_t size;
    unsigned char *buf = build_file(ODD_HEADER, ODD_DATA, sizeof ODD_DATA,
                                    &size);
    char path[256];
    tmp_path(path, sizeof path, "odd.safetensors");
    write_bytes(path, buf, size);
    free(buf);
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    check_odd_file(f);
    tfm_safetensors_close(f);
    unlink(path);
}

/* ---- Cross-check with a file written by numpy ------------------------- */

/* Values of tools/make_safetensors_testdata.py (VALUES there). */
static void test_numpy_reference(void **state)
{
    (void)state;
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(TFM_TEST_DATA_DIR
                                          "/numpy_reference.safetensors", &f),
                     TFM_OK);
    assert_int_equal(tfm_safetensors_count(f), 6);
    /* stored in this order (not name order) */
    static const char *const order[6] = {"f64", "f16", "scalar", "bf16",
                                         "f32", "i32"};
    for (int i = 0; i < 6; i++)
        assert_string_equal(tfm_safetensors_name(f, i), order[i]);

    static const int64_t s3[1] = {3}, s24[2] = {2, 4}, s1[1] = {1},
                         s22[2] = {2, 2}, s23[2] = {2, 3};
    uint32_t bits[8];
    /* F64 0.1 -> 0.1f, -1e300 -> -inf, 1 + 2^-30 -> 1.0f */
    bits[0] = f32_bits(0.1f);
    bits[1] = f32_bits(-INFINITY);
    bits[2] = f32_bits(1.0f);
    expect_tensor(f, "f64", 1, s3, bits);
    /* F16 0.5, -1.25, 65504, 2^-24, 2^-14, 3*2^-24, -0.0, inf */
    const float h[8] = {0.5f, -1.25f, 65504.0f, ldexpf(1, -24),
                        ldexpf(1, -14), 3 * ldexpf(1, -24), -0.0f, INFINITY};
    for (int i = 0; i < 8; i++)
        bits[i] = f32_bits(h[i]);
    expect_tensor(f, "f16", 2, s24, bits);
    /* rank 0 reads as [1] */
    bits[0] = f32_bits(42.0f);
    expect_tensor(f, "scalar", 1, s1, bits);
    int rank = -1;
    assert_int_equal(tfm_safetensors_info(f, "scalar", NULL, &rank, NULL),
                     TFM_OK);
    assert_int_equal(rank, 0);
    /* BF16 1.0, 3.140625, -2.5, 2^-7 */
    const float b[4] = {1.0f, 3.140625f, -2.5f, 0.0078125f};
    for (int i = 0; i < 4; i++)
        bits[i] = f32_bits(b[i]);
    expect_tensor(f, "bf16", 2, s22, bits);
    const float fl[6] = {-0.5f, -0.25f, 0.0f, 0.25f, 1e-3f, 3.4028234663852886e38f};
    for (int i = 0; i < 6; i++)
        bits[i] = f32_bits(fl[i]);
    expect_tensor(f, "f32", 2, s23, bits);

    tfm_dtype dt;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    assert_int_equal(tfm_safetensors_info(f, "i32", &dt, &rank, shape),
                     TFM_OK);
    assert_int_equal(dt, TFM_DTYPE_I32);
    assert_int_equal(rank, 1);
    assert_int_equal(shape[0], 2);
    tfm_tensor *t = SENTINEL;
    assert_int_equal(tfm_safetensors_read(f, "i32", &t), TFM_ERR_UNSUPPORTED);
    assert_ptr_equal(t, SENTINEL);
    assert_error_mentions("I32");

    assert_int_equal(tfm_safetensors_metadata_count(f), 2);
    assert_string_equal(tfm_safetensors_metadata(f, "producer"), "numpy");
    assert_string_equal(tfm_safetensors_metadata(f, "text"),
                        "caf\xc3\xa9 \"quoted\"\ttab");
    tfm_safetensors_close(f);
}

/* ---- Malformed files: sizes ------------------------------------------- */

static void test_too_short(void **state)
{
    (void)state;
    static const unsigned char five[5] = {1, 0, 0, 0, 0};
    expect_open_bytes(five, sizeof five, TFM_ERR_FORMAT, "too short");
    expect_open_bytes(five, 0, TFM_ERR_FORMAT, "too short");
    /* and through a real file */
    char path[256];
    tmp_path(path, sizeof path, "short.safetensors");
    write_bytes(path, five, 3);
    tfm_safetensors *f = SENTINEL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_ERR_FORMAT);
    assert_ptr_equal(f, SENTINEL);
    assert_error_mentions("too short");
    write_bytes(path, five, 0); /* empty file: nothing to map */
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_ERR_FORMAT);
    assert_error_mentions("too short");
    unlink(path);
}

static void test_header_length_beyond_file(void **state)
{
    (void)state;
    size_t size;
    unsigned char *buf = build_file("{}", NULL, 0, &size);
    buf[0] = 3; /* claims 3 header bytes, 2 follow */
    expect_open_bytes(buf, size, TFM_ERR_FORMAT, "header length 3 exceeds");
    free(buf);
}

static void test_header_length_above_maximum(void **state)
{
    (void)state;
    size_t size;
    unsigned char *buf = build_file("{}", NULL, 0, &size);
    uint64_t n = (uint64_t)TFM_SAFETENSORS_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    expect_open_bytes(buf, size, TFM_ERR_FORMAT, "maximum");
    memset(buf, 0xff, 8); /* 2^64 - 1 */
    expect_open_bytes(buf, size, TFM_ERR_FORMAT, "maximum");
    free(buf);
}

/* ---- Malformed files: header encoding --------------------------------- */

static void test_header_not_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *bad;
        const char *why;
    } cases[] = {
        {"\xff", "invalid lead byte"},
        {"\x80", "continuation"},
        {"\xc3\x28", "continuation"},
        {"\xc0\xaf", "overlong"},       /* '/' in two bytes */
        {"\xe0\x80\xaf", "overlong"},   /* '/' in three bytes */
        {"\xf0\x82\x82\xac", "overlong"}, /* U+20AC in four bytes */
        {"\xed\xa0\x80", "surrogate"},  /* U+D800 */
        {"\xed\xbf\xbf", "surrogate"},  /* U+DFFF */
        {"\xf4\x90\x80\x80", "U+10FFFF"}, /* U+110000 */
        {"\xf7\xbf\xbf\xbf", "U+10FFFF"},
    };
    char header[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(header, sizeof header, "{\"__metadata__\":{\"k\":\"%s\"}}",
                 cases[i].bad);
        expect_format(header, 0, "not valid UTF-8");
        assert_error_mentions(cases[i].why);
    }
    expect_format("{}\xc3", 0, "truncated"); /* cut at the end */
    /* One validator with the tokenizer (src/utf8.c): a byte that is not a
     * continuation is reported before the end of the buffer, and a bad lead
     * byte gives the tokenizer's reason too. */
    expect_format("{}\xe4(", 0, "missing continuation byte");
    expect_format("{}\xff", 0, "never occurs in UTF-8");
    /* the extremes of the valid ranges are accepted */
    unsigned char *buf;
    tfm_safetensors *f = open_valid(
        "{\"__metadata__\":{\"k\":\"\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80"
        "\xef\xbf\xbf\xc2\x80\xf0\x90\x80\x80\"}}", 0, &buf);
    assert_string_equal(tfm_safetensors_metadata(f, "k"),
                        "\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80"
                        "\xef\xbf\xbf\xc2\x80\xf0\x90\x80\x80");
    tfm_safetensors_close(f);
    free(buf);
}

static void test_header_not_json(void **state)
{
    (void)state;
    expect_format("{\"a\":", 0, "not valid JSON");
    expect_format("{\"a\" 1}", 0, "not valid JSON");
    expect_format("", 0, "not valid JSON");
    expect_format("{} x", 0, "not valid JSON");
    expect_format("{}{}", 0, "not valid JSON");
    expect_format("\xef\xbb\xbf{}", 0, "byte order mark");
    size_t size;
    unsigned char *buf = build_file_n("{}\0 ", 4, NULL, 0, &size);
    expect_open_bytes(buf, size, TFM_ERR_FORMAT, "NUL");
    free(buf);
}

static void test_header_not_object(void **state)
{
    (void)state;
    expect_format("[]", 0, "not a JSON object");
    expect_format("\"tensors\"", 0, "not a JSON object");
    expect_format("42", 0, "not a JSON object");
    expect_format("null", 0, "not a JSON object");
}

/* Trailing JSON whitespace (the writer's padding) is fine. */
static void test_header_trailing_whitespace(void **state)
{
    (void)state;
    unsigned char *buf;
    tfm_safetensors *f = open_valid(
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}} \t\r\n"
        "   ", 1, &buf);
    assert_int_equal(tfm_safetensors_count(f), 1);
    tfm_safetensors_close(f);
    free(buf);
}

/* ---- Malformed files: entries ----------------------------------------- */

static void test_entry_not_object(void **state)
{
    (void)state;
    expect_format("{\"t\":[1,2]}", 0, "tensor \"t\" is not a JSON object");
    expect_format("{\"t\":\"F32\"}", 0, "tensor \"t\" is not a JSON object");
}

static void test_entry_keys(void **state)
{
    (void)state;
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                  "missing the key \"data_offsets\"");
    expect_format("{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                  "missing the key \"dtype\"");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4],\"extra\":1}}", 4,
                  "unexpected key \"extra\"");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}", 4, "duplicate key \"dtype\"");
    expect_format("{\"t\":{\"dtype\":32,\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}", 4, "dtype is not a JSON string");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":1,"
                  "\"data_offsets\":[0,4]}}", 4, "shape is not a JSON array");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":{\"a\":0}}}", 4,
                  "data_offsets is not an array of two integers");
}

static void test_shape_invalid(void **state)
{
    (void)state;
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],"
                  "\"data_offsets\":[0,4]}}", 4, "shape[0] is negative");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[2,1.5],"
                  "\"data_offsets\":[0,12]}}", 12,
                  "shape[1] is not an integer");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[\"2\"],"
                  "\"data_offsets\":[0,8]}}", 8, "shape[0] is not a number");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[9007199254740993],"
                  "\"data_offsets\":[0,4]}}", 4, "larger than 2^53");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                  "\"data_offsets\":[0,4]}}", 4, "rank 9");
    /* rank 8 is the maximum accepted */
    unsigned char *buf;
    tfm_safetensors *f = open_valid(
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,2],"
        "\"data_offsets\":[0,8]}}", 8, &buf);
    int rank;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    assert_int_equal(tfm_safetensors_info(f, "t", NULL, &rank, shape),
                     TFM_OK);
    assert_int_equal(rank, 8);
    assert_int_equal(shape[7], 2);
    tfm_tensor *t = SENTINEL;
    assert_int_equal(tfm_safetensors_read(f, "t", &t), TFM_ERR_UNSUPPORTED);
    assert_ptr_equal(t, SENTINEL);
    assert_error_mentions("rank 8");
    tfm_safetensors_close(f);
    free(buf);
}

static void test_element_count_overflow(void **state)
{
    (void)state;
    /* 2^32 * 2^32 = 2^64 elements */
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,"
                  "4294967296],\"data_offsets\":[0,4]}}", 4, "overflow");
    /* each dimension fits 2^53, the product of three does not fit int64 */
    expect_format("{\"t\":{\"dtype\":\"U8\",\"shape\":[2097152,2097152,"
                  "2097152],\"data_offsets\":[0,4]}}", 4, "overflow");
}

static void test_offsets_invalid(void **state)
{
    (void)state;
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4,8]}}", 8, "two integers");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[4]}}", 4, "two integers");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[-4,0]}}", 4, "data_offsets[0] is negative");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4.5]}}", 4,
                  "data_offsets[1] is not an integer");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,\"4\"]}}", 4,
                  "data_offsets[1] is not a number");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,1e300]}}", 4, "larger than 2^53");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[4,0]}}", 4, "end 0 < begin 4");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,8]}}", 4, "beyond the data section");
    expect_format("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],"
                  "\"data_offsets\":[0,4]}}", 4, "hold 4 bytes but 2 elements");
    expect_format("{\"t\":{\"dtype\":\"F16\",\"shape\":[3],"
                  "\"data_offsets\":[0,8]}}", 8, "need 6");
}

/* Integral values written with a fraction or exponent are integers. */
static void test_offsets_integral_forms(void **state)
{
    (void)state;
    unsigned char *buf;
    tfm_safetensors *f = open_valid(
        "{\"t\":{\"dtype\":\"F32\",\"shape\":[2.0],"
        "\"data_offsets\":[0,8e0]}}", 8, &buf);
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    assert_int_equal(tfm_safetensors_info(f, "t", NULL, NULL, shape), TFM_OK);
    assert_int_equal(shape[0], 2);
    tfm_safetensors_close(f);
    free(buf);
}

/* ---- Malformed files: layout ------------------------------------------ */

static void test_overlap(void **state)
{
    (void)state;
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                  "\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],"
                  "\"data_offsets\":[4,12]}}", 12,
                  "tensor \"b\" overlaps tensor \"a\"");
    /* the same bytes twice */
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"I32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}", 4, "overlaps");
}

static void test_gap(void **state)
{
    (void)state;
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[8,12]}}", 12,
                  "gap of 4 bytes in the data section before tensor \"b\"");
    /* the first tensor must start at 0 */
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[4,8]}}", 8,
                  "gap of 4 bytes in the data section before tensor \"a\"");
}

static void test_trailing_bytes(void **state)
{
    (void)state;
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}", 7,
                  "3 trailing bytes after the last tensor");
    expect_format("{\"__metadata__\":{}}", 1, "1 trailing bytes");
    expect_format("{}", 2, "2 trailing bytes");
}

/* A malformed file on disk, through tfm_safetensors_open. */
static void test_malformed_real_file(void **state)
{
    (void)state;
    static const unsigned char data[12] = {0};
    size_t size;
    unsigned char *buf = build_file(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
        data, sizeof data, &size);
    char path[256];
    tmp_path(path, sizeof path, "gap.safetensors");
    write_bytes(path, buf, size);
    free(buf);
    tfm_safetensors *f = SENTINEL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_ERR_FORMAT);
    assert_ptr_equal(f, SENTINEL);
    assert_error_mentions("gap");
    unlink(path);
}

/* ---- Malformed files: names and metadata ------------------------------ */

static void test_duplicate_names(void **state)
{
    (void)state;
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[4,8]}}", 8, "duplicate tensor name \"a\"");
    expect_format("{\"__metadata__\":{},\"__metadata__\":{}}", 0,
                  "duplicate name \"__metadata__\"");
    expect_format("{\"__metadata__\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"3\"}}",
                  0, "duplicate __metadata__ key \"k\"");
}

static void test_metadata_invalid(void **state)
{
    (void)state;
    expect_format("{\"__metadata__\":[\"a\"]}", 0,
                  "__metadata__ is not a JSON object");
    expect_format("{\"__metadata__\":\"a\"}", 0,
                  "__metadata__ is not a JSON object");
    expect_format("{\"__metadata__\":{\"k\":1}}", 0,
                  "__metadata__ value of key \"k\" is not a string");
    expect_format("{\"__metadata__\":{\"k\":null}}", 0, "not a string");
    expect_format("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0,
                  "not a string");
}

/* An escaped NUL (\u0000) in a tensor name, a metadata key or value, or
 * a dtype is refused, naming the member (issue 13): cJSON decodes it into
 * a NUL byte, so "w\u0000" loaded as "w" and "relu\u0000junk" as "relu".
 * Escapes that are not a NUL stay accepted. */
static void test_escaped_nul(void **state)
{
    (void)state;
    expect_format("{\"w\\u0000\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}", 4,
                  "the name or key \"w\" holds an escaped NUL");
    expect_format("{\"__metadata__\":{\"tfm.activation\":"
                  "\"relu\\u0000junk\"}}", 0,
                  "the value of \"tfm.activation\" holds an escaped NUL");
    expect_format("{\"__metadata__\":{\"a\":\"1\",\"k\\u0000x\":\"2\"}}", 0,
                  "the name or key \"k\" holds an escaped NUL");
    expect_format("{\"w\":{\"dtype\":\"F32\\u0000\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]}}", 4,
                  "the value of \"dtype\" holds an escaped NUL");
    expect_format("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                  "\"data_offsets\":[0,4]},\"__metadata__\":{\"x\":\"y\","
                  "\"z\":\"\\u0000\"}}", 4,
                  "the value of \"z\" holds an escaped NUL");
    /* Not NULs: an escaped backslash before "u0000", \u0001, \u00e9. */
    unsigned char *buf;
    tfm_safetensors *f = open_valid(
        "{\"__metadata__\":{\"a\":\"\\\\u0000\",\"b\":\"\\u0001\","
        "\"c\":\"\\u00e9\"}}", 0, &buf);
    assert_string_equal(tfm_safetensors_metadata(f, "a"), "\\u0000");
    assert_string_equal(tfm_safetensors_metadata(f, "b"), "\x01");
    assert_string_equal(tfm_safetensors_metadata(f, "c"), "\xc3\xa9");
    tfm_safetensors_close(f);
    free(buf);
}

static void test_metadata_only(void **state)
{
    (void)state;
    unsigned char *buf;
    tfm_safetensors *f = open_valid(
        "{\"__metadata__\":{\"b\":\"2\",\"a\":\"1\"}}", 0, &buf);
    assert_int_equal(tfm_safetensors_count(f), 0);
    assert_null(tfm_safetensors_name(f, 0));
    assert_int_equal(tfm_safetensors_metadata_count(f), 2);
    assert_string_equal(tfm_safetensors_metadata_key(f, 0), "a");
    assert_string_equal(tfm_safetensors_metadata(f, "b"), "2");
    tfm_tensor *t = SENTINEL;
    assert_int_equal(tfm_safetensors_read(f, "a", &t), TFM_ERR_NOT_FOUND);
    assert_ptr_equal(t, SENTINEL);
    assert_error_mentions("\"a\"");
    tfm_safetensors_close(f);
    free(buf);
    f = open_valid("{}", 0, &buf);
    assert_int_equal(tfm_safetensors_count(f), 0);
    assert_int_equal(tfm_safetensors_metadata_count(f), 0);
    tfm_safetensors_close(f);
    free(buf);
}

/* ---- dtypes ----------------------------------------------------------- */

static void test_unknown_dtype(void **state)
{
    (void)state;
    expect_refused("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],"
                   "\"data_offsets\":[0,2]}}", 2, TFM_ERR_UNSUPPORTED,
                   "tensor \"a\" has an unknown dtype \"F8_E4M3\"");
    expect_refused("{\"a\":{\"dtype\":\"f32\",\"shape\":[1],"
                   "\"data_offsets\":[0,4]}}", 4, TFM_ERR_UNSUPPORTED,
                   "unknown dtype \"f32\"");
    /* a file that is malformed as well is malformed first */
    expect_format("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],"
                  "\"data_offsets\":[0,2]}}", 3, "trailing");
}

/* Every known dtype is reported by info; only the floats are read. */
static void test_all_dtypes(void **state)
{
    (void)state;
    static const char header[] =
        "{\"f32\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"f16\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[8,12]},"
        "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
        "\"f64\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[16,32]},"
        "\"i64\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[32,48]},"
        "\"i32\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[48,56]},"
        "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[56,60]},"
        "\"i8\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[60,62]},"
        "\"u8\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[62,64]},"
        "\"bool\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[64,66]},"
        "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],"
        "\"data_offsets\":[66,66]}}";
    static const struct {
        const char *name;
        tfm_dtype dtype;
    } cases[] = {
        {"f32", TFM_DTYPE_F32}, {"f16", TFM_DTYPE_F16},
        {"bf16", TFM_DTYPE_BF16}, {"f64", TFM_DTYPE_F64},
        {"i64", TFM_DTYPE_I64}, {"i32", TFM_DTYPE_I32},
        {"i16", TFM_DTYPE_I16}, {"i8", TFM_DTYPE_I8}, {"u8", TFM_DTYPE_U8},
        {"bool", TFM_DTYPE_BOOL},
    };
    unsigned char *buf;
    tfm_safetensors *f = open_valid(header, 66, &buf);
    assert_int_equal(tfm_safetensors_count(f), 11);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tfm_dtype dt = TFM_DTYPE_COUNT;
        int rank = 0;
        int64_t shape[TFM_SAFETENSORS_MAX_RANK] = {0};
        assert_int_equal(tfm_safetensors_info(f, cases[i].name, &dt, &rank,
                                              shape), TFM_OK);
        assert_int_equal(dt, cases[i].dtype);
        assert_int_equal(rank, 1);
        assert_int_equal(shape[0], 2);
        tfm_tensor *t = SENTINEL;
        tfm_status st = tfm_safetensors_read(f, cases[i].name, &t);
        if (i < 4) { /* the float dtypes; zero bytes read as 0.0f */
            assert_int_equal(st, TFM_OK);
            assert_true(tfm_tensor_data(t)[0] == 0.0f);
            tfm_tensor_free(t);
        } else {
            assert_int_equal(st, TFM_ERR_UNSUPPORTED);
            assert_ptr_equal(t, SENTINEL);
            assert_error_mentions("only F32, F16, BF16 and F64");
        }
    }
    int rank;
    int64_t shape[TFM_SAFETENSORS_MAX_RANK];
    assert_int_equal(tfm_safetensors_info(f, "empty", NULL, &rank, shape),
                     TFM_OK);
    assert_int_equal(rank, 2);
    assert_int_equal(shape[0], 0);
    assert_int_equal(shape[1], 3);
    tfm_tensor *t = SENTINEL;
    assert_int_equal(tfm_safetensors_read(f, "empty", &t),
                     TFM_ERR_UNSUPPORTED);
    assert_ptr_equal(t, SENTINEL);
    assert_error_mentions("empty dimension");
    tfm_safetensors_close(f);
    free(buf);
}

/* ---- Arguments and I/O ------------------------------------------------ */

static void test_null_arguments(void **state)
{
    (void)state;
    unsigned char *buf;
    tfm_safetensors *f = open_valid(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        &buf);
    tfm_safetensors *g = SENTINEL;
    tfm_tensor *t = SENTINEL;
    assert_int_equal(tfm_safetensors_open(NULL, &g), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_open("x", NULL), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_open_memory(NULL, 8, &g),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_open_memory(buf, 8, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(g, SENTINEL);
    assert_int_equal(tfm_safetensors_info(NULL, "a", NULL, NULL, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_info(f, NULL, NULL, NULL, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_info(f, "a", NULL, NULL, NULL), TFM_OK);
    assert_int_equal(tfm_safetensors_info(f, "zz", NULL, NULL, NULL),
                     TFM_ERR_NOT_FOUND);
    assert_error_mentions("\"zz\"");
    assert_int_equal(tfm_safetensors_read(NULL, "a", &t),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_read(f, NULL, &t), TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_read(f, "a", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_ptr_equal(t, SENTINEL);
    assert_int_equal(tfm_safetensors_count(NULL), 0);
    assert_null(tfm_safetensors_name(NULL, 0));
    assert_null(tfm_safetensors_metadata(NULL, "k"));
    assert_null(tfm_safetensors_metadata(f, NULL));
    assert_int_equal(tfm_safetensors_metadata_count(NULL), 0);
    assert_null(tfm_safetensors_metadata_key(NULL, 0));
    tfm_safetensors_close(NULL);

    tfm_safetensors_writer *w = NULL;
    static const int64_t s[1] = {1};
    static const float v[1] = {1};
    tfm_tensor *x = make_tensor(1, s, v);
    assert_int_equal(tfm_safetensors_writer_create(NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_create(&w), TFM_OK);
    assert_int_equal(tfm_safetensors_writer_add(NULL, "a", x),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_add(w, NULL, x),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_add(w, "a", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_set_metadata(NULL, "k", "v"),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_set_metadata(w, NULL, "v"),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_set_metadata(w, "k", NULL),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_save(NULL, "x"),
                     TFM_ERR_NULL_ARGUMENT);
    assert_int_equal(tfm_safetensors_writer_save(w, NULL),
                     TFM_ERR_NULL_ARGUMENT);
    tfm_safetensors_writer_free(w);
    tfm_safetensors_writer_free(NULL);
    tfm_tensor_free(x);
    tfm_safetensors_close(f);
    free(buf);
}

static void test_io_errors(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof path, "does-not-exist.safetensors");
    tfm_safetensors *f = SENTINEL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_ERR_IO);
    assert_ptr_equal(f, SENTINEL);
    assert_error_mentions("does-not-exist.safetensors");
    assert_int_equal(tfm_safetensors_open(tmp_dir, &f), TFM_ERR_IO);
    assert_error_mentions("not a regular file");
    assert_ptr_equal(f, SENTINEL);
}

/* ---- Out of memory ---------------------------------------------------- */

/* Every allocation of open, read and the writer may fail: each failure is
 * TFM_ERR_OUT_OF_MEMORY with nothing leaked (valgrind) and *out untouched,
 * until enough allocations succeed. */
static void test_out_of_memory_reader(void **state)
{
    (void)state;
    size_t size;
    unsigned char *buf = build_file(ODD_HEADER, ODD_DATA, sizeof ODD_DATA,
                                    &size);
    char header[160];
    snprintf(header, sizeof header, "%s", "{\"__metadata__\":{\"a\":\"1\","
             "\"b\":\"2\"},\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
             "\"data_offsets\":[0,4]}}");
    size_t msize;
    unsigned char *mbuf = build_file(header, "\0\0\0\0", 4, &msize);
    int succeeded = 0;
    for (long k = 1; k < 100 && succeeded < 2; k++) {
        succeeded = 0;
        const unsigned char *bytes[2] = {buf, mbuf};
        size_t sizes[2] = {size, msize};
        for (int j = 0; j < 2; j++) {
            tfm_safetensors *f = SENTINEL;
            tfm_testing_fail_allocation(k);
            tfm_status st = tfm_safetensors_open_memory(bytes[j], sizes[j], &f);
            tfm_testing_fail_allocation(0);
            if (st == TFM_OK) {
                succeeded++;
                tfm_safetensors_close(f);
                continue;
            }
            assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
            assert_ptr_equal(f, SENTINEL);
        }
    }
    assert_int_equal(succeeded, 2);

    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open_memory(buf, size, &f), TFM_OK);
    tfm_tensor *t = SENTINEL;
    tfm_testing_fail_allocation(1);
    assert_int_equal(tfm_safetensors_read(f, "h", &t), TFM_ERR_OUT_OF_MEMORY);
    tfm_testing_fail_allocation(2);
    assert_int_equal(tfm_safetensors_read(f, "h", &t), TFM_ERR_OUT_OF_MEMORY);
    tfm_testing_fail_allocation(0);
    assert_ptr_equal(t, SENTINEL);
    tfm_safetensors_close(f);
    free(mbuf);
    free(buf);
}

/* One full writer session; returns its first failing status. */
static tfm_status writer_session(const char *path)
{
    static const int64_t s[2] = {2, 2};
    static const float v[4] = {1, 2, 3, 4};
    tfm_tensor *t = NULL;
    tfm_status st = tfm_tensor_create_copy(2, s, v, &t);
    tfm_safetensors_writer *w = NULL;
    if (st == TFM_OK)
        st = tfm_safetensors_writer_create(&w);
    static const char *const names[12] = {"k", "c", "a", "j", "b", "l",
                                          "d", "i", "e", "h", "f", "g"};
    for (int i = 0; i < 12 && st == TFM_OK; i++)
        st = tfm_safetensors_writer_add(w, names[i], t);
    for (int i = 0; i < 10 && st == TFM_OK; i++)
        st = tfm_safetensors_writer_set_metadata(w, names[i], "value");
    if (st == TFM_OK)
        st = tfm_safetensors_writer_set_metadata(w, "a", "replaced");
    if (st == TFM_OK)
        st = tfm_safetensors_writer_save(w, path);
    tfm_safetensors_writer_free(w);
    tfm_tensor_free(t);
    return st;
}

static void test_out_of_memory_writer(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof path, "oom.safetensors");
    tfm_status st = TFM_ERR_OUT_OF_MEMORY;
    long k;
    for (k = 1; k < 200 && st != TFM_OK; k++) {
        tfm_testing_fail_allocation(k);
        st = writer_session(path);
        tfm_testing_fail_allocation(0);
        if (st != TFM_OK)
            assert_int_equal(st, TFM_ERR_OUT_OF_MEMORY);
    }
    assert_int_equal(st, TFM_OK);
    assert_true(k > 20); /* many allocations were made to fail */
    assert_int_equal(count_in_tmp(".tmp."), 0);
    tfm_safetensors *f = NULL;
    assert_int_equal(tfm_safetensors_open(path, &f), TFM_OK);
    assert_int_equal(tfm_safetensors_count(f), 12);
    assert_string_equal(tfm_safetensors_name(f, 0), "a");
    assert_string_equal(tfm_safetensors_name(f, 11), "l");
    assert_string_equal(tfm_safetensors_metadata(f, "a"), "replaced");
    assert_int_equal(tfm_safetensors_metadata_count(f), 10);
    tfm_safetensors_close(f);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_write_empty),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_write_f16_bf16),
        cmocka_unit_test(test_odd_offset_memory),
        cmocka_unit_test(test_odd_offset_file),
        cmocka_unit_test(test_numpy_reference),
        cmocka_unit_test(test_too_short),
        cmocka_unit_test(test_header_length_beyond_file),
        cmocka_unit_test(test_header_length_above_maximum),
        cmocka_unit_test(test_header_not_utf8),
        cmocka_unit_test(test_header_not_json),
        cmocka_unit_test(test_header_not_object),
        cmocka_unit_test(test_header_trailing_whitespace),
        cmocka_unit_test(test_entry_not_object),
        cmocka_unit_test(test_entry_keys),
        cmocka_unit_test(test_shape_invalid),
        cmocka_unit_test(test_element_count_overflow),
        cmocka_unit_test(test_offsets_invalid),
        cmocka_unit_test(test_offsets_integral_forms),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_gap),
        cmocka_unit_test(test_trailing_bytes),
        cmocka_unit_test(test_malformed_real_file),
        cmocka_unit_test(test_duplicate_names),
        cmocka_unit_test(test_metadata_invalid),
        cmocka_unit_test(test_escaped_nul),
        cmocka_unit_test(test_metadata_only),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_all_dtypes),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_io_errors),
        cmocka_unit_test(test_out_of_memory_reader),
        cmocka_unit_test(test_out_of_memory_writer),
    };
    return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
