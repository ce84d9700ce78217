//! Two stacks on different links joined by a router whose hop is narrower
//! than their own MTU (1,500): path-MTU discovery (the router answers DF
//! packets too large with fragmentation needed), the plateau table (a
//! router that says MTU 0), and reassembly (a router that fragments).
//! Bulk data both ways, every byte checked against the sender's pattern.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use softoe_sim::workload::{Client, ConnSpec, EndResult, Server};
use softoe_sim::{
    DfPolicy, LinkConfig, NicConfig, NodeId, Pattern, Router, RouterPort, StackNode, World,
};
use softoe_stack::{Instant, Stack, StackConfig, StackStats, TcpConfig, TcpInfo};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

const A: Ipv4Address = Ipv4Address::new(10, 0, 1, 2);
const B: Ipv4Address = Ipv4Address::new(10, 0, 2, 2);
const BYTES: u64 = 4 << 20;

fn stack(n: u8, ip: Ipv4Address, gw: Ipv4Address, nic: &NicConfig) -> Stack {
    let mut cfg = StackConfig::new(
        EthernetAddress([2, 0, 0, 0, 0, n]),
        Ipv4Cidr::new(ip, 24).unwrap(),
    );
    cfg.gateway = Some(gw);
    cfg.seed = u64::from(n);
    cfg.caps.mtu = nic.mtu;
    cfg.caps.tso_max = nic.tso.then_some(65_535);
    cfg.caps.tx_csum = nic.tx_csum;
    cfg.tcp.rx_buffer = 1 << 20;
    cfg.tcp.tx_buffer = 1 << 20;
    Stack::new(cfg).unwrap()
}

struct Run {
    world: World,
    a: NodeId,
    b: NodeId,
    r: NodeId,
}

/// A (10.0.1.2) — router — B (10.0.2.2): the router sends at most
/// `hop_mtu` bytes on either side, the hosts' NICs take 1,500.
fn build(seed: u64, policy: DfPolicy, hop_mtu: usize) -> Run {
    let nic = NicConfig {
        mtu: 1500,
        ..NicConfig::offloads()
    };
    let spec = ConnSpec {
        id: 1,
        port: 5001,
        client_bytes: BYTES,
        server_bytes: BYTES,
        client_chunk: 64 * 1024,
        server_chunk: 64 * 1024,
        start: Instant::ZERO,
        client_abort_after: None,
        server_abort_after: None,
    };
    let pattern = Pattern::new(seed);
    let tcp = TcpConfig::default();
    let mut a = StackNode::new(
        stack(1, A, Ipv4Address::new(10, 0, 1, 1), &nic),
        pattern.clone(),
    );
    a.apps.push(Box::new(Client::new(spec, B, tcp)));
    let mut b = StackNode::new(stack(2, B, Ipv4Address::new(10, 0, 2, 1), &nic), pattern);
    b.apps.push(Box::new(Server::new(vec![spec], tcp)));
    let port = |n: u8, net: u8| RouterPort {
        mac: EthernetAddress([2, 0, 0, 0, 0xfe, n]),
        addr: Ipv4Cidr::new(Ipv4Address::new(10, 0, net, 1), 24).unwrap(),
        mtu: hop_mtu,
    };
    let router = Router::new(vec![port(1, 1), port(2, 2)], policy);
    let mut world = World::new(seed);
    let a = world.add_node(Box::new(a), nic);
    let r_nic = NicConfig {
        mtu: router.nic_mtu(),
        ..NicConfig::default()
    };
    let r = world.add_node_with_nics(Box::new(router), r_nic, 2);
    let b = world.add_node(Box::new(b), nic);
    let link = LinkConfig {
        rate_bps: Some(1_000_000_000),
        delay: Duration::from_micros(100),
        ..LinkConfig::default()
    };
    world.connect(a, r, link).unwrap();
    world.connect(r, b, link).unwrap();
    Run { world, a, b, r }
}

struct Ends {
    client: EndResult,
    server: Option<EndResult>,
    a: StackStats,
    b: StackStats,
    router: Router,
}

fn client(w: &World, a: NodeId) -> EndResult {
    w.node::<StackNode>(a)
        .unwrap()
        .app::<Client>(0)
        .unwrap()
        .result
}

fn server(w: &World, b: NodeId) -> Option<EndResult> {
    w.node::<StackNode>(b)
        .unwrap()
        .app::<Server>(0)
        .unwrap()
        .result(1)
        .copied()
}

/// Runs for at most `limit` of virtual time; the router is taken out.
fn run(mut r: Run, limit: Duration) -> Ends {
    let (a, b) = (r.a, r.b);
    r.world.run_while(Instant::ZERO + limit, |w| {
        client(w, a).done && server(w, b).is_some_and(|s| s.done)
    });
    let w = &mut r.world;
    let stats = |n: NodeId| *w.node::<StackNode>(n).unwrap().stack.stats();
    let (sa, sb) = (stats(a), stats(b));
    let (c, s) = (client(w, a), server(w, b));
    let router = std::mem::replace(
        w.node_mut::<Router>(r.r).unwrap(),
        Router::new(Vec::new(), DfPolicy::Honour),
    );
    Ends {
        client: c,
        server: s,
        a: sa,
        b: sb,
        router,
    }
}

fn intact(e: &EndResult) -> bool {
    e.done && !e.corrupt && e.eof && e.error.is_none() && e.received == BYTES && e.sent == BYTES
}

fn info(e: &EndResult) -> TcpInfo {
    e.info.expect("a last snapshot")
}

#[test]
fn a_transfer_behind_a_1200_byte_hop_finds_the_path_mtu_both_ways() {
    let e = run(build(1, DfPolicy::Honour, 1200), Duration::from_secs(10));
    let s = e.server.expect("accepted");
    assert!(intact(&e.client), "client: {:?}", e.client);
    assert!(intact(&s), "server: {s:?}");
    // 1,200 less 40 of headers and 12 of timestamps, as Linux's 1,148.
    for i in [info(&e.client), info(&s)] {
        assert_eq!((i.snd_mss, i.pmtu), (1148, 1200), "{i:?}");
    }
    assert!(e.router.stats.frag_needed >= 2, "{:?}", e.router.stats);
    assert_eq!(
        (e.router.stats.fragmented, e.router.stats.black_holed),
        (0, 0)
    );
    assert!(e.a.pmtu_lowered >= 1 && e.b.pmtu_lowered >= 1);
    // Learnt once each, early: a handful of retransmission rounds, no
    // timeouts.
    for i in [info(&e.client), info(&s)] {
        assert_eq!(i.rto_count, 0, "{i:?}");
    }
    let done = e.client.done_at.unwrap().total_millis();
    eprintln!(
        "4 MiB each way behind a 1,200-byte hop: done at {done} ms of virtual time, \
         {} frag-needed, {} + {} segments retransmitted",
        e.router.stats.frag_needed,
        info(&e.client).retransmits,
        info(&s).retransmits
    );
}

#[test]
fn an_old_router_saying_mtu_0_walks_the_plateau_table() {
    let e = run(
        build(2, DfPolicy::HonourOldStyle, 1200),
        Duration::from_secs(10),
    );
    let s = e.server.expect("accepted");
    assert!(intact(&e.client) && intact(&s), "{:?} {s:?}", e.client);
    // 1,500 → 1,492 (still too large) → 1,006 fits.
    for i in [info(&e.client), info(&s)] {
        assert_eq!((i.snd_mss, i.pmtu), (1006 - 52, 1006), "{i:?}");
    }
    assert!(e.a.pmtu_lowered >= 2, "two steps: {:?}", e.a);
}

#[test]
fn a_router_that_fragments_is_reassembled_behind() {
    let e = run(build(3, DfPolicy::Fragment, 1200), Duration::from_secs(10));
    let s = e.server.expect("accepted");
    assert!(intact(&e.client) && intact(&s), "{:?} {s:?}", e.client);
    // No message: the segments stay full-sized and arrive in pieces.
    for i in [info(&e.client), info(&s)] {
        assert_eq!((i.snd_mss, i.pmtu), (1448, 1500), "{i:?}");
    }
    assert!(e.router.stats.fragmented > 1000, "{:?}", e.router.stats);
    for st in [e.a, e.b] {
        assert!(st.reasm_ok > 1000, "{st:?}");
        assert_eq!(
            (st.reasm_overlaps, st.reasm_timeouts, st.reasm_invalid),
            (0, 0, 0)
        );
    }
}

#[test]
fn behind_a_black_hole_nothing_large_gets_through_as_on_linux() {
    // ICMP filtered: no packetization-layer probing (Linux's default,
    // tcp_mtu_probing = 0), so the first full-sized segment never arrives.
    let e = run(build(4, DfPolicy::BlackHole, 1200), Duration::from_secs(3));
    assert!(!e.client.done);
    assert!(e.router.stats.black_holed > 0);
    assert_eq!(e.a.pmtu_lowered, 0);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let trace = |seed| {
        let mut r = build(seed, DfPolicy::Honour, 1200);
        r.world
            .run_until(Instant::ZERO + Duration::from_millis(200));
        r.world.trace_hash()
    };
    assert_eq!(trace(5), trace(5));
}
