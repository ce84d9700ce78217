//! `softoe bench`: what the offload engine is worth, measured beside Linux
//! over the same bridge in the same run.
//!
//! The servers run as a separate program in both cases — `softoe
//! bench-servers`, attached to the engine over shared memory, or on Linux's
//! TCP in the peer namespace — so "the host program's CPU" means the same
//! thing for both: that process's user and system time (for Linux this
//! includes the kernel's TCP work done in its system calls, but not the
//! softirq work the kernel does elsewhere; the machine-wide figure, from
//! `/proc/stat`, counts everything on both cores). The engine's CPU is its
//! thread's run time (`schedstat`). The Linux client that drives each
//! workload is the same for both.
//!
//! Scenarios so far: bulk (1 and 8 connections, both directions, 64 KiB
//! writes) for each send policy and Linux, with CPU per GiB; and a
//! ping-pong sweep by message size (p50, p99, p99.9, mean, bandwidth, and
//! HL-TCP's host CPU utilization: the server's CPU time ÷ elapsed time).
//! Named with `--only loss`: a drop-rate sweep, goodput and loss recovery
//! of softoe and Linux as senders and receivers (see `loss/`); with
//! `--only apps`: unmodified servers (nginx, memcached, PostgreSQL) on
//! softoe beside the same server on Linux (see `apps/`).
//!
//! The module by job: `server` runs the server program as `softoe
//! bench-servers` (the demo's too, see `crate::server`) and starts it,
//! `cpu` reads the CPU accounting of `/proc`, `workload` holds the Linux
//! client's transfers and ping-pong, `scenarios` the bulk, latency,
//! ablation and coalescing runs, and `scale`, `loss`, `bond` and
//! `emulate` the scenarios of their own; `targets`, `render` and `plot`
//! turn the report into ratios, tables and plots.

mod apps;
mod bond;
mod cpu;
pub(crate) mod emulate;
mod goals;
pub(crate) mod loss;
mod paired;
mod plot;
mod reclaim;
mod render;
pub(crate) mod repeat;
mod scale;
mod scenarios;
mod server;
mod spin;
mod targets;
mod workload;

pub use reclaim::{HoldArgs, hold};
pub use server::{ServersArgs, servers};

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::bed::BedOptions;
use crate::stats::{Figure, StopRule};
use goals::targets;
use plot::plots;
use render::render;
use scenarios::{ablation, coalescing};
use targets::Target;

/// The application's write size in bulk runs.
const WRITE: usize = 64 * 1024;

/// The scenarios `softoe bench` knows.
const SCENARIOS: [&str; 10] = [
    "bulk",
    "latency",
    "ablation",
    "coalescing",
    "scale",
    "loss",
    "bond",
    "spin",
    "apps",
    "reclaim",
];

/// Options of `softoe bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Measure the real engine configured as a machine file says — the
    /// file `softoe sim predict` reads — and print the figures the model
    /// predicts for it (throughput, latency, host and engine CPU), under
    /// the same names. `host.offload`: the program on softoe's engine or
    /// on Linux's TCP; `engine.speed` slows the engine (it cannot be made
    /// faster: above 1 is refused); `memory.delay` m becomes a busy-wait of
    /// (m − 1)·a per shared-memory access, `a` being the calibration's
    /// `ring_access` cost; `nic.tso/csum/gro` the TAP's offloads;
    /// `nic.coalesce_us` the engine's receive coalescing; `engine.spin_us`
    /// its spin; `link.gbps` below 10 a `tbf` on the path. What this
    /// machine cannot do is refused by name (`link.loss`, `link.mtu`,
    /// `bus.*`); `link.delay_us` is not emulated but reported: the real
    /// path's round trip is what it is. The other scenarios' options do not
    /// apply.
    #[arg(long, value_name = "CONFIG")]
    emulate: Option<PathBuf>,
    /// With --emulate: change one field of the machine file, e.g. `--set
    /// engine.speed=0.5 --set workload.kind=rr` (after the file).
    #[arg(long = "set", value_name = "SECTION.FIELD=VALUE", requires = "emulate")]
    set: Vec<String>,
    /// With --emulate: the calibration whose `ring_access` cost turns
    /// `memory.delay` into a delay per access (TOML, as `softoe sim
    /// calibrate` writes it; default: the shipped docs/sim/calibration.toml;
    /// `builtin`: the model's order-of-magnitude costs).
    #[arg(long, value_name = "FILE", requires = "emulate")]
    calibration: Option<PathBuf>,
    /// A one-minute version: smaller transfers, fewer rounds and sizes.
    #[arg(long)]
    quick: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Bytes per bulk run, split over its connections (suffixes K, M, G;
    /// default 1G, 256M with --quick).
    #[arg(long, value_parser = crate::units::parse_size)]
    bytes: Option<u64>,
    /// Round trips per message size in the latency sweep (default 5000,
    /// 300 with --quick; fewer for large messages).
    #[arg(long)]
    rounds: Option<usize>,
    /// Where the plots of the sweeps go (SVG: latency, bandwidth and host
    /// CPU by message size; latency and goodput by coalescing delay).
    #[arg(long, default_value = "softoe-bench")]
    plots: PathBuf,
    /// Which scenarios to run, as `--only` takes them (`softoe bench bond
    /// --quick`); both lists add up.
    #[arg(value_parser = SCENARIOS)]
    scenarios: Vec<String>,
    /// Which scenarios to run (default: all but loss, bond, spin and apps):
    /// bulk, latency, ablation, coalescing, scale, loss (the drop-rate
    /// sweep, minutes long: named only), bond (BondingPlus, E1–E6 of issue
    /// 16, named only; its E6 drops ARP+ frames with an eBPF program, no
    /// nft needed), spin (the 4-byte ping-pong on a fresh testbed for every
    /// pair of --spin-engine-us and --spin-app-us, with each party's CPU per
    /// round trip, beside Linux: named only), apps (unmodified nginx — 64
    /// KiB files kept alive, a new connection per request —, memcached and
    /// PostgreSQL's pgbench on softoe through `softoe run` beside the same
    /// server on Linux, each row --apps-secs long: named only), reclaim
    /// (single-threaded programs on the shim killed with SIGKILL holding a
    /// connection: the time until the engine has reclaimed each session,
    /// on the machine as it is and beside --reclaim-load busy threads).
    #[arg(long, value_delimiter = ',', value_parser = SCENARIOS)]
    only: Vec<String>,
    /// Samples of each real-time scenario of `bond` (1 kHz: 100000 is 100
    /// s each; default 100000, 3000 with --quick; p99.9 is shown from
    /// 100000).
    #[arg(long)]
    rt_samples: Option<usize>,
    /// Which of `bond`'s experiments to run (default: all): e1 bandwidth
    /// vs members, e2 real-time channel, e3 one member's overhead, e4
    /// failover, e5 plain-ARP peer, e6 ARP+ under loss.
    #[arg(long, value_delimiter = ',', value_parser = ["e1", "e2", "e3", "e4", "e5", "e6"])]
    bond_exp: Vec<String>,
    /// Run `bond`'s E2 with both engines and the real-time stream's
    /// threads in SCHED_FIFO, as engines on cores of their own would run
    /// (the bulk's threads and the kernel's stay ordinary). A diagnostic:
    /// it shows what the engines cost when they never wait for a CPU, but
    /// on two cores the kernel's real-time throttling
    /// (sched_rt_runtime_us) stalls them for tens of ms in runs of more
    /// than a few seconds, and ksoftirqd (the links' tbf) is starved.
    #[arg(long)]
    bond_rt_fifo: bool,
    /// Member counts of `bond`'s E1 (default 1,2,3,4; 1,2 with --quick).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=16))]
    bond_members: Vec<u8>,
    /// Drop rates of the loss sweep, percent each way on the client's link
    /// (fractions fine), comma-separated: `--loss 0.1,1,5`.
    #[arg(long, value_delimiter = ',', default_values_t = [0.1, 1.0, 2.0, 5.0, 10.0])]
    loss: Vec<f64>,
    /// Bytes per transfer of the loss sweep (suffixes K, M, G; default
    /// 64M, 8M with --quick).
    #[arg(long, value_parser = crate::units::parse_size)]
    loss_bytes: Option<u64>,
    /// Longest one transfer of the loss sweep may run, seconds (default 10,
    /// 4 with --quick); one stopped early reports what it moved.
    #[arg(long)]
    loss_secs: Option<f64>,
    /// Drop rates of the loss sweep's millisecond-RTT variant: the client's
    /// link limited to 100 Mbit/s each way by tbf with a 5 ms queue.
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 5.0])]
    loss_ms_rtt: Vec<f64>,
    /// Rounds of the loss sweep at each rate (its summary shows the
    /// medians; the veth's goodput moves 2–5× run to run).
    #[arg(long, default_value_t = 1)]
    loss_reps: usize,
    /// Skip the loss sweep's millisecond-RTT variant.
    #[arg(long)]
    no_ms_rtt: bool,
    /// Congestion control of the loss sweep's Linux sender set beside
    /// softoe's (reno, cubic, bbr: what the kernel offers). Default:
    /// softoe's own, CUBIC, so the sweep compares loss recovery; `bbr` (the
    /// default of many machines, this one's too) sets softoe's CUBIC beside
    /// a controller that does not slow down for random loss. The client
    /// sending into both receivers keeps its namespace's default.
    #[arg(long, default_value = crate::bench::loss::DEFAULT_LINUX_CC)]
    linux_cc: String,
    /// Leave the loss sweep's veths reordering flows, as a veth does by
    /// itself: it puts each frame in the backlog of the CPU that sent it,
    /// and a TCP sender transmits from two CPUs (its program and the
    /// softirq taking its ACKs), so a busy CPU delivers its share hundreds
    /// of µs late and the sweep also measures how each receiver and sender
    /// take that reordering. By default the bridge's ports steer each flow
    /// to one CPU (receive packet steering), keeping it in order as a wire
    /// and a NIC's queue do, so the sweep measures loss alone.
    #[arg(long)]
    loss_veth_reorder: bool,
    /// Accepted for earlier commands: keeping flows in order is the default
    /// now (see --loss-veth-reorder).
    #[arg(long, hide = true, conflicts_with = "loss_veth_reorder")]
    loss_flow_order: bool,
    /// Pin the engine to this core, its own, as a dedicated engine core
    /// (default: let the scheduler place it).
    #[arg(long)]
    engine_cpu: Option<usize>,
    /// The engine thread's nice value, -20 to 19 (default: the bench's
    /// own); see `softoe engine --help`.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    engine_nice: Option<i32>,
    /// Where the kernel does its work for the frames the engine writes
    /// into its TAP (the bridge, and the Linux client's receive path):
    /// off (inside the engine's writes), on (on the other cores), auto
    /// (there while the engine's core is full and theirs have room; the
    /// engine's default). See `softoe engine --help`.
    #[arg(long, value_enum)]
    engine_steer: Option<crate::bed::SteerMode>,
    /// How long the real-wire engine spins for work before it sleeps, µs
    /// (default: the engine's 50): longer trades a core for wake-up time.
    #[arg(long)]
    engine_spin_us: Option<u64>,
    /// The engine's port on the real wire: `tap` (a TAP device on the
    /// bridge, with its virtio-net offloads: the default) or `xdp` (an
    /// AF_XDP socket on a veth whose other end is on the bridge: copy mode,
    /// no offloads, one system call per batch of frames). The ablation's
    /// offload variants apply to `tap` only.
    #[arg(long, value_name = "PORT", default_value = "tap", value_parser = ["tap", "xdp"])]
    port: String,
    /// Write every frame the engine sends and receives to this pcap file
    /// (tcpdump and Wireshark read it; each testbed the run builds appends
    /// its own engine's frames, so name one scenario with --only).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// The engine's idle spins of the spin sweep, µs, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 10, 25, 50, 100])]
    spin_engine_us: Vec<u64>,
    /// The server program's longest spins of the spin sweep
    /// (`SOFTOE_SPIN_US`, the ceiling of its learnt budget), µs.
    #[arg(long, value_delimiter = ',', default_values_t = [0u64, 10, 30, 60])]
    spin_app_us: Vec<u64>,
    /// Seconds of load per window of the apps scenario (softoe's and Linux's
    /// interleaved, each side's first after a 2 s warm-up; default 5, 2 with --quick).
    #[arg(long)]
    apps_secs: Option<f64>,
    /// Client connections of the apps scenario (pgbench's clients too).
    #[arg(long, default_value_t = 8)]
    apps_conns: usize,
    /// The largest connection count of the scale scenario (1, 100, 1,000
    /// and 10,000 up to this; default 10000, 1000 with --quick).
    #[arg(long)]
    scale_max: Option<usize>,
    /// Programs the reclaim scenario starts and kills, one after another
    /// (default 400, 100 with --quick).
    #[arg(long)]
    reclaim_programs: Option<usize>,
    /// CPU-bound threads the reclaim scenario runs beside its programs in
    /// a second round, as a busy machine's other work (default: two per
    /// core the bench may use; 0: the machine as it is only).
    #[arg(long)]
    reclaim_load: Option<usize>,
    #[command(flatten)]
    repeat: repeat::RepeatArgs,
    #[command(flatten)]
    conditions: crate::conditions::ConditionArgs,
}
/// One bulk row: a system, a direction and a connection count, measured
/// in interleaved rounds with the other systems of its row.
#[derive(Debug, Serialize)]
struct BulkRow {
    system: String,
    direction: &'static str,
    conns: usize,
    /// Bytes per run.
    bytes: u64,
    /// Medians over the rounds.
    gbps: f64,
    /// CPU seconds per GiB: the server program, the engine thread (0 for
    /// Linux), the whole machine.
    app_s_per_gib: f64,
    engine_s_per_gib: f64,
    machine_s_per_gib: f64,
    /// Every figure's samples by round, median, interval and modes.
    figures: BulkFigures,
    /// Goodput ÷ Linux's in the same round (softoe's rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    vs_linux: Option<Figure>,
    repeats: repeat::Repeats,
    /// What else ran while the row was measured.
    busy: Option<crate::conditions::RowBusy>,
}

/// A bulk row's repeated figures.
#[derive(Debug, Serialize)]
struct BulkFigures {
    gbps: Figure,
    app_s_per_gib: Figure,
    engine_s_per_gib: Figure,
    machine_s_per_gib: Figure,
}

/// One message size of the ping-pong sweep, medians over its rounds.
#[derive(Debug, Serialize)]
struct LatencyRow {
    system: String,
    size: usize,
    /// Round trips per run.
    rounds: usize,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    mean_us: f64,
    /// size × 8 ÷ (mean round trip ÷ 2), NetPIPE's way.
    mbps: f64,
    /// HL-TCP's host CPU utilization: the server program's CPU time ÷
    /// elapsed time × 100.
    host_cpu_pct: f64,
    figures: LatencyFigures,
    /// p50 ÷ Linux's in the same round (softoe's rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    p50_vs_linux: Option<Figure>,
    repeats: repeat::Repeats,
    /// What else ran while the row was measured.
    busy: Option<crate::conditions::RowBusy>,
}

/// A ping-pong row's repeated figures.
#[derive(Debug, Serialize)]
struct LatencyFigures {
    p50_us: Figure,
    p99_us: Figure,
    p999_us: Figure,
    mean_us: Figure,
    host_cpu_pct: Figure,
}

/// One row of the ablation (HL-TCP Table 3's structure): medians of the
/// rounds, the figures with their samples beside.
#[derive(Debug, Serialize)]
struct AblationRow {
    offloads: &'static str,
    policy: &'static str,
    coalescing: bool,
    rr4_p50_us: f64,
    /// One connection, host→Linux.
    bulk_gbps: f64,
    rr4_p50: Figure,
    bulk: Figure,
    repeats: repeat::Repeats,
}

/// One point of the coalescing sweep.
#[derive(Debug, Serialize)]
struct CoalescingRow {
    /// Receive interrupt coalescing and completion wake-up delay, µs.
    delay_us: u64,
    rr4_p50_us: f64,
    rr4_p99_us: f64,
    /// One connection each way.
    in_gbps: f64,
    out_gbps: f64,
    /// p50, p99, in, out: every round's figures.
    figures: [Figure; 4],
    repeats: repeat::Repeats,
}

/// The targets' verdicts, counted.
#[derive(Debug, Default, Serialize)]
struct Verdicts {
    met: usize,
    missed: usize,
    within_noise: usize,
}

#[derive(Debug, Default, Serialize)]
struct Report {
    quick: bool,
    bulk: Vec<BulkRow>,
    latency: Vec<LatencyRow>,
    ablation: Vec<AblationRow>,
    coalescing: Vec<CoalescingRow>,
    scale: Vec<scale::ScaleRow>,
    engine_cost: Option<scale::EngineCost>,
    targets: Vec<Target>,
    /// How many targets were met, missed and within noise.
    verdicts: Verdicts,
    /// When each row's interleaved repeats stop.
    rule: Option<StopRule>,
    /// Where the parties ran and how quiet the machine was.
    conditions: Option<crate::conditions::Conditions>,
    /// The engine's share of time asleep during bulk and latency runs.
    engine_idle_share: Option<f64>,
    /// The engine's share of those runs with the kernel's work for its
    /// sent frames steered to other cores (`--engine-steer`), and how
    /// often that changed.
    engine_steered_share: Option<f64>,
    engine_steer_switches: Option<u64>,
    /// The loss sweep's transfers.
    loss: Vec<loss::LossRow>,
    /// The loss sweep's medians by rate and transfer, over its rounds.
    loss_summary: Vec<loss::LossSummary>,
    /// The command that runs the loss sweep as it ran.
    loss_command: Option<String>,
    /// BondingPlus (`bond`): E1–E6 and their targets.
    bond: Option<bond::BondReport>,
    /// The spin sweep: the ping-pong by spin budgets, with its CPU.
    spin: Vec<spin::SpinRow>,
    /// Unmodified servers on softoe and on Linux.
    apps: Vec<apps::AppRow>,
    /// The command that runs the apps scenario as it ran.
    apps_command: Option<String>,
    /// Killed programs' sessions: how long the engine took to reclaim them
    /// (the machine as it was, then beside busy threads).
    reclaim: Vec<reclaim::Reclaim>,
    plots: Vec<PathBuf>,
}

/// What one `softoe bench` runs, worked out from its options before
/// anything starts.
struct Plan {
    /// The scenarios named (`--only`, positional); none: the default set.
    named: Vec<String>,
    bytes: u64,
    rounds: usize,
    sizes: &'static [usize],
    delays: &'static [u64],
    scale_max: usize,
    counts: Vec<usize>,
    bond: bond::Options,
    loss: loss::Options,
    spin: spin::Options,
    apps: apps::Options,
    apps_secs: f64,
    /// When each row's interleaved repeats stop.
    rule: StopRule,
}

impl Plan {
    fn new(args: &BenchArgs) -> Result<Plan> {
        let bytes = args
            .bytes
            .unwrap_or(if args.quick { 256 << 20 } else { 1 << 30 });
        let rounds = args.rounds.unwrap_or(if args.quick { 300 } else { 5000 });
        if bytes < 8 * WRITE as u64 || rounds == 0 {
            bail!("--bytes must be at least 512K and --rounds above zero");
        }
        let scale_max = args
            .scale_max
            .unwrap_or(if args.quick { 1000 } else { 10_000 });
        let apps_secs = args.apps_secs.unwrap_or(if args.quick { 2.0 } else { 5.0 });
        let apps = apps::Options {
            secs: Duration::try_from_secs_f64(apps_secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| anyhow!("--apps-secs must be a number of seconds above zero"))?,
            conns: args.apps_conns,
        };
        if args.apps_conns == 0 {
            bail!("--apps-conns must be above zero");
        }
        let plan = Plan {
            named: args.only.iter().chain(&args.scenarios).cloned().collect(),
            bytes,
            rounds,
            sizes: if args.quick {
                &[4, 1024, 65_536]
            } else {
                &[4, 64, 1024, 4096, 16_384, 65_536, 262_144]
            },
            delays: if args.quick {
                &[0, 13, 50, 100]
            } else {
                &[0, 5, 10, 13, 25, 50, 75, 100]
            },
            scale_max,
            counts: [1, 100, 1000, 10_000]
                .into_iter()
                .filter(|&n| n <= scale_max)
                .collect(),
            bond: bond_options(args),
            loss: loss_options(args)?,
            spin: spin::Options {
                engine_us: args.spin_engine_us.clone(),
                app_us: args.spin_app_us.clone(),
                rounds,
            },
            apps,
            apps_secs,
            rule: args.repeat.rule(args.quick)?,
        };
        if plan.want("loss") {
            plan.loss.validate()?;
        }
        Ok(plan)
    }

    /// Whether scenario `s` runs. The loss sweep and the bond's
    /// experiments take minutes: they run when named.
    fn want(&self, s: &str) -> bool {
        if self.named.is_empty() {
            s != "loss" && s != "bond" && s != "spin" && s != "apps"
        } else {
            self.named.iter().any(|o| o == s)
        }
    }

    /// The progress bar's length: the runs of every scenario that runs.
    fn runs(&self) -> u64 {
        let n = |s: &str, runs: u64| if self.want(s) { runs } else { 0 };
        n("bulk", 4)
            + n("latency", self.sizes.len() as u64)
            + n("ablation", 8)
            + n("coalescing", self.delays.len() as u64)
            + n("scale", 2 * self.counts.len() as u64 + 1)
            + n("loss", self.loss.runs())
            + n("bond", self.bond.runs())
            + n("spin", self.spin.runs())
            + n("apps", self.apps.runs())
            + n("reclaim", 1)
    }
}

fn bond_options(args: &BenchArgs) -> bond::Options {
    let mut bond = bond::Options::new(args.quick, args.rt_samples);
    if !args.bond_exp.is_empty() {
        bond.experiments = args.bond_exp.clone();
    }
    bond.rt_fifo = args.bond_rt_fifo;
    if !args.bond_members.is_empty() {
        bond.members = args.bond_members.iter().map(|&n| usize::from(n)).collect();
    }
    bond
}

fn loss_options(args: &BenchArgs) -> Result<loss::Options> {
    Ok(loss::Options {
        reps: args.loss_reps,
        rates: args.loss.clone(),
        ms_rates: if args.no_ms_rtt {
            Vec::new()
        } else {
            args.loss_ms_rtt.clone()
        },
        bytes: args
            .loss_bytes
            .unwrap_or(if args.quick { 8 << 20 } else { 64 << 20 }),
        limit: Duration::try_from_secs_f64(args.loss_secs.unwrap_or(if args.quick {
            4.0
        } else {
            10.0
        }))
        .map_err(|_| anyhow!("--loss-secs must be a number of seconds"))?,
        linux_cc: args.linux_cc.clone(),
        flow_order: !args.loss_veth_reorder,
    })
}

/// The testbed every scenario builds, from the engine's options.
fn bed_options(args: &BenchArgs) -> Result<BedOptions> {
    if let Some(nice) = args.engine_nice {
        softoe_engine::engine::check_nice(nice)
            .map_err(|e| anyhow!("cannot run the engine at nice {nice}: {e}"))?;
    }
    Ok(BedOptions {
        cpu: args.engine_cpu,
        nice: args.engine_nice,
        spin: args.engine_spin_us.map(Duration::from_micros),
        steer: args.engine_steer.map(Into::into).unwrap_or_default(),
        pcap: args.pcap.clone(),
        port: if args.port == "xdp" {
            crate::bed::BedPort::Xdp
        } else {
            crate::bed::BedPort::Tap
        },
        ..BedOptions::default()
    })
}

/// `softoe bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(config) = &args.emulate {
        crate::conditions::refuse_pins(&args.conditions, "--emulate (it places the engine only)")?;
        return emulate::run(&emulate::EmulateArgs {
            config,
            set: &args.set,
            calibration: args.calibration.as_deref(),
            quick: args.quick,
            json: args.json,
            engine_cpu: args.engine_cpu,
            rule: args.repeat.rule(args.quick)?,
        });
    }
    let plan = Plan::new(args)?;
    let exe = std::env::current_exe().context("where is this binary?")?;
    let pb = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    if let Ok(st) = ProgressStyle::with_template("{spinner} [{bar:20}] {pos}/{len} {msg}") {
        pb.set_style(st.progress_chars("=> "));
    }
    pb.set_message("building the testbed and starting the softoe engine");
    let base = bed_options(args)?;
    let placement = args.conditions.placement(args.engine_cpu)?;
    let before = args.conditions.settle(&pb)?;
    pb.set_length(plan.runs());
    let mut report = Report {
        quick: args.quick,
        rule: Some(plan.rule),
        conditions: Some(crate::conditions::Conditions::new(placement, before)),
        ..Report::default()
    };
    let b = Bench {
        args,
        plan: &plan,
        base: &base,
        exe: &exe,
        pb: &pb,
    };
    run_small(&b, &mut report)?;
    run_long(&b, &mut report)?;
    report.targets = targets(&report);
    targets::settle(&mut report.targets);
    let (met, missed, within_noise) = targets::tally(&report.targets);
    report.verdicts = Verdicts {
        met,
        missed,
        within_noise,
    };
    report.plots = plots(&report, &args.plots)?;
    pb.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// What every scenario runs with.
struct Bench<'a> {
    args: &'a BenchArgs,
    plan: &'a Plan,
    base: &'a BedOptions,
    exe: &'a Path,
    pb: &'a ProgressBar,
}

/// Where the bulk and ping-pong rows' parties run.
fn placement_of(b: &Bench<'_>) -> crate::place::Placement {
    crate::place::Placement {
        engine: b.args.engine_cpu,
        client: b.args.conditions.pin_client,
        servers: b.args.conditions.pin_servers,
    }
}

/// The default scenarios: bulk, ping-pong, ablation, coalescing, scale.
fn run_small(b: &Bench<'_>, report: &mut Report) -> Result<()> {
    let (bytes, rounds) = (b.plan.bytes, b.plan.rounds);
    if b.plan.want("bulk") || b.plan.want("latency") {
        let p = paired::Paired {
            base: b.base,
            exe: b.exe,
            bytes,
            rounds,
            sizes: b.plan.sizes,
            rule: &b.plan.rule,
            place: placement_of(b),
            want_bulk: b.plan.want("bulk"),
            want_latency: b.plan.want("latency"),
        };
        paired::bulk_and_latency(&p, report, b.pb)?;
    }
    // The small scenarios move a quarter of the bulk bytes per point.
    let small = (bytes / 4).max(8 * WRITE as u64);
    if b.plan.want("ablation") {
        report.ablation = ablation(b.base, b.exe, (small, rounds), &b.plan.rule, b.pb)?;
    }
    if b.plan.want("coalescing") {
        report.coalescing = coalescing(
            b.base,
            b.exe,
            b.plan.delays,
            (small, rounds),
            &b.plan.rule,
            b.pb,
        )?;
    }
    if b.plan.want("scale") {
        let load_for = Duration::from_millis(if b.args.quick { 500 } else { 2000 });
        report.scale = scale::run(
            b.base,
            b.exe,
            &b.plan.counts,
            load_for,
            rounds.min(5000),
            &b.plan.rule,
            b.pb,
        )?;
        b.pb.set_message("scale: the engine's cost per request, spin off");
        report.engine_cost = Some(scale::engine_cost(
            b.base,
            b.exe,
            b.plan.scale_max.clamp(1, 100),
            load_for,
            &b.plan.rule,
        )?);
        b.pb.inc(1);
    }
    Ok(())
}

/// The scenarios that run when named: loss, bond, spin, apps; and reclaim.
fn run_long(b: &Bench<'_>, report: &mut Report) -> Result<()> {
    if b.plan.want("loss") {
        report.loss = loss::run(b.base, b.exe, &b.plan.loss, b.pb)?;
        report.loss_summary = loss::summarize(&report.loss);
        report.loss_command = Some(b.plan.loss.command());
    }
    if b.plan.want("bond") {
        if !crate::bed::is_root() {
            bail!("bench bond builds network namespaces, bridges and TAP devices: run it as root");
        }
        report.bond = Some(bond::run(&b.plan.bond, b.pb)?);
    }
    if b.plan.want("spin") {
        report.spin = spin::run(b.base, b.exe, &b.plan.spin, b.pb)?;
    }
    if b.plan.want("apps") {
        report.apps = apps::run(b.base, b.exe, &b.plan.apps, &b.plan.rule, b.pb)?;
        let r = &b.plan.rule;
        report.apps_command = Some(format!(
            "softoe bench --only apps --apps-secs {} --apps-conns {} --min-rounds {} \
             --max-rounds {} --width {} --row-secs {}",
            b.plan.apps_secs,
            b.args.apps_conns,
            r.min_rounds,
            r.max_rounds,
            r.rel_width * 100.0,
            r.max_time.as_secs_f64()
        ));
    }
    if b.plan.want("reclaim") {
        let n = b
            .args
            .reclaim_programs
            .unwrap_or(if b.args.quick { 100 } else { 400 });
        let load = b.args.reclaim_load.unwrap_or_else(|| {
            2 * std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        });
        report.reclaim = reclaim::run(b.base, b.exe, n, load, b.pb)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn plan(argv: &[&str]) -> Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))?;
        Plan::new(&cli.bench)
    }

    #[test]
    fn the_default_set_leaves_the_long_scenarios_out() {
        let p = plan(&["--quick"]).unwrap();
        assert!(p.want("bulk") && p.want("scale") && p.want("reclaim"));
        assert!(!p.want("loss") && !p.want("bond") && !p.want("spin") && !p.want("apps"));
        assert_eq!((p.bytes, p.rounds), (256 << 20, 300));
        assert_eq!(p.counts, [1, 100, 1000]);
        // bulk 4 rows of 4 systems, latency 3 sizes, ablation 8 engines,
        // coalescing 4 delays, scale 2 × 3 counts + 1, reclaim 1.
        assert_eq!(p.runs(), 4 + 3 + 8 + 4 + 7 + 1);
    }

    #[test]
    fn named_scenarios_run_alone_and_count_alone() {
        let p = plan(&["--quick", "--only", "bulk", "latency"]).unwrap();
        assert!(p.want("bulk") && p.want("latency") && !p.want("scale"));
        assert_eq!(p.runs(), 4 + 3);
        let p = plan(&["--quick", "ablation"]).unwrap();
        assert!(p.want("ablation") && !p.want("bulk"));
        assert_eq!(p.runs(), 8);
        assert_eq!(plan(&["--quick", "apps"]).unwrap().runs(), 4);
    }

    #[test]
    fn bad_sizes_and_durations_are_refused_before_anything_runs() {
        let e = plan(&["--rounds", "0"]).err().unwrap();
        assert!(format!("{e}").contains("--rounds above zero"), "{e}");
        let e = plan(&["--apps-conns", "0"]).err().unwrap();
        assert!(format!("{e}").contains("--apps-conns"), "{e}");
        let e = plan(&["--apps-secs", "0"]).err().unwrap();
        assert!(format!("{e}").contains("--apps-secs"), "{e}");
    }
}

/// Rows as the scenarios make them, for the targets' and renderers' tests.
#[cfg(test)]
pub(super) mod fixtures {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::stats::Stopped;

    fn fig(xs: &[f64]) -> Figure {
        Figure::of(xs).unwrap()
    }

    pub(in crate::bench) fn repeats(n: usize) -> repeat::Repeats {
        repeat::Repeats {
            rounds: n,
            stopped: Stopped::Converged,
            secs: 1.0,
        }
    }

    /// A bulk row whose rounds measured `(gbps, app, engine)` each.
    pub(in crate::bench) fn bulk(
        system: &str,
        direction: &'static str,
        runs: &[(f64, f64, f64)],
    ) -> BulkRow {
        let g: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let a: Vec<f64> = runs.iter().map(|r| r.1).collect();
        let e: Vec<f64> = runs.iter().map(|r| r.2).collect();
        let figures = BulkFigures {
            gbps: fig(&g),
            app_s_per_gib: fig(&a),
            engine_s_per_gib: fig(&e),
            machine_s_per_gib: fig(&vec![0.0; runs.len()]),
        };
        BulkRow {
            system: system.into(),
            direction,
            conns: 1,
            bytes: 1 << 30,
            gbps: figures.gbps.estimate.median,
            app_s_per_gib: figures.app_s_per_gib.estimate.median,
            engine_s_per_gib: figures.engine_s_per_gib.estimate.median,
            machine_s_per_gib: 0.0,
            figures,
            vs_linux: None,
            repeats: repeats(runs.len()),
            busy: None,
        }
    }

    /// A ping-pong row whose rounds measured `(p50, p99)` µs each.
    pub(in crate::bench) fn latency(system: &str, size: usize, runs: &[(f64, f64)]) -> LatencyRow {
        let p50: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let p99: Vec<f64> = runs.iter().map(|r| r.1).collect();
        let figures = LatencyFigures {
            p50_us: fig(&p50),
            p99_us: fig(&p99),
            p999_us: fig(&p99),
            mean_us: fig(&p50),
            host_cpu_pct: fig(&vec![10.0; runs.len()]),
        };
        LatencyRow {
            system: system.into(),
            size,
            rounds: 100,
            p50_us: figures.p50_us.estimate.median,
            p99_us: figures.p99_us.estimate.median,
            p999_us: figures.p99_us.estimate.median,
            mean_us: figures.p50_us.estimate.median,
            mbps: size as f64,
            host_cpu_pct: 10.0,
            figures,
            p50_vs_linux: None,
            repeats: repeats(runs.len()),
            busy: None,
        }
    }
}
