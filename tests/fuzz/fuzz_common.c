/* fuzz_common.c — the input reader, pickers, problem builder and tensor model of the fuzz
 * targets (see fuzz_common.h). Nothing here calls flashbwd's internals: the model is written
 * from the layouts flashbwd.h documents.
 */
#include "fuzz_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- Reading the input ----------------------------------------------------------------- */

uint64_t fz_bits(fz *f, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
        uint64_t b = 0;
        if (f->n) b = *f->p++, --f->n;
        v |= b << (8 * i);
    }
    return v;
}

uint32_t fz_below(fz *f, uint32_t n)
{
    if (n <= 1) return 0;
    const int bytes = n <= 256 ? 1 : n <= 65536 ? 2 : 4;
    return (uint32_t)(fz_bits(f, bytes) % n);
}

int64_t fz_range(fz *f, int64_t lo, int64_t hi)
{
    return lo + (int64_t)fz_below(f, (uint32_t)(hi - lo + 1));
}

int fz_chance(fz *f, uint32_t one_in) { return fz_below(f, one_in) == 0; }

void fz_bytes(fz *f, void *dst, size_t n)
{
    const size_t k = n < f->n ? n : f->n;
    memcpy(dst, f->p, k);
    memset((char *)dst + k, 0, n - k);
    f->p += k, f->n -= k;
}

int64_t fz_i64_wild(fz *f)
{
    static const int64_t table[] = {
        0, 1, -1, 2, 7, 8, 9, 255, 256, 4096, 65535, 65536,
        INT32_MAX, (int64_t)INT32_MAX + 1, (int64_t)INT32_MAX - 65536,
        (int64_t)INT32_MAX - 65535, INT32_MIN, (int64_t)UINT32_MAX, (int64_t)1 << 32,
        (int64_t)1 << 40, (int64_t)1 << 53, ((int64_t)1 << 53) - 1, (int64_t)1 << 61,
        (int64_t)1 << 62, INT64_MAX, INT64_MAX - 1, INT64_MIN, INT64_MIN + 1,
        INT64_MAX / 2, INT64_MAX / 8, INT64_MAX / 1024, -((int64_t)1 << 31)};
    switch (fz_below(f, 4)) {
    case 0: return table[fz_below(f, sizeof table / sizeof table[0])];
    case 1: /* a neighbour, wrapping around the int64 range like the raw bits below */
        return (int64_t)((uint64_t)table[fz_below(f, sizeof table / sizeof table[0])] +
                         (uint64_t)fz_range(f, -3, 3));
    case 2: return fz_range(f, -4, 300);
    default: return (int64_t)fz_bits(f, 8);
    }
}

int64_t fz_stride(fz *f, int64_t plausible)
{
    switch (fz_below(f, 8)) {
    case 0: return fz_i64_wild(f);
    case 1: return 0;
    case 2: return fz_range(f, 1, 64) * 8;
    case 3: return plausible + fz_range(f, -2, 16);
    default: return plausible;
    }
}

/* --- Failing a check ------------------------------------------------------------------ */

void fz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz check failed: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void fz_check_failure(int32_t status, const flashbwd_plan *plan, const char *call)
{
    FZ_CHECK(status > 0 && status < FLASHBWD_STATUS_COUNT, "%s returned unknown status %d",
             call, status);
    const char *name = flashbwd_status_name(status);
    const char *msg = flashbwd_last_error();
    const size_t len = strlen(name);
    FZ_CHECK(strncmp(msg, name, len) == 0 && msg[len] == ':' && strlen(msg) > len + 3,
             "%s failed with %s but the thread message is \"%s\"", call, name, msg);
    if (plan && status != FLASHBWD_ERR_BUSY)
        FZ_CHECK(strcmp(flashbwd_plan_last_error(plan), msg) == 0,
                 "%s: plan message \"%s\" differs from thread message \"%s\"", call,
                 flashbwd_plan_last_error(plan), msg);
}

/* --- Problems --------------------------------------------------------------------------- */

flashbwd_problem fz_problem(fz *f, int32_t backend, int64_t max_seq)
{
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = backend;
    if (backend == FLASHBWD_BACKEND_CUDA) {
        static const int32_t arch[] = {80, 86, 89, 90};
        p.arch = arch[fz_below(f, 4)];
        if (fz_chance(f, 8)) p.smem_per_block = (int32_t)fz_range(f, 0, 300) * 1024;
        if (fz_chance(f, 8)) p.sm_count = (int32_t)fz_range(f, 0, 200);
    }
    p.dtype = (int32_t)fz_below(f, 3);
    p.head_dim = (int32_t)fz_range(f, 1, 4) * 8;
    if (backend == FLASHBWD_BACKEND_CUDA && fz_chance(f, 2)) p.head_dim += 64;
    p.batch = fz_range(f, 1, 3);
    const int64_t group = fz_range(f, 1, 2);
    p.heads_kv = fz_range(f, 1, 2);
    p.heads_q = p.heads_kv * group;
    if (group == 1 && fz_chance(f, 2)) p.heads_kv = 0; /* the default: heads_q */
    p.seqlen_q = fz_range(f, 1, max_seq);
    p.seqlen_k = fz_range(f, 1, max_seq);
    if (fz_chance(f, 3)) {
        p.varlen = 1;
        if (fz_chance(f, 2)) p.total_q = fz_range(f, 1, p.batch * p.seqlen_q + 2);
        if (fz_chance(f, 2)) p.total_k = fz_range(f, 1, p.batch * p.seqlen_k + 2);
    }
    static const float scales[] = {0.0f, 0.125f, 1.0f, 3.0f, 1e-3f, 40.0f};
    p.softmax_scale = scales[fz_below(f, 6)];
    if (fz_chance(f, 4)) p.softcap = (float)fz_range(f, 1, 50) * 0.5f;
    p.causal = fz_chance(f, 3);
    if (fz_chance(f, 3)) {
        p.use_window = 1;
        p.window_left = (int32_t)fz_range(f, -1, max_seq);
        p.window_right = (int32_t)fz_range(f, -1, max_seq);
    }
    p.deterministic = fz_chance(f, 4);
    if (fz_chance(f, 16)) { /* one field out of range */
        const int64_t v = fz_i64_wild(f);
        switch (fz_below(f, 12)) {
        case 0: p.head_dim = (int32_t)v; break;
        case 1: p.batch = v; break;
        case 2: p.heads_q = v; break;
        case 3: p.heads_kv = v; break;
        case 4: p.seqlen_q = v; break;
        case 5: p.seqlen_k = v; break;
        case 6: p.total_q = v; break;
        case 7: p.total_k = v; break;
        case 8: p.window_left = (int32_t)v; break;
        case 9: p.dtype = (int32_t)v; break;
        case 10: p.causal = (int32_t)v; break;
        default: p.reserved0 = (int32_t)v; break;
        }
    }
    return p;
}

/* --- The model -------------------------------------------------------------------------- */

static int qside(int32_t id)
{
    return id == FLASHBWD_TENSOR_Q || id == FLASHBWD_TENSOR_O || id == FLASHBWD_TENSOR_DO ||
           id == FLASHBWD_TENSOR_DQ;
}

int fz_shape_of(const flashbwd_problem *p, int32_t id, int alibi_rank, fz_shape *s)
{
    memset(s, 0, sizeof *s);
    const int64_t heads_kv = p->heads_kv ? p->heads_kv : p->heads_q;
    const int64_t total_q = p->total_q ? p->total_q : p->batch * p->seqlen_q;
    const int64_t total_k = p->total_k ? p->total_k : p->batch * p->seqlen_k;
    s->elem_bytes = 4;
    s->output = id == FLASHBWD_TENSOR_DQ || id == FLASHBWD_TENSOR_DK || id == FLASHBWD_TENSOR_DV;
    switch (id) {
    case FLASHBWD_TENSOR_Q: case FLASHBWD_TENSOR_K: case FLASHBWD_TENSOR_V:
    case FLASHBWD_TENSOR_O: case FLASHBWD_TENSOR_DO: case FLASHBWD_TENSOR_DQ:
    case FLASHBWD_TENSOR_DK: case FLASHBWD_TENSOR_DV: {
        const int q = qside(id);
        const int64_t heads = q ? p->heads_q : heads_kv;
        s->elem_bytes = 2;
        if (p->varlen) {
            s->rank = 3;
            s->ext[0] = q ? total_q : total_k, s->ext[1] = heads, s->ext[2] = p->head_dim;
        } else {
            s->rank = 4;
            s->ext[0] = p->batch, s->ext[1] = q ? p->seqlen_q : p->seqlen_k;
            s->ext[2] = heads, s->ext[3] = p->head_dim;
        }
        return 1;
    }
    case FLASHBWD_TENSOR_LSE:
        if (p->varlen) {
            s->rank = 2, s->ext[0] = p->heads_q, s->ext[1] = total_q;
        } else {
            s->rank = 3, s->ext[0] = p->batch, s->ext[1] = p->heads_q, s->ext[2] = p->seqlen_q;
        }
        return 1;
    case FLASHBWD_TENSOR_CU_SEQLENS_Q: case FLASHBWD_TENSOR_CU_SEQLENS_K:
        if (!p->varlen) return 0;
        s->rank = 1, s->ext[0] = p->batch + 1;
        return 1;
    case FLASHBWD_TENSOR_SEQUSED_Q: case FLASHBWD_TENSOR_SEQUSED_K:
        if (!p->varlen) return 0;
        s->rank = 1, s->ext[0] = p->batch;
        return 1;
    case FLASHBWD_TENSOR_ALIBI_SLOPES:
        if (alibi_rank == 1) s->rank = 1, s->ext[0] = p->heads_q;
        else s->rank = 2, s->ext[0] = p->batch, s->ext[1] = p->heads_q;
        return 1;
    default: return 0;
    }
}

void fz_packed(const fz_shape *s, int64_t stride[4])
{
    memset(stride, 0, 4 * sizeof stride[0]);
    stride[s->rank - 1] = 1;
    for (int i = s->rank - 2; i >= 0; --i) stride[i] = stride[i + 1] * s->ext[i + 1];
}

int64_t fz_last_offset(const fz_shape *s, const int64_t *stride, int rank)
{
    __int128 last = 0;
    for (int i = 0; i < rank; ++i) {
        if (stride[i] < 0) return -1;
        last += (__int128)(s->ext[i] - 1) * stride[i];
        if (last > INT64_MAX) return -1;
    }
    return (int64_t)last;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t *fz_offsets(const fz_shape *s, const int64_t *stride, int64_t limit, int64_t *count)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; ++i) {
        if (s->ext[i] > limit / n) return NULL; /* before multiplying: extents reach 2^60 */
        n *= s->ext[i];
    }
    int64_t *off = malloc(sizeof(int64_t) * (size_t)n);
    int64_t idx[4] = {0};
    for (int64_t e = 0; e < n; ++e) {
        int64_t o = 0;
        for (int i = 0; i < s->rank; ++i) o += idx[i] * stride[i];
        off[e] = o * (int64_t)s->elem_bytes;
        for (int i = s->rank - 1; i >= 0; --i) {
            if (++idx[i] < s->ext[i]) break;
            idx[i] = 0;
        }
    }
    qsort(off, (size_t)n, sizeof off[0], cmp_i64);
    *count = n;
    return off;
}

int fz_offsets_share(uintptr_t pa, const int64_t *oa, int64_t na, size_t ea, uintptr_t pb,
                     const int64_t *ob, int64_t nb, size_t eb)
{
    /* Intervals [base + off, base + off + size) sorted by start; equal sizes within a
     * tensor, so they are sorted by end as well and one sweep finds any intersection.
     * 128-bit sums: wild pointers near the top of the address space must not wrap. */
    const __int128 ba = (__int128)pa, bb = (__int128)pb;
    if (na == 0 || nb == 0) return 0;
    if (ba + oa[na - 1] + (__int128)ea <= bb + ob[0] || bb + ob[nb - 1] + (__int128)eb <= ba + oa[0])
        return 0; /* the spans do not even meet */
    for (int64_t i = 0, j = 0; i < na && j < nb;) {
        const __int128 a0 = ba + oa[i], a1 = a0 + (__int128)ea;
        const __int128 b0 = bb + ob[j], b1 = b0 + (__int128)eb;
        if (a1 <= b0) ++i;
        else if (b1 <= a0) ++j;
        else return 1;
    }
    return 0;
}

int fz_tensor_self_overlaps(const fz_shape *s, const int64_t *stride, int64_t limit)
{
    int64_t n;
    int64_t *off = fz_offsets(s, stride, limit, &n);
    if (!off) return -1;
    int dup = 0;
    for (int64_t i = 1; i < n && !dup; ++i) dup = off[i] == off[i - 1];
    free(off);
    return dup;
}
