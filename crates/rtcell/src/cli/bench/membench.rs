//! `rtcell bench membench`: its options, checked whole before anything starts.

use clap::Args;
use rtcell_bench::membench::{self, MembenchConfig, Pattern, parse_size, sweep};
use rtcell_loads::{LOAD_HELP, Load};

use super::{Common, Plan, Usage, check_cpu, online, usage};

pub const AFTER_HELP: &str = "Examples:
  rtcell bench membench --quick
  rtcell bench membench --pattern random --sizes 16K,256K,4M,64M
  rtcell bench membench --min 4K --max 32M --per-octave 2 --load stress-ng --out mb-run

Sizes take K, M or G suffixes (powers of 1024). --interferers 0,N measures every curve
without and with a memcpy interferer on each CPU but the cell's (N = all of them). Each
figure is the median time of one read, in ns, over samples of 4096 dependent reads;
plateaus are named after the caches sysfs lists.";

#[derive(Args, Clone)]
pub struct MembenchArgs {
    /// The cell CPU the reads run on (default: the last online CPU).
    #[arg(long)]
    cpu: Option<usize>,
    /// Working-set sizes, e.g. 4K,32K,1M,64M (default: --min to --max in log steps).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["min", "max", "per_octave"])]
    sizes: Option<Vec<String>>,
    /// Smallest working set of the sweep.
    #[arg(long, default_value = "1K")]
    min: String,
    /// Largest working set of the sweep (at most 1G).
    #[arg(long, default_value = "96M")]
    max: String,
    /// Sizes per doubling of the sweep (default 4; --quick 1).
    #[arg(long)]
    per_octave: Option<u32>,
    /// Read orders: seq (address order) and random.
    #[arg(long, value_delimiter = ',', default_value = "seq,random")]
    pattern: Vec<String>,
    /// Memcpy interferer counts to measure with: numbers, or N for every CPU but the cell's.
    #[arg(long, value_delimiter = ',', default_value = "0,N")]
    interferers: Vec<String>,
    /// Timed reads per working set at least; a larger set is read whole (default 4,000,000; --quick
    /// 1,000,000).
    #[arg(long)]
    accesses: Option<u64>,
    #[arg(long, default_value = "none", help = LOAD_HELP)]
    load: String,
    #[command(flatten)]
    common: Common,
}

/// The suite's name, common options and plan, or what is wrong with the options.
pub fn plan(a: MembenchArgs) -> Result<(&'static str, Common, Plan), Usage> {
    let online = online();
    let cpu = match a.cpu {
        Some(c) => check_cpu(c, "cell (--cpu)", &online)?,
        None => *online.last().unwrap_or(&0),
    };
    let others: Vec<usize> = online.iter().copied().filter(|&c| c != cpu).collect();

    let mut sizes = match &a.sizes {
        Some(list) => {
            let mut v = Vec::new();
            for s in list {
                v.push(parse_size(s).map_err(|e| Usage(format!("--sizes: {e}")))?);
            }
            v
        }
        None => {
            let min = parse_size(&a.min).map_err(|e| Usage(format!("--min: {e}")))?;
            let max = parse_size(&a.max).map_err(|e| Usage(format!("--max: {e}")))?;
            if min > max {
                return usage(format!("--min {} is above --max {}: give the smaller size to --min", a.min, a.max));
            }
            let per_octave = a.per_octave.unwrap_or(if a.common.quick {
                membench::QUICK_PER_OCTAVE
            } else {
                membench::DEFAULT_PER_OCTAVE
            });
            if !(1..=16).contains(&per_octave) {
                return usage(format!("--per-octave {per_octave}: give 1 to 16 sizes per doubling"));
            }
            sweep(min, max, per_octave)
        }
    };
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() {
        return usage("--sizes is empty: give at least one working-set size, e.g. --sizes 32K");
    }

    let mut patterns = Vec::new();
    for p in &a.pattern {
        let p: Pattern = p.parse().map_err(|e| Usage(format!("--pattern: {e}")))?;
        if !patterns.contains(&p) {
            patterns.push(p);
        }
    }

    let mut interferers = Vec::new();
    for i in &a.interferers {
        let k = match i.as_str() {
            "N" | "n" | "all" => others.len(),
            s => s.parse::<usize>().map_err(|_| {
                Usage(format!(
                    "--interferers {s:?}: give interferer counts such as 0,1 or N (every CPU but the cell's)"
                ))
            })?,
        };
        if k > others.len() {
            return usage(format!(
                "--interferers {k}: this machine has {} CPU(s) besides the cell's ({}); use 0 to {} or N",
                others.len(),
                rtcell_host::cpu::format_cpu_list(&others),
                others.len()
            ));
        }
        if !interferers.contains(&k) {
            interferers.push(k);
        }
    }
    interferers.sort_unstable();

    let min_accesses =
        a.accesses.unwrap_or(if a.common.quick { membench::QUICK_ACCESSES } else { membench::DEFAULT_ACCESSES });
    if min_accesses == 0 {
        return usage("--accesses 0: give at least 1 timed read per working set");
    }
    let load: Load = a.load.parse().map_err(|e| Usage(format!("--load: {e}")))?;
    let cfg = MembenchConfig {
        cpu,
        sizes,
        patterns,
        interferers,
        interferer_cpus: others,
        load,
        min_accesses,
        priority: Some(90),
        seed: 0x5eed_0000_0000_0004,
    };
    Ok(("membench", a.common, Plan::Membench(cfg)))
}
