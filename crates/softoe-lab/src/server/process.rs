//! The demo's and the benchmark's handle on a running server program.

use std::io::{BufRead, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// A server program's process, killed when dropped; it says `ready` when
/// it listens, and (`softoe bench-servers`) answers `cpu` and `conns` on its
/// stdin.
#[derive(Debug)]
pub(crate) struct Servers {
    child: Child,
    ask: std::process::ChildStdin,
    answers: mpsc::Receiver<String>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Servers {
    /// Starts the benchmark's servers with `cmd` and waits (up to 10 s)
    /// until they listen.
    pub(crate) fn start(cmd: Command) -> Result<Servers> {
        Servers::start_as(cmd, "the benchmark's servers")
    }

    /// Starts a server program with `cmd`, `what` naming it in errors, and
    /// waits (up to 10 s) until it listens.
    pub(crate) fn start_as(mut cmd: Command, what: &str) -> Result<Servers> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let (Some(out), Some(ask)) = (child.stdout.take(), child.stdin.take()) else {
            let _ = child.kill();
            bail!("no pipes to the servers");
        };
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut servers = Servers {
            child,
            ask,
            answers,
        };
        match servers.answers.recv_timeout(Duration::from_secs(10)) {
            Ok(l) if l.trim() == "ready" => Ok(servers),
            _ => {
                let st = servers.child.try_wait().ok().flatten();
                bail!("{what} did not start ({st:?}); see their error above")
            }
        }
    }

    /// The program's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the program with SIGKILL (it gets no chance to close anything)
    /// and reaps it.
    pub(crate) fn kill(&mut self) -> Result<()> {
        self.child.kill().context("killing the server program")?;
        self.child.wait().context("reaping the server program")?;
        Ok(())
    }

    /// Waits until the program has served what it was to serve and ended.
    pub(crate) fn finish(mut self) -> Result<ExitStatus> {
        Ok(self.child.wait()?)
    }

    /// Asks the servers `question` on their stdin and waits (up to 10 s)
    /// for the answer, `what` naming it in errors.
    fn ask(&mut self, question: &str, what: &str) -> Result<String> {
        writeln!(self.ask, "{question}")
            .with_context(|| format!("asking the servers for {what}"))?;
        self.ask.flush()?;
        self.answers
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| anyhow!("the servers did not say {what}"))
    }

    /// Waits (up to 30 s) until the number of connections the servers
    /// serve satisfies `ok`.
    pub(crate) fn wait_conns(&mut self, ok: impl Fn(usize) -> bool) -> Result<()> {
        let t = Instant::now();
        loop {
            let line = self.ask("conns", "their connections")?;
            let n: usize = line
                .strip_prefix("conns ")
                .and_then(|n| n.trim().parse().ok())
                .ok_or_else(|| anyhow!("odd answer from the servers: {line:?}"))?;
            if ok(n) {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!("the servers serve {n} connections after 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The servers' CPU time so far.
    pub(crate) fn cpu(&mut self) -> Result<Duration> {
        let line = self.ask("cpu", "their CPU time")?;
        line.strip_prefix("cpu ")
            .and_then(|n| n.trim().parse().ok())
            .map(Duration::from_nanos)
            .ok_or_else(|| anyhow!("odd answer from the servers: {line:?}"))
    }
}
