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

/// The privilege-separation chain, as inetd and sshd run it: a root
/// program accepts two connections, forks a child that drops to user 65534
/// and execs a program given one of them (as descriptor 0). That program
/// carries no authority in its environment (one record, of its one
/// connection, with no credential), and an unrelated process of the same
/// user, started with an environment forged from the program's (its
/// records copied, and the same records naming descriptors of its own:
/// TCP sockets and socket pairs), reaches no connection; both connections
/// carry exactly what their two ends sent. Before, each exec'd image's
/// environment held its session's secret, and any process that read it
/// could adopt the session's other connections.
#[test]
fn a_dropped_child_reaches_only_the_connection_it_was_given() {
    use std::os::unix::process::CommandExt;
    let python = "/usr/bin/python3";
    if !have("setpriv") || !std::path::Path::new(python).exists() {
        return;
    }
    let bed = bed();
    let dir = tempdir("chain");
    let _ = std::fs::remove_file(dir.join("child.pid"));
    let _ = std::fs::remove_file(dir.join("stranger.done"));
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let ip = ENGINE_IP.to_string();
    let mut root = on_softoe(&bed, python);
    root.args([&script(), "chain", &ip, "9600", &d]);
    let mut root = Child(
        root.stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let mut out = BufReader::new(root.0.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(first.trim(), "listening");
    let mut client = on_linux(&bed, "python3");
    client.args([&script(), "client", &ip, "9600"]);
    let mut client = Child(client.stdout(Stdio::piped()).spawn().unwrap());
    let t0 = std::time::Instant::now();
    let pid = loop {
        if let Ok(p) = std::fs::read_to_string(dir.join("child.pid")) {
            break p;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "the child never got its connection"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // The stranger's environment: the child's, its records copied and
    // made to name the stranger's own descriptors 3–6.
    let environ = std::fs::read(format!("/proc/{}/environ", pid.trim())).unwrap();
    let vars: Vec<(String, String)> = environ
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect();
    let records: Vec<String> = vars
        .iter()
        .filter(|(k, _)| k == "SOFTOE_INHERIT")
        .flat_map(|(_, v)| v.split(';').map(str::to_string).collect::<Vec<_>>())
        .filter(|r| !r.is_empty())
        .collect();
    assert_eq!(records.len(), 1, "the child's records: {records:?}");
    let tcp = || {
        // SAFETY: plain socket creation; the descriptor is owned below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        assert!(fd >= 0);
        // SAFETY: a new descriptor nobody else owns.
        unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
    };
    let (p1, _k1) = std::os::unix::net::UnixStream::pair().unwrap();
    let (p2, _k2) = std::os::unix::net::UnixStream::pair().unwrap();
    let decoys: Vec<std::os::fd::OwnedFd> = vec![tcp(), tcp(), p1.into(), p2.into()];
    let mut forged = records.clone();
    for fd in &decoys {
        let st = std::fs::metadata(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            fd.as_raw_fd()
        }))
        .unwrap();
        let (dev, ino) = (
            std::os::unix::fs::MetadataExt::dev(&st),
            std::os::unix::fs::MetadataExt::ino(&st),
        );
        for r in &records {
            let mut f: Vec<String> = r.split(',').map(str::to_string).collect();
            if f.len() >= 3 {
                f[1] = dev.to_string();
                f[2] = ino.to_string();
                forged.push(f.join(","));
            }
        }
    }
    let mut stranger = Command::new(python);
    stranger
        .args([&script(), "probe", "-", "3", "4", "5", "6"])
        .env_clear()
        .envs(vars.iter().filter(|(k, _)| k != "SOFTOE_INHERIT").cloned())
        .env("SOFTOE_INHERIT", forged.join(";"))
        .uid(65534)
        .gid(65534);
    let raw: Vec<i32> = decoys
        .iter()
        .map(|f| {
            use std::os::fd::AsRawFd;
            f.as_raw_fd()
        })
        .collect();
    // SAFETY: dup2 is async-signal-safe; the descriptors are live in the
    // parent until the child has started.
    unsafe {
        stranger.pre_exec(move || {
            for (i, &fd) in raw.iter().enumerate() {
                // Above the targets first, so no dup2 overwrites a source.
                let hi = libc::fcntl(fd, libc::F_DUPFD, 100);
                if hi < 0 || libc::dup2(hi, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let o = run_for(guarded(stranger), 30, "the stranger");
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && said.trim() == "reached 0",
        "the stranger: {said} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::write(dir.join("stranger.done"), b"").unwrap();
    let mut o = String::new();
    std::io::Read::read_to_string(&mut client.0.stdout.take().unwrap(), &mut o).unwrap();
    assert_eq!(
        o.trim(),
        r"client b'you-are-given\n' b'given-ok\n' b'secret-ok\n' then b'' b''",
        "what Linux's client got"
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(
        rest.trim(),
        "child read b'to-given\\n'; records [5]\nroot read b'to-secret\\n'; child exit 0",
        "what the root program and its child got"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
