//! The testbed itself, with Linux on both ends (needs root).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use softoe_testbed::Testbed;

#[test]
fn two_hosts_on_a_bridge_talk_and_everything_is_removed() {
    let prefix;
    {
        let mut tb = Testbed::new().unwrap();
        tb.deadline(softoe_testbed::test_deadline());
        prefix = tb.prefix().to_string();
        let sw = tb.netns("sw").unwrap();
        let a = tb.netns("a").unwrap();
        let b = tb.netns("b").unwrap();
        tb.bridge(&sw, "br0").unwrap();
        tb.veth_to_bridge(&a, "eth0", &sw, "br0").unwrap();
        tb.veth_to_bridge(&b, "eth0", &sw, "br0").unwrap();
        tb.addr(&a, "eth0", "10.9.0.1/24").unwrap();
        tb.addr(&b, "eth0", "10.9.0.2/24").unwrap();
        let server = b
            .spawn(|| {
                let l = TcpListener::bind("10.9.0.2:7000").unwrap();
                let (mut s, _) = l.accept().unwrap();
                let mut buf = Vec::new();
                s.read_to_end(&mut buf).unwrap();
                buf
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        a.run(|| {
            let mut s = connect("10.9.0.2:7000");
            s.write_all(b"across the bridge").unwrap();
        })
        .unwrap();
        assert_eq!(server.join().unwrap(), b"across the bridge");
        // Drops happen on the wire, in both directions: a's data and b's
        // ACKs are lost (the counters say so), and TCP repairs it all.
        // Segments, not 64 KiB super-packets, meet the drop rules.
        tb.ethtool_k(&a, "eth0", &["tso", "off", "gso", "off"])
            .unwrap();
        tb.lossy_link(&b, &sw, 4.5).unwrap();
        let server = b
            .spawn(|| {
                let l = TcpListener::bind("10.9.0.2:7001").unwrap();
                let (mut s, _) = l.accept().unwrap();
                let mut buf = Vec::new();
                s.read_to_end(&mut buf).unwrap();
                buf
            })
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        a.run(move || {
            let mut s = connect("10.9.0.2:7001");
            s.write_all(&sent).unwrap();
        })
        .unwrap();
        assert!(server.join().unwrap() == data, "data intact across drops");
        let (to_b, from_b) = (tb.dropped(&b).unwrap(), tb.dropped(&sw).unwrap());
        assert!(
            to_b > 0 && from_b > 0,
            "dropped {to_b} toward b, {from_b} from b"
        );
        // The same counts, per direction of b's link.
        let link = tb.link_drops(&b, &sw).unwrap();
        assert_eq!((link.to_host, link.from_host), (to_b, from_b));
        assert_eq!(tb.link_drops(&a, &sw).unwrap().to_host, 0, "a's link");
        tb.clear_drop(&b).unwrap();
        tb.clear_drop(&sw).unwrap();
        tb.clear_drop(&sw).unwrap();
        tb.tbf(&a, "eth0", 100).unwrap();
    }
    let left = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&left.stdout).contains(&prefix),
        "namespaces removed on drop"
    );
}

#[test]
fn a_panicking_test_leaves_nothing_behind() {
    let prefix = std::sync::Mutex::new(String::new());
    let r = std::panic::catch_unwind(|| {
        let mut tb = Testbed::new().unwrap();
        tb.deadline(softoe_testbed::test_deadline());
        *prefix.lock().unwrap() = tb.prefix().to_string();
        let _ns = tb.netns("x").unwrap();
        panic!("test failure");
    });
    assert!(r.is_err());
    let left = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&left.stdout).contains(prefix.lock().unwrap().as_str()));
}

/// Connects, retrying while the server thread is still getting to `listen`
/// (and while SYNs are lost on a lossy link).
fn connect(addr: &str) -> TcpStream {
    for _ in 0..100 {
        if let Ok(s) = TcpStream::connect(addr) {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("cannot connect to {addr}");
}

/// A process a test started inside a namespace — here one that detaches
/// itself, as nginx's workers do, so the test holds no handle on it — is
/// killed when the testbed is dropped, before its namespace goes: nothing
/// outlives the test, in a deleted namespace or elsewhere.
#[test]
fn teardown_kills_every_process_left_in_a_namespace() {
    let pid: i32;
    {
        let mut tb = Testbed::new().unwrap();
        tb.deadline(softoe_testbed::test_deadline());
        let ns = tb.netns("p").unwrap();
        let out = ns
            .command("sh")
            .args(["-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        pid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        // Killed at the end if the teardown did not (the test must not
        // leave it behind when it fails).
        let _guard = KillOnDrop(pid);
        assert!(alive(pid), "sleep {pid} runs in the namespace");
        let mine = std::fs::metadata("/proc/self/ns/net").unwrap();
        let its = std::fs::metadata(format!("/proc/{pid}/ns/net")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_ne!(mine.ino(), its.ino(), "sleep runs in the test's namespace");
        drop(tb);
        assert!(!alive(pid), "sleep {pid} survived its namespace's teardown");
    }
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// Kills `sleep` by pid if it still runs.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", self.0)).unwrap_or_default();
        if alive(self.0) && cmdline.starts_with(b"sleep\x00600") {
            let _ = std::process::Command::new("kill")
                .args(["-9", &self.0.to_string()])
                .status();
        }
    }
}

/// The tools a testbed uses in place of `nft`, `ethtool` and `sysctl`: a
/// drop program that drops TCP alone (and counts it), replaced and removed
/// on demand; offloads switched and read back; a sysctl in one namespace
/// only; and clear errors for what cannot be.
#[test]
fn drops_offloads_and_sysctls_need_no_tools() {
    use std::net::UdpSocket;
    use std::time::Duration;
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let a = tb.netns("a").unwrap();
    let b = tb.netns("b").unwrap();
    tb.veth(&a, "eth0", &b, "eth0").unwrap();
    tb.addr(&a, "eth0", "10.9.1.1/24").unwrap();
    tb.addr(&b, "eth0", "10.9.1.2/24").unwrap();
    let listener = b
        .run(|| TcpListener::bind("10.9.1.2:7000").unwrap())
        .unwrap();
    let udp = b.run(|| UdpSocket::bind("10.9.1.2:7001").unwrap()).unwrap();
    let try_connect = |a: &softoe_testbed::Netns| {
        a.run(|| {
            let to = "10.9.1.2:7000".parse().unwrap();
            TcpStream::connect_timeout(&to, Duration::from_millis(700)).is_ok()
        })
        .unwrap()
    };

    // Every TCP frame into b dropped, and counted; UDP passes.
    tb.random_drop(&b, "eth0", 100.0).unwrap();
    assert!(!try_connect(&a), "connected through a 100 % drop");
    let dropped = tb.dropped(&b).unwrap();
    assert!(dropped >= 1, "SYNs dropped: {dropped}");
    assert_eq!(tb.dropped(&a).unwrap(), 0, "nothing dropped in a");
    a.run(|| {
        let s = UdpSocket::bind("10.9.1.1:0").unwrap();
        s.send_to(b"not tcp", "10.9.1.2:7001").unwrap();
    })
    .unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    let (n, _) = udp.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"not tcp");

    // A new rate on the same device replaces the program (and its count).
    tb.random_drop(&b, "eth0", 0.0).unwrap();
    assert!(try_connect(&a), "0 % drops still drop");
    assert_eq!(tb.dropped(&b).unwrap(), 0);
    tb.random_drop(&b, "eth0", 100.0).unwrap();
    assert!(!try_connect(&a));
    tb.clear_drop(&b).unwrap();
    assert_eq!(tb.dropped(&b).unwrap(), 0);
    assert!(try_connect(&a), "the drop program outlived clear_drop");
    tb.clear_drop(&b).unwrap();
    drop(listener);

    // Offloads, through the ioctl, read back.
    assert!(
        tb.offload(&a, "eth0", "tso").unwrap(),
        "veth starts with TSO"
    );
    tb.ethtool_k(&a, "eth0", &["tso", "off", "gro", "off"])
        .unwrap();
    assert!(!tb.offload(&a, "eth0", "tso").unwrap());
    assert!(!tb.offload(&a, "eth0", "generic-receive-offload").unwrap());
    assert!(tb.offload(&b, "eth0", "tso").unwrap(), "b's own veth end");
    tb.ethtool_k(&a, "eth0", &["tso", "on"]).unwrap();
    assert!(tb.offload(&a, "eth0", "tso").unwrap());
    // TSO needs transmit checksums: the kernel keeps it off, and says so.
    let e = tb
        .ethtool_k(&a, "eth0", &["tx", "off", "tso", "on"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("tso stays off"), "{e}");
    let e = tb.ethtool_k(&a, "nosuch0", &["gro", "off"]).unwrap_err();
    assert!(e.to_string().contains("No such device"), "{e}");
    let e = tb.ethtool_k(&a, "eth0", &["lro", "off"]).unwrap_err();
    assert!(e.to_string().contains("unknown offload"), "{e}");

    // A sysctl in b alone.
    let root = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_sack").unwrap();
    tb.sysctl(&b, "net.ipv4.tcp_sack=0").unwrap();
    let in_b = b
        .run(|| std::fs::read_to_string("/proc/sys/net/ipv4/tcp_sack").unwrap())
        .unwrap();
    assert_eq!(in_b.trim(), "0");
    let now = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_sack").unwrap();
    assert_eq!(now, root, "the root namespace's sysctl changed");
    let e = tb.sysctl(&b, "net.ipv4.no_such_thing=1").unwrap_err();
    assert!(e.to_string().contains("no_such_thing"), "{e}");
    assert!(tb.sysctl(&b, "net.ipv4.tcp_sack").is_err());
    assert!(tb.sysctl(&b, "net...ipv4=1").is_err());

    // Each flow steered to one CPU (RPS over every CPU), read back where
    // the namespace's sysfs shows it; a name that is not one is refused.
    tb.flow_order(&b, "eth0").unwrap();
    let cpus = std::thread::available_parallelism().unwrap().get();
    let shown = b
        .command("cat")
        .arg("/sys/class/net/eth0/queues/rx-0/rps_cpus")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout)
        .trim()
        .replace(',', "");
    let want = softoe_testbed::rps_mask(cpus).replace(',', "");
    assert_eq!(
        shown.trim_start_matches('0'),
        want.trim_start_matches('0'),
        "rps_cpus"
    );
    for bad in ["", "eth0; true", "../eth0", "nosuch0"] {
        assert!(tb.flow_order(&b, bad).is_err(), "{bad:?} accepted");
    }

    // Bad rates and devices say so.
    for bad in [101.0, -1.0, f64::NAN] {
        let e = tb.random_drop(&b, "eth0", bad).unwrap_err();
        assert!(e.to_string().contains("0 to 100"), "{bad}: {e}");
    }
    let e = tb.random_drop(&b, "nosuch0", 1.0).unwrap_err();
    assert!(e.to_string().contains("nosuch0"), "{e}");
}

/// A fraction of a percent is a rate of its own: 0.5 % of some 5,800
/// segments is about 29 drops (a rate truncated to 0 % drops none, one
/// read as 5 % or 50 % hundreds or thousands), counted on the link's
/// direction toward the receiver only. And a `tbf` with a queue of a few
/// milliseconds, as the loss sweep's millisecond-RTT link has.
#[test]
fn a_fraction_of_a_percent_drops_about_that_share() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let sw = tb.netns("sw").unwrap();
    let a = tb.netns("a").unwrap();
    let b = tb.netns("b").unwrap();
    tb.bridge(&sw, "br0").unwrap();
    tb.veth_to_bridge(&a, "eth0", &sw, "br0").unwrap();
    let port = tb.veth_to_bridge(&b, "eth0", &sw, "br0").unwrap();
    tb.addr(&a, "eth0", "10.9.2.1/24").unwrap();
    tb.addr(&b, "eth0", "10.9.2.2/24").unwrap();
    // Wire-sized segments all the way: one drop loses one segment.
    let off = ["tso", "off", "gso", "off", "gro", "off"];
    tb.ethtool_k(&a, "eth0", &off).unwrap();
    tb.ethtool_k(&b, "eth0", &off).unwrap();
    tb.ethtool_k(&sw, &port, &off).unwrap();
    tb.lossy_link(&b, &sw, 0.5).unwrap();
    let before = tb.link_drops(&b, &sw).unwrap();
    assert_eq!((before.to_host, before.from_host), (0, 0));
    let server = b
        .spawn(|| {
            let l = TcpListener::bind("10.9.2.2:7002").unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut n = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let k = s.read(&mut buf).unwrap();
                if k == 0 {
                    return n;
                }
                n += k as u64;
            }
        })
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    const BYTES: usize = 8 << 20;
    a.run(|| {
        let mut s = connect("10.9.2.2:7002");
        s.write_all(&vec![7u8; BYTES]).unwrap();
    })
    .unwrap();
    assert_eq!(server.join().unwrap(), BYTES as u64);
    let d = tb.link_drops(&b, &sw).unwrap().since(before);
    eprintln!(
        "0.5 %: {} segments dropped toward b, {} ACKs from b",
        d.to_host, d.from_host
    );
    // About 5,800 data segments toward b (and their retransmissions);
    // Poisson(29) is below 5 once in ten million runs.
    assert!(
        (5..=120).contains(&d.to_host),
        "{} segments dropped toward b at 0.5 %",
        d.to_host
    );
    assert_eq!(d.to_host, tb.dropped_on(&b, "eth0").unwrap());
    // b's ACKs cross the same kind of drop on the bridge port: fewer
    // frames (one ACK for two segments or more), a few drops or none.
    assert!(d.from_host <= 60, "{} ACKs dropped", d.from_host);
    assert_eq!(tb.dropped_on(&b, "lo").unwrap(), 0, "no program on lo");

    // A tbf whose queue holds 5 ms, the rate above zero.
    tb.tbf_latency(&a, "eth0", 100, std::time::Duration::from_millis(5))
        .unwrap();
    let shown = softoe_testbed::run(std::process::Command::new("tc").args([
        "-n",
        a.name(),
        "qdisc",
        "show",
        "dev",
        "eth0",
    ]))
    .unwrap();
    assert!(
        shown.contains("tbf") && shown.contains("100Mbit") && shown.contains("lat 5ms"),
        "{shown}"
    );
    assert!(
        tb.tbf_latency(&a, "eth0", 0, std::time::Duration::ZERO)
            .is_err()
    );
    assert!(shown.contains("peakrate 1Gbit"), "{shown}");
    // Super-packets are cut on the way in: the one-frame peak bucket.
    // (`tc -s` counts a super-packet's segments as packets either way, and
    // a drop as one: only the setting shows here.)
    assert!(shown.contains("minburst"), "{shown}");
    // A burst far beyond 5 ms at 100 Mbit/s overflows the queue, and the
    // qdisc's drops are counted (the TCP drop programs see no UDP).
    let before = tb.qdisc_dropped(&a, "eth0").unwrap();
    a.run(|| {
        let s = std::net::UdpSocket::bind("10.9.2.1:0").unwrap();
        for _ in 0..3000 {
            let _ = s.send_to(&[0u8; 1400], "10.9.2.2:9");
        }
    })
    .unwrap();
    let queue = tb.qdisc_dropped(&a, "eth0").unwrap() - before;
    assert!(queue > 100, "{queue} frames dropped by a full 5 ms queue");
}

/// A wire tap in the switch sees marked UDP and TCP messages where they
/// enter the switch (from a's port) and where they leave it (to b's,
/// `outgoing`), in that order, and nothing unmarked.
#[test]
fn a_wire_tap_sees_marked_messages_enter_and_leave_the_switch() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let sw = tb.netns("sw").unwrap();
    let a = tb.netns("a").unwrap();
    let b = tb.netns("b").unwrap();
    tb.bridge(&sw, "br0").unwrap();
    let pa = tb.veth_to_bridge(&a, "eth0", &sw, "br0").unwrap();
    let pb = tb.veth_to_bridge(&b, "eth0", &sw, "br0").unwrap();
    tb.addr(&a, "eth0", "10.9.1.1/24").unwrap();
    tb.addr(&b, "eth0", "10.9.1.2/24").unwrap();
    let server = b
        .spawn(|| {
            let u = std::net::UdpSocket::bind("10.9.1.2:7000").unwrap();
            let l = TcpListener::bind("10.9.1.2:7001").unwrap();
            let mut buf = [0u8; 64];
            let mut got = Vec::new();
            for _ in 0..2 {
                let (n, _) = u.recv_from(&mut buf).unwrap();
                got.push(buf[..n].to_vec());
            }
            let (mut s, _) = l.accept().unwrap();
            let mut t = Vec::new();
            s.read_to_end(&mut t).unwrap();
            (got, t)
        })
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let tap = softoe_testbed::WireTap::start(&sw, *b"RTMS").unwrap();
    a.run(|| {
        let u = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        u.send_to(b"XXXX unmarked", "10.9.1.2:7000").unwrap();
        u.send_to(b"RTMS marked udp", "10.9.1.2:7000").unwrap();
        let mut s = connect("10.9.1.2:7001");
        s.write_all(b"RTMS marked tcp").unwrap();
    })
    .unwrap();
    let (udp, tcp) = server.join().unwrap();
    assert_eq!(udp.len(), 2);
    assert_eq!(tcp, b"RTMS marked tcp");
    std::thread::sleep(std::time::Duration::from_millis(100));
    let seen = tap.stop().unwrap();
    for what in [&b"RTMS marked udp"[..], b"RTMS marked tcp"] {
        let at = |dev: &str, outgoing: bool| {
            seen.iter()
                .find(|s| s.dev == dev && s.outgoing == outgoing && s.payload == what)
                .map(|s| s.at)
                .unwrap_or_else(|| panic!("{:?} on {dev}: {seen:?}", String::from_utf8_lossy(what)))
        };
        let (enter, leave) = (at(&pa, false), at(&pb, true));
        assert!(enter <= leave, "entered before it left");
    }
    assert!(
        seen.iter().all(|s| s.payload.starts_with(b"RTMS")),
        "only marked frames: {seen:?}"
    );
}

/// `Testbed::lan`: the hosts, in the order given, have their addresses on
/// `eth0` and reach each other through the switch's bridge; every link
/// (the bridge, both ends of each host's link) carries the MTU asked for.
#[test]
fn a_lan_links_its_hosts_through_the_bridge_at_its_mtu() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let ips: [std::net::Ipv4Addr; 2] = ["10.9.3.1".parse().unwrap(), "10.9.3.2".parse().unwrap()];
    let lan = tb
        .lan(&[("a", ips[0]), ("b", ips[1])], 24, Some(4000))
        .unwrap();
    assert_eq!(lan.hosts.len(), 2);
    let mtu_of = |ns: &softoe_testbed::Netns, dev: &str| {
        let out = ns.ip(&["-o", "link", "show", dev]).unwrap();
        out.split(" mtu ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_string)
            .unwrap()
    };
    assert_eq!(mtu_of(&lan.sw, softoe_testbed::BRIDGE), "4000");
    for (h, ip) in lan.hosts.iter().zip(ips) {
        assert_eq!(h.ip, ip);
        assert_eq!(mtu_of(&h.ns, "eth0"), "4000");
        assert_eq!(mtu_of(&lan.sw, &h.port), "4000");
        let master = lan.sw.ip(&["-o", "link", "show", &h.port]).unwrap();
        assert!(master.contains("master br0"), "{master}");
        assert!(
            h.ns.ip(&["-o", "addr", "show", "eth0"])
                .unwrap()
                .contains(&format!("{ip}/24"))
        );
    }
    let b = lan.hosts[1].ns.clone();
    let server = b
        .spawn(move || {
            let l = TcpListener::bind((ips[1], 7002)).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).unwrap();
            buf
        })
        .unwrap();
    lan.hosts[0]
        .ns
        .run(|| {
            let mut s = connect("10.9.3.2:7002");
            s.write_all(b"across the lan").unwrap();
        })
        .unwrap();
    assert_eq!(server.join().unwrap(), b"across the lan");
}
