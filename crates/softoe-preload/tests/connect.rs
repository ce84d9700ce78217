//! `connect` as Linux does it, in the corners: a non-blocking connect
//! that nothing answers is not writable, and a signal interrupts a
//! blocking one, whose attempt goes on in the background.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod shim;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shim::*;
use softoe_engine::testing::{Bed, LINUX_IP};

/// An address on the engine's subnet that nobody has: a SYN to it is
/// never answered (its ARP request neither).
const NOBODY: &str = "10.7.0.99";

fn python(bed: &Bed, script: &str) -> Command {
    let mut c = on_softoe(bed, "python3");
    c.args(["-c", script]);
    c
}

fn output_ok(c: Command, what: &str) -> String {
    let o = run_for(c, 60, what);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what}: {}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A non-blocking connect to a host that never answers, polled for
/// writability with a 1 s timeout, reports nothing — in each of 20 fresh
/// processes (`poll` said `POLLOUT` in about half of them: the engine
/// published a new socket as writable before it read the `CONNECT`, and
/// the program's first look came in between), and `select` and `epoll`
/// agree.
#[test]
fn a_connect_nothing_answers_is_not_writable() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let script = format!(
        "import socket,select,errno,sys\n\
         how=sys.argv[1]\n\
         s=socket.socket(); s.setblocking(False)\n\
         e=s.connect_ex(('{NOBODY}',80))\n\
         if e!=errno.EINPROGRESS: print('connect', e); sys.exit(1)\n\
         if how=='poll':\n\
         \x20   p=select.poll(); p.register(s, select.POLLOUT); got=p.poll(1000)\n\
         elif how=='select':\n\
         \x20   got=select.select([], [s], [s], 1.0)[1]\n\
         else:\n\
         \x20   ep=select.epoll(); ep.register(s.fileno(), select.EPOLLOUT); got=ep.poll(1.0)\n\
         print(how, got, s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR))\n"
    );
    let mut said = Vec::new();
    for i in 0..20 {
        let how = ["poll", "poll", "select", "poll", "epoll"][i % 5];
        let mut c = python(&bed, &script);
        c.arg(how);
        let out = output_ok(c, "a connect nobody answers");
        said.push(out.trim().to_string());
    }
    let writable: Vec<&String> = said.iter().filter(|l| !l.ends_with(" [] 0")).collect();
    assert!(
        writable.is_empty(),
        "writable (or failed) while connecting: {writable:?} of {said:?}"
    );
}

const INTR_C: &str = include_str!("connect/intr.c");

fn intr_program(dir: &Path) -> PathBuf {
    let src = dir.join("intr.c");
    std::fs::write(&src, INTR_C).unwrap();
    let exe = dir.join("intr");
    let st = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    exe
}

/// A listener in the Linux namespace whose accept queue is full (a
/// backlog of 0 and one connection, `filler`, not yet accepted): Linux
/// drops the SYNs that come, so a connect to it waits until
/// [`Full::make_room`].
struct Full {
    l: TcpListener,
    _filler: TcpStream,
}

impl Full {
    fn new(bed: &Bed, port: u16) -> Full {
        bed.linux
            .run(move || {
                // SAFETY: plain socket calls on a descriptor made here; the
                // listener takes ownership of it.
                let l = unsafe {
                    let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
                    assert!(fd >= 0);
                    let one: libc::c_int = 1;
                    libc::setsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_REUSEADDR,
                        (&raw const one).cast(),
                        4,
                    );
                    let a = libc::sockaddr_in {
                        sin_family: libc::AF_INET as libc::sa_family_t,
                        sin_port: port.to_be(),
                        sin_addr: libc::in_addr {
                            s_addr: u32::from(LINUX_IP).to_be(),
                        },
                        sin_zero: [0; 8],
                    };
                    assert_eq!(
                        libc::bind(
                            fd,
                            (&raw const a).cast(),
                            size_of::<libc::sockaddr_in>() as libc::socklen_t
                        ),
                        0
                    );
                    assert_eq!(libc::listen(fd, 0), 0);
                    TcpListener::from_raw_fd(fd)
                };
                let filler = TcpStream::connect(SocketAddrV4::new(LINUX_IP, port)).unwrap();
                Full { l, _filler: filler }
            })
            .unwrap()
    }

    /// Takes the filler off the queue: the next SYN gets in.
    fn make_room(&self) {
        let _ = self.l.accept().unwrap();
    }
}

/// Runs `intr` (`mode`) in `cmd` against a full listener on `port`,
/// making room when the program is ready for it; its lines.
fn intr_trace(bed: &Bed, mut cmd: Command, port: u16, mode: &str) -> Vec<String> {
    let full = Full::new(bed, port);
    cmd.args([&LINUX_IP.to_string(), &port.to_string(), mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = Child(cmd.spawn().unwrap());
    let mut stdin = child.0.stdin.take().unwrap();
    let out = BufReader::new(child.0.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + Duration::from_secs(60);
    let mut lines = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let l = match rx.recv_timeout(left) {
            Ok(l) => l,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("intr {mode} did not finish in 60 s; it said {lines:?}")
            }
        };
        match l.as_str() {
            "wait -" => {
                full.make_room();
                stdin.write_all(b"go\n").unwrap();
            }
            "started -" => {
                // Its first SYN is dropped; the room comes between the
                // signal (300 ms) and its next SYN.
                std::thread::sleep(Duration::from_millis(600));
                full.make_room();
            }
            _ => {}
        }
        lines.push(l);
    }
    let st = child.0.wait().unwrap();
    assert!(st.success(), "intr {mode}: {st}; said {lines:?}");
    lines
}

/// A blocking connect interrupted by a signal, on Linux and on softoe:
/// without `SA_RESTART` it fails with `EINTR` and the handshake goes on
/// in the background — a blocking connect again waits again (and is
/// interrupted again), a non-blocking one says `EALREADY`, the socket
/// polls writable once established, and the next connect says 0, then
/// `EISCONN`; with `SA_RESTART` the connect goes on waiting through the
/// signal and succeeds. softoe's connect was a command round trip that no
/// signal ended.
#[test]
fn a_signal_interrupts_a_blocking_connect_as_on_linux() {
    if !have("cc") {
        return;
    }
    let bed = bed();
    let dir = tempdir("connect-intr");
    let exe = intr_program(&dir);
    let exe = exe.to_str().unwrap();
    let want_plain = [
        "connect EINTR",
        "blocking EINTR",
        "nonblocking EALREADY",
        "wait -",
        "poll POLLOUT",
        "so_error 0",
        "established 0",
        "later EISCONN",
    ];
    let want_restart = ["started -", "connect 0", "interrupted yes", "again EISCONN"];
    for (side, port) in [("Linux", 7820), ("softoe", 7822)] {
        for (mode, want) in [
            ("norestart", &want_plain[..]),
            ("restart", &want_restart[..]),
        ] {
            let cmd = if side == "Linux" {
                on_linux(&bed, exe)
            } else {
                on_softoe(&bed, exe)
            };
            let port = port + u16::from(mode == "restart");
            let got = intr_trace(&bed, cmd, port, mode);
            assert_eq!(got, want, "{side}, {mode}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A blocking connect refused by the peer fails with `ECONNREFUSED`, and
/// the same socket then connects elsewhere — on Linux and on softoe (a
/// blocking connect now waits on the handshake it started rather than on
/// a command's answer: its failure leaves the socket as it was).
#[test]
fn a_refused_blocking_connect_can_connect_again() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let port = 7825;
    let l = bed
        .linux
        .run(move || TcpListener::bind(SocketAddrV4::new(LINUX_IP, port)).unwrap())
        .unwrap();
    let got = bed
        .linux
        .spawn(move || {
            (0..2)
                .map(|_| {
                    let (mut s, _) = l.accept().unwrap();
                    let mut b = Vec::new();
                    std::io::Read::read_to_end(&mut s, &mut b).unwrap();
                    b
                })
                .collect::<Vec<_>>()
        })
        .unwrap();
    let script = format!(
        "import socket,errno,sys\n\
         s=socket.socket()\n\
         try: s.connect(('{LINUX_IP}',{closed})); print('connected to nothing'); sys.exit(1)\n\
         except OSError as e:\n\
         \x20   if e.errno!=errno.ECONNREFUSED: print('refused as', e); sys.exit(1)\n\
         s.connect(('{LINUX_IP}',{port})); s.sendall(sys.argv[1].encode()); s.close()\n",
        closed = port + 1
    );
    for side in ["Linux", "softoe"] {
        let mut c = if side == "Linux" {
            on_linux(&bed, "python3")
        } else {
            on_softoe(&bed, "python3")
        };
        c.args(["-c", &script, side]);
        output_ok(c, side);
    }
    assert_eq!(
        got.join().unwrap(),
        vec![b"Linux".to_vec(), b"softoe".to_vec()]
    );
}
