/* test_validate.c — every way to call flashbwd wrongly, as a catalogue of named rows.
 *
 * Each bad-input row starts from a valid plan (or problem), changes one thing, and names the
 * status it must get and text the message must contain: the field and the value it saw.
 * The runner also checks what holds for every failure: the message starts with the status
 * name, a failed create leaves *out NULL, and a failure on a plan shows the same text in
 * flashbwd_plan_last_error() and flashbwd_last_error(). A second table lists boundary
 * values that must be accepted, so the checks are not simply stricter than the header.
 *
 * CUDA alignment rules are checked without a GPU on a planning-only plan (problem.arch).
 * Links libflashbwd.so, like any user.
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

#include "flashbwd.h"

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ======================================================================================
 * The valid starting points
 * ====================================================================================== */

enum base {
    BASE_PLANNING, /* CUDA backend planned for sm_90 (problem.arch): no GPU needed */
    BASE_CPU,      /* CPU backend, padded batch */
    BASE_VARLEN,   /* CPU backend, varlen: 2 sequences, total_q 20, total_k 30 */
};
static const char *const base_names[] = {"planning sm_90", "cpu", "cpu varlen"};

enum { B = 2, HQ = 4, HKV = 2, SQ = 16, SK = 24, D = 64, TOTAL_Q = 20, TOTAL_K = 30 };

static flashbwd_problem base_problem(int base)
{
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = base == BASE_PLANNING ? FLASHBWD_BACKEND_CUDA : FLASHBWD_BACKEND_CPU;
    p.arch = base == BASE_PLANNING ? 90 : 0;
    p.dtype = FLASHBWD_DTYPE_BF16;
    p.head_dim = D;
    p.batch = B, p.heads_q = HQ, p.heads_kv = HKV, p.seqlen_q = SQ, p.seqlen_k = SK;
    if (base == BASE_VARLEN) p.varlen = 1, p.total_q = TOTAL_Q, p.total_k = TOTAL_K;
    return p;
}

/* Host buffers, one per tensor id, 256-byte aligned and large enough for every base. */
#define BUF_BYTES (64 * 1024)
typedef struct arena {
    unsigned char *buf[FLASHBWD_TENSOR_COUNT];
    unsigned char *ws;
    size_t ws_bytes;
} arena;

static const int32_t default_cu_q[B + 1] = {0, 10, TOTAL_Q};
static const int32_t default_cu_k[B + 1] = {0, 15, TOTAL_K};

static void arena_init(arena *a, size_t ws_bytes)
{
    for (int id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        a->buf[id] = aligned_alloc(256, BUF_BYTES);
        assert_non_null(a->buf[id]);
        memset(a->buf[id], 0, BUF_BYTES);
    }
    memcpy(a->buf[FLASHBWD_TENSOR_CU_SEQLENS_Q], default_cu_q, sizeof default_cu_q);
    memcpy(a->buf[FLASHBWD_TENSOR_CU_SEQLENS_K], default_cu_k, sizeof default_cu_k);
    a->ws_bytes = ws_bytes;
    a->ws = aligned_alloc(256, (ws_bytes + 256) / 256 * 256);
    assert_non_null(a->ws);
}

static void arena_free(arena *a)
{
    for (int id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) free(a->buf[id]);
    free(a->ws);
}

/* Bind Q..dV packed (and cu_seqlens when varlen) to their own buffers, except `skip`. */
static void bind_all(flashbwd_plan *plan, const arena *a, int base, int32_t skip)
{
    const int32_t last = base == BASE_VARLEN ? FLASHBWD_TENSOR_CU_SEQLENS_K : FLASHBWD_TENSOR_DV;
    for (int32_t id = FLASHBWD_TENSOR_Q; id <= last; ++id) {
        if (id == skip) continue;
        const int32_t st = flashbwd_plan_set_tensor(plan, id, a->buf[id], NULL, 0);
        if (st != FLASHBWD_OK)
            fail_msg("binding tensor %d of base \"%s\" failed: %s", id, base_names[base],
                     flashbwd_plan_last_error(plan));
    }
}

/* ======================================================================================
 * The bad-input catalogue
 * ====================================================================================== */

/* One changed field of the problem. */
typedef struct patch {
    size_t offset, size; /* 0 size: end of the list */
    int is_float;
    int64_t i;
    double f;
} patch;

#define FIELD_SIZE(field) sizeof(((flashbwd_problem *)0)->field)
#define SET(field, v) {offsetof(flashbwd_problem, field), FIELD_SIZE(field), 0, (int64_t)(v), 0}
#define SETF(field, v) {offsetof(flashbwd_problem, field), FIELD_SIZE(field), 1, 0, (v)}

static void apply(flashbwd_problem *p, const patch *patches, size_t n)
{
    for (size_t k = 0; k < n && patches[k].size; ++k) {
        unsigned char *at = (unsigned char *)p + patches[k].offset;
        if (patches[k].is_float) {
            const float f = (float)patches[k].f;
            memcpy(at, &f, sizeof f);
        } else if (patches[k].size == 4) {
            const int32_t v = (int32_t)patches[k].i;
            memcpy(at, &v, sizeof v);
        } else {
            const int64_t v = patches[k].i;
            memcpy(at, &v, sizeof v);
        }
    }
}

/* One flashbwd_plan_set_tensor call. */
typedef struct tcall {
    int32_t id;             /* 0: no call */
    int32_t buf;            /* whose buffer ptr points into; 0: the tensor's own */
    size_t offset;          /* bytes past the buffer's start */
    const int64_t *strides; /* NULL: packed */
    int32_t n;              /* num_strides */
} tcall;

#define STRIDES(...) .strides = (const int64_t[]){__VA_ARGS__}, \
                     .n = (int32_t)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

/* Null-argument calls: each gets a valid plan to pass where the row does not pass NULL. */
static int32_t create_with_null_problem(flashbwd_plan *pl)
{
    (void)pl;
    flashbwd_plan *out = (flashbwd_plan *)&out;
    const int32_t st = flashbwd_plan_create(NULL, &out);
    assert_null(out);
    return st;
}
static int32_t create_with_null_out(flashbwd_plan *pl)
{
    (void)pl;
    const flashbwd_problem p = base_problem(BASE_CPU);
    return flashbwd_plan_create(&p, NULL);
}
static int32_t get_info_with_null_plan(flashbwd_plan *pl)
{
    (void)pl;
    flashbwd_plan_info info = {.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE};
    return flashbwd_plan_get_info(NULL, &info);
}
static int32_t get_info_with_null_info(flashbwd_plan *pl) { return flashbwd_plan_get_info(pl, NULL); }
static int32_t get_info_with_struct_size_8(flashbwd_plan *pl)
{
    flashbwd_plan_info info = {.struct_size = 8};
    return flashbwd_plan_get_info(pl, &info);
}
static int32_t get_info_with_struct_size_0(flashbwd_plan *pl)
{
    flashbwd_plan_info info = {.struct_size = 0};
    return flashbwd_plan_get_info(pl, &info);
}
static int32_t workspace_size_with_null_plan(flashbwd_plan *pl)
{
    (void)pl;
    size_t bytes;
    return flashbwd_plan_workspace_size(NULL, &bytes);
}
static int32_t workspace_size_with_null_bytes(flashbwd_plan *pl)
{
    return flashbwd_plan_workspace_size(pl, NULL);
}
static int32_t set_workspace_with_null_plan(flashbwd_plan *pl)
{
    (void)pl;
    static float ws[64];
    return flashbwd_plan_set_workspace(NULL, ws, sizeof ws);
}
static int32_t set_tensor_with_null_plan(flashbwd_plan *pl)
{
    (void)pl;
    static uint16_t q[64];
    return flashbwd_plan_set_tensor(NULL, FLASHBWD_TENSOR_Q, q, NULL, 0);
}
static int32_t execute_with_null_plan(flashbwd_plan *pl)
{
    (void)pl;
    return flashbwd_execute(NULL, NULL);
}

enum op { OP_CREATE, OP_SET_TENSOR, OP_SET_WORKSPACE, OP_EXECUTE, OP_CALL };

typedef struct bad_input {
    const char *name;
    int op, base;
    patch patch[3];          /* OP_CREATE: changes to the base problem */
    tcall pre[2], call;      /* OP_SET_TENSOR: bindings made first, then the call tested */
    size_t ws_offset;        /* OP_SET_WORKSPACE: ptr = workspace + ws_offset */
    int64_t ws_delta;        /*   bytes = the plan's size + ws_delta */
    int32_t skip;            /* OP_EXECUTE: a tensor left unbound (0: bind all) */
    int no_workspace;        /*   leave the workspace unset */
    const int32_t *cu_q, *cu_k, *used_k; /* varlen contents (NULL: defaults; used_k: unset) */
    int32_t (*fn)(flashbwd_plan *); /* OP_CALL */
    int32_t expect;
    const char *message;     /* the message must contain this ("%zu": the workspace size) */
    const char *also;        /* and this, if set */
} bad_input;

#define NULL_ARG FLASHBWD_ERR_NULL_ARGUMENT
#define STRUCT_SIZE FLASHBWD_ERR_STRUCT_SIZE
#define INVALID FLASHBWD_ERR_INVALID_VALUE
#define NOT_SUPPORTED FLASHBWD_ERR_NOT_SUPPORTED
#define OVERFLOW FLASHBWD_ERR_OVERFLOW
#define MISALIGNED FLASHBWD_ERR_MISALIGNED
#define OVERLAP FLASHBWD_ERR_OVERLAP
#define NOT_SET FLASHBWD_ERR_TENSOR_NOT_SET
#define WS_SMALL FLASHBWD_ERR_WORKSPACE_TOO_SMALL
#define LENGTHS FLASHBWD_ERR_INVALID_LENGTHS

#define T_Q FLASHBWD_TENSOR_Q
#define T_K FLASHBWD_TENSOR_K
#define T_V FLASHBWD_TENSOR_V
#define T_DO FLASHBWD_TENSOR_DO
#define T_LSE FLASHBWD_TENSOR_LSE
#define T_DQ FLASHBWD_TENSOR_DQ
#define T_DK FLASHBWD_TENSOR_DK
#define T_DV FLASHBWD_TENSOR_DV

#ifdef FB_WITH_CUDA
#define PLANNING_ONLY_MESSAGE "problem.arch = 90"
#else
#define PLANNING_ONLY_MESSAGE "built without CUDA"
#endif

static const int32_t cu_q_falling[] = {0, 12, 8};
static const int32_t cu_q_negative[] = {-1, 10, 20};
static const int32_t cu_q_too_long[] = {0, 2, 20};
static const int32_t cu_k_past_total[] = {0, 15, 31};
static const int32_t used_k_too_long[] = {15, 16};

static const bad_input bad_inputs[] = {
    /* --- The problem, field by field, in struct order --------------------------------- */
    {"struct_size 0", OP_CREATE, BASE_PLANNING, {SET(struct_size, 0)}, .expect = STRUCT_SIZE, .message = "problem.struct_size = 0"},
    {"struct_size older than 1.0", OP_CREATE, BASE_PLANNING, {SET(struct_size, 64)}, .expect = STRUCT_SIZE, .message = "problem.struct_size = 64"},
    {"struct_size absurd", OP_CREATE, BASE_PLANNING, {SET(struct_size, 1 << 20)}, .expect = STRUCT_SIZE, .message = "problem.struct_size = 1048576"},
    {"backend 3", OP_CREATE, BASE_PLANNING, {SET(backend, 3)}, .expect = INVALID, .message = "problem.backend = 3"},
    {"backend -1", OP_CREATE, BASE_PLANNING, {SET(backend, -1)}, .expect = INVALID, .message = "problem.backend = -1"},
    {"device -1", OP_CREATE, BASE_PLANNING, {SET(device, -1)}, .expect = INVALID, .message = "problem.device = -1"},
    {"dtype 3", OP_CREATE, BASE_PLANNING, {SET(dtype, 3)}, .expect = INVALID, .message = "problem.dtype = 3"},
    {"dtype -1", OP_CREATE, BASE_PLANNING, {SET(dtype, -1)}, .expect = INVALID, .message = "problem.dtype = -1"},
    {"head_dim 0 (required)", OP_CREATE, BASE_PLANNING, {SET(head_dim, 0)}, .expect = INVALID, .message = "problem.head_dim = 0"},
    {"head_dim 12 (not a multiple of 8)", OP_CREATE, BASE_PLANNING, {SET(head_dim, 12)}, .expect = INVALID, .message = "problem.head_dim = 12"},
    {"head_dim 264 (past 256)", OP_CREATE, BASE_PLANNING, {SET(head_dim, 264)}, .expect = INVALID, .message = "problem.head_dim = 264"},
    {"head_dim -64", OP_CREATE, BASE_PLANNING, {SET(head_dim, -64)}, .expect = INVALID, .message = "problem.head_dim = -64"},
    {"batch 0 (required)", OP_CREATE, BASE_PLANNING, {SET(batch, 0)}, .expect = INVALID, .message = "problem.batch = 0"},
    {"batch -2", OP_CREATE, BASE_PLANNING, {SET(batch, -2)}, .expect = INVALID, .message = "problem.batch = -2"},
    {"heads_q 0 (required)", OP_CREATE, BASE_PLANNING, {SET(heads_q, 0)}, .expect = INVALID, .message = "problem.heads_q = 0"},
    {"heads_q -4", OP_CREATE, BASE_PLANNING, {SET(heads_q, -4)}, .expect = INVALID, .message = "problem.heads_q = -4"},
    {"heads_kv -1", OP_CREATE, BASE_PLANNING, {SET(heads_kv, -1)}, .expect = INVALID, .message = "problem.heads_kv = -1"},
    {"heads_kv 3 does not divide heads_q 4", OP_CREATE, BASE_PLANNING, {SET(heads_kv, 3)}, .expect = INVALID, .message = "problem.heads_kv = 3 must divide problem.heads_q = 4"},
    {"heads_kv 8 above heads_q 4", OP_CREATE, BASE_PLANNING, {SET(heads_kv, 8)}, .expect = INVALID, .message = "problem.heads_kv = 8"},
    {"seqlen_q 0 (required)", OP_CREATE, BASE_PLANNING, {SET(seqlen_q, 0)}, .expect = INVALID, .message = "problem.seqlen_q = 0"},
    {"seqlen_k -1", OP_CREATE, BASE_PLANNING, {SET(seqlen_k, -1)}, .expect = INVALID, .message = "problem.seqlen_k = -1"},
    {"seqlen_q 2^31 past the 32-bit row limit", OP_CREATE, BASE_PLANNING, {SET(seqlen_q, 1LL << 31)}, .expect = OVERFLOW, .message = "problem.seqlen_q = 2147483648"},
    {"seqlen_k INT64_MAX", OP_CREATE, BASE_PLANNING, {SET(seqlen_k, INT64_MAX)}, .expect = OVERFLOW, .message = "problem.seqlen_k = 9223372036854775807"},
    {"batch * seqlen_q overflows", OP_CREATE, BASE_PLANNING, {SET(batch, 1LL << 40), SET(seqlen_q, 1LL << 30)}, .expect = OVERFLOW, .message = "problem.batch * seqlen_q overflows (1099511627776 * 1073741824)"},
    {"varlen batch * seqlen_k overflows", OP_CREATE, BASE_PLANNING, {SET(varlen, 1), SET(batch, 1LL << 40), SET(seqlen_k, 1LL << 30)}, .expect = OVERFLOW, .message = "problem.batch * seqlen_k overflows"},
    {"Q elements overflow 64 bits", OP_CREATE, BASE_PLANNING, {SET(batch, 1LL << 20), SET(seqlen_q, 1LL << 20), SET(heads_q, 1LL << 22)}, .expect = OVERFLOW, .message = "Q has too many elements to address: 1099511627776 rows x 4194304 heads"},
    {"varlen 2", OP_CREATE, BASE_PLANNING, {SET(varlen, 2)}, .expect = INVALID, .message = "problem.varlen = 2"},
    {"total_q without varlen", OP_CREATE, BASE_PLANNING, {SET(total_q, 40)}, .expect = INVALID, .message = "problem.total_q = 40 is set but problem.varlen = 0"},
    {"total_k without varlen", OP_CREATE, BASE_PLANNING, {SET(total_k, 40)}, .expect = INVALID, .message = "problem.total_k = 40 is set but problem.varlen = 0"},
    {"total_q -1 with varlen", OP_CREATE, BASE_PLANNING, {SET(varlen, 1), SET(total_q, -1)}, .expect = INVALID, .message = "problem.total_q = -1"},
    {"total_k -3 with varlen", OP_CREATE, BASE_PLANNING, {SET(varlen, 1), SET(total_k, -3)}, .expect = INVALID, .message = "problem.total_k = -3"},
    {"softmax_scale negative", OP_CREATE, BASE_PLANNING, {SETF(softmax_scale, -0.5)}, .expect = INVALID, .message = "problem.softmax_scale = -0.5"},
    {"softmax_scale NaN", OP_CREATE, BASE_PLANNING, {SETF(softmax_scale, NAN)}, .expect = INVALID, .message = "problem.softmax_scale = nan"},
    {"softmax_scale infinite", OP_CREATE, BASE_PLANNING, {SETF(softmax_scale, INFINITY)}, .expect = INVALID, .message = "problem.softmax_scale = inf"},
    {"softcap negative", OP_CREATE, BASE_PLANNING, {SETF(softcap, -1.0)}, .expect = INVALID, .message = "problem.softcap = -1"},
    {"softcap NaN", OP_CREATE, BASE_PLANNING, {SETF(softcap, NAN)}, .expect = INVALID, .message = "problem.softcap = nan"},
    {"causal 2", OP_CREATE, BASE_PLANNING, {SET(causal, 2)}, .expect = INVALID, .message = "problem.causal = 2"},
    {"causal -1", OP_CREATE, BASE_PLANNING, {SET(causal, -1)}, .expect = INVALID, .message = "problem.causal = -1"},
    {"use_window 3", OP_CREATE, BASE_PLANNING, {SET(use_window, 3)}, .expect = INVALID, .message = "problem.use_window = 3"},
    {"window_left without use_window", OP_CREATE, BASE_PLANNING, {SET(window_left, 5)}, .expect = INVALID, .message = "problem.window_left = 5, window_right = 0 are set but problem.use_window = 0"},
    {"window_right without use_window", OP_CREATE, BASE_PLANNING, {SET(window_right, 2)}, .expect = INVALID, .message = "window_right = 2 are set but problem.use_window = 0"},
    {"window_left -2", OP_CREATE, BASE_PLANNING, {SET(use_window, 1), SET(window_left, -2)}, .expect = INVALID, .message = "problem.window_left = -2"},
    {"window_right -9", OP_CREATE, BASE_PLANNING, {SET(use_window, 1), SET(window_right, -9)}, .expect = INVALID, .message = "problem.window_right = -9"},
    {"deterministic 2", OP_CREATE, BASE_PLANNING, {SET(deterministic, 2)}, .expect = INVALID, .message = "problem.deterministic = 2"},
    {"sm_count -1", OP_CREATE, BASE_PLANNING, {SET(sm_count, -1)}, .expect = INVALID, .message = "problem.sm_count = -1"},
    {"arch 75 (older than sm_80)", OP_CREATE, BASE_PLANNING, {SET(arch, 75)}, .expect = INVALID, .message = "problem.arch = 75"},
    {"arch 100 (unknown)", OP_CREATE, BASE_PLANNING, {SET(arch, 100)}, .expect = INVALID, .message = "problem.arch = 100"},
    {"arch with the CPU backend", OP_CREATE, BASE_PLANNING, {SET(backend, FLASHBWD_BACKEND_CPU)}, .expect = INVALID, .message = "problem.arch = 90 describes a CUDA device, but problem.backend is CPU"},
    {"smem_per_block -1", OP_CREATE, BASE_PLANNING, {SET(smem_per_block, -1)}, .expect = INVALID, .message = "problem.smem_per_block = -1"},
    {"smem_per_block without arch", OP_CREATE, BASE_PLANNING, {SET(arch, 0), SET(smem_per_block, 65536)}, .expect = INVALID, .message = "problem.smem_per_block = 65536 is set but problem.arch = 0"},
    {"reserved0 1", OP_CREATE, BASE_PLANNING, {SET(reserved0, 1)}, .expect = INVALID, .message = "problem.reserved0 = 1"},
    {"heads_q 65536 past the CUDA grid", OP_CREATE, BASE_PLANNING, {SET(heads_q, 65536)}, .expect = NOT_SUPPORTED, .message = "problem.heads_q = 65536"},
    {"batch 65536 past the CUDA grid", OP_CREATE, BASE_PLANNING, {SET(batch, 65536)}, .expect = NOT_SUPPORTED, .message = "problem.batch = 65536"},

    /* --- flashbwd_plan_set_tensor ------------------------------------------------------- */
    {"tensor id 0", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = 0, .buf = T_Q}, .expect = INVALID, .message = "tensor id 0 is not a FLASHBWD_TENSOR_* id"},
    {"tensor id FLASHBWD_TENSOR_COUNT", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = FLASHBWD_TENSOR_COUNT, .buf = T_Q}, .expect = INVALID, .message = "tensor id 15 is not a FLASHBWD_TENSOR_* id"},
    {"tensor id -7", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = -7, .buf = T_Q}, .expect = INVALID, .message = "tensor id -7"},
    {"cu_seqlens_q on a padded plan", OP_SET_TENSOR, BASE_CPU, .call = {.id = FLASHBWD_TENSOR_CU_SEQLENS_Q}, .expect = INVALID, .message = "tensor cu_seqlens_q is only for varlen plans"},
    {"seqused_k on a padded plan", OP_SET_TENSOR, BASE_CPU, .call = {.id = FLASHBWD_TENSOR_SEQUSED_K}, .expect = INVALID, .message = "tensor seqused_k is only for varlen plans"},
    {"Q rank 3 on a padded plan", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = T_Q, STRIDES(SQ * HQ * D, D, 1)}, .expect = INVALID, .message = "tensor Q: num_strides = 3; this plan's Q has rank 4"},
    {"LSE rank 4", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_LSE, STRIDES(HQ * SQ, SQ, 1, 1)}, .expect = INVALID, .message = "tensor LSE: num_strides = 4; this plan's LSE has rank 3"},
    {"Q rank 4 on a varlen plan", OP_SET_TENSOR, BASE_VARLEN, .call = {.id = T_Q, STRIDES(SQ * HQ * D, HQ * D, D, 1)}, .expect = INVALID, .message = "tensor Q: num_strides = 4; this plan's Q has rank 3"},
    {"cu_seqlens_k rank 2", OP_SET_TENSOR, BASE_VARLEN, .call = {.id = FLASHBWD_TENSOR_CU_SEQLENS_K, STRIDES(1, 1)}, .expect = INVALID, .message = "tensor cu_seqlens_k: num_strides = 2"},
    {"alibi_slopes rank 3", OP_SET_TENSOR, BASE_CPU, .call = {.id = FLASHBWD_TENSOR_ALIBI_SLOPES, STRIDES(HQ, 1, 1)}, .expect = INVALID, .message = "tensor alibi_slopes: num_strides = 3"},
    {"K last stride 2", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_K, STRIDES(SK * HKV * D * 2, HKV * D * 2, D * 2, 2)}, .expect = INVALID, .message = "tensor K: strides[3] = 2; the last dimension must be contiguous"},
    {"cu_seqlens_k stride 3", OP_SET_TENSOR, BASE_VARLEN, .call = {.id = FLASHBWD_TENSOR_CU_SEQLENS_K, STRIDES(3)}, .expect = INVALID, .message = "tensor cu_seqlens_k: strides[0] = 3"},
    {"V negative row stride", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_V, STRIDES(SK * HKV * D, -128, D, 1)}, .expect = INVALID, .message = "tensor V: strides[1] = -128; strides must be >= 0"},
    {"LSE negative batch stride", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_LSE, STRIDES(-64, SQ, 1)}, .expect = INVALID, .message = "tensor LSE: strides[0] = -64"},
    {"dQ batch stride 0 writes twice", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_DQ, STRIDES(0, HQ * D, D, 1)}, .expect = OVERLAP, .message = "tensor dQ: strides[0] = 0 would write every element of dimension 0"},
    {"dV head stride 0 writes twice", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_DV, STRIDES(SK * HKV * D, HKV * D, 0, 1)}, .expect = OVERLAP, .message = "tensor dV: strides[2] = 0"},
    {"Q row stride overflows offsets", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_Q, STRIDES(SQ * HQ * D, INT64_MAX / 4, D, 1)}, .expect = OVERFLOW, .message = "tensor Q: strides[1] = 2305843009213693951 makes offsets overflow"},
    {"Q batch stride spans too much", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_Q, STRIDES(INT64_MAX / 2, HQ * D, D, 1)}, .expect = OVERFLOW, .message = "tensor Q spans"},
    {"CUDA Q pointer off by 2 bytes", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = T_Q, .offset = 2}, .expect = MISALIGNED, .message = "tensor Q: pointer", .also = "is not 16-byte aligned"},
    {"CUDA dO pointer off by 8 bytes", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = T_DO, .offset = 8}, .expect = MISALIGNED, .message = "tensor dO: pointer", .also = "is not 16-byte aligned"},
    {"CUDA dK pointer off by 1 byte", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = T_DK, .offset = 1}, .expect = MISALIGNED, .message = "tensor dK: pointer", .also = "is not 16-byte aligned"},
    {"CUDA K head stride 68", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = T_K, STRIDES(SK * HKV * 72, HKV * 72, 68, 1)}, .expect = MISALIGNED, .message = "tensor K: strides[2] = 68; CUDA needs strides that are multiples of 8"},
    {"CUDA V row stride 132", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = T_V, STRIDES(SK * 136, 132, D, 1)}, .expect = MISALIGNED, .message = "tensor V: strides[1] = 132"},
    {"CUDA LSE pointer off by 2 bytes", OP_SET_TENSOR, BASE_PLANNING, .call = {.id = T_LSE, .offset = 2}, .expect = MISALIGNED, .message = "tensor LSE: pointer", .also = "is not 4-byte aligned"},
    {"CPU dK pointer off by 1 byte", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_DK, .offset = 1}, .expect = MISALIGNED, .message = "tensor dK: pointer", .also = "is not 2-byte aligned"},
    {"CPU LSE pointer off by 2 bytes", OP_SET_TENSOR, BASE_CPU, .call = {.id = T_LSE, .offset = 2}, .expect = MISALIGNED, .message = "tensor LSE: pointer", .also = "is not 4-byte aligned"},
    {"CPU cu_seqlens_q pointer off by 2 bytes", OP_SET_TENSOR, BASE_VARLEN, .call = {.id = FLASHBWD_TENSOR_CU_SEQLENS_Q, .offset = 2}, .expect = MISALIGNED, .message = "tensor cu_seqlens_q: pointer", .also = "is not 4-byte aligned"},
    {"dK on top of dQ", OP_SET_TENSOR, BASE_CPU, .pre = {{.id = T_DQ}}, .call = {.id = T_DK, .buf = T_DQ}, .expect = OVERLAP, .message = "tensor dK overlaps tensor dQ"},
    {"dQ on top of Q", OP_SET_TENSOR, BASE_PLANNING, .pre = {{.id = T_Q}}, .call = {.id = T_DQ, .buf = T_Q}, .expect = OVERLAP, .message = "tensor dQ overlaps tensor Q, and dQ is an output"},
    {"V (input) on top of dV (output)", OP_SET_TENSOR, BASE_CPU, .pre = {{.id = T_DV}}, .call = {.id = T_V, .buf = T_DV}, .expect = OVERLAP, .message = "tensor V overlaps tensor dV, and dV is an output"},
    {"dQ on top of fp32 LSE", OP_SET_TENSOR, BASE_CPU, .pre = {{.id = T_LSE}}, .call = {.id = T_DQ, .buf = T_LSE, .offset = 64}, .expect = OVERLAP, .message = "tensor dQ overlaps tensor LSE"},
    {"dV 32 elements into dK", OP_SET_TENSOR, BASE_CPU, .pre = {{.id = T_DK}}, .call = {.id = T_DV, .buf = T_DK, .offset = 64}, .expect = OVERLAP, .message = "tensor dV overlaps tensor dK"},

    /* --- flashbwd_plan_set_workspace ---------------------------------------------------- */
    {"CUDA workspace off by 16 bytes", OP_SET_WORKSPACE, BASE_PLANNING, .ws_offset = 16, .expect = MISALIGNED, .message = "workspace pointer", .also = "is not 256-byte aligned"},
    {"CUDA workspace one byte short", OP_SET_WORKSPACE, BASE_PLANNING, .ws_delta = -1, .expect = WS_SMALL, .message = "is smaller than the %zu this plan needs"},
    {"CPU workspace off by 2 bytes", OP_SET_WORKSPACE, BASE_CPU, .ws_offset = 2, .expect = MISALIGNED, .message = "workspace pointer", .also = "is not 4-byte aligned"},
    {"CPU workspace of 0 bytes", OP_SET_WORKSPACE, BASE_CPU, .ws_delta = INT64_MIN, .expect = WS_SMALL, .message = "workspace of 0 bytes is smaller than the %zu this plan needs"},

    /* --- flashbwd_execute ----------------------------------------------------------------- */
    {"execute with nothing bound", OP_EXECUTE, BASE_CPU, .skip = -1, .expect = NOT_SET, .message = "tensor Q (FLASHBWD_TENSOR id 1) is not set"},
    {"execute without LSE", OP_EXECUTE, BASE_CPU, .skip = T_LSE, .expect = NOT_SET, .message = "tensor LSE (FLASHBWD_TENSOR id 6) is not set"},
    {"execute without dV", OP_EXECUTE, BASE_CPU, .skip = T_DV, .expect = NOT_SET, .message = "tensor dV (FLASHBWD_TENSOR id 9) is not set"},
    {"varlen execute without cu_seqlens_k", OP_EXECUTE, BASE_VARLEN, .skip = FLASHBWD_TENSOR_CU_SEQLENS_K, .expect = NOT_SET, .message = "tensor cu_seqlens_k (FLASHBWD_TENSOR id 11) is not set"},
    {"execute without a workspace", OP_EXECUTE, BASE_CPU, .no_workspace = 1, .expect = WS_SMALL, .message = "no workspace is set; this plan needs %zu bytes"},
    {"execute a planning-only plan", OP_EXECUTE, BASE_PLANNING, .expect = NOT_SUPPORTED, .message = PLANNING_ONLY_MESSAGE},
    {"cu_seqlens_q falls", OP_EXECUTE, BASE_VARLEN, .cu_q = cu_q_falling, .expect = LENGTHS, .message = "cu_seqlens_q[1] = 12, cu_seqlens_q[2] = 8"},
    {"cu_seqlens_q starts below 0", OP_EXECUTE, BASE_VARLEN, .cu_q = cu_q_negative, .expect = LENGTHS, .message = "cu_seqlens_q[0] = -1"},
    {"cu_seqlens_k ends past total_k", OP_EXECUTE, BASE_VARLEN, .cu_k = cu_k_past_total, .expect = LENGTHS, .message = "cu_seqlens_k[2] = 31", .also = "total_k = 30"},
    {"sequence longer than seqlen_q", OP_EXECUTE, BASE_VARLEN, .cu_q = cu_q_too_long, .expect = LENGTHS, .message = "sequence 1 has q length 18, longer than the plan's seqlen_q = 16"},
    {"seqused_k longer than its sequence", OP_EXECUTE, BASE_VARLEN, .used_k = used_k_too_long, .expect = LENGTHS, .message = "seqused_k[1] = 16; expected 0..15"},

    /* --- NULL arguments, everywhere ------------------------------------------------------- */
    {"create with NULL problem", OP_CALL, BASE_CPU, .fn = create_with_null_problem, .expect = NULL_ARG, .message = "problem is NULL"},
    {"create with NULL out", OP_CALL, BASE_CPU, .fn = create_with_null_out, .expect = NULL_ARG, .message = "out (the plan pointer) is NULL"},
    {"get_info with NULL plan", OP_CALL, BASE_CPU, .fn = get_info_with_null_plan, .expect = NULL_ARG, .message = "plan is NULL"},
    {"get_info with NULL info", OP_CALL, BASE_CPU, .fn = get_info_with_null_info, .expect = NULL_ARG, .message = "info is NULL"},
    {"get_info with info.struct_size 8", OP_CALL, BASE_CPU, .fn = get_info_with_struct_size_8, .expect = STRUCT_SIZE, .message = "info.struct_size = 8"},
    {"get_info with info.struct_size 0", OP_CALL, BASE_CPU, .fn = get_info_with_struct_size_0, .expect = STRUCT_SIZE, .message = "info.struct_size = 0"},
    {"workspace_size with NULL plan", OP_CALL, BASE_CPU, .fn = workspace_size_with_null_plan, .expect = NULL_ARG, .message = "plan is NULL"},
    {"workspace_size with NULL bytes", OP_CALL, BASE_CPU, .fn = workspace_size_with_null_bytes, .expect = NULL_ARG, .message = "bytes is NULL"},
    {"set_workspace with NULL plan", OP_CALL, BASE_CPU, .fn = set_workspace_with_null_plan, .expect = NULL_ARG, .message = "plan is NULL"},
    {"set_tensor with NULL plan", OP_CALL, BASE_CPU, .fn = set_tensor_with_null_plan, .expect = NULL_ARG, .message = "plan is NULL"},
    {"execute with NULL plan", OP_CALL, BASE_CPU, .fn = execute_with_null_plan, .expect = NULL_ARG, .message = "plan is NULL"},
};

static void expect_message(const bad_input *r, const char *msg, size_t ws_bytes)
{
    char want[256];
    if (strstr(r->message, "%zu"))
        snprintf(want, sizeof want, r->message, ws_bytes);
    else
        snprintf(want, sizeof want, "%s", r->message);
    if (!strstr(msg, want))
        fail_msg("row \"%s\": message \"%s\" does not contain \"%s\"", r->name, msg, want);
    if (r->also && !strstr(msg, r->also))
        fail_msg("row \"%s\": message \"%s\" does not contain \"%s\"", r->name, msg, r->also);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: ", flashbwd_status_name(r->expect));
    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        fail_msg("row \"%s\": message \"%s\" does not start with \"%s\"", r->name, msg, prefix);
}

static void expect_status(const bad_input *r, int32_t got, const char *msg)
{
    if (got != r->expect)
        fail_msg("row \"%s\" (%s): status %s; expected %s; message \"%s\"", r->name,
                 base_names[r->base], flashbwd_status_name(got), flashbwd_status_name(r->expect),
                 msg);
}

/* Run one row; fail naming it. */
static void run_bad_input(const bad_input *r)
{
    flashbwd_problem p = base_problem(r->base);
    if (r->op == OP_CREATE) {
        apply(&p, r->patch, COUNT_OF(r->patch));
        flashbwd_plan *plan = (flashbwd_plan *)&p; /* must come back NULL */
        const int32_t st = flashbwd_plan_create(&p, &plan);
        expect_status(r, st, flashbwd_last_error());
        if (plan != NULL) fail_msg("row \"%s\": a failed create left *out non-NULL", r->name);
        expect_message(r, flashbwd_last_error(), 0);
        return;
    }

    flashbwd_plan *plan = NULL;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK)
        fail_msg("row \"%s\": base \"%s\" does not plan: %s", r->name, base_names[r->base],
                 flashbwd_last_error());
    size_t ws_bytes = 0;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &ws_bytes), FLASHBWD_OK);
    arena a;
    arena_init(&a, ws_bytes);
    int32_t st = FLASHBWD_OK;
    int on_plan = 1; /* the failure is recorded on the plan as well as the thread */

    switch (r->op) {
    case OP_SET_TENSOR:
        for (size_t k = 0; k < COUNT_OF(r->pre) && r->pre[k].id; ++k)
            assert_int_equal(flashbwd_plan_set_tensor(plan, r->pre[k].id, a.buf[r->pre[k].id],
                                                      NULL, 0),
                             FLASHBWD_OK);
        {
            const tcall *c = &r->call;
            unsigned char *ptr = a.buf[c->buf ? c->buf : c->id] + c->offset;
            st = flashbwd_plan_set_tensor(plan, c->id, ptr, c->strides, c->n);
        }
        break;
    case OP_SET_WORKSPACE: {
        const size_t bytes = r->ws_delta == INT64_MIN ? 0 : (size_t)((int64_t)ws_bytes + r->ws_delta);
        st = flashbwd_plan_set_workspace(plan, a.ws + r->ws_offset, bytes);
        break;
    }
    case OP_EXECUTE:
        if (r->cu_q) memcpy(a.buf[FLASHBWD_TENSOR_CU_SEQLENS_Q], r->cu_q, (B + 1) * sizeof(int32_t));
        if (r->cu_k) memcpy(a.buf[FLASHBWD_TENSOR_CU_SEQLENS_K], r->cu_k, (B + 1) * sizeof(int32_t));
        if (r->skip != -1) bind_all(plan, &a, r->base, r->skip);
        if (r->used_k) {
            memcpy(a.buf[FLASHBWD_TENSOR_SEQUSED_K], r->used_k, B * sizeof(int32_t));
            assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_SEQUSED_K,
                                                      a.buf[FLASHBWD_TENSOR_SEQUSED_K], NULL, 0),
                             FLASHBWD_OK);
        }
        if (!r->no_workspace)
            assert_int_equal(flashbwd_plan_set_workspace(plan, a.ws, ws_bytes), FLASHBWD_OK);
        st = flashbwd_execute(plan, NULL);
        break;
    case OP_CALL:
        st = r->fn(plan);
        on_plan = 0;
        break;
    default:
        fail_msg("row \"%s\": unknown op %d", r->name, r->op);
    }

    const char *msg = on_plan ? flashbwd_plan_last_error(plan) : flashbwd_last_error();
    expect_status(r, st, msg);
    expect_message(r, msg, ws_bytes);
    if (on_plan && strcmp(msg, flashbwd_last_error()) != 0)
        fail_msg("row \"%s\": plan message \"%s\" differs from the thread's \"%s\"", r->name, msg,
                 flashbwd_last_error());
    arena_free(&a);
    flashbwd_plan_destroy(plan);
}

/* One test per row, named after it (main() builds the list). */
static void test_bad_input_gets_its_status_and_message(void **state)
{
    run_bad_input(*state);
}

/* The catalogue means something only if each base is valid as it stands: it plans, every
 * tensor binds, and (CPU) it executes. */
static void test_catalogue_bases_plan_bind_and_execute(void **state)
{
    (void)state;
    for (int base = BASE_PLANNING; base <= BASE_VARLEN; ++base) {
        flashbwd_problem p = base_problem(base);
        flashbwd_plan *plan = NULL;
        if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK)
            fail_msg("base \"%s\": %s", base_names[base], flashbwd_last_error());
        size_t ws_bytes = 0;
        assert_int_equal(flashbwd_plan_workspace_size(plan, &ws_bytes), FLASHBWD_OK);
        arena a;
        arena_init(&a, ws_bytes);
        bind_all(plan, &a, base, 0);
        assert_int_equal(flashbwd_plan_set_workspace(plan, a.ws, ws_bytes), FLASHBWD_OK);
        if (base != BASE_PLANNING) {
            const int32_t st = flashbwd_execute(plan, NULL);
            if (st != FLASHBWD_OK)
                fail_msg("base \"%s\": execute: %s", base_names[base],
                         flashbwd_plan_last_error(plan));
        }
        arena_free(&a);
        flashbwd_plan_destroy(plan);
    }
}

/* ======================================================================================
 * Boundary values that must be accepted
 * ====================================================================================== */

typedef struct edge {
    const char *name;
    int base;
    patch patch[3];
} edge;

static const edge edges[] = {
    {"head_dim 8, the smallest", BASE_CPU, {SET(head_dim, 8)}},
    {"head_dim 256, the largest", BASE_CPU, {SET(head_dim, 256)}},
    {"heads_kv 0 means heads_q", BASE_PLANNING, {SET(heads_kv, 0)}},
    {"heads_kv 1 (MQA)", BASE_PLANNING, {SET(heads_kv, 1)}},
    {"seqlen_q at the 32-bit row limit", BASE_CPU, {SET(seqlen_q, 2147483647LL - 65536)}},
    {"seqlen 1", BASE_PLANNING, {SET(seqlen_q, 1), SET(seqlen_k, 1)}},
    {"window -1, -1 (unbounded both sides)", BASE_PLANNING, {SET(use_window, 1), SET(window_left, -1), SET(window_right, -1)}},
    {"window 0, 0 (the diagonal only)", BASE_CPU, {SET(use_window, 1)}},
    {"causal with a window", BASE_PLANNING, {SET(causal, 1), SET(use_window, 1), SET(window_left, 3)}},
    {"softmax_scale tiny", BASE_CPU, {SETF(softmax_scale, 1e-30)}},
    {"softcap 50", BASE_PLANNING, {SETF(softcap, 50.0)}},
    {"fp16", BASE_PLANNING, {SET(dtype, FLASHBWD_DTYPE_FP16)}},
    {"device 7 is ignored by the CPU backend", BASE_CPU, {SET(device, 7)}},
    {"deterministic on the CPU backend", BASE_CPU, {SET(deterministic, 1)}},
    {"sm_count 1", BASE_PLANNING, {SET(sm_count, 1)}},
    {"arch 80", BASE_PLANNING, {SET(arch, 80)}},
    {"arch 87", BASE_PLANNING, {SET(arch, 87)}},
    {"heads_q 65535, the CUDA grid limit", BASE_PLANNING, {SET(heads_q, 65535), SET(heads_kv, 0)}},
    {"batch 65535, the CUDA grid limit", BASE_PLANNING, {SET(batch, 65535)}},
    {"varlen with default totals", BASE_PLANNING, {SET(varlen, 1)}},
};

static void test_boundary_value_is_accepted(void **state)
{
    const edge *e = *state;
    flashbwd_problem p = base_problem(e->base);
    apply(&p, e->patch, COUNT_OF(e->patch));
    flashbwd_plan *plan = NULL;
    const int32_t st = flashbwd_plan_create(&p, &plan);
    if (st != FLASHBWD_OK)
        fail_msg("row \"%s\": status %s: %s", e->name, flashbwd_status_name(st),
                 flashbwd_last_error());
    assert_non_null(plan);
    flashbwd_plan_destroy(plan);
}

/* ======================================================================================
 * Checks that are not one row
 * ====================================================================================== */

/* K and V packed in one (b, s, 2, h, d) buffer, and dK, dV likewise: disjoint elements
 * interleaved in one span. The overlap check must see that they never share an element. */
static void test_set_tensor_interleaved_dk_dv_in_one_buffer_do_not_overlap(void **state)
{
    (void)state;
    flashbwd_problem p = base_problem(BASE_PLANNING);
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    const size_t elems = (size_t)B * SK * 2 * HKV * D;
    uint16_t *kv = aligned_alloc(256, elems * 2), *dkv = aligned_alloc(256, elems * 2);
    assert_non_null(kv);
    assert_non_null(dkv);
    const int64_t s[4] = {SK * 2 * HKV * D, 2 * HKV * D, D, 1};
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_K, kv, s, 4), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_V, kv + HKV * D, s, 4), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_DK, dkv, s, 4), FLASHBWD_OK);
    const int32_t st = flashbwd_plan_set_tensor(plan, T_DV, dkv + HKV * D, s, 4);
    if (st != FLASHBWD_OK) fail_msg("dV beside dK: %s", flashbwd_plan_last_error(plan));
    /* One head further, dV would share dK's second head: that is an overlap. */
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_DV, dkv + D, s, 4), FLASHBWD_ERR_OVERLAP);
    free(kv);
    free(dkv);
    flashbwd_plan_destroy(plan);
}

/* Inputs may alias each other (K and V in one buffer is common); only outputs may not. */
static void test_set_tensor_inputs_may_alias_each_other(void **state)
{
    (void)state;
    flashbwd_problem p = base_problem(BASE_CPU);
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    arena a;
    arena_init(&a, 0);
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_Q, a.buf[T_Q], NULL, 0), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_O, a.buf[T_Q], NULL, 0),
                     FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_K, a.buf[T_V], NULL, 0), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_V, a.buf[T_V], NULL, 0), FLASHBWD_OK);
    arena_free(&a);
    flashbwd_plan_destroy(plan);
}

/* A rejected binding leaves the earlier binding of that id in place, and unbinding an
 * output makes room for another tensor there. */
static void test_set_tensor_rejected_overlap_keeps_the_old_binding(void **state)
{
    (void)state;
    flashbwd_problem p = base_problem(BASE_CPU);
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    size_t ws_bytes = 0;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &ws_bytes), FLASHBWD_OK);
    arena a;
    arena_init(&a, ws_bytes);
    bind_all(plan, &a, BASE_CPU, 0);
    assert_int_equal(flashbwd_plan_set_workspace(plan, a.ws, ws_bytes), FLASHBWD_OK);
    /* dK over dQ is refused; dK stays where it was, so execute still runs. */
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_DK, a.buf[T_DQ], NULL, 0), FLASHBWD_ERR_OVERLAP);
    assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_OK);
    /* After unbinding dQ, dK may take its buffer; execute then lacks dQ. */
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_DQ, NULL, NULL, 0), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, T_DK, a.buf[T_DQ], NULL, 0), FLASHBWD_OK);
    assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_ERR_TENSOR_NOT_SET);
    assert_non_null(strstr(flashbwd_plan_last_error(plan), "tensor dQ"));
    arena_free(&a);
    flashbwd_plan_destroy(plan);
}

static void test_set_workspace_null_unbinds_and_exact_size_is_accepted(void **state)
{
    (void)state;
    flashbwd_problem p = base_problem(BASE_PLANNING);
    flashbwd_plan *plan = NULL;
    assert_int_equal(flashbwd_plan_create(&p, &plan), FLASHBWD_OK);
    size_t ws_bytes = 0;
    assert_int_equal(flashbwd_plan_workspace_size(plan, &ws_bytes), FLASHBWD_OK);
    assert_true(ws_bytes > 0);
    arena a;
    arena_init(&a, ws_bytes);
    assert_int_equal(flashbwd_plan_set_workspace(plan, a.ws, ws_bytes), FLASHBWD_OK);
    assert_string_equal(flashbwd_plan_last_error(plan), "");
    assert_int_equal(flashbwd_plan_set_workspace(plan, NULL, 0), FLASHBWD_OK);
    /* With no workspace bound, execute reports it before anything else it cannot do. */
    bind_all(plan, &a, BASE_PLANNING, 0);
    assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_ERR_WORKSPACE_TOO_SMALL);
    arena_free(&a);
    flashbwd_plan_destroy(plan);
}

/* A catalogue row as a cmocka test named "<test> [<row>]". */
static void add_row_test(struct CMUnitTest *t, char *name, size_t name_bytes,
                         CMUnitTestFunction fn, const char *fn_name, const char *row,
                         const void *state)
{
    snprintf(name, name_bytes, "%s [%s]", fn_name, row);
    t->name = name;
    t->test_func = fn;
    t->setup_func = NULL;
    t->teardown_func = NULL;
    t->initial_state = (void *)state;
}

int main(void)
{
    const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_catalogue_bases_plan_bind_and_execute),
        cmocka_unit_test(test_set_tensor_interleaved_dk_dv_in_one_buffer_do_not_overlap),
        cmocka_unit_test(test_set_tensor_inputs_may_alias_each_other),
        cmocka_unit_test(test_set_tensor_rejected_overlap_keeps_the_old_binding),
        cmocka_unit_test(test_set_workspace_null_unbinds_and_exact_size_is_accepted),
    };
    enum { NAME_BYTES = 160 };
    const size_t n = COUNT_OF(fixed) + COUNT_OF(bad_inputs) + COUNT_OF(edges);
    struct CMUnitTest *tests = calloc(n, sizeof *tests);
    char *names = calloc(n, NAME_BYTES);
    if (!tests || !names) return 1;
    size_t k = 0;
    for (size_t i = 0; i < COUNT_OF(fixed); ++i) tests[k++] = fixed[i];
    for (size_t i = 0; i < COUNT_OF(bad_inputs); ++i, ++k)
        add_row_test(&tests[k], names + k * NAME_BYTES, NAME_BYTES,
                     test_bad_input_gets_its_status_and_message,
                     "test_bad_input_gets_its_status_and_message", bad_inputs[i].name,
                     &bad_inputs[i]);
    for (size_t i = 0; i < COUNT_OF(edges); ++i, ++k)
        add_row_test(&tests[k], names + k * NAME_BYTES, NAME_BYTES,
                     test_boundary_value_is_accepted, "test_boundary_value_is_accepted",
                     edges[i].name, &edges[i]);
    const int failed = _cmocka_run_group_tests("test_validate", tests, n, NULL, NULL);
    free(names);
    free(tests);
    return failed;
}
