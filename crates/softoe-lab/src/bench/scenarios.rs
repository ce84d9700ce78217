//! The scenarios that measure softoe alone, each point on an engine of
//! its own: the ablation and the coalescing sweep.

use std::net::SocketAddrV4;
use std::time::Duration;

use anyhow::Result;
use indicatif::ProgressBar;

use super::server::servers_cmd;
use super::workload::{bulk_out, bulk_pair, rr4};
use super::{AblationRow, CoalescingRow};
use crate::bed::{BedOptions, ENGINE, RealBed};
use crate::server::{SOURCE, Servers};

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
