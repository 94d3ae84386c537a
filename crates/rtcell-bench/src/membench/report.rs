//! The membench report text: one curve per pattern and interference, the plateaus, and the ratios.

use super::*;

pub(super) fn report_text(cfg: &MembenchConfig, ctx: &Context, curves: &[Curve]) -> String {
    let mut out = String::new();
    conditions(cfg, ctx, &mut out);
    let slowdowns: Vec<(&Curve, &Curve)> = curves
        .iter()
        .filter(|c| c.interferers > 0)
        .filter_map(|c| curves.iter().find(|b| b.interferers == 0 && b.pattern == c.pattern).map(|b| (c, b)))
        .collect();
    table(cfg, ctx, curves, &slowdowns, &mut out);
    plateaus(curves, &mut out);
    interference(ctx, &slowdowns, &mut out);
    out
}

/// What the figures are and under which conditions: the method, the cell CPU, the load, the caches.
fn conditions(cfg: &MembenchConfig, ctx: &Context, out: &mut String) {
    let cpus = |c: &[usize]| rtcell_host::cpu::format_cpu_list(c);
    out.push_str(&format!(
        "\nMembench (seed 004 Fig. 5): read latency against working-set size, ns per read, median of each working \
         set's samples (a sample times {BATCH} dependent reads with the TSC)\n"
    ));
    out.push_str(&format!(
        "  cell CPU {}: {}, pinned, memory locked; load {}; Ni = N memcpy interferers (a {} MiB memcpy loop each) \
         on CPU {}\n",
        cfg.cpu,
        cfg.priority.map_or("normal policy".to_string(), |p| format!("SCHED_FIFO {p}")),
        cfg.load.as_str(),
        MEMCPY_BUFFER >> 20,
        if cfg.interferer_cpus.is_empty() { "-".to_string() } else { cpus(&cfg.interferer_cpus) },
    ));
    out.push_str(
        "  seq = pointer chase through the 64-byte lines in address order (the prefetcher runs ahead of it); \
         random = through the lines in a random cyclic order (no prefetcher can guess it)\n",
    );
    out.push_str(&format!("  {}\n", ctx.huge.describe()));
    if !ctx.caches.is_empty() {
        let list: Vec<String> = ctx
            .caches
            .iter()
            .map(|c| {
                let shared = if c.shared_with.len() > 1 {
                    format!(" (shared by CPUs {})", cpus(&c.shared_with))
                } else {
                    String::new()
                };
                format!("{} {}{shared}", c.name(), fmt_bytes(c.size_bytes as usize))
            })
            .collect();
        out.push_str(&format!(
            "  caches of CPU {} (/sys/devices/system/cpu/cpu{}/cache): {}\n",
            cfg.cpu,
            cfg.cpu,
            list.join(", ")
        ));
    }
}

/// The table: one row per working set; per curve its median and plateau; slowdowns under interference.
fn table(cfg: &MembenchConfig, ctx: &Context, curves: &[Curve], slowdowns: &[(&Curve, &Curve)], out: &mut String) {
    let mut headers = vec!["working set".to_string(), "fits in".to_string()];
    for c in curves {
        headers.push(format!("{} {}i ns", c.pattern.as_str(), c.interferers));
        headers.push("plateau".to_string());
    }
    for (c, _) in slowdowns {
        headers.push(format!("{} {}i/0i", c.pattern.as_str(), c.interferers));
    }
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new(&header_refs);
    for &bytes in &cfg.sizes {
        if curves.iter().all(|c| c.median_at(bytes).is_none()) {
            continue;
        }
        let mut row = vec![fmt_bytes(bytes), level_holding(&ctx.caches, bytes as u64)];
        for c in curves {
            row.push(c.median_at(bytes).map_or("-".into(), |m| format!("{m:.2}")));
            row.push(c.label_at(bytes).unwrap_or("-").to_string());
        }
        for (c, base) in slowdowns {
            row.push(match (c.median_at(bytes), base.median_at(bytes)) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "-".into(),
            });
        }
        t.row(row);
    }
    t.right_align(0);
    out.push_str(&t.render());
    out.push('\n');
}

/// The plateaus found on each curve and the steps between them.
fn plateaus(curves: &[Curve], out: &mut String) {
    out.push_str(&format!(
        "Plateaus (latency flat within {:.0}% over at least an octave; named after the smallest cache holding \
         their working sets, from sysfs):\n",
        plateau::TOLERANCE * 100.0
    ));
    for c in curves {
        let found: Vec<String> = c
            .plateaus
            .iter()
            .map(|p| {
                format!(
                    "{} {}..{} at {:.2} ns",
                    p.label,
                    fmt_bytes(c.points[p.first].bytes),
                    fmt_bytes(c.points[p.last].bytes),
                    p.ns
                )
            })
            .collect();
        let steps: Vec<String> = c
            .plateaus
            .windows(2)
            .map(|w| {
                format!(
                    "{} -> {} x{:.1}",
                    fmt_bytes(c.points[w[0].last].bytes),
                    fmt_bytes(c.points[w[1].first].bytes),
                    w[1].ns / w[0].ns
                )
            })
            .collect();
        out.push_str(&format!(
            "  {}: {}{}\n",
            c.name(),
            if found.is_empty() { "none found".to_string() } else { found.join("; ") },
            if steps.is_empty() { String::new() } else { format!("; steps {}", steps.join(", ")) }
        ));
    }

    let repeated = curves.iter().find_map(|c| {
        c.plateaus.windows(2).find(|w| w[0].label == w[1].label).map(|w| (&w[0].label, w[0].ns, w[1].ns))
    });
    if let Some((label, a, b)) = repeated {
        out.push_str(&format!(
            "  note: two plateaus within the size of {label} ({a:.1} ns, then {b:.1} ns): less of it serves this \
             CPU than sysfs says (shared with other cores, or with other virtual machines on this host)\n"
        ));
    }
}

/// The worst slowdown per curve under interference, what the interferers copied, and seed 004's figures
/// (another platform).
fn interference(ctx: &Context, slowdowns: &[(&Curve, &Curve)], out: &mut String) {
    if !slowdowns.is_empty() {
        out.push_str("Interference (median with N interferers / median without, same working set):\n");
        for (c, base) in slowdowns {
            let worst = c
                .points
                .iter()
                .filter_map(|p| Some((p.bytes, c.median_at(p.bytes)? / base.median_at(p.bytes)?)))
                .filter(|(_, r)| r.is_finite())
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((bytes, r)) = worst {
                out.push_str(&format!("  {}: worst x{r:.2} at {}\n", c.name(), fmt_bytes(bytes)));
            }
        }
        let rates: Vec<String> = ctx
            .interferer_rates
            .iter()
            .map(|(k, r)| format!("{} copied {:.2} GB/s", interferers(*k), r / 1e9))
            .collect();
        out.push_str(&format!("  while measuring: {}\n", rates.join(", ")));
        out.push_str(
            "  seed 004 (Xen on an Intel i5-6440EQ, 3 memcpy interferers in other VMs): worst x7 sequential, \
             x11 random, between 1 and 6 MiB\n",
        );
    }
}
