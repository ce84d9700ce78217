//! softoe against Linux's own TCP on a real (virtual) wire. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::Duration;

use common::*;
use sha2::{Digest, Sha256};
use softoe_engine::services::{BulkClient, Discard, Reports};

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

/// Switches the offloads off on Linux's link (both ends), so the drop rule
/// and any shaper meet segments, not super-packets. Returns the bridge port.
fn segments_on_the_wire(bed: &Bed) -> String {
    let port = bed.tb.veth_to_bridge_port(&bed.linux).unwrap_or_default();
    let off = ["tso", "off", "gso", "off", "gro", "off"];
    bed.tb.ethtool_k(&bed.linux, "eth0", &off).unwrap();
    if !port.is_empty() {
        bed.tb.ethtool_k(&bed.sw, &port, &off).unwrap();
    }
    port
}

/// Linux sends `n` bytes to the engine's discard service (port 9, reporting
/// into `reports`); asserts every byte arrived intact. Returns Mbit/s.
fn linux_to_softoe(bed: &Bed, reports: &Reports, n: usize, seed: u8) -> f64 {
    let data = linux_bytes(n, seed);
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
    wait_for(60, "the discard report", || {
        !reports.lock().unwrap().is_empty()
    });
    let r = reports.lock().unwrap().remove(0);
    assert_eq!(
        (r.received, r.sha256.as_str()),
        (n as u64, want.as_str()),
        "data intact"
    );
    n as f64 * 8.0 / secs / 1e6
}

/// The engine sends `n` pattern bytes to a Linux server on `port`; asserts
/// every byte arrived intact. Returns Mbit/s.
fn softoe_to_linux(bed: &mut Bed, n: usize, port: u16) -> f64 {
    let server = bed
        .linux
        .spawn(move || {
            let l = TcpListener::bind(linux_addr(port)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let t = std::time::Instant::now();
            let (n, sha) = hash_stream(&mut s);
            (n, sha, t.elapsed().as_secs_f64())
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let done = reports();
    bed.add(Box::new(BulkClient::new(
        linux_addr(port),
        n as u64,
        done.clone(),
    )));
    let (got, sha, secs) = server.join().unwrap();
    assert_eq!((got, sha), (n as u64, pattern_sha(n as u64)), "data intact");
    wait_for(30, "the client to finish", || {
        !done.lock().unwrap().is_empty()
    });
    assert_eq!(done.lock().unwrap()[0].error, None);
    n as f64 * 8.0 / secs / 1e6
}

/// 100 Mbit/s (tbf) with 1 % random drops both ways (per segment): every
/// byte intact, and goodput near the rate. Printed; asserted loosely.
#[test]
fn rate_limited_and_lossy_path() {
    const N: usize = 24 << 20;
    let from_linux = reports();
    let mut opts = Options::default();
    opts.engine.pcap = std::env::var_os("SOFTOE_TEST_PCAP").map(Into::into);
    let mut bed = Bed::start(opts, vec![Box::new(Discard::new(9, from_linux.clone()))]);
    let port = segments_on_the_wire(&bed);
    bed.tb.tbf(&bed.linux, "eth0", 100).unwrap();
    bed.tb.lossy_link(&bed.linux, &bed.sw, 1.0).unwrap();
    let mbps = linux_to_softoe(&bed, &from_linux, N, 3);
    assert!(
        bed.tb.dropped(&bed.sw).unwrap() > 0,
        "the wire lost none of Linux's segments"
    );
    eprintln!("Linux → softoe, 100 Mbit/s with 1 % drops: {mbps:.1} Mbit/s");
    assert!(
        mbps > 50.0,
        "goodput {mbps:.1} Mbit/s is far below the 100 Mbit/s rate"
    );

    // softoe → Linux: the bridge port toward Linux is the bottleneck.
    if !port.is_empty() {
        bed.tb.tbf(&bed.sw, &port, 100).unwrap();
    }
    let mbps = softoe_to_linux(&mut bed, N, 5001);
    assert!(
        bed.tb.dropped(&bed.linux).unwrap() > 0,
        "the wire lost none of softoe's segments"
    );
    eprintln!("softoe → Linux, 100 Mbit/s with 1 % drops: {mbps:.1} Mbit/s");
    assert!(
        mbps > 50.0,
        "goodput {mbps:.1} Mbit/s is far below the 100 Mbit/s rate"
    );
}

/// 5 % of the frames dropped both ways, at full speed: every byte intact
/// both ways (SHA-256), goodput printed. Before per-segment RACK-TLP
/// softoe's sender moved 31 Mbit/s here (a 200 ms timeout for every lost
/// retransmission or tail); the bound is far below today's figure (about
/// 1 Gbit/s on this 2-core machine) and far above that.
#[test]
fn five_percent_drops_both_ways() {
    const N: usize = 32 << 20;
    let from_linux = reports();
    let mut bed = Bed::start(
        Options::default(),
        vec![Box::new(Discard::new(9, from_linux.clone()))],
    );
    segments_on_the_wire(&bed);
    bed.tb.lossy_link(&bed.linux, &bed.sw, 5.0).unwrap();
    let into = linux_to_softoe(&bed, &from_linux, N, 5);
    let out = softoe_to_linux(&mut bed, N, 5002);
    let (to_softoe, to_linux) = (
        bed.tb.dropped(&bed.sw).unwrap(),
        bed.tb.dropped(&bed.linux).unwrap(),
    );
    eprintln!(
        "5 % drops both ways, {} MiB each: Linux → softoe {into:.0} Mbit/s, \
         softoe → Linux {out:.0} Mbit/s ({to_softoe} + {to_linux} frames dropped)",
        N >> 20
    );
    assert!(to_softoe > 0 && to_linux > 0, "the wire dropped nothing");
    // Linux's sender is not under test here (its figure swings several-fold
    // between runs on two shared cores); softoe's is.
    assert!(into > 10.0, "Linux → softoe: {into:.0} Mbit/s at 5 % drops");
    assert!(out > 100.0, "softoe → Linux: {out:.0} Mbit/s at 5 % drops");
}
