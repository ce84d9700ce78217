//! Host programs' socket options through the shared-memory host interface:
//! `SO_PRIORITY` reaching the stack, on connections and on shared
//! listeners.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;
mod host;

use std::io::Read;
use std::net::{SocketAddrV4, TcpListener, TcpStream};

use common::{Bed, ENGINE_IP, LINUX_IP};
use host::bed;
use softoe_abi::errno;
use softoe_host::{Client, TcpOptions};

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
    let watch = l.watch_across_fork().unwrap();
    let shared = match child.take(std::os::fd::AsFd::as_fd(&watch)).unwrap() {
        softoe_host::Taken::Listener(l) => l,
        softoe_host::Taken::Stream(_) => panic!("a connection where a listener was watched"),
    };
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
