//! A record of what validation says about many inputs, one line per validation: the input's id, the
//! host, origin and `--kind` options it was validated with, and the whole result (the plan's `Debug`, or
//! every complaint's `Debug` and the rendered text with file:line, field, message and fix).
//!
//! Two records made from two versions of the validator are byte-identical exactly when the validator
//! answered every input the same way, which is how a refactoring of `plan` is shown to change nothing:
//!
//! ```text
//! cargo run --release -p rtcell-scenario --example plan_record -- before.txt
//! # ... change the code ...
//! cargo run --release -p rtcell-scenario --example plan_record -- after.txt
//! cmp before.txt after.txt
//! ```
//!
//! Inputs: every `.toml` under `examples/` and `crates/*/tests/`, the scenario texts written in the
//! workspace's tests (string literals holding `duration_s =`), a few written here, and for each of
//! these texts up to `VARIANTS` mechanically broken variants (a line deleted or duplicated, a number
//! made 0, -1, huge, fractional or NaN, a string made empty, 300 characters, `../x`, ..., two values
//! swapped, a key renamed). Each base text is validated under every host × origin × kind option; each
//! variant under the defaults and one rotating option. C tasks find their files in a fixture directory
//! made under `target/plan-record/` (a payload ELF, a shared object, a file that is not ELF).
//!
//! The run must start in the workspace (any directory inside it): paths in the record are relative to
//! its root.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rtcell_scenario::{HostView, Origin, validate_text_from};

/// Most variants of one base text.
const VARIANTS: usize = 400;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let out = std::env::args().nth(1).ok_or("usage: plan_record OUTFILE")?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize()?;
    std::env::set_current_dir(&root)?;
    let fixture = make_fixture()?;
    let bases = bases()?;
    let hosts = hosts();
    let origins = origins(&fixture)?;
    let mut rec = Record { out: std::io::BufWriter::new(std::fs::File::create(&out)?), count: 0 };
    let (budget, why) = rtcell_scenario::plan::region_budget();
    writeln!(rec.out, "# plan record: {} base texts; region budget {budget} ({why})", bases.len())?;
    for (id, path, text) in &bases {
        let kinds = kind_options(text);
        // Every option for the base text.
        for (h, host) in hosts.iter().enumerate() {
            for (o, origin) in origins.iter().enumerate() {
                for (k, kind) in kinds.iter().enumerate() {
                    rec.validate(&format!("{id} h{h} o{o} k{k}"), text, path, host, kind, origin)?;
                }
            }
        }
        // A file on disk: read as `rtcell run` reads it.
        if Path::new(path).is_file() && !path.starts_with("target/") {
            let got = rtcell_scenario::load_from(Path::new(path), &hosts[0], &[], &origins[0]);
            rec.line(&format!("{id} load"), &got)?;
        }
        let combos = hosts.len() * origins.len() * kinds.len();
        for (i, v) in variants(text).iter().enumerate() {
            let vid = format!("{id} v{i}");
            rec.validate(&format!("{vid} h0 o0 k0"), v, path, &hosts[0], &kinds[0], &origins[0])?;
            let c = (i * 7 + 1) % combos;
            let (h, rest) = (c % hosts.len(), c / hosts.len());
            let (o, k) = (rest % origins.len(), rest / origins.len());
            rec.validate(&format!("{vid} h{h} o{o} k{k}"), v, path, &hosts[h], &kinds[k], &origins[o])?;
        }
    }
    // Files that are not scenarios.
    for p in ["no/such/file.toml", "/dev/null", "/dev/zero", "target/plan-record/notelf.so"] {
        let got = rtcell_scenario::load_from(Path::new(p), &hosts[0], &[], &origins[0]);
        rec.line(&format!("file:{p} load"), &got)?;
    }
    rec.out.flush()?;
    eprintln!("{} validations of {} base texts written to {out}", rec.count, bases.len());
    Ok(())
}

struct Record {
    out: std::io::BufWriter<std::fs::File>,
    count: usize,
}

impl Record {
    fn validate(
        &mut self,
        id: &str,
        text: &str,
        path: &str,
        host: &HostView,
        kinds: &[(String, String)],
        origin: &Origin,
    ) -> Res<()> {
        let got = validate_text_from(text, Path::new(path), host, kinds, origin);
        self.line(id, &got)
    }

    fn line(&mut self, id: &str, got: &Result<rtcell_scenario::Plan, rtcell_scenario::Invalid>) -> Res<()> {
        self.count += 1;
        match got {
            Ok(plan) => writeln!(self.out, "{id}\tOK\t{plan:?}")?,
            Err(inv) => writeln!(self.out, "{id}\tERR\t{inv:?}\t{:?}", inv.to_string())?,
        }
        Ok(())
    }
}

fn hosts() -> Vec<HostView> {
    let all: Vec<String> = ["echo", "control", "spin", "faults"].map(String::from).to_vec();
    vec![
        HostView { online: vec![0, 1], kvm_unusable: None, payloads: all.clone() },
        HostView { online: vec![0, 1], kvm_unusable: Some("/dev/kvm is missing".into()), payloads: all.clone() },
        HostView { online: vec![0], kvm_unusable: Some("no KVM".into()), payloads: Vec::new() },
        HostView { online: vec![0, 1, 2, 3], kvm_unusable: None, payloads: vec!["echo".into()] },
        HostView { online: vec![0, 2, 3], kvm_unusable: None, payloads: all },
    ]
}

fn origins(fixture: &Path) -> Res<Vec<Origin>> {
    let lib = fixture.canonicalize()?;
    Ok(vec![
        Origin::Operator,
        Origin::Api { library_dir: None, base: None },
        Origin::Api { library_dir: Some(lib.clone()), base: None },
        Origin::Api { library_dir: Some(lib.join("build")), base: Some(lib) },
    ])
}

/// `--kind` options: none, each kind for the first cell of the text, an unknown kind, an unknown cell.
fn kind_options(text: &str) -> Vec<Vec<(String, String)>> {
    let first = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("[cells.").and_then(|r| r.strip_suffix(']')))
        .unwrap_or("ctrl")
        .trim_matches('"')
        .to_string();
    let mut out = vec![Vec::new()];
    for kind in ["thread", "process", "kvm", "bogus"] {
        out.push(vec![(first.clone(), kind.to_string())]);
    }
    out.push(vec![("nope".into(), "thread".into())]);
    out
}

/// The directory C tasks' files resolve in: a payload ELF, a shared object, a text file.
fn make_fixture() -> Res<PathBuf> {
    let dir = PathBuf::from("target/plan-record");
    for sub in ["build", "c-controller/build"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let elf = rtcell_kvm::payloads::payload("faults").ok_or("no payload named faults")?;
    let so = ["/lib/x86_64-linux-gnu/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6", "/lib64/libm.so.6"]
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .ok_or("no libm.so.6 to use as a shared object")?;
    for d in ["", "build", "c-controller/build"] {
        std::fs::write(dir.join(d).join("ctrl.elf"), elf)?;
        std::fs::write(dir.join(d).join("libctrl.so"), &so)?;
    }
    std::fs::write(dir.join("notelf.so"), "not an ELF file\n")?;
    Ok(dir)
}

/// (id, path to validate it as, text), in a fixed order.
fn bases() -> Res<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    let mut files = Vec::new();
    collect(Path::new("examples"), "toml", &mut files)?;
    for e in std::fs::read_dir("crates")? {
        collect(&e?.path().join("tests"), "toml", &mut files)?;
    }
    files.sort();
    for f in &files {
        let text = std::fs::read_to_string(f)?;
        let rel = f.display().to_string();
        out.push((format!("file:{rel}"), rel.clone(), text.clone()));
        // The same text beside the fixture's C files.
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        out.push((format!("fixture:{rel}"), format!("target/plan-record/{name}"), text));
    }
    let mut sources = Vec::new();
    for e in std::fs::read_dir("crates")? {
        collect(&e?.path().join("tests"), "rs", &mut sources)?;
    }
    sources.sort();
    for s in &sources {
        let src = std::fs::read_to_string(s)?;
        for (i, text) in scenario_literals(&src).into_iter().enumerate() {
            out.push((format!("test:{}#{i}", s.display()), "target/plan-record/s.toml".into(), text));
        }
    }
    for (i, text) in written_here().into_iter().enumerate() {
        out.push((format!("here#{i}"), "target/plan-record/s.toml".into(), text));
    }
    Ok(out)
}

fn collect(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) -> Res<()> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Ok(()) };
    for e in rd {
        let p = e?.path();
        if p.is_dir() {
            collect(&p, ext, out)?;
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
    Ok(())
}

/// String literals of Rust source that hold a scenario (`duration_s =`), unescaped; a format string's
/// `{{`/`}}` become braces and its `{arg}` the argument's name.
fn scenario_literals(src: &str) -> Vec<String> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'\'' {
            // A char literal ('"') or a lifetime: skip the quote and, for a char, its content.
            if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else if b.get(i + 1) == Some(&b'\\') {
                i += 4;
            } else {
                i += 1;
            }
        } else if b[i] == b'r' && (b.get(i + 1) == Some(&b'#') || b.get(i + 1) == Some(&b'"')) {
            let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
            let start = i + 1 + hashes;
            if b.get(start) != Some(&b'"') || (i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) {
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let Some(end) = src[start + 1..].find(&close) else { break };
            keep(&src[start + 1..start + 1 + end], &mut out);
            i = start + 1 + end + close.len();
        } else if b[i] == b'"' {
            let mut j = i + 1;
            let mut s = String::new();
            while j < b.len() && b[j] != b'"' {
                if b[j] == b'\\' {
                    j += 1;
                    match b.get(j) {
                        Some(b'n') => s.push('\n'),
                        Some(b't') => s.push('\t'),
                        Some(b'\\') => s.push('\\'),
                        Some(b'"') => s.push('"'),
                        Some(b'\'') => s.push('\''),
                        Some(b'\n') => {
                            while b.get(j + 1).is_some_and(|c| c.is_ascii_whitespace()) {
                                j += 1;
                            }
                        }
                        Some(b'u') => {
                            let close = src[j..].find('}').map_or(j, |k| j + k);
                            let hex = src.get(j + 2..close).unwrap_or("");
                            s.push(u32::from_str_radix(hex, 16).ok().and_then(char::from_u32).unwrap_or('?'));
                            j = close;
                        }
                        Some(c) => s.push(*c as char),
                        None => {}
                    }
                    j += 1;
                } else {
                    let ch = src[j..].chars().next().unwrap_or(' ');
                    s.push(ch);
                    j += ch.len_utf8();
                }
            }
            keep(&s, &mut out);
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

fn keep(lit: &str, out: &mut Vec<String>) {
    if !lit.contains("duration_s =") {
        return;
    }
    if !lit.contains("{{") {
        out.push(lit.to_string());
        return;
    }
    let mut s = String::new();
    let mut it = lit.chars().peekable();
    while let Some(c) = it.next() {
        match (c, it.peek()) {
            ('{', Some('{')) | ('}', Some('}')) => {
                it.next();
                s.push(c);
            }
            ('{', _) => {
                let mut arg = String::new();
                for d in it.by_ref() {
                    if d == '}' {
                        break;
                    }
                    arg.push(d);
                }
                s.push_str(if arg.is_empty() { "x" } else { arg.split(':').next().unwrap_or("x") });
            }
            _ => s.push(c),
        }
    }
    out.push(s);
}

/// Scenarios that reach the corners the files and tests do not.
fn written_here() -> Vec<String> {
    let linux = |extra: &str, work: &str| {
        format!(
            "duration_s = 1\n[tasks.a]\ncell = \"linux\"\nperiod_us = 1000\npriority = 50\n{extra}workload = {work}\n"
        )
    };
    vec![
        "name = \"a b\"\nduration_s = 1\n".into(),
        "duration_s = 1\n".into(),
        String::new(),
        linux("", "{ kind = \"spin\", us = 5 }"),
        linux("budget_us = 0\n", "{ kind = \"spin\", us = 5000000 }"),
        linux("", "{ kind = \"spin\", us = 5, inject = { at_cycle = 900, us = 2000000 } }"),
        linux("", "{ kind = \"trajectory\", from_deg = 0, to_deg = 90, move_s = 2 }"),
        linux("output = \"sp\"\n", "{ kind = \"trajectory\", from_deg = 0, to_deg = 90, move_s = 2 }")
            + "[signals.sp]\nvalues = 18\n",
        linux("output = \"io\"\n", "{ kind = \"ethercat\" }") + "[ethercat]\nsimulated = 3\n[signals.io]\nvalues = 2\n",
        linux("output = \"io\"\n", "{ kind = \"ethercat\", outputs = \"io\" }")
            + "[ethercat]\ninterface = \"eth1\"\ntimeout_us = 500\nbusy_poll = true\n[signals.io]\nvalues = 6\n",
        linux("", "{ kind = \"spin\", us = 5 }") + "[ethercat]\nsimulated = 3\ndrop_after = 100\n",
        linux("", "{ kind = \"spin\", us = 5 }") + "[ethercat]\ninterface = \"eth1\"\nsimulated = 3\n",
        linux("", "{ kind = \"spin\", us = 5 }") + "[[loads]]\nkind = \"memcpy\"\n[[loads]]\nkind = \"stress\"\ncpus = [0, 1, 7]\n",
        linux("params = [\"gain\"]\n", "{ kind = \"spin\", us = 5 }")
            + "[signals.gain]\nvalues = 2\nwritable = true\ntype = \"i64\"\nmin = -5\nmax = 5\n",
        linux("params = [\"gain\"]\n", "{ kind = \"spin\", us = 5 }")
            + "[signals.gain]\nvalues = 1\nwritable = true\ntype = \"bool\"\nmin = 0.5\n",
        linux("", "{ kind = \"spin\", us = 5 }") + "[signals.gain]\nvalues = 1\ntype = \"f64\"\nmax = 3\n",
        linux(
            "output = \"u\"\nsafe_value = [1.0, 2.0]\nwatchdog = { time_us = 1000, sensitivity = 3 }\non_overrun = \"run_at_once\"\n",
            "{ kind = \"spin\", us = 5 }",
        ) + "[signals.u]\nvalues = 1\n",
        linux("deadline_us = 0\noffset_us = 5000\nsafe_value = [1.0]\n", "{ kind = \"spin\", us = -1 }"),
        linux("", "{ kind = \"log\", file = \"a.log\", signals = [\"s\", \"nope\"], tasks = [\"a\", \"zz\"] }")
            + "[signals.s]\nvalues = 3\n",
        linux("", "{ kind = \"master\", request = \"req\", reply = \"rep\" }")
            + "[channels.req]\ncapacity = 16\nframe_bytes = 64\n[channels.rep]\ncapacity = 16\nframe_bytes = 128\n\
               [cells.k]\nkind = \"thread\"\ncpu = 1\nservice = { kind = \"controller\", request = \"req\", reply = \"rep\", precision = \"q31\" }\n",
        "duration_s = 1\n[cells.k]\nkind = \"kvm\"\ncpu = 1\npayload = \"spin\"\nargs = \"hist=h\"\nwrites = [\"h\", \"zz\"]\n\
         [channels.h]\ncapacity = 16\nframe_bytes = 64\n"
            .into(),
        "duration_s = 1\n[cells.k]\nkind = \"process\"\ncpu = 1\nfallback = \"thread\"\nargs = \"x=1\"\npriority = 0\n".into(),
        "duration_s = 1\n[cells.k]\nkind = \"kvm\"\ncpu = 1\nfallback = \"kvm\"\npayload = \"echo\"\n\
         service = { kind = \"controller\", request = \"a\", reply = \"b\" }\n"
            .into(),
        linux("", "{ kind = \"scribble\", channel = \"task.a\", at_cycle = 1, cycles = 2 }"),
        linux("", "{ kind = \"scribble\", channel = \"nope\", at_cycle = 1, cycles = 2 }"),
        "duration_s = 1\n[cells.c]\nkind = \"thread\"\ncpu = 1\n[com.x]\nsignals = [{ id = 1, name = \"a\", type = \"uint8\" }]\n\
         [tasks.a]\ncell = \"c\"\nperiod_us = 1000\npriority = 50\n\
         workload = { kind = \"c\", library = \"build/libctrl.so\", init = \"i\", step = \"s\", com = [\"x\"] }\n"
            .into(),
        "duration_s = 1\n[cells.c]\nkind = \"process\"\ncpu = 1\n[tasks.a]\ncell = \"c\"\nperiod_us = 1000\npriority = 50\n\
         workload = { kind = \"c\", library = \"notelf.so\" }\n"
            .into(),
        "duration_s = 1\n[cells.c]\nkind = \"kvm\"\ncpu = 1\n[tasks.a]\ncell = \"c\"\nperiod_us = 1000\npriority = 50\n\
         params = [\"p\"]\nworkload = { kind = \"c\", payload = \"notelf.so\" }\n[tasks.b]\ncell = \"c\"\nperiod_us = 1000\n\
         priority = 50\nworkload = { kind = \"c\", payload = \"ctrl.elf\" }\n[signals.p]\nvalues = 1\nwritable = true\n"
            .into(),
        "duration_s = 1\n[cells.c]\nkind = \"kvm\"\ncpu = 1\n[tasks.a]\ncell = \"c\"\nperiod_us = 1000\npriority = 50\n\
         workload = { kind = \"c\", payload = \"../../../etc/passwd\" }\n"
            .into(),
    ]
}

/// Mechanically broken variants of `text`, at most [`VARIANTS`], in a fixed order.
fn variants(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let join = |ls: &[String]| {
        let mut s = ls.join("\n");
        s.push('\n');
        s
    };
    let owned: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mut all: Vec<String> = Vec::new();
    let long = "N".repeat(300);
    let numbers = ["0", "-1", "99999999999999999999", "4294967297", "65536", "1e308", "0.5", "nan", "-inf"];
    let strings = ["", long.as_str(), "../x", "linux", "a b", "/etc/passwd", "kvm", "task.a", "sched"];
    for (i, line) in lines.iter().enumerate() {
        let mut v = owned.clone();
        v.remove(i);
        all.push(join(&v));
        let mut v = owned.clone();
        v.insert(i, line.to_string());
        all.push(join(&v));
        let (nums, strs) = tokens(line);
        for (a, b) in nums {
            for n in numbers {
                let mut v = owned.clone();
                v[i] = format!("{}{n}{}", &line[..a], &line[b..]);
                all.push(join(&v));
            }
        }
        for (a, b) in strs {
            for s in strings {
                let mut v = owned.clone();
                v[i] = format!("{}{s}{}", &line[..a], &line[b..]);
                all.push(join(&v));
            }
        }
        // Two values swapped: this line's and the next assignment's.
        if let Some((k, val)) = line.split_once('=')
            && let Some(j) = (i + 1..lines.len()).find(|j| lines[*j].contains('='))
            && let Some((k2, val2)) = lines[j].split_once('=')
        {
            let mut v = owned.clone();
            v[i] = format!("{k}={val2}");
            v[j] = format!("{k2}={val}");
            all.push(join(&v));
        }
        // A key renamed.
        if let Some((k, val)) = line.split_once('=')
            && !k.trim().is_empty()
            && !line.trim_start().starts_with('#')
        {
            let mut v = owned.clone();
            v[i] = format!("x{}={val}", k.trim_start());
            all.push(join(&v));
        }
    }
    // Unique, then spread over the whole text when there are too many.
    let mut seen = BTreeSet::new();
    all.retain(|v| v != text && seen.insert(v.clone()));
    if all.len() <= VARIANTS {
        return all;
    }
    (0..VARIANTS).map(|k| all[k * all.len() / VARIANTS].clone()).collect()
}

/// Byte ranges (start, end) in a line.
type Ranges = Vec<(usize, usize)>;

/// Byte ranges of the numbers (outside strings) and of the strings' contents in `line`.
fn tokens(line: &str) -> (Ranges, Ranges) {
    let b = line.as_bytes();
    let (mut nums, mut strs) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' => break,
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                strs.push((start, j.min(b.len())));
                i = j + 1;
            }
            c if (c.is_ascii_digit() || (c == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || matches!(b[i - 1], b'_' | b'.' | b'-'))) =>
            {
                let start = i;
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'_' | b'+' | b'-')) {
                    i += 1;
                }
                nums.push((start, i));
            }
            _ => i += 1,
        }
    }
    (nums, strs)
}
