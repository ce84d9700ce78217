//! `softoe bench`, small: every scenario measured on softoe and on Linux, the
//! loss sweep, the bond's experiments, and the emulation of a machine file.
//! They need root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{machine_file, softoe};

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
        "--reclaim-programs",
        "10",
        "--reclaim-load",
        "2",
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
        let softoe = r["system"].as_str().unwrap().starts_with("softoe");
        if softoe {
            assert!(r["engine_s_per_gib"].as_f64().unwrap() > 0.0, "{r}");
        }
        // Interleaved repeats: --quick runs 3 to 5 rounds of every system,
        // the row's figure is their median inside its interval, and each
        // softoe row carries its paired ratio to Linux.
        let n = r["repeats"]["rounds"].as_u64().unwrap();
        assert!((3..=5).contains(&n), "{r}");
        let g = &r["figures"]["gbps"];
        assert_eq!(g["samples"].as_array().unwrap().len() as u64, n, "{r}");
        assert_eq!(g["median"], r["gbps"], "{r}");
        assert!(
            g["lo"].as_f64().unwrap() <= g["hi"].as_f64().unwrap(),
            "{r}"
        );
        assert_eq!(
            r["vs_linux"]["samples"].as_array().map(Vec::len),
            softoe.then_some(n as usize),
            "{r}"
        );
        assert!(r["busy"]["samples"].as_u64().unwrap() > 0, "{r}");
    }
    // The targets' verdicts are counted, three ways.
    let verdicts = &v["verdicts"];
    let counted: u64 = ["met", "missed", "within_noise"]
        .iter()
        .map(|k| verdicts[k].as_u64().unwrap())
        .sum();
    assert_eq!(counted, 22, "{verdicts}");
    for t in v["targets"].as_array().unwrap() {
        let verdict = t["verdict"].as_str().unwrap();
        assert!(["met", "missed", "within_noise"].contains(&verdict), "{t}");
    }
    assert!(
        v["conditions"]["rows"].as_u64().unwrap() >= 7,
        "{}",
        v["conditions"]
    );
    let lat = v["latency"].as_array().unwrap();
    assert_eq!(lat.len(), 6, "2 systems × 3 sizes");
    for r in lat {
        assert!(r["p50_us"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["p999_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
    }
    assert_eq!(
        v["targets"].as_array().unwrap().len(),
        22,
        "5 bulk targets for copy, overlap and zerocopy, the round trip's p50 and p99, \
         connections held, engine cycles per request user and all told (p99 at 10,000 ÷ \
         1,000 needs both counts), the reclaim's p99 quiet and loaded"
    );
    // Every killed program's session reclaimed, none left behind, on the
    // machine as it was and beside the two busy threads asked for.
    let rec = v["reclaim"].as_array().unwrap();
    assert_eq!(rec.len(), 2, "{rec:?}");
    for (r, load) in rec.iter().zip([0, 2]) {
        assert_eq!(r["programs"], 10, "{r}");
        assert_eq!(r["load"], load, "{r}");
        assert_eq!(r["left"], 0, "{r}");
        let (p50, p99) = (r["p50_ms"].as_f64().unwrap(), r["p99_ms"].as_f64().unwrap());
        assert!(p99 >= p50 && p50 > 0.0, "{r}");
        // The engine's part is inside the whole.
        assert!(r["engine_p50_ms"].as_f64().unwrap() <= p99 + 1e-9, "{r}");
    }
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
