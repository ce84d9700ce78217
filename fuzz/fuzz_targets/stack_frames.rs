#![no_main]
//! A softoe stack fed arbitrary frames (and time), with a listener and an
//! open connection to attack. The input is a sequence of records:
//! `[op, len_hi, len_lo, bytes…]`. Op bit 0: rewrite the frame's addresses to
//! ours and fix every checksum, so it reaches the protocol code; bits 1–3:
//! advance time by 2^k ms and poll; bit 4: let the application act.
use libfuzzer_sys::fuzz_target;
use softoe_stack::*;
use softoe_wire::*;

const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const PEER: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

struct Dev {
    mem: Vec<u8>,
}

impl Dev {
    fn payload(&self, r: &PayloadRef) -> &[u8] {
        let s = r.offset as usize;
        self.mem.get(s..s + r.len()).expect("the stack only sends what it was given")
    }
}

impl Device for Dev {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        // The stack asks only for what it was given, within the reference.
        let n = r.copy_from(&self.mem, offset, dst);
        assert_eq!(n, dst.len().min(self.payload(r).len().saturating_sub(offset)));
        n
    }
    fn transmit(&mut self, f: &TxFrame<'_>) -> core::result::Result<(), TxBusy> {
        // Resolve every reference: a bad one would panic above.
        let n: usize = f.payload.iter().map(|r| self.payload(r).len()).sum();
        assert_eq!(n, f.payload_len());
        assert!(f.header.len() >= 14);
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

fuzz_target!(|data: &[u8]| {
    let mut cfg = StackConfig::new(MAC, Ipv4Cidr::new(IP, 24).expect("valid"));
    cfg.arp.max_entries = 8;
    let mut tcp = TcpConfig::default();
    tcp.rx_buffer = 8192;
    tcp.tx_buffer = 8192;
    cfg.tcp = tcp;
    let Ok(mut stack) = Stack::new(cfg) else { return };
    let mut dev = Dev { mem: vec![0xab; 1 << 16] };
    let mut now = Instant::from_secs(1);
    let lst = stack.tcp_listen(Endpoint::new(IP, 80), 4, None).expect("listen");
    let conn = stack.tcp_connect(now, Endpoint::new(PEER, 9000), Some(Endpoint::new(IP, 4000)), None).expect("connect");
    let udp = stack.udp_bind(Endpoint::new(IP, 53), None).expect("bind");
    let mut sent = 0u64;
    let mut rest = data;
    while rest.len() >= 3 {
        let op = rest[0];
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]])).min(rest.len() - 3);
        let mut frame = rest[3..3 + len].to_vec();
        rest = &rest[3 + len..];
        if op & 1 != 0 {
            fix_up(&mut frame);
        }
        let meta = RxMeta { csum_verified: op & 0x20 != 0, gso_size: (op & 0x40 != 0).then_some(536) };
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
});
