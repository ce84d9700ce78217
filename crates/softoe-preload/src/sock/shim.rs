//! The shim's process-wide state: the rules, where to attach, and the
//! attachment to the engine (made at the first socket softoe serves, and
//! made again in a child after `fork`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use softoe_host::Client;
use tracing::{debug, info};

use super::{lock, pid};
use crate::rules::Rules;

/// The shim's process-wide state.
#[derive(Debug)]
pub(crate) struct Shim {
    pub rules: Rules,
    /// Where and how to attach, read from the environment once: children
    /// may run with another (nginx clears its workers' environment).
    cfg: softoe_host::Config,
    /// The attachment (made at the first socket softoe serves), with the
    /// pid that made it.
    client: Mutex<Option<(u32, Client)>>,
    attach_failed: AtomicBool,
    /// `SOFTOE_FALLBACK=kernel`: when no engine answers, sockets go to the
    /// kernel's TCP. Otherwise they fail (`ENETDOWN`): a user who asked for
    /// softoe gets softoe or a clear failure, never Linux silently.
    pub fallback: bool,
}

static SHIM: OnceLock<Shim> = OnceLock::new();

/// The state, made at the first call.
pub(crate) fn shim() -> &'static Shim {
    SHIM.get_or_init(|| {
        init_logging();
        let rules = match Rules::from_env() {
            Ok(r) => r,
            Err(bad) => {
                crate::diag::say(&format!(
                    "softoe-preload: SOFTOE_KERNEL_NETS: {:?} is not an IPv4 network \
                     (a.b.c.d/len); write e.g. 127.0.0.0/8,10.1.0.0/16",
                    bad.0
                ));
                std::process::exit(2);
            }
        };
        debug!(?rules, "softoe-preload loaded");
        Shim {
            rules,
            cfg: softoe_host::Config::default(),
            client: Mutex::new(None),
            attach_failed: AtomicBool::new(false),
            fallback: std::env::var("SOFTOE_FALLBACK").is_ok_and(|v| v == "kernel"),
        }
    })
}

fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(|| crate::diag::Writer)
            .try_init();
    }
}

impl Shim {
    /// The attachment, made now if need be; `None` when no engine answers
    /// (the socket then stays with the kernel, and a warning says so once).
    pub(crate) fn client(&self) -> Option<Client> {
        let me = pid();
        let mut g = lock(&self.client);
        if let Some((pid, c)) = &*g {
            if *pid == me && c.is_alive() {
                return Some(c.clone());
            }
            if *pid != me {
                // Inherited across fork: the parent's. Leak our copy (its
                // drop would touch nothing shared, but its sockets would).
                if let Some(old) = g.take() {
                    std::mem::forget(old);
                }
            } else {
                *g = None;
            }
        }
        if self.attach_failed.load(Ordering::Relaxed) {
            return None;
        }
        match Client::attach_with(self.cfg.clone()) {
            Ok(c) => {
                info!(session = c.session(), "attached to the softoe engine");
                *g = Some((me, c.clone()));
                Some(c)
            }
            Err(e) => {
                let first = !self.attach_failed.swap(true, Ordering::Relaxed);
                // Said with the lock released (see `diag`).
                drop(g);
                if first {
                    crate::diag::say(&if self.fallback {
                        format!(
                            "softoe-preload: {e}; sockets go to the kernel's TCP \
                             (SOFTOE_FALLBACK=kernel)"
                        )
                    } else {
                        format!(
                            "softoe-preload: {e}; softoe sockets fail with ENETDOWN \
                             (start one with `softoe engine`, point SOFTOE_SOCKET at it, \
                             or set SOFTOE_FALLBACK=kernel to use the kernel's TCP instead)"
                        )
                    });
                }
                None
            }
        }
    }

    /// The attachment if one exists for this process (never attaches).
    pub(crate) fn client_if_attached(&self) -> Option<Client> {
        match &*lock(&self.client) {
            Some((owner, c)) if *owner == pid() => Some(c.clone()),
            _ => None,
        }
    }
}
