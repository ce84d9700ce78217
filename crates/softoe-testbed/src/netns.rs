//! Running code inside a network namespace.

use std::fs::File;
use std::os::fd::AsFd;
use std::process::Command;

use crate::{Error, Result, run};

/// A network namespace of a testbed (it does not own it: the [`Testbed`]
/// deletes it).
///
/// [`Testbed`]: crate::Testbed
#[derive(Debug, Clone)]
pub struct Netns {
    name: String,
}

impl Netns {
    pub(crate) fn new(name: String) -> Netns {
        Netns { name }
    }

    /// A handle on an existing namespace by name (`ip netns list`).
    pub fn named(name: &str) -> Netns {
        Netns {
            name: name.to_string(),
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n <ns> args…`.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// A command that runs inside the namespace (`ip netns exec`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Joins the namespace on the current thread (network namespace only).
    pub fn enter_current_thread(&self) -> Result<()> {
        let path = format!("/run/netns/{}", self.name);
        let f = File::open(&path).map_err(|source| Error::Setns {
            name: self.name.clone(),
            source,
        })?;
        // Only this thread's network namespace changes.
        rustix::thread::move_into_link_name_space(
            f.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| Error::Setns {
            name: self.name.clone(),
            source: e.into(),
        })
    }

    /// Runs `f` on a new thread inside the namespace and waits for it.
    /// Sockets and TAP devices `f` creates belong to the namespace (and keep
    /// working after it returns).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        self.spawn(f)?.join()
    }

    /// Starts `f` on a new thread inside the namespace. `f` never runs if the
    /// thread cannot join the namespace (that error comes back at once).
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<NsThread<T>> {
        let me = self.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(format!("ns-{}", self.name))
            .spawn(move || {
                let entered = me.enter_current_thread();
                let ok = entered.is_ok();
                let _ = tx.send(entered);
                ok.then(f)
            })
            .map_err(|source| Error::Spawn {
                cmd: "thread".into(),
                source,
            })?;
        match rx.recv() {
            Ok(Ok(())) => Ok(NsThread {
                handle,
                ns: self.name.clone(),
            }),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => Err(Error::Panicked(self.name.clone())),
        }
    }
}

/// A thread running inside a namespace.
#[derive(Debug)]
pub struct NsThread<T> {
    handle: std::thread::JoinHandle<Option<T>>,
    ns: String,
}

impl<T> NsThread<T> {
    /// Waits for the thread and returns what it returned.
    pub fn join(self) -> Result<T> {
        match self.handle.join() {
            Ok(Some(v)) => Ok(v),
            _ => Err(Error::Panicked(self.ns)),
        }
    }

    /// Whether it has finished.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

/// The processes whose network namespace is the one mounted at `path`
/// (their main thread's, as `ip netns pids` reads it), other than this
/// process: `(pid, its command line)`.
fn processes_in(path: &std::path::Path) -> std::io::Result<Vec<(i32, String)>> {
    use std::os::unix::fs::MetadataExt;
    let target = std::fs::metadata(path)?;
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // A process that is gone, or a zombie (whose namespaces are
        // released), has no readable ns/net: not in the namespace.
        let Ok(ns) = std::fs::metadata(format!("/proc/{pid}/ns/net")) else {
            continue;
        };
        if ns.dev() == target.dev() && ns.ino() == target.ino() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if let Ok(pid) = i32::try_from(pid) {
                found.push((pid, cmdline.trim().to_string()));
            }
        }
    }
    Ok(found)
}

/// Kills (`SIGKILL`) every process in the namespace `name` and waits until
/// none is left in it, for at most `limit`. Returns the processes killed.
///
/// The namespaces a testbed makes carry names unique to the run, so what
/// runs in them was started by its tests: a server a test forgot, the
/// workers a daemon forked. Deleting a namespace does not end them (they
/// keep it alive, nameless), which is why teardown kills them first.
pub(crate) fn kill_processes(name: &str, limit: std::time::Duration) -> Result<Vec<String>> {
    let path = std::path::PathBuf::from(format!("/run/netns/{name}"));
    let end = std::time::Instant::now() + limit;
    let mut killed = Vec::new();
    loop {
        let left = match processes_in(&path) {
            Ok(left) => left,
            // The namespace is gone already: nothing can be in it by name.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(killed),
            Err(source) => {
                return Err(Error::Setns {
                    name: name.to_string(),
                    source,
                });
            }
        };
        if left.is_empty() {
            return Ok(killed);
        }
        if std::time::Instant::now() > end {
            return Err(Error::Command {
                cmd: format!("kill the processes in namespace {name}"),
                stderr: format!(
                    "still running after {} ms: {}",
                    limit.as_millis(),
                    left.iter()
                        .map(|(pid, cmd)| format!("{pid} {cmd}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        for (pid, cmd) in left {
            let line = format!("{pid} {cmd}");
            if kill_if_in(pid, &path) && !killed.contains(&line) {
                killed.push(line);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Sends `SIGKILL` to `pid` if it is (still) in the namespace at `path`:
/// through a pidfd, so a pid reused by another process between the scan
/// and the signal is never hit. Whether a signal was sent.
fn kill_if_in(pid: i32, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(p) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    let Ok(pidfd) = rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) else {
        return false;
    };
    // The pidfd pins this very process; check it is the one in the
    // namespace (the pid may have been reused since the scan).
    let (Ok(target), Ok(ns)) = (
        std::fs::metadata(path),
        std::fs::metadata(format!("/proc/{pid}/ns/net")),
    ) else {
        return false;
    };
    if ns.dev() != target.dev() || ns.ino() != target.ino() {
        return false;
    }
    rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL).is_ok()
}
