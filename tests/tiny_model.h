/*
 * Small model configurations, shared by the CMocka suites (through
 * test_util.h) and the fuzz harnesses (tests/fuzz), so it needs nothing but
 * the library: no CMocka.  Header-only (static inline).
 */
#ifndef TFM_TINY_MODEL_H
#define TFM_TINY_MODEL_H

#include <stdint.h>
#include <string.h>

#include <transformer/transformer.h>

/* A model configuration of the given architecture, layer, vocabulary,
 * layer count and context length, with learned positions and tied
 * embeddings; every other field zero.  Callers change what differs. */
static inline tfm_model_config tiny_model_config(tfm_architecture arch,
                                                 tfm_layer_config layer,
                                                 int64_t vocab_size,
                                                 int64_t n_layers,
                                                 int64_t context_length)
{
    tfm_model_config c;
    memset(&c, 0, sizeof c);
    c.architecture = arch;
    c.layer = layer;
    c.vocab_size = vocab_size;
    c.n_layers = n_layers;
    c.context_length = context_length;
    c.positional = TFM_POSITIONAL_LEARNED;
    c.tied_embeddings = 1;
    return c;
}

#endif /* TFM_TINY_MODEL_H */
