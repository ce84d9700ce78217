#![no_main]
//! A whole frame down the layers, as a stack reads it: Ethernet (tagged or
//! not), then ARP, or IPv4 (fragments set aside) and ICMPv4, UDP or TCP.
//! Twice: as behind a port that verified the checksums (so random bytes reach
//! the inner layers), and with every checksum verified in software.
use libfuzzer_sys::fuzz_target;
use softoe_wire::*;

fuzz_target!(|data: &[u8]| {
    walk(data, &ChecksumCaps::ignored());
    walk(data, &ChecksumCaps::default());
});

fn walk(data: &[u8], caps: &ChecksumCaps) {
    let Ok(eth) = EthernetFrame::new_checked(data) else {
        return;
    };
    let Ok(er) = EthernetRepr::parse(&eth) else {
        return;
    };
    match er.ethertype {
        EtherType::Arp => {
            if let Ok(p) = ArpPacket::new_checked(eth.payload())
                && let Ok(a) = ArpRepr::parse(&p)
            {
                let _ = (
                    a.operation,
                    a.source_protocol_addr.is_unicast(),
                    a.target_hardware_addr,
                );
            }
        }
        EtherType::Ipv4 => {
            let Ok(p) = Ipv4Packet::new_checked(eth.payload()) else {
                return;
            };
            let Ok(ip) = Ipv4Repr::parse(&p, caps) else {
                return;
            };
            if p.is_fragment() {
                return;
            }
            let _ = (
                ip.dst_addr.is_broadcast(),
                ip.dst_addr.is_multicast(),
                ip.src_addr.is_unicast(),
            );
            match ip.next_header {
                IpProtocol::Tcp => {
                    if let Ok(t) = TcpPacket::new_checked(p.payload())
                        && let Ok(r) = TcpRepr::parse(&t, &ip.src_addr, &ip.dst_addr, caps)
                    {
                        let end = r.seq_number + r.segment_len();
                        assert_eq!(end.wrapping_diff(r.seq_number) as usize, r.segment_len());
                        let _ = r.to_string();
                    }
                }
                IpProtocol::Udp => {
                    if let Ok(u) = UdpPacket::new_checked(p.payload()) {
                        let _ = UdpRepr::parse(&u, &ip.src_addr, &ip.dst_addr, caps)
                            .map(|_| u.payload());
                    }
                }
                IpProtocol::Icmp => {
                    if let Ok(i) = Icmpv4Packet::new_checked(p.payload())
                        && let Ok(Icmpv4Repr::DstUnreachable { data, .. }) =
                            Icmpv4Repr::parse(&i, caps)
                    {
                        // The quoted header, as a stack reads it to find the socket.
                        if let Ok(q) = Ipv4Packet::new_checked(data) {
                            let _ = (q.src_addr(), q.next_header(), q.payload());
                        }
                    }
                }
                IpProtocol::Unknown(_) => {}
            }
        }
        EtherType::Vlan | EtherType::Unknown(_) => {}
    }
}
