//! The boundary between the session core and the world: what a session
//! needs of its program besides the shared region, as a trait.
//!
//! The core (`SessionCore`) reads commands from and writes completions and
//! socket events to a region in ordinary memory; everything else it does to
//! the program goes through [`Program`]: ringing its doorbells and reading or
//! writing its private memory (sends from, and placement into, buffers
//! outside the region). For a real program — in another process, or in
//! this one through `crate::app` — that is eventfds and
//! `process_vm_readv`/`writev` (`Fds`, the outer layer); for a unit test or
//! a fuzz target it is `Local` (local.rs): counters and a byte vector.

/// What a session does to its program outside the shared region.
///
/// Errors are errno values (positive), as completions carry them.
pub(crate) trait Program {
    /// Rings the session's own doorbell: the program's threads that wait
    /// without a bell of their own sleep on it.
    fn ring_session(&mut self);

    /// Rings the waiter doorbell the program registered at `index`;
    /// whether there is one (an index the program made up rings nothing).
    fn ring_waiter(&mut self, index: u32) -> bool;

    /// Copies the program's memory at `addr` into `dst`: the bytes copied
    /// (fewer where the rest is unmapped), or an errno.
    fn read(&mut self, addr: u64, dst: &mut [u8]) -> Result<usize, i32>;

    /// Writes `a`, then `b`, to the program's memory at `addr`: the bytes
    /// written, or an errno.
    fn write(&mut self, addr: u64, a: &[u8], b: &[u8]) -> Result<usize, i32>;

    /// The effective user the program runs as now, if it can be told
    /// (the session's attach-time user otherwise): who a reuseport group
    /// belongs to. Asked only at a reuseport `BIND` or `LISTEN`. A program
    /// may drop privileges after it attached (the shim attaches before
    /// `set*uid`), and Linux judges a socket by the user that made it.
    fn uid(&mut self) -> Option<u32> {
        None
    }

    /// Whether the program may bind a port below the engine's
    /// `unprivileged_port_start`: `CAP_NET_BIND_SERVICE` in its effective
    /// set now, as the kernel shows it (never what the program says).
    /// Asked only at such a `BIND`.
    fn may_bind_privileged(&mut self) -> bool {
        true
    }
}
