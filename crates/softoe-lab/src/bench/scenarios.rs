//! The scenarios that measure on one engine: bulk and latency, the
//! ablation, and the coalescing sweep.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Result;
use indicatif::ProgressBar;

use super::cpu::Cpu;
use super::server::servers_cmd;
use super::workload::{bulk_in, bulk_out, bulk_pair, per_gib, rr4};
use super::{AblationRow, BulkRow, CoalescingRow, LatencyRow, Report};
use crate::bed::{BedOptions, ENGINE, PEER, RealBed};
use crate::linux::{self};
use crate::server::{DISCARD, ECHO, SOURCE, Servers};

/// Offloads × send policy × coalescing: the 4-byte round trip and one
/// connection's goodput from the host, each row on a fresh engine.
pub(super) fn ablation(
    base: &BedOptions,
    exe: &std::path::Path,
    bytes: u64,
    rounds: usize,
    pb: &ProgressBar,
) -> Result<Vec<AblationRow>> {
    let off = |tso, csum, gro| softoe_engine::TapOffloads { tso, csum, gro };
    let variants = [
        ("none", off(false, false, false)),
        ("checksum", off(false, true, false)),
        ("checksum+TSO", off(true, true, false)),
        ("checksum+TSO+GRO", off(true, true, true)),
    ];
    let mut rows = Vec::new();
    for (name, offloads) in variants {
        for coalescing in [false, true] {
            pb.set_message(format!(
                "ablation: offloads {name}, coalescing {}",
                if coalescing { "on" } else { "off" }
            ));
            let delay = if coalescing {
                COALESCE_ON
            } else {
                Duration::ZERO
            };
            let bed = RealBed::start(BedOptions {
                offloads,
                rx_coalesce: delay,
                wake_delay: delay,
                ..base.clone()
            })?;
            for policy in ["copy", "zerocopy", "overlap"] {
                let servers = Servers::start(servers_cmd(
                    exe,
                    Some(bed.host()),
                    &bed.peer,
                    ENGINE,
                    policy,
                ))?;
                let (p50, _) = rr4(&bed, ENGINE, rounds)?;
                let t = bed
                    .client
                    .run(move || bulk_out(SocketAddrV4::new(ENGINE, SOURCE), bytes, 1))??;
                rows.push(AblationRow {
                    offloads: name,
                    policy,
                    coalescing,
                    rr4_p50_us: p50,
                    bulk_gbps: bytes as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9,
                });
                drop(servers);
                pb.inc(1);
            }
        }
    }
    Ok(rows)
}

/// "On" in the ablation: HL-TCP's best receive-interrupt delay (§4,
/// Fig. 7: 13.31 µs), for receive frames and for completion wake-ups.
pub(super) const COALESCE_ON: Duration = Duration::from_micros(13);

/// The coalescing sweep: receive-interrupt and wake-up delay together,
/// 4-byte round trip and goodput each way, each point on a fresh engine.
pub(super) fn coalescing(
    base: &BedOptions,
    exe: &std::path::Path,
    delays: &[u64],
    bytes: u64,
    rounds: usize,
    pb: &ProgressBar,
) -> Result<Vec<CoalescingRow>> {
    let mut rows = Vec::new();
    for &d in delays {
        pb.set_message(format!("coalescing {d} µs"));
        let delay = Duration::from_micros(d);
        let bed = RealBed::start(BedOptions {
            rx_coalesce: delay,
            wake_delay: delay,
            ..base.clone()
        })?;
        let servers = Servers::start(servers_cmd(
            exe,
            Some(bed.host()),
            &bed.peer,
            ENGINE,
            "overlap",
        ))?;
        let (p50, p99) = rr4(&bed, ENGINE, rounds)?;
        let (in_gbps, out_gbps) = bulk_pair(&bed, ENGINE, bytes)?;
        rows.push(CoalescingRow {
            delay_us: d,
            rr4_p50_us: p50,
            rr4_p99_us: p99,
            in_gbps,
            out_gbps,
        });
        drop(servers);
        pb.inc(1);
    }
    Ok(rows)
}

/// What one system serves, and how to start it.
pub(super) struct System {
    pub(super) name: String,
    pub(super) ip: Ipv4Addr,
    pub(super) softoe: bool,
    pub(super) cmd: Command,
}
/// The bulk and latency scenarios, on one testbed: every system's bulk
/// runs (`want_bulk`) and the ping-pong sweep by message size
/// (`want_latency`), into `report`.
#[allow(clippy::too_many_arguments)]
pub(super) fn bulk_and_latency(
    base: &BedOptions,
    exe: &std::path::Path,
    bytes: u64,
    rounds: usize,
    sizes: &[usize],
    (want_bulk, want_latency): (bool, bool),
    report: &mut Report,
    pb: &ProgressBar,
) -> Result<()> {
    let mut bed = RealBed::start(base.clone())?;
    let servers_on = |engine: Option<&std::path::Path>, ip: Ipv4Addr, policy: &str| {
        servers_cmd(exe, engine, &bed.peer, ip, policy)
    };
    let systems = vec![
        System {
            name: "softoe overlap".into(),
            ip: ENGINE,
            softoe: true,
            cmd: servers_on(Some(bed.host()), ENGINE, "overlap"),
        },
        System {
            name: "softoe copy".into(),
            ip: ENGINE,
            softoe: true,
            cmd: servers_on(Some(bed.host()), ENGINE, "copy"),
        },
        System {
            name: "softoe zerocopy".into(),
            ip: ENGINE,
            softoe: true,
            cmd: servers_on(Some(bed.host()), ENGINE, "zerocopy"),
        },
        System {
            name: "Linux".into(),
            ip: PEER,
            softoe: false,
            cmd: servers_on(None, PEER, "overlap"),
        },
    ];
    let tid = bed.engine_tid;
    for sys in systems {
        pb.set_message(format!("starting the servers ({})", sys.name));
        let mut servers = Servers::start(sys.cmd)?;
        let runs: &[(&'static str, usize)] = if want_bulk {
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
            pb.set_message(format!("bulk {direction}, {conns} conn, {}", sys.name));
            let (ip, c) = (sys.ip, bed.client.clone());
            let before = Cpu::now(&mut servers, tid)?;
            let t = if direction == "Linux→host" {
                c.run(move || bulk_in(SocketAddrV4::new(ip, DISCARD), bytes, conns))??
            } else {
                c.run(move || bulk_out(SocketAddrV4::new(ip, SOURCE), bytes, conns))??
            };
            // The server's threads end a moment after the client sees the
            // end of the stream.
            std::thread::sleep(Duration::from_millis(20));
            let cpu = Cpu::now(&mut servers, tid)?.since(before);
            let moved = bytes / conns as u64 * conns as u64;
            report.bulk.push(BulkRow {
                system: sys.name.clone(),
                direction,
                conns,
                bytes: moved,
                gbps: moved as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9,
                app_s_per_gib: per_gib(cpu.app, moved),
                engine_s_per_gib: if sys.softoe {
                    per_gib(cpu.engine, moved)
                } else {
                    0.0
                },
                machine_s_per_gib: per_gib(cpu.machine, moved),
            });
            pb.inc(1);
        }
        if want_latency && (sys.name == "softoe overlap" || !sys.softoe) {
            for &size in sizes {
                pb.set_message(format!("ping-pong {size} B, {}", sys.name));
                let n = rounds.min((64usize << 20) / size).max(100.min(rounds));
                let (ip, c) = (sys.ip, bed.client.clone());
                let before = Cpu::now(&mut servers, tid)?;
                let t = Instant::now();
                let mut r =
                    c.run(move || linux::ping_pong(SocketAddrV4::new(ip, ECHO), size, n))??;
                let wall = t.elapsed();
                let cpu = Cpu::now(&mut servers, tid)?.since(before);
                r.sort();
                let mean = r.iter().sum::<Duration>().as_secs_f64() / r.len().max(1) as f64;
                report.latency.push(LatencyRow {
                    system: sys.name.clone(),
                    size,
                    rounds: n,
                    p50_us: linux::percentile_us(&r, 50.0),
                    p99_us: linux::percentile_us(&r, 99.0),
                    p999_us: linux::percentile_us(&r, 99.9),
                    mean_us: mean * 1e6,
                    mbps: size as f64 * 8.0 / (mean / 2.0).max(1e-9) / 1e6,
                    host_cpu_pct: cpu.app.as_secs_f64() / wall.as_secs_f64().max(1e-9) * 100.0,
                });
                pb.inc(1);
            }
        }
        drop(servers);
    }
    pb.set_message("stopping");
    let counters = bed.stop()?;
    report.engine_idle_share = Some(counters.idle_share());
    report.engine_steered_share =
        Some(counters.steered_nanos as f64 / counters.run_nanos.max(1) as f64);
    report.engine_steer_switches = Some(counters.steer_switches);
    Ok(())
}
