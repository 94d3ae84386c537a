//! StartScenario: no files and no native code from clients. A scenario is named (a file of the
//! server's `--scenario-dir`) or sent as TOML text (kept only in the state directory, within its budget,
//! removed when the run ends or is refused). Either way it is validated as [`Origin::Api`]: no C task in
//! a thread cell (it would run inside the gateway's process), C code in process and kvm cells only from
//! the server's `--library-dir`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rtcell_scenario::Origin;
use tonic::Status;

use crate::pb;
use crate::runs::{Refusal, StartRequest};
use crate::security::quoted;
use crate::service::Gateway;
use crate::snapshot;

/// Largest scenario text accepted (the scenario reader's own cap on files: 1 MiB).
pub const MAX_SCENARIO_BYTES: usize = rtcell_scenario::plan::MAX_FILE_BYTES;
/// Lines of a refusal passed back to the client at most (each capped and escaped).
const MAX_REFUSAL_LINES: usize = 40;
/// Bytes of one such line at most.
const MAX_REFUSAL_LINE: usize = 512;

/// The directories a gateway takes scenarios and C code from (canonical).
#[derive(Debug, Clone, Default)]
pub struct ScenarioSources {
    /// `--scenario-dir`: the scenarios clients may start by name.
    pub scenario_dir: Option<PathBuf>,
    /// `--library-dir`: the C libraries and payload ELFs scenarios started through the API may use.
    pub library_dir: Option<PathBuf>,
}

impl ScenarioSources {
    /// Canonicalizes the given directories (errors name the flag).
    pub fn new(scenario_dir: Option<&Path>, library_dir: Option<&Path>) -> Result<ScenarioSources, String> {
        let canon = |d: Option<&Path>, flag: &str| -> Result<Option<PathBuf>, String> {
            d.map(|d| {
                let c = d.canonicalize().map_err(|e| format!("{flag} {}: {e}", d.display()))?;
                if !c.is_dir() {
                    return Err(format!("{flag} {}: not a directory", d.display()));
                }
                Ok(c)
            })
            .transpose()
        };
        Ok(ScenarioSources {
            scenario_dir: canon(scenario_dir, "--scenario-dir")?,
            library_dir: canon(library_dir, "--library-dir")?,
        })
    }

    /// The file of the scenario named `name` in the scenario directory, never outside it.
    fn named(&self, name: &str) -> Result<PathBuf, Status> {
        let stem = name.strip_suffix(".toml").unwrap_or(name);
        if stem.contains('/') || stem.contains("..") {
            return Err(Status::invalid_argument(format!(
                "`path` {} is not a scenario name: it names a file of the gateway's --scenario-dir (letters, digits, \
                 '_' and '-', no '/' or '..'); to run a file of yours, send its text (rtcell ctl start --file FILE)",
                quoted(name)
            )));
        }
        if let Some(why) = rtcell_scenario::plan::scenario_name_problem(stem) {
            return Err(Status::invalid_argument(format!("scenario name: {why}")));
        }
        let Some(dir) = &self.scenario_dir else {
            return Err(Status::failed_precondition(
                "this gateway starts no scenario by name: it was started without --scenario-dir",
            ));
        };
        let file = dir.join(format!("{stem}.toml"));
        let known = || {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".toml").map(String::from))
                        .take(50)
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        };
        // A symlink is followed only if it stays inside the directory.
        match file.canonicalize() {
            Ok(c) if c.starts_with(dir) && c.is_file() => Ok(c),
            Ok(_) => Err(Status::permission_denied(format!(
                "scenario {stem:?} resolves outside the scenario directory or is not a file"
            ))),
            Err(_) => Err(Status::not_found(format!(
                "no scenario {stem:?} in the scenario directory (scenarios: {})",
                known()
            ))),
        }
    }
}

impl Gateway {
    /// Validates and starts a scenario for a client.
    pub(crate) fn start_scenario(&self, r: pb::StartScenarioRequest) -> Result<pb::RunInfo, Status> {
        let Some(runner) = &self.runner else {
            return Err(Status::failed_precondition(
                "this gateway serves one run (rtcell run --serve); start scenarios through `rtcell serve`",
            ));
        };
        if !r.base_dir.is_empty() {
            return Err(Status::invalid_argument(
                "base_dir is gone: the gateway reads no client-chosen directory; relative file references of a \
                 scenario text resolve inside the server's --library-dir",
            ));
        }
        if let Some(cur) = self.current()
            && cur.outcome().is_none()
        {
            return Err(Status::failed_precondition(format!(
                "run {} ({}) is {}: stop it first (rtcell ctl stop)",
                cur.id,
                cur.scenario,
                cur.state()
            )));
        }
        // How refusals name the scenario: as the client gave it, never by a path of the server's.
        let shown = if r.path.is_empty() { "(scenario text)".to_string() } else { quoted(&r.path) };
        let library_dir = self.sources.library_dir.clone();
        let (path, spooled, origin) = match (r.path.is_empty(), r.toml.is_empty()) {
            (false, true) => (self.sources.named(&r.path)?, None, Origin::Api { library_dir, base: None }),
            (true, false) => {
                let p = self.spool(&r.toml)?;
                (p.clone(), Some(p), Origin::Api { base: library_dir.clone(), library_dir })
            }
            _ => {
                return Err(Status::invalid_argument(
                    "give either `path` (the name of a scenario of the gateway's --scenario-dir) or `toml` (the \
                     scenario's text), not both",
                ));
            }
        };
        let file = path.clone();
        let req =
            StartRequest { path, duration: (!r.duration.is_empty()).then_some(r.duration), kinds: r.kinds, origin };
        match runner.start(req) {
            Ok(slot) => {
                if let Some(p) = spooled {
                    slot.remove_when_done(p);
                }
                self.add_run(Arc::clone(&slot));
                Ok(snapshot::run_info(&slot))
            }
            Err(e) => {
                if let Some(p) = spooled {
                    let _ = std::fs::remove_file(p);
                }
                let text = |m: &str| bounded_lines(&self.without_server_paths(m, &file, &shown));
                Err(match e {
                    Refusal::Invalid(m) => Status::invalid_argument(text(&m)),
                    Refusal::Busy(m) => Status::failed_precondition(text(&m)),
                    Refusal::Failed(m) => Status::internal(text(&m)),
                })
            }
        }
    }

    /// A refusal's text for the client: the scenario's file named `shown` (as the client gave it), the
    /// gateway's directories by what they are, so that no path of the server reaches the client.
    fn without_server_paths(&self, text: &str, file: &Path, shown: &str) -> String {
        let mut out = text.replace(&file.display().to_string(), shown);
        let mut dirs: Vec<(String, &str)> = [
            (self.state.as_ref().and_then(|s| s.scenarios.parent().map(Path::to_path_buf)), "(state directory)"),
            (self.sources.scenario_dir.clone(), "(scenario directory)"),
            (self.sources.library_dir.clone(), "(library directory)"),
        ]
        .into_iter()
        .filter_map(|(d, name)| Some((d?.display().to_string(), name)))
        .filter(|(d, _)| d.len() > 1)
        .collect();
        // One inside another: the inner one first.
        dirs.sort_by_key(|(d, _)| std::cmp::Reverse(d.len()));
        for (d, name) in dirs {
            out = out.replace(&d, name);
        }
        out
    }

    /// Keeps a scenario text in the state directory (within its budget) for the run.
    fn spool(&self, text: &str) -> Result<PathBuf, Status> {
        if text.len() > MAX_SCENARIO_BYTES {
            return Err(Status::invalid_argument(format!(
                "scenario text of {} bytes: at most {MAX_SCENARIO_BYTES} (1 MiB)",
                text.len()
            )));
        }
        let state = self
            .state
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("no state directory to keep the scenario in"))?;
        state.make_room(text.len() as u64, &self.in_use())?;
        let sha = crate::security::hex(&<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes()));
        let keep = state.scenarios.join(format!("{}.toml", &sha[..16]));
        crate::deploy::write_private(&keep, text.as_bytes())
            .map_err(|e| Status::internal(format!("keeping the scenario: {e}")))?;
        Ok(keep)
    }
}

/// A refusal's text for the client: at most [`MAX_REFUSAL_LINES`] lines, each capped and escaped (a
/// scenario's problems may quote its text).
fn bounded_lines(text: &str) -> String {
    let line = |l: &str| rtcell_host::peer_text::peer_str(l, MAX_REFUSAL_LINE);
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= MAX_REFUSAL_LINES {
        return lines.iter().map(|l| line(l)).collect::<Vec<_>>().join("\n");
    }
    // The first problems, then the verdict (the last line).
    let mut out: Vec<String> = lines.iter().take(MAX_REFUSAL_LINES - 1).map(|l| line(l)).collect();
    out.push(format!("… {} more lines", lines.len() - MAX_REFUSAL_LINES));
    out.push(line(lines[lines.len() - 1]));
    out.join("\n")
}
