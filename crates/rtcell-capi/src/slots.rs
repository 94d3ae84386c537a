//! Where handles live: on the heap on the host; in a payload (no allocator) in small static pools.

#[cfg(feature = "std")]
pub(crate) fn alloc<T>(value: T) -> Option<*mut T> {
    Some(Box::into_raw(Box::new(value)))
}

/// # Safety
/// `p` came from [`alloc`] of the same `T` and is not used afterwards.
#[cfg(feature = "std")]
pub(crate) unsafe fn free<T>(p: *mut T) {
    // SAFETY: by the contract, p is a live Box of T that nobody uses any more.
    drop(unsafe { Box::from_raw(p) });
}

#[cfg(not(feature = "std"))]
pub(crate) use pool::{alloc, free};

#[cfg(not(feature = "std"))]
mod pool {
    use core::cell::UnsafeCell;
    use core::mem::MaybeUninit;
    use core::sync::atomic::{AtomicBool, Ordering};

    /// Handles of one type a payload may hold at once.
    const SLOTS: usize = 4;

    /// A fixed pool of slots for values of one type.
    pub(crate) struct Pool<T> {
        used: [AtomicBool; SLOTS],
        slots: [UnsafeCell<MaybeUninit<T>>; SLOTS],
    }

    // SAFETY: a slot is handed out once (the `used` flag is taken atomically) and only its holder
    // touches it until it is given back.
    unsafe impl<T> Sync for Pool<T> {}

    impl<T> Pool<T> {
        pub(crate) const fn new() -> Self {
            Pool {
                used: [const { AtomicBool::new(false) }; SLOTS],
                slots: [const { UnsafeCell::new(MaybeUninit::uninit()) }; SLOTS],
            }
        }
    }

    /// The pool of each handle type.
    pub(crate) trait Pooled: Sized + 'static {
        fn pool() -> &'static Pool<Self>;
    }

    pub(crate) fn alloc<T: Pooled>(value: T) -> Option<*mut T> {
        let pool = T::pool();
        for (used, slot) in pool.used.iter().zip(&pool.slots) {
            if used.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                let p = slot.get() as *mut T;
                // SAFETY: the slot is ours (flag taken) and sized and aligned for T.
                unsafe { p.write(value) };
                return Some(p);
            }
        }
        None
    }

    /// # Safety
    /// `p` came from [`alloc`] of the same `T` and is not used afterwards.
    pub(crate) unsafe fn free<T: Pooled>(p: *mut T) {
        let pool = T::pool();
        for (used, slot) in pool.used.iter().zip(&pool.slots) {
            if slot.get() as *mut T == p {
                // SAFETY: p holds a T written by alloc, no longer used by anyone.
                unsafe { p.drop_in_place() };
                used.store(false, Ordering::Release);
                return;
            }
        }
    }
}

#[cfg(not(feature = "std"))]
pub(crate) use pool::{Pool, Pooled};

/// Gives handle type `$t` a static pool of its own (payloads, no allocator).
#[cfg(not(feature = "std"))]
macro_rules! pooled {
    ($t:ty) => {
        impl crate::slots::Pooled for $t {
            fn pool() -> &'static crate::slots::Pool<Self> {
                static POOL: crate::slots::Pool<$t> = crate::slots::Pool::new();
                &POOL
            }
        }
    };
}
#[cfg(not(feature = "std"))]
pub(crate) use pooled;
