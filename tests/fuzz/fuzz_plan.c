/* fuzz_plan.c — libFuzzer target: flashbwd_plan_create() and flashbwd_plan_get_info() on
 * arbitrary structs.
 *
 * Each input describes one flashbwd_problem: a struct_size (the current one, older/shorter,
 * longer, or wild), then either raw bytes or a small structured problem (tests/fuzz/
 * fuzz_common.c) with a zero or random tail past the fields this library knows. The struct
 * lives in a heap block of exactly struct_size bytes, so ASan reports any read past what
 * the caller declared. Checks, beyond "no sanitizer report":
 *   - struct_size below the oldest size or above 4096, or a non-zero unknown tail, gives
 *     FLASHBWD_ERR_STRUCT_SIZE;
 *   - a failure leaves *out NULL and a message that starts with the status's name;
 *   - an accepted problem satisfies every rule flashbwd.h states for its fields;
 *   - get_info honours its own struct_size rules, and its figures agree with the problem.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KNOWN FLASHBWD_PROBLEM_STRUCT_SIZE
#define MAX_STRUCT 4096 /* flashbwd.h: no flashbwd struct is larger (validate.c) */

static size_t pick_struct_size(fz *f)
{
    switch (fz_below(f, 8)) {
    case 0: return KNOWN - (size_t)fz_range(f, 1, 24);
    case 1: return KNOWN + (size_t)fz_range(f, 1, 64);
    case 2: return (size_t)fz_range(f, 0, MAX_STRUCT + 64);
    case 3: return (size_t)fz_i64_wild(f);
    default: return KNOWN;
    }
}

/* The rules flashbwd.h gives for each field, applied to the bytes the library may read
 * (fields past struct_size read as 0). Returns NULL or the first rule an accepted problem
 * breaks. */
static const char *broken_rule(const flashbwd_problem *p)
{
    if (p->backend < 0 || p->backend > 2) return "backend";
    if (p->dtype < 0 || p->dtype > 2) return "dtype";
    if (p->head_dim < 8 || p->head_dim > 256 || p->head_dim % 8) return "head_dim";
    if (p->batch < 1 || p->heads_q < 1 || p->seqlen_q < 1 || p->seqlen_k < 1) return "sizes";
    if (p->heads_kv < 0 || (p->heads_kv && p->heads_q % p->heads_kv)) return "heads_kv";
    if (p->device < 0) return "device";
    if (!isfinite(p->softmax_scale) || p->softmax_scale < 0) return "softmax_scale";
    if (!isfinite(p->softcap) || p->softcap < 0) return "softcap";
    if ((p->causal | p->use_window | p->varlen | p->deterministic) & ~1) return "flags";
    if (!p->varlen && (p->total_q || p->total_k)) return "total without varlen";
    if (p->total_q < 0 || p->total_k < 0) return "total";
    if (!p->use_window && (p->window_left || p->window_right)) return "window without use";
    if (p->sm_count < 0 || p->smem_per_block < 0) return "sm_count/smem";
    if (p->smem_per_block && !p->arch) return "smem without arch";
    if (p->reserved0) return "reserved0";
    /* This build has no CUDA: a CUDA plan can only be a planning-only one. */
    if (p->backend != FLASHBWD_BACKEND_CPU && p->arch == 0) return "CUDA plan without a GPU";
    return NULL;
}

static void check_info(fz *f, const flashbwd_plan *plan, const flashbwd_problem *p)
{
    size_t ws = 0;
    FZ_CHECK(flashbwd_plan_workspace_size(plan, &ws) == FLASHBWD_OK, "workspace_size failed");
    size_t isz = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
    switch (fz_below(f, 4)) {
    case 0: isz = (size_t)fz_range(f, 0, MAX_STRUCT + 16); break;
    case 1: isz += (size_t)fz_range(f, 1, 32); break;
    default: break;
    }
    const size_t alloc = isz < sizeof(size_t) ? sizeof(size_t) : isz;
    unsigned char *buf = malloc(alloc);
    memset(buf, 0xa5, alloc);
    memcpy(buf, &isz, sizeof isz);
    const int32_t st = flashbwd_plan_get_info(plan, (flashbwd_plan_info *)buf);
    if (isz < FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0 || isz > MAX_STRUCT) {
        FZ_CHECK(st == FLASHBWD_ERR_STRUCT_SIZE, "get_info(struct_size %zu) gave %d", isz, st);
        fz_check_failure(st, NULL, "get_info");
        free(buf);
        return;
    }
    FZ_CHECK(st == FLASHBWD_OK, "get_info(struct_size %zu) gave %d", isz, st);
    flashbwd_plan_info info;
    memcpy(&info, buf, sizeof info);
    for (size_t i = sizeof info; i < isz; ++i)
        FZ_CHECK(buf[i] == 0, "get_info left byte %zu of a %zu-byte struct unzeroed", i, isz);
    FZ_CHECK(info.workspace_bytes == ws, "info.workspace_bytes %zu != workspace_size %zu",
             info.workspace_bytes, ws);
    const int32_t backend = p->backend ? p->backend : FLASHBWD_BACKEND_CUDA;
    FZ_CHECK(info.backend == backend, "info.backend %d for problem.backend %d", info.backend,
             p->backend);
    if (backend == FLASHBWD_BACKEND_CUDA) {
        const int64_t heads_kv = p->heads_kv ? p->heads_kv : p->heads_q;
        FZ_CHECK(info.arch == p->arch, "info.arch %d != problem.arch %d", info.arch, p->arch);
        FZ_CHECK(info.kernel_head_dim >= p->head_dim, "kernel_head_dim %d < head_dim %d",
                 info.kernel_head_dim, p->head_dim);
        FZ_CHECK(info.smem_bytes > 0 && info.smem_bytes <= info.smem_per_block,
                 "smem_bytes %d outside (0, %d]", info.smem_bytes, info.smem_per_block);
        FZ_CHECK(info.num_launches == (heads_kv != p->heads_q ? 4 : 3), "num_launches %d",
                 info.num_launches);
        for (int l = 0; l < info.num_launches; ++l)
            for (int d = 0; d < 3; ++d)
                FZ_CHECK(l == FLASHBWD_LAUNCH_CONVERT_DQ && info.grid[l][0] == 0
                             ? info.grid[l][d] == 0 && info.block[l][d] == 0
                             : info.grid[l][d] >= 1 && info.block[l][d] >= 1,
                         "launch %d has grid/block %d/%d in dimension %d", l, info.grid[l][d],
                         info.block[l][d], d);
        FZ_CHECK(ws > 0, "a CUDA plan needs a workspace (dQ accumulators)");
    } else {
        FZ_CHECK(info.arch == 0 && info.num_launches == 0, "CPU plan reports arch %d, %d "
                 "launches", info.arch, info.num_launches);
    }
    free(buf);
}

/* The lookups that take any integer: never NULL, never empty, known ids only. */
static void check_lookups(fz *f)
{
    const int32_t v = (int32_t)fz_i64_wild(f);
    const char *name = flashbwd_status_name(v), *text = flashbwd_status_string(v);
    FZ_CHECK(name && text && name[0] && text[0], "status %d has no name or text", v);
    const int known = v >= 0 && v < FLASHBWD_STATUS_COUNT;
    FZ_CHECK(known == (strcmp(name, "FLASHBWD_ERR_UNKNOWN") != 0), "status %d is named %s", v,
             name);
    const size_t sz = flashbwd_struct_size(v);
    FZ_CHECK(sz == (v == FLASHBWD_STRUCT_PROBLEM ? FLASHBWD_PROBLEM_STRUCT_SIZE
                    : v == FLASHBWD_STRUCT_PLAN_INFO ? FLASHBWD_PLAN_INFO_STRUCT_SIZE : 0),
             "flashbwd_struct_size(%d) = %zu", v, sz);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz f = {data, size};
    check_lookups(&f);
    const size_t struct_size = pick_struct_size(&f);
    const int raw = fz_chance(&f, 3);
    const int random_tail = fz_chance(&f, 2);
    /* The caller owns exactly struct_size bytes; a wild size gets the known struct only,
     * which the library must reject without reading (> 4096). */
    size_t alloc = struct_size <= MAX_STRUCT + 64 ? struct_size : KNOWN;
    if (alloc < sizeof(size_t)) alloc = sizeof(size_t);
    unsigned char *buf = calloc(1, alloc);
    flashbwd_problem p;
    if (raw) {
        fz_bytes(&f, &p, sizeof p);
    } else {
        static const int32_t backends[] = {FLASHBWD_BACKEND_CPU, FLASHBWD_BACKEND_CUDA, 0, 3};
        const int32_t backend = backends[fz_below(&f, 4)];
        p = fz_problem(&f, backend == 0 ? FLASHBWD_BACKEND_CUDA : backend, 64);
        if (backend != FLASHBWD_BACKEND_CPU) p.backend = backend;
        if (backend == 0 && fz_chance(&f, 2)) p.arch = 0; /* ask for a real device */
    }
    memcpy(buf, &p, alloc < sizeof p ? alloc : sizeof p);
    if (random_tail && alloc > sizeof p) fz_bytes(&f, buf + sizeof p, alloc - sizeof p);
    memcpy(buf, &struct_size, sizeof struct_size);

    flashbwd_plan *plan = (flashbwd_plan *)&f; /* must be overwritten */
    const int32_t st = flashbwd_plan_create((const flashbwd_problem *)buf, &plan);

    /* What the library may see: the first min(struct_size, known) bytes, the rest zero. */
    flashbwd_problem seen;
    memset(&seen, 0, sizeof seen);
    if (struct_size <= MAX_STRUCT)
        memcpy(&seen, buf, struct_size < sizeof seen ? struct_size : sizeof seen);
    int tail_set = 0;
    for (size_t i = KNOWN; i < struct_size && i < alloc; ++i) tail_set |= buf[i] != 0;

    if (st != FLASHBWD_OK) {
        FZ_CHECK(plan == NULL, "failed create (%d) left *out = %p", st, (void *)plan);
        fz_check_failure(st, NULL, "plan_create");
        if (struct_size < FLASHBWD_PROBLEM_STRUCT_SIZE_1_0 || struct_size > MAX_STRUCT ||
            tail_set)
            FZ_CHECK(st == FLASHBWD_ERR_STRUCT_SIZE, "struct_size %zu (tail %d) gave %d",
                     struct_size, tail_set, st);
    } else {
        FZ_CHECK(plan != NULL, "create succeeded without a plan");
        FZ_CHECK(struct_size >= FLASHBWD_PROBLEM_STRUCT_SIZE_1_0 && struct_size <= MAX_STRUCT &&
                     !tail_set, "struct_size %zu (tail %d) was accepted", struct_size, tail_set);
        const char *rule = broken_rule(&seen);
        FZ_CHECK(rule == NULL, "an accepted problem breaks the rule on %s", rule);
        FZ_CHECK(flashbwd_plan_last_error(plan)[0] == '\0', "new plan has message \"%s\"",
                 flashbwd_plan_last_error(plan));
        check_info(&f, plan, &seen);
        /* Nothing is bound: execute must say which tensor is missing, touching nothing. */
        const int32_t ex = flashbwd_execute(plan, NULL);
        FZ_CHECK(ex == FLASHBWD_ERR_TENSOR_NOT_SET, "execute on a bare plan gave %d", ex);
        fz_check_failure(ex, plan, "execute");
        flashbwd_plan_destroy(plan);
    }
    free(buf);
    return 0;
}
