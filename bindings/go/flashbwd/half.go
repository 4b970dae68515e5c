package flashbwd

import "math"

// 16-bit conversions for host tensors, rounding to nearest even like a GPU's cvt.rn. Go has
// no bf16 or fp16 type, so the 16-bit tensors of HostTensors hold raw bits.

// BF16ToFloat32 widens a bfloat16 (exact).
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// BF16FromFloat32 rounds f to the nearest bfloat16 (ties to even); NaN stays a quiet NaN.
func BF16FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	// Adding 0x7fff plus the bit that will become the last kept one rounds the dropped
	// 16 bits to nearest, ties to even; a carry into the exponent (or to inf) is correct.
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// FP16ToFloat32 widens an IEEE binary16 (exact).
func FP16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch exp {
	case 0: // zero or subnormal: man * 2^-24, exact in float32
		v := float32(man) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	case 0x1f: // inf or nan
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// FP16FromFloat32 rounds f to the nearest binary16 (ties to even); beyond the largest
// finite value (65504, rounding up from 65520) it gives inf; NaN stays a quiet NaN.
func FP16FromFloat32(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000:
		return sign | 0x7e00
	case a >= 0x477ff000: // 65520: halfway between 65504 and 2^16, ties away to inf
		return sign | 0x7c00
	case a >= 0x38800000: // 2^-14 and up: normal in binary16
		r := a - (127-15)<<23 // rebias the exponent
		r += 0x0fff + (r>>13)&1
		return sign | uint16(r>>13)
	}
	e := a >> 23 // biased float32 exponent, < 113 here
	if e < 102 { // below 2^-25: rounds to zero (2^-25 itself ties to even zero)
		return sign
	}
	// Subnormal: count units of 2^-24, rounding the dropped bits to nearest even. A
	// result of 1024 is the smallest normal's encoding, as it should be.
	man := a&0x7fffff | 0x800000
	shift := 126 - e // 14..24
	q := man >> shift
	rem := man & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return sign | uint16(q)
}

// Encode rounds f to the dtype's 16-bit encoding (bf16 for DTypeDefault).
func (d DType) Encode(f float32) uint16 {
	if d == DTypeFP16 {
		return FP16FromFloat32(f)
	}
	return BF16FromFloat32(f)
}

// Decode widens a 16-bit value of the dtype.
func (d DType) Decode(h uint16) float32 {
	if d == DTypeFP16 {
		return FP16ToFloat32(h)
	}
	return BF16ToFloat32(h)
}
