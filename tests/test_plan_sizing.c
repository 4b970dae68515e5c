/* test_plan_sizing.c — what a plan chooses, checked without a GPU.
 *
 * Plans made from explicit device properties (problem.arch, problem.smem_per_block) for
 * sm_80, sm_86, sm_89 and sm_90, every head dim that is a multiple of 8, and a set of
 * shapes (odd lengths, GQA, MQA, varlen): the tile configuration must be the table's row
 * for that architecture, its shared memory must fit, and the grids and the workspace must
 * follow the formulas documented in src/launches.c and src/workspace.c, re-derived here
 * independently. White-box (fb_config_row) for the table itself.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "config_table.h"
#include "internal.h"

#ifdef FB_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ======================================================================================
 * Expectations
 * ====================================================================================== */

/* Architectures planned for, with their opt-in shared memory per block (CUDA C
 * Programming Guide, "Technical Specifications per Compute Capability"): A100 163 KB,
 * sm_86/sm_89 99 KB, H100/H200 227 KB. `cls` is the config-table ARCH serving it. */
typedef struct arch_row {
    int32_t arch, cls, smem_limit;
} arch_row;

static const arch_row arches[] = {
    {80, 80, 166912},
    {86, 86, 101376},
    {89, 86, 101376},
    {90, 90, 232448},
};

/* Head dims the CUDA kernels serve, and the kernel head dim each runs on. A head dim
 * past the last row must be FLASHBWD_ERR_NOT_SUPPORTED (none today: validation stops at
 * 256). A new kernel head dim gets a row here and config-table rows for every class. */
typedef struct kernel_hd_row {
    int32_t up_to, kernel_head_dim;
} kernel_hd_row;

static const kernel_hd_row kernel_head_dims[] = {
    {64, 64},
    {96, 96},
    {128, 128},
    {192, 192},
    {256, 256},
};

static int32_t expected_kernel_head_dim(int32_t head_dim)
{
    for (size_t i = 0; i < COUNT_OF(kernel_head_dims); ++i)
        if (head_dim <= kernel_head_dims[i].up_to) return kernel_head_dims[i].kernel_head_dim;
    return 0;
}

/* The config table, expanded here from the same X-macro the library compiles. */
typedef struct trow {
    int32_t arch, hd, bm, bn, st, ws, wk, wq, lag, fold, foldm, fmin, split, sst;
} trow;

static const trow table[] = {
#define ROW(a, hd, bm, bn, st, ws, wk, wq, lag, fold, foldm, fmin, split, sst)                     \
    {a, hd, bm, bn, st, ws, wk, wq, lag, fold, foldm, fmin, split, sst},
    FB_CONFIG_TABLE(ROW)
#undef ROW
};

/* Shared memory of the main kernel from its documented layout (config_table.h): K and V
 * (BN x HD, 16-bit), ST stages of Q and dO (BM x HD, 16-bit), P and 1 + LAG buffers of dS
 * (BM x BN, 16-bit), ST stages of the two fp32 row statistics (BM floats each). */
static int64_t documented_smem(const trow *r)
{
    const int64_t kv = 2 * (int64_t)r->bn * r->hd * 2;
    const int64_t q_do = (int64_t)r->st * 2 * r->bm * r->hd * 2;
    const int64_t p_ds = (2 + (int64_t)r->lag) * r->bm * r->bn * 2;
    const int64_t stats = (int64_t)r->st * 2 * r->bm * 4;
    return kv + q_do + p_ds + stats;
}

/* Shared memory of the split kernel from its documented layout (config_table.h): K and V,
 * SST stages of Q and dO, P and dS (BM x BN, 16-bit; at head dims 64 and 96 a second dS
 * buffer for the late dQ, past 64 an fp16 copy of P), SST stages of the two fp32 row
 * statistics, and two 8-byte mbarriers per stage. */
static int64_t documented_split_smem(const trow *r)
{
    const int64_t kv = 2 * (int64_t)r->bn * r->hd * 2;
    const int64_t q_do = (int64_t)r->sst * 2 * r->bm * r->hd * 2;
    const int64_t late_dq = r->hd == 64 || r->hd == 96;
    const int64_t p_ds = (2 + late_dq + (r->hd > 64)) * (int64_t)r->bm * r->bn * 2;
    const int64_t stats = (int64_t)r->sst * 2 * r->bm * 4;
    return kv + q_do + p_ds + stats + (int64_t)r->sst * 16;
}

/* Whether a plan of these keys (not deterministic, no softcap) runs the split kernel. */
static int takes_split(const trow *r, int64_t seqlen_k, int64_t smem_limit)
{
    return r->sst > 0 && r->split >= 0 && seqlen_k > r->split &&
           documented_split_smem(r) <= smem_limit;
}

/* Whether a split plan zeroes its dQ sums in the main kernel (src/launches.c): a head's
 * sums, round_up(seqlen_q, BM) x kernel head dim x 4 bytes, within FB_SPLIT_DQ_ZERO_BYTES
 * and fewer than 2^17 key blocks. Such plans put heads on the main grid's x. */
static int zeroes_in_main(const trow *r, int split, int64_t seqlen_q, int64_t seqlen_k)
{
    const int64_t n_blocks = (seqlen_k + r->bn - 1) / r->bn;
    const int64_t sums = (seqlen_q + r->bm - 1) / r->bm * r->bm * r->hd * 4;
    return split && n_blocks < (1 << 17) && sums <= FB_SPLIT_DQ_ZERO_BYTES(r->hd);
}

static int32_t class_limit(int32_t cls)
{
    for (size_t i = 0; i < COUNT_OF(arches); ++i)
        if (arches[i].cls == cls) return arches[i].smem_limit;
    return 0;
}

/* The row a plan must choose: its class's row for the kernel head dim if it fits the
 * shared memory, else the rows of the classes with less shared memory, largest first
 * (sm_90 227 KB > sm_80 163 KB > sm_86 99 KB); NULL if nothing fits. */
static const trow *expected_row(int32_t cls, int32_t khd, int64_t smem_limit)
{
    static const int32_t by_smem[] = {90, 80, 86};
    size_t start = 0;
    while (start < COUNT_OF(by_smem) && by_smem[start] != cls) ++start;
    for (size_t o = start; o < COUNT_OF(by_smem); ++o)
        for (size_t i = 0; i < COUNT_OF(table); ++i)
            if (table[i].arch == by_smem[o] && table[i].hd == khd &&
                documented_smem(&table[i]) <= smem_limit)
                return &table[i];
    return NULL;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t round_up(int64_t a, int64_t b) { return cdiv(a, b) * b; }

/* Shapes planned for each (arch, head dim). */
typedef struct shape {
    const char *name;
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
    int32_t varlen;
    int64_t total_q, total_k; /* varlen; 0 = batch * seqlen */
} shape;

static const shape shapes[] = {
    {"square 1024", 2, 8, 8, 1024, 1024, 0, 0, 0},
    {"seqlen 1", 3, 2, 2, 1, 1, 0, 0, 0},
    {"odd 17 x 1000", 1, 4, 4, 17, 1000, 0, 0, 0},
    {"1000 x 17, GQA 4", 2, 16, 4, 1000, 17, 0, 0, 0},
    {"MQA 333 x 777", 1, 12, 1, 333, 777, 0, 0, 0},
    {"varlen GQA", 4, 8, 2, 512, 640, 1, 1500, 2000},
    {"varlen default totals", 3, 4, 4, 100, 60, 1, 0, 0},
    {"long keys 300 x 4096", 1, 4, 4, 300, 4096, 0, 0, 0}, /* past FOLD: dQ's own pass */
};

/* Workspace bytes from the layout documented in src/workspace.c: fp32 regions, each
 * rounded up to 256 bytes: lse_log2 and dpsum (a float per query row), dq_accum
 * (kernel_head_dim floats per query row), and with GQA dk_accum and dv_accum
 * (kernel_head_dim floats per key row of every kv head), then dq_count (an int32 per query
 * row block; these shapes are not deterministic). Rows per head are padded to whole
 * tiles: round_up(seqlen, tile) per (batch, head), or round_up(total + batch * tile, tile)
 * per head when varlen. */
static int64_t region(int64_t floats) { return round_up(floats * 4, 256); }

static int64_t expected_workspace(const shape *s, int32_t bm, int32_t bn, int32_t khd)
{
    int64_t rows_q, rows_k;
    if (s->varlen) {
        const int64_t tq = s->total_q ? s->total_q : s->batch * s->seqlen_q;
        const int64_t tk = s->total_k ? s->total_k : s->batch * s->seqlen_k;
        rows_q = round_up(tq + s->batch * bm, bm) * s->heads_q;
        rows_k = round_up(tk + s->batch * bn, bn) * s->heads_kv;
    } else {
        rows_q = round_up(s->seqlen_q, bm) * s->heads_q * s->batch;
        rows_k = round_up(s->seqlen_k, bn) * s->heads_kv * s->batch;
    }
    int64_t bytes = 2 * region(rows_q) + region(rows_q * khd);
    if (s->heads_kv != s->heads_q) bytes += 2 * region(rows_k * khd);
    bytes += region(rows_q / bm);
    return bytes;
}

static flashbwd_problem planning_problem(int32_t arch, int32_t head_dim, const shape *s)
{
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CUDA;
    p.arch = arch;
    p.head_dim = head_dim;
    p.batch = s->batch, p.heads_q = s->heads_q, p.heads_kv = s->heads_kv;
    p.seqlen_q = s->seqlen_q, p.seqlen_k = s->seqlen_k;
    p.varlen = s->varlen, p.total_q = s->total_q, p.total_k = s->total_k;
    return p;
}

static flashbwd_plan_info info_of(const flashbwd_plan *plan)
{
    flashbwd_plan_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
    assert_int_equal(flashbwd_plan_get_info(plan, &info), FLASHBWD_OK);
    return info;
}

/* ======================================================================================
 * The checks of one plan
 * ====================================================================================== */

#define CHECK_EQ(what, got, want)                                                        \
    do {                                                                                 \
        const int64_t got_ = (int64_t)(got), want_ = (int64_t)(want);                    \
        if (got_ != want_)                                                               \
            fail_msg("sm_%d head_dim %d \"%s\": %s = %lld; expected %lld", a->arch,      \
                     head_dim, s->name, what, (long long)got_, (long long)want_);        \
    } while (0)

static void check_grid(const arch_row *a, int32_t head_dim, const shape *s,
                       const flashbwd_plan_info *info, int launch, int64_t x, int64_t y,
                       int64_t z)
{
    static const char *names[] = {"preprocess", "main", "convert dQ", "convert dKV"};
    char what[64];
    const int64_t want[3] = {x, y, z};
    for (int j = 0; j < 3; ++j) {
        snprintf(what, sizeof what, "%s grid[%d]", names[launch], j);
        CHECK_EQ(what, info->grid[launch][j], want[j]);
    }
    snprintf(what, sizeof what, "%s block.y * block.z", names[launch]);
    CHECK_EQ(what, info->block[launch][1] * info->block[launch][2], 1);
    if (info->block[launch][0] <= 0 || info->block[launch][0] > 1024 ||
        info->block[launch][0] % 32 != 0)
        fail_msg("sm_%d head_dim %d \"%s\": %s block.x = %d is not a warp multiple in 32..1024",
                 a->arch, head_dim, s->name, names[launch], info->block[launch][0]);
}

static void check_plan(const arch_row *a, int32_t head_dim, const shape *s)
{
    flashbwd_problem p = planning_problem(a->arch, head_dim, s);
    flashbwd_plan *plan = NULL;
    const int32_t st = flashbwd_plan_create(&p, &plan);
    const int32_t khd = expected_kernel_head_dim(head_dim);
    if (khd == 0) {
        if (st != FLASHBWD_ERR_NOT_SUPPORTED)
            fail_msg("sm_%d head_dim %d \"%s\": status %s; expected NOT_SUPPORTED (no kernel)",
                     a->arch, head_dim, s->name, flashbwd_status_name(st));
        char want[32];
        snprintf(want, sizeof want, "head_dim = %d", head_dim);
        if (!strstr(flashbwd_last_error(), want))
            fail_msg("message \"%s\" does not name \"%s\"", flashbwd_last_error(), want);
        assert_null(plan);
        return;
    }
    if (st != FLASHBWD_OK)
        fail_msg("sm_%d head_dim %d \"%s\": %s", a->arch, head_dim, s->name,
                 flashbwd_last_error());
    const flashbwd_plan_info info = info_of(plan);
    const trow *row = expected_row(a->cls, khd, a->smem_limit);
    assert_non_null(row);

    CHECK_EQ("backend", info.backend, FLASHBWD_BACKEND_CUDA);
    CHECK_EQ("arch", info.arch, a->arch);
    CHECK_EQ("smem_per_block", info.smem_per_block, a->smem_limit);
    if (info.sm_count <= 0) fail_msg("sm_%d: sm_count %d", a->arch, info.sm_count);
    CHECK_EQ("kernel_head_dim", info.kernel_head_dim, khd);
    CHECK_EQ("block_m", info.block_m, row->bm);
    CHECK_EQ("block_n", info.block_n, row->bn);
    const int split = takes_split(row, s->seqlen_k, a->smem_limit);
    CHECK_EQ("stages_q", info.stages_q, split ? row->sst : row->st);
    CHECK_EQ("stages_do", info.stages_do, split ? row->sst : row->st);
    CHECK_EQ("smem_bytes", info.smem_bytes,
             split ? documented_split_smem(row) : documented_smem(row));
    if (info.smem_bytes > a->smem_limit)
        fail_msg("sm_%d head_dim %d: smem_bytes %d exceeds the limit %d", a->arch, head_dim,
                 info.smem_bytes, a->smem_limit);
    CHECK_EQ("num_threads", info.num_threads, FB_NUM_THREADS);

    const int gqa = s->heads_kv != s->heads_q;
    const int64_t m_blocks = cdiv(s->seqlen_q, row->bm), n_blocks = cdiv(s->seqlen_k, row->bn);
    CHECK_EQ("num_launches", info.num_launches, gqa ? 4 : 3);
    check_grid(a, head_dim, s, &info, FLASHBWD_LAUNCH_PREPROCESS, m_blocks, s->heads_q, s->batch);
    if (zeroes_in_main(row, split, s->seqlen_q, s->seqlen_k) && n_blocks <= 65535)
        check_grid(a, head_dim, s, &info, FLASHBWD_LAUNCH_MAIN, s->heads_q, n_blocks, s->batch);
    else
        check_grid(a, head_dim, s, &info, FLASHBWD_LAUNCH_MAIN, n_blocks, s->heads_q, s->batch);
    if (split || (row->fold >= 0 && s->seqlen_k > row->fold) || s->seqlen_k <= row->fmin) {
        /* its own pass converts dQ */
        check_grid(a, head_dim, s, &info, FLASHBWD_LAUNCH_CONVERT_DQ, m_blocks, s->heads_q,
                   s->batch);
    } else { /* the main kernel converts dQ: the entry is not launched */
        for (int j = 0; j < 3; ++j) {
            CHECK_EQ("convert dQ grid", info.grid[FLASHBWD_LAUNCH_CONVERT_DQ][j], 0);
            CHECK_EQ("convert dQ block", info.block[FLASHBWD_LAUNCH_CONVERT_DQ][j], 0);
        }
    }
    CHECK_EQ("main block.x", info.block[FLASHBWD_LAUNCH_MAIN][0], info.num_threads);
    if (gqa) {
        check_grid(a, head_dim, s, &info, FLASHBWD_LAUNCH_CONVERT_DKV, n_blocks, s->heads_kv,
                   s->batch);
    } else {
        for (int j = 0; j < 3; ++j) {
            CHECK_EQ("unused convert dKV grid", info.grid[FLASHBWD_LAUNCH_CONVERT_DKV][j], 0);
            CHECK_EQ("unused convert dKV block", info.block[FLASHBWD_LAUNCH_CONVERT_DKV][j], 0);
        }
    }

    CHECK_EQ("workspace_bytes", info.workspace_bytes, expected_workspace(s, row->bm, row->bn, khd));
    size_t ws = 0;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &ws), FLASHBWD_OK);
    CHECK_EQ("flashbwd_plan_workspace_size", ws, info.workspace_bytes);
    flashbwd_plan_destroy(plan);
}

/* ======================================================================================
 * Tests
 * ====================================================================================== */

/* One test per architecture (main() passes the row). */
static void test_plan_every_head_dim_and_shape_follows_the_table_and_formulas(void **state)
{
    const arch_row *a = *state;
    for (int32_t head_dim = 8; head_dim <= 256; head_dim += 8)
        for (size_t s = 0; s < COUNT_OF(shapes); ++s) check_plan(a, head_dim, &shapes[s]);
}

static void test_config_table_rows_fit_their_arch_and_give_whole_mma_tiles_per_warp(void **state)
{
    (void)state;
    assert_int_equal(fb_config_count(), COUNT_OF(table));
    assert_null(fb_config_row(-1));
    assert_null(fb_config_row(fb_config_count()));
    for (int i = 0; i < fb_config_count(); ++i) {
        const fb_config *c = fb_config_row(i);
        const trow *r = &table[i];
        assert_non_null(c);
        const int32_t limit = class_limit(c->arch_class);
        if (limit == 0) fail_msg("row %d: ARCH %d is not a known class", i, c->arch_class);
        if (c->arch_class != r->arch || c->kernel_head_dim != r->hd || c->block_m != r->bm ||
            c->block_n != r->bn || c->stages != r->st || c->warps_sdp != r->ws ||
            c->warps_dkv != r->wk || c->warps_dq != r->wq || c->dq_lag != r->lag ||
            c->dq_fold != r->fold || c->dq_fold_masked != r->foldm ||
            c->dq_fold_min != r->fmin)
            fail_msg("row %d: compiled row differs from FB_CONFIG_TABLE", i);
        if (c->smem_bytes != documented_smem(r))
            fail_msg("row %d (sm_%d, hd %d): smem %d; the documented layout needs %lld", i,
                     r->arch, r->hd, c->smem_bytes, (long long)documented_smem(r));
        if (c->smem_bytes > limit)
            fail_msg("row %d (sm_%d, hd %d): smem %d exceeds the arch's %d", i, r->arch, r->hd,
                     c->smem_bytes, limit);
        /* Every warp's share of each GEMM is whole mma.m16n8k16 tiles: 16 rows along M,
         * 8 columns along N (PTX ISA, warp-level matrix shapes). */
        const int w = FB_NUM_WARPS;
        if (w % r->ws || w % r->wk || w % r->wq)
            fail_msg("row %d: WS %d, WK %d, WQ %d must divide %d warps", i, r->ws, r->wk, r->wq, w);
        const struct {
            const char *gemm;
            int32_t m, m_warps, n, n_warps;
        } gemms[] = {
            {"S, dP (BM x BN)", r->bm, r->ws, r->bn, w / r->ws},
            {"dK, dV (BN x HD)", r->bn, r->wk, r->hd, w / r->wk},
            {"dQ (BM x HD)", r->bm, r->wq, r->hd, w / r->wq},
        };
        for (size_t g = 0; g < COUNT_OF(gemms); ++g)
            if (gemms[g].m % (16 * gemms[g].m_warps) || gemms[g].n % (8 * gemms[g].n_warps))
                fail_msg("row %d (sm_%d, hd %d): %s over %d x %d warps is not whole 16 x 8 "
                         "tiles per warp", i, r->arch, r->hd, gemms[g].gemm, gemms[g].m_warps,
                         gemms[g].n_warps);
    }
}

static void test_config_table_has_one_row_per_class_and_kernel_head_dim(void **state)
{
    (void)state;
    const int32_t classes[] = {80, 86, 90};
    for (size_t c = 0; c < COUNT_OF(classes); ++c)
        for (size_t k = 0; k < COUNT_OF(kernel_head_dims); ++k) {
            int n = 0;
            for (size_t i = 0; i < COUNT_OF(table); ++i)
                n += table[i].arch == classes[c] &&
                     table[i].hd == kernel_head_dims[k].kernel_head_dim;
            if (n != 1)
                fail_msg("sm_%d, kernel head dim %d: %d rows; expected 1", classes[c],
                         kernel_head_dims[k].kernel_head_dim, n);
        }
}

/* plan_create with the testing variable `var` set to `value` for that call only. */
static int32_t plan_create_with_env(const char *var, const char *value,
                                    const flashbwd_problem *p, flashbwd_plan **plan)
{
    assert_int_equal(setenv(var, value, 1), 0);
    const int32_t st = flashbwd_plan_create(p, plan);
    unsetenv(var);
    return st;
}

/* A testing variable's bad value: plan_create gives INVALID_VALUE and no plan, and the
 * message names the variable. */
static void expect_env_rejected(int32_t st, const flashbwd_plan *plan, const char *var,
                                const char *value)
{
    if (st != FLASHBWD_ERR_INVALID_VALUE || plan != NULL)
        fail_msg("%s \"%s\": %s; expected INVALID_VALUE", var, value, flashbwd_status_name(st));
    if (!strstr(flashbwd_last_error(), var))
        fail_msg("message \"%s\" does not name the variable", flashbwd_last_error());
}

/* FLASHBWD_FORCE_DQ_FOLD (the GPU suite uses it to run both main kernels at any length):
 * 1 folds the dQ conversion into the main kernel (convert-dQ grid 0), 0 keeps its own
 * pass, anything else is INVALID_VALUE naming the variable. Unset, the table decides: on
 * sm_90 hd128 folds up to 2048 keys, without a mask (FOLD 2048) and with a causal mask or
 * a window (FOLDM 2048). (The split kernel, which never folds, is turned off here.) */
static void test_forced_dq_fold_sets_the_convert_launch_or_is_invalid(void **state)
{
    (void)state;
    assert_int_equal(setenv("FLASHBWD_FORCE_SPLIT", "0", 1), 0);
    const struct {
        const char *force;
        int want; /* 1: folded, 0: own pass, -1: INVALID_VALUE, -2: the table's rule */
    } cases[] = {{"1", 1}, {"0", 0}, {"", -2}, {"2", -1}, {"yes", -1}, {"01", -1}};
    enum { NO_MASK, CAUSAL, WINDOW, MASK_KINDS };
    static const char *const mask_names[] = {"no mask", "causal", "window 64 left"};
    for (size_t c = 0; c < COUNT_OF(cases); ++c)
        for (size_t s = 0; s < COUNT_OF(shapes); ++s)
            for (int mask = NO_MASK; mask < MASK_KINDS; ++mask) {
                flashbwd_problem p = planning_problem(90, 128, &shapes[s]);
                p.causal = mask == CAUSAL;
                if (mask == WINDOW) p.use_window = 1, p.window_left = 64, p.window_right = -1;
                flashbwd_plan *plan = NULL;
                const int32_t st =
                    plan_create_with_env("FLASHBWD_FORCE_DQ_FOLD", cases[c].force, &p, &plan);
                if (cases[c].want == -1) {
                    expect_env_rejected(st, plan, "FLASHBWD_FORCE_DQ_FOLD", cases[c].force);
                    continue;
                }
                if (st != FLASHBWD_OK)
                    fail_msg("force \"%s\", %s: %s", cases[c].force, mask_names[mask],
                             flashbwd_last_error());
                const flashbwd_plan_info info = info_of(plan);
                const int folded =
                    cases[c].want >= 0 ? cases[c].want : shapes[s].seqlen_k <= 2048;
                const int32_t *g = info.grid[FLASHBWD_LAUNCH_CONVERT_DQ];
                if (folded ? (g[0] | g[1] | g[2]) != 0 : g[0] <= 0 || g[1] <= 0 || g[2] <= 0)
                    fail_msg("force \"%s\", %s, %s: convert-dQ grid %d x %d x %d; expected %s",
                             cases[c].force, shapes[s].name, mask_names[mask], g[0], g[1],
                             g[2], folded ? "0 (folded)" : "a launch");
                flashbwd_plan_destroy(plan);
            }
    unsetenv("FLASHBWD_FORCE_SPLIT");
}

/* FMIN: the sm_90 hd64 row (FOLD and FOLDM -1, FMIN 1024) converts dQ in its own pass up to
 * 1024 keys and folds it in past that, with or without a mask (main kernel: the split
 * kernel turned off). */
static void test_hd64_folds_dq_only_past_fmin(void **state)
{
    (void)state;
    assert_int_equal(setenv("FLASHBWD_FORCE_SPLIT", "0", 1), 0);
    const struct {
        size_t shape; /* index into shapes */
        int folded;
    } cases[] = {{0, 0} /* 1024 keys */, {2, 0} /* 1000 */, {1, 0} /* 1 */, {7, 1} /* 4096 */};
    for (size_t c = 0; c < COUNT_OF(cases); ++c)
        for (int causal = 0; causal < 2; ++causal) {
            const shape *sh = &shapes[cases[c].shape];
            flashbwd_problem p = planning_problem(90, 64, sh);
            p.causal = causal;
            flashbwd_plan *plan = NULL;
            if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK)
                fail_msg("%s: %s", sh->name, flashbwd_last_error());
            const flashbwd_plan_info info = info_of(plan);
            const int32_t *g = info.grid[FLASHBWD_LAUNCH_CONVERT_DQ]; /* info outlives g */
            const int folded = (g[0] | g[1] | g[2]) == 0;
            if (folded != cases[c].folded)
                fail_msg("hd64 %s, causal %d: convert-dQ grid %d x %d x %d; expected %s",
                         sh->name, causal, g[0], g[1], g[2],
                         cases[c].folded ? "0 (folded)" : "a launch");
            flashbwd_plan_destroy(plan);
        }
    unsetenv("FLASHBWD_FORCE_SPLIT");
}

/* At hd128 the split kernel numbers its CTAs with an int (FB_SPLIT_REFILL_DERIVED): a main
 * grid past 2^30 CTAs (16384 heads x 16384 batch entries x 8 key blocks) takes bwd_main,
 * 2^29 CTAs still the split kernel; hd64's split kernel serves both. */
static void test_split_kernel_leaves_grids_past_2_to_30_ctas_to_the_main_kernel(void **state)
{
    (void)state;
    for (int hd = 64; hd <= 128; hd += 64) {
        const trow *row = expected_row(90, hd, class_limit(90));
        assert_non_null(row);
        for (int big = 0; big < 2; ++big) {
            const shape sh = {"wide", big ? 16384 : 4096, 16384, 16384, 1024, 1024, 0, 0, 0};
            flashbwd_problem p = planning_problem(90, hd, &sh);
            flashbwd_plan *plan = NULL;
            if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK)
                fail_msg("hd %d batch %lld: %s", hd, (long long)sh.batch, flashbwd_last_error());
            const flashbwd_plan_info info = info_of(plan);
            const int main_kernel = big && hd == 128;
            const int64_t want = main_kernel ? documented_smem(row) : documented_split_smem(row);
            if (info.smem_bytes != want)
                fail_msg("hd %d batch %lld: smem %d; expected %lld (the %s kernel)", hd,
                         (long long)sh.batch, info.smem_bytes, (long long)want,
                         main_kernel ? "main" : "split");
            flashbwd_plan_destroy(plan);
        }
    }
}

/* The split kernel (config table SPLIT, SST): it serves the sm_90 rows' plans without
 * deterministic mode or softcap, as their main launch, with its own shared memory and
 * stages and dQ converted in its own pass. FLASHBWD_FORCE_SPLIT=0 turns it off, =1 on for
 * every plan it can serve (never a deterministic or softcap one); anything else is
 * INVALID_VALUE naming the variable. On older classes it never runs. */
static void test_split_kernel_serves_the_plans_it_can_or_is_forced(void **state)
{
    (void)state;
    const struct {
        const char *force;
        int want; /* 1: on where it serves, 0: off, -1: INVALID_VALUE, -2: the table's rule */
    } cases[] = {{"", -2}, {"1", 1}, {"0", 0}, {"2", -1}, {"on", -1}};
    for (size_t c = 0; c < COUNT_OF(cases); ++c)
        for (size_t a = 0; a < COUNT_OF(arches); ++a)
            for (size_t k = 0; k < COUNT_OF(kernel_head_dims); ++k)
                for (int feature = 0; feature < 3; ++feature) { /* plain, det, softcap */
                    const int32_t khd = kernel_head_dims[k].kernel_head_dim;
                    const shape *sh = &shapes[feature == 0 ? 7 : 0];
                    flashbwd_problem p = planning_problem(arches[a].arch, khd, sh);
                    p.deterministic = feature == 1;
                    if (feature == 2) p.softcap = 30.0f;
                    flashbwd_plan *plan = NULL;
                    const int32_t st =
                        plan_create_with_env("FLASHBWD_FORCE_SPLIT", cases[c].force, &p, &plan);
                    if (cases[c].want == -1) {
                        expect_env_rejected(st, plan, "FLASHBWD_FORCE_SPLIT", cases[c].force);
                        continue;
                    }
                    if (st != FLASHBWD_OK)
                        fail_msg("sm_%d hd %d: %s", arches[a].arch, khd, flashbwd_last_error());
                    const trow *row = expected_row(arches[a].cls, khd, arches[a].smem_limit);
                    assert_non_null(row);
                    const int serves = feature == 0 && row->sst > 0 &&
                                       documented_split_smem(row) <= arches[a].smem_limit;
                    const int split =
                        cases[c].want == -2
                            ? feature == 0 && takes_split(row, sh->seqlen_k, arches[a].smem_limit)
                            : serves && cases[c].want == 1;
                    const flashbwd_plan_info info = info_of(plan);
                    const int32_t *g = info.grid[FLASHBWD_LAUNCH_CONVERT_DQ];
                    const int64_t smem =
                        split ? documented_split_smem(row) : documented_smem(row);
                    if (info.smem_bytes != smem ||
                        info.stages_q != (split ? row->sst : row->st) ||
                        (split && (g[0] <= 0 || g[1] <= 0 || g[2] <= 0)))
                        fail_msg("force \"%s\", sm_%d hd %d, %s: smem %d, %d stages, convert-dQ "
                                 "grid %d; expected the %s kernel", cases[c].force,
                                 arches[a].arch, khd,
                                 feature == 0   ? "plain"
                                 : feature == 1 ? "deterministic"
                                                : "softcap",
                                 info.smem_bytes, info.stages_q, g[0], split ? "split" : "main");
                    flashbwd_plan_destroy(plan);
                }
}

/* The main grid: (key blocks, heads, batch); with a mask (causal or a window, where key
 * blocks differ in length) (heads, key blocks, batch), so each head's longest key block
 * starts first (src/launches.c). (Without the dQ zeroing in the main kernel, which puts
 * heads on x too: test_dq_zeroing_in_main_follows_the_head_sums_and_its_switch.) */
static void test_masked_plans_put_heads_on_main_grid_x(void **state)
{
    (void)state;
    const shape *s = &shapes[2]; /* odd 17 x 1000: 4 heads, 8 key blocks of 128, batch 1 */
    for (int mask = 0; mask < 3; ++mask) {
        flashbwd_problem p = planning_problem(90, 128, s);
        p.causal = mask == 1;
        if (mask == 2) p.use_window = 1, p.window_left = 100, p.window_right = 100;
        flashbwd_plan *plan = NULL;
        assert_int_equal(plan_create_with_env("FLASHBWD_SPLIT_DQ_ZERO", "0", &p, &plan),
                         FLASHBWD_OK);
        const flashbwd_plan_info info = info_of(plan);
        const int32_t *g = info.grid[FLASHBWD_LAUNCH_MAIN];
        const int64_t n_blocks = cdiv(s->seqlen_k, info.block_n);
        const int64_t x = mask ? s->heads_q : n_blocks, y = mask ? n_blocks : s->heads_q;
        if (g[0] != x || g[1] != y || g[2] != s->batch)
            fail_msg("mask %d: main grid %d x %d x %d; expected %lld x %lld x %lld", mask, g[0],
                     g[1], g[2], (long long)x, (long long)y, (long long)s->batch);
        flashbwd_plan_destroy(plan);
    }
}

/* Long masked plans group their heads (src/launches.c): G is the least divisor of heads_q
 * with G >= 4 and G >= 2 * SMs / key blocks, else heads_q; the grid is (G, key blocks,
 * batch x heads / G). Worked by hand from that rule: 132 SMs, 128 key blocks of 128 keys
 * (16k): 2 * 132 / 128 -> 3, so 4 of 16 heads; 64 key blocks (8k): 5 -> 8; 32 (4k): 9 ->
 * 16 = every head; 12 heads at 16k: 4; 7 heads (prime): 7; 24 heads with 8 SMs: 4. */
static void test_masked_plans_group_heads_from_sm_count_and_key_blocks(void **state)
{
    (void)state;
    const struct {
        int64_t heads, seqlen;
        int32_t sms, want_g;
    } cases[] = {{16, 16384, 132, 4}, {16, 8192, 132, 8}, {16, 4096, 132, 16},
                 {12, 16384, 132, 4}, {7, 16384, 132, 7},  {24, 16384, 8, 4},
                 {32, 8192, 132, 8}};
    for (size_t c = 0; c < COUNT_OF(cases); ++c) {
        shape s = {"grouped", 2, cases[c].heads, cases[c].heads, cases[c].seqlen,
                   cases[c].seqlen, 0, 0, 0};
        flashbwd_problem p = planning_problem(90, 64, &s); /* 128-key blocks, groups */
        p.causal = 1;
        p.sm_count = cases[c].sms;
        flashbwd_plan *plan = NULL;
        assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
        const flashbwd_plan_info info = info_of(plan);
        const int32_t *g = info.grid[FLASHBWD_LAUNCH_MAIN];
        const int64_t n_blocks = cdiv(s.seqlen_k, info.block_n);
        const int64_t G = cases[c].want_g;
        if (g[0] != G || g[1] != n_blocks || g[2] != s.batch * (s.heads_q / G))
            fail_msg("%lld heads, %lld keys, %d SMs: main grid %d x %d x %d; expected %lld x "
                     "%lld x %lld", (long long)s.heads_q, (long long)s.seqlen_k, cases[c].sms,
                     g[0], g[1], g[2], (long long)G, (long long)n_blocks,
                     (long long)(s.batch * (s.heads_q / G)));
        flashbwd_plan_destroy(plan);
        /* hd128's split kernel has a grouped instance (FB_SPLIT_GROUPED): the same grid,
         * but from 128 key blocks (16k keys) key blocks on x (FB_SPLIT_KEYS_ON_X_FROM);
         * its bwd_main (deterministic plans) and every hd96 kernel map no groups. */
        const struct {
            int32_t hd, det, grouped;
        } rows[] = {{128, 0, 1}, {128, 1, 0}, {96, 0, 0}, {96, 1, 0}};
        for (size_t r = 0; r < COUNT_OF(rows); ++r) {
            p.head_dim = rows[r].hd, p.deterministic = rows[r].det;
            assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
            const flashbwd_plan_info ir = info_of(plan);
            const int32_t *gr = ir.grid[FLASHBWD_LAUNCH_MAIN];
            const int64_t nb = cdiv(s.seqlen_k, ir.block_n);
            const int keys_x = rows[r].hd == 128 && !rows[r].det && nb >= 128;
            const int64_t x = keys_x ? nb : rows[r].grouped ? G : s.heads_q;
            const int64_t y = keys_x ? s.heads_q : nb, z = keys_x ? s.batch
                                                              : s.batch * (s.heads_q / x);
            if (gr[0] != x || gr[1] != y || gr[2] != z)
                fail_msg("hd%d%s, %lld heads, %lld keys: main grid %d x %d x %d; expected "
                         "%lld x %lld x %lld", rows[r].hd, rows[r].det ? " deterministic" : "",
                         (long long)s.heads_q, (long long)s.seqlen_k, gr[0], gr[1], gr[2],
                         (long long)x, (long long)y, (long long)z);
            flashbwd_plan_destroy(plan);
        }
    }
}

/* FLASHBWD_HEAD_GROUP=G (an A/B of the grid order): 0 puts key blocks on x, a divisor of
 * heads_q groups the heads by it, with or without a mask (hd64; hd96, whose kernels map no
 * groups, puts every head on x for any G > 0); anything else is INVALID_VALUE naming the
 * variable. */
static void test_forced_head_group_is_a_divisor_of_heads_or_invalid(void **state)
{
    (void)state;
    const shape *s = &shapes[0]; /* square 1024: batch 2, 8 heads, 8 key blocks of 128 */
    const char *good[] = {"0", "1", "2", "4", "8"};
    const char *bad[] = {"3", "16", "-1", "x", "2x", "9"};
    for (int mask = 0; mask < 2; ++mask)
        for (size_t c = 0; c < COUNT_OF(good); ++c) {
            flashbwd_problem p = planning_problem(90, 64, s);
            p.causal = mask;
            flashbwd_plan *plan = NULL;
            const int32_t st = plan_create_with_env("FLASHBWD_HEAD_GROUP", good[c], &p, &plan);
            if (st != FLASHBWD_OK) fail_msg("\"%s\": %s", good[c], flashbwd_last_error());
            const flashbwd_plan_info info = info_of(plan);
            const int32_t *g = info.grid[FLASHBWD_LAUNCH_MAIN];
            const int64_t G = atoi(good[c]), n_blocks = cdiv(s->seqlen_k, info.block_n);
            const int64_t x = G ? G : n_blocks, y = G ? n_blocks : s->heads_q;
            const int64_t z = G ? s->batch * (s->heads_q / G) : s->batch;
            if (g[0] != x || g[1] != y || g[2] != z)
                fail_msg("mask %d G %s: main grid %d x %d x %d; expected %lld x %lld x %lld",
                         mask, good[c], g[0], g[1], g[2], (long long)x, (long long)y,
                         (long long)z);
            flashbwd_plan_destroy(plan);
        }
    for (size_t c = 0; c < COUNT_OF(bad); ++c) {
        flashbwd_problem p = planning_problem(90, 64, s);
        flashbwd_plan *plan = NULL;
        expect_env_rejected(plan_create_with_env("FLASHBWD_HEAD_GROUP", bad[c], &p, &plan),
                            plan, "FLASHBWD_HEAD_GROUP", bad[c]);
    }
    /* hd96's kernels map no groups: any G > 0 puts every head on x */
    const char *hd96[] = {"0", "1", "2", "8"};
    for (size_t c = 0; c < COUNT_OF(hd96); ++c) {
        flashbwd_problem p = planning_problem(90, 96, s);
        p.causal = 1;
        flashbwd_plan *plan = NULL;
        const int32_t st = plan_create_with_env("FLASHBWD_HEAD_GROUP", hd96[c], &p, &plan);
        if (st != FLASHBWD_OK) fail_msg("hd96 \"%s\": %s", hd96[c], flashbwd_last_error());
        const flashbwd_plan_info info = info_of(plan);
        const int32_t *g = info.grid[FLASHBWD_LAUNCH_MAIN];
        const int64_t x = atoi(hd96[c]) ? s->heads_q : cdiv(s->seqlen_k, info.block_n);
        if (g[0] != x || g[2] != s->batch)
            fail_msg("hd96 G %s: main grid %d x %d x %d; expected x %lld, z %lld", hd96[c],
                     g[0], g[1], g[2], (long long)x, (long long)s->batch);
        flashbwd_plan_destroy(plan);
    }
}

/* Split plans of the rows that overlap the convert pass with the split kernel's tail
 * (FB_SPLIT_DQ_OVERLAP: hd > 64 on sm_90) set dq_overlap, and the pass takes the blocks of
 * the last 2 x SMs / key blocks + 1 (batch, head) pairs last (dq_tail_blocks, at most the
 * grid). FLASHBWD_DQ_OVERLAP=0 turns it off; FLASHBWD_DQ_TAIL_PAIRS=N sets the pairs; a
 * bad value of either is INVALID_VALUE naming the variable. */
static void test_split_plans_overlap_the_convert_pass_where_the_row_does(void **state)
{
    (void)state;
    /* more (batch, head) pairs than the tail takes: 512 against 2 x 132 / 8 + 1 = 34 */
    const shape grid = {"1024 x 1024, 32 x 16 heads", 32, 16, 16, 1024, 1024, 0, 0, 0};
    const shape *s = &grid;
    const int32_t dims[] = {64, 96, 128, 192, 256}, sms = 132;
    const int64_t pairs = (int64_t)s->batch * s->heads_q;
    for (size_t i = 0; i < COUNT_OF(dims); ++i) {
        flashbwd_problem p = planning_problem(90, dims[i], s);
        p.sm_count = sms;
        flashbwd_plan *plan = NULL;
        assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
        const fb_launch_table *t = &plan->launches;
        const flashbwd_plan_info info = info_of(plan);
        if (!t->split) fail_msg("hd%d: a split plan expected", dims[i]);
        if (t->dq_overlap != FB_SPLIT_DQ_OVERLAP(dims[i]))
            fail_msg("hd%d: dq_overlap %d", dims[i], t->dq_overlap);
        const int64_t n_blocks = cdiv(s->seqlen_k, info.block_n);
        const int64_t m_blocks = cdiv(s->seqlen_q, info.block_m);
        int64_t tail = cdiv(2 * sms, n_blocks) + 1;
        if (tail > pairs) tail = pairs;
        if (dims[i] == 128) assert_true(tail < pairs); /* the formula, not the cap */
        if (t->dq_tail_blocks != tail * m_blocks)
            fail_msg("hd%d: dq_tail_blocks %lld; expected %lld", dims[i],
                     (long long)t->dq_tail_blocks, (long long)(tail * m_blocks));
        flashbwd_plan_destroy(plan);
    }
    flashbwd_problem p = planning_problem(90, 128, s);
    flashbwd_plan *plan = NULL;
    assert_int_equal(plan_create_with_env("FLASHBWD_DQ_OVERLAP", "0", &p, &plan), FLASHBWD_OK);
    assert_int_equal(plan->launches.dq_overlap, 0);
    flashbwd_plan_destroy(plan);
    const struct {
        const char *pairs;
        int64_t want;
    } forced[] = {{"0", 0}, {"3", 3}, {"1000000", pairs}};
    for (size_t c = 0; c < COUNT_OF(forced); ++c) {
        plan = NULL;
        assert_int_equal(plan_create_with_env("FLASHBWD_DQ_TAIL_PAIRS", forced[c].pairs, &p, &plan),
                         FLASHBWD_OK);
        const int64_t m_blocks = cdiv(s->seqlen_q, info_of(plan).block_m);
        if (plan->launches.dq_tail_blocks != forced[c].want * m_blocks)
            fail_msg("FLASHBWD_DQ_TAIL_PAIRS %s: dq_tail_blocks %lld; expected %lld",
                     forced[c].pairs, (long long)plan->launches.dq_tail_blocks,
                     (long long)(forced[c].want * m_blocks));
        flashbwd_plan_destroy(plan);
    }
    const char *bad_pairs[] = {"-1", "x", "2x"};
    for (size_t c = 0; c < COUNT_OF(bad_pairs); ++c) {
        plan = NULL;
        expect_env_rejected(plan_create_with_env("FLASHBWD_DQ_TAIL_PAIRS", bad_pairs[c], &p, &plan),
                            plan, "FLASHBWD_DQ_TAIL_PAIRS", bad_pairs[c]);
    }
    plan = NULL;
    expect_env_rejected(plan_create_with_env("FLASHBWD_DQ_OVERLAP", "2", &p, &plan), plan,
                        "FLASHBWD_DQ_OVERLAP", "2");
}

/* FLASHBWD_FORCE_HEADS_ON_X (an A/B of the grid order): 1 puts heads on the main grid's x
 * and 0 key blocks, with or without a mask; heads go on x only while the key blocks fit
 * y's 65535; anything else is INVALID_VALUE naming the variable. */
static void test_forced_grid_order_puts_heads_or_key_blocks_on_x_or_is_invalid(void **state)
{
    (void)state;
    const char *bad[] = {"2", "yes", "01"};
    for (int mask = 0; mask < 2; ++mask)
        for (int force = 0; force < 2; ++force)
            for (int huge = 0; huge < 2; ++huge) {
                shape s = shapes[2]; /* odd 17 x 1000: 4 heads, 8 key blocks of 128, batch 1 */
                if (huge) s.seqlen_k = 65536LL * 128 + 1, s.seqlen_q = 1; /* 65537 key blocks */
                flashbwd_problem p = planning_problem(90, 128, &s);
                p.causal = mask;
                flashbwd_plan *plan = NULL;
                const int32_t st = plan_create_with_env("FLASHBWD_FORCE_HEADS_ON_X",
                                                        force ? "1" : "0", &p, &plan);
                if (st != FLASHBWD_OK) fail_msg("%s", flashbwd_last_error());
                const flashbwd_plan_info info = info_of(plan);
                const int32_t *g = info.grid[FLASHBWD_LAUNCH_MAIN];
                const int64_t n_blocks = cdiv(s.seqlen_k, info.block_n);
                const int heads_x = force && !huge;
                const int64_t x = heads_x ? s.heads_q : n_blocks;
                const int64_t y = heads_x ? n_blocks : s.heads_q;
                if (g[0] != x || g[1] != y || g[2] != s.batch)
                    fail_msg("mask %d force %d huge %d: main grid %d x %d x %d; expected %lld x "
                             "%lld x %lld", mask, force, huge, g[0], g[1], g[2], (long long)x,
                             (long long)y, (long long)s.batch);
                flashbwd_plan_destroy(plan);
            }
    for (size_t c = 0; c < COUNT_OF(bad); ++c) {
        flashbwd_problem p = planning_problem(90, 128, &shapes[2]);
        flashbwd_plan *plan = NULL;
        expect_env_rejected(plan_create_with_env("FLASHBWD_FORCE_HEADS_ON_X", bad[c], &p, &plan),
                            plan, "FLASHBWD_FORCE_HEADS_ON_X", bad[c]);
    }
}

/* An on/off environment switch read at plan creation: 0, 1 and unset plan (head dim hd,
 * sm_90); anything else is INVALID_VALUE naming the variable. */
static void expect_switch_takes_0_or_1(const char *var, int32_t hd)
{
    const struct {
        const char *value;
        int ok;
    } cases[] = {{"0", 1}, {"1", 1}, {"", 1}, {"2", 0}, {"off", 0}, {"00", 0}, {"10", 0}};
    for (size_t c = 0; c < COUNT_OF(cases); ++c) {
        flashbwd_problem p = planning_problem(90, hd, &shapes[0]);
        flashbwd_plan *plan = NULL;
        const int32_t st = plan_create_with_env(var, cases[c].value, &p, &plan);
        if (!cases[c].ok) {
            expect_env_rejected(st, plan, var, cases[c].value);
            continue;
        }
        if (st != FLASHBWD_OK)
            fail_msg("%s hd %d \"%s\": %s", var, hd, cases[c].value, flashbwd_last_error());
        flashbwd_plan_destroy(plan);
    }
}

/* FLASHBWD_LAUNCH_GRAPH (0: launch the kernels one by one; the GPU suite runs both ways). */
static void test_launch_graph_switch_takes_0_or_1(void **state)
{
    (void)state;
    expect_switch_takes_0_or_1("FLASHBWD_LAUNCH_GRAPH", 128);
}

/* FLASHBWD_SPLIT_TMA (0: the split kernel refills its ring with cp.async even where TMA
 * could; the GPU suite runs both ways), for a plan with TMA (hd128) and one without (hd96). */
static void test_split_tma_switch_takes_0_or_1(void **state)
{
    (void)state;
    expect_switch_takes_0_or_1("FLASHBWD_SPLIT_TMA", 128);
    expect_switch_takes_0_or_1("FLASHBWD_SPLIT_TMA", 96);
}

/* Split plans whose heads' dQ sums are small zero them in the main kernel and put heads
 * on x with or without a mask (src/launches.c); larger sums keep key blocks on x without
 * a mask; FLASHBWD_SPLIT_DQ_ZERO=0|1 turns the zeroing off, or on at any length, and any
 * other value is INVALID_VALUE. Without a mask the grid's order tells which. */
static void test_dq_zeroing_in_main_follows_the_head_sums_and_its_switch(void **state)
{
    (void)state;
    const struct {
        const char *name;
        int32_t head_dim;
        int64_t seqlen; /* batch 2, 8 heads */
        const char *env;
        int heads_x;
    } cases[] = {
        {"hd64 512", 64, 512, NULL, 1},
        {"hd64 at the bound", 64, FB_SPLIT_DQ_ZERO_BYTES(64) / (64 * 4), NULL, 1},
        {"hd64 past the bound", 64, FB_SPLIT_DQ_ZERO_BYTES(64) / (64 * 4) + 128, NULL, 0},
        {"hd128 512 (its row zeroes only where FB_SPLIT_DQ_ZERO_BYTES(128) reaches)", 128, 512,
         NULL, FB_SPLIT_DQ_ZERO_BYTES(128) >= 512 * 128 * 4},
        {"hd64 512, switched off", 64, 512, "0", 0},
        {"hd64 8k, switched on", 64, 8192, "1", 1},
        {"hd64 512, deterministic (no split kernel)", 64, 512, NULL, 0},
    };
    for (size_t i = 0; i < COUNT_OF(cases); ++i) {
        const shape sh = {cases[i].name, 2, 8, 8, cases[i].seqlen, cases[i].seqlen, 0, 0, 0};
        flashbwd_problem p = planning_problem(90, cases[i].head_dim, &sh);
        p.deterministic = strstr(cases[i].name, "deterministic") != NULL;
        flashbwd_plan *plan = NULL;
        const int32_t st = cases[i].env
                               ? plan_create_with_env("FLASHBWD_SPLIT_DQ_ZERO", cases[i].env, &p,
                                                      &plan)
                               : flashbwd_plan_create(&p, &plan);
        if (st != FLASHBWD_OK) fail_msg("%s: %s", cases[i].name, flashbwd_last_error());
        const flashbwd_plan_info info = info_of(plan);
        const int32_t *g = info.grid[FLASHBWD_LAUNCH_MAIN];
        const int64_t n_blocks = cdiv(sh.seqlen_k, info.block_n);
        const int64_t x = cases[i].heads_x ? sh.heads_q : n_blocks;
        const int64_t y = cases[i].heads_x ? n_blocks : sh.heads_q;
        if (g[0] != x || g[1] != y || g[2] != sh.batch)
            fail_msg("%s: main grid %d x %d x %d; expected %lld x %lld x %lld", cases[i].name,
                     g[0], g[1], g[2], (long long)x, (long long)y, (long long)sh.batch);
        flashbwd_plan_destroy(plan);
    }
    expect_switch_takes_0_or_1("FLASHBWD_SPLIT_DQ_ZERO", 64);
}

/* The split kernel's full-tile instance (FB_SPLIT_FULL rows; kernels/bwd_split.cuh) has
 * one variant of the exponentials, no mask: a plan may take it only where no tile can need
 * one (no causal mask or window, not varlen, whole key blocks), and takes it up to
 * FB_SPLIT_FULL_KEYS keys. FLASHBWD_SPLIT_FULL=0 turns it off, =1 on at any length where
 * it may serve. Execute still takes the plain instance when ALiBi slopes are bound (the
 * GPU suite checks that). */
static void test_full_tile_instance_only_where_no_tile_needs_a_mask(void **state)
{
    (void)state;
    const int64_t longest = FB_SPLIT_FULL_KEYS, past = FB_SPLIT_FULL_KEYS + 1024;
    const struct {
        const char *name;
        int32_t head_dim, causal, window, varlen, deterministic;
        int64_t seqlen_k;
        int32_t may, by_default; /* may serve (=1 takes it); takes it without the switch */
    } cases[] = {
        {"hd64 at FB_SPLIT_FULL_KEYS", 64, 0, 0, 0, 0, longest, 1, 1},
        {"hd64 past FB_SPLIT_FULL_KEYS", 64, 0, 0, 0, 0, past, 1, 0},
        {"hd40 (the 64 kernel) 512 keys", 40, 0, 0, 0, 0, 512, 1, 1},
        {"hd64 128 keys", 64, 0, 0, 0, 0, 128, 1, 1},
        {"hd64 1000 keys (a partial key block)", 64, 0, 0, 0, 0, 1000, 0, 0},
        {"hd64 causal", 64, 1, 0, 0, 0, 1024, 0, 0},
        {"hd64 window", 64, 0, 1, 0, 0, 1024, 0, 0},
        {"hd64 varlen", 64, 0, 0, 1, 0, 1024, 0, 0},
        {"hd64 deterministic (no split kernel)", 64, 0, 0, 0, 1, 1024, 0, 0},
        {"hd128 (no full-tile instance)", 128, 0, 0, 0, 0, 1024, FB_SPLIT_FULL(128),
         FB_SPLIT_FULL(128)},
    };
    const char *const env_value[] = {NULL, "0", "1"};
    for (size_t c = 0; c < COUNT_OF(cases); ++c)
        for (int env = 0; env < 3; ++env) {
            const shape s = {cases[c].name, 2, 4, 4, 700, cases[c].seqlen_k, cases[c].varlen, 0, 0};
            flashbwd_problem p = planning_problem(90, cases[c].head_dim, &s);
            p.causal = cases[c].causal;
            p.deterministic = cases[c].deterministic;
            if (cases[c].window) p.use_window = 1, p.window_left = 100, p.window_right = 100;
            flashbwd_plan *plan = NULL;
            const char *v = env_value[env];
            const int32_t st = v ? plan_create_with_env("FLASHBWD_SPLIT_FULL", v, &p, &plan)
                                 : flashbwd_plan_create(&p, &plan);
            if (st != FLASHBWD_OK) fail_msg("%s: %s", cases[c].name, flashbwd_last_error());
            const fb_launch_table *t = &plan->launches;
            const int want = env == 0 ? cases[c].by_default : env == 1 ? 0 : cases[c].may;
            if (t->split_full != want)
                fail_msg("%s (FLASHBWD_SPLIT_FULL %s): split_full %d, expected %d", cases[c].name,
                         env_value[env] ? env_value[env] : "unset", t->split_full, want);
            if (t->split_full && (!t->split || t->split_grouped))
                fail_msg("%s: the full-tile instance outside a plain split plan", cases[c].name);
            flashbwd_plan_destroy(plan);
        }
    expect_switch_takes_0_or_1("FLASHBWD_SPLIT_FULL", 64);
}

/* FLASHBWD_FORCE_CONFIG_CLASS (the GPU suite uses it to run the sm_86 kernels on an
 * H200): an older class's rows are taken, a newer class changes nothing, anything else is
 * INVALID_VALUE naming the variable. */
static void test_forced_config_class_picks_older_rows_or_is_invalid(void **state)
{
    (void)state;
    const struct {
        int32_t arch;
        const char *force;
        int32_t want_cls; /* 0: INVALID_VALUE */
    } cases[] = {
        {90, "86", 86}, {90, "80", 80}, {90, "90", 90}, {80, "86", 86}, {80, "90", 80},
        {86, "80", 86}, {90, "", 90},   {90, "7", 0},   {90, "860", 0}, {80, "sm_86", 0},
    };
    for (size_t c = 0; c < COUNT_OF(cases); ++c)
        for (size_t k = 0; k < COUNT_OF(kernel_head_dims); ++k) {
            const int32_t khd = kernel_head_dims[k].kernel_head_dim;
            flashbwd_problem p = planning_problem(cases[c].arch, khd, &shapes[0]);
            flashbwd_plan *plan = NULL;
            const int32_t st =
                plan_create_with_env("FLASHBWD_FORCE_CONFIG_CLASS", cases[c].force, &p, &plan);
            if (cases[c].want_cls == 0) {
                expect_env_rejected(st, plan, "FLASHBWD_FORCE_CONFIG_CLASS", cases[c].force);
                continue;
            }
            if (st != FLASHBWD_OK)
                fail_msg("sm_%d, force \"%s\", hd %d: %s (%s)", cases[c].arch, cases[c].force,
                         khd, flashbwd_status_name(st), flashbwd_last_error());
            const trow *want = expected_row(cases[c].want_cls, khd, class_limit(cases[c].want_cls));
            const flashbwd_plan_info info = info_of(plan);
            const int split = want && takes_split(want, shapes[0].seqlen_k,
                                                  class_limit(cases[c].arch));
            if (!want || info.block_m != want->bm || info.block_n != want->bn ||
                info.smem_bytes !=
                    (split ? documented_split_smem(want) : documented_smem(want)))
                fail_msg("sm_%d, force \"%s\", hd %d: %d x %d, %d bytes; expected the sm_%d row",
                         cases[c].arch, cases[c].force, khd, info.block_m, info.block_n,
                         info.smem_bytes, cases[c].want_cls);
            flashbwd_plan_destroy(plan);
        }
}

static void test_plan_sm_count_override_is_what_info_reports(void **state)
{
    (void)state;
    const int32_t counts[] = {1, 7, 132, 100000};
    for (size_t a = 0; a < COUNT_OF(arches); ++a)
        for (size_t i = 0; i < COUNT_OF(counts); ++i) {
            flashbwd_problem p = planning_problem(arches[a].arch, 64, &shapes[0]);
            p.sm_count = counts[i];
            flashbwd_plan *plan = NULL;
            assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
            const flashbwd_plan_info info = info_of(plan);
            if (info.sm_count != counts[i])
                fail_msg("sm_%d: sm_count override %d reported as %d", arches[a].arch,
                         counts[i], info.sm_count);
            flashbwd_plan_destroy(plan);
        }
}

/* Every smem_per_block that matters: each row's exact need and one byte less (of the main
 * kernel, and of the split kernel, which runs only where it fits), for every arch and
 * kernel head dim. The plan takes the row the fallback rule names, or reports
 * NOT_SUPPORTED naming the bytes when nothing fits. */
static void test_plan_smem_override_picks_the_fallback_row_or_is_not_supported(void **state)
{
    (void)state;
    for (size_t a = 0; a < COUNT_OF(arches); ++a)
        for (size_t k = 0; k < COUNT_OF(kernel_head_dims); ++k)
            for (size_t i = 0; i < COUNT_OF(table); ++i)
                for (int need = 0; need < 4; ++need) { /* main, split kernel; exact, less */
                    const int minus = need & 1;
                    if (need >= 2 && table[i].sst == 0) continue;
                    const int32_t khd = kernel_head_dims[k].kernel_head_dim;
                    const int32_t smem = (int32_t)(need < 2 ? documented_smem(&table[i])
                                                            : documented_split_smem(&table[i])) -
                                         minus;
                    flashbwd_problem p = planning_problem(arches[a].arch, khd, &shapes[2]);
                    p.smem_per_block = smem;
                    flashbwd_plan *plan = NULL;
                    const int32_t st = flashbwd_plan_create(&p, &plan);
                    const trow *want = expected_row(arches[a].cls, khd, smem);
                    if (!want) {
                        if (st != FLASHBWD_ERR_NOT_SUPPORTED)
                            fail_msg("sm_%d hd %d smem %d: status %s; expected NOT_SUPPORTED",
                                     arches[a].arch, khd, smem, flashbwd_status_name(st));
                        char bytes[48];
                        snprintf(bytes, sizeof bytes, "%d bytes of shared memory", smem);
                        if (!strstr(flashbwd_last_error(), bytes))
                            fail_msg("message \"%s\" does not name \"%s\"",
                                     flashbwd_last_error(), bytes);
                        continue;
                    }
                    if (st != FLASHBWD_OK)
                        fail_msg("sm_%d hd %d smem %d: %s", arches[a].arch, khd, smem,
                                 flashbwd_last_error());
                    const flashbwd_plan_info info = info_of(plan);
                    const int split = takes_split(want, shapes[2].seqlen_k, smem);
                    if (info.block_m != want->bm || info.block_n != want->bn ||
                        info.stages_q != (split ? want->sst : want->st) ||
                        info.smem_bytes !=
                            (split ? documented_split_smem(want) : documented_smem(want)))
                        fail_msg("sm_%d hd %d smem %d: chose %dx%d/%d stages (%d B); expected "
                                 "the sm_%d row %dx%d/%d", arches[a].arch, khd, smem,
                                 info.block_m, info.block_n, info.stages_q, info.smem_bytes,
                                 want->arch, want->bm, want->bn, want->st);
                    assert_int_equal(info.smem_per_block, smem);
                    flashbwd_plan_destroy(plan);
                }
}

static void test_plan_smem_override_of_48k_is_not_supported(void **state)
{
    (void)state;
    for (size_t a = 0; a < COUNT_OF(arches); ++a) {
        flashbwd_problem p = planning_problem(arches[a].arch, 128, &shapes[0]);
        p.smem_per_block = 48 * 1024;
        flashbwd_plan *plan = (flashbwd_plan *)&p;
        assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_NOT_SUPPORTED);
        assert_null(plan);
        assert_non_null(strstr(flashbwd_last_error(), "49152 bytes of shared memory"));
    }
}

/* CPU plans: one kv-head group (K, V, dK, dV), one query head (Q, dO, dQ) and two score
 * rows of fp32 scratch (src/workspace.c); no tiles, no launches. */
static void test_plan_cpu_workspace_follows_the_documented_formula(void **state)
{
    (void)state;
    for (size_t s = 0; s < COUNT_OF(shapes); ++s)
        for (int32_t head_dim = 8; head_dim <= 256; head_dim += 24) {
            flashbwd_problem p = planning_problem(0, head_dim, &shapes[s]);
            p.backend = FLASHBWD_BACKEND_CPU;
            flashbwd_plan *plan = NULL;
            assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
            const flashbwd_plan_info info = info_of(plan);
            const int64_t sq = shapes[s].seqlen_q, sk = shapes[s].seqlen_k;
            const int64_t floats = (4 * sk + 3 * sq) * head_dim + 2 * sk;
            if ((int64_t)info.workspace_bytes != floats * 4)
                fail_msg("CPU \"%s\" hd %d: workspace %zu; expected %lld", shapes[s].name,
                         head_dim, info.workspace_bytes, (long long)floats * 4);
            assert_int_equal(info.backend, FLASHBWD_BACKEND_CPU);
            assert_int_equal(info.arch, 0);
            assert_int_equal(info.num_launches, 0);
            assert_int_equal(info.block_m, 0);
            flashbwd_plan_destroy(plan);
        }
}

/* A plain create queries the real device. Here (no driver) that must be a clean "no
 * device"; on a machine with a GPU it must plan. Never a crash. */
static void test_plan_create_without_arch_reports_this_machines_device(void **state)
{
    (void)state;
    flashbwd_problem p = planning_problem(0, 64, &shapes[0]);
    flashbwd_plan *plan = (flashbwd_plan *)&p;
    const int32_t st = flashbwd_plan_create(&p, &plan);
#ifdef FB_WITH_CUDA
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        if (st != FLASHBWD_ERR_NO_DEVICE)
            fail_msg("no device (%s): status %s; expected NO_DEVICE: %s", cudaGetErrorName(err),
                     flashbwd_status_name(st), flashbwd_last_error());
        assert_null(plan);
        if (err != cudaSuccess) {
            assert_non_null(strstr(flashbwd_last_error(), "cudaGetDeviceCount"));
            assert_non_null(strstr(flashbwd_last_error(), cudaGetErrorName(err)));
        }
        printf("    no device here: %s\n", flashbwd_last_error());
    } else {
        if (st != FLASHBWD_OK) fail_msg("%d device(s): %s", count, flashbwd_last_error());
        assert_true(info_of(plan).arch >= 80);
        flashbwd_plan_destroy(plan);
    }
#else
    assert_int_equal(st, FLASHBWD_ERR_NOT_SUPPORTED);
    assert_null(plan);
    assert_non_null(strstr(flashbwd_last_error(), "built without CUDA"));
#endif
}

int main(void)
{
    const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_config_table_rows_fit_their_arch_and_give_whole_mma_tiles_per_warp),
        cmocka_unit_test(test_config_table_has_one_row_per_class_and_kernel_head_dim),
        cmocka_unit_test(test_forced_config_class_picks_older_rows_or_is_invalid),
        cmocka_unit_test(test_forced_dq_fold_sets_the_convert_launch_or_is_invalid),
        cmocka_unit_test(test_hd64_folds_dq_only_past_fmin),
        cmocka_unit_test(test_split_kernel_serves_the_plans_it_can_or_is_forced),
        cmocka_unit_test(test_launch_graph_switch_takes_0_or_1),
        cmocka_unit_test(test_split_kernel_leaves_grids_past_2_to_30_ctas_to_the_main_kernel),
        cmocka_unit_test(test_masked_plans_put_heads_on_main_grid_x),
        cmocka_unit_test(test_forced_grid_order_puts_heads_or_key_blocks_on_x_or_is_invalid),
        cmocka_unit_test(test_split_tma_switch_takes_0_or_1),
        cmocka_unit_test(test_full_tile_instance_only_where_no_tile_needs_a_mask),
        cmocka_unit_test(test_masked_plans_group_heads_from_sm_count_and_key_blocks),
        cmocka_unit_test(test_dq_zeroing_in_main_follows_the_head_sums_and_its_switch),
        cmocka_unit_test(test_forced_head_group_is_a_divisor_of_heads_or_invalid),
        cmocka_unit_test(test_split_plans_overlap_the_convert_pass_where_the_row_does),
        cmocka_unit_test(test_plan_sm_count_override_is_what_info_reports),
        cmocka_unit_test(test_plan_smem_override_picks_the_fallback_row_or_is_not_supported),
        cmocka_unit_test(test_plan_smem_override_of_48k_is_not_supported),
        cmocka_unit_test(test_plan_cpu_workspace_follows_the_documented_formula),
        cmocka_unit_test(test_plan_create_without_arch_reports_this_machines_device),
    };
    struct CMUnitTest tests[COUNT_OF(arches) + COUNT_OF(fixed)];
    char names[COUNT_OF(arches)][96];
    size_t k = 0;
    for (size_t a = 0; a < COUNT_OF(arches); ++a, ++k) {
        snprintf(names[a], sizeof names[a],
                 "test_plan_every_head_dim_and_shape_follows_the_table_and_formulas [sm_%d]",
                 arches[a].arch);
        tests[k] = (struct CMUnitTest){names[a],
                                       test_plan_every_head_dim_and_shape_follows_the_table_and_formulas,
                                       NULL, NULL, (void *)&arches[a]};
    }
    for (size_t i = 0; i < COUNT_OF(fixed); ++i) tests[k++] = fixed[i];
    return _cmocka_run_group_tests("test_plan_sizing", tests, k, NULL, NULL);
}
