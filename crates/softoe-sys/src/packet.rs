//! AF_PACKET (`<linux/if_packet.h>`) where rustix has no call for it:
//! binding to an interface (`struct sockaddr_ll`), a membership
//! (`PACKET_ADD_MEMBERSHIP`), the drop counter (`PACKET_STATISTICS`), and
//! receiving a frame with its link-layer address and its `PACKET_AUXDATA`
//! control message.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// `PACKET_ADD_MEMBERSHIP`.
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
/// `PACKET_AUXDATA`: the option, and the control message's type.
pub const PACKET_AUXDATA: libc::c_int = 8;
/// `PACKET_VNET_HDR`.
pub const PACKET_VNET_HDR: libc::c_int = 15;
/// `PACKET_IGNORE_OUTGOING` (Linux 4.20).
pub const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_VNET_HDR_SZ` (Linux 6.2).
pub const PACKET_VNET_HDR_SZ: libc::c_int = 24;
/// `PACKET_MR_PROMISC`: a promiscuous membership.
pub const PACKET_MR_PROMISC: u16 = 1;

/// `struct tpacket_auxdata`: what the kernel knows of a received frame.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Auxdata {
    /// `TP_STATUS_*`.
    pub tp_status: u32,
    /// The frame's length.
    pub tp_len: u32,
    /// Bytes captured.
    pub tp_snaplen: u32,
    /// Offset of the MAC header.
    pub tp_mac: u16,
    /// Offset of the network header.
    pub tp_net: u16,
    /// The VLAN tag's TCI.
    pub tp_vlan_tci: u16,
    /// The VLAN tag's TPID.
    pub tp_vlan_tpid: u16,
}

/// `struct packet_mreq`.
#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [libc::c_uchar; 8],
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A `sockaddr_ll` of all zeroes.
fn zeroed_sll() -> libc::sockaddr_ll {
    libc::sockaddr_ll {
        sll_family: 0,
        sll_protocol: 0,
        sll_ifindex: 0,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    }
}

/// Binds packet socket `fd` to interface `ifindex` for frames of
/// `protocol` (an `ETH_P_*`, host order).
pub fn bind(fd: impl AsFd, ifindex: i32, protocol: u16) -> io::Result<()> {
    let mut sll = zeroed_sll();
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is an initialised `sockaddr_ll` of the length passed,
    // live for the call; bind only reads it.
    check(unsafe {
        libc::bind(
            fd.as_fd().as_raw_fd(),
            (&raw const sll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })
}

/// `PACKET_ADD_MEMBERSHIP` of type `mr_type` (`PACKET_MR_*`) on
/// interface `ifindex`, without an address; the kernel drops it when the
/// socket closes.
pub fn add_membership(fd: impl AsFd, ifindex: i32, mr_type: u16) -> io::Result<()> {
    let mreq = PacketMreq {
        mr_ifindex: ifindex,
        mr_type,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    // SAFETY: `mreq` is an initialised `struct packet_mreq` (no padding, no
    // pointers) of the length passed, live for the call; setsockopt only
    // reads it.
    check(unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_PACKET,
            PACKET_ADD_MEMBERSHIP,
            (&raw const mreq).cast(),
            size_of::<PacketMreq>() as libc::socklen_t,
        )
    })
}

/// `PACKET_STATISTICS`: frames received and dropped since the last read
/// (reading resets them).
pub fn statistics(fd: impl AsFd) -> io::Result<(u32, u32)> {
    let mut st = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `st` and `len` are valid for writes and live for the call;
    // `len` holds the size of `st` (two u32, any bytes valid), which the
    // kernel fills no further.
    check(unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&raw mut st).cast(),
            &mut len,
        )
    })?;
    Ok((st.tp_packets, st.tp_drops))
}

/// Attaches classic BPF program `prog` to socket `fd`
/// (`SO_ATTACH_FILTER`); the kernel copies and checks it.
pub fn attach_filter(fd: impl AsFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let len = libc::c_ushort::try_from(prog.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "filter too long"))?;
    let fprog = libc::sock_fprog {
        len,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` is a live `struct sock_fprog` of the length passed
    // whose pointer names `len` instructions of `prog`, borrowed for the
    // call; the kernel only reads both (copying the program in).
    check(unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })
}

/// One frame [`recv`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Bytes written to the buffer.
    pub len: usize,
    /// The interface it came or went on (`sll_ifindex`).
    pub ifindex: i32,
    /// `sll_pkttype` (`PACKET_HOST`, `PACKET_OUTGOING`, ...).
    pub pkttype: u8,
    /// The frame was longer than the buffer (`MSG_TRUNC`).
    pub truncated: bool,
    /// Its `PACKET_AUXDATA` message, or zeroes when there was none.
    pub aux: Auxdata,
    /// Its `SCM_TIMESTAMPNS` message (`SO_TIMESTAMPNS` on): seconds and
    /// nanoseconds since the epoch.
    pub timestamp: Option<(i64, i64)>,
}

/// `recvmsg` into `buf` (`MSG_DONTWAIT` when `dontwait`), with the
/// sender's link-layer address and room for a `PACKET_AUXDATA` and an
/// `SCM_TIMESTAMPNS` message.
pub fn recv(fd: impl AsFd, buf: &mut [u8], dontwait: bool) -> io::Result<Received> {
    let mut sll = zeroed_sll();
    // u64s: aligned for `cmsghdr`.
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `msghdr` is plain old data (integers and pointers); all
    // zeroes (no name, no buffers, no control) is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&raw mut sll).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 16]>() as _;
    let flags = if dontwait { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: every pointer in `msg` names memory live and writable for the
    // call with the length given beside it: `sll`, `buf` (through `iov`)
    // and `control`; any bytes the kernel writes there are valid.
    let rc = unsafe { libc::recvmsg(fd.as_fd().as_raw_fd(), &mut msg, flags) };
    let n = usize::try_from(rc).map_err(|_| io::Error::last_os_error())?;
    let used = (msg.msg_controllen as usize).min(size_of::<[u64; 16]>());
    let mut bytes = [0u8; 128];
    for (d, w) in bytes.chunks_exact_mut(8).zip(control) {
        d.copy_from_slice(&w.to_ne_bytes());
    }
    let control = bytes.get(..used).unwrap_or_default();
    let mut aux = Auxdata::default();
    let mut timestamp = None;
    for (level, kind, data) in messages(control) {
        if level == libc::SOL_PACKET && kind == PACKET_AUXDATA && data.len() >= 20 {
            aux = auxdata(data);
        }
        if level == libc::SOL_SOCKET && kind == libc::SCM_TIMESTAMPNS && data.len() >= 16 {
            let i64_at = |i: usize| {
                data.get(i..i + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, i64::from_ne_bytes)
            };
            timestamp = Some((i64_at(0), i64_at(8)));
        }
    }
    Ok(Received {
        len: n.min(buf.len()),
        ifindex: sll.sll_ifindex,
        pkttype: sll.sll_pkttype,
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
        aux,
        timestamp,
    })
}

/// The control messages in `control` (as recvmsg wrote them): level,
/// type and data of each. Parsed from bytes: no pointer into the buffer
/// is made, and a length that runs past the buffer ends the walk.
fn messages(control: &[u8]) -> Vec<(i32, i32, &[u8])> {
    let hdr = size_of::<libc::cmsghdr>();
    let align = size_of::<libc::size_t>();
    let word = |b: &[u8], at: usize| -> Option<i32> {
        Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(h) = control.get(at..at + hdr) {
        let Some(len) = h
            .get(..align)
            .and_then(|l| l.try_into().ok())
            .map(usize::from_ne_bytes)
        else {
            break;
        };
        let (Some(level), Some(kind)) = (word(h, align), word(h, align + 4)) else {
            break;
        };
        if len < hdr {
            break;
        }
        let Some(data) = control.get(at + hdr..at + len) else {
            break;
        };
        out.push((level, kind, data));
        at += len.div_ceil(align) * align;
    }
    out
}

/// A `struct tpacket_auxdata` from a message's data (at least 20 bytes).
fn auxdata(data: &[u8]) -> Auxdata {
    let u32_at = |i: usize| {
        data.get(i..i + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_ne_bytes)
    };
    let u16_at = |i: usize| {
        data.get(i..i + 2)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u16::from_ne_bytes)
    };
    Auxdata {
        tp_status: u32_at(0),
        tp_len: u32_at(4),
        tp_snaplen: u32_at(8),
        tp_mac: u16_at(12),
        tp_net: u16_at(14),
        tp_vlan_tci: u16_at(16),
        tp_vlan_tpid: u16_at(18),
    }
}

/// The `PACKET_AUXDATA` message among `control`'s, or zeroes.
#[cfg(test)]
fn find_auxdata(control: &[u8]) -> Auxdata {
    messages(control)
        .into_iter()
        .find(|(level, kind, data)| {
            *level == libc::SOL_PACKET && *kind == PACKET_AUXDATA && data.len() >= 20
        })
        .map_or_else(Auxdata::default, |(_, _, d)| auxdata(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control buffer holding `msgs` (level, type, data), laid out as
    /// the kernel writes one.
    fn control(msgs: &[(i32, i32, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (level, kind, data) in msgs {
            let len = size_of::<libc::cmsghdr>() + data.len();
            out.extend_from_slice(&len.to_ne_bytes());
            out.extend_from_slice(&level.to_ne_bytes());
            out.extend_from_slice(&kind.to_ne_bytes());
            out.extend_from_slice(data);
            while out.len() % 8 != 0 {
                out.push(0);
            }
        }
        out
    }

    fn aux_bytes(status: u32, tci: u16) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&status.to_ne_bytes());
        d.extend_from_slice(&60u32.to_ne_bytes());
        d.extend_from_slice(&60u32.to_ne_bytes());
        d.extend_from_slice(&0u16.to_ne_bytes());
        d.extend_from_slice(&14u16.to_ne_bytes());
        d.extend_from_slice(&tci.to_ne_bytes());
        d.extend_from_slice(&0x8100u16.to_ne_bytes());
        d
    }

    #[test]
    fn auxdata_is_found_after_another_message() {
        let a = aux_bytes(1 << 4, 7);
        let c = control(&[
            (libc::SOL_SOCKET, 1, &[1, 2, 3]),
            (libc::SOL_PACKET, PACKET_AUXDATA, &a),
        ]);
        let got = find_auxdata(&c);
        assert_eq!(got.tp_status, 1 << 4);
        assert_eq!(got.tp_len, 60);
        assert_eq!(got.tp_net, 14);
        assert_eq!(got.tp_vlan_tci, 7);
        assert_eq!(got.tp_vlan_tpid, 0x8100);
    }

    #[test]
    fn short_or_foreign_control_gives_zeroes() {
        assert_eq!(find_auxdata(&[]), Auxdata::default());
        let a = aux_bytes(5, 0);
        let c = control(&[(libc::SOL_PACKET, PACKET_AUXDATA, &a[..10])]);
        assert_eq!(find_auxdata(&c), Auxdata::default(), "too short");
        let c = control(&[(libc::SOL_SOCKET, PACKET_AUXDATA, &a)]);
        assert_eq!(find_auxdata(&c), Auxdata::default(), "another level");
        let mut c = control(&[(libc::SOL_PACKET, PACKET_AUXDATA, &a)]);
        c[..8].copy_from_slice(&4usize.to_ne_bytes());
        assert_eq!(
            find_auxdata(&c),
            Auxdata::default(),
            "a length below the header"
        );
        c[..8].copy_from_slice(&4096usize.to_ne_bytes());
        assert_eq!(
            find_auxdata(&c),
            Auxdata::default(),
            "a length past the buffer"
        );
    }

    #[test]
    fn messages_walk_stops_at_a_bad_length() {
        let c = control(&[(1, 2, &[9; 4]), (3, 4, &[8; 16])]);
        let m = messages(&c);
        assert_eq!(m.len(), 2);
        assert_eq!((m[1].0, m[1].1, m[1].2.len()), (3, 4, 16));
        let mut bad = c.clone();
        bad[24..32].copy_from_slice(&1000usize.to_ne_bytes());
        assert_eq!(messages(&bad).len(), 1, "the second runs past the end");
    }

    /// Needs root (a network namespace of its own, CAP_NET_RAW); skips
    /// otherwise. A frame sent on the namespace's loopback device comes
    /// back with its index and a timestamp.
    #[test]
    fn a_packet_socket_hears_loopback_through_its_filter() {
        std::thread::spawn(hear_loopback).join().unwrap();
    }

    fn hear_loopback() {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        // SAFETY: only the network namespace is unshared (not FILES, the
        // flag that would split the descriptor table), on a thread of the
        // test's own that ends with it.
        let own = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) };
        if own.is_err() {
            eprintln!("skipping: no network namespace of our own");
            return;
        }
        let Ok(fd) = rustix::net::socket_with(
            AddressFamily::PACKET,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            None,
        ) else {
            eprintln!("skipping: no AF_PACKET here");
            return;
        };
        // `ret #-1`: accept everything.
        let all = [libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: u32::MAX,
        }];
        attach_filter(&fd, &all).unwrap();
        crate::sockopt::set_int(&fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
        crate::sockopt::set_int(&fd, libc::SOL_PACKET, PACKET_AUXDATA, 1).unwrap();
        let sock = crate::ifreq::socket().unwrap();
        let name = crate::ifreq::IfName::new("lo").unwrap();
        crate::ifreq::set_flags(&sock, &name, libc::IFF_UP as libc::c_short).unwrap();
        let lo = rustix::net::netdevice::name_to_index(&fd, "lo").unwrap() as i32;
        bind(&fd, lo, 0x0003).unwrap();
        let mut frame = [0u8; 60];
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        // Twice: the socket does not hear its own outgoing copies, only
        // what comes back in.
        for _ in 0..2 {
            rustix::net::send(&fd, &frame, rustix::net::SendFlags::empty()).unwrap();
        }
        let mut buf = [0u8; 128];
        let got = recv(&fd, &mut buf, false).unwrap();
        assert_eq!(got.ifindex, lo);
        assert_eq!(got.len, 60);
        assert!(got.timestamp.is_some_and(|(s, _)| s > 0));
        assert!(!got.truncated);
        let mut short = [0u8; 8];
        let e = recv(&fd, &mut short, true);
        assert!(e.is_ok_and(|g| g.truncated && g.len == 8));
        assert_eq!(
            recv(&fd, &mut buf, true).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[test]
    fn layouts_match_the_kernels() {
        assert_eq!(size_of::<Auxdata>(), 20);
        assert_eq!(size_of::<PacketMreq>(), 16);
        assert_eq!(size_of::<libc::cmsghdr>(), 16);
    }
}
