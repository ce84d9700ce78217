//! A target as a ratio: the leaf type that the bench's scenarios (bulk,
//! apps, bond) fill and the renderers print; what each scenario's goals
//! are lives beside the scenario (`goals`, `apps`, `bond`).
//!
//! A target measured over interleaved repeats carries the interval of its
//! ratio, and its verdict comes from that interval alone: met or missed
//! only where the whole interval lies on one side of the goal, "within
//! noise" otherwise (see [`crate::stats::verdict`]). A target from one
//! measurement (a count, a percentile of many samples in one run) has no
//! interval and `met` decides.

use serde::Serialize;

use crate::stats::{self, Estimate, Goal, Verdict};

/// A target (of issue 6, or 16 for the bond), as a ratio.
#[derive(Debug, Serialize)]
pub(crate) struct Target {
    pub what: String,
    /// A ratio to Linux, unless `unit` names something else (the median
    /// of the paired ratios, where repeated).
    pub ratio: f64,
    /// "x" (a ratio) or the unit of `ratio` (e.g. "cycles").
    pub unit: &'static str,
    pub goal: &'static str,
    pub met: bool,
    /// The ratio's interval, where the target was measured in repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<Estimate>,
    /// Met, missed or within noise: where there is no interval, `met`
    /// decides ([`Target::verdict`]); the report writes it in full.
    pub verdict: Option<Verdict>,
}

impl Target {
    /// The fields a target from one measurement leaves as they are:
    /// `Target { what, ratio, unit, goal, met, ..Target::POINT }`.
    pub(crate) const POINT: Target = Target {
        what: String::new(),
        ratio: 0.0,
        unit: "x",
        goal: "",
        met: false,
        interval: None,
        verdict: None,
    };

    /// A target on the paired ratios of interleaved rounds: the median is
    /// its ratio, the interval decides. No ratios: missed, ratio 0 (a
    /// missing measurement, as [`ratio`] gives).
    pub(crate) fn repeated(
        what: String,
        ratios: &[f64],
        goal_text: &'static str,
        goal: Goal,
    ) -> Target {
        Target::repeated_in(what, ratios, "x", goal_text, goal)
    }

    /// A target on repeated samples of a figure in `unit` (not a ratio).
    pub(crate) fn repeated_in(
        what: String,
        samples: &[f64],
        unit: &'static str,
        goal_text: &'static str,
        goal: Goal,
    ) -> Target {
        let ratios = samples;
        let Some(e) = Estimate::of(ratios) else {
            return Target {
                what,
                unit,
                goal: goal_text,
                verdict: Some(Verdict::Missed),
                ..Target::POINT
            };
        };
        let v = stats::verdict(goal, &e);
        Target {
            what,
            ratio: e.median,
            unit,
            goal: goal_text,
            met: v == Verdict::Met,
            interval: Some(e),
            verdict: Some(v),
        }
    }

    /// A target on a ratio whose interval is given (see
    /// [`crate::stats::ratio_of`]).
    pub(crate) fn bounded(
        what: String,
        e: Estimate,
        goal_text: &'static str,
        goal: Goal,
    ) -> Target {
        let v = stats::verdict(goal, &e);
        Target {
            what,
            ratio: e.median,
            unit: "x",
            goal: goal_text,
            met: v == Verdict::Met,
            interval: Some(e),
            verdict: Some(v),
        }
    }

    /// Met, missed or within noise.
    pub(crate) fn verdict(&self) -> Verdict {
        self.verdict.unwrap_or(if self.met {
            Verdict::Met
        } else {
            Verdict::Missed
        })
    }
}

/// Writes every target's verdict in full, for the report.
pub(crate) fn settle(targets: &mut [Target]) {
    for t in targets {
        t.verdict = Some(t.verdict());
    }
}

/// How many targets were met, missed and within noise.
pub(crate) fn tally(targets: &[Target]) -> (usize, usize, usize) {
    targets
        .iter()
        .fold((0, 0, 0), |(m, x, w), t| match t.verdict() {
            Verdict::Met => (m + 1, x, w),
            Verdict::Missed => (m, x + 1, w),
            Verdict::WithinNoise => (m, x, w + 1),
        })
}

/// `a / b`, or 0 where `b` is not positive (a missing measurement).
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_target_is_decided_by_its_interval() {
        let t = Target::repeated("x".into(), &[1.1, 1.3, 1.2], "≥ 1.0", Goal::AtLeast(1.0));
        assert_eq!((t.verdict(), t.met), (Verdict::Met, true));
        assert!((t.ratio - 1.2).abs() < 1e-12);
        let t = Target::repeated("x".into(), &[0.9, 1.3, 1.2], "≥ 1.0", Goal::AtLeast(1.0));
        assert_eq!((t.verdict(), t.met), (Verdict::WithinNoise, false));
        let t = Target::repeated("x".into(), &[], "≥ 1.0", Goal::AtLeast(1.0));
        assert_eq!((t.verdict(), t.ratio), (Verdict::Missed, 0.0));
        let point = Target {
            met: true,
            ..Target::POINT
        };
        let mut all = [t, point];
        settle(&mut all);
        assert_eq!(all[1].verdict, Some(Verdict::Met));
        assert_eq!(tally(&all), (1, 1, 0));
    }
}
