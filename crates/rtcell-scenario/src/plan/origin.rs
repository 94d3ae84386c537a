//! Where a scenario comes from decides what it may load: the machine's operator may name any file and
//! run C code anywhere; a scenario started through the gateway's API never loads code into the
//! gateway's own process (a thread cell's C task is a shared object loaded there: one abort would end
//! the daemon), and loads C code only from the gateway's library directory.

use std::path::{Component, Path, PathBuf};

use rtcell_cells::CellKind;

use super::Validator;

/// Who a scenario comes from (the policy is data given to validation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Origin {
    /// The machine's operator (`rtcell run FILE`): every file it names is trusted.
    #[default]
    Operator,
    /// A client of the gateway's API. C tasks run only in process or kvm cells, and their library or
    /// payload must resolve inside `library_dir` (already canonical; `None`: no C task is accepted).
    /// Relative file references resolve against `base` (`None`: beside the scenario file).
    Api { library_dir: Option<PathBuf>, base: Option<PathBuf> },
}

impl Origin {
    /// The directory relative file references of the scenario `path` resolve against.
    pub fn base_dir(&self, path: &Path) -> PathBuf {
        match self {
            Origin::Api { base: Some(b), .. } => b.clone(),
            _ => path.parent().map(Path::to_path_buf).unwrap_or_default(),
        }
    }
}

impl Validator<'_> {
    /// A C task of the task at `p` in a cell of `kind`: refused in a thread cell for API scenarios.
    pub(super) fn c_code_allowed(&mut self, p: &str, kind: Option<CellKind>) {
        if let Origin::Api { .. } = self.origin
            && kind == Some(CellKind::Thread)
        {
            self.err(
                &format!("{p}.cell"),
                "a C task in a thread cell runs inside the gateway's own process (one crash would end it): \
                 refused for a scenario started through the gateway",
                "run the task in a process or kvm cell (kind = \"process\"), or run the file with `rtcell run` on the machine",
            );
        }
    }

    /// Whether the C library or payload `abs` (at `field`) may be loaded; complains if not.
    pub(super) fn code_file_allowed(&mut self, field: &str, abs: &Path) -> bool {
        let Origin::Api { library_dir, .. } = self.origin else { return true };
        match library_dir {
            None => {
                self.err(
                    field,
                    "the gateway accepts no C code: it was started without --library-dir",
                    "start `rtcell serve` with --library-dir DIR holding the libraries and payloads clients may use",
                );
                false
            }
            Some(d) if !abs.starts_with(d) || abs.components().any(|c| c == Component::ParentDir) => {
                self.err(
                    field,
                    format!("{} is outside the gateway's library directory {}", abs.display(), d.display()),
                    "name a file of the library directory (relative paths resolve inside it)",
                );
                false
            }
            Some(_) => true,
        }
    }
}
