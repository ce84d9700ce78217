//! Ready-made LANs: hosts on one learning switch — bonded ones with several
//! NICs behind one address, plain ones with one — connections between them,
//! and member links that fail (and come back) on cue.
//!
//! This is the world BondingPlus was built for: an ordinary switch, no link
//! aggregation. Each NIC of a host has its own link to the switch, so the
//! switch learns every member MAC on its own port. [`LanSpec::build`] makes
//! the world; [`Lan::run`] drives it until every application is done,
//! cutting links as the [`Fault`]s say and measuring the longest pause in
//! each connection's delivery (the failover gap).

use core::time::Duration;

use softoe_bond::{BondConfig, BondStats, MemberConfig, MemberStatus, Policy};
use softoe_stack::{DeviceCaps, Instant, Stack, StackConfig};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

use crate::bonded::{BondedNode, bond_time};
use crate::link::LinkConfig;
use crate::node::{Pattern, StackNode};
use crate::scenario::{BuildError, Side};
use crate::workload::{Client, ConnSpec, EndResult, Server};
use crate::world::{LinkId, NodeId, SwitchId, World, WorldStats};

/// Host `host`'s NIC `member`'s MAC (member 0's is its stack's).
pub fn host_mac(host: usize, member: usize) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, (host + 1) as u8, member as u8])
}

/// Host `host`'s IPv4 address (10.0.0.`host + 1`, in a /24).
pub fn host_ip(host: usize) -> Ipv4Address {
    Ipv4Address::new(10, 0, 0, (host + 1) as u8)
}

/// How a host bonds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BondSpec {
    /// How frames are spread.
    pub policy: Policy,
    /// Members dedicated to real-time traffic (bit `i`: member `i`), for
    /// [`Policy::Prioritized`].
    pub realtime: u16,
}

/// One host.
#[derive(Clone, Debug)]
pub struct HostSpec {
    /// One link per NIC, host to switch (the same both ways).
    pub links: Vec<LinkConfig>,
    /// Its bond; `None`: a plain host (one NIC, plain ARP).
    pub bond: Option<BondSpec>,
    /// Its TCP settings, NIC and ARP cache.
    pub side: Side,
    /// The largest TSO super-segment (IPv4 packet bytes) its stack builds
    /// when the NIC does TSO; `None`: 65,535. A bond sends each
    /// super-segment whole on one member, so smaller ones stripe finer.
    pub tso_max: Option<usize>,
}

impl HostSpec {
    /// A plain host on one link.
    pub fn plain(link: LinkConfig, side: Side) -> HostSpec {
        HostSpec {
            links: vec![link],
            bond: None,
            side,
            tso_max: None,
        }
    }

    /// A bonded host with one NIC per link.
    pub fn bonded(links: Vec<LinkConfig>, policy: Policy, side: Side) -> HostSpec {
        HostSpec {
            links,
            bond: Some(BondSpec {
                policy,
                realtime: 0,
            }),
            side,
            tso_max: None,
        }
    }
}

/// A connection between two hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LanConn {
    /// The client's host.
    pub client: usize,
    /// The server's host.
    pub server: usize,
    /// What it carries (ids and ports unique per server host).
    pub spec: ConnSpec,
    /// The client socket's `SO_PRIORITY` (the server's sockets take their
    /// host's [`TcpConfig::priority`](softoe_stack::TcpConfig::priority)).
    pub priority: u8,
}

/// When a [`Fault`] strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// At the first event at or after this time.
    At(Instant),
    /// Once connection `conn` (an index into [`LanSpec::conns`]) has
    /// delivered this many bytes, both directions together.
    Progress {
        /// Which connection.
        conn: usize,
        /// Bytes delivered.
        bytes: u64,
    },
}

/// A member's link cut, and maybe restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Whose.
    pub host: usize,
    /// Which NIC.
    pub member: usize,
    /// When.
    pub at: Trigger,
    /// Restored this long after the cut (`None`: for good).
    pub restore_after: Option<Duration>,
    /// The NIC sees it (carrier down, and up when restored); otherwise
    /// only the bond's heartbeats can tell.
    pub carrier: bool,
}

/// A LAN to build.
#[derive(Clone, Debug)]
pub struct LanSpec {
    /// Seed for everything random (links, stacks, the payload pattern).
    pub seed: u64,
    /// The hosts, all on one switch.
    pub hosts: Vec<HostSpec>,
    /// The connections.
    pub conns: Vec<LanConn>,
    /// The link failures.
    pub faults: Vec<Fault>,
}

/// A built LAN.
pub struct Lan {
    /// The world.
    pub world: World,
    /// The switch.
    pub switch: SwitchId,
    /// Each host's node.
    pub hosts: Vec<NodeId>,
    /// Each host's links, by NIC.
    pub links: Vec<Vec<LinkId>>,
    spec: LanSpec,
    /// Per connection, the client's app index on its host.
    client_app: Vec<usize>,
    /// Per host, the index of its [`Server`] app, if it serves.
    server_app: Vec<Option<usize>>,
}

impl core::fmt::Debug for Lan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Lan")
            .field("world", &self.world)
            .field("hosts", &self.hosts)
            .field("links", &self.links)
            .finish_non_exhaustive()
    }
}

fn stack_for(seed: u64, h: usize, spec: &HostSpec) -> Result<Stack, BuildError> {
    let ip = host_ip(h);
    let cidr = Ipv4Cidr::new(ip, 24).ok_or(BuildError::Invalid("host address"))?;
    let mut cfg = StackConfig::new(host_mac(h, 0), cidr);
    let n = h as u64 + 1;
    cfg.seed = seed.wrapping_mul(31).wrapping_add(n);
    cfg.secret = [n as u8; 16];
    cfg.secret[0] = seed as u8;
    let nic = spec.side.nic;
    cfg.caps = DeviceCaps {
        mtu: nic.mtu,
        tso_max: nic.tso.then_some(spec.tso_max.unwrap_or(65_535)),
        tx_csum: nic.tx_csum,
    };
    cfg.tcp = spec.side.tcp;
    cfg.arp = spec.side.arp;
    Stack::new(cfg).map_err(BuildError::Stack)
}

impl LanSpec {
    /// Builds the world: the switch, then each host with its links in
    /// order (so link ids, and the faults each link draws, follow the spec).
    pub fn build(&self) -> Result<Lan, BuildError> {
        if self.hosts.len() > 250 {
            return Err(BuildError::Invalid("at most 250 hosts"));
        }
        let pattern = Pattern::new(self.seed);
        let mut world = World::new(self.seed);
        let switch = world.add_switch();
        let mut hosts = Vec::new();
        let mut links = Vec::new();
        let mut client_app = vec![0; self.conns.len()];
        let mut server_app = Vec::new();
        for (h, spec) in self.hosts.iter().enumerate() {
            let mut node = StackNode::new(stack_for(self.seed, h, spec)?, pattern.clone());
            let served: Vec<ConnSpec> = self
                .conns
                .iter()
                .filter(|c| c.server == h)
                .map(|c| c.spec)
                .collect();
            if served.is_empty() {
                server_app.push(None);
            } else {
                server_app.push(Some(node.apps.len()));
                node.apps.push(Box::new(Server::new(served, spec.side.tcp)));
            }
            for (i, c) in self.conns.iter().enumerate() {
                if c.client != h {
                    continue;
                }
                if c.server >= self.hosts.len() || c.server == h {
                    return Err(BuildError::Invalid(
                        "a connection's server is no other host",
                    ));
                }
                let mut tcp = spec.side.tcp;
                tcp.priority = c.priority;
                if let Some(slot) = client_app.get_mut(i) {
                    *slot = node.apps.len();
                }
                node.apps
                    .push(Box::new(Client::new(c.spec, host_ip(c.server), tcp)));
            }
            let id = match spec.bond {
                Some(b) => {
                    let members = spec
                        .links
                        .iter()
                        .enumerate()
                        .map(|(i, l)| MemberConfig {
                            mac: host_mac(h, i),
                            rate_bps: l.rate_bps.unwrap_or(0),
                            realtime: u32::try_from(i)
                                .ok()
                                .and_then(|i| 1u16.checked_shl(i))
                                .is_some_and(|bit| b.realtime & bit != 0),
                        })
                        .collect();
                    let mut cfg = BondConfig::new(host_ip(h), members);
                    cfg.policy = b.policy;
                    let node = BondedNode::new(node, cfg, world.now())?;
                    let n = node.nic_count();
                    world.add_node_with_nics(Box::new(node), spec.side.nic, n)
                }
                None if spec.links.len() == 1 => world.add_node(Box::new(node), spec.side.nic),
                None => return Err(BuildError::Invalid("a plain host has one link")),
            };
            let mut mine = Vec::new();
            for l in &spec.links {
                mine.push(world.connect_to_switch(id, switch, *l)?);
            }
            hosts.push(id);
            links.push(mine);
        }
        if self.conns.iter().any(|c| c.client >= self.hosts.len()) {
            return Err(BuildError::Invalid("a connection's client is no host"));
        }
        Ok(Lan {
            world,
            switch,
            hosts,
            links,
            spec: self.clone(),
            client_app,
            server_app,
        })
    }
}

/// The longest pauses in one direction of a connection's delivery: time
/// between one arrival of new bytes at the application and the next, from
/// the first byte to the last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gaps {
    /// The longest pause.
    pub max: Duration,
    /// The longest pause that ended after the first fault struck: the
    /// failover gap.
    pub max_after_fault: Duration,
    /// When that pause ended.
    pub max_after_fault_end: Option<Instant>,
    last: Option<(Instant, u64)>,
}

impl Gaps {
    fn sample(&mut self, now: Instant, delivered: u64, fault: Option<Instant>) {
        match self.last {
            Some((t, d)) if delivered > d => {
                let gap = now.saturating_duration_since(t);
                self.max = self.max.max(gap);
                if fault.is_some_and(|f| now > f) && gap > self.max_after_fault {
                    self.max_after_fault = gap;
                    self.max_after_fault_end = Some(now);
                }
                self.last = Some((now, delivered));
            }
            None if delivered > 0 => self.last = Some((now, delivered)),
            _ => {}
        }
    }
}

/// One connection after a run.
#[derive(Clone, Copy, Debug)]
pub struct LanConnOutcome {
    /// What it was.
    pub conn: LanConn,
    /// The client's end.
    pub client: EndResult,
    /// The server's end (`None`: never accepted).
    pub server: Option<EndResult>,
    /// Delivery pauses: client to server, server to client.
    pub gaps: [Gaps; 2],
}

/// A bonded host's bond after a run.
#[derive(Clone, Debug)]
pub struct BondReport {
    /// Its counters.
    pub stats: BondStats,
    /// Its members.
    pub members: Vec<MemberStatus>,
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct LanOutcome {
    /// Per connection.
    pub conns: Vec<LanConnOutcome>,
    /// Whether every application finished before the limit.
    pub finished: bool,
    /// When the last one did.
    pub finished_at: Instant,
    /// Sockets left on each host after the settle time (unused listeners
    /// excluded).
    pub sockets_left: Vec<usize>,
    /// Per fault: when its link was cut and restored.
    pub faults: Vec<(Option<Instant>, Option<Instant>)>,
    /// Per host: its bond (`None`: a plain host).
    pub bonds: Vec<Option<BondReport>>,
    /// The world's trace hash.
    pub trace: u64,
    /// World totals.
    pub world: WorldStats,
    /// Whether the world stalled.
    pub stalled: bool,
}

/// A host's stack node, bonded or not.
fn stack_node(w: &World, id: NodeId) -> Option<&StackNode> {
    w.node::<StackNode>(id)
        .or_else(|| w.node::<BondedNode>(id).map(|b| &b.host))
}

impl Lan {
    /// Host `h`'s stack and applications.
    pub fn stack(&self, h: usize) -> Option<&StackNode> {
        stack_node(&self.world, *self.hosts.get(h)?)
    }

    /// Host `h`'s bonded node (`None` for a plain host).
    pub fn bonded(&self, h: usize) -> Option<&BondedNode> {
        self.world.node::<BondedNode>(*self.hosts.get(h)?)
    }

    /// Connection `i`'s two ends: the client's, the server's (once accepted).
    pub fn ends(&self, i: usize) -> (Option<&EndResult>, Option<&EndResult>) {
        let Some(c) = self.spec.conns.get(i) else {
            return (None, None);
        };
        let client = self
            .stack(c.client)
            .and_then(|n| n.app::<Client>(*self.client_app.get(i)?))
            .map(|a| &a.result);
        let server = self
            .server_app
            .get(c.server)
            .copied()
            .flatten()
            .and_then(|a| self.stack(c.server)?.app::<Server>(a))
            .and_then(|s| s.result(c.spec.id));
        (client, server)
    }

    /// Bytes connection `i` has delivered: to the server, to the client.
    pub fn delivered(&self, i: usize) -> (u64, u64) {
        let (c, s) = self.ends(i);
        (s.map_or(0, |s| s.received), c.map_or(0, |c| c.received))
    }

    /// Whether every connection is done at both ends.
    pub fn done(&self) -> bool {
        (0..self.spec.conns.len()).all(|i| {
            let spec = self.spec.conns.get(i).map(|c| c.spec);
            match self.ends(i) {
                (Some(c), Some(s)) => c.done && s.done,
                (Some(c), None) => {
                    c.done
                        && (c.connect_error.is_some()
                            || c.error.is_some()
                            || spec.is_some_and(|s| s.aborts()))
                }
                (None, _) => true,
            }
        })
    }

    /// Sockets on host `h` but listeners still waiting for their connection.
    fn sockets(&self, h: usize) -> usize {
        let Some(n) = self.stack(h) else {
            return 0;
        };
        let listeners = self
            .server_app
            .get(h)
            .copied()
            .flatten()
            .and_then(|a| n.app::<Server>(a))
            .map_or(0, Server::open_listeners);
        n.stack.socket_count().saturating_sub(listeners)
    }

    /// Cuts (or restores) host `h`'s NIC `member`'s link, telling the NIC
    /// when `carrier`.
    pub fn set_link(&mut self, h: usize, member: usize, up: bool, carrier: bool) {
        let Some(&l) = self.links.get(h).and_then(|ls| ls.get(member)) else {
            return;
        };
        if up {
            self.world.restore_link(l);
        } else {
            self.world.cut_link(l);
        }
        if carrier && let Some(&id) = self.hosts.get(h) {
            self.world
                .with_node::<BondedNode, _>(id, |n, now, _| n.set_carrier(now, member, up));
        }
    }

    /// Runs until every application is done (or `limit` of virtual time),
    /// striking the faults on cue, then until every socket is freed (at
    /// most `settle`).
    pub fn run(&mut self, limit: Duration, settle: Duration) -> LanOutcome {
        let end = self.world.now() + limit;
        let n = self.spec.conns.len();
        let mut gaps = vec![[Gaps::default(); 2]; n];
        let mut struck: Vec<(Option<Instant>, Option<Instant>)> =
            vec![(None, None); self.spec.faults.len()];
        let mut first_fault: Option<Instant> = None;
        let mut finished_at = self.world.now();
        // `run_while` lends the world; the rest of `self` is read through a
        // world-less view.
        let faults = self.spec.faults.clone();
        let mut world = core::mem::replace(&mut self.world, World::new(0));
        let finished = world.run_while(end, |w| {
            core::mem::swap(&mut self.world, w);
            let now = self.world.now();
            for (i, g) in gaps.iter_mut().enumerate() {
                let (to_server, to_client) = self.delivered(i);
                g[0].sample(now, to_server, first_fault);
                g[1].sample(now, to_client, first_fault);
            }
            for (f, s) in faults.iter().zip(struck.iter_mut()) {
                match *s {
                    (None, _) => {
                        let due = match f.at {
                            Trigger::At(t) => now >= t,
                            Trigger::Progress { conn, bytes } => {
                                let (a, b) = self.delivered(conn);
                                a + b >= bytes
                            }
                        };
                        if due {
                            self.set_link(f.host, f.member, false, f.carrier);
                            s.0 = Some(now);
                            first_fault.get_or_insert(now);
                        }
                    }
                    (Some(cut), None) if f.restore_after.is_some_and(|d| now >= cut + d) => {
                        self.set_link(f.host, f.member, true, f.carrier);
                        s.1 = Some(now);
                    }
                    _ => {}
                }
            }
            let done = self.done();
            if done {
                finished_at = now;
            }
            core::mem::swap(&mut self.world, w);
            done
        });
        let settle_end = world.now() + settle;
        let hosts = self.spec.hosts.len();
        world.run_while(settle_end, |w| {
            core::mem::swap(&mut self.world, w);
            let gone = (0..hosts).all(|h| self.sockets(h) == 0);
            core::mem::swap(&mut self.world, w);
            gone
        });
        self.world = world;
        let now = bond_time(self.world.now());
        let conns = (0..n)
            .filter_map(|i| {
                let (c, s) = self.ends(i);
                Some(LanConnOutcome {
                    conn: *self.spec.conns.get(i)?,
                    client: c.copied().unwrap_or_default(),
                    server: s.copied(),
                    gaps: gaps.get(i).copied().unwrap_or_default(),
                })
            })
            .collect();
        LanOutcome {
            conns,
            finished,
            finished_at,
            sockets_left: (0..hosts).map(|h| self.sockets(h)).collect(),
            faults: struck,
            bonds: (0..hosts)
                .map(|h| {
                    self.bonded(h).map(|b| BondReport {
                        stats: *b.bond().stats(),
                        members: b.bond().members(now).collect(),
                    })
                })
                .collect(),
            trace: self.world.trace_hash(),
            world: self.world.stats(),
            stalled: self.world.stalled(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::bonded::BondedError;
    use softoe_bond::MemberState;

    fn lan(faults: Vec<Fault>) -> LanSpec {
        let link = LinkConfig::new(100_000_000, Duration::from_micros(10));
        let host = || HostSpec::bonded(vec![link; 2], Policy::RoundRobin, Side::default());
        LanSpec {
            seed: 3,
            hosts: vec![host(), host()],
            conns: vec![LanConn {
                client: 0,
                server: 1,
                spec: ConnSpec {
                    id: 0,
                    port: 80,
                    client_bytes: 2 << 20,
                    server_bytes: 0,
                    client_chunk: 1 << 16,
                    server_chunk: 1,
                    start: Instant::from_millis(1),
                    client_abort_after: None,
                    server_abort_after: None,
                },
                priority: 0,
            }],
            faults,
        }
    }

    #[test]
    fn a_timed_fault_cuts_and_restores_and_the_bond_follows() {
        let fault = Fault {
            host: 0,
            member: 1,
            at: Trigger::At(Instant::from_millis(20)),
            restore_after: Some(Duration::from_millis(30)),
            carrier: true,
        };
        let mut lan = lan(vec![fault]).build().unwrap();
        let out = lan.run(Duration::from_secs(30), Duration::from_secs(1));
        let (cut, fixed) = out.faults[0];
        let (cut, fixed) = (cut.unwrap(), fixed.unwrap());
        assert!(cut >= Instant::from_millis(20) && cut < Instant::from_millis(21));
        assert!(fixed >= cut + Duration::from_millis(30));
        assert!(!lan.world.is_cut(lan.links[0][1]));
        let s = out.conns[0].server.unwrap();
        assert!(s.received == 2 << 20 && !s.corrupt && s.eof, "{s:?}");
        let m = out.bonds[0].as_ref().unwrap().members[1];
        assert_eq!((m.state, m.stats.left), (MemberState::Up, 1), "{m:?}");
        assert!(out.bonds[1].as_ref().unwrap().stats.striped > 0);
    }

    #[test]
    fn impossible_lans_are_refused() {
        let mut spec = lan(vec![]);
        spec.hosts[1].bond = None;
        assert!(matches!(spec.build(), Err(BuildError::Invalid(_))));
        let mut spec = lan(vec![]);
        spec.conns[0].server = 0;
        assert!(matches!(spec.build(), Err(BuildError::Invalid(_))));
        let mut spec = lan(vec![]);
        spec.hosts[0].links = vec![LinkConfig::default(); 17];
        assert!(matches!(
            spec.build(),
            Err(BuildError::Bond(BondedError::Bond(_)))
        ));
    }
}
