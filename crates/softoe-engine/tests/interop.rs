//! softoe against Linux's own TCP on a real (virtual) wire. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

use common::*;
use sha2::{Digest, Sha256};
use softoe_engine::services::{BulkClient, Discard};

#[test]
fn bulk_both_ways_with_sha256() {
    const N: usize = 64 << 20;
    let from_linux = reports();
    let to_linux = reports();
    let mut bed = Bed::start(
        Options::default(),
        vec![Box::new(Discard::new(9, from_linux.clone()))],
    );
    // Linux → softoe.
    let data = linux_bytes(N, 7);
    let want = hex(&Sha256::digest(&data));
    bed.linux
        .run(move || {
            let mut s =
                TcpStream::connect_timeout(&engine_addr(9).into(), Duration::from_secs(5)).unwrap();
            s.write_all(&data).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
        })
        .unwrap();
    wait_for(30, "the discard report", || {
        !from_linux.lock().unwrap().is_empty()
    });
    let r = from_linux.lock().unwrap()[0].clone();
    assert_eq!(
        (r.received, r.sha256.as_str(), r.error.as_deref()),
        (N as u64, want.as_str(), None)
    );

    // softoe → Linux.
    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(5000)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut h = Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                let k = s.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                h.update(&buf[..k]);
                n += k as u64;
            }
            (n, hex(&h.finalize()))
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    bed.add(Box::new(BulkClient::new(
        linux_addr(5000),
        N as u64,
        to_linux.clone(),
    )));
    let (n, sha) = server.join().unwrap();
    assert_eq!((n, sha), (N as u64, pattern_sha(N as u64)));
    wait_for(10, "the client to finish", || {
        !to_linux.lock().unwrap().is_empty()
    });
    assert_eq!(to_linux.lock().unwrap()[0].error, None);
    let c = bed.stop();
    assert!(c.frames_out > 0 && c.frames_in > 0);
}
