//! What `softoe` says when it is given something it cannot use (issue 35
//! item 8): a `--tap` that names a device that is no TAP (or a busy one),
//! a `--cpu` the process may not run on, a `softoe run --engine` path that
//! is not the engine's host socket, and a `--pcap` file on a full disk.
//! Each used to end in a bare errno, a start banner before the failure, a
//! program started anyway, or silence. The engine tests need root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Running, stat_json};
use softoe_testbed::{Netns, Testbed};

/// A path of this test's own in the temporary directory.
fn tmp(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("softoe-msg-{tag}-{}", std::process::id()))
}

/// Removes its files when dropped: an engine killed by a failed test
/// leaves its sockets behind.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `softoe engine ARGS` in `ns`, without backtraces (one line of error).
fn engine(ns: &Netns, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.name(), BIN, "engine"])
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `c` to its end, which must come within 20 s (an engine that
/// starts instead of refusing is killed, and the test fails).
fn to_the_end(mut c: Command, what: &str) -> Output {
    let mut child = Running(Some(c.spawn().unwrap()));
    let end = Instant::now() + Duration::from_secs(20);
    while child.0.as_mut().unwrap().try_wait().unwrap().is_none() {
        assert!(Instant::now() < end, "{what}: still running");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.0.take().unwrap().wait_with_output().unwrap()
}

fn wait_for(path: &Path) {
    let end = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < end, "no {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `softoe engine --tap NAME` where NAME exists and is not a TAP the
/// engine can have says what it is and what to give instead, in one line,
/// before the banner: a veth, a bridge, a TUN device, the loopback
/// device, a multi-queue TAP, a name no interface may have, and a TAP
/// another engine holds (naming it). Before, each said "Invalid argument"
/// or "Device or resource busy".
#[test]
fn engine_says_what_a_device_that_is_not_its_tap_is() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let eng = tb.netns("eng").unwrap();
    let other = tb.netns("oth").unwrap();
    tb.veth(&eng, "vmsg0", &other, "eth0").unwrap();
    tb.bridge(&eng, "brmsg0").unwrap();
    eng.ip(&["tuntap", "add", "mode", "tun", "name", "tunmsg0"])
        .unwrap();
    eng.ip(&[
        "tuntap",
        "add",
        "mode",
        "tap",
        "multi_queue",
        "name",
        "mqmsg0",
    ])
    .unwrap();
    let control = tmp("tap.ctl");
    let first_ctl = tmp("tap1.ctl");
    let _files = Cleanup(vec![control.clone(), first_ctl.clone()]);
    let ctl = control.to_str().unwrap();
    const NEW: &str = "name a TAP, or a new name for softoe to create";
    for (name, said) in [
        (
            "vmsg0",
            format!(
                "vmsg0 exists and is a veth (not a TAP device): {NEW} (--afpacket vmsg0 drives \
                 an existing interface)"
            ),
        ),
        (
            "brmsg0",
            format!(
                "brmsg0 exists and is a bridge (not a TAP device): {NEW} (--bridge brmsg0 puts \
                 softoe's own TAP on it)"
            ),
        ),
        (
            "tunmsg0",
            format!(
                "tunmsg0 exists and is a TUN device (IP packets; a TAP carries Ethernet frames): \
                 {NEW}"
            ),
        ),
        (
            "lo",
            format!("lo exists and is the loopback device (not a TAP device): {NEW}"),
        ),
        (
            "mqmsg0",
            format!(
                "mqmsg0 is a multi-queue TAP device, and softoe opens single-queue ones (ip \
                 tuntap add mode tap NAME, without multi_queue): {NEW}"
            ),
        ),
        (
            "a/b",
            "\"a/b\" is not a valid interface name (1 to 15 bytes, no '/', ':' or white space, \
             not '.' or '..')"
                .to_string(),
        ),
    ] {
        let out = to_the_end(
            engine(
                &eng,
                &["--address", "10.8.9.1/24", "--tap", name, "--control", ctl],
            ),
            name,
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{name}: {err}");
        assert_eq!(err.trim(), format!("Error: {said}"), "{name}");
    }
    // A TAP another engine holds: busy, and who holds it.
    let mut first = Running(Some(
        engine(
            &eng,
            &[
                "--address",
                "10.8.9.1/24",
                "--tap",
                "holdmsg0",
                "--control",
                first_ctl.to_str().unwrap(),
            ],
        )
        .spawn()
        .unwrap(),
    ));
    wait_for(&first_ctl);
    let pid = first.0.as_ref().unwrap().id();
    let out = to_the_end(
        engine(
            &eng,
            &[
                "--address",
                "10.8.9.1/24",
                "--tap",
                "holdmsg0",
                "--control",
                ctl,
            ],
        ),
        "a held TAP",
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert_eq!(
        err.trim(),
        format!(
            "Error: TAP device holdmsg0 is busy: softoe (pid {pid}) holds it open, and a TAP \
             without multi-queue has one reader: stop that process, or name another TAP, or a \
             new name for softoe to create"
        )
    );
    let out = first.terminate();
    assert!(out.status.success());
}

/// The CPUs listed in `/sys/devices/system/cpu/present` (`0-3,6`).
fn present_cpus() -> Vec<usize> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/present").unwrap();
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    cpus
}

/// `softoe engine --cpu N` for a CPU the machine does not have, or one
/// the process may not run on (taskset), fails before it prints its
/// banner or makes its TAP, naming the CPUs it may use. Before, the
/// banner came first and then "Invalid argument".
#[test]
fn engine_refuses_a_cpu_it_cannot_have_before_it_starts() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let eng = tb.netns("eng").unwrap();
    let ctl = tmp("cpu.ctl");
    let _files = Cleanup(vec![ctl.clone()]);
    let present = present_cpus();
    let absent = present.iter().max().unwrap() + 1;
    let allowed = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    let cpus = if allowed.contains([',', '-']) {
        "CPUs"
    } else {
        "CPU"
    };
    let args = |cpu: String| {
        vec![
            "--address".to_string(),
            "10.8.9.1/24".into(),
            "--tap".into(),
            "socpu0".into(),
            "--cpu".into(),
            cpu,
            "--control".into(),
            ctl.to_str().unwrap().into(),
        ]
    };
    let a = args(absent.to_string());
    let out = to_the_end(
        engine(&eng, &a.iter().map(String::as_str).collect::<Vec<_>>()),
        "--cpu absent",
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert_eq!(
        err.trim(),
        format!(
            "Error: cannot pin the engine to CPU {absent}: this machine has no CPU {absent}; \
             this process may run on {cpus} {allowed}"
        )
    );
    assert!(
        eng.ip(&["link", "show", "socpu0"]).is_err(),
        "the TAP was made before the CPU was checked"
    );
    // A CPU the machine has but the process may not use.
    if present.len() >= 2 {
        let (on, off) = (present[0], present[1]);
        let mut t = Command::new("ip");
        t.args(["netns", "exec", eng.name(), "taskset", "-c"])
            .arg(on.to_string())
            .args([BIN, "engine"])
            .args(args(off.to_string()))
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = to_the_end(t, "--cpu outside taskset");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{err}");
        assert_eq!(
            err.trim(),
            format!(
                "Error: cannot pin the engine to CPU {off}: this process may not run on CPU \
                 {off}, only on CPU {on} (taskset or a cgroup's cpuset limits it)"
            )
        );
    }
}

/// `softoe run --engine PATH -- touch WITNESS`, and whether it ran.
fn run_on(engine: &Path, witness: &Path) -> (Output, bool) {
    let _ = std::fs::remove_file(witness);
    let out = Command::new(BIN)
        .arg("run")
        .arg("--engine")
        .arg(engine)
        .args(["--", "touch"])
        .arg(witness)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap();
    let ran = witness.exists();
    let _ = std::fs::remove_file(witness);
    (out, ran)
}

/// `softoe run --engine PATH` where PATH is a live socket that is not a
/// host socket (a program's stream socket) or a dead one: refused, and the
/// program never starts. Before, any socket that accepted a stream
/// connection passed, and the program ran on Linux's TCP.
#[test]
fn run_refuses_a_socket_that_is_not_a_host_socket() {
    let witness = tmp("ran");
    let live = tmp("live.sock");
    let _ = std::fs::remove_file(&live);
    let l = std::os::unix::net::UnixListener::bind(&live).unwrap();
    let (out, ran) = run_on(&live, &witness);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    drop(l);
    let _ = std::fs::remove_file(&live);
    assert!(!out.status.success() && !ran, "the program ran: {err}");
    assert_eq!(
        err.trim(),
        format!(
            "Error: {} is not softoe's host socket: a socket of another type answers there (the \
             host socket is the path given to `softoe engine --host`, by default \
             /run/softoe/host.sock)",
            live.display()
        )
    );
    // Nothing listens: the file of a socket that is gone.
    let dead = tmp("dead.sock");
    let _ = std::fs::remove_file(&dead);
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let (out, ran) = run_on(&dead, &witness);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = std::fs::remove_file(&dead);
    assert!(!out.status.success() && !ran, "the program ran: {err}");
    assert!(err.contains("no softoe engine answers at"), "{err}");
}

/// `softoe run --engine CONTROL` given an engine's control socket: refused
/// with what it is and where that engine's host socket is (or that it has
/// none), and the program never starts; given the host socket, it runs.
/// Before, the control socket passed the check and the program ran.
#[test]
fn run_given_the_control_socket_names_the_host_socket() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let eng = tb.netns("eng").unwrap();
    let (c1, h1, c2) = (tmp("run1.ctl"), tmp("run1.sock"), tmp("run2.ctl"));
    let witness = tmp("ran-ctl");
    let _files = Cleanup(vec![c1.clone(), h1.clone(), c2.clone(), witness.clone()]);
    let mut with_host = Running(Some(
        engine(
            &eng,
            &[
                "--address",
                "10.8.9.1/24",
                "--tap",
                "sorunm0",
                "--control",
                c1.to_str().unwrap(),
                "--host",
                h1.to_str().unwrap(),
            ],
        )
        .spawn()
        .unwrap(),
    ));
    let mut without = Running(Some(
        engine(
            &eng,
            &[
                "--address",
                "10.8.9.2/24",
                "--tap",
                "sorunm1",
                "--control",
                c2.to_str().unwrap(),
            ],
        )
        .spawn()
        .unwrap(),
    ));
    for p in [&c1, &h1, &c2] {
        wait_for(p);
    }
    let (out, ran) = run_on(&c1, &witness);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && !ran, "the program ran: {err}");
    assert_eq!(
        err.trim(),
        format!(
            "Error: {c} is not softoe's host socket: it is an engine's control socket (for \
             `softoe stat`); that engine's host socket is {h}: `softoe run --engine {h} -- …`",
            c = c1.display(),
            h = h1.display()
        )
    );
    let (out, ran) = run_on(&c2, &witness);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && !ran, "the program ran: {err}");
    assert_eq!(
        err.trim(),
        format!(
            "Error: {} is not softoe's host socket: it is an engine's control socket (for \
             `softoe stat`), and that engine serves no programs: start it with `--host PATH` \
             (e.g. /run/softoe/host.sock) and give that path to --engine",
            c2.display()
        )
    );
    // Another user finds it too, but may not look at the engine's
    // descriptors for its host socket.
    if Path::new("/usr/bin/setpriv").exists() {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                BIN,
                "run",
            ])
            .arg("--engine")
            .arg(&c1)
            .args(["--", "touch"])
            .arg(&witness)
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success() && !witness.exists(),
            "the program ran: {err}"
        );
        assert_eq!(
            err.trim(),
            format!(
                "Error: {} is not softoe's host socket: it is an engine's control socket (for \
                 `softoe stat`); the host socket is the path given to that engine's --host (by \
                 default /run/softoe/host.sock)",
                c1.display()
            )
        );
    }
    let (out, ran) = run_on(&h1, &witness);
    assert!(
        out.status.success() && ran,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(without.terminate().status.success());
    assert!(with_host.terminate().status.success());
}

/// `--pcap` on a full disk (/dev/full: every write fails with ENOSPC):
/// the first failure is an error in the log, once, without RUST_LOG; the
/// engine runs on and serves (a megabyte to discard, then `softoe stat`);
/// and at the stop it says how many frames were captured and how many
/// were not. Before, the capture stopped without a word.
#[test]
fn a_full_disk_stops_the_pcap_loudly_and_the_engine_runs_on() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let lan = tb
        .lan(&[("lx", "10.8.9.2".parse().unwrap())], 24, None)
        .unwrap();
    let (sw, linux) = (lan.sw, lan.hosts[0].ns.clone());
    let control = tmp("pcap.ctl");
    let _files = Cleanup(vec![control.clone()]);
    let mut eng = Running(Some(
        engine(
            &sw,
            &[
                "--address",
                "10.8.9.1/24",
                "--bridge",
                "br0",
                "--tap",
                "sopcap0",
                "-s",
                "discard:9",
                "--pcap",
                "/dev/full",
                "--control",
                control.to_str().unwrap(),
            ],
        )
        .spawn()
        .unwrap(),
    ));
    wait_for(&control);
    // The engine's log, line by line as it comes.
    let stderr = eng.0.as_mut().unwrap().stderr.take().unwrap();
    let (line_tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = line_tx.send(l);
        }
    });
    let sent = linux
        .run(|| {
            let to = SocketAddrV4::new([10, 8, 9, 1].into(), 9);
            let mut s = TcpStream::connect_timeout(&to.into(), Duration::from_secs(5)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(&vec![7u8; 1 << 20]).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
        })
        .is_ok();
    assert!(sent, "the transfer to discard failed");
    // The failure is said while the engine runs (a megabyte is more than
    // a batch of the capture), not at the stop.
    let mut log = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while !log
        .iter()
        .any(|l: &String| l.contains("pcap: writing /dev/full failed"))
    {
        let left = end.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) => log.push(l),
            Err(_) => panic!("no error while running:\n{}", log.join("\n")),
        }
    }
    // Still serving after the capture failed.
    let v = stat_json(&control);
    assert!(v["engine"]["bytes_in"].as_u64().unwrap() > 1 << 20, "{v}");
    let seen =
        v["engine"]["frames_in"].as_u64().unwrap() + v["engine"]["frames_out"].as_u64().unwrap();
    let out = eng.terminate();
    reader.join().unwrap();
    log.extend(lines.try_iter());
    let err = log.join("\n");
    assert!(out.status.success(), "engine exit: {:?}\n{err}", out.status);
    let failed: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("pcap: writing /dev/full failed"))
        .collect();
    assert_eq!(failed.len(), 1, "one error, once:\n{err}");
    assert!(
        failed[0].contains("ERROR")
            && failed[0].contains("after 0 frames: No space left on device")
            && failed[0].contains("the engine runs on"),
        "{err}"
    );
    let stop = err
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "softoe engine: pcap /dev/full: stopped after 0 frames: No space left on device \
                 (os error 28); ",
            )
        })
        .unwrap_or_else(|| panic!("no stop line:\n{err}"));
    let missed: u64 = stop
        .strip_suffix(" frames not captured.")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stop}"));
    // Every frame: none reached the file.
    assert!(missed >= seen, "{stop}: {seen} frames by softoe stat");
}
