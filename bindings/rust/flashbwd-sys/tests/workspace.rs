//! workspace.rs — flashbwd_workspace_alloc and flashbwd_workspace_free (ABI 1.1) through the
//! raw bindings, on a CPU plan: what alloc returns, and the errors the safe crate cannot
//! reach (a pointer the library never gave, a double free, NULL arguments), each with its
//! status and the thread's message.
//!
//! The library keeps a registry of live workspaces per process; only one test here
//! allocates, so no other test can reuse a freed address while this one checks it.

use flashbwd_sys::*;
use std::ffi::{c_void, CStr};
use std::ptr;

fn thread_message() -> String {
    unsafe { CStr::from_ptr(flashbwd_last_error()) }.to_string_lossy().into_owned()
}

/// A CPU plan of 1 sequence, 1 head, 8 query and 8 key rows of head dim 8.
fn cpu_plan() -> *mut flashbwd_plan {
    let mut p: flashbwd_problem = Default::default();
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CPU;
    (p.batch, p.heads_q, p.seqlen_q, p.seqlen_k, p.head_dim) = (1, 1, 8, 8, 8);
    let mut plan = ptr::null_mut();
    let st = unsafe { flashbwd_plan_create(&p, &mut plan) };
    assert_eq!(st, FLASHBWD_OK, "plan_create: {}", thread_message());
    plan
}

#[test]
fn freeing_null_does_nothing() {
    assert_eq!(unsafe { flashbwd_workspace_free(ptr::null_mut()) }, FLASHBWD_OK);
}

#[test]
fn freeing_a_pointer_the_library_never_gave_is_invalid_value() {
    let mut local = 0u64; // the library only looks the address up; it never touches it
    let bogus = &mut local as *mut u64 as *mut c_void;
    let st = unsafe { flashbwd_workspace_free(bogus) };
    assert_eq!(st, FLASHBWD_ERR_INVALID_VALUE);
    assert_eq!(Status(st), Status::INVALID_VALUE);
    let msg = thread_message();
    assert!(msg.starts_with("FLASHBWD_ERR_INVALID_VALUE: flashbwd_workspace_free: "), "{msg}");
    assert!(msg.contains("did not come from flashbwd_workspace_alloc"), "{msg}");
    assert_eq!(local, 0);
}

#[test]
fn alloc_gives_aligned_host_memory_that_frees_once() {
    let plan = cpu_plan();
    let mut need = 0usize;
    assert_eq!(unsafe { flashbwd_plan_workspace_size(plan, &mut need) }, FLASHBWD_OK);
    assert!(need > 0, "a CPU plan always needs a workspace");
    let (mut ws, mut bytes, mut compressed) = (ptr::null_mut::<c_void>(), 0usize, -1i32);
    let st = unsafe { flashbwd_workspace_alloc(plan, &mut ws, &mut bytes, &mut compressed) };
    assert_eq!(st, FLASHBWD_OK, "{}", thread_message());
    assert!(!ws.is_null());
    assert_eq!(ws as usize % 256, 0, "CPU workspaces are 256-byte aligned");
    assert!(bytes >= need, "{bytes} < {need}");
    assert_eq!(compressed, 0, "host memory is never compressible");
    // It is plain host memory the plan's execute may use: the whole of it is writable.
    unsafe { ptr::write_bytes(ws as *mut u8, 0xa5, bytes) };
    assert_eq!(unsafe { flashbwd_plan_set_workspace(plan, ws, bytes) }, FLASHBWD_OK);
    assert_eq!(unsafe { flashbwd_plan_set_workspace(plan, ptr::null_mut(), 0) }, FLASHBWD_OK);
    // compressed may be NULL.
    let (mut ws2, mut bytes2) = (ptr::null_mut::<c_void>(), 0usize);
    let st = unsafe { flashbwd_workspace_alloc(plan, &mut ws2, &mut bytes2, ptr::null_mut()) };
    assert_eq!(st, FLASHBWD_OK, "{}", thread_message());
    assert!(!ws2.is_null() && ws2 != ws && bytes2 == bytes);
    unsafe { flashbwd_plan_destroy(plan) }; // the memory outlives the plan
    assert_eq!(unsafe { flashbwd_workspace_free(ws) }, FLASHBWD_OK);
    assert_eq!(unsafe { flashbwd_workspace_free(ws2) }, FLASHBWD_OK);
    // A second free of the same address is refused, not a double free.
    assert_eq!(unsafe { flashbwd_workspace_free(ws) }, FLASHBWD_ERR_INVALID_VALUE);
    assert!(thread_message().contains("freed already"), "{}", thread_message());
}

#[test]
fn alloc_with_null_arguments_is_null_argument() {
    let (mut ws, mut bytes) = (1usize as *mut c_void, 7usize);
    let st = unsafe { flashbwd_workspace_alloc(ptr::null_mut(), &mut ws, &mut bytes, ptr::null_mut()) };
    assert_eq!(st, FLASHBWD_ERR_NULL_ARGUMENT);
    assert!(ws.is_null() && bytes == 0, "on failure *ptr is NULL and *bytes 0");
    assert!(thread_message().contains("plan is NULL"), "{}", thread_message());
    let plan = cpu_plan();
    let st = unsafe { flashbwd_workspace_alloc(plan, &mut ws, ptr::null_mut(), ptr::null_mut()) };
    assert_eq!(st, FLASHBWD_ERR_NULL_ARGUMENT);
    assert!(ws.is_null());
    let msg = unsafe { CStr::from_ptr(flashbwd_plan_last_error(plan)) }.to_string_lossy().into_owned();
    assert!(msg.contains("bytes is NULL"), "{msg}");
    unsafe { flashbwd_plan_destroy(plan) };
}
