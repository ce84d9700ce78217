//! The loss sweep's table, its summary over rounds, and its plots.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::counts::SenderCounts;
use super::{Kind, LossRow};
use crate::bed::CLIENT;
use crate::plot::{self, Series};
use crate::table::Table;

/// The sweep as a text table.
pub(crate) fn render(rows: &[LossRow], command: &str) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\nloss sweep ({command}; client {CLIENT}):\n\
         the client's link drops each TCP frame with the given probability both ways (eBPF at\n\
         ingress; offloads off on that link). drops data/ack: frames lost in this run in the\n\
         data direction / the ACK direction (a tbf queue's overflows included); retrans, RTO,\n\
         TLP: the sender's (Linux: its namespace's RetransSegs, TCPTimeouts, TCPLossProbes;\n\
         softoe: the engine's counters for the connection); ÷Linux: softoe's goodput ÷ Linux's\n\
         in the same role. * stopped at the time limit (bytes and seconds as moved).\n\
         Linux sends with the congestion control --linux-cc names (softoe: CUBIC); the client\n\
         sends into both receivers with its namespace's default."
    );
    let mut t = Table::new()
        .left("link")
        .right("loss")
        .left("transfer")
        .rights(&[
            "MiB",
            "s",
            "Mb/s",
            "intact",
            "drops data/ack",
            "retrans",
            "RTO",
            "TLP",
            "rtx/drop",
            "÷Linux",
        ]);
    for r in rows {
        let head = [
            r.link.to_string(),
            format!("{}%", r.loss_percent),
            r.series.to_string(),
        ];
        if let Some(e) = &r.error {
            t.row_tail(head, &format!(" failed: {e}"));
            continue;
        }
        let s = r.sender;
        let num = |f: fn(&SenderCounts) -> u64| s.map_or("?".to_string(), |s| f(&s).to_string());
        t.row(
            head.into_iter().chain([
                format!("{:.1}", r.bytes as f64 / f64::from(1u32 << 20)),
                format!("{:.2}{}", r.secs, if r.capped { "*" } else { " " }),
                format!("{:.1}", r.goodput_mbps),
                (if r.intact { "yes" } else { "NO" }).to_string(),
                format!("{}/{}", r.data_dropped, r.ack_dropped),
                num(|s| s.retrans),
                num(|s| s.timeouts),
                num(|s| s.tlp_probes),
                r.retrans_per_drop
                    .map_or("-".to_string(), |x| format!("{x:.2}")),
                r.vs_linux.map_or(String::new(), |x| format!("{x:.2}x")),
            ]),
        );
    }
    o.push_str(&t.render());
    let summary = summarize(rows);
    if summary.iter().any(|s| s.rounds > 1) {
        let _ = writeln!(
            o,
            "\nmedians over the rounds at each rate (÷Linux: the median of each round's ratio):"
        );
        let mut t = Table::new()
            .left("link")
            .right("loss")
            .left("transfer")
            .rights(&["rounds", "Mb/s", "rtx/drop", "RTOs", "÷Linux", "intact"]);
        for s in &summary {
            t.row([
                s.link.to_string(),
                format!("{}%", s.loss_percent),
                s.series.to_string(),
                s.rounds.to_string(),
                format!("{:.1}", s.goodput_mbps),
                s.retrans_per_drop.map_or("-".into(), |x| format!("{x:.2}")),
                s.timeouts.to_string(),
                s.vs_linux.map_or(String::new(), |x| format!("{x:.2}x")),
                (if s.intact { "all" } else { "NO" }).to_string(),
            ]);
        }
        o.push_str(&t.render());
    }
    o
}

/// One transfer kind at one rate over its rounds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LossSummary {
    pub link: String,
    pub loss_percent: f64,
    pub series: &'static str,
    /// Rounds that completed without an error.
    pub rounds: usize,
    /// Medians over those rounds.
    pub goodput_mbps: f64,
    pub retrans_per_drop: Option<f64>,
    pub vs_linux: Option<f64>,
    /// Retransmission timeouts over all rounds.
    pub timeouts: u64,
    /// Every round delivered every byte intact.
    pub intact: bool,
}

/// The median; `None` if empty.
pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => v.get(n / 2).copied(),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The rows by (link, rate, transfer), in the sweep's order.
pub(crate) fn summarize(rows: &[LossRow]) -> Vec<LossSummary> {
    let mut out: Vec<LossSummary> = Vec::new();
    for r in rows {
        let seen = out
            .iter()
            .any(|s| s.link == r.link && s.loss_percent == r.loss_percent && s.series == r.series);
        if seen {
            continue;
        }
        let all: Vec<&LossRow> = rows
            .iter()
            .filter(|x| {
                x.link == r.link && x.loss_percent == r.loss_percent && x.series == r.series
            })
            .collect();
        let same: Vec<&LossRow> = all.iter().copied().filter(|x| x.error.is_none()).collect();
        out.push(LossSummary {
            link: r.link.clone(),
            loss_percent: r.loss_percent,
            series: r.series,
            rounds: same.len(),
            goodput_mbps: median(same.iter().map(|x| x.goodput_mbps).collect()).unwrap_or(0.0),
            retrans_per_drop: median(same.iter().filter_map(|x| x.retrans_per_drop).collect()),
            vs_linux: median(same.iter().filter_map(|x| x.vs_linux).collect()),
            timeouts: same
                .iter()
                .filter_map(|x| x.sender)
                .map(|s| s.timeouts)
                .sum(),
            // A failed round is never intact.
            intact: all.iter().all(|x| x.error.is_none() && x.intact),
        });
    }
    out
}

/// The plots of the sweep: goodput by drop rate, one per link kind.
pub(crate) fn plots(rows: &[LossRow], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut links: Vec<&str> = Vec::new();
    for r in rows {
        if !links.contains(&r.link.as_str()) {
            links.push(&r.link);
        }
    }
    for link in &links {
        // One point per rate: the median over its rounds.
        let summary = summarize(rows);
        let series: Vec<Series> = Kind::ALL
            .iter()
            .map(|k| Series {
                name: k.series().to_string(),
                points: summary
                    .iter()
                    .filter(|r| r.link == *link && r.series == k.series() && r.rounds > 0)
                    .map(|r| (r.loss_percent, r.goodput_mbps))
                    .collect(),
            })
            .collect();
        // A log axis has no place for zero: nothing to draw if nothing
        // moved.
        if !series
            .iter()
            .flat_map(|s| &s.points)
            .any(|&(x, y)| x > 0.0 && y > 0.0)
        {
            continue;
        }
        let p = dir.join(if *link == "veth" {
            "loss-goodput.svg"
        } else {
            "loss-goodput-ms-rtt.svg"
        });
        plot::log_log(
            &p,
            &format!("Goodput by drop rate over the client's link ({link})"),
            "frames dropped each way (%)",
            "goodput (Mb/s)",
            &series,
        )?;
        out.push(p);
    }
    Ok(out)
}
