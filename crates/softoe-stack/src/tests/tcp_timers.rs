//! Keepalive and the user timeout.

use core::time::Duration;

use softoe_wire::TcpRepr;

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
        softoe_wire::TcpSeqNumber(our.0.wrapping_sub(1)),
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
