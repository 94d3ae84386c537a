//! The EtherCAT segment.

use super::*;
use crate::plan::PlanEthercat;

const MASTER: &str = "{ kind = \"ethercat\" }";

#[test]
fn a_simulated_segment_and_a_real_interface_are_accepted() {
    let sim =
        linux("output = \"io\"\n", MASTER, "[ethercat]\nsimulated = 3\ndrop_after = 50\n[signals.io]\nvalues = 6\n");
    let plan = accepted(&sim);
    assert_eq!(plan.ethercat, Some(PlanEthercat::Simulated { devices: 3, drop_after: Some(50) }));
    let real = linux("output = \"io\"\n", MASTER, "[ethercat]\ninterface = \"eth1\"\n[signals.io]\nvalues = 2\n");
    assert_eq!(accepted(&real).ethercat, Some(PlanEthercat::Interface("eth1".into())));
}

#[test]
fn a_segment_is_an_interface_or_simulated_not_both_or_neither() {
    let both = linux(
        "output = \"io\"\n",
        MASTER,
        "[ethercat]\ninterface = \"eth1\"\nsimulated = 2\n[signals.io]\nvalues = 4\n",
    );
    refusal(&both, "ethercat", "[ethercat]", "not both or neither", "simulated = 3");
    let neither = linux("output = \"io\"\n", MASTER, "[ethercat]\n[signals.io]\nvalues = 2\n");
    refusal(&neither, "ethercat", "[ethercat]", "not both or neither", "simulated = 3");
}

#[test]
fn a_simulated_segment_has_1_to_16_devices() {
    let text = linux("output = \"io\"\n", MASTER, "[ethercat]\nsimulated = 17\n[signals.io]\nvalues = 34\n");
    refusal(&text, "ethercat.simulated", "simulated", "a simulated segment has 1 to 16 devices", "simulated = 3");
}

#[test]
fn drop_after_is_for_a_simulated_segment() {
    let text = linux(
        "output = \"io\"\n",
        MASTER,
        "[ethercat]\ninterface = \"eth1\"\ndrop_after = 5\n[signals.io]\nvalues = 2\n",
    );
    refusal(&text, "ethercat.drop_after", "drop_after", "drop_after is for a simulated segment", "simulated = N");
}
