//! # softoe-wire: packet formats for softoe
//!
//! The bottom layer of softoe: Ethernet II (802.1Q tags read and written),
//! ARP, IPv4 (options skipped, fragments recognised), ICMPv4 (echo,
//! destination unreachable), UDP, and TCP with the options a modern TCP needs
//! (MSS, window scale, SACK, timestamps) — plus the Internet checksum: full,
//! streamed over pieces, pseudo-header only, and incremental. No I/O, no
//! allocation, no dependencies, `no_std`.
//!
//! ## Shape
//!
//! Each format has two halves, after smoltcp:
//!
//! - a **view**, `Packet<T: AsRef<[u8]>>` ([`EthernetFrame`], [`Ipv4Packet`],
//!   [`TcpPacket`]…), over bytes that live elsewhere — a NIC buffer, a
//!   shared-memory ring, application memory. Getters and setters are named
//!   after the fields; nothing is copied. `new_unchecked` wraps,
//!   `new_checked` wraps and calls `check_len`, `into_inner` unwraps.
//! - a **`Repr`** ([`EthernetRepr`], [`Ipv4Repr`], [`TcpRepr`]…): the meaning
//!   of a header, checked by `parse` (impossible lengths and flags, and
//!   checksums unless the port verified them) and written back by `emit`.
//!   `Repr`s borrow their payload and allocate nothing.
//!
//! ## Contract
//!
//! Every module keeps the same three promises, tested by property tests and
//! fuzzed (`fuzz/` at the workspace root):
//!
//! 1. after a view's `check_len()` has passed, no accessor panics (and every
//!    accessor here is in fact total, checked or not: out-of-range fields
//!    read as zero or empty);
//! 2. `Repr::parse` never panics, on any bytes;
//! 3. `Repr::emit` never panics into a buffer of the `Repr`'s `buffer_len()`
//!    bytes (nor into a shorter one: what does not fit is not written).
//!
//! Code points this crate does not know round-trip rather than fail:
//! `EtherType::Unknown(u16)`, `IpProtocol::Unknown(u8)`, and so on, with
//! `From` conversions both ways.
//!
//! ## Why it looks like this for a TOE
//!
//! An offload engine must touch payload as little as possible:
//!
//! - **Zero-copy views.** A received frame is parsed where it lies; the TCP
//!   payload a [`TcpRepr`] hands up is a slice of the NIC's buffer.
//! - **Checksum-offload hooks.** Checksum work is a capability passed to
//!   every `parse` and `emit` ([`ChecksumCaps`]): a port that verified a
//!   checksum lets the stack skip it, and a port that computes checksums gets
//!   the pseudo-header sum in the field ([`checksum::pseudo_header`]), as
//!   virtio-net's `NEEDS_CSUM` wants.
//! - **Headers apart from payload.** [`TcpRepr::emit_header`] writes a header
//!   without its payload, because the payload is sent by reference from
//!   application memory; [`checksum::Accumulator`] sums a packet given in
//!   scattered pieces of any length; [`checksum::update`] patches a checksum
//!   when one field changes.
//! - **Super-segments.** Lengths are `usize` up to the 64 KiB a TSO
//!   super-segment needs.
//!
//! ## Example
//!
//! A frame as it comes off the wire, parsed down to TCP the way a stack
//! does: check each layer, then read the next from its payload.
//!
//! ```
//! use softoe_wire::*;
//!
//! # let bytes = {
//! #     let tcp = TcpRepr {
//! #         src_port: 40000, dst_port: 80, control: TcpControl::Syn, psh: false,
//! #         seq_number: TcpSeqNumber(1), ack_number: None, window_len: 65535,
//! #         window_scale: Some(7), max_seg_size: Some(1460), sack_permitted: true,
//! #         sack_ranges: [None; 4], timestamp: Some(TcpTimestamp { tsval: 9, tsecr: 0 }),
//! #         payload: &[],
//! #     };
//! #     let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
//! #     let ip = Ipv4Repr {
//! #         src_addr: src, dst_addr: dst, next_header: IpProtocol::Tcp,
//! #         payload_len: tcp.buffer_len(), hop_limit: 64, ident: 0, dont_frag: true,
//! #     };
//! #     let eth = EthernetRepr {
//! #         src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
//! #         dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
//! #         ethertype: EtherType::Ipv4, vlan_tci: None,
//! #     };
//! #     let mut buf = vec![0u8; 80]; // 74 bytes of frame, 6 of trailer
//! #     let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
//! #     eth.emit(&mut f);
//! #     let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
//! #     ip.emit(&mut p, &ChecksumCaps::default());
//! #     let len = tcp.buffer_len();
//! #     tcp.emit(&mut TcpPacket::new_unchecked(&mut p.payload_mut()[..len]), &src, &dst, &ChecksumCaps::default());
//! #     buf
//! # };
//! // `bytes`: a frame holding a SYN, with 6 bytes of trailer after it
//! // (the hidden `#` lines build it).
//! let caps = ChecksumCaps::default(); // software verifies every checksum
//!
//! let frame = EthernetFrame::new_checked(&bytes[..])?;
//! assert_eq!(frame.ethertype(), EtherType::Ipv4);
//!
//! let packet = Ipv4Packet::new_checked(frame.payload())?;
//! let ip = Ipv4Repr::parse(&packet, &caps)?;
//! assert!(!packet.is_fragment());
//! assert_eq!(ip.next_header, IpProtocol::Tcp);
//! assert_eq!(packet.payload().len(), 40); // stops at the IPv4 total length
//!
//! let segment = TcpPacket::new_checked(packet.payload())?;
//! let tcp = TcpRepr::parse(&segment, &ip.src_addr, &ip.dst_addr, &caps)?;
//! assert_eq!((tcp.src_port, tcp.dst_port), (40000, 80));
//! assert_eq!(tcp.control, TcpControl::Syn);
//! assert_eq!(tcp.max_seg_size, Some(1460));
//! assert_eq!(tcp.window_scale, Some(7));
//! assert!(tcp.sack_permitted && tcp.payload.is_empty());
//! assert_eq!(
//!     tcp.to_string(),
//!     "TCP src=40000 dst=80 seq=1 win=65535 len=0 [S] mss=1460 sackOK TS=9/0 wscale=7"
//! );
//!
//! // And back: a SYN-ACK into a buffer of exactly `buffer_len()` bytes.
//! let reply = TcpRepr {
//!     src_port: tcp.dst_port, dst_port: tcp.src_port,
//!     seq_number: TcpSeqNumber(5000), ack_number: Some(tcp.seq_number + tcp.segment_len()),
//!     timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 9 }),
//!     ..tcp
//! };
//! let mut out = vec![0u8; reply.buffer_len()];
//! reply.emit(&mut TcpPacket::new_unchecked(&mut out[..]), &ip.dst_addr, &ip.src_addr, &caps);
//! let back = TcpRepr::parse(&TcpPacket::new_checked(&out[..])?, &ip.dst_addr, &ip.src_addr, &caps)?;
//! assert_eq!(back, reply);
//! # Ok::<(), softoe_wire::Error>(())
//! ```

#![no_std]
#![deny(unsafe_code)]
#![warn(
    clippy::std_instead_of_core,
    clippy::alloc_instead_of_core,
    clippy::std_instead_of_alloc
)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod arp;
mod bytes;
pub mod checksum;
mod error;
pub mod ethernet;
pub mod icmpv4;
pub mod ipv4;
pub mod tcp;
pub mod udp;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use checksum::{Checksum, ChecksumCaps};
pub use error::{Error, Result};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
pub use icmpv4::{
    Icmpv4DstUnreachable, Icmpv4Message, Icmpv4Packet, Icmpv4Repr, Icmpv4TimeExceeded,
};
pub use ipv4::{IpProtocol, Ipv4Address, Ipv4Cidr, Ipv4Packet, Ipv4Repr};
pub use tcp::{
    TcpControl, TcpOption, TcpPacket, TcpRepr, TcpSackRanges, TcpSeqNumber, TcpTimestamp,
};
pub use udp::{UdpPacket, UdpRepr};
