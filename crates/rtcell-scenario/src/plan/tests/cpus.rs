//! The master's CPU and the utilisation check.

use super::*;

#[test]
fn the_master_takes_the_first_cpu_no_cell_takes() {
    let text = "duration_s = 1\n[cells.c]\nkind = \"thread\"\ncpu = 0\n[tasks.a]\ncell = \"c\"\nperiod_us = 1000\n\
                priority = 50\nworkload = { kind = \"spin\", us = 5 }\n";
    let plan = accepted(text);
    assert_eq!(plan.master_cpu, 1);
    let plan = accepted(&linux("", SPIN, ""));
    assert_eq!((plan.master_cpu, plan.tasks[0].spec.cpu), (0, 0));
}

#[test]
fn an_offline_master_cpu_is_refused() {
    let text = format!("master_cpu = 5\n{}", linux("", SPIN, ""));
    refusal(&text, "master_cpu", "master_cpu", "CPU 5 does not exist or is offline (online: 0-1)", "use one of 0-1");
}

#[test]
fn utilisation_up_to_100_percent_is_accepted() {
    let text = linux("", "{ kind = \"spin\", us = 600 }", "")
        + "[tasks.b]\ncell = \"linux\"\nperiod_us = 1000\npriority = 40\nworkload = { kind = \"spin\", us = 400 }\n";
    accepted(&text);
}

#[test]
fn utilisation_above_100_percent_names_the_busiest_task() {
    let text = linux("", "{ kind = \"spin\", us = 700 }", "")
        + "[tasks.b]\ncell = \"linux\"\nperiod_us = 1000\npriority = 40\nworkload = { kind = \"spin\", us = 500 }\n";
    refusal(
        &text,
        "tasks.a",
        "[tasks.a]",
        "CPU 0 would be 120% utilised (a 70%, b 50%)",
        "budget_us sets the assumed execution time",
    );
    // The budget, not the workload's estimate, is what counts.
    accepted(&text.replace("us = 700 }\n", "us = 700 }\nbudget_us = 100\n"));
}
