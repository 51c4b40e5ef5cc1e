/* Conversions between float32 and the 16-bit formats of safetensors files
 * (internal).
 *
 * binary16: IEEE 754-2008 half precision (1 sign, 5 exponent bits with bias
 * 15, 10 mantissa bits).  bfloat16: the upper 16 bits of a binary32 (1
 * sign, 8 exponent bits, 7 mantissa bits; Wang & Kanwar, "BFloat16: the
 * secret to high performance on Cloud TPUs", 2019).
 *
 * Narrowing rounds to nearest, ties to even, as PyTorch's
 * Tensor.to(torch.float16) and Tensor.to(torch.bfloat16) do; widening is
 * exact. */
#ifndef TFM_FLOAT16_H
#define TFM_FLOAT16_H

#include <stdint.h>

/* binary16 bits -> binary32 bits, exact (subnormals normalised, infinities
 * kept, NaN payloads kept in the top mantissa bits). */
uint32_t tfm__f16_to_f32_bits(uint16_t h);

/* binary32 bits -> binary16 bits, rounded to nearest even: magnitudes from
 * 65520 up become infinity, those up to 2^-25 zero (keeping the sign),
 * and those between 2^-25 and 2^-14 subnormal.  NaN stays a quiet NaN
 * with the sign and the top 9 payload bits. */
uint16_t tfm__f32_to_f16_bits(uint32_t f);

/* bfloat16 bits -> binary32 bits, exact: the 16 bits become the upper half. */
uint32_t tfm__bf16_to_f32_bits(uint16_t b);

/* binary32 bits -> bfloat16 bits, rounded to nearest even on the lower 16
 * bits (large finite values may round to infinity); NaN becomes 0x7fc0,
 * the quiet NaN of c10::BFloat16's round_to_nearest_even. */
uint16_t tfm__f32_to_bf16_bits(uint32_t f);

#endif /* TFM_FLOAT16_H */
