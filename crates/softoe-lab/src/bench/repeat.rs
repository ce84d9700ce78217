//! Interleaved repeats: each side of a row (softoe's send policies, Linux)
//! measured in turn, round after round — A B, B A, A B … ([`order`]) —
//! until every watched interval is narrow enough or a cap is reached
//! ([`StopRule`]), so that a row's figures are medians with their spread
//! and its ratios come from pairs measured moments apart.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Args;
use serde::Serialize;

use crate::stats::{Estimate, StopRule, Stopped, order};

/// How many times a row is measured (`softoe bench`'s options).
#[derive(Clone, Copy, Debug, Args)]
pub(crate) struct RepeatArgs {
    /// Rounds every row runs at least (each round measures every side of
    /// the row once, interleaved; default 5, 3 with --quick).
    #[arg(long)]
    min_rounds: Option<usize>,
    /// Rounds a row runs at most (default 15, 5 with --quick).
    #[arg(long)]
    max_rounds: Option<usize>,
    /// A row stops once the intervals of its figures and ratios are within
    /// this many percent of their medians (default 3; 5 with --quick).
    #[arg(long, value_name = "PERCENT")]
    width: Option<f64>,
    /// Seconds after which a row starts no new round (default 60, 10 with
    /// --quick).
    #[arg(long, value_name = "SECS")]
    row_secs: Option<f64>,
}

impl RepeatArgs {
    /// The stop rule these options give, refused when they make no sense.
    pub(crate) fn rule(&self, quick: bool) -> Result<StopRule> {
        let min = self.min_rounds.unwrap_or(if quick { 3 } else { 5 });
        let max = self
            .max_rounds
            .unwrap_or(if quick { 5 } else { 15 })
            .max(min);
        let width = self.width.unwrap_or(if quick { 5.0 } else { 3.0 });
        let secs = self.row_secs.unwrap_or(if quick { 10.0 } else { 60.0 });
        if min == 0 {
            bail!("--min-rounds must be at least 1");
        }
        if !(width > 0.0 && width.is_finite()) {
            bail!("--width must be a percentage above zero");
        }
        let Ok(max_time) = Duration::try_from_secs_f64(secs) else {
            bail!("--row-secs must be a number of seconds");
        };
        Ok(StopRule {
            min_rounds: min,
            max_rounds: max,
            rel_width: width / 100.0,
            max_time,
        })
    }
}

/// A row's samples: `per_side[s][r]` is side `s` in round `r`, so that the
/// same index pairs samples taken moments apart.
#[derive(Debug)]
pub(crate) struct Rounds<T> {
    pub per_side: Vec<Vec<T>>,
    pub stopped: Stopped,
    pub secs: f64,
}

/// How a row's repeats ended, as the report carries it.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Repeats {
    pub rounds: usize,
    pub stopped: Stopped,
    pub secs: f64,
}

impl<T> Rounds<T> {
    pub(crate) fn repeats(&self) -> Repeats {
        Repeats {
            rounds: self.per_side.first().map_or(0, Vec::len),
            stopped: self.stopped,
            secs: self.secs,
        }
    }
}

/// Measures `sides` sides interleaved until `rule` stops: `measure(s)` is
/// one sample of side `s`; `watch` names the estimates that must narrow
/// (each side's main figure, the ratios that decide targets).
pub(crate) fn interleaved<T>(
    rule: &StopRule,
    sides: usize,
    mut measure: impl FnMut(usize) -> Result<T>,
    watch: impl Fn(&[Vec<T>]) -> Vec<Estimate>,
) -> Result<Rounds<T>> {
    let t = Instant::now();
    let mut per_side: Vec<Vec<T>> = (0..sides).map(|_| Vec::new()).collect();
    for round in 0.. {
        for s in order(round, sides) {
            let x = measure(s)?;
            per_side[s].push(x);
        }
        if let Some(stopped) = rule.stop(round + 1, t.elapsed(), &watch(&per_side)) {
            return Ok(Rounds {
                per_side,
                stopped,
                secs: t.elapsed().as_secs_f64(),
            });
        }
    }
    bail!("the rounds never ended")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn rule(min: usize, max: usize) -> StopRule {
        StopRule {
            min_rounds: min,
            max_rounds: max,
            rel_width: 0.05,
            max_time: Duration::from_secs(60),
        }
    }

    #[test]
    fn sides_run_interleaved_and_samples_pair_by_round() {
        let mut log = Vec::new();
        let r = interleaved(
            &rule(4, 4),
            2,
            |s| {
                log.push(s);
                Ok(log.len())
            },
            |_| Vec::new(),
        )
        .unwrap();
        // A B, B A, A B, B A: never all of one side first.
        assert_eq!(log, [0, 1, 1, 0, 0, 1, 1, 0]);
        assert_eq!(r.per_side[0], [1, 4, 5, 8]);
        assert_eq!(r.per_side[1], [2, 3, 6, 7]);
        assert_eq!(r.stopped, Stopped::Converged);
        assert_eq!(r.repeats().rounds, 4);
    }

    #[test]
    fn a_noisy_row_runs_to_the_cap_and_a_steady_one_stops_early() {
        let noisy = [10.0, 20.0, 5.0, 30.0, 12.0, 7.0, 25.0, 9.0];
        let mut i = 0;
        let r = interleaved(
            &rule(3, 6),
            1,
            |_| {
                i += 1;
                Ok(noisy[i % noisy.len()])
            },
            |v| v.iter().filter_map(|s| Estimate::of(s)).collect(),
        )
        .unwrap();
        assert_eq!((r.per_side[0].len(), r.stopped), (6, Stopped::Rounds));
        let r = interleaved(
            &rule(3, 6),
            1,
            |_| Ok(10.0),
            |v| v.iter().filter_map(|s| Estimate::of(s)).collect(),
        )
        .unwrap();
        assert_eq!((r.per_side[0].len(), r.stopped), (3, Stopped::Converged));
    }

    #[test]
    fn a_failed_sample_ends_the_row_with_its_error() {
        let e = interleaved(
            &rule(3, 6),
            2,
            |s| {
                if s == 1 {
                    bail!("side 1 broke")
                } else {
                    Ok(1.0)
                }
            },
            |_| Vec::new(),
        )
        .err()
        .unwrap();
        assert!(format!("{e}").contains("side 1 broke"));
    }
}
