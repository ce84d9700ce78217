//! The analytic models of offload, to set beside the simulator's sweeps.
//!
//! Two models frame the offload debate, and a simulated sweep should land
//! where they say unless something they leave out — queueing, interrupt
//! coalescing, the bus — explains the difference:
//!
//! - **LAWS** (P. Shivam and J. S. Chase, "On the Elusive Benefits of
//!   Protocol Offload", ACM SIGCOMM NICELI workshop, 2003) is about the
//!   throughput of streams. It reduces a host, its NIC and its network to
//!   four ratios — **L**ag, **A**pplication, **W**ire, **S**tructural — and
//!   says when moving protocol work to the NIC raises the throughput the
//!   application sees, by how much at most, and when it lowers it ([`Laws`]).
//! - **EMO** (P. Gilfeather and A. B. Maccabe, "Modeling Protocol Offload
//!   for Message-oriented Communication", IEEE Cluster 2005) is about one
//!   message: its latency, and the host CPU it costs, as the sum of the
//!   stages it crosses between the wire and the application, with and
//!   without offload ([`EmoPath`]).
//!
//! ## Sources
//!
//! Neither paper's text was at hand, only their abstracts and the summary
//! in Ortiz, Ortega, Díaz and Prieto, "Modeling Network Behaviour by
//! Full-System Simulation" (`/work/shared/papers/003_…`), which defines the
//! four LAWS ratios and EMO's C, O, L and R. The equations below are derived
//! from those definitions, not copied from the papers: each says exactly
//! what it computes, so a reader with the papers can check the mapping.
//!
//! Every function checks its parameters and refuses, with a [`ModelError`],
//! a rate that is not above zero or a cost or ratio that is negative or not
//! finite; none panics.

/// A model parameter is out of its range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A rate or ratio that must be above zero and finite.
    #[error("{name} must be finite and above zero, got {value}")]
    NotPositive {
        /// Which parameter.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// A cost or ratio that must be finite and not negative.
    #[error("{name} must be finite and not negative, got {value}")]
    Negative {
        /// Which parameter.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// A fraction outside [0, 1].
    #[error("{name} must be within [0, 1], got {value}")]
    Fraction {
        /// Which parameter.
        name: &'static str,
        /// The value given.
        value: f64,
    },
}

fn positive(name: &'static str, value: f64) -> Result<(), ModelError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ModelError::NotPositive { name, value })
    }
}

fn non_negative(name: &'static str, value: f64) -> Result<(), ModelError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(ModelError::Negative { name, value })
    }
}

fn fraction(name: &'static str, value: f64) -> Result<(), ModelError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(ModelError::Fraction { name, value })
    }
}

// ---------------------------------------------------------------------------
// LAWS
// ---------------------------------------------------------------------------

/// The LAWS model of a stream's throughput, before and after offload.
///
/// Per unit of data (a byte), the host CPU spends `aX` on the application
/// and `oX` on communication — `a` and `o` are amounts of work, `X` the
/// host's time per unit of work; the NIC's processor takes `Y = αX` per
/// unit of work; the network carries `B` units per second. Offload moves a
/// share `p` of the communication work `o` to the NIC, and leaves `β·o` of
/// it on the host. Then, in units of data per second,
///
/// ```text
/// before = min(B, 1 / ((a + o)·X))
/// after  = min(B, 1 / ((a + β·o)·X), 1 / (p·o·Y))
/// ```
///
/// (the wire, the host CPU, the NIC's processor: whichever is slowest sets
/// the pace). Divided by `B`, with `oXB = 1/σ` and `Y = αX`, only the
/// ratios remain, and that is what this module computes — throughput as a
/// fraction of the wire's bandwidth:
///
/// ```text
/// before / B = min(1, σ / (1 + γ))
/// after  / B = min(1, σ / (γ + β), σ / (p·α))      (σ/0 = ∞)
/// ```
///
/// **The convention for β** (the structural ratio) is the one Ortiz et al.
/// give: the communication overhead left on the *host* with offload, over
/// the overhead without. A pure shift of a share `p` to the NIC leaves
/// `β = 1 − p`, which is the form `min(B, 1/((a+(1−p)o)X), 1/(p·o·α·X))`;
/// `β < 1 − p` when offload also *eliminates* host work rather than moving
/// it (direct data placement removes a copy nobody then does); `β > 1 − p`
/// when driving the NIC costs the host something new. `p` is kept apart
/// from `β` because the NIC's load depends on what it is given, not on
/// what the host is spared.
///
/// What follows from these formulas ([`laws_conditions`]), matching the
/// paper's stated conclusion that offload is worth more as the application
/// and structural ratios fall:
///
/// - the gain is at most `1 + 1/γ` (the host can at best be left with only
///   the application);
/// - offload helps if and only if the host was the bottleneck (`σ < 1+γ`),
///   it takes work off the host (`β < 1`), and the NIC keeps up (`p·α <
///   1+γ`): a slow NIC given much of the work makes throughput worse;
/// - where it helps, the gain is flat for `σ ≤ max(γ+β, p·α)` and falls as
///   `(1+γ)/σ` above it, to nothing at `σ = 1+γ`: the faster the network
///   is than the host, the more offload is worth;
/// - for a pure shift, the best share is `p = min(1, (1+γ)/(1+α))`
///   ([`laws_balanced_offload`]), where the gain is `min(1+1/γ, 1+1/α)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Laws {
    /// α, the lag ratio: the host CPU's speed over the NIC processor's
    /// (`Y/X`). 1: as fast; 4: the NIC at a quarter of the host's speed.
    pub lag: f64,
    /// γ, the application ratio: application work over communication work
    /// per unit of data, on the host (`a/o`). 0: the host only
    /// communicates.
    pub application: f64,
    /// σ, the wire ratio: the host's saturation bandwidth — what it could
    /// move doing nothing but communicate, `1/(oX)` — over the network's
    /// bandwidth `B`. Below 1, the host alone cannot fill the wire.
    pub wire: f64,
    /// β, the structural ratio: the host's communication overhead with
    /// offload over its overhead without (see above). `1 − offloaded` for a
    /// pure shift.
    pub structural: f64,
    /// p: the share of the communication work `o` the NIC performs (in the
    /// host's units of work, before the lag ratio), in [0, 1]. 1: full
    /// offload (a TOE).
    pub offloaded: f64,
}

impl Laws {
    /// Full offload with nothing left on the host and nothing eliminated
    /// (`p = 1`, `β = 0`).
    pub fn full(lag: f64, application: f64, wire: f64) -> Laws {
        Laws {
            lag,
            application,
            wire,
            structural: 0.0,
            offloaded: 1.0,
        }
    }

    /// Moves a share `p` of the communication work to the NIC and nothing
    /// else (`β = 1 − p`).
    pub fn shift(lag: f64, application: f64, wire: f64, p: f64) -> Laws {
        Laws {
            lag,
            application,
            wire,
            structural: 1.0 - p,
            offloaded: p,
        }
    }

    /// The ratios of a machine described by what it costs
    /// ([`LawsCosts`]): `α = 1/nic_speed`, `γ = a/o`, `σ = (8·10⁹/o) / B`
    /// (with `o` in ns per byte and `B` in bits per second).
    pub fn from_costs(c: &LawsCosts) -> Result<Laws, ModelError> {
        non_negative("the application cost", c.app_ns_per_byte)?;
        positive("the communication cost", c.comm_ns_per_byte)?;
        positive("the NIC's speed", c.nic_speed)?;
        positive("the wire's bandwidth", c.wire_bps)?;
        let host_saturation_bps = 8e9 / c.comm_ns_per_byte;
        let laws = Laws {
            lag: 1.0 / c.nic_speed,
            application: c.app_ns_per_byte / c.comm_ns_per_byte,
            wire: host_saturation_bps / c.wire_bps,
            structural: c.structural,
            offloaded: c.offloaded,
        };
        laws.validate()?;
        Ok(laws)
    }

    /// Checks every ratio: α and σ finite and above zero, γ and β finite
    /// and not negative, p within [0, 1].
    pub fn validate(&self) -> Result<(), ModelError> {
        positive("the lag ratio α", self.lag)?;
        non_negative("the application ratio γ", self.application)?;
        positive("the wire ratio σ", self.wire)?;
        non_negative("the structural ratio β", self.structural)?;
        fraction("the offloaded share p", self.offloaded)
    }

    /// `σ / (1 + γ)`: the host before offload.
    fn host_before(&self) -> f64 {
        self.wire / (1.0 + self.application)
    }

    /// `σ / (γ + β)`: the host after (∞ when nothing is left on it).
    fn host_after(&self) -> f64 {
        self.wire / (self.application + self.structural)
    }

    /// `σ / (p·α)`: the NIC after (∞ when it is given nothing).
    fn nic_after(&self) -> f64 {
        self.wire / (self.offloaded * self.lag)
    }
}

/// A machine's costs, from which [`Laws::from_costs`] derives the ratios.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LawsCosts {
    /// `aX`: host CPU time per byte of application work, ns.
    pub app_ns_per_byte: f64,
    /// `oX`: host CPU time per byte of communication without offload (the
    /// whole path: stack, copies, interrupts), ns.
    pub comm_ns_per_byte: f64,
    /// The NIC processor's speed as a fraction of the host's (softoe's
    /// engine CPU: 0.25 to 1).
    pub nic_speed: f64,
    /// `B`: the network's bandwidth, bits per second.
    pub wire_bps: f64,
    /// p ([`Laws::offloaded`]).
    pub offloaded: f64,
    /// β ([`Laws::structural`]).
    pub structural: f64,
}

/// What bounds a LAWS throughput.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LawsLimit {
    /// The network's bandwidth.
    Wire,
    /// The host CPU.
    Host,
    /// The NIC's processor.
    Nic,
}

impl LawsLimit {
    /// `wire`, `host` or `nic`.
    pub fn name(self) -> &'static str {
        match self {
            LawsLimit::Wire => "wire",
            LawsLimit::Host => "host",
            LawsLimit::Nic => "nic",
        }
    }
}

/// Throughput before offload, as a fraction of the wire's bandwidth:
/// `min(1, σ/(1+γ))`. Multiply by `B` for units of data per second.
pub fn laws_throughput_before(m: &Laws) -> Result<f64, ModelError> {
    m.validate()?;
    Ok(m.host_before().min(1.0))
}

/// Throughput after offload, as a fraction of the wire's bandwidth:
/// `min(1, σ/(γ+β), σ/(p·α))`.
pub fn laws_throughput_after(m: &Laws) -> Result<f64, ModelError> {
    m.validate()?;
    Ok(m.host_after().min(m.nic_after()).min(1.0))
}

/// The improvement, after over before (above 1: offload helps; below: it
/// hurts). At most [`LawsConditions::bound`].
pub fn laws_improvement(m: &Laws) -> Result<f64, ModelError> {
    Ok(laws_throughput_after(m)? / laws_throughput_before(m)?)
}

/// The conditions LAWS puts on a gain, each derived from the formulas on
/// [`Laws`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LawsConditions {
    /// `σ < 1 + γ`: before offload the host, not the wire, is the
    /// bottleneck. Otherwise offload cannot raise throughput.
    pub host_bound: bool,
    /// `β < 1`: offload leaves the host less communication work than before.
    pub relieves_host: bool,
    /// `p·α < 1 + γ`: the NIC, given its share at its speed, is faster than
    /// the host was. Otherwise offload moves the bottleneck to a slower
    /// place.
    pub nic_keeps_up: bool,
    /// `1 + 1/γ`: no offload can improve throughput by more (∞ at γ = 0).
    pub bound: f64,
}

impl LawsConditions {
    /// Offload raises throughput: all three conditions hold.
    pub fn helps(&self) -> bool {
        self.host_bound && self.relieves_host && self.nic_keeps_up
    }
}

/// The conditions for offload to help, and the bound on its gain.
pub fn laws_conditions(m: &Laws) -> Result<LawsConditions, ModelError> {
    m.validate()?;
    let host_before = 1.0 + m.application;
    Ok(LawsConditions {
        host_bound: m.wire < host_before,
        relieves_host: m.structural < 1.0,
        nic_keeps_up: m.offloaded * m.lag < host_before,
        bound: 1.0 + 1.0 / m.application,
    })
}

/// For a pure shift, the share `p` that balances host and NIC and so gives
/// the most throughput: `(1+γ)/(1+α)` — where `γ + 1 − p = p·α` — or 1
/// when even full offload leaves the host the slower (`γ ≥ α`). Ignores
/// `m.offloaded` and `m.structural`.
pub fn laws_balanced_offload(m: &Laws) -> Result<f64, ModelError> {
    m.validate()?;
    Ok(((1.0 + m.application) / (1.0 + m.lag)).min(1.0))
}

/// Everything LAWS says about one configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LawsReport {
    /// [`laws_throughput_before`].
    pub before: f64,
    /// [`laws_throughput_after`].
    pub after: f64,
    /// [`laws_improvement`].
    pub improvement: f64,
    /// What bounds `before` (the wire on a tie).
    pub before_limit: LawsLimit,
    /// What bounds `after` (the wire, then the host, on a tie).
    pub after_limit: LawsLimit,
    /// [`laws_conditions`].
    pub conditions: LawsConditions,
}

/// The whole of [`laws_throughput_before`], [`laws_throughput_after`],
/// [`laws_improvement`] and [`laws_conditions`], with the bottlenecks.
pub fn laws(m: &Laws) -> Result<LawsReport, ModelError> {
    let before = laws_throughput_before(m)?;
    let after = laws_throughput_after(m)?;
    let before_limit = if m.host_before() >= 1.0 {
        LawsLimit::Wire
    } else {
        LawsLimit::Host
    };
    let (host, nic) = (m.host_after(), m.nic_after());
    let after_limit = if host >= 1.0 && nic >= 1.0 {
        LawsLimit::Wire
    } else if host <= nic {
        LawsLimit::Host
    } else {
        LawsLimit::Nic
    };
    Ok(LawsReport {
        before,
        after,
        improvement: after / before,
        before_limit,
        after_limit,
        conditions: laws_conditions(m)?,
    })
}

// ---------------------------------------------------------------------------
// EMO
// ---------------------------------------------------------------------------

/// The processors' rates, EMO's `R`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmoRates {
    /// `R_H`: the host CPU, cycles per second.
    pub host_hz: f64,
    /// `R_N`: the NIC's processor, cycles per second.
    pub nic_hz: f64,
}

impl EmoRates {
    /// Checks both rates are finite and above zero.
    pub fn validate(&self) -> Result<(), ModelError> {
        positive("the host rate R_H", self.host_hz)?;
        positive("the NIC rate R_N", self.nic_hz)
    }
}

/// One message's path between the wire and the application, in EMO's
/// terms, summed over the stages it crosses.
///
/// EMO prices a message at the places that handle it — the NIC, the OS on
/// the host CPU, the application (its communication library) on the host
/// CPU — with four kinds of quantity:
///
/// - **C**, protocol processing, in cycles of whichever processor does it:
///   `C_N` on the NIC, `C_H` in the OS, `C_A` at application level;
/// - **O**, host CPU cycles spent moving data and control between NIC, OS
///   and application: interrupt handling, DMA set-up, copies, system calls
///   (`O_NH` NIC→OS, `O_HA` OS→application, `O_NA` NIC→application);
/// - **L**, the time that movement takes when no CPU is paying for it: DMA
///   on the bus, interrupt delivery, waking a thread (`L_NH`, `L_HA`,
///   `L_NA`);
/// - **R**, the processors' rates ([`EmoRates`]).
///
/// A message is handled one stage after another, so its latency is the sum
/// of the stages, and the host's overhead the sum of the host's cycles:
///
/// ```text
/// latency  = C_N/R_N + C_host/R_H + O/R_H + L
/// overhead = (C_host + O) / R_H
/// ```
///
/// [`TraditionalPath`] and [`OffloadedPath`] lay out the two cases
/// stage by stage (receive side; a send crosses the same stages the other
/// way, so the same sums hold).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EmoPath {
    /// `C_N`: protocol cycles on the NIC's processor.
    pub nic_cycles: f64,
    /// `C_H + C_A`: protocol cycles on the host CPU, in the OS and at
    /// application level.
    pub host_cycles: f64,
    /// `O`: host CPU cycles moving data and control between NIC, OS and
    /// application.
    pub overhead_cycles: f64,
    /// `L`: time moving data and control that no CPU spends, seconds.
    pub movement_secs: f64,
}

impl EmoPath {
    /// Checks every quantity is finite and not negative.
    pub fn validate(&self) -> Result<(), ModelError> {
        non_negative("the NIC's protocol cycles C_N", self.nic_cycles)?;
        non_negative("the host's protocol cycles C_H", self.host_cycles)?;
        non_negative("the overhead cycles O", self.overhead_cycles)?;
        non_negative("the movement time L", self.movement_secs)
    }

    /// `C_N/R_N + C_host/R_H`: protocol processing time.
    fn protocol_secs(&self, r: &EmoRates) -> f64 {
        self.nic_cycles / r.nic_hz + self.host_cycles / r.host_hz
    }

    /// `O/R_H + L`: the time moving data and control.
    fn moving_secs(&self, r: &EmoRates) -> f64 {
        self.overhead_cycles / r.host_hz + self.movement_secs
    }
}

/// A message through a host whose OS runs the protocol (receive side):
/// the NIC hands it to the OS (`L_NH`, `O_NH`), the OS runs the protocol
/// (`C_H`), and hands the data to the application (`L_HA`, `O_HA`), where a
/// library may do some more (`C_A`). `C_N` is what a plain NIC does
/// (descriptors, checksums), often zero.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TraditionalPath {
    /// `C_N`: NIC cycles.
    pub c_n: f64,
    /// `L_NH`: NIC→OS movement time, seconds.
    pub l_nh: f64,
    /// `O_NH`: host cycles for NIC→OS (the interrupt, buffer handling).
    pub o_nh: f64,
    /// `C_H`: protocol cycles in the OS.
    pub c_h: f64,
    /// `L_HA`: OS→application movement time, seconds (the wake-up).
    pub l_ha: f64,
    /// `O_HA`: host cycles for OS→application (the copy, the system call).
    pub o_ha: f64,
    /// `C_A`: protocol cycles at application level.
    pub c_a: f64,
}

impl TraditionalPath {
    /// The path's sums: `C_N`; `C_H + C_A`; `O_NH + O_HA`; `L_NH + L_HA`.
    pub fn path(&self) -> EmoPath {
        EmoPath {
            nic_cycles: self.c_n,
            host_cycles: self.c_h + self.c_a,
            overhead_cycles: self.o_nh + self.o_ha,
            movement_secs: self.l_nh + self.l_ha,
        }
    }
}

/// A message through a NIC that runs the protocol and hands the data
/// straight to the application (receive side): `C_N` on the NIC, then NIC →
/// application (`L_NA`, `O_NA`: DMA into the application's buffer, a
/// completion to notice), and whatever protocol work stays in the
/// application's library (`C_A`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OffloadedPath {
    /// `C_N`: protocol cycles on the NIC.
    pub c_n: f64,
    /// `L_NA`: NIC→application movement time, seconds.
    pub l_na: f64,
    /// `O_NA`: host cycles for NIC→application.
    pub o_na: f64,
    /// `C_A`: protocol cycles left at application level.
    pub c_a: f64,
}

impl OffloadedPath {
    /// The path's sums: `C_N`; `C_A`; `O_NA`; `L_NA`.
    pub fn path(&self) -> EmoPath {
        EmoPath {
            nic_cycles: self.c_n,
            host_cycles: self.c_a,
            overhead_cycles: self.o_na,
            movement_secs: self.l_na,
        }
    }
}

/// A message's latency, seconds: `C_N/R_N + C_host/R_H + O/R_H + L`.
pub fn emo_latency(path: &EmoPath, rates: &EmoRates) -> Result<f64, ModelError> {
    path.validate()?;
    rates.validate()?;
    Ok(path.protocol_secs(rates) + path.moving_secs(rates))
}

/// The host CPU time a message costs, seconds: `(C_host + O)/R_H`.
pub fn emo_host_overhead(path: &EmoPath, rates: &EmoRates) -> Result<f64, ModelError> {
    path.validate()?;
    rates.validate()?;
    Ok((path.host_cycles + path.overhead_cycles) / rates.host_hz)
}

/// One message without and with offload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmoComparison {
    /// Latency without offload, seconds.
    pub latency_without: f64,
    /// Latency with offload, seconds.
    pub latency_with: f64,
    /// Host CPU time without offload, seconds.
    pub overhead_without: f64,
    /// Host CPU time with offload, seconds.
    pub overhead_with: f64,
    /// The protocol time offload adds: `(C_N/R_N + C_host/R_H)` with, less
    /// without. Protocol cycles moved to a NIC `k` times slower than the
    /// host take `k` times as long.
    pub added_protocol_secs: f64,
    /// The movement offload takes off the path: `(O/R_H + L)` without, less
    /// with.
    pub moved_secs: f64,
}

impl EmoComparison {
    /// Without less with: `moved − added`.
    pub fn latency_saved(&self) -> f64 {
        self.latency_without - self.latency_with
    }

    /// Offload lowers the latency — which is to say, it removes more
    /// movement than it adds protocol time.
    pub fn lowers_latency(&self) -> bool {
        self.latency_with < self.latency_without
    }
}

/// Compares one message's two paths.
pub fn emo_compare(
    without: &EmoPath,
    with: &EmoPath,
    rates: &EmoRates,
) -> Result<EmoComparison, ModelError> {
    Ok(EmoComparison {
        latency_without: emo_latency(without, rates)?,
        latency_with: emo_latency(with, rates)?,
        overhead_without: emo_host_overhead(without, rates)?,
        overhead_with: emo_host_overhead(with, rates)?,
        added_protocol_secs: with.protocol_secs(rates) - without.protocol_secs(rates),
        moved_secs: without.moving_secs(rates) - with.moving_secs(rates),
    })
}

/// The NIC rate at which both paths have the same latency, if there is one
/// (`rates.nic_hz` is ignored).
///
/// The latency saved is `m − d/R_N`, with `d = C_N(with) − C_N(without)`
/// the NIC cycles offload adds and `m` the rest of the saving
/// (`moved − ΔC_host/R_H`). In the usual case, `d > 0` and `m > 0`, offload
/// lowers the latency on a NIC faster than `d/m` and raises it on a slower
/// one. `None` when the sign of the saving does not depend on the NIC's
/// rate.
pub fn emo_break_even_nic_hz(
    without: &EmoPath,
    with: &EmoPath,
    rates: &EmoRates,
) -> Result<Option<f64>, ModelError> {
    without.validate()?;
    with.validate()?;
    positive("the host rate R_H", rates.host_hz)?;
    let d = with.nic_cycles - without.nic_cycles;
    let m = without.moving_secs(rates)
        - with.moving_secs(rates)
        - (with.host_cycles - without.host_cycles) / rates.host_hz;
    let r = d / m;
    Ok((r.is_finite() && r > 0.0).then_some(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() <= 1e-12 * want.abs().max(1e-300)
    }

    macro_rules! assert_close {
        ($got:expr, $want:expr) => {{
            let (g, w) = ($got, $want);
            assert!(close(g, w), "{} = {g}, want {w}", stringify!($got));
        }};
    }

    #[test]
    fn laws_worked_examples() {
        // NIC at half speed (α = 2), application work half the
        // communication (γ = 0.5), host saturates at 0.6 of the wire
        // (σ = 0.6).
        //
        // Before: min(1, 0.6 / 1.5) = 0.4, host-bound.
        // Full offload, pure shift (p = 1, β = 0): host 0.6 / 0.5 = 1.2,
        // NIC 0.6 / (1 × 2) = 0.3; after = min(1, 1.2, 0.3) = 0.3, NIC-bound:
        // 0.75 ×, worse — p·α = 2 is not below 1 + γ = 1.5.
        let full = Laws::full(2.0, 0.5, 0.6);
        let r = laws(&full).unwrap();
        assert_close!(r.before, 0.4);
        assert_close!(r.after, 0.3);
        assert_close!(r.improvement, 0.75);
        assert_eq!(
            (r.before_limit, r.after_limit),
            (LawsLimit::Host, LawsLimit::Nic)
        );
        assert!(r.conditions.host_bound && r.conditions.relieves_host);
        assert!(!r.conditions.nic_keeps_up && !r.conditions.helps());
        assert_close!(r.conditions.bound, 3.0);

        // Half of it (p = 0.5, β = 0.5): host 0.6 / (0.5 + 0.5) = 0.6, NIC
        // 0.6 / (0.5 × 2) = 0.6; after = 0.6, 1.5 × — the balanced share
        // (1 + 0.5) / (1 + 2) = 0.5, and the pure-shift best
        // min(1 + 1/γ, 1 + 1/α) = min(3, 1.5).
        let half = Laws::shift(2.0, 0.5, 0.6, 0.5);
        assert_close!(laws_throughput_after(&half).unwrap(), 0.6);
        assert_close!(laws_improvement(&half).unwrap(), 1.5);
        assert_close!(laws_balanced_offload(&half).unwrap(), 0.5);
        assert!(laws_conditions(&half).unwrap().helps());
        assert_eq!(laws(&half).unwrap().after_limit, LawsLimit::Host);

        // NIC as fast as the host (α = 1), γ = 1, σ = 0.5, full offload:
        // before min(1, 0.5 / 2) = 0.25; after min(1, 0.5 / 1, 0.5 / 1) =
        // 0.5: 2 ×, the bound 1 + 1/γ exactly.
        let m = Laws::full(1.0, 1.0, 0.5);
        assert_close!(laws_throughput_before(&m).unwrap(), 0.25);
        assert_close!(laws_improvement(&m).unwrap(), 2.0);
        assert_close!(laws_conditions(&m).unwrap().bound, 2.0);

        // Direct data placement eliminates work: p = 0.5 moved, β = 0.25
        // left (a quarter eliminated). α = 2, γ = 0.5, σ = 0.6: host
        // 0.6 / 0.75 = 0.8, NIC 0.6 / 1 = 0.6; after 0.6 — the NIC binds.
        // With α = 1: NIC 1.2, host 0.8, after 0.8, 2 ×.
        let ddp = Laws {
            lag: 2.0,
            application: 0.5,
            wire: 0.6,
            structural: 0.25,
            offloaded: 0.5,
        };
        assert_close!(laws_throughput_after(&ddp).unwrap(), 0.6);
        let ddp = Laws { lag: 1.0, ..ddp };
        assert_close!(laws_throughput_after(&ddp).unwrap(), 0.8);
        assert_close!(laws_improvement(&ddp).unwrap(), 2.0);
    }

    #[test]
    fn laws_from_costs() {
        // 2 ns/B of application, 4 ns/B of communication: γ = 0.5. The host
        // alone moves 1 B per 4 ns = 2 Gb/s; on 10 Gb/s, σ = 0.2. NIC at
        // 25 %: α = 4.
        let m = Laws::from_costs(&LawsCosts {
            app_ns_per_byte: 2.0,
            comm_ns_per_byte: 4.0,
            nic_speed: 0.25,
            wire_bps: 10e9,
            offloaded: 0.3,
            structural: 0.7,
        })
        .unwrap();
        assert_close!(m.application, 0.5);
        assert_close!(m.wire, 0.2);
        assert_close!(m.lag, 4.0);
        // Before: 0.2 / 1.5 of 10 Gb/s = 1.333 Gb/s = 1 B per 6 ns.
        let before = laws_throughput_before(&m).unwrap() * 10e9;
        assert_close!(before, 8e9 / 6.0);
        // After: host 0.2 / 1.2, NIC 0.2 / 1.2: 1 B per 4.8 ns, both busy.
        let after = laws_throughput_after(&m).unwrap() * 10e9;
        assert_close!(after, 8e9 / 4.8);

        let bad = LawsCosts {
            app_ns_per_byte: 2.0,
            comm_ns_per_byte: 0.0,
            nic_speed: 0.25,
            wire_bps: 10e9,
            offloaded: 0.3,
            structural: 0.7,
        };
        assert!(matches!(
            Laws::from_costs(&bad),
            Err(ModelError::NotPositive { .. })
        ));
        let bad = LawsCosts {
            comm_ns_per_byte: 4.0,
            offloaded: 1.5,
            ..bad
        };
        assert!(matches!(
            Laws::from_costs(&bad),
            Err(ModelError::Fraction { .. })
        ));
    }

    #[test]
    fn laws_limits() {
        // γ → 0 (the host only communicates): the 1/γ bound stops binding,
        // and the lag ratio decides. α = 1, σ = 0.1: full offload moves the
        // whole bottleneck to an equally fast NIC — no gain; the balanced
        // half-and-half split (p = (1 + 0)/(1 + 1)) doubles it (1 + 1/α).
        let g = 1e-12;
        let full = Laws::full(1.0, g, 0.1);
        assert!(laws_conditions(&full).unwrap().bound > 1e11);
        assert!((laws_improvement(&full).unwrap() - 1.0).abs() < 1e-9);
        let p = laws_balanced_offload(&full).unwrap();
        assert!((p - 0.5).abs() < 1e-9);
        let split = Laws::shift(1.0, g, 0.1, p);
        assert!((laws_improvement(&split).unwrap() - 2.0).abs() < 1e-9);
        // γ = 0 exactly: ∞ bound, no division trouble.
        let zero = Laws::full(1.0, 0.0, 0.1);
        assert_eq!(laws_conditions(&zero).unwrap().bound, f64::INFINITY);
        assert_close!(laws_throughput_after(&zero).unwrap(), 0.1);

        // α = 1, full offload, host-bound: the gain is 1 + min(γ, 1/γ),
        // never more than 2 (at γ = 1).
        for gamma in [0.1, 0.5, 1.0, 2.0, 10.0] {
            let m = Laws::full(1.0, gamma, 0.01);
            let want = 1.0 + f64::min(gamma, 1.0 / gamma);
            assert_close!(laws_improvement(&m).unwrap(), want);
        }

        // σ ≫ 1: the host already fills the wire (σ = 10 ≥ 1 + γ = 2).
        // Offload cannot help, and a slow NIC (α = 20) hurts: 10 / 20 = 0.5.
        let wire = Laws::full(1.0, 1.0, 10.0);
        let r = laws(&wire).unwrap();
        assert_eq!((r.before, r.after, r.improvement), (1.0, 1.0, 1.0));
        assert_eq!(
            (r.before_limit, r.after_limit),
            (LawsLimit::Wire, LawsLimit::Wire)
        );
        assert!(!r.conditions.host_bound && !r.conditions.helps());
        let slow = Laws { lag: 20.0, ..wire };
        assert_close!(laws_improvement(&slow).unwrap(), 0.5);

        // The gain is flat for σ ≤ max(γ + β, p·α) and then falls as
        // (1 + γ)/σ, to 1 at σ = 1 + γ. γ = 1, α = 1, full offload:
        // flat 2 up to σ = 1, then 2/σ.
        for (sigma, want) in [
            (0.01, 2.0),
            (0.5, 2.0),
            (1.0, 2.0),
            (1.6, 1.25),
            (2.0, 1.0),
            (3.0, 1.0),
        ] {
            let m = Laws::full(1.0, 1.0, sigma);
            assert_close!(laws_improvement(&m).unwrap(), want);
        }

        // Nothing offloaded, nothing changed.
        let none = Laws::shift(3.0, 0.7, 0.4, 0.0);
        assert_close!(laws_improvement(&none).unwrap(), 1.0);
    }

    #[test]
    fn laws_refuses_bad_ratios() {
        let good = Laws::shift(2.0, 0.5, 0.6, 0.5);
        assert!(good.validate().is_ok());
        let cases = [
            Laws { lag: 0.0, ..good },
            Laws {
                lag: f64::NAN,
                ..good
            },
            Laws {
                application: -1.0,
                ..good
            },
            Laws {
                wire: f64::INFINITY,
                ..good
            },
            Laws { wire: 0.0, ..good },
            Laws {
                structural: -0.1,
                ..good
            },
            Laws {
                offloaded: 1.01,
                ..good
            },
            Laws {
                offloaded: f64::NAN,
                ..good
            },
        ];
        for m in cases {
            assert!(laws_throughput_before(&m).is_err(), "{m:?}");
            assert!(laws_throughput_after(&m).is_err(), "{m:?}");
            assert!(laws_improvement(&m).is_err(), "{m:?}");
            assert!(laws_conditions(&m).is_err(), "{m:?}");
            assert!(laws_balanced_offload(&m).is_err(), "{m:?}");
            assert!(laws(&m).is_err(), "{m:?}");
        }
        let e = laws(&Laws { lag: -2.0, ..good }).unwrap_err();
        assert!(e.to_string().contains("lag ratio"), "{e}");
    }

    fn laws_params() -> impl Strategy<Value = Laws> {
        (
            0.01..100.0f64,
            0.0..100.0f64,
            0.001..1000.0f64,
            0.0..2.0f64,
            0.0..=1.0f64,
        )
            .prop_map(|(lag, application, wire, structural, offloaded)| Laws {
                lag,
                application,
                wire,
                structural,
                offloaded,
            })
    }

    proptest! {
        #[test]
        fn laws_after_stays_within_its_bounds(m in laws_params()) {
            let r = laws(&m).unwrap();
            let eps = 1e-12;
            // Never more than the wire.
            prop_assert!(r.before > 0.0 && r.before <= 1.0);
            prop_assert!(r.after > 0.0 && r.after <= 1.0);
            // Never more than the host, before and after, or the NIC.
            prop_assert!(r.before <= m.wire / (1.0 + m.application) * (1.0 + eps));
            prop_assert!(r.after <= m.wire / (m.application + m.structural) * (1.0 + eps));
            prop_assert!(r.after <= m.wire / (m.offloaded * m.lag) * (1.0 + eps));
            // Never more than 1 + 1/γ better.
            prop_assert!(r.improvement <= r.conditions.bound * (1.0 + eps));
            // It helps exactly when the conditions say (away from the
            // boundaries, where rounding decides).
            if !r.conditions.helps() {
                prop_assert!(r.after <= r.before * (1.0 + eps));
            }
            let margin = 1.0 - 1e-9;
            let c = (m.wire < (1.0 + m.application) * margin)
                && (m.structural < margin)
                && (m.offloaded * m.lag < (1.0 + m.application) * margin);
            if c {
                prop_assert!(r.after > r.before);
            }
        }

        #[test]
        fn laws_a_faster_nic_or_less_left_never_hurts(m in laws_params(), f in 0.0..1.0f64) {
            let after = laws_throughput_after(&m).unwrap();
            let faster = Laws { lag: m.lag * (1.0 - f).max(0.01), ..m };
            prop_assert!(laws_throughput_after(&faster).unwrap() >= after);
            let leaner = Laws { structural: m.structural * f, ..m };
            prop_assert!(laws_throughput_after(&leaner).unwrap() >= after);
        }
    }

    // The EMO example: a 2 GHz host, its NIC at 500 MHz (k = 4).
    const HOST_HZ: f64 = 2e9;

    fn traditional() -> TraditionalPath {
        TraditionalPath {
            c_n: 0.0,
            l_nh: 1e-6,   // DMA and the interrupt's delivery
            o_nh: 2000.0, // the interrupt handler: 1 µs
            c_h: 4000.0,  // TCP/IP in the OS: 2 µs
            l_ha: 0.5e-6, // waking the application
            o_ha: 6000.0, // the copy and the system call: 3 µs
            c_a: 0.0,
        }
    }

    fn offloaded() -> OffloadedPath {
        OffloadedPath {
            c_n: 4000.0, // the same protocol, on the NIC
            l_na: 1e-6,  // DMA into the application's buffer
            o_na: 400.0, // noticing the completion: 0.2 µs
            c_a: 0.0,
        }
    }

    #[test]
    fn emo_worked_example() {
        let rates = EmoRates {
            host_hz: HOST_HZ,
            nic_hz: 500e6,
        };
        let (h, o) = (traditional().path(), offloaded().path());
        // Without: 1 + 2000/2 GHz + 4000/2 GHz + 0.5 + 6000/2 GHz
        //        = 1 + 1 + 2 + 0.5 + 3 = 7.5 µs; host (2000 + 4000 + 6000)
        //        / 2 GHz = 6 µs.
        assert_close!(emo_latency(&h, &rates).unwrap(), 7.5e-6);
        assert_close!(emo_host_overhead(&h, &rates).unwrap(), 6e-6);
        // With: 4000/500 MHz + 1 + 400/2 GHz = 8 + 1 + 0.2 = 9.2 µs; host
        // 0.2 µs.
        assert_close!(emo_latency(&o, &rates).unwrap(), 9.2e-6);
        assert_close!(emo_host_overhead(&o, &rates).unwrap(), 0.2e-6);
        // Offload adds 8 − 2 = 6 µs of protocol time and removes
        // (1 + 0.5 + 1 + 3) − (1 + 0.2) = 4.3 µs of movement: 1.7 µs worse,
        // while it spares the host 5.8 µs a message.
        let c = emo_compare(&h, &o, &rates).unwrap();
        assert_close!(c.added_protocol_secs, 6e-6);
        assert_close!(c.moved_secs, 4.3e-6);
        assert!((c.latency_saved() + 1.7e-6).abs() < 1e-18);
        assert!(!c.lowers_latency());
        assert_close!(c.overhead_without - c.overhead_with, 5.8e-6);
        // Break-even: 4000 cycles / (4.3 µs + 2 µs of protocol no longer on
        // the host) = 634.9 MHz, a NIC 3.15 × slower than the host.
        let r = emo_break_even_nic_hz(&h, &o, &rates).unwrap().unwrap();
        assert_close!(r, 4000.0 / 6.3e-6);
        assert_close!(HOST_HZ / r, 3.15);
        // On a 1 GHz NIC: 4 + 1.2 = 5.2 µs, better.
        let fast = EmoRates {
            nic_hz: 1e9,
            ..rates
        };
        assert_close!(emo_latency(&o, &fast).unwrap(), 5.2e-6);
        assert!(emo_compare(&h, &o, &fast).unwrap().lowers_latency());
    }

    /// With the NIC `k` times slower than the host, offload lowers latency
    /// exactly when the movement it removes exceeds the protocol time it
    /// adds, `(k − 1)·C/R_H` for `C` cycles moved; the cross-over is at
    /// `k* = 1 + moved·R_H/C` (3.15 here).
    #[test]
    fn emo_crossover() {
        let (h, o) = (traditional().path(), offloaded().path());
        let c_secs = 4000.0 / HOST_HZ;
        let k_star = 1.0 + 4.3e-6 / c_secs;
        assert_close!(k_star, 3.15);
        let mut wins = 0;
        for i in 0..=60 {
            let k = 1.0 + f64::from(i) * 0.1;
            let rates = EmoRates {
                host_hz: HOST_HZ,
                nic_hz: HOST_HZ / k,
            };
            let c = emo_compare(&h, &o, &rates).unwrap();
            let added = (k - 1.0) * c_secs;
            assert!((c.added_protocol_secs - added).abs() < 1e-18, "k {k}");
            assert!((c.moved_secs - 4.3e-6).abs() < 1e-18, "k {k}");
            assert_eq!(
                c.lowers_latency(),
                c.moved_secs > c.added_protocol_secs,
                "k {k}"
            );
            assert_eq!(c.lowers_latency(), k < k_star, "k {k}");
            wins += usize::from(c.lowers_latency());
        }
        // k = 1.0 … 3.1 win, 3.2 … 7.0 lose.
        assert_eq!(wins, 22);
        // And the host overhead falls whatever k is.
        let slow = EmoRates {
            host_hz: HOST_HZ,
            nic_hz: 1.0,
        };
        let c = emo_compare(&h, &o, &slow).unwrap();
        assert!(c.overhead_with < c.overhead_without);
    }

    #[test]
    fn emo_break_even_edge_cases_and_bad_inputs() {
        let rates = EmoRates {
            host_hz: HOST_HZ,
            nic_hz: 500e6,
        };
        let h = traditional().path();
        // An offload that adds no NIC cycles: its saving doesn't depend on
        // the NIC.
        let same_nic = EmoPath {
            nic_cycles: 0.0,
            ..offloaded().path()
        };
        assert_eq!(emo_break_even_nic_hz(&h, &same_nic, &rates).unwrap(), None);
        // One that removes nothing but adds NIC work: no NIC is fast enough.
        let worse = EmoPath {
            nic_cycles: 4000.0,
            ..h
        };
        assert_eq!(emo_break_even_nic_hz(&h, &worse, &rates).unwrap(), None);

        let bad_rates = [
            EmoRates {
                host_hz: 0.0,
                nic_hz: 1e9,
            },
            EmoRates {
                host_hz: 1e9,
                nic_hz: -1.0,
            },
            EmoRates {
                host_hz: f64::NAN,
                nic_hz: 1e9,
            },
            EmoRates {
                host_hz: 1e9,
                nic_hz: f64::INFINITY,
            },
        ];
        for r in bad_rates {
            assert!(emo_latency(&h, &r).is_err(), "{r:?}");
            assert!(emo_host_overhead(&h, &r).is_err(), "{r:?}");
            assert!(emo_compare(&h, &h, &r).is_err(), "{r:?}");
        }
        let bad_paths = [
            EmoPath {
                nic_cycles: -1.0,
                ..h
            },
            EmoPath {
                host_cycles: f64::NAN,
                ..h
            },
            EmoPath {
                overhead_cycles: f64::INFINITY,
                ..h
            },
            EmoPath {
                movement_secs: -1e-6,
                ..h
            },
        ];
        for p in bad_paths {
            assert!(emo_latency(&p, &rates).is_err(), "{p:?}");
            assert!(emo_host_overhead(&p, &rates).is_err(), "{p:?}");
            assert!(emo_compare(&h, &p, &rates).is_err(), "{p:?}");
            assert!(emo_break_even_nic_hz(&p, &h, &rates).is_err(), "{p:?}");
        }
        let e = emo_latency(&h, &bad_rates[0]).unwrap_err();
        assert!(e.to_string().contains("R_H"), "{e}");
    }
}
