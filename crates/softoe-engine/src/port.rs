//! Ports: what moves the engine's frames.

use std::io;
use std::os::fd::RawFd;

use softoe_stack::{DeviceCaps, RxMeta, TxFrame};

use crate::memory::Memory;

/// A frame read from a port: where it lies in the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxFrame {
    /// Offset of the Ethernet header in the buffer.
    pub start: usize,
    /// Length of the frame.
    pub len: usize,
    /// What the port knows about it.
    pub meta: RxMeta,
}

/// A network port.
pub trait Port {
    /// What it offloads.
    fn caps(&self) -> DeviceCaps;
    /// Sends a frame, resolving its payload in `mem`. `Ok(false)`: busy,
    /// try later (nothing was sent).
    fn send(&mut self, frame: &TxFrame<'_>, mem: &Memory) -> io::Result<bool>;
    /// Reads one frame into `buf`; `Ok(None)` when none is waiting.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<RxFrame>>;
    /// The engine's turn is over: hand the kernel what [`send`](Self::send)
    /// queued and give back what [`recv`](Self::recv) read. A port whose
    /// every `send` is already a system call has nothing to do (the
    /// default); a ring-based port ([`XdpPort`](crate::XdpPort)) makes its
    /// one system call for the turn's frames here, so a turn that answers
    /// a burst costs one call, not one per frame. Called once per turn,
    /// before the engine sleeps, and after the last turn.
    fn flush(&mut self) {}
    /// A descriptor to wait on for readability.
    fn raw_fd(&self) -> RawFd;
    /// A short description for logs and `softoe stat`.
    fn describe(&self) -> String;
    /// When the port next has work of its own (frames it holds back, as
    /// the fault injector's delays); the engine's sleep ends by then.
    fn wake_at(&self) -> Option<std::time::Instant> {
        None
    }
    /// Frames the kernel dropped on their way to the engine since the port
    /// opened (its queue full while the engine was busy), where the device
    /// counts them. Read when `softoe stat` asks, not per frame.
    fn dropped(&mut self) -> Option<u64> {
        None
    }
    /// Whether the link is up (administratively up and with carrier), where
    /// the device tells; `None`: unknown. A bonded port asks every
    /// heartbeat period, so this must be cheap (an ioctl, not a file).
    fn carrier(&mut self) -> Option<bool> {
        None
    }
    /// The device whose receive queue 0 carries the frames the engine
    /// sends, where the kernel receives them inside the engine's writes (a
    /// TAP device): the engine may steer that work to other cores
    /// ([`crate::steer`]). `None` (the default): nothing to steer.
    fn steer_device(&self) -> Option<&str> {
        None
    }
    /// The engine stops: last words on the wire (a bond's `ARPP_CLEAR`, so
    /// peers forget it at once). Called once, after the last turn.
    fn stop(&mut self) {}
    /// The bond's members, ARP+ table and counters, for a bonded port
    /// ([`BondPort`](crate::BondPort)); `None` for a plain one. Read when
    /// `softoe stat` asks.
    fn bond(&self) -> Option<crate::control::BondStat> {
        None
    }
    /// Paths the port was sending on that went away so far (a bond's
    /// member left, or a bonded peer's did; 0 for a plain port). When it
    /// grows the engine has every connection probe at once
    /// ([`Stack::path_changed`](softoe_stack::Stack::path_changed)): what
    /// went out there lately is lost without trace.
    fn path_losses(&self) -> u64 {
        0
    }
    /// The faults injected so far, for a port that injects them (the
    /// [`FaultPort`](crate::FaultPort)); `None` for a plain port. Read when
    /// `softoe stat` asks and when the engine stops.
    fn faults(&self) -> Option<crate::FaultCounters> {
        None
    }
}
