//! Turning a device's offloads on and off without the `ethtool` binary:
//! the `SIOCETHTOOL` ioctl `ethtool -K` itself issues, with the kernel's
//! one-feature commands (`ETHTOOL_STSO`, `ETHTOOL_SGRO`, …).
//!
//! The ioctl names its device within the network namespace of the socket it
//! goes through, so the caller runs these on a thread inside the device's
//! namespace ([`Netns::run`](crate::Netns::run)).

use std::os::fd::OwnedFd;

use softoe_sys::ifreq::{self, IfName};

use crate::{Error, Result};

/// An offload `ethtool -K` knows by a short name, with the kernel commands
/// that read and set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Offload {
    /// `ethtool -K`'s short name.
    pub name: &'static str,
    /// The name `ethtool -k` prints.
    long: &'static str,
    get: u32,
    set: u32,
}

/// The offloads that can be switched, as `ethtool -K` names them: receive
/// and transmit checksums (`tx` is all of the transmit checksum features),
/// scatter-gather, TCP segmentation (all of its kinds), generic
/// segmentation and generic receive offload.
pub(crate) const OFFLOADS: [Offload; 6] = [
    Offload {
        name: "rx",
        long: "rx-checksumming",
        get: 0x14,
        set: 0x15,
    },
    Offload {
        name: "tx",
        long: "tx-checksumming",
        get: 0x16,
        set: 0x17,
    },
    Offload {
        name: "sg",
        long: "scatter-gather",
        get: 0x18,
        set: 0x19,
    },
    Offload {
        name: "tso",
        long: "tcp-segmentation-offload",
        get: 0x1e,
        set: 0x1f,
    },
    Offload {
        name: "gso",
        long: "generic-segmentation-offload",
        get: 0x23,
        set: 0x24,
    },
    Offload {
        name: "gro",
        long: "generic-receive-offload",
        get: 0x2b,
        set: 0x2c,
    },
];

/// Parses `ethtool -K`-style settings (`["tso", "off", "gro", "on"]`).
pub(crate) fn parse(dev: &str, settings: &[&str]) -> Result<Vec<(Offload, bool)>> {
    let bad = |why: String| Error::Command {
        cmd: format!("offloads {dev} {}", settings.join(" ")),
        stderr: why,
    };
    if settings.is_empty() || !settings.len().is_multiple_of(2) {
        return Err(bad(
            "settings come in pairs: an offload, then on or off".into()
        ));
    }
    let mut out = Vec::new();
    for pair in settings.chunks(2) {
        let (name, value) = (pair[0], pair[1]);
        let offload = OFFLOADS
            .iter()
            .find(|o| o.name == name || o.long == name)
            .ok_or_else(|| {
                bad(format!(
                    "unknown offload {name:?} (known: {})",
                    OFFLOADS.map(|o| o.name).join(", ")
                ))
            })?;
        let on = match value {
            "on" => true,
            "off" => false,
            v => return Err(bad(format!("{name} {v:?}: say on or off"))),
        };
        out.push((*offload, on));
    }
    Ok(out)
}

/// A socket to send ethtool ioctls through, in the calling thread's
/// network namespace.
fn control_socket() -> std::io::Result<OwnedFd> {
    ifreq::socket()
}

/// One ethtool command with an `ethtool_value` on `dev`; returns its data.
fn ethtool(sock: &OwnedFd, dev: &str, cmd: u32, data: u32) -> std::io::Result<u32> {
    // Room for the terminating NUL.
    if dev.is_empty() {
        return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    ifreq::ethtool_value(sock, &IfName::new(dev)?, cmd, data)
}

/// Sets the offloads of `dev` (in the calling thread's namespace), then
/// reads them back: one the kernel would not change (a feature the device
/// cannot switch, or one that needs another, as TSO needs `tx`) is an error
/// that says which.
pub(crate) fn set(dev: &str, settings: &[(Offload, bool)]) -> Result<()> {
    let fail = |what: String, source: std::io::Error| Error::Command {
        cmd: format!("offloads {dev}"),
        stderr: format!("{what}: {source}"),
    };
    let sock = control_socket().map_err(|e| fail("a socket for the ethtool ioctl".into(), e))?;
    for (o, on) in settings {
        ethtool(&sock, dev, o.set, u32::from(*on)).map_err(|e| {
            fail(
                format!("turning {} {}", o.name, if *on { "on" } else { "off" }),
                e,
            )
        })?;
    }
    for (o, on) in settings {
        let now = ethtool(&sock, dev, o.get, 0)
            .map_err(|e| fail(format!("reading {} back", o.name), e))?
            != 0;
        if now != *on {
            return Err(Error::Command {
                cmd: format!("offloads {dev}"),
                stderr: format!(
                    "{} stays {} (the device cannot switch it, or it depends on another offload)",
                    o.name,
                    if now { "on" } else { "off" }
                ),
            });
        }
    }
    Ok(())
}

/// Reads one offload of `dev` (in the calling thread's namespace).
pub(crate) fn get(dev: &str, o: Offload) -> Result<bool> {
    let fail = |source: std::io::Error| Error::Command {
        cmd: format!("offloads {dev}"),
        stderr: format!("reading {}: {source}", o.name),
    };
    let sock = control_socket().map_err(fail)?;
    Ok(ethtool(&sock, dev, o.get, 0).map_err(fail)? != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_as_ethtool_k_takes_them() {
        let s = parse("eth0", &["tso", "off", "generic-receive-offload", "on"]).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].0.name, s[0].1), ("tso", false));
        assert_eq!((s[1].0.name, s[1].1), ("gro", true));
        let e = parse("eth0", &["tso"]).unwrap_err().to_string();
        assert!(e.contains("pairs"), "{e}");
        let e = parse("eth0", &["lro", "off"]).unwrap_err().to_string();
        assert!(e.contains("unknown offload \"lro\""), "{e}");
        let e = parse("eth0", &["tso", "of"]).unwrap_err().to_string();
        assert!(e.contains("on or off"), "{e}");
        assert!(parse("eth0", &[]).is_err());
    }

    #[test]
    fn every_offload_command_takes_an_ethtool_value() {
        let sock = control_socket().unwrap();
        for o in OFFLOADS {
            for cmd in [o.get, o.set] {
                let e = ethtool(&sock, "softoe-nonesuch", cmd, 0).unwrap_err();
                assert_ne!(
                    e.kind(),
                    std::io::ErrorKind::InvalidInput,
                    "{} {cmd:#x}",
                    o.name
                );
            }
        }
        assert!(ethtool(&sock, "", OFFLOADS[0].get, 0).is_err());
        assert!(ethtool(&sock, "abcdefghijklmnop", OFFLOADS[0].get, 0).is_err());
    }
}
