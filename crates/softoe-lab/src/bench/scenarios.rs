//! The scenarios that measure softoe alone, each point on an engine of
//! its own: the ablation and the coalescing sweep.

use std::net::SocketAddrV4;
use std::time::Duration;

use anyhow::Result;
use indicatif::ProgressBar;

use super::paired::figure;
use super::repeat::interleaved;
use super::server::servers_cmd;
use super::workload::{bulk_out, bulk_pair, rr4};
use super::{AblationRow, CoalescingRow};
use crate::bed::{BedOptions, ENGINE, RealBed};
use crate::linux;
use crate::server::{ECHO, SOURCE, Servers};
use crate::stats::{Estimate, StopRule};

/// Offloads × send policy × coalescing: the 4-byte round trip and one
/// connection's goodput from the host, each offload set and coalescing on
/// an engine of its own, the three policies' servers on it at once and
/// measured in turn, round after round, until `rule` stops.
pub(super) fn ablation(
    base: &BedOptions,
    exe: &std::path::Path,
    (bytes, rounds): (u64, usize),
    rule: &StopRule,
    pb: &ProgressBar,
) -> Result<Vec<AblationRow>> {
    let off = |tso, csum, gro| softoe_engine::TapOffloads { tso, csum, gro };
    let variants = [
        ("none", off(false, false, false)),
        ("checksum", off(false, true, false)),
        ("checksum+TSO", off(true, true, false)),
        ("checksum+TSO+GRO", off(true, true, true)),
    ];
    const POLICIES: [(&str, u16); 3] = [("copy", 0), ("zerocopy", 1000), ("overlap", 2000)];
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
            let mut servers = Vec::new();
            for (policy, port_base) in POLICIES {
                let mut cmd = servers_cmd(exe, Some(bed.host()), &bed.peer, ENGINE, policy);
                cmd.args(["--port-base", &port_base.to_string()]);
                servers.push(Servers::start(cmd)?);
            }
            let r = interleaved(
                rule,
                POLICIES.len(),
                |s| {
                    let base = POLICIES[s].1;
                    let echo = SocketAddrV4::new(ENGINE, ECHO + base);
                    let source = SocketAddrV4::new(ENGINE, SOURCE + base);
                    let mut rtt = bed
                        .client
                        .run(move || linux::ping_pong(echo, 4, rounds))??;
                    rtt.sort();
                    let t = bed.client.run(move || bulk_out(source, bytes, 1))??;
                    Ok((
                        linux::percentile_us(&rtt, 50.0),
                        bytes as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9,
                    ))
                },
                |v| {
                    v.iter()
                        .filter_map(|s| Estimate::of(&s.iter().map(|x| x.1).collect::<Vec<_>>()))
                        .collect()
                },
            )?;
            drop(servers);
            for ((policy, _), runs) in POLICIES.iter().zip(&r.per_side) {
                let p50 = figure(runs.iter().map(|x| x.0));
                let gbps = figure(runs.iter().map(|x| x.1));
                rows.push(AblationRow {
                    offloads: name,
                    policy,
                    coalescing,
                    rr4_p50_us: p50.estimate.median,
                    bulk_gbps: gbps.estimate.median,
                    rr4_p50: p50,
                    bulk: gbps,
                    repeats: r.repeats(),
                });
            }
            pb.inc(1);
        }
    }
    Ok(rows)
}

/// "On" in the ablation: HL-TCP's best receive-interrupt delay (§4,
/// Fig. 7: 13.31 µs), for receive frames and for completion wake-ups.
pub(super) const COALESCE_ON: Duration = Duration::from_micros(13);

/// The coalescing sweep: receive-interrupt and wake-up delay together,
/// 4-byte round trip and goodput each way, each point on a fresh engine,
/// repeated on it until `rule` stops.
pub(super) fn coalescing(
    base: &BedOptions,
    exe: &std::path::Path,
    delays: &[u64],
    (bytes, rounds): (u64, usize),
    rule: &StopRule,
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
        let r = interleaved(
            rule,
            1,
            |_| {
                let (p50, p99) = rr4(&bed, ENGINE, rounds)?;
                let (i, o) = bulk_pair(&bed, ENGINE, bytes)?;
                Ok([p50, p99, i, o])
            },
            |v| {
                let runs = v.first().map_or(&[][..], Vec::as_slice);
                (0..4)
                    .filter(|&k| k != 1)
                    .filter_map(|k| Estimate::of(&runs.iter().map(|x| x[k]).collect::<Vec<_>>()))
                    .collect()
            },
        )?;
        drop(servers);
        let runs = r.per_side.first().map_or(&[][..], Vec::as_slice);
        let f = |k: usize| figure(runs.iter().map(|x| x[k]));
        let (p50, p99, i, o) = (f(0), f(1), f(2), f(3));
        rows.push(CoalescingRow {
            delay_us: d,
            rr4_p50_us: p50.estimate.median,
            rr4_p99_us: p99.estimate.median,
            in_gbps: i.estimate.median,
            out_gbps: o.estimate.median,
            figures: [p50, p99, i, o],
            repeats: r.repeats(),
        });
        pb.inc(1);
    }
    Ok(rows)
}
