package flashbwd_test

// ref_test.go: fresh random problems and an independent float64 reference of the forward
// (which makes O and LSE) and of the backward, written from the formulas of the design
// (docs/semantics): score = scale*q.k (or softcap*tanh(scale*q.k/softcap)), bottom-right
// causal and window masks, GQA by h / (heads_q / heads_kv). It materializes every score;
// nothing here calls the library.

import (
	"math"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"flashbwd/bindings/go/flashbwd"
)

type refCase struct {
	name           string
	dtype          flashbwd.DType
	d              int
	b, hq, hkv     int
	sq, sk         int
	causal         bool
	window         *flashbwd.Window
	softcap, scale float32
}

func (c refCase) problem(backend flashbwd.Backend) flashbwd.Problem {
	return flashbwd.Problem{
		Backend: backend, DType: c.dtype, HeadDim: int32(c.d),
		Batch: int64(c.b), HeadsQ: int64(c.hq), HeadsKV: int64(c.hkv),
		SeqlenQ: int64(c.sq), SeqlenK: int64(c.sk),
		Causal: c.causal, Window: c.window, Softcap: c.softcap, SoftmaxScale: c.scale,
	}
}

// refData holds one case's inputs (16-bit, packed) and the float64 gradients.
type refData struct {
	q, k, v, o, dout []uint16
	lse              []float32
	dq, dk, dv       []float64
}

var (
	seedOnce sync.Once
	seedBase int64
)

// testSeed is FLASHBWD_TEST_SEED or the clock, logged so a failure can be replayed.
func testSeed(t *testing.T) int64 {
	seedOnce.Do(func() {
		if s, err := strconv.ParseInt(os.Getenv("FLASHBWD_TEST_SEED"), 0, 64); err == nil {
			seedBase = s
		} else {
			seedBase = time.Now().UnixNano() ^ int64(os.Getpid())<<20
		}
	})
	t.Logf("FLASHBWD_TEST_SEED=%d", seedBase)
	return seedBase
}

// caseRand is a generator for one named case, derived from the run's seed.
func caseRand(t *testing.T, name string) *rand.Rand {
	h := int64(1469598103934665603)
	for _, ch := range name {
		h = (h ^ int64(ch)) * 1099511628211
	}
	return rand.New(rand.NewSource(testSeed(t) ^ h))
}

func (c refCase) qIdx(b, i, h, x int) int { return ((b*c.sq+i)*c.hq+h)*c.d + x }
func (c refCase) kIdx(b, j, h, x int) int { return ((b*c.sk+j)*c.hkv+h)*c.d + x }
func (c refCase) lseIdx(b, h, i int) int  { return (b*c.hq+h)*c.sq + i }

func (c refCase) visible(i, j int) bool {
	diag := c.sk - c.sq
	if c.causal && j > i+diag {
		return false
	}
	if w := c.window; w != nil {
		if w.Left >= 0 && j < i+diag-int(w.Left) {
			return false
		}
		if w.Right >= 0 && j > i+diag+int(w.Right) {
			return false
		}
	}
	return true
}

func (c refCase) scaleOf() float64 {
	if c.scale > 0 {
		return float64(c.scale)
	}
	return 1 / math.Sqrt(float64(c.d))
}

// score returns the score of q.k and d(score)/d(scale*q.k).
func (c refCase) score(qk float64) (float64, float64) {
	x := c.scaleOf() * qk
	if c.softcap > 0 {
		t := math.Tanh(x / float64(c.softcap))
		return float64(c.softcap) * t, 1 - t*t
	}
	return x, 1
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func decode(dt flashbwd.DType, h []uint16) []float64 {
	out := make([]float64, len(h))
	for i, x := range h {
		out[i] = float64(dt.Decode(x))
	}
	return out
}

// makeData draws normal(0,1) Q, K, V, dO, runs the float64 forward for O (rounded to the
// dtype) and LSE (float32), then the float64 backward from exactly those tensors.
func makeData(c refCase, rng *rand.Rand) *refData {
	nq, nk := c.b*c.sq*c.hq*c.d, c.b*c.sk*c.hkv*c.d
	r := &refData{
		q: make([]uint16, nq), k: make([]uint16, nk), v: make([]uint16, nk),
		o: make([]uint16, nq), dout: make([]uint16, nq), lse: make([]float32, c.b*c.hq*c.sq),
		dq: make([]float64, nq), dk: make([]float64, nk), dv: make([]float64, nk),
	}
	for _, s := range [][]uint16{r.q, r.k, r.v, r.dout} {
		for i := range s {
			s[i] = c.dtype.Encode(float32(rng.NormFloat64()))
		}
	}
	Q, K, V, DO := decode(c.dtype, r.q), decode(c.dtype, r.k), decode(c.dtype, r.v),
		decode(c.dtype, r.dout)
	group := c.hq / c.hkv
	row := func(x []float64, idx int) []float64 { return x[idx : idx+c.d] }
	S := make([]float64, c.sk)
	acc := make([]float64, c.d)
	for b := 0; b < c.b; b++ { // forward
		for h := 0; h < c.hq; h++ {
			hk := h / group
			for i := 0; i < c.sq; i++ {
				mx := math.Inf(-1)
				for j := 0; j < c.sk; j++ {
					S[j] = math.Inf(-1)
					if c.visible(i, j) {
						S[j], _ = c.score(dot(row(Q, c.qIdx(b, i, h, 0)), row(K, c.kIdx(b, j, hk, 0))))
						mx = math.Max(mx, S[j])
					}
				}
				for x := range acc {
					acc[x] = 0
				}
				sum := 0.0
				if !math.IsInf(mx, -1) {
					for j := 0; j < c.sk; j++ {
						p := math.Exp(S[j] - mx)
						sum += p
						for x, vx := range row(V, c.kIdx(b, j, hk, 0)) {
							acc[x] += p * vx
						}
					}
				}
				lse := math.Inf(-1)
				if sum > 0 {
					lse = mx + math.Log(sum)
				}
				r.lse[c.lseIdx(b, h, i)] = float32(lse)
				for x := range acc {
					o := 0.0
					if sum > 0 {
						o = acc[x] / sum
					}
					r.o[c.qIdx(b, i, h, x)] = c.dtype.Encode(float32(o))
				}
			}
		}
	}
	O := decode(c.dtype, r.o)
	scale := c.scaleOf()
	for b := 0; b < c.b; b++ { // backward
		for h := 0; h < c.hq; h++ {
			hk := h / group
			for i := 0; i < c.sq; i++ {
				lse := float64(r.lse[c.lseIdx(b, h, i)])
				if math.IsInf(lse, -1) {
					continue // fully masked row: zero gradients
				}
				qi, doi := row(Q, c.qIdx(b, i, h, 0)), row(DO, c.qIdx(b, i, h, 0))
				D := dot(doi, row(O, c.qIdx(b, i, h, 0)))
				for j := 0; j < c.sk; j++ {
					if !c.visible(i, j) {
						continue
					}
					kj, vj := row(K, c.kIdx(b, j, hk, 0)), row(V, c.kIdx(b, j, hk, 0))
					s, dt := c.score(dot(qi, kj))
					p := math.Exp(s - lse)
					ds := p * (dot(doi, vj) - D) * dt * scale // d loss / d (q.k)
					for x := 0; x < c.d; x++ {
						r.dq[c.qIdx(b, i, h, x)] += ds * kj[x]
						r.dk[c.kIdx(b, j, hk, x)] += ds * qi[x]
						r.dv[c.kIdx(b, j, hk, x)] += p * doi[x]
					}
				}
			}
		}
	}
	return r
}

// relErr is the relative Frobenius error of 16-bit got against ref, and how many elements
// of got are NaN or Inf (unwritten outputs are poisoned with NaN).
func relErr(dt flashbwd.DType, got []uint16, ref []float64) (float64, int) {
	num, den, bad := 0.0, 0.0, 0
	for i, h := range got {
		g := float64(dt.Decode(h))
		if math.IsNaN(g) || math.IsInf(g, 0) {
			bad++
			continue
		}
		num += (g - ref[i]) * (g - ref[i])
		den += ref[i] * ref[i]
	}
	if den == 0 {
		return math.Sqrt(num), bad
	}
	return math.Sqrt(num / den), bad
}

// tolerance is the design's bound on the relative Frobenius error against float64.
func tolerance(dt flashbwd.DType) float64 {
	if dt == flashbwd.DTypeFP16 {
		return 3e-3
	}
	return 1e-2
}

func poisoned(n int) []uint16 {
	s := make([]uint16, n)
	for i := range s {
		s[i] = 0xffff // NaN in fp16 and bf16
	}
	return s
}

// checkGrads compares dq, dk, dv with the reference within the dtype's tolerance.
func checkGrads(t *testing.T, c refCase, r *refData, dq, dk, dv []uint16) {
	t.Helper()
	for _, g := range []struct {
		name string
		got  []uint16
		ref  []float64
	}{{"dQ", dq, r.dq}, {"dK", dk, r.dk}, {"dV", dv, r.dv}} {
		e, bad := relErr(c.dtype, g.got, g.ref)
		if bad != 0 || e > tolerance(c.dtype) {
			t.Errorf("%s %s: relative error %.3g (bound %.0e), %d NaN/Inf of %d", c.name, g.name,
				e, tolerance(c.dtype), bad, len(g.got))
		} else {
			t.Logf("%s %s: relative error %.3g", c.name, g.name, e)
		}
	}
}
