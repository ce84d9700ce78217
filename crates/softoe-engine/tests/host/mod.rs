//! What the `host_*` tests share: an engine serving host programs, with
//! Linux behind a bridge, and Linux peers for the programs' connections.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener};
use std::time::Duration;

use crate::common::{Bed, LINUX_IP, Options};

/// A testbed whose engine serves host programs.
pub fn bed() -> Bed {
    Bed::start(
        Options {
            host: true,
            ..Options::default()
        },
        Vec::new(),
    )
}

/// `len` bytes of a pattern that differs with `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 10) as u8)
        .collect()
}

/// A Linux echo server on `port` for one connection; returns what it saw.
pub fn linux_echo(bed: &Bed, port: u16) -> softoe_testbed::NsThread<Vec<u8>> {
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

/// Polls `fd` for input for up to `ms`; whether it became readable.
pub fn readable_within(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call.
    unsafe { libc::poll(&raw mut p, 1, ms) == 1 }
}

/// A Linux reader that starts reading only after `delay`: its window
/// closes meanwhile, so the sender's data waits in the engine.
pub fn linux_slow_sink(bed: &Bed, port: u16, delay: Duration) -> softoe_testbed::NsThread<Vec<u8>> {
    linux_reader(bed, port, Vec::new(), delay)
}

/// A Linux server on `port` for one connection: sends `greeting`, then
/// returns everything it reads until the end of the stream.
pub fn linux_sink(bed: &Bed, port: u16, greeting: Vec<u8>) -> softoe_testbed::NsThread<Vec<u8>> {
    linux_reader(bed, port, greeting, Duration::ZERO)
}

/// A Linux server for one connection: sends `greeting`, waits `delay`,
/// then reads to the end and returns what it read.
pub fn linux_reader(
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
