//! `softoe engine`: runs the engine on a TAP device until SIGINT/SIGTERM.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use signal_hook::consts::{SIGINT, SIGTERM};
use softoe_engine::host::{HostConfig, HostService};
use softoe_engine::services::{Discard, Echo, RequestResponse, Service, Source};
use softoe_engine::tap::{DeviceKind, TapRefused};
use softoe_engine::{
    AfPacketOffloads, AfPacketOptions, AfPacketPort, BondMember, BondPort, Engine, FaultConfig,
    FaultPort, Port, TapPort, XdpMode, XdpOptions, XdpPort,
};
use tracing::info;

use crate::config::{Built, Congestion, FileConfig, PortKind, ServiceKind, ServiceSpec, Size};

/// Options of `softoe engine`. Flags override the file.
#[derive(Debug, Args)]
#[command(after_long_help = EXAMPLES)]
pub struct EngineArgs {
    /// A TOML configuration file (see `--print-config` for every key).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// The engine's IPv4 address and prefix, e.g. 10.7.0.1/24.
    #[arg(long)]
    address: Option<String>,
    /// Next hop for destinations outside the prefix.
    #[arg(long)]
    gateway: Option<std::net::Ipv4Addr>,
    /// The engine's MAC address (default: 02:50 and the IPv4 address).
    #[arg(long)]
    mac: Option<String>,
    /// IP MTU of the TAP device.
    #[arg(long)]
    mtu: Option<usize>,
    /// TAP device to create (or attach to).
    #[arg(long, conflicts_with_all = ["afpacket", "xdp", "bond"])]
    tap: Option<String>,
    /// Bond these devices behind the one address (BondingPlus): TAP devices
    /// the engine creates, each with its own MAC (or, with --bond-afpacket,
    /// existing interfaces). One TCP connection to another bonded host uses
    /// every member; hosts with plain ARP reach the bond on one member each.
    #[arg(
        long,
        value_name = "DEV,DEV,...",
        value_delimiter = ',',
        conflicts_with_all = ["afpacket", "xdp"]
    )]
    bond: Vec<String>,
    /// The --bond members are existing interfaces (e.g. veths), driven
    /// through AF_PACKET.
    #[arg(long, requires = "bond")]
    bond_afpacket: bool,
    /// How frames are spread over the members: round-robin (frame after
    /// frame), least-queued (where the frame finishes first; the default),
    /// prioritized (sockets with SO_PRIORITY >= 6 on the --bond-realtime
    /// members, the rest on the others).
    #[arg(long, value_name = "POLICY", value_parser = ["round-robin", "least-queued", "prioritized"])]
    bond_policy: Option<String>,
    /// Members dedicated to real-time traffic (with --bond-policy prioritized).
    #[arg(long, value_name = "DEV,...", value_delimiter = ',')]
    bond_realtime: Vec<String>,
    /// Each member's link rate in Mbit/s, for least-queued (one for all).
    #[arg(long, value_name = "MBIT")]
    bond_rate: Option<u64>,
    /// Drive this existing interface (e.g. a veth) through AF_PACKET instead
    /// of a TAP device.
    #[arg(long, value_name = "IFACE", conflicts_with = "xdp")]
    afpacket: Option<String>,
    /// Drive this existing interface through an AF_XDP socket: the engine
    /// loads an XDP program that hands it every frame of the interface's
    /// queue 0, and frames move through rings shared with the kernel — one
    /// system call per batch of frames, not one per frame. Copy mode (what
    /// a veth offers): no TSO or checksum offload, so a Linux peer on the
    /// veth's other end must compute its checksums (ethtool -K PEER tx
    /// off). The interface needs one receive queue (ethtool -L IFACE rx 1).
    #[arg(long, value_name = "IFACE")]
    xdp: Option<String>,
    /// Where --xdp's program runs: driver (the interface's own XDP hook;
    /// veth has one) or generic (any interface, slower). Default: driver
    /// if the interface has it.
    #[arg(long, value_name = "MODE", requires = "xdp", value_parser = ["driver", "generic"])]
    xdp_mode: Option<String>,
    /// Inject seeded faults at the port: drop this fraction (0–1) of frames
    /// each way (more kinds in the file's `[fault]` section).
    #[arg(long, value_name = "FRACTION")]
    fault_loss: Option<f64>,
    /// Seed of the injected faults.
    #[arg(long)]
    fault_seed: Option<u64>,
    /// Attach the TAP device to this Linux bridge.
    #[arg(long)]
    bridge: Option<String>,
    /// Frames the kernel may hold for the engine: the TAP device's queue,
    /// or the AF_PACKET socket's receive buffer sized for as many MTU
    /// frames (a burst beyond it is dropped; default 65536).
    #[arg(long, value_name = "FRAMES", alias = "tap-queue")]
    port_queue: Option<u32>,
    /// Turn TCP segmentation offload off.
    #[arg(long)]
    no_tso: bool,
    /// Turn checksum offload off (and with it TSO and GRO).
    #[arg(long)]
    no_csum: bool,
    /// Refuse receive-coalesced frames.
    #[arg(long)]
    no_gro: bool,
    /// Spin this many microseconds for work before sleeping.
    #[arg(long)]
    spin_us: Option<u64>,
    /// Interrupt coalescing: after a frame, wait this many microseconds for
    /// more (0: off).
    #[arg(long)]
    rx_coalesce_us: Option<u64>,
    /// Most frames read per loop turn.
    #[arg(long)]
    rx_batch: Option<usize>,
    /// Pin the engine to this core (its own: the engine core); programs
    /// run best on the others.
    #[arg(long)]
    cpu: Option<usize>,
    /// The engine thread's nice value, -20 to 19 (default: the one it
    /// starts with). A negative one puts it ahead of ordinary programs for
    /// a core, as the kernel's own network work is: on a machine busy with
    /// other work its wake-ups (and a killed program's reclaim) do not wait
    /// behind that work. It spins only --spin-us before it sleeps, so it
    /// takes no more CPU than before. Needs root or CAP_SYS_NICE.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    nice: Option<i32>,
    /// Emulate an engine core this fraction (0–1] as fast as this one: after
    /// each turn of work the engine busy-waits in proportion (the
    /// simulator's `engine.speed`, for checking it against the real engine).
    #[arg(long, value_name = "FRACTION")]
    engine_speed: Option<f64>,
    /// Emulate slower memory: busy-wait this many nanoseconds at every
    /// access to a program's shared memory (the simulator's `memory.delay`).
    #[arg(long, value_name = "NS")]
    access_delay_ns: Option<u64>,
    /// Time each stage of the engine's work into `softoe stat --json`
    /// (`engine.stages`): what `softoe sim` calibrates from.
    #[arg(long)]
    profile_stages: bool,
    /// Answer every received segment at once instead of once per receive
    /// batch (more ACKs; for ablations).
    #[arg(long)]
    no_batch_acks: bool,
    /// Where the kernel does its work for the frames the engine writes
    /// into its TAP — the bridge and, with the peer on this machine, the
    /// peer's receive path: off (inside the engine's writes), on (on the
    /// other cores, by RPS on the TAP's queue), auto (on the other cores
    /// while the engine's is full and theirs have room; the default).
    #[arg(long, value_enum)]
    steer: Option<crate::config::SteerMode>,
    /// Write every frame sent and received to this pcap file (super-segments
    /// as written; tcpdump -r and tshark -r read it).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Control socket for `softoe stat`.
    #[arg(long)]
    control: Option<PathBuf>,
    /// Socket buffers per connection (suffixes K, M, G).
    #[arg(long, value_parser = softoe_lab::units::parse_size)]
    buffer: Option<u64>,
    /// Congestion control.
    #[arg(long, value_enum)]
    cc: Option<Congestion>,
    /// A built-in service: echo:7, discard:9 (hashing what arrives, SHA-256
    /// in the report), sink:9 (discard that only counts: for measuring the
    /// engine's receive), source:19:1G (bytes to each client), rr:5000:4:64
    /// (answer each 4-byte request with 64 bytes). Repeat for more.
    #[arg(long = "service", short = 's')]
    services: Vec<ServiceSpec>,
    /// Serve host programs (softoe-host, `softoe run`) on this Unix socket
    /// (e.g. /run/softoe/host.sock; programs find it through
    /// $SOFTOE_SOCKET).
    #[arg(long)]
    host: Option<PathBuf>,
    /// Print the merged configuration as TOML and exit.
    #[arg(long)]
    print_config: bool,
}

const EXAMPLES: &str = "\
Examples:
  # An engine at 10.7.0.1 on TAP softoe0, bridged to br0, serving echo and discard:
  sudo softoe engine --address 10.7.0.1/24 --bridge br0 -s echo:7 -s discard:9

  # On an existing veth through AF_PACKET, dropping 1 % of frames each way:
  sudo softoe engine --address 10.7.0.1/24 --afpacket veth1 --fault-loss 0.01 -s echo:7

  # On a veth through AF_XDP (the peer end computes its own checksums):
  sudo ip netns exec peer ethtool -K veth0 tx off
  sudo softoe engine --address 10.7.0.1/24 --xdp veth1 -s echo:7

  # From a file (every key: --print-config), with a capture:
  sudo softoe engine --config engine.toml --pcap /tmp/engine.pcap

  # In another terminal, watch its connections:
  sudo softoe stat --watch 1

The engine creates the TAP device, brings it up and, with --bridge, attaches
it. Without a bridge, put the TAP in your topology yourself (ip link set
softoe0 master BRIDGE). With --afpacket or --xdp the interface must exist
and be up; the engine answers for its own address and MAC on it. The XDP
port's UMEM is in the file's [port.xdp] (frame_size, frames). It runs until
Ctrl-C or SIGTERM, then tells every peer: each connection is closed (a FIN
after what is queued) and has engine.stop_grace_ms (1000) to be acknowledged,
then whatever is still open is reset (RST); a second Ctrl-C resets at once.
It prints its counters on the way out. The [fault]
section of the file takes per-direction loss, duplicate, reorder, corrupt,
delay_us and jitter_us ([fault.rx], [fault.tx]) and a seed. Logs:
RUST_LOG=info (or debug).";

impl EngineArgs {
    /// The file (if any) with the flags applied.
    fn merged(&self) -> Result<FileConfig> {
        let mut c = match &self.config {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        let i = &mut c.interface;
        i.address = self.address.clone().or(i.address.take());
        i.gateway = self.gateway.or(i.gateway);
        i.mac = self.mac.clone().or(i.mac.take());
        i.mtu = self.mtu.or(i.mtu);
        let p = &mut c.port;
        if let Some(t) = &self.tap {
            p.tap = t.clone();
        }
        if let Some(q) = self.port_queue {
            p.queue = q;
        }
        if let Some(i) = &self.afpacket {
            p.kind = PortKind::Afpacket;
            p.interface = Some(i.clone());
        }
        if let Some(i) = &self.xdp {
            p.kind = PortKind::Xdp;
            p.interface = Some(i.clone());
        }
        if let Some(m) = &self.xdp_mode {
            p.xdp.mode = Some(match m.as_str() {
                "generic" => XdpMode::Generic,
                _ => XdpMode::Driver,
            });
        }
        if self.bond_afpacket {
            p.kind = PortKind::Afpacket;
        }
        let b = &mut c.bond;
        if !self.bond.is_empty() {
            b.members = self.bond.clone();
        }
        if let Some(pol) = &self.bond_policy {
            b.policy = pol.clone();
        }
        if !self.bond_realtime.is_empty() {
            b.realtime = self.bond_realtime.clone();
        }
        if let Some(r) = self.bond_rate {
            b.rate_mbit = vec![r];
        }
        if self.fault_loss.is_some() || self.fault_seed.is_some() {
            let f = c.fault.get_or_insert_with(FaultConfig::default);
            if let Some(l) = self.fault_loss {
                f.rx.loss = l;
                f.tx.loss = l;
            }
            if let Some(s) = self.fault_seed {
                f.seed = s;
            }
        }
        p.bridge = self.bridge.clone().or(p.bridge.take());
        p.tso &= !self.no_tso;
        p.csum &= !self.no_csum;
        p.gro &= !self.no_gro;
        let e = &mut c.engine;
        e.spin_us = self.spin_us.unwrap_or(e.spin_us);
        e.rx_coalesce_us = self.rx_coalesce_us.unwrap_or(e.rx_coalesce_us);
        if self.cpu.is_some() {
            e.cpu = self.cpu;
        }
        if self.nice.is_some() {
            e.nice = self.nice;
        }
        e.rx_batch = self.rx_batch.unwrap_or(e.rx_batch);
        e.batch_acks &= !self.no_batch_acks;
        e.speed = self.engine_speed.unwrap_or(e.speed);
        e.access_delay_ns = self.access_delay_ns.unwrap_or(e.access_delay_ns);
        e.profile_stages |= self.profile_stages;
        e.steer = self.steer.unwrap_or(e.steer);
        e.pcap = self.pcap.clone().or(e.pcap.take());
        if let Some(ctl) = &self.control {
            e.control = ctl.clone();
        }
        e.host = self.host.clone().or(e.host.take());
        if let Some(b) = self.buffer {
            c.tcp.rx_buffer = Size(b);
            c.tcp.tx_buffer = Size(b);
        }
        c.tcp.congestion = self.cc.unwrap_or(c.tcp.congestion);
        c.services.extend(self.services.iter().cloned());
        Ok(c)
    }
}

/// `softoe engine`.
pub fn run(args: &EngineArgs) -> Result<()> {
    let cfg = args.merged()?;
    if args.print_config {
        print!("{}", toml::to_string_pretty(&cfg)?);
        return Ok(());
    }
    // Before anything is printed or opened: the engine pins itself to
    // its core only once it runs, after the banner.
    if let Some(cpu) = cfg.engine.cpu {
        softoe_engine::engine::check_cpu(cpu)
            .map_err(|e| anyhow!("cannot pin the engine to CPU {cpu}: {e}"))?;
    }
    if let Some(nice) = cfg.engine.nice {
        softoe_engine::engine::check_nice(nice)
            .map_err(|e| anyhow!("cannot run the engine at nice {nice}: {e}"))?;
    }
    let built = cfg.build()?;
    if let Some(dir) = cfg.engine.control.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating {} for the control socket", dir.display()))?;
    }
    // Before anything is opened: a second engine on the same paths would
    // take the first one's sockets away from `softoe stat` and programs.
    softoe_engine::sockpath::claim(&cfg.engine.control, "control socket").map_err(|e| {
        anyhow!(
            "{e} (`softoe stat --control {}` shows it; this one takes --control PATH)",
            cfg.engine.control.display()
        )
    })?;
    if let Some(h) = &cfg.engine.host {
        softoe_engine::sockpath::claim(h, "host interface")
            .map_err(|e| anyhow!("{e} (this one takes --host PATH)"))?;
    }
    if let Some(bond) = built.bond.clone() {
        let mut members = Vec::new();
        for name in &cfg.bond.members {
            let port: Box<dyn Port + Send> = match cfg.port.kind {
                PortKind::Tap => Box::new(open_tap(&cfg, &built, name)?),
                PortKind::Afpacket => Box::new(open_afpacket(&cfg, name)?),
                PortKind::Xdp => Box::new(open_xdp(&cfg, name)?),
            };
            members.push(BondMember {
                name: name.clone(),
                port,
            });
        }
        let port = BondPort::new(bond, members).context("building the bond")?;
        return with_faults(&cfg, built, port);
    }
    match cfg.port.kind {
        PortKind::Tap => {
            let port = open_tap(&cfg, &built, &cfg.port.tap)?;
            with_faults(&cfg, built, port)
        }
        PortKind::Afpacket => {
            let iface = cfg.port.interface.clone().unwrap_or_default();
            let port = open_afpacket(&cfg, &iface)?;
            with_faults(&cfg, built, port)
        }
        PortKind::Xdp => {
            let iface = cfg.port.interface.clone().unwrap_or_default();
            let port = open_xdp(&cfg, &iface)?;
            with_faults(&cfg, built, port)
        }
    }
}

/// Creates (or attaches to) TAP device `name`, brings it up and puts it on
/// `[port]`'s bridge.
fn open_tap(cfg: &FileConfig, built: &Built, name: &str) -> Result<TapPort> {
    let port = TapPort::open(name, built.offloads, built.mtu).map_err(|e| {
        // The device is there and is not one the engine can have: the
        // message says what it is, and what to give instead.
        if let Some(r) = e.get_ref().and_then(|r| r.downcast_ref::<TapRefused>()) {
            let hint = match r {
                TapRefused::NotATap {
                    kind: DeviceKind::Bridge,
                    ..
                } if cfg.port.bridge.as_deref() != Some(name) => {
                    format!(" (--bridge {name} puts softoe's own TAP on it)")
                }
                TapRefused::NotATap {
                    kind: DeviceKind::Veth | DeviceKind::Other(_),
                    ..
                } if cfg.bond.active() => {
                    " (--bond-afpacket drives existing interfaces)".to_string()
                }
                TapRefused::NotATap {
                    kind: DeviceKind::Veth | DeviceKind::Other(_),
                    ..
                } => format!(" (--afpacket {name} drives an existing interface)"),
                _ => String::new(),
            };
            return anyhow!("{r}{hint}");
        }
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (creating a TAP device needs root or CAP_NET_ADMIN)"
        } else {
            ""
        };
        anyhow!("opening TAP device {name}: {e}{hint}")
    })?;
    port.set_queue_len(cfg.port.queue)
        .with_context(|| format!("setting {name}'s queue length"))?;
    port.bring_up()
        .with_context(|| format!("bringing {name} up"))?;
    if let Some(br) = &cfg.port.bridge {
        let st = std::process::Command::new("ip")
            .args(["link", "set", name, "master", br])
            .status()
            .context("running ip (iproute2) to attach the TAP device")?;
        if !st.success() {
            bail!("could not attach {name} to bridge {br}");
        }
    }
    Ok(port)
}

/// Opens an AF_PACKET port on the existing interface `iface`.
fn open_afpacket(cfg: &FileConfig, iface: &str) -> Result<AfPacketPort> {
    let opts = AfPacketOptions {
        offloads: AfPacketOffloads {
            tso: cfg.port.tso,
            csum: cfg.port.csum,
            gro: cfg.port.gro,
        },
        mtu: cfg.interface.mtu,
        ..AfPacketOptions::default()
    }
    .receive_frames(cfg.port.queue);
    AfPacketPort::open(iface, &opts).map_err(|e| anyhow!("opening AF_PACKET on {iface}: {e}"))
}

/// Opens an AF_XDP port on queue 0 of the existing interface `iface`.
fn open_xdp(cfg: &FileConfig, iface: &str) -> Result<XdpPort> {
    let x = &cfg.port.xdp;
    let opts = XdpOptions {
        frame_size: x.frame_size,
        frames: x.frames,
        mtu: cfg.interface.mtu,
        mode: x.mode,
    };
    XdpPort::open(iface, &opts).map_err(|e| anyhow!("opening AF_XDP on {iface}: {e}"))
}

/// Wraps the port in the fault injector if `[fault]` asks for it.
fn with_faults<P: Port>(cfg: &FileConfig, built: Built, port: P) -> Result<()> {
    match &cfg.fault {
        Some(f) if f.rx.is_active() || f.tx.is_active() => {
            let port = FaultPort::new(port, f.clone()).context("in [fault]")?;
            serve(cfg, built, port)
        }
        _ => serve(cfg, built, port),
    }
}

/// Runs the engine on `port` until a signal.
fn serve<P: Port>(cfg: &FileConfig, built: Built, port: P) -> Result<()> {
    let describe = port.describe();
    let mut engine = Engine::new(built.stack, port, built.engine)?;
    if let Some(path) = &cfg.engine.host {
        let device = match cfg.port.kind {
            _ if cfg.bond.active() => cfg.bond.members.first().cloned(),
            PortKind::Tap => Some(cfg.port.tap.clone()),
            PortKind::Afpacket | PortKind::Xdp => cfg.port.interface.clone(),
        };
        let (max_sessions, root_sessions, per_user) = cfg.limits.host()?;
        let h = HostService::new(HostConfig {
            path: path.clone(),
            device,
            unprivileged_port_start: softoe_engine::host::unprivileged_port_start(),
            max_sessions,
            root_sessions,
            per_user,
            ..HostConfig::default()
        })
        .with_context(|| format!("serving host programs on {}", path.display()))?;
        engine.watch_sessions(h.stats());
        engine.add_service(Box::new(h));
    }
    let reports = Arc::new(Mutex::new(Vec::new()));
    for s in &cfg.services {
        let svc: Box<dyn Service> = match s.kind {
            ServiceKind::Echo => Box::new(Echo::new(s.port, reports.clone())),
            ServiceKind::Discard => Box::new(Discard::new(s.port, reports.clone())),
            ServiceKind::Sink => Box::new(Discard::counting(s.port, reports.clone())),
            ServiceKind::Source => Box::new(Source::new(
                s.port,
                s.bytes.map_or(0, |b| b.0),
                reports.clone(),
            )),
            ServiceKind::Rr => Box::new(
                RequestResponse::new(
                    s.port,
                    s.request.map_or(0, |b| b.0),
                    s.response.map_or(0, |b| b.0),
                    reports.clone(),
                )
                .map_err(anyhow::Error::msg)?,
            ),
        };
        engine.add_service(svc);
    }
    // Ctrl-C and SIGTERM stop the loop; it notices within its longest sleep.
    let stop = engine.stop_handle();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing signal handlers")?;
    let sig_handle = signals.handle();
    // The first signal stops (connections close with a grace), a second
    // one hurries (what is open is reset now).
    let watcher = std::thread::spawn(move || {
        let mut n = 0;
        for _ in signals.forever() {
            n += 1;
            if n == 1 {
                stop.stop();
            } else {
                stop.hurry();
            }
        }
    });
    let services: Vec<String> = cfg
        .services
        .iter()
        .map(|s| format!("{:?}:{}", s.kind, s.port).to_lowercase())
        .collect();
    eprintln!(
        "softoe engine: {} on {describe} (mtu {}); services [{}]; control {}{}. Ctrl-C stops.",
        cfg.interface.address.as_deref().unwrap_or("?"),
        built.mtu,
        services.join(", "),
        cfg.engine.control.display(),
        cfg.engine
            .pcap
            .as_ref()
            .map(|p| format!(", pcap {}", p.display()))
            .unwrap_or_default(),
    );
    info!(config = ?cfg, "engine starting");
    let r = engine.run();
    sig_handle.close();
    let _ = watcher.join();
    r?;
    let c = engine.counters();
    eprintln!(
        "softoe engine stopped: {} frames in, {} out, {} port errors; asleep {:.0} % of the time.",
        c.frames_in,
        c.frames_out,
        c.port_errors,
        c.idle_share() * 100.0
    );
    if let Some(line) = engine.pcap().and_then(|p| p.stopped()) {
        eprintln!("softoe engine: {line}.");
    }
    if let Some(f) = engine.port().faults() {
        eprintln!("softoe engine: faults injected at the port: {f}.");
    }
    Ok(())
}
