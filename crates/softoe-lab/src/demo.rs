//! `softoe demo`: softoe beside Linux on a real (virtual) wire.
//!
//! A testbed of network namespaces joined by a Linux bridge: the softoe
//! engine on a TAP (with TSO, checksum offload and receive coalescing)
//! serving a separate program — `softoe demo-servers`, attached over shared
//! memory through `softoe-host`, as any host program would be — a Linux
//! host that runs the workloads, and a second Linux host that serves the
//! same workloads with the kernel's TCP. Each workload runs against softoe
//! and against Linux in turn, a few rounds each way round (softoe first,
//! then Linux first, …), over the same bridge; one table shows both
//! medians, the median of the rounds' ratios and the range it came from,
//! and whether that range leaves one side ahead.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::bench::repeat::interleaved;
use crate::linux;
use crate::stats::{Estimate, Goal, StopRule, Verdict, median, paired_ratios, verdict};
use crate::table::Table;
use crate::units::{size_whole, value};

use crate::bed::{ENGINE, PEER, RealBed};
use crate::server::{
    DISCARD, ECHO, Length, Listen, Policy, Program, SOURCE, Servers, Service, Serving, Until,
};
use softoe_engine::EngineCounters;
use softoe_testbed::Netns;

/// The port of the source for the drop test.
const DROP_SOURCE: u16 = 20;

/// Options of `softoe demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Bytes per bulk transfer (suffixes K, M, G); each row runs --runs
    /// of them on each side.
    #[arg(long, default_value = "64M", value_parser = crate::units::parse_size)]
    bytes: u64,
    /// Bytes per transfer with 1 % drops.
    #[arg(long, default_value = "16M", value_parser = crate::units::parse_size)]
    drop_bytes: u64,
    /// Request/response round trips per latency run.
    #[arg(long, default_value_t = 1000)]
    rounds: usize,
    /// Runs of every workload on each side, softoe and Linux in turn (the
    /// first in alternate rounds): the table's figures are their medians,
    /// its ratio the median of the rounds' ratios with the range of them.
    /// Five give a range that holds the true median ratio 94 % of the
    /// time; more narrow it (2 to 50).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=50))]
    runs: u32,
    /// Write every frame the engine sends and receives to this pcap file.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Run the simulated demo instead (no root needed): two softoe stacks
    /// over lossy virtual wires.
    #[arg(long)]
    simulated: bool,
}

/// Options of the hidden `softoe demo-servers`: the demo's servers, a
/// separate program on the engine or on Linux's TCP.
#[derive(Debug, Args)]
pub struct ServersArgs {
    /// The engine's host socket; without it, serve on the kernel's TCP.
    #[arg(long)]
    engine: Option<PathBuf>,
    /// The address to listen on (default: the engine's).
    #[arg(long, default_value_t = ENGINE)]
    addr: Ipv4Addr,
    /// Bytes the bulk source sends.
    #[arg(long)]
    bytes: u64,
    /// Bytes the source for the drop test sends.
    #[arg(long)]
    drop_bytes: u64,
    /// On the kernel's TCP: this congestion control on every listener.
    #[arg(long)]
    cc: Option<String>,
    /// Runs of each workload: connections each listener serves.
    #[arg(long, default_value_t = 1)]
    runs: usize,
}

/// The demo's servers, on the engine from this process over shared memory
/// or on the kernel's TCP: discard (port 9, two connections a run), sources
/// (19 and 20, one connection a run each, 1 MiB writes), echo (7, one
/// connection a run).
/// Prints `ready` when all listen; returns when all are served.
pub fn servers(args: &ServersArgs) -> Result<()> {
    let source = |bytes| Service::Source {
        len: Length::Fixed(bytes),
        write: 1 << 20,
    };
    let listen = |port, service, conns| Listen {
        port,
        service,
        conns: Some(conns),
    };
    Program {
        engine: args.engine.clone(),
        addr: args.addr,
        cc: args.cc.clone(),
        backlog: 16,
        policy: Policy::Default,
        serving: Serving::Each(vec![
            listen(DISCARD, Service::Discard, 2 * args.runs),
            listen(SOURCE, source(args.bytes), args.runs),
            listen(DROP_SOURCE, source(args.drop_bytes), args.runs),
            listen(ECHO, Service::Echo, args.runs),
        ]),
        until: Until::Served,
    }
    .run()
}

/// Starts `softoe demo-servers` — on the engine at `host`, or (`None`) on
/// Linux's TCP in namespace `ns` — and waits until it listens.
fn start_servers(
    host: Option<&std::path::Path>,
    ns: &Netns,
    bytes: u64,
    drop_bytes: u64,
    runs: u32,
) -> Result<Servers> {
    let exe = std::env::current_exe().context("where is this binary?")?;
    let mut cmd = match host {
        Some(h) => {
            let mut c = Command::new(exe);
            c.arg("demo-servers").arg("--engine").arg(h);
            c
        }
        None => {
            // Linux's sender runs softoe's congestion control (CUBIC), not
            // the machine's default (BBR on many, this one's too), so that
            // the 1 % rows compare loss recovery, not two controllers.
            let mut c = ns.command(&exe.to_string_lossy());
            c.arg("demo-servers")
                .args(["--addr", &PEER.to_string()])
                .args(["--cc", crate::bench::loss::DEFAULT_LINUX_CC]);
            c
        }
    };
    cmd.args([
        "--bytes",
        &bytes.to_string(),
        "--drop-bytes",
        &drop_bytes.to_string(),
        "--runs",
        &runs.to_string(),
    ]);
    Servers::start_as(cmd, "the demo's servers")
}

#[derive(Debug, Serialize)]
struct Row {
    workload: String,
    unit: String,
    /// Medians of the runs.
    softoe: f64,
    linux: f64,
    /// softoe ÷ Linux: the median of the rounds' ratios, and the range
    /// that holds the true one with probability `ratio_interval.coverage`.
    ratio: f64,
    ratio_interval: Estimate,
    better: &'static str,
    /// Who is ahead beyond the range: "softoe", "Linux" or "within noise".
    ahead: &'static str,
    /// Every run, in the order measured.
    softoe_runs: Vec<f64>,
    linux_runs: Vec<f64>,
}

fn gbps(bytes: u64, t: Duration) -> f64 {
    bytes as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9
}

/// `softoe demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    if args.simulated {
        return crate::simulated::demo(&crate::simulated::DemoArgs::new(args.json));
    }
    if !crate::bed::is_root() {
        bail!(
            "softoe demo builds network namespaces, a bridge and a TAP device, which needs root.\n\
             Run it with sudo, or try `softoe demo --simulated` for the simulator's demo."
        );
    }
    if args.bytes == 0 || args.drop_bytes == 0 || args.rounds == 0 {
        bail!("--bytes, --drop-bytes and --rounds must be above zero");
    }
    let steps = 7u64;
    let pb = progress(args.json, steps);
    pb.set_message("building the testbed and starting the softoe engine");
    let mut bed = RealBed::start(crate::bed::BedOptions {
        pcap: args.pcap.clone(),
        ..Default::default()
    })?;
    let (bytes, drop_bytes) = (args.bytes, args.drop_bytes);
    let (client, peer) = (bed.client.clone(), bed.peer.clone());
    pb.set_message("starting the servers on softoe (a separate program)");
    let runs = args.runs;
    let softoe_servers = start_servers(Some(bed.host()), &peer, bytes, drop_bytes, runs)?;
    // Linux's servers: the same program, on the kernel's TCP in the peer's
    // namespace (a separate process on both sides).
    pb.set_message("starting the servers on Linux (the same program)");
    let linux_servers = start_servers(None, &peer, bytes, drop_bytes, runs)?;

    let mut rows = Vec::new();
    rows.extend(bulk_rows(
        &client,
        &pb,
        "bulk ",
        (DISCARD, SOURCE),
        bytes,
        runs,
    )?);
    rows.extend(latency_rows(&client, &pb, args.rounds, runs)?);
    // Drops on the wire, per segment, both ways: the client neither builds
    // nor coalesces super-packets, its bridge port cuts those of softoe and
    // Linux into segments (offloads switched through the ethtool ioctl,
    // no `ethtool` needed), and small eBPF programs drop 1 % of TCP frames
    // as they arrive on either end of the client's link (ingress: loss the
    // sender must repair, not a local transmit error it just retries).
    let off = ["tso", "off", "gso", "off", "gro", "off"];
    bed.tb.ethtool_k(&client, "eth0", &off)?;
    bed.tb.ethtool_k(&bed.sw, &bed.client_port, &off)?;
    bed.tb.lossy_link(&client, &bed.sw, 1.0)?;
    pb.inc(1);
    rows.extend(bulk_rows(
        &client,
        &pb,
        "1 % drops, ",
        (DISCARD, DROP_SOURCE),
        drop_bytes,
        runs,
    )?);
    // What the drop programs on the client's link dropped, both ways.
    let wire_dropped = bed.tb.dropped(&client)? + bed.tb.dropped(&bed.sw)?;
    bed.tb.clear_drop(&client)?;
    bed.tb.clear_drop(&bed.sw)?;
    pb.inc(1);
    pb.set_message("stopping");
    for (servers, side) in [(softoe_servers, "softoe"), (linux_servers, "Linux")] {
        let st = servers
            .finish()
            .with_context(|| format!("waiting for the servers on {side}"))?;
        if !st.success() {
            bail!("the servers on {side} failed: {st}");
        }
    }
    let counters = bed.stop()?;
    pb.finish_and_clear();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "rows": rows,
                "wire_dropped": wire_dropped,
                "engine": counters,
            }))?
        );
        return Ok(());
    }
    print_text(&rows, wire_dropped, &counters);
    Ok(())
}

/// Runs `f` `runs` times against softoe and against Linux in turn (softoe
/// first in even rounds, Linux first in odd ones): (softoe's, Linux's), by
/// round.
fn run_both<T>(
    pb: &ProgressBar,
    msg: &str,
    runs: u32,
    f: &(dyn Fn(Ipv4Addr) -> Result<T> + Sync),
) -> Result<(Vec<T>, Vec<T>)> {
    let rule = StopRule {
        min_rounds: runs as usize,
        max_rounds: runs as usize,
        rel_width: f64::INFINITY,
        max_time: Duration::MAX,
    };
    let mut r = interleaved(
        &rule,
        2,
        |side| {
            let (ip, name) = if side == 0 {
                (ENGINE, "softoe")
            } else {
                (PEER, "Linux")
            };
            pb.set_message(format!("{msg}: {name}"));
            f(ip).with_context(|| format!("{msg} against {name}"))
        },
        |_| Vec::new(),
    )?;
    let linux = r.per_side.pop().unwrap_or_default();
    let softoe = r.per_side.pop().unwrap_or_default();
    Ok((softoe, linux))
}

/// `bytes` to the servers' `sink` port, then from their `source` port,
/// `runs` times each on softoe and Linux in turn: two rows named after
/// `what`.
fn bulk_rows(
    client: &Netns,
    pb: &ProgressBar,
    what: &str,
    (sink, source): (u16, u16),
    bytes: u64,
    runs: u32,
) -> Result<[Row; 2]> {
    let c = client.clone();
    let inbound = move |ip: Ipv4Addr| -> Result<f64> {
        let t = c.run(move || linux::send_bulk(SocketAddrV4::new(ip, sink), bytes))??;
        Ok(gbps(bytes, t))
    };
    let (s, l) = run_both(pb, &format!("{what}to the host"), runs, &inbound)?;
    let to_host = row(
        &format!("{what}Linux→host, {}", size_whole(bytes)),
        "Gb/s",
        s,
        l,
        "higher",
    );
    pb.inc(1);
    let c = client.clone();
    let outbound = move |ip: Ipv4Addr| -> Result<f64> {
        let (n, t) = c.run(move || linux::recv_bulk(SocketAddrV4::new(ip, source)))??;
        if n != bytes {
            bail!("received {n} of {bytes} bytes");
        }
        Ok(gbps(n, t))
    };
    let (s, l) = run_both(pb, &format!("{what}from the host"), runs, &outbound)?;
    let from_host = row(
        &format!("{what}host→Linux, {}", size_whole(bytes)),
        "Gb/s",
        s,
        l,
        "higher",
    );
    pb.inc(1);
    Ok([to_host, from_host])
}

/// 4-byte request/response, `runs` runs of `rounds` round trips each on
/// softoe and Linux in turn: p50 and p99 rows.
fn latency_rows(client: &Netns, pb: &ProgressBar, rounds: usize, runs: u32) -> Result<Vec<Row>> {
    let c = client.clone();
    let rr = move |ip: Ipv4Addr| -> Result<(f64, f64)> {
        let mut r = c.run(move || linux::ping_pong(SocketAddrV4::new(ip, ECHO), 4, rounds))??;
        r.sort();
        Ok((
            linux::percentile_us(&r, 50.0),
            linux::percentile_us(&r, 99.0),
        ))
    };
    let (s, l) = run_both(pb, "4-byte request/response", runs, &rr)?;
    pb.inc(1);
    let p = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| v.iter().map(f).collect::<Vec<_>>();
    Ok(vec![
        row(
            "4-byte RR p50",
            "µs",
            p(&s, |x| x.0),
            p(&l, |x| x.0),
            "lower",
        ),
        row(
            "4-byte RR p99",
            "µs",
            p(&s, |x| x.1),
            p(&l, |x| x.1),
            "lower",
        ),
    ])
}

/// The demo's text: what ran, the table, the wire's drops and the engine's counters.
fn print_text(rows: &[Row], wire_dropped: u64, counters: &EngineCounters) {
    println!(
        "softoe demo: servers in a separate program on the softoe engine (attached over shared"
    );
    println!(
        "memory; the engine on a TAP with TSO, checksum offload, GRO) and the same servers on"
    );
    println!(
        "Linux's TCP (CUBIC, softoe's congestion control), each serving a Linux client across\n\
         one Linux bridge, in turn, {n} runs each. Figures are medians; ratio = softoe ÷\n\
         Linux, the median of the runs' ratios, with the range that holds the true one\n\
         {:.0} % of the time.\n",
        rows.first()
            .map_or(0.0, |r| r.ratio_interval.coverage * 100.0),
        n = rows.first().map_or(0, |r| r.softoe_runs.len()),
    );
    let mut t = Table::new()
        .left("workload")
        .right("softoe")
        .right("Linux")
        .right("ratio")
        .left("range")
        .left("ahead");
    for r in rows {
        t.row_tail(
            [
                r.workload.clone(),
                value(r.softoe, &r.unit),
                value(r.linux, &r.unit),
                format!("{:.2}x", r.ratio),
                format!("{:.2}–{:.2}", r.ratio_interval.lo, r.ratio_interval.hi),
                r.ahead.to_string(),
            ],
            &format!("  ({} is better)", r.better),
        );
    }
    print!("{t}");
    println!(
        "\nthe wire dropped {wire_dropped} TCP frames in the 1 % rows (both ways, softoe and Linux)."
    );
    println!(
        "engine: {} frames in, {} out; asleep {:.0} % of the time (spin-then-sleep on 2 cores).",
        counters.frames_in,
        counters.frames_out,
        counters.idle_share() * 100.0
    );
}

/// The demo's progress bar (hidden under `--json`).
fn progress(hidden: bool, steps: u64) -> ProgressBar {
    let pb = if hidden {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(steps)
    };
    if let Ok(st) = ProgressStyle::with_template("{spinner} [{bar:20}] {pos}/{len} {msg}") {
        pb.set_style(st.progress_chars("=> "));
    }
    pb
}

/// A row from both sides' runs, paired by round.
fn row(workload: &str, unit: &str, softoe: Vec<f64>, linux: Vec<f64>, better: &'static str) -> Row {
    let med = |v: &[f64]| median(v).unwrap_or(0.0);
    let ratios = paired_ratios(&softoe, &linux);
    let e = Estimate::of(&ratios).unwrap_or(Estimate::EMPTY);
    Row {
        workload: workload.to_string(),
        unit: unit.to_string(),
        softoe: med(&softoe),
        linux: med(&linux),
        ratio: e.median,
        ratio_interval: e,
        better,
        ahead: ahead(&e, better == "higher"),
        softoe_runs: softoe,
        linux_runs: linux,
    }
}

/// Who is ahead beyond the ratio's range: softoe where all of it lies on
/// softoe's better side of 1, Linux where all of it lies on the other.
fn ahead(e: &Estimate, higher_is_better: bool) -> &'static str {
    let goal = if higher_is_better {
        Goal::AtLeast(1.0)
    } else {
        Goal::AtMost(1.0)
    };
    match verdict(goal, e) {
        // On 1 exactly is a tie, not a lead.
        Verdict::Met if e.lo != e.hi || e.median != 1.0 => "softoe",
        Verdict::Missed => "Linux",
        _ => "within noise",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_is_ahead_only_beyond_the_runs_range() {
        // Goodput, higher is better: softoe 2× in every run.
        let r = row("bulk", "Gb/s", vec![20.0; 5], vec![10.0; 5], "higher");
        assert_eq!((r.ratio, r.ahead), (2.0, "softoe"));
        // One run the other way round: the range holds 1, no one is ahead.
        let r = row(
            "bulk",
            "Gb/s",
            vec![20.0, 20.0, 20.0, 20.0, 5.0],
            vec![10.0; 5],
            "higher",
        );
        assert_eq!(r.ahead, "within noise");
        assert_eq!((r.ratio_interval.lo, r.ratio_interval.hi), (0.5, 2.0));
        // Latency, lower is better: softoe's round trips all longer.
        let r = row("p50", "µs", vec![30.0; 5], vec![20.0; 5], "lower");
        assert_eq!(r.ahead, "Linux");
        // Alike in every run: a tie.
        let r = row("p50", "µs", vec![20.0; 5], vec![20.0; 5], "lower");
        assert_eq!(r.ahead, "within noise");
        // The runs are kept in the order measured.
        assert_eq!(r.softoe_runs.len(), 5);
    }
}
