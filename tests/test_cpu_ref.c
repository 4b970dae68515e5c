/* test_cpu_ref.c — the CPU reference backend against the independent fp64 reference of
 * common.c over the feature matrix, and against central finite differences of the loss
 * sum(dO ∘ O). Fresh random inputs every run (the seed is printed); outputs poisoned.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"

/* Run tc on the CPU backend and check dQ, dK, dV against fp64. */
static void check_case(const tcase *tc)
{
    tdata td;
    assert_int_equal(tdata_make(tc, &td, test_seed() ^ (uintptr_t)tc->name[0] * 77 ^ (uint64_t)tc->seqlen_q),
                     0);
    void *ws;
    flashbwd_plan *plan = tcpu_plan(tc, &td, 0, &ws);
    assert_non_null(plan);
    const int32_t st = flashbwd_execute(plan, NULL);
    if (st != FLASHBWD_OK) fail_msg("%s: execute: %s", tc->name, flashbwd_plan_last_error(plan));
    const double bound = tc->dtype == FLASHBWD_DTYPE_BF16 ? 1e-2 : 3e-3;
    const int ids[3] = {FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};
    const char *names[3] = {"dQ", "dK", "dV"};
    for (int i = 0; i < 3; ++i) {
        int64_t bad;
        const double err = tdata_error(tc, &td, ids[i], &bad);
        printf("    %-28s %s rel err %.2e%s\n", tc->name, names[i], err, bad ? " (NaN/Inf!)" : "");
        if (bad) fail_msg("%s: %s has %lld NaN/Inf (unwritten?) elements", tc->name, names[i],
                          (long long)bad);
        if (!(err <= bound)) fail_msg("%s: %s error %.3e > %.1e", tc->name, names[i], err, bound);
    }
    free(ws);
    flashbwd_plan_destroy(plan);
    tdata_free(&td);
}

#define BF FLASHBWD_DTYPE_BF16
#define FP FLASHBWD_DTYPE_FP16

static const int32_t lens_q[] = {17, 0, 64, 5};
static const int32_t lens_k[] = {30, 9, 1, 64};

/* The matrix: each row a named case. */
static const tcase cases[] = {
    {.name = "bf16 d64 plain", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 37, .seqlen_k = 37},
    {.name = "fp16 d128 causal", .dtype = FP, .head_dim = 128, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 70, .seqlen_k = 70, .causal = 1},
    {.name = "bf16 d40 sq<sk causal", .dtype = BF, .head_dim = 40, .batch = 2, .heads_q = 2, .heads_kv = 1, .seqlen_q = 13, .seqlen_k = 50, .causal = 1},
    {.name = "fp16 d96 sq>sk causal", .dtype = FP, .head_dim = 96, .batch = 1, .heads_q = 4, .heads_kv = 2, .seqlen_q = 50, .seqlen_k = 13, .causal = 1},
    {.name = "bf16 d8 seqlen1", .dtype = BF, .head_dim = 8, .batch = 3, .heads_q = 1, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 1},
    {.name = "fp16 d256 gqa4", .dtype = FP, .head_dim = 256, .batch = 1, .heads_q = 4, .heads_kv = 1, .seqlen_q = 20, .seqlen_k = 33},
    {.name = "bf16 window", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 60, .seqlen_k = 60, .use_window = 1, .window_left = 7, .window_right = 3},
    {.name = "bf16 window left only", .dtype = BF, .head_dim = 32, .batch = 1, .heads_q = 1, .heads_kv = 1, .seqlen_q = 40, .seqlen_k = 55, .use_window = 1, .window_left = 5, .window_right = -1},
    {.name = "fp16 causal+window", .dtype = FP, .head_dim = 64, .batch = 1, .heads_q = 2, .heads_kv = 1, .seqlen_q = 45, .seqlen_k = 45, .causal = 1, .use_window = 1, .window_left = 9, .window_right = -1},
    {.name = "bf16 softcap", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 33, .seqlen_k = 41, .softcap = 2.5f},
    {.name = "fp16 softcap causal", .dtype = FP, .head_dim = 128, .batch = 1, .heads_q = 2, .heads_kv = 1, .seqlen_q = 30, .seqlen_k = 30, .softcap = 5.0f, .causal = 1},
    {.name = "bf16 alibi per head", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 25, .seqlen_k = 31, .alibi = 1, .causal = 1},
    {.name = "fp16 alibi per batch", .dtype = FP, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 1, .seqlen_q = 25, .seqlen_k = 25, .alibi = 2},
    {.name = "bf16 scale 0.3", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 1, .heads_kv = 1, .seqlen_q = 19, .seqlen_k = 19, .scale = 0.3f},
    {.name = "bf16 padded strides", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 1, .seqlen_q = 21, .seqlen_k = 27, .layout = 1, .causal = 1},
    {.name = "fp16 bhsd strides", .dtype = FP, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 21, .seqlen_k = 27, .layout = 2},
    {.name = "bf16 masked rows", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 30, .seqlen_k = 30, .masked_rows = 1},
    {.name = "bf16 varlen", .dtype = BF, .head_dim = 64, .batch = 4, .heads_q = 2, .heads_kv = 1, .seqlen_q = 64, .seqlen_k = 64, .varlen = 1, .lens_q = lens_q, .lens_k = lens_k, .causal = 1},
    {.name = "fp16 varlen padded", .dtype = FP, .head_dim = 64, .batch = 4, .heads_q = 2, .heads_kv = 2, .seqlen_q = 64, .seqlen_k = 64, .varlen = 1, .lens_q = lens_q, .lens_k = lens_k, .layout = 1},
    {.name = "bf16 512 (speed)", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 512, .seqlen_k = 512, .causal = 1},
};

static void test_cpu_ref_matches_fp64_on_the_feature_matrix(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) check_case(&cases[i]);
}

/* --- Finite differences ------------------------------------------------------------------ */

/* Loss sum(dO ∘ O(q, k, v)) in fp64 for one head, with q, k, v as doubles. */
static double loss(int sq, int sk, int d, double scale, int causal, const double *q,
                   const double *k, const double *v, const double *dout)
{
    double total = 0;
    double *s = malloc(sizeof(double) * (size_t)sk);
    for (int i = 0; i < sq; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < sk; ++j) {
            s[j] = -INFINITY;
            if (causal && j > i + sk - sq) continue;
            double acc = 0;
            for (int c = 0; c < d; ++c) acc += q[i * d + c] * k[j * d + c];
            s[j] = acc * scale;
            if (s[j] > mx) mx = s[j];
        }
        for (int j = 0; j < sk; ++j) sum += s[j] > -INFINITY ? exp(s[j] - mx) : 0;
        for (int j = 0; j < sk; ++j) {
            if (s[j] == -INFINITY) continue;
            const double p = exp(s[j] - mx) / sum;
            for (int c = 0; c < d; ++c) total += dout[i * d + c] * p * v[j * d + c];
        }
    }
    free(s);
    return total;
}

static void test_cpu_ref_matches_central_finite_differences(void **state)
{
    (void)state;
    /* Inputs are fp16 values; the library's 16-bit outputs are compared with d(loss)/dx
     * from central differences in fp64 at a few random elements of each input. */
    const tcase tc = {.name = "fd", .dtype = FP, .head_dim = 16, .batch = 1, .heads_q = 1,
                      .heads_kv = 1, .seqlen_q = 9, .seqlen_k = 12, .causal = 1};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed() + 99), 0);
    void *ws;
    flashbwd_plan *plan = tcpu_plan(&tc, &td, 0, &ws);
    assert_non_null(plan);
    assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_OK);

    const int sq = 9, sk = 12, d = 16;
    double *x[4];
    const int ids[4] = {FLASHBWD_TENSOR_Q, FLASHBWD_TENSOR_K, FLASHBWD_TENSOR_V, FLASHBWD_TENSOR_DO};
    for (int t = 0; t < 4; ++t) {
        const int rows = t == 0 || t == 3 ? sq : sk;
        x[t] = malloc(sizeof(double) * (size_t)(rows * d));
        for (int i = 0; i < rows * d; ++i) x[t][i] = th_to_float(((uint16_t *)td.t[ids[t]].data)[i], tc.dtype);
    }
    const double scale = 1.0 / 4.0, h = 1e-4;
    uint64_t st = test_seed() + 7;
    const int grads[3] = {FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};
    double num = 0, den = 0;
    for (int g = 0; g < 3; ++g) {
        const int rows = g == 0 ? sq : sk;
        for (int n = 0; n < 12; ++n) {
            const int idx = (int)((uint64_t)(fabs(rnd_normal(&st)) * 1e6) % (uint64_t)(rows * d));
            const double keep = x[g][idx];
            x[g][idx] = keep + h;
            const double up = loss(sq, sk, d, scale, 1, x[0], x[1], x[2], x[3]);
            x[g][idx] = keep - h;
            const double down = loss(sq, sk, d, scale, 1, x[0], x[1], x[2], x[3]);
            x[g][idx] = keep;
            const double fd = (up - down) / (2 * h);
            const double got = th_to_float(((uint16_t *)td.t[grads[g]].data)[idx], tc.dtype);
            num += (got - fd) * (got - fd);
            den += fd * fd;
        }
    }
    const double err = sqrt(num / den);
    printf("    finite differences: rel err %.2e over 36 elements\n", err);
    /* The library's D uses the fp16-rounded O; fp16 outputs: allow 1e-2. */
    assert_true(err < 1e-2);
    for (int t = 0; t < 4; ++t) free(x[t]);
    free(ws);
    flashbwd_plan_destroy(plan);
    tdata_free(&td);
}

static void test_cpu_ref_is_deterministic(void **state)
{
    (void)state;
    const tcase tc = {.name = "det", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 4,
                      .heads_kv = 1, .seqlen_q = 40, .seqlen_k = 40, .causal = 1};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed() + 5), 0);
    void *ws;
    flashbwd_plan *plan = tcpu_plan(&tc, &td, 1, &ws);
    assert_non_null(plan);
    const size_t n = td.t[FLASHBWD_TENSOR_DK].elems * 2;
    void *first = malloc(n);
    for (int run = 0; run < 3; ++run) {
        memset(td.t[FLASHBWD_TENSOR_DK].data, 0xff, n);
        assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_OK);
        if (run == 0) memcpy(first, td.t[FLASHBWD_TENSOR_DK].data, n);
        else assert_memory_equal(first, td.t[FLASHBWD_TENSOR_DK].data, n);
    }
    free(first), free(ws);
    flashbwd_plan_destroy(plan);
    tdata_free(&td);
}

static void test_cpu_ref_rejects_contradictory_cu_seqlens(void **state)
{
    (void)state;
    static const int32_t lq[] = {3, 4}, lk[] = {5, 2};
    const tcase tc = {.name = "bad cu", .dtype = BF, .head_dim = 8, .batch = 2, .heads_q = 1,
                      .heads_kv = 1, .seqlen_q = 4, .seqlen_k = 5, .varlen = 1, .lens_q = lq,
                      .lens_k = lk};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed()), 0);
    void *ws;
    flashbwd_plan *plan = tcpu_plan(&tc, &td, 0, &ws);
    assert_non_null(plan);
    int32_t *cu = td.t[FLASHBWD_TENSOR_CU_SEQLENS_Q].data;
    cu[1] = 4; /* 0, 4, 2: decreasing */
    cu[2] = 2;
    assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_ERR_INVALID_LENGTHS);
    assert_non_null(strstr(flashbwd_plan_last_error(plan), "cu_seqlens_q"));
    cu[1] = 3, cu[2] = 7;
    int32_t *ck = td.t[FLASHBWD_TENSOR_CU_SEQLENS_K].data;
    ck[1] = 6; /* a sequence of 6 keys > seqlen_k = 5 */
    assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_ERR_INVALID_LENGTHS);
    free(ws);
    flashbwd_plan_destroy(plan);
    tdata_free(&td);
}

int main(void)
{
    test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_ref_matches_fp64_on_the_feature_matrix),
        cmocka_unit_test(test_cpu_ref_matches_central_finite_differences),
        cmocka_unit_test(test_cpu_ref_is_deterministic),
        cmocka_unit_test(test_cpu_ref_rejects_contradictory_cu_seqlens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
