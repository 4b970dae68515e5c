//! layout.rs — the generated structs against the header's size constants and against the
//! loaded library's own idea of them (flashbwd_struct_size), and the Status constants
//! against the library's status names. bindgen's own layout tests (in bindings.rs) check
//! every field offset against what clang computed from the header.

use flashbwd_sys::*;
use std::ffi::CStr;
use std::mem::{offset_of, size_of};

#[test]
fn problem_struct_size_is_offset_plus_size_of_its_last_field() {
    let end = offset_of!(flashbwd_problem, reserved0) + size_of::<i32>();
    assert_eq!(FLASHBWD_PROBLEM_STRUCT_SIZE, end);
    assert_eq!(FLASHBWD_PROBLEM_STRUCT_SIZE_1_0, end, "1.0 is the only layout so far");
    assert!(size_of::<flashbwd_problem>() >= FLASHBWD_PROBLEM_STRUCT_SIZE);
}

#[test]
fn plan_info_struct_size_is_offset_plus_size_of_its_last_field() {
    let end = offset_of!(flashbwd_plan_info, workspace_bytes) + size_of::<usize>();
    assert_eq!(FLASHBWD_PLAN_INFO_STRUCT_SIZE, end);
    assert_eq!(FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0, end, "1.0 is the only layout so far");
    assert!(size_of::<flashbwd_plan_info>() >= FLASHBWD_PLAN_INFO_STRUCT_SIZE);
}

#[test]
fn library_struct_sizes_equal_the_generated_constants() {
    // The library these tests link is built from the same header, so the sizes are equal;
    // a difference means the committed bindings are stale (run regen.sh).
    let problem = unsafe { flashbwd_struct_size(FLASHBWD_STRUCT_PROBLEM) };
    let info = unsafe { flashbwd_struct_size(FLASHBWD_STRUCT_PLAN_INFO) };
    assert_eq!(problem, FLASHBWD_PROBLEM_STRUCT_SIZE);
    assert_eq!(info, FLASHBWD_PLAN_INFO_STRUCT_SIZE);
}

#[test]
fn library_struct_size_of_an_unknown_id_is_0() {
    for id in [0, 3, -1, i32::MAX] {
        assert_eq!(unsafe { flashbwd_struct_size(id) }, 0, "struct id {id}");
    }
}

#[test]
fn default_problem_is_all_zero_bytes() {
    // The ABI's "all defaults" is a zeroed struct; Default must give exactly that.
    let p = flashbwd_problem::default();
    let bytes = unsafe {
        std::slice::from_raw_parts(&p as *const _ as *const u8, size_of::<flashbwd_problem>())
    };
    assert!(bytes.iter().all(|&b| b == 0));
}

#[test]
fn status_constants_carry_the_library_names() {
    // Written out by hand, independently of the Status constants, so a constant bound to
    // the wrong FLASHBWD_ERR_* value fails here.
    let expected = [
        (Status::OK, "FLASHBWD_OK"),
        (Status::NULL_ARGUMENT, "FLASHBWD_ERR_NULL_ARGUMENT"),
        (Status::STRUCT_SIZE, "FLASHBWD_ERR_STRUCT_SIZE"),
        (Status::INVALID_VALUE, "FLASHBWD_ERR_INVALID_VALUE"),
        (Status::NOT_SUPPORTED, "FLASHBWD_ERR_NOT_SUPPORTED"),
        (Status::NO_DEVICE, "FLASHBWD_ERR_NO_DEVICE"),
        (Status::WRONG_DEVICE, "FLASHBWD_ERR_WRONG_DEVICE"),
        (Status::MISALIGNED, "FLASHBWD_ERR_MISALIGNED"),
        (Status::TENSOR_NOT_SET, "FLASHBWD_ERR_TENSOR_NOT_SET"),
        (Status::WORKSPACE_TOO_SMALL, "FLASHBWD_ERR_WORKSPACE_TOO_SMALL"),
        (Status::CUDA, "FLASHBWD_ERR_CUDA"),
        (Status::OUT_OF_MEMORY, "FLASHBWD_ERR_OUT_OF_MEMORY"),
        (Status::OVERFLOW, "FLASHBWD_ERR_OVERFLOW"),
        (Status::BUSY, "FLASHBWD_ERR_BUSY"),
        (Status::OVERLAP, "FLASHBWD_ERR_OVERLAP"),
        (Status::INVALID_LENGTHS, "FLASHBWD_ERR_INVALID_LENGTHS"),
        (Status::INTERNAL, "FLASHBWD_ERR_INTERNAL"),
    ];
    assert_eq!(expected.len(), FLASHBWD_STATUS_COUNT as usize);
    for (i, (status, name)) in expected.iter().enumerate() {
        assert_eq!(status.0, i as i32, "{name} has value {i} in the header");
        assert_eq!(status.name(), *name);
        assert_eq!(Status::ALL[i], *status);
        let raw = unsafe { CStr::from_ptr(flashbwd_status_name(i as i32)) };
        assert_eq!(raw.to_str().unwrap(), *name);
        assert!(!status.description().is_empty(), "{name} has a description");
    }
    assert!(Status::OK.is_ok());
    assert!(!Status::INTERNAL.is_ok());
}

#[test]
fn unknown_status_is_named_unknown() {
    assert_eq!(Status(FLASHBWD_STATUS_COUNT).name(), "FLASHBWD_ERR_UNKNOWN");
    assert_eq!(Status(-1).name(), "FLASHBWD_ERR_UNKNOWN");
    assert_eq!(format!("{:?}", Status(-1)), "Status(FLASHBWD_ERR_UNKNOWN = -1)");
}

#[test]
fn runtime_version_matches_the_header() {
    let v = unsafe { flashbwd_version() };
    assert_eq!(v / 10000, FLASHBWD_VERSION_MAJOR as u32);
    assert_eq!(FLASHBWD_VERSION, FLASHBWD_VERSION_MAJOR * 10000 + FLASHBWD_VERSION_MINOR * 100
        + FLASHBWD_VERSION_PATCH);
    assert!(v >= FLASHBWD_VERSION as u32, "runtime {v} older than header {FLASHBWD_VERSION}");
}
