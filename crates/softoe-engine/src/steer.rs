//! Where the kernel does the work of the frames the engine sends.
//!
//! A frame the engine writes into its TAP device is received by the kernel
//! inside the engine's `write`: the bridge, and on a testbed whose peer is
//! on this machine the peer's whole TCP receive path and its wake-up, run on
//! the engine's core. At 200,000 64-byte requests a second that was a third
//! of the engine's time (docs/journal/2026-11-28-testbed-ceilings-and-steering.md,
//! "Steering the kernel's work off the engine's core").
//! Receive packet steering (RPS) on the TAP's queue moves that work to other
//! cores: the write puts the frame on another core's backlog and returns.
//!
//! That pays when the engine's core is the bottleneck and other cores have
//! time (100 connections of 64-byte requests: +17–27 % requests a second),
//! and costs when it is the other way round: a local sender streaming into
//! the engine gets its ACK processing moved onto its own, already full core
//! (−35 % goodput). So [`Steer::Auto`] measures both sides every
//! [`PERIOD`] and moves the work only where there is room for it:
//!
//! - it steers when the engine's core had less than [`ENGINE_BUSY`] of its
//!   time spare (asleep or spinning for work) and the other cores more than
//!   [`OTHERS_FREE`] (idle, from `/proc/stat`);
//! - it stops when the other cores had less than [`OTHERS_BUSY`] spare and
//!   the engine more than [`ENGINE_FREE`].
//!
//! Between those it keeps what it does (the gaps are the hysteresis: moving
//! the work changes both measurements). Every change is a trial: if the
//! engine's frames per second over the next period fall more than
//! [`WORSE`] below the period before it, the change is undone and not
//! tried again for a while ([`HOLD_MIN`], doubling up to [`HOLD_MAX`]).
//! Eight connections of 64-byte requests, for one, keep the engine's core
//! full with room on the others, yet run 12 % slower steered: the hand-off
//! to the other core is paid per frame there, and not enough frames wait
//! in each batch to spread it.
//!
//! The mask names every online core but the one the engine ran on at the
//! last look, and follows the engine if the scheduler moves it. The TAP's
//! own mask is put back when the engine stops.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

/// How often [`Steer::Auto`] looks.
pub const PERIOD: Duration = Duration::from_millis(100);
/// Steer when the engine's spare time is below this fraction…
pub const ENGINE_BUSY: f64 = 0.10;
/// …and the other cores' is above this one.
pub const OTHERS_FREE: f64 = 0.20;
/// Stop when the other cores' spare time is below this fraction…
pub const OTHERS_BUSY: f64 = 0.05;
/// …and the engine's is above this one.
pub const ENGINE_FREE: f64 = 0.15;
/// A change is undone if the engine's frame rate falls by more than this
/// fraction after it.
pub const WORSE: f64 = 0.03;
/// The first wait before a change that was undone is tried again…
pub const HOLD_MIN: Duration = Duration::from_secs(1);
/// …doubling at each undone trial up to this.
pub const HOLD_MAX: Duration = Duration::from_secs(32);

/// Whether the kernel's work for the frames the engine sends is steered to
/// other cores (RPS on the TAP device's queue; other ports ignore it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Steer {
    /// Never: the kernel does it inside the engine's writes.
    Off,
    /// Always, to every core but the engine's.
    On,
    /// Where there is room for it, measured (the module's rules).
    #[default]
    Auto,
}

/// The [`Steer::Auto`] rule: whether to steer next, given whether it does
/// now and both sides' spare fractions over the last period.
pub fn decide(steering: bool, engine_spare: f64, others_spare: f64) -> bool {
    if steering {
        !(others_spare < OTHERS_BUSY && engine_spare > ENGINE_FREE)
    } else {
        engine_spare < ENGINE_BUSY && others_spare > OTHERS_FREE
    }
}

/// [`Steer::Auto`]'s decisions over time: [`decide`], and a trial of
/// every change it makes (see the module's text).
#[derive(Debug)]
pub struct Controller {
    /// A change on trial: the frame rate of the period before it.
    trial: Option<f64>,
    /// No change is tried before this (after one was undone).
    hold_until: Instant,
    /// How long the next undone trial holds changes off.
    hold: Duration,
}

impl Controller {
    /// A controller that may change at once.
    pub fn new(now: Instant) -> Controller {
        Controller {
            trial: None,
            hold_until: now,
            hold: HOLD_MIN,
        }
    }

    /// Whether to steer for the next period: `steering` now, the engine's
    /// spare fraction and the other cores' (`None`: unknown) over the
    /// period that ended at `now`, and the engine's frames per unit of
    /// time in it.
    pub fn next(
        &mut self,
        now: Instant,
        steering: bool,
        engine_spare: f64,
        others_spare: Option<f64>,
        rate: f64,
    ) -> bool {
        if let Some(before) = self.trial.take() {
            if rate < before * (1.0 - WORSE) {
                debug!(before, after = rate, "steering change undone");
                self.hold_until = now + self.hold;
                self.hold = (self.hold * 2).min(HOLD_MAX);
                return !steering;
            }
            self.hold = HOLD_MIN;
            return steering;
        }
        let want = match others_spare {
            Some(o) if now >= self.hold_until => decide(steering, engine_spare, o),
            _ => steering,
        };
        if want != steering {
            self.trial = Some(rate);
        }
        want
    }
}

/// Per-CPU time from `/proc/stat`: (cpu, idle + iowait, total), in ticks,
/// for each `cpuN` line, passed to `each`. Lines it cannot read are
/// skipped.
fn parse_stat(text: &[u8], mut each: impl FnMut(usize, u64, u64)) {
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        // The per-CPU lines come first; the rest is not ours.
        let Some(rest) = line.strip_prefix(b"cpu") else {
            return;
        };
        // "cpuN …" (the all-CPU line has a space after "cpu").
        if !rest.first().is_some_and(u8::is_ascii_digit) {
            continue;
        }
        let mut fields = rest.split(|&b| b == b' ').filter(|f| !f.is_empty());
        let Some(cpu) = fields.next().and_then(parse_u64) else {
            continue;
        };
        let mut total = 0u64;
        let mut idle = 0u64;
        // user nice system idle iowait irq softirq steal (guest time is
        // inside user already).
        for (i, f) in fields.take(8).enumerate() {
            let v = parse_u64(f).unwrap_or(0);
            total = total.saturating_add(v);
            if i == 3 || i == 4 {
                idle = idle.saturating_add(v);
            }
        }
        if let Ok(cpu) = usize::try_from(cpu) {
            each(cpu, idle, total);
        }
    }
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0'))
    })
}

/// Writes the RPS mask of `cpus` (a bit per CPU) into `out` as the kernel
/// reads it: hexadecimal, in comma-separated 32-bit groups, most
/// significant first.
fn format_mask(cpus: &[bool], out: &mut Vec<u8>) {
    out.clear();
    let groups = cpus.len().div_ceil(32).max(1);
    for g in (0..groups).rev() {
        let mut word = 0u32;
        for bit in 0..32 {
            if cpus.get(g * 32 + bit).copied().unwrap_or(false) {
                word |= 1 << bit;
            }
        }
        for shift in (0..8).rev() {
            let nib = ((word >> (shift * 4)) & 0xf) as u8;
            out.push(if nib < 10 {
                b'0' + nib
            } else {
                b'a' + nib - 10
            });
        }
        if g > 0 {
            out.push(b',');
        }
    }
    out.push(b'\n');
}

/// The TAP queue's `rps_cpus` file, as seen from this thread's network
/// namespace. `/sys` shows the namespace of whoever mounted it: when the
/// device is not there (the engine runs on a thread that joined another
/// namespace), a sysfs of this thread's namespace is mounted on a fresh
/// directory, the file opened, and the mount detached at once (the open
/// file keeps working).
fn open_rps(dev: &str) -> io::Result<File> {
    let rel = format!("class/net/{dev}/queues/rx-0/rps_cpus");
    let index = if_index(dev)?;
    let sys = Path::new("/sys");
    let ours = std::fs::read_to_string(sys.join(format!("class/net/{dev}/ifindex")))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        == Some(index);
    if ours {
        return OpenOptions::new()
            .read(true)
            .write(true)
            .open(sys.join(rel));
    }
    let dir = TempDir::new()?;
    // This namespace's sysfs on our own empty directory; it is detached
    // below before anyone else uses it.
    rustix::mount::mount(
        "sysfs",
        &dir.0,
        "sysfs",
        rustix::mount::MountFlags::NOSUID
            | rustix::mount::MountFlags::NODEV
            | rustix::mount::MountFlags::NOEXEC,
        None,
    )?;
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.0.join(&rel));
    // MNT_DETACH only unhooks the mount we made (the file stays usable).
    let _ = rustix::mount::unmount(&dir.0, rustix::mount::UnmountFlags::DETACH);
    opened
}

/// The interface index of `dev` in this thread's network namespace.
fn if_index(dev: &str) -> io::Result<u32> {
    let sock = softoe_sys::ifreq::socket()?;
    Ok(rustix::net::netdevice::name_to_index(&sock, dev)?)
}

/// An empty directory of ours under the temporary directory, removed when
/// dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> io::Result<TempDir> {
        let base = std::env::temp_dir();
        for n in 0..100u32 {
            let p = base.join(format!("softoe-sysfs-{}-{n}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "no free temporary directory for a sysfs mount",
        ))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// The steering of one TAP device's queue (see the module's text). Every
/// buffer is sized when it opens: a look allocates nothing.
#[derive(Debug)]
pub struct Steering {
    mode: Steer,
    dev: String,
    rps: File,
    /// The queue's mask before the engine touched it (put back at the end).
    original: Vec<u8>,
    stat: File,
    stat_buf: Vec<u8>,
    /// Per CPU: idle and total ticks at the last look.
    last: Vec<(u64, u64)>,
    /// Per CPU: whether it is in the mask being written.
    mask_cpus: Vec<bool>,
    mask_text: Vec<u8>,
    /// The engine's spare nanoseconds (asleep or spinning) at the last look.
    last_spare: u64,
    /// Frames in and out at the last look.
    last_frames: u64,
    auto: Controller,
    last_at: Instant,
    next_at: Instant,
    /// The core the mask leaves out (the engine's), and whether it steers.
    engine_cpu: Option<usize>,
    steering: bool,
    /// Times it started or stopped steering.
    pub switches: u64,
    /// Nanoseconds spent steering.
    pub steered_nanos: u64,
}

impl Steering {
    /// Takes charge of `dev`'s receive queue 0 (the queue of the frames the
    /// engine writes into its TAP) in `mode`; `Ok(None)` for
    /// [`Steer::Off`] or a machine with one core.
    pub fn open(dev: &str, mode: Steer, now: Instant) -> io::Result<Option<Steering>> {
        if mode == Steer::Off {
            return Ok(None);
        }
        let stat = File::open("/proc/stat")?;
        let mut stat_buf = vec![0u8; 64 << 10];
        let cpus = cpu_count(&stat, &mut stat_buf)?;
        if cpus < 2 {
            return Ok(None);
        }
        let rps = open_rps(dev)?;
        Steering::with_files(dev, mode, rps, stat, stat_buf, cpus, now).map(Some)
    }

    /// A steering of `rps` (the queue's mask file, or a stand-in),
    /// `/proc/stat` already open and read once into `stat_buf`.
    fn with_files(
        dev: &str,
        mode: Steer,
        rps: File,
        stat: File,
        stat_buf: Vec<u8>,
        cpus: usize,
        now: Instant,
    ) -> io::Result<Steering> {
        let mut original = vec![0u8; 256];
        let k = rps.read_at(&mut original, 0)?;
        original.truncate(k);
        let mut s = Steering {
            mode,
            dev: dev.to_string(),
            rps,
            original,
            stat,
            stat_buf,
            last: vec![(0, 0); cpus],
            mask_cpus: vec![false; cpus],
            mask_text: Vec::with_capacity(cpus.div_ceil(32) * 9 + 2),
            last_spare: 0,
            last_frames: 0,
            auto: Controller::new(now),
            last_at: now,
            next_at: now,
            engine_cpu: None,
            steering: false,
            switches: 0,
            steered_nanos: 0,
        };
        // The first reading, for the first look to count from.
        let _ = s.sample_others(None);
        info!(
            dev,
            ?mode,
            cpus,
            "steering the kernel's work for sent frames"
        );
        Ok(s)
    }

    /// The engine stops at `now`: the time steered since the last look
    /// is counted (dropping it then puts the queue's mask back).
    pub fn finish(&mut self, now: Instant) {
        if self.steering {
            self.steered_nanos += now.saturating_duration_since(self.last_at).as_nanos() as u64;
        }
        self.last_at = now;
    }

    /// Whether the frames are steered now.
    pub fn steering(&self) -> bool {
        self.steering
    }

    /// Looks again if a period has passed: `spare_nanos` is the engine's
    /// time asleep or spinning since it started (the counters' `idle_nanos`
    /// and `spin_nanos`), `frames` the frames it read and wrote since it
    /// started. A failed write is logged and steering stops.
    pub fn tick(&mut self, now: Instant, spare_nanos: u64, frames: u64) {
        if now < self.next_at {
            return;
        }
        self.next_at = now + PERIOD;
        let wall = now.saturating_duration_since(self.last_at).as_nanos() as f64;
        self.last_at = now;
        let spare = spare_nanos.saturating_sub(self.last_spare) as f64;
        self.last_spare = spare_nanos;
        let rate = frames.saturating_sub(self.last_frames) as f64 / wall.max(1.0);
        self.last_frames = frames;
        if self.steering {
            self.steered_nanos += wall as u64;
        }
        let cpu = Some(rustix::thread::sched_getcpu());
        let others = self.sample_others(cpu);
        let want = match self.mode {
            Steer::Off => false,
            Steer::On => true,
            Steer::Auto => {
                let engine_spare = if wall > 0.0 {
                    (spare / wall).min(1.0)
                } else {
                    1.0
                };
                self.auto
                    .next(now, self.steering, engine_spare, others, rate)
            }
        };
        if want != self.steering || (want && cpu != self.engine_cpu) {
            self.apply(want, cpu);
        }
    }

    /// Reads `/proc/stat`; the other cores' spare fraction since the last
    /// look (`None` if it could not be read, or no time passed).
    fn sample_others(&mut self, engine: Option<usize>) -> Option<f64> {
        let (mut idle, mut total) = (0u64, 0u64);
        let n = read_all_at(&self.stat, &mut self.stat_buf).ok()?;
        let last = &mut self.last;
        parse_stat(self.stat_buf.get(..n).unwrap_or(&[]), |c, i, t| {
            if let Some(l) = last.get_mut(c) {
                if Some(c) != engine {
                    idle += i.saturating_sub(l.0);
                    total += t.saturating_sub(l.1);
                }
                *l = (i, t);
            }
        });
        (total > 0).then(|| idle as f64 / total as f64)
    }

    /// Steers to every core but `cpu`, or (`on` false) gives the queue its
    /// own mask back: not steering leaves the device as it was found (an
    /// RPS mask someone set on it stays theirs).
    fn apply(&mut self, on: bool, cpu: Option<usize>) {
        let text = if on {
            for (i, m) in self.mask_cpus.iter_mut().enumerate() {
                *m = Some(i) != cpu;
            }
            format_mask(&self.mask_cpus, &mut self.mask_text);
            &self.mask_text
        } else {
            &self.original
        };
        match self.rps.write_at(text, 0) {
            Ok(_) => {
                if on != self.steering {
                    self.switches += 1;
                    debug!(dev = %self.dev, on, ?cpu, "steering changed");
                }
                self.steering = on;
                self.engine_cpu = cpu;
            }
            Err(e) => {
                warn!(dev = %self.dev, error = %e, "cannot set the TAP's RPS mask; steering stops");
                self.mode = Steer::Off;
                self.steering = false;
            }
        }
    }
}

impl Drop for Steering {
    fn drop(&mut self) {
        if self.switches > 0 {
            let _ = self.rps.write_at(&self.original, 0);
        }
    }
}

/// How many CPUs `/proc/stat` (open as `stat`) counts: one past the
/// highest-numbered online one.
fn cpu_count(stat: &File, buf: &mut [u8]) -> io::Result<usize> {
    let n = read_all_at(stat, buf)?;
    let mut cpus = 0usize;
    parse_stat(buf.get(..n).unwrap_or(&[]), |c, _, _| {
        cpus = cpus.max(c + 1)
    });
    Ok(cpus)
}

/// Reads a procfs file whole from its start into `buf` (as much as fits).
fn read_all_at(f: &File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(buf.get_mut(n..).unwrap_or(&mut []), n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_moves_work_only_where_there_is_room() {
        // Engine full, others with room: steer.
        assert!(decide(false, 0.02, 0.35));
        // Engine full, others full too (a local sender): do not.
        assert!(!decide(false, 0.02, 0.04));
        // Engine with room: do not.
        assert!(!decide(false, 0.6, 0.9));
        // Steering, others now full and the engine with room: stop.
        assert!(!decide(true, 0.6, 0.04));
        // Steering, both full (what steering a busy request load gives):
        // keep.
        assert!(decide(true, 0.03, 0.04));
        // Steering, others with room: keep.
        assert!(decide(true, 0.3, 0.3));
    }

    /// Runs `periods` of [`PERIOD`] through a controller: each gives the
    /// (engine spare, others' spare, frame rate) that steering or not
    /// steering would measure; returns what it chose each period.
    fn drive(periods: usize, mut world: impl FnMut(bool) -> (f64, f64, f64)) -> Vec<bool> {
        let t0 = Instant::now();
        let mut c = Controller::new(t0);
        let mut on = false;
        (1..=periods)
            .map(|k| {
                let (e, o, r) = world(on);
                on = c.next(t0 + PERIOD * k as u32, on, e, Some(o), r);
                on
            })
            .collect()
    }

    #[test]
    fn a_change_that_pays_is_kept() {
        // A request load: the engine full, room elsewhere; steered, more
        // frames a second (and both sides full).
        let got = drive(50, |on| {
            if on {
                (0.03, 0.04, 1.2)
            } else {
                (0.01, 0.35, 1.0)
            }
        });
        assert!(got.iter().all(|&on| on), "{got:?}");
    }

    #[test]
    fn a_change_that_costs_is_undone_and_tried_again_ever_later() {
        // The rule says steer, but steered the engine moves fewer frames.
        let got = drive(400, |on| {
            if on {
                (0.02, 0.30, 0.88)
            } else {
                (0.02, 0.35, 1.0)
            }
        });
        let tries: Vec<usize> = got
            .iter()
            .enumerate()
            .filter(|&(_, &on)| on)
            .map(|(i, _)| i)
            .collect();
        // One period on each time; the waits between tries double from
        // one second (10 periods) up.
        assert!(tries.len() >= 4, "{tries:?}");
        let gaps: Vec<usize> = tries.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(&gaps[..3], &[11, 21, 41], "{tries:?}");
    }

    #[test]
    fn a_bulk_receiver_with_a_full_sender_is_never_steered() {
        // The engine has room, the sender's core none.
        let got = drive(100, |_| (0.6, 0.04, 1.0));
        assert!(got.iter().all(|&on| !on));
        // Unknown others: nothing changes.
        let t0 = Instant::now();
        let mut c = Controller::new(t0);
        assert!(!c.next(t0 + PERIOD, false, 0.0, None, 1.0));
        assert!(c.next(t0 + PERIOD, true, 0.9, None, 1.0));
    }

    #[test]
    fn the_queues_own_mask_is_put_back() {
        let stat = File::open("/proc/stat").unwrap();
        let mut buf = vec![0; 64 << 10];
        let cpus = cpu_count(&stat, &mut buf).unwrap();
        let path = std::env::temp_dir().join(format!("softoe-rps-test-{}", std::process::id()));
        // Someone's own mask on the queue (cores 0 and 1).
        std::fs::write(&path, b"00000003\n").unwrap();
        let rps = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let now = Instant::now();
        let mut st = Steering::with_files("test", Steer::On, rps, stat, buf, cpus, now).unwrap();
        st.tick(now + PERIOD, 0, 0);
        assert!(st.steering());
        let text = std::fs::read_to_string(&path).unwrap();
        let bits: u32 = text
            .trim()
            .split(',')
            .map(|g| u32::from_str_radix(g, 16).unwrap().count_ones())
            .sum();
        assert_eq!(
            bits as usize,
            cpus - 1,
            "every core but this thread's: {text}"
        );
        // Stopping to steer writes the queue's own mask, not an empty one.
        st.apply(false, None);
        assert_eq!(std::fs::read(&path).unwrap(), b"00000003\n");
        st.apply(true, None);
        st.finish(now + PERIOD * 2);
        assert_eq!(
            (st.switches, st.steered_nanos),
            (3, PERIOD.as_nanos() as u64)
        );
        drop(st);
        assert_eq!(std::fs::read(&path).unwrap(), b"00000003\n");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn reads_the_per_cpu_lines_of_proc_stat() {
        let text = b"cpu  10 0 10 100 5 0 1 0 0 0\n\
            cpu0 4 0 6 40 2 0 1 0 0 0\n\
            cpu1 6 0 4 60 3 0 0 0 0 0\n\
            intr 12345 1 2 3\nctxt 99\n";
        let mut got = Vec::new();
        parse_stat(text, |c, i, t| got.push((c, i, t)));
        assert_eq!(got, vec![(0, 42, 53), (1, 63, 73)]);
        let mut none = Vec::new();
        parse_stat(b"intr 1 2\ncpu0 1 2 3 4\n", |c, i, t| none.push((c, i, t)));
        assert!(
            none.is_empty(),
            "stops at the first line that is not a cpu's"
        );
    }

    proptest::proptest! {
        /// Whatever `/proc/stat` holds, reading it neither panics nor
        /// reports more idle time than time.
        #[test]
        fn any_proc_stat_reads_safely(
            text in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b"cpu".to_vec()),
                    proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
                    proptest::collection::vec(
                        proptest::prelude::prop_oneof![
                            proptest::strategy::Just(b' '),
                            proptest::strategy::Just(b'\n'),
                            b'0'..=b'9',
                        ],
                        0..40,
                    ),
                ],
                0..40,
            )
        ) {
            let text: Vec<u8> = text.concat();
            parse_stat(&text, |_, idle, total| assert!(idle <= total));
        }
    }

    #[test]
    fn masks_are_written_as_the_kernel_reads_them() {
        let mut out = Vec::new();
        format_mask(&[false, true], &mut out);
        assert_eq!(out, b"00000002\n");
        let mut cpus = vec![false; 40];
        cpus[0] = true;
        cpus[33] = true;
        format_mask(&cpus, &mut out);
        assert_eq!(out, b"00000002,00000001\n");
        format_mask(&[], &mut out);
        assert_eq!(out, b"00000000\n");
    }
}
