//! Segment-level tests of the whole stack, in the manner of smoltcp's TCP
//! tests: a test plays the peer, writing TCP segments as `TcpRepr`s built
//! from a template (`SEND_TEMPL`), and checks exactly which segments the
//! stack sends back, on a virtual clock (no sleeps, the same run every
//! time).

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
