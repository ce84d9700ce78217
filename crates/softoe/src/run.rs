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
    // A socket file is not an engine: a dead one leaves its file behind,
    // and the program would run on Linux's TCP instead of softoe.
    if !softoe_engine::sockpath::alive(path) {
        bail!(
            "no softoe engine answers at {} (a dead engine's socket file?): start one with \
             `softoe engine --host {}` (or name another with --engine)",
            path.display(),
            path.display()
        );
    }
    Ok(())
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
/// [`crate::servable`]), unless `allow` (`--allow-kernel`): then one line
/// says so.
fn check_program(program: &OsStr, allow: bool) -> Result<()> {
    let path = std::env::var_os("PATH");
    let Some(bad) = crate::servable::check(program, path.as_deref()) else {
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
