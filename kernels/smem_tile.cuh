/* smem_tile.cuh — addressing of 16-bit tiles in shared memory, swizzled so that ldmatrix
 * (plain and .trans), cp.async and the 32-bit fragment stores are free of bank conflicts.
 *
 * A ROWS x COLS tile is stored as column panels PANEL elements wide (64 = 128 bytes when
 * COLS is a multiple of 64, else 32 = 64 bytes), each panel row-major. Inside a panel the
 * 16-byte chunk index is XORed with bits of the row: (row % 8) for 128-byte rows,
 * ((row / 2) % 4) for 64-byte rows. Eight consecutive rows at one logical chunk then land
 * on eight different 16-byte bank groups, which is the access shape of every ldmatrix and
 * of a warp's fragment stores (flash-backward-reference.md §3.2 describes the same idea).
 *
 * LaneAddr keeps address arithmetic out of the inner loops. A lane touches (r + dr, c + dc)
 * for compile-time steps dr (a multiple of 8, which keeps the row's swizzle bits) and dc (a
 * multiple of STEP). Within a panel the XOR pattern then takes only PANEL/STEP values, so
 * the lane precomputes that many byte addresses once and every access is one of them plus
 * an immediate: at(dr, dc) compiles to a register and a constant offset.
 */
#pragma once
#include <stdint.h>

namespace fb {

template <int ROWS, int COLS> struct SmemTile {
    static_assert(COLS % 32 == 0, "tile columns must be a multiple of 32");
    static constexpr int NUM_ROWS = ROWS;
    static constexpr int PANEL = COLS % 64 == 0 ? 64 : 32;
    static constexpr int ELEMS = ROWS * COLS;
    static constexpr int BYTES = ELEMS * 2;

    __device__ static __forceinline__ unsigned swizzle(unsigned row)
    {
        return PANEL == 64 ? (row & 7) : ((row >> 1) & 3);
    }

    /* Element offset of (row, col). */
    __device__ static __forceinline__ int offset(int row, int col)
    {
        const int panel = col / PANEL, c = col % PANEL;
        return panel * (ROWS * PANEL) + row * PANEL + ((((c >> 3) ^ swizzle(row))) << 3) + (c & 7);
    }
};

template <class Tile, int STEP> struct LaneAddr {
    static_assert(Tile::PANEL % STEP == 0 && STEP % 8 == 0, "steps of whole chunks");
    static constexpr int G = Tile::PANEL / STEP;
    uint32_t base[G];

    /* smem: the tile's shared-state byte address; (r, c): this lane's element at steps 0.
     * Unsigned arithmetic: r and c are never negative, and divisions by the powers of two
     * here are then single shifts and masks. */
    __device__ __forceinline__ LaneAddr(uint32_t smem, unsigned r, unsigned c)
    {
        const unsigned within = c % STEP, g0 = c / STEP, swz = Tile::swizzle(r);
#pragma unroll
        for (unsigned j = 0; j < G; ++j) {
            const unsigned g = g0 + j, panel = g / G, col = (g % G) * STEP + within;
            base[j] = smem + 2 * (panel * (Tile::NUM_ROWS * Tile::PANEL) + r * Tile::PANEL +
                                  (((col >> 3) ^ swz) << 3) + (col & 7));
        }
    }

    /* Byte address of (r + dr, c + dc); dr % 8 == 0 and dc % STEP == 0, both constants. */
    __device__ __forceinline__ uint32_t at(int dr, int dc) const
    {
        const int s = dc / STEP;
        return base[s % G] + 2 * ((s / G) * (Tile::NUM_ROWS * Tile::PANEL) + dr * Tile::PANEL);
    }
};

/* The lane index as an opaque value: code computed from it inside the main loop stays
 * inside the loop instead of being hoisted into long-lived registers. The range is told
 * to the compiler so that divisions and remainders by powers of two stay single shifts
 * and masks (for a signed value of unknown sign they take three or four instructions). */
__device__ __forceinline__ int lane_id()
{
    int lane;
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
    __builtin_assume(lane >= 0 && lane < 32);
    return lane;
}

/* threadIdx.x as an opaque value, for lane_id's reason: the main loop's refill recomputes
 * its chunk coordinates from it each step (a shift and a mask) instead of holding them in
 * registers across the loop, where ptxas spilled them and reloaded them after the barrier. */
template <int THREADS> __device__ __forceinline__ int thread_id()
{
    int tid;
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
    __builtin_assume(tid >= 0 && tid < THREADS);
    return tid;
}

} // namespace fb
