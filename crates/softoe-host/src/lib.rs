//! # softoe-host: programs on the softoe engine
//!
//! A program attaches to a running engine ([`Client::attach`]) and gets a
//! shared region: its socket calls become commands on a ring the engine
//! polls, received bytes appear in per-socket rings in the region, and
//! sends either copy into a send ring (`copy`), let the engine read the
//! program's own buffer (`overlap`, by `process_vm_readv`: the host core
//! does no per-byte work), or hand the engine a region buffer by reference
//! until the peer acknowledges it ([`TcpStream::send_zerocopy`]).
//!
//! Calls block by spinning briefly and then sleeping on an eventfd the
//! engine rings only when a thread sleeps; non-blocking sockets return
//! `WouldBlock`. A thread asleep on one socket is woken by that socket
//! alone, and how long to spin is learnt per kind of wait. Readiness is
//! `poll`-style ([`Client::poll`]) and, for many sockets, a [`Selector`] whose
//! cost follows the sockets that changed (10,000 connections in one
//! thread). Errors are `io::Error`s carrying the errno Linux would give.
//!
//! Only the modules that read and write the shared region (`client`,
//! `socket::stream`) may use `unsafe`; system calls go through rustix and
//! `softoe-sys`.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! let client = softoe_host::Client::attach()?; // $SOFTOE_SOCKET
//! let mut s = client.tcp_connect("10.0.0.1:7".parse().unwrap())?;
//! s.write_all(b"hello")?;
//! let mut back = [0u8; 5];
//! s.read_exact(&mut back)?;
//! # Ok::<(), std::io::Error>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

mod alloc;
// Attaches the shared region and reads its header words directly.
#[allow(unsafe_code)]
mod client;
mod errno;
mod process;
mod select;
mod socket;
mod spin;
mod sys;

pub use client::{Armed, Client, Config, Waiter};
pub use errno::errno_of;
pub use process::process_id;
pub use select::{Event, Selector, Stamps};
pub use socket::{
    Congestion, Interest, Keepalive, Pollable, Readiness, SendPolicy, SlotState, Taken,
    TcpListener, TcpOptions, TcpReader, TcpStream, UdpSocket, ZcBuf,
};
pub use softoe_abi::TcpInfoRecord;
pub use sys::{connect as connect_seqpacket, watch_flags};
