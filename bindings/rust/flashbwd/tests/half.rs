//! half.rs — flashbwd::half against the formats' definitions (tests/common's decoder and
//! f64 rounding): every 16-bit pattern decodes exactly, and f32 values round to nearest,
//! ties to even, including the midpoints, subnormals, overflow and NaN.

mod common;
use common::{seed, Kind, Rng};
use flashbwd::half::*;

fn decode(kind: Kind, bits: u16) -> f32 {
    match kind {
        Kind::Bf16 => bf16_to_f32(bits),
        Kind::Fp16 => f16_to_f32(bits),
    }
}

fn encode(kind: Kind, x: f32) -> u16 {
    match kind {
        Kind::Bf16 => bf16_from_f32(x),
        Kind::Fp16 => f16_from_f32(x),
    }
}

#[test]
fn every_pattern_decodes_to_its_value_and_encodes_back() {
    for kind in [Kind::Bf16, Kind::Fp16] {
        for bits in 0..=u16::MAX {
            let want = kind.value(bits);
            let got = decode(kind, bits);
            if want.is_nan() {
                assert!(got.is_nan(), "{kind:?} {bits:#06x}");
                assert!(decode(kind, encode(kind, got)).is_nan(), "{kind:?} NaN {bits:#06x}");
                continue;
            }
            assert_eq!(got as f64, want, "{kind:?} {bits:#06x}");
            assert_eq!(encode(kind, got), bits, "{kind:?} round trip {bits:#06x}");
        }
    }
}

#[test]
fn midpoints_round_to_even_and_neighbours_to_nearest() {
    // Between consecutive finite positive patterns a and a+1: the midpoint goes to the even
    // one, anything a hair off it to the nearer one.
    for kind in [Kind::Bf16, Kind::Fp16] {
        let max_finite = if kind == Kind::Bf16 { 0x7f7f } else { 0x7bff };
        for a in 0..max_finite as u16 {
            let (lo, hi) = (kind.value(a), kind.value(a + 1));
            let mid = (lo + hi) / 2.0;
            let mid32 = mid as f32;
            if mid32 as f64 != mid {
                continue; // not representable in f32 (never for these formats; kept honest)
            }
            let even = if a % 2 == 0 { a } else { a + 1 };
            assert_eq!(encode(kind, mid32), even, "{kind:?} midpoint after {a:#06x}");
            assert_eq!(encode(kind, -mid32), even | 0x8000, "{kind:?} -midpoint after {a:#06x}");
            let below = f32::from_bits(mid32.to_bits() - 1);
            let above = f32::from_bits(mid32.to_bits() + 1);
            if mid32 != 0.0 {
                assert_eq!(encode(kind, below), a, "{kind:?} below midpoint after {a:#06x}");
                assert_eq!(encode(kind, above), a + 1, "{kind:?} above midpoint after {a:#06x}");
            }
        }
    }
}

#[test]
fn random_values_round_like_the_f64_reference() {
    let mut rng = Rng::new(seed());
    for kind in [Kind::Bf16, Kind::Fp16] {
        for _ in 0..200_000 {
            // Magnitudes across the whole normal and subnormal range of fp16.
            let x = (rng.normal() * 2f64.powi((rng.uniform() * 40.0) as i32 - 26)) as f32;
            assert_eq!(encode(kind, x), kind.round(x as f64), "{kind:?} {x:e}");
        }
    }
}

#[test]
fn overflow_goes_to_infinity_and_nan_stays_nan() {
    assert_eq!(f16_from_f32(65520.0), 0x7c00); // the first value past max that rounds up
    assert_eq!(f16_from_f32(65519.0), 0x7bff);
    assert_eq!(f16_from_f32(-1e9), 0xfc00);
    assert_eq!(f16_from_f32(f32::INFINITY), 0x7c00);
    assert_eq!(bf16_from_f32(f32::MAX), 0x7f80);
    assert_eq!(bf16_from_f32(f32::NEG_INFINITY), 0xff80);
    assert!(f16_to_f32(f16_from_f32(f32::NAN)).is_nan());
    assert!(bf16_to_f32(bf16_from_f32(f32::NAN)).is_nan());
    assert!(bf16_to_f32(bf16_from_f32(f32::from_bits(0x7f80_0001))).is_nan(), "low-bit NaN");
    assert_eq!(f16_from_f32(2f32.powi(-25)), 0x0000, "half the smallest subnormal ties to 0");
    assert_eq!(f16_from_f32(2f32.powi(-25) * 1.0001), 0x0001);
    assert_eq!(f16_from_f32(f32::from_bits(1)), 0x0000, "f32 subnormal");
    assert_eq!(f16_from_f32(-0.0), 0x8000);
}
