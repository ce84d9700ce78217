//! NewReno: additive increase, multiplicative decrease (RFC 5681, RFC 6582).

use core::time::Duration;

use super::{CongestionControl, initial_window, slow_start_increase};
use crate::time::Instant;

/// RFC 5681 congestion control with RFC 6582's window on leaving recovery.
#[derive(Clone, Debug)]
pub struct NewReno {
    cwnd: u32,
    ssthresh: u32,
    mss: u32,
    /// Bytes acknowledged toward the next +1 MSS in congestion avoidance.
    ca_acc: u32,
    sent_any: bool,
}

impl NewReno {
    /// A controller for segments of `mss` bytes.
    pub fn new(mss: u32) -> NewReno {
        let mss = mss.max(1);
        NewReno {
            cwnd: initial_window(mss),
            ssthresh: u32::MAX,
            mss,
            ca_acc: 0,
            sent_any: false,
        }
    }

    /// Takes over a connection's window from another controller: `cwnd`
    /// and `ssthresh` carry on.
    pub(crate) fn resume(&mut self, cwnd: u32, ssthresh: u32, sent_any: bool) {
        self.cwnd = cwnd.max(self.mss);
        self.ssthresh = ssthresh;
        self.sent_any = sent_any;
    }
}

impl CongestionControl for NewReno {
    fn on_ack(
        &mut self,
        _now: Instant,
        bytes_acked: u32,
        _flight: u32,
        _srtt: Duration,
        _min_rtt: Duration,
    ) {
        self.sent_any = true;
        if self.cwnd < self.ssthresh {
            self.cwnd = self
                .cwnd
                .saturating_add(slow_start_increase(bytes_acked, self.mss));
        } else {
            // +1 MSS per window of acknowledged bytes (RFC 5681 eqn. 3, byte-counted).
            self.ca_acc = self.ca_acc.saturating_add(bytes_acked);
            while self.ca_acc >= self.cwnd && self.cwnd > 0 {
                self.ca_acc -= self.cwnd;
                self.cwnd = self.cwnd.saturating_add(self.mss);
            }
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, flight: u32) {
        self.sent_any = true;
        self.ssthresh = (flight / 2).max(2 * self.mss);
        self.cwnd = self.ssthresh;
        self.ca_acc = 0;
    }

    fn on_recovery_exit(&mut self, _now: Instant, flight: u32) {
        self.cwnd = self
            .ssthresh
            .min(flight.max(self.mss).saturating_add(self.mss));
    }

    fn on_rto(&mut self, _now: Instant, flight: u32) {
        self.sent_any = true;
        self.ssthresh = (flight / 2).max(2 * self.mss);
        self.cwnd = self.mss;
        self.ca_acc = 0;
    }

    fn on_idle_restart(&mut self, _now: Instant) {
        self.cwnd = self.cwnd.min(initial_window(self.mss));
    }

    fn set_mss(&mut self, mss: u32) {
        self.mss = mss.max(1);
        if !self.sent_any {
            self.cwnd = initial_window(self.mss);
        }
    }

    fn exit_slow_start(&mut self) {
        self.ssthresh = self.ssthresh.min(self.cwnd);
    }

    fn cwnd(&self) -> u32 {
        self.cwnd
    }

    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1000;

    /// Acks one window's worth, segment by segment.
    fn one_rtt(c: &mut NewReno) {
        let w = c.cwnd();
        let mut acked = 0;
        while acked < w {
            c.on_ack(Instant::ZERO, MSS, w, Duration::ZERO, Duration::ZERO);
            acked += MSS;
        }
    }

    #[test]
    fn slow_start_doubles_then_ca_adds_one_mss() {
        let mut c = NewReno::new(MSS);
        assert_eq!(c.cwnd(), 10 * MSS);
        one_rtt(&mut c);
        assert_eq!(c.cwnd(), 20 * MSS);
        c.on_congestion_event(Instant::ZERO, 20 * MSS);
        assert_eq!(c.ssthresh(), 10 * MSS);
        assert_eq!(c.cwnd(), 10 * MSS);
        assert!(!c.in_slow_start());
        one_rtt(&mut c);
        assert_eq!(c.cwnd(), 11 * MSS);
        one_rtt(&mut c);
        assert_eq!(c.cwnd(), 12 * MSS);
    }

    #[test]
    fn rto_and_recovery_exit() {
        let mut c = NewReno::new(MSS);
        c.on_rto(Instant::ZERO, 30 * MSS);
        assert_eq!(c.cwnd(), MSS);
        assert_eq!(c.ssthresh(), 15 * MSS);
        c.on_congestion_event(Instant::ZERO, MSS);
        assert_eq!(c.ssthresh(), 2 * MSS, "floor of two segments");
        c.on_recovery_exit(Instant::ZERO, 0);
        assert_eq!(c.cwnd(), 2 * MSS);
        // No overflow with huge values, zero MSS is treated as one.
        let mut c = NewReno::new(0);
        c.on_ack(
            Instant::ZERO,
            u32::MAX,
            u32::MAX,
            Duration::ZERO,
            Duration::ZERO,
        );
        c.on_ack(
            Instant::ZERO,
            u32::MAX,
            u32::MAX,
            Duration::ZERO,
            Duration::ZERO,
        );
        assert!(c.cwnd() > 0);
    }
}
