//! Servers people run on every machine, unmodified, on softoe: sshd in its
//! default configuration (re-exec, privilege separation with a seccomp
//! sandbox) and PostgreSQL (a forking server whose backends take periodic
//! signals), each driven by its own clients on Linux.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

#[path = "../../softoe-engine/tests/common/mod.rs"]
mod common;
mod shim;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ENGINE_IP, LINUX_IP, sha256};
use shim::*;

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

/// An sshd configuration for a test: the distribution's defaults (re-exec
/// and privilege separation on, as `sshd_config` leaves them), plus a port,
/// a host key and an authorized key of the test's own.
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
             PermitRootLogin prohibit-password\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             UsePAM no\n\
             StrictModes no\n\
             PidFile none\n\
             Subsystem sftp internal-sftp\n",
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
    let bed = bed();
    let dir = tempdir("sshd");
    let conf = sshd_setup(&dir, 2222);
    let _sshd = Child(
        on_softoe(&bed, "/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
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
    let o = ok(c, 300, "scp to sshd on softoe");
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
    ok(c, 300, "scp from sshd on softoe");
    let down_s = t.elapsed().as_secs_f64();
    assert_eq!(sha256(&std::fs::read(&down).unwrap()), want, "download");
    eprintln!(
        "scp 100 MiB with sshd on softoe: to it {:.0} Mb/s, from it {:.0} Mb/s",
        838.86 / up_s,
        838.86 / down_s
    );
    // ssh on softoe to an sshd on Linux: no warning, the command's output.
    let conf = sshd_setup(&dir, 2223);
    let _linux_sshd = Child(
        on_linux(&bed, "/usr/sbin/sshd")
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
        .chain(["-p".into(), "2223".into(), format!("root@{LINUX_IP}")])
        .collect();
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
    let _ = std::fs::remove_dir_all(&dir);
}
