//! One connection used by two processes at once, as on Linux: after
//! `fork` a reader here and a writer there (rsync's daemon and client), two
//! readers, two writers; the forking program on softoe, its peer on
//! Linux's TCP, both ends checking every byte (`programs/share.py`): each
//! byte delivered once, in order, and never a wrong one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::path::PathBuf;
use std::process::Stdio;

mod shim;

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP, LINUX_IP};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/share.py")
}

/// Runs `mode` with the forking program on softoe, as the side that
/// connects (`connect`) or the one that accepts (`listen`).
fn shared(bed: &Bed, mode: &str, how: &str, port: u16) {
    let py = script();
    let (peer_addr, forker_addr) = match how {
        "connect" => (LINUX_IP.to_string(), LINUX_IP.to_string()),
        _ => (ENGINE_IP.to_string(), ENGINE_IP.to_string()),
    };
    let mut peer = on_linux(bed, "python3");
    peer.arg(&py)
        .args(["peer", &peer_addr, &port.to_string(), mode]);
    if how == "listen" {
        peer.arg("connect");
    }
    let peer = std::thread::spawn(move || run_for(peer, 120, "the peer"));
    if how == "connect" {
        wait_listening(bed, port);
    }
    let mut forker = on_softoe(bed, "python3");
    forker
        .arg(&py)
        .args(["forker", &forker_addr, &port.to_string(), how, mode])
        .stdin(Stdio::null());
    let f = run_for(forker, 120, "the forking program");
    let p = peer.join().unwrap();
    let say = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(
        f.status.success() && p.status.success(),
        "{mode} ({how}):\nforker on softoe:\n{}\npeer on Linux:\n{}",
        say(&f),
        say(&p)
    );
}

macro_rules! cases {
    ($($name:ident: $mode:literal, $how:literal, $port:literal;)*) => {$(
        #[test]
        fn $name() {
            if !have("python3") {
                return;
            }
            let bed = bed();
            shared(&bed, $mode, $how, $port);
        }
    )*};
}

cases! {
    child_reads_parent_writes_as_a_client: "split", "connect", 9310;
    child_reads_parent_writes_as_a_server: "split", "listen", 9311;
    parent_reads_child_writes_as_a_client: "split-rev", "connect", 9312;
    parent_reads_child_writes_as_a_server: "split-rev", "listen", 9313;
    two_readers_as_a_client: "two-readers", "connect", 9314;
    two_readers_as_a_server: "two-readers", "listen", 9315;
    two_writers_as_a_client: "two-writers", "connect", 9316;
    two_writers_as_a_server: "two-writers", "listen", 9317;
}
