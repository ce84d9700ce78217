//! The kernel's AF_XDP interface (`<linux/if_xdp.h>`) and the few
//! socket and interface calls the port makes, each returning an error that
//! names the step that failed.

// Kept here rather than relying on the libc crate's version having it.
pub(crate) const SOL_XDP: libc::c_int = 283;

/// Linux 6.17: how many frames one `sendto` moves in copy mode (32
/// before, and on older kernels).
pub(crate) const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// In a ring's flags word: the kernel waits for a system call.
pub(crate) const XDP_RING_NEED_WAKEUP: u32 = 1 << 0;

// mmap offsets of the four rings.
pub(crate) const XDP_PGOFF_RX_RING: libc::off_t = 0;
pub(crate) const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
pub(crate) const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
pub(crate) const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

/// Bytes the kernel keeps in front of every received frame in a UMEM
/// chunk in copy mode (`XDP_PACKET_HEADROOM`): a received descriptor's
/// address is its chunk's plus this.
pub(crate) const XDP_PACKET_HEADROOM: usize = 256;

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

impl RingOffset {
    /// rustix's view of a ring's offsets; `None` from a kernel without
    /// ring flags (before 5.4).
    pub(crate) fn from_rustix(o: &rustix::net::xdp::XdpRingOffset) -> Option<RingOffset> {
        Some(RingOffset {
            producer: o.producer,
            consumer: o.consumer,
            desc: o.desc,
            flags: o.flags?,
        })
    }
}

/// `struct xdp_desc`: a frame on the RX or TX ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    /// Address in the UMEM (an offset from its start).
    pub addr: u64,
    /// Length of the frame.
    pub len: u32,
    /// Flags (none used).
    pub options: u32,
}

/// `struct xdp_statistics` (kernels before 5.9 fill only the first three).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XdpStatistics {
    /// Frames dropped for lack of a UMEM frame (the fill ring empty), or
    /// too long for one.
    pub rx_dropped: u64,
    /// Invalid descriptors the kernel found on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors the kernel found on the TX ring.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame came (those frames are
    /// also in `rx_dropped`).
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

impl From<rustix::net::xdp::XdpStatistics> for XdpStatistics {
    /// What a kernel before 5.9 does not count is 0.
    fn from(s: rustix::net::xdp::XdpStatistics) -> XdpStatistics {
        XdpStatistics {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full.unwrap_or(0),
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs.unwrap_or(0),
            tx_ring_empty_descs: s.tx_ring_empty_descs.unwrap_or(0),
        }
    }
}

pub(crate) use crate::netdev::{context, if_info, inet_socket as ioctl_socket, link_up};
