//! Exception reports: what the payload did wrong, in words, from what the ring-0 stubs left behind.
//!
//! Design: the exception stubs `layout` installs write a [`FaultInfo`] into the message buffer and make
//! the exception-report hypercall; the monitor trusts that report only when the vCPU is in ring 0 (only
//! the stubs run there), so a payload cannot forge an exception it did not have.

use kvm_ioctls::VcpuFd;
use rtcell_guest::abi::{FaultInfo, MSG_GPA, REGION_GPA, vector_name};

use crate::layout;
use crate::memory::GuestRam;

/// The report of an exception the ring-0 stubs caught. Only they run in ring 0: the same hypercall made
/// from ring 3 is the payload's own forgery, reported as such and never as an exception it did not have.
pub(crate) fn exception_report(vcpu: &VcpuFd, ram: &GuestRam, vector: u64) -> String {
    match vcpu.get_sregs() {
        Ok(s) if s.cs.dpl == 0 => fault_report(ram, vector),
        Ok(s) => format!(
            "forged exception report: the payload made the exception-report hypercall itself (ring {}, vector {vector}); the monitor saw no exception",
            s.cs.dpl
        ),
        Err(e) => format!("exception-report hypercall, but the vCPU's privilege level is unknown (KVM_GET_SREGS: {e})"),
    }
}

fn fault_report(ram: &GuestRam, vector: u64) -> String {
    let raw = ram.read(MSG_GPA, core::mem::size_of::<FaultInfo>());
    let w = |i: usize| raw.get(i * 8..i * 8 + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let (error, rip, rsp, cr2) = (w(1), w(2), w(3), w(4));
    let mut s = format!("{} at RIP {rip:#x} (RSP {rsp:#x})", vector_name(vector));
    if vector == 14 {
        s.push_str(&page_fault(ram, error, cr2));
    } else if error != 0 {
        s.push_str(&format!(", error code {error:#x}"));
    }
    s
}

/// A page fault's access, cause and likely meaning, from its error code and faulting address (CR2).
fn page_fault(ram: &GuestRam, error: u64, cr2: u64) -> String {
    let what = match error {
        e if e & 16 != 0 => "instruction fetch",
        e if e & 2 != 0 => "write",
        _ => "read",
    };
    let why = match error {
        e if e & 16 != 0 && e & 1 != 0 => "the page is not executable (NX)",
        e if e & 1 != 0 => "protection violation",
        _ => "page not mapped",
    };
    let mut s = format!(": {what} of address {cr2:#x}, {why}");
    if layout::stack_guard(ram.size()).contains(&cr2) {
        s.push_str(" (stack overflow: the guard page under the stack)");
    } else if cr2 >= REGION_GPA && error & 16 != 0 {
        s.push_str(" (the channel region is never executable)");
    }
    s
}
