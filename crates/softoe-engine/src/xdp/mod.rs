//! An AF_XDP socket as a port: frames move through rings in memory shared
//! with the kernel, with one system call per batch instead of one per
//! frame.
//!
//! [`AfPacketPort`](crate::AfPacketPort) makes a `recvmsg` for every frame
//! in (and one more, finding nothing, every turn the engine spins) and a
//! `sendmsg` for every frame out: 3 to 17 system calls per 4-byte round
//! trip, measured (docs/journal/2026-11-27-af-xdp-port.md). [`XdpPort`] attaches to an interface (a veth here; a NIC tomorrow) with
//! an XDP socket (XSK) instead:
//!
//! - a **UMEM** — one page-aligned anonymous mapping cut into frames
//!   (4,096 of 4 KiB by default) registered with the kernel — holds every
//!   frame either way; half of the frames receive, half send;
//! - four **rings** mapped from the socket pass frames by UMEM address: the
//!   port puts empty frames on the *fill* ring and the kernel returns them
//!   full on the *RX* ring; the port puts frames to send on the *TX* ring
//!   and the kernel returns them, sent, on the *completion* ring. Each ring
//!   is read and written in batches (see `ring`): the other side's index
//!   is loaded once per batch, ours published with one store;
//! - a five-instruction **XDP program**, assembled and loaded by the port
//!   itself (see `bpf`), redirects every frame arriving on the
//!   interface's queue 0 to the socket. It is attached through a BPF link
//!   that goes when the port does.
//!
//! Receiving is then no system call at all while frames keep coming: the
//! kernel places them in the UMEM and the engine finds them on the RX ring.
//! Sending posts descriptors; at the end of each engine turn
//! ([`Port::flush`]) the port makes one `sendto` for the whole batch, and
//! only when the kernel asks for it (`XDP_USE_NEED_WAKEUP`: the TX ring's
//! `XDP_RING_NEED_WAKEUP` flag), and likewise only touches the fill side
//! with `recvfrom` when the fill ring's flag says the kernel waits for it.
//! The engine's sleep is the same `ppoll` as for every port: the socket is
//! readable when the RX ring holds frames.
//!
//! ## Copy mode, and what carries to a NIC
//!
//! A veth has no zero-copy AF_XDP support, so the socket binds in copy mode
//! (`XDP_COPY`): the kernel copies each received frame into a UMEM frame,
//! and builds an `sk_buff` from each sent one. The design does not depend
//! on it: on a NIC whose driver supports zero-copy the same UMEM, rings,
//! batches and wake-up protocol apply unchanged, and the NIC's DMA fills
//! and drains the UMEM directly (then the flags matter more: a driver in
//! busy-poll mode clears them and the port makes no system call at all).
//! The program runs in the driver's own XDP hook where there is one (veth
//! has one: `driver` mode, tried first) and in the generic hook otherwise.
//!
//! Two copies remain that a future API can remove: [`Port::recv`] copies
//! each received frame out of the UMEM into the engine's buffer (its
//! contract today; a receive that lends the UMEM frame in place would make
//! the kernel's copy the only one), and [`Port::send`] gathers the header
//! and the payload references (resolved in [`Memory`], read with its
//! volatile copies for programs' shared memory) into a UMEM frame, where
//! AF_PACKET hands them to the kernel by `iovec` — which copies them just
//! the same.
//!
//! ## Offloads
//!
//! None, in copy mode: no TSO (the stack sends MTU-sized frames), no
//! checksum offload either way. Frames carry no metadata, so nothing is
//! marked [`RxMeta::csum_verified`]: the stack checks every checksum. A
//! Linux peer on the same host must therefore compute its checksums (turn
//! `tx` checksumming off on the far end of the veth, `ethtool -K veth0 tx
//! off`): otherwise its frames arrive with only the pseudo-header sum in the
//! field, which AF_PACKET's `PACKET_AUXDATA` would have vouched for and XDP
//! cannot (measured: with it on, Linux's SYNs never got an answer). That
//! also keeps super-segments away: without checksum offload Linux has no
//! TSO and cuts its GSO segments before the veth; and with the program in
//! a veth's driver hook the veth stops offering GSO to its peer anyway. A
//! frame too large for a UMEM frame would be dropped by the kernel and
//! counted in [`XdpStatistics::rx_dropped`].
//!
//! ## Queues
//!
//! The socket serves queue 0. A frame arriving on another receive queue
//! would find no socket in the map and go on to the kernel's stack, lost to
//! the engine, so [`XdpPort::open`] refuses an interface with more than one
//! receive queue and says how to reduce them (`ethtool -L IFACE rx 1`, or
//! `combined 1` on a NIC). A veth made by `ip link add` has one (`ethtool
//! -l`: one RX, one TX). Serving several queues is one socket per queue
//! sharing the UMEM (`XDP_SHARED_UMEM`, each with its own fill and
//! completion rings) — the plan for several engine cores, each owning a
//! queue with flows steered by hash (docs/design.md), not this port.
//!
//! ```no_run
//! use softoe_engine::{Engine, EngineConfig, XdpOptions, XdpPort};
//! use softoe_stack::StackConfig;
//! use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};
//!
//! let port = XdpPort::open("veth1", &XdpOptions::default())?;
//! let addr = Ipv4Cidr::new(Ipv4Address([10, 0, 0, 1]), 24).expect("valid prefix");
//! let cfg = StackConfig::new(EthernetAddress(port.mac()), addr);
//! let mut engine = Engine::new(cfg, port, EngineConfig::default())?;
//! engine.run()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bpf;
mod options;
// The rings and the UMEM are memory shared with the kernel: the only
// modules of the port that may use `unsafe`.
#[allow(unsafe_code)]
mod ring;
mod sys;
#[cfg(test)]
mod tests;
#[allow(unsafe_code)]
mod umem;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rustix::net::xdp::{SocketAddrXdp, SocketAddrXdpFlags, XdpUmemReg, XdpUmemRegFlags};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use softoe_stack::{DeviceCaps, RxMeta, TxFrame};

use crate::memory::Memory;
use crate::port::{Port, RxFrame};

pub use bpf::XdpMode;
pub use options::{XdpOptions, XdpPortStats};
pub use sys::{XdpDesc, XdpStatistics};

use ring::{Consumer, Producer};
use sys::context;
use umem::Umem;

/// Most unusable descriptors one `recv` skips before reporting nothing.
const MAX_SKIPS: usize = 256;

/// Frames read before the RX ring's slots and the frames go back to the
/// kernel (one store each) in the middle of a burst; the rest go at the
/// end of the turn.
const RX_BATCH: u32 = 64;

/// Most `sendto` calls one kick makes (a full 65,536-frame TX half at the
/// old budget of 32 per call takes 1,024; beyond that the next turn goes
/// on).
const MAX_KICKS: usize = 1024;

/// How soon the engine comes back to frames a kick left on the TX ring.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_micros(50);

/// Whether this kernel has AF_XDP sockets (and this process may open
/// one): opens one and closes it.
pub fn supported() -> io::Result<()> {
    xdp_socket()
        .map(drop)
        .map_err(|e| context("opening an AF_XDP socket", e))
}

/// A new AF_XDP socket.
fn xdp_socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::XDP,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// The four rings of a socket, mapped.
struct Rings {
    fill: Producer<u64>,
    comp: Consumer<u64>,
    rx: Consumer<XdpDesc>,
    tx: Producer<XdpDesc>,
}

/// Checks `opts` against interface `ifname` as `info` describes it; the
/// MTU the port uses.
fn check_options(
    ifname: &str,
    opts: &XdpOptions,
    info: &crate::netdev::IfInfo,
) -> io::Result<usize> {
    let inval = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let mtu = match opts.mtu {
        None => info.mtu,
        Some(m) if m > info.mtu => {
            return Err(inval(format!(
                "MTU {m} exceeds the MTU of {ifname} ({})",
                info.mtu
            )));
        }
        Some(m) => m,
    };
    let room = opts.frame_size as usize - sys::XDP_PACKET_HEADROOM;
    if mtu + 14 > room {
        return Err(inval(format!(
            "MTU {mtu} of {ifname} needs {}-byte frames; {}-byte UMEM frames hold {room} \
             (lower the MTU, or use 4096-byte frames)",
            mtu + 14,
            opts.frame_size
        )));
    }
    if mtu < 576 {
        return Err(inval(format!(
            "MTU {mtu} of {ifname} is below IPv4's minimum of 576"
        )));
    }
    if let Some(q) = info.rx_queues.filter(|q| *q > 1) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{ifname} has {q} receive queues and the XDP port serves queue 0 only (frames \
                 on the others would miss the engine): run `ethtool -L {ifname} rx 1` (a \
                 veth) or `ethtool -L {ifname} combined 1` (a NIC) first"
            ),
        ));
    }
    Ok(mtu)
}

/// Opens the port's AF_XDP socket, saying what a refusal means.
fn open_socket() -> io::Result<OwnedFd> {
    xdp_socket().map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("opening an AF_XDP socket needs CAP_NET_RAW (run as root): {e}"),
        ),
        Some(libc::EAFNOSUPPORT) => io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): {e}"),
        ),
        _ => context("opening an AF_XDP socket", e),
    })
}

/// Registers `umem` with socket `fd` (chunks of `frame_size`), sizes the
/// four rings and maps them.
fn register(
    fd: &OwnedFd,
    ifname: &str,
    umem: &Umem,
    frame_size: u32,
    rx_count: u32,
    tx_count: u32,
) -> io::Result<Rings> {
    use rustix::net::sockopt;
    let reg = XdpUmemReg {
        addr: umem.as_ptr() as u64,
        len: umem.len() as u64,
        chunk_size: frame_size,
        headroom: 0,
        flags: XdpUmemRegFlags::empty(),
        tx_metadata_len: 0,
    };
    // The kernel pins the UMEM's pages until the socket closes; `umem`
    // outlives `fd` in the port (field order).
    sockopt::set_xdp_umem_reg(fd, reg)
        .map_err(|e| context(&format!("XDP_UMEM_REG on {ifname}"), e.into()))?;
    let sized = |r: rustix::io::Result<()>, n: u32, what: &str| {
        r.map_err(|e| context(&format!("{what} ({n} entries) on {ifname}"), e.into()))
    };
    sized(
        sockopt::set_xdp_umem_fill_ring_size(fd, rx_count),
        rx_count,
        "XDP_UMEM_FILL_RING",
    )?;
    sized(
        sockopt::set_xdp_umem_completion_ring_size(fd, tx_count),
        tx_count,
        "XDP_UMEM_COMPLETION_RING",
    )?;
    sized(
        sockopt::set_xdp_rx_ring_size(fd, rx_count),
        rx_count,
        "XDP_RX_RING",
    )?;
    sized(
        sockopt::set_xdp_tx_ring_size(fd, tx_count),
        tx_count,
        "XDP_TX_RING",
    )?;
    let off = sockopt::xdp_mmap_offsets(fd)
        .map_err(|e| context(&format!("XDP_MMAP_OFFSETS on {ifname}"), e.into()))?;
    let old = || {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!("XDP_MMAP_OFFSETS on {ifname}: a kernel without ring flags (before 5.4)"),
        )
    };
    let offset = |o| sys::RingOffset::from_rustix(o).ok_or_else(old);
    let (fr, cr, rx, tx) = (
        offset(&off.fr)?,
        offset(&off.cr)?,
        offset(&off.rx)?,
        offset(&off.tx)?,
    );
    let map_err =
        |what: &'static str| move |e| context(&format!("mapping the {what} ring of {ifname}"), e);
    Ok(Rings {
        fill: Producer::map(fd, &fr, rx_count, sys::XDP_UMEM_PGOFF_FILL_RING)
            .map_err(map_err("fill"))?,
        comp: Consumer::map(fd, &cr, tx_count, sys::XDP_UMEM_PGOFF_COMPLETION_RING)
            .map_err(map_err("completion"))?,
        rx: Consumer::map(fd, &rx, rx_count, sys::XDP_PGOFF_RX_RING).map_err(map_err("RX"))?,
        tx: Producer::map(fd, &tx, tx_count, sys::XDP_PGOFF_TX_RING).map_err(map_err("TX"))?,
    })
}

/// A port on an AF_XDP socket bound to queue 0 of one interface, in copy
/// mode. See the [module docs](self).
#[derive(Debug)]
pub struct XdpPort {
    /// The program's link: first, so the program is detached before the
    /// socket closes.
    attached: bpf::Attached,
    fd: OwnedFd,
    fill: Producer<u64>,
    comp: Consumer<u64>,
    rx: Consumer<XdpDesc>,
    tx: Producer<XdpDesc>,
    /// After the socket and the rings (the kernel unpins it when the
    /// socket goes).
    umem: Umem,
    /// Receive frames read whose fill-ring push failed, to push again
    /// (sized for every receive frame: never grows).
    refill: Vec<u32>,
    ioctl: OwnedFd,
    name: String,
    ifindex: u32,
    mac: [u8; 6],
    mtu: usize,
    stats: XdpPortStats,
    /// When to try again to send what the last kick left on the TX ring.
    retry_at: Option<std::time::Instant>,
    /// Most frames one `sendto` moves.
    tx_budget: u32,
}

impl XdpPort {
    /// Opens a port on queue 0 of interface `ifname` in the calling
    /// thread's network namespace. Needs `CAP_NET_RAW`, `CAP_BPF` and
    /// `CAP_NET_ADMIN` (root), and an interface with one receive queue.
    pub fn open(ifname: &str, opts: &XdpOptions) -> io::Result<XdpPort> {
        let inval = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if opts.frame_size != 2048 && opts.frame_size != 4096 {
            return Err(inval(format!(
                "XDP frame size {} must be 2048 or 4096",
                opts.frame_size
            )));
        }
        if !opts.frames.is_power_of_two() || !(64..=1 << 16).contains(&opts.frames) {
            return Err(inval(format!(
                "XDP frames {} must be a power of two from 64 to 65536",
                opts.frames
            )));
        }
        let ioctl = sys::ioctl_socket()?;
        let info = sys::if_info(&ioctl, ifname)?;
        let mtu = check_options(ifname, opts, &info)?;
        let fd = open_socket()?;

        let rx_count = opts.frames / 2;
        let tx_count = opts.frames - rx_count;
        let umem = Umem::new(opts.frame_size, opts.frames, rx_count).map_err(|e| {
            context(
                &format!(
                    "mapping {} bytes of UMEM for {ifname}",
                    opts.frames as usize * opts.frame_size as usize
                ),
                e,
            )
        })?;
        let Rings {
            mut fill,
            comp,
            rx,
            tx,
        } = register(&fd, ifname, &umem, opts.frame_size, rx_count, tx_count)?;

        // Every receive frame goes to the kernel before it can receive.
        for a in umem.frames.rx_addrs() {
            if !fill.push(a) {
                return Err(io::Error::other(format!(
                    "the fill ring of {ifname} took fewer than {rx_count} frames"
                )));
            }
        }
        fill.submit();

        // Linux 6.17+: let one `sendto` move the whole TX ring in copy mode
        // (32 frames per call otherwise; older kernels refuse the option).
        let tx_budget = match softoe_sys::sockopt::set_int(
            &fd,
            sys::SOL_XDP,
            sys::XDP_MAX_TX_SKB_BUDGET,
            tx_count as i32,
        ) {
            Ok(()) => tx_count,
            Err(_) => 32,
        };

        let flags = SocketAddrXdpFlags::XDP_COPY | SocketAddrXdpFlags::XDP_USE_NEED_WAKEUP;
        rustix::net::bind(&fd, &SocketAddrXdp::new(flags, info.ifindex, 0)).map_err(|e| {
            context(
                &format!("binding the AF_XDP socket to {ifname} queue 0 (copy mode)"),
                e.into(),
            )
        })?;

        let attached = bpf::attach(ifname, info.ifindex, 0, &fd, opts.mode)?;
        Ok(XdpPort {
            attached,
            fd,
            fill,
            comp,
            rx,
            tx,
            umem,
            refill: Vec::with_capacity(rx_count as usize),
            ioctl,
            name: ifname.to_string(),
            ifindex: info.ifindex,
            mac: info.mac,
            mtu,
            stats: XdpPortStats::default(),
            retry_at: None,
            tx_budget,
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface's hardware address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Where the XDP program runs.
    pub fn mode(&self) -> XdpMode {
        self.attached.mode
    }

    /// Most frames one `sendto` hands the kernel: the TX ring's size where
    /// the kernel took `XDP_MAX_TX_SKB_BUDGET` (Linux 6.17), else copy
    /// mode's fixed 32.
    pub fn tx_budget(&self) -> u32 {
        self.tx_budget
    }

    /// What the port counted.
    pub fn stats(&self) -> XdpPortStats {
        let mut s = self.stats;
        s.bad_ring_indices = self.fill.bad_indices()
            + self.comp.bad_indices()
            + self.rx.bad_indices()
            + self.tx.bad_indices();
        s
    }

    /// The kernel's counts for the socket (`XDP_STATISTICS`).
    pub fn kernel_stats(&self) -> io::Result<XdpStatistics> {
        rustix::net::sockopt::xdp_statistics(&self.fd)
            .map(XdpStatistics::from)
            .map_err(|e| context(&format!("XDP_STATISTICS on {}", self.name), e.into()))
    }

    /// Whether the interface is up with carrier.
    pub fn link_up(&self) -> io::Result<bool> {
        sys::link_up(&self.ioctl, &self.name)
    }

    /// Gives the RX ring's read slots and the read frames back to the
    /// kernel, waking the fill side if it asks.
    fn settle_rx(&mut self) {
        self.rx.release();
        while let Some(&i) = self.refill.last() {
            if !self.fill.push(self.umem.frames.addr(i)) {
                break;
            }
            self.umem.frames.refilled(i);
            self.refill.pop();
        }
        if self.fill.submit() > 0 && self.fill.needs_wakeup() {
            self.stats.fill_wakeups += 1;
            // A zero-length receive only prompts the kernel to look at the
            // fill ring.
            let _ = rustix::net::recv(&self.fd, &mut [0u8; 0][..], RecvFlags::DONTWAIT);
        }
    }

    /// Takes the kernel's completions: their frames are free again.
    fn reap(&mut self) {
        while let Some(addr) = self.comp.pop() {
            if self.umem.frames.complete(addr).is_err() {
                self.stats.tx_bad_completions += 1;
            }
        }
        self.comp.release();
    }

    /// Publishes what was queued and, if the kernel asks for it, has it
    /// send: one `sendto`, more only while a call stops at its budget with
    /// frames left (32 per call in copy mode before Linux 6.17).
    fn kick(&mut self) {
        self.tx.submit();
        for _ in 0..MAX_KICKS {
            if self.tx.outstanding() == 0 || !self.tx.needs_wakeup() {
                return;
            }
            self.stats.tx_kicks += 1;
            // A zero-length send only prompts the kernel to process the TX
            // ring.
            if let Err(e) = rustix::net::send(&self.fd, &[], SendFlags::DONTWAIT) {
                match e {
                    // Stopped at its budget: go on.
                    rustix::io::Errno::AGAIN => continue,
                    // No memory for an skb, or the queue busy: next turn.
                    rustix::io::Errno::BUSY | rustix::io::Errno::NOBUFS => {
                        self.stats.tx_kick_busy += 1;
                        return;
                    }
                    _ => {
                        self.stats.tx_kick_errors += 1;
                        return;
                    }
                }
            }
        }
    }
}

impl Port for XdpPort {
    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            mtu: self.mtu,
            tso_max: None,
            tx_csum: false,
        }
    }

    fn send(&mut self, frame: &TxFrame<'_>, mem: &Memory) -> io::Result<bool> {
        let fs = self.umem.frames.frame_size();
        let len = frame.len();
        if len > fs {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a {len}-byte frame does not fit a {fs}-byte UMEM frame"),
            ));
        }
        if self.umem.frames.free_tx() == 0 || self.tx.free(1) == 0 {
            self.reap();
            if self.umem.frames.free_tx() == 0 || self.tx.free(1) == 0 {
                self.kick();
                self.reap();
            }
        }
        if self.tx.free(1) == 0 {
            self.stats.tx_busy += 1;
            return Ok(false);
        }
        let Some(i) = self.umem.frames.alloc_tx() else {
            self.stats.tx_busy += 1;
            return Ok(false);
        };
        let written = (|| {
            let buf = self.umem.tx_frame(i)?;
            let h = frame.header.len();
            buf.get_mut(..h)?.copy_from_slice(frame.header);
            let mut at = h;
            for r in frame.payload {
                let b = mem.get(r)?;
                let end = at.checked_add(b.len())?;
                b.copy_to(0, buf.get_mut(at..end)?);
                at = end;
            }
            Some(at)
        })();
        let Some(n) = written else {
            self.umem.frames.unalloc_tx(i);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "payload reference outside its region",
            ));
        };
        let desc = XdpDesc {
            addr: self.umem.frames.addr(i),
            len: n as u32,
            options: 0,
        };
        if !self.tx.push(desc) {
            self.umem.frames.unalloc_tx(i);
            self.stats.tx_busy += 1;
            return Ok(false);
        }
        self.umem.frames.sent(i);
        Ok(true)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<RxFrame>> {
        for _ in 0..MAX_SKIPS {
            let Some(d) = self.rx.pop() else {
                self.settle_rx();
                return Ok(None);
            };
            let got = self.umem.read_rx(&d, buf);
            if self.rx.taken() >= RX_BATCH {
                // The frame read goes back below; first the batch so far.
                self.settle_rx();
            }
            match got {
                Ok((i, n)) => {
                    if self.fill.push(self.umem.frames.addr(i)) {
                        self.umem.frames.refilled(i);
                    } else {
                        self.refill.push(i);
                    }
                    let Some(len) = n else {
                        self.stats.rx_truncated += 1;
                        continue;
                    };
                    return Ok(Some(RxFrame {
                        start: 0,
                        len,
                        meta: RxMeta {
                            csum_verified: false,
                            gso_size: None,
                        },
                    }));
                }
                Err(_) => self.stats.rx_bad_descs += 1,
            }
        }
        Ok(None)
    }

    fn flush(&mut self) {
        self.settle_rx();
        if self.tx.pending() > 0 || self.retry_at.is_some() {
            self.kick();
            // Frames the kernel would not take now must not wait for the
            // next frame in (the engine sleeps on receive only).
            self.retry_at =
                (self.tx.outstanding() > 0).then(|| std::time::Instant::now() + RETRY_AFTER);
        }
        self.reap();
    }

    fn wake_at(&self) -> Option<std::time::Instant> {
        self.retry_at
    }

    fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn describe(&self) -> String {
        format!(
            "xdp {} q0 copy ({} mode)",
            self.name,
            self.attached.mode.name()
        )
    }

    fn dropped(&mut self) -> Option<u64> {
        // `rx_dropped` includes the frames that found the fill ring empty.
        self.kernel_stats()
            .ok()
            .map(|s| s.rx_dropped + s.rx_ring_full)
    }

    fn carrier(&mut self) -> Option<bool> {
        self.link_up().ok()
    }
}
