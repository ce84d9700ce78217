//! The real-wire testbed `softoe demo` and `softoe bench` share: network
//! namespaces joined by a Linux bridge, the softoe engine on a TAP (with
//! TSO, checksum offload and receive coalescing) or on an AF_XDP socket on
//! a veth to the bridge ([`BedPort`]) serving host programs over
//! shared memory, a Linux client host that runs the workloads, and a Linux
//! peer host that serves the same workloads with the kernel's TCP.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use softoe_engine::host::{HostConfig, HostService};
use softoe_engine::{
    Engine, EngineConfig, EngineCounters, Port, TapOffloads, TapPort, XdpOptions, XdpPort,
};

use softoe_stack::StackConfig;
pub use softoe_testbed::is_root;
use softoe_testbed::{BRIDGE, Lan, LinuxHost, Netns, NsThread, Testbed};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

/// The engine's address.
pub const ENGINE: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 1);
/// The Linux host that runs the workloads.
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 2);
/// The Linux host that serves them with the kernel's TCP.
pub const PEER: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 3);

/// The engine's port on the bridge.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BedPort {
    /// A TAP device on the bridge (with [`BedOptions::offloads`]).
    #[default]
    Tap,
    /// An AF_XDP socket (copy mode, no offloads) on a veth whose other end
    /// is on the bridge; that end computes checksums in software (`tx`
    /// off), as the port cannot vouch for partial ones.
    Xdp,
}

/// How the engine runs.
#[derive(Clone, Debug, Default)]
pub struct BedOptions {
    /// The engine's port.
    pub port: BedPort,
    /// Record every frame here.
    pub pcap: Option<PathBuf>,
    /// The TAP's offloads (all on by default).
    pub offloads: TapOffloads,
    /// Interrupt coalescing on receive: wait this long after a frame for
    /// more (zero: off).
    pub rx_coalesce: Duration,
    /// Completion coalescing: a waiting program's doorbell rings once the
    /// oldest unannounced event is this old (zero: at once).
    pub wake_delay: Duration,
    /// How long the engine spins idle before it sleeps (default: the
    /// engine's own).
    pub spin: Option<Duration>,
    /// Pin the engine to this core.
    pub cpu: Option<usize>,
    /// The engine thread's nice value (`EngineConfig::nice`).
    pub nice: Option<i32>,
    /// Serve `softoe stat` snapshots on this control socket.
    pub control: Option<PathBuf>,
    /// Emulate a slower engine core (`EngineConfig::speed`, `0 < s ≤ 1`;
    /// `None`: full speed).
    pub speed: Option<f64>,
    /// Emulate slower memory: a busy-wait per shared-memory access
    /// (`EngineConfig::access_delay`).
    pub access_delay: Duration,
    /// Time the engine's stages (`EngineConfig::profile_stages`).
    pub profile_stages: bool,
    /// Where the kernel's work for the engine's sent frames runs
    /// (`EngineConfig::steer`; default: auto).
    pub steer: softoe_engine::Steer,
}

/// What the engine's thread reports when it starts.
struct Started {
    stop: softoe_engine::StopHandle,
    tid: i32,
}

/// A running testbed; dropping it stops the engine and removes the
/// namespaces.
pub struct RealBed {
    /// The namespaces (removed when dropped).
    pub tb: Testbed,
    /// The switch: the bridge and the engine's TAP.
    pub sw: Netns,
    /// The Linux client host.
    pub client: Netns,
    /// The Linux peer host.
    pub peer: Netns,
    /// The client's bridge port (in `sw`).
    pub client_port: String,
    /// The engine's device on the bridge (in `sw`): its TAP, or with
    /// [`BedPort::Xdp`] the bridge's end of its veth (frames to the engine
    /// leave through it, as through the TAP).
    pub tap: String,
    /// Where host programs attach.
    pub host: PathBuf,
    /// The engine thread's id (for its CPU time).
    pub engine_tid: i32,
    /// The host interface's sessions, as `softoe stat` shows them
    /// (refreshed every millisecond).
    pub sessions: softoe_engine::host::SessionStats,
    /// The sessions the engine reclaimed last, timed by the engine.
    pub reclaims: softoe_engine::host::Reclaims,
    stop: softoe_engine::StopHandle,
    engine: Option<NsThread<Result<EngineCounters>>>,
}

impl std::fmt::Debug for RealBed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealBed")
            .field("sw", &self.sw.name())
            .field("client", &self.client.name())
            .field("peer", &self.peer.name())
            .field("tap", &self.tap)
            .field("host", &self.host)
            .field("engine_tid", &self.engine_tid)
            .finish_non_exhaustive()
    }
}

impl RealBed {
    /// Builds the testbed and starts the engine.
    pub fn start(opts: BedOptions) -> Result<RealBed> {
        if !is_root() {
            bail!(
                "this builds network namespaces, a bridge and a TAP device, which needs root.\n\
                 Run it with sudo (`softoe demo --simulated` needs no root)."
            );
        }
        let mut tb = Testbed::new().context("creating the testbed")?;
        let Lan { sw, hosts } = tb.lan(&[("client", CLIENT), ("linux", PEER)], 24, None)?;
        let [client, peer] = <[LinuxHost; 2]>::try_from(hosts)
            .map_err(|_| anyhow!("the LAN without its two Linux hosts"))?;
        let (client_port, client, peer) = (client.port, client.ns, peer.ns);

        let tap = format!("sot{}", std::process::id() % 100_000);
        // The engine's own device: the TAP, or the veth end XDP drives.
        let engine_dev = match opts.port {
            BedPort::Tap => tap.clone(),
            BedPort::Xdp => {
                let dev = format!("sox{}", std::process::id() % 100_000);
                sw.ip(&["link", "add", &dev, "type", "veth", "peer", "name", &tap])?;
                sw.ip(&["link", "set", &dev, "up"])?;
                sw.ip(&["link", "set", &tap, "up"])?;
                tb.ethtool_k(&sw, &tap, &["tx", "off"])?;
                dev
            }
        };
        let (tx, rx) = mpsc::channel();
        let tap_name = engine_dev.clone();
        let host = std::env::temp_dir().join(format!("softoe-bed-{}.sock", std::process::id()));
        let mut hcfg = HostConfig {
            path: host.clone(),
            mode: 0o600,
            device: Some(engine_dev.clone()),
            ..HostConfig::default()
        };
        if !opts.wake_delay.is_zero() {
            // Coalesce by time alone: a batch as large as the ring.
            hcfg.wake_batch = u32::MAX;
            hcfg.wake_delay = opts.wake_delay;
        }
        let host_service = HostService::new(hcfg)
            .with_context(|| format!("serving host programs on {}", host.display()))?;
        let sessions = host_service.stats();
        let reclaims = host_service.reclaims();
        let engine = sw.spawn(move || -> Result<EngineCounters> {
            match opts.port {
                BedPort::Tap => {
                    let port = TapPort::open(&tap_name, opts.offloads, 1500)
                        .context("opening the TAP device")?;
                    run_engine(port, opts, host_service, tx)
                }
                BedPort::Xdp => {
                    let port = XdpPort::open(&tap_name, &XdpOptions::default())
                        .context("opening the AF_XDP port")?;
                    run_engine(port, opts, host_service, tx)
                }
            }
        })?;
        let started = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| anyhow!("the engine did not start"))?;
        let bed = RealBed {
            tb,
            sw,
            client,
            peer,
            client_port,
            tap: tap.clone(),
            host,
            engine_tid: started.tid,
            sessions,
            reclaims,
            stop: started.stop,
            engine: Some(engine),
        };
        bed.tb.attach(&bed.sw, &tap, BRIDGE)?;
        Ok(bed)
    }

    /// The engine's host socket.
    pub fn host(&self) -> &Path {
        &self.host
    }

    /// Stops the engine and returns its counters.
    pub fn stop(&mut self) -> Result<EngineCounters> {
        self.stop.stop();
        match self.engine.take() {
            Some(t) => t.join()?,
            None => bail!("the engine was stopped already"),
        }
    }
}

impl Drop for RealBed {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
    }
}

/// Runs the testbed's engine on `port` until stopped (on the calling
/// thread, in the switch's namespace); tells `started` once it runs.
fn run_engine<P: Port>(
    port: P,
    opts: BedOptions,
    host_service: HostService,
    started: mpsc::Sender<Started>,
) -> Result<EngineCounters> {
    let mut cfg = StackConfig::new(
        EthernetAddress([2, 0x50, 0, 0, 0, 1]),
        Ipv4Cidr::new(Ipv4Address(ENGINE.octets()), 24).ok_or_else(|| anyhow!("address"))?,
    );
    cfg.seed = 1;
    cfg.tcp.rx_buffer = 4 << 20;
    cfg.tcp.tx_buffer = 4 << 20;
    cfg.tcp.tx_max_chunks = 4096;
    let mut ecfg = EngineConfig::default();
    ecfg.pcap = opts.pcap;
    ecfg.rx_coalesce = opts.rx_coalesce;
    if let Some(spin) = opts.spin {
        ecfg.spin = spin;
    }
    ecfg.cpu = opts.cpu;
    ecfg.nice = opts.nice;
    ecfg.control = opts.control;
    ecfg.profile_stages = opts.profile_stages;
    ecfg.steer = opts.steer;
    if let Some(speed) = opts.speed {
        ecfg = ecfg
            .with_speed(speed)
            .map_err(|e| anyhow!("the engine's speed: {e}"))?;
    }
    ecfg = ecfg
        .with_access_delay(opts.access_delay)
        .map_err(|e| anyhow!("the engine's memory delay: {e}"))?;
    let mut e = Engine::new(cfg, port, ecfg)?;
    e.watch_sessions(host_service.stats());
    e.add_service(Box::new(host_service));
    let tid = this_thread_id()?;
    started
        .send(Started {
            stop: e.stop_handle(),
            tid,
        })
        .map_err(|_| anyhow!("the testbed went away"))?;
    e.run()?;
    Ok(*e.counters())
}

/// The calling thread's kernel id, from `/proc/thread-self`
/// (`PID/task/TID`).
pub fn this_thread_id() -> Result<i32> {
    let link = std::fs::read_link("/proc/thread-self").context("reading /proc/thread-self")?;
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| anyhow!("odd /proc/thread-self: {}", link.display()))
}

/// `[engine] steer` and `--steer`: see [`softoe_engine::steer`].
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    serde::Deserialize,
    serde::Serialize,
    PartialEq,
    Eq,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum SteerMode {
    /// The kernel's work stays inside the engine's writes.
    Off,
    /// Always on the other cores.
    On,
    /// On the other cores while the engine's is full and theirs are not.
    #[default]
    Auto,
}

impl From<SteerMode> for softoe_engine::Steer {
    fn from(m: SteerMode) -> softoe_engine::Steer {
        match m {
            SteerMode::Off => softoe_engine::Steer::Off,
            SteerMode::On => softoe_engine::Steer::On,
            SteerMode::Auto => softoe_engine::Steer::Auto,
        }
    }
}
