/* GGUF files as tokenizers (gguf_model.h tfm__gguf_tokenizer_load): the
 * tokenizer.ggml.* keys, as llama.cpp's convert_hf_to_gguf.py writes them
 * (gguf-py/gguf/constants.py Keys.Tokenizer) and src/llama-vocab.cpp
 * reads them, built into the library's own tokenizers:
 *   model "gpt2"   byte-level BPE (tokenizers/tokenizer_bpe.c): tokens (GPT-2's
 *                  byte symbols), merges ("left right", rank = index),
 *                  pre-tokenizer tokenizer.ggml.pre one of llama.cpp's names
 *                  for GPT-2's regex (LLAMA_VOCAB_PRE_TYPE_GPT2: "gpt-2",
 *                  "phi-2", ...); any other, and an absent one (llama.cpp's
 *                  "default", a chain of four regexes), is refused by name.
 *   model "llama"  SentencePiece BPE (tokenizers/sentencepiece/): tokens,
 *                  scores, token_type (llama.cpp's: 1 normal, 2 unknown,
 *                  3 control, 4 user-defined, 5 unused, 6 byte: the values
 *                  of sentencepiece's ModelProto types), merged by score
 *                  with byte fallback when byte pieces are there, the
 *                  dummy prefix from tokenizer.ggml.add_space_prefix
 *                  (default true), no other normalisation (Llama's
 *                  tokenizer.model has none).
 * Control and user-defined tokens are special (matched whole in the text);
 * tokenizer.ggml.bos_token_id, eos_token_id, unknown_token_id and
 * padding_token_id give the roles; tokenizer.ggml.add_bos_token (default:
 * true for "llama", false for "gpt2") frames a text with bos. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "tokenizers/sentencepiece/sentencepiece.h"
#include "tokenizers/tokenizer_impl.h"
#include "tokenizers/vocab.h"

/* llama.cpp's token types (llama_token_type), the values sentencepiece's
 * ModelProto gives its pieces. */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4,
       TT_UNUSED = 5, TT_BYTE = 6 };

#define KEY "tokenizer.ggml."

/* Key KEY + name as an id in [0, vocab), or -1 when absent. */
static tfm_status key_id(const tfm__gguf *g, const char *name, int64_t vocab,
                         int32_t *out)
{
    char key[64];
    snprintf(key, sizeof key, KEY "%s", name);
    uint32_t v = 0;
    tfm_status st = tfm__gguf_get_u32(g, key, &v);
    if (st == TFM_ERR_NOT_FOUND) {
        *out = -1;
        return TFM_OK;
    }
    if (st != TFM_OK)
        return st;
    if ((int64_t)v >= vocab)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: GGUF key \"%s\" %u is not "
                         "a token id (%lld tokens)", tfm__gguf_path(g), key,
                         (unsigned)v, (long long)vocab);
    *out = (int32_t)v;
    return TFM_OK;
}

static tfm_status key_bool(const tfm__gguf *g, const char *name, int def,
                           int *out)
{
    char key[64];
    snprintf(key, sizeof key, KEY "%s", name);
    int v = 0;
    tfm_status st = tfm__gguf_get_bool(g, key, &v);
    *out = st == TFM_ERR_NOT_FOUND ? def : v;
    return st == TFM_ERR_NOT_FOUND ? TFM_OK : st;
}

/* An array key's length, which must be `want` (>= 0) or anything (-1). */
static tfm_status array_len(const tfm__gguf *g, const char *key,
                            int64_t want, int64_t *n)
{
    int elem = 0;
    uint64_t count = 0;
    tfm_status st = tfm__gguf_get_array(g, key, &elem, &count);
    if (st == TFM_ERR_NOT_FOUND)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: no GGUF key \"%s\"",
                         tfm__gguf_path(g), key);
    if (st != TFM_OK)
        return st;
    if (count > INT32_MAX || (want >= 0 && (int64_t)count != want))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: GGUF array \"%s\" holds "
                         "%llu values, not %lld", tfm__gguf_path(g), key,
                         (unsigned long long)count, (long long)want);
    *n = (int64_t)count;
    return TFM_OK;
}

/* The vocabulary of tokenizer.ggml.tokens and its types (token_type, or
 * all normal when absent) into v and types[vocab]. */
static tfm_status read_tokens(const tfm__gguf *g, tfm__vocab *v,
                              uint8_t **types)
{
    int64_t n = 0, nt = 0;
    tfm_status st = array_len(g, KEY "tokens", -1, &n);
    if (st == TFM_OK && n < 1)
        st = tfm__fail(TFM_ERR_FORMAT, "%.200s: no tokens",
                       tfm__gguf_path(g));
    if (st == TFM_OK)
        st = tfm__vocab_init(v, n);
    if (st != TFM_OK)
        return st;
    *types = tfm__malloc((size_t)n);
    if (!*types)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    int elem = 0;
    uint64_t count = 0;
    const int has_types = tfm__gguf_get_array(g, KEY "token_type", &elem,
                                              &count) != TFM_ERR_NOT_FOUND;
    if (has_types && (st = array_len(g, KEY "token_type", n, &nt)))
        return st;
    for (int64_t i = 0; i < n; i++) {
        tfm__gguf_str s = { 0 };
        int32_t type = TT_NORMAL;
        if ((st = tfm__gguf_array_str(g, KEY "tokens", (uint64_t)i, &s)) ||
            (has_types &&
             (st = tfm__gguf_array_i32(g, KEY "token_type", (uint64_t)i,
                                       &type))))
            return st;
        if (type < TT_NORMAL || type > TT_BYTE)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: token %lld has type "
                             "%d (llama.cpp's are 1 to 6)", tfm__gguf_path(g),
                             (long long)i, (int)type);
        if (s.len == 0 || s.len > UINT32_MAX)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: token %lld is empty",
                             tfm__gguf_path(g), (long long)i);
        (*types)[i] = (uint8_t)type;
        if ((st = tfm__vocab_set(v, i, s.ptr, (size_t)s.len,
                                 tfm__gguf_path(g))))
            return st;
    }
    return TFM_OK;
}

/* ---- "gpt2": byte-level BPE --------------------------------------------- */

/* llama.cpp's tokenizer.ggml.pre names whose pre-tokenizer is GPT-2's
 * regex alone (src/llama-vocab.cpp: LLAMA_VOCAB_PRE_TYPE_GPT2, and MPT,
 * OLMO, JAIS, TRILLION, GRANITE_DOCLING, which share its regex). */
static const char *const GPT2_PRE[] = {
    "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
    "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo",
    "jais", "trillion", "granite-docling",
};

static tfm_status check_pre(const tfm__gguf *g)
{
    tfm__gguf_str pre = { 0 };
    tfm_status st = tfm__gguf_get_str(g, KEY "pre", &pre);
    if (st != TFM_OK && st != TFM_ERR_NOT_FOUND)
        return st;
    for (size_t k = 0; st == TFM_OK && k < sizeof GPT2_PRE / sizeof *GPT2_PRE;
         k++)
        if (pre.len == strlen(GPT2_PRE[k]) &&
            memcmp(pre.ptr, GPT2_PRE[k], pre.len) == 0)
            return TFM_OK;
    if (st == TFM_ERR_NOT_FOUND)
        pre.ptr = "default", pre.len = 7;
    return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: tokenizer.ggml.pre "
                     "\"%.*s\"%s: only GPT-2's pre-tokenizer (\"gpt-2\" and "
                     "llama.cpp's other names for its regex) is supported",
                     tfm__gguf_path(g), (int)(pre.len > 40 ? 40 : pre.len),
                     pre.ptr, st == TFM_ERR_NOT_FOUND ? " (absent)" : "");
}

static tfm_status merge_at(void *ctx, int64_t i, const char **s, size_t *len)
{
    tfm__gguf_str m = { 0 };
    tfm_status st = tfm__gguf_array_str(ctx, KEY "merges", (uint64_t)i, &m);
    *s = m.ptr;
    *len = (size_t)m.len;
    return st;
}

/* Special tokens and roles of a BPE tokenizer t (types[id]). */
static tfm_status add_specials(const tfm__gguf *g, tfm_tokenizer *t,
                               const uint8_t *types, int64_t n)
{
    static const char *const KEYS[] = { "bos_token_id", "eos_token_id",
                                        "unknown_token_id",
                                        "padding_token_id" };
    static const int ROLES[] = { TFM__ROLE_BOS, TFM__ROLE_EOS, TFM__ROLE_UNK,
                                 TFM__ROLE_PAD };
    int32_t ids[4];
    tfm_status st = TFM_OK;
    for (int k = 0; st == TFM_OK && k < 4; k++)
        st = key_id(g, KEYS[k], n, &ids[k]);
    for (int64_t i = 0; st == TFM_OK && i < n; i++)
        if (types[i] == TT_CONTROL || types[i] == TT_USER)
            st = tfm__tokenizer_add_special(t, (int32_t)i, NULL, 0, -1);
    for (int k = 0; st == TFM_OK && k < 4; k++)
        if (ids[k] >= 0)
            st = tfm__tokenizer_add_special(t, ids[k], NULL, 0, ROLES[k]);
    return st;
}

static tfm_status load_gpt2(const tfm__gguf *g, tfm_tokenizer **out)
{
    tfm__vocab v = { 0 };
    uint8_t *types = NULL;
    tfm_tokenizer *t = NULL;
    int64_t n_merges = 0;
    int add_bos = 0, add_eos = 0;
    tfm_status st = check_pre(g);
    if (st == TFM_OK && (st = key_bool(g, "add_bos_token", 0, &add_bos)) ==
                            TFM_OK &&
        (st = key_bool(g, "add_eos_token", 0, &add_eos)) == TFM_OK &&
        add_eos)
        st = tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: tokenizer.ggml."
                       "add_eos_token true is not supported",
                       tfm__gguf_path(g));
    if (st == TFM_OK && (st = read_tokens(g, &v, &types)) == TFM_OK &&
        (st = array_len(g, KEY "merges", -1, &n_merges)) == TFM_OK) {
        const int64_t n = v.size;
        /* v is taken over by the tokenizer, on failure too. */
        st = tfm__bpe_from_tables(&v, n_merges, merge_at, (void *)g,
                                  tfm__gguf_path(g), &t);
        if (st == TFM_OK)
            st = add_specials(g, t, types, n);
        if (st == TFM_OK && add_bos) {
            if (t->roles[TFM__ROLE_BOS] < 0)
                st = tfm__fail(TFM_ERR_FORMAT, "%.200s: add_bos_token "
                               "without bos_token_id", tfm__gguf_path(g));
            t->framing = TFM__FRAME_BOS;
        }
    }
    tfm__vocab_free(&v);
    tfm__free(types);
    if (st != TFM_OK) {
        tfm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TFM_OK;
}

/* ---- "llama": SentencePiece BPE ------------------------------------------ */

static tfm_status load_llama(const tfm__gguf *g, tfm_tokenizer **out)
{
    tfm__spm_file f;
    memset(&f, 0, sizeof f);
    int add_bos = 1, add_eos = 0, prefix = 1;
    int64_t n_scores = 0;
    tfm_status st = read_tokens(g, &f.vocab, &f.types);
    const int64_t n = f.vocab.size;
    if (st == TFM_OK &&
        (st = array_len(g, KEY "scores", n, &n_scores)) == TFM_OK) {
        f.scores = tfm__malloc((size_t)n * sizeof *f.scores);
        if (!f.scores)
            st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int64_t i = 0; st == TFM_OK && i < n; i++) {
        st = tfm__gguf_array_f32(g, KEY "scores", (uint64_t)i, &f.scores[i]);
        f.byte_fallback |= f.types[i] == TT_BYTE;
    }
    if (st == TFM_OK &&
        (st = key_bool(g, "add_bos_token", 1, &add_bos)) == TFM_OK &&
        (st = key_bool(g, "add_eos_token", 0, &add_eos)) == TFM_OK &&
        (st = key_bool(g, "add_space_prefix", 1, &prefix)) == TFM_OK &&
        (st = key_id(g, "unknown_token_id", n, &f.unk_id)) == TFM_OK &&
        (st = key_id(g, "bos_token_id", n, &f.bos_id)) == TFM_OK &&
        (st = key_id(g, "eos_token_id", n, &f.eos_id)) == TFM_OK)
        st = key_id(g, "padding_token_id", n, &f.pad_id);
    if (st == TFM_OK && add_eos)
        st = tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: tokenizer.ggml."
                       "add_eos_token true is not supported",
                       tfm__gguf_path(g));
    if (st == TFM_OK && add_bos && f.bos_id < 0)
        st = tfm__fail(TFM_ERR_FORMAT, "%.200s: add_bos_token without "
                       "bos_token_id", tfm__gguf_path(g));
    if (st != TFM_OK) {
        tfm__spm_file_free(&f);
        return st;
    }
    /* One unknown piece, unknown_token_id's (default 0, llama.cpp's):
     * convert_hf_to_gguf.py may write it as a control token and mark
     * padding tokens UNKNOWN (Phi-3's); those llama.cpp treats as special,
     * as control pieces are here. */
    const int32_t unk = f.unk_id >= 0 ? f.unk_id : 0;
    f.unk_id = unk;
    for (int64_t i = 0; i < n; i++)
        if (f.types[i] == TT_UNKNOWN && i != unk)
            f.types[i] = TT_CONTROL;
    if (f.types[unk] == TT_CONTROL)
        f.types[unk] = TT_UNKNOWN;
    f.model_type = TFM__SPM_BPE;
    f.add_dummy_prefix = prefix;
    f.remove_extra_whitespaces = 0;
    f.escape_whitespaces = 1;
    tfm__spm_rules r = { .prepend = TFM__SPM_PREPEND_DUMMY, .fuse_unk = 1,
                         .framing = add_bos ? TFM__FRAME_BOS
                                            : TFM__FRAME_NONE,
                         .decoder = TFM__SPM_DECODE_SENTENCEPIECE };
    return tfm__spm_tokenizer_new(&f, &r, tfm__gguf_path(g), out);
}

tfm_status tfm__gguf_tokenizer_load(const char *path, tfm_tokenizer **out)
{
    tfm__gguf *g = NULL;
    tfm__gguf_str model = { 0 };
    tfm_status st = tfm__gguf_open(path, &g);
    if (st == TFM_OK) {
        st = tfm__gguf_get_str(g, KEY "model", &model);
        if (st == TFM_ERR_NOT_FOUND)
            st = tfm__fail(TFM_ERR_FORMAT, "%.200s: no tokenizer (GGUF key "
                           "\"tokenizer.ggml.model\")", path);
    }
    if (st == TFM_OK) {
        if (model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0)
            st = load_gpt2(g, out);
        else if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0)
            st = load_llama(g, out);
        else
            st = tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: tokenizer.ggml.model "
                           "\"%.*s\": this library reads \"gpt2\" (byte-level "
                           "BPE) and \"llama\" (SentencePiece) tokenizers",
                           path, (int)(model.len > 40 ? 40 : model.len),
                           model.ptr);
    }
    tfm__gguf_close(g);
    return st;
}
