//! What a process may do, as the kernel says now (`/proc/PID/status`): its
//! effective user and whether it may bind a service port. A leaf module:
//! the host interface (a program's `bind`) and the capture's permission
//! check ask it, and it asks nobody.

/// Process `pid`'s `/proc/PID/status` text, if it can be read.
fn status(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status")).ok()
}

/// Process `pid`'s effective user id now (`/proc/PID/status`).
pub(crate) fn effective_uid(pid: i32) -> Option<u32> {
    effective_uid_in(&status(pid)?)
}

/// Whether process `pid` has `CAP_NET_BIND_SERVICE` in its effective set
/// now (`/proc/PID/status`, `CapEff`): what Linux asks of a `bind` below
/// `ip_unprivileged_port_start`. `None`: the process cannot be looked at.
pub(crate) fn may_bind_service(pid: i32) -> Option<bool> {
    cap_net_bind_service(&status(pid)?)
}

/// The effective user id (second field of `Uid:`) of a `/proc/PID/status`
/// text.
fn effective_uid_in(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// `CAP_NET_BIND_SERVICE` (bit 10) of the `CapEff` line of a
/// `/proc/PID/status` text.
fn cap_net_bind_service(status: &str) -> Option<bool> {
    const CAP_NET_BIND_SERVICE: u32 = 10;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    let caps = u64::from_str_radix(hex, 16).ok()?;
    Some(caps >> CAP_NET_BIND_SERVICE & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capability bit is read from `CapEff` alone, as hex; a status
    /// without it, or with garbage, says nothing.
    #[test]
    fn the_bind_capability_is_bit_ten_of_the_effective_set() {
        let root = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(cap_net_bind_service(root), Some(true));
        let nobody = "CapPrm:\t000001ffffffffff\nCapEff:\t0000000000000000\n";
        assert_eq!(cap_net_bind_service(nobody), Some(false));
        assert_eq!(
            cap_net_bind_service("CapEff:\t0000000000000400\n"),
            Some(true)
        );
        assert_eq!(
            cap_net_bind_service("CapEff:\t0000000000000200\n"),
            Some(false)
        );
        assert_eq!(cap_net_bind_service("Name:\tx\n"), None);
        assert_eq!(cap_net_bind_service("CapEff:\tzz\n"), None);
    }

    /// The effective id is the second of the four `Uid:` fields (real,
    /// effective, saved, filesystem).
    #[test]
    fn the_effective_uid_is_the_second_uid_field() {
        let s = "Name:\tx\nUid:\t1000\t0\t1000\t1000\nGid:\t5\t5\t5\t5\n";
        assert_eq!(effective_uid_in(s), Some(0));
        assert_eq!(effective_uid_in("Uid:\t7\n"), None);
        assert_eq!(effective_uid_in("Gid:\t1\t2\t3\t4\n"), None);
    }

    /// This process: what `/proc` says matches the kernel's own answer.
    #[test]
    fn our_own_effective_uid_reads_back() {
        let me = std::process::id() as i32;
        assert_eq!(effective_uid(me), Some(rustix::process::geteuid().as_raw()));
        assert!(may_bind_service(me).is_some());
    }
}
