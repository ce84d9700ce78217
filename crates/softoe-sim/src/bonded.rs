//! Bonded hosts: one softoe stack behind several NICs, one IPv4 address.
//!
//! BondingPlus (`softoe-bond`) puts a host's NICs behind one address on an
//! ordinary switch and stripes traffic over them. Whether striping really
//! fills every link, what reordering it causes, and whether a connection
//! survives a member's link dying are questions of timing, so they are asked
//! here, in virtual time, where every run replays.
//!
//! A [`BondedNode`] is a node with N NICs ([`World::add_node_with_nics`]),
//! each plugged into the switch by its own link. Inside it sit a
//! [`StackNode`] — the stack and its applications, which see one interface
//! whose MAC is member 0's — and a [`Bond`], the very code the engine's
//! bonded port runs: it picks the NIC for every frame the stack sends
//! ([`Bond::transmit`]), decides which received frames the stack sees
//! ([`Bond::receive`]), and sends its own (ARP+, heartbeats, gratuitous
//! ARP: [`Bond::poll_transmit`]). The node is only the glue; no bonding
//! decision is made here. That keeps the simulator honest: what it proves
//! about striping and failover is proved about `softoe-bond` itself.
//!
//! The wrapper sits where the engine's port sits: above the NICs (each
//! member's NIC still cuts TSO super-segments and coalesces what it
//! receives), below the stack. How large the stack's super-segments are
//! is the stack's configuration ([`DeviceCaps::tso_max`]); a bond stripes
//! whole super-segments, so large ones make striping lumpy.
//!
//! A bonded node is never idle — every member sends a heartbeat every
//! 10 ms — so drive a world that has one with [`World::run_while`] or
//! [`World::run_until`], not [`World::run_until_idle`] (which would run to
//! its limit).
//!
//! [`World::add_node_with_nics`]: crate::World::add_node_with_nics
//! [`World::run_while`]: crate::World::run_while
//! [`World::run_until`]: crate::World::run_until
//! [`World::run_until_idle`]: crate::World::run_until_idle
//! [`DeviceCaps::tso_max`]: softoe_stack::DeviceCaps::tso_max

use core::time::Duration;

use softoe_bond::{Bond, BondConfig, Rx};
use softoe_stack::Instant;
use softoe_wire::EthernetAddress;

use crate::node::StackNode;
use crate::world::{Node, RxInfo, SimFrame};

/// The largest frame of the bond's own (ARP+ with every member, at most
/// 16): far below this.
const CONTROL_BUF: usize = 1514;

/// The bond's time for the world's.
pub fn bond_time(t: Instant) -> softoe_bond::Instant {
    softoe_bond::Instant::from_duration(Duration::from_nanos(t.total_nanos()))
}

/// The world's time for the bond's (saturating at [`Instant::MAX`]).
pub fn world_time(t: softoe_bond::Instant) -> Instant {
    Instant::from_nanos(u64::try_from(t.since_epoch().as_nanos()).unwrap_or(u64::MAX))
}

/// Why a [`BondedNode`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BondedError {
    /// The bond's configuration is unusable.
    #[error("bond configuration: {0}")]
    Bond(softoe_bond::ConfigError),
    /// The stack's MAC is not member 0's: frames handed up (addressed to
    /// member 0's MAC) would not be the stack's.
    #[error("the stack's MAC {stack} is not member 0's ({bond})")]
    Mac {
        /// The stack's.
        stack: EthernetAddress,
        /// Member 0's.
        bond: EthernetAddress,
    },
}

/// What the glue did with frames (the bond's own counters are in
/// [`Bond::stats`] and [`Bond::members`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BondedStats {
    /// Frames of the stack's the bond dropped (its gratuitous ARP).
    pub tx_dropped: u64,
    /// Received frames handed to the stack.
    pub rx_delivered: u64,
    /// Received ARP+ frames the bond took.
    pub rx_consumed: u64,
    /// Received frames the bond dropped (echoes, duplicate broadcasts,
    /// unicast for another member).
    pub rx_dropped: u64,
    /// Frames of the bond's own sent.
    pub control: u64,
}

/// A stack with applications behind a [`Bond`] of N NICs; see the module
/// docs. Add it with [`World::add_node_with_nics`](crate::World::add_node_with_nics)
/// and [`nic_count`](BondedNode::nic_count) NICs, then connect each NIC
/// (member 0 first).
pub struct BondedNode {
    /// The stack and its applications: they see one interface.
    pub host: StackNode,
    bond: Bond,
    /// The stack's frames, before the bond picks their NIC.
    pending: Vec<SimFrame>,
    /// A received frame, for the bond to rewrite.
    rx: Vec<u8>,
    control: Vec<u8>,
    stats: BondedStats,
    /// The bond's path losses the stack has been told of.
    path_losses: u64,
}

impl core::fmt::Debug for BondedNode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BondedNode")
            .field("host", &self.host)
            .field("members", &self.bond.member_count())
            .field("policy", &self.bond.policy())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl BondedNode {
    /// `host` behind a bond of `cfg.members`, started at `now`. The stack's
    /// MAC must be member 0's.
    pub fn new(host: StackNode, cfg: BondConfig, now: Instant) -> Result<BondedNode, BondedError> {
        let stack = host.stack.config().mac;
        if let Some(m) = cfg.members.first()
            && m.mac != stack
        {
            return Err(BondedError::Mac { stack, bond: m.mac });
        }
        let bond = Bond::new(cfg, bond_time(now)).map_err(BondedError::Bond)?;
        Ok(BondedNode {
            host,
            bond,
            pending: Vec::new(),
            rx: Vec::new(),
            control: vec![0; CONTROL_BUF],
            stats: BondedStats::default(),
            path_losses: 0,
        })
    }

    /// How many NICs (members) it has.
    pub fn nic_count(&self) -> usize {
        self.bond.member_count()
    }

    /// The bond: its table, members and counters.
    pub fn bond(&self) -> &Bond {
        &self.bond
    }

    /// The bond, to change (what it queues goes out at the node's next
    /// poll; within [`World::with_node`](crate::World::with_node) that is at once).
    pub fn bond_mut(&mut self) -> &mut Bond {
        &mut self.bond
    }

    /// Member `member`'s NIC reports its carrier `up` or down (a cable
    /// pulled at the NIC). A link cut elsewhere is noticed by the bond's
    /// heartbeats instead.
    pub fn set_carrier(&mut self, now: Instant, member: usize, up: bool) {
        self.bond.set_carrier(bond_time(now), member, up);
    }

    /// The glue's counters.
    pub fn stats(&self) -> &BondedStats {
        &self.stats
    }

    /// Hands the stack's frames to the bond, which picks each one's NIC,
    /// then adds the bond's own frames.
    fn route(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        let t = bond_time(now);
        for mut f in self.pending.drain(..) {
            let len = f.bytes.len();
            match self.bond.transmit(t, &mut f.bytes, len, f.priority) {
                Some(member) => {
                    f.port = member;
                    out.push(f);
                }
                None => self.stats.tx_dropped += 1,
            }
        }
        while let Some((member, len)) = self.bond.poll_transmit(t, &mut self.control) {
            self.stats.control += 1;
            out.push(SimFrame {
                bytes: self.control.get(..len).unwrap_or(&[]).to_vec(),
                port: member,
                ..SimFrame::default()
            });
        }
        // A path the stack's frames took went away: its connections probe
        // at once (at the node's next poll, due now), as the engine's do.
        let losses = self.bond.stats().path_losses;
        if losses != self.path_losses {
            self.path_losses = losses;
            self.host.stack.path_changed();
        }
    }
}

impl Node for BondedNode {
    fn receive(&mut self, now: Instant, frame: &[u8], info: RxInfo, out: &mut Vec<SimFrame>) {
        self.rx.clear();
        self.rx.extend_from_slice(frame);
        match self.bond.receive(bond_time(now), info.port, &mut self.rx) {
            Rx::Deliver => {
                self.stats.rx_delivered += 1;
                let up = RxInfo { port: 0, ..info };
                self.host.receive(now, &self.rx, up, &mut self.pending);
            }
            Rx::Consumed => self.stats.rx_consumed += 1,
            Rx::Dropped(_) => self.stats.rx_dropped += 1,
        }
        self.route(now, out);
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        // The deadline may be the bond's: a spurious poll of the stack is
        // harmless.
        self.host.poll(now, &mut self.pending);
        self.route(now, out);
    }

    fn poll_at(&self) -> Option<Instant> {
        // The bond answers "the epoch" when frames wait: the world reads
        // any past deadline as now.
        let bond = world_time(self.bond.poll_at(softoe_bond::Instant::ZERO));
        Some(self.host.poll_at().map_or(bond, |h| h.min(bond)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::node::Pattern;
    use softoe_bond::MemberConfig;
    use softoe_stack::{Stack, StackConfig};
    use softoe_wire::{Ipv4Address, Ipv4Cidr};

    #[test]
    fn the_stack_must_wear_member_0s_mac() {
        let ip = Ipv4Address::new(10, 0, 0, 1);
        let mac = |i| EthernetAddress([2, 0, 0, 0, 1, i]);
        let stack = || {
            let cfg = StackConfig::new(mac(0), Ipv4Cidr::new(ip, 24).unwrap());
            StackNode::new(Stack::new(cfg).unwrap(), Pattern::new(1))
        };
        let members = |first| vec![MemberConfig::new(mac(first)), MemberConfig::new(mac(9))];
        let err = BondedNode::new(stack(), BondConfig::new(ip, members(1)), Instant::ZERO);
        assert!(matches!(err, Err(BondedError::Mac { .. })));
        let node =
            BondedNode::new(stack(), BondConfig::new(ip, members(0)), Instant::ZERO).unwrap();
        assert_eq!(node.nic_count(), 2);
        // Its first heartbeats are due at once.
        assert_eq!(node.poll_at(), Some(Instant::ZERO));
        let t = Instant::from_nanos(1_234_567_890);
        assert_eq!(world_time(bond_time(t)), t);
    }
}
