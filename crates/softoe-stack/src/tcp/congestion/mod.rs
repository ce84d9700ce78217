//! Congestion control behind a trait.
//!
//! The connection tells its controller what happened — bytes acknowledged,
//! a loss detected by duplicate ACKs or SACK, recovery ended, a timeout — and
//! reads back `cwnd` and `ssthresh`. Loss *recovery* (what to retransmit) is
//! the connection's business (`tcp::recovery`); the controller
//! only sizes the window. Two controllers ship: [`NewReno`] (RFC 5681/6582
//! AIMD, as HL-TCP) and [`Cubic`] (RFC 9438, Linux's default).

mod cubic;
mod newreno;

use core::time::Duration;

pub use cubic::Cubic;
pub use newreno::NewReno;

use crate::time::Instant;

/// What a congestion controller is told and asked. All windows in bytes.
pub trait CongestionControl {
    /// New data was cumulatively acknowledged outside loss recovery.
    /// `flight` is the data in flight before this ACK; `srtt` and `min_rtt`
    /// are zero until the first sample.
    fn on_ack(
        &mut self,
        now: Instant,
        bytes_acked: u32,
        flight: u32,
        srtt: Duration,
        min_rtt: Duration,
    );
    /// A loss was detected by duplicate ACKs or SACK (fast recovery starts).
    fn on_congestion_event(&mut self, now: Instant, flight: u32);
    /// Fast recovery ended with `flight` bytes still in flight.
    fn on_recovery_exit(&mut self, now: Instant, flight: u32);
    /// The retransmission timer fired with `flight` bytes in flight.
    fn on_rto(&mut self, now: Instant, flight: u32);
    /// The connection was idle for longer than an RTO (RFC 5681 §4.1).
    fn on_idle_restart(&mut self, now: Instant);
    /// The sender's maximum segment size is now `mss`.
    fn set_mss(&mut self, mss: u32);
    /// Leave slow start now (the delay says the path's queue is filling:
    /// HyStart); the window stays, the threshold comes down to it.
    fn exit_slow_start(&mut self);
    /// Congestion window.
    fn cwnd(&self) -> u32;
    /// Slow-start threshold.
    fn ssthresh(&self) -> u32;
    /// Whether in slow start.
    fn in_slow_start(&self) -> bool {
        self.cwnd() < self.ssthresh()
    }
}

/// Which controller a connection uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum Algorithm {
    /// RFC 5681/6582 AIMD.
    NewReno,
    /// RFC 9438 CUBIC.
    #[default]
    Cubic,
}

impl Algorithm {
    /// The algorithm Linux calls `name` (`"reno"`, `"cubic"`), if this
    /// stack has it.
    pub fn from_name(name: &str) -> Option<Algorithm> {
        match name {
            "reno" => Some(Algorithm::NewReno),
            "cubic" => Some(Algorithm::Cubic),
            _ => None,
        }
    }

    /// The name Linux uses for it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::NewReno => "reno",
            Algorithm::Cubic => "cubic",
        }
    }
}

/// RFC 6928's initial window: min(10 × MSS, max(2 × MSS, 14600)).
pub(crate) fn initial_window(mss: u32) -> u32 {
    mss.saturating_mul(10)
        .min(mss.saturating_mul(2).max(14_600))
}

/// Slow start with RFC 3465 byte counting (L = 2 × MSS): the increase for
/// `acked` bytes.
pub(crate) fn slow_start_increase(acked: u32, mss: u32) -> u32 {
    acked.min(mss.saturating_mul(2))
}

/// A controller chosen at run time (no allocation, static dispatch).
#[derive(Clone, Debug)]
pub enum Controller {
    /// NewReno.
    NewReno(NewReno),
    /// CUBIC.
    Cubic(Cubic),
}

impl Controller {
    /// A controller of `algorithm` for segments of `mss` bytes.
    pub fn new(algorithm: Algorithm, mss: u32) -> Controller {
        match algorithm {
            Algorithm::NewReno => Controller::NewReno(NewReno::new(mss)),
            Algorithm::Cubic => Controller::Cubic(Cubic::new(mss)),
        }
    }

    /// The algorithm it runs.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Controller::NewReno(_) => Algorithm::NewReno,
            Controller::Cubic(_) => Algorithm::Cubic,
        }
    }

    /// Switches to `algorithm` mid-connection (`TCP_CONGESTION` on a
    /// connected socket). The congestion window and slow-start threshold
    /// carry over and the new controller's own state starts afresh from
    /// them — as Linux's `tcp_reinit_congestion_control` keeps `snd_cwnd`
    /// and `snd_ssthresh`. `sent_any`: the connection has sent data (the
    /// window no longer follows the MSS). The same algorithm: nothing
    /// changes.
    pub fn switch_to(&mut self, algorithm: Algorithm, mss: u32, sent_any: bool) {
        if self.algorithm() == algorithm {
            return;
        }
        let (cwnd, ssthresh) = (self.cwnd(), self.ssthresh());
        let mut next = Controller::new(algorithm, mss);
        match &mut next {
            Controller::NewReno(c) => c.resume(cwnd, ssthresh, sent_any),
            Controller::Cubic(c) => c.resume(cwnd, ssthresh, sent_any),
        }
        *self = next;
    }

    fn inner(&self) -> &dyn CongestionControl {
        match self {
            Controller::NewReno(c) => c,
            Controller::Cubic(c) => c,
        }
    }

    fn inner_mut(&mut self) -> &mut dyn CongestionControl {
        match self {
            Controller::NewReno(c) => c,
            Controller::Cubic(c) => c,
        }
    }
}

impl CongestionControl for Controller {
    fn on_ack(
        &mut self,
        now: Instant,
        bytes_acked: u32,
        flight: u32,
        srtt: Duration,
        min_rtt: Duration,
    ) {
        self.inner_mut()
            .on_ack(now, bytes_acked, flight, srtt, min_rtt);
    }
    fn on_congestion_event(&mut self, now: Instant, flight: u32) {
        self.inner_mut().on_congestion_event(now, flight);
    }
    fn on_recovery_exit(&mut self, now: Instant, flight: u32) {
        self.inner_mut().on_recovery_exit(now, flight);
    }
    fn on_rto(&mut self, now: Instant, flight: u32) {
        self.inner_mut().on_rto(now, flight);
    }
    fn on_idle_restart(&mut self, now: Instant) {
        self.inner_mut().on_idle_restart(now);
    }
    fn set_mss(&mut self, mss: u32) {
        self.inner_mut().set_mss(mss);
    }
    fn exit_slow_start(&mut self) {
        self.inner_mut().exit_slow_start();
    }
    fn cwnd(&self) -> u32 {
        self.inner().cwnd()
    }
    fn ssthresh(&self) -> u32 {
        self.inner().ssthresh()
    }
}
