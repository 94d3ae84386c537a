//! One measurement: a mechanism at one payload size, placement and trigger. The requester and the
//! responder are SCHED_FIFO threads of their own; the calling thread is their watchdog. When no exchange
//! completes for the watchdog's time, it stops the measurement — every wait in the ends either times out
//! by itself or is interrupted by the kick signal — and reports it; a side that still does not stop
//! breaks the run off instead of hanging it.

use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtcell_host::clock::mono_ns;
use rtcell_host::kick::Kick;
use rtcell_host::sched::{RtRequest, apply_rt, prefault_stack};
use rtcell_host::tsc::rdtsc_ordered;

use super::end::{Ctl, End, Fault};
use super::{Mechanism, REQUESTER_PRIORITY, RESPONDER_PRIORITY};
use crate::{BenchError, stop_requested};

/// How long a side may take to stop once told to (a timed wait re-checks within 100 ms).
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Stack of each side: small, because memory is locked and the stack is prefaulted.
const STACK: usize = 256 * 1024;

/// What to measure.
pub(crate) struct Job<'a> {
    pub mechanism: Mechanism,
    pub size: usize,
    pub requester_cpu: usize,
    pub responder_cpu: usize,
    /// `None`: back to back; otherwise one exchange per period, on an absolute CLOCK_MONOTONIC grid.
    pub period_ns: Option<u64>,
    pub warmup: usize,
    pub iterations: usize,
    /// Random bytes the payloads are cut from.
    pub pool: &'a Arc<Vec<u8>>,
    /// No exchange completed for this long: the watchdog stops the measurement.
    pub watchdog: Duration,
    pub watchdog_ticks: u64,
}

/// What one measurement produced.
pub(crate) struct Measured {
    /// Round trips after the warm-up, TSC ticks.
    pub ticks: Vec<u64>,
    /// Replies whose length or content differed from the request.
    pub mismatches: u64,
    /// Why the measurement was stopped before its end, if it was (counted as an error).
    pub aborted: Option<String>,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    pub warnings: Vec<String>,
}

/// A start line both sides must reach (each with its end set up) before the first exchange. Blocking,
/// not spinning: on one CPU a spinning higher-priority side would never let the other arrive.
struct Gate {
    arrived: Mutex<u32>,
    cv: Condvar,
}

impl Gate {
    fn new() -> Gate {
        Gate { arrived: Mutex::new(0), cv: Condvar::new() }
    }

    fn arrive(&self, ctl: &Ctl) -> Result<(), Fault> {
        let mut n = self.arrived.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        self.cv.notify_all();
        while *n < 2 {
            ctl.check()?;
            n = self.cv.wait_timeout(n, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Requester,
    Responder,
}

/// Tells the watchdog that a side's thread is done, also when it panicked: (side, ended as planned).
struct Done {
    tx: Sender<(Side, bool)>,
    side: Side,
    ok: bool,
}

impl Drop for Done {
    fn drop(&mut self) {
        let _ = self.tx.send((self.side, self.ok));
    }
}

#[derive(Default)]
struct RequesterOut {
    ticks: Vec<u64>,
    mismatches: u64,
    interrupted: bool,
    warnings: Vec<String>,
    result: Option<Result<(), Fault>>,
}

/// Random bytes for payloads; each exchange takes a different window, so a stale reply fails the check.
pub(crate) fn payload_pool(seed: u64) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut v = vec![0u8; 1 << 20];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

fn window(i: usize, size: usize, pool: &[u8]) -> &[u8] {
    let span = (pool.len() - size).max(1);
    let off = i.wrapping_mul(7919) % span;
    &pool[off..off + size]
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns`; the kick signal ends the sleep once stopped.
fn sleep_until(deadline_ns: u64, ctl: &Ctl) -> Result<(), Fault> {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: `ts` outlives the call; the remaining-time pointer may be null with TIMER_ABSTIME.
        let rc =
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        match rc {
            0 => return Ok(()),
            libc::EINTR => ctl.check()?,
            e => return Err(Fault::Os { op: "clock_nanosleep", err: std::io::Error::from_raw_os_error(e) }),
        }
    }
}

fn spawn<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<JoinHandle<T>, BenchError> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(STACK)
        .spawn(f)
        .map_err(|e| BenchError::Other(format!("cannot start the {name} thread: {e}")))
}

/// Runs one measurement. `Err` only when a side could not be started or would not stop (the run must
/// break off); a mechanism that fails or hangs gives `Ok` with `aborted` set.
pub(crate) fn measure(job: &Job<'_>) -> Result<Measured, BenchError> {
    let ctl = Arc::new(Ctl::new(job.watchdog_ticks));
    match super::open(job.mechanism, job.size, &ctl) {
        Ok((req_end, resp_end)) => measure_ends(job, ctl, req_end, resp_end),
        Err(f) => Ok(Measured {
            ticks: Vec::new(),
            mismatches: 0,
            aborted: Some(format!("cannot set up: {f}")),
            interrupted: false,
            warnings: Vec::new(),
        }),
    }
}

/// [`measure`] with the ends already open (made with `ctl`).
fn measure_ends(
    job: &Job<'_>,
    ctl: Arc<Ctl>,
    req_end: Box<dyn End>,
    resp_end: Box<dyn End>,
) -> Result<Measured, BenchError> {
    let total = job.warmup + job.iterations;
    let gate = Arc::new(Gate::new());
    let progress = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = mpsc::channel();

    let responder = {
        let (ctl, gate, done) = (Arc::clone(&ctl), Arc::clone(&gate), done_tx.clone());
        let (cpu, size) = (job.responder_cpu, job.size);
        spawn("itc-responder", move || responder_main(resp_end, cpu, size, total, &ctl, &gate, done))?
    };
    let requester = {
        let (c, g, p, pool) = (Arc::clone(&ctl), Arc::clone(&gate), Arc::clone(&progress), Arc::clone(job.pool));
        let (cpu, size, warmup, period) = (job.requester_cpu, job.size, job.warmup, job.period_ns);
        let done = done_tx;
        let spawned = spawn("itc-requester", move || {
            requester_main(req_end, cpu, size, warmup, total, period, &pool, &c, &g, &p, done)
        });
        match spawned {
            Ok(h) => h,
            Err(e) => {
                ctl.stop();
                // The responder stops at the gate.
                let _ = responder.join();
                return Err(e);
            }
        }
    };

    // The watchdog.
    let (mut req_done, mut resp_done) = (false, false);
    let mut tripped = None;
    let mut last = (0u64, Instant::now());
    let mut stopping_since: Option<Instant> = None;
    while !(req_done && resp_done) {
        let wait = if ctl.stopped() { Duration::from_millis(10) } else { Duration::from_millis(100) };
        match done_rx.recv_timeout(wait) {
            // The requester is done (all exchanges, Ctrl-C or a fault): the responder has nothing more to do.
            Ok((Side::Requester, _)) => {
                req_done = true;
                if !resp_done {
                    ctl.stop();
                }
            }
            Ok((Side::Responder, ok)) => {
                resp_done = true;
                if !ok {
                    ctl.stop();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let p = progress.load(Ordering::Relaxed);
        if p != last.0 {
            last = (p, Instant::now());
        } else if !ctl.stopped() && last.1.elapsed() > job.watchdog {
            tripped = Some(format!(
                "watchdog: no exchange completed for {:.1} s (after {p} of {total}); measurement stopped",
                job.watchdog.as_secs_f64()
            ));
            ctl.stop();
        }
        if ctl.stopped() {
            let since = *stopping_since.get_or_insert_with(Instant::now);
            // Interrupts whichever side is still blocked in a read, write or sleep; repeated, because
            // the signal may land just before the side enters its system call.
            for (done, t) in [(req_done, requester.as_pthread_t()), (resp_done, responder.as_pthread_t())] {
                if !done {
                    // SAFETY: the thread is not joined yet, so its pthread_t is valid even if it has
                    // exited; the signal has a no-op handler (`Kick::install`).
                    unsafe { libc::pthread_kill(t, Kick::BenchWait.signal()) };
                }
            }
            if since.elapsed() > STOP_GRACE && !(req_done && resp_done) {
                let who = if req_done { "responder" } else { "requester" };
                // The handles are dropped: the stuck thread is left behind, the run ends.
                return Err(BenchError::Other(format!(
                    "itc {} {} B: the {who} did not stop within {} s after {}",
                    job.mechanism.as_str(),
                    job.size,
                    STOP_GRACE.as_secs(),
                    tripped.as_deref().unwrap_or("the measurement ended")
                )));
            }
        }
    }

    let req = requester.join().unwrap_or_else(|_| RequesterOut {
        result: Some(Err(Fault::Broken("the requester thread panicked".into()))),
        ..RequesterOut::default()
    });
    let (resp_warnings, resp_result) =
        responder.join().unwrap_or_else(|_| (Vec::new(), Err(Fault::Broken("the responder thread panicked".into()))));

    // A side that was told to stop says `Stopped`; the cause is the watchdog or the other side's fault.
    // After Ctrl-C the requester leaves between exchanges, and its going (closed descriptors, released
    // mutexes) can wake the responder onto nothing: that is no fault of the mechanism.
    let mut aborted = tripped;
    if aborted.is_none()
        && let Some(Err(f)) = &req.result
        && !matches!(f, Fault::Stopped)
    {
        aborted = Some(format!("requester: {f}"));
    }
    if aborted.is_none()
        && !req.interrupted
        && let Err(f) = &resp_result
        && !matches!(f, Fault::Stopped)
    {
        aborted = Some(format!("responder: {f}"));
    }
    let mut warnings = req.warnings;
    warnings.extend(resp_warnings);
    Ok(Measured { ticks: req.ticks, mismatches: req.mismatches, aborted, interrupted: req.interrupted, warnings })
}

fn rt_setup(cpu: usize, priority: i32, who: &str) -> Result<Vec<String>, Fault> {
    let w = apply_rt(&RtRequest { cpu: Some(cpu), fifo_priority: Some(priority), lock_memory: false })
        .map_err(|e| Fault::Broken(format!("{who} on CPU {cpu}: {e}")))?;
    // Memory is locked process-wide by the suite; touch this thread's stack now, not mid-measurement.
    prefault_stack(STACK / 2);
    Ok(w)
}

#[allow(clippy::too_many_arguments)]
fn requester_main(
    end: Box<dyn End>,
    cpu: usize,
    size: usize,
    warmup: usize,
    total: usize,
    period_ns: Option<u64>,
    pool: &[u8],
    ctl: &Ctl,
    gate: &Gate,
    progress: &AtomicU64,
    done: Sender<(Side, bool)>,
) -> RequesterOut {
    let mut done = Done { tx: done, side: Side::Requester, ok: false };
    let warnings = match rt_setup(cpu, REQUESTER_PRIORITY, "requester") {
        Ok(w) => w,
        Err(f) => return RequesterOut { result: Some(Err(f)), ..RequesterOut::default() },
    };
    let mut reply = vec![0u8; size];
    let mut ticks = Vec::with_capacity(total - warmup);
    let (mut mismatches, mut interrupted) = (0u64, false);
    let result = end.run(&mut |ops| {
        gate.arrive(ctl)?;
        let mut next = period_ns.map(|p| mono_ns() + p);
        for i in 0..total {
            if stop_requested() {
                interrupted = true;
                return Ok(());
            }
            ctl.check()?;
            if let (Some(at), Some(p)) = (next.as_mut(), period_ns) {
                sleep_until(*at, ctl)?;
                // The next release on the grid; releases already past (an overrun) are skipped.
                let now = mono_ns();
                *at += p;
                if *at <= now {
                    *at += (now - *at) / p * p + p;
                }
            }
            let payload = window(i, size, pool);
            let t0 = rdtsc_ordered();
            ops.send(payload)?;
            let n = ops.recv(&mut reply)?;
            let t1 = rdtsc_ordered();
            if n != size || reply[..n] != *payload {
                mismatches += 1;
            }
            if i >= warmup {
                ticks.push(t1.wrapping_sub(t0));
            }
            progress.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    done.ok = result.is_ok() && !interrupted;
    RequesterOut { ticks, mismatches, interrupted, warnings, result: Some(result) }
}

fn responder_main(
    end: Box<dyn End>,
    cpu: usize,
    size: usize,
    total: usize,
    ctl: &Ctl,
    gate: &Gate,
    done: Sender<(Side, bool)>,
) -> (Vec<String>, Result<(), Fault>) {
    let mut done = Done { tx: done, side: Side::Responder, ok: false };
    let warnings = match rt_setup(cpu, RESPONDER_PRIORITY, "responder") {
        Ok(w) => w,
        Err(f) => return (Vec::new(), Err(f)),
    };
    // The responder's own copy of each request, sent back from here.
    let mut buf = vec![0u8; size];
    let result = end.run(&mut |ops| {
        gate.arrive(ctl)?;
        for _ in 0..total {
            let n = ops.recv(&mut buf)?;
            ops.send(&buf[..n])?;
        }
        Ok(())
    });
    // Told to stop (the requester is done, or the watchdog fired) is no failure of this side.
    done.ok = !matches!(&result, Err(f) if !matches!(f, Fault::Stopped));
    (warnings, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::itc::end::{Body, Ops};
    use rtcell_host::kick::Kick;

    /// Wraps an end so that its sends go through `f` (which may drop or corrupt them).
    struct Tamper<F> {
        inner: Box<dyn End>,
        f: F,
    }

    struct TamperOps<'a, F> {
        ops: &'a mut dyn Ops,
        f: &'a mut F,
    }

    impl<F: FnMut(&mut dyn Ops, &[u8]) -> Result<(), Fault>> Ops for TamperOps<'_, F> {
        fn send(&mut self, msg: &[u8]) -> Result<(), Fault> {
            (self.f)(&mut *self.ops, msg)
        }
        fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Fault> {
            self.ops.recv(buf)
        }
    }

    impl<F: FnMut(&mut dyn Ops, &[u8]) -> Result<(), Fault> + Send> End for Tamper<F> {
        fn run(self: Box<Self>, body: &mut Body<'_>) -> Result<(), Fault> {
            let Tamper { inner, mut f } = *self;
            inner.run(&mut |ops| body(&mut TamperOps { ops, f: &mut f }))
        }
    }

    fn job<'a>(mechanism: Mechanism, size: usize, pool: &'a Arc<Vec<u8>>) -> Job<'a> {
        let cpu = rtcell_host::cpu::current_cpu().unwrap_or(0);
        Job {
            mechanism,
            size,
            requester_cpu: cpu,
            responder_cpu: cpu,
            period_ns: None,
            warmup: 10,
            iterations: 100,
            pool,
            watchdog: Duration::from_millis(300),
            watchdog_ticks: u64::MAX,
        }
    }

    fn run_tampered(
        mechanism: Mechanism,
        f: impl FnMut(&mut dyn Ops, &[u8]) -> Result<(), Fault> + Send + 'static,
    ) -> Measured {
        Kick::BenchWait.install();
        let pool = Arc::new(payload_pool(1));
        let job = job(mechanism, 64, &pool);
        let ctl = Arc::new(Ctl::new(job.watchdog_ticks));
        let (req, resp) = super::super::open(mechanism, 64, &ctl).expect("mechanism opens");
        let started = Instant::now();
        let m = measure_ends(&job, ctl, req, Box::new(Tamper { inner: resp, f })).expect("the sides stop");
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
        m
    }

    #[test]
    fn a_responder_that_never_answers_is_stopped_by_the_watchdog() {
        // Blocking reads (pipe: the kick signal), timed waits (semaphore, mutex) and a futex wait.
        for mechanism in [Mechanism::Pipe, Mechanism::Semaphore, Mechanism::Mutex, Mechanism::Futex] {
            let m = run_tampered(mechanism, |_, _| Ok(()));
            let why = m.aborted.unwrap_or_else(|| panic!("{mechanism:?}: not aborted"));
            assert!(why.contains("watchdog"), "{mechanism:?}: {why}");
            assert!(m.ticks.is_empty(), "{mechanism:?}");
        }
    }

    #[test]
    fn a_corrupted_reply_is_counted_not_hidden() {
        let m = run_tampered(Mechanism::UnixDgram, |ops, msg| {
            let mut bad = msg.to_vec();
            bad[msg.len() / 2] ^= 1;
            ops.send(&bad)
        });
        assert!(m.aborted.is_none(), "{:?}", m.aborted);
        assert_eq!(m.mismatches, 110);
        assert_eq!(m.ticks.len(), 100);
    }

    #[test]
    fn a_failing_responder_aborts_with_its_reason() {
        let m = run_tampered(Mechanism::Eventfd, |_, _| Err(Fault::Broken("lost the plot".into())));
        let why = m.aborted.expect("aborted");
        assert!(why.contains("responder: lost the plot"), "{why}");
    }

    #[test]
    fn every_mechanism_round_trips_correctly_on_one_cpu() {
        Kick::BenchWait.install();
        let pool = Arc::new(payload_pool(2));
        for mechanism in crate::itc::Mechanism::ALL.into_iter().filter(|m| !m.polls()) {
            for size in [1, 4, 3072] {
                let m = measure(&job(mechanism, size, &pool)).expect("runs");
                assert!(m.aborted.is_none(), "{mechanism:?} {size}: {:?}", m.aborted);
                assert_eq!(m.mismatches, 0, "{mechanism:?} {size}");
                assert_eq!(m.ticks.len(), 100, "{mechanism:?} {size}");
            }
        }
    }
}
