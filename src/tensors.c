/* tensors.c — flashbwd_plan_set_tensor(): bind a tensor after checking what can be checked
 * on the host: id, rank, strides, extents that fit 64-bit offsets, alignment, and outputs
 * that overlap other tensors.
 */
#include <string.h>

#include "internal.h"

enum { MAX_RANK = 4 };

const char *fb_tensor_name(int32_t id)
{
    static const char *names[FLASHBWD_TENSOR_COUNT] = {
        "?", "Q", "K", "V", "O", "dO", "LSE", "dQ", "dK", "dV",
        "cu_seqlens_q", "cu_seqlens_k", "seqused_q", "seqused_k", "alibi_slopes"};
    return id > 0 && id < FLASHBWD_TENSOR_COUNT ? names[id] : "?";
}

static int is_output(int32_t id)
{
    return id == FLASHBWD_TENSOR_DQ || id == FLASHBWD_TENSOR_DK || id == FLASHBWD_TENSOR_DV;
}

static int is_half(int32_t id) { return id >= FLASHBWD_TENSOR_Q && id <= FLASHBWD_TENSOR_DV &&
                                        id != FLASHBWD_TENSOR_LSE; }

size_t fb_tensor_elem_bytes(int32_t id) { return is_half(id) ? 2 : 4; }

int fb_tensor_required(const flashbwd_plan *plan, int32_t id)
{
    if (id >= FLASHBWD_TENSOR_Q && id <= FLASHBWD_TENSOR_DV) return 1;
    if (id == FLASHBWD_TENSOR_CU_SEQLENS_Q || id == FLASHBWD_TENSOR_CU_SEQLENS_K)
        return plan->prob.varlen;
    return 0;
}

/* Extents of tensor id (outermost first); returns the rank. ALiBi slopes report the
 * (batch, heads) form; the (heads) form is its last dimension. */
static int extents(const flashbwd_plan *plan, int32_t id, int64_t ext[MAX_RANK])
{
    const fb_problem_norm *p = &plan->prob;
    const int qside = id == FLASHBWD_TENSOR_Q || id == FLASHBWD_TENSOR_O ||
                      id == FLASHBWD_TENSOR_DO || id == FLASHBWD_TENSOR_DQ;
    if (is_half(id)) {
        const int64_t heads = qside ? p->heads_q : p->heads_kv;
        if (p->varlen) {
            ext[0] = qside ? p->total_q : p->total_k, ext[1] = heads, ext[2] = p->head_dim;
            return 3;
        }
        ext[0] = p->batch, ext[1] = qside ? p->seqlen_q : p->seqlen_k;
        ext[2] = heads, ext[3] = p->head_dim;
        return 4;
    }
    switch (id) {
    case FLASHBWD_TENSOR_LSE:
        if (p->varlen) {
            ext[0] = p->heads_q, ext[1] = p->total_q;
            return 2;
        }
        ext[0] = p->batch, ext[1] = p->heads_q, ext[2] = p->seqlen_q;
        return 3;
    case FLASHBWD_TENSOR_CU_SEQLENS_Q:
    case FLASHBWD_TENSOR_CU_SEQLENS_K: ext[0] = p->batch + 1; return 1;
    case FLASHBWD_TENSOR_SEQUSED_Q:
    case FLASHBWD_TENSOR_SEQUSED_K: ext[0] = p->batch; return 1;
    case FLASHBWD_TENSOR_ALIBI_SLOPES: ext[0] = p->batch, ext[1] = p->heads_q; return 2;
    default: return 0;
    }
}

/* Byte span [lo, hi) that a bound tensor may touch. */
static void span(const flashbwd_plan *plan, int32_t id, uintptr_t *lo, uintptr_t *hi)
{
    const fb_tensor *t = &plan->tensors[id];
    int64_t ext[MAX_RANK], last = 0;
    int rank = extents(plan, id, ext);
    const int off = rank - t->rank; /* ALiBi (heads) form: skip the batch extent */
    for (int i = 0; i < t->rank; ++i) last += (ext[i + off] - 1) * t->stride[i];
    *lo = (uintptr_t)t->ptr;
    *hi = *lo + (uintptr_t)(last + 1) * fb_tensor_elem_bytes(id);
}

/* Whether two bound tensors with disjoint-looking layouts can share an element. Exact for
 * tensors with the same element size and strides (packed dq/dk/dv in one buffer, say) when
 * every stride exceeds what the smaller ones can reach: element x of a meets element y of b
 * iff the pointer difference is sum(d_i * stride_i) with d = x - y, so d_i lies in
 * [-(extent_b_i - 1), extent_a_i - 1] (a and b may have different extents: dQ and dV).
 * Otherwise overlapping byte spans count as overlap. */
static int may_share(const flashbwd_plan *plan, int32_t a, int32_t b)
{
    uintptr_t alo, ahi, blo, bhi;
    span(plan, a, &alo, &ahi);
    span(plan, b, &blo, &bhi);
    if (ahi <= blo || bhi <= alo) return 0;
    const fb_tensor *ta = &plan->tensors[a], *tb = &plan->tensors[b];
    const size_t esz = fb_tensor_elem_bytes(a);
    if (esz != fb_tensor_elem_bytes(b) || ta->rank != tb->rank ||
        memcmp(ta->stride, tb->stride, sizeof ta->stride) != 0)
        return 1;
    intptr_t bytes = (intptr_t)(blo - alo);
    if (bytes % (intptr_t)esz) return 0; /* never element-aligned to each other */
    int64_t delta = (int64_t)(bytes / (intptr_t)esz);
    int64_t ext_a[MAX_RANK], ext_b[MAX_RANK], lo[MAX_RANK], hi[MAX_RANK];
    const int off_a = extents(plan, a, ext_a) - ta->rank, off_b = extents(plan, b, ext_b) - tb->rank;
    for (int i = 0; i < ta->rank; ++i) lo[i] = 1 - ext_b[i + off_b], hi[i] = ext_a[i + off_a] - 1;
    int order[MAX_RANK]; /* dimensions, largest stride first */
    for (int i = 0; i < ta->rank; ++i) order[i] = i;
    for (int i = 0; i < ta->rank; ++i)
        for (int j = i + 1; j < ta->rank; ++j)
            if (ta->stride[order[j]] > ta->stride[order[i]]) {
                int tmp = order[i];
                order[i] = order[j], order[j] = tmp;
            }
    /* The two nearest digits per dimension find every solution only if each stride is
     * larger than the reach of the smaller ones; else be conservative. (Each term is below
     * one tensor's span, < INT64_MAX / 8, so the sum cannot overflow.) */
    int64_t reach = 0;
    for (int k = ta->rank - 1; k >= 0; --k) {
        const int i = order[k];
        if (ta->stride[i] != 0 && reach >= ta->stride[i]) return 1;
        reach += (hi[i] > -lo[i] ? hi[i] : -lo[i]) * ta->stride[i];
    }
    for (int path = 0; path < (1 << ta->rank); ++path) { /* at most 2^4 paths */
        int64_t rest = delta;
        int ok = 1;
        for (int k = 0; k < ta->rank && ok; ++k) {
            const int i = order[k];
            const int64_t s = ta->stride[i];
            if (s == 0) continue;
            const int64_t d = rest / s + (((path >> k) & 1) ? (rest > 0 ? 1 : -1) : 0);
            if (d < lo[i] || d > hi[i]) ok = 0;
            else rest -= d * s;
        }
        if (ok && rest == 0) return 1;
    }
    return 0;
}

int32_t flashbwd_plan_set_tensor(flashbwd_plan *plan, int32_t id, void *ptr,
                                 const int64_t *strides, int32_t num_strides)
{
    FB_FAIL_IF(NULL, plan == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "plan is NULL");
    /* BUSY goes to this thread's message only: the plan's belongs to the call in flight,
     * and writing it here would race with that call. */
    FB_FAIL_IF(NULL, atomic_exchange(&plan->busy, 1), FLASHBWD_ERR_BUSY,
               "flashbwd_plan_set_tensor: the plan is in use by another call");
    int32_t status = FLASHBWD_OK;
    int64_t ext[MAX_RANK], stride[MAX_RANK] = {0};
    const char *name = fb_tensor_name(id);
    const fb_problem_norm *p = &plan->prob;
    int rank = 0, given = 0;

#define CHECK(cond, st, ...)                                                            \
    if (cond) {                                                                          \
        status = fb_fail(plan, (st), __VA_ARGS__);                                       \
        goto done;                                                                       \
    }
    CHECK(id <= 0 || id >= FLASHBWD_TENSOR_COUNT, FLASHBWD_ERR_INVALID_VALUE,
          "tensor id %d is not a FLASHBWD_TENSOR_* id (1..%d)", id, FLASHBWD_TENSOR_COUNT - 1);
    CHECK(!p->varlen && id >= FLASHBWD_TENSOR_CU_SEQLENS_Q && id <= FLASHBWD_TENSOR_SEQUSED_K,
          FLASHBWD_ERR_INVALID_VALUE, "tensor %s is only for varlen plans (problem.varlen = 0)",
          name);
    rank = extents(plan, id, ext);
    if (ptr == NULL) { /* unbind */
        memset(&plan->tensors[id], 0, sizeof plan->tensors[id]);
        fb_clear_plan_message(plan); /* a successful call leaves the plan's message "" */
        goto done;
    }
    given = strides ? num_strides : rank;
    if (id == FLASHBWD_TENSOR_ALIBI_SLOPES) {
        CHECK(strides && num_strides != 1 && num_strides != 2, FLASHBWD_ERR_INVALID_VALUE,
              "tensor %s: num_strides = %d; expected 1 (heads_q) or 2 (batch, heads_q)", name,
              num_strides);
        if (!strides) given = 1;
    } else {
        CHECK(given != rank, FLASHBWD_ERR_INVALID_VALUE,
              "tensor %s: num_strides = %d; this plan's %s has rank %d", name, num_strides,
              name, rank);
    }
    const int off = rank - given;
    if (strides) {
        for (int i = 0; i < given; ++i) stride[i] = strides[i];
    } else { /* packed row-major */
        stride[given - 1] = 1;
        for (int i = given - 2; i >= 0; --i) stride[i] = stride[i + 1] * ext[i + off + 1];
    }
    CHECK(stride[given - 1] != 1, FLASHBWD_ERR_INVALID_VALUE,
          "tensor %s: strides[%d] = %lld; the last dimension must be contiguous (stride 1)",
          name, given - 1, (long long)stride[given - 1]);
    int64_t last = 0;
    for (int i = 0; i < given; ++i) {
        CHECK(stride[i] < 0, FLASHBWD_ERR_INVALID_VALUE,
              "tensor %s: strides[%d] = %lld; strides must be >= 0", name, i,
              (long long)stride[i]);
        int64_t t;
        CHECK(!fb_mul_i64(ext[i + off] - 1, stride[i], &t) || !fb_add_i64(last, t, &last),
              FLASHBWD_ERR_OVERFLOW, "tensor %s: strides[%d] = %lld makes offsets overflow",
              name, i, (long long)stride[i]);
    }
    const size_t esz = fb_tensor_elem_bytes(id);
    CHECK((uint64_t)last >= (uint64_t)(INT64_MAX / 8), FLASHBWD_ERR_OVERFLOW,
          "tensor %s spans %lld elements, too many to address", name, (long long)last);
    /* The overlap checks below compare [ptr, ptr + span) as integers: a span that runs past
     * the top of the address space would wrap and hide overlaps. (last < INT64_MAX / 8, so
     * the byte count cannot overflow.) */
    CHECK((uintptr_t)ptr > UINTPTR_MAX - (uintptr_t)(last + 1) * esz, FLASHBWD_ERR_OVERFLOW,
          "tensor %s: pointer %p plus its %lld bytes runs past the end of the address space",
          name, ptr, (long long)((last + 1) * (int64_t)esz));
    if (is_output(id)) { /* an output must not write one element twice */
        for (int i = 0; i < given - 1; ++i)
            CHECK(stride[i] == 0 && ext[i + off] > 1, FLASHBWD_ERR_OVERLAP,
                  "tensor %s: strides[%d] = 0 would write every element of dimension %d to "
                  "the same place", name, i, i);
    }
    /* Alignment: 16-byte vectors on the GPU for 16-bit tensors; element size otherwise. */
    const int vec = p->backend == FLASHBWD_BACKEND_CUDA && is_half(id);
    const uintptr_t align = vec ? 16 : esz;
    CHECK((uintptr_t)ptr % align != 0, FLASHBWD_ERR_MISALIGNED,
          "tensor %s: pointer %p is not %zu-byte aligned", name, ptr, (size_t)align);
    if (vec)
        for (int i = 0; i < given - 1; ++i)
            CHECK(stride[i] % 8 != 0, FLASHBWD_ERR_MISALIGNED,
                  "tensor %s: strides[%d] = %lld; CUDA needs strides that are multiples of 8 "
                  "elements (16 bytes)", name, i, (long long)stride[i]);

    fb_tensor saved = plan->tensors[id];
    fb_tensor *t = &plan->tensors[id];
    t->ptr = ptr;
    t->rank = given;
    memset(t->stride, 0, sizeof t->stride);
    for (int i = 0; i < given; ++i) t->stride[i] = stride[i];
    for (int other = 1; other < FLASHBWD_TENSOR_COUNT; ++other) {
        if (other == id || !plan->tensors[other].ptr) continue;
        if (!is_output(id) && !is_output(other)) continue; /* inputs may alias inputs */
        if (may_share(plan, id, other)) {
            plan->tensors[id] = saved;
            CHECK(1, FLASHBWD_ERR_OVERLAP, "tensor %s overlaps tensor %s, and %s is an output",
                  name, fb_tensor_name(other), is_output(id) ? name : fb_tensor_name(other));
        }
    }
    fb_clear_plan_message(plan);
#undef CHECK
done:
    atomic_store(&plan->busy, 0);
    return status;
}
