//! Engines on a bonded testbed: what the bonding interop tests and
//! `softoe bench bond` share.
//!
//! [`BondHost::start`] runs one engine in a thread of a
//! [`BondedBed`]'s switch namespace, on N TAP devices bonded behind one
//! address ([`BondPort`]) or, for comparison, on one plain TAP, and plugs
//! every TAP into the bridge, shaped both ways. Programs reach it through
//! the in-process [`App`] API; `softoe stat`'s snapshot through its
//! control socket.

use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;

use softoe_bond::{BondConfig, MemberConfig, Policy};
use softoe_stack::StackConfig;
use softoe_testbed::{BondedBed, NsThread};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

use super::other;

use crate::{
    App, BondMember, BondPort, BondStat, Engine, EngineConfig, Port, Snapshot, StopHandle,
    TapOffloads, TapPort,
};

static N: AtomicU32 = AtomicU32::new(0);

/// One engine of a bonded testbed.
#[derive(Clone, Debug)]
pub struct BondHostSpec {
    /// Its host number: its address is `.host` of the bed's /24, its
    /// member MACs `02:5m:0a:08:00:host` for member `m`.
    pub host: u8,
    /// How many TAP members.
    pub members: usize,
    /// Bond them ([`BondPort`]); `false`: one plain [`TapPort`] (the port
    /// a bond's overhead is measured against; `members` must be 1).
    pub bond: bool,
    /// The scheduling policy.
    pub policy: Policy,
    /// Members dedicated to real-time traffic (indexes).
    pub realtime: Vec<usize>,
    /// The TAPs' offloads.
    pub offloads: TapOffloads,
    /// The stack's TCP receive and send buffers.
    pub rx_buffer: usize,
    /// See `rx_buffer`.
    pub tx_buffer: usize,
    /// Pin the engine to this core.
    pub cpu: Option<usize>,
}

impl BondHostSpec {
    /// Host `host` bonding `members` TAPs under `policy`, with the
    /// defaults: every offload on, 1 MiB receive and 4 MiB send buffers.
    pub fn new(host: u8, members: usize, policy: Policy) -> BondHostSpec {
        BondHostSpec {
            host,
            members,
            bond: true,
            policy,
            realtime: Vec::new(),
            offloads: TapOffloads::default(),
            rx_buffer: 1 << 20,
            tx_buffer: 4 << 20,
            cpu: None,
        }
    }
}

/// What the engine's thread reports when it runs.
struct Started {
    stop: StopHandle,
    tid: i32,
}

/// A running engine; dropping it stops the engine.
#[derive(Debug)]
pub struct BondHost {
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its TAP devices (in the switch namespace), member by member.
    pub taps: Vec<String>,
    /// Its members' MACs.
    pub macs: Vec<EthernetAddress>,
    /// Sockets on it.
    pub app: App,
    /// Its control socket (`softoe stat`).
    pub control: PathBuf,
    /// The engine thread's kernel id (for its CPU time).
    pub engine_tid: i32,
    stop: StopHandle,
    thread: Option<NsThread<Result<(), String>>>,
}

/// Runs an engine on `port` with `app` until it is stopped, after telling
/// `started` how to stop it.
fn run_engine<P: Port>(
    cfg: StackConfig,
    port: P,
    ecfg: EngineConfig,
    app: crate::app::AppService,
    started: &mpsc::Sender<Started>,
) -> Result<(), String> {
    let mut e = Engine::new(cfg, port, ecfg).map_err(|e| e.to_string())?;
    e.add_service(Box::new(app));
    let tid = this_thread_id().map_err(|e| e.to_string())?;
    started
        .send(Started {
            stop: e.stop_handle(),
            tid,
        })
        .map_err(|e| e.to_string())?;
    e.run().map_err(|e| e.to_string())
}

/// The calling thread's kernel id, from `/proc/thread-self`.
fn this_thread_id() -> io::Result<i32> {
    let link = std::fs::read_link("/proc/thread-self")?;
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| io::Error::other(format!("odd /proc/thread-self: {}", link.display())))
}

impl BondHost {
    /// Starts an engine per `spec` in `bed`'s switch namespace and plugs
    /// its TAPs into the bridge, shaped as the bed's links are.
    pub fn start(bed: &BondedBed, spec: &BondHostSpec) -> io::Result<BondHost> {
        if spec.members == 0 || (!spec.bond && spec.members != 1) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a bond has members; a plain port exactly one",
            ));
        }
        let n = N.fetch_add(1, Ordering::Relaxed);
        let ip = bed.addr(spec.host);
        let h = spec.host;
        // Names need only be unique in the bed's switch namespace.
        let taps: Vec<String> = (0..spec.members).map(|i| format!("b{h}m{i}")).collect();
        let control =
            std::env::temp_dir().join(format!("softoe-bond-{}-{n}.sock", std::process::id()));
        let macs: Vec<EthernetAddress> = (0..spec.members)
            .map(|i| EthernetAddress([2, 0x50 + i as u8, 10, 8, 0, h]))
            .collect();
        let mut bcfg = BondConfig::new(
            Ipv4Address(ip.octets()),
            macs.iter().map(|m| MemberConfig::new(*m)).collect(),
        );
        bcfg.policy = spec.policy;
        for (i, m) in bcfg.members.iter_mut().enumerate() {
            if let Some(rate) = bed.rate_mbit() {
                m.rate_bps = rate * 1_000_000;
            }
            m.realtime = spec.realtime.contains(&i);
        }
        let (app, app_service) = crate::app::channel()?;
        let (tx, rx) = mpsc::channel();
        let names = taps.clone();
        let ctl = control.clone();
        let spec2 = spec.clone();
        let mac0 = macs[0];
        let thread = bed
            .sw
            .spawn(move || -> Result<(), String> {
                let spec = spec2;
                let mut cfg = StackConfig::new(
                    mac0,
                    Ipv4Cidr::new(Ipv4Address(ip.octets()), 24).ok_or("bad prefix")?,
                );
                cfg.seed = u64::from(spec.host);
                cfg.tcp.rx_buffer = spec.rx_buffer;
                cfg.tcp.tx_buffer = spec.tx_buffer;
                cfg.tcp.tx_max_chunks = 4096;
                let ecfg = EngineConfig {
                    control: Some(ctl),
                    cpu: spec.cpu,
                    ..EngineConfig::default()
                };
                if spec.bond {
                    let members = names
                        .iter()
                        .map(|name| {
                            TapPort::open(name, spec.offloads, 1500).map(|p| BondMember {
                                name: name.clone(),
                                port: Box::new(p),
                            })
                        })
                        .collect::<io::Result<Vec<_>>>()
                        .map_err(|e| format!("opening the TAPs: {e}"))?;
                    let port = BondPort::new(bcfg, members).map_err(|e| e.to_string())?;
                    run_engine(cfg, port, ecfg, app_service, &tx)
                } else {
                    let name = names.first().ok_or("no TAP")?;
                    let port = TapPort::open(name, spec.offloads, 1500)
                        .map_err(|e| format!("opening {name}: {e}"))?;
                    run_engine(cfg, port, ecfg, app_service, &tx)
                }
            })
            .map_err(|e| other("starting the engine thread", e))?;
        let (started, thread) = super::wait_started(&rx, thread, &ip.to_string())?;
        let host = BondHost {
            ip,
            taps,
            macs,
            app,
            control,
            engine_tid: started.tid,
            stop: started.stop,
            thread: Some(thread),
        };
        for t in &host.taps {
            bed.attach_member(t)
                .map_err(|e| other(&format!("plugging {t} in"), e))?;
        }
        Ok(host)
    }

    /// Its `softoe stat` snapshot.
    pub fn snapshot(&self) -> io::Result<Snapshot> {
        crate::control::query(&self.control)
    }

    /// Its bond's part of the snapshot (an error for a plain port).
    pub fn bond(&self) -> io::Result<BondStat> {
        self.snapshot()?
            .bond
            .ok_or_else(|| io::Error::other("not a bonded port"))
    }

    /// Stops the engine and waits for its thread; its error, if it failed.
    pub fn stop(&mut self) -> io::Result<()> {
        self.stop.stop();
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|e| other("the engine thread", e))?
                .map_err(io::Error::other),
            None => Ok(()),
        }
    }
}

impl Drop for BondHost {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.control);
    }
}
