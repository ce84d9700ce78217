//! Handshakes, data, ACK generation and close paths, segment by segment.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestamp};

use super::harness::*;
use crate::tcp::seq;
use crate::{Events, PayloadRef, RecvError, SocketHandle, State};

fn add(s: TcpSeqNumber, n: usize) -> TcpSeqNumber {
    seq::add(s, n as u32)
}

/// A listener on LOCAL_PORT and a completed passive handshake without options.
pub(crate) fn established_passive(h: &mut Harness) -> (SocketHandle, TcpSeqNumber) {
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    let synack = h.take();
    assert_eq!(synack.len(), 1, "{synack:?}");
    let sa = &synack[0];
    assert_eq!(sa.repr.control, TcpControl::Syn);
    assert_eq!(sa.ack(), Some(add(REMOTE_SEQ, 1)));
    assert_eq!(sa.repr.max_seg_size, Some(1460));
    assert_eq!(sa.repr.window_scale, None, "no WS offered, none answered");
    assert!(!sa.repr.sack_permitted);
    assert_eq!(sa.repr.timestamp, None);
    let iss = sa.seq();
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(iss, 1)),
        ..SEND_TEMPL
    });
    assert!(h.take().is_empty());
    let conn = h.stack.tcp_accept(lst).unwrap().expect("accepted");
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    (conn, add(iss, 1))
}

#[test]
fn passive_open_and_data_both_ways() {
    let mut h = Harness::new();
    let (conn, our_seq) = established_passive(&mut h);
    // Peer sends 100 bytes.
    let data = [7u8; 100];
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our_seq),
        psh: true,
        payload: &data,
        ..SEND_TEMPL
    });
    // One small segment: the ACK is delayed.
    assert!(h.take().is_empty());
    let mut buf = [0u8; 200];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 100);
    assert_eq!(&buf[..100], &data[..]);
    // We answer; the data carries the ACK.
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 10)).unwrap();
    let out = h.recv();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].seq(), our_seq);
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 101)));
    assert_eq!(out[0].payload, h.dev.mem[..10].to_vec());
    assert!(out[0].repr.psh);
}

#[test]
fn active_open_negotiates_options() {
    let mut h = Harness::new();
    let (conn, syn) = connect(&mut h);
    let s = &syn.repr;
    assert_eq!(s.ack_number, None);
    assert_eq!(s.max_seg_size, Some(1460));
    assert!(s.sack_permitted);
    assert!(s.window_scale.is_some());
    assert!(s.timestamp.is_some());
    let iss = syn.seq();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: Some(add(iss, 1)),
        max_seg_size: Some(1200),
        window_scale: Some(3),
        sack_permitted: true,
        timestamp: Some(TcpTimestamp {
            tsval: 500,
            tsecr: s.timestamp.unwrap().tsval,
        }),
        ..SEND_TEMPL
    });
    let ack = h.take();
    assert_eq!(ack.len(), 1, "the handshake's ACK goes at once");
    assert_eq!(ack[0].ack(), Some(add(REMOTE_SEQ, 1)));
    assert_eq!(ack[0].repr.timestamp.unwrap().tsecr, 500);
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.state, State::Established);
    assert_eq!(
        info.snd_mss,
        1200 - 12,
        "peer MSS less the timestamp option"
    );
    assert!(info.sack && info.timestamps);
    assert_eq!(info.wscale.unwrap().1, 3);
    let ev: Vec<_> = core::iter::from_fn(|| h.stack.poll_event()).collect();
    assert!(
        ev.iter()
            .any(|(hd, e)| *hd == conn && e.contains(Events::CONNECTED)),
        "{ev:?}"
    );
}

#[test]
fn delayed_ack_every_second_full_segment_or_timer() {
    let mut h = Harness::new();
    let (_conn, our_seq) = established_passive(&mut h);
    let seg = [1u8; 1460];
    let mut s = add(REMOTE_SEQ, 1);
    for i in 0..4 {
        h.send(TcpRepr {
            seq_number: s,
            ack_number: Some(our_seq),
            payload: &seg,
            ..SEND_TEMPL
        });
        s = add(s, seg.len());
        let out = h.take();
        if i % 2 == 0 {
            assert!(out.is_empty(), "first of two is not acknowledged at once");
        } else {
            assert_eq!(out.len(), 1, "second full segment is acknowledged");
            assert_eq!(out[0].ack(), Some(s));
        }
    }
    // A single small segment waits for the timer (40 ms by default).
    h.send(TcpRepr {
        seq_number: s,
        ack_number: Some(our_seq),
        payload: &seg[..10],
        ..SEND_TEMPL
    });
    assert!(h.take().is_empty());
    assert!(h.advance(Duration::from_millis(39)).is_empty());
    let out = h.advance(Duration::from_millis(1));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack(), Some(add(s, 10)));
}

#[test]
fn out_of_order_data_is_acked_at_once_with_sack() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(1460),
        sack_permitted: true,
        ..SEND_TEMPL
    });
    let iss = h.take()[0].seq();
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(iss, 1)),
        ..SEND_TEMPL
    });
    let conn = h.stack.tcp_accept(lst).unwrap().unwrap();
    let data = [3u8; 500];
    // Bytes 500..1000 arrive before 0..500.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 501),
        ack_number: Some(add(iss, 1)),
        payload: &data,
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1, "immediate ACK for out-of-order data");
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1)));
    let l = add(REMOTE_SEQ, 501).0;
    assert_eq!(out[0].repr.sack_ranges[0], Some((l, l + 500)));
    // The hole fills: immediate ACK of everything.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(iss, 1)),
        payload: &data,
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1001)));
    assert_eq!(out[0].repr.sack_ranges[0], None);
    let mut buf = [0u8; 2000];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 1000);
}

/// A connection trading small messages reuses the first bytes of its
/// receive buffer: emptied by a read with nothing out of order, the buffer
/// starts over, so it does not walk (and fault in) its whole storage. With
/// out-of-order data stored past the readable end it must not start over.
#[test]
fn an_emptied_receive_buffer_starts_over_unless_data_waits_past_a_hole() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    let data: Vec<u8> = (0..64 * 300).map(|i| (i * 13 % 251) as u8).collect();
    let mut buf = [0u8; 4096];
    for k in 0..200 {
        let part = &data[k * 64..(k + 1) * 64];
        h.send(TcpRepr {
            seq_number: add(REMOTE_SEQ, 1 + k * 64),
            ack_number: Some(our),
            payload: part,
            ..SEND_TEMPL
        });
        assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 64);
        assert_eq!(&buf[..64], part);
        assert_eq!(h.stack.tcp_rx_read_position(conn), Some(0), "message {k}");
    }
    // Bytes 128.. of the next 192 arrive first, then 0..64: reading those
    // empties the buffer while 128..192 wait past the hole.
    let base = 200 * 64;
    let at = |o: usize| TcpRepr {
        seq_number: add(REMOTE_SEQ, 1 + base + o),
        ack_number: Some(our),
        payload: &data[base + o..base + o + 64],
        ..SEND_TEMPL
    };
    h.send(at(128));
    h.send(at(0));
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 64);
    assert_eq!(h.stack.tcp_rx_read_position(conn), Some(64), "a hole: kept");
    h.send(at(64));
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 128);
    assert_eq!(&buf[..128], &data[base + 64..base + 192]);
    assert_eq!(h.stack.tcp_rx_read_position(conn), Some(0));
}

#[test]
fn passive_close_then_last_ack() {
    let mut h = Harness::new();
    let (conn, our_seq) = established_passive(&mut h);
    h.send(TcpRepr {
        control: TcpControl::Fin,
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our_seq),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1, "a FIN is acknowledged at once");
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 2)));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::CloseWait);
    let mut buf = [0u8; 4];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf), Err(RecvError::Finished));
    h.stack.tcp_shutdown(conn).unwrap();
    let out = h.recv();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, TcpControl::Fin);
    assert_eq!(out[0].seq(), our_seq);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::LastAck);
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 2),
        ack_number: Some(add(our_seq, 1)),
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Closed);
    assert_eq!(h.stack.tcp_info(conn).unwrap().error, None);
}

#[test]
fn active_close_through_time_wait() {
    let mut h = Harness::new();
    let (conn, our_seq) = established_passive(&mut h);
    h.stack.close(h.now, conn).unwrap();
    let out = h.recv();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, TcpControl::Fin);
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our_seq, 1)),
        ..SEND_TEMPL
    });
    assert!(h.take().is_empty());
    h.send(TcpRepr {
        control: TcpControl::Fin,
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our_seq, 1)),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 2)));
    // TIME-WAIT holds the socket (the listener is the other one), then frees it.
    assert_eq!(h.stack.socket_count(), 2);
    h.advance(Duration::from_secs(61));
    assert_eq!(h.stack.socket_count(), 1);
    let released: Vec<_> = core::iter::from_fn(|| h.stack.poll_event())
        .filter(|(_, e)| e.contains(Events::RELEASED))
        .collect();
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].0, conn);
}

#[test]
fn nagle_holds_small_writes_until_the_small_one_is_acked() {
    let mut h = Harness::new();
    let (conn, our) = established_passive(&mut h);
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 10)).unwrap();
    assert_eq!(h.recv().len(), 1, "the first small segment goes");
    h.stack.tcp_send(conn, PayloadRef::new(0, 10, 10)).unwrap();
    h.stack.tcp_send(conn, PayloadRef::new(0, 20, 10)).unwrap();
    assert!(h.recv().is_empty(), "later ones wait for its ACK");
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 10)),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1, "then go together");
    assert_eq!(out[0].len(), 20);
    // TCP_NODELAY: every write goes at once.
    h.stack.tcp_set_nodelay(conn, true).unwrap();
    h.stack.tcp_send(conn, PayloadRef::new(0, 30, 5)).unwrap();
    assert_eq!(h.recv().len(), 1);
    h.stack.tcp_send(conn, PayloadRef::new(0, 35, 5)).unwrap();
    assert_eq!(h.recv().len(), 1);
}

/// A peer that shrinks its window behind data we already sent (Linux does
/// when its receive memory runs out: `ICSK_ACK_NOMEM` advertises zero)
/// drops every segment whose sequence number lies past its new right
/// edge, ACK field unread. Our bare ACKs then carry the window's end, not
/// `snd_nxt` (as Linux's `tcp_acceptable_seq`), or the peer never learns
/// what we received and both sides wait for ever: the hang of the shim's
/// `threads_share_sockets` test, where an echo server's full buffers
/// shrank its window.
#[test]
fn acks_stay_inside_a_window_the_peer_shrank() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 4000)).unwrap();
    let sent: usize = h.recv().iter().map(Sent::len).sum();
    assert_eq!(sent, 4000, "the whole send fits the first window");
    // Nothing acknowledged; the right edge moves back to our + 1000.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        window_len: 1000,
        ..SEND_TEMPL
    });
    h.take();
    // The peer's data must be acknowledged with a sequence number its
    // window accepts.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        window_len: 1000,
        payload: &[7u8; 500],
        ..SEND_TEMPL
    });
    let out = h.advance(Duration::from_millis(50));
    let ack = out
        .iter()
        .find(|s| s.ack() == Some(add(REMOTE_SEQ, 501)))
        .expect("the data is acknowledged");
    assert!(
        !seq::gt(ack.seq(), add(our, 1000)),
        "seq {:?} lies past the peer's right edge {:?}",
        ack.seq(),
        add(our, 1000)
    );
    // Once the window opens again, acknowledgements carry snd_nxt.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 501),
        ack_number: Some(add(our, 4000)),
        window_len: 65_535,
        payload: &[8u8; 500],
        ..SEND_TEMPL
    });
    let out = h.advance(Duration::from_millis(50));
    let ack = out
        .iter()
        .find(|s| s.ack() == Some(add(REMOTE_SEQ, 1001)))
        .expect("the data is acknowledged");
    assert_eq!(ack.seq(), add(our, 4000));
}

/// An abort behind a shrunk window: the RST must land inside it too, or
/// the peer ignores it and keeps the connection (Linux's
/// `tcp_send_active_reset` uses the same acceptable sequence number).
#[test]
fn a_reset_stays_inside_a_window_the_peer_shrank() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 4000)).unwrap();
    h.recv();
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        window_len: 1000,
        ..SEND_TEMPL
    });
    h.take();
    h.stack.tcp_abort(conn).unwrap();
    let out = h.recv();
    let rst = out
        .iter()
        .find(|s| s.repr.control == TcpControl::Rst)
        .expect("a reset goes out");
    assert_eq!(rst.seq(), add(our, 1000), "the window's right edge");
}

/// The same shrink with a scaled window, by less than one unit of the
/// peer's scale: Linux (window scale 10 with a large buffer) advertises
/// one unit, 1,024 bytes, after its receive memory ran out, while 1,448
/// bytes are in flight. Its right edge is exact (Linux aligns its window
/// to the scale before it advertises it) and it drops a segment starting
/// 424 bytes past it. Taking such a distance for the scale's rounding
/// deadlocked the shim's `threads_share_sockets` in CI: both sides
/// retransmitted for four minutes, each ignoring the other's ACKs.
#[test]
fn acks_stay_inside_a_scaled_window_shrunk_by_less_than_a_unit() {
    let mut h = Harness::new();
    let (conn, our, _) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(1448),
            window_scale: Some(10),
            ..SEND_TEMPL
        },
    );
    // Open the window wide, then send one segment into it.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        window_len: 64,
        ..SEND_TEMPL
    });
    h.take();
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 1448)).unwrap();
    let sent: usize = h.recv().iter().map(Sent::len).sum();
    assert_eq!(sent, 1448);
    // Nothing acknowledged; one unit of window left: the edge is our + 1024.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        window_len: 1,
        payload: &[7u8; 500],
        ..SEND_TEMPL
    });
    let ack = h
        .advance(Duration::from_millis(50))
        .into_iter()
        .find(|s| s.ack() == Some(add(REMOTE_SEQ, 501)))
        .expect("the data is acknowledged");
    assert_eq!(ack.seq(), add(our, 1024), "inside the peer's right edge");
}
