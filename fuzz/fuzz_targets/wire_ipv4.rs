#![no_main]
//! IPv4: parse (with and without checksum checks), emit and parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ChecksumCaps, Ipv4Packet, Ipv4Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Ipv4Packet::new_checked(data) else { return };
    let _ = (p.payload(), p.is_fragment(), p.frag_offset(), p.dscp(), p.ecn(), p.verify_checksum());
    let _ = Ipv4Repr::parse(&p, &ChecksumCaps::default());
    let Ok(r) = Ipv4Repr::parse(&p, &ChecksumCaps::ignored()) else { return };
    let mut buf = vec![0u8; r.buffer_len() + r.payload_len];
    r.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]), &ChecksumCaps::default());
    let back = Ipv4Repr::parse(&Ipv4Packet::new_checked(&buf[..]).expect("checks"), &ChecksumCaps::default()).expect("round trip");
    assert_eq!(back, r);
});
