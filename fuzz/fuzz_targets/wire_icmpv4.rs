#![no_main]
//! ICMPv4: parse, emit and parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ChecksumCaps, Icmpv4Packet, Icmpv4Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Icmpv4Packet::new_checked(data) else { return };
    let _ = (p.msg_type(), p.msg_code(), p.echo_ident(), p.data(), p.verify_checksum());
    let Ok(r) = Icmpv4Repr::parse(&p, &ChecksumCaps::ignored()) else { return };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]), &ChecksumCaps::default());
    let back = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&buf[..]).expect("checks"), &ChecksumCaps::default()).expect("round trip");
    assert_eq!(back, r);
});
