//! Attaching: the two messages on the engine's Unix socket.
//!
//! A program connects to the engine's `SOCK_SEQPACKET` socket and sends a
//! [`Hello`] with the sizes it wants; the engine answers with a [`Welcome`]
//! and, in the same message (`SCM_RIGHTS`), three descriptors: the region's
//! memfd (sealed against resizing), the engine's doorbell (an eventfd the
//! program writes when the engine sleeps) and the program's doorbell (an
//! eventfd the engine writes when the program waits). The connection then
//! stays open and carries [`Bell`] messages (a waiting thread's own
//! doorbell); when every process holding it has gone, the engine sees it
//! close and ends the session.

/// The first word of both messages: `b"softoeAT"` little-endian.
pub const ATTACH_MAGIC: u64 = 0x5441_656f_7466_6f73;

/// The first word of the bell messages: `b"softoeBL"` little-endian.
pub const BELL_MAGIC: u64 = 0x4c42_656f_7466_6f73;

/// Most waiter bells a session may register (bits of
/// [`RegionHeader::bells_armed`](crate::RegionHeader::bells_armed)).
pub const MAX_BELLS: u32 = 64;

/// What a [`Bell`] message asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BellOp {
    /// Program → engine, with one eventfd (`SCM_RIGHTS`): register it as a
    /// waiter's doorbell. The engine answers with a `Bell` of this op whose
    /// `index` is the bit to arm, or whose `status` is a negated errno.
    Add = 1,
    /// Program → engine: forget bell `index` (no answer).
    Remove = 2,
    /// Program → engine, with one descriptor (`SCM_RIGHTS`): watch
    /// connection or listener `index` across `fork`, `exec` and
    /// `SCM_RIGHTS`. The descriptor is one end of a socket pair whose
    /// other end the program now keeps under the socket's number (bound
    /// to an abstract name starting with [`WATCH_NAME`]); the kernel
    /// counts that end's copies in every process, and when the last closes
    /// the engine sees a hang-up. Until then a `CLOSE` only detaches the
    /// socket from its session (it lives on for another process to take
    /// with [`Opcode::Adopt`](crate::Opcode::Adopt)); after it the socket
    /// closes as at a last close. Answered like `Add` (`index` echoed;
    /// `status` 0 or a negated errno).
    Watch = 3,
    /// Program → engine, with one descriptor (`SCM_RIGHTS`): the program
    /// holds this descriptor (inherited across `fork` or `exec`, or
    /// received over a Unix socket), and its name says it is a watched
    /// softoe socket's. The engine checks that it is the far end of one of
    /// its watches (a byte sent on the engine's end must come out of it),
    /// and answers with a grant: `index` is the number this session names
    /// in its `ADOPT`, `extra[0]` is 1 for a listener, 0 for a connection;
    /// or `status` is a negated errno (`ENOENT`: no watch has that end).
    /// Holding the descriptor is the only authority over a socket of
    /// another session: nothing a process can read (another process's
    /// memory or environment) lets it adopt one.
    Claim = 4,
}

/// The start of the abstract Unix-socket name the program's end of a
/// watch is bound to ([`BellOp::Watch`]): `"\0softoe-watch:"`, then a
/// digit of flags (1: an `AF_INET6` socket, 2: a listener) and a `:` and
/// whatever makes it unique. A process that receives a descriptor over a
/// Unix socket recognises a softoe socket by it, and claims it
/// ([`BellOp::Claim`]); the engine checks the claim itself.
pub const WATCH_NAME: &[u8] = b"\0softoe-watch:";

/// A waiter's own doorbell, registered after attaching.
///
/// The session's doorbell can wake only one sleeper safely: a thread that
/// drains it may swallow the ring another thread needed. A thread that
/// waits inside a kernel call of its own (the shim's `epoll_wait`, `poll`,
/// `select`) registers a bell, arms its bit in `bells_armed` before its
/// last look at the sockets, and drains only its own bell.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bell {
    /// [`BELL_MAGIC`].
    pub magic: u64,
    /// A [`BellOp`] as `u32`.
    pub op: u32,
    /// The bell's index (0..[`MAX_BELLS`]).
    pub index: u32,
    /// 0, or a negated errno (answers only).
    pub status: i32,
    /// What an answer carries besides (a claim's: [`BellOp::Claim`]); 0
    /// otherwise.
    pub extra: [u32; 3],
}

const _: () = assert!(size_of::<Bell>() == 32);

impl Bell {
    /// The bytes of the message.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&self.magic.to_ne_bytes());
        b[8..12].copy_from_slice(&self.op.to_ne_bytes());
        b[12..16].copy_from_slice(&self.index.to_ne_bytes());
        b[16..20].copy_from_slice(&self.status.to_ne_bytes());
        for (i, x) in self.extra.iter().enumerate() {
            b[20 + 4 * i..24 + 4 * i].copy_from_slice(&x.to_ne_bytes());
        }
        b
    }

    /// The message in `b`, if it is one.
    pub fn from_bytes(b: &[u8]) -> Option<Bell> {
        let b: &[u8; 32] = b.try_into().ok()?;
        let m = Bell {
            magic: u64::from_ne_bytes(b[0..8].try_into().ok()?),
            op: u32::from_ne_bytes(b[8..12].try_into().ok()?),
            index: u32::from_ne_bytes(b[12..16].try_into().ok()?),
            status: i32::from_ne_bytes(b[16..20].try_into().ok()?),
            extra: [
                u32::from_ne_bytes(b[20..24].try_into().ok()?),
                u32::from_ne_bytes(b[24..28].try_into().ok()?),
                u32::from_ne_bytes(b[28..32].try_into().ok()?),
            ],
        };
        (m.magic == BELL_MAGIC).then_some(m)
    }

    /// Its operation, if known.
    pub fn op(&self) -> Option<BellOp> {
        match self.op {
            1 => Some(BellOp::Add),
            2 => Some(BellOp::Remove),
            3 => Some(BellOp::Watch),
            4 => Some(BellOp::Claim),
            _ => None,
        }
    }
}

/// Program → engine: what it asks for. The engine clamps each size to its
/// limits and rounds rings up to powers of two.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// [`ATTACH_MAGIC`].
    pub magic: u64,
    /// [`VERSION`](crate::VERSION).
    pub version: u32,
    /// Command ring entries wanted.
    pub cmd_entries: u32,
    /// Completion ring entries wanted.
    pub cmp_entries: u32,
    /// Socket slots wanted.
    pub socks: u32,
    /// Data-area bytes wanted.
    pub data_len: u64,
}

/// Engine → program, with the three descriptors.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Welcome {
    /// [`ATTACH_MAGIC`].
    pub magic: u64,
    /// The engine's [`VERSION`](crate::VERSION).
    pub version: u32,
    /// 0, or a negated errno (then no descriptors follow).
    pub status: i32,
    /// The session number.
    pub session: u32,
    /// 0, or on a refusal the limit that refused the attach
    /// ([`LIMIT_SESSIONS`], [`LIMIT_USER_SESSIONS`], [`LIMIT_USER_MEMORY`]);
    /// then `region_len` is that limit's value.
    pub limit: u32,
    /// Bytes to map from the memfd.
    pub region_len: u64,
}

/// [`Welcome::limit`]: the engine holds as many sessions as it may.
pub const LIMIT_SESSIONS: u32 = 1;
/// [`Welcome::limit`]: the program's user holds as many sessions as one
/// user may.
pub const LIMIT_USER_SESSIONS: u32 = 2;
/// [`Welcome::limit`]: the program's user's sessions hold as much shared
/// memory as one user may (the new session's region would pass it).
pub const LIMIT_USER_MEMORY: u32 = 3;

const _: () = {
    assert!(size_of::<Hello>() == 32);
    assert!(size_of::<Welcome>() == 32);
};

impl Hello {
    /// The bytes of the message.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&self.magic.to_ne_bytes());
        b[8..12].copy_from_slice(&self.version.to_ne_bytes());
        b[12..16].copy_from_slice(&self.cmd_entries.to_ne_bytes());
        b[16..20].copy_from_slice(&self.cmp_entries.to_ne_bytes());
        b[20..24].copy_from_slice(&self.socks.to_ne_bytes());
        b[24..32].copy_from_slice(&self.data_len.to_ne_bytes());
        b
    }

    /// The message in `b`, if it is one.
    pub fn from_bytes(b: &[u8]) -> Option<Hello> {
        let b: &[u8; 32] = b.try_into().ok()?;
        let h = Hello {
            magic: u64::from_ne_bytes(b[0..8].try_into().ok()?),
            version: u32::from_ne_bytes(b[8..12].try_into().ok()?),
            cmd_entries: u32::from_ne_bytes(b[12..16].try_into().ok()?),
            cmp_entries: u32::from_ne_bytes(b[16..20].try_into().ok()?),
            socks: u32::from_ne_bytes(b[20..24].try_into().ok()?),
            data_len: u64::from_ne_bytes(b[24..32].try_into().ok()?),
        };
        (h.magic == ATTACH_MAGIC).then_some(h)
    }
}

impl Welcome {
    /// The bytes of the message.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&self.magic.to_ne_bytes());
        b[8..12].copy_from_slice(&self.version.to_ne_bytes());
        b[12..16].copy_from_slice(&self.status.to_ne_bytes());
        b[16..20].copy_from_slice(&self.session.to_ne_bytes());
        b[20..24].copy_from_slice(&self.limit.to_ne_bytes());
        b[24..32].copy_from_slice(&self.region_len.to_ne_bytes());
        b
    }

    /// The message in `b`, if it is one.
    pub fn from_bytes(b: &[u8]) -> Option<Welcome> {
        let b: &[u8; 32] = b.try_into().ok()?;
        let w = Welcome {
            magic: u64::from_ne_bytes(b[0..8].try_into().ok()?),
            version: u32::from_ne_bytes(b[8..12].try_into().ok()?),
            status: i32::from_ne_bytes(b[12..16].try_into().ok()?),
            session: u32::from_ne_bytes(b[16..20].try_into().ok()?),
            limit: u32::from_ne_bytes(b[20..24].try_into().ok()?),
            region_len: u64::from_ne_bytes(b[24..32].try_into().ok()?),
        };
        (w.magic == ATTACH_MAGIC).then_some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let h = Hello {
            magic: ATTACH_MAGIC,
            version: 1,
            cmd_entries: 256,
            cmp_entries: 512,
            socks: 1024,
            data_len: 1 << 24,
        };
        assert_eq!(Hello::from_bytes(&h.to_bytes()), Some(h));
        assert_eq!(Hello::from_bytes(&h.to_bytes()[..31]), None);
        let w = Welcome {
            magic: ATTACH_MAGIC,
            version: 1,
            status: -12,
            session: 3,
            limit: LIMIT_USER_MEMORY,
            region_len: 1 << 20,
        };
        assert_eq!(Welcome::from_bytes(&w.to_bytes()), Some(w));
        assert_eq!(Welcome::from_bytes(&[0; 32]), None);
        let b = Bell {
            magic: BELL_MAGIC,
            op: BellOp::Add as u32,
            index: 63,
            status: -28,
            extra: [1, 2, 3],
        };
        assert_eq!(Bell::from_bytes(&b.to_bytes()), Some(b));
        assert_eq!(b.op(), Some(BellOp::Add));
        assert_eq!(Bell::from_bytes(&w.to_bytes()), None, "not a bell");
        let odd = Bell { op: 9, ..b };
        assert_eq!(Bell::from_bytes(&odd.to_bytes()).and_then(|m| m.op()), None);
    }
}
