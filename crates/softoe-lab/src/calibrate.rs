//! `softoe sim calibrate`: the machine model's costs measured on the real
//! engine of this machine.
//!
//! It runs the `softoe bench --emulate` testbed (`crate::bench::emulate`)
//! through a few workloads — stream send and receive at 1, 16 and 64 KiB
//! messages and a 64-byte request/response, on softoe's engine with its
//! stages timed (`EngineConfig::profile_stages`), and the same streams on
//! Linux's TCP — and fits each stage's `c0 + c1·bytes` by least squares
//! across the runs: for every run the stage's mean time per event against
//! its mean bytes per event (an ordinary line fit; a negative slope is
//! clamped to 0 with `c0` the mean, a negative intercept to 0 with the
//! slope through the origin).
//!
//! ## Which measurement prices which stage
//!
//! | stage | from |
//! |---|---|
//! | `stack_rx` | the engine's `rx` stage: per frame read from the TAP (a GRO super-frame is one), its bytes; the TAP read and the answers of the batch included |
//! | `port_rx` | 0: the TAP read is inside `rx`, so `stack_rx` carries it |
//! | `port_tx` | the engine's `tx` stage: per frame written to the TAP, its bytes |
//! | `stack_tx` | the engine's `cmd` stage in the send and rr runs, per frame the engine sent: carrying out a command is the stack's send path (the port writes excluded), which the model prices per frame emitted |
//! | `completion` | the engine's `serve` stage: per socket served (events published, received bytes placed) |
//! | `timer` | the engine's `poll` stage: per call, no per-byte part |
//! | `wakeup` | a thread blocked in a read woken by another thread's write (a pair of pipes, median hand-off less the calls' own cost): the event wake-ups the model charges (a completion, a doorbell, a frame). The engine's timed sleeps end far later (their mean lateness is printed, not used) |
//! | `ring_access` | a cache line handed between two threads (the cost of one record written by one core and read by another), best of several batches |
//! | `copy` | the program's CPU per call in the offload runs: the per-byte slope of writes and reads (the host's copy into and out of the rings), averaged; `c0` the smaller of the two fixed costs (a read's also holds its spinning for data) less a ring access |
//! | `command` | the program's CPU per write in the offload send runs, less `copy.c0` and a ring access |
//! | `syscall` | the program's CPU per call in the Linux runs, less `copy.c0` |
//! | `app` | 0: the benchmark's program does nothing but its calls, whose cost is in `command`, `copy` and `syscall` |
//! | `interrupt` | 0: the engine takes none (it polls, then sleeps; a sleep's end is `wakeup`) |
//! | `csum` | kept: every run has the TAP's checksum offload on |
//!
//! Linux's per-byte cost beyond the copy (its TCP stack run inside the
//! calls) has no stage of its own; it is printed and written in the note.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use softoe_sim::machine::{Calibration, FlowDirection, MachineConfig, StageCost, WorkloadKind};

use crate::bench::emulate::{Measured, measure, plan, work_of};
use crate::table::Table;

/// Options of `softoe sim calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Write the calibration (TOML, as `softoe sim predict --calibration`
    /// reads it) here; without it, to stdout, with the table on stderr.
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Small transfers (16 MiB a stream, 1,000 round trips): seconds, not
    /// minutes; coarser figures.
    #[arg(long)]
    quick: bool,
    /// Print JSON (the fitted costs, every run's figures and the
    /// configuration each ran) instead of a table; the TOML then goes only
    /// to --out.
    #[arg(long)]
    json: bool,
    /// Pin the engine to this core.
    #[arg(long)]
    engine_cpu: Option<usize>,
}

/// Message sizes of the stream runs.
const SIZES: [u32; 3] = [1024, 16 * 1024, 64 * 1024];
/// The rr run's message.
const RR_SIZE: u32 = 64;

/// One run: what it was and what it measured.
#[derive(Debug, Serialize)]
struct RunRow {
    /// `stream send 65536 offload`, …
    label: String,
    /// The `--set` changes to the default machine file that describe it,
    /// for `softoe sim predict` and `softoe bench --emulate`.
    set: Vec<String>,
    offload: bool,
    kind: WorkloadKind,
    direction: FlowDirection,
    message: u32,
    measured: Measured,
}

/// One fitted stage.
#[derive(Debug, Serialize)]
struct Fit {
    stage: &'static str,
    c0: f64,
    c1: f64,
    /// Runs that gave a point (0: kept or set, see `source`).
    points: usize,
    source: &'static str,
}

#[derive(Serialize)]
struct Report<'a> {
    calibration: &'a Calibration,
    fits: &'a [Fit],
    runs: &'a [RunRow],
}

/// `c0 + c1·x` through `(x, y)` by least squares; negative parts clamped.
fn fit_line(points: &[(f64, f64)]) -> Option<StageCost> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    if pts.is_empty() {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let (mut c0, mut c1) = if sxx > 0.0 {
        let c1 = sxy / sxx;
        (my - c1 * mx, c1)
    } else {
        (my, 0.0)
    };
    if c1 < 0.0 {
        (c0, c1) = (my, 0.0);
    }
    if c0 < 0.0 {
        let sx2: f64 = pts.iter().map(|p| p.0 * p.0).sum();
        let sxy0: f64 = pts.iter().map(|p| p.0 * p.1).sum();
        c0 = 0.0;
        c1 = if sx2 > 0.0 {
            (sxy0 / sx2).max(0.0)
        } else {
            0.0
        };
    }
    Some(StageCost::new(c0.max(0.0), c1.max(0.0)))
}

/// A run's mean (bytes, ns) per event of a stage, if it ran.
fn per_event(count: u64, nanos: u64, bytes: u64) -> Option<(f64, f64)> {
    (count > 0).then(|| (bytes as f64 / count as f64, nanos as f64 / count as f64))
}

/// Nanoseconds for one cache line to go from one thread to another (a
/// ring record written by one core, read by the other): the best of
/// several batches of hand-offs, or `None` if the other thread was not
/// scheduled in time (a busy machine).
fn ring_access_ns() -> Option<f64> {
    const N: u64 = 20_000;
    const BATCHES: usize = 8;
    let flag = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (f2, s2) = (flag.clone(), stop.clone());
    let peer = std::thread::spawn(move || {
        let mut expect = 1;
        while !s2.load(Ordering::Relaxed) {
            if f2.load(Ordering::Acquire) == expect {
                f2.store(expect + 1, Ordering::Release);
                expect += 2;
            } else {
                std::hint::spin_loop();
            }
        }
    });
    let mut best = f64::INFINITY;
    let mut v = 0u64;
    'batches: for _ in 0..BATCHES {
        let t = Instant::now();
        for _ in 0..N {
            v += 1;
            flag.store(v, Ordering::Release);
            v += 1;
            let mut spins = 0u32;
            while flag.load(Ordering::Acquire) != v {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) && t.elapsed() > Duration::from_millis(500) {
                    break 'batches;
                }
                std::hint::spin_loop();
            }
        }
        best = best.min(t.elapsed().as_nanos() as f64 / (2 * N) as f64);
    }
    stop.store(true, Ordering::Relaxed);
    let _ = peer.join();
    best.is_finite().then_some(best)
}

/// Nanoseconds to wake a thread blocked in a read by a write from another
/// thread: the median over many hand-offs over a pair of pipes (half a
/// round trip, less a write and a read that do not block). This is what
/// the model's `wakeup` prices: a program woken by the engine's
/// completion, an engine woken by a doorbell or a frame. `None` if the
/// pipes cannot be made.
fn wake_ns() -> Option<f64> {
    use std::io::{Read, Write};
    const N: usize = 4000;
    let (mut r1, mut w1) = std::io::pipe().ok()?;
    let (mut r2, mut w2) = std::io::pipe().ok()?;
    let peer = std::thread::spawn(move || {
        let mut b = [0u8; 1];
        while r1.read_exact(&mut b).is_ok() && b[0] != 0 {
            if w2.write_all(&b).is_err() {
                break;
            }
        }
        w2
    });
    let mut halves = Vec::with_capacity(N);
    let mut b = [0u8; 1];
    for i in 0..N {
        let t = Instant::now();
        if w1.write_all(&[1]).is_err() || r2.read_exact(&mut b).is_err() {
            break;
        }
        halves.push(t.elapsed().as_nanos() as f64 / 2.0);
        if i % 2 == 1 {
            // Idle between some hand-offs, as a program between requests.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let _ = w1.write_all(&[0]);
    let mut w2 = peer.join().ok()?;
    // A write and a read that find the data there: the calls' own cost.
    let mut own = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        if w2.write_all(&[1]).is_err() || r2.read_exact(&mut b).is_err() {
            break;
        }
        own.push(t.elapsed().as_nanos() as f64);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let (h, o) = (median(&mut halves)?, median(&mut own)?);
    Some((h - o).max(0.0))
}

/// Today as `YYYY-MM-DD` (UTC), from the system clock.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// This machine, in a few words: its processor and cores, its kernel.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "an unknown processor".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, Linux {kernel}")
}

/// What every run's machine file says of the testbed's path, so that a
/// prediction from the same changes models the path that was measured: a
/// wire that carries TSO super-segments whole (TAP, bridge, veth), unshaped
/// (the veth's own rate is far above what the CPUs move), and no I/O bus.
const TESTBED_PATH: [&str; 3] = ["link.gso=true", "link.gbps=100", "bus.gbps=400"];

/// The runs: (label, `--set` changes).
fn runs(quick: bool) -> Vec<(String, Vec<String>)> {
    let bytes: u64 = if quick { 16 << 20 } else { 128 << 20 };
    let requests: u64 = if quick { 1000 } else { 10_000 };
    let path = || TESTBED_PATH.iter().map(|s| s.to_string());
    let mut v = Vec::new();
    for offload in [true, false] {
        for dir in ["send", "receive"] {
            for m in SIZES {
                v.push((
                    format!(
                        "stream {dir} {m} {}",
                        if offload { "offload" } else { "Linux" }
                    ),
                    [
                        format!("host.offload={offload}"),
                        "workload.kind=stream".into(),
                        format!("workload.direction={dir}"),
                        format!("workload.message={m}"),
                        format!("workload.bytes={bytes}"),
                    ]
                    .into_iter()
                    .chain(path())
                    .collect(),
                ));
            }
        }
    }
    v.push((
        format!("rr {RR_SIZE} offload"),
        [
            "host.offload=true".into(),
            "workload.kind=rr".into(),
            format!("workload.message={RR_SIZE}"),
            format!("workload.requests={requests}"),
        ]
        .into_iter()
        .chain(path())
        .collect(),
    ));
    v
}

/// Fits every stage from the runs; the unmeasured ones keep `base`'s.
fn fit_all(
    rows: &[RunRow],
    ring: Option<f64>,
    wake: Option<f64>,
    base: &Calibration,
) -> (Calibration, Vec<Fit>) {
    let mut f = Fitter {
        cal: base.clone(),
        fits: Vec::new(),
    };
    let offload: Vec<&RunRow> = rows.iter().filter(|r| r.offload).collect();
    fit_engine(&mut f, &offload);
    let late = engine_lateness(&offload);
    if let Some(w) = wake {
        f.cal.wakeup = f.record(
            "wakeup",
            StageCost::new(w, 0.0),
            1,
            "a thread blocked in a read, woken by another's write (pipes), median",
        );
    }
    if let Some(a) = ring {
        f.cal.ring_access = f.record(
            "ring_access",
            StageCost::new(a, 0.0),
            1,
            "cache line handed between two threads",
        );
    }
    fit_program(&mut f, rows);
    if let Some(l) = late {
        f.fits.push(Fit {
            stage: "(engine sleep lateness)",
            c0: l,
            c1: 0.0,
            points: offload.len(),
            source: "engine timed sleeps, mean lateness past the deadline; no model stage",
        });
    }
    f.cal.app = StageCost::ZERO;
    f.cal.interrupt = StageCost::ZERO;
    (f.cal, f.fits)
}

/// The calibration being fitted and the fits that went into it.
struct Fitter {
    cal: Calibration,
    fits: Vec<Fit>,
}

impl Fitter {
    /// Notes a stage's fit and hands the cost back for the calibration.
    fn record(
        &mut self,
        stage: &'static str,
        c: StageCost,
        points: usize,
        source: &'static str,
    ) -> StageCost {
        self.fits.push(Fit {
            stage,
            c0: c.c0,
            c1: c.c1,
            points,
            source,
        });
        c
    }
}

/// The engine's stages, from its counters in the offload runs.
fn fit_engine(f: &mut Fitter, offload: &[&RunRow]) {
    let counters = |r: &&RunRow| r.measured.engine;
    let rx: Vec<(f64, f64)> = offload
        .iter()
        .filter_map(counters)
        .filter_map(|c| per_event(c.stages.rx.count, c.stages.rx.nanos, c.stages.rx.bytes))
        .collect();
    if let Some(c) = fit_line(&rx) {
        f.cal.stack_rx = f.record("stack_rx", c, rx.len(), "engine rx stage, per frame read");
        f.cal.port_rx = f.record(
            "port_rx",
            StageCost::ZERO,
            0,
            "inside stack_rx (the TAP read)",
        );
    }
    let tx: Vec<(f64, f64)> = offload
        .iter()
        .filter_map(counters)
        .filter_map(|c| per_event(c.stages.tx.count, c.stages.tx.nanos, c.stages.tx.bytes))
        .collect();
    if let Some(c) = fit_line(&tx) {
        f.cal.port_tx = f.record("port_tx", c, tx.len(), "engine tx stage, per frame written");
    }
    let cmd: Vec<(f64, f64)> = offload
        .iter()
        .filter(|r| r.kind == WorkloadKind::Rr || r.direction == FlowDirection::Send)
        .filter_map(counters)
        .filter_map(|c| per_event(c.frames_out, c.stages.cmd.nanos, c.stages.cmd.bytes))
        .collect();
    if let Some(c) = fit_line(&cmd) {
        f.cal.stack_tx = f.record(
            "stack_tx",
            c,
            cmd.len(),
            "engine cmd stage per frame sent (send and rr runs)",
        );
    }
    let serve: Vec<(f64, f64)> = offload
        .iter()
        .filter_map(counters)
        .filter_map(|c| {
            per_event(
                c.stages.serve.count,
                c.stages.serve.nanos,
                c.stages.serve.bytes,
            )
        })
        .collect();
    if let Some(c) = fit_line(&serve) {
        f.cal.completion = f.record(
            "completion",
            c,
            serve.len(),
            "engine serve stage, per socket served",
        );
    }
    let (pc, pn) = offload
        .iter()
        .filter_map(counters)
        .fold((0u64, 0u64), |(c, n), k| {
            (c + k.stages.poll.count, n + k.stages.poll.nanos)
        });
    if pc > 0 {
        f.cal.timer = f.record(
            "timer",
            StageCost::new(pn as f64 / pc as f64, 0.0),
            offload.len(),
            "engine poll stage, per call",
        );
    }
}

/// How late the engine's timed sleeps ended, mean ns. They end late by
/// far more than a wake-up costs (53 µs here, timer slack 1 ns: the
/// virtual machine's timer), but the model's wake-ups are events (a
/// completion, a doorbell, a frame), which the pipes' hand-off measures;
/// the lateness is reported only.
fn engine_lateness(offload: &[&RunRow]) -> Option<f64> {
    let (wc, wn) = offload
        .iter()
        .filter_map(|r| r.measured.engine)
        .fold((0u64, 0u64), |(c, n), k| {
            (c + k.stages.wake.by_timeout, n + k.stages.wake.late_nanos)
        });
    (wc > 0).then(|| wn as f64 / wc as f64)
}

/// The program's side: copy, command and syscall, from its CPU per call.
fn fit_program(f: &mut Fitter, rows: &[RunRow]) {
    let host_points = |offload: bool, dir: Option<FlowDirection>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| {
                r.offload == offload
                    && r.kind == WorkloadKind::Stream
                    && dir.is_none_or(|d| r.direction == d)
            })
            .filter(|r| r.measured.messages > 0)
            .map(|r| {
                (
                    f64::from(r.message),
                    r.measured.host_cpu_seconds * 1e9 / r.measured.messages as f64,
                )
            })
            .collect()
    };
    let ring_c0 = f.cal.ring_access.c0;
    let sends = host_points(true, Some(FlowDirection::Send));
    let recvs = host_points(true, Some(FlowDirection::Receive));
    if let (Some(s), Some(r)) = (fit_line(&sends), fit_line(&recvs)) {
        // A call's fixed cost from the cheaper of the two intercepts: a
        // reader's CPU per call also holds its spinning for data that has
        // not arrived (11.8 µs per read on this machine, where a write
        // costs about 1 µs all told), which is waiting, not copying, and
        // which the model's host does not spend.
        let fixed = s.c0.min(r.c0);
        let copy = StageCost::new((fixed - ring_c0).max(0.0), (s.c1 + r.c1) / 2.0);
        f.cal.copy = f.record(
            "copy",
            copy,
            sends.len() + recvs.len(),
            "program CPU per call with offload: per-byte slope; the cheaper call's fixed cost",
        );
        f.cal.command = f.record(
            "command",
            StageCost::new((s.c0 - ring_c0 - copy.c0).max(0.0), 0.0),
            sends.len(),
            "program CPU per write with offload, less copy and a ring access",
        );
    }
    let linux = host_points(false, None);
    if let Some(k) = fit_line(&linux) {
        f.cal.syscall = f.record(
            "syscall",
            StageCost::new((k.c0 - f.cal.copy.c0).max(0.0), 0.0),
            linux.len(),
            "program CPU per call on Linux, less copy.c0",
        );
        f.fits.push(Fit {
            stage: "(kernel per byte)",
            c0: 0.0,
            c1: k.c1,
            points: linux.len(),
            source: "Linux program CPU per byte: copy and TCP; no model stage beyond copy",
        });
    }
}

/// Runs `softoe sim calibrate`.
pub fn calibrate_cmd(a: &CalibrateArgs) -> Result<()> {
    if !crate::bed::is_root() {
        bail!(
            "softoe sim calibrate runs the real engine on a testbed of network namespaces, a \
             bridge and a TAP device, which needs root: run it with sudo"
        );
    }
    if let Some(p) = &a.out
        && let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        bail!("--out {}: no directory {}", p.display(), dir.display());
    }
    let exe = std::env::current_exe().context("where is this binary?")?;
    let list = runs(a.quick);
    let pb = if a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(list.len() as u64 + 1)
    };
    if let Ok(st) = ProgressStyle::with_template("{spinner} [{bar:20}] {pos}/{len} {msg}") {
        pb.set_style(st.progress_chars("=> "));
    }
    pb.set_message("a ring access: a cache line between two threads");
    let ring = ring_access_ns();
    pb.set_message("a wake-up: a thread blocked in a read, woken by another");
    let wake = wake_ns();
    pb.inc(1);
    let base = Calibration::default();
    let mut rows = Vec::new();
    for (label, set) in list {
        pb.set_message(label.clone());
        let cfg: MachineConfig = crate::sim_machine::load_config(None, &set)?;
        let p = plan(&cfg, base.ring_access.c0)?;
        let m = measure(&p, work_of(&cfg, false), true, a.engine_cpu, &exe)
            .with_context(|| format!("the run {label}"))?;
        rows.push(RunRow {
            label,
            set,
            offload: cfg.host.offload,
            kind: cfg.workload.kind,
            direction: cfg.workload.direction,
            message: cfg.workload.message,
            measured: m,
        });
        pb.inc(1);
    }
    pb.finish_and_clear();
    let (mut cal, fits) = fit_all(&rows, ring, wake, &base);
    let kernel_byte = fits
        .iter()
        .find(|f| f.stage == "(kernel per byte)")
        .map_or(0.0, |f| f.c1);
    let measured: Vec<&str> = fits.iter().map(|f| f.stage).collect();
    let kept: Vec<&str> = cal
        .stages()
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !measured.contains(n) && !["app", "interrupt"].contains(n))
        .collect();
    cal.note = format!(
        "softoe sim calibrate{}, {}, on {}. Stages: stack_rx from the engine's rx stage (the TAP \
         read inside: port_rx 0), port_tx from tx, stack_tx from cmd per frame sent, completion \
         from serve, timer from poll, wakeup from a thread woken through a pipe, ring_access from a cache line \
         handed between threads, copy (the cheaper call's fixed cost: a read's holds its wait for data) and command from the program's CPU with offload, syscall \
         from it on Linux (whose per-byte cost beyond the copy, {kernel_byte:.3} ns/B, has no \
         stage), app and interrupt 0 (the program's own work is in command/copy/syscall; the \
         engine polls). Not measured, defaults kept: {}.",
        if a.quick { " --quick" } else { "" },
        today(),
        machine(),
        if kept.is_empty() {
            "none".to_string()
        } else {
            kept.join(", ")
        }
    );
    cal.validate()
        .map_err(|e| anyhow::anyhow!("the fitted calibration: {e}"))?;
    let text = toml::to_string(&cal).context("writing the calibration as TOML")?;
    if let Some(p) = &a.out {
        std::fs::write(p, &text).with_context(|| format!("writing {}", p.display()))?;
    }
    if a.json {
        let r = Report {
            calibration: &cal,
            fits: &fits,
            runs: &rows,
        };
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let table = render(&fits, &rows);
        if a.out.is_some() {
            print!("{table}");
        } else {
            eprint!("{table}");
            print!("{text}");
        }
    }
    Ok(())
}

fn render(fits: &[Fit], rows: &[RunRow]) -> String {
    let mut runs = Table::new()
        .left("run")
        .right("throughput")
        .right("host CPU")
        .right("engine")
        .right("messages");
    for r in rows {
        runs.row([
            r.label.clone(),
            format!("{:.3} Gb/s", r.measured.delivered.throughput_bps / 1e9),
            format!("{:.1}%", r.measured.host_cpu * 100.0),
            format!("{:.1}%", r.measured.engine_cpu * 100.0),
            r.measured.messages.to_string(),
        ]);
    }
    let mut stages = Table::new()
        .left("stage")
        .right("c0 ns")
        .right("c1 ns/B")
        .right("runs")
        .left("from");
    for f in fits {
        stages.row([
            f.stage.to_string(),
            format!("{:.1}", f.c0),
            format!("{:.4}", f.c1),
            f.points.to_string(),
            f.source.to_string(),
        ]);
    }
    format!("{runs}\n{stages}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The hand-off is measured, and is a wake-up's size: above nothing,
    /// below a millisecond even on a loaded machine.
    #[test]
    fn a_wake_up_is_measured() {
        let w = wake_ns().unwrap();
        assert!(w > 0.0 && w < 1e6, "{w} ns");
    }

    #[test]
    fn a_line_is_fitted_and_negative_parts_are_clamped() {
        let c = fit_line(&[(0.0, 100.0), (1000.0, 600.0), (2000.0, 1100.0)]).unwrap();
        assert!(
            (c.c0 - 100.0).abs() < 1e-9 && (c.c1 - 0.5).abs() < 1e-12,
            "{c:?}"
        );
        // Falling with size: the mean, no slope.
        let c = fit_line(&[(0.0, 300.0), (1000.0, 100.0)]).unwrap();
        assert_eq!((c.c0, c.c1), (200.0, 0.0));
        // A line below the origin: through it instead.
        let c = fit_line(&[(1000.0, 100.0), (2000.0, 1100.0)]).unwrap();
        assert_eq!(c.c0, 0.0);
        assert!((c.c1 - (1000.0 * 100.0 + 2000.0 * 1100.0) / 5e6).abs() < 1e-12);
        // One size: the mean.
        let c = fit_line(&[(64.0, 10.0), (64.0, 30.0)]).unwrap();
        assert_eq!((c.c0, c.c1), (20.0, 0.0));
        assert!(fit_line(&[]).is_none());
        assert_eq!(per_event(0, 5, 5), None);
        assert_eq!(per_event(2, 10, 100), Some((50.0, 5.0)));
    }

    #[test]
    fn the_date_is_a_calendar_date() {
        let d = today();
        assert_eq!(d.len(), 10, "{d}");
        assert!(d.starts_with("20"), "{d}");
        assert_eq!(&d[4..5], "-");
    }

    #[test]
    fn the_runs_are_valid_configurations() {
        for (label, set) in runs(true) {
            let cfg = crate::sim_machine::load_config(None, &set).unwrap();
            plan(&cfg, 80.0).unwrap();
            assert!(!label.is_empty());
        }
        assert_eq!(runs(false).len(), 13);
    }
}
