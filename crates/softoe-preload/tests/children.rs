//! The shim tests' children never outlive their test: a program a test
//! starts is killed with every process it forked (nginx's workers outlived
//! their killed master and a CI run).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod shim;

use std::io::BufRead;
use std::process::{Command, Stdio};

use shim::{Child, guarded};

/// Whether `pid` runs (a zombie does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(!s.rsplit_once(") ")?.1.starts_with('Z')))
        .unwrap_or(false)
}

#[test]
fn a_killed_program_takes_its_forked_workers_along() {
    let c = guarded(Command::new("sh"))
        .args(["-c", "sleep 300 </dev/null & echo $!; sleep 301"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut c = Child(c);
    let mut line = String::new();
    std::io::BufReader::new(c.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let worker: i32 = line.trim().parse().unwrap();
    assert!(alive(worker), "the worker runs");
    drop(c);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while alive(worker) && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let survived = alive(worker);
    if survived {
        let _ = Command::new("kill")
            .args(["-9", &worker.to_string()])
            .status();
    }
    assert!(!survived, "worker {worker} outlived its killed master");
}
