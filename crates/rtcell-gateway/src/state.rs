//! The gateway's state directory: the payloads it was sent (`payloads/`) and the scenario texts it runs
//! (`scenarios/`). Nothing a client sends is written anywhere else, and the directory has a size budget:
//! before anything new is written, the oldest items no running cell or run uses are removed until it
//! fits; if the items in use leave no room, the request is refused.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tonic::Status;

/// Bytes the state directory may hold (payloads and scenario texts together): 64 MiB.
pub const STATE_BUDGET_BYTES: u64 = 64 << 20;

/// The state directory and its budget.
pub struct StateDir {
    pub scenarios: PathBuf,
    pub payloads: PathBuf,
    budget: u64,
}

impl StateDir {
    /// Creates the directory and its parts (private) if absent.
    pub fn open(root: &Path) -> Result<StateDir, String> {
        Self::with_budget(root, STATE_BUDGET_BYTES)
    }

    pub fn with_budget(root: &Path, budget: u64) -> Result<StateDir, String> {
        crate::listen::private_dir(root)?;
        let scenarios = root.join("scenarios");
        let payloads = root.join("payloads");
        crate::listen::private_dir(&scenarios)?;
        crate::listen::private_dir(&payloads)?;
        Ok(StateDir { scenarios, payloads, budget })
    }

    /// The files kept now, oldest first: (path, bytes, modified).
    fn items(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let mut v = Vec::new();
        for d in [&self.scenarios, &self.payloads] {
            let Ok(rd) = std::fs::read_dir(d) else { continue };
            for e in rd.flatten() {
                if let Ok(m) = e.path().symlink_metadata()
                    && m.is_file()
                {
                    v.push((e.path(), m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
                }
            }
        }
        v.sort_by_key(|(_, _, t)| *t);
        v
    }

    /// Makes room for `incoming` more bytes: removes the oldest items not in `in_use` (finished runs'
    /// scenarios, stopped cells' payloads) until they fit, or refuses (RESOURCE_EXHAUSTED).
    pub fn make_room(&self, incoming: u64, in_use: &[PathBuf]) -> Result<(), Status> {
        let items = self.items();
        let mut used: u64 = items.iter().map(|(_, n, _)| n).sum();
        for (p, n, _) in &items {
            if used.saturating_add(incoming) <= self.budget {
                break;
            }
            if in_use.iter().any(|u| u == p) {
                continue;
            }
            if std::fs::remove_file(p).is_ok() {
                used -= n;
            }
        }
        if used.saturating_add(incoming) > self.budget {
            return Err(Status::resource_exhausted(format!(
                "the gateway's state directory keeps at most {} MiB (payloads and scenarios together); {} bytes \
                 are used by running cells and runs, {incoming} more do not fit: stop a deployed cell or the run",
                self.budget >> 20,
                used
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unused_items_go_first_and_items_in_use_stay() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateDir::with_budget(&dir.path().join("st"), 1000).unwrap();
        let a = s.payloads.join("a.elf");
        let b = s.scenarios.join("b.toml");
        let c = s.payloads.join("c.elf");
        for p in [&a, &b, &c] {
            std::fs::write(p, vec![0u8; 300]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // 900 used: 300 more need one item gone, the oldest not in use (a is in use: b goes).
        s.make_room(300, std::slice::from_ref(&a)).unwrap();
        assert!(a.exists() && !b.exists() && c.exists());
        // Everything in use: refused, nothing removed.
        let e = s.make_room(900, &[a.clone(), c.clone()]).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(a.exists() && c.exists());
    }
}
