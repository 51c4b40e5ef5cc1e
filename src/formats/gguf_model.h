/* Internal: GGUF v3 files as models (model.h tfm_model_load, weights.h
 * tfm_model_load_v2) and as tokenizers (tokenizer.h tfm_tokenizer_load). */
#ifndef TFM_SRC_GGUF_MODEL_H
#define TFM_SRC_GGUF_MODEL_H

#include "transformer/module.h"
#include "transformer/tokenizer.h"

/* Whether the file at path begins with GGUF's magic "GGUF" (0: not, or
 * unreadable; the caller's own reader then says why). */
int tfm__gguf_is_file(const char *path);

/* Loads the GGUF file at path (architectures "gpt2" and "llama") as a
 * decoder-only model.  keep_dtype: TFM_LOAD_DTYPE_AUTO (weights.h) keeps
 * each weight in its file type, else the type convertible weights are
 * stored in; use_mmap: weights kept in their file type are used where
 * they lie in a read-only mapping of the file, retained by the model.
 * Every tensor the configuration needs is checked (present, shape, type)
 * and none may be left over before the model is allocated.  Errors:
 * TFM_ERR_IO, TFM_ERR_FORMAT (a key or tensor missing or malformed,
 * named), TFM_ERR_UNSUPPORTED (another architecture, a feature this
 * library does not compute, a tensor type other than F32, F16, BF16, Q8_0,
 * Q4_0, named), TFM_ERR_INVALID_ARGUMENT, TFM_ERR_NON_FINITE,
 * TFM_ERR_OUT_OF_MEMORY.  On error *out is unchanged and nothing stays
 * mapped. */
tfm_status tfm__gguf_model_load(const char *path, int keep_dtype,
                                int use_mmap, tfm_module **out);

/* The tokenizer of the GGUF file at path, from its tokenizer.ggml.* keys:
 * model "gpt2" (byte-level BPE; pre-tokenizer "default" or "gpt-2") or
 * "llama" (SentencePiece BPE with byte fallback).  Errors: TFM_ERR_IO,
 * TFM_ERR_FORMAT, TFM_ERR_UNSUPPORTED (another tokenizer model or
 * pre-tokenizer, named), TFM_ERR_OUT_OF_MEMORY. */
tfm_status tfm__gguf_tokenizer_load(const char *path, tfm_tokenizer **out);

#endif
