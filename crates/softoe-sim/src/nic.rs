//! The virtual NIC: what turns a stack's frames into wire frames and back.
//!
//! On transmit it does what a NIC with offloads does: cuts a TCP
//! super-segment into MSS-sized segments (TSO), fixing each copy's IPv4 total
//! length, identification and checksum, TCP sequence number and flags (FIN
//! and PSH on the last segment only, CWR on the first), and completes partial
//! checksums. On receive it can coalesce consecutive in-order TCP segments
//! of one flow into one large frame (GRO), marked checksum-verified.

use softoe_wire::checksum;
use softoe_wire::{IpProtocol, Ipv4Address};

/// Offsets of an untagged Ethernet/IPv4/TCP frame.
const ETH: usize = 14;

fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(&[x, y]) => u16::from_be_bytes([x, y]),
        _ => 0,
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[w, x, y, z]) => u32::from_be_bytes([w, x, y, z]),
        _ => 0,
    }
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(d) = b.get_mut(at..at + 2) {
        d.copy_from_slice(&v.to_be_bytes());
    }
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    if let Some(d) = b.get_mut(at..at + 4) {
        d.copy_from_slice(&v.to_be_bytes());
    }
}

/// Where the IPv4 and TCP headers of a frame are, if it is Ethernet/IPv4/TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TcpLayout {
    pub(crate) ip: usize,
    pub(crate) tcp: usize,
    pub(crate) payload: usize,
    pub(crate) end: usize,
}

pub(crate) fn tcp_layout(f: &[u8]) -> Option<TcpLayout> {
    if be16(f, 12) != 0x0800 {
        return None;
    }
    let ip = ETH;
    let vihl = *f.get(ip)?;
    if vihl >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(vihl & 0x0f) * 4;
    let total = usize::from(be16(f, ip + 2));
    // A fragment is no TCP segment to cut or merge (MF, or an offset).
    if be16(f, ip + 6) & 0x3fff != 0 {
        return None;
    }
    if *f.get(ip + 9)? != 6 || ihl < 20 || total < ihl || ip + total > f.len() {
        return None;
    }
    let tcp = ip + ihl;
    let doff = usize::from(*f.get(tcp + 12)? >> 4) * 4;
    if doff < 20 || tcp + doff > ip + total {
        return None;
    }
    Some(TcpLayout {
        ip,
        tcp,
        payload: tcp + doff,
        end: ip + total,
    })
}

fn addrs(f: &[u8], l: &TcpLayout) -> (Ipv4Address, Ipv4Address) {
    (
        Ipv4Address::from_bits(be32(f, l.ip + 12)),
        Ipv4Address::from_bits(be32(f, l.ip + 16)),
    )
}

/// Fills the IPv4 header checksum and the full TCP checksum.
pub(crate) fn fill_tcp_checksums(f: &mut [u8], l: &TcpLayout) {
    put16(f, l.ip + 10, 0);
    let ihl = l.tcp - l.ip;
    let s = checksum::data(f.get(l.ip..l.ip + ihl).unwrap_or(&[]));
    put16(f, l.ip + 10, !s);
    let (src, dst) = addrs(f, l);
    put16(f, l.tcp + 16, 0);
    let seg = f.get(l.tcp..l.end).unwrap_or(&[]);
    let mut acc = checksum::Accumulator::new();
    acc.add_sum(checksum::pseudo_header(
        src,
        dst,
        IpProtocol::Tcp,
        seg.len() as u32,
    ));
    acc.add(seg);
    let s = !acc.finish();
    put16(f, l.tcp + 16, s);
}

/// Completes a partial checksum: sums from `start` to the end and stores the
/// complement at `start + offset` (the field holds the pseudo-header sum).
pub(crate) fn complete_partial_csum(f: &mut [u8], start: usize, offset: usize) {
    let s = !checksum::data(f.get(start..).unwrap_or(&[]));
    put16(f, start + offset, s);
}

/// TCP segmentation offload: cuts `frame` into segments of at most `mss`
/// payload bytes and pushes them to `out`. A frame that is not TCP/IPv4, or
/// needs no cutting, is passed through (with checksums completed).
pub(crate) fn segment(frame: &[u8], mss: u16, out: &mut Vec<Vec<u8>>) {
    let Some(l) = tcp_layout(frame) else {
        out.push(frame.to_vec());
        return;
    };
    let mss = usize::from(mss.max(1));
    let payload = frame.get(l.payload..l.end).unwrap_or(&[]);
    if payload.len() <= mss {
        let mut f = frame.get(..l.end).unwrap_or(frame).to_vec();
        fill_tcp_checksums(&mut f, &l);
        out.push(f);
        return;
    }
    let header = frame.get(..l.payload).unwrap_or(&[]);
    let seq0 = be32(frame, l.tcp + 4);
    let ident0 = be16(frame, l.ip + 4);
    let flags = *frame.get(l.tcp + 13).unwrap_or(&0);
    let n = payload.len().div_ceil(mss);
    for (i, chunk) in payload.chunks(mss).enumerate() {
        let mut f = Vec::with_capacity(header.len() + chunk.len());
        f.extend_from_slice(header);
        f.extend_from_slice(chunk);
        let total = (l.payload - l.ip + chunk.len()) as u16;
        put16(&mut f, l.ip + 2, total);
        put16(&mut f, l.ip + 4, ident0.wrapping_add(i as u16));
        put32(&mut f, l.tcp + 4, seq0.wrapping_add((i * mss) as u32));
        let last = i + 1 == n;
        let mut fl = flags;
        if !last {
            fl &= !(0x01 | 0x08); // FIN, PSH only on the last segment
        }
        if i > 0 {
            fl &= !0x80; // CWR only on the first
        }
        if let Some(b) = f.get_mut(l.tcp + 13) {
            *b = fl;
        }
        let seg_l = TcpLayout {
            end: l.payload + chunk.len(),
            ..l
        };
        fill_tcp_checksums(&mut f, &seg_l);
        out.push(f);
    }
}

/// Receive coalescing (GRO): merges runs of consecutive in-order segments of
/// one TCP flow in `frames`, as Linux's GRO does (every merged segment but the
/// last has the first one's size). Returns the frames to deliver, with the
/// segment size of those that are merges of several.
pub(crate) fn coalesce(frames: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Option<u16>)> {
    struct Acc {
        frame: Vec<u8>,
        seg: usize,
        count: u32,
        closed: bool,
    }
    let mut out: Vec<Acc> = Vec::with_capacity(frames.len());
    for f in frames {
        let len = tcp_layout(&f).map_or(0, |l| l.end - l.payload);
        if let Some(acc) = out.last_mut()
            && !acc.closed
            && len > 0
            && len <= acc.seg
            && try_merge(&mut acc.frame, &f)
        {
            acc.count += 1;
            acc.closed = len < acc.seg;
            continue;
        }
        out.push(Acc {
            frame: f,
            seg: len,
            count: 1,
            closed: len == 0,
        });
    }
    out.into_iter()
        .map(|mut a| {
            let gso = (a.count > 1).then(|| a.seg.min(usize::from(u16::MAX)) as u16);
            if a.count > 1
                && let Some(l) = tcp_layout(&a.frame)
            {
                // Once per merged frame, not once per segment merged in.
                fill_tcp_checksums(&mut a.frame, &l);
            }
            (a.frame, gso)
        })
        .collect()
}

/// Merges `next` onto `acc` if it continues the same flow in order.
fn try_merge(acc: &mut Vec<u8>, next: &[u8]) -> bool {
    let (Some(a), Some(b)) = (tcp_layout(acc), tcp_layout(next)) else {
        return false;
    };
    let a_flags = *acc.get(a.tcp + 13).unwrap_or(&0);
    let b_flags = *next.get(b.tcp + 13).unwrap_or(&0);
    // Only plain ACK (+PSH on the last) data segments.
    let plain = |fl: u8| fl & !(0x08 | 0x10) == 0;
    if !plain(a_flags) || !plain(b_flags) || a_flags & 0x08 != 0 {
        return false;
    }
    let same_flow = acc.get(a.ip + 12..a.ip + 20) == next.get(b.ip + 12..b.ip + 20)
        && acc.get(a.tcp..a.tcp + 4) == next.get(b.tcp..b.tcp + 4)
        && be32(acc, a.tcp + 8) == be32(next, b.tcp + 8)
        && (a.payload - a.tcp) == (b.payload - b.tcp);
    let a_len = a.end - a.payload;
    let b_len = b.end - b.payload;
    let in_order = be32(acc, a.tcp + 4).wrapping_add(a_len as u32) == be32(next, b.tcp + 4);
    let fits = (a.end - a.ip) + b_len <= 65_535;
    if !same_flow || !in_order || !fits || a_len == 0 || b_len == 0 {
        return false;
    }
    acc.truncate(a.end);
    acc.extend_from_slice(next.get(b.payload..b.end).unwrap_or(&[]));
    let total = (a.end - a.ip + b_len) as u16;
    put16(acc, a.ip + 2, total);
    // Take the later segment's window, ACK and flags (PSH), as GRO does.
    let win = be16(next, b.tcp + 14);
    put16(acc, a.tcp + 14, win);
    if let Some(x) = acc.get_mut(a.tcp + 13) {
        *x = b_flags;
    }
    // The checksums are filled once the run is merged (`coalesce`).
    true
}

/// Whether a frame's checksums are right (IPv4 header, and TCP/UDP/ICMP when
/// it is one of those). Frames that are not IPv4 pass.
pub(crate) fn verify_checksums(f: &[u8]) -> bool {
    use softoe_wire::{
        ChecksumCaps, EtherType, EthernetFrame, Icmpv4Packet, Icmpv4Repr, Ipv4Packet, Ipv4Repr,
        TcpPacket, UdpPacket,
    };
    let Ok(eth) = EthernetFrame::new_checked(f) else {
        return false;
    };
    if eth.ethertype() != EtherType::Ipv4 {
        return true;
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return false;
    };
    let Ok(repr) = Ipv4Repr::parse(&ip, &ChecksumCaps::default()) else {
        return false;
    };
    if ip.is_fragment() {
        // A NIC cannot vouch for a transport checksum it does not see whole.
        return false;
    }
    match repr.next_header {
        IpProtocol::Tcp => TcpPacket::new_checked(ip.payload())
            .is_ok_and(|t| t.verify_checksum(&repr.src_addr, &repr.dst_addr)),
        IpProtocol::Udp => UdpPacket::new_checked(ip.payload())
            .is_ok_and(|u| u.verify_checksum(&repr.src_addr, &repr.dst_addr)),
        IpProtocol::Icmp => Icmpv4Packet::new_checked(ip.payload()).is_ok_and(|p| {
            Icmpv4Repr::parse(&p, &ChecksumCaps::default()).is_ok() || p.verify_checksum()
        }),
        IpProtocol::Unknown(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softoe_wire::{
        ChecksumCaps, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Packet,
        Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, TcpTimestamp,
    };

    const A: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const B: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    fn frame(seq: u32, payload: &[u8], control: TcpControl, psh: bool) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 1000,
            dst_port: 2000,
            control,
            psh,
            seq_number: TcpSeqNumber(seq),
            ack_number: Some(TcpSeqNumber(77)),
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 4],
            timestamp: Some(TcpTimestamp { tsval: 5, tsecr: 6 }),
            payload,
        };
        let ip = Ipv4Repr {
            src_addr: A,
            dst_addr: B,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
            ident: 100,
            dont_frag: true,
        };
        let mut f = vec![0u8; 14 + 20 + tcp.buffer_len()];
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::Ipv4,
            vlan_tci: None,
        }
        .emit(&mut eth);
        let mut p = Ipv4Packet::new_unchecked(eth.payload_mut());
        ip.emit(&mut p, &ChecksumCaps::default());
        // Partial checksum, as a stack with checksum offload leaves it.
        let caps = ChecksumCaps {
            tcp: softoe_wire::Checksum::Rx,
            ..ChecksumCaps::default()
        };
        tcp.emit(
            &mut TcpPacket::new_unchecked(p.payload_mut()),
            &A,
            &B,
            &caps,
        );
        f
    }

    fn parse(f: &[u8]) -> (Ipv4Repr, TcpRepr<'_>) {
        let eth = EthernetFrame::new_checked(f).unwrap();
        let p = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let ip = Ipv4Repr::parse(&p, &ChecksumCaps::default()).expect("IPv4 checksum right");
        let payload = &f[14 + p.header_len()..14 + usize::from(p.total_len())];
        let t = TcpPacket::new_checked(payload).unwrap();
        (
            ip,
            TcpRepr::parse(&t, &A, &B, &ChecksumCaps::default()).expect("TCP checksum right"),
        )
    }

    #[test]
    fn tso_cuts_and_fixes_every_header() {
        let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let f = frame(1000, &data, TcpControl::Fin, true);
        let mut out = Vec::new();
        segment(&f, 1200, &mut out);
        assert_eq!(out.len(), 3);
        let mut joined = Vec::new();
        for (i, s) in out.iter().enumerate() {
            let (ip, t) = parse(s);
            assert_eq!(ip.ident, 100 + i as u16);
            assert_eq!(t.seq_number, TcpSeqNumber(1000 + 1200 * i as u32));
            assert_eq!(
                t.timestamp,
                Some(TcpTimestamp { tsval: 5, tsecr: 6 }),
                "options copied"
            );
            let last = i == 2;
            assert_eq!(t.control == TcpControl::Fin, last, "FIN only on the last");
            assert_eq!(t.psh, last, "PSH only on the last");
            joined.extend_from_slice(t.payload);
        }
        assert_eq!(joined, data);
    }

    #[test]
    fn partial_checksum_completion() {
        let mut f = frame(1, b"hello", TcpControl::None, false);
        complete_partial_csum(&mut f, 34, 16);
        let (_, t) = parse(&f);
        assert_eq!(t.payload, b"hello");
        assert!(verify_checksums(&f));
        f[60] ^= 1;
        assert!(!verify_checksums(&f));
    }

    #[test]
    fn gro_merges_in_order_runs_only() {
        let seg = |seq: u32, len: usize, psh: bool| {
            let mut f = frame(seq, &vec![seq as u8; len], TcpControl::None, psh);
            let l = tcp_layout(&f).unwrap();
            fill_tcp_checksums(&mut f, &l);
            f
        };
        let frames = vec![
            seg(0, 100, false),
            seg(100, 100, false),
            seg(200, 50, true), // shorter, with PSH: ends the run
            seg(250, 100, false),
            seg(400, 100, false), // a gap: not merged
        ];
        let out = coalesce(frames);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].1, Some(100));
        let (ip, t) = parse(&out[0].0);
        assert_eq!(ip.payload_len, 20 + 12 + 250);
        assert_eq!(t.payload.len(), 250);
        assert!(t.psh);
        assert_eq!(out[1].1, None, "a single frame is not marked");
        assert_eq!(out[2].1, None);
        // Non-TCP frames pass through untouched.
        let mut out = Vec::new();
        segment(&[1, 2, 3], 100, &mut out);
        assert_eq!(out, vec![vec![1, 2, 3]]);
    }

    #[test]
    fn fragments_are_neither_cut_merged_nor_verified() {
        let mut f = frame(1000, &[7u8; 100], TcpControl::None, false);
        let l = tcp_layout(&f).unwrap();
        fill_tcp_checksums(&mut f, &l);
        assert!(verify_checksums(&f));
        // Mark it the first fragment of a larger datagram.
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.set_flags_and_offset(false, true, 0);
        ip.fill_checksum();
        assert!(tcp_layout(&f).is_none(), "no TCP segment to cut or merge");
        assert!(
            !verify_checksums(&f),
            "a NIC cannot vouch for part of a datagram"
        );
    }
}
