//! Prints this machine's host facts (as in results.json) and the `check` findings for a cell CPU.
//!
//! Usage: `cargo run -p rtcell-host --example host_check [CPU]` (default CPU 1).

use rtcell_host::{HostFacts, HostRoot, StealSampler, TscClock, check_cell_cpu, render_text};

fn main() {
    let cpu = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => 1,
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            eprintln!("usage: host_check [CPU]: {e}");
            std::process::exit(2);
        }
    };
    let steal = StealSampler::start();
    let tsc = match TscClock::calibrate() {
        Ok(c) => {
            println!(
                "TSC: {} kHz (windows {:.1} ppm apart; reference {:?})",
                c.khz(),
                c.spread_ppm().unwrap_or(f64::NAN),
                c.reference()
            );
            Some(c.khz())
        }
        Err(e) => {
            println!("TSC: {e}");
            None
        }
    };
    let mut facts = HostFacts::collect(tsc);
    facts.steal_pct = steal.finish();
    match serde_json::to_string_pretty(&facts) {
        Ok(json) => println!("{json}"),
        Err(e) => eprintln!("could not serialise host facts: {e}"),
    }
    print!("{}", render_text(&check_cell_cpu(&HostRoot::system(), cpu)));
}
