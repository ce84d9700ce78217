//! The virtual NIC: what turns a stack's frames into wire frames and back.
//!
//! On transmit it does what a NIC with offloads does: cuts a TCP
//! super-segment into MSS-sized segments (TSO), fixing each copy's IPv4 total
//! length, identification and checksum, TCP sequence number and flags (FIN
//! and PSH on the last segment only, CWR on the first), and completes partial
//! checksums. On receive it can coalesce consecutive in-order TCP segments
//! of one flow into one large frame (GRO), marked checksum-verified.
//!
//! Frames are read and written through `softoe-wire`'s views; [`TcpLayout`]
//! only remembers where each header starts.

use softoe_wire::checksum;
use softoe_wire::{EtherType, EthernetFrame, IpProtocol, Ipv4Packet, TcpPacket, TcpSeqNumber};

/// Where the IPv4 and TCP headers of a frame are, if it is Ethernet/IPv4/TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TcpLayout {
    pub(crate) ip: usize,
    pub(crate) tcp: usize,
    pub(crate) payload: usize,
    pub(crate) end: usize,
}

impl TcpLayout {
    /// The IPv4 header of `f` (and what follows it).
    fn ipv4<'f>(&self, f: &'f [u8]) -> Ipv4Packet<&'f [u8]> {
        Ipv4Packet::new_unchecked(f.get(self.ip..).unwrap_or(&[]))
    }

    /// The TCP header of `f` (and what follows it).
    fn tcp<'f>(&self, f: &'f [u8]) -> TcpPacket<&'f [u8]> {
        TcpPacket::new_unchecked(f.get(self.tcp..).unwrap_or(&[]))
    }

    /// The IPv4 header of `f`, to write.
    fn ipv4_mut<'f>(&self, f: &'f mut [u8]) -> Ipv4Packet<&'f mut [u8]> {
        Ipv4Packet::new_unchecked(f.get_mut(self.ip..).unwrap_or(&mut []))
    }

    /// The TCP header of `f`, to write.
    fn tcp_mut<'f>(&self, f: &'f mut [u8]) -> TcpPacket<&'f mut [u8]> {
        TcpPacket::new_unchecked(f.get_mut(self.tcp..).unwrap_or(&mut []))
    }
}

pub(crate) fn tcp_layout(f: &[u8]) -> Option<TcpLayout> {
    let eth = EthernetFrame::new_checked(f).ok()?;
    // Untagged frames only: a NIC's TSO and GRO here know no VLAN tags.
    if eth.vlan_tci().is_some() || eth.ethertype() != EtherType::Ipv4 {
        return None;
    }
    let ip = eth.header_len();
    let v4 = Ipv4Packet::new_unchecked(eth.payload());
    if v4.version() != 4 {
        return None;
    }
    let ihl = v4.header_len();
    let total = usize::from(v4.total_len());
    // A fragment is no TCP segment to cut or merge (MF, or an offset).
    if v4.is_fragment() {
        return None;
    }
    if v4.next_header() != IpProtocol::Tcp || ihl < 20 || total < ihl || ip + total > f.len() {
        return None;
    }
    let tcp = ip + ihl;
    let doff = TcpPacket::new_unchecked(f.get(tcp..)?).header_len();
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

/// Fills the IPv4 header checksum and the full TCP checksum.
pub(crate) fn fill_tcp_checksums(f: &mut [u8], l: &TcpLayout) {
    let Some((head, seg)) = f
        .get_mut(l.ip..l.end)
        .and_then(|d| d.split_at_mut_checked(l.tcp - l.ip))
    else {
        return;
    };
    let mut v4 = Ipv4Packet::new_unchecked(head);
    v4.fill_checksum();
    let (src, dst) = (v4.src_addr(), v4.dst_addr());
    TcpPacket::new_unchecked(seg).fill_checksum(&src, &dst);
}

/// Completes a partial checksum: sums from `start` to the end and stores the
/// complement at `start + offset` (the field holds the pseudo-header sum).
pub(crate) fn complete_partial_csum(f: &mut [u8], start: usize, offset: usize) {
    let s = !checksum::data(f.get(start..).unwrap_or(&[]));
    if let Some(d) = f.get_mut(start + offset..start + offset + 2) {
        d.copy_from_slice(&s.to_be_bytes());
    }
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
    let seq0 = l.tcp(frame).seq_number().0;
    let ident0 = l.ipv4(frame).ident();
    let n = payload.len().div_ceil(mss);
    for (i, chunk) in payload.chunks(mss).enumerate() {
        let mut f = Vec::with_capacity(header.len() + chunk.len());
        f.extend_from_slice(header);
        f.extend_from_slice(chunk);
        let mut v4 = l.ipv4_mut(&mut f);
        v4.set_total_len((l.payload - l.ip + chunk.len()) as u16);
        v4.set_ident(ident0.wrapping_add(i as u16));
        let mut seg = l.tcp_mut(&mut f);
        seg.set_seq_number(TcpSeqNumber(seq0.wrapping_add((i * mss) as u32)));
        if i + 1 != n {
            // FIN and PSH only on the last segment.
            seg.set_fin(false);
            seg.set_psh(false);
        }
        if i > 0 {
            seg.set_cwr(false); // CWR only on the first
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
    let (a_tcp, b_tcp) = (a.tcp(acc), b.tcp(next));
    // Only plain ACK (+PSH on the last) data segments.
    let plain =
        |t: &TcpPacket<&[u8]>| !(t.fin() || t.syn() || t.rst() || t.urg() || t.ece() || t.cwr());
    if !plain(&a_tcp) || !plain(&b_tcp) || a_tcp.psh() {
        return false;
    }
    let (a_ip, b_ip) = (a.ipv4(acc), b.ipv4(next));
    let same_flow = a_ip.src_addr() == b_ip.src_addr()
        && a_ip.dst_addr() == b_ip.dst_addr()
        && a_tcp.src_port() == b_tcp.src_port()
        && a_tcp.dst_port() == b_tcp.dst_port()
        && a_tcp.ack_number() == b_tcp.ack_number()
        && (a.payload - a.tcp) == (b.payload - b.tcp);
    let a_len = a.end - a.payload;
    let b_len = b.end - b.payload;
    let in_order = a_tcp.seq_number().0.wrapping_add(a_len as u32) == b_tcp.seq_number().0;
    let fits = (a.end - a.ip) + b_len <= 65_535;
    if !same_flow || !in_order || !fits || a_len == 0 || b_len == 0 {
        return false;
    }
    // Take the later segment's window, ACK and flags (PSH), as GRO does.
    let (win, psh, ack) = (b_tcp.window_len(), b_tcp.psh(), b_tcp.ack());
    acc.truncate(a.end);
    acc.extend_from_slice(next.get(b.payload..b.end).unwrap_or(&[]));
    a.ipv4_mut(acc).set_total_len((a.end - a.ip + b_len) as u16);
    let mut seg = a.tcp_mut(acc);
    seg.set_window_len(win);
    seg.set_psh(psh);
    seg.set_ack(ack);
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
        ChecksumCaps, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Address,
        Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, TcpTimestamp,
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

    #[test]
    fn layout_is_for_untagged_ipv4_tcp_only() {
        let f = frame(1, b"abcd", TcpControl::None, false);
        let l = tcp_layout(&f).unwrap();
        assert_eq!((l.ip, l.tcp, l.payload, l.end), (14, 34, 34 + 32, f.len()));
        // An 802.1Q tag before the same packet: not cut nor merged.
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&f[12..]);
        assert_eq!(tcp_layout(&tagged), None);
        // Not TCP, or shorter than its IPv4 total length, or its header.
        let mut udp = f.clone();
        udp[14 + 9] = 17;
        assert_eq!(tcp_layout(&udp), None);
        assert_eq!(tcp_layout(&f[..f.len() - 1]), None);
        assert_eq!(tcp_layout(&f[..20]), None);
        assert_eq!(tcp_layout(&f[..13]), None);
    }
}
