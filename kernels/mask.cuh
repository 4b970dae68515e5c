/* mask.cuh — which (query, key) pairs a row may attend to, in sequence coordinates.
 *
 * Query i sees key j iff j < sk, and, with a window, i + diag - left <= j <= i + diag + right
 * where diag = sk - sq (bottom-right alignment; causal is right = 0). -1 means unbounded.
 * The main kernel asks tile_needs_mask once per tile (a uniform branch) and, only for the
 * tiles on an edge, row_limits per row. Host and device: tests/test_mask.cu checks the block
 * arithmetic against the definition on the CPU.
 */
#pragma once
#include <stdint.h>

namespace fb {

struct Mask {
    int sk;
    int64_t diag;
    int left, right; /* -1 = unbounded */

    /* Whether some pair of rows [m0, m0+bm) x keys [n0, n0+bn) is masked. Rows past sq need
     * no mask: their LSE is +inf, so P = 0 there. */
    __host__ __device__ __forceinline__ bool tile_needs_mask(int64_t m0, int bm, int64_t n0,
                                                             int bn) const
    {
        return n0 + bn > sk || (right >= 0 && n0 + bn - 1 > m0 + diag + right) ||
               (left >= 0 && n0 < m0 + bm - 1 + diag - left);
    }

    /* Visible keys of row i as columns [lo, hi) of the tile starting at key n0. */
    __host__ __device__ __forceinline__ void row_limits(int64_t i, int64_t n0, int &lo,
                                                        int &hi) const
    {
        int64_t l = -1, h = sk - n0;
        if (left >= 0) l = i + diag - left - n0;
        if (right >= 0 && i + diag + right + 1 - n0 < h) h = i + diag + right + 1 - n0;
        lo = (int)(l < -1 ? -1 : l > (1 << 20) ? (1 << 20) : l);
        hi = (int)(h < -1 ? -1 : h > (1 << 20) ? (1 << 20) : h);
    }

    /* The last key block whose m_block_range contains query block m, given n_blocks key
     * blocks in the sequence. The blocks containing m form an interval (both ends of
     * m_block_range rise with n), so counting down from here orders its adders. */
    __host__ __device__ __forceinline__ int last_n_block(int m, int bm, int bn, int n_blocks) const
    {
        if (right < 0) return n_blocks - 1;
        /* m_block_range's begin <= m  <=>  n·bn - diag - right < (m + 1)·bm */
        const int64_t num = (int64_t)(m + 1) * bm + diag + right;
        const int64_t last = num <= 0 ? -1 : (num + bn - 1) / bn - 1;
        return (int)(last < n_blocks - 1 ? last : n_blocks - 1);
    }

    /* The first key block whose m_block_range contains query block m. */
    __host__ __device__ __forceinline__ int first_n_block(int m, int bm, int bn) const
    {
        if (left < 0) return 0;
        /* m_block_range's end > m  <=>  n·bn + bn - 1 - diag + left >= m·bm */
        const int64_t x = (int64_t)m * bm - bn + 1 + diag - left;
        return x <= 0 ? 0 : (int)((x + bn - 1) / bn);
    }

    /* How many key blocks add into query block m's dQ: 0 when no key of the sequence is
     * visible to it (then nobody converts it and the preprocess writes its zeros). */
    __host__ __device__ __forceinline__ int adders(int m, int bm, int bn, int n_blocks) const
    {
        const int n = last_n_block(m, bm, bn, n_blocks) - first_n_block(m, bm, bn) + 1;
        return n > 0 ? n : 0;
    }

    /* Query blocks [begin, end) that see at least one key of [n0, n0+bn). */
    __host__ __device__ __forceinline__ void m_block_range(int64_t n0, int bn, int bm, int sq,
                                                           int &begin, int &end) const
    {
        int64_t lo = 0, hi = ((int64_t)sq + bm - 1) / bm;
        if (right >= 0) { /* first row whose right edge reaches n0 */
            const int64_t first = n0 - diag - right;
            if (first > 0) lo = first / bm;
        }
        if (left >= 0) { /* last row whose left edge still reaches the block's last key */
            const int64_t last = n0 + bn - 1 - diag + left;
            const int64_t e = last < 0 ? 0 : last / bm + 1;
            if (e < hi) hi = e;
        }
        begin = (int)lo;
        end = (int)(hi > lo ? hi : lo);
    }
};

/* Where the causal bound (key c visible to row r iff c - r <= w, in a warp block's own
 * coordinates) leaves an element of a warp's mma accumulators (warp_layout.cuh): element
 * e of tile (mi, nj) of a lane has c - r = k(mi, nj, e) - lane/4 + 2·(lane%4), so it is
 * visible iff k <= q(w, lane); k is the same for every lane and lane/4 - 2·(lane%4) lies in
 * [-6, 7]. With w a constant, zero_band_stored (softmax_grad.cuh) decides each element
 * at compile time but for the band between all_visible and all_masked. tests/test_mask.cu
 * checks it against the definition. */
struct DiagonalBand {
    __host__ __device__ static constexpr int k(int mi, int nj, int e)
    {
        return 8 * nj + (e & 1) - 16 * mi - 8 * (e >> 1);
    }
    __host__ __device__ static constexpr int q(int w, int lane)
    {
        return w + (lane >> 2) - 2 * (lane & 3);
    }
    __host__ __device__ static constexpr bool all_visible(int k, int w) { return k <= w - 6; }
    __host__ __device__ static constexpr bool all_masked(int k, int w) { return k > w + 7; }
};

} // namespace fb
