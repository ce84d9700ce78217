//! Listeners under pressure (issue 34 item 9), as Linux answers: a SYN
//! queue bounded by the backlog, SYN cookies once it is full (RFC 4987
//! §3.6), the connection made from a cookie's ACK with the options the
//! cookie kept, an accept queue that drops what it has no room for, and
//! embryos that give up sooner when the queue fills with old ones.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{ArpOperation, TcpControl, TcpRepr, TcpSeqNumber, TcpTimestamp};

use super::harness::*;
use crate::{State, SynCookies};

/// A SYN from the peer's port `port`, with `t`'s options.
fn syn(port: u16, t: TcpRepr<'static>) -> TcpRepr<'static> {
    TcpRepr {
        src_port: port,
        control: TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: None,
        ..t
    }
}

/// What Linux's SYN carries: MSS 1460, window scale 7, SACK, timestamps.
fn linux_opts() -> TcpRepr<'static> {
    TcpRepr {
        max_seg_size: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        timestamp: Some(TcpTimestamp {
            tsval: 1000,
            tsecr: 0,
        }),
        ..SEND_TEMPL
    }
}

/// `n` SYNs from ports 40000.. that nobody will complete; their SYN-ACKs
/// are taken.
fn half_open(h: &mut Harness, n: u16) {
    for k in 0..n {
        h.send(syn(40_000 + k, linux_opts()));
    }
    let out = h.take();
    assert_eq!(out.len(), usize::from(n), "a SYN-ACK each");
}

/// The peer's ACK completing a handshake from `port` whose SYN-ACK was
/// `sa`, echoing its timestamp and carrying `data`.
fn ack_of<'a>(port: u16, sa: &Sent, data: &'a [u8]) -> TcpRepr<'a> {
    TcpRepr {
        src_port: port,
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(sa.seq(), 1)),
        timestamp: sa.repr.timestamp.map(|t| TcpTimestamp {
            tsval: 1001,
            tsecr: t.tsval,
        }),
        psh: !data.is_empty(),
        payload: data,
        ..SEND_TEMPL
    }
}

/// With its SYN queue full, a listener answers a SYN with a cookie and
/// keeps nothing; the ACK that comes back makes the connection, with the
/// MSS, window scale and SACK the SYN asked for (kept in the cookie and in
/// the low bits of our timestamp, as Linux keeps them), and its data.
#[test]
fn a_full_syn_queue_answers_with_a_cookie_and_its_ack_opens_the_connection() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 4, None).unwrap();
    half_open(&mut h, 4);
    let info = h.stack.tcp_listener_info(lst).unwrap();
    assert_eq!((info.syn_received, info.syn_backlog), (4, 4));
    h.send(syn(REMOTE_PORT, linux_opts()));
    let mut out = h.take();
    assert_eq!(out.len(), 1, "a SYN-ACK: {out:?}");
    let sa = out.remove(0);
    assert_eq!(sa.repr.control, TcpControl::Syn);
    assert_eq!(sa.ack(), Some(add(REMOTE_SEQ, 1)));
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 4);
    assert_eq!(h.stack.stats().tcp_syncookies_sent, 1);
    let ts = sa.repr.timestamp.expect("timestamps kept");
    assert_eq!(ts.tsecr, 1000);
    assert_eq!(
        ts.tsval & 0x3f,
        7 | 0x10,
        "window scale 7 and SACK in the timestamp"
    );
    assert!(sa.repr.sack_permitted && sa.repr.window_scale.is_some());
    assert_eq!(sa.repr.max_seg_size, Some(1460));

    h.now += Duration::from_millis(1);
    h.send(ack_of(REMOTE_PORT, &sa, b"hello"));
    let conn = h
        .stack
        .tcp_accept(lst)
        .unwrap()
        .expect("the cookie's connection");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.state, State::Established);
    assert!(info.sack && info.timestamps, "{info:?}");
    assert_eq!(info.wscale.map(|(_, peer)| peer), Some(7));
    assert_eq!(info.wscale.map(|(ours, _)| ours), sa.repr.window_scale);
    assert_eq!(info.snd_mss, 1448, "1460 less the timestamps");
    let mut buf = [0u8; 16];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(h.stack.stats().tcp_syncookies_recv, 1);
    // What we send next carries a timestamp no older than the SYN-ACK's
    // (the peer's PAWS) and follows the cookie's sequence numbers.
    h.stack
        .tcp_send(conn, crate::PayloadRef::new(0, 0, 10))
        .unwrap();
    let out = h.recv();
    let seg = out.last().expect("data goes");
    assert_eq!(seg.seq(), add(sa.seq(), 1));
    assert_eq!(seg.ack(), Some(add(REMOTE_SEQ, 6)));
    let t = seg.repr.timestamp.expect("timestamps");
    assert!(
        t.tsval.wrapping_sub(ts.tsval) < 1 << 31,
        "{t:?} after {ts:?}"
    );
    assert_eq!(t.tsecr, 1001);
}

/// A SYN without timestamps leaves the cookie nowhere to keep window
/// scaling and SACK: the SYN-ACK offers neither (as Linux's), and the MSS
/// is the largest of the cookie's table not above the peer's.
#[test]
fn a_cookie_without_timestamps_keeps_only_the_mss() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 1, None).unwrap();
    half_open(&mut h, 1);
    let opts = TcpRepr {
        max_seg_size: Some(1400),
        window_scale: Some(7),
        sack_permitted: true,
        ..SEND_TEMPL
    };
    h.send(syn(REMOTE_PORT, opts));
    let sa = h.take().remove(0);
    assert_eq!(h.stack.stats().tcp_syncookies_sent, 1);
    assert_eq!(
        (
            sa.repr.window_scale,
            sa.repr.sack_permitted,
            sa.repr.timestamp
        ),
        (None, false, None)
    );
    h.send(ack_of(REMOTE_PORT, &sa, &[]));
    let conn = h.stack.tcp_accept(lst).unwrap().expect("connected");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (info.sack, info.timestamps, info.wscale, info.snd_mss),
        (false, false, None, 1300)
    );
}

/// An ACK whose cookie does not check — a wrong number, another ISN, or a
/// cookie past its two minutes — is reset and counted; one that comes
/// when no cookie went out lately is reset without being checked.
#[test]
fn a_forged_or_stale_cookie_is_reset() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 1, None).unwrap();
    let rst_seqs = |h: &mut Harness| -> Vec<TcpSeqNumber> {
        h.take()
            .iter()
            .filter(|s| s.repr.control == TcpControl::Rst)
            .map(Sent::seq)
            .collect()
    };
    // No cookie sent yet: an ACK from nowhere is reset, not checked.
    let stray = TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(TcpSeqNumber(12_345)),
        ..SEND_TEMPL
    };
    h.send(stray);
    assert_eq!(rst_seqs(&mut h), [TcpSeqNumber(12_345)]);
    assert_eq!(h.stack.stats().tcp_syncookies_failed, 0);

    half_open(&mut h, 1);
    h.send(syn(REMOTE_PORT, linux_opts()));
    h.send(syn(REMOTE_PORT + 1, linux_opts()));
    let sas = h.take();
    assert_eq!(sas.len(), 2);
    let (sa, sa2) = (&sas[0], &sas[1]);
    let wrong = TcpRepr {
        ack_number: Some(add(sa.seq(), 2)),
        ..ack_of(REMOTE_PORT, sa, &[])
    };
    h.send(wrong);
    let other_isn = TcpRepr {
        seq_number: add(REMOTE_SEQ, 2),
        ..ack_of(REMOTE_PORT, sa, &[])
    };
    h.send(other_isn);
    assert_eq!(rst_seqs(&mut h).len(), 2);
    assert_eq!(h.stack.stats().tcp_syncookies_failed, 2);
    assert_eq!(h.stack.tcp_accept(lst).unwrap(), None);

    // A minute later the first cookie still opens its connection.
    h.now += Duration::from_secs(60);
    h.send(ack_of(REMOTE_PORT, sa, &[]));
    assert!(
        h.stack.tcp_accept(lst).unwrap().is_some(),
        "valid for a minute"
    );
    // Past two minutes the second does not (cookies were sent meanwhile,
    // so it is checked).
    h.now += Duration::from_secs(40);
    h.send(syn(REMOTE_PORT + 2, linux_opts()));
    h.send(syn(REMOTE_PORT + 3, linux_opts()));
    // (The peer's address went stale meanwhile: it answers the ARP.)
    h.arp(ArpOperation::Reply, REMOTE_IP, LOCAL_IP);
    assert_eq!(h.take().len(), 2);
    // (The half-open handshake still holds the queue: nothing polled it.)
    assert_eq!(h.stack.stats().tcp_syncookies_sent, 4);
    h.now += Duration::from_secs(30);
    h.send(ack_of(REMOTE_PORT + 1, sa2, &[]));
    assert_eq!(rst_seqs(&mut h).len(), 1, "stale after 130 s");
    assert_eq!(h.stack.stats().tcp_syncookies_failed, 3);
    assert_eq!(h.stack.stats().tcp_syncookies_recv, 1);
}

/// A full accept queue (one more than the backlog, as Linux's
/// `sk_acceptq_is_full`) drops SYNs and cookie ACKs alike, silently — no
/// connection is made, nothing is reset — so the client's retransmission
/// succeeds once the program accepts.
#[test]
fn a_full_accept_queue_drops_syns_and_cookie_acks() {
    let mut cfg = config();
    cfg.syncookies = SynCookies::Always;
    let mut h = Harness::with_config(cfg);
    let lst = h.stack.tcp_listen(local(), 1, None).unwrap();
    for k in 0..3 {
        h.send(syn(REMOTE_PORT + k, linux_opts()));
    }
    let sas = h.take();
    assert_eq!(sas.len(), 3);
    assert_eq!(h.stack.stats().tcp_syncookies_sent, 3);
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 0);
    h.send(ack_of(REMOTE_PORT, &sas[0], &[]));
    h.send(ack_of(REMOTE_PORT + 1, &sas[1], &[]));
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().queued, 2);
    // Full: the third ACK is dropped, and so is a new SYN.
    h.send(ack_of(REMOTE_PORT + 2, &sas[2], &[]));
    h.send(syn(REMOTE_PORT + 3, linux_opts()));
    assert!(h.take().is_empty(), "nothing answers");
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().queued, 2);
    assert_eq!(h.stack.stats().tcp_listen_overflows, 2);
    assert_eq!(
        h.stack.stats().tcp_syncookies_recv,
        3,
        "the third was checked, then dropped"
    );
    // The program accepts one; the third client's ACK comes again.
    assert!(h.stack.tcp_accept(lst).unwrap().is_some());
    h.now += Duration::from_millis(200);
    h.send(ack_of(REMOTE_PORT + 2, &sas[2], &[]));
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().queued, 2);
}

/// A handshake nobody completes holds its place for Linux's five SYN-ACK
/// retransmissions (1, 3, 7, 15, 31 s) and is given up at 63 s.
#[test]
fn a_half_open_handshake_gives_up_after_five_synack_retries() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 16, None).unwrap();
    half_open(&mut h, 1);
    let mut at = Vec::new();
    for s in 1..=70 {
        if !h.advance(Duration::from_secs(1)).is_empty() {
            at.push(s);
        }
    }
    assert_eq!(at, [1, 3, 7, 15, 31]);
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 0);
    assert_eq!(
        h.stack.stats().tcp_timeouts,
        0,
        "not a connection timing out"
    );
}

/// A SYN queue more than half full of old handshakes (none young enough
/// to have had only its first SYN-ACK) gives them two retransmissions,
/// not five, as Linux's `reqsk_timer_handler` ("abort old ones without
/// pity"): a flood's spoofed SYNs leave until the queue is half empty in
/// 7 s, not 63, and the next SYNs find room. A queue with room keeps its
/// handshakes the whole time.
#[test]
fn old_handshakes_in_a_crowded_queue_give_up_sooner() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 16, None).unwrap();
    half_open(&mut h, 16);
    for _ in 0..69 {
        h.advance(Duration::from_millis(100));
    }
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 16);
    for _ in 0..6 {
        h.advance(Duration::from_millis(100));
    }
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 8);
    h.send(syn(REMOTE_PORT, linux_opts()));
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 9);
    assert_eq!(h.stack.stats().tcp_syncookies_sent, 0);

    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 16, None).unwrap();
    half_open(&mut h, 8);
    for _ in 0..32 {
        h.advance(Duration::from_secs(1));
    }
    assert_eq!(h.stack.tcp_listener_info(lst).unwrap().syn_received, 8);
}

/// The backlog a listener asks for is capped at `somaxconn` (Linux's
/// 4096), and its SYN queue at the smaller of that and `max_syn_backlog`.
#[test]
fn the_backlog_is_capped_as_linux_caps_it() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 100_000, None).unwrap();
    let info = h.stack.tcp_listener_info(lst).unwrap();
    assert_eq!((info.backlog, info.syn_backlog), (4096, 1024));
    let small = h
        .stack
        .tcp_listen(crate::Endpoint::new(LOCAL_IP, 81), 10, None)
        .unwrap();
    let info = h.stack.tcp_listener_info(small).unwrap();
    assert_eq!((info.backlog, info.syn_backlog), (10, 10));
}
