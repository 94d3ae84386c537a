//! `rtcell ecat-sim`: a simulated EtherCAT segment on a veth pair (made here, optionally across a
//! network namespace) or on a named interface, answering until Ctrl-C.
//!
//! Exit status: 0 after Ctrl-C or the --duration; 2 bad options; 1 the interface or socket could not be
//! had (not root, no such interface).

use std::time::{Duration, Instant};

use clap::Args;
use rtcell_ecat::net::Veth;
use rtcell_ecat::sim::{Faults, Running};

use super::{EXIT_USAGE, install_ctrlc};

pub const ECAT_SIM_HELP: &str = "Examples:
  rtcell ecat-sim --veth rtec                # makes rtec-m (the master's end) and rtec-s, 3 devices
  rtcell ecat-sim --veth rtec --netns --devices 8
  rtcell ecat-sim --interface eth1 --devices 2
  rtcell ecat-sim --veth rtec --drop-after 100000   # the segment disappears after 100,000 frames
  rtcell ecat-sim --veth rtec --late-every 1000 --late-by-us 2000 --wrong-wkc-every 5000
                                             # faults a master must ride out: late replies, a device
                                             # that misses a cycle

Each simulated SubDevice is an I/O terminal described in its EEPROM (vendor 0x00000e1c, product
0x52544331, order number RTC-SIM-IO): 16 digital outputs (2 bytes, SyncManager 0) echoed to 16 digital
inputs, and an analog input carrying a 1 kHz ramp 0..32767 (4 bytes of inputs, SyncManager 1); no
mailbox, no distributed clocks. A master brings them to OP and exchanges their process data like real
ones; returned frames carry the source address with bit 1 set, as an ESC sends them.

Needs root (CAP_NET_ADMIN for the veth pair, CAP_NET_RAW for the raw socket).";

#[derive(Args)]
pub struct EcatSimArgs {
    /// Make a veth pair NAME-m (for the master) and NAME-s (for the segment), removed at the end.
    #[arg(long, value_name = "NAME", conflicts_with = "interface")]
    veth: Option<String>,
    /// With --veth: put the segment's end in a network namespace NAME-ns of its own.
    #[arg(long, requires = "veth")]
    netns: bool,
    /// Answer on this existing interface instead.
    #[arg(long, value_name = "IF")]
    interface: Option<String>,
    /// SubDevices on the segment (1 to 64).
    #[arg(long, default_value_t = 3)]
    devices: u16,
    /// Disappear (stop answering) after this many frames: a segment lost mid-run.
    #[arg(long, value_name = "FRAMES")]
    drop_after: Option<u64>,
    /// Hold back every Nth process-data reply by --late-by-us (a reply that misses its cycle).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    late_every: Option<u64>,
    /// How long --late-every holds a reply back, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 2000, requires = "late_every")]
    late_by_us: u64,
    /// Return every Nth process-data reply with its working counter one short (a device that did not
    /// process it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    wrong_wkc_every: Option<u64>,
    /// Stop after this long (default: until Ctrl-C).
    #[arg(long)]
    duration: Option<String>,
}

pub fn main(a: EcatSimArgs) -> i32 {
    if !(1..=64).contains(&a.devices) {
        eprintln!("error: --devices must be 1 to 64");
        return EXIT_USAGE;
    }
    let duration = match a.duration.as_deref().map(rtcell_scenario::parse_duration).transpose() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: --duration {e}");
            return EXIT_USAGE;
        }
    };
    let (veth, iface, netns) = match (&a.veth, &a.interface) {
        (Some(name), None) => match Veth::create(name, a.netns) {
            Ok(v) => {
                let (s, ns) = (v.segment.clone(), v.netns.clone());
                (Some(v), s, ns)
            }
            Err(e) => {
                eprintln!("error: veth pair {name}: {e} (needs root; an existing pair: ip link del {name}-m)");
                return 1;
            }
        },
        (None, Some(i)) => (None, i.clone(), None),
        _ => {
            eprintln!("error: give --veth NAME (a pair made here) or --interface IF (an existing one)");
            return EXIT_USAGE;
        }
    };
    install_ctrlc();
    let faults = Faults {
        drop_after: a.drop_after,
        late_every: a.late_every,
        late_by: Duration::from_micros(a.late_by_us),
        wrong_wkc_every: a.wrong_wkc_every,
    };
    let sim = match Running::start(&iface, netns.as_deref(), a.devices, faults, None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    match &veth {
        Some(v) => eprintln!(
            "ecat-sim: {} device(s) answering on {}{}; point the master at {}",
            a.devices,
            v.segment,
            v.netns.as_deref().map_or(String::new(), |n| format!(" (namespace {n})")),
            v.master
        ),
        None => eprintln!("ecat-sim: {} device(s) answering on {iface}", a.devices),
    }
    let t0 = Instant::now();
    while !rtcell_host::stop::stop_requested() && duration.is_none_or(|d| t0.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let code = match sim.stop() {
        Ok(c) => {
            outln!(
                "ecat-sim: {} frames answered ({} datagrams), {} refused as malformed, {} swallowed after the drop-out, {} replies the interface refused",
                c.frames,
                c.datagrams,
                c.refused,
                c.dropped,
                c.send_failed
            );
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    };
    drop(veth);
    code
}
