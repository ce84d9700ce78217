//! The plots of `softoe bench`'s sweeps, each drawn from a table: which
//! file, which axes, and which quantity of the rows each curve shows.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::scale::ScaleRow;
use super::{CoalescingRow, LatencyRow, Report};
use crate::plot::{self, Series};

/// A quantity of a row, with its label in the legend ("": none).
type Quantity<R> = (&'static str, fn(&R) -> f64);

/// One plot of a sweep: its file, its labels, its axes, and its curves —
/// for each system, each quantity of the rows (named after the system and
/// the quantity's label, whichever are not empty).
struct Spec<R: 'static> {
    file: &'static str,
    title: &'static str,
    x_desc: &'static str,
    y_desc: &'static str,
    /// Log–log axes, or linear from zero.
    log: bool,
    curves: &'static [Quantity<R>],
}

/// The coalescing sweep, by receive-interrupt and wake-up delay.
const COALESCING: [Spec<CoalescingRow>; 2] = [
    Spec {
        file: "coalescing-latency.svg",
        title: "4-byte round trip by coalescing delay (HL-TCP Fig. 7)",
        x_desc: "receive-interrupt and wake-up delay (µs)",
        y_desc: "round trip (µs)",
        log: false,
        curves: &[("p50", |c| c.rr4_p50_us), ("p99", |c| c.rr4_p99_us)],
    },
    Spec {
        file: "coalescing-goodput.svg",
        title: "One connection's goodput by coalescing delay",
        x_desc: "receive-interrupt and wake-up delay (µs)",
        y_desc: "Gb/s",
        log: false,
        curves: &[
            ("Linux→host", |c| c.in_gbps),
            ("host→Linux", |c| c.out_gbps),
        ],
    },
];

/// The scale scenario, by connections held.
const SCALE: [Spec<ScaleRow>; 2] = [
    Spec {
        file: "scale-latency.svg",
        title: "One flow's 64-byte round trip among N idle connections",
        x_desc: "connections held",
        y_desc: "round trip (µs)",
        log: true,
        curves: &[("p50", |x| x.held_p50_us), ("p99", |x| x.held_p99_us)],
    },
    Spec {
        file: "scale-throughput.svg",
        title: "64-byte requests per second, every connection busy",
        x_desc: "connections",
        y_desc: "requests per second",
        log: true,
        curves: &[("", |x| x.rps)],
    },
];

/// The ping-pong sweep, by message size.
const LATENCY: [Spec<LatencyRow>; 3] = [
    Spec {
        file: "latency.svg",
        title: "Ping-pong round trip by message size",
        x_desc: "message size (bytes)",
        y_desc: "round trip (µs)",
        log: true,
        curves: &[("p50", |l| l.p50_us), ("p99", |l| l.p99_us)],
    },
    Spec {
        file: "bandwidth.svg",
        title: "Ping-pong bandwidth by message size (NetPIPE)",
        x_desc: "message size (bytes)",
        y_desc: "Mb/s",
        log: true,
        curves: &[("", |l| l.mbps)],
    },
    Spec {
        file: "host-cpu.svg",
        title: "Host CPU utilization by message size (HL-TCP: CPU time ÷ elapsed)",
        x_desc: "message size (bytes)",
        y_desc: "server program CPU (%)",
        log: true,
        curves: &[("", |l| l.host_cpu_pct)],
    },
];

/// The spin sweep, by the engine's idle spin, a curve per program budget.
const SPIN: [Spec<super::spin::SpinRow>; 2] = [
    Spec {
        file: "spin-latency.svg",
        title: "4-byte round trip by spin budget",
        x_desc: "engine's idle spin before it sleeps (µs)",
        y_desc: "round trip (µs)",
        log: false,
        curves: &[("p50", |r| r.p50_us), ("p99", |r| r.p99_us)],
    },
    Spec {
        file: "spin-cpu.svg",
        title: "CPU per round trip by spin budget (both cores)",
        x_desc: "engine's idle spin before it sleeps (µs)",
        y_desc: "machine CPU per round trip (µs)",
        log: false,
        curves: &[("", |r| r.machine_cpu_us)],
    },
];

/// One sweep's rows: the x of each, and which system each is of.
struct Sweep<'a, R> {
    rows: &'a [R],
    x: fn(&R) -> f64,
    system: fn(&R) -> &str,
    /// The systems, one curve each per quantity, in this order.
    systems: Vec<&'a str>,
}

impl<R> Sweep<'_, R> {
    /// Draws each plot of `specs` into `dir`, adding its path to `out`.
    fn draw(&self, specs: &[Spec<R>], dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for spec in specs {
            let series: Vec<Series> = self
                .systems
                .iter()
                .flat_map(|&sys| spec.curves.iter().map(move |&(q, y)| (sys, q, y)))
                .map(|(sys, q, y)| Series {
                    name: [sys, q]
                        .into_iter()
                        .filter(|s| !s.is_empty())
                        .collect::<Vec<_>>()
                        .join(" "),
                    points: self
                        .rows
                        .iter()
                        .filter(|r| (self.system)(r) == sys)
                        .map(|r| ((self.x)(r), y(r)))
                        .collect(),
                })
                .collect();
            let p = dir.join(spec.file);
            let draw = if spec.log {
                plot::log_log
            } else {
                plot::linear
            };
            draw(&p, spec.title, spec.x_desc, spec.y_desc, &series)?;
            out.push(p);
        }
        Ok(())
    }
}

/// The sweeps' plots, written into `dir`.
pub(super) fn plots(r: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = super::loss::plots(&r.loss, dir)?;
    if let Some(b) = &r.bond {
        out.extend(super::bond::plots(b, dir)?);
    }
    if !r.coalescing.is_empty() {
        Sweep {
            rows: &r.coalescing,
            x: |c| c.delay_us as f64,
            system: |_| "",
            systems: vec![""],
        }
        .draw(&COALESCING, dir, &mut out)?;
    }
    if !r.scale.is_empty() {
        Sweep {
            rows: &r.scale,
            x: |x| x.conns as f64,
            system: |x| &x.system,
            systems: vec!["softoe", "Linux"],
        }
        .draw(&SCALE, dir, &mut out)?;
    }
    if r.spin.iter().any(|x| x.system == "softoe") {
        // A curve per program budget, in the order measured (Linux's row
        // has no budget, and no curve: its figures are in the table).
        let mut systems: Vec<&str> = Vec::new();
        for x in r.spin.iter().filter(|x| x.system == "softoe") {
            if !systems.contains(&x.series.as_str()) {
                systems.push(&x.series);
            }
        }
        Sweep {
            rows: &r.spin,
            x: |x| x.engine_spin_us as f64,
            system: |x| &x.series,
            systems,
        }
        .draw(&SPIN, dir, &mut out)?;
    }
    if !r.latency.is_empty() {
        // The systems in the order they were measured.
        let mut systems: Vec<&str> = Vec::new();
        for l in &r.latency {
            if !systems.contains(&l.system.as_str()) {
                systems.push(&l.system);
            }
        }
        Sweep {
            rows: &r.latency,
            x: |l| l.size as f64,
            system: |l| &l.system,
            systems,
        }
        .draw(&LATENCY, dir, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A report with every sweep the table draws: two coalescing delays,
    /// two connection counts of each system, two systems' ping-pong.
    fn report() -> Report {
        let coalescing = |d: u64| {
            let (p50, p99, o) = (20.0 + d as f64, 40.0 + d as f64, 6.0 + d as f64 / 100.0);
            let f = |x: f64| crate::stats::Figure::of(&[x]).unwrap();
            CoalescingRow {
                delay_us: d,
                rr4_p50_us: p50,
                rr4_p99_us: p99,
                in_gbps: 5.0,
                out_gbps: o,
                figures: [f(p50), f(p99), f(5.0), f(o)],
                repeats: crate::bench::fixtures::repeats(1),
            }
        };
        let scale = |system: &str, conns: usize| ScaleRow {
            system: system.into(),
            conns,
            rps: 1e5 / conns as f64,
            load_p99_us: 100.0,
            load_fairness: 1.0,
            held_p50_us: 30.0 + conns as f64,
            held_p99_us: 60.0 + conns as f64,
            held_p99: None,
            held_quiet_ms: 0.0,
            idle_engine_slices: 0,
            idle_engine_ms: 0.0,
            held_engine_us: 0.0,
            held_engine_slices: 0.0,
            engine_ns_per_rpc: 0.0,
            engine_kib_per_conn: 0.0,
            load_retrans: 0,
            port_drops: 0,
        };
        let latency = |system: &str, size: usize| {
            let p50 = 20.0 + size as f64 / 100.0;
            crate::bench::fixtures::latency(system, size, &[(p50, p50 + 10.0)])
        };
        let spin = |system: &'static str, e: u64, a: u64| super::super::spin::SpinRow {
            system,
            engine_spin_us: e,
            app_spin_us: a,
            rounds: 100,
            p50_us: 30.0 - e as f64 / 10.0,
            p99_us: 60.0,
            p999_us: 90.0,
            app_cpu_us: 5.0,
            engine_cpu_us: 10.0 + e as f64 / 5.0,
            machine_cpu_us: 20.0 + e as f64 / 5.0,
            engine_sleeps: 0.5,
            series: if system == "Linux" {
                String::new()
            } else {
                format!("program ≤ {a} µs")
            },
        };
        Report {
            spin: vec![
                spin("softoe", 0, 0),
                spin("softoe", 50, 0),
                spin("softoe", 0, 30),
                spin("softoe", 50, 30),
                spin("Linux", 0, 0),
            ],
            coalescing: vec![coalescing(0), coalescing(13)],
            scale: vec![
                scale("softoe", 1),
                scale("softoe", 100),
                scale("Linux", 1),
                scale("Linux", 100),
            ],
            latency: vec![
                latency("softoe overlap", 4),
                latency("softoe overlap", 1024),
                latency("Linux", 4),
                latency("Linux", 1024),
            ],
            ..Report::default()
        }
    }

    #[test]
    fn every_sweep_is_drawn_into_its_file() {
        let dir = std::env::temp_dir().join(format!("softoe-plot-test-{}", std::process::id()));
        let out = plots(&report(), &dir).unwrap();
        let names: Vec<String> = out
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "coalescing-latency.svg",
                "coalescing-goodput.svg",
                "scale-latency.svg",
                "scale-throughput.svg",
                "spin-latency.svg",
                "spin-cpu.svg",
                "latency.svg",
                "bandwidth.svg",
                "host-cpu.svg"
            ]
        );
        let spin = std::fs::read_to_string(dir.join("spin-latency.svg")).unwrap();
        for legend in ["program ≤ 0 µs p50", "program ≤ 30 µs p99"] {
            assert!(spin.contains(legend), "{legend} missing");
        }
        let latency = std::fs::read_to_string(dir.join("latency.svg")).unwrap();
        for legend in [
            "softoe overlap p50",
            "softoe overlap p99",
            "Linux p50",
            "Linux p99",
        ] {
            assert!(latency.contains(legend), "{legend} missing");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
