//! Rings: name, capacity, frame size, and their endpoints.

use super::*;

const RING: &str = "[channels.r]\ncapacity = 64\nframe_bytes = 64\n";

fn receiver() -> &'static str {
    "[tasks.b]\ncell = \"linux\"\nperiod_us = 1000\npriority = 40\nrecv = \"r\"\nworkload = { kind = \"spin\", us = 5 }\n"
}

#[test]
fn a_ring_with_a_sender_and_a_receiver_is_accepted() {
    let plan = accepted(&linux("send = \"r\"\n", SPIN, &format!("{RING}{}", receiver())));
    let ch = &plan.channels[0];
    assert_eq!((ch.name.as_str(), ch.frames, ch.frame_bytes, ch.sink), ("r", 64, 64, false));
    assert_eq!(plan.tasks[0].spec.frame_bytes, 64);
}

#[test]
fn a_ring_nobody_receives_from_is_a_sink() {
    let plan = accepted(&linux("send = \"r\"\n", SPIN, RING));
    assert!(plan.channels[0].sink);
}

#[test]
fn capacity_and_frame_size_have_limits() {
    let text = linux("send = \"r\"\n", SPIN, "[channels.r]\ncapacity = 0\nframe_bytes = 8\n");
    refusal(&text, "channels.r.capacity", "capacity", "capacity must be 1 to 65536 frames", "capacity = 256");
    refusal(&text, "channels.r.frame_bytes", "frame_bytes", "frame_bytes must be 24 to 65536", "frame_bytes = 64");
}

#[test]
fn a_reserved_ring_name_is_refused() {
    let text = linux("send = \"sched\"\n", SPIN, "[channels.sched]\ncapacity = 64\nframe_bytes = 64\n");
    refusal(&text, "channels.sched", "[channels.sched]", "is reserved", "rename the channel");
}

#[test]
fn a_ring_and_a_signal_of_one_name_are_refused() {
    let text = linux("send = \"r\"\n", SPIN, &format!("{RING}[signals.r]\nvalues = 1\n"));
    refusal(&text, "channels.r", "[channels.r]", "\"r\" is both a channel and a signal", "different names");
}

#[test]
fn a_ring_nobody_sends_on_is_refused() {
    refusal(&linux("", SPIN, RING), "channels.r", "[channels.r]", "nobody sends on this channel", "send = \"r\"");
}

#[test]
fn two_senders_are_refused_at_the_second() {
    let second = receiver().replace("recv", "send").replace("tasks.b", "tasks.z");
    let text = linux("send = \"r\"\n", SPIN, &format!("{RING}{second}"));
    let at = text.lines().enumerate().filter(|(_, l)| l.contains("send = \"r\"")).nth(1).map(|(i, _)| i + 1);
    let d = refused_on(&text, &host(), &Origin::Operator);
    let d = d.iter().find(|d| d.path == "tasks.z.send").unwrap_or_else(|| panic!("{d:?}"));
    assert_eq!(d.line, at);
    assert_eq!(d.message, "task \"a\" and task \"z\" send on channel \"r\": a ring has one producer and one consumer");
    assert_eq!(d.fix, "give each its own channel");
}

#[test]
fn sending_on_an_undeclared_ring_is_refused() {
    refusal(
        &linux("send = \"q\"\n", SPIN, ""),
        "tasks.a.send",
        "send",
        "no channel named \"q\"",
        "[channels.q] capacity",
    );
}
