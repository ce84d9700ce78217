//! Running code inside a network namespace.

#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
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
        // SAFETY: `f` is an open namespace file descriptor for the call's
        // duration; CLONE_NEWNET only changes this thread's network namespace.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(Error::Setns {
                name: self.name.clone(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
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
