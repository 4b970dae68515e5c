/* half.c — bf16 and fp16 conversions for the CPU backend (round to nearest even). */
#include <string.h>

#include "internal.h"

static float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t float_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float fp16_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13)); /* inf, nan */
    if (exp != 0) return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24 */
    const float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
}

static uint16_t float_to_fp16(float f)
{
    const uint32_t u = float_to_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;  /* nan */
    if (abs >= 0x477ff000u) return sign | 0x7c00u; /* rounds to >= 65520: inf */
    if (abs < 0x38800000u) {                       /* below 2^-14: subnormal or zero */
        const float scaled = bits_to_float(abs) * 16777216.0f; /* in units of 2^-24 */
        /* nearest-even rounding of a value < 1024 via the float adder */
        const float r = (scaled + 8388608.0f) - 8388608.0f;
        return sign | (uint16_t)r;
    }
    uint32_t m = abs + 0xfffu + ((abs >> 13) & 1u); /* round mantissa to 10 bits */
    return sign | (uint16_t)((m - 0x38000000u) >> 13);
}

float fb_half_to_float(uint16_t h, int32_t dtype)
{
    return dtype == FLASHBWD_DTYPE_FP16 ? fp16_to_float(h) : bits_to_float((uint32_t)h << 16);
}

uint16_t fb_float_to_half(float f, int32_t dtype)
{
    if (dtype == FLASHBWD_DTYPE_FP16) return float_to_fp16(f);
    const uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet nan */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
