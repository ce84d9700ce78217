//! The report as text tables.

use std::fmt::Write as _;

use super::{AblationRow, Report};
use crate::stats::Figure;
use crate::table::Table;

/// The report as text tables, each only when its scenario ran (`--only`).
pub(super) fn render(r: &Report) -> String {
    let mut o = String::new();
    header(&mut o, r);
    bulk(&mut o, r);
    latency(&mut o, r);
    targets(&mut o, r);
    conditions(&mut o, r);
    engine_notes(&mut o, r);
    ablation(&mut o, r);
    coalescing(&mut o, r);
    scale(&mut o, r);
    engine_cost(&mut o, r);
    others(&mut o, r);
    o
}

/// The header: what ran and how CPU is counted, unless only the bond or apps ran.
fn header(o: &mut String, r: &Report) {
    let only_bond = (r.bond.is_some() || !r.apps.is_empty())
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
        if let Some(rule) = &r.rule
            && !(r.bulk.is_empty() && r.latency.is_empty() && r.apps.is_empty())
        {
            let _ = writeln!(
                o,
                "Bulk, ping-pong and apps rows: softoe and Linux measured in turn, round after round\n\
                 ({}–{} rounds, until every interval is within ±{:.0} % or {:.0} s); each figure\n\
                 the median ± its interval's half-width ({:.0} % from six rounds; the range of\n\
                 fewer), each ratio the median of the rounds' pairs [interval]; two modes\n\
                 shown as \"a (count) | b (count)\".\n",
                rule.min_rounds,
                rule.max_rounds,
                rule.rel_width * 100.0,
                rule.max_time.as_secs_f64(),
                crate::stats::LEVEL * 100.0
            );
        }
    }
}

/// "±4 %", the interval's larger half-width; two modes are shown by
/// [`Figure::show`] instead.
fn pm(f: &Figure) -> String {
    format!("±{:.0} %", f.estimate.rel_half_width() * 100.0)
}

/// A ratio to Linux with its interval: "1.12x [1.05–1.20]".
pub(super) fn ratio_with(f: Option<&Figure>) -> String {
    f.map_or(String::new(), |f| match f.modes {
        Some(_) => f.show(|x| format!("{x:.2}x")),
        None => format!(
            "{:.2}x [{:.2}–{:.2}]",
            f.estimate.median, f.estimate.lo, f.estimate.hi
        ),
    })
}

/// A row's rounds, marked where the machine was not quiet beside it.
fn rounds(n: usize, busy: Option<&crate::conditions::RowBusy>) -> String {
    match busy {
        Some(b) if !b.quiet => format!("{n} busy"),
        _ => n.to_string(),
    }
}

/// The bulk table: medians of the interleaved rounds, their spread and n.
fn bulk(o: &mut String, r: &Report) {
    // Each table only when its scenario ran (`--only`).
    if r.bulk.is_empty() {
        return;
    }
    let mut t = Table::new().left("bulk").left("direction").rights(&[
        "conns",
        "Gb/s",
        "÷ Linux",
        "app s/GiB",
        "eng s/GiB",
        "all s/GiB",
        "n",
    ]);
    for b in &r.bulk {
        let f = &b.figures;
        t.row([
            b.system.to_string(),
            b.direction.to_string(),
            b.conns.to_string(),
            match f.gbps.modes {
                Some(_) => f.gbps.show(|x| format!("{x:.2}")),
                None => format!("{:.2} {}", b.gbps, pm(&f.gbps)),
            },
            ratio_with(b.vs_linux.as_ref()),
            format!("{:.3} {}", b.app_s_per_gib, pm(&f.app_s_per_gib)),
            format!("{:.3}", b.engine_s_per_gib),
            format!("{:.3}", b.machine_s_per_gib),
            rounds(b.repeats.rounds, b.busy.as_ref()),
        ]);
    }
    o.push_str(&t.render());
}

/// The ping-pong table.
fn latency(o: &mut String, r: &Report) {
    if r.latency.is_empty() {
        return;
    }
    let mut t = Table::new().left("ping-pong").rights(&[
        "size",
        "p50 µs",
        "÷ Linux",
        "p99 µs",
        "p99.9 µs",
        "mean µs",
        "Mb/s",
        "host CPU",
        "n",
    ]);
    for l in &r.latency {
        let one = |x: f64| format!("{x:.1}");
        let f = &l.figures;
        t.row([
            l.system.to_string(),
            l.size.to_string(),
            match f.p50_us.modes {
                Some(_) => f.p50_us.show(one),
                None => format!("{} {}", one(l.p50_us), pm(&f.p50_us)),
            },
            ratio_with(l.p50_vs_linux.as_ref()),
            match f.p99_us.modes {
                Some(_) => f.p99_us.show(one),
                None => format!("{} {}", one(l.p99_us), pm(&f.p99_us)),
            },
            one(l.p999_us),
            one(l.mean_us),
            one(l.mbps),
            format!("{:.0}%", l.host_cpu_pct),
            rounds(l.repeats.rounds, l.busy.as_ref()),
        ]);
    }
    o.push('\n');
    o.push_str(&t.render());
}

/// The targets against their goals: met or missed only where the ratio's
/// interval lies on one side of the goal.
fn targets(o: &mut String, r: &Report) {
    if r.targets.is_empty() {
        return;
    }
    let mut t = Table::new()
        .left("target (softoe ÷ Linux)")
        .right("ratio")
        .left("interval")
        .left("goal")
        .left("");
    for x in &r.targets {
        let value = |v: f64| {
            if x.unit == "x" {
                format!("{v:.2}x")
            } else {
                format!("{v:.0} {}", x.unit)
            }
        };
        t.row([
            x.what.to_string(),
            value(x.ratio),
            x.interval.map_or(String::new(), |e| {
                if x.unit == "x" {
                    format!("{:.2}–{:.2} (n {})", e.lo, e.hi, e.n)
                } else {
                    format!("{:.0}–{:.0} (n {})", e.lo, e.hi, e.n)
                }
            }),
            x.goal.to_string(),
            x.verdict().label().to_string(),
        ]);
    }
    o.push('\n');
    o.push_str(&t.render());
    let (met, missed, noise) = super::targets::tally(&r.targets);
    let _ = writeln!(
        o,
        "targets: {met} met, {missed} missed, {noise} within noise (a verdict only where the \
         ratio's interval lies on one side of the goal:\n\
         {:.0} % from six rounds on, the whole range of fewer).",
        crate::stats::LEVEL * 100.0
    );
}

/// Where the parties ran and how quiet the machine was, with the reasons
/// of each row that was not.
fn conditions(o: &mut String, r: &Report) {
    let Some(c) = &r.conditions else { return };
    if c.rows == 0 {
        return;
    }
    let _ = writeln!(o, "\n{}", c.line());
    let busy = r
        .bulk
        .iter()
        .filter(|b| b.system == "Linux")
        .map(|b| (format!("bulk {} {} conn", b.direction, b.conns), &b.busy))
        .chain(
            r.latency
                .iter()
                .filter(|l| l.system == "Linux")
                .map(|l| (format!("ping-pong {} B", l.size), &l.busy)),
        );
    for (row, b) in busy {
        if let Some(b) = b.as_ref().filter(|b| !b.quiet) {
            let _ = writeln!(o, "  {row}: {}", b.reasons.join("; "));
        }
    }
}

/// The engine's sleep and steering, where measured.
fn engine_notes(o: &mut String, r: &Report) {
    if let Some(idle) = r.engine_idle_share {
        let _ = writeln!(
            o,
            "\nengine asleep {:.0} % of the run (spin-then-sleep).",
            idle * 100.0
        );
    }
    if let (Some(share), Some(n)) = (r.engine_steered_share, r.engine_steer_switches) {
        let _ = writeln!(
            o,
            "the kernel's work for the engine's sent frames on the other cores {:.0} % of the run \
             ({n} changes; --engine-steer).",
            share * 100.0
        );
    }
}

/// The ablation table: offloads and policy against coalescing.
fn ablation(o: &mut String, r: &Report) {
    if r.ablation.is_empty() {
        return;
    }
    let mut t = Table::new()
        .title(
            "\nablation (softoe; HL-TCP Table 3's structure): 4-byte p50 µs / one connection host→Linux Gb/s\n\
             (medians of n rounds, the three policies in turn on each engine; ± the goodput's interval)",
        )
        .left("offloads")
        .left("policy")
        .right("coalescing off")
        .right("coalescing on");
    for a in r.ablation.iter().filter(|a| !a.coalescing) {
        let on = r
            .ablation
            .iter()
            .find(|b| b.coalescing && b.offloads == a.offloads && b.policy == a.policy);
        let cell = |x: &AblationRow| {
            format!(
                "{:.1} / {:.2} {} n {}",
                x.rr4_p50_us,
                x.bulk_gbps,
                pm(&x.bulk),
                x.repeats.rounds
            )
        };
        t.row([
            a.offloads.to_string(),
            a.policy.to_string(),
            cell(a),
            on.map_or_else(String::new, cell),
        ]);
    }
    o.push_str(&t.render());
}

/// The coalescing-delay table.
fn coalescing(o: &mut String, r: &Report) {
    if r.coalescing.is_empty() {
        return;
    }
    let mut t = Table::new().left("coalescing µs").rights(&[
        "p50 µs",
        "p99 µs",
        "Linux→host",
        "host→Linux",
        "n",
    ]);
    for c in &r.coalescing {
        let [p50, _, i, out] = &c.figures;
        t.row([
            c.delay_us.to_string(),
            format!("{:.1} {}", c.rr4_p50_us, pm(p50)),
            format!("{:.1}", c.rr4_p99_us),
            format!("{:.2} Gb/s {}", c.in_gbps, pm(i)),
            format!("{:.2} Gb/s {}", c.out_gbps, pm(out)),
            c.repeats.rounds.to_string(),
        ]);
    }
    o.push('\n');
    o.push_str(&t.render());
}

/// The scale table and its legend.
fn scale(o: &mut String, r: &Report) {
    if !r.scale.is_empty() {
        let _ = writeln!(
            o,
            "\nscale: 64-byte echoes; load = every connection busy, held = one flow among idle ones"
        );
        let mut t = Table::new().left("system").rights(&[
            "conns",
            "kreq/s",
            "load p99 µs",
            "fair",
            "retrans",
            "drops",
            "held p50 µs",
            "held p99 µs",
            "eng µs/req",
            "KiB/conn",
            "held eng µs",
            "held slices",
            "idle wakes",
        ]);
        for x in &r.scale {
            let one = |v: f64| format!("{v:.1}");
            let two = |v: f64| format!("{v:.2}");
            t.row([
                x.system.to_string(),
                x.conns.to_string(),
                one(x.rps / 1e3),
                one(x.load_p99_us),
                two(x.load_fairness),
                x.load_retrans.to_string(),
                x.port_drops.to_string(),
                one(x.held_p50_us),
                one(x.held_p99_us),
                two(x.engine_ns_per_rpc / 1e3),
                one(x.engine_kib_per_conn),
                two(x.held_engine_us),
                two(x.held_engine_slices),
                x.idle_engine_slices.to_string(),
            ]);
        }
        o.push_str(&t.render());
        let _ = writeln!(
            o,
            "(fair: Jain's index of the requests each connection got under load, 1 = all alike;\n \
             retrans: segments the client host retransmitted under load; drops: frames the\n \
             kernel dropped on their way to the engine (its TAP queue full);\n \
             eng µs/req: the engine thread's CPU per request, idle spinning included;\n \
             held eng µs, held slices: the engine thread's CPU and time slices (its wake-ups)\n \
             per round trip of the held flow; idle wakes: the engine thread's time slices in a\n \
             second with nothing on the wire before the held flow, 50 of them its 20 ms sleep cap)"
        );
    }
}

/// The engine's cost per request.
fn engine_cost(o: &mut String, r: &Report) {
    if let Some(c) = &r.engine_cost {
        let _ = writeln!(
            o,
            "\nengine cost per 64-byte request (spin off, {} conns, {} requests): user {:.0} ns \
             ({:.0} cycles), system {:.0} ns (the TAP's reads and writes, which run the bridge\n\
             and the Linux client's receive path, doorbells, sleeping)",
            c.conns, c.requests, c.user_ns, c.user_cycles, c.sys_ns
        );
    }
}

/// The other scenarios' own renderers, then the plots written.
fn others(o: &mut String, r: &Report) {
    if !r.loss.is_empty() {
        o.push_str(&crate::bench::loss::render(
            &r.loss,
            r.loss_command
                .as_deref()
                .unwrap_or("softoe bench --only loss"),
        ));
    }
    if let Some(b) = &r.bond {
        o.push_str(&crate::bench::bond::render(b));
    }
    if !r.spin.is_empty() {
        o.push_str(&super::spin::render(&r.spin));
    }
    if !r.apps.is_empty() {
        o.push_str(&super::apps::render(
            &r.apps,
            r.apps_command
                .as_deref()
                .unwrap_or("softoe bench --only apps"),
        ));
    }
    if !r.reclaim.is_empty() {
        o.push_str(&super::reclaim::render(&r.reclaim));
    }
    for p in &r.plots {
        let _ = writeln!(o, "plot: {}", p.display());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::bench::fixtures::{bulk, latency};
    use crate::bench::goals::targets;

    #[test]
    fn targets_compare_softoe_with_linux() {
        let row = |system: &str, direction: &'static str, gbps: f64, app: f64, eng: f64| {
            bulk(system, direction, &[(gbps, app, eng); 3])
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

    #[test]
    fn receiving_and_round_trips_are_held_to_issue_19s_goals() {
        let row = |system: &str, gbps: f64| bulk(system, "Linux→host", &[(gbps, 0.1, 0.1); 3]);
        let rr =
            |system: &str, p50_us: f64, p99_us: f64| latency(system, 4, &[(p50_us, p99_us); 3]);
        let r = Report {
            bulk: vec![row("softoe copy", 11.0), row("Linux", 10.0)],
            latency: vec![rr("softoe overlap", 15.0, 40.0), rr("Linux", 20.0, 50.0)],
            ..Report::default()
        };
        let t = targets(&r);
        let get = |w: &str| t.iter().find(|x| x.what == w).unwrap();
        // 1.1× Linux receiving misses 1.2.
        let g = get("goodput, 1 connection, Linux→host (copy)");
        assert!((g.ratio - 1.1).abs() < 1e-9 && !g.met && g.goal == "≥ 1.2");
        // 0.75 meets p50's 0.8; 0.8 meets p99's 1.0.
        let p50 = get("4-byte request/response p50");
        assert!((p50.ratio - 0.75).abs() < 1e-9 && p50.met);
        let p99 = get("4-byte request/response p99");
        assert!((p99.ratio - 0.8).abs() < 1e-9 && p99.met);
    }
}
