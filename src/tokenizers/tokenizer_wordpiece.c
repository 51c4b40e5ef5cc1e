/* WordPiece as BERT's (tokenizer.h): vocab.txt, or a tokenizer.json whose
 * model is "WordPiece" with BertNormalizer and BertPreTokenizer.
 *
 * Source: Devlin et al. 2019, "BERT" (section 3, "WordPiece embeddings"),
 * and the algorithm of BERT's tokenization.py as Hugging Face tokenizers
 * implements it (normalizers/bert.rs, pre_tokenizers/bert.rs,
 * models/wordpiece):
 *  1. normalizer, character by character: drop NUL, U+FFFD and control
 *     characters (category C* but tab, newline, carriage return), turn
 *     whitespace (tab, newline, return, Zs, Zl, Zp) into a space; put spaces
 *     around CJK ideographs (BERT's ranges); when stripping accents,
 *     decompose (NFD) and drop nonspacing marks (Mn); when uncased,
 *     lower-case (Unicode's mapping, final sigma as Python's str.lower(),
 *     which BERT's own tokenizer uses);
 *  2. pre-tokenizer: split at spaces (dropped) and around punctuation
 *     (ASCII punctuation and Unicode P*), each its own word;
 *  3. each word: over max_input_chars_per_word (100) characters, [UNK];
 *     else the longest vocabulary token from the start, then the longest
 *     "##" token from where it ended, and so on; a word with a place where
 *     nothing matches is one [UNK].
 * Unicode data (categories, NFD, case) comes from utf8proc; UTF-8 is read
 * by utf8.c, as everywhere in the library.  Bytes that are
 * not UTF-8 are dropped, as BERT's convert_to_unicode (errors="ignore").
 * Offsets: each token covers the original bytes of the characters it came
 * from (a decomposed or lower-cased character maps to its whole original
 * character). */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <utf8proc.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json_check.h"
#include "tokenizers/tokenizer_impl.h"
#include "base/utf8.h"

typedef struct tfm__wordpiece {
    tfm__vocab vocab;
    int32_t unk;
    int clean_text, chinese, strip_accents, lowercase;
    int64_t max_chars;       /* max_input_chars_per_word */
    char prefix[32];         /* continuing_subword_prefix, "##" */
    size_t prefix_len;
    size_t longest;          /* bytes of the longest token */
} tfm__wordpiece;

/* One normalized character and the original bytes it came from. */
typedef struct norm_char {
    int32_t cp;
    int64_t begin, end;
} norm_char;

/* ---- Character classes (BERT's definitions over Unicode categories) ---- */

static int is_control(int32_t c)
{
    if (c == '\t' || c == '\n' || c == '\r')
        return 0;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_CO ||
           k == UTF8PROC_CATEGORY_CS;
}

static int is_space(int32_t c)
{
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
        return 1;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL ||
           k == UTF8PROC_CATEGORY_ZP;
}

static int is_punctuation(int32_t c)
{
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
        (c >= 123 && c <= 126))
        return 1;
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* BERT's _is_chinese_char: the CJK Unified Ideographs blocks. */
static int is_cjk(int32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* ---- Normalizer --------------------------------------------------------- */

typedef struct norm_buf {
    norm_char *c;
    size_t n, cap;
} norm_buf;

static tfm_status push(norm_buf *b, int32_t cp, int64_t begin, int64_t end)
{
    norm_char *grown = tfm__grow(b->c, &b->cap, b->n, sizeof *b->c, 256);
    if (!grown)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    b->c = grown;
    b->c[b->n++] = (norm_char){ cp, begin, end };
    return TFM_OK;
}

/* The lower case of c appended (Unicode's full mapping: U+0130 is the one
 * character whose lower case is two, "i" and U+0307). */
static tfm_status push_lower(norm_buf *b, int32_t c, int64_t begin,
                             int64_t end)
{
    if (c == 0x130) {
        tfm_status st = push(b, 'i', begin, end);
        return st != TFM_OK ? st : push(b, 0x307, begin, end);
    }
    return push(b, utf8proc_tolower(c), begin, end);
}

/* Unicode's Cased and Case_Ignorable, as far as BERT's lower-casing needs
 * them: a character with a case mapping, and marks, format characters,
 * modifiers and the word-internal apostrophe, period and colon. */
static int is_cased(int32_t c)
{
    return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c ||
           utf8proc_category(c) == UTF8PROC_CATEGORY_LT;
}

static int is_case_ignorable(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return c == '\'' || c == '.' || c == ':' || c == 0xB7 || c == 0x2019 ||
           k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME ||
           k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_LM ||
           k == UTF8PROC_CATEGORY_SK;
}

/* Whether the capital sigma just read (the text goes on at s[pos ..]) is
 * final (Unicode's Final_Sigma, as Python's str.lower() in BERT's
 * tokenizer): a cased letter before it and none after it, case-ignorable
 * characters skipped on both sides. */
static int final_sigma(const norm_buf *done, const unsigned char *s,
                       size_t len, size_t pos)
{
    size_t i = done->n;
    while (i > 0 && is_case_ignorable(done->c[i - 1].cp))
        i--;
    if (i == 0 || !is_cased(done->c[i - 1].cp))
        return 0;
    while (pos < len) {
        uint32_t c;
        size_t n;
        if (tfm__utf8_decode(s + pos, len - pos, &c, &n))
            return 1;
        if (!is_case_ignorable((int32_t)c))
            return !is_cased((int32_t)c);
        pos += n;
    }
    return 1;
}

static tfm_status normalize(const tfm__wordpiece *m, const char *text,
                            size_t len, norm_buf *out)
{
    const unsigned char *s = (const unsigned char *)text;
    tfm_status st = TFM_OK;
    for (size_t pos = 0; st == TFM_OK && pos < len;) {
        uint32_t u;
        size_t n;
        if (tfm__utf8_decode(s + pos, len - pos, &u, &n)) {
            pos++;  /* not UTF-8: dropped */
            continue;
        }
        int32_t c = (int32_t)u;
        int64_t b = (int64_t)pos, e = (int64_t)(pos + n);
        pos += n;
        if (m->clean_text) {
            if (c == 0 || c == 0xFFFD || is_control(c))
                continue;
            if (is_space(c))
                c = ' ';
        }
        if (m->chinese && is_cjk(c)) {
            st = push(out, ' ', b, e);
            if (st == TFM_OK)
                st = push(out, c, b, e);
            if (st == TFM_OK)
                st = push(out, ' ', b, e);
            continue;
        }
        if (m->strip_accents) {
            utf8proc_int32_t d[32];
            int boundclass = 0;
            utf8proc_ssize_t k = utf8proc_decompose_char(
                c, d, 32, UTF8PROC_DECOMPOSE, &boundclass);
            if (k < 1 || k > 32) {
                d[0] = c;
                k = 1;
            }
            for (utf8proc_ssize_t i = 0; st == TFM_OK && i < k; i++) {
                if (utf8proc_category(d[i]) == UTF8PROC_CATEGORY_MN)
                    continue;
                if (m->lowercase && d[i] == 0x3A3 &&
                    final_sigma(out, s, len, pos))
                    st = push(out, 0x3C2, b, e);
                else
                    st = m->lowercase ? push_lower(out, d[i], b, e)
                                      : push(out, d[i], b, e);
            }
            continue;
        }
        if (m->lowercase && c == 0x3A3 && final_sigma(out, s, len, pos))
            st = push(out, 0x3C2, b, e);
        else
            st = m->lowercase ? push_lower(out, c, b, e) : push(out, c, b, e);
    }
    return st;
}

/* ---- WordPiece ------------------------------------------------------------ */

/* Tokens of the word w[0 .. n-1] (normalized characters). */
static tfm_status encode_word(const tfm__wordpiece *m, const norm_char *w,
                              size_t n, int64_t base, char *buf,
                              size_t *byte_at, tfm__token_list *out)
{
    if ((int64_t)n > m->max_chars)
        return tfm__token_list_push(out, m->unk, base + w[0].begin,
                                    base + w[n - 1].end);
    /* The word's UTF-8 after the prefix, and where each character begins. */
    size_t k = m->prefix_len;
    memcpy(buf, m->prefix, k);
    for (size_t i = 0; i < n; i++) {
        byte_at[i] = k;
        k += tfm__utf8_encode((uint32_t)w[i].cp, buf + k);
    }
    byte_at[n] = k;
    int64_t first = out->n;
    size_t pl = m->prefix_len;
    for (size_t start = 0; start < n;) {
        /* After the first piece the prefix goes just before the piece, over
         * bytes of the word already done (put back below). */
        char saved[sizeof m->prefix];
        size_t from = start ? byte_at[start] - pl : byte_at[0];
        if (start) {
            memcpy(saved, buf + from, pl);
            memcpy(buf + from, m->prefix, pl);
        }
        size_t end = n;
        int32_t id = -1;
        for (; end > start; end--) {
            size_t bytes = byte_at[end] - from;
            if (bytes > m->longest)
                continue;
            id = tfm__vocab_find(&m->vocab, buf + from, bytes);
            if (id >= 0)
                break;
        }
        if (start)
            memcpy(buf + from, saved, pl);
        if (id < 0) {  /* the whole word is unknown */
            out->n = first;
            return tfm__token_list_push(out, m->unk, base + w[0].begin,
                                        base + w[n - 1].end);
        }
        tfm_status st = tfm__token_list_push(out, id, base + w[start].begin,
                                             base + w[end - 1].end);
        if (st != TFM_OK)
            return st;
        start = end;
    }
    return TFM_OK;
}

static tfm_status wp_encode(const void *model, const char *text, size_t len,
                            int64_t base, tfm__token_list *out)
{
    const tfm__wordpiece *m = model;
    norm_buf nb = { 0 };
    tfm_status st = normalize(m, text, len, &nb);
    /* The prefix is copied before the word: room for both, 4 bytes a
     * character; byte_at needs one more entry than characters. */
    char *buf = NULL;
    size_t *byte_at = NULL;
    if (st == TFM_OK) {
        buf = tfm__malloc(m->prefix_len + 4 * nb.n + 1);
        byte_at = tfm__malloc((nb.n + 1) * sizeof *byte_at);
        if (!buf || !byte_at)
            st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (size_t i = 0; st == TFM_OK && i < nb.n;) {
        int32_t c = nb.c[i].cp;
        if (is_space(c)) {
            i++;
            continue;
        }
        size_t j = i + 1;
        if (!is_punctuation(c))
            while (j < nb.n && !is_space(nb.c[j].cp) &&
                   !is_punctuation(nb.c[j].cp))
                j++;
        st = encode_word(m, nb.c + i, j - i, base, buf, byte_at, out);
        i = j;
    }
    tfm__free(buf);
    tfm__free(byte_at);
    tfm__free(nb.c);
    return st;
}

/* Hugging Face's WordPiece decoder with cleanup: tokens joined by spaces,
 * "##" pieces glued to the one before, then the spaces before . ? ! , and
 * the English contractions taken out (clean_up_tokenization). */
static tfm_status wp_decode(const void *model, const int32_t *ids, int64_t n,
                            tfm__bytes *out)
{
    const tfm__wordpiece *m = model;
    tfm__bytes raw = { 0 };
    tfm_status st = TFM_OK;
    for (int64_t i = 0; st == TFM_OK && i < n; i++) {
        const char *t = m->vocab.tokens[ids[i]];
        size_t len = m->vocab.lengths[ids[i]];
        if (m->prefix_len && len >= m->prefix_len &&
            memcmp(t, m->prefix, m->prefix_len) == 0) {
            t += m->prefix_len;
            len -= m->prefix_len;
        } else if (i > 0) {
            st = tfm__bytes_append(&raw, " ", 1);
        }
        if (st == TFM_OK)
            st = tfm__bytes_append(&raw, t, len);
    }
    if (st == TFM_OK)
        tfm__clean_up_tokenization(&raw, 0);
    if (st == TFM_OK && raw.n)
        st = tfm__bytes_append(out, raw.data, raw.n);
    tfm__free(raw.data);
    return st;
}

static const tfm__vocab *wp_vocab(const void *model)
{
    return &((const tfm__wordpiece *)model)->vocab;
}

static void wp_free(void *model)
{
    tfm__wordpiece *m = model;
    if (!m)
        return;
    tfm__vocab_free(&m->vocab);
    tfm__free(m);
}

static const tfm__tokenizer_ops WORDPIECE_OPS = {
    TFM_TOKENIZER_WORDPIECE, wp_free, wp_encode, wp_decode, wp_vocab,
};

/* ---- Building --------------------------------------------------------- */

/* Every token of the vocabulary found: the unknown token, the longest
 * token, and the handle with BERT's special tokens and framing. */
static tfm_status finish(tfm__wordpiece *m, const char *unk, const char *path,
                         tfm_tokenizer **out)
{
    m->unk = tfm__vocab_find(&m->vocab, unk, strlen(unk));
    if (m->unk < 0) {
        tfm_status st = tfm__fail(TFM_ERR_FORMAT,
                                  "%.200s: the vocabulary has no unknown "
                                  "token \"%.40s\", which WordPiece needs",
                                  path, unk);
        wp_free(m);
        return st;
    }
    for (int64_t i = 0; i < m->vocab.size; i++)
        if (m->vocab.lengths[i] > m->longest)
            m->longest = m->vocab.lengths[i];
    tfm_tokenizer *t;
    tfm_status st = tfm__tokenizer_wrap(&WORDPIECE_OPS, m, &t);
    if (st != TFM_OK)
        return st;
    t->framing = TFM__FRAME_BERT;
    static const char *const NAMES[] = { "[UNK]", "[CLS]", "[SEP]", "[PAD]",
                                         "[MASK]" };
    for (size_t i = 0; st == TFM_OK && i < sizeof NAMES / sizeof NAMES[0]; i++) {
        int32_t id = tfm__vocab_find(&m->vocab, NAMES[i], strlen(NAMES[i]));
        if (id >= 0)
            st = tfm__tokenizer_add_special(t, id, NULL, 0,
                                            tfm__role_of_token(NAMES[i]));
    }
    if (st == TFM_OK && t->roles[TFM__ROLE_UNK] < 0)
        st = tfm__tokenizer_add_special(t, m->unk, NULL, 0, TFM__ROLE_UNK);
    if (st != TFM_OK) {
        tfm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TFM_OK;
}

static tfm__wordpiece *new_model(void)
{
    tfm__wordpiece *m = tfm__calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->clean_text = m->chinese = m->strip_accents = m->lowercase = 1;
    m->max_chars = 100;
    memcpy(m->prefix, "##", 2);
    m->prefix_len = 2;
    return m;
}

/* A boolean of tokenizer_config.json / the normalizer: *flag unchanged when
 * absent or null. */
static void read_flag(const cJSON *obj, const char *key, int *flag)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (cJSON_IsBool(v))
        *flag = cJSON_IsTrue(v);
}

tfm_status tfm__wordpiece_load_vocab_txt(const char *path,
                                         const char *config_path,
                                         tfm_tokenizer **out)
{
    char *text;
    size_t len;
    tfm_status st = tfm__read_text_file(path, TFM__FILE_MAX_TOKENIZER, &text,
                                        &len);
    if (st != TFM_OK)
        return st;
    tfm__wordpiece *m = new_model();
    if (!m) {
        tfm__free(text);
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    int64_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    lines += len > 0 && text[len - 1] != '\n';
    if (lines == 0)
        st = tfm__fail(TFM_ERR_FORMAT, "%.200s: the vocabulary is empty", path);
    else
        st = tfm__vocab_init(&m->vocab, lines);
    int64_t id = 0;
    for (size_t pos = 0; st == TFM_OK && pos < len; id++) {
        const char *eol = memchr(text + pos, '\n', len - pos);
        size_t end = eol ? (size_t)(eol - text) : len, n = end - pos;
        if (n > 0 && text[pos + n - 1] == '\r')
            n--;
        if (n == 0)
            st = tfm__fail(TFM_ERR_FORMAT, "%.200s: line %lld is empty",
                           path, (long long)id + 1);
        else if (memchr(text + pos, '\0', n))
            st = tfm__fail(TFM_ERR_FORMAT, "%.200s: line %lld holds a NUL "
                           "byte", path, (long long)id + 1);
        else
            st = tfm__vocab_set(&m->vocab, id, text + pos, n, path);
        pos = end + 1;
    }
    tfm__free(text);
    if (st == TFM_OK && config_path) {
        /* do_lower_case (BertTokenizer's default true), strip_accents
         * (default: as do_lower_case), tokenize_chinese_chars. */
        cJSON *root = NULL;
        st = tfm__json_read_object(config_path, TFM__FILE_MAX_CONFIG,
                                   &root);
        if (st == TFM_OK) {
            read_flag(root, "do_lower_case", &m->lowercase);
            m->strip_accents = m->lowercase;
            read_flag(root, "strip_accents", &m->strip_accents);
            read_flag(root, "tokenize_chinese_chars", &m->chinese);
        }
        cJSON_Delete(root);
    }
    if (st != TFM_OK) {
        wp_free(m);
        return st;
    }
    return finish(m, "[UNK]", path, out);
}

tfm_status tfm__wordpiece_from_json(const cJSON *root, const cJSON *model,
                                    const char *path, tfm_tokenizer **out)
{
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(
        model, "continuing_subword_prefix");
    const cJSON *max = cJSON_GetObjectItemCaseSensitive(
        model, "max_input_chars_per_word");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab) || cJSON_GetArraySize(vocab) == 0)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: the WordPiece model has no "
                         "\"vocab\" object", path);
    if (prefix && !cJSON_IsString(prefix))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: continuing_subword_prefix "
                         "is not a string", path);
    if (prefix && strlen(prefix->valuestring) >= sizeof ((tfm__wordpiece *)0)->prefix)
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: continuing_subword_"
                         "prefix is too long", path);
    tfm__wordpiece *m = new_model();
    if (!m)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    if (cJSON_IsObject(norm)) {
        read_flag(norm, "clean_text", &m->clean_text);
        read_flag(norm, "handle_chinese_chars", &m->chinese);
        read_flag(norm, "lowercase", &m->lowercase);
        m->strip_accents = m->lowercase;
        read_flag(norm, "strip_accents", &m->strip_accents);
    } else {
        m->clean_text = m->chinese = m->strip_accents = m->lowercase = 0;
    }
    if (prefix) {
        m->prefix_len = strlen(prefix->valuestring);
        memcpy(m->prefix, prefix->valuestring, m->prefix_len);
    }
    if (cJSON_IsNumber(max) && max->valuedouble >= 1)
        m->max_chars = max->valuedouble > 1e9 ? 1000000000 : (int64_t)max->valuedouble;
    tfm_status st = tfm__vocab_init(&m->vocab, cJSON_GetArraySize(vocab));
    for (const cJSON *e = vocab->child; st == TFM_OK && e; e = e->next) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(d >= 0 && d <= INT32_MAX) || d != (double)(int64_t)d)
            st = tfm__fail(TFM_ERR_FORMAT, "%.200s: the id of \"%.60s\" is not "
                           "a non-negative integer", path, e->string);
        else
            st = tfm__vocab_set(&m->vocab, (int64_t)d, e->string,
                                strlen(e->string), path);
    }
    if (st != TFM_OK) {
        wp_free(m);
        return st;
    }
    return finish(m, cJSON_IsString(unk) ? unk->valuestring : "[UNK]", path,
                  out);
}
