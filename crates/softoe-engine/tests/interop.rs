//! softoe against Linux's own TCP on a real (virtual) wire. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

use common::*;
use sha2::{Digest, Sha256};
use softoe_engine::services::{BulkClient, Discard};

/// 1 GiB each way between the engine's zero-copy services and Linux's TCP,
/// compared by SHA-256.
#[test]
fn one_gib_each_way_with_sha256() {
    const N: u64 = 1 << 30;
    let from_linux = reports();
    let to_linux = reports();
    let mut bed = Bed::start(
        Options::default(),
        vec![Box::new(Discard::new(9, from_linux.clone()))],
    );
    // Linux → softoe.
    let (want, secs) = bed
        .linux
        .run(move || {
            let t = std::time::Instant::now();
            let mut s =
                TcpStream::connect_timeout(&engine_addr(9).into(), Duration::from_secs(5)).unwrap();
            let sha = send_stream(&mut s, N, 7);
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            (sha, t.elapsed().as_secs_f64())
        })
        .unwrap();
    wait_for(60, "the discard report", || {
        !from_linux.lock().unwrap().is_empty()
    });
    let r = from_linux.lock().unwrap()[0].clone();
    assert_eq!(
        (r.received, r.sha256.as_str(), r.error.as_deref()),
        (N, want.as_str(), None)
    );
    eprintln!(
        "Linux → softoe: 1 GiB in {secs:.2} s ({:.1} Gbit/s)",
        N as f64 * 8.0 / secs / 1e9
    );

    // softoe → Linux.
    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(5000)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let t = std::time::Instant::now();
            let (n, sha) = hash_stream(&mut s);
            (n, sha, t.elapsed().as_secs_f64())
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    bed.add(Box::new(BulkClient::new(
        linux_addr(5000),
        N,
        to_linux.clone(),
    )));
    let (n, sha, secs) = server.join().unwrap();
    assert_eq!((n, sha), (N, pattern_sha(N)));
    eprintln!(
        "softoe → Linux: 1 GiB in {secs:.2} s ({:.1} Gbit/s)",
        N as f64 * 8.0 / secs / 1e9
    );
    wait_for(10, "the client to finish", || {
        !to_linux.lock().unwrap().is_empty()
    });
    assert_eq!(to_linux.lock().unwrap()[0].error, None);
    let c = bed.stop();
    assert!(c.frames_out > 0 && c.frames_in > 0);
}

/// 100 Mbit/s (tbf) with 1 % random drops both ways (nftables, per segment):
/// every byte intact, and goodput near the rate. Printed; asserted loosely.
#[test]
fn rate_limited_and_lossy_path() {
    const N: usize = 24 << 20;
    let from_linux = reports();
    let mut opts = Options::default();
    opts.engine.pcap = std::env::var_os("SOFTOE_TEST_PCAP").map(Into::into);
    let bed = Bed::start(opts, vec![Box::new(Discard::new(9, from_linux.clone()))]);
    let port = bed.tb.veth_to_bridge_port(&bed.linux).unwrap_or_default();
    // Segments, not super-packets, meet the drop rule and the shaper.
    bed.tb
        .ethtool_k(
            &bed.linux,
            "eth0",
            &["tso", "off", "gso", "off", "gro", "off"],
        )
        .unwrap();
    if !port.is_empty() {
        bed.tb
            .ethtool_k(&bed.sw, &port, &["tso", "off", "gso", "off", "gro", "off"])
            .unwrap();
    }
    bed.tb.tbf(&bed.linux, "eth0", 100).unwrap();
    bed.tb.lossy_link(&bed.linux, &bed.sw, 1.0).unwrap();
    let data = linux_bytes(N, 3);
    let want = hex(&Sha256::digest(&data));
    let secs = bed
        .linux
        .run(move || {
            let t = std::time::Instant::now();
            let mut s =
                TcpStream::connect_timeout(&engine_addr(9).into(), Duration::from_secs(5)).unwrap();
            s.write_all(&data).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            t.elapsed().as_secs_f64()
        })
        .unwrap();
    wait_for(30, "the discard report", || {
        !from_linux.lock().unwrap().is_empty()
    });
    let r = from_linux.lock().unwrap()[0].clone();
    assert_eq!(
        (r.received, r.sha256.as_str()),
        (N as u64, want.as_str()),
        "data intact"
    );
    let lost = bed.tb.dropped(&bed.sw).unwrap();
    assert!(lost > 0, "the wire lost none of Linux's segments");
    let mbps = N as f64 * 8.0 / secs / 1e6;
    eprintln!(
        "Linux → softoe, 100 Mbit/s with 1 % drops: {mbps:.1} Mbit/s ({mbps:.0} % of the rate)"
    );
    assert!(
        mbps > 50.0,
        "goodput {mbps:.1} Mbit/s is far below the 100 Mbit/s rate"
    );

    // softoe → Linux: the bridge port toward Linux is the bottleneck.
    if !port.is_empty() {
        bed.tb.tbf(&bed.sw, &port, 100).unwrap();
    }
    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(5001)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let t = std::time::Instant::now();
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
            (n, hex(&h.finalize()), t.elapsed().as_secs_f64())
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let done = reports();
    bed.add(Box::new(BulkClient::new(
        linux_addr(5001),
        N as u64,
        done.clone(),
    )));
    let (n, sha, secs) = server.join().unwrap();
    assert_eq!((n, sha), (N as u64, pattern_sha(N as u64)), "data intact");
    let lost = bed.tb.dropped(&bed.linux).unwrap();
    assert!(lost > 0, "the wire lost none of softoe's segments");
    let mbps = N as f64 * 8.0 / secs / 1e6;
    eprintln!(
        "softoe → Linux, 100 Mbit/s with 1 % drops: {mbps:.1} Mbit/s ({mbps:.0} % of the rate)"
    );
    assert!(
        mbps > 50.0,
        "goodput {mbps:.1} Mbit/s is far below the 100 Mbit/s rate"
    );
}
