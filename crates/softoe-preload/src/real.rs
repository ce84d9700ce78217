//! The functions the shim stands in front of, found with
//! `dlsym(RTLD_NEXT, …)`: libc's own (or whatever library comes after us).

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    c_char, c_int, c_ulong, c_void, epoll_event, fd_set, msghdr, nfds_t, off_t, pollfd, sigset_t,
    size_t, sockaddr, socklen_t, ssize_t, timespec, timeval,
};

/// The address of the next definition of `name`, cached in `slot`.
fn resolve(slot: &AtomicUsize, name: &CStr) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated symbol name; RTLD_NEXT is a valid
    // pseudo-handle for a shared object's lookups.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if p == 0 {
        // (`write` itself missing: nothing to say it with.)
        if name != c"write" {
            crate::diag::say(&format!(
                "softoe-preload: libc has no {} (dlsym RTLD_NEXT)",
                name.to_string_lossy()
            ));
        }
        std::process::abort();
    }
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! real {
    ($( fn $name:ident($($a:ident: $t:ty),*) -> $r:ty; )*) => {$(
        /// Calls the real function of that name.
        ///
        /// # Safety
        /// As for the C function: the caller passes what it requires.
        pub(crate) unsafe fn $name($($a: $t),*) -> $r {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = resolve(&SLOT, match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => c"",
            });
            // SAFETY: `p` is the next definition of this libc symbol, whose
            // C signature is the one declared here.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
            // SAFETY: the caller's obligations are the C function's.
            unsafe { f($($a),*) }
        }
    )*};
}

real! {
    fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int;
    fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    fn listen(fd: c_int, backlog: c_int) -> c_int;
    fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fn getsockopt(fd: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut socklen_t) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int;
    fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t;
    fn sendto(fd: c_int, buf: *const c_void, len: size_t, flags: c_int, addr: *const sockaddr, alen: socklen_t) -> ssize_t;
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t;
    fn recvfrom(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int, addr: *mut sockaddr, alen: *mut socklen_t) -> ssize_t;
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t;
    fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t;
    fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t;
    fn close(fd: c_int) -> c_int;
    fn shutdown(fd: c_int, how: c_int) -> c_int;
    fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
    fn ppoll(fds: *mut pollfd, n: nfds_t, ts: *const timespec, mask: *const sigset_t) -> c_int;
    fn select(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, tv: *mut timeval) -> c_int;
    fn pselect(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, ts: *const timespec, mask: *const sigset_t) -> c_int;
    fn epoll_create(size: c_int) -> c_int;
    fn epoll_create1(flags: c_int) -> c_int;
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int;
    fn epoll_wait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int) -> c_int;
    fn epoll_pwait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(fd: c_int, new: c_int) -> c_int;
    fn dup3(fd: c_int, new: c_int, flags: c_int) -> c_int;
    fn sendfile(out: c_int, input: c_int, off: *mut off_t, count: size_t) -> ssize_t;
    fn pread(fd: c_int, buf: *mut c_void, len: size_t, off: off_t) -> ssize_t;
    fn recvmmsg(fd: c_int, msgs: *mut libc::mmsghdr, vlen: libc::c_uint, flags: c_int, timeout: *mut timespec) -> c_int;
    fn sendmmsg(fd: c_int, msgs: *mut libc::mmsghdr, vlen: libc::c_uint, flags: c_int) -> c_int;
    fn splice(fd_in: c_int, off_in: *mut libc::loff_t, fd_out: c_int, off_out: *mut libc::loff_t, len: size_t, flags: libc::c_uint) -> ssize_t;
    fn epoll_pwait2(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: *const timespec, mask: *const sigset_t) -> c_int;
    fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int;
    fn execveat(dirfd: c_int, path: *const c_char, argv: *const *const c_char, envp: *const *const c_char, flags: c_int) -> c_int;
    fn posix_spawn(pid: *mut libc::pid_t, path: *const c_char, actions: *const libc::posix_spawn_file_actions_t, attr: *const libc::posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn posix_spawnp(pid: *mut libc::pid_t, file: *const c_char, actions: *const libc::posix_spawn_file_actions_t, attr: *const libc::posix_spawnattr_t, argv: *const *mut c_char, envp: *const *mut c_char) -> c_int;
    fn chroot(path: *const c_char) -> c_int;
    fn closefrom(low: c_int) -> ();
    fn close_range(first: libc::c_uint, last: libc::c_uint, flags: c_int) -> c_int;
    fn setuid(uid: libc::uid_t) -> c_int;
    fn seteuid(uid: libc::uid_t) -> c_int;
    fn setreuid(r: libc::uid_t, e: libc::uid_t) -> c_int;
    fn setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t) -> c_int;
    fn setrlimit(res: libc::__rlimit_resource_t, lim: *const libc::rlimit) -> c_int;
    fn setrlimit64(res: libc::__rlimit_resource_t, lim: *const libc::rlimit64) -> c_int;
    fn prlimit(pid: libc::pid_t, res: libc::__rlimit_resource_t, new: *const libc::rlimit, old: *mut libc::rlimit) -> c_int;
    fn prlimit64(pid: libc::pid_t, res: libc::__rlimit_resource_t, new: *const libc::rlimit64, old: *mut libc::rlimit64) -> c_int;
}

/// `prctl` is variadic in C; the real one is called as such.
pub(crate) unsafe fn prctl(
    option: c_int,
    a2: c_ulong,
    a3: c_ulong,
    a4: c_ulong,
    a5: c_ulong,
) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = resolve(&SLOT, c"prctl");
    // SAFETY: `p` is libc's `int prctl(int, ...)`.
    let f: unsafe extern "C" fn(c_int, ...) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller passes what `option` expects.
    unsafe { f(option, a2, a3, a4, a5) }
}

/// `syscall` is variadic in C; the real one is called as such, with the
/// six arguments any system call takes (the caller's unused ones are
/// passed on as they came: the kernel reads only those the call has).
pub(crate) unsafe fn syscall(n: libc::c_long, a: [libc::c_long; 6]) -> libc::c_long {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = resolve(&SLOT, c"syscall");
    // SAFETY: `p` is libc's `long syscall(long, ...)`.
    let f: unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long =
        unsafe { std::mem::transmute(p) };
    // SAFETY: the caller passes what system call `n` expects.
    unsafe { f(n, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

/// `fcntl` and `ioctl` are variadic in C; the real ones are called as such.
pub(crate) unsafe fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = resolve(&SLOT, c"fcntl");
    // SAFETY: `p` is libc's `int fcntl(int, int, ...)`.
    let f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller passes the argument `cmd` expects.
    unsafe { f(fd, cmd, arg) }
}

/// See [`fcntl`].
pub(crate) unsafe fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    let p = resolve(&SLOT, c"ioctl");
    // SAFETY: `p` is libc's `int ioctl(int, unsigned long, ...)`.
    let f: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller passes the argument `req` expects.
    unsafe { f(fd, req, arg) }
}

/// Sets `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno word.
    unsafe { *libc::__errno_location() = e };
}
