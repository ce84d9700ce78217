//! Resets, RFC 5961 challenge ACKs, and answers for closed ports.

use core::time::Duration;

use softoe_wire::{TcpControl, TcpRepr, TcpSeqNumber};

use super::harness::*;
use crate::{State, TcpError};

#[test]
fn rst_at_rcv_nxt_resets() {
    let mut h = Harness::new();
    let (conn, _) = open_plain(&mut h);
    h.send(TcpRepr {
        control: TcpControl::Rst,
        seq_number: add(REMOTE_SEQ, 1),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    assert_eq!(h.stack.tcp_info(conn).unwrap().error, Some(TcpError::Reset));
    assert!(h.take().is_empty(), "never answer a RST");
}

#[test]
fn rst_in_window_gets_a_challenge_ack() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.send(TcpRepr {
        control: TcpControl::Rst,
        seq_number: add(REMOTE_SEQ, 100),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, TcpControl::None);
    assert_eq!(out[0].seq(), our);
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1)));
    assert_eq!(h.stack.tcp_info(conn).unwrap().challenge_acks, 1);
}

#[test]
fn rst_out_of_window_is_ignored() {
    let mut h = Harness::new();
    let (conn, _) = open_plain(&mut h);
    h.send(TcpRepr {
        control: TcpControl::Rst,
        seq_number: add(REMOTE_SEQ, 1_000_000),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    assert!(h.take().is_empty());
}

#[test]
fn syn_on_an_established_connection_gets_a_challenge_ack() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.send(TcpRepr {
        control: TcpControl::Syn,
        seq_number: add(REMOTE_SEQ, 1),
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].seq(), our);
    assert_eq!(out[0].repr.control, TcpControl::None);
}

#[test]
fn challenge_acks_are_rate_limited() {
    let mut cfg = config();
    cfg.challenge_ack_limit = 5;
    let mut h = Harness::with_config(cfg);
    let (conn, _) = open_plain(&mut h);
    let mut acks = 0;
    for i in 0..20 {
        h.send(TcpRepr {
            control: TcpControl::Rst,
            seq_number: add(REMOTE_SEQ, 10 + i),
            ..SEND_TEMPL
        });
        acks += h.take().len();
    }
    assert_eq!(acks, 5);
    h.advance(Duration::from_secs(1));
    h.send(TcpRepr {
        control: TcpControl::Rst,
        seq_number: add(REMOTE_SEQ, 50),
        ..SEND_TEMPL
    });
    assert_eq!(h.take().len(), 1, "a new second, a new budget");
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
}

#[test]
fn ack_too_old_or_too_new_is_dropped() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    let data = [5u8; 10];
    // ACK of data never sent: an ACK answers, the data is not taken.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 5000)),
        payload: &data,
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1)));
    assert_eq!(h.stack.tcp_info(conn).unwrap().bytes_received, 0);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
}

#[test]
fn closed_ports_answer_with_rst() {
    let mut h = Harness::new();
    // A SYN to a closed port: RST, ACK of the SYN.
    h.send(TcpRepr {
        control: TcpControl::Syn,
        dst_port: 81,
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, TcpControl::Rst);
    assert_eq!(out[0].seq(), TcpSeqNumber(0));
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1)));
    // An ACK to a closed port: RST with the ACK's number, no ACK.
    h.send(TcpRepr {
        dst_port: 81,
        ack_number: Some(TcpSeqNumber(777)),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].seq(), TcpSeqNumber(777));
    assert_eq!(out[0].ack(), None);
    // A RST to a closed port: silence.
    h.send(TcpRepr {
        control: TcpControl::Rst,
        dst_port: 81,
        ..SEND_TEMPL
    });
    assert!(h.take().is_empty());
    assert_eq!(h.stack.stats().tcp_rst_tx, 2);
}

#[test]
fn syn_sent_rst_means_refused() {
    let mut h = Harness::new();
    let (conn, syn) = connect(&mut h);
    let iss = syn.seq();
    // A RST without an acceptable ACK is ignored...
    h.send(TcpRepr {
        control: TcpControl::Rst,
        ack_number: Some(add(iss, 7)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::SynSent);
    // ...one acknowledging our SYN refuses the connection.
    h.send(TcpRepr {
        control: TcpControl::Rst,
        ack_number: Some(add(iss, 1)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().error,
        Some(TcpError::Refused)
    );
}

#[test]
fn syn_sent_bad_ack_gets_rst() {
    let mut h = Harness::new();
    let (conn, syn) = connect(&mut h);
    let iss = syn.seq();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        ack_number: Some(add(iss, 5)),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, TcpControl::Rst);
    assert_eq!(out[0].seq(), add(iss, 5));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::SynSent);
}

#[test]
fn listener_closing_resets_pending_connections() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        ..SEND_TEMPL
    });
    let iss = h.take()[0].seq();
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(iss, 1)),
        ..SEND_TEMPL
    });
    // Established, never accepted; the listener goes away.
    h.stack.close(h.now, lst).unwrap();
    let out = h.recv();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, TcpControl::Rst);
    assert_eq!(h.stack.socket_count(), 0);
}
