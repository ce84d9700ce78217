//! Every way a connection opens and closes.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{TcpControl, TcpRepr};

use super::harness::*;
use crate::{Events, PayloadRef, RecvError, State, TcpError};

#[test]
fn simultaneous_open() {
    let mut h = Harness::new();
    let (conn, syn) = connect(&mut h);
    let iss = syn.seq();
    // The peer's SYN crosses ours.
    h.send(TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1, "a SYN-ACK answers: {out:?}");
    assert_eq!(out[0].repr.control, TcpControl::Syn);
    assert_eq!(out[0].seq(), iss, "same ISS");
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1)));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::SynReceived);
    // The peer's SYN-ACK completes it.
    h.send(TcpRepr {
        control: TcpControl::Syn,
        ack_number: Some(add(iss, 1)),
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    let out = h.take();
    assert_eq!(out.len(), 1, "ACK of the peer's SYN");
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1)));
}

#[test]
fn simultaneous_close_through_closing() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.tcp_shutdown(conn).unwrap();
    let fin = h.recv();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].repr.control, TcpControl::Fin);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::FinWait1);
    // The peer's FIN crosses ours (it has not seen ours).
    h.send(TcpRepr {
        control: TcpControl::Fin,
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closing);
    let ack = h.take();
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].ack(), Some(add(REMOTE_SEQ, 2)));
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 2),
        ack_number: Some(add(our, 1)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::TimeWait);
    h.advance(Duration::from_secs(61));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    assert_eq!(h.stack.tcp_info(conn).unwrap().error, None);
}

#[test]
fn peer_half_closes_and_we_keep_sending() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.send(TcpRepr {
        control: TcpControl::Fin,
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        ..SEND_TEMPL
    });
    h.take();
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::CloseWait);
    let mut buf = [0u8; 8];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf), Err(RecvError::Finished));
    // Our half is still open.
    assert_eq!(
        h.stack.tcp_send(conn, PayloadRef::new(0, 0, 500)).unwrap(),
        500
    );
    let out = h.recv();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].len(), 500);
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 2),
        ack_number: Some(add(our, 500)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_acked(conn).unwrap(), 500);
    h.stack.tcp_shutdown(conn).unwrap();
    let fin = h.recv();
    assert_eq!(fin[0].repr.control, TcpControl::Fin);
    assert_eq!(fin[0].seq(), add(our, 500));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::LastAck);
}

#[test]
fn we_half_close_and_keep_receiving() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.tcp_shutdown(conn).unwrap();
    h.recv();
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 1)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::FinWait2);
    let data = [9u8; 300];
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 1)),
        payload: &data,
        ..SEND_TEMPL
    });
    let mut buf = [0u8; 400];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 300);
    h.send(TcpRepr {
        control: TcpControl::Fin,
        seq_number: add(REMOTE_SEQ, 301),
        ack_number: Some(add(our, 1)),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.last().unwrap().ack(), Some(add(REMOTE_SEQ, 302)));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::TimeWait);
    h.advance(Duration::from_secs(61));
    // Not closed by the application: the handle stays valid, CLOSED, until close().
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    h.stack.close(h.now, conn).unwrap();
    assert!(h.stack.tcp_state(conn).is_err(), "released");
}

#[test]
fn time_wait_reacks_a_retransmitted_fin() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.close(h.now, conn).unwrap();
    h.recv();
    let fin = TcpRepr {
        control: TcpControl::Fin,
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 1)),
        ..SEND_TEMPL
    };
    h.send(fin);
    assert_eq!(h.take().len(), 1);
    h.advance(Duration::from_secs(30));
    // Our ACK was lost: the FIN comes again, and is acknowledged again.
    h.send(fin);
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 2)));
    // 2 MSL restarted: still there 45 s later, gone after 61.
    h.advance(Duration::from_secs(45));
    assert_eq!(h.stack.socket_count(), 1);
    h.advance(Duration::from_secs(16));
    assert_eq!(h.stack.socket_count(), 0);
}

#[test]
fn abort_sends_rst() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.tcp_abort(conn).unwrap();
    let out = h.recv();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, TcpControl::Rst);
    assert_eq!(out[0].seq(), our);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().error,
        Some(TcpError::Aborted)
    );
    let ev: Vec<_> = core::iter::from_fn(|| h.stack.poll_event()).collect();
    assert!(
        ev.iter()
            .any(|(c, e)| *c == conn && e.contains(Events::CLOSED))
    );
}

#[test]
fn close_with_unread_data_resets() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    let data = [1u8; 10];
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        payload: &data,
        ..SEND_TEMPL
    });
    h.stack.close(h.now, conn).unwrap();
    let out = h.recv();
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].repr.control,
        TcpControl::Rst,
        "unread data: RST, not FIN"
    );
    assert_eq!(h.stack.socket_count(), 0, "freed");
}

#[test]
fn data_after_close_resets() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.close(h.now, conn).unwrap();
    h.recv();
    let data = [1u8; 10];
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 1)),
        payload: &data,
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, TcpControl::Rst);
    assert_eq!(h.stack.socket_count(), 0);
}

#[test]
fn close_in_syn_sent_forgets_the_attempt() {
    let mut h = Harness::new();
    let conn = h.stack.tcp_connect(h.now, remote(), None, None).unwrap();
    h.recv();
    h.stack.close(h.now, conn).unwrap();
    assert_eq!(h.stack.socket_count(), 0);
    assert!(
        h.recv().is_empty(),
        "no RST for a connection the peer never saw"
    );
}

#[test]
fn shutdown_before_established_sends_fin_after_handshake() {
    let mut h = Harness::new();
    let (conn, syn) = connect(&mut h);
    let iss = syn.seq();
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 100)).unwrap();
    h.stack.tcp_shutdown(conn).unwrap();
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::SynSent);
    h.send(TcpRepr {
        control: TcpControl::Syn,
        ack_number: Some(add(iss, 1)),
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    let out = h.take();
    let fin = out
        .iter()
        .find(|s| s.repr.control == TcpControl::Fin)
        .expect("a FIN after the data");
    assert_eq!(fin.len(), 100);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::FinWait1);
}

#[test]
fn a_closed_socket_with_an_ack_owed_does_not_spin() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    let ka = crate::Keepalive {
        idle: Duration::from_millis(100),
        interval: Duration::from_millis(100),
        count: 0,
    };
    h.stack.tcp_set_keepalive(h.now, conn, Some(ka)).unwrap();
    // Data arrives: an ACK is owed after the delayed-ACK timer.
    let data = [1u8; 10];
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        payload: &data,
        ..SEND_TEMPL
    });
    // One poll finds both the delayed ACK and the keepalive (count 0: give up
    // at once) expired: the connection fails with the ACK still owed.
    h.advance(Duration::from_millis(200));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    // The handle is still held. A closed socket owes nothing: the stack
    // must not ask to be polled at once, forever.
    assert_ne!(h.stack.poll_at(), Some(crate::Instant::ZERO));
    assert!(h.advance(Duration::from_secs(5)).is_empty());
}
