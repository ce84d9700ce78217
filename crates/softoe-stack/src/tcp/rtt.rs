//! The retransmission timeout after RFC 6298.
//!
//! SRTT and RTTVAR are kept in nanoseconds; the clock granularity G is taken
//! as one microsecond (the engine's clock is far finer than RFC 6298's
//! assumptions). The RTO is SRTT + max(G, 4·RTTVAR, `min_rto`) — the floor
//! added to the round trip, not a floor under it, as Linux does (its RTTVAR
//! never drops below `rto_min`): a 200 ms floor on a 100 ms path would fire
//! while a loss is still being repaired by fast recovery (a SACK, then the
//! retransmission's ACK: two round trips without a cumulative ACK). It is
//! capped at `max_rto` and backs off by doubling on each expiry until new
//! data is acknowledged.

use core::time::Duration;

/// RFC 6298 estimator with exponential backoff.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RttEstimator {
    srtt: u64,
    rttvar: u64,
    min_rtt: u64,
    has_sample: bool,
    base_rto: u64,
    min_rto: u64,
    max_rto: u64,
    backoff: u32,
}

const G: u64 = 1_000;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RttEstimator {
    pub(crate) fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> RttEstimator {
        let min_rto = nanos(min_rto);
        let max_rto = nanos(max_rto).max(min_rto);
        RttEstimator {
            srtt: 0,
            rttvar: 0,
            min_rtt: u64::MAX,
            has_sample: false,
            base_rto: nanos(initial_rto).clamp(min_rto, max_rto),
            min_rto,
            max_rto,
            backoff: 0,
        }
    }

    /// Takes one RTT measurement (RFC 6298 §2.2–2.3).
    pub(crate) fn on_sample(&mut self, rtt: Duration) {
        let r = nanos(rtt).max(1);
        if self.has_sample {
            // RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R'|; SRTT <- 7/8 SRTT + 1/8 R'
            let delta = self.srtt.abs_diff(r);
            self.rttvar = self.rttvar - self.rttvar / 4 + delta / 4;
            self.srtt = self.srtt - self.srtt / 8 + r / 8;
        } else {
            self.srtt = r;
            self.rttvar = r / 2;
            self.has_sample = true;
        }
        self.min_rtt = self.min_rtt.min(r);
        let rto = self
            .srtt
            .saturating_add(G.max(self.rttvar.saturating_mul(4)).max(self.min_rto));
        self.base_rto = rto.clamp(self.min_rto, self.max_rto);
    }

    /// A round trip that lowers the minimum only (a delivered segment
    /// other than the timed one; see `Rack::on_delivered`). Before the
    /// first sample it waits: the estimator starts from a timed one.
    pub(crate) fn observe_min(&mut self, rtt: Duration) {
        if self.has_sample {
            self.min_rtt = self.min_rtt.min(nanos(rtt).max(1));
        }
    }

    /// The current RTO, backoff included.
    pub(crate) fn rto(&self) -> Duration {
        let shift = self.backoff.min(32);
        let rto = self.base_rto.checked_shl(shift).unwrap_or(u64::MAX);
        let rto = if shift > 0 && rto >> shift != self.base_rto {
            u64::MAX
        } else {
            rto
        };
        Duration::from_nanos(rto.min(self.max_rto))
    }

    /// The timer expired: double the RTO (RFC 6298 §5.5).
    pub(crate) fn backoff(&mut self) {
        self.backoff = self.backoff.saturating_add(1).min(32);
    }

    /// New data was acknowledged: forget the backoff.
    pub(crate) fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    pub(crate) fn srtt(&self) -> Duration {
        Duration::from_nanos(self.srtt)
    }

    pub(crate) fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }

    /// The smallest RTT seen (zero before any sample).
    pub(crate) fn min_rtt(&self) -> Duration {
        if self.has_sample {
            Duration::from_nanos(self.min_rtt)
        } else {
            Duration::ZERO
        }
    }

    /// No RTT sample yet and the handshake had to be retransmitted: the
    /// RTO becomes `rto` (RFC 6298 §5.7), clamped to the configured bounds.
    pub(crate) fn fall_back(&mut self, rto: Duration) {
        if !self.has_sample {
            self.base_rto = nanos(rto).clamp(self.min_rto, self.max_rto);
        }
    }

    pub(crate) fn has_sample(&self) -> bool {
        self.has_sample
    }

    pub(crate) fn backoff_count(&self) -> u32 {
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn first_and_later_samples() {
        let mut e = est();
        assert_eq!(e.rto(), Duration::from_secs(1));
        assert!(!e.has_sample());
        e.on_sample(Duration::from_millis(100));
        assert_eq!(e.srtt(), Duration::from_millis(100));
        assert_eq!(e.rttvar(), Duration::from_millis(50));
        // RTO = 100 + max(4 * 50, 200) = 300 ms.
        assert_eq!(e.rto(), Duration::from_millis(300));
        e.on_sample(Duration::from_millis(200));
        // RTTVAR = 3/4 * 50 + 1/4 * 100 = 62.5; SRTT = 7/8 * 100 + 1/8 * 200 = 112.5
        assert_eq!(e.srtt(), Duration::from_micros(112_500));
        assert_eq!(e.rttvar(), Duration::from_micros(62_500));
        assert_eq!(e.min_rtt(), Duration::from_millis(100));
        // 112.5 + 4 * 62.5 = 362.5 ms.
        assert_eq!(e.rto(), Duration::from_micros(362_500));
        // A steady 100 ms path: RTTVAR shrinks, the floor is added to SRTT.
        for _ in 0..100 {
            e.on_sample(Duration::from_millis(100));
        }
        assert!(e.rto() > Duration::from_millis(300) && e.rto() < Duration::from_millis(301));
    }

    #[test]
    fn clamps_and_backs_off() {
        let mut e = est();
        e.on_sample(Duration::from_micros(50));
        assert_eq!(
            e.rto(),
            Duration::from_micros(200_050),
            "min RTO on top of SRTT"
        );
        e.backoff();
        assert_eq!(e.rto(), Duration::from_micros(400_100));
        e.backoff();
        assert_eq!(e.rto(), Duration::from_micros(800_200));
        for _ in 0..100 {
            e.backoff();
        }
        assert_eq!(e.rto(), Duration::from_secs(60), "max RTO, no overflow");
        assert_eq!(e.backoff_count(), 32);
        e.reset_backoff();
        assert_eq!(e.rto(), Duration::from_micros(200_050));
    }
}
