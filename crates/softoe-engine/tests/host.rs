//! Host programs on the engine through the shared-memory host interface:
//! attach, sockets both ways against Linux, each send policy, and programs
//! that misbehave.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::Duration;

use common::{Bed, ENGINE_IP, Gate, LINUX_IP, Options, sha256, wait_for};
use softoe_abi::{Command, Opcode, errno};
use softoe_host::{Client, SendPolicy, TcpOptions};

fn bed() -> Bed {
    Bed::start(
        Options {
            host: true,
            ..Options::default()
        },
        Vec::new(),
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 10) as u8)
        .collect()
}

/// A Linux echo server on `port` for one connection; returns what it saw.
fn linux_echo(bed: &Bed, port: u16) -> softoe_testbed::NsThread<Vec<u8>> {
    let l = bed
        .linux
        .run(move || TcpListener::bind(SocketAddrV4::new(LINUX_IP, port)).unwrap())
        .unwrap();
    bed.linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut all = Vec::new();
            let mut buf = vec![0u8; 65536];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                all.extend_from_slice(&buf[..n]);
                s.write_all(&buf[..n]).unwrap();
            }
            all
        })
        .unwrap()
}

#[test]
fn attach_and_round_trip() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    assert!(c.session() > 0);
    for _ in 0..1000 {
        c.nop().unwrap();
    }
    // A second program (here: a second attachment) gets its own session.
    let d = Client::attach_to(&bed.host).unwrap();
    assert_ne!(c.session(), d.session());
    d.nop().unwrap();
}

/// A program descheduled between `connect` and its hello (a loaded
/// machine: eight Python clients starting at once) is still welcomed, and
/// a connection that never says hello holds nobody up. The engine used to
/// wait 10 ms for the hello inside its loop, then refuse (the program saw
/// `EPIPE` and fell back to `ENETDOWN`), stalling every other session
/// meanwhile.
#[test]
fn a_late_hello_is_welcomed_and_a_silent_one_holds_nobody_up() {
    use softoe_abi::{ATTACH_MAGIC, Hello, VERSION, Welcome};
    let bed = bed();
    let silent = seqpacket_connect(&bed.host);
    let late = seqpacket_connect(&bed.host);
    // Others attach and work while both wait.
    let c = Client::attach_to(&bed.host).unwrap();
    for _ in 0..100 {
        c.nop().unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let hello = Hello {
        magic: ATTACH_MAGIC,
        version: VERSION,
        cmd_entries: 64,
        cmp_entries: 64,
        socks: 16,
        data_len: 1 << 16,
    };
    let b = hello.to_bytes();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&late);
    // SAFETY: `b` is a live buffer of `b.len()` bytes.
    let n = unsafe { libc::send(fd, b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL) };
    assert_eq!(n, 32, "{}", std::io::Error::last_os_error());
    assert!(readable_within(fd, 10_000), "no welcome");
    let mut buf = [0u8; 32];
    // SAFETY: `buf` is a live buffer of `buf.len()` bytes; the descriptors
    // that come with the welcome are closed by the kernel (no control buffer).
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    assert_eq!(n, 32, "{}", std::io::Error::last_os_error());
    let w = Welcome::from_bytes(&buf).expect("a welcome");
    assert_eq!(w.status, 0, "a late hello is refused: {w:?}");
    assert!(w.session > 0);
    drop(silent);
}

/// A connection to the engine's host socket (`SOCK_SEQPACKET`).
fn seqpacket_connect(path: &std::path::Path) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: plain socket creation; the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let p = path.as_os_str().as_bytes();
    assert!(p.len() < addr.sun_path.len());
    for (d, s) in addr.sun_path.iter_mut().zip(p) {
        *d = *s as libc::c_char;
    }
    // SAFETY: `addr` is a valid sockaddr_un of the size given.
    let r = unsafe {
        libc::connect(
            fd,
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    owned
}

/// Every byte Linux receives is the byte the program wrote, and every
/// byte echoed back arrives, with each send policy.
#[test]
fn echo_through_linux_with_each_policy() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    for (i, policy) in [SendPolicy::Copy, SendPolicy::Overlap]
        .into_iter()
        .enumerate()
    {
        let port = 7000 + i as u16;
        let server = linux_echo(&bed, port);
        let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, port)).unwrap();
        s.set_send_policy(policy);
        assert_eq!(s.peer_addr(), SocketAddrV4::new(LINUX_IP, port));
        assert_eq!(*s.local_addr().ip(), ENGINE_IP);
        let data = pattern(8 << 20, i as u8);
        let mut r = s.try_clone_reader();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            r.read_to_end(&mut got).unwrap();
            got
        });
        let t0 = std::time::Instant::now();
        for chunk in data.chunks(100_000) {
            s.write_all(chunk).unwrap();
        }
        eprintln!(
            "{policy:?}: wrote {} MiB in {:?}",
            data.len() >> 20,
            t0.elapsed()
        );
        s.shutdown_write().unwrap();
        let back = reader.join().unwrap();
        eprintln!("{policy:?}: echoed in {:?}", t0.elapsed());
        let seen = server.join().unwrap();
        assert_eq!(
            sha256(&seen),
            sha256(&data),
            "{policy:?}: Linux got other bytes"
        );
        assert_eq!(sha256(&back), sha256(&data), "{policy:?}: echo differs");
    }
}

/// Linux connects to a program listening on the engine.
#[test]
fn accept_from_linux() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let l = c
        .tcp_listen(SocketAddrV4::new(ENGINE_IP, 8080), 16)
        .unwrap();
    let data = pattern(4 << 20, 9);
    let want = data.clone();
    let peer = bed
        .linux
        .spawn(move || {
            let mut s = TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8080)).unwrap();
            s.write_all(&want).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            back
        })
        .unwrap();
    let (mut s, from) = l.accept().unwrap();
    assert_eq!(*from.ip(), LINUX_IP);
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(sha256(&got), sha256(&data));
    s.write_all(b"thanks").unwrap();
    drop(s);
    assert_eq!(peer.join().unwrap(), b"thanks");
}

/// Zero-copy: the engine sends from the program's region buffer and gives
/// it back only when Linux has acknowledged it; until then the buffer
/// cannot be rewritten, and what Linux receives is what was written.
#[test]
fn zerocopy_buffers_come_back_on_ack() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let server = linux_echo(&bed, 7100);
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7100)).unwrap();
    let mut buf = c.zc_buf(256 * 1024).unwrap();
    let mut sent = Vec::new();
    let mut r = s.try_clone_reader();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        r.read_to_end(&mut got).unwrap();
        got
    });
    for round in 0..16u8 {
        let data = pattern(buf.len(), round);
        buf.write_at(0, &data).unwrap();
        let mut off = 0;
        while off < data.len() {
            // Each round sends the whole buffer; partial takes resend the rest.
            let n = s.send_zerocopy(&mut buf, data.len()).unwrap();
            assert!(n > 0);
            // In flight: the buffer is not ours.
            assert!(buf.write_at(0, b"x").is_err() || buf.released());
            buf.wait_released().unwrap();
            off += n;
            if off < data.len() {
                // Move the unsent rest to the front and go on.
                buf.write_at(0, &data[off..]).unwrap();
            }
        }
        sent.extend_from_slice(&data);
    }
    s.shutdown_write().unwrap();
    assert_eq!(sha256(&server.join().unwrap()), sha256(&sent));
    assert_eq!(sha256(&reader.join().unwrap()), sha256(&sent));
}

/// Garbage commands get error completions; the session and other programs
/// go on.
#[test]
fn bad_commands_get_errors_not_crashes() {
    let bed = bed();
    let bad = Client::attach_to(&bed.host).unwrap();
    let good = Client::attach_to(&bed.host).unwrap();
    let server = linux_echo(&bed, 7200);
    let mut s = good.tcp_connect(SocketAddrV4::new(LINUX_IP, 7200)).unwrap();
    let cases: Vec<(Command, i32)> = vec![
        (
            Command {
                opcode: 999,
                ..Command::default()
            },
            errno::ENOSYS,
        ),
        // Another program's socket id (and ids never opened).
        (
            Command::new(
                Opcode::Send,
                softoe_abi::SEND_RING,
                s.id(),
                0,
                [0, 10, 0, 0, 0, 0],
            ),
            errno::EBADF,
        ),
        (
            Command::new(Opcode::Close, 0, 4000, 0, [0; 6]),
            errno::EBADF,
        ),
        (
            Command::new(Opcode::Shutdown, 0, u32::MAX, 0, [0; 6]),
            errno::EBADF,
        ),
        (
            Command::new(Opcode::Shutdown, 0, 0, 0, [7, 0, 0, 0, 0, 0]),
            errno::EINVAL,
        ),
        // Offsets past the data area.
        (
            Command::socket(0, softoe_abi::SockKind::Tcp, (u64::MAX - 63, 64), (0, 0)),
            errno::EFAULT,
        ),
        (
            Command::new(Opcode::Info, 0, 0, 0, [1 << 40, 64, 0, 0, 0, 0]),
            errno::EFAULT,
        ),
        (
            Command::new(Opcode::Connect, 0, 0, 0, [1, 0, 0, 0, 0, 0]),
            errno::EINVAL,
        ),
    ];
    for (cmd, want) in cases {
        let r = bad.submit_raw(cmd).unwrap();
        assert_eq!(r.errno(), Some(want), "{cmd:?}");
    }
    // A send from an address the program does not have.
    let t = bad.tcp_connect(SocketAddrV4::new(LINUX_IP, 7201));
    assert!(t.is_err(), "nobody listens on 7201");
    bad.nop().unwrap();
    // The good program is untouched.
    s.write_all(b"still fine").unwrap();
    s.shutdown_write().unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    assert_eq!(back, b"still fine");
    assert_eq!(server.join().unwrap(), b"still fine");
}

/// A program that breaks its command ring loses its session, nobody else.
#[test]
fn a_corrupt_ring_ends_only_that_session() {
    let bed = bed();
    let bad = Client::attach_to(&bed.host).unwrap();
    let good = Client::attach_to(&bed.host).unwrap();
    bad.nop().unwrap();
    bad.corrupt_command_ring();
    let t0 = std::time::Instant::now();
    while bad.is_alive() {
        assert!(t0.elapsed() < Duration::from_secs(5), "session not ended");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(bad.nop().is_err());
    good.nop().unwrap();
    let server = linux_echo(&bed, 7300);
    let mut s = good.tcp_connect(SocketAddrV4::new(LINUX_IP, 7300)).unwrap();
    s.write_all(b"ok").unwrap();
    s.shutdown_write().unwrap();
    assert_eq!(server.join().unwrap(), b"ok");
}

/// Not a test by itself: the program `a_killed_program_is_cleaned_up` runs
/// in a child process and kills. It attaches, connects to
/// `$SOFTOE_TEST_PEER` and writes until it dies.
#[test]
#[ignore = "run as a child process by a_killed_program_is_cleaned_up"]
fn child_program() {
    let Some(peer) = std::env::var("SOFTOE_TEST_PEER").ok() else {
        return;
    };
    let c = Client::attach().unwrap();
    let mut s = c.tcp_connect(peer.parse().unwrap()).unwrap();
    let chunk = pattern(1 << 20, 3);
    s.write_all(&chunk).unwrap();
    println!("ready");
    loop {
        if s.write_all(&chunk).is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A program killed with SIGKILL mid-transfer: its connection is closed,
/// its session and region are gone (as `softoe stat` shows), and a program
/// using the engine at the same time notices nothing.
#[test]
fn a_killed_program_is_cleaned_up() {
    use std::io::BufRead;
    let bed = bed();
    let good = Client::attach_to(&bed.host).unwrap();
    let sink = bed
        .linux
        .run(|| TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7400)).unwrap())
        .unwrap();
    let sink = bed
        .linux
        .spawn(move || {
            let (mut s, _) = sink.accept().unwrap();
            let mut n = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            // Ends by FIN or RST: either is a closed connection.
            while let Ok(k) = s.read(&mut buf) {
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
            n
        })
        .unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_program",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SOFTOE_SOCKET", &bed.host)
        .env("SOFTOE_TEST_PEER", format!("{LINUX_IP}:7400"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Killed however the test ends (a failed assertion left it running).
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut child = KillOnDrop(child);
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child ended early");
    }
    let pid = child.0.id() as i32;
    let snap = bed.snapshot();
    let theirs = snap
        .sessions
        .iter()
        .find(|s| s.pid == pid)
        .expect("child's session");
    assert_eq!(theirs.sockets, 1);
    // SIGKILL mid-transfer.
    child.0.kill().unwrap();
    let _ = child.0.wait();
    let t0 = std::time::Instant::now();
    loop {
        let snap = bed.snapshot();
        if !snap.sessions.iter().any(|s| s.pid == pid) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "session still there: {:?}",
            snap.sessions
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    eprintln!("killed program's session reclaimed in {:?}", t0.elapsed());
    assert!(sink.join().unwrap() >= 1 << 20);
    // The other program carries on.
    let server = linux_echo(&bed, 7401);
    let mut s = good.tcp_connect(SocketAddrV4::new(LINUX_IP, 7401)).unwrap();
    s.write_all(b"unaffected").unwrap();
    s.shutdown_write().unwrap();
    assert_eq!(server.join().unwrap(), b"unaffected");
    let snap = bed.snapshot();
    assert_eq!(snap.sessions.len(), 1, "{:?}", snap.sessions);
}

/// Polls `fd` for input for up to `ms`; whether it became readable.
fn readable_within(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call.
    unsafe { libc::poll(&raw mut p, 1, ms) == 1 }
}

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

/// Regression: a session's end dropped every other session's sockets from
/// the engine's owner map, so when one program exited, the others' stack
/// events (ACKs, data) no longer reached them and they stalled for ever.
#[test]
fn one_program_ending_leaves_the_others_running() {
    let bed = bed();
    let server_a = linux_echo(&bed, 7500);
    let server_b = linux_echo(&bed, 7501);
    let a = Client::attach_to(&bed.host).unwrap();
    let b = Client::attach_to(&bed.host).unwrap();
    let mut sa = a.tcp_connect(SocketAddrV4::new(LINUX_IP, 7500)).unwrap();
    let mut sb = b.tcp_connect(SocketAddrV4::new(LINUX_IP, 7501)).unwrap();
    sa.write_all(b"bye").unwrap();
    drop(sa);
    drop(a);
    server_a.join().unwrap();
    wait_for(5, "the first session to end", || {
        bed.snapshot().sessions.len() == 1
    });
    // The survivor moves 8 MiB both ways after the other has gone.
    sb.set_read_timeout(Some(Duration::from_secs(20)));
    sb.set_write_timeout(Some(Duration::from_secs(20)));
    let data = pattern(8 << 20, 5);
    let mut r = sb.try_clone_reader();
    r.set_read_timeout(Some(Duration::from_secs(20)));
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        r.read_to_end(&mut got).map(|_| got)
    });
    sb.write_all(&data).expect("the survivor's writes stalled");
    sb.shutdown_write().unwrap();
    let back = reader
        .join()
        .unwrap()
        .expect("the survivor's reads stalled");
    assert_eq!(sha256(&back), sha256(&data));
    assert_eq!(sha256(&server_b.join().unwrap()), sha256(&data));
}

/// A listener shared into another session (a forked child's): with the
/// right secret both accept from it; a wrong secret, a missing session or
/// a socket that is not a listener is refused; when the first session
/// closes its share the other keeps accepting, and when the last closes,
/// the port is free again.
#[test]
fn a_listener_shared_into_another_session() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let l = parent
        .tcp_listen(SocketAddrV4::new(ENGINE_IP, 8100), 16)
        .unwrap();
    let mut bad = parent.secret();
    bad[1] ^= 1;
    let e = child
        .adopt_listener(parent.session(), l.id(), bad)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::EACCES));
    let e = child
        .adopt_listener(parent.session() + 100, l.id(), parent.secret())
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::ENOENT));
    let server = linux_echo(&bed, 7600);
    let s = parent
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7600))
        .unwrap();
    let e = child
        .adopt_listener(parent.session(), s.id(), parent.secret())
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::EOPNOTSUPP));
    drop(s);
    server.join().unwrap();
    let shared = child
        .adopt_listener(parent.session(), l.id(), parent.secret())
        .unwrap();
    assert_eq!(shared.local_addr(), l.local_addr());
    let connect = |n: u8| {
        bed.linux
            .spawn(move || {
                let mut s = TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8100))?;
                s.write_all(&[n])?;
                let mut b = [0u8; 1];
                s.read_exact(&mut b)?;
                Ok::<u8, std::io::Error>(b[0])
            })
            .unwrap()
    };
    let answer = |l: &softoe_host::TcpListener| {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        s.write_all(&[b[0] + 100]).unwrap();
    };
    // Both sessions accept from the one listener.
    let c1 = connect(1);
    answer(&shared);
    assert_eq!(c1.join().unwrap().unwrap(), 101);
    let c2 = connect(2);
    answer(&l);
    assert_eq!(c2.join().unwrap().unwrap(), 102);
    // The first share goes; the other still accepts.
    drop(l);
    std::thread::sleep(Duration::from_millis(50));
    let c3 = connect(3);
    answer(&shared);
    assert_eq!(c3.join().unwrap().unwrap(), 103);
    // The last share goes: the port is closed.
    drop(shared);
    wait_for(5, "the listener to close", || {
        bed.linux
            .run(|| TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8100)).is_err())
            .unwrap()
    });
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

/// Direct placement: a blocking read with a large buffer and an empty
/// ring posts the buffer, and the engine writes the received bytes into
/// it itself. Reads alternate large (posted) and small (ring) buffers over
/// a stream Linux sends in bursts: every byte arrives once, in order, and
/// most went straight into the posted buffers.
#[test]
fn reads_land_in_posted_buffers() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let l = c.tcp_listen(SocketAddrV4::new(ENGINE_IP, 8300), 4).unwrap();
    const LEN: usize = 48 << 20;
    let data = pattern(LEN, 9);
    let want = sha256(&data);
    let sender = bed
        .linux
        .spawn(move || {
            let mut s = TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8300)).unwrap();
            // Bursts with pauses: the reader often finds the ring empty.
            for (i, chunk) in data.chunks(1 << 20).enumerate() {
                s.write_all(chunk).unwrap();
                if i % 8 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        })
        .unwrap();
    let (mut s, _) = l.accept().unwrap();
    let mut got = Vec::with_capacity(LEN);
    let (mut big, mut small) = (vec![0u8; 256 << 10], vec![0u8; 1000]);
    for i in 0.. {
        let buf = if i % 50 == 49 { &mut small } else { &mut big };
        let n = s.read(buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    sender.join().unwrap();
    assert_eq!(got.len(), LEN);
    assert_eq!(sha256(&got), want);
    let snap = bed.snapshot();
    let me = snap.sessions.iter().find(|x| x.id == c.session()).unwrap();
    eprintln!("placed directly: {} of {} bytes", me.direct, LEN);
    assert!(
        me.direct > (LEN / 4) as u64,
        "only {} bytes placed",
        me.direct
    );
}

/// A posted read that times out takes its buffer back and loses nothing;
/// the engine refuses a second post and a post to a listener; a post to
/// an address the program has not mapped fails with EFAULT and the
/// connection goes on.
#[test]
fn posted_reads_time_out_and_bad_posts_fail() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let l = c.tcp_listen(SocketAddrV4::new(ENGINE_IP, 8301), 4).unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel::<()>();
    let peer = bed
        .linux
        .spawn(move || {
            let mut s = TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8301)).unwrap();
            go_rx.recv().unwrap();
            s.write_all(b"after the timeout").unwrap();
            sent_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            s.write_all(b"after the fault").unwrap();
            go_rx.recv().unwrap();
            s.write_all(b"into the region.").unwrap();
        })
        .unwrap();
    let (s, _) = l.accept().unwrap();
    let mut r = s.try_clone_reader();
    r.set_read_timeout(Some(Duration::from_millis(100)));
    let mut big = vec![0u8; 64 << 10];
    let t0 = std::time::Instant::now();
    let e = r.read(&mut big).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    assert!(t0.elapsed() >= Duration::from_millis(100));
    go_tx.send(()).unwrap();
    r.set_read_timeout(None);
    let n = r.read(&mut big).unwrap();
    assert_eq!(&big[..n], b"after the timeout");
    // A listener cannot take a posted buffer.
    let post = |sock: u32, addr: u64| {
        Command::new(
            Opcode::Recv,
            softoe_abi::RECV_REMOTE,
            sock,
            0,
            [addr, 4096, 0, 0, 0, 0],
        )
    };
    let ans = c.submit_raw(post(l.id(), big.as_mut_ptr() as u64)).unwrap();
    assert_eq!(ans.errno(), Some(errno::ENOTCONN));
    // Nothing posted: nothing to cancel.
    let ans = c
        .submit_raw(Command::new(Opcode::CancelRecv, 0, s.id(), 0, [0; 6]))
        .unwrap();
    assert_eq!(ans.errno(), Some(errno::ENOENT));
    // An unmapped address: the post completes with EFAULT when bytes come,
    // and the bytes stay for the next read.
    sent_rx.recv().unwrap();
    let bad = std::thread::spawn({
        let c = c.clone();
        let id = s.id();
        move || c.submit_raw(post(id, 8)).unwrap()
    });
    std::thread::sleep(Duration::from_millis(50));
    go_tx.send(()).unwrap();
    let ans = bad.join().unwrap();
    assert_eq!(ans.errno(), Some(errno::EFAULT), "{ans:?}");
    // The bytes went to the ring instead.
    let mut small = [0u8; 100];
    let n = r.read(&mut small).unwrap();
    assert_eq!(&small[..n], b"after the fault");
    // A buffer in the data area, posted while the ring is empty: the
    // engine places the next bytes there.
    let zc = c.zc_buf(4096).unwrap();
    let post = std::thread::spawn({
        let c = c.clone();
        let (id, off) = (s.id(), zc.offset());
        move || {
            c.submit_raw(Command::new(
                Opcode::Recv,
                softoe_abi::RECV_REGION,
                id,
                0,
                [off, 4096, 0, 0, 0, 0],
            ))
            .unwrap()
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    go_tx.send(()).unwrap();
    let ans = post.join().unwrap();
    assert_eq!(ans.result, 16, "{ans:?}");
    let mut placed = [0u8; 16];
    zc.read_at(0, &mut placed).unwrap();
    assert_eq!(&placed, b"into the region.");
    s.shutdown_write().unwrap();
    peer.join().unwrap();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

/// The receiving thread's CPU time per GiB with direct placement and
/// without (figures for docs/results.md; no timed assertion). Run with
/// `cargo test --release -p softoe-engine --test host -- --ignored
/// --nocapture receive_cpu`.
#[test]
#[ignore = "a measurement, by hand"]
fn receive_cpu_with_and_without_direct_placement() {
    let bed = bed();
    const LEN: u64 = 2 << 30;
    for (i, direct) in [(0u16, 16usize << 10), (1, 0)] {
        let cfg = softoe_host::Config {
            path: bed.host.clone(),
            direct_min: direct,
            ..softoe_host::Config::default()
        };
        let c = Client::attach_with(cfg).unwrap();
        let port = 8400 + i;
        let l = c.tcp_listen(SocketAddrV4::new(ENGINE_IP, port), 4).unwrap();
        let sender = bed
            .linux
            .spawn(move || {
                let mut s = TcpStream::connect(SocketAddrV4::new(ENGINE_IP, port)).unwrap();
                let block = vec![7u8; 1 << 20];
                for _ in 0..(LEN >> 20) {
                    s.write_all(&block).unwrap();
                }
            })
            .unwrap();
        let (mut s, _) = l.accept().unwrap();
        let cpu = || {
            // SAFETY: rusage is plain integers; all zeroes is a valid value.
            let mut u: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: `u` is a valid rusage to fill.
            unsafe { libc::getrusage(libc::RUSAGE_THREAD, &raw mut u) };
            let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
            t(u.ru_utime) + t(u.ru_stime)
        };
        let (c0, t0) = (cpu(), std::time::Instant::now());
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        let (cpu_s, wall) = (cpu() - c0, t0.elapsed().as_secs_f64());
        sender.join().unwrap();
        assert_eq!(got, LEN);
        let gib = LEN as f64 / f64::from(1u32 << 30);
        eprintln!(
            "direct_min {:>6}: {:.2} Gb/s, receiving thread {:.3} CPU-s per GiB ({:.0} % of its wall time)",
            direct,
            got as f64 * 8.0 / wall / 1e9,
            cpu_s / gib,
            cpu_s / wall * 100.0
        );
    }
}

/// A Linux server on `port` for one connection: sends `greeting`, then
/// returns everything it reads until the end of the stream.
/// A Linux reader that starts reading only after `delay`: its window
/// closes meanwhile, so the sender's data waits in the engine.
fn linux_slow_sink(bed: &Bed, port: u16, delay: Duration) -> softoe_testbed::NsThread<Vec<u8>> {
    linux_reader(bed, port, Vec::new(), delay)
}

fn linux_sink(bed: &Bed, port: u16, greeting: Vec<u8>) -> softoe_testbed::NsThread<Vec<u8>> {
    linux_reader(bed, port, greeting, Duration::ZERO)
}

/// A Linux server for one connection: sends `greeting`, waits `delay`,
/// then reads to the end and returns what it read.
fn linux_reader(
    bed: &Bed,
    port: u16,
    greeting: Vec<u8>,
    delay: Duration,
) -> softoe_testbed::NsThread<Vec<u8>> {
    let l = bed
        .linux
        .run(move || TcpListener::bind(SocketAddrV4::new(LINUX_IP, port)).unwrap())
        .unwrap();
    bed.linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.write_all(&greeting).unwrap();
            std::thread::sleep(delay);
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            all
        })
        .unwrap()
}

/// What `fork` does to a connection, done with two attachments in one
/// process: the first watches it (as the shim does before `fork`), the
/// second takes it (as a child does at first use). The bytes the first had
/// not read move along; the first's socket then reads as finished and
/// refuses writes; and the connection lives until both sockets are closed
/// *and* the watched descriptor's last copy is — as a kernel socket lives
/// until its last descriptor closes in every process.
#[test]
fn a_connection_moves_to_another_session_and_lives_until_the_last_descriptor() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let greeting = pattern(100_000, 9);
    let server = linux_sink(&bed, 7610, greeting.clone());
    let mut s = parent
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7610))
        .unwrap();
    let first = pattern(1 << 20, 1);
    s.write_all(&first).unwrap();
    // The parent reads a little of the greeting; the rest stays unread.
    let mut head = vec![0u8; 1000];
    s.read_exact(&mut head).unwrap();
    assert_eq!(head, greeting[..1000]);
    // Not watched: nobody may take it.
    let e = child
        .adopt_stream(parent.session(), s.id(), parent.secret())
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::EOPNOTSUPP));
    let watch = s.watch_across_fork().unwrap();
    // Twice is an error, and a wrong secret takes nothing.
    assert_eq!(
        s.watch_across_fork().unwrap_err().raw_os_error(),
        Some(errno::EALREADY)
    );
    let mut bad = parent.secret();
    bad[0] ^= 1;
    let e = child
        .adopt_stream(parent.session(), s.id(), bad)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::EACCES));
    // Wait until the whole greeting sits in the parent's ring.
    wait_for(5, "the greeting to arrive", || s.pending() >= 99_000);
    let mut t = child
        .adopt_stream(parent.session(), s.id(), parent.secret())
        .unwrap();
    assert_eq!(t.peer_addr(), SocketAddrV4::new(LINUX_IP, 7610));
    let mut rest = vec![0u8; greeting.len() - 1000];
    t.read_exact(&mut rest).unwrap();
    assert_eq!(rest, greeting[1000..], "the unread bytes moved along");
    let second = pattern(1 << 20, 2);
    t.write_all(&second).unwrap();
    // The parent's socket reads as finished and refuses to send.
    let mut b = [0u8; 16];
    assert_eq!(s.read(&mut b).unwrap(), 0);
    assert!(s.write_all(b"late").is_err());
    // Both sockets close; the watched descriptor still has a copy.
    drop(s);
    drop(t);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !server.is_finished(),
        "the connection closed while a descriptor still named it"
    );
    // The last copy closes: the connection ends with every byte in order.
    drop(watch);
    let got = server.join().unwrap();
    assert_eq!(got.len(), first.len() + second.len());
    assert_eq!(sha256(&got[..first.len()]), sha256(&first));
    assert_eq!(sha256(&got[first.len()..]), sha256(&second));
}

/// The parent's socket refuses writes once the connection moved, even when
/// its send ring was full of bytes the peer had not acknowledged yet: the
/// ring never frees (those bytes went with the connection), so a writer
/// that only waited for room would wait for ever. CI once hung here.
#[test]
fn a_moved_connection_refuses_writes_while_its_ring_is_full() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    // Linux reads nothing for a while: what the parent writes stays unacked
    // once Linux's receive buffer is full.
    let server = linux_reader(&bed, 7614, Vec::new(), Duration::from_secs(3));
    let mut s = parent
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7614))
        .unwrap();
    s.set_nonblocking(true);
    let data = pattern(64 << 20, 3);
    let mut sent = 0usize;
    let mut full = false;
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(2) && sent < data.len() {
        match s.write(&data[sent..(sent + (64 << 10)).min(data.len())]) {
            Ok(n) => {
                sent += n;
                full = false;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Full twice in a row, 50 ms apart: nothing is being acked.
                if full {
                    break;
                }
                full = true;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("write: {e}"),
        }
    }
    assert!(full, "the send ring never filled ({sent} bytes sent)");
    let watch = s.watch_across_fork().unwrap();
    let t = child
        .adopt_stream(parent.session(), s.id(), parent.secret())
        .unwrap();
    s.set_nonblocking(false);
    s.set_write_timeout(Some(Duration::from_secs(2)));
    let e = s.write(b"late").unwrap_err();
    assert_eq!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe,
        "a moved socket's write must fail at once, not wait for room: {e}"
    );
    drop(s);
    drop(t);
    drop(watch);
    let got = server.join().unwrap();
    assert_eq!(got.len(), sent, "what the parent wrote arrives whole");
    assert_eq!(sha256(&got), sha256(&data[..sent]));
}

/// sshd's order: the monitor holds the connection, one child takes it and
/// exits, then the next child takes it naming the monitor's socket — the
/// `ADOPT` follows the connection from where it was to where it is now
/// (the first child's dead session), with every byte in order. Before,
/// the second child got `EOPNOTSUPP` (the monitor's socket had moved).
#[test]
fn an_adopt_follows_a_connection_that_moved_on() {
    let bed = bed();
    let monitor = Client::attach_to(&bed.host).unwrap();
    let first = Client::attach_to(&bed.host).unwrap();
    let second = Client::attach_to(&bed.host).unwrap();
    let greeting = pattern(200_000, 7);
    let server = linux_sink(&bed, 7615, greeting.clone());
    let mut s = monitor
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7615))
        .unwrap();
    let a = pattern(1 << 20, 1);
    s.write_all(&a).unwrap();
    let watch = s.watch_across_fork().unwrap();
    let (session, id, secret) = (monitor.session(), s.id(), monitor.secret());
    let mut t = first.adopt_stream(session, id, secret).unwrap();
    let mut head = vec![0u8; 50_000];
    t.read_exact(&mut head).unwrap();
    let b = pattern(1 << 20, 2);
    t.write_all(&b).unwrap();
    // The first child exits: its session dies with the connection in it.
    drop(t);
    drop(first);
    // The next child names the monitor's socket, as it inherited it.
    let mut u = second.adopt_stream(session, id, secret).unwrap();
    assert_eq!(u.peer_addr(), SocketAddrV4::new(LINUX_IP, 7615));
    let mut rest = vec![0u8; greeting.len() - head.len()];
    u.read_exact(&mut rest).unwrap();
    head.extend_from_slice(&rest);
    assert_eq!(sha256(&head), sha256(&greeting), "every byte, in order");
    let c = pattern(1 << 20, 3);
    u.write_all(&c).unwrap();
    // Where it is now, naming it again is an error, not a second move.
    assert_eq!(
        second
            .adopt_stream(session, id, secret)
            .unwrap_err()
            .raw_os_error(),
        Some(errno::EALREADY)
    );
    drop(u);
    drop(s);
    drop(watch);
    let got = server.join().unwrap();
    let mut want = a.clone();
    want.extend_from_slice(&b);
    want.extend_from_slice(&c);
    assert_eq!(got.len(), want.len());
    assert_eq!(sha256(&got), sha256(&want));
}

/// A process that handed its connection to a child takes it back when the
/// child is done (sshd's monitor does for a root login): its socket says
/// the connection moved away (EV_MOVED) and an `ADOPT` naming its own
/// socket takes it back into the same session, bytes in order.
#[test]
fn a_session_takes_back_a_connection_a_child_took() {
    let bed = bed();
    let monitor = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let server = linux_sink(&bed, 7616, b"hi".to_vec());
    let mut s = monitor
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7616))
        .unwrap();
    let a = pattern(1 << 20, 1);
    s.write_all(&a).unwrap();
    let watch = s.watch_across_fork().unwrap();
    let (session, id, secret) = (monitor.session(), s.id(), monitor.secret());
    assert!(!monitor.moved_away(id));
    let mut t = child.adopt_stream(session, id, secret).unwrap();
    let mut hi = [0u8; 2];
    t.read_exact(&mut hi).unwrap();
    let b = pattern(1 << 20, 2);
    t.write_all(&b).unwrap();
    drop(t);
    drop(child);
    assert!(
        monitor.moved_away(id),
        "the slot says where the connection went"
    );
    let mut back = monitor.adopt_stream(session, id, secret).unwrap();
    assert!(!monitor.moved_away(back.id()));
    let c = pattern(1 << 20, 3);
    back.write_all(&c).unwrap();
    drop(back);
    drop(s);
    drop(watch);
    let got = server.join().unwrap();
    let want: Vec<u8> = [a, b, c].concat();
    assert_eq!(got.len(), want.len());
    assert_eq!(sha256(&got), sha256(&want));
}

/// A moved socket keeps saying so whatever its session does next. The
/// engine re-published a moved socket's readiness as a fresh socket's
/// (writable) whenever a later command touched it — one naming no socket
/// touches socket 0 — which wiped EV_MOVED when the socket had been
/// readable at the move: the process then used its old socket and got
/// `EBADF` (sshd's monitor, taking the connection back after a root
/// login: "setsockopt IP_TOS: Bad file descriptor", a CI failure).
#[test]
fn a_moved_socket_says_so_after_later_commands() {
    let bed = bed();
    let monitor = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let greeting = pattern(50_000, 9);
    let server = linux_sink(&bed, 7617, greeting.clone());
    let s = monitor
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7617))
        .unwrap();
    assert_eq!(s.id(), 0, "the test needs the session's first socket");
    // Readable when it moves: the greeting waits unread.
    wait_for(5, "the greeting to arrive", || {
        s.pending() >= greeting.len() as u64
    });
    let watch = s.watch_across_fork().unwrap();
    let (session, id, secret) = (monitor.session(), s.id(), monitor.secret());
    let mut t = child.adopt_stream(session, id, secret).unwrap();
    assert!(monitor.moved_away(id));
    // Commands of the monitor's that name no socket of theirs (a UDP
    // socket opened and closed; an adopt refused).
    drop(
        monitor
            .udp_bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
            .unwrap(),
    );
    let mut bad = secret;
    bad[1] ^= 1;
    assert!(monitor.adopt_stream(child.session(), t.id(), bad).is_err());
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        monitor.moved_away(id),
        "a later command wiped the moved socket's EV_MOVED"
    );
    let mut got = vec![0u8; greeting.len()];
    t.read_exact(&mut got).unwrap();
    assert_eq!(sha256(&got), sha256(&greeting));
    let mut back = monitor.adopt_stream(session, id, secret).unwrap();
    back.write_all(b"bye").unwrap();
    drop(t);
    drop(back);
    drop(s);
    drop(watch);
    assert_eq!(server.join().unwrap(), b"bye");
}

/// A parent that closes its socket, or dies, before the child takes the
/// connection: the connection waits detached, bytes arriving meanwhile are
/// kept, and the child takes it from the dead session.
#[test]
fn a_child_takes_a_connection_its_dead_parent_left() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let greeting = pattern(300_000, 4);
    let server = linux_sink(&bed, 7611, greeting.clone());
    let mut s = parent
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7611))
        .unwrap();
    let first = pattern(3 << 20, 5);
    s.write_all(&first).unwrap();
    let watch = s.watch_across_fork().unwrap();
    let (session, id, secret) = (parent.session(), s.id(), parent.secret());
    drop(s);
    drop(parent);
    // The parent's session is gone from the program's side; the
    // connection is not.
    std::thread::sleep(Duration::from_millis(200));
    assert!(!server.is_finished());
    // `softoe stat` shows it waiting in the dead session.
    wait_for(
        5,
        "the dead session to show its detached connection",
        || {
            bed.snapshot()
                .sessions
                .iter()
                .any(|st| st.id == session && st.dead && st.detached == 1)
        },
    );
    let mut t = child.adopt_stream(session, id, secret).unwrap();
    let mut got = vec![0u8; greeting.len()];
    t.read_exact(&mut got).unwrap();
    assert_eq!(sha256(&got), sha256(&greeting));
    let second = pattern(1 << 20, 6);
    t.write_all(&second).unwrap();
    // Here the descriptor closes first; the child's close ends it.
    drop(watch);
    std::thread::sleep(Duration::from_millis(100));
    assert!(!server.is_finished(), "closed under the child's feet");
    drop(t);
    let got = server.join().unwrap();
    assert_eq!(got.len(), first.len() + second.len());
    assert_eq!(sha256(&got[..first.len()]), sha256(&first));
    assert_eq!(sha256(&got[first.len()..]), sha256(&second));
    // Nothing of the dead session remains.
    wait_for(5, "the parent's session to be reclaimed", || {
        bed.snapshot().sessions.iter().all(|st| st.id != session)
    });
}

/// Zero-copy buffers queued whole (`SEND_QUEUE`): 12 MiB at once, three
/// times the stack's send buffer, without the program waiting for any
/// send; they go out in order, and a close with buffers still queued
/// sends them all before the FIN.
#[test]
fn queued_zerocopy_sends_go_out_in_order_and_before_the_fin() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let server = linux_sink(&bed, 7620, Vec::new());
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7620)).unwrap();
    let mut bufs: Vec<_> = (0..48).map(|_| c.zc_buf(256 * 1024).unwrap()).collect();
    let mut want = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate() {
        let d = pattern(b.len(), i as u8);
        b.write_at(0, &d).unwrap();
        assert_eq!(s.send_zerocopy(b, d.len()).unwrap(), d.len());
        // In flight: not the program's to write.
        assert!(b.write_at(0, b"x").is_err() || b.released());
        want.extend_from_slice(&d);
    }
    drop(s);
    for b in &mut bufs {
        b.wait_released().unwrap();
    }
    let got = server.join().unwrap();
    assert_eq!(got.len(), want.len());
    assert_eq!(sha256(&got), sha256(&want));
}

/// Plain writes (each policy) that follow queued zero-copy buffers come
/// after them on the wire, however much of the queue the engine still
/// holds: a write must not take room the queue was waiting for.
#[test]
fn writes_after_queued_zerocopy_buffers_keep_their_order() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let server = linux_slow_sink(&bed, 7621, Duration::from_millis(200));
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7621)).unwrap();
    let mut bufs: Vec<_> = (0..16).map(|_| c.zc_buf(256 * 1024).unwrap()).collect();
    let mut want = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate() {
        let d = pattern(b.len(), i as u8);
        b.write_at(0, &d).unwrap();
        s.send_zerocopy(b, d.len()).unwrap();
        want.extend_from_slice(&d);
        // Between buffers, and while megabytes are still queued: writes by
        // the engine reading this memory, and through the send ring.
        let policy = if i % 2 == 0 {
            SendPolicy::Overlap
        } else {
            SendPolicy::Copy
        };
        s.set_send_policy(policy);
        let marker = pattern(100_000 + i, 200 + i as u8);
        s.write_all(&marker).unwrap();
        want.extend_from_slice(&marker);
    }
    s.shutdown_write().unwrap();
    for b in &mut bufs {
        b.wait_released().unwrap();
    }
    drop(s);
    let got = server.join().unwrap();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "bytes out of order");
}

/// `shutdown(SHUT_WR)` right after queueing zero-copy buffers: the FIN
/// waits for the queue, as a kernel socket's FIN waits for its send buffer.
#[test]
fn a_shutdown_waits_for_queued_zerocopy_buffers() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let server = linux_slow_sink(&bed, 7622, Duration::from_millis(300));
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7622)).unwrap();
    let (mut bufs, want) = queue_zerocopy(&c, &mut s, 24);
    s.shutdown_write().unwrap();
    for b in &mut bufs {
        b.wait_released().unwrap();
    }
    let got = server.join().unwrap();
    assert_eq!(got.len(), want.len(), "bytes lost behind an early FIN");
    assert!(got == want);
}

/// A connection reset while zero-copy buffers are queued or in flight:
/// every buffer comes back, those not acknowledged with the error — none
/// waits for ever.
#[test]
fn queued_zerocopy_buffers_come_back_when_the_connection_dies() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let l = bed
        .linux
        .run(|| TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7621)).unwrap())
        .unwrap();
    let peer = bed
        .linux
        .spawn(move || {
            let (s, _) = l.accept().unwrap();
            // Read nothing, then reset (linger 0).
            std::thread::sleep(Duration::from_millis(200));
            let s2 = socket2_linger_zero(s);
            drop(s2);
        })
        .unwrap();
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7621)).unwrap();
    let mut bufs: Vec<_> = (0..48).map(|_| c.zc_buf(256 * 1024).unwrap()).collect();
    for b in &mut bufs {
        s.send_zerocopy(b, 256 * 1024).unwrap();
    }
    peer.join().unwrap();
    let errors = bufs
        .iter_mut()
        .map(|b| b.wait_released())
        .filter(Result::is_err)
        .count();
    assert!(
        errors > 0,
        "12 MiB to a peer that read nothing all came back acknowledged"
    );
    drop(s);
}

/// `s` with `SO_LINGER {1, 0}`: its close resets.
fn socket2_linger_zero(s: TcpStream) -> TcpStream {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a `linger` of the size given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const l).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    s
}

/// A program that queues zero-copy buffers and exits at once, while the
/// peer's window is closed: the kernel would send a dead program's socket
/// buffer before the FIN, and the engine sends its queue the same way.
#[test]
fn queued_sends_of_a_program_that_exited_still_go_out() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let server = linux_slow_sink(&bed, 7613, Duration::from_millis(300));
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7613)).unwrap();
    let (bufs, want) = queue_zerocopy(&c, &mut s, 48);
    // Most of it waits in the engine's queue: the reader has not started.
    // The engine learns of the close and of the exit at once.
    let (gate, held) = Gate::new();
    bed.add(Box::new(held));
    gate.close();
    drop(s);
    drop(bufs);
    drop(c);
    gate.open();
    let got = server.join().unwrap();
    assert_eq!(got.len(), want.len());
    assert_eq!(sha256(&got), sha256(&want));
    wait_for(5, "the program's session to be reclaimed", || {
        bed.snapshot().sessions.is_empty()
    });
}

/// A program that queued more than its peer will ever take and exited:
/// the engine keeps sending its queue, but a peer that answers every probe
/// with a zero window does not hold the dead program's session for ever —
/// the connection is an orphan, given up after `orphan_retries` probes
/// with a RST, and the session is reclaimed.
#[test]
fn a_dead_programs_queue_behind_a_closed_window_is_given_up() {
    let bed = Bed::start(
        Options {
            host: true,
            stack: |c| c.tcp.orphan_retries = 2,
            ..Options::default()
        },
        Vec::new(),
    );
    let (go, read) = std::sync::mpsc::channel::<()>();
    let l = bed
        .linux
        .run(|| TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7615)).unwrap())
        .unwrap();
    // Alive but not reading until told: its window closes and stays shut.
    let server = bed
        .linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            read.recv().unwrap();
            let mut n = 0usize;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match s.read(&mut buf) {
                    Ok(0) => return (n, None),
                    Ok(k) => n += k,
                    Err(e) => return (n, Some(e.kind())),
                }
            }
        })
        .unwrap();
    let c = Client::attach_to(&bed.host).unwrap();
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7615)).unwrap();
    // 12 MiB: more than Linux's receive buffer takes.
    let (bufs, want) = queue_zerocopy(&c, &mut s, 48);
    drop(s);
    drop(bufs);
    drop(c);
    wait_for(30, "the dead program's session to be reclaimed", || {
        bed.snapshot().sessions.is_empty()
    });
    go.send(()).unwrap();
    let (n, e) = server.join().unwrap();
    assert!(
        n < want.len(),
        "the peer never had room for it all ({n} bytes)"
    );
    assert_eq!(
        e,
        Some(std::io::ErrorKind::ConnectionReset),
        "the peer learns that the rest will not come"
    );
}

/// Queues `n` zero-copy buffers of 256 KiB, each taken whole, with
/// pattern bytes; returns them and the stream they make.
fn queue_zerocopy(
    c: &Client,
    s: &mut softoe_host::TcpStream,
    n: usize,
) -> (Vec<softoe_host::ZcBuf>, Vec<u8>) {
    let mut bufs: Vec<_> = (0..n).map(|_| c.zc_buf(256 * 1024).unwrap()).collect();
    let mut want = Vec::new();
    for (i, b) in bufs.iter_mut().enumerate() {
        let d = pattern(b.len(), i as u8);
        b.write_at(0, &d).unwrap();
        assert_eq!(s.send_zerocopy(b, d.len()).unwrap(), d.len());
        want.extend_from_slice(&d);
    }
    (bufs, want)
}

/// Bytes a program wrote and then exited: the kernel sends them all
/// before the FIN, and so must the engine, even when it sees the program's
/// end before the commands it had posted (each copy-ring send is posted
/// without waiting, so `write` has already returned for all of them).
#[test]
fn what_a_program_wrote_before_it_exited_is_all_sent() {
    let bed = bed();
    let (gate, held) = Gate::new();
    bed.add(Box::new(held));
    let server = linux_sink(&bed, 7612, Vec::new());
    let c = Client::attach_to(&bed.host).unwrap();
    let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7612)).unwrap();
    s.set_send_policy(SendPolicy::Copy);
    let data = pattern(256 << 10, 7);
    s.write_all(&data[..1000]).unwrap();
    gate.close();
    // The engine reads none of these until the program is gone: each
    // write fits the ring and returns at once.
    for chunk in data[1000..].chunks(16 << 10) {
        s.write_all(chunk).unwrap();
    }
    drop(s);
    drop(c);
    gate.open();
    let got = server.join().unwrap();
    assert_eq!(got.len(), data.len());
    assert_eq!(sha256(&got), sha256(&data));
}

/// `softoe stat`'s socket count follows the normal close path: a session
/// that opened and closed 300 short connections shows none open. Before,
/// the count only grew (5,109 after 5,000 connections on 4,096 slots).
#[test]
fn the_socket_count_goes_down_when_sockets_close() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let l = bed
        .linux
        .run(|| TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7617)).unwrap())
        .unwrap();
    let server = bed
        .linux
        .spawn(move || {
            for _ in 0..300 {
                let (mut s, _) = l.accept().unwrap();
                let mut b = Vec::new();
                s.read_to_end(&mut b).unwrap();
            }
        })
        .unwrap();
    for _ in 0..300 {
        let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, 7617)).unwrap();
        s.write_all(b"x").unwrap();
    }
    server.join().unwrap();
    let me = c.session();
    wait_for(10, "the session to show no socket open", || {
        bed.snapshot()
            .sessions
            .iter()
            .any(|st| st.id == me && st.sockets == 0)
    });
}

/// The `SO_PRIORITY` the stack sends connection `local`→`remote`'s frames
/// with, as `softoe stat` reads it (`None`: no such connection).
fn priority_in_snapshot(bed: &Bed, local: SocketAddrV4, remote: SocketAddrV4) -> Option<u8> {
    bed.snapshot()
        .connections
        .iter()
        .find(|c| c.local == local.to_string() && c.remote == remote.to_string())
        .map(|c| c.priority)
}

/// `SO_PRIORITY` from a program reaches the stack (where a bonded port's
/// scheduler reads it), as the control socket shows it: set before
/// connecting; changed on the live connection; inherited from a listener
/// by what it accepts, and a listener's later change reaching only the
/// connections accepted after it; more than a byte refused.
#[test]
fn a_programs_priority_reaches_the_stack() {
    let bed = bed();
    let c = Client::attach_to(&bed.host).unwrap();
    let to = SocketAddrV4::new(LINUX_IP, 7623);
    let l = bed
        .linux
        .run(move || TcpListener::bind(to).unwrap())
        .unwrap();
    let sink = bed
        .linux
        .spawn(move || {
            let mut held = Vec::new();
            for _ in 0..2 {
                held.push(l.accept().unwrap().0);
            }
            // Hold both until the program is done with them.
            for mut s in held {
                let mut b = Vec::new();
                let _ = s.read_to_end(&mut b);
            }
        })
        .unwrap();
    let mut o = TcpOptions::default();
    o.priority = Some(6);
    let s = c.tcp_connect_with(to, &o).unwrap();
    let plain = c.tcp_connect(to).unwrap();
    assert_eq!(priority_in_snapshot(&bed, s.local_addr(), to), Some(6));
    assert_eq!(s.priority().unwrap(), 6, "INFO says it too");
    assert_eq!(priority_in_snapshot(&bed, plain.local_addr(), to), Some(0));
    assert_eq!(plain.priority().unwrap(), 0);
    // On the live connection, at once.
    s.set_priority(2).unwrap();
    assert_eq!(priority_in_snapshot(&bed, s.local_addr(), to), Some(2));
    assert_eq!(s.priority().unwrap(), 2);
    s.set_priority(255).unwrap();
    assert_eq!(priority_in_snapshot(&bed, s.local_addr(), to), Some(255));
    let e = s.set_priority(256).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::EINVAL), "{e}");
    assert_eq!(priority_in_snapshot(&bed, s.local_addr(), to), Some(255));
    drop((s, plain));
    sink.join().unwrap();

    // A listener's passes to what it accepts.
    let at = SocketAddrV4::new(ENGINE_IP, 7624);
    let mut o = TcpOptions::default();
    o.priority = Some(5);
    let l = c.tcp_listen_with(at, 16, &o).unwrap();
    assert_eq!(l.priority(), 5);
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let peers = bed
        .linux
        .spawn(move || {
            let a = TcpStream::connect(at).unwrap();
            wait.recv().unwrap();
            let b = TcpStream::connect(at).unwrap();
            wait.recv().unwrap();
            drop((a, b));
        })
        .unwrap();
    let (a, from_a) = l.accept().unwrap();
    assert_eq!(priority_in_snapshot(&bed, at, from_a), Some(5));
    assert_eq!(a.priority().unwrap(), 5);
    // The listener changes: the next connection takes the new value, the
    // one accepted keeps its own.
    l.set_priority(1).unwrap();
    assert_eq!(l.priority(), 1);
    go.send(()).unwrap();
    let (b, from_b) = l.accept().unwrap();
    assert_eq!(priority_in_snapshot(&bed, at, from_b), Some(1));
    assert_eq!(b.priority().unwrap(), 1);
    assert_eq!(priority_in_snapshot(&bed, at, from_a), Some(5));
    // And the accepted one changes alone.
    a.set_priority(6).unwrap();
    assert_eq!(priority_in_snapshot(&bed, at, from_a), Some(6));
    assert_eq!(priority_in_snapshot(&bed, at, from_b), Some(1));
    go.send(()).unwrap();
    peers.join().unwrap();

    // UDP: set on a bound socket; more than a byte refused alike.
    let u = c.udp_bind(SocketAddrV4::new(ENGINE_IP, 0)).unwrap();
    u.set_priority(7).unwrap();
    assert_eq!(u.priority(), 7);
    let e = u.set_priority(1000).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::EINVAL), "{e}");
    assert_eq!(u.priority(), 7, "a refused value is not kept");
}

/// A listener shared by two sessions is one socket, as a listening
/// descriptor shared across `fork` is on Linux: what either set last is
/// what the next connection, accepted by either, starts with — not what
/// the accepting session once set itself.
#[test]
fn a_shared_listeners_priority_is_whoever_set_it_last() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let at = SocketAddrV4::new(ENGINE_IP, 7625);
    let l = parent.tcp_listen(at, 16).unwrap();
    let shared = child
        .adopt_listener(parent.session(), l.id(), parent.secret())
        .unwrap();
    shared.set_priority(3).unwrap();
    l.set_priority(1).unwrap();
    let peer = bed
        .linux
        .spawn(move || {
            let mut s = TcpStream::connect(at).unwrap();
            let mut b = Vec::new();
            let _ = s.read_to_end(&mut b);
        })
        .unwrap();
    let (s, from) = shared.accept().unwrap();
    assert_eq!(priority_in_snapshot(&bed, at, from), Some(1));
    assert_eq!(s.priority().unwrap(), 1);
    drop(s);
    peer.join().unwrap();
}
