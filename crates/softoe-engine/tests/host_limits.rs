//! Per-user limits on what the engine's host interface lets programs hold
//! (issue 35 item 4): one user at its limits of sessions, sockets or shared
//! memory cannot stop another user, or root, from attaching and opening
//! sockets; the program over a limit gets an error naming it.
//!
//! Programs of other users are attachments made from a thread whose
//! effective uid is that user's: the engine judges an attach by the peer
//! credentials the kernel records at `connect` (`SO_PEERCRED`), which are
//! the connecting thread's.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;

use std::net::SocketAddrV4;
use std::path::Path;

use common::{Bed, ENGINE_IP, Options};
use softoe_engine::host::{HostConfig, UserLimits};
use softoe_host::{Client, Config};

/// Attaches to `path` as user `uid` (effective), asking for a data area of
/// `data_mb` MiB.
fn attach_as(uid: u32, path: &Path, data_mb: u64) -> std::io::Result<Client> {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        // Only this thread's credentials change (the raw system call, not
        // glibc's, which would change every thread's); the real and saved
        // uids stay root's, so it may change back, and it ends anyway.
        // SAFETY: setresuid takes three integers; -1 leaves one unchanged.
        let r = unsafe { libc::syscall(libc::SYS_setresuid, -1i32, uid, -1i32) };
        assert_eq!(r, 0, "setresuid: {}", std::io::Error::last_os_error());
        Client::attach_with(Config {
            path,
            data_len: data_mb << 20,
            ..Config::default()
        })
    })
    .join()
    .unwrap()
}

fn bed() -> Bed {
    Bed::start(
        Options {
            host: true,
            host_config: |h: &mut HostConfig| {
                h.max_sessions = 8;
                h.root_sessions = 2;
                h.per_user = UserLimits {
                    sessions: 3,
                    sockets: 4,
                    memory: 40 << 20,
                };
            },
            ..Options::default()
        },
        Vec::new(),
    )
}

const A: u32 = 65534;
const B: u32 = 65533;
const C: u32 = 65532;

#[test]
fn one_user_at_its_limits_does_not_lock_out_another() {
    let bed = bed();
    // User A takes every session one user may.
    let a: Vec<Client> = (0..3)
        .map(|_| attach_as(A, &bed.host, 4).unwrap())
        .collect();
    let e = attach_as(A, &bed.host, 4).expect_err("a fourth session");
    assert!(
        e.to_string().contains("user_sessions") && e.to_string().contains("3 sessions"),
        "{e}"
    );
    // …and every socket: the limit holds across its sessions.
    let any = SocketAddrV4::new(ENGINE_IP, 0);
    let mut held = vec![
        a[0].udp_bind(any).unwrap(),
        a[0].udp_bind(any).unwrap(),
        a[1].udp_bind(any).unwrap(),
        a[2].udp_bind(any).unwrap(),
    ];
    for c in &a {
        let e = c.udp_bind(any).expect_err("a fifth socket");
        assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
    }
    // User B is not held up by A: it attaches and opens sockets.
    let b = attach_as(B, &bed.host, 4).unwrap();
    let _b_sock = b.udp_bind(any).unwrap();
    // A closes one socket and may open one again, in another session.
    held.pop();
    let t0 = std::time::Instant::now();
    let again = loop {
        match a[0].udp_bind(any) {
            Ok(s) => break s,
            Err(e) if t0.elapsed() < std::time::Duration::from_secs(5) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => panic!("a closed socket still counts: {e}"),
        }
    };
    drop(again);
    // B fills the sessions the engine gives users other than root (8, less
    // 2 for root): a third user is refused for the engine's limit, root is
    // not.
    let _b2 = attach_as(B, &bed.host, 4).unwrap();
    let _b3 = attach_as(B, &bed.host, 4).unwrap();
    let e = attach_as(C, &bed.host, 4).expect_err("a seventh session");
    assert!(e.to_string().contains("`[limits] sessions`"), "{e}");
    let root = Client::attach_to(&bed.host).unwrap();
    root.nop().unwrap();
    // Root is held to no per-user limit.
    let _r: Vec<_> = (0..6).map(|_| root.udp_bind(any).unwrap()).collect();
    // A session's end gives its user's share back.
    drop(a);
    drop(held);
    let t0 = std::time::Instant::now();
    loop {
        match attach_as(A, &bed.host, 4) {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    t0.elapsed() < std::time::Duration::from_secs(5),
                    "ended sessions still count: {e}"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

#[test]
fn a_user_may_hold_only_so_much_shared_memory() {
    let bed = bed();
    // 40 MiB a user: one session of 16 MiB and one more fit, a third not.
    let _one = attach_as(A, &bed.host, 16).unwrap();
    let _two = attach_as(A, &bed.host, 16).unwrap();
    let e = attach_as(A, &bed.host, 16).expect_err("a third region");
    assert!(
        e.to_string().contains("user_memory") && e.to_string().contains("40 MiB"),
        "{e}"
    );
    // A smaller one still fits; another user is not affected.
    let _small = attach_as(A, &bed.host, 1).unwrap();
    let _b = attach_as(B, &bed.host, 16).unwrap();
}
