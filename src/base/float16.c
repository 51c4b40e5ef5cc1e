/* float32 <-> binary16 and bfloat16 conversions (float16.h).
 *
 * Everything works on bit patterns, with integer arithmetic only, so the
 * results do not depend on the FPU's rounding mode or on F16C support. */
#include "base/float16.h"

/* Sign s, exponent e (bias 15), mantissa m (10 bits).  Normal:
 * 2^(e-15) * 1.m, rebiased to 127.  Subnormal (e = 0, m != 0): m * 2^-24,
 * normalised by shifting m up until its implicit bit (0x400) is set.
 * e = 31: infinity (m = 0) or NaN, with the payload kept in the top
 * mantissa bits. */
uint32_t tfm__f16_to_f32_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)
        return sign | 0x7f800000u | mant << 13;
    if (exp != 0)
        return sign | (exp + 112u) << 23 | mant << 13;
    if (mant == 0)
        return sign;
    exp = 113; /* 2^(113-127) = 2^-14, the subnormal scale times 2^10 */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        exp--;
    }
    return sign | exp << 23 | (mant & 0x3ffu) << 13;
}

/* a = |f|'s bits.  Normal results (a >= 2^-14 = 0x38800000): rebias the
 * exponent by 127 - 15 = 112 and round the 23-bit mantissa to 10 bits at
 * bit 13 (adding 0xfff, plus 1 when the kept lowest bit is odd, carries
 * into the exponent when the mantissa rounds up past 1.11..1).  The
 * largest finite half is 65504 (0x477fe000); 65520 (0x477ff000), half-way
 * to 65536, rounds to even, i.e. up, to infinity.  Subnormal results:
 * the value in units of 2^-24 is the 24-bit significand shifted right by
 * 126 - e, rounded to nearest even on the bits shifted out; a carry to
 * 0x400 is the smallest normal, which is the right encoding. */
uint16_t tfm__f32_to_f16_bits(uint32_t f)
{
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    uint32_t a = f & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* rounds past 65504, or infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        uint32_t r = a - (112u << 23);
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) /* at most 2^-25: rounds to (signed) zero */
        return sign;
    uint32_t e = a >> 23;
    uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14 .. 24 */
    uint32_t q = sig >> shift;
    uint32_t rest = sig & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

uint32_t tfm__bf16_to_f32_bits(uint16_t b)
{
    return (uint32_t)b << 16;
}

/* Adding 0x7fff, plus 1 when the kept lowest bit is odd, rounds the lower
 * 16 bits to nearest even (a carry may reach the exponent, and from the
 * largest finite values infinity, as it should). */
uint16_t tfm__f32_to_bf16_bits(uint32_t f)
{
    if ((f & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0u;
    return (uint16_t)((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}
