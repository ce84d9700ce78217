//! PostgreSQL with `pgbench`: a fresh cluster for each system (as the
//! preload crate's `servers` test makes it), the server run as the
//! `postgres` user, and pgbench's report read strictly — a client aborted
//! or a transaction failed fails the run.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail};

/// PostgreSQL's program `name` (initdb, postgres, pgbench, psql) from the
/// newest version under /usr/lib/postgresql, else from `PATH`.
pub(crate) fn bin(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join(name).exists())
        .collect();
    // Version directories sort as numbers ("9.6" before "15").
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.split('.').next())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(d) = dirs.pop() {
        return Some(d.join(name));
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The `postgres` user's uid and gid (PostgreSQL refuses to run as root).
pub(crate) fn postgres_ids() -> Result<(u32, u32)> {
    let id = |flag: &str| -> Result<u32> {
        let o = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .context("running id")?;
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .map_err(|_| anyhow!("no postgres user (id {flag} postgres failed)"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// A fresh cluster in `dir/data`, owned by `postgres`, trusting the
/// testbed's hosts (10.7.0.0/24).
pub(crate) fn cluster(dir: &Path) -> Result<PathBuf> {
    let (uid, gid) = postgres_ids()?;
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .with_context(|| format!("chown {}", dir.display()))?;
    let data = dir.join("data");
    let initdb = bin("initdb").ok_or_else(|| anyhow!("no initdb"))?;
    let o = Command::new(initdb)
        .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
        .arg(&data)
        .uid(uid)
        .gid(gid)
        .output()
        .context("running initdb")?;
    if !o.status.success() {
        bail!(
            "initdb: {}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let hba = data.join("pg_hba.conf");
    let mut t = std::fs::read_to_string(&hba).context("reading pg_hba.conf")?;
    t.push_str("host all all 10.7.0.0/24 trust\n");
    std::fs::write(&hba, t).context("writing pg_hba.conf")?;
    Ok(data)
}

/// The arguments after `postgres` for the cluster in `dir`, listening on
/// `ip` only, its Unix socket in `dir`; otherwise the default
/// configuration, as the preload crate's `servers` test runs it.
pub(crate) fn server_args(dir: &Path, data: &Path, ip: std::net::Ipv4Addr) -> Vec<String> {
    vec![
        "-D".into(),
        data.display().to_string(),
        "-c".into(),
        format!("listen_addresses={ip}"),
        "-c".into(),
        "port=5432".into(),
        "-c".into(),
        format!("unix_socket_directories={}", dir.display()),
    ]
}

/// What one `pgbench` run reports.
#[derive(Debug, PartialEq)]
pub(crate) struct Pgbench {
    pub tps: f64,
    pub transactions: u64,
}

/// Reads pgbench's report (its stdout) strictly: the transactions
/// processed, none failed, and the rate; `stderr` must not tell of an
/// aborted client.
pub(crate) fn parse_pgbench(stdout: &str, stderr: &str) -> Result<Pgbench> {
    if stderr.contains("aborted") || stdout.contains("aborted") {
        bail!("pgbench: clients aborted: {}", stderr.trim());
    }
    let field = |key: &str| -> Result<&str> {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
            .ok_or_else(|| anyhow!("no `{key}` in pgbench's report:\n{stdout}{stderr}"))
    };
    // pgbench 15 reports failures; older ones fail loudly instead.
    if let Ok(failed) = field("number of failed transactions:")
        && !failed.starts_with("0 ")
        && failed != "0"
    {
        bail!("pgbench: failed transactions: {failed}");
    }
    let processed = field("number of transactions actually processed:")?;
    let transactions: u64 = processed
        .split('/')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| anyhow!("transactions processed: {processed:?}"))?;
    if transactions == 0 {
        bail!("pgbench: no transaction completed");
    }
    let tps_text = field("tps =")?;
    let tps: f64 = tps_text
        .split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .filter(|t: &f64| t.is_finite() && *t > 0.0)
        .ok_or_else(|| anyhow!("tps: {tps_text:?}"))?;
    Ok(Pgbench { tps, transactions })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const REPORT: &str = "pgbench (15.8 (Debian 15.8-0+deb12u1))\n\
        transaction type: <builtin: TPC-B (sort of)>\n\
        scaling factor: 1\n\
        query mode: simple\n\
        number of clients: 8\n\
        number of threads: 2\n\
        maximum number of tries: 1\n\
        duration: 5 s\n\
        number of transactions actually processed: 6543\n\
        number of failed transactions: 0 (0.000%)\n\
        latency average = 6.113 ms\n\
        initial connection time = 21.437 ms\n\
        tps = 1308.712345 (without initial connection time)\n";

    #[test]
    fn a_clean_report_gives_its_rate() {
        let r = parse_pgbench(REPORT, "").unwrap();
        assert_eq!(r.transactions, 6543);
        assert!((r.tps - 1308.712345).abs() < 1e-9);
        // A fixed transaction count reads "processed: N/N".
        let fixed = REPORT.replace("processed: 6543", "processed: 800/800");
        assert_eq!(parse_pgbench(&fixed, "").unwrap().transactions, 800);
    }

    #[test]
    fn failures_aborts_and_odd_reports_fail() {
        let failed = REPORT.replace(
            "failed transactions: 0 (0.000%)",
            "failed transactions: 3 (0.05%)",
        );
        assert!(parse_pgbench(&failed, "").is_err());
        let aborted = "pgbench: error: client 3 aborted in command 4 (SQL) of script 0";
        assert!(parse_pgbench(REPORT, aborted).is_err());
        let none = REPORT.replace("processed: 6543", "processed: 0");
        assert!(parse_pgbench(&none, "").is_err());
        assert!(parse_pgbench(&REPORT.replace("tps = 1308.712345", "tps = nan"), "").is_err());
        assert!(parse_pgbench(&REPORT.replace("tps =", "rate:"), "").is_err());
        assert!(parse_pgbench("", "connection refused").is_err());
    }
}
