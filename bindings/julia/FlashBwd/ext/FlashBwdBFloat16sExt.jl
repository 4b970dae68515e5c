# FlashBwdBFloat16sExt.jl — BFloat16 elements mean FLASHBWD_DTYPE_BF16. Loaded by Julia when
# both FlashBwd and BFloat16s.jl are (CUDA.jl's BFloat16 CuArrays use the same type).
module FlashBwdBFloat16sExt

using BFloat16s: BFloat16
using FlashBwd

FlashBwd.dtype_of(::Type{BFloat16}) = FlashBwd.FLASHBWD_DTYPE_BF16

end # module
