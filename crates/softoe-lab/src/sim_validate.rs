//! `softoe sim validate`: the model's predictions beside the real engine's
//! measurements, configuration by configuration, with the error table
//! issue 17's blind validation asks for.
//!
//! Each machine file is predicted by `softoe sim predict`'s model with the
//! chosen calibration, then measured on the real engine configured the same
//! way (`softoe bench --emulate`'s testbed and emulation), `--reps` times.
//! The table gives, per configuration, predicted and measured throughput,
//! p50 latency (request/response) and host CPU, and their errors; the
//! summary gives the mean and worst throughput errors, the p50 errors, the
//! largest host-CPU difference, and whether the model picks the same
//! winner (offload or not) as the measurement for every pair of files that
//! differ only in `host.offload` — judged where the measured gap exceeds
//! twice the run-to-run spread. Configurations used to calibrate should not
//! be among them: the point is to predict what the calibration did not see.
//!
//! The testbed cannot emulate three things a machine file may say: its far
//! end is a Linux program on the same machine, its path is a veth with no
//! delay, and its engine coalesces by waiting after a turn's first frame
//! for up to a batch (64 frames). So each file is predicted as the testbed
//! runs it (`peer.model = "testbed"`, `link.delay_us = 0`, and with a
//! coalescing timer `nic.coalesce_frames = 64`) unless `--as-written` asks
//! for the file as it stands; the table's first line says which.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use softoe_sim::machine::{MachineConfig, PeerModel, WorkloadKind, predict};

use crate::bench::emulate::{Measured, Repeated, measure, plan, work_of};
use crate::bench::repeat::{Repeats, interleaved};
use crate::conditions::{Conditions, RowBusy, watch};
use crate::sim_machine::{MachineArgs, calibration_source, load_calibration, load_config};
use crate::stats::{Estimate, Figure, StopRule, Stopped};
use crate::table::Table;
use crate::units::{gbps_bare, pct};

/// Options of `softoe sim validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Machine files (as `softoe sim predict` reads), or directories whose
    /// `*.toml` files are taken in name order.
    #[arg(required = true, value_name = "CONFIG")]
    configs: Vec<PathBuf>,
    #[command(flatten)]
    machine: MachineArgs,
    /// Measurements of each configuration at least (default 5, 2 with
    /// --quick): the table shows their median and its interval, and their
    /// spread decides where a winner can be called. A file is measured
    /// again until the interval of its throughput (and p50) median is
    /// within --width, or --max-reps or --file-secs is reached.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    reps: Option<u32>,
    /// Measurements of each configuration at most (default 15, 3 with
    /// --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    max_reps: Option<u32>,
    /// The interval's half-width that ends a file's repeats, percent of
    /// its median (default 3).
    #[arg(long, value_name = "PERCENT", default_value_t = 3.0)]
    width: f64,
    /// Seconds after which a file starts no new measurement (default 180).
    #[arg(long, value_name = "SECS", default_value_t = 180.0)]
    file_secs: f64,
    /// Small workloads (16 MiB streams, 1,000 round trips), predicted the
    /// same size: a smoke run, not a validation.
    #[arg(long)]
    quick: bool,
    /// Pin the real engine to this core.
    #[arg(long)]
    engine_cpu: Option<usize>,
    /// Predict each file as written. By default the prediction describes
    /// the testbed that measures it: its far end is a Linux program on the
    /// same machine (`peer.model = "testbed"`), its path a veth without
    /// delay (`link.delay_us = 0`), and its engine's receive coalescing
    /// waits for up to 64 frames (`nic.coalesce_frames = 64` when
    /// `coalesce_us` is set), whatever the file says, since the testbed
    /// cannot emulate otherwise.
    #[arg(long)]
    as_written: bool,
    /// Print JSON (every row and the summary) instead of tables.
    #[arg(long)]
    json: bool,
    /// `--require-quiet` (the others, `--pin-*`, are the bench's and are
    /// refused here: the model places the program and the client).
    #[command(flatten)]
    conditions: crate::conditions::ConditionArgs,
}

/// The targets of issue 17's validation.
const THROUGHPUT_MAE: f64 = 0.10;
const THROUGHPUT_WORST: f64 = 0.20;
const P50_MAE: f64 = 0.15;
const HOST_CPU_POINTS: f64 = 5.0;

/// One configuration, predicted and measured.
#[derive(Debug, Serialize)]
struct Row {
    /// The file's name without `.toml`.
    name: String,
    file: PathBuf,
    /// What it runs, in a few words.
    what: String,
    offload: bool,
    predicted_bps: f64,
    /// The measurements' median.
    measured_bps: f64,
    /// Each measurement's throughput, in order.
    measured_runs_bps: Vec<f64>,
    /// (max − min) ÷ median of the measured throughputs.
    spread: f64,
    /// The measured throughput's median with its interval.
    measured_figure: Figure,
    /// The interval's larger half-width ÷ the median.
    half_width: f64,
    /// How many runs, and why they stopped.
    repeats: Repeats,
    /// What else ran while the file was measured.
    busy: Option<RowBusy>,
    /// (predicted − measured) ÷ measured.
    throughput_error: f64,
    predicted_p50_us: Option<f64>,
    measured_p50_us: Option<f64>,
    p50_error: Option<f64>,
    /// Host CPU, percent of one core.
    predicted_host_cpu: f64,
    measured_host_cpu: f64,
    /// Predicted − measured, percentage points.
    host_cpu_points: f64,
    /// The measurement as `softoe bench --emulate --json` gives it (the
    /// median-throughput run).
    measured: Measured,
}

/// A pair of files that differ only in `host.offload`.
#[derive(Debug, Serialize)]
struct Pair {
    offload: String,
    linux: String,
    /// Measured offload ÷ Linux throughput.
    measured_ratio: f64,
    predicted_ratio: f64,
    /// Whether the measured gap exceeds twice the larger spread.
    decided: bool,
    agree: bool,
}

#[derive(Debug, Serialize)]
struct Summary {
    configurations: usize,
    throughput_mae: f64,
    throughput_worst: f64,
    p50_mae: Option<f64>,
    host_cpu_worst_points: f64,
    pairs: Vec<Pair>,
    throughput_mae_met: bool,
    throughput_worst_met: bool,
    p50_mae_met: Option<bool>,
    host_cpu_met: bool,
    winners_met: bool,
    /// Configurations whose predicted throughput lies within the measured
    /// runs' range (min to max).
    within_measured_range: usize,
    /// The measurements' own spread, (max − min) ÷ median, averaged over
    /// the configurations: how far apart two runs of one file land.
    mean_spread: f64,
    /// The throughput medians' interval half-widths, averaged: how sure
    /// each measured figure is.
    mean_half_width: f64,
    /// Files whose repeats ended with every interval within the width.
    converged: usize,
    /// Files measured while the machine was not quiet.
    not_quiet: usize,
}

#[derive(Serialize)]
struct Report<'a> {
    calibration: &'a str,
    /// How the files were predicted (as the testbed runs them, or as
    /// written).
    predicted_as: &'a str,
    quick: bool,
    rule: StopRule,
    conditions: &'a Conditions,
    rows: &'a [Row],
    summary: &'a Summary,
}

/// `cfg` as the testbed runs it: the far end a Linux program on the same
/// machine, the path a veth without delay, and receive coalescing as the
/// engine does it — after a turn's first frame it waits `coalesce_us` for
/// up to a batch of frames (`softoe bench --emulate` says so), where a
/// file's `coalesce_frames = 1` would interrupt at the first frame and
/// leave the timer nothing to do.
fn as_testbed(cfg: &MachineConfig) -> MachineConfig {
    let mut c = *cfg;
    c.peer.model = PeerModel::Testbed;
    c.link.delay_us = 0.0;
    if c.host.offload && c.nic.coalesce_us > 0.0 {
        c.nic.coalesce_frames = engine_batch();
    }
    c
}

/// The most frames the real engine takes in one turn.
fn engine_batch() -> u32 {
    u32::try_from(softoe_engine::EngineConfig::default().rx_batch).unwrap_or(u32::MAX)
}

/// What the table's first line says of how the files were predicted.
fn predicted_as(as_written: bool) -> &'static str {
    if as_written {
        "as written"
    } else {
        "as the testbed runs them (peer.model = \"testbed\", link.delay_us = 0, and with \
         receive coalescing the engine's nic.coalesce_frames = 64; --as-written predicts the \
         files as they are)"
    }
}

/// The machine files `paths` name (directories: their `*.toml`, sorted).
fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "toml"))
                .collect();
            if v.is_empty() {
                bail!("{} holds no .toml machine file", p.display());
            }
            v.sort();
            out.extend(v);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn name_of(p: &Path) -> String {
    p.file_stem()
        .map_or_else(|| p.display().to_string(), |s| s.to_string_lossy().into())
}

fn what(cfg: &MachineConfig) -> String {
    let w = &cfg.workload;
    let side = if cfg.host.offload {
        let mut s = format!("engine ×{}", cfg.engine.speed);
        if cfg.memory.delay != 1.0 {
            s.push_str(&format!(", memory ×{}", cfg.memory.delay));
        }
        if cfg.nic.coalesce_us > 0.0 {
            s.push_str(&format!(", coalesce {} µs", cfg.nic.coalesce_us));
        }
        s
    } else {
        "Linux".to_string()
    };
    let kind = match w.kind {
        WorkloadKind::Stream => format!(
            "stream {} {} B",
            format!("{:?}", w.direction).to_lowercase(),
            w.message
        ),
        WorkloadKind::Rr => format!("rr {} B", w.message),
    };
    let conns = if w.connections > 1 {
        format!(" ×{}", w.connections)
    } else {
        String::new()
    };
    format!("{kind}{conns}, {side}")
}

/// The configuration with everything that does not matter without offload
/// (the engine, memory delay, the engine's coalescing) set to defaults, and
/// `host.offload` off: two files are a pair if these agree.
fn without_offload(cfg: &MachineConfig) -> MachineConfig {
    let d = MachineConfig::default();
    let mut c = *cfg;
    c.host.offload = false;
    c.engine = d.engine;
    c.memory = d.memory;
    c
}

/// The offload/Linux pairs among `rows` (by their configurations).
fn pairs(rows: &[Row], cfgs: &[MachineConfig]) -> Vec<Pair> {
    let mut out = Vec::new();
    for (i, a) in rows.iter().enumerate() {
        if !a.offload {
            continue;
        }
        for (j, b) in rows.iter().enumerate() {
            if b.offload || without_offload(&cfgs[i]) != without_offload(&cfgs[j]) {
                continue;
            }
            let measured_ratio = a.measured_bps / b.measured_bps.max(1.0);
            let predicted_ratio = a.predicted_bps / b.predicted_bps.max(1.0);
            let noise = a.spread.max(b.spread);
            let decided = (measured_ratio - 1.0).abs() > 2.0 * noise;
            out.push(Pair {
                offload: a.name.clone(),
                linux: b.name.clone(),
                measured_ratio,
                predicted_ratio,
                decided,
                agree: (measured_ratio > 1.0) == (predicted_ratio > 1.0),
            });
        }
    }
    out
}

fn summarize(rows: &[Row], cfgs: &[MachineConfig]) -> Summary {
    let n = rows.len().max(1) as f64;
    let throughput_mae = rows.iter().map(|r| r.throughput_error.abs()).sum::<f64>() / n;
    let throughput_worst = rows
        .iter()
        .map(|r| r.throughput_error.abs())
        .fold(0.0, f64::max);
    let p50: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.p50_error.map(f64::abs))
        .collect();
    let p50_mae = (!p50.is_empty()).then(|| p50.iter().sum::<f64>() / p50.len() as f64);
    let host_cpu_worst_points = rows
        .iter()
        .map(|r| r.host_cpu_points.abs())
        .fold(0.0, f64::max);
    let pairs = pairs(rows, cfgs);
    let within_measured_range = rows
        .iter()
        .filter(|r| {
            let lo = r
                .measured_runs_bps
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min);
            let hi = r.measured_runs_bps.iter().copied().fold(0.0, f64::max);
            (lo..=hi).contains(&r.predicted_bps)
        })
        .count();
    let mean_spread = rows.iter().map(|r| r.spread).sum::<f64>() / n;
    let mean_half_width = rows.iter().map(|r| r.half_width).sum::<f64>() / n;
    let converged = rows
        .iter()
        .filter(|r| r.repeats.stopped == Stopped::Converged)
        .count();
    let not_quiet = rows
        .iter()
        .filter(|r| r.busy.as_ref().is_some_and(|b| !b.quiet))
        .count();
    Summary {
        not_quiet,
        mean_half_width,
        converged,
        within_measured_range,
        mean_spread,
        configurations: rows.len(),
        throughput_mae,
        throughput_worst,
        p50_mae,
        host_cpu_worst_points,
        throughput_mae_met: throughput_mae <= THROUGHPUT_MAE,
        throughput_worst_met: throughput_worst <= THROUGHPUT_WORST,
        p50_mae_met: p50_mae.map(|e| e <= P50_MAE),
        host_cpu_met: host_cpu_worst_points <= HOST_CPU_POINTS,
        winners_met: pairs.iter().all(|p| !p.decided || p.agree),
        pairs,
    }
}

/// `softoe sim validate`.
pub fn validate_cmd(a: &ValidateArgs) -> Result<()> {
    let cal = load_calibration(a.machine.calibration.as_deref())?;
    let files = files(&a.configs)?;
    // Everything is read and planned before the first run: a bad file is
    // an error now, not after minutes of measuring.
    let mut cfgs = Vec::with_capacity(files.len());
    let mut plans = Vec::with_capacity(files.len());
    for f in &files {
        let mut cfg = load_config(Some(f), &a.machine.set)
            .with_context(|| format!("machine file {}", f.display()))?;
        cfg.workload = work_of(&cfg, a.quick);
        plans.push(plan(&cfg, cal.ring_access.c0).with_context(|| f.display().to_string())?);
        cfgs.push(cfg);
    }
    if !crate::bed::is_root() {
        bail!(
            "softoe sim validate measures each configuration on the real engine (a testbed of \
             network namespaces, a bridge and a TAP device), which needs root: run it with sudo"
        );
    }
    let exe = std::env::current_exe().context("where is this binary?")?;
    let rule = a.rule()?;
    crate::conditions::refuse_pins(&a.conditions, "sim validate (the model places the parties)")?;
    let placement = a.conditions.placement(a.engine_cpu)?;
    let pb = if a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(files.len() as u64 * rule.min_rounds as u64)
    };
    if let Ok(st) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}") {
        pb.set_style(st);
    }
    let before = a.conditions.settle(&pb)?;
    let mut conditions = Conditions::new(placement, before);
    let mut rows = Vec::with_capacity(files.len());
    for ((file, cfg), plan) in files.iter().zip(&cfgs).zip(&plans) {
        let name = name_of(file);
        pb.set_message(format!("{name}: predicting"));
        let predicted = if a.as_written { *cfg } else { as_testbed(cfg) };
        let p = predict(&predicted, &cal).map_err(|e| anyhow!("{name}: simulating: {e}"))?;
        let mut rep_no = 0;
        let w = watch();
        let rounds = interleaved(
            &rule,
            1,
            |_| {
                rep_no += 1;
                pb.set_message(format!("{name}: measuring ({rep_no})"));
                let m = measure(plan, cfg.workload, false, a.engine_cpu, &exe)
                    .with_context(|| format!("{name}: measuring"));
                pb.inc(1);
                m
            },
            |v| watched(v.first().map_or(&[][..], Vec::as_slice)),
        )?;
        let busy = RowBusy::of(w);
        conditions.add(busy.as_ref());
        let repeats = rounds.repeats();
        let runs = rounds.per_side.into_iter().next().unwrap_or_default();
        // The run whose throughput is nearest the median stands for the
        // configuration's other figures in `measured`.
        let (fig, rep) = Repeated::of(runs, repeats).with_context(|| name.clone())?;
        let measured_runs_bps = fig.throughput_bps.samples.clone();
        let measured_figure = fig.throughput_bps;
        let measured_bps = measured_figure.estimate.median;
        let spread = measured_figure.estimate.rel_spread();
        let half_width = measured_figure.estimate.rel_half_width();
        let host_cpu = fig.host_cpu.estimate.median;
        let measured_p50_us = fig.latency_p50_us.map(|f| f.estimate.median);
        let err = |pred: f64, meas: f64| (pred - meas) / meas.abs().max(1e-9);
        rows.push(Row {
            name,
            file: file.clone(),
            what: what(cfg),
            offload: cfg.host.offload,
            predicted_bps: p.throughput_bps,
            measured_bps,
            measured_runs_bps,
            spread,
            measured_figure,
            half_width,
            repeats,
            busy,
            throughput_error: err(p.throughput_bps, measured_bps),
            predicted_p50_us: p.latency_p50_us,
            measured_p50_us,
            p50_error: p
                .latency_p50_us
                .zip(measured_p50_us)
                .map(|(x, y)| err(x, y)),
            predicted_host_cpu: p.host_cpu * 100.0,
            measured_host_cpu: host_cpu * 100.0,
            host_cpu_points: (p.host_cpu - host_cpu) * 100.0,
            measured: rep,
        });
    }
    pb.finish_and_clear();
    let summary = summarize(&rows, &cfgs);
    let source = calibration_source(&cal);
    if a.json {
        let r = Report {
            calibration: source,
            predicted_as: predicted_as(a.as_written),
            quick: a.quick,
            rule,
            conditions: &conditions,
            rows: &rows,
            summary: &summary,
        };
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let how = predicted_as(a.as_written);
        print!("{}", render(&rows, &summary, source, how, &rule, a.quick));
        println!("{}", conditions.line());
    }
    Ok(())
}

impl ValidateArgs {
    /// When a file's repeats stop.
    fn rule(&self) -> Result<StopRule> {
        let min = self.reps.unwrap_or(if self.quick { 2 } else { 5 }) as usize;
        let max = (self.max_reps.unwrap_or(if self.quick { 3 } else { 15 }) as usize).max(min);
        if !(self.width > 0.0 && self.width.is_finite()) {
            bail!("--width must be a percentage above zero");
        }
        let max_time = std::time::Duration::try_from_secs_f64(self.file_secs)
            .map_err(|_| anyhow!("--file-secs must be a number of seconds"))?;
        Ok(StopRule {
            min_rounds: min,
            max_rounds: max,
            rel_width: self.width / 100.0,
            max_time,
        })
    }
}

/// What must narrow before a file's repeats stop: the throughput median's
/// interval, and the p50's where the file is request/response.
fn watched(runs: &[Measured]) -> Vec<Estimate> {
    let tput: Vec<f64> = runs.iter().map(|m| m.delivered.throughput_bps).collect();
    let p50: Vec<f64> = runs
        .iter()
        .filter_map(|m| m.delivered.latency_p50_us)
        .collect();
    Estimate::of(&tput)
        .into_iter()
        .chain(Estimate::of(&p50))
        .collect()
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn render(
    rows: &[Row],
    s: &Summary,
    calibration: &str,
    predicted_as: &str,
    rule: &StopRule,
    quick: bool,
) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let short = calibration
        .split_once(". ")
        .map_or(calibration, |(first, _)| first);
    let _ = writeln!(
        o,
        "softoe sim validate{}: the model's prediction beside the real engine, each file measured \
         {}–{} times (until its median's interval is within ±{:.0} %, or {:.0} s); figures are \
         medians, \"±\" the interval's half-width, \"range\" (max − min) ÷ median; \
         calibration: {short}",
        if quick { " --quick" } else { "" },
        rule.min_rounds,
        rule.max_rounds,
        rule.rel_width * 100.0,
        rule.max_time.as_secs_f64(),
    );
    let _ = writeln!(o, "files predicted {predicted_as}");
    o.push_str(&rows_table(rows));
    let _ = writeln!(o);
    summary(&mut o, s);
    o
}

/// One line per configuration: the prediction beside the measurement.
fn rows_table(rows: &[Row]) -> String {
    let mut t = Table::new()
        .left("config")
        .left("what")
        .right("Gb/s sim")
        .right("real")
        .right("err")
        .right("±")
        .right("range")
        .right("n")
        .right("p50 sim")
        .right("real")
        .right("err")
        .right("CPU%sim")
        .right("real")
        .right("Δpts");
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |x| format!("{x:.1}"));
    for r in rows {
        t.row([
            r.name.to_string(),
            r.what.to_string(),
            gbps_bare(r.predicted_bps),
            gbps_bare(r.measured_bps),
            pct(r.throughput_error),
            format!("{:.0}%", r.half_width * 100.0),
            format!("{:.0}%", r.spread * 100.0),
            match &r.busy {
                Some(b) if !b.quiet => format!("{} busy", r.repeats.rounds),
                _ => r.repeats.rounds.to_string(),
            },
            opt(r.predicted_p50_us),
            opt(r.measured_p50_us),
            r.p50_error.map_or_else(|| "-".to_string(), pct),
            format!("{:.0}", r.predicted_host_cpu),
            format!("{:.0}", r.measured_host_cpu),
            format!("{:+.1}", r.host_cpu_points),
        ]);
    }
    t.render()
}

/// The summary against the targets, and the offload pairs' winners.
fn summary(o: &mut String, s: &Summary) {
    use std::fmt::Write;
    let _ = writeln!(
        o,
        "throughput: mean absolute error {:.0}% (target ≤ {:.0}%: {}), worst {:.0}% (≤ {:.0}%: {})",
        s.throughput_mae * 100.0,
        THROUGHPUT_MAE * 100.0,
        met(s.throughput_mae_met),
        s.throughput_worst * 100.0,
        THROUGHPUT_WORST * 100.0,
        met(s.throughput_worst_met)
    );
    match (s.p50_mae, s.p50_mae_met) {
        (Some(e), Some(ok)) => {
            let _ = writeln!(
                o,
                "p50 latency: mean absolute error {:.0}% (target ≤ {:.0}%: {})",
                e * 100.0,
                P50_MAE * 100.0,
                met(ok)
            );
        }
        _ => {
            let _ = writeln!(o, "p50 latency: no request/response configuration");
        }
    }
    let _ = writeln!(
        o,
        "the measurements themselves: medians within ±{:.0}% on average ({} of {} files reached \
         the width), runs of one file spread {:.0}% on average ((max − min) ÷ median); {} of {} \
         predictions fall within their file's measured range",
        s.mean_half_width * 100.0,
        s.converged,
        s.configurations,
        s.mean_spread * 100.0,
        s.within_measured_range,
        s.configurations
    );
    let _ = writeln!(
        o,
        "host CPU: worst difference {:.1} points (target ≤ {HOST_CPU_POINTS}: {})",
        s.host_cpu_worst_points,
        met(s.host_cpu_met)
    );
    if s.pairs.is_empty() {
        let _ = writeln!(
            o,
            "offload or not: no pair of files differing only in host.offload"
        );
    }
    for p in &s.pairs {
        let _ = writeln!(
            o,
            "offload or not, {} vs {}: measured {:.2}×, predicted {:.2}× — {}",
            p.offload,
            p.linux,
            p.measured_ratio,
            p.predicted_ratio,
            match (p.decided, p.agree) {
                (false, _) => "within twice the spread: not called",
                (true, true) => "same winner",
                (true, false) => "WRONG winner",
            }
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use softoe_sim::machine::predict::Delivered;

    fn row(name: &str, offload: bool, pred: f64, meas: f64, spread: f64) -> Row {
        Row {
            name: name.into(),
            file: PathBuf::from(format!("{name}.toml")),
            what: String::new(),
            offload,
            predicted_bps: pred,
            measured_bps: meas,
            measured_runs_bps: vec![meas],
            spread,
            measured_figure: Figure::of(&[meas]).unwrap(),
            half_width: spread / 2.0,
            repeats: Repeats {
                rounds: 1,
                stopped: Stopped::Rounds,
                secs: 1.0,
            },
            busy: None,
            throughput_error: (pred - meas) / meas,
            predicted_p50_us: None,
            measured_p50_us: None,
            p50_error: None,
            predicted_host_cpu: 50.0,
            measured_host_cpu: 47.0,
            host_cpu_points: 3.0,
            measured: Measured {
                delivered: Delivered {
                    throughput_bps: meas,
                    ..Delivered::default()
                },
                host_cpu: 0.47,
                engine_cpu: 0.0,
                engine_busy: None,
                payload_bytes: 0,
                messages: 0,
                window_seconds: 1.0,
                host_cpu_seconds: 0.47,
                engine_cpu_seconds: 0.0,
                peer_cpu_seconds: None,
                peer_calls: None,
                engine: None,
            },
        }
    }

    #[test]
    fn files_are_predicted_as_the_testbed_runs_them() {
        let mut c = MachineConfig::default();
        c.host.offload = true;
        c.link.delay_us = 50.0;
        let t = as_testbed(&c);
        assert_eq!(t.peer.model, PeerModel::Testbed);
        assert_eq!(t.link.delay_us, 0.0);
        assert_eq!(t.nic.coalesce_frames, 1, "no timer: frames as written");
        // A coalescing timer: the engine waits for up to a batch.
        c.nic.coalesce_us = 20.0;
        assert_eq!(as_testbed(&c).nic.coalesce_frames, 64);
        // Without offload the NIC is Linux's veth, as written.
        c.host.offload = false;
        assert_eq!(as_testbed(&c).nic.coalesce_frames, 1);
    }

    #[test]
    fn errors_winners_and_targets_are_summarized() {
        let mut off = MachineConfig::default();
        off.host.offload = true;
        off.engine.speed = 0.5;
        let mut linux = MachineConfig::default();
        linux.host.offload = false;
        let mut other = MachineConfig::default();
        other.host.offload = false;
        other.workload.message = 7;
        let cfgs = [off, linux, other];
        // Offload measured 2× Linux, predicted 0.8×: a wrong winner, and
        // the gap is far outside a 10 % spread. `other` pairs with nothing.
        let rows = [
            row("a", true, 8e8, 2e9, 0.1),
            row("b", false, 1e9, 1e9, 0.1),
            row("c", false, 1.05e9, 1e9, 0.1),
        ];
        let s = summarize(&rows, &cfgs);
        assert_eq!(s.pairs.len(), 1);
        let p = &s.pairs[0];
        assert_eq!((p.offload.as_str(), p.linux.as_str()), ("a", "b"));
        assert!(p.decided && !p.agree);
        assert!(!s.winners_met);
        assert!((s.throughput_worst - 0.6).abs() < 1e-9);
        assert!((s.throughput_mae - (0.6 + 0.0 + 0.05) / 3.0).abs() < 1e-9);
        assert!(!s.throughput_mae_met && !s.throughput_worst_met);
        assert!(s.host_cpu_met);
        assert_eq!(s.p50_mae, None);
        // Only b's prediction equals one of its runs.
        assert_eq!(s.within_measured_range, 1);
        assert!((s.mean_spread - 0.1).abs() < 1e-9);
        // A gap inside twice the spread is not called.
        let rows = [
            row("a", true, 8e8, 1.1e9, 0.1),
            row("b", false, 1e9, 1e9, 0.1),
        ];
        let s = summarize(&rows, &cfgs[..2]);
        assert!(!s.pairs[0].decided);
        assert!(s.winners_met);
        let text = render(
            &rows,
            &s,
            "note. more",
            predicted_as(false),
            &StopRule {
                min_rounds: 2,
                max_rounds: 3,
                rel_width: 0.03,
                max_time: std::time::Duration::from_secs(9),
            },
            false,
        );
        assert!(text.contains("not called"), "{text}");
        assert!(text.contains("calibration: note\n"), "{text}");
        assert!(text.contains("peer.model = \"testbed\""), "{text}");
        assert!(
            text.contains("1 of 2 predictions fall within their file's measured range"),
            "{text}"
        );
    }

    #[test]
    fn directories_give_their_machine_files_in_order_and_empty_ones_are_refused() {
        let dir = std::env::temp_dir().join(format!("softoe-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["b.toml", "a.toml", "notes.txt"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let got = files(std::slice::from_ref(&dir)).unwrap();
        let names: Vec<String> = got.iter().map(|p| name_of(p)).collect();
        assert_eq!(names, ["a", "b"]);
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let e = files(&[empty]).unwrap_err().to_string();
        assert!(e.contains("no .toml"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
