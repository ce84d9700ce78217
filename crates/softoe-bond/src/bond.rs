//! The bonded interface: N member NICs behind one IPv4 address, sans-IO.
//!
//! [`Bond`] is everything BondingPlus does between a stack that believes it
//! has one NIC and the N real ones, without touching a device or a clock,
//! so that the engine (real ports) and the simulator (virtual ones) run the
//! same code:
//!
//! - **Out** ([`Bond::transmit`]): for each frame the stack sends, pick the
//!   member to send it on and, when the peer bonds too, the peer's member
//!   to send it to, by the [`Policy`]; rewrite the Ethernet addresses (and
//!   an ARP frame's sender address) in place.
//! - **In** ([`Bond::receive`]): a frame from any member is the
//!   interface's, once. Unicast is taken only on the member it is
//!   addressed to (a switch that has not learnt a MAC yet floods it to
//!   every member), broadcasts only on one member, and frames carrying one
//!   of our own MACs as source (our broadcasts flooded back to our other
//!   members) are dropped. ARP+ frames are consumed here.
//! - **ARP+ and link health** ([`Bond::poll_transmit`]): the [`Announcer`]'s
//!   broadcasts and changes, replies to newcomers, and a heartbeat from
//!   every member every [`BondConfig::heartbeat`]. The heartbeats are
//!   broadcasts, so each one also teaches the switch that member's MAC and
//!   reaches every member of every other host — including our own other
//!   members. A member that has heard nothing at all for
//!   [`BondConfig::missed_heartbeats`] periods, while another member has,
//!   leaves the bond (an `ARPP_CHANGE` tells the peers); it comes back when
//!   it hears anything again. A port that reports no carrier leaves at
//!   once ([`Bond::set_carrier`]).
//!
//! ## Peers that do not bond
//!
//! A host that speaks plain ARP maps our address to one MAC. Each such
//! peer is given one member for good (the member with the fewest such
//! peers, so different peers spread over the members), our stack's ARP
//! frames towards it carry that member's MAC, and our frames to it leave
//! from that member: the peer's neighbour entry never flaps and the
//! switch's learning table agrees with it. If that member leaves, the peer
//! moves to another and is told with a unicast gratuitous ARP reply. Our
//! stack's gratuitous broadcast ARP (sent when it starts) is dropped: it
//! would point every plain peer at one member. For the same reason our
//! stack's ARP requests go to the one host they ask for when its MAC is
//! known (hosts update an entry they have for us from any ARP frame); one
//! that must be broadcast is followed by a unicast gratuitous ARP to each
//! plain peer homed on another member.
//!
//! ## Striping and reordering
//!
//! Frames of one TCP connection striped over several links arrive out of
//! order when the links' queues differ. [`Policy::LeastQueued`] keeps them
//! level: each member has a virtual transmit queue (bytes sent ÷ its rate,
//! drained by time), and a frame goes to the member where it would finish
//! first, towards the peer member whose (virtual) queue is shortest. What
//! reordering is left is the stack's business (RACK's reordering window).

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use softoe_wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr,
    Ipv4Address, Ipv4Packet,
};

use crate::announce::{Announcer, AnnouncerConfig};
use crate::table::{Outcome, Table, TableConfig};
use crate::time::Instant;
use crate::wire::{ArppPacket, ArppRepr, ArppType, ETHERTYPE_ARPP, MAX_MEMBERS, Members};

/// Ethernet header length (untagged: the bond's own frames carry no tag).
const ETH_LEN: usize = EthernetFrame::<&[u8]>::HEADER_LEN;
/// The shortest Ethernet frame without its FCS: control frames are padded
/// to it.
const MIN_FRAME: usize = 60;
/// The most control frames held for [`Bond::poll_transmit`]; beyond it the
/// oldest are dropped (a caller that never polls must not grow memory).
const MAX_CONTROL: usize = 256;
/// The rate assumed for a member whose rate is not configured.
pub const DEFAULT_RATE_BPS: u64 = 1_000_000_000;
/// Bytes a frame occupies on the wire beyond what the stack hands over:
/// preamble and start delimiter (8), FCS (4) and the inter-frame gap (12).
const WIRE_OVERHEAD: u64 = 24;

/// How frames are spread over the members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Policy {
    /// The paper's: frame after frame, member after member.
    RoundRobin,
    /// Ours: the member where the frame would finish first (queued bytes ÷
    /// rate), towards the peer's least-queued member.
    #[default]
    LeastQueued,
    /// The paper's real-time channel: frames of sockets whose priority is
    /// at least [`BondConfig::priority_threshold`] go over the members
    /// marked real-time (to the peer's real-time members), everything else
    /// over the others; least-queued within each group.
    Prioritized,
}

impl Policy {
    /// Every policy, for help texts and sweeps.
    pub const ALL: [Policy; 3] = [Policy::RoundRobin, Policy::LeastQueued, Policy::Prioritized];

    /// Its name on the command line and in the configuration file.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round-robin",
            Policy::LeastQueued => "least-queued",
            Policy::Prioritized => "prioritized",
        }
    }

    /// The policy called `name` (as [`Policy::name`] prints it).
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One member NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberConfig {
    /// Its MAC address (unicast, different from every other member's).
    pub mac: EthernetAddress,
    /// Its link rate in bit/s, for [`Policy::LeastQueued`]; 0: unknown
    /// (taken as [`DEFAULT_RATE_BPS`], so equal to other unknown ones).
    pub rate_bps: u64,
    /// Dedicated to real-time traffic under [`Policy::Prioritized`].
    pub realtime: bool,
}

impl MemberConfig {
    /// A member with MAC `mac`, rate unknown, not real-time.
    pub fn new(mac: EthernetAddress) -> MemberConfig {
        MemberConfig {
            mac,
            rate_bps: 0,
            realtime: false,
        }
    }
}

/// How a [`Bond`] behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BondConfig {
    /// The interface's IPv4 address (the one behind every member).
    pub ip: Ipv4Address,
    /// The members, in order. The first one's MAC is the interface's own
    /// (the MAC the stack above uses).
    pub members: Vec<MemberConfig>,
    /// How frames are spread.
    pub policy: Policy,
    /// Under [`Policy::Prioritized`], the lowest priority (as `SO_PRIORITY`)
    /// that is real-time traffic.
    pub priority_threshold: u8,
    /// Time between heartbeats from every member.
    pub heartbeat: Duration,
    /// A member that hears nothing for this many heartbeat periods leaves.
    pub missed_heartbeats: u32,
    /// Time between the announcer's periodic `ARPP_BROADCAST`s.
    pub announce_period: Duration,
    /// The ARP+ table's limits.
    pub table: TableConfig,
    /// The first announcement sequence number (see
    /// [`AnnouncerConfig::initial_seq`]).
    pub initial_seq: u16,
}

impl BondConfig {
    /// `members` behind `ip`, with the defaults: least-queued, threshold
    /// 6, a heartbeat every 10 ms, 3 missed heartbeats, an announcement
    /// every second.
    pub fn new(ip: Ipv4Address, members: Vec<MemberConfig>) -> BondConfig {
        BondConfig {
            ip,
            members,
            policy: Policy::default(),
            priority_threshold: 6,
            heartbeat: Duration::from_millis(10),
            missed_heartbeats: 3,
            announce_period: Duration::from_secs(1),
            table: TableConfig::default(),
            initial_seq: 0,
        }
    }
}

/// Why a [`BondConfig`] cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No members, or more than [`MAX_MEMBERS`].
    MemberCount(usize),
    /// A member's MAC is not unicast.
    NotUnicast(EthernetAddress),
    /// Two members share a MAC.
    DuplicateMac(EthernetAddress),
    /// The address is not a unicast IPv4 address.
    Address(Ipv4Address),
    /// Every member is real-time: nothing would carry other traffic.
    AllRealtime,
    /// A zero heartbeat period or miss count.
    Heartbeat,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::MemberCount(n) => {
                write!(f, "a bond has 1 to {MAX_MEMBERS} members, not {n}")
            }
            ConfigError::NotUnicast(m) => write!(f, "member MAC {m} is not a unicast address"),
            ConfigError::DuplicateMac(m) => write!(f, "two members share the MAC {m}"),
            ConfigError::Address(a) => write!(f, "{a} is not a unicast IPv4 address"),
            ConfigError::AllRealtime => {
                f.write_str("every member is real-time: at least one must carry other traffic")
            }
            ConfigError::Heartbeat => {
                f.write_str("the heartbeat period and the missed-heartbeat count must be positive")
            }
        }
    }
}

impl core::error::Error for ConfigError {}

/// What [`Bond::receive`] decided about a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rx {
    /// Hand it to the stack (its destination MAC now the interface's).
    Deliver,
    /// An ARP+ frame, taken here.
    Consumed,
    /// Not for the stack.
    Dropped(DropReason),
}

/// Why a received frame was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Sent by one of our own members (a flooded broadcast of ours).
    Echo,
    /// A broadcast or multicast, taken on another member.
    Duplicate,
    /// Unicast for another member (flooded by a switch that has not learnt
    /// it), or for nobody here.
    NotOurs,
    /// Shorter than an Ethernet header, or an ARP+ frame that does not parse.
    Malformed,
}

/// A member's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberState {
    /// In the bond.
    Up,
    /// Out: heard nothing for [`BondConfig::missed_heartbeats`] periods.
    Silent,
    /// Out: its port reports no carrier.
    NoCarrier,
}

impl MemberState {
    /// Its name in `softoe stat`.
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Up => "up",
            MemberState::Silent => "silent",
            MemberState::NoCarrier => "no-carrier",
        }
    }
}

/// One member's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Frames received on it (all of them, before any decision).
    pub frames_in: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// Frames of the stack's sent on it.
    pub frames_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// ARP+ and gratuitous ARP frames of the bond's own sent on it.
    pub control_out: u64,
    /// Received frames dropped as echoes of our own.
    pub echoes: u64,
    /// Received broadcasts dropped as another member's copy.
    pub duplicates: u64,
    /// Received unicast frames dropped as addressed to another member.
    pub not_ours: u64,
    /// Times it left the bond.
    pub left: u64,
}

/// Counters of the bond as a whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BondStats {
    /// ARP+ frames received and taken.
    pub arpp_in: u64,
    /// ARP+ frames that did not parse.
    pub arpp_malformed: u64,
    /// Frames of the stack's sent to a bonding peer (striped).
    pub striped: u64,
    /// Frames of the stack's sent to a plain-ARP peer (on its one member).
    pub plain: u64,
    /// Gratuitous broadcast ARPs of the stack's dropped (see the module docs).
    pub gratuitous_dropped: u64,
    /// Plain peers moved to another member because theirs left.
    pub plain_moved: u64,
    /// Control frames dropped because nobody polled for them.
    pub control_overflow: u64,
    /// Changes of our member set announced.
    pub changes: u64,
    /// Paths we were sending on that went away: one of our members left,
    /// or a bonding peer's did. What went out on it lately is lost without
    /// trace; the runtime tells the stack, whose connections probe at once
    /// (`softoe_stack::Stack::path_changed`).
    pub path_losses: u64,
}

/// A member as [`Bond::members`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberStatus {
    /// Its MAC.
    pub mac: EthernetAddress,
    /// Its state.
    pub state: MemberState,
    /// Dedicated to real-time traffic.
    pub realtime: bool,
    /// Its rate as configured (0: unknown).
    pub rate_bps: u64,
    /// The bytes its virtual queue still holds, as time at its rate.
    pub backlog: Duration,
    /// When it last heard anything.
    pub last_heard: Instant,
    /// Plain-ARP peers assigned to it.
    pub plain_peers: usize,
    /// Its counters.
    pub stats: MemberStats,
}

#[derive(Clone, Debug)]
struct Member {
    cfg: MemberConfig,
    state: MemberState,
    carrier: bool,
    last_heard: Instant,
    /// When its virtual transmit queue empties.
    busy_until: Instant,
    stats: MemberStats,
}

impl Member {
    fn up(&self) -> bool {
        self.state == MemberState::Up
    }

    fn rate(&self) -> u64 {
        if self.cfg.rate_bps == 0 {
            DEFAULT_RATE_BPS
        } else {
            self.cfg.rate_bps
        }
    }
}

/// A plain-ARP peer's assignment.
#[derive(Clone, Copy, Debug)]
struct Plain {
    member: usize,
    /// Its MAC, once a frame from it has been seen.
    mac: Option<EthernetAddress>,
    /// Our stack's last ARP request for it went to `mac` alone and it has
    /// not answered: ask the next one by broadcast (its MAC may have changed).
    asked: bool,
}

/// Per bonding peer: the virtual queues of its members and the round-robin
/// position.
#[derive(Clone, Copy, Debug)]
struct PeerSched {
    busy_until: [Instant; MAX_MEMBERS],
    next: usize,
}

impl PeerSched {
    /// The peer's member set changed from `before` to `after`: members
    /// that stay keep their virtual queues, new ones start empty.
    fn remap(&mut self, before: &Members, after: &Members, now: Instant) {
        let old = self.busy_until;
        for (i, mac) in after.as_slice().iter().enumerate() {
            if let Some(b) = self.busy_until.get_mut(i) {
                *b = before
                    .position(*mac)
                    .and_then(|j| old.get(j).copied())
                    .unwrap_or(now);
            }
        }
        self.next %= after.len().max(1);
    }
}

/// A frame of the bond's own waiting to be sent.
#[derive(Clone, Copy, Debug)]
enum Control {
    /// An ARP+ message to `dst` (broadcast or a peer member).
    Arpp(ArppRepr, EthernetAddress),
    /// A gratuitous ARP reply telling a plain peer (IP, MAC) our MAC.
    GratuitousArp(Ipv4Address, EthernetAddress),
}

/// The bonded interface; see the module docs.
#[derive(Clone, Debug)]
pub struct Bond {
    ip: Ipv4Address,
    policy: Policy,
    threshold: u8,
    heartbeat: Duration,
    missed: u32,
    members: Vec<Member>,
    announcer: Announcer,
    table: Table,
    plain: BTreeMap<Ipv4Address, Plain>,
    peers: BTreeMap<Ipv4Address, PeerSched>,
    control: VecDeque<(usize, Control)>,
    next_heartbeat: Instant,
    rr: usize,
    /// False after [`Bond::shut_down`]: no more heartbeats.
    running: bool,
    stats: BondStats,
}

/// The EtherType of an untagged frame; `Vlan` for a tagged one, which the
/// bond does not look into.
fn outer_ethertype(eth: &EthernetFrame<&[u8]>) -> EtherType {
    if eth.vlan_tci().is_some() {
        EtherType::Vlan
    } else {
        eth.ethertype()
    }
}

/// The destination of an IPv4 packet (`None`: too short for one).
fn ipv4_dst(packet: &[u8]) -> Option<Ipv4Address> {
    (packet.len() >= softoe_wire::ipv4::HEADER_LEN)
        .then(|| Ipv4Packet::new_unchecked(packet).dst_addr())
}

impl Bond {
    /// A bond of `cfg.members`, started at `now`: the first announcement
    /// and heartbeats are due at once.
    pub fn new(cfg: BondConfig, now: Instant) -> Result<Bond, ConfigError> {
        let n = cfg.members.len();
        if n == 0 || n > MAX_MEMBERS {
            return Err(ConfigError::MemberCount(n));
        }
        if !cfg.ip.is_unicast() {
            return Err(ConfigError::Address(cfg.ip));
        }
        for (i, m) in cfg.members.iter().enumerate() {
            if !m.mac.is_unicast() {
                return Err(ConfigError::NotUnicast(m.mac));
            }
            if cfg.members.iter().skip(i + 1).any(|o| o.mac == m.mac) {
                return Err(ConfigError::DuplicateMac(m.mac));
            }
        }
        if cfg.policy == Policy::Prioritized && cfg.members.iter().all(|m| m.realtime) {
            return Err(ConfigError::AllRealtime);
        }
        if cfg.heartbeat.is_zero() || cfg.missed_heartbeats == 0 {
            return Err(ConfigError::Heartbeat);
        }
        let members: Vec<Member> = cfg
            .members
            .iter()
            .map(|c| Member {
                cfg: *c,
                state: MemberState::Up,
                carrier: true,
                last_heard: now,
                busy_until: now,
                stats: MemberStats::default(),
            })
            .collect();
        let announcer = Announcer::new(
            AnnouncerConfig {
                ip: cfg.ip,
                period: cfg.announce_period,
                initial_seq: cfg.initial_seq,
            },
            Self::member_set(&members).ok_or(ConfigError::MemberCount(n))?,
            now,
        );
        Ok(Bond {
            ip: cfg.ip,
            policy: cfg.policy,
            threshold: cfg.priority_threshold,
            heartbeat: cfg.heartbeat,
            missed: cfg.missed_heartbeats,
            members,
            announcer,
            table: Table::new(cfg.table),
            plain: BTreeMap::new(),
            peers: BTreeMap::new(),
            control: VecDeque::new(),
            next_heartbeat: now,
            rr: 0,
            running: true,
            stats: BondStats::default(),
        })
    }

    /// The members that are up, as announced (with their real-time bits).
    /// `None` when none is up.
    fn member_set(members: &[Member]) -> Option<Members> {
        let mut macs = [EthernetAddress::default(); MAX_MEMBERS];
        let mut rt = 0u16;
        let mut n = 0;
        for m in members.iter().filter(|m| m.up()) {
            if let Some(slot) = macs.get_mut(n) {
                *slot = m.cfg.mac;
                if m.cfg.realtime {
                    rt |= 1 << n;
                }
                n += 1;
            }
        }
        Some(Members::new(macs.get(..n)?)?.with_realtime(rt))
    }

    /// The interface's MAC: the first member's, what the stack above uses.
    pub fn mac(&self) -> EthernetAddress {
        self.members
            .first()
            .map_or(EthernetAddress::default(), |m| m.cfg.mac)
    }

    /// The interface's IPv4 address.
    pub fn ip(&self) -> Ipv4Address {
        self.ip
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// How many members (up or not).
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Every member's state and counters, in order.
    pub fn members(&self, now: Instant) -> impl Iterator<Item = MemberStatus> + '_ {
        self.members
            .iter()
            .enumerate()
            .map(move |(i, m)| MemberStatus {
                mac: m.cfg.mac,
                state: m.state,
                realtime: m.cfg.realtime,
                rate_bps: m.cfg.rate_bps,
                backlog: m.busy_until.saturating_duration_since(now),
                last_heard: m.last_heard,
                plain_peers: self.plain.values().filter(|p| p.member == i).count(),
                stats: m.stats,
            })
    }

    /// The ARP+ table: the bonding peers we know.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The plain-ARP peers and the member each is on.
    pub fn plain_peers(&self) -> impl Iterator<Item = (Ipv4Address, usize)> + '_ {
        self.plain.iter().map(|(ip, p)| (*ip, p.member))
    }

    /// The bond's counters.
    pub fn stats(&self) -> &BondStats {
        &self.stats
    }

    /// Our announcement sequence number.
    pub fn seq(&self) -> u16 {
        self.announcer.seq()
    }

    // ---- receive ---------------------------------------------------------

    /// A frame arrived on member `member`. Returns what to do with it; on
    /// [`Rx::Deliver`] its destination MAC has been rewritten to the
    /// interface's. Any frame is proof the member's link works.
    pub fn receive(&mut self, now: Instant, member: usize, frame: &mut [u8]) -> Rx {
        let bond_mac = self.mac();
        let bcast = self.broadcast_member();
        let Some(m) = self.members.get_mut(member) else {
            return Rx::Dropped(DropReason::NotOurs);
        };
        m.stats.frames_in += 1;
        m.stats.bytes_in += frame.len() as u64;
        m.last_heard = now;
        let Ok(eth) = EthernetFrame::new_checked(&*frame) else {
            return Rx::Dropped(DropReason::Malformed);
        };
        let (dst, src, ethertype) = (eth.dst_addr(), eth.src_addr(), outer_ethertype(&eth));
        let my_mac = m.cfg.mac;
        if self.members.iter().any(|o| o.cfg.mac == src) {
            self.bump(member, |s| s.echoes += 1);
            self.revive(now, member);
            return Rx::Dropped(DropReason::Echo);
        }
        self.revive(now, member);
        if ethertype == EtherType::Unknown(ETHERTYPE_ARPP) {
            return self.receive_arpp(now, frame.get(ETH_LEN..).unwrap_or(&[]));
        }
        if dst.is_multicast() {
            // Broadcasts included: the switch floods them to every member.
            if Some(member) != bcast {
                self.bump(member, |s| s.duplicates += 1);
                return Rx::Dropped(DropReason::Duplicate);
            }
        } else if dst == my_mac {
            if dst != bond_mac {
                EthernetFrame::new_unchecked(&mut *frame).set_dst_addr(bond_mac);
            }
        } else {
            self.bump(member, |s| s.not_ours += 1);
            return Rx::Dropped(DropReason::NotOurs);
        }
        self.learn_plain(frame, ethertype, src, member);
        Rx::Deliver
    }

    fn bump(&mut self, member: usize, f: impl FnOnce(&mut MemberStats)) {
        if let Some(m) = self.members.get_mut(member) {
            f(&mut m.stats);
        }
    }

    /// Remembers a plain peer's MAC (for gratuitous ARP after a move) from
    /// its ARP frames: only ARP pairs an address with the MAC of the host
    /// that has it (an IPv4 frame's source MAC may be a router's).
    fn learn_plain(
        &mut self,
        frame: &[u8],
        ethertype: EtherType,
        src: EthernetAddress,
        member: usize,
    ) {
        if ethertype != EtherType::Arp {
            return;
        }
        let Some(ip) = ArpPacket::new_checked(frame.get(ETH_LEN..).unwrap_or(&[]))
            .and_then(|p| ArpRepr::parse(&p))
            .map(|a| a.source_protocol_addr)
            .ok()
            .filter(|ip| ip.is_unicast() && *ip != self.ip)
        else {
            return;
        };
        if self.table.get(ip).is_some() {
            return;
        }
        if let Some(p) = self.plain.get_mut(&ip) {
            p.mac = Some(src);
            p.asked = false;
        } else if let Some(home) = self.least_loaded_member().or(Some(member)) {
            self.plain.insert(
                ip,
                Plain {
                    member: home,
                    mac: Some(src),
                    asked: false,
                },
            );
        }
    }

    fn receive_arpp(&mut self, now: Instant, bytes: &[u8]) -> Rx {
        let Ok(msg) = ArppPacket::new_checked(bytes).and_then(|p| ArppRepr::parse(&p)) else {
            self.stats.arpp_malformed += 1;
            return Rx::Dropped(DropReason::Malformed);
        };
        self.stats.arpp_in += 1;
        if msg.sender_ip == self.ip {
            // Another host claims our address (or a copy of ours from a
            // member we do not know): nothing to learn.
            return Rx::Consumed;
        }
        // A heartbeat carries the whole member set: from a peer we missed
        // (or whose change we missed) it teaches as much as a broadcast,
        // within a heartbeat period instead of an announcement period.
        let msg = match (msg.packet_type, self.table.get(msg.sender_ip)) {
            (ArppType::Heartbeat, e) if e.is_none_or(|e| e.seq() != msg.seq) => ArppRepr {
                packet_type: ArppType::Change,
                ..msg
            },
            _ => msg,
        };
        let before = self.table.get(msg.sender_ip).map(|e| *e.members());
        let update = self.table.process(now, &msg);
        match update.outcome {
            Outcome::Changed => {
                self.plain.remove(&msg.sender_ip);
                // The peer's links kept their queues: a member that stays
                // keeps its backlog (the set is re-indexed).
                let after = self.table.get(msg.sender_ip).map(|e| *e.members());
                if let (Some(before), Some(after)) = (before, after)
                    && before
                        .as_slice()
                        .iter()
                        .any(|m| after.position(*m).is_none())
                {
                    self.stats.path_losses += 1;
                }
                if let (Some(s), Some(before), Some(after)) =
                    (self.peers.get_mut(&msg.sender_ip), before, after)
                {
                    s.remap(&before, &after, now);
                }
            }
            Outcome::Inserted => {
                self.plain.remove(&msg.sender_ip);
                self.peers.remove(&msg.sender_ip);
            }
            Outcome::Removed => {
                self.peers.remove(&msg.sender_ip);
            }
            _ => {}
        }
        if update.reply
            && let Some(to) = msg.members.as_slice().first()
            && let Some(from) = self.broadcast_member()
        {
            let reply = self.announcer.reply_to(msg.sender_ip);
            self.push_control(from, Control::Arpp(reply, *to));
        }
        Rx::Consumed
    }

    // ---- transmit --------------------------------------------------------

    /// The stack sends a frame of `len` bytes whose headers are `header`
    /// (at least the Ethernet header; the ARP or IPv4 header after it when
    /// there is one), from a socket of priority `priority`. Picks the
    /// member to send it on, rewrites the Ethernet source (and, towards a
    /// bonding peer, destination) address in `header` — and an ARP
    /// frame's sender hardware address — and returns the member. `None`:
    /// drop the frame (our stack's gratuitous broadcast ARP).
    pub fn transmit(
        &mut self,
        now: Instant,
        header: &mut [u8],
        len: usize,
        priority: u8,
    ) -> Option<usize> {
        let eth = EthernetFrame::new_checked(&*header).ok()?;
        let dst = eth.dst_addr();
        let realtime = self.policy == Policy::Prioritized && priority >= self.threshold;
        let (member, peer_mac) = match outer_ethertype(&eth) {
            EtherType::Arp => {
                match ArpPacket::new_checked(eth.payload()).and_then(|p| ArpRepr::parse(&p)) {
                    Ok(arp) => self.route_arp(dst, &arp, header)?,
                    Err(_) => (self.broadcast_member()?, None),
                }
            }
            EtherType::Ipv4 if !dst.is_multicast() => match ipv4_dst(eth.payload()) {
                Some(ip) if self.table.get(ip).is_some() => {
                    let (m, p) = self.stripe(now, ip, len, realtime);
                    self.stats.striped += 1;
                    (m, p)
                }
                Some(ip) => {
                    self.stats.plain += 1;
                    (self.plain_member(ip), None)
                }
                None => (self.broadcast_member()?, None),
            },
            _ => (self.broadcast_member()?, None),
        };
        let m = self.members.get_mut(member)?;
        let mut eth = EthernetFrame::new_unchecked(&mut *header);
        eth.set_src_addr(m.cfg.mac);
        if let Some(p) = peer_mac {
            eth.set_dst_addr(p);
        }
        m.stats.frames_out += 1;
        m.stats.bytes_out += len as u64;
        let start = m.busy_until.max(now);
        m.busy_until = start + wire_time(len, m.rate());
        Some(member)
    }

    /// The member for our stack's ARP frame `arp` (to `dst`) in `header`,
    /// and the bonding peer's MAC to send it to instead, if any; rewrites
    /// the sender hardware address to the member's. `None`: drop it.
    fn route_arp(
        &mut self,
        dst: EthernetAddress,
        arp: &ArpRepr,
        header: &mut [u8],
    ) -> Option<(usize, Option<EthernetAddress>)> {
        let (spa, tpa) = (arp.source_protocol_addr, arp.target_protocol_addr);
        let broadcast_request = arp.operation == ArpOperation::Request && dst.is_broadcast();
        if broadcast_request && spa == tpa {
            self.stats.gratuitous_dropped += 1;
            return None;
        }
        let bonding = self.table.get(tpa).map(|e| e.alive_members().next());
        let m = if bonding.is_some() {
            self.broadcast_member()?
        } else {
            self.plain_member(tpa)
        };
        let mac = self.members.get(m)?.cfg.mac;
        if let Some(body) = header.get_mut(ETH_LEN..) {
            ArpPacket::new_unchecked(body).set_source_hardware_addr(mac.as_bytes());
        }
        // A broadcast request names (our IP, this member's MAC) to
        // every host on the segment, and hosts update an entry they
        // have for us from it: plain peers homed elsewhere would
        // move. Ask the one host when we know where it is; else
        // broadcast and tell the others again where we are for them.
        let to = match bonding {
            _ if !broadcast_request => None,
            Some(first) => first,
            None => self.plain.get_mut(&tpa).and_then(|p| {
                let to = p.mac.filter(|_| !p.asked);
                p.asked = to.is_some();
                to
            }),
        };
        if broadcast_request && to.is_none() {
            self.restate_plain_peers(tpa, m);
        }
        Some((m, to))
    }

    /// The member for a frame of `len` bytes to bonding peer `ip`, and the
    /// peer member to send it to.
    fn stripe(
        &mut self,
        now: Instant,
        ip: Ipv4Address,
        len: usize,
        realtime: bool,
    ) -> (usize, Option<EthernetAddress>) {
        let ours = self.pick_member(now, len, realtime);
        let Some(entry) = self.table.get(ip) else {
            return (ours, None);
        };
        let peer_members = *entry.members();
        let alive = |i: usize| entry.is_alive(i);
        let sched = self.peers.entry(ip).or_insert(PeerSched {
            busy_until: [now; MAX_MEMBERS],
            next: 0,
        });
        let n = peer_members.len();
        let class = |i: usize| {
            self.policy != Policy::Prioritized || peer_members.is_realtime(i) == realtime
        };
        let mut pick: Option<usize> = None;
        for pass in 0..2 {
            for k in 0..n {
                let i = match self.policy {
                    Policy::RoundRobin => (sched.next + k) % n,
                    _ => k,
                };
                if !alive(i) || (pass == 0 && !class(i)) {
                    continue;
                }
                match self.policy {
                    Policy::RoundRobin => {
                        pick = Some(i);
                        break;
                    }
                    _ => {
                        let better = pick.is_none_or(|p| {
                            sched.busy_until.get(i).copied().unwrap_or(now)
                                < sched.busy_until.get(p).copied().unwrap_or(now)
                        });
                        if better {
                            pick = Some(i);
                        }
                    }
                }
            }
            if pick.is_some() {
                break;
            }
        }
        let Some(i) = pick else {
            return (ours, None);
        };
        sched.next = (i + 1) % n;
        if let Some(b) = sched.busy_until.get_mut(i) {
            // The peer's link rates are not known: equal ones are assumed.
            let rate = self
                .members
                .get(ours)
                .map_or(DEFAULT_RATE_BPS, Member::rate);
            *b = (*b).max(now) + wire_time(len, rate);
        }
        (ours, peer_members.as_slice().get(i).copied())
    }

    /// Our member for the next striped frame: round-robin, or where it
    /// finishes first; within the real-time group or the others under
    /// [`Policy::Prioritized`]. Members that are down are skipped unless
    /// all are.
    fn pick_member(&mut self, now: Instant, len: usize, realtime: bool) -> usize {
        let policy = self.policy;
        let n = self.members.len();
        let eligible = |m: &Member, pass: u8| match pass {
            0 => m.up() && (policy != Policy::Prioritized || m.cfg.realtime == realtime),
            1 => m.up(),
            _ => m.carrier,
        };
        for pass in 0..3u8 {
            match policy {
                Policy::RoundRobin => {
                    for k in 0..n {
                        let i = (self.rr + k) % n;
                        if self.members.get(i).is_some_and(|m| eligible(m, pass)) {
                            self.rr = (i + 1) % n;
                            return i;
                        }
                    }
                }
                Policy::LeastQueued | Policy::Prioritized => {
                    // Ties (idle members) go round in turn, so small frames
                    // spread too instead of all taking the first member.
                    let best = (0..n)
                        .map(|k| (self.rr + k) % n)
                        .filter_map(|i| Some((i, self.members.get(i)?)))
                        .filter(|(_, m)| eligible(m, pass))
                        .min_by_key(|(_, m)| m.busy_until.max(now) + wire_time(len, m.rate()));
                    if let Some((i, _)) = best {
                        self.rr = (i + 1) % n;
                        return i;
                    }
                }
            }
        }
        0
    }

    /// The member a plain-ARP peer is on, assigned at first contact.
    fn plain_member(&mut self, ip: Ipv4Address) -> usize {
        if let Some(p) = self.plain.get(&ip) {
            return p.member;
        }
        let member = self
            .least_loaded_member()
            .or_else(|| self.broadcast_member())
            .unwrap_or(0);
        self.plain.insert(
            ip,
            Plain {
                member,
                mac: None,
                asked: false,
            },
        );
        member
    }

    /// The member that is up, not real-time, with the fewest plain peers;
    /// a real-time one if no other is up (as for striped traffic: better
    /// the real-time channel than a dead member).
    fn least_loaded_member(&self) -> Option<usize> {
        let rt_apart = self.policy == Policy::Prioritized;
        let mut load = [0usize; MAX_MEMBERS];
        for p in self.plain.values() {
            if let Some(l) = load.get_mut(p.member) {
                *l += 1;
            }
        }
        let least = |rt_ok: bool| {
            self.members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.up() && (rt_ok || !(rt_apart && m.cfg.realtime)))
                .min_by_key(|(i, _)| load.get(*i).copied().unwrap_or(0))
                .map(|(i, _)| i)
        };
        least(false).or_else(|| least(true))
    }

    /// Our broadcast ARP request for `except` left on `member`: tells every
    /// other plain peer homed on another member (and whose MAC we know)
    /// its member's MAC again, with a unicast gratuitous ARP.
    fn restate_plain_peers(&mut self, except: Ipv4Address, member: usize) {
        let others: Vec<(usize, Control)> = self
            .plain
            .iter()
            .filter(|(ip, p)| **ip != except && p.member != member)
            .filter_map(|(ip, p)| Some((p.member, Control::GratuitousArp(*ip, p.mac?))))
            .collect();
        for (m, c) in others {
            self.push_control(m, c);
        }
    }

    /// The member broadcasts are taken on and sent from: the first one up
    /// (the first one with carrier if none is up).
    fn broadcast_member(&self) -> Option<usize> {
        self.members
            .iter()
            .position(Member::up)
            .or_else(|| self.members.iter().position(|m| m.carrier))
    }

    /// A frame the port would not take (busy) after [`Bond::transmit`]
    /// chose `member` for it: takes its bytes back out of the virtual queue.
    pub fn unsend(&mut self, member: usize, len: usize) {
        if let Some(m) = self.members.get_mut(member) {
            m.stats.frames_out = m.stats.frames_out.saturating_sub(1);
            m.stats.bytes_out = m.stats.bytes_out.saturating_sub(len as u64);
            m.busy_until = m
                .busy_until
                .saturating_duration_since(Instant::ZERO)
                .checked_sub(wire_time(len, m.rate()))
                .map_or(Instant::ZERO, Instant::from_duration);
        }
    }

    // ---- health ----------------------------------------------------------

    /// Member `member`'s port reports carrier `up` (or a send failed, which
    /// counts as no carrier until it hears again).
    pub fn set_carrier(&mut self, now: Instant, member: usize, up: bool) {
        let Some(m) = self.members.get_mut(member) else {
            return;
        };
        if m.carrier == up {
            return;
        }
        m.carrier = up;
        if up {
            // Back only once it hears something.
            m.state = MemberState::Silent;
            m.last_heard = Instant::ZERO;
        } else {
            if m.state == MemberState::Up {
                self.stats.path_losses += 1;
            }
            m.state = MemberState::NoCarrier;
            m.stats.left += 1;
        }
        self.members_changed(now);
    }

    /// A member heard something: it rejoins if it had gone silent.
    fn revive(&mut self, now: Instant, member: usize) {
        let Some(m) = self.members.get_mut(member) else {
            return;
        };
        if m.state == MemberState::Silent {
            m.state = MemberState::Up;
            self.members_changed(now);
        } else if m.state == MemberState::NoCarrier {
            // Frames arrive: the carrier is back.
            m.carrier = true;
            m.state = MemberState::Up;
            self.members_changed(now);
        }
    }

    /// Members that have heard nothing for the allowed periods leave, if
    /// another member has heard something meanwhile (if none has, there is
    /// nobody on the segment to hear from, and no evidence against any).
    fn check_health(&mut self, now: Instant) {
        let window = self.heartbeat.saturating_mul(self.missed);
        let fresh = |m: &Member| now.saturating_duration_since(m.last_heard) < window;
        let mut changed = false;
        for i in 0..self.members.len() {
            let others_heard = self
                .members
                .iter()
                .enumerate()
                .any(|(j, o)| j != i && fresh(o));
            if let Some(m) = self.members.get_mut(i)
                && m.state == MemberState::Up
                && !fresh(m)
                && others_heard
            {
                m.state = MemberState::Silent;
                m.stats.left += 1;
                changed = true;
                self.stats.path_losses += 1;
            }
        }
        if changed {
            self.members_changed(now);
        }
    }

    /// Our member set changed: announce it, and move plain peers off
    /// members that left.
    fn members_changed(&mut self, now: Instant) {
        if let Some(set) = Self::member_set(&self.members)
            && self.announcer.set_members(set, now)
        {
            self.stats.changes += 1;
        }
        let moving: Vec<Ipv4Address> = self
            .plain
            .iter()
            .filter(|(_, p)| self.members.get(p.member).is_none_or(|m| !m.up()))
            .map(|(ip, _)| *ip)
            .collect();
        for ip in moving {
            let Some(to) = self.least_loaded_member() else {
                break;
            };
            if let Some(p) = self.plain.get_mut(&ip) {
                p.member = to;
                self.stats.plain_moved += 1;
                if let Some(mac) = p.mac {
                    self.push_control(to, Control::GratuitousArp(ip, mac));
                }
            }
        }
    }

    // ---- the bond's own frames -------------------------------------------

    fn push_control(&mut self, member: usize, c: Control) {
        if self.control.len() >= MAX_CONTROL {
            self.control.pop_front();
            self.stats.control_overflow += 1;
        }
        self.control.push_back((member, c));
    }

    /// Runs the timers due at `now` (heartbeats, health, announcements,
    /// table ageing).
    fn tick(&mut self, now: Instant) {
        if self.running && now >= self.next_heartbeat {
            self.check_health(now);
            let hb = ArppRepr {
                target_ip: Ipv4Address::UNSPECIFIED,
                ..self.announcer.heartbeat(Ipv4Address::UNSPECIFIED)
            };
            for i in 0..self.members.len() {
                if self.members.get(i).is_some_and(|m| m.carrier) {
                    self.push_control(i, Control::Arpp(hb, EthernetAddress::BROADCAST));
                }
            }
            self.next_heartbeat = now + self.heartbeat;
        }
        while let Some(msg) = self.announcer.poll(now) {
            for i in 0..self.members.len() {
                if self.members.get(i).is_some_and(|m| m.carrier) {
                    self.push_control(i, Control::Arpp(msg, EthernetAddress::BROADCAST));
                }
            }
        }
        for (ip, _) in self.table.expire(now) {
            self.peers.remove(&ip);
        }
    }

    /// The next frame of the bond's own (ARP+, heartbeats, gratuitous ARP)
    /// due at `now`, written into `buf` (at least 60 bytes): returns the
    /// member to send it on and its length. Call until `None`, then again
    /// at [`poll_at`](Bond::poll_at).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(usize, usize)> {
        self.tick(now);
        loop {
            let (member, c) = self.control.pop_front()?;
            let Some(m) = self.members.get_mut(member) else {
                continue;
            };
            let src = m.cfg.mac;
            let len = match c {
                Control::Arpp(msg, dst) => {
                    let len = (ETH_LEN + msg.buffer_len()).max(MIN_FRAME);
                    let Some(b) = buf.get_mut(..len) else {
                        continue;
                    };
                    b.fill(0);
                    let eth = EthernetRepr {
                        src_addr: src,
                        dst_addr: dst,
                        ethertype: EtherType::Unknown(ETHERTYPE_ARPP),
                        vlan_tci: None,
                    };
                    eth.emit(&mut EthernetFrame::new_unchecked(&mut *b));
                    if let Some(body) = b.get_mut(ETH_LEN..) {
                        msg.emit(&mut ArppPacket::new_unchecked(body));
                    }
                    len
                }
                Control::GratuitousArp(ip, mac) => {
                    let Some(b) = buf.get_mut(..MIN_FRAME) else {
                        continue;
                    };
                    b.fill(0);
                    let eth = EthernetRepr {
                        src_addr: src,
                        dst_addr: mac,
                        ethertype: EtherType::Arp,
                        vlan_tci: None,
                    };
                    eth.emit(&mut EthernetFrame::new_unchecked(&mut *b));
                    let arp = ArpRepr {
                        operation: ArpOperation::Reply,
                        source_hardware_addr: src,
                        source_protocol_addr: self.ip,
                        target_hardware_addr: mac,
                        target_protocol_addr: ip,
                    };
                    if let Some(body) = b.get_mut(ETH_LEN..) {
                        arp.emit(&mut ArpPacket::new_unchecked(body));
                    }
                    MIN_FRAME
                }
            };
            m.stats.control_out += 1;
            return Some((member, len));
        }
    }

    /// When [`poll_transmit`](Bond::poll_transmit) next has something:
    /// `now` if frames are waiting.
    pub fn poll_at(&self, now: Instant) -> Instant {
        if !self.control.is_empty() {
            return now;
        }
        let mut t = if self.running {
            self.next_heartbeat
        } else {
            Instant::from_duration(Duration::MAX)
        };
        if let Some(a) = self.announcer.next_deadline() {
            t = t.min(a);
        }
        if let Some(e) = self.table.next_deadline() {
            t = t.min(e);
        }
        t
    }

    /// Stops bonding: queues an `ARPP_CLEAR` broadcast on each member with
    /// carrier (call [`poll_transmit`](Bond::poll_transmit) until `None` to
    /// get them) and stops the heartbeats.
    pub fn shut_down(&mut self) {
        self.running = false;
        let clear = self.announcer.stop();
        for i in 0..self.members.len() {
            if self.members.get(i).is_some_and(|m| m.carrier) {
                self.push_control(i, Control::Arpp(clear, EthernetAddress::BROADCAST));
            }
        }
    }
}

/// Time `len` bytes (one frame, or a super-segment counted as its bytes)
/// take on a link of `rate` bit/s.
fn wire_time(len: usize, rate: u64) -> Duration {
    let bits = (len as u64 + WIRE_OVERHEAD) * 8;
    Duration::from_nanos(bits.saturating_mul(1_000_000_000) / rate.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const ETHERTYPE_IPV4: u16 = 0x0800;
    const ETHERTYPE_ARP: u16 = 0x0806;

    /// A frame's outer EtherType.
    fn ethertype_of(f: &[u8]) -> u16 {
        u16::from(outer_ethertype(&EthernetFrame::new_unchecked(f)))
    }

    fn mac(host: u8, i: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, host, i])
    }

    fn ip(host: u8) -> Ipv4Address {
        Ipv4Address::new(10, 0, 0, host)
    }

    fn ms(t: u64) -> Instant {
        Instant::from_millis(t)
    }

    fn bond(host: u8, n: u8, policy: Policy) -> Bond {
        let mut cfg = BondConfig::new(
            ip(host),
            (0..n).map(|i| MemberConfig::new(mac(host, i))).collect(),
        );
        cfg.policy = policy;
        Bond::new(cfg, ms(0)).unwrap()
    }

    /// A learning switch with one port per member of each host.
    struct Lan {
        hosts: Vec<Bond>,
        /// (host, member) each MAC was last seen on.
        learnt: BTreeMap<[u8; 6], (usize, usize)>,
        /// Ports that are cut.
        cut: Vec<(usize, usize)>,
        /// Frames delivered to each host's stack.
        delivered: Vec<Vec<Vec<u8>>>,
    }

    impl Lan {
        fn new(hosts: Vec<Bond>) -> Lan {
            let n = hosts.len();
            Lan {
                hosts,
                learnt: BTreeMap::new(),
                cut: Vec::new(),
                delivered: vec![Vec::new(); n],
            }
        }

        /// Carries `frame` from (host, member) to every port the switch
        /// sends it to.
        fn carry(&mut self, now: Instant, from: (usize, usize), frame: &[u8]) {
            if self.cut.contains(&from) {
                return;
            }
            let src: [u8; 6] = frame[6..12].try_into().unwrap();
            let dst: [u8; 6] = frame[0..6].try_into().unwrap();
            self.learnt.insert(src, from);
            let ports: Vec<(usize, usize)> = match self.learnt.get(&dst) {
                Some(p) if dst[0] & 1 == 0 => vec![*p],
                _ => (0..self.hosts.len())
                    .flat_map(|h| (0..self.hosts[h].member_count()).map(move |m| (h, m)))
                    .collect(),
            };
            for p in ports {
                if p == from || self.cut.contains(&p) {
                    continue;
                }
                let mut f = frame.to_vec();
                if self.hosts[p.0].receive(now, p.1, &mut f) == Rx::Deliver {
                    self.delivered[p.0].push(f);
                }
            }
        }

        /// Lets every bond send its own frames at `now`, until quiet.
        fn settle(&mut self, now: Instant) {
            let mut buf = [0u8; 256];
            loop {
                let mut any = false;
                for h in 0..self.hosts.len() {
                    while let Some((m, len)) = self.hosts[h].poll_transmit(now, &mut buf) {
                        let f = buf[..len].to_vec();
                        self.carry(now, (h, m), &f);
                        any = true;
                    }
                }
                if !any {
                    return;
                }
            }
        }

        /// Host `h`'s stack sends `frame`.
        fn send(&mut self, now: Instant, h: usize, mut frame: Vec<u8>, prio: u8) -> Option<usize> {
            let len = frame.len();
            let m = self.hosts[h].transmit(now, &mut frame, len, prio)?;
            self.carry(now, (h, m), &frame);
            Some(m)
        }
    }

    /// An IPv4 frame from `src_ip` to `dst_ip` as a stack that knows one
    /// MAC for the peer (`dst`) would send it.
    fn ipv4(
        dst: EthernetAddress,
        src: EthernetAddress,
        src_ip: Ipv4Address,
        dst_ip: Ipv4Address,
        len: usize,
    ) -> Vec<u8> {
        let mut f = vec![0u8; len.max(34)];
        f[0..6].copy_from_slice(dst.as_bytes());
        f[6..12].copy_from_slice(src.as_bytes());
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[26..30].copy_from_slice(src_ip.as_bytes());
        f[30..34].copy_from_slice(dst_ip.as_bytes());
        f
    }

    fn arp(
        op: u16,
        dst: EthernetAddress,
        sha: EthernetAddress,
        spa: Ipv4Address,
        tpa: Ipv4Address,
    ) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(dst.as_bytes());
        f[6..12].copy_from_slice(sha.as_bytes());
        f[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, op as u8]);
        f[22..28].copy_from_slice(sha.as_bytes());
        f[28..32].copy_from_slice(spa.as_bytes());
        f[38..42].copy_from_slice(tpa.as_bytes());
        f
    }

    #[test]
    fn configurations_that_cannot_work_are_refused() {
        let m = |i| MemberConfig::new(mac(1, i));
        let cfg = |members| BondConfig::new(ip(1), members);
        assert_eq!(
            Bond::new(cfg(vec![]), ms(0)).err(),
            Some(ConfigError::MemberCount(0))
        );
        assert_eq!(
            Bond::new(cfg((0..17).map(m).collect()), ms(0)).err(),
            Some(ConfigError::MemberCount(17))
        );
        assert_eq!(
            Bond::new(cfg(vec![m(1), m(1)]), ms(0)).err(),
            Some(ConfigError::DuplicateMac(mac(1, 1)))
        );
        let mut c = cfg(vec![MemberConfig::new(EthernetAddress::BROADCAST)]);
        assert_eq!(
            Bond::new(c.clone(), ms(0)).err(),
            Some(ConfigError::NotUnicast(EthernetAddress::BROADCAST))
        );
        c = cfg(vec![m(0)]);
        c.ip = Ipv4Address::BROADCAST;
        assert_eq!(
            Bond::new(c, ms(0)).err(),
            Some(ConfigError::Address(Ipv4Address::BROADCAST))
        );
        let mut c = cfg(vec![MemberConfig {
            realtime: true,
            ..m(0)
        }]);
        c.policy = Policy::Prioritized;
        assert_eq!(Bond::new(c, ms(0)).err(), Some(ConfigError::AllRealtime));
        let mut c = cfg(vec![m(0)]);
        c.missed_heartbeats = 0;
        assert_eq!(Bond::new(c, ms(0)).err(), Some(ConfigError::Heartbeat));
        for p in Policy::ALL {
            assert_eq!(Policy::from_name(p.name()), Some(p));
        }
        assert_eq!(Policy::from_name("balance-rr"), None);
    }

    #[test]
    fn two_bonded_hosts_learn_each_other_and_stripe_over_every_pair() {
        let mut lan = Lan::new(vec![
            bond(1, 2, Policy::RoundRobin),
            bond(2, 2, Policy::RoundRobin),
        ]);
        lan.settle(ms(0));
        for (h, peer) in [(0, 2), (1, 1)] {
            let e = lan.hosts[h].table().get(ip(peer)).expect("peer learnt");
            assert_eq!(e.members().as_slice(), &[mac(peer, 0), mac(peer, 1)]);
        }
        // The stack knows the peer by one MAC (its bond MAC); the bond
        // spreads the frames over our members and theirs.
        let mut pairs = BTreeMap::new();
        for _ in 0..8 {
            let f = ipv4(mac(2, 0), mac(1, 0), ip(1), ip(2), 1000);
            let m = lan.send(ms(1), 0, f, 0).unwrap();
            let got = lan.delivered[1].pop().expect("delivered once");
            assert!(lan.delivered[1].is_empty(), "delivered twice");
            // Delivered with the interface's MAC as destination.
            assert_eq!(&got[0..6], mac(2, 0).as_bytes());
            *pairs.entry((m, got[11])).or_insert(0) += 1;
        }
        assert_eq!(pairs.len(), 2, "{pairs:?}");
        assert!(pairs.values().all(|&n| n == 4), "{pairs:?}");
        let out: Vec<u64> = lan.hosts[0]
            .members(ms(1))
            .map(|m| m.stats.frames_out)
            .collect();
        assert_eq!(out, vec![4, 4]);
    }

    #[test]
    fn least_queued_balances_bytes_not_frames() {
        let mut lan = Lan::new(vec![
            bond(1, 2, Policy::LeastQueued),
            bond(2, 2, Policy::LeastQueued),
        ]);
        lan.settle(ms(0));
        // A big frame, then small ones: they go to the other member until it
        // has as many bytes queued.
        let big = lan
            .send(ms(1), 0, ipv4(mac(2, 0), mac(1, 0), ip(1), ip(2), 9000), 0)
            .unwrap();
        let mut other = 0;
        for _ in 0..5 {
            let m = lan
                .send(ms(1), 0, ipv4(mac(2, 0), mac(1, 0), ip(1), ip(2), 1000), 0)
                .unwrap();
            if m != big {
                other += 1;
            }
        }
        assert_eq!(other, 5);
        let bytes: Vec<u64> = lan.hosts[0]
            .members(ms(1))
            .map(|m| m.stats.bytes_out)
            .collect();
        assert_eq!(bytes.iter().sum::<u64>(), 14_000);
        // The peer's members got the same split.
        let peer_in: Vec<u64> = lan.hosts[1]
            .members(ms(1))
            .map(|m| m.stats.bytes_in)
            .collect();
        assert!(peer_in.iter().all(|&b| b >= 5000), "{peer_in:?}");
    }

    #[test]
    fn echoes_flooded_copies_and_foreign_unicast_are_dropped() {
        let mut b = bond(1, 3, Policy::LeastQueued);
        // Our own broadcast flooded back to another member.
        let mut f = ipv4(
            EthernetAddress::BROADCAST,
            mac(1, 0),
            ip(1),
            Ipv4Address::BROADCAST,
            60,
        );
        assert_eq!(b.receive(ms(0), 1, &mut f), Rx::Dropped(DropReason::Echo));
        // A broadcast from a peer is taken once: on the first member.
        let bc = arp(1, EthernetAddress::BROADCAST, mac(9, 0), ip(9), ip(1));
        let took: Vec<Rx> = (0..3)
            .map(|m| b.receive(ms(0), m, &mut bc.clone()))
            .collect();
        assert_eq!(
            took,
            vec![
                Rx::Deliver,
                Rx::Dropped(DropReason::Duplicate),
                Rx::Dropped(DropReason::Duplicate)
            ]
        );
        // Unicast for member 2 flooded to all: taken on member 2 only, and
        // handed up addressed to the interface.
        let u = ipv4(mac(1, 2), mac(9, 0), ip(9), ip(1), 60);
        let mut copies: Vec<Vec<u8>> = (0..3).map(|_| u.clone()).collect();
        let took: Vec<Rx> = copies
            .iter_mut()
            .enumerate()
            .map(|(m, f)| b.receive(ms(0), m, f))
            .collect();
        assert_eq!(
            took,
            vec![
                Rx::Dropped(DropReason::NotOurs),
                Rx::Dropped(DropReason::NotOurs),
                Rx::Deliver
            ]
        );
        assert_eq!(&copies[2][0..6], mac(1, 0).as_bytes());
        // Runts.
        assert_eq!(
            b.receive(ms(0), 0, &mut [0u8; 10]),
            Rx::Dropped(DropReason::Malformed)
        );
        assert_eq!(
            b.receive(ms(0), 7, &mut f),
            Rx::Dropped(DropReason::NotOurs)
        );
    }

    #[test]
    fn plain_peers_get_one_member_each_spread_over_the_members() {
        let mut b = bond(1, 2, Policy::RoundRobin);
        let mut homes = Vec::new();
        for peer in 10..14u8 {
            // The peer asks for us; our stack answers with the bond MAC.
            let mut req = arp(1, EthernetAddress::BROADCAST, mac(peer, 0), ip(peer), ip(1));
            assert_eq!(b.receive(ms(0), 0, &mut req), Rx::Deliver);
            let mut reply = arp(2, mac(peer, 0), mac(1, 0), ip(1), ip(peer));
            let m = b.transmit(ms(0), &mut reply, 60, 0).unwrap();
            // The reply names the member it leaves from.
            assert_eq!(&reply[22..28], mac(1, m as u8).as_bytes());
            assert_eq!(&reply[6..12], mac(1, m as u8).as_bytes());
            // Every later frame to the peer leaves from the same member.
            for _ in 0..5 {
                let mut f = ipv4(mac(peer, 0), mac(1, 0), ip(1), ip(peer), 1500);
                assert_eq!(b.transmit(ms(0), &mut f, 1500, 7), Some(m));
                assert_eq!(
                    &f[0..6],
                    mac(peer, 0).as_bytes(),
                    "the stack's choice of peer MAC stands"
                );
            }
            homes.push(m);
        }
        assert_eq!(homes, vec![0, 1, 0, 1]);
        // Our stack's gratuitous ARP would point every plain peer at one MAC.
        let mut g = arp(1, EthernetAddress::BROADCAST, mac(1, 0), ip(1), ip(1));
        assert_eq!(b.transmit(ms(0), &mut g, 60, 0), None);
        assert_eq!(b.stats().gratuitous_dropped, 1);
    }

    #[test]
    fn a_silent_member_leaves_peers_follow_and_it_comes_back() {
        let mut lan = Lan::new(vec![
            bond(1, 2, Policy::RoundRobin),
            bond(2, 2, Policy::RoundRobin),
            bond(3, 1, Policy::RoundRobin),
        ]);
        // Host 3 is a plain peer of host 1 too: give it a home on member 1.
        lan.settle(ms(0));
        let mut t = 0;
        while t < 50 {
            t += 1;
            lan.settle(ms(t));
        }
        assert!(
            lan.hosts[0]
                .members(ms(t))
                .all(|m| m.state == MemberState::Up)
        );
        // Cut host 1's member 1.
        lan.cut.push((0, 1));
        let cut_at = t;
        while lan.hosts[1].table().get(ip(1)).unwrap().members().len() == 2 {
            t += 1;
            lan.settle(ms(t));
            assert!(t < cut_at + 60, "the cut was not noticed");
        }
        // Noticed within 3 heartbeats and one more period; the peer stops
        // sending to the member that left.
        assert!(t - cut_at <= 40, "took {} ms", t - cut_at);
        assert_eq!(
            lan.hosts[0]
                .members(ms(t))
                .map(|m| m.state)
                .collect::<Vec<_>>(),
            vec![MemberState::Up, MemberState::Silent]
        );
        // A path each of them sent on went away: the stacks above probe.
        assert_eq!(lan.hosts[0].stats().path_losses, 1);
        assert_eq!(lan.hosts[1].stats().path_losses, 1);
        assert_eq!(
            lan.hosts[2].stats().path_losses,
            1,
            "host 3 sends to it too"
        );
        for _ in 0..6 {
            let m = lan.send(ms(t), 1, ipv4(mac(1, 0), mac(2, 0), ip(2), ip(1), 500), 0);
            assert!(m.is_some());
            assert_eq!(
                lan.delivered[0].pop().map(|f| f.len()),
                Some(500),
                "nothing lost"
            );
            // And host 1 sends only on member 0.
            assert_eq!(
                lan.send(ms(t), 0, ipv4(mac(2, 0), mac(1, 0), ip(1), ip(2), 500), 0),
                Some(0)
            );
            assert!(lan.delivered[1].pop().is_some());
        }
        // Back: heard again, rejoins, peers use it again.
        lan.cut.clear();
        let back_at = t;
        while lan.hosts[1].table().get(ip(1)).unwrap().members().len() == 1 {
            t += 1;
            lan.settle(ms(t));
            assert!(t < back_at + 30, "the return was not noticed");
        }
        assert!(
            lan.hosts[0]
                .members(ms(t))
                .all(|m| m.state == MemberState::Up)
        );
        assert!(lan.hosts[0].members(ms(t)).nth(1).unwrap().stats.left == 1);
        // A member coming back loses no path.
        assert_eq!(lan.hosts[0].stats().path_losses, 1);
        assert_eq!(lan.hosts[1].stats().path_losses, 1);
    }

    #[test]
    fn our_arp_requests_do_not_repoint_other_plain_peers() {
        // A broadcast ARP request from us names (our IP, a member's MAC) to
        // every host on the segment, and hosts update an entry they have
        // for us from any ARP frame (Linux does, so does softoe's stack).
        let mut b = bond(1, 2, Policy::LeastQueued);
        let mut buf = [0u8; 128];
        for peer in [10u8, 11] {
            let mut req = arp(1, EthernetAddress::BROADCAST, mac(peer, 0), ip(peer), ip(1));
            assert_eq!(b.receive(ms(0), 0, &mut req), Rx::Deliver);
        }
        assert_eq!(
            b.plain_peers().collect::<Vec<_>>(),
            vec![(ip(10), 0), (ip(11), 1)]
        );
        while b.poll_transmit(ms(0), &mut buf).is_some() {}
        // Our stack asks for 11 again (its entry expired): we know 11's MAC,
        // so only 11 hears the question, from its member.
        let mut again = arp(1, EthernetAddress::BROADCAST, mac(1, 0), ip(1), ip(11));
        assert_eq!(b.transmit(ms(1), &mut again, 60, 0), Some(1));
        assert_eq!(&again[0..6], mac(11, 0).as_bytes(), "unicast to 11");
        assert_eq!(&again[22..28], mac(1, 1).as_bytes());
        assert!(b.poll_transmit(ms(1), &mut buf).is_none());
        // Unanswered, it asks again: 11 may have a new MAC, so broadcast.
        let mut third = arp(1, EthernetAddress::BROADCAST, mac(1, 0), ip(1), ip(11));
        assert_eq!(b.transmit(ms(2), &mut third, 60, 0), Some(1));
        assert_eq!(&third[0..6], EthernetAddress::BROADCAST.as_bytes());
        // ... which tells 10 that we are at member 1's MAC: 10 is told
        // again where we are for it.
        let (m, len) = b.poll_transmit(ms(2), &mut buf).expect("10 is told");
        assert_eq!(m, 0);
        assert_eq!(&buf[0..6], mac(10, 0).as_bytes());
        assert_eq!(&buf[22..28], mac(1, 0).as_bytes());
        assert_eq!(&buf[28..32], ip(1).as_bytes());
        assert!(b.poll_transmit(ms(2), &mut buf).is_none(), "{len}");
        // 11 answers: a later question is unicast again.
        let mut reply = arp(2, mac(1, 1), mac(11, 0), ip(11), ip(1));
        assert_eq!(b.receive(ms(3), 1, &mut reply), Rx::Deliver);
        let mut fourth = arp(1, EthernetAddress::BROADCAST, mac(1, 0), ip(1), ip(11));
        assert_eq!(b.transmit(ms(4), &mut fourth, 60, 0), Some(1));
        assert_eq!(&fourth[0..6], mac(11, 0).as_bytes());
        // A host we have never heard from: broadcast, and the plain peer
        // homed on another member than the one asking is told again.
        let mut new = arp(1, EthernetAddress::BROADCAST, mac(1, 0), ip(1), ip(12));
        let home = b.transmit(ms(5), &mut new, 60, 0).unwrap();
        assert_eq!(&new[0..6], EthernetAddress::BROADCAST.as_bytes());
        let mut told = Vec::new();
        while let Some((m, _)) = b.poll_transmit(ms(5), &mut buf) {
            told.push((m, buf[4]));
        }
        let other = 1 - home;
        assert_eq!(told, vec![(other, 10 + other as u8)]);
    }

    #[test]
    fn our_arp_requests_for_a_bonding_peer_go_to_it_alone() {
        let mut lan = Lan::new(vec![
            bond(1, 2, Policy::LeastQueued),
            bond(2, 2, Policy::LeastQueued),
        ]);
        lan.settle(ms(0));
        let mut req = arp(1, EthernetAddress::BROADCAST, mac(1, 0), ip(1), ip(2));
        assert!(lan.hosts[0].transmit(ms(1), &mut req, 60, 0).is_some());
        assert_eq!(&req[0..6], mac(2, 0).as_bytes());
    }

    #[test]
    fn frames_are_read_through_the_wire_views() {
        let mut b = bond(1, 2, Policy::LeastQueued);
        let req = arp(1, EthernetAddress::BROADCAST, mac(10, 0), ip(10), ip(1));
        // Shorter than an Ethernet header: malformed.
        let mut runt = req[..13].to_vec();
        assert_eq!(
            b.receive(ms(0), 0, &mut runt),
            Rx::Dropped(DropReason::Malformed)
        );
        // Behind an 802.1Q tag the bond does not look: delivered, but it
        // teaches no plain peer.
        let mut tagged = req[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&req[12..]);
        assert_eq!(b.receive(ms(0), 0, &mut tagged), Rx::Deliver);
        assert_eq!(b.plain_peers().count(), 0);
        let mut req = req;
        assert_eq!(b.receive(ms(0), 0, &mut req), Rx::Deliver);
        assert_eq!(b.plain_peers().collect::<Vec<_>>(), vec![(ip(10), 0)]);
    }

    #[test]
    fn a_plain_peer_on_a_member_that_leaves_is_moved_and_told() {
        let mut b = bond(1, 2, Policy::LeastQueued);
        let mut buf = [0u8; 128];
        // Two plain peers, one per member (their ARP requests teach us their MACs).
        for peer in [10u8, 11] {
            let mut req = arp(1, EthernetAddress::BROADCAST, mac(peer, 0), ip(peer), ip(1));
            assert_eq!(b.receive(ms(0), 0, &mut req), Rx::Deliver);
        }
        let homes: BTreeMap<Ipv4Address, usize> = b.plain_peers().collect();
        assert_eq!(homes.values().copied().collect::<Vec<_>>(), vec![0, 1]);
        while b.poll_transmit(ms(0), &mut buf).is_some() {}
        // Member 1's port loses its carrier.
        b.set_carrier(ms(1), 1, false);
        assert!(b.plain_peers().all(|(_, m)| m == 0));
        let mut grat = None;
        let mut change = false;
        while let Some((m, len)) = b.poll_transmit(ms(1), &mut buf) {
            let f = &buf[..len];
            match ethertype_of(f) {
                ETHERTYPE_ARP => grat = Some((m, f.to_vec())),
                ETHERTYPE_ARPP => {
                    let r = ArppRepr::parse(&ArppPacket::new_checked(&f[14..]).unwrap()).unwrap();
                    assert_ne!(m, 1, "nothing is sent on a member without carrier");
                    change |=
                        r.packet_type == ArppType::Change && r.members.as_slice() == [mac(1, 0)];
                }
                t => panic!("unexpected EtherType {t:#x}"),
            }
        }
        assert!(change, "the peers are told");
        let (m, g) = grat.expect("the moved peer is told");
        assert_eq!(m, 0);
        assert_eq!(&g[0..6], mac(11, 0).as_bytes());
        assert_eq!(&g[22..28], mac(1, 0).as_bytes());
        assert_eq!(&g[28..32], ip(1).as_bytes());
        assert_eq!(&g[38..42], ip(11).as_bytes());
        assert_eq!(b.stats().plain_moved, 1);
        // It does not move back when the member returns (no flapping).
        let mut hb = ipv4(mac(1, 1), mac(9, 9), ip(9), ip(1), 60);
        b.set_carrier(ms(2), 1, true);
        assert_eq!(b.receive(ms(2), 1, &mut hb), Rx::Deliver);
        assert_eq!(b.members(ms(2)).nth(1).unwrap().state, MemberState::Up);
        assert!(b.plain_peers().all(|(_, m)| m == 0));
    }

    #[test]
    fn a_plain_peer_moves_to_a_real_time_member_when_no_other_is_left() {
        // Prioritized, member 1 real-time: plain peers live on member 0.
        let mut cfg = BondConfig::new(
            ip(1),
            (0..2)
                .map(|i| MemberConfig {
                    realtime: i == 1,
                    ..MemberConfig::new(mac(1, i))
                })
                .collect(),
        );
        cfg.policy = Policy::Prioritized;
        let mut b = Bond::new(cfg, ms(0)).unwrap();
        let mut req = arp(1, EthernetAddress::BROADCAST, mac(10, 0), ip(10), ip(1));
        assert_eq!(b.receive(ms(0), 0, &mut req), Rx::Deliver);
        assert_eq!(b.plain_peers().collect::<Vec<_>>(), vec![(ip(10), 0)]);
        let mut buf = [0u8; 128];
        while b.poll_transmit(ms(0), &mut buf).is_some() {}
        // Member 0 dies: the real-time member is all that is left, and a
        // peer left on a dead member is cut off for good.
        b.set_carrier(ms(1), 0, false);
        assert_eq!(b.plain_peers().collect::<Vec<_>>(), vec![(ip(10), 1)]);
        assert_eq!(b.stats().plain_moved, 1);
        let mut told = false;
        while let Some((m, len)) = b.poll_transmit(ms(1), &mut buf) {
            told |= m == 1 && ethertype_of(&buf[..len]) == ETHERTYPE_ARP;
        }
        assert!(told, "the peer is told its new MAC");
        let mut f = ipv4(mac(10, 0), mac(1, 0), ip(1), ip(10), 1000);
        assert_eq!(b.transmit(ms(1), &mut f, 1000, 0), Some(1));
    }

    #[test]
    fn prioritized_traffic_has_its_own_members_at_both_ends() {
        let rt = |host: u8| {
            let mut cfg = BondConfig::new(
                ip(host),
                (0..3)
                    .map(|i| MemberConfig {
                        realtime: i == 2,
                        ..MemberConfig::new(mac(host, i))
                    })
                    .collect(),
            );
            cfg.policy = Policy::Prioritized;
            Bond::new(cfg, ms(0)).unwrap()
        };
        let mut lan = Lan::new(vec![rt(1), rt(2)]);
        lan.settle(ms(0));
        assert!(
            lan.hosts[0]
                .table()
                .get(ip(2))
                .unwrap()
                .members()
                .is_realtime(2)
        );
        for i in 0..30 {
            let prio = if i % 3 == 0 { 6 } else { 0 };
            let m = lan
                .send(
                    ms(1),
                    0,
                    ipv4(mac(2, 0), mac(1, 0), ip(1), ip(2), 1400),
                    prio,
                )
                .unwrap();
            let got = lan.delivered[1].pop().unwrap();
            if prio >= 6 {
                assert_eq!((m, got[11]), (2, 2), "real-time: our member 2 to theirs");
            } else {
                assert!(m < 2 && got[11] < 2, "bulk stays off the real-time members");
            }
        }
    }

    #[test]
    fn a_peer_member_that_returns_does_not_erase_the_others_backlog() {
        // While B's member 1 is out, A queues everything towards B's member
        // 0. When member 1 returns, B's member 0 still has that backlog on
        // its link: new frames must go to member 1 until the queues level,
        // or they overtake the queued ones (reordering, spurious
        // retransmissions).
        let mut lan = Lan::new(vec![
            bond(1, 2, Policy::LeastQueued),
            bond(2, 2, Policy::LeastQueued),
        ]);
        lan.settle(ms(0));
        let frame = || ipv4(mac(2, 0), mac(1, 0), ip(1), ip(2), 1500);
        // The peer member A addresses the frame to.
        let peer_member = |lan: &mut Lan, t| {
            let mut f = frame();
            let m = lan.hosts[0].transmit(ms(t), &mut f, 1500, 0).unwrap();
            lan.carry(ms(t), (0, m), &f);
            assert!(lan.delivered[1].pop().is_some());
            f[5]
        };
        let mut buf = [0u8; 256];
        lan.cut.push((1, 1));
        lan.hosts[1].set_carrier(ms(1), 1, false);
        while let Some((m, len)) = lan.hosts[1].poll_transmit(ms(1), &mut buf) {
            let f = buf[..len].to_vec();
            lan.carry(ms(1), (1, m), &f);
        }
        assert_eq!(lan.hosts[0].table().get(ip(2)).unwrap().members().len(), 1);
        // 20 frames to member 0, in one instant: none has drained.
        for _ in 0..20 {
            assert_eq!(peer_member(&mut lan, 1), 0);
        }
        // Member 1 is back (in the same instant: nothing has drained).
        lan.cut.clear();
        lan.hosts[1].set_carrier(ms(1), 1, true);
        let mut hb = ipv4(mac(2, 1), mac(9, 9), ip(9), ip(2), 60);
        assert_eq!(lan.hosts[1].receive(ms(1), 1, &mut hb), Rx::Deliver);
        lan.settle(ms(1));
        assert_eq!(lan.hosts[0].table().get(ip(2)).unwrap().members().len(), 2);
        let next: Vec<u8> = (0..10).map(|_| peer_member(&mut lan, 1)).collect();
        assert_eq!(next, vec![1; 10], "member 0 still has 20 frames queued");
    }

    #[test]
    fn a_heartbeat_teaches_a_peer_that_missed_the_broadcast() {
        let mut a = bond(1, 2, Policy::LeastQueued);
        let mut b = bond(2, 1, Policy::LeastQueued);
        let mut buf = [0u8; 128];
        // A's first broadcasts are lost.
        while a.poll_transmit(ms(0), &mut buf).is_some() {}
        while b.poll_transmit(ms(0), &mut buf).is_some() {}
        // Its next heartbeat arrives.
        let (_, len) = a.poll_transmit(ms(10), &mut buf).unwrap();
        let mut f = buf[..len].to_vec();
        assert_eq!(b.receive(ms(10), 0, &mut f), Rx::Consumed);
        assert_eq!(b.table().get(ip(1)).unwrap().members().len(), 2);
        // A CLEAR withdraws it.
        a.shut_down();
        while let Some((_, len)) = a.poll_transmit(ms(11), &mut buf) {
            let mut f = buf[..len].to_vec();
            assert_eq!(b.receive(ms(11), 0, &mut f), Rx::Consumed);
        }
        assert!(b.table().get(ip(1)).is_none());
        // And A sends no more heartbeats.
        while a.poll_transmit(ms(11), &mut buf).is_some() {}
        assert!(a.poll_transmit(ms(100), &mut buf).is_none());
    }
}
