//! Option negotiation, MSS clamping, PAWS.

use softoe_wire::{TcpRepr, TcpTimestamp};

use super::harness::*;
use crate::PayloadRef;

#[test]
fn window_scale_negotiated_only_when_both_offer() {
    let mut h = Harness::new();
    let (conn, _, sa) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(1460),
            window_scale: Some(7),
            ..SEND_TEMPL
        },
    );
    let ours = sa.repr.window_scale.expect("answered with our shift");
    assert_eq!(ours, 3, "256 KiB buffer needs a shift of 3");
    assert_eq!(h.stack.tcp_info(conn).unwrap().wscale, Some((3, 7)));

    let mut h = Harness::new();
    let (conn, _, sa) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(1460),
            ..SEND_TEMPL
        },
    );
    assert_eq!(sa.repr.window_scale, None);
    assert_eq!(h.stack.tcp_info(conn).unwrap().wscale, None);
    // Unscaled, the window is capped at 65535.
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 1)).unwrap();
    let out = h.recv();
    assert_eq!(out[0].repr.window_len, 65_535);
}

#[test]
fn peer_window_is_scaled() {
    let mut h = Harness::new();
    let (conn, our, _) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(1460),
            window_scale: Some(4),
            ..SEND_TEMPL
        },
    );
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        window_len: 1000,
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_info(conn).unwrap().snd_wnd, 16_000);
}

#[test]
fn sack_negotiated_only_when_offered() {
    let mut h = Harness::new();
    let (conn, _, sa) = open_passive(
        &mut h,
        TcpRepr {
            sack_permitted: true,
            ..SEND_TEMPL
        },
    );
    assert!(sa.repr.sack_permitted);
    assert!(h.stack.tcp_info(conn).unwrap().sack);
    let mut h = Harness::new();
    let (conn, _, sa) = open_passive(&mut h, SEND_TEMPL);
    assert!(!sa.repr.sack_permitted);
    assert!(!h.stack.tcp_info(conn).unwrap().sack);
}

#[test]
fn sack_off_locally_is_not_offered() {
    let mut cfg = config();
    cfg.tcp.sack = false;
    cfg.tcp.timestamps = false;
    cfg.tcp.window_scaling = false;
    let mut h = Harness::with_config(cfg);
    let (_, _, sa) = open_passive(
        &mut h,
        TcpRepr {
            sack_permitted: true,
            window_scale: Some(7),
            timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 0 }),
            ..SEND_TEMPL
        },
    );
    assert!(!sa.repr.sack_permitted);
    assert_eq!(sa.repr.window_scale, None);
    assert_eq!(sa.repr.timestamp, None);
}

#[test]
fn mss_is_clamped_and_peer_mss_honoured() {
    let mut cfg = config();
    cfg.tcp.mss_clamp = Some(1000);
    let mut h = Harness::with_config(cfg);
    let (conn, _, sa) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(1460),
            ..SEND_TEMPL
        },
    );
    assert_eq!(sa.repr.max_seg_size, Some(1000), "we announce the clamp");
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 2500)).unwrap();
    let lens: alloc::vec::Vec<usize> = h.recv().iter().map(|s| s.len()).collect();
    assert_eq!(lens, [1000, 1000, 500]);

    // A peer that announces no MSS gets 536 (RFC 9293 §3.7.1).
    let mut h = Harness::new();
    let (conn, _, _) = open_passive(&mut h, SEND_TEMPL);
    assert_eq!(h.stack.tcp_info(conn).unwrap().snd_mss, 536);
    // A small announced MSS is honoured.
    let mut h = Harness::new();
    let (conn, _, _) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(300),
            ..SEND_TEMPL
        },
    );
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 700)).unwrap();
    let lens: alloc::vec::Vec<usize> = h.recv().iter().map(|s| s.len()).collect();
    assert_eq!(lens, [300, 300, 100]);
}

#[test]
fn timestamps_echo_and_paws_drops_old_segments() {
    let mut h = Harness::new();
    let ts = |v: u32| Some(TcpTimestamp { tsval: v, tsecr: 0 });
    let (conn, our, sa) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(1460),
            timestamp: ts(100),
            ..SEND_TEMPL
        },
    );
    assert_eq!(
        sa.repr.timestamp.unwrap().tsecr,
        100,
        "the SYN-ACK echoes TSval"
    );
    assert_eq!(h.stack.tcp_info(conn).unwrap().snd_mss, 1460 - 12);
    let data = [1u8; 50];
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        timestamp: ts(200),
        payload: &data,
        ..SEND_TEMPL
    });
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 1)).unwrap();
    let out = h.recv();
    assert_eq!(
        out[0].repr.timestamp.unwrap().tsecr,
        200,
        "TS.Recent echoed"
    );
    // An old timestamp (a wrapped-around duplicate): dropped, answered with an ACK.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 51),
        ack_number: Some(add(our, 1)),
        timestamp: ts(150),
        payload: &data,
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 51)));
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.bytes_received, 50, "PAWS dropped the second segment");
    assert_eq!(info.dup_segments, 1);
    // A current one is taken.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 51),
        ack_number: Some(add(our, 1)),
        timestamp: ts(201),
        payload: &data,
        ..SEND_TEMPL
    });
    assert_eq!(h.stack.tcp_info(conn).unwrap().bytes_received, 100);
}
