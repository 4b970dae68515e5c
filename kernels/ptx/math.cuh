/* math.cuh — the two special functions of the inner loop, as single SFU instructions
 * (PTX ISA 9.7.4.x: ex2.approx.ftz.f32, tanh.approx.f32).
 *
 * ex2.approx gives 2^x with about 2 ulp error and maps -inf to +0, which is how masked
 * scores become P = 0. tanh.approx (sm_75+) has about 2^-11 relative error, inside the
 * bf16/fp16 budget of the softcap path.
 */
#pragma once

namespace fb::ptx {

__device__ __forceinline__ float ex2_approx(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float tanh_approx(float x)
{
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

} // namespace fb::ptx
