//! The CPUs as scheduled resources: cores shared by threads, in virtual
//! time.
//!
//! A [`queue::Server`](super::queue::Server) does one job at a time in
//! arrival order, which gives every kind of work a core of its own. A real
//! machine has a few cores and more threads — the engine, the program, a
//! Linux peer, the kernel's softirq work — that the scheduler shares among
//! them. [`Cores`] models that:
//!
//! - **Cores** ([`CoresSpec`]) each have a speed over the reference
//!   processor (work is priced on the host CPU, speed 1, as everywhere in
//!   the machine model).
//! - **Threads** ([`ThreadSpec`]) are sequential: each runs the jobs
//!   offered to it one after another, in the order offered. A thread is
//!   allowed one core ([`Affinity::Pinned`]) or several.
//! - **Time slices.** Runnable threads on one core share it round-robin
//!   with a quantum ([`CoresSpec::quantum`], 3 ms by default, about CFS's
//!   slice with two or three runnable threads): the running thread keeps the
//!   core until its job ends or, if another thread waits on that core's run
//!   queue, until its slice ends (slice boundaries fall every quantum from
//!   when it was dispatched); it then goes to the back of the queue. Round
//!   robin rather than processor sharing because it is what the kernel
//!   does at the scale that matters here (a woken thread waits for the
//!   running one's slice, milliseconds, not for nothing), and processor
//!   sharing is its limit as the quantum goes to zero. There are no
//!   priorities, no wake-up preemption and no cost per context switch.
//! - **Wake-ups.** A job offered to a thread that sleeps (it has no work)
//!   starts only after a wake-up latency: [`CoresSpec::wake_same_core`]
//!   when the thread is placed on the core its waker ([`Job::waker`]) is
//!   on, [`CoresSpec::wake_cross_core`] otherwise, and for a wake-up from
//!   outside any thread (an interrupt, a timer). A job offered at the very
//!   instant the thread's previous job ended is not a wake-up: the thread
//!   never left its core and goes on with the slice it had.
//! - **Placement**, at wake-up: a pinned thread goes to its core; one
//!   allowed several goes to the least loaded of them (the fewest threads
//!   running, queued or waking there), preferring the core it last ran on,
//!   then the lowest index. A core with nothing to run takes the first
//!   thread queued on another core that is allowed on it (the kernel's
//!   idle balancing); threads do not otherwise migrate.
//! - **Accounting as /proc does it.** A job carries its `user`, `system`
//!   and `softirq` parts ([`Job`]): the kernel's work done inside a thread
//!   (a system call's, and the receive processing the kernel runs in
//!   whoever sends — inside the engine's TAP write, inside a Linux sender's
//!   system call) is charged to that thread, as `/proc/<pid>/stat` charges
//!   it. [`Cores::stat`] returns a [`ProcStat`]: per thread utime, stime
//!   and the softirq time run in its context; per core user, system,
//!   softirq and idle time, as `/proc/stat`. Threads of
//!   [`ThreadKind::Softirq`] (ksoftirqd) are reported as such.
//!
//! ## Offering jobs and learning when they end
//!
//! Under time slicing a job's end depends on work that arrives after it (a
//! thread woken onto its core takes slices from it), so unlike
//! [`Server::serve`](super::queue::Server::serve) an offer does not
//! answer with the job's end. The caller's event loop offers jobs in time
//! order ([`Cores::offer`]), asks when the cores next do something
//! ([`Cores::next_event`]), and advances them to that instant
//! ([`Cores::advance`]), which returns the jobs that ended ([`Done`]: when
//! each was offered, first ran and ended). At one instant, what the cores
//! do happens before the offers made at that instant. Same inputs, same
//! outputs: ties are broken by core and thread index, and
//! [`Cores::trace_hash`] folds every run segment and every end.
//!
//! ## The machines it describes
//!
//! One model, several configurations — none a special case:
//!
//! - **The testbed**: two cores at speed 1. The engine's thread is pinned
//!   to core 0; the program, the Linux peer and ksoftirqd are pinned to
//!   core 1 (or allowed both and floating); the kernel's receive work runs
//!   as the `softirq` part of the job that sent the frame (the engine's
//!   TAP write, the peer's `send`), or as a job of the ksoftirqd thread
//!   when the kernel defers it.
//! - **The seeds' machines**: an engine core of its own (speed
//!   `engine.speed`, the engine thread pinned there alone) and a host core
//!   of its own for the program (and, without offload, the stack's
//!   softirq work); the peer is another machine with its own cores. The
//!   NIC across a bus stays a [`Server`](super::queue::Server).
//!
//! `host/` is to replace its per-CPU servers with one [`Cores`]: each job it
//! queues today becomes an offer to the thread that does it.

use core::time::Duration;
use std::collections::VecDeque;

use softoe_stack::Instant;

/// The most cores a [`Cores`] has.
pub const MAX_CORES: usize = 64;

/// A machine, thread or job is unusable, or a job came out of order.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CpuError {
    /// A machine of no cores.
    #[error("a machine needs at least one core")]
    NoCores,
    /// More cores than [`MAX_CORES`].
    #[error("at most {MAX_CORES} cores, got {0}")]
    TooManyCores(usize),
    /// A speed factor that is zero, negative or not finite.
    #[error("core {core}'s speed must be finite and above zero, got {speed}")]
    Speed {
        /// The core.
        core: usize,
        /// Its speed.
        speed: f64,
    },
    /// A time slice of zero.
    #[error("the time slice must be longer than zero")]
    Quantum,
    /// A thread allowed no core.
    #[error("a thread must be allowed at least one core")]
    NoAffinity,
    /// A core the machine does not have.
    #[error("core {core} is out of range: the machine has {cores}")]
    CoreOutOfRange {
        /// The core asked for.
        core: usize,
        /// How many there are.
        cores: usize,
    },
    /// A thread that was not spawned.
    #[error("there is no thread {0}")]
    UnknownThread(usize),
    /// A job offered before the previous one, or before the time the cores
    /// were advanced to.
    #[error("a job arriving at {arrival} comes after {previous}")]
    OutOfOrder {
        /// When the refused job arrived.
        arrival: Instant,
        /// The instant it had to follow.
        previous: Instant,
    },
}

/// The cores of a machine and the scheduler's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct CoresSpec {
    /// Each core's speed over the reference processor.
    pub speeds: Vec<f64>,
    /// The time slice of round-robin sharing.
    pub quantum: Duration,
    /// From a job offered to a sleeping thread to its being runnable, when
    /// it wakes on its waker's core.
    pub wake_same_core: Duration,
    /// The same, on another core (or woken from outside any thread).
    pub wake_cross_core: Duration,
}

impl CoresSpec {
    /// `cores` cores of speed `speed`, default scheduler parameters.
    pub fn uniform(cores: usize, speed: f64) -> CoresSpec {
        CoresSpec {
            speeds: vec![speed; cores],
            ..CoresSpec::default()
        }
    }
}

impl Default for CoresSpec {
    /// The testbed's two cores at speed 1; a 3 ms quantum; 5 µs and 20 µs
    /// wake-ups (orders of magnitude until measured).
    fn default() -> CoresSpec {
        CoresSpec {
            speeds: vec![1.0, 1.0],
            quantum: Duration::from_millis(3),
            wake_same_core: Duration::from_micros(5),
            wake_cross_core: Duration::from_micros(20),
        }
    }
}

/// What a thread is, for reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ThreadKind {
    /// The offload engine.
    Engine,
    /// A program using the engine (or the kernel's stack).
    Program,
    /// The Linux peer's program.
    Peer,
    /// The kernel's deferred softirq work (ksoftirqd).
    Softirq,
    /// Anything else.
    Other,
}

/// The cores a thread may run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Affinity {
    /// One core.
    Pinned(usize),
    /// Any of these cores.
    Set(Vec<usize>),
    /// Any core of the machine.
    Any,
}

/// A thread to spawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadSpec {
    /// Its name, for reports.
    pub name: String,
    /// What it is.
    pub kind: ThreadKind,
    /// Where it may run.
    pub affinity: Affinity,
}

/// A spawned thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadId(usize);

impl ThreadId {
    /// Its index, in the order threads were spawned.
    pub fn index(self) -> usize {
        self.0
    }
}

/// An offered job, numbered in the order offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

/// A job: work on the reference processor, in three parts run in this
/// order and charged as `/proc` charges them to the thread that runs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Job {
    /// In user mode: utime.
    pub user: Duration,
    /// In the kernel on the thread's behalf (a system call): stime.
    pub system: Duration,
    /// The kernel's softirq work run in this thread's context (the receive
    /// processing a send triggers): the thread's softirq time.
    pub softirq: Duration,
    /// The thread whose work made this one (it decides whether a wake-up is
    /// on the same core); `None` for an interrupt, a timer, the outside.
    pub waker: Option<ThreadId>,
}

impl Job {
    /// A job of `work` in user mode.
    pub fn user(work: Duration) -> Job {
        Job {
            user: work,
            ..Job::default()
        }
    }

    /// A job of `work` in the kernel (a system call).
    pub fn system(work: Duration) -> Job {
        Job {
            system: work,
            ..Job::default()
        }
    }

    /// All its work, on the reference processor.
    pub fn work(&self) -> Duration {
        self.user
            .saturating_add(self.system)
            .saturating_add(self.softirq)
    }
}

/// A job that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Done {
    /// Which.
    pub job: JobId,
    /// The thread that ran it.
    pub thread: ThreadId,
    /// The core it ended on.
    pub core: usize,
    /// When it was offered.
    pub arrival: Instant,
    /// When it first ran.
    pub start: Instant,
    /// When it ended.
    pub finish: Instant,
}

impl Done {
    /// From its offer to its first run: wake-up and queueing.
    pub fn waited(&self) -> Duration {
        self.start - self.arrival
    }
}

/// What one thread has been charged, as `/proc/<pid>/stat` would show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadStat {
    /// What it is.
    pub kind: ThreadKind,
    /// User time.
    pub utime: Duration,
    /// System time.
    pub stime: Duration,
    /// Softirq work run in its context (a kernel without IRQ time
    /// accounting counts it in `stime`: [`ThreadStat::proc_stime`]).
    pub softirq: Duration,
    /// Jobs ended.
    pub jobs: u64,
    /// Times it was woken.
    pub wakeups: u64,
    /// Times a slice's end took the core from it.
    pub preemptions: u64,
}

impl ThreadStat {
    fn new(kind: ThreadKind) -> ThreadStat {
        ThreadStat {
            kind,
            utime: Duration::ZERO,
            stime: Duration::ZERO,
            softirq: Duration::ZERO,
            jobs: 0,
            wakeups: 0,
            preemptions: 0,
        }
    }

    /// Its whole CPU time.
    pub fn cpu(&self) -> Duration {
        self.utime
            .saturating_add(self.stime)
            .saturating_add(self.softirq)
    }

    /// `stime` as a kernel without IRQ time accounting reports it, the
    /// softirq work it ran included.
    pub fn proc_stime(&self) -> Duration {
        self.stime.saturating_add(self.softirq)
    }

    fn charge(&mut self, split: [Duration; 3]) {
        let [u, s, q] = split;
        self.utime = self.utime.saturating_add(u);
        self.stime = self.stime.saturating_add(s);
        self.softirq = self.softirq.saturating_add(q);
    }
}

/// What one core has done, as a line of `/proc/stat` would show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CoreStat {
    /// Time in user mode.
    pub user: Duration,
    /// Time in the kernel for threads.
    pub system: Duration,
    /// Time in softirq work.
    pub softirq: Duration,
    /// Time with nothing to run, from zero to the snapshot.
    pub idle: Duration,
    /// Threads dispatched onto it.
    pub switches: u64,
}

impl CoreStat {
    /// Its busy time.
    pub fn busy(&self) -> Duration {
        self.user
            .saturating_add(self.system)
            .saturating_add(self.softirq)
    }

    fn charge(&mut self, split: [Duration; 3]) {
        let [u, s, q] = split;
        self.user = self.user.saturating_add(u);
        self.system = self.system.saturating_add(s);
        self.softirq = self.softirq.saturating_add(q);
    }
}

/// A snapshot of the accounting, at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// When.
    pub at: Instant,
    /// Per thread, by [`ThreadId::index`].
    pub threads: Vec<ThreadStat>,
    /// Per core.
    pub cores: Vec<CoreStat>,
}

impl ProcStat {
    /// The CPU time of every thread of `kind`.
    pub fn cpu_of(&self, kind: ThreadKind) -> Duration {
        self.threads
            .iter()
            .filter(|t| t.kind == kind)
            .fold(Duration::ZERO, |a, t| a.saturating_add(t.cpu()))
    }
}

/// A job waiting for or in service: its parts and progress in reference
/// nanoseconds.
#[derive(Clone, Debug)]
struct Pending {
    id: JobId,
    arrival: Instant,
    parts: [f64; 3],
    done: f64,
    start: Option<Instant>,
}

impl Pending {
    fn total(&self) -> f64 {
        self.parts.iter().sum()
    }

    /// Core nanoseconds left on a core of `speed`.
    fn left(&self, speed: f64) -> Duration {
        let ns = ((self.total() - self.done).max(0.0) / speed).round();
        // `as` saturates: huge work ends at the end of time.
        Duration::from_nanos(ns as u64)
    }

    /// Splits `d` of core time, run from `done` at `speed`, over the parts
    /// it covers (the whole rest if `ends`), exactly: the parts sum to `d`.
    fn split(&self, d: Duration, speed: f64, ends: bool) -> ([Duration; 3], f64) {
        let total = self.total();
        let end = if ends {
            total
        } else {
            (self.done + d.as_nanos() as f64 * speed).min(total)
        };
        let mut lo = 0.0;
        let mut covered = [0.0; 3];
        for (c, &p) in covered.iter_mut().zip(&self.parts) {
            let hi = lo + p;
            *c = (hi.min(end) - lo.max(self.done)).max(0.0);
            lo = hi;
        }
        let all: f64 = covered.iter().sum();
        let d_ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let mut out = [Duration::ZERO; 3];
        if all <= 0.0 {
            // No work covered (a job of no work): anything is system time.
            out[1] = d;
            return (out, end);
        }
        let mut cum = 0.0;
        let mut prev = 0u64;
        for (i, (o, c)) in out.iter_mut().zip(covered).enumerate() {
            cum += c;
            let b = if i == 2 {
                d_ns
            } else {
                ((d_ns as f64 * cum / all).round() as u64).min(d_ns)
            };
            *o = Duration::from_nanos(b.saturating_sub(prev));
            prev = prev.max(b);
        }
        (out, end)
    }
}

/// Where a sleeping thread last ran.
#[derive(Clone, Copy, Debug)]
struct Last {
    core: usize,
    slice_start: Instant,
    slept_at: Instant,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Asleep(Option<Last>),
    Waking { core: usize, ready: Instant },
    Queued(usize),
    Running(usize),
}

#[derive(Clone, Debug)]
struct Thread {
    name: String,
    mask: u64,
    jobs: VecDeque<Pending>,
    state: State,
    stat: ThreadStat,
}

/// The thread on a core: since when its current job has run there, when
/// it was dispatched (its slices count from then) and when the job ends.
#[derive(Clone, Copy, Debug)]
struct Run {
    thread: usize,
    slice_start: Instant,
    since: Instant,
    finish: Instant,
}

#[derive(Clone, Debug)]
struct Core {
    speed: f64,
    run: Option<Run>,
    queue: VecDeque<usize>,
    stat: CoreStat,
}

/// A machine's cores and the threads they run (see the [module](self)).
#[derive(Clone, Debug)]
pub struct Cores {
    quantum: Duration,
    wake_same: Duration,
    wake_cross: Duration,
    cores: Vec<Core>,
    threads: Vec<Thread>,
    now: Instant,
    last_offer: Instant,
    next_job: u64,
    done: Vec<Done>,
    hash: u64,
}

impl Cores {
    /// A machine of `spec`'s cores, running no thread yet.
    pub fn new(spec: &CoresSpec) -> Result<Cores, CpuError> {
        let n = spec.speeds.len();
        if n == 0 {
            return Err(CpuError::NoCores);
        }
        if n > MAX_CORES {
            return Err(CpuError::TooManyCores(n));
        }
        if spec.quantum.is_zero() {
            return Err(CpuError::Quantum);
        }
        let mut cores = Vec::with_capacity(n);
        for (core, &speed) in spec.speeds.iter().enumerate() {
            if !(speed.is_finite() && speed > 0.0) {
                return Err(CpuError::Speed { core, speed });
            }
            cores.push(Core {
                speed,
                run: None,
                queue: VecDeque::new(),
                stat: CoreStat::default(),
            });
        }
        Ok(Cores {
            quantum: spec.quantum,
            wake_same: spec.wake_same_core,
            wake_cross: spec.wake_cross_core,
            cores,
            threads: Vec::new(),
            now: Instant::ZERO,
            last_offer: Instant::ZERO,
            next_job: 0,
            done: Vec::new(),
            hash: 0xcbf2_9ce4_8422_2325,
        })
    }

    /// How many cores.
    pub fn cores(&self) -> usize {
        self.cores.len()
    }

    /// A new thread, asleep.
    pub fn spawn(&mut self, spec: ThreadSpec) -> Result<ThreadId, CpuError> {
        let cores = self.cores.len();
        let bit = |core: usize| {
            if core < cores {
                Ok(1u64 << core)
            } else {
                Err(CpuError::CoreOutOfRange { core, cores })
            }
        };
        let mask = match &spec.affinity {
            Affinity::Pinned(c) => bit(*c)?,
            Affinity::Set(set) => {
                let mut m = 0;
                for &c in set {
                    m |= bit(c)?;
                }
                m
            }
            Affinity::Any => u64::MAX >> (64 - cores),
        };
        if mask == 0 {
            return Err(CpuError::NoAffinity);
        }
        self.threads.push(Thread {
            name: spec.name,
            mask,
            jobs: VecDeque::new(),
            state: State::Asleep(None),
            stat: ThreadStat::new(spec.kind),
        });
        Ok(ThreadId(self.threads.len() - 1))
    }

    /// A thread's name.
    pub fn name(&self, thread: ThreadId) -> Option<&str> {
        self.threads.get(thread.0).map(|t| t.name.as_str())
    }

    /// The instant the cores have been advanced to.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Offers `job` to `thread` at `at`: the cores first advance to `at`
    /// (the jobs that end by then are kept for the next
    /// [`Cores::advance`]), then the job queues behind the thread's others,
    /// waking it if it sleeps. Refuses a job before the previous offer or
    /// before the instant the cores were advanced to, and changes nothing
    /// then.
    pub fn offer(&mut self, at: Instant, thread: ThreadId, job: Job) -> Result<JobId, CpuError> {
        let previous = self.last_offer.max(self.now);
        if at < previous {
            return Err(CpuError::OutOfOrder {
                arrival: at,
                previous,
            });
        }
        let t = thread.0;
        if t >= self.threads.len() {
            return Err(CpuError::UnknownThread(t));
        }
        if let Some(w) = job.waker
            && w.0 >= self.threads.len()
        {
            return Err(CpuError::UnknownThread(w.0));
        }
        self.run_to(at);
        self.now = at;
        self.last_offer = at;
        let id = JobId(self.next_job);
        self.next_job += 1;
        let ns = |d: Duration| d.as_nanos() as f64;
        let pending = Pending {
            id,
            arrival: at,
            parts: [ns(job.user), ns(job.system), ns(job.softirq)],
            done: 0.0,
            start: None,
        };
        let Some(th) = self.threads.get_mut(t) else {
            return Err(CpuError::UnknownThread(t));
        };
        th.jobs.push_back(pending);
        if let State::Asleep(last) = th.state {
            match last {
                Some(l) if l.slept_at == at => self.resume(t, l),
                _ => self.wake(t, job.waker, last),
            }
        }
        self.run_to(at);
        Ok(id)
    }

    /// Runs the cores to `to` (everything due by then, inclusive) and
    /// returns the jobs that ended since the last call, in the order they
    /// ended. An instant before [`Cores::now`] advances nothing.
    pub fn advance(&mut self, to: Instant) -> Vec<Done> {
        self.run_to(to);
        self.now = self.now.max(to);
        core::mem::take(&mut self.done)
    }

    /// Runs until every job offered has ended, and returns the jobs that
    /// ended since the last call; [`Cores::now`] is then the last thing
    /// that happened.
    pub fn drain(&mut self) -> Vec<Done> {
        self.run_to(Instant::MAX);
        core::mem::take(&mut self.done)
    }

    /// When the cores next do something (a job ends, a slice ends while
    /// another thread waits, a woken thread becomes runnable), if no other
    /// job is offered; `None` when they have nothing to do.
    pub fn next_event(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for c in &self.cores {
            if let Some(r) = c.run {
                at(r.finish);
                if !c.queue.is_empty()
                    && let Some(b) = self.boundary(r.slice_start)
                {
                    at(b);
                }
            }
        }
        for th in &self.threads {
            if let State::Waking { ready, .. } = th.state {
                at(ready);
            }
        }
        next
    }

    /// The accounting at [`Cores::now`], the segments running counted to
    /// then.
    pub fn stat(&self) -> ProcStat {
        let mut threads: Vec<ThreadStat> = self.threads.iter().map(|t| t.stat).collect();
        let mut cores: Vec<CoreStat> = self.cores.iter().map(|c| c.stat).collect();
        for (c, core) in cores.iter_mut().zip(&self.cores) {
            if let Some(r) = core.run
                && let Some(job) = self.threads.get(r.thread).and_then(|t| t.jobs.front())
            {
                let (split, _) = job.split(self.now - r.since, core.speed, false);
                c.charge(split);
                if let Some(t) = threads.get_mut(r.thread) {
                    t.charge(split);
                }
            }
            c.idle = (self.now - Instant::ZERO).saturating_sub(c.busy());
        }
        ProcStat {
            at: self.now,
            threads,
            cores,
        }
    }

    /// A hash of everything run so far (every segment a thread ran on a
    /// core, every job's end): equal runs, equal hashes.
    pub fn trace_hash(&self) -> u64 {
        self.hash
    }

    fn fold(&mut self, words: [u64; 4]) {
        for w in words {
            self.hash = (self.hash ^ w).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The first slice boundary of a thread dispatched at `start` at or
    /// after now, and after `start` (`None` past the end of time).
    fn boundary(&self, start: Instant) -> Option<Instant> {
        let q = u64::try_from(self.quantum.as_nanos()).unwrap_or(u64::MAX);
        let since = (self.now - start).as_nanos();
        let since = u64::try_from(since).unwrap_or(u64::MAX);
        let k = since.div_ceil(q).max(1);
        let b = start + Duration::from_nanos(k.saturating_mul(q));
        (b > start).then_some(b)
    }

    /// Processes everything due by `to`.
    fn run_to(&mut self, to: Instant) {
        while let Some(t) = self.next_event() {
            if t > to {
                break;
            }
            self.now = self.now.max(t);
            self.step();
        }
    }

    /// Everything due at `now`: jobs' ends, wake-ups, slices' ends, then
    /// dispatch onto idle cores.
    fn step(&mut self) {
        let now = self.now;
        for c in 0..self.cores.len() {
            self.finish_jobs(c);
        }
        for t in 0..self.threads.len() {
            if let Some(th) = self.threads.get_mut(t)
                && let State::Waking { core, ready } = th.state
                && ready <= now
            {
                th.state = State::Queued(core);
                if let Some(c) = self.cores.get_mut(core) {
                    c.queue.push_back(t);
                }
            }
        }
        for c in 0..self.cores.len() {
            let Some(core) = self.cores.get(c) else {
                continue;
            };
            if let Some(r) = core.run
                && !core.queue.is_empty()
                && self.boundary(r.slice_start) == Some(now)
            {
                self.end_segment(c, false);
                if let Some(core) = self.cores.get_mut(c) {
                    core.run = None;
                    core.queue.push_back(r.thread);
                }
                if let Some(th) = self.threads.get_mut(r.thread) {
                    th.state = State::Queued(c);
                    th.stat.preemptions += 1;
                }
            }
        }
        for c in 0..self.cores.len() {
            self.dispatch_idle(c);
        }
    }

    /// Ends the jobs of core `c` due now; its thread goes on to its next
    /// job or sleeps.
    fn finish_jobs(&mut self, c: usize) {
        let now = self.now;
        while let Some(core) = self.cores.get(c)
            && let Some(r) = core.run
            && r.finish <= now
        {
            let speed = core.speed;
            self.end_segment(c, true);
            let Some(th) = self.threads.get_mut(r.thread) else {
                return;
            };
            let mut ended = None;
            if let Some(job) = th.jobs.pop_front() {
                th.stat.jobs += 1;
                ended = Some(Done {
                    job: job.id,
                    thread: ThreadId(r.thread),
                    core: c,
                    arrival: job.arrival,
                    start: job.start.unwrap_or(now),
                    finish: now,
                });
            }
            let next = match th.jobs.front_mut() {
                Some(job) => {
                    job.start.get_or_insert(now);
                    Some(Run {
                        since: now,
                        finish: now + job.left(speed),
                        ..r
                    })
                }
                None => {
                    th.state = State::Asleep(Some(Last {
                        core: c,
                        slice_start: r.slice_start,
                        slept_at: now,
                    }));
                    None
                }
            };
            if let Some(core) = self.cores.get_mut(c) {
                core.run = next;
            }
            if let Some(d) = ended {
                self.fold([
                    d.job.0,
                    d.thread.0 as u64,
                    d.start.total_nanos(),
                    d.finish.total_nanos(),
                ]);
                self.done.push(d);
            }
        }
    }

    /// Charges the segment core `c` has run since it began to now, and
    /// records the job's progress.
    fn end_segment(&mut self, c: usize, ends: bool) {
        let now = self.now;
        let Some(core) = self.cores.get_mut(c) else {
            return;
        };
        let Some(r) = core.run else {
            return;
        };
        let Some(th) = self.threads.get_mut(r.thread) else {
            return;
        };
        let Some(job) = th.jobs.front_mut() else {
            return;
        };
        let (split, done) = job.split(now - r.since, core.speed, ends);
        job.done = done;
        th.stat.charge(split);
        core.stat.charge(split);
        self.fold([
            c as u64,
            r.thread as u64,
            r.since.total_nanos(),
            now.total_nanos(),
        ]);
    }

    /// Puts thread `t` on core `c` now, its slices counted from
    /// `slice_start`.
    fn dispatch(&mut self, c: usize, t: usize, slice_start: Instant) {
        let now = self.now;
        let Some(core) = self.cores.get_mut(c) else {
            return;
        };
        let Some(th) = self.threads.get_mut(t) else {
            return;
        };
        let finish = match th.jobs.front_mut() {
            Some(job) => {
                job.start.get_or_insert(now);
                now + job.left(core.speed)
            }
            None => now,
        };
        th.state = State::Running(c);
        core.stat.switches += 1;
        core.run = Some(Run {
            thread: t,
            slice_start,
            since: now,
            finish,
        });
    }

    /// An idle core takes the head of its queue, or else the first thread
    /// queued elsewhere that may run on it.
    fn dispatch_idle(&mut self, c: usize) {
        let Some(core) = self.cores.get_mut(c) else {
            return;
        };
        if core.run.is_some() {
            return;
        }
        let mut pick = core.queue.pop_front();
        if pick.is_none() {
            let bit = 1u64 << c;
            for other in 0..self.cores.len() {
                let threads = &self.threads;
                let Some(o) = self.cores.get_mut(other) else {
                    continue;
                };
                let allowed = |t: &usize| threads.get(*t).is_some_and(|th| th.mask & bit != 0);
                if let Some(i) = o.queue.iter().position(allowed) {
                    pick = o.queue.remove(i);
                    break;
                }
            }
        }
        if let Some(t) = pick {
            self.dispatch(c, t, self.now);
        }
    }

    /// Thread `t`, whose last job ended at this instant, goes on with a new
    /// one without sleeping: it takes its core back from whoever was just
    /// dispatched there (they have run for no time) and keeps its slice.
    fn resume(&mut self, t: usize, last: Last) {
        let Some(core) = self.cores.get_mut(last.core) else {
            return;
        };
        match core.run {
            Some(r) if r.slice_start < self.now => {
                // Cannot happen (the core was this thread's until now);
                // were it to, wait in line without a wake-up.
                core.queue.push_back(t);
                if let Some(th) = self.threads.get_mut(t) {
                    th.state = State::Queued(last.core);
                }
                return;
            }
            Some(r) => {
                core.run = None;
                core.queue.push_front(r.thread);
                if let Some(other) = self.threads.get_mut(r.thread) {
                    other.state = State::Queued(last.core);
                    if let Some(job) = other.jobs.front_mut()
                        && job.start == Some(self.now)
                        && job.done == 0.0
                    {
                        job.start = None;
                    }
                }
            }
            None => {}
        }
        self.dispatch(last.core, t, last.slice_start);
    }

    /// Thread `t` wakes: it is placed on a core and becomes runnable there
    /// after the wake-up latency.
    fn wake(&mut self, t: usize, waker: Option<ThreadId>, last: Option<Last>) {
        let Some(th) = self.threads.get(t) else {
            return;
        };
        let mask = th.mask;
        let mut waking = vec![0usize; self.cores.len()];
        for other in &self.threads {
            if let State::Waking { core, .. } = other.state
                && let Some(w) = waking.get_mut(core)
            {
                *w += 1;
            }
        }
        let last_core = last.map(|l| l.core);
        let core = (0..self.cores.len())
            .filter(|c| mask & (1u64 << c) != 0)
            .min_by_key(|&c| {
                let load = self
                    .cores
                    .get(c)
                    .map_or(usize::MAX, |k| usize::from(k.run.is_some()) + k.queue.len())
                    + waking.get(c).copied().unwrap_or(0);
                (load, last_core != Some(c), c)
            });
        let Some(core) = core else {
            return;
        };
        let waker_core = waker
            .and_then(|w| self.threads.get(w.0))
            .and_then(|w| match w.state {
                State::Running(c) | State::Queued(c) | State::Waking { core: c, .. } => Some(c),
                State::Asleep(l) => l.map(|l| l.core),
            });
        let latency = if waker_core == Some(core) {
            self.wake_same
        } else {
            self.wake_cross
        };
        let ready = self.now + latency;
        if let Some(th) = self.threads.get_mut(t) {
            th.stat.wakeups += 1;
            th.state = State::Waking { core, ready };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const US: Duration = Duration::from_micros(1);
    const MS: Duration = Duration::from_millis(1);

    fn thread(name: &str, affinity: Affinity) -> ThreadSpec {
        ThreadSpec {
            name: name.into(),
            kind: ThreadKind::Other,
            affinity,
        }
    }

    /// `cores` cores at speed 1 whose wake-ups take no time.
    fn machine(cores: usize) -> Cores {
        Cores::new(&CoresSpec {
            wake_same_core: Duration::ZERO,
            wake_cross_core: Duration::ZERO,
            ..CoresSpec::uniform(cores, 1.0)
        })
        .unwrap()
    }

    /// Offers `n` jobs of `work` to `t` at time zero (back to back: the
    /// thread never sleeps between them).
    fn cpu_bound(m: &mut Cores, t: ThreadId, n: u32, work: Duration) {
        for _ in 0..n {
            m.offer(Instant::ZERO, t, Job::user(work)).unwrap();
        }
    }

    fn cpu_at(m: &mut Cores, window: Instant) -> ProcStat {
        m.advance(window);
        m.stat()
    }

    #[test]
    fn two_threads_share_one_core_by_halves() {
        // 1 s of 100 µs jobs each on one core, watched for 1 s: each gets
        // half, to within a quantum.
        let mut m = machine(1);
        let a = m.spawn(thread("a", Affinity::Pinned(0))).unwrap();
        let b = m.spawn(thread("b", Affinity::Pinned(0))).unwrap();
        cpu_bound(&mut m, a, 10_000, 100 * US);
        cpu_bound(&mut m, b, 10_000, 100 * US);
        let s = cpu_at(&mut m, Instant::from_secs(1));
        let (ua, ub) = (s.threads[0].cpu(), s.threads[1].cpu());
        assert_eq!(ua + ub, Duration::from_secs(1));
        let half = Duration::from_millis(500);
        assert!(ua.abs_diff(half) <= 3 * MS, "{ua:?}");
        assert!(ub.abs_diff(half) <= 3 * MS, "{ub:?}");
        assert_eq!(s.cores[0].idle, Duration::ZERO);
        // Each slice is one quantum: a runs [0, 3), b [3, 6), …
        assert!(s.threads[0].preemptions >= 160, "{:?}", s.threads[0]);
        // All of it done: 2 s of work, the last job of b ends at 2 s.
        let done = m.drain();
        let last = done.iter().map(|d| d.finish).max().unwrap();
        assert_eq!(last, Instant::from_secs(2));

        // One alone gets all of it.
        let mut m = machine(1);
        let a = m.spawn(thread("a", Affinity::Pinned(0))).unwrap();
        cpu_bound(&mut m, a, 10_000, 100 * US);
        let s = cpu_at(&mut m, Instant::from_millis(500));
        assert_eq!(s.threads[0].cpu(), Duration::from_millis(500));
        assert_eq!(s.threads[0].preemptions, 0);
    }

    #[test]
    fn two_threads_on_two_cores_each_get_a_core() {
        let mut m = machine(2);
        let a = m.spawn(thread("a", Affinity::Pinned(0))).unwrap();
        let b = m.spawn(thread("b", Affinity::Pinned(1))).unwrap();
        cpu_bound(&mut m, a, 10_000, 100 * US);
        cpu_bound(&mut m, b, 10_000, 100 * US);
        let s = cpu_at(&mut m, Instant::from_millis(700));
        for t in &s.threads {
            assert_eq!(t.cpu(), Duration::from_millis(700));
        }
        // Floating threads spread over the cores the same way.
        let mut m = machine(2);
        let a = m.spawn(thread("a", Affinity::Any)).unwrap();
        let b = m.spawn(thread("b", Affinity::Any)).unwrap();
        cpu_bound(&mut m, a, 100, 100 * US);
        cpu_bound(&mut m, b, 100, 100 * US);
        let done = m.drain();
        assert!(done.iter().all(|d| d.core == d.thread.index()));
        let last = done.iter().map(|d| d.finish).max().unwrap();
        assert_eq!(last, Instant::from_millis(10));
    }

    #[test]
    fn wake_up_latencies() {
        let spec = CoresSpec {
            speeds: vec![1.0, 1.0],
            quantum: 3 * MS,
            wake_same_core: 5 * US,
            wake_cross_core: 20 * US,
        };
        let woken_by = |w: ThreadId, job: Job| Job {
            waker: Some(w),
            ..job
        };
        // Waker on core 0 (woken from outside: it starts at 20 µs, ends at
        // 30 µs), sleeper pinned to core 1: cross-core.
        let mut m = Cores::new(&spec).unwrap();
        let w = m.spawn(thread("w", Affinity::Pinned(0))).unwrap();
        let s = m.spawn(thread("s", Affinity::Pinned(1))).unwrap();
        m.offer(Instant::ZERO, w, Job::user(10 * US)).unwrap();
        let d = m.advance(Instant::from_micros(30));
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].start, d[0].finish),
            (Instant::from_micros(20), Instant::from_micros(30))
        );
        let at = Instant::from_micros(30);
        m.offer(at, s, woken_by(w, Job::system(7 * US))).unwrap();
        let d = m.drain();
        assert_eq!(d[0].start, at + 20 * US);
        assert_eq!(d[0].finish, at + 27 * US);
        assert_eq!(d[0].waited(), 20 * US);

        // Both on core 0, the waker asleep there by then: same core.
        let mut m = Cores::new(&spec).unwrap();
        let w = m.spawn(thread("w", Affinity::Pinned(0))).unwrap();
        let s = m.spawn(thread("s", Affinity::Pinned(0))).unwrap();
        m.offer(Instant::ZERO, w, Job::user(10 * US)).unwrap();
        m.offer(at, s, woken_by(w, Job::user(US))).unwrap();
        let d = m.drain();
        assert_eq!(d[1].start, at + 5 * US);
        // From outside any thread: the cross-core figure.
        m.offer(Instant::from_millis(1), s, Job::user(US)).unwrap();
        let d = m.drain();
        assert_eq!(d[0].start, Instant::from_millis(1) + 20 * US);

        // On a busy core: after the running thread's slice. w runs a 10 ms
        // job from 20 µs; s is woken at 4 ms, runnable at 4.005 ms, and
        // starts when w's second slice ends, at 6.02 ms; w resumes when s
        // ends and ends 1 µs late, at 10.021 ms.
        let mut m = Cores::new(&spec).unwrap();
        let w = m.spawn(thread("w", Affinity::Pinned(0))).unwrap();
        let s = m.spawn(thread("s", Affinity::Pinned(0))).unwrap();
        m.offer(Instant::ZERO, w, Job::user(10 * MS)).unwrap();
        m.offer(Instant::from_millis(4), s, woken_by(w, Job::user(US)))
            .unwrap();
        let d = m.drain();
        assert_eq!(d[0].thread, s);
        assert_eq!(d[0].start, Instant::from_micros(6_020));
        assert_eq!(d[1].thread, w);
        assert_eq!(d[1].finish, Instant::from_micros(10_021));
        assert_eq!(m.stat().threads[0].preemptions, 1);

        // A job offered at the instant the last one ended is no wake-up.
        let mut m = Cores::new(&spec).unwrap();
        let a = m.spawn(thread("a", Affinity::Pinned(0))).unwrap();
        m.offer(Instant::ZERO, a, Job::user(10 * US)).unwrap();
        let d = m.advance(Instant::from_micros(30));
        assert_eq!(d[0].finish, Instant::from_micros(30));
        m.offer(d[0].finish, a, Job::user(10 * US)).unwrap();
        let d = m.drain();
        assert_eq!(d[0].start, Instant::from_micros(30));
        assert_eq!(m.stat().threads[0].wakeups, 1);
    }

    #[test]
    fn continuing_thread_keeps_its_core_and_slice() {
        // a ends a job at 30 µs while b waits on the core; b is
        // dispatched, but at that instant a goes on with another job: a
        // keeps its core and slice, and b waits for the slice's end.
        let mut m = machine(1);
        let a = m.spawn(thread("a", Affinity::Pinned(0))).unwrap();
        let b = m.spawn(thread("b", Affinity::Pinned(0))).unwrap();
        m.offer(Instant::ZERO, a, Job::user(30 * US)).unwrap();
        m.offer(Instant::ZERO, b, Job::user(US)).unwrap();
        let d = m.advance(Instant::from_micros(30));
        assert_eq!(d.len(), 1);
        m.offer(Instant::from_micros(30), a, Job::user(10 * MS))
            .unwrap();
        let d = m.drain();
        assert_eq!(d[0].thread, b);
        assert_eq!(d[0].start, Instant::from_millis(3));
    }

    #[test]
    fn an_idle_core_takes_a_floating_thread_queued_elsewhere() {
        // e (core 0) runs 10 ms from 0, q (core 1) 1 ms from 0. p, allowed
        // both, wakes at 0.5 ms onto core 0 (both loaded alike: the lowest
        // index) behind e's slice, and is taken by core 1 when q ends.
        let mut m = machine(2);
        let e = m.spawn(thread("e", Affinity::Pinned(0))).unwrap();
        let q = m.spawn(thread("q", Affinity::Pinned(1))).unwrap();
        let p = m.spawn(thread("p", Affinity::Set(vec![0, 1]))).unwrap();
        m.offer(Instant::ZERO, e, Job::user(10 * MS)).unwrap();
        m.offer(Instant::ZERO, q, Job::user(MS)).unwrap();
        m.offer(Instant::from_micros(500), p, Job::user(US))
            .unwrap();
        let d = m.drain();
        let pd = d.iter().find(|d| d.thread == p).unwrap();
        assert_eq!((pd.core, pd.start), (1, Instant::from_millis(1)));
        // e was never interrupted.
        let ed = d.iter().find(|d| d.thread == e).unwrap();
        assert_eq!(ed.finish, Instant::from_millis(10));
        assert_eq!(m.stat().threads[0].preemptions, 0);
    }

    #[test]
    fn accounting_sums_to_busy_time_and_kernel_work_lands_in_its_thread() {
        let mut m = machine(2);
        let engine = m
            .spawn(ThreadSpec {
                name: "engine".into(),
                kind: ThreadKind::Engine,
                affinity: Affinity::Pinned(0),
            })
            .unwrap();
        let peer = m
            .spawn(ThreadSpec {
                name: "peer".into(),
                kind: ThreadKind::Peer,
                affinity: Affinity::Pinned(1),
            })
            .unwrap();
        // The engine's TAP write: 2 µs user, 1 µs system, and the peer's
        // receive work run inside it, 4 µs of softirq.
        let write = Job {
            user: 2 * US,
            system: US,
            softirq: 4 * US,
            waker: None,
        };
        for i in 0..100 {
            let at = Instant::from_micros(i * 10);
            m.offer(at, engine, write).unwrap();
            m.offer(at, peer, Job::system(3 * US)).unwrap();
        }
        m.drain();
        let s = m.stat();
        let e = s.threads[engine.index()];
        assert_eq!(
            (e.utime, e.stime, e.softirq),
            (200 * US, 100 * US, 400 * US)
        );
        assert_eq!(e.proc_stime(), 500 * US);
        let p = s.threads[peer.index()];
        assert_eq!(
            (p.utime, p.stime, p.softirq),
            (Duration::ZERO, 300 * US, Duration::ZERO)
        );
        assert_eq!(s.cpu_of(ThreadKind::Engine), 700 * US);
        let busy: Duration = s.cores.iter().map(CoreStat::busy).sum();
        let cpu: Duration = s.threads.iter().map(ThreadStat::cpu).sum();
        assert_eq!(busy, cpu);
        for c in &s.cores {
            assert_eq!(c.busy() + c.idle, s.at - Instant::ZERO);
        }
        assert_eq!(m.name(engine), Some("engine"));
    }

    #[test]
    fn speed_divides_the_work_and_splits_stay_exact() {
        let mut m = Cores::new(&CoresSpec {
            speeds: vec![0.25],
            quantum: Duration::from_nanos(7),
            wake_same_core: Duration::ZERO,
            wake_cross_core: Duration::ZERO,
        })
        .unwrap();
        let a = m.spawn(thread("a", Affinity::Pinned(0))).unwrap();
        let b = m.spawn(thread("b", Affinity::Pinned(0))).unwrap();
        let job = Job {
            user: Duration::from_nanos(3),
            system: Duration::from_nanos(5),
            softirq: Duration::from_nanos(2),
            waker: None,
        };
        m.offer(Instant::ZERO, a, job).unwrap();
        m.offer(Instant::ZERO, b, job).unwrap();
        let d = m.drain();
        // 10 ns of work at a quarter speed, twice: 80 ns.
        assert_eq!(
            d.iter().map(|d| d.finish).max(),
            Some(Instant::from_nanos(80))
        );
        let s = m.stat();
        for t in &s.threads {
            assert_eq!(t.cpu(), Duration::from_nanos(40));
            // 12 ns and 8 ns, to the rounding of each 7 ns slice's split.
            assert!(t.utime.abs_diff(Duration::from_nanos(12)) <= Duration::from_nanos(2));
            assert!(t.softirq.abs_diff(Duration::from_nanos(8)) <= Duration::from_nanos(2));
        }
        assert_eq!(s.cores[0].busy(), Duration::from_nanos(80));
    }

    /// A seeded workload over three floating and pinned threads.
    fn workload(seed: u64) -> (Vec<Done>, ProcStat, u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut m = Cores::new(&CoresSpec {
            quantum: 50 * US,
            ..CoresSpec::default()
        })
        .unwrap();
        let ts = [
            m.spawn(thread("e", Affinity::Pinned(0))).unwrap(),
            m.spawn(thread("p", Affinity::Any)).unwrap(),
            m.spawn(thread("q", Affinity::Set(vec![1]))).unwrap(),
        ];
        let mut t = Instant::ZERO;
        let mut done = Vec::new();
        for _ in 0..2_000 {
            t += Duration::from_nanos(rng.random_range(0..20_000));
            done.extend(m.advance(t));
            let who = ts[rng.random_range(0..3)];
            let job = Job {
                user: Duration::from_nanos(rng.random_range(0..30_000)),
                system: Duration::from_nanos(rng.random_range(0..10_000)),
                softirq: Duration::from_nanos(rng.random_range(0..5_000)),
                waker: if rng.random_bool(0.5) {
                    Some(ts[rng.random_range(0..3)])
                } else {
                    None
                },
            };
            m.offer(t, who, job).unwrap();
        }
        done.extend(m.drain());
        (done, m.stat(), m.trace_hash())
    }

    #[test]
    fn same_seed_same_run() {
        let (a, sa, ha) = workload(1);
        let (b, sb, hb) = workload(1);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        assert_eq!(ha, hb);
        let (c, _, hc) = workload(2);
        assert_ne!(a, c);
        assert_ne!(ha, hc);
        // Every job ended, once, after it arrived; the books balance.
        assert_eq!(a.len(), 2_000);
        assert!(
            a.iter()
                .all(|d| d.arrival <= d.start && d.start <= d.finish)
        );
        let busy: Duration = sa.cores.iter().map(CoreStat::busy).sum();
        let cpu: Duration = sa.threads.iter().map(ThreadStat::cpu).sum();
        assert_eq!(busy, cpu);
        // q may only run on core 1, e only on core 0.
        assert!(
            a.iter()
                .all(|d| d.thread.index() == 1 || d.core == d.thread.index().min(1))
        );
    }

    proptest::proptest! {
        /// Any workload: every job ends once, after it arrived, in its
        /// thread's order, on a core its thread may use, and the threads'
        /// CPU time is the cores' busy time.
        #[test]
        fn any_workload_keeps_the_books(
            ops in proptest::collection::vec(
                (0u64..50_000, 0usize..3, 0u64..40_000, 0u64..10_000, 0u64..5_000,
                 proptest::option::of(0usize..3)),
                1..150,
            ),
            quantum in 1u64..100_000,
            speed in 0.1f64..4.0,
            wake in 0u64..30_000,
        ) {
            let mut m = Cores::new(&CoresSpec {
                speeds: vec![1.0, speed],
                quantum: Duration::from_nanos(quantum),
                wake_same_core: Duration::from_nanos(wake / 3),
                wake_cross_core: Duration::from_nanos(wake),
            })
            .unwrap();
            let affinities = [Affinity::Pinned(0), Affinity::Any, Affinity::Pinned(1)];
            let ts: Vec<ThreadId> = affinities
                .iter()
                .map(|a| m.spawn(thread("t", a.clone())).unwrap())
                .collect();
            let mut t = Instant::ZERO;
            let mut done = Vec::new();
            let mut offered = Vec::new();
            for (gap, who, u, sys, q, waker) in ops {
                t += Duration::from_nanos(gap);
                done.extend(m.advance(t));
                let job = Job {
                    user: Duration::from_nanos(u),
                    system: Duration::from_nanos(sys),
                    softirq: Duration::from_nanos(q),
                    waker: waker.map(|w| ts[w]),
                };
                offered.push((m.offer(t, ts[who], job).unwrap(), who));
            }
            done.extend(m.drain());
            proptest::prop_assert_eq!(done.len(), offered.len());
            let mut last_finish = [Instant::ZERO; 3];
            for (id, who) in &offered {
                let d = done.iter().find(|d| d.job == *id).unwrap();
                proptest::prop_assert_eq!(d.thread, ts[*who]);
                proptest::prop_assert!(d.arrival <= d.start && d.start <= d.finish);
                proptest::prop_assert!(d.finish >= last_finish[*who]);
                last_finish[*who] = d.finish;
                proptest::prop_assert!(*who == 1 || d.core == *who / 2);
            }
            let s = m.stat();
            let busy: Duration = s.cores.iter().map(CoreStat::busy).sum();
            let cpu: Duration = s.threads.iter().map(ThreadStat::cpu).sum();
            proptest::prop_assert_eq!(busy, cpu);
            for c in &s.cores {
                proptest::prop_assert_eq!(c.busy() + c.idle, s.at - Instant::ZERO);
            }
            proptest::prop_assert_eq!(m.next_event(), None);
        }
    }

    #[test]
    fn bad_inputs_are_refused() {
        let spec = |speeds: Vec<f64>| CoresSpec {
            speeds,
            ..CoresSpec::default()
        };
        assert_eq!(Cores::new(&spec(vec![])).unwrap_err(), CpuError::NoCores);
        assert_eq!(
            Cores::new(&spec(vec![1.0; 65])).unwrap_err(),
            CpuError::TooManyCores(65)
        );
        assert!(Cores::new(&spec(vec![1.0; 64])).is_ok());
        for s in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Cores::new(&spec(vec![1.0, s])),
                Err(CpuError::Speed { core: 1, .. })
            ));
        }
        let zero = CoresSpec {
            quantum: Duration::ZERO,
            ..CoresSpec::default()
        };
        assert_eq!(Cores::new(&zero).unwrap_err(), CpuError::Quantum);

        let mut m = machine(2);
        assert_eq!(
            m.spawn(thread("x", Affinity::Set(vec![]))).unwrap_err(),
            CpuError::NoAffinity
        );
        assert_eq!(
            m.spawn(thread("x", Affinity::Pinned(2))).unwrap_err(),
            CpuError::CoreOutOfRange { core: 2, cores: 2 }
        );
        assert!(m.spawn(thread("x", Affinity::Set(vec![0, 9]))).is_err());
        let a = m.spawn(thread("a", Affinity::Any)).unwrap();
        assert_eq!(
            m.offer(Instant::ZERO, ThreadId(5), Job::user(US))
                .unwrap_err(),
            CpuError::UnknownThread(5)
        );
        let bad_waker = Job {
            waker: Some(ThreadId(7)),
            ..Job::user(US)
        };
        assert!(m.offer(Instant::ZERO, a, bad_waker).is_err());
        m.offer(Instant::from_micros(10), a, Job::user(US)).unwrap();
        let e = m
            .offer(Instant::from_micros(9), a, Job::user(US))
            .unwrap_err();
        assert!(matches!(e, CpuError::OutOfOrder { .. }), "{e}");
        m.advance(Instant::from_millis(1));
        assert_eq!(m.now(), Instant::from_millis(1));
        assert!(
            m.offer(Instant::from_micros(500), a, Job::user(US))
                .is_err()
        );
        // Nothing refused was taken.
        assert_eq!(m.stat().threads[0].jobs, 1);
        // Huge work saturates at the end of time instead of overflowing.
        m.offer(Instant::from_millis(1), a, Job::user(Duration::MAX))
            .unwrap();
        m.offer(Instant::from_millis(1), a, Job::user(Duration::MAX))
            .unwrap();
        let d = m.drain();
        assert_eq!(d.len(), 2);
        assert!(d.iter().all(|d| d.finish == Instant::MAX));
    }
}
