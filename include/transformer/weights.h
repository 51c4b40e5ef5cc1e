/*
 * libtransformer: weights kept in 16-, 8- and 4-bit storage types, GGUF
 * files and memory-mapped loading (since 1.3).
 *
 * A module's parameters are float32 unless converted.  The weights of its
 * matrix products (the Linear weights of projections, feed-forward
 * networks and heads) and its embedding tables may instead be stored as
 *   TFM_DTYPE_BF16  bfloat16 (the upper 16 bits of a float32),
 *   TFM_DTYPE_F16   IEEE 754 binary16,
 *   TFM_DTYPE_Q8_0  llama.cpp's Q8_0: blocks of 32 values, one fp16 scale
 *                   d = max|x| / 127 and 32 int8 q = round(x / d),
 *   TFM_DTYPE_Q4_0  llama.cpp's Q4_0: blocks of 32 values, one fp16 scale
 *                   d = m / -8 (m: the value of largest magnitude) and 32
 *                   4-bit q = min(15, trunc(x / d + 8.5)),
 * the block layouts of ggml (ggml-common.h: block_q8_0, block_q4_0), so
 * that a GGUF file's tensors are used as they lie.  Everything else stays
 * float32: biases, norms, the KV cache, activations, and every sum.  A
 * product with a stored weight widens it to float32 panel by panel into
 * per-thread scratch that stays in the L2 cache and multiplies each panel
 * with OpenBLAS (cblas_sgemm, cblas_sgemv for one row), so the result is
 * the float32 product with the widened weight: quantisation changes the
 * weights, not the arithmetic.  Widening is exact and gives the same bits
 * on every processor.
 *
 * A module holding stored weights runs forward passes, generation and
 * every inference call; it does not train (tfm_module_train refuses it),
 * and its parameters read back (tfm_module_get_parameter) widened.
 */
#ifndef TRANSFORMER_WEIGHTS_H
#define TRANSFORMER_WEIGHTS_H

#include "module.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Converts module's weights (every parameter listed above as convertible:
 * rank 2, read only through a matrix product or an embedding lookup) to
 * dtype: TFM_DTYPE_F32 (back to float32, widened exactly), TFM_DTYPE_BF16
 * and TFM_DTYPE_F16 (rounded to nearest, ties to even), TFM_DTYPE_Q8_0 or
 * TFM_DTYPE_Q4_0 (llama.cpp's reference quantisation, quantize_row_q8_0_ref
 * and quantize_row_q4_0_ref, bit for bit).  A weight already stored in
 * another low-precision type is widened first (Q4_0 -> Q8_0 requantises the
 * Q4_0 values).  The float32 memory of converted weights is released.
 * Errors: TFM_ERR_NULL_ARGUMENT, TFM_ERR_INVALID_ARGUMENT (dtype not one of
 * the five; a module in training mode; a weight whose rows are not a
 * multiple of 32 values for Q8_0 / Q4_0, named), TFM_ERR_NON_FINITE (a
 * weight holds NaN or an infinity, named), TFM_ERR_OVERFLOW (a value past
 * binary16's range for F16, or a block whose scale would be, |x| above
 * 65504 * 127 for Q8_0 and 65504 * 8 for Q4_0: llama.cpp would store an
 * infinite scale), TFM_ERR_OUT_OF_MEMORY.  On
 * error no parameter has changed.  Not safe to call while another thread
 * uses the module.  Since 1.3. */
TFM_API tfm_status tfm_module_quantize(tfm_module *module, tfm_dtype dtype);

/* *dtype = how the named parameter is stored (TFM_DTYPE_F32 for any
 * parameter never converted).  Errors: TFM_ERR_NULL_ARGUMENT,
 * TFM_ERR_NOT_FOUND (*dtype unchanged).  Since 1.3. */
TFM_API tfm_status tfm_module_parameter_dtype(const tfm_module *module,
                                              const char *name,
                                              tfm_dtype *dtype);

/* Bytes of parameter storage the module's weights occupy: float32
 * parameters at 4 bytes a value, stored weights at their type's size
 * (2; 34/32; 18/32), whether in memory or mapped from a file.  Returns -1
 * for NULL.  Since 1.3. */
TFM_API int64_t tfm_module_parameter_bytes(const tfm_module *module);

/* tfm_load_options.dtype: keep each weight in the type its file stores it
 * in (safetensors F32, F16, BF16 weights; GGUF F32, F16, BF16, Q8_0, Q4_0;
 * a model file's stored types), other parameters float32. */
#define TFM_LOAD_DTYPE_AUTO (-1)

/* How tfm_model_load_v2 loads.  Initialise with tfm_load_options_init:
 * its struct_size lets later versions grow the struct. */
typedef struct tfm_load_options {
    size_t struct_size; /* sizeof(tfm_load_options) */
    /* TFM_LOAD_DTYPE_AUTO, or the type every convertible weight is stored
     * in (as tfm_module_quantize converts): TFM_DTYPE_F32 (the default for
     * hub directories and model files, as tfm_model_load), BF16, F16,
     * Q8_0, Q4_0.  tfm_model_load reads GGUF files with AUTO. */
    int dtype;
    /* Nonzero (the default): weights whose file type is the kept type are
     * used where they lie in a read-only private mapping of the file (no
     * copy; the pages are shared with every other process mapping it);
     * the mapping is released when the model is freed.  The file must
     * not be truncated or rewritten in place while the model lives
     * (replace it by rename, as every writer of this library does);
     * tfm_model_load_v2 checks the whole mapping is backed before it
     * returns.  0: every weight is copied into the model's own memory. */
    int mmap;
} tfm_load_options;

/* Fills options with the defaults above.  NULL is a no-op. */
TFM_API void tfm_load_options_init(tfm_load_options *options);

/* tfm_model_load (model.h) with options (NULL: the defaults):
 * a model file, a hub directory, or a GGUF v3 file (architectures "gpt2"
 * and "llama" and the families that share its layout; tensor types F32,
 * F16, BF16, Q8_0, Q4_0; its tokenizer from the tokenizer.ggml.* keys,
 * read by tfm_tokenizer_load on the same path).  Errors: those of
 * tfm_model_load, and TFM_ERR_INVALID_ARGUMENT (options->struct_size or
 * dtype invalid), TFM_ERR_UNSUPPORTED (a GGUF version other than 3, a
 * tensor type other than the five, named).  On error *out is unchanged
 * and nothing stays mapped.  path and options are only read; on success
 * *out is owned by the caller and freed with tfm_module_free, which also
 * releases its mapping of the file.  Since 1.3. */
TFM_API tfm_status tfm_model_load_v2(const char *path,
                                     const tfm_load_options *options,
                                     tfm_module **out);

#ifdef __cplusplus
}
#endif

#endif
