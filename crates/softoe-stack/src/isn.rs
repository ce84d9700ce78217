//! Initial sequence numbers after RFC 6528.
//!
//! `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`, where
//! `M` is a timer that ticks every 4 microseconds and `F` is a keyed hash
//! (SipHash-2-4) of the connection's four-tuple under a secret the caller
//! supplies. Different connections get unpredictable, well separated ISNs; a
//! reincarnation of the same four-tuple gets an ISN that keeps increasing with
//! time, so old duplicates of the previous incarnation fall outside the window.

use core::hash::Hasher;

use siphasher::sip::SipHasher24;
use softoe_wire::{Ipv4Address, TcpSeqNumber};

use crate::time::Instant;

/// Generates ISNs from a 128-bit secret.
#[derive(Clone)]
pub struct IsnGenerator {
    key: [u8; 16],
}

impl core::fmt::Debug for IsnGenerator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print the secret.
        f.debug_struct("IsnGenerator").finish_non_exhaustive()
    }
}

impl IsnGenerator {
    /// A generator keyed by `secret`.
    pub const fn new(secret: [u8; 16]) -> IsnGenerator {
        IsnGenerator { key: secret }
    }

    /// The ISN for a connection from `local` to `remote` at `now`.
    pub fn isn(
        &self,
        now: Instant,
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
    ) -> TcpSeqNumber {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write(local.0.as_bytes());
        h.write(&local.1.to_be_bytes());
        h.write(remote.0.as_bytes());
        h.write(&remote.1.to_be_bytes());
        let f = h.finish() as u32;
        let m = (now.total_micros() / 4) as u32;
        TcpSeqNumber(m.wrapping_add(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const B: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    #[test]
    fn keyed_and_time_increasing() {
        let g = IsnGenerator::new([7; 16]);
        let t0 = Instant::from_secs(1);
        let a = g.isn(t0, (A, 1000), (B, 80));
        // Same tuple, same time: same ISN.
        assert_eq!(a, g.isn(t0, (A, 1000), (B, 80)));
        // Another tuple: unrelated ISN.
        assert_ne!(a, g.isn(t0, (A, 1001), (B, 80)));
        // Another secret: unrelated ISN.
        assert_ne!(a, IsnGenerator::new([8; 16]).isn(t0, (A, 1000), (B, 80)));
        // Later: grows by one per 4 µs.
        let later = g.isn(
            t0 + core::time::Duration::from_micros(400),
            (A, 1000),
            (B, 80),
        );
        assert_eq!(later.0.wrapping_sub(a.0), 100);
    }
}
