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

/// `T`: a Linux-side task with `extra` lines, in a run of `duration_s`.
fn linux_task(duration_s: &str, extra: &str, workload: &str) -> String {
    format!(
        "duration_s = {duration_s}\n[tasks.a]\ncell = \"linux\"\nperiod_us = 1000\npriority = 50\n{extra}workload = {workload}\n"
    )
}

/// Text from the file (keys, names, serde's messages) reaches the terminal escaped and bounded.
#[test]
fn complaints_quoting_the_file_are_escaped_and_bounded() {
    let esc = "\\u001b[2J\\u001b[H\\u0007Cell evil: done (exit code 0)";
    let cases: Vec<(&str, String, &str)> = vec![
        ("control key", format!("duration_s = 1\n\"{esc}\" = 1\n"), "gen.toml:2:"),
        ("1,000,000-character key", format!("duration_s = 1\n{} = 1\n", "A".repeat(1_000_000)), "...(1000000 bytes)"),
        ("control table key", format!("duration_s = 1\n[tasks.\"a{esc}\"]\nbogus = 1\n"), "unknown key `bogus`"),
        (
            "control workload kind",
            linux_task("1", "", &format!("{{ kind = \"{esc}\", us = 5 }}")),
            "unknown variant `\\x1b[2J",
        ),
        (
            "1,000,000-character workload kind",
            linux_task("1", "", &format!("{{ kind = \"{}\", us = 5 }}", "C".repeat(1_000_000))),
            "...(1000000 bytes)",
        ),
        (
            "1,000,000-byte description",
            format!("duration_s = 1\ndescription = \"{}\"\n", "D".repeat(1_000_000)),
            "at most 4096",
        ),
        ("8-bit CSI in the description", "duration_s = 1\ndescription = \"a\\u009b2J\"\n".to_string(), "U+009B"),
        (
            "bidi override in a signal name",
            "duration_s = 1\n[signals.\"s\u{202e}gnp.exe\"]\nvalues = 1\n".to_string(),
            "signals.s\\u{202e}gnp.exe",
        ),
        (
            "control library path",
            format!(
                "duration_s = 1\n[cells.c]\nkind = \"thread\"\ncpu = 1\n[tasks.a]\ncell = \"c\"\nperiod_us = 1000\n\
                 priority = 50\nworkload = {{ kind = \"c\", library = \"{esc}{}.so\", step = \"s\" }}\n",
                "B".repeat(100_000)
            ),
            "no file \\x1b[2J",
        ),
    ];
    for (what, text, want) in cases {
        let got = rtcell_scenario::validate_text(&text, Path::new("gen.toml"), &host()).expect_err(what).to_string();
        assert!(got.contains(want), "{what}: {got}");
        assert!(!got.contains('\u{1b}') && !got.contains('\u{7}') && !got.contains('\u{202e}'), "{what}: raw: {got:?}");
        assert!(got.len() < 8 * 1024, "{what}: {} bytes", got.len());
    }
    // Thousands of complaints: 50 shown, the rest counted.
    let mut many = String::from("duration_s = 1\n");
    for i in 0..2000 {
        many.push_str(&format!("[signals.s{i}]\nvalues = 0\n"));
    }
    let got = rtcell_scenario::validate_text(&many, Path::new("gen.toml"), &host()).unwrap_err().to_string();
    assert!(got.len() < 16 * 1024 && got.ends_with("and 1950 more problems not shown"), "{} bytes", got.len());
}

/// Limits that used to be found only when the run started (exit 1, no line), or never (a ring that
/// wrapped to a fraction of its size): refused at validation with the line, the field and the limit.
#[test]
fn limits_of_the_region_and_the_run_are_refused_at_validation() {
    let ring = |cap: u32, bytes: u32| {
        format!(
            "duration_s = 1\n[channels.big]\ncapacity = {cap}\nframe_bytes = {bytes}\n[tasks.a]\ncell = \"linux\"\n\
             period_us = 1000\npriority = 50\nsend = \"big\"\nworkload = {{ kind = \"spin\", us = 5 }}\n"
        )
    };
    let mut mem20g = String::from("duration_s = 1\n");
    for i in 0..10 {
        mem20g.push_str(&format!("[channels.c{i}]\ncapacity = 4000\nframe_bytes = 32768\n"));
        mem20g.push_str(&format!(
            "[tasks.t{i}]\ncell = \"linux\"\nperiod_us = 100000\npriority = 50\nsend = \"c{i}\"\n\
             workload = {{ kind = \"spin\", us = 1 }}\n"
        ));
    }
    let mut many = String::from("duration_s = 1\n");
    for i in 0..1000 {
        many.push_str(&format!(
            "[tasks.t{i}]\ncell = \"linux\"\nperiod_us = 100000\npriority = 50\nworkload = {{ kind = \"spin\", us = 1 }}\n"
        ));
    }
    let mut com = String::from("duration_s = 1\n[com.c]\nsignals = [");
    for i in 0..1025 {
        com.push_str(&format!("{{ id = {i}, name = \"s{i}\", type = \"uint8\" }},"));
    }
    com.push_str("]\n");
    let log = |a: &str, b: &str| {
        format!(
            "duration_s = 1\n[tasks.a]\ncell = \"linux\"\nperiod_us = 100000\npriority = 50\n\
             workload = {{ kind = \"log\", file = \"{a}\" }}\n[tasks.b]\ncell = \"linux\"\nperiod_us = 100000\n\
             priority = 50\nworkload = {{ kind = \"log\", file = \"{b}\" }}\n"
        )
    };
    let ecat = "duration_s = 1\n[ethercat]\nsimulated = 3\n[signals.io]\nvalues = 2\n[tasks.ec]\ncell = \"linux\"\n\
                period_us = 1000\npriority = 60\noutput = \"io\"\nworkload = { kind = \"ethercat\" }\n";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "ring 65536 x 65536 (wrapped to 2 MiB)",
            ring(65536, 65536),
            "gen.toml:3: channels.big.capacity: a ring of 65536 frames of 65536 bytes needs about 4097 MiB, above the 1 GiB a run's shared memory may take",
        ),
        (
            "ring 65536 x 32768",
            ring(65536, 32768),
            "gen.toml:3: channels.big.capacity: a ring of 65536 frames of 32768 bytes",
        ),
        (
            "10 rings of 128 MiB",
            mem20g,
            "channels: the channels' rings take 1280 MiB together, above the region budget",
        ),
        (
            "1000 tasks",
            many,
            "tasks: the scenario needs 3001 shared-memory channels, more than the 256 one region holds",
        ),
        ("1025 COM signals", com, "gen.toml:3: com.c.signals: 1025 signals: a COM channel holds at most 1024"),
        (
            "log file and its directory",
            log("logs", "logs/b.log"),
            "log file \"logs\" is also the directory of log file \"logs/b.log\"",
        ),
        (
            "ethercat output for 3 devices",
            ecat.to_string(),
            "tasks.ec.output: signal \"io\" holds 2 values, this needs 6",
        ),
        (
            "spin longer than the period",
            linux_task("1", "budget_us = 0\n", "{ kind = \"spin\", us = 5000000 }"),
            "tasks.a.workload.us: 5000000 us of work in every cycle of a 1000 us period",
        ),
        (
            "injected cycle longer than the run",
            linux_task("1", "", "{ kind = \"spin\", us = 5, inject = { at_cycle = 900, us = 2000000 } }"),
            "an injected cycle of 2000000 us is longer than the whole run (1 s)",
        ),
        (
            "duration 1e-300",
            linux_task("1e-300", "", "{ kind = \"spin\", us = 5 }"),
            "gen.toml:1: duration_s: 1e-300 s is out of range: it must be 0.001..=2592000 s",
        ),
        (
            "bare word for a string",
            "duration_s = 1\n[tasks.a]\ncell = linux\n".into(),
            "gen.toml:3: cell: linux is a bare word: a string needs quotes — quote it: cell = \"linux\"",
        ),
        (
            "workload as a string",
            linux_task("1", "", "\"spin\""),
            "invalid type: string \"spin\", expected a table with a `kind`",
        ),
        (
            "50,000 dotted tables",
            format!("duration_s = 1\n[{}]\n", vec!["a"; 50_000].join(".")),
            "gen.toml:2: syntax error: nested too deeply",
        ),
    ];
    let mut failures = Vec::new();
    for (what, text, want) in cases {
        match rtcell_scenario::validate_text(&text, Path::new("gen.toml"), &host()) {
            Ok(_) => failures.push(format!("{what}: accepted")),
            Err(inv) => {
                let got = inv.to_string();
                if !got.contains(want) {
                    failures.push(format!("{what}:\n  expected: {want}\n  got:      {got}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn command_line_durations_have_the_files_limits() {
    use rtcell_scenario::parse_duration as d;
    assert!(d("1e9s").unwrap_err().contains("1 ms to 30 days"));
    assert!(d("9999999s").unwrap_err().contains("1 ms to 30 days"));
    assert!(d("1e-300s").is_err());
    assert_eq!(d("30d").ok(), None);
    assert_eq!(d("720h").unwrap().as_secs(), 30 * 24 * 3600);
}

#[test]
fn a_spin_payload_without_its_channels_is_refused_at_validation() {
    let text = "duration_s = 1\n[cells.k]\nkind = \"kvm\"\ncpu = 1\npayload = \"spin\"\n";
    let got = rtcell_scenario::validate_text(text, Path::new("gen.toml"), &host()).unwrap_err().to_string();
    assert!(
        got.contains("gen.toml:5: cells.k.payload: payload \"spin\" needs hist=<channel> or log=<channel>"),
        "{got}"
    );
}

/// A payload reads its args as `key=value` lines, nothing trimmed (rtcell-guest `BootInfo::arg`): a line
/// ` hist = h` is no `hist` to it, so validation must not count it as one.
#[test]
fn payload_args_are_read_as_the_payload_reads_them() {
    let text = "duration_s = 1\n[channels.h]\ncapacity = 16\nframe_bytes = 64\n[cells.k]\nkind = \"kvm\"\ncpu = 1\n\
                payload = \"spin\"\nargs = \" hist = h\"\nwrites = [\"h\"]\n";
    let got = rtcell_scenario::validate_text(text, Path::new("gen.toml"), &host()).unwrap_err().to_string();
    assert!(got.contains("payload \"spin\" needs hist=<channel> or log=<channel>"), "{got}");
}
