//! softoe against Linux peers configured differently: SACK, timestamps or
//! window scaling turned off, jumbo frames, a small MSS; and the offloads
//! seen from outside — super-segments leave the engine, and Linux receives
//! correctly cut, correctly checksummed segments (read back by tshark), and
//! the engine's own pcap opens in tshark. Needs root, tshark and tcpdump.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use softoe_engine::app::TcpInfoRecord as TcpInfo;
use softoe_engine::services::BulkClient;

const T: Duration = Duration::from_secs(20);

/// Moves `n` bytes Linux → softoe and `n` bytes softoe → Linux (ports
/// `port` and `port + 1`), checks both by SHA-256, and returns what the
/// engine's side of each connection negotiated.
fn both_ways(bed: &Bed, n: u64, port: u16) -> (TcpInfo, TcpInfo) {
    // Linux → softoe.
    let l = bed.app.tcp_listen(port, 4).unwrap();
    let client = bed
        .linux
        .spawn(move || {
            let mut s = TcpStream::connect_timeout(&engine_addr(port).into(), T).unwrap();
            let sha = send_stream(&mut s, n, 1);
            s.shutdown(Shutdown::Write).unwrap();
            sha
        })
        .unwrap();
    let (mut s, _) = l.accept_timeout(Some(T)).unwrap();
    s.set_read_timeout(Some(T));
    let inbound = s.info().unwrap();
    let got = hash_stream(&mut s);
    let want = client.join().unwrap();
    assert_eq!(got, (n, want), "Linux → softoe intact");

    // softoe → Linux.
    let server = bed
        .linux
        .spawn(move || {
            let l = TcpListener::bind(linux_addr(port + 1)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            hash_stream(&mut s)
        })
        .unwrap();
    let mut c = loop {
        match bed.app.tcp_connect(linux_addr(port + 1)) {
            Ok(c) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    };
    let outbound = c.info().unwrap();
    let want = send_stream(&mut c, n, 2);
    c.shutdown_write().unwrap();
    assert_eq!(server.join().unwrap(), (n, want), "softoe → Linux intact");
    (inbound, outbound)
}

#[test]
fn linux_without_sack_timestamps_or_window_scaling() {
    let bed = Bed::start(Options::default(), vec![]);
    let cases = [
        ("net.ipv4.tcp_sack", 7100),
        ("net.ipv4.tcp_timestamps", 7110),
        ("net.ipv4.tcp_window_scaling", 7120),
    ];
    for (sysctl, port) in cases {
        bed.tb.sysctl(&bed.linux, &format!("{sysctl}=0")).unwrap();
        let (a, b) = both_ways(&bed, 8 << 20, port);
        for i in [a, b] {
            match sysctl {
                "net.ipv4.tcp_sack" => assert!(!i.sack() && i.timestamps() && i.wscale().is_some()),
                "net.ipv4.tcp_timestamps" => {
                    assert!(i.sack() && !i.timestamps() && i.wscale().is_some())
                }
                _ => assert!(i.sack() && i.timestamps() && i.wscale().is_none()),
            }
        }
        bed.tb.sysctl(&bed.linux, &format!("{sysctl}=1")).unwrap();
    }
}

#[test]
fn jumbo_frames() {
    let opts = Options {
        mtu: 9000,
        ..Options::default()
    };
    let bed = Bed::start(opts, vec![]);
    let (a, b) = both_ways(&bed, 32 << 20, 7200);
    // 9000 − 40 bytes of headers, less 12 of timestamps on each segment.
    assert_eq!((a.snd_mss, b.snd_mss), (8948, 8948), "{a:?}");
}

#[test]
fn peer_mss_of_536() {
    let bed = Bed::start(Options::default(), vec![]);
    // Linux announces an MSS of 536 on connections over this route.
    bed.linux
        .ip(&[
            "route",
            "replace",
            "10.7.0.0/24",
            "dev",
            "eth0",
            "advmss",
            "536",
        ])
        .unwrap();
    let (a, b) = both_ways(&bed, 4 << 20, 7300);
    assert_eq!(
        (a.snd_mss, b.snd_mss),
        (524, 524),
        "536 less 12 of timestamps"
    );
}

/// Runs `tshark -r file` with `args`; returns its standard output.
fn tshark(file: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .expect("tshark runs (apt install tshark)");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn super_segments_leave_the_engine_and_linux_gets_proper_segments() {
    const N: u64 = 16 << 20;
    let dir = std::env::temp_dir();
    let engine_pcap = dir.join(format!("softoe-test-engine-{}.pcap", std::process::id()));
    let linux_pcap = dir.join(format!("softoe-test-linux-{}.pcap", std::process::id()));
    let mut opts = Options::default();
    opts.engine.pcap = Some(engine_pcap.clone());
    let mut bed = Bed::start(opts, vec![]);
    // The bridge port toward Linux segments and checksums in software, so
    // Linux's eth0 sees frames as a wire would carry them.
    let port = bed.tb.veth_to_bridge_port(&bed.linux).expect("bridge port");
    bed.tb
        .ethtool_k(&bed.sw, &port, &["tso", "off", "gso", "off", "tx", "off"])
        .unwrap();
    bed.tb
        .ethtool_k(&bed.linux, "eth0", &["gro", "off"])
        .unwrap();

    // Capture on Linux's side.
    let mut dump = bed
        .linux
        .command("tcpdump")
        .args(["-i", "eth0", "-B", "32768", "-U", "-n", "-w"])
        .arg(&linux_pcap)
        .args(["tcp", "port", "7400"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpdump runs (apt install tcpdump)");
    // tcpdump says "listening on" once its socket is up.
    let mut err = dump.stderr.take().expect("stderr");
    let mut seen = Vec::new();
    let mut b = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("listening on") {
        let k = std::io::Read::read(&mut err, &mut b).unwrap();
        assert!(k > 0, "tcpdump exited: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&b[..k]);
    }

    let server = bed
        .linux
        .spawn(|| {
            let l = TcpListener::bind(linux_addr(7400)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            hash_stream(&mut s)
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let done = reports();
    bed.add(Box::new(BulkClient::new(linux_addr(7400), N, done.clone())));
    assert_eq!(server.join().unwrap(), (N, pattern_sha(N)));
    wait_for(10, "the client", || !done.lock().unwrap().is_empty());
    let snap = bed.snapshot();
    bed.stop();
    // SIGTERM lets tcpdump flush and close its file.
    let _ = Command::new("kill")
        .args(["-TERM", &dump.id().to_string()])
        .status();
    let _ = dump.wait();

    assert!(
        snap.stack.tx_tso_frames > 0 && snap.stack.tx_csum_offloaded > 0,
        "the engine used TSO and checksum offload: {:?}",
        snap.stack
    );
    eprintln!(
        "engine: {} frames out, {} TSO super-segments, {} with checksum offload",
        snap.engine.frames_out, snap.stack.tx_tso_frames, snap.stack.tx_csum_offloaded
    );

    // Linux's capture: data segments at most one MSS, every checksum right.
    let rows = tshark(
        &linux_pcap,
        &[
            "-o",
            "tcp.check_checksum:TRUE",
            "-o",
            "ip.check_checksum:TRUE",
            "-Y",
            "ip.src == 10.7.0.1 && tcp.len > 0",
            "-T",
            "fields",
            "-e",
            "tcp.len",
            "-e",
            "tcp.checksum.status",
            "-e",
            "ip.checksum.status",
        ],
    );
    let mut segs = 0u64;
    let mut bytes = 0u64;
    let mut bad = Vec::new();
    for (n, line) in rows.lines().enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        let len: u64 = f[0].parse().unwrap();
        if len > 1448 || f[1..] != ["1", "1"] {
            bad.push(format!(
                "data segment {n}: len {len}, tcp/ip checksum status {:?}",
                &f[1..]
            ));
        }
        segs += 1;
        bytes += len;
    }
    // (Status 1 is "good"; the captures stay behind for a look if not.)
    assert!(
        bad.is_empty(),
        "{} of {segs} segments reached Linux oversized or with bad checksums \
         (captures kept: {} and {}):\n{}",
        bad.len(),
        linux_pcap.display(),
        engine_pcap.display(),
        bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
    );
    // tcpdump may miss a few under load; what it caught must be right.
    assert!(
        segs > 1000 && bytes >= N * 9 / 10,
        "{segs} segments, {bytes} bytes captured"
    );

    // The engine's own capture: the handshake, and super-segments as written.
    let syns = tshark(
        &engine_pcap,
        &[
            "-Y",
            "tcp.flags.syn == 1",
            "-T",
            "fields",
            "-e",
            "tcp.flags.ack",
        ],
    );
    let syns: Vec<&str> = syns.lines().collect();
    assert!(
        syns.len() >= 2,
        "SYN and SYN-ACK in the engine's pcap: {syns:?}"
    );
    let big = tshark(&engine_pcap, &["-Y", "frame.len > 1514"]);
    assert!(
        big.lines().count() > 0,
        "super-segments in the engine's pcap"
    );
    let _ = std::fs::remove_file(&engine_pcap);
    let _ = std::fs::remove_file(&linux_pcap);
}
