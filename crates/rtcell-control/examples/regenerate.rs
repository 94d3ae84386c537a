//! Regenerates the shipped tables (`src/tables.rs`) and the reference data (`data/reference.csv`).
//!
//! `cargo run -p rtcell-control --example regenerate [--check]`: with `--check`, writes nothing and exits
//! with status 1 if either file differs from what the design produces.

use std::path::Path;

use rtcell_control::ModelQ31;
use rtcell_control::codegen::tables_source;
use rtcell_control::design::{DesignParams, design};
use rtcell_control::reference::{DEFAULT_SEED, default_scaling, generate};

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = design(&DesignParams::default()).expect("default design");
    let q31 = ModelQ31::from_f64(&model, &default_scaling()).expect("Q31 conversion");
    let files = [
        (root.join("src/tables.rs"), tables_source(&model, &q31)),
        (root.join("data/reference.csv"), generate(DEFAULT_SEED).to_csv_string()),
    ];
    let mut stale = false;
    for (path, text) in &files {
        let current = std::fs::read_to_string(path).unwrap_or_default();
        if current == *text {
            println!("up to date: {}", path.display());
        } else if check {
            println!("stale: {}", path.display());
            stale = true;
        } else {
            std::fs::write(path, text).expect("write");
            println!("wrote: {}", path.display());
        }
    }
    if stale {
        std::process::exit(1);
    }
}
