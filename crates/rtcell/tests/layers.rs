//! The crates stand on the floors the README's "Floors" block names, and data flows down: a crate may use
//! crates on lower floors; one on its own floor only with a reason, a comment on the line just above the
//! dependency in its Cargo.toml; one on a higher floor never (a test may, in dev-dependencies). Every
//! crate under `crates/` is on exactly one floor. The README's block is the only list: this test reads it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README's floors: crate name → floor number.
fn floors() -> BTreeMap<String, u32> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let mut floors = BTreeMap::new();
    for line in readme.lines() {
        let Some(rest) = line.strip_prefix("floor ") else { continue };
        let mut words = rest.split_whitespace();
        let n: u32 = words.next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("README: {line:?}"));
        for name in words {
            assert!(floors.insert(name.to_string(), n).is_none(), "README: {name} is on two floors");
        }
    }
    assert!(floors.len() >= 10, "README has no Floors block (lines `floor N crate crate ...`)");
    floors
}

/// One `rtcell*` dependency of a manifest: its name, the table it is in, and whether the line just above
/// it is a comment.
struct Dep {
    name: String,
    table: String,
    reasoned: bool,
}

fn deps(manifest: &str) -> Vec<Dep> {
    let mut table = String::new();
    let mut previous = "";
    let mut out = Vec::new();
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            table = t.trim_matches(['[', ']']).to_string();
        } else if table.ends_with("dependencies") && t.starts_with("rtcell") {
            let name: String = t.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            out.push(Dep { name, table: table.clone(), reasoned: previous.trim_start().starts_with('#') });
        }
        previous = line;
    }
    out
}

#[test]
fn every_crate_is_on_one_floor_and_data_flows_down() {
    let floors = floors();
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/") {
        let dir = entry.expect("crates/ entry").path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else { continue };
        let name = dir.file_name().and_then(|n| n.to_str()).expect("a crate folder name").to_string();
        seen.push(name.clone());
        let Some(&floor) = floors.get(&name) else {
            problems.push(format!("{name} is on no floor: add it to the README's Floors block"));
            continue;
        };
        for dep in deps(&manifest) {
            let Some(&to) = floors.get(&dep.name) else {
                problems.push(format!("{name} uses {}, which is on no floor", dep.name));
                continue;
            };
            let dev = dep.table == "dev-dependencies";
            if to > floor && !dev {
                problems.push(format!("{name} (floor {floor}) uses {} on floor {to}: upward", dep.name));
            } else if to == floor && !dev && !dep.reasoned {
                problems.push(format!(
                    "{name} uses {} on its own floor ({floor}) without a reason: a comment on the line above it in crates/{name}/Cargo.toml",
                    dep.name
                ));
            }
        }
    }
    for name in floors.keys() {
        if !seen.contains(name) {
            problems.push(format!("the README's Floors block names {name}, which is not under crates/"));
        }
    }
    assert!(problems.is_empty(), "layering:\n  {}", problems.join("\n  "));
}

#[test]
fn the_rule_catches_upward_and_unexplained_sideways_dependencies() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\nrtcell-shm.workspace = true\n# why\nrtcell-kvm = { workspace = true }\n\n[dev-dependencies]\nrtcell-testkit.workspace = true\n";
    let d = deps(manifest);
    let got: Vec<(&str, &str, bool)> = d.iter().map(|d| (d.name.as_str(), d.table.as_str(), d.reasoned)).collect();
    assert_eq!(
        got,
        vec![
            ("rtcell-shm", "dependencies", false),
            ("rtcell-kvm", "dependencies", true),
            ("rtcell-testkit", "dev-dependencies", false)
        ]
    );
}
