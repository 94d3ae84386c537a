//! A listener's unauthenticated ("pending") TCP connections: which one makes room when they fill their
//! share of the listener (see the module above for the rules).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
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

/// Which connection makes room for a newcomer when the pending places are all taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// The oldest silent connection of the address, or if each has spoken, its oldest.
    Oldest(IpAddr),
    /// Exactly this silent connection (by its number) of an address that holds as many as the
    /// newcomer's; if it has spoken by the time room is made, the newcomer's own address makes room.
    Silent(IpAddr, u64),
}

/// Of the addresses holding the most unauthenticated connections, the one whose oldest silent connection
/// is oldest (one holding a silent connection first, so a client that has spoken is passed over): the
/// address, how many it holds, and the number of that silent connection if it holds one.
fn fullest(p: &Pending) -> Option<(IpAddr, usize, Option<u64>)> {
    let most = p.by_ip.values().map(VecDeque::len).max()?;
    p.by_ip
        .iter()
        .filter(|(_, q)| q.len() == most)
        .map(|(ip, q)| {
            let silent = q.iter().find(|(_, c)| !c.has_spoken()).map(|e| e.0);
            let oldest = q.front().map_or(0, |e| e.0);
            (*ip, silent, std::cmp::Reverse(silent.unwrap_or(oldest)))
        })
        .max_by_key(|(_, silent, age)| (silent.is_some(), *age))
        .map(|(ip, silent, _)| (ip, most, silent))
}

/// Which connection makes room for a newcomer of `ip` (the rules of [`Conns::enter_pending`]), or `None`
/// if `ip` holds none and no address holds more.
fn choose(p: &Pending, ip: IpAddr) -> Option<Room> {
    let own = p.by_ip.get(&ip);
    let mine = own.map_or(0, VecDeque::len);
    let mine_silent = own.is_some_and(|q| q.iter().any(|(_, c)| !c.has_spoken()));
    match fullest(p) {
        Some((v, most, _)) if most > mine => Some(Room::Oldest(v)),
        // Its own address holds as many as any: it makes room among its own, a silent one first.
        _ if mine_silent => Some(Room::Oldest(ip)),
        // Every one of its own has spoken (a client writing its first request): an address holding as
        // many gives a silent one rather than the client its place.
        Some((v, _, Some(seq))) => Some(Room::Silent(v, seq)),
        _ => (mine > 0).then_some(Room::Oldest(ip)),
    }
}

impl Conns {
    /// Counts `conn` among the unauthenticated connections of `ip`: in a free place, or in the place of
    /// one of the address holding the most (if that is more than `ip` holds), or else of one of `ip`'s own
    /// (see [`Conns::evict_oldest`]), or, when all of `ip`'s own have spoken, of a silent one of an address
    /// holding as many; `false` only if `ip` holds none and no address holds more.
    pub(super) fn enter_pending(&self, ip: IpAddr, conn: &Conn) -> bool {
        let Ok(mut p) = self.pending.lock() else { return false };
        if p.n >= MAX_PREAUTH {
            let Some(room) = choose(&p, ip) else { return false };
            self.make_room(&mut p, ip, room);
        }
        p.seq += 1;
        let seq = p.seq;
        p.by_ip.entry(ip).or_default().push_back((seq, conn.clone()));
        p.n += 1;
        conn.0.pending.store(true, Ordering::Release);
        true
    }

    /// Closes the connection `room` names, for a newcomer of `ip`. The peer's bytes may have arrived since
    /// the choice (the pending lock does not hold them back): a connection chosen for being silent that
    /// has spoken since is not closed, the choice is made again (another address's silent one, or else
    /// `ip`'s own). Each new choice follows a silent connection turning spoken, so there are at most as
    /// many as pending connections.
    fn make_room(&self, p: &mut Pending, ip: IpAddr, mut room: Room) {
        for _ in 0..=MAX_PREAUTH {
            match room {
                Room::Oldest(v) => {
                    self.evict_oldest(p, v);
                    return;
                }
                Room::Silent(v, seq) => {
                    let still_silent =
                        |q: &VecDeque<(u64, Conn)>| q.iter().position(|(s, c)| *s == seq && !c.has_spoken());
                    if self.evict_at(p, v, still_silent).is_some() {
                        return;
                    }
                    match choose(p, ip) {
                        Some(r) => room = r,
                        None => return,
                    }
                }
            }
        }
        self.evict_oldest(p, ip);
    }

    /// Closes an unauthenticated connection of `ip` and returns its place among its address's (see
    /// [`Conns::guard`]): the oldest that has sent nothing yet, or if each has, the oldest. A client that
    /// has written its first request is so passed over in favour of sockets held open in silence, however
    /// fast those are opened beside it. One being admitted right now is passed over, it is no longer pending.
    pub(super) fn evict_oldest(&self, p: &mut Pending, ip: IpAddr) -> Option<Share<IpAddr>> {
        let oldest = |q: &VecDeque<(u64, Conn)>| Some(q.iter().position(|(_, c)| !c.has_spoken()).unwrap_or(0));
        loop {
            if let Some(place) = self.evict_at(p, ip, oldest)? {
                return Some(place);
            }
        }
    }

    /// Takes the connection of `ip` that `at` finds out of the pending ones: `None` if there is none,
    /// `Some(None)` if it is being admitted right now (it keeps its socket), else it is closed and its
    /// place returned.
    fn evict_at(
        &self,
        p: &mut Pending,
        ip: IpAddr,
        at: impl FnOnce(&VecDeque<(u64, Conn)>) -> Option<usize>,
    ) -> Option<Option<Share<IpAddr>>> {
        let q = p.by_ip.get_mut(&ip)?;
        let old = at(q).and_then(|i| q.remove(i)).map(|(_, c)| c);
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
        }
        Some(place)
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
            q.retain(|(_, c)| !c.is(conn));
            if q.is_empty() {
                p.by_ip.remove(&ip);
            }
        }
        p.n = p.n.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 1, n])
    }

    /// A connection of `ip` counted among the pending ones, having spoken or not.
    fn enter(conns: &Arc<Conns>, ip: IpAddr, spoken: bool) -> Conn {
        let c = Conn::default();
        c.0.spoke.store(spoken, Ordering::Release);
        *c.0.preauth.lock().expect("preauth") = conns.per_ip.take(ip);
        assert!(conns.enter_pending(ip, &c), "no place for {ip}");
        c
    }

    fn closed(c: &Conn) -> bool {
        c.0.closing.load(Ordering::Acquire)
    }

    /// The pending places full: `b` holds a client that has spoken and a silent socket, `n` holds two
    /// that have spoken, every other address one that has spoken.
    fn full() -> (Arc<Conns>, [Conn; 2], [Conn; 2]) {
        let conns = Conns::new(Arc::default());
        let b = [enter(&conns, ip(1), true), enter(&conns, ip(1), false)];
        let n = [enter(&conns, ip(2), true), enter(&conns, ip(2), true)];
        for k in 0..MAX_PREAUTH - 4 {
            let other = IpAddr::from([127, 0, 2, u8::try_from(k).expect("fewer than 256")]);
            enter(&conns, other, true);
        }
        (conns, b, n)
    }

    #[test]
    fn a_tie_closes_the_silent_connection_of_the_other_address() {
        let (conns, b, n) = full();
        enter(&conns, ip(2), true);
        assert!(closed(&b[1]), "the silent socket makes room");
        assert!(!closed(&b[0]) && !closed(&n[0]) && !closed(&n[1]));
    }

    #[test]
    fn a_silent_connection_that_speaks_after_the_choice_is_not_closed_nor_its_address_s_client() {
        let (conns, b, n) = full();
        let mut p = conns.pending.lock().expect("pending");
        let room = choose(&p, ip(2));
        assert_eq!(room, Some(Room::Silent(ip(1), 2)));
        // Its first bytes arrive between the choice and the eviction.
        b[1].0.spoke.store(true, Ordering::Release);
        conns.make_room(&mut p, ip(2), room.expect("a room"));
        drop(p);
        assert!(!closed(&b[0]) && !closed(&b[1]), "the other address's clients keep their places");
        assert!(closed(&n[0]) && !closed(&n[1]), "the newcomer's address makes room, its oldest");
    }

    #[test]
    fn when_the_chosen_silent_connection_speaks_another_address_s_silent_one_makes_room() {
        let conns = Conns::new(Arc::default());
        let b = [enter(&conns, ip(1), true), enter(&conns, ip(1), false)];
        let c = [enter(&conns, ip(3), true), enter(&conns, ip(3), false)];
        let n = [enter(&conns, ip(2), true), enter(&conns, ip(2), true)];
        for k in 0..MAX_PREAUTH - 6 {
            enter(&conns, IpAddr::from([127, 0, 2, u8::try_from(k).expect("fewer than 256")]), true);
        }
        let mut p = conns.pending.lock().expect("pending");
        let room = choose(&p, ip(2));
        assert_eq!(room, Some(Room::Silent(ip(1), 2)), "the oldest silent one of the tied addresses");
        b[1].0.spoke.store(true, Ordering::Release);
        conns.make_room(&mut p, ip(2), room.expect("a room"));
        drop(p);
        assert!(closed(&c[1]), "the other tied address's silent socket makes room");
        assert!(!closed(&b[0]) && !closed(&b[1]) && !closed(&c[0]) && !closed(&n[0]) && !closed(&n[1]));
    }
}
