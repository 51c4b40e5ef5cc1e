/* transformer-generate's reports: the timings, the model and the
 * machine on stderr, and decoded tokens on stdout
 * (tools/generate_report.c). */
#ifndef TFM_TOOLS_GENERATE_REPORT_H
#define TFM_TOOLS_GENERATE_REPORT_H

#include <stdint.h>

#include <transformer/transformer.h>

#include "generate_options.h"

/* OpenBLAS's name for the CPU kernels it picked (cblas.h of OpenBLAS). */
char *openblas_get_corename(void);

typedef struct timings {
    int64_t prefill_tokens;
    double prefill_s;        /* tfm_generator_create */
    int64_t tokens;          /* generated */
    int64_t slides;          /* steps that encoded a window afresh */
    int64_t rolled;          /* steps past the context on a rolling cache */
    int64_t kept;            /* tokens each slide encodes (ctx or ctx/2) */
    double decode_s;         /* every tfm_generator_next */
    tfm_stop_reason reason;
} timings;


/* One line on stderr: the architecture and sizes, the blocks, the
 * positions and the attention variant. */
void report_model(const tfm_module *model);
/* The run's report on stderr: prefill and decoding rates, why it stopped,
 * the sampling, the model (report_model), threads and OpenBLAS core. */
void report(const tfm_module *model, const timings *tm, const options *o);
/* Prints the decoded ids (tfm_tokenizer_decode_v2's flags); 1 on error
 * (message printed). */
int put_decoded(const tfm_tokenizer *tok, const int32_t *ids, int64_t n,
                unsigned flags);

#endif
