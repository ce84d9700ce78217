//! Unmodified programs on softoe through the LD_PRELOAD shim, against
//! Linux's own TCP in the testbed: the data is checked end to end, and the
//! engine's counters show it carried the bytes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../softoe-engine/tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Bed, ENGINE_IP, LINUX_IP, Options, sha256};

fn bed() -> Bed {
    Bed::start(
        Options {
            host: true,
            ..Options::default()
        },
        Vec::new(),
    )
}

/// The shim, built beside this test (cargo builds the crate's cdylib
/// before its tests).
fn shim_path() -> PathBuf {
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
fn have(program: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("{program} is not installed: skipped (install it: `.ci/run` does)");
        assert!(std::env::var_os("CI").is_none(), "{program} missing in CI");
    }
    ok
}

/// A command run on softoe: the shim preloaded, the engine's socket named.
fn on_softoe(bed: &Bed, program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("LD_PRELOAD", shim_path())
        .env("SOFTOE_SOCKET", &bed.host)
        .env_remove("RUST_LOG");
    c
}

fn pattern_file(dir: &Path, name: &str, len: usize) -> (PathBuf, String) {
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

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("softoe-preload-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Waits until something listens on `addr:port` in the Linux namespace.
fn wait_listening(bed: &Bed, port: u16) {
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
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// curl on softoe fetches 100 MiB from an HTTP server on Linux.
#[test]
fn curl_on_softoe_fetches_from_linux() {
    if !have("curl") || !have("python3") {
        return;
    }
    let mut bed = bed();
    let dir = tempdir("curl");
    let (_, want) = pattern_file(&dir, "blob", 100 << 20);
    let _server = Child(
        bed.linux
            .command("python3")
            .args(["-m", "http.server", "8080", "--bind", &LINUX_IP.to_string()])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&bed, 8080);
    let out = dir.join("got");
    let t0 = Instant::now();
    let st = on_softoe(&bed, "curl")
        .args(["-sS", "--fail", "-o"])
        .arg(&out)
        .arg(format!("http://{LINUX_IP}:8080/blob"))
        .status()
        .unwrap();
    let took = t0.elapsed();
    assert!(st.success(), "curl failed: {st}");
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), 100 << 20);
    assert_eq!(sha256(&got), want, "curl got other bytes");
    let c = bed.stop();
    eprintln!(
        "curl on softoe: 100 MiB in {took:?} ({:.0} Mbit/s); engine read {} MiB",
        (100u64 << 23) as f64 / took.as_secs_f64() / 1e6,
        c.bytes_in >> 20
    );
    assert!(
        c.bytes_in > 100 << 20,
        "the engine did not carry the transfer"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = ENGINE_IP;
}
