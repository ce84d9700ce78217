//! Statistics for figures that hold still: medians with distribution-free
//! confidence intervals, ratios of interleaved pairs, verdicts that say
//! "within noise" when the noise decides, and two modes shown as two.
//!
//! Why these and not a mean and a standard deviation: on a shared 2-core
//! machine a run's figure is not normal. A round trip lands on one of two
//! values depending on where the scheduler puts two threads, and a bulk run
//! loses a third of its goodput whenever something else wakes up. The
//! median ignores the odd slow run, and its interval from order statistics
//! (the binomial rule: the true median lies between the j-th and k-th of n
//! sorted samples with a probability that depends on n alone) assumes
//! nothing about the shape. Softoe and Linux are measured in the same round
//! one after the other ([`order`]), so a ratio is taken pair by pair
//! ([`paired_ratios`]): whatever slowed the machine in one round slowed
//! both sides of its pair, and the ratio's interval is narrower than the
//! two medians' intervals would suggest.

use std::time::Duration;

use serde::Serialize;

/// The confidence the intervals aim for.
pub const LEVEL: f64 = 0.95;

/// The median of `xs` (NaNs ignored), or `None` when there is none.
pub fn median(xs: &[f64]) -> Option<f64> {
    let v = sorted(xs);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// P(X ≤ k) for X ~ Binomial(n, ½), summed in logs so that large `n` does
/// not underflow.
fn binom_half_cdf(k: usize, n: usize) -> f64 {
    if k >= n {
        return 1.0;
    }
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_c = 0.0f64; // ln C(n, 0)
    let mut p = 0.0;
    for i in 0..=k {
        if i > 0 {
            ln_c += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        p += (ln_c + ln_half_n).exp();
    }
    p.min(1.0)
}

/// A median with its interval: what every repeated figure reports.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// Samples.
    pub n: usize,
    pub median: f64,
    /// The interval that holds the true median with probability
    /// `coverage` (order statistics: no assumption about the shape).
    pub lo: f64,
    pub hi: f64,
    /// What the interval achieves: [`LEVEL`] or just above it from six
    /// samples on; with five or fewer, the whole range, whose coverage is
    /// 1 − 2⁻⁽ⁿ⁻¹⁾ (94 % at five, 75 % at three, 0 at one).
    pub coverage: f64,
    pub min: f64,
    pub max: f64,
}

impl Estimate {
    /// No samples: every figure zero, covering nothing (what a report
    /// shows for a measurement that did not happen).
    pub const EMPTY: Estimate = Estimate {
        n: 0,
        median: 0.0,
        lo: 0.0,
        hi: 0.0,
        coverage: 0.0,
        min: 0.0,
        max: 0.0,
    };

    /// The estimate of `xs`, or `None` for no samples (NaNs ignored).
    pub fn of(xs: &[f64]) -> Option<Estimate> {
        let v = sorted(xs);
        let n = v.len();
        let median = median(&v)?;
        // The widest symmetric pair of ranks (j, n−1−j, 0-based) whose
        // coverage 1 − 2·P(X ≤ j) still reaches LEVEL; the whole range when
        // even that falls short.
        let mut j = 0;
        while 2 * (j + 1) + 1 < n && 1.0 - 2.0 * binom_half_cdf(j + 1, n) >= LEVEL {
            j += 1;
        }
        let coverage = if n == 1 {
            0.0
        } else {
            1.0 - 2.0 * binom_half_cdf(j, n)
        };
        Some(Estimate {
            n,
            median,
            lo: v[j],
            hi: v[n - 1 - j],
            coverage,
            min: v[0],
            max: v[n - 1],
        })
    }

    /// The interval's larger half-width as a share of the median (0 for a
    /// zero median).
    pub fn rel_half_width(&self) -> f64 {
        if self.median == 0.0 {
            return 0.0;
        }
        (self.hi - self.median).max(self.median - self.lo) / self.median.abs()
    }

    /// The spread of all samples, (max − min) ÷ median.
    pub fn rel_spread(&self) -> f64 {
        if self.median == 0.0 {
            return 0.0;
        }
        (self.max - self.min) / self.median.abs()
    }
}

/// `a[i] ÷ b[i]` for every round where both were measured and `b[i]` is
/// positive: the ratio of an interleaved pair.
pub fn paired_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter(|&(x, y)| *y > 0.0 && x.is_finite() && y.is_finite())
        .map(|(x, y)| x / y)
        .collect()
}

/// The ratio of two medians measured apart (not in pairs): the median's
/// ratio, and the widest interval the two intervals allow — `a.lo ÷ b.hi`
/// to `a.hi ÷ b.lo` — which holds the true ratio at least as often as both
/// intervals hold theirs (coverage `a + b − 1`, Bonferroni); `n` is the
/// smaller count. A `b` interval reaching zero gives an unbounded top.
pub fn ratio_of(a: &Estimate, b: &Estimate) -> Estimate {
    let div = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::INFINITY };
    Estimate {
        n: a.n.min(b.n),
        median: div(a.median, b.median),
        lo: div(a.lo, b.hi),
        hi: div(a.hi, b.lo),
        coverage: (a.coverage + b.coverage - 1.0).max(0.0),
        min: div(a.min, b.max),
        max: div(a.max, b.min),
    }
}

/// Which way a target points.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    AtLeast(f64),
    AtMost(f64),
}

/// What a target's measurement says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Met,
    Missed,
    /// The interval straddles the goal: this run cannot tell.
    WithinNoise,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "missed",
            Verdict::WithinNoise => "within noise",
        }
    }
}

/// The fewest samples whose interval may decide a verdict: with fewer the
/// range covers the median less than three times in four.
pub const MIN_DECIDING: usize = 3;

/// The verdict on `goal` from an estimate: met or missed only where the
/// whole interval lies on one side of the goal, and only from
/// [`MIN_DECIDING`] samples on.
pub fn verdict(goal: Goal, e: &Estimate) -> Verdict {
    if e.n < MIN_DECIDING {
        return Verdict::WithinNoise;
    }
    let (good, bad) = match goal {
        Goal::AtLeast(g) => (e.lo >= g, e.hi < g),
        Goal::AtMost(g) => (e.hi <= g, e.lo > g),
    };
    match (good, bad) {
        (true, _) => Verdict::Met,
        (_, true) => Verdict::Missed,
        _ => Verdict::WithinNoise,
    }
}

/// The order in which `k` interleaved sides run in round `round`: side
/// `round mod k` first, then the others in turn. Every side takes every
/// place equally often over `k` rounds, so neither a warm first place nor
/// a drift across the round favours one; for two sides it is A B, B A, A B…
pub fn order(round: usize, k: usize) -> Vec<usize> {
    (0..k).map(|j| (round + j) % k).collect()
}

/// When a repeated measurement stops.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StopRule {
    /// Rounds always run.
    pub min_rounds: usize,
    /// Rounds never exceeded.
    pub max_rounds: usize,
    /// Stop once every watched interval's half-width is within this share
    /// of its median (0.03: ±3 %).
    pub rel_width: f64,
    /// Stop starting rounds after this long.
    pub max_time: Duration,
}

/// Why a repeated measurement stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stopped {
    /// Every watched interval within the width.
    Converged,
    /// The cap on rounds.
    Rounds,
    /// The cap on time.
    Time,
}

impl StopRule {
    /// Whether to stop after `rounds` rounds taking `elapsed`, with these
    /// estimates watched; `None` runs another round.
    pub fn stop(&self, rounds: usize, elapsed: Duration, watched: &[Estimate]) -> Option<Stopped> {
        if rounds < self.min_rounds.max(1) {
            return None;
        }
        // An interval from fewer than three samples says nothing (one
        // sample's is a point): only the caps stop those.
        if watched
            .iter()
            .all(|e| e.n >= MIN_DECIDING && e.rel_half_width() <= self.rel_width)
        {
            Some(Stopped::Converged)
        } else if rounds >= self.max_rounds {
            Some(Stopped::Rounds)
        } else if elapsed >= self.max_time {
            Some(Stopped::Time)
        } else {
            None
        }
    }
}

/// One of two modes: its median and how many samples fell in it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Mode {
    pub median: f64,
    pub count: usize,
}

/// A figure that fell into two groups, each reported on its own.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Modes {
    pub low: Mode,
    pub high: Mode,
}

/// The two modes of `xs` where it has two, else `None`.
///
/// The samples (positive, at least six) are split in two where the split
/// leaves the least spread within each group, in logs (so that 27 µs
/// against 331 µs and 2.7 against 3.3 weigh by ratio, not by difference).
/// The split is a second mode only when each side holds at least a sixth of
/// the samples and two of them, the gap between the groups is at least
/// twice the larger group's own standard deviation, and the groups' medians
/// differ by at least 1.3×: a single normal or long-tailed figure split
/// this way leaves a gap a fraction of its groups' spread.
pub fn modes(xs: &[f64]) -> Option<Modes> {
    let v: Vec<f64> = sorted(xs).into_iter().filter(|&x| x > 0.0).collect();
    let n = v.len();
    if n < 6 {
        return None;
    }
    let l: Vec<f64> = v.iter().map(|x| x.ln()).collect();
    let least = (n / 6).max(2);
    let sse = |s: &[f64]| {
        let m = s.iter().sum::<f64>() / s.len() as f64;
        s.iter().map(|x| (x - m).powi(2)).sum::<f64>()
    };
    let cut = (least..=n - least).min_by(|&a, &b| {
        let ca = sse(&l[..a]) + sse(&l[a..]);
        let cb = sse(&l[..b]) + sse(&l[b..]);
        ca.total_cmp(&cb)
    })?;
    let sd = |s: &[f64]| (sse(s) / s.len() as f64).sqrt();
    let gap = l[cut] - l[cut - 1];
    let (lo, hi) = (&v[..cut], &v[cut..]);
    let (mlo, mhi) = (median(lo)?, median(hi)?);
    let within = sd(&l[..cut]).max(sd(&l[cut..]));
    (gap >= 2.0 * within && mhi >= 1.3 * mlo).then_some(Modes {
        low: Mode {
            median: mlo,
            count: lo.len(),
        },
        high: Mode {
            median: mhi,
            count: hi.len(),
        },
    })
}

/// A repeated figure as reports carry it: the estimate, its modes where it
/// has two, and every sample in the order measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figure {
    #[serde(flatten)]
    pub estimate: Estimate,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modes: Option<Modes>,
    pub samples: Vec<f64>,
}

impl Figure {
    /// The figure of `xs`, however many: [`Estimate::EMPTY`] for none.
    pub fn of_all(xs: impl Iterator<Item = f64>) -> Figure {
        let v: Vec<f64> = xs.collect();
        Figure::of(&v).unwrap_or(Figure {
            estimate: Estimate::EMPTY,
            modes: None,
            samples: v,
        })
    }

    /// The figure of `xs`, or `None` for no samples.
    pub fn of(xs: &[f64]) -> Option<Figure> {
        Some(Figure {
            estimate: Estimate::of(xs)?,
            modes: modes(xs),
            samples: xs.to_vec(),
        })
    }

    /// "12.3 ±2.1 %", or the two modes: "27.5 (6) | 331 (4)"; `fmt` prints
    /// one value.
    pub fn show(&self, fmt: impl Fn(f64) -> String) -> String {
        match self.modes {
            Some(m) => format!(
                "{} ({}) | {} ({})",
                fmt(m.low.median),
                m.low.count,
                fmt(m.high.median),
                m.high.count
            ),
            None => format!(
                "{} ±{:.0} %",
                fmt(self.estimate.median),
                self.estimate.rel_half_width() * 100.0
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A deterministic pseudo-random sequence in [0, 1) (xorshift).
    fn uniform(seed: u64, n: usize) -> Vec<f64> {
        let mut s = seed.max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect()
    }

    /// Normal samples (Box–Muller) around `mu` with deviation `sd`.
    fn normal(seed: u64, n: usize, mu: f64, sd: f64) -> Vec<f64> {
        let u = uniform(seed, 2 * n);
        (0..n)
            .map(|i| {
                let (a, b) = (u[2 * i].max(1e-12), u[2 * i + 1]);
                mu + sd * (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
            })
            .collect()
    }

    #[test]
    fn medians_of_odd_even_and_empty_sets() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
    }

    #[test]
    fn the_binomial_tail_matches_closed_forms() {
        // P(X ≤ 0) = 2⁻ⁿ; P(X ≤ 2) for n = 5 is (1 + 5 + 10) / 32.
        assert!((binom_half_cdf(0, 5) - 1.0 / 32.0).abs() < 1e-12);
        assert!((binom_half_cdf(2, 5) - 0.5).abs() < 1e-12);
        assert!((binom_half_cdf(1, 10) - 11.0 / 1024.0).abs() < 1e-12);
        // Large n does not underflow: the median of 2000 is at ½.
        assert!((binom_half_cdf(1000, 2001) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn intervals_take_the_ranks_the_binomial_rule_gives() {
        // Five samples: the whole range, coverage 1 − 2/32 = 93.75 %.
        let e = Estimate::of(&[5.0, 1.0, 4.0, 2.0, 3.0]).unwrap();
        assert_eq!((e.lo, e.median, e.hi), (1.0, 3.0, 5.0));
        assert!((e.coverage - 0.9375).abs() < 1e-12);
        // Ten: ranks 2 and 9 (1-based), coverage 1 − 2·11/1024 = 97.9 %.
        let xs: Vec<f64> = (1..=10).map(f64::from).collect();
        let e = Estimate::of(&xs).unwrap();
        assert_eq!((e.lo, e.hi), (2.0, 9.0));
        assert!((e.coverage - (1.0 - 22.0 / 1024.0)).abs() < 1e-12);
        // Every interval reaches the level from six samples on, and is the
        // narrowest that does (one rank further in falls short).
        for n in 6u32..60 {
            let xs: Vec<f64> = (0..n).map(f64::from).collect();
            let e = Estimate::of(&xs).unwrap();
            assert!(e.coverage >= LEVEL, "n {n}: {e:?}");
            let j = e.lo as usize;
            assert!(
                1.0 - 2.0 * binom_half_cdf(j + 1, n as usize) < LEVEL,
                "n {n}"
            );
        }
        // One sample: a point, which covers nothing.
        let e = Estimate::of(&[7.0]).unwrap();
        assert_eq!((e.lo, e.hi, e.coverage), (7.0, 7.0, 0.0));
        assert!(Estimate::of(&[]).is_none());
    }

    #[test]
    fn the_interval_holds_the_true_median_as_often_as_it_says() {
        // 400 sets of 15 normal samples around 10: the interval (coverage
        // 96.5 % at n 15) holds 10 in 93–99 % of them.
        let held = (0..400)
            .filter(|&s| {
                let e = Estimate::of(&normal(s + 1, 15, 10.0, 1.0)).unwrap();
                e.lo <= 10.0 && 10.0 <= e.hi
            })
            .count();
        assert!((372..=396).contains(&held), "{held} of 400");
    }

    #[test]
    fn widths_and_spreads_are_shares_of_the_median() {
        let e = Estimate::of(&[9.0, 10.0, 12.0]).unwrap();
        assert!((e.rel_half_width() - 0.2).abs() < 1e-12);
        assert!((e.rel_spread() - 0.3).abs() < 1e-12);
    }

    #[test]
    fn a_ratio_of_apart_medians_takes_the_widest_interval() {
        let a = Estimate::of(&[10.0, 12.0, 14.0]).unwrap();
        let b = Estimate::of(&[4.0, 5.0, 6.0]).unwrap();
        let r = ratio_of(&a, &b);
        assert!((r.median - 2.4).abs() < 1e-12);
        assert!((r.lo - 10.0 / 6.0).abs() < 1e-12 && (r.hi - 3.5).abs() < 1e-12);
        assert!((r.coverage - 0.5).abs() < 1e-12, "75 % + 75 % − 1");
        assert_eq!(r.n, 3);
        let zero = Estimate::of(&[0.0, 1.0, 2.0]).unwrap();
        assert!(ratio_of(&a, &zero).hi.is_infinite());
    }

    #[test]
    fn ratios_pair_rounds_and_skip_missing_ones() {
        let r = paired_ratios(&[2.0, 3.0, 4.0, 1.0], &[1.0, 0.0, 2.0, f64::NAN]);
        assert_eq!(r, [2.0, 2.0]);
    }

    #[test]
    fn a_verdict_needs_the_whole_interval_on_one_side() {
        let e = |xs: &[f64]| Estimate::of(xs).unwrap();
        let at_least = Goal::AtLeast(1.0);
        assert_eq!(verdict(at_least, &e(&[1.1, 1.2, 1.3])), Verdict::Met);
        assert_eq!(verdict(at_least, &e(&[0.7, 0.8, 0.9])), Verdict::Missed);
        assert_eq!(
            verdict(at_least, &e(&[0.9, 1.2, 1.3])),
            Verdict::WithinNoise
        );
        // On the goal counts as met for ≥ and ≤ alike.
        assert_eq!(verdict(at_least, &e(&[1.0, 1.0, 1.0])), Verdict::Met);
        let at_most = Goal::AtMost(0.8);
        assert_eq!(verdict(at_most, &e(&[0.5, 0.6, 0.8])), Verdict::Met);
        assert_eq!(verdict(at_most, &e(&[0.81, 0.9, 2.0])), Verdict::Missed);
        assert_eq!(verdict(at_most, &e(&[0.7, 0.9, 2.0])), Verdict::WithinNoise);
        // Two samples never decide, however far from the goal.
        assert_eq!(verdict(at_least, &e(&[5.0, 6.0])), Verdict::WithinNoise);
    }

    #[test]
    fn interleaving_puts_every_side_in_every_place() {
        assert_eq!(order(0, 2), [0, 1]);
        assert_eq!(order(1, 2), [1, 0]);
        assert_eq!(order(2, 2), [0, 1]);
        for k in 1..6 {
            let mut seen = vec![vec![0; k]; k];
            for round in 0..3 * k {
                let o = order(round, k);
                let mut sorted = o.clone();
                sorted.sort_unstable();
                assert_eq!(
                    sorted,
                    (0..k).collect::<Vec<_>>(),
                    "each side once per round"
                );
                for (place, &side) in o.iter().enumerate() {
                    seen[side][place] += 1;
                }
            }
            assert!(seen.iter().flatten().all(|&c| c == 3), "k {k}: {seen:?}");
        }
    }

    #[test]
    fn the_stop_rule_waits_for_the_minimum_then_the_width_or_a_cap() {
        let rule = StopRule {
            min_rounds: 3,
            max_rounds: 8,
            rel_width: 0.05,
            max_time: Duration::from_secs(10),
        };
        let tight = Estimate::of(&[10.0, 10.1, 9.9]).unwrap();
        let loose = Estimate::of(&[5.0, 10.0, 20.0]).unwrap();
        let s = Duration::from_secs(1);
        assert_eq!(rule.stop(2, s, &[tight]), None);
        assert_eq!(rule.stop(3, s, &[tight]), Some(Stopped::Converged));
        assert_eq!(rule.stop(3, s, &[tight, loose]), None);
        assert_eq!(rule.stop(8, s, &[loose]), Some(Stopped::Rounds));
        // One or two samples never count as narrow, however alike.
        let one = Estimate::of(&[10.0]).unwrap();
        let lax = StopRule {
            min_rounds: 1,
            ..rule
        };
        assert_eq!(lax.stop(1, s, &[one]), None);
        assert_eq!(lax.stop(8, s, &[one]), Some(Stopped::Rounds));
        assert_eq!(
            rule.stop(4, Duration::from_secs(11), &[loose]),
            Some(Stopped::Time)
        );
    }

    #[test]
    fn two_modes_are_found_with_their_counts() {
        // Linux's round trip here: about 27 µs or about 330 µs.
        let mut xs = normal(3, 12, 27.5, 1.0);
        xs.extend(normal(4, 6, 331.0, 12.0));
        let m = modes(&xs).unwrap();
        assert_eq!((m.low.count, m.high.count), (12, 6));
        assert!((m.low.median - 27.5).abs() < 2.0, "{m:?}");
        assert!((m.high.median - 331.0).abs() < 20.0, "{m:?}");
        let f = Figure::of(&xs).unwrap();
        assert_eq!(
            f.show(|x| format!("{x:.0}")),
            format!("{:.0} (12) | {:.0} (6)", m.low.median, m.high.median)
        );
    }

    #[test]
    fn one_mode_is_not_split() {
        for seed in 1..40 {
            let xs = normal(seed, 20, 100.0, 8.0);
            assert_eq!(modes(&xs), None, "normal, seed {seed}");
            // Long-tailed (log-normal) and uniform figures stay one mode.
            let ln: Vec<f64> = normal(seed + 100, 20, 0.0, 0.5)
                .iter()
                .map(|x| x.exp())
                .collect();
            assert_eq!(modes(&ln), None, "log-normal, seed {seed}");
            let un: Vec<f64> = uniform(seed + 200, 20).iter().map(|x| 10.0 + x).collect();
            assert_eq!(modes(&un), None, "uniform, seed {seed}");
        }
        // One outlier is not a mode; nor are too few samples.
        let mut xs = vec![10.0; 9];
        xs.push(100.0);
        assert_eq!(modes(&xs), None);
        assert_eq!(modes(&[1.0, 1.0, 100.0, 100.0]), None);
    }

    #[test]
    fn a_figure_shows_its_median_and_width() {
        let f = Figure::of(&[9.0, 10.0, 11.0]).unwrap();
        assert_eq!(f.show(|x| format!("{x:.1}")), "10.0 ±10 %");
        assert_eq!(f.samples, [9.0, 10.0, 11.0]);
    }
}
