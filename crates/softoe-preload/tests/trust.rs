//! What one user's program may do to another's traffic, on softoe as on
//! Linux: ports below `ip_unprivileged_port_start` need
//! `CAP_NET_BIND_SERVICE` (judged by the kernel's view of the program, also
//! after it dropped privileges), and bind conflicts follow Linux's rules
//! (`SO_REUSEADDR` never lets a second listener share a port, `SO_REUSEPORT`
//! groups only one user's sockets, a wildcard and a specific address
//! conflict). Each case runs the same program (`programs/trust.py`) on
//! Linux's TCP in its namespace and on softoe, and wants the same lines.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

mod shim;

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP, LINUX_IP};

fn script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs/trust.py")
        .to_string_lossy()
        .into_owned()
}

/// `trust.py MODE ADDR ARGS…` on Linux's TCP or on softoe; `addr` "any"
/// is the wildcard, "own" the side's own address.
fn py(bed: &Bed, linux: bool, mode: &str, addr: &str, args: &[&str]) -> Command {
    let own = if linux { LINUX_IP } else { ENGINE_IP }.to_string();
    let addr = if addr == "any" {
        "0.0.0.0".to_string()
    } else {
        own
    };
    let mut c = if linux {
        on_linux(bed, "python3")
    } else {
        on_softoe(bed, "python3")
    };
    c.arg(script()).arg(mode).arg(addr).args(args);
    c
}

/// The lines a program printed, after it exited with success.
fn lines(c: Command, what: &str) -> String {
    let o = run_for(c, 30, what);
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Binding ports 80, 1023 and 1024 (TCP and UDP) as root, and as user
/// 65534 after the shim attached as root: the same answers as Linux's —
/// `EACCES` below 1024 for the unprivileged user. Before, softoe let any
/// program bind (and take the connections of) port 80 of its address.
#[test]
fn privileged_ports_answer_as_on_linux() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    for drop in [false, true] {
        let args: &[&str] = if drop { &["drop"] } else { &[] };
        let linux = lines(py(&bed, true, "ports", "own", args), "ports on Linux");
        let softoe = lines(py(&bed, false, "ports", "own", args), "ports on softoe");
        assert_eq!(
            softoe,
            linux,
            "softoe (left) and Linux (right) differ, {}",
            if drop { "as user 65534" } else { "as root" }
        );
        if drop {
            assert!(linux.contains("tcp 80 EACCES"), "{linux}");
        } else {
            assert!(linux.contains("tcp 80 bound"), "{linux}");
        }
    }
    // A program started as the user (not dropping later) too; the
    // system's python (a per-user install may be unreadable to others).
    let python = "/usr/bin/python3";
    if have("setpriv") && std::path::Path::new(python).exists() {
        let as_nobody = |linux: bool| {
            let mut c = if linux {
                on_linux(&bed, "setpriv")
            } else {
                on_softoe(&bed, "setpriv")
            };
            let own = if linux { LINUX_IP } else { ENGINE_IP }.to_string();
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .args([python, &script(), "ports", &own]);
            c
        };
        let linux = lines(as_nobody(true), "setpriv on Linux");
        let softoe = lines(as_nobody(false), "setpriv on softoe");
        assert_eq!(
            softoe, linux,
            "softoe (left) and Linux (right) differ, setpriv"
        );
        assert!(linux.contains("tcp 80 EACCES"), "{linux}");
    }
}

/// One case of the bind matrix on one side: root holds a listener on
/// `held` with `how`; a second program
/// listens on `joins` with the same options (user 65534 when
/// `other_user`). What the second one printed.
fn beside(
    bed: &Bed,
    linux: bool,
    port: u16,
    (held, joins): (&str, &str),
    how: &str,
    other_user: bool,
) -> String {
    let p = port.to_string();
    let mut holder = py(bed, linux, "hold", held, &[&p, how]);
    let mut h = Child(
        holder
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    BufReader::new(h.0.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first.trim(), "listening", "the holder ({held}, {how})");
    let mut args = vec![p.as_str(), how];
    if other_user {
        args.push("drop");
    }
    let out = lines(py(bed, linux, "join", joins, &args), "the joiner");
    drop(h);
    out.trim().to_string()
}

/// The bind matrix: a listener of root's on a specific address or the
/// wildcard, and a second program's listener beside it on either, as root
/// or as another user, with no option, `SO_REUSEADDR`, `SO_REUSEPORT` or
/// both: every case answers as Linux's does in the same run. Before,
/// another user's program bound the specific address beside root's
/// wildcard listener with no option at all and took its connections.
#[test]
fn the_bind_matrix_answers_as_on_linux() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let mut port = 9500;
    let mut differ = Vec::new();
    let mut table = String::new();
    for held in ["own", "any"] {
        for joins in ["own", "any"] {
            for how in ["-", "addr", "port", "addr+port"] {
                for drop in [false, true] {
                    port += 1;
                    let linux = beside(&bed, true, port, (held, joins), how, drop);
                    let softoe = beside(&bed, false, port, (held, joins), how, drop);
                    let case = format!(
                        "{held:>3} then {joins:>3}, {how:>9}, {}: Linux {linux}, softoe {softoe}\n",
                        if drop { "other user" } else { "same user " }
                    );
                    table.push_str(&case);
                    if linux != softoe {
                        differ.push(case);
                    }
                }
            }
        }
    }
    eprintln!("{table}");
    assert!(
        differ.is_empty(),
        "softoe and Linux differ:\n{}",
        differ.concat()
    );
}
