/* griddep.cuh — programmatic dependent launch (PTX ISA 9.7.13.13 griddepcontrol, sm_90).
 *
 * A kernel launched behind a programmatic edge may start before the kernel it depends on
 * has finished: once every CTA of that kernel has executed launch_dependents (the first
 * thread of a CTA to execute it counts for the CTA) or exited. Nothing is ordered by it:
 * the dependent orders its reads itself (here through counters, kernels/bwd_prepost.cuh).
 * Without a programmatic edge the instruction does nothing.
 */
#pragma once

namespace fb::ptx {

__device__ __forceinline__ void launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

} // namespace fb::ptx
