//! The client against a fake engine on a socket pair: what a program's
//! waits do when the engine goes away without a word.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

use softoe_abi::{ATTACH_MAGIC, Bell, Hello, Layout, Region, VERSION, Welcome};

use super::{Client, Config};
use crate::sys::{self, Mapping};

/// The engine's side of a fake attach: what must stay open for the
/// session to look alive.
struct FakeEngine {
    conn: OwnedFd,
    _map: Mapping,
    _memfd: OwnedFd,
    _bells: [OwnedFd; 2],
}

/// Answers the hello on `conn` as an engine does: a fresh region in a
/// memfd, the engine's and the program's doorbells. It then serves
/// nothing.
fn answer(conn: OwnedFd) -> FakeEngine {
    let mut buf = [0u8; 64];
    let (n, _) = rustix::net::recv(&conn, &mut buf, rustix::net::RecvFlags::empty()).unwrap();
    let hello = Hello::from_bytes(&buf[..n]).expect("a hello");
    let layout = Layout::new(
        hello.cmd_entries,
        hello.cmp_entries,
        hello.socks,
        hello.data_len,
    )
    .unwrap();
    let len = layout.region_len();
    let (memfd, map) = Mapping::memfd("fake-engine", len as usize).unwrap();
    // SAFETY: a fresh page-aligned shared mapping of `len` zeroed bytes,
    // alive as long as the fake engine.
    let _ = unsafe { Region::init(map.ptr(), layout, 7) };
    let bells = [sys::eventfd().unwrap(), sys::eventfd().unwrap()];
    let w = Welcome {
        magic: ATTACH_MAGIC,
        version: VERSION,
        status: 0,
        session: 7,
        limit: 0,
        region_len: len,
    };
    sys::send_fds(
        &conn,
        &w.to_bytes(),
        &[memfd.as_fd(), bells[0].as_fd(), bells[1].as_fd()],
    )
    .unwrap();
    // The client registers its first waiter bell at attach: refused, it
    // sleeps on the session's doorbell.
    let (n, _) = sys::recv_fds::<1>(&conn, &mut buf).unwrap();
    let ask = Bell::from_bytes(&buf[..n]).expect("a bell registration");
    let no = Bell {
        status: -libc::ENOSPC,
        ..ask
    };
    sys::send(&conn, &no.to_bytes()).unwrap();
    FakeEngine {
        conn,
        _map: map,
        _memfd: memfd,
        _bells: bells,
    }
}

fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

/// An engine that dies (its end of the attach connection closes, the
/// session's state untouched) ends every wait with `ConnectionAborted`;
/// before, a thread waiting for a completion napped 100 ms at a time for
/// ever.
#[test]
fn a_wait_ends_when_the_engine_dies() {
    let (engine_end, ours) = seqpacket_pair();
    let engine = std::thread::spawn(move || answer(engine_end));
    let cfg = Config {
        data_len: 1 << 20,
        sockets: 16,
        ..Config::default()
    };
    let c = Client::attach_over(ours, cfg).unwrap();
    let engine = engine.join().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = c.clone();
    std::thread::spawn(move || {
        // Nobody serves the command: this waits for its completion.
        let _ = tx.send(waiter.nop());
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(rx.try_recv().is_err(), "answered by nobody");
    drop(engine.conn);
    // A bound against hanging, not a measurement.
    let r = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let e = r.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionAborted, "{e}");
    assert!(!c.is_alive());
    // A `poll` on any of its sockets wakes: failed and hung up.
    let r = c.readiness_of(0);
    assert!(r.readable && r.error && r.hung_up && !r.writable, "{r:?}");
}

/// A program that closes the attach connection behind the client's back
/// (sshd's `closefrom`) may reuse its number for another file; that
/// file's hang-up (here a pipe whose writer is gone) is not the engine's.
#[test]
fn a_hang_up_on_a_reused_descriptor_number_is_not_the_engines() {
    let (engine_end, ours) = seqpacket_pair();
    let engine = std::thread::spawn(move || answer(engine_end));
    let cfg = Config {
        data_len: 1 << 20,
        sockets: 16,
        ..Config::default()
    };
    let c = Client::attach_over(ours, cfg).unwrap();
    let _engine = engine.join().unwrap();
    let conn = c.inner.conn.as_raw_fd();
    let mut p = [0; 2];
    // SAFETY: `p` has room for the two descriptors pipe writes.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    // SAFETY: descriptors of this test's own; dup2 replaces the
    // connection's number with the pipe's read end, then the pipe's own
    // numbers close (the writer gone: the read end hangs up).
    unsafe {
        assert_eq!(libc::dup2(p[0], conn), conn);
        libc::close(p[0]);
        libc::close(p[1]);
    }
    let bell = sys::eventfd().unwrap();
    let interrupted = c.nap(bell.as_fd(), Duration::from_millis(20));
    assert!(!interrupted);
    assert!(c.is_alive(), "a stranger's hang-up ended the session");
}

/// A child that inherited the attachment — here made with a raw `clone`,
/// which no `pthread_atfork` hook sees — never posts on the parent's
/// single-producer command ring: its call fails (`EBADF`) and the ring's
/// tail stays where the parent left it; the parent's own posts go on.
#[test]
fn a_child_never_posts_on_its_parents_rings() {
    let (engine_end, ours) = seqpacket_pair();
    let engine = std::thread::spawn(move || answer(engine_end));
    let cfg = Config {
        data_len: 1 << 20,
        sockets: 16,
        ..Config::default()
    };
    let c = Client::attach_over(ours, cfg).unwrap();
    let _engine = engine.join().unwrap();
    let tail = |c: &Client| {
        let at = std::mem::offset_of!(softoe_abi::RegionHeader, cmd_tail);
        // SAFETY: `cmd_tail` is a 4-aligned word inside the mapped header,
        // only ever accessed atomically.
        unsafe {
            std::sync::atomic::AtomicU32::from_ptr(c.inner.region.base().add(at).cast())
                .load(std::sync::atomic::Ordering::Acquire)
        }
    };
    let before = tail(&c);
    let mut p = [0; 2];
    // SAFETY: `p` has room for the two descriptors pipe writes.
    assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
    // SAFETY: clone(SIGCHLD) without CLONE_VM: a fork libc does not see.
    // The child posts (which must fail without allocating or locking
    // anything the parent's threads may hold), writes one byte and leaves
    // with `_exit`.
    let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
    assert!(pid >= 0);
    if pid == 0 {
        let refused = c
            .post(&softoe_abi::Request::Nop)
            .is_err_and(|e| e.raw_os_error() == Some(libc::EBADF));
        let b = [u8::from(refused)];
        // SAFETY: one byte to our pipe, then exit.
        unsafe {
            libc::write(p[1], b.as_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    let mut b = [0u8];
    // SAFETY: one byte from our pipe, then our child reaped.
    unsafe {
        assert_eq!(libc::read(p[0], b.as_mut_ptr().cast(), 1), 1);
        libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0);
        libc::close(p[0]);
        libc::close(p[1]);
    }
    assert_eq!(b[0], 1, "the child's post was not refused");
    assert_eq!(tail(&c), before, "the child moved the parent's ring");
    c.post(&softoe_abi::Request::Nop).unwrap();
    assert_eq!(tail(&c), before.wrapping_add(1), "the parent's post");
}
