//! Placement: which CPU each party of a bench runs on — the engine, the
//! client, the servers — or none, and the scheduler places it. A bench
//! prints its [`Placement`] beside its figures ([`Placement::describe`]),
//! refuses CPUs this process may not use before it starts
//! ([`Placement::check`]), and pins threads ([`pin_this_thread`]) and whole
//! server processes ([`pin_process`]).
//!
//! The checks are the engine's own ([`softoe_engine::engine::check_cpu`]):
//! a CPU must exist, be online and be in this process's affinity mask
//! (taskset, a cgroup's cpuset), and the error names the allowed list.

use std::io;

use anyhow::{Context, Result, anyhow};
use rustix::process::Pid;
use rustix::thread::CpuSet;
use serde::Serialize;
use softoe_engine::engine::check_cpu;

/// Where the bench's parties run: each `None` = the scheduler places it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// The engine's thread.
    pub engine: Option<usize>,
    /// The bench's client (the measuring thread and what it starts).
    pub client: Option<usize>,
    /// The server programs, every thread of them.
    pub servers: Option<usize>,
}

impl Placement {
    /// The parties: name, whose (for errors) and CPU, in the order they
    /// print.
    fn parties(&self) -> [(&'static str, &'static str, Option<usize>); 3] {
        [
            ("engine", "the engine's", self.engine),
            ("client", "the client's", self.client),
            ("servers", "the servers'", self.servers),
        ]
    }

    /// "engine cpu 1, client cpu 0, servers free" (for tables).
    pub fn describe(&self) -> String {
        self.parties()
            .iter()
            .map(|(name, _, cpu)| match cpu {
                Some(c) => format!("{name} cpu {c}"),
                None => format!("{name} free"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Refuses CPUs this process may not use (from its affinity mask),
    /// with a clear error naming the party and the allowed list, e.g. "the
    /// engine's CPU: this machine has no CPU 4096; this process may run on
    /// CPUs 0-1".
    pub fn check(&self) -> Result<()> {
        for (_, whose, cpu) in self.parties() {
            if let Some(c) = cpu {
                check_cpu(c).with_context(|| format!("{whose} CPU"))?;
            }
        }
        Ok(())
    }
}

/// The set of `cpu` alone, after [`check_cpu`].
fn only(cpu: usize) -> Result<CpuSet> {
    check_cpu(cpu)?;
    if cpu >= CpuSet::MAX_CPU {
        return Err(anyhow!("no CPU {cpu}"));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    Ok(set)
}

/// Pins the calling thread to `cpu` (after the same checks as
/// [`Placement::check`]).
pub fn pin_this_thread(cpu: usize) -> Result<()> {
    let set = only(cpu)?;
    rustix::thread::sched_setaffinity(None, &set)
        .with_context(|| format!("pinning this thread to CPU {cpu}"))
}

/// The thread ids of process `pid` (`/proc/PID/task`).
fn threads(pid: i32) -> io::Result<Vec<i32>> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Pins every thread of process `pid` to `cpu` (its later threads inherit
/// from their creator): walks `/proc/PID/task`, again while a walk finds
/// threads the last one did not (a thread started during the walk by one
/// not yet pinned). Threads that end meanwhile are passed over.
pub fn pin_process(pid: i32, cpu: usize) -> Result<()> {
    let set = only(cpu)?;
    let mut pinned: Vec<i32> = Vec::new();
    // A bound on the walks: a process that keeps starting threads faster
    // than they can be pinned is not one the bench places.
    for _ in 0..8 {
        let tids = threads(pid).with_context(|| format!("the threads of process {pid}"))?;
        let new: Vec<i32> = tids
            .into_iter()
            .filter(|t| pinned.binary_search(t).is_err())
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        for &tid in &new {
            let Some(p) = Pid::from_raw(tid) else {
                continue;
            };
            match rustix::thread::sched_setaffinity(Some(p), &set) {
                Err(rustix::io::Errno::SRCH) | Ok(()) => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("pinning thread {tid} of process {pid} to CPU {cpu}")
                    });
                }
            }
        }
        pinned.extend(new);
        pinned.sort_unstable();
    }
    Err(anyhow!(
        "process {pid} kept starting threads while it was being pinned to CPU {cpu}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use softoe_engine::engine::{allowed_cpus, cpu_list};

    fn cpus_of(pid: Option<Pid>) -> Vec<usize> {
        let set = rustix::thread::sched_getaffinity(pid).unwrap();
        (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
    }

    #[test]
    fn describe_names_each_party() {
        let p = Placement {
            engine: Some(1),
            client: Some(0),
            servers: None,
        };
        assert_eq!(p.describe(), "engine cpu 1, client cpu 0, servers free");
        assert_eq!(
            Placement::default().describe(),
            "engine free, client free, servers free"
        );
    }

    #[test]
    fn check_refuses_an_impossible_cpu_and_names_the_allowed_list() {
        let allowed = allowed_cpus().unwrap();
        let first = allowed[0];
        let ok = Placement {
            engine: Some(first),
            client: Some(first),
            servers: None,
        };
        ok.check().unwrap();
        assert!(Placement::default().check().is_ok());
        let bad = Placement {
            servers: Some(4096),
            ..ok
        };
        let msg = format!("{:#}", bad.check().unwrap_err());
        assert!(msg.starts_with("the servers' CPU: "), "{msg}");
        assert!(msg.contains("4096"), "{msg}");
        assert!(msg.contains(&cpu_list(&allowed)), "{msg}");
        assert!(pin_this_thread(4096).is_err());
        assert!(pin_process(std::process::id() as i32, 4096).is_err());
    }

    #[test]
    fn pin_this_thread_holds_on_that_thread_alone() {
        let before = cpus_of(None);
        let cpu = *allowed_cpus().unwrap().last().unwrap();
        let seen = std::thread::spawn(move || {
            pin_this_thread(cpu).unwrap();
            cpus_of(None)
        })
        .join()
        .unwrap();
        assert_eq!(seen, vec![cpu]);
        assert_eq!(cpus_of(None), before, "the test's own thread moved");
    }

    #[test]
    fn pin_process_pins_every_thread_of_a_child() {
        let cpu = *allowed_cpus().unwrap().last().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let r = pin_process(pid, cpu);
        let seen = threads(pid).map(|tids| {
            tids.iter()
                .map(|&t| cpus_of(Pid::from_raw(t)))
                .collect::<Vec<_>>()
        });
        let _ = child.kill();
        let _ = child.wait();
        r.unwrap();
        let seen = seen.unwrap();
        assert!(!seen.is_empty());
        assert!(seen.iter().all(|s| s == &vec![cpu]), "{seen:?}");
        // Gone now: an error naming the process, not a panic.
        let msg = format!("{:#}", pin_process(pid, cpu).unwrap_err());
        assert!(msg.contains(&pid.to_string()), "{msg}");
    }
}
