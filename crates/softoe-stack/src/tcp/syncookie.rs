//! SYN cookies (RFC 4987 §3.6), after Linux's `net/ipv4/syncookies.c`.
//!
//! When a listener's SYN queue is full it answers a SYN with a SYN-ACK
//! whose sequence number *is* the handshake's state, and keeps nothing;
//! the ACK that comes back (its acknowledgement number less one) is
//! checked and becomes the connection. A flood of spoofed SYNs then costs
//! a SYN-ACK each and no memory, and a real client still connects at once.
//!
//! **The cookie** (32 bits): `H0(addrs, ports) + their ISN + (count << 24
//! | MAC << 3 | mss index)`, where `count` is the cookie clock's low 8 bits
//! (one tick per 64 s, from the stack's `now`: no clock of its own), the
//! 21-bit MAC is `H1(addrs, ports, their ISN, count, mss index)`, and H0,
//! H1 are SipHash-2-4 under keys derived from the stack's secret
//! ([`StackConfig::secret`](crate::StackConfig::secret)), never the ISN
//! generator's own. A cookie is taken while its count is less than two
//! ticks old (64–128 s, Linux's `MAX_SYNCOOKIE_AGE`), its index names an
//! entry of [`MSS_TABLE`] and its MAC checks: a forged ACK passes about
//! one time in 2^21 × 8/7 per tick it could match. Linux adds the index to
//! a hash instead (`(H1(addrs, ports, count) + index) mod 2^24`), which
//! takes an ACK whose acknowledgement or sequence number is off by a few
//! as a cookie with another MSS (and, for the ACK, another ISS); the MAC
//! over the index and the ISN turns those away.
//!
//! **The MSS** is kept as an index into a small table, the largest entry
//! not above what the peer announced: Linux's four (536, 1300, 1440, 1460),
//! two for jumbo frames (4312, 8960), which Linux's IPv4 table lacks — the
//! testbed runs 9000-byte MTUs, where 1460 would cost a sixth of the
//! segments' payload — and 256 below them: Linux rounds an MSS under
//! 1300 to 536, which sends a peer that announced less segments larger
//! than it can take.
//!
//! **The other options** live where Linux keeps them: when the SYN had
//! timestamps, the low six bits of our SYN-ACK's TSval (which the ACK
//! echoes) hold the peer's window scale (0–14; 15 for none) and a SACK
//! bit; bit 5, Linux's ECN bit, is always 0 (the stack does not do ECN).
//! The TSval is rounded down so that the connection's later TSvals never
//! go below it (the peer's PAWS), and the connection's timestamp offset is
//! a keyed hash of its addresses and ports, which the ACK's handling can
//! recompute. A SYN without timestamps loses window scaling and SACK (the
//! SYN-ACK offers neither, as Linux's), and the cookie's connection is
//! made with the MSS alone. What the cookie cannot keep is lost too: the
//! peer's first window field (the ACK's is taken) and any data the SYN
//! carried.

use core::hash::Hasher;
use core::time::Duration;

use siphasher::sip::SipHasher24;
use softoe_wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestamp};

use super::Endpoint;
use super::seq;
use super::socket::{PathCaps, adv_mss_for, rcv_wscale_for, syn_window_for};
use crate::config::TcpConfig;
use crate::time::Instant;

/// The MSS values a cookie can say (the peer's is rounded down to one).
pub(crate) const MSS_TABLE: [u16; 7] = [256, 536, 1300, 1440, 1460, 4312, 8960];

/// The cookie clock's tick.
pub(crate) const PERIOD: Duration = Duration::from_secs(64);
/// A cookie is good for less than this many ticks after the one it was
/// made in (Linux's `MAX_SYNCOOKIE_AGE`).
const MAX_AGE: u32 = 2;
/// How long after its last cookie a listener checks ACKs for one (Linux's
/// `TCP_SYNCOOKIE_VALID`): an ACK to a listener that sent none lately is
/// simply reset.
pub(crate) const VALID: Duration = Duration::from_secs(PERIOD.as_secs() * MAX_AGE as u64);

/// The cookie's body, before the hash of its four-tuple and the peer's
/// ISN is added: the clock (8 bits), a MAC (21), the MSS index (3).
const COUNT_SHIFT: u32 = 24;
const COUNT_MASK: u32 = 0xff;
const INDEX_BITS: u32 = 3;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
const MAC_BITS: u32 = COUNT_SHIFT - INDEX_BITS;
const MAC_MASK: u32 = (1 << MAC_BITS) - 1;

/// Bits of the SYN-ACK's TSval that carry options.
const TS_BITS: u32 = 6;
const TS_WSCALE_MASK: u32 = 0xf;
const TS_SACK: u32 = 1 << 4;

/// The options a cookie's timestamp keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    /// The peer's window scale, if it offered one.
    pub(crate) wscale: Option<u8>,
    /// The peer offered SACK.
    pub(crate) sack: bool,
}

/// The stack's cookie keys.
#[derive(Clone)]
pub(crate) struct SynCookies {
    keys: [[u8; 16]; 3],
}

impl core::fmt::Debug for SynCookies {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print the keys.
        f.debug_struct("SynCookies").finish_non_exhaustive()
    }
}

/// The cookie clock at `now`.
fn count_at(now: Instant) -> u32 {
    (now.total_millis() / PERIOD.as_millis() as u64) as u32
}

impl SynCookies {
    /// Keys derived from `secret` (each a SipHash of the secret and its
    /// purpose, so no cookie hash is the ISN generator's).
    pub(crate) fn new(secret: [u8; 16]) -> SynCookies {
        let derive = |purpose: &[u8]| {
            let mut out = [0u8; 16];
            for (half, chunk) in out.chunks_mut(8).enumerate() {
                let mut h = SipHasher24::new_with_key(&secret);
                h.write(b"softoe syncookie ");
                h.write(purpose);
                h.write(&[half as u8]);
                chunk.copy_from_slice(&h.finish().to_le_bytes());
            }
            out
        };
        SynCookies {
            keys: [derive(b"h0"), derive(b"h1"), derive(b"ts")],
        }
    }

    fn hash(&self, key: usize, local: Endpoint, remote: Endpoint, more: &[u32]) -> u32 {
        let Some(k) = self.keys.get(key) else {
            return 0;
        };
        let mut h = SipHasher24::new_with_key(k);
        h.write(local.addr.as_bytes());
        h.write(&local.port.to_be_bytes());
        h.write(remote.addr.as_bytes());
        h.write(&remote.port.to_be_bytes());
        for w in more {
            h.write(&w.to_be_bytes());
        }
        h.finish() as u32
    }

    /// The cookie's MAC: its four-tuple, the peer's ISN, the clock and the
    /// MSS index, in [`MAC_BITS`] bits.
    fn mac(
        &self,
        local: Endpoint,
        remote: Endpoint,
        peer_isn: TcpSeqNumber,
        count: u32,
        index: u32,
    ) -> u32 {
        self.hash(1, local, remote, &[peer_isn.0, count, index]) & MAC_MASK
    }

    /// The cookie for a SYN from `remote` with ISN `peer_isn` to `local`,
    /// keeping MSS table index `mss_index`.
    pub(crate) fn cookie(
        &self,
        now: Instant,
        local: Endpoint,
        remote: Endpoint,
        peer_isn: TcpSeqNumber,
        mss_index: usize,
    ) -> TcpSeqNumber {
        let count = count_at(now) & COUNT_MASK;
        let index = (mss_index as u32) & INDEX_MASK;
        let mac = self.mac(local, remote, peer_isn, count, index);
        let body = (count << COUNT_SHIFT) | (mac << INDEX_BITS) | index;
        TcpSeqNumber(
            self.hash(0, local, remote, &[])
                .wrapping_add(peer_isn.0)
                .wrapping_add(body),
        )
    }

    /// The MSS a cookie kept, if `cookie` is one we made for this
    /// four-tuple and ISN less than two ticks ago.
    pub(crate) fn check(
        &self,
        now: Instant,
        local: Endpoint,
        remote: Endpoint,
        peer_isn: TcpSeqNumber,
        cookie: TcpSeqNumber,
    ) -> Option<u16> {
        let body = cookie
            .0
            .wrapping_sub(self.hash(0, local, remote, &[]).wrapping_add(peer_isn.0));
        let count = count_at(now) & COUNT_MASK;
        let age = count.wrapping_sub(body >> COUNT_SHIFT) & COUNT_MASK;
        if age >= MAX_AGE {
            return None;
        }
        let made = count.wrapping_sub(age) & COUNT_MASK;
        let index = body & INDEX_MASK;
        let mss = MSS_TABLE.get(index as usize).copied()?;
        let mac = (body >> INDEX_BITS) & MAC_MASK;
        (mac == self.mac(local, remote, peer_isn, made, index)).then_some(mss)
    }

    /// The timestamp offset of a cookie's connection: the SYN-ACK's TSval
    /// is the connection's clock, which the ACK's handling must find again.
    pub(crate) fn ts_offset(&self, local: Endpoint, remote: Endpoint) -> u32 {
        self.hash(2, local, remote, &[])
    }
}

/// The SYN-ACK a listener with `cfg` on `path` answers `syn` with when it
/// keeps nothing: the cookie as its sequence number, our options as a
/// connection's SYN-ACK would carry them — window scale and SACK only
/// where timestamps can keep them — and the TSval that keeps them.
pub(crate) fn syn_ack(
    cookies: &SynCookies,
    now: Instant,
    cfg: &TcpConfig,
    path: &PathCaps,
    local: Endpoint,
    remote: Endpoint,
    syn: &TcpRepr<'_>,
) -> TcpRepr<'static> {
    let ts = syn.timestamp.filter(|_| cfg.timestamps);
    let opts = Options {
        wscale: syn
            .window_scale
            .filter(|_| ts.is_some() && cfg.window_scaling),
        sack: ts.is_some() && cfg.sack && syn.sack_permitted,
    };
    let peer_mss = syn.max_seg_size.unwrap_or(536).max(cfg.min_mss);
    let cookie = cookies.cookie(now, local, remote, syn.seq_number, mss_index(peer_mss));
    let clock = (now.total_millis() as u32).wrapping_add(cookies.ts_offset(local, remote));
    TcpRepr {
        src_port: local.port,
        dst_port: remote.port,
        control: TcpControl::Syn,
        psh: false,
        seq_number: cookie,
        ack_number: Some(seq::add(syn.seq_number, 1)),
        window_len: syn_window_for(cfg),
        window_scale: opts.wscale.map(|_| rcv_wscale_for(cfg)),
        max_seg_size: Some(adv_mss_for(cfg, path)),
        sack_permitted: opts.sack,
        sack_ranges: [None; 4],
        timestamp: ts.map(|p| TcpTimestamp {
            tsval: encode_ts(clock, opts),
            tsecr: p.tsval,
        }),
        payload: &[],
    }
}

/// The index of the largest [`MSS_TABLE`] entry not above `mss`.
pub(crate) fn mss_index(mss: u16) -> usize {
    MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0)
}

/// A SYN-ACK's TSval keeping `opts`: the clock's value `ts` with its low
/// bits replaced, never above `ts` (the connection's later TSvals, read
/// from the same clock, must not fall below it).
pub(crate) fn encode_ts(ts: u32, opts: Options) -> u32 {
    let mut bits = opts.wscale.map_or(TS_WSCALE_MASK, |w| u32::from(w.min(14)));
    if opts.sack {
        bits |= TS_SACK;
    }
    let v = (ts >> TS_BITS << TS_BITS) | bits;
    if v > ts {
        v.wrapping_sub(1 << TS_BITS)
    } else {
        v
    }
}

/// The options a cookie's SYN-ACK kept in its TSval (`tsecr`, the ACK's
/// echo of it).
pub(crate) fn decode_ts(tsecr: u32) -> Options {
    let w = tsecr & TS_WSCALE_MASK;
    Options {
        wscale: (w != TS_WSCALE_MASK).then_some(w.min(14) as u8),
        sack: tsecr & TS_SACK != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softoe_wire::Ipv4Address;

    fn ends() -> (Endpoint, Endpoint) {
        (
            Endpoint::new(Ipv4Address::new(10, 0, 0, 1), 80),
            Endpoint::new(Ipv4Address::new(10, 0, 0, 2), 40_000),
        )
    }

    #[test]
    fn a_cookie_checks_for_two_ticks_and_keeps_its_mss() {
        let c = SynCookies::new([7; 16]);
        let (l, r) = ends();
        let isn = TcpSeqNumber(0xdead_beef);
        // Late in a tick, so the next tick comes within the test.
        let t0 = Instant::from_secs(64 * 1000 + 60);
        for (i, &mss) in MSS_TABLE.iter().enumerate() {
            let k = c.cookie(t0, l, r, isn, i);
            assert_eq!(c.check(t0, l, r, isn, k), Some(mss));
            assert_eq!(
                c.check(t0 + Duration::from_secs(10), l, r, isn, k),
                Some(mss)
            );
            assert_eq!(
                c.check(t0 + Duration::from_secs(67), l, r, isn, k),
                Some(mss)
            );
            assert_eq!(c.check(t0 + Duration::from_secs(69), l, r, isn, k), None);
        }
        let k = c.cookie(t0, l, r, isn, 3);
        assert_eq!(
            c.check(t0, l, r, TcpSeqNumber(isn.0 + 1), k),
            None,
            "another ISN"
        );
        assert_eq!(c.check(t0, r, l, isn, k), None, "another four-tuple");
        assert_eq!(c.check(t0, l, r, isn, TcpSeqNumber(k.0 + 1)), None);
        assert_eq!(
            SynCookies::new([8; 16]).check(t0, l, r, isn, k),
            None,
            "another secret"
        );
    }

    #[test]
    fn forged_cookies_almost_never_check() {
        let c = SynCookies::new([1; 16]);
        let (l, r) = ends();
        let t = Instant::from_secs(5000);
        let mut x = 0x1234_5678u32;
        let passed = (0..100_000)
            .filter(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                c.check(t, l, r, TcpSeqNumber(77), TcpSeqNumber(x))
                    .is_some()
            })
            .count();
        // About one in 2^21 × 8/7 each, with two ticks to match: ~0.08
        // expected.
        assert!(passed <= 2, "{passed} of 100000 random cookies checked");
    }

    #[test]
    fn the_mss_rounds_down_to_the_table() {
        assert_eq!(mss_index(100), 0, "below the table: its smallest");
        assert_eq!(MSS_TABLE[mss_index(300)], 256);
        assert_eq!(MSS_TABLE[mss_index(536)], 536);
        assert_eq!(MSS_TABLE[mss_index(1400)], 1300);
        assert_eq!(MSS_TABLE[mss_index(1460)], 1460);
        assert_eq!(MSS_TABLE[mss_index(8960)], 8960);
        assert_eq!(MSS_TABLE[mss_index(65_495)], 8960);
    }

    #[test]
    fn options_ride_in_the_timestamp_never_above_the_clock() {
        for ts in [0u32, 1, 63, 64, 1000, 0xffff_ffff, 0x8000_0000] {
            for opts in [
                Options {
                    wscale: Some(7),
                    sack: true,
                },
                Options {
                    wscale: None,
                    sack: false,
                },
                Options {
                    wscale: Some(0),
                    sack: false,
                },
                Options {
                    wscale: Some(14),
                    sack: true,
                },
            ] {
                let v = encode_ts(ts, opts);
                assert_eq!(decode_ts(v), opts, "{ts} {opts:?}");
                assert!(
                    ts.wrapping_sub(v) < 64,
                    "{v} is above {ts} or too far below"
                );
            }
        }
    }
}
