#![no_main]
//! A whole frame down the layers, as a stack reads it.
use libfuzzer_sys::fuzz_target;
use softoe_wire::*;

fuzz_target!(|data: &[u8]| {
    let Ok(eth) = EthernetFrame::new_checked(data) else { return };
    match eth.ethertype() {
        EtherType::Arp => {
            if let Ok(p) = ArpPacket::new_checked(eth.payload()) {
                let _ = ArpRepr::parse(&p);
            }
        }
        EtherType::Ipv4 => {
            let Ok(p) = Ipv4Packet::new_checked(eth.payload()) else { return };
            let Ok(ip) = Ipv4Repr::parse(&p, &ChecksumCaps::ignored()) else { return };
            match ip.next_header {
                IpProtocol::Tcp => {
                    if let Ok(t) = TcpPacket::new_checked(p.payload()) {
                        let _ = TcpRepr::parse(&t, &ip.src_addr, &ip.dst_addr, &ChecksumCaps::default());
                    }
                }
                IpProtocol::Udp => {
                    if let Ok(u) = UdpPacket::new_checked(p.payload()) {
                        let _ = UdpRepr::parse(&u, &ip.src_addr, &ip.dst_addr, &ChecksumCaps::default());
                    }
                }
                IpProtocol::Icmp => {
                    if let Ok(i) = Icmpv4Packet::new_checked(p.payload()) {
                        let _ = Icmpv4Repr::parse(&i, &ChecksumCaps::default());
                    }
                }
                IpProtocol::Unknown(_) => {}
            }
        }
        _ => {}
    }
});
