//! A program's life around its softoe sockets: signals during waits,
//! `fork` and `exit`, `exec`, and children that sandbox themselves — each
//! as a small reproduction of what broke a real server (PostgreSQL,
//! sshd), driven by Python on softoe against Linux's TCP.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

#[path = "../../softoe-engine/tests/common/mod.rs"]
mod common;
mod shim;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddrV4;
use std::process::Stdio;
use std::time::Duration;

use common::{ENGINE_IP, LINUX_IP};
use shim::*;

/// Runs a Python script on softoe and fails with its output unless it
/// exits 0 and prints `ok`.
fn python_ok(bed: &common::Bed, script: &str, secs: u64, what: &str) {
    let mut c = on_softoe(bed, "python3");
    c.args(["-c", script]);
    let o = run_for(c, secs, what);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.lines().any(|l| l == "ok"),
        "{what}: {}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A signal whose handler returns, arriving while a program waits in
/// `select`, `poll`, `epoll` or a socket timeout on a softoe socket, makes
/// the wait fail with `EINTR` — which Python (PEP 475) retries with the
/// time left — and never with `EAGAIN`. PostgreSQL's backends took that
/// `EAGAIN` for a broken `epoll_wait` and dropped their clients.
#[test]
fn a_signal_during_a_wait_is_eintr() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    // A Linux peer that accepts and stays silent.
    let l = bed
        .linux
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7441)).unwrap())
        .unwrap();
    let peer = bed
        .linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = Vec::new();
            let _ = s.read_to_end(&mut b);
        })
        .unwrap();
    let script = format!(
        "import socket,select,signal,time,sys\n\
         ticks=[0]\n\
         def tick(*a): ticks[0]+=1\n\
         signal.signal(signal.SIGALRM, tick)\n\
         signal.setitimer(signal.ITIMER_REAL, 0.1, 0.1)\n\
         s=socket.create_connection(('{LINUX_IP}',7441))\n\
         def waited(name, f):\n\
         \x20   t=time.monotonic(); n=ticks[0]\n\
         \x20   try: r=f()\n\
         \x20   except OSError as e: print(name, 'failed:', e); sys.exit(1)\n\
         \x20   dt=time.monotonic()-t\n\
         \x20   if r or dt<0.9 or ticks[0]-n<3: print(name, r, dt, ticks[0]-n); sys.exit(1)\n\
         waited('select', lambda: select.select([s],[],[],1.0)[0])\n\
         waited('poll', lambda: (lambda p: (p.register(s, select.POLLIN), p.poll(1000))[1])(select.poll()))\n\
         e=select.epoll(); e.register(s.fileno(), select.EPOLLIN)\n\
         waited('epoll', lambda: e.poll(1.0))\n\
         s.settimeout(1.0)\n\
         def timed():\n\
         \x20   try: s.recv(10); return 'data'\n\
         \x20   except socket.timeout: return None\n\
         waited('socket timeout', timed)\n\
         signal.setitimer(signal.ITIMER_REAL, 0)\n\
         s.close()\n\
         print('ok')\n"
    );
    python_ok(&bed, &script, 60, "waits under a 100 ms timer");
    peer.join().unwrap();
}

/// A forked child that exits through `exit()` (running its thread-local
/// destructors) without ever waiting on a softoe socket must not take the
/// parent's doorbell with it: the parent's next `select` on its listener
/// wakes when a peer connects, not seconds later.
#[test]
fn a_child_exit_leaves_the_parents_wakeups_alone() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let script = "import socket,select,os,sys,time\n\
         l=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('0.0.0.0',7442)); l.listen(8)\n\
         select.select([l],[],[],0.05)\n\
         pid=os.fork()\n\
         if pid==0: sys.exit(0)\n\
         os.waitpid(pid,0)\n\
         print('ready', flush=True)\n\
         t=time.monotonic()\n\
         r=select.select([l],[],[],30)[0]\n\
         print('woke', round(time.monotonic()-t, 3), flush=True)\n\
         if r: c,_=l.accept(); c.close()\n\
         print('ok' if r else 'timeout', flush=True)\n";
    let mut c = on_softoe(&bed, "python3");
    c.args(["-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = Child(c.spawn().unwrap());
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the program did not get going");
    std::thread::sleep(Duration::from_millis(500));
    let conn = bed
        .linux
        .run(|| std::net::TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 7442)))
        .unwrap()
        .unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    drop(conn);
    let woke: f64 = rest
        .lines()
        .find_map(|l| l.strip_prefix("woke "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no wake-up reported: {rest}"));
    // The peer connected 0.5 s after `ready`; a lost doorbell showed as
    // 15-30 s (the engine's slow fallback), so 5 s cannot be noise.
    assert!(woke < 5.0, "select woke {woke} s after the wait began");
    assert!(rest.lines().any(|l| l == "ok"), "{rest}");
    let _ = std::io::stdout().flush();
}
