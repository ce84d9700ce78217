#![no_main]
//! ARP+: every getter, parse, emit into `buffer_len()` bytes, parse again.
use libfuzzer_sys::fuzz_target;
use softoe_bond::wire::{ArppPacket, ArppRepr, ArppType, MAX_MEMBERS};

fuzz_target!(|data: &[u8]| {
    let u = ArppPacket::new_unchecked(data);
    let _ = (
        u.hardware_len(),
        u.protocol_len(),
        u.member_count(),
        u.seq(),
        u.sender_ip(),
        u.target_ip(),
        u.realtime(),
        u.member(0),
        u.member(usize::MAX),
    );
    let t = u.packet_type();
    assert_eq!(ArppType::from(u8::from(t)), t);
    let _ = u.check_len();

    let Ok(r) = ArppRepr::parse(&u) else { return };
    assert!(
        u.check_len().is_ok(),
        "parse accepted what check_len refuses"
    );
    assert!((1..=MAX_MEMBERS).contains(&r.members.len()));
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut ArppPacket::new_unchecked(&mut buf[..]));
    // Every byte comes back but the real-time bits past the last member,
    // which parse drops.
    let mut want = data[..r.buffer_len()].to_vec();
    want[14..16].copy_from_slice(&r.members.realtime_mask().to_be_bytes());
    assert_eq!(&buf[..], &want[..], "emit writes the message it parsed");
    let back =
        ArppRepr::parse(&ArppPacket::new_checked(&buf[..]).expect("checks")).expect("round trip");
    assert_eq!(back, r);
});
