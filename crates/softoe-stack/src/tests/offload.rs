//! The port's offloads: TSO super-segments, checksum offload, and received
//! coalesced frames.

use alloc::vec;
use alloc::vec::Vec;

use softoe_wire::{TcpRepr, TcpSeqNumber, TcpTimestamp};

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

/// A connection opened by the peer (MSS 1460, timestamps: 1448-byte
/// segments) whose first ACK offers a big window (8192 << 7), so cwnd is
/// the only limit (IW10). Returns the socket and our first sequence number.
fn open_with_wide_window(h: &mut Harness) -> (crate::SocketHandle, TcpSeqNumber) {
    let (conn, our, _) = open_passive(
        h,
        TcpRepr {
            max_seg_size: Some(1460),
            window_scale: Some(7),
            timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 0 }),
            ..SEND_TEMPL
        },
    );
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        window_len: 8192,
        timestamp: Some(TcpTimestamp { tsval: 2, tsecr: 0 }),
        ..SEND_TEMPL
    });
    (conn, our)
}

#[test]
fn tso_sends_super_segments_with_their_segment_size() {
    let mut h = Harness::with_config(offload_config());
    let (conn, _) = open_with_wide_window(&mut h);
    h.stack.tcp_set_nodelay(conn, true).unwrap();
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

fn data_seg(our: TcpSeqNumber, k: usize, data: &[u8]) -> TcpRepr<'_> {
    TcpRepr {
        seq_number: add(REMOTE_SEQ, 1 + k * 1460),
        ack_number: Some(our),
        payload: data,
        ..SEND_TEMPL
    }
}

#[test]
fn a_receive_batch_gets_one_ack_for_many_segments() {
    let mut h = Harness::new();
    let (_conn, our) = open_sack(&mut h);
    let data = [1u8; 1460];
    // Unbatched, every second segment is acknowledged at once.
    for k in 0..8 {
        h.send(data_seg(our, k, &data));
    }
    assert_eq!(h.take().len(), 4, "an ACK per two full segments");
    // Batched: the same eight segments, one ACK at the end of the batch.
    h.stack.begin_batch();
    for k in 8..16 {
        h.send(data_seg(our, k, &data));
    }
    assert!(h.take().is_empty(), "nothing goes out inside the batch");
    h.stack.end_batch(h.now, &mut h.dev);
    let out = h.take();
    assert_eq!(out.len(), 1, "one ACK for the batch: {out:?}");
    assert_eq!(out[0].ack(), Some(add(REMOTE_SEQ, 1 + 16 * 1460)));
}

/// With out-of-order data queued, each new run in a batch gets the ACK owed
/// before it, as a GRO receiver ACKs each run: a sender that only saw the
/// batch's last ACK would miss SACK blocks beyond the three it can carry,
/// and resend data that arrived.
#[test]
fn a_batch_with_holes_gets_an_ack_per_run() {
    let mut h = Harness::new();
    let (_conn, our) = open_sack(&mut h);
    let data = [2u8; 1460];
    h.stack.begin_batch();
    // Segments 0, 2, 4 and 6 of 0..7: three holes.
    for k in [0, 2, 4, 6] {
        h.send(data_seg(our, k, &data));
    }
    h.stack.end_batch(h.now, &mut h.dev);
    let out = h.take();
    let start = |k: usize| add(REMOTE_SEQ, 1 + k * 1460);
    let block = |k: usize| Some((start(k).0, start(k + 1).0));
    let sacks: Vec<_> = out
        .iter()
        .map(|s| s.repr.sack_ranges[..3].to_vec())
        .collect();
    // Segment 2 opened the first hole; 4 and 6 each start a run after it.
    // The newest block first (RFC 2018), then the others.
    assert_eq!(
        sacks,
        [
            vec![block(2), None, None],
            vec![block(4), block(2), None],
            vec![block(6), block(4), block(2)],
        ]
    );
    assert!(out.iter().all(|s| s.ack() == Some(start(1))));
    // Filling a hole inside a later batch is acknowledged at once, and the
    // batch's end has nothing more to say.
    h.stack.begin_batch();
    h.send(data_seg(our, 1, &data));
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack(), Some(start(3)));
    h.stack.end_batch(h.now, &mut h.dev);
    assert!(h.take().is_empty());
}

/// Segments the path reordered inside one batch do not show as holes: a
/// late segment that fills a gap sends nothing ahead of itself, so no ACK
/// reports the segments after it without it. A sender in recovery (whose
/// RACK reordering window is zero until it has seen reordering) would
/// resend it, and everything its timer marks with it, though it arrived
/// a few microseconds later. Only a segment that starts beyond everything
/// received, a new hole from loss, sends the ACK owed first.
#[test]
fn reordering_inside_a_batch_is_not_reported_as_holes() {
    let mut h = Harness::new();
    let (_conn, our) = open_sack(&mut h);
    let data = [3u8; 1460];
    let start = |k: usize| add(REMOTE_SEQ, 1 + k * 1460);
    // An earlier hole (segment 0 lost): the receiver is in recovery.
    h.send(data_seg(our, 1, &data));
    h.take();
    h.stack.begin_batch();
    // The path delivers 2, 3, 5, 4, 6, 7: segment 4 a little late.
    for k in [2, 3, 5, 4, 6, 7] {
        h.send(data_seg(our, k, &data));
    }
    h.stack.end_batch(h.now, &mut h.dev);
    let out = h.take();
    assert!(!out.is_empty());
    for s in &out {
        assert_eq!(s.ack(), Some(start(0)));
        let blocks: Vec<_> = s.repr.sack_ranges.iter().flatten().collect();
        let has = |k: usize| {
            blocks
                .iter()
                .any(|&&(a, b)| TcpSeqNumber(a) <= start(k) && start(k + 1) <= TcpSeqNumber(b))
        };
        assert!(has(4) || !has(5), "segment 4 reported missing: {blocks:?}");
    }
    let last = out.last().map(|s| s.repr.sack_ranges[0]);
    assert_eq!(last, Some(Some((start(1).0, start(8).0))), "{out:?}");
}

/// RFC 5681 §4.2: a segment that fills all or part of a gap is ACKed at
/// once. Inside a receive batch too: a sender in recovery that hears of
/// several repairs from one ACK at the batch's end waits for its
/// retransmission timeout when that one ACK is lost (seen at 10 % drops:
/// five repairs, one ACK, lost, 207 ms of silence).
#[test]
fn each_repair_in_a_batch_gets_its_own_ack() {
    let mut h = Harness::new();
    let (_conn, our) = open_sack(&mut h);
    let data = [5u8; 1460];
    let start = |k: usize| add(REMOTE_SEQ, 1 + k * 1460);
    // Segments 1 and 3 lost: holes at 1 and 3.
    for k in [0, 2, 4] {
        h.send(data_seg(our, k, &data));
    }
    h.take();
    h.stack.begin_batch();
    // The repairs, the middle hole's first, then new data.
    for k in [3, 1, 5, 6] {
        h.send(data_seg(our, k, &data));
    }
    h.stack.end_batch(h.now, &mut h.dev);
    let acks: Vec<_> = h
        .take()
        .iter()
        .map(|s| (s.ack(), s.repr.sack_ranges[0]))
        .collect();
    let block = |a: usize, b: usize| Some((start(a).0, start(b).0));
    assert_eq!(
        acks,
        vec![
            // After 3: still waiting for 1, with 2..5 held.
            (Some(start(1)), block(2, 5)),
            // After 1: everything to 5.
            (Some(start(5)), None),
            // The batch's end.
            (Some(start(7)), None),
        ]
    );
}

#[test]
fn handshakes_and_resets_are_not_held_by_a_batch() {
    let mut h = Harness::new();
    let _lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.stack.begin_batch();
    h.send(TcpRepr {
        control: softoe_wire::TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: None,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1, "the SYN-ACK goes at once");
    assert_eq!(out[0].repr.control, softoe_wire::TcpControl::Syn);
    // A segment to a closed port is reset at once, too.
    h.send(TcpRepr {
        src_port: 999,
        dst_port: 4000,
        seq_number: REMOTE_SEQ,
        ack_number: Some(TcpSeqNumber(5)),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].repr.control, softoe_wire::TcpControl::Rst);
    h.stack.end_batch(h.now, &mut h.dev);
}

#[test]
fn a_super_segments_short_tail_waits_like_any_small_segment() {
    let mut h = Harness::with_config(offload_config());
    let (conn, our) = open_with_wide_window(&mut h);
    let lens = |out: &[Sent]| out.iter().map(|s| s.len()).collect::<Vec<_>>();
    // No small segment in flight: the write goes whole, its 552-byte tail
    // inside the super-segment.
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 2000)).unwrap();
    assert_eq!(lens(&h.recv()), [2000]);
    // That tail is unacknowledged: the next write's whole segments go, and
    // its own short tail waits (Nagle, as Linux's TSO split point).
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 2000, 2000))
        .unwrap();
    assert_eq!(lens(&h.recv()), [1448]);
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 3448)),
        window_len: 8192,
        timestamp: Some(TcpTimestamp { tsval: 3, tsecr: 0 }),
        ..SEND_TEMPL
    });
    let out = h.take();
    assert_eq!(lens(&out), [552], "the ACK releases the tail");
    assert_eq!(out[0].payload, h.dev.mem[3448..4000].to_vec());
    // With TCP_NODELAY every write goes whole.
    h.stack.tcp_set_nodelay(conn, true).unwrap();
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 4000, 2000))
        .unwrap();
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 6000, 2000))
        .unwrap();
    assert_eq!(lens(&h.recv()).iter().sum::<usize>(), 4000);
}
