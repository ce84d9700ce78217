//! Softoe sockets used by processes other than the one that made them: a
//! listener inherited across `fork` whose parent closes its copy first
//! (haproxy's master-worker), and connections and listeners handed to an
//! unrelated process over a Unix socket with `SCM_RIGHTS` (vsftpd's data
//! connections, haproxy's `-x` reload). The serving side runs on softoe
//! (`programs/passfd.py`), a Linux client checks every answer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;

mod shim;

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP};

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/programs/passfd.py")
}

/// Runs `mode` on softoe and a Linux client expecting answers from `who`.
fn passed(bed: &Bed, mode: &str, who: &str, port: u16) {
    let mut server = on_softoe(bed, "python3");
    server
        .arg(script())
        .args([mode, &ENGINE_IP.to_string(), &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut server = Child(server.spawn().unwrap());
    let mut out = BufReader::new(server.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "{mode}: the server did not start");
    let mut client = on_linux(bed, "python3");
    client
        .arg(script())
        .args(["client", &ENGINE_IP.to_string(), &port.to_string(), who]);
    let c = run_for(client, 60, "the Linux client");
    let status = {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Some(st) = server.0.try_wait().unwrap() {
                break Some(st);
            }
            if std::time::Instant::now() > end {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let mut err = String::new();
    if let Some(mut e) = server.0.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err).unwrap();
    }
    assert!(
        c.status.success() && status.is_some_and(|s| s.success()),
        "{mode}: client:\n{}{}\nserver ({status:?}):\n{err}",
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
}

/// The parent listens, forks and closes its copy at once; the child then
/// accepts. The listener lives while the child holds it (on softoe the
/// child's first call failed with `ENOENT`: the parent's close had closed
/// it).
#[test]
fn a_listener_the_parent_closed_first_serves_the_child() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    passed(&bed, "forked-listener", "child", 9330);
}

/// Each accepted connection is handed to another program over a Unix
/// socket and closed; that program serves it.
#[test]
fn connections_passed_over_a_unix_socket_work_in_the_receiver() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    passed(&bed, "pass-conn", "helper", 9331);
}

/// The listener itself is handed over and closed; the receiver accepts.
#[test]
fn a_listener_passed_over_a_unix_socket_accepts_in_the_receiver() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    passed(&bed, "pass-listener", "helper", 9332);
}
