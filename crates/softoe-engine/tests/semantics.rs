//! TCP and UDP semantics against Linux: handshakes both ways, half-close
//! both ways, resets from either side, many connections at once, UDP echo
//! both ways, ping and ARP, the request/response service. The engine's side is the in-process application
//! API (`softoe_engine::app`), used from the test's threads. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use common::*;
use softoe_engine::app::state_of;
use softoe_engine::services::{Echo, RequestResponse};
use softoe_stack::State;

const T: Duration = Duration::from_secs(10);

/// The engine's state of `s`'s connection.
fn state(s: &softoe_engine::app::TcpStream) -> State {
    state_of(&s.info().unwrap()).unwrap()
}

fn connect_to_engine(port: u16) -> TcpStream {
    let s = TcpStream::connect_timeout(&engine_addr(port).into(), T).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s
}

#[test]
fn handshake_both_directions() {
    let bed = Bed::start(Options::default(), vec![]);

    // Linux opens, softoe accepts.
    let l = bed.app.tcp_listen(7001, 8).unwrap();
    let client = bed
        .linux
        .spawn(|| {
            let mut s = connect_to_engine(7001);
            s.write_all(b"hello softoe").unwrap();
            let mut b = [0u8; 11];
            s.read_exact(&mut b).unwrap();
            (b, s.local_addr().unwrap())
        })
        .unwrap();
    let (mut s, peer) = l.accept_timeout(Some(T)).unwrap();
    assert_eq!(*peer.ip(), LINUX_IP);
    assert_eq!(*s.local_addr().ip(), ENGINE_IP);
    let mut b = [0u8; 12];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"hello softoe");
    s.write_all(b"hello linux").unwrap();
    let (got, linux_local) = client.join().unwrap();
    assert_eq!(&got, b"hello linux");
    assert_eq!(linux_local, std::net::SocketAddr::V4(peer));
    let i = s.info().unwrap();
    assert!(matches!(
        state_of(&i),
        Some(State::Established | State::CloseWait)
    ));
    assert!(i.sack() && i.timestamps() && i.wscale().is_some(), "{i:?}");

    // softoe opens, Linux accepts.
    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(7002)).unwrap();
            let (mut s, peer) = l.accept().unwrap();
            s.write_all(b"welcome").unwrap();
            let mut b = [0u8; 6];
            s.read_exact(&mut b).unwrap();
            (peer, b)
        })
        .unwrap();
    let mut c = connect_retrying(&bed, 7002);
    let mut b = [0u8; 7];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"welcome");
    c.write_all(b"thanks").unwrap();
    let (peer, got) = server.join().unwrap();
    assert_eq!(&got, b"thanks");
    assert_eq!(peer, std::net::SocketAddr::V4(c.local_addr()));
    let st = state(&c);
    assert!(
        matches!(st, State::Established | State::CloseWait),
        "{st:?}"
    );
}

/// Connects from the engine to Linux's `port`, retrying while Linux's
/// listener is not up yet.
fn connect_retrying(bed: &Bed, port: u16) -> softoe_engine::app::TcpStream {
    let end = std::time::Instant::now() + T;
    loop {
        match bed.app.tcp_connect(linux_addr(port)) {
            Ok(s) => return s,
            Err(e)
                if e.kind() == ErrorKind::ConnectionRefused && std::time::Instant::now() < end =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("connect to Linux port {port}: {e}"),
        }
    }
}

#[test]
fn half_close_in_both_directions() {
    let bed = Bed::start(Options::default(), vec![]);

    // Linux closes its sending side first; softoe keeps sending afterwards.
    let l = bed.app.tcp_listen(7011, 8).unwrap();
    let client = bed
        .linux
        .spawn(|| {
            let mut s = connect_to_engine(7011);
            s.write_all(&[1u8; 100_000]).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            back
        })
        .unwrap();
    let (mut s, _) = l.accept_timeout(Some(T)).unwrap();
    s.set_read_timeout(Some(T));
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, vec![1u8; 100_000]);
    assert_eq!(state(&s), State::CloseWait);
    // The half-open connection still carries data the other way.
    s.write_all(&[2u8; 300_000]).unwrap();
    drop(s);
    assert_eq!(client.join().unwrap(), vec![2u8; 300_000]);

    // softoe closes its sending side first; Linux keeps sending afterwards.
    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(7012)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(&[4u8; 200_000]).unwrap();
            got
        })
        .unwrap();
    let mut c = connect_retrying(&bed, 7012);
    c.set_read_timeout(Some(T));
    c.write_all(&[3u8; 50_000]).unwrap();
    c.shutdown_write().unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).unwrap();
    assert_eq!(back, vec![4u8; 200_000]);
    assert_eq!(server.join().unwrap(), vec![3u8; 50_000]);
    // Both FINs exchanged: we are in TIME-WAIT, the closer's state.
    let st = state(&c);
    assert!(matches!(st, State::TimeWait | State::Closed), "{st:?}");
}

#[test]
fn reset_from_either_side() {
    let bed = Bed::start(Options::default(), vec![]);

    // softoe aborts: Linux's read fails with ECONNRESET.
    let l = bed.app.tcp_listen(7021, 8).unwrap();
    let client = bed
        .linux
        .spawn(|| {
            let mut s = connect_to_engine(7021);
            s.write_all(b"x").unwrap();
            let mut b = [0u8; 16];
            s.read(&mut b).map_err(|e| e.kind())
        })
        .unwrap();
    let (mut s, _) = l.accept_timeout(Some(T)).unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    s.abort().unwrap();
    assert_eq!(client.join().unwrap(), Err(ErrorKind::ConnectionReset));

    // Linux aborts (SO_LINGER 0): softoe's read fails with a reset.
    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(7022)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            linger_zero(&s);
            drop(s);
        })
        .unwrap();
    let mut c = connect_retrying(&bed, 7022);
    c.set_read_timeout(Some(T));
    c.write_all(b"y").unwrap();
    server.join().unwrap();
    let mut b = [0u8; 8];
    assert_eq!(
        c.read(&mut b).map_err(|e| e.kind()),
        Err(ErrorKind::ConnectionReset)
    );

    // A SYN to a closed port is refused, both ways.
    let e = bed
        .app
        .tcp_connect(linux_addr(7029))
        .err()
        .map(|e| e.kind());
    assert_eq!(e, Some(ErrorKind::ConnectionRefused));
    let e = bed
        .linux
        .run(|| {
            TcpStream::connect_timeout(&engine_addr(7029).into(), T)
                .err()
                .map(|e| e.kind())
        })
        .unwrap();
    assert_eq!(e, Some(ErrorKind::ConnectionRefused));
}

#[test]
fn a_hundred_concurrent_connections() {
    const CONNS: usize = 100;
    const BYTES: usize = 64 * 1024;
    let echoed = reports();
    let bed = Bed::start(
        Options::default(),
        vec![Box::new(Echo::new(7, echoed.clone()))],
    );

    // Linux → softoe: 100 clients of the echo service at once.
    let clients: Vec<_> = (0..CONNS)
        .map(|i| {
            bed.linux
                .spawn(move || {
                    let mut s = connect_to_engine(7);
                    let data = linux_bytes(BYTES, i as u8);
                    let mut w = s.try_clone().unwrap();
                    let d2 = data.clone();
                    let writer = std::thread::spawn(move || {
                        w.write_all(&d2).unwrap();
                        w.shutdown(Shutdown::Write).unwrap();
                    });
                    let mut back = Vec::new();
                    s.read_to_end(&mut back).unwrap();
                    writer.join().unwrap();
                    back == data
                })
                .unwrap()
        })
        .collect();
    let ok = clients
        .into_iter()
        .filter(|_| true)
        .map(|c| c.join().unwrap())
        .filter(|&x| x)
        .count();
    assert_eq!(ok, CONNS);
    wait_for(10, "every echo report", || {
        echoed.lock().unwrap().len() == CONNS
    });
    assert!(
        echoed
            .lock()
            .unwrap()
            .iter()
            .all(|r| r.error.is_none() && r.received == BYTES as u64)
    );

    // softoe → Linux: 100 connections open at once to one Linux server.
    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(7031)).unwrap();
            let conns: Vec<_> = (0..CONNS)
                .map(|_| {
                    let (mut s, _) = l.accept().unwrap();
                    std::thread::spawn(move || {
                        let mut got = Vec::new();
                        s.read_to_end(&mut got).unwrap();
                        s.write_all(&got).unwrap();
                    })
                })
                .collect();
            for c in conns {
                c.join().unwrap();
            }
        })
        .unwrap();
    let first = connect_retrying(&bed, 7031);
    let mut streams = vec![first];
    for _ in 1..CONNS {
        streams.push(bed.app.tcp_connect(linux_addr(7031)).unwrap());
    }
    let live = bed
        .snapshot()
        .connections
        .iter()
        .filter(|c| c.remote.ends_with(":7031") && c.state == "ESTAB")
        .count();
    assert_eq!(live, CONNS, "softoe stat shows every connection");
    let threads: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            std::thread::spawn(move || {
                let data = linux_bytes(BYTES, 100 + i as u8);
                s.set_read_timeout(Some(T));
                s.write_all(&data).unwrap();
                s.shutdown_write().unwrap();
                let mut back = Vec::new();
                s.read_to_end(&mut back).unwrap();
                back == data
            })
        })
        .collect();
    let ok = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|&x| x)
        .count();
    assert_eq!(ok, CONNS);
    server.join().unwrap();
}

#[test]
fn udp_echo_both_ways() {
    let bed = Bed::start(Options::default(), vec![]);

    // Linux → softoe: an echo server on the engine's UDP port 7.
    let mut sock = bed.app.udp_bind(7).unwrap();
    sock.set_read_timeout(Some(T));
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 2048];
        for _ in 0..3 {
            let (n, from) = sock.recv_from(&mut buf).unwrap();
            sock.send_to(&buf[..n], from).unwrap();
        }
    });
    bed.linux
        .run(|| {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            for (i, len) in [1usize, 512, 1472].into_iter().enumerate() {
                let msg = linux_bytes(len, i as u8);
                // UDP may lose a datagram; the first ones also wait for ARP.
                let mut got = None;
                for _ in 0..10 {
                    s.send_to(&msg, engine_addr(7)).unwrap();
                    let mut buf = [0u8; 2048];
                    if let Ok((n, from)) = s.recv_from(&mut buf) {
                        got = Some((buf[..n].to_vec(), from));
                        break;
                    }
                }
                let (back, from) = got.expect("an echo");
                assert_eq!(back, msg);
                assert_eq!(from, engine_addr(7).into());
            }
        })
        .unwrap();
    echo.join().unwrap();

    // softoe → Linux: Linux echoes on its UDP port 7.
    let server = bed
        .linux
        .spawn(|| {
            let s = UdpSocket::bind(linux_addr(7)).unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let mut buf = [0u8; 2048];
            for _ in 0..3 {
                let (n, from) = s.recv_from(&mut buf).unwrap();
                s.send_to(&buf[..n], from).unwrap();
            }
        })
        .unwrap();
    let mut c = bed.app.udp_bind(40_000).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(500)));
    for (i, len) in [1usize, 700, 1472].into_iter().enumerate() {
        let msg = linux_bytes(len, 50 + i as u8);
        let mut got = None;
        for _ in 0..10 {
            c.send_to(&msg, linux_addr(7)).unwrap();
            let mut buf = [0u8; 2048];
            match c.recv_from(&mut buf) {
                Ok((n, from)) => {
                    got = Some((buf[..n].to_vec(), from));
                    break;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                Err(e) => panic!("{e}"),
            }
        }
        let (back, from) = got.expect("an echo");
        assert_eq!(back, msg);
        assert_eq!(from, linux_addr(7));
    }
    server.join().unwrap();
    // Too large for one frame: refused, not cut.
    let e = c.send_to(&[0u8; 1473], linux_addr(7)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    // A batch: counted in order up to the first that fails; the commands
    // went to the engine together, so the ones after it are sent too.
    let server = bed
        .linux
        .spawn(|| {
            let s = UdpSocket::bind(linux_addr(8)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = [0u8; 2048];
            let mut got = Vec::new();
            while let Ok((n, _)) = s.recv_from(&mut buf) {
                got.push(buf[..n].to_vec());
            }
            got
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let big = [0u8; 1473];
    let batch: [&[u8]; 4] = [b"one", b"two", &big, b"four"];
    assert_eq!(c.send_batch_to(&batch, linux_addr(8)).unwrap(), 2);
    assert_eq!(c.send_batch_to(&[], linux_addr(8)).unwrap(), 0);
    let e = c.send_batch_to(&[&big[..]], linux_addr(8)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    assert_eq!(
        server.join().unwrap(),
        vec![b"one".to_vec(), b"two".to_vec(), b"four".to_vec()]
    );
}

#[test]
fn ping_and_arp_both_ways() {
    let bed = Bed::start(Options::default(), vec![]);
    // Linux pings softoe (which first resolves the engine by ARP).
    let out = bed
        .linux
        .command("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2", &ENGINE_IP.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ping failed:\n{text}");
    assert!(text.contains("3 received"), "{text}");
    // Linux learnt the engine's MAC by ARP.
    let neigh = bed
        .linux
        .ip(&["neigh", "show", &ENGINE_IP.to_string()])
        .unwrap();
    assert!(
        neigh.contains("02:50:00:00:00:01"),
        "Linux's neighbour table: {neigh}"
    );
    assert!(bed.snapshot().stack.icmp_echo >= 3);

    // softoe resolves Linux by ARP before its first segment; Linux learns
    // nothing new from the ping above about that direction, so flush first.
    bed.linux.ip(&["neigh", "flush", "all"]).unwrap();
    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(7041)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 2];
            s.read_exact(&mut b).unwrap();
            b
        })
        .unwrap();
    let mut c = connect_retrying(&bed, 7041);
    c.write_all(b"ok").unwrap();
    assert_eq!(&server.join().unwrap(), b"ok");
    let neigh = bed
        .linux
        .ip(&["neigh", "show", &ENGINE_IP.to_string()])
        .unwrap();
    assert!(
        neigh.contains("02:50:00:00:00:01"),
        "after softoe's ARP request: {neigh}"
    );
}

/// `SO_LINGER` with a zero timeout: closing sends a RST.
fn linger_zero(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: passes a live `linger` of the size given to a socket we own.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const l).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_LINGER");
}

/// netperf-style request/response against the engine's built-in service:
/// 4-byte requests, 1,000-byte answers (the engine's pattern, in order),
/// one at a time and then pipelined; a half request is not answered.
#[test]
fn request_response_service_answers_each_request() {
    let done = reports();
    let bed = Bed::start(
        Options::default(),
        vec![Box::new(
            RequestResponse::new(5000, 4, 1000, done.clone()).unwrap(),
        )],
    );
    assert!(RequestResponse::new(1, 0, 10, reports()).is_err());
    let got = bed
        .linux
        .run(|| {
            let mut s = connect_to_engine(5000);
            s.set_nodelay(true).unwrap();
            let mut all = Vec::new();
            let mut buf = [0u8; 1000];
            for _ in 0..50 {
                s.write_all(b"ping").unwrap();
                s.read_exact(&mut buf).unwrap();
                all.extend_from_slice(&buf);
            }
            // Ten requests at once, then two bytes of an eleventh.
            s.write_all(&[7u8; 42]).unwrap();
            let mut ten = vec![0u8; 10_000];
            s.read_exact(&mut ten).unwrap();
            all.extend_from_slice(&ten);
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty(), "{} bytes for half a request", rest.len());
            all
        })
        .unwrap();
    assert_eq!(got.len(), 60_000);
    assert_eq!(
        hex(&<sha2::Sha256 as sha2::Digest>::digest(&got)),
        pattern_sha(60_000)
    );
    wait_for(10, "the service's report", || {
        !done.lock().unwrap().is_empty()
    });
    let r = done.lock().unwrap()[0].clone();
    assert_eq!((r.received, r.sent, r.error), (242, 60_000, None));
}

/// Frames the kernel drops because the engine did not read them in time
/// (its TAP queue full) are counted, and `softoe stat` shows them: here the
/// queue is cut to 64 frames and the engine held while Linux sends 500
/// datagrams.
#[test]
fn frames_dropped_before_the_engine_are_counted() {
    let bed = Bed::start(Options::default(), vec![]);
    let _sink = bed.app.udp_bind(9).unwrap();
    bed.sw
        .ip(&["link", "set", "dev", &bed.tap, "txqueuelen", "64"])
        .unwrap();
    // Linux knows the engine's address already: nothing waits for ARP.
    bed.linux
        .ip(&[
            "neigh",
            "replace",
            &ENGINE_IP.to_string(),
            "lladdr",
            "02:50:00:00:00:01",
            "dev",
            "eth0",
        ])
        .unwrap();
    // The device may have dropped a frame or two before the engine read
    // it (the kernel's own multicast at bring-up): count from here.
    let before = bed.snapshot().port_drops.expect("a TAP counts its drops");
    let (gate, held) = Gate::new();
    bed.add(Box::new(held));
    gate.close();
    bed.linux
        .run(|| {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            for i in 0..500u32 {
                s.send_to(&i.to_be_bytes(), engine_addr(9)).unwrap();
            }
        })
        .unwrap();
    gate.open();
    let drops = bed.snapshot().port_drops.unwrap() - before;
    assert!((400..=500).contains(&drops), "{drops} drops");
}

/// Datagrams that arrived while the program was not reading come back in
/// order and whole, read from the socket's receive ring without a trip to
/// the engine; those past what the ring and the stack's queue hold are
/// dropped and counted, as Linux counts `RcvbufErrors`.
#[test]
fn queued_datagrams_come_back_in_order_and_overflow_is_counted() {
    let bed = Bed::start(Options::default(), vec![]);
    let mut sock = bed.app.udp_bind(9).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)));
    let send = |from: u32, to: u32| {
        bed.linux
            .run(move || {
                let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                for i in from..to {
                    let mut msg = linux_bytes(100 + i as usize % 1300, i as u8);
                    msg[..4].copy_from_slice(&i.to_be_bytes());
                    s.send_to(&msg, engine_addr(9)).unwrap();
                    // Paced, so no queue before the engine overflows.
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
            .unwrap()
    };
    // The first datagram waits for ARP: send until one gets through.
    wait_for(10, "a first datagram", || {
        send(0, 1);
        let mut buf = [0u8; 2048];
        sock.recv_from(&mut buf).is_ok()
    });
    let s0 = bed.snapshot().stack;
    send(1, 151);
    let mut buf = [0u8; 2048];
    for i in 1..151u32 {
        let (n, from) = sock.recv_from(&mut buf).unwrap();
        let mut want = linux_bytes(100 + i as usize % 1300, i as u8);
        want[..4].copy_from_slice(&i.to_be_bytes());
        assert_eq!(&buf[..n], &want[..], "datagram {i}");
        assert_eq!(*from.ip(), *linux_addr(9).ip());
    }
    let s1 = bed.snapshot().stack;
    assert_eq!(s1.udp_rx - s0.udp_rx, 150);
    assert_eq!(s1.udp_drops, s0.udp_drops);
    // A datagram longer than the buffer: the rest is dropped, the next
    // one starts where it should.
    send(1000, 1002);
    let mut small = [0u8; 10];
    let (n, _) = sock.recv_from(&mut small).unwrap();
    assert_eq!((n, &small[..4]), (10, &1000u32.to_be_bytes()[..]));
    let (_, _) = sock.recv_from(&mut small).unwrap();
    assert_eq!(&small[..4], &1001u32.to_be_bytes()[..]);
    // 1,500 unread, about 1.1 MB: more than the socket's receive ring
    // (512 KiB) and the stack's queue behind it (256 datagrams) hold.
    // Every one is either read, in order from the first, or counted as
    // dropped.
    send(2000, 3500);
    wait_for(5, "the datagrams to arrive", || {
        let s = bed.snapshot().stack;
        s.udp_rx + s.udp_drops >= s1.udp_rx + s1.udp_drops + 1502
    });
    let drops = bed.snapshot().stack.udp_drops - s1.udp_drops;
    assert!(drops > 0, "nothing dropped: the test sent too little");
    let mut next = 2000u32;
    loop {
        match sock.recv_from(&mut buf) {
            Ok(_) => {
                assert_eq!(&buf[..4], &next.to_be_bytes()[..]);
                next += 1;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock);
                break;
            }
        }
    }
    assert_eq!(u64::from(next - 2000) + drops, 1500, "read + dropped");
}
