//! RACK-TLP (RFC 8985) rule by rule, one segment at a time: lost
//! retransmissions, probes timed from the RTT, the reordering window and
//! its D-SACK adaptation, undoing a spurious recovery; and the receiver's
//! side of it (D-SACK, quick ACKs), and RFC 6298 §5.7.

use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{TcpControl, TcpRepr, TcpSeqNumber};

use super::harness::*;
use crate::PayloadRef;

const MSS: usize = 1460;

fn seg(our: TcpSeqNumber, k: usize) -> TcpSeqNumber {
    add(our, k * MSS)
}

/// The peer's ACK of `ack` with SACK blocks of segments `[a, b)`.
fn sack(our: TcpSeqNumber, ack: usize, blocks: &[(usize, usize)]) -> TcpRepr<'static> {
    let mut ranges = [None; 4];
    for (slot, &(a, b)) in ranges.iter_mut().zip(blocks) {
        *slot = Some((seg(our, a).0, seg(our, b).0));
    }
    TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(seg(our, ack)),
        sack_ranges: ranges,
        ..SEND_TEMPL
    }
}

/// The peer's `k`-th full data segment (acknowledging `our`).
fn peer_data(our: TcpSeqNumber, k: usize, data: &[u8]) -> TcpRepr<'_> {
    TcpRepr {
        seq_number: at(k),
        ack_number: Some(our),
        payload: data,
        ..SEND_TEMPL
    }
}

/// Where the peer's `k`-th full segment starts.
fn at(k: usize) -> TcpSeqNumber {
    add(REMOTE_SEQ, 1 + k * MSS)
}

fn starts(out: &[Sent], our: TcpSeqNumber) -> Vec<usize> {
    out.iter()
        .map(|s| (s.seq().0.wrapping_sub(our.0) as usize) / MSS)
        .collect()
}

fn open_sack_rtt(h: &mut Harness, rtt: Duration) -> (crate::SocketHandle, TcpSeqNumber) {
    let (c, s, _) = open_passive_rtt(
        h,
        TcpRepr {
            max_seg_size: Some(1460),
            sack_permitted: true,
            ..SEND_TEMPL
        },
        rtt,
    );
    (c, s)
}

/// A retransmission that is lost again is found by the next ACK that
/// delivers something sent after it, a round trip later — not by a timeout.
#[test]
fn a_lost_retransmission_is_found_within_a_round_trip() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (40 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    // Segment 0 is lost, 1..10 arrive: RACK marks 0 lost at once (nine
    // segments SACKed and no reordering seen: no reordering window).
    h.now += Duration::from_millis(1);
    h.send(sack(our, 0, &[(1, 10)]));
    let out = h.take();
    assert_eq!(starts(&out, our).first(), Some(&0), "fast retransmit");
    let new: Vec<_> = starts(&out, our).into_iter().filter(|&k| k >= 10).collect();
    assert!(!new.is_empty(), "new data goes beside it");
    let newest = new.iter().max().copied().unwrap_or(10);
    // A round trip later the new data is SACKed but the retransmission is
    // not: it was lost too, and goes again on this very ACK.
    h.now += Duration::from_millis(1);
    h.send(sack(our, 0, &[(1, newest + 1)]));
    let out = h.take();
    assert_eq!(starts(&out, our).first(), Some(&0), "resent again: {out:?}");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.lost_retransmits, info.rto_count), (1, 0));
}

/// On a 10 µs path the probe goes 30 µs after the last transmission (SRTT
/// plus four RTTVAR after one sample), not after a fixed floor; its SACK
/// shows the earlier segments lost, and recovery repairs them at once.
#[test]
fn the_probe_is_timed_from_the_rtt_and_its_ack_starts_recovery() {
    let mut h = Harness::new();
    let (conn, our) = open_sack_rtt(&mut h, Duration::from_micros(10));
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (3 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 3);
    assert!(h.advance(Duration::from_micros(29)).is_empty());
    let probe = h.advance(Duration::from_micros(1));
    assert_eq!(starts(&probe, our), [2], "the last segment, again");
    h.now += Duration::from_micros(10);
    h.send(sack(our, 0, &[(2, 3)]));
    assert_eq!(starts(&h.take(), our), [0, 1]);
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (info.tlp_probes, info.tlp_recoveries, info.rto_count),
        (1, 1, 0)
    );
}

/// A hole with less than three segments SACKed above it waits for the
/// reordering window (a quarter of the minimum RTT); if the missing segment
/// arrives within it, nothing is resent and the reordering is counted.
#[test]
fn reordering_within_the_window_is_not_loss() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (4 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 4);
    h.now += Duration::from_millis(1);
    h.send(sack(our, 0, &[(1, 2)]));
    assert!(h.take().is_empty(), "segment 0 may only be late");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.reo_wnd, Duration::from_micros(250));
    // 0.2 ms later (inside RACK.rtt + reo_wnd = 1.25 ms from its sending)
    // it arrives.
    assert!(h.advance(Duration::from_micros(200)).is_empty());
    h.send(sack(our, 4, &[]));
    assert!(h.advance(Duration::from_millis(300)).is_empty());
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.retransmits, info.fast_retransmits), (0, 0));
    assert_eq!(info.reord_seen, 1);
    assert!(info.reordering >= 3);
}

/// One ACK that both advances (segments 0..4 arrived) and SACKs above a
/// hole (5..10; 4 lost): a receiver that acknowledges a batch at once
/// sends exactly this. Nothing arrived out of order, so no reordering is
/// seen: RACK compares what this ACK delivers with the highest delivered
/// *before* it (Linux's `prior_fack`), not with the SACK it carries. (It
/// did, and a lossy path's reordering estimate grew to hundreds of
/// segments with no reordering at all, widening the window that waits
/// before calling a hole lost.)
#[test]
fn an_ack_that_advances_and_sacks_above_a_hole_is_not_reordering() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    h.now += Duration::from_millis(1);
    h.send(sack(our, 4, &[(5, 10)]));
    let out = h.take();
    assert_eq!(
        starts(&out, our).first(),
        Some(&4),
        "the hole is resent at once"
    );
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.reord_seen, info.reordering), (0, 3), "{info:?}");
}

/// The same hole, had it been lost: the reordering timer marks it when the
/// window has passed, without waiting for more SACKs or a timeout.
#[test]
fn a_hole_is_lost_when_the_window_passes() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (4 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 4);
    h.now += Duration::from_millis(1);
    h.send(sack(our, 0, &[(1, 2)]));
    assert!(h.take().is_empty());
    // Sent at 0; RACK.rtt 1 ms + reo_wnd 0.25 ms: lost at 1.25 ms.
    assert!(h.advance(Duration::from_micros(240)).is_empty());
    let out = h.advance(Duration::from_micros(10));
    assert_eq!(starts(&out, our).first(), Some(&0));
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.reorder_timeouts, info.rto_count), (1, 0));
}

/// A recovery whose only retransmission comes back as a D-SACK was
/// spurious: the window reduction is undone, and the reordering window
/// widens so the same reordering is not taken for loss again.
#[test]
fn a_dsack_undoes_a_spurious_recovery_and_widens_the_window() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    let before = h.stack.tcp_info(conn).unwrap();
    h.now += Duration::from_millis(1);
    h.send(sack(our, 0, &[(1, 10)]));
    assert_eq!(starts(&h.take(), our).first(), Some(&0));
    let reduced = h.stack.tcp_info(conn).unwrap();
    assert!(reduced.cwnd < before.cwnd && reduced.reo_wnd == Duration::ZERO);
    // The original was only late: the receiver got segment 0 twice and
    // says so with a D-SACK below the cumulative ACK.
    h.now += Duration::from_millis(1);
    h.send(sack(our, 10, &[(0, 1)]));
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (info.dsacks, info.spurious_retransmits, info.undos),
        (1, 1, 1)
    );
    assert!(
        info.cwnd >= before.cwnd,
        "{} restored to {}",
        info.cwnd,
        before.cwnd
    );
    assert_eq!(info.ssthresh, before.ssthresh);
    // Reordering is now known: the window is two quarters of min RTT,
    // even with many segments SACKed.
    assert_eq!(info.reo_wnd, Duration::from_micros(500));
}

/// A D-SACK for a probe says an ACK was delayed or lost, not that the
/// network reorders: the reordering window stays as it was (Linux, too,
/// keeps TLP's D-SACKs out of it). Half the probes against a Linux
/// receiver at 10 % loss came back so, and each widened the window.
#[test]
fn a_dsack_for_a_probe_leaves_the_reordering_window_alone() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (3 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 3);
    let before = h.stack.tcp_info(conn).unwrap().reo_wnd;
    assert_eq!(starts(&h.advance(Duration::from_millis(3)), our), [2]);
    h.now += Duration::from_millis(1);
    h.send(sack(our, 3, &[(2, 3)]));
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.dsacks, info.undos), (1, 0));
    assert_eq!(info.reo_wnd, before);
    assert_eq!(before, Duration::from_micros(250));
}

/// A D-SACK for data never retransmitted (the network duplicated it) does
/// not undo a real loss's reduction.
#[test]
fn a_dsack_for_a_segment_never_resent_undoes_nothing() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    h.now += Duration::from_millis(1);
    h.send(sack(our, 0, &[(1, 10)]));
    assert_eq!(starts(&h.take(), our).first(), Some(&0));
    let reduced = h.stack.tcp_info(conn).unwrap().cwnd;
    // Segment 5, sent once, reported twice (inside the second block).
    let mut dup = sack(our, 0, &[(5, 6), (1, 10)]);
    dup.sack_ranges[0] = Some((seg(our, 5).0, seg(our, 6).0));
    h.send(dup);
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (info.dsacks, info.spurious_retransmits, info.undos),
        (1, 0, 0)
    );
    assert!(info.cwnd <= reduced);
}

/// RFC 6298 §5.7: after a retransmitted SYN, no RTT sample exists and the
/// RTO is 3 s once the connection is established (Linux's
/// TCP_TIMEOUT_FALLBACK), not the 1 s initial value.
#[test]
fn after_a_retransmitted_syn_the_rto_is_three_seconds() {
    for resend in [false, true] {
        let mut h = Harness::new();
        let conn = h.stack.tcp_connect(h.now, remote(), None, None).unwrap();
        let syn = h.recv();
        assert_eq!(syn.len(), 1);
        let iss = syn[0].seq();
        let port = syn[0].repr.src_port;
        if resend {
            assert_eq!(h.advance(Duration::from_secs(1)).len(), 1, "SYN again");
        }
        h.now += Duration::from_millis(1);
        h.send(TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: Some(add(iss, 1)),
            max_seg_size: Some(1460),
            dst_port: port,
            ..SEND_TEMPL
        });
        assert_eq!(h.stack.tcp_state(conn).unwrap(), crate::State::Established);
        let info = h.stack.tcp_info(conn).unwrap();
        let want = if resend {
            Duration::from_secs(3)
        } else {
            Duration::from_millis(201)
        };
        assert_eq!(info.rto, want, "SYN resent: {resend}");
    }
}

/// The receiver reports a segment it gets twice with a D-SACK (RFC 2883),
/// whether it is below the cumulative ACK or inside queued out-of-order
/// data, and only once.
#[test]
fn a_duplicate_segment_is_reported_by_dsack() {
    let mut h = Harness::new();
    let (_conn, our) = open_sack(&mut h);
    let data = [7u8; MSS];
    let data_seg = |k: usize| peer_data(our, k, &data);
    h.send(data_seg(0));
    h.send(data_seg(1));
    h.take();
    // Segment 0 again: below rcv_nxt.
    h.send(data_seg(0));
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.sack_ranges[0], Some((at(0).0, at(1).0)));
    assert_eq!(out[0].ack(), Some(at(2)));
    // Segment 3 out of order, then again: D-SACK first, then its block.
    h.send(data_seg(3));
    let first = h.take();
    assert_eq!(
        first[0].repr.sack_ranges[..2],
        [Some((at(3).0, at(4).0)), None]
    );
    h.send(data_seg(3));
    let out = h.take();
    assert_eq!(
        out[0].repr.sack_ranges[..2],
        [Some((at(3).0, at(4).0)), Some((at(3).0, at(4).0))]
    );
    // The next ACK carries no D-SACK.
    h.send(data_seg(5));
    let out = h.take();
    assert_eq!(
        out[0].repr.sack_ranges[..2],
        [Some((at(5).0, at(6).0)), Some((at(3).0, at(4).0))]
    );
}

/// After a hole is filled the receiver acknowledges the next segments at
/// once (quick-ACK), so a sender restarting from a small window is not held
/// by the delayed-ACK timer.
#[test]
fn after_a_repair_the_next_segments_are_acked_at_once() {
    let mut h = Harness::new();
    let (_conn, our) = open_sack(&mut h);
    let data = [7u8; MSS];
    let data_seg = |k: usize| peer_data(our, k, &data);
    // Without loss, a lone segment waits for the delayed ACK.
    h.send(data_seg(0));
    assert!(h.take().is_empty(), "delayed");
    h.advance(Duration::from_millis(40));
    // A hole at 1, repaired; then each lone segment is acknowledged at once.
    h.send(data_seg(2));
    h.send(data_seg(1));
    assert_eq!(h.take().len(), 2);
    for k in 3..6 {
        h.send(data_seg(k));
        let out = h.take();
        assert_eq!(out.len(), 1, "segment {k} acknowledged at once");
        assert_eq!(out[0].ack(), Some(at(k + 1)));
    }
}

/// A per-route `rto_min` (Linux's `ip route … rto_min`) sets the floor for
/// connections to that prefix only; the longest prefix wins.
#[test]
fn a_route_sets_the_rto_floor_for_its_peers() {
    let net =
        |a: [u8; 4], len: u8| softoe_wire::Ipv4Cidr::new(softoe_wire::Ipv4Address(a), len).unwrap();
    let r = REMOTE_IP.0;
    // SRTT 1 ms, RTTVAR 0.5 ms: the RTO is SRTT + max(4 RTTVAR, floor).
    for (routes, want) in [
        (vec![], Duration::from_millis(201)),
        (
            vec![(net([10, 99, 0, 0], 16), Duration::from_millis(1))],
            Duration::from_millis(201),
        ),
        (
            vec![
                (net([r[0], r[1], r[2], 0], 24), Duration::from_millis(50)),
                (net(r, 32), Duration::from_millis(5)),
            ],
            Duration::from_millis(6),
        ),
    ] {
        let mut cfg = config();
        cfg.rto_min_routes = routes;
        let mut h = Harness::with_config(cfg);
        let (conn, _our) = open_sack(&mut h);
        assert_eq!(h.stack.tcp_info(conn).unwrap().rto, want);
    }
}

/// A probe that brings no answer (it, or its ACK, was lost) is followed by
/// another after the same interval, then by others at twice the interval
/// before, up to six, before the RTO.
#[test]
fn an_unanswered_probe_is_followed_by_another_before_the_rto() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (3 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 3);
    let mut at = Vec::new();
    let mut t = Duration::ZERO;
    while t < Duration::from_millis(200) {
        h.now += Duration::from_micros(100);
        t += Duration::from_micros(100);
        if !h.recv().is_empty() {
            at.push(t.as_micros());
        }
    }
    assert_eq!(
        at,
        [3000, 6000, 12000, 24000, 48000, 96000],
        "a PTO of 3 ms (SRTT 1 + 4 × RTTVAR 0.5), again, then doubling"
    );
    let rto = h.advance(Duration::from_millis(1));
    assert_eq!(starts(&rto, our), [0], "then the RTO");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.tlp_probes, info.rto_count), (6, 1));
}

/// An ACK that reaches exactly the probe's end ends the episode: the next
/// flight gets its own probe. (Waiting for one more ACK to tell a repaired
/// loss from a late ACK, as RFC 8985 does, left a connection whose next
/// ACK was lost with nothing but the RTO.)
#[test]
fn an_ack_at_the_probe_end_ends_the_episode() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (3 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 3);
    assert_eq!(starts(&h.advance(Duration::from_millis(3)), our), [2]);
    h.now += Duration::from_millis(1);
    h.send(sack(our, 3, &[]));
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (2 * MSS) as u32))
        .unwrap();
    assert_eq!(starts(&h.recv(), our), [3, 4]);
    // That flight's ACK is lost: a probe, not the RTO.
    let probe = h.advance(Duration::from_millis(10));
    assert_eq!(starts(&probe, our), [4]);
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (info.tlp_probes, info.tlp_recoveries, info.rto_count),
        (2, 1, 0)
    );
}

/// A probe sent while the receiver was only holding its ACK (Linux delays
/// it for a slow reader) is not a loss: an ACK that comes back sooner than a
/// round trip after the probe left before the probe arrived, and a D-SACK
/// for the probe undoes a reduction made in between.
#[test]
fn a_probe_that_crosses_a_delayed_ack_reduces_nothing() {
    for dsack_later in [false, true] {
        let mut h = Harness::new();
        let (conn, our) = open_sack(&mut h);
        h.stack
            .tcp_send(conn, PayloadRef::new(0, 0, (3 * MSS) as u32))
            .unwrap();
        assert_eq!(h.recv().len(), 3);
        let before = h.stack.tcp_info(conn).unwrap().cwnd;
        assert_eq!(starts(&h.advance(Duration::from_millis(3)), our), [2]);
        // The delayed ACK: 0.1 ms after the probe (or, second case, a full
        // round trip later, so it counts as the probe's answer, and the
        // probe's D-SACK follows).
        h.now += if dsack_later {
            Duration::from_millis(1)
        } else {
            Duration::from_micros(100)
        };
        h.send(sack(our, 3, &[]));
        if dsack_later {
            assert!(
                h.stack.tcp_info(conn).unwrap().cwnd < before,
                "taken as a loss"
            );
            h.send(sack(our, 3, &[(2, 3)]));
        }
        let info = h.stack.tcp_info(conn).unwrap();
        assert!(
            info.cwnd >= before,
            "dsack_later {dsack_later}: {} < {before}",
            info.cwnd
        );
        assert_eq!(info.undos, u32::from(dsack_later));
    }
}

/// With more holes than an ACK has SACK slots, the last slot goes round
/// the older blocks, so every block is reported again within a few ACKs
/// even when the ACKs that first reported it were lost.
#[test]
fn every_sack_block_is_reported_again_within_a_few_acks() {
    let mut h = Harness::new();
    let (_conn, our) = open_sack(&mut h);
    let data = [7u8; MSS];
    let data_seg = |k: usize| peer_data(our, k, &data);
    // Six holes: blocks at 1, 3, 5, 7, 9, 11.
    for k in [1, 3, 5, 7, 9, 11] {
        h.send(data_seg(k));
    }
    h.take();
    // Each segment growing the newest block brings an ACK.
    let mut seen = alloc::collections::BTreeSet::new();
    for k in 12..18 {
        h.send(data_seg(k));
        for s in h.take() {
            seen.extend(s.repr.sack_ranges.iter().flatten().map(|&(l, _)| l));
        }
    }
    let want: alloc::collections::BTreeSet<u32> =
        [1, 3, 5, 7, 9, 11].iter().map(|&k| at(k).0).collect();
    assert!(want.is_subset(&seen), "reported {seen:?}, blocks {want:?}");
}

/// The second SACK block is the block changed most recently before the
/// first one (RFC 2018 §4), however many segments have since grown the
/// first: the recent list holds distinct blocks, not segments. It held
/// the last four segments, so four segments into a new block the block
/// before it was left to the rotating slot — on the veth at 10 % loss a
/// Linux sender then resent whole SACKed blocks whose one report was
/// lost (469 duplicates in 16 MiB, each reported a median 1.6 ms before
/// it came again).
#[test]
fn the_block_before_the_newest_is_reported_while_the_newest_grows() {
    let mut h = Harness::new();
    let (_conn, our) = open_sack(&mut h);
    let data = [7u8; MSS];
    let data_seg = |k: usize| peer_data(our, k, &data);
    // Older blocks at 1, 3, 5, 7; then the block 9–10; then 12 onwards.
    for k in [1, 3, 5, 7, 9, 10] {
        h.send(data_seg(k));
    }
    h.take();
    let before = (at(9).0, at(11).0);
    for k in 12..20 {
        h.send(data_seg(k));
        let out = h.take();
        let acks: Vec<_> = out
            .iter()
            .filter(|s| s.repr.sack_ranges.iter().flatten().next().is_some())
            .collect();
        assert!(!acks.is_empty(), "segment {k} brings an ACK");
        for s in acks {
            let blocks: Vec<_> = s.repr.sack_ranges.iter().flatten().copied().collect();
            assert_eq!(blocks.first(), Some(&(at(12).0, at(k + 1).0)), "{blocks:?}");
            assert_eq!(blocks.get(1), Some(&before), "segment {k}: {blocks:?}");
        }
    }
}

/// When everything above a lost retransmission is SACKed and only our FIN
/// (which SACK cannot report) is left above it, the probe resends the
/// missing data, not SACKed data with the FIN: an answer to that would
/// deliver nothing new and leave the hole to the RTO.
#[test]
fn the_probe_goes_to_the_missing_data_not_the_fin() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (3 * MSS) as u32))
        .unwrap();
    h.stack.tcp_shutdown(conn).unwrap();
    assert_eq!(h.recv().len(), 3, "three segments, the FIN on the last");
    // Segment 0 lost, 1 and 2 SACKed: RACK resends 0 once the reordering
    // window (a quarter of the 1 ms min RTT) has passed.
    h.now += Duration::from_millis(1);
    h.send(sack(our, 0, &[(1, 3)]));
    assert!(h.take().is_empty());
    assert_eq!(starts(&h.advance(Duration::from_micros(250)), our), [0]);
    // That retransmission is lost too and nothing else is coming.
    let probe = h.advance(Duration::from_millis(3));
    assert_eq!(starts(&probe, our), [0], "{probe:?}");
    assert_eq!(h.stack.tcp_info(conn).unwrap().tlp_probes, 1);
}

/// The minimum RTT learns from every segment delivered, not only the one
/// timed per round trip: otherwise a probe answered over a path faster
/// than the timed segments saw looks answered by its original (RFC 8985
/// §6.2 step 2), RACK marks nothing, and a lost flight waits out probe
/// after doubling probe and then the RTO (the simulator's failover gaps
/// of 600 ms, a bonded member cut mid-flight).
#[test]
fn a_probe_answered_faster_than_the_timed_segments_repairs_the_flight() {
    let mut h = Harness::new();
    let (conn, our) = open_sack_rtt(&mut h, Duration::from_millis(1));
    // Segments 0–1 go at 0 (0 is timed), 2–9 at 0.4 ms; one ACK at 1 ms
    // takes them all: a 1 ms sample for the timed segment, 0.6 ms for
    // segments 2–9.
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (2 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 2);
    h.now += Duration::from_micros(400);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (8 * MSS) as u32))
        .unwrap();
    assert_eq!(starts(&h.recv(), our), (2..10).collect::<Vec<_>>());
    h.now += Duration::from_micros(600);
    h.send(sack(our, 10, &[]));
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().min_rtt,
        Duration::from_micros(600)
    );
    // Segments 10–19: all lost. The probe resends 19.
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
        .unwrap();
    assert_eq!(starts(&h.recv(), our), (10..20).collect::<Vec<_>>());
    let mut probe = Vec::new();
    for _ in 0..100 {
        probe = h.advance(Duration::from_micros(100));
        if !probe.is_empty() {
            break;
        }
    }
    assert_eq!(starts(&probe, our), [19], "the probe");
    // Its SACK comes 0.7 ms later: slower than any delivery seen, so the
    // probe's own. Everything sent before it is lost, and goes at once.
    h.now += Duration::from_micros(700);
    h.send(sack(our, 10, &[(19, 20)]));
    let out = starts(&h.take(), our);
    assert_eq!(out.first(), Some(&10), "repair starts at once: {out:?}");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (info.tlp_probes, info.tlp_recoveries, info.rto_count),
        (1, 1, 0)
    );
}

/// A probe may take a quicker path than any the data took (a bond's
/// real-time member, another member's shorter queue): answered sooner than
/// the minimum RTT, it is still the probe's answer — its original's would
/// have come before the probe went — and the flight is repaired at once.
/// An answer within half the minimum crossed the probe: it is the
/// original's, and marks nothing.
#[test]
fn a_probe_answered_over_a_quicker_path_repairs_the_flight() {
    for (after, repaired) in [(600, true), (400, false)] {
        let mut h = Harness::new();
        let (conn, our) = open_sack_rtt(&mut h, Duration::from_millis(1));
        h.stack
            .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
            .unwrap();
        assert_eq!(h.recv().len(), 10);
        let mut probe = Vec::new();
        for _ in 0..100 {
            probe = h.advance(Duration::from_micros(100));
            if !probe.is_empty() {
                break;
            }
        }
        assert_eq!(starts(&probe, our), [9], "the probe");
        h.now += Duration::from_micros(after);
        h.send(sack(our, 0, &[(9, 10)]));
        let out = starts(&h.take(), our);
        let info = h.stack.tcp_info(conn).unwrap();
        assert_eq!(info.min_rtt, Duration::from_millis(1));
        if repaired {
            assert_eq!(out.first(), Some(&0), "{after} µs: repaired: {out:?}");
        } else {
            assert!(out.is_empty(), "{after} µs: nothing marked: {out:?}");
        }
        assert_eq!(info.rto_count, 0);
    }
}

/// A path change (a bonded member left) makes every connection with data
/// in flight probe at once, whatever backoff the dead path's swallowed
/// probes built up; its answer repairs the flight.
#[test]
fn a_path_change_probes_at_once() {
    let mut h = Harness::new();
    let (conn, our) = open_sack_rtt(&mut h, Duration::from_millis(1));
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    // Two probes vanish on the dead path; the next would wait 8 round trips.
    let mut probes = 0;
    for _ in 0..200 {
        probes += h.advance(Duration::from_micros(100)).len();
        if probes == 2 {
            break;
        }
    }
    assert_eq!(probes, 2);
    assert!(h.advance(Duration::from_micros(100)).is_empty());
    h.stack.path_changed();
    assert_eq!(starts(&h.recv(), our), [9], "a probe at once");
    assert_eq!(h.stack.stats().path_probes, 1);
    h.now += Duration::from_millis(1);
    h.send(sack(our, 0, &[(9, 10)]));
    assert_eq!(starts(&h.take(), our).first(), Some(&0), "repaired");
    // Nothing in flight, nothing to probe.
    let mut idle = Harness::new();
    let _ = open_sack(&mut idle);
    idle.stack.path_changed();
    assert!(idle.recv().is_empty());
    assert_eq!(idle.stack.stats().path_probes, 0);
}

/// A probe the path change asked for, overtaken by an ACK of everything
/// before it could go, is owed no more: the queued data goes instead (the
/// simulator's seed 970 spun for ever at one instant).
#[test]
fn a_probe_overtaken_by_an_ack_gives_way_to_new_data() {
    let mut h = Harness::new();
    let (conn, our) = open_sack_rtt(&mut h, Duration::from_millis(1));
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (30 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    h.stack.path_changed();
    h.now += Duration::from_millis(1);
    h.send(sack(our, 10, &[]));
    let out = starts(&h.recv(), our);
    assert!(!out.is_empty() && out.iter().all(|&k| k >= 10), "{out:?}");
    assert_eq!(h.stack.tcp_info(conn).unwrap().tlp_probes, 0);
}

/// In recovery, a lone segment left in flight is probed after the RTT-scaled
/// timeout, not the receiver's delayed-ACK allowance: the receiver has just
/// seen a hole (Linux answers in quick-ACK mode), and waiting 40 ms for an
/// ACK that a 10 % loss rate takes away one time in five stalled softoe's
/// sender (issue 15: a 40 ms gap in a 0.5 s transfer, from a capture).
#[test]
fn a_lone_segment_in_recovery_is_probed_at_the_rtt_scaled_time() {
    let mut h = Harness::new();
    let (conn, our) = open_sack_rtt(&mut h, Duration::from_micros(100));
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (5 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 5);
    // Segment 0 is lost, 1..4 arrive: 0 is resent.
    h.now += Duration::from_micros(100);
    h.send(sack(our, 0, &[(1, 4)]));
    assert_eq!(starts(&h.take(), our), [0]);
    // The resent 0 arrives, 4 does not: 4, sent before that retransmission,
    // is lost too (RACK) and resent, the lone segment in flight. It is lost
    // again.
    h.now += Duration::from_micros(100);
    h.send(sack(our, 4, &[]));
    assert_eq!(starts(&h.take(), our), [4]);
    let mut t = Duration::ZERO;
    let probe = loop {
        h.now += Duration::from_micros(50);
        t += Duration::from_micros(50);
        let out = h.recv();
        if !out.is_empty() || t > Duration::from_millis(100) {
            break out;
        }
    };
    assert_eq!(starts(&probe, our), [4]);
    assert!(
        t <= Duration::from_millis(2),
        "probed after {t:?}: a lone segment in recovery waited for a delayed ACK"
    );
}

/// The times (from now, in ms) at which the stack sends anything over
/// `span` of silence from the peer, polled every 100 µs.
fn sends_in_silence(h: &mut Harness, span: Duration) -> Vec<(u128, Sent)> {
    let mut out = Vec::new();
    let mut t = Duration::ZERO;
    while t < span {
        h.now += Duration::from_micros(100);
        t += Duration::from_micros(100);
        for s in h.recv() {
            out.push((t.as_micros() / 100, s));
        }
    }
    out
}

/// A peer that goes silent with a flight outstanding gets the probes of
/// one episode (up to six, see `recovery::MAX_PROBES` for why more than
/// RFC 8985's one) and then only the RTO's retransmissions at their
/// backed-off times, as from Linux: no probe after a timeout until new
/// data is acknowledged (RFC 8985 §7). Nine segments in 1.5 s, where
/// probes after every timeout sent 27 (Linux: a probe and three RTOs).
#[test]
fn a_silent_peer_gets_one_episode_of_probes_then_the_rto_schedule() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (3 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 3);
    let sent = sends_in_silence(&mut h, Duration::from_millis(1500));
    let at: Vec<(u128, Vec<usize>)> = sent
        .iter()
        .map(|(t, s)| (*t, starts(core::slice::from_ref(s), our)))
        .collect();
    assert_eq!(
        at,
        [
            // Probes from 3 ms (SRTT 1 + 4 × RTTVAR 0.5), the second one
            // PTO later, then doubling.
            (30, vec![2]),
            (60, vec![2]),
            (120, vec![2]),
            (240, vec![2]),
            (480, vec![2]),
            (960, vec![2]),
            // The RTO (SRTT + 200 ms from the flight), doubling.
            (2010, vec![0]),
            (6030, vec![0]),
            (14070, vec![0]),
        ],
        "in units of 100 µs"
    );
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.tlp_probes, info.rto_count), (6, 3));
    // The peer answers at last: the next silent flight gets its probes.
    h.send(sack(our, 3, &[]));
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, MSS as u32))
        .unwrap();
    assert_eq!(starts(&h.recv(), our), [3]);
    let probes = sends_in_silence(&mut h, Duration::from_millis(100));
    assert!(!probes.is_empty(), "probes again once the peer answered");
    assert!(
        probes
            .iter()
            .all(|(_, s)| starts(core::slice::from_ref(s), our) == [3])
    );
}

/// A FIN the peer never acknowledges gets the probes of one episode and
/// is then resent on the RTO's schedule, doubling each time (62
/// transmissions before the orphan gave up, when every timeout brought
/// six probes with it).
#[test]
fn an_unacknowledged_fin_follows_the_rto_backoff() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack.tcp_shutdown(conn).unwrap();
    let fin = h.recv();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].repr.control, TcpControl::Fin);
    h.stack.close(h.now, conn).unwrap();
    let sent = sends_in_silence(&mut h, Duration::from_secs(13));
    assert!(
        sent.iter()
            .all(|(_, s)| s.repr.control == TcpControl::Fin && s.seq() == our),
        "only the FIN: {sent:?}"
    );
    let at: Vec<u128> = sent.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        at,
        [
            31, 61, 121, 241, 481, 961, // probes
            2010, 6030, 14070, 30150, 62310, 126630, // RTOs: 0.2 s doubling
        ],
        "in units of 100 µs"
    );
}
