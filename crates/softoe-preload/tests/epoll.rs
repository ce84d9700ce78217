//! `epoll` over many softoe sockets: a set holding a thousand idle
//! connections and one that becomes ready must report that one, at once,
//! as its mode says (level-triggered again at every wait, edge-triggered
//! once, one-shot once until re-armed), with a kernel descriptor in the
//! same set, and several sets sharing the sockets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod shim;

use shim::*;
use softoe_engine::testing::{Bed, LINUX_IP};

const MANY_C: &str = include_str!("epoll/many.c");

/// Held by the tests whose verdict rests on timing (the order bytes 2 ms
/// apart arrive in) and by the heavy one (a thousand connections), so that
/// they do not run beside each other: a waiter the scheduler holds back
/// past the first byte sees them all at once, and that order is another.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An echo server on Linux's side for many connections at once.
const ECHO: &str = r#"
import resource, selectors, socket, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen(4096)
l.setblocking(False)
sel = selectors.DefaultSelector()
sel.register(l, selectors.EVENT_READ)
print("ready", flush=True)
while True:
    for k, _ in sel.select():
        s = k.fileobj
        if s is l:
            c, _ = l.accept()
            c.setblocking(False)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sel.register(c, selectors.EVENT_READ)
            continue
        try:
            d = s.recv(4096)
        except BlockingIOError:
            continue
        if not d:
            sel.unregister(s)
            s.close()
            continue
        s.sendall(d)
"#;

fn many_program(dir: &Path) -> PathBuf {
    let src = dir.join("many.c");
    std::fs::write(&src, MANY_C).unwrap();
    let exe = dir.join("many");
    let st = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    exe
}

/// Runs `many` with `n` sockets against an echo server on Linux; its
/// output lines.
fn run_many(bed: &Bed, exe: &Path, port: u16, n: usize, rounds: usize, calls: usize) -> String {
    let mut echo = on_linux(bed, "python3");
    echo.arg("-c")
        .arg(ECHO)
        .args([LINUX_IP.to_string(), port.to_string()])
        .stdout(Stdio::null());
    let _echo = Child(echo.spawn().unwrap());
    wait_listening(bed, port);
    let mut c = on_softoe(bed, exe.to_str().unwrap());
    c.args([
        LINUX_IP.to_string(),
        port.to_string(),
        n.to_string(),
        rounds.to_string(),
        calls.to_string(),
    ])
    // Small rings: a thousand connections fit the data area.
    .env("SOFTOE_RX_KB", "16")
    .env("SOFTOE_TX_KB", "16");
    let o = run_for(c, 120, "many");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success() && out.lines().any(|l| l == "ok"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A thousand connections in three epoll sets (level-triggered with a
/// pipe beside them, edge-triggered, one-shot); each round a second
/// thread makes one of them readable (or the pipe, or both) while the
/// main thread sleeps in `epoll_wait`. The one socket is reported, and
/// nothing else: again at every wait while unread in the level-triggered
/// set, once in the edge-triggered one, once per arming in the one-shot
/// one. A wait that missed the change (looking only where it looked
/// before) fails here.
#[test]
fn epoll_reports_the_one_ready_socket_among_many() {
    if !have("python3") || !have("cc") {
        return;
    }
    let _alone = alone();
    let bed = bed();
    let dir = tempdir("epoll-many");
    let exe = many_program(&dir);
    let out = run_many(&bed, &exe, 7401, 1000, 48, 0);
    eprintln!("{out}");
}

/// What a wait costs with many idle sockets and one ready (not a
/// benchmark: figures for the design notes). `SOFTOE_EPOLL_N` sockets
/// (default 1000; at most the session's 4096 slots).
#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn epoll_wait_cost_with_many_idle_sockets() {
    if !have("python3") || !have("cc") {
        return;
    }
    let n = std::env::var("SOFTOE_EPOLL_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let _alone = alone();
    let bed = bed();
    let dir = tempdir("epoll-cost");
    let exe = many_program(&dir);
    let out = run_many(&bed, &exe, 7402, n, 200, 20_000);
    eprintln!("{out}");
}

const READY_ORDER: &str = include_str!("programs/ready_order.py");

/// Runs the ready-order waiter (on softoe, or on Linux) against its driver
/// on Linux: `k` connections made readable one after another, `gap_ms`
/// apart, in an order that changes every round; the rounds in which epoll
/// reported them in another order.
fn ready_order(bed: &Bed, softoe: bool, port: u16, k: usize, mode: &str, max: usize) -> usize {
    ready_order_mixed(bed, softoe, port, (k, 0), mode, max, "asleep").0
}

/// [`ready_order`] with `k.1` kernel connections (on a Unix socket) beside
/// the `k.0` softoe ones, the first wait of each round `start`
/// ("asleep": before the first byte is sent; "busy": after every byte
/// arrived); also the order reported in each round.
fn ready_order_mixed(
    bed: &Bed,
    softoe: bool,
    port: u16,
    k: (usize, usize),
    mode: &str,
    max: usize,
    start: &str,
) -> (usize, Vec<String>) {
    const ROUNDS: usize = 20;
    let gap = "2";
    let upath = tempdir("ready-order").join("kernel.sock");
    let upath = upath.to_string_lossy().to_string();
    let args = |role: &str| {
        vec![
            "-c".to_string(),
            READY_ORDER.to_string(),
            role.to_string(),
            LINUX_IP.to_string(),
            port.to_string(),
            k.0.to_string(),
            ROUNDS.to_string(),
            gap.to_string(),
        ]
    };
    let extra = [k.1.to_string(), upath.clone()];
    let mut d = on_linux(bed, "python3");
    d.args(args("driver")).args(&extra).stdout(Stdio::null());
    let _driver = Child(d.spawn().unwrap());
    wait_listening(bed, port);
    let mut w = if softoe {
        on_softoe(bed, "python3")
    } else {
        on_linux(bed, "python3")
    };
    w.args(args("waiter"))
        .args([mode.to_string(), max.to_string()])
        .args(&extra)
        .arg(start);
    let o = run_for(w, 60, "the ready-order waiter");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}\n{err}");
    let wrong = out
        .lines()
        .find_map(|l| l.strip_prefix("wrong "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no verdict: {out}\n{err}"));
    if wrong > 0 {
        eprintln!(
            "{} {mode} maxevents {max}, {k:?} connections, {start}:\n{err}",
            if softoe { "softoe" } else { "Linux" }
        );
    }
    let orders = out
        .lines()
        .filter(|l| l.starts_with("round "))
        .map(str::to_string)
        .collect();
    (wrong, orders)
}

/// Connections that become readable one after another are reported in
/// that order, as Linux's first-in, first-out ready list reports them —
/// not by socket id (the older connection first, whatever happened
/// first, which a widely used server's own test suite caught): two and
/// eight connections, level- and edge-triggered, `maxevents` 1 (each wait
/// one socket, the rest left in order for the next) and more, with an
/// idle pipe in the same set. The same program on Linux, in the
/// same test, is the reference.
#[test]
fn epoll_reports_sockets_in_the_order_they_became_ready() {
    if !have("python3") {
        return;
    }
    let _alone = alone();
    let bed = bed();
    // Not eight level-triggered ones a wait at a time: Linux itself
    // reorders those now and then (an item re-queued at the end of its
    // scan lands behind ones that arrived during it), 2 rounds in 60 here.
    let cases = [
        (2, "lt", 8),
        (2, "et", 1),
        (8, "lt", 8),
        (8, "et", 1),
        (8, "et", 3),
    ];
    let mut port = 7420;
    for (k, mode, max) in cases {
        port += 1;
        let linux = ready_order(&bed, false, port, k, mode, max);
        port += 1;
        let softoe = ready_order(&bed, true, port, k, mode, max);
        assert_eq!(
            (softoe, linux),
            (0, 0),
            "rounds reported out of order (softoe, Linux): {k} connections, {mode}, \
             maxevents {max}"
        );
    }
}

const EXCLUSIVE: &str = include_str!("programs/exclusive.py");

/// Runs the `EPOLLEXCLUSIVE` program (on softoe, or on Linux) against its
/// driver on Linux; its output.
fn exclusive(bed: &Bed, softoe: bool, port: u16) -> String {
    let args = |role: &str| {
        vec![
            "-c".to_string(),
            EXCLUSIVE.to_string(),
            role.to_string(),
            LINUX_IP.to_string(),
            port.to_string(),
        ]
    };
    let mut d = on_linux(bed, "python3");
    d.args(args("driver")).stdout(Stdio::null());
    let _driver = Child(d.spawn().unwrap());
    wait_listening(bed, port);
    let mut w = if softoe {
        on_softoe(bed, "python3")
    } else {
        on_linux(bed, "python3")
    };
    w.args(args("waiter"));
    let o = run_for(w, 30, "the EPOLLEXCLUSIVE program");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `EPOLLEXCLUSIVE` on a softoe connection is taken as Linux takes it:
/// on `EPOLL_CTL_ADD` only and only with the events it allows (`EINVAL`
/// otherwise, before `EEXIST` or `ENOENT`), an exclusive registration is
/// never modified, and of two sets waiting exclusively for the same
/// connection at least one reports its data. The same program on Linux is
/// the reference.
#[test]
fn epoll_exclusive_is_taken_as_linux_takes_it() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let linux = exclusive(&bed, false, 7451);
    let softoe = exclusive(&bed, true, 7452);
    assert!(linux.lines().any(|l| l == "woken"), "Linux: {linux}");
    assert_eq!(softoe, linux, "softoe (left) and Linux (right) differ");
}

const READY_SET: &str = include_str!("programs/ready_set.py");

/// Runs the `poll`/`select` program (on softoe, or on Linux) with `k`
/// connections against its driver on Linux; its output and the rounds it
/// found wrong.
fn ready_set(bed: &Bed, softoe: bool, port: u16, k: usize) -> (String, usize) {
    const ROUNDS: usize = 12;
    let args = |role: &str| {
        vec![
            "-c".to_string(),
            READY_SET.to_string(),
            role.to_string(),
            LINUX_IP.to_string(),
            port.to_string(),
            k.to_string(),
            ROUNDS.to_string(),
        ]
    };
    let mut d = on_linux(bed, "python3");
    d.args(args("driver")).stdout(Stdio::null());
    let _driver = Child(d.spawn().unwrap());
    wait_listening(bed, port);
    let mut w = if softoe {
        on_softoe(bed, "python3")
    } else {
        on_linux(bed, "python3")
    };
    w.args(args("waiter"));
    let o = run_for(w, 60, "the poll/select program");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}\n{err}");
    let wrong = out
        .lines()
        .find_map(|l| l.strip_prefix("wrong "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no verdict: {out}\n{err}"));
    (out, wrong)
}

/// `poll` and `select` report what is ready, every connection that was
/// sent a byte (in an order unlike their descriptors') and the pipe beside
/// them when written, in the order of the descriptors asked about, as on
/// Linux: readiness order is epoll's alone. The same program on Linux, in
/// the same test, is the reference.
#[test]
fn poll_and_select_report_what_is_ready_by_descriptor() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let (linux, lw) = ready_set(&bed, false, 7461, 6);
    let (softoe, sw) = ready_set(&bed, true, 7462, 6);
    assert_eq!((sw, lw), (0, 0), "wrong rounds (softoe, Linux)");
    assert_eq!(softoe, linux, "softoe (left) and Linux (right) differ");
}

/// How far softoe's order of sockets and kernel descriptors in the same
/// set is from Linux's (not a test: the figures for the design notes;
/// ordering them against each other is not done). Connections on softoe
/// and on a Unix socket (the kernel's) become readable one after another;
/// the rounds of 20 reported out of order, on Linux and on softoe.
#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn epoll_order_of_sockets_and_kernel_descriptors_together() {
    if !have("python3") {
        return;
    }
    let _alone = alone();
    let bed = bed();
    let cases = [
        ((1, 1), "et", 8, "asleep"),
        ((1, 1), "et", 8, "busy"),
        ((1, 1), "lt", 8, "asleep"),
        ((4, 4), "et", 8, "asleep"),
        ((4, 4), "et", 8, "busy"),
        ((4, 4), "et", 1, "busy"),
        ((4, 4), "lt", 8, "asleep"),
        ((4, 0), "et", 8, "busy"),
        ((4, 0), "lt", 8, "busy"),
        ((4, 4), "lt", 8, "busy"),
    ];
    let mut port = 7470;
    for (k, mode, max, start) in cases {
        port += 1;
        let linux = ready_order_mixed(&bed, false, port, k, mode, max, start).0;
        port += 1;
        let softoe = ready_order_mixed(&bed, true, port, k, mode, max, start).0;
        println!(
            "{k:?} connections (softoe, kernel), {mode}, maxevents {max}, {start}: \
             wrong in {softoe} of 20 rounds on softoe, {linux} on Linux"
        );
    }
}

/// Connections registered while idle that become readable one after
/// another before the program's first wait (it was busy) come out of that
/// wait in the order they became ready, as on Linux — not in the order the
/// wait happened to index them (registered since the last wait, they were
/// put on the ready list by a shuffled list of the set's new
/// registrations, ahead of any stamp). Level-triggered, each later round
/// reports them where Linux's ready list left them (a reported socket is
/// queued again at its back and keeps that place when it becomes ready
/// again before the next wait): compared round by round with Linux's.
#[test]
fn epoll_orders_sockets_ready_before_the_first_wait() {
    if !have("python3") {
        return;
    }
    let _alone = alone();
    let bed = bed();
    let mut port = 7440;
    for (k, mode, max) in [(8, "et", 8), (8, "et", 1), (2, "et", 1)] {
        port += 1;
        let (linux, _) = ready_order_mixed(&bed, false, port, (k, 0), mode, max, "busy");
        port += 1;
        let (softoe, _) = ready_order_mixed(&bed, true, port, (k, 0), mode, max, "busy");
        assert_eq!(
            (softoe, linux),
            (0, 0),
            "rounds reported out of order (softoe, Linux): {k} connections, {mode}, \
             maxevents {max}, busy"
        );
    }
    port += 1;
    let (_, linux) = ready_order_mixed(&bed, false, port, (4, 0), "lt", 8, "busy");
    port += 1;
    let (_, softoe) = ready_order_mixed(&bed, true, port, (4, 0), "lt", 8, "busy");
    assert_eq!(
        softoe, linux,
        "level-triggered, busy: softoe (left), Linux (right)"
    );
}
