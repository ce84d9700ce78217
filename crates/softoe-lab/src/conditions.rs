//! The conditions a measurement runs under, chosen and reported: where its
//! parties run ([`Placement`]: `--engine-cpu`, `--pin-client`,
//! `--pin-servers`), whether the machine was quiet before it started
//! (`--require-quiet` waits for that, or refuses), and what else ran while
//! each row was measured ([`Busy`], from a [`Watch`] around the row).
//! `softoe bench` and `softoe sim validate` share it, so both print and
//! carry in `--json` the same account of the machine they measured on.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use indicatif::ProgressBar;
use serde::Serialize;

use crate::place::Placement;
use crate::quiet::{Busy, Limits, Watch, wait_quiet};

/// How often a row's watch samples the machine.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// Options of the conditions (flattened into `softoe bench` and `softoe
/// sim validate`).
#[derive(Clone, Copy, Debug, Default, Args)]
pub struct ConditionArgs {
    /// Before measuring, wait up to SECS (default 60) for a quiet machine —
    /// a second with fewer than 0.5 runnable threads not ours on average,
    /// under 10 % of a core used by others, steal under 2 % and softirq
    /// under 5 % of CPU time, a steady CPU frequency — and refuse to run,
    /// saying why, if none comes. Without it the run starts at once, and
    /// every row still reports what else ran beside it.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "60")]
    pub require_quiet: Option<f64>,
    /// Pin the Linux client (the measuring threads and the connections'
    /// threads they start) to this CPU (default: the scheduler places it).
    #[arg(long, value_name = "CPU")]
    pub pin_client: Option<usize>,
    /// Pin the server programs, every thread of them, to this CPU.
    #[arg(long, value_name = "CPU")]
    pub pin_servers: Option<usize>,
}

impl ConditionArgs {
    /// The placement these options and the engine's CPU give, refused
    /// where this process may not use a CPU named.
    pub fn placement(&self, engine: Option<usize>) -> Result<Placement> {
        let p = Placement {
            engine,
            client: self.pin_client,
            servers: self.pin_servers,
        };
        p.check()?;
        Ok(p)
    }

    /// With `--require-quiet`: waits for a quiet second (the progress bar
    /// says what is not quiet meanwhile) and returns it, or refuses.
    pub fn settle(&self, pb: &ProgressBar) -> Result<Option<Busy>> {
        let Some(secs) = self.require_quiet else {
            return Ok(None);
        };
        let max = Duration::try_from_secs_f64(secs)
            .map_err(|_| anyhow!("--require-quiet takes a number of seconds"))?;
        let limits = Limits::idle();
        let quiet = wait_quiet(max, &limits, &|b: &Busy| {
            pb.set_message(format!(
                "waiting for a quiet machine: {}",
                b.reasons(&limits).join("; ")
            ));
        })
        .context("--require-quiet")?;
        Ok(Some(quiet))
    }
}

/// A watch over one row, or `None` where the machine cannot be watched
/// (a failed watch never stops a measurement: its row says so).
pub fn watch() -> Option<Watch> {
    let me = i32::try_from(std::process::id()).ok()?;
    match Watch::start(vec![me], SAMPLE_EVERY) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot watch the machine");
            None
        }
    }
}

/// What a row's watch saw: the window, and whether it was quiet by the
/// measuring limits.
#[derive(Clone, Debug, Serialize)]
pub struct RowBusy {
    #[serde(flatten)]
    pub busy: Busy,
    pub quiet: bool,
    /// Why not, where not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

impl RowBusy {
    /// The end of a row's watch.
    pub fn of(w: Option<Watch>) -> Option<RowBusy> {
        let busy = w?.stop();
        let l = Limits::default();
        Some(RowBusy {
            quiet: busy.quiet(&l),
            reasons: busy.reasons(&l),
            busy,
        })
    }
}

/// The conditions of a whole run, as reports carry them.
#[derive(Clone, Debug, Serialize)]
pub struct Conditions {
    pub placement: Placement,
    /// "engine cpu 1, client free, servers free".
    pub placed: String,
    /// The quiet second `--require-quiet` waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Busy>,
    /// Every row's window merged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub during: Option<Busy>,
    /// Rows measured, and how many of them on a machine that was not quiet.
    pub rows: usize,
    pub rows_not_quiet: usize,
}

impl Conditions {
    pub fn new(placement: Placement, before: Option<Busy>) -> Conditions {
        Conditions {
            placed: placement.describe(),
            placement,
            before,
            during: None,
            rows: 0,
            rows_not_quiet: 0,
        }
    }

    /// Counts the rows' windows in.
    pub fn add<'a>(&mut self, rows: impl IntoIterator<Item = &'a RowBusy>) {
        let mut parts: Vec<Busy> = self.during.take().into_iter().collect();
        for r in rows {
            self.rows += 1;
            self.rows_not_quiet += usize::from(!r.quiet);
            parts.push(r.busy.clone());
        }
        self.during = (!parts.is_empty()).then(|| Busy::merge(&parts));
    }

    /// One line for a report's text: where the parties ran and how quiet
    /// the machine was.
    pub fn line(&self) -> String {
        let during = match (&self.during, self.rows_not_quiet) {
            (None, _) => "the machine was not watched".to_string(),
            (Some(_), 0) => format!("the machine was quiet through all {} rows", self.rows),
            (Some(d), n) => format!(
                "the machine was NOT quiet in {n} of {} rows (figures from those rows are \
                 suspect); over the run: {}",
                self.rows,
                d.summary()
            ),
        };
        format!("placement: {}; {during}.", self.placed)
    }
}

/// Pins the calling thread (the client's, inside its namespace) where the
/// placement says.
pub fn pin_client(p: &Placement) -> Result<()> {
    match p.client {
        Some(cpu) => crate::place::pin_this_thread(cpu),
        None => Ok(()),
    }
}

/// Pins a server program where the placement says.
pub fn pin_servers(p: &Placement, pid: u32) -> Result<()> {
    match p.servers {
        Some(cpu) => {
            let pid = i32::try_from(pid).map_err(|_| anyhow!("odd pid {pid}"))?;
            crate::place::pin_process(pid, cpu)
        }
        None => Ok(()),
    }
}

/// Refuses `--pin-*` where a scenario cannot honour them.
pub fn refuse_pins(args: &ConditionArgs, scenario: &str) -> Result<()> {
    if args.pin_client.is_some() || args.pin_servers.is_some() {
        bail!(
            "--pin-client and --pin-servers apply to the bulk and ping-pong rows, not {scenario}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn busy(quiet: bool) -> RowBusy {
        RowBusy {
            busy: Busy {
                secs: 1.0,
                samples: 5,
                other_runnable_mean: if quiet { 0.0 } else { 2.0 },
                other_runnable_max: if quiet { 0 } else { 3 },
                ..Busy::default()
            },
            quiet,
            reasons: Vec::new(),
        }
    }

    #[test]
    fn conditions_count_rows_that_were_not_quiet() {
        let mut c = Conditions::new(Placement::default(), None);
        assert!(c.line().contains("not watched"), "{}", c.line());
        c.add(&[busy(true), busy(true)]);
        assert!(
            c.line().contains("quiet through all 2 rows"),
            "{}",
            c.line()
        );
        c.add(&[busy(false)]);
        assert_eq!((c.rows, c.rows_not_quiet), (3, 1));
        assert!(
            c.line().contains("NOT quiet in 1 of 3 rows"),
            "{}",
            c.line()
        );
        assert!(c.line().starts_with("placement: "), "{}", c.line());
    }

    #[test]
    fn impossible_placements_are_refused_before_anything_runs() {
        let a = ConditionArgs {
            pin_client: Some(4096),
            ..ConditionArgs::default()
        };
        assert!(a.placement(None).is_err());
        assert!(ConditionArgs::default().placement(None).is_ok());
        assert!(refuse_pins(&a, "scale").is_err());
    }
}
