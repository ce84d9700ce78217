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
        tb.lossy_link(&b, &sw, 5).unwrap();
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
