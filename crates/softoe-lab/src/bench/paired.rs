//! The bulk and ping-pong rows: every system of a row — softoe's three
//! send policies and Linux — serving at once on one testbed (softoe's on
//! ports of their own), and the Linux client driving each in turn, round
//! after round (see `repeat`), so that each row's ratio to Linux is a
//! median of pairs measured moments apart.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::ProgressBar;

use super::cpu::Cpu;
use super::repeat::{Rounds, interleaved};
use super::server::servers_cmd;
use super::workload::{bulk_in, bulk_out, per_gib};
use super::{BulkFigures, BulkRow, LatencyFigures, LatencyRow, Report};
use crate::bed::{BedOptions, ENGINE, PEER, RealBed};
use crate::conditions::{RowBusy, pin_client, pin_servers, watch};
use crate::linux;
use crate::place::Placement;
use crate::server::{DISCARD, ECHO, SOURCE, Servers};
use crate::stats::{Estimate, Figure, StopRule, paired_ratios};

/// What one system serves, and how to start it.
pub(super) struct System {
    pub(super) name: String,
    pub(super) ip: Ipv4Addr,
    pub(super) softoe: bool,
    /// Added to every port it serves on (softoe's policies share the
    /// engine's address).
    pub(super) port_base: u16,
    pub(super) cmd: Command,
}

impl System {
    fn addr(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(self.ip, port + self.port_base)
    }
}

/// The systems of the bulk rows; the ping-pong rows take the first
/// (softoe's default for latency, overlap) and the last (Linux).
fn systems(exe: &Path, bed: &RealBed) -> Vec<System> {
    let softoe = |policy: &str, base: u16| {
        let mut cmd = servers_cmd(exe, Some(bed.host()), &bed.peer, ENGINE, policy);
        cmd.args(["--port-base", &base.to_string()]);
        System {
            name: format!("softoe {policy}"),
            ip: ENGINE,
            softoe: true,
            port_base: base,
            cmd,
        }
    };
    vec![
        softoe("overlap", 0),
        softoe("copy", 1000),
        softoe("zerocopy", 2000),
        System {
            name: "Linux".into(),
            ip: PEER,
            softoe: false,
            port_base: 0,
            cmd: servers_cmd(exe, None, &bed.peer, PEER, "overlap"),
        },
    ]
}

/// What the bulk and ping-pong rows run with.
pub(super) struct Paired<'a> {
    pub base: &'a BedOptions,
    pub exe: &'a Path,
    /// Bytes per bulk run; round trips per ping-pong run.
    pub bytes: u64,
    pub rounds: usize,
    pub sizes: &'a [usize],
    pub rule: &'a StopRule,
    /// Where the client and the servers run (the engine's CPU is the
    /// testbed's own option).
    pub place: Placement,
    pub want_bulk: bool,
    pub want_latency: bool,
}

/// The bulk rows (`want_bulk`) and the ping-pong sweep by message size
/// (`want_latency`) on one testbed, into `report`.
pub(super) fn bulk_and_latency(
    p: &Paired<'_>,
    report: &mut Report,
    pb: &ProgressBar,
) -> Result<()> {
    let mut bed = RealBed::start(p.base.clone())?;
    let mut systems = systems(p.exe, &bed);
    let mut servers = Vec::new();
    for sys in &mut systems {
        pb.set_message(format!("starting the servers ({})", sys.name));
        let cmd = std::mem::replace(&mut sys.cmd, Command::new("true"));
        let s = Servers::start(cmd).with_context(|| format!("the servers of {}", sys.name))?;
        pin_servers(&p.place, s.pid())
            .with_context(|| format!("placing the servers of {}", sys.name))?;
        servers.push(s);
    }
    let runs: &[(&'static str, usize)] = if p.want_bulk {
        &[
            ("Linux→host", 1),
            ("host→Linux", 1),
            ("Linux→host", 8),
            ("host→Linux", 8),
        ]
    } else {
        &[]
    };
    for &(direction, conns) in runs {
        let w = watch();
        let rounds = interleaved(
            p.rule,
            systems.len(),
            |s| {
                pb.set_message(format!(
                    "bulk {direction}, {conns} conn, {}",
                    systems[s].name
                ));
                bulk_run(&bed, &systems[s], &mut servers[s], (direction, conns), p)
            },
            |v| watch_last_against(v, |x: &BulkRun| x.gbps),
        )?;
        let busy = RowBusy::of(w);
        note(report, busy.as_ref());
        let mut rows = bulk_rows(&systems, &rounds, direction, conns, p.bytes);
        for r in &mut rows {
            r.busy.clone_from(&busy);
        }
        report.bulk.extend(rows);
        pb.inc(1);
    }
    if p.want_latency {
        // softoe overlap (0) beside Linux (3).
        let pair = [0, systems.len() - 1];
        for &size in p.sizes {
            let n = p.rounds.min((64usize << 20) / size).max(100.min(p.rounds));
            let w = watch();
            let rounds = interleaved(
                p.rule,
                2,
                |s| {
                    let sys = &systems[pair[s]];
                    pb.set_message(format!("ping-pong {size} B, {}", sys.name));
                    ping_pong_run(&bed, sys, &mut servers[pair[s]], (size, n), &p.place)
                },
                |v| watch_last_against(v, |x: &PingRun| x.p50_us),
            )?;
            let busy = RowBusy::of(w);
            note(report, busy.as_ref());
            let mut rows = latency_rows(&systems, pair, &rounds, size, n);
            for r in &mut rows {
                r.busy.clone_from(&busy);
            }
            report.latency.extend(rows);
            pb.inc(1);
        }
    }
    drop(servers);
    pb.set_message("stopping");
    let counters = bed.stop()?;
    report.engine_idle_share = Some(counters.idle_share());
    report.engine_steered_share =
        Some(counters.steered_nanos as f64 / counters.run_nanos.max(1) as f64);
    report.engine_steer_switches = Some(counters.steer_switches);
    Ok(())
}

/// Counts a row's window into the run's conditions.
fn note(report: &mut Report, busy: Option<&RowBusy>) {
    if let Some(c) = report.conditions.as_mut() {
        c.add(busy);
    }
}

/// What must narrow before a row stops: each side's main figure and each
/// side's paired ratio to the last side (Linux).
fn watch_last_against<T>(v: &[Vec<T>], f: impl Fn(&T) -> f64) -> Vec<Estimate> {
    let fig: Vec<Vec<f64>> = v.iter().map(|s| s.iter().map(&f).collect()).collect();
    let Some(last) = fig.last() else {
        return Vec::new();
    };
    let mut e: Vec<Estimate> = fig.iter().filter_map(|s| Estimate::of(s)).collect();
    for s in &fig[..fig.len() - 1] {
        e.extend(Estimate::of(&paired_ratios(s, last)));
    }
    e
}

/// One bulk run's figures.
#[derive(Clone, Copy, Debug)]
struct BulkRun {
    gbps: f64,
    app: f64,
    engine: f64,
    machine: f64,
}

/// One bulk run of `bytes` over `conns` connections against `sys`.
fn bulk_run(
    bed: &RealBed,
    sys: &System,
    servers: &mut Servers,
    (direction, conns): (&str, usize),
    p: &Paired<'_>,
) -> Result<BulkRun> {
    let (tid, bytes, place) = (bed.engine_tid, p.bytes, p.place);
    let c = bed.client.clone();
    let before = Cpu::now(servers, tid)?;
    let t = if direction == "Linux→host" {
        let a = sys.addr(DISCARD);
        c.run(move || {
            pin_client(&place)?;
            bulk_in(a, bytes, conns)
        })??
    } else {
        let a = sys.addr(SOURCE);
        c.run(move || {
            pin_client(&place)?;
            bulk_out(a, bytes, conns)
        })??
    };
    // The server's threads end a moment after the client sees the end of
    // the stream.
    std::thread::sleep(Duration::from_millis(20));
    let cpu = Cpu::now(servers, tid)?.since(before);
    let moved = bytes / conns as u64 * conns as u64;
    Ok(BulkRun {
        gbps: moved as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9,
        app: per_gib(cpu.app, moved),
        engine: if sys.softoe {
            per_gib(cpu.engine, moved)
        } else {
            0.0
        },
        machine: per_gib(cpu.machine, moved),
    })
}

/// A figure of `xs` (never empty here: every row runs a round at least).
pub(super) fn figure(xs: impl Iterator<Item = f64>) -> Figure {
    Figure::of_all(xs)
}

/// The rows of one bulk measurement, one per system.
fn bulk_rows(
    systems: &[System],
    r: &Rounds<BulkRun>,
    direction: &'static str,
    conns: usize,
    bytes: u64,
) -> Vec<BulkRow> {
    let linux: Vec<f64> = r
        .per_side
        .last()
        .map_or(Vec::new(), |s| s.iter().map(|x| x.gbps).collect());
    systems
        .iter()
        .zip(&r.per_side)
        .map(|(sys, runs)| {
            let f = |g: fn(&BulkRun) -> f64| figure(runs.iter().map(g));
            let figures = BulkFigures {
                gbps: f(|x| x.gbps),
                app_s_per_gib: f(|x| x.app),
                engine_s_per_gib: f(|x| x.engine),
                machine_s_per_gib: f(|x| x.machine),
            };
            let gbps: Vec<f64> = runs.iter().map(|x| x.gbps).collect();
            BulkRow {
                system: sys.name.clone(),
                direction,
                conns,
                bytes: bytes / conns as u64 * conns as u64,
                gbps: figures.gbps.estimate.median,
                app_s_per_gib: figures.app_s_per_gib.estimate.median,
                engine_s_per_gib: figures.engine_s_per_gib.estimate.median,
                machine_s_per_gib: figures.machine_s_per_gib.estimate.median,
                figures,
                vs_linux: sys
                    .softoe
                    .then(|| figure(paired_ratios(&gbps, &linux).into_iter())),
                repeats: r.repeats(),
                busy: None,
            }
        })
        .collect()
}

/// One ping-pong run's figures.
#[derive(Clone, Copy, Debug)]
struct PingRun {
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    mean_us: f64,
    host_cpu_pct: f64,
}

/// One ping-pong run of `n` round trips of `size` bytes against `sys`.
fn ping_pong_run(
    bed: &RealBed,
    sys: &System,
    servers: &mut Servers,
    (size, n): (usize, usize),
    place: &Placement,
) -> Result<PingRun> {
    let tid = bed.engine_tid;
    let (a, c, place) = (sys.addr(ECHO), bed.client.clone(), *place);
    let before = Cpu::now(servers, tid)?;
    let t = Instant::now();
    let mut r = c.run(move || {
        pin_client(&place)?;
        linux::ping_pong(a, size, n)
    })??;
    let wall = t.elapsed();
    let cpu = Cpu::now(servers, tid)?.since(before);
    r.sort();
    let mean = r.iter().sum::<Duration>().as_secs_f64() / r.len().max(1) as f64;
    Ok(PingRun {
        p50_us: linux::percentile_us(&r, 50.0),
        p99_us: linux::percentile_us(&r, 99.0),
        p999_us: linux::percentile_us(&r, 99.9),
        mean_us: mean * 1e6,
        host_cpu_pct: cpu.app.as_secs_f64() / wall.as_secs_f64().max(1e-9) * 100.0,
    })
}

/// The two rows of one message size: softoe's, then Linux's.
fn latency_rows(
    systems: &[System],
    pair: [usize; 2],
    r: &Rounds<PingRun>,
    size: usize,
    n: usize,
) -> Vec<LatencyRow> {
    let linux: Vec<f64> = r
        .per_side
        .last()
        .map_or(Vec::new(), |s| s.iter().map(|x| x.p50_us).collect());
    pair.iter()
        .zip(&r.per_side)
        .map(|(&i, runs)| {
            let sys = &systems[i];
            let f = |g: fn(&PingRun) -> f64| figure(runs.iter().map(g));
            let figures = LatencyFigures {
                p50_us: f(|x| x.p50_us),
                p99_us: f(|x| x.p99_us),
                p999_us: f(|x| x.p999_us),
                mean_us: f(|x| x.mean_us),
                host_cpu_pct: f(|x| x.host_cpu_pct),
            };
            let p50: Vec<f64> = runs.iter().map(|x| x.p50_us).collect();
            let mean = figures.mean_us.estimate.median;
            LatencyRow {
                system: sys.name.clone(),
                size,
                rounds: n,
                p50_us: figures.p50_us.estimate.median,
                p99_us: figures.p99_us.estimate.median,
                p999_us: figures.p999_us.estimate.median,
                mean_us: mean,
                mbps: size as f64 * 8.0 / (mean / 1e6 / 2.0).max(1e-9) / 1e6,
                host_cpu_pct: figures.host_cpu_pct.estimate.median,
                figures,
                p50_vs_linux: sys
                    .softoe
                    .then(|| figure(paired_ratios(&p50, &linux).into_iter())),
                repeats: r.repeats(),
                busy: None,
            }
        })
        .collect()
}
