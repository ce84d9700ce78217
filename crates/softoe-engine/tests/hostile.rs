//! Hostile and unusual peers against the engine, with Linux on the other
//! side of a real (virtual) wire (issue 34 items 9 and 13). Needs root.
//!
//! - A SYN flood: Linux's namespace sends thousands of SYNs from spoofed
//!   sources through a raw socket; real Linux clients must then connect at
//!   once (through SYN cookies, the SYN queue being full of the flood), with
//!   window scaling and SACK, and their data must arrive intact.
//! - A router that cannot reach the destination: softoe's connection
//!   attempt through Linux, routing, to a network Linux has an `unreachable`
//!   or `prohibit` route for, must fail at once with `EHOSTUNREACH` (Linux
//!   sends host unreachable and administratively prohibited), not after
//!   two minutes of SYN retries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;

use std::io::Write;
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use softoe_wire::{
    ChecksumCaps, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr,
    TcpSeqNumber, TcpTimestamp,
};

/// `n` SYNs to `ENGINE_IP:port` from spoofed sources — half on the bed's
/// /24 (hosts that do not exist, which the engine will ARP for in vain),
/// half on a network it has no route to — each with random ports and ISNs
/// and Linux's options, as IPv4 packets for a raw socket.
fn spoofed_syns(n: usize, port: u16) -> Vec<(Ipv4Address, Vec<u8>)> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let dst = Ipv4Address(ENGINE_IP.octets());
    (0..n)
        .map(|k| {
            let r = next();
            let src = if k % 2 == 0 {
                Ipv4Address::new(10, 7, 0, 10 + (r % 240) as u8)
            } else {
                Ipv4Address::new(10, 66, (r >> 8) as u8, (r >> 16) as u8)
            };
            let syn = TcpRepr {
                src_port: 1024 + ((r >> 24) as u16) % 60_000,
                dst_port: port,
                control: TcpControl::Syn,
                psh: false,
                seq_number: TcpSeqNumber((r >> 32) as u32),
                ack_number: None,
                window_len: 64_240,
                window_scale: Some(7),
                max_seg_size: Some(1460),
                sack_permitted: true,
                sack_ranges: [None; 4],
                timestamp: Some(TcpTimestamp {
                    tsval: r as u32,
                    tsecr: 0,
                }),
                payload: &[],
            };
            let len = syn.buffer_len();
            let mut pkt = vec![0u8; 20 + len];
            let ip = Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::Tcp,
                payload_len: len,
                hop_limit: 64,
                ident: k as u16,
                dont_frag: true,
            };
            let mut p = Ipv4Packet::new_unchecked(&mut pkt[..]);
            ip.emit(&mut p, &ChecksumCaps::default());
            syn.emit(
                &mut TcpPacket::new_unchecked(p.payload_mut()),
                &src,
                &dst,
                &ChecksumCaps::default(),
            );
            (dst, pkt)
        })
        .collect()
}

/// Sends `packets` (whole IPv4 packets, source addresses included) from a
/// raw socket of the calling thread's namespace; returns how many went.
fn send_raw(packets: &[(Ipv4Address, Vec<u8>)]) -> usize {
    // SAFETY: plain socket(2), no pointers; the descriptor is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
    let mut sent = 0;
    for (dst, p) in packets {
        let to = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(dst.0),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: `p` and `to` outlive the call, and the lengths passed are
        // theirs.
        let n = unsafe {
            libc::sendto(
                fd,
                p.as_ptr().cast(),
                p.len(),
                0,
                (&raw const to).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if n == p.len() as isize {
            sent += 1;
        }
    }
    // SAFETY: `fd` is ours, open, and not used after.
    unsafe { libc::close(fd) };
    sent
}

/// 5,000 spoofed SYNs fill the listener's SYN queue (backlog 128) many
/// times over; then four Linux clients, one after another, each connect and
/// send 4 MiB, which arrive intact (SHA-256), each within a generous 5 s
/// (the bound is for correctness: before SYN cookies a client waited out
/// its SYN retries, two minutes). The engine's counters show the cookies
/// sent and the clients' ACKs validated, and the connections kept window
/// scaling, SACK and timestamps through them.
#[test]
fn linux_clients_connect_at_once_through_a_syn_flood() {
    const PORT: u16 = 7400;
    const N: u64 = 4 << 20;
    let mut bed = Bed::start(Options::default(), vec![]);
    let l = bed.app.tcp_listen(PORT, 128).unwrap();
    let syns = spoofed_syns(5000, PORT);
    let sent = bed.linux.run(move || send_raw(&syns)).unwrap();
    assert!(sent >= 4900, "{sent} of 5000 spoofed SYNs sent");
    wait_for(10, "the flood to reach the engine", || {
        bed.snapshot().stack.tcp_syncookies_sent >= 1000
    });
    for k in 0..4u8 {
        let t = Instant::now();
        let client = bed
            .linux
            .spawn(move || {
                let mut s =
                    TcpStream::connect_timeout(&engine_addr(PORT).into(), Duration::from_secs(10))
                        .unwrap();
                let sha = send_stream(&mut s, N, k);
                s.shutdown(Shutdown::Write).unwrap();
                sha
            })
            .unwrap();
        let (mut s, _) = l
            .accept_timeout(Some(Duration::from_secs(10)))
            .expect("a connection through the flood");
        s.set_read_timeout(Some(Duration::from_secs(10)));
        let info = s.info().unwrap();
        let got = hash_stream(&mut s);
        let want = client.join().unwrap();
        let took = t.elapsed();
        assert_eq!(got, (N, want), "client {k}: intact");
        assert!(
            took < Duration::from_secs(5),
            "client {k} took {took:?} to connect and send 4 MiB"
        );
        assert!(
            info.sack() && info.timestamps() && info.wscale().is_some(),
            "client {k}: options kept by the cookie: {info:?}"
        );
        eprintln!("client {k}: connected and sent 4 MiB in {took:?}");
    }
    let st = bed.snapshot().stack;
    eprintln!(
        "cookies sent {}, validated {}, failed {}; SYNs dropped {}",
        st.tcp_syncookies_sent, st.tcp_syncookies_recv, st.tcp_syncookies_failed, st.tcp_syn_drops
    );
    assert!(st.tcp_syncookies_sent >= 4000, "{st:?}");
    assert!(
        st.tcp_syncookies_recv >= 4,
        "every client through a cookie: {st:?}"
    );
    assert_eq!(st.tcp_syncookies_failed, 0, "{st:?}");
    bed.stop();
}

/// softoe's connection attempt to a network behind Linux (its gateway)
/// that Linux has an `unreachable` route for, and one it has a `prohibit`
/// route for: Linux answers the SYN with ICMP host unreachable and
/// communication administratively prohibited, and the attempt fails at
/// once with `EHOSTUNREACH`, as Linux's own would.
#[test]
fn a_connection_attempt_a_router_cannot_deliver_fails_at_once() {
    let opts = Options {
        stack: |c| c.gateway = Some(Ipv4Address(LINUX_IP.octets())),
        ..Options::default()
    };
    let bed = Bed::start(opts, vec![]);
    bed.tb.sysctl(&bed.linux, "net.ipv4.ip_forward=1").unwrap();
    bed.linux
        .ip(&["route", "add", "unreachable", "10.88.0.0/24"])
        .unwrap();
    bed.linux
        .ip(&["route", "add", "prohibit", "10.89.0.0/24"])
        .unwrap();
    for net in [88u8, 89] {
        let to = SocketAddrV4::new(Ipv4Addr::new(10, net, 0, 5), 80);
        let t = Instant::now();
        let app = bed.app.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(app.tcp_connect(to).map(|_| ()));
        });
        let res = rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("connect to {to} still waiting after 5 s"));
        let e = res.expect_err("nothing to connect to");
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EHOSTUNREACH),
            "{to}: {e} after {:?}",
            t.elapsed()
        );
        eprintln!("{to}: {e} after {:?}", t.elapsed());
    }
    let st = bed.snapshot().stack;
    assert_eq!(st.tcp_icmp_aborts, 2, "{st:?}");
    std::io::stderr().flush().unwrap();
}
