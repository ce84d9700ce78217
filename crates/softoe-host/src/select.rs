//! Readiness for many sockets at once, at a cost that follows what changed.
//!
//! [`Client::poll`] looks at every socket it is given, which is what
//! `poll(2)` does and fine for a handful. A server holding ten thousand
//! connections needs what `epoll` gives: the engine marks each socket whose
//! slot it changed in a bitmap in the region (one bit per socket id,
//! [`softoe_abi::Region::take_changed`]), and a [`Selector`] takes those
//! bits and looks only at the sockets they name, plus the ones it found
//! ready last time (readiness is level-triggered: a socket stays reported
//! while it is ready). A wait costs one load per 64 sockets of the table and
//! one slot read per changed or ready socket.
//!
//! The bitmap has one taker per session: a second selector on the same
//! client is refused (`ResourceBusy`) while the first lives.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::client::Client;
use crate::socket::{Interest, Pollable, Readiness, slot_readiness};

/// One ready socket, as [`Selector::select`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The socket's id ([`Pollable::socket_id`]).
    pub id: u32,
    /// Its readiness when it was looked at.
    pub readiness: Readiness,
}

/// When a changed socket became ready, as the session's event count (0:
/// nothing of that kind since the last take): for reporting sockets in the
/// order they became ready, as Linux's epoll does (its ready list is first
/// in, first out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamps {
    /// The first change a reader waits for (bytes, a connection to accept,
    /// the peer's FIN, a failure).
    pub rx: u64,
    /// The first change a writer waits for (room, connected, a failure).
    pub tx: u64,
}

impl Stamps {
    /// The order key for a waiter that wants to read (`read`) and/or to
    /// write (`write`): the earliest stamp it cares about; `u64::MAX` if
    /// none (it changed in no way it waits for: after every other).
    pub fn key(&self, read: bool, write: bool) -> u64 {
        let pick = |on: bool, v: u64| if on && v != 0 { v } else { u64::MAX };
        pick(read, self.rx).min(pick(write, self.tx))
    }
}

/// Waits for many sockets of one [`Client`], `epoll`-style
/// ([`Client::selector`]).
///
/// Register each socket with what to wait for; [`select`](Self::select)
/// fills a list with the sockets that are ready. Deregister a socket before
/// dropping it: its id may be given to a new socket afterwards.
#[derive(Debug)]
pub struct Selector {
    c: Client,
    /// What each socket id waits for (`None`: not registered).
    interest: Vec<Option<Interest>>,
    /// Registered sockets to look at in the next select: those reported
    /// ready last time and those the engine marked changed since.
    candidates: Vec<u32>,
    /// Whether an id is in `candidates` already.
    queued: Vec<bool>,
    /// Changed sockets being ordered (kept: no allocation per select).
    fresh: Vec<(u64, u32)>,
}

impl Client {
    /// A selector over this client's sockets. One per client at a time: the
    /// second is refused with `ResourceBusy` until the first is dropped.
    pub fn selector(&self) -> io::Result<Selector> {
        if self.inner.selector_taken.swap(true, Ordering::AcqRel) {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "this client has a selector already (one per session)",
            ));
        }
        let n = self.region().layout().socks() as usize;
        Ok(Selector {
            c: self.clone(),
            interest: vec![None; n],
            candidates: Vec::with_capacity(n.min(4096)),
            queued: vec![false; n],
            fresh: Vec::new(),
        })
    }
}

impl Client {
    /// Takes the session's changed bits: calls `f` once with each socket id
    /// the engine marked changed since the last take. For a program that
    /// keeps its own index of who waits for which socket instead of a
    /// [`Selector`] (the shim's `epoll`). The bits have one taker per
    /// session: such a program makes no selector, and while one lives this
    /// takes nothing and returns `false`.
    pub fn take_changed(&self, mut f: impl FnMut(u32, Stamps)) -> bool {
        if self.inner.selector_taken.load(Ordering::Acquire) {
            return false;
        }
        let region = *self.region();
        region.take_changed(|id| {
            let (rx, tx) = region.slot(id).map_or((0, 0), |v| v.take_stamps());
            f(id, Stamps { rx, tx });
        });
        true
    }

    /// Whether `other` is this attachment (a clone of the same [`Client`]),
    /// not merely one with the same session number.
    pub fn same_as(&self, other: &Client) -> bool {
        std::sync::Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Drop for Selector {
    fn drop(&mut self) {
        self.c.inner.selector_taken.store(false, Ordering::Release);
    }
}

impl Selector {
    /// Waits for `s` as `interest` says (replacing an earlier
    /// registration). `InvalidInput` if `s` belongs to another client.
    pub fn register(&mut self, s: &dyn Pollable, interest: Interest) -> io::Result<()> {
        if !std::sync::Arc::ptr_eq(&s.owner().inner, &self.c.inner) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the socket belongs to another client",
            ));
        }
        let id = s.socket_id() as usize;
        let Some(slot) = self.interest.get_mut(id) else {
            return Err(io::ErrorKind::InvalidInput.into());
        };
        *slot = Some(interest);
        // It may be ready already: look at it in the next select.
        self.enqueue(id as u32);
        Ok(())
    }

    /// Stops waiting for `s`.
    pub fn deregister(&mut self, s: &dyn Pollable) {
        if let Some(slot) = self.interest.get_mut(s.socket_id() as usize) {
            *slot = None;
        }
    }

    fn enqueue(&mut self, id: u32) {
        if let Some(q) = self.queued.get_mut(id as usize)
            && !*q
        {
            *q = true;
            self.candidates.push(id);
        }
    }

    /// Takes the changed bits, then looks at every candidate: the ready ones
    /// go into `out` and stay candidates, the others leave.
    fn collect(&mut self, out: &mut Vec<Event>) {
        let region = *self.c.region();
        // Newly changed sockets join the candidates in the order they
        // became ready, after those still there from the last select.
        let mut fresh = std::mem::take(&mut self.fresh);
        region.take_changed(|id| {
            if let Some(Some(w)) = self.interest.get(id as usize) {
                let (rx, tx) = region.slot(id).map_or((0, 0), |v| v.take_stamps());
                fresh.push((Stamps { rx, tx }.key(w.read, w.write), id));
            }
        });
        fresh.sort_unstable();
        for &(key, id) in &fresh {
            // Changed in no way it waits for: a candidate only if ready
            // all the same (see the shim's `enqueue_fresh`).
            let want = self.interest.get(id as usize).copied().flatten();
            if key == u64::MAX && !want.is_some_and(|w| w.met_by(slot_readiness(&region, id))) {
                continue;
            }
            self.enqueue(id);
        }
        fresh.clear();
        self.fresh = fresh;
        let mut i = 0;
        while i < self.candidates.len() {
            let id = self.candidates[i];
            let want = self.interest.get(id as usize).copied().flatten();
            let r = slot_readiness(&region, id);
            match want {
                Some(w) if w.met_by(r) => {
                    out.push(Event { id, readiness: r });
                    i += 1;
                }
                _ => {
                    if let Some(q) = self.queued.get_mut(id as usize) {
                        *q = false;
                    }
                    self.candidates.swap_remove(i);
                }
            }
        }
    }

    /// Fills `out` (cleared first) with the registered sockets that are
    /// ready for what they wait for, or have failed or hung up; waits up to
    /// `timeout` (`None`: for ever) while none is. Spins briefly, then
    /// sleeps on the session's doorbell. `Interrupted` if a signal handler
    /// without `SA_RESTART` interrupts the sleep.
    pub fn select(&mut self, out: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        out.clear();
        self.collect(out);
        if !out.is_empty() || timeout.is_some_and(|t| t.is_zero()) {
            return Ok(());
        }
        let c = self.c.clone();
        c.block_until(timeout, true, &c.inner.poll_spin, |_| {
            self.collect(out);
            (!out.is_empty()).then_some(())
        })?;
        Ok(())
    }
}
