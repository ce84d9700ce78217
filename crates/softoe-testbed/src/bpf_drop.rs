//! Random drops on the wire without the `nft` binary: a 28-instruction
//! eBPF program, assembled here and loaded with the `bpf(2)` system call,
//! attached to a device's ingress as a tcx link (Linux ≥ 6.6).
//!
//! For every frame that arrives on the device it does what the nftables
//! rule `meta protocol ip ip protocol tcp numgen random mod 1000000 < P
//! counter drop` would: an IPv4 TCP frame is dropped when a fresh random
//! number modulo a million is below `P`, the rate in parts per million
//! (so 0.1 % is 1,000), and counted in a one-slot array map; every other
//! frame goes on untouched. (A 32-bit random number modulo a million
//! favours the residues below 967,296 by one part in 4,294: a bias far
//! below what any run can measure.) The link lives as long as its
//! [`DropProgram`] (closing the link's descriptor detaches it); the map
//! stays readable from any namespace.
//!
//! tcx is the kernel's own attach point for tc programs: no qdisc to add,
//! and no `tc` action needed (this kernel has no `gact`, so a classic
//! `tc … action drop` is not available anyway). Loading needs `CAP_BPF`
//! and `CAP_NET_ADMIN`, which a testbed has as root.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use softoe_sys::bpf::{self as sys, Insn, insn};

use crate::{Error, Result};

// Helpers the program calls.
const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
const HELPER_GET_PRANDOM_U32: i32 = 7;
const HELPER_SKB_LOAD_BYTES: i32 = 26;

// tc verdicts: drop, and "no opinion" (the next program, then the stack).
const TC_ACT_SHOT: i32 = 2;
const TCX_NEXT: i32 = -1;

/// `offsetof(struct __sk_buff, protocol)`: the frame's EtherType in
/// network order.
const SKB_PROTOCOL: i16 = 16;
/// The IPv4 protocol byte, from the start of an Ethernet frame (tc runs
/// with `skb->data` at the MAC header, ingress and egress alike).
const IP_PROTOCOL_AT: i32 = 14 + 9;
const IPPROTO_TCP: i32 = 6;

// Opcodes used (class | size/op | source/mode).
const MOV64_X: u8 = 0xbf; // ALU64 | MOV | X
const MOV64_K: u8 = 0xb7; // ALU64 | MOV | K
const ADD64_K: u8 = 0x07; // ALU64 | ADD | K
const MOD64_K: u8 = 0x97; // ALU64 | MOD | K (unsigned)
const LDX_W: u8 = 0x61; // LDX | W | MEM
const LDX_B: u8 = 0x71; // LDX | B | MEM
const ST_W: u8 = 0x62; // ST | W | MEM
const LD_DW_IMM: u8 = 0x18; // LD | DW | IMM (two slots)
const ATOMIC_DW: u8 = 0xdb; // STX | DW | ATOMIC (imm = BPF_ADD)
const JNE_K: u8 = 0x55;
const JEQ_K: u8 = 0x15;
const JGE_K: u8 = 0x35;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;

/// Where the verdicts sit in [`program`], for the jumps to reach them.
const DROP_AT: i16 = 24;
const PASS_AT: i16 = 26;

/// The denominator of a drop rate: rates are in parts per million.
pub(crate) const PPM: u32 = 1_000_000;

/// Which frames a drop program picks from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frames {
    /// IPv4 TCP frames.
    Tcp,
    /// Frames of this EtherType (`skb->protocol`), whatever they carry.
    EtherType(u16),
}

/// The program: drop `ppm` parts per million of the frames `which` names,
/// counting each drop in slot 0 of the array map `map_fd`. A jump's
/// offset counts from the instruction after it.
fn program(ppm: u32, map_fd: i32, which: Frames) -> Result<Vec<Insn>> {
    let rate = i32::try_from(ppm)
        .ok()
        .filter(|_| ppm <= PPM)
        .ok_or_else(|| Error::Command {
            cmd: format!("random drop {ppm} ppm"),
            stderr: "a drop rate is a percentage, 0 to 100 (0 to 1,000,000 ppm)".into(),
        })?;
    let to = |from: i16, target: i16| target - from - 1;
    let ethertype = match which {
        Frames::Tcp => 0x0800u16,
        Frames::EtherType(t) => t,
    };
    let mut p = vec![
        /* 0 */ insn(MOV64_X, 6, 1, 0, 0), // r6 = skb
        /* 1 */ insn(LDX_W, 2, 6, SKB_PROTOCOL, 0), // r2 = skb->protocol
        /* 2 */
        insn(JNE_K, 2, 0, to(2, PASS_AT), i32::from(ethertype.to_be())), // other type: pass
        /* 3 */ insn(MOV64_X, 1, 6, 0, 0), // r1 = skb
        /* 4 */ insn(MOV64_K, 2, 0, 0, IP_PROTOCOL_AT), // r2 = offset
        /* 5 */ insn(MOV64_X, 3, 10, 0, 0), // r3 = fp
        /* 6 */ insn(ADD64_K, 3, 0, 0, -8), // r3 = fp - 8
        /* 7 */ insn(MOV64_K, 4, 0, 0, 1), // r4 = 1 byte
        /* 8 */ insn(CALL, 0, 0, 0, HELPER_SKB_LOAD_BYTES),
        /* 9 */ insn(JNE_K, 0, 0, to(9, PASS_AT), 0), // too short: pass
        /* 10 */ insn(LDX_B, 2, 10, -8, 0), // r2 = IP protocol
        /* 11 */ insn(JNE_K, 2, 0, to(11, PASS_AT), IPPROTO_TCP), // not TCP: pass
        /* 12 */ insn(CALL, 0, 0, 0, HELPER_GET_PRANDOM_U32),
        /* 13 */ insn(MOD64_K, 0, 0, 0, PPM as i32), // r0 %= 1,000,000
        /* 14 */ insn(JGE_K, 0, 0, to(14, PASS_AT), rate), // lucky: pass
        /* 15 */ insn(ST_W, 10, 0, -4, 0), // key 0 at fp - 4
        /* 16 */ insn(LD_DW_IMM, 1, sys::PSEUDO_MAP_FD, 0, map_fd), // r1 = map
        /* 17 */ insn(0, 0, 0, 0, 0), // (its upper half)
        /* 18 */ insn(MOV64_X, 2, 10, 0, 0), // r2 = fp
        /* 19 */ insn(ADD64_K, 2, 0, 0, -4), // r2 = &key
        /* 20 */ insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
        /* 21 */ insn(JEQ_K, 0, 0, to(21, DROP_AT), 0), // no slot: drop uncounted
        /* 22 */ insn(MOV64_K, 1, 0, 0, 1), // r1 = 1
        /* 23 */ insn(ATOMIC_DW, 0, 1, 0, 0), // lock *(u64 *)r0 += r1
        /* 24 */ insn(MOV64_K, 0, 0, 0, TC_ACT_SHOT), // drop
        /* 25 */ insn(EXIT, 0, 0, 0, 0),
        /* 26 */ insn(MOV64_K, 0, 0, 0, TCX_NEXT), // pass
        /* 27 */ insn(EXIT, 0, 0, 0, 0),
    ];
    if let Frames::EtherType(_) = which {
        // Any frame of the type is a candidate: the IP protocol test
        // (3–11) becomes no-ops, so every offset above stays valid (the
        // verifier refuses unreachable instructions, so no jump over them).
        for i in &mut p[3..=11] {
            *i = insn(MOV64_K, 2, 0, 0, 0);
        }
    }
    Ok(p)
}

/// A drop program attached to one device's ingress; dropping it detaches
/// the program.
#[derive(Debug)]
pub(crate) struct DropProgram {
    /// The device (in its namespace).
    pub dev: String,
    /// Holds the attachment: closing it detaches the program.
    _link: OwnedFd,
    /// The counter: one u64 in slot 0.
    map: sys::Map,
}

impl DropProgram {
    /// Loads the program, dropping `ppm` parts per million, and attaches it
    /// to `dev`'s ingress. Runs on a thread inside `dev`'s namespace: the
    /// kernel looks the interface index up there.
    pub(crate) fn attach(dev: &str, ppm: u32, which: Frames) -> Result<DropProgram> {
        let fail = |what: &str, source: std::io::Error| Error::Bpf {
            what: format!("{what} for random drops on {dev}"),
            source,
        };
        let ifindex = ifindex(dev).map_err(|e| fail("looking the device up", e))?;
        let name = "softoe_drop";
        let map = sys::Map::create(sys::MAP_TYPE_ARRAY, 4, 8, 1, name)
            .map_err(|e| fail("creating the drop counter (bpf map)", e))?;

        let insns = program(ppm, map.as_fd().as_raw_fd(), which)?;
        let prog = sys::load(
            &sys::Program {
                prog_type: sys::PROG_TYPE_SCHED_CLS,
                insns: &insns,
                license: c"MIT OR Apache-2.0",
                name,
                attach_type: sys::ATTACH_TCX_INGRESS,
            },
            64 * 1024,
        )
        .map_err(|e| {
            fail(
                &format!("loading the drop program (verifier: {})", e.log),
                e.error,
            )
        })?;

        let link = sys::link(prog.as_fd(), ifindex, sys::ATTACH_TCX_INGRESS, 0).map_err(|e| {
            fail(
                "attaching the drop program to tcx ingress (Linux 6.6 or later)",
                e,
            )
        })?;
        // The link holds the program, and the program its map.
        drop(prog);
        Ok(DropProgram {
            dev: dev.to_string(),
            _link: link,
            map,
        })
    }

    /// How many frames it has dropped.
    pub(crate) fn dropped(&self) -> Result<u64> {
        let mut value = [0u8; 8];
        self.map
            .lookup(&0u32.to_ne_bytes(), &mut value)
            .map_err(|source| Error::Bpf {
                what: format!("reading the drop counter of {}", self.dev),
                source,
            })?;
        Ok(u64::from_ne_bytes(value))
    }
}

/// The index of interface `dev` in the calling thread's namespace.
fn ifindex(dev: &str) -> std::io::Result<u32> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socket_with};
    let sock = socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    Ok(rustix::net::netdevice::name_to_index(&sock, dev)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_the_verdicts() {
        let p = program(10_000, 3, Frames::Tcp).unwrap();
        assert_eq!(p.len(), 28);
        assert_eq!(p[DROP_AT as usize].imm, TC_ACT_SHOT);
        assert_eq!(p[PASS_AT as usize].imm, TCX_NEXT);
        for (i, ins) in p.iter().enumerate() {
            if [JNE_K, JEQ_K, JGE_K].contains(&ins.code) {
                let target = i as i16 + 1 + ins.off;
                assert!(
                    target == DROP_AT || target == PASS_AT,
                    "instruction {i} jumps to {target}"
                );
            }
        }
        assert_eq!(p[13].imm, 1_000_000, "parts per million");
        assert_eq!(p[14].imm, 10_000, "the rate");
        assert_eq!(p[16].imm, 3, "the map");
        assert_eq!(p[2].imm, i32::from(0x0800u16.to_be()), "IPv4");
        let e = program(10_000, 3, Frames::EtherType(0x88B5)).unwrap();
        assert_eq!(e.len(), p.len(), "the same offsets");
        assert_eq!(e[2].imm, i32::from(0x88B5u16.to_be()), "the EtherType");
        assert!(e[3..=11].iter().all(|i| i.code == MOV64_K), "no IP test");
        assert_eq!(e[12..], p[12..], "the same draw and verdicts");
    }

    #[test]
    fn a_rate_is_at_most_a_million_ppm() {
        assert!(program(1_000_000, 3, Frames::Tcp).is_ok());
        assert!(program(0, 3, Frames::Tcp).is_ok());
        let e = program(1_000_001, 3, Frames::Tcp).unwrap_err().to_string();
        assert!(e.contains("0 to 100"), "{e}");
        assert!(program(u32::MAX, 3, Frames::EtherType(0x88B5)).is_err());
    }

    #[test]
    fn a_device_that_is_not_there_has_no_index() {
        assert!(ifindex("softoe-nonesuch").is_err());
        assert!(ifindex("lo").is_ok_and(|i| i > 0));
    }
}
