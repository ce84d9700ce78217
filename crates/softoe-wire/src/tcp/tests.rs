use super::*;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;
use proptest::prelude::*;

const SRC: Ipv4Address = Ipv4Address::new(192, 168, 1, 1);
const DST: Ipv4Address = Ipv4Address::new(192, 168, 1, 2);

/// PSH+ACK with an MSS option and four bytes of payload; checksum computed
/// by hand for 192.168.1.1 → 192.168.1.2.
const SEGMENT: [u8; 28] = [
    0xbf, 0x00, 0x00, 0x50, // ports 48896 → 80
    0x01, 0x23, 0x45, 0x67, // seq
    0x89, 0xab, 0xcd, 0xef, // ack
    0x60, 0x18, 0x01, 0x23, // offset 6, PSH ACK, window 0x123
    0x0b, 0x20, 0x00, 0x00, // checksum, urgent
    0x02, 0x04, 0x05, 0xb4, // MSS 1460
    0xaa, 0x00, 0x00, 0xff, // payload
];

/// A SYN from Linux 6.x: MSS 1460, SACKOK TS, NOP WS 7 (checksum zero here).
const LINUX_SYN: [u8; 40] = [
    0xc1, 0x5c, 0x00, 0x50, 0x9c, 0x7a, 0x54, 0x21, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0,
    0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x6b, 0x2a, 0x1f, 0x44,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
];

fn with_checksum(mut b: Vec<u8>) -> Vec<u8> {
    TcpPacket::new_unchecked(&mut b[..]).fill_checksum(&SRC, &DST);
    b
}

fn parse(b: &[u8]) -> Result<TcpRepr<'_>> {
    TcpRepr::parse(
        &TcpPacket::new_checked(b)?,
        &SRC,
        &DST,
        &ChecksumCaps::default(),
    )
}

const BASE: TcpRepr<'static> = TcpRepr {
    src_port: 1,
    dst_port: 2,
    control: TcpControl::None,
    psh: false,
    seq_number: TcpSeqNumber(1),
    ack_number: None,
    window_len: 0,
    window_scale: None,
    max_seg_size: None,
    sack_permitted: false,
    sack_ranges: [None; 4],
    timestamp: None,
    payload: &[],
};

#[test]
fn deconstruct() {
    let p = TcpPacket::new_checked(&SEGMENT[..]).unwrap();
    assert_eq!(p.src_port(), 48896);
    assert_eq!(p.dst_port(), 80);
    assert_eq!(p.seq_number(), TcpSeqNumber(0x0123_4567));
    assert_eq!(p.ack_number(), TcpSeqNumber(0x89ab_cdef));
    assert_eq!(p.header_len(), 24);
    assert!(p.psh() && p.ack());
    assert!(!(p.fin() || p.syn() || p.rst() || p.urg() || p.ece() || p.cwr()));
    assert_eq!(p.window_len(), 0x0123);
    assert_eq!(p.checksum(), 0x0b20);
    assert_eq!(p.urgent_at(), 0);
    assert_eq!(p.options(), &[0x02, 0x04, 0x05, 0xb4]);
    assert_eq!(p.payload(), &[0xaa, 0x00, 0x00, 0xff]);
    assert_eq!(p.segment_len(), 4);
    assert!(p.verify_checksum(&SRC, &DST));
    assert!(!p.verify_checksum(&SRC, &Ipv4Address::new(192, 168, 1, 3)));
    assert_eq!(p.clone().into_inner(), &SEGMENT[..]);
}

#[test]
fn construct() {
    let mut b = [0xffu8; 28];
    let mut p = TcpPacket::new_unchecked(&mut b[..]);
    p.set_src_port(48896);
    p.set_dst_port(80);
    p.set_seq_number(TcpSeqNumber(0x0123_4567));
    p.set_ack_number(TcpSeqNumber(0x89ab_cdef));
    p.set_header_len(24);
    p.clear_flags();
    p.set_fin(true);
    p.set_syn(true);
    p.set_rst(true);
    p.set_urg(true);
    p.set_ece(true);
    p.set_cwr(true);
    p.set_fin(false);
    p.set_syn(false);
    p.set_rst(false);
    p.set_urg(false);
    p.set_ece(false);
    p.set_cwr(false);
    p.set_psh(true);
    p.set_ack(true);
    // The reserved bits were 0xf from the 0xff fill; clear them by hand.
    let raw = p.raw_flags();
    p.set_raw_flags(raw & 0xf0ff);
    p.set_window_len(0x0123);
    p.set_urgent_at(0);
    p.options_mut().copy_from_slice(&[0x02, 0x04, 0x05, 0xb4]);
    p.payload_mut().copy_from_slice(&[0xaa, 0x00, 0x00, 0xff]);
    p.fill_checksum(&SRC, &DST);
    assert_eq!(&p.into_inner()[..], &SEGMENT[..]);
}

#[test]
fn parse_fixture() {
    let r = parse(&SEGMENT).unwrap();
    assert_eq!(
        r,
        TcpRepr {
            src_port: 48896,
            dst_port: 80,
            psh: true,
            seq_number: TcpSeqNumber(0x0123_4567),
            ack_number: Some(TcpSeqNumber(0x89ab_cdef)),
            window_len: 0x123,
            max_seg_size: Some(1460),
            payload: &[0xaa, 0x00, 0x00, 0xff],
            ..BASE
        }
    );
    // Emitting gives the fixture back, byte for byte.
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(
        &mut TcpPacket::new_unchecked(&mut out[..]),
        &SRC,
        &DST,
        &ChecksumCaps::default(),
    );
    assert_eq!(out, SEGMENT);
}

#[test]
fn linux_syn_round_trips_byte_for_byte() {
    let b = with_checksum(LINUX_SYN.to_vec());
    let r = parse(&b).unwrap();
    assert_eq!(r.control, TcpControl::Syn);
    assert_eq!((r.src_port, r.dst_port), (49500, 80));
    assert_eq!(r.ack_number, None);
    assert_eq!(r.max_seg_size, Some(1460));
    assert!(r.sack_permitted);
    assert_eq!(r.window_scale, Some(7));
    assert_eq!(
        r.timestamp,
        Some(TcpTimestamp {
            tsval: 0x6b2a_1f44,
            tsecr: 0
        })
    );
    assert_eq!(r.header_len(), 40);
    let mut out = vec![0u8; r.buffer_len()];
    r.emit(
        &mut TcpPacket::new_unchecked(&mut out[..]),
        &SRC,
        &DST,
        &ChecksumCaps::default(),
    );
    assert_eq!(out, b);
    assert_eq!(
        r.to_string(),
        "TCP src=49500 dst=80 seq=2625262625 win=64240 len=0 [S] mss=1460 sackOK TS=1797922628/0 wscale=7"
    );
    assert_eq!(
        TcpPacket::new_unchecked(&b[..]).to_string(),
        "TCP src=49500 dst=80 seq=2625262625 win=64240 len=0 [S] mss=1460 sackOK TS=1797922628/0 wscale=7"
    );
}

#[test]
fn syn_option_layouts() {
    let emit = |r: &TcpRepr<'_>| {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(
            &mut TcpPacket::new_unchecked(&mut b[..]),
            &SRC,
            &DST,
            &ChecksumCaps::default(),
        );
        assert_eq!(parse(&b).unwrap(), *r);
        b[20..].to_vec()
    };
    let syn = TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(536),
        ..BASE
    };
    assert_eq!(emit(&syn), [2, 4, 2, 24]);
    let r = TcpRepr {
        sack_permitted: true,
        ..syn
    };
    assert_eq!(emit(&r), [2, 4, 2, 24, 1, 1, 4, 2]);
    let r = TcpRepr {
        timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 0 }),
        window_scale: Some(0),
        ..syn
    };
    assert_eq!(
        emit(&r),
        [2, 4, 2, 24, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 0]
    );
}

#[test]
fn data_segment_with_sack_blocks() {
    let payload = [0xabu8; 100];
    let r = TcpRepr {
        src_port: 80,
        dst_port: 49500,
        control: TcpControl::Fin,
        psh: true,
        seq_number: TcpSeqNumber(u32::MAX),
        ack_number: Some(TcpSeqNumber(5)),
        window_len: 1000,
        sack_ranges: [Some((1, 2)), Some((3, 4)), Some((5, 6)), Some((7, 8))],
        timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 2 }),
        payload: &payload,
        ..BASE
    };
    // With timestamps only three SACK blocks fit.
    assert_eq!(r.sack_blocks_emitted(), 3);
    assert_eq!(r.header_len(), 20 + 12 + 4 + 24);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(
        &mut TcpPacket::new_unchecked(&mut b[..]),
        &SRC,
        &DST,
        &ChecksumCaps::default(),
    );
    assert_eq!(
        &b[20..40],
        &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 1, 5, 26, 0, 0, 0, 1]
    );
    let back = parse(&b).unwrap();
    assert_eq!(
        back.sack_ranges,
        [Some((1, 2)), Some((3, 4)), Some((5, 6)), None]
    );
    assert_eq!(back.payload, &payload[..]);
    assert_eq!(back.segment_len(), 101);
    assert_eq!(TcpPacket::new_unchecked(&b[..]).segment_len(), 101);
    assert!(back.psh);
    assert_eq!(
        back.to_string(),
        "TCP src=80 dst=49500 seq=4294967295 ack=5 win=1000 len=100 [FP.] TS=1/2 sack=1-2 sack=3-4 sack=5-6"
    );
    // Without timestamps all four fit, in 36 option bytes.
    let r = TcpRepr {
        timestamp: None,
        ..r
    };
    assert_eq!(r.sack_blocks_emitted(), 4);
    assert_eq!(r.header_len(), 56);
    // Beside every SYN option, two.
    let r = TcpRepr {
        max_seg_size: Some(1),
        window_scale: Some(1),
        sack_permitted: true,
        timestamp: Some(TcpTimestamp::default()),
        ..r
    };
    assert_eq!(r.sack_blocks_emitted(), 2);
    assert_eq!(r.header_len(), 60);
}

#[test]
fn impossible_flags_ports_and_options() {
    let base = with_checksum(LINUX_SYN.to_vec());
    let check = |mutate: &dyn Fn(&mut Vec<u8>)| {
        let mut b = base.clone();
        mutate(&mut b);
        let b = with_checksum(b);
        parse(&b).map(|r| (r.window_scale, r.control, r.ack_number))
    };
    assert!(check(&|b| b[13] = 0x03).is_err(), "SYN+FIN");
    assert!(check(&|b| b[13] = 0x06).is_err(), "SYN+RST");
    assert!(check(&|b| b[13] = 0x05).is_err(), "FIN+RST");
    assert!(check(&|b| b[13] = 0x07).is_err(), "SYN+FIN+RST");
    assert!(check(&|b| b[0..2].fill(0)).is_err(), "src port 0");
    assert!(check(&|b| b[2..4].fill(0)).is_err(), "dst port 0");
    assert!(check(&|b| b[21] = 3).is_err(), "MSS of length 3");
    assert!(check(&|b| b[21] = 0).is_err(), "option length 0");
    assert!(check(&|b| b[21] = 1).is_err(), "option length 1");
    assert!(check(&|b| b[38] = 40).is_err(), "option past the header");
    assert!(check(&|b| b[27] = 9).is_err(), "timestamp of length 9");
    assert_eq!(
        check(&|b| b[39] = 200).unwrap().0,
        Some(14),
        "window scale clamped"
    );
    // Flags that do not change the meaning: URG, ECE, CWR.
    assert_eq!(
        check(&|b| b[13] = 0x02 | 0x20 | 0x40 | 0x80).unwrap(),
        (Some(7), TcpControl::Syn, None)
    );
    assert_eq!(
        check(&|b| b[13] = 0x11).unwrap(),
        (Some(7), TcpControl::Fin, Some(TcpSeqNumber(0)))
    );
    assert_eq!(check(&|b| b[13] = 0x04).unwrap().1, TcpControl::Rst);
    assert_eq!(check(&|b| b[13] = 0x00).unwrap().1, TcpControl::None);
    // Garbage after end-of-list is padding.
    let r = check(&|b| {
        b[36..40].copy_from_slice(&[0, 2, 0, 0]);
    })
    .unwrap();
    assert_eq!(r.0, None);
    // Unknown options are skipped.
    let r = check(&|b| b[36..40].copy_from_slice(&[200, 4, 9, 9])).unwrap();
    assert_eq!(r.0, None);
}

#[test]
fn truncated_and_impossible_lengths() {
    let b = with_checksum(LINUX_SYN.to_vec());
    for n in 0..20 {
        assert!(TcpPacket::new_checked(&b[..n]).is_err(), "{n}");
        assert!(parse(&b[..n]).is_err());
    }
    // The header claims 40 bytes.
    for n in 20..40 {
        assert!(TcpPacket::new_checked(&b[..n]).is_err(), "{n}");
    }
    // Data offset below 5 or beyond the buffer.
    for off in [0u8, 1, 4, 11, 15] {
        let mut b = b.clone();
        b[12] = off << 4;
        assert!(TcpPacket::new_checked(&b[..]).is_err(), "{off}");
        // Unchecked views answer anyway.
        let p = TcpPacket::new_unchecked(&b[..]);
        let _ = (p.options(), p.payload(), p.segment_len(), p.to_string());
    }
    // Every accessor on a buffer too short for anything.
    let p = TcpPacket::new_unchecked(&[0u8; 3][..]);
    assert_eq!(
        (p.seq_number(), p.header_len(), p.options()),
        (TcpSeqNumber(0), 0, &[][..])
    );
    let mut short = [0u8; 7];
    let mut p = TcpPacket::new_unchecked(&mut short[..]);
    p.set_ack_number(TcpSeqNumber(1));
    p.set_checksum(1);
    p.fill_checksum(&SRC, &DST);
    assert!(p.options_mut().is_empty());
    // Bad checksum: an error unless the port verified it.
    let mut b = b.clone();
    b[5] ^= 1;
    let p = TcpPacket::new_checked(&b[..]).unwrap();
    assert!(TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).is_err());
    assert!(TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()).is_ok());
}

#[test]
fn emit_header_leaves_payload_alone() {
    let r = TcpRepr {
        ack_number: Some(TcpSeqNumber(9)),
        timestamp: Some(TcpTimestamp { tsval: 3, tsecr: 4 }),
        payload: b"ignored",
        ..BASE
    };
    let mut b = vec![0x5au8; r.header_len() + 10];
    let mut p = TcpPacket::new_unchecked(&mut b[..]);
    r.emit_header(&mut p, 10);
    assert_eq!(p.checksum(), 0);
    assert_eq!(p.payload(), &[0x5a; 10]);
    assert_eq!(p.header_len(), 32);
    // Into a buffer of exactly header_len(), and into shorter ones.
    let mut b = vec![0u8; r.header_len()];
    r.emit_header(&mut TcpPacket::new_unchecked(&mut b[..]), 1000);
    let p = TcpPacket::new_checked(&b[..]).unwrap();
    assert_eq!(p.options(), &[1, 1, 8, 10, 0, 0, 0, 3, 0, 0, 0, 4]);
    for n in 0..r.header_len() {
        let mut b = vec![0u8; n];
        r.emit_header(&mut TcpPacket::new_unchecked(&mut b[..]), 0);
        r.emit(
            &mut TcpPacket::new_unchecked(&mut b[..]),
            &SRC,
            &DST,
            &ChecksumCaps::default(),
        );
    }
}

#[test]
fn offloaded_checksum_is_pseudo_header() {
    let payload = [1u8; 33];
    let r = TcpRepr {
        ack_number: Some(TcpSeqNumber(1)),
        payload: &payload,
        ..BASE
    };
    let mut b = vec![0u8; r.buffer_len()];
    let caps = ChecksumCaps {
        tcp: crate::Checksum::Rx,
        ..ChecksumCaps::default()
    };
    r.emit(&mut TcpPacket::new_unchecked(&mut b[..]), &SRC, &DST, &caps);
    let p = TcpPacket::new_checked(&b[..]).unwrap();
    assert_eq!(
        p.checksum(),
        checksum::pseudo_header(SRC, DST, IpProtocol::Tcp, 53)
    );
    // What the port does with NEEDS_CSUM: sum from the TCP header on.
    let s = !checksum::data(&b);
    b[16..18].copy_from_slice(&s.to_be_bytes());
    assert!(
        TcpPacket::new_checked(&b[..])
            .unwrap()
            .verify_checksum(&SRC, &DST)
    );
}

#[test]
fn super_segment_for_tso() {
    // 64 KiB of payload behind a 32-byte header: a TSO super-segment.
    let payload: Vec<u8> = (0..65_483u32).map(|i| (i % 251) as u8).collect();
    let r = TcpRepr {
        ack_number: Some(TcpSeqNumber(7)),
        timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 1 }),
        payload: &payload,
        ..BASE
    };
    assert_eq!(r.buffer_len(), 65_515);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(
        &mut TcpPacket::new_unchecked(&mut b[..]),
        &SRC,
        &DST,
        &ChecksumCaps::default(),
    );
    assert_eq!(parse(&b).unwrap(), r);
    // A longer buffer is written up to buffer_len(); the checksum covers
    // exactly the segment.
    let mut big = vec![0x77u8; r.buffer_len() + 5];
    r.emit(
        &mut TcpPacket::new_unchecked(&mut big[..]),
        &SRC,
        &DST,
        &ChecksumCaps::default(),
    );
    assert_eq!(&big[..b.len()], &b[..]);
}

/// What a parse of an emitted `r` gives: SACK blocks compacted and cut to
/// what fits, window scale clamped.
fn normalized(r: TcpRepr<'_>) -> TcpRepr<'_> {
    let mut sack: TcpSackRanges = [None; 4];
    let n = r.sack_blocks_emitted();
    for (slot, b) in sack.iter_mut().zip(r.sack_ranges.iter().flatten().take(n)) {
        *slot = Some(*b);
    }
    TcpRepr {
        sack_ranges: sack,
        window_scale: r.window_scale.map(|w| w.min(MAX_WINDOW_SCALE)),
        ..r
    }
}

fn arb_repr(payload: &[u8]) -> impl Strategy<Value = TcpRepr<'_>> {
    (
        (
            1u16..,
            1u16..,
            0u8..4,
            any::<bool>(),
            any::<u32>(),
            proptest::option::of(any::<u32>()),
        ),
        (
            any::<u16>(),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u16>()),
            any::<bool>(),
        ),
        (
            proptest::option::of(any::<(u32, u32)>()),
            proptest::array::uniform4(proptest::option::of(any::<(u32, u32)>())),
            0..=payload.len(),
        ),
    )
        .prop_map(
            move |((sp, dp, c, psh, seq, ack), (win, ws, mss, sack_ok), (ts, sack, plen))| {
                TcpRepr {
                    src_port: sp,
                    dst_port: dp,
                    control: [
                        TcpControl::None,
                        TcpControl::Syn,
                        TcpControl::Fin,
                        TcpControl::Rst,
                    ][usize::from(c)],
                    psh,
                    seq_number: TcpSeqNumber(seq),
                    ack_number: ack.map(TcpSeqNumber),
                    window_len: win,
                    window_scale: ws,
                    max_seg_size: mss,
                    sack_permitted: sack_ok,
                    sack_ranges: sack,
                    timestamp: ts.map(|(tsval, tsecr)| TcpTimestamp { tsval, tsecr }),
                    payload: &payload[..plen],
                }
            },
        )
}

proptest! {
    #[test]
    fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
        let p = TcpPacket::new_unchecked(&bytes[..]);
        let _ = (p.options(), p.payload(), p.segment_len(), p.to_string());
        if let Ok(p) = TcpPacket::new_checked(&bytes[..]) {
            let _ = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default());
            if let Ok(r) = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()) {
                let _ = r.to_string();
                prop_assert!(r.src_port != 0 && r.dst_port != 0);
            }
        }
    }

    #[test]
    fn parse_never_panics_with_good_checksum(mut bytes in proptest::collection::vec(any::<u8>(), 20..100),
                                             off in 5u8..16) {
        bytes[12] = (off << 4) | (bytes[12] & 0x0f);
        TcpPacket::new_unchecked(&mut bytes[..]).fill_checksum(&SRC, &DST);
        if let Ok(p) = TcpPacket::new_checked(&bytes[..]) {
            let _ = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default());
        }
    }

    #[test]
    fn emit_parse_roundtrip(r in arb_repr(b"payload bytes, some of them")) {
        prop_assert!(r.header_len() <= MAX_HEADER_LEN && r.header_len() % 4 == 0);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut TcpPacket::new_unchecked(&mut b[..]), &SRC, &DST, &ChecksumCaps::default());
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        prop_assert_eq!(p.header_len(), r.header_len());
        let back = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).unwrap();
        prop_assert_eq!(back, normalized(r));
        prop_assert_eq!(p.segment_len(), r.segment_len());
        // emit_header writes the same header.
        let mut h = vec![0u8; r.header_len()];
        r.emit_header(&mut TcpPacket::new_unchecked(&mut h[..]), r.payload.len());
        prop_assert_eq!(&h[..16], &b[..16]);
        prop_assert_eq!(&h[18..], &b[18..r.header_len()]);
    }
}
