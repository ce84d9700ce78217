//! Wake-ups: slot events published, waiters' doorbells, the engine's
//! sleep.

use std::sync::atomic::Ordering;

use softoe_abi::{
    ENGINE_POLLING, ENGINE_SLEEPING, EV_ACCEPT, EV_CONNECTED, EV_ERR, EV_HELD, EV_HUP, EV_RDHUP,
    EV_READABLE, EV_WRITABLE, SESSION_CLOSED, SlotView, waiter_bell,
};
use softoe_stack::Instant;

use crate::emulate::AccessMeter;
use crate::host::HostConfig;

use super::sock::HSock;
use super::{Program, SessionCore};

/// Readiness bits a reader waits for: their rise stamps the slot's
/// `rx_at`.
const RX_BITS: u32 = EV_READABLE | EV_ACCEPT | EV_RDHUP | EV_HUP | EV_ERR | EV_HELD;
/// Readiness bits a writer waits for (`tx_at`).
const TX_BITS: u32 = EV_WRITABLE | EV_CONNECTED | EV_HUP | EV_ERR;

/// Writes `ev` to the slot if it changed, and bumps the slot's sequence
/// when it did or when the socket `moved` (bytes placed, space freed).
///
/// A program that saw a send refused waits for the sequence to move past
/// the value it read *before* sending; space freed after that read must
/// bump it even when the events stay the same (`EV_WRITABLE` may never
/// have been cleared), or the program would wait for a change that never
/// comes. Returns whether the events changed.
///
/// What arose for a reader (a readiness bit set, bytes placed in the ring)
/// or for a writer (a bit set, room freed) is stamped with the session's
/// next event count (`clock`), so that a program waiting for many sockets
/// reports them in the order they became ready, as Linux's epoll does
/// ([`SlotView::stamp`]).
///
/// A write to the slot is one access to the program's memory (`meter`).
pub(super) fn publish(
    s: &mut HSock,
    view: &SlotView<'_>,
    ev: u32,
    moved: bool,
    meter: &mut AccessMeter,
    clock: &mut u64,
) -> bool {
    let changed = s.events != ev;
    let rose = ev & !s.events;
    let placed = s.rx_tail != s.stamped_tail;
    s.stamped_tail = s.rx_tail;
    if changed {
        s.events = ev;
        view.set_events(ev);
    }
    if changed || moved {
        *clock += 1;
        if rose & RX_BITS != 0 || placed {
            view.stamp(false, *clock);
        }
        if rose & TX_BITS != 0 || (moved && !placed) {
            view.stamp(true, *clock);
        }
        view.bump_seq();
        meter.access();
    }
    changed
}

impl<P: Program> SessionCore<P> {
    pub(in crate::host) fn wake_at(&self) -> Option<Instant> {
        self.first_unwoken
    }

    pub(in crate::host) fn before_sleep(&mut self) -> bool {
        if self.dead {
            return false;
        }
        self.region
            .engine_state()
            .store(ENGINE_SLEEPING, Ordering::SeqCst);
        // A command posted before the store above is visible now.
        self.cmds.available().is_ok_and(|n| n > 0)
    }

    pub(in crate::host) fn after_sleep(&mut self) {
        if !self.dead {
            self.region
                .engine_state()
                .store(ENGINE_POLLING, Ordering::Release);
        }
    }

    /// Rings the bells of the threads asleep on socket `id` (its slot just
    /// changed): the socket's news wakes the thread waiting for it, at
    /// once and no other. The index is the program's word: one that names
    /// no bell of this session rings nothing.
    pub(super) fn ring_waiters(&mut self, id: u32) {
        let region = self.region;
        let Some(v) = region.slot(id) else {
            return;
        };
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return;
        };
        // Pairs with the program's SeqCst store of the word before its last
        // look at the slot: it sees the change, or we see the word.
        std::sync::atomic::fence(Ordering::SeqCst);
        for (i, tx) in [false, true].into_iter().enumerate() {
            let w = v.waiter(tx).load(Ordering::SeqCst);
            // Rung for this sleep already: the thread is waking up. A
            // writer waits for enough room (see `serve`).
            if w == s.rang[i] || (tx && !s.tx_wake) {
                continue;
            }
            if tx {
                s.tx_freed = 0;
            }
            if let Some(b) = waiter_bell(w)
                && self.io.ring_waiter(b)
            {
                self.meter.access();
                s.rang[i] = w;
                self.wakeups += 1;
            }
        }
    }

    /// The engine is stopping: tells the program its session is over
    /// (`SESSION_CLOSED`, which every wait of `softoe-host` checks) and
    /// wakes every thread asleep on one of its bells to see it, rather than
    /// leave them waiting for an engine that will not answer.
    pub(in crate::host) fn engine_stopping(&mut self) {
        self.region
            .engine_state()
            .store(SESSION_CLOSED, Ordering::Release);
        // Pairs with the program's SeqCst store of a waiter word before its
        // last look at the state: it sees the state, or we see the word.
        std::sync::atomic::fence(Ordering::SeqCst);
        // Waits on sockets and kernel descriptors together (the shim's
        // `poll` and `epoll_wait`) sleep on bells of their own.
        self.region.bump_events();
        let mut armed = self.region.bells_armed().load(Ordering::SeqCst);
        while armed != 0 {
            let i = armed.trailing_zeros();
            armed &= armed - 1;
            self.io.ring_waiter(i);
        }
        self.io.ring_session();
        let region = self.region;
        for id in 0..self.socks.len() as u32 {
            let Some(v) = region.slot(id) else {
                continue;
            };
            for tx in [false, true] {
                if let Some(b) = waiter_bell(v.waiter(tx).load(Ordering::SeqCst)) {
                    self.io.ring_waiter(b);
                }
            }
        }
    }

    pub(super) fn wake(&mut self, now: Instant, cfg: &HostConfig) {
        if self.unwoken == 0 {
            return;
        }
        let first = *self.first_unwoken.get_or_insert(now);
        if self.unwoken < cfg.wake_batch && now.saturating_duration_since(first) < cfg.wake_delay {
            return;
        }
        self.region.bump_events();
        let waiting = self.region.app_waiting().load(Ordering::SeqCst);
        if waiting > 0 {
            // Waiters with bells of their own get those; the session's
            // doorbell is for the rest.
            let mut armed = self.region.bells_armed().load(Ordering::SeqCst);
            let mut own = 0;
            while armed != 0 {
                let i = armed.trailing_zeros();
                armed &= armed - 1;
                if self.io.ring_waiter(i) {
                    self.meter.access();
                    own += 1;
                }
            }
            if waiting > own {
                self.io.ring_session();
                self.meter.access();
            }
            self.wakeups += 1;
        }
        self.unwoken = 0;
        self.first_unwoken = None;
    }
}
