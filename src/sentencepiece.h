/* Internal: a SentencePiece model file (.model / .spm) as read by
 * sentencepiece_model.c, and the SentencePiece tokenizer built on it
 * (tokenizer_sentencepiece.c).
 *
 * The file is the protocol buffer ModelProto of sentencepiece's
 * src/sentencepiece_model.proto (proto2): pieces (field 1: piece 1, score 2,
 * type 3), trainer_spec (field 2), normalizer_spec (field 3),
 * denormalizer_spec (field 5).  Absent fields take the .proto's defaults. */
#ifndef TFM_SRC_SENTENCEPIECE_H
#define TFM_SRC_SENTENCEPIECE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer_impl.h"
#include "vocab.h"

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

/* Loads a SentencePiece model file as a tokenizer (tfm_tokenizer_load).
 * Errors: TFM_ERR_IO, TFM_ERR_FORMAT, TFM_ERR_UNSUPPORTED (a WORD or CHAR
 * model, a denormalizer), TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__spm_load(const char *path, tfm_tokenizer **out);

#endif
