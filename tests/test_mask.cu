/* test_mask.cu — kernels/mask.cuh's block arithmetic against the definition, on the CPU.
 *
 * The main kernel trusts Mask for which query blocks a key block visits (m_block_range),
 * which tiles need per-row limits (tile_needs_mask, row_limits), and, to order and
 * complete the dQ sums, which key blocks add into a query block (first_n_block,
 * last_n_block, adders). A wrong count leaves a dQ block unconverted or converts it before
 * every share is in, so each of them is checked here against a brute-force count over
 * many lengths, windows and tiles. The split kernel's diagonal step trusts DiagonalBand
 * for which accumulator elements the causal bound hides: checked element by element.
 * nvcc compiles it as host code; it needs no GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern "C" { /* this cmocka.h declares its functions without C linkage for C++ */
#include <cmocka.h>
}

#include "../kernels/mask.cuh"
#include "../kernels/warp_layout.cuh"

namespace {

const int lengths[] = {0, 1, 2, 17, 63, 64, 65, 127, 128, 129, 200, 333};
const int windows[] = {-1, 0, 1, 7, 63, 64, 65, 130, 400};
const int tiles[][2] = {{64, 128}, {128, 128}, {64, 64}, {32, 64}, {32, 32}}; /* BM, BN */

/* Query i sees key j: the definition in mask.cuh's header. */
bool visible(const fb::Mask &mk, int64_t i, int64_t j)
{
    return j >= 0 && j < mk.sk && (mk.left < 0 || j >= i + mk.diag - mk.left) &&
           (mk.right < 0 || j <= i + mk.diag + mk.right);
}

template <class F> void for_each_case(F f)
{
    for (const auto &t : tiles)
        for (int sq : lengths)
            for (int sk : lengths)
                for (int left : windows)
                    for (int right : windows)
                        if (sq > 0) f(fb::Mask{sk, (int64_t)sk - sq, left, right}, sq, t[0], t[1]);
}

int cdiv(int a, int b) { return (a + b - 1) / b; }

} // namespace

/* A key block visits exactly the query blocks with a visible pair, and the key blocks
 * that visit a query block are an interval [first_n_block, last_n_block] of adders()
 * blocks. */
static void test_block_ranges_and_adders_match_a_brute_force_count(void **state)
{
    (void)state;
    long checked = 0;
    for_each_case([&](const fb::Mask &mk, int sq, int bm, int bn) {
        const int m_blocks = cdiv(sq, bm), n_blocks = cdiv(mk.sk, bn);
        for (int m = 0; m < m_blocks; ++m) {
            int count = 0, first = -1, last = -1;
            for (int n = 0; n < n_blocks; ++n) {
                int begin, end;
                mk.m_block_range((int64_t)n * bn, bn, bm, sq, begin, end);
                bool any = false; /* a visible pair in query block m x key block n */
                for (int i = m * bm; i < (m + 1) * bm && i < sq && !any; ++i)
                    for (int j = n * bn; j < (n + 1) * bn && !any; ++j) any = visible(mk, i, j);
                if ((begin <= m && m < end) != any)
                    fail_msg("sk %d sq %d left %d right %d tile %dx%d: m_block_range of key "
                             "block %d is [%d, %d), query block %d %s a visible pair",
                             mk.sk, sq, mk.left, mk.right, bm, bn, n, begin, end, m,
                             any ? "has" : "has no");
                if (any) {
                    if (first < 0) first = n;
                    if (last >= 0 && last != n - 1)
                        fail_msg("sk %d sq %d left %d right %d: the key blocks of query block "
                                 "%d are not an interval", mk.sk, sq, mk.left, mk.right, m);
                    last = n;
                    ++count;
                }
            }
            const int adders = mk.adders(m, bm, bn, n_blocks);
            if (adders != count)
                fail_msg("sk %d sq %d left %d right %d tile %dx%d: adders(%d) = %d, counted %d",
                         mk.sk, sq, mk.left, mk.right, bm, bn, m, adders, count);
            if (count > 0 && (mk.first_n_block(m, bm, bn) != first ||
                              mk.last_n_block(m, bm, bn, n_blocks) != last))
                fail_msg("sk %d sq %d left %d right %d tile %dx%d: query block %d has key "
                         "blocks [%d, %d], first/last_n_block say [%d, %d]", mk.sk, sq,
                         mk.left, mk.right, bm, bn, m, first, last,
                         mk.first_n_block(m, bm, bn), mk.last_n_block(m, bm, bn, n_blocks));
            ++checked;
        }
    });
    printf("    %ld query blocks checked\n", checked);
    assert_true(checked > 100000);
}

/* row_limits gives each row's visible columns of a tile, and tile_needs_mask is false only
 * where every pair of the tile (rows below sq) is visible. */
static void test_row_limits_and_tile_needs_mask_match_the_definition(void **state)
{
    (void)state;
    long tiles_checked = 0;
    for_each_case([&](const fb::Mask &mk, int sq, int bm, int bn) {
        for (int m0 = 0; m0 < sq; m0 += bm)
            for (int n0 = 0; n0 < mk.sk; n0 += bn) {
                bool masked = false;
                for (int i = m0; i < m0 + bm; ++i) {
                    int lo, hi;
                    mk.row_limits(i, n0, lo, hi);
                    for (int c = 0; c < bn; ++c) {
                        const bool vis = visible(mk, i, n0 + c);
                        if ((lo <= c && c < hi) != vis)
                            fail_msg("sk %d sq %d left %d right %d: row %d, key %d: "
                                     "row_limits [%d, %d) disagrees (visible: %d)", mk.sk, sq,
                                     mk.left, mk.right, i, n0 + c, lo, hi, (int)vis);
                        if (i < sq && !vis) masked = true;
                    }
                }
                if (masked && !mk.tile_needs_mask(m0, bm, n0, bn))
                    fail_msg("sk %d sq %d left %d right %d tile %dx%d at (%d, %d): a masked "
                             "pair, but tile_needs_mask is false", mk.sk, sq, mk.left,
                             mk.right, bm, bn, m0, n0);
                ++tiles_checked;
            }
    });
    printf("    %ld tiles checked\n", tiles_checked);
    assert_true(tiles_checked > 100000);
}

/* The split kernel's diagonal step (bwd_split.cuh, zero_band_stored in softmax_grad.cuh):
 * on a tile whose diagonal runs through its corner, a warp block past the diagonal (rows
 * start after columns) is left as stored, and every other one takes DiagonalBand's
 * decision per element at W = row0 - col0 (0 on the diagonal, -TN before it); each must
 * agree with "key c visible to row r iff c <= r" at every lane and register of the
 * layout's documented mapping (warp_layout.cuh). Then, for any offset w, all_visible and
 * all_masked must hold for every lane where they say so. */
template <int M, int N, int WM> long check_diagonal_band()
{
    using L = fb::WarpLayout<M, N, WM, false, 4>;
    using B = fb::DiagonalBand;
    static_assert(L::TM == L::TN, "the band step serves square warp blocks");
    long checked = 0;
    for (int warp = 0; warp < 4; ++warp) {
        const int r0 = L::row_block(warp) * L::TM, c0 = L::col_block(warp) * L::TN;
        for (int lane = 0; lane < 32; ++lane)
            for (int mi = 0; mi < L::MT; ++mi)
                for (int nj = 0; nj < L::NT; ++nj)
                    for (int e = 0; e < 4; ++e) {
                        const int r = r0 + 16 * mi + lane / 4 + 8 * (e / 2);
                        const int c = c0 + 8 * nj + 2 * (lane % 4) + e % 2;
                        const int k = B::k(mi, nj, e);
                        bool got = true; /* the step's per-warp choice, as the kernel's */
                        if (r0 <= c0) {
                            const int W = r0 == c0 ? 0 : -L::TN;
                            if (B::all_masked(k, W)) got = false;
                            else if (!B::all_visible(k, W)) got = k <= B::q(W, lane);
                        }
                        if (got != (c <= r))
                            fail_msg("layout %dx%d/%d warp %d lane %d tile (%d, %d) e %d: "
                                     "row %d key %d decided %s", M, N, WM, warp, lane, mi, nj,
                                     e, r, c, got ? "visible" : "masked");
                        ++checked;
                    }
    }
    for (int w = -200; w <= 200; ++w)
        for (int mi = 0; mi < L::MT; ++mi)
            for (int nj = 0; nj < L::NT; ++nj)
                for (int e = 0; e < 4; ++e)
                    for (int lane = 0; lane < 32; ++lane) {
                        const int k = B::k(mi, nj, e);
                        /* the element's own c - r, from the layout's mapping */
                        const int d = (8 * nj + 2 * (lane % 4) + e % 2) -
                                      (16 * mi + lane / 4 + 8 * (e / 2));
                        const bool vis = d <= w;
                        if (vis != (k <= B::q(w, lane)) || (B::all_masked(k, w) && vis) ||
                            (B::all_visible(k, w) && !vis))
                            fail_msg("w %d tile (%d, %d) e %d lane %d: c - r = %d, k %d, q %d, "
                                     "all_masked %d, all_visible %d", w, mi, nj, e, lane, d, k,
                                     B::q(w, lane), (int)B::all_masked(k, w),
                                     (int)B::all_visible(k, w));
                        ++checked;
                    }
    return checked;
}

static void test_diagonal_band_matches_the_causal_definition(void **state)
{
    (void)state;
    const long checked = check_diagonal_band<128, 128, 2>() + /* hd64's SplitLayoutS */
                         check_diagonal_band<64, 64, 2>();
    printf("    %ld elements checked\n", checked);
    assert_true(checked > 100000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_ranges_and_adders_match_a_brute_force_count),
        cmocka_unit_test(test_row_limits_and_tile_needs_mask_match_the_definition),
        cmocka_unit_test(test_diagonal_band_matches_the_causal_definition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
