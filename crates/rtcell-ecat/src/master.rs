//! The master: ethercrab brings the segment to OP, then the caller runs process-data cycles on its own
//! thread (a cell's CPU). One thread drives everything: a current-thread runtime polls ethercrab's
//! transmit/receive task and the cycle together, so nothing else is scheduled in between.

use std::sync::Arc;
use std::time::Duration;

use ethercrab::std::{ethercat_now, tx_rx_task};
use ethercrab::subdevice_group::Op;
use ethercrab::{MainDevice, MainDeviceConfig, PduStorage, SubDeviceGroup, Timeouts};

/// Most SubDevices a master handles (a power of two, as ethercrab needs).
pub const MAX_DEVICES: usize = 16;
/// Most process data in bytes, all devices together.
pub const MAX_PDI: usize = 512;
const MAX_FRAMES: usize = 16;
const MAX_PDU_DATA: usize = PduStorage::element_size(1100);

/// A master with its segment in OP.
pub struct Master {
    rt: tokio::runtime::Runtime,
    maindevice: Arc<MainDevice<'static>>,
    group: SubDeviceGroup<MAX_DEVICES, MAX_PDI, ethercrab::DefaultLock, Op>,
    pub interface: String,
    cycle_timeout: Duration,
}

/// How long one exchange may take during bring-up (EEPROM reads, state changes): generous, so a
/// loaded host does not fail the bring-up; cycles have their own, shorter limit.
const BRING_UP_TIMEOUT: Duration = Duration::from_millis(200);

impl Master {
    /// Finds the devices on `interface` and brings them to OP. `timeout`: how long a process-data
    /// exchange may take before its frame counts as lost.
    pub fn bring_up(interface: &str, timeout: Duration) -> Result<Master, String> {
        // A link that is down would only show as timeouts: say so plainly first.
        if let Ok(state) = std::fs::read_to_string(format!("/sys/class/net/{interface}/operstate"))
            && state.trim() == "down"
        {
            return Err(format!(
                "interface {interface} is down: bring it up (ip link set {interface} up) and check the cable"
            ));
        }
        // ethercrab keeps frames in storage that must outlive the master: one small allocation per master,
        // kept for the life of the process.
        let storage: &'static PduStorage<MAX_FRAMES, MAX_PDU_DATA> = Box::leak(Box::new(PduStorage::new()));
        let (tx, rx, pdu_loop) = storage.try_split().map_err(|_| "PDU storage already in use".to_string())?;
        let slow = BRING_UP_TIMEOUT.max(timeout);
        let timeouts = Timeouts {
            pdu: slow,
            eeprom: slow,
            state_transition: Duration::from_secs(5),
            wait_loop_delay: Duration::from_micros(200),
            ..Timeouts::default()
        };
        let maindevice = Arc::new(MainDevice::new(pdu_loop, timeouts, MainDeviceConfig::default()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| format!("master runtime: {e}"))?;
        let task = tx_rx_task(interface, tx, rx).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) => " (raw sockets need CAP_NET_RAW: run as root)",
                Some(libc::ENODEV) => " (no such interface: ip link shows them)",
                _ => "",
            };
            format!("EtherCAT on {interface}: {e}{hint}")
        })?;
        rt.spawn(task);
        let md = Arc::clone(&maindevice);
        let group = rt.block_on(async move {
            let group = md
                .init_single_group::<MAX_DEVICES, MAX_PDI>(ethercat_now)
                .await
                .map_err(|e| format!("finding the devices on {interface}: {e}"))?;
            if group.is_empty() {
                return Err(format!(
                    "no EtherCAT device answered on {interface}: is the segment connected (or rtcell ecat-sim running)?"
                ));
            }
            group.into_op(&md).await.map_err(|e| format!("bringing the devices on {interface} to OP: {e}"))
        })?;
        Ok(Master { rt, maindevice, group, interface: interface.to_string(), cycle_timeout: timeout })
    }

    pub fn devices(&self) -> usize {
        self.group.len()
    }

    /// (order number, vendor id, product code) of each device, in segment order.
    pub fn identities(&self) -> Vec<(String, u32, u32)> {
        self.group
            .iter(&self.maindevice)
            .map(|d| (d.name().to_string(), d.identity().vendor_id, d.identity().product_id))
            .collect()
    }

    /// One process-data exchange (outputs out, inputs in). `Err`: the frame was not back within the
    /// cycle's limit (lost), or ethercrab refused it. A failed exchange lasts the whole limit, as waiting
    /// for a frame that never comes does on a real segment, so a lost segment shows in the cycle time
    /// (and trips a watchdog on it).
    pub fn cycle(&mut self) -> Result<(), String> {
        let t0 = std::time::Instant::now();
        let (group, md, limit) = (&self.group, &self.maindevice, self.cycle_timeout);
        let r = self.rt.block_on(async { tokio::time::timeout(limit, group.tx_rx(md)).await });
        let r = match r {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => format!("exchange failed: {e}"),
            Err(_) => format!("frame lost: not back within {} us", limit.as_micros()),
        };
        while t0.elapsed() < limit {
            std::thread::sleep(Duration::from_micros(50));
        }
        Err(r)
    }

    /// Device `i`'s inputs and outputs, for `f` to read and write.
    pub fn with_io<R>(&mut self, i: usize, f: impl FnOnce(&[u8], &mut [u8]) -> R) -> Option<R> {
        let d = self.group.subdevice(&self.maindevice, i).ok()?;
        let mut io = d.io_raw_mut();
        let inputs = io.inputs().to_vec();
        Some(f(&inputs, io.outputs()))
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        // Back to INIT so real devices drop their outputs; errors do not matter any more.
        let (group, md) = (&self.group, &self.maindevice);
        let _ = self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(2), async {
                let _ = group.tx_rx(md).await;
            })
            .await
        });
    }
}
