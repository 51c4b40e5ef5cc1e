/* SentencePiece models in Hugging Face's tokenizer.json form
 * (sentencepiece.h): the "BPE" model with byte fallback of Llama's files and
 * the "Unigram" model of T5's, as transformers' converters
 * (convert_slow_tokenizer.py: LlamaConverter, T5Converter, SpmConverter)
 * write them, read into the model the .model reader builds
 * (tokenizer_sentencepiece.c), so that one implementation runs both forms.
 *
 * Accepted pipelines (anything else is TFM_ERR_UNSUPPORTED, so a file is
 * never half-understood):
 *  - Llama, legacy (Llama 2's own files): normalizer Sequence[Prepend("▁"),
 *    Replace(" ", "▁")] (the Prepend optional), no pre-tokenizer: the
 *    .model's rules exactly (dummy prefix, whitespace kept);
 *  - Llama, legacy=False: no normalizer, pre-tokenizer Metaspace("▁",
 *    prepend_scheme "always" / "first" / "never", split false): the prefix
 *    only where the text does not start with a space or "▁" (and with
 *    "first" not after a special token), as Metaspace;
 *  - T5: normalizer Precompiled (the model's own charsmap, base64; alone
 *    or in a Sequence), pre-tokenizer Sequence[WhitespaceSplit,
 *    Metaspace("▁", add_prefix_space / prepend_scheme "always")]: the
 *    .model's nmt_nfkc rules with extra whitespace removed.
 * The model: BPE's "vocab" {piece: id} and "merges" (Hugging Face's BPE
 * merges the pair of lowest rank, not the piece of highest score), with
 * "byte_fallback", "fuse_unk" and "unk_token", no subword prefix or suffix,
 * no dropout, ignore_merges false; Unigram's "vocab" [[piece, score], ...],
 * "unk_id", "byte_fallback".  Decoders (Replace, ByteFallback, Fuse, Strip
 * in a Sequence, or Metaspace) are checked to be of these kinds; decoding
 * is sentencepiece's (tokenizer_sentencepiece.c), which is what they
 * compute for ids without special tokens, the unknown token written as its
 * text ("<unk>") as they write it.  Post-processor:
 * none, or TemplateProcessing "<s> $A" (pair "<s> $A <s> $B", Llama) or
 * "$A </s>" (pair "$A </s> $B </s>", T5), the framing of
 * TFM_ENCODE_ADD_SPECIAL.
 *
 * Added tokens: special ones are control pieces (the unknown token its
 * unknown piece), others user-defined pieces, as the converters make them
 * of sentencepiece's types 3 and 4; <0xNN> pieces are byte pieces when the
 * model has byte fallback. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "alloc.h"
#include "error.h"
#include "sentencepiece.h"

static const char SPACE_SYMBOL[] = "\xe2\x96\x81";  /* U+2581 */

/* ---- JSON helpers ------------------------------------------------------ */

static const cJSON *item(const cJSON *o, const char *name)
{
    return cJSON_GetObjectItemCaseSensitive(o, name);
}

/* o's "type" string, "" when o is null or absent, NULL otherwise. */
static const char *type_of(const cJSON *o)
{
    if (!o || cJSON_IsNull(o))
        return "";
    const cJSON *t = item(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static int is_type(const cJSON *o, const char *type)
{
    const char *t = type_of(o);
    return t && strcmp(t, type) == 0;
}

static int string_is(const cJSON *s, const char *want)
{
    return cJSON_IsString(s) && strcmp(s->valuestring, want) == 0;
}

/* A Replace step's pattern {"String": from} with content to. */
static int is_replace(const cJSON *o, const char *from, const char *to)
{
    return is_type(o, "Replace") &&
           string_is(item(item(o, "pattern"), "String"), from) &&
           string_is(item(o, "content"), to);
}

/* The steps of o: its "key" array when o is a Sequence, else o alone. */
static int steps(const cJSON *o, const char *key, const cJSON **out, int max)
{
    if (!is_type(o, "Sequence")) {
        out[0] = o;
        return 1;
    }
    const cJSON *list = item(o, key);
    int n = 0;
    for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e;
         e = e->next) {
        if (n == max)
            return -1;
        out[n++] = e;
    }
    return n;
}

static tfm_status unsupported(const char *path, const char *step,
                              const char *type)
{
    return tfm__fail(TFM_ERR_UNSUPPORTED,
                     "%.200s: %s \"%.60s\" is not supported with a "
                     "SentencePiece model (only Llama's and T5's pipelines)",
                     path, step, type ? type : "(no type)");
}

/* RFC 4648 base64, padding optional.  Returns the byte count, or
 * (size_t)-1 when text is not base64.  out has room for 3/4 of len. */
static size_t base64_decode(const char *text, size_t len, char *out)
{
    static const char ALPHABET[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    while (len > 0 && text[len - 1] == '=')
        len--;
    if (len % 4 == 1)
        return (size_t)-1;
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        const char *p = text[i] ? strchr(ALPHABET, text[i]) : NULL;
        if (!p)
            return (size_t)-1;
        acc = acc << 6 | (uint32_t)(p - ALPHABET);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (char)(acc >> bits & 0xff);
        }
    }
    return n;
}

/* ---- The pipeline ------------------------------------------------------ */

/* The normalizer and pre-tokenizer: the .model's flags they amount to. */
static tfm_status read_pipeline(const cJSON *root, int unigram,
                                const char *path, tfm__spm_file *f,
                                tfm__spm_rules *r)
{
    const cJSON *norm = item(root, "normalizer");
    const cJSON *pre = item(root, "pre_tokenizer");
    const cJSON *ns[4], *ps[4];
    int n_norm = steps(norm, "normalizers", ns, 4);
    int n_pre = steps(pre, "pretokenizers", ps, 4);
    if (n_norm < 0 || n_pre < 0)
        return unsupported(path, n_norm < 0 ? "normalizer" : "pre_tokenizer",
                           "Sequence");
    /* The normalizer: Precompiled (first), Prepend("▁"), Replace(" ", "▁"). */
    int prepend = 0, replace = 0;
    const cJSON *charsmap = NULL;
    for (int i = 0; i < n_norm; i++) {
        const cJSON *s = ns[i];
        const char *t = type_of(s);
        if (t && !t[0] && n_norm == 1)
            continue;  /* null */
        if (i == 0 && is_type(s, "Precompiled"))
            charsmap = item(s, "precompiled_charsmap");
        else if (!prepend && !replace && is_type(s, "Prepend") &&
                 string_is(item(s, "prepend"), SPACE_SYMBOL))
            prepend = 1;
        else if (!replace && is_replace(s, " ", SPACE_SYMBOL))
            replace = 1;
        else
            return unsupported(path, "normalizer", t);
    }
    if (charsmap && !cJSON_IsNull(charsmap)) {
        if (!cJSON_IsString(charsmap))
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: precompiled_charsmap "
                             "is not a string", path);
        size_t len = strlen(charsmap->valuestring);
        f->charsmap = tfm__malloc(len / 4 * 3 + 3);
        if (!f->charsmap)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
        f->charsmap_len = base64_decode(charsmap->valuestring, len,
                                        f->charsmap);
        if (f->charsmap_len == (size_t)-1)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: precompiled_charsmap "
                             "is not base64", path);
        if (f->charsmap_len == 0) {
            tfm__free(f->charsmap);
            f->charsmap = NULL;
        }
    }
    /* The pre-tokenizer: nothing, Metaspace, or WhitespaceSplit then
     * Metaspace. */
    int whitespace_split = 0;
    const cJSON *meta = NULL;
    for (int i = 0; i < n_pre; i++) {
        const char *t = type_of(ps[i]);
        if (t && !t[0] && n_pre == 1)
            continue;
        if (i == 0 && n_pre == 2 && is_type(ps[i], "WhitespaceSplit"))
            whitespace_split = 1;
        else if (i == n_pre - 1 && is_type(ps[i], "Metaspace"))
            meta = ps[i];
        else
            return unsupported(path, "pre_tokenizer", t);
    }
    f->escape_whitespaces = 1;
    if (meta) {
        /* Replace(" ", "▁") and the prefix are Metaspace's here. */
        if (prepend || replace ||
            !string_is(item(meta, "replacement"), SPACE_SYMBOL))
            return unsupported(path, "pre_tokenizer", "Metaspace with this "
                               "normalizer or replacement");
        const cJSON *scheme = item(meta, "prepend_scheme");
        const cJSON *aps = item(meta, "add_prefix_space");
        if (scheme && !cJSON_IsNull(scheme)) {
            if (string_is(scheme, "always"))
                r->prepend = TFM__SPM_PREPEND_METASPACE;
            else if (string_is(scheme, "first"))
                r->prepend = TFM__SPM_PREPEND_FIRST;
            else if (!string_is(scheme, "never"))
                return unsupported(path, "Metaspace prepend_scheme",
                                   cJSON_IsString(scheme) ? scheme->valuestring
                                                          : NULL);
            f->add_dummy_prefix = !string_is(scheme, "never");
        } else {
            f->add_dummy_prefix = !cJSON_IsFalse(aps);
            r->prepend = TFM__SPM_PREPEND_METASPACE;
        }
        if (whitespace_split) {
            /* Words split at whitespace, each with its prefix: extra
             * whitespace removed, as the .model's T5 rules. */
            f->remove_extra_whitespaces = 1;
        } else if (!cJSON_IsFalse(item(meta, "split"))) {
            /* split true (the default) cuts the text before each "▁" and
             * runs the model on each part: not what sentencepiece does
             * with the whole text, so not accepted (Llama's files say
             * false). */
            return unsupported(path, "pre_tokenizer", "Metaspace with "
                               "split true and no WhitespaceSplit");
        }
        if (!f->add_dummy_prefix && f->remove_extra_whitespaces)
            return unsupported(path, "pre_tokenizer", "WhitespaceSplit "
                               "without a prefix");
    } else {
        if (whitespace_split || !replace)
            return unsupported(path, "pipeline", "SentencePiece model "
                               "without Replace(\" \", \"\xe2\x96\x81\") or "
                               "Metaspace");
        f->add_dummy_prefix = prepend;
        r->prepend = TFM__SPM_PREPEND_DUMMY;
    }
    if (unigram && !f->remove_extra_whitespaces)
        return unsupported(path, "pre_tokenizer", "Unigram without "
                           "WhitespaceSplit");
    /* Decoders: checked to be of the kinds sentencepiece's decoding is. */
    const cJSON *ds[6];
    int n_dec = steps(item(root, "decoder"), "decoders", ds, 6);
    for (int i = 0; i < n_dec; i++) {
        const char *t = type_of(ds[i]);
        if (!t || !(!t[0] || strcmp(t, "ByteFallback") == 0 ||
                    strcmp(t, "Fuse") == 0 || strcmp(t, "Strip") == 0 ||
                    strcmp(t, "Metaspace") == 0 ||
                    is_replace(ds[i], SPACE_SYMBOL, " ")))
            return unsupported(path, "decoder", t);
    }
    if (n_dec < 0)
        return unsupported(path, "decoder", "Sequence");
    return TFM_OK;
}

/* TemplateProcessing's "single"/"pair" item k: 'A', 'B', or a special
 * token (its id in *special); 0 when it is neither. */
static int template_item(const cJSON *list, int k, const char **special)
{
    const cJSON *e = cJSON_GetArrayItem(list, k);
    const cJSON *seq = item(e, "Sequence"), *sp = item(e, "SpecialToken");
    const cJSON *id = item(seq ? seq : sp, "id");
    if (!cJSON_IsString(id))
        return 0;
    if (seq)
        return id->valuestring[0] == 'A' && !id->valuestring[1] ? 'A'
               : id->valuestring[0] == 'B' && !id->valuestring[1] ? 'B' : 0;
    *special = id->valuestring;
    return 's';
}

/* The post-processor: the framing and the token it adds. */
static tfm_status read_template(const cJSON *root, const tfm__vocab *v,
                                const char *path, tfm__spm_file *f,
                                tfm__spm_rules *r)
{
    const cJSON *post = item(root, "post_processor");
    r->framing = TFM__FRAME_NONE;
    if (!post || cJSON_IsNull(post))
        return TFM_OK;
    if (!is_type(post, "TemplateProcessing"))
        return unsupported(path, "post_processor", type_of(post));
    const cJSON *single = item(post, "single"), *pair = item(post, "pair");
    const char *s1 = NULL, *s2 = NULL, *s3 = NULL;
    int n = cJSON_GetArraySize(single), np = cJSON_GetArraySize(pair);
    if (n == 1 && template_item(single, 0, &s1) == 'A')
        return TFM_OK;
    if (n == 2 && template_item(single, 0, &s1) == 's' &&
        template_item(single, 1, &s2) == 'A' &&
        (!pair || cJSON_IsNull(pair) ||
         (np == 4 && template_item(pair, 0, &s2) == 's' &&
          template_item(pair, 1, &s3) == 'A' &&
          template_item(pair, 2, &s3) == 's' &&
          template_item(pair, 3, &s3) == 'B' &&
          strcmp(s1, s2) == 0 && strcmp(s1, s3) == 0))) {
        r->framing = TFM__FRAME_BOS;
        f->bos_id = tfm__vocab_find(v, s1, strlen(s1));
    } else if (n == 2 && template_item(single, 0, &s1) == 'A' &&
               template_item(single, 1, &s1) == 's' &&
               (!pair || cJSON_IsNull(pair) ||
                (np == 4 && template_item(pair, 0, &s2) == 'A' &&
                 template_item(pair, 1, &s2) == 's' &&
                 template_item(pair, 2, &s3) == 'B' &&
                 template_item(pair, 3, &s3) == 's' &&
                 strcmp(s1, s2) == 0 && strcmp(s1, s3) == 0))) {
        r->framing = TFM__FRAME_EOS;
        f->eos_id = tfm__vocab_find(v, s1, strlen(s1));
    } else {
        return unsupported(path, "post_processor", "TemplateProcessing "
                           "other than \"<s> $A\" or \"$A </s>\"");
    }
    int32_t id = r->framing == TFM__FRAME_BOS ? f->bos_id : f->eos_id;
    if (id < 0 || f->types[id] != TFM__SPM_CONTROL)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: the post-processor's token "
                         "\"%.60s\" is not a special added token", path, s1);
    return TFM_OK;
}

/* ---- The model --------------------------------------------------------- */

/* Unigram's "vocab": [[piece, score], ...], ids in order. */
static tfm_status unigram_vocab(const cJSON *list, const char *path,
                                tfm__spm_file *f)
{
    if (!cJSON_IsArray(list) || !list->child)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: the Unigram model's "
                         "\"vocab\" is not a non-empty array", path);
    int64_t n = cJSON_GetArraySize(list);
    tfm_status st = tfm__vocab_init(&f->vocab, n);
    if (st != TFM_OK)
        return st;
    f->scores = tfm__malloc((size_t)n * sizeof *f->scores);
    if (!f->scores)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    int64_t i = 0;
    for (const cJSON *e = list->child; st == TFM_OK && e; e = e->next, i++) {
        const cJSON *p = cJSON_GetArrayItem(e, 0), *s = cJSON_GetArrayItem(e, 1);
        if (cJSON_GetArraySize(e) != 2 || !cJSON_IsString(p) ||
            !cJSON_IsNumber(s) || !(s->valuedouble == s->valuedouble))
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: Unigram vocab entry "
                             "%lld is not [piece, score]", path, (long long)i);
        if (!p->valuestring[0])
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: Unigram vocab entry "
                             "%lld is empty", path, (long long)i);
        f->scores[i] = (float)s->valuedouble;
        st = tfm__vocab_set(&f->vocab, i, p->valuestring,
                            strlen(p->valuestring), path);
    }
    return st;
}

/* "<0xNN>" -> 1. */
static int is_byte_piece(const char *p, size_t len)
{
    return len == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>' &&
           strchr("0123456789ABCDEF", p[3]) && p[3] &&
           strchr("0123456789ABCDEF", p[4]) && p[4];
}

static tfm_status read_model(const cJSON *root, const cJSON *model,
                             int unigram, const char *path, tfm__spm_file *f,
                             tfm__spm_rules *r)
{
    tfm_status st;
    const cJSON *bf = item(model, "byte_fallback");
    f->byte_fallback = cJSON_IsTrue(bf);
    int64_t unk = -1;
    if (unigram) {
        f->model_type = TFM__SPM_UNIGRAM;
        st = unigram_vocab(item(model, "vocab"), path, f);
        const cJSON *u = item(model, "unk_id");
        if (st == TFM_OK && !cJSON_IsNumber(u))
            st = tfm__fail(TFM_ERR_FORMAT, "%.200s: the Unigram model has no "
                           "\"unk_id\"", path);
        if (st != TFM_OK)
            return st;
        unk = (int64_t)u->valuedouble;
        if ((double)unk != u->valuedouble || unk < 0 || unk >= f->vocab.size)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: unk_id %.0f is not an "
                             "id of the vocabulary", path, u->valuedouble);
        r->fuse_unk = 1;  /* Hugging Face's Unigram always fuses */
    } else {
        f->model_type = TFM__SPM_BPE;
        const cJSON *cs = item(model, "continuing_subword_prefix");
        const cJSON *es = item(model, "end_of_word_suffix");
        const cJSON *dr = item(model, "dropout");
        if ((cs && !cJSON_IsNull(cs) && !string_is(cs, "")) ||
            (es && !cJSON_IsNull(es) && !string_is(es, "")) ||
            (dr && !cJSON_IsNull(dr)) ||
            cJSON_IsTrue(item(model, "ignore_merges")))
            return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: BPE with a subword "
                             "prefix or suffix, dropout or ignore_merges is "
                             "not supported", path);
        st = tfm__vocab_from_json(&f->vocab, item(model, "vocab"), path);
        int64_t missing = st == TFM_OK ? tfm__vocab_first_missing(&f->vocab)
                                       : -1;
        if (st == TFM_OK && missing >= 0)
            st = tfm__fail(TFM_ERR_FORMAT, "%.200s: the vocabulary has no "
                           "token of id %lld", path, (long long)missing);
        if (st == TFM_OK)
            st = tfm__merges_from_json(&r->merges, &f->vocab,
                                       item(model, "merges"), path);
        if (st != TFM_OK)
            return st;
        f->scores = tfm__calloc((size_t)f->vocab.size, sizeof *f->scores);
        if (!f->scores)
            return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
        const cJSON *u = item(model, "unk_token");
        if (cJSON_IsString(u))
            unk = tfm__vocab_find(&f->vocab, u->valuestring,
                                  strlen(u->valuestring));
        if (unk < 0)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: the BPE model's "
                             "unk_token is not in its vocabulary", path);
        r->fuse_unk = cJSON_IsTrue(item(model, "fuse_unk"));
    }
    f->types = tfm__malloc((size_t)f->vocab.size);
    if (!f->types)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < f->vocab.size; i++)
        f->types[i] = f->byte_fallback &&
                              is_byte_piece(f->vocab.tokens[i],
                                            f->vocab.lengths[i])
                          ? TFM__SPM_BYTE : TFM__SPM_NORMAL;
    /* Added tokens: special ones control pieces, others user-defined. */
    const cJSON *added = item(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: \"added_tokens\" is not an "
                         "array", path);
    for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e;
         e = e->next) {
        const cJSON *id = item(e, "id"), *content = item(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content))
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: an added token lacks "
                             "its \"id\" or \"content\"", path);
        int32_t found = tfm__vocab_find(&f->vocab, content->valuestring,
                                        strlen(content->valuestring));
        if (found < 0 || (double)found != id->valuedouble)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: added token \"%.60s\" "
                             "(id %.0f) is not the vocabulary's token of that "
                             "id", path, content->valuestring,
                             id->valuedouble);
        f->types[found] = cJSON_IsFalse(item(e, "special"))
                              ? TFM__SPM_USER_DEFINED : TFM__SPM_CONTROL;
    }
    f->types[unk] = TFM__SPM_UNKNOWN;
    f->unk_id = (int32_t)unk;
    /* Hugging Face's decoders write the unknown token as its text
     * ("<unk>"), not sentencepiece's " \u2047 ". */
    f->unk_surface_len = f->vocab.lengths[unk];
    f->unk_surface = tfm__malloc(f->unk_surface_len + 1);
    if (!f->unk_surface)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(f->unk_surface, f->vocab.tokens[unk], f->unk_surface_len + 1);
    f->bos_id = f->eos_id = f->pad_id = -1;
    static const char *const ROLE_NAMES[3] = { "<s>", "</s>", "<pad>" };
    int32_t *role_ids[3] = { &f->bos_id, &f->eos_id, &f->pad_id };
    for (int k = 0; k < 3; k++) {
        int32_t id = tfm__vocab_find(&f->vocab, ROLE_NAMES[k],
                                     strlen(ROLE_NAMES[k]));
        if (id >= 0 && f->types[id] == TFM__SPM_CONTROL)
            *role_ids[k] = id;
    }
    return TFM_OK;
}

tfm_status tfm__spm_from_json(const cJSON *root, const char *path,
                              tfm_tokenizer **out)
{
    const cJSON *model = item(root, "model");
    int unigram = is_type(model, "Unigram");
    tfm__spm_file f;
    memset(&f, 0, sizeof f);
    tfm__spm_rules r;
    memset(&r, 0, sizeof r);
    tfm_status st = read_model(root, model, unigram, path, &f, &r);
    if (st == TFM_OK)
        st = read_pipeline(root, unigram, path, &f, &r);
    if (st == TFM_OK)
        st = read_template(root, &f.vocab, path, &f, &r);
    if (st != TFM_OK) {
        tfm__spm_file_free(&f);
        tfm__merges_free(&r.merges);
        return st;
    }
    return tfm__spm_tokenizer_new(&f, &r, path, out);
}
