//! `softoe bench --only loss`: goodput and loss recovery under random
//! drops, softoe beside Linux over the same lossy link.
//!
//! The client's link to the bridge drops each TCP frame with the rate's
//! probability, both ways (the testbed's eBPF programs at ingress, so
//! drops are loss on the wire, invisible to the sender), with segmentation
//! offloads off on that link so a drop loses one segment, not a
//! super-packet — as `softoe demo`'s 1 % rows do. The bridge's ports keep
//! each flow in order (`Testbed::flow_order`), as a wire does: left alone
//! (`--loss-veth-reorder`) a veth reorders a flow now and then, because
//! each frame enters the backlog of the CPU that sent it and a TCP sender
//! sends from two CPUs, and the sweep then measures each side's answer to
//! that reordering beside its answer to loss. At each rate four transfers
//! cross that link:
//!
//! - **softoe sends**: softoe's source (the benchmark's servers, a separate
//!   program on the engine) to the Linux client;
//! - **Linux sends**: the same program on Linux's TCP in the peer's
//!   namespace to the same client — the fair reference for softoe's sender;
//! - **softoe receives**: the Linux client to softoe's checking sink;
//! - **Linux receives**: the Linux client to the same sink on Linux.
//!
//! Every stream carries a pattern (byte *i* is *i* mod 251), checked by its
//! receiver, so a retransmission of the wrong bytes shows, not only a short
//! count. For each transfer: goodput, bytes, the frames the wire dropped in
//! each direction during the run (and a `tbf` queue's own drops, on the
//! millisecond-RTT link), the sender's retransmitted segments and
//! retransmission timeouts (Linux: `RetransSegs` and `TCPTimeouts` of the
//! sender's namespace, read before and after; softoe: the connection's
//! counters in the engine's `softoe stat` snapshots), retransmissions per
//! segment dropped in the data direction, and softoe ÷ Linux goodput.
//!
//! A transfer stops at `--loss-secs` if it has not finished: it then
//! reports what it moved in that time (a send's time includes draining
//! what it had written). The clock starts once connected, so a lost SYN's
//! one-second timeout does not decide a short run.

mod counts;
mod report;
mod transfer;

pub(crate) use report::{LossSummary, median, plots, render, summarize};

use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use indicatif::ProgressBar;
use serde::Serialize;
use softoe_testbed::{LinkDrops, Netns};

use crate::bed::{BedOptions, ENGINE, PEER, RealBed};
use crate::bench::server::servers_cmd;
use crate::server::{CHECKED_SINK, PATTERN_SOURCE, Servers};
use counts::{SenderCounts, Watch, linux_counts};
use transfer::{Moved, fetch, push};

/// How long connecting may take: a few lost SYNs at 10 % loss.
const CONNECT: Duration = Duration::from_secs(20);
/// How long a send may take to drain what it wrote after its time is up.
const DRAIN: Duration = Duration::from_secs(120);
/// The queue of the millisecond-RTT link's `tbf`, each way.
const MS_QUEUE: Duration = Duration::from_millis(5);
/// The millisecond-RTT link's rate, each way.
const MS_RATE_MBIT: u64 = 100;

/// One of the four transfers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SoftoeSends,
    LinuxSends,
    SoftoeReceives,
    LinuxReceives,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::SoftoeSends,
        Kind::LinuxSends,
        Kind::SoftoeReceives,
        Kind::LinuxReceives,
    ];

    /// The series' name (table, JSON and plot legend).
    fn series(self) -> &'static str {
        match self {
            Kind::SoftoeSends => "softoe sends",
            Kind::LinuxSends => "Linux sends",
            Kind::SoftoeReceives => "softoe receives",
            Kind::LinuxReceives => "Linux receives",
        }
    }

    /// Who sends to whom.
    fn path(self) -> &'static str {
        match self {
            Kind::SoftoeSends => "softoe → client",
            Kind::LinuxSends => "Linux peer → client",
            Kind::SoftoeReceives => "client → softoe",
            Kind::LinuxReceives => "client → Linux peer",
        }
    }

    /// Whether the data flows toward the client.
    fn to_client(self) -> bool {
        matches!(self, Kind::SoftoeSends | Kind::LinuxSends)
    }

    /// The Linux reference this one is compared with, for softoe's.
    fn reference(self) -> Option<Kind> {
        match self {
            Kind::SoftoeSends => Some(Kind::LinuxSends),
            Kind::SoftoeReceives => Some(Kind::LinuxReceives),
            _ => None,
        }
    }
}

/// One transfer of the sweep, as printed and as JSON.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LossRow {
    /// The client's link: `veth`, or the millisecond-RTT `tbf` link.
    pub link: String,
    /// The drop rate each way, percent.
    pub loss_percent: f64,
    /// Which round at this rate (from 1).
    pub rep: usize,
    /// `softoe sends`, `Linux sends`, `softoe receives`, `Linux receives`.
    pub series: &'static str,
    /// Who sent to whom.
    pub path: &'static str,
    /// Bytes asked for.
    pub requested: u64,
    /// Bytes delivered (and checked).
    pub bytes: u64,
    /// Seconds from connected to the last byte.
    pub secs: f64,
    /// Stopped at the time limit before `requested` bytes.
    pub capped: bool,
    /// The receiver counted every byte sent (all of them, unless capped)
    /// and each matched the pattern.
    pub intact: bool,
    /// Megabits per second delivered.
    pub goodput_mbps: f64,
    /// Frames the drop programs dropped toward the client in this run.
    pub dropped_to_client: u64,
    /// Frames they dropped from the client.
    pub dropped_from_client: u64,
    /// Frames the millisecond-RTT link's queues dropped, toward the client
    /// and from it (0 on the plain veth).
    pub queue_dropped_to_client: u64,
    /// See `queue_dropped_to_client`.
    pub queue_dropped_from_client: u64,
    /// All frames lost in the data direction (drop program and queue).
    pub data_dropped: u64,
    /// All frames lost in the other direction (ACKs, mostly).
    pub ack_dropped: u64,
    /// The sender's counters over the run (`None`: softoe's connection was
    /// never seen in the engine's snapshots).
    pub sender: Option<SenderCounts>,
    /// softoe's smoothed RTT at the end, ms (softoe's sending runs only).
    pub sender_srtt_ms: Option<f64>,
    /// Retransmitted segments per frame lost in the data direction.
    pub retrans_per_drop: Option<f64>,
    /// softoe's goodput ÷ Linux's in the same role (softoe's rows only).
    pub vs_linux: Option<f64>,
    /// Why the transfer failed, if it did.
    pub error: Option<String>,
}

/// What the sweep runs.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Drop rates (percent) on the plain veth link.
    pub rates: Vec<f64>,
    /// Drop rates on the millisecond-RTT link (empty: skip it).
    pub ms_rates: Vec<f64>,
    /// Rounds of the four transfers at each rate (the veth's goodput
    /// moves 2–5× run to run: one round's ratio is noise there).
    pub reps: usize,
    /// Bytes per transfer.
    pub bytes: u64,
    /// Longest a transfer may take.
    pub limit: Duration,
    /// The congestion control of the Linux sender beside softoe's (the
    /// peer's source): softoe's own by default, so that the sweep compares
    /// loss recovery, not two congestion controllers. The client that sends
    /// into both receivers keeps its namespace's default.
    pub linux_cc: String,
    /// Keep each flow in order on the bridge's ports
    /// ([`Testbed::flow_order`]): left alone, the veths reorder a flow
    /// whose sender runs on two CPUs.
    ///
    /// [`Testbed::flow_order`]: softoe_testbed::Testbed::flow_order
    pub flow_order: bool,
}

/// softoe's congestion control, and so the Linux senders' by default.
pub(crate) const DEFAULT_LINUX_CC: &str = "cubic";

impl Options {
    /// How many transfers the sweep makes.
    pub fn runs(&self) -> u64 {
        4 * self.reps.max(1) as u64 * (self.rates.len() + self.ms_rates.len()) as u64
    }

    /// The command that runs this sweep.
    pub fn command(&self) -> String {
        let list = |r: &[f64]| {
            r.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let bytes = if self.bytes.is_multiple_of(1 << 20) {
            format!("{}M", self.bytes >> 20)
        } else {
            self.bytes.to_string()
        };
        let ms = if self.ms_rates.is_empty() {
            " --no-ms-rtt".to_string()
        } else {
            format!(" --loss-ms-rtt {}", list(&self.ms_rates))
        };
        let reps = if self.reps > 1 {
            format!(" --loss-reps {}", self.reps)
        } else {
            String::new()
        };
        format!(
            "softoe bench --only loss --loss {} --loss-bytes {bytes} --loss-secs {}{ms}{reps} \
             --linux-cc {}{}",
            list(&self.rates),
            self.limit.as_secs_f64(),
            self.linux_cc,
            if self.flow_order {
                ""
            } else {
                " --loss-veth-reorder"
            }
        )
    }

    /// Checks the rates and sizes before anything is built.
    pub fn validate(&self) -> Result<()> {
        for &r in self.rates.iter().chain(&self.ms_rates) {
            softoe_testbed::drop_ppm(r).map_err(|e| anyhow!("loss rate {r}: {e}"))?;
        }
        if self.rates.is_empty() && self.ms_rates.is_empty() {
            bail!("--loss names no rate");
        }
        if !(1..=100).contains(&self.reps) {
            bail!("--loss-reps must be from 1 to 100");
        }
        if self.bytes < 64 * 1024 {
            bail!("--loss-bytes must be at least 64K");
        }
        if self.limit < Duration::from_millis(100) || self.limit > Duration::from_secs(3600) {
            bail!("--loss-secs must be from 0.1 to 3600");
        }
        let available =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .unwrap_or_default();
        if !available.split_whitespace().any(|a| a == self.linux_cc) {
            bail!(
                "--linux-cc {}: this kernel offers {}",
                self.linux_cc,
                if available.trim().is_empty() {
                    "none it names"
                } else {
                    available.trim()
                }
            );
        }
        Ok(())
    }
}

/// The sweep on a fresh testbed: every rate on the plain link, then every
/// millisecond-RTT rate on the `tbf` link.
pub(crate) fn run(
    base: &BedOptions,
    exe: &Path,
    opts: &Options,
    pb: &ProgressBar,
) -> Result<Vec<LossRow>> {
    opts.validate()?;
    let control =
        std::env::temp_dir().join(format!("softoe-bench-loss-{}.ctl", std::process::id()));
    let bed = RealBed::start(BedOptions {
        control: Some(control.clone()),
        ..base.clone()
    })?;
    // softoe's servers send with the policy `softoe run` gives programs by
    // default (`copy`): the sweep measures the engine a user gets.
    let _softoe = Servers::start(servers_cmd(
        exe,
        Some(bed.host()),
        &bed.peer,
        ENGINE,
        "copy",
    ))?;
    // The congestion control of the Linux sender that softoe's sender is
    // set beside is named (TCP_CONGESTION on the peer's listeners): this
    // machine's default is BBR, which does not slow down for random loss,
    // and beside softoe's CUBIC it would measure the congestion controller,
    // not the loss recovery. The client that sends into both receivers
    // keeps its namespace's default: one sender for both, fair either way.
    let mut linux = servers_cmd(exe, None, &bed.peer, PEER, "overlap");
    linux.args(["--cc", &opts.linux_cc]);
    let _linux = Servers::start(linux)?;
    // Wire-sized segments both ways on the client's link: its own veth
    // neither builds nor coalesces super-packets, and its bridge port cuts
    // softoe's and Linux's into segments.
    let off = ["tso", "off", "gso", "off", "gro", "off"];
    bed.tb.ethtool_k(&bed.client, "eth0", &off)?;
    bed.tb.ethtool_k(&bed.sw, &bed.client_port, &off)?;
    let peer_port = bed
        .tb
        .veth_to_bridge_port(&bed.peer)
        .ok_or_else(|| anyhow!("no bridge port found for the Linux peer"))?;
    if opts.flow_order {
        // Where a Linux sender's frames first wait in a CPU's backlog: the
        // bridge's ports of the client and the Linux peer. Steered there,
        // each flow crosses the bridge and what lies beyond on one CPU, in
        // order. softoe's frames come from the engine's one thread through
        // the TAP, in order already; the client's and the peer's own ends
        // take frames from the bridge, so steering them too would only
        // move the receivers' work between CPUs (measured: it moved
        // softoe's sender by ±40 % with where the hash fell).
        for dev in [bed.client_port.as_str(), peer_port.as_str()] {
            bed.tb
                .flow_order(&bed.sw, dev)
                .with_context(|| format!("keeping flows in order on {dev}"))?;
        }
    }
    let at = Ctx {
        bed: &bed,
        control: &control,
        peer_port: &peer_port,
        opts,
        pb,
    };
    let mut rows = Vec::new();
    for &rate in &opts.rates {
        for rep in 1..=opts.reps {
            rows.extend(at.rate("veth", rate, rep)?);
        }
    }
    if !opts.ms_rates.is_empty() {
        // Every queue off the client host, in the switch: toward the
        // client at its port, from it at the ports toward softoe (the TAP)
        // and the Linux peer. A queue on the client's own eth0 would make
        // its overflows local drops, which Linux's TCP sees and retries at
        // once — not loss on a path.
        for dev in [&bed.client_port, &bed.tap, &peer_port] {
            bed.tb.tbf_latency(&bed.sw, dev, MS_RATE_MBIT, MS_QUEUE)?;
        }
        let link = format!("{MS_RATE_MBIT} Mb/s, {} ms queue", MS_QUEUE.as_millis());
        for &rate in &opts.ms_rates {
            for rep in 1..=opts.reps {
                rows.extend(at.rate(&link, rate, rep)?);
            }
        }
    }
    bed.tb.clear_drop(&bed.client)?;
    bed.tb.clear_drop(&bed.sw)?;
    Ok(rows)
}

/// What every transfer of the sweep needs.
struct Ctx<'a> {
    bed: &'a RealBed,
    /// The engine's control socket.
    control: &'a Path,
    /// The Linux peer's bridge port (in `bed.sw`).
    peer_port: &'a str,
    opts: &'a Options,
    pb: &'a ProgressBar,
}

impl Ctx<'_> {
    /// The four transfers at one drop rate, with softoe ÷ Linux filled in.
    fn rate(&self, link: &str, rate: f64, rep: usize) -> Result<Vec<LossRow>> {
        let bed = self.bed;
        bed.tb.lossy_link(&bed.client, &bed.sw, rate)?;
        let mut rows = Vec::new();
        for kind in Kind::ALL {
            self.pb
                .set_message(format!("loss {rate} % ({link}): {}", kind.series()));
            let row = match self.transfer(kind) {
                Ok(r) => r,
                Err(e) => LossRow {
                    sender: None,
                    error: Some(format!("{e:#}")),
                    ..Measured::default().row(kind, self.opts.bytes)
                },
            };
            rows.push(LossRow {
                link: link.to_string(),
                loss_percent: rate,
                rep,
                ..row
            });
            self.pb.inc(1);
        }
        let goodput = |k: Kind| {
            rows.iter()
                .find(|r| r.series == k.series() && r.error.is_none())
                .map(|r| r.goodput_mbps)
        };
        let ratios: Vec<Option<f64>> = Kind::ALL
            .iter()
            .map(|k| {
                let (Some(s), Some(l)) = (goodput(*k), goodput(k.reference()?)) else {
                    return None;
                };
                (l > 0.0).then(|| s / l)
            })
            .collect();
        for (r, x) in rows.iter_mut().zip(ratios) {
            r.vs_linux = x;
        }
        Ok(rows)
    }

    /// The drops of the client's link's queues so far (0 without a
    /// `tbf`): toward the client at its port; from it at the ports toward
    /// softoe and the Linux peer.
    fn queue_drops(&self) -> Result<LinkDrops> {
        let (tb, sw) = (&self.bed.tb, &self.bed.sw);
        Ok(LinkDrops {
            to_host: tb.qdisc_dropped(sw, &self.bed.client_port)?,
            from_host: tb.qdisc_dropped(sw, &self.bed.tap)?
                + tb.qdisc_dropped(sw, self.peer_port)?,
        })
    }

    /// One transfer, its drops and its sender's counters.
    fn transfer(&self, kind: Kind) -> Result<LossRow> {
        let (bed, control) = (self.bed, self.control);
        let (want, limit) = (self.opts.bytes, self.opts.limit);
        // Linux's counters are its sender's namespace's.
        let linux: Option<&Netns> = match kind {
            Kind::SoftoeSends => None,
            Kind::LinuxSends => Some(&bed.peer),
            Kind::SoftoeReceives | Kind::LinuxReceives => Some(&bed.client),
        };
        let counts = |ns: &Netns| -> Result<SenderCounts> { ns.run(linux_counts)? };
        let before = linux.map(counts).transpose()?;
        let drops0 = bed.tb.link_drops(&bed.client, &bed.sw)?;
        let queue0 = self.queue_drops()?;
        let (tell, told) = mpsc::channel();
        let watch = (kind == Kind::SoftoeSends)
            .then(|| Watch::start(control.to_path_buf(), PATTERN_SOURCE, told));
        let c = bed.client.clone();
        let moved: Result<Result<Moved>, softoe_testbed::Error> = match kind {
            Kind::SoftoeSends | Kind::LinuxSends => {
                let ip = if kind == Kind::SoftoeSends {
                    ENGINE
                } else {
                    PEER
                };
                let to = SocketAddrV4::new(ip, PATTERN_SOURCE);
                c.run(move || fetch(to, want, limit, tell))
            }
            Kind::SoftoeReceives | Kind::LinuxReceives => {
                let ip = if kind == Kind::SoftoeReceives {
                    ENGINE
                } else {
                    PEER
                };
                let to = SocketAddrV4::new(ip, CHECKED_SINK);
                drop(tell);
                c.run(move || push(to, want, limit))
            }
        };
        let conn = watch.and_then(Watch::finish);
        // The client's kernel has the last byte; the sender's last ACKs are on
        // their way: a moment, so the counters below include them.
        std::thread::sleep(Duration::from_millis(20));
        let drops = bed.tb.link_drops(&bed.client, &bed.sw)?.since(drops0);
        let queue = self.queue_drops()?.since(queue0);
        let sender = match (linux, before) {
            (Some(ns), Some(b)) => Some(counts(ns)?.since(b)),
            _ => conn.as_ref().map(SenderCounts::of),
        };
        let moved = moved??;
        Ok(Measured {
            moved: Some(moved),
            drops,
            queue,
            sender,
            srtt_ms: conn.map(|c| c.srtt_us / 1e3),
        }
        .row(kind, want))
    }
}

/// Everything one transfer measured.
#[derive(Debug, Default)]
struct Measured {
    moved: Option<Moved>,
    drops: LinkDrops,
    queue: LinkDrops,
    sender: Option<SenderCounts>,
    srtt_ms: Option<f64>,
}

impl Measured {
    /// The row (without link, rate and ratio).
    fn row(self, kind: Kind, requested: u64) -> LossRow {
        let m = self.moved.unwrap_or(Moved {
            bytes: 0,
            secs: 0.0,
            capped: false,
            mismatches: 0,
        });
        let to = self.drops.to_host + self.queue.to_host;
        let from = self.drops.from_host + self.queue.from_host;
        let (data_dropped, ack_dropped) = if kind.to_client() {
            (to, from)
        } else {
            (from, to)
        };
        LossRow {
            link: String::new(),
            loss_percent: 0.0,
            rep: 1,
            series: kind.series(),
            path: kind.path(),
            requested,
            bytes: m.bytes,
            secs: m.secs,
            capped: m.capped,
            intact: self.moved.is_some() && m.mismatches == 0 && (m.capped || m.bytes == requested),
            goodput_mbps: if m.secs > 0.0 {
                m.bytes as f64 * 8.0 / m.secs / 1e6
            } else {
                0.0
            },
            dropped_to_client: self.drops.to_host,
            dropped_from_client: self.drops.from_host,
            queue_dropped_to_client: self.queue.to_host,
            queue_dropped_from_client: self.queue.from_host,
            data_dropped,
            ack_dropped,
            sender: self.sender,
            sender_srtt_ms: self.srtt_ms,
            retrans_per_drop: self
                .sender
                .filter(|_| data_dropped > 0)
                .map(|s| s.retrans as f64 / data_dropped as f64),
            vs_linux: None,
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn rounds_are_summarized_by_their_medians() {
        let row = |rate: f64, rep: usize, kind: Kind, mbps: f64, vs: Option<f64>| LossRow {
            link: "veth".into(),
            loss_percent: rate,
            rep,
            goodput_mbps: mbps,
            intact: true,
            vs_linux: vs,
            retrans_per_drop: Some(mbps / 100.0),
            ..Measured::default().row(kind, 100)
        };
        let mut rows = vec![
            row(1.0, 1, Kind::SoftoeSends, 100.0, Some(0.5)),
            row(1.0, 1, Kind::LinuxSends, 200.0, None),
            row(1.0, 2, Kind::SoftoeSends, 300.0, Some(3.0)),
            row(1.0, 2, Kind::LinuxSends, 100.0, None),
            row(1.0, 3, Kind::SoftoeSends, 200.0, Some(1.0)),
            row(1.0, 3, Kind::LinuxSends, 150.0, None),
            row(5.0, 1, Kind::SoftoeSends, 10.0, None),
        ];
        rows.push(LossRow {
            error: Some("refused".into()),
            ..row(5.0, 2, Kind::SoftoeSends, 0.0, None)
        });
        let s = summarize(&rows);
        assert_eq!(s.len(), 3, "(1 %, softoe), (1 %, Linux), (5 %, softoe)");
        assert_eq!((s[0].series, s[0].rounds), (Kind::SoftoeSends.series(), 3));
        assert_eq!(s[0].goodput_mbps, 200.0);
        assert_eq!(s[0].vs_linux, Some(1.0), "the median of the rounds' ratios");
        assert_eq!(s[0].retrans_per_drop, Some(2.0));
        assert!(s[0].intact);
        assert_eq!(s[1].goodput_mbps, 150.0);
        assert_eq!(s[1].vs_linux, None);
        assert_eq!((s[2].rounds, s[2].goodput_mbps), (1, 10.0));
        assert!(!s[2].intact, "a failed round is not intact");
        assert_eq!(median(vec![1.0, 4.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }

    fn row(kind: Kind, goodput: f64) -> LossRow {
        LossRow {
            link: "veth".into(),
            loss_percent: 1.0,
            goodput_mbps: goodput,
            ..Measured {
                moved: Some(Moved {
                    bytes: 1 << 20,
                    secs: 0.5,
                    capped: false,
                    mismatches: 0,
                }),
                drops: LinkDrops {
                    to_host: 10,
                    from_host: 4,
                },
                queue: LinkDrops::default(),
                sender: Some(SenderCounts {
                    retrans: 12,
                    timeouts: 1,
                    ..SenderCounts::default()
                }),
                srtt_ms: None,
            }
            .row(kind, 1 << 20)
        }
    }

    #[test]
    fn rows_count_drops_in_the_data_direction() {
        let r = row(Kind::SoftoeSends, 100.0);
        assert!(r.intact);
        assert_eq!(r.data_dropped, 10, "toward the client");
        assert_eq!(r.retrans_per_drop, Some(1.2));
        let r = row(Kind::SoftoeReceives, 100.0);
        assert_eq!(r.data_dropped, 4, "from the client");
        assert_eq!(r.retrans_per_drop, Some(3.0));
        let short = Measured {
            moved: Some(Moved {
                bytes: 1000,
                secs: 1.0,
                capped: false,
                mismatches: 0,
            }),
            ..Measured::default()
        }
        .row(Kind::LinuxSends, 2000);
        assert!(!short.intact, "a short stream that was not capped");
        assert_eq!(short.retrans_per_drop, None, "no drops, no ratio");
    }

    #[test]
    fn the_table_says_what_was_measured() {
        let mut rows = vec![row(Kind::SoftoeSends, 50.0), row(Kind::LinuxSends, 200.0)];
        rows[0].vs_linux = Some(0.25);
        rows[1].capped = true;
        rows.push(LossRow {
            error: Some("connect 10.7.0.1:10: timed out".into()),
            ..row(Kind::SoftoeReceives, 0.0)
        });
        let opts = Options {
            rates: vec![0.1, 1.0],
            ms_rates: vec![],
            reps: 1,
            bytes: 32 << 20,
            limit: Duration::from_secs(8),
            linux_cc: DEFAULT_LINUX_CC.into(),
            flow_order: true,
        };
        assert_eq!(
            opts.command(),
            "softoe bench --only loss --loss 0.1,1 --loss-bytes 32M --loss-secs 8 --no-ms-rtt \
             --linux-cc cubic"
        );
        let opts = Options {
            flow_order: false,
            ..opts
        };
        let cmd = opts.command();
        assert_eq!(
            cmd,
            "softoe bench --only loss --loss 0.1,1 --loss-bytes 32M --loss-secs 8 --no-ms-rtt \
             --linux-cc cubic --loss-veth-reorder"
        );
        let text = render(&rows, &cmd);
        assert!(text.contains(&cmd), "{text}");
        assert!(text.contains("softoe sends"), "{text}");
        assert!(text.contains("0.25x"), "{text}");
        assert!(text.contains("10/4"), "data/ack drops: {text}");
        assert!(text.contains("0.50*"), "capped: {text}");
        assert!(text.contains("failed: connect 10.7.0.1:10"), "{text}");
        let dir = std::env::temp_dir().join(format!("softoe-loss-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = plots(&rows, &dir).unwrap();
        assert_eq!(p, vec![dir.join("loss-goodput.svg")]);
        let svg = std::fs::read_to_string(&p[0]).unwrap();
        assert!(svg.contains("Linux sends") && svg.contains("softoe sends"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_options_are_refused() {
        let ok = Options {
            rates: vec![0.1],
            ms_rates: vec![1.0],
            reps: 1,
            bytes: 1 << 20,
            limit: Duration::from_secs(1),
            linux_cc: DEFAULT_LINUX_CC.into(),
            flow_order: false,
        };
        assert!(
            Options {
                reps: 3,
                ..ok.clone()
            }
            .command()
            .contains("--loss-reps 3 --linux-cc cubic")
        );
        assert!(ok.validate().is_ok());
        for bad in [
            Options {
                rates: vec![150.0],
                ..ok.clone()
            },
            Options {
                ms_rates: vec![-1.0],
                ..ok.clone()
            },
            Options {
                bytes: 10,
                ..ok.clone()
            },
            Options {
                limit: Duration::ZERO,
                ..ok.clone()
            },
            Options {
                reps: 0,
                ..ok.clone()
            },
            Options {
                limit: Duration::from_secs(1 << 40),
                ..ok.clone()
            },
            Options {
                rates: vec![],
                ms_rates: vec![],
                ..ok.clone()
            },
            Options {
                linux_cc: "vegas-but-not-here".into(),
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
