//! `SO_REUSEPORT` across unrelated processes, as on Linux: two programs
//! on softoe listening on one address and port share the new connections
//! between them (a hash of the four-tuple picks one); a program without
//! the option, or of another user, is refused where Linux refuses it, and
//! its descriptor stays open and bound as Linux leaves it (haproxy's
//! reload died when it did not); and haproxy reloads (`-sf`) under load
//! without a failed request. The scripts are `programs/reuseport.py`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod shim;

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP, LINUX_IP};

fn script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs/reuseport.py")
        .to_string_lossy()
        .into_owned()
}

/// A running program whose output lines arrive as it prints them; its
/// standard input stays open until it is dropped.
struct Lines {
    child: Child,
    rx: mpsc::Receiver<String>,
    seen: Vec<String>,
    err: Option<std::thread::JoinHandle<String>>,
}

impl Lines {
    fn spawn(mut c: Command) -> Lines {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut errp = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = errp.read_to_string(&mut s);
            s
        });
        Lines {
            child: Child(child),
            rx,
            seen: Vec::new(),
            err: Some(err),
        }
    }

    /// Waits for a line starting with `prefix` and returns it.
    fn expect(&mut self, prefix: &str, secs: u64) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(_) => {
                    let _ = self.child.0.kill();
                    let err = self.err.take().map(|e| e.join().unwrap_or_default());
                    panic!(
                        "no line {prefix:?} within {secs} s; saw {:?}; stderr:\n{}",
                        self.seen,
                        err.unwrap_or_default()
                    )
                }
            }
        }
    }
}

/// `reuseport.py MODE ARGS…` on softoe (`linux` false: on the engine's
/// address) or on Linux's TCP in its namespace (on its address).
fn py(bed: &Bed, linux: bool, args: &[&str]) -> Command {
    let addr = if linux { LINUX_IP } else { ENGINE_IP }.to_string();
    let mut c = if linux {
        on_linux(bed, "python3")
    } else {
        on_softoe(bed, "python3")
    };
    c.arg(script()).arg(args[0]).arg(&addr).args(&args[1..]);
    c
}

/// The lines `join PORT how` prints beside a holder of PORT, on one side.
fn join_beside_a_holder(bed: &Bed, linux: bool, nobody: bool, port: u16, how: &str) -> String {
    let p = port.to_string();
    let mut holder = Lines::spawn(py(bed, linux, &["hold", &p]));
    holder.expect("listening", 20);
    let mut args = vec!["join", &p, how];
    if nobody {
        args.push("nobody");
    }
    let o = run_for(py(bed, linux, &args), 30, "the joining program");
    assert!(
        o.status.success(),
        "join ({}): {}",
        if linux { "Linux" } else { "softoe" },
        String::from_utf8_lossy(&o.stderr)
    );
    drop(holder);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs the joiner on Linux and on softoe and wants the same lines from
/// both; returns them.
fn same_as_linux(bed: &Bed, nobody: bool, port: u16, how: &str) -> String {
    let linux = join_beside_a_holder(bed, true, nobody, port, how);
    let softoe = join_beside_a_holder(bed, false, nobody, port, how);
    assert_eq!(
        softoe,
        linux,
        "softoe (left) and Linux (right) differ for a {how} joiner{}",
        if nobody { " of another user" } else { "" }
    );
    linux
}

/// Two programs that know nothing of each other (two `softoe run`s) listen
/// on the engine's address and one port with `SO_REUSEPORT`; a Linux
/// client makes 64 connections, one after another, each sending up to
/// 3.3 KB and checking the answer's hash. Each is answered, and both
/// programs answer some: the engine spreads new connections by a hash of
/// the four-tuple, as Linux does (with a uniform hash the chance that one
/// program gets none of 64 is 2 · 2⁻⁶⁴ ≈ 1e-19). `softoe stat` marks both
/// listeners as members of a reuseport group.
#[test]
fn two_unrelated_programs_share_a_port() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let mut a = Lines::spawn(py(&bed, false, &["serve", "9400", "A"]));
    assert_eq!(a.expect("listening", 20), "listening reuseport=1");
    let mut b = Lines::spawn(py(&bed, false, &["serve", "9400", "B"]));
    assert_eq!(b.expect("listening", 20), "listening reuseport=1");
    let snap = bed.snapshot().unwrap();
    let group: Vec<_> = snap
        .listeners
        .iter()
        .filter(|l| l.local.ends_with(":9400"))
        .collect();
    assert_eq!(group.len(), 2, "two listeners: {:?}", snap.listeners);
    assert!(
        group.iter().all(|l| l.reuseport),
        "both in a reuseport group: {group:?}"
    );
    let mut client = on_linux(&bed, "python3");
    client
        .arg(script())
        .args(["client", &ENGINE_IP.to_string(), "9400", "64"]);
    let o = run_for(client, 120, "the client");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.ends_with("done\n"),
        "the client failed:\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let names: Vec<&str> = out.lines().filter(|l| *l != "done").collect();
    assert_eq!(names.len(), 64, "{out}");
    let to_a = names.iter().filter(|n| **n == "A").count();
    let to_b = names.iter().filter(|n| **n == "B").count();
    eprintln!("64 connections: {to_a} to A, {to_b} to B");
    assert_eq!(to_a + to_b, 64, "answers from nobody else: {names:?}");
    assert!(to_a > 0 && to_b > 0, "both programs accept: {names:?}");
    drop((a, b));
}

/// A program that listens beside a holder of the port without
/// `SO_REUSEPORT` is refused with `EADDRINUSE` where Linux refuses it
/// (at `bind`), and its descriptor stays open and bound as on Linux: the
/// next `socket()` gets another number. haproxy's fd table went out of
/// step with the kernel's when it did not. With `SO_REUSEPORT` it joins,
/// on both.
#[test]
fn a_refused_listener_stays_open_as_on_linux() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let plain = same_as_linux(&bed, false, 9401, "plain");
    assert!(plain.contains("EADDRINUSE"), "{plain}");
    assert!(
        plain.contains("same number: False") && plain.contains("descriptor open: True"),
        "{plain}"
    );
    let joined = same_as_linux(&bed, false, 9402, "reuseport");
    assert!(
        joined.starts_with("bind: ok\nlisten: ok\n"),
        "with SO_REUSEPORT it joins: {joined}"
    );
}

/// A reuseport group is joinable only by the user whose program made it
/// (Linux compares the sockets' uids): another user's program, with
/// `SO_REUSEPORT` too, is refused as on Linux — also when it became that
/// user after the shim attached (as root), as servers drop privileges.
#[test]
fn another_users_program_cannot_join_a_group() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let other = same_as_linux(&bed, true, 9403, "reuseport");
    assert!(other.contains("EADDRINUSE"), "{other}");
}

/// haproxy's configuration: one frontend on `addr:port` that answers
/// every request itself with its process id (no backend to go wrong).
fn haproxy_conf(dir: &std::path::Path, addr: std::net::Ipv4Addr, port: u16) -> PathBuf {
    let conf = dir.join("haproxy.cfg");
    std::fs::write(
        &conf,
        format!(
            "global\n  nbthread 1\n\
             defaults\n  mode http\n  timeout connect 5s\n  timeout client 10s\n  \
             timeout server 10s\n\
             frontend fe\n  bind {addr}:{port}\n  \
             http-request return status 200 content-type text/plain lf-string \"pid %pid\"\n"
        ),
    )
    .unwrap();
    conf
}

/// Waits up to `secs` for `c` to exit; whether it did.
fn exits_within(c: &mut Child, secs: u64) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if c.0.try_wait().is_ok_and(|s| s.is_some()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// haproxy reloads twice (`haproxy -sf OLDPID`, no descriptor passing)
/// while a Linux client sends requests one after another, each on a new
/// connection: the new process binds the same address with
/// `SO_REUSEPORT` while the old one still listens, then tells it to stop;
/// the old one closes its listener and leaves. No request fails, and all
/// three processes answered some. Before, the new process got `bind`
/// success and `listen` `EADDRINUSE`, closed the descriptor and went on
/// using its number (then died on `fdtab[fd].owner != NULL`, or gave up).
#[test]
fn haproxy_reloads_under_load_without_a_failed_request() {
    if !have("haproxy") || !have("python3") {
        return;
    }
    let bed = bed();
    let dir = tempdir("haproxy-reload");
    let conf = haproxy_conf(&dir, ENGINE_IP, 9410);
    let start = |replaces: Option<&Child>| {
        let mut c = on_softoe(&bed, "haproxy");
        c.args(["-db", "-f", conf.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(old) = replaces {
            c.args(["-sf", &old.0.id().to_string()]);
        }
        Child(c.spawn().unwrap())
    };
    let mut first = start(None);
    wait_until_served(&bed, 9410);
    let mut client = on_linux(&bed, "python3");
    client
        .arg(script())
        .args(["http", &ENGINE_IP.to_string(), "9410", "6"]);
    let client = std::thread::spawn(move || run_for(client, 60, "the HTTP client"));
    std::thread::sleep(Duration::from_millis(1500));
    let mut second = start(Some(&first));
    assert!(
        exits_within(&mut first, 20),
        "the first haproxy did not leave"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let mut third = start(Some(&second));
    assert!(
        exits_within(&mut second, 20),
        "the second haproxy did not leave"
    );
    let o = client.join().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let alive = !exits_within(&mut third, 0);
    let err = |c: &mut Child| {
        let mut s = String::new();
        if let Some(mut e) = c.0.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    };
    let logs = format!("first:\n{}\nsecond:\n{}", err(&mut first), err(&mut second));
    eprintln!("{out}");
    assert!(alive, "the last haproxy runs on\n{logs}");
    let field = |name: &str| -> String {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let ok: usize = field("ok ").parse().unwrap_or(0);
    assert_eq!(
        field("failed "),
        "0",
        "requests failed across the reloads:\n{out}\n{logs}"
    );
    let pids: Vec<String> = field("pids ").split(' ').map(String::from).collect();
    let want: Vec<String> = [&first, &second, &third]
        .iter()
        .map(|c| c.0.id().to_string())
        .collect();
    assert_eq!(pids, want, "each haproxy answered, in turn: {out}");
    assert!(ok > 100, "{out}");
    drop(third);
}

/// Waits until an HTTP request to the engine's `port` from Linux is
/// answered (a server on softoe listens and serves).
fn wait_until_served(bed: &Bed, port: u16) {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = on_linux(bed, "python3");
        c.arg(script())
            .args(["http", &ENGINE_IP.to_string(), &port.to_string(), "0.01"]);
        let o = run_for(c, 20, "the probe");
        let out = String::from_utf8_lossy(&o.stdout);
        if out.contains("failed 0") && !out.contains("ok 0\n") {
            return;
        }
        assert!(Instant::now() < end, "nothing serves on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The listener's answers on one side to a pause and resume, the way
/// haproxy pauses (`connect` to `AF_UNSPEC`, or `shutdown(SHUT_RD)`) and
/// resumes (`listen`) while a reload's new process retries its `bind`,
/// each step followed by a connection attempt from Linux.
fn pause_and_resume(bed: &Bed, linux: bool, port: u16, pause: &str) -> Vec<String> {
    use std::io::Write;
    let p = port.to_string();
    let mut server = Lines::spawn(py(bed, linux, &["pause", &p]));
    server.expect("listening", 20);
    let mut stdin = server.child.0.stdin.take().unwrap();
    let at = if linux { LINUX_IP } else { ENGINE_IP }.to_string();
    let mut seen: Vec<String> = Vec::new();
    let probe = |seen: &mut Vec<String>| {
        let mut c = on_linux(bed, "python3");
        c.arg(script()).args(["probe", &at, &p]);
        let o = run_for(c, 20, "the probe");
        seen.push(format!(
            "probe {}",
            String::from_utf8_lossy(&o.stdout).trim()
        ));
    };
    for cmd in [
        "shut-wr", "accept", pause, "name", "listen", "name", "accept",
    ] {
        let paused = seen.last().is_some_and(|l| l.starts_with(pause));
        if cmd == "accept" || (cmd == "name" && paused) {
            probe(&mut seen);
        }
        writeln!(stdin, "{cmd}").unwrap();
        seen.push(server.expect(cmd, 20));
    }
    seen
}

/// A listener paused as haproxy pauses one stops listening (a connection
/// is refused) and stays bound; `listen` makes it listen again on the
/// same port — as on Linux, whose answers are compared line by line.
#[test]
fn a_paused_listener_stays_bound_and_listens_again() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    for (pause, port) in [("unspec", 9420), ("shut-rd", 9421)] {
        let linux = pause_and_resume(&bed, true, port, pause);
        let softoe = pause_and_resume(&bed, false, port, pause);
        assert_eq!(softoe, linux, "softoe (left) and Linux (right), {pause}");
        assert!(
            linux.contains(&"probe ECONNREFUSED".to_string())
                && linux.last().is_some_and(|l| l == "accept accepted"),
            "{linux:?}"
        );
    }
}
