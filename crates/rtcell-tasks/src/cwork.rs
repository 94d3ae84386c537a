//! Workloads around user C code: a task whose cycle is a C `step()` from a shared object, and the
//! master of the C offload, which talks to such a task over COM signals.
//!
//! The C code calls `Com_*` from *its own* copy of librtcell (the one its shared object was linked
//! with), so the runner binds that copy to the region: `rtcell_cell_attach` is looked up through the
//! library's handle, not taken from this binary.

use std::ffi::{CString, c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW, Symbol};
use rtcell_control::offload::Precision;
use rtcell_shm::{ComReceiver, ComView, Freshness, RegionView};
use serde::{Deserialize, Serialize};

use crate::corrupt::{StepError, com_corrupt};
use crate::stats::StatsWriter;
use crate::work::CycleInfo;
use rtcell_host::clock::mono_ns;

/// `Std_ReturnType rtcell_cell_attach(void *base, size_t len, const char *const *channels, size_t count)`.
type AttachFn = unsafe extern "C" fn(*mut c_void, usize, *const *const c_char, usize) -> u8;
/// `const char *rtcell_last_error(void)`.
type LastErrorFn = unsafe extern "C" fn() -> *const c_char;
/// The user's `init` and `step`.
type VoidFn = unsafe extern "C" fn();

/// A shared object of user C code, opened and checked: its step, its optional init, and the librtcell
/// it was linked with.
pub struct CLibrary {
    path: String,
    init: Option<VoidFn>,
    step: VoidFn,
    attach: AttachFn,
    last_error: Option<LastErrorFn>,
    // Last: the symbols above point into it, so it must outlive them (fields drop in order).
    _lib: Library,
}

static KEEP_LOADED: AtomicBool = AtomicBool::new(false);

/// Makes every C library opened from now on in this process stay loaded until the process ends
/// (`RTLD_NODELETE`): closing one runs its destructors, which would be the user's code running after
/// its task wrote its final figures. A process cell calls it and ends with `_exit`, so they never run.
pub fn keep_libraries_loaded() {
    KEEP_LOADED.store(true, Ordering::Relaxed);
}

/// Loads the shared object at `path` for the rest of the process (`RTLD_NODELETE`), which runs its
/// constructors, and looks nothing up: a process cell loads every C library before it forbids new code
/// (no executable mapping after that); [`CLibrary::open`] of the same file then finds it loaded.
pub fn preload(path: &str) -> Result<(), String> {
    // SAFETY: as in `CLibrary::open`: loading runs the library's constructors, the user's code of a task
    // of this cell.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL | libc::RTLD_NODELETE) };
    // Closing the handle leaves the library loaded (RTLD_NODELETE).
    lib.map(drop).map_err(|e| format!("cannot load {path}: {e}"))
}

fn symbol<T: Copy>(lib: &Library, path: &str, name: &str, what: &str) -> Result<T, String> {
    let c = CString::new(name).map_err(|_| format!("{what} symbol name {name:?} contains a NUL byte"))?;
    // SAFETY: the caller names the C type T of the symbol (a function pointer of the documented
    // signature); dlsym only looks the name up.
    let sym: Result<Symbol<T>, _> = unsafe { lib.get(c.as_bytes_with_nul()) };
    match sym {
        Ok(s) => Ok(*s),
        Err(e) => Err(format!("{path}: no {what} symbol {name:?} ({e})")),
    }
}

impl CLibrary {
    /// Opens `path` (every undefined symbol resolved now) and finds `step`, `init` and librtcell's
    /// `rtcell_cell_attach`.
    pub fn open(path: &str, init: Option<&str>, step: &str) -> Result<CLibrary, String> {
        let keep = if KEEP_LOADED.load(Ordering::Relaxed) { libc::RTLD_NODELETE } else { 0 };
        // SAFETY: loading a shared object runs its constructors; the user asked for this library to
        // run in this cell, which is what a C task is.
        let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL | keep) }
            .map_err(|e| format!("cannot load {path}: {e}"))?;
        let step_fn: VoidFn = symbol(&lib, path, step, "step")?;
        let init_fn = match init {
            Some(n) => Some(symbol::<VoidFn>(&lib, path, n, "init")?),
            None => None,
        };
        let attach: AttachFn = symbol(&lib, path, "rtcell_cell_attach", "librtcell")
            .map_err(|e| format!("{e}: link the library with librtcell (`pkg-config --cflags --libs rtcell`)"))?;
        let last_error = symbol::<LastErrorFn>(&lib, path, "rtcell_last_error", "librtcell").ok();
        Ok(CLibrary { path: path.to_string(), init: init_fn, step: step_fn, attach, last_error, _lib: lib })
    }

    /// Binds the calling thread's COM context (in the library's librtcell) to COM channels `com` of
    /// `region` (all of them when empty).
    pub fn attach(&self, region: &RegionView<'_>, com: &[String]) -> Result<(), String> {
        let names: Vec<CString> = com
            .iter()
            .map(|n| CString::new(n.as_str()).map_err(|_| format!("channel name {n:?} contains a NUL byte")))
            .collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        let words = region.words();
        // SAFETY: `words` is the whole mapped region, valid for the life of the cell; `ptrs` holds
        // `ptrs.len()` NUL-terminated strings that live until the call returns.
        let code = unsafe { (self.attach)(words.as_ptr() as *mut c_void, words.len() * 8, ptrs.as_ptr(), ptrs.len()) };
        if code == rtcell_shm::com::code::E_OK {
            return Ok(());
        }
        let why = self.last_error().unwrap_or_default();
        Err(format!("{}: rtcell_cell_attach returned {code:#04x}: {why}", self.path))
    }

    fn last_error(&self) -> Option<String> {
        let f = self.last_error?;
        // SAFETY: rtcell_last_error returns a NUL-terminated string owned by the library (never NULL
        // by contract; checked anyway), valid until the next call on this thread.
        unsafe {
            let p = f();
            (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
        }
    }

    /// Calls the init function, if there is one.
    pub fn init(&self) {
        if let Some(f) = self.init {
            // SAFETY: a `void f(void)` the user named as the task's init.
            unsafe { f() }
        }
    }

    /// Calls the step function.
    #[inline]
    pub fn step(&self) {
        // SAFETY: a `void f(void)` the user named as the task's step.
        unsafe { (self.step)() }
    }
}

/// Trial of a C task in a throw-away process (`rtcell __c-probe`): load, find the symbols, attach,
/// run init. Whatever goes wrong (a missing symbol, a crash in init) shows here, before any cell starts.
pub fn probe(
    region: &RegionView<'_>,
    library: &str,
    init: Option<&str>,
    step: &str,
    com: &[String],
) -> Result<(), String> {
    let lib = CLibrary::open(library, init, step)?;
    lib.attach(region, com)?;
    lib.init();
    Ok(())
}

/// Signal ids of the C offload's COM channels (resolved from the scenario's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComMasterIds {
    /// Group on `input` holding seq (uint32), reset (uint8), r and y (float64).
    pub in_group: u16,
    pub seq: u16,
    pub reset: u16,
    pub r: u16,
    pub y: u16,
    /// Group on `output` holding seq (uint32) and u (float64).
    pub out_group: u16,
    pub out_seq: u16,
    pub u: u16,
}

/// The master of the C offload: writes the next reference sample as a signal group, waits for the
/// controller's answer with the same sequence number, and checks it. A sample is only replaced once it
/// has been answered (the master holds the next one until then), so the controller sees every sample in
/// order, its state follows the reference, and every answer can be checked bit for bit.
pub struct ComMasterBody<'a> {
    input: ComView<'a>,
    output: ComView<'a>,
    input_name: String,
    output_name: String,
    ids: ComMasterIds,
    shadow: Vec<u8>,
    seen: Vec<u64>,
    r: Vec<f64>,
    y: Vec<f64>,
    u: Vec<f64>,
    /// Sequence number of the last sample sent; they start at 1 (a never-written group reads as 0).
    seq: u32,
    /// Index into the reference data of the last sample sent.
    idx: usize,
    /// The last sample sent has not been answered yet.
    pending: bool,
}

impl<'a> ComMasterBody<'a> {
    pub fn prepare(region: &RegionView<'a>, input: &str, output: &str, ids: ComMasterIds) -> Result<Self, String> {
        let input_view = region.com(input).map_err(|e| format!("COM channel {input:?}: {e}"))?;
        let output_view = region.com(output).map_err(|e| format!("COM channel {output:?}: {e}"))?;
        let data = rtcell_control::reference::shipped().map_err(|e| format!("reference data: {e}"))?;
        if data.r.is_empty() || data.r.len() != data.y.len() || data.r.len() != data.u.len() {
            return Err("reference data: empty or of unequal lengths".into());
        }
        let (shadow, seen) = ComReceiver::storage_needed(&output_view);
        Ok(ComMasterBody {
            input: input_view,
            output: output_view,
            input_name: input.to_string(),
            output_name: output.to_string(),
            ids,
            shadow: vec![0; shadow],
            seen: vec![0; seen],
            r: data.r,
            y: data.y,
            u: data.u,
            seq: 0,
            idx: 0,
            pending: false,
        })
    }

    /// Reads the output group: (seq, u) when it has been written.
    fn read_reply(&mut self) -> Result<Option<(u32, f64)>, StepError> {
        let out = self.output_name.as_str();
        let mut rx = ComReceiver::new(self.output, &mut self.shadow, &mut self.seen)
            .map_err(|e| com_corrupt(out, "receiver", e))?;
        match rx.receive_signal_group(self.ids.out_group) {
            Ok(Freshness::NeverWritten) => return Ok(None),
            Ok(_) => {}
            // The controller is mid-update (e.g. preempted while writing): no answer yet.
            Err(rtcell_shm::ComError::Busy) => return Ok(None),
            Err(e) => return Err(com_corrupt(out, &format!("group {}", self.ids.out_group), e)),
        }
        let mut s = [0u8; 4];
        let mut u = [0u8; 8];
        rx.receive_signal(self.ids.out_seq, &mut s).map_err(|e| com_corrupt(out, "signal seq", e))?;
        rx.receive_signal(self.ids.u, &mut u).map_err(|e| com_corrupt(out, "signal u", e))?;
        Ok(Some((u32::from_le_bytes(s), f64::from_le_bytes(u))))
    }

    /// Waits until the give-up time for the answer to the last sample; `late` says whether it was sent
    /// in an earlier cycle.
    fn await_answer(
        &mut self,
        give_up: u64,
        late: bool,
        stats: &mut StatsWriter<'_>,
    ) -> Result<Option<f64>, StepError> {
        let mut polls: u32 = 0;
        loop {
            if let Some((seq, u)) = self.read_reply()?
                && seq == self.seq
            {
                self.pending = false;
                stats.received += 1;
                if late {
                    stats.late += 1;
                }
                if Precision::F64.check_output(u.to_bits(), self.u[self.idx]).is_err() {
                    stats.errors += 1;
                }
                return Ok(Some(u));
            }
            polls = polls.wrapping_add(1);
            if polls % 16 == 0 && mono_ns() > give_up {
                // Not back in time: this cycle ends without an answer; the sample stays pending.
                stats.recv_lost += 1;
                return Ok(None);
            }
            core::hint::spin_loop();
        }
    }

    pub fn cycle(&mut self, c: &CycleInfo, stats: &mut StatsWriter<'_>) -> Result<f64, StepError> {
        let give_up = c.give_up_ns();
        if self.pending && self.await_answer(give_up, true, stats)?.is_none() {
            return Ok(0.0);
        }
        // The next sample becomes the current one only once it is committed: a step that finds the
        // channel corrupt sends it again on the next step.
        let n = self.r.len();
        let idx = if self.seq == 0 { 0 } else { (self.idx + 1) % n };
        let seq = self.seq.wrapping_add(1).max(1);
        let input = self.input_name.as_str();
        let send = |id: u16, bytes: &[u8]| {
            self.input.send_signal(id, bytes).map_err(|e| com_corrupt(input, &format!("signal {id}"), e))
        };
        send(self.ids.seq, &seq.to_le_bytes())?;
        send(self.ids.reset, &[(idx == 0) as u8])?;
        send(self.ids.r, &self.r[idx].to_le_bytes())?;
        send(self.ids.y, &self.y[idx].to_le_bytes())?;
        let group = self.ids.in_group;
        self.input.send_signal_group(group).map_err(|e| com_corrupt(input, &format!("group {group}"), e))?;
        (self.idx, self.seq) = (idx, seq);
        stats.sent += 1;
        self.pending = true;
        Ok(self.await_answer(give_up, false, stats)?.unwrap_or(0.0))
    }
}
