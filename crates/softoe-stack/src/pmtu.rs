//! Path-MTU discovery (RFC 1191), with RFC 5927's checks against forged
//! ICMP.
//!
//! Every TCP segment leaves with DF set; a router whose next hop is too
//! small for one drops it and answers with a destination unreachable,
//! fragmentation needed (type 3, code 4) carrying the next hop's MTU and
//! the segment's headers. [`on_frag_needed`] believes such a message only
//! if the quote names one of our connections (addresses and ports) and a
//! sequence number it has in flight (`SND.UNA ≤ SEQ < SND.MAX`; RFC 5927
//! §4.1, as Linux's `tcp_v4_err`), and only to lower the path MTU (RFC
//! 1191 §3: never raise it from ICMP). Then:
//!
//! - **the value**: the next-hop MTU; 0 (a router older than RFC 1191)
//!   means the largest plateau of RFC 1191 §7's table below the quoted
//!   datagram's length;
//! - **the floor**: a value below [`IpConfig::pmtu_min`] (552, Linux's
//!   `min_pmtu`) is taken as the floor, and segments to that destination go
//!   without DF from then on, as Linux does (its MTU "lock"): a forged
//!   message cannot shrink segments below 512 bytes of payload, and a real
//!   path narrower than the floor still works, by fragmentation at the
//!   router;
//! - **the cache**: the value is remembered per destination
//!   ([`PmtuCache`], at most [`IpConfig::pmtu_cache_entries`], allocated
//!   once with the stack), so new connections to it start with the smaller
//!   MSS (and announce it, as Linux's `advmss` follows the route's MTU);
//! - **ageing**: after [`IpConfig::pmtu_expires`] (10 minutes, Linux's
//!   `mtu_expires`) the entry goes and every connection to that
//!   destination grows back to the device's MTU; if the path is still
//!   narrow, the next large segment brings a new message (RFC 1191 §6.3);
//! - **the connections**: every connection to the destination re-derives
//!   its MSS, and what it has in flight that is now too large goes again at
//!   once (`tcp::mtu`).
//!
//! Packetization-layer PMTUD (RFC 4821, RFC 8899: probing with larger
//! segments, for paths that filter the ICMP) is not done, as Linux does not
//! do it by default (`tcp_mtu_probing` = 0): behind a true black hole a
//! connection's large segments are lost until it times out, on both.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{IpProtocol, Ipv4Address, TcpSeqNumber};

use crate::config::IpConfig;
use crate::socket::SocketSet;
use crate::stats::StackStats;
use crate::tcp::{Endpoint, State, seq};
use crate::time::Instant;

/// RFC 1191 §7's plateau table: the MTUs of common links, largest first.
pub(crate) const PLATEAUS: [usize; 11] = [
    65_535, 32_000, 17_914, 8_166, 4_352, 2_002, 1_492, 1_006, 508, 296, 68,
];

/// The largest plateau below `len` (a datagram of `len` bytes did not fit),
/// or 68, the smallest MTU there is.
pub(crate) fn plateau_below(len: usize) -> usize {
    PLATEAUS.iter().copied().find(|&p| p < len).unwrap_or(68)
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    dst: Ipv4Address,
    mtu: usize,
    until: Instant,
    /// The MTU was clamped to the floor: segments go without DF.
    locked: bool,
}

/// Learnt path MTUs, by destination.
#[derive(Debug)]
pub(crate) struct PmtuCache {
    entries: Vec<Entry>,
    cap: usize,
    expires: Duration,
    min: usize,
    /// Entries with `locked` set (so the DF test costs nothing without).
    locked: usize,
    next_expiry: Option<Instant>,
}

impl PmtuCache {
    pub(crate) fn new(cfg: &IpConfig) -> PmtuCache {
        let cap = cfg.pmtu_cache_entries;
        PmtuCache {
            entries: Vec::with_capacity(cap),
            cap,
            expires: cfg.pmtu_expires,
            min: cfg.pmtu_min.clamp(68, 65_535),
            locked: 0,
            next_expiry: None,
        }
    }

    /// The learnt path MTU towards `dst`, if one holds.
    pub(crate) fn mtu(&self, dst: Ipv4Address, now: Instant) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        self.entries
            .iter()
            .find(|e| e.dst == dst && e.until > now)
            .map(|e| e.mtu)
    }

    /// Whether segments to `dst` must leave without DF (its path is
    /// narrower than the floor).
    pub(crate) fn df_off(&self, dst: Ipv4Address) -> bool {
        self.locked > 0 && self.entries.iter().any(|e| e.locked && e.dst == dst)
    }

    /// When [`expire`] next has work.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.next_expiry
    }

    fn recompute(&mut self) {
        self.next_expiry = self.entries.iter().map(|e| e.until).min();
        self.locked = self.entries.iter().filter(|e| e.locked).count();
    }

    /// Remembers `mtu` for `dst` from `now` on.
    fn set(&mut self, dst: Ipv4Address, mtu: usize, locked: bool, now: Instant) {
        let e = Entry {
            dst,
            mtu,
            until: now + self.expires,
            locked,
        };
        if let Some(old) = self.entries.iter_mut().find(|x| x.dst == dst) {
            *old = e;
        } else if self.entries.len() < self.cap {
            self.entries.push(e);
        } else if let Some(old) = self.entries.iter_mut().min_by_key(|x| x.until) {
            // Full: the entry that would expire first makes way.
            *old = e;
        }
        self.recompute();
    }

    /// Takes out one entry that expired by `now`: its destination.
    fn take_expired(&mut self, now: Instant) -> Option<Ipv4Address> {
        if self.next_expiry.is_none_or(|t| t > now) {
            return None;
        }
        let i = self.entries.iter().position(|e| e.until <= now)?;
        let e = self.entries.swap_remove(i);
        self.recompute();
        Some(e.dst)
    }
}

/// What a quote says of the segment it came from.
struct Quoted {
    local: Endpoint,
    remote: Endpoint,
    seq: TcpSeqNumber,
    /// The quoted datagram's total length.
    len: usize,
}

/// Reads the IPv4 and TCP headers an ICMP error quotes (the quote is cut
/// after 8 bytes of TCP at least, so only what those hold).
fn quoted_tcp(quote: &[u8]) -> Option<Quoted> {
    let b = |i: usize| quote.get(i).copied();
    let be16 = |i: usize| Some(u16::from_be_bytes([b(i)?, b(i + 1)?]));
    let vihl = b(0)?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 || quote.len() < ihl + 8 {
        return None;
    }
    if IpProtocol::from(b(9)?) != IpProtocol::Tcp {
        return None;
    }
    let src = Ipv4Address::from_bytes(quote.get(12..16)?)?;
    let dst = Ipv4Address::from_bytes(quote.get(16..20)?)?;
    let tcp = quote.get(ihl..ihl + 8)?;
    let seq = u32::from_be_bytes([*tcp.get(4)?, *tcp.get(5)?, *tcp.get(6)?, *tcp.get(7)?]);
    Some(Quoted {
        local: Endpoint::new(src, be16(ihl)?),
        remote: Endpoint::new(dst, be16(ihl + 2)?),
        seq: TcpSeqNumber(seq),
        len: usize::from(be16(2)?),
    })
}

/// A destination unreachable, fragmentation needed arrived with
/// `next_hop_mtu` and `quote` (the offending datagram's headers). Lowers
/// the path MTU of the connection it names, and of every connection to the
/// same destination, if the message is to be believed (module docs).
pub(crate) fn on_frag_needed(
    now: Instant,
    next_hop_mtu: u16,
    quote: &[u8],
    cache: &mut PmtuCache,
    sockets: &mut SocketSet,
    stats: &mut StackStats,
) {
    let Some(q) = quoted_tcp(quote) else {
        stats.pmtu_ignored += 1;
        return;
    };
    let believed = sockets
        .conns
        .get(&(q.local, q.remote))
        .and_then(|&i| sockets.tcp(i))
        .filter(|s| {
            !matches!(s.state, State::Closed | State::Listen)
                && seq::le(s.snd_una, q.seq)
                && seq::lt(q.seq, s.snd_max)
        })
        .map(|s| s.path.mtu);
    let Some(path_mtu) = believed else {
        stats.pmtu_ignored += 1;
        return;
    };
    let mut mtu = match next_hop_mtu {
        0 => plateau_below(q.len),
        m => usize::from(m),
    };
    let locked = mtu < cache.min;
    if locked {
        mtu = cache.min;
    }
    if mtu >= path_mtu {
        stats.pmtu_ignored += 1;
        return;
    }
    stats.pmtu_lowered += 1;
    let dst = q.remote.addr;
    cache.set(dst, mtu, locked, now);
    for i in 0..sockets.slot_count() {
        if let Some(s) = sockets.tcp_mut(i)
            && s.remote.addr == dst
            && s.path.mtu > mtu
            && s.set_path_mtu(mtu)
        {
            sockets.push_ready_front(i);
        }
    }
}

/// Ages the cache: every entry that expired by `now` goes, and the
/// connections to its destination grow back to the device's MTU.
pub(crate) fn expire(
    now: Instant,
    cache: &mut PmtuCache,
    sockets: &mut SocketSet,
    stats: &mut StackStats,
) {
    while let Some(dst) = cache.take_expired(now) {
        stats.pmtu_expired += 1;
        for i in 0..sockets.slot_count() {
            if let Some(s) = sockets.tcp_mut(i)
                && s.remote.addr == dst
            {
                let dev = s.path.dev_mtu;
                s.set_path_mtu(dev);
                sockets.touch(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plateaus_step_below_the_datagram() {
        assert_eq!(plateau_below(1500), 1492);
        assert_eq!(plateau_below(1492), 1006);
        assert_eq!(plateau_below(65_535), 32_000);
        assert_eq!(plateau_below(600), 508);
        assert_eq!(plateau_below(68), 68);
        assert_eq!(plateau_below(0), 68);
    }

    #[test]
    fn the_cache_is_bounded_ages_and_locks() {
        let cfg = IpConfig {
            pmtu_cache_entries: 2,
            ..IpConfig::default()
        };
        let mut c = PmtuCache::new(&cfg);
        let t0 = Instant::from_secs(1);
        let (a, b, d) = (
            Ipv4Address::new(10, 0, 0, 1),
            Ipv4Address::new(10, 0, 0, 2),
            Ipv4Address::new(10, 0, 0, 3),
        );
        c.set(a, 1200, false, t0);
        c.set(b, 552, true, t0 + Duration::from_secs(1));
        assert_eq!(c.mtu(a, t0), Some(1200));
        assert!(c.df_off(b) && !c.df_off(a));
        // Full: the first to expire (a) makes way.
        c.set(d, 1000, false, t0 + Duration::from_secs(2));
        assert_eq!((c.mtu(a, t0), c.mtu(d, t0)), (None, Some(1000)));
        assert_eq!(c.entries.capacity(), 2, "allocated once");
        assert_eq!(c.poll_at(), Some(t0 + Duration::from_secs(601)));
        assert_eq!(c.take_expired(t0 + Duration::from_secs(600)), None);
        assert_eq!(c.take_expired(t0 + Duration::from_secs(601)), Some(b));
        assert!(!c.df_off(b));
        assert_eq!(c.mtu(d, t0 + Duration::from_secs(602)), None, "expired");
        assert_eq!(c.take_expired(t0 + Duration::from_secs(602)), Some(d));
        assert_eq!(c.poll_at(), None);
    }
}
