//! The port's offloads: TSO super-segments, checksum offload, and received
//! coalesced frames.

use alloc::vec::Vec;

use softoe_wire::{TcpRepr, TcpTimestamp};

use super::harness::*;
use crate::{DeviceCaps, PayloadRef, RxMeta};

fn offload_config() -> crate::StackConfig {
    let mut cfg = config();
    cfg.caps = DeviceCaps {
        mtu: 1500,
        tso_max: Some(65_535),
        tx_csum: true,
    };
    cfg
}

#[test]
fn tso_sends_super_segments_with_their_segment_size() {
    let mut h = Harness::with_config(offload_config());
    let (conn, our, _) = open_passive(
        &mut h,
        TcpRepr {
            max_seg_size: Some(1460),
            window_scale: Some(7),
            timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 0 }),
            ..SEND_TEMPL
        },
    );
    h.stack.tcp_set_nodelay(conn, true).unwrap();
    // A big window from the peer, so cwnd is the only limit (IW10).
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        window_len: 8192,
        timestamp: Some(TcpTimestamp { tsval: 2, tsecr: 0 }),
        ..SEND_TEMPL
    });
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, 100_000))
        .unwrap();
    let out = h.recv();
    assert_eq!(
        out.len(),
        1,
        "one super-segment for the initial window: {:?}",
        out.iter().map(|s| s.len()).collect::<Vec<_>>()
    );
    assert_eq!(out[0].len(), 10 * 1448);
    assert_eq!(out[0].gso_size, Some(1448));
    assert_eq!(
        out[0].payload,
        h.dev.mem[..10 * 1448].to_vec(),
        "payload by reference, in order"
    );
    assert_eq!(h.stack.stats().tx_tso_frames, 1);
    assert_eq!(
        h.stack.stats().tx_csum_offloaded,
        h.stack.stats().tx_frames - 1,
        "every TCP frame but the ARP reply"
    );
}

#[test]
fn without_tso_segments_are_cut_by_the_stack() {
    let mut h = Harness::new();
    let (conn, _) = open_plain(&mut h);
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 5000)).unwrap();
    let out = h.recv();
    assert_eq!(
        out.iter().map(|s| s.len()).collect::<Vec<_>>(),
        [1460, 1460, 1460, 620]
    );
    assert!(out.iter().all(|s| s.gso_size.is_none()));
    assert_eq!(
        h.stack.stats().tx_csum_offloaded,
        0,
        "software checksums (the harness verified them)"
    );
}

#[test]
fn coalesced_frames_count_as_several_segments() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    // One GRO frame of three 1460-byte segments, checksum vouched for.
    let data = [8u8; 3 * 1460];
    let frame = Harness::frame(&TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        payload: &data,
        ..SEND_TEMPL
    });
    h.send_raw(
        &frame,
        RxMeta {
            csum_verified: true,
            gso_size: Some(1460),
        },
    );
    let out = h.take();
    assert_eq!(out.len(), 1, "more than two segments' worth: ACK at once");
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1 + 3 * 1460)));
    let mut buf = [0u8; 5000];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf).unwrap(), 3 * 1460);
    assert_eq!(h.stack.stats().rx_coalesced, 1);
    assert_eq!(h.stack.stats().rx_csum_offloaded, 1);
}

#[test]
fn verified_frames_skip_the_checksum_and_others_do_not() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    let data = [1u8; 100];
    let mut frame = Harness::frame(&TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        payload: &data,
        ..SEND_TEMPL
    });
    frame[14 + 20 + 16] ^= 0x55; // break the TCP checksum
    h.send_raw(&frame, RxMeta::default());
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().bytes_received,
        0,
        "bad checksum dropped"
    );
    assert_eq!(h.stack.stats().rx_bad_checksum, 1);
    h.send_raw(
        &frame,
        RxMeta {
            csum_verified: true,
            gso_size: None,
        },
    );
    assert_eq!(
        h.stack.tcp_info(conn).unwrap().bytes_received,
        100,
        "the port vouched for it"
    );
}
