//! Idle connections cost the runtime nothing: a deadline that was
//! cancelled or moved later (a delayed ACK sent with data, a retransmission
//! timer whose data was acknowledged) must not wake it. The scale scenario
//! holds 10,000 connections; each cancelled deadline that still woke the
//! engine was one more wake-up per connection after every burst of
//! traffic.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{TcpControl, TcpRepr};

use super::harness::*;
use crate::{PayloadRef, SocketHandle, State};

/// `n` passive connections from ports `REMOTE_PORT + k`, each of which
/// gets a 64-byte request, answers it with 64 bytes, and has the answer
/// acknowledged: every one ends idle, with nothing owed either way.
fn request_and_answer(h: &mut Harness, n: u16) -> Vec<SocketHandle> {
    let lst = h.stack.tcp_listen(local(), 1024, None).unwrap();
    let mut conns = Vec::new();
    let req = [9u8; 64];
    for k in 0..n {
        let port = REMOTE_PORT + k;
        let t = TcpRepr {
            src_port: port,
            max_seg_size: Some(1460),
            sack_permitted: true,
            ..SEND_TEMPL
        };
        h.send(TcpRepr {
            control: TcpControl::Syn,
            seq_number: REMOTE_SEQ,
            ack_number: None,
            ..t
        });
        let sa = h.take().remove(0);
        let ours = add(sa.seq(), 1);
        h.now += Duration::from_micros(50);
        h.send(TcpRepr {
            seq_number: add(REMOTE_SEQ, 1),
            ack_number: Some(ours),
            ..t
        });
        let c = h.stack.tcp_accept(lst).unwrap().expect("accepted");
        // The request: its ACK waits (delayed), then goes with the answer.
        h.send(TcpRepr {
            seq_number: add(REMOTE_SEQ, 1),
            ack_number: Some(ours),
            psh: true,
            payload: &req,
            ..t
        });
        let mut buf = [0u8; 64];
        assert_eq!(h.stack.tcp_recv(c, &mut buf).unwrap(), 64);
        h.stack.tcp_send(c, PayloadRef::new(0, 0, 64)).unwrap();
        let out = h.recv();
        assert_eq!(out.len(), 1, "the answer, carrying the ACK: {out:?}");
        h.now += Duration::from_micros(50);
        h.send(TcpRepr {
            seq_number: add(REMOTE_SEQ, 65),
            ack_number: Some(add(ours, 64)),
            ..t
        });
        assert!(h.take().is_empty());
        conns.push(c);
    }
    conns
}

#[test]
fn idle_connections_ask_for_no_wake_up() {
    let mut h = Harness::new();
    let conns = request_and_answer(&mut h, 100);
    // Everything sent is acknowledged and nothing is owed: no timer of any
    // of them needs the runtime (the listener has none).
    let mut wakeups = 0;
    while let Some(t) = h.stack.poll_at() {
        assert!(wakeups < 1000, "the stack keeps asking to be woken");
        h.now = h.now.max(t);
        assert!(h.recv().is_empty(), "an idle connection sent something");
        wakeups += 1;
    }
    assert_eq!(wakeups, 0, "wake-ups for 100 idle connections");
    for c in conns {
        assert_eq!(h.stack.tcp_state(c).unwrap(), State::Established);
    }
}
