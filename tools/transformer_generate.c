/* transformer-generate: generation, translation, mask filling and image
 * classification with a model file or a Hugging Face checkpoint directory.
 *
 *   transformer-generate [--model FILE] [--prompt TEXT] [--max-tokens N]
 *                        [--temperature T] [--top-k K] [--top-p P]
 *                        [--seed S] [--sample] [--greedy] [--threads N]
 *                        [--stop TEXT]... [--eos-token-id ID]...
 *                        [--min-new-tokens N] [--repetition-penalty R]
 *                        [--no-repeat-ngram-size N] [--past-context MODE]
 *                        [--batch-file FILE] [--dtype TYPE]
 *                        [--save-model OUT] [--help] [--version]
 *
 * Loads a model and its tokenizer from one model file (the shipped
 * character-level model) or a checkpoint directory (GPT-2, Llama, BERT,
 * Marian, ViT), prints the prompt, then each generated token as soon as it is
 * produced, through a tfm_generator (model.h): tfm_generator_create
 * prefills the prompt (timed as the prefill), each tfm_generator_next
 * makes one token (timed as decoding) until a stop condition.  stdout is
 * therefore exactly the prompt followed by what tfm_model_generate_v2
 * returns for the same model, prompt and options (and a final newline);
 * timings,
 * a line describing the model (positional encoding and attention variant,
 * from the file's metadata: model.h, variants.h) and the OpenBLAS core go
 * to stderr.
 *
 * With --dtype TYPE the weights are kept in TYPE (tfm_model_load_v2,
 * weights.h); with --save-model OUT the model so loaded is written to the
 * model file OUT and nothing is generated.
 *
 * With --batch-file FILE every line of FILE is a prompt, and all of them
 * are generated together (tfm_model_generate_batch); stdout gets one line
 * per prompt, in order: the prompt and its generated text, with each
 * newline of them written as the two characters \n and each backslash as
 * \\, so that every result stays on its line.
 *
 * With --fill-mask TEXT the model is a masked LM (an encoder-only model,
 * e.g. a BERT checkpoint directory): TEXT is encoded with the
 * tokenizer's framing ([CLS] ... [SEP]), and for each [MASK] in it the
 * top predictions (5, or --top-k K) are printed, as Hugging Face's
 * fill-mask pipeline gives them: one line each, the probability (softmax
 * over the vocabulary), a tab, the token (decoded alone), a tab, and the
 * text with the mask replaced (special tokens left out when it has one
 * mask; with several, the others stay, as the pipeline shows them).
 *
 * With --translate TEXT the model is an encoder-decoder (a Marian /
 * opus-mt checkpoint directory): TEXT is the source, encoded with the
 * directory's tokenizer (</s> appended), and the translation is printed,
 * one line, special tokens left out, as transformers'
 * MarianMTModel.generate decodes it: beam search (tfm_model_beam_search)
 * with config.json's generation defaults -- generation_config.json's when
 * there is one -- num_beams (1 when absent; --num-beams N overrides),
 * max_new_tokens, else max_length (20 when absent) less the decoder start
 * (--max-tokens overrides; the context bounds it), decoder_start_token_id,
 * eos_token_id (or one --eos-token-id), forced_eos_token_id, and
 * suppress_tokens and bad_words_ids of single ids never generated
 * (Marian's pad); --min-new-tokens as in generation.
 *
 * With --classify IMAGE the model is an image classifier (a ViT
 * checkpoint directory): the PNG or JPEG file IMAGE is decoded by libpng
 * or libjpeg, resized (bilinear) and normalised as the directory's
 * preprocessor_config.json says (ViTImageProcessor's defaults when
 * absent), and the top 5 (or --top-k K) classes are printed, one line
 * each: the probability (softmax over the labels), a tab, the label from
 * config.json's id2label. */
#include <cJSON.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <transformer/transformer.h>

#include "base/number_parse.h"

#ifndef TFM_DEFAULT_MODEL
#error "TFM_DEFAULT_MODEL (absolute path of the default model) must be defined"
#endif

#define PROGRAM "transformer-generate"

#include "cli_args.h"
#include "json_file.h"
#include "image_input.h"
#include "generate_batch_file.h"
#include "generate_options.h"
#include "generate_report.h"
#include "generate_translate.h"

/* ---- Generation ------------------------------------------------------- */

/* Prints the text of id (flushed). */
static int emit(const tfm_tokenizer *tok, int32_t id)
{
    char text[64];
    size_t len;
    if (tfm_tokenizer_decode_v2(tok, &id, 1, 0, text, sizeof text, &len) !=
        TFM_OK)
        return fail("cannot decode token %d: %s", id, tfm_last_error());
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* The library's options for the command line's. */
static void generate_options(const options *o, const tfm_tokenizer *tok,
                             tfm_generate_options *g)
{
    tfm_generate_options_init(g);
    g->max_new_tokens = o->max_tokens;
    g->min_new_tokens = o->min_new_tokens;
    g->sampling = o->sampling;
    g->seed = o->seed;
    g->eos_token_ids = o->eos;
    g->n_eos_token_ids = o->n_eos;
    g->stop_strings = o->stops;
    g->n_stop_strings = o->n_stops;
    g->tokenizer = tok;
    g->repetition_penalty = o->repetition_penalty;
    g->no_repeat_ngram_size = o->no_repeat_ngram_size;
    g->past_context = o->past_context;
}

/* Generates with a tfm_generator, printing each token as it comes. */
static int generate(const tfm_module *model, const tfm_tokenizer *tok,
                    const int32_t *prompt, int64_t n_prompt,
                    const options *o, timings *tm)
{
    tfm_model_config cfg;
    if (tfm_model_get_config(model, &cfg) != TFM_OK)
        return fail("%s", tfm_last_error());
    tfm_generate_options g;
    generate_options(o, tok, &g);

    /* What the generator does past the context (model.h:
     * tfm_past_context): a model that takes a rolling cache rolls. */
    tfm_kv_cache *probe = NULL;
    const int rolls = g.past_context == TFM_PAST_CONTEXT_AUTO &&
                      tfm_kv_cache_create_rolling(model, 1, &probe) == TFM_OK;
    tfm_kv_cache_free(probe);
    const int64_t ctx = cfg.context_length;
    tm->kept = g.past_context == TFM_PAST_CONTEXT_REENCODE ? ctx
                                                          : ctx - ctx / 2;
    int64_t held = n_prompt < ctx ? n_prompt : ctx;   /* the cache's */

    tfm_generator *gen = NULL;
    double t0 = now_seconds();
    if (tfm_generator_create(model, prompt, n_prompt, &g, &gen) != TFM_OK)
        return fail("%s", tfm_last_error());
    tm->prefill_tokens = n_prompt;
    tm->prefill_s = now_seconds() - t0;
    int rc = 1;
    for (;;) {
        int32_t id;
        int produced;
        t0 = now_seconds();
        tfm_status st = tfm_generator_next(gen, &id, &produced);
        tm->decode_s += now_seconds() - t0;
        if (st != TFM_OK) {
            fputc('\n', stdout);
            fail("decoding failed: %s", tfm_last_error());
            goto done;
        }
        if (!produced)
            break;
        /* Every step after the first runs the previous token; once the
         * cache holds the context, that rolls it or re-encodes a window
         * (the generator's rule). */
        if (tm->tokens > 0) {
            if (held < ctx)
                held++;
            else if (rolls)
                tm->rolled++;
            else {
                tm->slides++;
                held = tm->kept;
            }
        }
        tm->tokens++;
        if (emit(tok, id))
            goto done;
    }
    tm->reason = tfm_generator_stop_reason(gen);
    rc = 0;
done:
    tfm_generator_free(gen);
    return rc;
}


/* ---- Batch mode (--batch-file) -------------------------------------- */

/* *ids (malloc'ed) and *n: the tokens of text[len]. */
static int encode(const tfm_tokenizer *tok, const char *text, size_t len,
                  int32_t **ids, int64_t *n)
{
    tfm_status st = tfm_tokenizer_encode(tok, text, len, NULL, 0, n);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY)
        return fail("the prompt cannot be encoded: %s", tfm_last_error());
    *ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof **ids);
    if (!*ids)
        return fail("out of memory");
    if (*n > 0 && tfm_tokenizer_encode(tok, text, len, *ids, *n, n) != TFM_OK)
        return fail("the prompt cannot be encoded: %s", tfm_last_error());
    return 0;
}

/* Writes bytes with newlines as \n and backslashes as \\. */
static void put_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n')
            fputs("\\n", stdout);
        else if (s[i] == '\\')
            fputs("\\\\", stdout);
        else
            fputc(s[i], stdout);
    }
}


/* --batch-file: every line a prompt, generated together; one line out per
 * prompt. */
static int generate_file(const tfm_module *model, const tfm_tokenizer *tok,
                         const options *o)
{
    char *text = NULL, **lines = NULL;
    int64_t B = 0;
    if (read_lines(o->batch_file, &text, &lines, &B))
        return 1;
    int rc = 1;
    int32_t **ids = calloc((size_t)(B > 0 ? B : 1), sizeof *ids);
    int64_t *n_ids = calloc((size_t)(B > 0 ? B : 1), sizeof *n_ids);
    int64_t *n_out = calloc((size_t)(B > 0 ? B : 1), sizeof *n_out);
    tfm_stop_reason *why = calloc((size_t)(B > 0 ? B : 1), sizeof *why);
    int32_t *out = NULL;
    int64_t n_all = 0;
    tfm_model_config cfg;
    if (tfm_model_get_config(model, &cfg) != TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    const int64_t ctx = cfg.context_length;
    if (__builtin_mul_overflow(B, o->max_tokens, &n_all) ||
        (uint64_t)n_all > SIZE_MAX / sizeof(int32_t)) {
        fail("--batch-file: %lld lines x --max-tokens %lld tokens do not fit "
             "in memory", (long long)B, (long long)o->max_tokens);
        goto done;
    }
    out = malloc((size_t)(n_all > 0 ? n_all : 1) * sizeof *out);
    if (!ids || !n_ids || !n_out || !why || !out) {
        fail("out of memory");
        goto done;
    }
    if (B == 0) {
        fail("--batch-file '%s' has no lines", o->batch_file);
        goto done;
    }
    for (int64_t i = 0; i < B; i++) {
        if (encode(tok, lines[i], strlen(lines[i]), &ids[i], &n_ids[i]))
            goto done;
        if (n_ids[i] == 0) {
            fail("--batch-file '%s': line %lld is empty", o->batch_file,
                 (long long)(i + 1));
            goto done;
        }
        /* longer than the context: its last context tokens, as
         * tfm_model_generate takes a long prompt */
        if (n_ids[i] > ctx) {
            memmove(ids[i], ids[i] + n_ids[i] - ctx,
                    (size_t)ctx * sizeof *ids[i]);
            n_ids[i] = ctx;
        }
    }
    tfm_generate_options g;
    generate_options(o, tok, &g);
    const double t0 = now_seconds();
    if (tfm_model_generate_batch(model, (const int32_t *const *)ids, n_ids,
                                 B, &g, out, n_out, why) != TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    const double seconds = now_seconds() - t0;
    int64_t total = 0, counts[5] = { 0 };
    for (int64_t i = 0; i < B; i++) {
        size_t len = 0, cap = (size_t)n_out[i] * 8 + 1;
        char *s = malloc(cap);
        if (!s) {
            fail("out of memory");
            goto done;
        }
        tfm_status st = tfm_tokenizer_decode_v2(tok, out + i * o->max_tokens,
                                                n_out[i], 0, s, cap, &len);
        if (st == TFM_ERR_CAPACITY) {
            char *more = realloc(s, len + 1);
            if (!more) {
                free(s);
                fail("out of memory");
                goto done;
            }
            s = more;
            st = tfm_tokenizer_decode_v2(tok, out + i * o->max_tokens,
                                         n_out[i], 0, s, len + 1, &len);
        }
        if (st != TFM_OK) {
            free(s);
            fail("cannot decode line %lld's tokens: %s", (long long)(i + 1),
                 tfm_last_error());
            goto done;
        }
        put_escaped(lines[i], strlen(lines[i]));
        put_escaped(s, len);
        fputc('\n', stdout);
        free(s);
        total += n_out[i];
        if ((int)why[i] >= 0 && (int)why[i] < 5)
            counts[why[i]]++;
    }
    fflush(stdout);
    fprintf(stderr, "batch: %lld prompts, %lld tokens generated in %.3f ms "
            "(%.1f tokens/s, prefills included)\n", (long long)B,
            (long long)total, 1e3 * seconds,
            seconds > 0 ? (double)total / seconds : 0.0);
    fprintf(stderr, "stopped: %lld at max-tokens, %lld at an end-of-sequence "
            "token, %lld at a stop string\n", (long long)counts[1],
            (long long)counts[2], (long long)counts[3]);
    report_model(model);
    fprintf(stderr, "threads: %d\n", tfm_get_num_threads());
    const char *core = openblas_get_corename();
    fprintf(stderr, "OpenBLAS core: %s\n", core ? core : "unknown");
    rc = 0;
done:
    if (ids)
        for (int64_t i = 0; i < B; i++)
            free(ids[i]);
    free(ids);
    free(n_ids);
    free(n_out);
    free(why);
    free(out);
    free(lines);
    free(text);
    return rc;
}


/* --fill-mask: the top predictions of every [MASK] of o->fill_mask. */
static int fill_mask(const tfm_module *model, const tfm_tokenizer *tok,
                     const options *o, int64_t vocab)
{
    const int64_t top = o->top_k_option && o->sampling.top_k > 0
                            ? o->sampling.top_k
                            : 5;
    const int64_t k_max = top < vocab ? top : vocab;
    const unsigned flags = TFM_ENCODE_ADD_SPECIAL | TFM_ENCODE_SPLIT_SPECIAL;
    const char *text = o->fill_mask;
    int32_t mask;
    if (tfm_tokenizer_special_id(tok, "mask", &mask) != TFM_OK)
        return fail("the tokenizer has no mask token: %s", tfm_last_error());
    int64_t n = 0;
    tfm_status st = tfm_tokenizer_encode_v2(tok, text, strlen(text), NULL, 0,
                                            flags, NULL, NULL, NULL, 0, &n);
    if (st != TFM_ERR_CAPACITY && st != TFM_OK)
        return fail("the text cannot be encoded: %s", tfm_last_error());
    int rc = 1;
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    int64_t *best = malloc((size_t)k_max * sizeof *best);
    tfm_tensor *logits = NULL;
    if (!ids || !best) {
        fail("out of memory");
        goto done;
    }
    if (tfm_tokenizer_encode_v2(tok, text, strlen(text), NULL, 0, flags, ids,
                                NULL, NULL, n, &n) != TFM_OK) {
        fail("the text cannot be encoded: %s", tfm_last_error());
        goto done;
    }
    int64_t n_masks = 0;
    for (int64_t i = 0; i < n; i++)
        n_masks += ids[i] == mask;
    if (n_masks == 0) {
        fail("the text has no mask token; write it where the model is to "
             "predict, e.g. \"Paris is the [MASK] of France.\"");
        goto done;
    }
    if (tfm_tensor_create(3, (const int64_t[]){ 1, n, vocab }, &logits) !=
            TFM_OK ||
        tfm_model_logits(model, ids, 1, n, logits) != TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    const float *x = tfm_tensor_data_const(logits);
    int64_t seen = 0;
    for (int64_t at = 0; at < n; at++) {
        if (ids[at] != mask)
            continue;
        const float *row = x + at * vocab;
        /* softmax in double, then the k largest by selection (k small) */
        double hi = row[0], sum = 0;
        for (int64_t v = 1; v < vocab; v++)
            hi = row[v] > hi ? row[v] : hi;
        for (int64_t v = 0; v < vocab; v++)
            sum += exp((double)row[v] - hi);
        for (int64_t k = 0; k < k_max; k++) {
            int64_t arg = -1;
            for (int64_t v = 0; v < vocab; v++) {
                int taken = 0;
                for (int64_t j = 0; j < k && !taken; j++)
                    taken = best[j] == v;
                if (!taken && (arg < 0 || row[v] > row[arg]))
                    arg = v;
            }
            best[k] = arg;
        }
        if (n_masks > 1)
            printf("%s[MASK] %lld:\n", seen ? "\n" : "",
                   (long long)(seen + 1));
        for (int64_t k = 0; k < k_max; k++) {
            const int32_t id = (int32_t)best[k];
            printf("%.4f\t", exp((double)row[id] - hi) / sum);
            if (put_decoded(tok, &id, 1, TFM_DECODE_SKIP_SPECIAL))
                goto done;
            putchar('\t');
            ids[at] = id;
            /* as the pipeline: the other masks stay visible, with the
             * framing, when there are several */
            if (put_decoded(tok, ids, n,
                            n_masks == 1 ? TFM_DECODE_SKIP_SPECIAL : 0))
                goto done;
            ids[at] = mask;
            putchar('\n');
        }
        seen++;
    }
    fflush(stdout);
    rc = 0;
done:
    tfm_tensor_free(logits);
    free(best);
    free(ids);
    return rc;
}


/* The model is of architecture `arch` (else "'MODEL' is not <what>") and
 * its vocabulary the tokenizer's; 1 with the message otherwise. */
static int check_model(const tfm_model_config *cfg, const tfm_tokenizer *tok,
                       const options *o, tfm_architecture arch,
                       const char *what)
{
    if (cfg->architecture != arch)
        return fail("'%s' is not %s", o->model, what);
    if (cfg->vocab_size != tfm_tokenizer_vocab_size(tok))
        return fail("'%s': the model has %lld tokens but the tokenizer %lld",
                    o->model, (long long)cfg->vocab_size,
                    (long long)tfm_tokenizer_vocab_size(tok));
    return 0;
}

/* --save-model: writes model (its weights in their stored types) to
 * o->save_model with the tokenizer and label metadata of a model file
 * (tfm.tokenizer, tfm.vocab, id2label); a checkpoint directory's or GGUF
 * file's tokenizer files are not carried over (said on stderr).  0 or 1. */
static int save_model(const tfm_module *model, const options *o)
{
    static const char *const carried[] = { "tfm.tokenizer", "tfm.vocab",
                                           "id2label" };
    const char *keys[3], *values[3];
    int n = 0;
    tfm_safetensors *f = NULL;
    if (tfm_safetensors_open(o->model, &f) == TFM_OK) {
        for (int i = 0; i < 3; i++) {
            const char *v = tfm_safetensors_metadata(f, carried[i]);
            if (v) {
                keys[n] = carried[i];
                values[n++] = v;
            }
        }
    } else {
        fprintf(stderr, PROGRAM ": note: '%s' is not a model file: its "
                "tokenizer is not written to '%s'\n", o->model,
                o->save_model);
    }
    const tfm_status st = tfm_model_save(model, o->save_model, n, keys,
                                         values);
    tfm_safetensors_close(f);
    if (st != TFM_OK)
        return fail("cannot write '%s': %s", o->save_model,
                    tfm_last_error());
    fprintf(stderr, PROGRAM ": wrote '%s' (%lld bytes of weights)\n",
            o->save_model, (long long)tfm_module_parameter_bytes(model));
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;

    tfm_set_num_threads((int)o.threads);   /* 0: one per processor */
    tfm_module *model = NULL;
    tfm_tokenizer *tok = NULL;
    int32_t *prompt = NULL;
    rc = 1;
    tfm_status st;
    if (o.dtype_option) { /* --dtype; else tfm_model_load's default */
        tfm_load_options lo;
        tfm_load_options_init(&lo);
        lo.dtype = o.dtype;
        st = tfm_model_load_v2(o.model, &lo, &model);
    } else {
        st = tfm_model_load(o.model, &model);
    }
    if (st != TFM_OK) {
        fail("cannot load model '%s': %s", o.model, tfm_last_error());
        if (st == TFM_ERR_IO)
            fprintf(stderr, "Give the model file with --model FILE or the "
                            MODEL_ENV " environment variable.\n");
        goto done;
    }
    if (o.save_model) {
        rc = save_model(model, &o);
        goto done;
    }
    if (o.classify) { /* an image model: no tokenizer */
        if (o.fill_mask || o.translate || o.batch_file) {
            fail("--classify takes an image, not --fill-mask, --translate "
                 "or --batch-file");
            goto done;
        }
        rc = classify_image(model, o.model, o.classify,
                            o.top_k_option && o.sampling.top_k > 0
                                ? o.sampling.top_k
                                : 5);
        goto done;
    }
    if (tfm_tokenizer_load(o.model, &tok) != TFM_OK) {
        fail("cannot load the tokenizer of '%s': %s", o.model,
             tfm_last_error());
        goto done;
    }
    tfm_model_config cfg;
    if (tfm_model_get_config(model, &cfg) != TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    if (o.fill_mask) {
        if (!check_model(&cfg, tok, &o, TFM_ARCH_ENCODER_ONLY,
                         "an encoder-only model (a masked LM such as BERT): "
                         "--fill-mask needs one"))
            rc = fill_mask(model, tok, &o, cfg.vocab_size);
        goto done;
    }
    if (o.translate) {
        if (o.sampling_option || o.n_stops || o.repetition_penalty != 1.0f ||
            o.no_repeat_ngram_size || o.batch_file || o.fill_mask) {
            fail("--translate is a beam search: it takes --num-beams, "
                 "--max-tokens, --min-new-tokens and one --eos-token-id, "
                 "not sampling, --stop, --repetition-penalty, "
                 "--no-repeat-ngram-size, --batch-file or --fill-mask");
            goto done;
        }
        if (!check_model(&cfg, tok, &o, TFM_ARCH_ENCODER_DECODER,
                         "an encoder-decoder model (a translation model such "
                         "as Marian): --translate needs one"))
            rc = translate(model, tok, &o, &cfg);
        goto done;
    }
    if (cfg.architecture != TFM_ARCH_DECODER_ONLY) {
        fail("'%s' is not a decoder-only model, it cannot generate text",
             o.model);
        goto done;
    }
    if (cfg.vocab_size != tfm_tokenizer_vocab_size(tok)) {
        fail("'%s': the model has %lld tokens but the tokenizer %lld",
             o.model, (long long)cfg.vocab_size,
             (long long)tfm_tokenizer_vocab_size(tok));
        goto done;
    }

    if (o.batch_file) {
        rc = generate_file(model, tok, &o);
        goto done;
    }

    size_t prompt_len = strlen(o.prompt);
    int64_t n_prompt = 0;
    st = tfm_tokenizer_encode(tok, o.prompt, prompt_len, NULL, 0,
                                         &n_prompt);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY) {
        fail("the prompt cannot be encoded: %s", tfm_last_error());
        goto done;
    }
    if (n_prompt == 0) {
        fail("the prompt is empty; give at least one character");
        goto done;
    }
    prompt = malloc((size_t)n_prompt * sizeof *prompt);
    if (!prompt) {
        fail("out of memory");
        goto done;
    }
    if (tfm_tokenizer_encode(tok, o.prompt, prompt_len, prompt, n_prompt,
                             &n_prompt) != TFM_OK) {
        fail("the prompt cannot be encoded: %s", tfm_last_error());
        goto done;
    }

    /* A prompt longer than the context: its last context_length tokens
     * are the model's input, as tfm_model_generate takes a long prompt
     * (the whole prompt is printed). */
    const int64_t skipped = n_prompt > cfg.context_length
                                ? n_prompt - cfg.context_length
                                : 0;
    if (skipped)
        fprintf(stderr, PROGRAM ": note: the prompt has %lld tokens, more "
                "than the context: its last %lld are the model's input\n",
                (long long)n_prompt, (long long)cfg.context_length);
    fputs(o.prompt, stdout);
    fflush(stdout);
    timings tm = { 0, 0.0, 0, 0, 0, 0, 0.0, TFM_STOP_MAX_NEW_TOKENS };
    if (generate(model, tok, prompt + skipped, n_prompt - skipped, &o, &tm))
        goto done;
    fputc('\n', stdout);
    fflush(stdout);
    report(model, &tm, &o);
    rc = 0;
done:
    free(prompt);
    tfm_tokenizer_free(tok);
    tfm_module_free(model);
    return rc;
}
