//! What the `softoe` binary's integration tests share: the binary, running
//! it, and stopping what a failed test left running.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_softoe");

pub fn softoe(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .unwrap()
}

/// Kills the engine if a test fails before stopping it.
pub struct Running(pub Option<Child>);

impl Running {
    pub fn terminate(&mut self) -> Output {
        let child = self.0.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn stat_json(control: &Path) -> serde_json::Value {
    let out = softoe(&["stat", "--json", "--control", control.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "softoe stat: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("softoe stat --json prints JSON")
}

/// A machine file for the emulation tests: the documented defaults but a
/// small stream, written where only this test looks.
pub fn machine_file(tag: &str, body: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("softoe-machine-{tag}-{}.toml", std::process::id()));
    std::fs::write(&p, body).unwrap();
    p
}
