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
            let mut s = TcpStream::connect("10.9.0.2:7000").unwrap();
            s.write_all(b"across the bridge").unwrap();
        })
        .unwrap();
        assert_eq!(server.join().unwrap(), b"across the bridge");
        // Faults and rates apply without error.
        tb.tbf(&a, "eth0", 100).unwrap();
        tb.random_drop(&b, 1).unwrap();
        tb.clear_drop(&b).unwrap();
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
