#![no_main]
//! TCP and its options: every getter, parse, emit into `buffer_len()` bytes,
//! parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ChecksumCaps, Ipv4Address, TcpOption, TcpPacket, TcpRepr, TcpSackRanges};

const SRC: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const DST: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

fuzz_target!(|data: &[u8]| {
    // Options one by one, as a stack walking them would.
    let mut rest = data;
    while let Ok((r, opt)) = TcpOption::parse(rest) {
        assert!(r.len() < rest.len());
        let mut out = vec![0u8; opt.buffer_len()];
        assert!(opt.emit(&mut out).is_empty());
        rest = r;
    }

    let u = TcpPacket::new_unchecked(data);
    let _ = (u.options(), u.payload(), u.segment_len(), u.to_string());
    let _ = TcpRepr::parse(&u, &SRC, &DST, &ChecksumCaps::ignored());

    let Ok(p) = TcpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.seq_number(),
        p.ack_number(),
        p.header_len(),
    );
    let _ = (
        p.fin(),
        p.syn(),
        p.rst(),
        p.psh(),
        p.ack(),
        p.urg(),
        p.ece(),
        p.cwr(),
    );
    let _ = (
        p.window_len(),
        p.checksum(),
        p.urgent_at(),
        p.options(),
        p.payload(),
    );
    let _ = (
        p.segment_len(),
        p.verify_checksum(&SRC, &DST),
        p.to_string(),
    );
    assert_eq!(p.header_len() + p.payload().len(), data.len());

    let strict = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default());
    let Ok(r) = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()) else {
        return;
    };
    assert_eq!(strict.is_ok(), p.verify_checksum(&SRC, &DST));
    assert!(r.src_port != 0 && r.dst_port != 0);
    assert!(r.window_scale.is_none_or(|w| w <= 14));
    assert_eq!(r.payload, p.payload());
    let _ = r.to_string();

    let hl = r.header_len();
    assert!((20..=60).contains(&hl) && hl % 4 == 0);
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(
        &mut TcpPacket::new_unchecked(&mut buf[..]),
        &SRC,
        &DST,
        &ChecksumCaps::default(),
    );
    let q = TcpPacket::new_checked(&buf[..]).expect("emitted segment checks");
    assert_eq!(q.header_len(), hl);
    let back =
        TcpRepr::parse(&q, &SRC, &DST, &ChecksumCaps::default()).expect("what we emit parses");
    // Emitting keeps the SACK blocks that fit beside the other options.
    let mut sack: TcpSackRanges = [None; 4];
    for (slot, b) in sack
        .iter_mut()
        .zip(r.sack_ranges.iter().flatten().take(r.sack_blocks_emitted()))
    {
        *slot = Some(*b);
    }
    assert_eq!(
        back,
        TcpRepr {
            sack_ranges: sack,
            ..r
        }
    );

    // emit_header writes the same header into exactly header_len() bytes.
    let mut h = vec![0u8; hl];
    r.emit_header(&mut TcpPacket::new_unchecked(&mut h[..]), r.payload.len());
    assert_eq!(&h[..16], &buf[..16]);
    assert_eq!(&h[18..], &buf[18..hl]);
});
