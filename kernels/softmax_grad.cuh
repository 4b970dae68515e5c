/* softmax_grad.cuh — turn the S and dP tiles (fp32 registers) into P and dS, in place.
 *
 *   P  = exp2(score·log2e − LSE·log2e),   score = scale·s, or softcap·tanh(scale·s/softcap)
 *   dS = P ∘ (dP − D) ∘ (1 − tanh²)       (the last factor only with softcap)
 * ALiBi subtracts slope·|i + sk − sq − j| from the score; masked pairs get P = 0.
 *
 * The three features are template flags, chosen once per tile by the caller, so the common
 * tile (no softcap, no ALiBi, inside the mask) costs one FFMA, one ex2 and two FP ops per
 * element with no branches. Masks are per-row column limits [lo, hi) in tile coordinates,
 * computed once per row.
 * The dP GEMM is passed in (gemm_dp) so that where config_table.h's EARLY_P asks for it, P
 * is computed between S and dP: its exponentials then overlap the dP mma (the H200 measured
 * +1..+6%, docs/performance.md). Elsewhere dP comes first and both are computed after it.
 */
#pragma once
#include "mask.cuh"
#include "ptx/math.cuh"

namespace fb {

struct SoftmaxParams {
    float scale_log2;   /* scale·log2e (no softcap) */
    float softcap_inv;  /* scale / softcap */
    float softcap_log2; /* softcap·log2e */
    float slope_log2;   /* ALiBi slope·log2e, 0 = off */
};

template <bool EARLY, bool SOFTCAP, bool ALIBI, bool MASK, class L, class GemmDp>
__device__ __forceinline__ void softmax_grad(float (&s)[L::MT][L::NT][4],
                                             float (&dp)[L::MT][L::NT][4],
                                             const float *lse_log2, const float *dsum,
                                             const SoftmaxParams &sp, const Mask &mask,
                                             int64_t m0, int64_t n0, int warp, int lane,
                                             GemmDp &gemm_dp)
{
    /* EARLY kernels (config_table.h's EARLY_P): on tiles without softcap or ALiBi, P needs
     * only S, so it is computed before the dP GEMM and in the same basic block, where ptxas
     * interleaves its ex2 and FFMA with that GEMM's mma instead of leaving the tensor pipe
     * idle through them. Softcap and ALiBi tiles run the GEMM first and one loop after it
     * (rare; fewer registers live across the GEMM); other kernels ran it before the
     * dispatch (softmax_grad_tile). */
    constexpr bool EARLY_P = EARLY && !SOFTCAP && !ALIBI;
    if constexpr (EARLY && !EARLY_P) gemm_dp();
    const int c_lane = L::col0(warp) + 2 * (lane & 3);
#pragma unroll
    for (int mi = 0; mi < L::MT; ++mi)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int r = L::row0(warp) + 16 * mi + (lane >> 2) + 8 * hr;
            const float row_lse = lse_log2[r], row_d = dsum[r];
            int lo = 0, hi = 0;
            if constexpr (MASK) mask.row_limits(m0 + r, n0, lo, hi);
            float dist0 = 0.0f; /* i + sk - sq - n0 - c_lane, for ALiBi */
            if constexpr (ALIBI) dist0 = (float)(m0 + r + mask.diag - n0 - c_lane);
#pragma unroll
            for (int nj = 0; nj < L::NT; ++nj)
#pragma unroll
                for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
                    const int dc = 8 * nj + (e & 1); /* column = c_lane + dc */
                    float x = s[mi][nj][e], dtanh = 1.0f, score;
                    if constexpr (SOFTCAP) {
                        const float t = ptx::tanh_approx(x * sp.softcap_inv);
                        score = t * sp.softcap_log2;
                        dtanh = 1.0f - t * t; /* before masking: 1 - (-inf)^2 is NaN */
                    } else {
                        score = x * sp.scale_log2;
                    }
                    if constexpr (ALIBI) score -= sp.slope_log2 * fabsf(dist0 - (float)dc);
                    float pv = ptx::ex2_approx(score - row_lse);
                    if constexpr (MASK) {
                        const int c = c_lane + dc;
                        if (c < lo || c >= hi) pv = 0.0f;
                    }
                    s[mi][nj][e] = pv;
                    if constexpr (!EARLY_P) dp[mi][nj][e] = pv * (dp[mi][nj][e] - row_d) * dtanh;
                }
        }
    if constexpr (EARLY_P) {
        gemm_dp();
#pragma unroll
        for (int mi = 0; mi < L::MT; ++mi)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const float row_d = dsum[L::row0(warp) + 16 * mi + (lane >> 2) + 8 * hr];
#pragma unroll
                for (int nj = 0; nj < L::NT; ++nj)
#pragma unroll
                    for (int e = 2 * hr; e < 2 * hr + 2; ++e)
                        dp[mi][nj][e] = s[mi][nj][e] * (dp[mi][nj][e] - row_d);
            }
    }
}

/* Pick the variant for this tile: every feature test is one uniform branch per tile. */
template <class L, bool EARLY, class GemmDp>
__device__ __forceinline__ void softmax_grad_tile(float (&s)[L::MT][L::NT][4],
                                                  float (&dp)[L::MT][L::NT][4],
                                                  const float *lse_log2, const float *dsum,
                                                  const SoftmaxParams &sp, bool softcap,
                                                  const Mask &mask, bool edge, int64_t m0,
                                                  int64_t n0, int warp, int lane,
                                                  GemmDp &gemm_dp)
{
    if constexpr (!EARLY) gemm_dp(); /* once, before the dispatch */
#define FB_SG(SC, AL, MK)                                                                \
    softmax_grad<EARLY, SC, AL, MK, L>(s, dp, lse_log2, dsum, sp, mask, m0, n0, warp, lane, gemm_dp)
    const bool alibi = sp.slope_log2 != 0.0f;
    if (!softcap && !alibi) {
        if (!edge) FB_SG(false, false, false);
        else FB_SG(false, false, true);
    } else if (softcap && !alibi) {
        if (!edge) FB_SG(true, false, false);
        else FB_SG(true, false, true);
    } else if (!softcap) {
        if (!edge) FB_SG(false, true, false);
        else FB_SG(false, true, true);
    } else {
        if (!edge) FB_SG(true, true, false);
        else FB_SG(true, true, true);
    }
#undef FB_SG
}

} // namespace fb
