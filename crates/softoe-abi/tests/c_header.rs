//! The C header is generated from this crate and checked in; a C program
//! compiled against it must agree with Rust on every size and offset and
//! speak the rings.

#![allow(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[allow(clippy::expect_used)]
fn generate() -> String {
    let dir = crate_dir();
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .expect("cbindgen runs")
        .write(&mut out);
    String::from_utf8(out).expect("utf-8")
}

/// `include/softoe_abi.h` is what cbindgen makes of the crate today. Run with
/// `SOFTOE_BLESS=1` to rewrite it after changing the ABI.
#[test]
fn header_is_current() {
    let path = crate_dir().join("include/softoe_abi.h");
    let fresh = generate();
    if std::env::var_os("SOFTOE_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write header");
        return;
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        kept == fresh,
        "{} is stale: run `SOFTOE_BLESS=1 cargo test -p softoe-abi --test c_header`",
        path.display()
    );
}

/// The C program checks sizes and offsets with static asserts, maps a region
/// this test creates in a memfd (as the engine does), posts NOP commands and
/// reads the completions this test, playing the engine, answers.
#[test]
fn c_program_speaks_the_rings() {
    use softoe_abi::{Completion, Layout, Opcode, Region, Request, decode};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    let dir = crate_dir();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("softoe_abi_rings");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-I"])
        .arg(dir.join("include"))
        .arg(dir.join("examples/c/rings.c"))
        .arg("-o")
        .arg(&out)
        .status();
    match built {
        Ok(s) => assert!(s.success(), "the C program does not compile"),
        Err(e) => panic!("no C compiler ({cc}): {e}"),
    }

    let layout = Layout::new(8, 8, 4, 1 << 16).unwrap();
    let len = layout.region_len() as usize;
    // SAFETY: plain syscalls on a fresh memfd this test owns; the mapping is
    // checked and lives until the end of the test, after the child exits.
    let (fd, base) = unsafe {
        let fd = libc::memfd_create(c"softoe-abi-test".as_ptr(), 0);
        assert!(fd >= 0);
        let fd = OwnedFd::from_raw_fd(fd);
        assert_eq!(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t), 0);
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        (fd, p.cast::<u8>())
    };
    // SAFETY: the mapping is `len` bytes, page-aligned, zeroed, ours.
    let region = unsafe { Region::init(base, layout, 42) };
    let child = Command::new(&out)
        .arg(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            fd.as_raw_fd()
        ))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run the C program");
    let mut cmds = region.command_consumer();
    let mut cmps = region.completion_producer();
    let mut answered = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while answered < 100 {
        assert!(std::time::Instant::now() < deadline, "C program stalled");
        match cmds.pop().expect("ring intact") {
            Some(c) => {
                assert_eq!(c.opcode, Opcode::Nop as u16);
                assert_eq!(decode(&c, region.layout()), Ok(Request::Nop));
                let done = Completion {
                    tag: c.tag,
                    ..Completion::default()
                };
                while cmps.push(&done).is_err() {
                    std::thread::yield_now();
                }
                answered += 1;
            }
            None => std::thread::yield_now(),
        }
    }
    let out = child.wait_with_output().expect("C program exits");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "C program failed: {stdout}");
    assert!(stdout.contains("ok: 100 commands, session 42"), "{stdout}");
    // SAFETY: unmaps the mapping made above; nothing uses it any more.
    unsafe { libc::munmap(base.cast(), len) };
}
