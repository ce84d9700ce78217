//! Path-MTU discovery: a router's fragmentation-needed message shrinks the
//! MSS, what is in flight goes again at the new size at once and without a
//! window cut; forged messages change nothing; the floor, the plateau
//! table, the cache for new connections, and its ageing.

use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{
    ChecksumCaps, EtherType, EthernetFrame, Icmpv4DstUnreachable, Icmpv4Packet, Icmpv4Repr,
    IpProtocol, Ipv4Address, Ipv4Packet, TcpSeqNumber,
};

use super::harness::*;
use super::ip_frag::ip_frame_from;
use crate::{DeviceCaps, Endpoint, PayloadRef, RxMeta, SocketHandle};

const ROUTER: Ipv4Address = Ipv4Address::new(10, 0, 0, 254);

/// The IPv4 and first 8 TCP bytes of a segment we sent: `src:sport →
/// dst:dport`, sequence `seq`, an IP datagram of `len` bytes.
fn quote(src: Endpoint, dst: Endpoint, seq: TcpSeqNumber, len: u16) -> Vec<u8> {
    let mut q = vec![0u8; 28];
    q[0] = 0x45;
    q[2..4].copy_from_slice(&len.to_be_bytes());
    q[6] = 0x40; // DF
    q[8] = 64;
    q[9] = 6;
    q[12..16].copy_from_slice(&src.addr.0);
    q[16..20].copy_from_slice(&dst.addr.0);
    q[20..22].copy_from_slice(&src.port.to_be_bytes());
    q[22..24].copy_from_slice(&dst.port.to_be_bytes());
    q[24..28].copy_from_slice(&seq.0.to_be_bytes());
    Ipv4Packet::new_unchecked(&mut q[..20]).fill_checksum();
    q
}

/// A fragmentation-needed message from the router, next-hop MTU `mtu`.
fn frag_needed(mtu: u16, quote: &[u8]) -> Vec<u8> {
    let msg = Icmpv4Repr::DstUnreachable {
        reason: Icmpv4DstUnreachable::FragRequired,
        data: quote,
    };
    let mut b = vec![0u8; msg.buffer_len()];
    let mut p = Icmpv4Packet::new_unchecked(&mut b[..]);
    msg.emit(&mut p, &ChecksumCaps::default());
    p.set_next_hop_mtu(mtu);
    p.fill_checksum();
    ip_frame_from(ROUTER, IpProtocol::Icmp, 1, 0, false, false, &b)
}

/// `(seq, len)` of each segment, for messages.
fn brief(segs: &[Sent]) -> Vec<(u32, usize)> {
    segs.iter().map(|s| (s.seq().0, s.len())).collect()
}

/// Sends 14,600 bytes the peer acknowledges (the window grows past its
/// initial ten segments), then ten more full segments; returns where the
/// ones in flight start.
fn grow_and_fill(h: &mut Harness, conn: SocketHandle, our: TcpSeqNumber) -> TcpSeqNumber {
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, 14_600))
        .unwrap();
    assert_eq!(h.recv().len(), 10);
    h.send(softoe_wire::TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 14_600)),
        ..SEND_TEMPL
    });
    h.recv();
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 14_600, 14_600))
        .unwrap();
    let segs = h.recv();
    assert_eq!(brief(&segs).len(), 10, "{:?}", brief(&segs));
    assert!(segs.iter().all(|s| s.len() == 1460));
    add(our, 14_600)
}

/// A connection (MSS 1460, SACK) with ten full segments in flight, past
/// its initial window: returns it and the first sequence number in flight.
fn in_flight(h: &mut Harness) -> (SocketHandle, TcpSeqNumber) {
    let (conn, our) = open_sack(h);
    let una = grow_and_fill(h, conn, our);
    (conn, una)
}

fn router_says(h: &mut Harness, mtu: u16, seq: TcpSeqNumber) {
    let q = quote(local(), remote(), seq, 1500);
    h.send_raw(&frag_needed(mtu, &q), RxMeta::default());
}

#[test]
fn frag_needed_resends_the_flight_at_the_new_size_at_once_without_a_window_cut() {
    let mut h = Harness::new();
    let (conn, our) = in_flight(&mut h);
    let before = h.stack.tcp_info(conn).unwrap();
    assert_eq!((before.snd_mss, before.pmtu), (1460, 1500));
    // The router dropped the first segment (and so every one after).
    router_says(&mut h, 1200, our);
    let resent = h.recv();
    let bytes: usize = resent.iter().map(|s| s.len()).sum();
    assert_eq!(
        bytes,
        14_600,
        "the whole flight again, at once: {:?}",
        brief(&resent)
    );
    assert_eq!(resent[0].seq(), our, "from the first byte in flight");
    assert!(
        resent.iter().all(|s| s.len() <= 1160),
        "each fits the 1,200-byte hop: {:?}",
        brief(&resent)
    );
    for w in resent.windows(2) {
        assert_eq!(w[1].seq(), add(w[0].seq(), w[0].len()), "in order");
    }
    let after = h.stack.tcp_info(conn).unwrap();
    assert_eq!((after.snd_mss, after.pmtu), (1160, 1200));
    assert_eq!(
        (after.cwnd, after.ssthresh),
        (before.cwnd, before.ssthresh),
        "not congestion"
    );
    assert_eq!(h.stack.stats().pmtu_lowered, 1);
    // The same message again (another dropped segment): nothing more.
    router_says(&mut h, 1200, add(our, 1460));
    assert!(h.recv().is_empty());
    assert_eq!(h.stack.stats().pmtu_ignored, 1);
    // The peer takes it all; new data goes at the new size.
    h.send(softoe_wire::TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 14_600)),
        ..SEND_TEMPL
    });
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 14_600, 5_000))
        .unwrap();
    let next = h.recv();
    assert!(!next.is_empty());
    assert!(next.iter().all(|s| s.len() <= 1160), "{:?}", brief(&next));
}

#[test]
fn without_sack_the_window_goes_again_from_snd_una() {
    let mut h = Harness::new();
    let (conn, our) = open_plain(&mut h);
    let our = grow_and_fill(&mut h, conn, our);
    let cwnd = h.stack.tcp_info(conn).unwrap().cwnd;
    router_says(&mut h, 1000, add(our, 2920));
    let resent = h.recv();
    assert_eq!(resent[0].seq(), our);
    assert!(
        resent.iter().all(|s| s.len() <= 960),
        "{:?}",
        brief(&resent)
    );
    assert_eq!(resent.iter().map(|s| s.len()).sum::<usize>(), 14_600);
    assert_eq!(h.stack.tcp_info(conn).unwrap().cwnd, cwnd);
}

#[test]
fn super_segments_are_cut_at_the_new_size() {
    let mut cfg = config();
    cfg.caps = DeviceCaps {
        mtu: 1500,
        tso_max: Some(65_535),
        tx_csum: true,
    };
    let mut h = Harness::with_config(cfg);
    let (conn, our) = open_sack(&mut h);
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, 14_600))
        .unwrap();
    let first = h.recv();
    assert_eq!(
        first.iter().map(|s| s.gso_size).collect::<Vec<_>>(),
        vec![Some(1460)]
    );
    router_says(&mut h, 1200, our);
    // Resent one segment per frame; the window's next super-segment is cut
    // at 1,160.
    let resent = h.recv();
    assert!(!resent.is_empty());
    assert!(
        resent
            .iter()
            .all(|s| s.len() <= 1160 && s.gso_size.is_none()),
        "{:?}",
        brief(&resent)
    );
    h.send(softoe_wire::TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 14_600)),
        ..SEND_TEMPL
    });
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 14_600, 30_000))
        .unwrap();
    let next = h.recv();
    assert!(
        next.iter()
            .any(|s| s.gso_size == Some(1160) && s.len() > 1160),
        "{:?}",
        brief(&next)
    );
    assert!(next.iter().all(|s| s.gso_size.is_none_or(|g| g == 1160)));
}

#[test]
fn messages_that_name_nothing_in_flight_change_nothing() {
    let mut h = Harness::new();
    let (conn, our) = in_flight(&mut h);
    let other_port = Endpoint::new(REMOTE_IP, REMOTE_PORT + 1);
    let cases: Vec<Vec<u8>> = vec![
        // Another connection (ports).
        frag_needed(1200, &quote(local(), other_port, our, 1500)),
        // A sequence number below what is in flight, and one past it.
        frag_needed(1200, &quote(local(), remote(), add(our, usize::MAX), 1500)),
        frag_needed(1200, &quote(local(), remote(), add(our, 14_600), 1500)),
        // Not a smaller MTU.
        frag_needed(1500, &quote(local(), remote(), our, 1500)),
        frag_needed(9000, &quote(local(), remote(), our, 1500)),
        // A quote too short to name a connection.
        frag_needed(1200, &quote(local(), remote(), our, 1500)[..24]),
    ];
    for c in &cases {
        h.send_raw(c, RxMeta::default());
    }
    // Not TCP.
    let mut udp = quote(local(), remote(), our, 1500);
    udp[9] = 17;
    h.send_raw(&frag_needed(1200, &udp), RxMeta::default());
    assert!(h.recv().is_empty());
    let i = h.stack.tcp_info(conn).unwrap();
    assert_eq!((i.snd_mss, i.pmtu), (1460, 1500));
    assert_eq!(h.stack.stats().pmtu_ignored, 7);
    assert_eq!(h.stack.stats().pmtu_lowered, 0);
}

#[test]
fn below_the_floor_the_mtu_is_552_and_segments_lose_df() {
    let mut h = Harness::new();
    let (conn, our) = in_flight(&mut h);
    router_says(&mut h, 296, our);
    h.stack.poll(h.now, &mut h.dev);
    let frames = core::mem::take(&mut h.dev.frames);
    assert!(!frames.is_empty());
    for (f, _) in &frames {
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(eth.ethertype(), EtherType::Ipv4);
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        assert!(
            !ip.dont_frag(),
            "routers may cut what the floor keeps too large"
        );
        assert!(ip.total_len() <= 552);
    }
    let i = h.stack.tcp_info(conn).unwrap();
    assert_eq!((i.snd_mss, i.pmtu), (512, 552));
}

#[test]
fn a_zero_next_hop_mtu_takes_the_plateau_below_the_datagram() {
    let mut h = Harness::new();
    let (conn, our) = in_flight(&mut h);
    router_says(&mut h, 0, our);
    let i = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (i.snd_mss, i.pmtu),
        (1452, 1492),
        "RFC 1191's plateau below 1,500"
    );
}

#[test]
fn the_learnt_mtu_serves_new_connections_and_expires_after_ten_minutes() {
    let mut h = Harness::new();
    let (conn, our) = in_flight(&mut h);
    router_says(&mut h, 1200, our);
    h.recv();
    h.send(softoe_wire::TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 14_600)),
        ..SEND_TEMPL
    });
    h.recv();
    // A new connection to the same host announces the smaller MSS.
    let c2 = h
        .stack
        .tcp_connect(h.now, Endpoint::new(REMOTE_IP, 81), None, None)
        .unwrap();
    let syn = h.recv();
    assert_eq!(syn.len(), 1);
    assert_eq!(syn[0].repr.max_seg_size, Some(1160));
    assert_eq!(h.stack.tcp_info(c2).unwrap().pmtu, 1200);
    // Ten minutes on, the device's MTU is tried again.
    let t0 = h.now;
    h.now = t0 + Duration::from_secs(599);
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(h.stack.tcp_info(conn).unwrap().snd_mss, 1160);
    h.now = t0 + Duration::from_secs(600);
    h.stack.poll(h.now, &mut h.dev);
    let i = h.stack.tcp_info(conn).unwrap();
    assert_eq!((i.snd_mss, i.pmtu), (1460, 1500));
    assert_eq!(h.stack.stats().pmtu_expired, 1);
    h.take();
}
