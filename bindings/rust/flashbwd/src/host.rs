//! host.rs — `HostBinding`: binding borrowed host slices to a CPU-backend plan, with the
//! borrow checker, not the caller, keeping them alive and unaliased while the plan can
//! read or write them.
//!
//! Why this is sound: a binding holds the plan exclusively (`&'p mut Plan`) and the slices
//! for `'b`, so no slice can be freed, moved or touched by other code while a binding can
//! execute; inputs are shared borrows and outputs exclusive ones, so an output never
//! aliases anything else; each slice is checked to hold every element its shape and strides
//! reach before the library sees it; and everything bound before the binding began is
//! unbound first, so an execute never reaches a pointer the binding did not receive (even
//! if an earlier binding was leaked with `mem::forget` and never unbound itself).

use crate::error::{Error, Result, Status};
use crate::plan::{DevicePtr, Plan, Stream};
use crate::problem::{Backend, ElementKind, TensorId};
use std::alloc::{self, Layout};
use std::marker::PhantomData;

mod sealed {
    pub trait Sealed {}
    impl Sealed for u16 {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
}

/// An element type host tensors can hold: `u16` (bf16/fp16 bit patterns), `f32` (LSE,
/// ALiBi slopes), `i32` (cu_seqlens, seqused).
pub trait HostElement: Copy + sealed::Sealed {
    /// The tensor element kind this type stands for.
    const KIND: ElementKind;
}
impl HostElement for u16 {
    const KIND: ElementKind = ElementKind::Bits16;
}
impl HostElement for f32 {
    const KIND: ElementKind = ElementKind::F32;
}
impl HostElement for i32 {
    const KIND: ElementKind = ElementKind::I32;
}

/// Host slices bound to a CPU-backend plan for lifetime `'b` (from [`Plan::bind_host`]).
///
/// Bind every input with [`input`](HostBinding::input) and every output with
/// [`output`](HostBinding::output) (strided variants take explicit element strides), then
/// [`execute`](HostBinding::execute). The outputs can be read once the binding is dropped,
/// which also unbinds everything from the plan.
pub struct HostBinding<'p, 'b> {
    plan: &'p mut Plan,
    workspace: Option<Workspace>,
    _data: PhantomData<&'b mut [u8]>,
}

impl<'p, 'b> HostBinding<'p, 'b> {
    pub(crate) fn new(plan: &'p mut Plan) -> Result<HostBinding<'p, 'b>> {
        if plan.problem().get_backend() != Backend::Cpu {
            return Err(Error::new(
                Status::INVALID_VALUE,
                format!(
                    "bind_host: the plan's backend is {:?}; host slices need Backend::Cpu",
                    plan.problem().get_backend()
                ),
            ));
        }
        let mut binding = HostBinding { plan, workspace: None, _data: PhantomData };
        binding.unbind_all()?;
        Ok(binding)
    }

    fn unbind_all(&mut self) -> Result<()> {
        let varlen = self.plan.problem().as_raw().varlen != 0;
        for id in TensorId::ALL {
            // Non-varlen plans reject the varlen-only ids outright, so nothing is bound there.
            if id.is_varlen_only() && !varlen {
                continue;
            }
            self.plan.set_tensor(id, DevicePtr::NULL, None)?;
        }
        self.plan.set_workspace(DevicePtr::NULL, 0)
    }

    /// Bind input `id` to `data`, packed row-major in the id's layout.
    pub fn input<T: HostElement>(&mut self, id: TensorId, data: &'b [T]) -> Result<&mut Self> {
        self.bind(id, data.as_ptr(), data.len(), None, false)
    }

    /// Bind input `id` to `data` with element strides, outermost first (the last must be 1).
    pub fn input_strided<T: HostElement>(
        &mut self,
        id: TensorId,
        data: &'b [T],
        strides: &[i64],
    ) -> Result<&mut Self> {
        self.bind(id, data.as_ptr(), data.len(), Some(strides), false)
    }

    /// Bind output `id` (dQ, dK or dV) to `data`, packed row-major.
    pub fn output<T: HostElement>(&mut self, id: TensorId, data: &'b mut [T]) -> Result<&mut Self> {
        self.bind(id, data.as_mut_ptr(), data.len(), None, true)
    }

    /// Bind output `id` to `data` with element strides; elements between the strided ones
    /// are left as they were.
    pub fn output_strided<T: HostElement>(
        &mut self,
        id: TensorId,
        data: &'b mut [T],
        strides: &[i64],
    ) -> Result<&mut Self> {
        self.bind(id, data.as_mut_ptr(), data.len(), Some(strides), true)
    }

    fn bind<T: HostElement>(
        &mut self,
        id: TensorId,
        ptr: *const T,
        len: usize,
        strides: Option<&[i64]>,
        writable: bool,
    ) -> Result<&mut Self> {
        let name = id.name();
        let invalid = |msg: String| Err(Error::new(Status::INVALID_VALUE, msg));
        if id.is_output() != writable {
            return invalid(if writable {
                format!("tensor {name} is an input; bind it with input(), from a shared slice")
            } else {
                format!("tensor {name} is an output; bind it with output(), from a mutable slice")
            });
        }
        if T::KIND != id.element() {
            return invalid(format!(
                "tensor {name} holds {:?} elements; the slice given holds {:?} ({})",
                id.element(),
                T::KIND,
                std::any::type_name::<T>()
            ));
        }
        let needed = self.extent(id, strides)?;
        if len < needed {
            return invalid(format!(
                "tensor {name}: the slice holds {len} elements; shape {:?} with strides {} \
                 reaches element {}",
                self.dims(id, strides),
                strides.map_or("packed".to_owned(), |s| format!("{s:?}")),
                needed - 1
            ));
        }
        self.plan.set_tensor(id, DevicePtr::from_ptr(ptr), strides)?;
        Ok(self)
    }

    /// The dimensions the library will index tensor `id` with, given these strides.
    fn dims(&self, id: TensorId, strides: Option<&[i64]>) -> Vec<i64> {
        let p = self.plan.problem();
        if id == TensorId::AlibiSlopes && strides.is_some_and(|s| s.len() == 2) {
            return vec![p.as_raw().batch, p.as_raw().heads_q]; // the (batch, heads_q) form
        }
        p.shape(id)
    }

    /// Elements from the first to one past the last that tensor `id` reaches.
    fn extent(&self, id: TensorId, strides: Option<&[i64]>) -> Result<usize> {
        let dims = self.dims(id, strides);
        let name = id.name();
        let too_big = || {
            Error::new(
                Status::OVERFLOW,
                format!("tensor {name}: shape {dims:?} spans more elements than memory holds"),
            )
        };
        if dims.iter().any(|&d| d <= 0) {
            return Ok(0); // nothing is read or written; the plan rejects bad extents itself
        }
        let Some(strides) = strides else {
            return dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d as usize)).ok_or_else(too_big);
        };
        if strides.len() != dims.len() {
            return Err(Error::new(
                Status::INVALID_VALUE,
                format!(
                    "tensor {name}: {} strides given; this plan's {name} has rank {} (shape {dims:?})",
                    strides.len(),
                    dims.len()
                ),
            ));
        }
        let mut last = 0usize;
        for (i, (&d, &s)) in dims.iter().zip(strides).enumerate() {
            if s < 0 {
                return Err(Error::new(
                    Status::INVALID_VALUE,
                    format!("tensor {name}: strides[{i}] = {s}; strides must be >= 0"),
                ));
            }
            let step = (d as usize - 1).checked_mul(s as usize).ok_or_else(too_big)?;
            last = last.checked_add(step).ok_or_else(too_big)?;
        }
        last.checked_add(1).ok_or_else(too_big)
    }

    /// Run the backward pass on the bound slices (allocating the host workspace the plan
    /// needs on first use, and keeping it for later calls).
    ///
    /// # Errors
    /// The library's, e.g. [`Status::TENSOR_NOT_SET`] naming a tensor that was not bound.
    pub fn execute(&mut self) -> Result<()> {
        let bytes = self.plan.workspace_size()?;
        let have = self.workspace.as_ref().map_or(0, |w| w.layout.size());
        if bytes > have {
            let ws = Workspace::new(bytes)?;
            self.plan.set_workspace(DevicePtr::from_ptr(ws.ptr), bytes)?;
            self.workspace = Some(ws);
        }
        // SAFETY: every pointer bound to the plan came through bind() during this binding
        // (new() unbound the rest): slices that hold their whole extent and are borrowed
        // for 'b (outputs exclusively), and the workspace this binding owns. The CPU
        // backend is done with them when execute returns.
        unsafe { self.plan.execute(Stream::DEFAULT) }
    }
}

impl Drop for HostBinding<'_, '_> {
    fn drop(&mut self) {
        // The slices' borrows end with the binding; leave no pointer to them in the plan.
        // Unbinding a valid id cannot fail, and a destructor has no one to report to.
        let _ = self.unbind_all();
    }
}

/// Host workspace, aligned as the header asks of any workspace (256 bytes).
struct Workspace {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: a plain heap allocation owned by this value.
unsafe impl Send for Workspace {}

impl Workspace {
    fn new(bytes: usize) -> Result<Workspace> {
        let layout = Layout::from_size_align(bytes, 256).map_err(|_| {
            Error::new(Status::OVERFLOW, format!("a host workspace of {bytes} bytes is too large"))
        })?;
        // SAFETY: bytes > 0 (checked by the caller).
        let ptr = unsafe { alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(Error::new(
                Status::OUT_OF_MEMORY,
                format!("allocating a host workspace of {bytes} bytes failed"),
            ));
        }
        Ok(Workspace { ptr, layout })
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { alloc::dealloc(self.ptr, self.layout) }
    }
}
