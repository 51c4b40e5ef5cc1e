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
 * "unk_id", "byte_fallback".  Decoders (Sequence[Replace, ByteFallback,
 * Fuse (with byte fallback), Strip], or Metaspace) are read into the rules
 * of sentencepiece_decode.c's tfm__spm_hf_decode.  Post-processor:
 * none, or TemplateProcessing "<s> $A" (pair "<s> $A <s> $B", Llama) or
 * "$A </s>" (pair "$A </s> $B </s>", T5), the framing of
 * TFM_ENCODE_ADD_SPECIAL.
 *
 * Added tokens must be special (control pieces; the unknown token its
 * unknown piece), as the converters make sentencepiece's control pieces;
 * <0xNN> pieces are byte pieces when the model has byte fallback.
 * docs/TOKENIZERS.md lists the Hugging Face rules followed where
 * sentencepiece's differ (WhitespaceSplit per word, Metaspace's prefix on
 * the normalized text, the decoders). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/alloc.h"
#include "base/error.h"
#include "tokenizers/sentencepiece/sentencepiece.h"

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

/* The steps of o: its "key" array when o is a Sequence, else o alone;
 * -1: more than max steps, -2: a Sequence without its array or with an
 * empty one (or a null step in it). */
static int steps(const cJSON *o, const char *key, const cJSON **out, int max)
{
    if (!is_type(o, "Sequence")) {
        out[0] = o;
        return 1;
    }
    const cJSON *list = item(o, key);
    if (!cJSON_IsArray(list) || !list->child)
        return -2;
    int n = 0;
    for (const cJSON *e = list->child; e; e = e->next) {
        if (n == max)
            return -1;
        if (!cJSON_IsObject(e))
            return -2;
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

static tfm_status bad_steps(const char *path, const char *what, int n)
{
    if (n == -2)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: the %s Sequence has no "
                         "list of steps", path, what);
    return unsupported(path, what, "Sequence (that long)");
}

/* RFC 4648 base64, padding optional.  Returns the byte count, or
 * (size_t)-1 when text is not base64.  out has room for 3/4 of len. */
static size_t base64_decode(const char *text, size_t len, char *out)
{
    static const char ALPHABET[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    /* Padding: at most two '=', and then the whole length is a multiple of
     * four. */
    size_t pad = 0;
    while (len > 0 && text[len - 1] == '=' && pad < 3) {
        len--;
        pad++;
    }
    if (pad > 2 || (pad && (len + pad) % 4) || len % 4 == 1)
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

/* The decoder, one of the two the converters write (anything else:
 * TFM_ERR_UNSUPPORTED):
 *   Llama's Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", n,
 *   0)] (Strip optional; ByteFallback and Fuse exactly when the model has
 *   byte fallback): the pieces joined, "▁" a space, byte pieces gathered
 *   into UTF-8, then up to n leading spaces removed;
 *   T5's Metaspace("▁"): "▁" a space, except that the first token loses
 *   every "▁" (unless prepend_scheme "never").
 * Control pieces decode to nothing (Hugging Face's skip_special_tokens). */
static tfm_status read_decoder(const cJSON *root, const char *path,
                               const tfm__spm_file *f, tfm__spm_rules *r)
{
    const cJSON *dec = item(root, "decoder");
    if (is_type(dec, "Metaspace")) {
        if (!string_is(item(dec, "replacement"), SPACE_SYMBOL) ||
            f->byte_fallback)
            return unsupported(path, "decoder", "Metaspace with another "
                               "replacement or with byte fallback");
        const cJSON *scheme = item(dec, "prepend_scheme");
        const cJSON *aps = item(dec, "add_prefix_space");
        r->decoder = TFM__SPM_DECODE_METASPACE;
        r->decoder_strip = scheme && !cJSON_IsNull(scheme)
                               ? !string_is(scheme, "never")
                               : !cJSON_IsFalse(aps);
        return TFM_OK;
    }
    const cJSON *ds[5];
    int n = steps(dec, "decoders", ds, 5);
    if (n == -2)
        return bad_steps(path, "decoder", n);
    if (!is_type(dec, "Sequence") || n < 1)
        return unsupported(path, "decoder", type_of(dec));
    for (int i = 0; i < n; i++) {
        const char *t = type_of(ds[i]);
        if (!t || (strcmp(t, "Replace") && strcmp(t, "ByteFallback") &&
                   strcmp(t, "Fuse") && strcmp(t, "Strip")))
            return unsupported(path, "decoder", t);
    }
    int k = 0, bytes = 0;
    if (!is_replace(ds[k++], SPACE_SYMBOL, " "))
        return unsupported(path, "decoder", "Sequence not starting with "
                           "Replace(\"\xe2\x96\x81\", \" \")");
    if (k + 1 < n && is_type(ds[k], "ByteFallback") &&
        is_type(ds[k + 1], "Fuse")) {
        bytes = 1;
        k += 2;
    }
    r->decoder = TFM__SPM_DECODE_STRIP;
    r->decoder_strip = 0;
    if (k < n && is_type(ds[k], "Strip")) {
        const cJSON *start = item(ds[k], "start"), *stop = item(ds[k], "stop");
        if (!string_is(item(ds[k], "content"), " ") ||
            !cJSON_IsNumber(start) || start->valuedouble < 0 ||
            start->valuedouble > 64 || !cJSON_IsNumber(stop) ||
            stop->valuedouble != 0)
            return unsupported(path, "decoder", "Strip other than (\" \", n, "
                               "0)");
        r->decoder_strip = (int)start->valuedouble;
        k++;
    }
    if (k != n || bytes != f->byte_fallback)
        return unsupported(path, "decoder", "Sequence other than Replace, "
                           "ByteFallback, Fuse (with byte fallback), Strip");
    return TFM_OK;
}

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
    if (n_norm < 0)
        return bad_steps(path, "normalizer", n_norm);
    if (n_pre < 0)
        return bad_steps(path, "pre_tokenizer", n_pre);
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
    if (n_norm > 0 && is_type(ns[0], "Precompiled") && !charsmap)
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: the Precompiled normalizer "
                         "has no precompiled_charsmap", path);
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
            /* Words split at (Unicode) whitespace, each with its prefix:
             * extra whitespace removed, as the .model's T5 rules, and the
             * model run on each word (rules.split_words).  Only Unigram,
             * each word prefixed ("always"), as T5's files have it. */
            if (!unigram)
                return unsupported(path, "pre_tokenizer", "WhitespaceSplit "
                                   "with a BPE model");
            if (r->prepend != TFM__SPM_PREPEND_METASPACE ||
                !f->add_dummy_prefix)
                return unsupported(path, "pre_tokenizer", "WhitespaceSplit "
                                   "+ Metaspace without prepend_scheme "
                                   "\"always\"");
            f->remove_extra_whitespaces = 1;
            r->split_words = 1;
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
    return read_decoder(root, path, f, r);
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
    /* The template's token has its role alone (a "$A <s>" template makes
     * <s> the eos token, not also the bos one). */
    if (f->bos_id == id && r->framing == TFM__FRAME_EOS)
        f->bos_id = -1;
    if (f->eos_id == id && r->framing == TFM__FRAME_BOS)
        f->eos_id = -1;
    if (f->pad_id == id)
        f->pad_id = -1;
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
        const double du = u->valuedouble;
        if (!(du >= 0 && du < (double)f->vocab.size) ||
            du != (double)(int64_t)du)
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: unk_id %g is not an id "
                             "of the vocabulary", path, du);
        unk = (int64_t)du;
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
    /* Added tokens: special ones, control pieces. */
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
        if (!cJSON_IsTrue(item(e, "special")))
            return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: added token "
                             "\"%.60s\" is not special: Hugging Face cuts "
                             "such tokens out of the text before its "
                             "normalizer, which this reader does not do",
                             path, content->valuestring);
        f->types[found] = TFM__SPM_CONTROL;
    }
    f->types[unk] = TFM__SPM_UNKNOWN;
    f->unk_id = (int32_t)unk;
    /* Hugging Face's BPE merges the symbols byte fallback and unknown
     * characters make too; here those never merge: refuse such merges. */
    for (size_t i = 0; !unigram && i < r->merges.n_slots; i++) {
        const tfm__merge *g = &r->merges.slots[i];
        if (g->key == UINT64_MAX)
            continue;
        const int32_t a = (int32_t)(g->key >> 32), b = (int32_t)g->key;
        const int32_t ids[3] = { a, b, g->merged };
        for (int k = 0; k < 3; k++)
            if (f->types[ids[k]] == TFM__SPM_BYTE || ids[k] == unk ||
                f->types[ids[k]] == TFM__SPM_CONTROL)
                return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: a merge of "
                                 "\"%.40s\" (a byte, unknown or special "
                                 "piece) is not supported", path,
                                 f->vocab.tokens[ids[k]]);
    }
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
