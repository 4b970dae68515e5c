//! Safe Rust interface to flashbwd: the FlashAttention backward pass (dQ, dK, dV) from the
//! tensors a FlashAttention forward produced (Q, K, V, O, its logsumexp) and the incoming
//! gradient dO, on NVIDIA GPUs or on an explicit CPU reference backend.
//!
//! The shape is the C library's: describe the [`Problem`] once, build a [`Plan`] (the
//! expensive work: validation, device query, kernel choice), bind tensors, execute, as
//! many times as needed. Failures are [`Error`]s that carry the library's [`Status`] and
//! its message naming the offending field and value.
//!
//! - **CPU backend, host memory: safe.** [`Plan::bind_host`] borrows slices for as long as
//!   the plan can touch them and checks that each holds its whole extent.
//! - **CUDA backend, device memory: raw.** Device addresses are [`DevicePtr`] values and
//!   the stream a [`Stream`]; binding records them and [`Plan::execute`] is `unsafe`,
//!   because only the caller knows that the memory is live. Allocate with any CUDA crate
//!   (or the driver API, as `examples/gpu_backward.rs` does).
//! - **Workspace: the library's allocator (since 1.1).** [`Plan::alloc_workspace`] gives a
//!   [`Workspace`] in the memory the plan's execute runs fastest with (compressible device
//!   memory on Hopper), freed when dropped; a CPU plan borrows it through
//!   [`HostBinding::workspace`], a CUDA plan takes its address ([`Plan::set_workspace`]).
//!
//! Data is passed as it lies in memory: bf16/fp16 elements as `u16` bit patterns
//! ([`Dtype::from_f32`] / [`Dtype::to_f32`] convert), LSE as `f32`. Layouts are those of
//! [`TensorId`].
//!
//! # Example: one backward pass on the CPU backend
//! With Q = 0 every score is 0, so attention is uniform (P = 1/seqlen_k, LSE = ln seqlen_k,
//! O = the mean row of V), and the gradients have closed forms: dK = 0 and every row of dV
//! is the sum of dO's rows divided by seqlen_k.
//! ```
//! use flashbwd::{Backend, Dtype, Plan, Problem, TensorId};
//!
//! let (sq, sk, d) = (3, 4, 8);
//! let problem = Problem::new(1, 1, sq, sk, d).backend(Backend::Cpu).dtype(Dtype::Bf16);
//! let bf16 = |x: f32| Dtype::Bf16.from_f32(x);
//! let q = vec![bf16(0.0); problem.tensor_len(TensorId::Q)];
//! let k: Vec<u16> = (0..problem.tensor_len(TensorId::K)).map(|i| bf16(i as f32 * 0.01)).collect();
//! let v: Vec<u16> = (0..problem.tensor_len(TensorId::V)).map(|i| bf16((i % 8) as f32)).collect();
//! let o: Vec<u16> = (0..problem.tensor_len(TensorId::O)).map(|i| bf16((i % 8) as f32)).collect();
//! let d_o: Vec<u16> = (0..problem.tensor_len(TensorId::DO)).map(|i| bf16(i as f32 * 0.25)).collect();
//! let lse = vec![(sk as f32).ln(); problem.tensor_len(TensorId::Lse)];
//! let mut dq = vec![0u16; problem.tensor_len(TensorId::DQ)];
//! let mut dk = vec![0u16; problem.tensor_len(TensorId::DK)];
//! let mut dv = vec![0u16; problem.tensor_len(TensorId::DV)];
//!
//! let mut plan = Plan::new(&problem)?;
//! plan.bind_host()?
//!     .input(TensorId::Q, &q)?
//!     .input(TensorId::K, &k)?
//!     .input(TensorId::V, &v)?
//!     .input(TensorId::O, &o)?
//!     .input(TensorId::DO, &d_o)?
//!     .input(TensorId::Lse, &lse)?
//!     .output(TensorId::DQ, &mut dq)?
//!     .output(TensorId::DK, &mut dk)?
//!     .output(TensorId::DV, &mut dv)?
//!     .execute()?;
//!
//! assert!(dk.iter().all(|&x| Dtype::Bf16.to_f32(x) == 0.0));
//! for j in 0..sk as usize {
//!     for c in 0..d as usize {
//!         let sum: f32 = (0..sq as usize).map(|i| Dtype::Bf16.to_f32(d_o[i * 8 + c])).sum();
//!         let got = Dtype::Bf16.to_f32(dv[j * 8 + c]);
//!         assert!((got - sum / sk as f32).abs() <= 0.01 * sum.abs(), "dV[{j}][{c}] = {got}");
//!     }
//! }
//! # Ok::<(), flashbwd::Error>(())
//! ```
//!
//! # Versions
//! The first [`Plan::new`] checks that the loaded library has the major version of the
//! header these bindings were generated from and is not older ([`check_version`]). These
//! bindings are generated from the 1.1 header, so a library older than 1.1 makes no
//! [`Plan`], and the 1.1 calls ([`Plan::alloc_workspace`], [`Workspace`]'s free), which need
//! a plan, are never reached on it.
//!
//! # Threads
//! [`Plan`] is `Send`, not `Sync`: move it to any thread, use it from one at a time.
//! Different plans are independent.

#![warn(missing_docs)]

mod error;
pub mod half;
mod host;
mod plan;
mod problem;
mod workspace;

pub use error::{check_version, version_compatible, Error, Result, Status, COMPILED_VERSION};
pub use host::{HostBinding, HostElement};
pub use plan::{DevicePtr, Launch, Plan, PlanInfo, Stream};
pub use problem::{Backend, Dtype, ElementKind, Problem, TensorId};
pub use workspace::Workspace;

/// The raw bindings this crate wraps, for what it does not.
pub use flashbwd_sys as sys;

/// The version of the loaded library, MAJOR·10000 + MINOR·100 + PATCH (`flashbwd_version`).
pub fn version() -> u32 {
    // SAFETY: takes no argument and never fails.
    unsafe { sys::flashbwd_version() }
}
