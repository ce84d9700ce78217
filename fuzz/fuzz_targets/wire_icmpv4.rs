#![no_main]
//! ICMPv4: every getter, parse, emit into `buffer_len()` bytes, parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ChecksumCaps, Icmpv4Message, Icmpv4Packet, Icmpv4Repr};

fuzz_target!(|data: &[u8]| {
    let u = Icmpv4Packet::new_unchecked(data);
    let _ = (u.msg_type(), u.msg_code(), u.data(), u.verify_checksum());
    let _ = Icmpv4Repr::parse(&u, &ChecksumCaps::ignored());

    let Ok(p) = Icmpv4Packet::new_checked(data) else {
        return;
    };
    let ty = p.msg_type();
    assert_eq!(Icmpv4Message::from(u8::from(ty)), ty);
    let _ = (
        p.msg_code(),
        p.checksum(),
        p.echo_ident(),
        p.echo_seq_no(),
        p.verify_checksum(),
    );
    assert_eq!(p.data().len() + 8, data.len());

    let strict = Icmpv4Repr::parse(&p, &ChecksumCaps::default());
    let Ok(r) = Icmpv4Repr::parse(&p, &ChecksumCaps::ignored()) else {
        return;
    };
    assert_eq!(strict.is_ok(), p.verify_checksum());
    assert_eq!(r.buffer_len(), data.len());
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(
        &mut Icmpv4Packet::new_unchecked(&mut buf[..]),
        &ChecksumCaps::default(),
    );
    let back = Icmpv4Repr::parse(
        &Icmpv4Packet::new_checked(&buf[..]).expect("checks"),
        &ChecksumCaps::default(),
    )
    .expect("round trip");
    assert_eq!(back, r);
});
