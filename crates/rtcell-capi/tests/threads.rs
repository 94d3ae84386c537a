//! Two threads, each with its own current context on the same region: a value sent by one with
//! Com_SendSignal is read by the other with Com_ReceiveSignal, and echoed back.

use std::ffi::c_void;

use rtcell_capi::com::{Com_ReceiveSignal, Com_SendSignal, rtcell_cell_attach};
use rtcell_capi::{E_OK, rtcell_last_error};
use rtcell_shm::mapping::SharedMemory;
use rtcell_shm::{ComConfig, RegionLayout, SignalDef};

fn attach(shm: &SharedMemory) {
    // SAFETY: the region outlives both threads.
    let code = unsafe { rtcell_cell_attach(shm.as_ptr() as *mut c_void, shm.len(), std::ptr::null(), 0) };
    // SAFETY: rtcell_last_error returns a NUL-terminated string.
    let why = unsafe { std::ffi::CStr::from_ptr(rtcell_last_error()) }.to_string_lossy().into_owned();
    assert_eq!(code, E_OK, "{why}");
}

#[test]
fn two_threads_ping_pong_through_the_autosar_names() {
    let one =
        |id| ComConfig { signals: vec![SignalDef { id, max_len: 8, dynamic: false, group: None }], groups: vec![] };
    let mut l = RegionLayout::new();
    l.com("ping", one(1)).unwrap().com("pong", one(2)).unwrap();
    let shm = SharedMemory::create_anonymous("threads", l.size_bytes()).unwrap();
    l.init(shm.words(), std::process::id()).unwrap();
    const N: u64 = 2000;
    std::thread::scope(|s| {
        s.spawn(|| {
            attach(&shm);
            let (mut seen, mut v) = (0u64, 0u64);
            while seen != N {
                // SAFETY: v is 8 bytes, the signal's length.
                assert_eq!(unsafe { Com_ReceiveSignal(1, &mut v as *mut u64 as *mut c_void) }, E_OK);
                if v != seen {
                    seen = v;
                    // SAFETY: as above.
                    assert_eq!(unsafe { Com_SendSignal(2, &v as *const u64 as *const c_void) }, E_OK);
                }
            }
        });
        attach(&shm);
        for v in 1..=N {
            // SAFETY: v is 8 bytes, the signal's length.
            assert_eq!(unsafe { Com_SendSignal(1, &v as *const u64 as *const c_void) }, E_OK);
            let mut back = 0u64;
            let mut spins = 0u64;
            while back != v {
                // SAFETY: as above.
                assert_eq!(unsafe { Com_ReceiveSignal(2, &mut back as *mut u64 as *mut c_void) }, E_OK);
                spins += 1;
                assert!(spins < 50_000_000, "no echo of {v}: last read {back}");
            }
        }
    });
}
