//! Records the git revision the binary was built from, for the results document: `git describe --always
//! --abbrev=12`, with `-dirty` when a tracked file differs from it.
//!
//! Nothing here writes to the repository. `git describe --dirty` refreshes the index file as it looks, and
//! the index is what this script watches: the next cargo command ran the script again and compiled this
//! crate, every test binary with it, a second time (a fresh clone's test step did). `git status` with
//! `--no-optional-locks` reads the index without writing it.
fn main() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
    };
    let mut rev = git(&["describe", "--always", "--abbrev=12"]).map(|s| s.trim().to_string()).unwrap_or_default();
    let changed = git(&["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]);
    if !rev.is_empty() && changed.is_some_and(|s| !s.trim().is_empty()) {
        rev.push_str("-dirty");
    }
    println!("cargo:rustc-env=RTCELL_GIT={rev}");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/index");
}
