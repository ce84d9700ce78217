//! The servers' processes and directories: started in a namespace in a
//! process group of their own, waited for until they answer, and killed
//! whole (a master's forked workers too) when dropped — on an error as on
//! success; temporary directories removed likewise.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use rustix::process::{Pid, Signal};
use softoe_testbed::Netns;

use crate::bed::RealBed;

/// How long a server has to answer after it starts.
const UP_WITHIN: Duration = Duration::from_secs(30);

/// Whether `program` is on `PATH`.
pub(super) fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// `program` run in namespace `ns`; with util-linux's `setpriv` at hand it
/// is also killed if this thread ends without dropping its guard (a
/// panic that aborts, say).
pub(super) fn in_ns(ns: &Netns, program: &str) -> Command {
    if have("setpriv") {
        let mut c = ns.command("setpriv");
        c.args(["--pdeathsig", "KILL", program]);
        c
    } else {
        ns.command(program)
    }
}

/// Makes `dir`'s tree readable to every user (nginx's workers run as
/// nobody).
pub(super) fn readable(dir: &Path) -> Result<()> {
    let s = Command::new("chmod")
        .arg("-R")
        .arg("a+rX")
        .arg(dir)
        .status()
        .context("running chmod")?;
    if !s.success() {
        bail!("chmod -R a+rX {}: {s}", dir.display());
    }
    Ok(())
}

/// A directory of its own under the temporary directory, removed when
/// dropped.
pub(super) struct TempDir(PathBuf);

impl TempDir {
    pub(super) fn new(tag: &str) -> Result<TempDir> {
        let p = std::env::temp_dir().join(format!("softoe-apps-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(TempDir(p))
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "apps: could not remove");
        }
    }
}

/// Sends `sig` to process `pid`, or to process group `-pid` (a process
/// or group this module started and has not reaped; one already gone is
/// no error to report).
fn signal(pid: i32, sig: Signal) {
    let Some(p) = Pid::from_raw(pid.saturating_abs()) else {
        return;
    };
    let _ = if pid < 0 {
        rustix::process::kill_process_group(p, sig)
    } else {
        rustix::process::kill_process(p, sig)
    };
}

/// Whether process `pid` has exited (a zombie, or gone), without reaping
/// it: its process group stays its own until it is reaped.
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_none_or(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// The last lines of `log`.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// A running server, leader of its process group; dropped, it gets
/// `graceful` (if any, up to 15 s to leave), then the whole group is
/// killed and the leader reaped.
pub(super) struct Server {
    child: Child,
    what: &'static str,
    log: PathBuf,
    graceful: Option<i32>,
}

impl Server {
    /// Starts `c` (its stderr to `log`).
    pub(super) fn spawn(
        mut c: Command,
        what: &'static str,
        log: PathBuf,
        graceful: Option<i32>,
    ) -> Result<Server> {
        let err =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        c.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err);
        tracing::debug!(cmd = ?c, "apps: starting");
        let child = c.spawn().with_context(|| format!("starting {what}"))?;
        Ok(Server {
            child,
            what,
            log,
            graceful,
        })
    }

    /// An error if the server has exited, with the end of its log.
    fn alive(&self) -> Result<()> {
        if exited(self.child.id()) {
            bail!(
                "{} exited; the end of its log ({}):\n{}",
                self.what,
                self.log.display(),
                tail(&self.log)
            );
        }
        Ok(())
    }

    /// `r`, with the server's death and log added if it failed because the
    /// server died.
    pub(super) fn check<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|e| match self.alive() {
            Ok(()) => e,
            Err(dead) => e.context(format!("{dead:#}")),
        })
    }

    /// Waits until `probe`, run in the client's namespace, succeeds.
    pub(super) fn wait_up<F>(&mut self, bed: &RealBed, probe: F) -> Result<()>
    where
        F: Fn() -> Result<()> + Clone + Send + 'static,
    {
        let end = Instant::now() + UP_WITHIN;
        loop {
            self.alive()?;
            let last = match bed.client.run(probe.clone()) {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => e,
                Err(e) => anyhow::Error::from(e),
            };
            if Instant::now() > end {
                return Err(last.context(format!(
                    "{} did not answer within {UP_WITHIN:?}; its log:\n{}",
                    self.what,
                    tail(&self.log)
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the command `make` gives succeeds (its outputs go to
    /// `dir`).
    pub(super) fn wait_up_cmd(
        &mut self,
        make: impl Fn() -> Result<Command>,
        dir: &Path,
    ) -> Result<()> {
        let end = Instant::now() + UP_WITHIN;
        loop {
            self.alive()?;
            let out = run_timeout(make()?, 10, "probe", dir)?;
            if out.status.success() {
                return Ok(());
            }
            if Instant::now() > end {
                bail!(
                    "{} did not answer within {UP_WITHIN:?}: {}; its log:\n{}",
                    self.what,
                    out.stderr.trim(),
                    tail(&self.log)
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Ok(pid) = i32::try_from(self.child.id()) else {
            return;
        };
        if let Some(sig) = self.graceful {
            if let Some(sig) = Signal::from_named_raw(sig) {
                signal(pid, sig);
            }
            let end = Instant::now() + Duration::from_secs(15);
            while !exited(self.child.id()) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // The whole group, before the leader is reaped (so the group id
        // cannot be anyone else's yet).
        signal(-pid, Signal::KILL);
        let _ = self.child.kill();
        match self.child.wait() {
            Ok(s) => tracing::debug!(what = self.what, status = %s, "apps: stopped"),
            Err(e) => tracing::warn!(what = self.what, error = %e, "apps: reaping"),
        }
    }
}

/// What a command printed, and how it ended.
pub(super) struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `c` to its end (killed with its group after `secs`), its outputs
/// through files in `dir`.
pub(super) fn run_timeout(mut c: Command, secs: u64, what: &str, dir: &Path) -> Result<Output> {
    let (out, err) = (dir.join("cmd.out"), dir.join("cmd.err"));
    c.process_group(0)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&err)?);
    let mut child = c.spawn().with_context(|| format!("starting {what}"))?;
    let end = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() > end {
            if let Ok(pid) = i32::try_from(child.id()) {
                signal(-pid, Signal::KILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(anyhow!("{what} did not finish within {secs} s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Ok(Output {
        status,
        stdout: read(&out),
        stderr: read(&err),
    })
}
