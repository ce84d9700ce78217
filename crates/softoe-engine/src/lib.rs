//! # softoe-engine: the runtime around the stack
//!
//! The stack is sans-IO; this crate gives it a wire, a clock and a loop:
//!
//! - **Ports** ([`Port`]): a TAP device with virtio-net offloads
//!   ([`TapPort`]: TSO super-segments, checksum offload, receive
//!   coalescing, each switchable); an AF_PACKET socket on a veth with the
//!   same offloads ([`AfPacketPort`]); an AF_XDP socket whose rings and
//!   UMEM replace a system call per frame with one per batch
//!   ([`XdpPort`]); BondingPlus, several member ports
//!   behind one address with ARP+ and real-time members ([`BondPort`]);
//!   and a wrapper that loses, duplicates, reorders, corrupts and delays
//!   frames on any of them, seeded ([`FaultPort`], on the stack's fault
//!   model).
//! - **The poll loop** ([`Engine`]): receive batching with optional interrupt
//!   coalescing, timers from `poll_at`, spin-then-sleep.
//! - **Steering** ([`steer`]): the kernel's work for the frames the engine
//!   writes into its TAP (the bridge, a local peer's receive path) moved
//!   to other cores by the TAP queue's RPS mask while the engine's core is
//!   full and theirs have room, each change a trial undone if it does not
//!   pay.
//! - **Memory** ([`Memory`]): the regions payload references name. The
//!   engine sends from them by `writev`, never copying payload itself.
//! - **The host interface** ([`host`]): programs in other processes attach
//!   over a Unix socket and hand their socket work over shared-memory rings
//!   (HL-TCP's messaging unit); each session is a sans-IO core over its
//!   region, with descriptors, doorbells and `process_vm_*` in a thin outer
//!   layer, so it is unit-tested and fuzzed without root. [`App`], the
//!   in-process API, is a program on it like any other: `softoe-host`'s
//!   sockets over a session attached through a socket pair.
//! - **Services** ([`services`]): built-in servers and clients (discard,
//!   source, echo, request/response, a bulk client) for tests, the demo
//!   and benchmarks; the host interface's session core is a [`service`]
//!   like them.
//! - **Emulation** ([`emulate`]): the engine slowed to a fraction of its
//!   core's speed, a delay per access to programs' shared memory, and time
//!   per stage, so the simulator's predictions can be checked against it.
//! - **Observability**: a pcap of every frame ([`pcap`]), and a control
//!   socket answering `softoe stat` with a JSON snapshot ([`control`]).

pub mod afpacket;
pub mod app;
pub mod bond;
pub mod control;
pub mod counters;
mod cred;
pub mod emulate;
pub mod engine;
pub mod fault;
pub mod host;
mod instrument;
pub mod memory;
mod netdev;
pub mod pcap;
pub mod port;
pub mod service;
pub mod services;
pub mod sockpath;
pub mod steer;
pub mod tap;
#[cfg(feature = "testbed")]
pub mod testing;
pub mod vnet;
pub mod xdp;

pub use afpacket::{AfPacketOffloads, AfPacketOptions, AfPacketPort, AfPacketStats};
pub use app::App;
pub use bond::{BondMember, BondPort};
pub use control::{
    BondMemberStat, BondPeerStat, BondStat, ConnStat, EngineCounters, ListenerStat, Snapshot,
    StageCounters, StageStat, WakeStat,
};
pub use emulate::Emulation;
pub use engine::{Engine, EngineConfig, EngineConfigError, EngineError, StopHandle};
pub use fault::{
    DirectionCounters, DirectionFaults, FaultConfig, FaultConfigError, FaultCounters, FaultPort,
};
pub use memory::Memory;
pub use port::{Port, RxFrame};
pub use steer::{Steer, Steering};
pub use tap::{TapOffloads, TapPort};
pub use xdp::{XdpMode, XdpOptions, XdpPort, XdpPortStats};
