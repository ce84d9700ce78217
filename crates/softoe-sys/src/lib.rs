//! softoe's system-call layer.
//!
//! Every crate of softoe that talks to the kernel is to do so through
//! [`rustix`] where rustix covers the call safely (owned descriptors,
//! epoll, eventfd, memfd, poll, affinity, namespaces, rlimits, clocks,
//! socket options), and through this crate where it does not: shared
//! mappings whose lifetime a type must own, and (still to move here) the
//! `bpf(2)` commands, the interface ioctls (`ifreq`, TUN/TAP, ethtool),
//! AF_PACKET's ancillary data and the host interface's descriptor
//! passing. Each such call is wrapped once, behind a safe function whose
//! `SAFETY:` comment proves the call sound, so that the engine, the host
//! library and the testbed can deny `unsafe` everywhere except the code
//! that reads and writes shared memory and the AF_XDP rings.
//!
//! Today it holds [`mem`] (sealed memfds and an owning shared mapping)
//! and [`event`] (eventfd doorbells). The migration of the consumers is
//! under way (issue 36, item 2): the same wrappers are still written
//! twice in places (`bpf(2)` in the engine's XDP port and the testbed's
//! drop filter; `SCM_RIGHTS`, eventfd and memfd in the engine's host
//! interface and the host library; epoll in the bond and the host
//! interface; `ifreq` in the TAP port and the device probe).
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod errno;
pub mod event;
pub mod forkpage;
pub mod malloc;
pub mod mem;
pub mod procvm;
pub mod sched;
pub mod signal;
