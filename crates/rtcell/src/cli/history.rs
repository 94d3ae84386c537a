//! `rtcell history` and `rtcell compare`, and the recording of each finished run in the history.
//!
//! Exit status: 0 done; 2 bad input (a run that does not exist or is ambiguous, a file that is not a
//! history or not a results document, `--limit 0`); 1 the history could not be read.

use std::path::{Path, PathBuf};

use clap::Args;
use rtcell_report::Results;
use rtcell_report::history::{self, HistoryError, RunRef, RunSummary, compare::compare};
use rtcell_report::table::Table;

use super::EXIT_USAGE;

pub const HISTORY_HELP: &str = "Examples:
  rtcell history
  rtcell history --suite loopback --limit 5
  rtcell history --json
  rtcell history --document latest > results.json   # a run's results.json, even if deleted

The headline of each suite is a median: loopback, the thread cell's 0 B ring round trip; control, the f64 \
execution time in a thread cell (else local); c2c, the round trip; scenario, the first task's activation \
latency; any other suite, its first timing series (round trip, one way, latency, exec time).

The history is --history PATH if given, else $RTCELL_HISTORY, else $RTCELL_HOME/history.sqlite, else \
$XDG_DATA_HOME/rtcell/history.sqlite, else ~/.local/share/rtcell/history.sqlite. Every `rtcell bench` and \
`rtcell run` records its run there.

A fleet can share one history in PostgreSQL: --history postgres://rtcell@db.example/rtcell (or \
RTCELL_HISTORY=postgres://...) on every machine; the tables (rtcell_runs, rtcell_series, ...) are created \
on first use. TLS to the database is not supported yet (sslmode=require is refused).";

pub const COMPARE_HELP: &str = "Examples:
  rtcell compare latest~1 latest
  rtcell compare 20261122-0643 latest --json
  rtcell compare old/results.json rtcell-results/20261122T064300Z-loopback

RUN is `latest`, `latest~N` (N runs before the latest), a run id or a unique prefix of one (see `rtcell \
history`), or the path of a results.json or of the directory holding it.

Noise: a median within ±5% is within noise, or within the larger of the two runs' own spread σ/median \
when that is wider (σ = (p90 − median)/1.28); p99.9 within ±10% (or the median's threshold); maxima within \
±25%, judged only when neither run was on a virtual machine (nor p99.9 of fewer than 1,000 samples). \
Lower is better for round trips, one-way times, latencies and execution times, higher for throughput; \
other kinds (counts, periods) have no direction (\"changed\"). More errors is worse. A series is worse \
when any judged figure is worse.

Exit status: 0 compared (whatever the verdicts); 2 a run not found or ambiguous, or a file that is not a \
results document or not a history; 1 the history could not be read.";

/// Where the history is: shared by every command that reads or records it.
#[derive(Args, Clone, Debug, Default)]
pub struct HistoryDb {
    /// The run history: an SQLite file, or a shared PostgreSQL database (postgres://USER@HOST/DB)
    /// (default: $RTCELL_HISTORY, else $RTCELL_HOME/history.sqlite, else
    /// $XDG_DATA_HOME/rtcell/history.sqlite, else ~/.local/share/rtcell/history.sqlite).
    #[arg(long = "history", value_name = "PATH|URL")]
    pub path: Option<PathBuf>,
}

#[derive(Args)]
pub struct HistoryArgs {
    /// Show at most N runs, the most recent first.
    #[arg(long, default_value_t = 20, value_name = "N")]
    limit: usize,
    /// Only the runs that include this suite (e.g. loopback, control, c2c, scenario).
    #[arg(long, value_name = "SUITE")]
    suite: Option<String>,
    /// Print the runs as JSON.
    #[arg(long)]
    json: bool,
    /// Print the stored results.json of RUN (latest, latest~N, an id or a unique prefix) instead of the list.
    #[arg(long, value_name = "RUN")]
    document: Option<String>,
    #[command(flatten)]
    db: HistoryDb,
}

#[derive(Args)]
pub struct CompareArgs {
    /// The reference run: latest, latest~N, an id or a unique prefix, or a results.json path.
    run_a: String,
    /// The run compared with it (same forms).
    run_b: String,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    db: HistoryDb,
}

/// Prints the error and returns the exit status it calls for.
fn fail(e: &HistoryError) -> i32 {
    eprintln!("error: {e}");
    if e.is_usage() { EXIT_USAGE } else { 1 }
}

/// Records a finished run. Never fails the run: the results.json is already written, so a history that
/// cannot be written is a warning.
pub fn record(db: Option<&Path>, results: &Results, results_path: &Path) {
    let recorded = history::location(db).and_then(|path| {
        let mut store = history::open(&path)?;
        let id = store.record(results, Some(results_path))?;
        // The store's own name for itself: a URL's password is not shown.
        Ok((id, store.path().to_owned()))
    });
    match recorded {
        Ok((id, path)) => outln!("history: run {id} recorded in {}", path.display()),
        Err(e) => eprintln!("warning: this run was not recorded in the history (its results.json is written): {e}"),
    }
}

/// `rtcell history`.
pub fn history_main(args: HistoryArgs) -> i32 {
    if args.limit == 0 {
        eprintln!("error: --limit 0 shows nothing: give at least 1 (default 20)");
        return EXIT_USAGE;
    }
    let opened = history::location(args.db.path.as_deref()).and_then(|p| history::open_read(&p));
    let h = match opened {
        Ok(h) => h,
        Err(e) => return fail(&e),
    };
    if let Some(run) = &args.document {
        return match h.document_text(run) {
            Ok((_, text)) => {
                out!("{text}");
                0
            }
            Err(e) => fail(&e),
        };
    }
    let suite = args.suite.as_deref();
    let (runs, total) = match h.list(args.limit, suite).and_then(|r| Ok((r, h.count(suite)?))) {
        Ok(x) => x,
        Err(e) => return fail(&e),
    };
    if args.json {
        let doc = serde_json::json!({ "history": h.path(), "total": total, "runs": runs });
        return match serde_json::to_string_pretty(&doc) {
            Ok(s) => {
                outln!("{s}");
                0
            }
            Err(e) => {
                eprintln!("error: {e}");
                1
            }
        };
    }
    if runs.is_empty() {
        let with = suite.map_or(String::new(), |s| format!(" with suite {s:?}"));
        outln!("no runs{with} recorded in {}: every `rtcell bench` and `rtcell run` records one", h.path().display());
        return 0;
    }
    outln!("{}", runs_table(&runs).render());
    outln!(
        "{} of {total} run(s){} in {}",
        runs.len(),
        suite.map_or(String::new(), |s| format!(" with suite {s:?}")),
        h.path().display()
    );
    0
}

fn runs_table(runs: &[RunSummary]) -> Table {
    let mut t = Table::new(&["started (UTC)", "id", "host", "suites", "headline (median)"]);
    for r in runs {
        // "2026-11-22T06:43:00.123Z" -> "2026-11-22 06:43:00".
        let time = r.started_at.get(..19).unwrap_or(&r.started_at).replacen('T', " ", 1);
        let host = match &r.hypervisor {
            Some(h) => format!("{} (VM: {h})", r.hostname),
            None => r.hostname.clone(),
        };
        let mut suites = r.suites.join(",");
        if r.incomplete {
            suites += " (incomplete)";
        }
        let headline = r.headline.iter().map(|h| h.text.as_str()).collect::<Vec<_>>().join("; ");
        // A history file may come from someone else: nothing of it reaches the terminal unescaped.
        let cell = |s: &str| rtcell_host::peer_text::printable_line(s, 256);
        t.row(vec![cell(&time), cell(&r.id), cell(&host), cell(&suites), cell(&headline)]);
    }
    t
}

/// `rtcell compare`.
pub fn compare_main(args: CompareArgs) -> i32 {
    let refs = match (RunRef::parse(&args.run_a), RunRef::parse(&args.run_b)) {
        (Ok(a), Ok(b)) => [a, b],
        (Err(e), _) | (_, Err(e)) => return fail(&e),
    };
    // Two files need no history: it is not even opened.
    let pair = if let [RunRef::Path(pa), RunRef::Path(pb)] = &refs {
        history::figures_of_file(pa).and_then(|a| Ok((a, history::figures_of_file(pb)?)))
    } else {
        history::location(args.db.path.as_deref())
            .and_then(|p| history::open_read(&p))
            .and_then(|h| Ok((h.figures(&args.run_a)?, h.figures(&args.run_b)?)))
    };
    let (a, b) = match pair {
        Ok(x) => x,
        Err(e) => return fail(&e),
    };
    let c = compare(a, b);
    if args.json {
        match serde_json::to_string_pretty(&c) {
            Ok(s) => outln!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return 1;
            }
        }
    } else {
        outln!("{}", c.render_text());
    }
    0
}
