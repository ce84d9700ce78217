//! Host programs' sessions on the engine through the shared-memory host
//! interface: attach and hello, garbage commands, a corrupt ring, a program
//! killed mid-transfer, one program's end leaving the others running, and
//! the socket count `softoe stat` shows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;
mod host;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener};
use std::time::Duration;

use common::{LINUX_IP, sha256, wait_for};
use host::{bed, linux_echo, pattern, readable_within};
use softoe_abi::{Command, Opcode, errno};
use softoe_host::Client;

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
