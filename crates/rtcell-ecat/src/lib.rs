//! EtherCAT for rtcell: a simulated segment of SubDevices on a raw socket (`rtcell ecat-sim`), so a
//! master can be run and tested without hardware.
//!
//! - [`frame`]: EtherCAT frames and datagrams, parsed as untrusted input;
//! - [`esc`]: one simulated SubDevice (registers, SII EEPROM, AL states, SyncManagers, FMMUs, I/O);
//! - [`segment`]: a chain of them answering frames as a real segment does.

pub mod esc;
pub mod frame;
pub mod master;
pub mod net;
pub mod segment;
pub mod sim;
