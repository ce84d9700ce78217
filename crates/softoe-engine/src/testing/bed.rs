//! One engine on a TAP and Linux behind a bridge: what the engine's interop
//! and host-interface tests and the shim's tests share.
//!
//! [`Bed::start`] builds a switch namespace with a bridge and a Linux
//! namespace plugged into it ([`LINUX_IP`]), runs the engine
//! ([`ENGINE_IP`]) in a thread of the switch namespace on a TAP plugged
//! into the same bridge, with the in-process [`App`] API, a control socket
//! and, if asked, the host interface for programs in other processes.

use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use softoe_stack::StackConfig;
use softoe_testbed::{BRIDGE, Lan, Netns, NsThread, Testbed};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

use super::other;
use crate::host::{HostConfig, HostService};
use crate::services::Service;
use crate::{
    App, Engine, EngineConfig, EngineCounters, Port, Snapshot, StopHandle, TapOffloads, TapPort,
    XdpOptions, XdpPort,
};

/// The engine's address (a /24 with Linux's).
pub const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 1);
/// Linux's address, on its `eth0`.
pub const LINUX_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 2);

static N: AtomicU32 = AtomicU32::new(0);

std::thread_local! {
    /// The bed the current test thread started last (control socket and
    /// Linux's namespace), for [`describe_current`].
    static CURRENT: std::cell::RefCell<Option<(PathBuf, String)>> =
        const { std::cell::RefCell::new(None) };
}

/// What the engine and Linux say of their connections now, for a test
/// that gives up waiting: the engine's `softoe stat` (connections,
/// sessions, counters) and `ss -tinm` in Linux's namespace. Empty when
/// this thread has no bed.
pub fn describe_current() -> String {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map_or_else(String::new, |(control, ns)| {
                let stat = crate::control::query(control).map_or_else(
                    |e| format!("softoe stat failed: {e}"),
                    |s| format!("{s:#?}"),
                );
                let ss = Netns::named(ns)
                    .command("ss")
                    .args(["-tinmH"])
                    .output()
                    .map_or_else(
                        |e| format!("ss failed: {e}"),
                        |o| String::from_utf8_lossy(&o.stdout).into_owned(),
                    );
                format!("--- the engine (softoe stat) ---\n{stat}\n--- Linux (ss -tinm) ---\n{ss}")
            })
    })
}

/// A running engine with Linux beside it; dropping it stops the engine and
/// removes the namespaces.
#[derive(Debug)]
pub struct Bed {
    /// The namespaces (removed when dropped).
    pub tb: Testbed,
    /// The switch: the bridge ([`BRIDGE`]) and the engine's TAP.
    pub sw: Netns,
    /// Linux, on `eth0` ([`LINUX_IP`]).
    pub linux: Netns,
    /// The engine's TAP device (in `sw`), or with [`BedOptions::xdp`] the
    /// bridge's end of the engine's veth.
    pub tap: String,
    /// Sockets on the engine, from the test's threads.
    pub app: App,
    /// The engine's control socket.
    pub control: PathBuf,
    /// Where host programs attach (when [`BedOptions::host`]).
    pub host: PathBuf,
    stop: Option<StopHandle>,
    engine: Option<NsThread<Result<EngineCounters, String>>>,
}

/// How a [`Bed`] is built and its engine configured.
#[derive(Debug)]
pub struct BedOptions {
    /// The TAP's offloads.
    pub offloads: TapOffloads,
    /// Every link's MTU (the TAP, the bridge, Linux's veth).
    pub mtu: usize,
    /// The engine's configuration; its control socket is the bed's.
    pub engine: EngineConfig,
    /// Serve host programs (the host interface) on a socket of its own.
    pub host: bool,
    /// Changes to the host interface's configuration (its limits), made
    /// last.
    pub host_config: fn(&mut HostConfig),
    /// Changes to the stack's configuration, made last.
    pub stack: fn(&mut StackConfig),
    /// Put the engine on an [`XdpPort`] (copy mode, no offloads:
    /// `offloads` do not apply) on a veth whose other end is on the
    /// bridge, in place of the TAP. That end computes checksums itself
    /// (`tx` off), as the port cannot vouch for partial ones.
    pub xdp: bool,
}

impl Default for BedOptions {
    /// Every offload on, MTU 1500, the engine's defaults, no host
    /// interface, the stack as [`Bed::start`] sets it.
    fn default() -> BedOptions {
        BedOptions {
            offloads: TapOffloads::default(),
            mtu: 1500,
            engine: EngineConfig::default(),
            host: false,
            host_config: |_| {},
            stack: |_| {},
            xdp: false,
        }
    }
}

impl Bed {
    /// Builds the testbed and starts the engine with `services`.
    pub fn start(opts: BedOptions, services: Vec<Box<dyn Service>>) -> io::Result<Bed> {
        let tb_err = |what: &str| {
            let what = what.to_string();
            move |e: softoe_testbed::Error| other(&what, e)
        };
        let mut tb = Testbed::new().map_err(tb_err("creating the testbed"))?;
        tb.deadline(softoe_testbed::test_deadline());
        let Lan { sw, hosts } = tb
            .lan(&[("lx", LINUX_IP)], 24, Some(opts.mtu))
            .map_err(tb_err("the switch and Linux"))?;
        let linux = hosts
            .into_iter()
            .next()
            .ok_or_else(|| io::Error::other("the LAN without its Linux host"))?
            .ns;
        let n = N.fetch_add(1, Ordering::Relaxed);
        let tap = format!("sotap{n}");
        let control =
            std::env::temp_dir().join(format!("softoe-test-{}-{n}.sock", std::process::id()));
        // The engine's own device: the TAP, or the veth end XDP drives.
        let dev = if opts.xdp {
            let dev = format!("soxdp{n}");
            sw.ip(&["link", "add", &dev, "type", "veth", "peer", "name", &tap])
                .map_err(tb_err("the engine's veth"))?;
            for d in [&dev, &tap] {
                tb.mtu(&sw, d, opts.mtu).map_err(tb_err("the veth's MTU"))?;
                sw.ip(&["link", "set", d, "up"])
                    .map_err(tb_err("the engine's veth up"))?;
            }
            tb.ethtool_k(&sw, &tap, &["tx", "off"])
                .map_err(tb_err("the veth's checksums"))?;
            dev
        } else {
            tap.clone()
        };
        let xdp = opts.xdp;
        let (tx, rx) = mpsc::channel();
        let tap_name = dev.clone();
        let (offloads, mtu, mut ecfg, tune) = (opts.offloads, opts.mtu, opts.engine, opts.stack);
        // SOFTOE_TEST_PCAP=FILE records the engine's frames in any test
        // (one engine at a time: the last test run writes the file).
        if ecfg.pcap.is_none() {
            ecfg.pcap = std::env::var_os("SOFTOE_TEST_PCAP").map(Into::into);
        }
        ecfg.control = Some(control.clone());
        let host =
            std::env::temp_dir().join(format!("softoe-host-{}-{n}.sock", std::process::id()));
        let host_service = opts
            .host
            .then(|| {
                let mut hcfg = HostConfig {
                    path: host.clone(),
                    device: Some(dev.clone()),
                    ..Default::default()
                };
                (opts.host_config)(&mut hcfg);
                HostService::new(hcfg)
            })
            .transpose()
            .map_err(|e| other("serving host programs", e))?;
        let sessions = host_service.as_ref().map(HostService::stats);
        let (app, app_service) = crate::app::channel()?;
        let engine = sw
            .spawn(move || -> Result<EngineCounters, String> {
                let mut cfg = StackConfig::new(
                    EthernetAddress([2, 0x50, 0, 0, 0, 1]),
                    Ipv4Cidr::new(Ipv4Address(ENGINE_IP.octets()), 24).ok_or("bad prefix")?,
                );
                cfg.seed = 1;
                cfg.tcp.rx_buffer = 1 << 20;
                cfg.tcp.tx_buffer = 4 << 20;
                cfg.tcp.tx_max_chunks = 4096;
                tune(&mut cfg);
                let mut services: Vec<Box<dyn Service>> = services;
                if let Some(h) = host_service {
                    services.insert(0, Box::new(h));
                }
                services.insert(0, Box::new(app_service));
                if xdp {
                    let port = XdpPort::open(&tap_name, &XdpOptions::default())
                        .map_err(|e| e.to_string())?;
                    serve(cfg, port, ecfg, services, sessions, &tx)
                } else {
                    let port =
                        TapPort::open(&tap_name, offloads, mtu).map_err(|e| e.to_string())?;
                    serve(cfg, port, ecfg, services, sessions, &tx)
                }
            })
            .map_err(|e| other("starting the engine thread", e))?;
        let (stop, engine) = super::wait_started(&rx, engine, &ENGINE_IP.to_string())?;
        // Built before the TAP is plugged in: a failure from here on stops
        // the engine (on drop).
        let bed = Bed {
            tb,
            sw,
            linux,
            tap,
            app,
            control,
            host,
            stop: Some(stop),
            engine: Some(engine),
        };
        bed.tb
            .attach(&bed.sw, &bed.tap, BRIDGE)
            .map_err(tb_err("plugging the TAP in"))?;
        bed.tb
            .mtu(&bed.sw, &bed.tap, mtu)
            .map_err(tb_err("the TAP's MTU"))?;
        CURRENT
            .with(|c| *c.borrow_mut() = Some((bed.control.clone(), bed.linux.name().to_string())));
        Ok(bed)
    }

    /// Starts another service on the running engine.
    pub fn add(&self, s: Box<dyn Service>) -> io::Result<()> {
        let gone = || io::Error::other("the engine is gone");
        self.stop
            .as_ref()
            .ok_or_else(gone)?
            .add_service(s)
            .map_err(|_| gone())
    }

    /// What `softoe stat` would show now.
    pub fn snapshot(&self) -> io::Result<Snapshot> {
        crate::control::query(&self.control)
    }

    /// Stops the engine and returns its counters (the default once
    /// stopped); its error, if it failed.
    pub fn stop(&mut self) -> io::Result<EngineCounters> {
        if let Some(s) = self.stop.take() {
            s.stop();
        }
        match self.engine.take() {
            Some(t) => t
                .join()
                .map_err(|e| other("the engine thread", e))?
                .map_err(|e| other("the engine", e)),
            None => Ok(EngineCounters::default()),
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_some_and(|(p, _)| *p == self.control) {
                *c = None;
            }
        });
        if let Some(s) = self.stop.take() {
            s.stop();
        }
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
    }
}

/// Runs the bed's engine on `port` with `services` until stopped, telling
/// `started` its stop handle first.
fn serve<P: Port>(
    cfg: StackConfig,
    port: P,
    ecfg: EngineConfig,
    services: Vec<Box<dyn Service>>,
    sessions: Option<crate::host::SessionStats>,
    started: &mpsc::Sender<StopHandle>,
) -> Result<EngineCounters, String> {
    let mut e = Engine::new(cfg, port, ecfg).map_err(|e| e.to_string())?;
    if let Some(s) = sessions {
        e.watch_sessions(s);
    }
    for s in services {
        e.add_service(s);
    }
    started.send(e.stop_handle()).map_err(|e| e.to_string())?;
    e.run().map_err(|e| e.to_string())?;
    Ok(*e.counters())
}

/// Waits until `f` holds (polling every 10 ms); an error (`TimedOut`,
/// "timed out waiting for `what`") after `secs`.
pub fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool) -> io::Result<()> {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        if Instant::now() >= end {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("timed out waiting for {what}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// `b` in lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// SHA-256 of `b`, hex.
pub fn sha256(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}
