//! The virtio-net header that precedes every frame on a TAP opened with
//! `IFF_VNET_HDR` (struct `virtio_net_hdr_v1`, 12 bytes, little-endian).
//!
//! It is how a TAP behaves like a NIC with offloads: on write it asks the
//! kernel to cut a TCP super-segment (`gso_type`, `gso_size`) and to finish a
//! partial checksum (`NEEDS_CSUM`, `csum_start`, `csum_offset`); on read it
//! says a frame is a coalesced super-segment, or that its checksum is
//! partial or already verified (`DATA_VALID`).

use softoe_stack::{RxMeta, TxOffload};

/// Length of the header we configure with `TUNSETVNETHDRSZ`.
pub const LEN: usize = 12;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
pub const F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`.
pub const F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_ECN` (a flag on `gso_type`).
pub const GSO_ECN: u8 = 0x80;

/// A parsed header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `NEEDS_CSUM` / `DATA_VALID`.
    pub flags: u8,
    /// `GSO_*`.
    pub gso_type: u8,
    /// Length of the headers (Ethernet + IP + TCP) of a GSO frame.
    pub hdr_len: u16,
    /// Segment payload size of a GSO frame.
    pub gso_size: u16,
    /// Where checksumming starts.
    pub csum_start: u16,
    /// Where the checksum goes, from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// Reads a header from the first [`LEN`] bytes.
    pub fn parse(b: &[u8]) -> Option<VnetHdr> {
        let b: &[u8; LEN] = b.get(..LEN)?.try_into().ok()?;
        let u16le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16le(2),
            gso_size: u16le(4),
            csum_start: u16le(6),
            csum_offset: u16le(8),
        })
    }

    /// The header's bytes.
    pub fn to_bytes(self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// The header for a frame the stack sends with `offload`, whose headers
    /// (Ethernet to TCP) are `header_len` bytes.
    pub fn for_tx(offload: &TxOffload, header_len: usize) -> VnetHdr {
        let mut h = VnetHdr::default();
        if let Some(c) = offload.csum {
            h.flags = F_NEEDS_CSUM;
            h.csum_start = c.start;
            h.csum_offset = c.offset;
        }
        if let Some(mss) = offload.gso_size {
            h.gso_type = GSO_TCPV4;
            h.gso_size = mss;
            h.hdr_len = header_len.min(usize::from(u16::MAX)) as u16;
        }
        h
    }

    /// What the stack should know about a received frame.
    pub fn rx_meta(&self) -> RxMeta {
        let gso = self.gso_type & !GSO_ECN;
        RxMeta {
            // A partial checksum comes from a local sender and is sound;
            // DATA_VALID means the kernel checked it.
            csum_verified: self.flags & (F_NEEDS_CSUM | F_DATA_VALID) != 0,
            gso_size: (gso == GSO_TCPV4 && self.gso_size > 0).then_some(self.gso_size),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softoe_stack::PartialCsum;

    #[test]
    fn round_trip_and_meaning() {
        let off = TxOffload {
            gso_size: Some(1448),
            csum: Some(PartialCsum {
                start: 34,
                offset: 16,
            }),
        };
        let h = VnetHdr::for_tx(&off, 66);
        let b = h.to_bytes();
        assert_eq!(b[..10], [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0]);
        assert_eq!(VnetHdr::parse(&b), Some(h));
        let m = h.rx_meta();
        assert!(m.csum_verified);
        assert_eq!(m.gso_size, Some(1448));
        assert_eq!(VnetHdr::default().rx_meta(), RxMeta::default());
        assert_eq!(VnetHdr::parse(&b[..11]), None);
    }
}
