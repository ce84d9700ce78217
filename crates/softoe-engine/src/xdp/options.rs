//! How an [`XdpPort`](super::XdpPort) is opened, and what it counts.

use super::bpf::XdpMode;

/// How to open an [`XdpPort`](super::XdpPort).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct XdpOptions {
    /// Bytes per UMEM frame: 2048 or 4096. A received frame has this less
    /// 256 bytes of the kernel's headroom.
    pub frame_size: u32,
    /// UMEM frames, a power of two from 64 to 65,536: half receive (the
    /// fill and RX rings hold them all), half send.
    pub frames: u32,
    /// The IP MTU to report to the stack; `None`: the interface's. It may
    /// not exceed the interface's, nor what a frame holds.
    pub mtu: Option<usize>,
    /// Where the program runs; `None`: the driver's hook if it has one,
    /// else the generic one.
    pub mode: Option<XdpMode>,
}

impl Default for XdpOptions {
    fn default() -> XdpOptions {
        XdpOptions {
            frame_size: 4096,
            frames: 4096,
            mtu: None,
            mode: None,
        }
    }
}

/// What an [`XdpPort`](super::XdpPort) counted itself (the kernel's counts are
/// [`XdpPort::kernel_stats`](super::XdpPort::kernel_stats)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XdpPortStats {
    /// RX descriptors refused (outside the UMEM, across a frame, or naming
    /// a frame the kernel did not hold) and skipped.
    pub rx_bad_descs: u64,
    /// Frames larger than the caller's buffer, skipped.
    pub rx_truncated: u64,
    /// Completions refused (not a send frame the kernel held).
    pub tx_bad_completions: u64,
    /// Ring indices the kernel published that no ring can have, ignored.
    pub bad_ring_indices: u64,
    /// `sendto` calls made to start transmission.
    pub tx_kicks: u64,
    /// Those that failed with something other than "busy, try again".
    pub tx_kick_errors: u64,
    /// Those the kernel answered "busy" (no memory for a frame, or the
    /// device's queue full): the frames left wait for the next turn, which
    /// [`Port::wake_at`](crate::Port::wake_at) brings forward.
    pub tx_kick_busy: u64,
    /// `recvfrom` calls made because the fill ring needed a wake-up.
    pub fill_wakeups: u64,
    /// Sends refused for want of a free frame or TX slot.
    pub tx_busy: u64,
}
