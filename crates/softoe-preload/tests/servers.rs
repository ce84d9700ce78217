//! Servers people run on every machine, unmodified, on softoe: sshd in its
//! default configuration (re-exec, privilege separation with a seccomp
//! sandbox) and PostgreSQL (a forking server whose backends take periodic
//! signals), each driven by its own clients on Linux.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod shim;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP, sha256};

/// Runs `c` to its end; fails with its output unless it succeeds.
fn ok(c: Command, secs: u64, what: &str) -> std::process::Output {
    let o = run_for(c, secs, what);
    assert!(
        o.status.success(),
        "{what}: {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// As [`ok`], for a client of the sshd on softoe: on failure the message
/// ends with the last lines of that sshd's debug log (`log`), which says
/// which of its processes gave up and why.
fn ok_logged(c: Command, secs: u64, what: &str, log: &Path) -> std::process::Output {
    let o = run_for(c, secs, what);
    if !o.status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(150)..].join("\n");
        panic!(
            "{what}: {}\n{}{}\nthe last lines of sshd's log ({}):\n{tail}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            log.display()
        );
    }
    o
}

/// An sshd configuration for a test: Debian's `sshd_config` (re-exec and
/// privilege separation on, PAM, the external sftp server), plus a port, a
/// host key and an authorized key of the test's own (in a temporary
/// directory, hence no strict modes; keys only).
fn sshd_setup(dir: &Path, port: u16) -> std::path::PathBuf {
    for (name, t) in [("host", "ed25519"), ("user", "ed25519")] {
        let k = dir.join(name);
        if !k.exists() {
            let mut c = Command::new("ssh-keygen");
            c.args(["-q", "-t", t, "-N", "", "-f"]).arg(&k);
            ok(c, 30, "ssh-keygen");
        }
    }
    std::fs::copy(dir.join("user.pub"), dir.join("authorized_keys")).unwrap();
    // The privilege-separation directory the packaged service makes.
    std::fs::create_dir_all("/run/sshd").unwrap();
    let conf = dir.join(format!("sshd_config.{port}"));
    std::fs::write(
        &conf,
        format!(
            "Port {port}\n\
             HostKey {d}/host\n\
             AuthorizedKeysFile {d}/authorized_keys\n\
             PasswordAuthentication no\n\
             StrictModes no\n\
             PidFile none\n\
             KbdInteractiveAuthentication no\n\
             UsePAM yes\n\
             X11Forwarding yes\n\
             PrintMotd no\n\
             AcceptEnv LANG LC_*\n\
             Subsystem sftp /usr/lib/openssh/sftp-server\n",
            d = dir.display()
        ),
    )
    .unwrap();
    conf
}

/// ssh's options for a test: the test's key, no known-hosts file, and only
/// errors printed (so any line on stderr is a problem).
fn ssh_opts(dir: &Path, port: u16) -> Vec<String> {
    vec![
        "-i".into(),
        dir.join("user").display().to_string(),
        "-o".into(),
        "StrictHostKeyChecking=no".into(),
        "-o".into(),
        "UserKnownHostsFile=/dev/null".into(),
        "-o".into(),
        "LogLevel=ERROR".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-P".into(),
        port.to_string(),
    ]
}

/// Waits until `probe` succeeds (a server is up), for at most 20 s.
fn until_up(what: &str, mut probe: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !probe() {
        assert!(Instant::now() < end, "{what} never came up");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// sshd on softoe in its default configuration: `scp` of 100 MiB from
/// Linux to it and back, SHA-256 equal both ways; and `ssh` on softoe to an
/// sshd on Linux, with nothing on stderr (softoe once refused `IP_TOS` and
/// every run warned).
#[test]
fn sshd_on_softoe_scp_both_ways() {
    if !have("/usr/sbin/sshd") || !have("scp") {
        return;
    }
    let mut bed = bed();
    let dir = tempdir("sshd");
    let conf = sshd_setup(&dir, 2222);
    // Its debug log goes to a file, shown if a transfer fails (the
    // download failed once in CI with nothing logged at the default level).
    let log = dir.join("sshd-softoe.log");
    let _sshd = Child(
        on_softoe(&bed, "/usr/sbin/sshd")
            .args(["-D", "-o", "LogLevel=DEBUG1", "-E"])
            .arg(&log)
            .arg("-f")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let (blob, want) = pattern_file(&dir, "blob", 100 << 20);
    let opts = ssh_opts(&dir, 2222);
    until_up("sshd on softoe", || {
        let mut c = on_linux(&bed, "ssh");
        c.args(&opts[..opts.len() - 2])
            .args(["-p", "2222", &format!("root@{ENGINE_IP}"), "true"]);
        run_for(c, 30, "ssh true").status.success()
    });
    // Linux → softoe.
    let up = dir.join("up");
    let t = Instant::now();
    let mut c = on_linux(&bed, "scp");
    c.args(&opts)
        .arg(&blob)
        .arg(format!("root@{ENGINE_IP}:{}", up.display()));
    let o = ok_logged(c, 300, "scp to sshd on softoe", &log);
    let up_s = t.elapsed().as_secs_f64();
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(sha256(&std::fs::read(&up).unwrap()), want, "upload");
    // softoe → Linux.
    let down = dir.join("down");
    let t = Instant::now();
    let mut c = on_linux(&bed, "scp");
    c.args(&opts)
        .arg(format!("root@{ENGINE_IP}:{}", blob.display()))
        .arg(&down);
    ok_logged(c, 300, "scp from sshd on softoe", &log);
    let down_s = t.elapsed().as_secs_f64();
    assert_eq!(sha256(&std::fs::read(&down).unwrap()), want, "download");
    // The same sshd on Linux's TCP, in a second Linux host on the bridge:
    // scp from the first Linux host to it gives the figure beside softoe's.
    let lx2 = bed.tb.netns("lx2").unwrap();
    let sw = bed.sw.clone();
    bed.tb.veth_to_bridge(&lx2, "eth0", &sw, "br0").unwrap();
    bed.tb.addr(&lx2, "eth0", "10.7.0.3/24").unwrap();
    let lx2_ip = std::net::Ipv4Addr::new(10, 7, 0, 3);
    let conf = sshd_setup(&dir, 2223);
    let _linux_sshd = Child(
        guarded(lx2.command("/usr/sbin/sshd"))
            .args(["-D", "-e", "-f"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let opts = ssh_opts(&dir, 2223);
    let args: Vec<String> = opts[..opts.len() - 2]
        .iter()
        .cloned()
        .chain(["-p".into(), "2223".into(), format!("root@{lx2_ip}")])
        .collect();
    // ssh on softoe to an sshd on Linux: no warning, the command's output.
    until_up("sshd on Linux", || {
        let mut c = on_softoe(&bed, "ssh");
        c.args(&args).arg("true");
        run_for(c, 30, "ssh true").status.success()
    });
    let mut c = on_softoe(&bed, "ssh");
    c.args(&args).arg(format!("sha256sum {}", blob.display()));
    let o = ok(c, 60, "ssh on softoe to Linux");
    assert!(
        o.stderr.is_empty(),
        "ssh on softoe printed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).starts_with(&want));
    let lx_up = dir.join("lx-up");
    let t = Instant::now();
    let mut c = on_linux(&bed, "scp");
    c.args(&opts)
        .arg(&blob)
        .arg(format!("root@{lx2_ip}:{}", lx_up.display()));
    ok(c, 300, "scp to sshd on Linux");
    let lx_up_s = t.elapsed().as_secs_f64();
    let lx_down = dir.join("lx-down");
    let t = Instant::now();
    let mut c = on_linux(&bed, "scp");
    c.args(&opts)
        .arg(format!("root@{lx2_ip}:{}", blob.display()))
        .arg(&lx_down);
    ok(c, 300, "scp from sshd on Linux");
    let lx_down_s = t.elapsed().as_secs_f64();
    assert_eq!(sha256(&std::fs::read(&lx_down).unwrap()), want);
    eprintln!(
        "scp 100 MiB, sshd on softoe vs on Linux: to it {:.0} vs {:.0} Mb/s ({:.2}x), \
         from it {:.0} vs {:.0} Mb/s ({:.2}x)",
        838.86 / up_s,
        838.86 / lx_up_s,
        lx_up_s / up_s,
        838.86 / down_s,
        838.86 / lx_down_s,
        lx_down_s / down_s
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// PostgreSQL's binaries (initdb, postgres, pgbench, psql), from the
/// newest installed version.
fn pg_bin(name: &str) -> Option<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| d.join(name).exists())
        .collect();
    dirs.sort();
    dirs.pop().map(|d| d.join(name))
}

/// The `postgres` user's uid and gid (PostgreSQL refuses to run as root).
fn postgres_ids() -> (u32, u32) {
    let o = Command::new("id")
        .args(["-u", "postgres"])
        .output()
        .unwrap();
    let uid = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let o = Command::new("id")
        .args(["-g", "postgres"])
        .output()
        .unwrap();
    let gid = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    (uid, gid)
}

/// A fresh cluster in `dir`, owned by `postgres`, trusting the testbed's
/// hosts.
fn pg_cluster(dir: &Path) {
    use std::os::unix::process::CommandExt;
    let (uid, gid) = postgres_ids();
    std::fs::create_dir_all(dir).unwrap();
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
    let mut c = Command::new(pg_bin("initdb").unwrap());
    c.args(["-A", "trust", "-U", "postgres", "-D"])
        .arg(dir.join("data"))
        .uid(uid)
        .gid(gid);
    ok(c, 120, "initdb");
    let hba = dir.join("data/pg_hba.conf");
    let mut t = std::fs::read_to_string(&hba).unwrap();
    t.push_str("host all all 10.7.0.0/24 trust\n");
    std::fs::write(&hba, t).unwrap();
}

/// `postgres` on `dir`'s cluster, listening on every address at 5432:
/// `c` runs the server (as the `postgres` user: `c` is made so, or drops
/// to it itself).
fn pg_server(mut c: Command, dir: &Path) -> PgServer {
    c.arg("-D")
        .arg(dir.join("data"))
        .args(["-c", "listen_addresses=*", "-c", "port=5432"])
        .arg("-c")
        .arg(format!("unix_socket_directories={}", dir.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("server.log")).unwrap());
    PgServer(c.spawn().unwrap())
}

/// A running postmaster, shut down fast (SIGINT) when dropped so that its
/// backends and helpers leave with it; killed if it takes over 20 s.
struct PgServer(std::process::Child);

impl Drop for PgServer {
    fn drop(&mut self) {
        // SAFETY: a signal to the process this test started.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGINT) };
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// pgbench's figures for one run: transactions per second, failed ones.
fn pgbench(bed: &Bed, host: std::net::Ipv4Addr, what: &str) -> f64 {
    let run = |args: &[&str], secs| {
        let mut c = on_linux(bed, pg_bin("pgbench").unwrap().to_str().unwrap());
        c.args(["-h", &host.to_string(), "-U", "postgres"])
            .args(args);
        ok(c, secs, what)
    };
    until_up(what, || {
        let mut c = on_linux(bed, pg_bin("psql").unwrap().to_str().unwrap());
        c.args(["-h", &host.to_string(), "-U", "postgres", "-c", "select 1"]);
        run_for(c, 20, "psql").status.success()
    });
    run(&["-i", "-q", "postgres"], 120);
    let o = run(&["-c", "8", "-j", "2", "-T", "20", "postgres"], 120);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("aborted"), "{what}: clients aborted:\n{err}");
    let field = |key: &str| -> String {
        out.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{what}: no `{key}` in pgbench's report:\n{out}{err}"))
            .trim()
            .to_string()
    };
    let failed = field("number of failed transactions:");
    assert!(
        failed.starts_with("0 "),
        "{what}: failed transactions {failed}"
    );
    let processed: u64 = field("number of transactions actually processed:")
        .split('/')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(processed > 0, "{what}: no transaction completed");
    let tps: f64 = field("tps =")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    tps
}

/// PostgreSQL on softoe: `pgbench -i`, then eight clients for 20 s from
/// Linux with none aborted (softoe once returned EAGAIN from an interrupted
/// `epoll_wait` and lost the postmaster's wake-ups: 0 transactions), and
/// `psql` fetching a ~50 MB result that is checked byte for byte. The same
/// server on Linux's TCP in another namespace gives the figure beside it.
#[test]
fn postgresql_on_softoe() {
    if pg_bin("postgres").is_none() || !have("id") {
        if std::env::var_os("SOFTOE_CI").is_some() {
            panic!("PostgreSQL missing in CI (.ci/run installs it)");
        }
        eprintln!("PostgreSQL is not installed: skipped");
        return;
    }
    let mut bed = bed();
    let dir = tempdir("pg");
    pg_cluster(&dir.join("softoe"));
    let (uid, gid) = postgres_ids();
    let mut c = on_softoe(&bed, pg_bin("postgres").unwrap().to_str().unwrap());
    std::os::unix::process::CommandExt::uid(&mut c, uid);
    std::os::unix::process::CommandExt::gid(&mut c, gid);
    let _pg = pg_server(c, &dir.join("softoe"));
    let softoe_tps = pgbench(&bed, ENGINE_IP, "pgbench against softoe");
    // A ~50 MB result, every byte checked.
    let rows = 50_000;
    let mut c = on_linux(&bed, pg_bin("psql").unwrap().to_str().unwrap());
    c.args(["-h", &ENGINE_IP.to_string(), "-U", "postgres", "-At", "-c"])
        .arg(format!(
            "select i || ':' || repeat(chr(97 + i % 26), 1000) from generate_series(1, {rows}) i"
        ));
    let o = ok(c, 120, "psql 50 MB");
    assert!(o.stdout.len() > 49_000_000, "{} bytes", o.stdout.len());
    let mut want = String::with_capacity(o.stdout.len());
    for i in 1..=rows {
        want.push_str(&format!("{i}:"));
        let ch = char::from(b'a' + (i % 26) as u8);
        want.extend(std::iter::repeat_n(ch, 1000));
        want.push('\n');
    }
    assert!(o.stdout == want.as_bytes(), "the 50 MB result differs");
    // The same server on Linux's TCP, beside it.
    let lx2 = bed.tb.netns("lx2").unwrap();
    let sw = bed.sw.clone();
    bed.tb.veth_to_bridge(&lx2, "eth0", &sw, "br0").unwrap();
    bed.tb.addr(&lx2, "eth0", "10.7.0.3/24").unwrap();
    pg_cluster(&dir.join("linux"));
    // `ip netns exec` needs root: the server drops to `postgres` inside.
    let mut c = lx2.command("setpriv");
    c.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
        .arg(pg_bin("postgres").unwrap());
    let _pg2 = pg_server(guarded(c), &dir.join("linux"));
    let linux_tps = pgbench(
        &bed,
        std::net::Ipv4Addr::new(10, 7, 0, 3),
        "pgbench against Linux",
    );
    eprintln!(
        "pgbench -c 8 -j 2 -T 20: softoe {softoe_tps:.0} tps, Linux {linux_tps:.0} tps ({:.2}x)",
        softoe_tps / linux_tps
    );
    let _ = std::fs::remove_dir_all(&dir);
}
