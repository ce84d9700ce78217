//! softoe's system-call layer.
//!
//! Every crate of softoe that talks to the kernel does so through
//! [`rustix`] where rustix covers the call safely (owned descriptors,
//! epoll, eventfd, memfd, poll, affinity, namespaces, rlimits, clocks,
//! socket options), and through this crate where it does not: the
//! `bpf(2)` commands and their attribute unions, the interface ioctls
//! (`ifreq`, TUN/TAP, ethtool), AF_PACKET's rings and ancillary data,
//! shared mappings whose lifetime a type must own, and the descriptor
//! passing of the host interface's attach protocol. Each such call is
//! wrapped once here, behind a safe function whose `SAFETY:` comment
//! proves the call sound, so that the engine, the host library and the
//! testbed deny `unsafe` everywhere except the code that reads and
//! writes shared memory and the AF_XDP rings.
//!
//! Before this crate the same wrappers were written twice in places
//! (`bpf(2)` in the engine's XDP port and in the testbed's drop filter;
//! `SCM_RIGHTS`, eventfd and memfd in the engine's host interface and
//! in the host library; epoll in the bond and the host interface;
//! `ifreq` in the TAP port and the device probe).
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bpf;
pub mod event;
pub mod mem;
pub mod netif;
pub mod ns;
pub mod packet;
pub mod sched;
pub mod unix;
