//! The `bpf(2)` commands softoe uses, without libbpf: creating a map and
//! reading or writing one of its elements, loading a program, and
//! attaching it with a BPF link. Each is a safe function: the attribute
//! structs (`union bpf_attr`'s arms) are private, and every pointer put in
//! one is taken from a borrow that outlives the call and is as long as the
//! kernel will read or write there.
//!
//! A program is memory-safe for this process whatever its instructions:
//! the kernel's verifier refuses one that would touch anything but what
//! the program type allows, and no program type softoe loads writes user
//! memory.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

// bpf(2) commands.
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;

/// `BPF_MAP_TYPE_ARRAY`.
pub const MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_XSKMAP`.
pub const MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_SCHED_CLS` (tc and tcx programs).
pub const PROG_TYPE_SCHED_CLS: u32 = 3;
/// `BPF_PROG_TYPE_XDP`.
pub const PROG_TYPE_XDP: u32 = 6;
/// Attach type `BPF_XDP`.
pub const ATTACH_XDP: u32 = 37;
/// Attach type `BPF_TCX_INGRESS` (Linux 6.6).
pub const ATTACH_TCX_INGRESS: u32 = 46;
/// `BPF_PSEUDO_MAP_FD`: an `LD_DW_IMM`'s source register when its
/// immediate is a map's descriptor.
pub const PSEUDO_MAP_FD: u8 = 1;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// The opcode.
    pub code: u8,
    /// dst in the low nibble, src in the high one.
    pub regs: u8,
    /// The offset.
    pub off: i16,
    /// The immediate.
    pub imm: i32,
}

/// An instruction from its fields.
pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (dst & 0xf) | (src << 4),
        off,
        imm,
    }
}

/// `bpf(cmd, attr, size_of::<A>())`, the descriptor or value it returns.
///
/// # Safety
/// `attr` must be the `union bpf_attr` layout `cmd` expects (a prefix of
/// it, zero where unused), and every pointer in it valid for what the
/// kernel reads or writes there during the call.
unsafe fn bpf<A>(cmd: libc::c_int, attr: &mut A) -> io::Result<libc::c_long> {
    let size = size_of::<A>() as libc::c_uint;
    // SAFETY: the caller vouches for `attr`'s layout and pointers; it is
    // borrowed for the call and `size` is its size.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut A, size) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// Owns the descriptor a `bpf` command returned.
fn owned(rc: libc::c_long) -> io::Result<OwnedFd> {
    let fd = libc::c_int::try_from(rc)
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| io::Error::other(format!("bpf(2) returned descriptor {rc}")))?;
    // SAFETY: `fd` is a descriptor the kernel just returned to this
    // process (a map, program or link); nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `union bpf_attr` for `BPF_MAP_CREATE` (the fields up to `map_name`).
#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
    _pad: u32,
}

/// `union bpf_attr` for `BPF_MAP_*_ELEM`.
#[repr(C)]
struct MapElem {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_PROG_LOAD` (the fields up to
/// `expected_attach_type`).
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for `BPF_LINK_CREATE`: the fields every attach type
/// has, tcx's (`relative_fd`, `expected_revision`), and room the kernel
/// requires zeroed.
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    relative_fd: u32,
    _pad: u32,
    expected_revision: u64,
    _rest: [u64; 2],
}

/// A name as the kernel keeps it: at most 15 bytes and a NUL.
fn object_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().take(15).zip(name.bytes()) {
        *o = b;
    }
    out
}

/// A BPF map, with the key and value sizes it was made with (so that an
/// element's buffers are checked against them).
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    key_size: usize,
    value_size: usize,
}

impl Map {
    /// `BPF_MAP_CREATE`: a map of `map_type` named `name` (its first 15
    /// bytes).
    pub fn create(
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        name: &str,
    ) -> io::Result<Map> {
        let mut attr = MapCreate {
            map_type,
            key_size,
            value_size,
            max_entries,
            map_name: object_name(name),
            ..MapCreate::default()
        };
        // SAFETY: a BPF_MAP_CREATE attr without pointers.
        let fd = owned(unsafe { bpf(BPF_MAP_CREATE, &mut attr) }?)?;
        Ok(Map {
            fd,
            key_size: key_size as usize,
            value_size: value_size as usize,
        })
    }

    fn check(&self, key: usize, value: usize) -> io::Result<()> {
        if key != self.key_size || value != self.value_size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {key}-byte key and {value}-byte value for a map of {}-byte keys and {}-byte values",
                    self.key_size, self.value_size
                ),
            ));
        }
        Ok(())
    }

    /// `BPF_MAP_UPDATE_ELEM` (`BPF_ANY`): sets `key` to `value`, each
    /// exactly the map's size.
    pub fn update(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.check(key.len(), value.len())?;
        // SAFETY: `key` and `value` are borrowed for the call and exactly
        // the map's key and value sizes (checked above), which is what the
        // kernel reads; it writes neither.
        unsafe { self.elem(BPF_MAP_UPDATE_ELEM, key, value.as_ptr() as u64) }
    }

    /// `BPF_MAP_LOOKUP_ELEM`: copies `key`'s value into `value`, each
    /// exactly the map's size.
    pub fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<()> {
        self.check(key.len(), value.len())?;
        // SAFETY: `key` (read) and `value` (written, any bytes valid for a
        // `u8` slice) are borrowed for the call and exactly the map's key
        // and value sizes (checked above), all the kernel touches.
        unsafe { self.elem(BPF_MAP_LOOKUP_ELEM, key, value.as_mut_ptr() as u64) }
    }

    /// A `BPF_MAP_*_ELEM` command on `key` and the value at `value`.
    ///
    /// # Safety
    /// `key` must be the map's key size, and `value` the address of the
    /// map's value size of bytes, live for the call and writable if `cmd`
    /// writes the value.
    unsafe fn elem(&self, cmd: libc::c_int, key: &[u8], value: u64) -> io::Result<()> {
        let mut attr = MapElem {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: key.as_ptr() as u64,
            value,
            flags: 0,
        };
        // SAFETY: a `BPF_MAP_*_ELEM` attr whose pointers the caller vouches
        // for.
        unsafe { bpf(cmd, &mut attr) }.map(drop)
    }
}

impl AsFd for Map {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What to load: `BPF_PROG_LOAD`'s fields.
#[derive(Debug, Clone, Copy)]
pub struct Program<'a> {
    /// `BPF_PROG_TYPE_*`.
    pub prog_type: u32,
    /// The instructions.
    pub insns: &'a [Insn],
    /// The license (the helpers a program calls may want a GPL-compatible
    /// one).
    pub license: &'a CStr,
    /// Its name (the first 15 bytes).
    pub name: &'a str,
    /// `expected_attach_type`.
    pub attach_type: u32,
}

/// A program the verifier refused (or the load failed otherwise): the
/// error, and the verifier's log.
#[derive(Debug)]
pub struct LoadError {
    /// What the call returned.
    pub error: io::Error,
    /// The verifier's log, trimmed (empty when it wrote none).
    pub log: String,
}

/// `BPF_PROG_LOAD`, with a verifier log of `log_size` bytes kept for the
/// error.
pub fn load(prog: &Program<'_>, log_size: usize) -> Result<OwnedFd, LoadError> {
    let fail = |error| LoadError {
        error,
        log: String::new(),
    };
    let insn_cnt = u32::try_from(prog.insns.len())
        .map_err(|_| fail(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let mut log = vec![0u8; log_size];
    let mut attr = ProgLoad {
        prog_type: prog.prog_type,
        insn_cnt,
        insns: prog.insns.as_ptr() as u64,
        license: prog.license.as_ptr() as u64,
        log_level: u32::from(log_size > 0),
        log_size: u32::try_from(log.len()).unwrap_or(u32::MAX),
        log_buf: log.as_mut_ptr() as u64,
        kern_version: 0,
        prog_flags: 0,
        prog_name: object_name(prog.name),
        prog_ifindex: 0,
        expected_attach_type: prog.attach_type,
    };
    // SAFETY: `insns` (`insn_cnt` instructions), `license` (NUL-terminated)
    // and `log` are borrowed or owned here and outlive the call; the kernel
    // reads the first two and writes at most `log_size` bytes (never more
    // than `log.len()`) of the log, which any bytes leave valid.
    match unsafe { bpf(BPF_PROG_LOAD, &mut attr) }.and_then(owned) {
        Ok(fd) => Ok(fd),
        Err(error) => {
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(log.get(..end).unwrap_or(&[]))
                .trim()
                .to_string();
            Err(LoadError { error, log })
        }
    }
}

/// `BPF_LINK_CREATE`: attaches `prog` to interface `ifindex` at
/// `attach_type` with `flags`; closing the link detaches it.
pub fn link(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    attach_type: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut attr = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type,
        flags,
        ..LinkCreate::default()
    };
    // SAFETY: a BPF_LINK_CREATE attr without pointers.
    owned(unsafe { bpf(BPF_LINK_CREATE, &mut attr) }?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_match_the_kernels_layout() {
        assert_eq!(size_of::<Insn>(), 8);
        assert_eq!(size_of::<MapElem>(), 32);
        assert_eq!(size_of::<LinkCreate>(), 48);
        assert_eq!(std::mem::offset_of!(LinkCreate, relative_fd), 16);
        assert_eq!(std::mem::offset_of!(LinkCreate, expected_revision), 24);
        assert_eq!(std::mem::offset_of!(ProgLoad, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoad, expected_attach_type), 68);
        assert_eq!(std::mem::offset_of!(MapCreate, map_name), 28);
    }

    #[test]
    fn an_instruction_packs_its_registers() {
        let i = insn(0x18, 1, PSEUDO_MAP_FD, -2, 7);
        assert_eq!((i.code, i.regs, i.off, i.imm), (0x18, 0x11, -2, 7));
        assert_eq!(insn(0, 0x1f, 0, 0, 0).regs, 0x0f, "dst is a nibble");
    }

    #[test]
    fn a_name_is_cut_to_fifteen_bytes() {
        assert_eq!(&object_name("softoe_xsk")[..11], b"softoe_xsk\0");
        let long = object_name("abcdefghijklmnopqrstuvwxyz");
        assert_eq!(&long[..15], b"abcdefghijklmno");
        assert_eq!(long[15], 0);
    }

    /// Needs CAP_BPF (root); skips otherwise.
    #[test]
    fn an_array_map_keeps_a_value_and_checks_sizes() {
        let map = match Map::create(MAP_TYPE_ARRAY, 4, 8, 1, "softoe_test") {
            Ok(m) => m,
            Err(e) => {
                eprintln!("skipping: no bpf(2) here ({e})");
                return;
            }
        };
        let key = 0u32.to_ne_bytes();
        map.update(&key, &42u64.to_ne_bytes()).unwrap();
        let mut v = [0u8; 8];
        map.lookup(&key, &mut v).unwrap();
        assert_eq!(u64::from_ne_bytes(v), 42);
        let mut short = [0u8; 4];
        let e = map.lookup(&key, &mut short).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(map.update(&[0u8; 8], &[0u8; 8]).is_err());
    }

    /// Needs CAP_BPF (root); skips otherwise.
    #[test]
    fn the_verifier_log_comes_back_with_a_refusal() {
        if Map::create(MAP_TYPE_ARRAY, 4, 8, 1, "softoe_probe").is_err() {
            eprintln!("skipping: no bpf(2) here");
            return;
        }
        // `exit` with r0 never set: the verifier refuses it.
        let insns = [insn(0x95, 0, 0, 0, 0)];
        let prog = Program {
            prog_type: PROG_TYPE_SCHED_CLS,
            insns: &insns,
            license: c"MIT",
            name: "softoe_bad",
            attach_type: 0,
        };
        let e = load(&prog, 4096).unwrap_err();
        assert!(e.log.contains("R0"), "{:?}", e.log);
    }
}
