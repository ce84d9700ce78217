//! The socket table: a slab of sockets with generation-checked handles, hash
//! indices for demultiplexing, and the queues that let the stack touch only
//! the sockets that need it.
//!
//! - Lookup is by hash (four-tuple for connections, address and port for
//!   listeners and UDP), never by walking a list: the engine carries thousands
//!   of connections.
//! - An address and port may have several listeners when every one of them
//!   asked for it (`SO_REUSEPORT`, by the same owner): a [`ListenGroup`],
//!   whose members share the new connections by a keyed hash of each
//!   four-tuple, as Linux's `reuseport_select_sock` shares them.
//! - A timer heap holds each socket's next deadline (lazily invalidated: an
//!   entry that no longer matches the socket's armed deadline is skipped).
//! - A ready queue holds sockets with work to do now (data queued by the
//!   application, an ACK owed).
//! - An event queue tells the runtime which sockets became readable,
//!   writable, acknowledged data, connected or closed.

pub(crate) mod udp;

use alloc::boxed::Box;
use alloc::collections::{BinaryHeap, VecDeque};
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::fmt;

use hashbrown::HashMap;
use softoe_wire::Ipv4Address;

use crate::config::TcpConfig;
use crate::tcp::Endpoint;
use crate::tcp::listener::TcpListener;
use crate::tcp::socket::{PathCaps, Storage, TcpSocket};
use crate::time::Instant;
use udp::UdpSocket;

/// A reference to a socket. Stale handles (to a freed socket whose slot was
/// reused) are detected by a generation count and rejected.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SocketHandle {
    index: u32,
    generation: u32,
}

impl SocketHandle {
    /// The slot index (stable for the socket's life; reused after it).
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// A handle as a single `u64` (for carrying through an ABI).
    pub fn to_bits(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The handle `to_bits` produced. Any value is accepted; invalid ones are
    /// rejected when used.
    pub fn from_bits(bits: u64) -> SocketHandle {
        SocketHandle {
            index: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

impl fmt::Debug for SocketHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

impl fmt::Display for SocketHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What happened to a socket (a set of flags).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Events(u8);

impl Events {
    /// Data (or end of stream, or a connection to accept) can be read.
    pub const READABLE: Events = Events(1);
    /// Send-buffer space is free.
    pub const WRITABLE: Events = Events(2);
    /// The peer acknowledged data: payload references up to
    /// [`Stack::tcp_acked`](crate::Stack::tcp_acked) are released.
    pub const ACKED: Events = Events(4);
    /// The handshake completed.
    pub const CONNECTED: Events = Events(8);
    /// The connection closed (normally or by error).
    pub const CLOSED: Events = Events(16);
    /// The socket is gone: the handle is dead and every payload reference
    /// the socket held is released.
    pub const RELEASED: Events = Events(32);

    /// No flags.
    pub const fn empty() -> Events {
        Events(0)
    }
    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Events) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether any flag of `other` is set.
    pub const fn intersects(self, other: Events) -> bool {
        self.0 & other.0 != 0
    }
    /// Sets the flags of `other`.
    pub fn insert(&mut self, other: Events) {
        self.0 |= other.0;
    }
    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl core::ops::BitOr for Events {
    type Output = Events;
    fn bitor(self, rhs: Events) -> Events {
        Events(self.0 | rhs.0)
    }
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Events::READABLE, "READABLE"),
            (Events::WRITABLE, "WRITABLE"),
            (Events::ACKED, "ACKED"),
            (Events::CONNECTED, "CONNECTED"),
            (Events::CLOSED, "CLOSED"),
            (Events::RELEASED, "RELEASED"),
        ];
        let mut first = true;
        for (e, n) in names {
            if self.contains(e) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("(none)")?;
        }
        Ok(())
    }
}

/// A socket of any kind.
#[derive(Debug)]
pub(crate) enum Socket {
    Tcp(Box<TcpSocket>),
    Listener(Box<TcpListener>),
    Udp(Box<UdpSocket>),
}

impl Socket {
    pub(crate) fn events_mut(&mut self) -> &mut Events {
        match self {
            Socket::Tcp(s) => &mut s.events,
            Socket::Listener(l) => &mut l.events,
            Socket::Udp(u) => &mut u.events,
        }
    }

    /// Its `SO_PRIORITY`.
    pub(crate) fn priority(&self) -> u8 {
        match self {
            Socket::Tcp(s) => s.ip_fields().priority,
            Socket::Listener(l) => l.cfg.priority,
            Socket::Udp(u) => u.ip.priority,
        }
    }

    pub(crate) fn poll_at(&self) -> Option<Instant> {
        match self {
            Socket::Tcp(s) => s.poll_at(),
            Socket::Listener(_) => None,
            Socket::Udp(u) => (!u.tx.is_empty()).then_some(Instant::ZERO),
        }
    }
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    socket: Option<Socket>,
    /// The deadline this slot has in the timer heap (`MAX`: none).
    armed: Instant,
    in_ready: bool,
    in_events: bool,
}

/// The `SO_PRIORITY` from which a socket with work goes to the head of
/// the ready queue.
pub(crate) const URGENT_PRIORITY: u8 = 6;

/// Four-tuple key of a connection: (local, remote).
pub(crate) type ConnKey = (Endpoint, Endpoint);

type Map<K> = HashMap<K, usize, foldhash::fast::FixedState>;

/// The listeners on one address and port: one, or several that all set
/// `SO_REUSEPORT` (Linux's `sock_reuseport`).
#[derive(Debug)]
pub(crate) struct ListenGroup {
    /// Slot indices. A member that leaves gives its place to the last
    /// one (Linux's `reuseport_detach_sock`), so a four-tuple keeps its
    /// member unless that member left or was the last.
    pub(crate) members: Vec<usize>,
    /// `Some(owner)`: every member set `SO_REUSEPORT`, and a listener of
    /// that owner (the engine says the program's user) that sets it too
    /// may join. `None`: the address is this listener's alone.
    pub(crate) reuseport: Option<u32>,
}

impl ListenGroup {
    /// The member for a four-tuple whose keyed hash is `hash`: Linux's
    /// `reciprocal_scale`, the hash's share of the member count.
    pub(crate) fn pick(&self, hash: impl FnOnce() -> u32) -> Option<usize> {
        match self.members.len() {
            0 => None,
            1 => self.members.first().copied(),
            n => {
                let i = (u64::from(hash()) * n as u64) >> 32;
                self.members.get(i as usize).copied()
            }
        }
    }

    /// Whether a listener asking for `reuseport` may share this group's
    /// address.
    pub(crate) fn admits(&self, reuseport: Option<u32>) -> bool {
        reuseport.is_some() && self.reuseport == reuseport
    }
}

/// The table.
#[derive(Debug)]
pub(crate) struct SocketSet {
    slots: Vec<Slot>,
    free: Vec<usize>,
    live: usize,
    max: usize,
    pub(crate) conns: Map<ConnKey>,
    pub(crate) listeners: HashMap<Endpoint, ListenGroup, foldhash::fast::FixedState>,
    pub(crate) udp: Map<Endpoint>,
    timers: BinaryHeap<Reverse<(Instant, usize, u32)>>,
    ready: VecDeque<usize>,
    events: VecDeque<usize>,
    released: VecDeque<SocketHandle>,
    spares: Spares,
}

/// Closed connections' allocations, kept for the next ones to reuse.
///
/// A connection's receive ring is the receive buffer's size (4 MiB by
/// default): the allocator maps it fresh for every connection and unmaps
/// it at the close, and under a new connection per request (a web
/// server's load) the two system calls, the page faults and the zeroing
/// were a fifth of the engine's time, and `free`'s merging of the
/// connection's other blocks (send queue, ranges, transmit log, the
/// control block itself) a tenth more
/// (docs/journal/2026-11-27-unmodified-servers-night.md, "Unmodified
/// servers after the receive rings are kept"). A few kept sockets make
/// opening a connection allocate nothing; a ring's old bytes are never
/// read (a ring reads only what is written after it is taken).
///
/// The control blocks and the storage are kept apart: a connection gives
/// its storage up when it enters TIME-WAIT (`TcpSocket::shed_storage`),
/// and its control block only a minute later, when TIME-WAIT ends. So a
/// server that closes first, whose connections all pass through
/// TIME-WAIT, opens the next ones in the storage of those that just
/// closed, as it did when that storage came back with the socket.
#[derive(Debug)]
struct Spares {
    // Boxed on purpose: the box is the control block a connection lives
    // in (`Socket::Tcp`), kept with its allocation. Kept without storage.
    #[allow(clippy::vec_box)]
    socks: Vec<Box<TcpSocket>>,
    stores: Vec<Storage>,
    /// Bytes of the receive rings in `stores`.
    bytes: usize,
    /// At most this many kept control blocks, and as many storages
    /// (`StackConfig::keep_closed`)…
    max: usize,
    /// …whose receive rings hold at most this many bytes
    /// (`StackConfig::keep_closed_bytes`).
    max_bytes: usize,
}

impl Spares {
    fn new(max: usize, max_bytes: usize) -> Spares {
        // No bytes for rings keeps nothing at all (`StackConfig`: "0 for
        // either keeps none").
        let max = if max_bytes == 0 { 0 } else { max };
        Spares {
            socks: Vec::with_capacity(max),
            stores: Vec::with_capacity(max),
            bytes: 0,
            max,
            max_bytes,
        }
    }

    /// A kept storage, one whose ring is `rx` bytes if there is one (else
    /// empty: the socket allocates its own).
    fn take_storage(&mut self, rx: usize) -> Storage {
        let Some(i) = self
            .stores
            .iter()
            .rposition(|s| s.rx_len() == rx)
            .or_else(|| self.stores.len().checked_sub(1))
        else {
            return Storage::default();
        };
        let st = self.stores.swap_remove(i);
        self.bytes -= st.rx_len();
        st
    }

    /// Keeps `st` if there is room (the list never grows past its
    /// capacity, so keeping never allocates); drops it otherwise.
    fn keep_storage(&mut self, st: Storage) {
        let n = st.rx_len();
        if st.bytes() > 0 && self.stores.len() < self.max && self.bytes + n <= self.max_bytes {
            self.bytes += n;
            self.stores.push(st);
        }
    }

    /// Keeps `s`'s storage and its control block, each if there is room.
    fn keep(&mut self, mut s: Box<TcpSocket>) {
        self.keep_storage(s.take_storage());
        if self.socks.len() < self.max {
            self.socks.push(s);
        }
    }
}

impl SocketSet {
    /// A table of at most `max` sockets that keeps up to `keep` closed
    /// connections with `keep_bytes` of receive rings between them.
    pub(crate) fn new(max: usize, seed: u64, keep: usize, keep_bytes: usize) -> SocketSet {
        let hasher = |k: u64| foldhash::fast::FixedState::with_seed(seed ^ k);
        SocketSet {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            max: max.max(1),
            conns: HashMap::with_hasher(hasher(1)),
            listeners: HashMap::with_hasher(hasher(2)),
            udp: HashMap::with_hasher(hasher(3)),
            timers: BinaryHeap::new(),
            ready: VecDeque::new(),
            events: VecDeque::new(),
            released: VecDeque::new(),
            spares: Spares::new(keep, keep_bytes),
        }
    }

    /// A closed socket for a new connection, in a closed one's
    /// allocations if one is kept.
    pub(crate) fn new_tcp(
        &mut self,
        cfg: TcpConfig,
        path: PathCaps,
        now: Instant,
    ) -> Box<TcpSocket> {
        let st = self.spares.take_storage(cfg.rx_buffer);
        match self.spares.socks.pop() {
            Some(mut s) => {
                *s = TcpSocket::new(cfg, path, now, st);
                s
            }
            None => Box::new(TcpSocket::new(cfg, path, now, st)),
        }
    }

    /// Keeps the storage a connection gave up (entering TIME-WAIT) for the
    /// next, if there is room; frees it otherwise.
    pub(crate) fn keep_storage(&mut self, st: Storage) {
        self.spares.keep_storage(st);
    }

    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Control blocks kept for reuse, storages kept, and their bytes.
    pub(crate) fn kept(&self) -> (usize, usize, usize) {
        let bytes = self.spares.stores.iter().map(Storage::bytes).sum();
        (self.spares.socks.len(), self.spares.stores.len(), bytes)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.live >= self.max
    }

    /// Adds a socket; `None` when the table is full.
    pub(crate) fn insert(&mut self, socket: Socket) -> Option<SocketHandle> {
        if self.is_full() {
            return None;
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    socket: None,
                    armed: Instant::MAX,
                    in_ready: false,
                    in_events: false,
                });
                self.slots.len() - 1
            }
        };
        let slot = self.slots.get_mut(index)?;
        slot.generation = slot.generation.wrapping_add(1);
        slot.socket = Some(socket);
        slot.armed = Instant::MAX;
        self.live += 1;
        // Size the queues for the sockets there are now, so that running
        // them never allocates (the timer heap is rebuilt before it passes
        // 4 × live + 64 entries).
        let heap = 4 * self.live + 65;
        self.timers.reserve(heap.saturating_sub(self.timers.len()));
        let n = self.live + 1;
        self.ready.reserve(n.saturating_sub(self.ready.len()));
        self.events.reserve(n.saturating_sub(self.events.len()));
        self.released.reserve(n.saturating_sub(self.released.len()));
        Some(SocketHandle {
            index: index as u32,
            generation: slot.generation,
        })
    }

    /// Removes a socket (the caller has already unlinked it from the maps).
    /// A `RELEASED` event is queued for its handle.
    pub(crate) fn remove(&mut self, index: usize) -> Option<Socket> {
        let slot = self.slots.get_mut(index)?;
        let socket = slot.socket.take()?;
        let handle = SocketHandle {
            index: index as u32,
            generation: slot.generation,
        };
        slot.armed = Instant::MAX;
        self.free.push(index);
        self.live -= 1;
        self.released.push_back(handle);
        self.settle_timers();
        Some(socket)
    }

    /// Removes a socket that nobody needs any more (as
    /// [`remove`](SocketSet::remove)), keeping a connection's allocations
    /// for the next.
    pub(crate) fn discard(&mut self, index: usize) {
        if let Some(Socket::Tcp(t)) = self.remove(index) {
            self.spares.keep(t);
        }
    }

    /// The slot index of `h`, if it is live.
    pub(crate) fn index_of(&self, h: SocketHandle) -> Option<usize> {
        let slot = self.slots.get(h.index as usize)?;
        (slot.generation == h.generation && slot.socket.is_some()).then_some(h.index as usize)
    }

    pub(crate) fn handle_of(&self, index: usize) -> Option<SocketHandle> {
        let slot = self.slots.get(index)?;
        slot.socket.as_ref()?;
        Some(SocketHandle {
            index: index as u32,
            generation: slot.generation,
        })
    }

    pub(crate) fn get(&self, index: usize) -> Option<&Socket> {
        self.slots.get(index)?.socket.as_ref()
    }

    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut Socket> {
        self.slots.get_mut(index)?.socket.as_mut()
    }

    pub(crate) fn tcp(&self, index: usize) -> Option<&TcpSocket> {
        match self.get(index)? {
            Socket::Tcp(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn tcp_mut(&mut self, index: usize) -> Option<&mut TcpSocket> {
        match self.get_mut(index)? {
            Socket::Tcp(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn listener_mut(&mut self, index: usize) -> Option<&mut TcpListener> {
        match self.get_mut(index)? {
            Socket::Listener(l) => Some(l),
            _ => None,
        }
    }

    pub(crate) fn udp_mut(&mut self, index: usize) -> Option<&mut UdpSocket> {
        match self.get_mut(index)? {
            Socket::Udp(u) => Some(u),
            _ => None,
        }
    }

    /// The listeners for a local endpoint: those on its exact address
    /// first, then those on the wildcard (the more specific wins, as in
    /// Linux's `__inet_lookup_listener`).
    pub(crate) fn find_group(&self, local: Endpoint) -> Option<&ListenGroup> {
        self.listeners.get(&local).or_else(|| {
            self.listeners
                .get(&Endpoint::new(Ipv4Address::UNSPECIFIED, local.port))
        })
    }

    /// Finds the listener for a local endpoint ([`find_group`]); in a
    /// reuseport group, the member `hash` (of the four-tuple) picks.
    ///
    /// [`find_group`]: SocketSet::find_group
    pub(crate) fn find_listener(
        &self,
        local: Endpoint,
        hash: impl FnOnce() -> u32,
    ) -> Option<usize> {
        self.find_group(local)?.pick(hash)
    }

    /// Whether a listener on `local` asking for `reuseport` would clash
    /// with one there is (Linux's `inet_csk_bind_conflict` among
    /// listeners): addresses overlap when they are equal or either is the
    /// wildcard, and overlapping listeners clash unless all set
    /// `SO_REUSEPORT` with the same owner. Returns the group it would
    /// join (same address), if any.
    pub(crate) fn listen_conflict(
        &self,
        local: Endpoint,
        reuseport: Option<u32>,
    ) -> Result<Option<&ListenGroup>, ()> {
        let same = self.listeners.get(&local);
        if same.is_some_and(|g| !g.admits(reuseport)) {
            return Err(());
        }
        let clash = |(e, g): (&Endpoint, &ListenGroup)| {
            e.port == local.port && *e != local && !g.admits(reuseport)
        };
        let other = if local.addr.is_unspecified() {
            // Any specific address on the port overlaps the wildcard.
            self.listeners.iter().any(clash)
        } else {
            let any = Endpoint::new(Ipv4Address::UNSPECIFIED, local.port);
            self.listeners.get_key_value(&any).is_some_and(clash)
        };
        if other {
            return Err(());
        }
        Ok(same)
    }

    /// Finds the UDP socket for a local endpoint.
    pub(crate) fn find_udp(&self, local: Endpoint) -> Option<usize> {
        self.udp
            .get(&local)
            .or_else(|| {
                self.udp
                    .get(&Endpoint::new(Ipv4Address::UNSPECIFIED, local.port))
            })
            .copied()
    }

    /// Whether a local port is used by any listener, UDP socket or connection
    /// of the given kind.
    pub(crate) fn port_in_use(&self, port: u16) -> bool {
        self.listeners.keys().any(|e| e.port == port)
    }

    /// After a socket changed: queue its events and (re)schedule its work.
    pub(crate) fn touch(&mut self, index: usize) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let Some(socket) = slot.socket.as_mut() else {
            return;
        };
        let has_events = !socket.events_mut().is_empty();
        let at = socket.poll_at();
        if has_events && !slot.in_events {
            slot.in_events = true;
            self.events.push_back(index);
        }
        match at {
            // Interactive traffic (`SO_PRIORITY` ≥ 6, Linux's
            // TC_PRIO_INTERACTIVE and up, the real-time channel's class)
            // is served ahead of bulk that was ready before it, as a
            // pfifo_fast qdisc's first band would send it.
            Some(t) if t == Instant::ZERO && !slot.in_ready => {
                slot.in_ready = true;
                if socket.priority() >= URGENT_PRIORITY {
                    self.ready.push_front(index);
                } else {
                    self.ready.push_back(index);
                }
            }
            Some(t) if t < slot.armed => {
                slot.armed = t;
                self.timers.push(Reverse((t, index, slot.generation)));
                if self.timers.len() > 4 * self.live + 64 {
                    self.rebuild_timers();
                }
            }
            _ => {}
        }
        self.settle_timers();
    }

    /// Makes the heap's earliest entry a deadline that some socket still
    /// has, so that [`next_deadline`](Self::next_deadline) — the runtime's
    /// sleep — is not cut short by a deadline that was cancelled or moved
    /// later (a delayed ACK that left with data, a retransmission timer
    /// whose data was acknowledged). Entries that no longer match their
    /// socket are dropped; a socket whose deadline moved later is re-armed
    /// at the one it has. Only the top is looked at, so this costs one peek
    /// when the top is live, and each entry is dropped at most once.
    ///
    /// Without it every connection woke the runtime once per deadline it
    /// had cancelled: after a burst of traffic on 10,000 connections, tens
    /// of thousands of wake-ups with nothing to do.
    fn settle_timers(&mut self) {
        while let Some(&Reverse((t, i, g))) = self.timers.peek() {
            let slot = self.slots.get_mut(i);
            let live = slot
                .as_ref()
                .is_some_and(|s| s.generation == g && s.socket.is_some() && s.armed == t);
            let Some(slot) = slot.filter(|_| live) else {
                self.timers.pop();
                continue;
            };
            let at = slot.socket.as_ref().and_then(Socket::poll_at);
            if at.is_some_and(|a| a <= t) {
                return;
            }
            self.timers.pop();
            slot.armed = Instant::MAX;
            if let Some(a) = at {
                slot.armed = a;
                self.timers.push(Reverse((a, i, g)));
            }
        }
    }

    /// Drops stale heap entries.
    fn rebuild_timers(&mut self) {
        let slots = &self.slots;
        self.timers.retain(|Reverse((t, i, g))| {
            slots
                .get(*i)
                .is_some_and(|s| s.generation == *g && s.socket.is_some() && s.armed == *t)
        });
    }

    /// The next socket with immediate work.
    pub(crate) fn pop_ready(&mut self) -> Option<usize> {
        while let Some(i) = self.ready.pop_front() {
            if let Some(slot) = self.slots.get_mut(i) {
                slot.in_ready = false;
                if slot.socket.is_some() {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Puts a socket back at the front of the ready queue (the port was busy).
    /// Queues a socket for service at the next poll (if it still exists).
    pub(crate) fn push_ready_back(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index)
            && slot.socket.is_some()
            && !slot.in_ready
        {
            slot.in_ready = true;
            self.ready.push_back(index);
        }
    }

    pub(crate) fn push_ready_front(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(index)
            && !slot.in_ready
        {
            slot.in_ready = true;
            self.ready.push_front(index);
        }
    }

    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The next socket whose deadline has passed.
    pub(crate) fn pop_expired(&mut self, now: Instant) -> Option<usize> {
        while let Some(Reverse((t, i, g))) = self.timers.peek().copied() {
            if t > now {
                // Stale entries popped below may have left one on top.
                self.settle_timers();
                return None;
            }
            self.timers.pop();
            let Some(slot) = self.slots.get_mut(i) else {
                continue;
            };
            if slot.generation != g || slot.socket.is_none() || slot.armed != t {
                continue;
            }
            slot.armed = Instant::MAX;
            return Some(i);
        }
        None
    }

    /// The earliest deadline in the heap: one a socket has, as
    /// `settle_timers` leaves the top after every change (a socket
    /// inserted since, whose slot held a stale entry, can still make it
    /// early: an early wake-up is harmless).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// The next event for the runtime.
    pub(crate) fn pop_event(&mut self) -> Option<(SocketHandle, Events)> {
        if let Some(h) = self.released.pop_front() {
            return Some((h, Events::RELEASED));
        }
        while let Some(i) = self.events.pop_front() {
            let Some(slot) = self.slots.get_mut(i) else {
                continue;
            };
            slot.in_events = false;
            let Some(socket) = slot.socket.as_mut() else {
                continue;
            };
            let ev = core::mem::take(socket.events_mut());
            if ev.is_empty() {
                continue;
            }
            return Some((
                SocketHandle {
                    index: i as u32,
                    generation: slot.generation,
                },
                ev,
            ));
        }
        None
    }

    /// Indices of every live socket, in slot order.
    pub(crate) fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.socket.is_some())
            .map(|(i, _)| i)
    }

    /// Slots in the table (live or free): indices below this may hold a
    /// socket.
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Marks every TCP socket ready (a next hop got resolved).
    pub(crate) fn wake_all_tcp(&mut self) {
        for i in 0..self.slots.len() {
            if matches!(
                self.slots.get(i).and_then(|s| s.socket.as_ref()),
                Some(Socket::Tcp(_))
            ) && let Some(slot) = self.slots.get_mut(i)
                && !slot.in_ready
            {
                slot.in_ready = true;
                self.ready.push_back(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceCaps;

    fn sock(rx: usize) -> Box<TcpSocket> {
        let cfg = TcpConfig {
            rx_buffer: rx,
            ..TcpConfig::default()
        };
        let path = PathCaps::from_device(&DeviceCaps::default());
        Box::new(TcpSocket::new(cfg, path, Instant::ZERO, Storage::default()))
    }

    #[test]
    fn closed_sockets_are_kept_up_to_their_count_and_bytes_and_taken_by_ring_size() {
        const KEEP: usize = 16;
        const BYTES: usize = 64 << 20;
        let mut s = Spares::new(KEEP, BYTES);
        for _ in 0..KEEP + 4 {
            s.keep(sock(8));
        }
        assert_eq!(s.socks.len(), KEEP, "no more than the count");
        assert_eq!(s.stores.len(), KEEP, "no more than the count");
        assert_eq!(s.bytes, KEEP * 8);
        assert!(
            s.socks.iter().all(|t| t.storage_bytes() == 0),
            "control blocks are kept without their storage"
        );
        s.stores.truncate(2);
        s.bytes = 16;
        s.keep(sock(32));
        // A ring of the size asked for is preferred; else any kept storage
        // (its ring is replaced).
        assert_eq!(s.take_storage(8).rx_len(), 8);
        assert_eq!(s.take_storage(64).rx_len(), 32);
        assert_eq!(s.take_storage(64).rx_len(), 8);
        assert_eq!(s.take_storage(8).bytes(), 0, "none left: an empty one");
        assert_eq!(s.bytes, 0);
        // Nothing past the byte budget.
        s.keep(sock(BYTES));
        s.keep(sock(1));
        assert_eq!((s.stores.len(), s.bytes), (1, BYTES));
        // Storage alone (a connection entering TIME-WAIT) is kept the
        // same way; none is kept of a socket that has none left.
        s.keep_storage(sock(1).take_storage());
        assert_eq!(s.stores.len(), 1, "past the byte budget");
        let _ = s.take_storage(BYTES);
        let mut t = sock(8);
        s.keep_storage(t.take_storage());
        s.keep_storage(t.take_storage());
        assert_eq!((s.stores.len(), s.bytes), (1, 8));
        // A table told to keep none keeps none.
        for (keep, bytes) in [(0, BYTES), (KEEP, 0)] {
            let mut none = Spares::new(keep, bytes);
            none.keep(sock(8));
            none.keep_storage(sock(8).take_storage());
            assert!(none.socks.is_empty() && none.stores.is_empty());
            assert_eq!(none.take_storage(8).bytes(), 0);
        }
    }

    #[test]
    fn a_kept_socket_opens_as_a_fresh_one() {
        let mut set = SocketSet::new(8, 1, 16, 64 << 20);
        let path = PathCaps::from_device(&DeviceCaps::default());
        let cfg = TcpConfig {
            rx_buffer: 4096,
            ..TcpConfig::default()
        };
        let mut old = sock(4096);
        assert!(old.rx.enqueue_slice(b"old bytes") > 0);
        set.spares.keep(old);
        let s = set.new_tcp(cfg, path, Instant::ZERO);
        assert!(set.spares.socks.is_empty(), "the kept one was taken");
        assert!(set.spares.stores.is_empty(), "and its storage");
        assert_eq!((s.rx.capacity(), s.rx.len()), (4096, 0));
        assert_eq!(s.tx.len(), 0);
        assert!(s.ooo.is_empty());
        assert_eq!(s.state, crate::tcp::State::Closed);
    }
}
