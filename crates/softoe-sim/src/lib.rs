//! # softoe-sim: the deterministic world
//!
//! softoe's protocol core is sans-IO, so it can run in a world whose time is
//! virtual and whose wires are made of code. This crate is that world: a
//! virtual clock and an event queue; nodes (softoe stacks with applications,
//! [`StackNode`]) behind virtual NICs that model TSO, checksum offload, GRO
//! and interrupt coalescing; links with a rate, delay, jitter, a bounded
//! queue and seeded faults (loss, duplication, reordering, corruption); and a
//! learning switch to join many nodes. It jumps from event to event, driving
//! each stack to its next `poll_at` deadline.
//!
//! A [`Router`] joins links of different MTUs, and answers a packet too
//! large for the next one as its [`DfPolicy`] says: a fragmentation-needed
//! message (path-MTU discovery), silence (a black hole), or fragments
//! (reassembly at the receiver).
//!
//! A node may have several NICs, each with its own link
//! ([`World::add_node_with_nics`]), and a link can be cut and restored
//! ([`World::cut_link`]). That is what **bonded hosts** are made of
//! ([`bonded::BondedNode`]): one stack behind N NICs on a switch, driven
//! through `softoe-bond`'s `Bond` — the same code the engine's bonded port
//! runs — so that striping one flow over several links, the reordering it
//! causes, plain-ARP peers, and failover when a member's link dies are
//! proved here, deterministically. [`lan`] builds such LANs (bonded and
//! plain hosts, connections, link failures on cue) and measures the
//! failover gap.
//!
//! Everything random derives from one seed, per link and direction: **same
//! seed, same trace, bit for bit** ([`World::trace_hash`]). That is what lets
//! a property test run thousands of seeds and reproduce any failure exactly.
//!
//! It is also the **full-system simulator** that predicts when offload
//! pays ([`machine`]). Around the same stack code, a
//! [`MachineNode`](machine::MachineNode) makes every piece of work take
//! virtual time on queued resources — the host CPU, the engine core at a
//! fraction (or a multiple) of the host's speed, the I/O bus and its DMA,
//! the NIC's interrupt moderation — priced per counted event by a
//! calibration measured from the real engine. Nothing saturates by
//! assumption: offer a resource more work than it can do and its queue
//! grows while throughput settles at its rate, which is how a slow engine
//! or a slow memory turns offload from a gain into a loss.
//! [`machine::predict()`] reads the same configuration file as the real
//! engine's emulation and answers with throughput, latency and CPU, with
//! LAWS beside it ([`machine::LawsEstimate`]).
//!
//! ## Examples
//!
//! ```
//! use softoe_sim::scenario::Transfer;
//! use std::time::Duration;
//!
//! // One megabyte over a 1 Gb/s link with 5 % loss.
//! let t = Transfer { bytes: 1 << 20, loss: 0.05, ..Transfer::default() };
//! let r = t.run().unwrap();
//! assert!(r.intact);
//! assert!(r.sender.unwrap().retransmits > 0);
//! ```
//!
//! ```
//! use softoe_sim::machine::{Calibration, MachineConfig, predict};
//!
//! // The default machine (offload, engine as fast as the host) sending
//! // 1 MiB in 64 KiB writes over 10 Gb/s, priced by the default calibration.
//! let mut cfg = MachineConfig::default();
//! cfg.workload.bytes = 1 << 20;
//! let p = predict(&cfg, &Calibration::default()).unwrap();
//! assert!(p.intact && p.throughput_bps > 1e9);
//! assert!(p.engine_cpu > p.host_cpu);
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bonded;
pub mod grid;
pub mod lan;
pub mod link;
pub mod machine;
pub(crate) mod nic;
pub mod node;
pub mod router;
pub mod scenario;
pub mod workload;
pub mod world;

pub use link::{ConfigError, LinkConfig, LinkStats};
pub use node::{App, Pattern, SimDev, StackNode};
pub use router::{DfPolicy, Router, RouterPort, RouterStats};
pub use world::{
    LinkId, NicConfig, Node, NodeId, RxInfo, SimFrame, SwitchId, Tap, TapEvent, World, WorldStats,
};
