//! Segment-level tests of the whole stack (STYLE.md "Testing protocol
//! behaviour"): a test plays the peer, writing TCP segments as `TcpRepr`s and
//! checking exactly which segments the stack sends back.

mod harness;
mod tcp_basics;
