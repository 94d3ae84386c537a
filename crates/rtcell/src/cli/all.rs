//! `rtcell bench` with no suite: a selection of every suite, written as the command lines a user could
//! type, checked all together before anything starts, run one after the other into one run directory,
//! with a progress bar and an ETA.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Parser};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{Suite, Usage, default_out, execute, plan_suite};

pub const AFTER_HELP: &str = "\
Examples:
  rtcell bench                      # every suite, quick (about 2 minutes on 2 CPUs)
  rtcell bench --full               # the seed-sized configuration (about an hour)
  rtcell bench --out run1           # then: rtcell report run1/results.json, rtcell compare latest~1 latest
  rtcell bench loopback --quick     # one suite (rtcell bench SUITE --help)

With no suite, the run directory holds results.json, report.html, csv/ (a CSV per series and
summary.csv), the latency suite's cyclictest-format histograms (latency-*.hist, *.json) and plot.gp
(gnuplot plot.gp draws every histogram). The selection is printed before the run starts: each line is
an `rtcell bench` command you can run on its own.

Exit status: 0 done; 1 a suite failed or found wrong payloads (what ran is written); 2 bad input
(nothing started); 130 Ctrl-C (what was measured is written, marked incomplete).";

/// Options of the default run (no suite named).
#[derive(Args, Clone, Default)]
pub struct AllArgs {
    /// The long, seed-sized configuration: 1,000,000 iterations, 10-minute latency runs (about an hour).
    #[arg(long)]
    pub full: bool,
    /// The run directory (default: rtcell-results/<timestamp>-bench/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub history: super::history::HistoryDb,
}

/// One suite of the selection: its command line (after `rtcell bench`) and a time estimate in seconds.
struct Step {
    args: Vec<String>,
    estimate_s: f64,
}

fn step(args: &str, estimate_s: f64) -> Step {
    Step { args: args.split_whitespace().map(str::to_owned).collect(), estimate_s }
}

/// The selection. Quick: at most 3 minutes on a 2-CPU machine; each suite small but complete (every
/// cell kind, every latency mode, every precision).
fn selection(full: bool, cyclictest: bool) -> Vec<Step> {
    let vs = if cyclictest { " --vs cyclictest" } else { "" };
    if full {
        vec![
            step("c2c", 10.0),
            step("loopback", 900.0),
            step(&format!("latency --duration 10m{vs}"), if cyclictest { 2400.0 } else { 1800.0 }),
            step("control", 90.0),
            step("itc", 600.0),
            step("membench", 40.0),
        ]
    } else {
        vec![
            step("c2c --quick", 1.0),
            step("loopback --quick --sizes 0,64,1024", 10.0),
            step(&format!("latency --quick --duration 15s{vs}"), if cyclictest { 62.0 } else { 47.0 }),
            step("control --quick", 4.0),
            step(
                "itc --quick --mechanism pipe,mqueue,futex,eventfd,unix-stream,ring-futex,ring-poll --sizes 4,3072 \
                 --trigger back-to-back",
                3.0,
            ),
            step("membench --quick", 6.0),
        ]
    }
}

/// Parses one line of the selection as `rtcell bench` would.
#[derive(Parser)]
#[command(no_binary_name = true)]
struct OneSuite {
    #[command(subcommand)]
    suite: Suite,
}

pub fn main(a: AllArgs, mut pre_warnings: Vec<String>) -> Result<i32, Usage> {
    let out = a.out.clone().unwrap_or_else(|| default_out("bench"));
    if out.join(rtcell_report::doc::RESULTS_FILE).exists() {
        return Err(Usage(format!(
            "--out {}: it already holds a results.json; pick another directory or remove it",
            out.display()
        )));
    }
    let cyclictest = match rtcell_bench::latency::cyclictest::find() {
        Ok(_) => true,
        Err(e) => {
            pre_warnings.push(format!("latency runs without cyclictest beside it: {e}"));
            false
        }
    };
    let steps = selection(a.full, cyclictest);
    // Check every suite before the first starts.
    let mut plans = Vec::new();
    for s in &steps {
        let mut args = s.args.clone();
        args.extend(["--out".to_string(), out.display().to_string()]);
        let one = OneSuite::try_parse_from(&args).map_err(|e| {
            Usage(format!("the default selection `rtcell bench {}` does not parse: {e}", s.args.join(" ")))
        })?;
        let (name, _, plan) = plan_suite(one.suite, &mut pre_warnings)?;
        plans.push((name, plan));
    }
    let total: f64 = steps.iter().map(|s| s.estimate_s).sum();
    eprintln!(
        "rtcell bench{}: {} suites, about {} in all, into {}",
        if a.full { " --full" } else { "" },
        steps.len(),
        human(total),
        out.display()
    );
    for (i, s) in steps.iter().enumerate() {
        eprintln!("  {}/{}  rtcell bench {}   (about {})", i + 1, steps.len(), s.args.join(" "), human(s.estimate_s));
    }
    let mut progress = Progress::new(steps.iter().map(|s| (s.args[0].clone(), s.estimate_s)).collect());
    execute(plans, &out, a.history.path.as_deref(), pre_warnings, Some(&mut progress))
}

fn human(s: f64) -> String {
    if s < 90.0 { format!("{s:.0} s") } else { format!("{:.0} min", s / 60.0) }
}

/// The default run's progress: one bar over the estimated seconds of every suite, advanced by a ticker
/// while a suite runs (suites do not report fractions), with the suites' own progress lines printed
/// above it. Without a terminal on standard error, one line per suite instead.
pub struct Progress {
    steps: Vec<(String, f64)>,
    bar: Option<ProgressBar>,
    started: Option<Instant>,
    ticker: Option<(std::sync::Arc<std::sync::atomic::AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl Progress {
    fn new(steps: Vec<(String, f64)>) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let total: f64 = steps.iter().map(|s| s.1).sum();
            let bar = ProgressBar::with_draw_target(Some(total.ceil() as u64), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} ETA {eta:>4}  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            let printer = bar.clone();
            rtcell_report::progress::set_sink(Some(Box::new(move |line: &str| printer.println(line))));
            bar
        });
        Progress { steps, bar, started: None, ticker: None }
    }

    fn done_before(&self, i: usize) -> f64 {
        self.steps[..i].iter().map(|s| s.1).sum()
    }

    /// Suite `i` starts.
    pub fn start(&mut self, i: usize) {
        let (name, est) = self.steps[i].clone();
        let n = self.steps.len();
        self.started = Some(Instant::now());
        match &self.bar {
            Some(bar) => {
                bar.set_message(format!("{}/{n} {name}", i + 1));
                let base = self.done_before(i);
                bar.set_position(base as u64);
                let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let (bar, flag) = (bar.clone(), stop.clone());
                let t0 = Instant::now();
                // Moves the bar through this suite's estimate; a suite that takes longer stalls at 95%.
                let h = std::thread::spawn(move || {
                    while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                        let p = t0.elapsed().as_secs_f64().min(est * 0.95);
                        bar.set_position((base + p) as u64);
                        std::thread::sleep(Duration::from_millis(250));
                    }
                });
                self.ticker = Some((stop, h));
            }
            None => {
                let left: f64 = self.steps[i..].iter().map(|s| s.1).sum();
                eprintln!(
                    "[{}/{n}] {name}: about {} (ETA for the rest of the run: {})",
                    i + 1,
                    human(est),
                    human(left)
                );
            }
        }
    }

    /// Suite `i` ended.
    pub fn done(&mut self, i: usize) {
        if let Some((stop, h)) = self.ticker.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = h.join();
        }
        let took = self.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let line = format!("{} done in {took:.1} s", self.steps[i].0);
        match &self.bar {
            Some(bar) => {
                bar.set_position(self.done_before(i + 1) as u64);
                bar.println(line);
            }
            None => eprintln!("{line}"),
        }
    }

    /// The run ended: the bar goes, progress lines go back to standard error.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        rtcell_report::progress::set_sink(None);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((stop, h)) = self.ticker.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = h.join();
        }
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_both_selections_parses() {
        for full in [false, true] {
            for cyclictest in [false, true] {
                for s in selection(full, cyclictest) {
                    OneSuite::try_parse_from(&s.args).unwrap_or_else(|e| panic!("{:?}: {e}", s.args));
                }
            }
        }
    }
}
