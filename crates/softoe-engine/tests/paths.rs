//! softoe on paths with a narrow hop, against Linux: path-MTU discovery
//! behind a 1,200-byte link between two Linux routers, and IPv4
//! fragments arriving at the engine (large UDP datagrams, a 4,000-byte
//! ping, TCP through a router that fragments). Needs root.
//!
//! The path: the engine and Linux (`lx`) on the bridge (MTU 1,500) — a
//! router — 1,200 bytes — a router — 1,500 bytes — a far Linux host. Both
//! ends' own links are wider than the path, so only path-MTU discovery
//! (or fragmentation) gets a full-sized segment through.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use common::*;
use softoe_testbed::{BRIDGE, RoutedHost};
use softoe_wire::Ipv4Address;

const T: Duration = Duration::from_secs(30);
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 254);
const N: u64 = 256 << 20;

fn via_gateway(c: &mut softoe_stack::StackConfig) {
    c.gateway = Some(Ipv4Address(GATEWAY.octets()));
}

/// The bed, and a far host behind a 1,200-byte hop that the engine and
/// `lx` reach through [`GATEWAY`].
fn narrow_path() -> (Bed, RoutedHost) {
    let mut bed = Bed::start(
        Options {
            stack: via_gateway,
            ..Options::default()
        },
        vec![],
    );
    let sw = bed.sw.clone();
    let far = bed
        .tb
        .routed_host(
            &sw,
            BRIDGE,
            "10.7.0.254/24".parse().unwrap(),
            &[1200, 1500],
            "far",
        )
        .unwrap();
    let lx = bed.linux.clone();
    bed.tb.route(&lx, &far.net(), far.gateway).unwrap();
    (bed, far)
}

/// `n` bytes from a Linux namespace `from` to a listener in `to`: returns
/// the seconds the transfer took (connect to the receiver's end of
/// stream), the data checked by SHA-256.
fn linux_to_linux(
    from: &softoe_testbed::Netns,
    to: &softoe_testbed::Netns,
    to_ip: Ipv4Addr,
    port: u16,
) -> f64 {
    let addr = SocketAddrV4::new(to_ip, port);
    let server = to
        .spawn(move || {
            let l = TcpListener::bind(addr).unwrap();
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            hash_stream(&mut s)
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (sha, secs) = from
        .run(move || {
            let t = Instant::now();
            let mut s = TcpStream::connect_timeout(&addr.into(), T).unwrap();
            let sha = send_stream(&mut s, N, 3);
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut rest).unwrap();
            (sha, t.elapsed().as_secs_f64())
        })
        .unwrap();
    assert_eq!(server.join().unwrap(), (N, sha), "Linux → Linux intact");
    secs
}

/// The path MTU Linux learnt toward `dst` in `ns` (`ip route get`'s
/// cached `mtu`), if it learnt one.
fn linux_pmtu(ns: &softoe_testbed::Netns, dst: Ipv4Addr) -> Option<u32> {
    let text = ns.ip(&["-4", "route", "get", &dst.to_string()]).ok()?;
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "mtu" {
            return words.next()?.parse().ok();
        }
    }
    None
}

fn gbps(secs: f64) -> f64 {
    N as f64 * 8.0 / secs / 1e9
}

#[test]
fn behind_a_1200_byte_hop_transfers_finish_both_ways() {
    let (bed, far) = narrow_path();
    let far_ns = far.ns.clone();

    // softoe → far.
    let port = 7500;
    let addr = SocketAddrV4::new(far.ip, port);
    let server = far_ns
        .spawn(move || {
            let l = TcpListener::bind(addr).unwrap();
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            hash_stream(&mut s)
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    let mut c = bed.app.tcp_connect(addr).unwrap();
    let want = send_stream(&mut c, N, 5);
    // Still open (its last bytes in flight): what `softoe stat` says.
    let snap = bed.snapshot();
    let conn = snap
        .connections
        .iter()
        .find(|x| x.remote == addr.to_string())
        .expect("the connection in softoe stat");
    assert_eq!((conn.snd_mss, conn.pmtu), (1148, 1200), "{conn:?}");
    c.shutdown_write().unwrap();
    assert_eq!(server.join().unwrap(), (N, want), "softoe → far intact");
    let out_secs = t.elapsed().as_secs_f64();
    let info = c.info().unwrap();
    assert_eq!(
        info.snd_mss, 1148,
        "1,200 less 40 of headers and 12 of timestamps"
    );
    drop(c);

    // far → softoe.
    let l = bed.app.tcp_listen(port + 1, 4).unwrap();
    let eng = SocketAddrV4::new(ENGINE_IP, port + 1);
    let client = far_ns
        .spawn(move || {
            let t = Instant::now();
            let mut s = TcpStream::connect_timeout(&eng.into(), T).unwrap();
            let sha = send_stream(&mut s, N, 7);
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut rest).unwrap();
            (sha, t.elapsed().as_secs_f64())
        })
        .unwrap();
    let (mut s, _) = l.accept_timeout(Some(T)).unwrap();
    s.set_read_timeout(Some(T));
    let got = hash_stream(&mut s);
    s.shutdown_write().unwrap();
    let (sha, in_secs) = client.join().unwrap();
    assert_eq!(got, (N, sha), "far → softoe intact");

    // Linux beside the engine, the same path, the same run.
    let lx_out = linux_to_linux(&bed.linux, &far_ns, far.ip, port + 2);
    let lx_pmtu = linux_pmtu(&bed.linux, far.ip);
    assert_eq!(lx_pmtu, Some(1200), "Linux learnt the hop too");
    let lx_in = linux_to_linux(&far_ns, &bed.linux, LINUX_IP, port + 3);
    let st = bed.snapshot().stack;
    assert!(st.pmtu_lowered >= 1, "{st:?}");
    eprintln!(
        "behind a 1,200-byte hop, 256 MiB each: softoe → far {out_secs:.2} s ({:.2} Gb/s, mss 1148, \
         pmtu 1200), far → softoe {in_secs:.2} s ({:.2} Gb/s); Linux → far {lx_out:.2} s \
         ({:.2} Gb/s, pmtu {lx_pmtu:?}), far → Linux {lx_in:.2} s ({:.2} Gb/s); engine: {} frag-needed \
         believed, {} ignored, {} retransmissions",
        gbps(out_secs),
        gbps(in_secs),
        gbps(lx_out),
        gbps(lx_in),
        st.pmtu_lowered,
        st.pmtu_ignored,
        st.tcp_retransmits,
    );
}

/// Sends one ICMP echo request of `size` data bytes from the current
/// namespace to `dst` with fragmentation allowed (`ping -s SIZE -M dont`,
/// through a raw socket: no ping binary needed) and returns the data of
/// the matching reply, or `None` if none came within a second.
fn ping(dst: Ipv4Addr, size: usize, seq: u16) -> Option<Vec<u8>> {
    use softoe_wire::{ChecksumCaps, Icmpv4Packet, Icmpv4Repr, Ipv4Packet};
    let data = linux_bytes(size, seq as u8);
    let req = Icmpv4Repr::EchoRequest {
        ident: 0x50f7,
        seq_no: seq,
        data: &data,
    };
    let mut msg = vec![0u8; req.buffer_len()];
    req.emit(
        &mut Icmpv4Packet::new_unchecked(&mut msg[..]),
        &ChecksumCaps::default(),
    );
    use rustix::net::{self, AddressFamily, RecvFlags, SendFlags, SocketType, ipproto, sockopt};
    let fd = net::socket(AddressFamily::INET, SocketType::RAW, Some(ipproto::ICMP))
        .expect("raw ICMP socket");
    sockopt::set_ip_mtu_discover(&fd, sockopt::Ipv4PathMtuDiscovery::DONT)
        .expect("IP_MTU_DISCOVER");
    sockopt::set_socket_timeout(&fd, sockopt::Timeout::Recv, Some(Duration::from_secs(1)))
        .expect("SO_RCVTIMEO");
    let sent =
        net::sendto(&fd, &msg, SendFlags::empty(), &SocketAddrV4::new(dst, 0)).expect("sendto");
    assert_eq!(sent, msg.len());
    let mut buf = vec![0u8; 65_536];
    for _ in 0..16 {
        let n = match net::recv(&fd, &mut buf[..], RecvFlags::empty()) {
            Ok((n, _)) if n > 0 => n,
            _ => break,
        };
        let Ok(ip) = Ipv4Packet::new_checked(&buf[..n]) else {
            continue;
        };
        if ip.src_addr().0 != dst.octets() {
            continue;
        }
        let Ok(p) = Icmpv4Packet::new_checked(ip.payload()) else {
            continue;
        };
        if let Ok(Icmpv4Repr::EchoReply {
            ident: 0x50f7,
            seq_no,
            data,
        }) = Icmpv4Repr::parse(&p, &ChecksumCaps::default())
            && seq_no == seq
        {
            return Some(data.to_vec());
        }
    }
    None
}

#[test]
fn fragments_from_linux_are_reassembled() {
    let (bed, far) = narrow_path();

    // UDP datagrams larger than the MTU, cut by Linux itself on the LAN.
    let mut sock = bed.app.udp_bind(9).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)));
    for (k, size) in [3000usize, 8000, 16_000].into_iter().enumerate() {
        let msg = linux_bytes(size, 40 + k as u8);
        let mut got = None;
        for _ in 0..10 {
            let m = msg.clone();
            bed.linux
                .run(move || {
                    let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                    s.send_to(&m, engine_addr(9)).unwrap();
                })
                .unwrap();
            let mut buf = vec![0u8; 65_536];
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                got = Some((buf[..n].to_vec(), from));
                break;
            }
        }
        let (back, from) = got.expect("the datagram, whole");
        assert_eq!(back, msg, "{size} bytes");
        assert_eq!(*from.ip(), LINUX_IP);
    }

    // ping -s 4000 -M dont: the request arrives in fragments, the reply
    // leaves in fragments.
    let mut answered = 0;
    for seq in 1..=3u16 {
        let reply = bed.linux.run(move || ping(ENGINE_IP, 4000, seq)).unwrap();
        if let Some(data) = reply {
            assert_eq!(data, linux_bytes(4000, seq as u8));
            answered += 1;
        }
    }
    assert!(answered >= 2, "{answered} of 3 large pings answered");

    // TCP from a Linux sender with path-MTU discovery off: the router
    // before the 1,200-byte hop fragments every full-sized segment.
    let before = bed.snapshot().stack;
    bed.tb
        .sysctl(&far.ns, "net.ipv4.ip_no_pmtu_disc=1")
        .unwrap();
    let l = bed.app.tcp_listen(7600, 4).unwrap();
    let eng = SocketAddrV4::new(ENGINE_IP, 7600);
    let client = far
        .ns
        .spawn(move || {
            let mut s = TcpStream::connect_timeout(&eng.into(), T).unwrap();
            let sha = send_stream(&mut s, 16 << 20, 9);
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut rest).unwrap();
            sha
        })
        .unwrap();
    let (mut s, _) = l.accept_timeout(Some(T)).unwrap();
    s.set_read_timeout(Some(T));
    let got = hash_stream(&mut s);
    s.shutdown_write().unwrap();
    assert_eq!(
        got,
        (16 << 20, client.join().unwrap()),
        "far → softoe in fragments, intact"
    );
    let st = bed.snapshot().stack;
    let reassembled = st.reasm_ok - before.reasm_ok;
    assert!(reassembled > 10_000, "{st:?}");
    assert_eq!(
        (st.reasm_overlaps, st.reasm_timeouts, st.reasm_invalid),
        (0, 0, 0),
        "{st:?}"
    );
    eprintln!(
        "fragments: UDP 3,000/8,000/16,000 bytes and {answered}/3 pings of 4,000 answered; \
         16 MiB of TCP through a fragmenting router, {reassembled} datagrams reassembled"
    );
}
