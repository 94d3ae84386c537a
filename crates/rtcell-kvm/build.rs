//! Builds the KVM payloads (`guest/`, a Cargo workspace of its own) as static bare-metal ELF files for
//! the host target, and copies them into OUT_DIR, where `src/payloads.rs` embeds them. The same build
//! makes the runtime of C payloads (`guest/c-runtime`, `librtcell_payload.a`), which `src/sdk.rs` embeds.
//!
//! The nested build gets a clean environment: nothing the outer build was given for its own code
//! (RUSTFLAGS, wrappers such as clippy's, profile overrides, a target directory) may leak into it.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, exit};

/// The payload binaries `guest/` builds (keep in step with `NAMES` in `src/payloads.rs`).
const PAYLOADS: &[&str] = &["echo", "control", "spin", "faults"];
/// The archive of the C payload runtime (`guest/c-runtime`), embedded by `src/sdk.rs`.
const C_RUNTIME: &str = "librtcell_payload.a";

/// Inherited variables that would change how the nested build compiles or where it writes.
const REMOVED_VARS: &[&str] = &[
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_BUILD_TARGET_DIR",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_PRIMARY_PACKAGE",
];
/// Prefixes of inherited variables to remove as well: profile overrides, the outer target's cfg, and
/// per-target settings (rustflags, linker, runner).
const REMOVED_PREFIXES: &[&str] = &["CARGO_PROFILE_", "CARGO_CFG_", "CARGO_TARGET_"];

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    exit(1);
}

fn var(name: &str) -> OsString {
    env::var_os(name).unwrap_or_else(|| fail(&format!("{name} is not set (run through cargo)")))
}

/// The rustflags that make a `no_std` binary for the host target a bare-metal payload: static
/// (non-PIE) code, no C runtime or libraries, laid out by the linker script.
fn payload_rustflags(repo: &Path, linker_script: &Path) -> Vec<String> {
    let mut flags: Vec<String> = [
        "-Crelocation-model=static",
        "-Cpanic=abort",
        "-Clink-arg=-nostartfiles",
        "-Clink-arg=-nostdlib",
        "-Clink-arg=-static",
        "-Clink-arg=-no-pie",
        "-Clink-arg=-Wl,--build-id=none",
    ]
    .map(String::from)
    .to_vec();
    flags.push(format!("-Clink-arg=-T{}", linker_script.display()));
    // Source paths in panic messages relative to the repository, whatever the checkout's location.
    flags.push(format!("--remap-path-prefix={}/=", repo.display()));
    flags
}

fn main() {
    let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(var("OUT_DIR"));
    let repo = manifest_dir
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|e| fail(&format!("cannot resolve the repository root: {e}")));
    let guest = repo.join("guest");
    let linker_script = guest.join("payload.ld");

    for p in [
        "guest/Cargo.toml",
        "guest/Cargo.lock",
        "guest/payload.ld",
        "guest/src",
        "guest/c-runtime/Cargo.toml",
        "guest/c-runtime/src",
        "crates/rtcell-capi/Cargo.toml",
        "crates/rtcell-capi/src",
        "crates/rtcell-guest/Cargo.toml",
        "crates/rtcell-guest/src",
        "crates/rtcell-shm/Cargo.toml",
        "crates/rtcell-shm/src",
        "crates/rtcell-control/Cargo.toml",
        "crates/rtcell-control/src",
    ] {
        println!("cargo:rerun-if-changed={}", repo.join(p).display());
    }

    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target_dir = out_dir.join("guest-target");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&guest)
        .args(["build", "--release", "--locked", "--workspace", "--manifest-path"])
        .arg(guest.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    for (key, _) in env::vars_os() {
        let k = key.to_string_lossy();
        if REMOVED_VARS.contains(&k.as_ref()) || REMOVED_PREFIXES.iter().any(|p| k.starts_with(p)) {
            cmd.env_remove(&key);
        }
    }
    cmd.env("CARGO_ENCODED_RUSTFLAGS", payload_rustflags(&repo, &linker_script).join("\x1f"));

    let output = cmd.output().unwrap_or_else(|e| fail(&format!("cannot run cargo to build the KVM payloads: {e}")));
    if !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        fail(&format!(
            "building the KVM payloads failed: `cargo build --release --locked --manifest-path {}` \
             exited with {}; its output is above",
            guest.join("Cargo.toml").display(),
            output.status
        ));
    }
    for name in PAYLOADS.iter().chain([&C_RUNTIME]) {
        let built = target_dir.join("release").join(name);
        if let Err(e) = std::fs::copy(&built, out_dir.join(name)) {
            fail(&format!("payload {name}: cannot copy {}: {e}", built.display()));
        }
    }
}
