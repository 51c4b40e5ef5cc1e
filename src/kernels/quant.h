/* Internal: the storage types of weights (transformer/weights.h) — their
 * block layouts, quantisation, exact widening to float32, and the matrix
 * product with a stored weight (widened panel by panel into per-thread
 * L2-resident scratch, each panel multiplied by OpenBLAS).
 *
 * Layouts are ggml's (ggml-common.h), little-endian:
 *   Q8_0 block (34 bytes): uint16 d (fp16 bits), int8 qs[32];
 *        value i = fp32(d) * qs[i].
 *   Q4_0 block (18 bytes): uint16 d (fp16 bits), uint8 qs[16];
 *        value j      = fp32(d) * ((qs[j] & 0x0F) - 8),
 *        value j + 16 = fp32(d) * ((qs[j] >> 4) - 8), j < 16.
 *   F16: IEEE binary16; BF16: the upper 16 bits of a float32.
 * Widening is exact (each value is one product of two floats that are
 * exact in float32, or a bit-exact conversion), so its vector paths
 * (AVX-512, AVX2, baseline; chosen at run time) give the same bits.
 * Source: llama.cpp's ggml (ggml-quants.c: quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref, dequantize_row_q8_0, dequantize_row_q4_0). */
#ifndef TFM_SRC_QUANT_H
#define TFM_SRC_QUANT_H

#include <stdint.h>

#include "transformer/safetensors.h"
#include "transformer/status.h"

#define TFM__QK 32 /* values per Q8_0 / Q4_0 block */

/* Whether dtype is a weight storage type: F32, F16, BF16, Q8_0, Q4_0. */
int tfm__dtype_is_weight(int dtype);

/* Bytes of one row of n values stored as dtype; -1 when dtype is not a
 * weight type, n < 0, or n is not a multiple of TFM__QK for Q8_0 / Q4_0. */
int64_t tfm__dtype_row_bytes(int dtype, int64_t n);

/* Stores n float32 values (n a multiple of TFM__QK for Q8_0 / Q4_0) as
 * dtype into dst (tfm__dtype_row_bytes(dtype, n) bytes): F32 copies, F16
 * and BF16 round to nearest even, Q8_0 / Q4_0 as llama.cpp's reference
 * quantisation, bit for bit.  Returns TFM_OK, or TFM_ERR_NON_FINITE when
 * src holds NaN or an infinity (dst then unspecified; no message set),
 * TFM_ERR_OVERFLOW when a value (F16) or a block's scale (Q8_0, Q4_0) is
 * past binary16's range (it would read back as an infinity; llama.cpp
 * stores it so), or TFM_ERR_INVALID_ARGUMENT (bad dtype / n; no message
 * set). */
tfm_status tfm__quantize_row(int dtype, const float *src, int64_t n,
                             void *dst);

/* Widens n values stored as dtype (starting at a block boundary; n a
 * multiple of TFM__QK for Q8_0 / Q4_0) into float32 dst.  Exact. */
void tfm__widen_row(int dtype, const void *src, int64_t n, float *dst);

/* The vector paths of tfm__widen_row, widest last.  By default the widest
 * one the processor runs is used; tests compare them. */
enum { TFM__WIDEN_BASE = 0, TFM__WIDEN_AVX2 = 1, TFM__WIDEN_AVX512 = 2,
       TFM__WIDEN_PATHS = 3 };

/* 1 when this processor (and this build) runs path, else 0. */
int tfm__widen_path_supported(int path);

/* Makes tfm__widen_row use path from now on, process-wide (for tests and
 * benchmarks; not while another thread widens).  Returns the path used
 * before, or -1 (nothing changed) when path is not supported. */
int tfm__widen_use_path(int path);

/* A stored weight matrix: `rows` rows of `cols` values, row r at
 * data + r * row_bytes (row_bytes = tfm__dtype_row_bytes(dtype, cols)). */
typedef struct tfm__wview {
    int dtype;
    const unsigned char *data;
    int64_t rows, cols, row_bytes;
} tfm__wview;

/* y [n, out] = x [n, in] W^T + bias, W = w's rows [0, out) widened
 * (w->cols == in, w->rows >= out), bias [out] or NULL; row strides ldx,
 * ldy.  Panels of W are widened into the calling thread's scratch
 * (sized to stay in L2, reused between calls) and multiplied by
 * cblas_sgemm (cblas_sgemv when n == 1).  The bits do not depend on the
 * processor's vector width.  Cannot fail: the scratch is the calling
 * thread's workspace (base/workspace.h), and when that cannot grow, a
 * small panel on the stack. */
void tfm__linear_stored(const float *x, int64_t ldx, int64_t n, int64_t in,
                        const tfm__wview *w, const float *bias, int64_t out,
                        float *y, int64_t ldy);

#endif
