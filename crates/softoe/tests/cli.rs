//! The `softoe` binary: `softoe engine` on a TAP in a namespace, `softoe
//! stat` (text and JSON) seeing a live connection, clean shutdown on
//! SIGTERM, and clear errors for bad input. The engine tests need root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use softoe_testbed::Testbed;

const BIN: &str = env!("CARGO_BIN_EXE_softoe");

fn softoe(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap()
}

/// Kills the engine if a test fails before stopping it.
struct Running(Option<Child>);

impl Running {
    fn terminate(&mut self) -> Output {
        let child = self.0.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn stat_json(control: &Path) -> serde_json::Value {
    let out = softoe(&["stat", "--json", "--control", control.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "softoe stat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("softoe stat --json prints JSON")
}

#[test]
fn engine_serves_and_stat_shows_a_live_connection() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let sw = tb.netns("sw").unwrap();
    let linux = tb.netns("lx").unwrap();
    tb.bridge(&sw, "br0").unwrap();
    tb.veth_to_bridge(&linux, "eth0", &sw, "br0").unwrap();
    tb.addr(&linux, "eth0", "10.8.0.2/24").unwrap();
    let control: PathBuf =
        std::env::temp_dir().join(format!("softoe-cli-{}.sock", std::process::id()));
    let pcap = std::env::temp_dir().join(format!("softoe-cli-{}.pcap", std::process::id()));
    let mut engine = Running(Some(
        Command::new("ip")
            .args(["netns", "exec", sw.name(), BIN, "engine"])
            .args([
                "--address",
                "10.8.0.1/24",
                "--bridge",
                "br0",
                "--tap",
                "socli0",
            ])
            .args(["-s", "discard:9", "-s", "echo:7", "--control"])
            .arg(&control)
            .arg("--pcap")
            .arg(&pcap)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let end = Instant::now() + Duration::from_secs(10);
    while !control.exists() {
        assert!(Instant::now() < end, "the engine made no control socket");
        std::thread::sleep(Duration::from_millis(20));
    }

    // A Linux client holds a connection open mid-transfer.
    let (go_on, wait) = mpsc::channel::<()>();
    let client = linux
        .spawn(move || {
            let to = SocketAddrV4::new([10, 8, 0, 1].into(), 9);
            let mut s = TcpStream::connect_timeout(&to.into(), Duration::from_secs(5)).unwrap();
            s.write_all(&vec![7u8; 1 << 20]).unwrap();
            wait.recv().unwrap();
            s.write_all(&vec![7u8; 1 << 20]).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
        })
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let conn = loop {
        let v = stat_json(&control);
        let found = v["connections"].as_array().unwrap().iter().find(|c| {
            c["local"] == "10.8.0.1:9"
                && c["state"] == "ESTAB"
                && c["bytes_received"].as_u64() == Some(1 << 20)
        });
        if let Some(c) = found {
            let idle = v["engine"]["idle_nanos"].as_u64().unwrap();
            let run = v["engine"]["run_nanos"].as_u64().unwrap();
            assert!(idle <= run, "asleep longer than running: {idle} > {run}");
            break c.clone();
        }
        assert!(
            Instant::now() < end,
            "no live connection in softoe stat: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(conn["remote"].as_str().unwrap().starts_with("10.8.0.2:"));
    assert!(conn["cwnd"].as_u64().unwrap() > 0 && conn["snd_mss"].as_u64() == Some(1448));
    let text = softoe(&["stat", "--control", control.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("ESTAB") && text.contains("10.8.0.1:9") && text.contains("rtt:"),
        "softoe stat:\n{text}"
    );
    // The priority is always in the JSON, and in the text only when set.
    assert_eq!(conn["priority"], 0, "{conn}");
    assert!(!text.contains("prio:"), "softoe stat:\n{text}");
    go_on.send(()).unwrap();
    client.join().unwrap();

    let out = engine.terminate();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "engine exit: {:?}\n{err}", out.status);
    assert!(err.contains("softoe engine stopped"), "{err}");
    assert!(!control.exists(), "the control socket is removed on exit");
    // The pcap opens and holds the handshake (tcpdump reads it).
    let dump = Command::new("tcpdump")
        .args(["-n", "-r"])
        .arg(&pcap)
        .args(["tcp[tcpflags] & tcp-syn != 0"])
        .output()
        .expect("tcpdump runs");
    let lines = String::from_utf8_lossy(&dump.stdout);
    assert!(lines.lines().count() >= 2, "SYN and SYN-ACK: {lines}");
    let _ = std::fs::remove_file(&pcap);
}

/// `softoe engine --afpacket` on a veth, with seeded faults: an echo
/// through a lossy port still returns every byte.
#[test]
fn engine_on_afpacket_with_faults() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let eng = tb.netns("eng").unwrap();
    let linux = tb.netns("lx").unwrap();
    tb.veth(&eng, "veth1", &linux, "eth0").unwrap();
    tb.addr(&linux, "eth0", "10.8.1.2/24").unwrap();
    // Linux sends wire-sized segments, so each fault hits one segment.
    tb.ethtool_k(&linux, "eth0", &["tso", "off", "gso", "off", "gro", "off"])
        .unwrap();
    let control: PathBuf =
        std::env::temp_dir().join(format!("softoe-cli-af-{}.sock", std::process::id()));
    let mut engine = Running(Some(
        Command::new("ip")
            .args(["netns", "exec", eng.name(), BIN, "engine"])
            .args(["--address", "10.8.1.1/24", "--afpacket", "veth1"])
            .args(["--fault-loss", "0.01", "--fault-seed", "7", "-s", "echo:7"])
            .arg("--control")
            .arg(&control)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let end = Instant::now() + Duration::from_secs(10);
    while !control.exists() {
        assert!(Instant::now() < end, "the engine made no control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let ok = linux
        .run(|| {
            let to = SocketAddrV4::new([10, 8, 1, 1].into(), 7);
            let mut s = TcpStream::connect_timeout(&to.into(), Duration::from_secs(10)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let data: Vec<u8> = (0..2u32 << 20).map(|i| (i * 7 + i / 1000) as u8).collect();
            let mut w = s.try_clone().unwrap();
            let d2 = data.clone();
            let writer = std::thread::spawn(move || {
                w.write_all(&d2).unwrap();
                w.shutdown(std::net::Shutdown::Write).unwrap();
            });
            let mut back = Vec::new();
            s.read_to_end(&mut back).unwrap();
            writer.join().unwrap();
            back == data
        })
        .unwrap();
    assert!(ok, "the echo came back different");
    let v = stat_json(&control);
    assert!(
        v["port"].as_str().unwrap().contains("faults"),
        "{}",
        v["port"]
    );
    // 1 % of the some 1,500 wire-sized segments Linux sent: the port
    // lost some on receive, and `softoe stat` says so (JSON and text). The
    // engine's own frames are TSO super-segments, a few dozen: counted,
    // perhaps none lost.
    let rx = &v["faults"]["rx"];
    assert!(rx["frames"].as_u64().unwrap() > 1000, "{rx}");
    assert!(rx["lost"].as_u64().unwrap() > 0, "{rx}");
    assert!(v["faults"]["tx"]["frames"].as_u64().unwrap() > 0, "{v}");
    let text = softoe(&["stat", "--control", control.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    let lost = rx["lost"].as_u64().unwrap();
    assert!(
        text.contains("faults injected at the port: rx ") && text.contains(&format!("{lost} lost")),
        "{text}"
    );
    let out = engine.terminate();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "engine exit: {:?}\n{err}", out.status);
    // And the engine's last words count them.
    assert!(
        err.contains("faults injected at the port: rx ") && err.contains(" lost, "),
        "{err}"
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    let out = softoe(&["engine", "--tap", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no address"));
    let out = softoe(&["engine", "--address", "10.0.0.1/40"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("1–32"));
    let out = softoe(&["engine", "--address", "10.0.0.1/24", "-s", "chargen:19"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown service"));
    let out = softoe(&["stat", "--control", "/nonexistent/softoe.sock"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("softoe engine"));
    let cfg = std::env::temp_dir().join(format!("softoe-cli-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[engine]\nspinn_us = 3\n").unwrap();
    let out = softoe(&["engine", "--config", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = std::fs::remove_file(&cfg);
    assert!(err.contains("spinn_us"), "{err}");
}

#[test]
fn run_refuses_clearly() {
    let out = softoe(&["run", "--engine", "/nonexistent/host.sock", "--", "true"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains("no softoe engine at /nonexistent/host.sock"),
        "{err}"
    );
    assert!(err.contains("softoe engine --host"), "{err}");
    let not_socket = std::env::temp_dir().join(format!("softoe-cli-run-{}", std::process::id()));
    std::fs::write(&not_socket, "").unwrap();
    let out = softoe(&[
        "run",
        "--engine",
        not_socket.to_str().unwrap(),
        "--",
        "true",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("is not a socket"), "{err}");
    let _ = std::fs::remove_file(&not_socket);
    // A dead engine's socket file: refused, and the program never runs
    // (it would have run on Linux's TCP).
    let dead = std::env::temp_dir().join(format!("softoe-cli-dead-{}.sock", std::process::id()));
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let witness = std::env::temp_dir().join(format!("softoe-cli-ran-{}", std::process::id()));
    let out = softoe(&[
        "run",
        "--engine",
        dead.to_str().unwrap(),
        "--",
        "touch",
        witness.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("no softoe engine answers at"), "{err}");
    assert!(!witness.exists(), "the program ran without an engine");
    let _ = std::fs::remove_file(&dead);
    let out = softoe(&["run", "--kernel-nets", "10.0.0.0/33", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("not an IPv4 network"), "{err}");
    let out = softoe(&["run"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("PROGRAM"));
}

/// `softoe run -- PROGRAM` against an engine process: a Python client on
/// softoe sends to Linux; the engine's `softoe stat` shows the session
/// while it runs, and the bytes arrive.
#[test]
fn run_puts_a_program_on_the_engine() {
    if Command::new("python3").arg("-V").output().is_err() {
        eprintln!("python3 not installed: skipped");
        assert!(
            std::env::var_os("SOFTOE_CI").is_none(),
            "python3 missing in CI"
        );
        return;
    }
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let sw = tb.netns("sw").unwrap();
    let linux = tb.netns("lx").unwrap();
    tb.bridge(&sw, "br0").unwrap();
    tb.veth_to_bridge(&linux, "eth0", &sw, "br0").unwrap();
    tb.addr(&linux, "eth0", "10.9.0.2/24").unwrap();
    let dir = std::env::temp_dir();
    let control = dir.join(format!("softoe-run-{}.ctl", std::process::id()));
    let host = dir.join(format!("softoe-run-{}.sock", std::process::id()));
    let _engine = Running(Some(
        Command::new("ip")
            .args(["netns", "exec", sw.name(), BIN, "engine"])
            .args([
                "--address",
                "10.9.0.1/24",
                "--bridge",
                "br0",
                "--tap",
                "sorun0",
            ])
            .arg("--control")
            .arg(&control)
            .arg("--host")
            .arg(&host)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let end = Instant::now() + Duration::from_secs(10);
    while !(control.exists() && host.exists()) {
        assert!(Instant::now() < end, "the engine made no sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    let l = linux
        .run(|| std::net::TcpListener::bind("10.9.0.2:7070").unwrap())
        .unwrap();
    let sink = linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            all
        })
        .unwrap();
    let script = "import socket,time\n\
                  s=socket.create_connection(('10.9.0.2',7070))\n\
                  s.sendall(b'softoe run ' * 100000)\n\
                  time.sleep(1.5)\n\
                  s.close()\n";
    let child = Command::new(BIN)
        .args([
            "run",
            "--engine",
            host.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut prog = Running(Some(child));
    // While it runs, the engine lists its session.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let v = stat_json(&control);
        if v["sessions"].as_array().is_some_and(|s| !s.is_empty()) {
            break;
        }
        assert!(Instant::now() < end, "no session in softoe stat: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = prog.0.take().unwrap().wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(sink.join().unwrap(), b"softoe run ".repeat(100_000));
}

/// The README's main command, small: every row measured on both sides, the
/// softoe side a separate program attached to the engine.
#[test]
fn demo_runs_with_its_servers_in_a_separate_program() {
    let out = softoe(&[
        "demo",
        "--json",
        "--bytes",
        "8M",
        "--drop-bytes",
        "4M",
        "--rounds",
        "200",
    ]);
    assert!(
        out.status.success(),
        "softoe demo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for r in rows {
        assert!(r["softoe"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["linux"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(v["engine"]["bytes_in"].as_u64().unwrap() > 8 << 20);
    assert!(
        v["wire_dropped"].as_u64().unwrap() > 0,
        "no drops on the wire"
    );
}

/// `softoe bench`, small: every scenario measured on softoe and on Linux,
/// CPU counted, the targets computed (the figures are not judged here:
/// this machine is shared and noisy).
#[test]
fn bench_measures_both_sides() {
    let plots = std::env::temp_dir().join(format!("softoe-bench-test-{}", std::process::id()));
    let out = softoe(&[
        "bench",
        "--quick",
        "--json",
        "--bytes",
        "16M",
        "--rounds",
        "100",
        "--scale-max",
        "100",
        "--plots",
        plots.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "softoe bench: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bulk = v["bulk"].as_array().unwrap();
    assert_eq!(bulk.len(), 16, "4 systems × 2 directions × 1 and 8 conns");
    // /proc/stat counts in 10 ms ticks: one small run may see none, all
    // of them together do.
    let machine: f64 = bulk
        .iter()
        .map(|r| r["machine_s_per_gib"].as_f64().unwrap())
        .sum();
    assert!(machine > 0.0, "no machine CPU counted");
    for r in bulk {
        assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["machine_s_per_gib"].as_f64().unwrap() >= 0.0, "{r}");
        if r["system"].as_str().unwrap().starts_with("softoe") {
            assert!(r["engine_s_per_gib"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let lat = v["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 6, "2 systems × 3 sizes");
    for r in lat {
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["p999_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
    }
    assert_eq!(
        v["targets"].as_array().unwrap().len(),
        18,
        "5 bulk targets for copy, overlap and zerocopy, the round trip, connections held, \
         engine cycles per request (p99 at 10,000 ÷ 1,000 needs both counts)"
    );
    let scale = v["scale"].as_array().unwrap();
    assert_eq!(scale.len(), 4, "2 systems × 1 and 100 connections");
    for r in scale {
        assert!(r["rps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["held_p99_us"].as_f64().unwrap() >= r["held_p50_us"].as_f64().unwrap());
        if r["system"] == "softoe" {
            assert!(r["engine_ns_per_rpc"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let cost = &v["engine_cost"];
    assert!(cost["requests"].as_u64().unwrap() > 0, "{cost}");
    assert!(cost["user_ns"].as_f64().unwrap() + cost["sys_ns"].as_f64().unwrap() > 0.0);
    let abl = v["ablation"].as_array().unwrap();
    assert_eq!(
        abl.len(),
        24,
        "4 offload sets × 3 policies × coalescing off/on"
    );
    for r in abl {
        assert!(r["bulk_gbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["rr4_p50_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    let co = v["coalescing"].as_array().unwrap();
    assert_eq!(co.len(), 4);
    assert_eq!(co[3]["delay_us"].as_u64(), Some(100));
    for (name, legend) in [
        ("latency.svg", "Linux p50"),
        ("bandwidth.svg", "softoe overlap"),
        ("host-cpu.svg", "Linux"),
        ("coalescing-latency.svg", "p99"),
        ("coalescing-goodput.svg", "host→Linux"),
        ("scale-latency.svg", "softoe p99"),
        ("scale-throughput.svg", "Linux"),
    ] {
        let svg = std::fs::read_to_string(plots.join(name)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains(legend), "{name}");
    }
    let _ = std::fs::remove_dir_all(&plots);
}

/// `softoe bench --only loss`, small: at 2 % on the plain link and 5 % on
/// the millisecond-RTT one, the four transfers each moved checked bytes,
/// the wire dropped data in each, and every sender — softoe's counters
/// read from the engine's snapshots, Linux's from its namespace — counted
/// the retransmissions that repaired it. (The figures are not judged.)
#[test]
fn bench_loss_sweep_measures_four_transfers() {
    let plots = std::env::temp_dir().join(format!("softoe-bench-loss-{}", std::process::id()));
    let out = softoe(&[
        "bench",
        "--only",
        "loss",
        "--json",
        "--loss",
        "2",
        "--loss-ms-rtt",
        "5",
        "--loss-bytes",
        "2M",
        "--loss-secs",
        "20",
        "--plots",
        plots.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "softoe bench: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["bulk"].as_array().unwrap().is_empty(),
        "only the sweep ran"
    );
    assert!(
        v["loss_command"]
            .as_str()
            .unwrap()
            .starts_with("softoe bench --only loss --loss 2 --loss-bytes 2M"),
        "{}",
        v["loss_command"]
    );
    let rows = v["loss"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "4 transfers × 2 links");
    let mut series: Vec<&str> = rows.iter().map(|r| r["series"].as_str().unwrap()).collect();
    series.sort_unstable();
    series.dedup();
    assert_eq!(
        series,
        [
            "Linux receives",
            "Linux sends",
            "softoe receives",
            "softoe sends"
        ]
    );
    for r in rows {
        assert!(r["error"].is_null(), "{r}");
        assert_eq!(r["intact"], true, "{r}");
        let bytes = r["bytes"].as_u64().unwrap();
        if r["capped"] == false {
            assert_eq!(bytes, 2 << 20, "{r}");
        }
        assert!(
            bytes > 0 && r["goodput_mbps"].as_f64().unwrap() > 0.0,
            "{r}"
        );
        // 2 % of some 1,450 segments or more: data was lost, so the
        // sender retransmitted (a transfer that arrived whole had to).
        assert!(r["data_dropped"].as_u64().unwrap() > 0, "{r}");
        assert!(r["sender"]["retrans"].as_u64().unwrap() > 0, "{r}");
        assert!(r["retrans_per_drop"].as_f64().unwrap() > 0.0, "{r}");
        let softoe = r["series"].as_str().unwrap().starts_with("softoe");
        assert_eq!(r["vs_linux"].is_number(), softoe, "{r}");
        assert_eq!(
            r["sender_srtt_ms"].is_number(),
            r["series"] == "softoe sends",
            "{r}"
        );
    }
    for (name, legend) in [
        ("loss-goodput.svg", "softoe sends"),
        ("loss-goodput-ms-rtt.svg", "Linux receives"),
    ] {
        let svg = std::fs::read_to_string(plots.join(name)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains(legend), "{name}");
    }
    let _ = std::fs::remove_dir_all(&plots);
}

/// `softoe bench bond --quick --json`, the smoke test of BondingPlus on a
/// real wire: every experiment ran and has the structure issue 16 asks
/// for. No timing thresholds (these machines are noisy): only what must
/// hold on any machine — both members carry bytes, nothing is lost, one
/// MAC, complete ARP+ tables.
#[test]
fn bench_bond_quick_runs_every_experiment() {
    if !softoe_testbed::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let plots = std::env::temp_dir().join(format!("softoe-bench-bond-{}", std::process::id()));
    let out = softoe(&[
        "bench",
        "bond",
        "--quick",
        "--json",
        "--plots",
        plots.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "softoe bench bond: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["bulk"].as_array().unwrap().is_empty(), "only bond ran");
    let b = &v["bond"];
    let e1 = b["e1"].as_array().unwrap();
    for n in [1, 2] {
        let rows: Vec<_> = e1.iter().filter(|r| r["members"] == n).collect();
        // Two policies × TCP and UDP × two directions.
        assert_eq!(rows.len(), 8, "E1 with {n} members: {rows:?}");
        for r in rows {
            assert!(r["goodput_mbit"].as_f64().unwrap() > 0.0, "{r}");
            let shares: Vec<f64> = r["shares"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_f64().unwrap())
                .collect();
            assert_eq!(shares.len(), n, "{r}");
            let sum: f64 = shares.iter().sum();
            assert!((sum - 1.0).abs() < 0.01, "shares sum to 1: {r}");
        }
    }
    assert_eq!(b["linux_one_link"].as_array().unwrap().len(), 2);
    let e2 = b["e2"].as_array().unwrap();
    assert_eq!(
        e2.len(),
        8,
        "idle and the paper's three scenarios, TCP and UDP"
    );
    for proto in ["tcp", "udp"] {
        assert_eq!(e2.iter().filter(|r| r["proto"] == proto).count(), 4);
    }
    for r in e2 {
        let n = r["samples"].as_u64().unwrap();
        assert!(n >= 1000, "{r}");
        assert!(r["p999_us"].is_null(), "no p99.9 from a quick run: {r}");
        // The wire tap placed most messages on both ends of the switch,
        // and the three parts add up to no more than the whole.
        let seen = r["switch"]["n"].as_u64().unwrap();
        assert!(seen * 10 >= n * 9, "messages seen on the wire: {r}");
        let parts: f64 = ["app_to_wire", "switch", "wire_to_app"]
            .iter()
            .map(|k| r[k]["mean_us"].as_f64().unwrap())
            .sum();
        assert!(parts <= r["mean_us"].as_f64().unwrap() * 1.25 + 50.0, "{r}");
        assert!(r["engines"][0]["cpu"].as_f64().unwrap() > 0.0, "{r}");
    }
    let e3 = b["e3"].as_array().unwrap();
    assert_eq!(
        e3.len(),
        12,
        "three repetitions of each port, shaped and not"
    );
    assert!(e3.iter().all(|r| r["goodput_mbit"].as_f64().unwrap() > 0.0));
    let e4 = b["e4"].as_array().unwrap();
    assert!(!e4.is_empty());
    for r in e4 {
        assert_eq!(r["bytes_lost"], 0, "failover loses nothing: {r}");
    }
    let e5 = &b["e5"][0];
    assert_eq!(e5["macs"].as_array().unwrap().len(), 1, "one MAC: {e5}");
    assert_eq!(e5["changes"], 0, "{e5}");
    for r in b["e6"].as_array().unwrap() {
        assert_eq!(r["complete"], r["reps"], "every ARP+ table completes: {r}");
    }
    assert!(
        b["e6"][1]["drop_percent"].as_f64().unwrap() > 0.0,
        "E6 runs under loss too"
    );
    assert!(!b["targets"].as_array().unwrap().is_empty());
    for name in [
        "bond-e1-goodput.svg",
        "bond-e1-shares.svg",
        "bond-e2-latency-cdf.svg",
    ] {
        let svg = std::fs::read_to_string(plots.join(name)).unwrap();
        assert!(svg.starts_with("<svg"), "{name}");
    }
    let _ = std::fs::remove_dir_all(&plots);
}

/// The README's first command on a fresh machine: nothing installed
/// beyond the kernel and iproute2. The demo runs with a `PATH` holding only
/// `ip`, `tc`, `ss`, `sh` and a few coreutils — no `ethtool`, `nft`,
/// `sysctl`, `tcpdump` or `tshark` — and prints its whole table, the drop
/// rows with frames really dropped on the wire.
#[test]
fn demo_needs_nothing_beyond_the_kernel_and_iproute2() {
    let bin = std::env::temp_dir().join(format!("softoe-cli-path-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir_all(&bin).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let find = |tool: &str| {
        std::env::split_paths(&path)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    };
    for tool in ["ip", "tc", "ss", "sh", "cat", "ls", "sleep"] {
        let real = find(tool).unwrap_or_else(|| panic!("{tool} is not installed"));
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    let out = Command::new(BIN)
        .args([
            "demo",
            "--bytes",
            "8M",
            "--drop-bytes",
            "4M",
            "--rounds",
            "200",
        ])
        .env("PATH", &bin)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&bin);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "softoe demo without ethtool, nft, sysctl, tcpdump, tshark: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    for workload in [
        "bulk Linux→host",
        "bulk host→Linux",
        "4-byte RR p50",
        "4-byte RR p99",
        "1 % drops, Linux→host",
        "1 % drops, host→Linux",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(workload))
            .unwrap_or_else(|| panic!("no row {workload:?} in\n{text}"));
        let ratio = line
            .split_whitespace()
            .find_map(|w| w.strip_suffix('x')?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no ratio in {line:?}"));
        assert!(ratio > 0.0, "{line}");
    }
    let dropped: u64 = text
        .split("the wire dropped ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no drop count in\n{text}"));
    assert!(dropped > 0, "nothing dropped on the wire:\n{text}");
}

/// Two engines on one machine: a second one given the first one's control
/// or host socket refuses to start with one clear line and leaves the first
/// one's sockets alone (`softoe stat` still reaches it); with paths of
/// its own it starts, and both answer. Before, the second deleted the
/// first's control socket at start and again at exit.
#[test]
fn a_second_engine_leaves_the_first_ones_sockets_alone() {
    let mut tb = Testbed::new().unwrap();
    tb.deadline(softoe_testbed::test_deadline());
    let sw = tb.netns("sw").unwrap();
    tb.bridge(&sw, "br0").unwrap();
    let tmp = std::env::temp_dir();
    let pid = std::process::id();
    let path = |what: &str| tmp.join(format!("softoe-cli-two-{what}-{pid}.sock"));
    let (c1, h1, c2, h2) = (path("c1"), path("h1"), path("c2"), path("h2"));
    let engine = |tap: &str, control: &Path, host: &Path| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", sw.name(), BIN, "engine"])
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .args(["--address", "10.9.0.1/24", "--bridge", "br0", "--tap", tap])
            .arg("--control")
            .arg(control)
            .arg("--host")
            .arg(host)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let wait_for = |p: &Path| {
        let end = Instant::now() + Duration::from_secs(10);
        while !p.exists() {
            assert!(Instant::now() < end, "no socket at {}", p.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut first = Running(Some(engine("sotwo1", &c1, &h1).spawn().unwrap()));
    wait_for(&c1);
    wait_for(&h1);
    let port1 = stat_json(&c1)["port"].clone();
    // `softoe stat | head`: a reader that closed its end early is no
    // error (it panicked on the broken pipe before).
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(BIN)
        .args(["stat", "--control", c1.to_str().unwrap()])
        .env_remove("RUST_BACKTRACE")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && err.is_empty(),
        "{:?}: {err}",
        out.status
    );
    // The same control socket; then the same host socket.
    for (c, h, which) in [(&c1, &h2, "control"), (&c2, &h1, "host")] {
        // Bounded: before the fix the second engine ran on.
        let mut second = Running(Some(engine("sotwo2", c, h).spawn().unwrap()));
        let end = Instant::now() + Duration::from_secs(10);
        while second.0.as_mut().unwrap().try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < end,
                "a second engine on the {which} socket started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = second.0.take().unwrap().wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success(),
            "a second engine on the {which} socket started"
        );
        assert!(err.contains("another engine answers at"), "{which}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert_eq!(
            stat_json(&c1)["port"],
            port1,
            "the first engine still answers"
        );
        assert!(h1.exists(), "the first engine's host socket is still there");
    }
    // Paths of its own: both run, and each answers for itself.
    let mut second = Running(Some(engine("sotwo2", &c2, &h2).spawn().unwrap()));
    wait_for(&c2);
    assert_eq!(stat_json(&c1)["port"], port1);
    assert_ne!(stat_json(&c2)["port"], port1);
    let out = second.terminate();
    assert!(out.status.success());
    let out = first.terminate();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for p in [&c1, &h1, &c2, &h2] {
        assert!(!p.exists(), "{} left behind", p.display());
    }
}

/// `softoe sim predict`, the machine model's smoke test (no root): the same
/// configuration twice gives the same event log; offload takes the stack's
/// work off the host CPU; a bad field is refused by name.
#[test]
fn sim_predict_is_deterministic_and_shows_offload() {
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "sim",
            "predict",
            "--json",
            "--set",
            "workload.bytes=1048576",
        ];
        args.extend_from_slice(extra);
        let out = softoe(&args);
        assert!(
            out.status.success(),
            "softoe sim predict: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let a = run(&[]);
    let b = run(&[]);
    assert_eq!(a["prediction"]["event_hash"], b["prediction"]["event_hash"]);
    assert!(a["prediction"]["intact"].as_bool().unwrap());
    let without = run(&["--set", "host.offload=false"]);
    let host = |v: &serde_json::Value| v["prediction"]["host_cpu"].as_f64().unwrap();
    assert!(host(&a) < host(&without), "{a}\n{without}");
    assert!(a["laws"]["after_bps"].as_f64().unwrap() > 0.0);
    let bad = softoe(&["sim", "predict", "--set", "engine.sped=1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("sped"));
    let printed = softoe(&["sim", "predict", "--print-config"]);
    assert!(String::from_utf8_lossy(&printed.stdout).contains("[workload]"));
}

/// A machine file for the emulation tests: the documented defaults but a
/// small stream, written where only this test looks.
fn machine_file(tag: &str, body: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("softoe-machine-{tag}-{}.toml", std::process::id()));
    std::fs::write(&p, body).unwrap();
    p
}

/// `softoe bench --emulate --quick --json` with offload and without (CI,
/// root): the real engine, and Linux's TCP, move the file's workload, and
/// the JSON carries the model's names with the run's own figures and, with
/// offload, the engine's counters. (The figures are printed, not judged.)
#[test]
fn bench_emulate_measures_with_and_without_offload() {
    let cfg = machine_file(
        "emulate",
        "[workload]\nkind = \"stream\"\ndirection = \"send\"\nmessage = 16384\n",
    );
    for offload in [true, false] {
        let set = format!("host.offload={offload}");
        let out = softoe(&[
            "bench",
            "--emulate",
            cfg.to_str().unwrap(),
            "--set",
            &set,
            "--quick",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "softoe bench --emulate ({set}): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let m = &v["measured"];
        eprintln!(
            "{set}: {:.3} Gb/s, host CPU {:.3}, engine CPU {:.3}",
            m["throughput_bps"].as_f64().unwrap() / 1e9,
            m["host_cpu"].as_f64().unwrap(),
            m["engine_cpu"].as_f64().unwrap()
        );
        assert!(m["throughput_bps"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["messages_per_sec"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["host_cpu"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["window_seconds"].as_f64().unwrap() > 0.0, "{m}");
        // --quick: 16 MiB of the file's 64 MiB, in 16 KiB writes.
        assert_eq!(m["payload_bytes"], 16u64 << 20, "{m}");
        assert_eq!(m["messages"], 1024, "{m}");
        // A stream has no round trips to report.
        assert!(
            m["latency_p50_us"].is_null() && m["rtt_p50_us"].is_null(),
            "{m}"
        );
        assert_eq!(v["config"]["host"]["offload"], offload);
        assert_eq!(v["emulation"]["offload"], offload);
        if offload {
            assert!(m["engine_cpu"].as_f64().unwrap() > 0.0, "{m}");
            let e = &m["engine"];
            assert!(e["frames_out"].as_u64().unwrap() > 0, "{e}");
            assert!(e["ring_accesses"].as_u64().unwrap() > 0, "{e}");
        } else {
            assert_eq!(m["engine_cpu"], 0.0, "{m}");
            assert!(m["engine"].is_null(), "{m}");
        }
    }
    // Request/response reports half the round trip as one-way latency.
    let out = softoe(&[
        "bench",
        "--emulate",
        cfg.to_str().unwrap(),
        "--set",
        "workload.kind=rr",
        "--set",
        "workload.message=64",
        "--set",
        "workload.requests=200",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["measured"];
    let (p50, rtt) = (
        m["latency_p50_us"].as_f64().unwrap(),
        m["rtt_p50_us"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && (rtt - 2.0 * p50).abs() < 1e-6, "{m}");
    assert_eq!(m["messages"], 200, "{m}");
    let _ = std::fs::remove_file(&cfg);
}

/// `softoe sim validate --quick --reps 1 --json` over an offload/Linux pair
/// (CI, root): each file is predicted and measured, the rows carry both
/// and their error, and the pair is found. A file that cannot be emulated
/// is refused before anything runs. (Figures printed, not judged.)
#[test]
fn sim_validate_predicts_and_measures_each_file() {
    let dir = std::env::temp_dir().join(format!("softoe-validate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let body = |offload: bool| {
        format!(
            "[host]\noffload = {offload}\n[link]\ngso = true\ngbps = 100.0\n\
             [workload]\nkind = \"rr\"\nmessage = 64\nrequests = 300\n"
        )
    };
    std::fs::write(dir.join("a-offload.toml"), body(true)).unwrap();
    std::fs::write(dir.join("b-linux.toml"), body(false)).unwrap();
    let out = softoe(&[
        "sim",
        "validate",
        dir.to_str().unwrap(),
        "--quick",
        "--reps",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "softoe sim validate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        eprintln!(
            "{}: predicted {:.3} Gb/s, measured {:.3}, p50 {} / {} µs",
            r["name"],
            r["predicted_bps"].as_f64().unwrap() / 1e9,
            r["measured_bps"].as_f64().unwrap() / 1e9,
            r["predicted_p50_us"],
            r["measured_p50_us"]
        );
        assert!(r["measured_bps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["predicted_bps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["measured_p50_us"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["measured"]["messages"], 300, "{r}");
    }
    let pairs = v["summary"]["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{v}");
    assert_eq!(pairs[0]["offload"], "a-offload");
    assert_eq!(pairs[0]["linux"], "b-linux");
    // Refused before any run: a rate the machine cannot emulate.
    std::fs::write(dir.join("c-lossy.toml"), "[link]\nloss = 0.01\n").unwrap();
    let out = softoe(&["sim", "validate", dir.to_str().unwrap(), "--quick"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("c-lossy") && err.contains("cannot be emulated"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What this machine cannot emulate is refused by name, before anything
/// is built (no root needed).
#[test]
fn bench_emulate_refuses_what_it_cannot_emulate() {
    let cfg = machine_file("refuse", "");
    for (set, want) in [
        ("link.loss=0.01", "link.loss = 0.01 cannot be emulated"),
        ("link.mtu=9000", "link.mtu = 9000 cannot be emulated"),
        ("engine.speed=2", "can only be slowed"),
        ("engine.sped=1", "sped"),
    ] {
        let out = softoe(&["bench", "--emulate", cfg.to_str().unwrap(), "--set", set]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{set} was accepted");
        assert!(err.contains(want), "{set}: {err}");
    }
    let out = softoe(&["bench", "--emulate", "/nonexistent/machine.toml"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/machine.toml"));
    // --set belongs to --emulate.
    let out = softoe(&["bench", "--set", "engine.speed=0.5"]);
    assert!(!out.status.success());
    let _ = std::fs::remove_file(&cfg);
}

/// The calibration round trip (CI, root): `softoe sim calibrate --quick`
/// writes a calibration `softoe sim predict` reads, fitted from every run;
/// predicting the calibration's own 64 KiB stream send with it is set
/// beside the throughput measured in that run. The issue's target is 5 %;
/// the gap is printed, and only structure is asserted (see the README: the
/// unshaped veth runs faster than the model's 10 Gb/s link).
#[test]
fn sim_calibrate_round_trip() {
    let cal = std::env::temp_dir().join(format!("softoe-cal-{}.toml", std::process::id()));
    let out = softoe(&[
        "sim",
        "calibrate",
        "--quick",
        "--json",
        "--out",
        cal.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "softoe sim calibrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let note = v["calibration"]["note"].as_str().unwrap();
    assert!(
        note.starts_with("softoe sim calibrate --quick, 20"),
        "{note}"
    );
    let fitted: Vec<&str> = v["fits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["stage"].as_str().unwrap())
        .collect();
    for stage in [
        "stack_rx",
        "port_tx",
        "stack_tx",
        "completion",
        "copy",
        "syscall",
    ] {
        assert!(fitted.contains(&stage), "{stage} not fitted: {fitted:?}");
    }
    assert_eq!(v["runs"].as_array().unwrap().len(), 13);
    let run = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["label"] == "stream send 65536 offload")
        .unwrap();
    let measured = run["measured"]["throughput_bps"].as_f64().unwrap();
    let mut args = vec![
        "sim".to_string(),
        "predict".into(),
        "--json".into(),
        "--calibration".into(),
        cal.to_str().unwrap().into(),
    ];
    for s in run["set"].as_array().unwrap() {
        args.push("--set".into());
        args.push(s.as_str().unwrap().into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = softoe(&args);
    assert!(
        out.status.success(),
        "softoe sim predict with the calibration: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let predicted = p["prediction"]["throughput_bps"].as_f64().unwrap();
    eprintln!(
        "calibration round trip, 64 KiB stream send: measured {:.3} Gb/s, predicted {:.3} Gb/s \
         ({:+.1} %)",
        measured / 1e9,
        predicted / 1e9,
        (predicted / measured - 1.0) * 100.0
    );
    assert!(measured > 0.0 && predicted > 0.0);
    assert_eq!(p["calibration"].as_str().unwrap(), note);
    let _ = std::fs::remove_file(&cal);
}

/// `softoe sim offload`, the scenarios' smoke test (no root): Table I's
/// quick sweep as JSON has a row per memory delay and the kernel path, each
/// with its event hash, EMO and LAWS beside it; the same sweep twice gives
/// the same hash; the map's quick sweep has a row per size; a bad scenario
/// is refused with the choices.
#[test]
fn sim_offload_scenarios_run_and_are_deterministic() {
    let run = |args: &[&str]| -> serde_json::Value {
        let out = softoe(args);
        assert!(
            out.status.success(),
            "softoe {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let t1 = [
        "sim",
        "offload",
        "table1",
        "--quick",
        "--json",
        "--connections",
        "1",
    ];
    let a = run(&t1);
    let b = run(&t1);
    assert_eq!(a["sweep_hash"], b["sweep_hash"]);
    assert_eq!(a["scenario"], "table1");
    let rows = a["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{a}");
    let delays: Vec<f64> = rows.iter().map(|r| r["x"].as_f64().unwrap()).collect();
    assert_eq!(delays, [1.0, 2.0, 4.0, 6.0, 10.0, 0.0]);
    for r in rows {
        assert_eq!(
            r["runs"][0]["event_hash"].as_str().unwrap().len(),
            16,
            "{r}"
        );
        assert!(r["runs"][0]["intact"].as_bool().unwrap(), "{r}");
        assert!(r["latency_p50_us"]["mean"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["emo"]["latency_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["laws"]["bps"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(!rows[5]["offload"].as_bool().unwrap());
    assert!(a["calibration"].as_str().unwrap().contains("defaults"));
    let m = run(&["sim", "offload", "map", "--quick", "--json"]);
    assert_eq!(m["rows"].as_array().unwrap().len(), 4, "{m}");
    let bad = softoe(&["sim", "offload", "table2"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("hltcp-fig7"));
    let bad = softoe(&["sim", "offload", "fig8", "--plot", "x.png"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains(".svg"));
}
