//! `softoe stat`: a running engine's connections and counters, in the shape
//! of `ss -ti`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use softoe_engine::{ConnStat, Snapshot};
use softoe_lab::table::Table;
use softoe_lab::units::bps_compact;

use crate::config::DEFAULT_CONTROL;

/// Options of `softoe stat`.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// The engine's control socket.
    #[arg(long, default_value = DEFAULT_CONTROL)]
    control: PathBuf,
    /// Print the snapshot as JSON (one object per line with --watch).
    #[arg(long)]
    json: bool,
    /// Repeat every this many seconds until interrupted.
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
}

/// `softoe stat`.
pub fn run(args: &StatArgs) -> Result<()> {
    let every = match args.watch {
        Some(s) if !(s.is_finite() && s >= 0.05) => bail!("--watch must be at least 0.05 seconds"),
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    loop {
        let snap = softoe_engine::control::query(&args.control).map_err(|e| {
            let why = match e.kind() {
                // Every user may ask an engine's control socket (mode
                // 0666), unless its owner or directory says otherwise: the
                // engine runs, this user may not ask it.
                std::io::ErrorKind::PermissionDenied => {
                    "permission denied: this user may not open the control socket (its file \
                     mode or its directory's); run `softoe stat` as its owner (sudo)"
                }
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    "is `softoe engine` running? --control names another socket"
                }
                _ => "--control names the engine's control socket",
            };
            anyhow::Error::new(e).context(format!(
                "asking the engine at {} ({why})",
                args.control.display()
            ))
        })?;
        let text = if args.json {
            format!("{}\n", serde_json::to_string(&snap)?)
        } else {
            render(&snap)
        };
        // `softoe stat | head`: a reader that has had enough is no error.
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e).context("writing to standard output"),
        }
        match every {
            Some(d) => std::thread::sleep(d),
            None => return Ok(()),
        }
    }
}

/// A bond's members, ARP+ peers and plain peers.
/// The timed stages (`softoe engine --profile-stages`): count, mean cost
/// and bytes per run of each, as the simulator's calibration reads them.
fn render_stages(o: &mut String, st: &softoe_engine::StageCounters) {
    use std::fmt::Write;
    let stages = [
        ("rx", &st.rx),
        ("tx", &st.tx),
        ("cmd", &st.cmd),
        ("serve", &st.serve),
        ("poll", &st.poll),
    ];
    if stages.iter().all(|(_, s)| s.count == 0) {
        return;
    }
    let _ = write!(o, "stages:");
    for (name, s) in stages {
        if s.count > 0 {
            let _ = write!(
                o,
                " {name} {} × {:.0} ns ({:.0} B)",
                s.count,
                s.nanos as f64 / s.count as f64,
                s.bytes as f64 / s.count as f64
            );
        }
    }
    let w = &st.wake;
    let _ = writeln!(
        o,
        "; sleeps ended by an event {}, by their deadline {} (late {:.1} µs on average, {:.1} at most)",
        w.by_fd,
        w.by_timeout,
        if w.by_timeout > 0 {
            w.late_nanos as f64 / w.by_timeout as f64 / 1e3
        } else {
            0.0
        },
        w.max_late_nanos as f64 / 1e3
    );
}

fn render_bond(o: &mut String, b: &softoe_engine::BondStat) {
    use std::fmt::Write;
    let _ = writeln!(
        o,
        "bond: policy {}, seq {}; {} frames striped to bonding peers, {} to plain peers          ({} moved); {} ARP+ in ({} malformed); {} member-set changes",
        b.policy,
        b.seq,
        b.striped,
        b.plain_frames,
        b.plain_moved,
        b.arpp_in,
        b.arpp_malformed,
        b.changes
    );
    let mut t = Table::new()
        .indent(2)
        .left("member")
        .left("mac")
        .left("state")
        .rights(&[
            "frames-in",
            "bytes-in",
            "frames-out",
            "bytes-out",
            "queue-us",
            "heard-ms",
            "left",
            "plain",
        ]);
    for m in &b.members {
        t.row_tail(
            [
                m.name.clone(),
                m.mac.to_string(),
                m.state.to_string(),
                m.frames_in.to_string(),
                m.bytes_in.to_string(),
                m.frames_out.to_string(),
                m.bytes_out.to_string(),
                m.queue_us.to_string(),
                m.heard_ms_ago.to_string(),
                m.left.to_string(),
                m.plain_peers.to_string(),
            ],
            if m.realtime { "  real-time" } else { "" },
        );
    }
    o.push_str(&t.render());
    for p in &b.peers {
        let _ = writeln!(
            o,
            "  ARP+ peer {} seq {} heard {} ms ago: {}",
            p.ip,
            p.seq,
            p.heard_ms_ago,
            p.members.join(" ")
        );
    }
    for (ip, m) in &b.plain {
        let name = b.members.get(*m).map_or("?", |x| x.name.as_str());
        let _ = writeln!(o, "  plain-ARP peer {ip} on {name}");
    }
}

/// The text form: counters, then one block per connection as `ss -ti`.
pub fn render(s: &Snapshot) -> String {
    let mut o = String::new();
    render_engine(&mut o, s);
    render_port_extras(&mut o, s);
    render_protocols(&mut o, s);
    render_sockets(&mut o, s);
    render_sessions(&mut o, s);
    o
}

/// The engine's line: frames, offloads, drops, sleep; emulation and steering where they did something.
fn render_engine(o: &mut String, s: &Snapshot) {
    use std::fmt::Write;
    let e = &s.engine;
    let k = &s.stack;
    let _ = writeln!(
        o,
        "engine on {}: {} frames in ({} coalesced, {} checksum-verified), {} out ({} \
         super-segments, {} checksum-offloaded); drops: {}{} malformed, {} bad checksum, {} \
         port errors, {} tx busy; asleep {:.0} %",
        s.port,
        e.frames_in,
        k.rx_coalesced,
        k.rx_csum_offloaded,
        e.frames_out,
        k.tx_tso_frames,
        k.tx_csum_offloaded,
        s.port_drops
            .map(|d| format!("{d} before the engine (port queue full), "))
            .unwrap_or_default(),
        k.rx_malformed,
        k.rx_bad_checksum,
        e.port_errors,
        e.tx_busy,
        e.idle_share() * 100.0
    );
    if e.slowdown_nanos > 0 || e.access_delay_nanos > 0 {
        let _ = writeln!(
            o,
            "emulation: {:.3} s of work, {:.3} s of slowdown added, {} shared-memory accesses \
             ({:.3} s of access delay)",
            e.work_nanos as f64 / 1e9,
            e.slowdown_nanos as f64 / 1e9,
            e.ring_accesses,
            e.access_delay_nanos as f64 / 1e9
        );
    }
    if e.steer_switches > 0 {
        let _ = writeln!(
            o,
            "steering: the kernel's work for sent frames ran on the other cores for {:.1} s \
             ({} changes; softoe engine --steer)",
            e.steered_nanos as f64 / 1e9,
            e.steer_switches
        );
    }
}

/// The stages, faults and bond.
fn render_port_extras(o: &mut String, s: &Snapshot) {
    use std::fmt::Write;
    let e = &s.engine;
    render_stages(o, &e.stages);
    if let Some(f) = &s.faults {
        let _ = writeln!(o, "faults injected at the port: {f}");
    }
    if let Some(b) = &s.bond {
        render_bond(o, b);
    }
}

/// The protocols' counters: TCP and UDP, IP where it fragmented or learned a path MTU, listeners where they refused.
fn render_protocols(o: &mut String, s: &Snapshot) {
    use std::fmt::Write;
    let k = &s.stack;
    let _ = writeln!(
        o,
        "tcp: {} retransmissions, {} connections timed out, {} resets for unknown connections; \
         udp: {} datagrams received, {} dropped (socket queue full)",
        k.tcp_retransmits, k.tcp_timeouts, k.tcp_rst_tx, k.udp_rx, k.udp_drops
    );
    if k.rx_fragments > 0 || k.pmtu_lowered > 0 || k.pmtu_ignored > 0 {
        let _ = writeln!(
            o,
            "ip: {} fragments, {} datagrams reassembled, {} timed out, {} dropped for overlaps, \
             {} for memory, {} fragments refused; path MTU lowered {} times, {} messages \
             ignored, {} expired",
            k.rx_fragments,
            k.reasm_ok,
            k.reasm_timeouts,
            k.reasm_overlaps,
            k.reasm_over_budget,
            k.reasm_invalid,
            k.pmtu_lowered,
            k.pmtu_ignored,
            k.pmtu_expired
        );
    }
    if k.tcp_syncookies_sent + k.tcp_syn_drops + k.tcp_icmp_aborts > 0 {
        let _ = writeln!(
            o,
            "listeners: {} SYN cookies sent, {} checked, {} failed; {} SYNs dropped \
             ({} for a full accept queue); {} connection attempts ended by ICMP errors",
            k.tcp_syncookies_sent,
            k.tcp_syncookies_recv,
            k.tcp_syncookies_failed,
            k.tcp_syn_drops,
            k.tcp_listen_overflows,
            k.tcp_icmp_aborts
        );
    }
}

/// The sockets as `ss -ti`: listeners, then connections.
fn render_sockets(o: &mut String, s: &Snapshot) {
    let mut t = Table::new()
        .left("State")
        .right("Recv-Q")
        .right("Send-Q")
        .left("Local Address:Port")
        .left("Peer Address:Port");
    for l in &s.listeners {
        t.row([
            "LISTEN".to_string(),
            l.queued.to_string(),
            l.backlog.to_string(),
            l.local.to_string(),
            "0.0.0.0:*".to_string(),
        ]);
        let mut details = Vec::new();
        if l.reuseport {
            // Members of one group: the listeners of this address that
            // set SO_REUSEPORT (each program's own line).
            let members = s
                .listeners
                .iter()
                .filter(|m| m.reuseport && m.local == l.local)
                .count();
            details.push(format!("reuseport:{members}"));
        }
        if l.syn_received > 0 || l.syn_drops > 0 {
            details.push(format!(
                "syn_recv:{} syn_drops:{}",
                l.syn_received, l.syn_drops
            ));
        }
        if !details.is_empty() {
            t.text(&format!("\t {}", details.join(" ")));
        }
    }
    for c in &s.connections {
        t.row([
            c.state.to_string(),
            c.recv_q.to_string(),
            c.send_q.to_string(),
            c.local.to_string(),
            c.remote.to_string(),
        ]);
        t.text(&format!("\t {}", details(c)));
    }
    o.push_str(&t.render());
}

/// The host programs' sessions.
fn render_sessions(o: &mut String, s: &Snapshot) {
    if s.sessions.is_empty() {
        return;
    }
    let mut t = Table::new().left("Session").rights(&[
        "Pid", "Uid", "Sockets", "Closing", "Detached", "Commands", "Rejected", "Wakeups", "Placed",
    ]);
    for x in &s.sessions {
        t.row_tail(
            [
                x.id.to_string(),
                x.pid.to_string(),
                x.uid.to_string(),
                x.sockets.to_string(),
                x.closing.to_string(),
                x.detached.to_string(),
                x.commands.to_string(),
                x.rejected.to_string(),
                x.wakeups.to_string(),
                x.direct.to_string(),
            ],
            if x.dead { "  (process gone)" } else { "" },
        );
    }
    o.push_str(&t.render());
}

fn details(c: &ConnStat) -> String {
    let mss = c.snd_mss.max(1);
    let mut parts = Vec::new();
    if !c.options.is_empty() {
        parts.push(c.options.clone());
    }
    parts.push(format!("rto:{:.0}", c.rto_ms));
    parts.push(format!(
        "rtt:{:.3}/{:.3}",
        c.srtt_us / 1e3,
        c.rttvar_us / 1e3
    ));
    if c.pmtu > 0 {
        parts.push(format!("pmtu:{}", c.pmtu));
    }
    parts.push(format!("mss:{}", c.snd_mss));
    parts.push(format!("cwnd:{}", c.cwnd.div_ceil(mss)));
    if c.ssthresh < u32::MAX / 2 {
        parts.push(format!("ssthresh:{}", c.ssthresh.div_ceil(mss)));
    }
    parts.push(format!("bytes_acked:{}", c.bytes_acked));
    parts.push(format!("bytes_received:{}", c.bytes_received));
    if c.bytes_sunk > 0 {
        parts.push(format!("bytes_sunk:{}", c.bytes_sunk));
    }
    parts.push(format!("unacked:{}", c.in_flight.div_ceil(mss)));
    if c.bytes_retrans > 0 {
        parts.push(format!("bytes_retrans:{}", c.bytes_retrans));
    }
    parts.push(format!("retrans:{}", c.retrans));
    // Loss recovery, shown like the counters around it only once they
    // count something; Linux's names where Linux has one.
    if c.lost_retrans > 0 {
        parts.push(format!("lost_rtx:{}", c.lost_retrans));
    }
    if c.rto_count > 0 || c.fast_retrans > 0 {
        parts.push(format!(
            "timeouts:{} recoveries:{}",
            c.rto_count, c.fast_retrans
        ));
    }
    if c.tlp_probes > 0 || c.tlp_recoveries > 0 {
        parts.push(format!("tlp:{}/{}", c.tlp_probes, c.tlp_recoveries));
    }
    if c.reorder_timeouts > 0 {
        parts.push(format!("reo_timeouts:{}", c.reorder_timeouts));
    }
    if c.dsacks > 0 {
        parts.push(format!("dsack_dups:{}", c.dsacks));
    }
    if c.spurious_retrans > 0 {
        parts.push(format!("spurious:{}", c.spurious_retrans));
    }
    if c.undos > 0 {
        parts.push(format!("undo:{}", c.undos));
    }
    if c.reord_seen > 0 {
        parts.push(format!("reord_seen:{}", c.reord_seen));
    }
    // As `ss`: the reordering degree only when it is not the initial 3
    // (0: an engine that does not say).
    if c.reordering > 0 && c.reordering != 3 {
        parts.push(format!("reordering:{}", c.reordering));
    }
    if c.reo_wnd_us > 0.0 {
        parts.push(format!("reo_wnd:{:.3}", c.reo_wnd_us / 1e3));
    }
    parts.push(format!(
        "delivery_rate:{}",
        bps_compact(c.delivery_rate_bps)
    ));
    parts.push(format!("snd_wnd:{} rcv_wnd:{}", c.snd_wnd, c.rcv_wnd));
    // `SO_PRIORITY`, which a bonded port's prioritized policy schedules
    // by: only when set, as `ss` leaves out what is at its default.
    if c.priority > 0 {
        parts.push(format!("prio:{}", c.priority));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn renders_the_stages_and_the_emulation_only_when_there() {
        let mut engine = softoe_engine::EngineCounters::default();
        let snap = |engine: &softoe_engine::EngineCounters| -> Snapshot {
            serde_json::from_value(serde_json::json!({
                "port": "tap t0",
                "engine": engine,
                "stack": softoe_engine::control::StackCounters::default(),
                "connections": [],
            }))
            .unwrap()
        };
        let plain = render(&snap(&engine));
        assert!(
            !plain.contains("stages:") && !plain.contains("emulation:"),
            "{plain}"
        );
        engine.stages.rx.count = 4;
        engine.stages.rx.nanos = 2_000;
        engine.stages.rx.bytes = 6_000;
        engine.stages.wake.by_timeout = 2;
        engine.stages.wake.late_nanos = 9_000;
        engine.slowdown_nanos = 1_500_000_000;
        engine.ring_accesses = 12;
        let text = render(&snap(&engine));
        assert!(text.contains("stages: rx 4 × 500 ns (1500 B)"), "{text}");
        assert!(
            text.contains("by their deadline 2 (late 4.5 µs on average"),
            "{text}"
        );
        assert!(
            text.contains("1.500 s of slowdown added, 12 shared-memory accesses"),
            "{text}"
        );
    }

    #[test]
    fn renders_a_bond() {
        let snap: Snapshot = serde_json::from_value(serde_json::json!({
            "port": "bond least-queued of a0,a1",
            "engine": softoe_engine::EngineCounters::default(),
            "stack": softoe_engine::control::StackCounters::default(),
            "connections": [],
            "bond": {
                "policy": "least-queued", "seq": 7, "striped": 100, "plain_frames": 5,
                "plain_moved": 0, "arpp_in": 40, "arpp_malformed": 0, "changes": 1,
                "members": [
                    {"name": "a0", "mac": "02:50:00:00:00:01", "state": "up", "bytes_in": 123456},
                    {"name": "a1", "mac": "02:51:00:00:00:01", "state": "silent", "left": 1,
                     "realtime": true}
                ],
                "peers": [{"ip": "10.0.0.2", "seq": 3, "heard_ms_ago": 4,
                           "members": ["02:50:00:00:00:02", "02:51:00:00:00:02(rt)"]}],
                "plain": [["10.0.0.9", 0]]
            }
        }))
        .unwrap();
        let text = render(&snap);
        assert!(text.contains("bond: policy least-queued, seq 7"), "{text}");
        let a1 = text
            .lines()
            .find(|l| l.contains("02:51:00:00:00:01"))
            .unwrap_or_default();
        assert_eq!(
            a1.split_whitespace().take(3).collect::<Vec<_>>(),
            ["a1", "02:51:00:00:00:01", "silent"],
            "{text}"
        );
        assert!(text.contains("real-time"), "{text}");
        assert!(
            text.contains(
                "ARP+ peer 10.0.0.2 seq 3 heard 4 ms ago: 02:50:00:00:00:02 02:51:00:00:00:02(rt)"
            ),
            "{text}"
        );
        assert!(text.contains("plain-ARP peer 10.0.0.9 on a0"), "{text}");
    }

    #[test]
    fn marks_the_members_of_a_reuseport_group() {
        let l = |local: &str, reuseport: bool| {
            serde_json::json!({"local": local, "reuseport": reuseport, "queued": 0,
                               "syn_received": 0, "backlog": 128, "syn_drops": 0})
        };
        let snap: Snapshot = serde_json::from_value(serde_json::json!({
            "port": "tap t0",
            "engine": softoe_engine::EngineCounters::default(),
            "stack": softoe_engine::control::StackCounters::default(),
            "connections": [],
            "listeners": [l("10.0.0.1:80", true), l("10.0.0.1:80", true),
                          l("10.0.0.1:81", false)],
        }))
        .unwrap();
        let text = render(&snap);
        assert_eq!(text.matches("\t reuseport:2\n").count(), 2, "{text}");
        assert!(
            text.lines()
                .skip_while(|l| !l.contains("10.0.0.1:81"))
                .nth(1)
                .is_none_or(|next| !next.contains("reuseport")),
            "{text}"
        );
    }

    #[test]
    fn renders_like_ss() {
        let snap: Snapshot = serde_json::from_value(serde_json::json!({
            "port": "tap softoe0",
            "engine": softoe_engine::EngineCounters::default(),
            "stack": softoe_engine::control::StackCounters::default(),
            "connections": [{
                "state": "ESTAB", "local": "10.7.0.1:9", "remote": "10.7.0.2:40000",
                "cwnd": 14480, "ssthresh": 4294967295u32, "srtt_us": 120.0, "rttvar_us": 30.0,
                "rto_ms": 201.0, "snd_mss": 1448, "retrans": 2, "rto_count": 0,
                "fast_retrans": 1, "bytes_acked": 1000, "bytes_received": 2000000,
                "send_q": 0, "recv_q": 5, "delivery_rate_bps": 2500000000u64,
                "in_flight": 2896, "snd_wnd": 65535, "rcv_wnd": 1048576,
                "options": "ts sack wscale:7,7"
            }]
        }))
        .unwrap();
        let text = render(&snap);
        assert!(text.contains("ESTAB"), "{text}");
        assert!(text.contains("10.7.0.2:40000"));
        assert!(text.contains("ts sack wscale:7,7 rto:201 rtt:0.120/0.030 mss:1448 cwnd:10"));
        assert!(!text.contains("ssthresh"), "infinite ssthresh is not shown");
        assert!(text.contains("unacked:2 retrans:2 timeouts:0 recoveries:1"));
        assert!(text.contains("delivery_rate:2.5Gbps"));
        assert!(
            !text.contains("port queue"),
            "an old engine's snapshot has no port drops"
        );
        assert!(text.contains("tcp: 0 retransmissions, 0 connections timed out, 0 resets"));
        assert!(!text.contains("faults"), "a plain port injects none");
        assert!(!text.contains("bond"), "a plain port is no bond");
        for quiet in [
            "lost_rtx",
            "tlp:",
            "dsack",
            "spurious",
            "undo",
            "reord",
            "reo_",
            "bytes_retrans",
            "prio",
        ] {
            assert!(!text.contains(quiet), "{quiet} shown at zero: {text}");
        }
        assert_eq!(
            serde_json::to_value(&snap).unwrap()["connections"][0]["priority"],
            0,
            "an old engine's snapshot reads priority 0, and JSON always has it"
        );
        let mut snap = snap;
        snap.connections[0].priority = 6;
        assert!(
            render(&snap).contains("snd_wnd:65535 rcv_wnd:1048576 prio:6"),
            "{}",
            render(&snap)
        );
        assert_eq!(
            serde_json::to_value(&snap).unwrap()["connections"][0]["priority"],
            6
        );
        snap.port_drops = Some(31);
        assert!(
            render(&snap).contains("drops: 31 before the engine (port queue full), 0 malformed")
        );
    }

    /// A connection through loss recovery, from an engine with a fault
    /// injector: every counter under the name `ss -ti` (or, where Linux
    /// has none, softoe) gives it, and the port's faults on their own line.
    #[test]
    fn renders_loss_recovery_and_injected_faults() {
        let snap: Snapshot = serde_json::from_value(serde_json::json!({
            "port": "af_packet veth1 with faults (seed 7)",
            "engine": softoe_engine::EngineCounters::default(),
            "stack": softoe_engine::control::StackCounters::default(),
            "faults": {
                "rx": {"frames": 1450, "lost": 14, "duplicated": 2, "reordered": 3,
                       "corrupted": 1, "delayed": 0, "released": 3, "failed": 0},
                "tx": {"frames": 1600, "lost": 17}
            },
            "connections": [{
                "state": "ESTAB", "local": "10.7.0.1:19", "remote": "10.7.0.2:40000",
                "cwnd": 28960, "ssthresh": 14480, "srtt_us": 2100.0, "rttvar_us": 300.0,
                "rto_ms": 210.0, "snd_mss": 1448, "retrans": 40, "rto_count": 2,
                "fast_retrans": 9, "bytes_acked": 5000000, "bytes_received": 8,
                "send_q": 0, "recv_q": 0, "delivery_rate_bps": 90000000u64,
                "in_flight": 2896, "snd_wnd": 65535, "rcv_wnd": 65535, "options": "ts sack",
                "bytes_retrans": 57920, "lost_retrans": 3, "tlp_probes": 5, "tlp_recoveries": 1,
                "reorder_timeouts": 4, "dsacks": 6, "spurious_retrans": 2, "undos": 1,
                "reord_seen": 7, "reordering": 12, "reo_wnd_us": 525.0
            }]
        }))
        .unwrap();
        let text = render(&snap);
        assert!(
            text.contains(
                "bytes_acked:5000000 bytes_received:8 unacked:2 bytes_retrans:57920 retrans:40 \
                 lost_rtx:3 timeouts:2 recoveries:9 tlp:5/1 reo_timeouts:4 dsack_dups:6 \
                 spurious:2 undo:1 reord_seen:7 reordering:12 reo_wnd:0.525 delivery_rate:90.0Mbps"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "faults injected at the port: rx 1450 frames: 14 lost, 2 duplicated, 3 \
                 reordered, 1 corrupted, 0 delayed; tx 1600 frames: 17 lost, 0 duplicated"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&snap).unwrap();
        assert_eq!(json["faults"]["tx"]["lost"], 17);
        assert_eq!(json["connections"][0]["reo_wnd_us"], 525.0);
        // The initial reordering degree is not news, as in `ss`.
        let mut snap = snap;
        snap.connections[0].reordering = 3;
        assert!(!render(&snap).contains("reordering:"));
    }
}
