//! A TAP device as a NIC with offloads.
//!
//! Opened with `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`, a 12-byte virtio-net
//! header on every frame (`TUNSETVNETHDRSZ`), and `TUNSETOFFLOAD` telling the
//! kernel we accept partial checksums and TCP super-segments on read. On
//! write, the header asks the kernel to cut our super-segments (TSO) and
//! finish our checksums (checksum offload). Each of the three can be turned
//! off, so their worth can be measured.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use softoe_stack::{DeviceCaps, TxFrame};
use softoe_sys::ifreq::{self, IfName, IntRequest};
use softoe_sys::tun::{IFF_NO_PI, IFF_TAP, IFF_VNET_HDR, TUN_F_CSUM, TUN_F_TSO4};

use crate::memory::{Gather, Memory};
use crate::netdev;
use crate::port::{Port, RxFrame};
use crate::vnet::{self, VnetHdr};

/// Frames the kernel may hold for the engine to read (the TAP's transmit
/// queue — the engine's receive ring), unless [`TapPort::set_queue_len`]
/// says otherwise. When the engine is the bottleneck, the frames in flight
/// wait here: 10,000 connections each with a request outstanding
/// overflowed the kernel's default 1,000 (Jain's fairness 0.6–0.7, p99
/// 1.4–2.2 s) and still 8,192 (about 30,000 drops and 24,000 client
/// retransmissions in two seconds, p99 0.6 s: `softoe bench --only
/// scale`); with 65,536, none (p99 0.18 s, Linux's 0.12). Only the queue's
/// index costs memory up front (8 bytes a frame); the frames it holds are
/// bounded by the connections' windows, as a socket's buffers are.
pub const DEFAULT_QUEUE_LEN: u32 = 65_536;

/// Most payload references in one frame (the stack never uses more).
const MAX_IOV: usize = 72;

/// Which offloads a TAP port uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TapOffloads {
    /// Write TCP super-segments for the kernel to cut (needs `csum`).
    pub tso: bool,
    /// Leave transport checksums to the kernel (and accept partial ones).
    pub csum: bool,
    /// Accept receive-coalesced super-segments (needs `csum`).
    pub gro: bool,
}

impl Default for TapOffloads {
    fn default() -> TapOffloads {
        TapOffloads {
            tso: true,
            csum: true,
            gro: true,
        }
    }
}

/// A TAP port.
#[derive(Debug)]
pub struct TapPort {
    file: File,
    name: String,
    offloads: TapOffloads,
    mtu: usize,
}

impl TapPort {
    /// Creates (or attaches to) TAP device `name` in the calling thread's
    /// network namespace. The device goes away when the port is dropped.
    pub fn open(name: &str, offloads: TapOffloads, mtu: usize) -> io::Result<TapPort> {
        if name.as_bytes().contains(&0) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"));
        }
        let ifname = IfName::new(name).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "TAP name longer than 15 bytes")
        })?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        let got = softoe_sys::tun::set_iff(&file, &ifname, IFF_TAP | IFF_NO_PI | IFF_VNET_HDR)
            .map_err(|e| match refusal(name, &e) {
                Some(r) => io::Error::new(r.kind(), r),
                None => e,
            })?;
        softoe_sys::tun::set_vnet_hdr_size(&file, vnet::LEN as libc::c_int)?;
        let offloads = TapOffloads {
            tso: offloads.tso && offloads.csum,
            gro: offloads.gro && offloads.csum,
            ..offloads
        };
        let mut flags: libc::c_uint = 0;
        if offloads.csum {
            flags |= TUN_F_CSUM;
        }
        if offloads.gro {
            flags |= TUN_F_TSO4;
        }
        softoe_sys::tun::set_offload(&file, flags)?;
        let name = got.to_string_lossy();
        let port = TapPort {
            file,
            name,
            offloads,
            mtu,
        };
        port.set_queue_len(DEFAULT_QUEUE_LEN)?;
        Ok(port)
    }

    /// A socket to ask the kernel about interfaces with, and the device's
    /// name as `ifr_name`.
    fn ifreq_target(&self) -> io::Result<(std::os::fd::OwnedFd, IfName)> {
        Ok((ifreq::socket()?, IfName::new(&self.name)?))
    }

    /// Sets one of the device's int-valued settings (MTU, transmit queue
    /// length).
    fn set_int(&self, request: IntRequest, value: usize) -> io::Result<()> {
        let (sock, name) = self.ifreq_target()?;
        let value = libc::c_int::try_from(value)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "value too large"))?;
        ifreq::int(&sock, &name, request, value).map(drop)
    }

    /// Sets how many frames the kernel may hold for the engine to read:
    /// the device's transmit queue length, which on a TAP is the engine's
    /// receive ring ([`DEFAULT_QUEUE_LEN`] from [`TapPort::open`]). A burst
    /// beyond it is dropped before the engine sees it.
    pub fn set_queue_len(&self, frames: u32) -> io::Result<()> {
        self.set_int(IntRequest::SetTxQueueLen, frames as usize)
    }

    /// Whether the device is up with carrier (`IFF_UP` and `IFF_RUNNING`):
    /// `ip link set NAME down` on the kernel side takes it out.
    pub fn link_up(&self) -> io::Result<bool> {
        let (sock, name) = self.ifreq_target()?;
        let flags = ifreq::flags(&sock, &name)?;
        let want = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        Ok(flags & want == want)
    }

    /// Sets the device's MTU to the port's and brings it up (what `ip link
    /// set NAME mtu M up` does), so the kernel side passes frames.
    pub fn bring_up(&self) -> io::Result<()> {
        self.set_int(IntRequest::SetMtu, self.mtu)?;
        let (sock, name) = self.ifreq_target()?;
        let flags = ifreq::flags(&sock, &name)?;
        ifreq::set_flags(&sock, &name, flags | libc::IFF_UP as libc::c_short)
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The offloads in use.
    pub fn offloads(&self) -> TapOffloads {
        self.offloads
    }
}

/// What an existing interface that is not a TAP device is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceKind {
    /// A veth.
    Veth,
    /// A Linux bridge.
    Bridge,
    /// A TUN device: IP packets, no Ethernet frames.
    Tun,
    /// The loopback device.
    Loopback,
    /// Another driver's interface (its driver, as `ethtool -i` names it).
    Other(String),
    /// An interface whose driver does not say what it is.
    Unknown,
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceKind::Veth => f.write_str("a veth"),
            DeviceKind::Bridge => f.write_str("a bridge"),
            DeviceKind::Tun => {
                f.write_str("a TUN device (IP packets; a TAP carries Ethernet frames)")
            }
            DeviceKind::Loopback => f.write_str("the loopback device"),
            DeviceKind::Other(d) => write!(f, "a {d} interface"),
            DeviceKind::Unknown => f.write_str("an interface of another kind"),
        }
    }
}

/// Why [`TapPort::open`] could not have the device it was named: the
/// `io::Error` it returns carries this (`get_ref()` and
/// `downcast_ref::<TapRefused>()`), in place of the kernel's bare
/// "Invalid argument" or "Device or resource busy".
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TapRefused {
    /// An interface of that name exists and is not a TAP device.
    NotATap {
        /// The name.
        name: String,
        /// What it is.
        kind: DeviceKind,
    },
    /// A multi-queue TAP device (the port opens single-queue ones).
    MultiQueue {
        /// The name.
        name: String,
    },
    /// A TAP device another file holds open: without multi-queue, a TAP
    /// has one reader.
    Busy {
        /// The name.
        name: String,
        /// The processes holding it (pid, command name), as far as
        /// `/proc` shows them in this network namespace.
        holders: Vec<(u32, String)>,
    },
    /// No interface may have that name.
    BadName {
        /// The name.
        name: String,
    },
}

impl TapRefused {
    /// The `io::ErrorKind` it goes with.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            TapRefused::Busy { .. } => io::ErrorKind::ResourceBusy,
            _ => io::ErrorKind::InvalidInput,
        }
    }
}

impl std::fmt::Display for TapRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const OTHER: &str = "name a TAP, or a new name for softoe to create";
        match self {
            TapRefused::NotATap { name, kind } => {
                write!(f, "{name} exists and is {kind}")?;
                if *kind != DeviceKind::Tun {
                    f.write_str(" (not a TAP device)")?;
                }
                write!(f, ": {OTHER}")
            }
            TapRefused::MultiQueue { name } => write!(
                f,
                "{name} is a multi-queue TAP device, and softoe opens single-queue ones \
                 (ip tuntap add mode tap NAME, without multi_queue): {OTHER}"
            ),
            TapRefused::Busy { name, holders } => {
                write!(f, "TAP device {name} is busy: ")?;
                if holders.is_empty() {
                    f.write_str("another process")?;
                } else {
                    let who: Vec<String> = holders
                        .iter()
                        .map(|(pid, comm)| format!("{comm} (pid {pid})"))
                        .collect();
                    f.write_str(&who.join(", "))?;
                }
                write!(
                    f,
                    " holds it open, and a TAP without multi-queue has one reader: stop that \
                     process, or name another TAP, or a new name for softoe to create"
                )
            }
            TapRefused::BadName { name } => write!(
                f,
                "{name:?} is not a valid interface name (1 to 15 bytes, no '/', ':' or white \
                 space, not '.' or '..')"
            ),
        }
    }
}

impl std::error::Error for TapRefused {}

/// Why `TUNSETIFF` on `name` failed with `e`, when the device says more
/// than the errno: it exists and is no TAP (`EINVAL`), is a multi-queue
/// TAP (`EINVAL`), or is a TAP another process holds (`EBUSY`); or the
/// name is not one an interface may have (`EINVAL`, no such device).
/// `None`: the errno is all there is to say.
fn refusal(name: &str, e: &io::Error) -> Option<TapRefused> {
    let errno = e.raw_os_error()?;
    if errno != libc::EINVAL && errno != libc::EBUSY {
        return None;
    }
    let sock = netdev::inet_socket().ok()?;
    let name_ = || name.to_string();
    let kind = match netdev::driver(&sock, name) {
        // `tun` with bus `tap` is a TAP; with bus `tun`, a TUN device.
        Ok((driver, bus)) => match driver.as_str() {
            "tun" if bus == "tap" => None,
            "tun" => Some(DeviceKind::Tun),
            "veth" => Some(DeviceKind::Veth),
            "bridge" => Some(DeviceKind::Bridge),
            "" => Some(DeviceKind::Unknown),
            _ => Some(DeviceKind::Other(driver)),
        },
        Err(d) if d.kind() == io::ErrorKind::NotFound => {
            // Nothing of that name: the kernel refused the name itself.
            return (errno == libc::EINVAL).then(|| TapRefused::BadName { name: name_() });
        }
        // The driver does not tell (loopback has no driver information).
        Err(_) => match netdev::flags(&sock, name) {
            Ok(f) if f & libc::IFF_LOOPBACK as libc::c_short != 0 => Some(DeviceKind::Loopback),
            Ok(_) => Some(DeviceKind::Unknown),
            Err(_) => return None,
        },
    };
    if let Some(kind) = kind {
        return Some(TapRefused::NotATap {
            name: name_(),
            kind,
        });
    }
    if errno == libc::EBUSY {
        return Some(TapRefused::Busy {
            name: name_(),
            holders: holders(name),
        });
    }
    // A TAP refused as it was made: the kernel insists on the same
    // multi-queue setting (IFF_MULTI_QUEUE, 0x100, in `tun_flags`).
    let flags = std::fs::read_to_string(format!("/sys/class/net/{name}/tun_flags")).ok()?;
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).ok()?;
    (flags & 0x100 != 0).then(|| TapRefused::MultiQueue { name: name_() })
}

/// The processes of this network namespace holding TAP device `name` open
/// (`/proc/PID/fdinfo` of a `/dev/net/tun` file names its device, `iff:`),
/// as (pid, command name). A process elsewhere may hold a device of the
/// same name in its own namespace: those are left out, so the list may be
/// empty.
fn holders(name: &str) -> Vec<(u32, String)> {
    let ours = std::fs::read_link("/proc/thread-self/ns/net").ok();
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return found;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let base = p.path();
        if ours.is_none() || std::fs::read_link(base.join("ns/net")).ok() != ours {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(base.join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|t| t == std::path::Path::new("/dev/net/tun"))
                && std::fs::read_to_string(base.join("fdinfo").join(fd.file_name())).is_ok_and(
                    |info| {
                        info.lines()
                            .any(|l| l.strip_prefix("iff:").map(str::trim) == Some(name))
                    },
                )
        });
        if holds {
            let comm = std::fs::read_to_string(base.join("comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_default();
            found.push((pid, comm));
        }
    }
    found
}

/// Frames device `dev` of the calling thread's network namespace dropped on
/// transmit, from `/proc/thread-self/net/dev` (`/proc/net` would show the
/// namespace of the process's first thread). On a TAP, transmit is toward
/// the program that reads it: these are frames the engine never saw.
pub fn queue_drops(dev: &str) -> io::Result<u64> {
    let t = std::fs::read_to_string("/proc/thread-self/net/dev")?;
    dev_tx_dropped(&t, dev).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no device {dev} in /proc/net/dev"),
        )
    })
}

/// The transmit-drop column of `dev`'s line of `/proc/net/dev`'s text.
fn dev_tx_dropped(t: &str, dev: &str) -> Option<u64> {
    let line = t
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(dev)?.strip_prefix(':'))?;
    // Receive: bytes packets errs drop fifo frame compressed multicast;
    // transmit: bytes packets errs drop …
    line.split_whitespace().nth(11)?.parse().ok()
}

impl Port for TapPort {
    fn steer_device(&self) -> Option<&str> {
        Some(&self.name)
    }

    fn dropped(&mut self) -> Option<u64> {
        queue_drops(&self.name).ok()
    }

    fn carrier(&mut self) -> Option<bool> {
        self.link_up().ok()
    }

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            mtu: self.mtu,
            tso_max: self.offloads.tso.then_some(65_535),
            tx_csum: self.offloads.csum,
        }
    }

    fn send(&mut self, frame: &TxFrame<'_>, mem: &Memory) -> io::Result<bool> {
        if frame.payload.len() + 2 > MAX_IOV + 2 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "too many payload references",
            ));
        }
        let hdr = VnetHdr::for_tx(&frame.offload, frame.header.len()).to_bytes();
        // Payload by address and length: it may be a program's shared
        // memory, which only the kernel reads (see `memory`).
        match mem.write_gathered(
            self.file.as_fd(),
            &[&hdr[..], frame.header],
            frame.payload,
            Gather::Write,
        ) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<RxFrame>> {
        let n = match io::Read::read(&mut &self.file, buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = buf
            .get(..n)
            .and_then(VnetHdr::parse)
            .map(|h| h.rx_meta())
            .unwrap_or_default();
        Ok(Some(RxFrame {
            start: vnet::LEN.min(n),
            len: n.saturating_sub(vnet::LEN),
            meta,
        }))
    }

    fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn describe(&self) -> String {
        format!(
            "tap {} (tso {}, csum {}, gro {})",
            self.name, self.offloads.tso, self.offloads.csum, self.offloads.gro
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn reads_a_devices_transmit_drops() {
        let dev = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
            lo:    6386      58    0    0    0     0          0         0     6386      58    0    0    0     0       0          0\n\
            sot12:1000 10 0 4 0 0 0 0 2000 20 0 321 0 0 0 0\n \
            sot1: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n";
        assert_eq!(dev_tx_dropped(dev, "sot12"), Some(321));
        assert_eq!(dev_tx_dropped(dev, "sot1"), Some(12));
        assert_eq!(dev_tx_dropped(dev, "lo"), Some(0));
        assert_eq!(dev_tx_dropped(dev, "eth9"), None);
    }
}
