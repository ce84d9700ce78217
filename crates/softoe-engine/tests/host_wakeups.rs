//! Host programs waiting on the engine through the shared-memory host
//! interface: waiter doorbells, `Client::poll` over many sockets, a
//! sleeping reader woken by its own socket only, and a selector serving
//! many connections.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;
mod host;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::time::Duration;

use common::{ENGINE_IP, LINUX_IP, wait_for};
use host::{bed, linux_echo, readable_within};
use softoe_abi::errno;
use softoe_host::Client;

/// A thread's own doorbell: armed, it is rung by the engine's next event
/// (here: Linux's echo arriving), while another thread's armed bell is
/// rung too and each drains only its own. A 65th bell is refused.
#[test]
fn waiter_bells_wake_their_own_threads() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let server = linux_echo(&bed, 7300);
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7300)).unwrap();
    let (w1, w2) = (c.waiter().unwrap(), c.waiter().unwrap());
    assert!(!readable_within(w1.fd(), 0));
    let seq = c.event_seq();
    assert!(!s.readiness().readable);
    let (a1, a2) = (w1.arm(), w2.arm());
    s.write_all(b"ping").unwrap();
    // Both armed bells ring: neither thread's wake-up is swallowed by the
    // other's drain.
    assert!(readable_within(w1.fd(), 5000), "first bell not rung");
    assert!(readable_within(w2.fd(), 5000), "second bell not rung");
    assert_ne!(c.event_seq(), seq);
    drop((a1, a2));
    assert!(!readable_within(w1.fd(), 0), "drained on disarm");
    wait_for(5, "the echo", || s.readiness().readable);
    let mut back = [0u8; 4];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");
    // Disarmed bells stay quiet.
    s.write_all(b"pong").unwrap();
    wait_for(5, "the second echo", || s.readiness().readable);
    assert!(!readable_within(w1.fd(), 0));
    // The table holds 64 bells per session.
    let mut more = Vec::new();
    let err = loop {
        match c.waiter() {
            Ok(w) => more.push(w),
            Err(e) => break e,
        }
    };
    // 64 in all: the client made two at attach for its threads' sleeps on
    // one socket, this test two above.
    assert_eq!(more.len(), 60, "64 bells in all");
    assert_eq!(err.raw_os_error(), Some(errno::ENOSPC));
    // A freed bell can be taken again.
    drop(more.pop());
    wait_for(5, "a bell freed", || {
        c.waiter().map(|w| more.push(w)).is_ok()
    });
    s.shutdown_write().unwrap();
    server.join().unwrap();
}

/// Regression: a listener's new connection (and a UDP datagram) rang no
/// waiting program — only stream sockets counted as news — so a `poll` on
/// a listening socket slept until its timeout.
#[test]
fn a_connection_to_a_listener_rings_the_waiter() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let l = c.tcp_listen(SocketAddrV4::new(ENGINE_IP, 8090), 4).unwrap();
    let u = c.udp_bind(SocketAddrV4::new(ENGINE_IP, 8091)).unwrap();
    let w = c.waiter().unwrap();
    let armed = w.arm();
    assert!(!l.readiness().readable);
    let peer = bed
        .linux
        .spawn(|| TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8090)).unwrap())
        .unwrap();
    assert!(readable_within(w.fd(), 5000), "no bell for the connection");
    drop(armed);
    wait_for(5, "the listener readable", || l.readiness().readable);
    let _s = l.accept().unwrap();
    drop(peer.join().unwrap());
    let armed = w.arm();
    bed.linux
        .run(|| {
            let s = std::net::UdpSocket::bind(SocketAddrV4::new(LINUX_IP, 0)).unwrap();
            s.send_to(b"datagram", SocketAddrV4::new(ENGINE_IP, 8091))
                .unwrap();
        })
        .unwrap();
    assert!(readable_within(w.fd(), 5000), "no bell for the datagram");
    drop(armed);
    wait_for(5, "the UDP socket readable", || u.readiness().readable);
}

/// Readiness for many sockets at once: `Client::poll` sleeps until one of
/// them is ready and says which; a timeout with nothing ready says none.
#[test]
fn poll_over_many_sockets() {
    use softoe_host::{Interest, Pollable};
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let (e1, e2) = (linux_echo(&bed, 7700), linux_echo(&bed, 7701));
    let s1 = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7700)).unwrap();
    let mut s2 = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7701)).unwrap();
    let l = c.tcp_listen(SocketAddrV4::new(ENGINE_IP, 8200), 4).unwrap();
    let set: [(&dyn Pollable, Interest); 3] = [
        (&s1, Interest::READ),
        (&s2, Interest::READ),
        (&l, Interest::READ),
    ];
    let t0 = std::time::Instant::now();
    let r = c.poll(&set, Some(Duration::from_millis(100))).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert!(r.iter().all(|r| !r.readable), "{r:?}");
    // Writability counts when asked for.
    let r = c.poll(&[(&s1, Interest::WRITE)], None).unwrap();
    assert!(r[0].writable);
    // Data on the second socket wakes the poll and names it.
    let poller = {
        let c = c.clone();
        let (p1, p2) = (s1.try_clone_reader(), s2.try_clone_reader());
        std::thread::spawn(move || {
            c.poll(
                &[(&p1, Interest::READ), (&p2, Interest::READ)],
                Some(Duration::from_secs(10)),
            )
            .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    s2.write_all(b"two").unwrap();
    let r = poller.join().unwrap();
    assert!(!r[0].readable && r[1].readable, "{r:?}");
    // A connection waiting on the listener.
    let peer = bed
        .linux
        .spawn(|| TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8200)).unwrap())
        .unwrap();
    let r = c
        .poll(&[(&l, Interest::READ)], Some(Duration::from_secs(10)))
        .unwrap();
    assert!(r[0].readable);
    drop(peer.join().unwrap());
    s1.shutdown_write().unwrap();
    s2.shutdown_write().unwrap();
    let mut b = Vec::new();
    s2.read_to_end(&mut b).unwrap();
    assert_eq!(b, b"two");
    e1.join().unwrap();
    e2.join().unwrap();
}

/// A thread asleep reading one socket is woken by that socket's news and
/// by no other: while another thread of the program does 2,000 round
/// trips on its own connection, the sleeper switches in only a handful of
/// times (its 100 ms naps), then wakes for its own bytes.
#[test]
fn a_sleeping_reader_is_woken_by_its_own_socket_only() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let (quiet, busy) = (linux_echo(&bed, 7310), linux_echo(&bed, 7311));
    let mut a = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7310)).unwrap();
    let mut b = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7311)).unwrap();
    let mut reader = a.try_clone_reader();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let sleeper = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        let mut got = [0u8; 5];
        reader.read_exact(&mut got).unwrap();
        got
    });
    let tid = tid_rx.recv().unwrap();
    let switches = || -> u64 {
        let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // Let it fall asleep.
    std::thread::sleep(Duration::from_millis(50));
    let before = switches();
    let t0 = std::time::Instant::now();
    let mut back = [0u8; 8];
    for i in 0..2000u64 {
        b.write_all(&i.to_le_bytes()).unwrap();
        b.read_exact(&mut back).unwrap();
        assert_eq!(back, i.to_le_bytes());
    }
    let woke = switches() - before;
    let naps = t0.elapsed().as_millis() as u64 / 100;
    assert!(
        woke <= naps + 10,
        "the sleeping reader woke {woke} times during 2,000 round trips on another socket"
    );
    a.write_all(b"hello").unwrap();
    assert_eq!(&sleeper.join().unwrap(), b"hello");
    a.shutdown_write().unwrap();
    b.shutdown_write().unwrap();
    quiet.join().unwrap();
    busy.join().unwrap();
}

/// A selector serves hundreds of connections from one thread: every
/// connection Linux opens is accepted, each message is echoed on its own
/// connection, a socket read only in part is reported again (level
/// triggered), and connections that close are seen. A second selector on
/// the same client, and a socket of another client, are refused.
#[test]
fn a_selector_serves_many_connections() {
    use softoe_host::{Config, Event, Interest};
    const CONNS: usize = 300;
    let bed = bed();
    // Small rings: 300 sockets in the default data area.
    let c = Client::attach_with(Config {
        path: bed.host.clone(),
        rx_ring: 16 << 10,
        tx_ring: 16 << 10,
        ..Config::default()
    })
    .unwrap();
    let mut sel = c.selector().unwrap();
    assert_eq!(
        c.selector().unwrap_err().kind(),
        std::io::ErrorKind::ResourceBusy
    );
    let other = Client::attach_to(&bed.host).unwrap();
    let foreign = other
        .tcp_listen(SocketAddrV4::new(ENGINE_IP, 8211), 4)
        .unwrap();
    assert_eq!(
        sel.register(&foreign, Interest::READ).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
    let mut l = c
        .tcp_listen(SocketAddrV4::new(ENGINE_IP, 8210), 128)
        .unwrap();
    l.set_nonblocking(true);
    sel.register(&l, Interest::READ).unwrap();
    // Linux: open every connection, then send each its own message twice
    // (in a scrambled order) and expect both back, then close.
    let linux = bed
        .linux
        .spawn(|| {
            let mut socks: Vec<TcpStream> = (0..CONNS)
                .map(|_| TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8210)).unwrap())
                .collect();
            for round in 0..2 {
                for k in 0..CONNS {
                    let i = (k * 7 + round) % CONNS;
                    socks[i].write_all(format!("<{i:04}>").as_bytes()).unwrap();
                }
            }
            for (i, s) in socks.iter_mut().enumerate() {
                let mut got = [0u8; 12];
                s.read_exact(&mut got).unwrap();
                let want = format!("<{i:04}>");
                assert_eq!(got, format!("{want}{want}").as_bytes(), "connection {i}");
                s.shutdown(std::net::Shutdown::Write).unwrap();
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
                assert!(rest.is_empty());
            }
        })
        .unwrap();
    let mut conns: std::collections::HashMap<u32, softoe_host::TcpStream> = Default::default();
    let (mut accepted, mut closed) = (0, 0);
    let mut events: Vec<Event> = Vec::new();
    let mut buf = [0u8; 4];
    let mut partial_reported_again = false;
    let mut pending_partial: Option<u32> = None;
    while closed < CONNS {
        sel.select(&mut events, Some(Duration::from_secs(20)))
            .unwrap();
        assert!(!events.is_empty(), "nothing ready for 20 s");
        if let Some(id) = pending_partial.take() {
            // A socket read in part last time is still ready, and says so.
            partial_reported_again |= events.iter().any(|e| e.id == id);
        }
        for e in events.clone() {
            if e.id == l.id() {
                loop {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            s.set_nonblocking(true);
                            sel.register(&s, Interest::READ).unwrap();
                            conns.insert(s.id(), s);
                            accepted += 1;
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => panic!("accept: {e}"),
                    }
                }
                continue;
            }
            let s = conns.get_mut(&e.id).unwrap();
            // Four bytes at a time: a message of six leaves some unread.
            match s.read(&mut buf) {
                Ok(0) => {
                    sel.deregister(&*s);
                    conns.remove(&e.id);
                    closed += 1;
                }
                Ok(n) => {
                    s.write_all(&buf[..n]).unwrap();
                    if s.pending() > 0 {
                        pending_partial = Some(e.id);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }
    linux.join().unwrap();
    assert_eq!(accepted, CONNS);
    assert!(
        partial_reported_again,
        "level-triggered: unread bytes are reported again"
    );
    // Dropped, the selector lets another be made.
    drop(sel);
    c.selector().unwrap();
}
