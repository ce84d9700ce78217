//! # softoe-bond: BondingPlus, sans-IO
//!
//! BondingPlus (Hsueh, Lin and Huang, "Boosting Ethernet using Regular
//! Switching Hubs") puts several NICs of a host behind one IPv4 address on
//! an ordinary switch — no link aggregation, no special hardware — and
//! stripes traffic across them. This crate is its protocol core: the ARP+
//! message, the ARP+ state machine of the paper, the ARP+ table and the
//! announcer that keeps peers' tables filled. No I/O, no clock (time is an
//! input, [`Instant`]), `no_std` + `alloc`.
//!
//! ## What ARP+ is
//!
//! ARP maps an IP address to *one* MAC. A bonded host has several NICs,
//! each keeping its own MAC (the switch learns each one on its own port),
//! so a peer that wants to spread traffic over all of them needs *every*
//! member MAC behind that IP. ARP+ carries exactly that: a host broadcasts
//! its IP and the MACs of all its members ([`ArppType::Broadcast`]),
//! peers answer with theirs ([`ArppType::Reply`]), announce changes of
//! their member set ([`ArppType::Change`]) and withdraw
//! ([`ArppType::Clear`]). Each host keeps the result in an ARP+ table
//! ([`Table`]) and picks a member of the peer for each frame it sends. A
//! host without BondingPlus never answers ARP+; its peers keep reaching it
//! through plain ARP, on one NIC, as before.
//!
//! ## Why it differs from the paper
//!
//! - **Its own EtherType** ([`wire::ETHERTYPE_ARPP`], 0x88B5, IEEE 802
//!   local experimental): ARP+ must not be mistaken for ARP by hosts that
//!   do not speak it; see [`wire`].
//! - **Re-announcement.** The paper broadcasts once, when a host joins; a
//!   lost broadcast leaves a peer unaware of it for good, and a lost
//!   `CHANGE` leaves a peer striping onto a NIC that is gone. Here the
//!   [`Announcer`] repeats the broadcast every period, and the table ages
//!   out peers it has not heard from.
//! - **Sequence numbers.** With repetition comes the risk of an old
//!   announcement, delayed or reordered, undoing a newer one. Every message
//!   carries the sender's sequence number, bumped on each change of its
//!   member set; the table ignores anything older than what it has
//!   (compared with wrap-around, like TCP sequence numbers).
//!
//! ## Layout
//!
//! - [`wire`]: the message format, as a checked view and a `Repr`, in the
//!   style of `softoe-wire`.
//! - [`fsm`]: the paper's Fig. 3 (states S0–S3) as a type.
//! - [`table`]: the ARP+ table.
//! - [`announce`]: when to send our own announcements.
//! - [`bond`]: the bonded interface itself — which member sends each
//!   frame and to which of the peer's members, which received frames the
//!   stack sees, link health — for the engine's bonded port and the
//!   simulator's multi-NIC hosts alike.
//!
//! ## Example
//!
//! Two hosts, A with two NICs and B with one, learn each other's members.
//!
//! ```
//! use core::time::Duration;
//! use softoe_bond::*;
//! use softoe_wire::{EthernetAddress, Ipv4Address};
//!
//! let now = Instant::from_millis(0);
//! let (ip_a, ip_b) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
//! let a_members = Members::new(&[EthernetAddress([2, 0, 0, 0, 0, 1]), EthernetAddress([2, 0, 0, 0, 0, 2])]).unwrap();
//! let mut a = Announcer::new(AnnouncerConfig::new(ip_a, Duration::from_secs(1)), a_members, now);
//! let mut b_table = Table::new(TableConfig::default());
//!
//! // A announces itself at once; the message crosses the wire as bytes.
//! let msg = a.poll(now).unwrap();
//! assert_eq!(msg.packet_type, ArppType::Broadcast);
//! let mut frame = vec![0u8; msg.buffer_len()];
//! msg.emit(&mut ArppPacket::new_unchecked(&mut frame[..]));
//! let got = ArppRepr::parse(&ArppPacket::new_checked(&frame[..])?)?;
//!
//! // B records A's two members, and owes A a reply.
//! let update = b_table.process(now, &got);
//! assert!(update.reply);
//! assert_eq!(b_table.get(ip_a).unwrap().members(), &a_members);
//!
//! // Nothing more from A until the next period.
//! assert!(a.poll(now).is_none());
//! assert_eq!(a.next_deadline(), Some(now + Duration::from_secs(1)));
//! # let _ = ip_b;
//! # Ok::<(), softoe_bond::wire::Error>(())
//! ```

#![no_std]
#![forbid(unsafe_code)]
#![warn(
    clippy::std_instead_of_core,
    clippy::alloc_instead_of_core,
    clippy::std_instead_of_alloc
)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod announce;
pub mod bond;
pub mod fsm;
pub mod table;
mod time;
pub mod wire;

pub use announce::{Announcer, AnnouncerConfig};
pub use bond::{
    Bond, BondConfig, BondStats, ConfigError, DropReason, MemberConfig, MemberState, MemberStats,
    MemberStatus, Policy, Rx,
};
pub use fsm::{Action, Event, Message, Refused, State};
pub use table::{Entry, Outcome, Table, TableConfig, Update};
pub use time::Instant;
pub use wire::{ArppPacket, ArppRepr, ArppType, Members};
