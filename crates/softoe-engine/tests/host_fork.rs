//! Sockets across host programs' sessions, as `fork` shares them: a
//! listener shared into another session, and connections that another
//! session (a child) joins — both read and write them at once — and that
//! outlive their parent.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;
mod host;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::time::Duration;

use common::{ENGINE_IP, LINUX_IP, sha256, wait_for};
use host::{bed, linux_reader, linux_sink, pattern};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use softoe_abi::errno;
use softoe_host::{Client, Taken};

/// The connection behind watched descriptor `fd`, taken into `c`'s session.
fn take_stream(c: &Client, fd: &OwnedFd) -> std::io::Result<softoe_host::TcpStream> {
    match c.take(fd.as_fd())? {
        Taken::Stream(t) => Ok(t),
        Taken::Listener(_) => panic!("a listener where a connection was watched"),
    }
}

/// The listener behind watched descriptor `fd`, shared into `c`'s session.
fn take_listener(c: &Client, fd: &OwnedFd) -> std::io::Result<softoe_host::TcpListener> {
    match c.take(fd.as_fd())? {
        Taken::Listener(l) => Ok(l),
        Taken::Stream(_) => panic!("a connection where a listener was watched"),
    }
}

/// A listener shared into another session (a forked child's) by its
/// watched descriptor: both accept from it; a descriptor that is no
/// watch's is refused, and so is taking it twice; when the first session
/// closes its share the other keeps accepting, and when the last closes
/// (and its descriptor), the port is free again.
#[test]
fn a_listener_shared_into_another_session() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let l = parent
        .tcp_listen(SocketAddrV4::new(ENGINE_IP, 8100), 16)
        .unwrap();
    // A kernel socket is no softoe socket's descriptor.
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    let e = child.take(a.as_fd()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::ENOENT));
    let watch = l.watch_across_fork().unwrap();
    let shared = take_listener(&child, &watch).unwrap();
    assert_eq!(shared.local_addr(), l.local_addr());
    let e = child.take(watch.as_fd()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(errno::EALREADY));
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
    // The last share and its descriptor go: the port is closed.
    drop(shared);
    drop(watch);
    wait_for(5, "the listener to close", || {
        bed.linux
            .run(|| TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 8100)).is_err())
            .unwrap()
    });
}

/// What `fork` does to a connection, done with two attachments in one
/// process: the first watches it (as the shim does before `fork`), the
/// second takes it (as a child does at first use). Both hold it from then
/// on, as two processes hold a kernel socket: the bytes the first had not
/// read go to the next reader, both write, and the connection lives until
/// both sockets are closed *and* the watched descriptor's last copy is.
#[test]
fn a_connection_is_shared_with_another_session_and_lives_until_the_last_descriptor() {
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
    let watch = s.watch_across_fork().unwrap();
    // Twice is an error.
    assert_eq!(
        s.watch_across_fork().unwrap_err().raw_os_error(),
        Some(errno::EALREADY)
    );
    // Wait until the whole greeting sits in the parent's ring.
    wait_for(5, "the greeting to arrive", || s.pending() >= 99_000);
    let mut t = take_stream(&child, &watch).unwrap();
    assert_eq!(t.peer_addr(), SocketAddrV4::new(LINUX_IP, 7610));
    // The parent's unread bytes go to the next reader: here the child.
    let mut rest = vec![0u8; greeting.len() - 1000];
    t.read_exact(&mut rest).unwrap();
    assert_eq!(rest, greeting[1000..], "the unread bytes, in order");
    // Both write, one after the other.
    let second = pattern(1 << 20, 2);
    t.write_all(&second).unwrap();
    let third = pattern(1 << 20, 3);
    s.write_all(&third).unwrap();
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
    let want = [first, second, third].concat();
    assert_eq!(got.len(), want.len());
    assert_eq!(sha256(&got), sha256(&want));
}

/// inetd's order: the parent's ring is full and more waits in the stack
/// when the parent closes its socket; a child that execs takes the
/// connection afterwards and must read every byte, in order — the ring's
/// bytes first, then the stack's.
#[test]
fn a_full_ring_left_behind_reaches_the_adopter_in_order() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let greeting = pattern(3 << 20, 11);
    let server = linux_sink(&bed, 7618, greeting.clone());
    let s = parent
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7618))
        .unwrap();
    let watch = s.watch_across_fork().unwrap();
    // The ring fills; the rest waits in the stack or on the wire.
    wait_for(5, "the ring to fill", || s.pending() >= 256 << 10);
    drop(s);
    let mut t = take_stream(&child, &watch).unwrap();
    let mut got = vec![0u8; greeting.len()];
    t.read_exact(&mut got).unwrap();
    assert_eq!(sha256(&got), sha256(&greeting), "every byte, in order");
    drop(t);
    drop(watch);
    assert!(server.join().unwrap().is_empty());
}

/// Two sessions read one stream at once: every byte reaches exactly one
/// of them, each one's bytes in stream order (their reads interleave).
#[test]
fn two_sessions_read_one_stream_each_byte_once() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let data = pattern(8 << 20, 5);
    // Sends the stream and its end, then waits for ours.
    let l = bed
        .linux
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7619)).unwrap())
        .unwrap();
    let sent = data.clone();
    let server = bed
        .linux
        .spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            c.write_all(&sent).unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
            rest
        })
        .unwrap();
    let s = parent
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7619))
        .unwrap();
    let watch = s.watch_across_fork().unwrap();
    let t = take_stream(&child, &watch).unwrap();
    let reader = |mut r: softoe_host::TcpReader, size: usize| {
        std::thread::spawn(move || {
            let mut chunks = Vec::new();
            let mut buf = vec![0u8; size];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    return chunks;
                }
                chunks.push(buf[..n].to_vec());
            }
        })
    };
    let a = reader(s.try_clone_reader(), 1500);
    let b = reader(t.try_clone_reader(), 70_000);
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let (na, nb): (usize, usize) = (a.iter().map(Vec::len).sum(), b.iter().map(Vec::len).sum());
    assert_eq!(na + nb, data.len(), "every byte once");
    assert!(na > 0 && nb > 0, "both read: {na} and {nb}");
    assert!(
        interleaves(&data, &a, &b),
        "the two readers' chunks are not the stream cut in two, in order"
    );
    drop(s);
    drop(t);
    drop(watch);
    assert!(server.join().unwrap().is_empty());
}

/// Whether `whole` is the chunks of `a` and `b` interleaved, each list in
/// its order (each byte once, none wrong).
fn interleaves(whole: &[u8], a: &[Vec<u8>], b: &[Vec<u8>]) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![(0usize, 0usize, 0usize)];
    while let Some((i, j, pos)) = todo.pop() {
        if !seen.insert((i, j)) {
            continue;
        }
        if i == a.len() && j == b.len() {
            if pos == whole.len() {
                return true;
            }
            continue;
        }
        if let Some(c) = a.get(i)
            && whole.get(pos..pos + c.len()) == Some(c.as_slice())
        {
            todo.push((i + 1, j, pos + c.len()));
        }
        if let Some(c) = b.get(j)
            && whole.get(pos..pos + c.len()) == Some(c.as_slice())
        {
            todo.push((i, j + 1, pos + c.len()));
        }
    }
    false
}

/// When the other holder is gone, the connection is one socket's again:
/// it reads through its ring (`EV_SHARED` clears) and nothing is lost on
/// the way back.
#[test]
fn a_connection_goes_back_to_its_ring_when_the_other_holder_leaves() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    let data = pattern(4 << 20, 8);
    let server = linux_sink(&bed, 7620, data.clone());
    let mut s = parent
        .tcp_connect(SocketAddrV4::new(LINUX_IP, 7620))
        .unwrap();
    let watch = s.watch_across_fork().unwrap();
    let mut head = vec![0u8; 10_000];
    s.read_exact(&mut head).unwrap();
    let mut t = take_stream(&child, &watch).unwrap();
    let shared = |s: &softoe_host::TcpStream| s.slot_state().events & softoe_abi::EV_SHARED != 0;
    wait_for(5, "the parent's socket to say it is shared", || shared(&s));
    let mut mid = vec![0u8; 1 << 20];
    t.read_exact(&mut mid).unwrap();
    drop(t);
    drop(child);
    wait_for(5, "the parent's socket to have its ring back", || {
        !shared(&s)
    });
    let mut rest = Vec::new();
    let mut buf = vec![0u8; 100_000];
    while rest.len() < data.len() - head.len() - mid.len() {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended early");
        rest.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        sha256(&[head, mid, rest].concat()),
        sha256(&data),
        "every byte, in order"
    );
    drop(s);
    drop(watch);
    assert!(server.join().unwrap().is_empty());
}

/// A writer whose send ring is full when another session joins the
/// connection goes on writing once the peer reads: nothing it wrote is
/// lost or reordered, and its next write is not refused.
#[test]
fn a_full_writer_keeps_writing_after_another_session_joins() {
    let bed = bed();
    let parent = Client::attach_to(&bed.host).unwrap();
    let child = Client::attach_to(&bed.host).unwrap();
    // Linux reads nothing for a while: what the parent writes stays unacked
    // once Linux's receive buffer is full.
    let server = linux_reader(&bed, 7614, Vec::new(), Duration::from_secs(2));
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
    let t = take_stream(&child, &watch).unwrap();
    s.set_nonblocking(false);
    s.write_all(b"late").unwrap();
    drop(s);
    drop(t);
    drop(watch);
    let got = server.join().unwrap();
    assert_eq!(got.len(), sent + 4, "what the parent wrote arrives whole");
    assert_eq!(sha256(&got), sha256(&[&data[..sent], b"late"].concat()));
}

/// sshd's order: the monitor holds the connection, one child takes it and
/// exits, then the next child takes it by the same descriptor — the
/// claim finds the connection where it is now, with every byte in order.
#[test]
fn a_take_follows_a_connection_that_moved_on() {
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
    let mut t = take_stream(&first, &watch).unwrap();
    let mut head = vec![0u8; 50_000];
    t.read_exact(&mut head).unwrap();
    let b = pattern(1 << 20, 2);
    t.write_all(&b).unwrap();
    // The first child exits: its session dies with the connection in it.
    drop(t);
    drop(first);
    // The next child holds the descriptor, as it inherited it.
    let mut u = take_stream(&second, &watch).unwrap();
    assert_eq!(u.peer_addr(), SocketAddrV4::new(LINUX_IP, 7615));
    let mut rest = vec![0u8; greeting.len() - head.len()];
    u.read_exact(&mut rest).unwrap();
    head.extend_from_slice(&rest);
    assert_eq!(sha256(&head), sha256(&greeting), "every byte, in order");
    let c = pattern(1 << 20, 3);
    u.write_all(&c).unwrap();
    // Where it is now, taking it again is an error, not a second share.
    assert_eq!(
        second.take(watch.as_fd()).unwrap_err().raw_os_error(),
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
    let session = parent.session();
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
    let mut t = take_stream(&child, &watch).unwrap();
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

/// Authority over another session's socket is holding its descriptor: a
/// session that never claimed one cannot adopt it by guessing grant
/// numbers (another session's grant, used or not, is not its own), and a
/// grant is used once. Before, any session that knew (or read) the
/// owner's secret could adopt any of its sockets.
#[test]
fn only_the_claimant_adopts_by_its_grant() {
    use softoe_abi::{Command, Opcode};
    let bed = bed();
    let owner = Client::attach_to(&bed.host).unwrap();
    let holder = Client::attach_to(&bed.host).unwrap();
    let stranger = Client::attach_to(&bed.host).unwrap();
    let at = SocketAddrV4::new(ENGINE_IP, 7626);
    let l = owner.tcp_listen(at, 16).unwrap();
    let watch = l.watch_across_fork().unwrap();
    // The holder's claim and adopt use up a grant (grants count from 1).
    let shared = take_listener(&holder, &watch).unwrap();
    // A raw `ADOPT` of every grant number that may have been given.
    let adopt = |g: u64| Command::new(Opcode::Adopt, 0, 0, 0, [g, 0, 0, 0, 4096, 0]);
    for g in 0..64 {
        let r = stranger.submit_raw(adopt(g)).unwrap();
        assert_eq!(r.result, -i64::from(errno::ENOENT), "grant {g}");
    }
    // Not even the holder may adopt again by a grant it used.
    for g in 0..64 {
        let r = holder.submit_raw(adopt(g)).unwrap();
        assert_eq!(r.result, -i64::from(errno::ENOENT), "grant {g}, again");
    }
    // The socket is untouched: the holder's share still accepts.
    let peer = bed
        .linux
        .spawn(move || TcpStream::connect(at).map(drop))
        .unwrap();
    let (_s, _) = shared.accept().unwrap();
    peer.join().unwrap().unwrap();
    drop(shared);
    drop(l);
    drop(watch);
}

/// The abstract name of a Unix socket (`None`: unnamed).
fn unix_name(fd: &impl AsRawFd) -> Option<Vec<u8>> {
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `a` and `len` are valid for writes for the call.
    let r = unsafe { libc::getsockname(fd.as_raw_fd(), (&raw mut a).cast(), &raw mut len) };
    let n = (len as usize).checked_sub(size_of::<libc::sa_family_t>())?;
    (r == 0 && n > 0).then(|| a.sun_path[..n].iter().map(|&c| c as u8).collect())
}

/// A claim is proved, not named: a socket bound to a watch's very name —
/// possible in another network namespace, where abstract names are apart —
/// is refused (`EACCES`: the engine's byte does not come out of it), and
/// the refusal leaves nothing that fails the honest claim after it.
#[test]
fn a_claim_by_a_look_alike_descriptor_is_refused() {
    let bed = bed();
    let owner = Client::attach_to(&bed.host).unwrap();
    let thief = Client::attach_to(&bed.host).unwrap();
    let at = SocketAddrV4::new(ENGINE_IP, 7627);
    let l = owner.tcp_listen(at, 16).unwrap();
    let watch = l.watch_across_fork().unwrap();
    let name = unix_name(&watch).expect("a watch is named");
    assert!(name.starts_with(softoe_abi::WATCH_NAME));
    // The same name, bound in the Linux side's namespace.
    let fake = bed
        .linux
        .run(move || {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            // SAFETY: a zeroed sockaddr_un filled with the name; bind
            // reads `len` bytes of it.
            let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
            sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (d, &c) in sa.sun_path.iter_mut().zip(&name) {
                *d = c as libc::c_char;
            }
            let len = (size_of::<libc::sa_family_t>() + name.len()) as libc::socklen_t;
            // SAFETY: `sa` is valid for reads of `len` bytes.
            let r = unsafe { libc::bind(a.as_raw_fd(), (&raw const sa).cast(), len) };
            assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
            (a, b)
        })
        .unwrap();
    for _ in 0..3 {
        let e = thief.take(fake.0.as_fd()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(errno::EACCES));
    }
    // Another claim succeeds meanwhile (the engine's next probe byte
    // differs from the ones the refused claims left behind)...
    let other = owner
        .tcp_listen(SocketAddrV4::new(ENGINE_IP, 7628), 16)
        .unwrap();
    let other_watch = other.watch_across_fork().unwrap();
    drop(take_listener(&thief, &other_watch).unwrap());
    // ...and the honest holder's claim still succeeds.
    let shared = take_listener(&thief, &watch).unwrap();
    assert_eq!(shared.local_addr(), l.local_addr());
    drop(shared);
    drop(l);
    drop(watch);
    drop(other);
    drop(other_watch);
}
