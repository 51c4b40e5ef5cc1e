/* A small GGUF v3 writer for tests (tests/test_gguf.c) and the fuzz seed
 * corpus (tests/fuzz/make_gguf_corpus.c): files built byte by byte in
 * memory from a description, so that each refusal of the reader can be
 * produced by changing one field.
 *
 * Layout written (llama.cpp docs/gguf.md, little-endian):
 *   "GGUF" u32 version u64 n_tensors u64 n_kv, the key-value pairs, the
 *   tensor entries (u64 name length, name, u32 n_dims, u64 ne[n_dims],
 *   u32 type, u64 offset), zeros up to the alignment, then each tensor's
 *   bytes at its offset (byte k of a tensor whose entry is i is
 *   (7 * k + 13 * i + 1) mod 251, so that tests can check them). */
#ifndef TFM_TEST_GGUF_BUILDER_H
#define TFM_TEST_GGUF_BUILDER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb_buf {
    unsigned char *p;
    size_t n, cap;
} gb_buf;

static void gb_bytes(gb_buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p)
            abort();
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void gb_u8(gb_buf *b, uint8_t v) { gb_bytes(b, &v, 1); }

static void gb_le(gb_buf *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        gb_u8(b, (uint8_t)(v >> (8 * i)));
}

static void gb_u32(gb_buf *b, uint32_t v) { gb_le(b, v, 4); }
static void gb_u64(gb_buf *b, uint64_t v) { gb_le(b, v, 8); }

static void gb_strn(gb_buf *b, const char *s, size_t n)
{
    gb_u64(b, n);
    gb_bytes(b, s, n);
}

static void gb_str(gb_buf *b, const char *s) { gb_strn(b, s, strlen(s)); }

/* A key and its type: the value follows. */
static void gb_key(gb_buf *b, const char *key, uint32_t type)
{
    gb_str(b, key);
    gb_u32(b, type);
}

/* One tensor entry of the description. */
typedef struct gb_tensor {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;       /* ggml type */
    int64_t offset;      /* -1: the next aligned offset */
} gb_tensor;

/* What the builder writes; zero fields take the defaults noted. */
typedef struct gb_file {
    const char *magic;        /* NULL: "GGUF" */
    uint32_t version;         /* 0: 3 */
    int64_t n_tensors;        /* -1: nt */
    int64_t n_kv;             /* -1: the count the kvs callback returns */
    /* Writes the key-value pairs into b and returns how many; NULL:
     * none but general.alignment when alignment != 0. */
    int (*kvs)(gb_buf *b, const struct gb_file *f);
    uint32_t alignment;       /* 0: no general.alignment key (32) */
    int nt;
    gb_tensor t[8];
    int no_data;              /* 1: stop after the header (no padding) */
} gb_file;

/* Bytes of a tensor of the five accepted types (0 for others): F32 4 per
 * value, F16 and BF16 2, Q8_0 34 per block of 32 (fp16 scale + 32 int8),
 * Q4_0 18 per block (fp16 scale + 16 bytes of 4-bit pairs). */
static uint64_t gb_nbytes(const gb_tensor *t)
{
    uint64_t n = 1;
    for (uint32_t d = 1; d < t->n_dims && d < 4; d++)
        n *= t->ne[d];
    switch (t->type) {
    case 0: return n * t->ne[0] * 4;
    case 1: case 30: return n * t->ne[0] * 2;
    case 8: return n * (t->ne[0] / 32) * 34;
    case 2: return n * (t->ne[0] / 32) * 18;
    default: return 0;
    }
}

static uint64_t gb_align(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Writes f into *out (a new buffer: free(out->p)). */
static void gb_build(const gb_file *f, gb_buf *out)
{
    gb_buf kv = {0};
    int n_kv = 0;
    if (f->kvs)
        n_kv = f->kvs(&kv, f);
    else if (f->alignment) {
        gb_key(&kv, "general.alignment", 4);
        gb_u32(&kv, f->alignment);
        n_kv = 1;
    }
    const uint64_t a = f->alignment ? f->alignment : 32;
    gb_buf *b = out;
    memset(b, 0, sizeof *b);
    gb_bytes(b, f->magic ? f->magic : "GGUF", 4);
    gb_u32(b, f->version ? f->version : 3);
    gb_u64(b, f->n_tensors >= 0 ? (uint64_t)f->n_tensors : (uint64_t)f->nt);
    gb_u64(b, f->n_kv >= 0 ? (uint64_t)f->n_kv : (uint64_t)n_kv);
    gb_bytes(b, kv.p, kv.n);
    free(kv.p);
    uint64_t offsets[8], next = 0;
    for (int i = 0; i < f->nt; i++) {
        const gb_tensor *t = &f->t[i];
        offsets[i] = t->offset >= 0 ? (uint64_t)t->offset : next;
        next = gb_align(offsets[i] + gb_nbytes(t), a);
        gb_str(b, t->name);
        gb_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 4; d++)
            gb_u64(b, t->ne[d]);
        gb_u32(b, t->type);
        gb_u64(b, offsets[i]);
    }
    if (f->no_data)
        return;
    const size_t start = (size_t)gb_align(b->n, a);
    while (b->n < start)
        gb_u8(b, 0);
    for (int i = 0; i < f->nt; i++) {
        const uint64_t nb = gb_nbytes(&f->t[i]);
        if (offsets[i] > ((uint64_t)1 << 24) || nb > ((uint64_t)1 << 24))
            continue; /* a test of offsets past the end: no bytes */
        while (b->n < start + offsets[i] + nb)
            gb_u8(b, 0);
        for (uint64_t k = 0; k < nb; k++)
            b->p[start + offsets[i] + k] = (unsigned char)((7 * k + 13 * (uint64_t)i + 1) % 251);
    }
}

#endif
