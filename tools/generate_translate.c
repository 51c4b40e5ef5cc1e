/* transformer-generate --translate (generate_translate.h). */
#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <transformer/transformer.h>

#define PROGRAM "transformer-generate"
#include "cli_args.h"
#include "json_file.h"
#include "generate_report.h"
#include "generate_translate.h"
#include "generation_config.h"

/* --translate: the beam search's best translation of o->translate. */
int translate(const tfm_module *model, const tfm_tokenizer *tok,
              const options *o, const tfm_model_config *cfg)
{
    generation_defaults g;
    if (read_generation_defaults(o->model, &g))
        return 1;
    int rc = 1;
    int32_t *ids = NULL, *out = NULL;
    if (g.decoder_start < 0) {
        fail("'%s': %s has no decoder_start_token_id nor bos_token_id (a "
             "whole number >= 0), which --translate needs", o->model, g.file);
        goto done;
    }
    if (g.n_eos > 1 && o->n_eos == 0) {
        fail("'%s': %s gives %d eos_token_id values; the beam search takes "
             "one: give it with --eos-token-id", o->model, g.file, g.n_eos);
        goto done;
    }
    if (o->n_eos > 1) {
        fail("--translate takes one --eos-token-id");
        goto done;
    }
    if (o->max_tokens_option && o->max_tokens > TFM_MAX_NEW_TOKENS) {
        fail("--max-tokens %lld is over %lld", (long long)o->max_tokens,
             (long long)TFM_MAX_NEW_TOKENS);
        goto done;
    }
    const char *text = o->translate;
    int64_t n = 0;
    const unsigned flags = TFM_ENCODE_ADD_SPECIAL;
    tfm_status st = tfm_tokenizer_encode_v2(tok, text, strlen(text), NULL, 0,
                                            flags, NULL, NULL, NULL, 0, &n);
    if (st != TFM_ERR_CAPACITY && st != TFM_OK) {
        fail("the text cannot be encoded: %s", tfm_last_error());
        goto done;
    }
    tfm_beam_search_options bo;
    tfm_beam_search_options_init(&bo);
    bo.num_beams = o->num_beams ? o->num_beams
                   : g.num_beams ? g.num_beams : 1;
    /* max_new_tokens, else max_length, which counts the decoder start
     * token (transformers' rule); the context bounds both */
    int64_t max_new = o->max_tokens_option   ? o->max_tokens
                      : g.max_new_tokens >= 0 ? g.max_new_tokens
                                              : g.max_length - 1;
    if (!o->max_tokens_option && max_new > cfg->context_length)
        max_new = cfg->context_length;
    if (max_new < 1) { /* nothing to generate: an empty translation */
        putchar('\n');
        rc = 0;
        goto done;
    }
    bo.max_new_tokens = max_new;
    /* --min-new-tokens, else min_new_tokens, else min_length, which counts
     * the decoder start token */
    bo.min_new_tokens = o->min_new_tokens     ? o->min_new_tokens
                        : g.min_new_tokens >= 0 ? g.min_new_tokens
                        : g.min_length > 0      ? g.min_length - 1
                                                : 0;
    bo.length_penalty = g.length_penalty;
    bo.early_stopping = g.early_stopping;
    bo.renormalize_logits = g.renormalize_logits;
    bo.eos_token_id = o->n_eos ? o->eos[0] : g.eos;
    bo.forced_eos_token_id = g.forced_eos;
    bo.decoder_start_token_id = g.decoder_start;
    bo.suppress_tokens = g.suppress;
    bo.n_suppress_tokens = g.n_suppress;
    ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    out = malloc((size_t)(max_new > 0 ? max_new : 1) * sizeof *out);
    int64_t length = 0;
    if (!ids || !out) {
        fail("out of memory");
        goto done;
    }
    if (tfm_tokenizer_encode_v2(tok, text, strlen(text), NULL, 0, flags, ids,
                                NULL, NULL, n, &n) != TFM_OK) {
        fail("the text cannot be encoded: %s", tfm_last_error());
        goto done;
    }
    const double t0 = now_seconds();
    if (tfm_model_beam_search(model, ids, n, &bo, out, &length, NULL) !=
        TFM_OK) {
        fail("%s", tfm_last_error());
        goto done;
    }
    const double dt = now_seconds() - t0;
    if (put_decoded(tok, out, length, TFM_DECODE_SKIP_SPECIAL))
        goto done;
    putchar('\n');
    fflush(stdout);
    fprintf(stderr, "translation: %lld source tokens, %lld target tokens, "
            "%lld beams, %.3f s\n", (long long)n, (long long)length,
            (long long)bo.num_beams, dt);
    rc = 0;
done:
    free(out);
    free(ids);
    free(g.suppress);
    return rc;
}
