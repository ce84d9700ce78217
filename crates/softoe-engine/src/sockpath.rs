//! The socket files an engine listens on (its control socket, its host
//! interface): claimed only when no live engine answers there, and removed
//! at exit only while the file is still the one this engine bound.
//!
//! A second engine given the same path once deleted the first one's
//! control socket at start and again at exit: `softoe stat` then said no
//! engine ran while one did.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Whether an engine answers at `path` (a stream connect for the control
/// socket, a seqpacket connect for the host interface).
pub fn alive(path: &Path) -> bool {
    if UnixStream::connect(path).is_ok() {
        return true;
    }
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let Ok(fd) = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    ) else {
        return false;
    };
    let Ok(addr) = SocketAddrUnix::new(path) else {
        return false;
    };
    rustix::net::connect(&fd, &addr).is_ok()
}

/// Makes `path` free to bind: an error naming it when a live engine
/// answers there; a dead one's file is removed.
pub fn claim(path: &Path, what: &str) -> io::Result<()> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    if alive(path) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "another engine answers at {} ({what}): stop it, or give this engine a \
                 path of its own",
                path.display()
            ),
        ));
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

/// A socket file this engine bound: removed when dropped, if the file at
/// the path is still that one (another engine may have taken the path
/// since — after ours was removed by hand, say).
#[derive(Debug)]
pub struct Bound {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

impl Bound {
    /// Records the file just bound at `path`.
    pub fn new(path: &Path) -> Bound {
        let id = std::fs::symlink_metadata(path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        Bound {
            path: path.to_path_buf(),
            id,
        }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let now = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|m| (m.dev(), m.ino()));
        if now.is_some() && now == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("softoe-sockpath-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_live_socket_is_refused_a_dead_one_replaced() {
        let d = dir("claim");
        let p = d.join("c.sock");
        assert!(claim(&p, "control").is_ok(), "nothing there");
        let l = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let e = claim(&p, "control").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&p.display().to_string()), "{e}");
        assert!(p.exists(), "a live engine's file stays");
        drop(l);
        claim(&p, "control").unwrap();
        assert!(!p.exists(), "a dead engine's file goes");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn only_our_own_file_is_removed() {
        let d = dir("bound");
        let p = d.join("c.sock");
        let l1 = std::os::unix::net::UnixListener::bind(&p).unwrap();
        let first = Bound::new(&p);
        // Someone removes it and another engine binds the path.
        std::fs::remove_file(&p).unwrap();
        let _l2 = std::os::unix::net::UnixListener::bind(&p).unwrap();
        drop(first);
        drop(l1);
        assert!(p.exists(), "the other engine's file survived our exit");
        let second = Bound::new(&p);
        drop(second);
        assert!(!p.exists(), "our own file goes");
        let _ = std::fs::remove_dir_all(&d);
    }
}
