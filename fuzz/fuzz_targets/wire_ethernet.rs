#![no_main]
//! Ethernet: every getter, parse, emit into `buffer_len()` bytes, parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{EtherType, EthernetFrame, EthernetRepr};

fuzz_target!(|data: &[u8]| {
    // Unchecked views answer too, without panicking.
    let u = EthernetFrame::new_unchecked(data);
    let _ = (
        u.dst_addr(),
        u.src_addr(),
        u.ethertype(),
        u.vlan_tci(),
        u.payload(),
        u.header_len(),
    );

    let Ok(f) = EthernetFrame::new_checked(data) else {
        return;
    };
    let (dst, src, ty, tci) = (f.dst_addr(), f.src_addr(), f.ethertype(), f.vlan_tci());
    let _ = (
        dst.to_string(),
        dst.is_unicast(),
        dst.is_multicast(),
        dst.is_broadcast(),
        dst.is_local(),
    );
    assert_eq!(f.payload().len() + f.header_len(), data.len());
    assert_eq!(EtherType::from(u16::from(ty)), ty);

    let r = EthernetRepr::parse(&f).expect("a checked frame parses");
    assert_eq!(
        (r.dst_addr, r.src_addr, r.ethertype, r.vlan_tci),
        (dst, src, ty, tci)
    );
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    assert_eq!(
        &buf[..],
        &data[..r.buffer_len()],
        "emit writes the header it parsed"
    );
    let back =
        EthernetRepr::parse(&EthernetFrame::new_checked(&buf[..]).expect("emitted header checks"))
            .expect("round trip");
    assert_eq!(back, r);
});
