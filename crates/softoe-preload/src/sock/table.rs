//! The descriptors that are softoe sockets: a bit per descriptor for the
//! lock-free "not ours" every hook asks first, and a map to the sockets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use libc::c_int;

use super::{Sock, St, lock};

/// The descriptors that are softoe sockets. A plain static: looking a
/// descriptor up never initialises anything, so a hook called while the
/// shim initialises (its log line going through our own `write`) passes
/// straight through.
#[derive(Debug)]
pub(crate) struct Table {
    /// One bit per descriptor below 65536: a lock-free "not ours" for the
    /// calls on every other descriptor (files, pipes, kernel sockets).
    bits: [AtomicU64; BITS / 64],
    map: RwLock<BTreeMap<c_int, Arc<Sock>>>,
}

const BITS: usize = 65_536;

pub(crate) static TABLE: Table = Table {
    bits: [const { AtomicU64::new(0) }; BITS / 64],
    map: RwLock::new(BTreeMap::new()),
};

impl Table {
    pub(crate) fn get(&self, fd: c_int) -> Option<Arc<Sock>> {
        if fd < 0 {
            return None;
        }
        let i = fd as usize;
        if i < BITS && self.bits[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) == 0 {
            return None;
        }
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&fd)
            .cloned()
    }

    /// Whether `fd` may be a softoe socket: the bit alone, no lock (the
    /// shim's messages ask about descriptor 2 from anywhere).
    pub(crate) fn holds(&self, fd: c_int) -> bool {
        let i = fd as usize;
        fd >= 0 && i < BITS && self.bits[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) != 0
    }

    pub(crate) fn insert(&self, fd: c_int, s: Arc<Sock>) {
        if fd < 0 {
            return;
        }
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(fd, s);
        let i = fd as usize;
        if i < BITS {
            self.bits[i / 64].fetch_or(1 << (i % 64), Ordering::Release);
        }
    }

    /// Points every descriptor that names `old` at `new`; returns those
    /// descriptors.
    pub(crate) fn replace(&self, old: &Arc<Sock>, new: &Arc<Sock>) -> Vec<c_int> {
        let mut m = self
            .map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut fds = Vec::new();
        for (&fd, v) in m.iter_mut() {
            if Arc::ptr_eq(v, old) {
                *v = new.clone();
                fds.push(fd);
            }
        }
        fds
    }

    /// Every descriptor that names socket `s`.
    pub(crate) fn fds_of(&self, s: &Arc<Sock>) -> Vec<c_int> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, v)| Arc::ptr_eq(v, s))
            .map(|(&fd, _)| fd)
            .collect()
    }

    /// This process's connections and listeners not yet watched, each with
    /// every descriptor that names it.
    pub(crate) fn unwatched(&self) -> Vec<(Arc<Sock>, Vec<c_int>)> {
        let m = self
            .map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<(Arc<Sock>, Vec<c_int>)> = Vec::new();
        for (&fd, s) in m.iter() {
            if !s.ours() || s.watched.load(Ordering::Relaxed) {
                continue;
            }
            if !matches!(&**lock(&s.st), St::Stream(_) | St::Listening(_)) {
                continue;
            }
            match out.iter_mut().find(|(o, _)| Arc::ptr_eq(o, s)) {
                Some((_, fds)) => fds.push(fd),
                None => out.push((s.clone(), vec![fd])),
            }
        }
        out
    }

    /// Every descriptor that is a softoe socket, with its socket.
    pub(crate) fn entries(&self) -> Vec<(c_int, Arc<Sock>)> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(fd, s)| (*fd, s.clone()))
            .collect()
    }

    /// Whether no descriptor is a softoe socket.
    pub(crate) fn is_empty(&self) -> bool {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }

    pub(crate) fn remove(&self, fd: c_int) -> Option<Arc<Sock>> {
        if fd < 0 {
            return None;
        }
        let i = fd as usize;
        if i < BITS {
            if self.bits[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) == 0 {
                return None;
            }
            self.bits[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
        }
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&fd)
    }
}
