//! `predict`: a machine configuration and a calibration in, throughput,
//! latency and CPU out.
//!
//! [`predict`] builds a two-node [`World`]: the modelled host
//! ([`MachineNode`] as the configuration says) and its peer — a
//! [`MachineNode`] whose every event is free (`ideal`), or one like the
//! host without offload and with the same calibration (`host`) — on one
//! link with the configured rate, delay, MTU and loss. The modelled host
//! opens every connection; by `workload.direction` it is the stream's
//! source (or the rr client) or its sink (or the rr server). The world runs
//! until every sink has read its bytes and every client has had its
//! answers, or until a virtual-time limit ([`Limits`]) — then the
//! prediction says it is incomplete rather than running on.
//!
//! The figures are over the **measurement window**: from the first data a
//! program moves to the moment the last byte is read (the end of the call
//! that reads it). CPU shares are the busy time each resource accepted in
//! that window over its length.

use core::time::Duration;

use serde::Serialize;
use softoe_stack::{ArpConfig, DeviceCaps, Instant, Stack, StackConfig, TcpConfig};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

use super::config::{FlowDirection, MachineConfig, MachineConfigError, PeerModel, WorkloadKind};
use super::costs::{Calibration, CalibrationError};
use super::host::{AppSpec, Busy, MachineCounters, MachineNode, NodeError, NodeSpec};
use crate::link::{ConfigError, LinkConfig};
use crate::node::Pattern;
use crate::world::{NicConfig, NodeId, World};

/// The modelled host's address.
pub const HOST_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
/// The peer's address.
pub const PEER_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
/// Connection `i` goes to the peer's port `BASE_PORT + i`.
pub const BASE_PORT: u16 = 5001;

/// Why a prediction could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PredictError {
    /// The configuration is out of range.
    #[error(transparent)]
    Config(#[from] MachineConfigError),
    /// The calibration is unusable.
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
    /// A stack refused its configuration.
    #[error("stack configuration: {0}")]
    Stack(softoe_stack::ConfigError),
    /// A node could not be built.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The link could not be built.
    #[error(transparent)]
    Link(#[from] ConfigError),
}

/// How far a run may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Virtual time after which the run stops, incomplete.
    pub virtual_time: Duration,
}

impl Limits {
    /// Ten seconds, plus two hundred times what the workload's payload
    /// takes at the link's rate, plus 10 ms per round trip: far beyond any
    /// run that is making progress, at most an hour.
    pub fn for_config(cfg: &MachineConfig) -> Limits {
        let w = &cfg.workload;
        let wire_s = cfg.payload_bytes() as f64 * 8.0 / (cfg.link.gbps * 1e9);
        let rounds = match w.kind {
            WorkloadKind::Stream => 0.0,
            WorkloadKind::Rr => w.requests as f64 * 0.01,
        };
        let s = (10.0 + 200.0 * wire_s + rounds).min(3600.0);
        Limits {
            virtual_time: Duration::from_secs_f64(s),
        }
    }
}

/// Busy seconds of each resource in the measurement window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct BusySeconds {
    /// The host CPU.
    pub host: f64,
    /// The engine core.
    pub engine: f64,
    /// The bus.
    pub bus: f64,
}

impl From<Busy> for BusySeconds {
    fn from(b: Busy) -> BusySeconds {
        BusySeconds {
            host: b.host.as_secs_f64(),
            engine: b.engine.as_secs_f64(),
            bus: b.bus.as_secs_f64(),
        }
    }
}

/// What the model predicts for a configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    /// Every sink read all its bytes and every client had all its answers
    /// within the limit.
    pub complete: bool,
    /// Complete, and every byte read was the one sent, no connection
    /// failed.
    pub intact: bool,
    /// A node or the world stopped for lack of progress in time.
    pub stalled: bool,
    /// Goodput, message rate and latency, as a measurement of the real
    /// engine reports them too (readable as `prediction.throughput_bps`).
    #[serde(flatten)]
    pub delivered: Delivered,
    /// The modelled host's CPU: busy over the window, 0 to 1.
    pub host_cpu: f64,
    /// The engine core: busy over the window, 0 to 1.
    pub engine_cpu: f64,
    /// NIC interrupts per second, taken by the CPU that runs the stack
    /// (the engine with offload).
    pub interrupts_per_sec: f64,
    /// Interrupts per second the host CPU takes: the NIC's without
    /// offload; with offload, the completions that wake a sleeping program
    /// (the paper's Fig. 4 counts these on CPU0).
    pub host_interrupts_per_sec: f64,
    /// The modelled host's bus: busy over the window.
    pub bus_utilisation: f64,
    /// The peer's CPU (a `host` peer), busy over the window.
    pub peer_cpu: Option<f64>,
    /// Busy seconds of each resource of the modelled host in the window.
    pub busy: BusySeconds,
    /// Application payload bytes delivered.
    pub payload_bytes: u64,
    /// The measurement window, seconds of virtual time.
    pub window_seconds: f64,
    /// The whole run, seconds of virtual time.
    pub virtual_seconds: f64,
    /// Wall-clock seconds the run took.
    pub wall_seconds: f64,
    /// The event log's hash: both nodes' job logs and the wire's trace.
    /// Same configuration and seed, same hash.
    pub event_hash: u64,
    /// What the modelled host counted over the whole run.
    pub counters: MachineCounters,
}

/// What a run delivered: goodput, message rate and latency. The model's
/// prediction and the lab's measurement of the real engine report them
/// under these names, over their window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Delivered {
    /// Goodput: application payload bits per second over the window (both
    /// ways for rr).
    pub throughput_bps: f64,
    /// Messages per second: writes for a stream, round trips for rr.
    pub messages_per_sec: f64,
    /// Rr: one-way latency (half the round trip), median, µs.
    pub latency_p50_us: Option<f64>,
    /// Rr: one-way latency, 99th percentile, µs.
    pub latency_p99_us: Option<f64>,
    /// Rr: round trip, median, µs.
    pub rtt_p50_us: Option<f64>,
    /// Rr: round trip, 99th percentile, µs.
    pub rtt_p99_us: Option<f64>,
}

/// A prediction reads as what it delivered: `p.throughput_bps`.
impl core::ops::Deref for Prediction {
    type Target = Delivered;

    fn deref(&self) -> &Delivered {
        &self.delivered
    }
}

impl Prediction {
    /// Virtual seconds simulated per wall-clock second.
    pub fn speed_ratio(&self) -> f64 {
        self.virtual_seconds / self.wall_seconds.max(1e-9)
    }
}

/// A built world: the modelled host and its peer.
pub struct MachineWorld {
    /// The world.
    pub world: World,
    /// The modelled host.
    pub host: NodeId,
    /// The peer.
    pub peer: NodeId,
}

impl core::fmt::Debug for MachineWorld {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MachineWorld")
            .field("world", &self.world)
            .finish_non_exhaustive()
    }
}

impl MachineWorld {
    /// The modelled host.
    pub fn host_node(&self) -> Option<&MachineNode> {
        self.world.node::<MachineNode>(self.host)
    }

    /// The peer.
    pub fn peer_node(&self) -> Option<&MachineNode> {
        self.world.node::<MachineNode>(self.peer)
    }

    fn finished(&self) -> bool {
        match (self.host_node(), self.peer_node()) {
            (Some(h), Some(p)) => h.finished() && p.finished(),
            _ => true,
        }
    }

    fn first_data(&self) -> Option<Instant> {
        let h = self.host_node().and_then(MachineNode::first_data);
        let p = self.peer_node().and_then(MachineNode::first_data);
        match (h, p) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn last_done(&self) -> Option<Instant> {
        [self.host_node(), self.peer_node()]
            .into_iter()
            .flatten()
            .flat_map(|n| n.results())
            .filter_map(|r| r.done_at)
            .max()
    }

    fn stalled(&self) -> bool {
        self.world.stalled()
            || self.host_node().is_none_or(MachineNode::stalled)
            || self.peer_node().is_none_or(MachineNode::stalled)
    }
}

/// The TCP settings of every socket: Linux's defaults but `TCP_NODELAY`
/// (as NetPIPE and netperf's request/response tests set it), enough payload
/// references for a full buffer of small writes, and ARP entries that last
/// the run.
fn stack_for(cfg: &MachineConfig, n: u8, ip: Ipv4Address) -> Result<Stack, PredictError> {
    let seed = cfg.workload.seed;
    let cidr =
        Ipv4Cidr::new(ip, 24).ok_or(PredictError::Stack(softoe_stack::ConfigError::NoAddress))?;
    let mut sc = StackConfig::new(EthernetAddress([2, 0, 0, 0, 0, n]), cidr);
    sc.seed = seed.wrapping_mul(31).wrapping_add(u64::from(n));
    sc.secret = [n; 16];
    sc.secret[0] = seed as u8;
    sc.caps = DeviceCaps {
        mtu: cfg.link.mtu,
        tso_max: cfg.nic.tso.then_some(65_535),
        tx_csum: cfg.nic.csum,
    };
    let mut tcp = TcpConfig::default();
    tcp.nodelay = true;
    if let Some(b) = cfg.workload.buffer {
        tcp.rx_buffer = b as usize;
        tcp.tx_buffer = b as usize;
    }
    let per_chunk = cfg.workload.message.max(1) as usize;
    tcp.tx_max_chunks = (tcp.tx_buffer / per_chunk + 64).clamp(1024, 1 << 16);
    tcp.time_wait = Duration::from_secs(1);
    sc.tcp = tcp;
    let mut arp = ArpConfig::default();
    arp.entry_ttl = Duration::from_secs(24 * 3600);
    sc.arp = arp;
    Stack::new(sc).map_err(PredictError::Stack)
}

/// The most a `host` peer that sinks a stream reads per call.
pub const PEER_SINK_READ: u32 = 1 << 20;

/// Builds the world of `cfg`: the modelled host (node 0, which connects)
/// and its peer (node 1), on one link.
pub fn build(cfg: &MachineConfig, cal: &Calibration) -> Result<MachineWorld, PredictError> {
    cfg.validate()?;
    cal.validate()?;
    let w = &cfg.workload;
    let pattern = Pattern::new(w.seed);
    let host_sends = w.direction == FlowDirection::Send;
    let apps = |connect_to: Option<Ipv4Address>, sends: bool| AppSpec {
        kind: w.kind,
        message: w.message,
        connections: w.connections,
        bytes: w.bytes,
        requests: w.requests,
        connect_to,
        sends,
        base_port: BASE_PORT,
    };
    let host = MachineNode::new(
        stack_for(cfg, 1, HOST_IP)?,
        pattern.clone(),
        NodeSpec::host(cfg, cal),
        &apps(Some(PEER_IP), host_sends),
    )?;
    let peer_spec = match cfg.peer.model {
        PeerModel::Ideal => NodeSpec::ideal(cfg),
        PeerModel::Host => NodeSpec::kernel_peer(cfg, cal),
        PeerModel::Testbed => NodeSpec::testbed_peer(cfg, cal),
    };
    let mut peer_apps = apps(None, !host_sends);
    if cfg.peer.model != PeerModel::Ideal && w.kind == WorkloadKind::Stream && host_sends {
        // A host peer sinking the stream reads what has arrived, up to a
        // large buffer, as a bulk receiver does (the testbed's client reads
        // 1 MiB per call): `message` is the modelled host's write size,
        // not the far end's read size.
        peer_apps.message = PEER_SINK_READ;
    }
    let peer = MachineNode::new(stack_for(cfg, 2, PEER_IP)?, pattern, peer_spec, &peer_apps)?;
    // The NIC's GRO, receive checksum and interrupt moderation are the
    // nodes' own (they happen on the receiving CPU's time); the world's NIC
    // only cuts TSO frames and completes checksums.
    let nic = NicConfig {
        mtu: cfg.link.mtu,
        tso: cfg.nic.tso,
        tx_csum: cfg.nic.csum,
        rx_csum: false,
        gro: false,
        rx_coalesce: Duration::ZERO,
        gso_wire: cfg.link.gso,
    };
    let mut world = World::new(w.seed);
    world.set_trace_payload(false);
    let host = world.add_node(Box::new(host), nic);
    let peer = world.add_node(Box::new(peer), nic);
    let link = LinkConfig::new(cfg.link_bps(), cfg.link_delay()).with_loss(cfg.link.loss);
    world.connect(host, peer, link)?;
    Ok(MachineWorld { world, host, peer })
}

/// Predicts `cfg` priced by `cal`, within [`Limits::for_config`].
pub fn predict(cfg: &MachineConfig, cal: &Calibration) -> Result<Prediction, PredictError> {
    predict_with(cfg, cal, Limits::for_config(cfg))
}

/// Predicts `cfg` priced by `cal`, within `limits`.
pub fn predict_with(
    cfg: &MachineConfig,
    cal: &Calibration,
    limits: Limits,
) -> Result<Prediction, PredictError> {
    let wall = std::time::Instant::now();
    let mut mw = build(cfg, cal)?;
    let (h, p) = (mw.host, mw.peer);
    let end = Instant::ZERO + limits.virtual_time;
    let data_flows = |w: &mut World| {
        let at = |n| w.node::<MachineNode>(n).and_then(MachineNode::first_data);
        at(h).is_some() || at(p).is_some()
    };
    let started = mw.world.run_while(end, data_flows);
    let start = mw.first_data().unwrap_or(mw.world.now());
    let before = Snapshot::at(&mw, start);
    let complete = started
        && mw.world.run_while(end, |w| {
            let done = |n| w.node::<MachineNode>(n).is_none_or(MachineNode::finished);
            done(h) && done(p)
        })
        && mw.finished();
    // The window ends when the last call that read ends; jobs that start
    // before then are part of it.
    let stop = if complete {
        mw.last_done().unwrap_or(mw.world.now()).max(mw.world.now())
    } else {
        mw.world.now()
    };
    mw.world.run_until(stop);
    let after = Snapshot::at(&mw, stop);
    let wall_seconds = wall.elapsed().as_secs_f64();
    Ok(report(
        cfg,
        &mw,
        complete,
        (start, stop),
        (before, after),
        wall_seconds,
    ))
}

/// The modelled host's and the peer's resources at an instant.
#[derive(Clone, Copy, Debug, Default)]
struct Snapshot {
    host: Busy,
    peer: Busy,
    interrupts: u64,
    host_interrupts: u64,
}

impl Snapshot {
    fn at(mw: &MachineWorld, t: Instant) -> Snapshot {
        let h = mw.host_node();
        Snapshot {
            host: h.map(|n| n.busy_at(t)).unwrap_or_default(),
            peer: mw.peer_node().map(|n| n.busy_at(t)).unwrap_or_default(),
            interrupts: h.map_or(0, |n| n.counters().interrupts),
            host_interrupts: h.map_or(0, MachineNode::host_interrupts),
        }
    }
}

/// The `q` quantile (0..=1) of sorted `v`, nearest rank.
fn quantile(v: &[Duration], q: f64) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v.get(rank - 1).copied()
}

fn report(
    cfg: &MachineConfig,
    mw: &MachineWorld,
    complete: bool,
    (start, end): (Instant, Instant),
    (before, after): (Snapshot, Snapshot),
    wall_seconds: f64,
) -> Prediction {
    let nodes = [mw.host_node(), mw.peer_node()];
    let results = || nodes.iter().flatten().flat_map(|n| n.results());
    let window = end.saturating_duration_since(start).as_secs_f64();
    let per_sec = |x: f64| if window > 0.0 { x / window } else { 0.0 };
    let w = &cfg.workload;
    // Payload delivered: what the receiving programs read.
    let payload_bytes: u64 = results().map(|r| r.received).sum();
    let messages = match w.kind {
        WorkloadKind::Stream => payload_bytes as f64 / f64::from(w.message.max(1)),
        WorkloadKind::Rr => results().map(|r| r.rtts.len() as f64).sum(),
    };
    let mut rtts: Vec<Duration> = results().flat_map(|r| r.rtts.iter().copied()).collect();
    rtts.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let rtt_p50 = quantile(&rtts, 0.5).map(us);
    let rtt_p99 = quantile(&rtts, 0.99).map(us);
    let (host_busy, peer_busy) = (
        after.host.since(&before.host),
        after.peer.since(&before.peer),
    );
    let busy = BusySeconds::from(host_busy);
    let share = |s: f64| per_sec(s);
    let intact = complete && results().all(|r| !r.corrupt && !r.failed);
    let hashes = [
        mw.host_node().map_or(0, MachineNode::event_hash),
        mw.peer_node().map_or(0, MachineNode::event_hash),
        mw.world.trace_hash(),
    ];
    let mut event_hash = 0xcbf2_9ce4_8422_2325u64;
    for x in hashes {
        for b in x.to_le_bytes() {
            event_hash ^= u64::from(b);
            event_hash = event_hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    Prediction {
        complete,
        intact,
        stalled: mw.stalled(),
        delivered: Delivered {
            throughput_bps: per_sec(payload_bytes as f64 * 8.0),
            messages_per_sec: per_sec(messages),
            latency_p50_us: rtt_p50.map(|x| x / 2.0),
            latency_p99_us: rtt_p99.map(|x| x / 2.0),
            rtt_p50_us: rtt_p50,
            rtt_p99_us: rtt_p99,
        },
        // A spinning program's spin is host CPU too, and a spin may
        // overlap other programs' jobs in the model (one host core, no
        // scheduler): never more than the core.
        host_cpu: share(busy.host).min(1.0),
        engine_cpu: share(busy.engine),
        interrupts_per_sec: per_sec(after.interrupts.saturating_sub(before.interrupts) as f64),
        host_interrupts_per_sec: per_sec(
            after.host_interrupts.saturating_sub(before.host_interrupts) as f64,
        ),
        bus_utilisation: share(busy.bus),
        peer_cpu: (cfg.peer.model != PeerModel::Ideal).then(|| share(peer_busy.host.as_secs_f64())),
        busy,
        payload_bytes,
        window_seconds: window,
        virtual_seconds: mw
            .world
            .now()
            .saturating_duration_since(Instant::ZERO)
            .as_secs_f64(),
        wall_seconds,
        event_hash,
        counters: mw.host_node().map(|n| *n.counters()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(quantile(&v, 0.5), Some(Duration::from_micros(50)));
        assert_eq!(quantile(&v, 0.99), Some(Duration::from_micros(99)));
        assert_eq!(quantile(&v, 1.0), Some(Duration::from_micros(100)));
        assert_eq!(quantile(&v[..1], 0.99), Some(Duration::from_micros(1)));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn bad_configs_are_refused_before_anything_runs() {
        let mut cfg = MachineConfig::default();
        cfg.engine.speed = 0.0;
        let e = predict(&cfg, &Calibration::default()).unwrap_err();
        assert!(e.to_string().contains("[engine] speed"), "{e}");
        let mut cal = Calibration::default();
        cal.copy.c1 = f64::NAN;
        let e = predict(&MachineConfig::default(), &cal).unwrap_err();
        assert!(e.to_string().contains("[copy] c1"), "{e}");
    }

    #[test]
    fn a_small_stream_completes_intact_both_ways_and_with_either_peer() {
        for offload in [false, true] {
            for direction in [FlowDirection::Send, FlowDirection::Receive] {
                for peer in [PeerModel::Ideal, PeerModel::Host, PeerModel::Testbed] {
                    let mut cfg = MachineConfig::default();
                    cfg.host.offload = offload;
                    cfg.workload.direction = direction;
                    cfg.workload.bytes = 1 << 20;
                    cfg.workload.connections = 2;
                    cfg.peer.model = peer;
                    let p = predict(&cfg, &Calibration::default()).unwrap();
                    let what = format!("offload {offload} {direction:?} {peer:?}: {p:#?}");
                    assert!(p.complete && p.intact, "{what}");
                    assert_eq!(p.payload_bytes, 2 << 20, "{what}");
                    assert!(p.throughput_bps > 1e8, "{what}");
                    assert!(p.host_cpu > 0.0 && p.host_cpu <= 1.0 + 1e-9, "{what}");
                    assert_eq!(p.engine_cpu > 0.0, offload, "{what}");
                    assert_eq!(p.peer_cpu.is_some(), peer != PeerModel::Ideal, "{what}");
                }
            }
        }
    }

    #[test]
    fn a_small_rr_completes_with_latencies() {
        for offload in [false, true] {
            for direction in [FlowDirection::Send, FlowDirection::Receive] {
                let mut cfg = MachineConfig::default();
                cfg.host.offload = offload;
                cfg.workload.kind = WorkloadKind::Rr;
                cfg.workload.direction = direction;
                cfg.workload.message = 200;
                cfg.workload.requests = 50;
                let p = predict(&cfg, &Calibration::default()).unwrap();
                let what = format!("offload {offload} {direction:?}: {p:#?}");
                assert!(p.complete && p.intact, "{what}");
                assert_eq!(p.payload_bytes, 2 * 50 * 200, "{what}");
                let (p50, p99) = (p.latency_p50_us.unwrap(), p.latency_p99_us.unwrap());
                // At least the wire: 5 µs each way.
                assert!(p50 >= 5.0 && p99 >= p50, "{what}");
                assert_eq!(p.rtt_p50_us, Some(2.0 * p50));
                assert!((p.messages_per_sec * p.window_seconds - 50.0).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn a_run_past_its_limit_is_incomplete_not_endless() {
        let mut cfg = MachineConfig::default();
        cfg.link.gbps = 0.01;
        cfg.workload.bytes = 1 << 20;
        let p = predict_with(
            &cfg,
            &Calibration::default(),
            Limits {
                virtual_time: Duration::from_millis(50),
            },
        )
        .unwrap();
        assert!(!p.complete && !p.intact);
        assert!(p.payload_bytes < 1 << 20);
        assert!(p.virtual_seconds <= 0.05 + 1e-9, "{}", p.virtual_seconds);
    }
}
