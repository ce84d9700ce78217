//! `softoe demo`: softoe beside Linux on a real (virtual) wire.
//!
//! A testbed of network namespaces joined by a Linux bridge: the softoe
//! engine on a TAP (with TSO, checksum offload and receive coalescing)
//! serving a separate program — `softoe demo-servers`, attached over shared
//! memory through `softoe-host`, as any host program would be — a Linux
//! host that runs the workloads, and a second Linux host that serves the
//! same workloads with the kernel's TCP. Each workload runs against softoe
//! and then against Linux, over the same bridge, and one table shows both
//! and their ratio.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::linux;
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
    /// Bytes per bulk transfer (suffixes K, M, G).
    #[arg(long, default_value = "256M", value_parser = crate::units::parse_size)]
    bytes: u64,
    /// Bytes per transfer with 1 % drops (large enough that one 200 ms
    /// timeout does not decide the figure).
    #[arg(long, default_value = "64M", value_parser = crate::units::parse_size)]
    drop_bytes: u64,
    /// Request/response rounds for the latency test.
    #[arg(long, default_value_t = 5000)]
    rounds: usize,
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
}

/// The demo's servers, on the engine from this process over shared memory
/// or on the kernel's TCP: discard (port 9, two connections), sources (19
/// and 20, one connection each, 1 MiB writes), echo (7, one connection).
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
            listen(DISCARD, Service::Discard, 2),
            listen(SOURCE, source(args.bytes), 1),
            listen(DROP_SOURCE, source(args.drop_bytes), 1),
            listen(ECHO, Service::Echo, 1),
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
    ]);
    Servers::start_as(cmd, "the demo's servers")
}

#[derive(Debug, Serialize)]
struct Row {
    workload: String,
    unit: String,
    softoe: f64,
    linux: f64,
    /// softoe ÷ Linux.
    ratio: f64,
    better: &'static str,
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
    let steps = 9u64;
    let pb = progress(args.json, steps);
    pb.set_message("building the testbed and starting the softoe engine");
    let mut bed = RealBed::start(crate::bed::BedOptions {
        pcap: args.pcap.clone(),
        ..Default::default()
    })?;
    let (bytes, drop_bytes) = (args.bytes, args.drop_bytes);
    let (client, peer) = (bed.client.clone(), bed.peer.clone());
    pb.set_message("starting the servers on softoe (a separate program)");
    let softoe_servers = start_servers(Some(bed.host()), &peer, bytes, drop_bytes)?;
    // Linux's servers: the same program, on the kernel's TCP in the peer's
    // namespace (a separate process on both sides).
    pb.set_message("starting the servers on Linux (the same program)");
    let linux_servers = start_servers(None, &peer, bytes, drop_bytes)?;

    let mut rows = Vec::new();
    rows.extend(bulk_rows(&client, &pb, "bulk ", (DISCARD, SOURCE), bytes)?);
    rows.extend(latency_rows(&client, &pb, args.rounds)?);
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

/// Runs `f` against softoe, then against Linux: (softoe's, Linux's).
fn run_both(
    pb: &ProgressBar,
    msg: &str,
    f: &(dyn Fn(Ipv4Addr) -> Result<f64> + Sync),
) -> Result<(f64, f64)> {
    pb.set_message(format!("{msg}: softoe"));
    let s = f(ENGINE).with_context(|| format!("{msg} against softoe"))?;
    pb.inc(1);
    pb.set_message(format!("{msg}: Linux"));
    let l = f(PEER).with_context(|| format!("{msg} against Linux"))?;
    Ok((s, l))
}

/// `bytes` to the servers' `sink` port, then from their `source` port,
/// softoe then Linux each: two rows named after `what`.
fn bulk_rows(
    client: &Netns,
    pb: &ProgressBar,
    what: &str,
    (sink, source): (u16, u16),
    bytes: u64,
) -> Result<[Row; 2]> {
    let c = client.clone();
    let inbound = move |ip: Ipv4Addr| -> Result<f64> {
        let t = c.run(move || linux::send_bulk(SocketAddrV4::new(ip, sink), bytes))??;
        Ok(gbps(bytes, t))
    };
    let (s, l) = run_both(pb, &format!("{what}to the host"), &inbound)?;
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
    let (s, l) = run_both(pb, &format!("{what}from the host"), &outbound)?;
    let from_host = row(
        &format!("{what}host→Linux, {}", size_whole(bytes)),
        "Gb/s",
        s,
        l,
        "higher",
    );
    Ok([to_host, from_host])
}

/// 4-byte request/response, softoe then Linux: p50 and p99 rows.
fn latency_rows(client: &Netns, pb: &ProgressBar, rounds: usize) -> Result<Vec<Row>> {
    let mut lat = Vec::new();
    let c = client;
    for ip in [ENGINE, PEER] {
        pb.inc(1);
        pb.set_message(format!(
            "4-byte request/response with {}",
            if ip == ENGINE { "softoe" } else { "Linux" }
        ));
        let mut r = c.run(move || linux::ping_pong(SocketAddrV4::new(ip, ECHO), 4, rounds))??;
        r.sort();
        lat.push((
            linux::percentile_us(&r, 50.0),
            linux::percentile_us(&r, 99.0),
        ));
    }
    Ok(vec![
        row("4-byte RR p50", "µs", lat[0].0, lat[1].0, "lower"),
        row("4-byte RR p99", "µs", lat[0].1, lat[1].1, "lower"),
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
         one Linux bridge. ratio = softoe ÷ Linux.\n"
    );
    let mut t = Table::new()
        .left("workload")
        .right("softoe")
        .right("Linux")
        .right("ratio");
    for r in rows {
        t.row_tail(
            [
                r.workload.clone(),
                value(r.softoe, &r.unit),
                value(r.linux, &r.unit),
                format!("{:.2}x", r.ratio),
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

fn row(workload: &str, unit: &str, softoe: f64, linux: f64, better: &'static str) -> Row {
    Row {
        workload: workload.to_string(),
        unit: unit.to_string(),
        softoe,
        linux,
        ratio: if linux > 0.0 { softoe / linux } else { 0.0 },
        better,
    }
}
