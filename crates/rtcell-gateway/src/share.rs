//! Shares of a capped resource per key (a peer address, an identity): the one place that counts how
//! many of something each key holds and refuses one more beyond the cap.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// At most `max` held per key at once.
pub struct Shares<K: Hash + Eq + Clone> {
    max: usize,
    held: Mutex<HashMap<K, usize>>,
}

impl<K: Hash + Eq + Clone> Shares<K> {
    pub fn new(max: usize) -> Arc<Shares<K>> {
        Arc::new(Shares { max, held: Mutex::new(HashMap::new()) })
    }

    /// One more for `key`, given back when the [`Share`] is dropped; `None` if `key` holds the most.
    pub fn take(self: &Arc<Self>, key: K) -> Option<Share<K>> {
        let mut m = self.held.lock().ok()?;
        let n = m.entry(key.clone()).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Share { shares: Arc::clone(self), key })
    }
}

/// One of a key's shares.
pub struct Share<K: Hash + Eq + Clone> {
    shares: Arc<Shares<K>>,
    key: K,
}

impl<K: Hash + Eq + Clone> Drop for Share<K> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.shares.held.lock()
            && let Some(n) = m.get_mut(&self.key)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}
