/* Hugging Face tokenizers' tokenizer.json (tokenizer.h): the model, the
 * added tokens, and the pipeline around the model, of which only what this
 * library implements is accepted (anything else: TFM_ERR_UNSUPPORTED, so a
 * file is never half-understood).
 *
 * Source: the format as Hugging Face tokenizers writes it
 * (tokenizers/src/tokenizer/serialization.rs): {"added_tokens": [{"id",
 * "content", "special", ...}], "normalizer", "pre_tokenizer",
 * "post_processor", "decoder", "model": {"type", ...}}. */
#include <string.h>

#include <cjson/cJSON.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json_check.h"
#include "tokenizers/sentencepiece/sentencepiece.h"
#include "tokenizers/tokenizer_impl.h"

/* The "type" of a pipeline step, "" for null or absent, NULL when it is
 * something else. */
static const char *step_type(const cJSON *root, const char *name)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!s || cJSON_IsNull(s))
        return "";
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static int is_step(const cJSON *root, const char *name, const char *type)
{
    const char *t = step_type(root, name);
    return t && strcmp(t, type) == 0;
}

static tfm_status unsupported(const char *path, const char *step,
                              const char *type)
{
    return tfm__fail(TFM_ERR_UNSUPPORTED,
                     "%.200s: %s \"%.60s\" is not supported with this model",
                     path, step, type ? type : "(no type)");
}

/* GPT-2's pipeline: ByteLevel without a prefix space, or nothing. */
static tfm_status check_byte_level(const cJSON *root, const char *path)
{
    const char *pre = step_type(root, "pre_tokenizer");
    if (!pre || strcmp(pre, "ByteLevel") != 0)
        return unsupported(path, "pre_tokenizer", pre);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space")))
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: ByteLevel with "
                         "add_prefix_space is not supported", path);
    if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(p, "use_regex")))
        return tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: ByteLevel without "
                         "GPT-2's pattern (use_regex false) is not "
                         "supported", path);
    const char *norm = step_type(root, "normalizer");
    if (!norm || norm[0])
        return unsupported(path, "normalizer", norm);
    const char *dec = step_type(root, "decoder");
    if (!dec || (dec[0] && strcmp(dec, "ByteLevel") != 0))
        return unsupported(path, "decoder", dec);
    const char *post = step_type(root, "post_processor");
    if (!post || (post[0] && strcmp(post, "ByteLevel") != 0))
        return unsupported(path, "post_processor", post);
    return TFM_OK;
}

/* BERT's pipeline: BertNormalizer (or none), BertPreTokenizer, the
 * WordPiece decoder (or none), [CLS] A [SEP] framing (or none). */
static tfm_status check_bert(const cJSON *root, const char *path)
{
    const char *norm = step_type(root, "normalizer");
    if (!norm || (norm[0] && strcmp(norm, "BertNormalizer") != 0))
        return unsupported(path, "normalizer", norm);
    const char *pre = step_type(root, "pre_tokenizer");
    if (!pre || strcmp(pre, "BertPreTokenizer") != 0)
        return unsupported(path, "pre_tokenizer", pre);
    const char *dec = step_type(root, "decoder");
    if (!dec || (dec[0] && strcmp(dec, "WordPiece") != 0))
        return unsupported(path, "decoder", dec);
    const char *post = step_type(root, "post_processor");
    if (!post || (post[0] && strcmp(post, "TemplateProcessing") != 0 &&
                  strcmp(post, "BertProcessing") != 0))
        return unsupported(path, "post_processor", post);
    return TFM_OK;
}

/* "added_tokens": each must be in the vocabulary under its id. */
static tfm_status added_tokens(tfm_tokenizer *t, const cJSON *root,
                               const char *path)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!list || cJSON_IsNull(list))
        return TFM_OK;
    if (!cJSON_IsArray(list))
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: \"added_tokens\" is not an "
                         "array", path);
    const tfm__vocab *v = t->ops->vocab(t->model);
    for (const cJSON *e = list->child; e; e = e->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content))
            return tfm__fail(TFM_ERR_FORMAT, "%.200s: an added token lacks "
                             "its \"id\" or \"content\"", path);
        double d = id->valuedouble;
        int32_t found = tfm__vocab_find(v, content->valuestring,
                                        strlen(content->valuestring));
        if (found < 0 || (double)found != d)
            return tfm__fail(TFM_ERR_FORMAT,
                             "%.200s: added token \"%.60s\" (id %.0f) is not "
                             "the vocabulary's token of that id",
                             path, content->valuestring, d);
        int role = tfm__role_of_token(content->valuestring);
        tfm_status st = tfm__tokenizer_add_special(t, found, NULL, 0, role);
        if (st == TFM_OK && strcmp(content->valuestring, "<|endoftext|>") == 0) {
            t->roles[TFM__ROLE_BOS] = found;  /* as GPT2Tokenizer */
            t->roles[TFM__ROLE_UNK] = found;
        }
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

tfm_status tfm__tokenizer_json_load(const char *path, tfm_tokenizer **out)
{
    cJSON *root = NULL;
    tfm_status st = tfm__json_read_object(path, TFM__FILE_MAX_TOKENIZER,
                                          &root);
    if (st != TFM_OK)
        return st;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    tfm_tokenizer *t = NULL;
    int sentencepiece = 0;
    if (!cJSON_IsObject(model)) {
        st = tfm__fail(TFM_ERR_FORMAT, "%.200s: no \"model\" object (not a "
                       "tokenizer.json)", path);
    } else if (!cJSON_IsString(type)) {
        st = tfm__fail(TFM_ERR_FORMAT, "%.200s: the model has no \"type\"",
                       path);
    } else if ((strcmp(type->valuestring, "BPE") == 0 &&
                (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
                     model, "byte_fallback")) ||
                 is_step(root, "pre_tokenizer", "") ||
                 is_step(root, "pre_tokenizer", "Metaspace"))) ||
               strcmp(type->valuestring, "Unigram") == 0) {
        /* Llama's and T5's: SentencePiece models (sentencepiece_json.c),
         * whose added tokens are read there. */
        st = tfm__spm_from_json(root, path, &t);
        sentencepiece = 1;
    } else if (strcmp(type->valuestring, "BPE") == 0) {
        st = check_byte_level(root, path);
        if (st == TFM_OK)
            st = tfm__bpe_from_json(model, path, &t);
    } else if (strcmp(type->valuestring, "WordPiece") == 0) {
        st = check_bert(root, path);
        if (st == TFM_OK)
            st = tfm__wordpiece_from_json(root, model, path, &t);
        if (st == TFM_OK && step_type(root, "post_processor")[0] == '\0')
            t->framing = TFM__FRAME_NONE;
    } else {
        st = tfm__fail(TFM_ERR_UNSUPPORTED, "%.200s: model type \"%.40s\" is "
                       "not supported", path, type->valuestring);
    }
    if (st == TFM_OK && !sentencepiece)
        st = added_tokens(t, root, path);
    cJSON_Delete(root);
    if (st != TFM_OK) {
        tfm_tokenizer_free(t);
        return st;
    }
    *out = t;
    return TFM_OK;
}
