/* consumer.c — a program built against an installed flashbwd, the way a user builds one.
 *
 * Checks the version rule the bindings apply (same major, runtime not older), then runs one
 * backward pass on the CPU backend and compares dQ, dK and dV with the independent fp64
 * reference of the test suite (tests/common.c, compiled in). Exit status 0 only if all
 * holds; prints which library it loaded so the test can see it is the installed one.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "flashbwd.h"

#define CHECK(call)                                                                       \
    do {                                                                                  \
        const int32_t s_ = (call);                                                        \
        if (s_ != FLASHBWD_OK) {                                                          \
            fprintf(stderr, "%s: %s\n", #call, flashbwd_last_error());                    \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "?";
    const uint32_t runtime = flashbwd_version();
    if (runtime / 10000 != FLASHBWD_VERSION_MAJOR || runtime < (uint32_t)FLASHBWD_VERSION) {
        fprintf(stderr, "version mismatch: header %d, library %u\n", FLASHBWD_VERSION, runtime);
        return 1;
    }

    const tcase tc = {.name = "consumer", .dtype = FLASHBWD_DTYPE_BF16, .head_dim = 64,
                      .batch = 2, .heads_q = 4, .heads_kv = 2, .seqlen_q = 33, .seqlen_k = 47,
                      .causal = 1};
    tdata td;
    if (tdata_make(&tc, &td, 12345) != 0) {
        fprintf(stderr, "tdata_make failed\n");
        return 1;
    }
    const flashbwd_problem p = tcase_problem(&tc, FLASHBWD_BACKEND_CPU);
    flashbwd_plan *plan = NULL;
    CHECK(flashbwd_plan_create(&p, &plan));
    CHECK(tdata_bind(&tc, &td, plan, NULL));
    size_t bytes = 0;
    CHECK(flashbwd_plan_workspace_size(plan, &bytes));
    void *ws = malloc(bytes ? bytes : 1);
    CHECK(flashbwd_plan_set_workspace(plan, ws, bytes));
    CHECK(flashbwd_execute(plan, NULL));

    const int32_t ids[3] = {FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};
    const char *names[3] = {"dQ", "dK", "dV"};
    int ok = 1;
    for (int i = 0; i < 3; ++i) {
        int64_t bad = 0;
        const double err = tdata_error(&tc, &td, ids[i], &bad);
        printf("consumer (%s): %s relative error %.2e, %lld NaN/Inf\n", how, names[i], err,
               (long long)bad);
        ok &= bad == 0 && err <= 1e-2; /* the bf16 bound of design.md */
    }
    free(ws);
    flashbwd_plan_destroy(plan);
    tdata_free(&td);
    printf("consumer (%s): flashbwd %u: %s\n", how, runtime, ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
