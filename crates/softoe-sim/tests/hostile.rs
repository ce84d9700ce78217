//! Hostile and unusual peers (issue 34 items 9, 12, 13), whole worlds in
//! virtual time: a SYN flood of spoofed sources against a listener, after
//! which a real client must still connect at once; a peer that goes silent
//! mid-transfer and one that never acknowledges our FIN, which must see a
//! bounded number of retransmissions on the RTO's schedule; and a router
//! that answers our SYN with an ICMP unreachable, which must end the
//! connection attempt at once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use softoe_sim::workload::{Client, ConnSpec, Server};
use softoe_sim::{
    LinkConfig, NicConfig, Node, NodeId, Pattern, RxInfo, SimFrame, StackNode, TapEvent, World,
};
use softoe_stack::{Instant, Stack, StackConfig, State, TcpConfig, TcpError};
use softoe_wire::{
    ChecksumCaps, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Icmpv4DstUnreachable,
    Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address, Ipv4Cidr, Ipv4Packet, Ipv4Repr, TcpControl,
    TcpPacket, TcpRepr, TcpSeqNumber,
};

const CLIENT_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
const SERVER_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
const CLIENT_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const SERVER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const PORT: u16 = 80;

fn stack(n: u8, ip: Ipv4Address) -> Stack {
    let mut cfg = StackConfig::new(
        EthernetAddress([2, 0, 0, 0, 0, n]),
        Ipv4Cidr::new(ip, 24).unwrap(),
    );
    cfg.seed = u64::from(n);
    cfg.secret = [n; 16];
    Stack::new(cfg).unwrap()
}

fn spec(bytes: u64, start: Instant) -> ConnSpec {
    ConnSpec {
        id: 1,
        port: PORT,
        client_bytes: bytes,
        server_bytes: bytes,
        client_chunk: 64 * 1024,
        server_chunk: 64 * 1024,
        start,
        client_abort_after: None,
        server_abort_after: None,
    }
}

/// A node that wraps another and puts extra frames on the wire at given
/// times (a flood of spoofed frames from the same link).
struct Injector<N> {
    inner: N,
    frames: VecDeque<(Instant, Vec<u8>)>,
}

impl<N: Node> Node for Injector<N> {
    fn receive(&mut self, now: Instant, frame: &[u8], info: RxInfo, out: &mut Vec<SimFrame>) {
        self.inner.receive(now, frame, info, out);
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        while self.frames.front().is_some_and(|(t, _)| *t <= now) {
            if let Some((_, bytes)) = self.frames.pop_front() {
                out.push(SimFrame {
                    bytes,
                    ..SimFrame::default()
                });
            }
        }
        self.inner.poll(now, out);
    }

    fn poll_at(&self) -> Option<Instant> {
        let next = self.frames.front().map(|(t, _)| *t);
        match (self.inner.poll_at(), next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// An Ethernet frame from `CLIENT_MAC` to the server carrying `tcp` from
/// `src`.
fn tcp_frame(src: Ipv4Address, tcp: &TcpRepr<'_>) -> Vec<u8> {
    let len = tcp.buffer_len();
    let mut f = vec![0u8; 14 + 20 + len];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: CLIENT_MAC,
        dst_addr: SERVER_MAC,
        ethertype: EtherType::Ipv4,
        vlan_tci: None,
    }
    .emit(&mut eth);
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: SERVER_IP,
        next_header: IpProtocol::Tcp,
        payload_len: len,
        hop_limit: 64,
        ident: 0,
        dont_frag: true,
    };
    let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip.emit(&mut ipp, &ChecksumCaps::default());
    tcp.emit(
        &mut TcpPacket::new_unchecked(ipp.payload_mut()),
        &src,
        &SERVER_IP,
        &ChecksumCaps::default(),
    );
    f
}

/// `n` SYNs to the server's port from random sources of the client's /24
/// (none of them a host that exists) and random ports, spread evenly over
/// `span` from `start`, each with Linux's options.
fn spoofed_syns(n: usize, start: Instant, span: Duration) -> VecDeque<(Instant, Vec<u8>)> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|k| {
            let r = next();
            let src = Ipv4Address::new(10, 0, 0, 10 + (r % 240) as u8);
            let syn = TcpRepr {
                src_port: 1024 + (r >> 8) as u16 % 60_000,
                dst_port: PORT,
                control: TcpControl::Syn,
                psh: false,
                seq_number: TcpSeqNumber((r >> 32) as u32),
                ack_number: None,
                window_len: 64_240,
                window_scale: Some(7),
                max_seg_size: Some(1460),
                sack_permitted: true,
                sack_ranges: [None; 4],
                timestamp: Some(softoe_wire::TcpTimestamp {
                    tsval: r as u32,
                    tsecr: 0,
                }),
                payload: &[],
            };
            let at = start + span.mul_f64(k as f64 / n as f64);
            (at, tcp_frame(src, &syn))
        })
        .collect()
}

/// A client and a server on one link of 10 Gb/s and 50 µs each way; the
/// client's node wrapped to put `flood` on the wire too. The client moves
/// `bytes` each way, connecting at `start`.
fn world(
    bytes: u64,
    start: Instant,
    flood: VecDeque<(Instant, Vec<u8>)>,
) -> (World, NodeId, NodeId) {
    let pattern = Pattern::new(1);
    let mut c = StackNode::new(stack(1, CLIENT_IP), pattern.clone());
    c.apps.push(Box::new(Client::new(
        spec(bytes, start),
        SERVER_IP,
        TcpConfig::default(),
    )));
    let mut s = StackNode::new(stack(2, SERVER_IP), pattern);
    s.apps.push(Box::new(Server::new(
        vec![spec(bytes, start)],
        TcpConfig::default(),
    )));
    let mut w = World::new(1);
    let client = w.add_node(
        Box::new(Injector {
            inner: c,
            frames: flood,
        }),
        NicConfig::default(),
    );
    let server = w.add_node(Box::new(s), NicConfig::default());
    w.connect(
        client,
        server,
        LinkConfig::new(10_000_000_000, Duration::from_micros(50)),
    )
    .unwrap();
    (w, client, server)
}

fn client_of(w: &World, id: NodeId) -> &StackNode {
    &w.node::<Injector<StackNode>>(id).unwrap().inner
}

/// 5,000 spoofed SYNs in 50 ms fill the server's SYN queue (a backlog of
/// 4) many times over; the real client that connects right after gets a
/// SYN cookie, its ACK makes the connection — with SACK and window
/// scaling, which the cookie kept — and a megabyte each way arrives
/// intact, all within a few round trips of its SYN. (Before cookies the
/// queue's embryos held it for two minutes and the client gave up.)
#[test]
fn a_client_connects_at_once_after_a_syn_flood() {
    let start = Instant::from_millis(100);
    let flood = spoofed_syns(5000, Instant::from_millis(40), Duration::from_millis(50));
    let (mut w, client, server) = world(1 << 20, start, flood);
    let done = w.run_while(Instant::from_secs(20), |w| {
        let c = client_of(w, client).app::<Client>(0).unwrap();
        let s = w
            .node::<StackNode>(server)
            .unwrap()
            .app::<Server>(0)
            .unwrap();
        c.result.done && s.conns.iter().all(|x| x.result.done) && !s.conns.is_empty()
    });
    let c = client_of(&w, client).app::<Client>(0).unwrap().result;
    let srv = w.node::<StackNode>(server).unwrap();
    let s = srv
        .app::<Server>(0)
        .unwrap()
        .result(1)
        .copied()
        .expect("accepted");
    assert!(done, "the client did not finish: {c:?}");
    assert_eq!((c.received, c.corrupt, c.error), (1 << 20, false, None));
    assert_eq!((s.received, s.corrupt, s.error), (1 << 20, false, None));
    let took = c.done_at.unwrap().saturating_duration_since(start);
    assert!(took < Duration::from_secs(1), "the transfer took {took:?}");
    let st = srv.stack.stats();
    assert!(st.tcp_syncookies_sent >= 4_900, "{st:?}");
    assert_eq!(
        (st.tcp_syncookies_recv, st.tcp_syncookies_failed),
        (1, 0),
        "{st:?}"
    );
    let info = s.info.expect("the server end's last snapshot");
    assert!(
        info.sack && info.timestamps && info.wscale.is_some(),
        "{info:?}"
    );
}

/// Runs `w` until `until`, counting what a tap sees the client send:
/// (when, TCP control, payload length) for every TCP segment.
fn client_segments(
    w: &mut World,
    until: Instant,
    after: Instant,
) -> Vec<(Instant, TcpControl, usize)> {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let log = Rc::clone(&seen);
    w.set_tap(Some(Box::new(move |e: &TapEvent<'_>| {
        if e.dir != 0 || e.at < after {
            return;
        }
        let Ok(eth) = EthernetFrame::new_checked(e.frame) else {
            return;
        };
        let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
            return;
        };
        if ip.next_header() != IpProtocol::Tcp {
            return;
        }
        if let Ok(t) = TcpPacket::new_checked(ip.payload()) {
            let ctl = if t.fin() {
                TcpControl::Fin
            } else if t.syn() {
                TcpControl::Syn
            } else {
                TcpControl::None
            };
            log.borrow_mut().push((e.at, ctl, t.payload().len()));
        }
    })));
    w.run_until(until);
    w.set_tap(None);
    seen.take()
}

/// A peer whose link dies mid-transfer: in the next 1.5 s the sender
/// resends a bounded number of segments — one episode of tail-loss probes,
/// then the RTO's backed-off retransmissions (Linux: a probe and three
/// RTOs) — not probes after every timeout (27 in all).
#[test]
fn a_silent_peer_gets_a_bounded_number_of_retransmissions() {
    let start = Instant::from_millis(10);
    let (mut w, client, _) = world(64 << 20, start, VecDeque::new());
    w.run_until(Instant::from_millis(30));
    let c = client_of(&w, client);
    assert!(c.app::<Client>(0).unwrap().result.sent > 0, "transferring");
    let before = c.stack.stats().tcp_retransmits;
    let link = w.node_link(client, 0).unwrap();
    assert!(w.cut_link(link));
    let cut = w.now();
    let segs = client_segments(&mut w, cut + Duration::from_millis(1500), cut);
    let rtx = client_of(&w, client).stack.stats().tcp_retransmits - before;
    // What the sender sends once it has heard nothing for a while (what
    // was in flight at the cut, or let out by its last ACKs, aside).
    // After the probes, only the RTO's (at about 0.2, 0.6 and 1.4 s).
    let late: Vec<_> = segs
        .iter()
        .filter(|s| s.2 > 0 && s.0 > cut + Duration::from_millis(100))
        .collect();
    assert!(
        (4..=9).contains(&rtx) && late.len() == 3,
        "{rtx} retransmissions in 1.5 s to a silent peer, {} after 100 ms: {segs:?}",
        late.len()
    );
}

/// A peer that stops answering just as our FIN goes (we sent nothing
/// else): the FIN is sent again a bounded number of times, on the RTO's
/// schedule after one episode of probes (each gap at least twice the one
/// before) — not six probes with every timeout, 62 times in all.
#[test]
fn an_unacknowledged_fin_is_resent_on_the_rto_schedule() {
    let start = Instant::from_millis(10);
    let (mut w, client, _) = world(0, start, VecDeque::new());
    let fin_sent = |w: &mut World| {
        let c = client_of(w, client);
        c.stack
            .sockets()
            .any(|h| c.stack.tcp_state(h).is_ok_and(|s| s == State::FinWait1))
    };
    assert!(w.run_while(Instant::from_secs(5), fin_sent));
    let link = w.node_link(client, 0).unwrap();
    assert!(w.cut_link(link));
    let cut = w.now();
    let segs = client_segments(&mut w, cut + Duration::from_secs(13), cut);
    let fins: Vec<Instant> = segs
        .iter()
        .filter(|s| s.1 == TcpControl::Fin)
        .map(|s| s.0)
        .collect();
    assert!(
        (4..=12).contains(&fins.len()),
        "{} FINs in 13 s: {fins:?}",
        fins.len()
    );
    // After 100 ms, only the RTO's, doubling.
    let late: Vec<Instant> = fins
        .iter()
        .copied()
        .filter(|&t| t > cut + Duration::from_millis(100))
        .collect();
    let gaps: Vec<Duration> = late
        .windows(2)
        .map(|p| p[1].saturating_duration_since(p[0]))
        .collect();
    assert!(late.len() >= 5, "{fins:?}");
    assert!(gaps[0] >= Duration::from_millis(390), "{gaps:?}");
    for p in gaps.windows(2) {
        assert!(p[1] >= p[0] * 19 / 10, "not backing off: {gaps:?}");
    }
}

/// A router in front of a server that answers every TCP SYN with an ICMP
/// destination unreachable of `code` quoting it (RFC 792), as a firewall's
/// `reject with icmp` or a router without a route does; everything else
/// goes to the server's stack (it answers ARP).
struct Rejecting {
    inner: StackNode,
    code: Icmpv4DstUnreachable,
}

impl Node for Rejecting {
    fn receive(&mut self, now: Instant, frame: &[u8], info: RxInfo, out: &mut Vec<SimFrame>) {
        if let Some(reply) = self.reject(frame) {
            out.push(SimFrame {
                bytes: reply,
                ..SimFrame::default()
            });
            return;
        }
        self.inner.receive(now, frame, info, out);
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        self.inner.poll(now, out);
    }

    fn poll_at(&self) -> Option<Instant> {
        self.inner.poll_at()
    }
}

impl Rejecting {
    fn reject(&self, frame: &[u8]) -> Option<Vec<u8>> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
        let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
        if ip.next_header() != IpProtocol::Tcp || !tcp.syn() {
            return None;
        }
        let quote = eth.payload().get(..28)?;
        let icmp = Icmpv4Repr::DstUnreachable {
            reason: self.code,
            data: quote,
        };
        let len = icmp.buffer_len();
        let mut f = vec![0u8; 14 + 20 + len];
        let mut e = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr {
            src_addr: SERVER_MAC,
            dst_addr: eth.src_addr(),
            ethertype: EtherType::Ipv4,
            vlan_tci: None,
        }
        .emit(&mut e);
        let r = Ipv4Repr {
            src_addr: SERVER_IP,
            dst_addr: ip.src_addr(),
            next_header: IpProtocol::Icmp,
            payload_len: len,
            hop_limit: 64,
            ident: 0,
            dont_frag: false,
        };
        let mut p = Ipv4Packet::new_unchecked(e.payload_mut());
        r.emit(&mut p, &ChecksumCaps::default());
        icmp.emit(
            &mut Icmpv4Packet::new_unchecked(p.payload_mut()),
            &ChecksumCaps::default(),
        );
        Some(f)
    }
}

/// A connection attempt answered with port unreachable (or host
/// unreachable) fails within its round trip, with the error Linux gives
/// (ECONNREFUSED, EHOSTUNREACH), instead of retrying its SYN for two
/// minutes and then timing out.
#[test]
fn an_icmp_unreachable_ends_the_connection_attempt_at_once() {
    for (code, want) in [
        (Icmpv4DstUnreachable::PortUnreachable, TcpError::Refused),
        (
            Icmpv4DstUnreachable::HostUnreachable,
            TcpError::HostUnreachable,
        ),
    ] {
        let start = Instant::from_millis(10);
        let pattern = Pattern::new(1);
        let mut c = StackNode::new(stack(1, CLIENT_IP), pattern.clone());
        c.apps.push(Box::new(Client::new(
            spec(1000, start),
            SERVER_IP,
            TcpConfig::default(),
        )));
        let s = Rejecting {
            inner: StackNode::new(stack(2, SERVER_IP), pattern),
            code,
        };
        let mut w = World::new(1);
        let client = w.add_node(Box::new(c), NicConfig::default());
        let server = w.add_node(Box::new(s), NicConfig::default());
        w.connect(
            client,
            server,
            LinkConfig::new(10_000_000_000, Duration::from_micros(50)),
        )
        .unwrap();
        w.run_while(Instant::from_secs(200), |w| {
            w.node::<StackNode>(client)
                .unwrap()
                .app::<Client>(0)
                .unwrap()
                .result
                .done
        });
        let node = w.node::<StackNode>(client).unwrap();
        let r = node.app::<Client>(0).unwrap().result;
        assert_eq!(r.error, Some(want), "{code:?}: {r:?}");
        let took = r.done_at.unwrap().saturating_duration_since(start);
        assert!(
            took < Duration::from_millis(10),
            "{code:?}: failed after {took:?}"
        );
        assert_eq!(node.stack.stats().tcp_icmp_aborts, 1);
    }
}
