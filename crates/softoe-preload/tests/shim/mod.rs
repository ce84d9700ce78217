//! What the shim's test files share: the testbed with a host socket, the
//! shim's path, commands on either side, files of known content, and
//! children that never outlive their test.

#![allow(dead_code)]

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use softoe_engine::testing::{Bed, BedOptions, sha256};

pub fn bed() -> Bed {
    if let Ok(f) = std::env::var("SOFTOE_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(f))
            .with_writer(std::io::stderr)
            .try_init();
    }
    Bed::start(
        BedOptions {
            host: true,
            ..BedOptions::default()
        },
        Vec::new(),
    )
    .unwrap()
}

/// The shim, built beside this test (cargo builds the crate's cdylib
/// before its tests).
pub fn shim_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        let p = dir.join("libsoftoe_preload.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libsoftoe_preload.so not found next to {}", exe.display());
}

/// Whether `program` is installed; tests of a missing program say so and
/// fail in CI (where `.ci/run` installs them) but not on a bare machine.
pub fn have(program: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("{program} is not installed: skipped (install it: `.ci/run` does)");
        assert!(
            std::env::var_os("SOFTOE_CI").is_none(),
            "{program} missing in CI (.ci/run installs it)"
        );
    }
    ok
}

/// Kills `c`'s process when the thread that started it ends, so a test
/// the watchdog aborts leaves no program behind. It leads a process group
/// of its own, which [`Child`] kills whole: the workers a master forked
/// (nginx's) go with it.
pub fn guarded(mut c: Command) -> Command {
    c.process_group(0);
    // SAFETY: prctl is async-signal-safe and touches only the child.
    unsafe {
        c.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// A command run in the Linux namespace.
pub fn on_linux(bed: &Bed, program: &str) -> Command {
    guarded(bed.linux.command(program))
}

/// A command run on softoe: the shim preloaded, the engine's socket named.
pub fn on_softoe(bed: &Bed, program: &str) -> Command {
    let mut c = guarded(Command::new(program));
    c.env("LD_PRELOAD", shim_path())
        .env("SOFTOE_SOCKET", &bed.host)
        .env_remove("RUST_LOG");
    // `SOFTOE_TEST_LOG=softoe_preload=debug` logs the shim in the programs
    // under test (their stderr), and the engine in this test binary.
    if let Some(f) = std::env::var_os("SOFTOE_TEST_LOG") {
        c.env("RUST_LOG", f);
    }
    c
}

pub fn pattern_file(dir: &Path, name: &str, len: usize) -> (PathBuf, String) {
    let mut data = vec![0u8; len];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for chunk in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().write_all(&data).unwrap();
    (p, sha256(&data))
}

pub fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("softoe-preload-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Waits until something listens on `addr:port` in the Linux namespace.
pub fn wait_listening(bed: &Bed, port: u16) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let out = bed
            .linux
            .command("ss")
            .args(["-Hltn", &format!("sport = :{port}")])
            .output()
            .unwrap();
        if !out.stdout.is_empty() {
            return;
        }
        assert!(Instant::now() < end, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process killed when dropped (tests never leave one behind).
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        // Its whole group first (a process it forked outlives it otherwise);
        // the group cannot be another's: its leader is not yet reaped.
        if let Ok(pgid) = i32::try_from(self.0.id()) {
            // SAFETY: kill takes no pointers; a negative pid names a group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Each thread of process `pid` (and of its children, as `ps` finds
/// them): its name, state, kernel wait channel and system call, one line
/// each, so a hang shows who sleeps where and who spins.
fn threads_of(pid: u32) -> String {
    let mut out = String::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("(process {pid} gone)\n");
    };
    for t in tasks.flatten() {
        let p = t.path();
        let read = |f: &str| {
            std::fs::read_to_string(p.join(f))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        let stat = read("stat");
        // The state is the field after the name's closing parenthesis.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        out += &format!(
            "  {} {} state {state} wchan {} syscall {}\n",
            t.file_name().to_string_lossy(),
            read("comm"),
            read("wchan"),
            read("syscall")
        );
    }
    out
}

/// Runs `cmd` to its end and returns its output; kills it and fails the
/// test after `secs` seconds.
pub fn run_for(mut cmd: Command, secs: u64, what: &str) -> std::process::Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // What every party was doing, before the evidence goes.
            eprintln!(
                "{what} did not finish in {secs} s; its threads:\n{}{}",
                threads_of(pid),
                softoe_engine::testing::describe_current()
            );
            // Kill the child we started, by its pid, and its group (a
            // process it forked, hung, would outlive the test otherwise;
            // `guarded` made the child its group's leader).
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let _ = Command::new("kill")
                .args(["-9", "--", &format!("-{pid}")])
                .status();
            panic!("{what} did not finish in {secs} s");
        }
    }
}
