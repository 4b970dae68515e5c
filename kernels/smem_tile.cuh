/* smem_tile.cuh — addressing of 16-bit tiles in shared memory, swizzled so that ldmatrix
 * (plain and .trans), cp.async and the 32-bit fragment stores are free of bank conflicts.
 *
 * A ROWS x COLS tile is stored as column panels PANEL elements wide (64 = 128 bytes when
 * COLS is a multiple of 64, else 32 = 64 bytes), each panel row-major. Inside a panel the
 * 16-byte chunk index is XORed with bits of the row: (row % 8) for 128-byte rows,
 * ((row / 2) % 4) for 64-byte rows. Eight consecutive rows at one logical chunk then land
 * on eight different 16-byte bank groups, which is the access shape of every ldmatrix and
 * of a warp's fragment stores (flash-backward-reference.md §3.2 describes the same idea).
 */
#pragma once

namespace fb {

template <int ROWS, int COLS> struct SmemTile {
    static_assert(COLS % 32 == 0, "tile columns must be a multiple of 32");
    static constexpr int PANEL = COLS % 64 == 0 ? 64 : 32;
    static constexpr int ELEMS = ROWS * COLS;
    static constexpr int BYTES = ELEMS * 2;

    /* Element offset of (row, col). */
    __device__ static __forceinline__ int offset(int row, int col)
    {
        const int panel = col / PANEL, c = col % PANEL;
        const int swz = PANEL == 64 ? (row & 7) : ((row >> 1) & 3);
        return panel * (ROWS * PANEL) + row * PANEL + ((((c >> 3) ^ swz)) << 3) + (c & 7);
    }
};

} // namespace fb
