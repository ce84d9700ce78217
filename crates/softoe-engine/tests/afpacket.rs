//! The engine on an AF_PACKET port: two namespaces joined by one veth,
//! Linux with an address at one end, the engine's [`AfPacketPort`] on the
//! other (no TAP, no bridge). ARP and ping are answered; TCP moves data both
//! ways intact, with offloads off (a plain NIC), with the virtio-net header
//! offloads on (super-segments out, coalesced frames in), and through a
//! [`FaultPort`] that loses, duplicates, reorders and corrupts frames. Needs
//! root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use softoe_engine::services::{Discard, Reports, Service, Source};
use softoe_engine::{
    AfPacketOffloads, AfPacketOptions, AfPacketPort, DirectionFaults, Engine, EngineConfig,
    EngineCounters, FaultConfig, FaultPort, Port, Snapshot, StopHandle,
};
use softoe_stack::StackConfig;
use softoe_testbed::{Netns, NsThread, Testbed};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 1);
const LINUX_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 2);
const ENGINE_MAC: [u8; 6] = [2, 0x50, 0, 0, 0, 1];
const T: Duration = Duration::from_secs(10);

static N: AtomicU32 = AtomicU32::new(0);

/// Linux in `linux`, the engine on `eth0` of `engine_ns`, one veth between.
struct Bed<R> {
    linux: Netns,
    control: PathBuf,
    stop: Option<StopHandle>,
    engine: Option<NsThread<Result<(EngineCounters, R), String>>>,
    // Last: the namespaces go after the engine has stopped.
    tb: Testbed,
}

/// Two namespaces and the veth: `(testbed, linux, engine side)`.
fn wire() -> (Testbed, Netns, Netns) {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let linux = tb.netns("lx").unwrap();
    let en = tb.netns("en").unwrap();
    tb.veth(&linux, "eth0", &en, "eth0").unwrap();
    tb.addr(&linux, "eth0", &format!("{LINUX_IP}/24")).unwrap();
    (tb, linux, en)
}

impl<R: Send + 'static> Bed<R> {
    /// Builds the wire, opens the port with `open` inside the engine's
    /// namespace and runs an engine on it with `services`. When the engine
    /// stops, `report` reads what the test wants from the port.
    fn start<P: Port + Send + 'static>(
        open: impl FnOnce() -> std::io::Result<P> + Send + 'static,
        report: impl FnOnce(&P) -> R + Send + 'static,
        services: Vec<Box<dyn Service>>,
    ) -> Bed<R> {
        let (tb, linux, engine_ns) = wire();
        let n = N.fetch_add(1, Ordering::Relaxed);
        let control = std::env::temp_dir().join(format!(
            "softoe-afpacket-test-{}-{n}.sock",
            std::process::id()
        ));
        let mut ecfg = EngineConfig::default();
        ecfg.control = Some(control.clone());
        // Delayed frames of a FaultPort go out when the engine turns.
        ecfg.max_sleep = Duration::from_millis(2);
        let (tx, rx) = mpsc::channel();
        let engine = engine_ns
            .spawn(move || -> Result<(EngineCounters, R), String> {
                let port = open().map_err(|e| e.to_string())?;
                let mut cfg = StackConfig::new(
                    EthernetAddress(ENGINE_MAC),
                    Ipv4Cidr::new(Ipv4Address(ENGINE_IP.octets()), 24).unwrap(),
                );
                cfg.seed = 1;
                cfg.tcp.rx_buffer = 1 << 20;
                cfg.tcp.tx_buffer = 4 << 20;
                cfg.tcp.tx_max_chunks = 4096;
                let mut e = Engine::new(cfg, port, ecfg).map_err(|e| e.to_string())?;
                for s in services {
                    e.add_service(s);
                }
                tx.send(e.stop_handle()).map_err(|e| e.to_string())?;
                e.run().map_err(|e| e.to_string())?;
                Ok((*e.counters(), report(e.port())))
            })
            .unwrap();
        let stop = match rx.recv_timeout(T) {
            Ok(s) => s,
            Err(_) => {
                let why = engine.join().map(|r| r.err());
                panic!("engine did not start: {why:?}");
            }
        };
        Bed {
            tb,
            linux,
            control,
            stop: Some(stop),
            engine: Some(engine),
        }
    }

    fn snapshot(&self) -> Snapshot {
        softoe_engine::control::query(&self.control).expect("control socket answers")
    }

    /// Stops the engine; its counters and the port's report.
    fn stop(&mut self) -> (EngineCounters, R) {
        if let Some(s) = self.stop.take() {
            s.stop();
        }
        self.engine
            .take()
            .expect("running")
            .join()
            .unwrap()
            .unwrap()
    }
}

impl<R> Drop for Bed<R> {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            s.stop();
        }
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
    }
}

fn reports() -> Reports {
    std::sync::Arc::new(std::sync::Mutex::new(Vec::new()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SHA-256 of the first `n` bytes of the stream the Source service sends
/// (the engine's region 0 pattern, repeated).
fn pattern_sha(n: u64) -> String {
    let p = softoe_engine::memory::pattern(4 << 20, 1);
    let mut h = Sha256::new();
    let mut left = n;
    while left > 0 {
        let k = left.min(p.len() as u64) as usize;
        h.update(&p[..k]);
        left -= k as u64;
    }
    hex(&h.finalize())
}

/// Linux sends `n` bytes to the engine's Discard service on `port` (read
/// back as the service's report) and reads `n` bytes from its Source
/// service on `port + 1`, both compared by SHA-256. Returns the rates,
/// Mbit/s, of each direction.
fn both_ways(bed: &Bed<impl Send + 'static>, n: u64, port: u16, discarded: &Reports) -> (f64, f64) {
    let engine = SocketAddrV4::new(ENGINE_IP, port);
    let (sent_sha, up_secs) = bed
        .linux
        .run(move || {
            let t = Instant::now();
            let mut s = TcpStream::connect_timeout(&engine.into(), T).unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let mut h = Sha256::new();
            let mut chunk = vec![0u8; 64 * 1024];
            let mut left = n;
            let mut i = 0u32;
            while left > 0 {
                for (k, b) in chunk.iter_mut().enumerate() {
                    *b = ((k as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ i as u8;
                }
                i += 1;
                let k = left.min(chunk.len() as u64) as usize;
                h.update(&chunk[..k]);
                s.write_all(&chunk[..k]).unwrap();
                left -= k as u64;
            }
            s.shutdown(Shutdown::Write).unwrap();
            // The engine closes once it has read everything.
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            (hex(&h.finalize()), t.elapsed().as_secs_f64())
        })
        .unwrap();
    wait_for("the discard report", || {
        !discarded.lock().unwrap().is_empty()
    });
    let r = discarded.lock().unwrap().remove(0);
    assert_eq!(
        (r.received, r.sha256.as_str(), r.error.as_deref()),
        (n, sent_sha.as_str(), None),
        "Linux → engine intact"
    );

    let source = SocketAddrV4::new(ENGINE_IP, port + 1);
    let (got, got_sha, down_secs) = bed
        .linux
        .run(move || {
            let t = Instant::now();
            let mut s = TcpStream::connect_timeout(&source.into(), T).unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let mut h = Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0u64;
            loop {
                let k = s.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                h.update(&buf[..k]);
                got += k as u64;
            }
            (got, hex(&h.finalize()), t.elapsed().as_secs_f64())
        })
        .unwrap();
    assert_eq!((got, got_sha), (n, pattern_sha(n)), "engine → Linux intact");
    let mbps = |s: f64| n as f64 * 8.0 / s / 1e6;
    (mbps(up_secs), mbps(down_secs))
}

fn services(port: u16, n: u64, discarded: &Reports) -> Vec<Box<dyn Service>> {
    vec![
        Box::new(Discard::new(port, discarded.clone())),
        Box::new(Source::new(port + 1, n, reports())),
    ]
}

fn open_plain() -> std::io::Result<AfPacketPort> {
    AfPacketPort::open("eth0", &AfPacketOptions::default())
}

/// Linux pings the engine, resolving it by ARP first; the engine answers
/// from its own MAC (not the veth's).
#[test]
fn arp_and_ping_answered() {
    let bed = Bed::start(open_plain, |p| p.stats(), vec![]);
    let out = bed
        .linux
        .command("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2", &ENGINE_IP.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ping failed:\n{text}");
    assert!(text.contains("3 received"), "{text}");
    let neigh = bed
        .linux
        .ip(&["neigh", "show", &ENGINE_IP.to_string()])
        .unwrap();
    assert!(
        neigh.contains("02:50:00:00:00:01"),
        "Linux's neighbours: {neigh}"
    );
    let snap = bed.snapshot();
    assert!(snap.stack.icmp_echo >= 3, "{:?}", snap.stack);
    assert!(snap.port.starts_with("af_packet eth0"), "{}", snap.port);
}

/// 4 MiB each way with every offload off. Linux's TCP still hands the veth
/// super-segments with partial checksums; the port vouches for those (from
/// PACKET_AUXDATA) and the stack takes them whole.
#[test]
fn tcp_both_ways_plain() {
    const N: u64 = 4 << 20;
    let discarded = reports();
    let mut bed = Bed::start(open_plain, |p| p.stats(), services(9, N, &discarded));
    let (up, down) = both_ways(&bed, N, 9, &discarded);
    let snap = bed.snapshot();
    let (c, stats) = bed.stop();
    eprintln!(
        "af_packet, offloads off: Linux → engine {up:.0} Mbit/s, engine → Linux {down:.0} Mbit/s; \
         {} frames in, {} out ({} bytes per frame out); {:?}; {stats:?}",
        c.frames_in,
        c.frames_out,
        c.bytes_out / c.frames_out.max(1),
        snap.stack
    );
    assert_eq!(snap.stack.rx_bad_checksum, 0);
    assert_eq!(snap.faults, None, "a plain port injects no faults");
    assert_eq!(snap.stack.tx_tso_frames, 0, "no TSO without the offload");
    assert_eq!(snap.stack.tx_csum_offloaded, 0);
    assert!(
        c.bytes_out / c.frames_out.max(1) <= 1514,
        "wire-sized frames out"
    );
    assert_eq!(stats.outgoing_skipped, 0, "PACKET_IGNORE_OUTGOING works");
}

/// 4 MiB each way with the virtio-net header: the engine sends TCP
/// super-segments with partial checksums and sees Linux's coalesced frames
/// with their segment size.
#[test]
fn tcp_both_ways_with_vnet_offloads() {
    const N: u64 = 4 << 20;
    let discarded = reports();
    let open = || {
        AfPacketPort::open(
            "eth0",
            &AfPacketOptions {
                offloads: AfPacketOffloads::ALL,
                ..AfPacketOptions::default()
            },
        )
    };
    let mut bed = Bed::start(
        open,
        |p| (p.vnet_hdr_len(), p.offloads(), p.stats()),
        services(19, N, &discarded),
    );
    let (up, down) = both_ways(&bed, N, 19, &discarded);
    let snap = bed.snapshot();
    let (c, (vnet, offloads, stats)) = bed.stop();
    eprintln!(
        "af_packet, vnet offloads ({vnet}-byte header): Linux → engine {up:.0} Mbit/s, \
         engine → Linux {down:.0} Mbit/s; {} frames in, {} out ({} bytes per frame out); {:?}; {stats:?}",
        c.frames_in,
        c.frames_out,
        c.bytes_out / c.frames_out.max(1),
        snap.stack
    );
    assert_eq!(offloads, AfPacketOffloads::ALL);
    assert!(vnet == 12 || vnet == 10, "{vnet}");
    assert!(snap.stack.tx_tso_frames > 0, "super-segments sent");
    assert!(
        c.bytes_out / c.frames_out.max(1) > 1514,
        "frames out above the MTU"
    );
    assert!(snap.stack.rx_coalesced > 0, "coalesced frames received");
    assert!(snap.stack.tx_csum_offloaded > 0);
    assert_eq!(snap.stack.rx_bad_checksum, 0);
}

/// 2 MiB each way through a FaultPort on the AF_PACKET port: 2 % loss,
/// 2 % reordering, 1 % duplication and 0.5 % corruption each way, Linux's
/// segmentation offloads off so faults hit wire-sized frames. Every byte
/// arrives intact, and every kind of fault was injected.
#[test]
fn tcp_through_fault_port() {
    const N: u64 = 2 << 20;
    let discarded = reports();
    let faults = DirectionFaults {
        loss: 0.02,
        reorder: 0.02,
        reorder_gap: 3,
        reorder_timeout_us: 2_000,
        duplicate: 0.01,
        corrupt: 0.005,
        ..DirectionFaults::default()
    };
    let cfg = FaultConfig {
        seed: 42,
        rx: faults.clone(),
        tx: faults,
    };
    let open = move || {
        let p = open_plain()?;
        FaultPort::new(p, cfg).map_err(std::io::Error::other)
    };
    let mut bed = Bed::start(open, |p| p.counters(), services(29, N, &discarded));
    bed.tb
        .ethtool_k(
            &bed.linux,
            "eth0",
            &["tso", "off", "gso", "off", "gro", "off"],
        )
        .unwrap();
    let (up, down) = both_ways(&bed, N, 29, &discarded);
    let snap = bed.snapshot();
    let (_, f) = bed.stop();
    // What Linux's checksums caught of the engine's corrupted frames.
    let snmp = bed
        .linux
        .command("cat")
        .arg("/proc/net/snmp")
        .output()
        .unwrap();
    let snmp = String::from_utf8_lossy(&snmp.stdout);
    let tcp_csum_errors = snmp
        .lines()
        .filter(|l| l.starts_with("Tcp: "))
        .nth(1)
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("?")
        .to_string();
    eprintln!(
        "af_packet + faults: Linux → engine {up:.0} Mbit/s, engine → Linux {down:.0} Mbit/s; \
         {f:?}; {:?}; Linux TCP InCsumErrors {tcp_csum_errors}",
        snap.stack
    );
    for d in [f.rx, f.tx] {
        assert!(
            d.lost > 0 && d.reordered > 0 && d.duplicated > 0 && d.corrupted > 0,
            "{d:?}"
        );
    }
    // `softoe stat` saw the faults too: every kind already injected when
    // the transfers were done, none beyond what the port counted at the end.
    let seen = snap.faults.expect("the snapshot carries the port's faults");
    for (s, end) in [(seen.rx, f.rx), (seen.tx, f.tx)] {
        assert!(
            s.lost > 0 && s.reordered > 0 && s.duplicated > 0 && s.corrupted > 0,
            "{s:?}"
        );
        assert!(
            s.frames <= end.frames && s.lost <= end.lost && s.corrupted <= end.corrupted,
            "{s:?} then {end:?}"
        );
    }
    // The connections recovered from loss, and the snapshot says so even
    // when they are gone by now (CI once saw none left in its list).
    assert!(
        snap.stack.tcp_retransmits > 0,
        "{:?} {:?}",
        snap.stack,
        snap.connections
    );
    assert!(
        snap.stack.rx_bad_checksum > 0,
        "corrupted frames caught by checksum"
    );
}

/// The socket's receive buffer: 4 MiB by default; sized from the port
/// queue (`port.queue`) so that 65,536 frames wait for the engine, as a TAP
/// queue's do, instead of being dropped. The kernel doubles what it is
/// given.
#[test]
fn receive_buffer_is_sized_for_the_queue() {
    let (_tb, _linux, en) = wire();
    let (default, sized, send) = en
        .run(|| {
            let get = |p: &AfPacketPort, opt: libc::c_int| {
                let mut v: libc::c_int = 0;
                let mut len = size_of::<libc::c_int>() as libc::socklen_t;
                // SAFETY: `v` and `len` are live locals of the sizes passed;
                // getsockopt writes at most `len` bytes into `v`.
                let rc = unsafe {
                    libc::getsockopt(
                        p.raw_fd(),
                        libc::SOL_SOCKET,
                        opt,
                        (&mut v as *mut libc::c_int).cast(),
                        &mut len,
                    )
                };
                assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
                v as usize
            };
            let p = AfPacketPort::open("eth0", &AfPacketOptions::default()).unwrap();
            let default = get(&p, libc::SO_RCVBUF);
            drop(p);
            let opts = AfPacketOptions::default().receive_frames(65_536);
            let p = AfPacketPort::open("eth0", &opts).unwrap();
            (default, get(&p, libc::SO_RCVBUF), get(&p, libc::SO_SNDBUF))
        })
        .unwrap();
    assert_eq!(default, 2 * (4 << 20));
    assert_eq!(sized, 2 * 65_536 * softoe_engine::afpacket::FRAME_CHARGE);
    assert_eq!(send, 2 * (4 << 20), "the send buffer keeps its size");
    // A small queue never shrinks it below the default.
    assert_eq!(
        AfPacketOptions::default().receive_frames(64).receive_buffer,
        4 << 20
    );
}

/// Opening: clear errors for a missing interface, a bad name and a too
/// large MTU; the interface's MTU and MAC read back; promiscuous mode on
/// while the port is open and off after.
#[test]
fn open_options_and_errors() {
    let (_tb, _linux, en) = wire();
    let en2 = en.clone();
    let promisc = move || {
        // The membership counts in `promiscuity`; the PROMISC flag shows
        // only what `ip link set promisc on` asked for.
        en2.ip(&["-d", "-o", "link", "show", "eth0"])
            .unwrap()
            .contains("promiscuity 1 ")
    };
    assert!(!promisc());
    let (tx, rx) = mpsc::channel();
    let (go_on, wait) = mpsc::channel::<()>();
    let t = en
        .spawn(move || {
            let e = AfPacketPort::open("nosuch0", &AfPacketOptions::default()).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
            assert!(e.to_string().contains("nosuch0 not found"), "{e}");
            let e =
                AfPacketPort::open("a-name-far-too-long", &AfPacketOptions::default()).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            let e = AfPacketPort::open(
                "eth0",
                &AfPacketOptions {
                    mtu: Some(9000),
                    ..AfPacketOptions::default()
                },
            )
            .unwrap_err();
            assert!(
                e.to_string().contains("exceeds the MTU of eth0 (1500)"),
                "{e}"
            );
            let p = AfPacketPort::open(
                "eth0",
                &AfPacketOptions {
                    promiscuous: true,
                    mtu: Some(1400),
                    offloads: AfPacketOffloads {
                        tso: true,
                        csum: false,
                        gro: true,
                    },
                    ..AfPacketOptions::default()
                },
            )
            .unwrap();
            // TSO and GRO need the checksum offload.
            assert_eq!(p.offloads(), AfPacketOffloads::NONE);
            assert_eq!(p.vnet_hdr_len(), 0);
            let caps = p.caps();
            assert_eq!((caps.mtu, caps.tso_max, caps.tx_csum), (1400, None, false));
            tx.send(p.mac()).unwrap();
            wait.recv().unwrap();
            drop(p);
        })
        .unwrap();
    let mac = rx.recv_timeout(T).unwrap();
    let link = en.ip(&["-o", "link", "show", "eth0"]).unwrap();
    let mac_text = mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    assert!(link.contains(&mac_text), "{mac_text} in {link}");
    assert!(promisc(), "promiscuous while open: {link}");
    go_on.send(()).unwrap();
    t.join().unwrap();
    assert!(!promisc(), "promiscuous mode dropped with the port");
}
