//! The plots of `softoe bench`'s sweeps.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{CoalescingRow, LatencyRow, Report};
use crate::plot::{self, Series};

/// The sweeps' plots, written into `dir`.
pub(super) fn plots(r: &Report, dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = crate::bench::loss::plots(&r.loss, dir)?;
    if let Some(b) = &r.bond {
        out.extend(crate::bench::bond::plots(b, dir)?);
    }
    if !r.coalescing.is_empty() {
        let line = |name: &str, f: &dyn Fn(&CoalescingRow) -> f64| Series {
            name: name.into(),
            points: r
                .coalescing
                .iter()
                .map(|c| (c.delay_us as f64, f(c)))
                .collect(),
        };
        let p = dir.join("coalescing-latency.svg");
        plot::linear(
            &p,
            "4-byte round trip by coalescing delay (HL-TCP Fig. 7)",
            "receive-interrupt and wake-up delay (µs)",
            "round trip (µs)",
            &[
                line("p50", &|c| c.rr4_p50_us),
                line("p99", &|c| c.rr4_p99_us),
            ],
        )?;
        out.push(p);
        let p = dir.join("coalescing-goodput.svg");
        plot::linear(
            &p,
            "One connection's goodput by coalescing delay",
            "receive-interrupt and wake-up delay (µs)",
            "Gb/s",
            &[
                line("Linux→host", &|c| c.in_gbps),
                line("host→Linux", &|c| c.out_gbps),
            ],
        )?;
        out.push(p);
    }
    if !r.scale.is_empty() {
        let line = |sys: &str, f: &dyn Fn(&crate::bench::scale::ScaleRow) -> f64| Series {
            name: sys.to_string(),
            points: r
                .scale
                .iter()
                .filter(|x| x.system == sys)
                .map(|x| (x.conns as f64, f(x)))
                .collect(),
        };
        let p = dir.join("scale-latency.svg");
        let held = |sys: &str, q: &str, f: &dyn Fn(&crate::bench::scale::ScaleRow) -> f64| Series {
            name: format!("{sys} {q}"),
            ..line(sys, f)
        };
        plot::log_log(
            &p,
            "One flow's 64-byte round trip among N idle connections",
            "connections held",
            "round trip (µs)",
            &[
                held("softoe", "p50", &|x| x.held_p50_us),
                held("softoe", "p99", &|x| x.held_p99_us),
                held("Linux", "p50", &|x| x.held_p50_us),
                held("Linux", "p99", &|x| x.held_p99_us),
            ],
        )?;
        out.push(p);
        let p = dir.join("scale-throughput.svg");
        plot::log_log(
            &p,
            "64-byte requests per second, every connection busy",
            "connections",
            "requests per second",
            &[line("softoe", &|x| x.rps), line("Linux", &|x| x.rps)],
        )?;
        out.push(p);
    }
    if r.latency.is_empty() {
        return Ok(out);
    }
    let mut systems: Vec<&str> = Vec::new();
    for l in &r.latency {
        if !systems.contains(&l.system.as_str()) {
            systems.push(&l.system);
        }
    }
    let curve = |name: String, f: &dyn Fn(&LatencyRow) -> f64, sys: &str| Series {
        name,
        points: r
            .latency
            .iter()
            .filter(|l| l.system == sys)
            .map(|l| (l.size as f64, f(l)))
            .collect(),
    };
    let latency: Vec<Series> = systems
        .iter()
        .flat_map(|&sys| {
            [
                curve(format!("{sys} p50"), &|l| l.p50_us, sys),
                curve(format!("{sys} p99"), &|l| l.p99_us, sys),
            ]
        })
        .collect();
    let p = dir.join("latency.svg");
    plot::log_log(
        &p,
        "Ping-pong round trip by message size",
        "message size (bytes)",
        "round trip (µs)",
        &latency,
    )?;
    out.push(p);
    let bandwidth: Vec<Series> = systems
        .iter()
        .map(|&sys| curve(sys.to_string(), &|l| l.mbps, sys))
        .collect();
    let p = dir.join("bandwidth.svg");
    plot::log_log(
        &p,
        "Ping-pong bandwidth by message size (NetPIPE)",
        "message size (bytes)",
        "Mb/s",
        &bandwidth,
    )?;
    out.push(p);
    let cpu: Vec<Series> = systems
        .iter()
        .map(|&sys| curve(sys.to_string(), &|l| l.host_cpu_pct, sys))
        .collect();
    let p = dir.join("host-cpu.svg");
    plot::log_log(
        &p,
        "Host CPU utilization by message size (HL-TCP: CPU time ÷ elapsed)",
        "message size (bytes)",
        "server program CPU (%)",
        &cpu,
    )?;
    out.push(p);
    Ok(out)
}
