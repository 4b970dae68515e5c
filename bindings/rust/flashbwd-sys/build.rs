//! build.rs — find libflashbwd.so and tell rustc to link it.
//!
//! Where the library comes from, in order:
//! 1. `FLASHBWD_LIB_DIR`: a directory holding `libflashbwd.so` (a CMake build directory or
//!    an install's lib/). Relative paths are taken from the current directory.
//! 2. `pkg-config flashbwd` (the `flashbwd.pc` that `cmake --install` writes); set
//!    `PKG_CONFIG_PATH` for a non-system prefix.
//!
//! The directory is linked with an rpath, so this crate's tests run without
//! LD_LIBRARY_PATH, and is published to direct dependents as `DEP_FLASHBWD_LIB_DIR`
//! (Cargo passes rpath link arguments to no crate but the one that emits them).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=FLASHBWD_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");

    let dir = match env::var_os("FLASHBWD_LIB_DIR").filter(|d| !d.is_empty()) {
        Some(d) => from_env(PathBuf::from(d)),
        None => from_pkg_config(),
    };
    let dir = dir.display();
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=dylib=flashbwd");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    println!("cargo:lib_dir={dir}");
}

fn from_env(dir: PathBuf) -> PathBuf {
    // Absolute, because the rpath is read at run time from wherever the binary runs.
    let dir = dir.canonicalize().unwrap_or_else(|e| {
        fail(&format!("FLASHBWD_LIB_DIR = {}: {e}", dir.display()));
    });
    if !dir.join("libflashbwd.so").exists() {
        fail(&format!(
            "FLASHBWD_LIB_DIR = {} holds no libflashbwd.so; point it at the CMake build \
             directory (cmake --build <dir>) or an install's lib directory",
            dir.display()
        ));
    }
    dir
}

fn from_pkg_config() -> PathBuf {
    let major = header_major();
    let run = |args: &[&str]| Command::new("pkg-config").args(args).arg("flashbwd").output();
    let out = match run(&["--variable=libdir"]) {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            let said = String::from_utf8_lossy(&o.stderr).trim().to_owned();
            let path = env::var("PKG_CONFIG_PATH").unwrap_or_default();
            fail(&format!(
                "FLASHBWD_LIB_DIR is not set and pkg-config finds no flashbwd.pc \
                 (PKG_CONFIG_PATH = \"{path}\"{}{said}); set FLASHBWD_LIB_DIR to the directory \
                 holding libflashbwd.so, or PKG_CONFIG_PATH to the one holding flashbwd.pc",
                if said.is_empty() { "" } else { "; pkg-config: " }
            ))
        }
        Err(e) => fail(&format!(
            "FLASHBWD_LIB_DIR is not set and the pkg-config command could not run ({e}); set \
             FLASHBWD_LIB_DIR to the directory holding libflashbwd.so"
        )),
    };
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // The majors must match, as the run-time check in the safe crate also insists.
    let version = run(&["--modversion"]).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if let Ok(v) = version {
        if v.split('.').next() != Some(major.as_str()) {
            fail(&format!(
                "pkg-config finds flashbwd {v} in {}, but these bindings are for major {major}",
                dir.display()
            ));
        }
    }
    if !Path::new(&dir).join("libflashbwd.so").exists() {
        fail(&format!("pkg-config gives libdir = {}, which holds no libflashbwd.so", dir.display()));
    }
    dir
}

/// FLASHBWD_VERSION_MAJOR as generated into src/bindings.rs (the header these bindings are for).
fn header_major() -> String {
    let text = std::fs::read_to_string("src/bindings.rs").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("pub const FLASHBWD_VERSION_MAJOR: i32 = "))
        .map(|v| v.trim_end_matches(';').to_owned())
        .unwrap_or_else(|| fail("src/bindings.rs has no FLASHBWD_VERSION_MAJOR; run regen.sh"))
}

fn fail(msg: &str) -> ! {
    // Cargo prints a failed build script's stderr; a panic would bury this under a backtrace.
    eprintln!("flashbwd-sys: {msg}");
    std::process::exit(1);
}
