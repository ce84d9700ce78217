//! Unmodified servers on softoe beside the same server on Linux (`softoe
//! bench --only apps`, issue 19's last target): nginx serving a 64 KiB file
//! on kept-alive connections and a small one on a new connection per
//! request, memcached's `set`/`get`, and PostgreSQL under `pgbench`.
//!
//! One testbed serves every row. The program on softoe runs through the
//! `LD_PRELOAD` shim (`softoe run`, so as a user would run it) in the
//! switch's namespace, where the engine's host socket is reachable and its
//! own kernel sockets (PostgreSQL's IPv6 listener, say) collide with
//! nothing; it listens on the engine's address. The same program with the
//! same configuration runs on Linux's TCP in the peer namespace. The
//! Linux client namespace drives both with the same client: the load
//! generators here (std::net, one thread per connection) or `pgbench`.
//!
//! Every response is checked before it counts (see `http` and
//! `memcache`): a client error fails the row, with the error in the
//! report, and is never a request. A program that is not installed skips
//! its rows with the reason; the scenario itself does not fail.
//! Every server is killed with its whole process group when its rows end,
//! even on an error (`Server`), and its directory is removed (`TempDir`).

mod http;
mod memcache;
mod pg;
mod procs;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use indicatif::ProgressBar;
use serde::Serialize;

use super::targets::{Target, ratio};
use crate::bed::{BedOptions, CLIENT, ENGINE, PEER, RealBed};
use crate::table::Table;
use procs::{Server, TempDir, have, run_timeout};

/// The web server's port.
const HTTP_PORT: u16 = 8080;
/// memcached's port.
const MEMCACHED_PORT: u16 = 11211;
/// The file of the keep-alive row.
const BIG: usize = 64 * 1024;
/// The file of the new-connection row: small, so the row measures the
/// connection's setup and teardown.
const SMALL: usize = 1024;

/// The workloads, in order, with what issue 19 measured before (softoe ÷
/// Linux).
pub(super) const WORKLOADS: [(&str, &str); 4] = [
    ("nginx, 64 KiB file, keep-alive", "0.55"),
    ("nginx, new connection per request", "0.69"),
    ("memcached, set/get of 100 bytes", "0.63–0.70"),
    ("PostgreSQL, pgbench", "0.45"),
];

/// The scenario's options.
#[derive(Clone, Debug)]
pub(super) struct Options {
    /// How long each row's load runs (after a warm-up).
    pub secs: Duration,
    /// Client connections (pgbench's clients too).
    pub conns: usize,
}

impl Options {
    /// Progress steps: each workload on each system.
    pub(super) fn runs(&self) -> u64 {
        2 * WORKLOADS.len() as u64
    }
}

/// One workload on one system.
#[derive(Debug, Serialize)]
pub(crate) struct AppRow {
    pub workload: &'static str,
    /// "softoe" or "Linux".
    pub system: &'static str,
    pub conns: usize,
    /// Seconds measured.
    pub secs: f64,
    /// Requests, operations or transactions completed and checked.
    pub ops: u64,
    /// `ops` per second.
    pub rate: f64,
    /// What `rate` counts: "req/s", "ops/s" or "tps".
    pub unit: &'static str,
    /// Payload served per second (the file's bytes), MB/s, where it means
    /// something.
    pub mb_per_s: Option<f64>,
    /// Why the row failed (a client error, a server that did not start):
    /// its figures are zero.
    pub error: Option<String>,
    /// Why the row did not run (a program not installed).
    pub skipped: Option<String>,
}

impl AppRow {
    fn new(workload: &'static str, system: &'static str, conns: usize, unit: &'static str) -> Self {
        AppRow {
            workload,
            system,
            conns,
            secs: 0.0,
            ops: 0,
            rate: 0.0,
            unit,
            mb_per_s: None,
            error: None,
            skipped: None,
        }
    }

    /// The row as measured, or failed.
    fn with(mut self, m: Result<Load>, bytes_per_op: Option<usize>) -> Self {
        match m {
            Ok(l) => {
                self.secs = l.secs;
                self.ops = l.ops;
                self.rate = ratio(l.ops as f64, l.secs);
                self.mb_per_s = bytes_per_op.map(|b| self.rate * b as f64 / 1e6);
            }
            Err(e) => {
                tracing::error!(workload = self.workload, system = self.system, error = %format!("{e:#}"), "apps: the row failed");
                self.error = Some(format!("{e:#}"));
            }
        }
        self
    }
}

/// The time the load counts in: requests completed from `from` to `until`.
pub(crate) struct Window {
    pub from: Instant,
    pub until: Instant,
}

/// What a load did.
#[derive(Debug)]
struct Load {
    ops: u64,
    secs: f64,
}

/// The systems, in the order each workload runs on them.
#[derive(Clone, Copy, Debug)]
enum System {
    Softoe,
    Linux,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Softoe => "softoe",
            System::Linux => "Linux",
        }
    }

    fn ip(self) -> Ipv4Addr {
        match self {
            System::Softoe => ENGINE,
            System::Linux => PEER,
        }
    }

    /// The command that runs `program` as this system serves it: through
    /// `softoe run` in the switch's namespace, or plainly in the peer's.
    fn command(self, bed: &RealBed, exe: &Path, program: &str) -> std::process::Command {
        match self {
            System::Softoe => {
                let mut c = procs::in_ns(&bed.sw, &exe.to_string_lossy());
                c.arg("run").arg("--engine").arg(bed.host()).arg("--");
                c.arg(program);
                c
            }
            System::Linux => procs::in_ns(&bed.peer, program),
        }
    }
}

const SYSTEMS: [System; 2] = [System::Softoe, System::Linux];

/// Runs `conns` copies of `work` from the client namespace: a warm-up,
/// then `secs` counted.
fn drive<W>(bed: &RealBed, o: &Options, work: W) -> Result<Load>
where
    W: Fn(usize, &Window) -> Result<u64> + Send + Sync + 'static,
{
    let (conns, secs) = (o.conns, o.secs);
    let warm = (secs / 4).min(Duration::from_secs(1));
    let work = Arc::new(work);
    bed.client.run(move || -> Result<Load> {
        let from = Instant::now() + warm;
        let w = Window {
            from,
            until: from + secs,
        };
        let results: Vec<Result<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..conns)
                .map(|i| {
                    let (work, w) = (&work, &w);
                    s.spawn(move || work(i, w))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow!("a client thread panicked")))
                })
                .collect()
        });
        let secs = from.elapsed().as_secs_f64();
        let mut ops = 0;
        for r in results {
            ops += r?;
        }
        Ok(Load { ops, secs })
    })?
}

/// Runs the scenario: every workload on softoe and on Linux.
pub(super) fn run(
    base: &BedOptions,
    exe: &Path,
    o: &Options,
    pb: &ProgressBar,
) -> Result<Vec<AppRow>> {
    if o.conns == 0 || o.secs.is_zero() {
        bail!("--apps-secs must be above zero");
    }
    pb.set_message("apps: building the testbed");
    let bed = RealBed::start(base.clone())?;
    // Servers that drop to their own user (PostgreSQL's, nginx's workers)
    // attach to the engine too.
    std::fs::set_permissions(
        bed.host(),
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .context("opening the engine's host socket to every user")?;
    let mut rows = Vec::new();
    rows.extend(nginx(&bed, exe, o, pb));
    rows.extend(memcached(&bed, exe, o, pb));
    rows.extend(pgbench(&bed, exe, o, pb));
    Ok(rows)
}

/// Rows that did not run, for both systems.
fn skipped(workload: &'static str, conns: usize, unit: &'static str, why: &str) -> Vec<AppRow> {
    tracing::warn!(workload, why, "apps: skipped");
    SYSTEMS
        .iter()
        .map(|s| AppRow {
            skipped: Some(why.to_string()),
            ..AppRow::new(workload, s.name(), conns, unit)
        })
        .collect()
}

/// A file of `len` bytes of a pattern (not all alike, so a misplaced byte
/// shows).
fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// nginx's configuration in `dir`, listening on `ip`.
fn nginx_conf(dir: &Path, ip: Ipv4Addr) -> Result<std::path::PathBuf> {
    let d = dir.display();
    let conf = dir.join("nginx.conf");
    std::fs::create_dir_all(dir.join("www"))?;
    std::fs::create_dir_all(dir.join("tmp"))?;
    // One worker on each system; sendfile on (Debian's default): on a shim
    // socket the shim serves it as a read and a send from the program's
    // buffer, on Linux it is the kernel's zero-copy sendfile.
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\nerror_log {d}/error.log warn;\npid {d}/nginx.pid;\n\
             daemon off;\nevents {{ worker_connections 1024; }}\n\
             http {{ access_log off; sendfile on; tcp_nopush on; tcp_nodelay on;\n\
             keepalive_requests 1000000; keepalive_timeout 60s;\n\
             client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;\n\
             uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
             server {{ listen {ip}:{HTTP_PORT}; root {d}/www; }} }}\n"
        ),
    )?;
    Ok(conf)
}

/// Starts nginx on `sys` with both files; returns it once a GET succeeds.
fn start_nginx(
    bed: &RealBed,
    exe: &Path,
    sys: System,
    dir: &TempDir,
    big: &[u8],
    small: &[u8],
) -> Result<Server> {
    let conf = nginx_conf(dir.path(), sys.ip())?;
    std::fs::write(dir.path().join("www/big"), big)?;
    std::fs::write(dir.path().join("www/small"), small)?;
    // Its workers run as nobody: the tree must be readable.
    procs::readable(dir.path())?;
    let mut c = sys.command(bed, exe, "nginx");
    c.arg("-e")
        .arg(dir.path().join("error.log"))
        .arg("-c")
        .arg(&conf);
    let mut server = Server::spawn(c, "nginx", dir.path().join("stderr.log"), None)?;
    let addr = SocketAddrV4::new(sys.ip(), HTTP_PORT);
    let want = small.to_vec();
    server.wait_up(bed, move || {
        let mut s = std::net::TcpStream::connect_timeout(&addr.into(), Duration::from_secs(1))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        std::io::Write::write_all(
            &mut s,
            b"GET /small HTTP/1.1\r\nHost: softoe-bench\r\nConnection: close\r\n\r\n",
        )?;
        http::read_response(&mut s, &mut Vec::new(), &want, true)?;
        Ok(())
    })?;
    Ok(server)
}

/// nginx's two rows on each system.
fn nginx(bed: &RealBed, exe: &Path, o: &Options, pb: &ProgressBar) -> Vec<AppRow> {
    let (ka, fresh) = (WORKLOADS[0].0, WORKLOADS[1].0);
    if !have("nginx") {
        let why = "nginx is not installed (apt-get install nginx-light)";
        let mut rows = skipped(ka, o.conns, "req/s", why);
        rows.extend(skipped(fresh, o.conns, "req/s", why));
        pb.inc(4);
        return rows;
    }
    let big: Arc<Vec<u8>> = Arc::new(pattern(BIG));
    let small: Arc<Vec<u8>> = Arc::new(pattern(SMALL));
    let mut rows = Vec::new();
    for sys in SYSTEMS {
        pb.set_message(format!("apps: nginx on {}", sys.name()));
        let addr = SocketAddrV4::new(sys.ip(), HTTP_PORT);
        let dir = TempDir::new(&format!("nginx-{}", sys.name()));
        let server = dir
            .and_then(|d| start_nginx(bed, exe, sys, &d, &big, &small).map(|s| (d, s)))
            .with_context(|| format!("starting nginx on {}", sys.name()));
        let (ka_row, fresh_row) = match server {
            Ok((_dir, server)) => {
                let b = big.clone();
                let r = drive(bed, o, move |_, w| http::keep_alive(addr, "/big", &b, w));
                let r = server.check(r);
                let ka = AppRow::new(ka, sys.name(), o.conns, "req/s").with(r, Some(BIG));
                pb.inc(1);
                let s = small.clone();
                let r = drive(bed, o, move |_, w| {
                    http::fresh_connections(addr, "/small", &s, w)
                });
                let r = server.check(r);
                let fresh = AppRow::new(fresh, sys.name(), o.conns, "req/s").with(r, None);
                pb.inc(1);
                (ka, fresh)
            }
            Err(e) => {
                let msg = format!("{e:#}");
                pb.inc(2);
                (
                    AppRow::new(ka, sys.name(), o.conns, "req/s").with(Err(anyhow!("{msg}")), None),
                    AppRow::new(fresh, sys.name(), o.conns, "req/s").with(Err(e), None),
                )
            }
        };
        rows.push(ka_row);
        rows.push(fresh_row);
    }
    rows
}

/// memcached's row on each system.
fn memcached(bed: &RealBed, exe: &Path, o: &Options, pb: &ProgressBar) -> Vec<AppRow> {
    let name = WORKLOADS[2].0;
    if !have("memcached") {
        pb.inc(2);
        return skipped(
            name,
            o.conns,
            "ops/s",
            "memcached is not installed (apt-get install memcached)",
        );
    }
    let mut rows = Vec::new();
    for sys in SYSTEMS {
        pb.set_message(format!("apps: memcached on {}", sys.name()));
        let addr = SocketAddrV4::new(sys.ip(), MEMCACHED_PORT);
        let r = TempDir::new(&format!("memcached-{}", sys.name())).and_then(|dir| {
            let mut c = sys.command(bed, exe, "memcached");
            // Two worker threads, no UDP, nobody's rights (it refuses root).
            c.args([
                "-u", "nobody", "-t", "2", "-U", "0", "-m", "64", "-c", "1024",
            ])
            .args([
                "-l",
                &sys.ip().to_string(),
                "-p",
                &MEMCACHED_PORT.to_string(),
            ]);
            let mut server = Server::spawn(c, "memcached", dir.path().join("stderr.log"), None)?;
            server.wait_up(bed, move || {
                let mut s =
                    std::net::TcpStream::connect_timeout(&addr.into(), Duration::from_secs(1))?;
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                memcache::set_get(
                    &mut s,
                    &mut Vec::new(),
                    &mut Vec::new(),
                    "softoe-bench:probe",
                    b"up",
                )
            })?;
            let r = drive(bed, o, move |i, w| memcache::load(addr, i, w));
            server.check(r)
        });
        rows.push(AppRow::new(name, sys.name(), o.conns, "ops/s").with(
            r.with_context(|| format!("memcached on {}", sys.name())),
            None,
        ));
        pb.inc(1);
    }
    rows
}

/// PostgreSQL's row on each system.
fn pgbench(bed: &RealBed, exe: &Path, o: &Options, pb: &ProgressBar) -> Vec<AppRow> {
    let name = WORKLOADS[3].0;
    let missing: Vec<&str> = ["initdb", "postgres", "pgbench", "psql"]
        .into_iter()
        .filter(|p| pg::bin(p).is_none())
        .collect();
    if !missing.is_empty() || pg::postgres_ids().is_err() {
        pb.inc(2);
        let why = format!(
            "PostgreSQL is not installed (missing: {}; apt-get install postgresql)",
            if missing.is_empty() {
                "the postgres user".to_string()
            } else {
                missing.join(", ")
            }
        );
        return skipped(name, o.conns, "tps", &why);
    }
    let mut rows = Vec::new();
    for sys in SYSTEMS {
        pb.set_message(format!("apps: PostgreSQL on {}", sys.name()));
        let r = TempDir::new(&format!("pg-{}", sys.name()))
            .and_then(|dir| pg_row(bed, exe, o, sys, &dir));
        rows.push(AppRow::new(name, sys.name(), o.conns, "tps").with(
            r.with_context(|| format!("PostgreSQL on {}", sys.name())),
            None,
        ));
        pb.inc(1);
    }
    rows
}

/// A cluster, its server on `sys`, `pgbench -i` and the measured run.
fn pg_row(bed: &RealBed, exe: &Path, o: &Options, sys: System, dir: &TempDir) -> Result<Load> {
    let data = pg::cluster(dir.path())?;
    let bin = |p: &str| pg::bin(p).ok_or_else(|| anyhow!("no {p}"));
    // `ip netns exec` needs root: the server drops to `postgres` inside
    // (after `softoe run`, which execs it; the shim attaches lazily, as the
    // postgres user).
    let mut c = sys.command(bed, exe, "setpriv");
    c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
        .arg(bin("postgres")?)
        .args(pg::server_args(dir.path(), &data, sys.ip()));
    // A fast shutdown (SIGINT) lets the postmaster take its backends and
    // shared memory with it; the group is killed after.
    let mut server = Server::spawn(
        c,
        "postgres",
        dir.path().join("server.log"),
        Some(libc::SIGINT),
    )?;
    let host = sys.ip().to_string();
    let client = |p: &str| -> Result<std::process::Command> {
        let mut c = bed.client.command(&bin(p)?.to_string_lossy());
        c.args(["-h", &host, "-U", "postgres"]);
        Ok(c)
    };
    server.wait_up_cmd(
        || {
            let mut c = client("psql")?;
            c.args(["-c", "select 1", "postgres"]);
            Ok(c)
        },
        dir.path(),
    )?;
    let mut init = client("pgbench")?;
    init.args(["-i", "-q", "-s", "1", "postgres"]);
    let out = server.check(run_timeout(init, 120, "pgbench -i", dir.path()))?;
    if !out.status.success() {
        bail!("pgbench -i: {}\n{}", out.status, out.stderr);
    }
    let secs = o.secs.as_secs().max(1);
    let mut run = client("pgbench")?;
    run.args([
        "-c",
        &o.conns.to_string(),
        "-j",
        "2",
        "-T",
        &secs.to_string(),
    ])
    .arg("postgres");
    let t = Instant::now();
    let out = server.check(run_timeout(run, secs + 60, "pgbench", dir.path()))?;
    if !out.status.success() {
        bail!("pgbench: {}\n{}{}", out.status, out.stdout, out.stderr);
    }
    tracing::debug!(elapsed = ?t.elapsed(), "pgbench ran");
    let r = pg::parse_pgbench(&out.stdout, &out.stderr)?;
    // pgbench's own rate (without its connection time): the row's secs
    // are what make it up.
    Ok(Load {
        ops: r.transactions,
        secs: ratio(r.transactions as f64, r.tps),
    })
}

/// One target per workload: softoe's rate ÷ Linux's.
pub(super) fn targets(rows: &[AppRow], t: &mut Vec<Target>) {
    for (name, before) in WORKLOADS {
        let find = |sys: &str| rows.iter().find(|r| r.workload == name && r.system == sys);
        let (Some(s), Some(l)) = (find("softoe"), find("Linux")) else {
            continue;
        };
        if s.skipped.is_some() {
            continue;
        }
        let failed = s.error.is_some() || l.error.is_some() || l.rate <= 0.0;
        let x = if failed { 0.0 } else { ratio(s.rate, l.rate) };
        t.push(Target {
            what: format!(
                "unmodified {name}, {}{}",
                s.unit,
                if failed {
                    " — FAILED, see the apps table".to_string()
                } else {
                    format!(" (issue 19: {before})")
                }
            ),
            ratio: x,
            unit: "x",
            goal: "≥ 1.0",
            met: !failed && x >= 1.0,
            ..Target::POINT
        });
    }
}

/// The rows as a table.
pub(super) fn render(rows: &[AppRow], command: &str) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nunmodified servers, on softoe (`softoe run`) and on Linux; one Linux client ({command})"
    );
    let mut t = Table::new()
        .left("workload")
        .left("system")
        .right("conns")
        .right("secs")
        .right("count")
        .right("rate")
        .left("")
        .right("MB/s");
    for r in rows {
        let lead = [
            r.workload.to_string(),
            r.system.to_string(),
            r.conns.to_string(),
        ];
        if let Some(why) = &r.skipped {
            t.row_tail(lead, &format!("  skipped: {why}"));
        } else if let Some(e) = &r.error {
            t.row_tail(lead, &format!("  FAILED: {e}"));
        } else {
            let [w, sys, c] = lead;
            t.row([
                w,
                sys,
                c,
                format!("{:.1}", r.secs),
                r.ops.to_string(),
                format!("{:.0}", r.rate),
                r.unit.to_string(),
                r.mb_per_s.map_or_else(|| "-".into(), |m| format!("{m:.0}")),
            ]);
        }
    }
    s.push_str(&t.render());
    let _ = writeln!(
        s,
        "(nginx: 1 worker, sendfile on — the shim serves it as read + send; keep-alive GETs of a\n \
         64 KiB file, new-connection GETs of a {SMALL}-byte one; every response checked byte for\n \
         byte. memcached: a set and a get of its value per pair, 2 threads. pgbench: TPC-B-like,\n \
         scale 1, -j 2, its tps without connection time. Client: {CLIENT}.)"
    );
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn row(workload: &'static str, system: &'static str, rate: f64) -> AppRow {
        AppRow {
            secs: 5.0,
            ops: (rate * 5.0) as u64,
            rate,
            mb_per_s: Some(rate * 0.065),
            ..AppRow::new(workload, system, 8, "req/s")
        }
    }

    #[test]
    fn each_workload_is_a_ratio_to_linux() {
        let (ka, fresh, mc, pg) = (
            WORKLOADS[0].0,
            WORKLOADS[1].0,
            WORKLOADS[2].0,
            WORKLOADS[3].0,
        );
        let mut failed = row(fresh, "softoe", 0.0);
        failed.error = Some("status 404".into());
        let rows = vec![
            row(ka, "softoe", 1200.0),
            row(ka, "Linux", 1000.0),
            failed,
            row(fresh, "Linux", 3000.0),
            row(mc, "softoe", 600.0),
            row(mc, "Linux", 1000.0),
            AppRow {
                skipped: Some("no postgres".into()),
                ..AppRow::new(pg, "softoe", 8, "tps")
            },
            AppRow {
                skipped: Some("no postgres".into()),
                ..AppRow::new(pg, "Linux", 8, "tps")
            },
        ];
        let mut t = Vec::new();
        targets(&rows, &mut t);
        // A skipped workload has no target; a failed one is missed.
        assert_eq!(t.len(), 3);
        assert!((t[0].ratio - 1.2).abs() < 1e-9 && t[0].met, "{:?}", t[0]);
        assert!(t[0].what.contains("(issue 19: 0.55)"), "{}", t[0].what);
        assert!(t[1].ratio == 0.0 && !t[1].met && t[1].what.contains("FAILED"));
        assert!((t[2].ratio - 0.6).abs() < 1e-9 && !t[2].met);
        let text = render(&rows, "softoe bench --only apps");
        assert!(text.contains("FAILED: status 404"), "{text}");
        assert!(text.contains("skipped: no postgres"), "{text}");
        let line = text.lines().find(|l| l.starts_with(ka)).unwrap();
        let f: Vec<&str> = line[ka.len()..].split_whitespace().collect();
        assert_eq!(f, ["softoe", "8", "5.0", "6000", "1200", "req/s", "78"]);
    }

    #[test]
    fn a_failed_load_is_an_error_not_a_rate() {
        let r = AppRow::new("w", "softoe", 8, "req/s").with(Err(anyhow!("short response")), None);
        assert_eq!((r.ops, r.rate), (0, 0.0));
        assert_eq!(r.error.as_deref(), Some("short response"));
        let r = AppRow::new("w", "softoe", 8, "req/s").with(
            Ok(Load {
                ops: 100,
                secs: 2.0,
            }),
            Some(1_000_000),
        );
        assert_eq!((r.rate, r.mb_per_s), (50.0, Some(50.0)));
    }
}
