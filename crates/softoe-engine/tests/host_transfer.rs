//! Host programs' bytes both ways against Linux through the shared-memory
//! host interface: each send policy, accepting from Linux, and reads that
//! land in posted buffers (direct placement).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;
mod host;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::time::Duration;

use common::{ENGINE_IP, LINUX_IP, sha256};
use host::{bed, linux_echo, pattern};
use softoe_abi::{Command, Opcode, errno};
use softoe_host::{Client, SendPolicy};

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
/// without (figures in docs/journal/2026-11-24-direct-placement-on-receive.md;
/// no timed assertion). Run with
/// `cargo test --release -p softoe-engine --test host_transfer -- --ignored
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
