//! The loss × RTT grid: one bulk transfer per point, set beside what
//! loss-based TCP can reach there.
//!
//! With random loss `p` and round trip `RTT`, a Reno-like sender averages
//! about 1.22 · MSS / (RTT · √p) (Mathis, Semke, Mahdavi and Ott, 1997;
//! CUBIC in its Reno-friendly region does too). That is a bound only while
//! loss is what holds the sender back: where it exceeds the link's payload
//! rate or one socket buffer per round trip, the link or the window binds
//! and the Mathis ratio means nothing ([`Limit`]).
//!
//! Each point moves enough bytes to cover many round trips and many loss
//! events at the rate the model expects ([`Sizing`]), so slow start is a
//! small part of it and the ratio is not one lucky or unlucky episode,
//! while the whole grid still runs in seconds.

use core::time::Duration;

use crate::scenario::{BuildError, Transfer, TransferReport};

/// IPv4 and TCP headers with the timestamp option (on by default), bytes.
const HEADERS: usize = 20 + 20 + 12;
/// What the simulated link charges per frame beyond the IP packet: the
/// Ethernet header and the preamble and inter-frame gap (it does not model
/// the frame check sequence).
const FRAMING: usize = 14 + 20;

/// 1.22 · MSS / (RTT · √p) in bits per second (Mathis et al.); infinite
/// without loss or without delay.
pub fn mathis_bps(mss: u32, rtt: Duration, loss: f64) -> f64 {
    let denom = rtt.as_secs_f64() * loss.sqrt();
    if denom > 0.0 {
        1.22 * f64::from(mss) * 8.0 / denom
    } else {
        f64::INFINITY
    }
}

/// What bounds the goodput at a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// Loss: the Mathis bound is the lowest, and the ratio to it applies.
    Loss,
    /// The link's payload rate is below the Mathis bound.
    Link,
    /// One socket buffer per round trip is below the Mathis bound.
    Window,
}

impl Limit {
    /// `loss`, `link` or `window`.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Loss => "loss",
            Limit::Link => "link",
            Limit::Window => "window",
        }
    }
}

/// The three ceilings at one point, bits per second of payload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Payload bytes per segment.
    pub mss: u32,
    /// The round trip the model uses (the link's, both ways, no queueing).
    pub rtt: Duration,
    /// The Mathis bound.
    pub mathis_bps: f64,
    /// The link rate less headers and framing.
    pub link_bps: f64,
    /// One socket buffer per round trip.
    pub window_bps: f64,
}

impl Model {
    /// The model for transfer `t`, whose segments carry `mss` bytes.
    pub fn new(t: &Transfer, mss: u32) -> Model {
        let rtt = t.delay * 2;
        let frame = (t.mtu + FRAMING) as f64;
        let window_bps = if rtt > Duration::ZERO {
            t.buffer as f64 * 8.0 / rtt.as_secs_f64()
        } else {
            f64::INFINITY
        };
        Model {
            mss,
            rtt,
            mathis_bps: mathis_bps(mss, rtt, t.loss),
            link_bps: t.rate_bps as f64 * f64::from(mss) / frame,
            window_bps,
        }
    }

    /// The segment size a transfer's settings give (MTU less IPv4 and TCP
    /// headers with timestamps).
    pub fn expected_mss(t: &Transfer) -> u32 {
        u32::try_from(t.mtu.saturating_sub(HEADERS)).unwrap_or(u32::MAX)
    }

    /// The lowest of the three ceilings.
    pub fn bound_bps(&self) -> f64 {
        self.mathis_bps.min(self.link_bps).min(self.window_bps)
    }

    /// Which ceiling is the lowest (the link or the window when they tie
    /// with the Mathis bound: it then no longer describes the sender).
    pub fn limit(&self) -> Limit {
        if self.link_bps <= self.mathis_bps && self.link_bps <= self.window_bps {
            Limit::Link
        } else if self.window_bps <= self.mathis_bps {
            Limit::Window
        } else {
            Limit::Loss
        }
    }
}

/// How many bytes a grid point moves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sizing {
    /// Round trips to cover at the expected goodput.
    pub rtts: u32,
    /// Loss events to expect (segments ≥ this ÷ the loss rate).
    pub losses: u32,
    /// Never fewer bytes.
    pub min_bytes: u64,
    /// Never more bytes (bounds the wall time of a point).
    pub max_bytes: u64,
}

impl Default for Sizing {
    /// 500 round trips and 200 losses, 1 MiB to 512 MiB.
    fn default() -> Sizing {
        Sizing {
            rtts: 500,
            losses: 200,
            min_bytes: 1 << 20,
            max_bytes: 512 << 20,
        }
    }
}

impl Sizing {
    /// Bytes for a point with `model` at loss `loss`: enough for the round
    /// trips at the bound the model expects, and for the losses, within
    /// the limits, rounded up to a whole segment.
    pub fn bytes(&self, model: &Model, loss: f64) -> u64 {
        let by_rtts = model.bound_bps() / 8.0 * model.rtt.as_secs_f64() * f64::from(self.rtts);
        let by_losses = if loss > 0.0 {
            f64::from(self.losses) / loss * f64::from(model.mss)
        } else {
            0.0
        };
        let want = by_rtts.max(by_losses);
        let want = if want.is_finite() {
            want.min(self.max_bytes as f64) as u64
        } else {
            self.max_bytes
        };
        let mss = u64::from(model.mss.max(1));
        want.div_ceil(mss)
            .saturating_mul(mss)
            .clamp(self.min_bytes, self.max_bytes.max(self.min_bytes))
    }
}

/// One grid point after its run.
#[derive(Clone, Copy, Debug)]
pub struct PointReport {
    /// The model (with the segment size the sender used).
    pub model: Model,
    /// The transfer's outcome.
    pub report: TransferReport,
}

impl PointReport {
    /// Goodput over the Mathis bound, where loss is what binds.
    pub fn of_mathis(&self) -> Option<f64> {
        (self.model.limit() == Limit::Loss).then(|| self.report.goodput_bps / self.model.mathis_bps)
    }

    /// Goodput over the lowest ceiling.
    pub fn of_bound(&self) -> f64 {
        self.report.goodput_bps / self.model.bound_bps()
    }
}

/// Runs transfer `t` (its `bytes` chosen by `sizing` unless `fixed_bytes`)
/// for at most `limit` of virtual time.
pub fn run_point(
    t: Transfer,
    sizing: &Sizing,
    fixed_bytes: Option<u64>,
    limit: Duration,
) -> Result<PointReport, BuildError> {
    let model = Model::new(&t, Model::expected_mss(&t));
    let bytes = fixed_bytes.unwrap_or_else(|| sizing.bytes(&model, t.loss));
    let report = Transfer { bytes, ..t }.run_for(limit)?;
    let mss = report.sender.map_or(model.mss, |i| i.snd_mss);
    Ok(PointReport {
        model: Model::new(&report.transfer, mss),
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(loss: f64, rtt_us: u64) -> Transfer {
        Transfer {
            rate_bps: 10_000_000_000,
            delay: Duration::from_nanos(rtt_us * 500),
            loss,
            ..Transfer::default()
        }
    }

    #[test]
    fn mathis_and_the_limits() {
        // 1.22 · 1448 · 8 / (500 µs · 0.1) = 282.65 Mb/s.
        let m = mathis_bps(1448, Duration::from_micros(500), 0.01);
        assert!((m - 282.6496e6).abs() < 1.0, "{m}");
        assert_eq!(mathis_bps(1448, Duration::ZERO, 0.01), f64::INFINITY);
        assert_eq!(
            mathis_bps(1448, Duration::from_micros(1), 0.0),
            f64::INFINITY
        );

        let t = at(0.001, 10);
        assert_eq!(Model::expected_mss(&t), 1448);
        let m = Model::new(&t, 1448);
        // 44.7 Gb/s of Mathis bound on a 10 Gb/s link: the link binds.
        assert_eq!(m.limit(), Limit::Link);
        assert!((m.link_bps - 10e9 * 1448.0 / 1534.0).abs() < 1.0);
        assert_eq!(m.bound_bps(), m.link_bps);
        // 0.45 Gb/s at 100 µs and 10 %: loss binds.
        let m = Model::new(&at(0.1, 100), 1448);
        assert_eq!(m.limit(), Limit::Loss);
        assert_eq!(m.bound_bps(), m.mathis_bps);
        // A 64 KiB buffer per 100 ms is 5.2 Mb/s: above the Mathis bound
        // at 0.1 % (4.5 Mb/s), below it at 0.01 % (14.1 Mb/s).
        let small = |loss| Transfer {
            buffer: 64 << 10,
            ..at(loss, 100_000)
        };
        assert_eq!(Model::new(&small(0.001), 1448).limit(), Limit::Loss);
        assert_eq!(Model::new(&small(0.0001), 1448).limit(), Limit::Window);
        // No loss: never the Mathis bound.
        assert_ne!(Model::new(&at(0.0, 100), 1448).limit(), Limit::Loss);
    }

    #[test]
    fn sizing_covers_round_trips_and_losses_within_limits() {
        let s = Sizing::default();
        // 10 % at 100 µs: 200 losses need 2,000 segments (2.9 MB); 500
        // round trips at 0.45 Gb/s only 2.8 MB.
        let m = Model::new(&at(0.1, 100), 1448);
        assert_eq!(s.bytes(&m, 0.1), 2000 * 1448);
        // 0.1 % at 10 µs is link-bound: 200,000 segments (290 MB) for the
        // losses, more than 500 round trips' 5.9 MB.
        let m = Model::new(&at(0.001, 10), 1448);
        assert_eq!(s.bytes(&m, 0.001), 200_000 * 1448);
        // Loss-free: round trips only (500 of 10 µs at 9.44 Gb/s), and
        // at least the minimum.
        let m = Model::new(&at(0.0, 10), 1448);
        assert_eq!(s.bytes(&m, 0.0), 4075 * 1448);
        let m = Model::new(&at(0.0, 1), 1448);
        assert_eq!(s.bytes(&m, 0.0), 1 << 20);
        // The cap holds, and bytes are whole segments.
        let tight = Sizing {
            max_bytes: 10 << 20,
            ..s
        };
        assert_eq!(
            tight.bytes(&Model::new(&at(0.0001, 1000), 1448), 0.0001),
            10 << 20
        );
        let m = Model::new(&at(0.02, 1000), 1448);
        assert_eq!(s.bytes(&m, 0.02) % 1448, 0);
    }

    #[test]
    fn a_point_runs_and_reports_its_ratio() {
        let t = Transfer {
            rate_bps: 1_000_000_000,
            delay: Duration::from_micros(500),
            loss: 0.05,
            ..Transfer::default()
        };
        let p = run_point(
            t,
            &Sizing::default(),
            Some(256 << 10),
            Duration::from_secs(600),
        )
        .unwrap();
        assert!(p.report.intact);
        assert_eq!(p.model.mss, 1448);
        assert_eq!(p.model.limit(), Limit::Loss);
        let r = p.of_mathis().unwrap();
        assert!(r > 0.0 && r == p.of_bound(), "{r}");
        // A time limit the transfer cannot meet: not intact, and the
        // goodput is what arrived over the limit, not over zero time.
        let p = run_point(
            t,
            &Sizing::default(),
            Some(64 << 20),
            Duration::from_millis(50),
        )
        .unwrap();
        assert!(!p.report.intact);
        assert!(p.report.goodput_bps < 1e9, "{}", p.report.goodput_bps);
    }
}
