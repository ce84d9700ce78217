#![no_main]
//! Fragments and ICMP errors against a stack with connections open: two
//! stacks (A under attack, B its honest peer) on a wire of frame queues
//! move data both ways, while the input also injects, toward A:
//!
//! - fragments cut out of B's real frames (in any order, some twice, with
//!   chosen overlaps, offsets, lengths and flags) and of made-up datagrams;
//! - ICMP errors (fragmentation needed with any MTU, time exceeded, port
//!   unreachable) quoting one of A's real recent segments, mutated or not,
//!   so RFC 5927's checks and the path-MTU code are reached.
//!
//! Records: `[op, a, b, c, len, bytes…]`. Nothing may panic; the
//! connections must keep their data intact (every byte received is the
//! sender's), and after a long quiet spell every timer has run out.
use libfuzzer_sys::fuzz_target;
use softoe_stack::*;
use softoe_wire::*;

const MAC_A: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const MAC_B: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const IP_A: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

struct Wire {
    mem: Vec<u8>,
    out: Vec<Vec<u8>>,
}

impl Device for Wire {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        r.copy_from(&self.mem, offset, dst)
    }
    fn transmit(&mut self, f: &TxFrame<'_>) -> core::result::Result<(), TxBusy> {
        let mut b = f.header.to_vec();
        for r in f.payload {
            let s = r.offset as usize;
            b.extend_from_slice(self.mem.get(s..s + r.len()).expect("the stack sends what it was given"));
        }
        if let Some(c) = f.offload.csum {
            let start = usize::from(c.start);
            let sum = !checksum::data(&b[start..]);
            let at = start + usize::from(c.offset);
            b[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        }
        assert!(f.offload.gso_size.is_none(), "no TSO configured");
        self.out.push(b);
        Ok(())
    }
}

fn stack(mac: EthernetAddress, ip: Ipv4Address, seed: u64) -> Stack {
    let mut cfg = StackConfig::new(mac, Ipv4Cidr::new(ip, 24).expect("valid"));
    cfg.seed = seed;
    cfg.tcp.rx_buffer = 64 * 1024;
    cfg.tcp.tx_buffer = 64 * 1024;
    cfg.ip.reasm_max_datagrams = 8;
    cfg.ip.reasm_max_bytes = 256 * 1024;
    cfg.ip.pmtu_cache_entries = 4;
    Stack::new(cfg).expect("config")
}

fn eth_ipv4(pkt: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + pkt.len()];
    let mut e = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr { src_addr: MAC_B, dst_addr: MAC_A, ethertype: EtherType::Ipv4, vlan_tci: None }.emit(&mut e);
    f[14..].copy_from_slice(pkt);
    f
}

/// An IPv4 packet from B to A.
fn ipv4(proto: IpProtocol, ident: u16, off: u16, more: bool, df: bool, l4: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 20 + l4.len()];
    let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
    Ipv4Repr {
        src_addr: IP_B,
        dst_addr: IP_A,
        next_header: proto,
        payload_len: l4.len(),
        hop_limit: 64,
        ident,
        dont_frag: df,
    }
    .emit(&mut p, &ChecksumCaps::default());
    p.set_flags_and_offset(df, more, off & !7);
    p.fill_checksum();
    b[20..].copy_from_slice(l4);
    b
}

fuzz_target!(|data: &[u8]| {
    let mut a = stack(MAC_A, IP_A, 1);
    let mut b = stack(MAC_B, IP_B, 2);
    let mem: Vec<u8> = (0..1 << 16).map(|i| (i % 251) as u8).collect();
    let mut wa = Wire { mem: mem.clone(), out: Vec::new() };
    let mut wb = Wire { mem: mem.clone(), out: Vec::new() };
    let mut now = Instant::from_secs(1);
    let lst = b.tcp_listen(Endpoint::new(IP_B, 80), 4, None).expect("listen");
    let ca = a.tcp_connect(now, Endpoint::new(IP_B, 80), None, None).expect("connect");
    let _udp = a.udp_bind(Endpoint::new(IP_A, 9), None).expect("bind");
    let mut cb = None;
    // A's recent TCP segments (IP packets), B's frames not yet delivered.
    let mut a_sent: Vec<Vec<u8>> = Vec::new();
    let mut b_held: Vec<Vec<u8>> = Vec::new();
    let (mut a_pos, mut b_pos) = (0u64, 0u64);
    let (mut a_got, mut b_got) = (0u64, 0u64);
    let mut buf = vec![0u8; 8192];
    let mut rest = data;
    while rest.len() >= 5 {
        let (op, x, y, z) = (rest[0], rest[1], rest[2], rest[3]);
        let len = usize::from(rest[4]).min(rest.len() - 5);
        let bytes = &rest[5..5 + len];
        rest = &rest[5 + len..];
        match op % 8 {
            // Move the wire: A's frames to B, B's (kept for cutting) to A.
            0 | 1 => {
                a.poll(now, &mut wa);
                b.poll(now, &mut wb);
                for f in std::mem::take(&mut wa.out) {
                    if f.len() > 34 && f[23] == 6 {
                        a_sent.push(f[14..].to_vec());
                        if a_sent.len() > 8 {
                            a_sent.remove(0);
                        }
                    }
                    b.receive(now, &f, RxMeta::default(), &mut wb);
                }
                b_held.extend(std::mem::take(&mut wb.out));
                if op % 8 == 0 {
                    for f in std::mem::take(&mut b_held) {
                        a.receive(now, &f, RxMeta::default(), &mut wa);
                    }
                }
            }
            // One of B's frames to A in fragments: piece size, order, a
            // duplicate or an overlap as the bytes say.
            2 => {
                if b_held.is_empty() {
                    continue;
                }
                let f = b_held.remove(usize::from(x) % b_held.len());
                let Ok(p) = Ipv4Packet::new_checked(&f[14..]) else { continue };
                let l4 = p.payload().to_vec();
                let proto = p.next_header();
                let per = (usize::from(y) % 64 + 1) * 8;
                let mut frags: Vec<Vec<u8>> = l4
                    .chunks(per)
                    .enumerate()
                    .map(|(k, c)| {
                        let off = k * per;
                        ipv4(proto, p.ident(), off as u16, off + c.len() < l4.len(), false, c)
                    })
                    .collect();
                if z & 1 != 0 {
                    frags.reverse();
                }
                if z & 2 != 0 && !frags.is_empty() {
                    let d = frags[0].clone();
                    frags.push(d);
                }
                if z & 4 != 0 && l4.len() > 16 {
                    // An overlap with made-up bytes.
                    let off = usize::from(z >> 3) * 8 % l4.len();
                    let end = (off + bytes.len().max(8)).min(l4.len());
                    frags.insert(1.min(frags.len()), ipv4(proto, p.ident(), off as u16, true, false, &l4[off..end]));
                }
                for fr in frags {
                    a.receive(now, &eth_ipv4(&fr), RxMeta::default(), &mut wa);
                }
            }
            // A made-up fragment (any protocol, offset, flags, bytes).
            3 => {
                let proto = IpProtocol::from([6u8, 17, 1, x][usize::from(y % 4)]);
                let off = u16::from_be_bytes([x, z]);
                let pkt = ipv4(proto, u16::from(y), off, z & 1 != 0, false, bytes);
                a.receive(now, &eth_ipv4(&pkt), RxMeta::default(), &mut wa);
            }
            // An ICMP error quoting one of A's segments, maybe mutated.
            4 | 5 => {
                if a_sent.is_empty() {
                    continue;
                }
                let mut q = a_sent[usize::from(x) % a_sent.len()].clone();
                q.truncate(28 + usize::from(z % 64));
                for (i, m) in bytes.iter().enumerate().take(4) {
                    if y & (1 << i) != 0 && !q.is_empty() {
                        let at = usize::from(*m) % q.len();
                        q[at] ^= m | 1;
                    }
                }
                let msg = match y >> 5 {
                    0 | 1 | 2 | 3 => Icmpv4Repr::DstUnreachable { reason: Icmpv4DstUnreachable::FragRequired, data: &q },
                    4 => Icmpv4Repr::TimeExceeded { reason: Icmpv4TimeExceeded::TtlExpired, data: &q },
                    5 => Icmpv4Repr::DstUnreachable { reason: Icmpv4DstUnreachable::PortUnreachable, data: &q },
                    _ => Icmpv4Repr::DstUnreachable { reason: Icmpv4DstUnreachable::from(z), data: &q },
                };
                let mut icmp = vec![0u8; msg.buffer_len()];
                let mut p = Icmpv4Packet::new_unchecked(&mut icmp[..]);
                msg.emit(&mut p, &ChecksumCaps::default());
                p.set_next_hop_mtu(u16::from_be_bytes([x, if op % 8 == 4 { z } else { 0 }]));
                p.fill_checksum();
                let pkt = ipv4(IpProtocol::Icmp, 1, 0, false, false, &icmp);
                a.receive(now, &eth_ipv4(&pkt), RxMeta::default(), &mut wa);
            }
            // Time passes (up to 64 s: reassembly and path-MTU timers).
            6 => {
                now += core::time::Duration::from_millis(u64::from(x) << (y % 9));
                a.poll(now, &mut wa);
                b.poll(now, &mut wb);
            }
            // The applications: accept, send, read (checking every byte).
            _ => {
                if cb.is_none() {
                    cb = b.tcp_accept(lst).ok().flatten();
                }
                // A send never crosses a multiple of 60,000 in the stream,
                // so stream byte q is mem[q % 60,000].
                let n = |pos: u64| (usize::from(x) * 64).min(60_000 - (pos % 60_000) as usize) as u32;
                if let Ok(k) = a.tcp_send(ca, PayloadRef::new(0, a_pos % 60_000, n(a_pos))) {
                    a_pos += k as u64;
                }
                let check = |got: &mut u64, data: &[u8]| {
                    for &v in data {
                        assert_eq!(v, ((*got % 60_000) % 251) as u8, "byte {} of the stream", *got);
                        *got += 1;
                    }
                };
                if let Some(c) = cb {
                    if let Ok(k) = b.tcp_send(c, PayloadRef::new(0, b_pos % 60_000, n(b_pos))) {
                        b_pos += k as u64;
                    }
                    if let Ok(k) = b.tcp_recv(c, &mut buf) {
                        check(&mut a_got, &buf[..k]);
                    }
                }
                if let Ok(k) = a.tcp_recv(ca, &mut buf) {
                    check(&mut b_got, &buf[..k]);
                }
                let _ = a.udp_recv_from(_udp, &mut buf);
                let _ = a.tcp_info(ca);
            }
        }
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        assert!(a_got <= a_pos && b_got <= b_pos, "more received than sent");
    }
    // Every timer runs out: nothing may panic or spin.
    for _ in 0..64 {
        now += core::time::Duration::from_secs(30);
        a.poll(now, &mut wa);
        b.poll(now, &mut wb);
        wa.out.clear();
        wb.out.clear();
    }
});
