/* test_overflow.c — sizes whose products overflow are rejected with FLASHBWD_ERR_OVERFLOW
 * (or handled), one test per product: batch·seqlen, batch·seqlen·heads·head_dim bytes,
 * varlen totals, a varlen batch + 1 cu_seqlens entries, the workspace byte count, strides
 * times extents, pointer plus span; and the other side of each limit, sizes past 32-bit
 * offsets that must be accepted and indexed with 64-bit arithmetic (CPU execute through a
 * 4 GiB stride, fresh random inputs, fp64 check).
 *
 * Plans here are CPU plans, or planning-only CUDA plans (problem.arch = 90) where the CUDA
 * workspace layout is the subject: nothing is allocated at plan time, so sizes of 2^62 bytes
 * are safe to plan.
 */
#define _DEFAULT_SOURCE /* MAP_NORESERVE */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "common.h"

#define P62 ((int64_t)1 << 62)

/* A small valid problem; tests overwrite the sizes they are about. */
static flashbwd_problem small_problem(int32_t backend)
{
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = backend;
    p.head_dim = 64;
    p.batch = 2, p.heads_q = 2, p.seqlen_q = 16, p.seqlen_k = 16;
    if (backend == FLASHBWD_BACKEND_CUDA) p.arch = 90; /* planning only: no GPU needed */
    return p;
}

/* plan_create must fail with `status`, leave *out NULL, and say `needle`. */
static void expect_create(const flashbwd_problem *p, int32_t status, const char *needle)
{
    flashbwd_plan *plan = (flashbwd_plan *)p; /* must be overwritten */
    const int32_t st = flashbwd_plan_create(p, &plan);
    if (st != status)
        fail_msg("plan_create gave %s (%s), expected %s", flashbwd_status_name(st),
                 flashbwd_last_error(), flashbwd_status_name(status));
    assert_null(plan);
    if (!strstr(flashbwd_last_error(), needle))
        fail_msg("message \"%s\" does not mention \"%s\"", flashbwd_last_error(), needle);
}

static flashbwd_plan *create_ok(const flashbwd_problem *p)
{
    flashbwd_plan *plan = NULL;
    const int32_t st = flashbwd_plan_create(p, &plan);
    if (st != FLASHBWD_OK) fail_msg("plan_create: %s", flashbwd_last_error());
    return plan;
}

/* --- Problem sizes ----------------------------------------------------------------------- */

static void test_batch_times_seqlen_overflowing_int64_is_overflow(void **state)
{
    (void)state;
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CPU);
    p.batch = (int64_t)1 << 40, p.seqlen_q = (int64_t)1 << 30, p.seqlen_k = 16; /* 2^70 rows */
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "batch * seqlen_q");
    p.seqlen_q = 16, p.seqlen_k = (int64_t)1 << 30;
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "batch * seqlen_k");
}

static void test_seqlen_past_32bit_row_numbers_is_overflow(void **state)
{
    (void)state;
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CPU);
    p.batch = 1, p.seqlen_q = (int64_t)1 << 31; /* row numbers are 32-bit in the kernels */
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "seqlen_q");
    p.seqlen_q = 16, p.seqlen_k = INT64_MAX;
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "seqlen_k");
}

static void test_elements_times_head_dim_bytes_overflowing_is_overflow(void **state)
{
    (void)state;
    /* batch·seqlen fits (2^40), ·heads fits (2^55), ·head_dim = 2^63 elements does not. */
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CPU);
    p.head_dim = 256;
    p.batch = (int64_t)1 << 20, p.seqlen_q = (int64_t)1 << 20, p.seqlen_k = 16;
    p.heads_q = (int64_t)1 << 15;
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "Q has too many elements");
    /* The same through the K side: few query rows, many key rows and kv heads. */
    p.seqlen_q = 16, p.seqlen_k = (int64_t)1 << 20;
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "K has too many elements");
}

static void test_sizes_whose_bytes_fit_are_accepted(void **state)
{
    (void)state;
    /* 2^20 · 2^10 · 2^10 · 256 · 2 bytes = 2^49: large but addressable; a CPU plan
     * allocates nothing, so it must plan. */
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CPU);
    p.head_dim = 256;
    p.batch = (int64_t)1 << 20, p.heads_q = (int64_t)1 << 10;
    p.seqlen_q = p.seqlen_k = (int64_t)1 << 10;
    flashbwd_plan *plan = create_ok(&p);
    size_t ws = 0;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &ws), FLASHBWD_OK);
    /* CPU scratch: (4 sk + 3 sq) d + 2 sk floats (src/workspace.c) */
    assert_int_equal(ws, (size_t)((4 * 1024 + 3 * 1024) * 256 + 2 * 1024) * 4);
    flashbwd_plan_destroy(plan);
}

static void test_varlen_totals_overflowing_are_overflow(void **state)
{
    (void)state;
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CPU);
    p.varlen = 1;
    p.total_q = P62, p.total_k = 64; /* 2^62 rows · 2 heads · 64 dims */
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "Q has too many elements");
    p.total_q = 64, p.total_k = INT64_MAX;
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "K has too many elements");
    /* total 0 means batch · seqlen, which itself overflows */
    p.total_q = p.total_k = 0;
    p.batch = (int64_t)1 << 40, p.seqlen_q = (int64_t)1 << 30;
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "batch * seqlen_q");
}

static void test_varlen_batch_whose_cu_seqlens_overflow_is_overflow(void **state)
{
    (void)state;
    /* Regression (fuzz_tensors, tests/fuzz/regressions/fuzz_tensors/): a varlen CPU plan
     * with batch = INT64_MAX and seqlen 1 was accepted (batch * seqlen fits, the totals are
     * explicit), and binding its cu_seqlens computed batch + 1, a signed overflow. */
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CPU);
    p.varlen = 1, p.seqlen_q = p.seqlen_k = 1, p.total_q = p.total_k = 16;
    p.batch = INT64_MAX;
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "cu_seqlens");
    p.batch = INT64_MAX / 8; /* cu_seqlens would span 2^60 entries: set_tensor's limit */
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "problem.batch");
    p.batch = INT64_MAX / 8 - 1; /* the largest that can be bound */
    flashbwd_plan *plan = create_ok(&p);
    flashbwd_plan_destroy(plan);
}

static void test_cuda_workspace_bytes_overflowing_is_overflow(void **state)
{
    (void)state;
    /* Varlen GQA: K has 2^53 - 1 rows, so K's elements fit (the per-tensor check passes),
     * but the fp32 dK and dV accumulators, padded per sequence to whole key tiles, need
     * 2 · (2^53 + 128) · 128 · 4 > 2^63 bytes. */
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CUDA);
    p.head_dim = 128, p.batch = 1, p.heads_q = 2, p.heads_kv = 1;
    p.seqlen_q = 16, p.seqlen_k = 16, p.varlen = 1, p.total_q = 16;
    p.total_k = ((int64_t)1 << 53) - 1;
    expect_create(&p, FLASHBWD_ERR_OVERFLOW, "workspace size overflows");

    /* Half as many rows fits: the plan reports a workspace of about 2^62 bytes, in size_t. */
    p.total_k = (int64_t)1 << 52;
    flashbwd_plan *plan = create_ok(&p);
    size_t ws = 0;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &ws), FLASHBWD_OK);
    assert_true(ws >= (size_t)2 * ((size_t)1 << 52) * 128 * 4);
    assert_true(ws < (size_t)1 << 63);
    flashbwd_plan_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
    assert_int_equal(flashbwd_plan_get_info(plan, &info), FLASHBWD_OK);
    assert_int_equal(info.workspace_bytes, ws);
    flashbwd_plan_destroy(plan);
}

static void test_cuda_grid_limits_are_not_supported(void **state)
{
    (void)state;
    /* Heads and batch go on grid y and z (at most 65535): handled by a clear refusal. */
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CUDA);
    p.heads_q = 65536;
    expect_create(&p, FLASHBWD_ERR_NOT_SUPPORTED, "heads_q = 65536");
    p.heads_q = 2, p.batch = 65536;
    expect_create(&p, FLASHBWD_ERR_NOT_SUPPORTED, "batch = 65536");
}

static void test_cuda_plan_past_32bit_offsets_is_accepted(void **state)
{
    (void)state;
    /* 64 · 8192 · 32 · 128 = 2^31 elements per tensor: past int32 offsets, which the
     * kernels must handle with 64-bit strides; the plan must accept it and lay out a
     * workspace of more than 4 GiB without truncation. */
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CUDA);
    p.head_dim = 128, p.batch = 64, p.heads_q = 32, p.seqlen_q = p.seqlen_k = 8192;
    flashbwd_plan *plan = create_ok(&p);
    size_t ws = 0;
    flashbwd_plan_workspace_size(plan, &ws);
    /* at least LSE·log2e, D and the fp32 dQ accumulator per query row */
    assert_true(ws >= (size_t)64 * 32 * 8192 * (4 + 4 + 128 * 4));
    flashbwd_plan_destroy(plan);
}

/* --- Strides and pointers ---------------------------------------------------------------- */

static flashbwd_plan *cpu_plan(void)
{
    flashbwd_problem p = small_problem(FLASHBWD_BACKEND_CPU);
    p.batch = 4, p.seqlen_q = p.seqlen_k = 4, p.heads_q = 1, p.head_dim = 8;
    return create_ok(&p);
}

/* set_tensor(Q) with these strides must give `status`, saying `needle`. */
static void expect_strides(flashbwd_plan *plan, void *ptr, const int64_t s[4], int32_t status,
                           const char *needle)
{
    const int32_t st = flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, ptr, s, 4);
    if (st != status)
        fail_msg("strides {%lld, %lld, %lld, %lld} gave %s (%s)", (long long)s[0],
                 (long long)s[1], (long long)s[2], (long long)s[3], flashbwd_status_name(st),
                 flashbwd_last_error());
    if (needle && !strstr(flashbwd_plan_last_error(plan), needle))
        fail_msg("message \"%s\" does not mention \"%s\"", flashbwd_plan_last_error(plan), needle);
}

static void test_stride_times_extent_overflowing_is_overflow(void **state)
{
    (void)state;
    flashbwd_plan *plan = cpu_plan();
    uint16_t q[64];
    const int64_t big[4] = {P62, 8, 8, 1}; /* (batch 4 - 1) · 2^62 */
    expect_strides(plan, q, big, FLASHBWD_ERR_OVERFLOW, "strides[0]");
    const int64_t huge[4] = {8, INT64_MAX, 8, 1};
    expect_strides(plan, q, huge, FLASHBWD_ERR_OVERFLOW, "strides[1]");
    flashbwd_plan_destroy(plan);
}

static void test_sum_of_stride_terms_overflowing_is_overflow(void **state)
{
    (void)state;
    flashbwd_plan *plan = cpu_plan();
    uint16_t q[64];
    /* each term 3 · 2^61 fits; their sum 3 · 2^62 does not */
    const int64_t s[4] = {(int64_t)1 << 61, (int64_t)1 << 61, 8, 1};
    expect_strides(plan, q, s, FLASHBWD_ERR_OVERFLOW, "overflow");
    flashbwd_plan_destroy(plan);
}

static void test_span_past_addressable_bytes_is_overflow(void **state)
{
    (void)state;
    flashbwd_plan *plan = cpu_plan();
    uint16_t q[64];
    /* 3 · 2^60 elements fit int64, but not as bytes of any address space */
    const int64_t s[4] = {(int64_t)1 << 60, 8, 8, 1};
    expect_strides(plan, q, s, FLASHBWD_ERR_OVERFLOW, "too many to address");
    flashbwd_plan_destroy(plan);
}

static void test_span_wrapping_the_address_space_is_overflow(void **state)
{
    (void)state;
    /* Regression (fuzz_tensors, tests/fuzz/regressions/fuzz_tensors/): LSE and dK bound at
     * the same address 4 KiB below 2^64 were both accepted, because their spans wrapped past
     * 2^64 and the overlap check compared wrapped end addresses. A span that does not fit
     * the address space is now refused. Here 32 bytes below the top: LSE is 64 bytes, dK 256. */
    flashbwd_plan *plan = cpu_plan();
    void *top = (void *)((uintptr_t)0 - 32);
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_LSE, top, NULL, 0),
                     FLASHBWD_ERR_OVERFLOW);
    assert_non_null(strstr(flashbwd_plan_last_error(plan), "address space"));
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_DK, top, NULL, 0),
                     FLASHBWD_ERR_OVERFLOW);
    /* Q is 4·4·1·8 = 128 elements, 256 bytes: at 2^64 - 258 it ends 2 bytes below the top
     * and fits (set_tensor does not dereference); 4 bytes higher it would wrap. */
    void *fits = (void *)((uintptr_t)0 - 258);
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, fits, NULL, 0),
                     FLASHBWD_OK);
    void *wraps = (void *)((uintptr_t)0 - 254);
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, wraps, NULL, 0),
                     FLASHBWD_ERR_OVERFLOW);
    flashbwd_plan_destroy(plan);
}

/* --- 64-bit offsets on the CPU backend ---------------------------------------------------- */

/* Q and dQ with a batch stride of 2^31 + 64 elements: batch 1 sits 4 GiB + 128 bytes past
 * batch 0, so any 32-bit offset arithmetic reads or writes the wrong place. The memory is
 * one sparse mapping (MAP_NORESERVE): only the pages touched are ever backed. */
static void test_cpu_execute_through_strides_past_32bit_offsets(void **state)
{
    (void)state;
    const tcase tc = {.name = "4 GiB strides", .dtype = FLASHBWD_DTYPE_FP16, .head_dim = 16,
                      .batch = 2, .heads_q = 2, .heads_kv = 1, .seqlen_q = 5, .seqlen_k = 7,
                      .causal = 1};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed() ^ 0x0f10), 0);
    const int64_t far = ((int64_t)1 << 31) + 64;
    const int64_t rows = tc.seqlen_q * tc.heads_q * tc.head_dim; /* per batch, packed */
    const size_t bytes = (size_t)(far + rows) * 2;
    void *map_q = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *map_dq = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map_q == MAP_FAILED || map_dq == MAP_FAILED)
        fail_msg("a sparse %zu-byte mapping failed: this test needs 64-bit address space", bytes);
    const int64_t s[4] = {far, tc.heads_q * tc.head_dim, tc.head_dim, 1};
    /* Copy Q into the far layout; the packed tdata layout has batch stride `rows`. */
    const ttensor *q = &td.t[FLASHBWD_TENSOR_Q];
    assert_int_equal(q->stride[0], rows);
    for (int64_t b = 0; b < tc.batch; ++b)
        memcpy((uint16_t *)map_q + b * far, (uint16_t *)q->data + b * rows, (size_t)rows * 2);
    memset(map_dq, 0xff, (size_t)rows * 2); /* poison both batches' dQ */
    memset((uint16_t *)map_dq + far, 0xff, (size_t)rows * 2);

    flashbwd_problem p = tcase_problem(&tc, FLASHBWD_BACKEND_CPU);
    flashbwd_plan *plan = create_ok(&p);
    assert_int_equal(tdata_bind(&tc, &td, plan, NULL), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, map_q, s, 4), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_DQ, map_dq, s, 4), FLASHBWD_OK);
    size_t ws_bytes = 0;
    flashbwd_plan_workspace_size(plan, &ws_bytes);
    void *ws = malloc(ws_bytes);
    assert_int_equal(flashbwd_plan_set_workspace(plan, ws, ws_bytes), FLASHBWD_OK);
    if (flashbwd_execute(plan, NULL) != FLASHBWD_OK) fail_msg("execute: %s", flashbwd_last_error());

    /* Gather dQ back into td's packed buffer and compare all three with fp64. */
    ttensor *dq = &td.t[FLASHBWD_TENSOR_DQ];
    for (int64_t b = 0; b < tc.batch; ++b)
        memcpy((uint16_t *)dq->data + b * rows, (uint16_t *)map_dq + b * far, (size_t)rows * 2);
    const int32_t ids[3] = {FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};
    for (int i = 0; i < 3; ++i) {
        int64_t bad = 0;
        const double err = tdata_error(&tc, &td, ids[i], &bad);
        if (bad || !(err <= 3e-3))
            fail_msg("tensor %d: rel err %.3e, %lld NaN/Inf (bound 3e-3)", ids[i], err,
                     (long long)bad);
    }
    free(ws);
    flashbwd_plan_destroy(plan);
    munmap(map_q, bytes);
    munmap(map_dq, bytes);
    tdata_free(&td);
}

int main(void)
{
    test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_times_seqlen_overflowing_int64_is_overflow),
        cmocka_unit_test(test_seqlen_past_32bit_row_numbers_is_overflow),
        cmocka_unit_test(test_elements_times_head_dim_bytes_overflowing_is_overflow),
        cmocka_unit_test(test_sizes_whose_bytes_fit_are_accepted),
        cmocka_unit_test(test_varlen_totals_overflowing_are_overflow),
        cmocka_unit_test(test_varlen_batch_whose_cu_seqlens_overflow_is_overflow),
        cmocka_unit_test(test_cuda_workspace_bytes_overflowing_is_overflow),
        cmocka_unit_test(test_cuda_grid_limits_are_not_supported),
        cmocka_unit_test(test_cuda_plan_past_32bit_offsets_is_accepted),
        cmocka_unit_test(test_stride_times_extent_overflowing_is_overflow),
        cmocka_unit_test(test_sum_of_stride_terms_overflowing_is_overflow),
        cmocka_unit_test(test_span_past_addressable_bytes_is_overflow),
        cmocka_unit_test(test_span_wrapping_the_address_space_is_overflow),
        cmocka_unit_test(test_cpu_execute_through_strides_past_32bit_offsets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
