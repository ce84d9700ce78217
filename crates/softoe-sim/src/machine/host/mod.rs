//! A host whose work takes time: the softoe stack and its programs on
//! queued CPUs, behind a bus and a NIC.
//!
//! [`MachineNode`] is a node of the [`World`](crate::World) like
//! [`StackNode`](crate::StackNode), running the same softoe stack, but
//! nothing it does is free. It owns three queued servers
//! ([`Server`]): the **host CPU** (speed 1, the reference every cost is
//! priced on), the **engine core** (speed `engine.speed`, used only with
//! offload) and the **I/O bus** the NIC's DMA crosses (a transaction costs
//! `bus.transaction_ns`, each byte `8/bus.gbps` ns). Work queues at a
//! server in arrival order and is served one job at a time, so when more is
//! offered than a server can do, the queue grows and throughput settles at
//! its service rate: saturation is not assumed, it happens.
//!
//! ## A job's life
//!
//! A job is priced **when its service starts**: at that instant `s` the
//! node runs the real code — [`Stack::receive`], [`Stack::poll`], a
//! program's `send` or `recv` — counts what it did (segments in and out,
//! bytes copied or checksummed, timers due, commands, completions) and
//! charges the sum of the [`Calibration`]'s `c0 + c1·bytes` for those
//! events; the job then holds its server until `s + work / speed`. Because
//! the stack runs atomically inside one call, **its state changes at the
//! service start of the job that triggers it; only what leaves the job —
//! frames, completions, wake-ups, commands — waits for the job's end.** A
//! frame the stack emits at `s` reaches the bus at the job's end, crosses
//! it (one DMA transaction per frame, plus one per batch for the
//! descriptors) and only then goes to the link.
//!
//! ## Receive
//!
//! A frame from the link is DMA'd across the bus into host memory. The NIC
//! then moderates interrupts: it raises one after `coalesce_frames`
//! frames, or `coalesce_us` after the first one pending. An interrupt
//! queues one receive job on the stack's CPU (the engine with offload, the
//! host CPU without) and masks further interrupts, as NAPI does; the job
//! takes every frame that has arrived by its start (up to 64), merges runs
//! of one flow (GRO, when on), and hands them to the stack in one batch
//! ([`Stack::begin_batch`], with offload or GRO), so under load batches
//! grow and interrupts and ACKs per byte fall by themselves. When the job
//! ends with frames still pending, another job follows without an
//! interrupt; otherwise interrupts are unmasked. Without NAPI
//! (`nic.napi = false`, a plain embedded driver such as HL-TCP's) nothing
//! is masked: every interrupt the moderation raises queues its own job and
//! costs its `interrupt`, even one that finds its frames taken. With
//! `polling` the CPU finds frames itself: no interrupts at all.
//!
//! ## Where each cost is paid
//!
//! - **Without offload** (the kernel path) everything runs on the host
//!   CPU: per receive job an `interrupt` (unless polling), per wire frame
//!   `port_rx`, per segment handed to the stack `stack_rx`, per frame
//!   emitted `stack_tx` and `port_tx`, per byte `csum` when the NIC does
//!   not checksum; each program call that moves data is a `syscall` plus
//!   `copy` of its bytes plus `app`, and the stack work it causes (the
//!   segments a `write` lets out) is charged to the same job.
//! - **With offload** the stack's work above runs on the engine. A program
//!   call costs the host `command` + `ring_access` (a write: post a
//!   command, after copying its bytes into the send ring, `copy`) or
//!   `ring_access` + `copy` (a read from the receive ring); a write's
//!   command reaches the engine when the host's job ends, and the engine
//!   pays `ring_access` to take it before running the stack. Received
//!   payload is copied by the engine from the stack into the receive ring
//!   (`copy`). The engine tells a program something by a completion
//!   (`completion` + `ring_access` on the engine, `ring_access` on the
//!   host) **only when the program sleeps waiting for it** (data, send
//!   space, the connection): a running program reads the rings' indices
//!   itself, as an event-suppressing ring lets it. Memory delay multiplies
//!   `ring_access` and the per-byte part of `copy` and `csum`.
//! - `app` is the program's own work, on the host in both cases: `c0` per
//!   message completed, `c1` per byte moved.
//! - **Wake-ups**: a sleeping program woken (by data, space, a connection)
//!   pays `wakeup` on the host. A writer that found the send ring full is
//!   woken when half of it is free again (or what it still has to write
//!   fits), as Linux wakes a writer blocked on a full socket, not at every
//!   acknowledgement. A core that was asleep pays `wakeup` for
//!   the job that wakes it: the engine sleeps after `engine.spin_us`
//!   without work; the host CPU, when it runs the stack without polling,
//!   sleeps as soon as it is idle (an interrupt on an idle CPU pays
//!   `interrupt` and `wakeup`), and spins like the engine when it polls.
//! - A stack timer coming due queues a job on the stack's CPU that pays
//!   `timer`.
//!
//! Busy time is work only: a core spinning while it polls is not counted
//! busy, so a polling CPU's share is the work it did, not 100 %.
//!
//! ## Caveats
//!
//! - One host core runs the programs (and, without offload, the stack):
//!   several connections share it in arrival order; there is no scheduler
//!   quantum or priority.
//! - A blocked kernel `write` that resumes is counted as a new call (one
//!   more `syscall`); a sleeping program pays no `syscall` for the call it
//!   slept in.
//! - The send and receive rings hold as much as the socket's buffers
//!   (`tx_buffer`, `rx_buffer`). When the receive ring is full the engine
//!   leaves data in the stack (its window closes) and the program rings a
//!   doorbell (a command) when it frees room.
//! - The bus carries only the NIC's DMA; the engine and the host share
//!   memory (this machine's engine is a core of the same machine), whose
//!   cost is `memory.delay`'s to model. Without offload `memory.delay`
//!   changes nothing (as in the paper, whose no-offload row is one
//!   figure); the stack's and driver's own per-byte costs are never
//!   scaled by it.
//! - Completions are not coalesced. With offload a waiting program spins
//!   first (`host.spin_us`, learnt per kind of wait as the real client
//!   learns it, `host/spin.rs`): what arrives within its spin costs no completion
//!   and no `wakeup`, and the spin counts as host CPU; what comes later is
//!   a completion and a `wakeup`. A spin does not hold the host core
//!   against other programs' jobs (one core, no scheduler).
//! - The engine takes every command queued by the start of a command job
//!   in that job, as the real engine drains its command rings each turn,
//!   so writes posted while it was busy leave together (TSO frames of
//!   many writes).
//! - Timers a receive job's `poll` finds due run inside that job without a
//!   `timer` charge; only a job queued for a deadline pays it.
//! - A node whose every event is free and immediate (the `ideal` peer)
//!   handles each frame as it arrives instead of as zero-length jobs
//!   ([`NodeSpec::is_free`]): the same calls in the same order, at a
//!   fraction of the wall-clock time.

use core::time::Duration;
use std::collections::{HashMap, VecDeque};

use serde::Serialize;
use softoe_stack::{Endpoint, Events, Instant, RecvError, RxMeta, SendError, SocketHandle, Stack};
use softoe_wire::Ipv4Address;

use super::apps::{
    ConnResult, Op, Program, Progress, Role, Sock, key_from_active, key_from_passive,
};
use super::config::{MachineConfig, NicSpec, WorkloadKind};
use super::costs::Calibration;
use super::queue::{QueueError, Server, ServerStats};
use crate::nic;
use crate::node::{Pattern, SimDev};
use crate::world::{Node, RxInfo, SimFrame};

mod agenda;
mod engine;
mod free;
mod jobs;
mod programs;
mod spin;

use agenda::Agenda;
use spin::SpinBudget;

/// Most frames one receive job takes (NAPI's budget, the engine's batch).
pub const RX_BUDGET: usize = 64;

/// Events processed at one instant before the node declares itself stalled.
const STALL_LIMIT: u64 = 1_000_000;

/// The bus a node's NIC DMAs across.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BusModel {
    /// Bandwidth, gigabits per second.
    pub gbps: f64,
    /// Nanoseconds per transaction.
    pub transaction_ns: f64,
}

impl BusModel {
    /// Nanoseconds to move `bytes` in `transactions` transactions.
    fn ns(&self, transactions: u64, bytes: u64) -> f64 {
        self.transaction_ns * transactions as f64 + bytes as f64 * 8.0 / self.gbps
    }
}

/// What a [`MachineNode`] is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// The stack runs on the engine core (true) or on the host CPU.
    pub offload: bool,
    /// The engine core's speed over the host's.
    pub engine_speed: f64,
    /// How long the engine (and a polling host CPU) spins before it sleeps.
    pub spin: Duration,
    /// With offload, the longest a waiting program spins before it sleeps.
    pub host_spin: Duration,
    /// The memory delay multiplier (with offload).
    pub memory_delay: f64,
    /// The bus (`None`: DMA is free and instant).
    pub bus: Option<BusModel>,
    /// The NIC.
    pub nic: NicSpec,
    /// The coalescing timer (zero: none).
    pub coalesce: Duration,
    /// What each event costs.
    pub calibration: Calibration,
}

impl NodeSpec {
    /// The modelled host of `cfg`.
    pub fn host(cfg: &MachineConfig, cal: &Calibration) -> NodeSpec {
        NodeSpec {
            offload: cfg.host.offload,
            engine_speed: cfg.engine.speed,
            spin: cfg.spin(),
            host_spin: cfg.host_spin(),
            memory_delay: cfg.memory.delay,
            bus: Some(BusModel {
                gbps: cfg.bus.gbps,
                transaction_ns: cfg.bus.transaction_ns,
            }),
            nic: cfg.nic,
            coalesce: cfg.coalesce(),
            calibration: cal.clone(),
        }
    }

    /// A host like `cfg`'s without offload (the `host` peer).
    pub fn kernel_peer(cfg: &MachineConfig, cal: &Calibration) -> NodeSpec {
        NodeSpec {
            offload: false,
            ..NodeSpec::host(cfg, cal)
        }
    }

    /// The testbed's far end (the `testbed` peer): a Linux program whose
    /// calls cost what the calibration says and whose stack's work is free
    /// (on the testbed it runs in the softirq of the sender's port write or
    /// system call, whose calibrated costs include it).
    pub fn testbed_peer(cfg: &MachineConfig, cal: &Calibration) -> NodeSpec {
        let calls = Calibration {
            syscall: cal.syscall,
            copy: cal.copy,
            wakeup: cal.wakeup,
            app: cal.app,
            ..Calibration::zero()
        };
        NodeSpec {
            // Its receive path is not woken: it runs in the sender's softirq.
            spin: Duration::from_secs(3600),
            calibration: calls,
            ..NodeSpec::ideal(cfg)
        }
    }

    /// A far end that costs nothing (the `ideal` peer): no bus, every event
    /// free, each frame taken as it arrives; the same NIC offloads.
    pub fn ideal(cfg: &MachineConfig) -> NodeSpec {
        NodeSpec {
            offload: false,
            engine_speed: 1.0,
            spin: Duration::ZERO,
            host_spin: Duration::ZERO,
            memory_delay: 1.0,
            bus: None,
            nic: NicSpec {
                coalesce_frames: 1,
                coalesce_us: 0.0,
                polling: true,
                ..cfg.nic
            },
            coalesce: Duration::ZERO,
            calibration: Calibration::zero(),
        }
    }
}

/// The programs a node runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AppSpec {
    /// Stream or request/response.
    pub kind: WorkloadKind,
    /// Bytes per write (stream) or per request and response (rr).
    pub message: u32,
    /// Connections, one program thread each.
    pub connections: u32,
    /// Stream: bytes per connection.
    pub bytes: u64,
    /// Rr: round trips per connection.
    pub requests: u64,
    /// `Some(peer)`: this node opens the connections, to `peer`; `None`: it
    /// listens for them.
    pub connect_to: Option<Ipv4Address>,
    /// This node sends the stream (or is the rr client).
    pub sends: bool,
    /// Connection `i` uses the peer's port `base_port + i`.
    pub base_port: u16,
}

/// A node cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A server's speed is unusable.
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// A listening socket could not be opened.
    #[error("cannot listen on port {port}: {error}")]
    Listen {
        /// The port.
        port: u16,
        /// Why.
        error: softoe_stack::BindError,
    },
}

/// The counted events of a node, over its whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct MachineCounters {
    /// Jobs served by the CPUs.
    pub jobs: u64,
    /// Interrupts taken.
    pub interrupts: u64,
    /// Programs woken.
    pub thread_wakeups: u64,
    /// Sleeping cores woken (the engine, or the host CPU).
    pub core_wakeups: u64,
    /// Waits a spinning program caught (no completion, no wake-up).
    pub spin_caught: u64,
    /// Nanoseconds programs spent spinning (host CPU).
    pub spin_ns: u64,
    /// Commands posted to the engine.
    pub commands: u64,
    /// Completions posted to the host.
    pub completions: u64,
    /// Shared-memory ring accesses.
    pub ring_accesses: u64,
    /// System calls.
    pub syscalls: u64,
    /// Stack timers that came due.
    pub timers: u64,
    /// DMA transactions on the bus.
    pub dma_transactions: u64,
    /// Bytes DMA'd.
    pub dma_bytes: u64,
    /// Frames received from the link.
    pub rx_frames: u64,
    /// Segments handed to the stack (after GRO).
    pub rx_segments: u64,
    /// Frames the stack emitted (TSO super-segments count once).
    pub tx_frames: u64,
    /// Bytes copied by a CPU.
    pub copied_bytes: u64,
    /// Bytes checksummed by a CPU.
    pub csum_bytes: u64,
}

/// Time each resource has spent busy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Busy {
    /// The host CPU.
    pub host: Duration,
    /// The engine core.
    pub engine: Duration,
    /// The bus.
    pub bus: Duration,
}

impl Busy {
    /// Each resource's busy time since `earlier`.
    pub fn since(&self, earlier: &Busy) -> Busy {
        Busy {
            host: self.host.saturating_sub(earlier.host),
            engine: self.engine.saturating_sub(earlier.engine),
            bus: self.bus.saturating_sub(earlier.bus),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cpu {
    Host,
    Engine,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmd {
    Connect,
    Send(u64),
    /// Room was freed in a receive ring the engine had filled.
    Credit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Work {
    /// Take the frames that have arrived (after an interrupt if `irq`).
    Rx { irq: bool },
    /// A stack deadline came.
    Timer,
    /// Program thread `t` runs (woken from sleep if `woken`).
    Thread { t: usize, woken: bool },
    /// The engine takes a command.
    Command { conn: usize, cmd: Cmd },
    /// The engine posts a completion for a sleeping program.
    Notify { conn: usize },
}

impl Work {
    /// A code for the event log.
    fn code(&self) -> u8 {
        match self {
            Work::Rx { irq: false } => 1,
            Work::Rx { irq: true } => 2,
            Work::Timer => 3,
            Work::Thread { woken: false, .. } => 4,
            Work::Thread { woken: true, .. } => 5,
            Work::Command { .. } => 6,
            Work::Notify { .. } => 7,
        }
    }
}

/// What a sleeping program waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Connect,
    Space,
    Data,
}

impl Want {
    /// Index of its spin budget.
    fn index(self) -> usize {
        match self {
            Want::Connect => 0,
            Want::Space => 1,
            Want::Data => 2,
        }
    }
}

/// A program that went to sleep spinning: the spin runs from `since` to
/// `until`.
#[derive(Clone, Copy, Debug)]
struct Spinning {
    since: Instant,
    until: Instant,
    budget: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Thread {
    /// A job for it is queued or in service.
    Queued,
    /// Asleep until what it wants happens.
    Asleep(Want),
    /// Its part is done.
    Finished,
}

enum Ev {
    /// A received frame is in host memory.
    RxDma { frame: Vec<u8>, info: RxInfo },
    /// The coalescing timer of generation `gen`.
    IrqTimer { generation: u64 },
    /// The head of a CPU's queue may start.
    Start(Cpu),
    /// Work reaches a CPU's queue.
    Arrive(Cpu, Work),
    /// A receive job ended.
    RxDone,
    /// The stack's deadline.
    Deadline(Instant),
    /// Frames a job emitted reach the bus.
    TxDma(Vec<SimFrame>),
    /// A frame is on its way to the link.
    Emit(SimFrame),
    /// The engine's view of a connection becomes visible to the host.
    Publish {
        conn: usize,
        acked: u64,
        placed: u64,
        connected: bool,
        failed: bool,
    },
    /// A completion reaches the host.
    Complete { conn: usize },
}

struct CpuState {
    server: Server,
    queue: VecDeque<(Instant, Work)>,
    start_scheduled: bool,
    /// Idle longer than this, the core sleeps (`None`: never sleeps).
    spin: Option<Duration>,
}

impl CpuState {
    fn new(speed: f64, spin: Option<Duration>) -> Result<CpuState, QueueError> {
        Ok(CpuState {
            server: Server::new(speed)?,
            queue: VecDeque::new(),
            start_scheduled: false,
            spin,
        })
    }
}

/// One connection on this node: the program, and (with offload) the
/// engine's side of its rings.
struct Conn {
    program: Program,
    /// Pattern stream this end sends and the one it receives.
    send_key: u64,
    recv_key: u64,
    port: u16,
    handle: Option<SocketHandle>,
    thread: Thread,
    // The host's view (with offload: what the engine has published).
    connected: bool,
    acked_pub: u64,
    placed_pub: u64,
    /// Completions waiting in the completion ring.
    inbox: u64,
    // The engine's side (with offload).
    engine_connected: bool,
    engine_acked: u64,
    /// Bytes copied into the receive ring so far.
    engine_placed: u64,
    /// Bytes posted by the program not yet taken by the stack.
    unsent: u64,
    /// Bytes the stack has taken.
    engine_sent: u64,
    /// The engine left data in the stack for want of ring room.
    rx_blocked: bool,
    connect_posted: bool,
    /// A completion for the sleeping program is on its way.
    notify_pending: bool,
    /// Spin budgets of its kinds of wait ([`Want::index`]).
    spins: [SpinBudget; 3],
    /// The spin of its current wait, if it spins.
    spinning: Option<Spinning>,
}

/// The price list of one node, memory delay applied.
struct Prices {
    cal: Calibration,
    /// Multiplier of the per-byte part of `copy` and `csum`.
    byte_factor: f64,
    /// Multiplier of `ring_access`.
    ring_factor: f64,
}

/// A job being priced: nanoseconds of host-core work, bytes handled, and
/// what it will release at its end.
struct Job {
    ns: f64,
    bytes: u64,
    out: Vec<SimFrame>,
    after: Vec<Ev>,
    /// Progress of the program call (thread, progress).
    progress: Option<(usize, Progress)>,
}

impl Job {
    fn new() -> Job {
        Job {
            ns: 0.0,
            bytes: 0,
            out: Vec::new(),
            after: Vec::new(),
            progress: None,
        }
    }
}

/// A host with queued CPUs, a bus and a NIC, running a softoe stack and
/// its programs (see the [module docs](self)).
pub struct MachineNode {
    stack: Stack,
    pattern: Pattern,
    spec: NodeSpec,
    prices: Prices,
    host: CpuState,
    engine: CpuState,
    bus: Server,
    events: Agenda<Ev>,
    /// The instant of the last event processed, and how many there.
    last_at: Instant,
    same_instant: u64,
    stalled: bool,
    // The NIC's receive side.
    rx_pending: VecDeque<(Vec<u8>, RxInfo)>,
    /// A receive job is queued or running (interrupts masked).
    rx_scheduled: bool,
    /// Receive jobs queued or running (more than one only without NAPI).
    rx_jobs: u32,
    /// Frames counted towards the next interrupt.
    irq_count: u32,
    irq_generation: u64,
    irq_timer_armed: bool,
    /// The stack's deadline a job is scheduled for.
    deadline: Option<Instant>,
    conns: Vec<Conn>,
    socks: HashMap<SocketHandle, Sock>,
    /// The address this node connects to (`None`: it listens).
    peer: Option<Ipv4Address>,
    /// Every event is free: the short path ([`free`]).
    free: bool,
    /// Free nodes: programs ready to run.
    ready: VecDeque<usize>,
    tx_ring: u64,
    rx_ring: u64,
    counters: MachineCounters,
    log: u64,
}

impl core::fmt::Debug for MachineNode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MachineNode")
            .field("offload", &self.spec.offload)
            .field("conns", &self.conns.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

/// Nanoseconds (finite, not negative) to a duration, to the nearest.
fn dur(ns: f64) -> Duration {
    Duration::from_nanos(ns.round().max(0.0) as u64)
}

impl MachineNode {
    /// A node running `stack` (built with `spec.nic`'s capabilities) and
    /// the programs of `apps`. A listening node opens its listeners now.
    pub fn new(
        mut stack: Stack,
        pattern: Pattern,
        spec: NodeSpec,
        apps: &AppSpec,
    ) -> Result<MachineNode, NodeError> {
        let polls = spec.nic.polling;
        let host_spin = match (spec.offload, polls) {
            (false, true) => Some(spec.spin),
            _ => Some(Duration::ZERO),
        };
        let host = CpuState::new(1.0, host_spin)?;
        let engine = CpuState::new(spec.engine_speed, Some(spec.spin))?;
        let bus = Server::new(1.0)?;
        let (byte_factor, ring_factor) = if spec.offload {
            (spec.memory_delay, spec.memory_delay)
        } else {
            (1.0, 1.0)
        };
        let prices = Prices {
            cal: spec.calibration.clone(),
            byte_factor,
            ring_factor,
        };
        let tcp = stack.config().tcp;
        let role = Role::of(apps.kind, apps.sends);
        let mut conns = Vec::new();
        let mut socks = HashMap::new();
        for i in 0..apps.connections {
            let port = apps.base_port.wrapping_add(i as u16);
            let active = apps.connect_to.is_some();
            let (send_key, recv_key) = if active {
                (key_from_active(i), key_from_passive(i))
            } else {
                (key_from_passive(i), key_from_active(i))
            };
            if !active {
                let l = stack
                    .tcp_listen(Endpoint::new(Ipv4Address::UNSPECIFIED, port), 4, None)
                    .map_err(|error| NodeError::Listen { port, error })?;
                socks.insert(l, Sock::Listener(conns.len()));
            }
            conns.push(Conn {
                program: Program::new(i, role, apps.message, apps.bytes, apps.requests),
                send_key,
                recv_key,
                port,
                handle: None,
                thread: if active {
                    Thread::Queued
                } else {
                    Thread::Asleep(Want::Connect)
                },
                connected: false,
                acked_pub: 0,
                placed_pub: 0,
                inbox: 0,
                engine_connected: false,
                engine_acked: 0,
                engine_placed: 0,
                unsent: 0,
                engine_sent: 0,
                rx_blocked: false,
                connect_posted: false,
                notify_pending: false,
                spins: [SpinBudget::new(spec.host_spin); 3],
                spinning: None,
            });
        }
        let mut node = MachineNode {
            stack,
            pattern,
            prices,
            host,
            engine,
            bus,
            events: Agenda::new(),
            last_at: Instant::ZERO,
            same_instant: 0,
            stalled: false,
            rx_pending: VecDeque::new(),
            rx_scheduled: false,
            rx_jobs: 0,
            irq_count: 0,
            irq_generation: 0,
            irq_timer_armed: false,
            deadline: None,
            conns,
            socks,
            tx_ring: tcp.tx_buffer as u64,
            rx_ring: tcp.rx_buffer as u64,
            counters: MachineCounters::default(),
            log: 0xcbf2_9ce4_8422_2325,
            peer: apps.connect_to,
            free: spec.is_free(),
            ready: VecDeque::new(),
            spec,
        };
        if apps.connect_to.is_some() {
            for t in 0..node.conns.len() {
                if node.free {
                    node.ready.push_back(t);
                } else {
                    node.push(
                        Instant::ZERO,
                        Ev::Arrive(Cpu::Host, Work::Thread { t, woken: false }),
                    );
                }
            }
        }
        if !node.free {
            node.arm_deadline(Instant::ZERO);
        }
        Ok(node)
    }
}

impl MachineNode {
    /// The stack.
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    /// What the node is made of.
    pub fn spec(&self) -> &NodeSpec {
        &self.spec
    }

    /// Everything counted so far.
    pub fn counters(&self) -> &MachineCounters {
        &self.counters
    }

    /// Busy time of each resource so far (work accepted, counted at its
    /// service start).
    pub fn busy(&self) -> Busy {
        Busy {
            host: self.host.server.stats().busy,
            engine: self.engine.server.stats().busy,
            bus: self.bus.stats().busy,
        }
    }

    /// Busy time of each resource up to `t`: the work accepted, less the
    /// part of it that lies after `t`. Exact for any `t` no earlier than
    /// the start of the last job accepted (a job is accepted when it
    /// starts on a CPU, when it arrives at the bus).
    pub fn busy_at(&self, t: Instant) -> Busy {
        let upto = |s: &Server| {
            s.stats()
                .busy
                .saturating_sub(s.free_at().saturating_duration_since(t))
        };
        Busy {
            host: upto(&self.host.server)
                .saturating_add(Duration::from_nanos(self.counters.spin_ns)),
            engine: upto(&self.engine.server),
            bus: upto(&self.bus),
        }
    }

    /// Interrupts the host CPU has taken: the NIC's without offload; with
    /// offload the NIC interrupts the engine, and the host is interrupted
    /// only by the completions that wake a sleeping program.
    pub fn host_interrupts(&self) -> u64 {
        if self.spec.offload {
            self.counters.completions
        } else {
            self.counters.interrupts
        }
    }

    /// Each resource's job counts and waits.
    pub fn server_stats(&self) -> [(&'static str, ServerStats); 3] {
        [
            ("host", *self.host.server.stats()),
            ("engine", *self.engine.server.stats()),
            ("bus", *self.bus.stats()),
        ]
    }

    /// The event log's hash: every job's (start, kind, bytes, service)
    /// folded in, FNV-1a. Same configuration and seed, same hash.
    pub fn event_hash(&self) -> u64 {
        self.log
    }

    /// What each connection's program saw.
    pub fn results(&self) -> impl Iterator<Item = &ConnResult> {
        self.conns.iter().map(|c| &c.program.result)
    }

    /// The role of this node's programs.
    pub fn role(&self) -> Option<Role> {
        self.conns.first().map(|c| c.program.role)
    }

    /// Every program whose end finishes the run (sinks, rr clients) has
    /// finished (or its connection failed).
    pub fn finished(&self) -> bool {
        self.conns
            .iter()
            .all(|c| !c.program.role.measures() || c.program.finished())
    }

    /// When a program here first moved data.
    pub fn first_data(&self) -> Option<Instant> {
        self.results().filter_map(|r| r.first_data).min()
    }

    /// Whether the node stopped because events kept coming at one instant.
    pub fn stalled(&self) -> bool {
        self.stalled
    }
}

/// The event loop.
impl MachineNode {
    fn push(&mut self, at: Instant, ev: Ev) {
        self.events.push(at, ev);
    }

    fn stack_cpu(&self) -> Cpu {
        if self.spec.offload {
            Cpu::Engine
        } else {
            Cpu::Host
        }
    }

    fn cpu_mut(&mut self, c: Cpu) -> &mut CpuState {
        match c {
            Cpu::Host => &mut self.host,
            Cpu::Engine => &mut self.engine,
        }
    }

    /// `work` joins `cpu`'s queue at `now`.
    fn arrive(&mut self, now: Instant, cpu: Cpu, work: Work) {
        let st = self.cpu_mut(cpu);
        st.queue.push_back((now, work));
        if !st.start_scheduled {
            st.start_scheduled = true;
            let at = now.max(st.server.free_at());
            self.push(at, Ev::Start(cpu));
        }
    }

    /// Processes every event due by `now`.
    fn advance(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        while !self.stalled {
            let Some((at, ev)) = self.events.pop(now) else {
                break;
            };
            if at == self.last_at {
                self.same_instant += 1;
                if self.same_instant > STALL_LIMIT {
                    self.stalled = true;
                    break;
                }
            } else {
                self.last_at = at;
                self.same_instant = 0;
            }
            self.handle(at, ev, out);
        }
    }

    fn handle(&mut self, at: Instant, ev: Ev, out: &mut Vec<SimFrame>) {
        match ev {
            Ev::RxDma { frame, info } => self.nic_rx(at, frame, info),
            Ev::IrqTimer { generation } => {
                if generation == self.irq_generation && self.irq_timer_armed {
                    self.irq_timer_armed = false;
                    let due = if self.spec.nic.napi {
                        !self.rx_scheduled && !self.rx_pending.is_empty()
                    } else {
                        // Frames not yet announced: the NIC interrupts,
                        // whether or not a job has taken them since.
                        self.irq_count > 0
                    };
                    if due {
                        self.raise(at, true);
                    }
                }
            }
            Ev::Start(cpu) => self.start(cpu, at),
            Ev::Arrive(cpu, work) => self.arrive(at, cpu, work),
            Ev::RxDone => {
                self.rx_jobs = self.rx_jobs.saturating_sub(1);
                // Without NAPI the frames left have their own interrupts
                // taken, raised or coming (a job queued, frames counted, a
                // timer armed); only frames none will announce are polled
                // again.
                let announced = !self.spec.nic.napi
                    && (self.rx_jobs > 0 || self.irq_count > 0 || self.irq_timer_armed);
                if self.rx_pending.is_empty() || announced {
                    self.rx_scheduled = self.rx_jobs > 0;
                    if self.spec.nic.napi {
                        self.irq_count = 0;
                    }
                } else {
                    // NAPI: more arrived while the job ran; poll again
                    // without an interrupt.
                    let cpu = self.stack_cpu();
                    self.rx_jobs += 1;
                    self.arrive(at, cpu, Work::Rx { irq: false });
                }
            }
            Ev::Deadline(t) => {
                if self.deadline == Some(t) {
                    self.deadline = None;
                    let cpu = self.stack_cpu();
                    self.arrive(at, cpu, Work::Timer);
                }
            }
            Ev::TxDma(frames) => self.tx_dma(at, frames),
            Ev::Emit(f) => out.push(f),
            Ev::Publish {
                conn,
                acked,
                placed,
                connected,
                failed,
            } => self.publish(at, conn, acked, placed, connected, failed),
            Ev::Complete { conn } => {
                if let Some(c) = self.conns.get_mut(conn) {
                    c.inbox += 1;
                }
                self.wake(at, conn);
            }
        }
    }

    /// Wakes program `t` if it sleeps.
    fn wake(&mut self, at: Instant, t: usize) {
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        if let Thread::Asleep(_) = c.thread {
            c.thread = Thread::Queued;
            self.arrive(at, Cpu::Host, Work::Thread { t, woken: true });
        }
    }
}

impl Node for MachineNode {
    fn receive(&mut self, now: Instant, frame: &[u8], info: RxInfo, out: &mut Vec<SimFrame>) {
        if self.free {
            self.free_receive(now, frame, info, out);
            return;
        }
        self.advance(now, out);
        self.counters.rx_frames += 1;
        let done = self.dma(now, 1, frame.len() as u64, 8);
        self.push(
            done,
            Ev::RxDma {
                frame: frame.to_vec(),
                info,
            },
        );
        self.advance(now, out);
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        if self.free {
            self.free_poll(now, out);
            return;
        }
        self.advance(now, out);
    }

    fn poll_at(&self) -> Option<Instant> {
        if self.stalled {
            return None;
        }
        if self.free {
            return self.free_poll_at();
        }
        self.events.next_at()
    }
}
