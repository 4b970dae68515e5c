/* exp2_fma.cuh — 2^x on the FMA pipe, for a share of the P warps' exponentials.
 *
 * The SFU runs ex2 for 16 lanes a clock per SM, a quarter of a warp a clock per scheduler,
 * so the split kernel's P warps spend 8 clocks of that pipe on each exponential of a warp
 * (64 a thread a step at hd128), and the dS warps wait for P meanwhile (ncu: the dS role
 * waits at BAR_P_READY ~9% of its samples). Computing some of them with FFMA instead,
 * which issues a warp a clock, shortens that phase (FlashAttention 4 does this on
 * Blackwell). Which share: FB_SPLIT_EXP_FMA (config_table.h).
 *
 * 2^x = 2^j · 2^f with j = round(x), f = x − j in [−0.5, 0.5]. Adding 1.5·2^23 rounds x to
 * an integer held in the sum's low mantissa bits, so (bits << 23) is j in the exponent
 * field, added to the bits of p(f) ≈ 2^f in [0.707, 1.414]. p is a degree-4 polynomial
 * with p(0) = 1, fitted for relative error (2.9e-6 evaluated in fp32, against fp16's
 * rounding of 2.4e-4 and ex2.approx's ~2.4e-7). x is clamped at −127 first, where the sum
 * of the two bit patterns is exactly +0, so −inf (a masked score, or LSE = +inf on an
 * empty row) gives 0 as ex2.approx does; between −127 and −126 it gives a number below
 * 1.2e-38 instead of a subnormal 2^x. A NaN passes the clamp (max.NaN) and comes out as a
 * NaN, or as FLT_MAX from the GPU's all-ones NaN, which P's 16-bit rounding makes inf: the
 * gradients are not finite either, as with ex2.approx. x above 127 (never a probability)
 * is not served.
 */
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ptx/math.cuh"

namespace fb {

/* max(x, lo) that keeps a NaN: max.NaN on the device; the same on the host, where
 * tests/test_exp2_fma.cu runs this header's arithmetic. The rest is plain IEEE single
 * precision on both (no product feeds an add, so FMA contraction cannot change it). */
__host__ __device__ __forceinline__ float clamp_keep_nan(float x, float lo)
{
#ifdef __CUDA_ARCH__
    return ptx::max_nan(x, lo);
#else
    return x != x || x > lo ? x : lo;
#endif
}

__host__ __device__ __forceinline__ float exp2_fma(float x)
{
    constexpr float ROUND = 12582912.0f; /* 1.5·2^23 */
    x = clamp_keep_nan(x, -127.0f);
    const float t = x + ROUND;
    const float f = x - (t - ROUND); /* x − round(x) */
    float p = 9.582873434e-03f;
    p = fmaf(p, f, 5.590648204e-02f);
    p = fmaf(p, f, 2.402409911e-01f);
    p = fmaf(p, f, 6.931241751e-01f);
    p = fmaf(p, f, 1.0f);
    uint32_t tb, pb;
    memcpy(&tb, &t, 4);
    memcpy(&pb, &p, 4);
    const uint32_t r = (tb << 23) + pb;
    float y;
    memcpy(&y, &r, 4);
    return y;
}

} // namespace fb
