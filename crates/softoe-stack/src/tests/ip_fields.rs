//! Per-socket IPv4 header fields (`IP_TOS`, `IP_TTL`) and the per-socket
//! congestion control algorithm (`TCP_CONGESTION`): what the frames carry.

use alloc::vec::Vec;

use softoe_wire::{
    ArpOperation, ChecksumCaps, EtherType, EthernetFrame, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, TcpControl, TcpRepr,
};

use super::harness::*;
use crate::{Algorithm, DEFAULT_TTL, Endpoint, PayloadRef, StackConfig};

/// The (TOS, TTL, protocol) of every IPv4 frame sent since the last look;
/// each header's checksum is checked.
fn headers(h: &mut Harness) -> Vec<(u8, u8, IpProtocol)> {
    frames(h).0
}

/// As [`headers`], with the TCP segments parsed.
fn frames(h: &mut Harness) -> (Vec<(u8, u8, IpProtocol)>, Vec<Sent>) {
    let mut out = Vec::new();
    let mut segs = Vec::new();
    for (bytes, _) in core::mem::take(&mut h.dev.frames) {
        segs.extend(parse_tcp(&bytes));
        let eth = EthernetFrame::new_checked(&bytes[..]).unwrap();
        if eth.ethertype() != EtherType::Ipv4 {
            continue;
        }
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        let r = Ipv4Repr::parse(&ip, &ChecksumCaps::default()).expect("header checksum valid");
        out.push(((ip.dscp() << 2) | ip.ecn(), r.hop_limit, r.next_header));
    }
    (out, segs)
}

#[test]
fn a_connection_carries_its_tos_and_ttl_from_the_syn_on() {
    let mut h = Harness::new();
    let conn = h
        .stack
        .tcp_connect(
            h.now,
            remote(),
            Some(Endpoint::new(LOCAL_IP, LOCAL_PORT)),
            None,
        )
        .unwrap();
    // Set before the first poll: the SYN carries them. The ECN bits of a
    // TCP socket's TOS stay the stack's (not negotiated: zero).
    h.stack.set_tos(conn, 0xb8 | 3).unwrap();
    h.stack.set_ttl(conn, 7).unwrap();
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(headers(&mut h), [(0xb8, 7, IpProtocol::Tcp)], "the SYN");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!((info.tos, info.ttl), (0xb8, 7));
    assert_eq!(h.stack.ip_fields(conn).unwrap(), (0xb8, 7));
    // Changed on an open connection: the next segment carries the new
    // values; TTL 0 is the default again.
    h.stack.set_tos(conn, 0x48).unwrap();
    h.stack.set_ttl(conn, 0).unwrap();
    h.now += core::time::Duration::from_secs(1);
    h.stack.poll(h.now, &mut h.dev);
    let sent = headers(&mut h);
    assert!(!sent.is_empty(), "the SYN is retransmitted");
    assert!(
        sent.iter()
            .all(|&f| f == (0x48, DEFAULT_TTL, IpProtocol::Tcp)),
        "{sent:?}"
    );
}

#[test]
fn a_default_socket_sends_tos_zero_and_the_configured_ttl() {
    let mut cfg = config();
    cfg.tcp.ttl = 33;
    let mut h = Harness::with_config(cfg);
    h.stack.tcp_connect(h.now, remote(), None, None).unwrap();
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(headers(&mut h), [(0, 33, IpProtocol::Tcp)]);
    let mut h = Harness::new();
    h.stack.tcp_connect(h.now, remote(), None, None).unwrap();
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(headers(&mut h), [(0, 64, IpProtocol::Tcp)]);
}

#[test]
fn a_listener_passes_its_tos_ttl_and_algorithm_to_what_it_accepts() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.stack.set_tos(lst, 0x20).unwrap();
    h.stack.set_ttl(lst, 200).unwrap();
    h.stack.tcp_set_congestion(lst, Algorithm::NewReno).unwrap();
    assert_eq!(h.stack.ip_fields(lst).unwrap(), (0x20, 200));
    assert_eq!(h.stack.tcp_congestion(lst).unwrap(), Algorithm::NewReno);
    h.send(TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    let (hdrs, sa) = frames(&mut h);
    assert_eq!(hdrs, [(0x20, 200, IpProtocol::Tcp)], "the SYN-ACK");
    let iss = sa.first().map(Sent::seq).expect("a SYN-ACK");
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(iss, 1)),
        ..SEND_TEMPL
    });
    let conn = h.stack.tcp_accept(lst).unwrap().expect("accepted");
    let info = h.stack.tcp_info(conn).unwrap();
    assert_eq!(
        (info.tos, info.ttl, info.congestion),
        (0x20, 200, Algorithm::NewReno)
    );
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 100)).unwrap();
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(headers(&mut h), [(0x20, 200, IpProtocol::Tcp)], "data");
}

/// `SO_PRIORITY` is no header field: it rides with every frame of the
/// socket to the port (a bonded port's prioritized policy reads it), from
/// a listener to what it accepts; frames of no socket carry 0.
#[test]
fn a_socket_hands_its_priority_to_the_port_with_every_frame() {
    let mut h = Harness::new();
    let lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    h.stack.set_priority(lst, 6).unwrap();
    h.dev.priorities.clear();
    h.send(TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    let (_, sa) = frames(&mut h);
    let iss = sa.first().map(Sent::seq).expect("a SYN-ACK");
    assert_eq!(h.dev.priorities, [6], "the SYN-ACK");
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(iss, 1)),
        ..SEND_TEMPL
    });
    let conn = h.stack.tcp_accept(lst).unwrap().expect("accepted");
    assert_eq!(h.stack.priority(lst).unwrap(), 6);
    assert_eq!(h.stack.priority(conn).unwrap(), 6, "the listener's");
    h.stack.tcp_send(conn, PayloadRef::new(0, 0, 100)).unwrap();
    h.stack.poll(h.now, &mut h.dev);
    // Acknowledged, so Nagle lets the next small segment go.
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(iss, 101)),
        ..SEND_TEMPL
    });
    h.stack.set_priority(conn, 0).unwrap();
    assert_eq!(h.stack.priority(conn).unwrap(), 0);
    assert_eq!(
        h.stack.priority(lst).unwrap(),
        6,
        "the listener keeps its own"
    );
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 100, 100))
        .unwrap();
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(h.dev.priorities, [6, 6, 0], "data at 6, then at 0");
    // A reset for no socket carries 0.
    h.dev.priorities.clear();
    h.send(TcpRepr {
        dst_port: 999,
        ..SEND_TEMPL
    });
    assert_eq!(h.dev.priorities, [0]);
    let u = h
        .stack
        .udp_bind(Endpoint::new(LOCAL_IP, 5000), None)
        .unwrap();
    h.stack.set_priority(u, 7).unwrap();
    assert_eq!(h.stack.priority(u).unwrap(), 7);
    h.stack
        .udp_send_to(u, Endpoint::new(REMOTE_IP, 9), PayloadRef::new(0, 0, 10))
        .unwrap();
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(h.dev.priorities, [0, 7]);
}

/// A socket at priority 6 or more with something to send is served before
/// bulk that became ready before it (a real-time message does not wait
/// behind a window of bulk segments in the engine); below 6, in turn.
#[test]
fn interactive_priority_is_served_first() {
    let mut h = Harness::new();
    let bind = |h: &mut Harness, port: u16, prio: u8| {
        let u = h
            .stack
            .udp_bind(Endpoint::new(LOCAL_IP, port), None)
            .unwrap();
        h.stack.set_priority(u, prio).unwrap();
        u
    };
    let (bulk, five, rt) = (
        bind(&mut h, 5000, 0),
        bind(&mut h, 5001, 5),
        bind(&mut h, 5002, 6),
    );
    h.stack.poll(h.now, &mut h.dev);
    h.dev.priorities.clear();
    let send = |h: &mut Harness, u| {
        h.stack
            .udp_send_to(u, Endpoint::new(REMOTE_IP, 9), PayloadRef::new(0, 0, 10))
            .unwrap();
    };
    send(&mut h, bulk);
    send(&mut h, five);
    send(&mut h, rt);
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(h.dev.priorities, [6, 0, 5]);
}

#[test]
fn a_udp_socket_sends_its_whole_tos_byte() {
    let mut h = Harness::new();
    let u = h
        .stack
        .udp_bind(Endpoint::new(LOCAL_IP, 5000), None)
        .unwrap();
    // UDP keeps the ECN bits: the program owns them (as on Linux).
    h.stack.set_tos(u, 0xb9).unwrap();
    h.stack.set_ttl(u, 1).unwrap();
    h.stack
        .udp_send_to(u, Endpoint::new(REMOTE_IP, 9), PayloadRef::new(0, 0, 10))
        .unwrap();
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(headers(&mut h), [(0xb9, 1, IpProtocol::Udp)]);
}

#[test]
fn switching_the_algorithm_keeps_the_window() {
    let mut cfg: StackConfig = config();
    cfg.tcp.congestion = Algorithm::Cubic;
    let mut h = Harness::with_config(cfg);
    let (conn, our) = open_plain(&mut h);
    // Grow the window a little: 10 segments sent and acknowledged.
    h.stack
        .tcp_send(conn, PayloadRef::new(0, 0, 14_600))
        .unwrap();
    h.recv();
    h.send(TcpRepr {
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(our, 14_600)),
        ..SEND_TEMPL
    });
    let before = h.stack.tcp_info(conn).unwrap();
    assert_eq!(before.congestion, Algorithm::Cubic);
    h.stack
        .tcp_set_congestion(conn, Algorithm::NewReno)
        .unwrap();
    let after = h.stack.tcp_info(conn).unwrap();
    assert_eq!(after.congestion, Algorithm::NewReno);
    assert_eq!(
        (after.cwnd, after.ssthresh),
        (before.cwnd, before.ssthresh),
        "the window carries over"
    );
    assert!(after.cwnd > 14_600, "it had grown: {}", after.cwnd);
    assert_eq!(Algorithm::from_name("reno"), Some(Algorithm::NewReno));
    assert_eq!(Algorithm::from_name("cubic"), Some(Algorithm::Cubic));
    assert_eq!(Algorithm::from_name("bbr"), None);
}

/// A SYN carrying IP options (a loose source route, as sshd's check
/// fears): the stack takes the segment, ignores the options — it answers
/// the source address straight, never by the recorded route — and sends
/// none itself. So `IP_OPTIONS` of a softoe socket is always empty.
#[test]
fn ip_options_of_a_syn_are_ignored_not_reversed() {
    let mut h = Harness::new();
    let _lst = h.stack.tcp_listen(local(), 8, None).unwrap();
    let plain = Harness::frame(&TcpRepr {
        control: TcpControl::Syn,
        max_seg_size: Some(1460),
        ..SEND_TEMPL
    });
    // LSRR via 10.0.0.9, then END: 8 bytes of options after the 20-byte header.
    let opts = [0x83, 7, 4, 10, 0, 0, 9, 0];
    let mut f = plain[..14 + 20].to_vec();
    f.extend_from_slice(&opts);
    f.extend_from_slice(&plain[14 + 20..]);
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.set_header_len(28);
        ip.set_total_len((plain.len() - 14 + 8) as u16);
        ip.fill_checksum();
    }
    h.send_raw(&f, crate::RxMeta::default());
    let raw: Vec<Vec<u8>> = h.dev.frames.iter().map(|(b, _)| b.clone()).collect();
    let (hdrs, segs) = frames(&mut h);
    assert_eq!(segs.len(), 1, "a SYN-ACK: {segs:?}");
    assert_eq!(segs[0].repr.control, TcpControl::Syn);
    assert_eq!(segs[0].ack(), Some(add(REMOTE_SEQ, 1)));
    assert_eq!(hdrs, [(0, 64, IpProtocol::Tcp)]);
    // To the source itself (not the route's hop), with a plain header.
    let eth = EthernetFrame::new_checked(&raw[0][..]).unwrap();
    let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(ip.header_len(), 20, "no options sent");
    assert_eq!(ip.dst_addr(), REMOTE_IP);
}

/// A frame that waited for its next hop's ARP reply keeps its socket's
/// priority: a real-time message to a new neighbour must not leave as bulk.
#[test]
fn a_frame_that_waited_for_arp_keeps_its_priority() {
    let mut h = Harness::new();
    let other = Ipv4Address::new(10, 0, 0, 9);
    let u = h
        .stack
        .udp_bind(Endpoint::new(LOCAL_IP, 5000), None)
        .unwrap();
    h.stack.set_priority(u, 7).unwrap();
    h.dev.priorities.clear();
    h.stack
        .udp_send_to(u, Endpoint::new(other, 9), PayloadRef::new(0, 0, 10))
        .unwrap();
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(h.dev.priorities, [0], "only the ARP request so far");
    h.arp(ArpOperation::Reply, other, LOCAL_IP);
    h.stack.poll(h.now, &mut h.dev);
    assert_eq!(
        h.dev.priorities,
        [0, 7],
        "the waiting datagram, at its priority"
    );
}
