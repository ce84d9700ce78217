//! The scale scenario of `softoe bench`: 1, 100, 1,000 and 10,000
//! connections held at once by one server program, on softoe and on Linux.
//!
//! Both servers are one thread that waits for many sockets at once — on
//! softoe a [`softoe_host::Selector`] (the engine marks the sockets it
//! changed in a bitmap in the shared region), on Linux `epoll` (through
//! mio) — and echo what they read (the server program's `--scale` mode,
//! `crate::server::many`). The Linux client opens every connection,
//! then measures two things:
//!
//! - **load**: every connection keeps one 64-byte request outstanding for a
//!   fixed time (a closed loop per connection): requests per second, and
//!   the round trips' p99 under that load (it grows with the queue, N
//!   requests deep, on any server);
//! - **held**: the connections stay open and idle while one more connection
//!   ping-pongs 64 bytes: p50 and p99. It starts once the load's tail has
//!   crossed (no TCP segment in or out of the client host for 200 ms,
//!   [`quiet_tcp`]), and the engine's CPU and wake-ups per round trip are
//!   counted beside it. This is what holding N connections
//!   costs a flow among them — the target compares p99 at 10,000
//!   with p99 at 1,000.
//!
//! For softoe it also reports the engine thread's CPU time per request
//! under load and the engine's memory per connection: the growth of its
//! process's anonymous resident memory from before the connections to
//! after the load. And it measures the engine's own cost per request
//! ([`EngineCost`]) on an engine that does not spin: its CPU time is then
//! all work, split into user time (the protocol and the host interface) and
//! system time (the port's reads and writes — which on this testbed run the
//! bridge and the Linux client's receive path inside the engine's writes to
//! the TAP — and sleeping). Cycles are at the CPU's nominal clock, as
//! `perf stat` does not count cycles in these VMs.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use serde::Serialize;

/// The scale echo's port.
pub const PORT: u16 = crate::server::SCALE_ECHO;
/// Request and response size.
pub const MSG: usize = 64;

/// One connection count, one system.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    /// "softoe" or "Linux".
    pub system: String,
    /// Connections held.
    pub conns: usize,
    /// Requests per second with every connection busy.
    pub rps: f64,
    /// p99 round trip under that load (µs).
    pub load_p99_us: f64,
    /// Jain's fairness index of the requests the connections got served
    /// under load (1: all alike).
    pub load_fairness: f64,
    /// One flow's round trip among `conns` idle connections (µs).
    pub held_p50_us: f64,
    /// Its p99: the median over the held flow's runs.
    pub held_p99_us: f64,
    /// The held flow's p99, one sample a run (its runs repeat among the
    /// same idle connections until the interval narrows).
    pub held_p99: Option<crate::stats::Figure>,
    /// How long the connections took to fall quiet after the load (ms):
    /// the held flow starts once the client host has neither sent nor
    /// received a TCP segment for 200 ms.
    pub held_quiet_ms: f64,
    /// Engine thread time slices (its wake-ups) in a second with nothing
    /// on the wire, after the connections fell quiet and before the held
    /// flow (softoe only). Deadlines the connections cancelled during the
    /// load woke the engine here, once each.
    pub idle_engine_slices: u64,
    /// Engine thread CPU in that second (ms; softoe only).
    pub idle_engine_ms: f64,
    /// Engine thread CPU per held round trip (µs; softoe only): what the
    /// engine spends, work and idle spinning, while one flow ping-pongs
    /// among `conns` idle connections. Flat in `conns` when nothing the
    /// engine does grows with the connections held.
    pub held_engine_us: f64,
    /// Engine thread time slices per held round trip (softoe only): each
    /// wake-up from a sleep starts one (so do preemptions). A deadline per
    /// idle connection that woke the engine showed here as a count that
    /// grew with `conns`.
    pub held_engine_slices: f64,
    /// Engine thread CPU per request under load (ns; softoe only), all of
    /// it: work, the port's system calls, and idle spinning.
    pub engine_ns_per_rpc: f64,
    /// Growth of the engine process's anonymous resident memory per
    /// connection (KiB; softoe only).
    pub engine_kib_per_conn: f64,
    /// TCP segments the client host retransmitted under load (lost
    /// requests: each costs its connection a retransmission timeout).
    pub load_retrans: u64,
    /// Frames the kernel dropped on their way to the engine under load
    /// (the TAP's queue overflowing while the engine was busy; softoe
    /// only).
    pub port_drops: u64,
}

// ---------------------------------------------------------------- client

/// The client's side: `n` connections to one server, driven by epoll.
pub struct Clients {
    poll: Poll,
    conns: Vec<TcpStream>,
}

impl Clients {
    /// Opens `n` connections to `addr`, at most 128 handshakes at a time
    /// (a listener's queue is finite), each with Nagle off.
    pub fn connect(addr: SocketAddrV4, n: usize) -> Result<Clients> {
        let mut poll = Poll::new()?;
        let mut conns: Vec<TcpStream> = Vec::with_capacity(n);
        let mut pending = 0usize;
        let mut events = Events::with_capacity(256);
        let deadline = Instant::now() + Duration::from_secs(60);
        while conns.len() < n || pending > 0 {
            while conns.len() < n && pending < 128 {
                let mut s = TcpStream::connect(SocketAddr::V4(addr))
                    .with_context(|| format!("connection {} to {addr}", conns.len()))?;
                poll.registry()
                    .register(&mut s, Token(conns.len()), Interest::WRITABLE)?;
                conns.push(s);
                pending += 1;
            }
            if Instant::now() > deadline {
                bail!("{pending} of {n} connections still not made after 60 s");
            }
            poll.poll(&mut events, Some(Duration::from_millis(100)))?;
            for ev in &events {
                let s = conns
                    .get_mut(ev.token().0)
                    .ok_or_else(|| anyhow!("odd token"))?;
                if let Some(e) = s.take_error()? {
                    bail!("connecting to {addr}: {e}");
                }
                if s.peer_addr().is_ok() {
                    s.set_nodelay(true)?;
                    poll.registry()
                        .reregister(s, ev.token(), Interest::READABLE)?;
                    pending -= 1;
                }
            }
        }
        Ok(Clients { poll, conns })
    }

    /// Every connection keeps one `MSG`-byte request outstanding for
    /// `dur`: returns requests completed, each round trip, and Jain's
    /// fairness index over the connections' request counts (1: all served
    /// alike; 1/N: one connection got everything).
    pub fn load(&mut self, dur: Duration) -> Result<(u64, Vec<Duration>, f64)> {
        let n = self.conns.len();
        let req = [0x42u8; MSG];
        let mut got = vec![0usize; n];
        let mut served = vec![0u64; n];
        let mut sent_at = vec![Instant::now(); n];
        let mut rtts = Vec::with_capacity(1 << 20);
        let mut done = 0u64;
        for (i, s) in self.conns.iter_mut().enumerate() {
            write_all(s, &req)?;
            sent_at[i] = Instant::now();
        }
        let mut events = Events::with_capacity(1024);
        let mut buf = [0u8; 4096];
        let start = Instant::now();
        let mut last = start;
        // Stop sending at the end, then collect what is outstanding.
        let mut outstanding = n;
        while outstanding > 0 {
            if last.duration_since(start) > dur + Duration::from_secs(20) {
                bail!("{outstanding} requests unanswered 20 s after the load ended");
            }
            self.poll
                .poll(&mut events, Some(Duration::from_millis(100)))?;
            last = Instant::now();
            let sending = last.duration_since(start) < dur;
            for ev in &events {
                let i = ev.token().0;
                let s = self.conns.get_mut(i).ok_or_else(|| anyhow!("odd token"))?;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => bail!("the server closed connection {i}"),
                        Ok(k) => got[i] += k,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(e).context("reading an answer"),
                    }
                }
                while got[i] >= MSG {
                    got[i] -= MSG;
                    done += 1;
                    served[i] += 1;
                    rtts.push(last.duration_since(sent_at[i]));
                    if sending {
                        write_all(s, &req)?;
                        sent_at[i] = Instant::now();
                    } else {
                        outstanding -= 1;
                    }
                }
            }
        }
        let sum: f64 = served.iter().map(|&x| x as f64).sum();
        let sq: f64 = served.iter().map(|&x| (x as f64) * (x as f64)).sum();
        let fairness = if sq > 0.0 {
            sum * sum / (n as f64 * sq)
        } else {
            0.0
        };
        Ok((done, rtts, fairness))
    }
}

/// TCP segments the calling thread's network namespace has retransmitted
/// (`RetransSegs` in `/proc/net/snmp`; `thread-self`, because `/proc/net`
/// would show the process's first thread's namespace).
pub fn tcp_retrans() -> Result<u64> {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")
        .context("reading /proc/thread-self/net/snmp")?;
    snmp_field(&snmp, "Tcp", "RetransSegs")
        .ok_or_else(|| anyhow!("no Tcp RetransSegs in /proc/net/snmp"))
}

/// A counter of `/proc/net/snmp`'s text: each protocol has a line of names
/// and a line of values, both starting `Proto:`.
pub(crate) fn snmp_field(snmp: &str, proto: &str, name: &str) -> Option<u64> {
    let tag = format!("{proto}:");
    let mut lines = snmp.lines().filter(|l| l.starts_with(&tag));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// Waits until the calling thread's network namespace has neither sent
/// nor received a TCP segment for `still` (`InSegs`, `OutSegs` of
/// `/proc/net/snmp`), at most 10 s; returns how long it waited. After the
/// load, answers, delayed ACKs and retransmissions (tens of thousands at
/// 10,000 connections when answers outlast the client's retransmission
/// timeout) go on crossing for a while: a flow measured among them is
/// not one among idle connections, and what it met grew with the count.
pub fn quiet_tcp(still: Duration) -> Result<Duration> {
    let segs = || -> Result<(u64, u64)> {
        let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")
            .context("reading /proc/thread-self/net/snmp")?;
        let f = |name| {
            snmp_field(&snmp, "Tcp", name).ok_or_else(|| anyhow!("no Tcp {name} in /proc/net/snmp"))
        };
        Ok((f("InSegs")?, f("OutSegs")?))
    };
    let start = Instant::now();
    let mut last = segs()?;
    let mut since = Instant::now();
    while since.elapsed() < still && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
        let now = segs()?;
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    Ok(start.elapsed())
}

/// Writes a small request whole (a fresh connection's send buffer always
/// has room for 64 bytes; a short write would be a broken peer).
fn write_all(s: &mut TcpStream, b: &[u8]) -> Result<()> {
    let mut off = 0;
    let t = Instant::now();
    while off < b.len() {
        match s.write(&b[off..]) {
            Ok(k) => off += k,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                if t.elapsed() > Duration::from_secs(5) {
                    bail!("a 64-byte request did not fit for 5 s");
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(e).context("sending a request"),
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- figures

/// This process's anonymous resident memory (KiB), from `/proc/self/status`.
pub fn rss_anon_kib() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no RssAnon in /proc/self/status"))
}

/// The CPU's nominal clock (GHz), from `/proc/cpuinfo` (what a TSC counts
/// at on these machines).
pub fn cpu_ghz() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("cpu MHz"))
        .and_then(|v| {
            v.trim_start_matches([' ', '\t', ':'])
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map(|mhz| mhz / 1000.0)
}

/// Raises this process's descriptor limit to the hard limit (10,000
/// connections are 10,000 descriptors on Linux's side). Children inherit
/// it.
pub fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let r = getrlimit(Resource::Nofile);
    // `None` is unlimited: a soft limit below the hard one goes up to it.
    let below = match (r.current, r.maximum) {
        (Some(cur), Some(max)) => cur < max,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if below {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: r.maximum,
                maximum: r.maximum,
            },
        );
    }
}

// ---------------------------------------------------------------- scenario

/// Runs the scenario for each count in `counts` on a fresh testbed:
/// softoe's scale echo (a separate program on the engine), then Linux's.
pub fn run(
    base: &crate::bed::BedOptions,
    exe: &std::path::Path,
    counts: &[usize],
    load_for: Duration,
    rounds: usize,
    rule: &crate::stats::StopRule,
    pb: &indicatif::ProgressBar,
) -> Result<Vec<ScaleRow>> {
    use crate::bed::{ENGINE, PEER, RealBed};
    use crate::bench::cpu::{thread_cpu, thread_sched};
    use crate::server::Servers;

    raise_fd_limit();
    let most = counts.iter().copied().max().unwrap_or(1);
    let bed = RealBed::start(base.clone())?;
    let mut rows = Vec::new();
    for softoe in [true, false] {
        let name = if softoe { "softoe" } else { "Linux" };
        let ip = if softoe { ENGINE } else { PEER };
        let mut servers = Servers::start(scale_servers(exe, &bed, softoe, most))?;
        let addr = SocketAddrV4::new(ip, PORT);
        for &n in counts {
            pb.set_message(format!("scale: {n} connections, {name}"));
            let rss0 = rss_anon_kib()?;
            let mut clients = bed.client.run(move || Clients::connect(addr, n))??;
            servers.wait_conns(|c| c >= n)?;
            let tap = bed.tap.clone();
            let drops = move || softoe_engine::tap::queue_drops(&tap);
            let (re0, dr0) = (bed.client.run(tcp_retrans)??, bed.sw.run(drops.clone())??);
            let cpu0 = thread_cpu(bed.engine_tid)?;
            let (done, mut rtts, fairness) = clients.load(load_for)?;
            let engine = thread_cpu(bed.engine_tid)?.saturating_sub(cpu0);
            let (re1, dr1) = (bed.client.run(tcp_retrans)??, bed.sw.run(drops)??);
            let rss1 = rss_anon_kib()?;
            rtts.sort();
            // The held flow runs among idle connections: not while the
            // load's last answers, ACKs and retransmissions still cross.
            let quiet = bed.client.run(|| quiet_tcp(Duration::from_millis(200)))??;
            // A second with nothing on the wire: what the engine does then
            // is for the connections it holds, not for any traffic.
            let (ic0, _, is0) = thread_sched(bed.engine_tid)?;
            std::thread::sleep(Duration::from_secs(1));
            let (ic1, _, is1) = thread_sched(bed.engine_tid)?;
            let (hc0, _, hs0) = thread_sched(bed.engine_tid)?;
            let held_runs = crate::bench::repeat::interleaved(
                rule,
                1,
                |_| {
                    let mut held = bed
                        .client
                        .run(move || crate::linux::ping_pong(addr, MSG, rounds))??;
                    held.sort();
                    Ok((
                        crate::linux::percentile_us(&held, 50.0),
                        crate::linux::percentile_us(&held, 99.0),
                        held.len(),
                    ))
                },
                |v| {
                    let runs = v.first().map_or(&[][..], Vec::as_slice);
                    crate::stats::Estimate::of(&runs.iter().map(|r| r.1).collect::<Vec<_>>())
                        .into_iter()
                        .collect()
                },
            )?;
            let (hc1, _, hs1) = thread_sched(bed.engine_tid)?;
            let held = held_runs.per_side.first().map_or(&[][..], Vec::as_slice);
            let trips: usize = held.iter().map(|r| r.2).sum();
            let per_round = |x: f64| x / trips.max(1) as f64;
            let med = |f: fn(&(f64, f64, usize)) -> f64| {
                crate::stats::median(&held.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
            };
            let held_p99 = crate::stats::Figure::of(&held.iter().map(|r| r.1).collect::<Vec<_>>());
            drop(clients);
            servers.wait_conns(|c| c == 0)?;
            let per_rpc = engine.as_secs_f64() * 1e9 / done.max(1) as f64;
            rows.push(ScaleRow {
                system: name.into(),
                conns: n,
                rps: done as f64 / load_for.as_secs_f64(),
                load_p99_us: crate::linux::percentile_us(&rtts, 99.0),
                load_fairness: fairness,
                held_p50_us: med(|r| r.0),
                held_p99_us: med(|r| r.1),
                held_p99,
                held_quiet_ms: quiet.as_secs_f64() * 1e3,
                idle_engine_slices: if softoe { is1.saturating_sub(is0) } else { 0 },
                idle_engine_ms: if softoe {
                    ic1.saturating_sub(ic0).as_secs_f64() * 1e3
                } else {
                    0.0
                },
                held_engine_us: if softoe {
                    per_round(hc1.saturating_sub(hc0).as_secs_f64() * 1e6)
                } else {
                    0.0
                },
                held_engine_slices: if softoe {
                    per_round(hs1.saturating_sub(hs0) as f64)
                } else {
                    0.0
                },
                engine_ns_per_rpc: if softoe { per_rpc } else { 0.0 },
                engine_kib_per_conn: if softoe {
                    rss1.saturating_sub(rss0) as f64 / n as f64
                } else {
                    0.0
                },
                load_retrans: re1.saturating_sub(re0),
                port_drops: if softoe { dr1.saturating_sub(dr0) } else { 0 },
            });
            pb.inc(1);
        }
    }
    Ok(rows)
}

/// The command that starts the scale echo for `most` connections: on the
/// engine (softoe), or in the Linux peer's namespace.
fn scale_servers(
    exe: &std::path::Path,
    bed: &crate::bed::RealBed,
    softoe: bool,
    most: usize,
) -> std::process::Command {
    let ip = if softoe {
        crate::bed::ENGINE
    } else {
        crate::bed::PEER
    };
    let mut cmd = if softoe {
        std::process::Command::new(exe)
    } else {
        bed.peer.command(&exe.to_string_lossy())
    };
    cmd.arg("bench-servers")
        .args(["--addr", &ip.to_string(), "--scale", &most.to_string()]);
    if softoe {
        cmd.arg("--engine").arg(bed.host());
    }
    cmd
}

/// The engine's own cost per 64-byte request.
#[derive(Debug, Clone, Serialize)]
pub struct EngineCost {
    /// Connections kept busy.
    pub conns: usize,
    /// Requests served.
    pub requests: u64,
    /// Engine user time per request (ns): the protocol and the host
    /// interface.
    pub user_ns: f64,
    /// Engine system time per request (ns): the port's system calls (with
    /// the bridge and the Linux client's receive path in them), doorbells
    /// and sleeping.
    pub sys_ns: f64,
    /// `user_ns` in cycles at the CPU's nominal clock (0 if unknown).
    pub user_cycles: f64,
    /// The measured windows' user and user+system cycles per request, one
    /// sample a window (medians above): the windows repeat until their
    /// interval narrows, as every repeated row does.
    pub user_cycles_runs: Vec<f64>,
    pub all_cycles_runs: Vec<f64>,
    pub repeats: Option<crate::bench::repeat::Repeats>,
}

/// Measures [`EngineCost`] on a fresh engine with its idle spin off, so
/// that its CPU time is all work: `conns` connections busy for `load_for`.
pub fn engine_cost(
    base: &crate::bed::BedOptions,
    exe: &std::path::Path,
    conns: usize,
    load_for: Duration,
    rule: &crate::stats::StopRule,
) -> Result<EngineCost> {
    use crate::bed::{BedOptions, RealBed};
    use crate::bench::cpu::thread_user_sys;
    use crate::server::Servers;

    let bed = RealBed::start(BedOptions {
        spin: Some(Duration::ZERO),
        ..base.clone()
    })?;
    let mut servers = Servers::start(scale_servers(exe, &bed, true, conns))?;
    let addr = SocketAddrV4::new(crate::bed::ENGINE, PORT);
    let mut clients = bed.client.run(move || Clients::connect(addr, conns))??;
    servers.wait_conns(|c| c >= conns)?;
    // A first half-window to settle, then the measured ones.
    clients.load(load_for / 2)?;
    let tid = bed.engine_tid;
    let rounds = crate::bench::repeat::interleaved(
        rule,
        1,
        |_| {
            let (u0, s0) = thread_user_sys(tid)?;
            let (done, _, _) = clients.load(load_for)?;
            let (u1, s1) = thread_user_sys(tid)?;
            let per = |d: Duration| d.as_secs_f64() * 1e9 / done.max(1) as f64;
            Ok((done, per(u1.saturating_sub(u0)), per(s1.saturating_sub(s0))))
        },
        |v| {
            let runs = v.first().map_or(&[][..], Vec::as_slice);
            let all: Vec<f64> = runs.iter().map(|r| r.1 + r.2).collect();
            crate::stats::Estimate::of(&all).into_iter().collect()
        },
    )?;
    drop(clients);
    servers.wait_conns(|c| c == 0)?;
    let repeats = rounds.repeats();
    let runs = rounds.per_side.into_iter().next().unwrap_or_default();
    let ghz = cpu_ghz().unwrap_or(0.0);
    let med = |f: fn(&(u64, f64, f64)) -> f64| {
        crate::stats::median(&runs.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
    };
    let user_ns = med(|r| r.1);
    Ok(EngineCost {
        conns,
        requests: runs.iter().map(|r| r.0).sum(),
        user_ns,
        sys_ns: med(|r| r.2),
        user_cycles: user_ns * ghz,
        user_cycles_runs: runs.iter().map(|r| r.1 * ghz).collect(),
        all_cycles_runs: runs.iter().map(|r| (r.1 + r.2) * ghz).collect(),
        repeats: Some(repeats),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_retransmissions_from_snmp() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
            Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n\
            Tcp: 1 200 120000 -1 38 4 1 13 0 6741 3921 17 0 19 0\n\
            Udp: InDatagrams NoPorts\nUdp: 5 6\n";
        assert_eq!(snmp_field(snmp, "Tcp", "RetransSegs"), Some(17));
        assert_eq!(snmp_field(snmp, "Tcp", "OutSegs"), Some(3921));
        assert_eq!(snmp_field(snmp, "Udp", "RetransSegs"), None);
        assert_eq!(snmp_field("Tcp: RetransSegs\n", "Tcp", "RetransSegs"), None);
    }
}
