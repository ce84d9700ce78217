#![no_main]
//! UDP: every getter, parse, emit into header + payload bytes, parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ChecksumCaps, Ipv4Address, UdpPacket, UdpRepr};

const SRC: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const DST: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

fuzz_target!(|data: &[u8]| {
    let u = UdpPacket::new_unchecked(data);
    let _ = (
        u.payload(),
        u.verify_checksum(&SRC, &DST),
        u.len(),
        u.is_empty(),
    );
    let _ = UdpRepr::parse(&u, &SRC, &DST, &ChecksumCaps::ignored());

    let Ok(p) = UdpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.checksum(),
        p.verify_checksum(&SRC, &DST),
    );
    assert_eq!(p.payload().len() + 8, usize::from(p.len()));

    let strict = UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default());
    let Ok(r) = UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()) else {
        return;
    };
    assert_eq!(strict.is_ok(), p.verify_checksum(&SRC, &DST));
    let payload = p.payload();
    let mut buf = vec![0u8; r.header_len() + payload.len()];
    r.emit(
        &mut UdpPacket::new_unchecked(&mut buf[..]),
        &SRC,
        &DST,
        payload.len(),
        |b| b.copy_from_slice(payload),
        &ChecksumCaps::default(),
    );
    let q = UdpPacket::new_checked(&buf[..]).expect("checks");
    assert_eq!(
        UdpRepr::parse(&q, &SRC, &DST, &ChecksumCaps::default()).expect("round trip"),
        r
    );
    assert_eq!(q.payload(), payload);
});
