/* Shared by the SentencePiece suites (test_tokenizer_sentencepiece.c,
 * test_tokenizer_marian.c): tiny .model files written as protocol buffers
 * (sentencepiece's ModelProto), into the directory of
 * tokenizer_test_util.h.  Include after it. */
#ifndef TFM_TESTS_SPM_TEST_MODEL_H
#define TFM_TESTS_SPM_TEST_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- A protocol buffer writer (wire format: varint keys and values,
 * length-delimited strings and messages, little-endian fixed32). */
typedef struct buf {
    unsigned char b[65536];
    size_t n;
} buf;

static inline void put_varint(buf *o, uint64_t v)
{
    while (v >= 0x80) {
        o->b[o->n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    o->b[o->n++] = (unsigned char)v;
}

static inline void put_key(buf *o, unsigned field, unsigned wire)
{
    put_varint(o, (uint64_t)field << 3 | wire);
}

static inline void put_bytes(buf *o, unsigned field, const void *s,
                             size_t len)
{
    put_key(o, field, 2);
    put_varint(o, len);
    memcpy(o->b + o->n, s, len);
    o->n += len;
}

static inline void put_int(buf *o, unsigned field, int64_t v)
{
    put_key(o, field, 0);
    put_varint(o, (uint64_t)v);
}

static inline void put_piece(buf *o, const char *piece, float score, int type)
{
    buf p = { .n = 0 };
    put_bytes(&p, 1, piece, strlen(piece));
    put_key(&p, 2, 5);
    uint32_t bits;
    memcpy(&bits, &score, 4);
    for (int i = 0; i < 4; i++)
        p.b[p.n++] = (unsigned char)(bits >> (8 * i));
    if (type != 1)
        put_int(&p, 3, type);
    put_bytes(o, 1, p.b, p.n);
}

enum { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER = 4, BYTE = 6 };

#define SP "\xe2\x96\x81"  /* U+2581, SentencePiece's space */

static inline void write_model(const char *name, const buf *m)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(m->b, 1, m->n, f), m->n);
    fclose(f);
}

static inline tfm_tokenizer *load_model(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tfm_tokenizer *t = NULL;
    if (tfm_tokenizer_load(path, &t) != TFM_OK)
        fail_msg("load %s: %s", name, tfm_last_error());
    return t;
}

/* T5-like unigram: 0 <unk>, 1 </s> (eos; no bos), 2 ▁ (-3), 3 a (-2),
 * 4 b (-2), 5 ab (-3), 6 ▁a (-2.5), 7 ▁ab (-6); extra whitespace removed. */
static inline void unigram_model(buf *m)
{
    m->n = 0;
    put_piece(m, "<unk>", 0, UNKNOWN);
    put_piece(m, "</s>", 0, CONTROL);
    put_piece(m, SP, -3, NORMAL);
    put_piece(m, "a", -2, NORMAL);
    put_piece(m, "b", -2, NORMAL);
    put_piece(m, "ab", -3, NORMAL);
    put_piece(m, SP "a", -2.5f, NORMAL);
    put_piece(m, SP "ab", -6, NORMAL);
    buf tr = { .n = 0 };
    put_int(&tr, 3, 1);   /* UNIGRAM */
    put_int(&tr, 40, 0);  /* unk_id */
    put_int(&tr, 41, -1); /* bos_id: none (ten-byte varint) */
    put_int(&tr, 42, 1);  /* eos_id */
    put_bytes(m, 2, tr.b, tr.n);
}

#endif
