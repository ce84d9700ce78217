//! The machine model: the beginnings of the full-system offload simulator.
//!
//! Whether offload pays depends on the whole machine: the host CPU, the
//! engine's CPU (at 25–100 % of the host's speed), the I/O bus and its DMA,
//! memory, the NIC's interrupt coalescing, the link. Issue 17 builds a
//! simulator of all of them in which each resource is a queued server in
//! virtual time — so saturation is something that happens, not something
//! assumed — and every counted event costs `c0 + c1·bytes`. Beside each
//! sweep it sets what the analytic models predict, so that where the
//! simulation and the models part ways there is something to explain.
//!
//! This module holds the two foundations:
//!
//! - [`queue`]: the queued servers ([`Server`], [`Pool`]) and the cost of an
//!   event ([`Cost`]), checked against queueing theory's closed forms;
//! - [`analytic`]: the LAWS model of stream throughput ([`Laws`]) and the
//!   EMO model of per-message latency and host overhead ([`EmoPath`]).
//!
//! Nothing here is wired into `softoe sim` yet.

pub mod analytic;
pub mod queue;

pub use analytic::{EmoPath, EmoRates, Laws, ModelError};
pub use queue::{Cost, Pool, QueueError, Served, Server, ServerStats};
