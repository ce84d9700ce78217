//! The world: nodes, links, switches, a virtual clock and an event queue.

use core::any::Any;
use core::cmp::Reverse;
use core::time::Duration;
use std::collections::{BTreeMap, BinaryHeap};

use softoe_stack::Instant;

use crate::link::{ConfigError, Direction, Fate, LinkConfig, LinkStats};
use crate::nic;

/// Index of a node.
pub type NodeId = usize;
/// Index of a switch.
pub type SwitchId = usize;
/// Index of a link.
pub type LinkId = usize;

/// What the NIC says about a delivered frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxInfo {
    /// The NIC verified the transport checksum.
    pub csum_verified: bool,
    /// A GRO frame built from segments of this payload size.
    pub gso_size: Option<u16>,
    /// Which of the node's NICs received it (0 on a node with one).
    pub port: usize,
}

/// A frame a node hands its NIC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimFrame {
    /// The frame, Ethernet header first.
    pub bytes: Vec<u8>,
    /// A TCP super-segment to cut into segments of this payload size.
    pub gso_size: Option<u16>,
    /// A partial checksum to complete: (start, offset of the field from start).
    pub csum: Option<(u16, u16)>,
    /// Which of the node's NICs sends it (0 on a node with one; a frame
    /// for a NIC the node does not have, or one not connected, is dropped).
    pub port: usize,
    /// The sending socket's `SO_PRIORITY`, as the stack handed it over
    /// (read by a bonded node's scheduler; NICs ignore it).
    pub priority: u8,
}

/// A host in the world. The simulator calls it when a frame arrives and at
/// the deadlines it announces; it answers with frames.
pub trait Node: Any {
    /// A frame arrived.
    fn receive(&mut self, now: Instant, frame: &[u8], info: RxInfo, out: &mut Vec<SimFrame>);
    /// The deadline from [`poll_at`](Node::poll_at) passed (spurious calls must be harmless).
    fn poll(&mut self, now: Instant, out: &mut Vec<SimFrame>);
    /// When the node next needs [`poll`](Node::poll); `None`: only on arrivals.
    fn poll_at(&self) -> Option<Instant>;
}

/// What a node's NIC does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicConfig {
    /// IP MTU of the wire (frames above `mtu + 14` are dropped as oversize).
    pub mtu: usize,
    /// Cut TCP super-segments (TSO).
    pub tso: bool,
    /// Complete partial checksums on transmit.
    pub tx_csum: bool,
    /// Verify checksums on receive and mark good frames verified.
    pub rx_csum: bool,
    /// Coalesce received TCP segments (GRO).
    pub gro: bool,
    /// Interrupt coalescing: hold received frames this long and deliver them
    /// together (zero: deliver each at once).
    pub rx_coalesce: Duration,
    /// The wire carries TSO super-segments whole, as a veth, a bridge and a
    /// TAP with GSO do (the real testbed's path): `tso` no longer cuts
    /// them, frames up to 64 KiB pass, and the receiver takes each as one.
    /// False: a physical wire, where every frame fits the MTU.
    pub gso_wire: bool,
}

/// The largest frame a GSO wire carries: a 64 KiB IP packet and its
/// Ethernet header.
const GSO_WIRE_MAX: usize = 65_535 + 18;

impl Default for NicConfig {
    fn default() -> NicConfig {
        NicConfig {
            mtu: 1500,
            tso: false,
            tx_csum: false,
            rx_csum: false,
            gro: false,
            rx_coalesce: Duration::ZERO,
            gso_wire: false,
        }
    }
}

impl NicConfig {
    /// Every offload on, as a TAP with virtio-net offloads.
    pub fn offloads() -> NicConfig {
        NicConfig {
            tso: true,
            tx_csum: true,
            rx_csum: true,
            gro: true,
            ..NicConfig::default()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    /// A node's NIC: (node, port).
    Node(NodeId, usize),
    Switch(SwitchId, usize),
}

/// A cable's end: (link, the side of it we are on).
type Cable = (LinkId, usize);

/// One NIC of a node: where its cable goes, and what it has received but
/// not yet handed up (interrupt coalescing is per NIC, as on real hardware).
#[derive(Default)]
struct Port {
    link: Option<Cable>,
    rx_pending: Vec<Vec<u8>>,
    rx_flush: bool,
}

struct NodeSlot {
    node: Box<dyn Node>,
    nic: NicConfig,
    ports: Vec<Port>,
    scheduled: Option<Instant>,
}

struct Link {
    ends: [Peer; 2],
    /// `dirs[0]` carries frames from `ends[0]` to `ends[1]`.
    dirs: [Direction; 2],
    /// Cut ([`World::cut_link`]): everything put on it, or arriving over it,
    /// is lost, both ways.
    cut: bool,
}

struct Switch {
    /// (link, side of the link the switch is on), per port.
    ports: Vec<(LinkId, usize)>,
    table: BTreeMap<[u8; 6], usize>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive {
        link: LinkId,
        dir: usize,
        frame: Vec<u8>,
    },
    RxFlush {
        node: NodeId,
        port: usize,
    },
    Timer {
        node: NodeId,
        at: Instant,
    },
}

/// Totals over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorldStats {
    /// Events processed.
    pub events: u64,
    /// Frames put on links (after segmentation).
    pub wire_frames: u64,
    /// Frames delivered to nodes (after coalescing).
    pub delivered: u64,
    /// Super-segments cut by NICs.
    pub tso_frames: u64,
    /// Coalesced frames delivered.
    pub gro_frames: u64,
}

/// One frame put on a wire, as a tap sees it.
#[derive(Debug)]
pub struct TapEvent<'a> {
    /// When it entered the link.
    pub at: Instant,
    /// Which link.
    pub link: LinkId,
    /// Which direction (0: from the link's first end).
    pub dir: usize,
    /// The frame (after any corruption).
    pub frame: &'a [u8],
    /// When it arrives (empty: dropped).
    pub arrivals: &'a [Instant],
}

/// A callback that sees every frame put on a wire (for pcap files and
/// debugging).
pub type Tap = Box<dyn FnMut(&TapEvent<'_>)>;

/// The simulated world.
pub struct World {
    now: Instant,
    seed: u64,
    nodes: Vec<NodeSlot>,
    links: Vec<Link>,
    switches: Vec<Switch>,
    /// Pending events as (time, sequence, slot): the heap sifts these
    /// small keys, and the events wait in `slots`.
    queue: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    slots: Vec<Option<Ev>>,
    free_slots: Vec<u32>,
    seq: u64,
    in_flight: usize,
    trace: u64,
    stats: WorldStats,
    same_instant: u64,
    stalled: bool,
    scratch: Vec<SimFrame>,
    tap: Option<Tap>,
    /// Hash every byte of every frame (true) or only its headers and length.
    trace_payload: bool,
}

impl core::fmt::Debug for World {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now)
            .field("nodes", &self.nodes.len())
            .field("links", &self.links.len())
            .field("switches", &self.switches.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Events allowed at one instant before the world declares itself stalled.
const STALL_LIMIT: u64 = 2_000_000;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// FNV-1a over the first 64 bytes of `frame`, eight at a time, then its
/// length: the headers-only trace ([`World::set_trace_payload`]).
fn fnv_head(mut h: u64, frame: &[u8]) -> u64 {
    let head = frame.get(..frame.len().min(64)).unwrap_or(&[]);
    for chunk in head.chunks(8) {
        let mut w = [0u8; 8];
        if let Some(d) = w.get_mut(..chunk.len()) {
            d.copy_from_slice(chunk);
        }
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x0100_0000_01b3);
    }
    (h ^ frame.len() as u64).wrapping_mul(0x0100_0000_01b3)
}

impl World {
    /// An empty world whose randomness all derives from `seed`.
    pub fn new(seed: u64) -> World {
        World {
            now: Instant::ZERO,
            seed,
            nodes: Vec::new(),
            links: Vec::new(),
            switches: Vec::new(),
            queue: BinaryHeap::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            seq: 0,
            in_flight: 0,
            trace: 0xcbf2_9ce4_8422_2325,
            stats: WorldStats::default(),
            same_instant: 0,
            stalled: false,
            scratch: Vec::new(),
            tap: None,
            trace_payload: true,
        }
    }

    /// Whether [`trace_hash`](World::trace_hash) folds in every byte of
    /// every frame (the default) or only each frame's first 64 bytes — its
    /// Ethernet, IP and TCP headers, which carry every sequence number,
    /// acknowledgement and window — and its length. Hashing payload byte by
    /// byte is most of the wall time of a fast bulk transfer; where the
    /// payload is checked some other way (the workloads compare every byte
    /// with the sender's pattern) the headers are trace enough.
    pub fn set_trace_payload(&mut self, on: bool) {
        self.trace_payload = on;
    }

    /// Installs (or removes) a tap that sees every frame put on a wire.
    pub fn set_tap(&mut self, tap: Option<Tap>) {
        self.tap = tap;
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// A hash of everything that crossed a wire: same seed, same hash.
    pub fn trace_hash(&self) -> u64 {
        self.trace
    }

    /// Run totals.
    pub fn stats(&self) -> WorldStats {
        self.stats
    }

    /// Whether a node kept asking to be polled without time moving on.
    pub fn stalled(&self) -> bool {
        self.stalled
    }

    /// Adds a node behind a NIC.
    pub fn add_node(&mut self, node: Box<dyn Node>, nic: NicConfig) -> NodeId {
        self.add_node_with_nics(node, nic, 1)
    }

    /// Adds a node behind `count` NICs (at least one), all alike. Each
    /// `connect*` call plugs the node's next free NIC; frames name the NIC
    /// they leave from ([`SimFrame::port`]) and arrive with the one that
    /// received them ([`RxInfo::port`]). A bonded host
    /// ([`BondedNode`](crate::bonded::BondedNode)) is such a node.
    pub fn add_node_with_nics(
        &mut self,
        node: Box<dyn Node>,
        nic: NicConfig,
        count: usize,
    ) -> NodeId {
        self.nodes.push(NodeSlot {
            node,
            nic,
            ports: (0..count.max(1)).map(|_| Port::default()).collect(),
            scheduled: None,
        });
        let id = self.nodes.len() - 1;
        self.reschedule(id);
        id
    }

    /// Adds a learning Ethernet switch (it forwards instantly; links carry the
    /// delays and faults).
    pub fn add_switch(&mut self) -> SwitchId {
        self.switches.push(Switch {
            ports: Vec::new(),
            table: BTreeMap::new(),
        });
        self.switches.len() - 1
    }

    fn new_link(
        &mut self,
        ends: [Peer; 2],
        a_to_b: LinkConfig,
        b_to_a: LinkConfig,
    ) -> Result<LinkId, ConfigError> {
        a_to_b.validate()?;
        b_to_a.validate()?;
        let id = self.links.len() as u64;
        self.links.push(Link {
            ends,
            dirs: [
                Direction::new(a_to_b, self.seed, 2 * id),
                Direction::new(b_to_a, self.seed, 2 * id + 1),
            ],
            cut: false,
        });
        Ok(self.links.len() - 1)
    }

    fn attach_node(&mut self, n: NodeId, link: LinkId, side: usize) -> Result<(), ConfigError> {
        let port = self.check_free(n)?;
        if let Some(p) = self.nodes.get_mut(n).and_then(|s| s.ports.get_mut(port)) {
            p.link = Some((link, side));
        }
        Ok(())
    }

    /// The node's first NIC not yet connected.
    fn check_free(&self, n: NodeId) -> Result<usize, ConfigError> {
        self.nodes
            .get(n)
            .ok_or(ConfigError::NoSuchEndpoint(n))?
            .ports
            .iter()
            .position(|p| p.link.is_none())
            .ok_or(ConfigError::AlreadyConnected(n))
    }

    /// Joins two nodes by a link, the same both ways.
    pub fn connect(
        &mut self,
        a: NodeId,
        b: NodeId,
        cfg: LinkConfig,
    ) -> Result<LinkId, ConfigError> {
        self.connect_asym(a, b, cfg, cfg)
    }

    /// Joins two nodes by a link with a config per direction.
    pub fn connect_asym(
        &mut self,
        a: NodeId,
        b: NodeId,
        a_to_b: LinkConfig,
        b_to_a: LinkConfig,
    ) -> Result<LinkId, ConfigError> {
        let pa = self.check_free(a)?;
        let pb = self.check_free(b)?;
        if a == b {
            return Err(ConfigError::AlreadyConnected(a));
        }
        let l = self.new_link([Peer::Node(a, pa), Peer::Node(b, pb)], a_to_b, b_to_a)?;
        self.attach_node(a, l, 0)?;
        self.attach_node(b, l, 1)?;
        Ok(l)
    }

    /// Plugs a node into a switch port with a link (same both ways).
    pub fn connect_to_switch(
        &mut self,
        n: NodeId,
        s: SwitchId,
        cfg: LinkConfig,
    ) -> Result<LinkId, ConfigError> {
        let nic = self.check_free(n)?;
        let port = self
            .switches
            .get(s)
            .ok_or(ConfigError::NoSuchEndpoint(s))?
            .ports
            .len();
        let l = self.new_link([Peer::Node(n, nic), Peer::Switch(s, port)], cfg, cfg)?;
        self.attach_node(n, l, 0)?;
        if let Some(sw) = self.switches.get_mut(s) {
            sw.ports.push((l, 1));
        }
        Ok(l)
    }

    /// One direction's counters: `from_a` is the direction from the link's
    /// first end (the node, for switch links).
    pub fn link_stats(&self, l: LinkId, from_a: bool) -> Option<LinkStats> {
        self.links
            .get(l)
            .and_then(|k| k.dirs.get(usize::from(!from_a)))
            .map(|d| d.stats)
    }

    /// Cuts link `l`: until [`restore_link`](World::restore_link), every
    /// frame put on it, or due to arrive over it, is lost, both ways (a
    /// pulled cable, a dead switch port). The NICs are not told: a node
    /// that watches its carrier must be told by the caller. Returns whether
    /// the link exists.
    pub fn cut_link(&mut self, l: LinkId) -> bool {
        self.set_cut(l, true)
    }

    /// Restores a link cut by [`cut_link`](World::cut_link).
    pub fn restore_link(&mut self, l: LinkId) -> bool {
        self.set_cut(l, false)
    }

    /// Whether link `l` is cut.
    pub fn is_cut(&self, l: LinkId) -> bool {
        self.links.get(l).is_some_and(|k| k.cut)
    }

    fn set_cut(&mut self, l: LinkId, cut: bool) -> bool {
        let Some(k) = self.links.get_mut(l) else {
            return false;
        };
        k.cut = cut;
        self.trace = fnv(self.trace, &self.now.total_nanos().to_le_bytes());
        self.trace = fnv(self.trace, if cut { b"cut" } else { b"fix" });
        self.trace = fnv(self.trace, &(l as u64).to_le_bytes());
        true
    }

    /// The link plugged into NIC `port` of node `n`.
    pub fn node_link(&self, n: NodeId, port: usize) -> Option<LinkId> {
        self.nodes.get(n)?.ports.get(port)?.link.map(|(l, _)| l)
    }

    /// The node `id` as its concrete type.
    pub fn node_mut<T: Node>(&mut self, id: NodeId) -> Option<&mut T> {
        let node: &mut dyn Any = self.nodes.get_mut(id)?.node.as_mut();
        node.downcast_mut::<T>()
    }

    /// The node `id` as its concrete type.
    pub fn node<T: Node>(&self, id: NodeId) -> Option<&T> {
        let node: &dyn Any = self.nodes.get(id)?.node.as_ref();
        node.downcast_ref::<T>()
    }

    /// Runs `f` on a node (to act as its application); frames it pushes are
    /// transmitted and the node's deadline is re-read.
    pub fn with_node<T: Node, R>(
        &mut self,
        id: NodeId,
        f: impl FnOnce(&mut T, Instant, &mut Vec<SimFrame>) -> R,
    ) -> Option<R> {
        let now = self.now;
        let mut out = core::mem::take(&mut self.scratch);
        let r = {
            let node: &mut dyn Any = self.nodes.get_mut(id)?.node.as_mut();
            f(node.downcast_mut::<T>()?, now, &mut out)
        };
        self.send_from(id, &mut out);
        self.scratch = out;
        self.reschedule(id);
        Some(r)
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        if !matches!(ev, Ev::Timer { .. }) {
            self.in_flight += 1;
        }
        self.seq += 1;
        let slot = match self.free_slots.pop() {
            Some(i) => {
                if let Some(x) = self.slots.get_mut(i as usize) {
                    *x = Some(ev);
                }
                i
            }
            None => {
                self.slots.push(Some(ev));
                (self.slots.len() - 1) as u32
            }
        };
        self.queue.push(Reverse((at, self.seq, slot)));
    }

    fn reschedule(&mut self, id: NodeId) {
        let now = self.now;
        let Some(slot) = self.nodes.get_mut(id) else {
            return;
        };
        let Some(t) = slot.node.poll_at() else { return };
        let t = t.max(now);
        if slot.scheduled.is_none_or(|s| t < s) {
            slot.scheduled = Some(t);
            self.push(t, Ev::Timer { node: id, at: t });
        }
    }

    /// NIC transmit path and the link beyond it.
    fn send_from(&mut self, id: NodeId, frames: &mut Vec<SimFrame>) {
        let Some(slot) = self.nodes.get(id) else {
            frames.clear();
            return;
        };
        let nic = slot.nic;
        // Each frame's NIC: (frame, its link); frames for a NIC without a
        // cable go nowhere.
        let mut wire: Vec<(Vec<u8>, Option<Cable>)> = Vec::new();
        let mut cut: Vec<Vec<u8>> = Vec::new();
        for f in frames.drain(..) {
            let link = self
                .nodes
                .get(id)
                .and_then(|s| s.ports.get(f.port))
                .and_then(|p| p.link);
            match (f.gso_size, nic.tso) {
                (Some(mss), true) if !nic.gso_wire => {
                    self.stats.tso_frames += 1;
                    nic::segment(&f.bytes, mss, &mut cut);
                    wire.extend(cut.drain(..).map(|b| (b, link)));
                }
                _ => {
                    let mut b = f.bytes;
                    if let (Some((start, off)), true) = (f.csum, nic.tx_csum) {
                        nic::complete_partial_csum(&mut b, usize::from(start), usize::from(off));
                    }
                    wire.push((b, link));
                }
            }
        }
        for (mut b, link) in wire {
            let Some((link, side)) = link else { continue };
            let max = if nic.gso_wire {
                GSO_WIRE_MAX
            } else {
                nic.mtu + 18
            };
            if b.len() > max {
                if let Some(d) = self.links.get_mut(link).and_then(|l| l.dirs.get_mut(side)) {
                    d.stats.oversize += 1;
                }
                continue;
            }
            self.put_on_link(link, side, &mut b, true);
        }
    }

    /// Puts `frame` on `link` in direction `dir`. With `last_use` the
    /// caller has no more use for the frame, and its last delivery takes it
    /// rather than a copy.
    fn put_on_link(&mut self, link: LinkId, dir: usize, frame: &mut Vec<u8>, last_use: bool) {
        let now = self.now;
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        let cut = l.cut;
        let Some(d) = l.dirs.get_mut(dir) else {
            return;
        };
        self.stats.wire_frames += 1;
        // A cut link loses the frame before the link's own dice are rolled,
        // so cutting one link leaves every other link's faults as they were.
        let fate = if cut {
            d.stats.frames += 1;
            d.stats.bytes += frame.len() as u64;
            d.stats.cut += 1;
            Fate::Dropped
        } else {
            d.transmit(now, frame)
        };
        self.trace = fnv(self.trace, &now.total_nanos().to_le_bytes());
        self.trace = fnv(self.trace, &[link as u8, (link >> 8) as u8, dir as u8]);
        if self.trace_payload {
            self.trace = fnv(self.trace, frame);
        } else {
            self.trace = fnv_head(self.trace, frame);
        }
        if let Some(tap) = self.tap.as_mut() {
            let arrivals = match &fate {
                Fate::Dropped => &[][..],
                Fate::Deliver(t) => &t[..],
            };
            tap(&TapEvent {
                at: now,
                link,
                dir,
                frame,
                arrivals,
            });
        }
        match fate {
            Fate::Dropped => self.trace = fnv(self.trace, b"drop"),
            Fate::Deliver(times) => {
                let n = times.len();
                for (i, t) in times.into_iter().enumerate() {
                    self.trace = fnv(self.trace, &t.total_nanos().to_le_bytes());
                    let frame = if last_use && i + 1 == n {
                        core::mem::take(frame)
                    } else {
                        frame.clone()
                    };
                    self.push(t, Ev::Arrive { link, dir, frame });
                }
            }
        }
    }

    fn arrive(&mut self, link: LinkId, dir: usize, frame: Vec<u8>) {
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        if l.cut {
            // In flight when the cable was pulled.
            if let Some(d) = l.dirs.get_mut(dir) {
                d.stats.cut += 1;
                d.stats.delivered = d.stats.delivered.saturating_sub(1);
            }
            self.trace = fnv(self.trace, b"lost in a cut");
            return;
        }
        let Some(&to) = l.ends.get(1 - dir) else {
            return;
        };
        match to {
            Peer::Node(n, port) => {
                let Some(slot) = self.nodes.get_mut(n) else {
                    return;
                };
                let coalesce = slot.nic.rx_coalesce;
                let Some(p) = slot.ports.get_mut(port) else {
                    return;
                };
                p.rx_pending.push(frame);
                if coalesce.is_zero() {
                    self.flush_rx(n, port);
                } else if !p.rx_flush {
                    p.rx_flush = true;
                    let at = self.now + coalesce;
                    self.push(at, Ev::RxFlush { node: n, port });
                }
            }
            Peer::Switch(s, port) => self.switch(s, port, frame),
        }
    }

    fn switch(&mut self, s: SwitchId, in_port: usize, mut frame: Vec<u8>) {
        let Some(sw) = self.switches.get_mut(s) else {
            return;
        };
        let (Some(dst), Some(src)) = (frame.get(0..6), frame.get(6..12)) else {
            return;
        };
        let dst: [u8; 6] = dst.try_into().unwrap_or([0; 6]);
        let src: [u8; 6] = src.try_into().unwrap_or([0; 6]);
        if src[0] & 1 == 0 {
            sw.table.insert(src, in_port);
        }
        let out: Vec<(LinkId, usize)> = match sw.table.get(&dst) {
            Some(&p) if dst[0] & 1 == 0 => {
                if p == in_port {
                    return;
                }
                sw.ports.get(p).copied().into_iter().collect()
            }
            _ => sw
                .ports
                .iter()
                .enumerate()
                .filter(|(p, _)| *p != in_port)
                .map(|(_, &x)| x)
                .collect(),
        };
        let n = out.len();
        for (i, (link, side)) in out.into_iter().enumerate() {
            // The switch sits on `side`; frames leave it in that direction.
            self.put_on_link(link, side, &mut frame, i + 1 == n);
        }
    }

    fn flush_rx(&mut self, n: NodeId, port: usize) {
        let Some(slot) = self.nodes.get_mut(n) else {
            return;
        };
        let nic = slot.nic;
        let Some(p) = slot.ports.get_mut(port) else {
            return;
        };
        p.rx_flush = false;
        let frames = core::mem::take(&mut p.rx_pending);
        let verify = nic.rx_csum || nic.gro;
        let mut deliveries: Vec<(Vec<u8>, RxInfo)> = Vec::with_capacity(frames.len());
        if verify {
            // Verify, then coalesce runs of good TCP segments.
            let mut run: Vec<Vec<u8>> = Vec::new();
            let flush_run = |run: &mut Vec<Vec<u8>>,
                             out: &mut Vec<(Vec<u8>, RxInfo)>,
                             stats: &mut WorldStats| {
                let batch = core::mem::take(run);
                let merged = if nic.gro {
                    nic::coalesce(batch)
                } else {
                    batch.into_iter().map(|f| (f, None)).collect()
                };
                for (f, gso) in merged {
                    if gso.is_some() {
                        stats.gro_frames += 1;
                    }
                    out.push((
                        f,
                        RxInfo {
                            csum_verified: nic.rx_csum || gso.is_some(),
                            gso_size: gso,
                            port,
                        },
                    ));
                }
            };
            for f in frames {
                if nic::verify_checksums(&f) {
                    run.push(f);
                } else {
                    flush_run(&mut run, &mut deliveries, &mut self.stats);
                    deliveries.push((
                        f,
                        RxInfo {
                            port,
                            ..RxInfo::default()
                        },
                    ));
                }
            }
            flush_run(&mut run, &mut deliveries, &mut self.stats);
        } else {
            let info = RxInfo {
                port,
                ..RxInfo::default()
            };
            deliveries.extend(frames.into_iter().map(|f| (f, info)));
        }
        let now = self.now;
        let mut out = core::mem::take(&mut self.scratch);
        for (f, info) in deliveries {
            self.stats.delivered += 1;
            if let Some(slot) = self.nodes.get_mut(n) {
                slot.node.receive(now, &f, info, &mut out);
            }
            self.send_from(n, &mut out);
        }
        self.scratch = out;
        self.reschedule(n);
    }

    fn timer(&mut self, n: NodeId, at: Instant) {
        let now = self.now;
        let Some(slot) = self.nodes.get_mut(n) else {
            return;
        };
        if slot.scheduled != Some(at) {
            return;
        }
        slot.scheduled = None;
        let mut out = core::mem::take(&mut self.scratch);
        slot.node.poll(now, &mut out);
        self.send_from(n, &mut out);
        self.scratch = out;
        self.reschedule(n);
    }

    /// Processes the next event; returns its time, or `None` if nothing is
    /// left (or the world stalled).
    pub fn step(&mut self) -> Option<Instant> {
        if self.stalled {
            return None;
        }
        let Reverse((at, _, slot)) = self.queue.pop()?;
        let ev = self.slots.get_mut(slot as usize).and_then(Option::take);
        self.free_slots.push(slot);
        if at == self.now {
            self.same_instant += 1;
            if self.same_instant > STALL_LIMIT {
                self.stalled = true;
                return None;
            }
        } else {
            self.same_instant = 0;
        }
        self.now = self.now.max(at);
        self.stats.events += 1;
        match ev {
            None => {}
            Some(Ev::Arrive { link, dir, frame }) => {
                self.in_flight -= 1;
                self.arrive(link, dir, frame);
            }
            Some(Ev::RxFlush { node, port }) => {
                self.in_flight -= 1;
                self.flush_rx(node, port);
            }
            Some(Ev::Timer { node, at }) => self.timer(node, at),
        }
        Some(at)
    }

    /// Runs every event up to and including `t`, then sets the clock to `t`.
    pub fn run_until(&mut self, t: Instant) {
        while let Some(Reverse((at, _, _))) = self.queue.peek() {
            if *at > t || self.stalled {
                break;
            }
            self.step();
        }
        if !self.stalled {
            self.now = self.now.max(t);
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let t = self.now + d;
        self.run_until(t);
    }

    /// Runs until no frame is in flight and no node has a deadline before
    /// `limit`. Returns whether that happened before `limit`.
    pub fn run_until_idle(&mut self, limit: Instant) -> bool {
        loop {
            if self.stalled {
                return false;
            }
            let next = match self.queue.peek() {
                None => return true,
                Some(Reverse((at, _, _))) => *at,
            };
            if self.in_flight == 0 && next > limit {
                return true;
            }
            if next > limit {
                return false;
            }
            self.step();
        }
    }

    /// Runs until `done(world)` holds, checking after every event; gives up at
    /// `limit`. Returns whether `done` held.
    pub fn run_while(&mut self, limit: Instant, mut done: impl FnMut(&mut World) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            match self.queue.peek() {
                Some(Reverse((at, _, _))) if *at <= limit && !self.stalled => {}
                _ => return done(self),
            }
            self.step();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `n` frames to `dst` at a fixed interval, records what arrives.
    struct Toy {
        mac: [u8; 6],
        dst: [u8; 6],
        n: u32,
        every: Duration,
        next: Option<Instant>,
        got: Vec<(Instant, Vec<u8>)>,
        spin: bool,
    }

    impl Toy {
        fn new(mac: u8, dst: u8, n: u32) -> Toy {
            Toy {
                mac: [2, 0, 0, 0, 0, mac],
                dst: [2, 0, 0, 0, 0, dst],
                n,
                every: Duration::from_micros(10),
                next: (n > 0).then_some(Instant::ZERO),
                got: Vec::new(),
                spin: false,
            }
        }
    }

    impl Node for Toy {
        fn receive(&mut self, now: Instant, frame: &[u8], _info: RxInfo, _out: &mut Vec<SimFrame>) {
            self.got.push((now, frame.to_vec()));
        }
        fn poll(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
            if self.spin {
                return;
            }
            if let Some(t) = self.next
                && t <= now
                && self.n > 0
            {
                let mut bytes = Vec::with_capacity(100);
                bytes.extend_from_slice(&self.dst);
                bytes.extend_from_slice(&self.mac);
                bytes.extend_from_slice(&[0x88, 0xb5]);
                bytes.extend_from_slice(&self.n.to_be_bytes());
                bytes.resize(100, 0);
                out.push(SimFrame {
                    bytes,
                    ..SimFrame::default()
                });
                self.n -= 1;
                self.next = (self.n > 0).then_some(now + self.every);
            }
        }
        fn poll_at(&self) -> Option<Instant> {
            if self.spin {
                Some(Instant::ZERO)
            } else {
                self.next
            }
        }
    }

    #[test]
    fn delay_and_rate_are_modelled() {
        let mut w = World::new(1);
        let a = w.add_node(Box::new(Toy::new(1, 2, 3)), NicConfig::default());
        let b = w.add_node(Box::new(Toy::new(2, 1, 0)), NicConfig::default());
        // 100-byte frames + 20 bytes overhead = 960 bits: 96 µs at 10 Mb/s.
        w.connect(
            a,
            b,
            LinkConfig::new(10_000_000, Duration::from_micros(500)),
        )
        .unwrap();
        assert!(w.run_until_idle(Instant::from_secs(1)));
        let got: Vec<u64> = w
            .node::<Toy>(b)
            .unwrap()
            .got
            .iter()
            .map(|(t, _)| t.total_micros())
            .collect();
        // Sent at 0, 10, 20 µs; serialized back to back.
        assert_eq!(got, [596, 692, 788]);
    }

    #[test]
    fn switch_learns_and_floods() {
        let mut w = World::new(1);
        let s = w.add_switch();
        let mut ta = Toy::new(1, 2, 3);
        ta.every = Duration::from_millis(2);
        let mut tb = Toy::new(2, 1, 1);
        tb.next = Some(Instant::from_millis(1));
        let a = w.add_node(Box::new(ta), NicConfig::default());
        let b = w.add_node(Box::new(tb), NicConfig::default());
        let c = w.add_node(Box::new(Toy::new(3, 9, 0)), NicConfig::default());
        for n in [a, b, c] {
            w.connect_to_switch(n, s, LinkConfig::default()).unwrap();
        }
        assert!(
            w.connect_to_switch(a, s, LinkConfig::default()).is_err(),
            "one NIC, one cable"
        );
        w.run_until_idle(Instant::from_secs(1));
        // a's first frame (t = 0) is flooded: b is unknown. b speaks at 1 ms,
        // so a's frames at 2 and 4 ms go to b alone; b's goes to a alone.
        assert_eq!(w.node::<Toy>(b).unwrap().got.len(), 3);
        assert_eq!(w.node::<Toy>(a).unwrap().got.len(), 1);
        assert_eq!(
            w.node::<Toy>(c).unwrap().got.len(),
            1,
            "only the flooded one"
        );
    }

    #[test]
    fn same_seed_same_trace_and_faults_counted() {
        let run = |seed| {
            let mut w = World::new(seed);
            let a = w.add_node(Box::new(Toy::new(1, 2, 2000)), NicConfig::default());
            let b = w.add_node(Box::new(Toy::new(2, 1, 0)), NicConfig::default());
            let cfg = LinkConfig::new(1_000_000_000, Duration::from_micros(50))
                .with_loss(0.1)
                .with_duplicate(0.05)
                .with_reorder(0.05, Duration::from_micros(30));
            let l = w.connect(a, b, cfg).unwrap();
            w.run_until_idle(Instant::from_secs(5));
            let got: Vec<Vec<u8>> = w
                .node::<Toy>(b)
                .unwrap()
                .got
                .iter()
                .map(|(_, f)| f.clone())
                .collect();
            (w.trace_hash(), got, w.link_stats(l, true).unwrap())
        };
        let (h1, g1, s1) = run(7);
        let (h2, g2, _) = run(7);
        let (h3, g3, _) = run(8);
        assert_eq!((h1, &g1), (h2, &g2));
        assert_ne!(h1, h3);
        assert_ne!(g1, g3);
        assert_eq!(s1.frames, 2000);
        assert_eq!(s1.delivered, g1.len() as u64);
        assert!(
            s1.lost > 100 && s1.duplicated > 40 && s1.reordered > 40,
            "{s1:?}"
        );
    }

    #[test]
    fn a_spinning_node_is_reported_not_looped_on() {
        let mut w = World::new(1);
        let mut t = Toy::new(1, 2, 0);
        t.spin = true;
        w.add_node(Box::new(t), NicConfig::default());
        assert!(!w.run_until_idle(Instant::from_secs(1)));
        assert!(w.stalled());
    }

    /// Sends what a test queues, on the NIC the test says; records what
    /// arrives and on which NIC.
    #[derive(Default)]
    struct Ports {
        queued: Vec<(usize, Vec<u8>)>,
        got: Vec<(Instant, usize, Vec<u8>)>,
    }

    impl Node for Ports {
        fn receive(&mut self, now: Instant, frame: &[u8], info: RxInfo, _out: &mut Vec<SimFrame>) {
            self.got.push((now, info.port, frame.to_vec()));
        }
        fn poll(&mut self, _now: Instant, out: &mut Vec<SimFrame>) {
            for (port, bytes) in self.queued.drain(..) {
                out.push(SimFrame {
                    bytes,
                    port,
                    ..SimFrame::default()
                });
            }
        }
        fn poll_at(&self) -> Option<Instant> {
            (!self.queued.is_empty()).then_some(Instant::ZERO)
        }
    }

    fn frame(dst: u8, src: u8, tag: u8) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, dst, 2, 0, 0, 0, 0, src, 0x88, 0xb5, tag];
        f.resize(60, 0);
        f
    }

    #[test]
    fn a_node_with_several_nics_sends_and_hears_on_each() {
        let mut w = World::new(1);
        let a = w.add_node_with_nics(Box::new(Ports::default()), NicConfig::default(), 2);
        let b = w.add_node(Box::new(Ports::default()), NicConfig::default());
        let c = w.add_node(Box::new(Ports::default()), NicConfig::default());
        let ab = w.connect(a, b, LinkConfig::default()).unwrap();
        let ac = w.connect(a, c, LinkConfig::default()).unwrap();
        assert!(
            w.connect(a, b, LinkConfig::default()).is_err(),
            "two NICs, two cables"
        );
        assert_eq!((w.node_link(a, 0), w.node_link(a, 1)), (Some(ab), Some(ac)));
        w.with_node::<Ports, _>(a, |n, _, _| {
            n.queued = vec![
                (1, frame(3, 1, 1)),
                (0, frame(2, 1, 2)),
                (7, frame(2, 1, 3)),
            ];
        });
        w.with_node::<Ports, _>(c, |n, _, _| n.queued = vec![(0, frame(1, 3, 4))]);
        w.run_until_idle(Instant::from_secs(1));
        let tags = |n: NodeId, w: &World| -> Vec<(usize, u8)> {
            w.node::<Ports>(n)
                .unwrap()
                .got
                .iter()
                .map(|(_, p, f)| (*p, f[14]))
                .collect()
        };
        assert_eq!(
            tags(b, &w),
            vec![(0, 2)],
            "NIC 0's frame; NIC 7 does not exist"
        );
        assert_eq!(tags(c, &w), vec![(0, 1)]);
        assert_eq!(tags(a, &w), vec![(1, 4)], "heard on NIC 1");
    }

    #[test]
    fn a_cut_link_loses_everything_both_ways_until_restored() {
        let mut w = World::new(1);
        let a = w.add_node(Box::new(Ports::default()), NicConfig::default());
        let b = w.add_node(Box::new(Ports::default()), NicConfig::default());
        let l = w
            .connect(
                a,
                b,
                LinkConfig::new(1_000_000_000, Duration::from_millis(1)),
            )
            .unwrap();
        let send = |w: &mut World, n: NodeId, tag: u8| {
            w.with_node::<Ports, _>(n, |p, _, _| p.queued.push((0, frame(9, 9, tag))));
        };
        send(&mut w, a, 1);
        w.run_for(Duration::from_micros(500));
        // Cut with frame 1 in flight: it is lost too.
        assert!(w.cut_link(l) && w.is_cut(l));
        send(&mut w, a, 2);
        send(&mut w, b, 3);
        w.run_for(Duration::from_millis(5));
        assert!(w.restore_link(l) && !w.is_cut(l));
        send(&mut w, a, 4);
        send(&mut w, b, 5);
        w.run_until_idle(Instant::from_secs(1));
        let tags = |n: NodeId| -> Vec<u8> {
            w.node::<Ports>(n)
                .unwrap()
                .got
                .iter()
                .map(|(_, _, f)| f[14])
                .collect()
        };
        assert_eq!((tags(a), tags(b)), (vec![5], vec![4]));
        let (ab, ba) = (
            w.link_stats(l, true).unwrap(),
            w.link_stats(l, false).unwrap(),
        );
        assert_eq!((ab.frames, ab.cut, ab.delivered), (3, 2, 1), "{ab:?}");
        assert_eq!((ba.frames, ba.cut), (2, 1), "{ba:?}");
        assert!(!w.cut_link(99));
    }

    #[test]
    fn oversize_frames_are_dropped() {
        let mut w = World::new(1);
        let a = w.add_node(
            Box::new(Toy::new(1, 2, 1)),
            NicConfig {
                mtu: 68,
                ..NicConfig::default()
            },
        );
        let b = w.add_node(Box::new(Toy::new(2, 1, 0)), NicConfig::default());
        let l = w.connect(a, b, LinkConfig::default()).unwrap();
        w.run_until_idle(Instant::from_secs(1));
        assert!(w.node::<Toy>(b).unwrap().got.is_empty());
        assert_eq!(w.link_stats(l, true).unwrap().oversize, 1);
    }
}
