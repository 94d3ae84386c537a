//! Compiles the C side of `rtcell bench capi` (the example controller of examples/c-controller and the
//! C API ping-pong) into the rtcell binary, with the flags the example's Makefile uses.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run through cargo"));
    let repo = dir.join("../..");
    let example = repo.join("examples/c-controller");
    let sources = [example.join("model.c"), example.join("model_data.c"), dir.join("src/capi/bench.c")];
    for s in &sources {
        println!("cargo:rerun-if-changed={}", s.display());
    }
    for h in ["model.h", "model_data.h", "rtwtypes.h"] {
        println!("cargo:rerun-if-changed={}", example.join(h).display());
    }
    println!("cargo:rerun-if-changed={}", repo.join("include/rtcell.h").display());
    cc::Build::new()
        .files(&sources)
        .include(&example)
        .include(repo.join("include"))
        .opt_level(2)
        .flag("-std=c11")
        .flag("-ffp-contract=off")
        .warnings(true)
        .compile("rtcell_bench_c");
}
