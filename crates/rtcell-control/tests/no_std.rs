//! The controller step builds without `std` (as it must inside a bare-metal payload with no allocator).

use std::process::Command;

#[test]
fn builds_without_default_features() {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-std-build");
    let out = Command::new(env!("CARGO"))
        .args(["build", "--offline", "--quiet", "-p", "rtcell-control", "--lib", "--no-default-features"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo");
    assert!(out.status.success(), "no_std build failed:\n{}", String::from_utf8_lossy(&out.stderr));
}
