//! BondingPlus on a real wire: two softoe engines, each bonding two TAP
//! devices behind one address, and a plain Linux host, all on one Linux
//! bridge (the paper's "regular switching hub"). Every member's link is
//! shaped by `tbf` to 100 Mbit/s toward its engine, so links, not the two
//! CPUs, are the bottleneck. Needs root.
//!
//! - E1: one TCP flow between the bonded engines uses both members (each
//!   carries a fair share of the bytes) and beats one link.
//! - E4: a member cut mid-transfer (its device set down) loses nothing;
//!   it leaves the bond and comes back when it is up again.
//! - E5: a plain-ARP Linux host reaches the bond both ways and its
//!   neighbour entry for the bond's address never changes MAC.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use common::{hash_stream, send_stream, wait_for};
use softoe_bond::{BondConfig, MemberConfig, Policy};
use softoe_engine::{
    App, BondMember, BondPort, BondStat, Engine, EngineConfig, Snapshot, StopHandle, TapOffloads,
    TapPort,
};
use softoe_stack::StackConfig;
use softoe_testbed::{Netns, NsThread, Testbed};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

const RATE_MBIT: u64 = 100;
const LINUX_IP: Ipv4Addr = Ipv4Addr::new(10, 8, 0, 9);
const T: Duration = Duration::from_secs(30);

static N: AtomicU32 = AtomicU32::new(0);

/// One bonded engine.
struct Host {
    ip: Ipv4Addr,
    taps: Vec<String>,
    app: App,
    control: std::path::PathBuf,
    stop: StopHandle,
    thread: Option<NsThread<Result<(), String>>>,
}

impl Host {
    fn snapshot(&self) -> Snapshot {
        softoe_engine::control::query(&self.control).expect("control socket answers")
    }

    fn bond(&self) -> BondStat {
        self.snapshot().bond.expect("a bonded port")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct BondBed {
    // Dropped first: the engines stop before the namespaces go.
    hosts: Vec<Host>,
    linux: Netns,
    sw: Netns,
    tb: Testbed,
}

impl BondBed {
    /// Two bonded engines (10.8.0.1 and 10.8.0.2, `members` TAPs each) and
    /// Linux at 10.8.0.9 on one bridge.
    fn start(members: usize, policy: Policy) -> BondBed {
        let mut tb = Testbed::new().unwrap();
        tb.deadline(softoe_testbed::test_deadline());
        let sw = tb.netns("sw").unwrap();
        let linux = tb.netns("lx").unwrap();
        tb.bridge(&sw, "br0").unwrap();
        tb.veth_to_bridge(&linux, "eth0", &sw, "br0").unwrap();
        tb.addr(&linux, "eth0", &format!("{LINUX_IP}/24")).unwrap();
        if let Some(port) = tb.veth_to_bridge_port(&linux) {
            tb.tbf(&sw, &port, RATE_MBIT).unwrap();
        }
        let hosts = (1..=2u8)
            .map(|h| start_host(&tb, &sw, h, members, policy))
            .collect();
        BondBed {
            hosts,
            linux,
            sw,
            tb,
        }
    }
}

fn start_host(tb: &Testbed, sw: &Netns, h: u8, members: usize, policy: Policy) -> Host {
    let n = N.fetch_add(1, Ordering::Relaxed);
    let ip = Ipv4Addr::new(10, 8, 0, h);
    let taps: Vec<String> = (0..members)
        .map(|i| format!("sb{}{n}h{h}m{i}", std::process::id() % 10_000))
        .collect();
    let control = std::env::temp_dir().join(format!("softoe-bond-{}-{n}.sock", std::process::id()));
    let macs: Vec<EthernetAddress> = (0..members)
        .map(|i| EthernetAddress([2, 0x50 + i as u8, 10, 8, 0, h]))
        .collect();
    let mut bcfg = BondConfig::new(
        Ipv4Address(ip.octets()),
        macs.iter().map(|m| MemberConfig::new(*m)).collect(),
    );
    bcfg.policy = policy;
    for m in &mut bcfg.members {
        m.rate_bps = RATE_MBIT * 1_000_000;
    }
    let (app, app_service) = softoe_engine::app::channel().unwrap();
    let (tx, rx) = mpsc::channel();
    let names = taps.clone();
    let ctl = control.clone();
    let thread = sw
        .spawn(move || -> Result<(), String> {
            let members = names
                .iter()
                .map(|name| {
                    TapPort::open(name, TapOffloads::default(), 1500).map(|p| BondMember {
                        name: name.clone(),
                        port: Box::new(p),
                    })
                })
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| e.to_string())?;
            let port = BondPort::new(bcfg, members).map_err(|e| e.to_string())?;
            let mut cfg = StackConfig::new(
                macs[0],
                Ipv4Cidr::new(Ipv4Address(ip.octets()), 24).ok_or("bad prefix")?,
            );
            cfg.seed = u64::from(h);
            cfg.tcp.rx_buffer = 1 << 20;
            cfg.tcp.tx_buffer = 4 << 20;
            cfg.tcp.tx_max_chunks = 4096;
            let mut ecfg = EngineConfig::default();
            ecfg.control = Some(ctl);
            let mut e = Engine::new(cfg, port, ecfg).map_err(|e| e.to_string())?;
            e.add_service(Box::new(app_service));
            tx.send(e.stop_handle()).map_err(|e| e.to_string())?;
            e.run().map_err(|e| e.to_string())
        })
        .unwrap();
    let stop = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("engine started");
    for t in &taps {
        tb.attach(sw, t, "br0").unwrap();
        tb.tbf(sw, t, RATE_MBIT).unwrap();
    }
    Host {
        ip,
        taps,
        app,
        control,
        stop,
        thread: Some(thread),
    }
}

/// Moves `n` bytes from `from`'s app to a listener on `to`'s app (port
/// `port`) and returns (bytes, goodput in Mbit/s) after checking them by
/// SHA-256; `during` runs once the transfer is under way.
fn transfer(from: &Host, to: &Host, port: u16, n: u64, during: impl FnOnce()) -> (u64, f64) {
    let l = to.app.tcp_listen(port, 4).unwrap();
    let mut c = from
        .app
        .tcp_connect(SocketAddrV4::new(to.ip, port))
        .unwrap();
    let (mut s, _) = l.accept_timeout(Some(T)).unwrap();
    s.set_read_timeout(Some(T));
    let t0 = Instant::now();
    let sender = std::thread::spawn(move || {
        let sha = send_stream(&mut c, n, 7);
        c.shutdown_write().unwrap();
        (sha, c)
    });
    let reader = std::thread::spawn(move || hash_stream(&mut s));
    std::thread::sleep(Duration::from_millis(300));
    during();
    let (got, sha_in) = reader.join().unwrap();
    let secs = t0.elapsed().as_secs_f64();
    let (sha_out, _c) = sender.join().unwrap();
    assert_eq!(got, n, "every byte arrived");
    assert_eq!(sha_in, sha_out, "in order and intact");
    (got, got as f64 * 8.0 / secs / 1e6)
}

fn bytes_in(b: &BondStat) -> Vec<u64> {
    b.members.iter().map(|m| m.bytes_in).collect()
}

#[test]
fn e1_one_flow_between_bonded_hosts_uses_both_members() {
    if !softoe_testbed::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let bed = BondBed::start(2, Policy::LeastQueued);
    let (a, b) = (&bed.hosts[0], &bed.hosts[1]);
    wait_for(10, "the bonded hosts to learn each other", || {
        a.bond().peers.len() == 1 && b.bond().peers.len() == 1
    });
    let before = bytes_in(&a.bond());
    let n = 48 << 20;
    let (_, mbit) = transfer(b, a, 5001, n, || {});
    let after = bytes_in(&a.bond());
    let share: Vec<f64> = after
        .iter()
        .zip(&before)
        .map(|(x, y)| (x - y) as f64 / n as f64)
        .collect();
    let conn = b.snapshot();
    eprintln!(
        "E1: one flow over 2 x {RATE_MBIT} Mbit/s: {mbit:.0} Mbit/s ({:.2} of one link, {:.2} of two); member shares {share:.2?}; sender's connections (retrans, spurious, reordering) {:?}",
        mbit / RATE_MBIT as f64,
        mbit / (2 * RATE_MBIT) as f64,
        conn.connections
            .iter()
            .map(|c| (c.retrans, c.spurious_retrans, c.reordering))
            .collect::<Vec<_>>()
    );
    // Structural: both members carried a fair part of the flow.
    assert!(
        share.iter().all(|&s| s > 0.3),
        "each member carries at least 30 % of the bytes: {share:?}"
    );
    // Wide margin: one link cannot carry more than 1.0 of itself.
    assert!(
        mbit > 1.2 * RATE_MBIT as f64,
        "one flow beats one link by 20 %: {mbit:.0} Mbit/s"
    );
}

#[test]
fn e4_a_member_cut_mid_transfer_loses_nothing_and_comes_back() {
    if !softoe_testbed::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let bed = BondBed::start(2, Policy::RoundRobin);
    let (a, b) = (&bed.hosts[0], &bed.hosts[1]);
    wait_for(10, "the bonded hosts to learn each other", || {
        a.bond().peers.len() == 1 && b.bond().peers.len() == 1
    });
    let sw = bed.sw.clone();
    let cut = a.taps[1].clone();
    let cut_at = Arc::new(std::sync::Mutex::new(None));
    let at = cut_at.clone();
    let (_, mbit) = transfer(b, a, 5002, 24 << 20, || {
        sw.ip(&["link", "set", &cut, "down"]).unwrap();
        *at.lock().unwrap() = Some(Instant::now());
    });
    let stat = a.bond();
    eprintln!(
        "E4: transfer with member {} cut after 0.3 s: {mbit:.0} Mbit/s; members {:?}",
        cut,
        stat.members
            .iter()
            .map(|m| (&m.name, &m.state, m.left))
            .collect::<Vec<_>>()
    );
    assert_ne!(stat.members[1].state, "up", "the cut member left");
    assert!(stat.members[1].left >= 1);
    // The peer no longer sends to it.
    wait_for(5, "the peer to drop the member", || {
        b.bond().peers.first().is_some_and(|p| p.members.len() == 1)
    });
    // Back up: heard again, it rejoins and the peer uses it again.
    bed.sw.ip(&["link", "set", &a.taps[1], "up"]).unwrap();
    bed.tb.tbf(&bed.sw, &a.taps[1], RATE_MBIT).unwrap();
    let back = Instant::now();
    wait_for(5, "the member to rejoin", || {
        a.bond().members[1].state == "up"
            && b.bond().peers.first().is_some_and(|p| p.members.len() == 2)
    });
    eprintln!("E4: rejoined {:?} after the link came back", back.elapsed());
    let (_, mbit) = transfer(b, a, 5003, 8 << 20, || {});
    eprintln!("E4: afterwards {mbit:.0} Mbit/s");
    assert!(a.bond().members.iter().all(|m| m.state == "up"));
}

#[test]
fn e5_a_plain_linux_host_sees_one_mac_for_the_bond() {
    if !softoe_testbed::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let bed = BondBed::start(2, Policy::LeastQueued);
    let a = &bed.hosts[0];
    // Watch Linux's neighbour entry for the bond's address all along.
    let watching = Arc::new(AtomicBool::new(true));
    let w = watching.clone();
    let lx = bed.linux.clone();
    let bond_ip = a.ip.to_string();
    let watcher = std::thread::spawn(move || {
        let mut macs = BTreeSet::new();
        let mut samples = 0;
        while w.load(Ordering::Relaxed) {
            if let Ok(out) = lx.ip(&["neigh", "show", &bond_ip]) {
                if let Some(mac) = out.split_whitespace().skip_while(|w| *w != "lladdr").nth(1) {
                    macs.insert(mac.to_string());
                }
                samples += 1;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (macs, samples)
    });
    // Linux → bond and bond → Linux, 8 MB each.
    let n = 8u64 << 20;
    let l = a.app.tcp_listen(6001, 4).unwrap();
    let addr = SocketAddrV4::new(a.ip, 6001);
    let client = bed
        .linux
        .spawn(move || {
            let mut s = TcpStream::connect_timeout(&addr.into(), T).unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let sha = send_stream(&mut s, n, 3);
            s.shutdown(Shutdown::Write).unwrap();
            let (got, back) = hash_stream(&mut s);
            (sha, got, back)
        })
        .unwrap();
    let (mut s, _) = l.accept_timeout(Some(T)).unwrap();
    s.set_read_timeout(Some(T));
    let (got, sha_in) = hash_stream(&mut s);
    let sha_out = send_stream(&mut s, n, 4);
    s.shutdown_write().unwrap();
    let (sha_linux, _, back) = client.join().unwrap();
    assert_eq!(got, n);
    assert_eq!(sha_in, sha_linux, "Linux → bond intact");
    assert_eq!(back, sha_out, "bond → Linux intact");
    watching.store(false, Ordering::Relaxed);
    let (macs, samples) = watcher.join().unwrap();
    let stat = a.bond();
    eprintln!(
        "E5: Linux's neighbour entry for {}: {macs:?} over {samples} samples; plain peers {:?}",
        a.ip, stat.plain
    );
    assert_eq!(macs.len(), 1, "one MAC for the bond's address: {macs:?}");
    // And it is the MAC of the member the bond keeps Linux on.
    let home = stat
        .plain
        .iter()
        .find(|(ip, _)| *ip == LINUX_IP.to_string())
        .map(|(_, m)| *m)
        .expect("Linux is a plain peer");
    assert_eq!(
        macs.first().map(String::as_str),
        Some(stat.members[home].mac.as_str())
    );
}
