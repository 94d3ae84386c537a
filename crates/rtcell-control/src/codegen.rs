//! Writes the shipped model tables (`src/tables.rs`) as Rust source, the way a code generator emits
//! constant tables, so bare-metal payloads get the models without running the design.

use std::fmt::Write;

use crate::model::{MAX_N, Model64, ModelQ31};

fn f(v: f64) -> String {
    if v == 0.0 && v.is_sign_positive() { "0.0".into() } else { format!("{v:e}") }
}

fn row<T: Copy>(vals: &[T], fmt: impl Fn(T) -> String) -> String {
    let items: Vec<String> = vals.iter().map(|&v| fmt(v)).collect();
    format!("[{}]", items.join(", "))
}

/// The Rust source of `src/tables.rs` for the given models.
pub fn tables_source(m64: &Model64, q31: &ModelQ31) -> String {
    let mut s = String::new();
    s.push_str("//! The shipped controller models, generated from [`crate::design`] and\n");
    s.push_str("//! [`crate::reference::default_scaling`] by `cargo run -p rtcell-control --example regenerate`.\n");
    s.push_str("//! Do not edit: the test suite checks that these are exactly what the design produces.\n\n");
    s.push_str("use crate::model::{Model64, ModelQ31, QScaling};\n\n");
    s.push_str("/// The default f64 model (H = 20, 41 states, T = 100 us).\n");
    s.push_str("#[rustfmt::skip]\n");
    s.push_str("pub static DEFAULT_MODEL64: Model64 = Model64 {\n");
    let _ = writeln!(s, "    n: {},", m64.n);
    s.push_str("    a: [\n");
    for i in 0..MAX_N {
        let _ = writeln!(s, "        {},", row(&m64.a[i], f));
    }
    s.push_str("    ],\n    b: [\n");
    for i in 0..MAX_N {
        let _ = writeln!(s, "        {},", row(&m64.b[i], f));
    }
    s.push_str("    ],\n");
    let _ = writeln!(s, "    c: {},", row(&m64.c, f));
    let _ = writeln!(s, "    d: {},", row(&m64.d, f));
    s.push_str("};\n\n");

    s.push_str("/// The default Q31 model: [`DEFAULT_MODEL64`] scaled by the default scaling and quantised.\n");
    s.push_str("#[rustfmt::skip]\n");
    s.push_str("pub static DEFAULT_MODEL_Q31: ModelQ31 = ModelQ31 {\n");
    let _ = writeln!(s, "    n: {},", q31.n);
    let int = |v: i32| v.to_string();
    s.push_str("    a: [\n");
    for i in 0..MAX_N {
        let _ = writeln!(s, "        {},", row(&q31.a[i], int));
    }
    s.push_str("    ],\n    b: [\n");
    for i in 0..MAX_N {
        let _ = writeln!(s, "        {},", row(&q31.b[i], int));
    }
    s.push_str("    ],\n");
    let _ = writeln!(s, "    c: {},", row(&q31.c, int));
    let _ = writeln!(s, "    d: {},", row(&q31.d, int));
    let _ = writeln!(s, "    shift_a: {},", q31.shift_a);
    let _ = writeln!(s, "    shift_b: {},", q31.shift_b);
    let _ = writeln!(s, "    shift_c: {},", q31.shift_c);
    let _ = writeln!(s, "    shift_d: {},", q31.shift_d);
    s.push_str("    scaling: QScaling {\n");
    let _ = writeln!(s, "        input_fs: {},", f(q31.scaling.input_fs));
    let _ = writeln!(s, "        output_fs: {},", f(q31.scaling.output_fs));
    let _ = writeln!(s, "        state_fs: {},", row(&q31.scaling.state_fs, f));
    s.push_str("    },\n};\n");
    s
}
