//! Keepalive and the user timeout.

use core::time::Duration;

use softoe_wire::{ArpOperation, TcpControl, TcpRepr, TcpSeqNumber};

use super::harness::*;
use crate::{Keepalive, PayloadRef, State, TcpError};

#[test]
fn keepalive_probes_then_gives_up() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    let ka = Keepalive {
        idle: Duration::from_secs(10),
        interval: Duration::from_secs(2),
        count: 3,
    };
    h.stack.tcp_set_keepalive(h.now, conn, Some(ka)).unwrap();
    assert!(h.advance(Duration::from_millis(9_999)).is_empty());
    let probe = h.advance(Duration::from_millis(1));
    assert_eq!(probe.len(), 1, "a probe after the idle time");
    assert_eq!(
        probe[0].seq(),
        TcpSeqNumber(our.0.wrapping_sub(1)),
        "an old sequence number"
    );
    assert_eq!(probe[0].len(), 0);
    // The peer answers: the idle clock restarts.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        ..SEND_TEMPL
    });
    assert!(h.advance(Duration::from_secs(9)).is_empty());
    assert_eq!(h.advance(Duration::from_secs(1)).len(), 1);
    // Now silence: two more probes, then the connection is declared dead.
    assert_eq!(h.advance(Duration::from_secs(2)).len(), 1);
    assert_eq!(h.advance(Duration::from_secs(2)).len(), 1);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    h.advance(Duration::from_secs(2));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().error,
        Some(TcpError::TimedOut)
    );
    assert_eq!(h.stack.tcp_info(conn).unwrap().keepalive_probes, 4);
}

#[test]
fn user_timeout_ends_a_connection_that_cannot_deliver() {
    let mut h = Harness::new();
    let (conn, _) = open_plain(&mut h);
    h.stack
        .tcp_set_user_timeout(conn, Some(Duration::from_secs(1)))
        .unwrap();
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 100)).unwrap();
    h.recv();
    // RTOs at 0.2, 0.6, 1.4 s: the third finds a second without progress.
    for _ in 0..20 {
        h.advance(Duration::from_millis(100));
    }
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.error, Some(TcpError::TimedOut));
    assert_eq!(info.rto_count, 2, "gave up at the third expiry");
}

#[test]
fn syn_retries_run_out() {
    let mut cfg = config();
    cfg.tcp.syn_retries = 2;
    let mut h = Harness::with_config(cfg);
    let conn = h.stack.tcp_connect(h.now, remote(), None, None).unwrap();
    assert_eq!(h.recv().len(), 1);
    // SYN at 0, again at 1 s and 3 s; at 7 s the attempt fails.
    assert_eq!(h.advance(Duration::from_secs(1)).len(), 1);
    assert_eq!(h.advance(Duration::from_secs(2)).len(), 1);
    assert!(h.advance(Duration::from_secs(4)).is_empty());
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().error,
        Some(TcpError::TimedOut)
    );
}

/// A peer alive but not reading: answers every probe with a zero window,
/// for `limit` at most. Returns the probes it answered and whether a RST
/// came (which ends it).
fn answer_probes(h: &mut Harness, our: TcpSeqNumber, limit: Duration) -> (u32, bool) {
    let mut probes = 0;
    let end = h.now + limit;
    while h.now < end {
        let out = h.advance(Duration::from_millis(50));
        if !h.other.is_empty() {
            // The peer's address went stale (60 s): it answers the ARP
            // request, and the probe waiting for it goes.
            h.other.clear();
            h.arp(ArpOperation::Reply, REMOTE_IP, LOCAL_IP);
        }
        for s in out.into_iter().chain(h.take()) {
            if s.repr.control == TcpControl::Rst {
                return (probes, true);
            }
            probes += 1;
            h.send(TcpRepr {
                seq_number: add(REMOTE_SEQ, 1),
                ack_number: Some(add(our, 1000)),
                window_len: 0,
                ..SEND_TEMPL
            });
        }
    }
    (probes, false)
}

#[test]
fn a_connection_behind_a_zero_window_is_probed_while_the_peer_answers() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    behind_a_zero_window(&mut h, conn, our);
    // RFC 9293 §3.8.6.1: open as long as the probes are answered.
    let (probes, rst) = answer_probes(&mut h, our, Duration::from_secs(600));
    assert!(!rst);
    assert!(
        probes > 12,
        "probes every RTO, backed off to a minute: {probes}"
    );
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    assert_eq!(h.stack.stats().tcp_timeouts, 0);
}

#[test]
fn an_orphan_behind_a_zero_window_is_given_up() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    behind_a_zero_window(&mut h, conn, our);
    h.stack.close(h.now, conn).unwrap();
    let start = h.now;
    let (probes, rst) = answer_probes(&mut h, our, Duration::from_secs(600));
    assert!(rst, "a RST tells the peer the rest will not come");
    assert_eq!(probes, 8, "orphan_retries probes, then no more");
    // 0.2 s backed off eight times: 0.2 × (2^9 - 1) ≈ 102 s.
    let took = h.now - start;
    assert!(
        (Duration::from_secs(100)..Duration::from_secs(105)).contains(&took),
        "{took:?}"
    );
    assert!(h.stack.tcp_state(conn).is_err(), "the orphan is freed");
    assert_eq!(h.stack.stats().tcp_timeouts, 1);
}

/// A connection its program left while what it queued still drains
/// (`tcp_orphan`): the same limit, but the handle stays its holder's.
#[test]
fn a_connection_whose_owner_is_gone_is_given_up_but_kept() {
    let mut cfg = config();
    cfg.tcp.orphan_retries = 3;
    let mut h = Harness::with_config(cfg);
    let (conn, our) = open_plain(&mut h);
    behind_a_zero_window(&mut h, conn, our);
    h.stack.tcp_orphan(conn).unwrap();
    let (probes, rst) = answer_probes(&mut h, our, Duration::from_secs(600));
    assert!(rst);
    assert_eq!(probes, 3);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().error,
        Some(TcpError::TimedOut)
    );
    h.stack.close(h.now, conn).unwrap();
    assert!(h.stack.tcp_state(conn).is_err());
}

/// An orphan whose peer went silent gets `orphan_retries`
/// retransmissions, not `max_retries` (Linux: `tcp_orphan_retries`).
#[test]
fn an_orphan_with_a_silent_peer_gives_up_sooner() {
    let mut cfg = config();
    cfg.tcp.orphan_retries = 2;
    let mut h = Harness::with_config(cfg);
    let (conn, _) = open_plain(&mut h);
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 100)).unwrap();
    h.stack.close(h.now, conn).unwrap();
    assert!(!h.recv().is_empty(), "the data and the FIN go out");
    // RTOs at 0.201 and 0.603 s resend; the third, at 1.407 s, gives up.
    let start = h.now;
    let mut out = alloc::vec::Vec::new();
    while h.stack.tcp_state(conn).is_ok() && h.now - start < Duration::from_secs(60) {
        out.extend(h.advance(Duration::from_millis(1)));
    }
    assert_eq!(
        h.now - start,
        Duration::from_millis(1407),
        "freed at the third RTO"
    );
    assert!(
        out.iter().all(|s| s.repr.control != TcpControl::Rst),
        "no RST to a silent peer"
    );
    assert_eq!(h.stack.stats().tcp_timeouts, 1);
    assert_eq!(
        h.stack.stats().tcp_retransmits,
        2,
        "both resends counted, and kept once the connection is freed"
    );
}
