//! The test peer: builds frames from `TcpRepr`s, feeds them to a [`Stack`],
//! and parses what the stack transmits back into owned segments.

use alloc::vec;
use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumCaps, EtherType, EthernetAddress, EthernetFrame,
    EthernetRepr, Icmpv4DstUnreachable, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address,
    Ipv4Cidr, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

use crate::{Device, Endpoint, Instant, PayloadRef, RxMeta, Stack, StackConfig, TxBusy, TxFrame};

pub(crate) const LOCAL_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
pub(crate) const REMOTE_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
pub(crate) const LOCAL_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
pub(crate) const REMOTE_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
pub(crate) const LOCAL_PORT: u16 = 80;
pub(crate) const REMOTE_PORT: u16 = 49500;
pub(crate) const REMOTE_SEQ: TcpSeqNumber = TcpSeqNumber(10_000);

pub(crate) fn local() -> Endpoint {
    Endpoint::new(LOCAL_IP, LOCAL_PORT)
}
pub(crate) fn remote() -> Endpoint {
    Endpoint::new(REMOTE_IP, REMOTE_PORT)
}

/// A segment from the peer: fields as a `TcpRepr` with a static payload.
pub(crate) const SEND_TEMPL: TcpRepr<'static> = TcpRepr {
    src_port: REMOTE_PORT,
    dst_port: LOCAL_PORT,
    control: TcpControl::None,
    psh: false,
    seq_number: REMOTE_SEQ,
    ack_number: None,
    window_len: 65_535,
    window_scale: None,
    max_seg_size: None,
    sack_permitted: false,
    sack_ranges: [None; 4],
    timestamp: None,
    payload: &[],
};

/// A segment the stack sent, with its payload copied out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) repr: TcpRepr<'static>,
    pub(crate) payload: Vec<u8>,
    pub(crate) gso_size: Option<u16>,
}

impl Sent {
    pub(crate) fn seq(&self) -> TcpSeqNumber {
        self.repr.seq_number
    }
    pub(crate) fn ack(&self) -> Option<TcpSeqNumber> {
        self.repr.ack_number
    }
    pub(crate) fn len(&self) -> usize {
        self.payload.len()
    }
}

/// The port under test: payload refs resolve into `mem`; frames are kept.
pub(crate) struct TestDev {
    pub(crate) mem: Vec<u8>,
    pub(crate) frames: Vec<(Vec<u8>, Option<u16>)>,
    /// Each transmitted frame's priority, in order (never cleared).
    pub(crate) priorities: Vec<u8>,
    pub(crate) busy: bool,
    /// The reader's ring memory for [`Device::deliver`] (any region number;
    /// `offset` counts from its start); empty: deliveries refused.
    pub(crate) ring: Vec<u8>,
}

impl TestDev {
    /// The bytes `r` names (the test's own memory).
    pub(crate) fn payload(&self, r: &PayloadRef) -> &[u8] {
        let s = r.offset as usize;
        &self.mem[s..s + r.len()]
    }
}

impl Device for TestDev {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        r.copy_from(&self.mem, offset, dst)
    }
    fn deliver(&mut self, ring: &crate::RxRing, pos: u64, data: &[u8]) -> bool {
        let (off, len) = (ring.offset as usize, ring.len as usize);
        if len == 0 || data.len() > len || off + len > self.ring.len() {
            return false;
        }
        for (i, &b) in data.iter().enumerate() {
            self.ring[off + (pos as usize + i) % len] = b;
        }
        true
    }
    fn transmit(&mut self, f: &TxFrame<'_>) -> Result<(), TxBusy> {
        if self.busy {
            return Err(TxBusy);
        }
        let mut bytes = f.header.to_vec();
        for r in f.payload {
            bytes.extend_from_slice(self.payload(r));
        }
        if let Some(pc) = f.offload.csum {
            // Finish the checksum as a port would.
            let start = usize::from(pc.start);
            let off = start + usize::from(pc.offset);
            let mut acc = softoe_wire::checksum::Accumulator::new();
            acc.add(&bytes[start..]);
            let sum = !acc.finish();
            bytes[off..off + 2].copy_from_slice(&sum.to_be_bytes());
        }
        self.frames.push((bytes, f.offload.gso_size));
        self.priorities.push(f.priority);
        Ok(())
    }
}

/// Adds `n` to a sequence number.
pub(crate) fn add(s: TcpSeqNumber, n: usize) -> TcpSeqNumber {
    TcpSeqNumber(s.0.wrapping_add(n as u32))
}

/// The round-trip time the passive handshake takes.
pub(crate) const HANDSHAKE_RTT: Duration = Duration::from_millis(1);

/// A listener on LOCAL_PORT and a passive handshake completed with a SYN
/// built from `syn` (its control and sequence number are set here). Returns
/// the connection, our next sequence number and the SYN-ACK.
pub(crate) fn open_passive(
    h: &mut Harness,
    syn: TcpRepr<'static>,
) -> (crate::SocketHandle, TcpSeqNumber, Sent) {
    open_passive_rtt(h, syn, HANDSHAKE_RTT)
}

/// [`open_passive`] with a handshake taking `rtt` (the first RTT sample).
pub(crate) fn open_passive_rtt(
    h: &mut Harness,
    syn: TcpRepr<'static>,
    rtt: Duration,
) -> (crate::SocketHandle, TcpSeqNumber, Sent) {
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: None,
        ..syn
    });
    let mut out = h.take();
    assert_eq!(out.len(), 1, "one SYN-ACK: {out:?}");
    let sa = out.remove(0);
    assert_eq!(sa.repr.control, TcpControl::Syn);
    let iss = sa.seq();
    // The handshake's round trip: the connection's first RTT sample.
    h.now += rtt;
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(iss, 1)),
        timestamp: syn.timestamp.map(|t| softoe_wire::TcpTimestamp {
            tsval: t.tsval + 1,
            tsecr: sa.repr.timestamp.map_or(0, |x| x.tsval),
        }),
        ..SEND_TEMPL
    });
    assert!(h.take().is_empty(), "nothing answers the final ACK");
    let conn = h.stack.tcp_accept(lst).unwrap().expect("accepted");
    h.stack.close(h.now, lst).unwrap();
    (conn, add(iss, 1), sa)
}

/// Starts an active open from `LOCAL_IP:LOCAL_PORT` to the peer: returns
/// the connection (SYN-SENT) and the SYN it sent, whose sequence number is
/// our ISS.
pub(crate) fn connect(h: &mut Harness) -> (crate::SocketHandle, Sent) {
    let conn = h
        .stack
        .tcp_connect(
            h.now,
            remote(),
            Some(Endpoint::new(LOCAL_IP, LOCAL_PORT)),
            None,
        )
        .unwrap();
    let mut out = h.recv();
    assert_eq!(out.len(), 1, "one SYN: {out:?}");
    let syn = out.remove(0);
    assert_eq!(syn.repr.control, TcpControl::Syn);
    (conn, syn)
}

/// A passive connection with MSS 1460 and SACK permitted.
pub(crate) fn open_sack(h: &mut Harness) -> (crate::SocketHandle, TcpSeqNumber) {
    let (c, s, _) = open_passive(
        h,
        TcpRepr {
            max_seg_size: Some(1460),
            sack_permitted: true,
            ..SEND_TEMPL
        },
    );
    (c, s)
}

/// A plain passive connection: MSS 1460, no other options.
pub(crate) fn open_plain(h: &mut Harness) -> (crate::SocketHandle, TcpSeqNumber) {
    let (c, s, _) = open_passive(
        h,
        TcpRepr {
            max_seg_size: Some(1460),
            ..SEND_TEMPL
        },
    );
    (c, s)
}

/// Sends 1000 bytes the peer takes while closing its window, then 1000
/// more that wait behind it.
pub(crate) fn behind_a_zero_window(h: &mut Harness, conn: crate::SocketHandle, our: TcpSeqNumber) {
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 1000)).unwrap();
    h.recv();
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 1000)),
        window_len: 0,
        ..SEND_TEMPL
    });
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 1000, 1000))
        .unwrap();
    assert!(h.recv().is_empty(), "nothing fits a zero window");
}

/// A stack under test and its peer's view.
pub(crate) struct Harness {
    pub(crate) stack: Stack,
    pub(crate) dev: TestDev,
    pub(crate) now: Instant,
    /// Non-TCP frames (ARP, ICMP) the stack sent, raw.
    pub(crate) other: Vec<Vec<u8>>,
}

pub(crate) fn config() -> StackConfig {
    let mut c = StackConfig::new(LOCAL_MAC, Ipv4Cidr::new(LOCAL_IP, 24).unwrap());
    c.seed = 7;
    c
}

impl Harness {
    pub(crate) fn new() -> Harness {
        Harness::with_config(config())
    }

    pub(crate) fn with_config(cfg: StackConfig) -> Harness {
        let mut mem = vec![0u8; 1 << 20];
        for (i, b) in mem.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let mut h = Harness {
            stack: Stack::new(cfg).unwrap(),
            dev: TestDev {
                mem,
                frames: Vec::new(),
                priorities: Vec::new(),
                busy: false,
                ring: Vec::new(),
            },
            now: Instant::from_secs(1),
            other: Vec::new(),
        };
        // Teach the stack the peer's MAC (an ARP request aimed at it).
        h.arp(ArpOperation::Request, REMOTE_IP, LOCAL_IP);
        h.dev.frames.clear();
        h
    }

    pub(crate) fn arp(&mut self, op: ArpOperation, src_ip: Ipv4Address, dst_ip: Ipv4Address) {
        let repr = ArpRepr {
            operation: op,
            source_hardware_addr: REMOTE_MAC,
            source_protocol_addr: src_ip,
            target_hardware_addr: if op == ArpOperation::Reply {
                LOCAL_MAC
            } else {
                EthernetAddress([0; 6])
            },
            target_protocol_addr: dst_ip,
        };
        let mut frame = vec![0u8; 14 + 28];
        let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
        EthernetRepr {
            src_addr: REMOTE_MAC,
            dst_addr: EthernetAddress::BROADCAST,
            ethertype: EtherType::Arp,
            vlan_tci: None,
        }
        .emit(&mut eth);
        repr.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
        self.stack
            .receive(self.now, &frame, RxMeta::default(), &mut self.dev);
    }

    /// A frame carrying `repr` from the peer, as bytes.
    pub(crate) fn frame(repr: &TcpRepr<'_>) -> Vec<u8> {
        let tcp_len = repr.buffer_len();
        let mut frame = vec![0u8; 14 + 20 + tcp_len];
        let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
        EthernetRepr {
            src_addr: REMOTE_MAC,
            dst_addr: LOCAL_MAC,
            ethertype: EtherType::Ipv4,
            vlan_tci: None,
        }
        .emit(&mut eth);
        let ip = Ipv4Repr {
            src_addr: REMOTE_IP,
            dst_addr: LOCAL_IP,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_len,
            hop_limit: 64,
            ident: 0,
            dont_frag: true,
        };
        let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
        ip.emit(&mut ipp, &ChecksumCaps::default());
        let mut tcp = TcpPacket::new_unchecked(ipp.payload_mut());
        repr.emit(&mut tcp, &REMOTE_IP, &LOCAL_IP, &ChecksumCaps::default());
        frame
    }

    /// The peer sends `repr`.
    pub(crate) fn send(&mut self, repr: TcpRepr<'_>) {
        let frame = Harness::frame(&repr);
        self.stack
            .receive(self.now, &frame, RxMeta::default(), &mut self.dev);
    }

    /// The peer sends raw frame bytes.
    pub(crate) fn send_raw(&mut self, frame: &[u8], meta: RxMeta) {
        self.stack.receive(self.now, frame, meta, &mut self.dev);
    }

    /// A router on the path (`from`) reports our segment quoted in `quote`
    /// (see [`quote`]) undeliverable, with `reason`.
    pub(crate) fn icmp_unreachable(
        &mut self,
        from: Ipv4Address,
        reason: Icmpv4DstUnreachable,
        quote: &[u8],
    ) {
        let icmp = Icmpv4Repr::DstUnreachable {
            reason,
            data: quote,
        };
        let len = icmp.buffer_len();
        let mut frame = vec![0u8; 14 + 20 + len];
        let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
        EthernetRepr {
            src_addr: REMOTE_MAC,
            dst_addr: LOCAL_MAC,
            ethertype: EtherType::Ipv4,
            vlan_tci: None,
        }
        .emit(&mut eth);
        let ip = Ipv4Repr {
            src_addr: from,
            dst_addr: LOCAL_IP,
            next_header: IpProtocol::Icmp,
            payload_len: len,
            hop_limit: 64,
            ident: 0,
            dont_frag: false,
        };
        let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
        ip.emit(&mut ipp, &ChecksumCaps::default());
        icmp.emit(
            &mut Icmpv4Packet::new_unchecked(ipp.payload_mut()),
            &ChecksumCaps::default(),
        );
        self.stack
            .receive(self.now, &frame, RxMeta::default(), &mut self.dev);
    }

    /// Polls the stack and returns the TCP segments it sent (others go to `other`).
    pub(crate) fn recv(&mut self) -> Vec<Sent> {
        self.stack.poll(self.now, &mut self.dev);
        self.take()
    }

    /// The segments sent so far, without polling.
    pub(crate) fn take(&mut self) -> Vec<Sent> {
        let mut out = Vec::new();
        for (bytes, gso) in core::mem::take(&mut self.dev.frames) {
            match parse_tcp(&bytes) {
                Some(mut s) => {
                    s.gso_size = gso;
                    out.push(s);
                }
                None => self.other.push(bytes),
            }
        }
        out
    }

    /// Advances time by `d` and polls.
    pub(crate) fn advance(&mut self, d: Duration) -> Vec<Sent> {
        self.now += d;
        self.recv()
    }
}

/// What an ICMP error quotes of a segment we sent from `LOCAL_IP:src_port`
/// to `REMOTE_IP:dst_port` with sequence number `seq`: its IPv4 header and
/// the first 8 bytes of its TCP header (RFC 792), as a router sends.
pub(crate) fn quote(src_port: u16, dst_port: u16, seq: TcpSeqNumber) -> Vec<u8> {
    let mut q = vec![0u8; 20 + 8];
    let ip = Ipv4Repr {
        src_addr: LOCAL_IP,
        dst_addr: REMOTE_IP,
        next_header: IpProtocol::Tcp,
        payload_len: 20,
        hop_limit: 64,
        ident: 0,
        dont_frag: true,
    };
    ip.emit(
        &mut Ipv4Packet::new_unchecked(&mut q[..]),
        &ChecksumCaps::default(),
    );
    q[20..22].copy_from_slice(&src_port.to_be_bytes());
    q[22..24].copy_from_slice(&dst_port.to_be_bytes());
    q[24..28].copy_from_slice(&seq.0.to_be_bytes());
    q
}

/// Parses a frame the stack sent; verifies every checksum.
pub(crate) fn parse_tcp(bytes: &[u8]) -> Option<Sent> {
    let eth = EthernetFrame::new_checked(bytes).ok()?;
    if eth.ethertype() != EtherType::Ipv4 {
        return None;
    }
    assert_eq!(eth.dst_addr(), REMOTE_MAC);
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let iprepr = Ipv4Repr::parse(&ip, &ChecksumCaps::default()).expect("valid IPv4 header");
    if iprepr.next_header != IpProtocol::Tcp {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let repr = TcpRepr::parse(
        &tcp,
        &iprepr.src_addr,
        &iprepr.dst_addr,
        &ChecksumCaps::default(),
    )
    .expect("the stack sends valid, checksummed TCP");
    let payload = repr.payload.to_vec();
    Some(Sent {
        repr: TcpRepr {
            payload: &[],
            ..repr
        },
        payload,
        gso_size: None,
    })
}
