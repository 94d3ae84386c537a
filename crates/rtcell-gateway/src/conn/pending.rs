//! A listener's unauthenticated ("pending") TCP connections: which one makes room when they fill their
//! share of the listener (see the module above for the rules).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Conn, Conns, MAX_PREAUTH};
use crate::share::Share;

/// A listener's unauthenticated TCP connections, oldest first per address.
#[derive(Default)]
pub(super) struct Pending {
    n: usize,
    seq: u64,
    by_ip: HashMap<IpAddr, VecDeque<(u64, Conn)>>,
}

/// Of the addresses holding the most unauthenticated connections, the one whose oldest silent connection
/// is oldest (one holding a silent connection first, so a client that has spoken is passed over): the
/// address, how many it holds, and whether it holds a silent one.
fn fullest(p: &Pending) -> Option<(IpAddr, usize, bool)> {
    let most = p.by_ip.values().map(VecDeque::len).max()?;
    p.by_ip
        .iter()
        .filter(|(_, q)| q.len() == most)
        .map(|(ip, q)| {
            let silent = q.iter().find(|(_, c)| !c.has_spoken()).map(|e| e.0);
            let oldest = q.front().map_or(0, |e| e.0);
            (*ip, (silent.is_some(), std::cmp::Reverse(silent.unwrap_or(oldest))))
        })
        .max_by_key(|(_, key)| *key)
        .map(|(ip, (silent, _))| (ip, most, silent))
}

impl Conns {
    /// Counts `conn` among the unauthenticated connections of `ip`: in a free place, or in the place of
    /// one of the address holding the most (if that is more than `ip` holds), or else of one of `ip`'s own
    /// (see [`Conns::evict_oldest`]), or, when all of `ip`'s own have spoken, of a silent one of an address
    /// holding as many; `false` only if `ip` holds none and no address holds more.
    pub(super) fn enter_pending(&self, ip: IpAddr, conn: &Conn) -> bool {
        let Ok(mut p) = self.pending.lock() else { return false };
        if p.n >= MAX_PREAUTH {
            let mine = p.by_ip.get(&ip).map_or(0, VecDeque::len);
            let mine_silent = p.by_ip.get(&ip).is_some_and(|q| q.iter().any(|(_, c)| !c.has_spoken()));
            let victim = match fullest(&p) {
                Some((v, most, _)) if most > mine => Some(v),
                // Its own address holds as many as any: it makes room among its own, a silent one first.
                _ if mine_silent => Some(ip),
                // Every one of its own has spoken (a client writing its first request): an address holding
                // as many gives a silent one rather than the client its place.
                Some((v, _, true)) => Some(v),
                _ => (mine > 0).then_some(ip),
            };
            let Some(v) = victim else { return false };
            self.evict_oldest(&mut p, v);
        }
        p.seq += 1;
        let seq = p.seq;
        p.by_ip.entry(ip).or_default().push_back((seq, conn.clone()));
        p.n += 1;
        conn.0.pending.store(true, Ordering::Release);
        true
    }

    /// Closes an unauthenticated connection of `ip` and returns its place among its address's (see
    /// [`Conns::guard`]): the oldest that has sent nothing yet, or if each has, the oldest. A client that
    /// has written its first request is so passed over in favour of sockets held open in silence, however
    /// fast those are opened beside it. One being admitted right now is passed over, it is no longer pending.
    pub(super) fn evict_oldest(&self, p: &mut Pending, ip: IpAddr) -> Option<Share<IpAddr>> {
        loop {
            let q = p.by_ip.get_mut(&ip)?;
            let at = q.iter().position(|(_, c)| !c.has_spoken()).unwrap_or(0);
            let old = q.remove(at).map(|(_, c)| c);
            if q.is_empty() {
                p.by_ip.remove(&ip);
            }
            let old = old?;
            p.n = p.n.saturating_sub(1);
            old.0.pending.store(false, Ordering::Release);
            let place = old.0.preauth.lock().ok().and_then(|mut pre| pre.take());
            if place.is_some() {
                old.close();
                self.closed.preauth_evicted.fetch_add(1, Ordering::Relaxed);
                return place;
            }
        }
    }

    /// No longer among the unauthenticated connections (admitted, or gone).
    pub(super) fn leave_pending(&self, ip: IpAddr, conn: &Conn) {
        // Every request of an admitted connection comes here: no listener-wide lock for those.
        if !conn.0.pending.load(Ordering::Acquire) {
            return;
        }
        let Ok(mut p) = self.pending.lock() else { return };
        if !conn.0.pending.swap(false, Ordering::AcqRel) {
            return;
        }
        if let Some(q) = p.by_ip.get_mut(&ip) {
            q.retain(|(_, c)| !Arc::ptr_eq(&c.0, &conn.0));
            if q.is_empty() {
                p.by_ip.remove(&ip);
            }
        }
        p.n = p.n.saturating_sub(1);
    }
}
