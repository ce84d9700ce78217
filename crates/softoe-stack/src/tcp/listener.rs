//! Passive open: a listening socket with a bounded SYN queue and accept
//! queue, and SYN cookies when the SYN queue is full.
//!
//! Sized as Linux sizes them (issue 34): the **accept queue** holds the
//! backlog asked for, capped at [`StackConfig::somaxconn`], plus one (Linux
//! tests `>` for full, so `listen(fd, 0)` still takes one connection); the
//! **SYN queue** holds as many handshakes as the backlog, capped at
//! [`StackConfig::max_syn_backlog`] (Linux ≥ 4.4 bounds it by the backlog
//! too; its `tcp_max_syn_backlog` bounds only listeners without cookies,
//! but a handshake here is a whole connection with its buffers, not a
//! request socket of a few hundred bytes).
//!
//! Each SYN that finds room in the SYN queue becomes a full connection in
//! SYN-RECEIVED (its buffers allocated then, as for any new socket). One
//! that finds it full — or the socket table full — gets a SYN cookie
//! (`syncookie`) and leaves nothing behind, unless cookies are off
//! ([`StackConfig::syncookies`]), when it is dropped. A SYN or a cookie's
//! ACK that finds the accept queue full is dropped, silently, as Linux
//! drops it: the client retransmits. When an embryo's handshake completes
//! and the accept queue is full, its final ACK is ignored, so the peer
//! retransmits and the connection waits in SYN-RECEIVED, as on Linux.
//!
//! An embryo holds its place for [`TcpConfig::synack_retries`] SYN-ACK
//! retransmissions (Linux's 5: 63 s). When the queue is more than half
//! full, old embryos (whose SYN-ACK was already resent) get fewer, down to
//! two (7 s), the fewer the young ones (Linux's `reqsk_timer_handler`:
//! "abort old ones without pity, if old ones are about to clog our
//! table"). Closing the listener resets everything not yet accepted.
//!
//! **Reuseport groups.** Listeners that all set `SO_REUSEPORT` (and have
//! one owner: the engine names the program's user, as Linux compares the
//! sockets' uids) share an address and port; each new connection — a SYN,
//! or a SYN cookie's ACK — goes to the member a keyed hash of its
//! four-tuple picks ([`GroupHash`], keyed by the stack's secret: Linux's
//! `inet_ehashfn` under a boot-time random key), so while the group is
//! unchanged a four-tuple always reaches the same member, and a cookie's
//! ACK the member that sent the cookie. Whether an ACK may carry a cookie
//! is asked of the whole group (Linux keeps `synq_overflow_ts` per group),
//! so one that arrives after its member left still finds one. A member
//! that closes resets what it had not accepted, as Linux does with
//! `net.ipv4.tcp_migrate_req` at its default (off): the others go on.
//!
//! [`StackConfig::somaxconn`]: crate::StackConfig::somaxconn
//! [`StackConfig::max_syn_backlog`]: crate::StackConfig::max_syn_backlog
//! [`StackConfig::syncookies`]: crate::StackConfig::syncookies
//! [`TcpConfig::synack_retries`]: crate::TcpConfig::synack_retries

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::hash::Hasher;

use siphasher::sip::SipHasher24;

use super::Endpoint;
use super::syncookie;
use crate::config::TcpConfig;
use crate::socket::{Events, SocketHandle};
use crate::time::Instant;

/// The hash that picks a reuseport group's member for a four-tuple:
/// SipHash-2-4 under a key derived from the stack's secret (its own, not
/// the ISN generator's or the cookies').
#[derive(Clone)]
pub(crate) struct GroupHash {
    key: [u8; 16],
}

impl core::fmt::Debug for GroupHash {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print the key.
        f.debug_struct("GroupHash").finish_non_exhaustive()
    }
}

impl GroupHash {
    pub(crate) fn new(secret: [u8; 16]) -> GroupHash {
        let mut key = [0u8; 16];
        for (half, chunk) in key.chunks_mut(8).enumerate() {
            let mut h = SipHasher24::new_with_key(&secret);
            h.write(b"softoe reuseport ");
            h.write(&[half as u8]);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
        GroupHash { key }
    }

    /// The hash of a connection from `remote` to `local`.
    pub(crate) fn of(&self, local: Endpoint, remote: Endpoint) -> u32 {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(local.addr.as_bytes());
        h.write(&local.port.to_be_bytes());
        h.write(remote.addr.as_bytes());
        h.write(&remote.port.to_be_bytes());
        h.finish() as u32
    }
}

/// A listening TCP socket.
#[derive(Debug)]
pub(crate) struct TcpListener {
    /// Local address (may be unspecified: any of ours) and port.
    pub(crate) local: Endpoint,
    /// It set `SO_REUSEPORT` (with this owner): it may share its address
    /// (see [`ListenGroup`](crate::socket::ListenGroup)).
    pub(crate) reuseport: Option<u32>,
    /// Settings for accepted connections.
    pub(crate) cfg: TcpConfig,
    /// The backlog in force: at most one more than this waits for
    /// `accept`.
    pub(crate) backlog: usize,
    /// Most connections in SYN-RECEIVED.
    pub(crate) syn_backlog: usize,
    /// Connections in SYN-RECEIVED (slot indices).
    pub(crate) embryos: Vec<usize>,
    /// How many of them have sent only their first SYN-ACK.
    pub(crate) young: usize,
    /// Established connections waiting for `accept`.
    pub(crate) accept_queue: VecDeque<SocketHandle>,
    pub(crate) events: Events,
    /// SYNs dropped: the SYN queue full without cookies, or the accept
    /// queue full.
    pub(crate) syn_drops: u64,
    /// SYN cookies sent.
    pub(crate) cookies_sent: u64,
    /// When the last cookie went: ACKs are checked for one until
    /// [`syncookie::VALID`] after it.
    pub(crate) last_cookie: Option<Instant>,
}

impl TcpListener {
    /// A listener asking for `backlog`, capped at `somaxconn`, with a SYN
    /// queue of at most `max_syn_backlog`.
    pub(crate) fn new(
        local: Endpoint,
        reuseport: Option<u32>,
        cfg: TcpConfig,
        backlog: usize,
        somaxconn: usize,
        max_syn_backlog: usize,
    ) -> TcpListener {
        let backlog = backlog.min(somaxconn).min(65_535);
        let syn_backlog = backlog.min(max_syn_backlog);
        TcpListener {
            local,
            reuseport,
            cfg,
            backlog,
            syn_backlog,
            embryos: Vec::with_capacity(syn_backlog),
            young: 0,
            accept_queue: VecDeque::with_capacity(backlog.saturating_add(1)),
            events: Events::empty(),
            syn_drops: 0,
            cookies_sent: 0,
            last_cookie: None,
        }
    }

    /// Room for one more connection in SYN-RECEIVED.
    pub(crate) fn syn_room(&self) -> bool {
        self.embryos.len() < self.syn_backlog
    }

    /// Room in the accept queue (Linux's `!sk_acceptq_is_full`: full only
    /// past the backlog).
    pub(crate) fn accept_room(&self) -> bool {
        self.accept_queue.len() <= self.backlog
    }

    /// Whether an ACK for no connection may carry one of our cookies.
    pub(crate) fn cookies_lately(&self, now: Instant) -> bool {
        self.last_cookie
            .is_some_and(|t| now.saturating_duration_since(t) < syncookie::VALID)
    }

    /// An embryo left the SYN queue (`young`: it had not yet resent its
    /// SYN-ACK).
    pub(crate) fn forget_embryo(&mut self, idx: usize, young: bool) {
        if let Some(pos) = self.embryos.iter().position(|&i| i == idx) {
            self.embryos.swap_remove(pos);
            if young {
                self.young = self.young.saturating_sub(1);
            }
        }
    }

    /// SYN-ACK retransmissions an embryo whose timer fired gets in all
    /// (Linux's `reqsk_timer_handler`): `retries` while the queue is at
    /// most half full (of `max(8, syn_backlog)`), else one fewer for each
    /// doubling by which the queue outnumbers twice its young embryos,
    /// down to 2.
    pub(crate) fn synack_limit(&self, retries: u32) -> u32 {
        let qlen = self.embryos.len();
        let mut limit = retries;
        if qlen.saturating_mul(2) > self.syn_backlog.max(8) {
            let mut young = self.young.saturating_mul(2);
            while limit > 2 {
                if qlen < young {
                    break;
                }
                limit -= 1;
                young = young.saturating_mul(2);
            }
        }
        limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(backlog: usize) -> TcpListener {
        TcpListener::new(
            Endpoint::default(),
            None,
            TcpConfig::default(),
            backlog,
            4096,
            1024,
        )
    }

    #[test]
    fn a_crowded_queue_of_old_embryos_gives_them_fewer_retries() {
        let mut l = listener(16);
        l.embryos = (0..8).collect();
        l.young = 0;
        assert_eq!(l.synack_limit(5), 5, "half full: no pressure");
        l.embryos = (0..16).collect();
        assert_eq!(l.synack_limit(5), 2, "full of old ones");
        l.young = 16;
        assert_eq!(l.synack_limit(5), 5, "full of young ones");
        l.young = 8;
        assert_eq!(l.synack_limit(5), 4);
        l.young = 4;
        assert_eq!(l.synack_limit(5), 3);
        assert_eq!(l.synack_limit(1), 1, "never more than asked");
    }

    #[test]
    fn queues_are_sized_as_linux_sizes_them() {
        let l = listener(0);
        assert_eq!((l.backlog, l.syn_backlog), (0, 0));
        assert!(
            l.accept_room() && !l.syn_room(),
            "backlog 0: one to accept, all SYNs cookies"
        );
        let l = listener(1 << 20);
        assert_eq!((l.backlog, l.syn_backlog), (4096, 1024));
    }
}
