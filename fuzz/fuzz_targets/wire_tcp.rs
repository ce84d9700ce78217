#![no_main]
//! TCP and its options: parse, emit and parse again.
use libfuzzer_sys::fuzz_target;
use softoe_wire::{ChecksumCaps, Ipv4Address, TcpOption, TcpPacket, TcpRepr};

const SRC: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const DST: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok((r, _)) = TcpOption::parse(rest) {
        if r.len() >= rest.len() {
            break;
        }
        rest = r;
    }
    let Ok(p) = TcpPacket::new_checked(data) else { return };
    let _ = (p.options(), p.payload(), p.segment_len(), p.verify_checksum(&SRC, &DST), p.urgent_at());
    let Ok(r) = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()) else { return };
    let _ = format!("{r}");
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), &SRC, &DST, &ChecksumCaps::default());
    let back = TcpRepr::parse(&TcpPacket::new_checked(&buf[..]).expect("checks"), &SRC, &DST, &ChecksumCaps::default())
        .expect("what we emit parses");
    // SYN options appear on any segment in the input; what we emit keeps
    // the SACK blocks that fit, so compare what must survive.
    assert_eq!((back.src_port, back.dst_port, back.control, back.seq_number, back.ack_number), (r.src_port, r.dst_port, r.control, r.seq_number, r.ack_number));
    assert_eq!((back.window_len, back.max_seg_size, back.window_scale, back.timestamp, back.payload), (r.window_len, r.max_seg_size, r.window_scale, r.timestamp, r.payload));
});
