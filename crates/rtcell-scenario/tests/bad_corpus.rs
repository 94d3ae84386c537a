//! The corpus of bad scenarios (`examples/bad/*.toml`): each is refused before anything starts, with the
//! message listed for it in `examples/bad/expected.txt` (file, line, field, what is wrong, the fix).

use std::path::{Path, PathBuf};

use rtcell_scenario::{HostView, load};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fixed two-CPU machine with KVM, so the expected messages do not depend on where the test runs.
fn host() -> HostView {
    HostView {
        online: vec![0, 1],
        kvm_unusable: None,
        payloads: ["echo", "control", "spin", "faults"].map(String::from).to_vec(),
    }
}

/// Renders every complaint about `examples/bad/<name>` as the CLI prints it (path relative to the
/// repository root).
fn complaints(name: &str) -> Vec<String> {
    let rel = format!("examples/bad/{name}");
    let text = std::fs::read_to_string(repo().join(&rel)).unwrap();
    match rtcell_scenario::validate_text(&text, Path::new(&rel), &host()) {
        Ok(_) => panic!("{rel} was accepted"),
        Err(inv) => inv.diags.iter().map(|d| d.render(&rel)).collect(),
    }
}

#[test]
fn every_bad_scenario_is_refused_with_its_expected_message() {
    let expected = std::fs::read_to_string(repo().join("examples/bad/expected.txt")).unwrap();
    let mut checked = std::collections::BTreeSet::new();
    let mut failures = Vec::new();
    for line in expected.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let file = line.split(':').next().unwrap().trim_start_matches("examples/bad/").to_string();
        let got = complaints(&file);
        if !got.iter().any(|g| g == line) {
            failures.push(format!("{file}:\n  expected: {line}\n  got:      {}", got.join("\n            ")));
        }
        checked.insert(file);
    }
    // Every file of the corpus has an expectation.
    for e in std::fs::read_dir(repo().join("examples/bad")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".toml") && !checked.contains(&name) {
            failures.push(format!("{name}: no line in expected.txt; it says:\n  {}", complaints(&name).join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_complaint_names_a_line_a_field_and_a_fix() {
    for e in std::fs::read_dir(repo().join("examples/bad")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if !name.ends_with(".toml") {
            continue;
        }
        let rel = format!("examples/bad/{name}");
        let text = std::fs::read_to_string(repo().join(&rel)).unwrap();
        let inv = rtcell_scenario::validate_text(&text, Path::new(&rel), &host()).unwrap_err();
        for d in &inv.diags {
            assert!(d.line.is_some(), "{name}: no line: {d:?}");
            assert!(!d.fix.is_empty(), "{name}: no fix: {d:?}");
            assert!(!d.message.is_empty(), "{name}: no message: {d:?}");
            if name != "syntax.toml" {
                assert!(!d.path.is_empty(), "{name}: no field: {d:?}");
            }
        }
    }
}

#[test]
fn the_shipped_examples_are_valid() {
    for name in ["plc.toml", "motion.toml", "offload.toml"] {
        let p = repo().join("examples").join(name);
        if let Err(e) = load(&p, &host()) {
            panic!("{name}: {e}");
        }
    }
}

#[test]
fn a_kvm_cell_falls_back_where_kvm_is_not_usable() {
    let mut h = host();
    h.kvm_unusable = Some("/dev/kvm is missing".into());
    let plan = load(&repo().join("examples/offload.toml"), &h).unwrap();
    assert_eq!(plan.cells[0].kind, rtcell_cells::CellKind::Thread);
    assert!(plan.notes[0].contains("/dev/kvm is missing"), "{:?}", plan.notes);
    let plan = load(&repo().join("examples/offload.toml"), &host()).unwrap();
    assert_eq!(plan.cells[0].kind, rtcell_cells::CellKind::Kvm);
}

#[test]
fn durations_parse() {
    use rtcell_scenario::parse_duration as d;
    assert_eq!(d("2s").unwrap().as_millis(), 2000);
    assert_eq!(d("500ms").unwrap().as_millis(), 500);
    assert_eq!(d("1.5").unwrap().as_millis(), 1500);
    assert_eq!(d("2m").unwrap().as_secs(), 120);
    assert!(d("0s").is_err());
    assert!(d("abc").is_err());
}

/// Bad scenarios too large to keep as files: each refused at validation with its message.
#[test]
fn generated_bad_scenarios_are_refused_with_their_messages() {
    let long_name = format!("name = \"{}\"\nduration_s = 1\n", "n".repeat(10_000));
    let cases: [(&str, String, &str); 2] = [
        ("10,000-character name", long_name, "must be 1 to 48 letters, digits, '_' or '-'"),
        ("spaces in the name", "name = \"a b\"\nduration_s = 1\n".into(), "scenario name \"a b\""),
    ];
    for (what, text, want) in cases {
        let inv = rtcell_scenario::validate_text(&text, Path::new("gen.toml"), &host()).expect_err(what);
        let got = inv.to_string();
        assert!(got.starts_with("gen.toml:1: name:") && got.contains(want), "{what}: {got}");
        assert!(got.len() < 400, "{what}: the name is echoed whole: {} bytes", got.len());
    }
}

#[test]
fn a_file_over_one_mib_is_refused_without_reading_it_all() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.toml");
    let mut text = String::from("duration_s = 1\n");
    while text.len() <= rtcell_scenario::plan::MAX_FILE_BYTES {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    text.truncate(rtcell_scenario::plan::MAX_FILE_BYTES + 1);
    std::fs::write(&p, &text).unwrap();
    let got = load(&p, &host()).expect_err("a file of 1 MiB + 1 byte was accepted").to_string();
    assert!(got.contains("larger than 1048576 bytes (1 MiB)"), "{got}");
    // Exactly the cap is read and validated as usual.
    text.truncate(rtcell_scenario::plan::MAX_FILE_BYTES);
    let cut = text.rfind('\n').unwrap();
    std::fs::write(&p, &text[..=cut]).unwrap();
    assert!(load(&p, &host()).is_ok());
    // An endless file (a device) is refused after the cap, not read into memory.
    let got = load(Path::new("/dev/zero"), &host()).expect_err("/dev/zero").to_string();
    assert!(got.contains("larger than 1048576 bytes"), "{got}");
}
