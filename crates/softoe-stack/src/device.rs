//! The boundary between the stack and the port that moves its frames.
//!
//! The stack is sans-IO: it neither reads nor writes a device. Frames come in
//! through [`Stack::receive`](crate::Stack::receive) as borrowed bytes with
//! [`RxMeta`]; frames go out through a [`Device`] the caller passes to every
//! entry point. A transmitted frame is a header the stack built in its own
//! scratch memory plus a list of [`PayloadRef`]s — the payload is never copied
//! by the stack. What the port can do for it (segmentation, checksums) is
//! described once by [`DeviceCaps`] and per frame by [`TxOffload`].

use crate::payload::PayloadRef;

/// What the port under the stack can do. Fixed for the life of a [`Stack`](crate::Stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// The IP MTU: the largest IPv4 packet (header included) one wire frame carries.
    pub mtu: usize,
    /// TCP segmentation offload: the port accepts TCP super-segments whose IPv4
    /// packet is up to this many bytes (at most 65,535) and cuts them into
    /// MTU-sized segments. `None`: no TSO.
    pub tso_max: Option<usize>,
    /// Transmit checksum offload: the port completes TCP and UDP checksums
    /// from the pseudo-header sum the stack leaves in the field.
    pub tx_csum: bool,
}

impl Default for DeviceCaps {
    fn default() -> DeviceCaps {
        DeviceCaps {
            mtu: 1500,
            tso_max: None,
            tx_csum: false,
        }
    }
}

/// Facts the port knows about a received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RxMeta {
    /// The port verified (or vouches for) the transport checksum; the stack
    /// skips its own check. Set for TAP frames marked `DATA_VALID` or
    /// `NEEDS_CSUM`.
    pub csum_verified: bool,
    /// The frame is a receive-coalesced (GRO/LRO) frame built from segments of
    /// this payload size. The stack accounts for it as several segments (for
    /// delayed ACK) but processes it as one.
    pub gso_size: Option<u16>,
}

/// A partial-checksum request: the port sums the frame from `start` to its end
/// and stores the folded, complemented sum at `start + offset`. The field
/// already holds the pseudo-header sum, as virtio-net's `NEEDS_CSUM` expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialCsum {
    /// Offset from the start of the frame (Ethernet header included) where
    /// summing starts: the transport header.
    pub start: u16,
    /// Offset of the checksum field from `start` (16 for TCP, 6 for UDP).
    pub offset: u16,
}

/// Offload work the port must do for one outgoing frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TxOffload {
    /// The frame is a TCP super-segment: cut its payload into segments of this
    /// many bytes, replicating and fixing up the headers (as TSO does).
    pub gso_size: Option<u16>,
    /// The transport checksum is left to the port.
    pub csum: Option<PartialCsum>,
}

/// One frame the stack asks the port to send.
#[derive(Debug)]
pub struct TxFrame<'a> {
    /// Ethernet, IPv4 and transport headers, complete but for offloaded checksums.
    pub header: &'a [u8],
    /// The payload, in order, by reference. Often empty (ACKs, control).
    pub payload: &'a [PayloadRef],
    /// What the port must finish.
    pub offload: TxOffload,
    /// The sending socket's `SO_PRIORITY` (0 for frames of no socket: ARP,
    /// ICMP, resets, and frames that waited for ARP). Ports that schedule
    /// by class (a bonded port's prioritized policy) read it; others ignore it.
    pub priority: u8,
}

impl TxFrame<'_> {
    /// Total length of the frame in bytes.
    pub fn len(&self) -> usize {
        self.header.len() + self.payload_len()
    }

    /// Whether the frame has no bytes at all (never true for frames the stack emits).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Payload length in bytes.
    pub fn payload_len(&self) -> usize {
        self.payload.iter().map(PayloadRef::len).sum()
    }
}

/// The port refused a frame for now (its queue is full). The stack keeps the
/// data and tries again on a later poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxBusy;

/// The runtime side of the stack's I/O: resolves payload references and takes
/// frames.
pub trait Device {
    /// Copies the bytes of `r` from `offset` bytes into it to the front of
    /// `dst`, and returns how many it copied: `min(dst.len(), r.len() -
    /// offset)` (0 once `offset` reaches `r.len()`) for every reference the
    /// runtime handed the stack and that the stack still holds. A reference
    /// the runtime cannot resolve copies nothing.
    ///
    /// Called only when the stack must read payload itself: to compute a
    /// checksum the port will not, and to make a small frame that waits for
    /// ARP whole. It is a copy, not a borrowed slice, so that payload may
    /// live in memory a program shares with the runtime and can write at
    /// any moment (a zero-copy send buffer it did not leave alone): the
    /// runtime reads such memory as it must (volatile copies), and the stack
    /// only ever reads bytes of its own. A device whose memory is a plain
    /// slice can use [`PayloadRef::copy_from`].
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize;

    /// The bytes of `r` in place — exactly `r.len()` of them — if they are
    /// memory that nothing else writes while the stack holds the reference
    /// (a simulator's arena, the runtime's own buffers); the stack then sums
    /// them for a software checksum without copying them first. `None`, the
    /// default, sends every read through [`copy_payload`](Self::copy_payload).
    /// Memory a program shares with the runtime must never be lent here.
    fn payload_in_place(&self, r: &PayloadRef) -> Option<&[u8]> {
        let _ = r;
        None
    }

    /// Send one frame. The frame's memory is only borrowed for the call: a port
    /// that queues must copy the header (payload references stay valid until
    /// acknowledged).
    fn transmit(&mut self, frame: &TxFrame<'_>) -> Result<(), TxBusy>;

    /// Writes `data` into the runtime's receive ring `ring` at free-running
    /// position `pos` (byte `pos` lands at `ring.offset + pos % ring.len`,
    /// wrapping at the ring's end): in-order bytes of a connection whose
    /// reader set that ring ([`Stack::tcp_set_rx_sink`]), written straight
    /// from the arriving frame instead of through the stack's own receive
    /// buffer. The stack never writes more than the ring has free, so
    /// `data.len() ≤ ring.len`. `false` if the runtime cannot write there
    /// (the default: no rings); the stack then keeps the bytes itself and
    /// stops using the ring.
    ///
    /// [`Stack::tcp_set_rx_sink`]: crate::Stack::tcp_set_rx_sink
    fn deliver(&mut self, ring: &RxRing, pos: u64, data: &[u8]) -> bool {
        let _ = (ring, pos, data);
        false
    }
}

/// A receive ring the runtime owns: `len` bytes at `offset` in memory
/// `region` (named as a [`PayloadRef`]'s), written by the stack through
/// [`Device::deliver`] and read by whoever the runtime serves (a program
/// reading its socket where the bytes landed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RxRing {
    /// Which memory; meaningful only to the runtime.
    pub region: u32,
    /// Byte offset of the ring in the region.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}
