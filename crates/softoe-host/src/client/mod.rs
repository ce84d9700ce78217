//! The attachment: one region per process, shared by all its threads.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use softoe_abi::{
    ATTACH_MAGIC, Command, Completion, Consumer, ENGINE_SLEEPING, Hello, Producer, Region, Request,
    SESSION_CLOSED, VERSION, Welcome, encode, errno,
};

use crate::alloc::Alloc;
use crate::errno::{errno_err, status_err};
use crate::spin::Spin;
use crate::sys::{self, Mapping};

/// What to ask the engine for when attaching.
#[derive(Clone, Debug)]
pub struct Config {
    /// The engine's socket (default: `$SOFTOE_SOCKET`, else
    /// `/run/softoe/host.sock`).
    pub path: PathBuf,
    /// Command ring entries.
    pub cmd_entries: u32,
    /// Completion ring entries.
    pub cmp_entries: u32,
    /// Socket slots.
    pub sockets: u32,
    /// Data-area bytes (rings and zero-copy buffers; `$SOFTOE_DATA_MB`,
    /// default 256 MiB). Under a finite `RLIMIT_AS` an attach takes at
    /// most a quarter of the room the limit leaves (and smaller rings
    /// with it): see [`Client::attach_over`].
    pub data_len: u64,
    /// Receive ring per socket.
    pub rx_ring: u64,
    /// Send ring per socket (the `copy` policy).
    pub tx_ring: u64,
    /// How long a waiting thread spins before it sleeps on its doorbell
    /// (`$SOFTOE_SPIN_US`).
    pub spin: Duration,
    /// Blocking reads of at least this many bytes that find the receive
    /// ring empty post their buffer to the engine, which places the next
    /// bytes straight into it (direct placement: the program's core copies
    /// nothing); 0 turns it off (`$SOFTOE_DIRECT_KB`, default 16).
    pub direct_min: usize,
    /// With the `overlap` policy, writes shorter than this go through the
    /// send ring instead (the host copies them): for a few bytes the
    /// engine's `process_vm_readv` costs more than the copy it saves —
    /// about 2 µs of the engine's time per write, a sixth of its cost per
    /// 64-byte request in a profile (`$SOFTOE_COPY_BELOW`, bytes; default
    /// 4096; 0: never).
    pub copy_below: usize,
}

impl Default for Config {
    fn default() -> Config {
        let env_u64 = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        Config {
            path: std::env::var_os("SOFTOE_SOCKET")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/run/softoe/host.sock")),
            cmd_entries: 1024,
            cmp_entries: 4096,
            sockets: 4096,
            data_len: env_u64("SOFTOE_DATA_MB", 256) << 20,
            rx_ring: env_u64("SOFTOE_RX_KB", 512) << 10,
            tx_ring: env_u64("SOFTOE_TX_KB", 512) << 10,
            spin: Duration::from_micros(env_u64("SOFTOE_SPIN_US", 30)),
            direct_min: (env_u64("SOFTOE_DIRECT_KB", 16) << 10) as usize,
            copy_below: env_u64("SOFTOE_COPY_BELOW", 4096) as usize,
        }
    }
}

/// Room made at attach in the dispatcher's maps of completions nobody has
/// claimed yet (answers and zero-copy releases).
const DISPATCH_CAPACITY: usize = 64;

/// Completions the dispatcher has taken off the ring, by tag.
#[derive(Debug, Default)]
pub(crate) struct Dispatch {
    pub(crate) done: HashMap<u64, Completion>,
    /// Tags whose release completion frees data-area spans.
    frees: HashMap<u64, Vec<(u64, u64)>>,
    /// Tags nobody waits for (quiet commands, abandoned waits): dropped.
    pub(crate) released: HashMap<u64, Completion>,
    /// Tags whose answer nobody will read (a non-blocking connect):
    /// dropped when they come.
    abandoned: std::collections::HashSet<u64>,
    /// A thread is asleep on the doorbell; others wait on the condvar.
    sleeper: bool,
}

#[derive(Debug)]
pub(crate) struct Inner {
    region: Region,
    /// Held to unmap on drop, and for its length.
    map: Mapping,
    /// Held open: when every process holding it has gone, the engine
    /// ends the session.
    /// The attach connection: bell registrations go over it, and its
    /// hang-up says the engine is gone.
    conn: OwnedFd,
    /// `conn`'s identity (device, inode) when attached.
    conn_id: (u64, u64),
    /// The engine's end of `conn` closed (seen by a nap): every wait ends
    /// as if the engine had closed the session.
    engine_gone: std::sync::atomic::AtomicBool,
    /// A call on `conn` went unanswered: its answer may come late and be
    /// taken for another's, so none is made again.
    conn_unanswered: std::sync::atomic::AtomicBool,
    _memfd: OwnedFd,
    bell_engine: OwnedFd,
    bell_app: OwnedFd,
    cmds: Mutex<Producer<Command>>,
    cmps: Mutex<Consumer<Completion>>,
    dispatch: Mutex<Dispatch>,
    cond: Condvar,
    alloc: Mutex<Alloc>,
    next_tag: AtomicU64,
    pub(crate) cfg: Config,
    session: u32,
    /// One bell registration at a time on `conn` (its answer is ours).
    conn_lock: Mutex<()>,
    /// The engine may not write this process's memory (`EPERM`: another
    /// user without the right to): reads go through the rings.
    pub(crate) direct_refused: std::sync::atomic::AtomicBool,
    /// A [`Selector`](crate::Selector) takes the region's changed bits (one
    /// per session).
    pub(crate) selector_taken: std::sync::atomic::AtomicBool,
    /// Waiter bells for threads that sleep on one socket
    /// ([`Client::lend_bell`]), registered with the engine once and reused.
    bell_pool: Mutex<Vec<LentBell>>,
    /// The engine refused another bell (all `MAX_BELLS` are taken): such
    /// sleeps use the session's doorbell.
    bells_refused: std::sync::atomic::AtomicBool,
    /// The program sandboxed itself ([`Client::seal`]):
    /// nothing more goes over the attach socket (seccomp would kill the
    /// process for a `sendmsg`).
    sandboxed: std::sync::atomic::AtomicBool,
    /// Bells made for lending so far (at most [`LENT_BELLS`]).
    bells_made: std::sync::atomic::AtomicU32,
    /// Sleeps on lent bells so far (each writes a new waiter word).
    pub(crate) sleeps: std::sync::atomic::AtomicU32,
    /// Spin budgets by kind of wait: command answers, zero-copy releases,
    /// readiness of many sockets (`poll`, a selector).
    pub(crate) cmd_spin: Spin,
    pub(crate) release_spin: Spin,
    pub(crate) poll_spin: Spin,
    /// The process that attached ([`crate::process_id`]): a child that
    /// inherited this attachment (by `fork`, or a raw `clone` no hook saw)
    /// never posts on its single-producer rings nor takes its completions.
    pid: u32,
}

/// Most bells lent to sleeping threads per session: half of what the
/// engine gives, the rest stays for waiters of the program's own (the
/// shim's `poll` and `epoll_wait`, one per thread).
const LENT_BELLS: u32 = softoe_abi::MAX_BELLS / 2;

/// A waiter bell lent to one thread for one sleep on one socket: the
/// thread writes `index + 1` into the socket's waiter word, and the engine
/// rings `fd` when the socket changes.
#[derive(Debug)]
pub(crate) struct LentBell {
    pub(crate) index: u32,
    pub(crate) fd: OwnedFd,
}

/// An attachment to an engine. Cheap to clone; every clone and every
/// socket made from it share one region.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

/// The error of a call on an attachment another process made (a child's
/// inherited copy): `EBADF`, what the child's inherited socket is to it.
/// Made without allocating: a child of a raw `clone` may have inherited
/// the allocator's lock held by another of the parent's threads.
fn foreign() -> io::Error {
    errno_err(errno::EBADF)
}

pub(crate) fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "the engine closed this session",
    )
}

/// The error for a refused attach: the errno, and the limit that refused
/// it in words when one did (the engine's configuration names it).
fn refusal(w: &Welcome) -> io::Error {
    let e = status_err(w.status);
    let v = w.region_len;
    let why = match w.limit {
        softoe_abi::LIMIT_SESSIONS => format!(
            "the engine holds {v} sessions, as many as it may (`[limits] sessions` in its \
             configuration)"
        ),
        softoe_abi::LIMIT_USER_SESSIONS => format!(
            "this user holds {v} sessions, as many as one user may (`[limits] user_sessions` in \
             the engine's configuration)"
        ),
        softoe_abi::LIMIT_USER_MEMORY => format!(
            "this user's sessions would hold more than {} MiB of shared memory, as much as one \
             user may (`[limits] user_memory` in the engine's configuration; a smaller \
             SOFTOE_DATA_MB asks for less)",
            v >> 20
        ),
        _ => return e,
    };
    let kind = e.kind();
    io::Error::new(
        kind,
        format!("the softoe engine refused to attach: {why} ({e})"),
    )
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Client {
    /// Attaches with the default [`Config`].
    pub fn attach() -> io::Result<Client> {
        Client::attach_with(Config::default())
    }

    /// Attaches to the engine at `path` with otherwise default settings.
    pub fn attach_to(path: &Path) -> io::Result<Client> {
        Client::attach_with(Config {
            path: path.to_path_buf(),
            ..Config::default()
        })
    }

    /// Attaches with `cfg`.
    pub fn attach_with(cfg: Config) -> io::Result<Client> {
        let conn = sys::connect(&cfg.path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot reach the softoe engine at {}: {e}",
                    cfg.path.display()
                ),
            )
        })?;
        Client::attach_over(conn, cfg)
    }

    /// Attaches over `conn`, a `SOCK_SEQPACKET` Unix socket already
    /// connected to an engine (`cfg.path` is not used): how a program in
    /// the engine's own process attaches (`softoe_engine::app` hands the
    /// engine the other end of a socket pair). The engine must be running
    /// or about to: this waits for its answer.
    ///
    /// Under a finite `RLIMIT_AS` the data area shrinks to leave the
    /// program room (at most a quarter of what the limit leaves; see
    /// `fit.rs`).
    pub fn attach_over(conn: OwnedFd, cfg: Config) -> io::Result<Client> {
        let cfg = fit::fit(cfg);
        let conn_id = sys::file_id(&conn).ok_or_else(io::Error::last_os_error)?;
        let hello = Hello {
            magic: ATTACH_MAGIC,
            version: VERSION,
            cmd_entries: cfg.cmd_entries,
            cmp_entries: cfg.cmp_entries,
            socks: cfg.sockets,
            data_len: cfg.data_len,
        };
        sys::send(&conn, &hello.to_bytes())?;
        let mut buf = [0u8; 64];
        let (n, fds) = sys::recv_fds::<3>(&conn, &mut buf)?;
        let w = Welcome::from_bytes(&buf[..n.min(buf.len())])
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a softoe engine"))?;
        if w.status < 0 {
            return Err(refusal(&w));
        }
        let mut fds = fds.into_iter();
        let (Some(memfd), Some(bell_engine), Some(bell_app)) = (fds.next(), fds.next(), fds.next())
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "engine sent no region",
            ));
        };
        let len = usize::try_from(w.region_len).map_err(|_| io::ErrorKind::InvalidData)?;
        let map = Mapping::shared(&memfd, len).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot map the session's region ({} MiB; an address-space limit, \
                     RLIMIT_AS, too low for it?): {e}",
                    len >> 20
                ),
            )
        })?;
        // SAFETY: the mapping is `len` bytes, page-aligned, and lives in
        // `Inner` as long as the region view and every copy of it.
        let region = unsafe { Region::attach(map.ptr(), w.region_len) }
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        let data_len = region.layout().data_len();
        let spin = cfg.spin;
        let inner = Inner {
            cmds: Mutex::new(region.command_producer()),
            cmps: Mutex::new(region.completion_consumer()),
            region,
            map,
            conn_id,
            conn,
            engine_gone: std::sync::atomic::AtomicBool::new(false),
            conn_unanswered: std::sync::atomic::AtomicBool::new(false),
            _memfd: memfd,
            bell_engine,
            bell_app,
            // Sized for the completions a program keeps waiting at once,
            // so that taking them off the ring never grows a map in
            // steady state.
            dispatch: Mutex::new(Dispatch {
                done: HashMap::with_capacity(DISPATCH_CAPACITY),
                released: HashMap::with_capacity(DISPATCH_CAPACITY),
                ..Dispatch::default()
            }),
            cond: Condvar::new(),
            alloc: Mutex::new(Alloc::new(data_len)),
            next_tag: AtomicU64::new(1),
            cfg,
            session: w.session,
            conn_lock: Mutex::new(()),
            direct_refused: std::sync::atomic::AtomicBool::new(false),
            selector_taken: std::sync::atomic::AtomicBool::new(false),
            bell_pool: Mutex::new(Vec::with_capacity(softoe_abi::MAX_BELLS as usize)),
            bells_refused: std::sync::atomic::AtomicBool::new(false),
            sandboxed: std::sync::atomic::AtomicBool::new(false),
            bells_made: std::sync::atomic::AtomicU32::new(0),
            sleeps: std::sync::atomic::AtomicU32::new(0),
            cmd_spin: Spin::new(spin),
            release_spin: Spin::new(spin),
            poll_spin: Spin::new(spin),
            pid: crate::process_id(),
        };
        let c = Client {
            inner: Arc::new(inner),
        };
        // Two bells for sleeps on sockets (a reader's and a writer's), made
        // now: registering one later allocates, and steady state must not.
        let first: Vec<LentBell> = (0..2).filter_map(|_| c.lend_bell()).collect();
        for b in first {
            c.return_bell(b);
        }
        Ok(c)
    }

    /// The engine's number for this attachment.
    pub fn session(&self) -> u32 {
        self.inner.session
    }

    /// The bytes of address space this attachment's region takes.
    pub fn region_len(&self) -> u64 {
        self.inner.map.len() as u64
    }

    /// The name of the interface the engine's port is on, as the engine
    /// told this session (`None`: not told). `SO_BINDTODEVICE` to it is
    /// what binding to softoe's interface means.
    pub fn device(&self) -> Option<String> {
        let raw = self.inner.region.device();
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let name = std::str::from_utf8(&raw[..end]).ok()?;
        (!name.is_empty()).then(|| name.to_string())
    }

    /// The congestion control algorithm the engine gives a socket that
    /// chooses none (`None`: the engine did not say).
    pub fn default_congestion(&self) -> Option<crate::Congestion> {
        crate::socket::Congestion::of_code(self.inner.region.congestion())
    }

    /// A round trip through the rings (`NOP`): the engine's command latency.
    pub fn nop(&self) -> io::Result<()> {
        self.call(&Request::Nop).map(drop)
    }

    pub(crate) fn region(&self) -> &Region {
        &self.inner.region
    }

    pub(crate) fn alloc(&self, len: u64) -> io::Result<u64> {
        lock(&self.inner.alloc).alloc(len).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("shared data area full ({len} bytes wanted): raise SOFTOE_DATA_MB"),
            )
        })
    }

    pub(crate) fn free(&self, off: u64, len: u64) {
        lock(&self.inner.alloc).free(off, len);
    }

    /// Whether this attachment is another process's: a child's copy of its
    /// parent's (one load: see [`crate::process_id`]).
    pub(crate) fn foreign(&self) -> bool {
        self.inner.pid != crate::process_id()
    }

    pub(crate) fn dead(&self) -> bool {
        self.inner.region.engine_state().load(Ordering::Acquire) == SESSION_CLOSED
            || self.inner.engine_gone.load(Ordering::Relaxed)
    }

    /// Sleeps on `bell` for up to `timeout` (see [`sys::nap`]); whether a
    /// signal ended it. A hang-up of the engine's end marks the session
    /// dead.
    pub(crate) fn nap(&self, bell: BorrowedFd<'_>, timeout: Duration) -> bool {
        match sys::nap(bell, self.inner.conn.as_fd(), timeout) {
            sys::Nap::Over => false,
            sys::Nap::Interrupted => true,
            // Only if the descriptor is still our connection: a program
            // may have closed it behind the shim's back (sshd's
            // `closefrom`) and the number now names another file, whose
            // hang-up says nothing of the engine.
            sys::Nap::EngineGone if sys::file_id(&self.inner.conn) == Some(self.inner.conn_id) => {
                tracing::warn!(session = self.inner.session, "the engine is gone");
                self.inner.engine_gone.store(true, Ordering::Relaxed);
                false
            }
            sys::Nap::EngineGone => false,
        }
    }

    /// Posts `req` under a fresh tag and returns the tag.
    pub(crate) fn submit(&self, req: &Request) -> io::Result<u64> {
        let tag = self.next_tag();
        self.push(&encode(req, tag))?;
        Ok(tag)
    }

    /// Posts `req` under a fresh tag, answered only if it fails
    /// ([`softoe_abi::CMD_QUIET`]), and returns the tag.
    pub(crate) fn submit_quiet(&self, req: &Request) -> io::Result<u64> {
        let tag = self.next_tag();
        self.push(&encode(req, tag).quiet())?;
        Ok(tag)
    }

    fn next_tag(&self) -> u64 {
        self.inner.next_tag.fetch_add(1, Ordering::Relaxed)
    }

    /// Puts `cmd` on the command ring and tells a sleeping engine.
    fn push(&self, cmd: &Command) -> io::Result<()> {
        if self.foreign() {
            return Err(foreign());
        }
        if self.dead() {
            return Err(closed());
        }
        let mut p = lock(&self.inner.cmds);
        loop {
            match p.push(cmd) {
                Ok(()) => break,
                Err(softoe_abi::RingError::Full) => {
                    // The engine is behind: give it the core for a moment.
                    self.ring_engine();
                    std::thread::yield_now();
                    if self.dead() {
                        return Err(closed());
                    }
                }
                Err(_) => return Err(closed()),
            }
        }
        drop(p);
        self.ring_engine();
        Ok(())
    }

    fn ring_engine(&self) {
        // Pairs with the engine's SeqCst store of ENGINE_SLEEPING before its
        // last look at the ring.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.inner.region.engine_state().load(Ordering::SeqCst) == ENGINE_SLEEPING {
            sys::signal(&self.inner.bell_engine);
        }
    }

    /// Posts `req` quiet with tag 0, which nobody waits for: its only
    /// answer would be an error, and that error is dropped.
    pub(crate) fn post(&self, req: &Request) -> io::Result<()> {
        self.push(&encode(req, 0).quiet())
    }

    /// Posts `req` and waits for its completion.
    pub(crate) fn call(&self, req: &Request) -> io::Result<Completion> {
        let tag = self.submit(req)?;
        self.wait_tag(tag)
    }

    /// Says nobody will wait for the answer to `tag`.
    pub(crate) fn abandon(&self, tag: u64) {
        let mut d = lock(&self.inner.dispatch);
        if d.done.remove(&tag).is_none() {
            d.abandoned.insert(tag);
        }
    }

    /// Says that span `(off, len)` of the data area is free once the
    /// release completion of `tag` arrives.
    pub(crate) fn free_on_release(&self, tag: u64, spans: Vec<(u64, u64)>) {
        let mut d = lock(&self.inner.dispatch);
        if d.released.remove(&tag).is_some() {
            drop(d);
            for (o, l) in spans {
                self.free(o, l);
            }
        } else {
            d.frees.insert(tag, spans);
        }
    }

    /// Whether the release completion of `tag` has arrived (and forgets
    /// it).
    pub(crate) fn take_release(&self, tag: u64) -> Option<Completion> {
        let mut d = lock(&self.inner.dispatch);
        self.drain(&mut d);
        d.released.remove(&tag)
    }

    /// Takes every completion off the ring (dispatcher lock held).
    fn drain(&self, d: &mut Dispatch) -> bool {
        if self.foreign() {
            // The parent's completions are the parent's to take.
            return false;
        }
        let mut c = lock(&self.inner.cmps);
        let mut any = false;
        loop {
            match c.read() {
                Ok(Some(cmp)) => {
                    any = true;
                    if cmp.tag == 0 {
                        // A posted command's error: nobody waits for it
                        // (the socket's own state reports the failure).
                        tracing::debug!(
                            sock = cmp.sock,
                            result = cmp.result,
                            "a posted command failed"
                        );
                    } else if cmp.is_release() {
                        if let Some(spans) = d.frees.remove(&cmp.tag) {
                            for (o, l) in spans {
                                lock(&self.inner.alloc).free(o, l);
                            }
                        } else {
                            d.released.insert(cmp.tag, cmp);
                        }
                    } else if !d.abandoned.remove(&cmp.tag) {
                        d.done.insert(cmp.tag, cmp);
                    }
                }
                Ok(None) => break,
                Err(_) => break,
            }
        }
        if any {
            c.release();
        }
        any
    }

    pub(crate) fn wait_tag(&self, tag: u64) -> io::Result<Completion> {
        self.block_until(None, false, &self.inner.cmd_spin, |d| d.done.remove(&tag))?
            .ok_or_else(closed)
    }

    /// Waits until `check` (run with the dispatcher locked, after taking
    /// completions) returns something, or `timeout` passes (`Ok(None)`).
    /// Spins first, then sleeps on the doorbell with the engine told to
    /// ring it. An `interruptible` wait (a socket call's, not a command's
    /// round trip) ends with `Interrupted` when a signal handler without
    /// `SA_RESTART` interrupts its sleep, as a kernel socket call does.
    pub(crate) fn block_until<T>(
        &self,
        timeout: Option<Duration>,
        interruptible: bool,
        spin: &Spin,
        mut check: impl FnMut(&mut Dispatch) -> Option<T>,
    ) -> io::Result<Option<T>> {
        let start = Instant::now();
        let max = self.inner.cfg.spin;
        let budget = spin.budget(max);
        let r = self.block_until_inner(start, timeout, interruptible, budget, &mut check);
        spin.ended(start.elapsed(), budget, max);
        r
    }

    fn block_until_inner<T>(
        &self,
        start: Instant,
        timeout: Option<Duration>,
        interruptible: bool,
        spin: Duration,
        check: &mut impl FnMut(&mut Dispatch) -> Option<T>,
    ) -> io::Result<Option<T>> {
        let deadline = timeout.map(|t| start + t);
        let inner = &*self.inner;
        let mut d = lock(&inner.dispatch);
        loop {
            self.drain(&mut d);
            if let Some(v) = check(&mut d) {
                return Ok(Some(v));
            }
            if self.dead() {
                return Err(closed());
            }
            let now = Instant::now();
            if deadline.is_some_and(|t| now >= t) {
                return Ok(None);
            }
            if now - start < spin {
                drop(d);
                std::hint::spin_loop();
                d = lock(&inner.dispatch);
                continue;
            }
            if d.sleeper {
                // Another thread sleeps on the doorbell and will wake us.
                let wait = deadline.map_or(Duration::from_millis(50), |t| {
                    t.saturating_duration_since(now)
                });
                d = inner
                    .cond
                    .wait_timeout(d, wait.min(Duration::from_millis(50)))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
                continue;
            }
            d.sleeper = true;
            let seq = inner.region.event_seq().load(Ordering::Acquire);
            inner.region.app_waiting().fetch_add(1, Ordering::SeqCst);
            drop(d);
            // Look once more after announcing the wait: an event published
            // before the announcement is seen here, one after rings us.
            let changed = inner.region.event_seq().load(Ordering::SeqCst) != seq
                || lock(&inner.cmps).available().is_ok_and(|n| n > 0);
            let mut interrupted = false;
            if !changed {
                let wait = deadline.map_or(Duration::from_millis(100), |t| {
                    t.saturating_duration_since(Instant::now())
                });
                interrupted =
                    self.nap(inner.bell_app.as_fd(), wait.min(Duration::from_millis(100)));
            }
            sys::drain(&inner.bell_app);
            inner.region.app_waiting().fetch_sub(1, Ordering::SeqCst);
            d = lock(&inner.dispatch);
            d.sleeper = false;
            inner.cond.notify_all();
            // Linux never restarts a socket call with a timeout set, nor a
            // wait (poll, select, epoll: timeout given), whatever the
            // handler's SA_RESTART says (signal(7)).
            if interrupted && interruptible && (timeout.is_some() || !sys::restart_after_signal()) {
                // What came meanwhile still counts.
                self.drain(&mut d);
                if let Some(v) = check(&mut d) {
                    return Ok(Some(v));
                }
                return Err(io::ErrorKind::Interrupted.into());
            }
        }
    }

    /// Posts any command, as written but for its (fresh) tag, and waits for
    /// its completion: for tests of the engine's checks (a well-behaved
    /// program never needs it).
    #[doc(hidden)]
    pub fn submit_raw(&self, mut cmd: Command) -> io::Result<Completion> {
        let tag = self.next_tag();
        cmd.tag = tag;
        self.push(&cmd)?;
        self.wait_tag(tag)
    }

    /// Breaks this session's command ring on purpose (tests of the engine's
    /// checks): claims a million commands more than the ring holds.
    #[doc(hidden)]
    pub fn corrupt_command_ring(&self) {
        let p = lock(&self.inner.cmds);
        let at = std::mem::offset_of!(softoe_abi::RegionHeader, cmd_tail);
        // SAFETY: `cmd_tail` is a 4-aligned word inside the mapped header,
        // only ever accessed atomically.
        let w = unsafe {
            std::sync::atomic::AtomicU32::from_ptr(self.inner.region.base().add(at).cast())
        };
        w.fetch_add(1_000_000, Ordering::Release);
        drop(p);
        self.ring_engine();
    }

    /// What a `poll` would say of socket `sock` now, from its slot alone
    /// (no lock: safe while another thread blocks in a call on it); every
    /// socket of a session that has ended has failed and hung up.
    pub fn readiness_of(&self, sock: u32) -> crate::Readiness {
        crate::socket::readiness(self, sock)
    }

    /// Whether the engine still serves this process.
    pub fn is_alive(&self) -> bool {
        !self.dead()
    }

    /// The session's event sequence: it moves after every batch of
    /// completions and socket events the engine publishes. Read it before
    /// looking at sockets; if it still holds after [`Waiter::arm`], sleeping
    /// is safe.
    pub fn event_seq(&self) -> u32 {
        self.inner.region.event_seq().load(Ordering::SeqCst)
    }

    /// Registers a doorbell of the calling thread's own, for waiting on
    /// softoe sockets and kernel descriptors in one kernel call (the shim's
    /// `poll` and `epoll_wait`). At most [`softoe_abi::MAX_BELLS`] per
    /// process.
    pub fn waiter(&self) -> io::Result<Waiter> {
        let bell = sys::eventfd()?;
        let answer = self.bell_call(softoe_abi::BellOp::Add, 0, bell.as_fd())?;
        Ok(Waiter {
            c: self.clone(),
            index: answer.index,
            bell,
            pid: std::process::id(),
        })
    }
}

impl Client {
    /// Sends a [`softoe_abi::Bell`] request with descriptor `fd` on the
    /// attach socket and returns the engine's answer.
    fn bell_call(
        &self,
        op: softoe_abi::BellOp,
        index: u32,
        fd: BorrowedFd<'_>,
    ) -> io::Result<softoe_abi::Bell> {
        if self.inner.sandboxed.load(Ordering::Relaxed) {
            // A sendmsg now could be the seccomp filter's kill.
            return Err(errno_err(errno::EPERM));
        }
        let ask = softoe_abi::Bell {
            magic: softoe_abi::BELL_MAGIC,
            op: op as u32,
            index,
            ..softoe_abi::Bell::default()
        };
        let conn = self.inner.conn.as_fd();
        let guard = lock(&self.inner.conn_lock);
        if self.inner.conn_unanswered.load(Ordering::Relaxed) {
            return Err(errno_err(errno::EIO));
        }
        sys::send_fd(conn, &ask.to_bytes(), fd)?;
        // The engine reads its sessions' sockets at least once a
        // millisecond; ten seconds (a loaded machine may deschedule it for
        // a while) is a dead or hung engine. Its answer may still come,
        // and would be taken for the next call's: no call goes over the
        // connection again.
        if !sys::readable_within(conn, Duration::from_secs(10)) {
            self.inner.conn_unanswered.store(true, Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the engine did not answer on the attach connection",
            ));
        }
        let mut buf = [0u8; 64];
        let (n, _) = sys::recv_fds::<1>(conn, &mut buf)?;
        drop(guard);
        let answer = softoe_abi::Bell::from_bytes(&buf[..n.min(buf.len())])
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no answer to a bell"))?;
        if answer.status < 0 {
            return Err(status_err(answer.status));
        }
        Ok(answer)
    }

    /// A waiter bell for one sleep, registered with the engine the first
    /// time (a `Bell` message): `None` when [`LENT_BELLS`] are out already
    /// or the engine has no more to give, and the caller sleeps the
    /// session's way.
    pub(crate) fn lend_bell(&self) -> Option<LentBell> {
        if let Some(b) = lock(&self.inner.bell_pool).pop() {
            return Some(b);
        }
        if self.inner.bells_refused.load(Ordering::Relaxed)
            || self.inner.bells_made.fetch_add(1, Ordering::Relaxed) >= LENT_BELLS
        {
            return None;
        }
        let fd = sys::eventfd().ok()?;
        match self.bell_call(softoe_abi::BellOp::Add, 0, fd.as_fd()) {
            Ok(a) => Some(LentBell { index: a.index, fd }),
            Err(e) => {
                tracing::debug!(error = %e, "no more waiter bells: sleeping on the session's doorbell");
                self.inner.bells_refused.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// Makes every bell this client may lend, now: later waits then need
    /// no new descriptor (a program about to lower its descriptor limit or
    /// to sandbox itself).
    pub fn stock_bells(&self) {
        let mut made = Vec::new();
        while let Some(b) = self.lend_bell() {
            made.push(b);
        }
        for b in made {
            self.return_bell(b);
        }
    }

    /// From now on nothing goes over the attach socket (a waiter's
    /// goodbye is left to the session's end; a new bell or watch fails
    /// with `EPERM`): the program is about to install a seccomp filter
    /// that kills it for a `sendmsg`. Call [`stock_bells`](Self::stock_bells)
    /// first; later waits need only `read`, `write` and `ppoll`.
    pub fn seal(&self) {
        self.inner.sandboxed.store(true, Ordering::Relaxed);
    }

    /// Gives a lent bell back for the next sleep.
    pub(crate) fn return_bell(&self, b: LentBell) {
        sys::drain(&b.fd);
        lock(&self.inner.bell_pool).push(b);
    }

    /// Has the engine watch connection `sock` across `fork`
    /// ([`softoe_abi::BellOp::Watch`]): returns the descriptor every
    /// process holding the connection must keep (the shim puts it under
    /// the socket's number, so `fork`, `dup`, `exec` and `close` count its
    /// copies). From now on closing the socket only detaches it until the
    /// last copy closes; a process holding a copy may take the connection
    /// with [`Client::take`].
    pub fn watch_stream(&self, sock: u32) -> io::Result<OwnedFd> {
        self.watch(sock, 0)
    }

    /// Has the engine watch connection or listener `sock` (as
    /// [`watch_stream`](Self::watch_stream)), the descriptor returned named
    /// so that a process it is passed to over a Unix socket knows it for
    /// a softoe socket ([`softoe_abi::WATCH_NAME`]; `flags`: 1 for an
    /// `AF_INET6` socket, 2 for a listener) and can [`take`](Self::take)
    /// it.
    pub fn watch(&self, sock: u32, flags: u8) -> io::Result<OwnedFd> {
        // The watch goes over the attach socket, the socket's commands over
        // the command ring: a round trip there first, so that the engine
        // has carried out every command posted before (a `CONNECT` still in
        // the ring, whose socket has no connection yet, refused the watch
        // with `ENOTCONN`).
        self.nop()?;
        let (mine, engine) = sys::socketpair()?;
        sys::bind_watch_name(&mine, flags)?;
        self.bell_call(softoe_abi::BellOp::Watch, sock, engine.as_fd())?;
        Ok(mine)
    }

    /// Claims `fd`, a descriptor this process received from another (over
    /// a Unix socket) whose name says it is a watched softoe socket's
    /// ([`softoe_abi::BellOp::Claim`]): the engine checks it and grants a
    /// number this session adopts it by ([`take`](Self::take)). Returns the
    /// number and whether it is a listener.
    pub(crate) fn claim(&self, fd: BorrowedFd<'_>) -> io::Result<(u32, bool)> {
        let a = self.bell_call(softoe_abi::BellOp::Claim, 0, fd)?;
        Ok((a.index, a.extra[0] & 1 != 0))
    }
}

/// A thread's own doorbell ([`Client::waiter`]).
///
/// To wait for softoe sockets together with kernel descriptors: read
/// [`Client::event_seq`], look at the sockets, [`arm`](Waiter::arm), look
/// at the sequence again (it moved: look again instead of sleeping), then
/// sleep in the kernel with [`fd`](Waiter::fd) among the descriptors, and
/// drop the [`Armed`] guard when the call returns. Only this thread drains
/// this bell, so no other waiter can swallow its wake-up.
#[derive(Debug)]
pub struct Waiter {
    c: Client,
    index: u32,
    bell: OwnedFd,
    /// The process that registered it: a copy a forked child drops (its
    /// thread-local destructors at `exit`) must not unregister the
    /// parent's bell over the inherited attach socket.
    pid: u32,
}

/// An armed [`Waiter`]: the engine rings its bell at its next event.
#[derive(Debug)]
pub struct Armed<'w> {
    w: &'w Waiter,
}

impl Waiter {
    /// The descriptor to sleep on (readable when rung).
    pub fn fd(&self) -> RawFd {
        self.bell.as_raw_fd()
    }

    /// Asks the engine to ring this bell at its next event.
    pub fn arm(&self) -> Armed<'_> {
        let r = &self.c.inner.region;
        r.bells_armed()
            .fetch_or(1u64 << self.index, Ordering::SeqCst);
        r.app_waiting().fetch_add(1, Ordering::SeqCst);
        Armed { w: self }
    }
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        let r = &self.w.c.inner.region;
        r.app_waiting().fetch_sub(1, Ordering::SeqCst);
        r.bells_armed()
            .fetch_and(!(1u64 << self.w.index), Ordering::SeqCst);
        sys::drain(&self.w.bell);
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.pid != std::process::id() || self.c.inner.sandboxed.load(Ordering::Relaxed) {
            return;
        }
        let _keep = sys::KeepErrno::new();
        let bye = softoe_abi::Bell {
            magic: softoe_abi::BELL_MAGIC,
            op: softoe_abi::BellOp::Remove as u32,
            index: self.index,
            ..softoe_abi::Bell::default()
        };
        let _ = sys::send(&self.c.inner.conn, &bye.to_bytes());
    }
}

mod fit;

#[cfg(test)]
mod tests;
