//! `softoe run [--engine PATH] -- PROGRAM ARGS…`: runs an unmodified
//! program on a running engine through the `LD_PRELOAD` shim
//! (`libsoftoe_preload.so`).
//!
//! It checks what a user gets wrong before the program starts — a program
//! the shim cannot serve (static, or Go: `servable.rs`), no engine at the
//! socket, no shim to preload, a bad kernel-network list — and then
//! replaces itself with the program, so exit status, signals and the
//! terminal are the program's own.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

/// How the engine takes a program's bytes on `send`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Send {
    /// The program copies into the shared send ring and goes on without
    /// waiting for the engine (the default: cheapest for the program's core
    /// as measured, docs/results.md).
    Copy,
    /// The engine reads the program's buffer itself (`process_vm_readv`)
    /// and keeps its own copy for retransmission: no per-byte work on the
    /// program's core, but every write waits for the engine's copy.
    Overlap,
}

/// `softoe run`'s arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The engine's host socket (default: $SOFTOE_SOCKET, else
    /// /run/softoe/host.sock).
    #[arg(long, value_name = "PATH")]
    engine: Option<PathBuf>,
    /// The shim to preload (default: libsoftoe_preload.so beside this
    /// binary, in its deps/ directory, or $SOFTOE_PRELOAD_LIB).
    #[arg(long, value_name = "PATH")]
    preload: Option<PathBuf>,
    /// Networks the kernel keeps serving, comma-separated CIDRs.
    #[arg(long, value_name = "NETS", default_value = "127.0.0.0/8")]
    kernel_nets: String,
    /// How sends hand bytes to the engine.
    #[arg(long, value_enum, default_value_t = Send::Copy)]
    send: Send,
    /// Run a program the shim cannot serve anyway: a statically linked
    /// binary, or a Go program (Go makes its system calls itself), whose
    /// sockets all stay on Linux's TCP. Without it such a program is
    /// refused.
    #[arg(long)]
    allow_kernel: bool,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    program: Vec<OsString>,
}

/// Where the shim is: beside this binary (an install), in `deps/` (a
/// cargo build), or where `$SOFTOE_PRELOAD_LIB` says.
fn find_shim(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        if p.is_file() {
            return Ok(p.to_path_buf());
        }
        bail!("--preload {}: no such file", p.display());
    }
    if let Some(p) = std::env::var_os("SOFTOE_PRELOAD_LIB") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("SOFTOE_PRELOAD_LIB={}: no such file", p.display());
    }
    let exe = std::env::current_exe().context("where is this binary?")?;
    let dir = exe.parent().context("this binary has no directory")?;
    let candidates = [
        dir.join("libsoftoe_preload.so"),
        dir.join("deps/libsoftoe_preload.so"),
        dir.join("../lib/softoe/libsoftoe_preload.so"),
    ];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.clone());
        }
    }
    bail!(
        "libsoftoe_preload.so not found beside {} (build it: `cargo build --release -p softoe-preload`, \
         or name it with --preload)",
        exe.display()
    )
}

/// Checks that an engine's host socket answers at `path` before the
/// program starts: the engine's probe (a connection that closes without a
/// hello, which the engine passes over in silence). A control socket, a
/// dead engine's file, or a socket of another kind is refused with what it
/// is, and the program never runs (it would run on Linux's TCP, or fail
/// oddly).
fn check_engine(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).with_context(|| {
        format!(
            "no softoe engine at {}: start one with `softoe engine --host {}` (or name another with --engine)",
            path.display(),
            path.display()
        )
    })?;
    if !meta.file_type().is_socket() {
        bail!(
            "{} is not a socket: is it an engine's --host path?",
            path.display()
        );
    }
    let e = match softoe_engine::host::sys::connect_seqpacket(path) {
        // Closed at once: the engine sees a probe, not an attach.
        Ok(_probe) => return Ok(()),
        Err(e) => e,
    };
    // A socket of another type is listening there (the kernel compares
    // the types before anything else).
    if e.raw_os_error() == Some(libc::EPROTOTYPE) {
        bail!("{}", not_the_host_socket(path));
    }
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        bail!(
            "permission denied connecting to {}: this user may not attach there (the socket's \
             mode, or its directory's). Programs attach to the engine's host socket: the path \
             given to `softoe engine --host`, by default {}",
            path.display(),
            softoe_engine::host::DEFAULT_PATH
        );
    }
    // A socket file is not an engine: a dead one leaves its file behind,
    // and the program would run on Linux's TCP instead of softoe.
    bail!(
        "no softoe engine answers at {} (a dead engine's socket file?): start one with \
         `softoe engine --host {}` (or name another with --engine)",
        path.display(),
        path.display()
    )
}

/// What to say of `path`, a socket that is not of the host interface's
/// type: an engine's control socket (it answers `softoe stat`'s query),
/// with that engine's host socket if it has one, or a socket of another
/// program.
fn not_the_host_socket(path: &Path) -> String {
    let p = path.display();
    // The engine that listens there, if it answers as a control socket
    // does (a snapshot, at once: it looks every millisecond).
    let engine = (|| {
        let mut s = std::os::unix::net::UnixStream::connect(path).ok()?;
        let (pid, _, _) = softoe_engine::host::sys::peer_cred(&s).ok()?;
        s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
            .ok()?;
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut buf).ok()?;
        serde_json::from_slice::<softoe_engine::Snapshot>(&buf).ok()?;
        Some(pid)
    })();
    let Some(pid) = engine else {
        return format!(
            "{p} is not softoe's host socket: a socket of another type answers there (the host \
             socket is the path given to `softoe engine --host`, by default {})",
            softoe_engine::host::DEFAULT_PATH
        );
    };
    let what = format!(
        "{p} is not softoe's host socket: it is an engine's control socket (for `softoe stat`)"
    );
    match host_socket_of(pid) {
        HostSocket::At(h) => format!(
            "{what}; that engine's host socket is {h}: `softoe run --engine {h} -- …`",
            h = h.display()
        ),
        HostSocket::None => format!(
            "{what}, and that engine serves no programs: start it with `--host PATH` \
             (e.g. {}) and give that path to --engine",
            softoe_engine::host::DEFAULT_PATH
        ),
        HostSocket::Unknown => format!(
            "{what}; the host socket is the path given to that engine's --host (by default {})",
            softoe_engine::host::DEFAULT_PATH
        ),
    }
}

/// Where an engine's host socket is.
#[derive(Debug, PartialEq)]
enum HostSocket {
    /// There.
    At(PathBuf),
    /// It has none.
    None,
    /// Its descriptors cannot be looked at (another user's engine).
    Unknown,
}

/// The host socket of engine process `pid`: the listening
/// `SOCK_SEQPACKET` Unix socket among its descriptors, named in its
/// network namespace's `/proc/PID/net/unix`.
fn host_socket_of(pid: i32) -> HostSocket {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HostSocket::Unknown;
    };
    let inodes: std::collections::HashSet<String> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|t| {
            let t = t.to_str()?;
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/unix")) else {
        return HostSocket::Unknown;
    };
    let Some(named) = listening_seqpacket(&table, &inodes) else {
        return HostSocket::None;
    };
    let named = PathBuf::from(named);
    if named.is_relative() {
        return match std::fs::read_link(format!("/proc/{pid}/cwd")) {
            Ok(cwd) => HostSocket::At(cwd.join(named)),
            Err(_) => HostSocket::At(named),
        };
    }
    HostSocket::At(named)
}

/// In a `/proc/net/unix` table, the path of the first listening
/// `SOCK_SEQPACKET` socket (type `0005`, flag `__SO_ACCEPTCON`) whose inode
/// is one of `inodes`. Abstract names (`@…`) are not files and are left
/// out.
fn listening_seqpacket(table: &str, inodes: &std::collections::HashSet<String>) -> Option<String> {
    const ACCEPTCON: u32 = 0x0001_0000;
    table.lines().skip(1).find_map(|l| {
        // Num RefCount Protocol Flags Type St Inode Path (which may hold
        // spaces: the rest of the line).
        let mut f = Vec::with_capacity(7);
        let mut rest = l;
        for _ in 0..7 {
            rest = rest.trim_start();
            let end = rest.find(' ').unwrap_or(rest.len());
            let (field, more) = rest.split_at(end);
            f.push(field);
            rest = more;
        }
        let path = rest.strip_prefix(' ')?;
        let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
        (flags & ACCEPTCON != 0
            && *f.get(4)? == "0005"
            && inodes.contains(*f.get(6)?)
            && !path.is_empty()
            && !path.starts_with('@'))
        .then(|| path.to_string())
    })
}

/// Checks a `--kernel-nets` list as the shim will read it (the shim is
/// not linked here: its exported `socket`, `ioctl`… would stand in front
/// of this binary's own calls).
fn check_nets(list: &str) -> Result<()> {
    for net in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (a, l) = net.split_once('/').unwrap_or((net, "32"));
        let ok = a.parse::<std::net::Ipv4Addr>().is_ok() && l.parse::<u8>().is_ok_and(|l| l <= 32);
        if !ok {
            bail!(
                "--kernel-nets: {net:?} is not an IPv4 network (write e.g. 127.0.0.0/8,10.1.0.0/16)"
            );
        }
    }
    Ok(())
}

/// Refuses a program whose sockets would stay on the kernel (see
/// [`softoe_lab::servable`]), unless `allow` (`--allow-kernel`): then one line
/// says so.
fn check_program(program: &OsStr, allow: bool) -> Result<()> {
    let path = std::env::var_os("PATH");
    let Some(bad) = softoe_lab::servable::check(program, path.as_deref()) else {
        return Ok(());
    };
    let name = program.to_string_lossy();
    if allow {
        eprintln!(
            "softoe run: {}; {name}'s sockets stay on Linux's TCP (--allow-kernel)",
            bad.why()
        );
        return Ok(());
    }
    bail!(
        "{}, so {name}'s sockets would all stay on Linux's TCP, not softoe. \
         Run it anyway with `softoe run --allow-kernel -- ...`",
        bad.why()
    )
}

/// Runs the program; returns only if it could not be started.
pub fn run(args: &RunArgs) -> Result<()> {
    let engine = args
        .engine
        .clone()
        .or_else(|| std::env::var_os("SOFTOE_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(softoe_engine::host::DEFAULT_PATH));
    check_nets(&args.kernel_nets)?;
    let (program, rest) = args
        .program
        .split_first()
        .context("name a program to run")?;
    check_program(program, args.allow_kernel)?;
    check_engine(&engine)?;
    let shim = find_shim(args.preload.as_deref())?;
    let shim = shim.canonicalize().unwrap_or(shim);
    let mut preload = shim.into_os_string();
    if let Some(prev) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(" ");
        preload.push(prev);
    }
    let err = std::process::Command::new(program)
        .args(rest)
        .env("LD_PRELOAD", preload)
        .env("SOFTOE_SOCKET", &engine)
        .env("SOFTOE_KERNEL_NETS", &args.kernel_nets)
        .env(
            "SOFTOE_SEND",
            match args.send {
                Send::Overlap => "overlap",
                Send::Copy => "copy",
            },
        )
        .exec();
    Err(err).with_context(|| format!("cannot run {}", program.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn finds_the_listening_seqpacket_socket_among_a_processs_own() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01  1207 /tmp/ctl.sock\n\
            0000000000000000: 00000002 00000000 00010000 0005 01 20001 /tmp/other host.sock\n\
            0000000000000000: 00000002 00000000 00010000 0005 01 20002 @abstract\n\
            0000000000000000: 00000003 00000000 00000000 0005 03 20003 /tmp/x.sock\n\
            0000000000000000: 00000002 00000000 00010000 0005 01 20004 /tmp/host sock\n";
        let ours = |i: &[&str]| i.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            listening_seqpacket(table, &ours(&["1207", "20002", "20003", "20004"])).as_deref(),
            Some("/tmp/host sock")
        );
        assert_eq!(listening_seqpacket(table, &ours(&["1207", "20003"])), None);
    }
}
