//! The engine's configuration: a TOML file, then command-line flags on top.
//!
//! Every field has a default, so an empty file (or none) plus `--address`
//! is a working engine. Unknown keys are errors, so a misspelt setting is
//! reported rather than silently ignored. `softoe engine --print-config`
//! shows the result of merging, in the same TOML.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Deserializer, Serialize};
use softoe_engine::{EngineConfig, FaultConfig, TapOffloads, XdpMode, XdpOptions};
use softoe_stack::{Algorithm, StackConfig};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

/// A byte count written as `4096`, `"64K"`, `"4M"` or `"1G"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Size(n)),
            Raw::S(s) => softoe_lab::units::parse_size(&s)
                .map(Size)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// `[interface]`: who the engine is on the wire.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InterfaceSection {
    /// IPv4 address with prefix, e.g. `"10.7.0.1/24"` (required).
    pub address: Option<String>,
    /// Next hop for destinations outside the prefix.
    pub gateway: Option<Ipv4Addr>,
    /// MAC address (default: a locally administered one derived from the
    /// address).
    pub mac: Option<String>,
    /// IP MTU.
    pub mtu: Option<usize>,
}

/// Which kind of port.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PortKind {
    /// A TAP device the engine creates (virtio-net header offloads).
    Tap,
    /// An existing interface (e.g. a veth) through an AF_PACKET socket.
    Afpacket,
    /// An existing interface through an AF_XDP socket (queue 0, copy
    /// mode): frames through rings shared with the kernel, one system call
    /// per batch instead of per frame.
    Xdp,
}

/// `[port.xdp]`: the AF_XDP port's UMEM and program (with `kind = "xdp"`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct XdpSection {
    /// Bytes per UMEM frame: 2048 or 4096 (a frame must hold the MTU plus
    /// 14 bytes of Ethernet header and 256 of the kernel's headroom).
    pub frame_size: u32,
    /// UMEM frames, a power of two from 64 to 65536: half receive, half
    /// send.
    pub frames: u32,
    /// Where the XDP program runs: `driver` (the interface's own XDP hook;
    /// a veth has one) or `generic` (any interface, slower). Default: the
    /// driver's if it has one.
    pub mode: Option<XdpMode>,
}

impl Default for XdpSection {
    fn default() -> XdpSection {
        let o = XdpOptions::default();
        XdpSection {
            frame_size: o.frame_size,
            frames: o.frames,
            mode: o.mode,
        }
    }
}

/// `[port]`: the device the engine drives.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PortSection {
    /// `tap`, `afpacket` or `xdp`.
    pub kind: PortKind,
    /// TAP device name (created if absent).
    pub tap: String,
    /// For `afpacket` and `xdp`: the interface to drive.
    pub interface: Option<String>,
    /// Attach the TAP device to this Linux bridge.
    pub bridge: Option<String>,
    /// TCP segmentation offload (super-segments up to 64 KiB).
    pub tso: bool,
    /// Checksum offload.
    pub csum: bool,
    /// Accept receive-coalesced frames.
    pub gro: bool,
    /// Frames the kernel may hold for the engine to read (a burst beyond
    /// it is dropped): the TAP device's queue, or for `afpacket` the
    /// socket's receive buffer, sized for as many MTU frames. Enough for
    /// every connection's frames in flight when the engine is the
    /// bottleneck.
    pub queue: u32,
    /// For `xdp`: the UMEM and where the program runs.
    pub xdp: XdpSection,
}

impl Default for PortSection {
    fn default() -> PortSection {
        PortSection {
            kind: PortKind::Tap,
            tap: "softoe0".into(),
            interface: None,
            bridge: None,
            tso: true,
            csum: true,
            gro: true,
            queue: softoe_engine::tap::DEFAULT_QUEUE_LEN,
            xdp: XdpSection::default(),
        }
    }
}

/// `[bond]`: several member devices behind the one interface
/// (BondingPlus). Absent or with no members: one port, as `[port]` says.
/// The members are TAP devices the engine creates (or AF_PACKET on
/// existing interfaces when `[port] kind = "afpacket"`), each with its own
/// MAC: member 0 has the interface's, member `i` the interface's with `i`
/// added to its second byte, unless `macs` lists them. `[port]`'s bridge,
/// queue and offloads apply to every member.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BondSection {
    /// The member devices, in order.
    pub members: Vec<String>,
    /// `round-robin`, `least-queued` or `prioritized`.
    pub policy: String,
    /// Members dedicated to real-time traffic (for `prioritized`).
    pub realtime: Vec<String>,
    /// Under `prioritized`, the lowest `SO_PRIORITY` that is real-time.
    pub priority_threshold: u8,
    /// Each member's link rate in Mbit/s (one value for all, or one per
    /// member; empty: unknown, taken as equal), for `least-queued`.
    pub rate_mbit: Vec<u64>,
    /// The members' MACs (default: derived from the interface's, see above).
    pub macs: Vec<String>,
    /// Time between heartbeats on every member.
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    /// A member that hears nothing for this many heartbeats leaves.
    pub missed_heartbeats: u32,
    /// Time between periodic ARP+ announcements.
    #[serde(with = "humantime_serde")]
    pub announce_period: Duration,
}

impl Default for BondSection {
    fn default() -> BondSection {
        BondSection {
            members: Vec::new(),
            policy: softoe_bond::Policy::default().name().into(),
            realtime: Vec::new(),
            priority_threshold: 6,
            rate_mbit: Vec::new(),
            macs: Vec::new(),
            heartbeat: Duration::from_millis(10),
            missed_heartbeats: 3,
            announce_period: Duration::from_secs(1),
        }
    }
}

impl BondSection {
    /// Whether a bond is configured.
    pub fn active(&self) -> bool {
        !self.members.is_empty()
    }

    /// The bond's configuration for interface `ip` whose MAC is `mac`.
    pub fn build(&self, ip: Ipv4Address, mac: EthernetAddress) -> Result<softoe_bond::BondConfig> {
        let n = self.members.len();
        if !(1..=softoe_bond::wire::MAX_MEMBERS).contains(&n) {
            bail!(
                "bond.members: a bond has 1 to {} members, got {n}",
                softoe_bond::wire::MAX_MEMBERS
            );
        }
        let mut seen = std::collections::HashSet::new();
        for m in &self.members {
            if m.is_empty() || m.len() > 15 {
                bail!("bond.members: device names are 1–15 bytes, got '{m}'");
            }
            if !seen.insert(m) {
                bail!("bond.members: '{m}' is listed twice");
            }
        }
        let policy = softoe_bond::Policy::from_name(&self.policy).with_context(|| {
            format!(
                "bond.policy '{}' is not one of {}",
                self.policy,
                softoe_bond::Policy::ALL.map(|p| p.name()).join(", ")
            )
        })?;
        for r in &self.realtime {
            if !self.members.contains(r) {
                bail!("bond.realtime: '{r}' is not a member");
            }
        }
        if policy == softoe_bond::Policy::Prioritized && self.realtime.is_empty() {
            bail!(
                "bond.policy prioritized needs real-time members (bond.realtime, --bond-realtime)"
            );
        }
        if policy != softoe_bond::Policy::Prioritized && !self.realtime.is_empty() {
            bail!("bond.realtime is only used with bond.policy prioritized");
        }
        let rates: Vec<u64> = match self.rate_mbit.len() {
            0 => vec![0; n],
            1 => vec![self.rate_mbit[0]; n],
            k if k == n => self.rate_mbit.clone(),
            k => bail!("bond.rate_mbit has {k} values for {n} members (give one, or one each)"),
        };
        if rates.iter().any(|&r| r > 10_000_000) {
            bail!("bond.rate_mbit: at most 10000000 (10 Tbit/s)");
        }
        let macs: Vec<EthernetAddress> = if self.macs.is_empty() {
            (0..n)
                .map(|i| {
                    let mut m = mac.0;
                    m[1] = m[1].wrapping_add(i as u8);
                    EthernetAddress(m)
                })
                .collect()
        } else if self.macs.len() == n {
            self.macs
                .iter()
                .map(|m| parse_mac(m))
                .collect::<Result<_>>()?
        } else {
            bail!(
                "bond.macs has {} addresses for {n} members",
                self.macs.len()
            );
        };
        if macs.first() != Some(&mac) {
            bail!("bond.macs: the first member's MAC must be the interface's ({mac})");
        }
        if self.heartbeat < Duration::from_millis(1) || self.heartbeat > Duration::from_secs(10) {
            bail!("bond.heartbeat must be between 1ms and 10s");
        }
        if !(1..=100).contains(&self.missed_heartbeats) {
            bail!("bond.missed_heartbeats must be 1–100");
        }
        if self.announce_period < Duration::from_millis(10)
            || self.announce_period > Duration::from_secs(3600)
        {
            bail!("bond.announce_period must be between 10ms and 1h");
        }
        let members = self
            .members
            .iter()
            .zip(macs)
            .zip(rates)
            .map(|((name, mac), rate)| softoe_bond::MemberConfig {
                mac,
                rate_bps: rate * 1_000_000,
                realtime: self.realtime.contains(name),
            })
            .collect();
        let mut cfg = softoe_bond::BondConfig::new(ip, members);
        cfg.policy = policy;
        cfg.priority_threshold = self.priority_threshold;
        cfg.heartbeat = self.heartbeat;
        cfg.missed_heartbeats = self.missed_heartbeats;
        cfg.announce_period = self.announce_period;
        // A restarted engine must not reuse its last sequence number (peers
        // would take its new member set for a repeat of the old one).
        cfg.initial_seq = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| (d.as_millis() & 0xffff) as u16);
        // Validate now, with the same rules the bond applies.
        softoe_bond::Bond::new(cfg.clone(), softoe_bond::Instant::ZERO)
            .map_err(|e| anyhow!("[bond]: {e}"))?;
        Ok(cfg)
    }
}

/// `[engine]`: the poll loop.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    /// Spin this many microseconds waiting for work before sleeping.
    pub spin_us: u64,
    /// At a stop (SIGINT, SIGTERM), every connection is closed (FIN after
    /// what is queued) and has this many milliseconds for its FIN to be
    /// acknowledged; what is still open then is reset (0: reset at once).
    /// A second signal resets at once.
    pub stop_grace_ms: u64,
    /// Interrupt coalescing: wait this many microseconds for more frames
    /// after one arrives (0: off).
    pub rx_coalesce_us: u64,
    /// Most frames read per turn.
    pub rx_batch: usize,
    /// Answer each turn's received segments once, at the end of the batch
    /// (one ACK per connection per batch); false: every segment at once.
    pub batch_acks: bool,
    /// Write every frame sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// The control socket `softoe stat` asks.
    pub control: PathBuf,
    /// Serve host programs on this Unix socket (none: no host interface).
    pub host: Option<PathBuf>,
    /// Pin the engine to this core, its own (none: let the scheduler
    /// place it). Programs then run best on the other cores.
    pub cpu: Option<usize>,
    /// The engine thread's nice value, −20 to 19 (none: the one it starts
    /// with). Below 0 it is ahead of ordinary programs for a core, as the
    /// kernel's own network work is: on a machine busy with other work the
    /// engine's wake-ups and a killed program's reclaim do not wait behind
    /// it. Needs root or CAP_SYS_NICE.
    pub nice: Option<i32>,
    /// Emulate an engine core this fraction as fast as this one (0–1]:
    /// after each turn of work the engine busy-waits in proportion. For
    /// checking the simulator's `engine.speed` against the real engine.
    pub speed: f64,
    /// Emulate slower memory: busy-wait this many nanoseconds at every
    /// access to a program's shared memory (command taken, completion or
    /// event published, doorbell). The simulator's `memory.delay`.
    pub access_delay_ns: u64,
    /// Time each stage of the engine's work (receive, transmit, commands,
    /// serving sockets, timers, wake-ups) for `softoe stat --json`: what
    /// the simulator's calibration reads.
    pub profile_stages: bool,
    /// Where the kernel does its work for the frames the engine writes
    /// into its TAP (the bridge, and a local peer's receive path): `off`
    /// (inside the engine's writes, on its core), `on` (steered to the
    /// other cores: RPS on the TAP's queue) or `auto` (steered while the
    /// engine's core is full and the others have room).
    pub steer: SteerMode,
}

pub use softoe_lab::bed::SteerMode;

/// Where `softoe engine` and `softoe stat` meet by default.
pub const DEFAULT_CONTROL: &str = "/run/softoe/engine.sock";

impl Default for EngineSection {
    fn default() -> EngineSection {
        let d = EngineConfig::default();
        EngineSection {
            spin_us: d.spin.as_micros() as u64,
            stop_grace_ms: 1000,
            rx_coalesce_us: d.rx_coalesce.as_micros() as u64,
            rx_batch: d.rx_batch,
            batch_acks: d.batch_acks,
            pcap: None,
            control: DEFAULT_CONTROL.into(),
            host: None,
            cpu: None,
            nice: None,
            speed: d.speed,
            access_delay_ns: d.access_delay.as_nanos() as u64,
            profile_stages: d.profile_stages,
            steer: SteerMode::Auto,
        }
    }
}

/// `[limits]`: what the engine's host interface lets programs hold, so
/// that no user can lock the others out (see
/// [`softoe_engine::host::UserLimits`]). Root is held to none of the
/// per-user limits, and `root_sessions` of the sessions are kept for it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Most sessions (attached programs) at once, every user's together.
    pub sessions: usize,
    /// Of those, how many only root may take.
    pub root_sessions: usize,
    /// Most sessions one user other than root may hold.
    pub user_sessions: usize,
    /// Most sockets one user other than root may have open at once,
    /// across its sessions (then `socket` and `accept` fail with `EMFILE`).
    pub user_sockets: usize,
    /// Most shared memory (session regions) one user other than root may
    /// hold, e.g. `"64G"`.
    pub user_memory: Size,
}

impl Default for LimitsSection {
    fn default() -> LimitsSection {
        let h = softoe_engine::host::HostConfig::default();
        LimitsSection {
            sessions: h.max_sessions,
            root_sessions: h.root_sessions,
            user_sessions: h.per_user.sessions,
            user_sockets: h.per_user.sockets,
            user_memory: Size(h.per_user.memory),
        }
    }
}

impl LimitsSection {
    /// The host service's limits, checked: root's share must leave room
    /// for the others, and every limit must allow something.
    pub fn host(&self) -> Result<(usize, usize, softoe_engine::host::UserLimits)> {
        if self.sessions == 0 || self.user_sessions == 0 || self.user_sockets == 0 {
            bail!("[limits]: sessions, user_sessions and user_sockets must be at least 1");
        }
        if self.root_sessions >= self.sessions {
            bail!(
                "[limits] root_sessions ({}) must be less than sessions ({}): other users need \
                 room too",
                self.root_sessions,
                self.sessions
            );
        }
        if self.user_memory.0 < 1 << 20 {
            bail!(
                "[limits] user_memory ({} bytes) is less than one session's smallest region \
                 (1M)",
                self.user_memory.0
            );
        }
        Ok((
            self.sessions,
            self.root_sessions,
            softoe_engine::host::UserLimits {
                sessions: self.user_sessions,
                sockets: self.user_sockets,
                memory: self.user_memory.0,
            },
        ))
    }
}

/// Congestion control, by name.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Congestion {
    /// RFC 9438.
    Cubic,
    /// RFC 5681/6582.
    Newreno,
}

/// `[tcp]`: defaults for every connection.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpSection {
    /// Receive buffer per connection.
    pub rx_buffer: Size,
    /// Send buffer per connection.
    pub tx_buffer: Size,
    /// Congestion control.
    pub congestion: Congestion,
    /// Offer SACK.
    pub sack: bool,
    /// Offer timestamps.
    pub timestamps: bool,
    /// Offer window scaling.
    pub window_scaling: bool,
    /// Send ACKs at once instead of delaying them.
    pub quickack: bool,
    /// Zero-window probes (and retransmissions) a connection no program
    /// holds any more gets before it is reset (Linux:
    /// `tcp_orphan_retries`, 8 in effect).
    pub orphan_retries: u32,
    /// The retransmission timeout's lower bound ("200ms", as Linux's
    /// `TCP_RTO_MIN`; "5ms", "500us").
    #[serde(with = "humantime_serde")]
    pub rto_min: Duration,
    /// Closed connections kept for new ones to open in (their buffers
    /// reused: opening a connection then allocates nothing); 0 keeps none.
    pub keep_closed: usize,
    /// The kept connections' receive buffers together at most this large
    /// (their memory stays resident while kept).
    pub keep_closed_bytes: Size,
    /// `[[tcp.route]]`: a different `rto_min` for peers inside a prefix,
    /// as Linux's `ip route … rto_min` (the longest prefix wins).
    pub route: Vec<TcpRoute>,
}

/// `[[tcp.route]]`: settings for the connections to one prefix.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TcpRoute {
    /// The peers: "10.7.0.0/24", or one address.
    pub to: String,
    /// Their RTO's lower bound.
    #[serde(with = "humantime_serde")]
    pub rto_min: Duration,
}

/// RTO floors outside this range are refused: below, timer and scheduling
/// noise make every timeout spurious; above, the RTO ceiling is reached.
const RTO_MIN_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_micros(10)..=Duration::from_secs(10);

impl Default for TcpSection {
    fn default() -> TcpSection {
        TcpSection {
            rx_buffer: Size(4 << 20),
            tx_buffer: Size(4 << 20),
            congestion: Congestion::Cubic,
            sack: true,
            timestamps: true,
            window_scaling: true,
            quickack: false,
            orphan_retries: 8,
            rto_min: Duration::from_millis(200),
            keep_closed: 16,
            keep_closed_bytes: Size(64 << 20),
            route: Vec::new(),
        }
    }
}

/// One built-in service (`[[service]]`), or `KIND:PORT[:BYTES]` (and
/// `rr:PORT:REQUEST:RESPONSE`) on the command line.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// `echo`, `discard`, `sink`, `source` or `rr`.
    pub kind: ServiceKind,
    /// TCP port.
    pub port: u16,
    /// For `source`: bytes sent to each client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Size>,
    /// For `rr`: bytes in each request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Size>,
    /// For `rr`: bytes in each response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Size>,
}

/// The built-in services.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ServiceKind {
    /// RFC 862: sends back what it receives (request/response too).
    Echo,
    /// RFC 863: reads and drops, hashing what arrived.
    Discard,
    /// Discard that only counts: no SHA-256, so a receive measurement
    /// prices the engine, not the hash (which takes about two thirds of
    /// the engine's time at 9 Gb/s).
    Sink,
    /// Sends a fixed number of pattern bytes to each client, then closes.
    Source,
    /// Request/response (netperf TCP_RR): each `request` bytes received are
    /// answered with `response` bytes.
    Rr,
}

impl std::str::FromStr for ServiceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<ServiceSpec, String> {
        let mut it = s.split(':');
        let kind = match it.next() {
            Some("echo") => ServiceKind::Echo,
            Some("discard") => ServiceKind::Discard,
            Some("sink") => ServiceKind::Sink,
            Some("source") => ServiceKind::Source,
            Some("rr") => ServiceKind::Rr,
            Some(k) => {
                return Err(format!(
                    "unknown service '{k}' (echo, discard, sink, source or rr)"
                ));
            }
            None => return Err("empty service".into()),
        };
        let port = it
            .next()
            .ok_or_else(|| format!("'{s}': give a port, e.g. echo:7"))?
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("'{s}': the port must be 1–65535"))?;
        let sizes = it
            .map(softoe_lab::units::parse_size)
            .collect::<Result<Vec<u64>, String>>()
            .map_err(|e| format!("'{s}': {e}"))?;
        let spec = |bytes: Option<u64>, request: Option<u64>, response: Option<u64>| ServiceSpec {
            kind,
            port,
            bytes: bytes.map(Size),
            request: request.map(Size),
            response: response.map(Size),
        };
        match (kind, sizes.as_slice()) {
            (ServiceKind::Echo | ServiceKind::Discard | ServiceKind::Sink, []) => {
                Ok(spec(None, None, None))
            }
            (ServiceKind::Echo | ServiceKind::Discard | ServiceKind::Sink, _) => {
                Err(format!("'{s}': echo, discard and sink take only a port"))
            }
            (ServiceKind::Source, [b]) => Ok(spec(Some(*b), None, None)),
            (ServiceKind::Source, _) => {
                Err(format!("'{s}': source needs BYTES, e.g. source:19:1G"))
            }
            (ServiceKind::Rr, [q, r]) if *q > 0 && *r > 0 => Ok(spec(None, Some(*q), Some(*r))),
            (ServiceKind::Rr, _) => Err(format!(
                "'{s}': rr needs request and response sizes above zero, e.g. rr:5000:4:64"
            )),
        }
    }
}

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// `[interface]`.
    pub interface: InterfaceSection,
    /// `[port]`.
    pub port: PortSection,
    /// `[engine]`.
    pub engine: EngineSection,
    /// `[tcp]`.
    pub tcp: TcpSection,
    /// `[bond]`.
    pub bond: BondSection,
    /// `[limits]`.
    pub limits: LimitsSection,
    /// `[[service]]`.
    #[serde(rename = "service")]
    pub services: Vec<ServiceSpec>,
    /// `[fault]`: seeded faults injected at the port (tests and demos).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultConfig>,
}

impl FileConfig {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<FileConfig> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the configuration {}", path.display()))?;
        FileConfig::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<FileConfig> {
        Ok(toml::from_str(text)?)
    }

    /// Checks it and builds what the engine is made from.
    pub fn build(&self) -> Result<Built> {
        let (mut stack, cidr, mtu) = self.interface()?;
        let (secret, seed) = randomness()?;
        stack.secret = secret;
        stack.seed = seed;
        self.tcp_into(&mut stack)?;
        let engine = self.engine_config()?;
        self.check_port()?;
        if let Some(f) = &self.fault {
            f.validate().context("in [fault]")?;
        }
        self.check_services()?;
        let bond = if self.bond.active() {
            Some(self.bond.build(cidr.address(), stack.mac)?)
        } else {
            None
        };
        Ok(Built {
            stack,
            engine,
            bond,
            mtu,
            offloads: TapOffloads {
                tso: self.port.tso,
                csum: self.port.csum,
                gro: self.port.gro,
            },
        })
    }

    /// `[interface]`: the stack's address, MAC and gateway, and the MTU.
    fn interface(&self) -> Result<(StackConfig, Ipv4Cidr, usize)> {
        let Some(addr) = self.interface.address.as_deref() else {
            bail!("no address: give --address 10.7.0.1/24 or [interface] address");
        };
        let cidr = parse_cidr(addr)?;
        let mac = match self.interface.mac.as_deref() {
            Some(m) => parse_mac(m)?,
            None => {
                let o = cidr.address().0;
                EthernetAddress([0x02, 0x50, o[0], o[1], o[2], o[3]])
            }
        };
        let mtu = self.interface.mtu.unwrap_or(1500);
        if !(576..=65_535).contains(&mtu) {
            bail!("MTU {mtu} is outside 576–65535");
        }
        let mut stack = StackConfig::new(mac, cidr);
        stack.gateway = self.interface.gateway.map(|g| Ipv4Address(g.octets()));
        if let Some(g) = self.interface.gateway
            && !cidr.contains_addr(&Ipv4Address(g.octets()))
        {
            bail!("gateway {g} is not inside {addr}");
        }
        Ok((stack, cidr, mtu))
    }

    /// `[tcp]` into the stack's configuration.
    fn tcp_into(&self, stack: &mut StackConfig) -> Result<()> {
        let t = &self.tcp;
        for (what, v) in [("rx_buffer", t.rx_buffer.0), ("tx_buffer", t.tx_buffer.0)] {
            if !(4096..=(1 << 30)).contains(&v) {
                bail!("tcp.{what} must be between 4K and 1G, got {v}");
            }
        }
        stack.tcp.rx_buffer = t.rx_buffer.0 as usize;
        stack.tcp.tx_buffer = t.tx_buffer.0 as usize;
        stack.tcp.tx_max_chunks = 4096;
        stack.tcp.congestion = match t.congestion {
            Congestion::Cubic => Algorithm::Cubic,
            Congestion::Newreno => Algorithm::NewReno,
        };
        stack.tcp.sack = t.sack;
        stack.tcp.timestamps = t.timestamps;
        stack.tcp.window_scaling = t.window_scaling;
        if t.quickack {
            stack.tcp.delayed_ack = None;
        }
        if !(1..=32).contains(&t.orphan_retries) {
            bail!("tcp.orphan_retries must be 1–32, got {}", t.orphan_retries);
        }
        stack.tcp.orphan_retries = t.orphan_retries;
        if !RTO_MIN_RANGE.contains(&t.rto_min) {
            bail!(
                "tcp.rto_min must be between 10us and 10s, got {}",
                humantime_serde::re::humantime::format_duration(t.rto_min)
            );
        }
        stack.tcp.min_rto = t.rto_min;
        if t.keep_closed > 4096 {
            bail!(
                "tcp.keep_closed must be at most 4096, got {}",
                t.keep_closed
            );
        }
        stack.keep_closed = t.keep_closed;
        stack.keep_closed_bytes = usize::try_from(t.keep_closed_bytes.0).unwrap_or(usize::MAX);
        for r in &t.route {
            let net: Ipv4Cidr = if r.to.contains('/') {
                r.to.parse()
            } else {
                format!("{}/32", r.to).parse()
            }
            .map_err(|_| anyhow!("tcp.route: {:?} is not an IPv4 address or prefix", r.to))?;
            if !RTO_MIN_RANGE.contains(&r.rto_min) {
                bail!(
                    "tcp.route {}: rto_min must be between 10us and 10s, got {}",
                    r.to,
                    humantime_serde::re::humantime::format_duration(r.rto_min)
                );
            }
            stack.rto_min_routes.push((net, r.rto_min));
        }
        Ok(())
    }

    /// `[engine]` (and `[limits]`, checked here): the loop's configuration.
    fn engine_config(&self) -> Result<EngineConfig> {
        let e = &self.engine;
        if e.rx_batch == 0 || e.rx_batch > 4096 {
            bail!("engine.rx_batch must be 1–4096, got {}", e.rx_batch);
        }
        if e.spin_us > 1_000_000 || e.rx_coalesce_us > 1_000_000 {
            bail!("engine.spin_us and engine.rx_coalesce_us must be at most one second");
        }
        self.limits.host()?;
        if e.stop_grace_ms > 60_000 {
            bail!(
                "engine.stop_grace_ms must be at most 60000 (a minute), got {}",
                e.stop_grace_ms
            );
        }
        let mut engine = EngineConfig::default();
        engine.spin = Duration::from_micros(e.spin_us);
        engine.stop_grace = Duration::from_millis(e.stop_grace_ms);
        engine.rx_coalesce = Duration::from_micros(e.rx_coalesce_us);
        engine.rx_batch = e.rx_batch;
        engine.batch_acks = e.batch_acks;
        engine.pcap = e.pcap.clone();
        if let Some(n) = e.nice
            && !(-20..=19).contains(&n)
        {
            anyhow::bail!("engine.nice must be in -20..=19, got {n}");
        }
        engine.cpu = e.cpu;
        engine.nice = e.nice;
        engine.control = Some(e.control.clone());
        engine.profile_stages = e.profile_stages;
        engine.steer = e.steer.into();
        engine
            .with_speed(e.speed)
            .and_then(|c| c.with_access_delay(Duration::from_nanos(e.access_delay_ns)))
            .map_err(|why| anyhow::anyhow!("[engine]: {why}"))
    }

    /// `[port]`: the device's name, queue and XDP ring.
    fn check_port(&self) -> Result<()> {
        match self.port.kind {
            PortKind::Tap if self.port.tap.is_empty() || self.port.tap.len() > 15 => {
                bail!("port.tap must be 1–15 bytes, got '{}'", self.port.tap);
            }
            _ if !(64..=1 << 20).contains(&self.port.queue) => {
                bail!(
                    "port.queue must be 64–1048576 frames, got {}",
                    self.port.queue
                );
            }
            PortKind::Afpacket if self.port.interface.is_none() => {
                bail!("port kind afpacket needs port.interface (or --afpacket IFACE)");
            }
            PortKind::Xdp if self.port.interface.is_none() => {
                bail!("port kind xdp needs port.interface (or --xdp IFACE)");
            }
            _ => {}
        }
        let x = &self.port.xdp;
        if self.port.kind == PortKind::Xdp {
            if x.frame_size != 2048 && x.frame_size != 4096 {
                bail!(
                    "port.xdp.frame_size must be 2048 or 4096, got {}",
                    x.frame_size
                );
            }
            if !x.frames.is_power_of_two() || !(64..=1 << 16).contains(&x.frames) {
                bail!(
                    "port.xdp.frames must be a power of two from 64 to 65536, got {}",
                    x.frames
                );
            }
        }
        Ok(())
    }

    /// `[[service]]`: one per port, each with the sizes its kind needs.
    fn check_services(&self) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for s in &self.services {
            if !seen.insert(s.port) {
                bail!("two services on TCP port {}", s.port);
            }
            if s.kind == ServiceKind::Source && s.bytes.is_none() {
                bail!("service source on port {} needs bytes", s.port);
            }
            let rr_sizes = s.request.zip(s.response);
            if s.kind == ServiceKind::Rr && !rr_sizes.is_some_and(|(q, r)| q.0 > 0 && r.0 > 0) {
                bail!(
                    "service rr on port {} needs request and response sizes above zero",
                    s.port
                );
            }
        }
        Ok(())
    }
}

/// What the engine is made from.
#[derive(Debug)]
pub struct Built {
    /// The stack.
    pub stack: StackConfig,
    /// The loop.
    pub engine: EngineConfig,
    /// The bond, when `[bond]` has members.
    pub bond: Option<softoe_bond::BondConfig>,
    /// The IP MTU.
    pub mtu: usize,
    /// The TAP offloads.
    pub offloads: TapOffloads,
}

/// Parses `a.b.c.d/len`.
pub fn parse_cidr(s: &str) -> Result<Ipv4Cidr> {
    let (a, l) = s
        .split_once('/')
        .with_context(|| format!("'{s}' is not an address with a prefix, like 10.7.0.1/24"))?;
    let ip: Ipv4Addr = a
        .parse()
        .with_context(|| format!("'{a}' is not an IPv4 address"))?;
    let len: u8 = l
        .parse()
        .ok()
        .filter(|&l| (1..=32).contains(&l))
        .with_context(|| format!("prefix length '{l}' must be 1–32"))?;
    if ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
        bail!("{ip} cannot be an interface address");
    }
    Ipv4Cidr::new(Ipv4Address(ip.octets()), len)
        .with_context(|| format!("'{s}' is not a valid prefix"))
}

/// Parses `aa:bb:cc:dd:ee:ff` (a unicast address).
pub fn parse_mac(s: &str) -> Result<EthernetAddress> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        bail!("'{s}' is not a MAC address like 02:50:00:00:00:01");
    }
    let mut m = [0u8; 6];
    for (d, p) in m.iter_mut().zip(&parts) {
        *d = u8::from_str_radix(p, 16)
            .ok()
            .filter(|_| p.len() == 2)
            .with_context(|| format!("'{s}' is not a MAC address like 02:50:00:00:00:01"))?;
    }
    if m[0] & 1 != 0 {
        bail!("{s} is a multicast address");
    }
    Ok(EthernetAddress(m))
}

/// A secret for ISNs (RFC 6528) and a seed, from the kernel.
fn randomness() -> Result<([u8; 16], u64)> {
    use std::io::Read;
    let mut b = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    let mut secret = [0u8; 16];
    secret.copy_from_slice(&b[..16]);
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&b[16..]);
    Ok((secret, u64::from_le_bytes(seed)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_full_file_parses_and_builds() {
        let c = FileConfig::parse(
            r#"
            [interface]
            address = "10.9.0.1/24"
            gateway = "10.9.0.254"
            mac = "02:00:00:00:00:09"
            mtu = 9000
            [port]
            tap = "so9"
            tso = false
            [engine]
            spin_us = 0
            rx_coalesce_us = 20
            control = "/tmp/x.sock"
            [tcp]
            rx_buffer = "1M"
            tx_buffer = 65536
            congestion = "newreno"
            orphan_retries = 3
            keep_closed = 0
            keep_closed_bytes = "8M"
            rto_min = "20ms"
            [[tcp.route]]
            to = "10.9.0.0/16"
            rto_min = "2ms"
            [[tcp.route]]
            to = "10.9.3.4"
            rto_min = "500us"
            [[service]]
            kind = "source"
            port = 19
            bytes = "1G"
            [[service]]
            kind = "echo"
            port = 7
            "#,
        )
        .unwrap();
        let b = c.build().unwrap();
        assert_eq!(b.mtu, 9000);
        assert_eq!(b.stack.tcp.rx_buffer, 1 << 20);
        assert_eq!(b.stack.tcp.tx_buffer, 65536);
        assert_eq!(b.stack.tcp.congestion, Algorithm::NewReno);
        assert_eq!(b.stack.tcp.orphan_retries, 3);
        assert_eq!(
            (b.stack.keep_closed, b.stack.keep_closed_bytes),
            (0, 8 << 20)
        );
        assert_eq!(b.stack.tcp.min_rto, Duration::from_millis(20));
        let rto = |a: [u8; 4]| b.stack.rto_min_for(Ipv4Address(a));
        assert_eq!(
            rto([10, 9, 3, 4]),
            Duration::from_micros(500),
            "longest prefix"
        );
        assert_eq!(rto([10, 9, 3, 5]), Duration::from_millis(2));
        assert_eq!(rto([10, 8, 0, 1]), Duration::from_millis(20), "the default");
        assert_eq!(b.engine.rx_coalesce, Duration::from_micros(20));
        assert!(!b.offloads.tso && b.offloads.csum);
        assert_eq!(c.services.len(), 2);
        assert_eq!(c.services[0].bytes, Some(Size(1 << 30)));
    }

    #[test]
    fn bad_input_is_named() {
        let err = |t: &str| match FileConfig::parse(t).and_then(|c| c.build().map(|_| ())) {
            Ok(()) => String::new(),
            Err(e) => format!("{e:#}"),
        };
        assert!(err("[port]\ntsoo = true").contains("unknown field `tsoo`"));
        assert!(err("").contains("no address"));
        assert!(err("[interface]\naddress = \"10.0.0.1\"").contains("prefix"));
        assert!(err("[interface]\naddress = \"10.0.0.1/33\"").contains("1–32"));
        assert!(err("[interface]\naddress = \"10.0.0.1/24\"\nmtu = 100").contains("576"));
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\ngateway = \"10.1.0.1\"")
                .contains("not inside")
        );
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\n[tcp]\nrx_buffer = \"9X\"")
                .contains("suffix")
        );
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\n[[service]]\nkind = \"echo\"\nport = 7\n[[service]]\nkind = \"discard\"\nport = 7")
                .contains("two services")
        );
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\n[[service]]\nkind = \"rr\"\nport = 7\nrequest = \"4\"")
                .contains("request and response")
        );
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\n[engine]\nnice = -21")
                .contains("engine.nice must be in -20..=19, got -21")
        );
        assert!(err("[interface]\naddress = \"10.0.0.1/24\"\n[engine]\nnice = -5").is_empty());
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\n[port]\nqueue = 10")
                .contains("64–1048576")
        );
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\n[port]\nqueue = 2000000")
                .contains("port.queue")
        );
        assert!(err("[interface]\naddress = \"10.0.0.1/24\"\n[port]\nqueue = 4096").is_empty());
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\n[tcp]\nkeep_closed = 5000")
                .contains("tcp.keep_closed")
        );
        assert!(
            err("[interface]\naddress = \"10.0.0.1/24\"\n[tcp]\norphan_retries = 0")
                .contains("tcp.orphan_retries must be 1–32")
        );
        let tcp = |t: &str| {
            err(&format!(
                "[interface]\naddress = \"10.0.0.1/24\"\n[tcp]\n{t}"
            ))
        };
        assert!(
            tcp("rto_min = \"1us\"").contains("tcp.rto_min must be between 10us and 10s, got 1us")
        );
        assert!(tcp("rto_min = \"soon\"").contains("rto_min"));
        assert!(
            tcp("[[tcp.route]]\nto = \"10.1\"\nrto_min = \"1ms\"")
                .contains("\"10.1\" is not an IPv4 address or prefix")
        );
        assert!(
            tcp("[[tcp.route]]\nto = \"10.1.0.0/16\"\nrto_min = \"20s\"")
                .contains("tcp.route 10.1.0.0/16: rto_min must be between 10us and 10s, got 20s")
        );
        let engine = |t: &str| {
            err(&format!(
                "[interface]\naddress = \"10.0.0.1/24\"\n[engine]\n{t}"
            ))
        };
        assert!(engine("speed = 0.0").contains("[engine]: engine speed 0 is not in (0, 1]"));
        assert!(engine("speed = 1.5").contains("not in (0, 1]"));
        assert!(engine("access_delay_ns = 5000000").contains("access delay"));
        assert!(engine("speed = 0.25\naccess_delay_ns = 200\nprofile_stages = true").is_empty());
        let limits = |t: &str| {
            err(&format!(
                "[interface]\naddress = \"10.0.0.1/24\"\n[limits]\n{t}"
            ))
        };
        assert!(limits("root_sessions = 8\nsessions = 8").contains("less than sessions"));
        assert!(limits("user_sockets = 0").contains("at least 1"));
        assert!(limits("user_memory = \"64K\"").contains("user_memory"));
        assert!(limits("user_seshions = 3").contains("unknown field `user_seshions`"));
        assert!(
            limits("sessions = 16\nroot_sessions = 2\nuser_sessions = 4\nuser_sockets = 64\nuser_memory = \"2G\"")
                .is_empty()
        );
        assert!(parse_mac("01:00:5e:00:00:01").is_err());
        assert!(parse_mac("02:00:00:00:00").is_err());
        assert!(parse_mac("02:00:00:00:00:0g").is_err());
    }

    #[test]
    fn afpacket_and_faults() {
        let c = FileConfig::parse(
            "[interface]\naddress = \"10.0.0.1/24\"\n[port]\nkind = \"afpacket\"\n\
             interface = \"veth0\"\n[fault]\nseed = 3\n[fault.rx]\nloss = 0.01\n",
        )
        .unwrap();
        c.build().unwrap();
        assert_eq!(c.port.kind, PortKind::Afpacket);
        assert_eq!(c.fault.as_ref().map(|f| f.rx.loss), Some(0.01));
        let bad =
            FileConfig::parse("[interface]\naddress = \"10.0.0.1/24\"\n[fault.tx]\nloss = 1.5\n")
                .unwrap();
        let e = format!("{:#}", bad.build().unwrap_err());
        assert!(e.contains("[fault]") && e.contains("1.5"), "{e}");
        let no_iface = FileConfig::parse(
            "[interface]\naddress = \"10.0.0.1/24\"\n[port]\nkind = \"afpacket\"\n",
        )
        .unwrap();
        assert!(format!("{:#}", no_iface.build().unwrap_err()).contains("interface"));
        let xdp = FileConfig::parse(
            "[interface]\naddress = \"10.0.0.1/24\"\n[port]\nkind = \"xdp\"\ninterface = \"veth1\"\n[port.xdp]\nframes = 1024\nmode = \"generic\"\n",
        )
        .unwrap();
        xdp.build().unwrap();
        assert_eq!(xdp.port.kind, PortKind::Xdp);
        assert_eq!(
            (
                xdp.port.xdp.frame_size,
                xdp.port.xdp.frames,
                xdp.port.xdp.mode
            ),
            (4096, 1024, Some(XdpMode::Generic))
        );
        for (bad, why) in [
            ("[port]\nkind = \"xdp\"\n", "--xdp IFACE"),
            (
                "[port]\nkind = \"xdp\"\ninterface = \"v\"\n[port.xdp]\nframes = 1000\n",
                "power of two",
            ),
            (
                "[port]\nkind = \"xdp\"\ninterface = \"v\"\n[port.xdp]\nframe_size = 1500\n",
                "2048 or 4096",
            ),
        ] {
            let c = FileConfig::parse(&format!("[interface]\naddress = \"10.0.0.1/24\"\n{bad}"))
                .unwrap();
            let e = format!("{:#}", c.build().unwrap_err());
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn service_flags() {
        let s: ServiceSpec = "source:19:64M".parse().unwrap();
        assert_eq!(
            (s.kind, s.port, s.bytes),
            (ServiceKind::Source, 19, Some(Size(64 << 20)))
        );
        assert!("echo:7".parse::<ServiceSpec>().is_ok());
        let sink: ServiceSpec = "sink:9".parse().unwrap();
        assert_eq!((sink.kind, sink.port), (ServiceKind::Sink, 9));
        let rr: ServiceSpec = "rr:5000:4:64K".parse().unwrap();
        assert_eq!(
            (rr.kind, rr.request, rr.response),
            (ServiceKind::Rr, Some(Size(4)), Some(Size(64 << 10)))
        );
        for bad in [
            "rr:5000",
            "rr:5000:4",
            "rr:5000:0:4",
            "rr:5000:4:4:4",
            "echo",
            "echo:0",
            "echo:7:1M",
            "source:19",
            "chargen:19",
            "echo:7:1:2",
            "sink:9:1M",
        ] {
            assert!(bad.parse::<ServiceSpec>().is_err(), "{bad}");
        }
    }
}
