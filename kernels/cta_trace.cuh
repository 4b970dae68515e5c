/* cta_trace.cuh — a timeline of the split kernel's CTAs, for finding where a short CTA's
 * time goes (docs/performance.md, thirteenth session). Compiled in only with
 * -DFB_TRACE_CTAS (a diagnostic build: bench/variants.sh build NAME --cmake
 * -DCMAKE_CUDA_FLAGS=-DFB_TRACE_CTAS); otherwise every mark is empty.
 *
 * Thread 0 of each CTA prints one line when the CTA ends:
 *   CTA <sm> <block x> <block y> <block z> <steps> <g_start> <g_end> <c_prologue>
 *       <c_p_loop> <c_ds_loop> <c_end>
 * g_*: %globaltimer (ns, shared by all SMs) at entry and exit; c_*: SM cycles (clock64)
 * from entry to the end of the prologue, of the P warps' loop, of the dS warps' loop and
 * of the epilogue. bench/cta_trace.py turns the lines into per-phase figures and the gaps
 * between consecutive CTAs of one SM.
 * What it is good for: the phases inside a CTA (read the medians). What it is not: the
 * time between CTAs, since every CTA's printf at its end slows the launch (on the H200 a
 * traced 584 us launch spanned 4.7 ms, with gaps of ~250 us between CTAs of one SM).
 */
#pragma once
#include <stdint.h>
#include <stdio.h>

namespace fb::trace {

enum Mark { PROLOGUE = 0, P_LOOP = 1, DS_LOOP = 2, END = 3, STEPS = 4, MARKS = 5 };

#ifdef FB_TRACE_CTAS
__device__ __forceinline__ uint64_t globaltimer()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

struct Cta {
    uint64_t g0, c0;
    __device__ __forceinline__ static uint64_t *slots()
    {
        __shared__ uint64_t s[MARKS];
        return s;
    }
    __device__ __forceinline__ void start()
    {
        g0 = globaltimer();
        c0 = clock64();
        if (threadIdx.x == 0)
            for (int i = 0; i < MARKS; ++i) slots()[i] = 0;
    }
    /* The calling thread records `what` (one thread per mark). */
    __device__ __forceinline__ static void mark(Mark what) { slots()[what] = clock64(); }
    __device__ __forceinline__ static void steps(int n) { slots()[STEPS] = (uint64_t)n; }
    /* Thread 0, after a barrier that follows every mark. */
    __device__ __forceinline__ void finish() const
    {
        const uint64_t *s = slots();
        if (threadIdx.x != 0 || s[STEPS] == 0) return; /* CTAs with no query block */
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        const uint64_t c_end = clock64(), g_end = globaltimer();
        printf("CTA %u %u %u %u %llu %llu %llu %llu %llu %llu %llu\n", sm, blockIdx.x,
               blockIdx.y, blockIdx.z, (unsigned long long)s[STEPS],
               (unsigned long long)g0, (unsigned long long)g_end,
               (unsigned long long)(s[PROLOGUE] - c0), (unsigned long long)(s[P_LOOP] - c0),
               (unsigned long long)(s[DS_LOOP] - c0), (unsigned long long)(c_end - c0));
    }
};
#define FB_TRACE(stmt) stmt
#else
#define FB_TRACE(stmt)
#endif

} // namespace fb::trace
