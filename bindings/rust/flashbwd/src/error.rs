//! error.rs — `Error`: a failed flashbwd call as a status plus the detailed message the
//! library recorded for it, and the version check that guards first use.

use flashbwd_sys as sys;
pub use sys::Status;
use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_char;
use std::sync::OnceLock;

/// `Result<T, flashbwd::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// A failed flashbwd call: its status and the detailed message that names the offending
/// field and value.
///
/// The message is read right after the failing call, on the same thread, from the plan's
/// message (`flashbwd_plan_last_error`) or, for failures with no plan, the thread's
/// (`flashbwd_last_error`). Checks made on the Rust side before calling the library (a
/// slice too short for its tensor, say) use the status the library would use.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
}

impl Error {
    /// An error with a message of the caller's.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The status, e.g. [`Status::INVALID_VALUE`].
    pub fn status(&self) -> Status {
        self.status
    }

    /// The stable identifier of the status, e.g. `"FLASHBWD_ERR_INVALID_VALUE"`.
    pub fn name(&self) -> &'static str {
        self.status.name()
    }

    /// The library's one-line description of the status.
    pub fn description(&self) -> &'static str {
        self.status.description()
    }

    /// The detailed message, e.g. `"problem.head_dim = 7; expected a multiple of 8 ..."`,
    /// without the status name the library puts in front of it; empty if the library
    /// recorded none.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}: {}", self.name(), self.description())
        } else {
            write!(f, "{}: {}", self.name(), self.message)
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("status", &self.status)
            .field("message", &self.message)
            .finish()
    }
}

impl std::error::Error for Error {}

/// Copy a message string the library owns (it is overwritten by the next call).
fn owned(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the library returns NUL-terminated strings, valid until the next call on the
    // plan or thread; it is copied before any other flashbwd call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// An error from the library's status and message. The library's messages begin with the
/// status name ("FLASHBWD_ERR_X: ..."); that is dropped, as Display puts it back.
fn from_library(raw: i32, message: String) -> Error {
    let status = Status(raw);
    let detail = message
        .strip_prefix(status.name())
        .and_then(|rest| rest.strip_prefix(": "))
        .map(str::to_owned)
        .unwrap_or(message);
    Error { status, message: detail }
}

/// Turn the status of a call that had no plan into a Result, reading the thread's message.
pub(crate) fn check(raw: i32) -> Result<()> {
    if raw == sys::FLASHBWD_OK {
        return Ok(());
    }
    // SAFETY: takes no argument; the string is copied at once.
    let message = owned(unsafe { sys::flashbwd_last_error() });
    Err(from_library(raw, message))
}

/// Turn the status of a call on `plan` into a Result, reading the plan's message (and the
/// thread's, if a failure was recorded only there, as for argument checks).
pub(crate) fn check_plan(raw: i32, plan: *const sys::flashbwd_plan) -> Result<()> {
    if raw == sys::FLASHBWD_OK {
        return Ok(());
    }
    // SAFETY: plan is a live plan; the strings are copied at once.
    let mut message = owned(unsafe { sys::flashbwd_plan_last_error(plan) });
    if message.is_empty() {
        message = owned(unsafe { sys::flashbwd_last_error() });
    }
    Err(from_library(raw, message))
}

/// A flashbwd version number, MAJOR*10000 + MINOR*100 + PATCH, as text.
fn dotted(v: u32) -> String {
    format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
}

/// Whether a library of version `runtime` can serve bindings built for `compiled`: the
/// majors are equal and the library is not older (a newer minor only adds).
pub fn version_compatible(runtime: u32, compiled: u32) -> bool {
    runtime / 10000 == compiled / 10000 && runtime >= compiled
}

/// The version of the header these bindings were generated from (`FLASHBWD_VERSION`).
pub const COMPILED_VERSION: u32 = sys::FLASHBWD_VERSION as u32;

/// Check, once per process, that the loaded libflashbwd can serve these bindings, and
/// return its version (`flashbwd_version()`). [`Plan::new`](crate::Plan::new) calls this
/// first, so a mismatch surfaces as an error before any other call.
///
/// # Errors
/// [`Status::NOT_SUPPORTED`], with both versions in the message, when the majors differ or
/// the library is older than the header the bindings were generated from.
pub fn check_version() -> Result<u32> {
    static CHECKED: OnceLock<Result<u32>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            // SAFETY: takes no argument and never fails.
            let runtime = unsafe { sys::flashbwd_version() };
            if version_compatible(runtime, COMPILED_VERSION) {
                Ok(runtime)
            } else {
                Err(Error::new(
                    Status::NOT_SUPPORTED,
                    format!(
                        "libflashbwd {} is loaded, but these bindings were built for {}: the \
                         major versions must be equal and the library must not be older",
                        dotted(runtime),
                        dotted(COMPILED_VERSION)
                    ),
                ))
            }
        })
        .clone()
}
