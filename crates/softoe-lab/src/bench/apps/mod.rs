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
//! Each workload's server runs on softoe and on Linux at once (they listen
//! on different addresses, the engine's and the peer's), started once,
//! and the client measures them in windows of `--apps-secs`, interleaved:
//! round r runs softoe's window and Linux's in `stats::order(r, 2)` (A B,
//! B A, …), each side's first window after a warm-up, until the plan's
//! stop rule (`--min-rounds`, `--max-rounds`, `--width`, `--row-secs`) is
//! met by each side's rate and by the paired ratio. Each window gives one
//! rate; a row reports their median with its interval (`figure`), the
//! windows' totals of requests and seconds, and softoe's row the median
//! and interval of softoe ÷ Linux round by round (`vs_linux`), which alone
//! decides the target: met or missed where the interval lies on one side
//! of 1.0, within noise where it straddles it. A failed window fails its
//! side's row with the error; the other side is measured again alone.
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

use super::repeat::{Repeats, interleaved};
use super::targets::{Target, ratio};
use crate::bed::{BedOptions, CLIENT, ENGINE, PEER, RealBed};
use crate::stats::{Estimate, Figure, Goal, StopRule, paired_ratios};
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
    /// How long each window of load runs (the first of each side after a
    /// warm-up).
    pub secs: Duration,
    /// Client connections (pgbench's clients too).
    pub conns: usize,
}

impl Options {
    /// Progress steps: each workload, both systems interleaved in it.
    pub(super) fn runs(&self) -> u64 {
        WORKLOADS.len() as u64
    }
}

/// One workload on one system: the windows of its interleaved rounds.
#[derive(Debug, Serialize)]
pub(crate) struct AppRow {
    pub workload: &'static str,
    /// "softoe" or "Linux".
    pub system: &'static str,
    pub conns: usize,
    /// Seconds measured, the total over its windows.
    pub secs: f64,
    /// Requests, operations or transactions completed and checked, the
    /// total over its windows.
    pub ops: u64,
    /// The median of its windows' rates (`ops` per second each; not the
    /// totals' quotient).
    pub rate: f64,
    /// What `rate` counts: "req/s", "ops/s" or "tps".
    pub unit: &'static str,
    /// Payload served per second (the file's bytes) at the median rate,
    /// MB/s, where it means something.
    pub mb_per_s: Option<f64>,
    /// The windows' rates in the order measured, median, interval and
    /// modes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub figure: Option<Figure>,
    /// softoe's rate ÷ Linux's, window by window of the same round
    /// (softoe's row, where both sides were measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_linux: Option<Figure>,
    /// How its rounds ended (none where the row failed or was skipped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<Repeats>,
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
            figure: None,
            vs_linux: None,
            repeats: None,
            error: None,
            skipped: None,
        }
    }

    /// The row as measured, or failed.
    fn with(mut self, m: Result<&Measured, &str>, bytes_per_op: Option<usize>) -> Self {
        match m {
            Ok(m) => {
                self.secs = m.loads.iter().map(|l| l.secs).sum();
                self.ops = m.loads.iter().map(|l| l.ops).sum();
                self.figure = Figure::of(&m.rates());
                self.rate = self.figure.as_ref().map_or(0.0, |f| f.estimate.median);
                self.mb_per_s = bytes_per_op.map(|b| self.rate * b as f64 / 1e6);
                self.repeats = Some(m.repeats);
            }
            Err(e) => {
                tracing::error!(
                    workload = self.workload,
                    system = self.system,
                    error = e,
                    "apps: the row failed"
                );
                self.error = Some(e.to_string());
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

/// What one window of load did.
#[derive(Debug)]
struct Load {
    ops: u64,
    secs: f64,
}

impl Load {
    fn rate(&self) -> f64 {
        ratio(self.ops as f64, self.secs)
    }
}

/// One side's windows, one a round, and how its rounds ended.
#[derive(Debug)]
struct Measured {
    loads: Vec<Load>,
    repeats: Repeats,
}

impl Measured {
    fn rates(&self) -> Vec<f64> {
        self.loads.iter().map(Load::rate).collect()
    }
}

/// A server and its directory, which outlives it (fields drop in order).
struct Running {
    server: Server,
    dir: TempDir,
}

/// The systems, in the order of `interleave`'s sides.
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

/// The warm-up before a side's first window. Measured (--quick, 2 s
/// windows): after half a second memcached's first window on softoe ran
/// at a quarter of its later ones (9.4k and 9.9k ops/s against 40–54k,
/// two runs), after two seconds or three at the same rate as the rest;
/// the other rows' first windows did not stand out either way. Later
/// windows need none: the servers stay up and warm between them.
const WARM_UP: Duration = Duration::from_secs(2);

/// Runs `conns` copies of `work` from the client namespace: a warm-up
/// where `warm`, then `secs` counted.
fn drive<W>(bed: &RealBed, o: &Options, warm: bool, work: W) -> Result<Load>
where
    W: Fn(usize, &Window) -> Result<u64> + Send + Sync + 'static,
{
    let (conns, secs) = (o.conns, o.secs);
    let warm = if warm { WARM_UP } else { Duration::ZERO };
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

/// What must narrow before a workload stops: each side's rate and, with
/// both sides, softoe's paired ratio to Linux.
fn watch(v: &[Vec<f64>]) -> Vec<Estimate> {
    let mut e: Vec<Estimate> = v.iter().filter_map(|s| Estimate::of(s)).collect();
    if let [a, b] = v {
        e.extend(Estimate::of(&paired_ratios(a, b)));
    }
    e
}

/// Measures one workload on the systems whose server started (`sides`,
/// in `SYSTEMS`' order; an error says why one did not) in interleaved
/// windows until `rule` stops: `window(sys, server, warm)` is one window
/// of load, `warm` on each side's first. A failed window fails its side
/// with the error; the other side is then measured again alone (already
/// warm), so that its row is whole rounds under the rule, as when its
/// partner's server never started.
fn interleave<S>(
    rule: &StopRule,
    pb: &ProgressBar,
    what: &str,
    sides: [Result<&S, String>; 2],
    mut window: impl FnMut(System, &S, bool) -> Result<Load>,
) -> [Result<Measured, String>; 2] {
    let mut out: [Result<Measured, String>; 2] =
        [Err("not measured".into()), Err("not measured".into())];
    let mut live: Vec<(usize, &S)> = Vec::new();
    for (i, s) in sides.into_iter().enumerate() {
        match s {
            Ok(s) => live.push((i, s)),
            Err(e) => out[i] = Err(e),
        }
    }
    let mut warmed = [false; 2];
    while !live.is_empty() {
        let mut loads: Vec<Vec<Load>> = live.iter().map(|_| Vec::new()).collect();
        let mut failed: Option<(usize, anyhow::Error)> = None;
        let r = interleaved(
            rule,
            live.len(),
            |k| {
                let (i, s) = live[k];
                let sys = SYSTEMS[i];
                pb.set_message(format!("apps: {what} on {}", sys.name()));
                let warm = !std::mem::replace(&mut warmed[i], true);
                match window(sys, s, warm) {
                    Ok(l) => {
                        let rate = l.rate();
                        loads[k].push(l);
                        Ok(rate)
                    }
                    Err(e) => {
                        failed = Some((k, e));
                        bail!("{} failed", sys.name())
                    }
                }
            },
            watch,
        );
        match (r, failed) {
            (Ok(rounds), _) => {
                for ((i, _), loads) in live.iter().zip(loads) {
                    out[*i] = Ok(Measured {
                        loads,
                        repeats: rounds.repeats(),
                    });
                }
                break;
            }
            (Err(_), Some((k, e))) => {
                let (i, _) = live.remove(k);
                out[i] = Err(format!("{e:#}"));
            }
            (Err(e), None) => {
                for (i, _) in live.drain(..) {
                    out[i] = Err(format!("{e:#}"));
                }
            }
        }
    }
    out
}

/// A workload's two rows from its sides' measurements: softoe's carries
/// the paired ratios where both were measured.
fn rows(
    workload: &'static str,
    unit: &'static str,
    conns: usize,
    bytes_per_op: Option<usize>,
    measured: &[Result<Measured, String>; 2],
) -> Vec<AppRow> {
    let vs_linux = match measured {
        [Ok(s), Ok(l)] => Figure::of(&paired_ratios(&s.rates(), &l.rates())),
        _ => None,
    };
    let mut rows: Vec<AppRow> = SYSTEMS
        .iter()
        .zip(measured)
        .map(|(sys, m)| {
            AppRow::new(workload, sys.name(), conns, unit)
                .with(m.as_ref().map_err(String::as_str), bytes_per_op)
        })
        .collect();
    if let Some(s) = rows.first_mut() {
        s.vs_linux = vs_linux;
    }
    rows
}

/// Runs the scenario: every workload on softoe and on Linux, interleaved.
pub(super) fn run(
    base: &BedOptions,
    exe: &Path,
    o: &Options,
    rule: &StopRule,
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
    rows.extend(nginx(&bed, exe, o, rule, pb));
    rows.extend(memcached(&bed, exe, o, rule, pb));
    rows.extend(pgbench(&bed, exe, o, rule, pb));
    Ok(rows)
}

/// Each system's server from `start`, all started before any is measured
/// (both serve at once: they listen on different addresses).
fn start_both(
    what: &str,
    mut start: impl FnMut(System) -> Result<Running>,
) -> [Result<Running, String>; 2] {
    SYSTEMS.map(|sys| {
        start(sys)
            .with_context(|| format!("starting {what} on {}", sys.name()))
            .map_err(|e| format!("{e:#}"))
    })
}

/// The sides `interleave` takes from the servers started.
fn sides(started: &[Result<Running, String>; 2]) -> [Result<&Running, String>; 2] {
    started.each_ref().map(|r| r.as_ref().map_err(Clone::clone))
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

/// nginx's two rows on each system: both servers started once, each row
/// measured interleaved on them.
fn nginx(bed: &RealBed, exe: &Path, o: &Options, rule: &StopRule, pb: &ProgressBar) -> Vec<AppRow> {
    let (ka, fresh) = (WORKLOADS[0].0, WORKLOADS[1].0);
    if !have("nginx") {
        let why = "nginx is not installed (apt-get install nginx-light)";
        let mut rows = skipped(ka, o.conns, "req/s", why);
        rows.extend(skipped(fresh, o.conns, "req/s", why));
        pb.inc(2);
        return rows;
    }
    let big: Arc<Vec<u8>> = Arc::new(pattern(BIG));
    let small: Arc<Vec<u8>> = Arc::new(pattern(SMALL));
    pb.set_message("apps: starting nginx");
    let started = start_both("nginx", |sys| {
        let dir = TempDir::new(&format!("nginx-{}", sys.name()))?;
        let server = start_nginx(bed, exe, sys, &dir, &big, &small)?;
        Ok(Running { server, dir })
    });
    // Keep-alive GETs of the big file, then new-connection GETs of the
    // small one, on the same two servers.
    type Get = fn(SocketAddrV4, &str, &[u8], &Window) -> Result<u64>;
    let loads = [
        (ka, http::keep_alive as Get, "/big", &big, Some(BIG)),
        (fresh, http::fresh_connections, "/small", &small, None),
    ];
    let mut out = Vec::new();
    for (workload, get, path, body, bytes_per_op) in loads {
        let m = interleave(rule, pb, workload, sides(&started), |sys, r, warm| {
            let (a, body) = (SocketAddrV4::new(sys.ip(), HTTP_PORT), Arc::clone(body));
            r.server
                .check(drive(bed, o, warm, move |_, w| get(a, path, &body, w)))
        });
        out.extend(rows(workload, "req/s", o.conns, bytes_per_op, &m));
        pb.inc(1);
    }
    out
}

/// Starts memcached on `sys`; returns it once a set and a get succeed.
fn start_memcached(bed: &RealBed, exe: &Path, sys: System) -> Result<Running> {
    let dir = TempDir::new(&format!("memcached-{}", sys.name()))?;
    let addr = SocketAddrV4::new(sys.ip(), MEMCACHED_PORT);
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
        let mut s = std::net::TcpStream::connect_timeout(&addr.into(), Duration::from_secs(1))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        memcache::set_get(
            &mut s,
            &mut Vec::new(),
            &mut Vec::new(),
            "softoe-bench:probe",
            b"up",
        )
    })?;
    Ok(Running { server, dir })
}

/// memcached's row on each system.
fn memcached(
    bed: &RealBed,
    exe: &Path,
    o: &Options,
    rule: &StopRule,
    pb: &ProgressBar,
) -> Vec<AppRow> {
    let name = WORKLOADS[2].0;
    if !have("memcached") {
        pb.inc(1);
        return skipped(
            name,
            o.conns,
            "ops/s",
            "memcached is not installed (apt-get install memcached)",
        );
    }
    pb.set_message("apps: starting memcached");
    let started = start_both("memcached", |sys| start_memcached(bed, exe, sys));
    let m = interleave(rule, pb, "memcached", sides(&started), |sys, r, warm| {
        let addr = SocketAddrV4::new(sys.ip(), MEMCACHED_PORT);
        r.server
            .check(drive(bed, o, warm, move |i, w| memcache::load(addr, i, w)))
            .with_context(|| format!("memcached on {}", sys.name()))
    });
    pb.inc(1);
    rows(name, "ops/s", o.conns, None, &m)
}

/// PostgreSQL's row on each system.
fn pgbench(
    bed: &RealBed,
    exe: &Path,
    o: &Options,
    rule: &StopRule,
    pb: &ProgressBar,
) -> Vec<AppRow> {
    let name = WORKLOADS[3].0;
    let missing: Vec<&str> = ["initdb", "postgres", "pgbench", "psql"]
        .into_iter()
        .filter(|p| pg::bin(p).is_none())
        .collect();
    if !missing.is_empty() || pg::postgres_ids().is_err() {
        pb.inc(1);
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
    pb.set_message("apps: starting PostgreSQL");
    let started = start_both("PostgreSQL", |sys| start_pg(bed, exe, sys));
    let m = interleave(rule, pb, "PostgreSQL", sides(&started), |sys, r, warm| {
        pg_window(bed, o, sys, r, warm).with_context(|| format!("PostgreSQL on {}", sys.name()))
    });
    pb.inc(1);
    rows(name, "tps", o.conns, None, &m)
}

/// PostgreSQL's client program `p`, run from the client namespace against
/// `sys`'s server.
fn pg_client(bed: &RealBed, sys: System, p: &str) -> Result<std::process::Command> {
    let bin = pg::bin(p).ok_or_else(|| anyhow!("no {p}"))?;
    let mut c = bed.client.command(&bin.to_string_lossy());
    c.args(["-h", &sys.ip().to_string(), "-U", "postgres"]);
    Ok(c)
}

/// A cluster and its server on `sys`, once it answers, with `pgbench -i`'s
/// tables.
fn start_pg(bed: &RealBed, exe: &Path, sys: System) -> Result<Running> {
    let dir = TempDir::new(&format!("pg-{}", sys.name()))?;
    let data = pg::cluster(dir.path())?;
    let postgres = pg::bin("postgres").ok_or_else(|| anyhow!("no postgres"))?;
    // `ip netns exec` needs root: the server drops to `postgres` inside
    // (after `softoe run`, which execs it; the shim attaches lazily, as the
    // postgres user).
    let mut c = sys.command(bed, exe, "setpriv");
    c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
        .arg(postgres)
        .args(pg::server_args(dir.path(), &data, sys.ip()));
    // A fast shutdown (SIGINT) lets the postmaster take its backends and
    // shared memory with it; the group is killed after.
    let mut server = Server::spawn(
        c,
        "postgres",
        dir.path().join("server.log"),
        Some(libc::SIGINT),
    )?;
    server.wait_up_cmd(
        || {
            let mut c = pg_client(bed, sys, "psql")?;
            c.args(["-c", "select 1", "postgres"]);
            Ok(c)
        },
        dir.path(),
    )?;
    let mut init = pg_client(bed, sys, "pgbench")?;
    init.args(["-i", "-q", "-s", "1", "postgres"]);
    let out = server.check(run_timeout(init, 120, "pgbench -i", dir.path()))?;
    if !out.status.success() {
        bail!("pgbench -i: {}\n{}", out.status, out.stderr);
    }
    Ok(Running { server, dir })
}

/// One `pgbench -T secs` run against `pg`, checked.
fn pgbench_once(bed: &RealBed, o: &Options, sys: System, pg: &Running, secs: u64) -> Result<Load> {
    let mut run = pg_client(bed, sys, "pgbench")?;
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
    let out = pg
        .server
        .check(run_timeout(run, secs + 60, "pgbench", pg.dir.path()))?;
    if !out.status.success() {
        bail!("pgbench: {}\n{}{}", out.status, out.stdout, out.stderr);
    }
    tracing::debug!(elapsed = ?t.elapsed(), "pgbench ran");
    let r = pg::parse_pgbench(&out.stdout, &out.stderr)?;
    // pgbench's own rate (without its connection time): the window's secs
    // are what make it up.
    Ok(Load {
        ops: r.transactions,
        secs: ratio(r.transactions as f64, r.tps),
    })
}

/// One window of `pgbench` against `pg` (`--apps-secs`, whole seconds),
/// after a run of `WARM_UP` not counted where `warm`.
fn pg_window(bed: &RealBed, o: &Options, sys: System, pg: &Running, warm: bool) -> Result<Load> {
    if warm {
        pgbench_once(bed, o, sys, pg, WARM_UP.as_secs()).context("pgbench's warm-up")?;
    }
    pgbench_once(bed, o, sys, pg, o.secs.as_secs().max(1))
}

/// One target per workload: softoe's rate ÷ Linux's, decided by the
/// interval of the rounds' paired ratios.
pub(super) fn targets(rows: &[AppRow], t: &mut Vec<Target>) {
    for (name, before) in WORKLOADS {
        let find = |sys: &str| rows.iter().find(|r| r.workload == name && r.system == sys);
        let (Some(s), Some(l)) = (find("softoe"), find("Linux")) else {
            continue;
        };
        if s.skipped.is_some() {
            continue;
        }
        let what = format!("unmodified {name}, {}", s.unit);
        match &s.vs_linux {
            Some(r) if s.error.is_none() && l.error.is_none() && l.rate > 0.0 => {
                t.push(Target::repeated(
                    format!("{what} (issue 19: {before})"),
                    &r.samples,
                    "≥ 1.0",
                    Goal::AtLeast(1.0),
                ));
            }
            _ => t.push(Target {
                what: format!("{what} — FAILED, see the apps table"),
                ratio: 0.0,
                unit: "x",
                goal: "≥ 1.0",
                met: false,
                ..Target::POINT
            }),
        }
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
        .right("÷ Linux")
        .right("MB/s")
        .right("n");
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
                r.figure.as_ref().map_or_else(
                    || format!("{:.0}", r.rate),
                    |f| f.show(|x| format!("{x:.0}")),
                ),
                r.unit.to_string(),
                super::render::ratio_with(r.vs_linux.as_ref()),
                r.mb_per_s.map_or_else(|| "-".into(), |m| format!("{m:.0}")),
                r.figure.as_ref().map_or(0, |f| f.estimate.n).to_string(),
            ]);
        }
    }
    s.push_str(&t.render());
    let _ = writeln!(
        s,
        "(Both servers of a workload run at once; softoe's and Linux's windows alternate, round\n \
         after round, until the intervals narrow or a cap: secs and count are totals over the\n \
         n windows, rate their median ± its interval's half-width, ÷ Linux the median of the\n \
         rounds' paired ratios [interval].\n \
         nginx: 1 worker, sendfile on — the shim serves it as read + send; keep-alive GETs of a\n \
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
    use crate::stats::{Stopped, Verdict};

    /// A side whose windows of 5 s ran at `rates`.
    fn measured(rates: &[f64]) -> Result<Measured, String> {
        Ok(Measured {
            loads: rates
                .iter()
                .map(|r| Load {
                    ops: (r * 5.0) as u64,
                    secs: 5.0,
                })
                .collect(),
            repeats: Repeats {
                rounds: rates.len(),
                stopped: Stopped::Rounds,
                secs: 10.0 * rates.len() as f64,
            },
        })
    }

    /// A workload's two rows from its sides' rates, round by round.
    fn pair(workload: &'static str, softoe: &[f64], linux: &[f64]) -> Vec<AppRow> {
        rows(
            workload,
            "req/s",
            8,
            Some(BIG),
            &[measured(softoe), measured(linux)],
        )
    }

    fn skipped_pair(workload: &'static str) -> Vec<AppRow> {
        SYSTEMS
            .iter()
            .map(|s| AppRow {
                skipped: Some("no postgres".into()),
                ..AppRow::new(workload, s.name(), 8, "tps")
            })
            .collect()
    }

    #[test]
    fn each_workload_is_a_ratio_to_linux() {
        let (ka, fresh, mc, pg) = (
            WORKLOADS[0].0,
            WORKLOADS[1].0,
            WORKLOADS[2].0,
            WORKLOADS[3].0,
        );
        let mut rows = pair(ka, &[1100.0, 1200.0, 1300.0], &[1000.0; 3]);
        rows.extend(super::rows(
            fresh,
            "req/s",
            8,
            None,
            &[Err("status 404".into()), measured(&[3000.0; 3])],
        ));
        rows.extend(pair(mc, &[600.0, 650.0, 550.0], &[1000.0; 3]));
        rows.extend(skipped_pair(pg));
        let mut t = Vec::new();
        targets(&rows, &mut t);
        // A skipped workload has no target; a failed one is missed.
        assert_eq!(t.len(), 3);
        assert!((t[0].ratio - 1.2).abs() < 1e-9 && t[0].met, "{:?}", t[0]);
        assert!(t[0].what.contains("(issue 19: 0.55)"), "{}", t[0].what);
        assert!(t[1].ratio == 0.0 && !t[1].met && t[1].what.contains("FAILED"));
        assert_eq!(t[1].verdict(), Verdict::Missed);
        assert!((t[2].ratio - 0.6).abs() < 1e-9 && !t[2].met);
        // The failed side has no figures; its partner keeps its own but no
        // ratio.
        assert!(rows[2].figure.is_none() && rows[2].vs_linux.is_none());
        assert_eq!(rows[3].figure.as_ref().unwrap().estimate.n, 3);
        let text = render(&rows, "softoe bench --only apps");
        assert!(text.contains("FAILED: status 404"), "{text}");
        assert!(text.contains("skipped: no postgres"), "{text}");
        let line = text.lines().find(|l| l.starts_with(ka)).unwrap();
        let f: Vec<&str> = line[ka.len()..].split_whitespace().collect();
        assert_eq!(
            f,
            [
                "softoe",
                "8",
                "15.0",
                "18000",
                "1200",
                "±8",
                "%",
                "req/s",
                "1.20x",
                "[1.10–1.30]",
                "79",
                "3"
            ]
        );
        // Linux's row has no ratio of its own.
        let line = text
            .lines()
            .find(|l| l.starts_with(ka) && l.contains("Linux"))
            .unwrap();
        assert!(!line.contains("x ["), "{line}");
    }

    #[test]
    fn targets_from_three_paired_rounds_are_met_missed_or_within_noise() {
        let (ka, fresh, mc) = (WORKLOADS[0].0, WORKLOADS[1].0, WORKLOADS[2].0);
        // Linux drifts from round to round; softoe's pairs follow it.
        let linux = [1000.0, 800.0, 1200.0];
        let mut rows = pair(ka, &[1100.0, 900.0, 1300.0], &linux);
        rows.extend(pair(fresh, &[700.0, 600.0, 1000.0], &linux));
        rows.extend(pair(mc, &[900.0, 1000.0, 1300.0], &linux));
        let mut t = Vec::new();
        targets(&rows, &mut t);
        let verdicts: Vec<Verdict> = t.iter().map(Target::verdict).collect();
        assert_eq!(
            verdicts,
            [Verdict::Met, Verdict::Missed, Verdict::WithinNoise]
        );
        // Each decided by the interval of the paired ratios: keep-alive's
        // sides' ranges overlap (900–1300 against 800–1200), its pairs'
        // ratios lie within 1.08–1.13.
        let e = t[0].interval.unwrap();
        assert_eq!(e.n, 3);
        assert!((e.lo - 1300.0 / 1200.0).abs() < 1e-9, "{e:?}");
        assert!((e.hi - 900.0 / 800.0).abs() < 1e-9, "{e:?}");
        let e = t[2].interval.unwrap();
        assert!(e.lo < 1.0 && e.hi > 1.0, "{e:?}");
        // The ratio figure carries the pairs in round order.
        let r = rows[0].vs_linux.as_ref().unwrap();
        assert_eq!(r.samples.len(), 3);
        assert!((r.samples[1] - 900.0 / 800.0).abs() < 1e-9);
    }

    fn rule(min: usize, max: usize) -> StopRule {
        StopRule {
            min_rounds: min,
            max_rounds: max,
            rel_width: 0.5,
            max_time: Duration::from_secs(60),
        }
    }

    #[test]
    fn windows_interleave_and_only_the_first_of_a_side_warms_up() {
        let mut log = Vec::new();
        let pb = ProgressBar::hidden();
        let m = interleave(
            &rule(3, 3),
            &pb,
            "w",
            [Ok(&10.0), Ok(&20.0)],
            |sys, x, warm| {
                log.push((sys.name(), warm));
                Ok(Load {
                    ops: *x as u64,
                    secs: 1.0,
                })
            },
        );
        assert_eq!(
            log,
            [
                ("softoe", true),
                ("Linux", true),
                ("Linux", false),
                ("softoe", false),
                ("softoe", false),
                ("Linux", false)
            ]
        );
        let [s, l] = m.map(Result::unwrap);
        assert_eq!((s.rates(), l.rates()), (vec![10.0; 3], vec![20.0; 3]));
        assert_eq!(s.repeats.rounds, 3);
    }

    #[test]
    fn a_failed_window_fails_its_side_and_the_other_is_measured_alone() {
        let pb = ProgressBar::hidden();
        let mut n = 0;
        let mut warms = Vec::new();
        let m = interleave(
            &rule(3, 3),
            &pb,
            "w",
            [Ok(&10.0), Ok(&20.0)],
            |sys, x, warm| {
                n += 1;
                if matches!(sys, System::Linux) {
                    warms.push(warm);
                    if n == 3 {
                        bail!("short response");
                    }
                }
                Ok(Load {
                    ops: *x as u64,
                    secs: 1.0,
                })
            },
        );
        let [s, l] = m;
        assert_eq!(l.err().as_deref(), Some("short response"));
        // softoe's row is three rounds of its own after the failure, not
        // the one window it had before.
        let s = s.unwrap();
        assert_eq!((s.loads.len(), s.repeats.rounds), (3, 3));
        assert_eq!(n, 3 + 3);
        assert_eq!(warms, [true, false]);
        // A side whose server did not start keeps that error; the other
        // runs alone.
        let m = interleave(
            &rule(2, 2),
            &pb,
            "w",
            [Err("nginx did not start".into()), Ok(&20.0)],
            |_, x, _| {
                Ok(Load {
                    ops: *x as u64,
                    secs: 2.0,
                })
            },
        );
        let rows = rows("w", "req/s", 8, None, &m);
        assert_eq!(rows[0].error.as_deref(), Some("nginx did not start"));
        assert_eq!((rows[1].rate, rows[1].ops, rows[1].secs), (10.0, 40, 4.0));
        assert!(rows[0].vs_linux.is_none());
    }

    #[test]
    fn a_row_is_totals_and_medians_of_its_windows() {
        let r = AppRow::new("w", "softoe", 8, "req/s").with(Err("short response"), None);
        assert_eq!((r.ops, r.rate), (0, 0.0));
        assert_eq!(r.error.as_deref(), Some("short response"));
        assert!(r.figure.is_none() && r.repeats.is_none());
        let m = measured(&[40.0, 50.0, 70.0]).unwrap();
        let r = AppRow::new("w", "softoe", 8, "req/s").with(Ok(&m), Some(1_000_000));
        assert_eq!((r.rate, r.mb_per_s), (50.0, Some(50.0)));
        assert_eq!((r.ops, r.secs), (800, 15.0));
        assert_eq!(r.repeats.map(|x| x.rounds), Some(3));
    }
}
