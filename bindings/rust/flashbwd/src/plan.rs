//! plan.rs — `Plan`: an owned flashbwd plan (destroyed on drop), its raw-pointer interface
//! for device memory, and what the plan chose (`PlanInfo`).

use crate::error::{check, check_plan, check_version, Error, Result, Status};
use crate::host::HostBinding;
use crate::problem::{Backend, Problem, TensorId};
use crate::workspace::Workspace;
use flashbwd_sys as sys;
use std::os::raw::c_void;
use std::ptr::{self, NonNull};

/// A device address (`CUdeviceptr`, or a host address for the CPU backend), passed to the
/// library as a raw value. `DevicePtr::NULL` unbinds.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// No tensor.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The address of a pointer (a host pointer for the CPU backend, or one a CUDA library
    /// returned as a pointer type).
    pub fn from_ptr<T>(p: *const T) -> DevicePtr {
        DevicePtr(p as usize as u64)
    }

    fn as_void(self) -> *mut c_void {
        self.0 as usize as *mut c_void
    }
}

/// A CUDA stream (`cudaStream_t` / `CUstream`) as a raw value; the CPU backend ignores it.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Stream(pub *mut c_void);

impl Stream {
    /// The legacy default stream (NULL).
    pub const DEFAULT: Stream = Stream(ptr::null_mut());
}

impl Default for Stream {
    fn default() -> Stream {
        Stream::DEFAULT
    }
}

/// Grid and block shape of one kernel launch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Grid (x, y, z).
    pub grid: [i32; 3],
    /// Block (x, y, z).
    pub block: [i32; 3],
}

/// What a plan chose (`flashbwd_plan_get_info`). Kernel fields are 0 for the CPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanInfo {
    /// Where the plan runs.
    pub backend: Backend,
    /// 10·major + minor of the device planned for; 0 on the CPU.
    pub arch: i32,
    /// SMs the schedule is built for.
    pub sm_count: i32,
    /// The device's opt-in shared memory per block, bytes.
    pub smem_per_block: i32,
    /// Head dim the kernel is compiled for (>= the problem's).
    pub kernel_head_dim: i32,
    /// Query rows per main-loop step.
    pub block_m: i32,
    /// Key rows per main-kernel CTA.
    pub block_n: i32,
    /// Threads per CTA of the main kernel.
    pub num_threads: i32,
    /// Q buffers in the main kernel's pipeline.
    pub stages_q: i32,
    /// dO buffers in the main kernel's pipeline.
    pub stages_do: i32,
    /// Dynamic shared memory of the main kernel, bytes.
    pub smem_bytes: i32,
    /// The launch table, in order: preprocess, main, convert dQ, [convert dK/dV]. An entry with
    /// grid 0 is not launched (convert dQ: the main kernel converts dQ itself).
    pub launches: Vec<Launch>,
    /// Bytes of workspace execute needs.
    pub workspace_bytes: usize,
}

/// An immutable flashbwd plan for one [`Problem`], plus the tensors and workspace bound to
/// it. Destroyed (host-only, never waiting for the GPU) when dropped.
///
/// Host data on the CPU backend is bound safely through [`Plan::bind_host`]. Device memory
/// is bound by address with [`Plan::set_tensor`] and [`Plan::set_workspace`], and
/// [`Plan::execute`] is `unsafe`: the library cannot know that those addresses are live.
/// [`Plan::alloc_workspace`] (since 1.1) allocates a [`Workspace`] of the right kind and size.
///
/// A plan may move to another thread (`Send`), but is not shared between threads: every
/// call that binds or executes takes `&mut self`, which is the library's rule that one plan
/// is never used by two threads at once.
pub struct Plan {
    raw: NonNull<sys::flashbwd_plan>,
    problem: Problem,
}

// SAFETY: the library allows any thread to use a plan, and to destroy it, as long as calls
// on one plan are not concurrent; &mut self (and the absence of Sync) enforces that.
unsafe impl Send for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: raw came from flashbwd_plan_create and is destroyed once.
        unsafe { sys::flashbwd_plan_destroy(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan").field("raw", &self.raw).field("problem", &self.problem).finish()
    }
}

impl Plan {
    /// Validate `problem` and build a plan for it (`flashbwd_plan_create`): the expensive
    /// work, done once. The first call in the process also checks the library version
    /// ([`check_version`](crate::check_version)).
    ///
    /// # Errors
    /// The library's status and message, e.g. [`Status::INVALID_VALUE`] naming the field
    /// and value, [`Status::NO_DEVICE`] for a CUDA plan on a machine without a GPU.
    pub fn new(problem: &Problem) -> Result<Plan> {
        check_version()?;
        let mut out: *mut sys::flashbwd_plan = ptr::null_mut();
        // SAFETY: problem is a complete flashbwd_problem with struct_size set; out is valid.
        check(unsafe { sys::flashbwd_plan_create(problem.as_raw(), &mut out) })?;
        let raw = NonNull::new(out).ok_or_else(|| {
            Error::new(Status::INTERNAL, "flashbwd_plan_create returned OK and a NULL plan")
        })?;
        Ok(Plan { raw, problem: *problem })
    }

    /// The problem the plan was built for.
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// The raw plan, for calls this crate does not wrap. It stays owned by `self`.
    pub fn as_raw(&self) -> *mut sys::flashbwd_plan {
        self.raw.as_ptr()
    }

    /// The configuration, launch shapes and workspace the plan chose.
    pub fn info(&self) -> Result<PlanInfo> {
        let mut raw = sys::flashbwd_plan_info {
            struct_size: sys::FLASHBWD_PLAN_INFO_STRUCT_SIZE,
            ..Default::default()
        };
        // SAFETY: a live plan and a writable info of the size struct_size declares.
        check_plan(unsafe { sys::flashbwd_plan_get_info(self.raw.as_ptr(), &mut raw) }, self.raw.as_ptr())?;
        let n = raw.num_launches.clamp(0, raw.grid.len() as i32) as usize;
        Ok(PlanInfo {
            backend: self.problem.get_backend(),
            arch: raw.arch,
            sm_count: raw.sm_count,
            smem_per_block: raw.smem_per_block,
            kernel_head_dim: raw.kernel_head_dim,
            block_m: raw.block_m,
            block_n: raw.block_n,
            num_threads: raw.num_threads,
            stages_q: raw.stages_q,
            stages_do: raw.stages_do,
            smem_bytes: raw.smem_bytes,
            launches: (0..n).map(|i| Launch { grid: raw.grid[i], block: raw.block[i] }).collect(),
            workspace_bytes: raw.workspace_bytes,
        })
    }

    /// Bytes of scratch memory execute needs (device memory for CUDA, host memory for the
    /// CPU); fixed for the life of the plan, possibly 0.
    pub fn workspace_size(&self) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: a live plan and a writable size_t.
        check_plan(unsafe { sys::flashbwd_plan_workspace_size(self.raw.as_ptr(), &mut bytes) }, self.raw.as_ptr())?;
        Ok(bytes)
    }

    /// Bind tensor `id` at address `ptr` with element `strides` (outermost first, the last
    /// 1; `None` = packed row-major in the layout of [`TensorId`]); `DevicePtr::NULL` unbinds.
    /// The library checks rank, strides, alignment and overlap now, but does not read the
    /// memory: that happens in [`Plan::execute`], whose contract covers it.
    pub fn set_tensor(&mut self, id: TensorId, ptr: DevicePtr, strides: Option<&[i64]>) -> Result<()> {
        let (sp, n) = match strides {
            Some(s) => (s.as_ptr(), i32::try_from(s.len()).unwrap_or(i32::MAX)),
            None => (ptr::null(), 0),
        };
        // SAFETY: a live plan, exclusively borrowed; strides is read during the call only;
        // the pointer is recorded, not dereferenced.
        let raw = unsafe { sys::flashbwd_plan_set_tensor(self.raw.as_ptr(), id.raw(), ptr.as_void(), sp, n) };
        check_plan(raw, self.raw.as_ptr())
    }

    /// Bind `bytes` of workspace at `ptr` (256-byte aligned for CUDA); `DevicePtr::NULL`
    /// unbinds. Recorded, not dereferenced, as for [`Plan::set_tensor`]. For a [`Workspace`]
    /// from [`Plan::alloc_workspace`]: `set_workspace(ws.ptr(), ws.bytes())`, and keep `ws`
    /// alive (and unbind it, or drop the plan, before it goes) as [`Plan::execute`] requires.
    pub fn set_workspace(&mut self, ptr: DevicePtr, bytes: usize) -> Result<()> {
        // SAFETY: a live plan, exclusively borrowed; the pointer is only recorded.
        let raw = unsafe { sys::flashbwd_plan_set_workspace(self.raw.as_ptr(), ptr.as_void(), bytes) };
        check_plan(raw, self.raw.as_ptr())
    }

    /// Allocate a workspace for this plan in the memory its execute runs fastest with
    /// (`flashbwd_workspace_alloc`; since 1.1): compressible device memory on Hopper and
    /// newer, else `cudaMalloc`'d memory, on the plan's device (the current device is left
    /// as it was); 256-byte aligned host memory for the CPU backend. A convenience: any
    /// memory that meets [`Plan::set_workspace`]'s rules works as well.
    ///
    /// Nothing is bound: give the [`Workspace`] to [`HostBinding::workspace`] (CPU backend)
    /// or its address to [`Plan::set_workspace`] (CUDA backend). It is synchronous like
    /// `cudaMalloc`: not for a stream that is being captured.
    ///
    /// ```
    /// use flashbwd::{Backend, Plan, Problem};
    ///
    /// let plan = Plan::new(&Problem::new(1, 2, 16, 16, 32).backend(Backend::Cpu))?;
    /// let ws = plan.alloc_workspace()?;
    /// assert!(ws.bytes() >= plan.workspace_size()? && !ws.is_compressed());
    /// assert_eq!(ws.ptr().0 % 256, 0);
    /// # Ok::<(), flashbwd::Error>(())
    /// ```
    ///
    /// # Errors
    /// The library's: [`Status::NOT_SUPPORTED`] for a planning-only plan (one made for an
    /// explicit [`Problem::arch`]: there is no device to allocate on),
    /// [`Status::CUDA`] when the device is out of memory (the message names the call),
    /// [`Status::NO_DEVICE`], [`Status::OUT_OF_MEMORY`] (host).
    pub fn alloc_workspace(&self) -> Result<Workspace> {
        Workspace::alloc(self)
    }

    /// Compute dQ, dK and dV for the bound tensors (`flashbwd_execute`). CUDA: enqueues the
    /// kernels on `stream` and returns without synchronizing; kernel faults surface later on
    /// the stream. CPU: computes on this thread and returns when done.
    ///
    /// # Safety
    /// Every tensor and the workspace bound to this plan must point to memory of the plan's
    /// backend (device memory of the plan's device, or host memory for the CPU) that holds
    /// the extent its shape and strides span, stays valid, and is not accessed by anything
    /// else, until the work has finished: on the stream for CUDA, at return for the CPU.
    /// `stream` must be a live stream of the current device (or [`Stream::DEFAULT`]).
    pub unsafe fn execute(&mut self, stream: Stream) -> Result<()> {
        let raw = sys::flashbwd_execute(self.raw.as_ptr(), stream.0);
        check_plan(raw, self.raw.as_ptr())
    }

    /// The message of the last failed call on this plan ("" if it succeeded).
    pub fn last_error(&self) -> String {
        // SAFETY: a live plan; the string is copied at once.
        let p = unsafe { sys::flashbwd_plan_last_error(self.raw.as_ptr()) };
        if p.is_null() {
            return String::new();
        }
        unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Start binding host slices to this CPU-backend plan: the safe way to run it. Unbinds
    /// everything bound before, so the binding executes only on what it was given.
    ///
    /// # Errors
    /// [`Status::INVALID_VALUE`] if the plan is not for [`Backend::Cpu`] (host memory is
    /// meaningless to a CUDA plan).
    pub fn bind_host<'b>(&mut self) -> Result<HostBinding<'_, 'b>> {
        HostBinding::new(self)
    }
}
