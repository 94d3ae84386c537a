//! The workloads of one cycle, prepared once (channels attached, busy loop calibrated, file opened)
//! before the task reports ready, so the cycle itself only computes and touches shared memory.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;

use rtcell_control::offload::{Precision, Reply, Request};
use rtcell_host::tsc::rdtsc_ordered;
use rtcell_shm::{Consumer, Producer, RecvError, RegionView, SendError, SignalError, SignalView};

use crate::chan::{RingEnd, Sig, consumer, producer, read_sig, write_sig};
use crate::corrupt::{Scribbler, StepError, signal_corrupt};
use crate::dynamics::{DOF, GRAVITY, PUMA560, inverse_dynamics, quintic};
use crate::spec::{COMMAND_VALUES, Inject, SETPOINT_VALUES, TORQUE_VALUES, TaskSpec, TaskWork};
use crate::stats::{StatsWriter, read_counters, read_histogram};
use rtcell_host::clock::mono_ns;

/// Most f64 values a signal written or read by a task may hold.
pub const MAX_SIGNAL_VALUES: usize = 64;

/// Writes `values` (little-endian f64) to `sig`.
pub fn write_f64s(sig: &SignalView<'_>, values: &[f64]) -> Result<(), String> {
    try_write_f64s(sig, values).map_err(|e| format!("signal write: {e:?}"))
}

/// `write_f64s` with the signal's own error.
pub fn try_write_f64s(sig: &SignalView<'_>, values: &[f64]) -> Result<(), SignalError> {
    let n = values.len().min(MAX_SIGNAL_VALUES);
    let mut buf = [0u8; MAX_SIGNAL_VALUES * 8];
    for (chunk, v) in buf.chunks_exact_mut(8).zip(&values[..n]) {
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    sig.write(&buf[..n * 8])
}

/// Reads up to `out.len()` f64 values from `sig`; returns how many it held (0 if never written).
pub fn read_f64s(sig: &SignalView<'_>, out: &mut [f64]) -> Result<usize, String> {
    try_read_f64s(sig, out).map_err(|e| format!("signal read: {e:?}"))
}

/// `read_f64s` with the signal's own error, for callers that retry on `Busy`.
pub fn try_read_f64s(sig: &SignalView<'_>, out: &mut [f64]) -> Result<usize, SignalError> {
    let mut buf = [0u8; MAX_SIGNAL_VALUES * 8];
    let mut seen = 0u64;
    let (len, _) = sig.read(&mut buf, &mut seen)?;
    let n = (len / 8).min(out.len());
    for (slot, chunk) in out.iter_mut().zip(buf[..n * 8].chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *slot = f64::from_le_bytes(b);
    }
    Ok(n)
}

/// The calibrated busy loop: a dependent chain of integer operations the compiler cannot drop.
#[inline(never)]
pub fn busy(iterations: u64) -> u64 {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..iterations {
        x = (x.rotate_left(7) ^ i).wrapping_mul(0x2545_f491_4f6c_dd1d);
    }
    std::hint::black_box(x)
}

/// Busy-loop iterations per microsecond on this CPU, from the fastest of several short timed runs
/// (the fastest is the one nothing preempted).
pub fn calibrate_busy(ns_per_tick: f64) -> f64 {
    const N: u64 = 20_000;
    let mut best = u64::MAX;
    for _ in 0..40 {
        let t0 = rdtsc_ordered();
        busy(N);
        let t1 = rdtsc_ordered();
        best = best.min(t1.wrapping_sub(t0).max(1));
    }
    let ns = best as f64 * ns_per_tick;
    if ns > 0.0 { N as f64 * 1000.0 / ns } else { 1000.0 }
}

/// Opens a log task's file for writing: never through a symbolic link, never created here (the run made
/// it new inside its results directory), and, when the run said which file that was, only that one (a
/// parent directory swapped in between cannot redirect the log; nothing is truncated or written first).
fn open_log(file: &str, created: Option<(u64, u64)>) -> Result<File, String> {
    use std::os::unix::fs::MetadataExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(file)
        .map_err(|e| format!("log file {file}: {e}"))?;
    if let Some((dev, ino)) = created {
        let m = f.metadata().map_err(|e| format!("log file {file}: {e}"))?;
        if (m.dev(), m.ino()) != (dev, ino) {
            return Err(format!(
                "log file {file}: it is no longer the file this run created (a directory on its path was replaced); nothing was written"
            ));
        }
    }
    Ok(f)
}

fn signal<'a>(region: &RegionView<'a>, name: &str) -> Result<Sig<'a>, String> {
    let view = region.signal(name).map_err(|e| format!("signal {name:?}: {e}"))?;
    Ok(Sig::new(name, view))
}

/// A cycle's body with everything it needs.
pub enum Body<'a> {
    Spin { iters_per_us: f64, us: f64, inject: Option<Inject>, out: Option<Sig<'a>> },
    Trajectory { from: f64, to: f64, move_s: f64, out: Sig<'a> },
    InverseDynamics { setpoint: Sig<'a>, out: Sig<'a> },
    Drive { setpoint: Sig<'a>, torque: Sig<'a>, out: Sig<'a>, iters: u64 },
    Log(Box<LogBody<'a>>),
    Master(Box<MasterBody<'a>>),
    C(Box<crate::cwork::CLibrary>),
    ComMaster(Box<crate::cwork::ComMasterBody<'a>>),
    Ethercat(Box<EcatBody<'a>>),
    Scribble(Box<Scribbler<'a>>),
}

/// The EtherCAT master's cycle, with its segment in OP.
pub struct EcatBody<'a> {
    master: rtcell_ecat::master::Master,
    outputs: Option<SignalView<'a>>,
    out: SignalView<'a>,
    buf: Vec<f64>,
    want: Vec<f64>,
}

impl EcatBody<'_> {
    fn cycle(&mut self, stats: &mut StatsWriter<'_>) -> Result<f64, String> {
        let n = self.master.devices();
        if let Some(o) = &self.outputs {
            self.want.resize(n, 0.0);
            let got = read_f64s(o, &mut self.want)?;
            // Value i for device i; a signal of fewer values repeats its last one for the rest.
            for i in 0..if got == 0 { 0 } else { n } {
                let v = self.want[i.min(got - 1)];
                let bits = (v.max(0.0) as u64 & 0xffff) as u16;
                self.master.with_io(i, |_, out| {
                    if out.len() >= 2 {
                        out[..2].copy_from_slice(&bits.to_le_bytes());
                    }
                });
            }
        }
        stats.sent += 1;
        let r = self.master.cycle();
        // Replies that came after their cycle gave up on them, and frames the interface refused.
        stats.late = self.master.discarded();
        stats.send_fail = self.master.send_failed();
        match r {
            Ok(()) => stats.received += 1,
            Err(rtcell_ecat::master::CycleError::Lost { .. }) => {
                stats.recv_lost += 1;
                return Ok(0.0);
            }
            // Back, but not valid (a device missed it or left OP): the inputs keep their last good values.
            Err(_) => {
                stats.received += 1;
                stats.errors += 1;
                return Ok(0.0);
            }
        }
        self.buf.clear();
        for i in 0..n {
            let (digital, analog) = self
                .master
                .with_io(i, |inp, _| {
                    let w = |k: usize| inp.get(k..k + 2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
                    (w(0), w(2))
                })
                .unwrap_or((0, 0));
            self.buf.push(f64::from(digital));
            self.buf.push(f64::from(analog));
        }
        write_f64s(&self.out, &self.buf)?;
        Ok(self.buf.get(1).copied().unwrap_or(0.0))
    }
}

pub struct LogBody<'a> {
    out: BufWriter<File>,
    path: String,
    region: RegionView<'a>,
    signals: Vec<(String, SignalView<'a>, usize)>,
    tasks: Vec<String>,
    line: String,
}

pub struct MasterBody<'a> {
    request: RingEnd<'a, Producer<'a>>,
    reply: RingEnd<'a, Consumer<'a>>,
    r: Vec<f64>,
    y: Vec<f64>,
    u: Vec<f64>,
    seq: u64,
    precision: Precision,
    /// Every request of the current pass reached the cell, so its replies can be checked.
    intact: bool,
}

/// What a body needs to know about the cycle it runs.
pub struct CycleInfo {
    /// 0-based cycle index.
    pub k: u64,
    /// Intended release, seconds since the start.
    pub t_s: f64,
    /// Intended release (CLOCK_MONOTONIC ns).
    pub release_ns: u64,
    /// Absolute deadline (CLOCK_MONOTONIC ns).
    pub deadline_ns: u64,
}

impl CycleInfo {
    /// When a body waiting on a peer gives up: 90% of the way from release to deadline, so that a peer
    /// that does not answer costs the peer's reply, not the task's own deadline (and with the default
    /// skip policy, its next release).
    pub fn give_up_ns(&self) -> u64 {
        self.release_ns + self.deadline_ns.saturating_sub(self.release_ns) / 10 * 9
    }
}

impl<'a> Body<'a> {
    /// Prepares the body of `spec` (channels attached, calibration done, files opened).
    pub fn prepare(spec: &TaskSpec, region: &RegionView<'a>, ns_per_tick: f64) -> Result<Self, String> {
        let out = match &spec.output {
            Some(n) => Some(signal(region, n)?),
            None => None,
        };
        let need_out = |what: &str| out.clone().ok_or_else(|| format!("{what} task needs an output signal"));
        Ok(match &spec.work {
            TaskWork::Spin { us, inject } => {
                Body::Spin { iters_per_us: calibrate_busy(ns_per_tick), us: *us, inject: *inject, out }
            }
            TaskWork::Trajectory { from_deg, to_deg, move_s } => Body::Trajectory {
                from: from_deg.to_radians(),
                to: to_deg.to_radians(),
                move_s: *move_s,
                out: need_out("a trajectory")?,
            },
            TaskWork::InverseDynamics { setpoint } => {
                Body::InverseDynamics { setpoint: signal(region, setpoint)?, out: need_out("an inverse_dynamics")? }
            }
            TaskWork::Drive { setpoint, torque, us } => Body::Drive {
                setpoint: signal(region, setpoint)?,
                torque: signal(region, torque)?,
                out: need_out("a drive")?,
                iters: (calibrate_busy(ns_per_tick) * us).round() as u64,
            },
            TaskWork::Log { file, signals, tasks, created } => {
                let f = open_log(file, *created)?;
                let mut sigs = Vec::new();
                for s in signals {
                    let v = signal(region, s)?;
                    sigs.push((s.clone(), v.view, v.capacity() / 8));
                }
                for t in tasks {
                    read_counters(region, t).map_err(|e| format!("log: task {t:?}: {e}"))?;
                }
                let mut header = String::from("t_s");
                for (name, _, n) in &sigs {
                    for i in 0..*n {
                        header.push_str(&format!(",{name}[{i}]"));
                    }
                }
                for t in tasks {
                    header.push_str(&format!(",{t}.cycles,{t}.overruns,{t}.latency_max_us"));
                }
                let mut out = BufWriter::new(f);
                writeln!(out, "{header}").map_err(|e| format!("log file {file}: {e}"))?;
                out.flush().map_err(|e| format!("log file {file}: {e}"))?;
                Body::Log(Box::new(LogBody {
                    out,
                    path: file.clone(),
                    region: *region,
                    signals: sigs,
                    tasks: tasks.clone(),
                    line: String::with_capacity(4096),
                }))
            }
            TaskWork::Master { request, reply, precision } => {
                let data = rtcell_control::reference::shipped().map_err(|e| format!("reference data: {e}"))?;
                if data.r.is_empty() || data.r.len() != data.y.len() || data.r.len() != data.u.len() {
                    return Err("reference data: empty or of unequal lengths".into());
                }
                Body::Master(Box::new(MasterBody {
                    request: RingEnd::new(region, request, producer)?,
                    reply: RingEnd::new(region, reply, consumer)?,
                    r: data.r,
                    y: data.y,
                    u: data.u,
                    seq: 0,
                    precision: *precision,
                    intact: true,
                }))
            }
            TaskWork::C { library, init, step, com } => {
                // On the task's own thread: the COM context C code uses is per thread.
                let lib = crate::cwork::CLibrary::open(library, init.as_deref(), step)?;
                lib.attach(region, com)?;
                lib.init();
                Body::C(Box::new(lib))
            }
            TaskWork::Ethercat { interface, outputs, timeout_us, busy_poll } => {
                let mut master =
                    rtcell_ecat::master::Master::bring_up(interface, std::time::Duration::from_micros(*timeout_us))?;
                master.set_busy_poll(*busy_poll);
                let outputs = match outputs {
                    Some(n) => Some(signal(region, n)?.view),
                    None => None,
                };
                Body::Ethercat(Box::new(EcatBody {
                    master,
                    outputs,
                    out: need_out("an ethercat")?.view,
                    buf: Vec::new(),
                    want: Vec::new(),
                }))
            }
            TaskWork::Scribble { channel, at_cycle, cycles } => {
                Body::Scribble(Box::new(Scribbler::prepare(region, channel, *at_cycle, *cycles)?))
            }
            TaskWork::ComMaster { input, output, ids } => {
                Body::ComMaster(Box::new(crate::cwork::ComMasterBody::prepare(region, input, output, *ids)?))
            }
        })
    }

    /// Runs one cycle; returns the value a frame of this cycle carries.
    pub fn cycle(&mut self, c: &CycleInfo, stats: &mut StatsWriter<'_>) -> Result<f64, StepError> {
        match self {
            Body::Spin { iters_per_us, us, inject, out } => {
                let len = match inject {
                    Some(i) if c.k >= i.at_cycle && c.k - i.at_cycle < i.cycles => i.us,
                    _ => *us,
                };
                busy((*iters_per_us * len).round() as u64);
                if let Some(o) = out {
                    write_sig(o, &[c.k as f64])?;
                }
                // A 1 kHz ramp of 4 V peak to peak (seed 003's test signal), sampled at the release.
                Ok(4.0 * (c.t_s * 1000.0).fract() - 2.0)
            }
            Body::Trajectory { from, to, move_s, out } => {
                // Out and back, each way in move_s, forever.
                let span = 2.0 * *move_s;
                let phase = if span > 0.0 { c.t_s % span } else { 0.0 };
                let (p, v, a) = if phase < *move_s {
                    quintic(*from, *to, *move_s, phase)
                } else {
                    quintic(*to, *from, *move_s, phase - *move_s)
                };
                let mut sp = [0.0; SETPOINT_VALUES];
                for j in 0..DOF {
                    sp[j] = p;
                    sp[DOF + j] = v;
                    sp[2 * DOF + j] = a;
                }
                write_sig(out, &sp)?;
                Ok(p)
            }
            Body::InverseDynamics { setpoint, out } => {
                let mut sp = [0.0; SETPOINT_VALUES];
                read_sig(setpoint, &mut sp)?;
                let mut q = [0.0; DOF];
                let mut qd = [0.0; DOF];
                let mut qdd = [0.0; DOF];
                q.copy_from_slice(&sp[..DOF]);
                qd.copy_from_slice(&sp[DOF..2 * DOF]);
                qdd.copy_from_slice(&sp[2 * DOF..]);
                let tau = inverse_dynamics(&PUMA560, &q, &qd, &qdd, GRAVITY);
                write_sig(out, &tau)?;
                Ok(tau[1])
            }
            Body::Drive { setpoint, torque, out, iters } => {
                let mut sp = [0.0; SETPOINT_VALUES];
                let mut tau = [0.0; TORQUE_VALUES];
                read_sig(setpoint, &mut sp)?;
                read_sig(torque, &mut tau)?;
                busy(*iters);
                let mut cmd = [0.0; COMMAND_VALUES];
                cmd[..DOF].copy_from_slice(&sp[..DOF]);
                cmd[DOF..].copy_from_slice(&tau);
                write_sig(out, &cmd)?;
                Ok(cmd[0])
            }
            Body::Log(l) => {
                l.line.clear();
                l.line.push_str(&format!("{:.6}", c.t_s));
                let mut vals = [0.0; MAX_SIGNAL_VALUES];
                for (name, sig, n) in &l.signals {
                    let n = (*n).min(MAX_SIGNAL_VALUES);
                    let got = try_read_f64s(sig, &mut vals[..n]).map_err(|e| signal_corrupt(name, "read", e))?;
                    for v in &vals[..n] {
                        if got == 0 {
                            l.line.push(',');
                        } else {
                            l.line.push_str(&format!(",{v}"));
                        }
                    }
                }
                for t in &l.tasks {
                    let cnt = read_counters(&l.region, t).map_err(|e| format!("log: task {t:?}: {e}"))?;
                    let lat = read_histogram(&l.region, &crate::stats::latency_channel(t))
                        .ok()
                        .and_then(|h| h.max())
                        .map_or(String::new(), |ns| format!("{:.3}", ns as f64 / 1e3));
                    l.line.push_str(&format!(",{},{},{lat}", cnt.cycles, cnt.overruns));
                }
                l.line.push('\n');
                l.out.write_all(l.line.as_bytes()).map_err(|e| format!("log file {}: {e}", l.path))?;
                l.out.flush().map_err(|e| format!("log file {}: {e}", l.path))?;
                Ok(0.0)
            }
            Body::C(lib) => {
                lib.step();
                Ok(0.0)
            }
            Body::ComMaster(m) => m.cycle(c, stats),
            Body::Ethercat(e) => Ok(e.cycle(stats)?),
            Body::Scribble(x) => {
                stats.sent += x.cycle(c.k);
                Ok(0.0)
            }
            Body::Master(m) => {
                let n = m.r.len() as u64;
                let idx = (m.seq % n) as usize;
                let req = Request { seq: m.seq, reset: idx == 0, probe: false, r: m.r[idx], y: m.y[idx] };
                m.seq += 1;
                if idx == 0 {
                    m.intact = true;
                }
                match m.request.get(producer).try_send(&req.encode()) {
                    Ok(()) => stats.sent += 1,
                    Err(SendError::Full) => {
                        // The cell never sees this step: its state leaves the reference until the next
                        // pass starts with a reset.
                        stats.send_fail += 1;
                        m.intact = false;
                        return Ok(0.0);
                    }
                    Err(SendError::Corrupt(what)) => return Err(m.request.corrupt("send", what)),
                    Err(e @ SendError::TooLarge { .. }) => return Err(format!("master: send: {e:?}").into()),
                }
                let mut buf = [0u8; rtcell_control::offload::MESSAGE_BYTES];
                let mut polls: u32 = 0;
                let give_up = c.give_up_ns();
                loop {
                    match m.reply.get(consumer).try_recv(&mut buf) {
                        Ok(len) => match Reply::decode(&buf[..len]) {
                            Some(rep) if rep.seq == req.seq => {
                                stats.received += 1;
                                if !m.intact {
                                    stats.unchecked += 1;
                                } else if m.precision.check_output(rep.u, m.u[idx]).is_err() {
                                    stats.errors += 1;
                                }
                                return Ok(m.precision.output_volts(rep.u).unwrap_or(0.0));
                            }
                            Some(rep) if rep.seq < req.seq => stats.late += 1,
                            _ => stats.errors += 1,
                        },
                        Err(RecvError::Empty) => {
                            polls = polls.wrapping_add(1);
                            if polls % 16 == 0 && mono_ns() > give_up {
                                stats.recv_lost += 1;
                                return Ok(0.0);
                            }
                            core::hint::spin_loop();
                        }
                        Err(RecvError::Corrupt(what)) => return Err(m.reply.corrupt("receive", what)),
                        Err(RecvError::TooSmall { .. }) => {
                            return Err(m.reply.corrupt("receive", "frame length above the reply size"));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::open_log;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_log_writes_only_to_the_file_the_run_created() {
        let tmp = tempfile::tempdir().unwrap();
        let made = tmp.path().join("motion.log");
        std::fs::write(&made, b"").unwrap();
        let m = std::fs::metadata(&made).unwrap();
        let id = Some((m.dev(), m.ino()));
        let path = made.to_str().unwrap();
        assert!(open_log(path, id).is_ok());

        // The file swapped for another one (as a replaced parent directory would do): refused, untouched.
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        std::fs::rename(&victim, &made).unwrap();
        let e = open_log(path, id).unwrap_err();
        assert!(e.contains("no longer the file this run created"), "{e}");
        assert_eq!(std::fs::read(&made).unwrap(), b"keep me");

        // A symbolic link is never followed, and nothing is created.
        std::fs::remove_file(&made).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), &made).unwrap();
        assert!(open_log(path, None).is_err());
        assert!(!tmp.path().join("elsewhere").exists());
    }
}
