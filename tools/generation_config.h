/* transformer-generate --translate's generation defaults: a checkpoint
 * directory's generation_config.json, else its config.json, read as
 * transformers' GenerationConfig reads them (the keys the beam search
 * applies; the others it cannot apply are noted on stderr).  Its own
 * header so that the fuzz harness tests/fuzz/fuzz_generation_config.c
 * reads the files exactly as the CLI does.  Static helpers for the
 * programs that include it, after cli_args.h and json_file.h. */
#ifndef TFM_TOOLS_GENERATION_CONFIG_H
#define TFM_TOOLS_GENERATION_CONFIG_H

#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <transformer/transformer.h>

/* The generation defaults of checkpoint directory dir (--translate). */
typedef struct generation_defaults {
    const char *file;                /* the file read */
    int64_t num_beams;               /* 0: absent */
    int64_t max_length;              /* absent: 20, transformers' */
    int64_t max_new_tokens;          /* -1: absent */
    int64_t min_length, min_new_tokens; /* -1: absent */
    double length_penalty;           /* absent: 1.0, transformers' */
    int early_stopping;              /* TFM_EARLY_STOPPING_*; absent:
                                      * FALSE */
    int renormalize_logits;          /* absent: 0 */
    int32_t decoder_start, eos, forced_eos; /* -1: absent; decoder_start
                                      * falls back to bos_token_id */
    int n_eos;                       /* eos_token_id's ids (a list: >1) */
    int32_t *suppress;               /* suppress_tokens and bad_words_ids'
                                      * single ids (malloc'd) */
    int64_t n_suppress;
} generation_defaults;

/* A whole number in 0 .. INT32_MAX, or -1. */
static int64_t json_id(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) ||
        v->valuedouble > INT32_MAX || v->valuedouble != floor(v->valuedouble))
        return -1;
    return (int64_t)v->valuedouble;
}

/* Reads dir's generation_config.json, else its config.json (as
 * transformers' GenerationConfig: the first when there is one); 1 with a
 * message when neither is JSON. */
static int read_generation_defaults(const char *dir, generation_defaults *g)
{
    memset(g, 0, sizeof *g);
    g->decoder_start = g->eos = g->forced_eos = -1;
    g->max_length = 20;
    g->max_new_tokens = g->min_length = g->min_new_tokens = -1;
    g->length_penalty = 1.0;
    g->early_stopping = TFM_EARLY_STOPPING_FALSE;
    char path[4096];
    int found = 0; /* without opening it: a FIFO would block the open */
    for (int k = 0; k < 2 && !found; k++) {
        g->file = k == 0 ? "generation_config.json" : "config.json";
        snprintf(path, sizeof path, "%s/%s", dir, g->file);
        found = access(path, F_OK) == 0;
    }
    if (!found)
        return fail("'%s' has no config.json: --translate needs a checkpoint "
                    "directory", dir);
    cJSON *root = NULL;
    if (read_json_object(path, &root))
        return 1;
    const int64_t beams = json_id(cJSON_GetObjectItem(root, "num_beams"));
    const int64_t max_length = json_id(cJSON_GetObjectItem(root,
                                                           "max_length"));
    g->num_beams = beams > 0 ? beams : 0;
    if (max_length >= 0)
        g->max_length = max_length;
    g->max_new_tokens = json_id(cJSON_GetObjectItem(root, "max_new_tokens"));
    g->min_length = json_id(cJSON_GetObjectItem(root, "min_length"));
    g->min_new_tokens = json_id(cJSON_GetObjectItem(root, "min_new_tokens"));
    const cJSON *lp = cJSON_GetObjectItem(root, "length_penalty");
    if (cJSON_IsNumber(lp))
        g->length_penalty = lp->valuedouble;
    const cJSON *es = cJSON_GetObjectItem(root, "early_stopping");
    if (cJSON_IsTrue(es))
        g->early_stopping = TFM_EARLY_STOPPING_TRUE;
    else if (cJSON_IsString(es) && strcmp(es->valuestring, "never") == 0)
        g->early_stopping = TFM_EARLY_STOPPING_NEVER;
    g->renormalize_logits =
        cJSON_IsTrue(cJSON_GetObjectItem(root, "renormalize_logits"));
    g->decoder_start = (int32_t)json_id(
        cJSON_GetObjectItem(root, "decoder_start_token_id"));
    if (g->decoder_start < 0) /* transformers falls back to the bos */
        g->decoder_start = (int32_t)json_id(
            cJSON_GetObjectItem(root, "bos_token_id"));
    /* What HF's generate would apply and the beam search has not: said,
     * not silently dropped. */
    static const char *const unapplied[] = {
        "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
        "num_beam_groups", "diversity_penalty"
    };
    for (size_t k = 0; k < sizeof unapplied / sizeof unapplied[0]; k++) {
        const cJSON *v = cJSON_GetObjectItem(root, unapplied[k]);
        if (cJSON_IsNumber(v) && v->valuedouble != 0 &&
            !(strcmp(unapplied[k], "num_beam_groups") == 0 &&
              v->valuedouble == 1))
            fprintf(stderr, PROGRAM ": note: %s's %s is not applied (the "
                    "beam search has no such processor)\n", g->file,
                    unapplied[k]);
    }
    const cJSON *rp = cJSON_GetObjectItem(root, "repetition_penalty");
    if (cJSON_IsNumber(rp) && rp->valuedouble != 1.0)
        fprintf(stderr, PROGRAM ": note: %s's repetition_penalty is not "
                "applied (the beam search has no such processor)\n", g->file);
    g->forced_eos = (int32_t)json_id(
        cJSON_GetObjectItem(root, "forced_eos_token_id"));
    const cJSON *eos = cJSON_GetObjectItem(root, "eos_token_id");
    if (cJSON_IsArray(eos)) { /* a list: one id is that id */
        g->n_eos = cJSON_GetArraySize(eos);
        g->eos = g->n_eos == 1 ? (int32_t)json_id(eos->child) : -1;
    } else {
        g->eos = (int32_t)json_id(eos);
        g->n_eos = g->eos >= 0;
    }
    /* suppress_tokens, then bad_words_ids' single ids (longer bad words:
     * said, as above) */
    const cJSON *sup = cJSON_GetObjectItem(root, "suppress_tokens");
    const cJSON *bad = cJSON_GetObjectItem(root, "bad_words_ids");
    const int n_listed = (cJSON_IsArray(sup) ? cJSON_GetArraySize(sup) : 0) +
                    (cJSON_IsArray(bad) ? cJSON_GetArraySize(bad) : 0);
    g->suppress = malloc((size_t)(n_listed > 0 ? n_listed : 1) *
                         sizeof *g->suppress);
    if (!g->suppress) {
        cJSON_Delete(root);
        return fail("out of memory");
    }
    for (const cJSON *e = cJSON_IsArray(sup) ? sup->child : NULL; e;
         e = e->next) {
        const int64_t id = json_id(e);
        if (id >= 0)
            g->suppress[g->n_suppress++] = (int32_t)id;
    }
    int longer = 0;
    for (const cJSON *b = cJSON_IsArray(bad) ? bad->child : NULL; b;
         b = b->next) {
        const int64_t id = cJSON_GetArraySize(b) == 1
                               ? json_id(cJSON_GetArrayItem(b, 0))
                               : -1;
        if (id >= 0)
            g->suppress[g->n_suppress++] = (int32_t)id;
        else
            longer = 1;
    }
    if (longer)
        fprintf(stderr, PROGRAM ": note: %s's bad_words_ids of several "
                "tokens are not applied (single ids are)\n", g->file);
    cJSON_Delete(root);
    return 0;
}

#endif
