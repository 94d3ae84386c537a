//! `include/rtcell.h` is what cbindgen makes of this crate: regenerate it and compare. A change to the
//! C API without refreshing the header fails here; `RTCELL_BLESS=1` writes the new header instead.

use std::path::Path;

#[test]
fn the_checked_in_header_matches_the_api() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = crate_dir.join("../../include/rtcell.h");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8");
    if std::env::var("RTCELL_BLESS").as_deref() == Ok("1") {
        std::fs::write(&header, &generated).expect("write include/rtcell.h");
        return;
    }
    let current = std::fs::read_to_string(&header).unwrap_or_default();
    assert!(
        current == generated,
        "include/rtcell.h is out of date with crates/rtcell-capi: refresh it with \
         `RTCELL_BLESS=1 cargo test -p rtcell-capi --test header` and check the diff in"
    );
}
