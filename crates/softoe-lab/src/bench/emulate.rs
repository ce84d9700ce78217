//! `softoe bench --emulate CONFIG`: the real engine, configured as a
//! machine file says, measured the way `softoe sim predict` reports.
//!
//! The file is the simulator's (`softoe_sim::machine::MachineConfig`), so a
//! prediction and the measurement that checks it describe one machine. The
//! run is the `softoe bench` testbed (`crate::bed::RealBed`): the modelled
//! host's program is `softoe bench-servers` — on softoe's engine over shared
//! memory with `host.offload = true`, on Linux's TCP in the peer namespace
//! without — and the far end is the Linux client that drives every `softoe
//! bench` workload. The program uses the `copy` send policy, as the model
//! does (the host copies a write into the send ring).
//!
//! ## What each field becomes
//!
//! | field | on this machine |
//! |---|---|
//! | `host.offload` | the program on the engine, or on Linux's TCP |
//! | `engine.speed` | `EngineConfig::speed` (≤ 1: the engine can only be slowed; above 1 is refused) |
//! | `engine.spin_us` | the engine's spin before it sleeps |
//! | `host.spin_us` | the program's longest spin before it sleeps (`SOFTOE_SPIN_US`, whole µs; offload only) |
//! | `memory.delay` m | `EngineConfig::access_delay = (m − 1)·a`, `a` the calibration's `ring_access` c0 |
//! | `nic.tso/csum/gro` | the TAP's offloads (offload only) |
//! | `nic.coalesce_us` | `EngineConfig::rx_coalesce` (offload only) |
//! | `nic.polling` | the engine never sleeps (offload only) |
//! | `link.gbps` | below 10: `tbf` both ways on the program's path; otherwise unshaped |
//! | `link.delay_us` | not emulated: reported; the real path's round trip is what it is |
//! | `link.loss`, `link.mtu` | refused unless at their defaults (0, 1500) |
//! | `bus.*`, `link.gso` | not emulated, reported: the TAP has no bus or DMA, and the testbed's path carries TSO super-segments whole (`link.gso = true` models it) |
//! | `workload` | stream: the sized source (`send`) or sink (`receive`) with `message`-byte writes or reads; rr: the echo, `message` bytes each way |
//!
//! Rr always has the host program serve (the echo): a round trip costs each
//! end one read and one write of `message` bytes, so `direction` changes
//! who speaks first, not what is measured; it is reported as given.
//!
//! ## What is measured
//!
//! Over the client's run (connect to last byte, or every round trip):
//! goodput (both ways for rr, as the model counts it), messages per second,
//! for rr the round trip and half of it as one-way latency, the program's
//! CPU time (every thread, user and system) ÷ wall time as `host_cpu`, the
//! engine thread's run time ÷ wall time as `engine_cpu` (spinning
//! included: the model counts work only, see `engine_busy`), and the
//! engine's counters.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use softoe_engine::{EngineConfig, EngineCounters, TapOffloads};
use softoe_sim::machine::predict::Delivered;
use softoe_sim::machine::{
    BusSpec, FlowDirection, LinkSpec, MachineConfig, PeerModel, WorkloadKind, WorkloadSpec,
};

use crate::bed::{BedOptions, ENGINE, PEER, RealBed};
use crate::bench::cpu::thread_cpu;
use crate::bench::repeat::{Repeats, interleaved};
use crate::bench::server::servers_cmd;
use crate::bench::workload::{bulk_in_with, bulk_out_with};
use crate::linux;
use crate::server::{ECHO, SIZED_SINK, SIZED_SOURCE, Servers};
use crate::stats::{Estimate, Figure, StopRule, Stopped};
use crate::units::gbps_or_mbps;

/// At and above this rate the path is left unshaped: the veth and the CPUs
/// set its rate.
pub(crate) const UNSHAPED_GBPS: f64 = 10.0;
/// `--quick`: at most this many bytes per stream connection…
const QUICK_BYTES: u64 = 16 << 20;
/// …and this many round trips per rr connection.
const QUICK_REQUESTS: u64 = 1000;
/// A spin no run outlasts: `nic.polling`'s engine never sleeps.
const POLL_FOREVER: Duration = Duration::from_secs(3600);

/// What `softoe bench --emulate` was given.
pub(crate) struct EmulateArgs<'a> {
    pub config: &'a Path,
    pub set: &'a [String],
    pub calibration: Option<&'a Path>,
    pub quick: bool,
    pub json: bool,
    pub engine_cpu: Option<usize>,
    /// When the repeats stop.
    pub rule: StopRule,
}

/// How the real machine is set up for a configuration.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Plan {
    /// The program on the engine (true) or on Linux's TCP.
    pub offload: bool,
    /// The engine's speed (1: full).
    pub speed: f64,
    /// Busy-wait per shared-memory access, ns.
    pub access_delay_ns: u64,
    /// The `ring_access` cost it was derived from, ns.
    pub ring_access_ns: f64,
    /// The TAP's offloads.
    pub tso: bool,
    pub csum: bool,
    pub gro: bool,
    /// The engine's receive coalescing, µs.
    pub rx_coalesce_us: f64,
    /// The engine's spin before it sleeps, µs.
    pub spin_us: f64,
    /// The program's longest spin before it sleeps, whole µs (offload).
    pub host_spin_us: u64,
    /// `tbf` on the path, Mbit/s (none: unshaped).
    pub shape_mbit: Option<u64>,
    /// What is reported rather than emulated, and how fields were read.
    pub notes: Vec<String>,
}

/// Non-default values of what this machine cannot emulate are errors that
/// name the field.
fn refuse(field: &str, value: impl std::fmt::Display, default: &str, why: &str) -> anyhow::Error {
    anyhow!(
        "{field} = {value} cannot be emulated on this machine ({why}); \
         leave it at {default}, or use `softoe sim predict` for it"
    )
}

/// The real machine's settings for `cfg`, or why it cannot be run; `a` is
/// the calibration's cost of a ring access (ns).
pub(crate) fn plan(cfg: &MachineConfig, a: f64) -> Result<Plan> {
    let mut notes = Vec::new();
    let shape_mbit = path(cfg, &mut notes)?;
    let n = &cfg.nic;
    let mut p = Plan {
        offload: cfg.host.offload,
        speed: 1.0,
        access_delay_ns: 0,
        ring_access_ns: a,
        tso: n.tso,
        csum: n.csum,
        gro: n.gro,
        rx_coalesce_us: n.coalesce_us,
        spin_us: cfg.engine.spin_us,
        host_spin_us: cfg.host.spin_us.round() as u64,
        shape_mbit,
        notes,
    };
    if cfg.host.offload {
        engine_plan(cfg, a, &mut p)?;
    } else {
        kernel_plan(cfg, &mut p)?;
    }
    Ok(p)
}

/// The path (bus, link, peer): what cannot be emulated is an error, what
/// is not is a note; the `tbf` rate, where the link is shaped.
fn path(cfg: &MachineConfig, notes: &mut Vec<String>) -> Result<Option<u64>> {
    // The testbed has no I/O bus (the engine's NIC is a TAP: frames are
    // copied in memory) and its wire carries super-segments whole: a model
    // of it leaves the bus out of the way and sets `link.gso`. Neither can
    // be set here; both are reported.
    let bus = BusSpec::default();
    if cfg.bus.gbps != bus.gbps || cfg.bus.transaction_ns != bus.transaction_ns {
        notes.push(format!(
            "bus.gbps = {}, bus.transaction_ns = {}: not emulated (the engine's NIC is a TAP: \
             no I/O bus, no DMA)",
            cfg.bus.gbps, cfg.bus.transaction_ns
        ));
    }
    if !cfg.link.gso {
        notes.push(
            "link.gso = false: the testbed's TAP, bridge and veths carry TSO super-segments \
             whole (the model of this path is link.gso = true)"
                .into(),
        );
    }
    let link = LinkSpec::default();
    if cfg.link.loss != link.loss {
        return Err(refuse(
            "link.loss",
            cfg.link.loss,
            "0",
            "the emulation runs on the testbed's lossless veths; `softoe bench --only loss` \
             measures loss",
        ));
    }
    if let Some(b) = cfg.workload.buffer {
        return Err(refuse(
            "workload.buffer",
            b,
            "unset",
            "the testbed's programs keep their stacks' socket buffers",
        ));
    }
    if cfg.link.mtu != link.mtu {
        return Err(refuse(
            "link.mtu",
            cfg.link.mtu,
            "1500",
            "the engine's TAP and the testbed's veths run at 1500",
        ));
    }
    notes.push(format!(
        "link.delay_us = {} is not emulated: the real path's round trip (rtt_p50_us) is what \
         this machine's veths and CPUs make it",
        cfg.link.delay_us
    ));
    let shape_mbit = if cfg.link.gbps < UNSHAPED_GBPS {
        Some(((cfg.link.gbps * 1e3).round() as u64).max(1))
    } else {
        notes.push(format!(
            "link.gbps = {}: unshaped (at {UNSHAPED_GBPS} Gb/s and above the path carries what \
             the veths and CPUs manage)",
            cfg.link.gbps
        ));
        None
    };
    if cfg.peer.model == PeerModel::Ideal {
        notes.push(
            "peer.model = \"ideal\": the real peer is Linux's TCP in a namespace on this \
             machine, sharing its cores, not a free one"
                .into(),
        );
    }
    Ok(shape_mbit)
}

/// Without offload: the NIC is Linux's veth, which is left as it is.
fn kernel_plan(cfg: &MachineConfig, p: &mut Plan) -> Result<()> {
    let n = &cfg.nic;
    let d = softoe_sim::machine::NicSpec::default();
    let nic_fields = [
        ("nic.tso", n.tso != d.tso, n.tso.to_string(), "true"),
        ("nic.csum", n.csum != d.csum, n.csum.to_string(), "true"),
        ("nic.gro", n.gro != d.gro, n.gro.to_string(), "true"),
        (
            "nic.coalesce_us",
            n.coalesce_us != d.coalesce_us,
            n.coalesce_us.to_string(),
            "0",
        ),
        (
            "nic.coalesce_frames",
            n.coalesce_frames != d.coalesce_frames,
            n.coalesce_frames.to_string(),
            "1",
        ),
        (
            "nic.polling",
            n.polling != d.polling,
            n.polling.to_string(),
            "false",
        ),
        ("nic.napi", n.napi != d.napi, n.napi.to_string(), "true"),
    ];
    for (field, changed, value, default) in nic_fields {
        if changed {
            return Err(refuse(
                field,
                value,
                default,
                "without offload the NIC is Linux's veth, whose offloads and interrupt \
                 moderation this testbed does not change",
            ));
        }
    }
    p.notes.push(
        "host.offload = false: engine.*, memory.delay and nic.* do not apply (the model \
         ignores them too)"
            .into(),
    );
    p.rx_coalesce_us = 0.0;
    Ok(())
}

/// With offload: the engine's speed, memory delay and NIC settings.
fn engine_plan(cfg: &MachineConfig, a: f64, p: &mut Plan) -> Result<()> {
    let n = &cfg.nic;
    if cfg.engine.speed > 1.0 {
        bail!(
            "engine.speed = {}: the real engine can only be slowed (0 < speed ≤ 1) — it busy-waits \
             in proportion to its work; a faster engine core can only be predicted (`softoe sim \
             predict`)",
            cfg.engine.speed
        );
    }
    p.speed = cfg.engine.speed;
    let delay_ns = (cfg.memory.delay - 1.0) * a;
    p.access_delay_ns = delay_ns.round().max(0.0) as u64;
    EngineConfig::default()
        .with_speed(p.speed)
        .and_then(|c| c.with_access_delay(Duration::from_nanos(p.access_delay_ns)))
        .map_err(|e| {
            anyhow!(
                "memory.delay = {} with ring_access {a} ns: {e}",
                cfg.memory.delay
            )
        })?;
    if n.polling {
        p.spin_us = POLL_FOREVER.as_secs_f64() * 1e6;
        p.notes
            .push("nic.polling = true: the engine spins and never sleeps".into());
    }
    if n.coalesce_us > 0.0 && n.coalesce_frames != 64 {
        p.notes.push(format!(
            "nic.coalesce_us = {}: the engine waits that long after a turn's first frame for up \
             to 64 frames — the model's coalesce_frames = 64, not {}",
            n.coalesce_us, n.coalesce_frames
        ));
    }
    if !n.napi {
        p.notes.push(
            "nic.napi = false: the engine takes no interrupts (it polls, then sleeps), so none \
             is taken or priced"
                .into(),
        );
    }
    if n.coalesce_us == 0.0 && n.coalesce_frames > 1 {
        p.notes.push(format!(
            "nic.coalesce_frames = {} without a timer: the polling engine takes what has \
             arrived, up to 64 frames a turn",
            n.coalesce_frames
        ));
    }
    Ok(())
}

/// What one real run measured, under `Prediction`'s names where they mean
/// the same.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Measured {
    /// Goodput (over the run: the model's measurement window), writes
    /// (stream) or round trips (rr) per second, and half and whole round
    /// trips (rr), under the model's names.
    #[serde(flatten)]
    pub delivered: Delivered,
    /// The program's CPU time ÷ wall time (a share of one core).
    pub host_cpu: f64,
    /// The engine thread's run time ÷ wall time, spinning included (0
    /// without offload).
    pub engine_cpu: f64,
    /// The engine's measured work (with its emulated waits) ÷ wall time,
    /// when it measured it (slowed or profiling), as the model counts busy
    /// time.
    pub engine_busy: Option<f64>,
    /// Application payload bytes moved.
    pub payload_bytes: u64,
    /// Messages: writes (stream) or round trips (rr).
    pub messages: u64,
    /// The run, wall-clock seconds (the model's measurement window).
    pub window_seconds: f64,
    /// The program's CPU seconds in the run.
    pub host_cpu_seconds: f64,
    /// The engine thread's CPU seconds in the run.
    pub engine_cpu_seconds: f64,
    /// Stream: the far end's (the testbed client's) CPU seconds in its
    /// data calls, the kernel's work on its threads included.
    pub peer_cpu_seconds: Option<f64>,
    /// Stream: the far end's data calls (writes into a receiving program,
    /// reads from a sending one).
    pub peer_calls: Option<u64>,
    /// The engine's counters over its whole life (this run's testbed);
    /// none without offload.
    pub engine: Option<EngineCounters>,
}

/// The workload as the real run does it: the file's, made small with
/// `--quick`.
pub(crate) type Work = WorkloadSpec;

/// `cfg`'s workload, made small with `quick`.
pub(crate) fn work_of(cfg: &MachineConfig, quick: bool) -> Work {
    let w = cfg.workload;
    if !quick {
        return w;
    }
    WorkloadSpec {
        bytes: w.bytes.min(QUICK_BYTES),
        requests: w.requests.min(QUICK_REQUESTS),
        ..w
    }
}

/// Runs `work` on a fresh testbed set up as `plan` says (with the engine's
/// stages timed if `profile`) and measures it.
pub(crate) fn measure(
    plan: &Plan,
    work: Work,
    profile: bool,
    engine_cpu: Option<usize>,
    exe: &Path,
) -> Result<Measured> {
    let mut bed = RealBed::start(BedOptions {
        offloads: TapOffloads {
            tso: plan.tso,
            csum: plan.csum,
            gro: plan.gro,
        },
        rx_coalesce: Duration::from_nanos((plan.rx_coalesce_us * 1e3).round() as u64),
        spin: Some(Duration::from_nanos((plan.spin_us * 1e3).round() as u64)),
        cpu: engine_cpu,
        speed: (plan.speed < 1.0).then_some(plan.speed),
        access_delay: Duration::from_nanos(plan.access_delay_ns),
        profile_stages: profile,
        ..BedOptions::default()
    })?;
    let ip: Ipv4Addr = if plan.offload { ENGINE } else { PEER };
    if let Some(mbit) = plan.shape_mbit {
        let far = if plan.offload {
            bed.tap.clone()
        } else {
            bed.tb
                .veth_to_bridge_port(&bed.peer)
                .ok_or_else(|| anyhow!("no bridge port found for the Linux peer"))?
        };
        for dev in [&bed.client_port, &far] {
            bed.tb
                .tbf(&bed.sw, dev, mbit)
                .with_context(|| format!("shaping {dev} to {mbit} Mbit/s"))?;
        }
    }
    let mut cmd = servers_cmd(exe, plan.offload.then(|| bed.host()), &bed.peer, ip, "copy");
    if plan.offload {
        cmd.env("SOFTOE_SPIN_US", plan.host_spin_us.to_string());
    }
    let mut servers = Servers::start(cmd)?;
    warm_up(&bed, ip, &work)?;
    let host0 = servers.cpu()?;
    let eng0 = thread_cpu(bed.engine_tid)?;
    let conns = work.connections as usize;
    let message = u64::from(work.message);
    let total = work.bytes.saturating_mul(u64::from(work.connections));
    let (wall, rtts, peer) = match (work.kind, work.direction) {
        (WorkloadKind::Stream, FlowDirection::Send) => {
            let to = SocketAddrV4::new(ip, SIZED_SOURCE);
            let r = bed
                .client
                .run(move || bulk_out_with(to, total, conns, Some(message)))??;
            (r.wall, Vec::new(), Some(r))
        }
        (WorkloadKind::Stream, FlowDirection::Receive) => {
            let to = SocketAddrV4::new(ip, SIZED_SINK);
            let write = work.message as usize;
            let r = bed
                .client
                .run(move || bulk_in_with(to, total, conns, write, Some(message)))??;
            (r.wall, Vec::new(), Some(r))
        }
        (WorkloadKind::Rr, _) => {
            let to = SocketAddrV4::new(ip, ECHO);
            let (size, count) = (work.message as usize, work.requests as usize);
            let (wall, rtts) = bed.client.run(move || rr(to, size, count, conns))??;
            (wall, rtts, None)
        }
    };
    let host1 = servers.cpu()?;
    let eng1 = thread_cpu(bed.engine_tid)?;
    drop(servers);
    let counters = bed.stop()?;
    let secs = wall.as_secs_f64().max(1e-9);
    let host_s = host1.saturating_sub(host0).as_secs_f64();
    let eng_s = if plan.offload {
        eng1.saturating_sub(eng0).as_secs_f64()
    } else {
        0.0
    };
    let pct = |q: f64| linux::percentile_us(&rtts, q);
    let rr = !rtts.is_empty();
    let busy = counters.work_nanos + counters.slowdown_nanos + counters.access_delay_nanos;
    let payload = work.payload_bytes();
    let messages = work.messages();
    Ok(Measured {
        delivered: Delivered {
            throughput_bps: payload as f64 * 8.0 / secs,
            messages_per_sec: messages as f64 / secs,
            latency_p50_us: rr.then(|| pct(50.0) / 2.0),
            latency_p99_us: rr.then(|| pct(99.0) / 2.0),
            rtt_p50_us: rr.then(|| pct(50.0)),
            rtt_p99_us: rr.then(|| pct(99.0)),
        },
        host_cpu: host_s / secs,
        engine_cpu: eng_s / secs,
        engine_busy: (plan.offload && counters.work_nanos > 0).then(|| busy as f64 / 1e9 / secs),
        payload_bytes: payload,
        messages,
        window_seconds: secs,
        host_cpu_seconds: host_s,
        engine_cpu_seconds: eng_s,
        peer_cpu_seconds: peer.map(|r| r.cpu.as_secs_f64()),
        peer_calls: peer.map(|r| r.calls),
        engine: plan.offload.then_some(counters),
    })
}

/// A short run of the workload's kind before the measured one (8 MiB or
/// 200 round trips on one connection, at most the workload itself), so
/// that the measured window starts with the path's neighbours known, the
/// engine's and the servers' buffers allocated and the CPUs awake.
fn warm_up(bed: &RealBed, ip: Ipv4Addr, work: &Work) -> Result<()> {
    let message = u64::from(work.message);
    match (work.kind, work.direction) {
        (WorkloadKind::Stream, FlowDirection::Send) => {
            let to = SocketAddrV4::new(ip, SIZED_SOURCE);
            let bytes = work.bytes.min(8 << 20).max(message);
            bed.client
                .run(move || bulk_out_with(to, bytes, 1, Some(message)))??;
        }
        (WorkloadKind::Stream, FlowDirection::Receive) => {
            let to = SocketAddrV4::new(ip, SIZED_SINK);
            let bytes = work.bytes.min(8 << 20).max(message);
            let write = work.message as usize;
            bed.client
                .run(move || bulk_in_with(to, bytes, 1, write, Some(message)))??;
        }
        (WorkloadKind::Rr, _) => {
            let to = SocketAddrV4::new(ip, ECHO);
            let (size, count) = (work.message as usize, work.requests.min(200) as usize);
            bed.client
                .run(move || linux::ping_pong(to, size, count))??;
        }
    }
    Ok(())
}

/// `conns` ping-pongs of `count` round trips of `size` bytes at once with
/// the echo at `to`: the wall time of all, and every round trip, sorted.
fn rr(
    to: SocketAddrV4,
    size: usize,
    count: usize,
    conns: usize,
) -> Result<(Duration, Vec<Duration>)> {
    let t = Instant::now();
    let hs: Vec<_> = (0..conns)
        .map(|_| std::thread::spawn(move || linux::ping_pong(to, size, count)))
        .collect();
    let mut all = Vec::with_capacity(count.saturating_mul(conns));
    for h in hs {
        all.extend(h.join().map_err(|_| anyhow!("a client panicked"))??);
    }
    let wall = t.elapsed();
    all.sort();
    Ok((wall, all))
}

#[derive(Serialize)]
struct Report<'a> {
    config: &'a MachineConfig,
    calibration: &'a str,
    quick: bool,
    emulation: &'a Plan,
    /// The run whose throughput is nearest the median.
    measured: &'a Measured,
    /// Every run's figures: medians, intervals, samples.
    repeated: &'a Repeated,
}

/// The repeated runs' figures.
#[derive(Debug, Serialize)]
pub(crate) struct Repeated {
    pub repeats: Repeats,
    pub throughput_bps: Figure,
    pub host_cpu: Figure,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_p50_us: Option<Figure>,
}

impl Repeated {
    /// The figures of `runs`, and the run nearest the median throughput.
    pub(crate) fn of(runs: Vec<Measured>, repeats: Repeats) -> Result<(Repeated, Measured)> {
        let tput: Vec<f64> = runs.iter().map(|m| m.delivered.throughput_bps).collect();
        let cpu: Vec<f64> = runs.iter().map(|m| m.host_cpu).collect();
        let p50: Vec<f64> = runs
            .iter()
            .filter_map(|m| m.delivered.latency_p50_us)
            .collect();
        let (Some(throughput_bps), Some(host_cpu)) = (Figure::of(&tput), Figure::of(&cpu)) else {
            bail!("no measurement");
        };
        let med = throughput_bps.estimate.median;
        let Some(rep) = runs.into_iter().min_by(|x, y| {
            (x.delivered.throughput_bps - med)
                .abs()
                .total_cmp(&(y.delivered.throughput_bps - med).abs())
        }) else {
            bail!("no measurement");
        };
        Ok((
            Repeated {
                repeats,
                throughput_bps,
                host_cpu,
                latency_p50_us: Figure::of(&p50),
            },
            rep,
        ))
    }
}

/// `softoe bench --emulate`.
pub(crate) fn run(a: &EmulateArgs<'_>) -> Result<()> {
    let cfg = crate::sim_machine::load_config(Some(a.config), a.set)?;
    let cal = crate::sim_machine::load_calibration(a.calibration)?;
    let plan = plan(&cfg, cal.ring_access.c0)?;
    if !crate::bed::is_root() {
        bail!(
            "softoe bench --emulate runs the real engine on a testbed of network namespaces, \
             a bridge and a TAP device, which needs root: run it with sudo \
             (`softoe sim predict` needs no root)"
        );
    }
    let exe = std::env::current_exe().context("where is this binary?")?;
    let work = work_of(&cfg, a.quick);
    let pb = if a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    if let Ok(st) = ProgressStyle::with_template("{spinner} {elapsed} {msg}") {
        pb.set_style(st);
    }
    pb.enable_steady_tick(Duration::from_millis(200));
    pb.set_message(format!(
        "softoe bench --emulate: {} on {}",
        describe(&work),
        if plan.offload {
            "softoe's engine"
        } else {
            "Linux's TCP"
        }
    ));
    let rounds = interleaved(
        &a.rule,
        1,
        |_| measure(&plan, work, false, a.engine_cpu, &exe),
        |v| {
            let runs = v.first().map_or(&[][..], Vec::as_slice);
            let f = |g: fn(&Measured) -> Option<f64>| {
                Estimate::of(&runs.iter().filter_map(g).collect::<Vec<_>>())
            };
            f(|m| Some(m.delivered.throughput_bps))
                .into_iter()
                .chain(f(|m| m.delivered.latency_p50_us))
                .collect()
        },
    );
    pb.finish_and_clear();
    let rounds = rounds?;
    let repeats = rounds.repeats();
    let runs = rounds.per_side.into_iter().next().unwrap_or_default();
    let (repeated, m) = Repeated::of(runs, repeats)?;
    let source = crate::sim_machine::calibration_source(&cal);
    if a.json {
        let r = Report {
            config: &cfg,
            calibration: source,
            quick: a.quick,
            emulation: &plan,
            measured: &m,
            repeated: &repeated,
        };
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", render(&cfg, &plan, &work, &m, a.quick));
        print!("{}", render_repeats(&repeated));
    }
    Ok(())
}

/// The repeats' line: how many runs, and how sure the medians are.
fn render_repeats(r: &Repeated) -> String {
    let e = &r.throughput_bps.estimate;
    let mut o = format!(
        "  repeats      {} runs ({}), the figures above from the median run: throughput median {} \
         ±{:.1} % (range {} – {})",
        r.repeats.rounds,
        match r.repeats.stopped {
            Stopped::Converged => "the intervals narrowed",
            Stopped::Rounds => "the cap on runs",
            Stopped::Time => "the cap on time",
        },
        gbps_or_mbps(e.median),
        e.rel_half_width() * 100.0,
        gbps_or_mbps(e.min),
        gbps_or_mbps(e.max)
    );
    if let Some(p) = &r.latency_p50_us {
        o.push_str(&format!(
            ", one-way p50 median {:.2} µs ±{:.1} %",
            p.estimate.median,
            p.estimate.rel_half_width() * 100.0
        ));
    }
    o.push('\n');
    o
}

fn describe(w: &Work) -> String {
    let kind = format!("{:?} {:?}", w.kind, w.direction).to_lowercase();
    match w.kind {
        WorkloadKind::Stream => format!(
            "{kind} of {} B per connection in {} B writes, {} connection(s)",
            w.bytes, w.message, w.connections
        ),
        WorkloadKind::Rr => format!(
            "{kind}, {} round trips of {} B each way per connection, {} connection(s)",
            w.requests, w.message, w.connections
        ),
    }
}

fn render(cfg: &MachineConfig, p: &Plan, w: &Work, m: &Measured, quick: bool) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "softoe bench --emulate{}: {}; {}",
        if quick { " --quick" } else { "" },
        describe(w),
        if p.offload {
            format!(
                "softoe's engine at {} × its speed, {} ns per ring access (memory delay × {})",
                p.speed, p.access_delay_ns, cfg.memory.delay
            )
        } else {
            "the program on Linux's TCP (no offload)".to_string()
        }
    );
    let _ = writeln!(
        o,
        "  TAP tso {} csum {} gro {}, receive coalescing {} µs, spin {} µs; path {}",
        p.tso,
        p.csum,
        p.gro,
        p.rx_coalesce_us,
        if p.spin_us >= POLL_FOREVER.as_secs_f64() * 1e6 {
            "for ever".to_string()
        } else {
            p.spin_us.to_string()
        },
        match p.shape_mbit {
            Some(r) => format!("shaped to {r} Mbit/s by tbf"),
            None => "unshaped".into(),
        }
    );
    let _ = writeln!(
        o,
        "  throughput   {} ({:.0} messages/s; {} B in {:.3} s)",
        gbps_or_mbps(m.delivered.throughput_bps),
        m.delivered.messages_per_sec,
        m.payload_bytes,
        m.window_seconds
    );
    if let (Some(p50), Some(p99), Some(r50)) = (
        m.delivered.latency_p50_us,
        m.delivered.latency_p99_us,
        m.delivered.rtt_p50_us,
    ) {
        let _ = writeln!(
            o,
            "  latency      one way p50 {p50:.2} µs, p99 {p99:.2} µs (round trip p50 {r50:.2} µs)"
        );
    }
    let _ = writeln!(
        o,
        "  host CPU     {:.1} %   engine CPU {:.1} %{}",
        m.host_cpu * 100.0,
        m.engine_cpu * 100.0,
        m.engine_busy
            .map(|b| format!(" (busy {:.1} %)", b * 100.0))
            .unwrap_or_default()
    );
    if let (Some(cpu), Some(calls)) = (m.peer_cpu_seconds, m.peer_calls.filter(|&n| n > 0)) {
        let _ = writeln!(
            o,
            "  far end      {:.1} µs CPU per {} ({:.0} % of a core; the Linux client, with the \
             kernel's work on its thread)",
            cpu * 1e6 / calls as f64,
            if w.direction == FlowDirection::Receive {
                "write"
            } else {
                "read"
            },
            cpu / m.window_seconds.max(1e-9) * 100.0
        );
    }
    if let Some(c) = &m.engine {
        let _ = writeln!(
            o,
            "  engine       {} frames in, {} out; {} ring accesses ({:.3} ms delayed); slowed {:.3} ms; asleep {:.0} %",
            c.frames_in,
            c.frames_out,
            c.ring_accesses,
            c.access_delay_nanos as f64 / 1e6,
            c.slowdown_nanos as f64 / 1e6,
            c.idle_share() * 100.0
        );
    }
    for n in &p.notes {
        let _ = writeln!(o, "  note: {n}");
    }
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::sim_machine::load_config;

    fn cfg(set: &[&str]) -> MachineConfig {
        let set: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        load_config(None, &set).unwrap()
    }

    fn refused(set: &[&str]) -> String {
        format!("{:#}", plan(&cfg(set), 80.0).unwrap_err())
    }

    #[test]
    fn the_defaults_run_unshaped_at_full_speed() {
        let p = plan(&cfg(&[]), 80.0).unwrap();
        assert!(p.offload && p.tso && p.csum && p.gro);
        assert_eq!((p.speed, p.access_delay_ns, p.shape_mbit), (1.0, 0, None));
        assert_eq!(p.spin_us, 50.0);
        assert!(p.notes.iter().any(|n| n.contains("link.delay_us")));
    }

    #[test]
    fn each_knob_maps_to_the_engine() {
        let p = plan(
            &cfg(&[
                "engine.speed=0.5",
                "memory.delay=4",
                "nic.tso=false",
                "nic.coalesce_us=13",
                "engine.spin_us=10",
                "link.gbps=1",
            ]),
            80.0,
        )
        .unwrap();
        assert_eq!(p.speed, 0.5);
        // (m − 1)·a = 3 × 80 ns.
        assert_eq!(p.access_delay_ns, 240);
        assert!(!p.tso && p.csum);
        assert_eq!((p.rx_coalesce_us, p.spin_us), (13.0, 10.0));
        assert_eq!(p.shape_mbit, Some(1000));
        assert!(p.notes.iter().any(|n| n.contains("coalesce_frames = 64")));
        let p = plan(&cfg(&["nic.polling=true"]), 80.0).unwrap();
        assert!(p.spin_us >= 3.6e9);
    }

    #[test]
    fn what_cannot_be_emulated_is_refused_by_name() {
        assert!(refused(&["engine.speed=2"]).contains("can only be slowed"));
        assert!(refused(&["link.loss=0.01"]).starts_with("link.loss = 0.01 cannot be emulated"));
        assert!(refused(&["link.mtu=9000"]).starts_with("link.mtu = 9000"));
        assert!(refused(&["workload.buffer=65536"]).starts_with("workload.buffer = 65536"));
        let bus = plan(&cfg(&["bus.gbps=400", "link.gso=true"]), 80.0).unwrap();
        assert!(bus.notes.iter().any(|n| n.contains("bus.gbps = 400")));
        assert!(!bus.notes.iter().any(|n| n.contains("link.gso")));
        assert!(refused(&["host.offload=false", "nic.gro=false"]).starts_with("nic.gro = false"));
        assert!(refused(&["host.offload=false", "nic.polling=true"]).starts_with("nic.polling"));
        assert!(refused(&["host.offload=false", "nic.napi=false"]).starts_with("nic.napi"));
        let napi = plan(&cfg(&["nic.napi=false"]), 80.0).unwrap();
        assert!(napi.notes.iter().any(|n| n.starts_with("nic.napi = false")));
        // 1 ms per access is the engine's limit.
        let e = format!(
            "{:#}",
            plan(&cfg(&["memory.delay=100"]), 20_000.0).unwrap_err()
        );
        assert!(e.contains("memory.delay = 100"), "{e}");
        // Without offload the engine's knobs mean nothing, as in the model.
        let p = plan(&cfg(&["host.offload=false", "engine.speed=2"]), 80.0).unwrap();
        assert!(!p.offload);
    }

    #[test]
    fn work_counts_messages_and_payload_as_the_model_does() {
        let c = cfg(&[
            "workload.connections=2",
            "workload.bytes=100000",
            "workload.message=1000",
        ]);
        let w = work_of(&c, false);
        assert_eq!((w.payload_bytes(), w.messages()), (200_000, 200));
        assert_eq!(w.payload_bytes(), c.payload_bytes());
        let c = cfg(&[
            "workload.kind=rr",
            "workload.message=64",
            "workload.requests=50000",
        ]);
        let w = work_of(&c, true);
        assert_eq!(w.requests, QUICK_REQUESTS);
        assert_eq!(w.payload_bytes(), QUICK_REQUESTS * 64 * 2);
        assert_eq!(work_of(&c, false).payload_bytes(), c.payload_bytes());
    }
}
