//! The XDP program that hands the interface's frames to the port's socket,
//! assembled here and loaded with the `bpf(2)` system call (no libbpf, no
//! clang): five instructions, the C of which is
//!
//! ```c
//! return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//! ```
//!
//! `xsks` is an XSKMAP holding the port's socket at its queue's index; a
//! frame on a queue with no socket goes on to the kernel's stack
//! (`XDP_PASS`, the lookup's fallback). The program is attached with a
//! BPF link (`BPF_LINK_CREATE`, attach type `BPF_XDP`, Linux 5.9), in the
//! driver's own XDP hook where it has one (veth does) and the generic
//! (skb) hook otherwise. The link's descriptor is the attachment: closing
//! it — the port dropped, or its process gone however it ended —
//! detaches the program, so a crashed engine leaves nothing on the
//! interface.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::sys::{context, owned_fd};

// bpf(2) commands.
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const HELPER_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
/// `offsetof(struct xdp_md, rx_queue_index)`.
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

// `XDP_FLAGS_*` for the link.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// Where the program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// The driver's own XDP hook (native XDP): before an `sk_buff` is
    /// built. veth has one.
    Driver,
    /// The generic hook (`XDP_FLAGS_SKB_MODE`), after the `sk_buff`: any
    /// interface, slower.
    Generic,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            XdpMode::Driver => XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }

    /// How `describe` and the docs name it.
    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Driver => "driver",
            XdpMode::Generic => "generic",
        }
    }
}

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    code: u8,
    /// dst in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (dst & 0xf) | (src << 4),
        off,
        imm,
    }
}

const LDX_W: u8 = 0x61; // LDX | W | MEM
const LD_DW_IMM: u8 = 0x18; // LD | DW | IMM (two slots)
const MOV64_K: u8 = 0xb7; // ALU64 | MOV | K
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

/// An instruction's fields: (code, registers, offset, immediate).
#[cfg(test)]
pub(crate) fn fields(i: &Insn) -> (u8, u8, i16, i32) {
    (i.code, i.regs, i.off, i.imm)
}

/// The program, redirecting to the XSKMAP `map_fd`.
pub(crate) fn program(map_fd: i32) -> [Insn; 6] {
    [
        insn(LDX_W, 2, 1, XDP_MD_RX_QUEUE_INDEX, 0), // r2 = ctx->rx_queue_index
        insn(LD_DW_IMM, 1, BPF_PSEUDO_MAP_FD, 0, map_fd), // r1 = &xsks
        insn(0, 0, 0, 0, 0),                         // (its upper half)
        insn(MOV64_K, 3, 0, 0, XDP_PASS),            // r3 = fallback
        insn(CALL, 0, 0, 0, HELPER_REDIRECT_MAP),    // r0 = redirect
        insn(EXIT, 0, 0, 0, 0),                      // return r0
    ]
}

/// `bpf(cmd, attr, size)`.
///
/// # Safety
/// `attr` must be the `union bpf_attr` layout `cmd` expects, and every
/// pointer in it valid for what the kernel reads or writes there during
/// the call.
unsafe fn bpf<A>(cmd: libc::c_int, attr: &mut A) -> libc::c_long {
    let size = size_of::<A>() as libc::c_uint;
    // SAFETY: the caller vouches for `attr`'s layout and pointers; it is
    // borrowed for the call and `size` is its size.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut A, size) }
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

/// `union bpf_attr` for `BPF_MAP_UPDATE_ELEM`.
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

/// `union bpf_attr` for `BPF_LINK_CREATE` (the fields every attach type
/// has, and room the kernel requires zeroed).
#[repr(C)]
#[derive(Default)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    _rest: [u64; 4],
}

/// The program attached to an interface; dropping it detaches it.
#[derive(Debug)]
pub(crate) struct Attached {
    /// The link: closing it detaches the program. First, so it goes first.
    _link: OwnedFd,
    /// The XSKMAP (the program holds it too).
    _map: OwnedFd,
    /// Where it runs.
    pub mode: XdpMode,
}

const NAME: &[u8; 16] = b"softoe_xsk\0\0\0\0\0\0";

/// Creates the XSKMAP with `xsk` at key `queue`, loads the program and
/// attaches it to `ifindex` (`ifname` for messages): in `mode`, or the
/// driver's hook and then the generic one when `mode` is `None`.
pub(crate) fn attach(
    ifname: &str,
    ifindex: u32,
    queue: u32,
    xsk: &OwnedFd,
    mode: Option<XdpMode>,
) -> io::Result<Attached> {
    let mut attr = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: queue + 1,
        map_name: *NAME,
        ..MapCreate::default()
    };
    // SAFETY: a BPF_MAP_CREATE attr without pointers.
    let rc = unsafe { bpf(BPF_MAP_CREATE, &mut attr) };
    let map = owned_fd(
        rc,
        &format!("creating the XSKMAP for {ifname} (needs CAP_BPF and CAP_NET_ADMIN)"),
    )?;

    let key = queue;
    let value = xsk.as_raw_fd() as u32;
    let mut attr = MapElem {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0,
    };
    // SAFETY: `key` and `value` (4 bytes each, the map's sizes) outlive
    // the call; the kernel only reads them.
    let rc = unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) };
    if rc < 0 {
        return Err(super::sys::os_error(&format!(
            "putting the socket into the XSKMAP of {ifname} at queue {queue}"
        )));
    }

    let insns = program(map.as_raw_fd());
    let license = c"MIT OR Apache-2.0";
    let mut log = vec![0u8; 16 * 1024];
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        kern_version: 0,
        prog_flags: 0,
        prog_name: *NAME,
        prog_ifindex: 0,
        expected_attach_type: BPF_XDP,
    };
    // SAFETY: `insns`, `license` and `log` outlive the call; the kernel
    // reads `insn_cnt` instructions and the NUL-terminated license, and
    // writes at most `log_size` bytes of log.
    let rc = unsafe { bpf(BPF_PROG_LOAD, &mut attr) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
        let why = String::from_utf8_lossy(log.get(..end).unwrap_or(&[]))
            .trim()
            .to_string();
        return Err(io::Error::new(
            e.kind(),
            format!("loading the XDP program for {ifname}: {e} (verifier: {why:?})"),
        ));
    }
    let prog = owned_fd(rc, "loading the XDP program")?;

    let modes: &[XdpMode] = match mode {
        Some(XdpMode::Driver) => &[XdpMode::Driver],
        Some(XdpMode::Generic) => &[XdpMode::Generic],
        None => &[XdpMode::Driver, XdpMode::Generic],
    };
    let mut last = io::Error::other("no mode tried");
    for &m in modes {
        let mut attr = LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: m.flags(),
            ..LinkCreate::default()
        };
        // SAFETY: a BPF_LINK_CREATE attr without pointers.
        let rc = unsafe { bpf(BPF_LINK_CREATE, &mut attr) };
        if rc >= 0 {
            let link = owned_fd(rc, "attaching the XDP program")?;
            return Ok(Attached {
                _link: link,
                _map: map,
                mode: m,
            });
        }
        last = context(
            &format!(
                "attaching the XDP program to {ifname} in {} mode (BPF_LINK_CREATE, Linux 5.9+)",
                m.name()
            ),
            io::Error::last_os_error(),
        );
    }
    Err(last)
}
