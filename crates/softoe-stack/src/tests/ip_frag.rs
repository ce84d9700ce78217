//! IPv4 fragments: reassembly into datagrams delivered to UDP, ICMP and
//! TCP; echo replies too large for the MTU sent as fragments; the
//! reassembly timeout's ICMP time exceeded; overlaps.

use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{
    ChecksumCaps, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Icmpv4Packet,
    Icmpv4Repr, Icmpv4TimeExceeded, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, TcpPacket,
    TcpRepr, UdpPacket, UdpRepr,
};

use super::harness::*;
use crate::{Endpoint, RxMeta};

/// An IPv4 frame from the peer carrying `l4` bytes `off..off+len` of a
/// datagram (`ident`), as fragment `off` with MF = `more`.
pub(crate) fn ip_frame_from(
    src: Ipv4Address,
    proto: IpProtocol,
    ident: u16,
    off: usize,
    more: bool,
    dont_frag: bool,
    data: &[u8],
) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + data.len()];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: REMOTE_MAC,
        dst_addr: LOCAL_MAC,
        ethertype: EtherType::Ipv4,
        vlan_tci: None,
    }
    .emit(&mut eth);
    let mut ip = Ipv4Packet::new_unchecked(eth.payload_mut());
    Ipv4Repr {
        src_addr: src,
        dst_addr: LOCAL_IP,
        next_header: proto,
        payload_len: data.len(),
        hop_limit: 64,
        ident,
        dont_frag,
    }
    .emit(&mut ip, &ChecksumCaps::default());
    ip.set_flags_and_offset(dont_frag, more, off as u16);
    ip.fill_checksum();
    ip.payload_mut()[..data.len()].copy_from_slice(data);
    f
}

/// `l4` cut into fragments of `per` bytes (a multiple of 8), in order.
pub(crate) fn fragments(proto: IpProtocol, ident: u16, l4: &[u8], per: usize) -> Vec<Vec<u8>> {
    l4.chunks(per)
        .enumerate()
        .map(|(k, c)| {
            let off = k * per;
            let more = off + c.len() < l4.len();
            ip_frame_from(REMOTE_IP, proto, ident, off, more, false, c)
        })
        .collect()
}

fn udp_datagram(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8 + payload.len()];
    UdpRepr {
        src_port: src,
        dst_port: dst,
    }
    .emit(
        &mut UdpPacket::new_unchecked(&mut b[..]),
        &REMOTE_IP,
        &LOCAL_IP,
        payload.len(),
        |p| p.copy_from_slice(payload),
        &ChecksumCaps::default(),
    );
    b
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed)
        .collect()
}

/// The IPv4 packets among the frames the stack sent that are not TCP.
fn ip_packets(h: &mut Harness) -> Vec<Vec<u8>> {
    h.take();
    core::mem::take(&mut h.other)
        .into_iter()
        .filter(|f| {
            EthernetFrame::new_checked(&f[..]).is_ok_and(|e| e.ethertype() == EtherType::Ipv4)
        })
        .map(|f| f[14..].to_vec())
        .collect()
}

#[test]
fn a_udp_datagram_in_fragments_is_delivered_whole() {
    let mut h = Harness::new();
    let sock = h.stack.udp_bind(Endpoint::new(LOCAL_IP, 9), None).unwrap();
    let payload = pattern(4000, 1);
    let dgram = udp_datagram(5000, 9, &payload);
    let mut frags = fragments(IpProtocol::Udp, 77, &dgram, 1480);
    assert_eq!(frags.len(), 3);
    // Out of order, one twice.
    frags.swap(0, 2);
    let dup = frags[1].clone();
    frags.push(dup);
    let mut buf = vec![0u8; 8192];
    for (k, f) in frags.iter().enumerate().take(3) {
        assert_eq!(
            h.stack.udp_recv_from(sock, &mut buf).unwrap(),
            None,
            "nothing before fragment {k} arrived"
        );
        h.send_raw(f, RxMeta::default());
    }
    let (n, from) = h
        .stack
        .udp_recv_from(sock, &mut buf)
        .unwrap()
        .expect("the datagram");
    // The duplicate, late, opens a new datagram that never completes.
    h.send_raw(&frags[3], RxMeta::default());
    assert_eq!((n, from), (4000, Endpoint::new(REMOTE_IP, 5000)));
    assert_eq!(&buf[..n], &payload[..]);
    let st = h.stack.stats();
    assert_eq!((st.rx_fragments, st.reasm_ok, st.udp_rx), (4, 1, 1));
    let _ = h.stack.udp_recv_from(sock, &mut buf);
    // A second datagram of the same identification, later, is a new one.
    for f in fragments(IpProtocol::Udp, 77, &dgram, 1480) {
        h.send_raw(&f, RxMeta::default());
    }
    assert_eq!(
        h.stack.udp_recv_from(sock, &mut buf).unwrap().map(|r| r.0),
        Some(4000)
    );
    // A fragmented datagram with a bad UDP checksum is dropped as
    // malformed, as a whole one would be.
    let mut bad = dgram.clone();
    bad[100] ^= 1;
    let before = h.stack.stats().rx_malformed;
    for f in fragments(IpProtocol::Udp, 78, &bad, 1480) {
        h.send_raw(&f, RxMeta::default());
    }
    assert_eq!(h.stack.udp_recv_from(sock, &mut buf).unwrap(), None);
    assert_eq!(h.stack.stats().rx_malformed, before + 1);
}

#[test]
fn a_large_ping_is_answered_in_fragments() {
    let mut h = Harness::new();
    let data = pattern(4000, 2);
    let req = Icmpv4Repr::EchoRequest {
        ident: 0x77,
        seq_no: 5,
        data: &data,
    };
    let mut b = vec![0u8; req.buffer_len()];
    req.emit(
        &mut Icmpv4Packet::new_unchecked(&mut b[..]),
        &ChecksumCaps::default(),
    );
    h.other.clear();
    for f in fragments(IpProtocol::Icmp, 9, &b, 1480) {
        h.send_raw(&f, RxMeta::default());
    }
    let replies = ip_packets(&mut h);
    assert_eq!(replies.len(), 3, "4,008 bytes of ICMP in 1,480-byte pieces");
    let mut whole = vec![0u8; 4008];
    let mut seen = 0;
    let ident = Ipv4Packet::new_checked(&replies[0][..]).unwrap().ident();
    for (k, r) in replies.iter().enumerate() {
        let ip = Ipv4Packet::new_checked(&r[..]).unwrap();
        assert!(ip.verify_checksum());
        assert!(r.len() <= 1500, "fits the MTU");
        assert!(!ip.dont_frag());
        assert_eq!(ip.ident(), ident, "one datagram");
        assert_eq!((ip.src_addr(), ip.dst_addr()), (LOCAL_IP, REMOTE_IP));
        assert_eq!(ip.more_frags(), k < 2);
        let off = usize::from(ip.frag_offset());
        assert_eq!(off, seen);
        whole[off..off + ip.payload().len()].copy_from_slice(ip.payload());
        seen += ip.payload().len();
    }
    assert_eq!(seen, 4008);
    let p = Icmpv4Packet::new_checked(&whole[..]).unwrap();
    assert_eq!(
        Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(),
        Icmpv4Repr::EchoReply {
            ident: 0x77,
            seq_no: 5,
            data: &data
        }
    );
    let st = h.stack.stats();
    assert_eq!((st.reasm_ok, st.icmp_echo, st.tx_fragmented), (1, 1, 1));
}

#[test]
fn a_tcp_segment_in_fragments_reaches_the_connection() {
    let mut h = Harness::new();
    let (conn, our) = open_sack(&mut h);
    let data = pattern(1460, 3);
    let seg = TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(our),
        payload: &data,
        ..SEND_TEMPL
    };
    let mut l4 = vec![0u8; seg.buffer_len()];
    seg.emit(
        &mut TcpPacket::new_unchecked(&mut l4[..]),
        &REMOTE_IP,
        &LOCAL_IP,
        &ChecksumCaps::default(),
    );
    // A 1,200-byte hop cut it: 1,176 + 304 bytes.
    for f in fragments(IpProtocol::Tcp, 3, &l4, 1176) {
        h.send_raw(&f, RxMeta::default());
    }
    let mut buf = vec![0u8; 2000];
    assert_eq!(h.stack.tcp_recv(conn, &mut buf), Ok(1460));
    assert_eq!(&buf[..1460], &data[..]);
    let acks = h.advance(Duration::from_millis(50));
    assert!(
        acks.iter().any(|a| a.ack() == Some(add(REMOTE_SEQ, 1461))),
        "{acks:?}"
    );
    // RFC 1858: a TCP fragment at offset 8 is refused, and so is a first
    // fragment without the whole TCP header.
    let before = h.stack.stats().reasm_invalid;
    h.send_raw(
        &ip_frame_from(REMOTE_IP, IpProtocol::Tcp, 4, 8, true, false, &l4[8..24]),
        RxMeta::default(),
    );
    h.send_raw(
        &ip_frame_from(REMOTE_IP, IpProtocol::Tcp, 5, 0, true, false, &l4[..16]),
        RxMeta::default(),
    );
    assert_eq!(h.stack.stats().reasm_invalid, before + 2);
}

#[test]
fn reassembly_times_out_with_an_icmp_time_exceeded_for_the_first_fragment() {
    let mut h = Harness::new();
    let dgram = udp_datagram(5000, 9, &pattern(3000, 4));
    let frags = fragments(IpProtocol::Udp, 41, &dgram, 1480);
    // The first two of three arrive; of another datagram only the last.
    h.send_raw(&frags[0], RxMeta::default());
    h.send_raw(&frags[1], RxMeta::default());
    let other = fragments(IpProtocol::Udp, 42, &dgram, 1480);
    h.send_raw(&other[2], RxMeta::default());
    h.other.clear();
    let t0 = h.now;
    assert_eq!(h.stack.poll_at(), Some(t0 + Duration::from_secs(30)));
    h.advance(Duration::from_secs(29));
    assert!(ip_packets(&mut h).is_empty(), "still waiting");
    h.advance(Duration::from_secs(1));
    let sent = ip_packets(&mut h);
    assert_eq!(
        sent.len(),
        1,
        "one time exceeded, for the datagram whose first fragment came"
    );
    let ip = Ipv4Packet::new_checked(&sent[0][..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (LOCAL_IP, REMOTE_IP));
    let p = Icmpv4Packet::new_checked(ip.payload()).unwrap();
    match Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap() {
        Icmpv4Repr::TimeExceeded { reason, data } => {
            assert_eq!(reason, Icmpv4TimeExceeded::FragReassembly);
            assert_eq!(
                data,
                &frags[0][14..14 + 28],
                "the first fragment's header and 8 bytes"
            );
        }
        other => panic!("{other:?}"),
    }
    let st = h.stack.stats();
    assert_eq!(
        (st.reasm_timeouts, st.icmp_time_exceeded_tx, st.reasm_ok),
        (2, 1, 0)
    );
    assert_eq!(h.stack.poll_at(), None, "nothing left to wait for");
    // The last fragment, late: a new datagram that never completes.
    h.send_raw(&frags[2], RxMeta::default());
    assert_eq!(h.stack.stats().reasm_ok, 0);
}

#[test]
fn an_overlapping_fragment_drops_the_datagram() {
    let mut h = Harness::new();
    let sock = h.stack.udp_bind(Endpoint::new(LOCAL_IP, 9), None).unwrap();
    let dgram = udp_datagram(5000, 9, &pattern(3000, 5));
    let frags = fragments(IpProtocol::Udp, 50, &dgram, 1480);
    h.send_raw(&frags[0], RxMeta::default());
    // Rewrites bytes 1,472..1,480 of the first and adds its own.
    let evil = ip_frame_from(
        REMOTE_IP,
        IpProtocol::Udp,
        50,
        1472,
        true,
        false,
        &[0xee; 1480],
    );
    h.send_raw(&evil, RxMeta::default());
    h.send_raw(&frags[1], RxMeta::default());
    h.send_raw(&frags[2], RxMeta::default());
    let mut buf = vec![0u8; 4096];
    assert_eq!(h.stack.udp_recv_from(sock, &mut buf).unwrap(), None);
    let st = h.stack.stats();
    assert_eq!((st.reasm_overlaps, st.reasm_ok), (1, 0));
}

#[test]
fn fragments_for_someone_else_are_not_reassembled() {
    let mut h = Harness::new();
    let mut f = fragments(IpProtocol::Udp, 1, &udp_datagram(1, 2, &[0; 2000]), 1480)[0].clone();
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
    ip.set_dst_addr(Ipv4Address::new(10, 0, 0, 77));
    ip.fill_checksum();
    h.send_raw(&f, RxMeta::default());
    let st = h.stack.stats();
    assert_eq!((st.rx_not_for_us, st.rx_fragments), (1, 0));
    let _ = EthernetAddress::BROADCAST;
}
