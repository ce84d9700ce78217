//! Unmodified programs on softoe through the LD_PRELOAD shim, against
//! Linux's own TCP in the testbed: the data is checked end to end, and the
//! engine's counters show it carried the bytes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod shim;

use shim::*;
use softoe_engine::testing::{ENGINE_IP, LINUX_IP, sha256, wait_for};

/// curl on softoe fetches 100 MiB from an HTTP server on Linux.
#[test]
fn curl_on_softoe_fetches_from_linux() {
    if !have("curl") || !have("python3") {
        return;
    }
    let mut bed = bed();
    let dir = tempdir("curl");
    let (_, want) = pattern_file(&dir, "blob", 100 << 20);
    let _server = Child(
        on_linux(&bed, "python3")
            .args(["-m", "http.server", "8080", "--bind", &LINUX_IP.to_string()])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&bed, 8080);
    let out = dir.join("got");
    let t0 = Instant::now();
    let st = on_softoe(&bed, "curl")
        .args(["-sS", "--fail", "-o"])
        .arg(&out)
        .arg(format!("http://{LINUX_IP}:8080/blob"))
        .status()
        .unwrap();
    let took = t0.elapsed();
    assert!(st.success(), "curl failed: {st}");
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), 100 << 20);
    assert_eq!(sha256(&got), want, "curl got other bytes");
    let c = bed.stop().unwrap();
    eprintln!(
        "curl on softoe: 100 MiB in {took:?} ({:.0} Mbit/s); engine read {} MiB",
        (100u64 << 23) as f64 / took.as_secs_f64() / 1e6,
        c.bytes_in >> 20
    );
    assert!(
        c.bytes_in > 100 << 20,
        "the engine did not carry the transfer"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = ENGINE_IP;
}

/// Runs `cmd` to completion within `secs`, or kills it and fails.
/// curl on Linux fetches 100 MiB from an HTTP server (Python's, whose
/// loop is `poll`) running on softoe.
#[test]
fn linux_curl_fetches_from_a_server_on_softoe() {
    if !have("curl") || !have("python3") {
        return;
    }
    let mut bed = bed();
    let dir = tempdir("pysrv");
    let (_, want) = pattern_file(&dir, "blob", 100 << 20);
    let _server = Child(
        on_softoe(&bed, "python3")
            .args(["-m", "http.server", "8081", "--bind", "0.0.0.0"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Listening on the engine: poll until curl gets an answer.
    let out = dir.join("got");
    let url = format!("http://{ENGINE_IP}:8081/blob");
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = on_linux(&bed, "curl");
        c.args(["-sS", "--fail", "-o"]).arg(&out).arg(&url);
        let o = run_for(c, 60, "curl");
        if o.status.success() {
            break;
        }
        assert!(
            Instant::now() < end,
            "curl from Linux failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let got = std::fs::read(&out).unwrap();
    assert_eq!(sha256(&got), want, "Linux got other bytes");
    let c = bed.stop().unwrap();
    assert!(
        c.bytes_out > 100 << 20,
        "the engine did not carry the transfer"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// ncat both ways with a 100 MiB file: softoe sends to a Linux listener,
/// then Linux sends to a listener on softoe.
#[test]
fn ncat_both_ways() {
    if !have("ncat") {
        return;
    }
    let bed = bed();
    let dir = tempdir("ncat");
    let (file, want) = pattern_file(&dir, "blob", 100 << 20);
    // softoe → Linux.
    let sink = dir.join("at-linux");
    let listener = on_linux(&bed, "sh")
        .arg("-c")
        .arg(format!(
            "ncat -l {LINUX_IP} 9000 --recv-only > {}",
            sink.display()
        ))
        .spawn()
        .unwrap();
    let _l = Child(listener);
    wait_listening(&bed, 9000);
    let mut send = on_softoe(&bed, "ncat");
    send.args(["--send-only", &LINUX_IP.to_string(), "9000"])
        .stdin(std::fs::File::open(&file).unwrap());
    let o = run_for(send, 60, "ncat on softoe sending");
    assert!(
        o.status.success(),
        "ncat: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    wait_for(20, "the Linux ncat to finish", || {
        std::fs::metadata(&sink).is_ok_and(|m| m.len() == 100 << 20)
    })
    .unwrap();
    assert_eq!(
        sha256(&std::fs::read(&sink).unwrap()),
        want,
        "softoe → Linux differs"
    );
    // Linux → softoe.
    let sink2 = dir.join("at-softoe");
    let mut recv = on_softoe(&bed, "sh");
    recv.arg("-c").arg(format!(
        "exec ncat -l 0.0.0.0 9001 --recv-only > {}",
        sink2.display()
    ));
    let recv = Child(recv.spawn().unwrap());
    let mut send = on_linux(&bed, "sh");
    send.arg("-c").arg(format!(
        "for i in $(seq 100); do ncat --send-only {ENGINE_IP} 9001 < {} && exit 0; sleep 0.1; done; exit 1",
        file.display()
    ));
    let o = run_for(send, 60, "ncat on Linux sending");
    assert!(
        o.status.success(),
        "Linux ncat: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    wait_for(20, "the softoe ncat to finish", || {
        std::fs::metadata(&sink2).is_ok_and(|m| m.len() == 100 << 20)
    })
    .unwrap();
    drop(recv);
    assert_eq!(
        sha256(&std::fs::read(&sink2).unwrap()),
        want,
        "Linux → softoe differs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// iperf3 with four streams, both directions, with the client on softoe
/// and with the server on softoe (its default dual-stack `::` socket: the
/// shim serves the IPv4 side).
#[test]
fn iperf3_four_streams_both_ways() {
    if !have("iperf3") {
        return;
    }
    let mut bed = bed();
    let mut carried = 0.0;
    let bytes = |o: &std::process::Output| -> (f64, f64) {
        let s = String::from_utf8_lossy(&o.stdout);
        // From --json: end.sum_sent.bytes and end.sum_received.bytes.
        let grab = |key: &str| -> f64 {
            let at = s
                .find(key)
                .unwrap_or_else(|| panic!("no {key} in iperf3 output: {s}"));
            let rest = &s[at..];
            let b = rest.find("\"bytes\":").unwrap() + 8;
            rest[b..]
                .trim_start()
                .split(|c: char| c == ',' || c.is_whitespace())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        (grab("\"sum_sent\""), grab("\"sum_received\""))
    };
    // Client on softoe, server on Linux.
    let _srv = Child(
        on_linux(&bed, "iperf3")
            .args(["-s", "-B", &LINUX_IP.to_string(), "-p", "5201"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&bed, 5201);
    for reverse in [false, true] {
        let mut c = on_softoe(&bed, "iperf3");
        c.args([
            "-c",
            &LINUX_IP.to_string(),
            "-p",
            "5201",
            "-P",
            "4",
            "-t",
            "2",
            "--json",
        ]);
        if reverse {
            c.arg("-R");
        }
        let o = run_for(c, 60, "iperf3 client on softoe");
        assert!(
            o.status.success(),
            "iperf3: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        let (sent, received) = bytes(&o);
        eprintln!(
            "iperf3 -P 4 client on softoe{}: {sent} sent, {received} received",
            if reverse { " -R" } else { "" }
        );
        assert!(received > 0.0 && received <= sent);
        carried += received;
    }
    // Server on softoe, client on Linux.
    let _srv2 = Child(
        on_softoe(&bed, "iperf3")
            .args(["-s", "-p", "5202"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for reverse in [false, true] {
        let mut c = on_linux(&bed, "sh");
        c.arg("-c").arg(format!(
            // iperf3 3.12 may exit 0 with an error in its JSON: retry on that too.
            "f=/tmp/iperf3-$$.json; for i in $(seq 50); do iperf3 -c {ENGINE_IP} -p 5202 -P 4 -t 2 --json {} > $f; \
             if [ $? = 0 ] && ! grep -q '\"error\"' $f; then cat $f; rm -f $f; exit 0; fi; sleep 0.2; done; cat $f; rm -f $f; exit 1",
            if reverse { "-R" } else { "" }
        ));
        let o = run_for(c, 90, "iperf3 client on Linux");
        assert!(
            o.status.success(),
            "iperf3 on Linux: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        let (sent, received) = bytes(&o);
        eprintln!(
            "iperf3 -P 4 server on softoe{}: {sent} sent, {received} received",
            if reverse { " -R" } else { "" }
        );
        assert!(received > 0.0 && received <= sent);
        carried += received;
    }
    let c = bed.stop().unwrap();
    assert!(
        (c.bytes_in + c.bytes_out) as f64 >= carried,
        "the engine did not carry iperf3's bytes"
    );
}

/// redis-server on softoe (epoll, non-blocking accept4, keepalive
/// options): redis-benchmark from Linux with 100000 requests and no error,
/// and a 10 MiB value SET and read back with redis-cli.
#[test]
fn redis_on_softoe() {
    if !have("redis-server") || !have("redis-benchmark") || !have("redis-cli") {
        return;
    }
    let bed = bed();
    let dir = tempdir("redis");
    let _server = Child(
        on_softoe(&bed, "redis-server")
            .args(["--port", "6390", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--dir"])
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let host = ENGINE_IP.to_string();
    let mut ping = on_linux(&bed, "sh");
    ping.arg("-c").arg(format!(
        "for i in $(seq 100); do redis-cli -h {host} -p 6390 PING | grep -q PONG && exit 0; sleep 0.1; done; exit 1"
    ));
    assert!(
        run_for(ping, 30, "redis-cli PING").status.success(),
        "redis on softoe never answered"
    );
    let mut b = on_linux(&bed, "redis-benchmark");
    b.args([
        "-h",
        &host,
        "-p",
        "6390",
        "-n",
        "100000",
        "-t",
        "set,get,incr,lpush,lpop",
        "--csv",
    ]);
    let o = run_for(b, 120, "redis-benchmark");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "redis-benchmark: {err}");
    assert!(
        !out.to_lowercase().contains("error") && !err.to_lowercase().contains("error"),
        "{out}{err}"
    );
    for t in ["SET", "GET", "INCR", "LPUSH", "LPOP"] {
        assert!(out.contains(&format!("\"{t}\"")), "no {t} result: {out}");
    }
    eprintln!("redis-benchmark against redis on softoe:\n{out}");
    // A 10 MiB value, set and read back.
    let (file, want) = pattern_file(&dir, "value", 10 << 20);
    let mut set = on_linux(&bed, "sh");
    set.arg("-c").arg(format!(
        "redis-cli -h {host} -p 6390 -x SET big < {} ",
        file.display()
    ));
    let o = run_for(set, 60, "redis-cli SET");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("OK"),
        "SET: {o:?}"
    );
    let back = dir.join("back");
    let mut get = on_linux(&bed, "sh");
    get.arg("-c").arg(format!(
        "redis-cli -h {host} -p 6390 --raw GET big | head -c {} > {}",
        10 << 20,
        back.display()
    ));
    assert!(run_for(get, 60, "redis-cli GET").status.success());
    assert_eq!(
        sha256(&std::fs::read(&back).unwrap()),
        want,
        "the 10 MiB value differs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// sockperf ping-pong over TCP with --data-integrity, client on softoe;
/// Linux's own figure from the same namespace pair beside it.
#[test]
fn sockperf_ping_pong_with_integrity() {
    if !have("sockperf") {
        return;
    }
    let bed = bed();
    let _server = Child(
        on_linux(&bed, "sockperf")
            .args([
                "server",
                "--tcp",
                "-i",
                &LINUX_IP.to_string(),
                "-p",
                "11111",
            ])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&bed, 11111);
    let mut c = on_softoe(&bed, "sockperf");
    c.args([
        "ping-pong",
        "--tcp",
        "-i",
        &LINUX_IP.to_string(),
        "-p",
        "11111",
        "-t",
        "2",
        "--data-integrity",
    ]);
    let o = run_for(c, 60, "sockperf on softoe");
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    assert!(
        !out.contains("ERROR") && !out.to_lowercase().contains("integrity check failed"),
        "{out}"
    );
    let summary = out
        .lines()
        .find(|l| l.contains("Summary: Latency"))
        .unwrap_or_else(|| panic!("no summary: {out}"));
    let p50 = out
        .lines()
        .find(|l| l.contains("percentile 50.000"))
        .unwrap_or("");
    eprintln!("sockperf on softoe: {summary} / {p50}");
}

/// NetPIPE's integrity mode through its size sweep (to 256 KiB), sender
/// on softoe.
#[test]
fn netpipe_integrity_sweep() {
    if !have("NPtcp") {
        return;
    }
    let bed = bed();
    // NetPIPE writes its results (np.out) into its working directory.
    let dir = tempdir("netpipe");
    let _rx = Child(
        on_linux(&bed, "NPtcp")
            .arg("-i")
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&bed, 5002);
    let mut c = on_softoe(&bed, "NPtcp");
    c.args(["-h", &LINUX_IP.to_string(), "-i", "-u", "262144"])
        .current_dir(&dir);
    let o = run_for(c, 120, "NPtcp on softoe");
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    let passed = out.matches("Integrity check passed").count();
    assert!(passed >= 30, "only {passed} sizes passed: {out}");
    assert!(!out.to_lowercase().contains("failed"), "{out}");
}

fn nginx_conf(dir: &Path, port: u16, bind: Option<std::net::Ipv4Addr>) -> PathBuf {
    let listen = match bind {
        Some(ip) => format!("{ip}:{port}"),
        None => port.to_string(),
    };
    let conf = dir.join("nginx.conf");
    let d = dir.display();
    std::fs::write(
        &conf,
        format!(
            "worker_processes 2;\nerror_log {d}/error.log info;\npid {d}/nginx.pid;\n\
             daemon off;\nevents {{ worker_connections 256; }}\n\
             http {{ access_log off; sendfile on; tcp_nopush on;\n\
             client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;\n\
             uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
             server {{ listen {listen}; root {d}/www; }} }}\n"
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    conf
}

/// nginx both ways, with its default master/worker processes: curl on
/// Linux fetches 100 MiB from nginx on softoe (the workers, forked after
/// the master listened, share its listener), and curl on softoe fetches
/// it from nginx on Linux.
#[test]
fn nginx_both_ways() {
    if !have("nginx") || !have("curl") {
        return;
    }
    let mut bed = bed();
    let dir = tempdir("nginx");
    // Workers run as nobody: the tree must be readable.
    let conf = nginx_conf(&dir, 8088, None);
    let (_, want) = pattern_file(&dir.join("www"), "blob", 100 << 20);
    let _ = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&dir)
        .status();
    let _on_softoe = Child(
        on_softoe(&bed, "nginx")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let got = dir.join("got");
    let url = format!("http://{ENGINE_IP}:8088/blob");
    // Several fetches: the workers take turns at the shared listener.
    for round in 0..3 {
        let _ = std::fs::remove_file(&got);
        let mut c = on_linux(&bed, "sh");
        c.arg("-c").arg(format!(
            "for i in $(seq 100); do curl -sS --fail -o {} {url} && exit 0; sleep 0.1; done; exit 1",
            got.display()
        ));
        let o = run_for(c, 60, "curl on Linux");
        let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
        assert!(
            o.status.success(),
            "round {round}: {}\nnginx log:\n{log}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            sha256(&std::fs::read(&got).unwrap()),
            want,
            "round {round}: Linux got other bytes"
        );
    }
    // And the other way: nginx on Linux, curl on softoe.
    let dir2 = tempdir("nginx-linux");
    let conf2 = nginx_conf(&dir2, 8089, Some(LINUX_IP));
    std::fs::copy(dir.join("www/blob"), dir2.join("www/blob")).unwrap();
    let _ = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&dir2)
        .status();
    let _on_linux = Child(
        on_linux(&bed, "nginx")
            .arg("-c")
            .arg(&conf2)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&bed, 8089);
    let _ = std::fs::remove_file(&got);
    let mut c = on_softoe(&bed, "curl");
    c.args(["-sS", "--fail", "-o"])
        .arg(&got)
        .arg(format!("http://{LINUX_IP}:8089/blob"));
    let o = run_for(c, 60, "curl on softoe");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        sha256(&std::fs::read(&got).unwrap()),
        want,
        "curl on softoe got other bytes"
    );
    let c = bed.stop().unwrap();
    assert!(
        c.bytes_out > 300 << 20 && c.bytes_in > 100 << 20,
        "the engine did not carry it"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

/// A testbed to try programs by hand: prints where things are and waits
/// until /tmp/softoe-bed-stop exists
/// (`cargo test --release -p softoe-preload --test programs manual_bed -- --ignored --nocapture`).
#[test]
#[ignore = "by hand only"]
fn manual_bed() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let bed = bed();
    println!(
        "engine {ENGINE_IP}, socket {}; Linux {LINUX_IP} in `ip netns exec {}`; shim {}",
        bed.host.display(),
        bed.linux.name(),
        shim_path().display()
    );
    let stop = Path::new("/tmp/softoe-bed-stop");
    let _ = std::fs::remove_file(stop);
    while !stop.exists() {
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `SO_LINGER` with a zero time: the program's close resets the
/// connection, and the Linux peer sees `ECONNRESET` (a plain close is a
/// FIN: the peer reads the data, then the end).
#[test]
fn linger_zero_resets_plain_close_finishes() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let l = bed
        .linux
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7410)).unwrap())
        .unwrap();
    let peer = bed
        .linux
        .spawn(move || {
            let mut out = Vec::new();
            for _ in 0..2 {
                let (mut s, _) = l.accept().unwrap();
                let mut b = Vec::new();
                // Give the close time to happen before reading.
                std::thread::sleep(Duration::from_millis(300));
                out.push(std::io::Read::read_to_end(&mut s, &mut b).map(|_| b));
            }
            out
        })
        .unwrap();
    let script = format!(
        "import socket,struct,time\n\
         for linger in (False, True):\n\
         \x20   s=socket.create_connection(('{LINUX_IP}',7410))\n\
         \x20   s.sendall(b'bye')\n\
         \x20   time.sleep(0.1)\n\
         \x20   if linger:\n\
         \x20       s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii',1,0))\n\
         \x20       assert struct.unpack('ii', s.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8)) == (1,0)\n\
         \x20   s.close()\n"
    );
    let o = run_for(
        {
            let mut c = on_softoe(&bed, "python3");
            c.args(["-c", &script]);
            c
        },
        30,
        "python with SO_LINGER",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = peer.join().unwrap();
    assert_eq!(
        got[0].as_ref().unwrap(),
        b"bye",
        "plain close: data then FIN"
    );
    let e = got[1].as_ref().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e:?}");
}
