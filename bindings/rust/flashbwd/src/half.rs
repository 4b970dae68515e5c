//! half.rs — conversions between f32 and the 16-bit types flashbwd computes with, so host
//! data can be prepared and read back without another crate. Rounding is to nearest, ties
//! to even, as the library's own conversions do.

/// `x` as bfloat16 bits: the top half of the f32, rounded to nearest even. NaN stays NaN
/// (quiet, sign kept) rather than rounding into infinity.
pub fn bf16_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry
    // out of the mantissa correctly bumps the exponent (up to infinity).
    let rounding = 0x7fff + ((bits >> 16) & 1);
    ((bits + rounding) >> 16) as u16
}

/// The f32 value of bfloat16 bits (exact).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// `x` as IEEE binary16 bits, rounded to nearest even; overflow gives infinity, tiny values
/// subnormals or zero. NaN stays a quiet NaN with its sign.
pub fn f16_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x007f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x0200 } else { 0 };
    }
    // Unbiased exponent; f16 normals have -14..=15.
    let e = exp - 127;
    if e > 15 {
        return sign | 0x7c00;
    }
    // The significand with its implicit bit (f32 subnormals are far below f16's range and
    // round to zero below, so treating them as exponent -127 is harmless).
    let sig = if exp == 0 { man << 1 } else { man | 0x0080_0000 };
    // Number of low bits of `sig` to drop: 13 for normals, more for f16 subnormals.
    let shift = if e >= -14 { 13 } else { 13 + (-14 - e) };
    if shift > 24 {
        return sign; // below half the smallest subnormal: rounds to zero
    }
    let kept = sig >> shift;
    let rest = sig & ((1u32 << shift) - 1);
    let half = 1u32 << (shift - 1);
    let round_up = rest > half || (rest == half && (kept & 1) == 1);
    let mag = if e >= -14 {
        // Normal: exponent field plus the 10 mantissa bits (drop the implicit bit); a
        // rounding carry moves into the exponent, up to infinity, as it should.
        (((e + 15) as u32) << 10) + (kept & 0x3ff)
    } else {
        kept // subnormal: exponent field 0; a carry makes the smallest normal
    };
    sign | (mag + round_up as u32) as u16
}

/// The f32 value of IEEE binary16 bits (exact).
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = ((bits & 0x8000) as u32) << 16;
    let exp = ((bits >> 10) & 0x1f) as u32;
    let man = (bits & 0x3ff) as u32;
    let out = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: man · 2^-24, exactly representable in f32.
            let v = man as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
        0x1f => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(out)
}
