/* SentencePiece model files (sentencepiece.h): the protocol buffer wire
 * format (https://protobuf.dev/programming-guides/encoding/: a field is a
 * varint key = number << 3 | wire type, then a varint (type 0), 8 bytes
 * (1), a varint length and that many bytes (2) or 4 bytes (5)), read for
 * the fields of sentencepiece_model.proto this library uses; the others
 * are skipped, as a protobuf parser skips unknown fields.
 *
 * Debian's libsentencepiece-dev ships no sentencepiece_model.pb.h, so the
 * normalizer's fields (add_dummy_prefix, the precompiled charsmap) cannot
 * be read through the library; this reader is the one place that knows
 * the format. */
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/utf8.h"
#include "tokenizers/sentencepiece/sentencepiece.h"

typedef struct pb {
    const unsigned char *p, *end;
    const unsigned char *base;  /* the file's first byte, for messages */
} pb;

typedef struct pb_field {
    uint32_t number;
    int wire;
    uint64_t value;             /* types 0, 1, 5 */
    const unsigned char *data;  /* type 2 */
    size_t len;
    size_t at;                  /* offset of the key in the file */
} pb_field;

static int pb_varint(pb *b, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return 0;
        unsigned c = *b->p++;
        r |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return 1;
        }
    }
    return 0;
}

/* The next field: 1, 0 at the end, or a TFM_ERR_FORMAT failure (< 0). */
static int pb_next(pb *b, const char *path, pb_field *f)
{
    if (b->p >= b->end)
        return 0;
    f->at = (size_t)(b->p - b->base);
    uint64_t key;
    if (!pb_varint(b, &key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
        tfm__fail(TFM_ERR_FORMAT, "%.200s: malformed protobuf field key at "
                  "byte %zu (truncated or not a SentencePiece model)",
                  path, f->at);
        return -1;
    }
    f->number = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    switch (f->wire) {
    case 0:
        if (pb_varint(b, &f->value))
            return 1;
        break;
    case 1:
    case 5: {
        size_t n = f->wire == 1 ? 8 : 4;
        if ((size_t)(b->end - b->p) < n)
            break;
        f->value = 0;
        for (size_t i = 0; i < n; i++)
            f->value |= (uint64_t)b->p[i] << (8 * i);
        b->p += n;
        return 1;
    }
    case 2: {
        uint64_t n;
        if (!pb_varint(b, &n) || n > (uint64_t)(b->end - b->p))
            break;
        f->data = b->p;
        f->len = (size_t)n;
        b->p += n;
        return 1;
    }
    default:
        tfm__fail(TFM_ERR_FORMAT, "%.200s: protobuf field %u at byte %zu has "
                  "wire type %d, which a SentencePiece model does not use",
                  path, f->number, f->at, f->wire);
        return -1;
    }
    tfm__fail(TFM_ERR_FORMAT, "%.200s: protobuf field %u at byte %zu is "
              "truncated", path, f->number, f->at);
    return -1;
}

static pb pb_sub(const pb *parent, const pb_field *f)
{
    pb s = { f->data, f->data + f->len, parent->base };
    return s;
}

static tfm_status wrong_type(const char *path, const pb_field *f,
                             const char *what)
{
    return tfm__fail(TFM_ERR_FORMAT, "%.200s: %s (field %u at byte %zu) has "
                     "wire type %d", path, what, f->number, f->at, f->wire);
}

static tfm_status copy_bytes(const pb_field *f, char **out, size_t *len)
{
    char *c = tfm__malloc(f->len + 1);
    if (!c)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    if (f->len)
        memcpy(c, f->data, f->len);
    c[f->len] = '\0';
    tfm__free(*out);
    *out = c;
    *len = f->len;
    return TFM_OK;
}

/* A SentencePiece message: piece (1), score (2), type (3). */
static tfm_status read_piece(const pb *top, const pb_field *pf,
                             const char *path, tfm__spm_file *m, int64_t id)
{
    pb b = pb_sub(top, pf);
    pb_field f;
    int r;
    const unsigned char *piece = NULL;
    size_t piece_len = 0;
    float score = 0.0f;
    uint64_t type = TFM__SPM_NORMAL;
    while ((r = pb_next(&b, path, &f)) > 0) {
        if (f.number == 1) {
            if (f.wire != 2)
                return wrong_type(path, &f, "a piece's string");
            piece = f.data;
            piece_len = f.len;
        } else if (f.number == 2) {
            if (f.wire != 5)
                return wrong_type(path, &f, "a piece's score");
            uint32_t bits = (uint32_t)f.value;
            memcpy(&score, &bits, sizeof score);
        } else if (f.number == 3) {
            if (f.wire != 0)
                return wrong_type(path, &f, "a piece's type");
            type = f.value;
        }
    }
    if (r < 0)
        return TFM_ERR_FORMAT;
    if (!piece || piece_len == 0)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: piece %lld is empty (byte "
                         "%zu)", path, (long long)id, pf->at);
    if (type < TFM__SPM_NORMAL || type > TFM__SPM_BYTE)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: piece %lld (\"%.60s\") has "
                         "type %llu, not one of 1 .. 6", path, (long long)id,
                         (const char *)piece, (unsigned long long)type);
    if (memchr(piece, '\0', piece_len))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: piece %lld holds a NUL "
                         "byte", path, (long long)id);
    size_t bad = 0;
    const char *why = tfm__utf8_check(piece, piece_len, &bad);
    if (why)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: piece %lld is not valid "
                         "UTF-8 at byte %zu (%s)", path, (long long)id,
                         (size_t)(piece - b.base) + bad, why);
    m->scores[id] = score;
    m->types[id] = (uint8_t)type;
    return tfm__vocab_set(&m->vocab, id, (const char *)piece, piece_len,
                          path);
}

static tfm_status read_trainer(const pb *top, const pb_field *tf,
                               const char *path, tfm__spm_file *m)
{
    pb b = pb_sub(top, tf);
    pb_field f;
    int r;
    while ((r = pb_next(&b, path, &f)) > 0) {
        int32_t *id = NULL;
        switch (f.number) {
        case 3: case 24: case 35: case 40: case 41: case 42: case 43:
            if (f.wire != 0)
                return wrong_type(path, &f, "a trainer_spec number");
            break;
        case 44:
            if (f.wire != 2)
                return wrong_type(path, &f, "trainer_spec.unk_surface");
            break;
        default:
            continue;
        }
        switch (f.number) {
        case 3: m->model_type = f.value > 100 ? 100 : (int)f.value; break;
        case 24: m->treat_whitespace_as_suffix = f.value != 0; break;
        case 35: m->byte_fallback = f.value != 0; break;
        case 40: id = &m->unk_id; break;
        case 41: id = &m->bos_id; break;
        case 42: id = &m->eos_id; break;
        case 43: id = &m->pad_id; break;
        case 44: {
            tfm_status st = copy_bytes(&f, &m->unk_surface,
                                       &m->unk_surface_len);
            if (st != TFM_OK)
                return st;
            break;
        }
        }
        if (id)  /* int32: a negative value is ten bytes of two's complement */
            *id = (int32_t)(uint32_t)f.value;
    }
    return r < 0 ? TFM_ERR_FORMAT : TFM_OK;
}

static tfm_status read_normalizer(const pb *top, const pb_field *nf,
                                  const char *path, tfm__spm_file *m,
                                  int denormalizer)
{
    pb b = pb_sub(top, nf);
    pb_field f;
    int r;
    while ((r = pb_next(&b, path, &f)) > 0) {
        if (f.number == 2) {
            if (f.wire != 2)
                return wrong_type(path, &f, "precompiled_charsmap");
            if (denormalizer) {
                m->has_denormalizer = f.len > 0;
                continue;
            }
            if (f.len == 0) {
                tfm__free(m->charsmap);
                m->charsmap = NULL;
                m->charsmap_len = 0;
                continue;
            }
            tfm_status st = copy_bytes(&f, &m->charsmap, &m->charsmap_len);
            if (st != TFM_OK)
                return st;
        } else if (f.number >= 3 && f.number <= 5 && !denormalizer) {
            if (f.wire != 0)
                return wrong_type(path, &f, "a normalizer_spec flag");
            int v = f.value != 0;
            if (f.number == 3)
                m->add_dummy_prefix = v;
            else if (f.number == 4)
                m->remove_extra_whitespaces = v;
            else
                m->escape_whitespaces = v;
        }
    }
    return r < 0 ? TFM_ERR_FORMAT : TFM_OK;
}

tfm_status tfm__spm_file_read(const unsigned char *data, size_t len,
                              const char *path, tfm__spm_file *out)
{
    tfm__spm_file m;
    memset(&m, 0, sizeof m);
    m.model_type = TFM__SPM_UNIGRAM;
    m.unk_id = 0;
    m.bos_id = 1;
    m.eos_id = 2;
    m.pad_id = -1;
    m.add_dummy_prefix = m.remove_extra_whitespaces = m.escape_whitespaces = 1;

    /* First pass: the wire format, and how many pieces. */
    pb b = { data, data + len, data };
    pb_field f;
    int r;
    int64_t n = 0;
    while ((r = pb_next(&b, path, &f)) > 0) {
        if (f.number >= 1 && f.number <= 5 && f.wire != 2)
            return wrong_type(path, &f, "a ModelProto field");
        n += f.number == 1;
    }
    if (r < 0)
        return TFM_ERR_FORMAT;
    if (n == 0)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: no pieces (empty, or not a "
                         "SentencePiece model)", path);
    if (n > INT32_MAX)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: too many pieces", path);
    tfm_status st = tfm__vocab_init(&m.vocab, n);
    if (st == TFM_OK) {
        m.scores = tfm__calloc((size_t)n, sizeof *m.scores);
        m.types = tfm__calloc((size_t)n, 1);
        if (!m.scores || !m.types)
            st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    /* Second pass: the fields.  A message given twice is merged, as a
     * protobuf parser does. */
    b.p = data;
    int64_t id = 0;
    while (st == TFM_OK && pb_next(&b, path, &f) > 0) {
        if (f.number == 1)
            st = read_piece(&b, &f, path, &m, id++);
        else if (f.number == 2)
            st = read_trainer(&b, &f, path, &m);
        else if (f.number == 3)
            st = read_normalizer(&b, &f, path, &m, 0);
        else if (f.number == 5)
            st = read_normalizer(&b, &f, path, &m, 1);
    }
    if (st != TFM_OK) {
        tfm__spm_file_free(&m);
        return st;
    }
    *out = m;
    return TFM_OK;
}

void tfm__spm_file_free(tfm__spm_file *f)
{
    tfm__vocab_free(&f->vocab);
    tfm__free(f->scores);
    tfm__free(f->types);
    tfm__free(f->unk_surface);
    tfm__free(f->charsmap);
    memset(f, 0, sizeof *f);
}
