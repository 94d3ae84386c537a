//! `rtcell report`: the HTML report of a results document, made from the document alone, so a run's page
//! can be regenerated (or made for an older run) at any time.

use std::path::{Path, PathBuf};

use clap::Args;
use rtcell_report::Results;
use rtcell_report::doc::RESULTS_FILE;
use rtcell_report::html::{self, REPORT_FILE};

use super::EXIT_USAGE;

/// Paragraphs are single lines: clap wraps them to the terminal.
pub const AFTER_HELP: &str = concat!(
    "Examples:\n",
    "  rtcell report rtcell-results/20261122T064300Z-loopback/results.json\n",
    "  rtcell report rtcell-results/20261122T064300Z-loopback    # a results directory\n",
    "  rtcell report results.json --out loopback.html\n",
    "\n",
    "The page is one self-contained file (inline SVG plots, no script, nothing loaded from the network): open it in \
     any browser, archive it with the results, or print it. `rtcell bench SUITE` writes it beside results.json.\n",
    "\n",
    "Exit status: 0 written; 1 the page could not be written; 2 the results document is missing, not JSON, of \
     another schema version or not following its schema, or --out names a directory that does not exist."
);

#[derive(Args)]
pub struct ReportArgs {
    /// The results document (results.json), or the results directory holding it.
    results: PathBuf,
    /// Write the page here (default: report.html beside the results document); an existing directory
    /// gets DIR/report.html.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn main(args: ReportArgs) -> i32 {
    let path = if args.results.is_dir() { args.results.join(RESULTS_FILE) } else { args.results };
    let results = match Results::load(&path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_USAGE;
        }
    };
    let out = match args.out {
        Some(o) if o.is_dir() => o.join(REPORT_FILE),
        Some(o) => o,
        None => parent(&path).join(REPORT_FILE),
    };
    let dir = parent(&out);
    if !dir.is_dir() {
        eprintln!(
            "error: --out {}: the directory {} does not exist; create it or write the page elsewhere",
            out.display(),
            dir.display()
        );
        return EXIT_USAGE;
    }
    if same_file(&out, &path) {
        eprintln!(
            "error: --out {}: that is the results document itself; give the page another name, e.g. {}",
            out.display(),
            parent(&path).join(REPORT_FILE).display()
        );
        return EXIT_USAGE;
    }
    match html::write_report_file(&results, &out) {
        Ok(()) => {
            outln!("report: {}", out.display());
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// Writes `dir/report.html` after a run. A failure costs only the page (the results are already written),
/// so it is a warning that says how to make the page later.
pub fn write_beside(results: &Results, dir: &Path) {
    match html::write_report(results, dir) {
        Ok(path) => outln!("report: {}", path.display()),
        Err(e) => eprintln!(
            "warning: report.html not written: {e}; `rtcell report {}` makes it from the results",
            dir.join(RESULTS_FILE).display()
        ),
    }
}

/// The directory of a file path; `.` for a bare file name.
fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
