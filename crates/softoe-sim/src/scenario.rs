//! Ready-made worlds: a two-stack world driven by a workload, the random
//! workloads of the property test, and the bulk transfer of `softoe sim`.

use core::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use softoe_stack::{
    Algorithm, ArpConfig, DeviceCaps, Instant, Keepalive, Stack, StackConfig, TcpConfig, TcpInfo,
};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

use crate::link::{ConfigError, LinkConfig};
use crate::node::{Pattern, StackNode};
use crate::workload::{Client, ConnSpec, EndResult, Server};
use crate::world::{NicConfig, NodeId, World, WorldStats};

/// The client's address.
pub const CLIENT_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
/// The server's address.
pub const SERVER_IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

/// One side of a two-stack world.
#[derive(Clone, Copy, Debug, Default)]
pub struct Side {
    /// TCP settings for its sockets.
    pub tcp: TcpConfig,
    /// What its NIC offloads.
    pub nic: NicConfig,
    /// Its ARP cache.
    pub arp: ArpConfig,
}

/// A client stack and a server stack on one link, and the connections
/// between them.
#[derive(Clone, Debug)]
pub struct TwoStacks {
    /// Seed for everything random.
    pub seed: u64,
    /// The link, both ways.
    pub link: LinkConfig,
    /// The client side.
    pub client: Side,
    /// The server side.
    pub server: Side,
    /// The connections.
    pub conns: Vec<ConnSpec>,
}

fn stack_for(
    seed: u64,
    n: u8,
    ip: Ipv4Address,
    side: &Side,
) -> Result<Stack, softoe_stack::ConfigError> {
    let mut cfg = StackConfig::new(
        EthernetAddress([2, 0, 0, 0, 0, n]),
        Ipv4Cidr::new(ip, 24).unwrap_or_else(|| unreachable_cidr(ip)),
    );
    cfg.seed = seed.wrapping_mul(31).wrapping_add(u64::from(n));
    cfg.secret = [n; 16];
    cfg.secret[0] = seed as u8;
    cfg.caps = DeviceCaps {
        mtu: side.nic.mtu,
        tso_max: side.nic.tso.then_some(65_535),
        tx_csum: side.nic.tx_csum,
    };
    cfg.tcp = side.tcp;
    cfg.arp = side.arp;
    Stack::new(cfg)
}

fn unreachable_cidr(ip: Ipv4Address) -> Ipv4Cidr {
    // /24 is always valid; this only satisfies the type.
    Ipv4Cidr::new(ip, 32).unwrap_or(
        Ipv4Cidr::new(Ipv4Address::UNSPECIFIED, 0).unwrap_or_else(|| unreachable_cidr(ip)),
    )
}

/// Why a world could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A link setting is invalid.
    #[error(transparent)]
    Link(#[from] ConfigError),
    /// A stack setting is invalid.
    #[error("stack configuration: {0}")]
    Stack(softoe_stack::ConfigError),
    /// A bonded host cannot be built.
    #[error(transparent)]
    Bond(#[from] crate::bonded::BondedError),
    /// The world described is impossible.
    #[error("invalid world: {0}")]
    Invalid(&'static str),
}

/// A built two-stack world.
pub struct Built {
    /// The world.
    pub world: World,
    /// The client node.
    pub client: NodeId,
    /// The server node.
    pub server: NodeId,
}

impl core::fmt::Debug for Built {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Built")
            .field("world", &self.world)
            .finish_non_exhaustive()
    }
}

impl TwoStacks {
    /// Builds the world (clients on node 0, the server on node 1).
    pub fn build(&self) -> Result<Built, BuildError> {
        let pattern = Pattern::new(self.seed);
        let mut c = StackNode::new(
            stack_for(self.seed, 1, CLIENT_IP, &self.client).map_err(BuildError::Stack)?,
            pattern.clone(),
        );
        for s in &self.conns {
            c.apps
                .push(Box::new(Client::new(*s, SERVER_IP, self.client.tcp)));
        }
        let mut s = StackNode::new(
            stack_for(self.seed, 2, SERVER_IP, &self.server).map_err(BuildError::Stack)?,
            pattern,
        );
        s.apps
            .push(Box::new(Server::new(self.conns.clone(), self.server.tcp)));
        let mut world = World::new(self.seed);
        let client = world.add_node(Box::new(c), self.client.nic);
        let server = world.add_node(Box::new(s), self.server.nic);
        world.connect(client, server, self.link)?;
        Ok(Built {
            world,
            client,
            server,
        })
    }
}

/// Both ends of one connection after a run.
#[derive(Clone, Copy, Debug)]
pub struct ConnOutcome {
    /// The spec.
    pub spec: ConnSpec,
    /// The client's end.
    pub client: EndResult,
    /// The server's end (`None`: never accepted).
    pub server: Option<EndResult>,
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Per connection.
    pub conns: Vec<ConnOutcome>,
    /// Whether every application finished before the time limit.
    pub finished: bool,
    /// Virtual time when the last application finished.
    pub finished_at: Instant,
    /// Sockets left on the client and server stacks after the settle time
    /// (listeners whose connection never came excluded).
    pub sockets_left: (usize, usize),
    /// Most sockets alive at once, per stack.
    pub peak_sockets: (usize, usize),
    /// The world's trace hash.
    pub trace: u64,
    /// Each direction of the link (client→server, server→client).
    pub link: (Option<crate::LinkStats>, Option<crate::LinkStats>),
    /// World totals.
    pub world: WorldStats,
    /// Whether the world stalled.
    pub stalled: bool,
}

impl Built {
    fn all_done(&self) -> bool {
        let c = self.world.node::<StackNode>(self.client);
        let s = self.world.node::<StackNode>(self.server);
        let (Some(c), Some(s)) = (c, s) else {
            return true;
        };
        let clients_done =
            (0..c.apps.len()).all(|i| c.app::<Client>(i).is_none_or(|a| a.result.done));
        let server_done = s
            .app::<Server>(0)
            .is_none_or(|srv| srv.conns.iter().all(|x| x.result.done) && clients_accepted(c, srv));
        clients_done && server_done
    }

    /// Runs until every application is done (or `limit`), then until both
    /// stacks have freed every socket but unused listeners (TIME-WAIT,
    /// retransmitted FINs; at most `settle`), and collects the outcome.
    pub fn run(self, limit: Duration, settle: Duration) -> Outcome {
        self.run_observed(limit, settle, |_| {})
    }

    /// [`run`](Self::run), calling `observe` with the world before every
    /// event (to sample the stacks' counters as they change).
    pub fn run_observed(
        mut self,
        limit: Duration,
        settle: Duration,
        mut observe: impl FnMut(&World),
    ) -> Outcome {
        let end = self.world.now() + limit;
        let mut finished_at = self.world.now();
        let finished = self.world.run_while(end, |w| {
            observe(w);
            let b = Built {
                world: core::mem::replace(w, World::new(0)),
                client: self.client,
                server: self.server,
            };
            let done = b.all_done();
            *w = b.world;
            if done {
                finished_at = w.now();
            }
            done
        });
        let settle_end = self.world.now() + settle;
        let (client, server) = (self.client, self.server);
        let gone = |w: &mut World| {
            observe(w);
            let c = w
                .node::<StackNode>(client)
                .map_or(0, |n| n.stack.socket_count());
            let s = w.node::<StackNode>(server).map_or(0, |n| {
                let listeners = n.app::<Server>(0).map_or(0, Server::open_listeners);
                n.stack.socket_count().saturating_sub(listeners)
            });
            c == 0 && s == 0
        };
        self.world.run_while(settle_end, gone);
        let c = self.world.node::<StackNode>(self.client);
        let s = self.world.node::<StackNode>(self.server);
        let mut conns = Vec::new();
        if let (Some(c), Some(s)) = (c, s) {
            let srv = s.app::<Server>(0);
            for i in 0..c.apps.len() {
                if let Some(cl) = c.app::<Client>(i) {
                    conns.push(ConnOutcome {
                        spec: cl.spec,
                        client: cl.result,
                        server: srv.and_then(|x| x.result(cl.spec.id)).copied(),
                    });
                }
            }
        }
        Outcome {
            conns,
            finished,
            finished_at,
            sockets_left: (
                c.map_or(0, |n| n.stack.socket_count()),
                s.map_or(0, |n| {
                    let listeners = n.app::<Server>(0).map_or(0, Server::open_listeners);
                    n.stack.socket_count().saturating_sub(listeners)
                }),
            ),
            peak_sockets: (
                c.map_or(0, |n| n.peak_sockets),
                s.map_or(0, |n| n.peak_sockets),
            ),
            trace: self.world.trace_hash(),
            link: (
                self.world.link_stats(0, true),
                self.world.link_stats(0, false),
            ),
            world: self.world.stats(),
            stalled: self.world.stalled(),
        }
    }
}

/// Every client that connected and did not abort early has been accepted.
fn clients_accepted(c: &StackNode, srv: &Server) -> bool {
    (0..c.apps.len()).all(|i| {
        c.app::<Client>(i).is_none_or(|cl| {
            cl.spec.aborts()
                || cl.result.connect_error.is_some()
                || cl.result.error.is_some()
                || srv.result(cl.spec.id).is_some()
        })
    })
}

/// The random world of seed `seed` for the property test: 1–4 connections
/// of random sizes both ways, some half-closing early, some aborting, over a
/// link with 0–10 % loss, duplication, reordering and corruption, random
/// rates, delays, MTUs, offloads and TCP options.
pub fn random_world(seed: u64) -> TwoStacks {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let rates = [10_000_000u64, 100_000_000, 1_000_000_000, 10_000_000_000];
    let delay = Duration::from_micros(rng.random_range(5..5_000));
    let mut link = LinkConfig::new(rates[rng.random_range(0..rates.len())], delay);
    let faulty = rng.random_bool(0.85);
    if faulty {
        link.loss = rng.random_range(0.0..0.10);
        link.duplicate = rng.random_range(0.0..0.05);
        link.reorder = rng.random_range(0.0..0.05);
        link.reorder_delay = Duration::from_micros(rng.random_range(1..2_000));
        link.corrupt = rng.random_range(0.0..0.02);
        link.jitter = Duration::from_micros(rng.random_range(0..200));
    }
    if rng.random_bool(0.3) {
        link.queue_limit_bytes = Some(rng.random_range(20_000..400_000));
    }
    let mtus = [576usize, 1280, 1500, 1500, 9000];
    let mtu = mtus[rng.random_range(0..mtus.len())];
    let side = |rng: &mut ChaCha8Rng| {
        let mut tcp = TcpConfig::default();
        tcp.rx_buffer = [16_384usize, 65_536, 262_144, 1 << 20][rng.random_range(0..4)];
        tcp.tx_buffer = [16_384usize, 131_072, 1 << 20][rng.random_range(0..3)];
        tcp.sack = rng.random_bool(0.8);
        tcp.timestamps = rng.random_bool(0.7);
        tcp.window_scaling = rng.random_bool(0.8);
        tcp.nodelay = rng.random_bool(0.5);
        tcp.delayed_ack = if rng.random_bool(0.8) {
            Some(Duration::from_millis(rng.random_range(1..200)))
        } else {
            None
        };
        tcp.congestion = if rng.random_bool(0.5) {
            Algorithm::Cubic
        } else {
            Algorithm::NewReno
        };
        if rng.random_bool(0.2) {
            tcp.mss_clamp = Some(rng.random_range(100..1400));
        }
        // TIME-WAIT must outlast the peer's longest retransmission interval,
        // or a lost last ACK turns into a reset (the reason 2 MSL exists).
        tcp.max_rto = Duration::from_secs(10);
        tcp.time_wait = Duration::from_secs(60);
        // Detect a peer that vanished (its RST lost) within seconds.
        tcp.keepalive = Some(Keepalive {
            idle: Duration::from_secs(3),
            interval: Duration::from_secs(1),
            count: 5,
        });
        tcp.max_retries = 30;
        let nic = NicConfig {
            mtu,
            tso: rng.random_bool(0.5),
            tx_csum: false,
            rx_csum: rng.random_bool(0.5),
            gro: rng.random_bool(0.4),
            rx_coalesce: if rng.random_bool(0.3) {
                Duration::from_micros(rng.random_range(1..50))
            } else {
                Duration::ZERO
            },
            gso_wire: false,
        };
        let nic = NicConfig {
            tx_csum: nic.tso || rng.random_bool(0.5),
            ..nic
        };
        Side {
            tcp,
            nic,
            arp: ArpConfig::default(),
        }
    };
    let client = side(&mut rng);
    let server = side(&mut rng);
    let n = rng.random_range(1..=4u32);
    let conns = (0..n)
        .map(|id| {
            let size = |rng: &mut ChaCha8Rng| match rng.random_range(0..10) {
                0 => 0,
                1..=5 => rng.random_range(1..20_000),
                _ => rng.random_range(20_000..300_000),
            };
            let client_bytes = size(&mut rng);
            let server_bytes = size(&mut rng);
            let abort = rng.random_range(0..10);
            ConnSpec {
                id,
                port: 5000 + id as u16,
                client_bytes,
                server_bytes,
                client_chunk: rng.random_range(1..65_536),
                server_chunk: rng.random_range(1..65_536),
                start: Instant::from_millis(rng.random_range(0..50)),
                client_abort_after: (abort == 0).then(|| rng.random_range(0..=client_bytes)),
                server_abort_after: (abort == 1 && client_bytes > 0)
                    .then(|| rng.random_range(1..=client_bytes)),
            }
        })
        .collect();
    TwoStacks {
        seed,
        link,
        client,
        server,
        conns,
    }
}

/// Settings of one bulk transfer.
#[derive(Clone, Copy, Debug)]
pub struct Transfer {
    /// Bytes to move from client to server.
    pub bytes: u64,
    /// Link rate.
    pub rate_bps: u64,
    /// One-way delay.
    pub delay: Duration,
    /// Loss probability per frame (both directions).
    pub loss: f64,
    /// IP MTU.
    pub mtu: usize,
    /// NIC offloads on both sides.
    pub offloads: bool,
    /// Socket buffers (both).
    pub buffer: usize,
    /// Congestion control.
    pub congestion: Algorithm,
    /// Seed.
    pub seed: u64,
    /// Bytes the link queues before tail-dropping (`None`: unbounded).
    pub queue_limit: Option<usize>,
}

impl Default for Transfer {
    fn default() -> Transfer {
        Transfer {
            bytes: 64 << 20,
            rate_bps: 1_000_000_000,
            delay: Duration::from_micros(250),
            loss: 0.01,
            mtu: 1500,
            offloads: true,
            buffer: 4 << 20,
            congestion: Algorithm::Cubic,
            seed: 1,
            queue_limit: None,
        }
    }
}

/// What a bulk transfer achieved.
#[derive(Clone, Copy, Debug)]
pub struct TransferReport {
    /// The settings.
    pub transfer: Transfer,
    /// Bytes the server received intact.
    pub bytes: u64,
    /// Virtual time from connect to the last byte read.
    pub elapsed: Duration,
    /// Goodput, bits per second of virtual time.
    pub goodput_bps: f64,
    /// Goodput over the link rate.
    pub link_fraction: f64,
    /// Whether every byte arrived intact, in order, once.
    pub intact: bool,
    /// Whether every byte arrived within the time limit.
    pub complete: bool,
    /// Whether a received byte was not the one due at its offset (lost,
    /// duplicated, reordered or altered on its way up).
    pub corrupt: bool,
    /// The sender's connection at the end.
    pub sender: Option<TcpInfo>,
    /// Wall-clock time the simulation took.
    pub wall: Duration,
    /// Frames on the wire.
    pub wire_frames: u64,
}

impl Transfer {
    /// The two-stack world for this transfer.
    pub fn world(&self) -> TwoStacks {
        let mut tcp = TcpConfig::default();
        tcp.rx_buffer = self.buffer;
        tcp.tx_buffer = self.buffer;
        tcp.tx_max_chunks = 4096;
        tcp.congestion = self.congestion;
        tcp.time_wait = Duration::from_secs(1);
        let nic = if self.offloads {
            NicConfig {
                mtu: self.mtu,
                ..NicConfig::offloads()
            }
        } else {
            NicConfig {
                mtu: self.mtu,
                ..NicConfig::default()
            }
        };
        // Learned addresses last the whole transfer: it measures TCP, and
        // today's stack stops when an entry expires mid-transfer (the
        // request goes unanswered or a timer spins on the unresolved hop;
        // tests/arp_expiry.rs).
        let mut arp = ArpConfig::default();
        arp.entry_ttl = Duration::from_secs(24 * 3600);
        let side = Side { tcp, nic, arp };
        TwoStacks {
            seed: self.seed,
            link: LinkConfig {
                queue_limit_bytes: self.queue_limit,
                ..LinkConfig::new(self.rate_bps, self.delay).with_loss(self.loss)
            },
            client: side,
            server: side,
            conns: vec![ConnSpec {
                id: 0,
                port: 5001,
                client_bytes: self.bytes,
                server_bytes: 0,
                client_chunk: 64 * 1024,
                server_chunk: 1,
                start: Instant::from_millis(1),
                client_abort_after: None,
                server_abort_after: None,
            }],
        }
    }

    /// Runs the transfer.
    pub fn run(&self) -> Result<TransferReport, BuildError> {
        self.run_for(Duration::from_secs(3600))
    }

    /// Runs the transfer for at most `limit` of virtual time; one that has
    /// not finished by then reports the bytes that arrived over `limit`.
    pub fn run_for(&self, limit: Duration) -> Result<TransferReport, BuildError> {
        let wall = std::time::Instant::now();
        let built = self.world().build()?;
        let out = built.run(limit, Duration::from_millis(1));
        let wall = wall.elapsed();
        let c = out.conns.first();
        let server = c.and_then(|c| c.server);
        let (bytes, elapsed, intact, corrupt) = match (c, server) {
            (Some(c), Some(s)) => {
                // From the handshake's end (the server's accept), so a lost
                // SYN's one-second timeout does not stand in for the data
                // phase's goodput.
                let start = s
                    .started_at
                    .or(c.client.started_at)
                    .unwrap_or(Instant::ZERO);
                let end = s.done_at.unwrap_or(Instant::ZERO + limit);
                (
                    s.received,
                    end.saturating_duration_since(start),
                    !s.corrupt && s.received == self.bytes && s.error.is_none(),
                    s.corrupt,
                )
            }
            _ => (0, Duration::ZERO, false, false),
        };
        let secs = elapsed.as_secs_f64().max(1e-9);
        let goodput_bps = bytes as f64 * 8.0 / secs;
        Ok(TransferReport {
            transfer: *self,
            bytes,
            elapsed,
            goodput_bps,
            link_fraction: goodput_bps / self.rate_bps as f64,
            intact,
            complete: bytes == self.bytes,
            corrupt,
            sender: c.and_then(|c| c.client.info),
            wall,
            wire_frames: out.world.wire_frames,
        })
    }
}
