//! The C controller of `examples/c-controller` (Embedded-Coder layout, matrices exported by
//! `rtcell control export-c`) against the Rust f64 step: compiled by the system C compiler with
//! `-O2 -ffp-contract=off`, stepped over the whole reference data with a reset in the middle, every output
//! bit for bit the same; and the checked-in model data is exactly what the export writes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rtcell_control::codegen::{c_hex_float, c_model_data};
use rtcell_control::{Controller64, DEFAULT_MODEL64};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c-controller")
}

#[test]
fn the_checked_in_model_data_is_what_export_c_writes() {
    let (h, c) = c_model_data(&DEFAULT_MODEL64);
    if std::env::var("RTCELL_BLESS").as_deref() == Ok("1") {
        std::fs::write(example().join("model_data.h"), &h).unwrap();
        std::fs::write(example().join("model_data.c"), &c).unwrap();
    }
    let msg = "examples/c-controller/model_data.* differ from the model: rtcell control export-c --out examples/c-controller (or RTCELL_BLESS=1 on this test)";
    assert_eq!(std::fs::read_to_string(example().join("model_data.h")).unwrap(), h, "{msg}");
    assert_eq!(std::fs::read_to_string(example().join("model_data.c")).unwrap(), c, "{msg}");
}

#[test]
fn hex_floats_are_exact() {
    for v in [1.0, -2.5, 0.1, 1e-310, -0.0, 0.0, f64::MAX, f64::MIN_POSITIVE] {
        let s = c_hex_float(v);
        // Parse back the way C does: mantissa digits and a binary exponent.
        let neg = s.starts_with('-');
        let t = s.trim_start_matches('-').trim_start_matches("0x");
        let (m, e) = t.split_once('p').unwrap();
        let (int, frac) = m.split_once('.').unwrap_or((m, ""));
        let mut val = u64::from_str_radix(int, 16).unwrap() as f64;
        let mut scale = 1.0 / 16.0;
        for ch in frac.chars() {
            val += ch.to_digit(16).unwrap() as f64 * scale;
            scale /= 16.0;
        }
        let e: i32 = e.parse().unwrap();
        let back = val * 2f64.powi(e.max(-1000)) * 2f64.powi((e - e.max(-1000)).min(0));
        let back = if neg { -back } else { back };
        assert_eq!(back.to_bits(), v.to_bits(), "{v:e} -> {s}");
    }
}

#[test]
fn the_c_controller_matches_the_rust_f64_step_bit_for_bit() {
    let data = rtcell_control::reference::shipped().unwrap();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-port-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("replay");
    let cc = Command::new("cc")
        .args(["-std=c11", "-O2", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/replay.c"))
        .arg(example().join("model.c"))
        .arg(example().join("model_data.c"))
        .arg(format!("-I{}", example().display()))
        .output()
        .expect("the system C compiler runs");
    assert!(cc.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&cc.stderr));

    // The whole reference, a reset, then the whole reference again.
    let n = data.r.len();
    let mut input = String::new();
    for pass in 0..2 {
        if pass == 1 {
            input.push_str("reset\n");
        }
        for k in 0..n {
            input.push_str(&format!("{} {}\n", c_hex_float(data.r[k]), c_hex_float(data.y[k])));
        }
    }
    let mut child = Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let got: Vec<u64> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| u64::from_str_radix(l, 16).unwrap()).collect();
    assert_eq!(got.len(), 2 * n);

    let mut ctrl = Controller64::new(&DEFAULT_MODEL64);
    for pass in 0..2 {
        if pass == 1 {
            ctrl = Controller64::new(&DEFAULT_MODEL64);
        }
        for k in 0..n {
            let u = ctrl.step(data.r[k], data.y[k]);
            let c = got[pass * n + k];
            assert_eq!(c, u.to_bits(), "pass {pass}, sample {k}: C {} vs Rust {u}", f64::from_bits(c));
            // And both are the reference output, bit for bit (what the offload masters check).
            assert_eq!(
                c,
                data.u[k].to_bits(),
                "pass {pass}, sample {k}: C {} vs reference {}",
                f64::from_bits(c),
                data.u[k]
            );
        }
    }
}
