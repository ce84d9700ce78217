//! CUBIC (RFC 9438).
//!
//! Window arithmetic is done in segments as `f64` (core arithmetic only: the
//! cube root is a few Newton steps, so the crate stays `no_std` without
//! `libm`), and converted to bytes at the edges.

use core::time::Duration;

use super::{CongestionControl, initial_window, slow_start_increase};
use crate::time::Instant;

/// RFC 9438 §5: C.
const C: f64 = 0.4;
/// RFC 9438 §4.6: β_cubic.
const BETA: f64 = 0.7;
/// RFC 9438 §4.3: α_cubic = 3(1 − β)/(1 + β).
const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

/// Cube root of a non-negative number by Newton's method.
pub(crate) fn cbrt(x: f64) -> f64 {
    if x <= 0.0 || x.is_nan() {
        return 0.0;
    }
    let mut y = 1.0f64;
    while y * y * y < x {
        y *= 2.0;
    }
    for _ in 0..60 {
        let next = y - (y * y * y - x) / (3.0 * y * y);
        if (next - y).abs() <= 1e-12 * y {
            return next;
        }
        y = next;
    }
    y
}

/// RFC 9438 CUBIC.
#[derive(Clone, Debug)]
pub struct Cubic {
    mss: u32,
    cwnd: u32,
    ssthresh: u32,
    /// W_max, segments.
    w_max: f64,
    /// Start of the current congestion-avoidance epoch.
    epoch_start: Option<Instant>,
    /// K, seconds.
    k: f64,
    /// Reno-friendly estimate W_est, segments.
    w_est: f64,
    /// cwnd at the start of the epoch, segments.
    cwnd_epoch: f64,
    sent_any: bool,
}

impl Cubic {
    /// A controller for segments of `mss` bytes.
    pub fn new(mss: u32) -> Cubic {
        let mss = mss.max(1);
        Cubic {
            mss,
            cwnd: initial_window(mss),
            ssthresh: u32::MAX,
            w_max: 0.0,
            epoch_start: None,
            k: 0.0,
            w_est: 0.0,
            cwnd_epoch: 0.0,
            sent_any: false,
        }
    }

    /// Takes over a connection's window from another controller: `cwnd`
    /// and `ssthresh` carry on, a new epoch starts from them at the next ACK.
    pub(crate) fn resume(&mut self, cwnd: u32, ssthresh: u32, sent_any: bool) {
        self.cwnd = cwnd.max(self.mss);
        self.ssthresh = ssthresh;
        self.sent_any = sent_any;
    }

    fn segs(&self, bytes: u32) -> f64 {
        f64::from(bytes) / f64::from(self.mss)
    }

    fn bytes(&self, segs: f64) -> u32 {
        let b = segs * f64::from(self.mss);
        if b >= f64::from(u32::MAX) {
            u32::MAX
        } else if b <= 0.0 {
            0
        } else {
            b as u32
        }
    }

    /// W_cubic(t), segments.
    fn w_cubic(&self, t: f64) -> f64 {
        let d = t - self.k;
        C * d * d * d + self.w_max
    }

    fn reduce(&mut self, flight: u32) {
        let cwnd = self.segs(self.cwnd);
        // Fast convergence (§4.7).
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        let base = self.segs(flight.max(self.mss)).min(cwnd.max(1.0));
        let ss = self.bytes(base * BETA).max(2 * self.mss);
        self.ssthresh = ss;
        self.epoch_start = None;
    }
}

impl CongestionControl for Cubic {
    fn on_ack(
        &mut self,
        now: Instant,
        bytes_acked: u32,
        _flight: u32,
        srtt: Duration,
        min_rtt: Duration,
    ) {
        self.sent_any = true;
        if self.cwnd < self.ssthresh {
            self.cwnd = self
                .cwnd
                .saturating_add(slow_start_increase(bytes_acked, self.mss));
            return;
        }
        let cwnd = self.segs(self.cwnd).max(1.0);
        let start = match self.epoch_start {
            Some(s) => s,
            None => {
                self.epoch_start = Some(now);
                self.cwnd_epoch = cwnd;
                self.w_est = cwnd;
                self.k = if cwnd < self.w_max {
                    cbrt((self.w_max - cwnd) / C)
                } else {
                    0.0
                };
                if self.w_max < cwnd {
                    self.w_max = cwnd;
                }
                now
            }
        };
        let t = now.saturating_duration_since(start).as_secs_f64();
        let rtt = if min_rtt > Duration::ZERO {
            min_rtt
        } else {
            srtt
        }
        .as_secs_f64();
        let acked = self.segs(bytes_acked);
        // Reno-friendly estimate (§4.3).
        self.w_est += ALPHA * acked / cwnd;
        let target = self.w_cubic(t + rtt).clamp(cwnd, 1.5 * cwnd);
        let new = if self.w_cubic(t) < self.w_est {
            // Reno-friendly region (§4.3).
            self.w_est.max(cwnd)
        } else {
            // Concave or convex region (§4.4, 4.5).
            cwnd + (target - cwnd) * acked / cwnd
        };
        self.cwnd = self.bytes(new).max(self.cwnd);
    }

    fn on_congestion_event(&mut self, _now: Instant, flight: u32) {
        self.sent_any = true;
        self.reduce(flight);
        self.cwnd = self.ssthresh;
    }

    fn on_recovery_exit(&mut self, _now: Instant, _flight: u32) {
        self.cwnd = self.ssthresh;
    }

    fn on_rto(&mut self, _now: Instant, flight: u32) {
        self.sent_any = true;
        self.reduce(flight);
        self.cwnd = self.mss;
    }

    fn on_idle_restart(&mut self, _now: Instant) {
        self.cwnd = self.cwnd.min(initial_window(self.mss));
        self.epoch_start = None;
    }

    fn set_mss(&mut self, mss: u32) {
        self.mss = mss.max(1);
        if !self.sent_any {
            self.cwnd = initial_window(self.mss);
        }
    }

    fn exit_slow_start(&mut self) {
        self.ssthresh = self.ssthresh.min(self.cwnd);
        self.w_max = self.w_max.max(self.segs(self.cwnd));
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

    #[test]
    fn cube_root() {
        for x in [0.0, 1.0, 8.0, 27.0, 1000.0, 2.0, 1e9] {
            let y = cbrt(x);
            assert!((y * y * y - x).abs() <= 1e-6 * x.max(1.0), "{x} -> {y}");
        }
        assert_eq!(cbrt(-5.0), 0.0);
    }

    #[test]
    fn multiplicative_decrease_is_beta() {
        let mut c = Cubic::new(MSS);
        c.on_congestion_event(Instant::ZERO, 100 * MSS);
        // cwnd was 10 segments (IW): ssthresh = 0.7 × min(flight, cwnd).
        assert_eq!(c.ssthresh(), 7 * MSS);
        assert_eq!(c.cwnd(), 7 * MSS);
        c.on_rto(Instant::ZERO, 7 * MSS);
        assert_eq!(c.cwnd(), MSS);
    }

    /// Drives CUBIC with an ACK clock: one window per RTT.
    fn run(c: &mut Cubic, start: Instant, rtt: Duration, rtts: u32) -> Instant {
        let mut now = start;
        for _ in 0..rtts {
            let w = c.cwnd();
            let mut acked = 0;
            while acked < w {
                c.on_ack(now, MSS, w, rtt, rtt);
                acked += MSS;
            }
            now += rtt;
        }
        now
    }

    #[test]
    fn follows_the_cubic_curve_back_to_w_max() {
        // Grow to 100 segments, lose, and watch the window return to W_max
        // around K seconds later (RFC 9438 Figure 1), with a long RTT so the
        // cubic region dominates the Reno-friendly one.
        let mut c = Cubic::new(MSS);
        c.cwnd = 100 * MSS;
        c.ssthresh = 100 * MSS;
        c.on_congestion_event(Instant::ZERO, 100 * MSS);
        assert_eq!(c.cwnd(), 70 * MSS);
        let rtt = Duration::from_millis(100);
        let k = cbrt(100.0 * (1.0 - BETA) / C); // ≈ 4.2 s
        let before_k = run(&mut c, Instant::ZERO, rtt, (k * 10.0 * 0.5) as u32);
        let w_half = c.segs(c.cwnd());
        assert!(w_half > 80.0 && w_half < 100.0, "concave: {w_half}");
        run(&mut c, before_k, rtt, (k * 10.0 * 0.5) as u32 + 3);
        let w_k = c.segs(c.cwnd());
        assert!((w_k - 100.0).abs() < 6.0, "near W_max at K: {w_k}");
    }

    #[test]
    fn fast_convergence_lowers_w_max() {
        let mut c = Cubic::new(MSS);
        c.cwnd = 100 * MSS;
        c.on_congestion_event(Instant::ZERO, 100 * MSS);
        assert!((c.w_max - 100.0).abs() < 1e-9);
        // A second loss below W_max.
        c.on_congestion_event(Instant::ZERO, 70 * MSS);
        assert!((c.w_max - 70.0 * (1.0 + BETA) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn reno_friendly_at_short_rtt() {
        // At a tiny RTT and small window, W_est grows faster than W_cubic.
        let mut c = Cubic::new(MSS);
        c.cwnd = 20 * MSS;
        c.ssthresh = 20 * MSS;
        c.on_congestion_event(Instant::ZERO, 20 * MSS);
        let rtt = Duration::from_micros(100);
        run(&mut c, Instant::ZERO, rtt, 50);
        assert!(
            c.cwnd() > 14 * MSS + 20 * MSS / 2,
            "grew like Reno: {}",
            c.cwnd()
        );
    }

    #[test]
    fn never_overflows() {
        let mut c = Cubic::new(0);
        c.ssthresh = 0;
        for _ in 0..10 {
            c.on_ack(
                Instant::MAX,
                u32::MAX,
                u32::MAX,
                Duration::MAX,
                Duration::ZERO,
            );
        }
        c.on_congestion_event(Instant::ZERO, u32::MAX);
        c.on_ack(Instant::ZERO, 1, 1, Duration::ZERO, Duration::ZERO);
        assert!(c.cwnd() >= 1);
    }
}
