/* transformer-generate --translate: the beam search with a checkpoint
 * directory's generation defaults (tools/generate_translate.c). */
#ifndef TFM_TOOLS_GENERATE_TRANSLATE_H
#define TFM_TOOLS_GENERATE_TRANSLATE_H

#include <transformer/transformer.h>

#include "generate_options.h"

/* --translate: prints the beam search's best translation of
 * o->translate; 0, or 1 with a message printed. */
int translate(const tfm_module *model, const tfm_tokenizer *tok,
              const options *o, const tfm_model_config *cfg);

#endif
