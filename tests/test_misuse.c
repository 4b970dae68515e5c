/* test_misuse.c — what a careless caller gets: execute before tensors or workspace are set,
 * misaligned pointers and strides, NULLs, outputs that overlap inputs or each other (and the
 * legal look-alikes that must be accepted: dQ/dK/dV interleaved in one dqkv buffer, inputs
 * in an output's padding), broken varlen lengths, one plan used from two threads at once,
 * and the wrong current CUDA device. Each misuse must give its documented status and a
 * message naming the culprit, change nothing, and leave the plan usable.
 *
 *   test_misuse          the CPU group: everything a GPU-less machine can check
 *   test_misuse --gpu    the GPU group (wrong current device); SKIPPED without two GPUs
 * The groups are separate CTest entries, so a skipped GPU test never hides a CPU failure.
 *
 * CUDA alignment rules are checked on planning-only plans (problem.arch = 90): set_tensor
 * applies them without a GPU and never dereferences the pointers.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "common.h"

#ifdef FB_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))
#define BF FLASHBWD_DTYPE_BF16
#define FP FLASHBWD_DTYPE_FP16

/* The message of the last failure (thread and, for a plan, per-plan) must mention needle. */
static void expect_message(const flashbwd_plan *plan, const char *needle)
{
    const char *m = plan ? flashbwd_plan_last_error(plan) : flashbwd_last_error();
    if (!strstr(m, needle)) fail_msg("message \"%s\" does not mention \"%s\"", m, needle);
}

#define EXPECT_STATUS(call, status)                                                      \
    do {                                                                                 \
        const int32_t st_ = (call);                                                      \
        if (st_ != (status))                                                             \
            fail_msg("%s gave %s (%s), expected %s", #call, flashbwd_status_name(st_),   \
                     flashbwd_last_error(), flashbwd_status_name(status));               \
    } while (0)

/* A CPU plan for tc with td's tensors bound (unless bind is 0) and a workspace. */
typedef struct ready {
    tcase tc;
    tdata td;
    flashbwd_plan *plan;
    void *ws;
    size_t ws_bytes;
} ready;

static void ready_make(ready *r, const tcase *tc, int bind)
{
    memset(r, 0, sizeof *r);
    r->tc = *tc;
    assert_int_equal(tdata_make(tc, &r->td, test_seed() ^ (uint64_t)tc->seqlen_q * 7919), 0);
    flashbwd_problem p = tcase_problem(tc, FLASHBWD_BACKEND_CPU);
    if (flashbwd_plan_create(&p, &r->plan) != FLASHBWD_OK)
        fail_msg("%s: plan_create: %s", tc->name, flashbwd_last_error());
    assert_int_equal(flashbwd_plan_workspace_size(r->plan, &r->ws_bytes), FLASHBWD_OK);
    r->ws = malloc(r->ws_bytes);
    if (bind) {
        assert_int_equal(tdata_bind(tc, &r->td, r->plan, NULL), FLASHBWD_OK);
        assert_int_equal(flashbwd_plan_set_workspace(r->plan, r->ws, r->ws_bytes), FLASHBWD_OK);
    }
}

static void ready_free(ready *r)
{
    flashbwd_plan_destroy(r->plan);
    free(r->ws);
    tdata_free(&r->td);
}

/* dQ, dK, dV in td's buffers against fp64 (bf16 1e-2, fp16 3e-3). */
static void expect_correct(const tcase *tc, const tdata *td)
{
    const int32_t ids[3] = {FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};
    const double bound = tc->dtype == BF ? 1e-2 : 3e-3;
    for (int i = 0; i < 3; ++i) {
        int64_t bad = 0;
        const double err = tdata_error(tc, td, ids[i], &bad);
        if (bad || !(err <= bound))
            fail_msg("%s: tensor %d rel err %.3e with %lld NaN/Inf (bound %.0e)", tc->name,
                     ids[i], err, (long long)bad, bound);
    }
}

static void poison_outputs(tdata *td)
{
    for (int32_t id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
        memset(td->t[id].data, 0xff, td->t[id].elems * 2);
}

static const tcase small = {.name = "small", .dtype = BF, .head_dim = 16, .batch = 2,
                            .heads_q = 2, .heads_kv = 1, .seqlen_q = 7, .seqlen_k = 9,
                            .causal = 1};

/* ======================================================================================
 * Execute before the plan is ready
 * ====================================================================================== */

static void test_execute_before_any_tensor_is_tensor_not_set(void **state)
{
    (void)state;
    ready r;
    ready_make(&r, &small, 0);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_ERR_TENSOR_NOT_SET);
    expect_message(r.plan, "tensor Q ");
    expect_message(NULL, "tensor Q ");
    ready_free(&r);
}

static void test_execute_names_each_missing_required_tensor(void **state)
{
    (void)state;
    static const int32_t lq[] = {5, 7}, lk[] = {9, 3};
    tcase varlen = small;
    varlen.name = "varlen", varlen.varlen = 1, varlen.lens_q = lq, varlen.lens_k = lk;
    static const struct {
        int32_t id;
        const char *name;
    } rows[] = {
        {FLASHBWD_TENSOR_Q, "tensor Q "},     {FLASHBWD_TENSOR_K, "tensor K "},
        {FLASHBWD_TENSOR_V, "tensor V "},     {FLASHBWD_TENSOR_O, "tensor O "},
        {FLASHBWD_TENSOR_DO, "tensor dO "},   {FLASHBWD_TENSOR_LSE, "tensor LSE "},
        {FLASHBWD_TENSOR_DQ, "tensor dQ "},   {FLASHBWD_TENSOR_DK, "tensor dK "},
        {FLASHBWD_TENSOR_DV, "tensor dV "},   {FLASHBWD_TENSOR_CU_SEQLENS_Q, "cu_seqlens_q"},
        {FLASHBWD_TENSOR_CU_SEQLENS_K, "cu_seqlens_k"},
    };
    ready r;
    ready_make(&r, &varlen, 1);
    for (size_t i = 0; i < COUNT_OF(rows); ++i) {
        const ttensor *t = &r.td.t[rows[i].id];
        EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, rows[i].id, NULL, NULL, 0), FLASHBWD_OK);
        EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_ERR_TENSOR_NOT_SET);
        expect_message(r.plan, rows[i].name);
        EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, rows[i].id, t->data, t->stride, t->rank),
                      FLASHBWD_OK);
    }
    /* Optional inputs may stay unbound: the plan is whole again and computes correctly. */
    poison_outputs(&r.td);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    expect_correct(&r.tc, &r.td);
    ready_free(&r);
}

static void test_workspace_missing_or_too_small_is_workspace_too_small(void **state)
{
    (void)state;
    ready r;
    ready_make(&r, &small, 0);
    assert_int_equal(tdata_bind(&r.tc, &r.td, r.plan, NULL), FLASHBWD_OK);
    assert_true(r.ws_bytes > 0);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_ERR_WORKSPACE_TOO_SMALL);
    expect_message(r.plan, "no workspace");

    EXPECT_STATUS(flashbwd_plan_set_workspace(r.plan, r.ws, r.ws_bytes - 4),
                  FLASHBWD_ERR_WORKSPACE_TOO_SMALL);
    expect_message(r.plan, "smaller than");
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_ERR_WORKSPACE_TOO_SMALL);

    /* A refused workspace leaves the earlier one bound. */
    EXPECT_STATUS(flashbwd_plan_set_workspace(r.plan, r.ws, r.ws_bytes), FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_workspace(r.plan, r.ws, 1), FLASHBWD_ERR_WORKSPACE_TOO_SMALL);
    poison_outputs(&r.td);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    expect_correct(&r.tc, &r.td);

    /* NULL unbinds it again. */
    EXPECT_STATUS(flashbwd_plan_set_workspace(r.plan, NULL, 0), FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_ERR_WORKSPACE_TOO_SMALL);
    ready_free(&r);
}

/* ======================================================================================
 * Alignment
 * ====================================================================================== */

static void test_cpu_misaligned_pointers_are_misaligned(void **state)
{
    (void)state;
    ready r;
    ready_make(&r, &small, 1);
    static const int32_t ids[] = {FLASHBWD_TENSOR_Q, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_LSE};
    static const size_t shift[] = {1, 1, 2}; /* element size 2, 2, 4 */
    for (size_t i = 0; i < COUNT_OF(ids); ++i) {
        const ttensor *t = &r.td.t[ids[i]];
        EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, ids[i], (char *)t->data + shift[i],
                                               t->stride, t->rank),
                      FLASHBWD_ERR_MISALIGNED);
        expect_message(r.plan, "aligned");
    }
    EXPECT_STATUS(flashbwd_plan_set_workspace(r.plan, (char *)r.ws + 2, r.ws_bytes - 4),
                  FLASHBWD_ERR_MISALIGNED);
    /* Nothing changed: the plan still computes the right answer. */
    poison_outputs(&r.td);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    expect_correct(&r.tc, &r.td);
    ready_free(&r);
}

static void test_cuda_alignment_rules_apply_on_a_planning_only_plan(void **state)
{
    (void)state;
    flashbwd_problem p = tcase_problem(&small, FLASHBWD_BACKEND_CUDA);
    p.arch = 90;
    p.head_dim = 64;
    flashbwd_plan *plan = NULL;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK)
        fail_msg("planning-only plan: %s", flashbwd_last_error());
    /* Fake device addresses: set_tensor never dereferences them. */
    const uintptr_t base = (uintptr_t)1 << 40;
    const int64_t packed_q[4] = {7 * 2 * 64, 2 * 64, 64, 1};
    EXPECT_STATUS(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, (void *)(base + 8), NULL, 0),
                  FLASHBWD_ERR_MISALIGNED);
    expect_message(plan, "16-byte aligned");
    EXPECT_STATUS(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, (void *)base, packed_q, 4),
                  FLASHBWD_OK);
    const int64_t odd_row[4] = {8 * 260, 260, 64, 1}; /* rows of 260 elements: 260 % 8 = 4 */
    EXPECT_STATUS(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_O, (void *)(base + 65536),
                                           odd_row, 4),
                  FLASHBWD_ERR_MISALIGNED);
    expect_message(plan, "strides[1]");
    /* fp32 LSE needs only 4-byte alignment. */
    EXPECT_STATUS(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_LSE, (void *)(base + (1 << 20) + 4),
                                           NULL, 0),
                  FLASHBWD_OK);
    size_t ws = 0;
    flashbwd_plan_workspace_size(plan, &ws);
    EXPECT_STATUS(flashbwd_plan_set_workspace(plan, (void *)(base + (2 << 20) + 128), ws),
                  FLASHBWD_ERR_MISALIGNED);
    expect_message(plan, "256-byte aligned");
    EXPECT_STATUS(flashbwd_plan_set_workspace(plan, (void *)(base + (2 << 20)), ws), FLASHBWD_OK);
    /* With everything bound, a planning-only plan still refuses to execute. */
    static const int32_t rest[] = {FLASHBWD_TENSOR_K, FLASHBWD_TENSOR_V, FLASHBWD_TENSOR_O,
                                   FLASHBWD_TENSOR_DO, FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK,
                                   FLASHBWD_TENSOR_DV};
    for (size_t i = 0; i < COUNT_OF(rest); ++i)
        EXPECT_STATUS(flashbwd_plan_set_tensor(plan, rest[i],
                                               (void *)(base + ((uintptr_t)(i + 4) << 20)), NULL, 0),
                      FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_execute(plan, NULL), FLASHBWD_ERR_NOT_SUPPORTED);
#ifdef FB_WITH_CUDA
    expect_message(plan, "problem.arch");
#else
    expect_message(plan, "without CUDA");
#endif
    flashbwd_plan_destroy(plan);
}

/* ======================================================================================
 * NULLs
 * ====================================================================================== */

static void test_null_arguments_are_null_argument(void **state)
{
    (void)state;
    ready r;
    ready_make(&r, &small, 0);
    flashbwd_problem p = tcase_problem(&small, FLASHBWD_BACKEND_CPU);
    flashbwd_plan *plan = (flashbwd_plan *)&p;
    EXPECT_STATUS(flashbwd_plan_create(NULL, &plan), FLASHBWD_ERR_NULL_ARGUMENT);
    assert_null(plan);
    expect_message(NULL, "problem is NULL");
    EXPECT_STATUS(flashbwd_plan_create(&p, NULL), FLASHBWD_ERR_NULL_ARGUMENT);
    expect_message(NULL, "out");
    EXPECT_STATUS(flashbwd_plan_set_tensor(NULL, FLASHBWD_TENSOR_Q, r.ws, NULL, 0),
                  FLASHBWD_ERR_NULL_ARGUMENT);
    expect_message(NULL, "plan is NULL");
    EXPECT_STATUS(flashbwd_plan_set_workspace(NULL, r.ws, r.ws_bytes), FLASHBWD_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(flashbwd_execute(NULL, NULL), FLASHBWD_ERR_NULL_ARGUMENT);
    size_t bytes = 0;
    EXPECT_STATUS(flashbwd_plan_workspace_size(NULL, &bytes), FLASHBWD_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(flashbwd_plan_workspace_size(r.plan, NULL), FLASHBWD_ERR_NULL_ARGUMENT);
    expect_message(NULL, "bytes is NULL");
    flashbwd_plan_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
    EXPECT_STATUS(flashbwd_plan_get_info(NULL, &info), FLASHBWD_ERR_NULL_ARGUMENT);
    EXPECT_STATUS(flashbwd_plan_get_info(r.plan, NULL), FLASHBWD_ERR_NULL_ARGUMENT);
    expect_message(NULL, "info is NULL");
    assert_string_equal(flashbwd_plan_last_error(NULL), "");
    flashbwd_plan_destroy(NULL); /* a harmless no-op */
    /* Strides NULL is not misuse: it means packed; the plan is fine after all of the above. */
    assert_int_equal(tdata_bind(&r.tc, &r.td, r.plan, NULL), FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_workspace(r.plan, r.ws, r.ws_bytes), FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    expect_correct(&r.tc, &r.td);
    ready_free(&r);
}

/* flashbwd_workspace_alloc: NULL arguments and a planning-only plan are refused by name,
 * with the outputs cleared; on a CPU plan it gives 256-byte aligned host memory that runs
 * the backward (garbage in it first); free refuses a pointer twice, and a foreign one. */
static void test_workspace_alloc_misuse_and_the_cpu_backend(void **state)
{
    (void)state;
    ready r;
    ready_make(&r, &small, 1);
    void *ws = &r;
    size_t bytes = 7;
    int32_t compressed = 5;
    EXPECT_STATUS(flashbwd_workspace_alloc(NULL, &ws, &bytes, &compressed),
                  FLASHBWD_ERR_NULL_ARGUMENT);
    expect_message(NULL, "plan is NULL");
    assert_null(ws);
    assert_int_equal(bytes, 0);
    assert_int_equal(compressed, 0);
    EXPECT_STATUS(flashbwd_workspace_alloc(r.plan, NULL, &bytes, NULL), FLASHBWD_ERR_NULL_ARGUMENT);
    expect_message(r.plan, "ptr is NULL");
    EXPECT_STATUS(flashbwd_workspace_alloc(r.plan, &ws, NULL, NULL), FLASHBWD_ERR_NULL_ARGUMENT);
    expect_message(r.plan, "bytes is NULL");

    flashbwd_problem p = tcase_problem(&small, FLASHBWD_BACKEND_CUDA);
    p.arch = 90;
    p.head_dim = 64;
    flashbwd_plan *planning = NULL;
    if (flashbwd_plan_create(&p, &planning) != FLASHBWD_OK)
        fail_msg("planning-only plan: %s", flashbwd_last_error());
    ws = &r;
    EXPECT_STATUS(flashbwd_workspace_alloc(planning, &ws, &bytes, &compressed),
                  FLASHBWD_ERR_NOT_SUPPORTED);
    expect_message(planning, "planning-only");
    assert_null(ws);
    flashbwd_plan_destroy(planning);

    for (int round = 0; round < 2; ++round) { /* the second finds the first's leftovers */
        EXPECT_STATUS(flashbwd_workspace_alloc(r.plan, &ws, &bytes, &compressed), FLASHBWD_OK);
        assert_string_equal(flashbwd_plan_last_error(r.plan), "");
        if (!ws || (uintptr_t)ws % 256 || bytes < r.ws_bytes || compressed != 0)
            fail_msg("CPU workspace %p of %zu bytes (need %zu), compressed %d", ws, bytes,
                     r.ws_bytes, (int)compressed);
        memset(ws, 0x7f, bytes);
        EXPECT_STATUS(flashbwd_plan_set_workspace(r.plan, ws, bytes), FLASHBWD_OK);
        poison_outputs(&r.td);
        EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
        expect_correct(&r.tc, &r.td);
        EXPECT_STATUS(flashbwd_plan_set_workspace(r.plan, r.ws, r.ws_bytes), FLASHBWD_OK);
        EXPECT_STATUS(flashbwd_workspace_free(ws), FLASHBWD_OK);
    }
    char hex[32];
    snprintf(hex, sizeof hex, "%p", ws);
    EXPECT_STATUS(flashbwd_workspace_free(ws), FLASHBWD_ERR_INVALID_VALUE); /* twice */
    expect_message(NULL, hex);
    EXPECT_STATUS(flashbwd_workspace_free(r.ws), FLASHBWD_ERR_INVALID_VALUE); /* malloc's */
    expect_message(NULL, "did not come from flashbwd_workspace_alloc");
    EXPECT_STATUS(flashbwd_workspace_free(NULL), FLASHBWD_OK);
    ready_free(&r);
}

/* ======================================================================================
 * Overlapping tensors
 * ====================================================================================== */

static void test_outputs_overlapping_inputs_or_each_other_are_overlap(void **state)
{
    (void)state;
    ready r;
    ready_make(&r, &small, 1);
    tdata *td = &r.td;
    const ttensor *dq = &td->t[FLASHBWD_TENSOR_DQ];
    const ttensor *dk = &td->t[FLASHBWD_TENSOR_DK], *dv = &td->t[FLASHBWD_TENSOR_DV];
    static const struct {
        const char *name;
        int32_t id;       /* the tensor rebound */
        int32_t where;    /* onto this tensor's buffer */
        int64_t shift;    /* 16-bit elements past the target's start */
        const char *other;
    } rows[] = {
        {"dQ onto Q", FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_Q, 0, "tensor Q"},
        {"Q onto dQ (input bound after the output)", FLASHBWD_TENSOR_Q, FLASHBWD_TENSOR_DQ, 0,
         "tensor dQ"},
        {"dK onto dO shifted", FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DO, 3, "tensor dO"},
        {"LSE (fp32) inside dQ", FLASHBWD_TENSOR_LSE, FLASHBWD_TENSOR_DQ, 8, "tensor dQ"},
    };
    for (size_t i = 0; i < COUNT_OF(rows); ++i) {
        const ttensor *t = &td->t[rows[i].id], *w = &td->t[rows[i].where];
        char *ptr = (char *)w->data + rows[i].shift * 2; /* inside the 16-bit target */
        const int32_t st = flashbwd_plan_set_tensor(r.plan, rows[i].id, ptr, t->stride, t->rank);
        if (st != FLASHBWD_ERR_OVERLAP)
            fail_msg("%s: gave %s (%s)", rows[i].name, flashbwd_status_name(st),
                     flashbwd_last_error());
        expect_message(r.plan, rows[i].other);
    }
    /* dV starting on dK's last element, both in one scratch buffer. */
    const size_t scratch_n = dk->elems + dv->elems;
    uint16_t *scratch = malloc(scratch_n * 2);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DK, scratch, dk->stride, dk->rank),
                  FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DV, scratch + dk->elems - 1,
                                           dv->stride, dv->rank),
                  FLASHBWD_ERR_OVERLAP);
    expect_message(r.plan, "tensor dV overlaps tensor dK");
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DV, scratch + dk->elems,
                                           dv->stride, dv->rank),
                  FLASHBWD_OK); /* one element further: adjacent, not overlapping */
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DK, dk->data, dk->stride, dk->rank),
                  FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DV, dv->data, dv->stride, dv->rank),
                  FLASHBWD_OK);
    free(scratch);
    /* An output whose outer stride is 0 writes many elements to one place. */
    const int64_t zero[4] = {0, dq->stride[1], dq->stride[2], 1};
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DQ, dq->data, zero, 4),
                  FLASHBWD_ERR_OVERLAP);
    expect_message(r.plan, "strides[0] = 0");
    /* Every refusal kept the earlier bindings: the plan computes the right answer. */
    poison_outputs(td);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    expect_correct(&r.tc, td);
    ready_free(&r);
}

/* Regression (fuzz_tensors, tests/fuzz/regressions/fuzz_tensors/dq-inside-longer-dv):
 * tensors with the same strides but different extents, dQ (1 query row) and dV (30 key
 * rows). The exact overlap search used the extents of the tensor being bound for both, so
 * dQ bound onto row 12 of dV was accepted; bound the other way round it was refused. */
static void test_outputs_of_different_extents_overlap_in_either_order(void **state)
{
    (void)state;
    const tcase tc = {.name = "1 query, 30 keys", .dtype = BF, .head_dim = 8, .batch = 2,
                      .heads_q = 1, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 30};
    ready r;
    ready_make(&r, &tc, 1);
    const ttensor *dv = &r.td.t[FLASHBWD_TENSOR_DV], *dq = &r.td.t[FLASHBWD_TENSOR_DQ];
    const int64_t st[4] = {30 * 8, 8, 8, 1}; /* dV packed; dQ (one row per batch) alike */
    uint16_t *buf = malloc(dv->elems * 2);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DV, buf, st, 4), FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DQ, buf + 12 * 8, st, 4),
                  FLASHBWD_ERR_OVERLAP);
    expect_message(r.plan, "tensor dQ overlaps tensor dV");
    /* The other order: dQ first, then dV over it. */
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DV, dv->data, dv->stride, 4),
                  FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DQ, buf + 12 * 8, st, 4),
                  FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DV, buf, st, 4),
                  FLASHBWD_ERR_OVERLAP);
    expect_message(r.plan, "tensor dV overlaps tensor dQ");
    /* Apart again: dQ in its own buffer, dV in buf; the plan computes correctly. */
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DQ, dq->data, dq->stride, 4),
                  FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DV, buf, st, 4), FLASHBWD_OK);
    poison_outputs(&r.td);
    memset(buf, 0xff, dv->elems * 2);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    memcpy(dv->data, buf, dv->elems * 2); /* dV was computed into buf, same layout */
    expect_correct(&tc, &r.td);
    free(buf);
    ready_free(&r);
}

static void test_inputs_may_alias_inputs_and_fill_output_padding(void **state)
{
    (void)state;
    /* dQ at x and O at x + head_dim in one buffer whose head stride is 2 * head_dim: O
     * fills the gaps of dQ's layout and shares no element with it, so both are accepted.
     * K and V may also be one buffer: inputs may alias inputs. */
    tcase tc = small;
    tc.name = "interleaved", tc.layout = 1, tc.heads_kv = 2;
    ready r;
    ready_make(&r, &tc, 1);
    tdata *td = &r.td;
    const ttensor *o = &td->t[FLASHBWD_TENSOR_O];
    const int64_t d = tc.head_dim, H = tc.heads_q, S = tc.seqlen_q, B = tc.batch;
    const int64_t st[4] = {S * H * 2 * d, H * 2 * d, 2 * d, 1};
    const size_t n = (size_t)(B * S * H * 2 * d);
    uint16_t *both = malloc(n * 2);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
            for (int64_t h = 0; h < H; ++h) {
                const uint16_t *src = (uint16_t *)o->data + b * o->stride[0] + s * o->stride[1] +
                                      h * o->stride[2];
                memcpy(both + b * st[0] + s * st[1] + h * st[2] + d, src, (size_t)d * 2);
                memset(both + b * st[0] + s * st[1] + h * st[2], 0xff, (size_t)d * 2);
            }
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DQ, both, st, 4), FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_O, both + d, st, 4), FLASHBWD_OK);
    /* K and V in one buffer: inputs may alias inputs (V's values are now K's). */
    const ttensor *k = &td->t[FLASHBWD_TENSOR_K];
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_V, k->data, k->stride, k->rank),
                  FLASHBWD_OK);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    /* O is untouched and every dQ element was written (no 0xffff left). */
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
            for (int64_t h = 0; h < H; ++h) {
                const uint16_t *src = (uint16_t *)o->data + b * o->stride[0] + s * o->stride[1] +
                                      h * o->stride[2];
                const uint16_t *row = both + b * st[0] + s * st[1] + h * st[2];
                assert_memory_equal(row + d, src, (size_t)d * 2);
                for (int64_t c = 0; c < d; ++c) assert_int_not_equal(row[c], 0xffff);
            }
    free(both);
    ready_free(&r);
}

/* dQ, dK, dV interleaved in one (batch, seq, 3, heads, dim) buffer, and Q, K, V likewise:
 * disjoint elements under identical strides, the layout of a fused QKV projection. */
static void test_packed_dqkv_buffer_is_accepted_and_correct(void **state)
{
    (void)state;
    const tcase tc = {.name = "dqkv", .dtype = FP, .head_dim = 16, .batch = 2, .heads_q = 3,
                      .heads_kv = 3, .seqlen_q = 9, .seqlen_k = 9, .causal = 1};
    ready r;
    ready_make(&r, &tc, 1);
    tdata *td = &r.td;
    const int64_t B = tc.batch, S = tc.seqlen_q, H = tc.heads_q, d = tc.head_dim;
    const int64_t st[4] = {S * 3 * H * d, 3 * H * d, d, 1};
    const size_t n = (size_t)(B * S * 3 * H * d);
    uint16_t *qkv = malloc(n * 2), *dqkv = malloc(n * 2);
    memset(dqkv, 0xff, n * 2); /* poison */
    const int32_t in[3] = {FLASHBWD_TENSOR_Q, FLASHBWD_TENSOR_K, FLASHBWD_TENSOR_V};
    const int32_t out[3] = {FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};
    for (int k = 0; k < 3; ++k) { /* td's packed (b, s, h, d) inputs into slot k */
        const uint16_t *src = td->t[in[k]].data;
        for (int64_t row = 0; row < B * S; ++row)
            memcpy(qkv + row * st[1] + k * H * d, src + row * H * d, (size_t)(H * d) * 2);
    }
    for (int k = 0; k < 3; ++k) {
        EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, in[k], qkv + k * H * d, st, 4), FLASHBWD_OK);
        EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, out[k], dqkv + k * H * d, st, 4), FLASHBWD_OK);
    }
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    for (int k = 0; k < 3; ++k) { /* back into td's packed outputs for the fp64 check */
        uint16_t *dst = td->t[out[k]].data;
        for (int64_t row = 0; row < B * S; ++row)
            memcpy(dst + row * H * d, dqkv + row * st[1] + k * H * d, (size_t)(H * d) * 2);
    }
    expect_correct(&tc, td);

    /* Shift dK by 8 elements into dQ's last head: now they share elements. */
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_DK, dqkv + H * d - 8, st, 4),
                  FLASHBWD_ERR_OVERLAP);
    expect_message(r.plan, "tensor dK overlaps tensor dQ");
    free(qkv);
    free(dqkv);
    ready_free(&r);
}

/* ======================================================================================
 * Varlen lengths that contradict the plan
 * ====================================================================================== */

static void test_contradictory_lengths_are_invalid_lengths(void **state)
{
    (void)state;
    static const int32_t lq[] = {5, 7}, lk[] = {9, 3};
    tcase tc = small;
    tc.name = "varlen lengths", tc.varlen = 1, tc.lens_q = lq, tc.lens_k = lk;
    ready r;
    ready_make(&r, &tc, 1);
    int32_t *cq = r.td.t[FLASHBWD_TENSOR_CU_SEQLENS_Q].data; /* {0, 5, 12} */
    int32_t *ck = r.td.t[FLASHBWD_TENSOR_CU_SEQLENS_K].data; /* {0, 9, 12} */
    int32_t used[2] = {5, 7};
    static const struct {
        const char *name;
        int side;     /* 0: cu_seqlens_q, 1: cu_seqlens_k, 2: seqused_q */
        int index;
        int32_t value;
        const char *needle;
    } rows[] = {
        {"negative start", 0, 0, -1, "cu_seqlens_q[0] = -1"},
        {"decreasing", 0, 1, 13, "cu_seqlens_q[1] = 13"},
        {"past total_q", 0, 2, 13, "total_q = 12"},
        {"longer than seqlen_k", 1, 1, 10, "longer than the plan's seqlen_k"},
        {"huge", 1, 2, INT32_MAX, "cu_seqlens_k[2]"},
        {"seqused past its sequence", 2, 1, 8, "seqused_q[1] = 8"},
        {"negative seqused", 2, 0, -3, "seqused_q[0] = -3"},
    };
    EXPECT_STATUS(flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_SEQUSED_Q, used, NULL, 0),
                  FLASHBWD_OK);
    for (size_t i = 0; i < COUNT_OF(rows); ++i) {
        int32_t *v = rows[i].side == 0 ? cq : rows[i].side == 1 ? ck : used;
        const int32_t keep = v[rows[i].index];
        v[rows[i].index] = rows[i].value;
        const int32_t st = flashbwd_execute(r.plan, NULL);
        if (st != FLASHBWD_ERR_INVALID_LENGTHS)
            fail_msg("%s: gave %s (%s)", rows[i].name, flashbwd_status_name(st),
                     flashbwd_last_error());
        expect_message(r.plan, rows[i].needle);
        v[rows[i].index] = keep;
    }
    /* Fixed lengths compute correctly again (seqused = the full lengths changes nothing). */
    poison_outputs(&r.td);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    expect_correct(&r.tc, &r.td);
    ready_free(&r);
}

/* ======================================================================================
 * One plan, two threads
 * ====================================================================================== */

typedef struct busy_run {
    flashbwd_plan *plan;
    atomic_int stop;
    atomic_long entered; /* executes begun: the main loop waits for the next one */
    atomic_long ok, busy, other;
    int32_t other_status;
} busy_run;

static void *execute_loop(void *arg)
{
    busy_run *b = arg;
    while (!atomic_load(&b->stop)) {
        atomic_fetch_add(&b->entered, 1);
        const int32_t st = flashbwd_execute(b->plan, NULL);
        if (st == FLASHBWD_OK) atomic_fetch_add(&b->ok, 1);
        else if (st == FLASHBWD_ERR_BUSY) atomic_fetch_add(&b->busy, 1);
        else b->other_status = st, atomic_fetch_add(&b->other, 1);
        sched_yield(); /* see the test below */
    }
    return NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* While another thread executes, set_tensor, set_workspace and execute on the same plan
 * must each return FLASHBWD_ERR_BUSY (or OK when they slip in between), never anything
 * else, and the plan must compute the right answer afterwards. The detection is the plan's
 * atomic busy flag; destroy and the read-only calls are not covered (documented).
 * Regression: a BUSY failure used to write the plan's message while the executing thread
 * wrote it too, a data race that the CI's ThreadSanitizer run of this suite reports. */
static void test_concurrent_use_of_one_plan_is_busy(void **state)
{
    (void)state;
    const tcase tc = {.name = "busy", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 2,
                      .heads_kv = 2, .seqlen_q = 96, .seqlen_k = 96};
    ready r;
    ready_make(&r, &tc, 1);
    busy_run b = {.plan = r.plan};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, execute_loop, &b), 0);
    const ttensor *q = &r.td.t[FLASHBWD_TENSOR_Q];
    long seen[3] = {0, 0, 0}; /* BUSY from set_tensor, set_workspace, execute */
    long oks = 0;
    char why[256] = "";
    const double deadline = now_s() + 60.0;
    enum { WANT = 50 }; /* collisions per call: enough for TSan (CI) to see any race */
    for (long i = 0; (seen[0] < WANT || seen[1] < WANT || seen[2] < WANT) && now_s() < deadline;
         ++i) {
        int32_t st;
        const int kind = (int)(i % 3);
        if (kind == 0) st = flashbwd_plan_set_tensor(r.plan, FLASHBWD_TENSOR_Q, q->data, q->stride, q->rank);
        else if (kind == 1) st = flashbwd_plan_set_workspace(r.plan, r.ws, r.ws_bytes);
        else st = flashbwd_execute(r.plan, NULL);
        if (st == FLASHBWD_ERR_BUSY) {
            ++seen[kind];
            expect_message(NULL, "in use by another call");
            static const char *fn[3] = {"set_tensor", "set_workspace", "execute"};
            expect_message(NULL, fn[kind]);
        } else if (st == FLASHBWD_OK) {
            ++oks;
        } else {
            snprintf(why, sizeof why, "call kind %d on a plan in use gave %s (%s)", kind,
                     flashbwd_status_name(st), flashbwd_last_error());
            break;
        }
        /* Under valgrind the threads take turns on one lock. Without yields the helper only
         * ran while this thread was inside execute (it saw BUSY two million times, this
         * thread never: a red CI run); with one yield per slipped-in call the helper could
         * still run whole executes between two of this thread's turns (another red run, on
         * valgrind's default unfair lock; .ci/run now asks for --fair-sched=yes). So after
         * a call that slipped in, wait until the helper has begun its next execute: this
         * thread's next call then lands inside it unless that execute already ended. */
        if (st == FLASHBWD_OK) {
            const long begun = atomic_load(&b.entered);
            while (atomic_load(&b.entered) == begun && now_s() < deadline) sched_yield();
        }
    }
    atomic_store(&b.stop, 1);
    pthread_join(th, NULL);
    printf("    BUSY seen: set_tensor %ld, set_workspace %ld, execute %ld; %ld calls slipped "
           "in; the other thread: %ld OK, %ld BUSY\n", seen[0], seen[1], seen[2], oks,
           atomic_load(&b.ok), atomic_load(&b.busy));
    if (!why[0] && atomic_load(&b.other))
        snprintf(why, sizeof why, "the executing thread got %s",
                 flashbwd_status_name(b.other_status));
    if (!why[0] && (seen[0] < WANT || seen[1] < WANT || seen[2] < WANT))
        snprintf(why, sizeof why, "in 60 s some call saw the plan busy fewer than %d times "
                 "(%ld, %ld, %ld)", WANT, seen[0], seen[1], seen[2]);
    if (why[0]) { /* free first: a failing run should not also report leaks */
        ready_free(&r);
        fail_msg("%s", why);
    }
    /* BUSY is the calling thread's failure, not the plan's: the executing call's success
     * left the plan's message empty. */
    assert_string_equal(flashbwd_plan_last_error(r.plan), "");
    poison_outputs(&r.td);
    EXPECT_STATUS(flashbwd_execute(r.plan, NULL), FLASHBWD_OK);
    expect_correct(&r.tc, &r.td);
    ready_free(&r);
}

/* ======================================================================================
 * GPU group: the wrong current device
 * ====================================================================================== */

#ifdef FB_WITH_CUDA
#define CUDA_OK(call)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));       \
    } while (0)
#endif

static void test_execute_with_another_current_device_is_wrong_device(void **state)
{
    (void)state;
#ifdef FB_WITH_CUDA
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("    needs two CUDA devices (%d visible)\n", n);
        skip();
    }
    const tcase tc = {.name = "wrong device", .dtype = BF, .head_dim = 64, .batch = 1,
                      .heads_q = 2, .heads_kv = 1, .seqlen_q = 40, .seqlen_k = 40, .causal = 1};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed() ^ 0xde7), 0);
    /* The plan and its memory live on device 1; the caller then switches to device 0. */
    CUDA_OK(cudaSetDevice(1));
    void *ptr[FLASHBWD_TENSOR_COUNT] = {0};
    for (int id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        const ttensor *t = &td.t[id];
        if (!t->data) continue;
        const size_t bytes = t->elems * (id == FLASHBWD_TENSOR_LSE ? 4 : 2);
        CUDA_OK(cudaMalloc(&ptr[id], bytes));
        CUDA_OK(cudaMemcpy(ptr[id], t->data, bytes, cudaMemcpyHostToDevice));
    }
    flashbwd_problem p = tcase_problem(&tc, FLASHBWD_BACKEND_CUDA);
    p.device = 1;
    flashbwd_plan *plan = NULL;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK)
        fail_msg("plan on device 1: %s", flashbwd_last_error());
    assert_int_equal(tdata_bind(&tc, &td, plan, ptr), FLASHBWD_OK);
    size_t ws_bytes = 0;
    flashbwd_plan_workspace_size(plan, &ws_bytes);
    void *ws = NULL;
    CUDA_OK(cudaMalloc(&ws, ws_bytes));
    EXPECT_STATUS(flashbwd_plan_set_workspace(plan, ws, ws_bytes), FLASHBWD_OK);

    CUDA_OK(cudaSetDevice(0));
    EXPECT_STATUS(flashbwd_execute(plan, NULL), FLASHBWD_ERR_WRONG_DEVICE);
    expect_message(plan, "current CUDA device is 0");
    expect_message(plan, "device 1");
    int current = -1;
    CUDA_OK(cudaGetDevice(&current));
    assert_int_equal(current, 0); /* execute did not switch devices behind the caller's back */

    /* Back on device 1 the same plan runs, and gives the right answer. */
    CUDA_OK(cudaSetDevice(1));
    EXPECT_STATUS(flashbwd_execute(plan, NULL), FLASHBWD_OK);
    CUDA_OK(cudaDeviceSynchronize());
    for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
        CUDA_OK(cudaMemcpy(td.t[id].data, ptr[id], td.t[id].elems * 2, cudaMemcpyDeviceToHost));
    expect_correct(&tc, &td);
    flashbwd_plan_destroy(plan);
    for (int id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) CUDA_OK(cudaFree(ptr[id]));
    CUDA_OK(cudaFree(ws));
    CUDA_OK(cudaSetDevice(0));
    tdata_free(&td);
#else
    printf("    built without CUDA\n");
    skip();
#endif
}

int main(int argc, char **argv)
{
    test_seed();
    const struct CMUnitTest cpu[] = {
        cmocka_unit_test(test_execute_before_any_tensor_is_tensor_not_set),
        cmocka_unit_test(test_execute_names_each_missing_required_tensor),
        cmocka_unit_test(test_workspace_missing_or_too_small_is_workspace_too_small),
        cmocka_unit_test(test_cpu_misaligned_pointers_are_misaligned),
        cmocka_unit_test(test_cuda_alignment_rules_apply_on_a_planning_only_plan),
        cmocka_unit_test(test_null_arguments_are_null_argument),
        cmocka_unit_test(test_workspace_alloc_misuse_and_the_cpu_backend),
        cmocka_unit_test(test_outputs_overlapping_inputs_or_each_other_are_overlap),
        cmocka_unit_test(test_outputs_of_different_extents_overlap_in_either_order),
        cmocka_unit_test(test_inputs_may_alias_inputs_and_fill_output_padding),
        cmocka_unit_test(test_packed_dqkv_buffer_is_accepted_and_correct),
        cmocka_unit_test(test_contradictory_lengths_are_invalid_lengths),
        cmocka_unit_test(test_concurrent_use_of_one_plan_is_busy),
    };
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_execute_with_another_current_device_is_wrong_device),
    };
    if (argc > 1 && strcmp(argv[1], "--gpu") == 0) return cmocka_run_group_tests(gpu, NULL, NULL);
    return cmocka_run_group_tests(cpu, NULL, NULL);
}
