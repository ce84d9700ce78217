//! E2: a 1 kHz real-time stream of 64-byte messages beside bulk traffic,
//! timed at the application and on the wire.

use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use indicatif::ProgressBar;
use serde::Serialize;
use softoe_bond::Policy;
use softoe_engine::testing::{BondHost, BondHostSpec};

use super::link::{Pair, bonded_opts, mbit};
use super::{E2Row, Options, RT_MAGIC, RT_MSG, T};
use crate::bench::cpu::thread_sched;

// ---- E2 --------------------------------------------------------------------------------

/// The same moment on the monotonic clock (the messages' stamps) and the
/// wall clock (the wire tap's capture times), read as close together as
/// the machine allows: the pair with the smallest gap between a monotonic
/// read before and one after the wall read, out of 64 tries, the monotonic
/// moment taken halfway. A thread preempted between two plain reads (130 µs
/// once in CI) shifts every wire time by that much: messages then seemed to
/// reach the wire before they were sent and to spend the difference
/// between wire and program.
pub(super) fn clock_pair() -> (Instant, std::time::SystemTime) {
    best_pair(64, || {
        let a = Instant::now();
        let w = std::time::SystemTime::now();
        (a, w, Instant::now())
    })
}

/// Of `tries` reads (monotonic, wall, monotonic), the one whose monotonic
/// reads are closest: (their midpoint, its wall time).
fn best_pair<W: Copy>(
    tries: usize,
    mut read: impl FnMut() -> (Instant, W, Instant),
) -> (Instant, W) {
    let (a, mut wall, b) = read();
    let (mut gap, mut mid) = (
        b.saturating_duration_since(a),
        a + b.saturating_duration_since(a) / 2,
    );
    for _ in 1..tries {
        let (a, w, b) = read();
        let g = b.saturating_duration_since(a);
        if g < gap {
            (gap, mid, wall) = (g, a + g / 2, w);
        }
    }
    (mid, wall)
}

/// Nanoseconds since `epoch`.
pub(super) fn ns_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// E2's scenarios: (name, stream protocol, bulk, stream priority,
/// real-time members per host).
pub(super) const E2_SCENARIOS: [(&str, &str, bool, u8, usize); 8] = [
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
pub(super) struct RtSample {
    pub(super) seq: u64,
    pub(super) sent: u64,
    pub(super) read: u64,
}

/// Where each message was seen on the switch's devices: the first time a
/// sender's TAP took it in (the engine wrote it: "on the wire") and the
/// first time the kernel handed it to a receiver's TAP (after both links'
/// shaping and the bridge), ns since the epoch, by sequence number.
#[derive(Debug, Default)]
pub(super) struct WireTimes {
    pub(super) out: std::collections::HashMap<u64, u64>,
    pub(super) into: std::collections::HashMap<u64, u64>,
}

impl WireTimes {
    pub(super) fn from(
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
pub(super) fn rt_tcp(
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
    c.set_priority(u32::from(prio))?;
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
pub(super) fn rt_udp(
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
    tx.set_priority(u32::from(prio))?;
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
pub(super) fn spawn_stream(
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
pub(super) fn join_stream(sender: JoinHandle<std::io::Result<()>>) -> Result<()> {
    sender
        .join()
        .map_err(|_| anyhow!("the stream sender panicked"))?
        .context("the stream sender")
}

/// Puts thread `tid` (0: the caller) in `SCHED_FIFO` at priority 10: it
/// runs as soon as it is runnable, ahead of every ordinary thread (the
/// kernel's own ksoftirqd included, which is why only E2 asks for it).
pub(super) fn realtime_class(tid: i32) -> std::io::Result<()> {
    softoe_sys::sched::fifo(tid, 10)
}

/// Back to the ordinary class (so a thread id reused later is not left
/// real-time).
pub(super) fn ordinary_class(tid: i32) {
    let _ = softoe_sys::sched::ordinary(tid);
}

/// Sleeps until message `i` of a 1 kHz stream started at `t0` is due.
pub(super) fn pace_to(t0: Instant, i: u64) {
    let due = t0 + Duration::from_millis(i);
    let now = Instant::now();
    if due > now {
        std::thread::sleep(due - now);
    }
}

/// Message `i`: the mark, its number, the time it is sent.
pub(super) fn rt_message(i: u64, epoch: Instant) -> [u8; RT_MSG] {
    let mut msg = [0u8; RT_MSG];
    msg[..4].copy_from_slice(&RT_MAGIC.to_le_bytes());
    msg[4..12].copy_from_slice(&i.to_le_bytes());
    msg[12..20].copy_from_slice(&ns_since(epoch).to_le_bytes());
    msg
}

/// (number, send time) of a message, if it is one.
pub(super) fn rt_parse(m: &[u8]) -> Option<(u64, u64)> {
    let word = |r: std::ops::Range<usize>| -> Option<u64> {
        Some(u64::from_le_bytes(m.get(r)?.try_into().ok()?))
    };
    (m.len() == RT_MSG && m[..4] == RT_MAGIC.to_le_bytes()).then_some(())?;
    Some((word(4..12)?, word(12..20)?))
}

pub(super) fn e2(o: &Options, pb: &ProgressBar) -> Result<Vec<E2Row>> {
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
        let (epoch, wall0) = clock_pair();
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
    pub(super) cpu: f64,
    /// Time it waited on a run queue (runnable, another thread on the
    /// core) per time slice it got, µs: the delay the two shared cores add
    /// to each wake-up.
    pub(super) wait_per_slice_us: f64,
}

/// Schedstat of both engines, to subtract.
pub(super) fn sched_of(hosts: [&BondHost; 2]) -> [(Duration, Duration, u64); 2] {
    hosts.map(|h| thread_sched(h.engine_tid).unwrap_or_default())
}

pub(super) fn load_since(
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
pub(super) struct E2Spec {
    pub(super) scenario: &'static str,
    pub(super) proto: &'static str,
    pub(super) bulk: bool,
    pub(super) rt_priority: u8,
    pub(super) realtime_members: usize,
    pub(super) sent: usize,
    pub(super) bulk_mbit: f64,
    pub(super) engines: [EngineLoad; 2],
}

/// min, mean, std, p50, p99, p99.9 (from 100,000 values), max of `v`, µs;
/// sorts `v`.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct Dist {
    pub(super) n: usize,
    pub(super) min_us: f64,
    pub(super) mean_us: f64,
    pub(super) std_us: f64,
    pub(super) p50_us: f64,
    pub(super) p99_us: f64,
    pub(super) p999_us: Option<f64>,
    pub(super) max_us: f64,
}

impl Dist {
    pub(super) fn of(v: &mut [f64]) -> Dist {
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

pub(super) fn stats_row(spec: E2Spec, got: &[RtSample], wire: &WireTimes) -> E2Row {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::bench::bond::link::shares;
    use crate::bench::loss::median;

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
    }

    #[test]
    fn the_clock_pair_is_the_read_with_the_smallest_gap() {
        let t = Instant::now();
        let us = |n: u64| t + Duration::from_micros(n);
        // The first read was preempted for 130 µs between its reads, the
        // third only 2 µs apart: its wall time goes with its midpoint.
        let reads = [
            (0, 'a', 130),
            (200, 'b', 210),
            (300, 'c', 302),
            (400, 'd', 420),
        ];
        let mut it = reads.iter();
        let (mid, wall) = best_pair(reads.len(), || {
            let &(a, w, b) = it.next().unwrap();
            (us(a), w, us(b))
        });
        assert_eq!((mid, wall), (us(301), 'c'));
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
