/*
 * libtransformer: compatibility include for programs written against
 * 1.1.0, which declared the attention variants here.
 *
 * Since 1.2.0 every declaration lives with its concept: the variant enums,
 * tfm_attention_config and the functional form (tfm_attention_create /
 * _forward / _get_config) and tfm_mha_create_ex in attention.h,
 * tfm_encoder_layer_create_ex in layers.h, tfm_sinusoidal_layout and
 * tfm_sinusoidal_encoding_ex in embedding.h.  Including this header
 * includes those three; nothing is declared here.  New code includes
 * <transformer/transformer.h> or the header of the concept.
 */
#ifndef TRANSFORMER_VARIANTS_H
#define TRANSFORMER_VARIANTS_H

#include "attention.h"
#include "embedding.h"
#include "layers.h"

#endif /* TRANSFORMER_VARIANTS_H */
