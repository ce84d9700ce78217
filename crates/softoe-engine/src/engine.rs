//! The engine: a stack on a port, driven by a poll loop.
//!
//! One thread runs it. Each turn it reads a batch of frames (after an
//! optional interrupt-coalescing delay), hands them to the stack, lets the
//! services act, polls the stack's timers, answers `softoe stat` on the
//! control socket, and then either goes round again at once (work is
//! waiting), spins briefly, or sleeps in `poll(2)` on the port until a frame
//! arrives or the stack's next deadline. On two cores a spinning engine would
//! starve the applications and the peer, so the spin is short and tunable.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use softoe_stack::{Device, Instant, PayloadRef, RxRing, Stack, StackConfig, TxBusy, TxFrame};
use tracing::{debug, info, warn};

use crate::control::Control;
use crate::counters::EngineCounters;
use crate::emulate::{self, Emulation};
use crate::instrument::Instrument;
use crate::memory::{self, Memory};
use crate::pcap::Pcap;
use crate::port::Port;
use crate::service::Service;
use crate::steer::{Steer, Steering};

/// How the engine runs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineConfig {
    /// Spin this long waiting for work before sleeping.
    pub spin: Duration,
    /// Interrupt coalescing: after a frame arrives, wait this long for more
    /// before processing them together (zero: off).
    pub rx_coalesce: Duration,
    /// Most frames read per turn.
    pub rx_batch: usize,
    /// Answer a turn's received segments once, at the end of the batch
    /// (one ACK per connection per batch: receive coalescing in software,
    /// see `Stack::begin_batch`); off: every segment is answered at once.
    pub batch_acks: bool,
    /// Longest sleep when nothing is due (so stop requests are seen).
    pub max_sleep: Duration,
    /// Write every frame to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Serve `softoe stat` on this Unix socket.
    pub control: Option<PathBuf>,
    /// Pin the engine's thread to this core (the engine core); `None`:
    /// wherever the scheduler puts it.
    pub cpu: Option<usize>,
    /// The engine thread's nice value (−20 to 19; below 0 needs root or
    /// `CAP_SYS_NICE`); `None`: the one it was started with. The engine is
    /// the machine's network stack for its programs, as the kernel's
    /// softirq work is for Linux's: on a machine busy with other work, a
    /// negative value keeps it from waiting behind that work for a core
    /// (a wake-up, a dead program's reclaim). It spins only
    /// [`EngineConfig::spin`] before it sleeps, so it takes no more than
    /// its work.
    pub nice: Option<i32>,
    /// Emulate an engine core `speed` times as fast as this one (the
    /// simulator's `engine.speed`): after each turn that did work, lasting
    /// `w`, busy-wait `w·(1/speed − 1)`. `0 < speed ≤ 1`; 1 (the default):
    /// full speed, nothing measured or added. Emulated waits inside the
    /// turn (`access_delay`, `rx_coalesce`) are not work and are not
    /// scaled: memory and the wire are no slower on a slower core.
    pub speed: f64,
    /// Emulate slower memory between the engine and the programs:
    /// busy-wait this long at every access the engine makes to a program's
    /// shared memory through the host interface (a command taken, a
    /// completion or socket event published, a doorbell rung). The
    /// simulator's `memory.delay` multiplies the cost of those accesses: at
    /// a measured cost `a` per access on this machine, a multiplier `m` is
    /// `access_delay = (m − 1)·a`. Zero (the default): no delay. At most
    /// [`MAX_ACCESS_DELAY`].
    pub access_delay: Duration,
    /// Time each stage of the engine's work (receive, transmit, commands,
    /// serving sockets, the stack's poll, wake-ups) into
    /// [`EngineCounters::stages`], for calibrating the simulator. Off (the
    /// default), a turn pays a branch per stage and nothing more.
    pub profile_stages: bool,
    /// Whether the kernel's work for the frames the engine writes into its
    /// TAP moves to other cores (RPS on the device's queue; see
    /// [`crate::steer`]). `Auto` (the default): where there is room for it.
    pub steer: Steer,
    /// How a stop ends the engine's connections ([`Engine::run`]): each is
    /// closed (a FIN after what is queued) and has this long to be
    /// acknowledged; every connection still open then is reset, so no peer
    /// is left waiting for a host that is gone. Zero (the default for a
    /// library engine; `softoe engine` gives 1 s): reset at once.
    pub stop_grace: Duration,
}

/// The longest [`EngineConfig::access_delay`]: past it the engine would
/// spend its life waiting (a command and its completion at a millisecond
/// each answer 500 commands a second).
pub const MAX_ACCESS_DELAY: Duration = Duration::from_millis(1);

/// An [`EngineConfig`] the engine cannot run with.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineConfigError {
    /// The speed is not in `(0, 1]` (or not a number).
    #[error("engine speed {0} is not in (0, 1]: the engine can be slowed, not sped up")]
    Speed(f64),
    /// The access delay is above [`MAX_ACCESS_DELAY`].
    #[error("access delay {0:?} is above the most allowed, {max:?}", max = MAX_ACCESS_DELAY)]
    AccessDelay(Duration),
}

impl EngineConfig {
    /// Checks the settings that have a range.
    pub fn validate(&self) -> Result<(), EngineConfigError> {
        if !(self.speed > 0.0 && self.speed <= 1.0) {
            return Err(EngineConfigError::Speed(self.speed));
        }
        if self.access_delay > MAX_ACCESS_DELAY {
            return Err(EngineConfigError::AccessDelay(self.access_delay));
        }
        Ok(())
    }

    /// This configuration at `speed` (see [`EngineConfig::speed`]), or
    /// why not.
    pub fn with_speed(mut self, speed: f64) -> Result<EngineConfig, EngineConfigError> {
        self.speed = speed;
        self.validate().map(|()| self)
    }

    /// This configuration with `delay` per shared-memory access (see
    /// [`EngineConfig::access_delay`]), or why not.
    pub fn with_access_delay(mut self, delay: Duration) -> Result<EngineConfig, EngineConfigError> {
        self.access_delay = delay;
        self.validate().map(|()| self)
    }

    /// What the services are told ([`Service::emulate`]).
    pub fn emulation(&self) -> Emulation {
        Emulation::new(self.access_delay, self.profile_stages)
    }
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            spin: Duration::from_micros(50),
            rx_coalesce: Duration::ZERO,
            rx_batch: 64,
            batch_acks: true,
            max_sleep: Duration::from_millis(20),
            pcap: None,
            control: None,
            cpu: None,
            nice: None,
            speed: 1.0,
            access_delay: Duration::ZERO,
            profile_stages: false,
            steer: Steer::Auto,
            stop_grace: Duration::ZERO,
        }
    }
}

/// Why the engine could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The stack rejected its configuration.
    #[error("stack configuration: {0}")]
    Stack(softoe_stack::ConfigError),
    /// The engine's configuration is out of range.
    #[error("engine configuration: {0}")]
    Config(#[from] EngineConfigError),
    /// A service could not start.
    #[error("service {name}: {why}")]
    Service {
        /// Which.
        name: String,
        /// Why.
        why: crate::service::ServiceError,
    },
    /// An I/O error on the port, pcap or control socket.
    #[error("{what}: {source}")]
    Io {
        /// Doing what.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// Controls a running engine from other threads: stop it, or start more
/// services on it.
#[derive(Clone, Debug)]
pub struct StopHandle {
    stop: Arc<AtomicBool>,
    hurry: Arc<AtomicBool>,
    services: mpsc::Sender<Box<dyn Service>>,
}

impl StopHandle {
    /// Asks the engine to stop (it notices within `max_sleep`): its
    /// connections close, with [`EngineConfig::stop_grace`] to finish.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Asks the engine to stop now: every connection still open is reset
    /// without waiting out the grace (a second Ctrl-C).
    pub fn hurry(&self) {
        self.hurry.store(true, Ordering::Relaxed);
        self.stop();
    }

    /// Starts `s` on the engine at its next turn. Fails if the engine is gone.
    pub fn add_service(&self, s: Box<dyn Service>) -> Result<(), Box<dyn Service>> {
        self.services.send(s).map_err(|e| e.0)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The stack's view of the port during one call.
struct PortDev<'a, P: Port> {
    port: &'a mut P,
    mem: &'a Memory,
    pcap: Option<&'a mut Pcap>,
    counters: &'a mut EngineCounters,
    /// Profiles port writes; a slowed engine pays its wait before each
    /// frame leaves.
    inst: &'a mut Instrument,
}

/// The port as the stack sees it, borrowed from the engine's fields (a
/// macro, not a method, so the stack and the receive buffer stay free).
macro_rules! port_dev {
    ($e:expr) => {
        PortDev {
            port: &mut $e.port,
            mem: &$e.mem,
            pcap: $e.pcap.as_mut(),
            counters: &mut $e.counters,
            inst: &mut $e.inst,
        }
    };
}

impl<P: Port> PortDev<'_, P> {
    /// Runs one stage of the stack's on the port; given its start (stages
    /// profiled), returns the stage's own time: since then, less the port
    /// writes and the slowed engine's waits before them.
    fn stage(&mut self, t0: Option<std::time::Instant>, f: impl FnOnce(&mut Self)) -> Option<u64> {
        let (tx0, spun0) = (self.counters.stages.tx.nanos, self.inst.spun());
        f(self);
        let t = t0?;
        let tx = self.counters.stages.tx.nanos.saturating_sub(tx0)
            + self.inst.spun().saturating_sub(spun0);
        Some(emulate::nanos(t.elapsed()).saturating_sub(tx))
    }
}

/// The CPUs the calling thread may run on (`sched_getaffinity`): at the
/// start of a program, the process's allowed set (taskset, a cgroup's
/// cpuset).
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(None)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .collect())
}

/// CPUs as the kernel lists them: `0-3,6`.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while let Some(&first) = cpus.get(i) {
        let mut last = first;
        while cpus.get(i + 1) == Some(&(last + 1)) {
            last += 1;
            i += 1;
        }
        out.push(if last == first {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
        i += 1;
    }
    out.join(",")
}

/// A kernel CPU list (`0-3,6`, as in `/sys/devices/system/cpu/present`):
/// whether it holds `cpu`.
fn list_holds(list: &str, cpu: usize) -> Option<bool> {
    let mut holds = false;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
        holds |= (a..=b).contains(&cpu);
    }
    Some(holds)
}

/// Whether the engine may be pinned to `cpu` ([`EngineConfig::cpu`]): it
/// exists, is online and is in the calling thread's allowed set. The error
/// says which of these fails and which CPUs are allowed, e.g. "this
/// machine has no CPU 99; this process may run on CPUs 0-1".
pub fn check_cpu(cpu: usize) -> io::Result<()> {
    let allowed = allowed_cpus()?;
    if allowed.contains(&cpu) {
        return Ok(());
    }
    let sys = |f: &str| std::fs::read_to_string(format!("/sys/devices/system/cpu/{f}")).ok();
    let holds = |f: &str| sys(f).and_then(|l| list_holds(&l, cpu));
    let list = format!(
        "{} {}",
        if allowed.len() == 1 { "CPU" } else { "CPUs" },
        cpu_list(&allowed)
    );
    let msg = if cpu >= libc::CPU_SETSIZE as usize || holds("present") == Some(false) {
        format!("this machine has no CPU {cpu}; this process may run on {list}")
    } else if holds("online") == Some(false) {
        format!("CPU {cpu} is offline; this process may run on {list}")
    } else {
        format!(
            "this process may not run on CPU {cpu}, only on {list} (taskset or a cgroup's \
             cpuset limits it)"
        )
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, msg))
}

/// Gives the calling thread nice value `nice` ([`EngineConfig::nice`]);
/// the error says what the value needs.
pub fn set_nice(nice: i32) -> io::Result<()> {
    if !(-20..=19).contains(&nice) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("nice {nice} is not in -20..=19"),
        ));
    }
    // On Linux PRIO_PROCESS with a thread id sets that thread's nice value
    // alone, not its process's.
    let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice) else {
        return Ok(());
    };
    let e = io::Error::from(e);
    if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EPERM) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{nice} is below the nice value the engine started with: that needs root or \
                 CAP_SYS_NICE (or an RLIMIT_NICE that allows it)"
            ),
        ));
    }
    Err(e)
}

/// Whether the engine may run at nice value `nice`: tried on a thread of
/// its own that ends at once (what the engine's thread will be allowed,
/// asked before anything starts).
pub fn check_nice(nice: i32) -> io::Result<()> {
    std::thread::scope(|s| {
        s.spawn(|| set_nice(nice))
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the nice check's thread failed")))
    })
}

/// Pins the calling thread to core `cpu` (after [`check_cpu`]).
fn pin_to(cpu: usize) -> io::Result<()> {
    check_cpu(cpu)?;
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("no CPU {cpu}"),
        ));
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    Ok(rustix::thread::sched_setaffinity(None, &set)?)
}

fn wall_ts() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl<P: Port> Device for PortDev<'_, P> {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        self.mem.copy(r, offset, dst)
    }

    fn payload_in_place(&self, r: &PayloadRef) -> Option<&[u8]> {
        // Engine buffers only: a program's shared memory has no slice.
        self.mem.get(r)?.owned()
    }

    fn deliver(&mut self, ring: &RxRing, pos: u64, data: &[u8]) -> bool {
        self.mem.ring_write(ring, pos, data)
    }

    fn transmit(&mut self, f: &TxFrame<'_>) -> Result<(), TxBusy> {
        // The frame leaves when a slower core would have made it.
        self.inst.before_send();
        let sent = if self.inst.profiles() {
            let t0 = std::time::Instant::now();
            let r = self.port.send(f, self.mem);
            let tx = &mut self.counters.stages.tx;
            tx.nanos += emulate::nanos(t0.elapsed());
            if matches!(r, Ok(true)) {
                tx.count += 1;
                tx.bytes += f.len() as u64;
            }
            r
        } else {
            self.port.send(f, self.mem)
        };
        match sent {
            Ok(true) => {
                self.counters.frames_out += 1;
                self.counters.bytes_out += f.len() as u64;
                if let Some(p) = self.pcap.as_deref_mut() {
                    let mem = self.mem;
                    p.record_with(wall_ts(), |frame| {
                        frame.extend_from_slice(f.header);
                        for b in f.payload.iter().filter_map(|r| mem.get(r)) {
                            b.append_to(frame);
                        }
                    });
                }
                Ok(())
            }
            Ok(false) => {
                self.counters.tx_busy += 1;
                Err(TxBusy)
            }
            Err(e) => {
                // A frame the port cannot take is lost, as on a wire.
                self.counters.port_errors += 1;
                debug!(error = %e, "port send failed");
                Ok(())
            }
        }
    }
}

/// A stack, a port, memory and services.
pub struct Engine<P: Port> {
    stack: Stack,
    port: P,
    mem: Memory,
    services: Vec<Box<dyn Service>>,
    cfg: EngineConfig,
    rx_buf: Box<[u8]>,
    epoch: std::time::Instant,
    /// When `run` began (idle and run time are measured from it).
    started: std::time::Instant,
    /// When the control socket was last served.
    control_at: Instant,
    /// The port's path losses the stack has been told of.
    path_losses: u64,
    counters: EngineCounters,
    pcap: Option<Pcap>,
    control: Option<Control>,
    stop: StopHandle,
    inbox: mpsc::Receiver<Box<dyn Service>>,
    /// The descriptors a sleep waits on, rebuilt in place before each
    /// sleep (no allocation per sleep).
    pollfds: softoe_sys::event::PollSet,
    /// `port.describe()`, made once: the control socket is served every
    /// millisecond, and formatting it each time allocated.
    port_desc: String,
    /// Stage profiling and the slowed engine's busy-wait (`1/speed − 1` ns
    /// per ns of work, 0 at full speed), paid as the turn goes.
    inst: Instrument,
    /// The TAP queue's steering, while the engine runs.
    steering: Option<Steering>,
}

impl<P: Port> std::fmt::Debug for Engine<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("port", &self.port.describe())
            .field("stack", &self.stack)
            .finish_non_exhaustive()
    }
}

impl<P: Port> Engine<P> {
    /// An engine for `port`; the stack's device capabilities come from it.
    pub fn new(
        mut stack_cfg: StackConfig,
        port: P,
        cfg: EngineConfig,
    ) -> Result<Engine<P>, EngineError> {
        cfg.validate()?;
        stack_cfg.caps = port.caps();
        let stack = Stack::new(stack_cfg).map_err(EngineError::Stack)?;
        let mut mem = Memory::new();
        mem.add(memory::pattern(4 << 20, 1));
        let pcap = match &cfg.pcap {
            Some(p) => Some(Pcap::create(p).map_err(|source| EngineError::Io {
                what: "creating the pcap file",
                source,
            })?),
            None => None,
        };
        let control = match &cfg.control {
            Some(p) => Some(Control::bind(p).map_err(|source| EngineError::Io {
                what: "binding the control socket",
                source,
            })?),
            None => None,
        };
        let (tx, inbox) = mpsc::channel();
        let port_desc = port.describe();
        // Exactly 0 at speed 1: nothing is measured or added.
        let slowdown = 1.0 / cfg.speed - 1.0;
        let inst = Instrument::new(slowdown, cfg.profile_stages);
        Ok(Engine {
            stack,
            port,
            mem,
            services: Vec::new(),
            cfg,
            rx_buf: vec![0u8; 128 * 1024].into_boxed_slice(),
            epoch: std::time::Instant::now(),
            started: std::time::Instant::now(),
            control_at: Instant::ZERO,
            path_losses: 0,
            counters: EngineCounters::default(),
            pcap,
            control,
            stop: StopHandle {
                stop: Arc::new(AtomicBool::new(false)),
                hurry: Arc::new(AtomicBool::new(false)),
                services: tx,
            },
            inbox,
            pollfds: softoe_sys::event::PollSet::new(),
            port_desc,
            inst,
            steering: None,
        })
    }

    /// Adds a service (before [`run`](Self::run)).
    pub fn add_service(&mut self, mut s: Box<dyn Service>) {
        s.emulate(&self.cfg.emulation());
        self.services.push(s);
    }

    /// A handle that stops [`run`](Self::run).
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The stack (for library use between turns).
    pub fn stack_mut(&mut self) -> &mut Stack {
        &mut self.stack
    }

    /// The engine's memory.
    pub fn memory_mut(&mut self) -> &mut Memory {
        &mut self.mem
    }

    /// Counters so far.
    pub fn counters(&self) -> &EngineCounters {
        &self.counters
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// Runs until stopped.
    pub fn run(&mut self) -> Result<(), EngineError> {
        if let Some(cpu) = self.cfg.cpu {
            pin_to(cpu).map_err(|source| EngineError::Io {
                what: "pinning the engine to its core",
                source,
            })?;
            info!(cpu, "engine pinned to its core");
        }
        if let Some(nice) = self.cfg.nice {
            set_nice(nice).map_err(|source| EngineError::Io {
                what: "setting the engine thread's nice value",
                source,
            })?;
            info!(nice, "engine thread's nice value set");
        }
        // The kernel lets a sleep of an ordinary thread end up to 50 µs
        // late (timer slack), which is more than a probe timeout on a
        // microsecond path. The engine's sleeps are deadlines: take them
        // to the microsecond. Failure only costs precision.
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
        let now = self.now();
        while let Ok(s) = self.inbox.try_recv() {
            self.add_service(s);
        }
        for s in &mut self.services {
            s.start(now, &mut self.stack, &mut self.mem)
                .map_err(|why| EngineError::Service {
                    name: s.name().to_string(),
                    why,
                })?;
        }
        {
            let mut dev = port_dev!(self);
            self.stack.announce(now, &mut dev);
        }
        info!(port = %self.port.describe(), "engine running");
        self.started = std::time::Instant::now();
        if let Some(dev) = self.port.steer_device() {
            // After pinning: the first look must see the engine's own core.
            self.steering = match Steering::open(dev, self.cfg.steer, self.started) {
                Ok(s) => s,
                Err(e) => {
                    warn!(dev, error = %e, "cannot steer the TAP's queue; the kernel's work for sent frames stays on the engine's core");
                    None
                }
            };
        }
        let mut idle_since: Option<std::time::Instant> = None;
        while !self.stop.stopped() {
            let busy = self.turn()?;
            // A look every 16 turns is plenty for a 100 ms period, and
            // spares the spin a clock read per turn.
            if let Some(st) = self
                .steering
                .as_mut()
                .filter(|_| self.counters.turns.is_multiple_of(16))
            {
                st.tick(
                    std::time::Instant::now(),
                    self.counters.idle_nanos + self.counters.spin_nanos,
                    self.counters.frames_in + self.counters.frames_out,
                );
                self.counters.steer_switches = st.switches;
                self.counters.steered_nanos = st.steered_nanos;
            }
            if busy {
                if let Some(t) = idle_since.take() {
                    self.counters.spin_nanos += t.elapsed().as_nanos() as u64;
                }
                continue;
            }
            let idle = *idle_since.get_or_insert_with(std::time::Instant::now);
            let spun = idle.elapsed();
            if spun < self.cfg.spin {
                std::hint::spin_loop();
                continue;
            }
            self.counters.spin_nanos += spun.as_nanos() as u64;
            self.sleep();
            idle_since = None;
        }
        self.end_connections()?;
        self.counters.run_nanos = self.started.elapsed().as_nanos() as u64;
        if let Some(mut st) = self.steering.take() {
            st.finish(std::time::Instant::now());
            self.counters.steer_switches = st.switches;
            self.counters.steered_nanos = st.steered_nanos;
            // Dropping it puts the queue's own mask back.
        }
        self.port.stop();
        self.port.flush();
        if let Some(p) = self.pcap.as_mut() {
            p.flush();
        }
        info!("engine stopped");
        Ok(())
    }

    /// The stop's end of every connection: each open one is closed (its
    /// FIN follows what is queued) and the engine runs on, programs served,
    /// until every connection has ended both ways (`TIME-WAIT` or closed)
    /// or [`EngineConfig::stop_grace`] passes (or [`StopHandle::hurry`]);
    /// what is still open then is reset — also one whose peer has not
    /// closed its half (`FIN-WAIT-2`): nobody will read what it sends.
    /// Linux, whose host does not go away under its sockets, has no such
    /// step; a peer of a stopped softoe sees what it would see of a closed
    /// or a crashed program instead of silence.
    fn end_connections(&mut self) -> Result<(), EngineError> {
        use softoe_stack::State;
        let open = |st: &Stack| -> Vec<softoe_stack::SocketHandle> {
            st.sockets()
                .filter(|&h| {
                    matches!(
                        st.tcp_state(h),
                        Ok(State::SynSent
                            | State::SynReceived
                            | State::Established
                            | State::CloseWait
                            | State::FinWait1
                            | State::FinWait2
                            | State::Closing
                            | State::LastAck)
                    )
                })
                .collect()
        };
        let first = open(&self.stack);
        if first.is_empty() {
            return Ok(());
        }
        let hurry = self.cfg.stop_grace.is_zero() || self.stop.hurry.load(Ordering::Relaxed);
        info!(
            connections = first.len(),
            grace = ?self.cfg.stop_grace,
            "stopping: closing every connection"
        );
        if !hurry {
            for &h in &first {
                let _ = self.stack.tcp_shutdown(h);
            }
            let end = std::time::Instant::now() + self.cfg.stop_grace;
            while std::time::Instant::now() < end && !self.stop.hurry.load(Ordering::Relaxed) {
                // Every connection ended both ways.
                if open(&self.stack).is_empty() {
                    break;
                }
                if !self.turn()? {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        let left = open(&self.stack);
        for &h in &left {
            let _ = self.stack.tcp_abort(h);
        }
        if !left.is_empty() {
            info!(
                connections = left.len(),
                "stopping: reset what was still open"
            );
        }
        // The FINs' and RSTs' frames leave before the port closes.
        for _ in 0..4 {
            self.turn()?;
        }
        Ok(())
    }

    /// One turn of the loop; returns whether anything happened.
    ///
    /// A turn that did work is timed when the engine is slowed or profiles
    /// its stages, and a slowed engine then busy-waits in proportion
    /// ([`EngineConfig::speed`]).
    pub fn turn(&mut self) -> Result<bool, EngineError> {
        if !self.inst.timed() {
            let busy = self.turn_work()?;
            self.drain_services();
            return Ok(busy);
        }
        let delayed = self.counters.access_delay_nanos;
        self.inst.start_turn();
        let busy = self.turn_work()?;
        self.drain_services();
        // The memory delay is known now (the services report it after the
        // turn).
        let mem = self.counters.access_delay_nanos.saturating_sub(delayed);
        self.inst.end_turn(busy, mem, &mut self.counters);
        Ok(busy)
    }

    /// Collects what the services counted this turn.
    fn drain_services(&mut self) {
        for s in &mut self.services {
            s.drain_counters(&mut self.counters);
        }
    }

    /// The turn's work, in its order: services handed over start, a batch
    /// of frames is received (and answered once, batching on), a lost path
    /// is reported to the connections, the services and the stack's timers
    /// run, and what they sent leaves; the control socket is looked at.
    /// Whether there was work (or the stack is due again at once).
    fn turn_work(&mut self) -> Result<bool, EngineError> {
        self.counters.turns += 1;
        let started = self.start_services();
        let received = self.receive_batch();
        let path = self.follow_path_losses();
        let now = self.now();
        let served = self.serve_and_poll(now);
        // What the turn sent goes out now: one system call for the batch
        // on a ring-based port.
        self.port.flush();
        self.serve_control(now);
        Ok(started | received | path | served || self.stack.poll_at().is_some_and(|t| t <= now))
    }

    /// Starts the services handed over since the last turn; whether any
    /// was.
    fn start_services(&mut self) -> bool {
        let mut any = false;
        while let Ok(mut s) = self.inbox.try_recv() {
            let now = self.now();
            s.emulate(&self.cfg.emulation());
            match s.start(now, &mut self.stack, &mut self.mem) {
                Ok(()) => self.services.push(s),
                Err(why) => warn!(service = s.name(), %why, "service failed to start"),
            }
            any = true;
        }
        any
    }

    /// Receives a batch of frames, answering them once at its end when
    /// acknowledgements are batched; whether any arrived.
    fn receive_batch(&mut self) -> bool {
        if self.cfg.batch_acks {
            self.stack.begin_batch();
        }
        let got = self.receive_frames();
        if self.cfg.batch_acks {
            self.end_batch(got);
        }
        if got > 0 {
            self.counters.rx_batches += 1;
        }
        got > 0
    }

    /// Reads up to `rx_batch` frames into the stack (after an
    /// interrupt-coalescing wait for more, if configured); how many.
    fn receive_frames(&mut self) -> usize {
        let mut got = 0;
        let coalesce_until = (!self.cfg.rx_coalesce.is_zero())
            .then(|| std::time::Instant::now() + self.cfg.rx_coalesce);
        // Since when this batch has waited for more frames (timed turns).
        let mut coalescing: Option<std::time::Instant> = None;
        while got < self.cfg.rx_batch {
            let t_rx = self.inst.stage_clock();
            match self.port.recv(&mut self.rx_buf) {
                Ok(Some(f)) => {
                    self.inst.coalesced(coalescing.take());
                    got += 1;
                    let now = self.now();
                    let frame = self.rx_buf.get(f.start..f.start + f.len).unwrap_or(&[]);
                    self.counters.frames_in += 1;
                    self.counters.bytes_in += f.len as u64;
                    if let Some(p) = self.pcap.as_mut() {
                        p.record(wall_ts(), [frame]);
                    }
                    let stack = &mut self.stack;
                    let mut dev = port_dev!(self);
                    let took = dev.stage(t_rx, |dev| stack.receive(now, frame, f.meta, dev));
                    if let Some(took) = took {
                        self.counters.stages.rx.add(took, f.len as u64);
                    }
                }
                Ok(None) => {
                    // Interrupt coalescing: give more frames a moment.
                    match coalesce_until {
                        Some(t) if got > 0 => {
                            let n = std::time::Instant::now();
                            if n >= t {
                                break;
                            }
                            self.inst.coalescing_from(&mut coalescing, n);
                            std::hint::spin_loop();
                        }
                        _ => break,
                    }
                }
                Err(e) => {
                    self.counters.port_errors += 1;
                    warn!(error = %e, "port receive failed");
                    break;
                }
            }
        }
        self.inst.coalesced(coalescing);
        got
    }

    /// Answers the batch's `got` frames' segments at once.
    fn end_batch(&mut self, got: usize) {
        let now = self.now();
        let t_end = self.inst.stage_clock_if(got > 0);
        let stack = &mut self.stack;
        let mut dev = port_dev!(self);
        // The batch's answers are receive work: their time goes with the
        // frames' (no count of its own).
        if let Some(took) = dev.stage(t_end, |dev| stack.end_batch(now, dev)) {
            self.counters.stages.rx.nanos += took;
        }
    }

    /// A path went away under the connections (a bonded member left):
    /// they probe at once rather than after their probe timeouts. Whether
    /// one did.
    fn follow_path_losses(&mut self) -> bool {
        let losses = self.port.path_losses();
        if losses == self.path_losses {
            return false;
        }
        self.path_losses = losses;
        self.stack.path_changed();
        true
    }

    /// The services take the stack's events and act, and the stack does
    /// its own work, a few rounds while they have more; whether anything
    /// happened.
    fn serve_and_poll(&mut self, now: Instant) -> bool {
        let mut busy = false;
        for _ in 0..8 {
            let mut events = 0;
            while let Some((h, e)) = self.stack.poll_event() {
                events += 1;
                for s in &mut self.services {
                    s.event(h, e);
                }
            }
            let mut acted = false;
            for s in &mut self.services {
                acted |= s.step(now, &mut self.stack, &mut self.mem);
            }
            let t_poll = self.inst.stage_clock();
            let stack = &mut self.stack;
            let mut dev = port_dev!(self);
            if let Some(took) = dev.stage(t_poll, |dev| stack.poll(now, dev)) {
                self.counters.stages.poll.add(took, 0);
            }
            busy |= acted || events > 0;
            if !acted && events == 0 {
                break;
            }
        }
        busy
    }

    /// Answers the control socket, once a millisecond rather than every
    /// turn: an accept(2) per turn would cost more than the frames.
    fn serve_control(&mut self, now: Instant) {
        if let Some(c) = self.control.as_mut()
            && now.saturating_duration_since(self.control_at) >= Duration::from_millis(1)
        {
            self.control_at = now;
            self.counters.run_nanos = self.started.elapsed().as_nanos() as u64;
            c.serve(&self.stack, &self.counters, &self.port_desc, &mut self.port);
        }
    }

    /// Sleeps until a frame arrives, the next deadline, or `max_sleep`.
    fn sleep(&mut self) {
        let now = self.now();
        let mut timeout = self.cfg.max_sleep;
        let deadlines = self
            .stack
            .poll_at()
            .into_iter()
            .chain(self.services.iter().filter_map(|s| s.wake_at()));
        for t in deadlines {
            timeout = timeout.min(t.saturating_duration_since(now));
        }
        if let Some(t) = self.port.wake_at() {
            timeout = timeout.min(t.saturating_duration_since(std::time::Instant::now()));
        }
        if timeout.is_zero() {
            return;
        }
        let mut woke = false;
        for s in &mut self.services {
            woke |= s.before_sleep();
        }
        let mut deadline = None;
        if !woke {
            deadline = self.sleep_for(timeout);
        }
        for s in &mut self.services {
            s.after_sleep();
        }
        // The loop runs again now: how late after the deadline it asked for.
        if let Some(d) = deadline {
            let late = emulate::nanos(std::time::Instant::now().saturating_duration_since(d));
            let wake = &mut self.counters.stages.wake;
            wake.late_nanos += late;
            wake.max_late_nanos = wake.max_late_nanos.max(late);
        }
    }

    /// Sleeps in `ppoll`; returns the deadline it asked for when the sleep
    /// ran to it and stages are profiled.
    fn sleep_for(&mut self, timeout: Duration) -> Option<std::time::Instant> {
        let fds = &mut self.pollfds;
        fds.clear();
        for fd in std::iter::once(self.port.raw_fd())
            .chain(self.services.iter().filter_map(|s| s.wake_fd()))
            .chain(self.control.as_ref().map(Control::raw_fd))
        {
            fds.push(fd);
        }
        // ppoll, not poll: timers and held frames are due to the
        // microsecond, and poll(2) would round every sleep up to a
        // millisecond.
        let t0 = std::time::Instant::now();
        let r = fds.wait(timeout);
        self.counters.sleeps += 1;
        self.counters.idle_nanos += t0.elapsed().as_nanos() as u64;
        if !self.cfg.profile_stages {
            return None;
        }
        // Above zero: descriptors ready; zero: the timeout; an error: a
        // signal, neither.
        match r {
            Ok(1..) => self.counters.stages.wake.by_fd += 1,
            Ok(0) => {
                self.counters.stages.wake.by_timeout += 1;
                return t0.checked_add(timeout);
            }
            _ => {}
        }
        None
    }

    /// Shows the host interface's sessions in `softoe stat`.
    pub fn watch_sessions(&mut self, s: crate::host::SessionStats) {
        if let Some(c) = self.control.as_mut() {
            c.watch_sessions(s);
        }
    }

    /// The pcap capture, if the engine writes one (how many frames it
    /// holds, and whether a write failed: [`Pcap::stopped`]).
    pub fn pcap(&self) -> Option<&Pcap> {
        self.pcap.as_ref()
    }

    /// The port (e.g. to read its name).
    pub fn port(&self) -> &P {
        &self.port
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn cpu_lists_read_and_write_as_the_kernel_writes_them() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(list_holds("0-3,6\n", 6), Some(true));
        assert_eq!(list_holds("0-3,6", 4), Some(false));
        assert_eq!(list_holds("0", 0), Some(true));
        assert_eq!(list_holds("x", 0), None);
    }

    /// A nice value is checked on a thread of its own: out of range is
    /// refused by name, raising it (always allowed) works, and the
    /// caller's own value does not move. Below the caller's, without
    /// CAP_SYS_NICE, the error says what it needs.
    #[test]
    fn nice_is_checked_without_touching_the_caller() {
        let mine = || rustix::process::getpriority_process(None).unwrap();
        let before = mine();
        let e = check_nice(20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("not in -20..=19"), "{e}");
        check_nice(19).unwrap();
        assert_eq!(mine(), before);
        let unprivileged = std::thread::spawn(|| {
            // This thread alone becomes `nobody` (the raw system call
            // changes only the calling thread's credentials, not the
            // process's as glibc's wrapper would), losing CAP_SYS_NICE.
            let nobody = rustix::process::Uid::from_raw(65534);
            rustix::thread::set_thread_res_uid(nobody, nobody, nobody).unwrap();
            set_nice(19).unwrap();
            // Back down from 19 needs CAP_SYS_NICE (or RLIMIT_NICE).
            set_nice(0)
        })
        .join()
        .unwrap();
        let e = unprivileged.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("CAP_SYS_NICE"), "{e}");
    }

    /// A CPU the machine cannot have is refused before anything runs,
    /// naming the CPUs this process may use; one it may use passes.
    #[test]
    fn a_cpu_outside_the_allowed_set_is_refused_by_name() {
        let allowed = allowed_cpus().unwrap();
        let first = *allowed.first().unwrap();
        check_cpu(first).unwrap();
        let e = check_cpu(100_000).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            e.to_string()
                .starts_with("this machine has no CPU 100000; this process may run on CPU")
                && e.to_string().ends_with(&cpu_list(&allowed)),
            "{e}"
        );
    }
}
