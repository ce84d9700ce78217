//! [`Service`]: an application on the engine thread.
//!
//! The engine drives it every turn; the built-in ones (`services`) and the
//! host interface's session core are services alike. Apart from the demo
//! servers, so the engine, the host interface and emulation name the trait
//! without depending on them.

use std::net::SocketAddrV4;

use softoe_stack::{BindError, Events, Instant, SocketHandle, Stack};

use crate::memory::Memory;

/// Why a service could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// Its listener could not be made.
    #[error("listen on port {port}: {why}")]
    Listen {
        /// The port it wanted.
        port: u16,
        /// What the stack said.
        why: BindError,
    },
    /// Its connection could not be started.
    #[error("connect to {remote}: {why}")]
    Connect {
        /// Where to.
        remote: SocketAddrV4,
        /// What the stack said.
        why: BindError,
    },
}

/// An application on the engine.
pub trait Service: Send {
    /// Its name, for logs.
    fn name(&self) -> &str;
    /// Called once before the loop starts (listen, connect).
    fn start(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        mem: &mut Memory,
    ) -> Result<(), ServiceError>;
    /// Does what it can; returns whether it did anything.
    fn step(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) -> bool;
    /// A socket event (before `step`).
    fn event(&mut self, _h: SocketHandle, _e: Events) {}
    /// When it wants to run again without a network event.
    fn wake_at(&self) -> Option<Instant> {
        None
    }
    /// A descriptor that becomes readable when it has work (a doorbell);
    /// the engine's sleep includes it.
    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// The engine is about to sleep: tell peers to ring the doorbell from
    /// now on, then say whether work arrived meanwhile (the engine then
    /// stays awake). Closes the race between a last look and the sleep.
    fn before_sleep(&mut self) -> bool {
        false
    }
    /// The engine is awake again (after `before_sleep`).
    fn after_sleep(&mut self) {}
    /// The engine's emulation settings, given once before `start` (a
    /// service that touches programs' shared memory delays and counts its
    /// accesses by them).
    fn emulate(&mut self, _e: &crate::emulate::Emulation) {}
    /// Adds what the service counted since the last call (accesses to
    /// programs' shared memory, its stages' times) to `c`, and starts
    /// again from zero. Called after every turn.
    fn drain_counters(&mut self, _c: &mut crate::counters::EngineCounters) {}
}
