//! ICMP destination-unreachable errors about our TCP segments (RFC 1122
//! §4.2.3.9, RFC 5461, RFC 5927), answered as Linux's `tcp_v4_err`: a
//! connection attempt ends at once with the error the code names; a
//! handshake of ours in SYN-RECEIVED is dropped on net or host
//! unreachable; an open connection only records the error, and reports it
//! if it then times out. An error is believed only when it quotes a
//! connection's ports and a sequence number it has outstanding.

use core::time::Duration;

use softoe_wire::{Icmpv4DstUnreachable as Code, Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber};

use super::harness::*;
use crate::{PayloadRef, State, TcpError};

/// A router between us and the peer.
const ROUTER: Ipv4Address = Ipv4Address::new(10, 0, 0, 254);

/// Each unreachable code a connection attempt meets ends it at once with
/// the error Linux's `icmp_err_convert` names for it; the SYN is not
/// sent again.
#[test]
fn an_unreachable_error_ends_a_connection_attempt_at_once() {
    let cases = [
        (Code::PortUnreachable, TcpError::Refused),
        (Code::HostUnreachable, TcpError::HostUnreachable),
        (Code::NetUnreachable, TcpError::NetUnreachable),
        (Code::ProtoUnreachable, TcpError::ProtocolUnreachable),
        // Communication administratively prohibited (a firewall's
        // `reject with icmp type admin-prohibited`).
        (Code::Unknown(13), TcpError::HostUnreachable),
    ];
    for (code, want) in cases {
        let mut h = Harness::new();
        let (conn, syn) = connect(&mut h);
        let from = if code == Code::PortUnreachable {
            REMOTE_IP
        } else {
            ROUTER
        };
        h.icmp_unreachable(from, code, &quote(LOCAL_PORT, REMOTE_PORT, syn.seq()));
        assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed, "{code:?}");
        assert_eq!(h.stack.tcp_error(conn).unwrap(), Some(want), "{code:?}");
        let mut closed = false;
        while let Some((c, e)) = h.stack.poll_event() {
            closed |= c == conn && e.contains(crate::Events::CLOSED);
        }
        assert!(closed, "{code:?}: the program learns at once");
        assert!(
            h.advance(Duration::from_secs(10)).is_empty(),
            "{code:?}: no SYN again"
        );
        assert_eq!(h.stack.stats().tcp_icmp_aborts, 1);
    }
}

/// An error is believed only when it quotes the attempt's ports and its
/// SYN's sequence number (RFC 5927 §4.1); a fragmentation-needed error
/// (path MTU discovery's) and codes past 15 are not TCP's to act on. The
/// attempt goes on: its SYN is resent at the timeout.
#[test]
fn an_error_quoting_something_else_is_ignored() {
    let mut h = Harness::new();
    let (conn, syn) = connect(&mut h);
    let iss = syn.seq();
    let far = TcpSeqNumber(iss.0.wrapping_add(1000));
    let q = quote(LOCAL_PORT, REMOTE_PORT, iss);
    h.icmp_unreachable(
        ROUTER,
        Code::PortUnreachable,
        &quote(LOCAL_PORT, REMOTE_PORT, far),
    );
    h.icmp_unreachable(
        ROUTER,
        Code::PortUnreachable,
        &quote(LOCAL_PORT + 1, REMOTE_PORT, iss),
    );
    h.icmp_unreachable(
        ROUTER,
        Code::PortUnreachable,
        &quote(LOCAL_PORT, REMOTE_PORT + 1, iss),
    );
    // Cut short of the TCP header's first eight bytes.
    h.icmp_unreachable(ROUTER, Code::PortUnreachable, &q[..26]);
    h.icmp_unreachable(ROUTER, Code::FragRequired, &q);
    h.icmp_unreachable(ROUTER, Code::Unknown(16), &q);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::SynSent);
    assert_eq!(h.stack.tcp_error(conn).unwrap(), None);
    assert_eq!(h.stack.stats().tcp_icmp_aborts, 0);
    assert_eq!(
        h.stack.stats().tcp_icmp_out_of_window,
        1,
        "the wrong sequence number"
    );
    let again = h.advance(Duration::from_secs(1));
    assert_eq!(again.len(), 1, "the SYN again at 1 s: {again:?}");
    assert_eq!(again[0].repr.control, TcpControl::Syn);
}

/// On an open connection an unreachable error, hard or soft, is recorded
/// and nothing more (RFC 5461; RFC 5927 §7 for hard errors, as Linux):
/// data still flows. If the connection then times out, it reports the
/// recorded error, not `ETIMEDOUT` (Linux's `tcp_write_err`); an ACK of
/// new data in between forgets it.
#[test]
fn an_open_connection_only_records_the_error() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack
        .tcp_set_user_timeout(conn, Some(Duration::from_secs(2)))
        .unwrap();
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 100)).unwrap();
    assert_eq!(h.recv().len(), 1);
    h.icmp_unreachable(
        ROUTER,
        Code::PortUnreachable,
        &quote(LOCAL_PORT, REMOTE_PORT, our),
    );
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.state, info.error), (State::Established, None));
    assert_eq!(info.soft_error, Some(TcpError::Refused));
    // The peer acknowledges: the error is forgotten.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 100)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_info(conn).unwrap().soft_error, None);
    // More data, and the path breaks: a router says so, then silence.
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 100, 100))
        .unwrap();
    assert_eq!(h.recv().len(), 1);
    let q = quote(LOCAL_PORT, REMOTE_PORT, add(our, 100));
    h.icmp_unreachable(ROUTER, Code::HostUnreachable, &q);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    for _ in 0..40 {
        h.advance(Duration::from_millis(100));
    }
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.state, State::Closed);
    assert_eq!(info.error, Some(TcpError::HostUnreachable), "{info:?}");
    assert_eq!(h.stack.stats().tcp_timeouts, 1);
    assert_eq!(h.stack.stats().tcp_icmp_aborts, 0);
}

/// A handshake of ours still in SYN-RECEIVED is dropped, silently, when a
/// router says the client's network or host is unreachable and quotes our
/// SYN-ACK's sequence number (Linux's `tcp_req_err`): spoofed SYNs from
/// unreachable addresses then free their place at once. A port
/// unreachable (which a spoofer can send for any port) leaves it.
#[test]
fn a_handshake_to_an_unreachable_host_is_dropped() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    let sa = h.take().remove(0);
    let q = quote(LOCAL_PORT, REMOTE_PORT, sa.seq());
    h.icmp_unreachable(REMOTE_IP, Code::PortUnreachable, &q);
    h.icmp_unreachable(
        ROUTER,
        Code::HostUnreachable,
        &quote(LOCAL_PORT, REMOTE_PORT, add(sa.seq(), 1)),
    );
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 1);
    h.icmp_unreachable(ROUTER, Code::HostUnreachable, &q);
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 0);
    assert!(
        h.advance(Duration::from_secs(5)).is_empty(),
        "no SYN-ACK again"
    );
    assert_eq!(h.stack.tcp_accept(lst).unwrap(), None);
    assert_eq!(h.stack.stats().tcp_icmp_aborts, 1);
}
