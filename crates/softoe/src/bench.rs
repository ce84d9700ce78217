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
//! of softoe and Linux as senders and receivers (see `bench_loss.rs`).

use std::io::{BufRead, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use softoe_host::SendPolicy;
use tracing::debug;

use crate::bed::{BedOptions, ENGINE, PEER, RealBed};
use crate::bench_loss::{CHECKED_SINK, PATTERN_SOURCE, checked_sink, pattern_source};
use crate::linux::{self, Acceptor};
use crate::plot::{self, Series};

const DISCARD: u16 = 9;
const SOURCE: u16 = 19;
pub(crate) const ECHO: u16 = 7;
/// The sink that reads in sizes the client chooses: an 8-byte read size
/// (little-endian) first, then it discards to the end.
pub(crate) const SIZED_SINK: u16 = 11;
/// The source that writes in sizes the client chooses: a length and a
/// write size (8 bytes each, little-endian), then that many bytes.
pub(crate) const SIZED_SOURCE: u16 = 21;
/// The largest read or write the sized sink and source make.
const MAX_IO: u64 = 16 << 20;
/// The application's write size in bulk runs.
const WRITE: usize = 64 * 1024;

/// The scenarios `softoe bench` knows.
const SCENARIOS: [&str; 7] = [
    "bulk",
    "latency",
    "ablation",
    "coalescing",
    "scale",
    "loss",
    "bond",
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
    #[arg(long, value_parser = crate::sim::parse_size)]
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
    /// Which scenarios to run (default: all but loss and bond): bulk,
    /// latency, ablation, coalescing, scale, loss (the drop-rate sweep,
    /// minutes long: named only), bond (BondingPlus, E1–E6 of issue 16,
    /// named only; its E6 drops ARP+ frames with an eBPF program, no nft
    /// needed).
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
    #[arg(long, value_parser = crate::sim::parse_size)]
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
    #[arg(long, default_value = crate::bench_loss::DEFAULT_LINUX_CC)]
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
    /// How long the real-wire engine spins for work before it sleeps, µs
    /// (default: the engine's 50): longer trades a core for wake-up time.
    #[arg(long)]
    engine_spin_us: Option<u64>,
    /// Write every frame the engine sends and receives to this pcap file
    /// (tcpdump and Wireshark read it; each testbed the run builds appends
    /// its own engine's frames, so name one scenario with --only).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// The largest connection count of the scale scenario (1, 100, 1,000
    /// and 10,000 up to this; default 10000, 1000 with --quick).
    #[arg(long)]
    scale_max: Option<usize>,
}

/// Options of the hidden `softoe bench-servers`.
#[derive(Debug, Args)]
pub struct ServersArgs {
    /// Serve on the engine attached at this socket; without it, on the
    /// kernel's TCP.
    #[arg(long)]
    engine: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long)]
    addr: Ipv4Addr,
    /// Send policy on the engine: copy, overlap or zerocopy (region
    /// buffers sent by reference, for the source).
    #[arg(long, default_value = "overlap")]
    policy: String,
    /// Serve only the scale scenario's echo (one thread waiting for every
    /// connection at once), sized for this many connections.
    #[arg(long)]
    scale: Option<usize>,
    /// On the kernel's TCP: this congestion control on every listener
    /// (and so every connection it accepts); the namespace's default when
    /// absent.
    #[arg(long)]
    cc: Option<String>,
}

/// Discards what it reads.
fn discard(c: impl Read) -> std::io::Result<()> {
    discard_in(c, 1 << 20)
}

/// Discards what it reads, `size` bytes per read at most.
fn discard_in(mut c: impl Read, size: usize) -> std::io::Result<()> {
    let mut buf = vec![0u8; size];
    while c.read(&mut buf)? > 0 {}
    Ok(())
}

/// An 8-byte little-endian number from the client.
fn read_u64(c: &mut impl Read) -> std::io::Result<u64> {
    let mut n = [0u8; 8];
    c.read_exact(&mut n)?;
    Ok(u64::from_le_bytes(n))
}

/// A read or write size the client asked for, checked.
fn io_size(n: u64) -> std::io::Result<usize> {
    if (1..=MAX_IO).contains(&n) {
        Ok(n as usize)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a read or write size must be 1 to {MAX_IO} bytes, got {n}"),
        ))
    }
}

/// The sized sink: a read size, then discard in reads of that size.
fn sized_sink(mut c: impl Read) -> std::io::Result<()> {
    let size = io_size(read_u64(&mut c)?)?;
    discard_in(c, size)
}

/// Reads a length (8 bytes, little-endian), sends that many bytes in
/// 64 KiB writes, and closes.
fn source(mut c: impl Read + Write) -> std::io::Result<()> {
    let left = read_u64(&mut c)?;
    send_in_writes(c, left, WRITE)
}

/// The sized source: a length and a write size, then that many bytes in
/// writes of that size.
fn sized_source(mut c: impl Read + Write) -> std::io::Result<()> {
    let left = read_u64(&mut c)?;
    let write = io_size(read_u64(&mut c)?)?;
    send_in_writes(c, left, write)
}

/// Sends `left` bytes in `write`-byte writes.
fn send_in_writes(mut c: impl Write, mut left: u64, write: usize) -> std::io::Result<()> {
    let buf = vec![0x3cu8; write];
    while left > 0 {
        let k = left.min(write as u64) as usize;
        c.write_all(&buf[..k])?;
        left -= k as u64;
    }
    Ok(())
}

/// `source` with the `zerocopy` policy: 16 buffers of 64 KiB in the
/// shared region, filled once, each sent by reference and reused when the
/// engine says the peer acknowledged it.
fn source_zerocopy(mut c: softoe_host::TcpStream) -> std::io::Result<()> {
    let mut n = [0u8; 8];
    c.read_exact(&mut n)?;
    let mut left = u64::from_le_bytes(n);
    let client = c.client().clone();
    let mut bufs = (0..16)
        .map(|_| client.zc_buf(WRITE))
        .collect::<std::io::Result<Vec<_>>>()?;
    for b in &mut bufs {
        b.write_at(0, &[0x3c; WRITE])?;
    }
    let mut i = 0;
    while left > 0 {
        let b = &mut bufs[i % 16];
        b.wait_released()?;
        let k = left.min(WRITE as u64) as usize;
        left -= c.send_zerocopy(b, k)? as u64;
        i += 1;
    }
    for b in &mut bufs {
        b.wait_released()?;
    }
    Ok(())
}

/// Echoes everything.
fn echo(mut c: impl Read + Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let k = c.read(&mut buf)?;
        if k == 0 {
            return Ok(());
        }
        c.write_all(&buf[..k])?;
    }
}

/// Accepts for ever on `l`, one thread per connection.
fn serve<L>(l: L, prepare: fn(&mut L::Conn), handle: fn(L::Conn) -> std::io::Result<()>)
where
    L: Acceptor + Send + 'static,
    L::Conn: Send + 'static,
{
    std::thread::spawn(move || {
        loop {
            match l.take() {
                Ok(mut c) => {
                    prepare(&mut c);
                    std::thread::spawn(move || {
                        if let Err(e) = handle(c) {
                            debug!(error = %e, "a benchmark connection failed");
                        }
                    });
                }
                Err(e) => {
                    eprintln!("softoe bench-servers: accept failed: {e}");
                    return;
                }
            }
        }
    });
}

/// `softoe bench-servers`: discard, source and echo on one address until
/// killed. Prints `ready` when all listen.
pub fn servers(args: &ServersArgs) -> Result<()> {
    let at = |port| SocketAddrV4::new(args.addr, port);
    let open = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    if let Some(n) = args.scale {
        let (addr, open2) = (args.addr, open.clone());
        let serve: Box<dyn FnOnce() -> Result<()> + Send> = match &args.engine {
            Some(path) => {
                // Small rings: 10,000 sockets' rings in one data area.
                let sockets = u32::try_from(n + 64)
                    .ok()
                    .filter(|&k| k <= 65_536)
                    .ok_or_else(|| anyhow!("--scale {n}: at most 65,472 connections"))?;
                let cfg = softoe_host::Config {
                    path: path.clone(),
                    sockets,
                    rx_ring: 16 << 10,
                    tx_ring: 4 << 10,
                    data_len: u64::from(sockets) * (20 << 10) + (16 << 20),
                    ..softoe_host::Config::default()
                };
                let c = softoe_host::Client::attach_with(cfg)
                    .with_context(|| format!("attaching to {}", path.display()))?;
                Box::new(move || crate::scale::serve_softoe(&c, addr, open2))
            }
            None => Box::new(move || crate::scale::serve_linux(addr, open2)),
        };
        std::thread::spawn(move || {
            if let Err(e) = serve() {
                eprintln!("softoe bench-servers: the scale echo failed: {e:#}");
                std::process::exit(1);
            }
        });
        // Its listener is up within a moment; a failure exits the process.
        std::thread::sleep(Duration::from_millis(50));
    } else {
        serve_all(args, at)?;
    }
    println!("ready");
    std::io::stdout().flush()?;
    // The bench asks for this process's CPU time before and after each
    // run (the clock counts every thread, also those that ended), and for
    // the connections the scale echo serves.
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "cpu" => println!("cpu {}", own_cpu().as_nanos()),
            "conns" => println!("conns {}", open.load(std::sync::atomic::Ordering::Relaxed)),
            _ => continue,
        }
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// Discard, source and echo, and the loss sweep's patterned source and
/// checking sink, one thread per connection.
fn serve_all(args: &ServersArgs, at: impl Fn(u16) -> SocketAddrV4) -> Result<()> {
    match &args.engine {
        Some(path) => {
            let c = softoe_host::Client::attach_to(path)
                .with_context(|| format!("attaching to {}", path.display()))?;
            let listen = |port| {
                c.tcp_listen(at(port), 128)
                    .with_context(|| format!("listening on port {port}"))
            };
            let (d, s, e) = (listen(DISCARD)?, listen(SOURCE)?, listen(ECHO)?);
            let (ps, cs) = (listen(PATTERN_SOURCE)?, listen(CHECKED_SINK)?);
            let (zs, zk) = (listen(SIZED_SOURCE)?, listen(SIZED_SINK)?);
            let prepare: fn(&mut softoe_host::TcpStream) = match args.policy.as_str() {
                "copy" => |c| c.set_send_policy(SendPolicy::Copy),
                "overlap" | "zerocopy" => |c| c.set_send_policy(SendPolicy::Overlap),
                other => bail!("--policy {other}: use copy, overlap or zerocopy"),
            };
            serve(d, prepare, discard);
            if args.policy == "zerocopy" {
                serve(s, prepare, source_zerocopy);
            } else {
                serve(s, prepare, source);
            }
            serve(e, |c| drop(c.set_nodelay(true)), echo);
            serve(ps, prepare, pattern_source);
            serve(cs, prepare, checked_sink);
            serve(zs, prepare, sized_source);
            serve(zk, prepare, sized_sink);
        }
        None => {
            let listen = |port| -> Result<std::net::TcpListener> {
                let l = std::net::TcpListener::bind(at(port))
                    .with_context(|| format!("listening on port {port}"))?;
                if let Some(cc) = &args.cc {
                    linux::set_congestion(&l, cc)?;
                }
                Ok(l)
            };
            let (d, s, e) = (listen(DISCARD)?, listen(SOURCE)?, listen(ECHO)?);
            let (ps, cs) = (listen(PATTERN_SOURCE)?, listen(CHECKED_SINK)?);
            let (zs, zk) = (listen(SIZED_SOURCE)?, listen(SIZED_SINK)?);
            serve(zs, |_| {}, sized_source);
            serve(zk, |_| {}, sized_sink);
            serve(d, |_| {}, discard);
            serve(s, |_| {}, source);
            serve(e, |c| drop(c.set_nodelay(true)), echo);
            serve(ps, |_| {}, pattern_source);
            serve(cs, |_| {}, checked_sink);
        }
    }
    Ok(())
}

/// This process's CPU time: every thread's user and system time, also of
/// threads that have ended, in nanoseconds.
#[allow(unsafe_code)]
fn own_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a
    // constant every Linux has.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut ts) };
    if r != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// A servers process, killed when dropped; it answers `cpu` on its stdin
/// with its CPU time.
pub(crate) struct Servers {
    child: Child,
    ask: std::process::ChildStdin,
    answers: mpsc::Receiver<String>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Servers {
    pub(crate) fn start(mut cmd: Command) -> Result<Servers> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the benchmark's servers")?;
        let (Some(out), Some(ask)) = (child.stdout.take(), child.stdin.take()) else {
            let _ = child.kill();
            bail!("no pipes to the servers");
        };
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut servers = Servers {
            child,
            ask,
            answers,
        };
        match servers.answers.recv_timeout(Duration::from_secs(10)) {
            Ok(l) if l.trim() == "ready" => Ok(servers),
            _ => {
                let st = servers.child.try_wait().ok().flatten();
                bail!("the benchmark's servers did not start ({st:?}); see their error above")
            }
        }
    }

    /// Waits (up to 30 s) until the number of connections the servers
    /// serve satisfies `ok`.
    pub(crate) fn wait_conns(&mut self, ok: impl Fn(usize) -> bool) -> Result<()> {
        let t = Instant::now();
        loop {
            writeln!(self.ask, "conns").context("asking the servers")?;
            self.ask.flush()?;
            let line = self
                .answers
                .recv_timeout(Duration::from_secs(10))
                .map_err(|_| anyhow!("the servers did not say their connections"))?;
            let n: usize = line
                .strip_prefix("conns ")
                .and_then(|n| n.trim().parse().ok())
                .ok_or_else(|| anyhow!("odd answer from the servers: {line:?}"))?;
            if ok(n) {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!("the servers serve {n} connections after 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The servers' CPU time so far.
    pub(crate) fn cpu(&mut self) -> Result<Duration> {
        writeln!(self.ask, "cpu").context("asking the servers for their CPU time")?;
        self.ask.flush()?;
        let line = self
            .answers
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| anyhow!("the servers did not say their CPU time"))?;
        line.strip_prefix("cpu ")
            .and_then(|n| n.trim().parse().ok())
            .map(Duration::from_nanos)
            .ok_or_else(|| anyhow!("odd answer from the servers: {line:?}"))
    }
}

/// `/proc/stat` counts in USER_HZ ticks, 100 a second on every Linux (a
/// fixed part of the kernel's user ABI, whatever the kernel's own HZ).
fn ticks(n: u64) -> Duration {
    Duration::from_millis(n.saturating_mul(10))
}

/// Run time of thread `tid` of this process, from its `schedstat` (ns).
pub(crate) fn thread_cpu(tid: i32) -> Result<Duration> {
    schedstat_run(&format!("/proc/self/task/{tid}/schedstat"))
}

/// The run time (first field) of the `schedstat` at `path`.
fn schedstat_run(path: &str) -> Result<Duration> {
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_nanos)
        .ok_or_else(|| anyhow!("odd schedstat in {path}: {s:?}"))
}

/// Thread `tid`'s scheduler record (`schedstat`): time on a CPU, time
/// waiting on a run queue, and time slices run.
pub(crate) fn thread_sched(tid: i32) -> Result<(Duration, Duration, u64)> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .with_context(|| format!("reading the schedstat of thread {tid}"))?;
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    match v[..] {
        [run, wait, slices, ..] => Ok((
            Duration::from_nanos(run),
            Duration::from_nanos(wait),
            slices,
        )),
        _ => Err(anyhow!("odd schedstat: {s:?}")),
    }
}

/// User and system time of thread `tid` of this process, from its `stat`
/// (fields 14 and 15, in USER_HZ ticks: 10 ms resolution).
pub(crate) fn thread_user_sys(tid: i32) -> Result<(Duration, Duration)> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .with_context(|| format!("reading the stat of thread {tid}"))?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after its closing one.
    let rest = s
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("odd stat"))?;
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    match f[..] {
        [u, s] => Ok((ticks(u), ticks(s))),
        _ => bail!("odd stat: {s}"),
    }
}

/// Busy CPU time of the whole machine (all cores), from `/proc/stat`.
fn machine_cpu() -> Result<Duration> {
    let s = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = s
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| anyhow!("no cpu line in /proc/stat"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Ok(ticks(total.saturating_sub(idle)))
}

/// CPU counters at one moment.
#[derive(Clone, Copy)]
struct Cpu {
    app: Duration,
    engine: Duration,
    machine: Duration,
}

impl Cpu {
    fn now(app: &mut Servers, engine_tid: i32) -> Result<Cpu> {
        Ok(Cpu {
            app: app.cpu()?,
            engine: thread_cpu(engine_tid)?,
            machine: machine_cpu()?,
        })
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            app: self.app.saturating_sub(before.app),
            engine: self.engine.saturating_sub(before.engine),
            machine: self.machine.saturating_sub(before.machine),
        }
    }
}

/// One bulk run.
#[derive(Debug, Serialize)]
struct BulkRow {
    system: String,
    direction: &'static str,
    conns: usize,
    bytes: u64,
    gbps: f64,
    /// CPU seconds per GiB: the server program, the engine thread (0 for
    /// Linux), the whole machine.
    app_s_per_gib: f64,
    engine_s_per_gib: f64,
    machine_s_per_gib: f64,
}

/// One message size of the ping-pong sweep.
#[derive(Debug, Serialize)]
struct LatencyRow {
    system: String,
    size: usize,
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
}

/// A target (of issue 6, or 16 for the bond), as a ratio.
#[derive(Debug, Serialize)]
pub(crate) struct Target {
    pub what: String,
    /// A ratio to Linux, unless `unit` names something else.
    pub ratio: f64,
    /// "x" (a ratio) or the unit of `ratio` (e.g. "cycles").
    pub unit: &'static str,
    pub goal: &'static str,
    pub met: bool,
}

/// One row of the ablation (HL-TCP Table 3's structure).
#[derive(Debug, Serialize)]
struct AblationRow {
    offloads: &'static str,
    policy: &'static str,
    coalescing: bool,
    rr4_p50_us: f64,
    /// One connection, host→Linux.
    bulk_gbps: f64,
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
}

#[derive(Debug, Default, Serialize)]
struct Report {
    quick: bool,
    bulk: Vec<BulkRow>,
    latency: Vec<LatencyRow>,
    ablation: Vec<AblationRow>,
    coalescing: Vec<CoalescingRow>,
    scale: Vec<crate::scale::ScaleRow>,
    engine_cost: Option<crate::scale::EngineCost>,
    targets: Vec<Target>,
    /// The engine's share of time asleep during bulk and latency runs.
    engine_idle_share: Option<f64>,
    /// The loss sweep's transfers.
    loss: Vec<crate::bench_loss::LossRow>,
    /// The loss sweep's medians by rate and transfer, over its rounds.
    loss_summary: Vec<crate::bench_loss::LossSummary>,
    /// The command that runs the loss sweep as it ran.
    loss_command: Option<String>,
    /// BondingPlus (`bond`): E1–E6 and their targets.
    bond: Option<crate::bench_bond::BondReport>,
    plots: Vec<PathBuf>,
}

/// Sends `bytes` over `conns` connections at once to a discard server.
fn bulk_in(addr: SocketAddrV4, bytes: u64, conns: usize) -> Result<Duration> {
    bulk_in_with(addr, bytes, conns, WRITE, None).map(|r| r.wall)
}

/// What a bulk client's run took: the wall time of all its connections,
/// and the CPU its threads ran (with the kernel's work on them: softirqs
/// that ran in their system calls) in how many data calls.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientRun {
    pub wall: Duration,
    pub cpu: Duration,
    pub calls: u64,
}

/// The calling thread's run time, from `/proc/thread-self/schedstat`.
fn own_thread_cpu() -> Result<Duration> {
    schedstat_run("/proc/thread-self/schedstat")
}

/// Joins client threads that each return their CPU and calls.
fn join_clients(
    t: Instant,
    hs: Vec<std::thread::JoinHandle<Result<(Duration, u64)>>>,
) -> Result<ClientRun> {
    let (mut cpu, mut calls) = (Duration::ZERO, 0);
    for h in hs {
        let (c, n) = h.join().map_err(|_| anyhow!("a client panicked"))??;
        cpu += c;
        calls += n;
    }
    Ok(ClientRun {
        wall: t.elapsed(),
        cpu,
        calls,
    })
}

/// Sends `bytes` over `conns` connections at once in `write`-byte writes;
/// with `read_size`, to the sized sink, which reads that much per call.
pub(crate) fn bulk_in_with(
    addr: SocketAddrV4,
    bytes: u64,
    conns: usize,
    write: usize,
    read_size: Option<u64>,
) -> Result<ClientRun> {
    let each = bytes / conns as u64;
    let t = Instant::now();
    let hs: Vec<_> = (0..conns)
        .map(|_| {
            std::thread::spawn(move || -> Result<(Duration, u64)> {
                let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
                    .with_context(|| format!("connect {addr}"))?;
                if let Some(r) = read_size {
                    s.write_all(&r.to_le_bytes())?;
                }
                let buf = vec![0x5au8; write];
                let mut left = each;
                let (cpu0, mut calls) = (own_thread_cpu()?, 0);
                while left > 0 {
                    let k = left.min(write as u64) as usize;
                    s.write_all(&buf[..k]).context("write")?;
                    left -= k as u64;
                    calls += 1;
                }
                let cpu = own_thread_cpu()?.saturating_sub(cpu0);
                s.shutdown(Shutdown::Write)?;
                let mut rest = Vec::new();
                s.read_to_end(&mut rest)
                    .context("waiting for the server to close")?;
                Ok((cpu, calls))
            })
        })
        .collect();
    join_clients(t, hs)
}

/// Receives `bytes` over `conns` connections at once from a source server.
fn bulk_out(addr: SocketAddrV4, bytes: u64, conns: usize) -> Result<Duration> {
    bulk_out_with(addr, bytes, conns, None).map(|r| r.wall)
}

/// Receives `bytes` over `conns` connections at once; with `write`, from
/// the sized source, which writes that much per call.
pub(crate) fn bulk_out_with(
    addr: SocketAddrV4,
    bytes: u64,
    conns: usize,
    write: Option<u64>,
) -> Result<ClientRun> {
    let each = bytes / conns as u64;
    let t = Instant::now();
    let hs: Vec<_> = (0..conns)
        .map(|_| {
            std::thread::spawn(move || -> Result<(Duration, u64)> {
                let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
                    .with_context(|| format!("connect {addr}"))?;
                s.write_all(&each.to_le_bytes())?;
                if let Some(w) = write {
                    s.write_all(&w.to_le_bytes())?;
                }
                let mut buf = vec![0u8; 1 << 20];
                let mut n = 0u64;
                let (cpu0, mut calls) = (own_thread_cpu()?, 0);
                loop {
                    let k = s.read(&mut buf).context("read")?;
                    if k == 0 {
                        break;
                    }
                    n += k as u64;
                    calls += 1;
                }
                let cpu = own_thread_cpu()?.saturating_sub(cpu0);
                if n != each {
                    bail!("received {n} of {each} bytes");
                }
                Ok((cpu, calls))
            })
        })
        .collect();
    join_clients(t, hs)
}

fn per_gib(d: Duration, bytes: u64) -> f64 {
    d.as_secs_f64() / (bytes as f64 / f64::from(1u32 << 30))
}

/// The command that starts `softoe bench-servers`: on the engine at
/// `engine`, or on Linux in namespace `ns`.
pub(crate) fn servers_cmd(
    exe: &std::path::Path,
    engine: Option<&std::path::Path>,
    ns: &softoe_testbed::Netns,
    ip: Ipv4Addr,
    policy: &str,
) -> Command {
    let mut c = match engine {
        Some(_) => Command::new(exe),
        None => ns.command(&exe.to_string_lossy()),
    };
    c.arg("bench-servers")
        .args(["--addr", &ip.to_string(), "--policy", policy]);
    if let Some(p) = engine {
        c.arg("--engine").arg(p);
    }
    c
}

/// The 4-byte ping-pong's p50 and p99 (µs) against the echo at `ip`.
fn rr4(bed: &RealBed, ip: Ipv4Addr, rounds: usize) -> Result<(f64, f64)> {
    let mut r = bed
        .client
        .run(move || linux::ping_pong(SocketAddrV4::new(ip, ECHO), 4, rounds))??;
    r.sort();
    Ok((
        linux::percentile_us(&r, 50.0),
        linux::percentile_us(&r, 99.0),
    ))
}

/// Goodput of one connection each way (Gb/s): Linux→host, host→Linux.
fn bulk_pair(bed: &RealBed, ip: Ipv4Addr, bytes: u64) -> Result<(f64, f64)> {
    let g = |t: Duration| bytes as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9;
    let t_in = bed
        .client
        .run(move || bulk_in(SocketAddrV4::new(ip, DISCARD), bytes, 1))??;
    let t_out = bed
        .client
        .run(move || bulk_out(SocketAddrV4::new(ip, SOURCE), bytes, 1))??;
    Ok((g(t_in), g(t_out)))
}

/// Offloads × send policy × coalescing: the 4-byte round trip and one
/// connection's goodput from the host, each row on a fresh engine.
fn ablation(
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
const COALESCE_ON: Duration = Duration::from_micros(13);

/// The coalescing sweep: receive-interrupt and wake-up delay together,
/// 4-byte round trip and goodput each way, each point on a fresh engine.
fn coalescing(
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

/// What one system serves, and how to start it.
struct System {
    name: String,
    ip: Ipv4Addr,
    softoe: bool,
    cmd: Command,
}

/// `softoe bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(config) = &args.emulate {
        return crate::bench_emulate::run(&crate::bench_emulate::EmulateArgs {
            config,
            set: &args.set,
            calibration: args.calibration.as_deref(),
            quick: args.quick,
            json: args.json,
            engine_cpu: args.engine_cpu,
        });
    }
    let bytes = args
        .bytes
        .unwrap_or(if args.quick { 256 << 20 } else { 1 << 30 });
    let rounds = args.rounds.unwrap_or(if args.quick { 300 } else { 5000 });
    if bytes < 8 * WRITE as u64 || rounds == 0 {
        bail!("--bytes must be at least 512K and --rounds above zero");
    }
    let sizes: &[usize] = if args.quick {
        &[4, 1024, 65_536]
    } else {
        &[4, 64, 1024, 4096, 16_384, 65_536, 262_144]
    };
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
    let base = BedOptions {
        cpu: args.engine_cpu,
        spin: args.engine_spin_us.map(Duration::from_micros),
        pcap: args.pcap.clone(),
        ..BedOptions::default()
    };
    // The loss sweep and the bond's experiments take minutes: they run
    // when named.
    let named: Vec<&String> = args.only.iter().chain(&args.scenarios).collect();
    let want = |s: &str| {
        if named.is_empty() {
            s != "loss" && s != "bond"
        } else {
            named.iter().any(|o| *o == s)
        }
    };
    let mut bond = crate::bench_bond::Options::new(args.quick, args.rt_samples);
    if !args.bond_exp.is_empty() {
        bond.experiments = args.bond_exp.clone();
    }
    bond.rt_fifo = args.bond_rt_fifo;
    if !args.bond_members.is_empty() {
        bond.members = args.bond_members.iter().map(|&n| usize::from(n)).collect();
    }
    let loss = crate::bench_loss::Options {
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
    };
    if want("loss") {
        loss.validate()?;
    }
    let delays: &[u64] = if args.quick {
        &[0, 13, 50, 100]
    } else {
        &[0, 5, 10, 13, 25, 50, 75, 100]
    };
    let scale_max = args
        .scale_max
        .unwrap_or(if args.quick { 1000 } else { 10_000 });
    let counts: Vec<usize> = [1, 100, 1000, 10_000]
        .into_iter()
        .filter(|&n| n <= scale_max)
        .collect();
    let bulk_runs = if want("bulk") { 4u64 } else { 0 };
    let sweep = if want("latency") {
        sizes.len() as u64
    } else {
        0
    };
    pb.set_length(
        4 * bulk_runs
            + 2 * sweep
            + if want("ablation") { 24 } else { 0 }
            + if want("coalescing") {
                delays.len() as u64
            } else {
                0
            }
            + if want("scale") {
                2 * counts.len() as u64 + 1
            } else {
                0
            }
            + if want("loss") { loss.runs() } else { 0 }
            + if want("bond") { bond.runs() } else { 0 },
    );
    let mut report = Report {
        quick: args.quick,
        ..Report::default()
    };
    if want("bulk") || want("latency") {
        bulk_and_latency(
            &base,
            &exe,
            bytes,
            rounds,
            sizes,
            (want("bulk"), want("latency")),
            &mut report,
            &pb,
        )?;
    }
    // The small scenarios move a quarter of the bulk bytes per point.
    let small = (bytes / 4).max(8 * WRITE as u64);
    if want("ablation") {
        report.ablation = ablation(&base, &exe, small, rounds, &pb)?;
    }
    if want("coalescing") {
        report.coalescing = coalescing(&base, &exe, delays, small, rounds, &pb)?;
    }
    if want("scale") {
        let load_for = Duration::from_millis(if args.quick { 500 } else { 2000 });
        report.scale = crate::scale::run(&base, &exe, &counts, load_for, rounds.min(5000), &pb)?;
        pb.set_message("scale: the engine's cost per request, spin off");
        report.engine_cost = Some(crate::scale::engine_cost(
            &base,
            &exe,
            scale_max.clamp(1, 100),
            load_for,
        )?);
        pb.inc(1);
    }
    if want("loss") {
        report.loss = crate::bench_loss::run(&base, &exe, &loss, &pb)?;
        report.loss_summary = crate::bench_loss::summarize(&report.loss);
        report.loss_command = Some(loss.command());
    }
    if want("bond") {
        if !crate::bed::is_root() {
            bail!("bench bond builds network namespaces, bridges and TAP devices: run it as root");
        }
        report.bond = Some(crate::bench_bond::run(&bond, &pb)?);
    }
    report.targets = targets(&report);
    report.plots = plots(&report, &args.plots)?;
    pb.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// The bulk and latency scenarios, on one testbed: every system's bulk
/// runs (`want_bulk`) and the ping-pong sweep by message size
/// (`want_latency`), into `report`.
#[allow(clippy::too_many_arguments)]
fn bulk_and_latency(
    base: &BedOptions,
    exe: &std::path::Path,
    bytes: u64,
    rounds: usize,
    sizes: &[usize],
    (want_bulk, want_latency): (bool, bool),
    report: &mut Report,
    pb: &ProgressBar,
) -> Result<()> {
    let mut bed = RealBed::start(base.clone())?;
    let servers_on = |engine: Option<&std::path::Path>, ip: Ipv4Addr, policy: &str| {
        servers_cmd(exe, engine, &bed.peer, ip, policy)
    };
    let systems = vec![
        System {
            name: "softoe overlap".into(),
            ip: ENGINE,
            softoe: true,
            cmd: servers_on(Some(bed.host()), ENGINE, "overlap"),
        },
        System {
            name: "softoe copy".into(),
            ip: ENGINE,
            softoe: true,
            cmd: servers_on(Some(bed.host()), ENGINE, "copy"),
        },
        System {
            name: "softoe zerocopy".into(),
            ip: ENGINE,
            softoe: true,
            cmd: servers_on(Some(bed.host()), ENGINE, "zerocopy"),
        },
        System {
            name: "Linux".into(),
            ip: PEER,
            softoe: false,
            cmd: servers_on(None, PEER, "overlap"),
        },
    ];
    let tid = bed.engine_tid;
    for sys in systems {
        pb.set_message(format!("starting the servers ({})", sys.name));
        let mut servers = Servers::start(sys.cmd)?;
        let runs: &[(&'static str, usize)] = if want_bulk {
            &[
                ("Linux→host", 1),
                ("host→Linux", 1),
                ("Linux→host", 8),
                ("host→Linux", 8),
            ]
        } else {
            &[]
        };
        for &(direction, conns) in runs {
            pb.set_message(format!("bulk {direction}, {conns} conn, {}", sys.name));
            let (ip, c) = (sys.ip, bed.client.clone());
            let before = Cpu::now(&mut servers, tid)?;
            let t = if direction == "Linux→host" {
                c.run(move || bulk_in(SocketAddrV4::new(ip, DISCARD), bytes, conns))??
            } else {
                c.run(move || bulk_out(SocketAddrV4::new(ip, SOURCE), bytes, conns))??
            };
            // The server's threads end a moment after the client sees the
            // end of the stream.
            std::thread::sleep(Duration::from_millis(20));
            let cpu = Cpu::now(&mut servers, tid)?.since(before);
            let moved = bytes / conns as u64 * conns as u64;
            report.bulk.push(BulkRow {
                system: sys.name.clone(),
                direction,
                conns,
                bytes: moved,
                gbps: moved as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9,
                app_s_per_gib: per_gib(cpu.app, moved),
                engine_s_per_gib: if sys.softoe {
                    per_gib(cpu.engine, moved)
                } else {
                    0.0
                },
                machine_s_per_gib: per_gib(cpu.machine, moved),
            });
            pb.inc(1);
        }
        if want_latency && (sys.name == "softoe overlap" || !sys.softoe) {
            for &size in sizes {
                pb.set_message(format!("ping-pong {size} B, {}", sys.name));
                let n = rounds.min((64usize << 20) / size).max(100.min(rounds));
                let (ip, c) = (sys.ip, bed.client.clone());
                let before = Cpu::now(&mut servers, tid)?;
                let t = Instant::now();
                let mut r =
                    c.run(move || linux::ping_pong(SocketAddrV4::new(ip, ECHO), size, n))??;
                let wall = t.elapsed();
                let cpu = Cpu::now(&mut servers, tid)?.since(before);
                r.sort();
                let mean = r.iter().sum::<Duration>().as_secs_f64() / r.len().max(1) as f64;
                report.latency.push(LatencyRow {
                    system: sys.name.clone(),
                    size,
                    rounds: n,
                    p50_us: linux::percentile_us(&r, 50.0),
                    p99_us: linux::percentile_us(&r, 99.0),
                    p999_us: linux::percentile_us(&r, 99.9),
                    mean_us: mean * 1e6,
                    mbps: size as f64 * 8.0 / (mean / 2.0).max(1e-9) / 1e6,
                    host_cpu_pct: cpu.app.as_secs_f64() / wall.as_secs_f64().max(1e-9) * 100.0,
                });
                pb.inc(1);
            }
        }
        drop(servers);
    }
    pb.set_message("stopping");
    let counters = bed.stop()?;
    report.engine_idle_share = Some(counters.idle_share());
    Ok(())
}

/// The sweeps' plots, written into `dir`.
fn plots(r: &Report, dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut out = crate::bench_loss::plots(&r.loss, dir)?;
    if let Some(b) = &r.bond {
        out.extend(crate::bench_bond::plots(b, dir)?);
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
        let line = |sys: &str, f: &dyn Fn(&crate::scale::ScaleRow) -> f64| Series {
            name: sys.to_string(),
            points: r
                .scale
                .iter()
                .filter(|x| x.system == sys)
                .map(|x| (x.conns as f64, f(x)))
                .collect(),
        };
        let p = dir.join("scale-latency.svg");
        let held = |sys: &str, q: &str, f: &dyn Fn(&crate::scale::ScaleRow) -> f64| Series {
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

fn find<'a>(r: &'a Report, system: &str, direction: &str, conns: usize) -> Option<&'a BulkRow> {
    r.bulk
        .iter()
        .find(|b| b.system == system && b.direction == direction && b.conns == conns)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Issue 6's targets, from what was measured.
fn targets(r: &Report) -> Vec<Target> {
    let mut t = Vec::new();
    let li = "Linux";
    // Bulk targets for the policies of unmodified programs (copy, the
    // default, and overlap) and for programs that use zero-copy buffers.
    for (so, tag) in [
        ("softoe copy", "copy"),
        ("softoe overlap", "overlap"),
        ("softoe zerocopy", "zerocopy"),
    ] {
        if let (Some(s), Some(l)) = (find(r, so, "host→Linux", 1), find(r, li, "host→Linux", 1))
        {
            let x = ratio(s.app_s_per_gib, l.app_s_per_gib);
            t.push(Target {
                what: format!("host program CPU per byte, bulk send ({tag})"),
                ratio: x,
                unit: "x",
                goal: "≤ 0.05",
                met: x <= 0.05,
            });
        }
        for dir in ["host→Linux", "Linux→host"] {
            if let (Some(s), Some(l)) = (find(r, so, dir, 1), find(r, li, dir, 1)) {
                let x = ratio(s.gbps, l.gbps);
                t.push(Target {
                    what: format!("goodput, 1 connection, {dir} ({tag})"),
                    ratio: x,
                    unit: "x",
                    goal: "≥ 1.0 (aim 1.2)",
                    met: x >= 1.0,
                });
                // Goodput per CPU-second of the whole serving side: engine
                // + program for softoe, the program (with its kernel time)
                // for Linux.
                let ss = s.app_s_per_gib + s.engine_s_per_gib;
                let x = ratio(l.app_s_per_gib, ss);
                t.push(Target {
                    what: format!("goodput per CPU-second, {dir} ({tag})"),
                    ratio: x,
                    unit: "x",
                    goal: "≥ 1.0",
                    met: x >= 1.0,
                });
            }
        }
    }
    scale_targets(r, &mut t);
    let p50 = |sys: &str| {
        r.latency
            .iter()
            .find(|l| l.system == sys && l.size == 4)
            .map(|l| l.p50_us)
    };
    if let (Some(s), Some(l)) = (p50("softoe overlap"), p50(li)) {
        let x = ratio(s, l);
        t.push(Target {
            what: "4-byte request/response p50".into(),
            ratio: x,
            unit: "x",
            goal: "≤ 1.0 (aim 0.8)",
            met: x <= 1.0,
        });
    }
    t
}

/// The scale scenario's targets: connections held, p99 at 10,000 against
/// p99 at 1,000, and the engine's cycles per 64-byte request.
fn scale_targets(r: &Report, t: &mut Vec<Target>) {
    let row = |n: usize| {
        r.scale
            .iter()
            .find(|x| x.system == "softoe" && x.conns == n)
    };
    let Some(most) = r
        .scale
        .iter()
        .filter(|x| x.system == "softoe")
        .map(|x| x.conns)
        .max()
    else {
        return;
    };
    t.push(Target {
        what: "connections held (softoe)".into(),
        ratio: most as f64,
        unit: "conns",
        goal: "≥ 10000",
        met: most >= 10_000,
    });
    if let (Some(a), Some(b)) = (row(10_000), row(1000)) {
        let x = ratio(a.held_p99_us, b.held_p99_us);
        t.push(Target {
            what: "p99 at 10,000 connections ÷ p99 at 1,000 (softoe)".into(),
            ratio: x,
            unit: "x",
            goal: "≤ 1.2",
            met: x <= 1.2,
        });
    }
    if let Some(c) = &r.engine_cost
        && c.user_cycles > 0.0
    {
        t.push(Target {
            what: format!(
                "engine cycles per 64-byte request, user ({} conns)",
                c.conns
            ),
            ratio: c.user_cycles,
            unit: "cycles",
            goal: "≤ 1500",
            met: c.user_cycles <= 1500.0,
        });
    }
}

/// The report as text tables.
fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let only_bond = r.bond.is_some()
        && r.bulk.is_empty()
        && r.latency.is_empty()
        && r.ablation.is_empty()
        && r.coalescing.is_empty()
        && r.scale.is_empty()
        && r.loss.is_empty();
    if !only_bond {
        let _ = writeln!(
            o,
            "softoe bench{}: servers in a separate program on the softoe engine (shared memory)\n\
         and on Linux's TCP, each driven by one Linux client over one bridge.\n\
         CPU: seconds per GiB moved — the server program (user+system), the engine\n\
         thread, the whole machine (both cores, /proc/stat).\n",
            if r.quick { " --quick" } else { "" }
        );
    }
    // Each table only when its scenario ran (`--only`).
    if !r.bulk.is_empty() {
        let _ = writeln!(
            o,
            "{:<16} {:<11} {:>5} {:>8} {:>10} {:>10} {:>10}",
            "bulk", "direction", "conns", "Gb/s", "app s/GiB", "eng s/GiB", "all s/GiB"
        );
    }
    for b in &r.bulk {
        let _ = writeln!(
            o,
            "{:<16} {:<11} {:>5} {:>8.2} {:>10.3} {:>10.3} {:>10.3}",
            b.system,
            b.direction,
            b.conns,
            b.gbps,
            b.app_s_per_gib,
            b.engine_s_per_gib,
            b.machine_s_per_gib
        );
    }
    if !r.latency.is_empty() {
        let _ = writeln!(
            o,
            "\n{:<16} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "ping-pong", "size", "p50 µs", "p99 µs", "p99.9 µs", "mean µs", "Mb/s", "host CPU"
        );
    }
    for l in &r.latency {
        let _ = writeln!(
            o,
            "{:<16} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7.0}%",
            l.system, l.size, l.p50_us, l.p99_us, l.p999_us, l.mean_us, l.mbps, l.host_cpu_pct
        );
    }
    if !r.targets.is_empty() {
        let _ = writeln!(
            o,
            "\n{:<50} {:>8}  {:<16}",
            "target (softoe ÷ Linux)", "ratio", "goal"
        );
    }
    for t in &r.targets {
        let _ = writeln!(
            o,
            "{:<50} {:>8}  {:<16} {}",
            t.what,
            if t.unit == "x" {
                format!("{:.2}x", t.ratio)
            } else {
                format!("{:.0} {}", t.ratio, t.unit)
            },
            t.goal,
            if t.met { "met" } else { "missed" }
        );
    }
    if let Some(idle) = r.engine_idle_share {
        let _ = writeln!(
            o,
            "\nengine asleep {:.0} % of the run (spin-then-sleep).",
            idle * 100.0
        );
    }
    if !r.ablation.is_empty() {
        let _ = writeln!(
            o,
            "\nablation (softoe; HL-TCP Table 3's structure): 4-byte p50 µs / one connection host→Linux Gb/s"
        );
        let _ = writeln!(
            o,
            "{:<18} {:<9} {:>16} {:>16}",
            "offloads", "policy", "coalescing off", "coalescing on"
        );
        for a in r.ablation.iter().filter(|a| !a.coalescing) {
            let on = r
                .ablation
                .iter()
                .find(|b| b.coalescing && b.offloads == a.offloads && b.policy == a.policy);
            let cell = |x: &AblationRow| format!("{:.1} / {:.2}", x.rr4_p50_us, x.bulk_gbps);
            let _ = writeln!(
                o,
                "{:<18} {:<9} {:>16} {:>16}",
                a.offloads,
                a.policy,
                cell(a),
                on.map_or_else(String::new, cell)
            );
        }
    }
    if !r.coalescing.is_empty() {
        let _ = writeln!(
            o,
            "\n{:<14} {:>10} {:>10} {:>14} {:>14}",
            "coalescing µs", "p50 µs", "p99 µs", "Linux→host", "host→Linux"
        );
        for c in &r.coalescing {
            let _ = writeln!(
                o,
                "{:<14} {:>10.1} {:>10.1} {:>10.2} Gb/s {:>9.2} Gb/s",
                c.delay_us, c.rr4_p50_us, c.rr4_p99_us, c.in_gbps, c.out_gbps
            );
        }
    }
    if !r.scale.is_empty() {
        let _ = writeln!(
            o,
            "\nscale: 64-byte echoes; load = every connection busy, held = one flow among idle ones"
        );
        let _ = writeln!(
            o,
            "{:<8} {:>6} {:>9} {:>12} {:>6} {:>8} {:>7} {:>12} {:>12} {:>11} {:>9}",
            "system",
            "conns",
            "kreq/s",
            "load p99 µs",
            "fair",
            "retrans",
            "drops",
            "held p50 µs",
            "held p99 µs",
            "eng µs/req",
            "KiB/conn"
        );
        for x in &r.scale {
            let _ = writeln!(
                o,
                "{:<8} {:>6} {:>9.1} {:>12.1} {:>6.2} {:>8} {:>7} {:>12.1} {:>12.1} {:>11.2} {:>9.1}",
                x.system,
                x.conns,
                x.rps / 1e3,
                x.load_p99_us,
                x.load_fairness,
                x.load_retrans,
                x.port_drops,
                x.held_p50_us,
                x.held_p99_us,
                x.engine_ns_per_rpc / 1e3,
                x.engine_kib_per_conn
            );
        }
        let _ = writeln!(
            o,
            "(fair: Jain's index of the requests each connection got under load, 1 = all alike;\n \
             retrans: segments the client host retransmitted under load; drops: frames the\n \
             kernel dropped on their way to the engine (its TAP queue full);\n \
             eng µs/req: the engine thread's CPU per request, idle spinning included)"
        );
    }
    if let Some(c) = &r.engine_cost {
        let _ = writeln!(
            o,
            "\nengine cost per 64-byte request (spin off, {} conns, {} requests): user {:.0} ns \
             ({:.0} cycles), system {:.0} ns (the TAP's reads and writes, which run the bridge\n\
             and the Linux client's receive path, doorbells, sleeping)",
            c.conns, c.requests, c.user_ns, c.user_cycles, c.sys_ns
        );
    }
    if !r.loss.is_empty() {
        o.push_str(&crate::bench_loss::render(
            &r.loss,
            r.loss_command
                .as_deref()
                .unwrap_or("softoe bench --only loss"),
        ));
    }
    if let Some(b) = &r.bond {
        o.push_str(&crate::bench_bond::render(b));
    }
    for p in &r.plots {
        let _ = writeln!(o, "plot: {}", p.display());
    }
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_the_machine_is_busy() {
        // Spin until the kernel has charged this thread 20 ms, however busy
        // the machine (a fixed 30 ms of wall time got less than 10 ms of CPU
        // in a loaded CI run), for at most 10 s.
        let tid = crate::bed::this_thread_id().unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while thread_cpu(tid).unwrap() < Duration::from_millis(20)
            && t.elapsed() < Duration::from_secs(10)
        {
            // 5 ms of pure user time between looks at /proc (reading it is
            // system time, and looking too often left no user time to see).
            let chunk = Instant::now();
            while chunk.elapsed() < Duration::from_millis(5) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        assert!(own_cpu() >= Duration::from_millis(10));
        assert!(thread_cpu(tid).unwrap() >= Duration::from_millis(10));
        let (user, _sys) = thread_user_sys(tid).unwrap();
        assert!(user >= Duration::from_millis(10), "{user:?}");
        assert!(machine_cpu().unwrap() > Duration::ZERO);
    }

    #[test]
    fn targets_compare_softoe_with_linux() {
        let row = |system: &str, direction: &'static str, gbps: f64, app: f64, eng: f64| BulkRow {
            system: system.into(),
            direction,
            conns: 1,
            bytes: 1 << 30,
            gbps,
            app_s_per_gib: app,
            engine_s_per_gib: eng,
            machine_s_per_gib: 0.0,
        };
        let mut r = Report {
            bulk: vec![
                row("softoe overlap", "host→Linux", 12.0, 0.01, 0.3),
                row("Linux", "host→Linux", 10.0, 0.5, 0.0),
            ],
            ..Report::default()
        };
        let t = targets(&r);
        assert_eq!(t[0].what, "host program CPU per byte, bulk send (overlap)");
        assert!((t[0].ratio - 0.02).abs() < 1e-9 && t[0].met);
        assert!((t[1].ratio - 1.2).abs() < 1e-9 && t[1].met);
        // 0.5 ÷ (0.01 + 0.3): Linux spends more per byte than softoe's two.
        assert!((t[2].ratio - 0.5 / 0.31).abs() < 1e-9 && t[2].met);
        // No Linux→host rows and no latency rows: no targets from them.
        assert_eq!(t.len(), 3);
        r.targets = t;
        let text = render(&r);
        assert!(
            text.contains("host program CPU per byte, bulk send (overlap)")
                && text.contains("0.02x"),
            "{text}"
        );
    }
}
