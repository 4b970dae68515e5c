//! workspace.rs — `Workspace`: scratch memory the library allocates for a plan
//! (`flashbwd_workspace_alloc`, ABI 1.1), owned by the caller and freed on drop
//! (`flashbwd_workspace_free`).
//!
//! The memory is not bound to anything when it is made. A CUDA plan takes its address
//! through [`Plan::set_workspace`](crate::Plan::set_workspace), under the contract of the
//! `unsafe` [`Plan::execute`](crate::Plan::execute); a CPU plan borrows it through
//! [`HostBinding::workspace`](crate::HostBinding::workspace), which holds it exclusively for
//! as long as the plan can write it.

use crate::error::{check, check_plan, Result};
use crate::plan::{DevicePtr, Plan};
use crate::problem::Backend;
use flashbwd_sys as sys;
use std::fmt;
use std::os::raw::c_void;
use std::ptr;

/// A workspace allocated by the library for a plan, in the memory that plan's execute runs
/// fastest with ([`Plan::alloc_workspace`](crate::Plan::alloc_workspace)). Since 1.1.
///
/// - **CUDA backend:** device memory on the plan's device: compressible where the device
///   supports compute data compression (Hopper and newer; [`is_compressed`](Self::is_compressed)
///   says whether it got it), else ordinary `cudaMalloc` memory.
/// - **CPU backend:** host memory, 256-byte aligned.
///
/// The value owns the memory and frees it with `flashbwd_workspace_free` when dropped (or
/// with [`free`](Self::free), which reports a failure); never free its address by any
/// other means. Freeing device memory first waits for the device, as `cudaFree` does; a
/// CUDA plan it is bound to must not execute again until it is rebound
/// ([`Plan::execute`](crate::Plan::execute)'s contract). A host binding unbinds it itself.
/// It is not tied to the plan it was sized for: it may outlive that plan, and it suits
/// every plan of the same backend and device whose
/// [`workspace_size`](crate::Plan::workspace_size) is not larger than [`bytes`](Self::bytes).
///
/// It is `Send` and `Sync`: nothing here reads or writes the memory, and the library frees
/// it from any thread.
pub struct Workspace {
    ptr: *mut c_void,
    bytes: usize,
    compressed: bool,
    backend: Backend,
}

// SAFETY: the value only records an address and a size; the memory is reached through the
// library (execute, under the borrow of a HostBinding or the contract of Plan::execute),
// and flashbwd_workspace_free may be called from any thread.
unsafe impl Send for Workspace {}
// SAFETY: &Workspace gives out the address and size, never access to the memory.
unsafe impl Sync for Workspace {}

impl Workspace {
    /// Allocate for `plan`, reading a failure from the plan's message.
    pub(crate) fn alloc(plan: &Plan) -> Result<Workspace> {
        let raw_plan = plan.as_raw();
        let (mut ptr, mut bytes, mut compressed) = (ptr::null_mut(), 0usize, 0i32);
        // SAFETY: a live plan, in no other call (Plan is not Sync, and every call on it is
        // synchronous), and writable out-parameters; on failure ptr stays NULL and bytes 0.
        let raw = unsafe { sys::flashbwd_workspace_alloc(raw_plan, &mut ptr, &mut bytes, &mut compressed) };
        check_plan(raw, raw_plan)?;
        Ok(Workspace { ptr, bytes, compressed: compressed != 0, backend: plan.problem().get_backend() })
    }

    /// The address, as a [`DevicePtr`] for [`Plan::set_workspace`](crate::Plan::set_workspace)
    /// (a host address for the CPU backend). [`DevicePtr::NULL`] when the plan needed no
    /// workspace.
    pub fn ptr(&self) -> DevicePtr {
        DevicePtr::from_ptr(self.ptr)
    }

    /// The address as a raw pointer, for CUDA crates that take one. Still owned by `self`.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// Its size in bytes: at least the plan's [`workspace_size`](crate::Plan::workspace_size)
    /// (rounded up to the allocation granularity), 0 when the plan needed none.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the memory is compressible device memory (Hopper and newer); always `false`
    /// for the CPU backend and for memory from `cudaMalloc`.
    pub fn is_compressed(&self) -> bool {
        self.compressed
    }

    /// The backend (and device) of the plan it was allocated for: where the memory lives.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Free the memory now (`flashbwd_workspace_free`), reporting what dropping it would
    /// ignore. The memory is gone even on failure, as far as the driver allows.
    ///
    /// # Errors
    /// [`Status::CUDA`](crate::Status::CUDA), with the failing CUDA call in the message.
    pub fn free(mut self) -> Result<()> {
        self.release()
    }

    /// Free the memory once: later calls (and Drop after free()) find a NULL address, which
    /// the library takes as nothing to do.
    fn release(&mut self) -> Result<()> {
        let ptr = std::mem::replace(&mut self.ptr, ptr::null_mut());
        self.bytes = 0;
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: ptr came from flashbwd_workspace_alloc and is freed once; no borrow of it
        // can be alive (HostBinding holds &mut self while the plan may use it).
        check(unsafe { sys::flashbwd_workspace_free(ptr) })
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // A destructor has no one to report to; free() is the call that reports.
        let _ = self.release();
    }
}

impl fmt::Debug for Workspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workspace")
            .field("ptr", &self.ptr)
            .field("bytes", &self.bytes)
            .field("compressed", &self.compressed)
            .field("backend", &self.backend)
            .finish()
    }
}
