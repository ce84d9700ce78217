#![no_main]
//! Ethernet: parse, read every field, emit and parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{EthernetFrame, EthernetRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = EthernetFrame::new_checked(data) else { return };
    let _ = (f.dst_addr(), f.src_addr(), f.ethertype(), f.vlan_tci(), f.payload(), f.header_len());
    let Ok(r) = EthernetRepr::parse(&f) else { return };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    let back = EthernetRepr::parse(&EthernetFrame::new_checked(&buf[..]).expect("emitted header checks")).expect("round trip");
    assert_eq!(back, r);
});
