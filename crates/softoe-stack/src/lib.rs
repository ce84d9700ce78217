//! # softoe-stack: the sans-IO TCP/IP core of softoe
//!
//! softoe is a software TCP/IP offload engine: a standalone stack runs on a
//! dedicated engine core and serves host programs through shared memory. This
//! crate is that stack's protocol core, and nothing else: Ethernet/ARP,
//! IPv4 (fragment reassembly bounded in memory and time, overlaps dropped;
//! path-MTU discovery after RFC 1191 with RFC 5927's checks and a
//! per-destination cache), ICMP, UDP and TCP (RFC 9293 with SACK, window scaling, timestamps
//! and PAWS; RFC 6298 RTO with a per-connection floor; loss detection by
//! RACK with tail-loss probes (RFC 8985), its reordering window adapted by
//! D-SACK, over a SACK scoreboard (RFC 6675); Proportional Rate Reduction
//! (RFC 6937) while recovering; NewReno and CUBIC congestion control;
//! RFC 5961 hardening).
//!
//! ## Why sans-IO
//!
//! The same code must run on a real engine core, in a deterministic
//! simulator, and — some day — on a SmartNIC core with no operating system
//! (as HL-TCP and LyraNET did). So the stack does no I/O of its own:
//!
//! - **No clock.** Every entry point takes `now: Instant`.
//!   [`Stack::poll_at`] says when to call again.
//! - **No randomness from outside.** ISNs come from a keyed hash of a secret
//!   the caller gives (RFC 6528); everything else from a seeded PRNG. Same
//!   inputs, same outputs, bit for bit.
//! - **No device.** Frames come in as borrowed bytes ([`Stack::receive`]) with
//!   [`RxMeta`] (checksum verified by the NIC? a receive-coalesced frame?).
//!   Frames go out through a [`Device`] the caller passes in, as a header the
//!   stack built plus [`PayloadRef`]s — never a forced copy of payload.
//! - **No application memory.** Send data is queued by reference and resolved
//!   by the runtime when a frame is written; the runtime learns from
//!   [`Stack::tcp_acked`] when it may reuse the memory (zero-copy send).
//! - **No allocation in steady state.** Every buffer is sized when its socket
//!   is created.
//!
//! The port's offloads are first-class: with TSO ([`DeviceCaps::tso_max`])
//! TCP emits super-segments up to 64 KiB for the port to cut; with checksum
//! offload ([`DeviceCaps::tx_csum`]) it leaves the pseudo-header sum for the
//! port to finish.
//!
//! ## Example
//!
//! Two stacks joined by a "wire" that is just a queue of frames:
//!
//! ```
//! use softoe_stack::*;
//! use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};
//!
//! // A port that queues frames and resolves payload from one memory region.
//! struct Wire<'m> { mem: &'m [u8], out: Vec<Vec<u8>> }
//! impl Device for Wire<'_> {
//!     fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
//!         r.copy_from(self.mem, offset, dst)
//!     }
//!     fn transmit(&mut self, f: &TxFrame<'_>) -> Result<(), TxBusy> {
//!         let mut frame = f.header.to_vec();
//!         for r in f.payload {
//!             frame.extend_from_slice(&self.mem[r.offset as usize..r.offset as usize + r.len()]);
//!         }
//!         self.out.push(frame);
//!         Ok(())
//!     }
//! }
//!
//! let cfg = |n: u8| {
//!     let mut c = StackConfig::new(
//!         EthernetAddress([2, 0, 0, 0, 0, n]),
//!         Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, n), 24).unwrap(),
//!     );
//!     c.seed = u64::from(n);
//!     c
//! };
//! let (mut a, mut b) = (Stack::new(cfg(1)).unwrap(), Stack::new(cfg(2)).unwrap());
//! let msg = b"hello, offload";
//! let (mut wa, mut wb) = (Wire { mem: msg, out: vec![] }, Wire { mem: msg, out: vec![] });
//!
//! let server = Endpoint::new(Ipv4Address::new(10, 0, 0, 2), 80);
//! let lst = b.tcp_listen(server, 8, None).unwrap();
//! let now = Instant::from_millis(1);
//! let conn = a.tcp_connect(now, server, None, None).unwrap();
//! a.tcp_send(conn, PayloadRef::new(0, 0, msg.len() as u32)).unwrap();
//! a.tcp_shutdown(conn).unwrap();
//!
//! // Shuttle frames until both sides are quiet.
//! for _ in 0..20 {
//!     a.poll(now, &mut wa);
//!     b.poll(now, &mut wb);
//!     for f in std::mem::take(&mut wa.out) { b.receive(now, &f, RxMeta::default(), &mut wb); }
//!     for f in std::mem::take(&mut wb.out) { a.receive(now, &f, RxMeta::default(), &mut wa); }
//! }
//! let peer = b.tcp_accept(lst).unwrap().expect("a connection");
//! let mut buf = [0u8; 64];
//! let n = b.tcp_recv(peer, &mut buf).unwrap();
//! assert_eq!(&buf[..n], msg);
//! assert_eq!(b.tcp_recv(peer, &mut buf), Err(RecvError::Finished));
//! assert_eq!(a.tcp_acked(conn).unwrap(), msg.len() as u64);
//! ```

#![no_std]
#![deny(unsafe_code)]
#![warn(
    clippy::std_instead_of_core,
    clippy::alloc_instead_of_core,
    clippy::std_instead_of_alloc
)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod config;
pub mod device;
pub mod fault;
mod iface;
pub mod isn;
pub mod payload;
mod pmtu;
pub mod rand;
mod reasm;
mod socket;
mod stack;
pub mod stats;
pub mod tcp;
pub mod time;

#[cfg(test)]
mod tests;

pub use config::{
    ArpConfig, DEFAULT_TTL, IpConfig, Keepalive, StackConfig, SynCookies, TcpConfig, UdpConfig,
};
pub use device::{Device, DeviceCaps, PartialCsum, RxMeta, RxRing, TxBusy, TxFrame, TxOffload};
pub use payload::PayloadRef;
pub use socket::{Events, SocketHandle};
pub use stack::{BindError, ConfigError, HandleError, Stack, UdpSendError};
pub use stats::{StackStats, TcpMemory};
pub use tcp::congestion::Algorithm;
pub use tcp::{Endpoint, ListenerInfo, RecvError, SendError, State, TcpError, TcpInfo};
pub use time::Instant;
