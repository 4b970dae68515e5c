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
 * The split kernel (bwd_split.cuh) computes the two halves in different warps: P alone
 * (softmax_p_tile), and dS from dP and the P those warps stored (ds_from_stored_p).
 */
#pragma once
#include "mask.cuh"
#include "ptx/ldmatrix.cuh"
#include "ptx/math.cuh"
#include "tile_io.cuh"

namespace fb {

constexpr float LOG2E = 1.4426950408889634f;

struct SoftmaxParams {
    float scale_log2;   /* scale·log2e (no softcap) */
    float softcap_inv;  /* scale / softcap */
    float softcap_log2; /* softcap·log2e */
    float slope_log2;   /* ALiBi slope·log2e, 0 = off */
};

/* DS = false: P only (dp and dsum untouched, gemm_dp not called). */
template <bool EARLY, bool DS, bool SOFTCAP, bool ALIBI, bool MASK, class L, class GemmDp>
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
    constexpr bool EARLY_P = (EARLY && !SOFTCAP && !ALIBI) || !DS;
    if constexpr (EARLY && !EARLY_P) gemm_dp();
    const int c_lane = L::col0(warp) + 2 * (lane & 3);
#pragma unroll
    for (int mi = 0; mi < L::MT; ++mi)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int r = L::row0(warp) + 16 * mi + (lane >> 2) + 8 * hr;
            const float row_lse = lse_log2[r], row_d = DS ? dsum[r] : 0.0f;
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
    if constexpr (EARLY_P && DS) {
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
    softmax_grad<EARLY, true, SC, AL, MK, L>(s, dp, lse_log2, dsum, sp, mask, m0, n0, warp,  \
                                             lane, gemm_dp)
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

/* P alone, in place (no softcap: the split kernel does not serve it). */
template <class L>
__device__ __forceinline__ void softmax_p_tile(float (&s)[L::MT][L::NT][4], const float *lse_log2,
                                               const SoftmaxParams &sp, const Mask &mask,
                                               bool edge, int64_t m0, int64_t n0, int warp,
                                               int lane)
{
    auto none = [] {};
#define FB_SP(AL, MK)                                                                    \
    softmax_grad<true, false, false, AL, MK, L>(s, s, lse_log2, nullptr, sp, mask, m0, n0, \
                                                warp, lane, none)
    if (sp.slope_log2 == 0.0f) {
        if (!edge) FB_SP(false, false);
        else FB_SP(false, true);
    } else {
        if (!edge) FB_SP(true, false);
        else FB_SP(true, true);
    }
#undef FB_SP
}

/* The causal bound applied to a warp's block of P after store_frags stored it unmasked
 * (the split kernel's diagonal step, bwd_split.cuh): the bound at offset W from the block
 * (key column c of row r, in block coordinates, is visible iff c − r <= W; Mask's
 * DiagonalBand says which element that leaves where). Each lane stores zeros over the
 * pairs it stored itself, so no other lane's store comes between. W is a constant, so
 * the unrolled loop knows each pair's k: pairs past the bound for every lane take a
 * store and no comparison, pairs inside it for every lane nothing, and only the band
 * between compares per lane, where a pair whose first element is visible and second is
 * not loses its upper half (a 16-bit store). On the diagonal (W = 0) of a 64 x 64 block,
 * of a lane's 64 pairs 28 take a store, 8 a comparison, and 28 nothing. */
template <class L, class Tile, int W>
__device__ __forceinline__ void zero_band_stored(uint32_t sP, int warp, int lane)
{
    using B = DiagonalBand;
    const int q = B::q(W, lane);
    const LaneAddr<Tile, 8> a(sP, L::row0(warp) + (lane >> 2), L::col0(warp) + 2 * (lane & 3));
#pragma unroll
    for (int mi = 0; mi < L::MT; ++mi)
#pragma unroll
        for (int nj = 0; nj < L::NT; ++nj)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) { /* elements 2·hr and 2·hr + 1, as store_frags */
                const int k0 = B::k(mi, nj, 2 * hr), k1 = k0 + 1;
                const uint32_t at = a.at(16 * mi + 8 * hr, 8 * nj);
                if (B::all_visible(k1, W)) continue;
                if (B::all_masked(k0, W)) {
                    ptx::st_shared_b32(at, 0u);
                } else { /* k1 > q  <=>  k0 >= q */
                    if (k0 >= q) ptx::st_shared_b16(at + 2, 0);
                    if (k0 > q) ptx::st_shared_b16(at, 0);
                }
            }
}

/* dS = P∘(dP − D) in place of dP, with P read back as T from the 16-bit tile sP that other
 * warps stored in this warp's block of layout L (store_frags). An ldmatrix of a 16x16 block
 * gives a lane exactly its accumulator elements of two neighbouring 16x8 tiles, so P comes
 * back in the accumulator layout with one x4 load per pair of tiles. FlashAttention keeps
 * P in fp32 here; fp16 (the split kernel's choice, FB_SPLIT_P16) rounds it by 2^-11. */
template <class L, class TileP, typename T>
__device__ __forceinline__ void ds_from_stored_p(float (&dp)[L::MT][L::NT][4], uint32_t sP,
                                                 const float *dsum, int warp, int lane)
{
    static_assert(L::NT % 2 == 0, "P is read back two 8-column tiles at a time");
    /* ldmatrix row addresses of the 16x16 blocks of the warp's block (as for an A operand,
     * but starting at the block's column, not at column 0) */
    const LaneAddr<TileP, 16> a(sP, L::row0(warp) + (lane & 15), L::col0(warp) + 8 * (lane >> 4));
#pragma unroll
    for (int mi = 0; mi < L::MT; ++mi) {
        const int r = L::row0(warp) + 16 * mi + (lane >> 2);
        const float d_lo = dsum[r], d_hi = dsum[r + 8];
#pragma unroll
        for (int nj = 0; nj < L::NT; nj += 2) {
            uint32_t pr[4]; /* P of tiles nj (rows r, r + 8), nj + 1 (rows r, r + 8) */
            ptx::ldmatrix_x4(pr, a.at(16 * mi, 8 * nj));
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                float2 pv = unpack2<T>(pr[h]);
                float *d = &dp[mi][nj + h / 2][2 * (h % 2)];
                const float row_d = h % 2 ? d_hi : d_lo;
                d[0] = pv.x * (d[0] - row_d);
                d[1] = pv.y * (d[1] - row_d);
            }
        }
    }
}

} // namespace fb
