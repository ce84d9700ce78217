//! The interface: ARP, ICMP, UDP, and what is not for us.

use alloc::vec;
use alloc::vec::Vec;

use softoe_wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumCaps, EtherType, EthernetAddress, EthernetFrame,
    EthernetRepr, Icmpv4DstUnreachable, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address,
    Ipv4Packet, Ipv4Repr, TcpControl, UdpPacket, UdpRepr,
};

use super::harness::*;
use crate::{Endpoint, PayloadRef, RxMeta};

fn ip_frame(
    proto: IpProtocol,
    l4: &[u8],
    dst_mac: EthernetAddress,
    dst_ip: Ipv4Address,
) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + l4.len()];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: REMOTE_MAC,
        dst_addr: dst_mac,
        ethertype: EtherType::Ipv4,
        vlan_tci: None,
    }
    .emit(&mut eth);
    let mut ip = Ipv4Packet::new_unchecked(eth.payload_mut());
    Ipv4Repr {
        src_addr: REMOTE_IP,
        dst_addr: dst_ip,
        next_header: proto,
        payload_len: l4.len(),
        hop_limit: 64,
        ident: 1,
        dont_frag: false,
    }
    .emit(&mut ip, &ChecksumCaps::default());
    ip.payload_mut()[..l4.len()].copy_from_slice(l4);
    f
}

fn parse_ip(f: &[u8]) -> (Ipv4Repr, Vec<u8>) {
    let eth = EthernetFrame::new_checked(f).unwrap();
    assert_eq!(eth.ethertype(), EtherType::Ipv4);
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    (
        Ipv4Repr::parse(&ip, &ChecksumCaps::default()).unwrap(),
        ip.payload().to_vec(),
    )
}

fn udp(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
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

#[test]
fn answers_arp_for_its_address_only() {
    let mut h = Harness::new();
    h.other.clear();
    h.arp(ArpOperation::Request, REMOTE_IP, LOCAL_IP);
    h.take();
    let reply = h.other.pop().expect("an ARP reply");
    let eth = EthernetFrame::new_checked(&reply[..]).unwrap();
    assert_eq!(eth.dst_addr(), REMOTE_MAC);
    let r = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    assert_eq!(r.operation, ArpOperation::Reply);
    assert_eq!(r.source_hardware_addr, LOCAL_MAC);
    assert_eq!(r.source_protocol_addr, LOCAL_IP);
    h.arp(
        ArpOperation::Request,
        REMOTE_IP,
        Ipv4Address::new(10, 0, 0, 99),
    );
    h.recv();
    assert!(h.other.is_empty());
}

#[test]
fn announces_itself_with_gratuitous_arp() {
    let mut h = Harness::new();
    h.other.clear();
    h.stack.announce(h.now, &mut h.dev);
    h.take();
    let f = h.other.pop().expect("gratuitous ARP");
    let eth = EthernetFrame::new_checked(&f[..]).unwrap();
    assert!(eth.dst_addr().is_broadcast());
    let r = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    assert_eq!(r.source_protocol_addr, LOCAL_IP);
    assert_eq!(r.target_protocol_addr, LOCAL_IP);
}

#[test]
fn answers_ping() {
    let mut h = Harness::new();
    let req = Icmpv4Repr::EchoRequest {
        ident: 9,
        seq_no: 3,
        data: b"softoe ping",
    };
    let mut b = vec![0u8; req.buffer_len()];
    req.emit(
        &mut Icmpv4Packet::new_unchecked(&mut b[..]),
        &ChecksumCaps::default(),
    );
    h.send_raw(
        &ip_frame(IpProtocol::Icmp, &b, LOCAL_MAC, LOCAL_IP),
        RxMeta::default(),
    );
    h.take();
    let reply = h.other.pop().expect("an echo reply");
    let (ip, payload) = parse_ip(&reply);
    assert_eq!(ip.dst_addr, REMOTE_IP);
    let p = Icmpv4Packet::new_checked(&payload[..]).unwrap();
    assert_eq!(
        Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(),
        Icmpv4Repr::EchoReply {
            ident: 9,
            seq_no: 3,
            data: b"softoe ping"
        }
    );
    assert_eq!(h.stack.stats().icmp_echo, 1);
}

#[test]
fn udp_closed_port_unreachable_and_open_port_delivered() {
    let mut h = Harness::new();
    let frame = ip_frame(
        IpProtocol::Udp,
        &udp(4000, 53, b"query"),
        LOCAL_MAC,
        LOCAL_IP,
    );
    h.send_raw(&frame, RxMeta::default());
    h.take();
    let icmp = h.other.pop().expect("port unreachable");
    let (_, payload) = parse_ip(&icmp);
    match Icmpv4Repr::parse(
        &Icmpv4Packet::new_checked(&payload[..]).unwrap(),
        &ChecksumCaps::default(),
    )
    .unwrap()
    {
        Icmpv4Repr::DstUnreachable { reason, data } => {
            assert_eq!(reason, Icmpv4DstUnreachable::PortUnreachable);
            assert_eq!(
                data,
                &frame[14..14 + 28],
                "quotes the IP header and 8 bytes"
            );
        }
        other => panic!("{other:?}"),
    }
    let sock = h.stack.udp_bind(Endpoint::new(LOCAL_IP, 53), None).unwrap();
    h.send_raw(&frame, RxMeta::default());
    let mut buf = [0u8; 3];
    let (n, from) = h.stack.udp_recv_from(sock, &mut buf).unwrap().unwrap();
    assert_eq!(
        (n, from),
        (5, Endpoint::new(REMOTE_IP, 4000)),
        "full length reported"
    );
    assert_eq!(&buf, b"que", "truncated to the buffer, as recvfrom");
    assert_eq!(h.stack.udp_recv_from(sock, &mut buf).unwrap(), None);
    // And sending.
    h.stack
        .udp_send_to(
            sock,
            Endpoint::new(REMOTE_IP, 4000),
            PayloadRef::new(0, 0, 10),
        )
        .unwrap();
    h.recv();
    let out = h.other.pop().expect("a datagram");
    let (ip, payload) = parse_ip(&out);
    let p = UdpPacket::new_checked(&payload[..]).unwrap();
    assert!(p.verify_checksum(&ip.src_addr, &ip.dst_addr));
    assert_eq!(p.payload(), &h.dev.mem[..10]);
    assert_eq!(h.stack.udp_sent(sock).unwrap(), 1);
}

#[test]
fn drops_what_is_not_for_us() {
    let mut h = Harness::new();
    let seg = Harness::frame(&softoe_wire::TcpRepr {
        control: TcpControl::Syn,
        ..SEND_TEMPL
    });
    let mut other_mac = seg.clone();
    other_mac[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    h.send_raw(&other_mac, RxMeta::default());
    let other_ip = ip_frame(
        IpProtocol::Tcp,
        &seg[34..],
        LOCAL_MAC,
        Ipv4Address::new(10, 0, 0, 77),
    );
    h.send_raw(&other_ip, RxMeta::default());
    assert!(h.take().is_empty());
    assert_eq!(h.stack.stats().rx_not_for_us, 2);
    // A fragment is recognised and dropped.
    let mut frag = ip_frame(IpProtocol::Udp, &udp(1, 2, b"x"), LOCAL_MAC, LOCAL_IP);
    let mut ip = Ipv4Packet::new_unchecked(&mut frag[14..]);
    ip.set_flags_and_offset(false, true, 0);
    ip.fill_checksum();
    h.send_raw(&frag, RxMeta::default());
    assert_eq!(h.stack.stats().rx_fragments, 1);
    // A bad IP checksum.
    let mut bad = ip_frame(IpProtocol::Udp, &udp(1, 2, b"x"), LOCAL_MAC, LOCAL_IP);
    bad[24] ^= 0xff;
    h.send_raw(&bad, RxMeta::default());
    assert_eq!(h.stack.stats().rx_malformed, 1);
}

#[test]
fn syn_waits_for_arp_then_goes() {
    let mut h = Harness::new();
    let far = Ipv4Address::new(10, 0, 0, 3);
    h.other.clear();
    h.stack
        .tcp_connect(h.now, Endpoint::new(far, 80), None, None)
        .unwrap();
    assert!(h.recv().is_empty(), "no TCP before the next hop is known");
    let req = h.other.pop().expect("an ARP request");
    let eth = EthernetFrame::new_checked(&req[..]).unwrap();
    assert!(eth.dst_addr().is_broadcast());
    let r = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
    assert_eq!(r.target_protocol_addr, far);
    // The reply releases the queued SYN.
    let mut f = vec![0u8; 42];
    let mut e = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: REMOTE_MAC,
        dst_addr: LOCAL_MAC,
        ethertype: EtherType::Arp,
        vlan_tci: None,
    }
    .emit(&mut e);
    ArpRepr {
        operation: ArpOperation::Reply,
        source_hardware_addr: REMOTE_MAC,
        source_protocol_addr: far,
        target_hardware_addr: LOCAL_MAC,
        target_protocol_addr: LOCAL_IP,
    }
    .emit(&mut ArpPacket::new_unchecked(e.payload_mut()));
    h.send_raw(&f, RxMeta::default());
    let (bytes, _) = h.dev.frames.pop().expect("the SYN");
    let (ip, _) = parse_ip(&bytes);
    assert_eq!(ip.dst_addr, far);
}
