//! Socket options and the calls past the common ones (`recvmmsg`,
//! `sendmmsg`, `splice`, `epoll_pwait2`), on softoe through the shim,
//! against Linux: the same Python battery of `setsockopt`/`getsockopt`
//! runs on both and must answer alike except where softoe refuses on
//! purpose; the TOS and TTL softoe sets are read off the wire on Linux's
//! side; a C program drives the batch and pipe calls against Linux peers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod shim;

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP, LINUX_IP};

const BATTERY: &str = include_str!("options/battery.py");
const CALLS_C: &str = include_str!("options/calls.c");

/// Captures, in Linux's namespace, the TCP packets `src` sends to or from
/// `port`, until `src` sends a FIN: one line per packet, "TOS TTL FLAGS".
const SNIFFER: &str = r#"
import socket, struct, sys, time
src, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
# Room for a burst: a dropped frame (the FIN) would end the capture late,
# in the next connection's packets.
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
s.bind(("eth0", 0))
s.settimeout(0.2)
print("ready", flush=True)
end = time.time() + secs
first = None
while time.time() < end:
    try:
        f = s.recv(65535)
    except socket.timeout:
        continue
    ip = f[14:]
    if len(ip) < 40 or ip[9] != 6 or socket.inet_ntoa(ip[12:16]) != src:
        continue
    tcp = ip[(ip[0] & 15) * 4:]
    sport, dport = struct.unpack("!HH", tcp[:4])
    if port not in (sport, dport):
        continue
    # The first connection only: the one whose SYN (or SYN-ACK) comes first.
    if first is None:
        if not tcp[13] & 2:
            continue
        first = sport
    if sport != first:
        continue
    print(ip[1], ip[8], tcp[13], flush=True)
    if tcp[13] & 1:
        break
"#;

/// A running program whose output lines arrive as it prints them.
struct Lines {
    child: Child,
    rx: mpsc::Receiver<String>,
    seen: Vec<String>,
    err: std::thread::JoinHandle<String>,
}

impl Lines {
    fn spawn(mut c: Command) -> Lines {
        let mut child = c
            .stdin(Stdio::null())
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
            err,
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
                Err(_) => panic!("no line {prefix:?} within {secs} s; saw {:?}", self.seen),
            }
        }
    }

    /// Waits for the program's end (killing it after `secs`): its status,
    /// every line it printed, its stderr.
    fn finish(mut self, secs: u64) -> (ExitStatus, Vec<String>, String) {
        let end = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(st) = self.child.0.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > end {
                let _ = self.child.0.kill();
                let _ = self.child.0.wait();
                while let Ok(l) = self.rx.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(l);
                }
                panic!("did not finish within {secs} s; printed {:?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(l) = self.rx.recv_timeout(Duration::from_millis(300)) {
            self.seen.push(l);
        }
        let err = self.err.join().unwrap_or_default();
        (status, self.seen, err)
    }
}

fn python(c: Command, script: &str, args: &[String]) -> Command {
    let mut c = c;
    c.arg("-c").arg(script).args(args);
    c
}

/// The line `label: …` of a battery's output.
fn answer<'a>(lines: &'a [String], label: &str) -> &'a str {
    let p = format!("{label}: ");
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&p))
        .unwrap_or_else(|| panic!("no answer for {label} in {lines:?}"))
}

/// The battery on plain Linux and on softoe answers alike: Linux's
/// defaults, its rounding (`TCP_DEFER_ACCEPT` 5 → 7), its errors
/// (`IP_TTL` 0, a TCP option on a UDP socket, `SO_SNDLOWAT`), the priority
/// `IP_TOS` implies, `MSG_ERRQUEUE` without an error queue. Where softoe
/// answers otherwise on purpose, its answer is checked apart, and each
/// refused option is named in one warning, however often it is asked for.
#[test]
fn options_answer_as_linux_does() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let linux = run_for(
        python(on_linux(&bed, "python3"), BATTERY, &[]),
        60,
        "the battery on Linux",
    );
    assert!(
        linux.status.success(),
        "{}",
        String::from_utf8_lossy(&linux.stderr)
    );
    let mut c = python(on_softoe(&bed, "python3"), BATTERY, &[]);
    c.env("RUST_LOG", "softoe_preload=warn");
    let softoe = run_for(c, 60, "the battery on softoe");
    let err = String::from_utf8_lossy(&softoe.stderr).into_owned();
    assert!(softoe.status.success(), "{err}");
    let text = |o: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let (lx, so) = (text(&linux), text(&softoe));
    let split = |v: &[String]| -> (Vec<String>, Vec<String>) {
        let at = v
            .iter()
            .position(|l| l == "-- softoe's own")
            .expect("marker");
        (v[..at].to_vec(), v[at + 1..].to_vec())
    };
    let (lx_same, _) = split(&lx);
    let (so_same, so_own) = split(&so);
    assert!(lx_same.len() > 70, "the battery ran: {lx_same:?}");
    let diff: Vec<String> = lx_same
        .iter()
        .zip(&so_same)
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("Linux {a:?} / softoe {b:?}"))
        .collect();
    assert!(
        diff.is_empty(),
        "softoe answers otherwise:\n{}",
        diff.join("\n")
    );
    assert_eq!(lx_same.len(), so_same.len());
    // A few of those, spelled out (so the battery cannot pass empty).
    assert_eq!(answer(&so_same, "IP_TOS 0xb9"), "set ok get 184");
    assert_eq!(answer(&so_same, "IP_TTL 0"), "set EEINVAL get 64");
    assert_eq!(answer(&so_same, "TCP_DEFER_ACCEPT 5"), "set ok get 7");
    assert_eq!(answer(&so_same, "IP_OPTIONS"), "b");
    assert_eq!(answer(&so_same, "SO_BINDTODEVICE"), "b");
    assert_eq!(answer(&so_same, "TCP MSG_ERRQUEUE"), "EEAGAIN");
    assert_eq!(
        answer(&so_same, "SO_PEERCRED"),
        "b00000000ffffffffffffffff",
        "pid 0, uid and gid -1"
    );
    // softoe's own answers: the engine's algorithms and interface, no IP
    // options, no control messages, no marks, no kernel TLS.
    let cubic = format!("b{}", hex(b"cubic\0\0\0\0\0\0\0\0\0\0\0"));
    assert_eq!(answer(&so_own, "TCP_CONGESTION default"), cubic);
    assert_eq!(
        answer(&so_own, "TCP_CONGESTION bbr"),
        format!("set EENOENT get {cubic}")
    );
    assert_eq!(answer(&so_own, "SO_BINDTODEVICE lo"), "set EENODEV get b");
    assert_eq!(
        answer(&so_own, "IP_OPTIONS source route"),
        "set EENOPROTOOPT get b"
    );
    for o in ["IP_PKTINFO", "SO_TIMESTAMP", "SO_MARK", "TCP_ULP"] {
        assert!(
            answer(&so_own, o).starts_with("set EENOPROTOOPT"),
            "{o}: {}",
            answer(&so_own, o)
        );
        let warned = err
            .lines()
            .filter(|l| l.contains("refused by softoe") && l.contains(&format!("\"{o}\"")))
            .count();
        assert_eq!(warned, 1, "one warning naming {o}:\n{err}");
    }
    assert!(
        err.contains("SO_BINDTODEVICE") && err.contains("ENODEV"),
        "the refused device is logged:\n{err}"
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Starts the sniffer on Linux's side for packets from `src` on `port`.
fn sniff(bed: &Bed, src: std::net::Ipv4Addr, port: u16) -> Lines {
    let mut s = Lines::spawn(python(
        on_linux(bed, "python3"),
        SNIFFER,
        &[src.to_string(), port.to_string(), "60".into()],
    ));
    s.expect("ready", 20);
    s
}

/// Parses the sniffer's lines: (TOS, TTL, TCP flags).
fn packets(lines: &[String]) -> Vec<(u8, u8, u8)> {
    lines
        .iter()
        .filter(|l| *l != "ready")
        .map(|l| {
            let v: Vec<u8> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            (v[0], v[1], v[2])
        })
        .collect()
}

const SYN: u8 = 0x02;
const FIN: u8 = 0x01;
const ACK: u8 = 0x10;

/// A client on softoe sets `IP_TOS` (with ECN bits, which TCP keeps for
/// itself), `IP_TTL` and `TCP_CONGESTION` before it connects: the SYN and
/// every packet after carry them on the wire Linux sees, the engine runs
/// that algorithm; changed mid-connection, the next packets carry the new
/// TOS and the engine switches algorithm. `SO_BINDTODEVICE` takes the
/// engine's interface and refuses another.
#[test]
fn tos_and_ttl_reach_linux_from_a_client() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let port = 7301;
    let server = r#"
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen()
print("ready", flush=True)
c, _ = l.accept()
for tag in (b"got1", b"got2"):
    n = 0
    while n < 100000:
        d = c.recv(65536)
        if not d:
            sys.exit("short")
        n += len(d)
    c.sendall(tag)
while c.recv(65536):
    pass
c.close()
c, _ = l.accept()
c.recv(10)
c.close()
"#;
    let client = r#"
import socket, sys
IP, TCP, SOL = socket.IPPROTO_IP, socket.IPPROTO_TCP, socket.SOL_SOCKET
host, port, dev = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
def cc(s):
    return s.getsockopt(TCP, 13, 16).rstrip(b"\0").decode()
s = socket.socket()
try:
    s.setsockopt(SOL, 25, b"eth9")
except OSError as e:
    print("bind eth9", e.errno, flush=True)
s.setsockopt(SOL, 25, dev)
print("device", s.getsockopt(SOL, 25, 16).rstrip(b"\0").decode(), flush=True)
s.setsockopt(IP, socket.IP_TOS, 0x48 | 3)
s.setsockopt(IP, socket.IP_TTL, 17)
s.setsockopt(TCP, 13, b"reno")
s.connect((host, port))
print("tos", s.getsockopt(IP, socket.IP_TOS), "ttl", s.getsockopt(IP, socket.IP_TTL), flush=True)
print("cc", cc(s), flush=True)
s.sendall(b"x" * 100000)
assert s.recv(4) == b"got1"
s.setsockopt(IP, socket.IP_TOS, 0x20)
s.setsockopt(TCP, 13, b"cubic")
print("cc2", cc(s), flush=True)
s.sendall(b"y" * 100000)
assert s.recv(4) == b"got2"
s.close()
t = socket.socket()
t.connect((host, port))
print("cc-default", cc(t), flush=True)
t.close()
"#;
    let mut srv = Lines::spawn(python(
        on_linux(&bed, "python3"),
        server,
        &[LINUX_IP.to_string(), port.to_string()],
    ));
    srv.expect("ready", 20);
    let sniffer = sniff(&bed, ENGINE_IP, port);
    let out = run_for(
        python(
            on_softoe(&bed, "python3"),
            client,
            &[LINUX_IP.to_string(), port.to_string(), bed.tap.clone()],
        ),
        60,
        "the client on softoe",
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "bind eth9 19",
            &format!("device {}", bed.tap),
            "tos 72 ttl 17",
            "cc reno",
            "cc2 cubic",
            "cc-default cubic",
        ],
        "ENODEV for another interface; the engine's own; ECN bits cleared"
    );
    let (_, seen, _) = sniffer.finish(30);
    let p = packets(&seen);
    assert!(p.len() > 10, "the sniffer saw the connection: {p:?}");
    assert_eq!(p[0], (0x48, 17, SYN), "the SYN carries them");
    assert!(p.iter().all(|&(_, ttl, _)| ttl == 17), "{p:?}");
    let switch = p
        .iter()
        .position(|&(tos, _, _)| tos == 0x20)
        .expect("TOS changed");
    assert!(p[..switch].iter().all(|&(tos, _, _)| tos == 0x48), "{p:?}");
    assert!(p[switch..].iter().all(|&(tos, _, _)| tos == 0x20), "{p:?}");
    assert_eq!(p.last().map(|x| x.2 & FIN), Some(FIN), "up to the FIN");
    let _ = srv.finish(20);
}

/// A listener on softoe with `IP_TOS`, `IP_TTL` and `SO_BINDTODEVICE`:
/// its SYN-ACK and the accepted connection's every packet carry them, and
/// the accepted socket reports them, as on Linux. The listener is an
/// `AF_INET6` socket on `::`: `accept` answers with the peer's
/// IPv4-mapped address; its `IPV6_TCLASS` reads back what was set (and,
/// as on Linux, does not touch the IPv4 packets).
#[test]
fn a_listener_passes_its_tos_and_ttl_to_what_it_accepts() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let port = 7302;
    let server = r#"
import socket, sys
IP, SOL = socket.IPPROTO_IP, socket.SOL_SOCKET
port, dev = int(sys.argv[1]), sys.argv[2].encode()
s = socket.socket(socket.AF_INET6)
s.setsockopt(IP, socket.IP_TOS, 0xb8)
s.setsockopt(IP, socket.IP_TTL, 99)
s.setsockopt(SOL, 25, dev)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, 0x20)
print("tclass", s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS), flush=True)
s.bind(("::", port))
s.listen()
print("ready", flush=True)
c, peer = s.accept()
print("peer", peer[0], c.family == socket.AF_INET6, flush=True)
print("accepted", c.getsockopt(IP, socket.IP_TOS), c.getsockopt(IP, socket.IP_TTL),
      c.getsockopt(SOL, 25, 16).rstrip(b"\0").decode(), flush=True)
c.sendall(b"z" * 50000)
c.close()
"#;
    let client = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
n = 0
while True:
    d = c.recv(65536)
    if not d:
        break
    n += len(d)
print("read", n)
"#;
    let mut srv = Lines::spawn(python(
        on_softoe(&bed, "python3"),
        server,
        &[port.to_string(), bed.tap.clone()],
    ));
    srv.expect("ready", 20);
    let sniffer = sniff(&bed, ENGINE_IP, port);
    let out = run_for(
        python(
            on_linux(&bed, "python3"),
            client,
            &[ENGINE_IP.to_string(), port.to_string()],
        ),
        60,
        "the client on Linux",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "read 50000");
    let (st, lines, err) = srv.finish(30);
    assert!(st.success(), "{lines:?}\n{err}");
    assert!(lines.contains(&"tclass 32".to_string()), "{lines:?}");
    assert!(
        lines.contains(&format!("peer ::ffff:{LINUX_IP} True")),
        "{lines:?}"
    );
    assert!(
        lines.contains(&format!("accepted 184 99 {}", bed.tap)),
        "{lines:?}"
    );
    let (_, seen, _) = sniffer.finish(30);
    let p = packets(&seen);
    assert_eq!(
        p.first(),
        Some(&(0xb8, 99, SYN | ACK)),
        "the SYN-ACK: {p:?}"
    );
    assert!(
        p.iter().all(|&(tos, ttl, _)| (tos, ttl) == (0xb8, 99)),
        "{p:?}"
    );
    assert_eq!(p.last().map(|x| x.2 & FIN), Some(FIN), "up to the FIN");
}

/// UDP: the TOS byte (ECN bits included: a UDP program owns them) and TTL
/// reach a Linux receiver, which reads them with `IP_RECVTOS`/`IP_RECVTTL`.
#[test]
fn udp_tos_and_ttl_reach_linux() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let port = 7303;
    let receiver = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 13, 1)   # IP_RECVTOS
s.setsockopt(socket.IPPROTO_IP, 12, 1)   # IP_RECVTTL
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
data, anc, _, _ = s.recvmsg(100, 256)
got = {}
for lvl, typ, val in anc:
    got[typ] = val[0]
print("got", data.decode(), got.get(1), got.get(2), flush=True)
"#;
    let sender = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 0xb9)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 5)
s.sendto(b"hi", (sys.argv[1], int(sys.argv[2])))
print("tos", s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS))
"#;
    let mut rx = Lines::spawn(python(
        on_linux(&bed, "python3"),
        receiver,
        &[LINUX_IP.to_string(), port.to_string()],
    ));
    rx.expect("ready", 20);
    let out = run_for(
        python(
            on_softoe(&bed, "python3"),
            sender,
            &[LINUX_IP.to_string(), port.to_string()],
        ),
        30,
        "the sender on softoe",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "tos 185");
    let got = rx.expect("got", 20);
    assert_eq!(got, "got hi 185 5");
    let _ = rx.finish(10);
}

/// A Python program's steps: it prints `name values…`, then waits until
/// the test has looked at the engine and made the file `name`.
const STEPS: &str = r#"
import os, socket, sys, time
SOL, IP = socket.SOL_SOCKET, socket.IPPROTO_IP
d = sys.argv[1]
def step(name, *vals):
    print(name, *vals, flush=True)
    while not os.path.exists(os.path.join(d, name)):
        time.sleep(0.01)
"#;

/// The `SO_PRIORITY` the engine's stack sends `local`→`remote`'s frames
/// with, as `softoe stat` shows it.
fn engine_priority(bed: &Bed, local: SocketAddrV4, remote: SocketAddrV4) -> Option<u8> {
    bed.snapshot()
        .unwrap()
        .connections
        .iter()
        .find(|c| c.local == local.to_string() && c.remote == remote.to_string())
        .map(|c| c.priority)
}

/// `SO_PRIORITY` set by a program under the shim reaches the engine (where
/// a bonded port's `prioritized` policy reads it): set before `connect`;
/// changed on the live connection; implied by `IP_TOS` as Linux's
/// `rt_tos2priority` gives it (`IPTOS_LOWDELAY`: 6); a listener's passed
/// to what it accepts. The program reads back what Linux would at each
/// step, the engine's snapshot shows the same.
#[test]
fn so_priority_reaches_the_engine() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let dir = tempdir("priority");
    let go = |name: &str| std::fs::write(dir.join(name), b"").unwrap();
    let port = 7307;
    let server = SocketAddrV4::new(LINUX_IP, port);
    let l = bed
        .linux
        .run(move || std::net::TcpListener::bind(server).unwrap())
        .unwrap();
    let sink = bed
        .linux
        .spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut all = Vec::new();
            let _ = c.read_to_end(&mut all);
        })
        .unwrap();
    let client = format!(
        "{STEPS}{}",
        r#"
s = socket.socket()
s.setsockopt(SOL, socket.SO_PRIORITY, 6)
s.connect((sys.argv[2], int(sys.argv[3])))
step("connected", s.getsockname()[1], s.getsockopt(SOL, socket.SO_PRIORITY))
s.setsockopt(SOL, socket.SO_PRIORITY, 2)
step("live", s.getsockopt(SOL, socket.SO_PRIORITY))
s.setsockopt(IP, socket.IP_TOS, 0x10)
step("lowdelay", s.getsockopt(SOL, socket.SO_PRIORITY))
s.setsockopt(IP, socket.IP_TOS, 0)
step("tos0", s.getsockopt(SOL, socket.SO_PRIORITY))
s.close()
"#
    );
    let mut p = Lines::spawn(python(
        on_softoe(&bed, "python3"),
        &client,
        &[
            dir.display().to_string(),
            LINUX_IP.to_string(),
            port.to_string(),
        ],
    ));
    let line = p.expect("connected", 30);
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f.get(2), Some(&"6"), "the program reads it back: {line}");
    let me = SocketAddrV4::new(ENGINE_IP, f[1].parse().unwrap());
    assert_eq!(engine_priority(&bed, me, server), Some(6), "from the SYN");
    go("connected");
    assert_eq!(p.expect("live", 30), "live 2");
    assert_eq!(engine_priority(&bed, me, server), Some(2), "at once");
    go("live");
    assert_eq!(p.expect("lowdelay", 30), "lowdelay 6", "as Linux");
    assert_eq!(
        engine_priority(&bed, me, server),
        Some(6),
        "IP_TOS 0x10 implies 6 in the engine too"
    );
    go("lowdelay");
    assert_eq!(p.expect("tos0", 30), "tos0 0");
    assert_eq!(engine_priority(&bed, me, server), Some(0));
    go("tos0");
    let (st, lines, err) = p.finish(30);
    assert!(st.success(), "{lines:?}\n{err}");
    sink.join().unwrap();

    // A listener's passes to what it accepts.
    let port = 7308;
    let at = SocketAddrV4::new(ENGINE_IP, port);
    let listener = format!(
        "{STEPS}{}",
        r#"
l = socket.socket()
l.setsockopt(SOL, socket.SO_REUSEADDR, 1)
l.setsockopt(SOL, socket.SO_PRIORITY, 5)
l.bind((sys.argv[2], int(sys.argv[3])))
l.listen()
print("ready", flush=True)
c, peer = l.accept()
step("accepted", peer[1], c.getsockopt(SOL, socket.SO_PRIORITY))
c.close()
"#
    );
    let mut p = Lines::spawn(python(
        on_softoe(&bed, "python3"),
        &listener,
        &[
            dir.display().to_string(),
            ENGINE_IP.to_string(),
            port.to_string(),
        ],
    ));
    p.expect("ready", 30);
    let peer = bed
        .linux
        .spawn(move || {
            let mut c = std::net::TcpStream::connect(at).unwrap();
            let mut all = Vec::new();
            let _ = c.read_to_end(&mut all);
        })
        .unwrap();
    let line = p.expect("accepted", 30);
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f.get(2), Some(&"5"), "the accepted socket reads it: {line}");
    let from = SocketAddrV4::new(LINUX_IP, f[1].parse().unwrap());
    assert_eq!(engine_priority(&bed, at, from), Some(5), "the listener's");
    go("accepted");
    let (st, lines, err) = p.finish(30);
    assert!(st.success(), "{lines:?}\n{err}");
    peer.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The C program, built with `cc`.
fn calls_program(dir: &Path) -> PathBuf {
    let src = dir.join("calls.c");
    std::fs::write(&src, CALLS_C).unwrap();
    let exe = dir.join("calls");
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    exe
}

/// `recvmmsg` and `epoll_pwait2` on a softoe UDP socket, `sendmmsg` from
/// one, against Linux: `MSG_WAITFORONE`, the time left written back, a
/// batch smaller than what waits, `EAGAIN`/`EINVAL` as Linux gives them.
#[test]
fn recvmmsg_sendmmsg_and_epoll_pwait2_on_udp() {
    if !have("python3") || !have("cc") {
        return;
    }
    let bed = bed();
    let dir = tempdir("mmsg-udp");
    let calls = calls_program(&dir);
    let port = 7304;
    let mut rx = Lines::spawn({
        let mut c = on_softoe(&bed, calls.to_str().unwrap());
        c.args(["udp-recv", &port.to_string()]);
        c
    });
    rx.expect("ready", 20);
    let send = |words: &[&str]| {
        let script = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for w in sys.argv[3:]:
    s.sendto(w.encode(), (sys.argv[1], int(sys.argv[2])))
"#;
        let mut args = vec![ENGINE_IP.to_string(), port.to_string()];
        args.extend(words.iter().map(|w| w.to_string()));
        let o = run_for(
            python(on_linux(&bed, "python3"), script, &args),
            30,
            "sender",
        );
        assert!(o.status.success());
    };
    send(&["d0", "d1", "d2", "d3", "d4"]);
    rx.expect("ready2", 20);
    send(&["e0", "e1", "e2"]);
    let (st, lines, err) = rx.finish(30);
    assert!(st.success(), "{lines:?}\n{err}");
    let get = |p: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no {p}: {lines:?}"))
            .clone()
    };
    assert_eq!(get("pwait2-idle "), "pwait2-idle 0 -", "times out empty");
    assert_eq!(get("pwait2-bad-timeout "), "pwait2-bad-timeout -1 EINVAL");
    assert_eq!(get("mm-empty "), "mm-empty -1 EAGAIN");
    assert_eq!(get("mm-bad-timeout "), "mm-bad-timeout -1 EINVAL");
    assert_eq!(get("pwait2 "), "pwait2 1 -");
    let mm = get("mm ");
    let f: Vec<&str> = mm.split(' ').collect();
    assert_eq!(f[1], "5", "all five in one call: {mm}");
    let left: u64 = f[3].parse().unwrap();
    assert!(
        left > 0 && left <= 5000,
        "the time left is written back: {mm}"
    );
    for i in 0..5 {
        assert_eq!(
            get(&format!("msg {i} ")),
            format!("msg {i} 2 d{i} {LINUX_IP}")
        );
    }
    assert_eq!(get("mm2 "), "mm2 2 e0 e1", "two slots, two datagrams");
    assert_eq!(get("mm3 "), "mm3 1 e2", "the third at the next call");

    // sendmmsg: three datagrams, each one message on Linux's side.
    let recv3 = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
for _ in range(3):
    d, a = s.recvfrom(100)
    print("got", d.decode(), a[0], flush=True)
"#;
    let mut r3 = Lines::spawn(python(
        on_linux(&bed, "python3"),
        recv3,
        &[LINUX_IP.to_string(), (port + 1).to_string()],
    ));
    r3.expect("ready", 20);
    let mut c = on_softoe(&bed, calls.to_str().unwrap());
    c.args(["udp-send", &LINUX_IP.to_string(), &(port + 1).to_string()]);
    let o = run_for(c, 30, "sendmmsg");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "smm 3 3 3 5");
    let (_, got, _) = r3.finish(20);
    let got: Vec<&String> = got.iter().filter(|l| l.starts_with("got")).collect();
    assert_eq!(
        got,
        [
            &format!("got one {ENGINE_IP}"),
            &format!("got two {ENGINE_IP}"),
            &format!("got three {ENGINE_IP}")
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// On a connection to Linux: `recvmmsg` and `sendmmsg` on a stream,
/// `MSG_ERRQUEUE` (`EAGAIN`, nothing consumed), `splice` pipe → socket (2
/// MiB, half to a blocking and half to a non-blocking socket) and socket →
/// pipe (2 MiB) with every byte checked on both sides, and the errors
/// Linux gives: no pipe on either side, an offset, a file; `sendfile` from
/// a socket.
#[test]
fn splice_recvmmsg_and_sendmmsg_on_tcp() {
    if !have("python3") || !have("cc") {
        return;
    }
    let bed = bed();
    let dir = tempdir("mmsg-tcp");
    let calls = calls_program(&dir);
    let port = 7306;
    let server = r#"
import socket, sys
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2])))
l.listen()
print("ready", flush=True)
c, _ = l.accept()
c.sendall(b"hello")
data = bytearray()
while True:
    d = c.recv(1 << 20)
    if not d:
        break
    data += d
head, body = bytes(data[:12]), bytes(data[12:])
exp = bytes(((i * 7) + (i >> 8)) & 255 for i in range(len(body)))
print("got", head.decode(), len(body), body == exp, flush=True)
n = 2 << 20
c.sendall(bytes(((i * 7) + (i >> 8)) & 255 for i in range(n)))
c.close()
"#;
    let mut srv = Lines::spawn(python(
        on_linux(&bed, "python3"),
        server,
        &[LINUX_IP.to_string(), port.to_string()],
    ));
    srv.expect("ready", 20);
    let mut c = on_softoe(&bed, calls.to_str().unwrap());
    c.args(["tcp", &LINUX_IP.to_string(), &port.to_string()])
        .arg(dir.join("scratch"));
    let o = run_for(c, 120, "the calls on a connection");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    let get = |p: &str| -> &str {
        lines
            .iter()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no {p}: {lines:?}"))
    };
    assert_eq!(get("tcp-pwait2 "), "tcp-pwait2 1 -");
    assert_eq!(get("tcp-mm "), "tcp-mm 1 5 hello", "MSG_WAITFORONE: one");
    assert_eq!(get("errqueue-recv "), "errqueue-recv -1 EAGAIN");
    assert_eq!(get("errqueue-recvmsg "), "errqueue-recvmsg -1 EAGAIN");
    assert_eq!(get("tcp-smm "), "tcp-smm 3 3 4 5");
    assert_eq!(
        get("splice-socket-socket "),
        "splice-socket-socket -1 EINVAL"
    );
    assert_eq!(get("splice-pipe-offset "), "splice-pipe-offset -1 ESPIPE");
    assert_eq!(
        get("splice-socket-offset "),
        "splice-socket-offset -1 EINVAL"
    );
    assert_eq!(get("splice-file "), "splice-file -1 EINVAL");
    assert_eq!(get("splice-len0 "), "splice-len0 0 -");
    assert_eq!(
        get("splice-empty-nonblock "),
        "splice-empty-nonblock -1 EAGAIN"
    );
    assert_eq!(
        get("sendfile-from-socket "),
        "sendfile-from-socket -1 EINVAL"
    );
    assert!(
        get("splice-out ").starts_with(&format!("splice-out {} ", 2 << 20)),
        "{lines:?}"
    );
    assert_eq!(
        get("splice-in "),
        format!("splice-in {0} {0} bad 0", 2 << 20),
        "every byte, in order"
    );
    let (_, sl, err) = srv.finish(60);
    assert!(
        sl.contains(&format!("got aaabbbbccccc {} True", 2 << 20)),
        "Linux got the messages, then the pipe's bytes in order: {sl:?}\n{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
