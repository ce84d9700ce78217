//! `softoe bench bond`: BondingPlus measured (issue 16's E1–E6), on
//! `softoe_testbed::BondedBed` topologies — softoe hosts with several TAP
//! links into one bridge and plain Linux hosts with one, every link shaped
//! by `tbf` each way (100 Mbit/s, the paper's 100BASE-TX, unless said) —
//! with engines run in-process by `softoe_engine::testing` and driven
//! through the in-process `App` API from threads of this program.
//!
//! - **E1** one TCP flow, and a paced UDP sender, between two bonded hosts
//!   with 1–4 members each, both directions, round-robin and
//!   least-queued (prioritized without real-time members is
//!   least-queued: not run). Beside them Linux → Linux over one link of
//!   the same kind, measured in the same run, which is the denominator
//!   of the efficiency.
//! - **E2** a 1 kHz stream of 64-byte messages while a bulk flow fills the
//!   links, in the paper's scenarios, and idle.
//! - **E3** one bonded member against the plain port, unshaped.
//! - **E4** a member cut mid-transfer and back.
//! - **E5** a plain-ARP Linux host and its neighbour entry for the bond.
//! - **E6** ARP+ convergence with 5 % of ARP+ frames dropped.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use indicatif::ProgressBar;
use serde::Serialize;
use softoe_bond::Policy;
use softoe_engine::testing::{BondHost, BondHostSpec};
use softoe_engine::{BondStat, ConnStat};
use softoe_testbed::{BondedBed, BondedOptions};

use crate::bench::{Target, thread_cpu, thread_sched};
use crate::bench_loss::median;
use crate::plot::{self, Series};

/// ARP+'s EtherType (IEEE 802 Local Experimental EtherType 1).
const ETHERTYPE_ARPP: u16 = softoe_bond::wire::ETHERTYPE_ARPP;
/// Bytes of UDP payload per datagram: a full 1,500-byte IP packet.
const DATAGRAM: usize = 1472;
/// Wire bytes per full frame (Ethernet header + 1,500), what tbf counts.
const FRAME: usize = 1514;
/// The published Linux balance-rr figure: ≈ 2.3 of 4 links for one TCP
/// flow (issue 16, from the bonding literature). A constant, not measured.
const BALANCE_RR_OF_4: f64 = 2.3;
/// Bytes of one real-time message.
const RT_MSG: usize = 64;
const RT_MAGIC: u32 = 0x5254_4d53; // "RTMS"
const T: Duration = Duration::from_secs(30);

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub quick: bool,
    /// Link rate in Mbit/s.
    pub rate_mbit: u64,
    /// Member counts of E1.
    pub members: Vec<usize>,
    /// Samples per E2 scenario (at 1 kHz).
    pub rt_samples: usize,
    /// Repetitions of E3 (each port).
    pub e3_reps: usize,
    /// Repetitions of E6.
    pub e6_reps: usize,
    /// Which experiments to run ("e1" … "e6").
    pub experiments: Vec<String>,
    /// E2: both engine threads and the stream's two threads in
    /// `SCHED_FIFO`, as an engine on a core of its own would run.
    pub rt_fifo: bool,
}

impl Options {
    pub fn new(quick: bool, rt_samples: Option<usize>) -> Options {
        Options {
            quick,
            rate_mbit: 100,
            members: if quick { vec![1, 2] } else { vec![1, 2, 3, 4] },
            rt_samples: rt_samples.unwrap_or(if quick { 3000 } else { 100_000 }),
            e3_reps: if quick { 3 } else { 5 },
            e6_reps: if quick { 3 } else { 20 },
            experiments: ["e1", "e2", "e3", "e4", "e5", "e6"]
                .map(String::from)
                .to_vec(),
            rt_fifo: false,
        }
    }

    /// The command line that reproduces this run.
    fn command(&self) -> String {
        let dflt = Options::new(self.quick, None);
        let mut c = String::from("sudo softoe bench bond");
        if self.quick {
            c.push_str(" --quick");
        }
        if self.rt_samples != dflt.rt_samples {
            c.push_str(&format!(" --rt-samples {}", self.rt_samples));
        }
        if self.experiments != dflt.experiments {
            c.push_str(&format!(" --bond-exp {}", self.experiments.join(",")));
        }
        if self.rt_fifo {
            c.push_str(" --bond-rt-fifo");
        }
        if self.members != dflt.members {
            let m: Vec<String> = self.members.iter().map(usize::to_string).collect();
            c.push_str(&format!(" --bond-members {}", m.join(",")));
        }
        c
    }

    fn wants(&self, e: &str) -> bool {
        self.experiments.iter().any(|x| x == e)
    }

    /// Steps of the progress bar.
    pub fn runs(&self) -> u64 {
        let n = |e: &str, k: u64| if self.wants(e) { k } else { 0 };
        n(
            "e1",
            self.members.len() as u64 * POLICIES.len() as u64 * 4 + 1,
        ) + n("e2", E2_SCENARIOS.len() as u64)
            + n("e3", 4 * self.e3_reps as u64)
            + n("e4", if self.quick { 1 } else { 2 })
            + n("e5", 1)
            + n("e6", 2 * self.e6_reps as u64)
    }

    fn tcp_secs(&self) -> f64 {
        if self.quick { 1.5 } else { 5.0 }
    }

    fn udp_secs(&self) -> f64 {
        if self.quick { 1.0 } else { 3.0 }
    }

    fn mbit(&self) -> f64 {
        self.rate_mbit as f64
    }

    /// The most UDP payload one link carries, Mbit/s.
    fn udp_link_mbit(&self) -> f64 {
        self.mbit() * DATAGRAM as f64 / FRAME as f64
    }
}

const POLICIES: [(Policy, &str); 2] = [
    (Policy::RoundRobin, "round-robin"),
    (Policy::LeastQueued, "least-queued"),
];

/// One E1 run.
#[derive(Debug, Serialize)]
pub(crate) struct E1Row {
    members: usize,
    policy: &'static str,
    proto: &'static str,
    /// "1→2" or "2→1" (host numbers).
    direction: &'static str,
    goodput_mbit: f64,
    /// Goodput ÷ (members × one link's goodput, Linux, measured).
    efficiency: f64,
    /// Each member's share of the bytes the receiver took in.
    shares: Vec<f64>,
    /// TCP: the sender connection's counters.
    retrans: u64,
    spurious_retrans: u32,
    reordering: u32,
    /// UDP: datagrams lost (sent − received) ÷ sent.
    loss: f64,
    /// Frames the links' queues (tbf, both ways, every member) dropped.
    queue_drops: u64,
    /// UDP: what the paced sender managed to send, Mbit/s of payload (it
    /// sends what is due in batches through the in-process API, and can
    /// still fall behind the pace on two shared cores).
    sent_mbit: f64,
    /// UDP: datagrams the receiving stack dropped for a full socket queue
    /// (the receiving program too slow), and frames its TAPs' queues
    /// dropped before the engine read them.
    rx_queue_drops: u64,
    port_drops: u64,
}

/// Linux on one link, the denominator of E1's efficiency.
#[derive(Debug, Serialize)]
pub(crate) struct LinuxRow {
    proto: &'static str,
    goodput_mbit: f64,
    loss: f64,
}

/// One E2 scenario.
#[derive(Debug, Serialize)]
pub(crate) struct E2Row {
    scenario: &'static str,
    /// The stream's protocol.
    proto: &'static str,
    bulk: bool,
    rt_priority: u8,
    realtime_members: usize,
    samples: usize,
    /// Messages that never arrived (UDP).
    lost: usize,
    /// App-to-app one-way time, µs.
    min_us: f64,
    mean_us: f64,
    std_us: f64,
    p50_us: f64,
    p99_us: f64,
    /// Only with ≥ 100,000 samples.
    p999_us: Option<f64>,
    max_us: f64,
    /// From the sending app's call to the frame entering the kernel on a
    /// sender's TAP (the engine, its queues and the bond's scheduler).
    app_to_wire: Dist,
    /// From there to the kernel handing it to a receiver's TAP: both
    /// links' shaped queues and the bridge.
    switch: Dist,
    /// From there to the receiving app's read (the engine, the app's wake-up).
    wire_to_app: Dist,
    /// The sending and the receiving engine thread meanwhile.
    engines: [EngineLoad; 2],
    /// The bulk flow's goodput meanwhile, Mbit/s.
    bulk_mbit: f64,
    #[serde(skip)]
    cdf: Vec<f64>,
}

/// One E3 repetition.
#[derive(Debug, Serialize)]
pub(crate) struct E3Row {
    /// "100 Mbit/s" (shaped as E1's links) or "unshaped".
    link: &'static str,
    port: &'static str,
    rep: usize,
    goodput_mbit: f64,
    /// Both engines' thread CPU, seconds per GiB moved.
    engine_s_per_gib: f64,
}

/// E4.
#[derive(Debug, Serialize)]
pub(crate) struct E4Row {
    policy: &'static str,
    bytes: u64,
    /// Bytes missing or wrong at the receiver (pattern check).
    bytes_lost: u64,
    /// Longest time without progress at the receiver around the cut, ms.
    gap_ms: f64,
    /// Goodput before the cut, while cut, after it came back (Mbit/s).
    before_mbit: f64,
    cut_mbit: f64,
    after_mbit: f64,
    /// From the link coming back until both ends use it again, ms.
    rejoin_ms: f64,
    /// From the link coming back until a 200 ms window runs at 90 % of the
    /// rate before the cut, ms (None: not within the run).
    full_rate_ms: Option<f64>,
}

/// E5.
#[derive(Debug, Serialize)]
pub(crate) struct E5Row {
    to_bond_mbit: f64,
    from_bond_mbit: f64,
    samples: usize,
    macs: Vec<String>,
    changes: usize,
    /// The member the bond keeps Linux on, and its MAC.
    home_mac: String,
}

/// E6, per drop rate.
#[derive(Debug, Serialize)]
pub(crate) struct E6Row {
    drop_percent: f64,
    members: usize,
    reps: usize,
    complete: usize,
    /// Time from the last member link coming up (both engines running,
    /// every TAP plugged into the switch and shaped) until both tables are
    /// complete; 0 if they were complete by then.
    min_ms: f64,
    median_ms: f64,
    max_ms: f64,
    /// The median from the first engine's start (the testbed's `tc`
    /// commands plugging members in take most of it).
    from_start_median_ms: f64,
    /// ARP+ frames the drop programs dropped, over all repetitions.
    dropped: u64,
}

/// Everything `softoe bench bond` measured.
#[derive(Debug, Default, Serialize)]
pub(crate) struct BondReport {
    pub command: String,
    pub rate_mbit: u64,
    pub linux_one_link: Vec<LinuxRow>,
    pub e1: Vec<E1Row>,
    pub e2: Vec<E2Row>,
    pub e3: Vec<E3Row>,
    pub e4: Vec<E4Row>,
    pub e5: Vec<E5Row>,
    pub e6: Vec<E6Row>,
    pub targets: Vec<Target>,
}

// ---- the byte pattern ---------------------------------------------------------------

/// The byte at stream offset `off`: byte `off % 8` of the little-endian
/// word `off / 8`. A missing, repeated or misplaced piece shows.
fn pattern_byte(off: u64) -> u8 {
    (off / 8).to_le_bytes()[(off % 8) as usize]
}

fn fill(off: u64, buf: &mut [u8]) {
    if off.is_multiple_of(8) && buf.len().is_multiple_of(8) {
        for (i, w) in buf.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&(off / 8 + i as u64).to_le_bytes());
        }
    } else {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern_byte(off + i as u64);
        }
    }
}

/// Bytes of `buf` (at stream offset `off`) that are not the pattern.
fn wrong(off: u64, buf: &[u8]) -> u64 {
    buf.iter()
        .enumerate()
        .filter(|&(i, b)| *b != pattern_byte(off + i as u64))
        .count() as u64
}

// ---- TCP transfers between engines ---------------------------------------------------

/// What a receiver saw.
struct Received {
    bytes: u64,
    wrong: u64,
    /// (seconds since the receiver started, bytes so far) after each read.
    log: Vec<(f64, u64)>,
    secs: f64,
}

/// A transfer under way.
struct Transfer {
    sender: JoinHandle<std::io::Result<softoe_engine::app::TcpStream>>,
    receiver: JoinHandle<std::io::Result<Received>>,
    started: Instant,
}

/// Starts moving `bytes` from `from` (which connects) to a listener on
/// `to`, pattern-filled and, if `check`, checked.
fn start_tcp(
    from: &BondHost,
    to: &BondHost,
    port: u16,
    bytes: u64,
    check: bool,
) -> Result<Transfer> {
    let l = to.app.tcp_listen(port, 4).context("listening")?;
    let mut c = from
        .app
        .tcp_connect(SocketAddrV4::new(to.ip, port))
        .context("connecting")?;
    let (mut s, _) = l.accept_timeout(Some(T)).context("accepting")?;
    s.set_read_timeout(Some(T));
    let started = Instant::now();
    let sender = std::thread::spawn(move || -> std::io::Result<_> {
        let mut buf = vec![0u8; 256 * 1024];
        let mut off = 0u64;
        while off < bytes {
            let n = buf.len().min((bytes - off) as usize);
            fill(off, &mut buf[..n]);
            off += c.write(&buf[..n])? as u64;
        }
        c.shutdown_write()?;
        Ok(c)
    });
    let receiver = std::thread::spawn(move || -> std::io::Result<Received> {
        let t0 = Instant::now();
        let mut buf = vec![0u8; 256 * 1024];
        let (mut off, mut bad) = (0u64, 0u64);
        let mut log = Vec::new();
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            if check {
                bad += wrong(off, &buf[..n]);
            }
            off += n as u64;
            log.push((t0.elapsed().as_secs_f64(), off));
        }
        Ok(Received {
            bytes: off,
            wrong: bad,
            log,
            secs: t0.elapsed().as_secs_f64(),
        })
    });
    Ok(Transfer {
        sender,
        receiver,
        started,
    })
}

impl Transfer {
    /// Waits for the receiver; returns what it saw and the sender's
    /// stream (still open, for its counters).
    fn finish(self) -> Result<(Received, softoe_engine::app::TcpStream)> {
        let r = self
            .receiver
            .join()
            .map_err(|_| anyhow!("the receiver panicked"))?
            .context("receiving")?;
        let c = self
            .sender
            .join()
            .map_err(|_| anyhow!("the sender panicked"))?
            .context("sending")?;
        Ok((r, c))
    }
}

/// The sender's connection to `port` in `host`'s snapshot.
fn conn_to(host: &BondHost, port: u16) -> Option<ConnStat> {
    let suffix = format!(":{port}");
    host.snapshot()
        .ok()?
        .connections
        .into_iter()
        .find(|c| c.remote.ends_with(&suffix))
}

/// Frames dropped so far by the queues of both hosts' links.
fn queue_drops(pair: &Pair) -> u64 {
    pair.hosts
        .iter()
        .flat_map(|h| &h.taps)
        .map(|t| pair.bed.queue_drops(t).unwrap_or(0))
        .sum()
}

/// A host's (UDP socket-queue drops, port-queue drops) so far.
fn host_drops(h: &BondHost) -> (u64, u64) {
    h.snapshot()
        .map(|s| (s.stack.udp_drops, s.port_drops.unwrap_or(0)))
        .unwrap_or_default()
}

fn bytes_in(b: &BondStat) -> Vec<u64> {
    b.members.iter().map(|m| m.bytes_in).collect()
}

/// Shares of the bytes taken in since `before`.
fn shares(before: &[u64], after: &[u64]) -> Vec<f64> {
    let d: Vec<u64> = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let sum: u64 = d.iter().sum();
    d.iter()
        .map(|&x| if sum == 0 { 0.0 } else { x as f64 / sum as f64 })
        .collect()
}

fn mbit(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e6
    } else {
        0.0
    }
}

/// Waits up to `secs` for `ok`.
fn wait_until(secs: f64, what: &str, mut ok: impl FnMut() -> bool) -> Result<()> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        if ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!("timed out waiting for {what}")
}

/// Two bonded hosts (1 and 2) on a fresh bed.
struct Pair {
    hosts: Vec<BondHost>,
    bed: BondedBed,
}

impl Pair {
    fn start(opts: BondedOptions, specs: [BondHostSpec; 2]) -> Result<Pair> {
        let bed = BondedBed::new(opts).context("building the bonded testbed")?;
        let mut hosts = Vec::new();
        for s in &specs {
            hosts.push(BondHost::start(&bed, s).with_context(|| format!("engine {}", s.host))?);
        }
        let p = Pair { hosts, bed };
        if specs.iter().all(|s| s.bond) {
            let n = [specs[0].members, specs[1].members];
            wait_until(10.0, "the bonded hosts to learn each other", || {
                p.complete(0, n[1]) && p.complete(1, n[0])
            })?;
        }
        Ok(p)
    }

    /// Whether host `i` knows all `n` members of the other host, alive.
    fn complete(&self, i: usize, n: usize) -> bool {
        let other = self.hosts[1 - i].ip.to_string();
        self.hosts[i].bond().is_ok_and(|b| {
            b.peers.iter().any(|p| {
                p.ip == other
                    && p.members.len() == n
                    && p.members.iter().all(|m| !m.contains("dead"))
            })
        })
    }
}

fn bonded_opts(rate: Option<u64>) -> BondedOptions {
    BondedOptions {
        rate_mbit: rate,
        ..BondedOptions::default()
    }
}

// ---- UDP -------------------------------------------------------------------------------

/// Paces `send` at `rate_mbit` of payload for `secs`: each call gets the
/// datagrams due by then (each carrying its sequence number; at most 64:
/// a sender that fell behind catches up in batches) and returns how many
/// it sent. Returns datagrams sent.
fn paced(rate_mbit: f64, secs: f64, mut send: impl FnMut(&[&[u8]]) -> usize) -> u64 {
    const BATCH: usize = 64;
    let gap = DATAGRAM as f64 * 8.0 / (rate_mbit * 1e6);
    let t0 = Instant::now();
    let mut bufs = vec![vec![0u8; DATAGRAM]; BATCH];
    let mut k = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        let now = t0.elapsed().as_secs_f64();
        let due = ((now / gap) as u64 + 1).saturating_sub(k).min(BATCH as u64) as usize;
        if due == 0 {
            let wait = (k as f64 * gap) - now;
            if wait > 0.0002 {
                std::thread::sleep(Duration::from_secs_f64(wait - 0.0001));
            }
            continue;
        }
        for (i, b) in bufs.iter_mut().take(due).enumerate() {
            b[..8].copy_from_slice(&(k + i as u64).to_le_bytes());
        }
        let batch: Vec<&[u8]> = bufs.iter().take(due).map(Vec::as_slice).collect();
        let sent = send(&batch);
        k += sent as u64;
        if sent < due {
            break;
        }
    }
    k
}

/// UDP from `from` to `to` (engines) at `rate_mbit`: (goodput, loss,
/// rate sent).
fn udp_engines(
    from: &BondHost,
    to: &BondHost,
    port: u16,
    rate_mbit: f64,
    secs: f64,
) -> Result<(f64, f64, f64)> {
    let mut rx = to.app.udp_bind(port).context("binding")?;
    rx.set_read_timeout(Some(Duration::from_millis(300)));
    let tx = from.app.udp_bind(port).context("binding")?;
    let dst = SocketAddrV4::new(to.ip, port);
    let recv = std::thread::spawn(move || {
        let mut buf = vec![0u8; 2048];
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut seen_any = false;
        let t0 = Instant::now();
        loop {
            match rx.recv_from(&mut buf) {
                Ok((len, _)) => {
                    n += 1;
                    bytes += len as u64;
                    seen_any = true;
                }
                Err(_) if seen_any || t0.elapsed() > Duration::from_secs(5) => break,
                Err(_) => {}
            }
        }
        (n, bytes)
    });
    let t0 = Instant::now();
    let sent = paced(rate_mbit, secs, |b| tx.send_batch_to(b, dst).unwrap_or(0));
    let secs = t0.elapsed().as_secs_f64();
    let (got, bytes) = recv.join().map_err(|_| anyhow!("receiver panicked"))?;
    Ok((
        mbit(bytes, secs),
        1.0 - got as f64 / sent.max(1) as f64,
        mbit(sent * DATAGRAM as u64, secs),
    ))
}

// ---- E1 --------------------------------------------------------------------------------

fn linux_one_link(o: &Options, pb: &ProgressBar) -> Result<Vec<LinuxRow>> {
    pb.set_message("E1: Linux → Linux over one link");
    let bed = BondedBed::new(BondedOptions {
        linux_hosts: 2,
        ..bonded_opts(Some(o.rate_mbit))
    })?;
    let (rx, tx) = (bed.linux[0].clone(), bed.linux[1].clone());
    let bytes = (o.mbit() * 1e6 / 8.0 * o.tcp_secs() * 0.95) as u64;
    let at = SocketAddrV4::new(rx.ip, 5001);
    let server = rx.ns.spawn(move || -> std::io::Result<(u64, f64)> {
        let l = std::net::TcpListener::bind(at)?;
        let (mut s, _) = l.accept()?;
        let t0 = Instant::now();
        let mut buf = vec![0u8; 256 * 1024];
        let mut n = 0u64;
        loop {
            let k = s.read(&mut buf)?;
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        Ok((n, t0.elapsed().as_secs_f64()))
    })?;
    std::thread::sleep(Duration::from_millis(200));
    tx.ns
        .run(move || -> std::io::Result<()> {
            let mut c = std::net::TcpStream::connect_timeout(&at.into(), T)?;
            let buf = vec![7u8; 256 * 1024];
            let mut left = bytes;
            while left > 0 {
                let n = buf.len().min(left as usize);
                c.write_all(&buf[..n])?;
                left -= n as u64;
            }
            Ok(())
        })?
        .context("Linux sender")?;
    let (n, secs) = server.join()?.context("Linux receiver")?;
    let tcp = LinuxRow {
        proto: "tcp",
        goodput_mbit: mbit(n, secs),
        loss: 0.0,
    };
    // UDP, paced at what one link carries.
    let at = SocketAddrV4::new(rx.ip, 5002);
    let rate = o.udp_link_mbit();
    let secs = o.udp_secs();
    let server = rx.ns.spawn(move || -> std::io::Result<(u64, u64)> {
        let s = std::net::UdpSocket::bind(at)?;
        s.set_read_timeout(Some(Duration::from_millis(300)))?;
        let mut buf = vec![0u8; 2048];
        let (mut n, mut bytes) = (0, 0);
        let t0 = Instant::now();
        loop {
            match s.recv_from(&mut buf) {
                Ok((len, _)) => {
                    n += 1;
                    bytes += len as u64;
                }
                Err(_) if n > 0 || t0.elapsed() > Duration::from_secs(5) => break,
                Err(_) => {}
            }
        }
        Ok((n, bytes))
    })?;
    std::thread::sleep(Duration::from_millis(100));
    let (sent, took) = tx
        .ns
        .run(move || -> std::io::Result<(u64, f64)> {
            let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
            let t0 = Instant::now();
            let k = paced(rate, secs, |b| {
                b.iter().take_while(|d| s.send_to(d, at).is_ok()).count()
            });
            Ok((k, t0.elapsed().as_secs_f64()))
        })?
        .context("Linux UDP sender")?;
    let (got, bytes) = server.join()?.context("Linux UDP receiver")?;
    pb.inc(1);
    Ok(vec![
        tcp,
        LinuxRow {
            proto: "udp",
            goodput_mbit: mbit(bytes, took),
            loss: 1.0 - got as f64 / sent.max(1) as f64,
        },
    ])
}

fn e1(o: &Options, linux: &[LinuxRow], pb: &ProgressBar) -> Result<Vec<E1Row>> {
    let one = |proto: &str| {
        linux
            .iter()
            .find(|l| l.proto == proto)
            .map_or(o.mbit(), |l| l.goodput_mbit)
    };
    let mut rows = Vec::new();
    let mut port = 6000;
    for &n in &o.members {
        for (policy, pname) in POLICIES {
            pb.set_message(format!("E1: {n} member(s), {pname}"));
            let pair = Pair::start(
                bonded_opts(Some(o.rate_mbit)),
                [
                    BondHostSpec::new(1, n, policy),
                    BondHostSpec::new(2, n, policy),
                ],
            )?;
            for (dir, (s, r)) in [("1→2", (0, 1)), ("2→1", (1, 0))] {
                let (snd, rcv) = (&pair.hosts[s], &pair.hosts[r]);
                // TCP.
                port += 1;
                let bytes = (n as f64 * o.mbit() * 1e6 / 8.0 * o.tcp_secs() * 0.95) as u64;
                let before = bytes_in(&rcv.bond()?);
                let q0 = queue_drops(&pair);
                let (got, c) = start_tcp(snd, rcv, port, bytes, false)?.finish()?;
                let conn = conn_to(snd, port);
                let counts = conn
                    .as_ref()
                    .map_or((0, 0, 0), |c| (c.retrans, c.spurious_retrans, c.reordering));
                drop(c);
                let after = bytes_in(&rcv.bond()?);
                let g = mbit(got.bytes, got.secs);
                rows.push(E1Row {
                    members: n,
                    policy: pname,
                    proto: "tcp",
                    direction: dir,
                    goodput_mbit: g,
                    efficiency: g / (n as f64 * one("tcp")),
                    shares: shares(&before, &after),
                    retrans: counts.0,
                    spurious_retrans: counts.1,
                    reordering: counts.2,
                    loss: 0.0,
                    queue_drops: queue_drops(&pair).saturating_sub(q0),
                    sent_mbit: 0.0,
                    rx_queue_drops: 0,
                    port_drops: 0,
                });
                pb.inc(1);
                // UDP at the aggregate rate.
                port += 1;
                let before = bytes_in(&rcv.bond()?);
                let q0 = queue_drops(&pair);
                let host0 = host_drops(rcv);
                let (g, loss, sent_mbit) =
                    udp_engines(snd, rcv, port, n as f64 * o.udp_link_mbit(), o.udp_secs())?;
                let after = bytes_in(&rcv.bond()?);
                let host1 = host_drops(rcv);
                rows.push(E1Row {
                    members: n,
                    policy: pname,
                    proto: "udp",
                    direction: dir,
                    goodput_mbit: g,
                    efficiency: g / (n as f64 * one("udp")),
                    shares: shares(&before, &after),
                    retrans: 0,
                    spurious_retrans: 0,
                    reordering: 0,
                    loss,
                    queue_drops: queue_drops(&pair).saturating_sub(q0),
                    sent_mbit,
                    rx_queue_drops: host1.0.saturating_sub(host0.0),
                    port_drops: host1.1.saturating_sub(host0.1),
                });
                pb.inc(1);
            }
        }
    }
    Ok(rows)
}

// ---- E2 --------------------------------------------------------------------------------

/// Nanoseconds since `epoch`.
fn ns_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// E2's scenarios: (name, stream protocol, bulk, stream priority,
/// real-time members per host).
const E2_SCENARIOS: [(&str, &str, bool, u8, usize); 8] = [
    ("idle (two channels, no bulk)", "tcp", false, 6, 1),
    ("one channel, priority 0", "tcp", true, 0, 0),
    ("one channel, priority 6", "tcp", true, 6, 0),
    ("two channels", "tcp", true, 6, 1),
    ("idle (two channels, no bulk)", "udp", false, 6, 1),
    ("one channel, priority 0", "udp", true, 0, 0),
    ("one channel, priority 6", "udp", true, 6, 0),
    ("two channels", "udp", true, 6, 1),
];

/// One message of the stream: when the app sent it and when the other
/// app read it, ns since the scenario's epoch.
#[derive(Clone, Copy, Debug)]
struct RtSample {
    seq: u64,
    sent: u64,
    read: u64,
}

/// Where each message was seen on the switch's devices: the first time a
/// sender's TAP took it in (the engine wrote it: "on the wire") and the
/// first time the kernel handed it to a receiver's TAP (after both links'
/// shaping and the bridge), ns since the epoch, by sequence number.
#[derive(Debug, Default)]
struct WireTimes {
    out: std::collections::HashMap<u64, u64>,
    into: std::collections::HashMap<u64, u64>,
}

impl WireTimes {
    fn from(
        seen: &[softoe_testbed::Sighting],
        from_taps: &[String],
        to_taps: &[String],
        wall0: std::time::SystemTime,
    ) -> WireTimes {
        let mut w = WireTimes::default();
        for s in seen {
            let Ok(at) = s.at.duration_since(wall0) else {
                continue;
            };
            let at = at.as_nanos() as u64;
            let map = if !s.outgoing && from_taps.contains(&s.dev) {
                &mut w.out
            } else if s.outgoing && to_taps.contains(&s.dev) {
                &mut w.into
            } else {
                continue;
            };
            // A segment may carry several messages (TCP), each 64 bytes.
            for m in s.payload.chunks_exact(RT_MSG) {
                if m[..4] != RT_MAGIC.to_le_bytes() {
                    continue;
                }
                let mut seq = [0u8; 8];
                seq.copy_from_slice(&m[4..12]);
                let e = map.entry(u64::from_le_bytes(seq)).or_insert(at);
                *e = (*e).min(at);
            }
        }
        w
    }
}

/// The stream over TCP: `samples` messages at 1 kHz from `a` to `b`.
fn rt_tcp(
    a: &BondHost,
    b: &BondHost,
    port: u16,
    prio: u8,
    samples: usize,
    epoch: Instant,
    fifo: bool,
) -> Result<Vec<RtSample>> {
    let l = b.app.tcp_listen(port, 4)?;
    let mut c = a.app.tcp_connect(SocketAddrV4::new(b.ip, port))?;
    c.set_nodelay(true)?;
    c.set_priority(prio)?;
    let (mut s, _) = l.accept_timeout(Some(T))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(5)));
    let sender = spawn_stream(samples, epoch, fifo, move |m| c.write_all(m));
    let mut out = Vec::with_capacity(samples);
    let mut msg = [0u8; RT_MSG];
    for _ in 0..samples {
        s.read_exact(&mut msg)
            .context("reading the real-time stream")?;
        let read = ns_since(epoch);
        if let Some((seq, sent)) = rt_parse(&msg) {
            out.push(RtSample { seq, sent, read });
        }
    }
    join_stream(sender)?;
    Ok(out)
}

/// The stream over UDP; a datagram that never comes is not a sample (the
/// count of those is `samples` − what this returns).
fn rt_udp(
    a: &BondHost,
    b: &BondHost,
    port: u16,
    prio: u8,
    samples: usize,
    epoch: Instant,
    fifo: bool,
) -> Result<Vec<RtSample>> {
    let mut rx = b.app.udp_bind(port).context("binding")?;
    rx.set_read_timeout(Some(Duration::from_secs(1)));
    let tx = a.app.udp_bind(port).context("binding")?;
    tx.set_priority(prio)?;
    let dst = SocketAddrV4::new(b.ip, port);
    // The first datagram finds no ARP+ entry missing (the pair is
    // complete), but send one unmeasured anyway so both ends are warm.
    tx.send_to(&[0u8; RT_MSG], dst)?;
    let mut warm = [0u8; 2048];
    let _ = rx.recv_from(&mut warm);
    let sender = spawn_stream(samples, epoch, fifo, move |m| tx.send_to(m, dst).map(drop));
    let mut out = Vec::with_capacity(samples);
    let mut buf = [0u8; 2048];
    while out.len() < samples {
        match rx.recv_from(&mut buf) {
            Ok((n, _)) => {
                let read = ns_since(epoch);
                if let Some((seq, sent)) = buf.get(..n).and_then(rt_parse) {
                    out.push(RtSample { seq, sent, read });
                }
            }
            // A second of silence: the sender is done and the rest is lost.
            Err(_) if sender.is_finished() => break,
            Err(_) => {}
        }
    }
    join_stream(sender)?;
    Ok(out)
}

/// The stream's sender: message `i` at `i` ms, each through `send`, on a
/// thread of its own (in `SCHED_FIFO` if `fifo`).
fn spawn_stream(
    samples: usize,
    epoch: Instant,
    fifo: bool,
    mut send: impl FnMut(&[u8]) -> std::io::Result<()> + Send + 'static,
) -> JoinHandle<std::io::Result<()>> {
    std::thread::spawn(move || {
        if fifo {
            realtime_class(0)?;
        }
        let t0 = Instant::now();
        for i in 0..samples as u64 {
            pace_to(t0, i);
            send(&rt_message(i, epoch))?;
        }
        Ok(())
    })
}

/// Waits for the stream's sender and passes on its failure.
fn join_stream(sender: JoinHandle<std::io::Result<()>>) -> Result<()> {
    sender
        .join()
        .map_err(|_| anyhow!("the stream sender panicked"))?
        .context("the stream sender")
}

/// Puts thread `tid` (0: the caller) in `SCHED_FIFO` at priority 10: it
/// runs as soon as it is runnable, ahead of every ordinary thread (the
/// kernel's own ksoftirqd included, which is why only E2 asks for it).
#[allow(unsafe_code)]
fn realtime_class(tid: i32) -> std::io::Result<()> {
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: `p` is a valid sched_param for the call; a bad tid is an
    // error return, not undefined behaviour.
    let r = unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &raw const p) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Back to the ordinary class (so a thread id reused later is not left
/// real-time).
#[allow(unsafe_code)]
fn ordinary_class(tid: i32) {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in `realtime_class`.
    let _ = unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &raw const p) };
}

/// Sleeps until message `i` of a 1 kHz stream started at `t0` is due.
fn pace_to(t0: Instant, i: u64) {
    let due = t0 + Duration::from_millis(i);
    let now = Instant::now();
    if due > now {
        std::thread::sleep(due - now);
    }
}

/// Message `i`: the mark, its number, the time it is sent.
fn rt_message(i: u64, epoch: Instant) -> [u8; RT_MSG] {
    let mut msg = [0u8; RT_MSG];
    msg[..4].copy_from_slice(&RT_MAGIC.to_le_bytes());
    msg[4..12].copy_from_slice(&i.to_le_bytes());
    msg[12..20].copy_from_slice(&ns_since(epoch).to_le_bytes());
    msg
}

/// (number, send time) of a message, if it is one.
fn rt_parse(m: &[u8]) -> Option<(u64, u64)> {
    let word = |r: std::ops::Range<usize>| -> Option<u64> {
        Some(u64::from_le_bytes(m.get(r)?.try_into().ok()?))
    };
    (m.len() == RT_MSG && m[..4] == RT_MAGIC.to_le_bytes()).then_some(())?;
    Some((word(4..12)?, word(12..20)?))
}

fn e2(o: &Options, pb: &ProgressBar) -> Result<Vec<E2Row>> {
    let mut rows = Vec::new();
    for (k, (name, proto, bulk, prio, rt)) in E2_SCENARIOS.into_iter().enumerate() {
        pb.set_message(format!("E2: {proto} {name}, {} samples", o.rt_samples));
        let spec = |h: u8| {
            let mut s = BondHostSpec::new(h, 2, Policy::Prioritized);
            s.realtime = (2 - rt..2).collect();
            s
        };
        let pair = Pair::start(bonded_opts(Some(o.rate_mbit)), [spec(1), spec(2)])?;
        let (a, b) = (&pair.hosts[0], &pair.hosts[1]);
        // Bulk 1 → 2 at priority 0, long enough to outlast the stream.
        let stop = Arc::new(AtomicBool::new(false));
        let bulk_t = if bulk {
            let l = b.app.tcp_listen(7100 + k as u16, 4)?;
            let mut c = a
                .app
                .tcp_connect(SocketAddrV4::new(b.ip, 7100 + k as u16))?;
            let (mut s, _) = l.accept_timeout(Some(T))?;
            s.set_read_timeout(Some(T));
            let st = stop.clone();
            let snd = std::thread::spawn(move || -> std::io::Result<()> {
                let buf = vec![1u8; 256 * 1024];
                while !st.load(Ordering::Relaxed) {
                    let _ = c.write(&buf)?; // what fits: the point is to keep the links full
                }
                c.shutdown_write()
            });
            let rcv = std::thread::spawn(move || -> std::io::Result<(u64, f64)> {
                let mut buf = vec![0u8; 256 * 1024];
                let t0 = Instant::now();
                let mut n = 0u64;
                loop {
                    let k = s.read(&mut buf)?;
                    if k == 0 {
                        break;
                    }
                    n += k as u64;
                }
                Ok((n, t0.elapsed().as_secs_f64()))
            });
            std::thread::sleep(Duration::from_millis(500));
            Some((snd, rcv))
        } else {
            None
        };
        // The stream: 64-byte messages, 1 kHz, 1 → 2, watched on the wire.
        let tap = softoe_testbed::WireTap::start(&pair.bed.sw, RT_MAGIC.to_le_bytes())
            .context("the wire tap")?;
        if o.rt_fifo {
            for tid in [a.engine_tid, b.engine_tid, 0] {
                realtime_class(tid).context("SCHED_FIFO (--bond-rt-fifo needs root)")?;
            }
        }
        let (epoch, wall0) = (Instant::now(), std::time::SystemTime::now());
        let sched0 = sched_of([a, b]);
        let port = 7200 + k as u16;
        let got = if proto == "tcp" {
            rt_tcp(a, b, port, prio, o.rt_samples, epoch, o.rt_fifo)
        } else {
            rt_udp(a, b, port, prio, o.rt_samples, epoch, o.rt_fifo)
        };
        if o.rt_fifo {
            for tid in [a.engine_tid, b.engine_tid, 0] {
                ordinary_class(tid);
            }
        }
        let got = got?;
        let engines = load_since(sched0, sched_of([a, b]), epoch.elapsed().as_secs_f64());
        stop.store(true, Ordering::Relaxed);
        let seen = tap.stop().context("the wire tap")?;
        let wire = WireTimes::from(&seen, &a.taps, &b.taps, wall0);
        let mut bulk_mbit = 0.0;
        if let Some((snd, rcv)) = bulk_t {
            snd.join()
                .map_err(|_| anyhow!("bulk sender panicked"))?
                .context("bulk sender")?;
            let (n, secs) = rcv
                .join()
                .map_err(|_| anyhow!("bulk receiver panicked"))?
                .context("bulk receiver")?;
            bulk_mbit = mbit(n, secs);
        }
        rows.push(stats_row(
            E2Spec {
                scenario: name,
                proto,
                bulk,
                rt_priority: prio,
                realtime_members: rt,
                sent: o.rt_samples,
                bulk_mbit,
                engines,
            },
            &got,
            &wire,
        ));
        pb.inc(1);
    }
    Ok(rows)
}

/// How an engine thread fared with the scheduler over a scenario.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct EngineLoad {
    /// Its time on a CPU ÷ the scenario's.
    cpu: f64,
    /// Time it waited on a run queue (runnable, another thread on the
    /// core) per time slice it got, µs: the delay the two shared cores add
    /// to each wake-up.
    wait_per_slice_us: f64,
}

/// Schedstat of both engines, to subtract.
fn sched_of(hosts: [&BondHost; 2]) -> [(Duration, Duration, u64); 2] {
    hosts.map(|h| thread_sched(h.engine_tid).unwrap_or_default())
}

fn load_since(
    before: [(Duration, Duration, u64); 2],
    after: [(Duration, Duration, u64); 2],
    secs: f64,
) -> [EngineLoad; 2] {
    let one = |(r0, w0, s0): (Duration, Duration, u64), (r1, w1, s1): (Duration, Duration, u64)| {
        EngineLoad {
            cpu: r1.saturating_sub(r0).as_secs_f64() / secs.max(1e-9),
            wait_per_slice_us: w1.saturating_sub(w0).as_secs_f64() * 1e6
                / s1.saturating_sub(s0).max(1) as f64,
        }
    };
    [one(before[0], after[0]), one(before[1], after[1])]
}

/// What an E2 scenario was.
#[derive(Clone, Copy, Debug)]
struct E2Spec {
    scenario: &'static str,
    proto: &'static str,
    bulk: bool,
    rt_priority: u8,
    realtime_members: usize,
    sent: usize,
    bulk_mbit: f64,
    engines: [EngineLoad; 2],
}

/// min, mean, std, p50, p99, p99.9 (from 100,000 values), max of `v`, µs;
/// sorts `v`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Dist {
    n: usize,
    min_us: f64,
    mean_us: f64,
    std_us: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: Option<f64>,
    max_us: f64,
}

impl Dist {
    fn of(v: &mut [f64]) -> Dist {
        v.sort_by(f64::total_cmp);
        let n = v.len().max(1) as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        let q = |p: f64| {
            v.get(((p * v.len() as f64).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0.0)
        };
        Dist {
            n: v.len(),
            min_us: v.first().copied().unwrap_or(0.0),
            mean_us: mean,
            std_us: var.sqrt(),
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: (v.len() >= 100_000).then(|| q(0.999)),
            max_us: v.last().copied().unwrap_or(0.0),
        }
    }
}

fn stats_row(spec: E2Spec, got: &[RtSample], wire: &WireTimes) -> E2Row {
    let us = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e3;
    let mut lat: Vec<f64> = got.iter().map(|r| us(r.sent, r.read)).collect();
    let (mut to_wire, mut across, mut from_wire) = (Vec::new(), Vec::new(), Vec::new());
    for r in got {
        if let (Some(&o), Some(&i)) = (wire.out.get(&r.seq), wire.into.get(&r.seq)) {
            to_wire.push(us(r.sent, o));
            across.push(us(o, i));
            from_wire.push(us(i, r.read));
        }
    }
    let app = Dist::of(&mut lat);
    E2Row {
        scenario: spec.scenario,
        proto: spec.proto,
        bulk: spec.bulk,
        rt_priority: spec.rt_priority,
        realtime_members: spec.realtime_members,
        samples: lat.len(),
        lost: spec.sent.saturating_sub(lat.len()),
        min_us: app.min_us,
        mean_us: app.mean_us,
        std_us: app.std_us,
        p50_us: app.p50_us,
        p99_us: app.p99_us,
        p999_us: app.p999_us,
        max_us: app.max_us,
        app_to_wire: Dist::of(&mut to_wire),
        switch: Dist::of(&mut across),
        wire_to_app: Dist::of(&mut from_wire),
        engines: spec.engines,
        bulk_mbit: spec.bulk_mbit,
        cdf: lat,
    }
}

// ---- E3 --------------------------------------------------------------------------------

fn e3(o: &Options, pb: &ProgressBar) -> Result<Vec<E3Row>> {
    let mut rows = Vec::new();
    // At the link rate (the paper's Table 2: the link the bottleneck, so
    // goodput shows what the bond costs on the wire and CPU what it costs
    // the host), then unshaped (CPU-bound: what it costs at full speed).
    for (link, rate, bytes) in [
        (
            "100 Mbit/s",
            Some(o.rate_mbit),
            (o.mbit() * 1e6 / 8.0 * o.tcp_secs() * 0.95) as u64,
        ),
        ("unshaped", None, if o.quick { 256 << 20 } else { 1 << 30 }),
    ] {
        for rep in 1..=o.e3_reps {
            for (bond, name) in [(false, "plain port"), (true, "bond, 1 member")] {
                pb.set_message(format!("E3: {name}, repetition {rep}, {link}"));
                // Each engine on a core of its own: less of the run-to-run
                // spread two shared cores add.
                let spec = |h: u8| BondHostSpec {
                    bond,
                    cpu: Some(usize::from(h - 1)),
                    ..BondHostSpec::new(h, 1, Policy::LeastQueued)
                };
                let pair = Pair::start(bonded_opts(rate), [spec(1), spec(2)])?;
                let (a, b) = (&pair.hosts[0], &pair.hosts[1]);
                // Warm the path (ARP, the connection's slow start elsewhere).
                let (_, c) = start_tcp(a, b, 5000, 1 << 20, false)?.finish()?;
                drop(c);
                let cpu = || -> Result<Duration> {
                    Ok(thread_cpu(a.engine_tid)? + thread_cpu(b.engine_tid)?)
                };
                let c0 = cpu()?;
                let (got, c) = start_tcp(a, b, 5001, bytes, false)?.finish()?;
                let used = cpu()?.saturating_sub(c0);
                drop(c);
                rows.push(E3Row {
                    link,
                    port: name,
                    rep,
                    goodput_mbit: mbit(got.bytes, got.secs),
                    engine_s_per_gib: used.as_secs_f64() / (got.bytes as f64 / (1u64 << 30) as f64),
                });
                pb.inc(1);
            }
        }
    }
    Ok(rows)
}

/// The median over E3's repetitions at `link` of bond ÷ plain port for
/// `f` (repetition k ran the plain port, then the bond, back to back: the
/// median of the k ratios shrugs off a run the shared cores slowed).
fn e3_ratio(rows: &[E3Row], link: &str, f: fn(&E3Row) -> f64) -> f64 {
    let by = |port: &str| -> Vec<(usize, f64)> {
        rows.iter()
            .filter(|e| e.port == port && e.link == link)
            .map(|e| (e.rep, f(e)))
            .collect()
    };
    let plain = by("plain port");
    let v: Vec<f64> = by("bond, 1 member")
        .into_iter()
        .filter_map(|(k, b)| Some(b / plain.iter().find(|p| p.0 == k)?.1))
        .collect();
    median(v).unwrap_or(f64::NAN)
}

// ---- E4 --------------------------------------------------------------------------------

fn e4(o: &Options, pb: &ProgressBar) -> Result<Vec<E4Row>> {
    let policies: &[(Policy, &'static str)] = if o.quick { &POLICIES[1..] } else { &POLICIES };
    let mut rows = Vec::new();
    for &(policy, pname) in policies {
        pb.set_message(format!("E4: a member cut mid-transfer, {pname}"));
        let pair = Pair::start(
            bonded_opts(Some(o.rate_mbit)),
            [
                BondHostSpec::new(1, 2, policy),
                BondHostSpec::new(2, 2, policy),
            ],
        )?;
        let (a, b) = (&pair.hosts[0], &pair.hosts[1]);
        // 2 → 1 long enough for: 1 s before, 1 s (quick) or 2 s cut, and
        // 2 s (quick) or 3 s back, at two links.
        let (cut_for, back_for) = if o.quick { (1.0, 2.0) } else { (2.0, 3.0) };
        let total = 1.0 + cut_for + back_for;
        let bytes = (2.0 * o.mbit() * 1e6 / 8.0 * total) as u64;
        let t = start_tcp(b, a, 5100, bytes, true)?;
        let origin = t.started;
        std::thread::sleep(Duration::from_secs(1));
        let tap = a.taps[1].clone();
        let cut_at = origin.elapsed().as_secs_f64();
        pair.bed.set_member_up(&tap, false)?;
        std::thread::sleep(Duration::from_secs_f64(cut_for));
        let back_at = origin.elapsed().as_secs_f64();
        pair.bed.set_member_up(&tap, true)?;
        let back = Instant::now();
        wait_until(10.0, "the member to rejoin at both ends", || {
            a.bond().is_ok_and(|s| s.members[1].state == "up") && pair.complete(1, 2)
        })?;
        let rejoin_ms = back.elapsed().as_secs_f64() * 1e3;
        let (r, c) = t.finish()?;
        drop(c);
        // The receiver's clock started a moment after `origin`; close
        // enough for windows of 100 ms and more.
        let rate_in = |from: f64, to: f64| -> f64 {
            let at = |t: f64| {
                r.log
                    .iter()
                    .take_while(|(s, _)| *s <= t)
                    .last()
                    .map_or(0, |x| x.1)
            };
            mbit(at(to) - at(from), to - from)
        };
        let gap = r
            .log
            .windows(2)
            .filter(|w| w[1].0 >= cut_at - 0.1 && w[0].0 <= cut_at + 1.0)
            .map(|w| w[1].0 - w[0].0)
            .fold(0.0, f64::max);
        let before = rate_in(0.3, cut_at);
        let full_rate_ms = (0..)
            .map(|i| back_at + f64::from(i) * 0.05)
            .take_while(|&t| t + 0.2 <= r.secs)
            .find(|&t| rate_in(t, t + 0.2) >= 0.9 * before)
            .map(|t| (t - back_at) * 1e3);
        rows.push(E4Row {
            policy: pname,
            bytes,
            bytes_lost: bytes.saturating_sub(r.bytes) + r.wrong,
            gap_ms: gap * 1e3,
            before_mbit: before,
            cut_mbit: rate_in(cut_at + 0.2, back_at),
            after_mbit: rate_in(back_at + 0.5, r.secs),
            rejoin_ms,
            full_rate_ms,
        });
        pb.inc(1);
    }
    Ok(rows)
}

// ---- E5 --------------------------------------------------------------------------------

fn e5(o: &Options, pb: &ProgressBar) -> Result<E5Row> {
    pb.set_message("E5: a plain-ARP Linux host both ways");
    let bed = BondedBed::new(bonded_opts(Some(o.rate_mbit)))?;
    let a = BondHost::start(&bed, &BondHostSpec::new(1, 2, Policy::LeastQueued))?;
    let lx = bed.linux[0].clone();
    let watching = Arc::new(AtomicBool::new(true));
    let w = watching.clone();
    let (ns, bond_ip) = (lx.ns.clone(), a.ip.to_string());
    let watcher = std::thread::spawn(move || {
        let mut seen: Vec<String> = Vec::new();
        let mut samples = 0;
        while w.load(Ordering::Relaxed) {
            if let Ok(out) = ns.ip(&["neigh", "show", &bond_ip]) {
                if let Some(mac) = out.split_whitespace().skip_while(|w| *w != "lladdr").nth(1)
                    && seen.last().map(String::as_str) != Some(mac)
                {
                    seen.push(mac.to_string());
                }
                samples += 1;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (seen, samples)
    });
    let n: u64 = if o.quick { 8 << 20 } else { 64 << 20 };
    let l = a.app.tcp_listen(6001, 4)?;
    let addr = SocketAddrV4::new(a.ip, 6001);
    // Goodput is timed at each receiver: from its first byte to the end.
    let client = lx.ns.spawn(move || -> std::io::Result<(f64, u64, u64)> {
        let mut s = std::net::TcpStream::connect_timeout(&addr.into(), T)?;
        s.set_read_timeout(Some(T))?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut off = 0;
        while off < n {
            let k = buf.len().min((n - off) as usize);
            fill(off, &mut buf[..k]);
            s.write_all(&buf[..k])?;
            off += k as u64;
        }
        s.shutdown(std::net::Shutdown::Write)?;
        let (mut got, mut bad) = (0u64, 0u64);
        let mut t1 = None;
        loop {
            let k = s.read(&mut buf)?;
            if k == 0 {
                break;
            }
            t1.get_or_insert_with(Instant::now);
            bad += wrong(got, &buf[..k]);
            got += k as u64;
        }
        let down = t1.map_or(0.0, |t| t.elapsed().as_secs_f64());
        Ok((down, got, bad))
    })?;
    let (mut s, _) = l.accept_timeout(Some(T))?;
    s.set_read_timeout(Some(T));
    let mut buf = vec![0u8; 256 * 1024];
    let (mut got, mut bad) = (0u64, 0u64);
    let mut t0 = None;
    loop {
        let k = s.read(&mut buf)?;
        if k == 0 {
            break;
        }
        t0.get_or_insert_with(Instant::now);
        bad += wrong(got, &buf[..k]);
        got += k as u64;
    }
    let up = t0.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let mut off = 0;
    while off < n {
        let k = buf.len().min((n - off) as usize);
        fill(off, &mut buf[..k]);
        s.write_all(&buf[..k])?;
        off += k as u64;
    }
    s.shutdown_write()?;
    let (down, back, back_bad) = client.join()?.context("the Linux client")?;
    watching.store(false, Ordering::Relaxed);
    let (seen, samples) = watcher
        .join()
        .map_err(|_| anyhow!("the neighbour watcher panicked"))?;
    if got != n || bad != 0 || back != n || back_bad != 0 {
        bail!(
            "E5: bytes lost or wrong: Linux → bond {got} of {n} ({bad} wrong), bond → Linux {back} of {n} ({back_bad} wrong)"
        );
    }
    let stat = a.bond()?;
    let home = stat
        .plain
        .iter()
        .find(|(ip, _)| *ip == lx.ip.to_string())
        .and_then(|(_, m)| stat.members.get(*m))
        .map(|m| m.mac.clone())
        .unwrap_or_default();
    let macs: BTreeSet<String> = seen.iter().cloned().collect();
    pb.inc(1);
    Ok(E5Row {
        to_bond_mbit: mbit(n, up),
        from_bond_mbit: mbit(n, down),
        samples,
        changes: seen.len().saturating_sub(1),
        macs: macs.into_iter().collect(),
        home_mac: home,
    })
}

// ---- E6 --------------------------------------------------------------------------------

fn e6(o: &Options, pb: &ProgressBar) -> Result<Vec<E6Row>> {
    let members = 4;
    let mut rows = Vec::new();
    for percent in [0.0, 5.0] {
        let (mut times, mut totals) = (Vec::new(), Vec::new());
        let mut dropped = 0;
        for rep in 1..=o.e6_reps {
            pb.set_message(format!(
                "E6: ARP+ convergence, {percent} % of ARP+ dropped, repetition {rep}"
            ));
            let bed = BondedBed::new(BondedOptions {
                member_drop: (percent > 0.0).then_some((ETHERTYPE_ARPP, percent)),
                ..bonded_opts(Some(o.rate_mbit))
            })?;
            let t0 = Instant::now();
            let hosts = [1, 2].map(|h| {
                BondHost::start(&bed, &BondHostSpec::new(h, members, Policy::LeastQueued))
            });
            let [Ok(a), Ok(b)] = hosts else {
                bail!("E6: an engine did not start");
            };
            // Every member of both hosts is plugged in and shaped now (the
            // `tc` commands that do it take most of the time from t0).
            let up = Instant::now();
            let pair = Pair {
                hosts: vec![a, b],
                bed,
            };
            let done = wait_until(30.0, "complete ARP+ tables", || {
                pair.complete(0, members) && pair.complete(1, members)
            });
            if done.is_ok() {
                times.push(up.elapsed().as_secs_f64() * 1e3);
                totals.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            for h in &pair.hosts {
                for t in &h.taps {
                    dropped += pair.bed.tb.dropped_on(&pair.bed.sw, t).unwrap_or(0);
                }
            }
            pb.inc(1);
        }
        times.sort_by(f64::total_cmp);
        totals.sort_by(f64::total_cmp);
        rows.push(E6Row {
            drop_percent: percent,
            members,
            reps: o.e6_reps,
            complete: times.len(),
            min_ms: times.first().copied().unwrap_or(f64::NAN),
            median_ms: times.get(times.len() / 2).copied().unwrap_or(f64::NAN),
            max_ms: times.last().copied().unwrap_or(f64::NAN),
            from_start_median_ms: totals.get(totals.len() / 2).copied().unwrap_or(f64::NAN),
            dropped,
        });
    }
    Ok(rows)
}

// ---- the whole scenario ---------------------------------------------------------------

/// Runs E1–E6.
pub(crate) fn run(o: &Options, pb: &ProgressBar) -> Result<BondReport> {
    let mut r = BondReport {
        command: o.command(),
        rate_mbit: o.rate_mbit,
        ..BondReport::default()
    };
    if o.wants("e1") {
        r.linux_one_link = linux_one_link(o, pb)?;
        r.e1 = e1(o, &r.linux_one_link, pb)?;
    }
    if o.wants("e4") {
        r.e4 = e4(o, pb)?;
    }
    if o.wants("e5") {
        r.e5 = vec![e5(o, pb)?];
    }
    if o.wants("e3") {
        r.e3 = e3(o, pb)?;
    }
    if o.wants("e6") {
        r.e6 = e6(o, pb)?;
    }
    if o.wants("e2") {
        r.e2 = e2(o, pb)?;
    }
    r.targets = targets(&r, o);
    Ok(r)
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { s / f64::from(n) }
}

fn targets(r: &BondReport, o: &Options) -> Vec<Target> {
    let mut t = Vec::new();
    for (n, goal, min) in [(2, "≥ 0.9", 0.9), (4, "≥ 0.85", 0.85)] {
        for (_, pname) in POLICIES {
            let rows = || {
                r.e1.iter()
                    .filter(move |e| e.members == n && e.policy == pname && e.proto == "tcp")
            };
            if rows().next().is_none() {
                continue;
            }
            let x = mean(rows().map(|e| e.efficiency));
            t.push(Target {
                what: format!(
                    "bond: one TCP flow over {n} links, {pname} (of N × Linux's one link)"
                ),
                ratio: x,
                unit: "x",
                goal,
                met: x >= min,
            });
        }
    }
    let udp: Vec<&E1Row> = r.e1.iter().filter(|e| e.proto == "udp").collect();
    if !udp.is_empty() {
        let x = udp
            .iter()
            .map(|e| e.efficiency)
            .fold(f64::INFINITY, f64::min);
        t.push(Target {
            what: "bond: UDP, worst run (of N × Linux's one link)".into(),
            ratio: x,
            unit: "x",
            goal: "≥ 0.95",
            met: x >= 0.95,
        });
    }
    let mtu_us = FRAME as f64 * 8.0 / o.mbit();
    for proto in ["tcp", "udp"] {
        let idle = r.e2.iter().find(|e| !e.bulk && e.proto == proto);
        let two =
            r.e2.iter()
                .find(|e| e.bulk && e.realtime_members > 0 && e.proto == proto);
        let (Some(i), Some(w)) = (idle, two) else {
            continue;
        };
        let limit = i.p99_us + mtu_us;
        t.push(Target {
            what: format!(
                "bond: real-time p99 under bulk, two channels, {proto}, ÷ (idle p99 + one MTU time = {limit:.0} µs)"
            ),
            ratio: w.p99_us / limit,
            unit: "x",
            goal: "≤ 1.0",
            met: w.p99_us <= limit,
        });
        // The same, for the part the bond's channels govern: from the
        // sending engine's TAP to the receiving engine's (links, bridge).
        if i.switch.n > 0 && w.switch.n > 0 {
            let limit = i.switch.p99_us + mtu_us;
            t.push(Target {
                what: format!(
                    "bond: same, wire to wire only, {proto}, ÷ (idle p99 + one MTU time = {limit:.0} µs)"
                ),
                ratio: w.switch.p99_us / limit,
                unit: "x",
                goal: "≤ 1.0",
                met: w.switch.p99_us <= limit,
            });
        }
    }
    if !r.e3.is_empty() {
        let g = e3_ratio(&r.e3, "100 Mbit/s", |e| e.goodput_mbit);
        t.push(Target {
            what:
                "bond: one member's goodput ÷ the plain port's (100 Mbit/s link; median of pairs)"
                    .into(),
            ratio: g,
            unit: "x",
            goal: "> 0.99",
            met: g > 0.99,
        });
        let c = e3_ratio(&r.e3, "unshaped", |e| e.engine_s_per_gib);
        t.push(Target {
            what: "bond: one member's engine CPU per GiB ÷ the plain port's (unshaped; median of pairs)"
                .into(),
            ratio: c,
            unit: "x",
            goal: "< 1.05",
            met: c < 1.05,
        });
    }
    for e in &r.e4 {
        t.push(Target {
            what: format!(
                "bond: failover gap, {} (ms; {} bytes lost)",
                e.policy, e.bytes_lost
            ),
            ratio: e.gap_ms,
            unit: "ms",
            goal: "≤ 30, 0 lost",
            met: e.gap_ms <= 30.0 && e.bytes_lost == 0,
        });
    }
    for e in &r.e5 {
        t.push(Target {
            what: "bond: MACs a plain-ARP peer saw for the bond's address".into(),
            ratio: e.macs.len() as f64,
            unit: "MACs",
            goal: "= 1",
            met: e.macs.len() == 1 && e.changes == 0,
        });
    }
    t
}

/// The tables.
pub(crate) fn render(r: &BondReport) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\nsoftoe bench bond ({}): two softoe hosts with N TAP links each and Linux hosts with one,\n\
         on one bridge; every link {} Mbit/s each way (tbf; the engine side through an ifb).",
        r.command, r.rate_mbit
    );
    if !r.e1.is_empty() {
        render_e1(r, &mut o);
    }
    render_rest(r, &mut o);
    o
}

fn render_e1(r: &BondReport, o: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(o, "\nE1 bandwidth vs members (paper Fig. 4/5)");
    for l in &r.linux_one_link {
        let _ = writeln!(
            o,
            "  Linux → Linux, one link, {}: {:.1} Mbit/s{}",
            l.proto,
            l.goodput_mbit,
            if l.proto == "udp" {
                format!(" (loss {:.2} %)", l.loss * 100.0)
            } else {
                String::new()
            }
        );
    }
    let _ = writeln!(
        o,
        "  Linux balance-rr, one TCP flow over 4 links (published, not measured): {BALANCE_RR_OF_4} of 4 = {:.2}",
        BALANCE_RR_OF_4 / 4.0
    );
    let _ = writeln!(
        o,
        "  {:>2} {:<13} {:<4} {:<4} {:>8} {:>6} {:<24} {:>7} {:>8} {:>7} {:>7} {:>6} {:>6} {:>12}",
        "N",
        "policy",
        "",
        "dir",
        "Mbit/s",
        "eff",
        "member shares",
        "retrans",
        "spurious",
        "reorder",
        "loss %",
        "q-drop",
        "sent",
        "rx drops s/p"
    );
    for e in &r.e1 {
        let sh = e
            .shares
            .iter()
            .map(|s| format!("{s:.2}"))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            o,
            "  {:>2} {:<13} {:<4} {:<4} {:>8.1} {:>6.2} {:<24} {:>7} {:>8} {:>7} {:>7} {:>6} {:>6} {:>12}",
            e.members,
            e.policy,
            e.proto,
            e.direction,
            e.goodput_mbit,
            e.efficiency,
            sh,
            if e.proto == "tcp" {
                e.retrans.to_string()
            } else {
                "-".into()
            },
            if e.proto == "tcp" {
                e.spurious_retrans.to_string()
            } else {
                "-".into()
            },
            if e.proto == "tcp" {
                e.reordering.to_string()
            } else {
                "-".into()
            },
            if e.proto == "udp" {
                format!("{:.2}", e.loss * 100.0)
            } else {
                "-".into()
            },
            e.queue_drops,
            if e.proto == "udp" {
                format!("{:.0}", e.sent_mbit)
            } else {
                "-".into()
            },
            if e.proto == "udp" {
                format!("{}/{}", e.rx_queue_drops, e.port_drops)
            } else {
                "-".into()
            },
        );
    }
    let _ = writeln!(
        o,
        "  (eff: goodput ÷ (N × Linux's one link, same protocol); shares: of the bytes the receiving\n   \
         bond took in, per member; retrans/spurious/reorder: the sending connection's; q-drop:\n   \
         frames the links' tbf queues dropped, both hosts, both ways; sent: Mbit/s the paced UDP\n   \
         sender managed (paced at N × what one link carries); rx drops s/p: datagrams the\n   \
         receiving stack dropped for a full socket queue / frames its TAPs' queues dropped\n   \
         before the engine read them; prioritized without real-time members is least-queued,\n   \
         so not run)"
    );
}

fn render_rest(r: &BondReport, o: &mut String) {
    use std::fmt::Write as _;
    if !r.e2.is_empty() {
        let _ = writeln!(
            o,
            "\nE2 real-time channel: 64-byte messages at 1 kHz, app-to-app one-way µs (paper Fig. 6–9)"
        );
        let _ = writeln!(
            o,
            "  {:<30} {:<4} {:>7} {:>5} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>9}",
            "scenario",
            "",
            "samples",
            "lost",
            "min",
            "mean",
            "std",
            "p50",
            "p99",
            "p99.9",
            "max",
            "bulk Mb/s"
        );
        for e in &r.e2 {
            let _ = writeln!(
                o,
                "  {:<30} {:<4} {:>7} {:>5} {:>6.0} {:>6.0} {:>6.0} {:>6.0} {:>6.0} {:>6} {:>7.0} {:>9.1}",
                e.scenario,
                e.proto,
                e.samples,
                e.lost,
                e.min_us,
                e.mean_us,
                e.std_us,
                e.p50_us,
                e.p99_us,
                e.p999_us.map_or("-".into(), |v| format!("{v:.0}")),
                e.max_us,
                e.bulk_mbit
            );
        }
        let _ = writeln!(
            o,
            "  (two members per host, prioritized policy; \"two channels\": member 2 of each host real-time;\n   \
             bulk: one TCP flow at priority 0 in the same direction{})",
            if r.command.contains("--bond-rt-fifo") {
                ";\n   engines and the stream's threads in SCHED_FIFO (--bond-rt-fifo)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "\n  where the time went, µs, mean / p50 / p99 (paper Fig. 6: app → bond; Fig. 7/8: app → NIC)"
        );
        let _ = writeln!(
            o,
            "  {:<30} {:<4} {:>7} {:>20} {:>20} {:>20} {:>15}",
            "scenario", "", "seen", "app → wire", "wire → wire", "wire → app", "engines cpu/wait"
        );
        let d = |x: &Dist| format!("{:.0} / {:.0} / {:.0}", x.mean_us, x.p50_us, x.p99_us);
        for e in &r.e2 {
            let _ = writeln!(
                o,
                "  {:<30} {:<4} {:>7} {:>20} {:>20} {:>20} {:>15}",
                e.scenario,
                e.proto,
                e.app_to_wire.n,
                d(&e.app_to_wire),
                d(&e.switch),
                d(&e.wire_to_app),
                e.engines
                    .iter()
                    .map(|l| format!("{:.0}%/{:.0}", l.cpu * 100.0, l.wait_per_slice_us))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        let _ = writeln!(
            o,
            "  (kernel timestamps on the switch's devices: \"wire\" out is the sending engine's frame\n   \
             entering its TAP, before the link's shaping; \"wire\" in is the kernel handing it to the\n   \
             receiver's TAP, after both links and the bridge; seen: messages found both places;\n   \
             engines: the sending and the receiving engine thread's share of a CPU and the µs it\n   \
             waited on a run queue per time slice, from /proc schedstat)"
        );
    }
    if !r.e3.is_empty() {
        let _ = writeln!(
            o,
            "\nE3 overhead of one bonded member vs the plain port, at the link rate and unshaped (paper Table 2)"
        );
        let _ = writeln!(
            o,
            "  {:<11} {:<16} {:>3} {:>9} {:>12}",
            "link", "port", "rep", "Mbit/s", "eng s/GiB"
        );
        for e in &r.e3 {
            let _ = writeln!(
                o,
                "  {:<11} {:<16} {:>3} {:>9.1} {:>12.3}",
                e.link, e.port, e.rep, e.goodput_mbit, e.engine_s_per_gib
            );
        }
        for link in ["100 Mbit/s", "unshaped"] {
            let _ = writeln!(
                o,
                "  {link}: bond ÷ plain, median of pairs: goodput {:.3}, engine CPU per GiB {:.3}",
                e3_ratio(&r.e3, link, |e| e.goodput_mbit),
                e3_ratio(&r.e3, link, |e| e.engine_s_per_gib)
            );
        }
        let _ = writeln!(
            o,
            "  (eng s/GiB: both engines' thread CPU per GiB moved; each engine pinned to a core of its own)"
        );
    }
    if !r.e4.is_empty() {
        let _ = writeln!(
            o,
            "\nE4 failover: one of two members cut mid-transfer, then back"
        );
        let _ = writeln!(
            o,
            "  {:<13} {:>6} {:>7} {:>8} {:>8} {:>8} {:>9} {:>10}",
            "policy", "lost B", "gap ms", "before", "cut", "after", "rejoin ms", "full-rate ms"
        );
        for e in &r.e4 {
            let _ = writeln!(
                o,
                "  {:<13} {:>6} {:>7.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>10}",
                e.policy,
                e.bytes_lost,
                e.gap_ms,
                e.before_mbit,
                e.cut_mbit,
                e.after_mbit,
                e.rejoin_ms,
                e.full_rate_ms.map_or("-".into(), |v| format!("{v:.0}"))
            );
        }
        let _ = writeln!(
            o,
            "  (before/cut/after: goodput, Mbit/s; gap: longest wait between reads that made progress,\n   \
             from 0.1 s before the cut to 1 s after; full rate: a 200 ms window at 90 % of before)"
        );
    }
    for e in &r.e5 {
        let _ = writeln!(
            o,
            "\nE5 plain-ARP Linux host: to the bond {:.1} Mbit/s, from it {:.1} Mbit/s; its neighbour entry\n   \
             for the bond: {:?} over {} samples, {} changes (the bond keeps it on {})",
            e.to_bond_mbit, e.from_bond_mbit, e.macs, e.samples, e.changes, e.home_mac
        );
    }
    if !r.e6.is_empty() {
        let _ = writeln!(
            o,
            "\nE6 ARP+ convergence: from the last member link up until both ARP+ tables hold every member"
        );
        let _ = writeln!(
            o,
            "  {:>6} {:>7} {:>4} {:>8} {:>8} {:>8} {:>8} {:>7} {:>14}",
            "drop %",
            "members",
            "reps",
            "complete",
            "min ms",
            "median",
            "max ms",
            "dropped",
            "from start ms"
        );
        for e in &r.e6 {
            let _ = writeln!(
                o,
                "  {:>6.1} {:>7} {:>4} {:>8} {:>8.1} {:>8.1} {:>8.1} {:>7} {:>14.0}",
                e.drop_percent,
                e.members,
                e.reps,
                e.complete,
                e.min_ms,
                e.median_ms,
                e.max_ms,
                e.dropped,
                e.from_start_median_ms
            );
        }
        let _ = writeln!(
            o,
            "  (dropped: ARP+ frames (EtherType {ETHERTYPE_ARPP:#06x}) the engines sent that an eBPF program\n   \
             dropped as they entered the switch, over all repetitions: a dropped broadcast reaches nobody;\n   \
             from start: the median from the first engine's start, the testbed's setup included)"
        );
    }
    if !r.targets.is_empty() {
        let _ = writeln!(o, "\nbond targets (issue 16):");
        for t in &r.targets {
            let _ = writeln!(
                o,
                "  {} {:<86} {:>8.3} {:<5} goal {}",
                if t.met { "PASS" } else { "MISS" },
                t.what,
                t.ratio,
                t.unit,
                t.goal
            );
        }
    }
}

/// E1's goodput by members per policy, E1's member shares, E2's CDFs.
pub(crate) fn plots(r: &BondReport, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if !r.e1.is_empty() {
        let mut series = Vec::new();
        for proto in ["tcp", "udp"] {
            for (_, pname) in POLICIES {
                let mut pts: Vec<(f64, f64)> = Vec::new();
                let ns: BTreeSet<usize> = r.e1.iter().map(|e| e.members).collect();
                for n in ns {
                    let m = mean(
                        r.e1.iter()
                            .filter(|e| e.members == n && e.policy == pname && e.proto == proto)
                            .map(|e| e.goodput_mbit),
                    );
                    if m.is_finite() {
                        pts.push((n as f64, m));
                    }
                }
                series.push(Series {
                    name: format!("softoe {proto}, {pname}"),
                    points: pts,
                });
            }
            if let Some(l) = r.linux_one_link.iter().find(|l| l.proto == proto) {
                let ns: BTreeSet<usize> = r.e1.iter().map(|e| e.members).collect();
                series.push(Series {
                    name: format!("N × Linux one link ({proto})"),
                    points: ns
                        .into_iter()
                        .map(|n| (n as f64, n as f64 * l.goodput_mbit))
                        .collect(),
                });
            }
        }
        series.push(Series {
            name: "Linux balance-rr, TCP, published (2.3 of 4 links)".into(),
            points: vec![(4.0, BALANCE_RR_OF_4 * r.rate_mbit as f64)],
        });
        let p = dir.join("bond-e1-goodput.svg");
        plot::linear(
            &p,
            "E1: goodput of one flow vs bonded members (paper Fig. 4)",
            "members per host",
            "Mbit/s",
            &series,
        )?;
        out.push(p);
        // Shares: member index vs share, one curve per run with N = max.
        let max_n = r.e1.iter().map(|e| e.members).max().unwrap_or(1);
        let series: Vec<Series> =
            r.e1.iter()
                .filter(|e| e.members == max_n)
                .map(|e| Series {
                    name: format!("{} {} {}", e.proto, e.policy, e.direction),
                    points: e
                        .shares
                        .iter()
                        .enumerate()
                        .map(|(i, s)| ((i + 1) as f64, *s))
                        .collect(),
                })
                .collect();
        let p = dir.join("bond-e1-shares.svg");
        plot::linear(
            &p,
            &format!("E1: each member's share of the bytes, {max_n} members (paper Fig. 5)"),
            "member",
            "share",
            &series,
        )?;
        out.push(p);
    }
    if !r.e2.is_empty() {
        let series: Vec<Series> =
            r.e2.iter()
                .map(|e| {
                    let n = e.cdf.len().max(1) as f64;
                    let step = (e.cdf.len() / 400).max(1);
                    Series {
                        name: format!("{} {}", e.proto, e.scenario),
                        points: e
                            .cdf
                            .iter()
                            .enumerate()
                            .step_by(step)
                            .map(|(i, v)| (*v, (i + 1) as f64 / n))
                            .collect(),
                    }
                })
                .collect();
        let p = dir.join("bond-e2-latency-cdf.svg");
        plot::linear(
            &p,
            "E2: real-time one-way latency CDF (paper Fig. 8)",
            "µs, app to app",
            "fraction ≤",
            &series,
        )?;
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_pattern_finds_shifted_and_changed_bytes() {
        let mut a = vec![0u8; 4096];
        fill(0, &mut a);
        assert_eq!(wrong(0, &a), 0);
        let mut b = vec![0u8; 13];
        fill(5, &mut b);
        assert_eq!(&b[..], &a[5..18], "unaligned pieces agree");
        assert!(wrong(8, &a[..64]) > 0, "a shift shows");
        a[100] ^= 1;
        assert_eq!(wrong(0, &a), 1);
    }

    #[test]
    fn wire_times_take_every_message_of_a_segment_at_its_first_sighting() {
        let epoch = Instant::now();
        let wall0 = std::time::SystemTime::UNIX_EPOCH;
        let at = |ns: u64| wall0 + Duration::from_nanos(ns);
        let two: Vec<u8> = [rt_message(4, epoch), rt_message(5, epoch)].concat();
        let seen = |dev: &str, outgoing, ns, payload: &[u8]| softoe_testbed::Sighting {
            dev: dev.into(),
            outgoing,
            at: at(ns),
            payload: payload.to_vec(),
        };
        let w = WireTimes::from(
            &[
                seen("a0", false, 900, &two),
                seen("a1", false, 700, &two[..RT_MSG]), // a retransmission, earlier? keep the least
                seen("b0", true, 2000, &two),
                seen("b0", false, 1, &two), // b's own frames in: not "into"
                seen("a0", true, 1, &two),  // frames to a: not "out"
                seen("x9", false, 1, &two), // someone else's device
                seen("a0", false, 5, b"RTMS short"),
            ],
            &["a0".into(), "a1".into()],
            &["b0".into(), "b1".into()],
            wall0,
        );
        assert_eq!(w.out.get(&4), Some(&700));
        assert_eq!(w.out.get(&5), Some(&900));
        assert_eq!(w.into.get(&4), Some(&2000));
        assert_eq!(w.into.get(&5), Some(&2000));
        assert_eq!((w.out.len(), w.into.len()), (2, 2));
        assert_eq!(rt_parse(&rt_message(9, epoch)).map(|m| m.0), Some(9));
        assert_eq!(rt_parse(b"RTMS"), None);
    }

    #[test]
    fn percentiles_and_shares() {
        let spec = E2Spec {
            scenario: "x",
            proto: "udp",
            bulk: false,
            rt_priority: 6,
            realtime_members: 1,
            sent: 1002,
            bulk_mbit: 0.0,
            engines: [EngineLoad::default(); 2],
        };
        // Message k sent at k ms, read 1 + k µs later: 1..=1000 µs.
        let got: Vec<RtSample> = (0..1000u64)
            .map(|k| RtSample {
                seq: k,
                sent: k * 1_000_000,
                read: k * 1_000_000 + (k + 1) * 1000,
            })
            .collect();
        // Messages 0 and 1 seen on the wire, 3 µs after sending, 2 µs across.
        let mut wire = WireTimes::default();
        for k in 0..2u64 {
            wire.out.insert(k, k * 1_000_000 + 3000);
            wire.into.insert(k, k * 1_000_000 + 5000);
        }
        wire.out.insert(7, 1); // never crossed: not a sample
        let r = stats_row(spec, &got, &wire);
        assert_eq!(r.lost, 2);
        assert_eq!((r.app_to_wire.n, r.switch.n), (2, 2));
        assert_eq!((r.app_to_wire.p50_us, r.switch.max_us), (3.0, 2.0));
        assert_eq!(
            r.wire_to_app.min_us, 0.0,
            "read 1 µs after sending, before the wire: clamped"
        );
        assert_eq!(r.p50_us, 500.0);
        assert_eq!(r.p99_us, 990.0);
        assert_eq!(r.min_us, 1.0);
        assert_eq!(r.max_us, 1000.0);
        assert!(r.p999_us.is_none(), "p99.9 needs 100,000 samples");
        let s = shares(&[10, 10], &[60, 160]);
        assert!((s[0] - 0.25).abs() < 1e-9 && (s[1] - 0.75).abs() < 1e-9);
        assert_eq!(shares(&[1], &[1]), vec![0.0]);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }
}
