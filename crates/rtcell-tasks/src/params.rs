//! Writable signals ("parameters") and their acknowledgements.
//!
//! A scenario marks a signal `writable` and names the one task that reads it (`params = [...]`). The
//! writer (the gateway) publishes a new value; at the start of its next cycle the task reads it and copies
//! what it saw, with the value's sequence number, to the acknowledgement signal `<name>.ack`. The writer
//! then knows the value the real-time side really saw, and when. The task never waits: when nothing
//! changed, checking costs one atomic load per parameter.
//!
//! Acknowledgement layout (little-endian): the sequence number of the value seen (u64), then its f64
//! values.

use std::sync::atomic::Ordering;

use rtcell_shm::{RegionView, SignalError, SignalView};

use crate::work::MAX_SIGNAL_VALUES;

/// Name of the acknowledgement signal of writable signal `signal`.
pub fn ack_name(signal: &str) -> String {
    format!("{signal}.ack")
}

/// Capacity in bytes of the acknowledgement of a signal of `values` f64 values.
pub fn ack_bytes(values: usize) -> usize {
    8 + values * 8
}

/// A task's view of one parameter: the signal it reads and the acknowledgement it writes.
pub struct ParamReader<'a> {
    signal: SignalView<'a>,
    ack: SignalView<'a>,
    last_seen: u64,
    buf: [u8; 8 + MAX_SIGNAL_VALUES * 8],
}

impl<'a> ParamReader<'a> {
    pub fn attach(region: &RegionView<'a>, name: &str) -> Result<ParamReader<'a>, String> {
        let signal = region.signal(name).map_err(|e| format!("param {name:?}: {e}"))?;
        let ack_n = ack_name(name);
        let ack = region.signal(&ack_n).map_err(|e| format!("param {name:?}: its acknowledgement {ack_n:?}: {e}"))?;
        Ok(ParamReader { signal, ack, last_seen: 0, buf: [0; 8 + MAX_SIGNAL_VALUES * 8] })
    }

    /// Checks for a new value; when there is one, acknowledges it. Returns whether there was one.
    ///
    /// A writer caught mid-update (it may be preempted by this very task on a shared CPU, and cannot
    /// finish until the task sleeps) is not an error: the value is taken at a later cycle.
    #[inline]
    pub fn poll(&mut self) -> Result<bool, String> {
        if self.signal.seq_word().load(Ordering::Acquire) == self.last_seen {
            return Ok(false);
        }
        let mut seen = self.last_seen;
        let len = match self.signal.read(&mut self.buf[8..], &mut seen) {
            Ok((len, _)) => len,
            Err(SignalError::Busy) => return Ok(false),
            Err(e) => return Err(format!("param read: {e:?}")),
        };
        self.last_seen = seen;
        self.buf[..8].copy_from_slice(&self.last_seen.to_le_bytes());
        self.ack.write(&self.buf[..8 + len]).map_err(|e| format!("param acknowledgement: {e:?}"))?;
        Ok(true)
    }
}

/// Publishes `values` on a writable signal (the single writer's side); returns the value's sequence
/// number, which the acknowledgement will carry once the reading task has seen it.
pub fn publish(signal: &SignalView<'_>, values: &[f64]) -> Result<u64, String> {
    crate::work::write_f64s(signal, values)?;
    Ok(signal.seq_word().load(Ordering::Acquire))
}

/// Reads an acknowledgement: the sequence number of the value the task saw and its values; `None` when
/// the task has acknowledged nothing yet. A malformed acknowledgement (written by another process) is
/// an error, never a panic.
pub fn read_ack(ack: &SignalView<'_>) -> Result<Option<(u64, Vec<f64>)>, String> {
    let mut buf = [0u8; 8 + MAX_SIGNAL_VALUES * 8];
    let mut seen = 0u64;
    let len = match ack.read(&mut buf, &mut seen) {
        Ok((len, _)) => len,
        // The task is writing it right now: nothing new to see yet.
        Err(SignalError::Busy) => return Ok(None),
        Err(e) => return Err(format!("acknowledgement read: {e:?}")),
    };
    if seen == 0 {
        return Ok(None);
    }
    if len < 8 || len % 8 != 0 {
        return Err(format!("acknowledgement of {len} bytes: not a sequence number and f64 values"));
    }
    let mut word = [0u8; 8];
    word.copy_from_slice(&buf[..8]);
    let seq = u64::from_le_bytes(word);
    let values = buf[8..len]
        .chunks_exact(8)
        .map(|c| {
            word.copy_from_slice(c);
            f64::from_le_bytes(word)
        })
        .collect();
    Ok(Some((seq, values)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtcell_shm::RegionLayout;
    use rtcell_shm::mapping::SharedMemory;

    fn region() -> SharedMemory {
        let mut l = RegionLayout::new();
        l.signal("gain", 16).unwrap();
        l.signal(&ack_name("gain"), ack_bytes(2) as u32).unwrap();
        let shm = SharedMemory::create_anonymous("params-test", l.size_bytes()).unwrap();
        l.init(shm.words(), 1).unwrap();
        shm
    }

    #[test]
    fn a_new_value_is_acknowledged_once_with_its_sequence() {
        let shm = region();
        let r = RegionView::attach(shm.words()).unwrap();
        let mut p = ParamReader::attach(&r, "gain").unwrap();
        let ack = r.signal("gain.ack").unwrap();
        assert!(!p.poll().unwrap(), "nothing written yet");
        assert_eq!(read_ack(&ack).unwrap(), None);
        let seq = publish(&r.signal("gain").unwrap(), &[1.5, -2.0]).unwrap();
        assert!(p.poll().unwrap());
        assert!(!p.poll().unwrap(), "the same value is acknowledged once");
        assert_eq!(read_ack(&ack).unwrap(), Some((seq, vec![1.5, -2.0])));
        let seq2 = publish(&r.signal("gain").unwrap(), &[3.0, 4.0]).unwrap();
        assert!(seq2 > seq);
        assert!(p.poll().unwrap());
        assert_eq!(read_ack(&ack).unwrap(), Some((seq2, vec![3.0, 4.0])));
    }

    #[test]
    fn a_writer_caught_mid_update_is_waited_for_not_an_error() {
        let shm = region();
        let r = RegionView::attach(shm.words()).unwrap();
        let mut p = ParamReader::attach(&r, "gain").unwrap();
        let sig = r.signal("gain").unwrap();
        let seq = publish(&sig, &[1.0, 2.0]).unwrap();
        // A writer that stopped half-way: the sequence word is odd.
        sig.seq_word().store(seq + 1, Ordering::Release);
        assert!(!p.poll().unwrap(), "nothing taken while the writer is mid-update");
        sig.seq_word().store(seq, Ordering::Release);
        assert!(p.poll().unwrap(), "taken once the writer is done");
        assert_eq!(read_ack(&r.signal("gain.ack").unwrap()).unwrap(), Some((seq, vec![1.0, 2.0])));
        // The same for the acknowledgement the gateway reads.
        let ack = r.signal("gain.ack").unwrap();
        let s = ack.seq_word().load(Ordering::Acquire);
        ack.seq_word().store(s + 1, Ordering::Release);
        assert_eq!(read_ack(&ack).unwrap(), None);
    }

    #[test]
    fn a_malformed_acknowledgement_is_an_error() {
        let shm = region();
        let r = RegionView::attach(shm.words()).unwrap();
        let ack = r.signal("gain.ack").unwrap();
        ack.write(&[1, 2, 3]).unwrap();
        assert!(read_ack(&ack).is_err());
    }
}
