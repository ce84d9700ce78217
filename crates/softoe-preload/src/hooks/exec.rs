//! softoe sockets across `execve`.
//!
//! A softoe socket's descriptor survives `exec` as any
//! descriptor does (unless close-on-exec), but the new image's shim starts
//! with an empty table and would take it for a kernel socket. So before
//! every `exec` the shim prepares the connections as for `fork` (each is
//! watched: the kernel counts the descriptor's copies, the engine keeps the
//! connection while one is open, and the dying session no longer holds
//! it), and writes what each surviving softoe socket is into the new
//! image's environment (`SOFTOE_INHERIT`): the open file's device and
//! inode, and whether it is a listener (no authority: the new image
//! claims the descriptor it holds). The new image's shim reads
//! it before `main` runs, finds the descriptors by inode (so a `dup2` done
//! after the hook — `posix_spawn`'s file actions — still counts), and
//! takes each socket into its own session at first use, as a forked child
//! does. The shim and its settings (`LD_PRELOAD`, `SOFTOE_*`) are put back
//! into an environment the program emptied when softoe sockets go along:
//! without them the new program would read the watched descriptor itself.
//!
//! A listener survives `exec` in a forked child (the parent's session
//! still serves it: sshd's listener, nginx's binary upgrade); one whose
//! own session died at `exec` is gone, and the new image gets `EBADF`.
//!
//! What a process does just before it sandboxes itself is `sandbox.rs`.

use std::ffi::{CStr, CString};
use std::net::SocketAddrV4;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock};

use libc::{c_char, c_int};
use tracing::debug;

use crate::sock::{Inherit, Kind, Sock, St, TABLE};

/// The environment variable that carries softoe sockets across `exec`.
const VAR: &str = "SOFTOE_INHERIT";

/// `LD_PRELOAD` and `SOFTOE_*` as this image started with them, to give
/// back to a new image that inherits softoe sockets.
static SETTINGS: OnceLock<Vec<CString>> = OnceLock::new();

/// The open file behind `fd`: (device, inode), or `None` if it is closed.
fn file_id(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writing.
    if unsafe { libc::fstat(fd, &raw mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}

/// One softoe socket as the environment carries it.
fn record(fd: c_int, s: &Sock) -> Option<String> {
    // SAFETY: plain descriptor query.
    let flags = unsafe { crate::real::fcntl(fd, libc::F_GETFD, 0) };
    if flags < 0 || flags & libc::FD_CLOEXEC != 0 {
        return None;
    }
    let (dev, ino) = file_id(fd)?;
    let v6 = u8::from(s.v6);
    let kind = match s.kind {
        Kind::Tcp => 't',
        Kind::Udp => 'u',
    };
    // No authority rides in the environment (another process of the
    // user may read it): the new image claims the descriptor itself.
    let named = |tag: char, peer: SocketAddrV4| format!("{tag},{dev},{ino},{v6},{peer}");
    let any = SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0);
    Some(match s.state() {
        St::Stream(t) if s.watched.load(std::sync::atomic::Ordering::Relaxed) => named('S', t.peer),
        St::Listening(_) => named('L', any),
        St::Inherited(i) => named(if i.listener { 'L' } else { 'S' }, i.peer),
        St::Fresh { bound } => {
            let at = bound.map_or_else(|| "-".to_string(), |b| b.to_string());
            format!("F,{dev},{ino},{v6},{kind},{at}")
        }
        // A connection that could not be watched, UDP sockets, sockets
        // already lost: unusable in the new image, and said so there.
        St::Stream(_) | St::Udp(_) | St::Lost(_) => format!("X,{dev},{ino},{v6},{kind}"),
    })
}

/// A record read back: the socket it stands for, not yet this process's.
fn parse(rec: &str) -> Option<((u64, u64), Sock)> {
    let f: Vec<&str> = rec.split(',').collect();
    let dev = f.get(1)?.parse().ok()?;
    let ino = f.get(2)?.parse().ok()?;
    let v6 = *f.get(3)? == "1";
    let (kind, st) = match *f.first()? {
        tag @ ("S" | "L") => {
            let inh = Inherit {
                listener: tag == "L",
                peer: f.get(4)?.parse().ok()?,
            };
            (Kind::Tcp, St::Inherited(inh))
        }
        "F" => {
            let kind = if *f.get(4)? == "u" {
                Kind::Udp
            } else {
                Kind::Tcp
            };
            let bound = match *f.get(5)? {
                "-" => None,
                a => Some(a.parse().ok()?),
            };
            (kind, St::Fresh { bound })
        }
        "X" => {
            let kind = if *f.get(4)? == "u" {
                Kind::Udp
            } else {
                Kind::Tcp
            };
            (kind, St::Lost(libc::EBADF))
        }
        _ => return None,
    };
    Some(((dev, ino), Sock::inherited(kind, v6, st)))
}

/// Runs before `main` in every image the shim is loaded into: remembers
/// the shim's settings and takes in the softoe sockets an `exec` passed.
/// Nothing here logs or attaches (it runs before the program does).
extern "C" fn at_load() {
    crate::diag::init();
    // SAFETY: registers a plain function with no arguments, run in the
    // child after every fork (libc's own included).
    unsafe { libc::pthread_atfork(None, None, Some(crate::sock::after_fork)) };
    let mut keep = Vec::new();
    for (k, v) in std::env::vars_os() {
        let k = k.as_bytes();
        if k == b"LD_PRELOAD" || (k.starts_with(b"SOFTOE_") && k != VAR.as_bytes()) {
            let mut kv = k.to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            if let Ok(c) = CString::new(kv) {
                keep.push(c);
            }
        }
    }
    let _ = SETTINGS.set(keep);
    let Some(list) = std::env::var_os(VAR) else {
        return;
    };
    // SAFETY: before `main`, no other thread reads the environment.
    unsafe { std::env::remove_var(VAR) };
    let mut wanted: Vec<((u64, u64), Arc<Sock>)> = list
        .to_string_lossy()
        .split(';')
        .filter_map(parse)
        .map(|(id, s)| (id, Arc::new(s)))
        .collect();
    if wanted.is_empty() {
        return;
    }
    // Find each by its open file, whatever number it has now.
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else {
            continue;
        };
        let Some(id) = file_id(fd) else {
            continue;
        };
        if let Some((_, s)) = wanted.iter().find(|(w, _)| *w == id) {
            // SAFETY: plain descriptor query.
            let fl = unsafe { crate::real::fcntl(fd, libc::F_GETFL, 0) };
            s.nonblock.store(
                fl >= 0 && fl & libc::O_NONBLOCK != 0,
                std::sync::atomic::Ordering::Relaxed,
            );
            TABLE.insert(fd, s.clone());
        }
    }
    wanted.clear();
}

/// Registers [`at_load`] with the dynamic loader.
#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = at_load;

/// The environment for an `exec` from `envp`: `None` to pass it as it is
/// (no softoe socket goes along), else the new one (keep the strings
/// alive until the call returns).
///
/// # Safety
/// `envp` is null or a null-terminated array of C strings.
unsafe fn environment(envp: *const *const c_char) -> Option<(Vec<CString>, Vec<*const c_char>)> {
    if TABLE.is_empty() {
        return None;
    }
    // Connections and listeners are watched first, as for `fork`: this
    // session dies with the image (its attach socket closes on exec). Not
    // from a vfork child: it shares the parent's memory, whose sessions
    // and table it must not change (the parent's threads use them); what
    // is watched already goes along.
    if !crate::sock::shares_parents_memory() {
        crate::sock::before_fork();
    }
    let recs: Vec<String> = TABLE
        .entries()
        .iter()
        .filter_map(|(fd, s)| record(*fd, s))
        .collect();
    let mut env: Vec<CString> = Vec::new();
    let mut i = 0;
    while !envp.is_null() {
        // SAFETY: the caller's null-terminated array.
        let p = unsafe { *envp.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: a C string of the caller's.
        let c = unsafe { CStr::from_ptr(p) };
        if !c.to_bytes().starts_with(format!("{VAR}=").as_bytes()) {
            env.push(c.to_owned());
        }
        i += 1;
    }
    if !recs.is_empty() {
        // The shim and its settings go along with the sockets.
        for s in SETTINGS.get().map(Vec::as_slice).unwrap_or_default() {
            let name = s
                .to_bytes()
                .split(|&b| b == b'=')
                .next()
                .unwrap_or_default();
            let has = env.iter().any(|e| {
                e.to_bytes().len() > name.len()
                    && e.to_bytes().starts_with(name)
                    && e.to_bytes()[name.len()] == b'='
            });
            if !has {
                env.push(s.clone());
            }
        }
        if let Ok(c) = CString::new(format!("{VAR}={}", recs.join(";"))) {
            env.push(c);
        }
        debug!(sockets = recs.len(), "softoe sockets passed across exec");
    }
    let mut ptrs: Vec<*const c_char> = env.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    Some((env, ptrs))
}

fn environ() -> *const *const c_char {
    unsafe extern "C" {
        static environ: *const *const c_char;
    }
    // SAFETY: libc's `environ` is a valid (maybe null) array pointer.
    unsafe { environ }
}

/// Runs `f` with the environment an `exec` should get.
///
/// # Safety
/// `envp` as for [`environment`].
unsafe fn with_env(
    envp: *const *const c_char,
    f: impl FnOnce(*const *const c_char) -> c_int,
) -> c_int {
    // SAFETY: the caller's `envp`.
    match unsafe { environment(envp) } {
        Some((_keep, ptrs)) => f(ptrs.as_ptr()),
        None => f(envp),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arrays, forwarded.
    unsafe { with_env(envp, |e| crate::real::execve(path, argv, e)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the hook with the same
    // contract, with this process's environment (forwarding, in `hooks`).
    unsafe { execve(path, argv, environ()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arrays, forwarded.
    unsafe { with_env(envp, |e| crate::real::execvpe(file, argv, e)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the hook with the same
    // contract, with this process's environment (forwarding, in `hooks`).
    unsafe { execvpe(file, argv, environ()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's arrays, forwarded.
    unsafe { with_env(envp, |e| crate::real::fexecve(fd, argv, e)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's arrays, forwarded.
    unsafe { with_env(envp, |e| crate::real::execveat(dirfd, path, argv, e, flags)) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's arguments, forwarded.
    unsafe {
        with_env(envp.cast(), |e| {
            crate::real::posix_spawn(pid, path, actions, attr, argv, e.cast())
        })
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: the caller's arguments, forwarded.
    unsafe {
        with_env(envp.cast(), |e| {
            crate::real::posix_spawnp(pid, file, actions, attr, argv, e.cast())
        })
    }
}

// ---- execl, execlp, execle ----------------------------------------------------------
//
// glibc's list forms build an argv and call execve inside libc, where no
// hook sees it; and C variadics cannot be written in stable Rust. Each is a
// naked trampoline that stores the argument registers beside each other
// and calls `execl_impl` with where they are and where the arguments passed
// on the stack begin: the list is read from the first, then the second.

/// Which list form called.
const EXECL: c_int = 0;
const EXECLP: c_int = 1;
const EXECLE: c_int = 2;

/// Argument registers after `path` that may hold list entries.
#[cfg(target_arch = "x86_64")]
const IN_REGS: usize = 5;
#[cfg(target_arch = "aarch64")]
const IN_REGS: usize = 7;

/// Builds argv (and envp for `execle`) from the list and execs.
///
/// # Safety
/// `regs` holds [`IN_REGS`] words and `stack` the caller's further
/// arguments, as the trampolines below pass them; the list is
/// null-terminated as `execl(3)` requires.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe extern "C" fn execl_impl(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    form: c_int,
) -> c_int {
    // SAFETY: entry `i` of the list: the first IN_REGS in `regs`, the
    // rest on the caller's stack (the caller's obligation to terminate).
    let at = |i: usize| unsafe {
        if i < IN_REGS {
            *regs.add(i)
        } else {
            *stack.add(i - IN_REGS)
        }
    };
    let mut argv = Vec::new();
    let mut i = 0;
    loop {
        let a = at(i);
        argv.push(a);
        i += 1;
        if a.is_null() {
            break;
        }
    }
    let argv_p = argv.as_ptr();
    // SAFETY: null-terminated argv built above; the caller's strings.
    unsafe {
        match form {
            EXECLP => execvp(path, argv_p),
            EXECLE => execve(path, argv_p, at(i).cast()),
            _ => execve(path, argv_p, environ()),
        }
    }
}

macro_rules! list_form {
    ($name:ident, $form:expr) => {
        #[cfg(target_arch = "x86_64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() {
            // rsi, rdx, rcx, r8, r9 to [rsp..rsp+40] (56 keeps rsp
            // 16-aligned at the call); the stack arguments start above
            // the return address, at rsp + 64.
            core::arch::naked_asm!(
                "sub rsp, 56",
                "mov [rsp], rsi",
                "mov [rsp + 8], rdx",
                "mov [rsp + 16], rcx",
                "mov [rsp + 24], r8",
                "mov [rsp + 32], r9",
                "mov rsi, rsp",
                "lea rdx, [rsp + 64]",
                "mov ecx, {form}",
                "call {imp}",
                "add rsp, 56",
                "ret",
                form = const $form,
                imp = sym execl_impl,
            )
        }

        #[cfg(target_arch = "aarch64")]
        #[unsafe(no_mangle)]
        #[unsafe(naked)]
        pub unsafe extern "C" fn $name() {
            // x1..x7 to [sp+16..sp+72]; the stack arguments start at the
            // caller's sp, 80 above ours.
            core::arch::naked_asm!(
                "stp x29, x30, [sp, #-80]!",
                "mov x29, sp",
                "stp x1, x2, [sp, #16]",
                "stp x3, x4, [sp, #32]",
                "stp x5, x6, [sp, #48]",
                "str x7, [sp, #64]",
                "add x1, sp, #16",
                "add x2, sp, #80",
                "mov w3, #{form}",
                "bl {imp}",
                "ldp x29, x30, [sp], #80",
                "ret",
                form = const $form,
                imp = sym execl_impl,
            )
        }
    };
}

list_form!(execl, EXECL);
list_form!(execlp, EXECLP);
list_form!(execle, EXECLE);
