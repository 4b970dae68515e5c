/* launches.c — the grid and block shape of every kernel execute enqueues, computed once at
 * plan time from the problem and the chosen configuration (flashbwd_plan_info reports them).
 *
 *   preprocess   (m_blocks, heads_q, batch)   one CTA per query block: D, LSE*log2(e), zeroing
 *   main         (n_blocks, heads_q, batch)   one CTA per key block: dK, dV, dQ partials (with
 *                                             the dQ conversion folded in: dQ too)
 *   convert dQ   (m_blocks, heads_q, batch)   or, folded, grid 0 and not launched
 *   convert dKV  (n_blocks, heads_kv, batch)  GQA only
 * The conversion is folded into the main kernel when seqlen_k is at most the row's FOLD, or
 * for a plan with a mask (causal or a window) its FOLDM, and above its FMIN (config_table.h).
 * FLASHBWD_FORCE_DQ_FOLD=0|1 (testing) overrides that, so the GPU suite can run both
 * kernels at any length. FLASHBWD_FORCE_HEADS_ON_X=0|1 (testing, A/B of the grid order)
 * puts key blocks or heads on the main grid's x for every plan (heads only while the key
 * blocks fit y's 65535).
 * The split kernel (config table SPLIT, SST) replaces the main kernel for the plans it
 * serves: no deterministic mode, no softcap, seqlen_k above the row's SPLIT (at hd128, a
 * main grid of at most 2^30 CTAs). It converts dQ
 * in its own pass. FLASHBWD_FORCE_SPLIT=0|1 (testing) turns it off, or on for every plan it
 * can serve.
 * Where no tile can need a mask (no window, not varlen, whole key blocks) the split
 * kernel's full-tile instance serves the plan's executes that bind no ALiBi slopes
 * (FB_SPLIT_FULL rows, up to FB_SPLIT_FULL_KEYS keys); FLASHBWD_SPLIT_FULL=0|1 (testing)
 * keeps the plain instance, or takes the full-tile one at any length.
 * Short split plans zero their dQ sums in the main kernel, not the preprocess
 * (FB_SPLIT_DQ_ZERO_BYTES; FLASHBWD_SPLIT_DQ_ZERO=0|1 for tests and A/B runs).
 * The plan also keeps the launches as one CUDA graph (built at plan creation, replayed by
 * execute); FLASHBWD_LAUNCH_GRAPH=0 (testing, or a fallback) launches them one by one.
 * With varlen, m_blocks and n_blocks cover the longest sequence; CTAs past a sequence's
 * end return at once.
 */
#include <stdlib.h>
#include <string.h>

#include "config_table.h"
#include "internal.h"

static void set(fb_launch_dims *l, int64_t gx, int64_t gy, int64_t gz, int smem)
{
    l->grid[0] = (int32_t)gx, l->grid[1] = (int32_t)gy, l->grid[2] = (int32_t)gz;
    l->block[0] = FB_NUM_THREADS, l->block[1] = 1, l->block[2] = 1;
    l->smem_bytes = smem;
}

/* A testing switch FLASHBWD_...=0|1: *on receives 0 or 1, or -1 when the variable is unset
 * or empty; anything else is INVALID_VALUE naming the variable. */
static int32_t env_switch(flashbwd_plan *plan, const char *name, int *on)
{
    const char *v = getenv(name);
    *on = -1;
    if (!v || !*v) return FLASHBWD_OK;
    FB_FAIL_IF(plan, strcmp(v, "0") && strcmp(v, "1"), FLASHBWD_ERR_INVALID_VALUE,
               "environment %s = \"%.16s\": expected 0 or 1", name, v);
    *on = v[0] == '1';
    return FLASHBWD_OK;
}

/* An A/B count from the environment: *n = -1 when unset, else a whole number >= 0; anything
 * else is INVALID_VALUE naming the variable and what it expects. */
static int32_t env_count(flashbwd_plan *plan, const char *name, const char *expected,
                         long long *n)
{
    const char *v = getenv(name);
    *n = -1;
    if (!v || !*v) return FLASHBWD_OK;
    char *end = NULL;
    const long long x = strtoll(v, &end, 10);
    FB_FAIL_IF(plan, *end || x < 0, FLASHBWD_ERR_INVALID_VALUE,
               "environment %s = \"%.16s\": expected %s", name, v, expected);
    *n = x;
    return FLASHBWD_OK;
}

int32_t fb_launches_plan(flashbwd_plan *plan)
{
    const fb_problem_norm *p = &plan->prob;
    fb_launch_table *t = &plan->launches;
    const int64_t m_blocks = fb_cdiv(p->seqlen_q, plan->config.block_m);
    const int64_t n_blocks = fb_cdiv(p->seqlen_k, plan->config.block_n);
    FB_FAIL_IF(plan, m_blocks > INT32_MAX || n_blocks > INT32_MAX, FLASHBWD_ERR_OVERFLOW,
               "too many blocks for a CUDA grid (seqlen_q %lld, seqlen_k %lld)",
               (long long)p->seqlen_q, (long long)p->seqlen_k);
    set(&t->launch[FLASHBWD_LAUNCH_PREPROCESS], m_blocks, p->heads_q, p->batch, 0);
    const int masked = p->window_left >= 0 || p->window_right >= 0; /* causal: right = 0 */
    const fb_config *c = &plan->config;
    /* Where the split kernel derives its head and batch entry from its linear block index,
     * an int (FB_SPLIT_REFILL_DERIVED, kernels/bwd_split.cuh): grids of up to 2^30 CTAs. */
    const int64_t main_ctas = n_blocks * p->heads_q * p->batch;
    const int split_serves = c->split_stages > 0 && !p->deterministic && p->softcap == 0.0f &&
                             c->split_smem_bytes <= plan->props.smem_per_block &&
                             (!FB_SPLIT_REFILL_DERIVED(c->kernel_head_dim) ||
                              main_ctas <= (1 << 30));
    t->split = split_serves && c->split >= 0 && p->seqlen_k > c->split;
    int on;
    FB_TRY(env_switch(plan, "FLASHBWD_FORCE_SPLIT", &on));
    if (on >= 0) t->split = split_serves && on;
    /* The ring refill through TMA where the row has it; execute checks each call's tensors
     * (src/tma_maps.c). FLASHBWD_SPLIT_TMA=0 keeps cp.async, for A/B runs and tests. */
    t->split_tma = t->split && FB_SPLIT_TMA(c->kernel_head_dim);
    FB_TRY(env_switch(plan, "FLASHBWD_SPLIT_TMA", &on));
    if (on >= 0) t->split_tma = t->split_tma && on;
    /* Short split plans zero each head's dQ sums in the main kernel, not the preprocess
     * (kernels/dq_zero.cuh): the first four P warps of a head's CTAs, while their K and V
     * load, where the sums take at most FB_SPLIT_DQ_ZERO_BYTES; the tickets need fewer
     * than 2^17 key blocks. A head's other CTAs wait for the zeroing before they add, so
     * these plans put heads on x even without a mask: a head's CTAs then start a row of
     * heads apart instead of side by side, and find the zeroing done (same runs on the
     * H200, docs/performance.md: hd64 without a mask, key blocks on x, the zeroing cost
     * 1.6-3.5%; with heads on x it gained 1.3-1.6%, and heads on x alone were level).
     * FLASHBWD_SPLIT_DQ_ZERO=0|1 (testing, A/B) turns it off, or on at any length, on the
     * rows that have it. */
    const int64_t head_sums = fb_round_up(p->seqlen_q, plan->config.block_m) *
                              c->kernel_head_dim * 4;
    const int zero_ok = t->split && FB_SPLIT_DQ_ZERO_BYTES(c->kernel_head_dim) > 0 &&
                        n_blocks < (1 << 17);
    t->dq_zero_in_main = zero_ok && head_sums <= FB_SPLIT_DQ_ZERO_BYTES(c->kernel_head_dim);
    FB_TRY(env_switch(plan, "FLASHBWD_SPLIT_DQ_ZERO", &on));
    if (on >= 0) t->dq_zero_in_main = zero_ok && on;
    /* Main (the orders: kernels/grid_order.cuh): under a mask (causal or a window) key
     * blocks differ in length, and the hardware starts CTAs x fastest. With key blocks on x
     * it starts one head's CTAs after the other's, so a batch entry's last head starts its
     * longest CTAs in the last wave (a scheduling model: a 6-7% tail at 1k-8k causal keys).
     * Heads on x start every head's first key block, then every head's second: the longest
     * first (+1..+6% causal). But then the running CTAs stream every head's Q and dO, which
     * at 8k-16k keys (8-16 KB a query row over the heads) no longer fit L2. So heads go in
     * groups of G, each group's longest blocks first: the last group's longest block starts
     * while the rest of the grid still fills the SMs when G * n_blocks^2 / 2 CTA-steps cover
     * the SMs n_blocks deep, G >= 2 * SMs / n_blocks; and G >= 4, below which the last groups
     * still trail (measured on the H200). G is the least divisor of heads_q that satisfies
     * both, searched up to 1024 (heads_q, as before, where none does: short sequences). Same
     * run against heads on x, causal: hd64 +4% at 16k, hd256 +2% at 8k, level at 4k
     * (docs/performance.md).
     * Rows whose kernel maps no groups (FB_HEAD_GROUPS for bwd_main, FB_SPLIT_GROUPED for
     * the split kernel; config_table.h) put heads on x. The split kernel's plain instance,
     * where the row has one (FB_SPLIT_PLAIN), serves every plan with G = heads_q or no
     * mask; its grouped one the rest.
     * Without a mask the key blocks stay on x (heads on x cost 0-1.7% there: fewer CTAs
     * share a head's Q and dO in L2), but for the dQ zeroing's plans (above). The y
     * dimension holds 65535. */
    const int groups_ok = t->split ? FB_SPLIT_GROUPED(c->kernel_head_dim)
                                   : FB_HEAD_GROUPS(c->kernel_head_dim);
    int64_t group = 0;
    if (masked && n_blocks <= 65535) {
        group = p->heads_q;
        const int64_t tail = fb_cdiv(2 * (int64_t)plan->props.sm_count, n_blocks);
        for (int64_t g = tail > 4 ? tail : 4; groups_ok && g < p->heads_q && g <= 1024; ++g)
            if (p->heads_q % g == 0) {
                group = g;
                break;
            }
    }
    /* Past that, rows whose split kernel ran faster with key blocks on x at long masked
     * sequences keep them there (FB_SPLIT_KEYS_ON_X_FROM, config_table.h). */
    const int keys_x_from = FB_SPLIT_KEYS_ON_X_FROM(c->kernel_head_dim);
    if (masked && t->split && keys_x_from > 0 && n_blocks >= keys_x_from) group = 0;
    if (!masked && t->dq_zero_in_main && n_blocks <= 65535) group = p->heads_q;
    FB_TRY(env_switch(plan, "FLASHBWD_FORCE_HEADS_ON_X", &on));
    if (on >= 0) group = on && n_blocks <= 65535 ? p->heads_q : 0;
    /* FLASHBWD_HEAD_GROUP=G: heads in groups of G (0: key blocks on x), for A/B runs; rows
     * whose kernel maps no groups (hd96) take any G > 0 as heads on x. */
    long long g;
    FB_TRY(env_count(plan, "FLASHBWD_HEAD_GROUP", "0 or a divisor of heads_q", &g));
    if (g >= 0) {
        FB_FAIL_IF(plan, g > p->heads_q || (g > 0 && p->heads_q % g), FLASHBWD_ERR_INVALID_VALUE,
                   "environment FLASHBWD_HEAD_GROUP = %lld: expected 0 or a divisor of heads_q "
                   "(%lld)", g, (long long)p->heads_q);
        group = n_blocks <= 65535 ? (g > 0 && !groups_ok ? p->heads_q : g) : 0;
    }
    if (group > 0 && p->batch * (p->heads_q / group) > 65535) group = p->heads_q;
    t->head_group = (int32_t)group;
    t->split_grouped = t->split && (!FB_SPLIT_PLAIN(c->kernel_head_dim) ||
                                    (group > 0 && group < p->heads_q));
    /* The full-tile instance (FB_SPLIT_FULL) where no tile can need a mask: no window, no
     * varlen (whose sequences end anywhere) and whole key blocks; ALiBi is an execute-time
     * binding, so execute takes the plain instance when slopes are bound. Only up to
     * FB_SPLIT_FULL_KEYS keys, past which the plain instance runs faster.
     * FLASHBWD_SPLIT_FULL=0|1 (testing, A/B) keeps the plain instance, or takes the
     * full-tile one at any length where no tile can need a mask. */
    const int full_ok = t->split && !t->split_grouped && FB_SPLIT_FULL(c->kernel_head_dim) &&
                        !masked && !p->varlen && p->seqlen_k % plan->config.block_n == 0;
    t->split_full = full_ok && p->seqlen_k <= FB_SPLIT_FULL_KEYS;
    FB_TRY(env_switch(plan, "FLASHBWD_SPLIT_FULL", &on));
    if (on >= 0) t->split_full = full_ok && on;
    if (group > 0)
        set(&t->launch[FLASHBWD_LAUNCH_MAIN], group, n_blocks, p->batch * (p->heads_q / group),
            plan->config.smem_bytes);
    else
        set(&t->launch[FLASHBWD_LAUNCH_MAIN], n_blocks, p->heads_q, p->batch,
            plan->config.smem_bytes);
    const int32_t fold = masked ? plan->config.dq_fold_masked : plan->config.dq_fold;
    t->dq_in_main = (fold < 0 || p->seqlen_k <= fold) && p->seqlen_k > plan->config.dq_fold_min;
    FB_TRY(env_switch(plan, "FLASHBWD_FORCE_DQ_FOLD", &on));
    if (on >= 0) t->dq_in_main = on;
    FB_TRY(env_switch(plan, "FLASHBWD_LAUNCH_GRAPH", &on));
    plan->launch_graph = on != 0;
    if (t->split) {
        t->dq_in_main = 0;
        t->launch[FLASHBWD_LAUNCH_MAIN].smem_bytes = c->split_smem_bytes;
    }
    /* Split plans overlap the convert pass with the split kernel's last CTAs: each CTA
     * counts itself in on its head once its additions are done, and the convert pass, launched
     * once every split CTA has started (a programmatic edge in the plan's graph), converts
     * each head as soon as its count is complete (kernels/bwd_prepost.cuh), on the rows
     * that have it (FB_SPLIT_DQ_OVERLAP, config_table.h). The count is the head's first
     * dq_count slot, so never where the split kernel zeroes the sums (dq_zero.cuh's
     * protocol runs there; no row has both). FLASHBWD_DQ_OVERLAP=0 (testing, A/B) turns
     * it off. */
    t->dq_overlap = t->split && FB_SPLIT_DQ_OVERLAP(c->kernel_head_dim) && !t->dq_zero_in_main;
    FB_TRY(env_switch(plan, "FLASHBWD_DQ_OVERLAP", &on));
    if (on >= 0) t->dq_overlap = t->dq_overlap && on;
    /* Its order: the blocks of the (batch, head) pairs whose CTAs may still run when it
     * starts (the last wave: about 2 x SMs CTAs, n_blocks a pair) last and in grid order,
     * the others first from the newest back, whose sums are still in L2.
     * FLASHBWD_DQ_TAIL_PAIRS=N (A/B) sets how many pairs go last: 0 is the plain backward
     * order, a number past the pairs the grid order. */
    const int64_t pairs = p->batch * p->heads_q;
    int64_t tail_pairs = fb_cdiv(2 * (int64_t)plan->props.sm_count, n_blocks) + 1;
    long long forced_pairs;
    FB_TRY(env_count(plan, "FLASHBWD_DQ_TAIL_PAIRS", "a count >= 0", &forced_pairs));
    if (forced_pairs >= 0) tail_pairs = forced_pairs;
    t->dq_tail_blocks = (tail_pairs < pairs ? tail_pairs : pairs) * m_blocks;
    if (t->dq_in_main)
        t->launch[FLASHBWD_LAUNCH_CONVERT_DQ] = (fb_launch_dims){{0, 0, 0}, {0, 0, 0}, 0};
    else
        set(&t->launch[FLASHBWD_LAUNCH_CONVERT_DQ], m_blocks, p->heads_q, p->batch, 0);
    t->num_launches = 3;
    if (p->heads_kv != p->heads_q) {
        set(&t->launch[FLASHBWD_LAUNCH_CONVERT_DKV], n_blocks, p->heads_kv, p->batch, 0);
        t->num_launches = 4;
    }
    return FLASHBWD_OK;
}
