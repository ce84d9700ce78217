//! Heavy loss: 1,000 seeds of one small transfer over a link that loses
//! 5 % of the frames each way, duplicates 2 % and holds back 2 % by a
//! quarter of the round trip.
//!
//! For every seed: every byte arrives once and in order (the server checks
//! each against the sender's pattern), both ends read end of stream without
//! an error, nothing is left behind after TIME-WAIT (a clean close), and
//! the world never stalls.
//!
//! # When a retransmission timeout is justified
//!
//! The RTO is the last resort: with RACK-TLP (RFC 8985) a sender learns of
//! a loss from any segment sent after it that the receiver reports (RACK),
//! and of a lost tail from the answer to a probe (TLP). Only when a whole
//! flight, and its probe, vanish — every segment sent after the last one
//! the receiver has reported, or every acknowledgement of them — does the
//! sender have nothing to go on. So each RTO is checked on the wire (a tap
//! sees every frame, when it arrives or that it was lost):
//!
//! - **handshake**: before the connection is synchronized (a lost ARP
//!   request or reply, SYN or SYN-ACK; there is no probe for these). About
//!   two round trips at risk, 1 − 0.95² ≈ 9.75 % each: ≈ 0.2 per seed.
//! - **silent**: at the RTO, every byte still outstanding (not
//!   acknowledged, not SACKed, by what had reached the sender) was last sent
//!   no earlier than the newest segment the receiver had reported back. The
//!   sender could not have known: the whole flight and its probe were lost.
//! - **missed**: some outstanding byte was last sent *before* a segment the
//!   receiver had already reported. RACK marks such a byte lost (the
//!   reordering window is at most a round trip, far below the 200 ms RTO),
//!   so the RTO was not needed.
//!
//! Silent RTOs are bounded by the model: a flight of one segment gets no
//! answer with probability about 1 − (1 − p)² (the segment or its ACK is
//! lost), ≈ 0.0975 at 5 %, and so does its probe, so a one-segment tail ends
//! in an RTO with probability ≈ 0.0095; longer flights far less often (the
//! receiver acknowledges every second segment, and at once when out of
//! order). Small tails come at the end of the transfer and after each
//! recovery episode whose retransmission is the last thing sent; with
//! 128 KiB (91 segments) at 5 % loss that is about 1 + 91 × 0.05 ≈ 5.6
//! tails per seed, ≈ 0.053 silent RTOs per seed. The bound allows twice
//! that (105 over 1,000 seeds); the expected count's standard deviation is
//! about 7. Missed RTOs must not happen at all.
//!
//! Before per-segment RACK (2026-11-25), 1,000 seeds took 3.5 s (release):
//! 0.26 client RTOs per seed (773 seeds none, 195 one, 32 two), of which
//! 174 in the handshake, 42 silent and 43 missed — almost all the last
//! data+FIN segment, lost while a retransmission sent after it was
//! acknowledged. So the RTO check is ignored until the stack's RACK works
//! per segment.
//!
//! `SOFTOE_SEEDS=N` sets the number of seeds (default 1000); `SOFTOE_SEED=S`
//! runs one seed (to reproduce a failure).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::OnceLock;
use std::time::Duration;

use softoe_sim::scenario::Transfer;
use softoe_sim::{StackNode, TapEvent};
use softoe_stack::Instant;
use softoe_wire::{
    ChecksumCaps, EthernetFrame, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr,
};

/// Bytes per seed: 91 full segments, small enough for 1,000 seeds in a few
/// seconds, large enough for several loss episodes each.
const BYTES: u64 = 128 << 10;
/// Loss per frame, each way.
const LOSS: f64 = 0.05;
/// Round trip (propagation).
const RTT: Duration = Duration::from_micros(200);
/// Silent RTOs per seed the model expects (see the module documentation).
const SILENT_PER_SEED: f64 = 0.053;

/// One transmission of the client's data (or FIN), as the tap saw it.
#[derive(Clone, Copy, Debug)]
struct Tx {
    at: Instant,
    /// Sequence range relative to the first data byte (FIN counts one).
    start: u32,
    end: u32,
    /// Whether it carries the FIN (which SACK cannot report).
    fin: bool,
    /// First arrival at the server (`None`: lost).
    arrived: Option<Instant>,
}

/// One acknowledgement that reached the client.
#[derive(Clone, Debug)]
struct Ack {
    sent: Instant,
    arrived: Instant,
    cum: u32,
    sacks: Vec<(u32, u32)>,
}

/// An RTO that was not needed: at `at`, byte `seq` was outstanding, last
/// sent at `last_sent`, before a segment sent at `reported` that the
/// receiver had reported back.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Missed {
    at: Instant,
    seq: u32,
    last_sent: Instant,
    reported: Instant,
}

#[derive(Default, Debug)]
struct Wire {
    /// The client's first data sequence number (its ISN + 1).
    base: Option<u32>,
    tx: Vec<Tx>,
    acks: Vec<Ack>,
}

fn parse_tcp(frame: &[u8], f: impl FnOnce(&TcpRepr<'_>)) {
    let Ok(e) = EthernetFrame::new_checked(frame) else {
        return;
    };
    let Ok(p) = Ipv4Packet::new_checked(e.payload()) else {
        return;
    };
    let Ok(ip) = Ipv4Repr::parse(&p, &ChecksumCaps::ignored()) else {
        return;
    };
    let Ok(t) = TcpPacket::new_checked(p.payload()) else {
        return;
    };
    if let Ok(r) = TcpRepr::parse(&t, &ip.src_addr, &ip.dst_addr, &ChecksumCaps::ignored()) {
        f(&r);
    }
}

impl Wire {
    fn record(&mut self, e: &TapEvent<'_>) {
        parse_tcp(e.frame, |r| {
            if e.dir == 0 {
                // Client to server.
                if r.control == TcpControl::Syn {
                    self.base = Some(r.seq_number.0.wrapping_add(1));
                    return;
                }
                let Some(base) = self.base else { return };
                let fin = r.control == TcpControl::Fin;
                let len = r.payload.len() as u32 + u32::from(fin);
                if len == 0 {
                    return;
                }
                let start = r.seq_number.0.wrapping_sub(base);
                self.tx.push(Tx {
                    at: e.at,
                    start,
                    end: start + len,
                    fin,
                    arrived: e.arrivals.iter().copied().min(),
                });
            } else if let (Some(base), Some(ack)) = (self.base, r.ack_number) {
                let rel = |s: u32| s.wrapping_sub(base);
                let cum = rel(ack.0);
                if cum > u32::MAX / 2 {
                    return; // the SYN-ACK's (acknowledges the SYN)
                }
                let sacks: Vec<(u32, u32)> = r
                    .sack_ranges
                    .iter()
                    .flatten()
                    .map(|&(l, h)| (rel(l), rel(h)))
                    .collect();
                for &arrived in e.arrivals {
                    self.acks.push(Ack {
                        sent: e.at,
                        arrived,
                        cum,
                        sacks: sacks.clone(),
                    });
                }
            }
        });
    }

    /// Whether the client, at `now`, still had outstanding bytes last sent
    /// before the newest segment the server had reported back (RACK could
    /// have marked them lost).
    fn missed(&self, now: Instant) -> Option<Missed> {
        let seen: Vec<&Ack> = self.acks.iter().filter(|a| a.arrived <= now).collect();
        // A SACK block reports a transmission's data (never its FIN).
        let covers = |a: &Ack, t: &Tx| {
            let data_end = t.end - u32::from(t.fin);
            a.cum >= t.end
                || (data_end > t.start
                    && a.sacks.iter().any(|&(l, h)| l <= t.start && data_end <= h))
        };
        // The send time of the newest transmission an acknowledgement that
        // reached the client reported (it arrived before that ACK left).
        let newest = seen
            .iter()
            .flat_map(|a| {
                self.tx
                    .iter()
                    .filter(move |t| t.arrived.is_some_and(|x| x <= a.sent) && covers(a, t))
                    .map(|t| t.at)
            })
            .max()?;
        let cum = seen.iter().map(|a| a.cum).max().unwrap_or(0);
        let sent: Vec<&Tx> = self.tx.iter().filter(|t| t.at < now).collect();
        let snd_max = sent.iter().map(|t| t.end).max().unwrap_or(0);
        let mut edges: Vec<u32> = sent.iter().flat_map(|t| [t.start, t.end]).collect();
        edges.extend(
            seen.iter()
                .flat_map(|a| a.sacks.iter().flat_map(|&(l, h)| [l, h])),
        );
        edges.push(cum);
        edges.retain(|&x| x >= cum && x <= snd_max);
        edges.sort_unstable();
        edges.dedup();
        for w in edges.windows(2) {
            let (s, e) = (w[0], w[1]);
            let sacked = seen
                .iter()
                .any(|a| a.sacks.iter().any(|&(l, h)| l <= s && e <= h));
            if sacked {
                continue;
            }
            let last = sent
                .iter()
                .filter(|t| t.start <= s && e <= t.end)
                .map(|t| t.at)
                .max();
            if let Some(last) = last
                && last < newest
            {
                return Some(Missed {
                    at: now,
                    seq: s,
                    last_sent: last,
                    reported: newest,
                });
            }
        }
        None
    }
}

/// What one seed did.
#[derive(Clone, Debug, Default)]
struct SeedResult {
    seed: u64,
    /// The client's RTOs (its `TcpInfo::rto_count`).
    rtos: u32,
    handshake: u32,
    silent: u32,
    /// Unneeded RTOs.
    missed: Vec<Missed>,
    tlp_probes: u32,
    retransmits: u64,
    server_rtos: u32,
}

fn transfer(seed: u64) -> Transfer {
    Transfer {
        bytes: BYTES,
        rate_bps: 1_000_000_000,
        delay: RTT / 2,
        loss: LOSS,
        buffer: 256 << 10,
        seed,
        ..Transfer::default()
    }
}

fn run_seed(seed: u64) -> Result<SeedResult, String> {
    let mut world = transfer(seed).world();
    world.link = world.link.with_duplicate(0.02).with_reorder(0.02, RTT / 4);
    let ctx = || format!("seed {seed} (rerun with SOFTOE_SEED={seed})");
    let mut built = world
        .build()
        .map_err(|e| format!("{}: build: {e}", ctx()))?;
    let wire = Rc::new(RefCell::new(Wire::default()));
    let tap = Rc::clone(&wire);
    built.world.set_tap(Some(Box::new(move |e: &TapEvent<'_>| {
        tap.borrow_mut().record(e);
    })));
    let client = built.client;
    // Every RTO of the client: when, and whether before the handshake.
    let mut rtos: Vec<(Instant, bool)> = Vec::new();
    let mut seen = 0;
    let out = built.run_observed(Duration::from_secs(3600), Duration::from_secs(600), |w| {
        let Some(n) = w.node::<StackNode>(client) else {
            return;
        };
        if let Some(i) = n.stack.sockets().find_map(|h| n.stack.tcp_info(h).ok())
            && i.rto_count > seen
        {
            seen = i.rto_count;
            rtos.push((w.now(), !i.state.is_synchronized()));
        }
    });
    if out.stalled {
        return Err(format!("{}: the world stalled", ctx()));
    }
    if !out.finished {
        return Err(format!("{}: not finished: {:#?}", ctx(), out.conns));
    }
    let [c] = out.conns[..] else {
        return Err(format!("{}: {} connections", ctx(), out.conns.len()));
    };
    let Some(s) = c.server else {
        return Err(format!("{}: never accepted: {c:#?}", ctx()));
    };
    if s.corrupt || c.client.corrupt {
        return Err(format!("{}: a byte out of place: {c:#?}", ctx()));
    }
    if s.received != BYTES || !s.eof || !c.client.eof {
        return Err(format!("{}: incomplete: {c:#?}", ctx()));
    }
    if c.client.error.is_some() || s.error.is_some() {
        return Err(format!("{}: failed: {c:#?}", ctx()));
    }
    if out.sockets_left != (0, 0) {
        return Err(format!(
            "{}: sockets left behind: {:?}",
            ctx(),
            out.sockets_left
        ));
    }
    let info = c
        .client
        .info
        .ok_or_else(|| format!("{}: no TcpInfo", ctx()))?;
    let mut r = SeedResult {
        seed,
        rtos: info.rto_count,
        tlp_probes: info.tlp_probes,
        retransmits: info.retransmits,
        server_rtos: s.info.map_or(0, |i| i.rto_count),
        ..SeedResult::default()
    };
    let wire = wire.borrow();
    for (at, handshake) in rtos {
        if handshake {
            r.handshake += 1;
        } else if let Some(m) = wire.missed(at) {
            r.missed.push(m);
        } else {
            r.silent += 1;
        }
    }
    Ok(r)
}

/// Every seed's result, computed once for both tests.
fn results() -> &'static (Vec<Result<SeedResult, String>>, Duration) {
    static RESULTS: OnceLock<(Vec<Result<SeedResult, String>>, Duration)> = OnceLock::new();
    RESULTS.get_or_init(|| {
        let seeds: Vec<u64> = match std::env::var("SOFTOE_SEED") {
            Ok(s) => vec![s.parse().expect("SOFTOE_SEED is a number")],
            Err(_) => {
                let n = std::env::var("SOFTOE_SEEDS")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(1000u64);
                (0..n).collect()
            }
        };
        let wall = std::time::Instant::now();
        let r = seeds.into_iter().map(run_seed).collect();
        (r, wall.elapsed())
    })
}

fn secs(t: Instant) -> f64 {
    t.total_nanos() as f64 / 1e9
}

#[test]
fn every_byte_arrives_once_in_order_and_the_connection_closes() {
    let (results, wall) = results();
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    for e in failures.iter().take(3) {
        eprintln!("{e}\n");
    }
    let ok: Vec<&SeedResult> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let n = ok.len().max(1) as f64;
    let mut hist = BTreeMap::new();
    for r in &ok {
        *hist.entry(r.rtos).or_insert(0u32) += 1;
    }
    let sum = |f: fn(&SeedResult) -> u64| ok.iter().map(|r| f(r)).sum::<u64>();
    eprintln!(
        "{} seeds in {wall:.2?}: {} failed; client RTOs per seed: mean {:.3}, max {}, histogram {hist:?}; \
         handshake {}, silent {}, missed {}; TLP probes {}, retransmissions {}, server RTOs {}",
        results.len(),
        failures.len(),
        sum(|r| u64::from(r.rtos)) as f64 / n,
        ok.iter().map(|r| r.rtos).max().unwrap_or(0),
        sum(|r| u64::from(r.handshake)),
        sum(|r| u64::from(r.silent)),
        sum(|r| r.missed.len() as u64),
        sum(|r| u64::from(r.tlp_probes)),
        sum(|r| r.retransmits),
        sum(|r| u64::from(r.server_rtos)),
    );
    assert!(failures.is_empty(), "{} seeds failed", failures.len());
}

#[test]
#[ignore = "today's stack: 43 of the 85 data-phase RTOs over 1,000 seeds were not needed \
            (RACK does not yet mark a segment lost when one sent after it is reported, \
            most often the last data+FIN segment); un-ignore with per-segment RACK"]
fn retransmission_timeouts_fire_only_when_a_flight_and_its_probe_vanish() {
    let (results, _) = results();
    let ok: Vec<&SeedResult> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert!(!ok.is_empty(), "no seed completed");
    let seeds = ok.len() as f64;
    let missed: Vec<(u64, &Missed)> = ok
        .iter()
        .flat_map(|r| r.missed.iter().map(move |m| (r.seed, m)))
        .collect();
    for (seed, m) in missed.iter().take(10) {
        eprintln!(
            "seed {seed}: RTO at {:.6} s: byte {} outstanding, last sent at {:.6} s, \
             before a segment sent at {:.6} s that the receiver had reported",
            secs(m.at),
            m.seq,
            secs(m.last_sent),
            secs(m.reported)
        );
    }
    let silent: u32 = ok.iter().map(|r| r.silent).sum();
    let handshake: u32 = ok.iter().map(|r| r.handshake).sum();
    let silent_bound = 2.0 * SILENT_PER_SEED * seeds;
    eprintln!(
        "{seeds} seeds: {} missed RTOs, {silent} silent (bound {silent_bound:.0}), {handshake} in the handshake",
        missed.len()
    );
    assert!(
        missed.is_empty(),
        "{} RTOs fired though RACK could have seen the loss",
        missed.len()
    );
    assert!(
        f64::from(silent) <= silent_bound,
        "{silent} silent RTOs over {seeds} seeds; the model expects about {:.0}",
        SILENT_PER_SEED * seeds
    );
    // Two round trips at risk, each failing with 1 − 0.95² ≈ 9.75 %.
    let handshake_bound = 2.0 * 0.2 * seeds;
    assert!(
        f64::from(handshake) <= handshake_bound,
        "{handshake} handshake RTOs over {seeds} seeds; the model expects about {:.0}",
        0.2 * seeds
    );
}

/// The wire check itself: a hole sent before a reported segment is a missed
/// loss; a flight sent after everything reported is silent.
#[test]
fn the_wire_check_tells_missed_from_silent() {
    let t = |ms: u64| Instant::from_millis(ms);
    let tx = |at: u64, start: u32, end: u32, arrived: Option<u64>| Tx {
        at: t(at),
        start,
        end,
        fin: false,
        arrived: arrived.map(t),
    };
    let mut w = Wire {
        base: Some(0),
        // 0–100 arrives; 100–200 is lost; 200–300 arrives.
        tx: vec![
            tx(1, 0, 100, Some(2)),
            tx(1, 100, 200, None),
            tx(3, 200, 300, Some(4)),
        ],
        acks: vec![
            Ack {
                sent: t(2),
                arrived: t(3),
                cum: 100,
                sacks: vec![],
            },
            Ack {
                sent: t(4),
                arrived: t(5),
                cum: 100,
                sacks: vec![(200, 300)],
            },
        ],
    };
    // At 4 ms only the first ACK is in: 100–200 and 200–300 are a silent flight.
    assert_eq!(w.missed(t(4)), None);
    // At 6 ms 200–300, sent after 100–200, has been reported.
    let missed = |at, seq, last_sent, reported| {
        Some(Missed {
            at: t(at),
            seq,
            last_sent: t(last_sent),
            reported: t(reported),
        })
    };
    assert_eq!(w.missed(t(6)), missed(6, 100, 1, 3));
    // Retransmitted after the report and lost again: silent once more.
    w.tx.push(tx(7, 100, 200, None));
    assert_eq!(w.missed(t(8)), None);
    // SACK reports a segment's data, never its FIN: a data+FIN segment
    // whose data is SACKed was reported; a bare FIN beyond a hole is not.
    let mut f = Wire {
        base: Some(0),
        tx: vec![
            tx(1, 0, 100, None),
            Tx {
                fin: true,
                ..tx(2, 100, 201, Some(3))
            },
        ],
        acks: vec![Ack {
            sent: t(3),
            arrived: t(4),
            cum: 0,
            sacks: vec![(100, 200)],
        }],
    };
    assert_eq!(f.missed(t(5)), missed(5, 0, 1, 2));
    f.tx[1].start = 200;
    f.tx[1].end = 201;
    f.acks[0].sacks.clear();
    assert_eq!(f.missed(t(5)), None);
}
