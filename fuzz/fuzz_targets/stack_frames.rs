#![no_main]
//! A softoe stack fed arbitrary frames (and time), with a listener and an
//! open connection to attack. The input is a sequence of records:
//! `[op, len_hi, len_lo, bytes…]`. Op bit 0: rewrite the frame's addresses to
//! ours and fix every checksum, so it reaches the protocol code; bits 1–3:
//! advance time by 2^k ms and poll; bit 4: let the application act; bit 7:
//! the bytes are not a frame but say how to answer the last TCP segment
//! the stack sent (so a SYN cookie's ACK and an ICMP error quoting what
//! we sent, which no random bytes would hit, are reached): first byte
//! even, an ACK of it (echoing its timestamp; bit 1 its sequence number
//! off by the second byte, bit 2 a FIN, the rest payload); odd, an ICMP
//! destination unreachable quoting it, code the second byte, from the
//! peer or (bit 1) a router. The input's first byte also picks the
//! listener's SYN cookies: off, when full, always.
use libfuzzer_sys::fuzz_target;
use softoe_stack::*;
use softoe_wire::*;

const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const PEER: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

struct Dev {
    mem: Vec<u8>,
    /// The IPv4 and TCP headers of the last TCP segment sent.
    last_tcp: Vec<u8>,
}

impl Dev {
    fn payload(&self, r: &PayloadRef) -> &[u8] {
        let s = r.offset as usize;
        self.mem
            .get(s..s + r.len())
            .expect("the stack only sends what it was given")
    }
}

impl Device for Dev {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        // The stack asks only for what it was given, within the reference.
        let n = r.copy_from(&self.mem, offset, dst);
        assert_eq!(
            n,
            dst.len().min(self.payload(r).len().saturating_sub(offset))
        );
        n
    }
    fn transmit(&mut self, f: &TxFrame<'_>) -> core::result::Result<(), TxBusy> {
        // Resolve every reference: a bad one would panic above.
        let n: usize = f.payload.iter().map(|r| self.payload(r).len()).sum();
        assert_eq!(n, f.payload_len());
        assert!(f.header.len() >= 14);
        let ip = &f.header[14..];
        if f.header[12..14] == [0x08, 0x00] && ip.len() >= 40 && ip[9] == 6 {
            self.last_tcp.clear();
            self.last_tcp.extend_from_slice(ip);
        }
        Ok(())
    }
}

fn fix_up(frame: &mut [u8]) {
    if frame.len() < 14 + 20 {
        return;
    }
    frame[0..6].copy_from_slice(&MAC.0);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut frame[14..];
    ip[0] = 0x45;
    let total = ip.len().min(65_535) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] &= 0x40; // no fragments
    ip[7] = 0;
    ip[12..16].copy_from_slice(&PEER.0);
    ip[16..20].copy_from_slice(&IP.0);
    let mut p = Ipv4Packet::new_unchecked(&mut ip[..]);
    p.fill_checksum();
    let proto = p.next_header();
    let l4 = &mut ip[20..total as usize];
    match proto {
        IpProtocol::Tcp if l4.len() >= 20 => {
            let t = TcpPacket::new_unchecked(l4);
            if t.header_len() < 20 || t.header_len() > t.into_inner().len() {
                return;
            }
            let mut t = TcpPacket::new_unchecked(&mut ip[20..total as usize]);
            t.fill_checksum(&PEER, &IP);
        }
        IpProtocol::Udp if l4.len() >= 8 => {
            let len = l4.len() as u16;
            let mut u = UdpPacket::new_unchecked(l4);
            u.set_len(len);
            u.fill_checksum(&PEER, &IP);
        }
        IpProtocol::Icmp if l4.len() >= 8 => {
            Icmpv4Packet::new_unchecked(l4).fill_checksum();
        }
        _ => {}
    }
}

/// A frame from the peer answering the TCP segment whose IPv4 and TCP
/// headers are `last` (see the module's docs for how `how` says what).
fn reflect(last: &[u8], how: &[u8]) -> Option<Vec<u8>> {
    // Headers only: the packet's length field counts payload not kept here.
    let ip = Ipv4Packet::new_unchecked(last);
    let hl = usize::from(ip.header_len());
    if last.len() < hl + 20 || hl < 20 {
        return None;
    }
    let kind = how.first().copied().unwrap_or(0);
    let arg = how.get(1).copied().unwrap_or(0);
    let mut frame = vec![0u8; 14];
    frame[0..6].copy_from_slice(&MAC.0);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    if kind & 1 == 1 {
        let icmp = Icmpv4Repr::DstUnreachable {
            reason: Icmpv4DstUnreachable::from(arg),
            data: last.get(..hl + 8)?,
        };
        let from = if kind & 2 != 0 {
            Ipv4Address::new(10, 0, 0, 254)
        } else {
            PEER
        };
        let repr = Ipv4Repr {
            src_addr: from,
            dst_addr: IP,
            next_header: IpProtocol::Icmp,
            payload_len: icmp.buffer_len(),
            hop_limit: 64,
            ident: 0,
            dont_frag: false,
        };
        frame.resize(14 + 20 + icmp.buffer_len(), 0);
        let mut p = Ipv4Packet::new_unchecked(&mut frame[14..]);
        repr.emit(&mut p, &ChecksumCaps::default());
        icmp.emit(
            &mut Icmpv4Packet::new_unchecked(p.payload_mut()),
            &ChecksumCaps::default(),
        );
        return Some(frame);
    }
    let tcp = TcpPacket::new_checked(last.get(hl..)?).ok()?;
    let ours = TcpRepr::parse(
        &tcp,
        &ip.src_addr(),
        &ip.dst_addr(),
        &ChecksumCaps::ignored(),
    )
    .ok()?;
    let ctl = u32::from(matches!(ours.control, TcpControl::Syn | TcpControl::Fin));
    let ack = TcpSeqNumber(ours.seq_number.0.wrapping_add(ctl));
    let payload = how.get(2..).unwrap_or(&[]);
    let skew = if kind & 2 != 0 { u32::from(arg) } else { 0 };
    let repr = TcpRepr {
        src_port: ours.dst_port,
        dst_port: ours.src_port,
        control: if kind & 4 != 0 {
            TcpControl::Fin
        } else {
            TcpControl::None
        },
        psh: !payload.is_empty(),
        seq_number: TcpSeqNumber(ours.ack_number.unwrap_or_default().0.wrapping_add(skew)),
        ack_number: Some(ack),
        window_len: 65_535,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 4],
        timestamp: ours.timestamp.map(|t| TcpTimestamp {
            tsval: t.tsecr.wrapping_add(1),
            tsecr: t.tsval,
        }),
        payload,
    };
    let ipr = Ipv4Repr {
        src_addr: PEER,
        dst_addr: IP,
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
        ident: 0,
        dont_frag: true,
    };
    frame.resize(14 + 20 + repr.buffer_len(), 0);
    let mut p = Ipv4Packet::new_unchecked(&mut frame[14..]);
    ipr.emit(&mut p, &ChecksumCaps::default());
    repr.emit(
        &mut TcpPacket::new_unchecked(p.payload_mut()),
        &PEER,
        &IP,
        &ChecksumCaps::default(),
    );
    Some(frame)
}

fuzz_target!(|data: &[u8]| {
    let mut cfg = StackConfig::new(MAC, Ipv4Cidr::new(IP, 24).expect("valid"));
    cfg.arp.max_entries = 8;
    cfg.syncookies = match data.first().copied().unwrap_or(0) % 3 {
        0 => SynCookies::Off,
        1 => SynCookies::WhenFull,
        _ => SynCookies::Always,
    };
    let mut tcp = TcpConfig::default();
    tcp.rx_buffer = 8192;
    tcp.tx_buffer = 8192;
    cfg.tcp = tcp;
    let Ok(mut stack) = Stack::new(cfg) else {
        return;
    };
    let mut dev = Dev {
        mem: vec![0xab; 1 << 16],
        last_tcp: Vec::new(),
    };
    let mut now = Instant::from_secs(1);
    let lst = stack
        .tcp_listen(Endpoint::new(IP, 80), 4, None)
        .expect("listen");
    let conn = stack
        .tcp_connect(
            now,
            Endpoint::new(PEER, 9000),
            Some(Endpoint::new(IP, 4000)),
            None,
        )
        .expect("connect");
    let udp = stack.udp_bind(Endpoint::new(IP, 53), None).expect("bind");
    let mut sent = 0u64;
    let mut rest = data;
    while rest.len() >= 3 {
        let op = rest[0];
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let bytes = &rest[3..3 + len];
        rest = &rest[3 + len..];
        let mut frame = if op & 0x80 != 0 {
            reflect(&dev.last_tcp, bytes).unwrap_or_default()
        } else {
            bytes.to_vec()
        };
        if op & 0x81 == 1 {
            fix_up(&mut frame);
        }
        let meta = RxMeta {
            csum_verified: op & 0x20 != 0,
            gso_size: (op & 0x40 != 0).then_some(536),
        };
        stack.receive(now, &frame, meta, &mut dev);
        let adv = (op >> 1) & 7;
        if adv != 0 {
            now += core::time::Duration::from_millis(1 << adv);
        }
        stack.poll(now, &mut dev);
        if op & 0x10 != 0 {
            // The application: accept, read, write, close.
            while let Ok(Some(c)) = stack.tcp_accept(lst) {
                let _ = stack.tcp_send(c, PayloadRef::new(0, 0, 100));
                let _ = stack.close(now, c);
            }
            let mut buf = [0u8; 512];
            let _ = stack.tcp_recv(conn, &mut buf);
            if let Ok(n) = stack.tcp_send(conn, PayloadRef::new(0, sent % 60_000, 1000)) {
                sent += n as u64;
            }
            let _ = stack.udp_recv_from(udp, &mut buf);
            let _ = stack.tcp_info(conn);
        }
        while stack.poll_event().is_some() {}
        assert!(stack.arp_cache_len() <= 8);
    }
    // Let every timer run out: nothing may panic or spin.
    for _ in 0..200 {
        now += core::time::Duration::from_secs(1);
        stack.poll(now, &mut dev);
    }
    if std::env::var_os("SOFTOE_FUZZ_STATS").is_some() {
        // To see which paths an input reaches (`cargo fuzz run stack_frames
        // FILE` with this set).
        eprintln!("{:?}", stack.stats());
    }
});
