//! Noticing a machine that is not quiet (issue 42): other runnable
//! threads, other processes' CPU, steal and softirq time, CPU frequency
//! changes — around a measurement window ([`Watch`]), summed over a bench
//! row's repeats ([`Busy::merge`]), and before a bench starts
//! ([`wait_quiet`], `--require-quiet`).
//!
//! A [`Watch`] is started before a window and stopped after it. Its
//! sampler thread, every 100–250 ms, lists `/proc`, reads every process's
//! `/proc/PID/stat` (and the `task/TID/stat` of each thread of foreign
//! multi-threaded processes), and counts the threads in state `R`
//! (running or waiting for a CPU) that are not the measurement's own
//! ("ours": the process ids given and every process whose parent chain
//! reaches one of them) — kernel threads apart (`kernel_runnable`). It
//! also reads each CPU's `cpufreq/scaling_cur_freq` where the machine
//! shows one. At start and stop the watch reads `/proc/stat`'s `cpu ` line.
//!
//! The figures:
//! - `other_cpu`: the machine's user, nice and system time minus our
//!   processes' user and system time (`/proc/PID/stat` fields 14 and 15),
//!   as a share of one core. Irq, softirq and steal time are left out of
//!   it (steal and softirq have figures of their own, and our own traffic
//!   makes softirq work that cannot be told from anyone else's); kernel
//!   threads' time (kworkers, ksoftirqd outside softirq accounting) is in
//!   it, and also apart as `kernel_cpu`.
//! - `steal`, `softirq`, `iowait`: shares of all CPU time across all CPUs.
//!
//! What it cannot see: work of ours done inside softirq counts as softirq
//! (and, on kernels without irq time accounting, as the system time of
//! whoever was interrupted); a process of ours that is born and ends
//! between two samples is missed entirely, and one that ends mid-window
//! keeps only the CPU it had at the last sample before it ended (a little
//! of ours then counts as foreign); `R` is a state at one instant, so a
//! thread that runs in short bursts between samples is seen in proportion
//! to the time it spends runnable, and its CPU still shows in `other_cpu`;
//! /proc/stat counts in ticks (10 ms), so `other_cpu` of a short window is
//! coarse; processes in other PID namespaces that this one cannot see are
//! seen only through `other_cpu`.
//!
//! Cost: a sample reads one file per process and one per thread of the
//! foreign multi-threaded processes: on this 2-core machine, with about 75
//! processes, about 0.75 ms of one core (1 ms while the other cores were
//! busy building; the `sample_cost` test prints it) — at one sample each
//! 200 ms, under 0.5 % of one core beside the measurement.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::Read as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;

/// Thresholds that make a window "quiet".
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Limits {
    /// Mean foreign runnable threads (default 0.5).
    pub other_runnable: f64,
    /// Foreign CPU as a share of one core (default 0.10).
    pub other_cpu: f64,
    /// Steal as a share of all CPU time (default 0.02).
    pub steal: f64,
    /// Softirq as a share of all CPU time: unlimited (`f64::INFINITY`) by
    /// default, while measuring, since our own traffic makes softirq work;
    /// a limit when idle-checking ([`Limits::idle`]).
    pub softirq: f64,
    /// How far the CPU frequency may move: the highest seen over the lowest,
    /// less one (default 0.10: 2000–2200 MHz is still quiet).
    pub freq_spread: f64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            other_runnable: 0.5,
            other_cpu: 0.10,
            steal: 0.02,
            softirq: f64::INFINITY,
            freq_spread: 0.10,
        }
    }
}

impl Limits {
    /// The limits for a machine with nothing of ours running
    /// ([`wait_quiet`]): the defaults, softirq at most 5 % of CPU time.
    pub fn idle() -> Limits {
        Limits {
            softirq: 0.05,
            ..Limits::default()
        }
    }
}

/// What happened around one window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Busy {
    /// The window's length.
    pub secs: f64,
    /// How many times the sampler looked (at start, every interval, at
    /// stop).
    pub samples: usize,
    /// Foreign runnable threads (not ours, not kernel threads), mean over
    /// the samples.
    pub other_runnable_mean: f64,
    /// ... and the most in one sample.
    pub other_runnable_max: usize,
    /// Runnable kernel threads, mean over the samples.
    pub kernel_runnable_mean: f64,
    /// Foreign CPU: machine busy time (/proc/stat's user, nice and system)
    /// minus our processes' user+system time, as a share of one core.
    pub other_cpu: f64,
    /// The part of `other_cpu` that kernel threads used, a share of one
    /// core.
    pub kernel_cpu: f64,
    /// Steal, a share of all CPU time.
    pub steal: f64,
    /// Softirq, a share of all CPU time.
    pub softirq: f64,
    /// Iowait, a share of all CPU time.
    pub iowait: f64,
    /// Min and max MHz seen, where visible.
    pub freq_mhz: Option<(f64, f64)>,
}

/// A share as a percentage: one decimal below 10 %.
fn pct(x: f64) -> String {
    let p = x * 100.0;
    if p.abs() >= 10.0 {
        format!("{p:.0} %")
    } else {
        format!("{p:.1} %")
    }
}

impl Busy {
    /// Whether the window was quiet by `l`: no [`reasons`](Busy::reasons).
    pub fn quiet(&self, l: &Limits) -> bool {
        self.reasons(l).is_empty()
    }

    /// Human reasons it was not quiet, e.g. "1.3 other runnable threads on
    /// average (max 3)", "steal 4.0 % of CPU time", "CPU frequency moved
    /// 1200–2400 MHz" — empty when quiet. A window with no samples is not
    /// quiet (nothing shows it was). A figure that is not a number fails
    /// its limit.
    pub fn reasons(&self, l: &Limits) -> Vec<String> {
        let mut r = Vec::new();
        if self.samples == 0 {
            r.push("nothing was sampled".to_string());
        }
        let over = |x: f64, limit: f64| x.is_nan() || x > limit;
        if over(self.other_runnable_mean, l.other_runnable) {
            r.push(format!(
                "{:.1} other runnable threads on average (max {})",
                self.other_runnable_mean, self.other_runnable_max
            ));
        }
        if over(self.other_cpu, l.other_cpu) {
            r.push(format!(
                "other processes used {} of a core",
                pct(self.other_cpu)
            ));
        }
        if over(self.steal, l.steal) {
            r.push(format!("steal {} of CPU time", pct(self.steal)));
        }
        if over(self.softirq, l.softirq) {
            r.push(format!("softirq {} of CPU time", pct(self.softirq)));
        }
        if let Some((lo, hi)) = self.freq_mhz
            && (lo <= 0.0 || over(hi / lo - 1.0, l.freq_spread))
        {
            r.push(format!("CPU frequency moved {lo:.0}–{hi:.0} MHz"));
        }
        r
    }

    /// The figures in one line, for a report beside a window's results:
    /// "other runnable 0.2 (max 2), other CPU 3.1 % of a core, steal 0.0 %,
    /// softirq 1.2 %, iowait 0.0 %, 2400 MHz".
    pub fn summary(&self) -> String {
        let mut s = format!(
            "other runnable {:.1} (max {}), other CPU {} of a core, steal {}, softirq {}, \
             iowait {}",
            self.other_runnable_mean,
            self.other_runnable_max,
            pct(self.other_cpu),
            pct(self.steal),
            pct(self.softirq),
            pct(self.iowait)
        );
        match self.freq_mhz {
            Some((lo, hi)) if (hi - lo).abs() < 0.5 => {
                let _ = write!(s, ", {lo:.0} MHz");
            }
            Some((lo, hi)) => {
                let _ = write!(s, ", {lo:.0}–{hi:.0} MHz");
            }
            None => {}
        }
        s
    }

    /// Merges windows (a bench row's repeats) into one summary: means and
    /// shares weighted by `secs` (equally when no window has a length);
    /// samples and seconds summed; the max of maxima; the frequency range
    /// over all.
    pub fn merge(parts: &[Busy]) -> Busy {
        let secs: f64 = parts.iter().map(|b| b.secs).sum();
        let n = parts.len() as f64;
        let weight = |b: &Busy| if secs > 0.0 { b.secs / secs } else { 1.0 / n };
        let mean = |f: fn(&Busy) -> f64| parts.iter().map(|b| weight(b) * f(b)).sum::<f64>();
        let freq_mhz = parts
            .iter()
            .filter_map(|b| b.freq_mhz)
            .reduce(|(a, b), (c, d)| (a.min(c), b.max(d)));
        Busy {
            secs,
            samples: parts.iter().map(|b| b.samples).sum(),
            other_runnable_mean: mean(|b| b.other_runnable_mean),
            other_runnable_max: parts
                .iter()
                .map(|b| b.other_runnable_max)
                .max()
                .unwrap_or(0),
            kernel_runnable_mean: mean(|b| b.kernel_runnable_mean),
            other_cpu: mean(|b| b.other_cpu),
            kernel_cpu: mean(|b| b.kernel_cpu),
            steal: mean(|b| b.steal),
            softirq: mean(|b| b.softirq),
            iowait: mean(|b| b.iowait),
            freq_mhz,
        }
    }
}

/// The machine's CPU time from `/proc/stat`'s `cpu ` line (all CPUs
/// together), in ticks (`USER_HZ`). Guest time is inside user and nice
/// already and is not read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Fields in /proc/stat's order.
    pub user: u64,
    /// Niced user time.
    pub nice: u64,
    /// Kernel time on behalf of processes (and kernel threads).
    pub system: u64,
    /// Idle.
    pub idle: u64,
    /// Idle waiting for I/O.
    pub iowait: u64,
    /// Hardware interrupts.
    pub irq: u64,
    /// Softirqs.
    pub softirq: u64,
    /// Time the hypervisor ran something else.
    pub steal: u64,
}

impl CpuTimes {
    /// All the time counted.
    pub fn total(&self) -> u64 {
        [
            self.user,
            self.nice,
            self.system,
            self.idle,
            self.iowait,
            self.irq,
            self.softirq,
            self.steal,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// The time from `earlier` to `self`, field by field (a counter that
    /// went back, as iowait can, counts nothing).
    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user: self.user.saturating_sub(earlier.user),
            nice: self.nice.saturating_sub(earlier.nice),
            system: self.system.saturating_sub(earlier.system),
            idle: self.idle.saturating_sub(earlier.idle),
            iowait: self.iowait.saturating_sub(earlier.iowait),
            irq: self.irq.saturating_sub(earlier.irq),
            softirq: self.softirq.saturating_sub(earlier.softirq),
            steal: self.steal.saturating_sub(earlier.steal),
        }
    }
}

/// Parses `/proc/stat`: the `cpu ` line. Fields missing at its end (old
/// kernels) are zero; fewer than four, no such line or a field that is not
/// a number is an error.
pub fn parse_proc_stat(text: &str) -> Result<CpuTimes> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))
        .ok_or_else(|| anyhow!("/proc/stat has no 'cpu' line"))?;
    let mut f = [0u64; 8];
    let mut n = 0;
    for (slot, word) in f.iter_mut().zip(line.split_whitespace().skip(1)) {
        *slot = word
            .parse()
            .map_err(|_| anyhow!("/proc/stat's cpu line has '{word}' for a number"))?;
        n += 1;
    }
    if n < 4 {
        bail!("/proc/stat's cpu line has {n} fields: '{line}'");
    }
    let [user, nice, system, idle, iowait, irq, softirq, steal] = f;
    Ok(CpuTimes {
        user,
        nice,
        system,
        idle,
        iowait,
        irq,
        softirq,
        steal,
    })
}

/// What the sampler reads of `/proc/PID/stat` or `/proc/PID/task/TID/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskStat {
    /// `R` running or runnable, `S` sleeping, ... (field 3).
    pub state: char,
    /// The parent's pid (field 4).
    pub ppid: i32,
    /// The kernel's flags (field 9): `PF_KTHREAD` marks a kernel thread.
    pub flags: u64,
    /// User time in ticks (field 14); the whole process's in
    /// `/proc/PID/stat`.
    pub utime: u64,
    /// System time in ticks (field 15).
    pub stime: u64,
    /// Threads of the process (field 20).
    pub num_threads: u64,
    /// When it started, ticks after boot (field 22).
    pub starttime: u64,
}

/// `PF_KTHREAD` in [`TaskStat::flags`].
const PF_KTHREAD: u64 = 0x0020_0000;

impl TaskStat {
    /// Whether the task with pid `pid` is a kernel thread: kthreadd (pid 2),
    /// one of its children, or flagged `PF_KTHREAD`.
    pub fn is_kernel(&self, pid: i32) -> bool {
        pid == 2 || self.ppid == 2 || self.flags & PF_KTHREAD != 0
    }
}

/// Parses one `stat` line of a process or thread: `pid (comm) state ppid
/// ...`. The comm may hold spaces and ')', so the fields start after the
/// line's last ')'. `None` for a line that is cut short or odd.
pub fn parse_task_stat(text: &str) -> Option<TaskStat> {
    let (_, rest) = text.rsplit_once(')')?;
    // Fields from 3 (state) on: index i is field i + 3.
    let mut state = None;
    let mut nums = [0u64; 20];
    let mut ppid = 0i64;
    for (i, word) in rest.split_whitespace().take(20).enumerate() {
        match i {
            0 => {
                let mut c = word.chars();
                state = c.next().filter(|_| c.next().is_none());
            }
            1 => ppid = word.parse().ok()?,
            6 | 11 | 12 | 17 | 19 => *nums.get_mut(i)? = word.parse().ok()?,
            _ => {}
        }
        if i == 19 {
            return Some(TaskStat {
                state: state?,
                ppid: i32::try_from(ppid).ok()?,
                flags: nums[6],
                utime: nums[11],
                stime: nums[12],
                num_threads: nums[17],
                starttime: nums[19],
            });
        }
    }
    None
}

/// Parses `cpufreq/scaling_cur_freq` (kHz) into MHz.
pub fn parse_khz(text: &str) -> Option<f64> {
    let khz: u64 = text.trim().parse().ok()?;
    Some(khz as f64 / 1000.0)
}

/// The processes of the tree of `roots`: the roots and every process whose
/// parent chain (`parents`: pid → ppid pairs) reaches one of them. A chain
/// that breaks (a parent not listed) or loops is not in it.
pub fn tree(parents: &[(i32, i32)], roots: &[i32]) -> HashSet<i32> {
    let parent: HashMap<i32, i32> = parents.iter().copied().collect();
    let mut known: HashMap<i32, bool> = roots.iter().map(|&r| (r, true)).collect();
    let mut path = Vec::new();
    for &(pid, _) in parents {
        path.clear();
        let mut p = pid;
        let verdict = loop {
            if let Some(&v) = known.get(&p) {
                break v;
            }
            // A loop (no real tree has one) or a broken chain.
            if path.len() > parent.len() {
                break false;
            }
            path.push(p);
            match parent.get(&p) {
                Some(&pp) if pp > 0 => p = pp,
                _ => break false,
            }
        };
        for &q in &path {
            known.insert(q, verdict);
        }
    }
    known
        .into_iter()
        .filter_map(|(p, v)| v.then_some(p))
        .collect()
}

/// Reads `path` into `buf` (cleared first); false if it could not (a task
/// that ended, a file the machine does not have).
fn read_into(path: &str, buf: &mut String) -> bool {
    buf.clear();
    File::open(path)
        .and_then(|mut f| f.read_to_string(buf))
        .is_ok()
}

/// The numeric entries of a `/proc` directory.
fn pids_in(dir: &str) -> std::io::Result<Vec<i32>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect())
}

/// The CPUs' `scaling_cur_freq` files, where the machine shows them.
fn freq_files() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu") else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name();
            let n = name.to_str()?.strip_prefix("cpu")?;
            n.parse::<usize>().ok()?;
            let f = e.path().join("cpufreq/scaling_cur_freq");
            f.exists().then_some(f)
        })
        .collect();
    files.sort();
    files
}

/// Ticks since boot now (`CLOCK_BOOTTIME`, as `starttime` counts).
fn boot_ticks(hz: u64) -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nsec = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(hz)
        .saturating_add(nsec.saturating_mul(hz) / 1_000_000_000)
}

/// CPU time of processes followed through a window, by (pid, starttime)
/// so that a reused pid is another process: (at the window's start or
/// when first seen, last seen).
#[derive(Debug, Default)]
struct CpuTrack(HashMap<(i32, u64), (u64, u64)>);

impl CpuTrack {
    /// Notes process `pid`'s CPU now. One first seen counts from zero if it
    /// started after the window did, else from now.
    fn note(&mut self, pid: i32, st: &TaskStat, window_start: u64) {
        let now = st.utime.saturating_add(st.stime);
        let e = self.0.entry((pid, st.starttime)).or_insert_with(|| {
            let base = if st.starttime > window_start { 0 } else { now };
            (base, now)
        });
        e.1 = e.1.max(now);
    }

    /// The ticks used in the window.
    fn ticks(&self) -> u64 {
        self.0.values().map(|&(b, l)| l.saturating_sub(b)).sum()
    }
}

/// The sampler's state, moved into its thread and back.
#[derive(Debug)]
struct Sampler {
    roots: Arc<Mutex<Vec<i32>>>,
    window_start: u64,
    ours: CpuTrack,
    kernel: CpuTrack,
    samples: usize,
    other_sum: usize,
    other_max: usize,
    kernel_sum: usize,
    freq_files: Vec<PathBuf>,
    freq: Option<(f64, f64)>,
    buf: String,
    path: String,
    procs: Vec<(i32, TaskStat)>,
}

impl Sampler {
    /// A sampler of a window that starts at `window_start` (ticks after
    /// boot), whose own processes are the tree of `roots`.
    fn new(roots: Arc<Mutex<Vec<i32>>>, window_start: u64) -> Sampler {
        Sampler {
            roots,
            window_start,
            ours: CpuTrack::default(),
            kernel: CpuTrack::default(),
            samples: 0,
            other_sum: 0,
            other_max: 0,
            kernel_sum: 0,
            freq_files: freq_files(),
            freq: None,
            buf: String::with_capacity(512),
            path: String::with_capacity(64),
            procs: Vec::new(),
        }
    }

    /// One look at the machine. An error only if `/proc` cannot be listed;
    /// tasks that end meanwhile are passed over. The thread that looks is
    /// never counted.
    fn sample(&mut self) -> Result<()> {
        let me = rustix::thread::gettid().as_raw_nonzero().get();
        let pids = pids_in("/proc").context("listing /proc")?;
        self.procs.clear();
        for pid in pids {
            self.path.clear();
            let _ = write!(self.path, "/proc/{pid}/stat");
            if read_into(&self.path, &mut self.buf)
                && let Some(st) = parse_task_stat(&self.buf)
            {
                self.procs.push((pid, st));
            }
        }
        let roots = self
            .roots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let parents: Vec<(i32, i32)> = self.procs.iter().map(|(p, s)| (*p, s.ppid)).collect();
        let ours = tree(&parents, &roots);
        let (mut other, mut kernel) = (0, 0);
        let procs = std::mem::take(&mut self.procs);
        for &(pid, st) in &procs {
            if ours.contains(&pid) {
                self.ours.note(pid, &st, self.window_start);
            } else if st.is_kernel(pid) {
                self.kernel.note(pid, &st, self.window_start);
                kernel += usize::from(st.state == 'R');
            } else if st.num_threads <= 1 {
                other += usize::from(st.state == 'R' && pid != me);
            } else {
                other += self.runnable_threads(pid, me);
            }
        }
        self.procs = procs;
        for f in &self.freq_files {
            let Some(mhz) = f
                .to_str()
                .filter(|p| read_into(p, &mut self.buf))
                .and_then(|_| parse_khz(&self.buf))
            else {
                continue;
            };
            self.freq = Some(match self.freq {
                Some((lo, hi)) => (lo.min(mhz), hi.max(mhz)),
                None => (mhz, mhz),
            });
        }
        self.samples += 1;
        self.other_sum += other;
        self.other_max = self.other_max.max(other);
        self.kernel_sum += kernel;
        Ok(())
    }

    /// The threads of process `pid` in state R, `me` left out.
    fn runnable_threads(&mut self, pid: i32, me: i32) -> usize {
        self.path.clear();
        let _ = write!(self.path, "/proc/{pid}/task");
        let Ok(tids) = pids_in(&self.path) else {
            return 0;
        };
        let mut n = 0;
        for tid in tids.into_iter().filter(|&t| t != me) {
            self.path.clear();
            let _ = write!(self.path, "/proc/{pid}/task/{tid}/stat");
            if read_into(&self.path, &mut self.buf) {
                n += usize::from(parse_task_stat(&self.buf).is_some_and(|s| s.state == 'R'));
            }
        }
        n
    }
}

/// Reads `/proc/stat`'s CPU times.
fn cpu_times() -> Result<CpuTimes> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    parse_proc_stat(&text)
}

/// A watch over one measurement window: started before the window, stopped
/// after.
#[derive(Debug)]
pub struct Watch {
    roots: Arc<Mutex<Vec<i32>>>,
    /// Dropped, it stops the sampler.
    stop_tx: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<Sampler>>,
    t0: Instant,
    cpu0: CpuTimes,
    hz: u64,
}

impl Watch {
    /// `ours`: the process ids whose threads are the measurement's own
    /// (this process and the server programs it started; their
    /// descendants count as ours too). Takes a first sample, then spawns a
    /// sampler thread that samples every `every` (100–250 ms is meant;
    /// at least 10 ms): it counts runnable threads that are not ours and
    /// not kernel threads (those are `kernel_runnable`), and reads each
    /// CPU's current frequency where visible.
    ///
    /// The sampler thread inherits the calling thread's CPU affinity: start
    /// the watch from a thread that is not pinned beside the measurement
    /// (or it takes its share of that CPU).
    pub fn start(ours: Vec<i32>, every: Duration) -> Result<Watch> {
        let hz = match rustix::param::clock_ticks_per_second() {
            0 => 100,
            hz => hz,
        };
        let roots = Arc::new(Mutex::new(ours));
        let t0 = Instant::now();
        let cpu0 = cpu_times()?;
        let mut s = Sampler::new(Arc::clone(&roots), boot_ticks(hz));
        s.sample()?;
        let every = every.max(Duration::from_millis(10));
        let (tx, rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("quiet-sampler".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                    // A sample that cannot list /proc is left out.
                    let _ = s.sample();
                }
                s
            })
            .context("starting the quiet sampler")?;
        Ok(Watch {
            roots,
            stop_tx: Some(tx),
            thread: Some(thread),
            t0,
            cpu0,
            hz,
        })
    }

    /// Adds a pid that became part of the measurement after start (a server
    /// started later); its CPU counts from when it started, or from now if
    /// it started before the window.
    pub fn add_ours(&self, pid: i32) {
        self.roots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(pid);
    }

    /// Stops the sampler, takes a last sample and sums up the window. If
    /// the sampler's thread failed, the figures that need it are zero and
    /// `samples` is 0 (so the window is not quiet).
    pub fn stop(mut self) -> Busy {
        drop(self.stop_tx.take());
        let sampler = self.thread.take().and_then(|t| t.join().ok());
        let Some(mut s) = sampler else {
            return Busy {
                secs: self.t0.elapsed().as_secs_f64(),
                ..Busy::default()
            };
        };
        let _ = s.sample();
        let cpu1 = cpu_times().unwrap_or(self.cpu0);
        let secs = self.t0.elapsed().as_secs_f64();
        let d = cpu1.since(&self.cpu0);
        let total = d.total() as f64;
        let share = |x: u64| if total > 0.0 { x as f64 / total } else { 0.0 };
        let cores = |ticks: u64| {
            if secs > 0.0 {
                ticks as f64 / self.hz as f64 / secs
            } else {
                0.0
            }
        };
        let busy = d.user.saturating_add(d.nice).saturating_add(d.system);
        let n = s.samples.max(1) as f64;
        Busy {
            secs,
            samples: s.samples,
            other_runnable_mean: s.other_sum as f64 / n,
            other_runnable_max: s.other_max,
            kernel_runnable_mean: s.kernel_sum as f64 / n,
            other_cpu: cores(busy.saturating_sub(s.ours.ticks())),
            kernel_cpu: cores(s.kernel.ticks()),
            steal: share(d.steal),
            softirq: share(d.softirq),
            iowait: share(d.iowait),
            freq_mhz: s.freq,
        }
    }
}

/// `--require-quiet`: watches 1-second windows with nothing of ours
/// running (ours = this process) until one is quiet by `limits` (e.g.
/// [`Limits::idle`]) or `max_wait` passes; `progress` sees each window.
/// Ok(the quiet window), or an error naming the reasons of the last window
/// ("the machine is not quiet after 60 s: 2.1 other runnable threads on
/// average (max 3), ...").
pub fn wait_quiet(max_wait: Duration, limits: &Limits, progress: &dyn Fn(&Busy)) -> Result<Busy> {
    wait_quiet_in(Duration::from_secs(1), max_wait, limits, progress)
}

/// [`wait_quiet`] with windows of `window`.
fn wait_quiet_in(
    window: Duration,
    max_wait: Duration,
    limits: &Limits,
    progress: &dyn Fn(&Busy),
) -> Result<Busy> {
    let t0 = Instant::now();
    let me = i32::try_from(std::process::id()).context("this process's id")?;
    loop {
        let w = Watch::start(vec![me], Duration::from_millis(200))?;
        std::thread::sleep(window);
        let b = w.stop();
        progress(&b);
        if b.quiet(limits) {
            return Ok(b);
        }
        if t0.elapsed() >= max_wait {
            bail!(
                "the machine is not quiet after {} s: {}",
                t0.elapsed().as_secs(),
                b.reasons(limits).join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::process::{Child, Command};

    #[test]
    fn proc_stat_is_read_from_the_cpu_line() {
        let text = "cpu0 9 9 9 9 9 9 9 9 0 0\n\
                    cpu  100 2 30 400 5 6 7 8 9 10\n\
                    intr 1 2 3\n";
        let t = parse_proc_stat(text).unwrap();
        assert_eq!(
            t,
            CpuTimes {
                user: 100,
                nice: 2,
                system: 30,
                idle: 400,
                iowait: 5,
                irq: 6,
                softirq: 7,
                steal: 8,
            }
        );
        assert_eq!(t.total(), 558, "guest time is inside user already");
        // An old kernel's four fields.
        let old = parse_proc_stat("cpu 1 2 3 4\n").unwrap();
        assert_eq!((old.idle, old.steal), (4, 0));
        assert!(parse_proc_stat("cpu 1 2 3\n").is_err());
        assert!(parse_proc_stat("cpu0 1 2 3 4 5\n").is_err());
        assert!(parse_proc_stat("cpu 1 2 x 4 5\n").is_err());
        assert!(parse_proc_stat("").is_err());
        assert!(parse_proc_stat("cpu").is_err());
    }

    #[test]
    fn cpu_times_since_never_goes_negative() {
        let a = CpuTimes {
            user: 10,
            iowait: 50,
            ..CpuTimes::default()
        };
        let b = CpuTimes {
            user: 25,
            iowait: 40,
            ..CpuTimes::default()
        };
        let d = b.since(&a);
        assert_eq!((d.user, d.iowait), (15, 0));
    }

    /// A stat line with the fields this module reads set and the rest
    /// plausible.
    fn stat_line(comm: &str, state: char, ppid: i32, utime: u64, threads: u64) -> String {
        format!(
            "4321 ({comm}) {state} {ppid} 4321 4321 0 -1 4194560 120 0 0 0 {utime} 7 0 0 20 0 \
             {threads} 0 99 3133440 394 18446744073709551615 1 2 3 0 0 0 0 0 0 0 0 0 17 1 0 0"
        )
    }

    #[test]
    fn task_stat_takes_the_fields_after_the_last_paren() {
        let st = parse_task_stat(&stat_line("sh", 'R', 17, 42, 1)).unwrap();
        assert_eq!(
            st,
            TaskStat {
                state: 'R',
                ppid: 17,
                flags: 4194560,
                utime: 42,
                stime: 7,
                num_threads: 1,
                starttime: 99,
            }
        );
        // A comm with spaces and parentheses of its own.
        let odd = parse_task_stat(&stat_line("a) S 1 (b) c", 'S', 5, 3, 4)).unwrap();
        assert_eq!(
            (odd.state, odd.ppid, odd.utime, odd.num_threads),
            ('S', 5, 3, 4)
        );
        let kthreadd = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 24 0 0";
        let k = parse_task_stat(kthreadd).unwrap();
        assert!(k.is_kernel(2));
        let worker = parse_task_stat(&stat_line("kworker/0:1", 'I', 2, 0, 1)).unwrap();
        assert!(worker.is_kernel(77));
        assert!(!st.is_kernel(4321));
        let flagged = TaskStat {
            flags: PF_KTHREAD,
            ppid: 1,
            ..st
        };
        assert!(flagged.is_kernel(4321));
    }

    #[test]
    fn odd_task_stat_lines_are_none() {
        let full = stat_line("sh", 'R', 17, 42, 1);
        // Cut anywhere before the starttime field: None (and no panic
        // anywhere).
        let starttime_at = full.find(" 99 ").unwrap() + 1;
        for cut in 0..=full.len() {
            let got = full.get(..cut).and_then(parse_task_stat);
            assert_eq!(got.is_some(), cut > starttime_at, "{cut}");
        }
        assert_eq!(parse_task_stat(""), None);
        assert_eq!(parse_task_stat("1 (x"), None);
        assert_eq!(parse_task_stat("1 (x) R"), None);
        assert_eq!(
            parse_task_stat(&stat_line("sh", 'R', 17, 42, 1).replace(" 42 ", " x ")),
            None
        );
        assert_eq!(parse_task_stat(&full.replacen(" R ", " RR ", 1)), None);
        assert_eq!(
            parse_task_stat(&full.replacen(" 17 ", " 99999999999 ", 1)),
            None
        );
    }

    #[test]
    fn the_tree_holds_the_roots_and_their_descendants() {
        let parents = [
            (1, 0),
            (10, 1),
            (11, 10),
            (12, 11),
            (20, 1),
            (21, 20),
            (30, 999), // its parent is not listed
            (40, 41),  // a loop
            (41, 40),
        ];
        let t = tree(&parents, &[10]);
        let mut got: Vec<i32> = t.into_iter().collect();
        got.sort_unstable();
        assert_eq!(got, vec![10, 11, 12]);
        let mut two: Vec<i32> = tree(&parents, &[12, 20]).into_iter().collect();
        two.sort_unstable();
        assert_eq!(two, vec![12, 20, 21]);
        assert!(tree(&parents, &[]).is_empty());
        assert!(tree(&[], &[]).is_empty());
        assert_eq!(tree(&parents, &[999]).len(), 2, "999 and 30");
    }

    #[test]
    fn cpu_counts_from_the_window_or_from_birth() {
        let mut t = CpuTrack::default();
        let old = TaskStat {
            utime: 500,
            stime: 100,
            starttime: 10,
            ..TaskStat::default()
        };
        t.note(7, &old, 1000);
        assert_eq!(t.ticks(), 0);
        t.note(7, &TaskStat { utime: 530, ..old }, 1000);
        assert_eq!(t.ticks(), 30);
        // Born inside the window: all its CPU is the window's.
        let young = TaskStat {
            utime: 4,
            stime: 1,
            starttime: 1001,
            ..TaskStat::default()
        };
        t.note(8, &young, 1000);
        assert_eq!(t.ticks(), 35);
        // Pid 7 again, but another process: counted apart.
        t.note(
            7,
            &TaskStat {
                utime: 2,
                stime: 0,
                starttime: 1005,
                ..TaskStat::default()
            },
            1000,
        );
        assert_eq!(t.ticks(), 37);
    }

    fn quiet_busy() -> Busy {
        Busy {
            secs: 1.0,
            samples: 5,
            ..Busy::default()
        }
    }

    #[test]
    fn reasons_name_each_limit_passed() {
        let l = Limits::default();
        assert!(quiet_busy().quiet(&l));
        assert!(quiet_busy().reasons(&l).is_empty());
        assert_eq!(Busy::default().reasons(&l), vec!["nothing was sampled"]);
        let b = Busy {
            other_runnable_mean: 1.3,
            other_runnable_max: 3,
            other_cpu: 0.25,
            steal: 0.04,
            softirq: 0.5,
            freq_mhz: Some((1200.0, 2400.0)),
            ..quiet_busy()
        };
        assert!(!b.quiet(&l));
        assert_eq!(
            b.reasons(&l),
            vec![
                "1.3 other runnable threads on average (max 3)",
                "other processes used 25 % of a core",
                "steal 4.0 % of CPU time",
                "CPU frequency moved 1200–2400 MHz",
            ]
        );
        assert_eq!(b.reasons(&Limits::idle())[3], "softirq 50 % of CPU time");
        let steady = Busy {
            freq_mhz: Some((2000.0, 2100.0)),
            softirq: 0.01,
            ..quiet_busy()
        };
        assert!(steady.quiet(&Limits::idle()));
        let nan = Busy {
            steal: f64::NAN,
            ..quiet_busy()
        };
        assert!(!nan.quiet(&l));
        let zero_freq = Busy {
            freq_mhz: Some((0.0, 0.0)),
            ..quiet_busy()
        };
        assert!(!zero_freq.quiet(&l));
    }

    #[test]
    fn the_summary_has_the_figures() {
        let b = Busy {
            other_runnable_mean: 0.2,
            other_runnable_max: 2,
            other_cpu: 0.031,
            softirq: 0.012,
            freq_mhz: Some((2400.0, 2400.0)),
            ..quiet_busy()
        };
        assert_eq!(
            b.summary(),
            "other runnable 0.2 (max 2), other CPU 3.1 % of a core, steal 0.0 %, softirq 1.2 %, \
             iowait 0.0 %, 2400 MHz"
        );
        let moved = Busy {
            freq_mhz: Some((1200.0, 2400.0)),
            ..b
        };
        assert!(moved.summary().ends_with(", 1200–2400 MHz"));
        assert!(!quiet_busy().summary().contains("MHz"));
    }

    #[test]
    fn merge_weights_by_seconds() {
        let a = Busy {
            secs: 1.0,
            samples: 5,
            other_runnable_mean: 3.0,
            other_runnable_max: 4,
            steal: 0.10,
            freq_mhz: Some((2000.0, 2200.0)),
            ..Busy::default()
        };
        let b = Busy {
            secs: 3.0,
            samples: 15,
            other_runnable_mean: 1.0,
            other_runnable_max: 7,
            steal: 0.02,
            freq_mhz: Some((1800.0, 2100.0)),
            ..Busy::default()
        };
        let c = Busy {
            freq_mhz: None,
            ..b.clone()
        };
        let m = Busy::merge(&[a.clone(), b, c]);
        assert!((m.secs - 7.0).abs() < 1e-9);
        assert_eq!((m.samples, m.other_runnable_max), (35, 7));
        assert!((m.other_runnable_mean - 9.0 / 7.0).abs() < 1e-9);
        assert!((m.steal - (0.10 + 0.12) / 7.0).abs() < 1e-9);
        assert_eq!(m.freq_mhz, Some((1800.0, 2200.0)));
        let empty = Busy::merge(&[]);
        assert_eq!((empty.samples, empty.secs), (0, 0.0));
        assert!(!empty.quiet(&Limits::default()));
        // Windows without a length weigh the same.
        let z = Busy { secs: 0.0, ..a };
        let y = Busy {
            other_runnable_mean: 1.0,
            ..z.clone()
        };
        assert!((Busy::merge(&[z, y]).other_runnable_mean - 2.0).abs() < 1e-9);
    }

    #[test]
    fn this_machine_reads() {
        let t = cpu_times().unwrap();
        assert!(t.total() > 0);
        let me =
            parse_task_stat(&std::fs::read_to_string("/proc/thread-self/stat").unwrap()).unwrap();
        assert_eq!(me.state, 'R', "a thread reading its own stat runs");
        assert!(!me.is_kernel(std::process::id() as i32));
        for f in freq_files() {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            assert!(parse_khz(&text).is_some(), "{}: {text}", f.display());
        }
        assert_eq!(parse_khz("2400000\n"), Some(2400.0));
        assert_eq!(parse_khz("n/a"), None);
    }

    /// Busy-looping child processes, killed and reaped on drop.
    struct Spinners(Vec<Child>);

    impl Spinners {
        fn start(n: usize) -> Spinners {
            let mut s = Spinners(Vec::new());
            for _ in 0..n {
                let c = Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap();
                s.0.push(c);
            }
            s
        }

        fn pids(&self) -> Vec<i32> {
            self.0.iter().map(|c| c.id() as i32).collect()
        }
    }

    impl Drop for Spinners {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    #[test]
    fn foreign_spinners_are_seen_and_ours_are_not() {
        let spin = Spinners::start(2);
        let pids = spin.pids();
        std::thread::sleep(Duration::from_millis(200));
        let every = Duration::from_millis(100);
        // The spinners are this process's children: with this process as
        // ours they are ours by descent.
        let me = std::process::id() as i32;
        let foreign = Watch::start(Vec::new(), every).unwrap();
        let by_descent = Watch::start(vec![me], every).unwrap();
        let named = Watch::start(vec![pids[0]], every).unwrap();
        named.add_ours(pids[1]);
        std::thread::sleep(Duration::from_millis(1500));
        let (f, d, n) = (foreign.stop(), by_descent.stop(), named.stop());
        drop(spin);
        println!(
            "foreign: {}\nby descent: {}\nnamed: {}",
            f.summary(),
            d.summary(),
            n.summary()
        );
        let l = Limits::default();
        assert!(f.samples >= 5, "{f:?}");
        assert!((1.3..5.0).contains(&f.secs), "{f:?}");
        assert!(f.other_runnable_mean >= 1.0, "{f:?}");
        assert!(f.other_runnable_max >= 2, "{f:?}");
        assert!(!f.quiet(&l));
        assert!(f.reasons(&l)[0].contains("other runnable threads"), "{f:?}");
        // Whatever else the machine runs, the two watches that own the
        // spinners see (nearly) two runnable threads fewer, and their CPU
        // is not foreign.
        assert!(
            f.other_runnable_mean - d.other_runnable_mean >= 1.0,
            "{f:?}\n{d:?}"
        );
        assert!(
            f.other_runnable_mean - n.other_runnable_mean >= 1.0,
            "{f:?}\n{n:?}"
        );
        assert!(f.other_cpu - d.other_cpu >= 0.2, "{f:?}\n{d:?}");
        assert!(f.other_cpu - n.other_cpu >= 0.2, "{f:?}\n{n:?}");
        for b in [&f, &d, &n] {
            assert!((0.0..=1.0).contains(&b.steal) && (0.0..=1.0).contains(&b.softirq));
        }
    }

    #[test]
    fn waiting_for_quiet_gives_up_with_the_reasons() {
        let seen = Cell::new(0);
        let never = Limits {
            other_runnable: -1.0,
            ..Limits::default()
        };
        let window = Duration::from_millis(300);
        let err = wait_quiet_in(window, Duration::ZERO, &never, &|_| {
            seen.set(seen.get() + 1)
        })
        .unwrap_err()
        .to_string();
        assert_eq!(seen.get(), 1);
        assert!(
            err.starts_with("the machine is not quiet after 0 s: "),
            "{err}"
        );
        assert!(err.contains("other runnable threads on average"), "{err}");
        let any = Limits {
            other_runnable: f64::INFINITY,
            other_cpu: f64::INFINITY,
            steal: f64::INFINITY,
            softirq: f64::INFINITY,
            freq_spread: f64::INFINITY,
        };
        let b = wait_quiet_in(window, Duration::from_secs(5), &any, &|_| {}).unwrap();
        assert!(b.samples >= 2, "{b:?}");
    }

    #[test]
    fn sample_cost() {
        let w = Watch::start(vec![std::process::id() as i32], Duration::from_secs(60)).unwrap();
        let mut s = Sampler::new(Arc::clone(&w.roots), 0);
        let cpu0 = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        let t0 = Instant::now();
        let n = 50;
        for _ in 0..n {
            s.sample().unwrap();
        }
        let cpu1 = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        let wall = t0.elapsed() / n;
        let cpu_ns = (cpu1.tv_sec - cpu0.tv_sec) * 1_000_000_000 + (cpu1.tv_nsec - cpu0.tv_nsec);
        println!(
            "a sample: {} processes, {wall:?} wall, {} µs of CPU",
            s.procs.len(),
            cpu_ns / 1000 / i64::from(n)
        );
        assert_eq!(s.samples, 50);
        let b = w.stop();
        assert_eq!(b.samples, 2, "one at start, one at stop");
    }
}
