//! Virtual links: rate, delay, jitter, a bounded queue, and seeded faults.
//!
//! The faults are the stack's fault model ([`softoe_stack::fault`]), the
//! one the engine's fault-injecting port uses on the real wire, so a rate
//! means the same in both. Each direction of each link draws from its own
//! stream, derived from the world's seed and the link's number, so adding
//! a node or a link does not change the faults another link sees.

use core::time::Duration;

use softoe_stack::Instant;
use softoe_stack::fault::{FaultDice, FaultRates};

/// A link configuration is unusable.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A probability is not within [0, 1].
    #[error("{name} must be a probability in [0, 1], got {value}")]
    Probability {
        /// Which field.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// A rate of zero bits per second would never deliver anything.
    #[error("the link rate must be above zero (omit it for an infinitely fast link)")]
    ZeroRate,
    /// A node or switch id does not exist.
    #[error("no such node or switch: {0}")]
    NoSuchEndpoint(usize),
    /// Every NIC of the node is already attached to something.
    #[error("every NIC of node {0} is already connected")]
    AlreadyConnected(usize),
}

/// One direction's behaviour (the same config is used both ways unless
/// [`World::connect_asym`](crate::World::connect_asym) says otherwise).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Serialization rate in bits per second; `None`: infinitely fast.
    pub rate_bps: Option<u64>,
    /// Propagation delay.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `0..jitter`; order is kept (FIFO)
    /// unless reordering picks the frame.
    pub jitter: Duration,
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub duplicate: f64,
    /// Probability a frame is held back by `reorder_delay` (overtaken).
    pub reorder: f64,
    /// How long a reordered frame is held back.
    pub reorder_delay: Duration,
    /// Probability 1–3 bits of one byte of a frame's IPv4 packet are flipped
    /// (non-IPv4 frames hit are dropped, as Ethernet's CRC would:
    /// [`Corruption::apply`](softoe_stack::fault::Corruption::apply)).
    pub corrupt: f64,
    /// Tail-drop when more than this many bytes wait for serialization.
    pub queue_limit_bytes: Option<usize>,
}

impl Default for LinkConfig {
    /// A perfect, infinitely fast link.
    fn default() -> LinkConfig {
        LinkConfig {
            rate_bps: None,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(100),
            corrupt: 0.0,
            queue_limit_bytes: None,
        }
    }
}

impl LinkConfig {
    /// A link of `rate_bps` with one-way `delay`.
    pub fn new(rate_bps: u64, delay: Duration) -> LinkConfig {
        LinkConfig {
            rate_bps: Some(rate_bps),
            delay,
            ..LinkConfig::default()
        }
    }

    /// Sets the loss probability.
    pub fn with_loss(mut self, p: f64) -> LinkConfig {
        self.loss = p;
        self
    }

    /// Sets the duplication probability.
    pub fn with_duplicate(mut self, p: f64) -> LinkConfig {
        self.duplicate = p;
        self
    }

    /// Sets the reordering probability and hold-back.
    pub fn with_reorder(mut self, p: f64, delay: Duration) -> LinkConfig {
        self.reorder = p;
        self.reorder_delay = delay;
        self
    }

    /// Sets the corruption probability.
    pub fn with_corrupt(mut self, p: f64) -> LinkConfig {
        self.corrupt = p;
        self
    }

    /// Sets the jitter.
    pub fn with_jitter(mut self, j: Duration) -> LinkConfig {
        self.jitter = j;
        self
    }

    /// Sets the queue limit.
    pub fn with_queue_limit(mut self, bytes: usize) -> LinkConfig {
        self.queue_limit_bytes = Some(bytes);
        self
    }

    /// The per-frame faults, as the stack's fault model takes them.
    pub fn rates(&self) -> FaultRates {
        FaultRates {
            loss: self.loss,
            corrupt: self.corrupt,
            duplicate: self.duplicate,
            reorder: self.reorder,
            jitter: self.jitter,
        }
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.rates()
            .validate()
            .map_err(|e| ConfigError::Probability {
                name: e.field,
                value: e.value,
            })?;
        if self.rate_bps == Some(0) {
            return Err(ConfigError::ZeroRate);
        }
        Ok(())
    }

    /// Time to put `bytes` on the wire (plus Ethernet's 20 bytes of preamble
    /// and inter-frame gap, so rates mean what they mean on real Ethernet).
    pub fn serialization(&self, bytes: usize) -> Duration {
        match self.rate_bps {
            Some(r) if r > 0 => {
                let bits = (bytes as u128 + 20) * 8;
                Duration::from_nanos(
                    u64::try_from(bits * 1_000_000_000 / u128::from(r)).unwrap_or(u64::MAX),
                )
            }
            _ => Duration::ZERO,
        }
    }
}

/// What happened on one direction of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkStats {
    /// Frames offered.
    pub frames: u64,
    /// Bytes offered.
    pub bytes: u64,
    /// Frames delivered (duplicates included).
    pub delivered: u64,
    /// Lost to random loss.
    pub lost: u64,
    /// Dropped by the queue limit.
    pub queue_drops: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Held back (reordered).
    pub reordered: u64,
    /// Corrupted.
    pub corrupted: u64,
    /// Larger than the MTU allows.
    pub oversize: u64,
    /// Lost because the link was cut ([`World::cut_link`](crate::World::cut_link)):
    /// put on it, or in flight, while cut.
    pub cut: u64,
}

/// What the link did to a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    Dropped,
    /// Deliver copies at these times (one, or two when duplicated).
    Deliver(Vec<Instant>),
}

/// One direction of a link.
#[derive(Debug)]
pub(crate) struct Direction {
    pub(crate) cfg: LinkConfig,
    dice: FaultDice,
    busy_until: Instant,
    last_arrival: Instant,
    pub(crate) stats: LinkStats,
}

impl Direction {
    pub(crate) fn new(cfg: LinkConfig, seed: u64, stream: u64) -> Direction {
        Direction {
            cfg,
            dice: FaultDice::new(cfg.rates(), seed, stream),
            busy_until: Instant::ZERO,
            last_arrival: Instant::ZERO,
            stats: LinkStats::default(),
        }
    }

    /// Decides a frame's fate and may corrupt it in place.
    pub(crate) fn transmit(&mut self, now: Instant, frame: &mut [u8]) -> Fate {
        self.stats.frames += 1;
        self.stats.bytes += frame.len() as u64;
        // Drawn first, whatever happens to the frame: a queue drop must not
        // shift the faults later frames get.
        let fate = self.dice.roll();
        let ser = self.cfg.serialization(frame.len());
        let start = self.busy_until.max(now);
        if let (Some(limit), Some(rate)) = (self.cfg.queue_limit_bytes, self.cfg.rate_bps) {
            let waiting = start.saturating_duration_since(now);
            let backlog = waiting.as_nanos() * u128::from(rate) / 8 / 1_000_000_000;
            if backlog as usize + frame.len() > limit {
                self.stats.queue_drops += 1;
                return Fate::Dropped;
            }
        }
        self.busy_until = start + ser;
        if fate.lose {
            self.stats.lost += 1;
            return Fate::Dropped;
        }
        if let Some(c) = fate.corrupt {
            self.stats.corrupted += 1;
            if !c.apply(frame) {
                return Fate::Dropped;
            }
        }
        let mut at = self.busy_until + self.cfg.delay + fate.jitter;
        if fate.reorder {
            self.stats.reordered += 1;
            at += self.cfg.reorder_delay;
        } else {
            // FIFO: jitter never reorders.
            at = at.max(self.last_arrival);
            self.last_arrival = at;
        }
        let mut times = vec![at];
        if fate.duplicate {
            self.stats.duplicated += 1;
            times.push(at + Duration::from_nanos(1));
        }
        self.stats.delivered += times.len() as u64;
        Fate::Deliver(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(LinkConfig::default().validate().is_ok());
        assert!(LinkConfig::default().with_loss(1.5).validate().is_err());
        assert!(
            LinkConfig::default()
                .with_loss(f64::NAN)
                .validate()
                .is_err()
        );
        assert!(LinkConfig::new(0, Duration::ZERO).validate().is_err());
        let e = LinkConfig::default()
            .with_corrupt(-0.1)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("corrupt"));
    }

    #[test]
    fn serialization_and_fifo() {
        // 1230 bytes + 20 overhead = 10,000 bits at 10 Mb/s = 1 ms.
        let cfg = LinkConfig::new(10_000_000, Duration::from_millis(5));
        assert_eq!(cfg.serialization(1230), Duration::from_millis(1));
        let mut d = Direction::new(cfg, 1, 0);
        let mut f = vec![0u8; 1230];
        let t0 = Instant::from_secs(1);
        assert_eq!(
            d.transmit(t0, &mut f),
            Fate::Deliver(vec![t0 + Duration::from_millis(6)])
        );
        // Back to back: queued behind the first.
        assert_eq!(
            d.transmit(t0, &mut f),
            Fate::Deliver(vec![t0 + Duration::from_millis(7)])
        );
    }

    #[test]
    fn queue_limit_tail_drops() {
        let cfg = LinkConfig::new(10_000_000, Duration::ZERO).with_queue_limit(3000);
        let mut d = Direction::new(cfg, 1, 0);
        let mut f = vec![0u8; 1230];
        let t = Instant::from_secs(1);
        let fates: Vec<_> = (0..5).map(|_| d.transmit(t, &mut f)).collect();
        assert_eq!(fates.iter().filter(|f| **f == Fate::Dropped).count(), 3);
        assert_eq!(d.stats.queue_drops, 3);
    }

    #[test]
    fn fault_rates_are_right() {
        let cfg = LinkConfig::default()
            .with_loss(0.1)
            .with_duplicate(0.05)
            .with_reorder(0.02, Duration::from_micros(10))
            .with_corrupt(0.03);
        let mut d = Direction::new(cfg, 42, 7);
        let n = 100_000u64;
        let mut original = vec![0u8; 64];
        original[12] = 0x08;
        let mut corrupted = 0;
        for _ in 0..n {
            let mut f = original.clone();
            if let Fate::Deliver(_) = d.transmit(Instant::ZERO, &mut f)
                && f != original
            {
                corrupted += 1;
            }
        }
        let near = |count: u64, p: f64, base: u64| {
            let want = p * base as f64;
            (count as f64 - want).abs() < 5.0 * (want * (1.0 - p)).sqrt() + 1.0
        };
        let s = d.stats;
        assert!(near(s.lost, 0.1, n), "{s:?}");
        let survivors = n - s.lost;
        assert!(near(s.duplicated, 0.05, survivors), "{s:?}");
        assert!(near(s.reordered, 0.02, survivors), "{s:?}");
        assert!(near(s.corrupted, 0.03, survivors), "{s:?}");
        assert!(corrupted <= s.corrupted && corrupted > 0);
    }

    #[test]
    fn same_seed_same_fates() {
        let cfg = LinkConfig::default()
            .with_loss(0.3)
            .with_jitter(Duration::from_micros(50));
        let run = |seed| {
            let mut d = Direction::new(cfg, seed, 3);
            (0..1000)
                .map(|_| d.transmit(Instant::ZERO, &mut [0u8; 10]))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }
}
