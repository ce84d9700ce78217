//! TIME-WAIT keeps only what TIME-WAIT needs (issue 35 item 5): a
//! connection there gives its storage — receive ring, send queue, ranges,
//! transmit log — back when it enters (to the kept closed sockets, or to
//! the allocator), and still answers on the wire as it did with them: the
//! re-ACK of a retransmitted FIN with the window it advertised and the
//! timestamps PAWS needs, old and out-of-window segments, RSTs, a new SYN
//! for its four-tuple, the end of its timer.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestamp};

use super::harness::*;
use crate::{Events, RecvError, SocketHandle, State};

/// The peer's first timestamp.
const TS0: u32 = 1_000;

fn ts(tsval: u32, tsecr: u32) -> Option<TcpTimestamp> {
    Some(TcpTimestamp { tsval, tsecr })
}

/// A connection the peer opened to our listener with timestamps, window
/// scaling and SACK; the listener stays. Returns the connection, the
/// listener, our next sequence number and our first timestamp.
fn open(h: &mut Harness) -> (SocketHandle, SocketHandle, TcpSeqNumber, Sent) {
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        timestamp: ts(TS0, 0),
        ..SEND_TEMPL
    });
    let mut out = h.take();
    assert_eq!(out.len(), 1, "one SYN-ACK: {out:?}");
    let sa = out.remove(0);
    let our = add(sa.seq(), 1);
    h.now += HANDSHAKE_RTT;
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        timestamp: ts(TS0 + 1, sa.repr.timestamp.unwrap().tsval),
        ..SEND_TEMPL
    });
    let conn = h.stack.tcp_accept(lst).unwrap().expect("accepted");
    (conn, lst, our, sa)
}

/// The peer's segment at `seq` (from `REMOTE_SEQ + 1`) acknowledging `ack`.
fn seg(
    seq: usize,
    ack: TcpSeqNumber,
    tsval: u32,
    control: TcpControl,
    payload: &'static [u8],
) -> TcpRepr<'static> {
    TcpRepr {
        control,
        seq_number: add(REMOTE_SEQ, 1 + seq),
        ack_number: Some(ack),
        window_len: 512,
        timestamp: ts(tsval, 0),
        payload,
        ..SEND_TEMPL
    }
}

static DATA: [u8; 3000] = [5u8; 3000];

/// Data both ways' worth of a connection (the peer's 3000 bytes read,
/// 2000 of ours acknowledged), then we close first: FIN, the peer's
/// ACK and FIN in one segment, TIME-WAIT. Returns the connection, the
/// listener, our next sequence number (after our FIN) and our ACK of the
/// peer's FIN.
fn to_time_wait(h: &mut Harness) -> (SocketHandle, SocketHandle, TcpSeqNumber, Sent) {
    to_time_wait_batched(h, false)
}

/// [`to_time_wait`], the peer's FIN taken in a receive batch if `batch`
/// (its ACK goes at the batch's end, after the storage went).
fn to_time_wait_batched(
    h: &mut Harness,
    batch: bool,
) -> (SocketHandle, SocketHandle, TcpSeqNumber, Sent) {
    let (conn, lst, our, _) = open(h);
    h.send(seg(0, our, TS0 + 2, TcpControl::None, &DATA[..1460]));
    h.send(seg(1460, our, TS0 + 2, TcpControl::None, &DATA[1460..]));
    let mut buf = [0u8; 4000];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 3000);
    h.stack
        .tcp_send(conn, crate::PayloadRef::new(0, 0, 2000))
        .unwrap();
    let out = h.recv();
    assert_eq!(out.iter().map(Sent::len).sum::<usize>(), 2000);
    h.send(seg(3000, add(our, 2000), TS0 + 3, TcpControl::None, &[]));
    assert!(
        h.stack.tcp_storage_bytes(conn).unwrap() > 256 << 10,
        "open, it holds its ring"
    );
    h.stack.close(h.now, conn).unwrap();
    let fin = h.recv();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].repr.control, TcpControl::Fin);
    h.now += Duration::from_millis(1);
    if batch {
        h.stack.begin_batch();
    }
    h.send(seg(3000, add(our, 2001), TS0 + 4, TcpControl::Fin, &[]));
    if batch {
        assert!(h.take().is_empty(), "answered at the batch's end");
        h.stack.end_batch(h.now, &mut h.dev);
    }
    let mut out = h.take();
    assert_eq!(out.len(), 1, "the FIN is acknowledged: {out:?}");
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::TimeWait);
    (conn, lst, add(our, 2001), out.remove(0))
}

/// Whether `s` is a bare ACK of everything up to the peer's FIN.
fn is_ack_of_fin(s: &Sent) -> bool {
    s.repr.control == TcpControl::None
        && s.ack() == Some(add(REMOTE_SEQ, 3002))
        && s.payload.is_empty()
}

#[test]
fn time_wait_holds_no_storage_and_re_acks_a_fin_as_before() {
    let mut h = Harness::new();
    let (conn, _lst, our, ack1) = to_time_wait(&mut h);
    assert!(is_ack_of_fin(&ack1), "{ack1:?}");
    assert_eq!(ack1.seq(), our);
    // 256 KiB, scaled by 3: the whole (empty) buffer.
    assert_eq!(ack1.repr.window_len, 32_768);
    let ts1 = ack1.repr.timestamp.expect("timestamps on");
    assert_eq!(ts1.tsecr, TS0 + 4, "echoes the FIN's");

    // Only what TIME-WAIT needs.
    assert_eq!(h.stack.tcp_storage_bytes(conn), Some(0));
    let m = h.stack.tcp_memory();
    assert_eq!((m.connections, m.time_wait, m.held), (1, 1, 0));
    assert!(m.kept_bytes >= 256 << 10, "kept for the next: {m:?}");
    // What the program and `softoe stat` read of it.
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.recv_queue, info.send_queue), (0, 0));
    assert_eq!(info.rcv_wnd, 32_768 << 3);
    assert_eq!(info.bytes_acked, 2000);
    assert_eq!(info.bytes_received, 3000);
    assert_eq!(h.stack.tcp_send_space(conn).unwrap(), 0);

    // The peer's FIN again (our ACK was lost): the same ACK, the clock
    // moved on, the timestamp to echo still the FIN's (an old segment
    // does not update TS.Recent).
    h.advance(Duration::from_secs(30));
    h.send(seg(3000, our, TS0 + 5, TcpControl::Fin, &[]));
    let out = h.take();
    assert_eq!(out.len(), 1, "{out:?}");
    let ack2 = &out[0];
    assert!(is_ack_of_fin(ack2), "{ack2:?}");
    assert_eq!(ack2.seq(), our);
    assert_eq!(ack2.repr.window_len, ack1.repr.window_len);
    assert_eq!(ack2.repr.sack_ranges, [None; 4]);
    assert_eq!(ack2.repr.timestamp, ts(ts1.tsval + 30_000, TS0 + 4));

    // Old data: a duplicate ACK, D-SACKing it, same window.
    h.send(seg(0, our, TS0 + 6, TcpControl::None, &DATA[..100]));
    let out = h.take();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(is_ack_of_fin(&out[0]), "{out:?}");
    assert_eq!(out[0].repr.window_len, ack1.repr.window_len);
    let dsack = (add(REMOTE_SEQ, 1).0, add(REMOTE_SEQ, 101).0);
    assert_eq!(out[0].repr.sack_ranges[0], Some(dsack));
    // Far beyond the window: an ACK, nothing else.
    h.send(seg(5 << 20, our, TS0 + 7, TcpControl::None, &DATA[..100]));
    let out = h.take();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(is_ack_of_fin(&out[0]), "{out:?}");
    assert_eq!(out[0].repr.window_len, ack1.repr.window_len);
    // Data at the window's edge: ignored, silently (only a FIN is
    // answered), but its timestamp is the one to echo from now on.
    h.send(seg(3001, our, TS0 + 8, TcpControl::None, &DATA[..100]));
    assert!(h.recv().is_empty());
    // PAWS: an older timestamp than that is answered with an ACK.
    h.send(seg(3001, our, TS0 + 7, TcpControl::None, &DATA[..100]));
    let out = h.take();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(is_ack_of_fin(&out[0]), "{out:?}");
    assert_eq!(out[0].repr.window_len, ack1.repr.window_len);
    assert_eq!(out[0].repr.timestamp.map(|t| t.tsecr), Some(TS0 + 8));
    assert_eq!(h.stack.tcp_storage_bytes(conn), Some(0), "nothing grew");

    // 2 MSL from the last FIN: gone, and told.
    h.advance(Duration::from_secs(59));
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::TimeWait);
    h.advance(Duration::from_secs(2));
    assert!(h.stack.tcp_state(conn).is_err(), "released");
    let mut buf = [0u8; 16];
    assert_eq!(
        h.stack.tcp_recv(conn, &mut buf),
        Err(RecvError::InvalidHandle)
    );
    let released: Vec<_> = core::iter::from_fn(|| h.stack.poll_event())
        .filter(|(_, e)| e.contains(Events::RELEASED))
        .collect();
    assert_eq!(released, [(conn, Events::RELEASED)]);
    let m = h.stack.tcp_memory();
    assert_eq!((m.connections, m.time_wait, m.held), (0, 0, 0));
}

/// In a receive batch the FIN's ACK goes after the storage went (at the
/// batch's end): the same ACK.
#[test]
fn in_a_batch_the_fin_is_acknowledged_the_same() {
    let mut plain = Harness::new();
    let (_, _, _, want) = to_time_wait(&mut plain);
    let mut h = Harness::new();
    let (conn, _lst, _, got) = to_time_wait_batched(&mut h, true);
    assert_eq!(h.stack.tcp_storage_bytes(conn), Some(0));
    assert_eq!(got, want);
}

#[test]
fn a_reset_in_time_wait_ends_it_as_before() {
    let mut h = Harness::new();
    let (conn, _lst, our, ack1) = to_time_wait(&mut h);
    assert_eq!(h.stack.tcp_storage_bytes(conn), Some(0));
    // In the window but not at its edge: a challenge ACK, same window.
    h.send(seg(3010, our, TS0 + 5, TcpControl::Rst, &[]));
    let out = h.take();
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(is_ack_of_fin(&out[0]), "{out:?}");
    assert_eq!(out[0].repr.window_len, ack1.repr.window_len);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::TimeWait);
    // At it: TIME-WAIT ends, the socket goes (nobody holds it).
    h.send(seg(3001, our, TS0 + 6, TcpControl::Rst, &[]));
    assert!(h.recv().is_empty());
    assert!(h.stack.tcp_state(conn).is_err(), "released");
    assert_eq!(h.stack.socket_count(), 1, "the listener is left");
}

#[test]
fn a_new_syn_reopens_a_time_wait_connection_in_its_own_storage() {
    let mut h = Harness::new();
    let (conn, lst, _our, _) = to_time_wait(&mut h);
    let full = h.stack.tcp_memory().kept_bytes;
    assert!(full >= 256 << 10, "its storage is kept");
    // A new incarnation, above the old one's sequence space (RFC 6191).
    h.now += Duration::from_secs(1);
    let new_isn = add(REMOTE_SEQ, 100_000);
    h.send(TcpRepr {
        control: TcpControl::Syn,
        seq_number: new_isn,
        max_seg_size: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        timestamp: ts(TS0 + 10, 0),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1, "a SYN-ACK: {out:?}");
    let sa = &out[0];
    assert_eq!(sa.repr.control, TcpControl::Syn);
    assert_eq!(sa.ack(), Some(add(new_isn, 1)));
    assert_eq!(sa.repr.window_len, 65_535, "a whole buffer's window");
    assert_eq!(sa.repr.window_scale, Some(3));
    assert!(h.stack.tcp_state(conn).is_err(), "the old one is gone");
    h.send(TcpRepr {
        seq_number: add(new_isn, 1),
        ack_number: Some(add(sa.seq(), 1)),
        timestamp: ts(TS0 + 11, sa.repr.timestamp.unwrap().tsval),
        ..SEND_TEMPL
    });
    let c2 = h.stack.tcp_accept(lst).unwrap().expect("the new one");
    assert_eq!(h.stack.tcp_state(c2).unwrap(), State::Established);
    // In the old one's storage.
    let m = h.stack.tcp_memory();
    assert_eq!(m.held, h.stack.tcp_storage_bytes(c2).unwrap());
    assert!(m.held >= 256 << 10);
    assert_eq!(m.kept_bytes, 0, "taken: {m:?}");
    h.send(TcpRepr {
        seq_number: add(new_isn, 1),
        ack_number: Some(add(sa.seq(), 1)),
        timestamp: ts(TS0 + 12, sa.repr.timestamp.unwrap().tsval),
        payload: &DATA[..100],
        ..SEND_TEMPL
    });
    let mut buf = [0u8; 200];
    assert_eq!(h.stack.tcp_recv(c2, &mut buf).unwrap(), 100);
}

/// Bytes the program has not read when TIME-WAIT begins are its own
/// still: the ring goes only once they are read, and the windows after
/// it are the ring's.
#[test]
fn unread_bytes_keep_the_ring_until_they_are_read() {
    // Less than a segment read: the window's edge does not move
    // (receiver-side SWS avoidance).
    let unread = |n: usize| (262_144 - n as u32).div_ceil(8) as u16;
    assert_eq!(read_in_time_wait(300), (unread(300), unread(300)));
    // More: it moves to the whole buffer, as it did with the ring there.
    assert_eq!(read_in_time_wait(3000), (unread(3000), 32_768));
}

/// A connection half-closed by us, then `n` bytes and the FIN from the
/// peer, unread: TIME-WAIT. The windows of its re-ACKs of the FIN before
/// and after the program reads them.
fn read_in_time_wait(n: usize) -> (u16, u16) {
    let mut h = Harness::new();
    let (conn, _lst, our, _) = open(&mut h);
    h.stack.tcp_shutdown(conn).unwrap();
    let fin = h.recv();
    assert_eq!(fin[0].repr.control, TcpControl::Fin);
    let our = add(our, 1);
    for at in (0..n).step_by(1460) {
        let end = (at + 1460).min(n);
        h.send(seg(at, our, TS0 + 2, TcpControl::None, &DATA[at..end]));
    }
    h.send(seg(n, our, TS0 + 3, TcpControl::Fin, &[]));
    let fin_ack = Some(add(REMOTE_SEQ, n + 2));
    let out = h.take();
    assert_eq!(out.last().unwrap().ack(), fin_ack);
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::TimeWait);
    let held = h.stack.tcp_storage_bytes(conn).unwrap();
    assert!(held >= 256 << 10, "the ring holds unread bytes");
    // The FIN again, before the read.
    h.now += Duration::from_secs(1);
    h.send(seg(n, our, TS0 + 4, TcpControl::Fin, &[]));
    let before = h.take();
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].ack(), fin_ack);
    let mut buf = [0u8; 4000];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), n);
    assert!(buf[..n].iter().all(|&b| b == 5));
    assert_eq!(h.stack.tcp_storage_bytes(conn), Some(0), "read: gone");
    assert_eq!(h.stack.tcp_recv(conn, &mut buf), Err(RecvError::Finished));
    assert_eq!(h.stack.tcp_peek(conn, &mut buf), Err(RecvError::Finished));
    assert_eq!(
        h.stack.tcp_recv_with(conn, |a, b| (a.len() + b.len(), ())),
        Err(RecvError::Finished)
    );
    assert!(
        h.stack.readiness(conn).unwrap().contains(Events::READABLE),
        "end of stream is readable"
    );
    // And after.
    h.now += Duration::from_secs(1);
    h.send(seg(n, our, TS0 + 5, TcpControl::Fin, &[]));
    let after = h.take();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].ack(), fin_ack);
    // The program closes: the socket goes at the end of TIME-WAIT.
    h.stack.close(h.now, conn).unwrap();
    assert!(h.recv().is_empty());
    h.advance(Duration::from_secs(61));
    assert!(h.stack.tcp_state(conn).is_err());
    (before[0].repr.window_len, after[0].repr.window_len)
}

/// With no room among the kept sockets, TIME-WAIT's storage goes back to
/// the allocator.
#[test]
fn without_room_to_keep_it_the_storage_is_freed() {
    let mut cfg = config();
    cfg.keep_closed = 0;
    let mut h = Harness::with_config(cfg);
    let (conn, _lst, our, ack1) = to_time_wait(&mut h);
    let m = h.stack.tcp_memory();
    assert_eq!((m.held, m.kept, m.kept_bytes), (0, 0, 0), "{m:?}");
    h.advance(Duration::from_secs(10));
    h.send(seg(3000, our, TS0 + 5, TcpControl::Fin, &[]));
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.window_len, ack1.repr.window_len);
    h.advance(Duration::from_secs(61));
    assert!(h.stack.tcp_state(conn).is_err());
}
