#![no_main]
//! ARP: parse, read every field, emit and parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ArpPacket, ArpRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = ArpPacket::new_checked(data) else { return };
    let _ = (p.hardware_type(), p.protocol_type(), p.operation(), p.source_hardware_addr(), p.target_protocol_addr());
    let Ok(r) = ArpRepr::parse(&p) else { return };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
    assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&buf[..]).expect("checks")).expect("round trip"), r);
});
