//! Kernel timestamps of marked frames on every device of a namespace: where
//! a message was, and when, between two programs.
//!
//! A [`WireTap`] is one `AF_PACKET` socket in a namespace, unbound (so it
//! sees every device there, both ways), with a classic BPF filter that
//! keeps only IPv4 TCP and UDP frames whose transport payload begins with a
//! 4-byte mark, and `SO_TIMESTAMPNS` so each comes with the kernel's time
//! of the sighting. The filter runs in the kernel: bulk traffic beside the
//! marked messages costs no copy to user space.
//!
//! Where a sighting happens says what it means. On a TAP device the
//! frames its program *writes* are seen as they enter the kernel, before
//! any ingress shaping (the packet taps run before tc ingress): the time
//! the frame reached the "wire". The frames the kernel *sends* to the TAP
//! are seen as they leave its qdisc (`outgoing`), after the egress
//! shaping: the time the frame was handed to the receiving program's
//! device. A frame redirected through an `ifb` and handed back shows up
//! again on its TAP after the shaping; the earliest sighting is the first.
//!
//! ```no_run
//! use softoe_testbed::{Netns, WireTap};
//! let ns = Netns::named("sw");
//! let tap = WireTap::start(&ns, *b"RTMS")?;
//! // … marked messages cross the namespace …
//! for s in tap.stop()? {
//!     println!("{} {} {:?}", s.dev, s.outgoing, s.at);
//! }
//! # Ok::<(), softoe_testbed::Error>(())
//! ```

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::{Error, Netns, NsThread, Result};

/// One marked frame seen on a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// The device's name.
    pub dev: String,
    /// The kernel was sending it out of `dev` (after its qdisc); otherwise
    /// `dev` was receiving it (for a TAP: its program wrote it).
    pub outgoing: bool,
    /// The kernel's timestamp (`CLOCK_REALTIME`).
    pub at: SystemTime,
    /// The transport payload (from the mark on), as far as it was captured.
    pub payload: Vec<u8>,
}

/// Records marked frames in a namespace until stopped; see the module docs.
#[derive(Debug)]
pub struct WireTap {
    stop: Arc<AtomicBool>,
    thread: NsThread<std::io::Result<Vec<Sighting>>>,
}

/// The longest frame kept (marked messages are small).
const SNAP: usize = 2048;

/// `struct sock_filter`'s codes (linux/bpf_common.h, linux/filter.h).
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_W_IND: u16 = 0x40;
const LD_B_IND: u16 = 0x50;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const RSH_K: u16 = 0x74;
const LSH_K: u16 = 0x64;
const ADD_X: u16 = 0x0c;
const TAX: u16 = 0x07;
const RET_K: u16 = 0x06;

const fn ins(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter: IPv4, TCP or UDP, transport payload starting with `mark`:
/// keep up to [`SNAP`] bytes; drop every other frame. A jump's offsets
/// count instructions after it.
fn program(mark: [u8; 4]) -> Vec<libc::sock_filter> {
    let m = u32::from_be_bytes(mark);
    vec![
        /* 0 */ ins(LD_H_ABS, 0, 0, 12), // EtherType
        /* 1 */ ins(JEQ_K, 0, 15, 0x0800), // → 17 drop
        /* 2 */ ins(LD_B_ABS, 0, 0, 14 + 9), // IP protocol
        /* 3 */ ins(JEQ_K, 0, 8, 6), // TCP? else → 12
        /* 4 */ ins(LDX_B_MSH, 0, 0, 14), // X = IP header length
        /* 5 */ ins(LD_B_IND, 0, 0, 14 + 12), // TCP data offset byte
        /* 6 */ ins(RSH_K, 0, 0, 4),
        /* 7 */ ins(LSH_K, 0, 0, 2), // TCP header length
        /* 8 */ ins(ADD_X, 0, 0, 0),
        /* 9 */ ins(TAX, 0, 0, 0), // X = IP + TCP header length
        /* 10 */ ins(LD_W_IND, 0, 0, 14), // the payload's first word
        /* 11 */ ins(JEQ_K, 4, 5, m), // → 16 accept, → 17 drop
        /* 12 */ ins(JEQ_K, 0, 4, 17), // UDP? else → 17
        /* 13 */ ins(LDX_B_MSH, 0, 0, 14), // X = IP header length
        /* 14 */ ins(LD_W_IND, 0, 0, 14 + 8), // past the UDP header
        /* 15 */ ins(JEQ_K, 0, 1, m), // → 16 accept, → 17 drop
        /* 16 */ ins(RET_K, 0, 0, SNAP as u32),
        /* 17 */ ins(RET_K, 0, 0, 0),
    ]
}

impl WireTap {
    /// Starts recording marked frames on every device of `ns`; see the
    /// module docs. Returns once the socket is open and filtering.
    pub fn start(ns: &Netns, mark: [u8; 4]) -> Result<WireTap> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let st = stop.clone();
        let thread = ns.spawn(move || {
            let fd = match open(mark) {
                Ok(fd) => {
                    let _ = ready_tx.send(Ok(()));
                    fd
                }
                Err(e) => {
                    let kind = e.kind();
                    let _ = ready_tx.send(Err(e));
                    return Err(std::io::Error::from(kind));
                }
            };
            record(&fd, &st)
        })?;
        let bpf_err = |source| Error::Bpf {
            what: "opening a packet socket with a filter for the wire tap".into(),
            source,
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(WireTap { stop, thread }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(bpf_err(e))
            }
            Err(_) => Err(Error::Panicked(ns.name().to_string())),
        }
    }

    /// Stops and returns every sighting, in the order the socket got them.
    pub fn stop(self) -> Result<Vec<Sighting>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join()?.map_err(|source| Error::Bpf {
            what: "reading the wire tap's packet socket".into(),
            source,
        })
    }
}

/// The packet socket: every protocol, every device of the namespace, the
/// filter attached, kernel timestamps on, a large buffer, and a receive
/// timeout so the recorder sees its stop flag.
fn open(mark: [u8; 4]) -> std::io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, Protocol, SocketType, sockopt};
    let proto = Protocol::from_raw(
        std::num::NonZeroU32::new(u32::from((libc::ETH_P_ALL as u16).to_be()))
            .ok_or_else(|| std::io::Error::other("ETH_P_ALL is 0"))?,
    );
    let fd = rustix::net::socket(AddressFamily::PACKET, SocketType::RAW, Some(proto))?;
    softoe_sys::packet::attach_filter(&fd, &program(mark))?;
    softoe_sys::sockopt::set_int(&fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    softoe_sys::sockopt::set_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20)?;
    sockopt::set_socket_timeout(&fd, sockopt::Timeout::Recv, Some(Duration::from_millis(50)))?;
    // Frames queued before the filter was attached passed no filter:
    // drain them.
    let mut buf = [0u8; SNAP];
    while rustix::net::recv(&fd, &mut buf[..], rustix::net::RecvFlags::DONTWAIT).is_ok() {}
    Ok(fd)
}

/// Reads sightings until `stop`.
fn record(fd: &OwnedFd, stop: &AtomicBool) -> std::io::Result<Vec<Sighting>> {
    let mut out = Vec::new();
    let mut names: HashMap<i32, String> = HashMap::new();
    let mut buf = vec![0u8; SNAP];
    while !stop.load(Ordering::Relaxed) {
        let got = match softoe_sys::packet::recv(fd, &mut buf, false) {
            Ok(got) => got,
            Err(e) => match e.kind() {
                std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            },
        };
        let frame = buf.get(..got.len).unwrap_or_default();
        let Some(payload) = transport_payload(frame) else {
            continue;
        };
        let at = got
            .timestamp
            .and_then(timestamp)
            .unwrap_or_else(SystemTime::now);
        let ifindex = got.ifindex;
        let dev = names
            .entry(ifindex)
            .or_insert_with(|| if_name(ifindex))
            .clone();
        out.push(Sighting {
            dev,
            outgoing: got.pkttype == libc::PACKET_OUTGOING,
            at,
            payload: payload.to_vec(),
        });
    }
    Ok(out)
}

/// A kernel timestamp (seconds and nanoseconds since the epoch) as a
/// time, if it is one.
fn timestamp((sec, nsec): (i64, i64)) -> Option<SystemTime> {
    let d = Duration::new(u64::try_from(sec).ok()?, u32::try_from(nsec).ok()?);
    SystemTime::UNIX_EPOCH.checked_add(d)
}

/// A device's name by index, in this thread's namespace.
fn if_name(index: i32) -> String {
    let name = u32::try_from(index).ok().and_then(|idx| {
        let sock = softoe_sys::ifreq::socket().ok()?;
        rustix::net::netdevice::index_to_name(&sock, idx).ok()
    });
    name.unwrap_or_else(|| format!("if{index}"))
}

/// The TCP or UDP payload of an Ethernet + IPv4 frame (the filter let only
/// those through; checked again, since a truncated or odd frame must not
/// index out of bounds).
fn transport_payload(frame: &[u8]) -> Option<&[u8]> {
    let ip = frame.get(14..)?;
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    let proto = *ip.get(9)?;
    let l4 = ip.get(ihl..)?;
    let hl = match proto {
        6 => usize::from(l4.get(12)? >> 4) * 4,
        17 => 8,
        _ => return None,
    };
    l4.get(hl..)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn frame(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let mut ip = vec![0u8; 20];
        ip[0] = 0x45;
        ip[9] = proto;
        f.extend_from_slice(&ip);
        f.extend_from_slice(l4);
        f
    }

    #[test]
    fn payloads_past_tcp_options_and_udp_headers() {
        let mut tcp = vec![0u8; 32];
        tcp[12] = 8 << 4; // 32-byte header: timestamps
        tcp.extend_from_slice(b"RTMSxyz");
        assert_eq!(transport_payload(&frame(6, &tcp)), Some(&b"RTMSxyz"[..]));
        let mut udp = vec![0u8; 8];
        udp.extend_from_slice(b"RTMS");
        assert_eq!(transport_payload(&frame(17, &udp)), Some(&b"RTMS"[..]));
        assert_eq!(transport_payload(&frame(1, &udp)), None, "ICMP is not ours");
        let mut short = vec![0u8; 10];
        short[12 - 10..].fill(0);
        assert_eq!(transport_payload(&frame(6, &short)), None, "a cut header");
        assert_eq!(transport_payload(&[0u8; 20]), None);
    }

    #[test]
    fn the_filter_jumps_stay_inside_the_program() {
        let p = program(*b"RTMS");
        for (i, f) in p.iter().enumerate() {
            if f.code & 0x07 == 0x05 {
                assert!(i + 1 + usize::from(f.jt) < p.len(), "insn {i} jt");
                assert!(i + 1 + usize::from(f.jf) < p.len(), "insn {i} jf");
            }
        }
        assert_eq!(p.last().map(|f| (f.code, f.k)), Some((RET_K, 0)));
    }
}
