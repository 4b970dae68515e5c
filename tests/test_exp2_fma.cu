/* test_exp2_fma.cu — kernels/exp2_fma.cuh's 2^x against exp2 in double, on the CPU.
 *
 * The split kernel can take a share of its exponentials from exp2_fma instead of the SFU
 * (FB_SPLIT_EXP_FMA), so P's accuracy rests on its range reduction, its polynomial and
 * the bits it adds. The host path runs the same single-precision operations as the
 * device's; this checks the relative error over every x a probability can have, the
 * integers exactly, the clamp's tail and -inf (P = 0), and that a NaN does not come out
 * as a probability. nvcc compiles it as host code; it needs no GPU.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" { /* this cmocka.h declares its functions without C linkage for C++ */
#include <cmocka.h>
}

#include "../kernels/exp2_fma.cuh"

/* Relative error within 4e-6 (the fit's 2.9e-6 plus fp32 evaluation) on [-126, 1], over a
 * fresh random sample and a fine grid; the worst is printed. */
static void test_relative_error_on_the_probability_range(void **state)
{
    (void)state;
    const unsigned seed = (unsigned)time(NULL);
    srand(seed);
    double worst = 0.0, worst_x = 0.0;
    auto check = [&](float x) {
        const double ref = exp2((double)x), got = fb::exp2_fma(x);
        const double err = fabs(got / ref - 1.0);
        if (err > worst) worst = err, worst_x = x;
    };
    for (int i = 0; i <= 2000000; ++i) check(-126.0f + 127.0f * (float)i / 2000000.0f);
    for (int i = 0; i < 1000000; ++i) check(-126.0f + 127.0f * (float)rand() / (float)RAND_MAX);
    printf("    exp2_fma: worst relative error %.3e at x = %.6f (seed %u)\n", worst, worst_x,
           seed);
    if (worst > 4e-6) fail_msg("relative error %.3e at x = %.9g exceeds 4e-6", worst, worst_x);
}

/* f = 0 at every integer, where p(0) = 1 and the exponent field is j: exact. */
static void test_integers_are_exact(void **state)
{
    (void)state;
    for (int j = -126; j <= 1; ++j) {
        const float got = fb::exp2_fma((float)j);
        if (got != ldexpf(1.0f, j)) fail_msg("exp2_fma(%d) = %.9g, not 2^%d", j, got, j);
    }
}

/* At and below the clamp, -inf included, P is exactly +0; between -127 and -126, a
 * non-negative number below 1.2e-38. */
static void test_clamp_gives_zero_and_a_tiny_tail(void **state)
{
    (void)state;
    const float zeros[] = {-127.0f, -127.5f, -200.0f, -1e30f, -INFINITY};
    for (float x : zeros) {
        const float got = fb::exp2_fma(x);
        if (got != 0.0f || signbit(got)) fail_msg("exp2_fma(%g) = %g, not +0", x, got);
    }
    for (int i = 1; i < 1000; ++i) {
        const float x = -127.0f + (float)i / 1000.0f, got = fb::exp2_fma(x);
        if (!(got >= 0.0f && got < 1.2e-38f)) fail_msg("exp2_fma(%.4f) = %g", x, got);
    }
}

/* A NaN score must not become a probability: NaN, or (from the GPU's all-ones NaN)
 * FLT_MAX, which the 16-bit P makes inf. Both NaN bit patterns are tried. */
static void test_nan_is_not_a_probability(void **state)
{
    (void)state;
    const uint32_t nans[] = {0x7fc00000u, 0x7fffffffu, 0xffc00000u};
    for (uint32_t u : nans) {
        float x;
        memcpy(&x, &u, 4);
        const float got = fb::exp2_fma(x);
        if (!(isnan(got) || got >= FLT_MAX))
            fail_msg("exp2_fma(NaN 0x%08x) = %g, a finite probability", u, got);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relative_error_on_the_probability_range),
        cmocka_unit_test(test_integers_are_exact),
        cmocka_unit_test(test_clamp_gives_zero_and_a_tiny_tail),
        cmocka_unit_test(test_nan_is_not_a_probability),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
