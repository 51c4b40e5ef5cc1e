# The library's sources, one list for every build that compiles src/:
# the shared library (src/CMakeLists.txt), the fuzz targets
# (tests/fuzz/CMakeLists.txt) and the layering check (tests/layering.cmake).
#
# TFM_LAYERS is the layering, lowest first, written once: a file in one
# folder may include headers of its own folder and of the folders before it,
# never of a folder after it (ctest: layering).  A subfolder belongs to the
# layer of its first path component.  docs/ARCHITECTURE.md describes each.
# Paths are relative to src/.  src/CMakeLists.txt fails the configure step
# when a .c file under src/ is in no list here.

set(TFM_LAYERS base kernels attention nn blocks training models generation tokenizers formats)

# base: status codes, allocation, tensors, workspace, thread pool, the one door to BLAS, float16, UTF-8, JSON, names, files
set(TFM_SOURCES_base
  base/alloc.c
  base/error.c
  base/file.c
  base/float16.c
  base/gemm.c
  base/json_check.c
  base/mapping.c
  base/names.c
  base/parallel.c
  base/tensor.c
  base/utf8.c
  base/version.c
  base/workspace.c
)

# kernels: plain loops on raw arrays: softmax, vector math, activations, RoPE, dropout masks, the Linear door, weight storage types (quantisation, widening, stored-weight products)
set(TFM_SOURCES_kernels
  kernels/activation.c
  kernels/dropout.c
  kernels/linear.c
  kernels/quant.c
  kernels/quant_linear.c
  kernels/rope.c
  kernels/softmax.c
  kernels/weight_store.c
)

# attention: the attention door, its kernel (forward and backward), scores, positions, masks, config, variants, tfm_sdpa
set(TFM_SOURCES_attention
  attention/attention_config.c
  attention/attention_backward.c
  attention/attention_job.c
  attention/attention_kernel.c
  attention/attention_masks.c
  attention/attention_positions.c
  attention/attention_scores.c
  attention/sdpa.c
  attention/variant.c
)

# nn: modules and their parameters, gradients, init; Linear, norms, feed-forward, embeddings, patch embedding, multi-head attention; the tape
set(TFM_SOURCES_nn
  nn/attention.c
  nn/embedding.c
  nn/feed_forward.c
  nn/init.c
  nn/layer_norm.c
  nn/linear.c
  nn/mha.c
  nn/mha_backward.c
  nn/mha_extra_kv.c
  nn/module.c
  nn/module_dropout.c
  nn/module_grad.c
  nn/patch_embedding.c
  nn/positional.c
  nn/tape.c
  nn/weight_bind.c
)

# blocks: residual sub-layers, encoder and decoder layers, cross-attention, stacks, nn.Transformer
set(TFM_SOURCES_blocks
  blocks/block_calls.c
  blocks/cross_attention.c
  blocks/decoder_layer.c
  blocks/encoder_layer.c
  blocks/layer_config.c
  blocks/nn_transformer.c
  blocks/residual.c
  blocks/stack.c
  blocks/sublayer.c
)

# training: losses, masked-LM inputs, optimizers, learning-rate schedules
set(TFM_SOURCES_training
  training/loss.c
  training/lr_schedule.c
  training/masked_lm.c
  training/optimizer.c
)

# models: decoder-only, encoder-only, encoder-decoder and image models
set(TFM_SOURCES_models
  models/model_backward.c
  models/model_create.c
  models/model_forward.c
  models/model_image.c
)

# generation: KV cache, sampling, logits processors, generation, batched generation, beam search
set(TFM_SOURCES_generation
  generation/beam_search.c
  generation/generate.c
  generation/generate_batch.c
  generation/kv_cache.c
  generation/logits_processors.c
  generation/sampling.c
)

# tokenizers: character, byte-level BPE, WordPiece, SentencePiece, Marian tokenizers; tokenizer.json; vocabularies
set(TFM_SOURCES_tokenizers
  tokenizers/bpe_merges.c
  tokenizers/sentencepiece/sentencepiece_bpe.c
  tokenizers/sentencepiece/sentencepiece_decode.c
  tokenizers/sentencepiece/sentencepiece_json.c
  tokenizers/sentencepiece/sentencepiece_model.c
  tokenizers/sentencepiece/sentencepiece_normalize.c
  tokenizers/sentencepiece/sentencepiece_unigram.c
  tokenizers/sentencepiece/tokenizer_sentencepiece.c
  tokenizers/tokenizer.c
  tokenizers/tokenizer_bpe.c
  tokenizers/tokenizer_encode.c
  tokenizers/tokenizer_files.c
  tokenizers/tokenizer_json.c
  tokenizers/tokenizer_marian.c
  tokenizers/tokenizer_wordpiece.c
  tokenizers/vocab.c
)

# formats: safetensors, GGUF, checkpoints, model files, Hugging Face hub directories (one file per family)
set(TFM_SOURCES_formats
  formats/checkpoint.c
  formats/gguf.c
  formats/gguf_tensors.c
  formats/gguf_values.c
  formats/hub/bert.c
  formats/hub/gpt2.c
  formats/hub/hub_config.c
  formats/hub/hub_model.c
  formats/hub/hub_plan.c
  formats/hub/hub_shards.c
  formats/hub/llama.c
  formats/hub/marian.c
  formats/hub/vit.c
  formats/load_options.c
  formats/model_file.c
  formats/model_file_weights.c
  formats/safetensors_read.c
  formats/safetensors_write.c
)

set(TFM_SOURCES)
foreach(_tfm_layer IN LISTS TFM_LAYERS)
  list(APPEND TFM_SOURCES ${TFM_SOURCES_${_tfm_layer}})
endforeach()
