//! `softoe bench-servers`: the server program (see [`crate::server`]) as
//! the benchmark runs it, and the command that starts it.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};
use clap::Args;
use softoe_host::SendPolicy;

use super::WRITE;
use crate::server::{
    CHECKED_SINK, DISCARD, ECHO, Length, Listen, PATTERN_SOURCE, Policy, Program, SIZED_SINK,
    SIZED_SOURCE, SOURCE, Service, Serving, Until,
};

/// Options of the hidden `softoe bench-servers`.
#[derive(Debug, Args)]
pub struct ServersArgs {
    /// Serve on the engine attached at this socket; without it, on the
    /// kernel's TCP.
    #[arg(long)]
    engine: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long)]
    addr: Ipv4Addr,
    /// Send policy on the engine: copy, overlap or zerocopy (region
    /// buffers sent by reference, for the source).
    #[arg(long, default_value = "overlap")]
    policy: String,
    /// Serve only the scale scenario's echo (one thread waiting for every
    /// connection at once), sized for this many connections.
    #[arg(long)]
    scale: Option<usize>,
    /// On the kernel's TCP: this congestion control on every listener
    /// (and so every connection it accepts); the namespace's default when
    /// absent.
    #[arg(long)]
    cc: Option<String>,
    /// Added to every port served, so that several server programs (the
    /// bench's send policies) share one address.
    #[arg(long, default_value_t = 0)]
    port_base: u16,
}

/// What the benchmark's servers serve, each until the process is killed:
/// discard, source (as many bytes as asked, in 64 KiB writes) and echo,
/// the loss sweep's patterned source and checking sink, and the emulation's
/// sized sink and source.
fn listeners(base: u16) -> Result<Vec<Listen>> {
    let source = Service::Source {
        len: Length::Asked,
        write: WRITE,
    };
    [
        (DISCARD, Service::Discard),
        (SOURCE, source),
        (ECHO, Service::Echo),
        (PATTERN_SOURCE, Service::PatternSource),
        (CHECKED_SINK, Service::CheckedSink),
        (SIZED_SOURCE, Service::SizedSource),
        (SIZED_SINK, Service::SizedSink),
    ]
    .into_iter()
    .map(|(port, service)| {
        Ok(Listen {
            port: port.checked_add(base).ok_or_else(|| {
                anyhow::anyhow!("--port-base {base} puts port {port} above 65535")
            })?,
            service,
            conns: None,
        })
    })
    .collect()
}

/// `softoe bench-servers`: the benchmark's servers on one address until
/// killed (or their stdin closes). Prints `ready` when all listen, then
/// answers `cpu` and `conns` on stdin.
pub fn servers(args: &ServersArgs) -> Result<()> {
    let serving = match args.scale {
        Some(n) => Serving::Many(n),
        None => Serving::Each(listeners(args.port_base)?),
    };
    let policy = match (&args.engine, &serving, args.policy.as_str()) {
        (None, ..) | (_, Serving::Many(_), _) => Policy::Default,
        (Some(_), _, "copy") => Policy::Bulk(SendPolicy::Copy),
        (Some(_), _, "overlap") => Policy::Bulk(SendPolicy::Overlap),
        (Some(_), _, "zerocopy") => Policy::ZeroCopy,
        (Some(_), _, other) => bail!("--policy {other}: use copy, overlap or zerocopy"),
    };
    Program {
        engine: args.engine.clone(),
        addr: args.addr,
        cc: args.cc.clone(),
        backlog: 128,
        policy,
        serving,
        until: Until::StdinClosed,
    }
    .run()
}

/// The command that starts `softoe bench-servers`: on the engine at
/// `engine`, or on Linux in namespace `ns`.
pub(crate) fn servers_cmd(
    exe: &std::path::Path,
    engine: Option<&std::path::Path>,
    ns: &softoe_testbed::Netns,
    ip: Ipv4Addr,
    policy: &str,
) -> Command {
    let mut c = match engine {
        Some(_) => Command::new(exe),
        None => ns.command(&exe.to_string_lossy()),
    };
    c.arg("bench-servers")
        .args(["--addr", &ip.to_string(), "--policy", policy]);
    if let Some(p) = engine {
        c.arg("--engine").arg(p);
    }
    c
}
