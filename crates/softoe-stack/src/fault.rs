//! What a bad wire does to a frame: a seeded model of loss, corruption,
//! duplication, reordering and jitter.
//!
//! Two parts of softoe break frames on purpose: the simulator's virtual
//! links and the engine's fault-injecting port (the kernels softoe runs on
//! have no `netem`). Both draw each frame's fate here, so "1 % loss" or
//! "corrupt 0.1 %" means the same thing in a simulation and on the real
//! wire, and a seed replays the same faults in either. What the fate
//! *does* with time — a link's serialization and queue, a port's holding
//! of frames until later ones pass — stays with each of them.
//!
//! Every frame costs the same six draws from its own [`Rand`] stream,
//! whatever the rates, so changing one probability never reshuffles the
//! choices the others make. Corruption flips 1 to 3 distinct bits of one
//! byte of the frame's IPv4 packet: what the Internet checksums cover and
//! always catch (a one's-complement sum misses some multi-word changes). A
//! frame that is not IPv4 is only protected by the Ethernet CRC, which
//! would drop it: [`Corruption::apply`] says so and the caller drops it.

use core::time::Duration;

use crate::rand::Rand;

/// How often each fault strikes, per frame.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultRates {
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame's IPv4 packet has 1 to 3 bits of one byte
    /// flipped.
    pub corrupt: f64,
    /// Probability a frame is delivered twice.
    pub duplicate: f64,
    /// Probability a frame is held back and overtaken.
    pub reorder: f64,
    /// Extra delay drawn uniformly from `0..=jitter` per frame.
    pub jitter: Duration,
}

/// A probability outside `0..=1` (or NaN): the field and its value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BadRate {
    /// `loss`, `corrupt`, `duplicate` or `reorder`.
    pub field: &'static str,
    /// The value given.
    pub value: f64,
}

impl FaultRates {
    /// Checks that every probability is a fraction in `0..=1`.
    pub fn validate(&self) -> Result<(), BadRate> {
        for (field, value) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(BadRate { field, value });
            }
        }
        Ok(())
    }

    /// Whether any fault can strike.
    pub fn is_active(&self) -> bool {
        self.loss > 0.0
            || self.corrupt > 0.0
            || self.duplicate > 0.0
            || self.reorder > 0.0
            || self.jitter > Duration::ZERO
    }
}

/// Which bits of which byte to flip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corruption {
    /// Picks the byte: its offset into the IPv4 packet, modulo its length.
    offset: u64,
    /// 1 to 3 distinct bits.
    mask: u8,
}

impl Corruption {
    /// Flips the bits in `frame` (an Ethernet frame). Returns `false`, with
    /// the frame untouched, when it carries no IPv4 packet: only the
    /// Ethernet CRC protects it, and the CRC would drop it.
    pub fn apply(&self, frame: &mut [u8]) -> bool {
        const ETH: usize = 14;
        if frame.get(12..14) != Some(&[0x08, 0x00][..]) || frame.len() <= ETH {
            return false;
        }
        let i = ETH + (self.offset % (frame.len() - ETH) as u64) as usize;
        if let Some(b) = frame.get_mut(i) {
            *b ^= self.mask;
        }
        true
    }

    /// The bits flipped.
    pub fn mask(&self) -> u8 {
        self.mask
    }
}

/// The fate of one frame, drawn before it is touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fate {
    /// The frame vanishes (nothing else applies).
    pub lose: bool,
    /// The frame is corrupted this way.
    pub corrupt: Option<Corruption>,
    /// A second copy follows the first.
    pub duplicate: bool,
    /// The frame is held back and overtaken.
    pub reorder: bool,
    /// Extra delay.
    pub jitter: Duration,
}

/// One direction's generator and rates.
#[derive(Clone, Debug)]
pub struct FaultDice {
    rng: Rand,
    rates: FaultRates,
}

impl FaultDice {
    /// Dice for `rates`, on stream `stream` of `seed`: each direction of
    /// each link or port has a stream of its own, so adding one does not
    /// change the faults another sees.
    pub fn new(rates: FaultRates, seed: u64, stream: u64) -> FaultDice {
        // Mix the stream in with a round of the generator itself, so
        // neighbouring streams start far apart.
        let mut mix = Rand::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        FaultDice {
            rng: Rand::new(mix.next_u64()),
            rates,
        }
    }

    /// The rates.
    pub fn rates(&self) -> &FaultRates {
        &self.rates
    }

    fn chance(&mut self, p: f64) -> bool {
        // 53 random bits as a fraction in [0, 1): p = 0 never, p = 1 always.
        let x = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        x < p
    }

    /// The next frame's fate: always six draws.
    pub fn roll(&mut self) -> Fate {
        let lose = self.chance(self.rates.loss);
        let corrupt = self.chance(self.rates.corrupt);
        let detail = self.rng.next_u64();
        let duplicate = self.chance(self.rates.duplicate);
        let reorder = self.chance(self.rates.reorder);
        let jitter = self.rng.next_u64();
        let jitter = match u64::try_from(self.rates.jitter.as_nanos()).unwrap_or(u64::MAX) {
            0 => Duration::ZERO,
            j => Duration::from_nanos(jitter % j.saturating_add(1)),
        };
        Fate {
            lose,
            corrupt: corrupt.then(|| Corruption {
                offset: detail & 0xffff_ffff,
                mask: flip_mask(detail >> 32),
            }),
            duplicate,
            reorder,
            jitter,
        }
    }
}

/// A mask with 1 to 3 distinct bits set, from random bits `r`.
fn flip_mask(r: u64) -> u8 {
    let want = 1 + (r % 3) as u32;
    let mut mask = 0u8;
    let mut bits = r >> 2;
    for _ in 0..10 {
        mask |= 1 << (bits & 7);
        bits >>= 3;
        if mask.count_ones() == want {
            return mask;
        }
    }
    // Ten draws repeating the same bits: fill from the bottom.
    let mut i = 0;
    while mask.count_ones() < want && i < 8 {
        mask |= 1 << i;
        i += 1;
    }
    mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_frame(len: usize) -> alloc::vec::Vec<u8> {
        let mut f = alloc::vec![0u8; len];
        f[12] = 0x08;
        f
    }

    #[test]
    fn rates_are_within_statistical_bounds_and_draws_are_fixed() {
        let rates = FaultRates {
            loss: 0.1,
            corrupt: 0.03,
            duplicate: 0.05,
            reorder: 0.02,
            jitter: Duration::from_micros(50),
        };
        let mut d = FaultDice::new(rates, 42, 7);
        let n = 100_000u32;
        let (mut lost, mut corrupt, mut dup, mut reo) = (0u32, 0u32, 0u32, 0u32);
        let mut max_jitter = Duration::ZERO;
        for _ in 0..n {
            let f = d.roll();
            lost += u32::from(f.lose);
            corrupt += u32::from(f.corrupt.is_some());
            dup += u32::from(f.duplicate);
            reo += u32::from(f.reorder);
            max_jitter = max_jitter.max(f.jitter);
            if let Some(c) = f.corrupt {
                assert!((1..=3).contains(&c.mask().count_ones()));
            }
        }
        let near = |count: u32, p: f64| {
            let want = p * f64::from(n);
            (f64::from(count) - want).abs() < 5.0 * (want * (1.0 - p)).sqrt() + 1.0
        };
        assert!(near(lost, 0.1) && near(corrupt, 0.03), "{lost} {corrupt}");
        assert!(near(dup, 0.05) && near(reo, 0.02), "{dup} {reo}");
        assert!(max_jitter <= Duration::from_micros(50) && max_jitter > Duration::ZERO);
        // Another loss rate, the same other choices, frame by frame.
        let mut a = FaultDice::new(FaultRates { loss: 0.0, ..rates }, 42, 7);
        let mut b = FaultDice::new(FaultRates { loss: 0.5, ..rates }, 42, 7);
        for _ in 0..1000 {
            let (x, y) = (a.roll(), b.roll());
            assert_eq!(
                (x.corrupt, x.duplicate, x.jitter),
                (y.corrupt, y.duplicate, y.jitter)
            );
        }
    }

    #[test]
    fn streams_and_seeds_differ_and_replay() {
        let rates = FaultRates {
            loss: 0.3,
            ..FaultRates::default()
        };
        let run = |seed, stream| {
            let mut d = FaultDice::new(rates, seed, stream);
            (0..200)
                .map(|_| d.roll().lose)
                .collect::<alloc::vec::Vec<_>>()
        };
        assert_eq!(run(9, 1), run(9, 1));
        assert_ne!(run(9, 1), run(10, 1));
        assert_ne!(run(9, 1), run(9, 2));
    }

    #[test]
    fn corruption_hits_only_the_ipv4_packet() {
        let c = Corruption {
            offset: 1_000_003,
            mask: 0b101,
        };
        let mut f = ipv4_frame(60);
        let before = f.clone();
        assert!(c.apply(&mut f));
        let changed: alloc::vec::Vec<usize> = (0..60).filter(|&i| f[i] != before[i]).collect();
        assert_eq!(changed.len(), 1);
        assert!(changed[0] >= 14, "the Ethernet header is the CRC's");
        assert_eq!(f[changed[0]] ^ before[changed[0]], 0b101);
        // ARP, or a runt: the CRC would drop it.
        let mut arp = alloc::vec![0u8; 60];
        arp[12] = 0x08;
        arp[13] = 0x06;
        let untouched = arp.clone();
        assert!(!c.apply(&mut arp));
        assert_eq!(arp, untouched);
        assert!(!c.apply(&mut ipv4_frame(14)));
    }

    #[test]
    fn bad_rates_are_named() {
        let r = FaultRates {
            corrupt: -0.1,
            ..FaultRates::default()
        };
        assert_eq!(r.validate().unwrap_err().field, "corrupt");
        let r = FaultRates {
            loss: f64::NAN,
            ..FaultRates::default()
        };
        assert_eq!(r.validate().unwrap_err().field, "loss");
        assert!(FaultRates::default().validate().is_ok());
        assert!(!FaultRates::default().is_active());
    }
}
