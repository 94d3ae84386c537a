//! The shared library's SONAME: C programs link `-lrtcell` and load `librtcell.so.0`.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librtcell.so.0");
}
