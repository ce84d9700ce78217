//! `softoe bench bond`'s tables and plots.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::e2::Dist;
use super::e3_e6::e3_ratio;
use super::{BALANCE_RR_OF_4, BondReport, ETHERTYPE_ARPP, POLICIES, mean};
use crate::plot::{self, Series};
use crate::table::Table;

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

pub(super) fn render_e1(r: &BondReport, o: &mut String) {
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
    let mut t = Table::new()
        .indent(2)
        .right("N")
        .left("policy")
        .left("")
        .left("dir")
        .right("Mbit/s")
        .right("eff")
        .left("member shares")
        .rights(&[
            "retrans",
            "spurious",
            "reorder",
            "loss %",
            "q-drop",
            "sent",
            "rx drops s/p",
        ]);
    for e in &r.e1 {
        let sh = e
            .shares
            .iter()
            .map(|s| format!("{s:.2}"))
            .collect::<Vec<_>>()
            .join(" ");
        let tcp = |v: String| if e.proto == "tcp" { v } else { "-".into() };
        let udp = |v: String| if e.proto == "udp" { v } else { "-".into() };
        t.row([
            e.members.to_string(),
            e.policy.to_string(),
            e.proto.to_string(),
            e.direction.to_string(),
            format!("{:.1}", e.goodput_mbit),
            format!("{:.2}", e.efficiency),
            sh,
            tcp(e.retrans.to_string()),
            tcp(e.spurious_retrans.to_string()),
            tcp(e.reordering.to_string()),
            udp(format!("{:.2}", e.loss * 100.0)),
            e.queue_drops.to_string(),
            udp(format!("{:.0}", e.sent_mbit)),
            udp(format!("{}/{}", e.rx_queue_drops, e.port_drops)),
        ]);
    }
    o.push_str(&t.render());
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

/// E2 to E6 and the targets, each only where it ran.
pub(super) fn render_rest(r: &BondReport, o: &mut String) {
    render_e2(r, o);
    render_e3(r, o);
    render_e4(r, o);
    render_e5(r, o);
    render_e6(r, o);
    render_targets(r, o);
}

/// E2: the real-time channel's one-way times and where the time went.
fn render_e2(r: &BondReport, o: &mut String) {
    use std::fmt::Write as _;
    if !r.e2.is_empty() {
        let _ = writeln!(
            o,
            "\nE2 real-time channel: 64-byte messages at 1 kHz, app-to-app one-way µs (paper Fig. 6–9)"
        );
        let mut t = Table::new().indent(2).left("scenario").left("").rights(&[
            "samples",
            "lost",
            "min",
            "mean",
            "std",
            "p50",
            "p99",
            "p99.9",
            "max",
            "bulk Mb/s",
        ]);
        let us = |v: f64| format!("{v:.0}");
        for e in &r.e2 {
            t.row([
                e.scenario.to_string(),
                e.proto.to_string(),
                e.samples.to_string(),
                e.lost.to_string(),
                us(e.min_us),
                us(e.mean_us),
                us(e.std_us),
                us(e.p50_us),
                us(e.p99_us),
                e.p999_us.map_or("-".into(), us),
                us(e.max_us),
                format!("{:.1}", e.bulk_mbit),
            ]);
        }
        o.push_str(&t.render());
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
        let mut t = Table::new().indent(2).left("scenario").left("").rights(&[
            "seen",
            "app → wire",
            "wire → wire",
            "wire → app",
            "engines cpu/wait",
        ]);
        let d = |x: &Dist| format!("{:.0} / {:.0} / {:.0}", x.mean_us, x.p50_us, x.p99_us);
        for e in &r.e2 {
            t.row([
                e.scenario.to_string(),
                e.proto.to_string(),
                e.app_to_wire.n.to_string(),
                d(&e.app_to_wire),
                d(&e.switch),
                d(&e.wire_to_app),
                e.engines
                    .iter()
                    .map(|l| format!("{:.0}%/{:.0}", l.cpu * 100.0, l.wait_per_slice_us))
                    .collect::<Vec<_>>()
                    .join(" "),
            ]);
        }
        o.push_str(&t.render());
        let _ = writeln!(
            o,
            "  (kernel timestamps on the switch's devices: \"wire\" out is the sending engine's frame\n   \
             entering its TAP, before the link's shaping; \"wire\" in is the kernel handing it to the\n   \
             receiver's TAP, after both links and the bridge; seen: messages found both places;\n   \
             engines: the sending and the receiving engine thread's share of a CPU and the µs it\n   \
             waited on a run queue per time slice, from /proc schedstat)"
        );
    }
}

/// E3: one bonded member against the plain port.
fn render_e3(r: &BondReport, o: &mut String) {
    use std::fmt::Write as _;
    if !r.e3.is_empty() {
        let _ = writeln!(
            o,
            "\nE3 overhead of one bonded member vs the plain port, at the link rate and unshaped (paper Table 2)"
        );
        let mut t = Table::new()
            .indent(2)
            .left("link")
            .left("port")
            .right("rep")
            .right("Mbit/s")
            .right("eng s/GiB");
        for e in &r.e3 {
            t.row([
                e.link.to_string(),
                e.port.to_string(),
                e.rep.to_string(),
                format!("{:.1}", e.goodput_mbit),
                format!("{:.3}", e.engine_s_per_gib),
            ]);
        }
        o.push_str(&t.render());
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
}

/// E4: failover.
fn render_e4(r: &BondReport, o: &mut String) {
    use std::fmt::Write as _;
    if !r.e4.is_empty() {
        let _ = writeln!(
            o,
            "\nE4 failover: one of two members cut mid-transfer, then back"
        );
        let mut t = Table::new().indent(2).left("policy").rights(&[
            "lost B",
            "gap ms",
            "before",
            "cut",
            "after",
            "rejoin ms",
            "full-rate ms",
        ]);
        let one = |v: f64| format!("{v:.1}");
        for e in &r.e4 {
            t.row([
                e.policy.to_string(),
                e.bytes_lost.to_string(),
                one(e.gap_ms),
                one(e.before_mbit),
                one(e.cut_mbit),
                one(e.after_mbit),
                one(e.rejoin_ms),
                e.full_rate_ms.map_or("-".into(), |v| format!("{v:.0}")),
            ]);
        }
        o.push_str(&t.render());
        let _ = writeln!(
            o,
            "  (before/cut/after: goodput, Mbit/s; gap: longest wait between reads that made progress,\n   \
             from 0.1 s before the cut to 1 s after; full rate: a 200 ms window at 90 % of before)"
        );
    }
}

/// E5: a plain-ARP Linux host.
fn render_e5(r: &BondReport, o: &mut String) {
    use std::fmt::Write as _;
    for e in &r.e5 {
        let _ = writeln!(
            o,
            "\nE5 plain-ARP Linux host: to the bond {:.1} Mbit/s, from it {:.1} Mbit/s; its neighbour entry\n   \
             for the bond: {:?} over {} samples, {} changes (the bond keeps it on {})",
            e.to_bond_mbit, e.from_bond_mbit, e.macs, e.samples, e.changes, e.home_mac
        );
    }
}

/// E6: ARP+ convergence.
fn render_e6(r: &BondReport, o: &mut String) {
    use std::fmt::Write as _;
    if !r.e6.is_empty() {
        let _ = writeln!(
            o,
            "\nE6 ARP+ convergence: from the last member link up until both ARP+ tables hold every member"
        );
        let mut t = Table::new().indent(2).rights(&[
            "drop %",
            "members",
            "reps",
            "complete",
            "min ms",
            "median",
            "max ms",
            "dropped",
            "from start ms",
        ]);
        let one = |v: f64| format!("{v:.1}");
        for e in &r.e6 {
            t.row([
                one(e.drop_percent),
                e.members.to_string(),
                e.reps.to_string(),
                e.complete.to_string(),
                one(e.min_ms),
                one(e.median_ms),
                one(e.max_ms),
                e.dropped.to_string(),
                format!("{:.0}", e.from_start_median_ms),
            ]);
        }
        o.push_str(&t.render());
        let _ = writeln!(
            o,
            "  (dropped: ARP+ frames (EtherType {ETHERTYPE_ARPP:#06x}) the engines sent that an eBPF program\n   \
             dropped as they entered the switch, over all repetitions: a dropped broadcast reaches nobody;\n   \
             from start: the median from the first engine's start, the testbed's setup included)"
        );
    }
}

/// The bond's targets (issue 16).
fn render_targets(r: &BondReport, o: &mut String) {
    use std::fmt::Write as _;
    if !r.targets.is_empty() {
        let _ = writeln!(o, "\nbond targets (issue 16):");
        let mut table = Table::new()
            .indent(2)
            .left("")
            .left("")
            .right("")
            .left("")
            .left("");
        for t in &r.targets {
            table.row([
                (if t.met { "PASS" } else { "MISS" }).to_string(),
                t.what.to_string(),
                format!("{:.3}", t.ratio),
                t.unit.to_string(),
                format!("goal {}", t.goal),
            ]);
        }
        o.push_str(&table.render());
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
