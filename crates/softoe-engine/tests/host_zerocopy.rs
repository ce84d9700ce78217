//! Host programs' zero-copy sends through the shared-memory host interface:
//! buffers that come back on ACK, queued buffers (`SEND_QUEUE`) in order,
//! before the FIN and after the program exits, and what comes back when
//! the connection dies.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;
mod host;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::time::Duration;

use common::{Bed, Gate, LINUX_IP, Options, sha256, wait_for};
use host::{bed, linux_echo, linux_sink, linux_slow_sink, pattern};
use softoe_host::{Client, SendPolicy};

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
