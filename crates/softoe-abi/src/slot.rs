//! The socket table: one 128-byte slot per socket id, the socket's state as
//! the engine publishes it and the program's progress through its receive
//! ring.
//!
//! Received bytes do not travel in completions: the engine copies them into
//! the socket's receive ring in the data area and advances `rx_tail`; the
//! program copies them out and advances `rx_head`. Both are free-running
//! byte counts (the ring position is the count modulo the ring length). A
//! UDP socket's ring holds datagrams, each a [`UdpHeader`] and its payload,
//! 8-byte aligned.

use core::marker::PhantomData;
use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bytes wait in the receive ring (or, on a listener, see [`EV_ACCEPT`]).
pub const EV_READABLE: u32 = 1 << 0;
/// The socket can take more data.
pub const EV_WRITABLE: u32 = 1 << 1;
/// The peer sent FIN: nothing follows the bytes up to `rx_tail`.
pub const EV_RDHUP: u32 = 1 << 2;
/// Both directions are closed.
pub const EV_HUP: u32 = 1 << 3;
/// The connection failed; `error` says why.
pub const EV_ERR: u32 = 1 << 4;
/// The connection is established.
pub const EV_CONNECTED: u32 = 1 << 5;
/// A listener has connections waiting for `ACCEPT`.
pub const EV_ACCEPT: u32 = 1 << 6;
/// The engine holds received data the ring could not take: post `RXDONE`
/// after taking bytes from the ring, or they wait.
pub const EV_RXFULL: u32 = 1 << 7;
/// Received bytes wait in the engine for the next posted buffer (`RECV`):
/// after a read placed directly, the engine keeps what follows out of the
/// ring so that the next large read is placed directly too. Post `RECV`,
/// or `RXDONE` to have the bytes moved into the ring.
pub const EV_HELD: u32 = 1 << 8;
/// Other sessions hold this connection too (processes that share it after
/// `fork`, `exec` or `SCM_RIGHTS`), and any of them may read next: the
/// receive ring is not used while this is set. Every read is a `RECV`
/// (with `RECV_NOWAIT` when it must not wait, `RECV_PEEK` to peek), so
/// the engine hands each byte to exactly one reader, in order;
/// [`EV_HELD`] says bytes wait. Bytes the ring held when the connection
/// became shared are taken back by the engine first (it moves `rx_head`
/// to `rx_tail` with a compare-and-swap, as readers do).
pub const EV_SHARED: u32 = 1 << 10;

/// The waiter word for bell `index` on the thread's `sleep`-th sleep
/// ([`SockSlot::rx_waiter`]).
pub const fn waiter_word(index: u32, sleep: u32) -> u32 {
    ((sleep & 0x00ff_ffff) << 8) | ((index & 0xff) + 1)
}

/// The bell a waiter word names, if any.
pub const fn waiter_bell(word: u32) -> Option<u32> {
    match word & 0xff {
        0 => None,
        i => Some(i - 1),
    }
}

/// The program waits to read (`interest`).
pub const WANT_READ: u32 = 1 << 0;
/// The program waits to write (`interest`).
pub const WANT_WRITE: u32 = 1 << 1;

/// One socket's shared state.
#[repr(C)]
#[derive(Debug)]
pub struct SockSlot {
    /// `EV_*` bits (engine writes).
    pub events: u32,
    /// Why the connection failed, an errno; 0 (engine writes).
    pub error: u32,
    /// Bytes the engine has placed in the receive ring (engine writes).
    pub rx_tail: u64,
    /// Send-ring bytes the engine no longer needs (engine writes).
    pub tx_acked: u64,
    /// Local address, [`pack_addr`](crate::pack_addr) (engine writes).
    pub local: u64,
    /// Remote address (engine writes).
    pub remote: u64,
    /// Bumped whenever `events` changes or the socket makes progress
    /// (bytes placed in the receive ring, send space freed) (engine
    /// writes). A program that is refused a send reads it *before* the
    /// send and waits for it to move.
    pub seq: u32,
    _pad0: [u8; 4],
    /// When something a reader waits for arose (bytes placed, a
    /// connection to accept, the peer's FIN, a failure), as the session's
    /// event count: written by the engine at the first such change since
    /// the program took it ([`SlotView::take_stamps`] swaps it to 0), so it
    /// says which socket became ready first. 0: nothing since.
    pub rx_at: u64,
    /// The same for what a writer waits for (room freed, connected, a
    /// failure).
    pub tx_at: u64,
    /// Bytes the program has taken from the receive ring (program writes).
    pub rx_head: u64,
    /// `WANT_*` bits (program writes).
    pub interest: u32,
    /// The thread asleep waiting to read this socket (or accept from it),
    /// 0 if none: in the low 8 bits the index of its waiter bell
    /// ([`Bell`](crate::Bell)) plus one, above them a count the thread
    /// bumps before every sleep. The engine rings that bell when it changes
    /// the slot — once per value of the word, so a thread still waking up
    /// is not rung again and again — and a socket's news wakes the thread
    /// that waits for it and no other (program writes; [`waiter_word`]).
    pub rx_waiter: u32,
    /// The same for a thread waiting to write (program writes).
    pub tx_waiter: u32,
    _pad1: [u8; 44],
}

const _: () = {
    assert!(size_of::<SockSlot>() == 128);
    assert!(offset_of!(SockSlot, rx_head) == 64);
    assert!(offset_of!(SockSlot, rx_at) == 48);
    assert!(offset_of!(SockSlot, tx_at) == 56);
    assert!(offset_of!(SockSlot, rx_waiter) == 76);
};

/// The header of one datagram in a UDP socket's receive ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpHeader {
    /// Payload bytes that follow.
    pub len: u32,
    /// Sender's port (host order).
    pub port: u16,
    /// Reserved.
    pub _pad: u16,
    /// Sender's address (network order).
    pub addr: u32,
    /// Reserved.
    pub _pad2: u32,
}

impl UdpHeader {
    /// Ring bytes a datagram of `len` payload bytes takes (header, payload,
    /// padding to 8).
    pub const fn footprint(len: u32) -> u64 {
        (size_of::<UdpHeader>() as u64 + len as u64).div_ceil(8) * 8
    }
}

/// Atomic access to one slot.
#[derive(Clone, Copy, Debug)]
pub struct SlotView<'r> {
    base: *mut SockSlot,
    /// This socket's word of the region's changed-sockets bitmap, and its
    /// bit in it.
    changed: *const AtomicU64,
    bit: u64,
    _r: PhantomData<&'r ()>,
}

macro_rules! word {
    ($get:ident, $set:ident, $field:ident, $ty:ty, $atomic:ty, $doc:literal) => {
        #[doc = concat!("Reads `", stringify!($field), "`: ", $doc)]
        pub fn $get(&self) -> $ty {
            self.at::<$atomic>(offset_of!(SockSlot, $field))
                .load(Ordering::Acquire)
        }
        #[doc = concat!("Writes `", stringify!($field), "`.")]
        pub fn $set(&self, v: $ty) {
            self.at::<$atomic>(offset_of!(SockSlot, $field))
                .store(v, Ordering::Release)
        }
    };
}

impl<'r> SlotView<'r> {
    /// # Safety
    /// `base` must point to a live, 128-aligned slot for `'r`, and
    /// `changed` to a live, 8-aligned word of the same region, only ever
    /// accessed atomically.
    pub(crate) unsafe fn new(
        base: *mut SockSlot,
        changed: *const AtomicU64,
        bit: u64,
    ) -> SlotView<'r> {
        SlotView {
            base,
            changed,
            bit,
            _r: PhantomData,
        }
    }

    /// Records that what a reader (`tx` false) or a writer (`tx` true)
    /// waits for arose at event count `at` (the engine), unless an earlier
    /// count is there still untaken: the slot keeps the first since the
    /// program last took it.
    pub fn stamp(&self, tx: bool, at: u64) {
        let w = if tx {
            self.at::<AtomicU64>(offset_of!(SockSlot, tx_at))
        } else {
            self.at::<AtomicU64>(offset_of!(SockSlot, rx_at))
        };
        let _ = w.compare_exchange(0, at, Ordering::Release, Ordering::Relaxed);
    }

    /// Takes the reader's and the writer's stamps ([`SlotView::stamp`]),
    /// leaving 0 (the program, after taking the socket's changed bit).
    pub fn take_stamps(&self) -> (u64, u64) {
        (
            self.at::<AtomicU64>(offset_of!(SockSlot, rx_at))
                .swap(0, Ordering::Acquire),
            self.at::<AtomicU64>(offset_of!(SockSlot, tx_at))
                .swap(0, Ordering::Acquire),
        )
    }

    /// Bumps `seq` and marks the socket changed in the region's bitmap
    /// (the engine, after writing whatever changed): a program's selector
    /// finds it without scanning every slot
    /// ([`Region::take_changed`](crate::Region::take_changed)).
    pub fn bump_seq(&self) {
        self.set_seq(self.seq().wrapping_add(1));
        // SAFETY: `new`'s contract: the word is live for `'r`, aligned and
        // only accessed atomically.
        unsafe { &*self.changed }.fetch_or(self.bit, Ordering::Release);
    }

    fn at<A>(&self, off: usize) -> &'r A {
        // SAFETY: `off` is a field offset of `SockSlot` (from `offset_of!`)
        // whose type matches `A` in size and alignment (u32/AtomicU32,
        // u64/AtomicU64); the slot lives for `'r` and its words are only
        // accessed atomically.
        unsafe { &*self.base.cast::<u8>().add(off).cast::<A>() }
    }

    word!(
        events,
        set_events,
        events,
        u32,
        AtomicU32,
        "readiness bits."
    );
    word!(
        error,
        set_error,
        error,
        u32,
        AtomicU32,
        "the failure's errno."
    );
    word!(
        rx_tail,
        set_rx_tail,
        rx_tail,
        u64,
        AtomicU64,
        "bytes received into the ring."
    );
    word!(
        tx_acked,
        set_tx_acked,
        tx_acked,
        u64,
        AtomicU64,
        "send-ring bytes free again."
    );
    word!(
        local,
        set_local,
        local,
        u64,
        AtomicU64,
        "the local address."
    );
    word!(
        remote,
        set_remote,
        remote,
        u64,
        AtomicU64,
        "the remote address."
    );
    word!(seq, set_seq, seq, u32, AtomicU32, "the event generation.");
    word!(
        rx_head,
        set_rx_head,
        rx_head,
        u64,
        AtomicU64,
        "bytes the program took."
    );
    word!(
        interest,
        set_interest,
        interest,
        u32,
        AtomicU32,
        "what the program waits for."
    );

    /// Moves `rx_head` from `old` to `new` if no one moved it since
    /// (compare-and-swap): how readers take bytes from the ring, so that the
    /// engine can take back what nobody took yet ([`EV_SHARED`]). On
    /// failure, the head as it is now.
    pub fn take_rx(&self, old: u64, new: u64) -> Result<(), u64> {
        self.at::<AtomicU64>(offset_of!(SockSlot, rx_head))
            .compare_exchange(old, new, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
    }

    /// The waiter word for reading (`tx == false`) or writing: for the
    /// program to claim (compare-and-swap from 0) and clear, and for the
    /// engine to read (SeqCst: a program that stores it and then looks at
    /// the slot, and an engine that changes the slot and then reads it,
    /// cannot both miss).
    pub fn waiter(&self, tx: bool) -> &'r AtomicU32 {
        if tx {
            self.at::<AtomicU32>(offset_of!(SockSlot, tx_waiter))
        } else {
            self.at::<AtomicU32>(offset_of!(SockSlot, rx_waiter))
        }
    }

    /// Clears every word (the engine, when it hands the slot out).
    pub fn reset(&self) {
        self.set_events(0);
        self.set_error(0);
        self.set_rx_tail(0);
        self.set_tx_acked(0);
        self.set_local(0);
        self.set_remote(0);
        self.set_rx_head(0);
        self.set_interest(0);
        self.waiter(false).store(0, Ordering::Release);
        self.waiter(true).store(0, Ordering::Release);
        let _ = self.take_stamps();
    }

    /// A pointer to the `seq` word (a futex word for one socket).
    pub fn seq_ptr(&self) -> *const AtomicU32 {
        core::ptr::from_ref(self.at::<AtomicU32>(offset_of!(SockSlot, seq)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprints_are_aligned() {
        assert_eq!(UdpHeader::footprint(0), 16);
        assert_eq!(UdpHeader::footprint(1), 24);
        assert_eq!(UdpHeader::footprint(8), 24);
        assert_eq!(
            UdpHeader::footprint(u32::MAX),
            (16 + u32::MAX as u64).div_ceil(8) * 8
        );
    }
}
