//! common/mod.rs — what the integration tests share: fresh random problems in several
//! memory layouts, an independent f64 forward (O, LSE) and backward (dQ, dK, dV) written
//! from the formulas, the same backward run through the raw C API as the library's own
//! result, and error measures.
//!
//! Nothing here uses the safe crate's conversions or shapes to build its data, so a wrong
//! binding of strides, ids or dtypes shows up as a mismatch.
#![allow(dead_code)]

use flashbwd::sys;
use std::ptr;

// ---------------------------------------------------------------------------------------
// Random numbers: the seed comes from FLASHBWD_TEST_SEED or the clock, and is printed.
// ---------------------------------------------------------------------------------------

pub fn seed() -> u64 {
    let s = match std::env::var("FLASHBWD_TEST_SEED") {
        Ok(v) => v.parse().expect("FLASHBWD_TEST_SEED must be an unsigned integer"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    };
    eprintln!("seed: FLASHBWD_TEST_SEED={s}");
    s
}

/// splitmix64: small, fast, and good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

// ---------------------------------------------------------------------------------------
// 16-bit rounding, independent of flashbwd::half (round to nearest even via f64).
// ---------------------------------------------------------------------------------------

#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Kind {
    Bf16,
    Fp16,
}

impl Kind {
    pub fn raw(self) -> i32 {
        match self {
            Kind::Bf16 => sys::FLASHBWD_DTYPE_BF16,
            Kind::Fp16 => sys::FLASHBWD_DTYPE_FP16,
        }
    }
    pub fn dtype(self) -> flashbwd::Dtype {
        match self {
            Kind::Bf16 => flashbwd::Dtype::Bf16,
            Kind::Fp16 => flashbwd::Dtype::Fp16,
        }
    }
    /// (mantissa bits, smallest normal exponent)
    fn format(self) -> (i32, i32) {
        match self {
            Kind::Bf16 => (7, -126),
            Kind::Fp16 => (10, -14),
        }
    }
    /// Value of bits, by the definition of the format.
    pub fn value(self, bits: u16) -> f64 {
        let (m, emin) = self.format();
        let e_bits = 15 - m;
        let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
        let e = ((bits >> m) & ((1 << e_bits) - 1)) as i32;
        let man = (bits & ((1 << m) - 1)) as f64;
        let bias = 1 - emin;
        if e == (1 << e_bits) - 1 {
            return if man == 0.0 { sign * f64::INFINITY } else { f64::NAN };
        }
        if e == 0 {
            return sign * man * 2f64.powi(emin - m);
        }
        sign * (1.0 + man / 2f64.powi(m)) * 2f64.powi(e - bias)
    }
    /// Nearest representable value to x (ties to even), as bits; finite inputs only, and
    /// small enough not to overflow (test data is).
    pub fn round(self, x: f64) -> u16 {
        let (m, emin) = self.format();
        let sign: u16 = if x < 0.0 { 0x8000 } else { 0 };
        let a = x.abs();
        if a == 0.0 {
            return sign;
        }
        let e = (a.log2().floor() as i32).max(emin);
        let ulp = 2f64.powi(e - m);
        let mut q = (a / ulp).floor();
        let rem = a / ulp - q;
        if rem > 0.5 || (rem == 0.5 && q % 2.0 == 1.0) {
            q += 1.0;
        }
        let v = q * ulp; // exactly representable: re-encode through the value
        let bias = 1 - emin;
        let (e2, man) = if v < 2f64.powi(emin) {
            (0, (v / 2f64.powi(emin - m)) as u16)
        } else {
            let e2 = v.log2().floor() as i32;
            (e2 + bias, ((v / 2f64.powi(e2) - 1.0) * 2f64.powi(m)).round() as u16)
        };
        sign | ((e2 as u16) << m) | man
    }
}

// ---------------------------------------------------------------------------------------
// Cases and their data
// ---------------------------------------------------------------------------------------

#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Layout {
    /// (batch, seq, head, dim) packed, strides NULL.
    Packed,
    /// (batch, head, seq, dim) in memory, described by strides.
    HeadMajor,
    /// Rows, heads and batches padded with gaps the library must not touch.
    Padded,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub name: &'static str,
    pub kind: Kind,
    pub batch: i64,
    pub heads_q: i64,
    pub heads_kv: i64,
    pub seqlen_q: i64,
    pub seqlen_k: i64,
    pub head_dim: i64,
    pub causal: bool,
    pub window: Option<(i32, i32)>,
    pub scale: f64, // 0: 1/sqrt(head_dim)
    pub layout: Layout,
    /// Variable-length: per-sequence lengths (q, k); seqlen_q/k are then the maxima.
    pub varlen: Option<(Vec<i64>, Vec<i64>)>,
}

impl Case {
    pub fn new(name: &'static str, kind: Kind, b: i64, hq: i64, hkv: i64, sq: i64, sk: i64, d: i64) -> Case {
        Case {
            name,
            kind,
            batch: b,
            heads_q: hq,
            heads_kv: hkv,
            seqlen_q: sq,
            seqlen_k: sk,
            head_dim: d,
            causal: false,
            window: None,
            scale: 0.0,
            layout: Layout::Packed,
            varlen: None,
        }
    }
    pub fn scale(&self) -> f64 {
        if self.scale == 0.0 { 1.0 / (self.head_dim as f64).sqrt() } else { self.scale }
    }
    pub fn lens(&self) -> (Vec<i64>, Vec<i64>) {
        match &self.varlen {
            Some((q, k)) => (q.clone(), k.clone()),
            None => (vec![self.seqlen_q; self.batch as usize], vec![self.seqlen_k; self.batch as usize]),
        }
    }
    /// The raw problem, filled field by field (not through flashbwd::Problem).
    pub fn raw_problem(&self, backend: i32) -> sys::flashbwd_problem {
        let mut p: sys::flashbwd_problem = unsafe { std::mem::zeroed() };
        p.struct_size = sys::FLASHBWD_PROBLEM_STRUCT_SIZE;
        p.backend = backend;
        p.dtype = self.kind.raw();
        p.head_dim = self.head_dim as i32;
        p.batch = self.batch;
        p.heads_q = self.heads_q;
        p.heads_kv = self.heads_kv;
        p.seqlen_q = self.seqlen_q;
        p.seqlen_k = self.seqlen_k;
        p.softmax_scale = self.scale as f32;
        p.causal = self.causal as i32;
        if let Some((l, r)) = self.window {
            p.use_window = 1;
            p.window_left = l;
            p.window_right = r;
        }
        if let Some((lq, lk)) = &self.varlen {
            p.varlen = 1;
            p.total_q = lq.iter().sum();
            p.total_k = lk.iter().sum();
        }
        p
    }
    /// The same problem through the safe builder.
    pub fn problem(&self, backend: flashbwd::Backend) -> flashbwd::Problem {
        let mut p = flashbwd::Problem::new(self.batch, self.heads_q, self.seqlen_q, self.seqlen_k, self.head_dim as i32)
            .backend(backend)
            .dtype(self.kind.dtype())
            .heads_kv(self.heads_kv)
            .softmax_scale(self.scale as f32)
            .causal(self.causal);
        if let Some((l, r)) = self.window {
            p = p.window(l, r);
        }
        if let Some((lq, lk)) = &self.varlen {
            p = p.varlen(lq.iter().sum(), lk.iter().sum());
        }
        p
    }
}

/// A strided tensor in host memory: buffer, strides (outermost first), logical dims.
#[derive(Clone, Debug)]
pub struct Strided<T> {
    pub data: Vec<T>,
    pub strides: Vec<i64>,
    pub dims: Vec<i64>,
    /// Whether to bind with NULL strides (the layout is packed).
    pub packed: bool,
}

impl<T: Copy> Strided<T> {
    fn new(dims: Vec<i64>, layout: Layout, fill: T) -> Strided<T> {
        let rank = dims.len();
        let mut strides = vec![0i64; rank];
        match layout {
            Layout::Packed => {
                strides[rank - 1] = 1;
                for i in (0..rank - 1).rev() {
                    strides[i] = strides[i + 1] * dims[i + 1];
                }
            }
            Layout::HeadMajor if rank == 4 => {
                // memory order (b, h, s, d)
                let (s, h, d) = (dims[1], dims[2], dims[3]);
                strides = vec![h * s * d, d, s * d, 1];
            }
            Layout::HeadMajor if rank == 3 => {
                // varlen (rows, h, d) stored as (h, rows, d)
                let (r, d) = (dims[0], dims[2]);
                strides = vec![d, r * d, 1];
            }
            _ => {
                // Padded: every dimension but the last gets a gap of 8 elements (16 bytes,
                // so CUDA alignment rules still hold).
                strides[rank - 1] = 1;
                for i in (0..rank - 1).rev() {
                    strides[i] = strides[i + 1] * dims[i + 1] + 8;
                }
            }
        }
        let len = 1 + dims.iter().zip(&strides).map(|(&n, &s)| (n - 1) * s).sum::<i64>();
        Strided { data: vec![fill; len as usize], strides, dims, packed: layout == Layout::Packed }
    }
    pub fn at(&self, idx: &[i64]) -> usize {
        idx.iter().zip(&self.strides).map(|(&i, &s)| i * s).sum::<i64>() as usize
    }
    pub fn strides_arg(&self) -> Option<&[i64]> {
        if self.packed { None } else { Some(&self.strides) }
    }
}

/// All bits set: NaN in bf16 and fp16.
pub const POISON: u16 = 0xffff;

pub struct Data {
    pub q: Strided<u16>,
    pub k: Strided<u16>,
    pub v: Strided<u16>,
    pub o: Strided<u16>,
    pub d_o: Strided<u16>,
    pub lse: Strided<f32>,
    pub cu_q: Vec<i32>,
    pub cu_k: Vec<i32>,
    /// Poisoned outputs in the case's layout.
    pub dq: Strided<u16>,
    pub dk: Strided<u16>,
    pub dv: Strided<u16>,
    /// References, packed [row][head][dim] over all rows (batch-major).
    pub ref_dq: Vec<f64>,
    pub ref_dk: Vec<f64>,
    pub ref_dv: Vec<f64>,
    pub off_q: Vec<i64>,
    pub off_k: Vec<i64>,
}

/// Position of (batch b, row s of that sequence, head h, column c) in a 16-bit tensor;
/// `off` holds each sequence's first row when variable-length.
pub fn pos(t: &Strided<u16>, varlen: bool, b: usize, off: &[i64], s: i64, h: i64, c: i64) -> usize {
    if varlen { t.at(&[off[b] + s, h, c]) } else { t.at(&[b as i64, s, h, c]) }
}

/// Random inputs for `case`, O and LSE from the f64 forward, references from the f64
/// backward, and poisoned outputs.
pub fn make(case: &Case, rng: &mut Rng) -> Data {
    make_with(case, rng, true)
}

/// As make(); without `reference` the references stay zero (the backward is skipped: large
/// GPU cases compare with the CPU backend instead).
pub fn make_with(case: &Case, rng: &mut Rng, reference: bool) -> Data {
    let varlen = case.varlen.is_some();
    let (lens_q, lens_k) = case.lens();
    let (tq, tk): (i64, i64) = (lens_q.iter().sum(), lens_k.iter().sum());
    let (hq, hkv, d) = (case.heads_q, case.heads_kv, case.head_dim);
    let qdims = |h| if varlen { vec![tq, h, d] } else { vec![case.batch, case.seqlen_q, h, d] };
    let kdims = |h| if varlen { vec![tk, h, d] } else { vec![case.batch, case.seqlen_k, h, d] };
    let lay = case.layout;
    let mut q = Strided::new(qdims(hq), lay, POISON);
    let mut k = Strided::new(kdims(hkv), lay, POISON);
    let mut v = Strided::new(kdims(hkv), lay, POISON);
    let mut o = Strided::new(qdims(hq), lay, POISON);
    let mut d_o = Strided::new(qdims(hq), lay, POISON);
    let lse_dims = if varlen { vec![hq, tq] } else { vec![case.batch, hq, case.seqlen_q] };
    let lse_layout = if lay == Layout::Padded { Layout::Padded } else { Layout::Packed };
    let mut lse = Strided::new(lse_dims, lse_layout, f32::NAN);

    let mut off_q = vec![0i64; case.batch as usize + 1];
    let mut off_k = vec![0i64; case.batch as usize + 1];
    for b in 0..case.batch as usize {
        off_q[b + 1] = off_q[b] + lens_q[b];
        off_k[b + 1] = off_k[b] + lens_k[b];
    }

    // Inputs, rounded to the 16-bit type; the references use the rounded values.
    let kind = case.kind;
    let fill = |t: &mut Strided<u16>, lens: &[i64], off: &[i64], heads: i64, rng: &mut Rng| {
        for b in 0..case.batch as usize {
            for s in 0..lens[b] {
                for h in 0..heads {
                    for c in 0..d {
                        let i = pos(t, varlen, b, off, s, h, c);
                        t.data[i] = kind.round(rng.normal());
                    }
                }
            }
        }
    };
    fill(&mut q, &lens_q, &off_q, hq, rng);
    fill(&mut k, &lens_k, &off_k, hkv, rng);
    fill(&mut v, &lens_k, &off_k, hkv, rng);
    fill(&mut d_o, &lens_q, &off_q, hq, rng);

    let mut ref_dq = vec![0.0; (tq * hq * d) as usize];
    let mut ref_dk = vec![0.0; (tk * hkv * d) as usize];
    let mut ref_dv = vec![0.0; (tk * hkv * d) as usize];
    let scale = case.scale();
    let group = hq / hkv;
    for b in 0..case.batch as usize {
        let (sq, sk) = (lens_q[b], lens_k[b]);
        let diag = sk - sq;
        let visible = |i: i64, j: i64| {
            if case.causal && j > i + diag {
                return false;
            }
            if let Some((l, r)) = case.window {
                if l >= 0 && j < i + diag - l as i64 {
                    return false;
                }
                if r >= 0 && j > i + diag + r as i64 {
                    return false;
                }
            }
            true
        };
        let lse_at = |lse: &Strided<f32>, h: i64, i: i64| {
            if varlen { lse.at(&[h, off_q[b] + i]) } else { lse.at(&[b as i64, h, i]) }
        };
        for h in 0..hq {
            let kh = h / group;
            let qv = |t: &Strided<u16>, s: i64, c: i64| kind.value(t.data[pos(t, varlen, b, &off_q, s, h, c)]);
            let kv = |t: &Strided<u16>, s: i64, c: i64| kind.value(t.data[pos(t, varlen, b, &off_k, s, kh, c)]);
            // Scores and forward.
            let mut s_mat = vec![f64::NEG_INFINITY; (sq * sk) as usize];
            for i in 0..sq {
                for j in 0..sk {
                    if visible(i, j) {
                        let dot: f64 = (0..d).map(|c| qv(&q, i, c) * kv(&k, j, c)).sum();
                        s_mat[(i * sk + j) as usize] = scale * dot;
                    }
                }
            }
            for i in 0..sq {
                let row = &s_mat[(i * sk) as usize..((i + 1) * sk) as usize];
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let l = if m == f64::NEG_INFINITY {
                    m
                } else {
                    m + row.iter().map(|&x| (x - m).exp()).sum::<f64>().ln()
                };
                let li = lse_at(&lse, h, i);
                lse.data[li] = l as f32;
                for c in 0..d {
                    let acc: f64 = if l == f64::NEG_INFINITY {
                        0.0
                    } else {
                        (0..sk).map(|j| (row[j as usize] - l).exp() * kv(&v, j, c)).sum()
                    };
                    let oi = pos(&o, varlen, b, &off_q, i, h, c);
                    o.data[oi] = kind.round(acc);
                }
            }
            // Backward, from what the library is given: the rounded O and the f32 LSE.
            let rows = if reference { sq } else { 0 };
            for i in 0..rows {
                let l = lse.data[lse_at(&lse, h, i)] as f64;
                if l == f64::NEG_INFINITY {
                    continue; // a fully masked row has zero gradients
                }
                let dd: f64 = (0..d).map(|c| qv(&d_o, i, c) * qv(&o, i, c)).sum();
                for j in 0..sk {
                    let sc = s_mat[(i * sk + j) as usize];
                    if sc == f64::NEG_INFINITY {
                        continue;
                    }
                    let p = (sc - l).exp();
                    let dp: f64 = (0..d).map(|c| qv(&d_o, i, c) * kv(&v, j, c)).sum();
                    let ds = p * (dp - dd);
                    for c in 0..d {
                        let qi = (((off_q[b] + i) * hq + h) * d + c) as usize;
                        let kj = (((off_k[b] + j) * hkv + kh) * d + c) as usize;
                        ref_dv[kj] += p * qv(&d_o, i, c);
                        ref_dq[qi] += scale * ds * kv(&k, j, c);
                        ref_dk[kj] += scale * ds * qv(&q, i, c);
                    }
                }
            }
        }
    }
    Data {
        dq: Strided::new(qdims(hq), lay, POISON),
        dk: Strided::new(kdims(hkv), lay, POISON),
        dv: Strided::new(kdims(hkv), lay, POISON),
        q, k, v, o, d_o, lse,
        cu_q: off_q.iter().map(|&x| x as i32).collect(),
        cu_k: off_k.iter().map(|&x| x as i32).collect(),
        ref_dq, ref_dk, ref_dv, off_q, off_k,
    }
}

/// Output `t` (case layout) as f64, packed [row][head][dim] like the references.
pub fn unpack(case: &Case, data: &Data, t: &Strided<u16>, q_side: bool, heads: i64) -> Vec<f64> {
    let varlen = case.varlen.is_some();
    let (lens_q, lens_k) = case.lens();
    let (lens, off) = if q_side { (&lens_q, &data.off_q) } else { (&lens_k, &data.off_k) };
    let d = case.head_dim;
    let mut out = vec![0.0; (off[case.batch as usize] * heads * d) as usize];
    for b in 0..case.batch as usize {
        for s in 0..lens[b] {
            for h in 0..heads {
                for c in 0..d {
                    let v = case.kind.value(t.data[pos(t, varlen, b, off, s, h, c)]);
                    out[(((off[b] + s) * heads + h) * d + c) as usize] = v;
                }
            }
        }
    }
    out
}

/// Result of comparing one output with its reference.
#[derive(Debug)]
pub struct Check {
    pub rel_err: f64,
    pub non_finite: usize,
    /// Elements outside the logical tensor (layout gaps) that were changed.
    pub gaps_touched: usize,
}

/// Compare output `t` (case layout) with packed reference `r` over `heads` heads.
pub fn check(case: &Case, data: &Data, t: &Strided<u16>, r: &[f64], q_side: bool, heads: i64) -> Check {
    let varlen = case.varlen.is_some();
    let (lens_q, lens_k) = case.lens();
    let (lens, off) = if q_side { (&lens_q, &data.off_q) } else { (&lens_k, &data.off_k) };
    let d = case.head_dim;
    let (mut num, mut den, mut non_finite) = (0.0, 0.0, 0);
    let mut logical = vec![false; t.data.len()];
    for b in 0..case.batch as usize {
        for s in 0..lens[b] {
            for h in 0..heads {
                for c in 0..d {
                    let i = pos(t, varlen, b, off, s, h, c);
                    logical[i] = true;
                    let got = case.kind.value(t.data[i]);
                    let want = r[(((off[b] + s) * heads + h) * d + c) as usize];
                    if !got.is_finite() {
                        non_finite += 1;
                    }
                    num += (got - want) * (got - want);
                    den += want * want;
                }
            }
        }
    }
    // Rows past a padded sequence's length are not part of any sequence; only varlen has
    // none, so every non-logical element is a layout gap here.
    let gaps_touched = t.data.iter().zip(&logical).filter(|(&x, &l)| !l && x != POISON).count();
    Check { rel_err: if den > 0.0 { (num / den).sqrt() } else { num.sqrt() }, non_finite, gaps_touched }
}

pub fn tolerance(kind: Kind) -> f64 {
    match kind {
        Kind::Bf16 => 1e-2,
        Kind::Fp16 => 3e-3,
    }
}

/// The library's own result: the same backward through the raw C API, with ids, problem
/// and strides spelled out here. Returns (dq, dk, dv) buffers in the case's layout.
pub fn run_raw(case: &Case, data: &Data) -> (Vec<u16>, Vec<u16>, Vec<u16>) {
    let problem = case.raw_problem(sys::FLASHBWD_BACKEND_CPU);
    let (mut dq, mut dk, mut dv) = (data.dq.data.clone(), data.dk.data.clone(), data.dv.data.clone());
    unsafe {
        let mut plan: *mut sys::flashbwd_plan = ptr::null_mut();
        assert_eq!(sys::flashbwd_plan_create(&problem, &mut plan), 0, "raw plan_create");
        let bind = |id: i32, p: *mut std::ffi::c_void, s: &[i64], packed: bool| {
            let (sp, n) = if packed { (ptr::null(), 0) } else { (s.as_ptr(), s.len() as i32) };
            let st = sys::flashbwd_plan_set_tensor(plan, id, p, sp, n);
            assert_eq!(st, 0, "raw set_tensor {id}");
        };
        let c = |t: &Strided<u16>| t.data.as_ptr() as *mut std::ffi::c_void;
        bind(sys::FLASHBWD_TENSOR_Q, c(&data.q), &data.q.strides, data.q.packed);
        bind(sys::FLASHBWD_TENSOR_K, c(&data.k), &data.k.strides, data.k.packed);
        bind(sys::FLASHBWD_TENSOR_V, c(&data.v), &data.v.strides, data.v.packed);
        bind(sys::FLASHBWD_TENSOR_O, c(&data.o), &data.o.strides, data.o.packed);
        bind(sys::FLASHBWD_TENSOR_DO, c(&data.d_o), &data.d_o.strides, data.d_o.packed);
        bind(sys::FLASHBWD_TENSOR_LSE, data.lse.data.as_ptr() as *mut _, &data.lse.strides, data.lse.packed);
        bind(sys::FLASHBWD_TENSOR_DQ, dq.as_mut_ptr() as *mut _, &data.dq.strides, data.dq.packed);
        bind(sys::FLASHBWD_TENSOR_DK, dk.as_mut_ptr() as *mut _, &data.dk.strides, data.dk.packed);
        bind(sys::FLASHBWD_TENSOR_DV, dv.as_mut_ptr() as *mut _, &data.dv.strides, data.dv.packed);
        if case.varlen.is_some() {
            bind(sys::FLASHBWD_TENSOR_CU_SEQLENS_Q, data.cu_q.as_ptr() as *mut _, &[1], true);
            bind(sys::FLASHBWD_TENSOR_CU_SEQLENS_K, data.cu_k.as_ptr() as *mut _, &[1], true);
        }
        let mut bytes = 0usize;
        assert_eq!(sys::flashbwd_plan_workspace_size(plan, &mut bytes), 0);
        let mut ws = vec![0u64; bytes / 8 + 32];
        let base = ws.as_mut_ptr() as usize;
        let aligned = (base + 255) & !255; // 256-byte aligned, inside the buffer
        if bytes > 0 {
            assert_eq!(sys::flashbwd_plan_set_workspace(plan, aligned as *mut _, bytes), 0);
        }
        let st = sys::flashbwd_execute(plan, ptr::null_mut());
        let msg = std::ffi::CStr::from_ptr(sys::flashbwd_plan_last_error(plan)).to_string_lossy().into_owned();
        assert_eq!(st, 0, "raw execute: {msg}");
        sys::flashbwd_plan_destroy(plan);
    }
    (dq, dk, dv)
}

/// The same backward through the safe crate: Problem builder, Plan, HostBinding with the
/// case's strides. Returns (dq, dk, dv) buffers in the case's layout.
pub fn run_safe(case: &Case, data: &Data) -> flashbwd::Result<(Vec<u16>, Vec<u16>, Vec<u16>)> {
    let mut plan = flashbwd::Plan::new(&case.problem(flashbwd::Backend::Cpu))?;
    run_safe_with(case, data, &mut plan, None)
}

/// run_safe on a given CPU plan, with the caller's workspace (HostBinding::workspace) when
/// `ws` is Some, else the binding's own.
pub fn run_safe_with(
    case: &Case,
    data: &Data,
    plan: &mut flashbwd::Plan,
    ws: Option<&mut flashbwd::Workspace>,
) -> flashbwd::Result<(Vec<u16>, Vec<u16>, Vec<u16>)> {
    use flashbwd::TensorId as T;
    let (mut dq, mut dk, mut dv) = (data.dq.data.clone(), data.dk.data.clone(), data.dv.data.clone());
    {
        let mut b = plan.bind_host()?;
        if let Some(ws) = ws {
            b.workspace(ws)?;
        }
        for (id, t) in [(T::Q, &data.q), (T::K, &data.k), (T::V, &data.v), (T::O, &data.o), (T::DO, &data.d_o)] {
            match t.strides_arg() {
                Some(s) => b.input_strided(id, &t.data, s)?,
                None => b.input(id, &t.data)?,
            };
        }
        match data.lse.strides_arg() {
            Some(s) => b.input_strided(T::Lse, &data.lse.data, s)?,
            None => b.input(T::Lse, &data.lse.data)?,
        };
        for (id, t, out) in [(T::DQ, &data.dq, &mut dq), (T::DK, &data.dk, &mut dk), (T::DV, &data.dv, &mut dv)] {
            match t.strides_arg() {
                Some(s) => b.output_strided(id, out, s)?,
                None => b.output(id, out)?,
            };
        }
        if case.varlen.is_some() {
            b.input(T::CuSeqlensQ, &data.cu_q)?.input(T::CuSeqlensK, &data.cu_k)?;
        }
        b.execute()?;
    }
    Ok((dq, dk, dv))
}

/// Check one case's three outputs against the references; panics with the case's name.
pub fn assert_close(case: &Case, data: &Data, out: &(Vec<u16>, Vec<u16>, Vec<u16>)) {
    let tol = tolerance(case.kind);
    let outs = [("dQ", &out.0, &data.dq, &data.ref_dq, true, case.heads_q),
                ("dK", &out.1, &data.dk, &data.ref_dk, false, case.heads_kv),
                ("dV", &out.2, &data.dv, &data.ref_dv, false, case.heads_kv)];
    for (name, buf, layout, reference, q_side, heads) in outs {
        let t = Strided { data: buf.clone(), strides: layout.strides.clone(), dims: layout.dims.clone(), packed: layout.packed };
        let c = check(case, data, &t, reference, q_side, heads);
        assert_eq!(c.non_finite, 0, "{}: {name} has {} NaN/Inf elements", case.name, c.non_finite);
        assert_eq!(c.gaps_touched, 0, "{}: {name} wrote {} elements outside its layout", case.name, c.gaps_touched);
        assert!(c.rel_err <= tol, "{}: {name} relative error {:.3e} > {tol:.0e}", case.name, c.rel_err);
    }
}
