#![no_main]
//! UDP: parse, emit and parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ChecksumCaps, Ipv4Address, UdpPacket, UdpRepr};

const SRC: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const DST: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

fuzz_target!(|data: &[u8]| {
    let Ok(p) = UdpPacket::new_checked(data) else { return };
    let _ = (p.payload(), p.verify_checksum(&SRC, &DST));
    let Ok(r) = UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()) else { return };
    let payload = p.payload();
    let mut buf = vec![0u8; 8 + payload.len()];
    r.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), &SRC, &DST, payload.len(), |b| b.copy_from_slice(payload), &ChecksumCaps::default());
    let q = UdpPacket::new_checked(&buf[..]).expect("checks");
    assert_eq!(UdpRepr::parse(&q, &SRC, &DST, &ChecksumCaps::default()).expect("round trip"), r);
    assert_eq!(q.payload(), payload);
});
