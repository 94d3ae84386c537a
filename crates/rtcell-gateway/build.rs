//! Compiles `proto/rtcell/v1/*.proto` with protox (pure Rust: no protoc download) and generates the
//! tonic server and client.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = ["rtcell/v1/gateway.proto", "rtcell/v1/stats.proto"];
    let fds = protox::compile(files, [&root])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    for f in files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    Ok(())
}
