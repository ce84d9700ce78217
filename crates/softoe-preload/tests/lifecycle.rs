//! A program's life around its softoe sockets: signals during waits,
//! `fork` and `exit`, `exec`, and children that sandbox themselves — each
//! as a small reproduction of what broke a real server (PostgreSQL,
//! sshd), driven by Python on softoe against Linux's TCP.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod shim;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddrV4;
use std::process::Stdio;
use std::time::Duration;

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP, LINUX_IP, sha256};

/// Runs a Python script on softoe and fails with its output unless it
/// exits 0 and prints `ok`.
fn python_ok(bed: &Bed, script: &str, secs: u64, what: &str) {
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

/// A Linux peer on `port` for one connection: it starts reading after
/// `delay`, reads to the end and returns how much came.
fn linux_sink(bed: &Bed, port: u16, delay: Duration) -> softoe_testbed::NsThread<usize> {
    let l = bed
        .linux
        .run(move || std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, port)).unwrap())
        .unwrap();
    bed.linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            std::thread::sleep(delay);
            let mut b = Vec::new();
            let _ = s.read_to_end(&mut b);
            b.len()
        })
        .unwrap()
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
    let peer = linux_sink(&bed, 7441, Duration::ZERO);
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

/// A Linux server on `port` for `n` connections, each: sends `greeting`,
/// reads to the end, answers the SHA-256 of what it read.
fn linux_hasher(
    bed: &Bed,
    port: u16,
    n: usize,
    greeting: &'static [u8],
) -> softoe_testbed::NsThread<Vec<usize>> {
    let l = bed
        .linux
        .run(move || std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, port)).unwrap())
        .unwrap();
    bed.linux
        .spawn(move || {
            let mut lens = Vec::new();
            for _ in 0..n {
                let (mut s, _) = l.accept().unwrap();
                s.write_all(greeting).unwrap();
                let mut b = Vec::new();
                s.read_to_end(&mut b).unwrap();
                s.write_all(sha256(&b).as_bytes()).unwrap();
                lens.push(b.len());
            }
            lens
        })
        .unwrap()
}

/// A connection survives `exec` without `fork` (as `socat EXEC:…,nofork`
/// hands one over): the new image reads the greeting the old one left
/// unread and goes on writing, and the peer's hash covers both images'
/// bytes in order. Before, the new image's shim took the descriptor for a
/// kernel socket.
#[test]
fn a_connection_survives_exec() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let server = linux_hasher(&bed, 7443, 1, b"hello from linux\n");
    let second = "import socket,sys,hashlib,os\n\
         fd=int(sys.argv[1])\n\
         s=socket.socket(fileno=fd)\n\
         g=b''\n\
         while not g.endswith(b'\\n'): g+=s.recv(100)\n\
         if g!=b'hello from linux\\n': print('greeting', g); sys.exit(1)\n\
         a=bytes(range(256))*4096\n\
         b=bytes(reversed(range(256)))*4096\n\
         s.sendall(b); s.shutdown(socket.SHUT_WR)\n\
         h=b''\n\
         while True:\n\
         \x20   x=s.recv(100)\n\
         \x20   if not x: break\n\
         \x20   h+=x\n\
         print('ok' if h.decode()==hashlib.sha256(a+b).hexdigest() else 'bad hash')\n";
    let first = format!(
        "import socket,os,sys\n\
         s=socket.create_connection(('{LINUX_IP}',7443))\n\
         s.sendall(bytes(range(256))*4096)\n\
         fd=s.detach(); os.set_inheritable(fd, True)\n\
         os.execv(sys.executable, [sys.executable, '-c', {second:?}, str(fd)])\n"
    );
    python_ok(&bed, &first, 60, "exec with a connection");
    assert_eq!(server.join().unwrap(), vec![2 << 20]);
}

/// inetd's way (and sshd's re-exec): a server on softoe accepts, forks, and
/// the child puts the connection on its standard input and output and
/// execs a program that knows nothing of sockets. Three connections from
/// Linux, each echoed back whole; then only the server's session remains.
#[test]
fn inetd_style_exec_serves_each_connection() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let handler = "import sys,hashlib\n\
         d=sys.stdin.buffer.read()\n\
         sys.stdout.buffer.write(hashlib.sha256(d).hexdigest().encode()); sys.stdout.flush()\n";
    let script = format!(
        "import socket,os,sys\n\
         l=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('0.0.0.0',7444)); l.listen(8)\n\
         print('ready', flush=True)\n\
         for _ in range(3):\n\
         \x20   c,_=l.accept()\n\
         \x20   pid=os.fork()\n\
         \x20   if pid==0:\n\
         \x20       os.dup2(c.fileno(),0); os.dup2(c.fileno(),1); c.close(); l.close()\n\
         \x20       os.execv(sys.executable, [sys.executable, '-c', {handler:?}])\n\
         \x20   c.close()\n\
         \x20   os.waitpid(pid,0)\n\
         print('ok', flush=True)\n"
    );
    let mut c = on_softoe(&bed, "python3");
    c.args(["-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = Child(c.spawn().unwrap());
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    for i in 0..3u8 {
        let data: Vec<u8> = (0..(3usize << 20))
            .map(|k| (k as u8).wrapping_mul(i + 3))
            .collect();
        let want = sha256(&data);
        let got = bed
            .linux
            .run(move || {
                let mut s =
                    std::net::TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 7444)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                s.write_all(&data).unwrap();
                s.shutdown(std::net::Shutdown::Write).unwrap();
                let mut h = String::new();
                s.read_to_string(&mut h).unwrap();
                h
            })
            .unwrap();
        assert_eq!(got, want, "connection {i}");
    }
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(rest.lines().any(|l| l == "ok"), "{rest}");
}

/// A forked child that chroots into an empty directory (where the engine's
/// socket cannot be reached) before it first uses the connection it
/// inherited — sshd's privilege-separated child does, then drops its user
/// and installs a seccomp filter. The shim takes the connection into the
/// child's session just before the chroot, so the child's reads and writes
/// work inside it.
#[test]
fn a_child_that_chroots_keeps_its_connection() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let server = linux_hasher(&bed, 7445, 1, b"greeting\n");
    let jail = tempdir("jail");
    let script = format!(
        "import socket,os,sys,hashlib,resource\n\
         s=socket.create_connection(('{LINUX_IP}',7445))\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   os.chroot({jail:?}); os.chdir('/')\n\
         \x20   n=len(os.listdir('/proc/self/fd')) if os.path.exists('/proc') else 64\n\
         \x20   resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n\
         \x20   g=b''\n\
         \x20   while not g.endswith(b'\\n'): g+=s.recv(100)\n\
         \x20   a=bytes(range(256))*8192\n\
         \x20   s.sendall(a); s.shutdown(socket.SHUT_WR)\n\
         \x20   h=b''\n\
         \x20   while True:\n\
         \x20       x=s.recv(100)\n\
         \x20       if not x: break\n\
         \x20       h+=x\n\
         \x20   os._exit(0 if g==b'greeting\\n' and h.decode()==hashlib.sha256(a).hexdigest() else 5)\n\
         s.close()\n\
         _,st=os.waitpid(pid,0)\n\
         print('ok' if st==0 else 'child failed %d' % st)\n",
        jail = jail.display().to_string()
    );
    python_ok(&bed, &script, 60, "a chrooted child");
    assert_eq!(server.join().unwrap(), vec![2 << 20]);
    let _ = std::fs::remove_dir_all(&jail);
}

/// With no engine at the socket a program was pointed to, its sockets
/// fail with `ENETDOWN` and one line says why — it never runs on Linux's
/// TCP unless told to (`SOFTOE_FALLBACK=kernel`). Before, it silently did.
#[test]
fn no_engine_means_a_clear_failure_not_linux() {
    if !have("python3") {
        return;
    }
    let dir = tempdir("noengine");
    // A socket file nobody listens on: an engine that died.
    let path = dir.join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let script = "import socket,errno\n\
         s=socket.socket()\n\
         try:\n\
         \x20   s.bind(('0.0.0.0',0)); s.listen(1); print('kernel', s.getsockname()[1])\n\
         except OSError as e: print('errno', e.errno)\n";
    let run = |fallback: bool| {
        let mut c = std::process::Command::new("python3");
        c.args(["-c", script])
            .env("LD_PRELOAD", shim_path())
            .env("SOFTOE_SOCKET", &path)
            .env_remove("RUST_LOG");
        if fallback {
            c.env("SOFTOE_FALLBACK", "kernel");
        }
        run_for(c, 30, "python without an engine")
    };
    let o = run(false);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(out.trim(), format!("errno {}", libc::ENETDOWN), "{err}");
    assert_eq!(err.lines().count(), 1, "one line says why: {err}");
    assert!(err.contains("SOFTOE_FALLBACK=kernel"), "{err}");
    let o = run(true);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("kernel "),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// socat on softoe hands each connection to a program it execs on the
/// connection itself (`EXEC:…,nofork`, after a fork per connection): the
/// program reads and writes its standard input and output, which are the
/// softoe socket. Two connections from Linux, each answered with the hash
/// of what it sent. (The program reads with `read`, as Python's `os.read`
/// does; glibc's stdio reads inside libc, where no hook sees it.)
#[test]
fn socat_exec_nofork_serves_connections() {
    if !have("socat") || !have("python3") {
        return;
    }
    let bed = bed();
    let hasher = "python3 -c \"import os,hashlib\nh=hashlib.sha256()\nwhile True:\n b=os.read(0,65536)\n if not b: break\n h.update(b)\nos.write(1,h.hexdigest().encode())\"";
    let mut c = on_softoe(&bed, "socat");
    c.args(["TCP-LISTEN:7446,reuseaddr,fork"])
        .arg(format!("EXEC:'{hasher}',nofork"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let _socat = Child(c.spawn().unwrap());
    for i in 0..2u8 {
        let data: Vec<u8> = (0..(2usize << 20)).map(|k| (k as u8) ^ i).collect();
        let want = sha256(&data);
        let got = bed
            .linux
            .run(move || {
                let end = std::time::Instant::now() + Duration::from_secs(10);
                let mut s = loop {
                    match std::net::TcpStream::connect(SocketAddrV4::new(ENGINE_IP, 7446)) {
                        Ok(s) => break s,
                        Err(e) if std::time::Instant::now() > end => panic!("connect: {e}"),
                        Err(_) => std::thread::sleep(Duration::from_millis(100)),
                    }
                };
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                s.write_all(&data).unwrap();
                s.shutdown(std::net::Shutdown::Write).unwrap();
                let mut h = String::new();
                s.read_to_string(&mut h).unwrap();
                h
            })
            .unwrap();
        assert_eq!(got.trim(), want, "connection {i}");
    }
}

/// A thread blocked in `accept` holds nothing another thread needs: the
/// listener still polls at once, and a forked child execs a program that
/// finds it a listener on the same port. Before, both waited for ever on
/// the lock the accepting thread held (in the child, a lock copied held).
#[test]
fn a_blocked_accept_blocks_neither_poll_nor_exec() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let second = "import socket,sys\n\
         l=socket.socket(fileno=int(sys.argv[1]))\n\
         ok=l.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)==1 and l.getsockname()[1]==7447\n\
         print('ok' if ok else 'not a listener', flush=True)\n";
    let script = format!(
        "import socket,os,sys,threading,select,time\n\
         l=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('0.0.0.0',7447)); l.listen(8)\n\
         got=[]\n\
         t=threading.Thread(target=lambda: got.append(l.accept()), daemon=True); t.start()\n\
         time.sleep(0.2)\n\
         t0=time.monotonic(); select.select([l],[],[],0.2); dt=time.monotonic()-t0\n\
         if dt>2: print('select waited', dt); sys.exit(1)\n\
         os.set_inheritable(l.fileno(), True)\n\
         pid=os.fork()\n\
         if pid==0: os.execv(sys.executable, [sys.executable, '-c', {second:?}, str(l.fileno())])\n\
         _,st=os.waitpid(pid,0)\n\
         sys.exit(st)\n"
    );
    python_ok(&bed, &script, 30, "accept, poll and exec");
}

/// A thread blocked in a write (the peer reads nothing, the send ring is
/// full) holds nothing `poll` needs: another thread's `select` on the same
/// connection answers at once. Before, it waited on the writer's lock.
#[test]
fn a_blocked_write_does_not_block_poll() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    // A Linux peer that starts reading only after 2 s: the writer blocks.
    let peer = linux_sink(&bed, 7448, Duration::from_secs(2));
    let script = format!(
        "import socket,threading,select,time,sys\n\
         s=socket.create_connection(('{LINUX_IP}',7448))\n\
         t=threading.Thread(target=lambda: s.sendall(b'x'*(64<<20)), daemon=True); t.start()\n\
         time.sleep(0.5)\n\
         t0=time.monotonic(); select.select([s],[s],[],0.2); dt=time.monotonic()-t0\n\
         if dt>1: print('select waited', dt); sys.exit(1)\n\
         t.join(); s.close(); print('ok')\n"
    );
    python_ok(&bed, &script, 60, "select beside a blocked write");
    assert_eq!(peer.join().unwrap(), 64 << 20);
}

/// A C program on softoe that hands its connection on with each of
/// `execl`, `execlp` and `execle` (glibc builds the argv and calls execve
/// inside libc, where no hook sees it; the shim has its own): the program
/// it execs reads the greeting and answers on the same connection.
#[test]
fn the_list_forms_of_exec_carry_connections() {
    if !have("cc") || !have("python3") {
        return;
    }
    let bed = bed();
    let dir = tempdir("execl");
    let src = dir.join("handoff.c");
    std::fs::write(
        &src,
        r#"#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) { perror("connect"); return 2; }
    char fd[16];
    snprintf(fd, sizeof fd, "%d", s);
    const char *prog = "import socket,sys\n"
        "s=socket.socket(fileno=int(sys.argv[1]))\n"
        "g=s.recv(100)\n"
        "s.sendall(b'got '+g+b' via '+sys.argv[2].encode()); s.close()\n";
    if (!strcmp(argv[3], "execl")) execl("/usr/bin/python3", "python3", "-c", prog, fd, argv[3], (char *)0);
    if (!strcmp(argv[3], "execlp")) execlp("python3", "python3", "-c", prog, fd, argv[3], (char *)0);
    if (!strcmp(argv[3], "execle")) execle("/usr/bin/python3", "python3", "-c", prog, fd, argv[3], (char *)0, environ);
    perror("exec");
    return 3;
}
"#,
    )
    .unwrap();
    let bin = dir.join("handoff");
    let o = std::process::Command::new("cc")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let forms = ["execl", "execlp", "execle"];
    let l = bed
        .linux
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7449)).unwrap())
        .unwrap();
    let peer = bed
        .linux
        .spawn(move || {
            let mut got = Vec::new();
            for _ in 0..3 {
                let (mut s, _) = l.accept().unwrap();
                s.write_all(b"hello").unwrap();
                let mut b = String::new();
                s.read_to_string(&mut b).unwrap();
                got.push(b);
            }
            got
        })
        .unwrap();
    for f in forms {
        let mut c = on_softoe(&bed, bin.to_str().unwrap());
        c.args([&LINUX_IP.to_string(), "7449", f]);
        let o = run_for(c, 30, f);
        assert!(
            o.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let got = peer.join().unwrap();
    assert_eq!(got, forms.map(|f| format!("got hello via {f}")).to_vec());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `softoe stat` shows the user a program runs as now: a server that
/// drops privileges after it attached (as sshd's child and PostgreSQL's
/// workers do) shows its new uid, not 0; its listener shows too.
#[test]
fn stat_shows_the_uid_a_program_runs_as_now() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let script = "import socket,os,time\n\
         l=socket.socket(); l.bind(('0.0.0.0',7450)); l.listen(8)\n\
         os.setresgid(65534,65534,65534); os.setresuid(65534,65534,65534)\n\
         print('dropped', flush=True)\n\
         time.sleep(30)\n";
    let mut c = on_softoe(&bed, "python3");
    c.args(["-c", script]).stdout(Stdio::piped());
    let mut child = Child(c.spawn().unwrap());
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "dropped");
    let snap = bed.snapshot().unwrap();
    let s = snap
        .sessions
        .iter()
        .find(|s| s.pid == child.0.id() as i32)
        .unwrap_or_else(|| panic!("no session for the program: {:?}", snap.sessions));
    assert_eq!(s.uid, 65534, "the uid after setresuid");
    assert!(
        snap.listeners.iter().any(|l| l.local.ends_with(":7450")),
        "the listener shows: {:?}",
        snap.listeners
    );
}

/// A server that drops its user and then forks per task keeps its
/// connections across each fork: dropping a user readies the sockets (the
/// engine's socket may not be reachable as the new user) but is no
/// seccomp sandbox, so the shim still prepares connections for `fork`.
#[test]
fn a_program_that_drops_its_user_then_forks_keeps_its_connection() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let server = linux_hasher(&bed, 7451, 1, b"hi\n");
    let script = format!(
        "import socket,os,hashlib\n\
         s=socket.create_connection(('{LINUX_IP}',7451))\n\
         os.setresgid(65534,65534,65534); os.setresuid(65534,65534,65534)\n\
         a=bytes(range(256))*4096\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   s.sendall(a); s.shutdown(socket.SHUT_WR)\n\
         \x20   h=b''\n\
         \x20   while True:\n\
         \x20       x=s.recv(100)\n\
         \x20       if not x: break\n\
         \x20       h+=x\n\
         \x20   os._exit(0 if h.endswith(hashlib.sha256(a).hexdigest().encode()) else 4)\n\
         s.close()\n\
         _,st=os.waitpid(pid,0)\n\
         print('ok' if st==0 else 'child %d' % st)\n"
    );
    python_ok(&bed, &script, 60, "setuid, then fork");
    assert_eq!(server.join().unwrap(), vec![1 << 20]);
}
