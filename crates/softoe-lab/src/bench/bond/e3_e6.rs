//! E3–E6: one member's overhead, failover, a plain-ARP peer, and ARP+
//! under loss.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use indicatif::ProgressBar;
use softoe_bond::Policy;
use softoe_engine::testing::{BondHost, BondHostSpec};
use softoe_testbed::{BondedBed, BondedOptions};

use super::link::{Pair, bonded_opts, fill, mbit, start_tcp, wait_until, wrong};
use super::{E3Row, E4Row, E5Row, E6Row, ETHERTYPE_ARPP, Options, POLICIES, T};
use crate::bench::cpu::thread_cpu;
use crate::bench::loss::median;

// ---- E3 --------------------------------------------------------------------------------

pub(super) fn e3(o: &Options, pb: &ProgressBar) -> Result<Vec<E3Row>> {
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
pub(super) fn e3_ratio(rows: &[E3Row], link: &str, f: fn(&E3Row) -> f64) -> f64 {
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

pub(super) fn e4(o: &Options, pb: &ProgressBar) -> Result<Vec<E4Row>> {
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

pub(super) fn e5(o: &Options, pb: &ProgressBar) -> Result<E5Row> {
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

pub(super) fn e6(o: &Options, pb: &ProgressBar) -> Result<Vec<E6Row>> {
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
