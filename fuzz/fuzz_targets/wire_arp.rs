#![no_main]
//! ARP: every getter, parse, emit into `buffer_len()` bytes, parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ArpOperation, ArpPacket, ArpRepr};

fuzz_target!(|data: &[u8]| {
    let u = ArpPacket::new_unchecked(data);
    let _ = (
        u.source_hardware_addr(),
        u.source_protocol_addr(),
        u.target_hardware_addr(),
        u.target_protocol_addr(),
    );
    let _ = ArpRepr::parse(&u);

    let Ok(p) = ArpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.hardware_type(),
        p.protocol_type(),
        p.hardware_len(),
        p.protocol_len(),
    );
    let op = p.operation();
    assert_eq!(ArpOperation::from(u16::from(op)), op);
    assert_eq!(p.source_hardware_addr().len(), p.hardware_len());
    assert_eq!(p.source_protocol_addr().len(), p.protocol_len());
    assert_eq!(p.target_hardware_addr().len(), p.hardware_len());
    assert_eq!(p.target_protocol_addr().len(), p.protocol_len());

    let Ok(r) = ArpRepr::parse(&p) else { return };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
    assert_eq!(&buf[..], &data[..28], "emit writes the packet it parsed");
    let back =
        ArpRepr::parse(&ArpPacket::new_checked(&buf[..]).expect("checks")).expect("round trip");
    assert_eq!(back, r);
});
