//! One attached program: its region, its sockets, its commands.
//!
//! [`SessionCore`] is the session without I/O. It reads the program's
//! commands from the region's command ring, carries them out against the
//! stack, moves received bytes into the sockets' rings (or straight into
//! buffers the program posted), and publishes completions and socket
//! events; all of that is memory, which may be a `memfd` mapping shared
//! with another process or an ordinary vector. The rest — ringing the
//! program's doorbells, reading and writing its private memory — goes
//! through the [`Program`] trait: `Fds` (fds.rs) is the thin outer layer
//! for a real program (eventfds, `process_vm_readv`/`writev`, the Unix
//! socket it attached on — in another process, or in this one through
//! `crate::app`), `Local` (local.rs) a program made of vectors and
//! counters for unit tests and fuzzing. `sim.rs` drives a core against the
//! engine's stack and a peer stack in virtual time, as the stack's own
//! tests do; it and `Local` are built with the tests and with feature
//! `fuzzing` only.
//!
//! By concern: `command.rs` (one function per command) and `opts.rs`,
//! `send.rs`, `recv.rs` (receive, placement, releases, readiness),
//! `adopt.rs` (connections moving between sessions), `close.rs`,
//! `wake.rs`, `sock.rs` (a socket's state and role), `translate.rs`
//! (errno and the ABI's numbers). What a turn needs from the engine and the
//! host service travels in one [`Ctx`].

mod adopt;
mod close;
mod command;
mod fds;
mod ids;
#[cfg(any(test, feature = "fuzzing"))]
mod local;
mod opts;
mod program;
mod ready;
mod recv;
// The session's direct hold on its program's shared memory: its only
// `unsafe` outside the tests.
#[allow(unsafe_code)]
mod region;
mod send;
mod share;
#[cfg(any(test, feature = "fuzzing"))]
mod sim;
mod sock;
#[cfg(test)]
#[allow(unsafe_code)]
mod tests;
mod translate;
mod wake;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;

use softoe_abi::{
    CMP_RELEASE, CONGESTION_CUBIC, CONGESTION_RENO, Command, Completion, Consumer, Producer,
    Region, RingError, errno,
};
use softoe_stack::{Algorithm, Events, Instant, SocketHandle, Stack};
use tracing::{trace, warn};

use crate::emulate::{AccessMeter, nanos};
use crate::host::{HostConfig, SessionStat};
use crate::memory::Memory;
pub(super) use adopt::Adopt;
use close::Retiring;
pub(super) use fds::{Fds, Session};
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use local::Local;
pub(crate) use program::Program;
pub(super) use share::{Joining, Shares};
#[cfg(feature = "fuzzing")]
pub use sim::drive_commands;
use sock::{HOLDS, HSock};
#[cfg(test)]
pub(crate) use translate::linux_state;
pub(crate) use translate::state_of_linux;

/// Commands taken from one session per step, so one program cannot starve
/// the others or the network.
const CMD_BUDGET: usize = 256;

/// Completions held back while the program's ring is full, before the
/// engine stops taking its commands (backpressure, bounded memory).
const OVERFLOW_MAX: usize = 4096;

type Result<T> = std::result::Result<T, i32>;

/// Socket `id` of `socks` as its program may use it (not detached). A
/// free function, so that the rest of the session stays reachable while
/// the socket is borrowed.
fn usable(socks: &mut [Option<HSock>], id: u32) -> Result<&mut HSock> {
    socks
        .get_mut(id as usize)
        .and_then(Option::as_mut)
        .filter(|s| s.detached.is_none())
        .ok_or(errno::EBADF)
}

/// What a session's turn works with besides the session itself: the
/// engine's clock, stack and memory, the host service's settings, and its
/// table of which session (by slot) owns which stack socket. Made once per
/// session per turn; the session's commands pass it along.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    /// The engine's time for this turn.
    pub(crate) now: Instant,
    /// The stack every session's sockets live in.
    pub(crate) stack: &'a mut Stack,
    /// The host service's settings.
    pub(crate) cfg: &'a HostConfig,
    /// This session's slot in the host service's table.
    pub(crate) slot: usize,
    /// Which session owns each stack socket: a socket this session makes
    /// is entered with `slot`, so its stack events come here.
    pub(crate) owner: &'a mut HashMap<SocketHandle, usize>,
    /// Connections more than one session holds (`share.rs`).
    pub(crate) shares: &'a mut Shares,
    /// Scratch bytes (a UDP datagram on its way in or out).
    pub(crate) scratch: &'a mut Vec<u8>,
    /// The engine's memory: the regions payload references name.
    pub(crate) mem: &'a mut Memory,
}

/// One attached program's session, sans I/O: its region (in ordinary
/// memory, shared with the program or not), its sockets, its commands.
/// What it does to the program besides the region goes through `io`
/// ([`Program`]): `Fds` for a program in another process, `Local` in tests
/// and fuzzing.
#[derive(Debug)]
pub(crate) struct SessionCore<P> {
    pub(super) id: u32,
    pub(super) pid: i32,
    uid: u32,
    /// Rings the program's doorbells, reads and writes its memory.
    io: P,
    region: Region,
    /// The data area as a `Memory` region (payload references name it).
    mem: Option<u32>,
    cmds: Consumer<Command>,
    cmps: Producer<Completion>,
    socks: Vec<Option<HSock>>,
    /// Which ids in `socks` are taken (`SessionCore::new_id`).
    ids: ids::Ids,
    /// Sockets in `socks`, and how many of them are detached: kept as they
    /// change, so `softoe stat`'s figures cost nothing per refresh.
    open_n: usize,
    detached_n: usize,
    /// Most sockets this session may have open, given what its user's
    /// other sessions hold (`UserLimits::sockets`; set by the host service
    /// before each turn), and how many of its own the user's count has.
    pub(super) sock_limit: usize,
    pub(super) sock_counted: usize,
    /// Whether a socket refused for the user's limit has been logged.
    limit_said: bool,
    /// Socket ids to serve this turn (each once: `marked`).
    dirty: Vec<u32>,
    /// Whether each socket id is in `dirty`. Per id, not per socket: a
    /// socket closed and another opened on its id in one batch leave the
    /// id listed once (per socket, a batch of opens and closes longer
    /// than the table listed it once per socket and outgrew `dirty`).
    marked: Vec<bool>,
    /// The list `step` serves from: `dirty` is swapped in here as the
    /// turn's sockets are served, and this one, empty, takes the marks
    /// made meanwhile. Both are made with room for every socket and only
    /// swap, so neither a mark nor a turn allocates. Empty between steps.
    serving: Vec<u32>,
    /// Sockets whose receive ring was full with more in the stack.
    blocked: Vec<u32>,
    /// Whether each socket id is in `blocked`: the membership test at
    /// O(1), not a search of `blocked` per socket that blocks (quadratic
    /// with thousands of full rings). Per id, not per socket, as `blocked`
    /// holds ids: an id stays listed across its socket's close and the next
    /// socket to take it until the walk in `step` drops it.
    in_blocked: Vec<bool>,
    by_handle: HashMap<SocketHandle, u32>,
    retiring: HashMap<SocketHandle, Retiring>,
    overflow: VecDeque<Completion>,
    /// Events or completions the program has not been woken for.
    unwoken: u32,
    first_unwoken: Option<Instant>,
    /// Engine copy rings no socket uses now.
    free_copy: Vec<(u32, u64)>,
    pub(super) dead: bool,
    /// When the engine found the program gone (its sockets closed then).
    pub(super) gone_at: Option<std::time::Instant>,
    /// The session's event count: the last stamp given a slot
    /// (`wake::publish`), so the program can order sockets by when they
    /// became ready.
    clock: u64,
    commands: u64,
    rejected: u64,
    wakeups: u64,
    /// Bytes placed in posted receive buffers.
    direct: u64,
    /// `ADOPT`s waiting for the host service (they name another session):
    /// (tag, the socket id reserved here, the request).
    pub(super) adopts: Vec<(u64, u32, Adopt)>,
    /// Shared listeners closed here this turn: the host service hands
    /// their ownership on.
    pub(super) unshared: Vec<SocketHandle>,
    /// Shared connections this session's sockets left this turn (closed
    /// while others hold them): the host service routes their events to
    /// the others only, and has the last holder look at its socket again.
    pub(super) unshared_conns: Vec<SocketHandle>,
    /// Closed or moved connections whose sent bytes are not all
    /// acknowledged yet (their `Retiring` entries): released as soon as
    /// they are, not when the stack lets the socket go (after TIME-WAIT).
    acking: Vec<SocketHandle>,
    /// Closed connections still handing queued zero-copy buffers to the
    /// stack: they close for real when the queue is empty.
    draining: Vec<u32>,
    /// `serve`'s completions for one socket, kept between calls (no
    /// allocation per release or placed read; made with room for as many
    /// releases at once as a socket has sends in flight, `HOLDS`).
    done_buf: Vec<Completion>,
    /// Counts (and delays, when memory is emulated slower) every access to
    /// the program's memory: commands taken, completions and events
    /// published, doorbells rung; times commands and served sockets.
    pub(super) meter: AccessMeter,
}

/// Free copy rings a session keeps for its next connections.
const KEPT_COPY_RINGS: usize = 8;

impl<P: Program> SessionCore<P> {
    /// A session on `region`, freshly made (`Region::init`) and not yet
    /// seen by the program, for process `pid` of user `uid`, whose program
    /// `io` reaches.
    pub(crate) fn new(id: u32, pid: i32, uid: u32, region: Region, io: P) -> SessionCore<P> {
        let layout = *region.layout();
        let cmds = region.command_consumer();
        let cmps = region.completion_producer();
        SessionCore {
            id,
            pid,
            uid,
            io,
            region,
            mem: None,
            cmds,
            cmps,
            socks: (0..layout.socks()).map(|_| None).collect(),
            ids: ids::Ids::new(layout.socks() as usize),
            open_n: 0,
            detached_n: 0,
            sock_limit: usize::MAX,
            sock_counted: 0,
            limit_said: false,
            // Each holds a socket at most once: sized for every socket up
            // front, so the first socket to block mid-stream does not
            // allocate (the allocation test caught `blocked` growing on
            // the AF_XDP port's slower receive).
            dirty: Vec::with_capacity(layout.socks() as usize),
            serving: Vec::with_capacity(layout.socks() as usize),
            marked: vec![false; layout.socks() as usize],
            blocked: Vec::with_capacity(layout.socks() as usize),
            in_blocked: vec![false; layout.socks() as usize],
            by_handle: HashMap::new(),
            retiring: HashMap::new(),
            overflow: VecDeque::new(),
            unwoken: 0,
            first_unwoken: None,
            free_copy: Vec::new(),
            dead: false,
            gone_at: None,
            clock: 0,
            commands: 0,
            rejected: 0,
            wakeups: 0,
            direct: 0,
            adopts: Vec::new(),
            unshared: Vec::new(),
            unshared_conns: Vec::new(),
            acking: Vec::new(),
            draining: Vec::new(),
            done_buf: Vec::with_capacity(HOLDS),
            meter: AccessMeter::default(),
        }
    }

    /// The region the session works on.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn region(&self) -> Region {
        self.region
    }

    /// The program, as the session reaches it.
    #[cfg(test)]
    pub(crate) fn program(&mut self) -> &mut P {
        &mut self.io
    }

    pub(super) fn stat(&self) -> SessionStat {
        SessionStat {
            id: self.id,
            pid: self.pid,
            uid: self.uid,
            sockets: self.open_n,
            closing: self.retiring.len(),
            detached: self.detached_n,
            commands: self.commands,
            rejected: self.rejected,
            direct: self.direct,
            wakeups: self.wakeups,
            dead: self.dead,
        }
    }

    /// Tells the program, before it sees the region, the interface the
    /// engine's port is on and the congestion control algorithm sockets
    /// get by default.
    pub(super) fn tell(&self, device: Option<&str>, congestion: Algorithm) {
        if let Some(d) = device {
            self.region.set_device(d.as_bytes());
        }
        self.region.set_congestion(match congestion {
            Algorithm::NewReno => CONGESTION_RENO,
            _ => CONGESTION_CUBIC,
        });
    }

    fn mark(&mut self, id: u32) {
        if let Some(Some(_)) = self.socks.get(id as usize)
            && let Some(m) = self.marked.get_mut(id as usize)
            && !*m
        {
            *m = true;
            self.dirty.push(id);
        }
    }

    pub(crate) fn stack_event(&mut self, h: SocketHandle, e: Events) {
        trace!(
            session = self.id,
            ?h,
            ?e,
            known = self.by_handle.contains_key(&h),
            "stack event"
        );
        if let Some(&id) = self.by_handle.get(&h) {
            self.mark(id);
        } else if e.contains(Events::RELEASED)
            && let Some(r) = self.retiring.remove(&h)
        {
            self.release(r);
        }
    }

    fn complete(&mut self, c: Completion) {
        self.unwoken += 1;
        if self.overflow.is_empty() && self.cmps.push(&c).is_ok() {
            self.meter.access();
        } else if !self.dead {
            self.overflow.push_back(c);
        }
    }

    fn complete_release(&mut self, tag: u64, sock: u32, result: i64) {
        self.complete(Completion {
            tag,
            result,
            sock,
            flags: CMP_RELEASE,
            aux: 0,
        });
    }

    /// Socket `id` as its program may use it (not detached).
    fn sock(&mut self, id: u32) -> Result<&mut HSock> {
        usable(&mut self.socks, id)
    }

    /// Socket `id` for a send.
    fn sending(&mut self, id: u32) -> Result<&mut HSock> {
        usable(&mut self.socks, id)
    }

    /// Gives the engine's memory back for the free copy rings past
    /// [`KEPT_COPY_RINGS`]: a session that once had many connections
    /// sending under `overlap` (512 KiB each) keeps a few rings for the
    /// next ones, not its peak for as long as it lives.
    fn trim_copy_rings(&mut self, mem: &mut Memory) {
        while self.free_copy.len() > KEPT_COPY_RINGS {
            if let Some((r, _)) = self.free_copy.pop() {
                mem.remove(r);
            }
        }
    }

    fn copy_ring(&mut self, mem: &mut Memory, len: u64) -> (u32, u64) {
        if let Some(i) = self.free_copy.iter().position(|c| c.1 == len) {
            return self.free_copy.swap_remove(i);
        }
        (mem.add(vec![0u8; len as usize].into_boxed_slice()), len)
    }

    /// Completions held back, then the program's commands (a budget's
    /// worth); whether any was taken.
    fn take_commands(&mut self, cx: &mut Ctx<'_>) -> bool {
        // Completions held back go first, in order.
        while let Some(c) = self.overflow.front() {
            if self.cmps.push(c).is_err() {
                break;
            }
            self.meter.access();
            self.overflow.pop_front();
        }
        match self.run_commands(cx, CMD_BUDGET) {
            Ok(n) => n > 0,
            Err(e) => {
                warn!(session = self.id, pid = self.pid, error = %e, "command ring broken: ending the session");
                self.rejected += 1;
                self.end(cx.now, cx.stack, cx.owner, cx.shares);
                true
            }
        }
    }

    /// Carries out up to `limit` of the program's commands (fewer while
    /// completions are held back at their bound); how many.
    fn run_commands(
        &mut self,
        cx: &mut Ctx<'_>,
        limit: usize,
    ) -> std::result::Result<usize, RingError> {
        let mut taken = 0;
        let mut res = Ok(());
        while taken < limit && self.overflow.len() < OVERFLOW_MAX {
            match self.cmds.read() {
                Ok(Some(c)) => {
                    taken += 1;
                    self.meter.access();
                    if self.meter.profiling() {
                        let t0 = std::time::Instant::now();
                        let d0 = self.meter.delay_nanos();
                        let bytes = self.command(cx, &c);
                        let delayed = self.meter.delay_nanos().saturating_sub(d0);
                        let took = nanos(t0.elapsed()).saturating_sub(delayed);
                        self.meter.command(took, bytes);
                    } else {
                        self.command(cx, &c);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if taken > 0 {
            self.cmds.release();
            self.commands += taken as u64;
        }
        res.map(|()| taken)
    }

    /// One turn: commands, then the sockets that changed, then wake-ups.
    pub(crate) fn step(&mut self, cx: &mut Ctx<'_>) -> bool {
        let now = cx.now;
        let mut any = false;
        // A dead program's session only sends what it had queued.
        if !self.dead {
            any |= self.take_commands(cx);
        }
        if !self.acking.is_empty() {
            self.moved_acked(cx.stack);
        }
        if !self.draining.is_empty() {
            self.drained(now, cx.stack, cx.shares);
        }
        // A full receive ring the program has read from takes more. The
        // fence pairs with the program's between moving `rx_head` and
        // reading `EV_RXFULL`: it either sends `RXDONE` or we see the head.
        std::sync::atomic::fence(Ordering::SeqCst);
        let mut i = 0;
        while i < self.blocked.len() {
            let id = self.blocked[i];
            let (blocked, moved) = match (&self.socks.get(id as usize), self.region.slot(id)) {
                (Some(Some(s)), Some(v)) => (s.rx_blocked, v.rx_head() != s.rx_head),
                _ => (false, false),
            };
            if !blocked {
                self.blocked.swap_remove(i);
                if let Some(b) = self.in_blocked.get_mut(id as usize) {
                    *b = false;
                }
                continue;
            }
            if moved {
                self.mark(id);
            }
            i += 1;
        }
        // The turn's sockets move to `serving`; `dirty` becomes the empty
        // spare, with its room, for sockets marked while these are served.
        std::mem::swap(&mut self.dirty, &mut self.serving);
        // Out of `self` while it is walked (an empty `Vec` stands in: it
        // never allocates, nothing pushes to `serving`).
        let mut serving = std::mem::take(&mut self.serving);
        // The stack writes TCP rings itself: they need the data area as a
        // `Memory` region (made once).
        let data = (!serving.is_empty()).then(|| self.data_region(cx.mem));
        for &id in &serving {
            // Marks from here on list it again, for the next turn.
            if let Some(m) = self.marked.get_mut(id as usize) {
                *m = false;
            }
            let profiled = self.meter.profiling().then(|| {
                (
                    std::time::Instant::now(),
                    self.meter.delay_nanos(),
                    self.received(id),
                )
            });
            let served = self.serve(cx.stack, cx.shares, id, cx.scratch, data);
            if let Some((t0, d0, r0)) = profiled {
                let delayed = self.meter.delay_nanos().saturating_sub(d0);
                let took = nanos(t0.elapsed()).saturating_sub(delayed);
                let bytes = self.received(id).saturating_sub(r0);
                self.meter.served(took, bytes);
            }
            if served {
                any = true;
                self.ring_waiters(id);
            }
            if matches!(self.socks.get(id as usize), Some(Some(s)) if s.rx_blocked)
                && let Some(listed) = self.in_blocked.get_mut(id as usize)
                && !*listed
            {
                *listed = true;
                self.blocked.push(id);
            }
        }
        // Back, empty, with its room: the spare for the next turn. Marks
        // made while serving stay in `dirty` for the next turn.
        serving.clear();
        self.serving = serving;
        self.trim_copy_rings(cx.mem);
        if !self.dead {
            self.wake(now, cx.cfg);
        }
        any
    }

    /// Bytes received for the program so far on socket `id` (into its ring,
    /// UDP headers included) and into its posted buffers (all sockets'):
    /// the difference across a `serve` is what that served.
    fn received(&self, id: u32) -> u64 {
        let ring = match self.socks.get(id as usize) {
            Some(Some(s)) => s.rx_tail,
            _ => 0,
        };
        ring.wrapping_add(self.direct)
    }

    /// The lowest free socket id, found in a bitmap of the ids taken
    /// (`ids.rs`): opening the 10,000th socket, or filling a hole below
    /// 10,000 open ones, reads a few words, not the table.
    ///
    /// `EMFILE` as well when the session's user has as many sockets open as
    /// one user may (`sock_limit`).
    fn new_id(&mut self) -> Result<u32> {
        if self.open_n >= self.sock_limit {
            if !self.limit_said {
                self.limit_said = true;
                warn!(
                    session = self.id,
                    pid = self.pid,
                    uid = self.uid,
                    open = self.open_n,
                    "socket refused (EMFILE): the user has as many sockets open as one user \
                     may ([limits] user_sockets)"
                );
            }
            return Err(errno::EMFILE);
        }
        self.ids
            .lowest_free()
            .filter(|&i| (i as usize) < self.socks.len())
            .ok_or(errno::EMFILE)
    }

    /// Sockets open in this session now.
    pub(super) fn open_sockets(&self) -> usize {
        self.open_n
    }

    /// The user the program was when it attached (whose limits it uses).
    pub(super) fn attach_uid(&self) -> u32 {
        self.uid
    }

    /// Bytes of the session's region.
    pub(super) fn region_len(&self) -> u64 {
        self.region.layout().region_len()
    }

    /// Puts `s` in slot `id` (which `new_id` found free).
    fn occupy(&mut self, id: u32, s: HSock) {
        let detached = s.detached.is_some();
        if let Some(slot) = self.socks.get_mut(id as usize) {
            let before = slot.replace(s);
            self.count(before.as_ref(), -1);
            self.open_n += 1;
            self.detached_n += usize::from(detached);
            self.ids.set(id);
        }
    }

    /// Counts `s` in (`+1`) or out (`-1`) of the figures `stat` shows.
    fn count(&mut self, s: Option<&HSock>, by: isize) {
        if let Some(s) = s {
            self.open_n = self.open_n.saturating_add_signed(by);
            if s.detached.is_some() {
                self.detached_n = self.detached_n.saturating_add_signed(by);
            }
        }
    }

    /// Socket `id`'s slot is empty again.
    fn forget(&mut self, id: u32) {
        if let Some(s) = self.socks.get_mut(id as usize) {
            let before = s.take();
            self.count(before.as_ref(), -1);
            self.ids.clear(id);
        }
    }

    fn install(&mut self, id: u32, s: HSock) {
        if let Some(v) = self.region.slot(id) {
            v.reset();
            v.bump_seq();
        }
        if let Some(h) = s.h {
            self.by_handle.insert(h, id);
        }
        self.occupy(id, s);
    }

    /// Stack sockets this session still answers for.
    pub(super) fn handles(&self) -> Vec<SocketHandle> {
        self.retiring
            .keys()
            .chain(self.by_handle.keys())
            .copied()
            .collect()
    }

    /// Gives the region back.
    pub(crate) fn reclaim(self, mem: &mut Memory) {
        if let Some(m) = self.mem {
            mem.remove(m);
        }
        for (r, _) in self.free_copy {
            mem.remove(r);
        }
        // The program, and with it the region's memory, goes last.
    }
}
