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
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use softoe_sys::bpf::{self as sys, Insn, insn};

use super::sys::context;

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
        insn(LD_DW_IMM, 1, sys::PSEUDO_MAP_FD, 0, map_fd), // r1 = &xsks
        insn(0, 0, 0, 0, 0),                         // (its upper half)
        insn(MOV64_K, 3, 0, 0, XDP_PASS),            // r3 = fallback
        insn(CALL, 0, 0, 0, HELPER_REDIRECT_MAP),    // r0 = redirect
        insn(EXIT, 0, 0, 0, 0),                      // return r0
    ]
}

/// The program attached to an interface; dropping it detaches it.
#[derive(Debug)]
pub(crate) struct Attached {
    /// The link: closing it detaches the program. First, so it goes first.
    _link: OwnedFd,
    /// The XSKMAP (the program holds it too).
    _map: sys::Map,
    /// Where it runs.
    pub mode: XdpMode,
}

const NAME: &str = "softoe_xsk";

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
    let map = sys::Map::create(sys::MAP_TYPE_XSKMAP, 4, 4, queue + 1, NAME).map_err(|e| {
        context(
            &format!("creating the XSKMAP for {ifname} (needs CAP_BPF and CAP_NET_ADMIN)"),
            e,
        )
    })?;
    let value = xsk.as_raw_fd() as u32;
    map.update(&queue.to_ne_bytes(), &value.to_ne_bytes())
        .map_err(|e| {
            context(
                &format!("putting the socket into the XSKMAP of {ifname} at queue {queue}"),
                e,
            )
        })?;

    let insns = program(map.as_fd().as_raw_fd());
    let prog = sys::load(
        &sys::Program {
            prog_type: sys::PROG_TYPE_XDP,
            insns: &insns,
            license: c"MIT OR Apache-2.0",
            name: NAME,
            attach_type: sys::ATTACH_XDP,
        },
        16 * 1024,
    )
    .map_err(|e| {
        io::Error::new(
            e.error.kind(),
            format!(
                "loading the XDP program for {ifname}: {} (verifier: {:?})",
                e.error, e.log
            ),
        )
    })?;

    let modes: &[XdpMode] = match mode {
        Some(XdpMode::Driver) => &[XdpMode::Driver],
        Some(XdpMode::Generic) => &[XdpMode::Generic],
        None => &[XdpMode::Driver, XdpMode::Generic],
    };
    let mut last = io::Error::other("no mode tried");
    for &m in modes {
        match sys::link(prog.as_fd(), ifindex, sys::ATTACH_XDP, m.flags()) {
            Ok(link) => {
                return Ok(Attached {
                    _link: link,
                    _map: map,
                    mode: m,
                });
            }
            Err(e) => {
                last = context(
                    &format!(
                        "attaching the XDP program to {ifname} in {} mode (BPF_LINK_CREATE, Linux 5.9+)",
                        m.name()
                    ),
                    e,
                )
            }
        }
    }
    Err(last)
}
