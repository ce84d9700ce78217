//! A target as a ratio: the leaf type that the bench's scenarios (bulk,
//! apps, bond) fill and the renderers print; what each scenario's goals
//! are lives beside the scenario (`goals`, `apps`, `bond`).

use serde::Serialize;

/// A target (of issue 6, or 16 for the bond), as a ratio.
#[derive(Debug, Serialize)]
pub(crate) struct Target {
    pub what: String,
    /// A ratio to Linux, unless `unit` names something else.
    pub ratio: f64,
    /// "x" (a ratio) or the unit of `ratio` (e.g. "cycles").
    pub unit: &'static str,
    pub goal: &'static str,
    pub met: bool,
}

/// `a / b`, or 0 where `b` is not positive (a missing measurement).
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}
