//! Sockets across host programs' sessions, as `fork` shares them: a
//! listener shared into another session, and connections that move to
//! another session (a child), come back, and outlive their parent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;
mod host;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::time::Duration;

use common::{ENGINE_IP, LINUX_IP, sha256, wait_for};
use host::{bed, linux_echo, linux_reader, linux_sink, pattern};
use softoe_abi::errno;
use softoe_host::Client;

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
