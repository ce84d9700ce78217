//! Segment-level tests of the whole stack (STYLE.md "Testing protocol
//! behaviour"): a test plays the peer, writing TCP segments as `TcpRepr`s and
//! checking exactly which segments the stack sends back.

mod bug_classes;
mod harness;
mod idle;
mod iface;
mod ip_fields;
mod ip_frag;
mod offload;
mod pmtu;
mod tcp_basics;
mod tcp_close;
mod tcp_icmp;
mod tcp_listen;
mod tcp_loss;
mod tcp_options;
mod tcp_rack;
mod tcp_reuseport;
mod tcp_rst;
mod tcp_sink;
mod tcp_time_wait;
mod tcp_timers;
