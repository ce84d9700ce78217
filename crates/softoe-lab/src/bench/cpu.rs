//! CPU accounting from `/proc`: a thread's, the machine's, and the server
//! program's as it reports it.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use crate::server::Servers;

/// `/proc/stat` counts in USER_HZ ticks, 100 a second on every Linux (a
/// fixed part of the kernel's user ABI, whatever the kernel's own HZ).
pub(super) fn ticks(n: u64) -> Duration {
    Duration::from_millis(n.saturating_mul(10))
}

/// Run time of thread `tid` of this process, from its `schedstat` (ns).
pub(crate) fn thread_cpu(tid: i32) -> Result<Duration> {
    schedstat_run(&format!("/proc/self/task/{tid}/schedstat"))
}

/// The run time (first field) of the `schedstat` at `path`.
pub(super) fn schedstat_run(path: &str) -> Result<Duration> {
    let s = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    s.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_nanos)
        .ok_or_else(|| anyhow!("odd schedstat in {path}: {s:?}"))
}

/// Thread `tid`'s scheduler record (`schedstat`): time on a CPU, time
/// waiting on a run queue, and time slices run.
pub(crate) fn thread_sched(tid: i32) -> Result<(Duration, Duration, u64)> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .with_context(|| format!("reading the schedstat of thread {tid}"))?;
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    match v[..] {
        [run, wait, slices, ..] => Ok((
            Duration::from_nanos(run),
            Duration::from_nanos(wait),
            slices,
        )),
        _ => Err(anyhow!("odd schedstat: {s:?}")),
    }
}

/// User and system time of thread `tid` of this process, from its `stat`
/// (fields 14 and 15, in USER_HZ ticks: 10 ms resolution).
pub(crate) fn thread_user_sys(tid: i32) -> Result<(Duration, Duration)> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .with_context(|| format!("reading the stat of thread {tid}"))?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after its closing one.
    let rest = s
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("odd stat"))?;
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    match f[..] {
        [u, s] => Ok((ticks(u), ticks(s))),
        _ => bail!("odd stat: {s}"),
    }
}

/// Busy CPU time of the whole machine (all cores), from `/proc/stat`.
pub(super) fn machine_cpu() -> Result<Duration> {
    let s = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = s
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| anyhow!("no cpu line in /proc/stat"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal …
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Ok(ticks(total.saturating_sub(idle)))
}

/// CPU counters at one moment.
#[derive(Clone, Copy)]
pub(super) struct Cpu {
    pub(super) app: Duration,
    pub(super) engine: Duration,
    pub(super) machine: Duration,
}

impl Cpu {
    pub(super) fn now(app: &mut Servers, engine_tid: i32) -> Result<Cpu> {
        Ok(Cpu {
            app: app.cpu()?,
            engine: thread_cpu(engine_tid)?,
            machine: machine_cpu()?,
        })
    }

    pub(super) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            app: self.app.saturating_sub(before.app),
            engine: self.engine.saturating_sub(before.engine),
            machine: self.machine.saturating_sub(before.machine),
        }
    }
}

/// The calling thread's run time, from `/proc/thread-self/schedstat`.
pub(super) fn own_thread_cpu() -> Result<Duration> {
    schedstat_run("/proc/thread-self/schedstat")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Instant;

    use super::*;
    use crate::server::own_cpu;

    #[test]
    fn this_process_has_cpu_time_and_the_machine_is_busy() {
        // Spin until the kernel has charged this thread 20 ms, however busy
        // the machine (a fixed 30 ms of wall time got less than 10 ms of CPU
        // in a loaded CI run), for at most 10 s.
        let tid = crate::bed::this_thread_id().unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while thread_cpu(tid).unwrap() < Duration::from_millis(20)
            && t.elapsed() < Duration::from_secs(10)
        {
            // 5 ms of pure user time between looks at /proc (reading it is
            // system time, and looking too often left no user time to see).
            let chunk = Instant::now();
            while chunk.elapsed() < Duration::from_millis(5) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        assert!(own_cpu() >= Duration::from_millis(10));
        assert!(thread_cpu(tid).unwrap() >= Duration::from_millis(10));
        let (user, _sys) = thread_user_sys(tid).unwrap();
        assert!(user >= Duration::from_millis(10), "{user:?}");
        assert!(machine_cpu().unwrap() > Duration::ZERO);
    }
}
