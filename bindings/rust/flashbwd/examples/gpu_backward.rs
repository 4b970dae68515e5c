//! gpu_backward.rs — the backward pass on GPU memory through the safe crate's raw-pointer
//! interface, checked against the CPU backend on the same fresh random inputs.
//!
//! Device memory comes from the CUDA driver API (libcuda.so.1, loaded with dlopen, so the
//! binary builds and starts on a machine without a driver). For each case: inputs are
//! copied to the device, outputs are poisoned (all bits set, NaN in bf16 and fp16), the
//! plan runs on its own stream, and dQ, dK, dV must be finite, leave every layout gap
//! untouched and be within the design's bound (relative Frobenius error 1e-2 bf16, 3e-3
//! fp16) of the CPU backend's result, and of an f64 reference where that is cheap. Every
//! other case takes its workspace from `Plan::alloc_workspace` (compressible memory on
//! Hopper), the rest from the driver; each line says which.
//!
//! Exit status: 0 all cases passed; 1 a case failed; 77 SKIPPED (no driver or no GPU).
//!
//!   cargo build --release --offline --example gpu_backward    # here, against a CUDA build
//!   LD_LIBRARY_PATH=<dir of libflashbwd.so.1> target/release/examples/gpu_backward

#[allow(dead_code)]
#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use flashbwd::{Backend, DevicePtr, Plan, Stream, TensorId as T};
use std::ffi::{c_void, CStr, CString};
use std::os::raw::{c_char, c_int, c_uint};
use std::process::ExitCode;
use std::time::Instant;

// ---------------------------------------------------------------------------------------
// The CUDA driver API, loaded at run time.
// ---------------------------------------------------------------------------------------

extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}
const RTLD_NOW: c_int = 2;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

type CuResult = c_int;
type CuDevicePtr = u64;

/// The driver entry points this example uses (the `_v2` names are the ones libcuda exports
/// for the 64-bit API).
struct Driver {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
    primary_ctx_release: unsafe extern "C" fn(c_int) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    stream_create: unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuResult,
    stream_synchronize: unsafe extern "C" fn(*mut c_void) -> CuResult,
    stream_destroy: unsafe extern "C" fn(*mut c_void) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

impl Driver {
    fn load() -> Result<Driver, String> {
        let name = CString::new("libcuda.so.1").unwrap();
        // SAFETY: plain dlopen/dlsym; each symbol is cast to the type the CUDA driver API
        // documents for it.
        unsafe {
            let lib = dlopen(name.as_ptr(), RTLD_NOW);
            if lib.is_null() {
                let why = CStr::from_ptr(dlerror()).to_string_lossy().into_owned();
                return Err(format!("cannot load the CUDA driver: {why}"));
            }
            macro_rules! sym {
                ($name:literal) => {{
                    let s = CString::new($name).unwrap();
                    let p = dlsym(lib, s.as_ptr());
                    if p.is_null() {
                        return Err(format!("libcuda.so.1 has no {}", $name));
                    }
                    std::mem::transmute::<*mut c_void, _>(p)
                }};
            }
            Ok(Driver {
                init: sym!("cuInit"),
                device_get_count: sym!("cuDeviceGetCount"),
                device_get: sym!("cuDeviceGet"),
                device_get_name: sym!("cuDeviceGetName"),
                device_get_attribute: sym!("cuDeviceGetAttribute"),
                primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
                primary_ctx_release: sym!("cuDevicePrimaryCtxRelease_v2"),
                ctx_set_current: sym!("cuCtxSetCurrent"),
                mem_alloc: sym!("cuMemAlloc_v2"),
                mem_free: sym!("cuMemFree_v2"),
                memcpy_htod: sym!("cuMemcpyHtoD_v2"),
                memcpy_dtoh: sym!("cuMemcpyDtoH_v2"),
                stream_create: sym!("cuStreamCreate"),
                stream_synchronize: sym!("cuStreamSynchronize"),
                stream_destroy: sym!("cuStreamDestroy_v2"),
                get_error_name: sym!("cuGetErrorName"),
            })
        }
    }

    fn check(&self, r: CuResult, what: &str) -> Result<(), String> {
        if r == 0 {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a static string or leaves it NULL.
        unsafe { (self.get_error_name)(r, &mut name) };
        let name = if name.is_null() {
            "unknown".to_owned()
        } else {
            unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
        };
        Err(format!("{what} failed: CUDA error {r} ({name})"))
    }
}

/// Device memory, freed on drop.
struct DevBuf<'a> {
    drv: &'a Driver,
    ptr: CuDevicePtr,
}

impl<'a> DevBuf<'a> {
    fn from_host<E: Copy>(drv: &'a Driver, host: &[E]) -> Result<DevBuf<'a>, String> {
        let bytes = std::mem::size_of_val(host).max(1);
        let mut ptr = 0;
        drv.check(unsafe { (drv.mem_alloc)(&mut ptr, bytes) }, "cuMemAlloc")?;
        let buf = DevBuf { drv, ptr };
        let src = host.as_ptr() as *const c_void;
        drv.check(unsafe { (drv.memcpy_htod)(ptr, src, std::mem::size_of_val(host)) }, "cuMemcpyHtoD")?;
        Ok(buf)
    }
    fn to_host<E: Copy>(&self, host: &mut [E]) -> Result<(), String> {
        let dst = host.as_mut_ptr() as *mut c_void;
        self.drv.check(unsafe { (self.drv.memcpy_dtoh)(dst, self.ptr, std::mem::size_of_val(host)) }, "cuMemcpyDtoH")
    }
    fn addr(&self) -> DevicePtr {
        DevicePtr(self.ptr)
    }
}

impl Drop for DevBuf<'_> {
    fn drop(&mut self) {
        unsafe { (self.drv.mem_free)(self.ptr) };
    }
}

// ---------------------------------------------------------------------------------------
// One case on the GPU
// ---------------------------------------------------------------------------------------

type Outputs = (Vec<u16>, Vec<u16>, Vec<u16>);

/// The backward of `case` on device 0: every tensor copied whole (layout gaps included),
/// outputs poisoned, on a fresh stream, with a workspace from `Plan::alloc_workspace` when
/// `library_ws`, else from cuMemAlloc. Returns the outputs copied back, and which workspace.
fn run_gpu(drv: &Driver, case: &Case, data: &Data, library_ws: bool) -> Result<(Outputs, &'static str), String> {
    let fail = |e: flashbwd::Error| e.to_string();
    let mut plan = Plan::new(&case.problem(Backend::Cuda { device: 0 })).map_err(fail)?;
    let up16 = |t: &Strided<u16>| DevBuf::from_host(drv, &t.data);
    let (q, k, v, o, d_o) = (up16(&data.q)?, up16(&data.k)?, up16(&data.v)?, up16(&data.o)?, up16(&data.d_o)?);
    let lse = DevBuf::from_host(drv, &data.lse.data)?;
    let (dq, dk, dv) = (up16(&data.dq)?, up16(&data.dk)?, up16(&data.dv)?); // poisoned
    let cu_q = DevBuf::from_host(drv, &data.cu_q)?;
    let cu_k = DevBuf::from_host(drv, &data.cu_k)?;
    for (id, buf, t) in [(T::Q, &q, &data.q), (T::K, &k, &data.k), (T::V, &v, &data.v), (T::O, &o, &data.o),
                         (T::DO, &d_o, &data.d_o), (T::DQ, &dq, &data.dq), (T::DK, &dk, &data.dk), (T::DV, &dv, &data.dv)] {
        plan.set_tensor(id, buf.addr(), t.strides_arg()).map_err(fail)?;
    }
    plan.set_tensor(T::Lse, lse.addr(), data.lse.strides_arg()).map_err(fail)?;
    if case.varlen.is_some() {
        plan.set_tensor(T::CuSeqlensQ, cu_q.addr(), None).map_err(fail)?;
        plan.set_tensor(T::CuSeqlensK, cu_k.addr(), None).map_err(fail)?;
    }
    let ws_bytes = plan.workspace_size().map_err(fail)?;
    let (_dev_ws, _lib_ws, which); // whichever is set lives until the stream is synchronized
    if library_ws {
        let ws = plan.alloc_workspace().map_err(fail)?;
        if ws.bytes() < ws_bytes || ws.backend() != (Backend::Cuda { device: 0 }) {
            return Err(format!("alloc_workspace gave {ws:?} for a plan that needs {ws_bytes} bytes"));
        }
        plan.set_workspace(ws.ptr(), ws.bytes()).map_err(fail)?;
        which = if ws.is_compressed() { "library ws, compressible" } else { "library ws" };
        _lib_ws = ws;
    } else {
        let ws = DevBuf::from_host(drv, &vec![0u8; ws_bytes.max(1)])?;
        if ws_bytes > 0 {
            plan.set_workspace(ws.addr(), ws_bytes).map_err(fail)?;
        }
        which = "cuMemAlloc ws";
        _dev_ws = ws;
    }
    let mut stream = std::ptr::null_mut();
    drv.check(unsafe { (drv.stream_create)(&mut stream, 0) }, "cuStreamCreate")?;
    // SAFETY: every bound address is a live allocation of device 0 holding the whole strided
    // extent of its tensor (the host buffers were copied whole), and all of them outlive
    // the stream synchronization below; `stream` is a live stream of the current context.
    let run = unsafe { plan.execute(Stream(stream)) };
    let sync = drv.check(unsafe { (drv.stream_synchronize)(stream) }, "cuStreamSynchronize");
    unsafe { (drv.stream_destroy)(stream) };
    run.map_err(fail)?;
    sync?;
    let mut out = (data.dq.data.clone(), data.dk.data.clone(), data.dv.data.clone());
    dq.to_host(&mut out.0)?;
    dk.to_host(&mut out.1)?;
    dv.to_host(&mut out.2)?;
    Ok((out, which))
}

/// Compare GPU outputs with the CPU backend's (and the f64 reference when computed).
fn compare(case: &Case, data: &Data, gpu: &Outputs, cpu: &Outputs, with_ref: bool) -> Result<String, String> {
    let tol = tolerance(case.kind);
    let mut report = Vec::new();
    let outs = [("dQ", &gpu.0, &cpu.0, &data.dq, &data.ref_dq, true, case.heads_q),
                ("dK", &gpu.1, &cpu.1, &data.dk, &data.ref_dk, false, case.heads_kv),
                ("dV", &gpu.2, &cpu.2, &data.dv, &data.ref_dv, false, case.heads_kv)];
    for (name, g, c, layout, reference, q_side, heads) in outs {
        let as_strided = |buf: &Vec<u16>| Strided { data: buf.clone(), strides: layout.strides.clone(),
                                                    dims: layout.dims.clone(), packed: layout.packed };
        let cpu_packed = unpack(case, data, &as_strided(c), q_side, heads);
        let vs_cpu = check(case, data, &as_strided(g), &cpu_packed, q_side, heads);
        if vs_cpu.non_finite > 0 || vs_cpu.gaps_touched > 0 || !(vs_cpu.rel_err <= tol) {
            return Err(format!("{name}: {vs_cpu:?} (bound {tol:.0e})"));
        }
        let mut line = format!("{name} {:.2e}", vs_cpu.rel_err);
        if with_ref {
            let vs_ref = check(case, data, &as_strided(g), reference, q_side, heads);
            if !(vs_ref.rel_err <= tol) {
                return Err(format!("{name} against f64: {vs_ref:?} (bound {tol:.0e})"));
            }
            line += &format!(" (f64 {:.2e})", vs_ref.rel_err);
        }
        report.push(line);
    }
    Ok(report.join("  "))
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let mut c = Case::new("bf16 d64 gqa 512x512", Kind::Bf16, 2, 8, 2, 512, 512, 64);
    v.push(c.clone());
    c = Case::new("fp16 d64 causal 1000x1000", Kind::Fp16, 1, 4, 4, 1000, 1000, 64);
    c.causal = true;
    v.push(c);
    c = Case::new("bf16 d128 causal 17x300", Kind::Bf16, 2, 4, 1, 17, 300, 128);
    c.causal = true;
    v.push(c);
    c = Case::new("fp16 d128 causal 300x17 (masked rows)", Kind::Fp16, 1, 2, 2, 300, 17, 128);
    c.causal = true;
    v.push(c);
    v.push(Case::new("bf16 d64 1x1", Kind::Bf16, 1, 1, 1, 1, 1, 64));
    c = Case::new("bf16 d64 window(64,0) 777x777", Kind::Bf16, 1, 2, 1, 777, 777, 64);
    c.window = Some((64, 0));
    v.push(c);
    c = Case::new("fp16 d64 head-major 129x255", Kind::Fp16, 2, 4, 2, 129, 255, 64);
    c.layout = Layout::HeadMajor;
    c.scale = 0.2;
    v.push(c);
    c = Case::new("bf16 d128 padded causal 96x160", Kind::Bf16, 2, 2, 2, 96, 160, 128);
    c.layout = Layout::Padded;
    c.causal = true;
    v.push(c);
    c = Case::new("fp16 d64 varlen padded", Kind::Fp16, 3, 4, 2, 513, 400, 64);
    c.varlen = Some((vec![300, 1, 513], vec![400, 77, 129]));
    c.layout = Layout::Padded;
    v.push(c);
    v
}

fn main() -> ExitCode {
    let drv = match Driver::load() {
        Ok(d) => d,
        Err(why) => {
            println!("SKIPPED: {why}");
            return ExitCode::from(77);
        }
    };
    let r = unsafe { (drv.init)(0) };
    let mut count = 0;
    if r != 0 || unsafe { (drv.device_get_count)(&mut count) } != 0 || count == 0 {
        let why = drv.check(r, "cuInit").err().unwrap_or_else(|| "no CUDA device".to_owned());
        println!("SKIPPED: {why}");
        return ExitCode::from(77);
    }
    let setup = || -> Result<(c_int, String), String> {
        let mut dev = 0;
        drv.check(unsafe { (drv.device_get)(&mut dev, 0) }, "cuDeviceGet")?;
        let mut name = [0 as c_char; 256];
        drv.check(unsafe { (drv.device_get_name)(name.as_mut_ptr(), 256, dev) }, "cuDeviceGetName")?;
        let (mut major, mut minor) = (0, 0);
        drv.check(unsafe { (drv.device_get_attribute)(&mut major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) }, "cuDeviceGetAttribute")?;
        drv.check(unsafe { (drv.device_get_attribute)(&mut minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) }, "cuDeviceGetAttribute")?;
        // The primary context is the one the CUDA runtime inside libflashbwd uses too.
        let mut ctx = std::ptr::null_mut();
        drv.check(unsafe { (drv.primary_ctx_retain)(&mut ctx, dev) }, "cuDevicePrimaryCtxRetain")?;
        drv.check(unsafe { (drv.ctx_set_current)(ctx) }, "cuCtxSetCurrent")?;
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        Ok((dev, format!("{name} (sm_{major}{minor})")))
    };
    let (dev, device) = match setup() {
        Ok(d) => d,
        Err(e) => {
            println!("FAILED: device setup: {e}");
            return ExitCode::from(1);
        }
    };
    let v = flashbwd::version();
    println!("flashbwd {}.{}.{} on {device}", v / 10000, v / 100 % 100, v % 100);

    let mut rng = Rng::new(seed());
    let (mut passed, mut failed) = (0, 0);
    for (i, case) in cases().into_iter().enumerate() {
        let t0 = Instant::now();
        let (lq, lk) = case.lens();
        let work: i64 = lq.iter().zip(&lk).map(|(a, b)| a * b).sum::<i64>() * case.heads_q * case.head_dim;
        let with_ref = work <= 1 << 26; // the f64 reference only where it takes a moment
        let data = make_with(&case, &mut rng, with_ref);
        let result = run_safe(&case, &data)
            .map_err(|e| format!("CPU backend: {e}"))
            .and_then(|cpu| run_gpu(&drv, &case, &data, i % 2 == 0).map(|gpu| (gpu, cpu)))
            .and_then(|((gpu, which), cpu)| compare(&case, &data, &gpu, &cpu, with_ref).map(|r| format!("{r}  [{which}]")));
        let secs = t0.elapsed().as_secs_f64();
        match result {
            Ok(report) => {
                passed += 1;
                println!("PASS {:<40} {report}  [{secs:.1} s]", case.name);
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {:<40} {e}", case.name);
            }
        }
    }
    unsafe { (drv.primary_ctx_release)(dev) };
    println!("{} cases: {passed} passed, {failed} failed", passed + failed);
    if failed == 0 && passed > 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

