/* plan.c — plan lifecycle: create, destroy, info, workspace; versions and struct sizes.
 *
 * Creation does all the expensive work once (validate → device properties → config →
 * kernel preparation → workspace layout → launch shapes) and the result never changes.
 * Destruction is host-only: the plan owns no device memory and makes no CUDA call.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

_Static_assert(FLASHBWD_PROBLEM_STRUCT_SIZE ==
                   offsetof(flashbwd_problem, reserved0) + sizeof(int32_t),
               "FLASHBWD_PROBLEM_STRUCT_SIZE is stale");
_Static_assert(FLASHBWD_PLAN_INFO_STRUCT_SIZE ==
                   offsetof(flashbwd_plan_info, workspace_bytes) + sizeof(size_t),
               "FLASHBWD_PLAN_INFO_STRUCT_SIZE is stale");

uint32_t flashbwd_version(void) { return FLASHBWD_VERSION; }

size_t flashbwd_struct_size(int32_t struct_id)
{
    switch (struct_id) {
    case FLASHBWD_STRUCT_PROBLEM: return FLASHBWD_PROBLEM_STRUCT_SIZE;
    case FLASHBWD_STRUCT_PLAN_INFO: return FLASHBWD_PLAN_INFO_STRUCT_SIZE;
    default: return 0;
    }
}

/* A representative SM count per architecture for plans made from explicit properties. */
static int32_t nominal_sm_count(int32_t arch)
{
    switch (arch) {
    case 80: return 108; /* A100 */
    case 86: return 84;  /* RTX A6000 */
    case 87: return 16;  /* Jetson AGX Orin */
    case 89: return 128; /* RTX 4090 */
    default: return 132; /* H100/H200 SXM */
    }
}

static int32_t plan_cuda(flashbwd_plan *plan)
{
    const fb_problem_norm *p = &plan->prob;
    if (p->explicit_arch) {
        plan->planning_only = 1;
        plan->props.arch = p->explicit_arch;
        plan->props.smem_per_block =
            p->explicit_smem ? p->explicit_smem : fb_arch_smem_limit(p->explicit_arch);
        plan->props.sm_count = nominal_sm_count(p->explicit_arch);
    } else {
        FB_TRY(fb_device_get(plan, p->device, &plan->props));
    }
    if (p->sm_count_override) plan->props.sm_count = p->sm_count_override;
    FB_TRY(fb_config_select(plan, plan->props.arch, p->head_dim, plan->props.smem_per_block,
                            &plan->config));
    plan->launches.kernel_index = -1;
    if (!plan->planning_only) {
        const fb_kernel_key key = {p->dtype, plan->config.arch_class,
                                   plan->config.kernel_head_dim};
        plan->launches.kernel_index = fb_kernel_find(&key);
        FB_FAIL_IF(plan, plan->launches.kernel_index < 0, FLASHBWD_ERR_NOT_SUPPORTED,
                   "this build has no kernel for %s, head_dim %d on sm_%d (configuration "
                   "sm_%d/%d); rebuild with that head dim and architecture",
                   p->dtype == FLASHBWD_DTYPE_FP16 ? "fp16" : "bf16", p->head_dim,
                   plan->props.arch, plan->config.arch_class, plan->config.kernel_head_dim);
        /* Every main kernel's limit (the launch table picks one): the larger need, the
         * split kernel's only where it fits the device (else it never runs). */
        const fb_config *c = &plan->config;
        const int32_t smem = c->split_smem_bytes > c->smem_bytes &&
                                     c->split_smem_bytes <= plan->props.smem_per_block
                                 ? c->split_smem_bytes
                                 : c->smem_bytes;
        FB_TRY(fb_device_prepare_kernel(plan, p->device, plan->launches.kernel_index, smem));
    }
    FB_TRY(fb_launches_plan(plan));
    return FLASHBWD_OK;
}

int32_t flashbwd_plan_create(const flashbwd_problem *problem, flashbwd_plan **out)
{
    FB_FAIL_IF(NULL, out == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "out (the plan pointer) is NULL");
    *out = NULL;
    fb_problem_norm norm;
    FB_TRY(fb_problem_read(problem, &norm));
    flashbwd_plan *plan = calloc(1, sizeof *plan);
    FB_FAIL_IF(NULL, plan == NULL, FLASHBWD_ERR_OUT_OF_MEMORY,
               "allocating the plan (%zu bytes) failed", sizeof *plan);
    plan->prob = norm;
    atomic_init(&plan->busy, 0);
    int32_t status = norm.backend == FLASHBWD_BACKEND_CUDA ? plan_cuda(plan) : FLASHBWD_OK;
    if (status == FLASHBWD_OK) status = fb_workspace_plan(plan);
    if (status == FLASHBWD_OK && plan->launch_graph && !plan->planning_only)
        status = fb_device_build_graph(plan, norm.device); /* last: on failure, no graph */
    if (status != FLASHBWD_OK) {
        free(plan); /* the message is already in the thread's buffer */
        return status;
    }
    *out = plan;
    return FLASHBWD_OK;
}

/* Host-only: the launch graph is queued for the next plan creation on its device to
 * destroy (kernels/launch.h, fb_graph_release). */
void flashbwd_plan_destroy(flashbwd_plan *plan)
{
    if (plan) fb_graph_release(plan->graph);
    free(plan);
}

int32_t flashbwd_plan_get_info(const flashbwd_plan *plan, flashbwd_plan_info *info)
{
    FB_FAIL_IF(NULL, plan == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "plan is NULL");
    FB_FAIL_IF(NULL, info == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "info is NULL");
    const size_t size = info->struct_size;
    FB_FAIL_IF(NULL, size < FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0 || size > 4096,
               FLASHBWD_ERR_STRUCT_SIZE,
               "info.struct_size = %zu; expected FLASHBWD_PLAN_INFO_STRUCT_SIZE (%zu)", size,
               (size_t)FLASHBWD_PLAN_INFO_STRUCT_SIZE);
    flashbwd_plan_info r;
    memset(&r, 0, sizeof r);
    r.struct_size = size;
    r.backend = plan->prob.backend;
    r.arch = plan->props.arch;
    r.sm_count = plan->props.sm_count;
    r.smem_per_block = plan->props.smem_per_block;
    if (plan->prob.backend == FLASHBWD_BACKEND_CUDA) {
        r.kernel_head_dim = plan->config.kernel_head_dim;
        r.block_m = plan->config.block_m;
        r.block_n = plan->config.block_n;
        r.num_threads = plan->launches.launch[FLASHBWD_LAUNCH_MAIN].block[0];
        r.stages_q = r.stages_do = plan->config.stages;
        r.smem_bytes = plan->launches.launch[FLASHBWD_LAUNCH_MAIN].smem_bytes;
        if (plan->launches.split) r.stages_q = r.stages_do = plan->config.split_stages;
        r.num_launches = plan->launches.num_launches;
        for (int i = 0; i < r.num_launches; ++i)
            for (int j = 0; j < 3; ++j) {
                r.grid[i][j] = plan->launches.launch[i].grid[j];
                r.block[i][j] = plan->launches.launch[i].block[j];
            }
    }
    r.workspace_bytes = plan->ws.total_bytes;
    const size_t n = size < sizeof r ? size : sizeof r;
    memcpy(info, &r, n);
    if (size > n) memset((char *)info + n, 0, size - n);
    return FLASHBWD_OK;
}

int32_t flashbwd_plan_workspace_size(const flashbwd_plan *plan, size_t *bytes)
{
    FB_FAIL_IF(NULL, plan == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "plan is NULL");
    FB_FAIL_IF(NULL, bytes == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "bytes is NULL");
    *bytes = plan->ws.total_bytes;
    return FLASHBWD_OK;
}

int32_t flashbwd_plan_set_workspace(flashbwd_plan *plan, void *ptr, size_t bytes)
{
    FB_FAIL_IF(NULL, plan == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "plan is NULL");
    /* BUSY goes to this thread's message only: the plan's belongs to the call in flight,
     * and writing it here would race with that call. */
    FB_FAIL_IF(NULL, atomic_exchange(&plan->busy, 1), FLASHBWD_ERR_BUSY,
               "flashbwd_plan_set_workspace: the plan is in use by another call");
    int32_t status = FLASHBWD_OK;
    const size_t align = plan->prob.backend == FLASHBWD_BACKEND_CUDA ? 256 : sizeof(float);
    if (ptr && (uintptr_t)ptr % align != 0)
        status = fb_fail(plan, FLASHBWD_ERR_MISALIGNED,
                         "workspace pointer %p is not %zu-byte aligned", ptr, align);
    else if (ptr && bytes < plan->ws.total_bytes)
        status = fb_fail(plan, FLASHBWD_ERR_WORKSPACE_TOO_SMALL,
                         "workspace of %zu bytes is smaller than the %zu this plan needs", bytes,
                         plan->ws.total_bytes);
    if (status == FLASHBWD_OK) {
        plan->workspace = ptr;
        plan->workspace_bytes = ptr ? bytes : 0;
        fb_clear_plan_message(plan);
    }
    atomic_store(&plan->busy, 0);
    return status;
}
