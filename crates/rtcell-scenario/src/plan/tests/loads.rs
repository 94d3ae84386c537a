//! Background loads of the Linux side.

use super::*;

#[test]
fn a_load_without_cpus_takes_every_cpu_no_cell_takes() {
    let four = HostView { online: vec![0, 1, 2, 3], ..host() };
    let text = in_cell("thread", "", SPIN, "[[loads]]\nkind = \"none\"\n");
    let plan = validate_on(&text, &four, &Origin::Operator).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.loads[0].cpus, [0, 2, 3]);
    assert_eq!(plan.loads[0].kind, rtcell_loads::Load::None);
}

#[test]
fn a_load_on_a_cells_cpu_is_refused() {
    let text = in_cell("thread", "", SPIN, "[[loads]]\nkind = \"none\"\ncpus = [1]\n");
    refusal(&text, "loads[0].cpus", "cpus = [1]", "CPU 1 belongs to a cell", "leave cpus out");
}

#[test]
fn a_load_on_an_offline_cpu_is_refused() {
    let text = linux("", SPIN, "[[loads]]\nkind = \"none\"\ncpus = [9]\n");
    refusal(
        &text,
        "loads[0].cpus",
        "cpus = [9]",
        "CPU 9 does not exist or is offline (online: 0-1)",
        "use CPUs of 0-1",
    );
}

#[test]
fn an_unknown_load_is_refused() {
    let text = linux("", SPIN, "[[loads]]\nkind = \"fire\"\n");
    refusal(&text, "loads[0].kind", "kind = \"fire\"", "unknown load \"fire\"", "kind = \"memcpy\"");
}
