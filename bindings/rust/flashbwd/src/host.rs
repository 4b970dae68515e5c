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
//! if an earlier binding was leaked with `mem::forget` and never unbound itself). A caller's
//! [`Workspace`] is borrowed exclusively for `'b` like an output, and only one of the CPU
//! backend's (host memory) is accepted.

use crate::error::{Error, Result, Status};
use crate::plan::{DevicePtr, Plan, Stream};
use crate::problem::{Backend, ElementKind, TensorId};
use crate::workspace::Workspace;
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
/// which also unbinds everything from the plan. The workspace is the binding's own (host
/// memory it allocates on first execute) unless one is given with
/// [`workspace`](HostBinding::workspace).
pub struct HostBinding<'p, 'b> {
    plan: &'p mut Plan,
    scratch: Scratch,
    _data: PhantomData<&'b mut [u8]>,
}

/// The workspace a binding executes with.
enum Scratch {
    /// None yet: execute allocates one and keeps it.
    None,
    /// The binding's own, kept for later executes.
    Owned(HostWorkspace),
    /// The caller's, from [`HostBinding::workspace`], bound to the plan and borrowed for 'b.
    Caller,
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
        let mut binding = HostBinding { plan, scratch: Scratch::None, _data: PhantomData };
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

    /// Execute with `ws` as the workspace (since 1.1), borrowing it for as long as the
    /// slices, instead of host memory the binding allocates itself. `ws` must come from
    /// [`Plan::alloc_workspace`] of a CPU-backend plan whose workspace size is not larger
    /// than this plan's (this plan's own, typically): allocate it once, and reuse it across
    /// bindings and plans.
    ///
    /// ```
    /// use flashbwd::{Backend, Plan, Problem, TensorId};
    ///
    /// let problem = Problem::new(1, 1, 4, 4, 8).backend(Backend::Cpu);
    /// let mut plan = Plan::new(&problem)?;
    /// let mut ws = plan.alloc_workspace()?;
    /// let q = vec![0u16; problem.tensor_len(TensorId::Q)];
    /// plan.bind_host()?.workspace(&mut ws)?.input(TensorId::Q, &q)?; // ... and execute()
    /// # Ok::<(), flashbwd::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Status::INVALID_VALUE`] for a workspace of a CUDA plan (device memory);
    /// [`Status::WORKSPACE_TOO_SMALL`] (the library's) when it is smaller than this plan needs.
    pub fn workspace(&mut self, ws: &'b mut Workspace) -> Result<&mut Self> {
        if ws.backend() != Backend::Cpu {
            return Err(Error::new(
                Status::INVALID_VALUE,
                format!(
                    "workspace: allocated for a {:?} plan (device memory); a host binding \
                     needs one of a Backend::Cpu plan",
                    ws.backend()
                ),
            ));
        }
        let need = self.plan.workspace_size()?;
        if ws.ptr() == DevicePtr::NULL && need > 0 {
            // The library reads a NULL address as "unbind" and would report the missing
            // workspace only at execute.
            return Err(Error::new(
                Status::WORKSPACE_TOO_SMALL,
                format!("workspace of 0 bytes is smaller than the {need} this plan needs"),
            ));
        }
        self.plan.set_workspace(ws.ptr(), ws.bytes())?;
        // Rebound first, so the plan never holds the address of a workspace dropped here.
        self.scratch = Scratch::Caller;
        Ok(self)
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

    /// Run the backward pass on the bound slices (with the caller's [`Workspace`] if one was
    /// given, else allocating the host workspace the plan needs on first use, and keeping
    /// it for later calls).
    ///
    /// # Errors
    /// The library's, e.g. [`Status::TENSOR_NOT_SET`] naming a tensor that was not bound.
    pub fn execute(&mut self) -> Result<()> {
        let have = match &self.scratch {
            Scratch::Caller => None,
            Scratch::Owned(w) => Some(w.layout.size()),
            Scratch::None => Some(0),
        };
        if let Some(have) = have {
            let bytes = self.plan.workspace_size()?;
            if bytes > have {
                let ws = HostWorkspace::new(bytes)?;
                self.plan.set_workspace(DevicePtr::from_ptr(ws.ptr), bytes)?;
                self.scratch = Scratch::Owned(ws);
            }
        }
        // SAFETY: every pointer bound to the plan came through bind() or workspace() during
        // this binding (new() unbound the rest): slices that hold their whole extent and are
        // borrowed for 'b (outputs exclusively), and the workspace this binding owns or a
        // CPU plan's Workspace borrowed exclusively for 'b (the library checked its size).
        // The CPU backend is done with them when execute returns.
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

/// The binding's own host workspace, aligned as the header asks of any workspace (256 bytes).
struct HostWorkspace {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: a plain heap allocation owned by this value.
unsafe impl Send for HostWorkspace {}

impl HostWorkspace {
    fn new(bytes: usize) -> Result<HostWorkspace> {
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
        Ok(HostWorkspace { ptr, layout })
    }
}

impl Drop for HostWorkspace {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { alloc::dealloc(self.ptr, self.layout) }
    }
}
