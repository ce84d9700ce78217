//! An AF_PACKET socket as a port, for hosts (and containers) without TAP.
//!
//! A TAP device is the engine's model NIC, but `/dev/net/tun` is not always
//! there, and sometimes the wire already exists: a veth handed to a
//! container, a spare physical NIC. [`AfPacketPort`] attaches to such an
//! interface with a raw packet socket (`AF_PACKET`, `SOCK_RAW`, bound to the
//! interface by index with `ETH_P_ALL`) in the calling thread's network
//! namespace, and moves whole Ethernet frames through it: the kernel's own
//! IP stack on that interface is bypassed, as a NIC handed to the engine
//! would be. Give the interface no IP address, or the kernel will answer
//! ARP and send resets for the engine's address.
//!
//! The socket is non-blocking. Sending gathers the frame header and the
//! payload references (resolved in [`Memory`]) into one `sendmsg`, as
//! [`TapPort`](crate::TapPort) does with `writev`: payload is never copied
//! by the engine. Receiving uses `recvmsg`; frames the socket sees leaving
//! the interface are skipped (`PACKET_IGNORE_OUTGOING`, and the
//! `sll_pkttype` of each frame as a second check), so the engine never hears
//! the kernel's own traffic on the interface, nor its own.
//!
//! ## Offloads
//!
//! With every offload off (the default) the port is a plain NIC: the stack
//! computes every checksum and sends frames no larger than the MTU. With
//! `PACKET_VNET_HDR` (turned on by [`AfPacketOffloads::csum`]) every frame
//! is preceded by the same virtio-net header [`vnet`] writes for
//! TAP, so the kernel finishes partial checksums (`csum`), cuts TCP
//! super-segments (`tso`), and reports receive-coalesced frames and their
//! segment size (`gro`). Each is switchable, as with
//! [`TapOffloads`](crate::TapOffloads). Unlike a TAP, AF_PACKET cannot refuse
//! coalesced frames: a peer on the same host (the other end of a veth) hands
//! over its TSO super-segments whatever this port says, and without `gro`
//! the stack simply processes them as one large segment. Turn TSO/GSO off on
//! the peer (`ethtool -K`) for wire-sized frames.
//!
//! Received frames whose checksum the kernel left partial (a local sender
//! with checksum offload: the field holds only the pseudo-header sum) or
//! already verified are marked [`RxMeta::csum_verified`] in every mode —
//! learnt from `PACKET_AUXDATA` — because their checksum field cannot be
//! checked in software; the kernel's own stack trusts them the same way.
//! Frames whose VLAN tag the kernel stripped are dropped, as the stack drops
//! tagged frames.
//!
//! ```no_run
//! use softoe_engine::{AfPacketOffloads, AfPacketOptions, AfPacketPort, Engine, EngineConfig};
//! use softoe_stack::StackConfig;
//! use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};
//!
//! let opts = AfPacketOptions {
//!     offloads: AfPacketOffloads::ALL,
//!     ..AfPacketOptions::default()
//! };
//! let port = AfPacketPort::open("veth1", &opts)?;
//! let addr = Ipv4Cidr::new(Ipv4Address([10, 0, 0, 1]), 24).expect("valid prefix");
//! let cfg = StackConfig::new(EthernetAddress(port.mac()), addr);
//! let mut engine = Engine::new(cfg, port, EngineConfig::default())?;
//! engine.run()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use rustix::net::{AddressFamily, SocketFlags, SocketType};
use softoe_stack::{DeviceCaps, RxMeta, TxFrame};
use softoe_sys::packet::{
    self, PACKET_AUXDATA, PACKET_IGNORE_OUTGOING, PACKET_MR_PROMISC, PACKET_VNET_HDR,
    PACKET_VNET_HDR_SZ,
};
use softoe_sys::sockopt::set_int;

use crate::memory::{Gather, Memory};
use crate::netdev::{self, context};
use crate::port::{Port, RxFrame};
use crate::vnet::{self, VnetHdr};

// From <linux/if_ether.h> and <linux/if_packet.h> (kept here rather than
// relying on the libc crate's version having them).
const ETH_P_ALL: u16 = 0x0003;
const PACKET_OUTGOING: u8 = 4;
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_CSUM_VALID: u32 = 1 << 7;

/// The legacy `struct virtio_net_hdr` (no `num_buffers`), used when the
/// kernel predates `PACKET_VNET_HDR_SZ`.
const VNET_LEGACY_LEN: usize = 10;

/// Most payload references in one frame (the stack never uses more).
const MAX_IOV: usize = 72;

/// Most unwanted frames (outgoing, truncated, tagged) one `recv` skips
/// before reporting nothing, so a flood of them cannot stall the engine.
const MAX_SKIPS: usize = 256;

/// Default socket buffer size (each way): room for a window's worth of
/// 64 KiB super-segments.
const DEFAULT_SOCKET_BUFFER: usize = 4 << 20;

/// Kernel memory one received MTU-sized frame is charged to the socket's
/// receive buffer (its `truesize`: the 1,514 bytes in a 2 KiB buffer, plus
/// the `sk_buff`), what [`AfPacketOptions::receive_frames`] counts with.
pub const FRAME_CHARGE: usize = 2304;

/// Which offloads an AF_PACKET port uses. All off by default: the port is
/// then a plain NIC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AfPacketOffloads {
    /// Send TCP super-segments for the kernel to cut (needs `csum`).
    pub tso: bool,
    /// Leave transport checksums to the kernel; turns on the virtio-net
    /// header (`PACKET_VNET_HDR`) that the other two also need.
    pub csum: bool,
    /// Tell the stack the segment size of receive-coalesced frames (needs
    /// `csum`).
    pub gro: bool,
}

impl AfPacketOffloads {
    /// Every offload on.
    pub const ALL: AfPacketOffloads = AfPacketOffloads {
        tso: true,
        csum: true,
        gro: true,
    };
    /// Every offload off.
    pub const NONE: AfPacketOffloads = AfPacketOffloads {
        tso: false,
        csum: false,
        gro: false,
    };
}

/// How to open an [`AfPacketPort`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AfPacketOptions {
    /// Offloads (all off by default).
    pub offloads: AfPacketOffloads,
    /// The IP MTU to report to the stack; `None`: the interface's. It may not
    /// exceed the interface's (the kernel would refuse larger frames).
    pub mtu: Option<usize>,
    /// Put the interface into promiscuous mode while the port is open (needed
    /// on a physical NIC when the engine uses a MAC address other than the
    /// interface's; a veth passes every frame anyway).
    pub promiscuous: bool,
    /// Socket receive buffer size in bytes (`SO_RCVBUFFORCE`, falling back
    /// to the `SO_RCVBUF` limit without `CAP_NET_ADMIN`): what the kernel
    /// holds for the engine to read; a burst beyond it is dropped (counted
    /// by [`Port::dropped`]).
    pub receive_buffer: usize,
    /// Socket send buffer size in bytes (`SO_SNDBUFFORCE`, as above).
    pub send_buffer: usize,
}

impl AfPacketOptions {
    /// Sizes the receive buffer for `frames` MTU-sized frames (never below
    /// the default), as a TAP port's queue holds `frames`: with thousands
    /// of connections a burst of their segments must wait, not be dropped
    /// and retransmitted (the TAP queue's lesson, `tap::DEFAULT_QUEUE_LEN`).
    pub fn receive_frames(mut self, frames: u32) -> AfPacketOptions {
        self.receive_buffer = (frames as usize)
            .saturating_mul(FRAME_CHARGE)
            .max(DEFAULT_SOCKET_BUFFER);
        self
    }
}

impl Default for AfPacketOptions {
    fn default() -> AfPacketOptions {
        AfPacketOptions {
            offloads: AfPacketOffloads::NONE,
            mtu: None,
            promiscuous: false,
            receive_buffer: DEFAULT_SOCKET_BUFFER,
            send_buffer: DEFAULT_SOCKET_BUFFER,
        }
    }
}

/// Frames an [`AfPacketPort`] read but did not hand on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AfPacketStats {
    /// Frames leaving the interface (seen only where
    /// `PACKET_IGNORE_OUTGOING` is missing).
    pub outgoing_skipped: u64,
    /// Frames larger than the receive buffer.
    pub truncated: u64,
    /// Frames whose VLAN tag the kernel had stripped.
    pub vlan_dropped: u64,
    /// Frames the kernel dropped because the socket's receive buffer was
    /// full (`PACKET_STATISTICS`), summed over every read of it.
    pub kernel_dropped: u64,
}

/// A port on an AF_PACKET socket bound to one interface.
#[derive(Debug)]
pub struct AfPacketPort {
    fd: OwnedFd,
    name: String,
    ifindex: libc::c_int,
    mac: [u8; 6],
    mtu: usize,
    offloads: AfPacketOffloads,
    /// Length of the virtio-net header before every frame (0: none).
    vnet_len: usize,
    promiscuous: bool,
    stats: AfPacketStats,
}

/// The port's socket. Protocol 0: it hears nothing until it is bound to
/// the interface, so no other interface's frames slip in.
fn open_socket() -> io::Result<OwnedFd> {
    rustix::net::socket_with(
        AddressFamily::PACKET,
        SocketType::RAW,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| {
        let e = io::Error::from(e);
        match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("opening an AF_PACKET socket needs CAP_NET_RAW (run as root): {e}"),
            ),
            _ => io::Error::new(e.kind(), format!("opening an AF_PACKET socket: {e}")),
        }
    })
}

/// The MTU the port uses: `want`, at most the interface's `if_mtu`, and
/// at least IPv4's 576.
fn port_mtu(ifname: &str, want: Option<usize>, if_mtu: usize) -> io::Result<usize> {
    let mtu = match want {
        None => if_mtu,
        Some(m) if m > if_mtu => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MTU {m} exceeds the MTU of {ifname} ({if_mtu})"),
            ));
        }
        Some(m) => m,
    };
    if mtu < 576 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("MTU {mtu} of {ifname} is below IPv4's minimum of 576"),
        ));
    }
    Ok(mtu)
}

/// Sets the socket's options: the virtio-net header when `csum` (its
/// length is returned, 0 without), auxiliary data, outgoing frames
/// ignored, and the buffer sizes.
fn set_options(fd: &OwnedFd, opts: &AfPacketOptions, csum: bool) -> io::Result<usize> {
    let vnet_len = if csum {
        // The 12-byte header vnet.rs writes; kernels before 6.2 know
        // only the 10-byte one.
        match set_int(fd, libc::SOL_PACKET, PACKET_VNET_HDR_SZ, vnet::LEN as i32) {
            Ok(()) => vnet::LEN,
            Err(_) => {
                set_int(fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1).map_err(|e| {
                    io::Error::new(e.kind(), format!("enabling PACKET_VNET_HDR: {e}"))
                })?;
                VNET_LEGACY_LEN
            }
        }
    } else {
        0
    };
    set_int(fd, libc::SOL_PACKET, PACKET_AUXDATA, 1)
        .map_err(|e| io::Error::new(e.kind(), format!("enabling PACKET_AUXDATA: {e}")))?;
    // Missing before Linux 4.20; `recv` checks `sll_pkttype` anyway.
    let _ = set_int(fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
    for (force, plain, bytes) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, opts.receive_buffer),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, opts.send_buffer),
    ] {
        // The kernel doubles it (room for its own bookkeeping).
        let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        if set_int(fd, libc::SOL_SOCKET, force, size).is_err() {
            set_int(fd, libc::SOL_SOCKET, plain, size)
                .map_err(|e| io::Error::new(e.kind(), format!("sizing socket buffers: {e}")))?;
        }
    }
    Ok(vnet_len)
}

impl AfPacketPort {
    /// Opens a port on interface `ifname` of the calling thread's network
    /// namespace. Needs `CAP_NET_RAW`. The interface should be up.
    pub fn open(ifname: &str, opts: &AfPacketOptions) -> io::Result<AfPacketPort> {
        let fd = open_socket()?;
        let info = netdev::if_info(&fd, ifname)?;
        let ifindex = info.ifindex as libc::c_int;
        let mtu = port_mtu(ifname, opts.mtu, info.mtu)?;
        let offloads = AfPacketOffloads {
            tso: opts.offloads.tso && opts.offloads.csum,
            gro: opts.offloads.gro && opts.offloads.csum,
            ..opts.offloads
        };
        let vnet_len = set_options(&fd, opts, offloads.csum)?;
        packet::bind(&fd, ifindex, ETH_P_ALL)
            .map_err(|e| context(&format!("binding to {ifname}"), e))?;
        if opts.promiscuous {
            // The kernel drops the membership when the socket closes.
            packet::add_membership(&fd, ifindex, PACKET_MR_PROMISC).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("putting {ifname} into promiscuous mode: {e}"),
                )
            })?;
        }
        Ok(AfPacketPort {
            fd,
            name: ifname.to_string(),
            ifindex,
            mac: info.mac,
            mtu,
            offloads,
            vnet_len,
            promiscuous: opts.promiscuous,
            stats: AfPacketStats::default(),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex.unsigned_abs()
    }

    /// The interface's hardware address (a stack may use it as its own, or
    /// another one with [`AfPacketOptions::promiscuous`] on a physical NIC).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The offloads in use (`tso` and `gro` are off unless `csum` is on).
    pub fn offloads(&self) -> AfPacketOffloads {
        self.offloads
    }

    /// Length of the virtio-net header on every frame: 12, 10 on kernels
    /// without `PACKET_VNET_HDR_SZ`, 0 with offloads off.
    pub fn vnet_hdr_len(&self) -> usize {
        self.vnet_len
    }

    /// Frames read but not handed on.
    pub fn stats(&self) -> AfPacketStats {
        self.stats
    }
}

impl AfPacketPort {
    /// Whether the interface is up with carrier (`IFF_UP` and
    /// `IFF_RUNNING`; a veth whose peer is down has no carrier).
    pub fn link_up(&self) -> io::Result<bool> {
        netdev::link_up(&self.fd, &self.name)
    }

    /// Adds what the kernel dropped since the last look (reading
    /// `PACKET_STATISTICS` resets it) to the running total.
    fn read_kernel_drops(&mut self) -> io::Result<u64> {
        let (_, drops) =
            packet::statistics(&self.fd).map_err(|e| context("PACKET_STATISTICS", e))?;
        self.stats.kernel_dropped += u64::from(drops);
        Ok(self.stats.kernel_dropped)
    }
}

impl Port for AfPacketPort {
    fn dropped(&mut self) -> Option<u64> {
        self.read_kernel_drops().ok()
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
        if frame.payload.len() > MAX_IOV {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "too many payload references",
            ));
        }
        let hdr_bytes = VnetHdr::for_tx(&frame.offload, frame.header.len()).to_bytes();
        let hdr = hdr_bytes.get(..self.vnet_len).unwrap_or(&[]);
        // By address and length: payload may be a program's shared memory,
        // which only the kernel reads (see `memory`). The socket is bound,
        // so no destination address is needed.
        let sent = mem.write_gathered(
            self.fd.as_fd(),
            &[hdr, frame.header],
            frame.payload,
            Gather::SendDontWait,
        );
        if let Err(e) = sent {
            // EAGAIN: the socket's send buffer is full; ENOBUFS: the device
            // queue dropped the frame. Either way, nothing went out.
            if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(true)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<RxFrame>> {
        for _ in 0..MAX_SKIPS {
            let got = match packet::recv(&self.fd, buf, true) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(e),
            };
            let n = got.len;
            if got.pkttype == PACKET_OUTGOING {
                self.stats.outgoing_skipped += 1;
                continue;
            }
            if got.truncated {
                self.stats.truncated += 1;
                continue;
            }
            let aux = got.aux;
            if aux.tp_status & TP_STATUS_VLAN_VALID != 0 {
                self.stats.vlan_dropped += 1;
                continue;
            }
            let mut meta = RxMeta {
                csum_verified: aux.tp_status & (TP_STATUS_CSUMNOTREADY | TP_STATUS_CSUM_VALID) != 0,
                gso_size: None,
            };
            if self.vnet_len > 0 {
                let mut b = [0u8; vnet::LEN];
                if let Some(h) = buf.get(..self.vnet_len.min(n)) {
                    for (d, s) in b.iter_mut().zip(h) {
                        *d = *s;
                    }
                }
                if let Some(h) = VnetHdr::parse(&b) {
                    let m = h.rx_meta();
                    meta.csum_verified |= m.csum_verified;
                    if self.offloads.gro {
                        meta.gso_size = m.gso_size;
                    }
                }
            }
            return Ok(Some(RxFrame {
                start: self.vnet_len.min(n),
                len: n.saturating_sub(self.vnet_len),
                meta,
            }));
        }
        Ok(None)
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn describe(&self) -> String {
        format!(
            "af_packet {} (tso {}, csum {}, gro {}{})",
            self.name,
            self.offloads.tso,
            self.offloads.csum,
            self.offloads.gro,
            if self.promiscuous {
                ", promiscuous"
            } else {
                ""
            }
        )
    }
}
