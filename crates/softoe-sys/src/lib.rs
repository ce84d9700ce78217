//! softoe's system-call layer.
//!
//! Every crate of softoe that talks to the kernel does so through
//! [`rustix`] where rustix covers the call safely (owned descriptors,
//! epoll, eventfd, memfd, poll, affinity, priorities, namespaces, mounts,
//! rlimits, clocks, AF_XDP's socket options), and through this crate where
//! it does not. Each such call is wrapped once, behind a safe function
//! whose `SAFETY:` comment proves the call sound, so that the engine, the
//! host library and the testbed can deny `unsafe` everywhere except the
//! code that reads and writes shared memory and the AF_XDP rings.
//!
//! It holds:
//!
//! - [`mem`]: sealed memfds and an owning shared mapping;
//! - [`event`]: eventfd doorbells, and epoll and `ppoll` over descriptors
//!   known only by number (a port's `RawFd`);
//! - [`bpf`]: the `bpf(2)` commands (maps, program load with the
//!   verifier's log, BPF links) the XDP port and the testbed's drop filter
//!   use;
//! - [`ifreq`]: the `struct ifreq` interface ioctls (index, MTU, address,
//!   flags, queue length) and the `SIOCETHTOOL` queries and offload
//!   switches;
//! - [`tun`]: the TUN/TAP ioctls;
//! - [`packet`]: AF_PACKET binding, membership, statistics, the classic
//!   BPF socket filter, and receiving with `PACKET_AUXDATA` and kernel
//!   timestamps;
//! - [`sockopt`]: int-valued socket options rustix has no function for.
//! - [`procvm`]: `process_vm_readv`/`process_vm_writev`, the host
//!   interface's reads of and writes to a program's memory;
//! - [`errno`]: the calling thread's `errno`, kept across the calls the
//!   host library makes on a program's behalf;
//! - [`signal`]: whether a signal's handler restarts interrupted calls;
//! - [`forkpage`]: a word every child process sees zeroed
//!   (`MADV_WIPEONFORK`), how the host library tells a forked child;
//! - [`sched`]: `SCHED_FIFO` for the lab's real-time sender;
//! - [`malloc`]: glibc's `mallopt` mmap threshold, fixed by the CLI.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod bpf;
pub mod errno;
pub mod event;
pub mod forkpage;
pub mod ifreq;
pub mod malloc;
pub mod mem;
pub mod packet;
pub mod procvm;
pub mod sched;
pub mod signal;
pub mod sockopt;
pub mod tun;
