/* fuzz_execute.c — libFuzzer target: flashbwd_execute() on the CPU backend with real
 * buffers, random layouts, hostile values and hostile varlen lengths.
 *
 * Each input builds one small problem (batch <= 3, heads <= 4, seqlen <= 16, head_dim <=
 * 32), binds every tensor to a heap block of exactly the bytes its strides span (packed,
 * padded or head-major), fills inputs with ordinary, huge or raw (NaN, Inf) values, and, for
 * varlen plans, cu_seqlens and seqused that are valid or broken in one of many ways. Checks,
 * beyond "no sanitizer report":
 *   - the status is OK exactly when every sequence's lengths are valid by flashbwd.h's rules
 *     (else FLASHBWD_ERR_INVALID_LENGTHS), or WORKSPACE_TOO_SMALL when none was accepted;
 *   - execute writes no input byte and no byte of the outputs' padding;
 *   - on success every output element of a real row is written (outputs are poisoned with
 *     a NaN pattern that no arithmetic can produce), rows whose LSE is -inf get dQ = 0, and
 *     keys no live query row can see get dK = dV = 0;
 *   - a second execute gives bitwise identical outputs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SEQ 16

/* Signalling-NaN patterns with a payload: arithmetic only makes quiet NaNs (bit 6 of bf16,
 * bit 9 of fp16 set), so an output element still holding one was never written. */
#define POISON_BF16 0x7fa5u
#define POISON_FP16 0x7d5au

typedef struct buf {
    unsigned char *data;
    size_t bytes;
    int64_t stride[4];
    fz_shape shape;
} buf;

typedef struct run {
    flashbwd_problem p;
    int32_t dtype;
    int64_t heads_kv, total_q, total_k;
    buf t[FLASHBWD_TENSOR_COUNT];
    int32_t *cu[2], *used[2]; /* q, k */
    uint64_t rng;
} run;

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s) { return (float)((next(s) >> 11) * 0x1.0p-53) * 2.0f - 1.0f; }

/* A random 16-bit value built from its fields: ordinary (|x| in [2^-4, 4)), huge (near the
 * format's largest finite values), tiny (fp16 subnormals, bf16 near 2^-120), or raw bits
 * (NaN and Inf included). */
static uint16_t rand_half(uint64_t *s, int32_t dtype, uint32_t kind)
{
    const uint64_t z = next(s);
    if (kind == 3) return (uint16_t)z;
    const uint16_t sign = (uint16_t)((z & 1u) << 15);
    const int fp16 = dtype == FLASHBWD_DTYPE_FP16;
    const int lo = kind == 1 ? (fp16 ? 12 : 100) : kind == 2 ? (fp16 ? -14 : -120) : -4;
    const int e = lo + (int)((z >> 8) % 4);
    if (fp16) {
        const uint32_t field = kind == 2 ? 0u : (uint32_t)(e + 15); /* 0: subnormal */
        return sign | (uint16_t)(field << 10) | (uint16_t)((z >> 16) & 0x3ffu);
    }
    return sign | (uint16_t)((uint32_t)(e + 127) << 7) | (uint16_t)((z >> 16) & 0x7fu);
}

/* Index of element idx[] with strides. */
static int64_t offset_of(const buf *b, const int64_t idx[4])
{
    int64_t o = 0;
    for (int i = 0; i < b->shape.rank; ++i) o += idx[i] * b->stride[i];
    return o;
}

/* Allocate tensor id with a random layout; `holes` is the byte every non-element gets. */
static void make_tensor(fz *f, run *r, int32_t id, unsigned char holes)
{
    buf *b = &r->t[id];
    fz_shape_of(&r->p, id, 2, &b->shape);
    const fz_shape *s = &b->shape;
    fz_packed(s, b->stride);
    switch (fz_below(f, 3)) {
    case 1: /* padded: every outer stride a little larger than packed */
        for (int i = s->rank - 2; i >= 0; --i)
            b->stride[i] = b->stride[i + 1] * s->ext[i + 1] + fz_range(f, 0, 3);
        break;
    case 2: /* the two dimensions before the last stored swapped, e.g. (b, h, s, d) */
        if (s->rank >= 3) {
            const int last = s->rank - 1, c = s->rank - 2, a = s->rank - 3;
            b->stride[a] = s->ext[last];
            b->stride[c] = b->stride[a] * s->ext[a];
            int64_t outer = b->stride[c] * s->ext[c];
            for (int i = a - 1; i >= 0; --i) b->stride[i] = outer, outer *= s->ext[i];
        }
        break;
    default: break;
    }
    b->bytes = (size_t)(fz_last_offset(s, b->stride, s->rank) + 1) * s->elem_bytes;
    b->data = malloc(b->bytes);
    memset(b->data, holes, b->bytes);
}

/* Call fn(b, offset) for every element of b. */
#define FOR_EACH_ELEMENT(b, off, body)                                                    \
    do {                                                                                  \
        int64_t idx_[4] = {0}, n_ = 1;                                                    \
        for (int i_ = 0; i_ < (b)->shape.rank; ++i_) n_ *= (b)->shape.ext[i_];            \
        for (int64_t e_ = 0; e_ < n_; ++e_) {                                             \
            const int64_t off = offset_of((b), idx_);                                     \
            body;                                                                         \
            for (int i_ = (b)->shape.rank - 1; i_ >= 0; --i_) {                           \
                if (++idx_[i_] < (b)->shape.ext[i_]) break;                               \
                idx_[i_] = 0;                                                             \
            }                                                                             \
        }                                                                                 \
    } while (0)

static void fill_inputs(fz *f, run *r)
{
    static const int32_t ids[] = {FLASHBWD_TENSOR_Q, FLASHBWD_TENSOR_K, FLASHBWD_TENSOR_V,
                                  FLASHBWD_TENSOR_O, FLASHBWD_TENSOR_DO};
    for (int n = 0; n < 5; ++n) {
        buf *b = &r->t[ids[n]];
        const uint32_t kind = fz_chance(f, 2) ? 0 : fz_below(f, 4);
        uint16_t *h = (uint16_t *)b->data;
        FOR_EACH_ELEMENT(b, off, { h[off] = rand_half(&r->rng, r->dtype, kind); });
    }
    buf *lse = &r->t[FLASHBWD_TENSOR_LSE];
    const uint32_t kind = fz_below(f, 6);
    float *l = (float *)lse->data;
    FOR_EACH_ELEMENT(lse, off, {
        const uint64_t z = next(&r->rng);
        float v = 5.0f * uniform(&r->rng) + 2.0f;
        if (z % 5 == 0) v = -INFINITY;
        if (kind == 1 && z % 3 == 0) v = (float)(int64_t)(z >> 40) * 1e30f;
        if (kind == 2) {
            const uint32_t u = (uint32_t)z;
            memcpy(&v, &u, 4);
        }
        l[off] = v;
    });
    if (r->t[FLASHBWD_TENSOR_ALIBI_SLOPES].data) {
        buf *s = &r->t[FLASHBWD_TENSOR_ALIBI_SLOPES];
        FOR_EACH_ELEMENT(s, off, { ((float *)s->data)[off] = 0.5f * (uniform(&r->rng) + 1.0f); });
    }
}

/* Lengths: mostly a valid split of each side, then broken in one of several ways. */
static void make_lengths(fz *f, run *r)
{
    for (int side = 0; side < 2; ++side) {
        const int64_t B = r->p.batch, max = side ? r->p.seqlen_k : r->p.seqlen_q;
        const int64_t total = side ? r->total_k : r->total_q;
        int32_t *cu = malloc(sizeof(int32_t) * (size_t)(B + 1));
        int64_t at = fz_chance(f, 4) ? fz_range(f, 0, 2) : 0;
        for (int64_t b = 0; b < B; ++b) {
            cu[b] = (int32_t)at;
            at += fz_range(f, 0, max);
            if (at > total) at = total;
        }
        cu[B] = (int32_t)at;
        switch (fz_below(f, 10)) {
        case 0: cu[fz_below(f, (uint32_t)B + 1)] = (int32_t)fz_i64_wild(f); break;
        case 1: cu[B] = (int32_t)total + (int32_t)fz_range(f, 1, 3); break;
        case 2: cu[fz_below(f, (uint32_t)B + 1)] = -(int32_t)fz_range(f, 1, 5); break;
        case 3: cu[B] = cu[0] + (int32_t)(max + 1); break; /* one sequence too long */
        default: break;
        }
        r->cu[side] = cu;
        if (fz_chance(f, 3)) {
            int32_t *u = malloc(sizeof(int32_t) * (size_t)B);
            for (int64_t b = 0; b < B; ++b) {
                const int64_t len = (int64_t)cu[b + 1] - cu[b];
                u[b] = len > 0 ? (int32_t)fz_range(f, 0, len) : 0;
                if (fz_chance(f, 12)) u[b] = (int32_t)fz_i64_wild(f);
            }
            r->used[side] = u;
        }
    }
}

/* The rules of flashbwd.h for one side of one sequence; sets *len to its used length. */
static int lengths_valid(const run *r, int side, int64_t b, int64_t *start, int64_t *len)
{
    const int32_t *cu = r->cu[side];
    const int64_t total = side ? r->total_k : r->total_q;
    const int64_t max = side ? r->p.seqlen_k : r->p.seqlen_q;
    if (cu[b] < 0 || cu[b + 1] < cu[b] || cu[b + 1] > total) return 0;
    *start = cu[b];
    *len = (int64_t)cu[b + 1] - cu[b];
    if (r->used[side]) {
        const int32_t u = r->used[side][b];
        if (u < 0 || u > *len) return 0;
        *len = u;
    }
    return *len <= max;
}

/* Does query row i see key j (flashbwd.h: bottom-right causal, window, negative =
 * unbounded)? */
static int visible(const flashbwd_problem *p, int64_t i, int64_t j, int64_t sq, int64_t sk)
{
    const int64_t diag = i + sk - sq;
    int64_t right = p->use_window && p->window_right >= 0 ? p->window_right : -1;
    if (p->causal) right = 0;
    const int64_t left = p->use_window && p->window_left >= 0 ? p->window_left : -1;
    if (right >= 0 && j > diag + right) return 0;
    if (left >= 0 && j < diag - left) return 0;
    return 1;
}

static uint16_t half_at(const buf *b, int64_t row, int64_t b_, int64_t h, int64_t c, int varlen)
{
    const int64_t idx[4] = {varlen ? row : b_, varlen ? h : row, varlen ? c : h, c};
    return ((const uint16_t *)b->data)[offset_of(b, idx)];
}

static float lse_at(const run *r, int64_t b, int64_t h, int64_t row)
{
    const buf *l = &r->t[FLASHBWD_TENSOR_LSE];
    const int64_t idx[4] = {r->p.varlen ? h : b, r->p.varlen ? row : h, row, 0};
    return ((const float *)l->data)[offset_of(l, idx)];
}

/* Output checks after a successful execute (see the file comment). */
static void check_outputs(const run *r)
{
    const flashbwd_problem *p = &r->p;
    const uint16_t poison = r->dtype == FLASHBWD_DTYPE_FP16 ? POISON_FP16 : POISON_BF16;
    const int64_t group = p->heads_q / r->heads_kv, d = p->head_dim;
    for (int64_t b = 0; b < p->batch; ++b) {
        int64_t q0 = 0, k0 = 0, sq = p->seqlen_q, sk = p->seqlen_k;
        if (p->varlen) {
            lengths_valid(r, 0, b, &q0, &sq);
            lengths_valid(r, 1, b, &k0, &sk);
        }
        for (int64_t h = 0; h < p->heads_q; ++h)
            for (int64_t i = 0; i < sq; ++i) {
                const int64_t row = q0 + i;
                const int dead = lse_at(r, b, h, row) == -INFINITY;
                for (int64_t c = 0; c < d; ++c) {
                    const uint16_t v = half_at(&r->t[FLASHBWD_TENSOR_DQ], row, b, h, c, p->varlen);
                    FZ_CHECK(v != poison, "dQ[b %lld, row %lld, h %lld, c %lld] never written",
                             (long long)b, (long long)row, (long long)h, (long long)c);
                    FZ_CHECK(!dead || (v & 0x7fffu) == 0,
                             "dQ row %lld of head %lld has LSE -inf but dQ bits 0x%04x",
                             (long long)row, (long long)h, v);
                }
            }
        for (int64_t hk = 0; hk < r->heads_kv; ++hk)
            for (int64_t j = 0; j < sk; ++j) {
                int seen = 0; /* some live query row of the group sees key j */
                for (int64_t g = 0; g < group && !seen; ++g)
                    for (int64_t i = 0; i < sq && !seen; ++i)
                        seen = visible(p, i, j, sq, sk) &&
                               lse_at(r, b, hk * group + g, q0 + i) != -INFINITY;
                for (int id = FLASHBWD_TENSOR_DK; id <= FLASHBWD_TENSOR_DV; ++id)
                    for (int64_t c = 0; c < d; ++c) {
                        const uint16_t v = half_at(&r->t[id], k0 + j, b, hk, c, p->varlen);
                        FZ_CHECK(v != poison, "d%c[b %lld, key %lld, h %lld] never written",
                                 id == FLASHBWD_TENSOR_DK ? 'K' : 'V', (long long)b,
                                 (long long)j, (long long)hk);
                        FZ_CHECK(seen || (v & 0x7fffu) == 0,
                                 "key %lld of kv head %lld is seen by no live row, but d%c "
                                 "bits 0x%04x", (long long)j, (long long)hk,
                                 id == FLASHBWD_TENSOR_DK ? 'K' : 'V', v);
                    }
            }
    }
}

static void poison_outputs(run *r)
{
    const uint16_t poison = r->dtype == FLASHBWD_DTYPE_FP16 ? POISON_FP16 : POISON_BF16;
    for (int32_t id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id) {
        buf *b = &r->t[id];
        FOR_EACH_ELEMENT(b, off, { ((uint16_t *)b->data)[off] = poison; });
    }
}

/* Whether byte k of tensor b is an element byte. */
static unsigned char *element_mask(const buf *b)
{
    unsigned char *m = calloc(b->bytes, 1);
    FOR_EACH_ELEMENT(b, off, { memset(m + off * (int64_t)b->shape.elem_bytes, 1, b->shape.elem_bytes); });
    return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    run r;
    memset(&r, 0, sizeof r);
    r.p = fz_problem(&f, FLASHBWD_BACKEND_CPU, MAX_SEQ);
    r.rng = fz_bits(&f, 8);
    flashbwd_plan *plan = NULL;
    if (flashbwd_plan_create(&r.p, &plan) != FLASHBWD_OK) return 0;
    const flashbwd_problem *p = &r.p;
    /* One wild field can still make a valid, huge problem: keep to what runs in a blink. */
    if (p->batch > 3 || p->heads_q > 4 || p->seqlen_q > MAX_SEQ || p->seqlen_k > MAX_SEQ ||
        p->total_q > 3 * MAX_SEQ + 2 || p->total_k > 3 * MAX_SEQ + 2 || p->head_dim > 32) {
        flashbwd_plan_destroy(plan);
        return 0;
    }
    r.dtype = p->dtype ? p->dtype : FLASHBWD_DTYPE_BF16;
    r.heads_kv = p->heads_kv ? p->heads_kv : p->heads_q;
    r.total_q = p->total_q ? p->total_q : p->batch * p->seqlen_q;
    r.total_k = p->total_k ? p->total_k : p->batch * p->seqlen_k;

    for (int32_t id = FLASHBWD_TENSOR_Q; id <= FLASHBWD_TENSOR_DV; ++id)
        make_tensor(&f, &r, id, (unsigned char)(0x40 + id));
    const int alibi = (int)fz_below(&f, 3); /* 0 none, 1 (heads_q), 2 (batch, heads_q) */
    if (alibi) {
        buf *b = &r.t[FLASHBWD_TENSOR_ALIBI_SLOPES];
        fz_shape_of(p, FLASHBWD_TENSOR_ALIBI_SLOPES, alibi, &b->shape);
        fz_packed(&b->shape, b->stride);
        b->bytes = (size_t)(b->shape.rank == 1 ? p->heads_q : p->batch * p->heads_q) * 4;
        b->data = malloc(b->bytes);
    }
    fill_inputs(&f, &r);
    poison_outputs(&r);
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        const buf *b = &r.t[id];
        if (!b->data) continue;
        const int32_t st = flashbwd_plan_set_tensor(plan, id, b->data, b->stride, b->shape.rank);
        FZ_CHECK(st == FLASHBWD_OK, "binding tensor %d failed: %s", id, flashbwd_last_error());
    }
    int lengths_ok = 1;
    if (p->varlen) {
        make_lengths(&f, &r);
        static const int32_t cu_id[2] = {FLASHBWD_TENSOR_CU_SEQLENS_Q, FLASHBWD_TENSOR_CU_SEQLENS_K};
        static const int32_t used_id[2] = {FLASHBWD_TENSOR_SEQUSED_Q, FLASHBWD_TENSOR_SEQUSED_K};
        for (int side = 0; side < 2; ++side) {
            FZ_CHECK(flashbwd_plan_set_tensor(plan, cu_id[side], r.cu[side], NULL, 0) == FLASHBWD_OK,
                     "binding cu_seqlens failed: %s", flashbwd_last_error());
            if (r.used[side])
                FZ_CHECK(flashbwd_plan_set_tensor(plan, used_id[side], r.used[side], NULL, 0) ==
                             FLASHBWD_OK, "binding seqused failed: %s", flashbwd_last_error());
        }
        for (int64_t b = 0; b < p->batch; ++b) {
            int64_t start, len;
            lengths_ok &= lengths_valid(&r, 0, b, &start, &len) && lengths_valid(&r, 1, b, &start, &len);
        }
    }

    size_t need = 0;
    flashbwd_plan_workspace_size(plan, &need);
    const int small_ws = fz_chance(&f, 10);
    const size_t ws_bytes = small_ws ? need - (size_t)fz_range(&f, 1, 4) * 4 : need + (size_t)fz_range(&f, 0, 3) * 4;
    float *ws = malloc(ws_bytes ? ws_bytes : 1);
    const int32_t wst = flashbwd_plan_set_workspace(plan, ws, ws_bytes);
    FZ_CHECK(wst == (small_ws ? FLASHBWD_ERR_WORKSPACE_TOO_SMALL : FLASHBWD_OK),
             "set_workspace(%zu of %zu) gave %d", ws_bytes, need, wst);

    /* Snapshot every buffer: inputs must not change, nor any output padding. */
    unsigned char *before[FLASHBWD_TENSOR_COUNT] = {0};
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id)
        if (r.t[id].data) {
            before[id] = malloc(r.t[id].bytes);
            memcpy(before[id], r.t[id].data, r.t[id].bytes);
        }
    const int32_t st = flashbwd_execute(plan, NULL);
    if (small_ws) {
        FZ_CHECK(st == FLASHBWD_ERR_WORKSPACE_TOO_SMALL, "execute without workspace gave %d", st);
    } else {
        FZ_CHECK(st == (lengths_ok ? FLASHBWD_OK : FLASHBWD_ERR_INVALID_LENGTHS),
                 "execute gave %d (%s) but the lengths are %s", st, flashbwd_last_error(),
                 lengths_ok ? "valid" : "invalid");
    }
    if (st != FLASHBWD_OK) fz_check_failure(st, plan, "execute");
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        if (!before[id]) continue;
        const buf *b = &r.t[id];
        unsigned char *m = b->shape.output ? element_mask(b) : NULL;
        for (size_t k = 0; k < b->bytes; ++k)
            FZ_CHECK(b->data[k] == before[id][k] || (m && m[k]),
                     "execute changed byte %zu of %s tensor %d", k,
                     m ? "the padding of output" : "input", id);
        free(m);
    }
    if (st == FLASHBWD_OK) {
        check_outputs(&r);
        /* Deterministic: the same outputs, bit for bit, from a second run. */
        unsigned char *first[3];
        for (int k = 0; k < 3; ++k) {
            const buf *b = &r.t[FLASHBWD_TENSOR_DQ + k];
            first[k] = malloc(b->bytes);
            memcpy(first[k], b->data, b->bytes);
        }
        poison_outputs(&r);
        FZ_CHECK(flashbwd_execute(plan, NULL) == FLASHBWD_OK, "second execute failed");
        for (int k = 0; k < 3; ++k) {
            const buf *b = &r.t[FLASHBWD_TENSOR_DQ + k];
            FZ_CHECK(memcmp(first[k], b->data, b->bytes) == 0, "second execute differs (%s)",
                     k == 0 ? "dQ" : k == 1 ? "dK" : "dV");
            free(first[k]);
        }
    }
    flashbwd_plan_destroy(plan);
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) free(r.t[id].data), free(before[id]);
    for (int side = 0; side < 2; ++side) free(r.cu[side]), free(r.used[side]);
    free(ws);
    return 0;
}
