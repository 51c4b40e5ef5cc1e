/*
 * libtransformer: Transformer building blocks in C on OpenBLAS.
 *
 * The umbrella header; include this one.  A tour:
 *
 *   #include <transformer/transformer.h>
 *
 *   tfm_module *mha;
 *   if (tfm_mha_create(512, 8, 0, 0, 1, &mha) != TFM_OK)   // d_model 512, 8 heads
 *       fprintf(stderr, "%s\n", tfm_last_error());
 *   // load weights by PyTorch name: "in_proj_weight" [1536, 512], ...
 *   tfm_module_set_parameter(mha, "in_proj_weight", w);
 *   int64_t shape[3] = { batch, seq, 512 };
 *   tfm_tensor *x, *y;
 *   tfm_tensor_wrap(3, shape, my_floats, &x);                 // no copy
 *   tfm_tensor_create(3, shape, &y);
 *   tfm_attention_masks masks = { .causal = TFM_CAUSAL_TOP_LEFT };
 *   tfm_status st = tfm_mha_forward(mha, x, x, x, &masks, y, NULL);
 *   ...
 *   tfm_tensor_free(x); tfm_tensor_free(y); tfm_module_free(mha);
 *
 * Conventions: opaque handles with create/free pairs (free(NULL) is a
 * no-op); every fallible call returns a tfm_status and, on error, leaves
 * its outputs unchanged and sets the thread's tfm_last_error() message;
 * data is float32, row-major, batch first [batch, seq, d_model]; the
 * library never aborts, exits or prints.
 *
 *   version.h      version macros and their run-time twins
 *   status.h       status codes, error messages
 *   tensor.h       tensors
 *   module.h       modules, named parameters, sub-modules, MAC counts,
 *                  initialisation
 *   attention.h    scaled dot-product attention, masks, multi-head attention,
 *                  attention variants (tfm_attention_config: scores, GQA/MQA,
 *                  RoPE, relative positions, sparse patterns) and their
 *                  functional form
 *   layers.h       LayerNorm, Linear, feed-forward, encoder/decoder layers
 *                  and stacks, cross-attention block, encoder-decoder
 *                  Transformer; with or without biases (tfm_layer_options
 *                  and the _v2 constructors)
 *   embedding.h    token embeddings, sinusoidal positional encodings
 *   safetensors.h  reading and writing safetensors files
 *   model.h        whole models, model files, KV cache, sampling, generation
 *   tokenizer.h    character-level, byte-level BPE and WordPiece tokenizers
 *   names.h        the string names of the enums (tfm_enum_name)
 *   training.h     losses (cross-entropy with ignore_index and label
 *                  smoothing, the causal LM loss), BERT's masked-LM inputs,
 *                  optimizers (SGD, Adam, AdamW), clipping, LR schedules
 *   variants.h     compatibility include for 1.1.0 programs (declares
 *                  nothing; its contents are in attention.h, layers.h and
 *                  embedding.h)
 */
#ifndef TRANSFORMER_TRANSFORMER_H
#define TRANSFORMER_TRANSFORMER_H

#include "version.h"
#include "status.h"
#include "tensor.h"
#include "module.h"
#include "attention.h"
#include "layers.h"
#include "embedding.h"
#include "safetensors.h"
#include "weights.h"
#include "model.h"
#include "tokenizer.h"
#include "names.h"
#include "training.h"

#endif /* TRANSFORMER_TRANSFORMER_H */
