//! The bug classes fuzzers found in smoltcp, each a test: a zero MSS, an
//! ISN of 0xFFFF_FFFF that wraps, SYN-RECEIVED accepting an ACK one too
//! low, SYN-SENT accepting a segment that is not a SYN-ACK, one bad segment
//! aborting a connection, an ARP cache filled by random frames, a window
//! that underflows when data arrives past it. (Challenge ACKs without a
//! rate limit, the eighth, are tested with resets in `tcp_rst`.)

use core::time::Duration;

use softoe_wire::{ArpOperation, Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber};

use super::harness::*;
use crate::{PayloadRef, State};

#[test]
fn zero_mss_does_not_hang_or_divide_by_zero() {
    let mut h = Harness::new();
    let (conn, _, _) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(0),
            ..SEND_TEMPL
        },
    );
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.snd_mss, 88, "clamped to the configured floor");
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 1000)).unwrap();
    let out = h.recv();
    assert!(!out.is_empty());
    assert!(out.iter().all(|s| s.len() <= 88));
}

#[test]
fn peer_isn_at_the_wrap_point() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    let isn = TcpSeqNumber(u32::MAX);
    h.send(TcpRepr {
        control: TcpControl::Syn,
        seq_number: isn,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    let sa = h.take().remove(0);
    assert_eq!(sa.ack(), Some(TcpSeqNumber(0)), "ISN + 1 wraps to 0");
    h.send(TcpRepr {
        seq_number: TcpSeqNumber(0),
        ack_number: Some(add(sa.seq(), 1)),
        ..SEND_TEMPL
    });
    let conn = h.stack.tcp_accept(lst).unwrap().unwrap();
    let data = [7u8; 3000];
    h.send(TcpRepr {
        seq_number: TcpSeqNumber(0),
        ack_number: Some(add(sa.seq(), 1)),
        payload: &data[..1460],
        ..SEND_TEMPL
    });
    h.send(TcpRepr {
        seq_number: TcpSeqNumber(1460),
        ack_number: Some(add(sa.seq(), 1)),
        payload: &data[1460..],
        ..SEND_TEMPL
    });
    let mut buf = [0u8; 4000];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 3000);
    let out = h.take();
    assert_eq!(out.last().unwrap().ack(), Some(TcpSeqNumber(3000)));
}

#[test]
fn syn_received_rejects_an_ack_one_too_low() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        ..SEND_TEMPL
    });
    let iss = h.take()[0].seq();
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(iss),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].repr.control,
        TcpControl::Rst,
        "unacceptable ACK in SYN-RECEIVED: RST"
    );
    assert_eq!(out[0].seq(), iss);
    assert_eq!(h.stack.tcp_accept(lst).unwrap(), None, "not established");
}

#[test]
fn syn_sent_ignores_a_plain_ack() {
    let mut h = Harness::new();
    let (conn, syn) = connect(&mut h);
    let iss = syn.seq();
    h.send(TcpRepr {
        ack_number: Some(add(iss, 1)),
        ..SEND_TEMPL
    });
    assert_eq!(
        h.stack.tcp_state(conn).unwrap(),
        State::SynSent,
        "an ACK without SYN does not establish"
    );
}

#[test]
fn one_bad_segment_does_not_abort() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    let junk = [0u8; 100];
    for bad in [
        TcpRepr {
            seq_number: add(REMOTE_SEQ, 5_000_000),
            ack_number: Some(our),
            payload: &junk,
            ..SEND_TEMPL
        },
        TcpRepr {
            seq_number: add(REMOTE_SEQ, 1),
            ack_number: Some(add(our, 1_000_000)),
            ..SEND_TEMPL
        },
        TcpRepr {
            seq_number: add(REMOTE_SEQ, 1),
            ack_number: Some(TcpSeqNumber(our.0.wrapping_sub(2_000_000_000))),
            ..SEND_TEMPL
        },
        TcpRepr {
            control: TcpControl::Syn,
            seq_number: add(REMOTE_SEQ, 7),
            ..SEND_TEMPL
        },
        TcpRepr {
            seq_number: add(REMOTE_SEQ, 1),
            ack_number: None,
            payload: &junk,
            ..SEND_TEMPL
        },
    ] {
        h.send(bad);
        h.take();
        assert_eq!(
            h.stack.tcp_state(conn).unwrap(),
            State::Established,
            "{bad:?}"
        );
    }
    // And a frame that is not even TCP-shaped.
    let mut frame = Harness::frame(&TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        ..SEND_TEMPL
    });
    frame[14 + 20 + 12] = 0x10; // data offset 4: impossible
    h.send_raw(&frame, crate::RxMeta::default());
    assert_eq!(h.stack.tcp_state(conn).unwrap(), State::Established);
    assert!(h.stack.stats().rx_malformed >= 1);
}

#[test]
fn random_arp_cannot_fill_the_cache() {
    let mut h = Harness::new();
    let before = h.stack.arp_cache_len();
    for i in 0..5000u32 {
        // Requests between other hosts: none is for us, none may be learned.
        let src = Ipv4Address::from_bits(0x0a00_1000 + i);
        let dst = Ipv4Address::from_bits(0x0a00_2000 + i);
        h.arp(ArpOperation::Request, src, dst);
        h.arp(ArpOperation::Reply, src, dst);
    }
    assert_eq!(h.stack.arp_cache_len(), before);
    assert!(h.other.is_empty(), "and none is answered");
}

#[test]
fn data_past_the_window_is_trimmed_not_underflowed() {
    let mut cfg = config();
    cfg.tcp.rx_buffer = 4096;
    let mut h = Harness::with_config(cfg);
    let (conn, our) = open_plain(&mut h);
    let data = [3u8; 3000];
    // Straddles the right edge: 4000..7000 of a 4096-byte window.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 4001),
        ack_number: Some(our),
        payload: &data,
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    let sent = h.stack.tcp_info(conn).unwrap();
    assert_eq!(sent.bytes_received, 0);
    // Entirely past it: dropped with an ACK.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 9001),
        ack_number: Some(our),
        payload: &data,
        ..SEND_TEMPL
    });
    assert_eq!(h.take().len(), 1);
    // Fill the start: only what fits the buffer becomes readable.
    let fill = [4u8; 4000];
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        payload: &fill,
        ..SEND_TEMPL
    });
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        info.bytes_received, 4096,
        "4000 in order + 96 held past them"
    );
    let mut buf = [0u8; 8192];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 4096);
    assert!(buf[..4000].iter().all(|&b| b == 4) && buf[4000..4096].iter().all(|&b| b == 3));
    h.advance(Duration::from_millis(100));
}
