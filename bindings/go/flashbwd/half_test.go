package flashbwd_test

import (
	"math"
	"testing"

	"flashbwd/bindings/go/flashbwd"
)

type codec struct {
	name   string
	encode func(float32) uint16
	decode func(uint16) float32
	limit  float64 // random inputs stay below this magnitude (no rounding to inf)
}

var codecs = []codec{
	{"bf16", flashbwd.BF16FromFloat32, flashbwd.BF16ToFloat32, 3e38},
	{"fp16", flashbwd.FP16FromFloat32, flashbwd.FP16ToFloat32, 65504},
}

// Every finite 16-bit value survives widening and rounding back; NaNs stay NaN.
func TestHalfRoundTripsEveryValue(t *testing.T) {
	for _, c := range codecs {
		for h := 0; h < 1<<16; h++ {
			f := c.decode(uint16(h))
			got := c.encode(f)
			if math.IsNaN(float64(f)) {
				if !math.IsNaN(float64(c.decode(got))) {
					t.Errorf("%s: NaN %#04x became %#04x", c.name, h, got)
				}
			} else if got != uint16(h) {
				t.Errorf("%s: %#04x -> %g -> %#04x", c.name, h, f, got)
			}
		}
	}
}

// Random float32s round to the nearest neighbour, ties to even: neither 16-bit neighbour of
// the result is closer. Inputs come from a wide range of magnitudes, and exact midpoints
// between neighbours are included on purpose.
func TestHalfRoundsToNearestEven(t *testing.T) {
	rng := caseRand(t, "half")
	for _, c := range codecs {
		for n := 0; n < 400000; n++ {
			var f float32
			switch n % 3 {
			case 0: // log-uniform magnitude
				f = float32(math.Exp((rng.Float64()*2.4 - 1.6) * math.Log(c.limit)))
			case 1: // near 1
				f = float32(1 + rng.NormFloat64())
			case 2: // an exact midpoint of two neighbours
				h := uint16(rng.Intn(1 << 15))
				a, b := float64(c.decode(h)), float64(c.decode(h+1))
				f = float32((a + b) / 2)
			}
			if rng.Intn(2) == 0 {
				f = -f
			}
			if math.Abs(float64(f)) >= c.limit || float64(f) != float64(f) {
				continue
			}
			h := c.encode(f)
			got := float64(c.decode(h))
			err := math.Abs(float64(f) - got)
			for _, nb := range []uint16{h + 1, h - 1} {
				v := float64(c.decode(nb))
				if math.IsNaN(v) || (math.Signbit(v) != math.Signbit(got) && v != 0) {
					continue
				}
				e := math.Abs(float64(f) - v)
				if e < err || (e == err && h&1 == 1) {
					t.Fatalf("%s(%g) = %#04x (%g), but %#04x (%g) is nearer or an even tie",
						c.name, f, h, got, nb, v)
				}
			}
		}
	}
}

func TestHalfEdgeCases(t *testing.T) {
	pow2 := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	cases := []struct {
		codec string
		in    float32
		want  uint16
	}{
		{"fp16", 65504, 0x7bff},
		{"fp16", 65519.996, 0x7bff},
		{"fp16", 65520, 0x7c00}, // the midpoint to 2^16 rounds to inf
		{"fp16", float32(math.Inf(-1)), 0xfc00},
		{"fp16", pow2(-24), 0x0001},             // smallest subnormal
		{"fp16", pow2(-25), 0x0000},             // tie with zero: even
		{"fp16", pow2(-25) * 1.0000001, 0x0001}, // just above the tie
		{"fp16", 3 * pow2(-25), 0x0002},         // tie between 1 and 2 units: even
		{"fp16", pow2(-14) - pow2(-25), 0x0400}, // rounds up into the smallest normal
		{"fp16", 1 + pow2(-11), 0x3c00},         // tie: even
		{"fp16", 1 + 3*pow2(-11), 0x3c02},       // tie: even (up)
		{"fp16", -2, 0xc000},
		{"bf16", 1 + pow2(-8), 0x3f80},    // tie: even
		{"bf16", 1 + 3*pow2(-8), 0x3f82},  // tie: even (up)
		{"bf16", math.MaxFloat32, 0x7f80}, // rounds up to inf
		{"bf16", -pow2(-130), 0x8008},     // a float32 subnormal, exact
	}
	for _, c := range cases {
		enc := flashbwd.BF16FromFloat32
		if c.codec == "fp16" {
			enc = flashbwd.FP16FromFloat32
		}
		if got := enc(c.in); got != c.want {
			t.Errorf("%s(%g) = %#04x, want %#04x", c.codec, c.in, got, c.want)
		}
	}
	if h := flashbwd.BF16FromFloat32(float32(math.NaN())); !math.IsNaN(float64(flashbwd.BF16ToFloat32(h))) {
		t.Errorf("bf16(NaN) = %#04x", h)
	}
	if h := flashbwd.FP16FromFloat32(float32(math.NaN())); !math.IsNaN(float64(flashbwd.FP16ToFloat32(h))) {
		t.Errorf("fp16(NaN) = %#04x", h)
	}
}
