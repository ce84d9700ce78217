//! The reader's own receive ring (`Stack::tcp_set_rx_sink`): in-order bytes
//! written there straight from the frame, the rest kept by the stack, and
//! the stream the reader sees exact whatever the order of arrival.

use alloc::vec;
use alloc::vec::Vec;

use proptest::prelude::*;
use softoe_wire::TcpRepr;

use super::harness::*;
use crate::{RxRing, SocketHandle};

const RING: u64 = 4096;

/// A ring of `RING` bytes at offset 100 of the device's ring memory.
fn with_ring(h: &mut Harness, conn: SocketHandle, tail: u64) {
    h.dev.ring = vec![0; 100 + RING as usize];
    let ring = RxRing {
        region: 3,
        offset: 100,
        len: RING,
    };
    h.stack.tcp_set_rx_sink(conn, Some((ring, tail))).unwrap();
}

/// What a runtime serving the reader does after frames arrived: learn
/// the tail, move what the stack kept into the ring as it fits, and say
/// how far it got. Returns the new tail.
fn serve(h: &mut Harness, conn: SocketHandle, head: u64, open: bool) -> u64 {
    let tail = h
        .stack
        .tcp_rx_sink_sync(conn, head, 0, open)
        .unwrap()
        .unwrap();
    let free = (RING - (tail - head)) as usize;
    let ring = &mut h.dev.ring;
    let n = h
        .stack
        .tcp_recv_with(conn, |a, b| {
            let n = (a.len() + b.len()).min(free);
            for (i, &x) in a.iter().chain(b).take(n).enumerate() {
                ring[100 + ((tail as usize + i) % RING as usize)] = x;
            }
            (n, n)
        })
        .unwrap_or(0);
    h.stack
        .tcp_rx_sink_sync(conn, head, n as u64, open)
        .unwrap()
        .unwrap()
}

/// The reader takes `n` bytes from `head`.
fn read(h: &Harness, head: u64, n: u64) -> Vec<u8> {
    (head..head + n)
        .map(|p| h.dev.ring[100 + (p % RING) as usize])
        .collect()
}

fn data_seg(our: softoe_wire::TcpSeqNumber, at: usize, bytes: &[u8]) -> TcpRepr<'_> {
    TcpRepr {
        seq_number: add(REMOTE_SEQ, 1 + at),
        ack_number: Some(our),
        payload: bytes,
        ..SEND_TEMPL
    }
}

#[test]
fn in_order_bytes_land_in_the_ring_and_the_rest_waits_in_the_stack() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    with_ring(&mut h, conn, 1000);
    let data: Vec<u8> = (0..6000u32).map(|i| (i * 7 % 256) as u8).collect();
    h.send(data_seg(our, 0, &data[..3000]));
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.bytes_sunk, 3000, "straight into the ring");
    // The ring has 1096 bytes left: they go there, the rest is the stack's.
    h.send(data_seg(our, 3000, &data[3000..]));
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(info.bytes_sunk, 4096);
    assert_eq!(info.bytes_received, 6000);
    let tail = h.stack.tcp_rx_sink_sync(conn, 1000, 0, true).unwrap();
    assert_eq!(tail, Some(1000 + 4096));
    assert_eq!(read(&h, 1000, 4096), data[..4096]);
    // The reader reads it all; the stack's bytes follow in order, and
    // only then does the ring take new bytes straight again.
    let tail = serve(&mut h, conn, 1000 + 4096, true);
    assert_eq!(tail, 1000 + 6000);
    assert_eq!(read(&h, 1000 + 4096, 1904), data[4096..]);
    h.send(data_seg(our, 6000, &data[..10]));
    assert_eq!(h.stack.tcp_info(conn).unwrap().bytes_sunk, 4106);
}

#[test]
fn a_closed_ring_takes_nothing_and_a_refused_one_is_dropped() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    with_ring(&mut h, conn, 0);
    h.stack.tcp_rx_sink_sync(conn, 0, 0, false).unwrap();
    h.send(data_seg(our, 0, &[1; 500]));
    assert_eq!(h.stack.tcp_info(conn).unwrap().bytes_sunk, 0);
    let n = h
        .stack
        .tcp_recv_with(conn, |a, _| (a.len(), a.len()))
        .unwrap();
    assert_eq!(n, 500, "kept by the stack");
    // The runtime cannot write the ring any more: the stack keeps the
    // bytes and forgets the ring.
    h.stack.tcp_rx_sink_sync(conn, 0, 0, true).unwrap();
    h.dev.ring.clear();
    h.send(data_seg(our, 500, &[2; 500]));
    assert_eq!(h.stack.tcp_info(conn).unwrap().bytes_sunk, 0);
    assert_eq!(h.stack.tcp_rx_sink_sync(conn, 0, 0, true).unwrap(), None);
    let n = h
        .stack
        .tcp_recv_with(conn, |a, _| (a.len(), a.len()))
        .unwrap();
    assert_eq!(n, 500);
}

#[test]
fn out_of_order_bytes_wait_in_the_stack_until_the_hole_fills() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    with_ring(&mut h, conn, 0);
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 249) as u8).collect();
    h.send(data_seg(our, 1000, &data[1000..]));
    assert_eq!(h.stack.tcp_info(conn).unwrap().bytes_sunk, 0);
    // The hole: its bytes go into the stack behind the held ones, and
    // the runtime moves them all into the ring, in order.
    h.send(data_seg(our, 0, &data[..1000]));
    assert_eq!(h.stack.tcp_info(conn).unwrap().bytes_sunk, 0);
    assert_eq!(serve(&mut h, conn, 0, true), 3000);
    assert_eq!(read(&h, 0, 3000), data);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Segments of a stream arrive in any order, some twice; the reader
    /// reads at its own pace and now and then closes its ring. What it
    /// reads is the stream.
    #[test]
    fn the_reader_sees_the_stream_whatever_the_arrival_order(
        cuts in proptest::collection::vec(1usize..1800, 1..40),
        order in proptest::collection::vec(any::<u16>(), 40),
        again in proptest::collection::vec(any::<bool>(), 40),
        reads in proptest::collection::vec(0u64..3000, 40),
        opens in proptest::collection::vec(any::<bool>(), 40),
    ) {
        let mut h = Harness::new();
        let (conn, our) = open_sack(&mut h);
        let start = 1u64 << 40;
        with_ring(&mut h, conn, start);
        // The segments: the stream cut where `cuts` say (≤ 40 KiB, inside
        // the window without any read).
        let mut segs = Vec::new();
        let mut at = 0;
        for c in &cuts {
            segs.push((at, *c));
            at += c;
        }
        let stream: Vec<u8> = (0..at).map(|i| (i * 31 % 253) as u8).collect();
        // A shuffle by the keys in `order`, duplicates where `again` says.
        let mut sends: Vec<(u16, (usize, usize))> =
            segs.iter().enumerate().map(|(i, s)| (order[i % order.len()], *s)).collect();
        sends.sort_by_key(|x| x.0);
        let mut arrivals: Vec<(usize, usize)> = Vec::new();
        for (i, (_, s)) in sends.iter().enumerate() {
            arrivals.push(*s);
            if again[i % again.len()] {
                arrivals.push(*s);
            }
        }
        let mut got = Vec::new();
        let mut head = start;
        for (i, (at, len)) in arrivals.iter().enumerate() {
            h.send(data_seg(our, *at, &stream[*at..at + len]));
            let open = opens[i % opens.len()];
            let tail = serve(&mut h, conn, head, open);
            let n = reads[i % reads.len()].min(tail - head);
            got.extend(read(&h, head, n));
            head += n;
        }
        // The reader reads to the end.
        for _ in 0..(at / 1000 + 4) {
            let tail = serve(&mut h, conn, head, true);
            got.extend(read(&h, head, tail - head));
            head = tail;
        }
        prop_assert_eq!(got.len(), stream.len());
        prop_assert!(got == stream, "the bytes differ");
    }
}

#[test]
fn a_full_ring_does_not_close_the_window_the_stack_takes_the_rest() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    with_ring(&mut h, conn, 0);
    // 3 × 1460 bytes: the ring (4,096) takes what fits, the stack the
    // rest, and the window offered is the stack's free space less what it
    // holds: the ring's state does not shrink it.
    for i in 0..3 {
        h.send(data_seg(our, i * 1460, &[5; 1460]));
    }
    let mut acks = h.recv();
    acks.extend(h.advance(core::time::Duration::from_millis(50)));
    let ack = acks.last().expect("ACKs");
    assert_eq!(ack.ack(), Some(add(REMOTE_SEQ, 1 + 3 * 1460)));
    assert_eq!(h.stack.tcp_info(conn).unwrap().bytes_sunk, RING);
    // The stack's 256 KiB less the 284 bytes it holds, as far as the
    // unscaled field goes (capped by the ring it would be 61,155: what is
    // left of the 65,535 offered in the SYN-ACK).
    assert_eq!(ack.repr.window_len, 65_535, "the stack's own free space");
}
