//! build.rs — give this crate's tests, examples and doc-tests an rpath to libflashbwd.
//!
//! flashbwd-sys links the library, but Cargo passes rpath link arguments only to the targets
//! of the crate whose build script emits them; the directory it found reaches this crate
//! as DEP_FLASHBWD_LIB_DIR. Applications depending on `flashbwd` do the same, install the
//! library where the loader looks (ldconfig), or set LD_LIBRARY_PATH.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_FLASHBWD_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_FLASHBWD_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
