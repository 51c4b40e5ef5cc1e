/*
 * libtransformer: tokenizers.
 *
 * One handle type, tfm_tokenizer, for every kind:
 *
 *  - character-level (since 1.0): each token is one Unicode code point; the
 *    vocabulary is the string of those code points in id order (UTF-8), as
 *    stored in a model file's "tfm.vocab" metadata with "tfm.tokenizer":
 *    "char".
 *  - byte-level BPE as GPT-2's (since 1.2): OpenAI's encoder.json +
 *    vocab.bpe, or Hugging Face's vocab.json + merges.txt, or a
 *    tokenizer.json whose model is "BPE" with the "ByteLevel"
 *    pre-tokenizer.  The text is split by GPT-2's pattern
 *    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *    (PCRE2, Unicode properties), each piece's bytes are mapped to
 *    characters by GPT-2's bytes_to_unicode table, and pairs are merged
 *    lowest rank first, every occurrence of the pair left to right, as
 *    OpenAI's encoder.py (Radford et al. 2019, "Language Models are
 *    Unsupervised Multitask Learners", section 2.2).  Any byte string is
 *    accepted and decode(encode(s)) == s: invalid UTF-8 cuts the text, the
 *    pattern runs on each valid stretch, and each run of invalid bytes is
 *    one piece of its own (so "a\xff b" gives the pieces "a", "\xff",
 *    " b").  Whitespace is PCRE2's Unicode \s, as Python's regex module
 *    (OpenAI's encoder): U+0085 and U+180E are whitespace, U+FEFF is not.
 *  - WordPiece as BERT's (since 1.2): vocab.txt (one token per line, id =
 *    line - 1; tokenizer_config.json beside it may set do_lower_case,
 *    strip_accents, tokenize_chinese_chars), or a tokenizer.json whose
 *    model is "WordPiece" with BertNormalizer and BertPreTokenizer.  BERT's
 *    basic tokenizer (Devlin et al. 2019; Unicode data from utf8proc):
 *    control characters dropped, whitespace to spaces, CJK ideographs
 *    split, accents stripped (NFD, Mn dropped) and lower case when
 *    uncased, punctuation split; then greedy longest-match-first with "##"
 *    continuations, [UNK] for a word over 100 characters or with no match.
 *    Bytes that are not UTF-8 are dropped, as BERT's convert_to_unicode.
 *    [CLS], [SEP], [PAD], [MASK], [UNK] are special; TFM_ENCODE_ADD_SPECIAL
 *    frames [CLS] A [SEP] (B [SEP]).
 *  - SentencePiece (since 1.2): a .model / .spm file (sentencepiece's
 *    ModelProto), BPE as Llama's or unigram as T5's and Marian's, with the
 *    ids of sentencepiece 0.1.97 (Kudo and Richardson 2018).  The text is
 *    normalized by the model's own precompiled charsmap and flags (extra
 *    whitespace removed, a dummy-prefix space, spaces written U+2581);
 *    BPE merges the adjacent pair whose piece scores highest (leftmost
 *    first); unigram takes the segmentation of highest total score
 *    (Viterbi; an unknown character scores min - 10).  Unknown pieces
 *    become <0xNN> byte tokens with byte fallback, else one unknown token
 *    per run; a malformed UTF-8 byte is U+FFFD.  Control pieces and <unk>
 *    are special; TFM_ENCODE_ADD_SPECIAL frames <s> A (BPE, as Llama) or
 *    A </s> (unigram, as T5).  Also (since 1.2) a tokenizer.json as
 *    Hugging Face's converters write these models: "BPE" with
 *    byte_fallback and Llama's pipelines (Prepend + Replace, or Metaspace
 *    with prepend_scheme "first"/"always" and split false), "Unigram" with
 *    T5's (the Precompiled charsmap, WhitespaceSplit + Metaspace); there
 *    BPE merges the listed pair of lowest rank (Hugging Face's rule), the
 *    added tokens (which must be special) are the control pieces, the
 *    template "<s> $A" or "$A </s>" the framing, WhitespaceSplit runs
 *    the model per word, and decoding follows the file's decoder (special
 *    tokens skipped, <unk> as "<unk>").
 *  - Marian's (Hugging Face's MarianTokenizer, Helsinki-NLP's opus-mt
 *    checkpoints; since 1.2): a directory with source.spm, target.spm and
 *    vocab.json (+ tokenizer_config.json).  A leading ">>xx<<" language
 *    code is a token of its own; the rest is cut into pieces by
 *    source.spm (SentencePiece, as above) and each piece's id is
 *    vocab.json's (the unk token's when it has none).
 *    TFM_ENCODE_ADD_SPECIAL appends </s> (A </s>, a pair A B </s>).
 *    Decoding turns ids into vocab.json's pieces and those into text as
 *    target.spm's decode_pieces, a special token not skipped written as
 *    itself and a space, the ends stripped.  The special tokens are the
 *    eos, unk and pad tokens (tokenizer_config.json's eos_token,
 *    unk_token, pad_token; "</s>", "<unk>", "<pad>" by default).
 * docs/TOKENIZERS.md has the details of each.
 *
 * Since 1.2 every kind also gives offsets (the bytes [begin, end) of the
 * text each token covers), special tokens by role and by name, pairs with
 * token type ids, and token strings (tfm_tokenizer_encode_v2 and below).
 */
#ifndef TRANSFORMER_TOKENIZER_H
#define TRANSFORMER_TOKENIZER_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tfm_tokenizer tfm_tokenizer;

/* Builds a tokenizer from the vocabulary string (valid UTF-8, no code point
 * twice).  Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (empty,
 * invalid UTF-8, duplicate), TFM_ERR_OUT_OF_MEMORY. */
TFM_API tfm_status tfm_tokenizer_create(const char *vocab,
                                        tfm_tokenizer **out);

/* Loads a tokenizer.  path is one of:
 *  - a model file (safetensors): "tfm.tokenizer" and "tfm.vocab" from its
 *    metadata (character-level);
 *  - (since 1.2) a tokenizer.json (Hugging Face tokenizers' format);
 *  - (since 1.2) encoder.json or vocab.json: GPT-2's vocabulary, its merges
 *    read from vocab.bpe or merges.txt in the same directory;
 *  - (since 1.2) vocab.txt or another *.txt: BERT's WordPiece vocabulary,
 *    with tokenizer_config.json beside it when there is one;
 *  - (since 1.2) *.model or *.spm: a SentencePiece model;
 *  - (since 1.2) a checkpoint directory: the first of tokenizer.json,
 *    Marian's vocab.json + source.spm + target.spm (with
 *    tokenizer_config.json when there is one), tokenizer.model,
 *    spiece.model, sentencepiece.bpe.model, encoder.json + vocab.bpe,
 *    vocab.json + merges.txt, vocab.txt found there (a tokenizer.json
 *    this library does not support, beside a SentencePiece model or
 *    Marian's files, gives way to them); a vocab.json path with
 *    source.spm and target.spm beside it is Marian's too.  A directory
 *    with source.spm but not Marian's other files is refused
 *    (TFM_ERR_FORMAT, naming the missing file), as MarianTokenizer
 *    refuses it: the model's ids are not source.spm's;
 *  - (since 1.3) a GGUF v3 file (any name; its first bytes "GGUF"): its
 *    tokenizer.ggml.* keys, model "gpt2" (byte-level BPE; pre-tokenizer
 *    GPT-2's, "gpt-2") or "llama" (SentencePiece BPE by scores); control
 *    and user-defined tokens special, the roles from its *_token_id keys,
 *    add_bos_token framing with bos (docs/USAGE.md, "GGUF files").
 * With GPT-2's files, <|endoftext|> (when in the vocabulary) is special and
 * is the bos, eos and unk token, as in Hugging Face's GPT2Tokenizer.  In a
 * tokenizer.json, the "added_tokens" are special (a SentencePiece model's
 * must all be marked special: TFM_ERR_UNSUPPORTED otherwise).
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_IO, TFM_ERR_FORMAT (malformed file
 * or missing/unsupported tokenizer metadata; truncated JSON, a merge naming
 * a token the vocabulary lacks, an id given twice, a token given twice, ids
 * with gaps, a byte without its token, a Marian vocab.json without its
 * eos or unk token: the message says which),
 * TFM_ERR_UNSUPPORTED (a tokenizer.json using a normalizer, pre-tokenizer
 * or model this library does not implement; a SentencePiece WORD or CHAR
 * model; Marian's separate_vocabs with target_vocab.json; a GGUF
 * tokenizer model or pre-tokenizer other than those above, named),
 * TFM_ERR_OUT_OF_MEMORY, and
 * those of tfm_tokenizer_create. */
TFM_API tfm_status tfm_tokenizer_load(const char *path, tfm_tokenizer **out);

/* Frees the tokenizer.  NULL is a no-op.  A generator whose stop strings
 * it decodes (model.h: tfm_generate_options.tokenizer) keeps its memory
 * until that generator is freed, and refuses to go on (module.h:
 * tfm_module_free has the rule). */
TFM_API void tfm_tokenizer_free(tfm_tokenizer *tokenizer);

/* Number of tokens (0 for NULL). */
TFM_API int64_t tfm_tokenizer_vocab_size(const tfm_tokenizer *tokenizer);

/* Encodes UTF-8 text (text_len bytes) into ids.  *n_ids receives the
 * number of tokens; when capacity is too small (or ids is NULL) nothing
 * is written, *n_ids still says how many are needed and the call returns
 * TFM_ERR_CAPACITY.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_INVALID_ARGUMENT (invalid UTF-8, or a character not in the
 * vocabulary: the message names it and its byte offset), TFM_ERR_CAPACITY. */
TFM_API tfm_status tfm_tokenizer_encode(const tfm_tokenizer *tokenizer,
                                        const char *text, size_t text_len,
                                        int32_t *ids, int64_t capacity,
                                        int64_t *n_ids);

/* Decodes ids into UTF-8 text, NUL-terminated.  *text_len receives the byte
 * length without the NUL; when capacity (bytes, including the NUL) is too
 * small nothing is written and TFM_ERR_CAPACITY says so, with *text_len set
 * to the length needed.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_INVALID_ARGUMENT (an id out of range), TFM_ERR_CAPACITY. */
TFM_API tfm_status tfm_tokenizer_decode(const tfm_tokenizer *tokenizer,
                                        const int32_t *ids, int64_t n_ids,
                                        char *text, size_t capacity,
                                        size_t *text_len);

/* ---- Since 1.2 --------------------------------------------------------- */

/* The kinds of tokenizer.  Append-only. */
typedef enum tfm_tokenizer_kind {
    TFM_TOKENIZER_CHAR = 0,       /* one token per code point */
    TFM_TOKENIZER_BYTE_BPE = 1,   /* GPT-2's byte-level BPE */
    TFM_TOKENIZER_WORDPIECE = 2,  /* BERT's WordPiece */
    TFM_TOKENIZER_SENTENCEPIECE = 3, /* SentencePiece BPE or unigram */
    TFM_TOKENIZER_MARIAN = 4,     /* Marian's: SentencePiece pieces, ids
                                     from vocab.json (since 1.2) */
    TFM_TOKENIZER_KIND_COUNT      /* grows; never store it */
} tfm_tokenizer_kind;

/* The tokenizer's kind (TFM_TOKENIZER_CHAR for NULL).  Since 1.2. */
TFM_API tfm_tokenizer_kind tfm_tokenizer_get_kind(const tfm_tokenizer *t);

/* Flags of tfm_tokenizer_encode_v2. */
#define TFM_ENCODE_ADD_SPECIAL   0x1u /* frame the text as the model's
                                         post-processor does (BERT: [CLS] A
                                         [SEP] B [SEP]; GPT-2: nothing) */
#define TFM_ENCODE_SPLIT_SPECIAL 0x2u /* a special token written in the text
                                         ("<|endoftext|>") becomes its id, as
                                         Hugging Face tokenizers does; without
                                         it the text is only text, as
                                         tiktoken's encode_ordinary */

/* Encodes text (text_len bytes) and, when pair is not NULL, the second
 * text pair (pair_len bytes) after it.  Writes the n tokens' ids[n]; when
 * not NULL, type_ids[n] (0 for the first text and its framing, 1 for the
 * pair's) and offsets[n][2] (bytes [begin, end) each token covers, in the
 * text its type id names; [0, 0) for a token the framing added).  The
 * capacity counts tokens.  When it is too small (or ids is NULL) nothing is
 * written, *n_ids says how many are needed and the call returns
 * TFM_ERR_CAPACITY.  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_INVALID_ARGUMENT (a negative capacity, unknown flags, text a
 * character-level tokenizer cannot encode), TFM_ERR_CAPACITY,
 * TFM_ERR_OUT_OF_MEMORY.  Thread-safe on a shared tokenizer.  Since 1.2. */
TFM_API tfm_status tfm_tokenizer_encode_v2(const tfm_tokenizer *tokenizer,
                                           const char *text, size_t text_len,
                                           const char *pair, size_t pair_len,
                                           unsigned flags, int32_t *ids,
                                           int32_t *type_ids,
                                           int64_t *offsets,
                                           int64_t capacity, int64_t *n_ids);

/* Flags of tfm_tokenizer_decode_v2. */
#define TFM_DECODE_SKIP_SPECIAL 0x1u /* leave the special tokens out */

/* As tfm_tokenizer_decode, with flags.  For byte-level BPE the text is the
 * tokens' bytes, which are valid UTF-8 only when the ids are (a cut in the
 * middle of a character is kept as its bytes).  Errors: those of
 * tfm_tokenizer_decode, TFM_ERR_INVALID_ARGUMENT for unknown flags,
 * TFM_ERR_OUT_OF_MEMORY.  Since 1.2. */
TFM_API tfm_status tfm_tokenizer_decode_v2(const tfm_tokenizer *tokenizer,
                                           const int32_t *ids, int64_t n_ids,
                                           unsigned flags, char *text,
                                           size_t capacity, size_t *text_len);

/* Id of a token given as its vocabulary string (GPT-2: "\u0120the" for
 * " the").  Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_NOT_FOUND.  Since 1.2. */
TFM_API tfm_status tfm_tokenizer_token_to_id(const tfm_tokenizer *tokenizer,
                                             const char *token, int32_t *id);

/* The vocabulary string of id, NUL-terminated, into token (capacity bytes
 * with the NUL); *token_len receives its length without the NUL; too small
 * a capacity: TFM_ERR_CAPACITY, nothing written, *token_len set.  Errors:
 * TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (id out of range),
 * TFM_ERR_CAPACITY.  Since 1.2. */
TFM_API tfm_status tfm_tokenizer_id_to_token(const tfm_tokenizer *tokenizer,
                                             int32_t id, char *token,
                                             size_t capacity,
                                             size_t *token_len);

/* Id of the special token with the role "bos", "eos", "unk", "pad", "cls",
 * "sep" or "mask".  Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT
 * (another role name), TFM_ERR_NOT_FOUND (this tokenizer has no such
 * token).  Since 1.2. */
TFM_API tfm_status tfm_tokenizer_special_id(const tfm_tokenizer *tokenizer,
                                            const char *role, int32_t *id);

/* 1 when id is a special token, 0 when not or out of range.  Since 1.2. */
TFM_API int tfm_tokenizer_is_special(const tfm_tokenizer *tokenizer,
                                     int32_t id);

#ifdef __cplusplus
}
#endif

#endif /* TRANSFORMER_TOKENIZER_H */
