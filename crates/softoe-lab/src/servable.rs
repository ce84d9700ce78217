//! Whether the `LD_PRELOAD` shim can serve a program at all.
//!
//! The shim stands in front of libc's socket calls; a program that makes
//! its system calls without libc never meets it, and its sockets stay on
//! Linux's TCP without a word — a Go `net/http` server under `softoe run`
//! did, even at debug level. Two kinds never meet it: a **static**
//! binary (no `PT_INTERP`: no dynamic loader to preload anything; a
//! static PIE has a dynamic section and still no loader), and a **Go**
//! binary, static or not (its runtime calls the kernel itself; with cgo
//! it links libc only for name lookups). A Go binary says so in its
//! sections (`.go.buildinfo`, the build ID note `.note.go.buildid`) or its
//! symbols (`runtime.buildVersion`). The program is found as `exec` finds
//! it (through `PATH` for a bare name), and a script (`#!`) is judged by
//! its interpreter (through `env`'s `PATH` for `#!/usr/bin/env NAME`).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::{FileKind, Object, ReadCache, ReadRef};

/// Why the shim cannot serve a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unservable {
    /// Linked statically: no loader preloads the shim.
    Static(PathBuf),
    /// A Go program: its runtime makes its system calls itself.
    Go(PathBuf),
}

impl Unservable {
    /// What is wrong, naming the binary and why.
    pub fn why(&self) -> String {
        match self {
            Unservable::Static(p) => format!(
                "{} is statically linked: no dynamic loader runs to preload the shim",
                p.display()
            ),
            Unservable::Go(p) => format!(
                "{} is a Go program: Go makes its system calls itself, never through \
                 libc, where the shim stands",
                p.display()
            ),
        }
    }
}

/// How deep `#!` interpreters may nest (Linux's own limit).
const MAX_INTERPRETERS: usize = 4;

/// Whether the shim can serve `program` (as `exec` would find it with
/// `path`, the `PATH` it runs with): `Some` names the binary that keeps
/// its sockets on the kernel and why; `None` for a dynamically linked
/// program, or one this cannot read (exec then says what is wrong).
pub fn check(program: &OsStr, path: Option<&OsStr>) -> Option<Unservable> {
    let mut file = resolve(program, path)?;
    for _ in 0..MAX_INTERPRETERS {
        let mut head = [0u8; 256];
        let n = File::open(&file).and_then(|mut f| f.read(&mut head)).ok()?;
        let head = &head[..n];
        if head.starts_with(b"#!") {
            file = interpreter(head, path)?;
            continue;
        }
        return elf(&file);
    }
    None
}

/// The program `#!` line `head` runs: its interpreter, or for
/// `#!/usr/bin/env [-opts] NAME` the `NAME` found through `path`.
fn interpreter(head: &[u8], path: Option<&OsStr>) -> Option<PathBuf> {
    let line = head[2..].split(|&b| b == b'\n').next()?;
    let mut words = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    let interp = PathBuf::from(OsStr::from_bytes(words.next()?));
    if interp.file_name() == Some(OsStr::new("env")) {
        // `env -S 'a b'` and `env VAR=x NAME` too: the first word that is
        // neither an option nor an assignment.
        if let Some(name) = words.find(|w| !w.starts_with(b"-") && !w.contains(&b'=')) {
            return resolve(OsStr::from_bytes(name), path);
        }
    }
    Some(interp)
}

/// `program` as `execvp` finds it: a name with a `/` as it is, else the
/// first executable regular file of that name in `path` (glibc's default
/// when unset).
fn resolve(program: &OsStr, path: Option<&OsStr>) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let default = OsString::from_vec(b"/bin:/usr/bin".to_vec());
    let dirs = path.unwrap_or(&default);
    dirs.as_bytes()
        .split(|&b| b == b':')
        .map(|d| {
            // An empty entry is the current directory.
            let d = if d.is_empty() { b"." as &[u8] } else { d };
            Path::new(OsStr::from_bytes(d)).join(program)
        })
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// What an ELF file at `file` is (`None`: dynamic, not Go, or not ELF).
fn elf(file: &Path) -> Option<Unservable> {
    let f = File::open(file).ok()?;
    let cache = ReadCache::new(f);
    let go = |o: &dyn GoMarks| o.is_go().then(|| Unservable::Go(file.to_path_buf()));
    let stat = || Unservable::Static(file.to_path_buf());
    match FileKind::parse(&cache).ok()? {
        FileKind::Elf32 => {
            let e =
                ElfFile::<object::elf::FileHeader32<object::Endianness>, _>::parse(&cache).ok()?;
            go(&e).or_else(|| (!has_interp(&e)).then(stat))
        }
        FileKind::Elf64 => {
            let e =
                ElfFile::<object::elf::FileHeader64<object::Endianness>, _>::parse(&cache).ok()?;
            go(&e).or_else(|| (!has_interp(&e)).then(stat))
        }
        _ => None,
    }
}

/// Whether an ELF file names a dynamic loader (`PT_INTERP`).
fn has_interp<'d, H: FileHeader, R: ReadRef<'d>>(e: &ElfFile<'d, H, R>) -> bool {
    let endian = e.endian();
    e.elf_program_headers()
        .iter()
        .any(|p| p.p_type(endian) == object::elf::PT_INTERP)
}

/// The marks a Go toolchain leaves in a binary.
trait GoMarks {
    fn is_go(&self) -> bool;
}

impl<'d, H: FileHeader, R: ReadRef<'d>> GoMarks for ElfFile<'d, H, R> {
    fn is_go(&self) -> bool {
        self.section_by_name(".go.buildinfo").is_some()
            || self.section_by_name(".note.go.buildid").is_some()
            || self.symbol_by_name("runtime.buildVersion").is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_is_served() {
        // This test's own binary is dynamically linked (as Rust builds it
        // for glibc).
        let me = std::env::current_exe().unwrap();
        assert_eq!(check(me.as_os_str(), None), None);
    }

    #[test]
    fn names_are_found_as_exec_finds_them() {
        let dir = std::env::temp_dir().join(format!("softoe-servable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::create_dir_all(dir.join("b")).unwrap();
        // Not executable: skipped, as execvp skips it.
        std::fs::write(dir.join("a/prog"), b"x").unwrap();
        std::fs::write(dir.join("b/prog"), b"x").unwrap();
        std::fs::set_permissions(dir.join("b/prog"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let path = OsString::from(format!(
            "{}:{}",
            dir.join("a").display(),
            dir.join("b").display()
        ));
        assert_eq!(
            resolve(OsStr::new("prog"), Some(&path)),
            Some(dir.join("b/prog"))
        );
        assert_eq!(resolve(OsStr::new("nothing-here"), Some(&path)), None);
        assert_eq!(
            resolve(OsStr::new("./x/prog"), Some(&path)),
            Some(PathBuf::from("./x/prog"))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_script_is_its_interpreter() {
        assert_eq!(
            interpreter(b"#!/bin/sh -e\necho\n", None),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(
            interpreter(b"#! /usr/bin/python3\n", None),
            Some(PathBuf::from("/usr/bin/python3"))
        );
        let path = OsString::from("/bin:/usr/bin");
        let env = interpreter(b"#!/usr/bin/env -S FOO=1 sh -x\n", Some(&path));
        assert!(
            env.as_ref().is_some_and(|p| p.ends_with("sh")),
            "env's program: {env:?}"
        );
        assert_eq!(interpreter(b"#!\n", None), None);
    }
}
