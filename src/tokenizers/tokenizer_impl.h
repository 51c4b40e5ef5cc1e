/* Internal: the tokenizer handle shared by every kind (tokenizer.h), and
 * the interface each kind's model implements.
 *
 * A handle holds one model (character-level in tokenizer.c, byte-level BPE
 * in tokenizer_bpe.c, WordPiece in tokenizer_wordpiece.c, SentencePiece in
 * tokenizer_sentencepiece.c, Marian's in tokenizer_marian.c) behind a table of
 * functions, plus what is common to every kind: the special tokens (matched
 * in the text when asked, never split by the model), their roles (bos,
 * eos, unk, ...), and how the post-processor frames one text or a pair
 * (tokenizer_encode.c). */
#ifndef TFM_SRC_TOKENIZER_IMPL_H
#define TFM_SRC_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "base/lifetime.h"
#include "transformer/tokenizer.h"
#include "tokenizers/vocab.h"

/* A growing list of tokens: ids and the bytes [begin, end) each covers. */
typedef struct tfm__token_list {
    int32_t *ids;       /* [cap] */
    int64_t *offsets;   /* [cap][2] */
    int64_t n, cap;
} tfm__token_list;

tfm_status tfm__token_list_push(tfm__token_list *list, int32_t id,
                                int64_t begin, int64_t end);
void tfm__token_list_free(tfm__token_list *list);

/* A growing byte string (decode's output). */
typedef struct tfm__bytes {
    char *data;
    size_t n, cap;
} tfm__bytes;

tfm_status tfm__bytes_append(tfm__bytes *b, const char *data, size_t len);

/* What one kind of model does. */
typedef struct tfm__tokenizer_ops {
    tfm_tokenizer_kind kind;
    void (*free)(void *model);
    /* Appends the tokens of text[0 .. len-1], which holds no special token,
     * to out; offsets are shifted by base. */
    tfm_status (*encode)(const void *model, const char *text, size_t len,
                         int64_t base, tfm__token_list *out);
    /* Appends the text of ids (each in range) to out. */
    tfm_status (*decode)(const void *model, const int32_t *ids, int64_t n,
                         tfm__bytes *out);
    /* The vocabulary's token strings (what convert_ids_to_tokens shows). */
    const tfm__vocab *(*vocab)(const void *model);
} tfm__tokenizer_ops;

/* How a text, or a pair, is framed when special tokens are added. */
typedef enum tfm__framing {
    TFM__FRAME_NONE = 0,   /* nothing added (GPT-2) */
    TFM__FRAME_BERT,       /* [CLS] A [SEP] B [SEP], types 0 .. 0 1 .. 1 */
    TFM__FRAME_BOS,        /* <s> A <s> B (Llama's LlamaTokenizer) */
    TFM__FRAME_EOS,        /* A </s> B </s> (T5's) */
    TFM__FRAME_EOS_END,    /* A </s>, A B </s> (Marian's) */
} tfm__framing;

/* A special token: matched whole in the text, never split. */
typedef struct tfm__special {
    int32_t id;
    char *content;
    size_t len;
} tfm__special;

/* Roles, in the order of TFM__ROLE_NAMES (tokenizer_encode.c). */
enum { TFM__ROLE_BOS, TFM__ROLE_EOS, TFM__ROLE_UNK, TFM__ROLE_PAD,
       TFM__ROLE_CLS, TFM__ROLE_SEP, TFM__ROLE_MASK, TFM__ROLE_COUNT };

struct tfm_tokenizer {
    /* First (base/lifetime.h): a generator with stop strings keeps its
     * tokenizer, freed, until the generator is freed. */
    tfm__lifetime life;
    /* The character-level model lives in the handle itself (tokenizer.c). */
    int64_t vocab_size;
    struct tfm__token *tokens;   /* [vocab_size], by id */
    int32_t ascii[128];          /* code point -> id, -1 when absent */
    int64_t n_wide;
    struct tfm__lookup *wide;    /* [n_wide], non-ASCII, by code point */

    /* Every other kind: its model behind ops (NULL for "char"). */
    const tfm__tokenizer_ops *ops;
    void *model;
    tfm__special *specials;      /* [n_specials] */
    int n_specials;
    int32_t roles[TFM__ROLE_COUNT]; /* id of each role, -1 when none */
    tfm__framing framing;
};

/* A zeroed handle with its lifetime set up and no roles (tokenizer.c);
 * NULL when out of memory (no message set). */
tfm_tokenizer *tfm__tokenizer_alloc(void);

/* A new handle around model (taken over: freed by ops->free on failure
 * too), with no special tokens yet. */
tfm_status tfm__tokenizer_wrap(const tfm__tokenizer_ops *ops, void *model,
                               tfm_tokenizer **out);

/* Marks id special (content = its vocabulary string unless given) and, with
 * role >= 0, gives it that role.  Errors: TFM_ERR_FORMAT (id out of range),
 * TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__tokenizer_add_special(tfm_tokenizer *t, int32_t id,
                                      const char *content, size_t len,
                                      int role);

/* Index of a role's name ("bos", "eos", ...), or -1. */
int tfm__role_index(const char *name);

/* The role a special token's usual name gives it ("[CLS]": cls, "</s>":
 * eos, "<|endoftext|>": eos, ...), or -1. */
int tfm__role_of_token(const char *content);

/* The kinds' loaders (tokenizer_files.c finds which to call). */
tfm_status tfm__bpe_load_gpt2(const char *encoder_json, const char *vocab_bpe,
                              tfm_tokenizer **out);
struct cJSON;
tfm_status tfm__bpe_from_json(const struct cJSON *model, const char *path,
                              tfm_tokenizer **out);
/* Merge i's text "left right" (len bytes at *s, owned by the caller's
 * tables) of tfm__bpe_from_tables. */
typedef tfm_status (*tfm__bpe_merge_at)(void *ctx, int64_t i, const char **s,
                                        size_t *len);
/* GPT-2's byte-level BPE of vocabulary *vocab (GPT-2's byte symbols; taken
 * over and zeroed, on failure too) and n_merges merges, rank = index,
 * given by merge_at (a GGUF file's tokenizer.ggml.merges); `what` names
 * the source in messages.  No special tokens yet. */
tfm_status tfm__bpe_from_tables(tfm__vocab *vocab, int64_t n_merges,
                                tfm__bpe_merge_at merge_at, void *ctx,
                                const char *what, tfm_tokenizer **out);
tfm_status tfm__wordpiece_load_vocab_txt(const char *path,
                                         const char *config_path,
                                         tfm_tokenizer **out);
tfm_status tfm__wordpiece_from_json(const struct cJSON *root,
                                    const struct cJSON *model,
                                    const char *path, tfm_tokenizer **out);
tfm_status tfm__tokenizer_json_load(const char *path, tfm_tokenizer **out);
/* Marian's vocab.json, source.spm, target.spm and tokenizer_config.json
 * (config NULL when there is none): tokenizer_marian.c. */
tfm_status tfm__marian_load(const char *vocab_json, const char *source_spm,
                            const char *target_spm, const char *config,
                            tfm_tokenizer **out);
tfm_status tfm__tokenizer_load_files(const char *path, tfm_tokenizer **out);

/* tfm_tokenizer_load of everything but GGUF files (tokenizer.c): a
 * directory or vocabulary file (tfm__tokenizer_load_files), else a model
 * file.  tfm_tokenizer_load itself (formats/tokenizer_load.c) sends GGUF
 * files to formats/gguf_tokenizer.c first. */
tfm_status tfm__tokenizer_load_path(const char *path, tfm_tokenizer **out);

/* The argument checks of tfm_tokenizer_encode and _encode_v2 (NULL
 * pointers, capacity < 0), with their messages. */
tfm_status tfm__encode_check(const tfm_tokenizer *t, const char *text,
                             int64_t capacity, const int64_t *n_ids);

/* The argument checks of tfm_tokenizer_decode and _decode_v2 (NULL
 * pointers, n_ids < 0), with their messages. */
tfm_status tfm__decode_check(const tfm_tokenizer *t, const int32_t *ids,
                             int64_t n_ids, const char *text,
                             size_t capacity, const size_t *text_len);

/* Hugging Face's clean_up_tokenization on b->data[from ..]: the spaces
 * before . ? ! , and in " ' ", n't 'm 's 've 're taken out, one rule after
 * another over the whole text, as its chain of str.replace. */
void tfm__clean_up_tokenization(tfm__bytes *b, size_t from);

#endif
