/* Internal: a SentencePiece model file (.model / .spm) as read by
 * sentencepiece_model.c, and the SentencePiece tokenizer built on it
 * (tokenizer_sentencepiece.c and the parts it runs, which share
 * sentencepiece_impl.h).
 *
 * The file is the protocol buffer ModelProto of sentencepiece's
 * src/sentencepiece_model.proto (proto2): pieces (field 1: piece 1, score 2,
 * type 3), trainer_spec (field 2), normalizer_spec (field 3),
 * denormalizer_spec (field 5).  Absent fields take the .proto's defaults. */
#ifndef TFM_SRC_SENTENCEPIECE_H
#define TFM_SRC_SENTENCEPIECE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizers/bpe_merges.h"
#include "tokenizers/tokenizer_impl.h"
#include "tokenizers/vocab.h"

/* ModelProto.SentencePiece.Type */
enum {
    TFM__SPM_NORMAL = 1, TFM__SPM_UNKNOWN = 2, TFM__SPM_CONTROL = 3,
    TFM__SPM_USER_DEFINED = 4, TFM__SPM_UNUSED = 5, TFM__SPM_BYTE = 6,
};

/* TrainerSpec.ModelType */
enum { TFM__SPM_UNIGRAM = 1, TFM__SPM_BPE = 2, TFM__SPM_WORD = 3,
       TFM__SPM_CHAR = 4 };

typedef struct tfm__spm_file {
    tfm__vocab vocab;       /* the pieces, id = position in the file */
    float *scores;          /* [vocab.size] */
    uint8_t *types;         /* [vocab.size], TFM__SPM_NORMAL ... */
    /* trainer_spec */
    int model_type;         /* TFM__SPM_UNIGRAM (default) ... */
    int byte_fallback;
    int treat_whitespace_as_suffix;
    int32_t unk_id, bos_id, eos_id, pad_id;  /* defaults 0, 1, 2, -1 */
    char *unk_surface;      /* NULL: the default " \u2047 " */
    size_t unk_surface_len;
    /* normalizer_spec */
    int add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces;
    char *charsmap;         /* precompiled_charsmap, NULL when empty */
    size_t charsmap_len;
    int has_denormalizer;   /* denormalizer_spec with a charsmap */
} tfm__spm_file;

/* Reads the ModelProto in data[0 .. len-1]; path names the file in
 * messages.  Checks the wire format (truncated or malformed fields), the
 * piece types (1 .. 6), empty pieces and a piece given twice.
 * Errors: TFM_ERR_FORMAT (the message gives the byte offset or the piece),
 * TFM_ERR_OUT_OF_MEMORY.  On failure *out is left zeroed. */
tfm_status tfm__spm_file_read(const unsigned char *data, size_t len,
                              const char *path, tfm__spm_file *out);

/* Releases everything; leaves *f zeroed.  Safe on a zeroed file. */
void tfm__spm_file_free(tfm__spm_file *f);

/* Where the space before the text comes from (the normalizer's dummy
 * prefix). */
enum {
    TFM__SPM_PREPEND_DUMMY = 0,   /* sentencepiece's add_dummy_prefix (and
                                     Hugging Face's Prepend normalizer) */
    TFM__SPM_PREPEND_METASPACE,   /* Hugging Face's Metaspace, prepend_scheme
                                     "always": unless the text already
                                     starts with a space or U+2581 */
    TFM__SPM_PREPEND_FIRST,       /* the same, "first": only in the text
                                     before any special token */
};

/* How ids decode. */
enum {
    TFM__SPM_DECODE_SENTENCEPIECE = 0,  /* sentencepiece's Decode */
    TFM__SPM_DECODE_STRIP,       /* Hugging Face's Replace("▁", " ")
                                    [, ByteFallback, Fuse][, Strip(" ", n)] */
    TFM__SPM_DECODE_METASPACE,   /* Hugging Face's Metaspace decoder */
};

/* How a model read from a tokenizer.json (sentencepiece_json.c) departs
 * from the rules of the .model it was converted from. */
typedef struct tfm__spm_rules {
    tfm__merges merges;  /* BPE: Hugging Face's ranked pairs decide the
                            merges; n_slots 0: the piece scores do
                            (sentencepiece) */
    int prepend;         /* TFM__SPM_PREPEND_*, with add_dummy_prefix */
    int fuse_unk;        /* a run of unknown pieces is one unknown token */
    int framing;         /* TFM__FRAME_*: TFM_ENCODE_ADD_SPECIAL's framing */
    int split_words;     /* Hugging Face's WhitespaceSplit: every Unicode
                            whitespace character is a space, and the model
                            runs on each word alone */
    int decoder;         /* TFM__SPM_DECODE_* */
    int decoder_strip;   /* STRIP: leading spaces removed; METASPACE: the
                            first token's "▁" dropped (0/1) */
} tfm__spm_rules;

/* The tokenizer of the model *f under rules *r; takes what f and r own
 * (leaving them zeroed), on success and on failure.  Checks the pieces as
 * the .model reader's ModelInterface::InitializePieces (one unknown piece,
 * byte pieces only with byte_fallback and then all 256 of them, spelled
 * <0xNN>; a well-formed charsmap); control and unknown pieces become the
 * special tokens, f's bos/eos/pad/unk ids their roles.  Errors:
 * TFM_ERR_FORMAT, TFM_ERR_UNSUPPORTED (WORD or CHAR models, a
 * denormalizer), TFM_ERR_OUT_OF_MEMORY; path names the file in messages. */
tfm_status tfm__spm_tokenizer_new(tfm__spm_file *f, tfm__spm_rules *r,
                                  const char *path, tfm_tokenizer **out);

/* Loads the "model" of a tokenizer.json that Hugging Face's converters
 * made from a SentencePiece model (tokenizer_json.c dispatches here):
 * "BPE" with Llama's pipelines, "Unigram" with T5's; sentencepiece_json.c
 * lists what is accepted.  Errors: TFM_ERR_FORMAT, TFM_ERR_UNSUPPORTED (a
 * pipeline step this reader does not run), TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_from_json(const cJSON *root, const char *path,
                              tfm_tokenizer **out);

/* Loads a SentencePiece model file as a tokenizer (tfm_tokenizer_load).
 * Errors: TFM_ERR_IO, TFM_ERR_FORMAT, TFM_ERR_UNSUPPORTED (a WORD or CHAR
 * model, a denormalizer), TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_load(const char *path, tfm_tokenizer **out);

/* Receives one token of tfm__spm_encode_pieces: its id, its piece as
 * sentencepiece's encode(out_type=str) gives it (a known piece's own
 * string, the normalized text of a run of unknown characters, "<0xNN>"
 * for a byte-fallback byte), not NUL-terminated, and the bytes
 * [begin, end) of the text it covers. */
typedef tfm_status (*tfm__spm_emit)(void *ctx, int32_t id, const char *piece,
                                    size_t len, int64_t begin, int64_t end);

/* Segments text[0 .. len-1] (which holds no special token) with the
 * SentencePiece model of t, which tfm__spm_load read, calling emit for
 * each token in order; offsets are shifted by base.  Stops at emit's first
 * error and returns it.  Errors: TFM_ERR_INVALID_ARGUMENT (t is another
 * kind, or the text is too long), TFM_ERR_OUT_OF_MEMORY, emit's. */
tfm_status tfm__spm_encode_pieces(const tfm_tokenizer *t, const char *text,
                                  size_t len, int64_t base,
                                  tfm__spm_emit emit, void *ctx);

/* Appends to out what sentencepiece's DecodePieces makes of pieces[0 ..
 * n-1] (lens[i] bytes each) with the model of t, which tfm__spm_load read:
 * each piece's id is PieceToId's (the unknown id when the model lacks
 * it); a piece the model lacks is written as it is (U+2581 kept), <unk>
 * as the unknown surface, control pieces as nothing, the rest as
 * tfm_tokenizer_decode would.  Errors: TFM_ERR_INVALID_ARGUMENT (t is
 * another kind), TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_decode_pieces(const tfm_tokenizer *t,
                                  const char *const *pieces,
                                  const uint32_t *lens, int64_t n,
                                  tfm__bytes *out);

#endif
