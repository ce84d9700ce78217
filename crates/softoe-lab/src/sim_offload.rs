//! `softoe sim offload SCENARIO`: the papers' offload experiments run on
//! the machine model — Ortiz et al.'s Table I, Fig. 8 and Fig. 3/4,
//! HL-TCP's Fig. 7, and a map of where offload pays — each a table, JSON,
//! CSV and an SVG plot, with LAWS and EMO beside every row.
//!
//! The sweeps themselves are `softoe_sim::machine::scenarios`; this file
//! reads the options, builds the base machine, and prints.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use softoe_sim::machine::scenarios::{
    self, Fig7Summary, MAP_SPEEDS, MAP_TOLERANCE, MapRow, Row, Scenario, Stat, SweepOptions,
};
use softoe_sim::machine::{Calibration, MachineConfig};

use crate::plot::{self, Series};
use crate::sim_machine::{MachineArgs, calibration_source, load_calibration, load_config_over};
use crate::table::Table;
use crate::units::size_exact;

/// Options of `softoe sim offload`.
#[derive(Debug, Args)]
#[command(after_long_help = SCENARIOS_HELP)]
pub struct OffloadArgs {
    /// Which experiment: table1, fig8, fig3, hltcp-fig7 or map (see below).
    #[arg(value_parser = parse_scenario)]
    scenario: Scenario,
    /// A machine file (as `softoe sim predict` reads) whose fields replace
    /// the scenario's paper setup; the sweep still sets its own fields.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    machine: MachineArgs,
    /// Fewer points, shorter runs: seconds in all.
    #[arg(long)]
    quick: bool,
    /// The first seed (a point with loss runs seeds SEED, SEED+1, …).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs per point when the link loses frames, for a 95 % confidence
    /// interval over seeds (mean ± half-width). Without loss a point runs
    /// once: the seed then changes nothing that matters.
    #[arg(long, default_value_t = 5, value_name = "N")]
    reps: u32,
    /// table1: the connections (outstanding requests) of each series.
    /// One is NetPIPE's latency; more load the engine until it saturates.
    #[arg(long, value_delimiter = ',', default_value = "1,8", value_name = "N,N")]
    connections: Vec<u32>,
    /// Print JSON (the rows, the base machine, the calibration's note,
    /// every run's event hash) instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the rows as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Also draw the sweep, LAWS (and EMO) beside it, as an SVG FILE
    /// (fig3 also writes FILE with `-interrupts` before `.svg`).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

const SCENARIOS_HELP: &str = "\
Scenarios (each a sweep of `softoe sim predict` runs):
  table1      Ortiz et al. Table I: request/response latency (4-byte messages,
              1 Gb/s, MTU 9000) with memory delay x1, 2, 4, 6, 10 and without
              offload; one series per --connections value. EMO's unloaded
              latency beside each row.
  fig8        Their Fig. 8: stream throughput by write size (64 B to 64 KiB,
              10 Gb/s, MTU 9000) for an engine at 25, 50, 75 and 100 % of the
              host, and without offload; LAWS's bound beside each row.
  fig3        Their Fig. 3/4: the host CPU's load and the interrupts it takes,
              by write size, with offload and without; LAWS's host load beside.
  hltcp-fig7  HL-TCP Fig. 7: a ping-pong of 256 KiB blocks on 1 Gb/s (MTU 1500,
              engine at 15 %, every interrupt taken: no NAPI) against the
              receive-interrupt delay 0-100 us; the optimum and the steepest
              step beside one frame time (12.3 us) and HL-TCP's 13.31 us. A
              calibration without an interrupt price (a polling engine's)
              gets the model's 1.5 us, and the output says so.
  map         For each write size, the lowest engine speed (0.05-8 x the host)
              at which offload moves at least 99 % of what the host alone
              moves, by bisection; LAWS's break-even beside it.

Examples:
  softoe sim offload table1
  softoe sim offload fig8 --csv fig8.csv --plot fig8.svg
  softoe sim offload map --quick --json
  softoe sim offload table1 --set link.loss=0.001 --reps 5";

fn parse_scenario(s: &str) -> Result<Scenario, String> {
    Scenario::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
        format!("unknown scenario '{s}': choose one of {}", names.join(", "))
    })
}

/// The scenario's paper setup, then the file's fields, then the `--set`
/// changes, validated.
fn base_config(s: Scenario, file: Option<&Path>, set: &[String]) -> Result<MachineConfig> {
    let base = toml::Table::try_from(s.paper_base()).context("the scenario's setup")?;
    load_config_over(base, file, set)
}

/// What a scenario produced.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Rows {
    Points(Vec<Row>),
    Map(Vec<MapRow>),
}

impl Rows {
    fn hashes(&self) -> Vec<&str> {
        match self {
            Rows::Points(rs) => rs
                .iter()
                .flat_map(|r| r.runs.iter().map(|x| x.event_hash.as_str()))
                .collect(),
            Rows::Map(rs) => rs
                .iter()
                .flat_map(|r| r.runs.iter().map(|x| x.event_hash.as_str()))
                .collect(),
        }
    }

    fn all_intact(&self) -> bool {
        match self {
            Rows::Points(rs) => rs.iter().all(Row::intact),
            Rows::Map(rs) => rs.iter().all(|r| r.runs.iter().all(|x| x.intact)),
        }
    }
}

/// One hash over every run's event log, in order (FNV-1a).
fn sweep_hash(hashes: &[&str]) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in hashes.iter().flat_map(|s| s.bytes().chain([b'\n'])) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    scenario: &'static str,
    config: &'a MachineConfig,
    calibration: &'a str,
    seed: u64,
    reps: u32,
    quick: bool,
    rows: &'a Rows,
    #[serde(skip_serializing_if = "Option::is_none")]
    fig7: Option<Fig7Summary>,
    /// Fig. 7: the interrupt price the sweep assumed (ns of the host), when
    /// the calibration had none.
    #[serde(skip_serializing_if = "Option::is_none")]
    fig7_assumed_interrupt_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupt_decrease: Option<Vec<(u32, f64)>>,
    runs: usize,
    sweep_hash: String,
    wall_seconds: f64,
}

/// Runs `softoe sim offload`.
pub fn offload_cmd(a: &OffloadArgs) -> Result<()> {
    if a.reps == 0 || a.reps > 1000 {
        bail!("--reps must be within 1..=1000, got {}", a.reps);
    }
    if a.connections.is_empty() || a.connections.iter().any(|&c| !(1..=1024).contains(&c)) {
        bail!("--connections takes counts from 1 to 1024, e.g. --connections 1,8");
    }
    if let Some(p) = &a.plot
        && p.extension().and_then(|e| e.to_str()) != Some("svg")
    {
        bail!(
            "--plot writes SVG: give a file name ending in .svg, not {}",
            p.display()
        );
    }
    let base = base_config(a.scenario, a.config.as_deref(), &a.machine.set)?;
    let cal = load_calibration(a.machine.calibration.as_deref())?;
    let opts = SweepOptions {
        quick: a.quick,
        reps: a.reps,
        seed: a.seed,
        connections: a.connections.clone(),
    };
    let wall = std::time::Instant::now();
    let rows = run(a.scenario, &base, &cal, &opts, a.json)?;
    let wall = wall.elapsed().as_secs_f64();
    let note = calibration_source(&cal);
    let hashes = rows.hashes();
    let report = Report {
        scenario: a.scenario.name(),
        config: &base,
        calibration: note,
        seed: a.seed,
        reps: a.reps,
        quick: a.quick,
        rows: &rows,
        fig7: match (&rows, a.scenario) {
            (Rows::Points(rs), Scenario::HltcpFig7) => scenarios::fig7_summary(rs, &base),
            _ => None,
        },
        fig7_assumed_interrupt_ns: match scenarios::fig7_interrupt(&cal) {
            (c, true) if a.scenario == Scenario::HltcpFig7 => Some(c.interrupt.c0),
            _ => None,
        },
        interrupt_decrease: match (&rows, a.scenario) {
            (Rows::Points(rs), Scenario::Fig3) => Some(scenarios::interrupt_decrease(rs)),
            _ => None,
        },
        runs: hashes.len(),
        sweep_hash: sweep_hash(&hashes),
        wall_seconds: wall,
    };
    let text = if a.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        render(a.scenario, &report, &base)
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(e).context("writing to standard output");
        }
        _ => {}
    }
    if let Some(p) = &a.csv {
        std::fs::write(p, csv(&rows)).with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.plot {
        draw(a.scenario, &rows, &base, p)?;
    }
    if !rows.all_intact() {
        bail!(
            "a run did not finish, or delivered bytes that were not the ones sent (see `complete`/`intact` in --json)"
        );
    }
    Ok(())
}

fn run(
    s: Scenario,
    base: &MachineConfig,
    cal: &Calibration,
    opts: &SweepOptions,
    quiet: bool,
) -> Result<Rows> {
    let pb = if quiet {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::new(scenarios::planned_runs(s, base, opts));
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} runs, {elapsed}")
        {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_message(format!("softoe sim offload {}", s.name()));
        pb
    };
    let mut tick = || pb.inc(1);
    let err = |e| anyhow!("simulating: {e}");
    let rows = match s {
        Scenario::Table1 => {
            Rows::Points(scenarios::table1(base, cal, opts, &mut tick).map_err(err)?)
        }
        Scenario::Fig8 => Rows::Points(scenarios::fig8(base, cal, opts, &mut tick).map_err(err)?),
        Scenario::Fig3 => Rows::Points(scenarios::fig3(base, cal, opts, &mut tick).map_err(err)?),
        Scenario::HltcpFig7 => {
            Rows::Points(scenarios::hltcp_fig7(base, cal, opts, &mut tick).map_err(err)?)
        }
        Scenario::Map => Rows::Map(scenarios::map(base, cal, opts, &mut tick).map_err(err)?),
    };
    pb.finish_and_clear();
    Ok(rows)
}

/// `12.3`, or `12.3 ± 0.4` with an interval.
fn stat(s: &Stat, scale: f64, digits: usize) -> String {
    match s.ci95 {
        Some(h) => format!("{:.*} ± {:.*}", digits, s.mean * scale, digits, h * scale),
        None => format!("{:.*}", digits, s.mean * scale),
    }
}

fn opt_stat(s: Option<&Stat>, scale: f64, digits: usize) -> String {
    s.map_or_else(|| "-".into(), |s| stat(s, scale, digits))
}

fn size(m: u32) -> String {
    size_exact(u64::from(m))
}

fn ratio(sim: f64, model: Option<f64>) -> String {
    match model {
        Some(m) if m > 0.0 => format!("{:.2}", sim / m),
        _ => "-".into(),
    }
}

/// A table: a header line, a rule, the lines, columns right-aligned to
/// their widest cell, two spaces apart.
fn table(head: &[&str], lines: &[Vec<String>]) -> String {
    let mut t = Table::new().gap(2).rule().rights(head);
    for l in lines {
        t.row(l.iter().cloned());
    }
    t.render()
}

fn heading(s: Scenario, r: &Report<'_>, c: &MachineConfig) -> String {
    let w = &c.workload;
    let what = match s {
        Scenario::Table1 => format!(
            "latency of {} B request/response (one way = half the round trip) by memory delay",
            w.message
        ),
        Scenario::Fig8 => "stream throughput by write size and engine speed".to_string(),
        Scenario::Fig3 => "host CPU load and interrupts by write size".to_string(),
        Scenario::HltcpFig7 => format!(
            "{} ping-pong (NetPIPE-like) by receive-interrupt delay, engine at {} × the host",
            size(w.message),
            c.engine.speed
        ),
        Scenario::Map => "break-even engine speed by write size".to_string(),
    };
    format!(
        "softoe sim offload {}: {what}\n  link {} Gb/s, {} µs, MTU {}, loss {}; NIC tso {} csum {} gro {}{}; bus {} Gb/s; \
         direction {}; seed {}{}; calibration: {}\n",
        s.name(),
        c.link.gbps,
        c.link.delay_us,
        c.link.mtu,
        c.link.loss,
        c.nic.tso,
        c.nic.csum,
        c.nic.gro,
        if c.nic.napi { "" } else { ", no NAPI" },
        c.bus.gbps,
        scenarios::direction_name(c),
        r.seed,
        if c.link.loss > 0.0 {
            format!(", {} runs per point (mean ± 95 % CI)", r.reps)
        } else {
            String::new()
        },
        // The calibration by its first sentence (command, date, machine);
        // the JSON carries the whole note.
        r.calibration
            .split_once(". ")
            .map_or(r.calibration, |(first, _)| first)
    )
}

fn render(s: Scenario, r: &Report<'_>, c: &MachineConfig) -> String {
    let mut o = heading(s, r, c);
    o.push('\n');
    match r.rows {
        Rows::Points(rows) => o += &points_table(s, rows),
        Rows::Map(rows) => o += &map_table(rows),
    }
    if let Some(f) = &r.fig7 {
        let _ = writeln!(
            o,
            "\nOptimum: {} µs ({:.1} Mb/s; {:.1} Mb/s with no delay; throughput varies {:.2} % over the sweep).\n\
             Interrupts fall to ≤ 60 % of no delay's from {} on.\n\
             One frame time at {} Gb/s ({} B on the wire): {:.2} µs; HL-TCP's optimum: {} µs.",
            f.optimum_us,
            f.optimum_bps / 1e6,
            f.zero_bps / 1e6,
            f.spread * 100.0,
            f.knee_us
                .map_or_else(|| "nowhere in the sweep".into(), |k| format!("{k} µs")),
            c.link.gbps,
            c.link.mtu + 38,
            f.frame_time_us,
            f.paper_optimum_us
        );
        if let Some((at, gain)) = f.steepest {
            let _ = writeln!(
                o,
                "Steepest step: {at} µs (+{:.1} % over the delay before){}.",
                gain * 100.0,
                if at > f.frame_time_us && at - 1.0 <= f.frame_time_us {
                    ": the first delay longer than one frame time, where one interrupt takes two \
                     back-to-back frames"
                } else {
                    ""
                }
            );
        }
        if let Some(ns) = r.fig7_assumed_interrupt_ns {
            let _ = writeln!(
                o,
                "Interrupts priced at {ns:.0} ns of the host (the model's default): the \
                 calibration has none (softoe's engine polls)."
            );
        }
    }
    if let Some(d) = &r.interrupt_decrease {
        let cells: Vec<String> = d
            .iter()
            .map(|(m, x)| format!("{} {:.0} %", size(*m), x * 100.0))
            .collect();
        let _ = writeln!(
            o,
            "\nDecrease in the host's interrupts with offload (Fig. 4): {}",
            cells.join(", ")
        );
    }
    let _ = writeln!(
        o,
        "\n{} runs in {:.1} s; sweep event-log hash {} (same options, same hash).",
        r.runs, r.wall_seconds, r.sweep_hash
    );
    o
}

fn first_hash(r: &Row) -> String {
    r.runs
        .first()
        .map_or_else(String::new, |x| x.event_hash.clone())
}

fn points_table(s: Scenario, rows: &[Row]) -> String {
    match s {
        Scenario::Table1 => table1_table(rows),
        Scenario::Fig8 | Scenario::Fig3 => throughput_table(rows),
        Scenario::HltcpFig7 => coalescing_table(rows),
        Scenario::Map => String::new(),
    }
}

/// HL-TCP Table 1: latency and CPU per round trip, beside EMO's.
fn table1_table(rows: &[Row]) -> String {
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.series.clone(),
                if r.offload {
                    format!("×{}", r.memory_delay)
                } else {
                    "-".into()
                },
                opt_stat(r.latency_p50_us.as_ref(), 1.0, 2),
                opt_stat(r.latency_p99_us.as_ref(), 1.0, 2),
                r.emo
                    .map_or_else(|| "-".into(), |e| format!("{:.2}", e.latency_us)),
                stat(&r.host_cpu, 100.0, 1),
                stat(&r.engine_cpu, 100.0, 1),
                r.emo
                    .map_or_else(|| "-".into(), |e| format!("{:.2}", e.host_us_per_rtt)),
                format!(
                    "{:.2}",
                    r.host_cpu.mean * 1e6 / r.throughput_bps.mean.max(1e-9)
                        * 2.0
                        * 8.0
                        * f64::from(r.message)
                ),
                stat(&r.throughput_bps, 1e-6, 2),
                first_hash(r),
            ]
        })
        .collect();
    table(
        &[
            "series",
            "memory",
            "p50 µs",
            "p99 µs",
            "EMO µs",
            "host %",
            "engine %",
            "EMO host µs/rt",
            "host µs/rt",
            "Mb/s",
            "event log",
        ],
        &lines,
    )
}

/// Fig. 3 and Fig. 8: throughput and CPU by write size, beside LAWS.
fn throughput_table(rows: &[Row]) -> String {
    let laws_bps = |r: &Row| r.laws.map(|l| l.bps);
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.series.clone(),
                size(r.message),
                stat(&r.throughput_bps, 1e-9, 3),
                r.laws.map_or_else(
                    || "-".into(),
                    |l| format!("{:.3} ({})", l.bps / 1e9, l.limit),
                ),
                ratio(r.throughput_bps.mean, laws_bps(r)),
                stat(&r.host_cpu, 100.0, 1),
                r.laws
                    .map_or_else(|| "-".into(), |l| format!("{:.1}", l.host_cpu * 100.0)),
                stat(&r.engine_cpu, 100.0, 1),
                stat(&r.host_interrupts_per_sec, 1.0, 0),
                stat(&r.interrupts_per_sec, 1.0, 0),
                first_hash(r),
            ]
        })
        .collect();
    table(
        &[
            "series",
            "write",
            "Gb/s",
            "LAWS Gb/s",
            "sim÷LAWS",
            "host %",
            "LAWS host %",
            "engine %",
            "host irq/s",
            "stack irq/s",
            "event log",
        ],
        &lines,
    )
}

/// HL-TCP Fig. 7: by interrupt coalescing delay.
fn coalescing_table(rows: &[Row]) -> String {
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                format!("{}", r.coalesce_us),
                r.coalesce_frames.to_string(),
                stat(&r.throughput_bps, 1e-6, 1),
                r.laws.map_or_else(
                    || "-".into(),
                    |l| format!("{:.1} ({})", l.bps / 1e6, l.limit),
                ),
                opt_stat(r.latency_p50_us.as_ref(), 1.0, 1),
                stat(&r.engine_cpu, 100.0, 1),
                stat(&r.host_cpu, 100.0, 1),
                stat(&r.interrupts_per_sec, 1.0, 0),
                first_hash(r),
            ]
        })
        .collect();
    table(
        &[
            "delay µs",
            "frames",
            "Mb/s",
            "LAWS Mb/s",
            "p50 µs",
            "engine %",
            "host %",
            "irq/s",
            "event log",
        ],
        &lines,
    )
}

fn speed(s: Option<f64>) -> String {
    match s {
        None => format!("> {}", MAP_SPEEDS.1),
        Some(x) if x <= MAP_SPEEDS.0 => format!("≤ {}", MAP_SPEEDS.0),
        Some(x) => format!("{x:.3}"),
    }
}

fn map_table(rows: &[MapRow]) -> String {
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                size(r.message),
                format!("{:.3}", r.no_offload_bps / 1e9),
                r.laws_no_offload_bps
                    .map_or_else(|| "-".into(), |b| format!("{:.3}", b / 1e9)),
                speed(r.break_even_speed),
                r.break_even_bps
                    .map_or_else(|| "-".into(), |b| format!("{:.3}", b / 1e9)),
                speed(r.laws_break_even_speed),
                r.runs.len().to_string(),
                sweep_hash(
                    &r.runs
                        .iter()
                        .map(|x| x.event_hash.as_str())
                        .collect::<Vec<_>>(),
                ),
            ]
        })
        .collect();
    let mut o = table(
        &[
            "write",
            "no offload Gb/s",
            "LAWS Gb/s",
            "break-even speed",
            "offload Gb/s there",
            "LAWS break-even",
            "runs",
            "event log",
        ],
        &lines,
    );
    let _ = writeln!(
        o,
        "\nBreak-even: the lowest engine speed (× the host's) at which offload moves ≥ {:.0} % of \
         the host alone; searched within {}–{} on a log scale.",
        MAP_TOLERANCE * 100.0,
        MAP_SPEEDS.0,
        MAP_SPEEDS.1
    );
    o
}

fn csv_stat(s: Option<&Stat>) -> [String; 2] {
    match s {
        Some(s) => [
            format!("{}", s.mean),
            s.ci95.map_or_else(String::new, |h| h.to_string()),
        ],
        None => [String::new(), String::new()],
    }
}

fn csv(rows: &Rows) -> String {
    let mut o = String::new();
    match rows {
        Rows::Points(rs) => {
            o += "series,x,offload,engine_speed,memory_delay,message,connections,coalesce_us,coalesce_frames,\
                  throughput_bps,throughput_ci95,latency_p50_us,latency_p50_ci95,latency_p99_us,latency_p99_ci95,\
                  host_cpu,host_cpu_ci95,engine_cpu,engine_cpu_ci95,interrupts_per_sec,interrupts_ci95,\
                  host_interrupts_per_sec,host_interrupts_ci95,laws_bps,laws_limit,laws_host_cpu,\
                  emo_latency_us,emo_host_us_per_rtt,runs,event_hashes\n";
            for r in rs {
                let mut cells = vec![
                    format!("\"{}\"", r.series),
                    r.x.to_string(),
                    r.offload.to_string(),
                    r.engine_speed.to_string(),
                    r.memory_delay.to_string(),
                    r.message.to_string(),
                    r.connections.to_string(),
                    r.coalesce_us.to_string(),
                    r.coalesce_frames.to_string(),
                ];
                for s in [
                    Some(&r.throughput_bps),
                    r.latency_p50_us.as_ref(),
                    r.latency_p99_us.as_ref(),
                    Some(&r.host_cpu),
                    Some(&r.engine_cpu),
                    Some(&r.interrupts_per_sec),
                    Some(&r.host_interrupts_per_sec),
                ] {
                    cells.extend(csv_stat(s));
                }
                cells.push(r.laws.map_or_else(String::new, |l| l.bps.to_string()));
                cells.push(r.laws.map_or_else(String::new, |l| l.limit.to_string()));
                cells.push(r.laws.map_or_else(String::new, |l| l.host_cpu.to_string()));
                cells.push(r.emo.map_or_else(String::new, |e| e.latency_us.to_string()));
                cells.push(
                    r.emo
                        .map_or_else(String::new, |e| e.host_us_per_rtt.to_string()),
                );
                cells.push(r.runs.len().to_string());
                let hs: Vec<&str> = r.runs.iter().map(|x| x.event_hash.as_str()).collect();
                cells.push(hs.join(" "));
                o += &cells.join(",");
                o.push('\n');
            }
        }
        Rows::Map(rs) => {
            o += "message,no_offload_bps,laws_no_offload_bps,break_even_speed,break_even_bps,\
                  laws_break_even_speed,runs,event_hashes\n";
            for r in rs {
                let opt = |x: Option<f64>| x.map_or_else(String::new, |v| v.to_string());
                let hs: Vec<&str> = r.runs.iter().map(|x| x.event_hash.as_str()).collect();
                let _ = writeln!(
                    o,
                    "{},{},{},{},{},{},{},{}",
                    r.message,
                    r.no_offload_bps,
                    opt(r.laws_no_offload_bps),
                    opt(r.break_even_speed),
                    opt(r.break_even_bps),
                    opt(r.laws_break_even_speed),
                    r.runs.len(),
                    hs.join(" ")
                );
            }
        }
    }
    o
}

/// The rows of `series`, as (x, y) points sorted by x.
fn curve(rows: &[Row], name: &str, f: impl Fn(&Row) -> Option<(f64, f64)>) -> Vec<(f64, f64)> {
    let mut p: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.series == name)
        .filter_map(f)
        .collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    p
}

/// The series' names in first-seen order.
fn names(rows: &[Row]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rows {
        if !v.contains(&r.series) {
            v.push(r.series.clone());
        }
    }
    v
}

fn draw(s: Scenario, rows: &Rows, c: &MachineConfig, path: &Path) -> Result<()> {
    let title = format!("softoe sim offload {}", s.name());
    match rows {
        Rows::Map(rs) => draw_map(&title, rs, path),
        Rows::Points(rs) => match s {
            Scenario::Table1 => draw_table1(&title, rs, path),
            Scenario::Fig8 | Scenario::Fig3 => draw_fig8_fig3(s, &title, rs, c, path),
            Scenario::HltcpFig7 => draw_hltcp_fig7(&title, rs, path),
            Scenario::Map => Ok(()),
        },
    }
}

/// The map: break-even engine speed by write size, simulated and LAWS.
fn draw_map(title: &str, rs: &[MapRow], path: &Path) -> Result<()> {
    let sim: Vec<(f64, f64)> = rs
        .iter()
        .filter_map(|r| Some((f64::from(r.message), r.break_even_speed?)))
        .collect();
    let laws: Vec<(f64, f64)> = rs
        .iter()
        .filter_map(|r| Some((f64::from(r.message), r.laws_break_even_speed?)))
        .collect();
    plot::log_log(
        path,
        &format!("{title}: break-even engine speed"),
        "write size, bytes",
        "engine speed ÷ host speed",
        &[
            Series {
                name: "simulated".into(),
                points: sim,
            },
            Series {
                name: "LAWS".into(),
                points: laws,
            },
        ],
    )
}

/// Table 1: one-way latency p50 by memory delay, with EMO's.
fn draw_table1(title: &str, rs: &[Row], path: &Path) -> Result<()> {
    let mut series = Vec::new();
    for n in names(rs) {
        let offload = rs.iter().any(|r| r.series == n && r.offload);
        // The kernel path is one figure: a flat line across.
        let at = |r: &Row, y: f64| -> Vec<(f64, f64)> {
            if offload {
                vec![(r.memory_delay, y)]
            } else {
                vec![(1.0, y), (10.0, y)]
            }
        };
        let pts: Vec<(f64, f64)> = rs
            .iter()
            .filter(|r| r.series == n)
            .flat_map(|r| at(r, r.latency_p50_us.map_or(f64::NAN, |s| s.mean)))
            .collect();
        let emo: Vec<(f64, f64)> = rs
            .iter()
            .filter(|r| r.series == n)
            .flat_map(|r| at(r, r.emo.map_or(f64::NAN, |e| e.latency_us)))
            .collect();
        series.push(Series {
            name: n.clone(),
            points: pts,
        });
        series.push(Series {
            name: format!("EMO, {n}"),
            points: emo,
        });
    }
    plot::linear(
        path,
        &format!("{title}: one-way latency p50 by memory delay"),
        "memory delay ×",
        "µs",
        &series,
    )
}

/// Fig. 8 (throughput) or Fig. 3 (host CPU, and its interrupts) by write size, with LAWS.
fn draw_fig8_fig3(
    s: Scenario,
    title: &str,
    rs: &[Row],
    c: &MachineConfig,
    path: &Path,
) -> Result<()> {
    let mut series = Vec::new();
    let fig3 = s == Scenario::Fig3;
    for n in names(rs) {
        let y = |r: &Row| {
            if fig3 {
                r.host_cpu.mean * 100.0
            } else {
                r.throughput_bps.mean / 1e9
            }
        };
        let ly = |r: &Row| {
            r.laws.map(|l| {
                if fig3 {
                    l.host_cpu * 100.0
                } else {
                    l.bps / 1e9
                }
            })
        };
        series.push(Series {
            name: n.clone(),
            points: curve(rs, &n, |r| Some((f64::from(r.message), y(r)))),
        });
        series.push(Series {
            name: format!("LAWS, {n}"),
            points: curve(rs, &n, |r| Some((f64::from(r.message), ly(r)?))),
        });
    }
    let (what, unit) = if fig3 {
        ("host CPU load", "host CPU, %")
    } else {
        ("stream throughput", "Gb/s")
    };
    plot::log_log(
        path,
        &format!("{title}: {what} by write size, {} Gb/s", c.link.gbps),
        "write size, bytes",
        unit,
        &series,
    )?;
    if fig3 {
        let irq_path = sibling(path, "-interrupts");
        let irq: Vec<Series> = names(rs)
            .into_iter()
            .map(|n| Series {
                points: curve(rs, &n, |r| {
                    Some((f64::from(r.message), r.host_interrupts_per_sec.mean))
                }),
                name: n,
            })
            .collect();
        plot::log_log(
            &irq_path,
            &format!("{title}: interrupts the host CPU takes"),
            "write size, bytes",
            "interrupts per second",
            &irq,
        )?;
    }
    Ok(())
}

/// HL-TCP Fig. 7: throughput by receive-interrupt delay, with LAWS.
fn draw_hltcp_fig7(title: &str, rs: &[Row], path: &Path) -> Result<()> {
    let mut series = Vec::new();
    for n in names(rs) {
        series.push(Series {
            name: format!("{n}, simulated"),
            points: curve(rs, &n, |r| {
                Some((r.coalesce_us, r.throughput_bps.mean / 1e6))
            }),
        });
        series.push(Series {
            name: format!("LAWS, {n}"),
            points: curve(rs, &n, |r| Some((r.coalesce_us, r.laws?.bps / 1e6))),
        });
    }
    plot::linear(
        path,
        &format!("{title}: throughput by receive-interrupt delay"),
        "receive-interrupt delay, µs",
        "Mb/s",
        &series,
    )
}

/// `dir/name.svg` → `dir/name{suffix}.svg`.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{stem}{suffix}.svg"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_setup_then_the_file_then_the_changes() {
        let dir = std::env::temp_dir().join(format!("softoe-offload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("m.toml");
        std::fs::write(&f, "[link]\ngbps = 2.5\n").unwrap();
        let c = base_config(Scenario::Table1, Some(&f), &["engine.speed=0.5".into()]).unwrap();
        // The file's field replaces the setup's; the setup's others stay.
        assert_eq!((c.link.gbps, c.link.mtu), (2.5, 9000));
        assert_eq!(c.engine.speed, 0.5);
        let err = |s: &str| {
            format!(
                "{:#}",
                base_config(Scenario::Map, None, &[s.into()]).unwrap_err()
            )
        };
        assert!(err("engine.sped=1").contains("sped"));
        assert!(err("speed=1").contains("SECTION.FIELD=VALUE"));
        assert!(err("engine.speed=0").contains("[engine] speed"));
        std::fs::write(&f, "[link\n").unwrap();
        let e = base_config(Scenario::Map, Some(&f), &[]).unwrap_err();
        assert!(format!("{e:#}").contains("not valid TOML"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unknown_scenarios_are_named_with_the_choices() {
        let e = parse_scenario("table2").unwrap_err();
        assert!(e.contains("table2") && e.contains("hltcp-fig7"), "{e}");
    }

    #[test]
    fn tables_align_and_csv_has_one_width() {
        let t = table(&["a", "long head"], &[vec!["xxxxx".into(), "1".into()]]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "    a  long head");
        assert_eq!(lines[2], "xxxxx          1");
        let base = Scenario::Fig3.paper_base();
        let opts = SweepOptions {
            quick: true,
            ..SweepOptions::default()
        };
        let rows = Rows::Points(
            scenarios::fig3(&base, &Calibration::default(), &opts, &mut || {}).unwrap(),
        );
        let text = csv(&rows);
        let widths: Vec<usize> = text.lines().map(|l| l.split(',').count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "{text}");
        assert_eq!(widths.len(), 1 + 2 * scenarios::message_sizes(true).len());
        assert_eq!(sweep_hash(&rows.hashes()), sweep_hash(&rows.hashes()));
        assert_ne!(sweep_hash(&["a"]), sweep_hash(&["b"]));
    }
}
