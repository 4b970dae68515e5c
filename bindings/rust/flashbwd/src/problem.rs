//! problem.rs — what a plan is built for: `Problem` (a builder over `flashbwd_problem`),
//! the element type, the backend, and the tensor ids with the shapes the problem implies.

use crate::half;
use flashbwd_sys as sys;

/// Element type of Q, K, V, O, dO, dQ, dK and dV (one type for all of them). Host data is
/// passed as the raw 16-bit patterns (`u16`); [`Dtype::from_f32`] and [`Dtype::to_f32`]
/// convert.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Dtype {
    /// bfloat16 (the library's default).
    #[default]
    Bf16,
    /// IEEE binary16.
    Fp16,
}

impl Dtype {
    /// The `FLASHBWD_DTYPE_*` value.
    pub const fn raw(self) -> i32 {
        match self {
            Dtype::Bf16 => sys::FLASHBWD_DTYPE_BF16,
            Dtype::Fp16 => sys::FLASHBWD_DTYPE_FP16,
        }
    }

    /// `x` rounded to the nearest value of this type (ties to even), as its bit pattern.
    pub fn from_f32(self, x: f32) -> u16 {
        match self {
            Dtype::Bf16 => half::bf16_from_f32(x),
            Dtype::Fp16 => half::f16_from_f32(x),
        }
    }

    /// The value of bit pattern `bits` of this type.
    pub fn to_f32(self, bits: u16) -> f32 {
        match self {
            Dtype::Bf16 => half::bf16_to_f32(bits),
            Dtype::Fp16 => half::f16_to_f32(bits),
        }
    }
}

/// Where a plan runs. Always chosen explicitly: flashbwd never falls back from one to the
/// other.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// A CUDA device (its ordinal): tensors, workspace and stream are device values.
    Cuda {
        /// CUDA device ordinal.
        device: i32,
    },
    /// The CPU reference backend: host memory, fp32 math, slow; execute returns when done.
    Cpu,
}

impl Default for Backend {
    /// CUDA device 0, the library's default.
    fn default() -> Backend {
        Backend::Cuda { device: 0 }
    }
}

/// Which tensor of the backward pass a pointer is. The `FLASHBWD_TENSOR_*` ids, typed.
///
/// Layouts (element strides are per tensor; the last dimension is always contiguous):
/// - Q, O, dO, dQ: (batch, seqlen_q, heads_q, head_dim), or (total_q, heads_q, head_dim)
///   when variable-length;
/// - K, V, dK, dV: (batch, seqlen_k, heads_kv, head_dim), or (total_k, heads_kv, head_dim);
/// - LSE (f32): (batch, heads_q, seqlen_q), or (heads_q, total_q);
/// - cu_seqlens (i32): batch + 1 entries; seqused (i32): batch entries;
/// - ALiBi slopes (f32): (heads_q), or (batch, heads_q) when given two strides.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TensorId {
    /// Queries (input).
    Q,
    /// Keys (input).
    K,
    /// Values (input).
    V,
    /// The forward's output (input).
    O,
    /// Gradient of the loss with respect to O (input).
    DO,
    /// The forward's natural-log logsumexp of the scaled scores (input, f32).
    Lse,
    /// Gradient with respect to Q (output).
    DQ,
    /// Gradient with respect to K (output).
    DK,
    /// Gradient with respect to V (output).
    DV,
    /// Cumulative query lengths, batch + 1 entries (variable-length input, i32).
    CuSeqlensQ,
    /// Cumulative key lengths, batch + 1 entries (variable-length input, i32).
    CuSeqlensK,
    /// Used query rows per sequence (optional variable-length input, i32).
    SequsedQ,
    /// Used key rows per sequence (optional variable-length input, i32).
    SequsedK,
    /// ALiBi slopes (optional input, f32).
    AlibiSlopes,
}

/// The element type a tensor id holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ElementKind {
    /// The problem's 16-bit [`Dtype`], as `u16` bit patterns.
    Bits16,
    /// `f32`.
    F32,
    /// `i32`.
    I32,
}

impl TensorId {
    /// Every tensor id these bindings know, in id order.
    pub const ALL: [TensorId; 14] = [
        TensorId::Q,
        TensorId::K,
        TensorId::V,
        TensorId::O,
        TensorId::DO,
        TensorId::Lse,
        TensorId::DQ,
        TensorId::DK,
        TensorId::DV,
        TensorId::CuSeqlensQ,
        TensorId::CuSeqlensK,
        TensorId::SequsedQ,
        TensorId::SequsedK,
        TensorId::AlibiSlopes,
    ];

    /// The `FLASHBWD_TENSOR_*` value.
    pub const fn raw(self) -> i32 {
        match self {
            TensorId::Q => sys::FLASHBWD_TENSOR_Q,
            TensorId::K => sys::FLASHBWD_TENSOR_K,
            TensorId::V => sys::FLASHBWD_TENSOR_V,
            TensorId::O => sys::FLASHBWD_TENSOR_O,
            TensorId::DO => sys::FLASHBWD_TENSOR_DO,
            TensorId::Lse => sys::FLASHBWD_TENSOR_LSE,
            TensorId::DQ => sys::FLASHBWD_TENSOR_DQ,
            TensorId::DK => sys::FLASHBWD_TENSOR_DK,
            TensorId::DV => sys::FLASHBWD_TENSOR_DV,
            TensorId::CuSeqlensQ => sys::FLASHBWD_TENSOR_CU_SEQLENS_Q,
            TensorId::CuSeqlensK => sys::FLASHBWD_TENSOR_CU_SEQLENS_K,
            TensorId::SequsedQ => sys::FLASHBWD_TENSOR_SEQUSED_Q,
            TensorId::SequsedK => sys::FLASHBWD_TENSOR_SEQUSED_K,
            TensorId::AlibiSlopes => sys::FLASHBWD_TENSOR_ALIBI_SLOPES,
        }
    }

    /// The name the library's messages use ("Q", "dO", "cu_seqlens_q", ...).
    pub const fn name(self) -> &'static str {
        match self {
            TensorId::Q => "Q",
            TensorId::K => "K",
            TensorId::V => "V",
            TensorId::O => "O",
            TensorId::DO => "dO",
            TensorId::Lse => "LSE",
            TensorId::DQ => "dQ",
            TensorId::DK => "dK",
            TensorId::DV => "dV",
            TensorId::CuSeqlensQ => "cu_seqlens_q",
            TensorId::CuSeqlensK => "cu_seqlens_k",
            TensorId::SequsedQ => "seqused_q",
            TensorId::SequsedK => "seqused_k",
            TensorId::AlibiSlopes => "alibi_slopes",
        }
    }

    /// What the tensor's elements are.
    pub const fn element(self) -> ElementKind {
        match self {
            TensorId::Lse | TensorId::AlibiSlopes => ElementKind::F32,
            TensorId::CuSeqlensQ
            | TensorId::CuSeqlensK
            | TensorId::SequsedQ
            | TensorId::SequsedK => ElementKind::I32,
            _ => ElementKind::Bits16,
        }
    }

    /// Whether the library writes this tensor (dQ, dK, dV).
    pub const fn is_output(self) -> bool {
        matches!(self, TensorId::DQ | TensorId::DK | TensorId::DV)
    }

    /// Whether only variable-length plans accept this tensor.
    pub const fn is_varlen_only(self) -> bool {
        matches!(
            self,
            TensorId::CuSeqlensQ | TensorId::CuSeqlensK | TensorId::SequsedQ | TensorId::SequsedK
        )
    }

    fn query_side(self) -> bool {
        matches!(self, TensorId::Q | TensorId::O | TensorId::DO | TensorId::DQ)
    }
}

/// The plan-time description of one backward pass: a builder over `flashbwd_problem`.
///
/// [`Problem::new`] takes the fields that have no default; every other field keeps the
/// library's default (the zero of `flashbwd_problem`) until a builder method sets it:
/// CUDA device 0, bf16, heads_kv = heads_q, softmax scale 1/sqrt(head_dim), no softcap,
/// not causal, no window, padded (not variable-length), fastest (not deterministic).
///
/// ```
/// use flashbwd::{Backend, Dtype, Problem, TensorId};
/// let p = Problem::new(2, 8, 128, 256, 64)
///     .backend(Backend::Cpu)
///     .dtype(Dtype::Fp16)
///     .heads_kv(2)
///     .causal(true);
/// assert_eq!(p.shape(TensorId::K), vec![2, 256, 2, 64]);
/// assert_eq!(p.shape(TensorId::Lse), vec![2, 8, 128]);
/// ```
#[derive(Copy, Clone, Debug)]
pub struct Problem {
    raw: sys::flashbwd_problem,
}

impl Problem {
    /// A problem of `batch` sequences, `heads_q` query heads, the given query and key
    /// lengths and head dimension, with every other field at its default.
    pub fn new(batch: i64, heads_q: i64, seqlen_q: i64, seqlen_k: i64, head_dim: i32) -> Problem {
        let raw = sys::flashbwd_problem {
            struct_size: sys::FLASHBWD_PROBLEM_STRUCT_SIZE,
            batch,
            heads_q,
            seqlen_q,
            seqlen_k,
            head_dim,
            ..Default::default() // all zero: every other field at its default
        };
        Problem { raw }
    }

    /// Wrap a raw problem as it is (struct_size included).
    pub fn from_raw(raw: sys::flashbwd_problem) -> Problem {
        Problem { raw }
    }

    /// The raw struct handed to `flashbwd_plan_create`.
    pub fn as_raw(&self) -> &sys::flashbwd_problem {
        &self.raw
    }

    /// Where the plan runs.
    pub fn backend(mut self, backend: Backend) -> Problem {
        match backend {
            Backend::Cuda { device } => {
                self.raw.backend = sys::FLASHBWD_BACKEND_CUDA;
                self.raw.device = device;
            }
            Backend::Cpu => {
                self.raw.backend = sys::FLASHBWD_BACKEND_CPU;
                self.raw.device = 0;
            }
        }
        self
    }

    /// The 16-bit element type.
    pub fn dtype(mut self, dtype: Dtype) -> Problem {
        self.raw.dtype = dtype.raw();
        self
    }

    /// Key/value heads (grouped-query or multi-query attention); must divide heads_q.
    pub fn heads_kv(mut self, heads_kv: i64) -> Problem {
        self.raw.heads_kv = heads_kv;
        self
    }

    /// Scale of q·k; 0 means 1/sqrt(head_dim).
    pub fn softmax_scale(mut self, scale: f32) -> Problem {
        self.raw.softmax_scale = scale;
        self
    }

    /// Soft-capping: score = softcap · tanh(scale · q·k / softcap); 0 turns it off.
    pub fn softcap(mut self, softcap: f32) -> Problem {
        self.raw.softcap = softcap;
        self
    }

    /// Causal mask, aligned bottom-right: query i sees key j iff j <= i + seqlen_k - seqlen_q.
    pub fn causal(mut self, causal: bool) -> Problem {
        self.raw.causal = causal as i32;
        self
    }

    /// Sliding window: query i sees keys [i + sk - sq - left, i + sk - sq + right];
    /// a negative bound is unbounded.
    pub fn window(mut self, left: i32, right: i32) -> Problem {
        self.raw.use_window = 1;
        self.raw.window_left = left;
        self.raw.window_right = right;
        self
    }

    /// Variable-length mode: sequences packed along one row dimension, with `total_q` and
    /// `total_k` rows (0 = batch · seqlen), delimited by the cu_seqlens tensors; seqlen_q and
    /// seqlen_k are then the longest sequences.
    pub fn varlen(mut self, total_q: i64, total_k: i64) -> Problem {
        self.raw.varlen = 1;
        self.raw.total_q = total_q;
        self.raw.total_k = total_k;
        self
    }

    /// Bitwise-identical outputs from run to run.
    pub fn deterministic(mut self, deterministic: bool) -> Problem {
        self.raw.deterministic = deterministic as i32;
        self
    }

    /// SMs to schedule for; 0 = the device's count.
    pub fn sm_count(mut self, sm_count: i32) -> Problem {
        self.raw.sm_count = sm_count;
        self
    }

    /// Plan for a described device instead of querying one: `arch` = 10·major + minor (80,
    /// 86, 89, 90), `smem_per_block` its opt-in shared memory (0 = the documented limit).
    /// Such a plan can be inspected ([`Plan::info`](crate::Plan::info)), not executed.
    pub fn arch(mut self, arch: i32, smem_per_block: i32) -> Problem {
        self.raw.arch = arch;
        self.raw.smem_per_block = smem_per_block;
        self
    }

    /// The backend this problem selects (0 in the raw struct means CUDA).
    pub fn get_backend(&self) -> Backend {
        if self.raw.backend == sys::FLASHBWD_BACKEND_CPU {
            Backend::Cpu
        } else {
            Backend::Cuda { device: self.raw.device }
        }
    }

    /// The element type this problem selects (0 in the raw struct means bf16).
    pub fn get_dtype(&self) -> Dtype {
        if self.raw.dtype == sys::FLASHBWD_DTYPE_FP16 {
            Dtype::Fp16
        } else {
            Dtype::Bf16
        }
    }

    /// The dimensions of tensor `id` implied by this problem, outermost first, in its packed
    /// form (ALiBi slopes: (heads_q)). Defaults are applied: heads_kv 0 reads as heads_q,
    /// total_q / total_k 0 as batch · seqlen. The shapes of an invalid problem are
    /// meaningless; the plan rejects it.
    pub fn shape(&self, id: TensorId) -> Vec<i64> {
        let p = &self.raw;
        let heads_kv = if p.heads_kv == 0 { p.heads_q } else { p.heads_kv };
        let total_q = if p.total_q == 0 { p.batch.saturating_mul(p.seqlen_q) } else { p.total_q };
        let total_k = if p.total_k == 0 { p.batch.saturating_mul(p.seqlen_k) } else { p.total_k };
        let varlen = p.varlen != 0;
        let d = p.head_dim as i64;
        match id.element() {
            ElementKind::Bits16 => {
                let q = id.query_side();
                let heads = if q { p.heads_q } else { heads_kv };
                match (varlen, q) {
                    (true, true) => vec![total_q, heads, d],
                    (true, false) => vec![total_k, heads, d],
                    (false, true) => vec![p.batch, p.seqlen_q, heads, d],
                    (false, false) => vec![p.batch, p.seqlen_k, heads, d],
                }
            }
            _ => match id {
                TensorId::Lse if varlen => vec![p.heads_q, total_q],
                TensorId::Lse => vec![p.batch, p.heads_q, p.seqlen_q],
                TensorId::CuSeqlensQ | TensorId::CuSeqlensK => vec![p.batch.saturating_add(1)],
                TensorId::AlibiSlopes => vec![p.heads_q],
                _ => vec![p.batch], // seqused
            },
        }
    }

    /// Elements of tensor `id` stored packed (the product of [`Problem::shape`]); the
    /// length of a `Vec` to hold it.
    pub fn tensor_len(&self, id: TensorId) -> usize {
        self.shape(id).iter().fold(1usize, |acc, &n| acc.saturating_mul(n.max(0) as usize))
    }
}
