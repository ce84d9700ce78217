//! # softoe-wire: packet formats for softoe
//!
//! Ethernet II (802.1Q tags read), ARP, IPv4 (options skipped, fragments
//! recognised), ICMPv4 (echo, destination unreachable), UDP and TCP with the
//! options a modern TCP needs, and the Internet checksum — full, by pieces,
//! pseudo-header only, and incremental.
//!
//! ## Shape
//!
//! Each format has two halves, after smoltcp:
//!
//! - a **view**, `Packet<T: AsRef<[u8]>>`, over bytes that live elsewhere (a
//!   NIC buffer, a shared-memory ring): getters and setters named after the
//!   fields, nothing copied. After `new_checked` (or `check_len`) succeeds,
//!   no accessor panics — and every accessor here is total anyway.
//! - a **`Repr`**: the meaning of a header, checked (`parse` rejects impossible
//!   lengths and flags and, if asked, bad checksums) and emitted back. `Repr`s
//!   borrow their payload and allocate nothing; `parse` never panics on any
//!   bytes, and `emit` never panics into a buffer of `buffer_len()` bytes.
//!
//! ## Why it looks like this for a TOE
//!
//! An offload engine must touch payload as little as possible. So checksum
//! behaviour is a capability passed to every `parse` and `emit`
//! ([`ChecksumCaps`]): a port that verified a checksum lets the stack skip it,
//! and a port that computes checksums gets the pseudo-header sum in the field
//! ([`checksum::pseudo_header`]), as virtio-net's `NEEDS_CSUM` wants. TCP
//! headers can be emitted without their payload ([`TcpRepr::emit_header`]),
//! because the payload is sent by reference from application memory, and a
//! checksum can be accumulated over scattered pieces
//! ([`checksum::Accumulator`]).
//!
//! ## Example
//!
//! ```
//! use softoe_wire::*;
//!
//! // Build a TCP SYN inside IPv4 inside Ethernet...
//! let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
//! let tcp = TcpRepr {
//!     src_port: 40000, dst_port: 80, control: TcpControl::Syn, psh: false,
//!     seq_number: TcpSeqNumber(1), ack_number: None, window_len: 65535,
//!     window_scale: Some(7), max_seg_size: Some(1460), sack_permitted: true,
//!     sack_ranges: [None; 4], timestamp: None, payload: &[],
//! };
//! let ip = Ipv4Repr {
//!     src_addr: src, dst_addr: dst, next_header: IpProtocol::Tcp,
//!     payload_len: tcp.buffer_len(), hop_limit: 64, ident: 0, dont_frag: true,
//! };
//! let eth = EthernetRepr {
//!     src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]), dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
//!     ethertype: EtherType::Ipv4, vlan_tci: None,
//! };
//! let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + tcp.buffer_len()];
//! let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
//! eth.emit(&mut f);
//! let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
//! ip.emit(&mut p, &ChecksumCaps::default());
//! tcp.emit(&mut TcpPacket::new_unchecked(p.payload_mut()), &src, &dst, &ChecksumCaps::default());
//!
//! // ...and parse it back down the layers.
//! let f = EthernetFrame::new_checked(&buf[..]).unwrap();
//! assert_eq!(f.ethertype(), EtherType::Ipv4);
//! let p = Ipv4Packet::new_checked(f.payload()).unwrap();
//! let ip2 = Ipv4Repr::parse(&p, &ChecksumCaps::default()).unwrap();
//! let t = TcpPacket::new_checked(p.payload()).unwrap();
//! let tcp2 = TcpRepr::parse(&t, &ip2.src_addr, &ip2.dst_addr, &ChecksumCaps::default()).unwrap();
//! assert_eq!(tcp2, tcp);
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
pub use icmpv4::{Icmpv4DstUnreachable, Icmpv4Message, Icmpv4Packet, Icmpv4Repr};
pub use ipv4::{IpProtocol, Ipv4Address, Ipv4Cidr, Ipv4Packet, Ipv4Repr};
pub use tcp::{
    TcpControl, TcpOption, TcpPacket, TcpRepr, TcpSackRanges, TcpSeqNumber, TcpTimestamp,
};
pub use udp::{UdpPacket, UdpRepr};
