//! Retransmission: RTO with backoff, fast retransmit, SACK recovery, and
//! the window's growth.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{TcpRepr, TcpSeqNumber};

use super::harness::*;
use crate::PayloadRef;

const MSS: usize = 1460;

fn seg(our: TcpSeqNumber, k: usize) -> TcpSeqNumber {
    add(our, k * MSS)
}

#[test]
fn rto_with_exponential_backoff() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 100)).unwrap();
    assert_eq!(h.recv().len(), 1);
    // The handshake gave an RTT sample of 1 ms: the RTO is SRTT plus the
    // 200 ms floor (as Linux: the floor is added, not a minimum).
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().rto,
        Duration::from_millis(201)
    );
    let mut waited = Duration::ZERO;
    for (i, gap) in [201u64, 402, 804, 1608].into_iter().enumerate() {
        assert!(
            h.advance(Duration::from_millis(gap - 1)).is_empty(),
            "not before {gap} ms"
        );
        let out = h.advance(Duration::from_millis(1));
        assert_eq!(out.len(), 1, "retransmission {i}");
        assert_eq!(out[0].seq(), our);
        assert_eq!(out[0].len(), 100);
        waited += Duration::from_millis(gap);
        let info = h.stack.tcp_info(conn).unwrap();
        assert_eq!(info.rto_count, i as u32 + 1);
        assert_eq!(info.backoff, i as u32 + 1);
    }
    // An ACK of new data ends the backoff.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 100)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_info(conn).unwrap().backoff, 0);
    assert!(waited > Duration::ZERO);
}

#[test]
fn fast_retransmit_after_three_duplicate_acks() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
        .unwrap();
    let out = h.recv();
    assert_eq!(out.len(), 10, "initial window of ten segments");
    let ack = |h: &mut Harness, a: TcpSeqNumber| {
        h.send(TcpRepr {
            seq_number: add(REMOTE_SEQ, 1),
            ack_number: Some(a),
            ..SEND_TEMPL
        });
        h.take()
    };
    assert!(
        ack(&mut h, seg(our, 1)).is_empty(),
        "segment 0 acknowledged"
    );
    assert!(ack(&mut h, seg(our, 1)).is_empty(), "first duplicate");
    assert!(ack(&mut h, seg(our, 1)).is_empty(), "second duplicate");
    let out = ack(&mut h, seg(our, 1));
    assert_eq!(out.len(), 1, "third duplicate: fast retransmit");
    assert_eq!(out[0].seq(), seg(our, 1));
    assert_eq!(out[0].len(), MSS);
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.fast_retransmits, 1);
    assert_eq!(info.rto_count, 0);
    // A partial ACK (NewReno) retransmits the next hole at once.
    let out = ack(&mut h, seg(our, 4));
    assert_eq!(out.first().map(|s| s.seq()), Some(seg(our, 4)));
}

#[test]
fn sack_recovers_several_losses_in_one_window() {
    let mut h = Harness::new();
    let (conn, our, synack) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(MSS as u16),
            sack_permitted: true,
            ..SEND_TEMPL
        },
    );
    assert!(synack.repr.sack_permitted);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    // Segments 0 and 3 are lost; the peer SACKs what it has.
    let block = |a: usize, b: usize| Some((seg(our, a).0, seg(our, b).0));
    let mut rtx = Vec::new();
    for blocks in [
        [block(1, 3), None, None, None],
        [block(4, 6), block(1, 3), None, None],
        [block(4, 8), block(1, 3), None, None],
        [block(4, 10), block(1, 3), None, None],
    ] {
        h.send(TcpRepr {
            seq_number: add(REMOTE_SEQ, 1),
            ack_number: Some(our),
            sack_ranges: blocks,
            ..SEND_TEMPL
        });
        rtx.extend(h.take().into_iter().map(|s| (s.seq(), s.len())));
    }
    rtx.sort_by_key(|(s, _)| s.0.wrapping_sub(our.0));
    assert_eq!(
        rtx,
        [(seg(our, 0), MSS), (seg(our, 3), MSS)],
        "exactly the two holes"
    );
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.sack_recoveries, 1);
    assert_eq!(info.retransmits, 2);
    // Both arrive: one cumulative ACK ends recovery.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(seg(our, 10)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_acked(conn).unwrap(), (10 * MSS) as u64);
}

#[test]
fn slow_start_doubles_the_window_per_round_trip() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.tcp_set_nodelay(conn, true).unwrap();
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (60 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    let cwnd0 = h.stack.tcp_info(conn).unwrap().cwnd;
    assert_eq!(cwnd0 as usize, 10 * MSS);
    // Acknowledge the first round segment by segment: each ACK releases two.
    let mut sent = 0;
    for k in 1..=10 {
        h.send(TcpRepr {
            seq_number: add(REMOTE_SEQ, 1),
            ack_number: Some(seg(our, k)),
            ..SEND_TEMPL
        });
        sent += h.take().len();
    }
    assert_eq!(sent, 20, "the second round is twice the first");
    assert_eq!(h.stack.tcp_info(conn).unwrap().cwnd as usize, 20 * MSS);
}

#[test]
fn zero_window_is_probed_with_backoff() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    // The peer takes 1000 bytes and closes its window; 1000 more wait.
    behind_a_zero_window(&mut h, conn, our);
    // One RTO: SRTT (under 1 ms) plus the 200 ms floor.
    assert!(h.advance(Duration::from_millis(200)).is_empty());
    let probe = h.advance(Duration::from_millis(1));
    assert_eq!(probe.len(), 1, "a probe after one RTO");
    assert_eq!(
        probe[0].seq(),
        add(our, 999),
        "an old sequence number the peer must ACK"
    );
    assert_eq!(probe[0].len(), 0);
    // Still closed: the next probe backs off.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 1000)),
        window_len: 0,
        ..SEND_TEMPL
    });
    assert!(h.advance(Duration::from_millis(400)).is_empty());
    assert_eq!(h.advance(Duration::from_millis(2)).len(), 1);
    assert_eq!(h.stack.tcp_info(conn).unwrap().zero_window_probes, 2);
    // The window opens: the data goes.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 1000)),
        window_len: 8000,
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].seq(), add(our, 1000));
    assert_eq!(out[0].len(), 1000);
}

#[test]
fn small_window_is_not_filled_with_tiny_segments() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 1000)).unwrap();
    h.recv();
    // A 100-byte window: sender SWS avoidance holds 3000 bytes back...
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 1000)),
        window_len: 100,
        ..SEND_TEMPL
    });
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 1000, 3000))
        .unwrap();
    assert!(h.recv().is_empty());
    // ...until the override timer (one RTO) says to send what fits.
    assert!(h.advance(Duration::from_millis(200)).is_empty());
    let out = h.advance(Duration::from_millis(1));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].len(), 100);
}

#[test]
fn tail_loss_probe_instead_of_a_timeout() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (3 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 3);
    // The tail is lost and no ACK comes: a probe goes after SRTT + 4 RTTVAR
    // (1 + 4 × 0.5 ms after one sample), long before the 200 ms RTO,
    // resending the last segment.
    assert!(h.advance(Duration::from_micros(2900)).is_empty());
    let probe = h.advance(Duration::from_micros(100));
    assert_eq!(probe.len(), 1);
    assert_eq!(probe[0].seq(), seg(our, 2));
    assert_eq!(probe[0].len(), MSS);
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.tlp_probes, info.rto_count), (1, 0));
    // A round trip later its SACK shows the first two missing: they went out
    // before the probe, which is delivered, and more than RACK.rtt plus the
    // reordering window ago — both are lost at once, without a timer.
    h.now += Duration::from_millis(1);
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        sack_ranges: [Some((seg(our, 2).0, seg(our, 3).0)), None, None, None],
        ..SEND_TEMPL
    });
    let rtx = h.take();
    assert_eq!(
        rtx.iter().map(|s| (s.seq(), s.len())).collect::<Vec<_>>(),
        [(seg(our, 0), MSS), (seg(our, 1), MSS)],
        "both holes, once"
    );
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (
            info.reorder_timeouts,
            info.rto_count,
            info.tlp_probes,
            info.tlp_recoveries
        ),
        (0, 0, 1, 1)
    );
}

#[test]
fn the_probe_resends_the_last_segment_even_with_new_data_waiting() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (40 * MSS) as u32))
        .unwrap();
    let first = h.recv();
    let n = first.iter().map(|s| s.len()).sum::<usize>() / MSS;
    assert!(n < 40, "the window holds some back");
    // The ACK for the whole flight is lost: the probe repeats the last
    // segment (which the receiver acknowledges at once as a duplicate).
    let probe = h.advance(Duration::from_millis(3));
    assert_eq!(probe.len(), 1);
    assert_eq!((probe[0].seq(), probe[0].len()), (seg(our, n - 1), MSS));
}

/// RFC 6937 §3 counts the data delivered by every ACK "starting or during"
/// recovery. If the ACK that starts it counted nothing, a recovery that
/// begins with one ACK SACKing the whole flight sends only the
/// retransmission, and if the ACK for it is lost, nothing is left in flight
/// to bring another: a 200 ms RTO (seen on the demo's 1 %-drop path).
#[test]
fn the_ack_that_starts_recovery_lets_new_data_out_with_the_retransmission() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (40 * MSS) as u32))
        .unwrap();
    let first = h.recv();
    let n = first.iter().map(|s| s.len()).sum::<usize>() / MSS;
    assert!(n >= 4, "an initial window of several segments: {n}");
    // Segment 0 is lost; one ACK SACKs all the others.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        sack_ranges: [Some((seg(our, 1).0, seg(our, n).0)), None, None, None],
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(
        out.first().map(Sent::seq),
        Some(seg(our, 0)),
        "fast retransmit"
    );
    let new: usize = out
        .iter()
        .filter(|s| seq_ge(s.seq(), seg(our, n)))
        .map(Sent::len)
        .sum();
    assert!(
        new >= MSS,
        "new data goes out beside the retransmission: {:?}",
        out.iter().map(|s| (s.seq().0, s.len())).collect::<Vec<_>>()
    );
    // PRR-SSRB: not more than ssthresh allows (0.7 or 0.5 of the window).
    assert!(
        new <= n * MSS * 7 / 10,
        "{new} bytes of new data for {n} delivered"
    );
    assert_eq!(h.stack.tcp_info(conn).unwrap().sack_recoveries, 1);
}

fn seq_ge(a: TcpSeqNumber, b: TcpSeqNumber) -> bool {
    a.0.wrapping_sub(b.0) as i32 >= 0
}

#[test]
fn a_lost_ack_at_the_end_of_recovery_is_probed_not_timed_out() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, (10 * MSS) as u32))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    // Segment 0 lost; the rest SACKed: recovery resends it.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        sack_ranges: [Some((seg(our, 1).0, seg(our, 10).0)), None, None, None],
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.first().map(Sent::seq), Some(seg(our, 0)));
    // The ACK for it (and everything) is lost. A probe timeout (SRTT + 4
    // RTTVAR, 3 ms) later a probe goes, long before the 200 ms RTO.
    let probe = h.advance(Duration::from_millis(3));
    assert_eq!(probe.len(), 1, "{probe:?}");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.tlp_probes, info.rto_count), (1, 0));
    // Its answer ends recovery.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(seg(our, 10)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_acked(conn).unwrap(), (10 * MSS) as u64);
    assert!(h.advance(Duration::from_millis(300)).is_empty());
    assert_eq!(h.stack.tcp_info(conn).unwrap().rto_count, 0);
}
