//! The wire: a raw `AF_PACKET` socket on one interface for EtherCAT frames, and veth pairs (optionally
//! across network namespaces) for a simulated segment, created and removed with iproute2.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;

use crate::frame::ETHERTYPE;

/// A raw socket receiving and sending EtherCAT frames on one interface.
pub struct RawSocket {
    fd: OwnedFd,
    ifindex: i32,
    pub interface: String,
}

fn err(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl RawSocket {
    /// Opens a socket on `interface`. Needs CAP_NET_RAW; the errors say which interface and why.
    pub fn open(interface: &str) -> io::Result<RawSocket> {
        let name = std::ffi::CString::new(interface)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with a NUL byte"))?;
        // SAFETY: if_nametoindex reads the NUL-terminated name only.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("interface {interface:?} does not exist (ip link shows the interfaces)"),
            ));
        }
        let proto = (ETHERTYPE).to_be() as i32;
        // SAFETY: socket() creates a descriptor; nothing is passed in.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            let hint = if e.raw_os_error() == Some(libc::EPERM) {
                " (raw sockets need CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` the binary)"
            } else {
                ""
            };
            return Err(io::Error::new(e.kind(), format!("raw socket on {interface}: {e}{hint}")));
        }
        // SAFETY: `raw` is a descriptor we just created and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETHERTYPE.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: binds our socket to a properly sized sockaddr_ll.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            return Err(err(&format!("bind to {interface}"), io::Error::last_os_error()));
        }
        Ok(RawSocket { fd, ifindex, interface: interface.to_string() })
    }

    /// Sets a receive timeout (None: block).
    pub fn set_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        let tv = match t {
            Some(d) => {
                libc::timeval { tv_sec: d.as_secs() as libc::time_t, tv_usec: d.subsec_micros() as libc::suseconds_t }
            }
            None => libc::timeval { tv_sec: 0, tv_usec: 0 },
        };
        // SAFETY: passes a timeval of the right size for SO_RCVTIMEO.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        if rc != 0 {
            return Err(err("SO_RCVTIMEO", io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Receives one frame that arrived on the interface (not one this host sent); returns its length.
    /// `Ok(None)` on timeout.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.recv_flags(buf, 0)
    }

    /// Waits up to `timeout` for a frame to read (to the microsecond: `ppoll`, not a millisecond
    /// `poll`). `Ok(false)`: none came, or a signal interrupted the wait.
    pub fn wait_readable(&self, timeout: std::time::Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(err(&format!("wait on {}", self.interface), e));
        }
        Ok(rc > 0)
    }

    /// Busy-polls for a frame until `until`: sees it the moment it lands, at the cost of the whole CPU.
    pub fn spin_recv(&self, buf: &mut [u8], until: std::time::Instant) -> io::Result<Option<usize>> {
        loop {
            match self.try_recv(buf)? {
                Some(n) => return Ok(Some(n)),
                None if std::time::Instant::now() < until => std::hint::spin_loop(),
                None => return Ok(None),
            }
        }
    }

    /// [`RawSocket::recv`] without waiting: `Ok(None)` when nothing is there (for busy-polling).
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        self.recv_flags(buf, libc::MSG_DONTWAIT)
    }

    fn recv_flags(&self, buf: &mut [u8], flags: i32) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: sockaddr_ll is plain data.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            // SAFETY: recvfrom writes at most buf.len() bytes into buf and at most `len` into `from`.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    flags,
                    &mut from as *mut libc::sockaddr_ll as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(err(&format!("receive on {}", self.interface), e)),
                };
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            return Ok(Some(n as usize));
        }
    }

    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain data.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_protocol = ETHERTYPE.to_be();
        to.sll_ifindex = self.ifindex;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&frame[..6.min(frame.len())]);
        // SAFETY: sends `frame` (its length) to a properly sized sockaddr_ll.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
                &to as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if n < 0 {
            return Err(err(&format!("send on {}", self.interface), io::Error::last_os_error()));
        }
        Ok(())
    }
}

/// Runs `ip ARGS`; its standard output, or an error with its message.
fn ip(args: &[&str]) -> io::Result<String> {
    let o = Command::new("ip").args(args).output().map_err(|e| err("ip (iproute2)", e))?;
    if !o.status.success() {
        return Err(io::Error::other(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim())));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Whether `dev` (in namespace `ns`, if given) passes frames: up, with carrier, activated by the kernel.
fn forwarding(ns: Option<&str>, dev: &str) -> io::Result<bool> {
    let mut args = Vec::new();
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["-o", "link", "show", "dev", dev]);
    let line = ip(&args)?;
    Ok(line.contains(" state UP ") && !line.contains(" qdisc noop "))
}

/// A veth pair: `master` for the master, `segment` for the simulated devices (in namespace `netns` if
/// given, created here). Removed, namespace and all, when dropped.
pub struct Veth {
    pub master: String,
    pub segment: String,
    pub netns: Option<String>,
}

impl Veth {
    /// Creates `NAME-m` and `NAME-s`, both up. Fails if they exist (another run, or a leftover: `ip link
    /// del NAME-m` removes it).
    pub fn create(name: &str, netns: bool) -> io::Result<Veth> {
        let (m, s) = (format!("{name}-m"), format!("{name}-s"));
        if m.len() > 15 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{m:?}: interface names are at most 15 characters"),
            ));
        }
        ip(&["link", "add", &m, "type", "veth", "peer", "name", &s])?;
        // From here on, dropping `v` removes the pair: an error below leaves nothing behind.
        let mut v = Veth { master: m.clone(), segment: s.clone(), netns: None };
        if netns {
            let ns = format!("{name}-ns");
            ip(&["netns", "add", &ns])?;
            v.netns = Some(ns.clone());
            ip(&["link", "set", &s, "netns", &ns])?;
            ip(&["-n", &ns, "link", "set", &s, "up"])?;
        } else {
            ip(&["link", "set", &s, "up"])?;
        }
        // No IPv6 chatter on the master's side: only EtherCAT frames there.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{m}/disable_ipv6"), "1");
        ip(&["link", "set", &m, "up"])?;
        // Until the kernel's link watcher has activated a device (state UP, a real queueing discipline
        // instead of "noop"), every frame sent through it is dropped. The carrier is on before that, and
        // the watcher can lag by hundreds of ms (it waits for the lock a namespace being created holds):
        // wait for both ends.
        let t0 = std::time::Instant::now();
        for (ns, dev) in [(None, &v.master), (v.netns.as_deref(), &v.segment)] {
            while !forwarding(ns, dev)? {
                if t0.elapsed() > std::time::Duration::from_secs(10) {
                    return Err(io::Error::other(format!(
                        "{dev}: not forwarding frames 10 s after creating the veth pair (ip link show {dev})"
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        Ok(v)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting one end deletes both; the namespace goes after.
        let _ = ip(&["link", "del", &self.master]);
        if let Some(ns) = &self.netns {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// Moves the calling thread into network namespace `name` (made by [`Veth::create`]).
pub fn enter_netns(name: &str) -> io::Result<()> {
    let path = format!("/var/run/netns/{name}");
    let f = std::fs::File::open(&path).map_err(|e| err(&path, e))?;
    // SAFETY: setns on a namespace file we opened; affects only this thread.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(err(&format!("enter namespace {name}"), io::Error::last_os_error()));
    }
    Ok(())
}
