#![no_main]
//! IPv4: every getter, parse (with and without checksum checks), emit into
//! `buffer_len()` + payload bytes, parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ChecksumCaps, IpProtocol, Ipv4Packet, Ipv4Repr};

fuzz_target!(|data: &[u8]| {
    let u = Ipv4Packet::new_unchecked(data);
    let _ = (u.payload(), u.src_addr(), u.dst_addr(), u.verify_checksum());
    let _ = Ipv4Repr::parse(&u, &ChecksumCaps::ignored());

    let Ok(p) = Ipv4Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.version(),
        p.header_len(),
        p.dscp(),
        p.ecn(),
        p.total_len(),
        p.ident(),
    );
    let _ = (
        p.dont_frag(),
        p.more_frags(),
        p.frag_offset(),
        p.is_fragment(),
        p.hop_limit(),
    );
    let _ = (
        p.checksum(),
        p.src_addr().to_string(),
        p.dst_addr(),
        p.verify_checksum(),
    );
    let proto = p.next_header();
    assert_eq!(IpProtocol::from(u8::from(proto)), proto);
    assert_eq!(
        p.payload().len() + p.header_len(),
        usize::from(p.total_len())
    );

    let strict = Ipv4Repr::parse(&p, &ChecksumCaps::default());
    let Ok(r) = Ipv4Repr::parse(&p, &ChecksumCaps::ignored()) else {
        return;
    };
    assert_eq!(strict.is_ok(), p.verify_checksum());
    assert_eq!(r.payload_len, p.payload().len());
    let mut buf = vec![0u8; r.buffer_len() + r.payload_len];
    let mut q = Ipv4Packet::new_unchecked(&mut buf[..]);
    r.emit(&mut q, &ChecksumCaps::default());
    q.payload_mut().copy_from_slice(p.payload());
    let q = Ipv4Packet::new_checked(&buf[..]).expect("emitted packet checks");
    assert_eq!(q.payload(), p.payload());
    let back = Ipv4Repr::parse(&q, &ChecksumCaps::default()).expect("round trip");
    assert_eq!(back, r);
});
