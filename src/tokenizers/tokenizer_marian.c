/* Marian's tokenizer (tokenizer.h): Hugging Face's MarianTokenizer
 * (transformers' models/marian/tokenization_marian.py), the tokenizer of
 * Helsinki-NLP's opus-mt checkpoints.  Two SentencePiece models and one
 * vocabulary: source.spm cuts the text into pieces, vocab.json gives each
 * piece its id (the translation model's ids, not the SentencePiece models'
 * own), and target.spm turns the pieces of ids back into text.  The
 * SentencePiece algorithms are tokenizer_sentencepiece.c's; this file only
 * maps pieces to ids and back.  docs/TOKENIZERS.md gives the rules. */
#include <string.h>

#include <cJSON.h>

#include "base/alloc.h"
#include "tokenizers/bpe_merges.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json_check.h"
#include "tokenizers/sentencepiece/sentencepiece.h"
#include "tokenizers/tokenizer_impl.h"
#include "base/utf8.h"

static const char SPACE_SYMBOL[] = "\xe2\x96\x81";  /* U+2581 */

typedef struct marian {
    tfm__vocab vocab;        /* vocab.json: piece by id, id by piece */
    tfm_tokenizer *source;   /* source.spm: encodes */
    tfm_tokenizer *target;   /* target.spm: decodes */
    int32_t eos, unk, pad;   /* vocab.json's ids of the special tokens;
                                pad -1 when there is none */
    int clean_up;            /* clean_up_tokenization_spaces */
} marian;

static int is_special(const marian *m, int32_t id)
{
    return id == m->eos || id == m->unk || id == m->pad;
}

/* ---- Encode -------------------------------------------------------------- */

/* remove_language_code: a text that starts with ">>" begins with a language
 * code up to the first "<<" (">>fra<<"), or has none. */
static size_t language_code(const char *text, size_t len)
{
    if (len < 4 || text[0] != '>' || text[1] != '>')
        return 0;
    for (size_t i = 2; i + 1 < len; i++)
        if (text[i] == '<' && text[i + 1] == '<')
            return i + 2;
    return 0;
}

typedef struct encode_ctx {
    const marian *m;
    tfm__token_list *out;
} encode_ctx;

/* A piece of source.spm -> its vocab.json id, or the unk token's. */
static tfm_status push_piece(void *ctx, int32_t spm_id, const char *piece,
                             size_t len, int64_t begin, int64_t end)
{
    (void)spm_id;
    const encode_ctx *c = ctx;
    int32_t id = tfm__vocab_find(&c->m->vocab, piece, len);
    return tfm__token_list_push(c->out, id < 0 ? c->m->unk : id, begin, end);
}

/* _tokenize: the language code as one token, then source.spm's pieces
 * (encode(out_type=str)), each through vocab.json. */
static tfm_status marian_encode(const void *model, const char *text,
                                size_t len, int64_t base, tfm__token_list *out)
{
    const marian *m = model;
    size_t code = language_code(text, len);
    if (code) {
        int32_t id = tfm__vocab_find(&m->vocab, text, code);
        tfm_status st = tfm__token_list_push(out, id < 0 ? m->unk : id, base,
                                             base + (int64_t)code);
        if (st != TFM_OK)
            return st;
    }
    encode_ctx c = { m, out };
    return tfm__spm_encode_pieces(m->source, text + code, len - code,
                                  base + (int64_t)code, push_piece, &c);
}

/* ---- Decode -------------------------------------------------------------- */

/* Python's str.isspace(): the whitespace str.strip() removes. */
static int py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) ||
           c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* str.strip() on b->data[from ..]. */
static void strip(tfm__bytes *b, size_t from)
{
    const unsigned char *s = (const unsigned char *)b->data;
    size_t end = b->n;
    uint32_t c;
    size_t k;
    while (end > from) {
        size_t at = end - 1;
        while (at > from && end - at < 4 && (s[at] & 0xC0) == 0x80)
            at--;
        if (tfm__utf8_decode(s + at, end - at, &c, &k) != NULL ||
            at + k != end || !py_space(c))
            break;
        end = at;
    }
    size_t begin = from;
    while (begin < end &&
           tfm__utf8_decode(s + begin, end - begin, &c, &k) == NULL &&
           py_space(c))
        begin += k;
    if (end > begin) /* b->data is NULL while nothing was written */
        memmove(b->data + from, b->data + begin, end - begin);
    b->n = from + (end - begin);
}

/* _decode and convert_tokens_to_string: the pieces between special tokens
 * through target.spm's decode_pieces, each special token written as
 * itself and a space, then every U+2581 left a space, the ends stripped
 * and, with clean_up_tokenization_spaces, clean_up_tokenization. */
static tfm_status marian_decode(const void *model, const int32_t *ids,
                                int64_t n, tfm__bytes *out)
{
    const marian *m = model;
    const size_t start = out->n;
    const char **pieces = tfm__malloc((size_t)(n ? n : 1) * sizeof *pieces);
    uint32_t *lens = tfm__malloc((size_t)(n ? n : 1) * sizeof *lens);
    tfm_status st = pieces && lens
                        ? TFM_OK
                        : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t run = 0;
    for (int64_t i = 0; st == TFM_OK && i <= n; i++) {
        if (i < n && !is_special(m, ids[i])) {
            pieces[run] = m->vocab.tokens[ids[i]];
            lens[run++] = m->vocab.lengths[ids[i]];
            continue;
        }
        st = tfm__spm_decode_pieces(m->target, pieces, lens, run, out);
        run = 0;
        if (st == TFM_OK && i < n)
            st = tfm__bytes_append(out, m->vocab.tokens[ids[i]],
                                   m->vocab.lengths[ids[i]]);
        if (st == TFM_OK && i < n)
            st = tfm__bytes_append(out, " ", 1);
    }
    tfm__free(pieces);
    tfm__free(lens);
    if (st != TFM_OK)
        return st;
    size_t w = start;
    for (size_t p = start; p < out->n;) {
        if (p + 3 <= out->n && memcmp(out->data + p, SPACE_SYMBOL, 3) == 0) {
            out->data[w++] = ' ';
            p += 3;
        } else {
            out->data[w++] = out->data[p++];
        }
    }
    out->n = w;
    strip(out, start);
    if (m->clean_up)
        tfm__clean_up_tokenization(out, start);
    return TFM_OK;
}

static const tfm__vocab *marian_vocab(const void *model)
{
    return &((const marian *)model)->vocab;
}

static void marian_free(void *model)
{
    marian *m = model;
    if (!m)
        return;
    tfm__vocab_free(&m->vocab);
    tfm_tokenizer_free(m->source);
    tfm_tokenizer_free(m->target);
    tfm__free(m);
}

static const tfm__tokenizer_ops MARIAN_OPS = {
    TFM_TOKENIZER_MARIAN, marian_free, marian_encode, marian_decode,
    marian_vocab,
};

/* ---- Load ---------------------------------------------------------------- */

/* The token tokenizer_config.json names under key: a string or an
 * AddedToken object's "content"; dflt when the file or the key is absent,
 * NULL for null. */
static tfm_status config_token(const cJSON *cfg, const char *key,
                               const char *dflt, const char *path,
                               const char **name)
{
    const cJSON *item = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, key)
                            : NULL;
    if (!item) {
        *name = dflt;
        return TFM_OK;
    }
    if (cJSON_IsNull(item)) {
        *name = NULL;
        return TFM_OK;
    }
    if (cJSON_IsObject(item))
        item = cJSON_GetObjectItemCaseSensitive(item, "content");
    if (!cJSON_IsString(item) || !item->valuestring[0])
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: \"%s\" is not a token (a "
                         "string, or an object with a \"content\" string)",
                         path, key);
    *name = item->valuestring;
    return TFM_OK;
}

/* The id of the special token key names; pad may be absent. */
static tfm_status special_id(const marian *m, const cJSON *cfg,
                             const char *key, const char *dflt,
                             const char *vocab_json, const char *config,
                             int required, int32_t *id)
{
    const char *name;
    tfm_status st = config_token(cfg, key, dflt, config, &name);
    if (st != TFM_OK)
        return st;
    *id = name ? tfm__vocab_find(&m->vocab, name, strlen(name)) : -1;
    if (*id < 0 && required)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: no \"%.60s\" (the %s) in "
                         "it", vocab_json, name ? name : "null", key);
    return TFM_OK;
}

/* tokenizer_config.json's settings: separate_vocabs (refused), the special
 * tokens, clean_up_tokenization_spaces. */
static tfm_status configure(marian *m, const cJSON *cfg,
                            const char *vocab_json, const char *config)
{
    const cJSON *sep = cfg ? cJSON_GetObjectItemCaseSensitive(
                                 cfg, "separate_vocabs") : NULL;
    if (sep && !cJSON_IsBool(sep) && !cJSON_IsNull(sep))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: \"separate_vocabs\" is "
                         "not true or false", config);
    if (cJSON_IsTrue(sep))
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: \"separate_vocabs\" "
                         "is true: a target vocabulary of its own "
                         "(target_vocab.json) is not supported", config);
    const cJSON *clean = cfg ? cJSON_GetObjectItemCaseSensitive(
                                   cfg, "clean_up_tokenization_spaces")
                             : NULL;
    if (clean && !cJSON_IsBool(clean) && !cJSON_IsNull(clean))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: "
                         "\"clean_up_tokenization_spaces\" is not true or "
                         "false", config);
    m->clean_up = cJSON_IsTrue(clean);
    tfm_status st = special_id(m, cfg, "eos_token", "</s>", vocab_json,
                               config, 1, &m->eos);
    if (st == TFM_OK)
        st = special_id(m, cfg, "unk_token", "<unk>", vocab_json, config, 1,
                        &m->unk);
    if (st == TFM_OK)
        st = special_id(m, cfg, "pad_token", "<pad>", vocab_json, config, 0,
                        &m->pad);
    return st;
}

tfm_status tfm__marian_load(const char *vocab_json, const char *source_spm,
                            const char *target_spm, const char *config,
                            tfm_tokenizer **out)
{
    marian *m = tfm__calloc(1, sizeof *m);
    if (!m)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    cJSON *cfg = NULL, *vocab = NULL;
    tfm_status st = config ? tfm__json_read_object(config,
                                                   TFM__FILE_MAX_CONFIG, &cfg)
                           : TFM_OK;
    if (st == TFM_OK)
        st = tfm__json_read_object(vocab_json, TFM__FILE_MAX_TOKENIZER,
                                   &vocab);
    if (st == TFM_OK)
        st = tfm__vocab_from_json(&m->vocab, vocab, vocab_json);
    if (st == TFM_OK)
        st = configure(m, cfg, vocab_json, config);
    cJSON_Delete(cfg);
    cJSON_Delete(vocab);
    if (st == TFM_OK)
        st = tfm__spm_load(source_spm, &m->source);
    if (st == TFM_OK)
        st = tfm__spm_load(target_spm, &m->target);
    if (st != TFM_OK) {
        marian_free(m);
        return st;
    }
    const int32_t eos = m->eos, unk = m->unk, pad = m->pad;
    tfm_tokenizer *t;
    st = tfm__tokenizer_wrap(&MARIAN_OPS, m, &t);  /* m is t's from here */
    if (st != TFM_OK)
        return st;
    st = tfm__tokenizer_add_special(t, eos, NULL, 0, TFM__ROLE_EOS);
    if (st == TFM_OK)
        st = tfm__tokenizer_add_special(t, unk, NULL, 0, TFM__ROLE_UNK);
    if (st == TFM_OK && pad >= 0)
        st = tfm__tokenizer_add_special(t, pad, NULL, 0, TFM__ROLE_PAD);
    if (st != TFM_OK) {
        tfm_tokenizer_free(t);
        return st;
    }
    t->framing = TFM__FRAME_EOS_END;
    *out = t;
    return TFM_OK;
}
