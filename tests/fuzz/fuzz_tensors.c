/* fuzz_tensors.c — libFuzzer target: sequences of flashbwd_plan_set_tensor(),
 * flashbwd_plan_set_workspace() and flashbwd_execute() on one small plan.
 *
 * The plan is a CPU plan or a planning-only CUDA plan (problem.arch set; its set_tensor
 * applies the CUDA alignment rules and its execute must never touch memory). Each step binds
 * a random id (valid or not) to a pointer that is NULL, a heap block of exactly the bytes
 * its strides claim, a place in a shared arena (so tensors overlap, interleave or alias), or
 * a wild value (never dereferenced by set_tensor, and the target then never executes a CPU
 * plan). Checks, beyond "no sanitizer report":
 *   - an accepted binding obeys flashbwd.h: valid id, rank, contiguous last dimension,
 *     non-negative strides, no offset overflow, alignment, an output with no zero stride
 *     over a dimension longer than 1, and no byte shared between an output and any other
 *     bound tensor (decided by enumerating elements);
 *   - a rejected call changes nothing: the plan's bindings and workspace (read white-box
 *     from internal.h) always equal the model's;
 *   - execute reports the first missing tensor or workspace, NOT_SUPPORTED on a
 *     planning-only plan, and on the CPU writes no byte outside the output elements.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ARENA_BYTES 32768
#define ENUM_LIMIT 8192       /* elements a brute-force overlap check enumerates */
#define OWN_LIMIT (1 << 20)   /* bytes the target allocates for one tensor */

typedef struct binding {
    void *ptr;          /* as bound; NULL = unbound */
    int64_t stride[4];
    int rank;
    fz_shape shape;
    int real;           /* backed by memory that covers every element */
    unsigned char *own; /* heap block of this binding (freed when replaced) */
    size_t own_bytes;
    int64_t *offs;      /* sorted byte offsets of its elements; NULL if too many */
    int64_t noffs;
} binding;

typedef struct state {
    flashbwd_problem p;
    flashbwd_plan *plan;
    int cuda;
    binding b[FLASHBWD_TENSOR_COUNT];
    unsigned char *arena;
    void *ws;            /* as bound */
    size_t ws_bytes;
    int ws_real;
    unsigned char *ws_own;
    size_t need_ws;
    uint64_t rng;
} state;

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_random(uint64_t *s, unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)next(s);
}

static void *wild_pointer(fz *f)
{
    static const uintptr_t table[] = {1, 2, 16, 4096, 0x7ffffffff000u, 0xfffffffffffff000u,
                                      0xffffffffffffffc0u, 0x10000000000u};
    if (fz_chance(f, 3)) return (void *)(uintptr_t)fz_bits(f, 8);
    return (void *)table[fz_below(f, sizeof table / sizeof table[0])];
}

static int is_half(int32_t id) { return id >= FLASHBWD_TENSOR_Q && id <= FLASHBWD_TENSOR_DV &&
                                        id != FLASHBWD_TENSOR_LSE; }

/* --- set_tensor --------------------------------------------------------------------------- */

static void binding_free(binding *b)
{
    free(b->own);
    free(b->offs);
    memset(b, 0, sizeof *b);
}

/* Enumerate an accepted binding's elements once, for every later overlap check. */
static void binding_index(binding *b)
{
    b->offs = fz_offsets(&b->shape, b->stride, ENUM_LIMIT, &b->noffs);
}

/* Why an accepted binding breaks flashbwd.h's rules, or NULL. */
static const char *binding_breaks_rules(const state *s, int32_t id, const binding *nb)
{
    const fz_shape *sh = &nb->shape;
    if (nb->stride[nb->rank - 1] != 1) return "last stride not 1";
    for (int i = 0; i < nb->rank; ++i)
        if (nb->stride[i] < 0) return "negative stride";
    const int64_t last = fz_last_offset(sh, nb->stride, nb->rank);
    if (last < 0) return "offsets overflow";
    if ((__int128)(uintptr_t)nb->ptr + (__int128)(last + 1) * (__int128)sh->elem_bytes >
        (__int128)UINTPTR_MAX)
        return "a span past the end of the address space";
    const uintptr_t align = s->cuda && is_half(id) ? 16 : sh->elem_bytes;
    if ((uintptr_t)nb->ptr % align) return "misaligned pointer";
    if (s->cuda && is_half(id))
        for (int i = 0; i < nb->rank - 1; ++i)
            if (nb->stride[i] % 8) return "stride not a multiple of 8 (CUDA)";
    if (sh->output)
        for (int i = 0; i < nb->rank - 1; ++i)
            if (nb->stride[i] == 0 && sh->ext[i] > 1) return "output with a zero stride";
    for (int32_t o = 1; o < FLASHBWD_TENSOR_COUNT; ++o) {
        const binding *ob = &s->b[o];
        if (o == id || !ob->ptr || (!sh->output && !ob->shape.output)) continue;
        if (nb->offs && ob->offs &&
            fz_offsets_share((uintptr_t)nb->ptr, nb->offs, nb->noffs, sh->elem_bytes,
                             (uintptr_t)ob->ptr, ob->offs, ob->noffs, ob->shape.elem_bytes)) {
            static char why[128];
            snprintf(why, sizeof why, "bytes shared with tensor %d at %p (an output among "
                     "them)", o, ob->ptr);
            return why;
        }
    }
    return NULL;
}

static void step_set_tensor(fz *f, state *s)
{
    int32_t id = (int32_t)fz_range(f, 1, FLASHBWD_TENSOR_COUNT - 1);
    if (fz_chance(f, 16)) id = (int32_t)fz_i64_wild(f);
    binding nb;
    memset(&nb, 0, sizeof nb);
    const int alibi_rank = fz_chance(f, 2) ? 1 : 2;
    const int valid_id = fz_shape_of(&s->p, id, alibi_rank, &nb.shape);

    /* Strides: NULL (packed), packed, or per-dimension picks; a rank that may be wrong. */
    int64_t strides[6] = {0}, packed[4] = {0};
    if (valid_id) fz_packed(&nb.shape, packed);
    const int64_t interleave = fz_range(f, 1, 3);
    int32_t num_strides = valid_id ? nb.shape.rank : (int32_t)fz_range(f, 0, 4);
    const uint32_t stride_kind = fz_below(f, 4);
    if (fz_chance(f, 12)) num_strides = (int32_t)fz_range(f, -1, 6);
    for (int i = 0; i < 6; ++i) {
        const int64_t pk = i < 4 ? packed[i] : 1;
        const int64_t outer = i + 1 < (valid_id ? nb.shape.rank : 0) ? interleave : 1;
        strides[i] = stride_kind == 3 ? fz_stride(f, pk * outer) : pk * outer;
    }
    /* The library gets exactly num_strides entries on the heap: ASan sees any overread. */
    int64_t *sp = NULL;
    if (stride_kind != 0) {
        const size_t n = num_strides > 0 ? (size_t)num_strides : 0;
        sp = malloc(n ? n * sizeof *sp : 1);
        memcpy(sp, strides, n * sizeof *sp);
    }
    if (valid_id) { /* the binding the library should record, if it accepts */
        nb.rank = sp ? num_strides : nb.shape.rank;
        if (id == FLASHBWD_TENSOR_ALIBI_SLOPES && !sp) nb.rank = 1;
        if (nb.rank >= 1 && nb.rank <= 4) {
            fz_shape_of(&s->p, id, nb.rank, &nb.shape);
            for (int i = 0; i < nb.rank; ++i) nb.stride[i] = strides[i];
            if (!sp) fz_packed(&nb.shape, nb.stride);
        }
    }

    /* Pointer. */
    const int64_t last = valid_id && nb.rank >= 1 && nb.rank <= 4 && nb.rank == nb.shape.rank
                             ? fz_last_offset(&nb.shape, nb.stride, nb.rank) : -1;
    const int64_t span = last >= 0 && last < OWN_LIMIT ? (last + 1) * (int64_t)nb.shape.elem_bytes
                                                        : -1;
    switch (fz_below(f, 6)) {
    case 0: nb.ptr = NULL; break;
    case 1: case 2:
        if (span > 0) {
            nb.own_bytes = (size_t)span;
            nb.own = malloc(nb.own_bytes); /* 16-byte aligned: fits every rule */
            fill_random(&s->rng, nb.own, nb.own_bytes);
            nb.ptr = nb.own, nb.real = 1;
            break;
        }
        /* fall through: too large to back */
    case 3: case 4: {
        const int64_t off = (int64_t)fz_below(f, ARENA_BYTES / 2) &
                            (fz_chance(f, 6) ? ~(int64_t)0 : ~(int64_t)15);
        nb.ptr = s->arena + off;
        nb.real = span >= 0 && off + span <= ARENA_BYTES;
        break;
    }
    default: nb.ptr = wild_pointer(f); break;
    }

    const int32_t st = flashbwd_plan_set_tensor(s->plan, id, nb.ptr, sp, num_strides);
    free(sp);
    if (st != FLASHBWD_OK) {
        fz_check_failure(st, s->plan, "set_tensor");
        FZ_CHECK(valid_id || st == FLASHBWD_ERR_INVALID_VALUE, "bad id %d gave %d", id, st);
        FZ_CHECK(!(valid_id && nb.ptr == NULL), "unbinding tensor %d failed with %d", id, st);
        binding_free(&nb);
        return;
    }
    FZ_CHECK(valid_id, "set_tensor accepted id %d, which is not valid for this plan", id);
    binding_free(&s->b[id]);
    if (!nb.ptr) {
        binding_free(&nb);
        return;
    }
    FZ_CHECK(nb.rank == nb.shape.rank, "tensor %d accepted with %d strides for rank %d", id,
             nb.rank, nb.shape.rank);
    binding_index(&nb);
    const char *why = binding_breaks_rules(s, id, &nb);
    FZ_CHECK(why == NULL, "set_tensor(id %d, %p) accepted a binding with %s", id, nb.ptr, why);
    s->b[id] = nb;
}

/* Bind every tensor a CPU execute reads, each packed in a heap block of its own (the
 * varlen lengths as a valid split), so that executes get past TENSOR_NOT_SET; later steps
 * then rebind, alias and break them. */
static void step_bind_all(state *s)
{
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        binding nb;
        memset(&nb, 0, sizeof nb);
        if (id == FLASHBWD_TENSOR_ALIBI_SLOPES || !fz_shape_of(&s->p, id, 2, &nb.shape)) continue;
        if (id == FLASHBWD_TENSOR_SEQUSED_Q || id == FLASHBWD_TENSOR_SEQUSED_K) continue;
        nb.rank = nb.shape.rank;
        fz_packed(&nb.shape, nb.stride);
        const int64_t last = fz_last_offset(&nb.shape, nb.stride, nb.rank);
        if (last < 0 || last >= OWN_LIMIT / 4) return;
        nb.own_bytes = (size_t)(last + 1) * nb.shape.elem_bytes;
        nb.own = malloc(nb.own_bytes);
        fill_random(&s->rng, nb.own, nb.own_bytes);
        if (id == FLASHBWD_TENSOR_CU_SEQLENS_Q || id == FLASHBWD_TENSOR_CU_SEQLENS_K) {
            const int64_t total = id == FLASHBWD_TENSOR_CU_SEQLENS_Q
                                      ? (s->p.total_q ? s->p.total_q : s->p.batch * s->p.seqlen_q)
                                      : (s->p.total_k ? s->p.total_k : s->p.batch * s->p.seqlen_k);
            const int64_t max = id == FLASHBWD_TENSOR_CU_SEQLENS_Q ? s->p.seqlen_q : s->p.seqlen_k;
            int32_t *cu = (int32_t *)nb.own;
            for (int64_t b = 0; b <= s->p.batch; ++b) cu[b] = (int32_t)(b * max < total ? b * max : total);
        }
        nb.ptr = nb.own, nb.real = 1;
        const int32_t st = flashbwd_plan_set_tensor(s->plan, id, nb.ptr, NULL, 0);
        if (st != FLASHBWD_OK) { /* only a tensor bound elsewhere can stand in the way */
            fz_check_failure(st, s->plan, "set_tensor (bind all)");
            FZ_CHECK(st == FLASHBWD_ERR_OVERLAP, "a packed heap tensor %d was refused: %s", id,
                     flashbwd_last_error());
            binding_free(&nb);
            continue;
        }
        binding_index(&nb);
        const char *why = binding_breaks_rules(s, id, &nb);
        FZ_CHECK(why == NULL, "set_tensor(id %d, %p) accepted a binding with %s", id, nb.ptr, why);
        binding_free(&s->b[id]);
        s->b[id] = nb;
    }
}

/* --- set_workspace ------------------------------------------------------------------------ */

static void step_set_workspace(fz *f, state *s)
{
    const size_t align = s->cuda ? 256 : sizeof(float);
    void *ptr = NULL;
    size_t bytes = s->need_ws;
    unsigned char *own = NULL;
    int real = 0;
    switch (fz_below(f, 6)) {
    case 0: ptr = NULL, bytes = (size_t)fz_bits(f, 8); break;
    case 1: bytes = s->need_ws > 0 ? s->need_ws - (size_t)fz_range(f, 1, 8) : 0; /* small */
        /* fall through */
    case 2: case 3: {
        if (fz_chance(f, 2)) bytes += (size_t)fz_range(f, 0, 64);
        const size_t alloc = (bytes > s->need_ws ? bytes : s->need_ws) + 256;
        if (alloc > (size_t)64 << 20) break;
        own = aligned_alloc(256, (alloc + 255) / 256 * 256);
        const size_t shift = fz_chance(f, 6) ? (size_t)fz_range(f, 1, 255) : 0;
        ptr = own + shift;
        real = shift + bytes <= alloc;
        break;
    }
    default: ptr = wild_pointer(f), bytes = (size_t)fz_i64_wild(f); break;
    }
    const int32_t st = flashbwd_plan_set_workspace(s->plan, ptr, bytes);
    if (st != FLASHBWD_OK) {
        fz_check_failure(st, s->plan, "set_workspace");
        if (ptr && (uintptr_t)ptr % align)
            FZ_CHECK(st == FLASHBWD_ERR_MISALIGNED, "misaligned workspace gave %d", st);
        else if (ptr && bytes < s->need_ws)
            FZ_CHECK(st == FLASHBWD_ERR_WORKSPACE_TOO_SMALL, "small workspace gave %d", st);
        else
            fz_fail("set_workspace(%p, %zu) of a plan needing %zu failed with %d", ptr, bytes,
                    s->need_ws, st);
        free(own);
        return;
    }
    FZ_CHECK(!ptr || ((uintptr_t)ptr % align == 0 && bytes >= s->need_ws),
             "set_workspace accepted %p (%zu bytes) for a plan needing %zu", ptr, bytes,
             s->need_ws);
    free(s->ws_own);
    s->ws = ptr, s->ws_bytes = ptr ? bytes : 0, s->ws_real = real, s->ws_own = own;
}

/* --- execute ------------------------------------------------------------------------------ */

/* Mark every byte of the output elements of tensor b inside [base, base + n). */
static void mark_output(const binding *b, const unsigned char *base, size_t n, unsigned char *mask)
{
    int64_t idx[4] = {0}, count = 1;
    for (int i = 0; i < b->rank; ++i) count *= b->shape.ext[i];
    for (int64_t e = 0; e < count; ++e) {
        int64_t o = 0;
        for (int i = 0; i < b->rank; ++i) o += idx[i] * b->stride[i];
        const intptr_t at = (intptr_t)((const unsigned char *)b->ptr - base) +
                            (intptr_t)(o * (int64_t)b->shape.elem_bytes);
        for (size_t k = 0; k < b->shape.elem_bytes; ++k)
            if (at + (intptr_t)k >= 0 && at + (intptr_t)k < (intptr_t)n) mask[at + k] = 1;
        for (int i = b->rank - 1; i >= 0; --i) {
            if (++idx[i] < b->shape.ext[i]) break;
            idx[i] = 0;
        }
    }
}

/* Elements of a binding, saturating at INT64_MAX (a valid plan's extents reach 2^60). */
static int64_t elements(const binding *b)
{
    int64_t n = 1;
    for (int i = 0; i < b->rank; ++i) {
        if (b->shape.ext[i] > INT64_MAX / n) return INT64_MAX;
        n *= b->shape.ext[i];
    }
    return n;
}

/* Compare a region with its copy: every changed byte must be an output element byte. */
static void check_writes(const state *s, const unsigned char *base, const unsigned char *before,
                         size_t n, const char *what)
{
    unsigned char *mask = calloc(n, 1);
    for (int32_t id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
        if (s->b[id].ptr) mark_output(&s->b[id], base, n, mask);
    for (size_t i = 0; i < n; ++i)
        FZ_CHECK(base[i] == before[i] || mask[i],
                 "execute wrote byte %zu of %s, which is no output element", i, what);
    free(mask);
}

static void step_execute(state *s)
{
    int32_t missing = 0;
    int all_real = 1, small = 1;
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        const binding *b = &s->b[id];
        const int required = (id >= FLASHBWD_TENSOR_Q && id <= FLASHBWD_TENSOR_DV) ||
                             (s->p.varlen && (id == FLASHBWD_TENSOR_CU_SEQLENS_Q ||
                                              id == FLASHBWD_TENSOR_CU_SEQLENS_K));
        if (required && !b->ptr && !missing) missing = id;
        if (b->ptr && !b->real) all_real = 0;
        if (b->ptr && elements(b) > ENUM_LIMIT) small = 0;
    }
    const int ws_missing = s->need_ws > 0 && (!s->ws || s->ws_bytes < s->need_ws);
    if (!s->cuda && !missing && !ws_missing && (!all_real || (s->ws && !s->ws_real)))
        return; /* a CPU execute would read wild memory: the caller's fault, not a test */
    const double work = (double)s->p.batch * (double)s->p.heads_q * (double)s->p.seqlen_q *
                        (double)s->p.seqlen_k * (double)s->p.head_dim;
    if (!s->cuda && !missing && !ws_missing && work > 1e7) return; /* valid but slow */

    /* Snapshot the memory execute may touch, to check it writes only output elements. */
    unsigned char *arena_before = NULL, *own_before[FLASHBWD_TENSOR_COUNT] = {0};
    const int check = !s->cuda && small;
    if (check) {
        arena_before = malloc(ARENA_BYTES);
        memcpy(arena_before, s->arena, ARENA_BYTES);
        for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id)
            if (s->b[id].own) {
                own_before[id] = malloc(s->b[id].own_bytes);
                memcpy(own_before[id], s->b[id].own, s->b[id].own_bytes);
            }
    }
    const int32_t st = flashbwd_execute(s->plan, NULL);
    if (missing) {
        FZ_CHECK(st == FLASHBWD_ERR_TENSOR_NOT_SET, "execute without tensor %d gave %d",
                 missing, st);
        FZ_CHECK(strstr(flashbwd_plan_last_error(s->plan), fb_tensor_name(missing)) != NULL,
                 "TENSOR_NOT_SET message \"%s\" does not name tensor %d",
                 flashbwd_plan_last_error(s->plan), missing);
    } else if (ws_missing) {
        FZ_CHECK(st == FLASHBWD_ERR_WORKSPACE_TOO_SMALL, "execute without workspace gave %d", st);
    } else if (s->cuda) {
        FZ_CHECK(st == FLASHBWD_ERR_NOT_SUPPORTED, "planning-only execute gave %d", st);
    } else {
        FZ_CHECK(st == FLASHBWD_OK || (s->p.varlen && st == FLASHBWD_ERR_INVALID_LENGTHS),
                 "CPU execute gave %d: %s", st, flashbwd_last_error());
    }
    if (st != FLASHBWD_OK) fz_check_failure(st, s->plan, "execute");
    else FZ_CHECK(flashbwd_plan_last_error(s->plan)[0] == '\0', "OK left a plan message");
    if (check) {
        check_writes(s, s->arena, arena_before, ARENA_BYTES, "the arena");
        for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id)
            if (own_before[id]) {
                check_writes(s, s->b[id].own, own_before[id], s->b[id].own_bytes,
                             fb_tensor_name(id));
                free(own_before[id]);
            }
        free(arena_before);
    }
}

/* --- The model against the plan (white-box) ---------------------------------------------- */

static void check_model(const state *s)
{
    const flashbwd_plan *plan = s->plan;
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        const binding *b = &s->b[id];
        const fb_tensor *t = &plan->tensors[id];
        FZ_CHECK(t->ptr == b->ptr, "tensor %d bound to %p, model %p", id, t->ptr, b->ptr);
        if (!b->ptr) continue;
        FZ_CHECK(t->rank == b->rank, "tensor %d rank %d, model %d", id, t->rank, b->rank);
        for (int i = 0; i < b->rank; ++i)
            FZ_CHECK(t->stride[i] == b->stride[i], "tensor %d stride[%d] %lld, model %lld", id,
                     i, (long long)t->stride[i], (long long)b->stride[i]);
    }
    FZ_CHECK(plan->workspace == s->ws, "workspace %p, model %p", plan->workspace, s->ws);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    state s;
    memset(&s, 0, sizeof s);
    s.cuda = fz_chance(&f, 3);
    s.p = fz_problem(&f, s.cuda ? FLASHBWD_BACKEND_CUDA : FLASHBWD_BACKEND_CPU, 12);
    s.p.deterministic = 0; /* the CUDA path rejects it; keep the plans coming */
    if (flashbwd_plan_create(&s.p, &s.plan) != FLASHBWD_OK) return 0;
    flashbwd_plan_workspace_size(s.plan, &s.need_ws);
    s.rng = fz_bits(&f, 8);
    s.arena = aligned_alloc(256, ARENA_BYTES);
    fill_random(&s.rng, s.arena, ARENA_BYTES);

    if (fz_chance(&f, 2)) step_bind_all(&s);
    if (fz_chance(&f, 2)) step_set_workspace(&f, &s);
    const int steps = (int)fz_range(&f, 1, 24);
    for (int i = 0; i < steps && f.n > 0; ++i) {
        switch (fz_below(&f, 10)) {
        case 0: step_set_workspace(&f, &s); break;
        case 1: step_execute(&s); break;
        case 2: step_bind_all(&s); break;
        default: step_set_tensor(&f, &s); break;
        }
        check_model(&s);
    }
    step_execute(&s);
    flashbwd_plan_destroy(s.plan);
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) binding_free(&s.b[id]);
    free(s.ws_own);
    free(s.arena);
    return 0;
}
