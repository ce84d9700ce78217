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

mod e1;
mod e2;
mod e3_e6;
mod link;
mod render;

pub(crate) use render::{plots, render};

use std::time::Duration;

use anyhow::Result;
use indicatif::ProgressBar;
use serde::Serialize;
use softoe_bond::Policy;

use crate::bench::targets::Target;
use e1::{e1, linux_one_link};
use e2::{Dist, E2_SCENARIOS, EngineLoad, e2};
use e3_e6::{e3, e3_ratio, e4, e5, e6};

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
                ..Target::POINT
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
            ..Target::POINT
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
            ..Target::POINT
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
                ..Target::POINT
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
            ..Target::POINT
        });
        let c = e3_ratio(&r.e3, "unshaped", |e| e.engine_s_per_gib);
        t.push(Target {
            what: "bond: one member's engine CPU per GiB ÷ the plain port's (unshaped; median of pairs)"
                .into(),
            ratio: c,
            unit: "x",
            goal: "< 1.05",
            met: c < 1.05,
            ..Target::POINT
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
            ..Target::POINT
        });
    }
    for e in &r.e5 {
        t.push(Target {
            what: "bond: MACs a plain-ARP peer saw for the bond's address".into(),
            ratio: e.macs.len() as f64,
            unit: "MACs",
            goal: "= 1",
            met: e.macs.len() == 1 && e.changes == 0,
            ..Target::POINT
        });
    }
    t
}
