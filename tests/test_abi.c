/* test_abi.c — the ABI as numbers: versions, struct sizes and field offsets, the status
 * table, tensor ids and the other constants, the struct_size rules, and where failure
 * messages go (the calling thread, and the plan).
 *
 * The pinned tables below hold literal numbers on purpose: they are the 1.0 ABI, and a
 * change to the header that renumbers, reorders or resizes anything fails here by name.
 * They only ever grow (docs/abi-policy.md). Links libflashbwd.so, like any user.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "flashbwd.h"

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* A small valid problem for the CPU backend. */
static flashbwd_problem cpu_problem(void)
{
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CPU;
    p.head_dim = 16;
    p.batch = 1;
    p.heads_q = 2;
    p.seqlen_q = 5;
    p.seqlen_k = 7;
    return p;
}

/* ======================================================================================
 * Versions
 * ====================================================================================== */

static void test_version_macro_equals_runtime_version(void **state)
{
    (void)state;
    assert_int_equal(flashbwd_version(), FLASHBWD_VERSION);
    assert_int_equal(FLASHBWD_VERSION, FLASHBWD_VERSION_MAJOR * 10000 +
                                           FLASHBWD_VERSION_MINOR * 100 +
                                           FLASHBWD_VERSION_PATCH);
    /* The bindings' load-time rule, as a user would write it. */
    assert_int_equal(flashbwd_version() / 10000, FLASHBWD_VERSION_MAJOR);
    assert_true(flashbwd_version() >= (uint32_t)FLASHBWD_VERSION);
}

static void test_version_fields_are_in_range_and_major_is_1(void **state)
{
    (void)state;
    assert_int_equal(FLASHBWD_VERSION_MAJOR, 1); /* the SONAME is libflashbwd.so.1 */
    assert_in_range(FLASHBWD_VERSION_MINOR, 0, 99);
    assert_in_range(FLASHBWD_VERSION_PATCH, 0, 99);
}

/* ======================================================================================
 * Struct sizes and layouts
 * ====================================================================================== */

static void test_struct_size_constants_equal_offsetof_last_plus_sizeof_last(void **state)
{
    (void)state;
    assert_int_equal(FLASHBWD_PROBLEM_STRUCT_SIZE,
                     offsetof(flashbwd_problem, reserved0) + sizeof(int32_t));
    assert_int_equal(FLASHBWD_PLAN_INFO_STRUCT_SIZE,
                     offsetof(flashbwd_plan_info, workspace_bytes) + sizeof(size_t));
    /* The _1_0 names are frozen: a new field moves the plain constant, never these. */
    assert_int_equal(FLASHBWD_PROBLEM_STRUCT_SIZE_1_0, 128);
    assert_int_equal(FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0, 160);
}

static void test_struct_size_function_matches_the_constants(void **state)
{
    (void)state;
    assert_int_equal(flashbwd_struct_size(FLASHBWD_STRUCT_PROBLEM), FLASHBWD_PROBLEM_STRUCT_SIZE);
    assert_int_equal(flashbwd_struct_size(FLASHBWD_STRUCT_PLAN_INFO),
                     FLASHBWD_PLAN_INFO_STRUCT_SIZE);
}

static void test_struct_size_of_unknown_id_is_0(void **state)
{
    (void)state;
    const int32_t unknown[] = {0, -1, 3, 1000, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < COUNT_OF(unknown); ++i) {
        if (flashbwd_struct_size(unknown[i]) != 0)
            fail_msg("flashbwd_struct_size(%d) = %zu; expected 0", unknown[i],
                     flashbwd_struct_size(unknown[i]));
    }
}

/* Byte offsets of every field of the 1.0 structs (x86-64 and every LP64 target). Bindings
 * that mirror the structs by hand (Julia) depend on exactly these. */
typedef struct field_row {
    const char *name;
    size_t offset, expected;
} field_row;

#define FIELD(type, field, off) {#type "." #field, offsetof(type, field), off}

static const field_row fields[] = {
    FIELD(flashbwd_problem, struct_size, 0),
    FIELD(flashbwd_problem, backend, 8),
    FIELD(flashbwd_problem, device, 12),
    FIELD(flashbwd_problem, dtype, 16),
    FIELD(flashbwd_problem, head_dim, 20),
    FIELD(flashbwd_problem, batch, 24),
    FIELD(flashbwd_problem, heads_q, 32),
    FIELD(flashbwd_problem, heads_kv, 40),
    FIELD(flashbwd_problem, seqlen_q, 48),
    FIELD(flashbwd_problem, seqlen_k, 56),
    FIELD(flashbwd_problem, total_q, 64),
    FIELD(flashbwd_problem, total_k, 72),
    FIELD(flashbwd_problem, softmax_scale, 80),
    FIELD(flashbwd_problem, softcap, 84),
    FIELD(flashbwd_problem, causal, 88),
    FIELD(flashbwd_problem, use_window, 92),
    FIELD(flashbwd_problem, window_left, 96),
    FIELD(flashbwd_problem, window_right, 100),
    FIELD(flashbwd_problem, varlen, 104),
    FIELD(flashbwd_problem, deterministic, 108),
    FIELD(flashbwd_problem, sm_count, 112),
    FIELD(flashbwd_problem, arch, 116),
    FIELD(flashbwd_problem, smem_per_block, 120),
    FIELD(flashbwd_problem, reserved0, 124),
    FIELD(flashbwd_plan_info, struct_size, 0),
    FIELD(flashbwd_plan_info, backend, 8),
    FIELD(flashbwd_plan_info, arch, 12),
    FIELD(flashbwd_plan_info, sm_count, 16),
    FIELD(flashbwd_plan_info, smem_per_block, 20),
    FIELD(flashbwd_plan_info, kernel_head_dim, 24),
    FIELD(flashbwd_plan_info, block_m, 28),
    FIELD(flashbwd_plan_info, block_n, 32),
    FIELD(flashbwd_plan_info, num_threads, 36),
    FIELD(flashbwd_plan_info, stages_q, 40),
    FIELD(flashbwd_plan_info, stages_do, 44),
    FIELD(flashbwd_plan_info, smem_bytes, 48),
    FIELD(flashbwd_plan_info, num_launches, 52),
    FIELD(flashbwd_plan_info, grid, 56),
    FIELD(flashbwd_plan_info, block, 104),
    FIELD(flashbwd_plan_info, workspace_bytes, 152),
};

static void test_struct_field_offsets_are_the_pinned_1_0_layout(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT_OF(fields); ++i) {
        const field_row *r = &fields[i];
        if (r->offset != r->expected)
            fail_msg("%s is at byte %zu; the 1.0 ABI has it at %zu", r->name, r->offset,
                     r->expected);
    }
}

/* ======================================================================================
 * Status codes
 * ====================================================================================== */

typedef struct status_row {
    int32_t value;      /* the header's macro */
    int32_t pinned;     /* its number in 1.0, forever */
    const char *name;   /* what flashbwd_status_name() must return */
} status_row;

#define STATUS(macro, number) {macro, number, #macro}

static const status_row statuses[] = {
    STATUS(FLASHBWD_OK, 0),
    STATUS(FLASHBWD_ERR_NULL_ARGUMENT, 1),
    STATUS(FLASHBWD_ERR_STRUCT_SIZE, 2),
    STATUS(FLASHBWD_ERR_INVALID_VALUE, 3),
    STATUS(FLASHBWD_ERR_NOT_SUPPORTED, 4),
    STATUS(FLASHBWD_ERR_NO_DEVICE, 5),
    STATUS(FLASHBWD_ERR_WRONG_DEVICE, 6),
    STATUS(FLASHBWD_ERR_MISALIGNED, 7),
    STATUS(FLASHBWD_ERR_TENSOR_NOT_SET, 8),
    STATUS(FLASHBWD_ERR_WORKSPACE_TOO_SMALL, 9),
    STATUS(FLASHBWD_ERR_CUDA, 10),
    STATUS(FLASHBWD_ERR_OUT_OF_MEMORY, 11),
    STATUS(FLASHBWD_ERR_OVERFLOW, 12),
    STATUS(FLASHBWD_ERR_BUSY, 13),
    STATUS(FLASHBWD_ERR_OVERLAP, 14),
    STATUS(FLASHBWD_ERR_INVALID_LENGTHS, 15),
    STATUS(FLASHBWD_ERR_INTERNAL, 16),
};

static void test_status_macros_have_their_pinned_numbers(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT_OF(statuses); ++i)
        if (statuses[i].value != statuses[i].pinned)
            fail_msg("%s = %d in the header; it was %d in 1.0 and may never change",
                     statuses[i].name, statuses[i].value, statuses[i].pinned);
}

static void test_status_table_covers_every_value_below_status_count(void **state)
{
    (void)state;
    /* A status added to the header without a pinned row here fails, and so does a row for
     * a value the header no longer counts. */
    assert_int_equal(FLASHBWD_STATUS_COUNT, COUNT_OF(statuses));
    for (int32_t v = 0; v < FLASHBWD_STATUS_COUNT; ++v) {
        int found = 0;
        for (size_t i = 0; i < COUNT_OF(statuses); ++i) found += statuses[i].value == v;
        if (found != 1) fail_msg("status %d has %d pinned rows; expected 1", v, found);
    }
}

static void test_status_name_of_every_value_is_its_macro_name(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT_OF(statuses); ++i) {
        const char *got = flashbwd_status_name(statuses[i].value);
        assert_non_null(got);
        if (strcmp(got, statuses[i].name) != 0)
            fail_msg("flashbwd_status_name(%d) = \"%s\"; expected \"%s\"", statuses[i].value,
                     got, statuses[i].name);
    }
}

static void test_status_names_are_unique_and_prefixed(void **state)
{
    (void)state;
    for (int32_t a = 0; a < FLASHBWD_STATUS_COUNT; ++a) {
        const char *na = flashbwd_status_name(a);
        if (strncmp(na, "FLASHBWD_", 9) != 0)
            fail_msg("status %d is named \"%s\"; expected a FLASHBWD_ prefix", a, na);
        for (int32_t b = a + 1; b < FLASHBWD_STATUS_COUNT; ++b)
            if (strcmp(na, flashbwd_status_name(b)) == 0)
                fail_msg("statuses %d and %d share the name \"%s\"", a, b, na);
    }
}

static void test_status_strings_are_non_empty_and_unique(void **state)
{
    (void)state;
    const char *unknown = flashbwd_status_string(-1);
    for (int32_t a = 0; a < FLASHBWD_STATUS_COUNT; ++a) {
        const char *sa = flashbwd_status_string(a);
        assert_non_null(sa);
        if (strlen(sa) == 0) fail_msg("status %d has an empty string", a);
        if (strcmp(sa, unknown) == 0)
            fail_msg("status %d (%s) has the unknown-status text \"%s\"", a,
                     flashbwd_status_name(a), sa);
        for (int32_t b = a + 1; b < FLASHBWD_STATUS_COUNT; ++b)
            if (strcmp(sa, flashbwd_status_string(b)) == 0)
                fail_msg("statuses %d and %d share the string \"%s\"", a, b, sa);
    }
}

static void test_status_unknown_values_give_the_unknown_name(void **state)
{
    (void)state;
    const int32_t unknown[] = {-1, FLASHBWD_STATUS_COUNT, FLASHBWD_STATUS_COUNT + 1, 1000,
                               INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < COUNT_OF(unknown); ++i) {
        const char *name = flashbwd_status_name(unknown[i]);
        const char *text = flashbwd_status_string(unknown[i]);
        assert_non_null(name);
        assert_non_null(text);
        if (strcmp(name, "FLASHBWD_ERR_UNKNOWN") != 0)
            fail_msg("flashbwd_status_name(%d) = \"%s\"; expected FLASHBWD_ERR_UNKNOWN",
                     unknown[i], name);
        if (strlen(text) == 0) fail_msg("flashbwd_status_string(%d) is empty", unknown[i]);
    }
}

/* ======================================================================================
 * Other constants: tensor ids, launches, dtypes, backends, struct ids
 * ====================================================================================== */

typedef struct const_row {
    const char *name;
    int64_t value, pinned;
} const_row;

#define CONST(macro, number) {#macro, (int64_t)(macro), number}

static const const_row constants[] = {
    CONST(FLASHBWD_TENSOR_Q, 1),
    CONST(FLASHBWD_TENSOR_K, 2),
    CONST(FLASHBWD_TENSOR_V, 3),
    CONST(FLASHBWD_TENSOR_O, 4),
    CONST(FLASHBWD_TENSOR_DO, 5),
    CONST(FLASHBWD_TENSOR_LSE, 6),
    CONST(FLASHBWD_TENSOR_DQ, 7),
    CONST(FLASHBWD_TENSOR_DK, 8),
    CONST(FLASHBWD_TENSOR_DV, 9),
    CONST(FLASHBWD_TENSOR_CU_SEQLENS_Q, 10),
    CONST(FLASHBWD_TENSOR_CU_SEQLENS_K, 11),
    CONST(FLASHBWD_TENSOR_SEQUSED_Q, 12),
    CONST(FLASHBWD_TENSOR_SEQUSED_K, 13),
    CONST(FLASHBWD_TENSOR_ALIBI_SLOPES, 14),
    CONST(FLASHBWD_LAUNCH_PREPROCESS, 0),
    CONST(FLASHBWD_LAUNCH_MAIN, 1),
    CONST(FLASHBWD_LAUNCH_CONVERT_DQ, 2),
    CONST(FLASHBWD_LAUNCH_CONVERT_DKV, 3),
    CONST(FLASHBWD_DTYPE_BF16, 1),
    CONST(FLASHBWD_DTYPE_FP16, 2),
    CONST(FLASHBWD_BACKEND_CUDA, 1),
    CONST(FLASHBWD_BACKEND_CPU, 2),
    CONST(FLASHBWD_STRUCT_PROBLEM, 1),
    CONST(FLASHBWD_STRUCT_PLAN_INFO, 2),
};

static void test_constants_have_their_pinned_numbers(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT_OF(constants); ++i)
        if (constants[i].value != constants[i].pinned)
            fail_msg("%s = %lld in the header; it was %lld in 1.0 and may never change",
                     constants[i].name, (long long)constants[i].value,
                     (long long)constants[i].pinned);
}

static void test_tensor_ids_cover_every_value_below_tensor_count(void **state)
{
    (void)state;
    /* Ids are append-only: a new id needs a pinned row above, and the count follows it. */
    for (int64_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        int found = 0;
        for (size_t i = 0; i < COUNT_OF(constants); ++i)
            found += strncmp(constants[i].name, "FLASHBWD_TENSOR_", 16) == 0 &&
                     constants[i].value == id;
        if (found != 1) fail_msg("tensor id %lld has %d pinned rows; expected 1", (long long)id,
                                 found);
    }
    assert_int_equal(FLASHBWD_TENSOR_COUNT, 15);
}

/* ======================================================================================
 * struct_size rules (flashbwd.h conventions; Linux openat2 semantics)
 * ====================================================================================== */

/* A problem as a newer header would have it: more fields after the ones we know. */
typedef struct newer_problem {
    flashbwd_problem known;
    int64_t future[4];
} newer_problem;

static void test_problem_struct_size_older_than_1_0_is_rejected(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, 8, FLASHBWD_PROBLEM_STRUCT_SIZE_1_0 - 4,
                            FLASHBWD_PROBLEM_STRUCT_SIZE_1_0 - 1};
    for (size_t i = 0; i < COUNT_OF(sizes); ++i) {
        flashbwd_problem p = cpu_problem();
        p.struct_size = sizes[i];
        flashbwd_plan *plan = (flashbwd_plan *)&p; /* must be overwritten with NULL */
        const int32_t st = flashbwd_plan_create(&p, &plan);
        if (st != FLASHBWD_ERR_STRUCT_SIZE)
            fail_msg("struct_size %zu: status %s; expected FLASHBWD_ERR_STRUCT_SIZE", sizes[i],
                     flashbwd_status_name(st));
        assert_null(plan);
        char want[64];
        snprintf(want, sizeof want, "problem.struct_size = %zu", sizes[i]);
        if (!strstr(flashbwd_last_error(), want))
            fail_msg("message \"%s\" does not contain \"%s\"", flashbwd_last_error(), want);
    }
}

static void test_problem_larger_struct_with_zero_tail_is_accepted(void **state)
{
    (void)state;
    newer_problem n;
    memset(&n, 0, sizeof n);
    n.known = cpu_problem();
    n.known.struct_size = sizeof n;
    flashbwd_plan *plan = NULL;
    const int32_t st = flashbwd_plan_create(&n.known, &plan);
    if (st != FLASHBWD_OK) fail_msg("status %s: %s", flashbwd_status_name(st), flashbwd_last_error());
    assert_non_null(plan);
    flashbwd_plan_destroy(plan);
}

static void test_problem_larger_struct_with_non_zero_tail_is_rejected(void **state)
{
    (void)state;
    for (size_t byte = 0; byte < sizeof(((newer_problem *)0)->future); byte += 7) {
        newer_problem n;
        memset(&n, 0, sizeof n);
        n.known = cpu_problem();
        n.known.struct_size = sizeof n;
        ((unsigned char *)n.future)[byte] = 1;
        flashbwd_plan *plan = (flashbwd_plan *)&n;
        assert_int_equal(flashbwd_plan_create(&n.known, &plan), FLASHBWD_ERR_STRUCT_SIZE);
        assert_null(plan);
        char want[64];
        snprintf(want, sizeof want, "byte %zu is non-zero", offsetof(newer_problem, future) + byte);
        if (!strstr(flashbwd_last_error(), want))
            fail_msg("message \"%s\" does not contain \"%s\"", flashbwd_last_error(), want);
    }
}

static void test_problem_struct_size_absurdly_large_is_rejected_without_reading_it(void **state)
{
    (void)state;
    /* Only the known bytes exist; the library must refuse before walking a "tail". */
    const size_t sizes[] = {(size_t)1 << 20, SIZE_MAX};
    for (size_t i = 0; i < COUNT_OF(sizes); ++i) {
        flashbwd_problem p = cpu_problem();
        p.struct_size = sizes[i];
        flashbwd_plan *plan = (flashbwd_plan *)&p;
        assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_STRUCT_SIZE);
        assert_null(plan);
        assert_non_null(strstr(flashbwd_last_error(), "problem.struct_size"));
    }
}

static void test_plan_info_older_size_is_rejected_and_larger_tail_is_zeroed(void **state)
{
    (void)state;
    flashbwd_problem p = cpu_problem();
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);

    flashbwd_plan_info small;
    memset(&small, 0, sizeof small);
    small.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0 - 8;
    assert_int_equal(flashbwd_plan_get_info(plan, &small), FLASHBWD_ERR_STRUCT_SIZE);
    assert_non_null(strstr(flashbwd_last_error(), "info.struct_size"));

    struct {
        flashbwd_plan_info info;
        unsigned char future[24];
    } big;
    memset(&big, 0xab, sizeof big);
    big.info.struct_size = sizeof big;
    assert_int_equal(flashbwd_plan_get_info(plan, &big.info), FLASHBWD_OK);
    assert_int_equal(big.info.struct_size, sizeof big);
    assert_int_equal(big.info.backend, FLASHBWD_BACKEND_CPU);
    for (size_t i = 0; i < sizeof big.future; ++i)
        if (big.future[i] != 0) fail_msg("byte %zu past the known info is 0x%02x, not 0", i,
                                         big.future[i]);
    flashbwd_plan_destroy(plan);
}

/* ======================================================================================
 * Messages: thread-local for every failure, per plan for failures on a plan
 * ====================================================================================== */

static void *read_last_error_on_new_thread(void *out)
{
    snprintf(out, 256, "%s", flashbwd_last_error());
    return NULL;
}

static void *fail_on_new_thread(void *out)
{
    flashbwd_problem p = cpu_problem();
    p.head_dim = 12;
    flashbwd_plan *plan = NULL;
    const int32_t st = flashbwd_plan_create(&p, &plan);
    snprintf(out, 256, "%d %s", st, flashbwd_last_error());
    return NULL;
}

static void test_last_error_is_empty_on_a_fresh_thread(void **state)
{
    (void)state;
    char seen[256] = "unset";
    flashbwd_plan_create(NULL, NULL); /* a failure on this thread must not leak over */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_last_error_on_new_thread, seen), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_string_equal(seen, "");
}

static void test_last_error_of_another_thread_is_not_seen_here(void **state)
{
    (void)state;
    flashbwd_problem p = cpu_problem();
    p.batch = 0;
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_INVALID_VALUE);
    char before[256];
    snprintf(before, sizeof before, "%s", flashbwd_last_error());
    assert_non_null(strstr(before, "problem.batch = 0"));

    char other[256] = "";
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fail_on_new_thread, other), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_non_null(strstr(other, "problem.head_dim = 12")); /* the other thread's own */
    assert_string_equal(flashbwd_last_error(), before);        /* ours is untouched */
}

static void test_last_error_starts_with_the_status_name(void **state)
{
    (void)state;
    flashbwd_problem p = cpu_problem();
    p.dtype = 7;
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_ERR_INVALID_VALUE);
    const char *msg = flashbwd_last_error();
    assert_true(strncmp(msg, "FLASHBWD_ERR_INVALID_VALUE: ", 28) == 0);
    assert_non_null(strstr(msg, "problem.dtype = 7"));
}

static void test_last_error_is_kept_by_successful_calls(void **state)
{
    (void)state;
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(NULL, &plan), FLASHBWD_ERR_NULL_ARGUMENT);
    char before[256];
    snprintf(before, sizeof before, "%s", flashbwd_last_error());
    assert_true(strlen(before) > 0);

    flashbwd_problem p = cpu_problem();
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    size_t bytes = 0;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &bytes), FLASHBWD_OK);
    flashbwd_plan_destroy(plan);
    assert_string_equal(flashbwd_last_error(), before);
}

static void test_plan_message_records_a_failure_and_success_clears_it(void **state)
{
    (void)state;
    flashbwd_problem p = cpu_problem();
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    assert_string_equal(flashbwd_plan_last_error(plan), "");

    static uint16_t q[1 * 5 * 2 * 16];
    assert_int_equal(flashbwd_plan_set_tensor(plan, 99, q, NULL, 0), FLASHBWD_ERR_INVALID_VALUE);
    assert_non_null(strstr(flashbwd_plan_last_error(plan), "tensor id 99"));
    /* The thread's message carries the same text. */
    assert_string_equal(flashbwd_plan_last_error(plan), flashbwd_last_error());

    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, q, NULL, 0), FLASHBWD_OK);
    assert_string_equal(flashbwd_plan_last_error(plan), "");
    flashbwd_plan_destroy(plan);
}

static void test_plan_message_is_cleared_by_a_successful_unbind(void **state)
{
    (void)state;
    flashbwd_problem p = cpu_problem();
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_workspace(plan, (void *)(uintptr_t)2, 1 << 20),
                     FLASHBWD_ERR_MISALIGNED);
    assert_string_not_equal(flashbwd_plan_last_error(plan), "");
    /* ptr NULL unbinds; it is a call that succeeds, so the plan's message is "". */
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, NULL, NULL, 0),
                     FLASHBWD_OK);
    assert_string_equal(flashbwd_plan_last_error(plan), "");
    flashbwd_plan_destroy(plan);
}

static void test_plan_messages_are_independent_per_plan(void **state)
{
    (void)state;
    flashbwd_problem p = cpu_problem();
    flashbwd_plan *a = NULL, *b = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &a), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_create(&p, &b), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(a, 0, NULL, NULL, 0), FLASHBWD_ERR_INVALID_VALUE);
    assert_non_null(strstr(flashbwd_plan_last_error(a), "tensor id 0"));
    assert_string_equal(flashbwd_plan_last_error(b), "");
    flashbwd_plan_destroy(a);
    flashbwd_plan_destroy(b);
}

static void test_plan_last_error_of_null_is_empty(void **state)
{
    (void)state;
    assert_non_null(flashbwd_plan_last_error(NULL));
    assert_string_equal(flashbwd_plan_last_error(NULL), "");
}

static void test_plan_destroy_of_null_is_a_no_op(void **state)
{
    (void)state;
    flashbwd_plan_destroy(NULL); /* the test is that this returns */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_macro_equals_runtime_version),
        cmocka_unit_test(test_version_fields_are_in_range_and_major_is_1),
        cmocka_unit_test(test_struct_size_constants_equal_offsetof_last_plus_sizeof_last),
        cmocka_unit_test(test_struct_size_function_matches_the_constants),
        cmocka_unit_test(test_struct_size_of_unknown_id_is_0),
        cmocka_unit_test(test_struct_field_offsets_are_the_pinned_1_0_layout),
        cmocka_unit_test(test_status_macros_have_their_pinned_numbers),
        cmocka_unit_test(test_status_table_covers_every_value_below_status_count),
        cmocka_unit_test(test_status_name_of_every_value_is_its_macro_name),
        cmocka_unit_test(test_status_names_are_unique_and_prefixed),
        cmocka_unit_test(test_status_strings_are_non_empty_and_unique),
        cmocka_unit_test(test_status_unknown_values_give_the_unknown_name),
        cmocka_unit_test(test_constants_have_their_pinned_numbers),
        cmocka_unit_test(test_tensor_ids_cover_every_value_below_tensor_count),
        cmocka_unit_test(test_problem_struct_size_older_than_1_0_is_rejected),
        cmocka_unit_test(test_problem_larger_struct_with_zero_tail_is_accepted),
        cmocka_unit_test(test_problem_larger_struct_with_non_zero_tail_is_rejected),
        cmocka_unit_test(test_problem_struct_size_absurdly_large_is_rejected_without_reading_it),
        cmocka_unit_test(test_plan_info_older_size_is_rejected_and_larger_tail_is_zeroed),
        cmocka_unit_test(test_last_error_is_empty_on_a_fresh_thread),
        cmocka_unit_test(test_last_error_of_another_thread_is_not_seen_here),
        cmocka_unit_test(test_last_error_starts_with_the_status_name),
        cmocka_unit_test(test_last_error_is_kept_by_successful_calls),
        cmocka_unit_test(test_plan_message_records_a_failure_and_success_clears_it),
        cmocka_unit_test(test_plan_message_is_cleared_by_a_successful_unbind),
        cmocka_unit_test(test_plan_messages_are_independent_per_plan),
        cmocka_unit_test(test_plan_last_error_of_null_is_empty),
        cmocka_unit_test(test_plan_destroy_of_null_is_a_no_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
